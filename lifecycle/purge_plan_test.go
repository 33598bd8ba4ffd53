package lifecycle_test

import (
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/fixture"
	"github.com/tombstoneworks/communitydeletion/internal/testfactory"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// setupPurgeChild returns a test database with purge_child, a target and
// another community of messages rows each, with a child row per message,
// analyzed, and the target's request at bindings_removed.
func setupPurgeChild(t *testing.T, messages int) (*testBundle, lifecycle.LeaseToken, testfactory.Rows) {
	t.Helper()
	b := setup(t)
	ctx := t.Context()
	b.createPurgeChild(t)
	target := testfactory.Community(ctx, t, b.DB, nil).ID
	other := testfactory.Community(ctx, t, b.DB, nil).ID
	rows := testfactory.Rows{Members: 20, Channels: 4, Messages: messages}
	for _, c := range []uuid.UUID{target, other} {
		testfactory.WriteRows(ctx, t, b.DB, c, rows)
		require.NoError(t, b.exec(t, `INSERT INTO purge_child (message_id, payload)
			SELECT id, 'c' FROM fixture_messages WHERE community_id = $1`, c))
	}
	require.NoError(t, b.exec(t, "ANALYZE"))
	_, token := testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{CommunityID: target, Stage: lifecycle.StageBindingsRemoved})
	return b, token, rows
}

// TestPurgePostgresPlansEachHeapWalkBatchForItsWindow purges a table
// attached through its parent by its heap, in many batches, and asserts
// that no connection of the executor's pool holds the heap walk's batch as
// a prepared statement: one that did would run on a generic plan from its
// sixth call, which knows nothing of the window's bounds and scans the
// whole heap in every batch.
func TestPurgePostgresPlansEachHeapWalkBatchForItsWindow(t *testing.T) {
	t.Parallel()
	b, token, rows := setupPurgeChild(t, 600)
	ctx := t.Context()
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

// joinNode matches a hash or merge join of any kind in a plan in text form.
var joinNode = regexp.MustCompile(`(Hash|Merge)( Right| Left| Full)?( Semi| Anti)? Join`)

// TestPurgePostgresWalksAChildsHeapProbingItsParentsRowByRow purges a
// table attached through its parent by its heap, in windows of thousands
// of rows, with every plan of the executor's sessions sent to it by
// auto_explain, and asserts that each batch reached the parents by a
// nested loop. A hash or merge join, which the planner picks for such a
// window, reads every row of the tenant's parents in every batch.
func TestPurgePostgresWalksAChildsHeapProbingItsParentsRowByRow(t *testing.T) {
	t.Parallel()
	b, token, rows := setupPurgeChild(t, 4000)
	ctx := t.Context()

	// auto_explain, loaded into every new session of this database, sends
	// each statement's plan to its client as a notice.
	var database string
	require.NoError(t, b.Pool.QueryRow(ctx, "SELECT current_database()").Scan(&database))
	for _, setting := range []string{"session_preload_libraries = 'auto_explain'", "auto_explain.log_min_duration = 0",
		"auto_explain.log_level = 'notice'"} {
		require.NoError(t, b.exec(t, "ALTER DATABASE "+pgx.Identifier{database}.Sanitize()+" SET "+setting))
	}
	url, err := fixture.RoleConnString(b.URL, fixture.RoleExecutor)
	require.NoError(t, err)
	config, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	var mu sync.Mutex
	var plans []string
	config.ConnConfig.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		// The heap walk's batch of purge_child, the table attached
		// through its parent.
		if strings.Contains(n.Message, "ctid >= $2::tid AND ctid < $3::tid") && strings.Contains(n.Message, `FROM ONLY "public"."purge_child"`) {
			mu.Lock()
			plans = append(plans, n.Message)
			mu.Unlock()
		}
	}
	pool, err := pgxpool.NewWithConfig(ctx, config)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	engine, err := lifecycle.NewEngine(ctx, pool, nil)
	require.NoError(t, err)

	result, err := engine.EnterPostgresPurged(ctx, token, lifecycle.PurgeOptions{Method: lifecycle.PurgeMethodTIDRange})
	require.NoError(t, err)
	b.requirePurged(t, token)
	require.Equal(t, int64(rows.Messages), result.Deleted["purge_child"])

	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, plans, "auto_explain sent no plan of the heap walk's batch")
	for _, plan := range plans {
		require.NotRegexp(t, joinNode, plan, "a heap walk's batch joined the child's parents by hash or merge")
		require.Contains(t, plan, "Nested Loop")
	}
}
