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

	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// A request walks every stage through the Store to retention_pending: each
// step leaves its checkpoint, the fence generation binds the request, the
// key chunks go with logical verification, and the terminal step stamps
// completion and releases the lease.
func TestTransitionsWalkToRetentionPending(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	request, token := b.lcClaimed(t)
	community := request.CommunityID

	require.NoError(t, b.engine.BeginQuiescing(ctx, token))
	state, generation, archivedAt := b.lcCommunity(t, community)
	require.Equal(t, "quiescing", state)
	require.Zero(t, generation)
	require.NotNil(t, archivedAt, "quiescing archives the community")
	quiescing, err := b.operator.Get(ctx, request.ID)
	require.NoError(t, err)
	require.NotNil(t, quiescing.QuiescingStartedAt)
	require.Nil(t, quiescing.PreQuiesceArchivedAt)
	require.NoError(t, b.engine.BeginQuiescing(ctx, token), "quiescing again is harmless")
	again, err := b.operator.Get(ctx, request.ID)
	require.NoError(t, err)
	require.Equal(t, quiescing.QuiescingStartedAt, again.QuiescingStartedAt, "recorded once")

	fence, err := b.engine.EnterFenced(ctx, token)
	require.NoError(t, err)
	require.Equal(t, int64(1), fence)
	token = token.WithFence(fence)
	state, generation, _ = b.lcCommunity(t, community)
	require.Equal(t, "fenced", state)
	require.Equal(t, fence, generation)

	// The destructive key list is appended while fenced, then frozen (the
	// storage engineer's calls; SQL here).
	require.NoError(t, b.lcExec(t, `INSERT INTO community_deletion_manifest_keys (request_id, chunk_no, prefix, keys)
		VALUES ($1, 0, $2, '["k"]')`, request.ID, "_meta/"+community.String()+"/"))
	b.lcFreezeDestructive(t, request.ID, community)

	require.NoError(t, b.engine.EnterDrained(ctx, token))
	require.NoError(t, b.engine.VerifyToken(ctx, token, lifecycle.StageDrained))
	require.NoError(t, b.engine.Heartbeat(ctx, token, lcLease))
	require.NoError(t, b.engine.EnterBindingsRemoved(ctx, token, map[string]int{"keys": 1}))
	b.lcTombstone(t, community, request.ID)
	require.NoError(t, b.engine.EnterCachePurged(ctx, token, map[string]int{"keys": 0}))
	inspection, err := b.operator.Inspect(ctx, request.ID)
	require.NoError(t, err)
	require.Equal(t, int64(1), inspection.ChunksTotal)
	require.NoError(t, b.engine.EnterLogicallyVerified(ctx, token, map[string]bool{"all": true}))
	inspection, err = b.operator.Inspect(ctx, request.ID)
	require.NoError(t, err)
	require.Zero(t, inspection.ChunksTotal, "the key chunks go with logical verification")
	require.NoError(t, b.engine.EnterRetentionPending(ctx, token, map[string]string{"probe": "clean"}))

	done, err := b.operator.Inspect(ctx, request.ID)
	require.NoError(t, err)
	require.Equal(t, lifecycle.StageRetentionPending, done.Request.Stage)
	require.NotNil(t, done.Request.CompletedAt)
	require.Empty(t, done.Request.LeaseOwner)
	require.Nil(t, done.Request.LeaseUntil)
	require.Equal(t, fence, *done.Request.FenceGeneration)
	var units []string
	for _, c := range done.Checkpoints {
		require.Equal(t, "completed", c.Status, c.UnitKey)
		units = append(units, string(c.Stage)+"/"+c.UnitKey)
	}
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

	err = b.engine.EnterRetentionPending(ctx, token, nil)
	require.True(t, lifecycle.IsStaleLease(err), "a terminal request takes no more steps: %v", err)
}

