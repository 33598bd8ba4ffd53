package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/fixture"
)

// serviceOwner is a login that owns a service's tables and belongs to no
// deletion role, as a service's migration login does, with a schema of its
// own (svc) to create them in.
type serviceOwner struct {
	name string
	conn *pgx.Conn
}

// newServiceOwner creates the login and its schema svc, dropped with
// everything it owns when the test ends.
func newServiceOwner(t *testing.T, b *testBundle) serviceOwner {
	t.Helper()
	name := "cd_test_svc_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	for _, sql := range []string{
		fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD 'pw'", name),
		"CREATE SCHEMA svc AUTHORIZATION " + name,
		"GRANT USAGE ON SCHEMA svc TO community_deletion_serving, community_deletion_executor, community_deletion_operator",
		// A service's tables may name communities in a foreign key.
		"GRANT REFERENCES (id) ON community_deletion.communities TO " + name,
	} {
		require.NoError(t, b.exec(t, sql), sql)
	}
	t.Cleanup(func() {
		cleanup := context.Background()
		_, _ = b.pool.Exec(cleanup, "DROP SCHEMA IF EXISTS svc CASCADE")
		_, _ = b.pool.Exec(cleanup, "DROP OWNED BY "+name)
		_, _ = b.pool.Exec(cleanup, "DROP ROLE "+name)
	})
	return serviceOwner{name: name, conn: connectAs(t, b, name, "pw")}
}

// run runs each statement as the owner and fails the test on an error.
func (o serviceOwner) run(t *testing.T, sqls ...string) {
	t.Helper()
	for _, sql := range sqls {
		_, err := o.conn.Exec(t.Context(), sql)
		require.NoError(t, err, sql)
	}
}

// exec runs one statement as the owner and returns its error.
func (o serviceOwner) exec(t *testing.T, sql string, args ...any) error {
	t.Helper()
	_, err := o.conn.Exec(t.Context(), sql, args...)
	return err
}

// registryKeys is the registry as "schema.table/action/tenant_key", sorted.
func registryKeys(t *testing.T, b *testBundle) []string {
	t.Helper()
	rows, err := b.pool.Query(t.Context(), `SELECT table_schema || '.' || table_name || '/' || purge_action || '/' || tenant_key
		FROM community_deletion.community_scoped_tables ORDER BY 1`)
	require.NoError(t, err)
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return keys
}

