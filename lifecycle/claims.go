package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	dbgen "github.com/tombstoneworks/communitydeletion/db/gen"
)

// MaxConsecutiveRetries is the number of consecutive failures at one stage
// after which RecordRetry blocks a request durably instead of scheduling
// another attempt. Progress to the next stage resets the count.
const MaxConsecutiveRetries = 8

// catalogValidationUnit is the checkpoint a claim that finds catalog drift
// records before blocking the request.
const catalogValidationUnit = "claim:catalog_validation"

// ClaimedDeletion is a request an executor has just claimed, with the lease
// token every execution call must present.
type ClaimedDeletion struct {
	// Request is the request as the claim left it.
	Request *Request
	// Lease is the claim's token. From StageFenced on it carries the fence
	// generation; after Fence, use Lease.WithFence with its result.
	Lease LeaseToken
}

// ClaimRequest claims request id for owner for lease, as ClaimNext does for
// the oldest claimable request. When id exists but is not claimable now (not
// approved, not runnable, blocked, not yet due, or leased by someone else) it
// returns an error matching ErrNothingToClaim; when it does not exist, one
// matching ErrNotFound; when the catalog drifted, a *DriftBlockedError.
func (e *Engine) ClaimRequest(ctx context.Context, id uuid.UUID, owner string, lease time.Duration) (*ClaimedDeletion, error) {
	claimed, err := e.claim(ctx, &id, owner, lease)
	if err != nil {
		return nil, fmt.Errorf("claim deletion %s: %w", id, err)
	}
	return claimed, nil
}

// ClaimNext claims the oldest claimable request for owner for lease: one
// approved for its frozen inventory, at a runnable stage, unblocked, due,
// and not leased (or whose lease expired). Concurrent claims never take the
// same request, and each claim raises its lease generation, which makes
// every older token stale. Before leasing, the claim validates the deletion
// catalog in the same transaction under the shared schema-destruction lock;
// on drift it durably blocks the request with a failed
// 'claim:catalog_validation' checkpoint and returns a *DriftBlockedError
// (matching ErrRefused). When nothing is claimable it returns an error
// matching ErrNothingToClaim.
func (e *Engine) ClaimNext(ctx context.Context, owner string, lease time.Duration) (*ClaimedDeletion, error) {
	claimed, err := e.claim(ctx, nil, owner, lease)
	if err != nil {
		return nil, fmt.Errorf("claim next deletion: %w", err)
	}
	return claimed, nil
}

