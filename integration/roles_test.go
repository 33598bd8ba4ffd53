package integration

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/ephemeralpg"
	"github.com/tombstoneworks/communitydeletion/internal/exitcode"
	"github.com/tombstoneworks/communitydeletion/internal/fixture"
)

// On a cluster that does not have the deployment roles yet, a migrating role
// without CREATEROLE is refused with one line that names the statements a
// DBA must run first; once a DBA has run them, the same role migrates and
// owns every object; a role with CREATEROLE creates them itself. (A cluster
// of its own: the roles are cluster-wide, and the shared server has them.)
func TestMigrateCreatesTheDeploymentRolesOrNamesTheStatement(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	srv, err := ephemeralpg.Start(ctx, ephemeralpg.Options{})
	require.NoError(t, err)
	defer srv.Close(context.WithoutCancel(ctx))
	if srv.Source() != ephemeralpg.SourceLocal {
		t.Fatalf("this test needs a cluster of its own (local PostgreSQL binaries), not %s", srv.Source())
	}
	admin, err := pgx.Connect(ctx, srv.ConnString("postgres"))
	require.NoError(t, err)
	defer admin.Close(context.WithoutCancel(ctx))
	for _, sql := range []string{
		"CREATE ROLE plain_migrator LOGIN PASSWORD 'pw'",
		"CREATE DATABASE plain OWNER plain_migrator",
		"CREATE ROLE creating_migrator LOGIN CREATEROLE PASSWORD 'pw'",
		"CREATE DATABASE creating OWNER creating_migrator",
	} {
		_, err := admin.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	plainURL, err := fixture.LoginConnString(srv.ConnString("plain"), "plain_migrator", "pw")
	require.NoError(t, err)

	code, _, stderr := runMigrate(t, plainURL, "up")
	require.Equal(t, exitcode.Failure, code, stderr)
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	require.Len(t, lines, 1, stderr)
	require.Contains(t, lines[0], "community deletion roles are missing and role plain_migrator may not create roles; have a DBA run first: "+
		"CREATE ROLE community_deletion_executor NOLOGIN; CREATE ROLE community_deletion_operator NOLOGIN; CREATE ROLE community_deletion_serving NOLOGIN;")

	code, stdout, stderr := runMigrate(t, mustURL(t, srv, "creating", "creating_migrator"), "up")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "applied 00011_community_deletion_least_privilege.sql")
	var created int
	require.NoError(t, admin.QueryRow(ctx, `SELECT count(*) FROM pg_roles WHERE rolname IN
		('community_deletion_executor', 'community_deletion_operator', 'community_deletion_serving') AND NOT rolcanlogin`).Scan(&created))
	require.Equal(t, 3, created)

	// Now the roles exist (as if a DBA had created them): the plain role
	// migrates and owns everything it created.
	code, _, stderr = runMigrate(t, plainURL, "up")
	require.Equal(t, 0, code, stderr)
	plain, err := pgx.Connect(ctx, srv.ConnString("plain"))
	require.NoError(t, err)
	defer plain.Close(context.WithoutCancel(ctx))
	var owners []string
	rows, err := plain.Query(ctx, `SELECT DISTINCT pg_get_userbyid(relowner)::text FROM pg_class
		WHERE relnamespace = 'public'::regnamespace AND relname LIKE 'communit%'`)
	require.NoError(t, err)
	owners, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"plain_migrator"}, owners)

	// The DDL guard is an event trigger: a superuser's to install.
	code, _, stderr = runMigrate(t, plainURL, "install-ddl-guard")
	require.Equal(t, exitcode.Refused, code, stderr)
	require.Contains(t, stderr, "only a superuser may install or remove it")
	code, stdout, stderr = runMigrate(t, srv.ConnString("plain"), "install-ddl-guard")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "installed the DDL guard")
	// With the guard installed, the schema's owner (not a superuser) runs
	// the migration job in a run of the guard, which only a login of that
	// owner may open, and closes it again; 00021's Down itself refuses while
	// the guard lives in the schema it would drop (the Downs above it pass).
	code, _, stderr = runMigrate(t, plainURL, "down-to", "20")
	require.Equal(t, exitcode.Failure, code, stderr)
	require.Contains(t, stderr, "run `migrate uninstall-ddl-guard` first")
	var runs int
	require.NoError(t, plain.QueryRow(ctx, `SELECT count(*) FROM community_deletion.community_deletion_ddl_guard_runs
		WHERE login = 'plain_migrator' AND closed_at IS NOT NULL`).Scan(&runs))
	require.Equal(t, 1, runs)
	code, _, stderr = runMigrate(t, srv.ConnString("plain"), "uninstall-ddl-guard")
	require.Equal(t, 0, code, stderr)
	code, _, stderr = runMigrate(t, plainURL, "down-to", "20")
	require.Equal(t, 0, code, stderr)
	code, _, stderr = runMigrate(t, plainURL, "up")
	require.Equal(t, 0, code, stderr)
}

func mustURL(t *testing.T, srv *ephemeralpg.Server, database, user string) string {
	t.Helper()
	url, err := fixture.LoginConnString(srv.ConnString(database), user, "pw")
	require.NoError(t, err)
	return url
}
