package integration

import (
	"context"
	"database/sql"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/ephemeralpg"
	"github.com/tombstoneworks/communitydeletion/migration"
)

// A plain (unpartitioned) tenant table registered before migration 00021
// got no TRUNCATE fence from it (it listed tables with pg_partition_tree()
// alone); 00022 adds the fence, and its Down removes exactly what it added.
func TestMigration22GivesUpgradedPlainTablesTheirTruncateFence(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := ephemeralpg.NewEmptyTestDatabase(t, server)
	config, err := pgx.ParseConfig(url)
	require.NoError(t, err)
	db := stdlib.OpenDB(*config)
	t.Cleanup(func() { _ = db.Close() })
	m, err := migration.New(db)
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })

	_, err = m.UpTo(ctx, 20)
	require.NoError(t, err)
	for _, stmt := range []string{
		"CREATE TABLE notes (id bigint PRIMARY KEY, community_id uuid NOT NULL REFERENCES communities (id))",
		"SELECT attach_community_write_fence('notes')",
		"CREATE TABLE attached_later (id bigint PRIMARY KEY, community_id uuid NOT NULL REFERENCES communities (id))",
	} {
		_, err := db.ExecContext(ctx, stmt)
		require.NoError(t, err, stmt)
	}
	_, err = m.UpTo(ctx, 21)
	require.NoError(t, err)
	require.False(t, truncateFenced(t, db, "notes"), "00021 missed the plain table")
	require.Contains(t, driftOf(t, db), "notes unfenced: no TRUNCATE fence; run attach_community_write_fence again")

	// Attached after 00021: attach gives it the fence itself.
	_, err = db.ExecContext(ctx, "SELECT community_deletion.attach_community_write_fence('public.attached_later')")
	require.NoError(t, err)

	_, err = m.UpTo(ctx, 22)
	require.NoError(t, err)
	require.True(t, truncateFenced(t, db, "notes"))
	require.Empty(t, driftOf(t, db))

	_, err = m.Down(ctx)
	require.NoError(t, err)
	require.False(t, truncateFenced(t, db, "notes"), "Down removes the fence it added")
	require.True(t, truncateFenced(t, db, "attached_later"), "and only that one")
}

func truncateFenced(t *testing.T, db *sql.DB, table string) bool {
	t.Helper()
	var fenced bool
	require.NoError(t, db.QueryRowContext(context.WithoutCancel(t.Context()), `SELECT EXISTS (SELECT 1 FROM pg_trigger
		WHERE tgrelid = to_regclass('public.' || quote_ident($1)) AND tgname = 'community_write_fence_truncate')`, table).Scan(&fenced))
	return fenced
}

func driftOf(t *testing.T, db *sql.DB) []string {
	t.Helper()
	rows, err := db.QueryContext(t.Context(), "SELECT table_name || ' ' || problem FROM community_deletion.community_deletion_catalog_drift()")
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var line string
		require.NoError(t, rows.Scan(&line))
		out = append(out, line)
	}
	require.NoError(t, rows.Err())
	return out
}
