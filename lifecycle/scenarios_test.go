package lifecycle_test

import (
	"encoding/hex"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/testfactory"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// The PostgreSQL scenarios of the reference design's DeletionStore, ported
// with the same intent and assertions.

// abortResult is what an abort running in a goroutine returns.
type abortResult struct {
	request *lifecycle.Request
	err     error
}

// Approval binds to the exact frozen inventory: nothing is claimable before
// it, row churn after the freeze does not invalidate it, and a mismatched
// approval or a rewritten digest is unrepresentable.
func TestScenarioApprovalBoundaryBlocksClaimUntilExactInventoryIsApproved(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	request, _ := testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{Stage: lifecycle.StageInventoried})
	inventory := *request.Inventory
	claim, err := b.Engine.ClaimRequest(ctx, request.ID, "executor-a", lifecycle.DefaultLeaseDuration)
	require.ErrorIs(t, err, lifecycle.ErrNothingToClaim, "an inventoried request is not claimable")
	require.Nil(t, claim)

	// Row counts are observational evidence: serving churn after the freeze
	// changes the live count but not the catalog, and approval still binds.
	_, err = b.Pool.Exec(ctx, "INSERT INTO fixture_members (community_id, handle) VALUES ($1, 'late')", request.CommunityID)
	require.NoError(t, err)
	live, err := b.Operator.InventorySchema(ctx, request.CommunityID)
	require.NoError(t, err)
	require.Equal(t, inventory.Schema.RowCounts["fixture_members"]+1, live.RowCounts["fixture_members"])
	require.Equal(t, inventory.Schema.ScopedTables, live.ScopedTables)
	require.Equal(t, inventory.Schema.FencedTables, live.FencedTables)

	_, err = b.Pool.Exec(ctx, `INSERT INTO community_deletion_approvals (request_id, community_id, inventory_digest, approved_by)
		VALUES ($1, $2, $3, 'tampered')`, request.ID, request.CommunityID, make([]byte, 32))
	require.Error(t, err, "a mismatched approval must be unrepresentable")

	approved, err := b.Approver.Approve(ctx, request.ID, "approver-a", "reviewed")
	require.NoError(t, err)
	require.Equal(t, lifecycle.StageApproved, approved.Stage)
	digest, err := inventory.Digest()
	require.NoError(t, err)
	require.Equal(t, hex.EncodeToString(digest[:]), approved.InventoryDigest)
	require.Equal(t, request.InventoryDigest, approved.InventoryDigest, "the approval binds the digest frozen with the inventory")

	_, err = b.Pool.Exec(ctx, "UPDATE community_deletion_approvals SET inventory_digest = $2 WHERE request_id = $1", request.ID, make([]byte, 32))
	require.Error(t, err, "the approval digest stays bound to the frozen request digest")
	ones := make([]byte, 32)
	for i := range ones {
		ones[i] = 1
	}
	_, err = b.Pool.Exec(ctx, "UPDATE community_deletion_requests SET inventory_digest = $2 WHERE id = $1", request.ID, ones)
	require.Error(t, err, "the frozen request digest stays bound to its approval")

	claim, err = b.Engine.ClaimRequest(ctx, request.ID, "executor-a", lifecycle.DefaultLeaseDuration)
	require.NoError(t, err)
	require.NotNil(t, claim)
	require.Equal(t, int64(1), claim.Lease.Generation)
}

