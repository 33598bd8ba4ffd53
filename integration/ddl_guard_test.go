package integration

import (
	"context"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	communitydeletion "github.com/tombstoneworks/communitydeletion"
	"github.com/tombstoneworks/communitydeletion/internal/fixture"
)

// The DDL guard's own attack suite: each attack runs as a non-superuser
// login that owns a registered tenant table (the service, which may also
// CREATE in the schema of communities), with the guard installed by the
// superuser. Each asserts the refusal's SQLSTATE and that nothing changed.

// schemaDestructionLockKey is community_schema_destruction_lock_key().
const schemaDestructionLockKey = 7161976178216365409

// guardedAsOwner installs the DDL guard and hands fixture_messages and
// fixture_activity (with its partition) to the service login, as a
// deployment whose service owns its tenant tables.
func guardedAsOwner(t *testing.T) *testBundle {
	t.Helper()
	b := setup(t)
	b.as(fixture.RoleServing) // creates the login
	for _, sql := range []string{
		"ALTER TABLE fixture_messages OWNER TO " + string(fixture.RoleServing),
		"ALTER TABLE fixture_activity OWNER TO " + string(fixture.RoleServing),
		"ALTER TABLE fixture_activity_default OWNER TO " + string(fixture.RoleServing),
	} {
		require.NoError(t, b.exec(t, sql), sql)
	}
	installDDLGuard(t, b)
	return b
}

// execInRun runs statements as the superuser (the schema's owner in these
// tests) inside a migration run of the DDL guard, as the deployment's
// migrations would.
func (b *testBundle) execInRun(t *testing.T, statements ...string) {
	t.Helper()
	conn, err := b.pool.Acquire(t.Context())
	require.NoError(t, err)
	defer conn.Release()
	statements = append(append([]string{"SELECT community_deletion.community_deletion_ddl_guard_open_run()"}, statements...),
		"SELECT community_deletion.community_deletion_ddl_guard_close_run()")
	for _, sql := range statements {
		_, err := conn.Exec(t.Context(), sql)
		require.NoError(t, err, sql)
	}
}

