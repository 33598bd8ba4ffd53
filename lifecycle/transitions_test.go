package lifecycle_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/testfactory"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// A request walks every stage through the Engine to retention_pending: each
// step leaves its checkpoint, the fence generation binds the request, the
// key chunks go with logical verification, and the terminal step stamps
// completion and releases the lease.
func TestTransitionsWalkToRetentionPending(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	request, token := testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{Stage: lifecycle.StageApproved, Claimed: true})
	community := request.CommunityID

	require.NoError(t, b.Engine.BeginQuiescing(ctx, token))
	quiescingCommunity := b.community(t, community)
	require.Equal(t, "quiescing", quiescingCommunity.State)
	require.Zero(t, quiescingCommunity.FenceGeneration)
	require.NotNil(t, quiescingCommunity.ArchivedAt, "quiescing archives the community")
	quiescing, err := b.Operator.Get(ctx, request.ID)
	require.NoError(t, err)
	require.NotNil(t, quiescing.QuiescingStartedAt)
	require.Nil(t, quiescing.PreQuiesceArchivedAt)
	require.NoError(t, b.Engine.BeginQuiescing(ctx, token), "quiescing again is harmless")
	again, err := b.Operator.Get(ctx, request.ID)
	require.NoError(t, err)
	require.Equal(t, quiescing.QuiescingStartedAt, again.QuiescingStartedAt, "recorded once")

	fence, err := b.Engine.EnterFenced(ctx, token)
	require.NoError(t, err)
	require.Equal(t, int64(1), fence)
	token = token.WithFence(fence)
	fencedCommunity := b.community(t, community)
	require.Equal(t, "fenced", fencedCommunity.State)
	require.Equal(t, fence, fencedCommunity.FenceGeneration)

	// The destructive key list is appended while fenced, then frozen.
	meta := testfactory.Prefixes(community)[0]
	require.NoError(t, b.Engine.AppendManifestChunk(ctx, token, lifecycle.ManifestKeyChunk{ChunkNo: 0, Prefix: meta, Keys: []string{meta + "k"}}))
	destructive := testfactory.EmptyStorage(community)
	destructive.Prefixes[0] = testfactory.Prefix(t, meta, meta+"k")
	require.NoError(t, b.Engine.FreezeDestructiveManifest(ctx, token, destructive))

	require.NoError(t, b.Engine.EnterDrained(ctx, token))
	require.NoError(t, b.Engine.VerifyToken(ctx, token, lifecycle.StageDrained))
	require.NoError(t, b.Engine.Heartbeat(ctx, token, lifecycle.DefaultLeaseDuration))
	require.NoError(t, b.Engine.EnterBindingsRemoved(ctx, token, map[string]int{"keys": 1}))
	_, err = b.Engine.EnterPostgresPurged(ctx, token, lifecycle.PurgeOptions{})
	require.NoError(t, err)
	require.NoError(t, b.Engine.EnterCachePurged(ctx, token, map[string]int{"keys": 0}))
	inspection, err := b.Operator.Inspect(ctx, request.ID)
	require.NoError(t, err)
	require.Equal(t, int64(1), inspection.ChunksTotal)
	require.NoError(t, b.Engine.EnterLogicallyVerified(ctx, token, map[string]bool{"all": true}))
	inspection, err = b.Operator.Inspect(ctx, request.ID)
	require.NoError(t, err)
	require.Zero(t, inspection.ChunksTotal, "the key chunks go with logical verification")
	require.NoError(t, b.Engine.EnterRetentionPending(ctx, token, map[string]string{"probe": "clean"}))

	done, err := b.Operator.Inspect(ctx, request.ID)
	require.NoError(t, err)
	require.Equal(t, lifecycle.StageRetentionPending, done.Request.Stage)
	require.NotNil(t, done.Request.CompletedAt)
	require.Empty(t, done.Request.LeaseOwner)
	require.Nil(t, done.Request.LeaseUntil)
	require.Equal(t, fence, *done.Request.FenceGeneration)
	var units, purge []string
	for _, c := range done.Checkpoints {
		require.Equal(t, "completed", c.Status, c.UnitKey)
		if c.Stage == lifecycle.StageBindingsRemoved {
			purge = append(purge, c.UnitKey) // the purge's own, tested in purge_test.go
			continue
		}
		units = append(units, string(c.Stage)+"/"+c.UnitKey)
	}
	require.NotEmpty(t, purge)
	require.Equal(t, "postgres_tombstone_committed", purge[len(purge)-1], "the purge ends with the tombstone")
	require.Equal(t, []string{
		"approved/quiesce_serving_writes",
		"approved/activate_fence",
		"fenced/serving_writes_drained",
		"drained/remove_storage_bindings",
		"postgres_purged/purge_cache_namespace",
		"cache_purged/verify_cross_store_absence",
		"logically_verified/retention_physical_expiry_pending",
	}, units)
	var detail map[string]int64
	require.NoError(t, json.Unmarshal(done.Checkpoints[1].Detail, &detail))
	require.Equal(t, fence, detail["fence_generation"])

	err = b.Engine.EnterRetentionPending(ctx, token, nil)
	require.True(t, lifecycle.IsStaleLease(err), "a terminal request takes no more steps: %v", err)
}

