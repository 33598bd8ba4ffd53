package lifecycle_test

import (
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/fixture"
	"github.com/tombstoneworks/communitydeletion/internal/testfactory"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// TestPurgePostgresPlansEachHeapWalkBatchForItsWindow purges a table
// attached through its parent by its heap, in many batches, and asserts
// that no connection of the executor's pool holds the heap walk's batch as
// a prepared statement: one that did would run on a generic plan from its
// sixth call, which knows nothing of the window's bounds and scans the
// whole heap in every batch.
func TestPurgePostgresPlansEachHeapWalkBatchForItsWindow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	b.createPurgeChild(t)
	target := testfactory.Community(ctx, t, b.DB, nil).ID
	other := testfactory.Community(ctx, t, b.DB, nil).ID
	rows := testfactory.Rows{Members: 20, Channels: 4, Messages: 600}
	for _, c := range []uuid.UUID{target, other} {
		testfactory.WriteRows(ctx, t, b.DB, c, rows)
		require.NoError(t, b.exec(t, `INSERT INTO purge_child (message_id, payload)
			SELECT id, 'c' FROM fixture_messages WHERE community_id = $1`, c))
	}
	require.NoError(t, b.exec(t, "ANALYZE"))
	_, token := testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{CommunityID: target, Stage: lifecycle.StageBindingsRemoved})
	pool := fixture.RolePool(t, b.URL, fixture.RoleExecutor)
	engine, err := lifecycle.NewEngine(ctx, pool, nil)
	require.NoError(t, err)

	result, err := engine.EnterPostgresPurged(ctx, token, lifecycle.PurgeOptions{MaxRowsPerTx: 20, Method: lifecycle.PurgeMethodTIDRange})
	require.NoError(t, err)
	b.requirePurged(t, token)
	require.Equal(t, int64(rows.Messages), result.Deleted["purge_child"])
	require.Greater(t, result.Batches, 30, "enough batches of the heap walk for a generic plan")

	conns := pool.AcquireAllIdle(ctx)
	require.NotEmpty(t, conns)
	for _, conn := range conns {
		var prepared int
		// The simple protocol: this query is not prepared itself.
		err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_prepared_statements
			WHERE statement LIKE '%ctid >= $2::tid AND ctid < $3::tid%'`, pgx.QueryExecModeSimpleProtocol).Scan(&prepared)
		conn.Release()
		require.NoError(t, err)
		require.Zero(t, prepared, "the heap walk's batch is a prepared statement, which PostgreSQL plans generically from its sixth call")
	}
}
