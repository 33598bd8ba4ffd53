package executor_test

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/executor"
	"github.com/tombstoneworks/communitydeletion/internal/fixture"
	"github.com/tombstoneworks/communitydeletion/internal/testfactory"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
	"github.com/tombstoneworks/communitydeletion/receipt"
)

// chunksOf is the number of manifest chunks that a community holding
// `files` files has under ChunkSize 2: 2*files+1 media keys and files upload keys.
func chunksOf(files int) int { return (2*files+1+1)/2 + (files+1)/2 }

func TestFullDeletion(t *testing.T) {
	t.Parallel()
	b := setup(t)
	target := b.createCommunity(t, 3)
	other := b.createCommunity(t, 3)
	otherRows := b.rows(t, other.id)
	id := b.approve(t, target)

	objects := newCounting(b.files)
	cfg := b.config("executor-1")
	cfg.Objects = objects
	var mu sync.Mutex
	var events []executor.Event
	cfg.Progress = func(ev executor.Event) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, ev)
	}
	claimed, err := b.runner(t, cfg).RunRequest(t.Context(), id)
	require.NoError(t, err)
	require.True(t, claimed)

	b.requireDeleted(t, id, target)
	b.requireIntact(t, other, otherRows)
	objects.requireEachOnce(t, chunksOf(3))
	// The runner settled the fence marker after the tombstone: no deletion
	// is in flight, so bound tables' writes skip the tenant check again.
	var marker int64
	require.NoError(t, b.Pool.QueryRow(t.Context(), "SELECT pg_sequence_last_value('community_deletion.community_deletion_fence_marker')").Scan(&marker))
	require.Zero(t, marker)

	// The completion wrote the receipt, with what the runner recorded:
	// objects per prefix, the cache purge, and absence in every store.
	env, err := cfg.Engine.Receipt(t.Context(), id)
	require.NoError(t, err)
	r, err := env.Receipt()
	require.NoError(t, err)
	require.Equal(t, id, r.RequestID)
	var stores []string
	for _, a := range r.Absence {
		stores = append(stores, a.Store)
	}
	require.Equal(t, []string{receipt.StoreCache, receipt.StoreObjects, receipt.StorePostgres}, stores)
	require.Len(t, r.Cache, 1)
	done, err := cfg.Engine.Get(t.Context(), id)
	require.NoError(t, err)
	require.Len(t, r.Objects, len(done.DestructiveStorage.Prefixes))
	var deleted int64
	for i, o := range r.Objects {
		require.Equal(t, done.DestructiveStorage.Prefixes[i].Prefix, o.Prefix)
		require.EqualValues(t, done.DestructiveStorage.Prefixes[i].ObjectCount, o.Deleted)
		deleted += o.Deleted
	}
	require.Positive(t, deleted)

	stages := map[lifecycle.Stage]bool{}
	var purgeRows, chunkEvents bool
	for _, ev := range events {
		require.Equal(t, id, ev.RequestID)
		stages[ev.Stage] = true
		purgeRows = purgeRows || len(ev.TablesRows) > 0
		chunkEvents = chunkEvents || (ev.ChunksDone > 0 && ev.ChunksTotal == int64(chunksOf(3)))
	}
	require.True(t, purgeRows)
	require.True(t, chunkEvents)
	for _, s := range []lifecycle.Stage{lifecycle.StageFenced, lifecycle.StageDrained, lifecycle.StageBindingsRemoved,
		lifecycle.StagePostgresPurged, lifecycle.StageCachePurged, lifecycle.StageLogicallyVerified, lifecycle.StageRetentionPending} {
		require.True(t, stages[s], "no event at %s", s)
	}

	// Nothing is left to claim.
	claimed, err = b.runner(t, b.config("executor-2")).RunNext(t.Context())
	require.NoError(t, err)
	require.False(t, claimed)
}