// triggerSnapshot is every non-internal trigger of relation, whole: name,
// events, enabled state, WHEN clause, column list and function.
func triggerSnapshot(t *testing.T, b *testBundle, relation string) string {
	t.Helper()
	var snapshot string
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT coalesce(string_agg(
			concat_ws(' ', tgname, tgtype, tgenabled, tgqual, tgattr::text, tgfoid::regprocedure::text), E'\n' ORDER BY tgname), '')
		FROM pg_trigger WHERE tgrelid = $1::regclass AND NOT tgisinternal`, relation).Scan(&snapshot))
	return snapshot
}

// The exemption for migration runs is the schema owner's, not the lock's:
// a table owner who takes the schema-destruction lock, exactly as a
// migration run does, is refused like any other session; the schema's owner
// is refused too until it opens a run, and may change the schema in one.
func TestDDLGuardExemptsOnlyTheSchemaOwnersMigrationRun(t *testing.T) {
	t.Parallel()
	b := guardedAsOwner(t)
	ctx := t.Context()
	before := triggerSnapshot(t, b, "fixture_messages")

	conn, err := b.as(fixture.RoleServing).Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, "SELECT pg_advisory_lock($1)", int64(schemaDestructionLockKey))
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "ALTER TABLE fixture_messages DISABLE TRIGGER community_write_fence_insert")
	requireSQLState(t, err, pgerrcode.InsufficientPrivilege, "DDL refused: ")
	_, err = conn.Exec(ctx, "SELECT pg_advisory_unlock($1)", int64(schemaDestructionLockKey))
	require.NoError(t, err)
	require.Equal(t, before, triggerSnapshot(t, b, "fixture_messages"))
	require.Empty(t, drift(t, b))

	// The schema's owner (here the superuser who migrated) in a migration
	// run it opened may change what it installed; the lock is not needed.
	owner, err := b.pool.Acquire(ctx)
	require.NoError(t, err)
	defer owner.Release()
	_, err = owner.Exec(ctx, "ALTER TABLE fixture_messages DISABLE TRIGGER community_write_fence_insert")
	requireSQLState(t, err, pgerrcode.InsufficientPrivilege, "DDL refused: ")
	_, err = owner.Exec(ctx, "SELECT community_deletion.community_deletion_ddl_guard_open_run()")
	require.NoError(t, err)
	_, err = owner.Exec(ctx, "ALTER TABLE fixture_messages DISABLE TRIGGER community_write_fence_insert")
	require.NoError(t, err, "allowed inside the owner's migration run")
	_, err = owner.Exec(ctx, "ALTER TABLE fixture_messages ENABLE TRIGGER community_write_fence_insert")
	require.NoError(t, err)
	_, err = owner.Exec(ctx, "SELECT community_deletion.community_deletion_ddl_guard_close_run()")
	require.NoError(t, err)
	require.Equal(t, before, triggerSnapshot(t, b, "fixture_messages"))
}

// A role that may CREATE in the schema of communities plants functions
// that match the guard's calls better than pg_catalog's (an oid argument
// where pg_catalog takes regclass, text where it takes name): the guard,
// which runs as a superuser, never runs them.
func TestDDLGuardRunsNoPlantedFunction(t *testing.T) {
	t.Parallel()
	b := guardedAsOwner(t)
	require.NoError(t, b.exec(t, "GRANT CREATE ON SCHEMA public TO "+string(fixture.RoleServing)))
	planted := []string{
		`CREATE FUNCTION public.pg_partition_tree(oid)
			RETURNS TABLE (relid regclass, parentrelid regclass, isleaf boolean, level integer)
			LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'planted pg_partition_tree ran as %', current_user; END $$`,
		`CREATE FUNCTION public.pg_has_role(oid, text, text) RETURNS boolean
			LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'planted pg_has_role ran as %', current_user; END $$`,
		`CREATE FUNCTION public.format(text, name) RETURNS text
			LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'planted format ran as %', current_user; END $$`,
	}
	service := b.as(fixture.RoleServing)
	for _, sql := range planted {
		_, err := service.Exec(t.Context(), sql)
		require.NoError(t, err, "the guard ran a planted function when the next one was created")
	}
	// Ordinary DDL passes the guard; the tampering it refuses is refused by
	// the guard's own check, not by a planted function.
	_, err := service.Exec(t.Context(), "CREATE INDEX fixture_messages_body_idx ON fixture_messages (body)")
	require.NoError(t, err)
	before := triggerSnapshot(t, b, "fixture_messages")
	_, err = service.Exec(t.Context(), "ALTER TABLE fixture_messages ENABLE ROW LEVEL SECURITY")
	requireSQLState(t, err, pgerrcode.InsufficientPrivilege, "public.fixture_messages row_security")
	_, err = service.Exec(t.Context(), "ALTER TABLE fixture_messages DISABLE TRIGGER community_write_fence_delete")
	requireSQLState(t, err, pgerrcode.InsufficientPrivilege, "public.fixture_messages unfenced")
	require.Equal(t, before, triggerSnapshot(t, b, "fixture_messages"))
	var secured bool
	require.NoError(t, b.pool.QueryRow(t.Context(),
		"SELECT relrowsecurity FROM pg_class WHERE oid = 'fixture_messages'::regclass").Scan(&secured))
	require.False(t, secured)
}

// A fence is checked whole, whichever command changes it: a fence trigger
// re-created with a WHEN clause, for a column list or another event,
// disabled, firing only for replication sessions, or dropped from a
// partition is refused as the table's owner issues it, and the triggers
// stay as they were.
func TestDDLGuardChecksFencesWhole(t *testing.T) {
	t.Parallel()
	b := guardedAsOwner(t)
	service := b.as(fixture.RoleServing)
	for _, tc := range []struct {
		name, table, sql string
	}{
		{"a WHEN clause that exempts one application", "fixture_messages",
			`CREATE OR REPLACE TRIGGER community_write_fence_insert AFTER INSERT ON fixture_messages
				REFERENCING NEW TABLE AS community_fence_new FOR EACH STATEMENT
				WHEN (current_setting('application_name') <> 'backdoor') EXECUTE FUNCTION enforce_community_write_fence()`},
		{"a WHEN clause on a partition", "fixture_activity_default",
			`CREATE OR REPLACE TRIGGER community_write_fence_delete AFTER DELETE ON fixture_activity_default
				REFERENCING OLD TABLE AS community_fence_old FOR EACH STATEMENT
				WHEN (false) EXECUTE FUNCTION enforce_community_write_fence()`},
		{"an update fence for one column only", "fixture_messages",
			`CREATE OR REPLACE TRIGGER community_write_fence_update AFTER UPDATE OF body ON fixture_messages
				FOR EACH STATEMENT EXECUTE FUNCTION enforce_community_write_fence()`},
		{"the insert fence replaced by a second delete fence", "fixture_messages",
			`CREATE OR REPLACE TRIGGER community_write_fence_insert AFTER DELETE ON fixture_messages
				REFERENCING OLD TABLE AS community_fence_old FOR EACH STATEMENT
				EXECUTE FUNCTION enforce_community_write_fence()`},
		{"a disabled fence trigger", "fixture_messages",
			"ALTER TABLE fixture_messages DISABLE TRIGGER community_write_fence_update"},
		{"a fence firing for replication sessions only", "fixture_activity_default",
			"ALTER TABLE fixture_activity_default ENABLE REPLICA TRIGGER community_write_fence_insert"},
		{"a fence trigger dropped from a partition", "fixture_activity_default",
			"DROP TRIGGER community_write_fence_update ON fixture_activity_default"},
		{"a fence trigger re-created on another column", "fixture_messages",
			`CREATE OR REPLACE TRIGGER community_write_fence_insert AFTER INSERT ON fixture_messages
				REFERENCING NEW TABLE AS community_fence_new FOR EACH STATEMENT
				EXECUTE FUNCTION enforce_community_write_fence('author_id')`},
		{"the partitioned table's row fence disabled", "fixture_activity",
			"ALTER TABLE fixture_activity DISABLE TRIGGER community_write_fence_row"},
		{"the partitioned table's row fence re-created with a WHEN clause", "fixture_activity",
			`CREATE OR REPLACE TRIGGER community_write_fence_row AFTER INSERT OR UPDATE OR DELETE ON fixture_activity
				FOR EACH ROW WHEN (false) EXECUTE FUNCTION enforce_community_write_fence_row()`},
		{"the partitioned table's row fence dropped", "fixture_activity",
			"DROP TRIGGER community_write_fence_row ON fixture_activity"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := triggerSnapshot(t, b, tc.table)
			_, err := service.Exec(t.Context(), tc.sql)
			requireSQLState(t, err, pgerrcode.InsufficientPrivilege, "DDL refused: ")
			require.Equal(t, before, triggerSnapshot(t, b, tc.table))
		})
	}
	require.Empty(t, drift(t, b))

	// Re-attaching, which re-creates each fence trigger as it was, passes.
	_, err := service.Exec(t.Context(), "SELECT attach_community_write_fence('fixture_messages')")
	require.NoError(t, err)
	require.Empty(t, drift(t, b))
}

// A partition detached from a registered table keeps its fence while it
// holds rows: the owner cannot detach it, drop its fence, write, and
// re-attach it unseen.
func TestDDLGuardKeepsTheFenceOfADetachedPartitionThatHoldsRows(t *testing.T) {
	t.Parallel()
	b := guardedAsOwner(t)
	service := b.as(fixture.RoleServing)
	community := b.createCommunity(t)
	_, err := service.Exec(t.Context(), "INSERT INTO fixture_activity (community_id, kind) VALUES ($1, 'k')", community)
	require.NoError(t, err)
	_, err = service.Exec(t.Context(), "ALTER TABLE fixture_activity DETACH PARTITION fixture_activity_default")
	require.NoError(t, err)
	before := triggerSnapshot(t, b, "fixture_activity_default")
	require.Equal(t, 3, strings.Count(before, "enforce_community_write_fence()"), before)
	for _, sql := range []string{
		"DROP TRIGGER community_write_fence_insert ON fixture_activity_default",
		"ALTER TABLE fixture_activity_default DISABLE TRIGGER USER",
	} {
		_, err := service.Exec(t.Context(), sql)
		requireSQLState(t, err, pgerrcode.InsufficientPrivilege, "public.fixture_activity_default partly fenced and holding rows")
		require.Equal(t, before, triggerSnapshot(t, b, "fixture_activity_default"), sql)
	}
	_, err = service.Exec(t.Context(), "ALTER TABLE fixture_activity ATTACH PARTITION fixture_activity_default DEFAULT")
	require.NoError(t, err)
	require.Empty(t, drift(t, b))
}

// With the guard, every table of a registered 'delete' table carries a
// TRUNCATE fence: TRUNCATE works while no community is being deleted and is
// refused (55000) while one is, as the table's owner issues it, and the
// owner cannot drop or disable the fence.
func TestDDLGuardRefusesTruncateWhileACommunityIsBeingDeleted(t *testing.T) {
	t.Parallel()
	b := guardedAsOwner(t)
	service := b.as(fixture.RoleServing)
	active := b.createCommunity(t)
	_, err := service.Exec(t.Context(), "INSERT INTO fixture_activity (community_id, kind) VALUES ($1, 'k')", active)
	require.NoError(t, err)
	_, err = service.Exec(t.Context(), "TRUNCATE fixture_activity")
	require.NoError(t, err, "no community is being deleted")

	quiescing, fenced, _ := b.quiescingAndFenced(t)
	_, err = service.Exec(t.Context(), "INSERT INTO fixture_activity (community_id, kind) VALUES ($1, 'k')", active)
	require.NoError(t, err)
	before := b.footprint(t, quiescing) + b.footprint(t, fenced)
	var rows int
	require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT count(*) FROM fixture_activity").Scan(&rows))
	for _, sql := range []string{"TRUNCATE fixture_activity", "TRUNCATE fixture_activity_default"} {
		_, err := service.Exec(t.Context(), sql)
		requireSQLState(t, err, sqlstateFenced, "refused: a community is being deleted")
	}
	require.Equal(t, before, b.footprint(t, quiescing)+b.footprint(t, fenced))
	var after int
	require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT count(*) FROM fixture_activity").Scan(&after))
	require.Equal(t, rows, after)

	snapshot := triggerSnapshot(t, b, "fixture_messages")
	for _, sql := range []string{
		"DROP TRIGGER community_write_fence_truncate ON fixture_messages",
		"ALTER TABLE fixture_messages DISABLE TRIGGER community_write_fence_truncate",
		"ALTER TABLE fixture_messages ENABLE REPLICA TRIGGER community_write_fence_truncate",
	} {
		_, err := service.Exec(t.Context(), sql)
		requireSQLState(t, err, pgerrcode.InsufficientPrivilege, "public.fixture_messages unfenced: no TRUNCATE fence")
		require.Equal(t, snapshot, triggerSnapshot(t, b, "fixture_messages"), sql)
	}
}

// Install is idempotent and adds no trigger of its own (the TRUNCATE fence
// is attach's); uninstall removes everything install created, leaves what
// the migrations and attach did, and may run twice.
func TestDDLGuardInstallsAndUninstallsWhole(t *testing.T) {
	t.Parallel()
	b := setup(t)
	countTruncateFences := func() int {
		var n int
		require.NoError(t, b.pool.QueryRow(t.Context(),
			"SELECT count(*) FROM pg_trigger WHERE tgname = 'community_write_fence_truncate'").Scan(&n))
		return n
	}
	fences := countTruncateFences()
	installDDLGuard(t, b)
	installDDLGuard(t, b)
	require.Equal(t, fences, countTruncateFences())
	require.NoError(t, b.exec(t, "CREATE TABLE fixture_polls (id bigint PRIMARY KEY, community_id uuid NOT NULL REFERENCES community_deletion.communities (id))"))
	require.NoError(t, b.exec(t, "SELECT community_deletion.attach_community_write_fence('fixture_polls')"))
	require.Empty(t, drift(t, b))
	require.Equal(t, fences+1, countTruncateFences())

	_, uninstall := communitydeletion.DDLGuard()
	require.NoError(t, b.exec(t, uninstall))
	require.NoError(t, b.exec(t, uninstall))
	require.Equal(t, fences+1, countTruncateFences())
	var left int
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT
		(SELECT count(*) FROM pg_event_trigger WHERE evtname LIKE 'community_deletion%')
		+ (SELECT count(*) FROM pg_proc WHERE proname LIKE 'community_deletion_ddl_guard%')
		+ (SELECT count(*) FROM pg_class WHERE relname LIKE 'community_deletion_ddl_guard%')`).Scan(&left))
	require.Equal(t, 0, left)
	require.Empty(t, drift(t, b))
}