// A request's target and frozen inventory never change, approval evidence
// is immutable, a blocked request renews no lease, and a stage forged to
// approved without an approval is refused by the database (the reference
// design only kept it unclaimable).
func TestScenarioApprovedRequestCannotBeRetargetedRewrittenOrClaimedWithoutApproval(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	request, _ := testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{Stage: lifecycle.StageInventoried})
	control := testfactory.Community(ctx, t, b.DB, nil)

	for name, mutation := range map[string]func() error{
		"community_id": func() error {
			return b.exec(t, "UPDATE community_deletion_requests SET community_id = $2 WHERE id = $1", request.ID, control.ID)
		},
		"community_host": func() error {
			return b.exec(t, "UPDATE community_deletion_requests SET community_host = $2 WHERE id = $1", request.ID, control.Host)
		},
		"inventory_manifest": func() error {
			return b.exec(t, "UPDATE community_deletion_requests SET inventory_manifest = '{}' WHERE id = $1", request.ID)
		},
		"storage_manifest": func() error {
			return b.exec(t, "UPDATE community_deletion_requests SET storage_manifest = '{}' WHERE id = $1", request.ID)
		},
	} {
		require.Error(t, mutation(), "the frozen %s must be immutable", name)
	}

	_, err := b.Approver.Approve(ctx, request.ID, "approver", "")
	require.NoError(t, err)
	claim, err := b.Engine.ClaimRequest(ctx, request.ID, "forged-executor", lifecycle.DefaultLeaseDuration)
	require.NoError(t, err)
	require.NotNil(t, claim)

	require.Error(t, b.exec(t, "DELETE FROM community_deletion_approvals WHERE request_id = $1", request.ID),
		"approval evidence must be immutable")
	for _, update := range []string{
		"UPDATE community_deletion_approvals SET approved_by = 'forged' WHERE request_id = $1",
		"UPDATE community_deletion_approvals SET approved_at = now() + interval '1 hour' WHERE request_id = $1",
		"UPDATE community_deletion_approvals SET note = 'rewritten' WHERE request_id = $1",
	} {
		require.Error(t, b.exec(t, update, request.ID), "approval updates must be refused: %s", update)
	}
	require.NoError(t, b.Engine.VerifyToken(ctx, claim.Lease, lifecycle.StageApproved))

	require.NoError(t, b.exec(t, "UPDATE community_deletion_requests SET blocked_at = now(), blocked_reason = 'operator hold' WHERE id = $1", request.ID))
	err = b.Engine.Heartbeat(ctx, claim.Lease, lifecycle.DefaultLeaseDuration)
	require.True(t, lifecycle.IsStaleLease(err), "a blocked request must not renew its lease: %v", err)

	forged, _ := testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{Stage: lifecycle.StageInventoried})
	err = b.exec(t, "UPDATE community_deletion_requests SET stage = 'approved' WHERE id = $1", forged.ID)
	require.Error(t, err, "a runnable stage without an approval is refused by the database")
	requirePgCode(t, err, "23000")
	claim, err = b.Engine.ClaimRequest(ctx, forged.ID, "forged-executor-2", lifecycle.DefaultLeaseDuration)
	require.ErrorIs(t, err, lifecycle.ErrNothingToClaim)
	require.Nil(t, claim)

	// The requester cannot approve, in Go or in the database.
	_, err = b.Approver.Approve(ctx, forged.ID, " REQUESTER ", "")
	require.ErrorIs(t, err, lifecycle.ErrRefused)
	err = b.exec(t, `INSERT INTO community_deletion_approvals (request_id, community_id, inventory_digest, approved_by)
		SELECT id, community_id, inventory_digest, 'Requester' FROM community_deletion_requests WHERE id = $1`, forged.ID)
	require.Error(t, err)
	unchanged, err := b.Operator.Get(ctx, forged.ID)
	require.NoError(t, err)
	require.Equal(t, lifecycle.StageInventoried, unchanged.Stage)
}

