package integration

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	communitydeletion "github.com/tombstoneworks/communitydeletion"
	"github.com/tombstoneworks/communitydeletion/internal/fixture"
)

// fenceBranches is what the first line of the write fence's body says it
// was specialized for (migration 00040).
type fenceBranches struct {
	Keys     []string `json:"keys"`
	Children []string `json:"children"`
}

// fenceBody returns the write fence's body as the catalog holds it.
func fenceBody(t *testing.T, b *testBundle) string {
	t.Helper()
	var body string
	require.NoError(t, b.pool.QueryRow(t.Context(),
		"SELECT prosrc FROM pg_proc WHERE oid = 'community_deletion.enforce_community_write_fence()'::regprocedure").Scan(&body))
	return body
}

// specializedFor parses the branches the fence's first line names.
func specializedFor(t *testing.T, b *testBundle) fenceBranches {
	t.Helper()
	const prefix = "\n-- fence specialized for: "
	body := fenceBody(t, b)
	require.True(t, strings.HasPrefix(body, prefix), "the fence's body starts with its header: %.80q", body)
	header, _, found := strings.Cut(strings.TrimPrefix(body, prefix), "\n")
	require.True(t, found)
	var branches fenceBranches
	require.NoError(t, json.Unmarshal([]byte(header), &branches), header)
	return branches
}

// unspecializeFence puts back the body the migrations installed, which a
// specialized fence normalizes to; the generic code then serves every
// table until the next arm.
func unspecializeFence(t *testing.T, b *testBundle) {
	t.Helper()
	var body string
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT community_deletion.community_deletion_fence_normalized(prosrc)
		FROM pg_proc WHERE oid = 'community_deletion.enforce_community_write_fence()'::regprocedure`).Scan(&body))
	require.NoError(t, b.exec(t, "CREATE OR REPLACE FUNCTION community_deletion.enforce_community_write_fence() RETURNS trigger LANGUAGE plpgsql AS $fence$"+body+"$fence$"))
	require.Equal(t, fenceBranches{}, specializedFor(t, b))
}

// breakFenceRegions rewrites the specializer's generator, replacing from
// (which must occur once) with to, so that the next arm writes branches
// that are wrong in that way.
func breakFenceRegions(t *testing.T, b *testBundle, from, to string) {
	t.Helper()
	var def string
	require.NoError(t, b.pool.QueryRow(t.Context(),
		"SELECT pg_get_functiondef('community_deletion.community_deletion_fence_regions(jsonb)'::regprocedure)").Scan(&def))
	require.Equal(t, 1, strings.Count(def, from), "the generator's text: %q", from)
	require.NoError(t, b.exec(t, strings.Replace(def, from, to, 1)))
}

// childArgs returns a child table's second fence argument, its paths.
func childArgs(t *testing.T, b *testBundle, table string) string {
	t.Helper()
	var args []string
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT string_to_array(encode(tgargs, 'escape'), '\000')
		FROM pg_trigger WHERE tgrelid = $1::regclass AND tgname = 'community_write_fence_insert'`, table).Scan(&args))
	require.Equal(t, "through", args[0])
	return args[1]
}