// A service's own tenant key: attach takes the column's name, refuses any
// key that is not uuid in one line, records it, and the fence, the kept-row
// fence and the drift report use that column. The owner attaches; the
// serving login writes; a non-owner cannot attach.
func TestAttachWithTheServicesTenantKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	owner := newServiceOwner(t, b)
	owner.run(t,
		`CREATE TABLE svc.ws_docs (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
			workspace_id uuid NOT NULL REFERENCES community_deletion.communities (id), body text)`,
		"CREATE INDEX ON svc.ws_docs (workspace_id, id)",
		`CREATE TABLE svc.ws_audit (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
			workspace_id uuid, action text)`,
		"CREATE TABLE svc.ws_slugs (slug text PRIMARY KEY, workspace_id text NOT NULL)",
		"GRANT SELECT, INSERT, UPDATE, DELETE ON svc.ws_docs, svc.ws_audit, svc.ws_slugs TO community_deletion_serving",
	)

	// A key that is not uuid, a missing column, another owner's table.
	err := owner.exec(t, "SELECT community_deletion.attach_community_write_fence('svc.ws_slugs', 'delete', 'workspace_id')")
	requireSQLState(t, err, pgerrcode.InvalidParameterValue, "svc.ws_slugs.workspace_id is text, an text key, but the tenant key is uuid")
	err = owner.exec(t, "SELECT community_deletion.attach_community_write_fence('svc.ws_docs', 'delete', 'tenant')")
	requireSQLState(t, err, pgerrcode.InvalidParameterValue, "has no column tenant")
	serving := roleSession(t, b, fixture.RoleServing)
	_, err = serving.Exec(ctx, "SELECT community_deletion.attach_community_write_fence('svc.ws_docs', 'delete', 'workspace_id')")
	requireSQLState(t, err, pgerrcode.InsufficientPrivilege, "only its owner")

	owner.run(t,
		"SELECT community_deletion.attach_community_write_fence('svc.ws_docs', 'delete', 'workspace_id')",
		"SELECT community_deletion.attach_community_write_fence('svc.ws_audit', 'nullify', 'workspace_id')",
	)
	keys := registryKeys(t, b)
	require.Contains(t, keys, "svc.ws_docs/delete/workspace_id")
	require.Contains(t, keys, "svc.ws_audit/nullify/workspace_id")
	require.Contains(t, keys, "public.fixture_members/delete/community_id", "the two-argument call keeps its default")
	// A registration never changes its key.
	err = owner.exec(t, "SELECT community_deletion.attach_community_write_fence('svc.ws_docs', 'delete', 'id')")
	requireSQLState(t, err, pgerrcode.InvalidParameterValue, "")
	// ws_slugs still looks like tenant data: a workspace_id column that can never be a key.
	require.Equal(t, []driftRow{{"svc.ws_slugs", "unregistered: its workspace_id column is text, but the tenant key is uuid; " +
		"key it by a column of that kind, or exclude it with community_deletion.exclude_table('svc.ws_slugs', reason)"}}, drift(t, b))
	owner.run(t, "SELECT community_deletion.exclude_table('svc.ws_slugs', 'slugs are released by the service itself')")
	require.Empty(t, drift(t, b))

	active := b.createCommunity(t)
	quiescing, _ := b.communityIn(t, "quiescing")
	fenced, _ := b.communityIn(t, "fenced")
	tombstone, _ := b.communityIn(t, "tombstone")

	// The 'delete' fence reads workspace_id.
	_, err = serving.Exec(ctx, "INSERT INTO svc.ws_docs (workspace_id, body) VALUES ($1, 'a'), ($1, 'b')", active)
	require.NoError(t, err)
	for _, c := range []uuid.UUID{quiescing, fenced, tombstone} {
		_, err = serving.Exec(ctx, "INSERT INTO svc.ws_docs (workspace_id, body) VALUES ($1, 'x')", c)
		requireSQLState(t, err, sqlstateFenced, "community write to ws_docs refused")
	}
	_, err = serving.Exec(ctx, "INSERT INTO svc.ws_docs (workspace_id, body) VALUES ($1, 'x'), ($2, 'y')", active, fenced)
	requireSQLState(t, err, sqlstateFenced, "is fenced")
	tx, err := serving.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "UPDATE svc.ws_docs SET body = 'c' WHERE workspace_id = $1", active)
	requireSQLState(t, err, sqlstateIsolation, "")
	require.NoError(t, tx.Rollback(ctx))
	_, err = serving.Exec(ctx, "UPDATE svc.ws_docs SET workspace_id = $2 WHERE workspace_id = $1", active, fenced)
	requireSQLState(t, err, sqlstateFenced, "is fenced")

	// Kept rows stay unlinked: no new row, and no update, links a row to
	// a quiescing, fenced or deleted tenant; an unrelated update and a row
	// without a tenant pass; the executor clears the key.
	_, err = serving.Exec(ctx, "INSERT INTO svc.ws_audit (workspace_id, action) VALUES ($1, 'a'), (NULL, 'n')", active)
	require.NoError(t, err)
	for _, c := range []uuid.UUID{quiescing, fenced, tombstone} {
		_, err = serving.Exec(ctx, "INSERT INTO svc.ws_audit (workspace_id, action) VALUES ($1, 'late')", c)
		requireSQLState(t, err, sqlstateFenced, "kept rows stay unlinked")
		_, err = serving.Exec(ctx, "UPDATE svc.ws_audit SET workspace_id = $1 WHERE workspace_id IS NULL", c)
		requireSQLState(t, err, sqlstateFenced, "kept rows stay unlinked")
	}
	// A tenant's kept rows written while it was active, then its deletion.
	kept := b.createCommunity(t)
	_, err = serving.Exec(ctx, "INSERT INTO svc.ws_audit (workspace_id, action) SELECT $1, 'before the fence' FROM generate_series(1, 3)", kept)
	require.NoError(t, err)
	b.quiesce(t, kept)
	keptGeneration := b.fence(t, kept)
	_, err = serving.Exec(ctx, "UPDATE svc.ws_audit SET action = action || '!' WHERE workspace_id = $1", kept)
	require.NoError(t, err, "an update that leaves the key alone")
	tx, err = serving.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "INSERT INTO svc.ws_audit (workspace_id, action) VALUES ($1, 'rr')", active)
	requireSQLState(t, err, sqlstateIsolation, "")
	require.NoError(t, tx.Rollback(ctx))
	require.NoError(t, b.asExecutor(t, kept, keptGeneration, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, "UPDATE svc.ws_audit SET workspace_id = NULL WHERE workspace_id = $1", kept)
		if err == nil && tag.RowsAffected() != 3 {
			err = fmt.Errorf("cleared %d rows, want 3", tag.RowsAffected())
		}
		return err
	}))

	// The fence is checked whole against the declared key.
	require.NoError(t, b.exec(t, "DROP TRIGGER community_write_fence_update ON svc.ws_docs"))
	require.Equal(t, []driftRow{{"ws_docs", "unfenced"}}, drift(t, b))
	require.NoError(t, b.exec(t, `CREATE TRIGGER community_write_fence_update AFTER UPDATE ON svc.ws_docs
		REFERENCING OLD TABLE AS community_fence_old NEW TABLE AS community_fence_new
		FOR EACH STATEMENT EXECUTE FUNCTION community_deletion.enforce_community_write_fence()`))
	require.Equal(t, []driftRow{{"ws_docs", "unfenced"}}, drift(t, b), "a fence that reads community_id on a workspace_id table")
	require.NoError(t, b.exec(t, "DROP TRIGGER community_kept_row_fence_insert ON svc.ws_audit"))
	require.Contains(t, drift(t, b), driftRow{"ws_audit", "unfenced: no kept-row fence; run attach_community_write_fence again"})
	owner.run(t,
		"SELECT community_deletion.attach_community_write_fence('svc.ws_docs', 'delete', 'workspace_id')",
		"SELECT community_deletion.attach_community_write_fence('svc.ws_audit', 'nullify', 'workspace_id')",
	)
	require.Empty(t, drift(t, b))
}