// The eighth consecutive failure at one stage blocks durably; an operator
// unblock resets the streak, and progress to the next stage resets it too.
func TestScenarioRetryExhaustionBlocksOnlyTheConsecutiveStageAndProgressResetsIt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	request, _ := testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{Stage: lifecycle.StageApproved})

	for attempt := int32(1); attempt <= lifecycle.MaxConsecutiveRetries; attempt++ {
		claim, err := b.Engine.ClaimRequest(ctx, request.ID, "executor", lifecycle.DefaultLeaseDuration)
		require.NoError(t, err)
		require.NotNil(t, claim, "claimable before exhaustion (attempt %d)", attempt)
		require.NoError(t, b.Engine.RecordRetry(ctx, claim.Lease, lifecycle.RetryParams{Stage: lifecycle.StageApproved, Unit: "dependency", Err: "dependency unavailable", After: 0}))
		observed, err := b.Operator.Get(ctx, request.ID)
		require.NoError(t, err)
		require.Equal(t, attempt, observed.RetryCount)
		require.NotNil(t, observed.RetryStage)
		require.Equal(t, lifecycle.StageApproved, *observed.RetryStage)
		require.Equal(t, attempt == lifecycle.MaxConsecutiveRetries, observed.Blocked(), "attempt %d", attempt)
		require.Empty(t, observed.LeaseOwner)
	}
	claim, err := b.Engine.ClaimRequest(ctx, request.ID, "blocked-executor", lifecycle.DefaultLeaseDuration)
	require.ErrorIs(t, err, lifecycle.ErrNothingToClaim)
	require.Nil(t, claim)

	recovered, err := b.Operator.Unblock(ctx, request.ID, "operator", "dependency repaired")
	require.NoError(t, err)
	require.Zero(t, recovered.RetryCount)
	require.Nil(t, recovered.RetryStage)
	require.False(t, recovered.Blocked())

	// Seven failures, then progress: the streak restarts at the next stage.
	for range lifecycle.MaxConsecutiveRetries - 1 {
		claim, err := b.Engine.ClaimRequest(ctx, request.ID, "executor", lifecycle.DefaultLeaseDuration)
		require.NoError(t, err)
		require.NotNil(t, claim)
		require.NoError(t, b.Engine.RecordRetry(ctx, claim.Lease, lifecycle.RetryParams{Stage: lifecycle.StageApproved, Unit: "dependency", Err: "flaky", After: 0}))
	}
	claim, err = b.Engine.ClaimRequest(ctx, request.ID, "successor", lifecycle.DefaultLeaseDuration)
	require.NoError(t, err)
	require.NotNil(t, claim)
	require.NoError(t, b.Engine.BeginQuiescing(ctx, claim.Lease))
	generation, err := b.Engine.EnterFenced(ctx, claim.Lease)
	require.NoError(t, err)
	advanced, err := b.Operator.Get(ctx, request.ID)
	require.NoError(t, err)
	require.Equal(t, lifecycle.StageFenced, advanced.Stage)
	require.Zero(t, advanced.RetryCount)
	require.Nil(t, advanced.RetryStage)

	token := claim.Lease.WithFence(generation)
	require.NoError(t, b.Engine.RecordRetry(ctx, token, lifecycle.RetryParams{Stage: lifecycle.StageFenced, Unit: "drain", Err: "still draining", After: 0}))
	after, err := b.Operator.Get(ctx, request.ID)
	require.NoError(t, err)
	require.Equal(t, int32(1), after.RetryCount, "failures before the progress do not count")
	require.False(t, after.Blocked())
}

// Abort and the executor's quiesce take the community lock in the same
// order: abort, queued first, wins, and the quiesce that queued behind it
// fails closed on its re-verification, never with a deadlock.
func TestScenarioAbortSerializesBeforeQuiescingWithoutDeadlock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	request, token := testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{Stage: lifecycle.StageApproved, Claimed: true})
	gate := b.holdCommunityLock(t, request.CommunityID)

	aborted := make(chan abortResult, 1)
	go func() {
		r, err := b.Operator.Abort(ctx, request.ID, "operator", "race recovery")
		aborted <- abortResult{r, err}
	}()
	b.waitForLockWaiters(t, 1, advisoryLock)
	quiesced := make(chan error, 1)
	go func() { quiesced <- b.Engine.BeginQuiescing(ctx, token) }()
	b.waitForLockWaiters(t, 2, advisoryLock)
	select {
	case <-aborted:
		t.Fatal("abort finished while the community lock was held")
	case err := <-quiesced:
		t.Fatalf("quiescing finished (error: %v) while the community lock was held", err)
	default:
	}
	require.NoError(t, gate.Commit(ctx))

	result := <-aborted
	require.NoError(t, result.err)
	require.Equal(t, lifecycle.StageAborted, result.request.Stage)
	err := <-quiesced
	require.Error(t, err, "the re-verification under the lock rejects the aborted request")
	require.True(t, lifecycle.IsStaleLease(err), "%v", err)
	requireNoDeadlock(t, err)
	community := b.community(t, request.CommunityID)
	require.Equal(t, "active", community.State)
	require.Zero(t, community.FenceGeneration)
}