// When a deletion arms the fence, its body gains a static branch for each
// table with a bound fence: the key column of a table keyed by the
// tenant's key, and the paths of a child table whose every path is one
// step. A table whose fence is not bound gets none. The drift report
// (read as the operator) sees the specialized body as the installed one,
// a table attached while armed gets its branch at the next arm, and a
// service login may not run the specializer.
func TestArmingSpecializesTheFenceForItsTables(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setupBare(t)
	owner := newServiceOwner(t, b)
	owner.run(t,
		"CREATE TABLE svc.accounts (id bigint PRIMARY KEY)",
		"CREATE TABLE svc.projects (id bigint PRIMARY KEY, account_id bigint NOT NULL REFERENCES svc.accounts (id))",
		"CREATE TABLE svc.tags (id bigint PRIMARY KEY, owner_account bigint NOT NULL REFERENCES svc.accounts (id))",
		`CREATE TABLE svc.project_tags (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
			project_id bigint NOT NULL REFERENCES svc.projects (id), tag_id bigint REFERENCES svc.tags (id))`,
		// No foreign key: its fence is not bound, so it has no path 0.
		"CREATE TABLE svc.audit (id bigint PRIMARY KEY, account_id bigint)",
		"SELECT community_deletion.declare_tenant_table('svc.accounts')",
		"SELECT community_deletion.attach_community_write_fence('svc.projects', 'delete', 'account_id')",
		"SELECT community_deletion.attach_community_write_fence('svc.tags', 'delete', 'owner_account')",
		"SELECT community_deletion.attach_child_table('svc.project_tags')",
		"SELECT community_deletion.attach_community_write_fence('svc.audit', 'delete', 'account_id')",
		"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA svc TO community_deletion_serving")
	serving := roleSession(t, b, fixture.RoleServing)
	_, err := serving.Exec(ctx, "INSERT INTO svc.accounts (id) VALUES (1), (2), (3)")
	require.NoError(t, err)
	require.Equal(t, fenceBranches{}, specializedFor(t, b), "no deletion has armed the fence yet")

	b.walkTenant(t, 2, "quiescing")
	require.Equal(t, fenceBranches{
		Keys:     []string{"account_id", "owner_account"},
		Children: []string{childArgs(t, b, "svc.project_tags")},
	}, specializedFor(t, b))
	body := fenceBody(t, b)
	require.Contains(t, body, "SELECT pg_catalog.bit_or(community_deletion.community_deletion_fence_key_bit(n.owner_account::pg_catalog.text)) INTO bits")
	require.Contains(t, body, "FROM svc.tags p WHERE p.id OPERATOR(pg_catalog.=) ANY (SELECT n.tag_id FROM community_fence_new n)")
	require.Contains(t, body, "FROM community_fence_old w JOIN svc.projects p ON p.id OPERATOR(pg_catalog.=) w.project_id")
	require.Empty(t, rawDrift(t, b))
	var drift int
	require.NoError(t, b.as(fixture.RoleOperator).QueryRow(ctx, "SELECT count(*) FROM community_deletion.community_deletion_catalog_drift()").Scan(&drift))
	require.Zero(t, drift, "the operator's drift report normalizes the body too")

	_, err = serving.Exec(ctx, "SELECT community_deletion.community_deletion_fence_specialize()")
	requireSQLState(t, err, pgerrcode.InsufficientPrivilege, "permission denied")

	// Attached while armed: the generic code serves it until the next arm.
	owner.run(t, "CREATE TABLE svc.late (id bigint PRIMARY KEY, late_account bigint NOT NULL REFERENCES svc.accounts (id))",
		"GRANT SELECT, INSERT, UPDATE, DELETE ON svc.late TO community_deletion_serving",
		"SELECT community_deletion.attach_community_write_fence('svc.late', 'delete', 'late_account')")
	require.NotContains(t, specializedFor(t, b).Keys, "late_account")
	b.walkTenant(t, 3, "quiescing")
	require.NotContains(t, specializedFor(t, b).Keys, "late_account", "a second deletion finds the fence armed already")
	require.Empty(t, rawDrift(t, b))
}