// The fence and the drain refuse while serving write leases are unexpired,
// with the typed error, and change nothing; the drain needs the
// destructive manifest frozen.
func TestTransitionsRefuseWhileServingWritesAreActive(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	request, token := b.lcClaimed(t)
	require.NoError(t, b.lcExec(t, `INSERT INTO community_serving_write_leases (community_id, operation, owner, fence_generation, lease_until)
		VALUES ($1, 'upload', 'server-1', 0, now() + interval '1 hour')`, request.CommunityID))
	require.NoError(t, b.engine.BeginQuiescing(ctx, token))

	before := b.lcSnapshot(t, request.ID)
	_, err := b.engine.EnterFenced(ctx, token)
	var notDrained *lifecycle.ServingWritesNotDrainedError
	require.ErrorAs(t, err, &notDrained)
	require.ErrorIs(t, err, lifecycle.ErrRefused)
	require.Equal(t, int64(1), notDrained.ActiveCount)
	require.Equal(t, []string{"upload"}, notDrained.Operations)
	require.Equal(t, request.CommunityID, notDrained.CommunityID)
	require.Equal(t, before, b.lcSnapshot(t, request.ID))

	// Abort refuses too: restoring the community under a new generation
	// would strand the admitted lease.
	_, err = b.operator.Abort(ctx, request.ID, "operator", "changed my mind")
	require.ErrorAs(t, err, &notDrained)
	require.Equal(t, before, b.lcSnapshot(t, request.ID))

	require.NoError(t, b.lcExec(t, "DELETE FROM community_serving_write_leases WHERE community_id = $1", request.CommunityID))
	generation, err := b.engine.EnterFenced(ctx, token)
	require.NoError(t, err)
	token = token.WithFence(generation)

	before = b.lcSnapshot(t, request.ID)
	require.ErrorIs(t, b.engine.EnterDrained(ctx, token), lifecycle.ErrRefused, "drained needs the destructive manifest frozen")
	require.Equal(t, before, b.lcSnapshot(t, request.ID))
}