// controlSnapshot is every index, constraint and trigger of a control table.
func controlSnapshot(t *testing.T, b *testBundle, table string) string {
	t.Helper()
	var snapshot string
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT concat_ws(E'\n',
		(SELECT string_agg(pg_get_indexdef(indexrelid), E'\n' ORDER BY pg_get_indexdef(indexrelid)) FROM pg_index WHERE indrelid = $1::regclass),
		(SELECT string_agg(conname || ' ' || pg_get_constraintdef(oid), E'\n' ORDER BY conname) FROM pg_constraint WHERE conrelid = $1::regclass),
		(SELECT string_agg(tgname || ' ' || tgenabled::text, E'\n' ORDER BY tgname) FROM pg_trigger WHERE tgrelid = $1::regclass))`,
		table).Scan(&snapshot))
	return snapshot
}

// The owner of a control table (here the service, given the lease table)
// cannot weaken it: dropping its lease bound, its index or its primary key,
// or adding a trigger that could undo its guard, is refused (42501) and the
// table stays as it was. The schema owner's migration run still may.
func TestDDLGuardRefusesChangesToTheControlTables(t *testing.T) {
	t.Parallel()
	b := guardedAsOwner(t)
	b.execInRun(t, "ALTER TABLE community_serving_write_leases OWNER TO "+string(fixture.RoleServing))
	require.NoError(t, b.exec(t, "GRANT CREATE ON SCHEMA public TO "+string(fixture.RoleServing)))
	service := b.as(fixture.RoleServing)
	_, err := service.Exec(t.Context(), `CREATE FUNCTION public.lease_forever() RETURNS trigger LANGUAGE plpgsql
		AS $$ BEGIN NEW.lease_until := 'infinity'; RETURN NEW; END $$`)
	require.NoError(t, err)
	before := controlSnapshot(t, b, "community_serving_write_leases")
	for _, sql := range []string{
		"ALTER TABLE community_serving_write_leases DROP CONSTRAINT community_serving_write_leases_lease_bound_check",
		"DROP INDEX community_serving_write_leases_community_idx",
		"ALTER TABLE community_serving_write_leases DROP CONSTRAINT community_serving_write_leases_pkey",
		"ALTER TABLE community_serving_write_leases DISABLE TRIGGER USER",
		`CREATE TRIGGER lease_forever BEFORE INSERT OR UPDATE ON community_serving_write_leases
			FOR EACH ROW EXECUTE FUNCTION public.lease_forever()`,
	} {
		_, err := service.Exec(t.Context(), sql)
		requireSQLState(t, err, pgerrcode.InsufficientPrivilege, "DDL refused: ")
		require.Equal(t, before, controlSnapshot(t, b, "community_serving_write_leases"), sql)
	}
	require.Empty(t, drift(t, b))

	// A migration run of the schema's owner may change a control table, and
	// what it leaves is what the guard holds from then on.
	ctx := t.Context()
	owner, err := b.pool.Acquire(ctx)
	require.NoError(t, err)
	defer owner.Release()
	for _, sql := range []string{
		"SELECT community_deletion.community_deletion_ddl_guard_open_run()",
		"CREATE INDEX community_serving_write_leases_owner_idx ON community_serving_write_leases (owner)",
		"SELECT community_deletion.community_deletion_ddl_guard_close_run()",
	} {
		_, err := owner.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	_, err = service.Exec(ctx, "CREATE TABLE unrelated (id int)")
	require.NoError(t, err, "ordinary DDL passes after the migration run")
	_, err = service.Exec(ctx, "DROP INDEX community_serving_write_leases_owner_idx")
	requireSQLState(t, err, pgerrcode.InsufficientPrivilege, "DDL refused: ")
}

// Row-level security that would hide a registered table's rows from the
// deletion's logins is refused as its owner turns it on, on the table or on
// a partition, and the table stays without it.
func TestDDLGuardRefusesRowSecurityThatHidesRows(t *testing.T) {
	t.Parallel()
	b := guardedAsOwner(t)
	b.as(fixture.RoleExecutor) // a deletion login the policies would apply to
	service := b.as(fixture.RoleServing)
	for _, tc := range []struct{ table, registered, sql string }{
		{"fixture_messages", "fixture_messages", "ALTER TABLE fixture_messages ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY"},
		{"fixture_activity_default", "fixture_activity", "ALTER TABLE fixture_activity_default ENABLE ROW LEVEL SECURITY"},
	} {
		_, err := service.Exec(t.Context(), tc.sql)
		requireSQLState(t, err, pgerrcode.InsufficientPrivilege, "public."+tc.registered+" row_security")
		var secured, forced bool
		require.NoError(t, b.pool.QueryRow(t.Context(),
			"SELECT relrowsecurity, relforcerowsecurity FROM pg_class WHERE oid = $1::regclass", tc.table).Scan(&secured, &forced))
		require.False(t, secured || forced, tc.sql)
	}
}

// A table rewrite cannot move rows out of a fenced community (nor into it):
// ALTER COLUMN ... TYPE ... USING on the key column is refused while a
// deletion is under way, as the table's owner issues it, and so is dropping
// and adding the key column again; the rows stay where they were. A rewrite
// of another column passes, even one that changes how it is stored. (The
// table has no foreign key to communities: rebuilding one needs REFERENCES
// on communities, which the service lacks.)
func TestDDLGuardRefusesRewritesThatMoveRowsOfADeletion(t *testing.T) {
	t.Parallel()
	b := guardedAsOwner(t)
	service := b.as(fixture.RoleServing)
	require.NoError(t, b.exec(t, `CREATE TABLE tenant_notes (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		community_id uuid NOT NULL, body text NOT NULL, score integer NOT NULL DEFAULT 7)`))
	require.NoError(t, b.exec(t, "ALTER TABLE tenant_notes OWNER TO "+string(fixture.RoleServing)))
	_, err := service.Exec(t.Context(), "SELECT attach_community_write_fence('tenant_notes')")
	require.NoError(t, err)
	active, doomed := b.createCommunity(t), b.createCommunity(t)
	for _, c := range []any{active, doomed} {
		_, err := service.Exec(t.Context(), "INSERT INTO tenant_notes (community_id, body) VALUES ($1, 'note')", c)
		require.NoError(t, err)
	}
	b.quiesce(t, doomed)
	b.fence(t, doomed)
	notes := func() string {
		var s string
		require.NoError(t, b.pool.QueryRow(t.Context(),
			"SELECT string_agg(id || ' ' || community_id || ' ' || body, ',' ORDER BY id) FROM tenant_notes").Scan(&s))
		return s
	}
	before := notes()
	for _, using := range []string{
		fmt.Sprintf("CASE WHEN community_id = '%s' THEN '%s'::uuid ELSE community_id END", doomed, active),
		fmt.Sprintf("CASE WHEN community_id = '%s' THEN '%s'::uuid ELSE community_id END", active, doomed),
	} {
		_, err := service.Exec(t.Context(), "ALTER TABLE tenant_notes ALTER COLUMN community_id TYPE uuid USING ("+using+")")
		requireSQLState(t, err, pgerrcode.InsufficientPrivilege, "rewrites public.tenant_notes and changes community_id")
		require.Equal(t, before, notes())
	}
	// Nor without a rewrite: the key column dropped and added again with a
	// default that gives every row another community.
	_, err = service.Exec(t.Context(), fmt.Sprintf(
		"ALTER TABLE tenant_notes DROP COLUMN community_id, ADD COLUMN community_id uuid NOT NULL DEFAULT '%s'", active))
	requireSQLState(t, err, pgerrcode.InsufficientPrivilege, "drops column community_id of public.tenant_notes")
	require.Equal(t, before, notes())
	_, err = service.Exec(t.Context(), "ALTER TABLE tenant_notes ALTER COLUMN body TYPE varchar USING body")
	require.NoError(t, err, "a rewrite that moves nothing")
	require.Equal(t, before, notes())
	// One that changes how a column is stored, while the fenced community
	// has rows there: the guard reads no row while the table holds the old
	// representation (reading it then crashed the server).
	_, err = service.Exec(t.Context(), "ALTER TABLE tenant_notes ALTER COLUMN score TYPE text")
	require.NoError(t, err, "a rewrite of a column that decides no tenant")
	require.Equal(t, before, notes())
	require.Empty(t, drift(t, b))
}

// keyedKind is a deployment's tenant key kind: the type of the tenant
// table's key, of projects' narrower key column and of the other tables'
// key columns, and the keys of the tenants the tests use (the first is
// active, the second is fenced, the others are active and hold nothing).
type keyedKind struct {
	name                 string
	tenant, narrow, wide string
	keys                 [6]string
}

// expand puts the kind's name, types and first two keys into sql's
// {kind}, {tenant}, {narrow}, {wide}, {k0} and {k1}.
func (k keyedKind) expand(sql string) string {
	return strings.NewReplacer("{kind}", k.name, "{tenant}", k.tenant, "{narrow}", k.narrow, "{wide}", k.wide,
		"{k0}", k.keys[0], "{k1}", k.keys[1]).Replace(sql)
}

var keyedKinds = []keyedKind{
	{"integer", "bigint", "integer", "bigint", [6]string{"101", "202", "303", "404", "505", "606"}},
	{"text", "text", "varchar(26)", "text", [6]string{"acme_01", "doom_02", "late_03", "staged_04", "sub_05", "run_06"}},
}

// kindsFor is the key kinds test t adopts its service with: both, or under
// go test -short one of them, picked by t's name (so that the suite still
// covers both). Each kind is a deployment of its own: a dozen attached
// tables, each attach checked by the DDL guard.
func kindsFor(t *testing.T) []keyedKind {
	t.Helper()
	if !testing.Short() {
		return keyedKinds
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(t.Name()))
	i := h.Sum32() % uint32(len(keyedKinds))
	return keyedKinds[i : i+1]
}

// keyedSchema is a service with a tenant key that is not a uuid, created
// and adopted by its owner in schema svc: the tenant table accounts;
// projects keyed by account_id (a narrower type, no foreign key, as in
// services that declare few); tasks attached through their foreign key to
// projects; comments through a declared reference to tasks (two levels
// down); events partitioned by account_id; notes kept ('nullify') with a
// nullable key; and two tables whose key has a foreign key to the tenant
// table, so that attach binds their fences (arguments ending in 'bound'):
// ledger, partitioned, and invoices, kept. tasks is bound too (its one path
// starts with a foreign key), comments is not; so are attachments, a child
// of projects, and blobs, reached against the direction of attachments'
// foreign key (referenced_by). In keyedKind.expand's placeholders.
var keyedSchema = []string{
	"CREATE TABLE svc.accounts (id {tenant} PRIMARY KEY, name text NOT NULL)",
	"CREATE TABLE svc.projects (id bigint PRIMARY KEY, account_id {narrow} NOT NULL, title text NOT NULL)",
	"CREATE TABLE svc.tasks (id bigint PRIMARY KEY, project_id bigint NOT NULL REFERENCES svc.projects (id), body text NOT NULL)",
	"CREATE TABLE svc.comments (id bigint PRIMARY KEY, task_ref bigint NOT NULL, body text NOT NULL)",
	`CREATE TABLE svc.events (account_id {wide} NOT NULL, id bigint NOT NULL, kind text NOT NULL, PRIMARY KEY (account_id, id))
		PARTITION BY LIST (account_id)`,
	"CREATE TABLE svc.events_active PARTITION OF svc.events FOR VALUES IN ('{k0}')",
	"CREATE TABLE svc.events_doomed PARTITION OF svc.events FOR VALUES IN ('{k1}')",
	"CREATE TABLE svc.notes (id bigint PRIMARY KEY, account_id {wide}, body text NOT NULL)",
	`CREATE TABLE svc.ledger (account_id {wide} NOT NULL REFERENCES svc.accounts (id), id bigint NOT NULL, amount bigint NOT NULL,
		PRIMARY KEY (account_id, id)) PARTITION BY LIST (account_id)`,
	"CREATE TABLE svc.ledger_active PARTITION OF svc.ledger FOR VALUES IN ('{k0}')",
	"CREATE TABLE svc.ledger_doomed PARTITION OF svc.ledger FOR VALUES IN ('{k1}')",
	"CREATE TABLE svc.invoices (id bigint PRIMARY KEY, account_id {wide} REFERENCES svc.accounts (id), body text NOT NULL)",
	"CREATE TABLE svc.blobs (id bigint PRIMARY KEY, body text NOT NULL)",
	`CREATE TABLE svc.attachments (id bigint PRIMARY KEY, project_id bigint NOT NULL REFERENCES svc.projects (id),
		blob_id bigint NOT NULL REFERENCES svc.blobs (id))`,
	"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA svc TO community_deletion_serving",
	"INSERT INTO svc.accounts (id, name) VALUES ('{k0}', 'active'), ('{k1}', 'doomed')",
	"SELECT community_deletion.declare_tenant_table('svc.accounts')",
	"SELECT community_deletion.attach_community_write_fence('svc.projects', 'delete', 'account_id')",
	"SELECT community_deletion.attach_child_table('svc.tasks')",
	"SELECT community_deletion.declare_reference('svc.comments', '{task_ref}', 'svc.tasks')",
	"SELECT community_deletion.attach_child_table('svc.comments')",
	"SELECT community_deletion.attach_community_write_fence('svc.events', 'delete', 'account_id')",
	"SELECT community_deletion.attach_community_write_fence('svc.notes', 'nullify', 'account_id')",
	"SELECT community_deletion.attach_community_write_fence('svc.ledger', 'delete', 'account_id')",
	"SELECT community_deletion.attach_community_write_fence('svc.invoices', 'nullify', 'account_id')",
	"SELECT community_deletion.attach_child_table('svc.attachments')",
	"SELECT community_deletion.attach_child_table('svc.blobs', NULL, ARRAY['svc.attachments']::regclass[])",
}

// keyedRows are one project, task, comment, event, note, ledger entry,
// invoice, blob and attachment of each of the first two tenants, written
// by the service.
var keyedRows = []string{
	"INSERT INTO svc.projects (id, account_id, title) VALUES (1, '{k0}', 'kept'), (2, '{k1}', 'doomed')",
	"INSERT INTO svc.tasks (id, project_id, body) VALUES (1, 1, 'kept'), (2, 2, 'doomed')",
	"INSERT INTO svc.comments (id, task_ref, body) VALUES (1, 1, 'kept'), (2, 2, 'doomed')",
	"INSERT INTO svc.events (account_id, id, kind) VALUES ('{k0}', 1, 'kept'), ('{k1}', 2, 'doomed')",
	"INSERT INTO svc.notes (id, account_id, body) VALUES (1, '{k0}', 'kept'), (2, '{k1}', 'doomed')",
	"INSERT INTO svc.ledger (account_id, id, amount) VALUES ('{k0}', 1, 10), ('{k1}', 2, 20)",
	"INSERT INTO svc.invoices (id, account_id, body) VALUES (1, '{k0}', 'kept'), (2, '{k1}', 'doomed')",
	"INSERT INTO svc.blobs (id, body) VALUES (1, 'kept'), (2, 'doomed')",
	"INSERT INTO svc.attachments (id, project_id, blob_id) VALUES (1, 1, 1), (2, 2, 2)",
}

// keyedDeployment is keyedSchema in a database without the fixture, with
// rows of two tenants, the second fenced.
type keyedDeployment struct {
	b              *testBundle
	kind           keyedKind
	ownerName      string
	owner          *pgx.Conn // owns schema svc and its tables; no superuser
	active, doomed uuid.UUID
}

// newKeyedDeployment builds keyedDeployment for kind. Its owner is a
// service login, or (schemaOwner) the login that also owns schema
// community_deletion, as where one migrating login runs both histories.
// With guardFirst the DDL guard is installed before the service adopts the
// library, else after.
func newKeyedDeployment(t *testing.T, kind keyedKind, schemaOwner, guardFirst bool) *keyedDeployment {
	t.Helper()
	b := setupBare(t)
	b.as(fixture.RoleServing) // creates the test logins
	d := &keyedDeployment{b: b, kind: kind}
	password := "pw"
	if schemaOwner {
		d.ownerName, password = schemaOwnerLogin, schemaOwnerLogin+"-password"
		handSchemaTo(t, b, d.ownerName, password)
	} else {
		d.ownerName = "cd_test_svc_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
		require.NoError(t, b.exec(t, fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD 'pw'", d.ownerName)))
		t.Cleanup(func() {
			cleanup := context.Background()
			_, uninstall := communitydeletion.DDLGuard()
			_, _ = b.pool.Exec(cleanup, uninstall)
			_, _ = b.pool.Exec(cleanup, "DROP OWNED BY "+d.ownerName+" CASCADE")
			_, _ = b.pool.Exec(cleanup, "DROP ROLE "+d.ownerName)
		})
	}
	for _, sql := range []string{
		"CREATE SCHEMA svc AUTHORIZATION " + d.ownerName,
		"GRANT USAGE ON SCHEMA svc TO community_deletion_serving, community_deletion_executor, community_deletion_operator",
	} {
		require.NoError(t, b.exec(t, sql), sql)
	}
	if guardFirst {
		installDDLGuard(t, b)
	}
	d.owner = connectAs(t, b, d.ownerName, password)
	for _, sql := range keyedSchema {
		d.run(t, kind.expand(sql))
	}
	for _, sql := range keyedRows {
		require.NoError(t, b.execAs(t, fixture.RoleServing, kind.expand(sql)), sql)
	}
	d.active, d.doomed = d.tenant(t, kind.keys[0]), d.tenant(t, kind.keys[1])
	b.quiesce(t, d.doomed)
	b.fence(t, d.doomed)
	if !guardFirst {
		installDDLGuard(t, b)
	}
	require.Empty(t, drift(t, b))
	return d
}

// run runs statements as the owner and fails the test on an error.
func (d *keyedDeployment) run(t *testing.T, sqls ...string) {
	t.Helper()
	for _, sql := range sqls {
		_, err := d.owner.Exec(t.Context(), sql)
		require.NoError(t, err, sql)
	}
}

// exec runs one statement as the owner and returns its error.
func (d *keyedDeployment) exec(t *testing.T, sql string) error {
	t.Helper()
	_, err := d.owner.Exec(t.Context(), sql)
	return err
}

// tenant is the lifecycle id of the tenant whose key is key.
func (d *keyedDeployment) tenant(t *testing.T, key string) uuid.UUID {
	t.Helper()
	var id uuid.UUID
	require.NoError(t, d.b.pool.QueryRow(t.Context(), "SELECT id FROM community_deletion.communities WHERE tenant_key = $1", key).Scan(&id))
	return id
}

// snapshot is everything of schema svc an attack could change: every
// trigger whole (arguments and state too), the state of the internal
// triggers of its foreign keys, every column's type and nullability, every
// constraint, the partition tree and every row.
func (d *keyedDeployment) snapshot(t *testing.T) string {
	t.Helper()
	var s string
	require.NoError(t, d.b.pool.QueryRow(t.Context(), `SELECT concat_ws(E'\n',
		(SELECT string_agg(concat_ws(' ', c.relname, t.tgname, t.tgtype, t.tgenabled, encode(t.tgargs, 'escape'), t.tgqual,
		                             t.tgattr::text, t.tgfoid::regprocedure::text), E'\n' ORDER BY c.relname, t.tgname)
		 FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid WHERE c.relnamespace = 'svc'::regnamespace AND NOT t.tgisinternal),
		(SELECT string_agg(concat_ws(' ', c.relname, t.tgname, t.tgenabled), E'\n' ORDER BY c.relname, t.tgname)
		 FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid WHERE c.relnamespace = 'svc'::regnamespace AND t.tgisinternal),
		(SELECT string_agg(concat_ws(' ', c.relname, a.attnum, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull),
		                   E'\n' ORDER BY c.relname, a.attnum)
		 FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
		 WHERE c.relnamespace = 'svc'::regnamespace AND c.relkind IN ('r', 'p') AND a.attnum > 0 AND NOT a.attisdropped),
		(SELECT string_agg(k.conname || ' ' || pg_get_constraintdef(k.oid), E'\n' ORDER BY k.conname)
		 FROM pg_constraint k WHERE k.connamespace = 'svc'::regnamespace),
		(SELECT string_agg(i.inhrelid::regclass::text || ' < ' || i.inhparent::regclass::text, E'\n' ORDER BY 1)
		 FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE c.relnamespace = 'svc'::regnamespace),
		(SELECT md5(string_agg(r.line, E'\n' ORDER BY r.line)) FROM (
			SELECT 'project ' || p::text FROM svc.projects p UNION ALL SELECT 'task ' || t::text FROM svc.tasks t
			UNION ALL SELECT 'comment ' || c::text FROM svc.comments c UNION ALL SELECT 'event ' || e::text FROM svc.events e
			UNION ALL SELECT 'note ' || n::text FROM svc.notes n UNION ALL SELECT 'ledger ' || l::text FROM svc.ledger l
			UNION ALL SELECT 'invoice ' || i::text FROM svc.invoices i UNION ALL SELECT 'blob ' || o::text FROM svc.blobs o
			UNION ALL SELECT 'attachment ' || a::text FROM svc.attachments a) r (line)))`).Scan(&s))
	return s
}

// fenceArgs is each fence trigger of relation with its arguments and state,
// "name args state", sorted.
func fenceArgs(t *testing.T, b *testBundle, relation string) []string {
	t.Helper()
	rows, err := b.pool.Query(t.Context(), `SELECT t.tgname || ' ' || encode(t.tgargs, 'escape') || ' ' || t.tgenabled::text
		FROM pg_trigger t WHERE t.tgrelid = $1::regclass AND NOT t.tgisinternal ORDER BY t.tgname`, relation)
	require.NoError(t, err)
	args, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return args
}

// keyedFence is the fence attach gives a leaf partition of svc.events of
// kind: the statement-level fences with the key column and kind, the
// TRUNCATE fence, and the partitioned table's row fence cloned but disabled.
func keyedFence(kind keyedKind) []string {
	args := `account_id\000` + kind.name + `\000`
	return []string{
		"community_write_fence_delete " + args + " O",
		"community_write_fence_insert " + args + " O",
		"community_write_fence_row " + args + " D",
		"community_write_fence_truncate  O",
		"community_write_fence_update " + args + " O",
	}
}

// boundFence is the fence attach gives a leaf partition of svc.ledger of
// kind, whose key a foreign key to the tenant table binds: keyedFence's
// with the third argument 'bound'.
func boundFence(kind keyedKind) []string {
	args := `account_id\000` + kind.name + `\000bound\000`
	return []string{
		"community_write_fence_delete " + args + " O",
		"community_write_fence_insert " + args + " O",
		"community_write_fence_row " + args + " D",
		"community_write_fence_truncate  O",
		"community_write_fence_update " + args + " O",
	}
}

// With the DDL guard installed first, a service keyed by an integer or a
// text key adopts the library as docs/adopting.md says: it declares its
// tenant table and attaches a table of each shape (a narrower key column,
// a child table through its foreign key, one through a declared reference,
// a partitioned table, a kept table with a nullable key) as their owner,
// attaches again, and then changes its own tables (an index, a column, a
// rewrite of a child table holding a fenced tenant's rows) unhindered. The
// fences hold with the arguments attach gave them.
func TestDDLGuardPassesAdoptionWithEveryKeyKind(t *testing.T) {
	t.Parallel()
	for _, kind := range kindsFor(t) {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			d := newKeyedDeployment(t, kind, false, true)
			before := d.snapshot(t)
			d.run(t,
				"SELECT community_deletion.attach_community_write_fence('svc.events', 'delete', 'account_id')",
				"SELECT community_deletion.attach_child_table('svc.tasks')",
				"SELECT community_deletion.attach_community_write_fence('svc.notes', 'nullify', 'account_id')",
				"SELECT community_deletion.attach_community_write_fence('svc.ledger', 'delete', 'account_id')",
				"SELECT community_deletion.attach_community_write_fence('svc.invoices', 'nullify', 'account_id')",
			)
			require.Equal(t, before, d.snapshot(t), "attaching again changes nothing")
			d.run(t,
				"CREATE INDEX tasks_project_idx ON svc.tasks (project_id)",
				"ALTER TABLE svc.comments ADD COLUMN edited_at timestamptz",
				"ALTER TABLE svc.tasks ALTER COLUMN body TYPE varchar USING body",
				"ALTER TABLE svc.projects ALTER COLUMN title TYPE varchar USING title",
				"ALTER TABLE svc.notes ALTER COLUMN body SET DEFAULT ''",
			)
			require.Empty(t, drift(t, d.b))
			require.Equal(t, keyedFence(kind), fenceArgs(t, d.b, "svc.events_doomed"))
			require.Equal(t, boundFence(kind), fenceArgs(t, d.b, "svc.ledger_doomed"), "a foreign key to the tenant table binds the fence")
			serving := d.b.as(fixture.RoleServing)
			_, err := serving.Exec(t.Context(), "INSERT INTO svc.comments (id, task_ref, body) VALUES (3, 1, 'more')")
			require.NoError(t, err, "the active tenant writes through two levels of parents")
			_, err = serving.Exec(t.Context(), "INSERT INTO svc.comments (id, task_ref, body) VALUES (4, 2, 'late')")
			requireSQLState(t, err, sqlstateFenced, "community write to comments refused: community "+kind.keys[1]+" is fenced")
			_, err = serving.Exec(t.Context(), fmt.Sprintf("UPDATE svc.projects SET title = 'late' WHERE account_id = '%s'", kind.keys[1]))
			requireSQLState(t, err, sqlstateFenced, "community write to projects refused")
		})
	}
}

// keyedAttacks are what the owner of a keyed deployment's tables (or the
// owner of schema community_deletion who owns them too) can try against
// its fences and registrations; each is refused (42501) naming what it
// would leave. kinds limits an attack to some key kinds.
var keyedAttacks = []struct {
	name, sql, message string
	kinds              []string
}{
	{name: "the integer-keyed table's fence re-created on another column",
		sql: `CREATE OR REPLACE TRIGGER community_write_fence_insert AFTER INSERT ON svc.projects
			REFERENCING NEW TABLE AS community_fence_new FOR EACH STATEMENT
			EXECUTE FUNCTION community_deletion.enforce_community_write_fence('id', '{kind}')`,
		message: "svc.projects unfenced"},
	{name: "a partition's fence re-created with a uuid key's arguments",
		sql: `CREATE OR REPLACE TRIGGER community_write_fence_update AFTER UPDATE ON svc.events_doomed
			REFERENCING OLD TABLE AS community_fence_old NEW TABLE AS community_fence_new FOR EACH STATEMENT
			EXECUTE FUNCTION community_deletion.enforce_community_write_fence('account_id')`,
		message: "svc.events unfenced"},
	{name: "a child table's fence re-created on a path through another column",
		sql: `CREATE OR REPLACE TRIGGER community_write_fence_delete AFTER DELETE ON svc.tasks
			REFERENCING OLD TABLE AS community_fence_old FOR EACH STATEMENT
			EXECUTE FUNCTION community_deletion.enforce_community_write_fence('through',
				'{"kind": "{kind}", "paths": [{"key": "account_id", "hops": [{"table": "projects", "schema": "svc", "columns": ["id"], "parent_columns": ["id"]}]}]}')`,
		message: "svc.tasks unfenced"},
	{name: "a second child table's fence beside the whole one, with other arguments",
		sql: `CREATE TRIGGER community_write_fence_insert_too AFTER INSERT ON svc.comments
			REFERENCING NEW TABLE AS community_fence_new FOR EACH STATEMENT
			EXECUTE FUNCTION community_deletion.enforce_community_write_fence('through', '{"kind": "{kind}", "paths": []}')`,
		message: "svc.comments unfenced"},
	{name: "the partitioned table's row fence disabled",
		sql:     "ALTER TABLE svc.events DISABLE TRIGGER community_write_fence_row",
		message: "svc.events unfenced: its row fence community_write_fence_row"},
	{name: "the partitioned table's row fence firing for replication sessions only",
		sql:     "ALTER TABLE svc.events ENABLE REPLICA TRIGGER community_write_fence_row",
		message: "svc.events unfenced: its row fence community_write_fence_row"},
	{name: "the partitioned table's row fence re-created with other arguments",
		sql: `CREATE OR REPLACE TRIGGER community_write_fence_row AFTER INSERT OR UPDATE OR DELETE ON svc.events
			FOR EACH ROW EXECUTE FUNCTION community_deletion.enforce_community_write_fence_row('id', '{kind}')`,
		message: "svc.events unfenced: its row fence community_write_fence_row"},
	{name: "the partitioned table's row fence dropped",
		sql:     "DROP TRIGGER community_write_fence_row ON svc.events",
		message: "drops trigger community_write_fence_row of svc.events"},
	{name: "a child table's foreign key dropped",
		sql:     "ALTER TABLE svc.tasks DROP CONSTRAINT tasks_project_id_fkey",
		message: "drops foreign key tasks_project_id_fkey of svc.tasks, which binds its fence and is a first step of its paths"},
	{name: "a child table's referencing column dropped and added again",
		sql:     "ALTER TABLE svc.tasks DROP COLUMN project_id, ADD COLUMN project_id bigint REFERENCES svc.projects (id)",
		message: "drops column project_id of svc.tasks"},
	{name: "a declared reference's column retyped",
		sql:     "ALTER TABLE svc.comments ALTER COLUMN task_ref TYPE text",
		message: "svc.comments parents_changed"},
	{name: "the column a declared reference names renamed",
		sql:     "ALTER TABLE svc.tasks RENAME COLUMN id TO task_id",
		message: "svc.comments parents_changed"},
	{name: "the integer key retyped to text", kinds: []string{"integer"},
		sql:     "ALTER TABLE svc.projects ALTER COLUMN account_id TYPE text",
		message: "svc.projects shape"},
	{name: "the text key retyped to bytea", kinds: []string{"text"},
		sql:     "ALTER TABLE svc.projects ALTER COLUMN account_id TYPE bytea USING convert_to(account_id, 'UTF8')",
		message: "svc.projects shape"},
	{name: "the key column dropped and added again, empty",
		sql:     "ALTER TABLE svc.projects DROP COLUMN account_id, ADD COLUMN account_id {narrow}",
		message: "drops column account_id of svc.projects"},
	{name: "a kept table's key made NOT NULL",
		sql:     "ALTER TABLE svc.notes ALTER COLUMN account_id SET NOT NULL",
		message: "svc.notes shape"},
	{name: "a kept table's fence disabled",
		sql:     "ALTER TABLE svc.notes DISABLE TRIGGER community_kept_row_fence_insert",
		message: "svc.notes unfenced: no kept-row fence"},
	{name: "a write fence on a kept table",
		sql: `CREATE TRIGGER community_write_fence_insert AFTER INSERT ON svc.notes
			REFERENCING NEW TABLE AS community_fence_new FOR EACH STATEMENT
			EXECUTE FUNCTION community_deletion.enforce_community_write_fence('account_id', '{kind}')`,
		message: "svc.notes stray_fence"},
	{name: "every trigger of a partition disabled",
		sql:     "ALTER TABLE svc.events_doomed DISABLE TRIGGER USER",
		message: "svc.events unfenced"},
}

// The attacks on a keyed deployment, as the owner of its tables and as the
// owner of schema community_deletion who owns them too, outside a migration
// run: each is refused (42501) naming what it would leave, nothing of schema
// svc changes, and the drift report stays empty.
func TestDDLGuardRefusesTamperingWithKeyedFences(t *testing.T) {
	t.Parallel()
	for _, kind := range kindsFor(t) {
		for _, schemaOwner := range []bool{false, true} {
			attacker := "the table owner"
			if schemaOwner {
				attacker = "the schema owner"
			}
			t.Run(kind.name+"/"+attacker, func(t *testing.T) {
				t.Parallel()
				d := newKeyedDeployment(t, kind, schemaOwner, false)
				for _, attack := range keyedAttacks {
					if attack.kinds != nil && !slices.Contains(attack.kinds, kind.name) {
						continue
					}
					t.Run(attack.name, func(t *testing.T) {
						before := d.snapshot(t)
						err := d.exec(t, kind.expand(attack.sql))
						requireSQLState(t, err, pgerrcode.InsufficientPrivilege, attack.message)
						require.Equal(t, before, d.snapshot(t))
						require.Empty(t, drift(t, d.b))
					})
				}
			})
		}
	}
}

// A partition of an integer- or text-keyed table created by CREATE TABLE
// ... PARTITION OF, or attached with ALTER TABLE ... ATTACH PARTITION, as
// the table's owner, is fenced as attach would fence it: the statement
// fences with the key column and kind, the TRUNCATE fence, the row fence's
// clone disabled; a partitioned partition keeps its clone enabled for the
// partitions it gets. A partition created in a migration run is fenced by
// its clone alone, which its owner cannot then disable. One holding rows
// of the fenced tenant is refused; the fenced tenant's own partition,
// detached, comes back whole.
func TestDDLGuardFencesNewPartitionsOfAKeyedTable(t *testing.T) {
	t.Parallel()
	for _, kind := range kindsFor(t) {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			d := newKeyedDeployment(t, kind, false, false)
			b, k := d.b, kind.keys
			require.NoError(t, b.execAs(t, fixture.RoleServing, fmt.Sprintf(
				"INSERT INTO svc.accounts (id, name) VALUES ('%s', 'late'), ('%s', 'staged'), ('%s', 'sub'), ('%s', 'run')", k[2], k[3], k[4], k[5])))
			d.run(t,
				fmt.Sprintf("CREATE TABLE svc.events_late PARTITION OF svc.events FOR VALUES IN ('%s')", k[2]),
				fmt.Sprintf(`CREATE TABLE svc.events_staged (account_id %s NOT NULL, id bigint NOT NULL, kind text NOT NULL,
					PRIMARY KEY (account_id, id))`, kind.wide),
				fmt.Sprintf("INSERT INTO svc.events_staged (account_id, id, kind) VALUES ('%s', 1, 'staged')", k[3]),
				fmt.Sprintf("ALTER TABLE svc.events ATTACH PARTITION svc.events_staged FOR VALUES IN ('%s')", k[3]),
				fmt.Sprintf("CREATE TABLE svc.events_sub PARTITION OF svc.events FOR VALUES IN ('%s') PARTITION BY RANGE (id)", k[4]),
				"CREATE TABLE svc.events_sub_low PARTITION OF svc.events_sub FOR VALUES FROM (0) TO (1000)",
				"GRANT INSERT ON svc.events_late, svc.events_staged, svc.events_sub_low TO community_deletion_serving",
			)
			for _, partition := range []string{"svc.events_late", "svc.events_staged", "svc.events_sub_low"} {
				require.Equal(t, keyedFence(kind), fenceArgs(t, b, partition), partition)
				var granted bool
				require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT has_table_privilege('community_deletion_executor', $1, 'SELECT, UPDATE, DELETE')
					AND has_column_privilege('community_deletion_operator', $1, 'account_id', 'SELECT')`, partition).Scan(&granted))
				require.True(t, granted, partition)
			}
			sub := keyedFence(kind)
			sub[2] = strings.TrimSuffix(sub[2], "D") + "O"
			require.Equal(t, sub, fenceArgs(t, b, "svc.events_sub"), "a partitioned partition keeps its clone enabled")
			require.Empty(t, drift(t, b))

			// Fenced for real: the partitions refuse their tenant once it is fenced.
			serving := b.as(fixture.RoleServing)
			for i, partition := range map[int]string{2: "svc.events_late", 3: "svc.events_staged", 4: "svc.events_sub_low"} {
				_, err := serving.Exec(t.Context(), fmt.Sprintf("INSERT INTO %s (account_id, id, kind) VALUES ('%s', 10, 'before')", partition, k[i]))
				require.NoError(t, err, partition)
				b.quiesce(t, d.tenant(t, k[i]))
				_, err = serving.Exec(t.Context(), fmt.Sprintf("INSERT INTO %s (account_id, id, kind) VALUES ('%s', 11, 'after')", partition, k[i]))
				requireSQLState(t, err, sqlstateFenced, "community "+k[i]+" is quiescing")
			}

			// Made in a migration run, a partition is fenced by its clone alone,
			// and its owner cannot disable that.
			b.execInRun(t,
				fmt.Sprintf("CREATE TABLE svc.events_run PARTITION OF svc.events FOR VALUES IN ('%s')", k[5]),
				"ALTER TABLE svc.events_run OWNER TO "+d.ownerName)
			d.run(t, "CREATE INDEX notes_body_idx ON svc.notes (body)")
			require.Equal(t, []string{"community_write_fence_row " + `account_id\000` + kind.name + `\000` + " O"}, fenceArgs(t, b, "svc.events_run"))
			require.Empty(t, drift(t, b))
			before := d.snapshot(t)
			err := d.exec(t, "ALTER TABLE svc.events_run DISABLE TRIGGER community_write_fence_row")
			requireSQLState(t, err, pgerrcode.InsufficientPrivilege, "svc.events unfenced")
			require.Equal(t, before, d.snapshot(t))

			// The fenced tenant's partition, detached, may come back; another
			// table holding its rows may not become a partition.
			d.run(t, "ALTER TABLE svc.events DETACH PARTITION svc.events_doomed",
				fmt.Sprintf(`CREATE TABLE svc.events_smuggled (account_id %s NOT NULL, id bigint NOT NULL, kind text NOT NULL,
					PRIMARY KEY (account_id, id))`, kind.wide),
				fmt.Sprintf("INSERT INTO svc.events_smuggled (account_id, id, kind) VALUES ('%s', 9, 'smuggled')", k[1]))
			err = d.exec(t, fmt.Sprintf("ALTER TABLE svc.events ATTACH PARTITION svc.events_smuggled FOR VALUES IN ('%s')", k[1]))
			requireSQLState(t, err, pgerrcode.InsufficientPrivilege, "holds rows of a community that is being deleted")
			d.run(t, fmt.Sprintf("ALTER TABLE svc.events ATTACH PARTITION svc.events_doomed FOR VALUES IN ('%s')", k[1]))
			require.Equal(t, keyedFence(kind), fenceArgs(t, b, "svc.events_doomed"), "attach's fence, its clone disabled again")
			d.run(t, "DROP TABLE svc.events_smuggled")
			require.Empty(t, drift(t, b))
		})
	}
}

