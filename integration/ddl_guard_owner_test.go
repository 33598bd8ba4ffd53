package integration

import (
	"context"
	"os"
	"testing"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	communitydeletion "github.com/tombstoneworks/communitydeletion"
	"github.com/tombstoneworks/communitydeletion/internal/ephemeralpg"
	"github.com/tombstoneworks/communitydeletion/internal/fixture"
	"github.com/tombstoneworks/communitydeletion/migration"
)

// schemaOwnerLogin owns schema community_deletion in the tests below, as the
// migrating role of a deployment does; it is no superuser.
const schemaOwnerLogin = "cd_test_schema_owner"

// guardedWithSchemaOwner hands schema community_deletion and its lease
// table to schemaOwnerLogin (who may also CREATE in public), installs the DDL
// guard and returns a pool connected as that owner.
func guardedWithSchemaOwner(t *testing.T) (*testBundle, *pgxpool.Pool) {
	t.Helper()
	b := setup(t)
	b.as(fixture.RoleServing) // creates the test logins
	password := schemaOwnerLogin + "-password"
	handSchemaTo(t, b, schemaOwnerLogin, password)
	installDDLGuard(t, b)
	url, err := fixture.LoginConnString(b.url, schemaOwnerLogin, password)
	require.NoError(t, err)
	owner, err := pgxpool.New(t.Context(), url)
	require.NoError(t, err)
	t.Cleanup(owner.Close)
	return b, owner
}

// handSchemaTo makes login (created if missing) the owner of schema
// community_deletion and of its lease table, as a deployment's migrating
// role is, and lets it CREATE in public; it is no superuser.
func handSchemaTo(t *testing.T, b *testBundle, login, password string, more ...string) {
	t.Helper()
	require.NoError(t, fixture.EnsureLogins(t.Context(), b.url, []fixture.Login{{Name: login, Password: password}}))
	for _, sql := range append([]string{
		"ALTER SCHEMA community_deletion OWNER TO " + login,
		"ALTER TABLE community_deletion.community_serving_write_leases OWNER TO " + login,
		"GRANT CREATE ON SCHEMA public TO " + login,
	}, more...) {
		require.NoError(t, b.exec(t, sql), sql)
	}
}

