package migration_test

import (
	"context"
	"database/sql"
	"io/fs"
	"path"
	"testing"
	"testing/fstest"

	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"

	communitydeletion "github.com/tombstoneworks/communitydeletion"
	"github.com/tombstoneworks/communitydeletion/migration"
)

// serviceMigrations are a vendoring service's own goose migrations. Their
// version numbers are ones this project uses too.
func serviceMigrations() fstest.MapFS {
	return fstest.MapFS{
		"00001_app.sql": {Data: []byte(`-- +goose Up
CREATE TABLE app_accounts (id bigint PRIMARY KEY, name text NOT NULL);
-- +goose Down
DROP TABLE app_accounts;
`)},
		"00002_app.sql": {Data: []byte(`-- +goose Up
CREATE TABLE app_sessions (id bigint PRIMARY KEY, account_id bigint NOT NULL REFERENCES app_accounts);
-- +goose Down
DROP TABLE app_sessions;
`)},
	}
}

// serviceGoose is the service's own goose provider over fsys, with goose's
// defaults: its version table is goose_db_version.
func serviceGoose(t *testing.T, db *sql.DB, fsys fs.FS) *goose.Provider {
	t.Helper()
	p, err := goose.NewProvider(goose.DialectPostgres, db, fsys, goose.WithDisableGlobalRegistry(true))
	require.NoError(t, err)
	return p
}

// gooseFiles lists the files of goose results.
func gooseFiles(res []*goose.MigrationResult) []string {
	var out []string
	for _, r := range res {
		out = append(out, path.Base(r.Source.Path))
	}
	return out
}

// projectFiles lists this project's migration files in version order.
func projectFiles(t *testing.T) []string {
	t.Helper()
	entries, err := fs.ReadDir(communitydeletion.Migrations(), ".")
	require.NoError(t, err)
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// appliedVersions lists the versions table records as applied, ascending,
// without goose's version 0 row; none when the table does not exist.
func appliedVersions(t *testing.T, db *sql.DB, table string) []int64 {
	t.Helper()
	if !relationExists(t, db, table) {
		return nil
	}
	rows, err := db.Query("SELECT version_id FROM " + table + " WHERE version_id > 0 AND is_applied ORDER BY version_id")
	require.NoError(t, err)
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var v int64
		require.NoError(t, rows.Scan(&v))
		out = append(out, v)
	}
	require.NoError(t, rows.Err())
	return out
}

// relationExists reports whether name resolves in the test database.
func relationExists(t *testing.T, db *sql.DB, name string) bool {
	t.Helper()
	var ok bool
	// Migration 00021 moves this project's tables into community_deletion.
	require.NoError(t, db.QueryRow("SELECT coalesce(to_regclass($1), to_regclass('community_deletion.' || quote_ident($1))) IS NOT NULL", name).Scan(&ok))
	return ok
}

// upTo returns 1, 2, ..., n.
func upTo(n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = int64(i + 1)
	}
	return out
}

// A service that manages its database with goose vendors this project's
// migrations, in either order: every migration of both is applied exactly
// once, each history stays in its own table, and a rerun of either applies
// nothing. With one shared table the service's 00001 and 00002 would be
// taken for ours and never run.
func TestVendoringBesideAServiceGoose(t *testing.T) {
	t.Parallel()
	for _, oursFirst := range []bool{true, false} {
		name := "theirs then ours"
		if oursFirst {
			name = "ours then theirs"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			ours := newMigrator(t, b.db)
			theirs := serviceGoose(t, b.db, serviceMigrations())
			want := projectFiles(t)

			var oursRes []migration.Result
			var theirsRes []*goose.MigrationResult
			var err error
			if oursFirst {
				oursRes, err = ours.Up(ctx)
				require.NoError(t, err)
			}
			theirsRes, err = theirs.Up(ctx)
			require.NoError(t, err)
			if !oursFirst {
				oursRes, err = ours.Up(ctx)
				require.NoError(t, err)
			}
			require.Equal(t, want, files(oursRes), "every one of our migrations applied once")
			require.Equal(t, []string{"00001_app.sql", "00002_app.sql"}, gooseFiles(theirsRes),
				"every one of the service's migrations applied once")
			require.True(t, relationExists(t, b.db, "communities"))
			require.True(t, relationExists(t, b.db, "app_accounts"))
			require.True(t, relationExists(t, b.db, "app_sessions"))

			require.Equal(t, upTo(len(want)), appliedVersions(t, b.db, migration.VersionTable))
			require.Equal(t, []int64{1, 2}, appliedVersions(t, b.db, migration.LegacyVersionTable),
				"the service's history holds only its own versions")

			oursRes, err = ours.Up(ctx)
			require.NoError(t, err)
			require.Empty(t, oursRes)
			theirsRes, err = theirs.Up(ctx)
			require.NoError(t, err)
			require.Empty(t, theirsRes)

			status, err := ours.Status(ctx)
			require.NoError(t, err)
			require.Len(t, status, len(want), "status lists only our migrations")
			for _, s := range status {
				require.Equal(t, migration.StateApplied, s.State, s.File)
			}
			v, err := ours.Version(ctx)
			require.NoError(t, err)
			require.Equal(t, int64(len(want)), v)
			v, err = theirs.GetDBVersion(ctx)
			require.NoError(t, err)
			require.Equal(t, int64(2), v)
		})
	}
}