// Every mutating call this package makes with a lease token rejects a stale
// one and changes nothing: an older generation, another owner, another
// community, a wrong fence generation, an expired lease and a blocked
// request are stale leases; a token missing the fence generation a fenced
// stage needs is refused.
func TestTransitionsRejectStaleTokensEverywhere(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	other, _ := b.createCommunity(t)
	s := b.engine

	ops := []struct {
		name     string
		stage    lifecycle.Stage
		quiesced bool
		// lenient calls may legitimately act on an expired or blocked
		// lease (releasing it); they are not probed with those variants.
		lenient bool
		// fenceless is what a token without a fence generation gets at a
		// fenced stage: true for a refusal, false for a stale lease.
		fenceless bool
		call      func(lifecycle.LeaseToken) error
	}{
		{name: "BeginQuiescing", stage: lifecycle.StageApproved, call: func(tok lifecycle.LeaseToken) error { return s.BeginQuiescing(ctx, tok) }},
		{name: "EnterFenced", stage: lifecycle.StageApproved, quiesced: true, call: func(tok lifecycle.LeaseToken) error { _, err := s.EnterFenced(ctx, tok); return err }},
		{name: "Heartbeat/approved", stage: lifecycle.StageApproved, call: func(tok lifecycle.LeaseToken) error { return s.Heartbeat(ctx, tok, lcLease) }},
		{name: "Block/approved", stage: lifecycle.StageApproved, call: func(tok lifecycle.LeaseToken) error {
			return s.Block(ctx, tok, lifecycle.BlockParams{Stage: lifecycle.StageApproved, Unit: "unit", Err: "broken"})
		}},
		{name: "RecordRetry/approved", stage: lifecycle.StageApproved, call: func(tok lifecycle.LeaseToken) error {
			return s.RecordRetry(ctx, tok, lifecycle.RetryParams{Stage: lifecycle.StageApproved, Unit: "unit", Err: "flaky", After: 0})
		}},
		{name: "VerifyToken/approved", stage: lifecycle.StageApproved, call: func(tok lifecycle.LeaseToken) error {
			return s.VerifyToken(ctx, tok, lifecycle.StageApproved)
		}},
		{name: "Stop/approved", stage: lifecycle.StageApproved, lenient: true, call: func(tok lifecycle.LeaseToken) error {
			return s.Stop(ctx, lifecycle.StopParams{ExecutorID: "nobody", Release: &tok})
		}},
		{name: "EnterDrained", stage: lifecycle.StageFenced, fenceless: true, call: func(tok lifecycle.LeaseToken) error { return s.EnterDrained(ctx, tok) }},
		{name: "Block/fenced", stage: lifecycle.StageFenced, fenceless: true, call: func(tok lifecycle.LeaseToken) error {
			return s.Block(ctx, tok, lifecycle.BlockParams{Stage: lifecycle.StageFenced, Unit: "unit", Err: "broken"})
		}},
		{name: "RecordRetry/fenced", stage: lifecycle.StageFenced, fenceless: true, call: func(tok lifecycle.LeaseToken) error {
			return s.RecordRetry(ctx, tok, lifecycle.RetryParams{Stage: lifecycle.StageFenced, Unit: "unit", Err: "flaky", After: time.Minute})
		}},
		{name: "Heartbeat/fenced", stage: lifecycle.StageFenced, call: func(tok lifecycle.LeaseToken) error { return s.Heartbeat(ctx, tok, lcLease) }},
		{name: "Stop/fenced", stage: lifecycle.StageFenced, lenient: true, call: func(tok lifecycle.LeaseToken) error {
			return s.Stop(ctx, lifecycle.StopParams{ExecutorID: "nobody", Release: &tok})
		}},
		{name: "EnterBindingsRemoved", stage: lifecycle.StageDrained, fenceless: true, call: func(tok lifecycle.LeaseToken) error {
			return s.EnterBindingsRemoved(ctx, tok, nil)
		}},
		{name: "EnterCachePurged", stage: lifecycle.StagePostgresPurged, fenceless: true, call: func(tok lifecycle.LeaseToken) error {
			return s.EnterCachePurged(ctx, tok, nil)
		}},
		{name: "EnterLogicallyVerified", stage: lifecycle.StageCachePurged, fenceless: true, call: func(tok lifecycle.LeaseToken) error {
			return s.EnterLogicallyVerified(ctx, tok, nil)
		}},
		{name: "EnterRetentionPending", stage: lifecycle.StageLogicallyVerified, fenceless: true, call: func(tok lifecycle.LeaseToken) error {
			return s.EnterRetentionPending(ctx, tok, nil)
		}},
		{name: "VerifyToken/logically_verified", stage: lifecycle.StageLogicallyVerified, fenceless: true, call: func(tok lifecycle.LeaseToken) error {
			return s.VerifyToken(ctx, tok, lifecycle.StageLogicallyVerified)
		}},
	}

	type variant struct {
		name    string
		token   func(lifecycle.LeaseToken) lifecycle.LeaseToken
		prepare string // SQL run on the request first, if any
		undo    string
	}
	variants := []variant{
		{name: "older generation", token: func(tok lifecycle.LeaseToken) lifecycle.LeaseToken { tok.Generation--; return tok }},
		{name: "other owner", token: func(tok lifecycle.LeaseToken) lifecycle.LeaseToken { tok.Owner = "impostor"; return tok }},
		{name: "wrong community", token: func(tok lifecycle.LeaseToken) lifecycle.LeaseToken { tok.CommunityID = other; return tok }},
		{name: "wrong fence generation", token: func(tok lifecycle.LeaseToken) lifecycle.LeaseToken {
			if tok.FenceGeneration == nil {
				return tok.WithFence(7)
			}
			return tok.WithFence(*tok.FenceGeneration + 1)
		}},
		{name: "expired lease",
			prepare: "UPDATE community_deletion_requests SET lease_until = now() - interval '1 second' WHERE id = $1",
			undo:    "UPDATE community_deletion_requests SET lease_until = now() + interval '1 hour' WHERE id = $1"},
		{name: "blocked request",
			prepare: "UPDATE community_deletion_requests SET blocked_at = now(), blocked_reason = 'hold' WHERE id = $1",
			undo:    "UPDATE community_deletion_requests SET blocked_at = NULL, blocked_reason = NULL WHERE id = $1"},
		{name: "missing fence generation", token: func(tok lifecycle.LeaseToken) lifecycle.LeaseToken { tok.FenceGeneration = nil; return tok }},
	}

	for _, op := range ops {
		request, token := b.lcAt(t, op.stage, op.quiesced)
		for _, v := range variants {
			if op.lenient && v.prepare != "" {
				continue
			}
			if v.name == "missing fence generation" && token.FenceGeneration == nil {
				continue
			}
			if v.prepare != "" {
				require.NoError(t, b.lcExec(t, v.prepare, request.ID))
			}
			presented := token
			if v.token != nil {
				presented = v.token(token)
			}
			before := b.lcSnapshot(t, request.ID)
			err := op.call(presented)
			require.Error(t, err, "%s with %s", op.name, v.name)
			if v.name == "missing fence generation" && op.fenceless {
				require.ErrorIs(t, err, lifecycle.ErrRefused, "%s with %s", op.name, v.name)
				require.False(t, lifecycle.IsStaleLease(err))
			} else {
				require.True(t, lifecycle.IsStaleLease(err), "%s with %s: %v", op.name, v.name, err)
			}
			require.Equal(t, before, b.lcSnapshot(t, request.ID), "%s with %s changed something", op.name, v.name)
			if v.undo != "" {
				require.NoError(t, b.lcExec(t, v.undo, request.ID))
			}
		}
		// And the genuine token still works: the refusals were about the
		// token, not the setup.
		require.NoError(t, op.call(token), "%s with the current token", op.name)
	}
}