// schemaSnapshot is what the owner of community_deletion could change there:
// its functions, operators, indexes, its ACL, and the event triggers.
func schemaSnapshot(t *testing.T, b *testBundle) string {
	t.Helper()
	var snapshot string
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT concat_ws(E'\n',
		(SELECT string_agg(oid::regprocedure::text, ',' ORDER BY oid::regprocedure::text) FROM pg_proc
		 WHERE pronamespace = 'community_deletion'::regnamespace),
		(SELECT string_agg(oid::regoperator::text, ',') FROM pg_operator WHERE oprnamespace = 'community_deletion'::regnamespace),
		(SELECT string_agg(indexrelid::regclass::text, ',' ORDER BY indexrelid::regclass::text) FROM pg_index i
		 JOIN pg_class c ON c.oid = i.indrelid WHERE c.relnamespace = 'community_deletion'::regnamespace),
		(SELECT nspacl::text FROM pg_namespace WHERE nspname = 'community_deletion'),
		(SELECT string_agg(evtname || ' ' || evtenabled::text, ',' ORDER BY evtname) FROM pg_event_trigger))`).Scan(&snapshot))
	return snapshot
}

// The owner of community_deletion, outside a migration run, cannot change
// that schema: no function or operator created there or moved there, no
// CREATE granted on it, no index added to a control table, and neither the
// guard's functions nor the schema dropped (a schema's owner may drop
// anything in it, and CASCADE would take the event triggers along). Each is
// refused (42501) and nothing changes.
func TestDDLGuardRefusesTheSchemaOwnerOutsideAMigrationRun(t *testing.T) {
	t.Parallel()
	b, owner := guardedWithSchemaOwner(t)
	_, err := owner.Exec(t.Context(), "CREATE FUNCTION public.planted_format(text, uuid) RETURNS text LANGUAGE sql AS 'SELECT $1'")
	require.NoError(t, err, "DDL outside community_deletion passes")
	for _, tc := range []struct{ name, sql, message string }{
		{"a function overloading a built-in", `CREATE FUNCTION community_deletion.format(text, uuid) RETURNS text
			LANGUAGE sql AS 'SELECT $1'`, "changes function community_deletion.format(pg_catalog.text,pg_catalog.uuid) in schema community_deletion"},
		{"a function named like the project's", `CREATE FUNCTION community_deletion.community_deletion_backdoor() RETURNS void
			LANGUAGE sql AS ''`, "in schema community_deletion outside a migration run"},
		{"an operator between name and text", `CREATE OPERATOR community_deletion.= (LEFTARG = name, RIGHTARG = text,
			FUNCTION = pg_catalog.nameeqtext)`, "changes operator community_deletion.="},
		{"a function moved into the schema", "ALTER FUNCTION public.planted_format(text, uuid) SET SCHEMA community_deletion",
			"in schema community_deletion outside a migration run"},
		{"CREATE granted to a service", "GRANT CREATE ON SCHEMA community_deletion TO " + string(fixture.RoleServing),
			"leaves CREATE on schema community_deletion with " + string(fixture.RoleServing)},
		{"CREATE granted to PUBLIC", "GRANT CREATE ON SCHEMA community_deletion TO PUBLIC",
			"leaves CREATE on schema community_deletion with PUBLIC"},
		{"an index on a control table", "CREATE INDEX lease_owner_idx ON community_deletion.community_serving_write_leases (owner)",
			"in schema community_deletion outside a migration run"},
		{"the guard's function dropped with its event trigger", "DROP FUNCTION community_deletion.community_deletion_ddl_guard() CASCADE",
			"could drop the DDL guard"},
		{"the schema dropped", "DROP SCHEMA community_deletion CASCADE", "could drop the DDL guard"},
		{"the owner's objects dropped", "DROP OWNED BY " + schemaOwnerLogin + " CASCADE", "could drop the DDL guard"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := schemaSnapshot(t, b)
			_, err := owner.Exec(t.Context(), tc.sql)
			requireSQLState(t, err, pgerrcode.InsufficientPrivilege, tc.message)
			require.Equal(t, before, schemaSnapshot(t, b))
			require.Empty(t, drift(t, b))
		})
	}
	var planted string
	require.NoError(t, b.pool.QueryRow(t.Context(),
		"SELECT pronamespace::regnamespace::text FROM pg_proc WHERE proname = 'planted_format'").Scan(&planted))
	require.Equal(t, "public", planted)
}

// A migration run is what the owner of community_deletion opens, and no one
// else: a service, an operator or the executor asking to open one is
// refused (42501), and holding the schema-destruction lock, which any role
// may take, exempts nothing. The owner's run may change the schema; once
// closed, the same change is refused again, and every run stays on record.
func TestDDLGuardRunsAreOpenedOnlyByTheSchemaOwner(t *testing.T) {
	t.Parallel()
	b, owner := guardedWithSchemaOwner(t)
	ctx := t.Context()
	for _, role := range []fixture.Role{fixture.RoleServing, fixture.RoleOperator, fixture.RoleExecutor} {
		_, err := b.as(role).Exec(ctx, "SELECT community_deletion.community_deletion_ddl_guard_open_run()")
		requireSQLState(t, err, pgerrcode.InsufficientPrivilege, "migration run refused: login "+string(role)+" is not a member of "+schemaOwnerLogin)
	}
	require.NoError(t, b.exec(t, "GRANT CREATE ON SCHEMA public TO "+string(fixture.RoleOperator)))
	conn, err := b.as(fixture.RoleOperator).Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, "SELECT pg_advisory_lock(community_deletion.community_schema_destruction_lock_key())")
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "CREATE OPERATOR public.= (LEFTARG = name, RIGHTARG = text, FUNCTION = pg_catalog.nameeqtext)")
	require.NoError(t, err, "an operator in public is the drift report's to flag, not the guard's")
	_, err = conn.Exec(ctx, "ALTER OPERATOR public.=(name, text) SET SCHEMA community_deletion")
	require.Error(t, err, "the operator may not CREATE in community_deletion at all")
	_, err = conn.Exec(ctx, "SELECT pg_advisory_unlock(community_deletion.community_schema_destruction_lock_key())")
	require.NoError(t, err)

	session, err := owner.Acquire(ctx)
	require.NoError(t, err)
	defer session.Release()
	create := "CREATE FUNCTION community_deletion.community_deletion_scratch() RETURNS int LANGUAGE sql AS 'SELECT 1'"
	for _, sql := range []string{
		"SELECT community_deletion.community_deletion_ddl_guard_open_run()",
		create,
		"DROP FUNCTION community_deletion.community_deletion_scratch()",
		"SELECT community_deletion.community_deletion_ddl_guard_close_run()",
	} {
		_, err := session.Exec(ctx, sql)
		require.NoError(t, err, "in the owner's run: %s", sql)
	}
	before := schemaSnapshot(t, b)
	_, err = session.Exec(ctx, create)
	requireSQLState(t, err, pgerrcode.InsufficientPrivilege, "outside a migration run")
	require.Equal(t, before, schemaSnapshot(t, b))
	var runs []string
	rows, err := b.pool.Query(ctx, `SELECT login || ' ' || (closed_at IS NOT NULL)::text
		FROM community_deletion.community_deletion_ddl_guard_runs ORDER BY id`)
	require.NoError(t, err)
	for rows.Next() {
		var run string
		require.NoError(t, rows.Scan(&run))
		runs = append(runs, run)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{schemaOwnerLogin + " true"}, runs)
	require.Empty(t, drift(t, b))
}

// A database migrated and guarded by the release before migration 00021:
// its guard lives in the schema of communities and adds TRUNCATE fences of
// its own. 00021 runs once that guard's event triggers are gone; what else
// of it is left (functions, tables, TRUNCATE fences) today's install
// removes, so that one guard remains, in community_deletion, and it holds.
func TestDDLGuardInstallReplacesAnEarlierReleasesGuard(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := ephemeralpg.NewEmptyTestDatabase(t, server)
	m, err := migration.Open(ctx, url)
	require.NoError(t, err)
	defer m.Close()
	_, err = m.UpTo(ctx, 20)
	require.NoError(t, err)
	db, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer db.Close(context.WithoutCancel(ctx))
	earlier, err := os.ReadFile("testdata/ddl_guard_before_00021.sql")
	require.NoError(t, err)
	for _, sql := range []string{
		"CREATE TABLE notes (id bigint PRIMARY KEY, community_id uuid NOT NULL REFERENCES communities (id))",
		"SELECT attach_community_write_fence('notes')",
		string(earlier),
		"DROP EVENT TRIGGER community_deletion_ddl_guard",
		"DROP EVENT TRIGGER community_deletion_ddl_guard_rewrite",
	} {
		_, err := db.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	leftovers := func() string {
		var s string
		require.NoError(t, db.QueryRow(ctx, `SELECT concat_ws(',',
			(SELECT string_agg(oid::regprocedure::text, ',' ORDER BY 1) FROM pg_proc
			 WHERE proname LIKE 'community\_deletion\_ddl\_guard%' AND pronamespace <> 'community_deletion'::regnamespace),
			(SELECT string_agg(oid::regclass::text, ',' ORDER BY 1) FROM pg_class
			 WHERE relname LIKE 'community\_deletion\_ddl\_guard%' AND relnamespace <> 'community_deletion'::regnamespace),
			(SELECT string_agg(tgname || ' on ' || tgrelid::regclass::text, ',' ORDER BY 1) FROM pg_trigger
			 WHERE tgname = 'community_deletion_truncate_fence'))`).Scan(&s))
		return s
	}
	_, err = m.Up(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, leftovers(), "the earlier guard left functions, tables and TRUNCATE fences behind")
	// 00021 fences partitioned tables against TRUNCATE; attach fences the rest.
	_, err = db.Exec(ctx, "SELECT community_deletion.attach_community_write_fence('notes')")
	require.NoError(t, err)

	install, _ := communitydeletion.DDLGuard()
	_, err = db.Exec(ctx, install)
	require.NoError(t, err)
	require.Empty(t, leftovers())
	var guards int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM pg_event_trigger e JOIN pg_proc p ON p.oid = e.evtfoid
		WHERE p.pronamespace = 'community_deletion'::regnamespace`).Scan(&guards))
	require.Equal(t, 4, guards)
	_, err = db.Exec(ctx, "ALTER TABLE notes DISABLE TRIGGER community_write_fence_truncate")
	requireSQLState(t, err, pgerrcode.InsufficientPrivilege, "public.notes unfenced: no TRUNCATE fence")
}

