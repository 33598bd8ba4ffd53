package lifecycle_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/ephemeralpg"
	"github.com/tombstoneworks/communitydeletion/internal/fixture"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// readyToPurge walks a new deletion of a community with rows in the fixture
// tables to bindings_removed through the real clients, and returns the
// claim's token (fenced).
func readyToPurge(t *testing.T, ctx context.Context, url string, pool *pgxpool.Pool, rows int) (lifecycle.LeaseToken, fixture.Clients) { //nolint:revive // t first, as in every test helper
	t.Helper()
	c := fixture.NewClients(t, url)
	var community string
	host := fmt.Sprintf("throttle-%d.example", time.Now().UnixNano())
	require.NoError(t, pool.QueryRow(ctx, "INSERT INTO communities (host) VALUES ($1) RETURNING id::text", host).Scan(&community))
	_, err := pool.Exec(ctx, `INSERT INTO fixture_members (community_id, handle)
		SELECT $1::uuid, 'member-' || g FROM generate_series(1, $2::int) g`, community, rows)
	require.NoError(t, err)
	request, err := c.Operator.Submit(ctx, host, "alice", "throttle test")
	require.NoError(t, err)
	schema, err := c.Operator.InventorySchema(ctx, request.CommunityID)
	require.NoError(t, err)
	storage := lifecycle.StorageManifest{Version: lifecycle.StorageManifestVersion, Prefixes: []lifecycle.PrefixManifest{
		{Prefix: "media/" + community + "/", KeysDigest: lifecycle.EmptyKeysDigest},
	}}
	_, err = c.Operator.FreezeInventory(ctx, request.ID, lifecycle.FrozenInventory{Schema: *schema, Storage: storage})
	require.NoError(t, err)
	_, err = c.Approver.Approve(ctx, request.ID, "bob", "ok")
	require.NoError(t, err)
	claim, err := c.Engine.ClaimRequest(ctx, request.ID, "executor-1", lifecycle.MaxLeaseDuration)
	require.NoError(t, err)
	require.NoError(t, c.Engine.BeginQuiescing(ctx, claim.Lease))
	generation, err := c.Engine.EnterFenced(ctx, claim.Lease)
	require.NoError(t, err)
	token := claim.Lease.WithFence(generation)
	require.NoError(t, c.Engine.FreezeDestructiveManifest(ctx, token, storage))
	require.NoError(t, c.Engine.EnterDrained(ctx, token))
	require.NoError(t, c.Engine.EnterBindingsRemoved(ctx, token, nil))
	return token, c
}