func TestFailingDeleteBlocksAfterMaxRetriesThenRecovers(t *testing.T) {
	t.Parallel()
	b := setup(t)
	target := b.createCommunity(t, 1)
	id := b.approve(t, target)

	objects := newCounting(b.files)
	objects.fail = true
	cfg := b.config("executor-1")
	cfg.Objects = objects
	r := b.runner(t, cfg)
	deadline := time.Now().Add(time.Minute)
	for {
		request, err := b.Operator.Get(t.Context(), id)
		require.NoError(t, err)
		if request.Blocked() {
			require.Equal(t, lifecycle.StageDrained, request.Stage)
			break
		}
		require.True(t, time.Now().Before(deadline), "not blocked in time after %d attempts", objects.attempts())
		claimed, err := r.RunRequest(t.Context(), id)
		if claimed {
			require.ErrorIs(t, err, executor.ErrRetryScheduled)
		} else {
			require.NoError(t, err)
		}
	}
	require.Equal(t, lifecycle.MaxConsecutiveRetries, objects.attempts())
	for _, key := range target.keys {
		require.True(t, b.exists(t, key))
	}

	// Blocked: nobody claims it.
	claimed, err := r.RunRequest(t.Context(), id)
	require.NoError(t, err)
	require.False(t, claimed)

	_, err = b.Operator.Unblock(t.Context(), id, "carol", "object store fixed")
	require.NoError(t, err)
	claimed, err = b.runner(t, b.config("executor-2")).RunRequest(t.Context(), id)
	require.NoError(t, err)
	require.True(t, claimed)
	b.requireDeleted(t, id, target)
}

func TestCrashAndResume(t *testing.T) {
	t.Parallel()
	type crash struct {
		at    func(ev executor.Event) bool
		stage lifecycle.Stage // the stage the request is left at
	}
	cases := map[string]crash{
		"after quiescing": {func(ev executor.Event) bool { return ev.Message == "quiescing" }, lifecycle.StageApproved},
		"after fenced":    {func(ev executor.Event) bool { return ev.Stage == lifecycle.StageFenced }, lifecycle.StageFenced},
		"mid enumeration": {func(ev executor.Event) bool {
			return ev.Stage == lifecycle.StageFenced && ev.ChunksTotal == 2
		}, lifecycle.StageFenced},
		"after some chunks":  {func(ev executor.Event) bool { return ev.ChunksDone == 2 }, lifecycle.StageDrained},
		"mid purge":          {func(ev executor.Event) bool { return len(ev.TablesRows) > 0 }, lifecycle.StageBindingsRemoved},
		"after postgres":     {func(ev executor.Event) bool { return ev.Stage == lifecycle.StagePostgresPurged }, lifecycle.StagePostgresPurged},
		"after cache purged": {func(ev executor.Event) bool { return ev.Stage == lifecycle.StageCachePurged }, lifecycle.StageCachePurged},
		"after verification": {func(ev executor.Event) bool { return ev.Stage == lifecycle.StageLogicallyVerified }, lifecycle.StageLogicallyVerified},
	}
	for name, crashAt := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			target := b.createCommunity(t, 3)
			other := b.createCommunity(t, 1)
			otherRows := b.rows(t, other.id)
			id := b.approve(t, target)
			objects := newCounting(b.files)

			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			cfg := b.config("executor-1")
			cfg.Objects = objects
			crashed := false
			cfg.Progress = func(ev executor.Event) {
				if !crashed && crashAt.at(ev) {
					crashed = true
					cancel()
				}
			}
			claimed, err := b.runner(t, cfg).RunRequest(ctx, id)
			require.True(t, claimed)
			require.ErrorIs(t, err, context.Canceled)
			require.True(t, crashed)
			request, err := b.Operator.Get(t.Context(), id)
			require.NoError(t, err)
			require.Equal(t, crashAt.stage, request.Stage)
			require.False(t, request.Blocked())
			require.Empty(t, request.LeaseOwner, "the stopped runner released its claim")

			b.expireLease(t, id)
			cfg2 := b.config("executor-2")
			cfg2.Objects = objects
			claimed, err = b.runner(t, cfg2).RunRequest(t.Context(), id)
			require.NoError(t, err)
			require.True(t, claimed)
			b.requireDeleted(t, id, target)
			b.requireIntact(t, other, otherRows)
			objects.mu.Lock()
			defer objects.mu.Unlock()
			for key, n := range objects.calls {
				// Only the chunk in flight at the crash may be deleted twice.
				require.LessOrEqual(t, n, 2, key)
			}
		})
	}
}

func TestTwoRunnersNeverBothAct(t *testing.T) {
	t.Parallel()
	b := setup(t)
	target := b.createCommunity(t, 4)
	id := b.approve(t, target)
	objects := newCounting(b.files)

	start := make(chan struct{})
	var wg sync.WaitGroup
	results := make([]bool, 2)
	for i := range 2 {
		cfg := b.config("executor-" + string(rune('a'+i)))
		cfg.Objects = objects
		r := b.runner(t, cfg)
		wg.Go(func() {
			<-start
			for {
				claimed, err := r.RunRequest(t.Context(), id)
				if err != nil {
					t.Error(err)
					return
				}
				results[i] = results[i] || claimed
				request, err := b.Operator.Get(t.Context(), id)
				if err != nil {
					t.Error(err)
					return
				}
				if request.Stage == lifecycle.StageRetentionPending {
					return
				}
			}
		})
	}
	close(start)
	wg.Wait()
	require.NotEqual(t, results[0], results[1], "exactly one runner claims: %v", results)
	b.requireDeleted(t, id, target)
	objects.requireEachOnce(t, chunksOf(4))
}