// The same for the fence: abort restores the quiescing community and the
// fence queued behind it fails closed, with no SQLSTATE 40P01.
func TestScenarioAbortSerializesBeforeFenceWithoutDeadlock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	request, token := testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{Stage: lifecycle.StageApproved, Quiesced: true})
	gate := b.holdCommunityLock(t, request.CommunityID)

	aborted := make(chan abortResult, 1)
	go func() {
		r, err := b.Operator.Abort(ctx, request.ID, "operator", "race recovery")
		aborted <- abortResult{r, err}
	}()
	b.waitForLockWaiters(t, 1, advisoryLock)
	fenced := make(chan error, 1)
	go func() {
		_, err := b.Engine.EnterFenced(ctx, token)
		fenced <- err
	}()
	b.waitForLockWaiters(t, 2, advisoryLock)
	select {
	case <-aborted:
		t.Fatal("abort finished while the community lock was held")
	case err := <-fenced:
		t.Fatalf("the fence finished (error: %v) while the community lock was held", err)
	default:
	}
	require.NoError(t, gate.Commit(ctx))

	result := <-aborted
	require.NoError(t, result.err)
	require.Equal(t, lifecycle.StageAborted, result.request.Stage)
	require.NotNil(t, result.request.FenceGeneration)
	require.Equal(t, int64(1), *result.request.FenceGeneration)
	err := <-fenced
	require.Error(t, err)
	require.True(t, lifecycle.IsStaleLease(err), "%v", err)
	requireNoDeadlock(t, err)
	community := b.community(t, request.CommunityID)
	require.Equal(t, "active", community.State)
	require.Equal(t, int64(1), community.FenceGeneration, "the abort restored the community under a new generation")
	require.Nil(t, community.ArchivedAt, "the pre-quiesce archived_at is restored")
}

// An aborted request stays as audit and the community can be requested
// afresh.
func TestScenarioAbortPreservesAuditAndAllowsFreshRequest(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	request, _ := testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{Stage: lifecycle.StageApproved})
	aborted, err := b.Operator.Abort(ctx, request.ID, "operator", "cancel deletion")
	require.NoError(t, err)
	require.Equal(t, lifecycle.StageAborted, aborted.Stage)
	require.Equal(t, "operator", aborted.AbortedBy)
	require.Equal(t, "cancel deletion", aborted.AbortReason)
	require.NotNil(t, aborted.AbortedAt)
	require.NotNil(t, aborted.CompletedAt)
	require.Equal(t, request.LeaseGeneration+1, aborted.LeaseGeneration)

	replacement, err := b.Operator.Submit(ctx, request.CommunityHost, "second-operator", "fresh review")
	require.NoError(t, err)
	require.NotEqual(t, request.ID, replacement.ID)
	require.Equal(t, lifecycle.StageSubmitted, replacement.Stage)
	require.Empty(t, replacement.InventoryDigest)
	require.Nil(t, replacement.Inventory)

	preserved, err := b.Operator.Inspect(ctx, request.ID)
	require.NoError(t, err)
	require.Equal(t, lifecycle.StageAborted, preserved.Request.Stage)
	require.NotNil(t, preserved.Approval, "the approval evidence stays")
	audit := checkpoint(t, preserved, "operator_abort:")
	require.Equal(t, "completed", audit.Status)
	var detail map[string]any
	require.NoError(t, json.Unmarshal(audit.Detail, &detail))
	require.Equal(t, "operator", detail["aborted_by"])
	require.Equal(t, "cancel deletion", detail["reason"])
	require.Nil(t, detail["new_fence_generation"], "an active community needs no restore")
}