// With the DDL guard, rows of a deleted community never come back into a
// registered table: a table the service kept aside with such rows, fenced
// whole as attach would fence it (so that it passes as a partition that was
// detached and comes back), is refused as a partition (42501) and stays
// apart.
func TestDDLGuardRefusesAPartitionHoldingADeletedCommunitysRows(t *testing.T) {
	t.Parallel()
	b := guardedAsOwner(t)
	require.NoError(t, b.exec(t, "GRANT CREATE ON SCHEMA public TO "+string(fixture.RoleServing)))
	service := b.as(fixture.RoleServing)
	gone := b.createCommunity(t)
	for _, sql := range []string{
		`CREATE TABLE public.kept_aside (community_id uuid NOT NULL, id bigint NOT NULL, kind text NOT NULL,
			PRIMARY KEY (community_id, id))`,
		`CREATE TRIGGER community_write_fence_insert AFTER INSERT ON public.kept_aside REFERENCING NEW TABLE AS community_fence_new
			FOR EACH STATEMENT EXECUTE FUNCTION community_deletion.enforce_community_write_fence()`,
		`CREATE TRIGGER community_write_fence_update AFTER UPDATE ON public.kept_aside
			REFERENCING OLD TABLE AS community_fence_old NEW TABLE AS community_fence_new
			FOR EACH STATEMENT EXECUTE FUNCTION community_deletion.enforce_community_write_fence()`,
		`CREATE TRIGGER community_write_fence_delete AFTER DELETE ON public.kept_aside REFERENCING OLD TABLE AS community_fence_old
			FOR EACH STATEMENT EXECUTE FUNCTION community_deletion.enforce_community_write_fence()`,
		`CREATE TRIGGER community_write_fence_truncate BEFORE TRUNCATE ON public.kept_aside
			FOR EACH STATEMENT EXECUTE FUNCTION community_deletion.enforce_community_truncate_fence()`,
		fmt.Sprintf("INSERT INTO public.kept_aside (community_id, id, kind) VALUES ('%s', 1, 'kept aside')", gone),
	} {
		_, err := service.Exec(t.Context(), sql)
		require.NoError(t, err, sql)
	}
	b.quiesce(t, gone)
	b.fence(t, gone)
	b.tombstone(t, gone)
	_, err := service.Exec(t.Context(), fmt.Sprintf("ALTER TABLE fixture_activity ATTACH PARTITION public.kept_aside FOR VALUES IN ('%s')", gone))
	requireSQLState(t, err, pgerrcode.InsufficientPrivilege, "holds rows of a community that was deleted")
	var attached bool
	require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT relispartition FROM pg_class WHERE oid = 'public.kept_aside'::regclass").Scan(&attached))
	require.False(t, attached)
	_, err = service.Exec(t.Context(), "DROP TABLE public.kept_aside")
	require.NoError(t, err)
	require.Empty(t, drift(t, b))
}

