package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// The claim statuses: whether the executor can claim a request now, and if
// not, why.
const (
	claimClaimable        = "claimable"
	claimNotInventoried   = "not_inventoried"
	claimAwaitingApproval = "awaiting_approval"
	claimInGrace          = "in_grace"
	claimBlocked          = "blocked"
	claimRetryWait        = "retry_wait"
	claimLockWait         = "lock_wait"
	claimLeased           = "leased"
	claimDrift            = "drift"
	claimCompleted        = "completed"
	claimAborted          = "aborted"
	claimNoRequest        = "no_request" // plan --host of a community without an open request
	claimProtected        = "protected"  // plan --host of a protected community
)

// claimView says whether the executor can claim a request now and, when it
// cannot, why and what to do about it.
type claimView struct {
	// Status is one of the claim statuses above.
	Status string `json:"status"`
	// Reason says why, in one line.
	Reason string `json:"reason"`
	// NextStep says what to do, in one line.
	NextStep string `json:"next_step"`
	// Until is when the status ends by itself (the grace period's end, the
	// next attempt, the lease's expiry), or null.
	Until *time.Time `json:"until"`
}

// String renders the claim on one line: the reason, then what to do.
func (c claimView) String() string {
	return c.Reason + "; next: " + c.NextStep
}

// claimOf is r's claim at now (the database clock): the conditions the
// executor's claim checks (approved for its frozen inventory, unblocked,
// past its grace period, at a runnable stage, due, not leased), in the
// order an operator acts on them, and last the catalog drift, on which the
// next claim blocks the request.
func claimOf(r *lifecycle.Request, now time.Time, drift []lifecycle.DriftFinding) claimView {
	id := r.ID.String()
	switch {
	case r.Stage == lifecycle.StageAborted:
		c := claimView{Status: claimAborted, Reason: "aborted",
			NextStep: "nothing: it is over; submit a new request to delete the community"}
		if r.AbortedBy != "" {
			c.Reason = fmt.Sprintf("aborted by %s: %s", strconv.Quote(r.AbortedBy), r.AbortReason)
		}
		return c
	case r.Stage.Terminal():
		return claimView{Status: claimCompleted, Reason: "the deletion is complete (" + string(r.Stage) + ")",
			NextStep: "nothing; deletionctl receipt show " + id + " prints its receipt"}
	case r.Blocked():
		return claimView{Status: claimBlocked, Reason: fmt.Sprintf("blocked since %s: %s", stamp(*r.BlockedAt), oneLine(r.BlockedReason)),
			NextStep: "remedy the cause, then deletionctl unblock --request " + id + " --by NAME --reason TEXT"}
	case r.Stage == lifecycle.StageSubmitted:
		return claimView{Status: claimNotInventoried, Reason: "submitted: its inventory is not frozen yet",
			NextStep: "deletionctl plan " + id + ", then deletionctl inventory --request " + id + " --objects URL; then a second operator approves it"}
	case r.Stage == lifecycle.StageInventoried:
		return claimView{Status: claimAwaitingApproval, Reason: "inventoried: awaiting approval",
			NextStep: "a second operator, from another login, runs deletionctl approve --request " + id + " --by NAME"}
	case r.Stage == lifecycle.StageApproved && r.GraceUntil != nil && r.GraceUntil.After(now):
		return claimView{Status: claimInGrace, Reason: "in its grace period until " + stamp(*r.GraceUntil),
			NextStep: "wait: it is claimable then; deletionctl abort --request " + id + " cancels it with no effect on the community",
			Until:    r.GraceUntil}
	case r.LeaseOwner != "" && r.LeaseUntil != nil && r.LeaseUntil.After(now):
		return claimView{Status: claimLeased,
			Reason: fmt.Sprintf("held by executor %s (lease generation %d) until %s", strconv.Quote(r.LeaseOwner), r.LeaseGeneration, stamp(*r.LeaseUntil)),
			NextStep: "wait: that executor is running it; deletionctl inspect --request " + id + " shows its progress " +
				"(if the executor is gone, its lease expires then and another executor takes over)",
			Until: r.LeaseUntil}
	case r.NextAttemptAt.After(now):
		c := claimView{Status: claimRetryWait, Until: &r.NextAttemptAt}
		at := r.Stage
		if r.RetryStage != nil {
			at = *r.RetryStage
		}
		failure := fmt.Sprintf("failure %d of %d in a row at %s", r.RetryCount, lifecycle.MaxConsecutiveRetries, at)
		switch {
		case strings.Contains(r.LastError, lifecycle.ErrLockWait.Error()):
			c.Status = claimLockWait
			c.Reason = fmt.Sprintf("waiting on a lock (%s): %s", failure, oneLine(r.LastError))
			c.NextStep = "end or wait out the lock's holder named above; it is tried again at " + stamp(r.NextAttemptAt)
		case r.LastError != "":
			c.Reason = fmt.Sprintf("retrying after a %s: %s", failure, oneLine(r.LastError))
			c.NextStep = "wait: it is tried again at " + stamp(r.NextAttemptAt) + "; it blocks after " +
				strconv.Itoa(lifecycle.MaxConsecutiveRetries) + " failures in a row"
		default:
			c.Reason = "not due until " + stamp(r.NextAttemptAt)
			c.NextStep = "wait: it is claimable then"
		}
		return c
	case r.Stage.Runnable() && len(drift) > 0:
		var problems []string
		for _, d := range drift {
			problems = append(problems, d.Table+" "+d.Problem)
		}
		return claimView{Status: claimDrift, Reason: "catalog drift: " + oneLine(strings.Join(problems, "; ")) + " (the next claim blocks it)",
			NextStep: "fix the drift (deletionctl health lists it) before an executor claims it"}
	case r.Stage.Runnable():
		return claimView{Status: claimClaimable, Reason: "claimable now",
			NextStep: "a running executor takes it, or deletionctl run --once --request " + id + " --objects URL --cache URL"}
	}
	return claimView{Status: claimBlocked, Reason: "at stage " + string(r.Stage) + ", which no executor runs",
		NextStep: "deletionctl inspect --request " + id}
}

// stamp renders a database time for a person: UTC, to the second.
func stamp(t time.Time) string {
	return t.UTC().Format(time.RFC3339)
}