// The service's tenant table: its owner declares it; every tenant row, old
// and new, has its lifecycle row without the service writing communities;
// the table itself is fenced and purged keyed by its id; a deleted
// tenant's id is never reused.
func TestDeclareTheServicesTenantTable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	owner := newServiceOwner(t, b)
	existing := uuid.New()
	owner.run(t,
		"CREATE TABLE svc.workspaces (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), slug text NOT NULL UNIQUE)",
		fmt.Sprintf("INSERT INTO svc.workspaces (id, slug) VALUES ('%s', 'existing')", existing),
		"CREATE TABLE svc.loose (id uuid, slug text)",
		"CREATE TABLE svc.texty (id text PRIMARY KEY)",
		"GRANT SELECT, INSERT, UPDATE, DELETE ON svc.workspaces TO community_deletion_serving",
	)
	serving := roleSession(t, b, fixture.RoleServing)
	operator := roleSession(t, b, fixture.RoleOperator)
	for _, conn := range []*pgx.Conn{serving, operator} {
		_, err := conn.Exec(ctx, "SELECT community_deletion.declare_tenant_table('svc.workspaces')")
		requireSQLState(t, err, pgerrcode.InsufficientPrivilege, "only its owner")
	}
	err := owner.exec(t, "SELECT community_deletion.declare_tenant_table('svc.loose')")
	requireSQLState(t, err, pgerrcode.InvalidParameterValue, "must be NOT NULL")
	// A text key would do, but the fixture's tables are keyed by uuid.
	err = owner.exec(t, "SELECT community_deletion.declare_tenant_table('svc.texty')")
	requireSQLState(t, err, pgerrcode.ObjectNotInPrerequisiteState, "its key is text, but tables keyed by uuid are registered already")

	owner.run(t, "SELECT community_deletion.declare_tenant_table('svc.workspaces')")
	state, _ := b.communityState(t, existing)
	require.Equal(t, "active", state, "the existing tenant is backfilled")
	var host *string
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT host FROM communities WHERE id = $1", existing).Scan(&host))
	require.Nil(t, host)
	require.Contains(t, registryKeys(t, b), "svc.workspaces/delete/id")
	var declared string
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT table_schema || '.' || table_name || '/' || key_column || '/' || declared_by
		FROM community_deletion.community_deletion_tenant_table`).Scan(&declared))
	require.Equal(t, "svc.workspaces/id/"+owner.name, declared)
	// Declaring again is idempotent; another table is refused.
	owner.run(t, "SELECT community_deletion.declare_tenant_table('svc.workspaces')")
	owner.run(t, "CREATE TABLE svc.teams (id uuid PRIMARY KEY)")
	err = owner.exec(t, "SELECT community_deletion.declare_tenant_table('svc.teams')")
	requireSQLState(t, err, pgerrcode.ObjectNotInPrerequisiteState, "svc.workspaces is the declared tenant table")

	// The service creates a tenant with its own INSERT; the serving login
	// still may not write communities itself.
	var created uuid.UUID
	require.NoError(t, serving.QueryRow(ctx, "INSERT INTO svc.workspaces (slug) VALUES ('new') RETURNING id").Scan(&created))
	state, _ = b.communityState(t, created)
	require.Equal(t, "active", state)
	_, err = serving.Exec(ctx, "INSERT INTO community_deletion.communities (id) VALUES ($1)", uuid.New())
	requireSQLState(t, err, pgerrcode.InsufficientPrivilege, "")
	// The control tables are the migrator's: no deployment login writes them.
	for _, conn := range []*pgx.Conn{serving, operator, owner.conn} {
		_, err = conn.Exec(ctx, "DELETE FROM community_deletion.community_deletion_tenant_table")
		requireSQLState(t, err, pgerrcode.InsufficientPrivilege, "")
		_, err = conn.Exec(ctx, "INSERT INTO community_deletion.community_deletion_exclusion_events (table_schema, table_name, action, reason) VALUES ('svc', 'x', 'exclude', 'r')")
		requireSQLState(t, err, pgerrcode.InsufficientPrivilege, "")
	}

	// A tenant being deleted is fenced in its own table, and a deleted
	// tenant's id is refused, never reused.
	quiesced := uuid.New()
	_, err = serving.Exec(ctx, "INSERT INTO svc.workspaces (id, slug) VALUES ($1, 'quiesced')", quiesced)
	require.NoError(t, err)
	b.quiesce(t, quiesced)
	_, err = serving.Exec(ctx, "UPDATE svc.workspaces SET slug = 'renamed' WHERE id = $1", quiesced)
	requireSQLState(t, err, sqlstateFenced, "is quiescing")
	tombstone, _ := b.communityIn(t, "tombstone")
	_, err = serving.Exec(ctx, "INSERT INTO svc.workspaces (id, slug) VALUES ($1, 'reused')", tombstone)
	requireSQLState(t, err, sqlstateFenced, "never reused")

	// Drift follows foreign keys to the tenant table under any column name,
	// and columns named like a registered key, in any schema.
	owner.run(t,
		"CREATE TABLE svc.pins (id bigint PRIMARY KEY, ws uuid NOT NULL REFERENCES svc.workspaces (id))",
		"CREATE TABLE svc.pin_notes (pin_id bigint REFERENCES svc.pins (id))",
	)
	require.Equal(t, []driftRow{{"svc.pin_notes", "unregistered"}, {"svc.pins", "unregistered"}}, drift(t, b))
	err = serving.QueryRow(ctx, "SELECT community_deletion.exclude_table('svc.pins', 'x')").Scan(new(any))
	requireSQLState(t, err, pgerrcode.InsufficientPrivilege, "only its owner")
	err = owner.exec(t, "SELECT community_deletion.exclude_table('svc.pins', ' ')")
	requireSQLState(t, err, pgerrcode.InvalidParameterValue, "give a reason")
	owner.run(t, "SELECT community_deletion.attach_community_write_fence('svc.pins', 'delete', 'ws')")
	require.Equal(t, []driftRow{{"svc.pin_notes", "unregistered"}}, drift(t, b))
	owner.run(t, "SELECT community_deletion.exclude_table('svc.pin_notes', 'notes are kept by legal hold')")
	require.Empty(t, drift(t, b))
	var excluded string
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT table_schema || '.' || table_name || '/' || reason || '/' || excluded_by
		FROM community_deletion.community_deletion_excluded_tables`).Scan(&excluded))
	require.Equal(t, "svc.pin_notes/notes are kept by legal hold/"+owner.name, excluded)
	owner.run(t, "SELECT community_deletion.include_table('svc.pin_notes', 'the hold was lifted')")
	require.Equal(t, []driftRow{{"svc.pin_notes", "unregistered"}}, drift(t, b))

	// A table of the deletion's own schema can never be registered there.
	require.NoError(t, b.exec(t, "CREATE TABLE community_deletion.ws_stray (ws uuid REFERENCES svc.workspaces (id))"))
	require.Contains(t, drift(t, b), driftRow{"community_deletion.ws_stray",
		"unregistered: it is in schema community_deletion, where no tenant table can be registered; move it to a schema of the service"})
}