// The fence and the drain refuse while serving write leases are unexpired,
// with the typed error, and change nothing; the drain needs the
// destructive manifest frozen.
func TestTransitionsRefuseWhileServingWritesAreActive(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	lease := testfactory.ServingLease(ctx, t, b.DB, nil)
	request, token := testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{CommunityID: lease.CommunityID,
		Stage: lifecycle.StageApproved, Quiesced: true})

	before := b.snapshot(t, request.ID)
	_, err := b.Engine.EnterFenced(ctx, token)
	var notDrained *lifecycle.ServingWritesNotDrainedError
	require.ErrorAs(t, err, &notDrained)
	require.ErrorIs(t, err, lifecycle.ErrRefused)
	require.Equal(t, int64(1), notDrained.ActiveCount)
	require.Equal(t, []string{"upload"}, notDrained.Operations)
	require.Equal(t, request.CommunityID, notDrained.CommunityID)
	require.Equal(t, before, b.snapshot(t, request.ID))

	// Abort refuses too: restoring the community under a new generation
	// would strand the admitted lease.
	_, err = b.Operator.Abort(ctx, request.ID, "operator", "changed my mind")
	require.ErrorAs(t, err, &notDrained)
	require.Equal(t, before, b.snapshot(t, request.ID))

	released, err := b.Serving.ReleaseWriteLease(ctx, lease)
	require.NoError(t, err)
	require.True(t, released)
	generation, err := b.Engine.EnterFenced(ctx, token)
	require.NoError(t, err)
	token = token.WithFence(generation)

	before = b.snapshot(t, request.ID)
	require.ErrorIs(t, b.Engine.EnterDrained(ctx, token), lifecycle.ErrRefused, "drained needs the destructive manifest frozen")
	require.Equal(t, before, b.snapshot(t, request.ID))
}

