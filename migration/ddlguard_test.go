package migration_test

import (
	"context"
	"io/fs"
	"testing"
	"testing/fstest"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	communitydeletion "github.com/tombstoneworks/communitydeletion"
	"github.com/tombstoneworks/communitydeletion/migration"
)

// With the DDL guard installed, the migration job's runs are the guard's
// migration runs: a migration that changes schema community_deletion (here
// an index on a control table) applies and rolls back, each run is recorded
// and closed, and the same DDL on a pooled session outside a run is refused.
func TestMigrationRunsPassTheDDLGuard(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	withProbe := fstest.MapFS{}
	entries, err := fs.ReadDir(communitydeletion.Migrations(), ".")
	require.NoError(t, err)
	for _, entry := range entries {
		data, err := fs.ReadFile(communitydeletion.Migrations(), entry.Name())
		require.NoError(t, err)
		withProbe[entry.Name()] = &fstest.MapFile{Data: data}
	}
	withProbe["00099_guard_probe.sql"] = &fstest.MapFile{Data: []byte(`-- +goose Up
CREATE INDEX guard_probe_idx ON community_deletion.community_serving_write_leases (owner);
-- +goose Down
DROP INDEX community_deletion.guard_probe_idx;
`)}
	m := newMigrator(t, b.db, migration.WithMigrations(withProbe))
	_, err = m.UpTo(ctx, 98)
	require.NoError(t, err)
	require.NoError(t, m.InstallDDLGuard(ctx))

	_, err = b.db.ExecContext(ctx, "CREATE INDEX outside_run_idx ON community_deletion.community_serving_write_leases (owner)")
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, pgerrcode.InsufficientPrivilege, pgErr.Code, pgErr.Message)

	res, err := m.Up(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"00099_guard_probe.sql"}, files(res))
	_, err = m.Down(ctx)
	require.NoError(t, err)
	_, err = m.Up(ctx)
	require.NoError(t, err)

	var runs, open int
	require.NoError(t, b.db.QueryRowContext(ctx, `SELECT count(*), count(*) FILTER (WHERE closed_at IS NULL)
		FROM community_deletion.community_deletion_ddl_guard_runs`).Scan(&runs, &open))
	require.GreaterOrEqual(t, runs, 3)
	require.Zero(t, open)
	for range 3 { // whichever pooled session ran the migrations
		_, err = b.db.ExecContext(ctx, "DROP INDEX community_deletion.guard_probe_idx")
		require.ErrorAs(t, err, &pgErr)
		require.Equal(t, pgerrcode.InsufficientPrivilege, pgErr.Code, pgErr.Message)
	}
	require.NoError(t, m.UninstallDDLGuard(ctx))
}