// The guard's own copies of what the migrations compute about a fence (its
// arguments, full and bound, whether a foreign key binds a table, whether
// a table has the statement or row fences, a child table's paths and their
// first steps; the guard runs as a superuser and so never calls the schema
// owner's functions) agree with the migrations' functions for every
// registered table and partition of a keyed deployment, fenced whole,
// bound and unbound, and tampered with in several ways.
func TestDDLGuardAgreesWithTheMigrationsOnFences(t *testing.T) {
	t.Parallel()
	for _, kind := range kindsFor(t) {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			d := newKeyedDeployment(t, kind, false, false)
			b := d.b
			d.run(t, fmt.Sprintf("CREATE TABLE svc.events_sub PARTITION OF svc.events FOR VALUES IN ('%s') PARTITION BY RANGE (id)", kind.keys[4]),
				"CREATE TABLE svc.events_sub_low PARTITION OF svc.events_sub FOR VALUES FROM (0) TO (1000)")
			require.NoError(t, b.execAs(t, fixture.RoleServing,
				fmt.Sprintf("INSERT INTO svc.accounts (id, name) VALUES ('%s', 'sub'), ('%s', 'run')", kind.keys[4], kind.keys[5])))
			d.run(t, fmt.Sprintf("CREATE TABLE svc.ledger_sub PARTITION OF svc.ledger FOR VALUES IN ('%s') PARTITION BY RANGE (id)", kind.keys[4]),
				"CREATE TABLE svc.ledger_sub_low PARTITION OF svc.ledger_sub FOR VALUES FROM (0) TO (1000)")
			b.execInRun(t, fmt.Sprintf("CREATE TABLE svc.events_run PARTITION OF svc.events FOR VALUES IN ('%s')", kind.keys[5]),
				fmt.Sprintf("CREATE TABLE svc.ledger_run PARTITION OF svc.ledger FOR VALUES IN ('%s')", kind.keys[5]))
			disagreements := func() []string {
				t.Helper()
				rows, err := b.pool.Query(t.Context(), `
					WITH migrations AS (
						SELECT reg.relid, reg.root, reg.purge_action, reg.args AS guard_args, reg.full_args AS guard_full_args,
						       community_deletion.community_deletion_expected_fence_args(reg.root, r.purge_action, r.tenant_key, r.key_kind, r.parents) AS args,
						       CASE r.purge_action WHEN 'delete' THEN community_deletion.community_deletion_fence_args(r.tenant_key, r.key_kind, r.parents)
						            ELSE community_deletion.community_deletion_kept_row_args(r.tenant_key, r.key_kind) END AS full_args,
						       CASE r.purge_action WHEN 'delete' THEN 'community_deletion.enforce_community_write_fence()'
						            ELSE 'community_deletion.enforce_community_kept_row_fence()' END::regprocedure AS fence,
						       CASE r.purge_action WHEN 'delete' THEN 'community_deletion.enforce_community_write_fence_row()'
						            ELSE 'community_deletion.enforce_community_kept_row_fence_row()' END::regprocedure AS row_fence,
						       r.parents, r.tenant_key, r.key_kind
						FROM community_deletion.community_deletion_ddl_guard_registered() reg
						JOIN community_deletion.community_scoped_tables r ON r.table_schema = reg.table_schema AND r.table_name = reg.table_name),
					compared AS (
						SELECT m.*, community_deletion.community_deletion_bound_args(m.full_args) AS bound_args FROM migrations m)
					SELECT m.relid::regclass::text || ' ' || x.what
					FROM compared m
					CROSS JOIN LATERAL (VALUES
						('args', m.guard_args IS DISTINCT FROM m.args),
						('full args', m.guard_full_args IS DISTINCT FROM m.full_args),
						('bound args', community_deletion.community_deletion_ddl_guard_bound_args(m.full_args) IS DISTINCT FROM m.bound_args),
						('bound', community_deletion.community_deletion_ddl_guard_fence_bound(m.relid, m.tenant_key, m.parents)
						          IS DISTINCT FROM community_deletion.community_deletion_fence_bound(m.relid, m.tenant_key, m.parents)),
						('expected args', community_deletion.community_deletion_ddl_guard_expected_args(m.relid, m.purge_action, m.tenant_key, m.key_kind, m.parents)
						                  IS DISTINCT FROM community_deletion.community_deletion_expected_fence_args(m.relid, m.purge_action, m.tenant_key, m.key_kind, m.parents)),
						('trigger args', community_deletion.community_deletion_ddl_guard_trigger_args(m.args)
						                 IS DISTINCT FROM community_deletion.community_deletion_trigger_args(m.args)),
						('bound trigger args', community_deletion.community_deletion_ddl_guard_trigger_args(m.bound_args)
						                       IS DISTINCT FROM community_deletion.community_deletion_trigger_args(m.bound_args)),
						('statement fenced', community_deletion.community_deletion_ddl_guard_statement_fenced(m.relid, m.purge_action, m.args)
						                     IS DISTINCT FROM community_deletion.community_deletion_statement_fenced(m.relid, m.fence, m.args)),
						('statement fenced in full', community_deletion.community_deletion_ddl_guard_statement_fenced(m.relid, m.purge_action, m.full_args)
						                             IS DISTINCT FROM community_deletion.community_deletion_statement_fenced(m.relid, m.fence, m.full_args)),
						('statement fenced bound', community_deletion.community_deletion_ddl_guard_statement_fenced(m.relid, m.purge_action, m.bound_args)
						                           IS DISTINCT FROM community_deletion.community_deletion_statement_fenced(m.relid, m.fence, m.bound_args)),
						('row fenced', community_deletion.community_deletion_ddl_guard_row_fenced(m.relid, m.purge_action, m.args, true)
						               IS DISTINCT FROM community_deletion.community_deletion_row_fenced(m.relid, m.row_fence, m.args, true)),
						('row fence present', community_deletion.community_deletion_ddl_guard_row_fenced(m.relid, m.purge_action, m.args, false)
						                      IS DISTINCT FROM community_deletion.community_deletion_row_fenced(m.relid, m.row_fence, m.args, false)),
						('paths', m.parents IS NOT NULL AND m.relid = m.root AND
						          community_deletion.community_deletion_ddl_guard_child_paths(m.relid, NULL, NULL)
						          IS DISTINCT FROM community_deletion.community_deletion_child_paths(m.relid, NULL, NULL)),
						('first steps', m.parents IS NOT NULL AND m.relid = m.root AND
						                (community_deletion.community_deletion_ddl_guard_first_steps(m.parents, false)
						                 IS DISTINCT FROM community_deletion.community_deletion_first_steps(m.parents, false)
						                 OR community_deletion.community_deletion_ddl_guard_first_steps(m.parents, true)
						                    IS DISTINCT FROM community_deletion.community_deletion_first_steps(m.parents, true))),
						('paths of its steps', m.parents IS NOT NULL AND m.relid = m.root AND
						          community_deletion.community_deletion_ddl_guard_child_paths(m.relid,
						              coalesce(community_deletion.community_deletion_first_steps(m.parents, false), '{}'),
						              community_deletion.community_deletion_first_steps(m.parents, true))
						          IS DISTINCT FROM community_deletion.community_deletion_child_paths(m.relid,
						              coalesce(community_deletion.community_deletion_first_steps(m.parents, false), '{}'),
						              community_deletion.community_deletion_first_steps(m.parents, true)))
					) x (what, differs)
					WHERE x.differs ORDER BY 1`)
				require.NoError(t, err)
				found, err := pgx.CollectRows(rows, pgx.RowTo[string])
				require.NoError(t, err)
				return found
			}
			// What the comparison sees, so that it cannot pass by comparing
			// nothing: bound and full fences, paths both ways.
			bound := func() map[string]bool {
				t.Helper()
				rows, err := b.pool.Query(t.Context(), `SELECT reg.relid::regclass::text, cardinality(reg.args) = 3
					FROM community_deletion.community_deletion_ddl_guard_registered() reg`)
				require.NoError(t, err)
				found := map[string]bool{}
				for rows.Next() {
					var relation string
					var isBound bool
					require.NoError(t, rows.Scan(&relation, &isBound))
					found[relation] = isBound
				}
				require.NoError(t, rows.Err())
				return found
			}
			fenced := bound()
			for relation, want := range map[string]bool{"svc.ledger": true, "svc.ledger_sub_low": true, "svc.ledger_run": true,
				"svc.invoices": true, "svc.tasks": true, "svc.attachments": true, "svc.blobs": true,
				"svc.projects": false, "svc.comments": false, "svc.events_sub_low": false, "svc.notes": false} {
				require.Equal(t, want, fenced[relation], relation)
			}
			require.Empty(t, disagreements(), "fenced whole")
			for _, tamper := range [][2]string{
				{"ALTER TABLE svc.projects DISABLE TRIGGER community_write_fence_update",
					"ALTER TABLE svc.projects ENABLE TRIGGER community_write_fence_update"},
				{`CREATE OR REPLACE TRIGGER community_write_fence_insert AFTER INSERT ON svc.projects
					REFERENCING NEW TABLE AS community_fence_new FOR EACH STATEMENT
					EXECUTE FUNCTION community_deletion.enforce_community_write_fence('id', 'integer')`,
					"SELECT community_deletion.attach_community_write_fence('svc.projects', 'delete', 'account_id')"},
				{"ALTER TABLE svc.events DISABLE TRIGGER community_write_fence_row",
					"SELECT community_deletion.attach_community_write_fence('svc.events', 'delete', 'account_id')"},
				{"ALTER TABLE svc.events_run DISABLE TRIGGER community_write_fence_row",
					"ALTER TABLE svc.events_run ENABLE TRIGGER community_write_fence_row"},
				{"DROP TRIGGER community_kept_row_fence_update ON svc.notes",
					"SELECT community_deletion.attach_community_write_fence('svc.notes', 'nullify', 'account_id')"},
				{"ALTER TABLE svc.tasks DROP CONSTRAINT tasks_project_id_fkey",
					"ALTER TABLE svc.tasks ADD CONSTRAINT tasks_project_id_fkey FOREIGN KEY (project_id) REFERENCES svc.projects (id)"},
				{"ALTER TABLE svc.comments ENABLE REPLICA TRIGGER community_write_fence_delete",
					"ALTER TABLE svc.comments ENABLE TRIGGER community_write_fence_delete"},
				// Unbound: the foreign keys that bind gone, bound fences left.
				{"ALTER TABLE svc.ledger DROP CONSTRAINT ledger_account_id_fkey",
					"ALTER TABLE svc.ledger ADD CONSTRAINT ledger_account_id_fkey FOREIGN KEY (account_id) REFERENCES svc.accounts (id)"},
				{"ALTER TABLE svc.invoices DROP CONSTRAINT invoices_account_id_fkey",
					"ALTER TABLE svc.invoices ADD CONSTRAINT invoices_account_id_fkey FOREIGN KEY (account_id) REFERENCES svc.accounts (id)"},
				{"ALTER TABLE svc.attachments DROP CONSTRAINT attachments_blob_id_fkey",
					"ALTER TABLE svc.attachments ADD CONSTRAINT attachments_blob_id_fkey FOREIGN KEY (blob_id) REFERENCES svc.blobs (id)"},
				// Full fences on a table a foreign key binds; a bound fence on
				// one it does not.
				{"SELECT community_deletion.community_deletion_ddl_guard_full_fences('svc.ledger')",
					"SELECT community_deletion.attach_community_write_fence('svc.ledger', 'delete', 'account_id')"},
				{`CREATE OR REPLACE TRIGGER community_write_fence_insert AFTER INSERT ON svc.projects
					REFERENCING NEW TABLE AS community_fence_new FOR EACH STATEMENT
					EXECUTE FUNCTION community_deletion.enforce_community_write_fence('account_id', '` + kind.name + `', 'bound')`,
					"SELECT community_deletion.attach_community_write_fence('svc.projects', 'delete', 'account_id')"},
				{"ALTER TABLE svc.ledger_active DISABLE TRIGGER community_write_fence_update",
					"ALTER TABLE svc.ledger_active ENABLE TRIGGER community_write_fence_update"},
			} {
				b.execInRun(t, tamper[0])
				require.Empty(t, disagreements(), tamper[0])
				b.execInRun(t, tamper[1])
			}
			require.Empty(t, disagreements(), "put back")
			require.Equal(t, fenced, bound(), "put back")
		})
	}
}
