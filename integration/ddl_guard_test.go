package integration

import (
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgerrcode"
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