// A runner whose lease is taken over mid-deletion stops at its next call and
// never acts again; the new owner finishes and each chunk is deleted once.
func TestTakenOverRunnerStops(t *testing.T) {
	t.Parallel()
	b := setup(t)
	target := b.createCommunity(t, 4)
	id := b.approve(t, target)
	objects := newCounting(b.files)

	cfgB := b.config("executor-b")
	cfgB.Objects = objects
	runnerB := b.runner(t, cfgB)
	cfgA := b.config("executor-a")
	cfgA.Objects = objects
	tookOver := false
	cfgA.Progress = func(ev executor.Event) {
		if ev.ChunksDone == 1 && !tookOver {
			tookOver = true
			b.expireLease(t, id)
			claimed, err := runnerB.RunRequest(t.Context(), id)
			require.NoError(t, err)
			require.True(t, claimed)
		}
	}
	claimed, err := b.runner(t, cfgA).RunRequest(t.Context(), id)
	require.True(t, claimed)
	require.True(t, lifecycle.IsStaleLease(err), "%v", err)
	require.True(t, tookOver)
	b.requireDeleted(t, id, target)
	objects.requireEachOnce(t, chunksOf(4))
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	_, err := executor.New(executor.Config{})
	require.ErrorIs(t, err, lifecycle.ErrInvalidInput)
	_, err = executor.New(executor.Config{Engine: &lifecycle.Engine{}, Objects: executor.NewFileObjectStore(t.TempDir()),
		Cache: executor.NewMemoryCache(), Owner: "x", ChunkSize: lifecycle.MaxManifestChunkKeys + 1})
	require.ErrorIs(t, err, lifecycle.ErrInvalidInput)
	r, err := executor.New(executor.Config{Engine: &lifecycle.Engine{}, Objects: executor.NewFileObjectStore(t.TempDir()),
		Cache: executor.NewMemoryCache(), Owner: "x"})
	require.NoError(t, err)
	require.NotNil(t, r)
	// A nice ratio that is negative, NaN or infinite is refused in one line
	// that names it; a positive one is taken.
	for _, ratio := range []float64{-0.5, math.NaN(), math.Inf(1)} {
		_, err = executor.New(executor.Config{Engine: &lifecycle.Engine{}, Objects: executor.NewFileObjectStore(t.TempDir()),
			Cache: executor.NewMemoryCache(), Owner: "x", Purge: lifecycle.PurgeOptions{NiceRatio: ratio}})
		require.ErrorIs(t, err, lifecycle.ErrInvalidInput, "%g", ratio)
		require.ErrorContains(t, err, "Purge.NiceRatio must be a finite number, 0 or more")
		require.NotContains(t, err.Error(), "\n")
	}
	_, err = executor.New(executor.Config{Engine: &lifecycle.Engine{}, Objects: executor.NewFileObjectStore(t.TempDir()),
		Cache: executor.NewMemoryCache(), Owner: "x", Purge: lifecycle.PurgeOptions{NiceRatio: 2}})
	require.NoError(t, err)
}

func TestRunStopsOnCancel(t *testing.T) {
	t.Parallel()
	b := setup(t)
	target := b.createCommunity(t, 1)
	id := b.approve(t, target)
	ctx, cancel := context.WithCancel(t.Context())
	cfg := b.config("executor-1")
	cfg.PollInterval = time.Millisecond
	cfg.Progress = func(ev executor.Event) {
		if ev.Stage == lifecycle.StageRetentionPending {
			cancel()
		}
	}
	err := b.runner(t, cfg).Run(ctx)
	require.ErrorIs(t, err, context.Canceled)
	b.requireDeleted(t, id, target)
}

// Prefixes that differ from the approved inventory's are a fail-closed
// refusal: the request blocks at once and nothing is deleted.
func TestPrefixMismatchBlocksAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	target := b.createCommunity(t, 1)
	id := b.approve(t, target)
	cfg := b.config("executor-1")
	cfg.Prefixes = func(c lifecycle.TenantKey) []string { return []string{"media/" + c.String() + "/"} }
	claimed, err := b.runner(t, cfg).RunRequest(t.Context(), id)
	require.True(t, claimed)
	require.ErrorIs(t, err, executor.ErrBlocked)
	require.ErrorIs(t, err, lifecycle.ErrRefused)
	request, err := b.Operator.Get(t.Context(), id)
	require.NoError(t, err)
	require.True(t, request.Blocked())
	require.Equal(t, lifecycle.StageFenced, request.Stage)
	for _, key := range target.keys {
		require.True(t, b.exists(t, key))
	}
}

