package integration

import (
	"crypto/md5"
	"fmt"
	"regexp"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/ephemeralpg"
	"github.com/tombstoneworks/communitydeletion/internal/fixture"
)

// The real-schema tenant model of migrations 00025 and 00026 (issue 22):
// tenants keyed by an integer or a text id, tables attached through their
// parents, partitions created at runtime. Every attack runs as a login a
// deployment has: the service's owner login (newServiceOwner), the serving
// login, the operator and the executor.

// setupBare gives a test its own database migrated without the fixture
// tables, whose registered uuid tables would refuse a tenant table keyed by
// anything but a uuid.
func setupBare(t *testing.T) *testBundle {
	t.Helper()
	url := ephemeralpg.NewTestDatabase(t, server, fixture.Template{})
	pool, err := pgxpool.New(t.Context(), url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return &testBundle{t: t, url: url, pool: pool, pools: map[fixture.Role]*pgxpool.Pool{}}
}

// tenantUUID is the lifecycle id of the tenant whose key's text is key, by
// the formula migration 00026 documents (the MD5 of the key after a fixed
// prefix), computed here independently of the database.
func tenantUUID(key any) uuid.UUID {
	return uuid.UUID(md5.Sum([]byte("community_deletion tenant " + fmt.Sprint(key))))
}

// walkTenant walks an active tenant's lifecycle row to state (quiescing,
// fenced or tombstone). Before the tombstone the executor runs purge, each
// statement with $1 the tenant's key, as the purge would, so that the
// tombstone proof finds no row of it.
func (b *testBundle) walkTenant(t *testing.T, key any, state string, purge ...string) uuid.UUID {
	t.Helper()
	community := tenantUUID(key)
	if state == "active" {
		return community
	}
	b.quiesce(t, community)
	if state == "quiescing" {
		return community
	}
	generation := b.fence(t, community)
	if state == "tombstone" {
		require.NoError(t, b.asExecutor(t, community, generation, func(tx pgx.Tx) error {
			for _, sql := range purge {
				if _, err := tx.Exec(t.Context(), sql, key); err != nil {
					return fmt.Errorf("%s: %w", sql, err)
				}
			}
			return nil
		}))
		b.tombstone(t, community)
	}
	got, _ := b.communityState(t, community)
	require.Equal(t, state, got)
	return community
}

// attachCall is the call a drift row's next step names.
var attachCall = regexp.MustCompile(`with (community_deletion\.attach_(?:community_write_fence|child_table)\('[^)]*\))`)

// runDriftStep runs, as owner, the attach call the drift report names for
// table, so a test proves the named call is the one that registers it.
func runDriftStep(t *testing.T, b *testBundle, owner serviceOwner, table string) {
	t.Helper()
	for _, r := range rawDrift(t, b) {
		if r.Table != table {
			continue
		}
		m := attachCall.FindStringSubmatch(r.Problem)
		require.NotNil(t, m, "drift names no attach call for %s: %s", table, r.Problem)
		owner.run(t, "SELECT "+m[1])
		return
	}
	t.Fatalf("drift does not name %s", table)
}

// tenantKeyCase is one kind of tenant key: the declared tenant table's key
// type, the types of the attached tables' account_id columns, a type of
// another kind, and the keys of the test's tenants.
type tenantKeyCase struct {
	kind      string
	tenantKey string   // svc.accounts.id
	keyTypes  []string // svc.held_<i>.account_id, held_0 with a foreign key
	wrongType string
	key       func(i int) any
}

var tenantKeyCases = []tenantKeyCase{
	{kind: "integer", tenantKey: "serial PRIMARY KEY", keyTypes: []string{"integer", "bigint", "smallint"}, wrongType: "text",
		key: func(i int) any { return 100 + i }},
	{kind: "text", tenantKey: "varchar(25) PRIMARY KEY", keyTypes: []string{"text", "varchar(25)"}, wrongType: "bigint",
		key: func(i int) any { return fmt.Sprintf("ck%023d", i) }}, // a cuid's shape: 25 characters
}

// A tenant table keyed by an integer (accounts.id serial, account_id
// integer, bigint or smallint in the other tables) or by a text id (a
// cuid; text or varchar): its existing tenants are backfilled and each new
// one gets its lifecycle row (the name-based uuid of its key, the key kept
// as text); the drift report names each table with the call that attaches
// it; the fence refuses a write of a quiescing, fenced or deleted tenant's
// row (55000) and any tenant's row at REPEATABLE READ (25000), and lets an
// active tenant's and a row of no tenant (a NULL key) through; a deleted
// tenant's key is never reused (55000); a column of another kind is refused
// at attach (22023) and named by drift; the kept-row fence and
// assert_tenant_write_allowed() take the key; neither a tenant's key nor a
// request's ever changes (23000).
func TestTenantKeyOfEveryKind(t *testing.T) {
	t.Parallel()
	for _, tc := range tenantKeyCases {
		t.Run(tc.kind, func(t *testing.T) {
			t.Parallel()
			testTenantKey(t, tc)
		})
	}
}

func testTenantKey(t *testing.T, tc tenantKeyCase) {
	b := setupBare(t)
	ctx := t.Context()
	owner := newServiceOwner(t, b)
	existing := tc.key(0)
	owner.run(t, fmt.Sprintf("CREATE TABLE svc.accounts (id %s, name text NOT NULL)", tc.tenantKey))
	require.NoError(t, owner.exec(t, "INSERT INTO svc.accounts (id, name) VALUES ($1, 'existing')", existing))
	for i, typ := range tc.keyTypes {
		ref := ""
		if i == 0 {
			ref = " REFERENCES svc.accounts (id)"
		}
		owner.run(t, fmt.Sprintf("CREATE TABLE svc.held_%d (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, account_id %s%s, body text)", i, typ, ref))
	}
	owner.run(t,
		fmt.Sprintf("CREATE TABLE svc.slugs (slug text PRIMARY KEY, account_id %s NOT NULL)", tc.wrongType),
		fmt.Sprintf("CREATE TABLE svc.audit (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, account_id %s, action text)", tc.keyTypes[0]),
		"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA svc TO community_deletion_serving",
	)
	serving := roleSession(t, b, fixture.RoleServing)

	// Declared: the existing tenant is backfilled; a new one gets its row
	// from the trigger, inserted by the serving login.
	owner.run(t, "SELECT community_deletion.declare_tenant_table('svc.accounts')")
	var kind string
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT community_deletion_tenant_key_kind()").Scan(&kind))
	require.Equal(t, tc.kind, kind)
	keys := map[string]any{}
	for i, state := range []string{"active", "quiescing", "fenced", "tombstone", "kept"} {
		keys[state] = tc.key(i + 1)
		_, err := serving.Exec(ctx, "INSERT INTO svc.accounts (id, name) VALUES ($1, $2)", keys[state], state)
		require.NoError(t, err)
	}
	for _, key := range []any{existing, keys["active"]} {
		var tenantKey, state string
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT tenant_key, deletion_state FROM communities WHERE id = $1",
			tenantUUID(key)).Scan(&tenantKey, &state))
		require.Equal(t, fmt.Sprint(key), tenantKey)
		require.Equal(t, "active", state)
	}

	// Each table is named with the call that attaches it; that call works.
	// The column of another kind is refused at attach and named by drift.
	for i := range tc.keyTypes {
		table := fmt.Sprintf("svc.held_%d", i)
		require.Contains(t, rawDrift(t, b), driftRow{table, fmt.Sprintf("unregistered: attach it by its account_id column with "+
			"community_deletion.attach_community_write_fence('%s', 'delete', 'account_id') ('nullify' to keep its rows), "+
			"or exclude it with community_deletion.exclude_table('%s', reason)", table, table)})
		runDriftStep(t, b, owner, table)
	}
	err := owner.exec(t, "SELECT community_deletion.attach_community_write_fence('svc.slugs', 'delete', 'account_id')")
	requireSQLState(t, err, pgerrcode.InvalidParameterValue,
		fmt.Sprintf("svc.slugs.account_id is %s (an %s key), but the tenant table's key is an %s key", tc.wrongType,
			map[string]string{"integer": "text", "text": "integer"}[tc.kind], tc.kind))
	owner.run(t, "SELECT community_deletion.attach_community_write_fence('svc.audit', 'nullify', 'account_id')")
	require.Equal(t, []driftRow{{"svc.slugs", fmt.Sprintf("unregistered: its account_id column is %s, but the tenant key is %s; "+
		"key it by a column of that kind, or exclude it with community_deletion.exclude_table('svc.slugs', reason)",
		tc.wrongType, tc.kind)}}, rawDrift(t, b))
	owner.run(t, "SELECT community_deletion.exclude_table('svc.slugs', 'slugs are released by the service')")
	require.Empty(t, rawDrift(t, b))

	// Rows written while every tenant was active, then the tenants walked.
	for _, state := range []string{"active", "quiescing", "fenced", "kept"} {
		for i := range tc.keyTypes {
			_, err := serving.Exec(ctx, fmt.Sprintf("INSERT INTO svc.held_%d (account_id, body) VALUES ($1, 'before'), (NULL, 'no tenant')", i), keys[state])
			require.NoError(t, err)
		}
		_, err := serving.Exec(ctx, "INSERT INTO svc.audit (account_id, action) VALUES ($1, 'before')", keys[state])
		require.NoError(t, err)
	}
	b.walkTenant(t, keys["quiescing"], "quiescing")
	b.walkTenant(t, keys["fenced"], "fenced")
	b.walkTenant(t, keys["tombstone"], "tombstone", "DELETE FROM svc.accounts WHERE id = $1")
	kept := b.walkTenant(t, keys["kept"], "fenced")

	for i := range tc.keyTypes {
		table := fmt.Sprintf("held_%d", i)
		insert := fmt.Sprintf("INSERT INTO svc.%s (account_id, body) VALUES ($1, 'late')", table)
		for _, state := range []string{"quiescing", "fenced", "tombstone"} {
			if state == "tombstone" && i == 0 {
				continue // its foreign key refuses a deleted account first
			}
			_, err := serving.Exec(ctx, insert, keys[state])
			requireSQLState(t, err, sqlstateFenced, fmt.Sprintf("community write to %s refused: community %v is %s", table, keys[state], state))
		}
		_, err := serving.Exec(ctx, insert, keys["active"])
		require.NoError(t, err, "an active tenant's row")
		_, err = serving.Exec(ctx, insert, nil)
		require.NoError(t, err, "a row of no tenant")
		_, err = serving.Exec(ctx, fmt.Sprintf("INSERT INTO svc.%s (account_id, body) VALUES ($1, 'a'), (NULL, 'n'), ($1, 'b')", table), keys["active"])
		require.NoError(t, err, "an active tenant's rows and a row of no tenant")
		_, err = serving.Exec(ctx, fmt.Sprintf("INSERT INTO svc.%s (account_id, body) VALUES ($1, 'a'), ($2, 'b')", table), keys["active"], keys["fenced"])
		requireSQLState(t, err, sqlstateFenced, fmt.Sprintf("community %v is fenced", keys["fenced"]))
		_, err = serving.Exec(ctx, fmt.Sprintf("UPDATE svc.%s SET account_id = $2 WHERE account_id = $1", table), keys["active"], keys["fenced"])
		requireSQLState(t, err, sqlstateFenced, fmt.Sprintf("community %v is fenced", keys["fenced"]))
		_, err = serving.Exec(ctx, fmt.Sprintf("UPDATE svc.%s SET account_id = $1 WHERE account_id IS NULL", table), keys["quiescing"])
		requireSQLState(t, err, sqlstateFenced, fmt.Sprintf("community %v is quiescing", keys["quiescing"]))
		_, err = serving.Exec(ctx, fmt.Sprintf("UPDATE svc.%s SET body = 'edited' WHERE account_id = $1", table), keys["fenced"])
		requireSQLState(t, err, sqlstateFenced, fmt.Sprintf("community %v is fenced", keys["fenced"]))
		_, err = serving.Exec(ctx, fmt.Sprintf("DELETE FROM svc.%s WHERE account_id = $1", table), keys["quiescing"])
		requireSQLState(t, err, sqlstateFenced, fmt.Sprintf("community %v is quiescing", keys["quiescing"]))
		_, err = serving.Exec(ctx, fmt.Sprintf("UPDATE svc.%s SET body = 'edited' WHERE account_id IS NULL", table))
		require.NoError(t, err, "rows of no tenant")

		tx, err := serving.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
		require.NoError(t, err)
		_, err = tx.Exec(ctx, insert, keys["active"])
		requireSQLState(t, err, sqlstateIsolation, "pins a snapshot")
		require.NoError(t, tx.Rollback(ctx))
	}

	// The tenant table is fenced by its own key, and a deleted tenant's key
	// is never reused.
	_, err = serving.Exec(ctx, "UPDATE svc.accounts SET name = 'renamed' WHERE id = $1", keys["fenced"])
	requireSQLState(t, err, sqlstateFenced, fmt.Sprintf("community write to accounts refused: community %v is fenced", keys["fenced"]))
	_, err = serving.Exec(ctx, "INSERT INTO svc.accounts (id, name) VALUES ($1, 'reused')", keys["tombstone"])
	requireSQLState(t, err, sqlstateFenced, "a deleted tenant's key is never reused")
	_, err = serving.Exec(ctx, "UPDATE svc.accounts SET name = 'renamed' WHERE id = $1", keys["active"])
	require.NoError(t, err)

	// Kept rows stay unlinked from a tenant being deleted; the executor
	// clears the key of its tenant's kept rows.
	for _, state := range []string{"quiescing", "fenced", "tombstone"} {
		_, err = serving.Exec(ctx, "INSERT INTO svc.audit (account_id, action) VALUES ($1, 'late')", keys[state])
		requireSQLState(t, err, sqlstateFenced, "kept rows stay unlinked")
	}
	_, err = serving.Exec(ctx, "INSERT INTO svc.audit (account_id, action) VALUES ($1, 'ok'), (NULL, 'none')", keys["active"])
	require.NoError(t, err)
	_, generation := b.communityState(t, kept)
	require.NoError(t, b.asExecutor(t, kept, generation, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, "UPDATE svc.audit SET account_id = NULL WHERE account_id = $1", keys["kept"])
		if err == nil && tag.RowsAffected() != 1 {
			err = fmt.Errorf("cleared %d rows, want 1", tag.RowsAffected())
		}
		return err
	}))

	// The explicit admission takes the key as text.
	_, err = serving.Exec(ctx, "SELECT community_deletion.assert_tenant_write_allowed($1)", fmt.Sprint(keys["active"]))
	require.NoError(t, err)
	for _, state := range []string{"quiescing", "fenced", "tombstone"} {
		_, err = serving.Exec(ctx, "SELECT community_deletion.assert_tenant_write_allowed($1)", fmt.Sprint(keys[state]))
		requireSQLState(t, err, sqlstateFenced, "")
	}
	tx, err := serving.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "SELECT community_deletion.assert_tenant_write_allowed($1)", fmt.Sprint(keys["active"]))
	requireSQLState(t, err, sqlstateIsolation, "")
	require.NoError(t, tx.Rollback(ctx))
	if tc.kind == "integer" {
		_, err = serving.Exec(ctx, "SELECT community_deletion.assert_tenant_write_allowed('not-a-number')")
		requireSQLState(t, err, sqlstateFenced, "is not a tenant key of this deployment's kind (integer)")
	}

	// A tenant's key never changes; a request's is its community's, set at
	// submission (whatever the operator writes) and never changed.
	fenced := tenantUUID(keys["fenced"])
	_, generation = b.communityState(t, fenced)
	err = b.asExecutor(t, fenced, generation, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "UPDATE communities SET tenant_key = $2 WHERE id = $1", fenced, fmt.Sprint(keys["active"]))
		return err
	})
	requireSQLState(t, err, sqlstateIntegrity, "its tenant key never changes")
	request, _ := b.openRequest(t, fenced)
	var requestKey string
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT community_tenant_key FROM community_deletion_requests WHERE id = $1", request).Scan(&requestKey))
	require.Equal(t, fmt.Sprint(keys["fenced"]), requestKey)
	active := tenantUUID(keys["active"])
	var submitted uuid.UUID
	var forged string
	require.NoError(t, b.as(fixture.RoleOperator).QueryRow(ctx, `INSERT INTO community_deletion_requests (community_id, requested_by, community_tenant_key)
		VALUES ($1, 'requester', $2) RETURNING id, community_tenant_key`, active, fmt.Sprint(keys["fenced"])).Scan(&submitted, &forged))
	require.Equal(t, fmt.Sprint(keys["active"]), forged, "a request's key is its community's")
	// (The operator's one change of a submitted request is its freeze.)
	err = b.execAs(t, fixture.RoleOperator, `UPDATE community_deletion_requests
		SET stage = 'inventoried', schema_manifest = '{}', storage_manifest = '{}', inventory_manifest = '{}',
		    inventory_digest = $3, inventory_frozen_at = now(), community_tenant_key = $2
		WHERE id = $1`, submitted, fmt.Sprint(keys["fenced"]), testDigest(submitted.String()))
	requireSQLState(t, err, sqlstateIntegrity, "never change")
	err = b.execAs(t, fixture.RoleExecutor, "UPDATE community_deletion_requests SET community_tenant_key = $2 WHERE id = $1", request, fmt.Sprint(keys["active"]))
	requireSQLState(t, err, sqlstateIntegrity, "never change")
}