// Every call this package makes with a lease token rejects a stale one
// and changes nothing (see staleTokens): an older generation, another owner,
// another community, a wrong fence generation, an expired lease and a
// blocked request are stale leases; a token missing the fence generation a
// fenced stage needs is refused. The storage calls are probed the same way
// in TestStorageCallsRefuseStaleTokens.
func TestTransitionsRejectStaleTokensEverywhere(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := b.Engine
	request := func(opts testfactory.RequestOpts) func(t *testing.T) (*lifecycle.Request, lifecycle.LeaseToken) {
		return func(t *testing.T) (*lifecycle.Request, lifecycle.LeaseToken) {
			return testfactory.Request(t.Context(), t, b.DB, &opts)
		}
	}
	at := func(stage lifecycle.Stage) func(t *testing.T) (*lifecycle.Request, lifecycle.LeaseToken) {
		return request(testfactory.RequestOpts{Stage: stage})
	}
	approved := request(testfactory.RequestOpts{Stage: lifecycle.StageApproved, Claimed: true})
	quiesced := request(testfactory.RequestOpts{Stage: lifecycle.StageApproved, Quiesced: true})
	b.requireStaleTokensRefused(t, []tokenCall{
		{name: "BeginQuiescing", request: approved, call: func(ctx context.Context, _ *lifecycle.Request, tok lifecycle.LeaseToken) error {
			return s.BeginQuiescing(ctx, tok)
		}},
		{name: "EnterFenced", request: quiesced, call: func(ctx context.Context, _ *lifecycle.Request, tok lifecycle.LeaseToken) error {
			_, err := s.EnterFenced(ctx, tok)
			return err
		}},
		{name: "Heartbeat/approved", request: approved, call: func(ctx context.Context, _ *lifecycle.Request, tok lifecycle.LeaseToken) error {
			return s.Heartbeat(ctx, tok, lifecycle.DefaultLeaseDuration)
		}},
		{name: "Block/approved", request: approved, call: func(ctx context.Context, _ *lifecycle.Request, tok lifecycle.LeaseToken) error {
			return s.Block(ctx, tok, lifecycle.BlockParams{Stage: lifecycle.StageApproved, Unit: "unit", Err: "broken"})
		}},
		{name: "RecordRetry/approved", request: approved, call: func(ctx context.Context, _ *lifecycle.Request, tok lifecycle.LeaseToken) error {
			return s.RecordRetry(ctx, tok, lifecycle.RetryParams{Stage: lifecycle.StageApproved, Unit: "unit", Err: "flaky", After: 0})
		}},
		{name: "VerifyToken/approved", request: approved, call: func(ctx context.Context, _ *lifecycle.Request, tok lifecycle.LeaseToken) error {
			return s.VerifyToken(ctx, tok, lifecycle.StageApproved)
		}},
		{name: "Stop/approved", request: approved, lenient: true, call: func(ctx context.Context, _ *lifecycle.Request, tok lifecycle.LeaseToken) error {
			return s.Stop(ctx, lifecycle.StopParams{ExecutorID: "nobody", Release: &tok})
		}},
		{name: "EnterDrained", request: request(testfactory.RequestOpts{Stage: lifecycle.StageFenced, DestructiveFrozen: true}), fenceRequired: true,
			call: func(ctx context.Context, _ *lifecycle.Request, tok lifecycle.LeaseToken) error {
				return s.EnterDrained(ctx, tok)
			}},
		{name: "Block/fenced", request: at(lifecycle.StageFenced), fenceRequired: true, call: func(ctx context.Context, _ *lifecycle.Request, tok lifecycle.LeaseToken) error {
			return s.Block(ctx, tok, lifecycle.BlockParams{Stage: lifecycle.StageFenced, Unit: "unit", Err: "broken"})
		}},
		{name: "RecordRetry/fenced", request: at(lifecycle.StageFenced), fenceRequired: true, call: func(ctx context.Context, _ *lifecycle.Request, tok lifecycle.LeaseToken) error {
			return s.RecordRetry(ctx, tok, lifecycle.RetryParams{Stage: lifecycle.StageFenced, Unit: "unit", Err: "flaky", After: time.Minute})
		}},
		{name: "Heartbeat/fenced", request: at(lifecycle.StageFenced), call: func(ctx context.Context, _ *lifecycle.Request, tok lifecycle.LeaseToken) error {
			return s.Heartbeat(ctx, tok, lifecycle.DefaultLeaseDuration)
		}},
		{name: "Stop/fenced", request: at(lifecycle.StageFenced), lenient: true, call: func(ctx context.Context, _ *lifecycle.Request, tok lifecycle.LeaseToken) error {
			return s.Stop(ctx, lifecycle.StopParams{ExecutorID: "nobody", Release: &tok})
		}},
		{name: "EnterBindingsRemoved", request: at(lifecycle.StageDrained), fenceRequired: true, call: func(ctx context.Context, _ *lifecycle.Request, tok lifecycle.LeaseToken) error {
			return s.EnterBindingsRemoved(ctx, tok, nil)
		}},
		{name: "EnterCachePurged", request: at(lifecycle.StagePostgresPurged), fenceRequired: true, call: func(ctx context.Context, _ *lifecycle.Request, tok lifecycle.LeaseToken) error {
			return s.EnterCachePurged(ctx, tok, nil)
		}},
		{name: "EnterLogicallyVerified", request: at(lifecycle.StageCachePurged), fenceRequired: true, call: func(ctx context.Context, _ *lifecycle.Request, tok lifecycle.LeaseToken) error {
			return s.EnterLogicallyVerified(ctx, tok, nil)
		}},
		{name: "EnterRetentionPending", request: at(lifecycle.StageLogicallyVerified), fenceRequired: true, call: func(ctx context.Context, _ *lifecycle.Request, tok lifecycle.LeaseToken) error {
			return s.EnterRetentionPending(ctx, tok, nil)
		}},
		{name: "VerifyToken/logically_verified", request: at(lifecycle.StageLogicallyVerified), fenceRequired: true, call: func(ctx context.Context, _ *lifecycle.Request, tok lifecycle.LeaseToken) error {
			return s.VerifyToken(ctx, tok, lifecycle.StageLogicallyVerified)
		}},
	})
}