// Abort racing the executor's quiesce and fence, started together over many
// iterations, always serializes: the abort succeeds, the executor either
// finished its step first or fails closed, the community ends active, and
// PostgreSQL never reports a deadlock.
func TestTransitionsAbortRacingQuiesceAndFenceNeverDeadlocks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	const iterations = 24
	forwardWon := 0
	for i := range iterations {
		quiescedFirst := i%2 == 1
		request, token := b.lcAt(t, lifecycle.StageApproved, quiescedFirst)

		start := make(chan struct{})
		var wg sync.WaitGroup
		var abortErr, forwardErr error
		var aborted *lifecycle.Request
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			aborted, abortErr = b.operator.Abort(ctx, request.ID, "operator", "race")
		}()
		go func() {
			defer wg.Done()
			<-start
			if !quiescedFirst {
				if forwardErr = b.engine.BeginQuiescing(ctx, token); forwardErr != nil {
					return
				}
			}
			_, forwardErr = b.engine.EnterFenced(ctx, token)
		}()
		close(start)
		wg.Wait()

		lcRequireNoDeadlock(t, abortErr)
		lcRequireNoDeadlock(t, forwardErr)
		require.NoError(t, abortErr, "iteration %d", i)
		require.Equal(t, lifecycle.StageAborted, aborted.Stage)
		if forwardErr != nil {
			require.True(t, lifecycle.IsStaleLease(forwardErr), "iteration %d: %v", i, forwardErr)
		} else {
			forwardWon++
		}
		state, generation, archivedAt := b.lcCommunity(t, request.CommunityID)
		require.Equal(t, "active", state, "iteration %d", i)
		require.Nil(t, archivedAt, "iteration %d: archived_at restored", i)
		if aborted.FenceGeneration != nil {
			require.Equal(t, *aborted.FenceGeneration, generation)
		} else {
			require.Zero(t, generation, "iteration %d: nothing to restore", i)
		}
	}
	t.Logf("the executor's step won %d of %d races", forwardWon, iterations)
}