// anyObjects reports objects left under every prefix.
type anyObjects struct{ executor.ObjectStore }

func (anyObjects) Any(context.Context, string) (bool, error) { return true, nil }

// An object left behind after deletion fails verification as a retry, not a
// block, and the request stays at cache_purged.
func TestLeftoverObjectRetriesVerification(t *testing.T) {
	t.Parallel()
	b := setup(t)
	target := b.createCommunity(t, 1)
	id := b.approve(t, target)
	cfg := b.config("executor-1")
	cfg.Objects = anyObjects{b.files}
	claimed, err := b.runner(t, cfg).RunRequest(t.Context(), id)
	require.True(t, claimed)
	require.ErrorIs(t, err, executor.ErrRetryScheduled)
	request, err := b.Operator.Get(t.Context(), id)
	require.NoError(t, err)
	require.Equal(t, lifecycle.StageCachePurged, request.Stage)
	require.False(t, request.Blocked())
	require.Equal(t, int32(1), request.RetryCount)
	require.Contains(t, request.LastError, "objects remain")
}

// blockingObjects parks Delete until its context ends.
type blockingObjects struct {
	executor.ObjectStore

	entered chan struct{}
}

func (o *blockingObjects) Delete(ctx context.Context, _ []string) error {
	select {
	case o.entered <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return ctx.Err()
}

// A heartbeat that finds the lease taken over cancels the work in flight.
func TestStaleHeartbeatCancelsWork(t *testing.T) {
	t.Parallel()
	b := setup(t)
	target := b.createCommunity(t, 1)
	id := b.approve(t, target)
	objects := &blockingObjects{ObjectStore: b.files, entered: make(chan struct{}, 1)}
	cfg := b.config("executor-1")
	cfg.Objects = objects
	cfg.LeaseDuration = 5 * time.Second
	cfg.HeartbeatInterval = 10 * time.Millisecond
	done := make(chan error, 1)
	go func() {
		_, err := b.runner(t, cfg).RunRequest(t.Context(), id) //nolint:testifylint // b.runner only builds the runner; its require cannot fail after setup
		done <- err
	}()
	<-objects.entered
	b.expireLease(t, id)
	// The heartbeat finds the lease expired and stops the work on its own.
	// Only then does another executor claim: while the runner still holds
	// the request row (releasing its claim), a claim would skip it.
	err := <-done
	require.True(t, lifecycle.IsStaleLease(err), "%v", err)
	thief, err := b.Engine.ClaimRequest(t.Context(), id, "thief", lifecycle.DefaultLeaseDuration)
	require.NoError(t, err)
	require.NotNil(t, thief)
	request, err := b.Operator.Get(t.Context(), id)
	require.NoError(t, err)
	require.Equal(t, "thief", request.LeaseOwner)
	require.Equal(t, lifecycle.StageDrained, request.Stage)
	total, deleted, err := b.Engine.ChunkProgress(t.Context(), id)
	require.NoError(t, err)
	require.Positive(t, total)
	require.Zero(t, deleted)
}

// Serving writes that do not drain in DrainTimeout record a retry at
// approved; once they finish, the next claim fences and completes.
func TestUndrainedServingWritesRetry(t *testing.T) {
	t.Parallel()
	b := setup(t)
	target := b.createCommunity(t, 1)
	id := b.approve(t, target)
	lease := testfactory.ServingLease(t.Context(), t, b.DB, &testfactory.ServingLeaseOpts{CommunityID: target.id, Owner: "web-1"})
	cfg := b.config("executor-1")
	cfg.DrainTimeout = 30 * time.Millisecond
	r := b.runner(t, cfg)
	claimed, err := r.RunRequest(t.Context(), id)
	require.True(t, claimed)
	require.ErrorIs(t, err, executor.ErrRetryScheduled)
	request, err := b.Operator.Get(t.Context(), id)
	require.NoError(t, err)
	require.Equal(t, lifecycle.StageApproved, request.Stage)
	require.False(t, request.Blocked())

	released, err := b.Serving.ReleaseWriteLease(t.Context(), lease)
	require.NoError(t, err)
	require.True(t, released)
	deadline := time.Now().Add(30 * time.Second)
	for {
		claimed, err := r.RunRequest(t.Context(), id)
		require.NoError(t, err)
		if claimed {
			break
		}
		require.True(t, time.Now().Before(deadline))
	}
	b.requireDeleted(t, id, target)
}

// A prepared transaction that holds the community's deletion lock (a writer
// that prepared and was forgotten) makes every fence attempt time out after
// the lock wait bound; each is a retry, and after the retry budget the
// request is blocked durably with a reason that names the transaction.
func TestAStuckLockHolderBlocksDurablyNamingIt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	target := b.createCommunity(t, 1)
	id := b.approve(t, target)
	gid := "forgotten-" + uuid.NewString()
	conn, err := b.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, "BEGIN")
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "SELECT pg_advisory_xact_lock_shared(community_deletion_lock_key($1))", target.id)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "PREPARE TRANSACTION '"+gid+"'")
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = b.Pool.Exec(context.Background(), "ROLLBACK PREPARED '"+gid+"'") })

	cfg := b.config("executor-1")
	engine, err := lifecycle.NewEngine(ctx, fixture.RolePool(t, b.URL, fixture.RoleExecutor), &lifecycle.Opts{LockWait: 20 * time.Millisecond})
	require.NoError(t, err)
	cfg.Engine = engine
	r := b.runner(t, cfg)
	// Wait on the condition (the request blocked), bounded by a deadline, not
	// on a count of calls: between attempts the request sits out its retry
	// backoff, during which RunRequest claims nothing, and how many calls fit
	// in a backoff depends on the host.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		request, err := b.Operator.Get(ctx, id)
		require.NoError(t, err)
		if request.Blocked() {
			require.Equal(t, lifecycle.StageApproved, request.Stage)
			require.EqualValues(t, lifecycle.MaxConsecutiveRetries, request.RetryCount)
			require.Contains(t, request.BlockedReason, "waited 20ms for the deletion lock of community "+target.id.String())
			require.Contains(t, request.BlockedReason, fmt.Sprintf("prepared transaction %q", gid))
			break
		}
		require.True(t, time.Now().Before(deadline), "not blocked within 2m: %d of %d retries", request.RetryCount, lifecycle.MaxConsecutiveRetries)
		b.awaitNextAttempt(t, id)
		claimed, err := r.RunRequest(ctx, id)
		if claimed {
			require.ErrorIs(t, err, executor.ErrRetryScheduled)
		} else {
			require.NoError(t, err)
		}
	}

	// Once the holder is gone and an operator unblocks, it completes.
	_, err = b.Pool.Exec(ctx, "ROLLBACK PREPARED '"+gid+"'")
	require.NoError(t, err)
	_, err = b.Operator.Unblock(ctx, id, "carol", "rolled back the forgotten prepared transaction")
	require.NoError(t, err)
	claimed, err := b.runner(t, b.config("executor-2")).RunRequest(ctx, id)
	require.NoError(t, err)
	require.True(t, claimed)
	b.requireDeleted(t, id, target)
}