// Abort racing the executor's quiesce and fence, started together over many
// iterations, always serializes: the abort succeeds, the executor either
// finished its step first or fails closed, the community ends active, and
// PostgreSQL never reports a deadlock.
func TestTransitionsAbortRacingQuiesceAndFenceNeverDeadlocks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	iterations := 24
	if testing.Short() {
		iterations = 6 // both orders still; make test runs all 24, and the soaks race abort and fence 1,000 times
	}
	forwardWon := 0
	for i := range iterations {
		quiescedFirst := i%2 == 1
		request, token := testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{Stage: lifecycle.StageApproved, Claimed: true, Quiesced: quiescedFirst})

		start := make(chan struct{})
		var wg sync.WaitGroup
		var abortErr, forwardErr error
		var aborted *lifecycle.Request
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			aborted, abortErr = b.Operator.Abort(ctx, request.ID, "operator", "race")
		}()
		go func() {
			defer wg.Done()
			<-start
			if !quiescedFirst {
				if forwardErr = b.Engine.BeginQuiescing(ctx, token); forwardErr != nil {
					return
				}
			}
			_, forwardErr = b.Engine.EnterFenced(ctx, token)
		}()
		close(start)
		wg.Wait()

		requireNoDeadlock(t, abortErr)
		requireNoDeadlock(t, forwardErr)
		require.NoError(t, abortErr, "iteration %d", i)
		require.Equal(t, lifecycle.StageAborted, aborted.Stage)
		if forwardErr != nil {
			require.True(t, lifecycle.IsStaleLease(forwardErr), "iteration %d: %v", i, forwardErr)
		} else {
			forwardWon++
		}
		community := b.community(t, request.CommunityID)
		require.Equal(t, "active", community.State, "iteration %d", i)
		require.Nil(t, community.ArchivedAt, "iteration %d: archived_at restored", i)
		if aborted.FenceGeneration != nil {
			require.Equal(t, *aborted.FenceGeneration, community.FenceGeneration)
		} else {
			require.Zero(t, community.FenceGeneration, "iteration %d: nothing to restore", i)
		}
	}
	t.Logf("the executor's step won %d of %d races", forwardWon, iterations)
}

