package lifecycle_test

import (
	"math"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/testfactory"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// Many executors claiming one request at once, by id and as the next
// claimable request, produce exactly one winner per lease generation; the
// losers get ErrNothingToClaim.
func TestClaimRaceHasOneWinnerPerGeneration(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	request, _ := testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{Stage: lifecycle.StageApproved})
	const claimers = 16
	for round := int64(1); round <= 3; round++ {
		start := make(chan struct{})
		var wg sync.WaitGroup
		results := make(chan *lifecycle.ClaimedDeletion, claimers)
		errs := make(chan error, claimers)
		for i := range claimers {
			wg.Go(func() {
				<-start
				owner := "executor-" + string(rune('a'+i))
				var claim *lifecycle.ClaimedDeletion
				var err error
				if i%2 == 0 {
					claim, err = b.Engine.ClaimRequest(ctx, request.ID, owner, lifecycle.DefaultLeaseDuration)
				} else {
					claim, err = b.Engine.ClaimNext(ctx, owner, lifecycle.DefaultLeaseDuration)
				}
				errs <- err
				results <- claim
			})
		}
		close(start)
		wg.Wait()
		close(results)
		close(errs)
		for err := range errs {
			if err != nil {
				require.ErrorIs(t, err, lifecycle.ErrNothingToClaim)
			}
		}
		var winners []*lifecycle.ClaimedDeletion
		for claim := range results {
			if claim != nil {
				winners = append(winners, claim)
			}
		}
		require.Len(t, winners, 1, "round %d", round)
		winner := winners[0]
		require.Equal(t, request.ID, winner.Request.ID)
		require.Equal(t, round, winner.Lease.Generation)
		require.Equal(t, int32(round), winner.Request.Attempts)
		require.Equal(t, winner.Request.LeaseOwner, winner.Lease.Owner)
		require.NoError(t, b.Engine.VerifyToken(ctx, winner.Lease, lifecycle.StageApproved))

		// The lease expires; the next round reclaims it.
		testfactory.ExpireLease(ctx, t, b.DB, request.ID)
	}
}

// ClaimNext takes the oldest claimable request and skips the ones that are
// not approved, blocked, leased or not yet due; ClaimSpecific tells a
// missing request from an unclaimable one.
func TestClaimNextTakesTheOldestClaimableRequest(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	inventoried, _ := testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{Stage: lifecycle.StageInventoried})
	blocked, _ := testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{Stage: lifecycle.StageApproved,
		Blocked: true, BlockedUnit: "pre_claim:setup", BlockedReason: "no credentials"})
	notDue, _ := testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{Stage: lifecycle.StageApproved})
	require.NoError(t, b.exec(t, "UPDATE community_deletion_requests SET next_attempt_at = now() + interval '1 hour' WHERE id = $1", notDue.ID))
	first, _ := testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{Stage: lifecycle.StageApproved})
	second, _ := testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{Stage: lifecycle.StageApproved})

	claim, err := b.Engine.ClaimNext(ctx, "executor", lifecycle.DefaultLeaseDuration)
	require.NoError(t, err)
	require.Equal(t, first.ID, claim.Request.ID)
	claim, err = b.Engine.ClaimNext(ctx, "executor", lifecycle.DefaultLeaseDuration)
	require.NoError(t, err)
	require.Equal(t, second.ID, claim.Request.ID)
	claim, err = b.Engine.ClaimNext(ctx, "executor", lifecycle.DefaultLeaseDuration)
	require.ErrorIs(t, err, lifecycle.ErrNothingToClaim, "nothing else is claimable")
	require.Nil(t, claim)

	for _, id := range []uuid.UUID{inventoried.ID, blocked.ID, notDue.ID, first.ID} {
		claim, err := b.Engine.ClaimRequest(ctx, id, "executor-2", lifecycle.DefaultLeaseDuration)
		require.ErrorIs(t, err, lifecycle.ErrNothingToClaim, "request %s is not claimable", id)
		require.Nil(t, claim)
	}
	_, err = b.Engine.ClaimRequest(ctx, uuid.New(), "executor", lifecycle.DefaultLeaseDuration)
	require.ErrorIs(t, err, lifecycle.ErrNotFound)

	// A retry delay is honoured: the request is due again only after it.
	claim, err = b.Engine.ClaimRequest(ctx, blocked.ID, "executor", lifecycle.DefaultLeaseDuration)
	require.ErrorIs(t, err, lifecycle.ErrNothingToClaim)
	require.Nil(t, claim)
	_, err = b.Operator.Unblock(ctx, blocked.ID, "operator", "credentials installed")
	require.NoError(t, err)
	claim, err = b.Engine.ClaimRequest(ctx, blocked.ID, "executor", lifecycle.DefaultLeaseDuration)
	require.NoError(t, err)
	require.NotNil(t, claim)
	require.NoError(t, b.Engine.RecordRetry(ctx, claim.Lease, lifecycle.RetryParams{Stage: lifecycle.StageApproved, Unit: "dependency", Err: "later", After: time.Hour}))
	claim, err = b.Engine.ClaimRequest(ctx, blocked.ID, "executor", lifecycle.DefaultLeaseDuration)
	require.ErrorIs(t, err, lifecycle.ErrNothingToClaim, "not due before the retry delay")
	require.Nil(t, claim)
}