// The purge yields to a streaming replica that falls behind: with the
// replica's replay paused, it waits before its next batch (reporting why)
// while the replay lag is above its bound; resumed, the replica catches up
// and the purge finishes. A pause longer than MaxPause stops the purge with
// a *PurgePausedError, which is not a refusal. (A cluster of its own:
// pg_stat_replication is cluster-wide, and every other purge would pause.)
func TestPurgeWaitsForAReplicaThatFallsBehind(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	srv, err := ephemeralpg.Start(ctx, ephemeralpg.Options{})
	require.NoError(t, err)
	defer srv.Close(context.WithoutCancel(ctx))
	url, drop, err := srv.NewDatabase(ctx, fixture.Template{WithFixture: true})
	require.NoError(t, err)
	defer func() { _ = drop(context.WithoutCancel(ctx)) }()
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	defer pool.Close()
	replica, err := srv.StartReplica(ctx, ephemeralpg.ReplicaOptions{})
	require.NoError(t, err)
	defer replica.Close(context.WithoutCancel(ctx))

	token, c := readyToPurge(t, ctx, url, pool, 2000)
	require.NoError(t, replica.WaitCaughtUp(ctx))
	require.NoError(t, replica.PauseReplay(ctx))

	// A short MaxPause first: the purge stops, retryable, with the reason.
	opts := lifecycle.PurgeOptions{MaxRowsPerTx: 200, MaxReplicationLag: 500 * time.Millisecond, MaxPause: 3 * time.Second}
	var mu sync.Mutex
	var pauses []string
	var causes []lifecycle.PurgePauseCause
	opts.Progress = func(p lifecycle.PurgeProgress) {
		mu.Lock()
		defer mu.Unlock()
		if p.Paused != "" {
			pauses = append(pauses, p.Paused)
			causes = append(causes, p.PausedFor...)
		}
	}
	// Write while replay is paused, so the replica has WAL to fall behind on.
	_, err = pool.Exec(ctx, "CREATE TABLE lag_maker AS SELECT g FROM generate_series(1, 10000) g")
	require.NoError(t, err)
	require.NoError(t, replica.WaitReplayLag(ctx, opts.MaxReplicationLag))
	_, err = c.Engine.EnterPostgresPurged(ctx, token, opts)
	var paused *lifecycle.PurgePausedError
	require.ErrorAs(t, err, &paused)
	require.NotErrorIs(t, err, lifecycle.ErrRefused, "a pause is not a refusal")
	require.Contains(t, paused.Reason, "replication lag")
	require.GreaterOrEqual(t, paused.Paused, opts.MaxPause)
	mu.Lock()
	require.NotEmpty(t, pauses, "the pause is reported through Progress")
	require.Contains(t, pauses[0], "above 500ms")
	require.Equal(t, lifecycle.PauseReplicationLag, causes[0])
	mu.Unlock()
	_, err = pool.Exec(ctx, "DROP TABLE lag_maker")
	require.NoError(t, err)

	// Now with room to wait: the purge waits; resumed, it finishes.
	opts.MaxPause = time.Minute
	done := make(chan error, 1)
	go func() {
		_, err := c.Engine.EnterPostgresPurged(ctx, token, opts)
		done <- err
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		n := len(pauses)
		mu.Unlock()
		if n >= 5 { // the retry has been waiting for a while
			break
		}
		require.True(t, time.Now().Before(deadline), "the purge never paused")
		select {
		case err := <-done:
			t.Fatalf("the purge finished while the replica was behind: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	select {
	case err := <-done:
		t.Fatalf("the purge finished while the replica was behind: %v", err)
	default:
	}
	require.NoError(t, replica.ResumeReplay(ctx))
	require.NoError(t, <-done)
	var stage string
	require.NoError(t, pool.QueryRow(ctx, "SELECT stage FROM community_deletion_requests WHERE id = $1", token.RequestID).Scan(&stage))
	require.Equal(t, "postgres_purged", stage)
}

// MaxRowsPerSecond caps the purge's average rate: 600 rows at 300 rows/s
// take at least a second and a half (the first batch goes at once), and the
// waits are reported as pauses.
func TestPurgeKeepsToItsRateCap(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	token, c := readyToPurge(t, ctx, b.URL, b.Pool, 600)
	var pauses int
	started := time.Now()
	_, err := c.Engine.EnterPostgresPurged(ctx, token, lifecycle.PurgeOptions{
		MaxRowsPerTx: 100, MaxRowsPerSecond: 300,
		Progress: func(p lifecycle.PurgeProgress) {
			if slices.Contains(p.PausedFor, lifecycle.PauseRateCap) {
				require.Contains(t, p.Paused, "rate cap of 300 rows/s")
				pauses++
			}
		},
	})
	require.NoError(t, err)
	require.GreaterOrEqual(t, time.Since(started), 1500*time.Millisecond)
	require.Positive(t, pauses)
}

// tickingClock is a purge clock that moves on by step at every reading and
// by each of the purge's sleeps, which it records: every batch then takes
// exactly one step on it (read when the batch begins and when it ends),
// however long the host takes to run it.
type tickingClock struct {
	mu     sync.Mutex
	now    time.Time
	step   time.Duration
	sleeps []time.Duration
}

func newTickingClock(step time.Duration) *tickingClock {
	return &tickingClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), step: step}
}

func (c *tickingClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(c.step)
	return c.now
}

func (c *tickingClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	c.sleeps = append(c.sleeps, d)
	return ctx.Err()
}

// peek reads the clock without moving it.
func (c *tickingClock) peek() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *tickingClock) slept() (n int, total time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, d := range c.sleeps {
		total += d
	}
	return len(c.sleeps), total
}