// Abort restores a quiescing or fenced community to active under a new
// generation with its pre-quiesce archived_at, and refuses once the request
// drained.
func TestTransitionsAbortRestoresTheCommunity(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()

	// An archived community keeps its own archived_at through the cycle.
	archived, token := b.lcAt(t, lifecycle.StageApproved, false)
	stamp := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	require.NoError(t, b.lcExec(t, "UPDATE communities SET archived_at = $2 WHERE id = $1", archived.CommunityID, stamp))
	require.NoError(t, b.engine.BeginQuiescing(ctx, token))
	generation, err := b.engine.EnterFenced(ctx, token)
	require.NoError(t, err)
	result, err := b.operator.Abort(ctx, archived.ID, "operator", "keep it")
	require.NoError(t, err)
	require.Equal(t, generation+1, *result.FenceGeneration)
	state, current, archivedAt := b.lcCommunity(t, archived.CommunityID)
	require.Equal(t, "active", state)
	require.Equal(t, generation+1, current)
	require.NotNil(t, archivedAt)
	require.True(t, stamp.Equal(*archivedAt))
	inspection, err := b.operator.Inspect(ctx, archived.ID)
	require.NoError(t, err)
	var detail map[string]any
	require.NoError(t, json.Unmarshal(lcCheckpoint(t, inspection, "operator_abort:").Detail, &detail))
	require.Equal(t, "fenced", detail["community_state"])
	require.EqualValues(t, generation, detail["old_fence_generation"])
	require.EqualValues(t, generation+1, detail["new_fence_generation"])
	err = b.engine.Heartbeat(ctx, token.WithFence(generation), lcLease)
	require.True(t, lifecycle.IsStaleLease(err), "the abort made the executor's token stale")

	// Past the fence nothing is abortable.
	drained, _ := b.lcAt(t, lifecycle.StageDrained, false)
	before := b.lcSnapshot(t, drained.ID)
	_, err = b.operator.Abort(ctx, drained.ID, "operator", "too late")
	require.ErrorIs(t, err, lifecycle.ErrRefused)
	require.Equal(t, before, b.lcSnapshot(t, drained.ID))

	_, err = b.operator.Abort(ctx, uuid.New(), "operator", "nothing")
	require.ErrorIs(t, err, lifecycle.ErrNotFound)
}

// Transitions take the community lock before the request row lock: a
// transition queued on the community lock holds no row lock, so a claim
// loop's row-level work on the same request is not blocked by it.
func TestTransitionsTakeTheCommunityLockBeforeRowLocks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	request, token := b.lcClaimed(t)
	gate := b.lcHoldCommunityLock(t, request.CommunityID)
	quiesced := make(chan error, 1)
	go func() { quiesced <- b.engine.BeginQuiescing(ctx, token) }()
	b.lcWaitForLockWaiters(t, 1)

	// The request row is not locked by the queued transition.
	lockCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	tx, err := b.pool.Begin(lockCtx)
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
	const iterations = 16
	for i := range iterations {
		request, token := b.lcAt(t, lifecycle.StageFenced, true)

		start := make(chan struct{})
		var wg sync.WaitGroup
		var abortErr, drainErr error
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			_, abortErr = b.operator.Abort(ctx, request.ID, "operator", "race")
		}()
		go func() {
			defer wg.Done()
			<-start
			drainErr = b.engine.EnterDrained(ctx, token)
		}()
		close(start)
		wg.Wait()

		lcRequireNoDeadlock(t, abortErr)
		lcRequireNoDeadlock(t, drainErr)
		require.True(t, (abortErr == nil) != (drainErr == nil), "iteration %d: exactly one wins (abort %v, drain %v)", i, abortErr, drainErr)
		current, err := b.operator.Get(ctx, request.ID)
		require.NoError(t, err)
		state, _, _ := b.lcCommunity(t, request.CommunityID)
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
	request, token := b.lcAt(t, lifecycle.StageApproved, false)

	writer, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer writer.Rollback(ctx)
	_, err = writer.Exec(ctx, "SELECT 1 FROM communities WHERE id = $1 FOR KEY SHARE", request.CommunityID)
	require.NoError(t, err)

	bounded, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	require.NoError(t, b.engine.BeginQuiescing(bounded, token), "quiesce waited for the writer's row lock")
	_, err = b.engine.EnterFenced(bounded, token)
	require.NoError(t, err, "fence waited for the writer's row lock")

	_, err = writer.Exec(ctx, "INSERT INTO fixture_members (community_id, handle) VALUES ($1, 'late')", request.CommunityID)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "55000", pgErr.Code, pgErr.Message)
}