// messageSignal is a slog handler that closes seen when a record with its
// message arrives.
type messageSignal struct {
	message string
	once    sync.Once
	seen    chan struct{}
}

func (m *messageSignal) Enabled(context.Context, slog.Level) bool { return true }
func (m *messageSignal) Handle(_ context.Context, r slog.Record) error {
	if r.Message == m.message {
		m.once.Do(func() { close(m.seen) })
	}
	return nil
}
func (m *messageSignal) WithAttrs([]slog.Attr) slog.Handler { return m }
func (m *messageSignal) WithGroup(string) slog.Handler      { return m }

// The final step releases the lease, so a heartbeat that lands after it
// commits, before the run ends, finds the lease stale: that is the step's
// own doing, and the run completes. (The runner holds the run at the final
// event until such a heartbeat has happened.)
func TestAHeartbeatAfterTheFinalStepDoesNotFailTheRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	target := b.createCommunity(t, 1)
	id := b.approve(t, target)

	signal := &messageSignal{message: "heartbeat inconclusive: a step in flight changes the lease", seen: make(chan struct{})}
	cfg := b.config("executor-1")
	cfg.HeartbeatInterval = time.Millisecond
	cfg.Logger = slog.New(signal)
	cfg.Progress = func(ev executor.Event) {
		if ev.Stage == lifecycle.StageRetentionPending {
			select {
			case <-signal.seen:
			case <-time.After(10 * time.Second):
				t.Error("no heartbeat after the final step")
			}
		}
	}
	claimed, err := b.runner(t, cfg).RunRequest(t.Context(), id)
	require.NoError(t, err)
	require.True(t, claimed)
	b.requireDeleted(t, id, target)
}