// The control table and guard triggers of migrations 00025 and 00026 are
// held like the others: the owner of schema community_deletion, given
// community_deletion_references, communities and community_deletion_requests
// in a migration run, cannot outside one disable, drop or re-enable for
// replication a guard trigger of theirs, drop their keys and checks, or add
// a trigger there (42501); each table stays as it was.
func TestDDLGuardHoldsTheTenantKeyControlTables(t *testing.T) {
	t.Parallel()
	b, owner := guardedWithSchemaOwner(t)
	b.execInRun(t,
		"ALTER TABLE community_deletion.community_deletion_references OWNER TO "+schemaOwnerLogin,
		"ALTER TABLE community_deletion.communities OWNER TO "+schemaOwnerLogin,
		"ALTER TABLE community_deletion.community_deletion_requests OWNER TO "+schemaOwnerLogin)
	_, err := owner.Exec(t.Context(), `CREATE FUNCTION public.declare_anything() RETURNS trigger LANGUAGE plpgsql
		AS $$ BEGIN RETURN NEW; END $$`)
	require.NoError(t, err)
	for _, tc := range []struct{ table, sql string }{
		{"community_deletion.community_deletion_references",
			"ALTER TABLE community_deletion.community_deletion_references DISABLE TRIGGER community_deletion_references_guard"},
		{"community_deletion.community_deletion_references",
			"DROP TRIGGER community_deletion_references_truncate_guard ON community_deletion.community_deletion_references"},
		{"community_deletion.community_deletion_references",
			"ALTER TABLE community_deletion.community_deletion_references DROP CONSTRAINT community_deletion_references_pkey"},
		{"community_deletion.community_deletion_references",
			"ALTER TABLE community_deletion.community_deletion_references DROP CONSTRAINT community_deletion_references_reason_check"},
		{"community_deletion.community_deletion_references",
			`CREATE TRIGGER declare_anything BEFORE INSERT ON community_deletion.community_deletion_references
				FOR EACH ROW EXECUTE FUNCTION public.declare_anything()`},
		{"community_deletion.communities",
			"ALTER TABLE community_deletion.communities DISABLE TRIGGER communities_tenant_key_guard"},
		{"community_deletion.communities",
			"ALTER TABLE community_deletion.communities DROP CONSTRAINT communities_tenant_key_check"},
		{"community_deletion.community_deletion_requests",
			"DROP TRIGGER community_deletion_requests_tenant_key_guard ON community_deletion.community_deletion_requests"},
		{"community_deletion.community_deletion_requests",
			"ALTER TABLE community_deletion.community_deletion_requests ENABLE REPLICA TRIGGER community_deletion_requests_tenant_key_guard"},
	} {
		t.Run(tc.sql, func(t *testing.T) {
			before := controlSnapshot(t, b, tc.table)
			_, err := owner.Exec(t.Context(), tc.sql)
			requireSQLState(t, err, pgerrcode.InsufficientPrivilege, "DDL refused: ")
			require.Equal(t, before, controlSnapshot(t, b, tc.table))
			require.Empty(t, drift(t, b))
		})
	}
}