// Exactly the runnable stages, approved through logically_verified, are
// claimable (once no live lease is in the way): a claim there leases the
// request at its stage under the next lease generation and, from fenced
// on, its fence generation. Before approval and once terminal there is
// nothing to claim, and the claim changes nothing.
func TestClaimOnlyAtRunnableStages(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	for _, stage := range lifecycle.Stages() {
		t.Run(string(stage), func(t *testing.T) {
			request, _ := testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{Stage: stage})
			if request.LeaseUntil != nil {
				testfactory.ExpireLease(ctx, t, b.DB, request.ID)
			}
			before := b.snapshot(t, request.ID)
			claim, err := b.Engine.ClaimRequest(ctx, request.ID, "successor", lifecycle.DefaultLeaseDuration)
			if !stage.Runnable() {
				require.ErrorIs(t, err, lifecycle.ErrNothingToClaim)
				require.Nil(t, claim)
				require.Equal(t, before, b.snapshot(t, request.ID), "a claim of nothing changes nothing")
				return
			}
			require.NoError(t, err)
			require.Equal(t, stage, claim.Request.Stage)
			require.Equal(t, "successor", claim.Lease.Owner)
			require.Equal(t, request.LeaseGeneration+1, claim.Lease.Generation)
			require.Equal(t, request.FenceGeneration, claim.Lease.FenceGeneration)
			require.NoError(t, b.Engine.VerifyToken(ctx, claim.Lease, stage))
		})
	}
}

// A claim that finds catalog drift blocks the request durably with a
// failed 'claim:catalog_validation' checkpoint, commits that, and claims
// nothing; once the catalog is repaired an operator unblocks it.
func TestClaimBlocksOnCatalogDrift(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	request, _ := testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{Stage: lifecycle.StageApproved})
	require.NoError(t, b.exec(t, "CREATE TABLE lc_unregistered_tenant (id bigint PRIMARY KEY, community_id uuid NOT NULL)"))

	claim, err := b.Engine.ClaimNext(ctx, "executor", lifecycle.DefaultLeaseDuration)
	var drift *lifecycle.DriftBlockedError
	require.ErrorAs(t, err, &drift, "the claim says why it claimed nothing")
	require.ErrorIs(t, err, lifecycle.ErrRefused)
	require.Equal(t, request.ID, drift.RequestID)
	require.Contains(t, drift.Reason, "lc_unregistered_tenant unregistered")
	require.Nil(t, claim)
	blocked, err := b.Operator.Get(ctx, request.ID)
	require.NoError(t, err)
	require.True(t, blocked.Blocked())
	require.Contains(t, blocked.BlockedReason, "lc_unregistered_tenant unregistered")
	require.Equal(t, blocked.BlockedReason, blocked.LastError)
	require.Empty(t, blocked.LeaseOwner)
	require.Zero(t, blocked.LeaseGeneration, "no lease was handed out")
	inspection, err := b.Operator.Inspect(ctx, request.ID)
	require.NoError(t, err)
	failed := checkpoint(t, inspection, "claim:catalog_validation")
	require.Equal(t, lifecycle.StageApproved, failed.Stage)
	require.Equal(t, "failed", failed.Status)
	require.Contains(t, failed.Error, "lc_unregistered_tenant")

	claim, err = b.Engine.ClaimRequest(ctx, request.ID, "executor", lifecycle.DefaultLeaseDuration)
	require.ErrorIs(t, err, lifecycle.ErrNothingToClaim, "a blocked request stays unclaimable")
	require.Nil(t, claim)

	require.NoError(t, b.exec(t, "DROP TABLE lc_unregistered_tenant"))
	_, err = b.Operator.Unblock(ctx, request.ID, "operator", "dropped the stray table")
	require.NoError(t, err)
	claim, err = b.Engine.ClaimRequest(ctx, request.ID, "executor", lifecycle.DefaultLeaseDuration)
	require.NoError(t, err)
	require.NotNil(t, claim)
}

