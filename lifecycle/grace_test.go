package lifecycle_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/fixture"
	"github.com/tombstoneworks/communitydeletion/internal/testfactory"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// inventoried returns a request walked to inventoried, ready to approve.
func (b *testBundle) inventoried(t *testing.T) *lifecycle.Request {
	t.Helper()
	request, _ := testfactory.Request(t.Context(), t, b.DB, &testfactory.RequestOpts{Stage: lifecycle.StageInventoried})
	return request
}

// During its grace period an approved request is not claimed, the database
// refuses to quiesce or fence its community whoever asks, and an abort
// leaves the community active and writable.
func TestGracePeriodHoldsOffTheFenceAndAbortLeavesTheCommunityWritable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	request := b.inventoried(t)

	approved, err := b.Approver.ApproveWithParams(ctx, request.ID, lifecycle.ApproveParams{
		ApprovedBy: "approver", GracePeriod: new(time.Hour)})
	require.NoError(t, err)
	require.NotNil(t, approved.GraceUntil)
	var dbNow time.Time
	require.NoError(t, b.Pool.QueryRow(ctx, "SELECT now()").Scan(&dbNow))
	require.WithinDuration(t, dbNow.Add(time.Hour), *approved.GraceUntil, time.Minute)
	require.True(t, approved.InGrace(dbNow))

	got, err := b.Operator.Get(ctx, request.ID)
	require.NoError(t, err)
	require.Equal(t, approved.GraceUntil.UTC(), got.GraceUntil.UTC(), "Get shows when the grace period ends")
	page, err := b.Operator.List(ctx, lifecycle.ListParams{Limit: 10})
	require.NoError(t, err)
	require.Len(t, page.Requests, 1)
	require.NotNil(t, page.Requests[0].GraceUntil, "List shows it too")
	inspection, err := b.Operator.Inspect(ctx, request.ID)
	require.NoError(t, err)
	require.NotNil(t, inspection.Approval.GraceUntil)

	// The executor finds nothing to claim, by id or next.
	_, err = b.Engine.ClaimRequest(ctx, request.ID, "executor", time.Minute)
	require.ErrorIs(t, err, lifecycle.ErrNothingToClaim)
	_, err = b.Engine.ClaimNext(ctx, "executor", time.Minute)
	require.ErrorIs(t, err, lifecycle.ErrNothingToClaim)
	inGrace, err := b.Engine.RequestsInGrace(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, inGrace)

	// The database refuses the quiesce however it is asked: as the executor
	// login with the executor's settings, and as the superuser.
	executor := fixture.RolePool(t, b.URL, fixture.RoleExecutor)
	quiesce := `UPDATE communities SET deletion_state = 'quiescing' WHERE id = $1`
	err = pgx.BeginFunc(ctx, executor, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT set_config('community_deletion.executor_community', $1, true),
			set_config('community_deletion.fence_generation', '0', true)`, request.CommunityID.String()); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, quiesce, request.CommunityID)
		return err
	})
	requirePgCode(t, err, "55000")
	require.ErrorContains(t, err, "grace period ends at")
	err = b.exec(t, quiesce, request.CommunityID)
	requirePgCode(t, err, "55000")
	require.Equal(t, "active", b.community(t, request.CommunityID).State)

	// Abort during the grace period: the community stays active and the
	// service writes to it as before.
	_, err = b.Operator.Abort(ctx, request.ID, "operator", "changed our mind")
	require.NoError(t, err)
	require.Equal(t, "active", b.community(t, request.CommunityID).State)
	serving := fixture.RolePool(t, b.URL, fixture.RoleServing)
	_, err = serving.Exec(ctx, "INSERT INTO fixture_members (community_id, handle) VALUES ($1, 'still here')",
		request.CommunityID)
	require.NoError(t, err, "an aborted request in grace left the community writable")
}

// A grace period of zero runs at once; the deployment's default applies
// when the approval names none; one longer than MaxGracePeriod is refused
// by the client and by the database; the approver cannot choose when it ends.
func TestGracePeriodBoundsDefaultAndComputedEnd(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()

	zero := b.inventoried(t)
	_, err := b.Approver.ApproveWithParams(ctx, zero.ID, lifecycle.ApproveParams{ApprovedBy: "approver", GracePeriod: new(time.Duration(0))})
	require.NoError(t, err)
	claim, err := b.Engine.ClaimRequest(ctx, zero.ID, "executor", time.Minute)
	require.NoError(t, err, "no grace period: claimable at once")
	require.Equal(t, zero.ID, claim.Request.ID)

	long := b.inventoried(t)
	_, err = b.Approver.ApproveWithParams(ctx, long.ID, lifecycle.ApproveParams{ApprovedBy: "approver", GracePeriod: new(lifecycle.MaxGracePeriod + time.Second)})
	require.ErrorIs(t, err, lifecycle.ErrInvalidInput)
	_, err = b.Approver.ApproveWithParams(ctx, long.ID, lifecycle.ApproveParams{ApprovedBy: "approver", GracePeriod: new(-time.Second)})
	require.ErrorIs(t, err, lifecycle.ErrInvalidInput)

	// As the approver's own login, by hand: more than 30 days is a CHECK
	// violation, and a grace_until of the approver's choosing is replaced.
	approver := fixture.RolePool(t, b.URL, fixture.RoleApprover)
	insert := `INSERT INTO community_deletion_approvals (request_id, community_id, inventory_digest, approved_by, grace_period, grace_until)
		SELECT id, community_id, inventory_digest, 'approver', $2::interval, now() - interval '1 day'
		FROM community_deletion_requests WHERE id = $1 RETURNING grace_until > now() + interval '59 minutes'`
	var inFuture bool
	err = approver.QueryRow(ctx, insert, long.ID, "31 days").Scan(&inFuture)
	requirePgCode(t, err, "23514")
	require.NoError(t, approver.QueryRow(ctx, insert, long.ID, "1 hour").Scan(&inFuture))
	require.True(t, inFuture, "the guard computes grace_until; the approver's value is ignored")

	// The deployment's default, set by the schema's owner.
	require.NoError(t, b.exec(t, `INSERT INTO community_deletion_settings (operators_share_role, reason, default_grace_period)
		VALUES (false, 'a week to change our minds', interval '7 days')`))
	defaulted := b.inventoried(t)
	approved, err := b.Approver.Approve(ctx, defaulted.ID, "approver", "")
	require.NoError(t, err)
	require.NotNil(t, approved.GraceUntil)
	var dbNow time.Time
	require.NoError(t, b.Pool.QueryRow(ctx, "SELECT now()").Scan(&dbNow))
	require.WithinDuration(t, dbNow.Add(7*24*time.Hour), *approved.GraceUntil, time.Minute)
	err = b.exec(t, `INSERT INTO community_deletion_settings (operators_share_role, reason, default_grace_period)
		VALUES (false, 'too long', interval '31 days')`)
	requirePgCode(t, err, "23514")
}

// Once the grace period has ended the request is claimed and runs.
func TestGracePeriodEndsAndTheRequestRuns(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	request := b.inventoried(t)
	_, err := b.Approver.ApproveWithParams(ctx, request.ID, lifecycle.ApproveParams{ApprovedBy: "approver", GracePeriod: new(time.Hour)})
	require.NoError(t, err)
	_, err = b.Engine.ClaimRequest(ctx, request.ID, "executor", time.Minute)
	require.ErrorIs(t, err, lifecycle.ErrNothingToClaim)

	// Move the end into the past, as the clock would (approvals are
	// immutable, so only the owner, with the guard off, can).
	require.NoError(t, pgx.BeginFunc(ctx, b.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL session_replication_role = replica"); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "UPDATE community_deletion_approvals SET grace_until = now() - interval '1 second' WHERE request_id = $1", request.ID)
		return err
	}))
	claim, err := b.Engine.ClaimRequest(ctx, request.ID, "executor", time.Minute)
	require.NoError(t, err)
	require.NoError(t, b.Engine.BeginQuiescing(ctx, claim.Lease))
	require.Equal(t, "quiescing", b.community(t, request.CommunityID).State)
}