// A setup failure before any claim blocks durably, without a lease, and a
// repeated failure after an unblock updates the same checkpoint.
func TestScenarioPreclaimSetupFailureIsDurableWithoutALease(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	request, _ := testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{Stage: lifecycle.StageApproved})
	blocked, err := b.Engine.BlockBeforeClaim(ctx, request.ID, "pre_claim:service_setup", "S3_ENDPOINT is required")
	require.NoError(t, err)
	require.Equal(t, lifecycle.StageApproved, blocked.Stage)
	require.Equal(t, "S3_ENDPOINT is required", blocked.BlockedReason)
	require.Equal(t, "S3_ENDPOINT is required", blocked.LastError)
	require.Empty(t, blocked.LeaseOwner)
	inspection, err := b.Operator.Inspect(ctx, request.ID)
	require.NoError(t, err)
	failed := checkpoint(t, inspection, "pre_claim:service_setup")
	require.Equal(t, "failed", failed.Status)
	require.Equal(t, "S3_ENDPOINT is required", failed.Error)
	require.Equal(t, int32(1), failed.Attempts)
	require.Nil(t, failed.CompletedAt)

	_, err = b.Operator.Unblock(ctx, request.ID, "operator", "dependency repaired")
	require.NoError(t, err)
	blockedAgain, err := b.Engine.BlockBeforeClaim(ctx, request.ID, "pre_claim:service_setup", "REDIS_URL is required")
	require.NoError(t, err)
	require.Equal(t, "REDIS_URL is required", blockedAgain.BlockedReason)
	require.Equal(t, "REDIS_URL is required", blockedAgain.LastError)
	repeated, err := b.Operator.Inspect(ctx, request.ID)
	require.NoError(t, err)
	failed = checkpoint(t, repeated, "pre_claim:service_setup")
	require.Equal(t, "failed", failed.Status)
	require.Equal(t, int32(2), failed.Attempts)
	require.Equal(t, "REDIS_URL is required", failed.Error)
	var detail map[string]string
	require.NoError(t, json.Unmarshal(failed.Detail, &detail))
	require.Equal(t, "REDIS_URL is required", detail["error"])
	require.Nil(t, failed.CompletedAt)

	// A live lease belongs to Block, not to a pre-claim failure.
	_, err = b.Operator.Unblock(ctx, request.ID, "operator", "repaired again")
	require.NoError(t, err)
	claim, err := b.Engine.ClaimRequest(ctx, request.ID, "executor", lifecycle.DefaultLeaseDuration)
	require.NoError(t, err)
	require.NotNil(t, claim)
	before := b.snapshot(t, request.ID)
	_, err = b.Engine.BlockBeforeClaim(ctx, request.ID, "pre_claim:service_setup", "late")
	require.ErrorIs(t, err, lifecycle.ErrRefused)
	require.Equal(t, before, b.snapshot(t, request.ID))
}

// Unblocking keeps the approval, inventory, stage and fence generation and
// records who recovered the request and from what.
func TestScenarioOperatorUnblockPreservesApprovalAndRecordsRecovery(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	request, _ := testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{Stage: lifecycle.StageApproved, Claimed: true,
		Blocked: true, BlockedUnit: "dependency", BlockedReason: "operator repair required"})

	_, err := b.Operator.Unblock(ctx, request.ID, "", "repair")
	require.ErrorIs(t, err, lifecycle.ErrInvalidInput)
	recovered, err := b.Operator.Unblock(ctx, request.ID, "operator", "bucket policy repaired")
	require.NoError(t, err)
	require.Equal(t, lifecycle.StageApproved, recovered.Stage)
	require.False(t, recovered.Blocked())
	require.Empty(t, recovered.LastError)
	require.Equal(t, request.InventoryDigest, recovered.InventoryDigest)
	require.Equal(t, request.FenceGeneration, recovered.FenceGeneration)
	_, err = b.Operator.Unblock(ctx, request.ID, "operator", "again")
	require.ErrorIs(t, err, lifecycle.ErrRefused, "a request that is not blocked cannot be unblocked")
	claim, err := b.Engine.ClaimRequest(ctx, request.ID, "successor", lifecycle.DefaultLeaseDuration)
	require.NoError(t, err)
	require.NotNil(t, claim)

	inspection, err := b.Operator.Inspect(ctx, request.ID)
	require.NoError(t, err)
	require.NotNil(t, inspection.Approval)
	require.Equal(t, "approver", inspection.Approval.ApprovedBy)
	audit := checkpoint(t, inspection, "operator_unblock:")
	var detail map[string]any
	require.NoError(t, json.Unmarshal(audit.Detail, &detail))
	require.Equal(t, "operator", detail["unblocked_by"])
	require.Equal(t, "bucket policy repaired", detail["reason"])
	require.Equal(t, "operator repair required", detail["previous_block"])
	failure := checkpoint(t, inspection, "dependency")
	require.Equal(t, "failed", failure.Status, "the failure checkpoint stays")

	// A blocked request whose executor lease is still live on the database
	// clock is not unblocked under it.
	require.NoError(t, b.exec(t, "UPDATE community_deletion_requests SET blocked_at = now(), blocked_reason = 'hold' WHERE id = $1", request.ID))
	_, err = b.Operator.Unblock(ctx, request.ID, "operator", "too early")
	require.ErrorIs(t, err, lifecycle.ErrRefused)
	testfactory.ExpireLease(ctx, t, b.DB, request.ID)
	_, err = b.Operator.Unblock(ctx, request.ID, "operator", "lease expired")
	require.NoError(t, err)
}

