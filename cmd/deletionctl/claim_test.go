package main

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// claimOf names, for each condition the executor's claim checks, why a
// request is not claimable, what to do, and until when it waits by
// itself; in the order an operator acts on them.
func TestClaimOfEveryStatus(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	later, earlier := now.Add(time.Hour), now.Add(-time.Hour)
	stage := func(s lifecycle.Stage) *lifecycle.Stage { return &s }
	base := func() *lifecycle.Request {
		return &lifecycle.Request{ID: uuid.MustParse("2f1b6c9e-8c1a-4f57-9d7e-0a1b2c3d4e5f"), Stage: lifecycle.StageApproved, NextAttemptAt: earlier}
	}
	lockErr := lifecycle.ErrLockWait.Error() + ": the deletion lock of community c held by pid 4242 (role app, application_name \"psql\", ExclusiveLock)"
	drift := []lifecycle.DriftFinding{{Table: "public.stray", Problem: "unregistered"}}
	for _, tc := range []struct {
		name   string
		edit   func(*lifecycle.Request)
		drift  []lifecycle.DriftFinding
		status string
		reason string
		next   string
		until  *time.Time
	}{
		{"submitted", func(r *lifecycle.Request) { r.Stage = lifecycle.StageSubmitted }, nil,
			claimNotInventoried, "submitted: its inventory is not frozen yet", "deletionctl inventory --request 2f1b6c9e", nil},
		{"inventoried", func(r *lifecycle.Request) { r.Stage = lifecycle.StageInventoried }, nil,
			claimAwaitingApproval, "inventoried: awaiting approval", "a second operator, from another login, runs deletionctl approve", nil},
		{"in grace", func(r *lifecycle.Request) { r.GraceUntil = &later }, drift,
			claimInGrace, "in its grace period until 2026-11-30T13:00:00Z", "deletionctl abort --request 2f1b6c9e", &later},
		{"grace over", func(r *lifecycle.Request) { r.GraceUntil = &earlier }, nil,
			claimClaimable, "claimable now", "deletionctl run --once --request 2f1b6c9e", nil},
		{"blocked", func(r *lifecycle.Request) {
			r.BlockedAt, r.BlockedReason, r.GraceUntil = &earlier, "catalog drift: public.stray unregistered", &later
		}, nil,
			claimBlocked, "blocked since 2026-11-30T11:00:00Z: catalog drift: public.stray unregistered", "then deletionctl unblock --request 2f1b6c9e", nil},
		{"leased", func(r *lifecycle.Request) {
			r.Stage, r.LeaseOwner, r.LeaseGeneration, r.LeaseUntil = lifecycle.StageDrained, "worker-1", 3, &later
		}, nil,
			claimLeased, `held by executor "worker-1" (lease generation 3) until 2026-11-30T13:00:00Z`, "its lease expires then", &later},
		{"an expired lease is no hold", func(r *lifecycle.Request) { r.LeaseOwner, r.LeaseUntil = "worker-1", &earlier }, nil,
			claimClaimable, "claimable now", "", nil},
		{"retrying", func(r *lifecycle.Request) {
			r.Stage, r.RetryStage, r.RetryCount, r.LastError, r.NextAttemptAt = lifecycle.StageFenced, stage(lifecycle.StageFenced), 2, "serving writes not drained", later
		}, nil,
			claimRetryWait, "retrying after a failure 2 of 8 in a row at fenced: serving writes not drained", "it blocks after 8 failures in a row", &later},
		{"waiting on a lock", func(r *lifecycle.Request) {
			r.RetryStage, r.RetryCount, r.LastError, r.NextAttemptAt = stage(lifecycle.StageApproved), 1, lockErr, later
		}, nil,
			claimLockWait, "waiting on a lock (failure 1 of 8 in a row at approved): " + lockErr, "end or wait out the lock's holder", &later},
		{"drift", func(*lifecycle.Request) {}, drift,
			claimDrift, "catalog drift: public.stray unregistered (the next claim blocks it)", "fix the drift (deletionctl health lists it)", nil},
		{"complete", func(r *lifecycle.Request) { r.Stage = lifecycle.StageRetentionPending }, drift,
			claimCompleted, "the deletion is complete (retention_pending)", "deletionctl receipt show 2f1b6c9e", nil},
		{"aborted", func(r *lifecycle.Request) {
			r.Stage, r.AbortedBy, r.AbortReason, r.BlockedAt = lifecycle.StageAborted, "carol", "renewed", &earlier
		}, nil,
			claimAborted, `aborted by "carol": renewed`, "submit a new request", nil},
	} {
		r := base()
		tc.edit(r)
		c := claimOf(r, now, tc.drift)
		require.Equal(t, tc.status, c.Status, tc.name)
		require.Equal(t, tc.reason, c.Reason, tc.name)
		require.Contains(t, c.NextStep, tc.next, tc.name)
		require.Equal(t, tc.until, c.Until, tc.name)
		require.NotContains(t, c.String(), "\n", "one line: %s", tc.name)
	}
}