func (s *store) claim(ctx context.Context, id *uuid.UUID, owner string, lease time.Duration) (*ClaimedDeletion, error) {
	owner, err := validateOperator(owner, "executor owner")
	if err != nil {
		return nil, err
	}
	duration, err := leaseInterval(lease)
	if err != nil {
		return nil, err
	}

	var claimed *ClaimedDeletion
	var blocked *DriftBlockedError
	err = s.tx(ctx, func(q *dbgen.Queries) error {
		// Advisory locks come before any row lock: a migration holding the
		// schema lock exclusively may wait for this transaction's row locks.
		if err := lockSchemaShared(ctx, q); err != nil {
			return err
		}
		var candidate dbgen.CommunityDeletionRequest
		var err error
		if id != nil {
			candidate, err = q.DeletionRequestClaimSpecificCandidate(ctx, *id)
		} else {
			candidate, err = q.DeletionRequestClaimNextCandidate(ctx)
		}
		if errors.Is(err, pgx.ErrNoRows) {
			if id != nil {
				if _, err := getRequestRow(ctx, q, *id); err != nil {
					return err
				}
				return fmt.Errorf("%w: deletion %s is not approved, runnable, unblocked and due, or another executor holds it", ErrNothingToClaim, *id)
			}
			return fmt.Errorf("%w: no approved, unblocked deletion is due", ErrNothingToClaim)
		}
		if err != nil {
			return fmt.Errorf("find claimable deletion: %w", err)
		}

		if _, err := checkDeletionCatalog(ctx, q); err != nil {
			if !errors.Is(err, ErrRefused) {
				return err
			}
			// Drift blocks the request durably: committing the block is
			// the point, so the transaction succeeds without a claim.
			message := boundText(err.Error(), MaxErrorBytes)
			if err := checkpointFailed(ctx, q, candidate.ID, candidate.LeaseGeneration, Stage(candidate.Stage), catalogValidationUnit, message); err != nil {
				return err
			}
			if _, err := q.DeletionRequestBlock(ctx, dbgen.DeletionRequestBlockParams{ID: candidate.ID, Reason: &message}); err != nil {
				return fmt.Errorf("block deletion %s on catalog drift: %w", candidate.ID, err)
			}
			blocked = &DriftBlockedError{RequestID: candidate.ID, Reason: message}
			return nil
		}

		row, err := q.DeletionRequestClaim(ctx, dbgen.DeletionRequestClaimParams{
			LeaseOwner: &owner, LeaseDuration: duration, ID: candidate.ID,
		})
		if err != nil {
			return fmt.Errorf("lease deletion %s: %w", candidate.ID, err)
		}
		request, err := requestFromRow(&row)
		if err != nil {
			return err
		}
		claimed = &ClaimedDeletion{Request: request, Lease: request.token()}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if blocked != nil {
		// The block is committed; the caller learns why nothing was claimed.
		return nil, blocked
	}
	return claimed, nil
}

// VerifyToken checks that token still holds its request at stage:
// leased to it, unexpired, unblocked and approved for its frozen inventory,
// and from StageFenced on under the token's fence generation with the
// community fenced (or a tombstone) at it. It returns a stale-lease error
// otherwise, and changes nothing.
func (e *Engine) VerifyToken(ctx context.Context, token LeaseToken, stage Stage) error {
	if err := checkExecutionStage(stage); err != nil {
		return err
	}
	err := e.tx(ctx, func(q *dbgen.Queries) error {
		return verifyTokenAt(ctx, q, token, stage)
	})
	if err != nil {
		return fmt.Errorf("verify deletion %s at %s: %w", token.RequestID, stage, err)
	}
	return nil
}

// Heartbeat renews token's lease for lease from now and records the
// executor's liveness (mode, the request it works on and whether it is
// draining) under executor id token.Owner. The lease is renewed only while
// the token still owns the request, unexpired, unblocked, at a runnable
// stage, approved, and under the token's fence generation (none before the
// fence); otherwise it returns a stale-lease error and changes nothing.
func (e *Engine) Heartbeat(ctx context.Context, token LeaseToken, lease time.Duration) error {
	duration, err := leaseInterval(lease)
	if err != nil {
		return err
	}
	err = e.tx(ctx, func(q *dbgen.Queries) error {
		n, err := q.DeletionRequestHeartbeat(ctx, dbgen.DeletionRequestHeartbeatParams{
			LeaseDuration: duration, ID: token.RequestID, CommunityID: token.CommunityID,
			LeaseOwner: &token.Owner, LeaseGeneration: token.Generation, FenceGeneration: token.FenceGeneration,
		})
		if err != nil {
			return fmt.Errorf("renew lease: %w", err)
		}
		if n != 1 {
			return staleLease(token)
		}
		if err := q.DeletionExecutorHeartbeatUpsert(ctx, dbgen.DeletionExecutorHeartbeatUpsertParams{
			ExecutorID: token.Owner, Mode: executorMode, RequestID: &token.RequestID, Draining: false,
		}); err != nil {
			return fmt.Errorf("record executor heartbeat: %w", err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("heartbeat deletion %s: %w", token.RequestID, err)
	}
	return nil
}

// Stop records that executorID stopped: its heartbeat row is marked
// stopped and draining and holds no request. When token is not nil the
// lease it names is released in the same transaction, so another executor
// can claim the request at once. A token that no longer holds its lease
// releases nothing and returns a stale-lease error; the executor is marked
// stopped even then.
func (e *Engine) Stop(ctx context.Context, params StopParams) error {
	token := params.Release
	executorID, err := validateOperator(params.ExecutorID, "executor id")
	if err != nil {
		return err
	}
	released := true
	err = e.tx(ctx, func(q *dbgen.Queries) error {
		if token != nil {
			n, err := q.DeletionRequestReleaseLease(ctx, dbgen.DeletionRequestReleaseLeaseParams{
				ID: token.RequestID, CommunityID: token.CommunityID, LeaseOwner: &token.Owner,
				LeaseGeneration: token.Generation, FenceGeneration: token.FenceGeneration,
			})
			if err != nil {
				return fmt.Errorf("release lease: %w", err)
			}
			released = n == 1
		}
		if _, err := q.DeletionExecutorHeartbeatStop(ctx, executorID); err != nil {
			return fmt.Errorf("mark executor stopped: %w", err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("stop executor %q: %w", boundText(executorID, MaxOperatorBytes), err)
	}
	if !released {
		return fmt.Errorf("stop executor %q: %w", boundText(executorID, MaxOperatorBytes), staleLease(*token))
	}
	return nil
}

// RecordRetry records a retryable failure of unit unitKey at stage by the
// executor holding token and releases the lease; the request may be claimed
// again after retryAfter (zero: at once). errText is stored bounded to
// MaxErrorBytes. The MaxConsecutiveRetries-th consecutive failure at the
// same stage blocks the request durably instead, for an operator to Unblock;
// advancing to the next stage resets the streak. A stale token returns a
// stale-lease error and changes nothing.
func (e *Engine) RecordRetry(ctx context.Context, token LeaseToken, params RetryParams) error {
	stage, unitKey, errText, retryAfter := params.Stage, params.Unit, params.Err, params.After
	if err := checkExecutionStage(stage); err != nil {
		return err
	}
	if err := checkUnitKey(unitKey); err != nil {
		return err
	}
	if retryAfter < 0 {
		return invalidf("retry delay must not be negative, not %s", retryAfter)
	}
	delay := pgtype.Interval{Microseconds: retryAfter.Microseconds(), Valid: true}
	message := boundText(errText, MaxErrorBytes)
	stageName := string(stage)

	err := e.tx(ctx, func(q *dbgen.Queries) error {
		if err := verifyTokenAt(ctx, q, token, stage); err != nil {
			return err
		}
		_, err := q.DeletionRequestRecordRetry(ctx, dbgen.DeletionRequestRecordRetryParams{
			Stage: &stageName, Error: &message, MaxRetries: MaxConsecutiveRetries, RetryAfter: delay,
			ID: token.RequestID, LeaseOwner: &token.Owner, LeaseGeneration: token.Generation,
		})
		if errors.Is(err, pgx.ErrNoRows) {
			return staleLease(token)
		}
		if err != nil {
			return fmt.Errorf("record retry: %w", err)
		}
		return checkpointFailed(ctx, q, token.RequestID, token.Generation, stage, unitKey, message)
	})
	if err != nil {
		return fmt.Errorf("record retry of deletion %s at %s: %w", token.RequestID, stage, err)
	}
	return nil
}

// verifyTokenAt proves token current at the execution stage named by stage,
// in the caller's transaction. Before the fence (StageApproved) the token must
// carry no fence generation; from StageFenced on it must carry the
// request's and the community's.
func verifyTokenAt(ctx context.Context, q *dbgen.Queries, token LeaseToken, stage Stage) error {
	if stage == StageApproved {
		if token.FenceGeneration != nil {
			return staleLease(token)
		}
		return verifyLease(ctx, q, token, stage)
	}
	if !stage.Runnable() {
		return refusef("deletion %s: %s is not an execution stage", token.RequestID, stage)
	}
	err := verifyLeaseAndFence(ctx, q, token, stage)
	return err
}

// checkExecutionStage accepts the stages an executor works at.
func checkExecutionStage(stage Stage) error {
	if !stage.Valid() {
		return invalidf("unknown deletion stage %q", boundText(string(stage), 64))
	}
	if !stage.Runnable() {
		return invalidf("%s is not an execution stage", stage)
	}
	return nil
}

// leaseInterval converts a lease duration for the database: at least one
// microsecond (the database's resolution) and at most MaxLeaseDuration.
func leaseInterval(lease time.Duration) (pgtype.Interval, error) {
	if lease < time.Microsecond || lease > MaxLeaseDuration {
		return pgtype.Interval{}, invalidf("lease duration must be between 1µs and %s, not %s", MaxLeaseDuration, lease)
	}
	return pgtype.Interval{Microseconds: lease.Microseconds(), Valid: true}, nil
}

// executorMode is the mode every executor heartbeat records.
const executorMode = "executor"

// StopParams says which executor stopped and, optionally, which claim it
// releases.
type StopParams struct {
	// ExecutorID is the executor identity (its claims' owner).
	ExecutorID string
	// Release, if not nil, is a claim to release in the same transaction.
	Release *LeaseToken
}

// RetryParams describes a retryable failure of one unit of work.
type RetryParams struct {
	// Stage is the stage the failure happened at.
	Stage Stage
	// Unit is the checkpoint unit key of the failed work.
	Unit string
	// Err is the failure's text, stored bounded to MaxErrorBytes.
	Err string
	// After is how long until the request may be claimed again (zero: at
	// once).
	After time.Duration
}

// BlockParams describes a failure that blocks a request durably.
type BlockParams struct {
	// Stage is the stage the failure happened at.
	Stage Stage
	// Unit is the checkpoint unit key of the failed work.
	Unit string
	// Err is the failure's text, stored bounded to MaxErrorBytes.
	Err string
}