// Heartbeat renews an owned lease on the database clock and records the
// executor; StopExecutor releases the lease and marks the executor stopped.
func TestHeartbeatAndStopExecutor(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	request, token := testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{Stage: lifecycle.StageApproved, Claimed: true})

	require.NoError(t, b.Engine.Heartbeat(ctx, token, time.Hour))
	renewed, err := b.Operator.Get(ctx, request.ID)
	require.NoError(t, err)
	require.True(t, renewed.LeaseUntil.After(*request.LeaseUntil), "the lease was extended")
	var mode string
	var heartbeatRequest *uuid.UUID
	var draining bool
	var stoppedAt *time.Time
	heartbeat := func() {
		require.NoError(t, b.Pool.QueryRow(ctx, `SELECT mode, request_id, draining, stopped_at
			FROM community_deletion_executor_heartbeats WHERE executor_id = $1`, token.Owner).
			Scan(&mode, &heartbeatRequest, &draining, &stoppedAt))
	}
	heartbeat()
	require.Equal(t, "executor", mode)
	require.Equal(t, request.ID, *heartbeatRequest)
	require.False(t, draining)
	require.Nil(t, stoppedAt)

	require.NoError(t, b.Engine.Stop(ctx, lifecycle.StopParams{ExecutorID: token.Owner, Release: &token}))
	heartbeat()
	require.Nil(t, heartbeatRequest)
	require.True(t, draining)
	require.NotNil(t, stoppedAt)
	released, err := b.Operator.Get(ctx, request.ID)
	require.NoError(t, err)
	require.Empty(t, released.LeaseOwner)
	require.Nil(t, released.LeaseUntil)
	err = b.Engine.Heartbeat(ctx, token, time.Hour)
	require.True(t, lifecycle.IsStaleLease(err), "a released lease cannot be renewed: %v", err)

	// Released, the request is claimable again at once, under a new
	// generation; stopping with the old token again reports the stale lease.
	claim, err := b.Engine.ClaimRequest(ctx, request.ID, "successor", lifecycle.DefaultLeaseDuration)
	require.NoError(t, err)
	require.NotNil(t, claim)
	require.Equal(t, token.Generation+1, claim.Lease.Generation)
	require.True(t, lifecycle.IsStaleLease(b.Engine.Stop(ctx, lifecycle.StopParams{ExecutorID: token.Owner, Release: &token})))
	require.NoError(t, b.Engine.Stop(ctx, lifecycle.StopParams{ExecutorID: "never-started"}))
}

// Every lease is bounded by MaxLeaseDuration: a claim, a heartbeat and a
// serving write lease asking for longer are refused as invalid input before
// any write (a lease until the year 2319 would strand the request beyond
// every API call), and exactly the bound is accepted.
func TestLeasesAreBoundedByMaxLeaseDuration(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	request, _ := testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{Stage: lifecycle.StageApproved})
	community := testfactory.Community(ctx, t, b.DB, nil).ID

	for _, d := range []time.Duration{time.Duration(math.MaxInt64), lifecycle.MaxLeaseDuration + time.Second} {
		_, err := b.Engine.ClaimRequest(ctx, request.ID, "executor-1", d)
		require.ErrorIs(t, err, lifecycle.ErrInvalidInput, "claim for %s", d)
		_, err = b.Engine.ClaimNext(ctx, "executor-1", d)
		require.ErrorIs(t, err, lifecycle.ErrInvalidInput, "claim next for %s", d)
		_, err = b.Serving.AcquireWriteLease(ctx, community, "upload", "web-1", d)
		require.ErrorIs(t, err, lifecycle.ErrInvalidInput, "serving lease for %s", d)
	}
	claim, err := b.Engine.ClaimRequest(ctx, request.ID, "executor-1", lifecycle.MaxLeaseDuration)
	require.NoError(t, err)
	require.NotNil(t, claim)
	err = b.Engine.Heartbeat(ctx, claim.Lease, time.Duration(math.MaxInt64))
	require.ErrorIs(t, err, lifecycle.ErrInvalidInput)
	require.NoError(t, b.Engine.Heartbeat(ctx, claim.Lease, lifecycle.MaxLeaseDuration))

	lease, err := b.Serving.AcquireWriteLease(ctx, community, "upload", "web-1", lifecycle.MaxLeaseDuration)
	require.NoError(t, err)
	err = b.Serving.RenewWriteLease(ctx, lease, time.Duration(math.MaxInt64))
	require.ErrorIs(t, err, lifecycle.ErrInvalidInput)
	require.NoError(t, b.Serving.RenewWriteLease(ctx, lease, lifecycle.MaxLeaseDuration))
	var longest time.Duration
	require.NoError(t, b.Pool.QueryRow(ctx, `SELECT max(lease_until - now()) FROM community_deletion_requests`).Scan(&longest))
	require.LessOrEqual(t, longest, lifecycle.MaxLeaseDuration+time.Second)
}
