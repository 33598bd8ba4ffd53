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

// registry is the whole registry, one "table/action/registered_by" a table.
func registry(t *testing.T, b *testBundle) string {
	t.Helper()
	var s string
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT coalesce(string_agg(
		table_name || '/' || purge_action || '/' || registered_by, ',' ORDER BY table_name), '')
		FROM community_scoped_tables`).Scan(&s))
	return s
}

// connectAs opens one session (temporary tables live as long as it) as a
// login, closed when the test ends.
func connectAs(t *testing.T, b *testBundle, user, password string) *pgx.Conn {
	t.Helper()
	url, err := fixture.LoginConnString(b.url, user, password)
	require.NoError(t, err)
	conn, err := pgx.Connect(t.Context(), url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// roleSession opens one session as a fixture login.
func roleSession(t *testing.T, b *testBundle, role fixture.Role) *pgx.Conn {
	t.Helper()
	b.as(role) // creates the fixture logins
	url, err := fixture.RoleConnString(b.url, role)
	require.NoError(t, err)
	conn, err := pgx.Connect(t.Context(), url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// A login that owns nothing cannot register another owner's table through a
// temporary table of the same name (which its unqualified name resolves to
// first) nor through a table of its own in another schema: the registry
// records a bare name, which would later mean the real table. Attach,
// register and detach refuse both (42501) and the registry is unchanged;
// the real table's owner still attaches it.
func TestRegistryRefusesTemporaryAndForeignSchemaTables(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	b.as(fixture.RoleOutsider)
	for _, sql := range []string{
		// Another owner's tenant table, not yet registered.
		"CREATE TABLE tenant_shadowed (id bigserial PRIMARY KEY, community_id uuid)",
		// A schema the outsider owns a table in.
		"CREATE SCHEMA elsewhere",
		"CREATE TABLE elsewhere.tenant_shadowed (community_id uuid)",
		"ALTER TABLE elsewhere.tenant_shadowed OWNER TO " + string(fixture.RoleOutsider),
		"GRANT USAGE ON SCHEMA elsewhere TO " + string(fixture.RoleOutsider),
	} {
		require.NoError(t, b.exec(t, sql), sql)
	}
	before := registry(t, b)

	outsider := roleSession(t, b, fixture.RoleOutsider)
	for _, sql := range []string{
		"CREATE TEMP TABLE tenant_shadowed (community_id uuid)",
		"CREATE TEMP TABLE fixture_members (community_id uuid NOT NULL)",
	} {
		_, err := outsider.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	for call, contains := range map[string]string{
		"SELECT community_deletion_register_table('tenant_shadowed', 'nullify', 'community_id')":        "it is a temporary table",
		"SELECT community_deletion_register_table('pg_temp.fixture_members', 'delete', 'community_id')": "it is a temporary table",
		"SELECT attach_community_write_fence('tenant_shadowed', 'nullify')":                             "it is a temporary table",
		"SELECT detach_community_write_fence('fixture_members')":                                        "it is a temporary table",
	} {
		_, err := outsider.Exec(ctx, call)
		requireSQLState(t, err, pgerrcode.InsufficientPrivilege, contains)
		require.Equal(t, before, registry(t, b), "registry unchanged by %s", call)
	}

	// The owner attaches the real table, by its unqualified name.
	require.NoError(t, b.exec(t, "SELECT attach_community_write_fence('tenant_shadowed', 'nullify')"))
	require.Contains(t, registry(t, b), "tenant_shadowed/nullify/postgres")
	registered := registry(t, b)

	// A table of another schema the outsider owns may be registered, but
	// not under a name already registered from another schema: the
	// deletion's manifests name tables without their schema.
	_, err := outsider.Exec(ctx, "SELECT attach_community_write_fence('elsewhere.tenant_shadowed', 'nullify')")
	requireSQLState(t, err, pgerrcode.DuplicateObject, "a table named tenant_shadowed is already registered from schema public")
	require.Equal(t, registered, registry(t, b))
	// Nor may anyone register a table of this project's own schema or the system's.
	for _, target := range []string{"community_deletion.community_deletion_receipts", "pg_catalog.pg_class"} {
		err := b.exec(t, "SELECT attach_community_write_fence('"+target+"', 'nullify')")
		requireSQLState(t, err, pgerrcode.InvalidParameterValue, "is not in a schema that holds tenant tables")
		require.Equal(t, registered, registry(t, b))
	}
}

// A session's temporary tables are never drift, with or without a fence
// trigger: neither that session nor another sees a row for them (before,
// the fenced one was a 'stray_fence' that blocked every approved request).
// A permanent stray fence is still reported.
func TestDriftIgnoresTemporaryTables(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	serving := roleSession(t, b, fixture.RoleServing)
	for _, sql := range []string{
		"CREATE TEMP TABLE scratch_members (community_id uuid NOT NULL)",
		`CREATE TRIGGER community_write_fence_insert AFTER INSERT ON scratch_members
			REFERENCING NEW TABLE AS community_fence_new FOR EACH STATEMENT EXECUTE FUNCTION enforce_community_write_fence()`,
		"CREATE TEMP TABLE scratch_notes (id bigint, community_id uuid)",
	} {
		_, err := serving.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	require.Empty(t, drift(t, b), "another session")
	rows, err := serving.Query(ctx, "SELECT table_name, problem FROM community_deletion_catalog_drift()")
	require.NoError(t, err)
	same, err := pgx.CollectRows(rows, pgx.RowToStructByPos[driftRow])
	require.NoError(t, err)
	require.Empty(t, same, "the same session")

	require.NoError(t, b.exec(t, "CREATE TABLE scratch (id bigint)"))
	require.NoError(t, b.exec(t, `CREATE TRIGGER community_write_fence_insert AFTER INSERT ON scratch
		REFERENCING NEW TABLE AS community_fence_new FOR EACH STATEMENT EXECUTE FUNCTION enforce_community_write_fence()`))
	require.Equal(t, []driftRow{{"scratch", "stray_fence"}}, drift(t, b))
}

// A tenant table's owner that belongs to no deletion role attaches and
// detaches its own table, and only its own (42501 on another owner's, the
// registry unchanged).
func TestAttachByTableOwnerOutsideTheDeletionRoles(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	owner := "cd_test_table_owner_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	require.NoError(t, b.exec(t, fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD 'pw'", owner)))
	t.Cleanup(func() {
		cleanup := context.Background()
		_, _ = b.pool.Exec(cleanup, "DROP OWNED BY "+owner)
		_, _ = b.pool.Exec(cleanup, "DROP ROLE "+owner)
	})
	for _, sql := range []string{
		"CREATE TABLE tenant_owned (id bigserial PRIMARY KEY, community_id uuid NOT NULL REFERENCES communities (id))",
		"ALTER TABLE tenant_owned OWNER TO " + owner,
		"CREATE TABLE tenant_owned_audit (id bigserial PRIMARY KEY, community_id uuid REFERENCES communities (id))",
		"ALTER TABLE tenant_owned_audit OWNER TO " + owner,
	} {
		require.NoError(t, b.exec(t, sql), sql)
	}
	var member bool
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT pg_has_role($1, 'community_deletion_executor', 'MEMBER')
		OR pg_has_role($1, 'community_deletion_operator', 'MEMBER')
		OR pg_has_role($1, 'community_deletion_serving', 'MEMBER')`, owner).Scan(&member))
	require.False(t, member)
	conn := connectAs(t, b, owner, "pw")
	before := registry(t, b)

	for _, call := range []string{
		"SELECT attach_community_write_fence('fixture_members')",
		"SELECT attach_community_write_fence('fixture_audit_events', 'nullify')",
		"SELECT detach_community_write_fence('fixture_members')",
	} {
		_, err := conn.Exec(ctx, call)
		requireSQLState(t, err, pgerrcode.InsufficientPrivilege, "only its owner")
	}
	require.Equal(t, before, registry(t, b))
	require.Equal(t, 3, fenceTriggers(t, b, "fixture_members"))

	_, err := conn.Exec(ctx, "SELECT attach_community_write_fence('tenant_owned')")
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "SELECT attach_community_write_fence('tenant_owned_audit', 'nullify')")
	require.NoError(t, err)
	require.Contains(t, registry(t, b), "tenant_owned/delete/"+owner)
	require.Contains(t, registry(t, b), "tenant_owned_audit/nullify/"+owner)
	require.Equal(t, 3, fenceTriggers(t, b, "tenant_owned"))
	require.Empty(t, drift(t, b))
	// Attaching again is idempotent; a change of purge action is refused.
	_, err = conn.Exec(ctx, "SELECT attach_community_write_fence('tenant_owned')")
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "SELECT attach_community_write_fence('tenant_owned_audit', 'delete')")
	requireSQLState(t, err, pgerrcode.InvalidParameterValue, "it cannot change to 'delete'")

	_, err = conn.Exec(ctx, "SELECT detach_community_write_fence('tenant_owned')")
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "SELECT detach_community_write_fence('tenant_owned')")
	requireSQLState(t, err, pgerrcode.InvalidParameterValue, "is not a registered tenant table")
	require.NotContains(t, registry(t, b), "tenant_owned/")
	require.Equal(t, 0, fenceTriggers(t, b, "tenant_owned"))
}