// A specialized body is held to what the generator writes: a branch changed
// by hand, or a header naming branches the body lacks, is drift
// (function_changed), and the specializer does not build on it. With the DDL
// guard installed, the deletion's arm specializes the fence, and the same
// tampering is refused as the command ends. The tamperer is the schema's
// owner, a login that owns the fence as a deployment's migrating role does;
// the service login that owns the tenant tables may not replace the fence
// at all.
func TestSpecializedFenceIsHeldToItsGenerator(t *testing.T) {
	t.Parallel()
	for _, guard := range []bool{false, true} {
		name := "drift"
		if guard {
			name = "the DDL guard"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			d := newBoundDeployment(t)
			b := d.b
			password := schemaOwnerLogin + "-password"
			handSchemaTo(t, b, schemaOwnerLogin, password,
				"ALTER FUNCTION community_deletion.enforce_community_write_fence() OWNER TO "+schemaOwnerLogin,
				"SELECT community_deletion.community_deletion_seal_functions()")
			if guard {
				installDDLGuard(t, b)
			}
			url, err := fixture.LoginConnString(b.url, schemaOwnerLogin, password)
			require.NoError(t, err)
			schemaOwner, err := pgxpool.New(t.Context(), url)
			require.NoError(t, err)
			t.Cleanup(schemaOwner.Close)
			require.Empty(t, rawDrift(t, b))
			b.walkTenant(t, 2, "quiescing")
			branches := specializedFor(t, b)
			require.NotEmpty(t, branches.Keys, "the arm specialized the fence")
			require.Empty(t, rawDrift(t, b))
			body := fenceBody(t, b)
			const create = "CREATE OR REPLACE FUNCTION community_deletion.enforce_community_write_fence() RETURNS trigger LANGUAGE plpgsql AS $fence$"
			replace := func(body string) error {
				_, err := schemaOwner.Exec(t.Context(), create+body+"$fence$")
				return err
			}
			requireSQLState(t, d.owner.exec(t, create+body+"$fence$"), pgerrcode.InsufficientPrivilege, "permission denied for schema community_deletion")

			branch := "SELECT pg_catalog.bit_or(community_deletion.community_deletion_fence_key_bit(n." + branches.Keys[0] + "::pg_catalog.text)) INTO bits"
			require.Equal(t, 1, strings.Count(body, branch))
			for _, tampered := range []string{
				strings.Replace(body, branch, "SELECT 0 INTO bits", 1),
				strings.Replace(body, `"keys": [`, `"keys": ["planted", `, 1),
			} {
				err := replace(tampered)
				if guard {
					requireSQLState(t, err, pgerrcode.InsufficientPrivilege, "enforce_community_write_fence()")
					require.Equal(t, body, fenceBody(t, b), "refused, the body is unchanged")
					continue
				}
				require.NoError(t, err)
				require.Equal(t, []driftRow{{Table: "enforce_community_write_fence()", Problem: "function_changed"}}, rawDrift(t, b))
				var replaced bool
				require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT community_deletion.community_deletion_fence_specialize()").Scan(&replaced))
				require.False(t, replaced, "the specializer does not build on a changed body")
				require.Equal(t, tampered, fenceBody(t, b))
				require.NoError(t, replace(body))
				require.Empty(t, rawDrift(t, b))
			}
			// The installed body, unspecialized, passes the guard too.
			unspecializeFence(t, b)
			require.Empty(t, rawDrift(t, b))
			var replaced bool
			require.NoError(t, pgx.BeginFunc(t.Context(), b.pool, func(tx pgx.Tx) error {
				return tx.QueryRow(t.Context(), "SELECT community_deletion.community_deletion_fence_specialize()").Scan(&replaced)
			}))
			require.True(t, replaced)
			require.Equal(t, body, fenceBody(t, b), "specializing again writes the same body")
		})
	}
}

// The DDL guard's copies of the generator and of the normalization agree
// with the migrations' for every shape of branch, a column name that needs
// quoting, a child spec the generator skips, and a body changed by hand.
func TestDDLGuardSpecializesTheFenceAsTheMigrationsDo(t *testing.T) {
	t.Parallel()
	d := newBoundDeployment(t)
	b := d.b
	installDDLGuard(t, b)
	b.walkTenant(t, 2, "quiescing")
	specialized := specializedFor(t, b)
	require.NotEmpty(t, specialized.Children)
	body := fenceBody(t, b)
	for _, branches := range []string{
		`{}`,
		`{"keys": ["account_id", "Weird \"Col\""]}`,
		`{"children": [` + strings.Join(func() []string {
			quoted := make([]string, 0, len(specialized.Children)+1)
			for _, c := range specialized.Children {
				j, err := json.Marshal(c)
				require.NoError(t, err)
				quoted = append(quoted, string(j))
			}
			return append(quoted, `"{\"paths\": [{\"hops\": [{\"schema\": \"svc\"}, {\"schema\": \"svc\"}]}]}"`)
		}(), ", ") + `]}`,
	} {
		var agree bool
		require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT community_deletion.community_deletion_fence_regions($1::jsonb)
			= community_deletion.community_deletion_ddl_guard_fence_regions($1::jsonb)`, branches).Scan(&agree))
		require.True(t, agree, branches)
	}
	for _, candidate := range []string{
		body,
		strings.Replace(body, "INTO bits", "INTO marker", 1),
		strings.Replace(body, "-- fence specialized for: {", "-- fence specialized for: {\"keys\": [\"x\"], ", 1),
		"\n-- fence specialized for: not json\nBEGIN RETURN NULL; END",
	} {
		var agree bool
		require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT community_deletion.community_deletion_fence_normalized($1)
			= community_deletion.community_deletion_ddl_guard_fence_normalized($1)`, candidate).Scan(&agree))
		require.True(t, agree, "%.120q", candidate)
	}
}