// With the DDL guard installed, a table keyed by the service's own column
// is checked by that column, and a partition created later gets the fence
// that reads it: the guard lets the DDL through, the drift report stays
// empty, and the partition refuses a fenced tenant's rows (55000).
func TestDDLGuardFencesPartitionsByTheirTenantKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	installDDLGuard(t, b)
	active := b.createCommunity(t)
	for _, sql := range []string{
		`CREATE TABLE ws_events (workspace_id uuid NOT NULL REFERENCES communities (id), id bigint GENERATED ALWAYS AS IDENTITY,
			kind text NOT NULL, PRIMARY KEY (workspace_id, id)) PARTITION BY LIST (workspace_id)`,
		"GRANT SELECT, INSERT ON ws_events TO community_deletion_serving",
		"SELECT attach_community_write_fence('ws_events', 'delete', 'workspace_id')",
		fmt.Sprintf("CREATE TABLE ws_events_a PARTITION OF ws_events FOR VALUES IN ('%s')", active),
		"CREATE TABLE ws_events_rest PARTITION OF ws_events DEFAULT",
		"GRANT INSERT ON ws_events_rest TO community_deletion_serving",
	} {
		require.NoError(t, b.exec(t, sql), sql)
	}
	require.Empty(t, drift(t, b))
	var args string
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT string_agg(DISTINCT encode(tgargs, 'escape'), ',')
		FROM pg_trigger WHERE tgrelid = 'ws_events_rest'::regclass AND tgname LIKE 'community_write_fence_%' AND tgname <> 'community_write_fence_truncate'`).Scan(&args))
	require.Equal(t, `workspace_id\000`, args)
	require.NoError(t, b.execAs(t, fixture.RoleServing, "INSERT INTO ws_events (workspace_id, kind) VALUES ($1, 'k')", active))
	fenced, _ := b.communityIn(t, "fenced")
	requireSQLState(t, b.execAs(t, fixture.RoleServing, "INSERT INTO ws_events_rest (workspace_id, id, kind) VALUES ($1, 1, 'late')", fenced),
		sqlstateFenced, "community write to ws_events_rest refused")
}
