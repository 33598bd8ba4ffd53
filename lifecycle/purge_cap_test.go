package lifecycle_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	dbgen "github.com/tombstoneworks/communitydeletion/db/gen"
	"github.com/tombstoneworks/communitydeletion/internal/fixture"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// newCapScene is a purge scene and an engine of the executor's role whose
// lock waits outlast the row locks the cap tests hold.
func newCapScene(t *testing.T) (*testBundle, purgeScene, *lifecycle.Engine) {
	t.Helper()
	b := setup(t)
	s := b.newPurgeScene(t)
	engine, err := lifecycle.NewEngine(t.Context(), fixture.RolePool(t, b.URL, fixture.RoleExecutor), &lifecycle.Opts{LockWait: time.Minute})
	require.NoError(t, err)
	return b, s, engine
}

// A batch that runs past its statement cap (twice TxBudget) is rolled back
// and tried again a quarter the size, reported as OverCap with its rows
// unchanged; one of a single row that still overruns runs once without the
// cap, so the purge goes on. Here every row of the first table the purge
// works on is locked by another transaction: each capped batch waits for
// the lock until its cap cancels it, and the uncapped one waits until the
// lock is released, which the test does only once that batch has waited
// ten caps (without the cap the first batch would be that one, and no
// batch would be over its cap; without the uncapped try the purge would
// stop or never wait that long).
func TestPurgePostgresRetriesABatchOverItsCapSmallerThenUncapped(t *testing.T) {
	t.Parallel()
	b, s, engine := newCapScene(t)
	ctx := t.Context()

	holder, err := b.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback(ctx) }()
	tag, err := holder.Exec(ctx, "SELECT 1 FROM fixture_audit_events WHERE community_id = $1 FOR UPDATE", s.target)
	require.NoError(t, err)
	require.Equal(t, s.counts["fixture_audit_events"], tag.RowsAffected())

	const budget = 25 * time.Millisecond // a cap of 50 ms
	var mu sync.Mutex
	var reports []lifecycle.PurgeProgress
	type outcome struct {
		result *lifecycle.PurgeResult
		err    error
	}
	done := make(chan outcome, 1)
	go func() {
		result, err := engine.EnterPostgresPurged(ctx, s.token, lifecycle.PurgeOptions{
			TxBudget: budget,
			Progress: func(p lifecycle.PurgeProgress) {
				mu.Lock()
				defer mu.Unlock()
				reports = append(reports, p)
			},
		})
		done <- outcome{result, err}
	}()

	b.waitForLockWaiters(t, 1, rowLock+" AND a.usename = $1 AND clock_timestamp() - a.query_start > $2::interval",
		string(fixture.RoleExecutor), (20 * budget).String())
	mu.Lock()
	before := append([]lifecycle.PurgeProgress(nil), reports...)
	mu.Unlock()
	require.NotEmpty(t, before, "batches cancelled at their cap before one waited uncapped")
	for _, p := range before {
		require.Equal(t, lifecycle.PurgeProgress{Table: "fixture_audit_events", OverCap: true}, p)
	}
	require.NoError(t, holder.Commit(ctx))

	got := <-done
	require.NoError(t, got.err)
	b.requirePurged(t, s.token)
	require.Equal(t, s.otherBefore, b.checksums(t, s.other))
	require.Equal(t, s.counts["fixture_audit_events"], got.result.Nullified["fixture_audit_events"])
	// Every batch over its cap was reported, and counted once. (On a slow
	// host a later batch may overrun a 50 ms cap too.)
	overCap := 0
	mu.Lock()
	for _, p := range reports {
		if p.OverCap {
			overCap++
		}
	}
	mu.Unlock()
	require.GreaterOrEqual(t, got.result.OverCapBatches, len(before))
	require.Equal(t, overCap, got.result.OverCapBatches)
	// The uncapped batch waited on the lock past twenty caps.
	require.Greater(t, got.result.LongestTx, 20*budget)
}

// The cap never lengthens a statement_timeout the session already has:
// it is the shorter of the two, and the cap alone where there is none.
func TestPurgeStatementCapKeepsAShorterSessionTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	for _, c := range []struct{ session, want string }{
		{"0", "50ms"}, {"30ms", "30ms"}, {"1min", "50ms"}, {"2s", "50ms"}, {"1h", "50ms"}, {"1d", "50ms"}, {"1", "1ms"},
	} {
		tx, err := b.Pool.Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, "SELECT set_config('statement_timeout', $1, true)", c.session)
		require.NoError(t, err)
		require.NoError(t, dbgen.New(tx).PurgeStatementCapSet(ctx, 50))
		var got string
		require.NoError(t, tx.QueryRow(ctx, "SHOW statement_timeout").Scan(&got))
		require.Equal(t, c.want, got, "session %s", c.session)
		require.NoError(t, tx.Rollback(ctx))
	}
}

// After an uncapped batch whose statement still ran past the cap, the next
// batch runs uncapped too, until one fits: where every row costs more than
// the cap, a capped try of each would be thrown away. The first row the
// purge takes is locked by one transaction and every other row of the
// table by a second; once the uncapped batch gets the first row, the next
// batch waits on the second transaction's rows with no batch over its cap
// in between (a capped one would be cancelled first, and reported).
func TestPurgePostgresStaysUncappedWhileRowsCostMoreThanTheCap(t *testing.T) {
	t.Parallel()
	b, s, engine := newCapScene(t)
	ctx := t.Context()

	hold := func(sql string) (pgx.Tx, int32) {
		tx, err := b.Pool.Begin(ctx)
		require.NoError(t, err)
		t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
		var pid int32
		require.NoError(t, tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid))
		_, err = tx.Exec(ctx, sql, s.target)
		require.NoError(t, err)
		return tx, pid
	}
	first, firstPid := hold("SELECT 1 FROM fixture_audit_events WHERE id = (SELECT min(id) FROM fixture_audit_events WHERE community_id = $1) FOR UPDATE")
	rest, restPid := hold("SELECT 1 FROM fixture_audit_events WHERE community_id = $1 AND id > (SELECT min(id) FROM fixture_audit_events WHERE community_id = $1) FOR UPDATE")

	const budget = 25 * time.Millisecond // a cap of 50 ms
	var mu sync.Mutex
	overCap := 0
	firstDone := make(chan int, 1) // the over-cap batches before the first row's batch committed
	done := make(chan error, 1)
	go func() {
		_, err := engine.EnterPostgresPurged(ctx, s.token, lifecycle.PurgeOptions{
			TxBudget: budget,
			Progress: func(p lifecycle.PurgeProgress) {
				mu.Lock()
				defer mu.Unlock()
				switch {
				case p.OverCap:
					overCap++
				case p.Table == "fixture_audit_events" && p.Rows == 1:
					firstDone <- overCap
				}
			},
		})
		done <- err
	}()

	waitingOn := func(pid int32) {
		b.waitForLockWaiters(t, 1, rowLock+" AND a.usename = $1 AND clock_timestamp() - a.query_start > $2::interval AND $3 = ANY (pg_blocking_pids(a.pid))",
			string(fixture.RoleExecutor), (20 * budget).String(), pid)
	}
	waitingOn(firstPid) // uncapped, after batches over the cap
	require.NoError(t, first.Commit(ctx))
	before := <-firstDone
	require.Positive(t, before)
	waitingOn(restPid) // uncapped at once
	mu.Lock()
	require.Equal(t, before, overCap, "no capped batch between the first row's and the next")
	mu.Unlock()
	require.NoError(t, rest.Commit(ctx))
	require.NoError(t, <-done)
	b.requirePurged(t, s.token)
}