// NiceRatio sleeps after each batch for the ratio times that batch's own
// duration on the purge's clock: with every batch taking one 10 ms step,
// each batch is followed by exactly one sleep of 25 ms at a ratio of 2.5,
// before the next batch begins, and the result counts them. At ratio 0 the
// purge never sleeps.
func TestPurgeSleepsItsNiceRatioAfterEachBatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	const step = 10 * time.Millisecond

	token, c := readyToPurge(t, ctx, b.URL, b.Pool, 600)
	clock := newTickingClock(step)
	var sleptBefore []int // sleeps done when each batch reported
	result, err := c.Engine.EnterPostgresPurged(ctx, token, lifecycle.PurgeOptions{
		MaxRowsPerTx: 100, NiceRatio: 2.5, Clock: clock,
		Progress: func(p lifecycle.PurgeProgress) {
			if p.Paused == "" {
				n, _ := clock.slept()
				sleptBefore = append(sleptBefore, n)
			}
		},
	})
	require.NoError(t, err)
	require.Greater(t, result.Batches, 3, "the purge ran in several batches")
	n, total := clock.slept()
	require.Equal(t, result.Batches, n, "one sleep per batch")
	clock.mu.Lock()
	for i, d := range clock.sleeps {
		require.Equal(t, 25*time.Millisecond, d, "sleep %d: 2.5 times the batch's 10 ms", i)
	}
	clock.mu.Unlock()
	require.Equal(t, total, result.Niced)
	// Batch i reported with i sleeps behind it: each sleep follows its
	// batch and comes before the next.
	require.Len(t, sleptBefore, result.Batches)
	for i, s := range sleptBefore {
		require.Equal(t, i, s, "sleeps done when batch %d committed", i)
	}

	token, c = readyToPurge(t, ctx, b.URL, b.Pool, 600)
	clock = newTickingClock(step)
	result, err = c.Engine.EnterPostgresPurged(ctx, token, lifecycle.PurgeOptions{MaxRowsPerTx: 100, Clock: clock})
	require.NoError(t, err)
	require.Greater(t, result.Batches, 3)
	n, _ = clock.slept()
	require.Zero(t, n, "no sleep at ratio 0")
	require.Zero(t, result.Niced)
}

// NiceRatio and MaxRowsPerSecond compose: between two batches the purge
// waits the longer of the two, not their sum. Each batch takes one 10 ms
// step on the purge's clock and earns a 500 ms nice sleep (ratio 50); at
// 40 rows/s the rate cap wants the next batch no sooner than the rows so
// far are due. The empty tables' batches and the first small ones (4, 16,
// 64 rows) make the nice sleep the longer wait, the later 100-row batches
// the rate cap's 2.5 s; the gap between batches follows the longer each
// time, up to the clock's ticks. (TxBudget is an hour so that the batch
// sizes do not depend on the host's speed.)
func TestPurgeNiceRatioAndRateCapTakeTheLongerWait(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	const (
		step = 10 * time.Millisecond
		nice = 500 * time.Millisecond
		rate = 40.0
	)
	token, c := readyToPurge(t, ctx, b.URL, b.Pool, 600)
	clock := newTickingClock(step)
	started := clock.peek().Add(step) // the purge's first reading
	type report struct {
		at   time.Time
		rows int64
	}
	var reports []report
	tables := map[string]int64{}
	result, err := c.Engine.EnterPostgresPurged(ctx, token, lifecycle.PurgeOptions{
		TxBudget: time.Hour, MaxRowsPerTx: 100, MaxRowsPerSecond: rate, NiceRatio: float64(nice / step), Clock: clock,
		Progress: func(p lifecycle.PurgeProgress) {
			if p.Paused == "" {
				tables[p.Table] = p.Rows
				var rows int64
				for _, n := range tables {
					rows += n
				}
				reports = append(reports, report{at: clock.peek(), rows: rows})
			}
		},
	})
	require.NoError(t, err)
	require.Len(t, reports, result.Batches)
	require.GreaterOrEqual(t, result.Batches, 7)
	var niceLonger, rateLonger int
	for k := 0; k+1 < len(reports); k++ {
		gap := reports[k+1].at.Sub(reports[k].at)
		due := started.Add(time.Duration(float64(reports[k].rows) / rate * float64(time.Second)))
		want := max(nice, due.Sub(reports[k].at))
		if want == nice {
			niceLonger++
		} else {
			rateLonger++
		}
		require.GreaterOrEqual(t, gap, want, "gap after batch %d", k)
		require.LessOrEqual(t, gap, want+4*step, "gap after batch %d: the longer wait is %s", k, want)
	}
	require.Positive(t, niceLonger, "a gap where the nice sleep is the longer")
	require.Positive(t, rateLonger, "a gap where the rate cap's wait is the longer")
	require.Equal(t, time.Duration(result.Batches)*nice, result.Niced)
}

// A nice ratio that is negative, NaN or infinite is refused as invalid
// input before anything is deleted.
func TestPurgeRefusesAnInvalidNiceRatio(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	token, c := readyToPurge(t, ctx, b.URL, b.Pool, 10)
	for _, ratio := range []float64{-1, math.NaN(), math.Inf(1), math.Inf(-1)} {
		_, err := c.Engine.EnterPostgresPurged(ctx, token, lifecycle.PurgeOptions{NiceRatio: ratio})
		require.ErrorIs(t, err, lifecycle.ErrInvalidInput, "%g", ratio)
		require.ErrorContains(t, err, "nice ratio")
	}
	var left int
	require.NoError(t, b.Pool.QueryRow(ctx, "SELECT count(*) FROM fixture_members WHERE community_id = $1", token.CommunityID).Scan(&left))
	require.Equal(t, 10, left, "nothing was deleted")
}