// An older lease generation, a token bound to another community and a
// wrong fence generation all fail closed.
func TestScenarioStaleClaimAndFenceGenerationFailClosed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	request, token := testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{Stage: lifecycle.StageApproved, Claimed: true})
	stale := token
	stale.Generation--
	_, err := b.Engine.EnterFenced(ctx, stale)
	require.True(t, lifecycle.IsStaleLease(err), "%v", err)

	other := testfactory.Community(ctx, t, b.DB, nil)
	wrongCommunity := token
	wrongCommunity.CommunityID = other.ID
	require.True(t, lifecycle.IsStaleLease(b.Engine.BeginQuiescing(ctx, wrongCommunity)),
		"a token stays bound to its request's community")
	require.Equal(t, "active", b.community(t, other.ID).State)

	require.NoError(t, b.Engine.BeginQuiescing(ctx, token))
	generation, err := b.Engine.EnterFenced(ctx, token)
	require.NoError(t, err)
	require.Equal(t, int64(1), generation)
	require.NoError(t, b.Engine.FreezeDestructiveManifest(ctx, token.WithFence(generation), testfactory.EmptyStorage(request.CommunityID)))
	wrongFence := token.WithFence(generation + 1)
	require.True(t, lifecycle.IsStaleLease(b.Engine.EnterDrained(ctx, wrongFence)), "a wrong fence generation is refused")
	require.ErrorIs(t, b.Engine.EnterDrained(ctx, token), lifecycle.ErrRefused, "a token without its fence generation is refused")
	require.NoError(t, b.Engine.EnterDrained(ctx, token.WithFence(generation)))
}

// A write admitted before the fence holds it off; the fence then commits
// and every later write is refused.
func TestScenarioFenceWaitsForOpenWriteAndRejectsItAfterTransition(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	request, token := testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{Stage: lifecycle.StageApproved, Claimed: true})

	writer, err := b.Pool.Begin(ctx)
	require.NoError(t, err)
	defer writer.Rollback(ctx)
	_, err = writer.Exec(ctx, "INSERT INTO fixture_members (community_id, handle) VALUES ($1, 'in-flight')", request.CommunityID)
	require.NoError(t, err, "the write takes the shared community lock")

	fenced := make(chan error, 1)
	go func() {
		if err := b.Engine.BeginQuiescing(ctx, token); err != nil {
			fenced <- err
			return
		}
		_, err := b.Engine.EnterFenced(ctx, token)
		fenced <- err
	}()
	b.waitForLockWaiters(t, 1, advisoryLock)
	select {
	case err := <-fenced:
		t.Fatalf("the fence finished while a writer held the shared lock: %v", err)
	default:
	}
	require.NoError(t, writer.Commit(ctx), "the writer admitted before the fence commits")
	require.NoError(t, <-fenced)

	var inFlight int
	require.NoError(t, b.Pool.QueryRow(ctx, "SELECT count(*) FROM fixture_members WHERE community_id = $1 AND handle = 'in-flight'",
		request.CommunityID).Scan(&inFlight))
	require.Equal(t, 1, inFlight)
	_, err = b.Pool.Exec(ctx, "INSERT INTO fixture_members (community_id, handle) VALUES ($1, 'after')", request.CommunityID)
	requirePgCode(t, err, "55000")
	require.ErrorContains(t, err, "is fenced", "a write after the fence is refused")
}