// Abort restores a fenced community to active under a new generation with
// its pre-quiesce archived_at, records what it restored, and makes the
// executor's token stale; a missing request is not found.
func TestTransitionsAbortRestoresTheCommunity(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()

	// An archived community keeps its own archived_at through the cycle.
	stamp := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	community := testfactory.Community(ctx, t, b.DB, &testfactory.CommunityOpts{ArchivedAt: &stamp})
	archived, token := testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{CommunityID: community.ID, Stage: lifecycle.StageFenced})
	generation := *token.FenceGeneration
	result, err := b.Operator.Abort(ctx, archived.ID, "operator", "keep it")
	require.NoError(t, err)
	require.Equal(t, generation+1, *result.FenceGeneration)
	restored := b.community(t, community.ID)
	require.Equal(t, "active", restored.State)
	require.Equal(t, generation+1, restored.FenceGeneration)
	require.NotNil(t, restored.ArchivedAt)
	require.True(t, stamp.Equal(*restored.ArchivedAt))
	inspection, err := b.Operator.Inspect(ctx, archived.ID)
	require.NoError(t, err)
	var detail map[string]any
	require.NoError(t, json.Unmarshal(checkpoint(t, inspection, "operator_abort:").Detail, &detail))
	require.Equal(t, "fenced", detail["community_state"])
	require.EqualValues(t, generation, detail["old_fence_generation"])
	require.EqualValues(t, generation+1, detail["new_fence_generation"])
	err = b.Engine.Heartbeat(ctx, token, lifecycle.DefaultLeaseDuration)
	require.True(t, lifecycle.IsStaleLease(err), "the abort made the executor's token stale")

	_, err = b.Operator.Abort(ctx, uuid.New(), "operator", "nothing")
	require.ErrorIs(t, err, lifecycle.ErrNotFound)
}

// Abort succeeds exactly at the abortable stages, before the fence drains,
// whether or not an executor holds the request or quiesced its community:
// the request is aborted, its community active and unarchived again and the
// executor's token stale. At every later stage, and once terminal, it is
// refused and changes nothing.
func TestTransitionsAbortOnlyBeforeTheDrain(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	cases := []struct {
		name string
		opts testfactory.RequestOpts
	}{
		{"submitted", testfactory.RequestOpts{Stage: lifecycle.StageSubmitted}},
		{"inventoried", testfactory.RequestOpts{Stage: lifecycle.StageInventoried}},
		{"approved", testfactory.RequestOpts{Stage: lifecycle.StageApproved}},
		{"approved and claimed", testfactory.RequestOpts{Stage: lifecycle.StageApproved, Claimed: true}},
		{"approved and quiescing", testfactory.RequestOpts{Stage: lifecycle.StageApproved, Quiesced: true}},
		{"fenced", testfactory.RequestOpts{Stage: lifecycle.StageFenced}},
		{"drained", testfactory.RequestOpts{Stage: lifecycle.StageDrained}},
		{"bindings removed", testfactory.RequestOpts{Stage: lifecycle.StageBindingsRemoved}},
		{"postgres purged", testfactory.RequestOpts{Stage: lifecycle.StagePostgresPurged}},
		{"cache purged", testfactory.RequestOpts{Stage: lifecycle.StageCachePurged}},
		{"logically verified", testfactory.RequestOpts{Stage: lifecycle.StageLogicallyVerified}},
		{"retention pending", testfactory.RequestOpts{Stage: lifecycle.StageRetentionPending}},
		{"aborted", testfactory.RequestOpts{Stage: lifecycle.StageAborted}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			request, token := testfactory.Request(ctx, t, b.DB, &c.opts)
			before := b.snapshot(t, request.ID)
			aborted, err := b.Operator.Abort(ctx, request.ID, "operator", "changed my mind")
			if !c.opts.Stage.Abortable() {
				require.ErrorIs(t, err, lifecycle.ErrRefused)
				require.Equal(t, before, b.snapshot(t, request.ID), "a refused abort changes nothing")
				return
			}
			require.NoError(t, err)
			require.Equal(t, lifecycle.StageAborted, aborted.Stage)
			community := b.community(t, request.CommunityID)
			require.Equal(t, "active", community.State)
			require.Nil(t, community.ArchivedAt, "the pre-quiesce archived_at is restored")
			if token.Owner != "" {
				err := b.Engine.Heartbeat(ctx, token, lifecycle.DefaultLeaseDuration)
				require.True(t, lifecycle.IsStaleLease(err), "the abort made the executor's token stale: %v", err)
			}
		})
	}
}