// The branches fit a budget: each session compiles the whole body once per
// trigger, so with many child tables only the most written shapes get one,
// and the body stays within the generic body plus 24 kB.
func TestSpecializationKeepsToItsBudgetMostWrittenFirst(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	b := setupBare(t)
	owner := newServiceOwner(t, b)
	const tables = 40
	owner.run(t, "CREATE TABLE svc.accounts (id bigint PRIMARY KEY)",
		"CREATE TABLE svc.projects (id bigint PRIMARY KEY, account_id bigint NOT NULL REFERENCES svc.accounts (id))",
		"SELECT community_deletion.declare_tenant_table('svc.accounts')",
		"SELECT community_deletion.attach_community_write_fence('svc.projects', 'delete', 'account_id')")
	for i := range tables {
		owner.run(t, fmt.Sprintf("CREATE TABLE svc.child%02d (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, project%02d bigint NOT NULL REFERENCES svc.projects (id))", i, i),
			fmt.Sprintf("SELECT community_deletion.attach_child_table('svc.child%02d')", i))
	}
	owner.run(t, "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA svc TO community_deletion_serving")
	generic := len(fenceBody(t, b))
	serving := roleSession(t, b, fixture.RoleServing)
	_, err := serving.Exec(ctx, "INSERT INTO svc.accounts VALUES (1), (2), (3)")
	require.NoError(t, err)
	_, err = serving.Exec(ctx, "INSERT INTO svc.projects VALUES (1, 1), (2, 2), (3, 3)")
	require.NoError(t, err)
	// The last child by name is the most written.
	_, err = serving.Exec(ctx, fmt.Sprintf("INSERT INTO svc.child%02d (project%02d) SELECT 1 FROM generate_series(1, 100)", tables-1, tables-1))
	require.NoError(t, err)
	_, err = serving.Exec(ctx, "SELECT pg_stat_force_next_flush()")
	require.NoError(t, err)
	_, err = serving.Exec(ctx, "SELECT 1")
	require.NoError(t, err)

	b.walkTenant(t, 2, "quiescing")
	branches := specializedFor(t, b)
	require.Equal(t, []string{"account_id"}, branches.Keys)
	require.NotEmpty(t, branches.Children)
	require.Less(t, len(branches.Children), tables, "not every child fits")
	require.Equal(t, childArgs(t, b, fmt.Sprintf("svc.child%02d", tables-1)), branches.Children[0], "the most written first")
	require.LessOrEqual(t, len(fenceBody(t, b)), generic+24576, "the budget")
	require.Empty(t, rawDrift(t, b))
}

// A DDL guard that does not allow the specialization (one installed before
// migration 00040 did not) refuses the body's replacement; the deletion
// still leaves active, with the generic body, and nothing is drift. Here
// the guard's copy of the generator is made to disagree, so that it takes
// every specialized body for a changed one.
func TestAnOlderDDLGuardLeavesTheFenceGeneric(t *testing.T) {
	t.Parallel()
	d := newBoundDeployment(t)
	b := d.b
	install, _ := communitydeletion.DDLGuard()
	const header = "'-- fence specialized for: {}'"
	require.Equal(t, 1, strings.Count(install, header), "the guard's normalization puts the header back")
	require.NoError(t, b.exec(t, strings.Replace(install, header, "'-- not the header'", 1)))

	walked := b.walkTenant(t, 2, "quiescing")
	state, _ := b.communityState(t, walked)
	require.Equal(t, "quiescing", state, "the deletion left active")
	require.Equal(t, fenceBranches{}, specializedFor(t, b), "the guard refused the specialization")
	require.False(t, dormant(t, b), "the fence is armed")
	require.Empty(t, rawDrift(t, b))
}