// Transitions take the community lock before the request row lock: a
// transition queued on the community lock holds no row lock, so a claim
// loop's row-level work on the same request is not blocked by it.
func TestTransitionsTakeTheCommunityLockBeforeRowLocks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	request, token := testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{Stage: lifecycle.StageApproved, Claimed: true})
	gate := b.holdCommunityLock(t, request.CommunityID)
	quiesced := make(chan error, 1)
	go func() { quiesced <- b.Engine.BeginQuiescing(ctx, token) }()
	b.waitForLockWaiters(t, 1, advisoryLock)

	// The request row is not locked by the queued transition.
	lockCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	tx, err := b.Pool.Begin(lockCtx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	_, err = tx.Exec(lockCtx, "SET LOCAL lock_timeout = '2s'")
	require.NoError(t, err)
	_, err = tx.Exec(lockCtx, "SELECT 1 FROM community_deletion_requests WHERE id = $1 FOR UPDATE", request.ID)
	require.NoError(t, err, "the queued transition must hold no row lock")
	require.NoError(t, tx.Rollback(ctx))

	require.NoError(t, gate.Commit(ctx))
	require.NoError(t, <-quiesced)
}

// Abort racing MarkDrained on a fenced request, over many iterations, always
// serializes without a deadlock: either the abort wins (the community is
// active again and the drain fails closed) or the drain wins (the request is
// drained, the community stays fenced, and the abort is refused).
func TestTransitionsAbortRacingDrainNeverDeadlocks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	iterations := 16
	if testing.Short() {
		iterations = 4 // each a fresh race, either side may win; make test runs all 16
	}
	for i := range iterations {
		request, token := testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{Stage: lifecycle.StageFenced, DestructiveFrozen: true})

		start := make(chan struct{})
		var wg sync.WaitGroup
		var abortErr, drainErr error
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			_, abortErr = b.Operator.Abort(ctx, request.ID, "operator", "race")
		}()
		go func() {
			defer wg.Done()
			<-start
			drainErr = b.Engine.EnterDrained(ctx, token)
		}()
		close(start)
		wg.Wait()

		requireNoDeadlock(t, abortErr)
		requireNoDeadlock(t, drainErr)
		require.NotEqual(t, abortErr == nil, drainErr == nil, "iteration %d: exactly one wins (abort %v, drain %v)", i, abortErr, drainErr)
		current, err := b.Operator.Get(ctx, request.ID)
		require.NoError(t, err)
		state := b.community(t, request.CommunityID).State
		if abortErr == nil {
			require.Equal(t, lifecycle.StageAborted, current.Stage)
			require.Equal(t, "active", state)
			require.True(t, lifecycle.IsStaleLease(drainErr) || errors.Is(drainErr, lifecycle.ErrRefused), "iteration %d: %v", i, drainErr)
		} else {
			require.Equal(t, lifecycle.StageDrained, current.Stage)
			require.Equal(t, "fenced", state)
			require.ErrorIs(t, abortErr, lifecycle.ErrRefused, "iteration %d", i)
		}
	}
}

// A writer's foreign key to communities holds FOR KEY SHARE on the community
// row before its fence trigger asks for the shared community lock. Quiesce
// and fence must not wait for that row lock while they hold the exclusive
// community lock, or writer and fence deadlock: they complete while the
// writer's transaction is still open, and the writer is then refused by the
// fence (55000), not by the deadlock detector (40P01).
func TestTransitionsDoNotWaitForWritersForeignKeyLocks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	request, token := testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{Stage: lifecycle.StageApproved, Claimed: true})

	writer, err := b.Pool.Begin(ctx)
	require.NoError(t, err)
	defer writer.Rollback(ctx)
	_, err = writer.Exec(ctx, "SELECT 1 FROM communities WHERE id = $1 FOR KEY SHARE", request.CommunityID)
	require.NoError(t, err)

	bounded, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	require.NoError(t, b.Engine.BeginQuiescing(bounded, token), "quiesce waited for the writer's row lock")
	_, err = b.Engine.EnterFenced(bounded, token)
	require.NoError(t, err, "fence waited for the writer's row lock")

	_, err = writer.Exec(ctx, "INSERT INTO fixture_members (community_id, handle) VALUES ($1, 'late')", request.CommunityID)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "55000", pgErr.Code, pgErr.Message)
}
