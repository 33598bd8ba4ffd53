package lifecycle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"

	"github.com/jackc/pgx/v5"

	dbgen "github.com/tombstoneworks/communitydeletion/db/gen"
)

// BeginQuiescing starts draining serving writes of the approved request
// token holds: the community moves to quiescing (and is marked archived
// unless it already was), so no new serving write lease or unleased write is
// admitted, while leases admitted before may finish. The community's
// archived_at from before and the time quiescing started are recorded once,
// for an abort to restore. It first takes the fence marker's lock, which
// waits for writes admitted on the fence's near-free path, then, while the
// fence is dormant, the tables it admits writes to, then the community lock
// before any row lock, and re-verifies the token under it,
// so it serializes with Abort. Calling
// it again while quiescing is harmless. A stale token returns a stale-lease
// error and changes nothing.
func (e *Engine) BeginQuiescing(ctx context.Context, token LeaseToken) error {
	err := e.tx(ctx, func(q *dbgen.Queries) error {
		// The marker's lock before the community's: the database sets the
		// community's marker bit under it as the community leaves active,
		// and a writer holding the community's lock may wait for it.
		if err := lockFenceMarker(ctx, q); err != nil {
			return err
		}
		// Then, while the fence is dormant, the tables it admits writes
		// to: the trigger that arms it as the community leaves active
		// requires them.
		if err := drainFence(ctx, q); err != nil {
			return err
		}
		if _, err := lockTransition(ctx, q, token, StageApproved); err != nil {
			return err
		}
		community, err := q.CommunityGetForUpdate(ctx, token.CommunityID)
		if err != nil {
			return fmt.Errorf("lock community %s: %w", token.CommunityID, err)
		}
		if community.DeletionState != "active" && community.DeletionState != "quiescing" {
			return refusef("community %s is %s and cannot enter quiescing", token.CommunityID, community.DeletionState)
		}
		if _, err := q.DeletionRequestRecordQuiescing(ctx, dbgen.DeletionRequestRecordQuiescingParams{
			PreQuiesceArchivedAt: community.ArchivedAt, ID: token.RequestID,
		}); err != nil {
			return fmt.Errorf("record quiescing: %w", err)
		}
		if err := setExecutor(ctx, q, token.CommunityID, community.DeletionFenceGeneration); err != nil {
			return err
		}
		n, err := q.CommunityQuiesce(ctx, token.CommunityID)
		if err != nil {
			return fmt.Errorf("quiesce community %s: %w", token.CommunityID, err)
		}
		if n != 1 {
			return refusef("community %s cannot enter quiescing", token.CommunityID)
		}
		return checkpointCompleted(ctx, q, token, StageApproved, "quiesce_serving_writes", map[string]any{
			"community_state": "quiescing", "fence_generation": community.DeletionFenceGeneration,
		})
	})
	if err != nil {
		return fmt.Errorf("begin quiescing deletion %s: %w", token.RequestID, err)
	}
	return nil
}

// EnterFenced activates the write fence of the quiescing community of the approved
// request token holds and moves the request to fenced, in one transaction:
// the community becomes fenced under a new fence generation, which is
// returned and bound to the request. From then on every write into the
// community is refused. While unexpired serving write leases remain it
// returns a *ServingWritesNotDrainedError (matching ErrRefused) and changes
// nothing; retry once they finish or expire. It takes the community lock
// before any row lock and re-verifies the token under it. Use
// token.WithFence(generation) for the calls that follow.
func (e *Engine) EnterFenced(ctx context.Context, token LeaseToken) (int64, error) {
	var generation int64
	err := e.tx(ctx, func(q *dbgen.Queries) error {
		if _, err := lockTransition(ctx, q, token, StageApproved); err != nil {
			return err
		}
		if err := requireServingWritesDrained(ctx, q, token); err != nil {
			return err
		}
		community, err := q.CommunityGetForUpdate(ctx, token.CommunityID)
		if err != nil {
			return fmt.Errorf("lock community %s: %w", token.CommunityID, err)
		}
		if community.DeletionState != "quiescing" {
			return refusef("community %s is %s, not quiescing: begin quiescing first", token.CommunityID, community.DeletionState)
		}
		if community.DeletionFenceGeneration == math.MaxInt64 {
			return refusef("community %s fence generation would overflow", token.CommunityID)
		}
		next := community.DeletionFenceGeneration + 1
		if err := setExecutor(ctx, q, token.CommunityID, next); err != nil {
			return err
		}
		n, err := q.CommunityFence(ctx, dbgen.CommunityFenceParams{FenceGeneration: next, ID: token.CommunityID})
		if err != nil {
			return fmt.Errorf("fence community %s: %w", token.CommunityID, err)
		}
		if n != 1 {
			return refusef("community %s stopped quiescing while it was being fenced", token.CommunityID)
		}
		if err := advance(ctx, q, token, StageApproved, StageFenced, &next); err != nil {
			return err
		}
		if err := checkpointCompleted(ctx, q, token, StageApproved, "activate_fence", map[string]any{"fence_generation": next}); err != nil {
			return err
		}
		generation = next
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("fence deletion %s: %w", token.RequestID, err)
	}
	return generation, nil
}

// EnterDrained records that serving writes drained behind the fence and moves
// the fenced request token holds to drained. It needs the destructive storage
// manifest frozen, and refuses with a *ServingWritesNotDrainedError while
// unexpired serving write leases remain. A stale token, or one under another
// fence generation, returns a stale-lease error; a token without a fence
// generation is refused. Nothing changes on any error.
func (e *Engine) EnterDrained(ctx context.Context, token LeaseToken) error {
	err := e.tx(ctx, func(q *dbgen.Queries) error {
		row, err := lockTransition(ctx, q, token, StageFenced)
		if err != nil {
			return err
		}
		if row.DestructiveStorageManifest == nil {
			return refusef("deletion %s has no frozen destructive storage manifest", token.RequestID)
		}
		if err := requireServingWritesDrained(ctx, q, token); err != nil {
			return err
		}
		if err := advance(ctx, q, token, StageFenced, StageDrained, nil); err != nil {
			return err
		}
		return checkpointCompleted(ctx, q, token, StageFenced, "serving_writes_drained",
			map[string]any{"fence_generation": *token.FenceGeneration})
	})
	if err != nil {
		return fmt.Errorf("mark deletion %s drained: %w", token.RequestID, err)
	}
	return nil
}

// EnterBindingsRemoved records, with detail as the checkpoint's JSON detail,
// that the community's object-store bindings were removed, and moves the
// drained request token holds to bindings_removed.
func (e *Engine) EnterBindingsRemoved(ctx context.Context, token LeaseToken, detail any) error {
	if err := e.markStage(ctx, token, StageDrained, "remove_storage_bindings", detail, nil); err != nil {
		return fmt.Errorf("mark deletion %s bindings removed: %w", token.RequestID, err)
	}
	return nil
}

// EnterCachePurged records, with detail as the checkpoint's JSON detail, that
// the community's cache namespace was purged, and moves the postgres_purged
// request token holds to cache_purged.
func (e *Engine) EnterCachePurged(ctx context.Context, token LeaseToken, detail any) error {
	if err := e.markStage(ctx, token, StagePostgresPurged, "purge_cache_namespace", detail, nil); err != nil {
		return fmt.Errorf("mark deletion %s cache purged: %w", token.RequestID, err)
	}
	return nil
}

// EnterLogicallyVerified records, with detail as the checkpoint's JSON
// detail, that the community's absence was verified across every store, and
// moves the cache_purged request token holds to logically_verified. In the
// same transaction it deletes the request's destructive key chunks: they are
// working data, and the raw key list of a deleted community is not kept.
// The receipt states per store what detail, an AbsenceProof, says was
// listed; where the deployment declares cache templates, it refuses
// (ErrRefused) a detail whose cache check does not list every one of them,
// and a detail whose objects check misses a prefix of the destructive
// manifest.
func (e *Engine) EnterLogicallyVerified(ctx context.Context, token LeaseToken, detail any) error {
	raw, err := marshalDetail(detail)
	if err != nil {
		return err
	}
	dropChunks := func(q *dbgen.Queries) error {
		if err := checkAbsenceDetail(ctx, q, token, raw); err != nil {
			return err
		}
		if _, err := q.DeletionManifestKeyDeleteByRequest(ctx, token.RequestID); err != nil {
			return fmt.Errorf("delete manifest key chunks: %w", err)
		}
		return nil
	}
	if err := e.markStage(ctx, token, StageCachePurged, "verify_cross_store_absence", detail, dropChunks); err != nil {
		return fmt.Errorf("mark deletion %s logically verified: %w", token.RequestID, err)
	}
	return nil
}

// EnterRetentionPending completes the logically verified request token holds:
// it records detail as the checkpoint's JSON detail and moves the request to
// the terminal retention_pending stage, stamping completed_at and releasing
// the lease. Only deferred physical expiry of shared storage remains. In
// the same transaction it writes the deletion's receipt, the next in the
// chain, signed with Opts.ReceiptKey (or unsigned): the database refuses a
// completion without one, so both commit or neither does.
func (e *Engine) EnterRetentionPending(ctx context.Context, token LeaseToken, detail any) error {
	if _, err := marshalDetail(detail); err != nil {
		return err
	}
	err := e.tx(ctx, func(q *dbgen.Queries) error {
		if _, err := lockTransition(ctx, q, token, StageLogicallyVerified); err != nil {
			return err
		}
		if err := checkpointCompleted(ctx, q, token, StageLogicallyVerified, "retention_physical_expiry_pending", detail); err != nil {
			return err
		}
		n, err := q.DeletionRequestComplete(ctx, dbgen.DeletionRequestCompleteParams{
			ID: token.RequestID, LeaseOwner: &token.Owner, LeaseGeneration: token.Generation,
			FenceGeneration: token.FenceGeneration,
		})
		if err != nil {
			return fmt.Errorf("complete: %w", err)
		}
		if n != 1 {
			return staleLease(token)
		}
		return writeReceipt(ctx, q, token, e.receiptKey)
	})
	if err != nil {
		return fmt.Errorf("mark deletion %s retention pending: %w", token.RequestID, err)
	}
	return nil
}

// checkAbsenceDetail refuses an absence proof that does not cover the
// deployment's declared cache layout or the destructive manifest.
func checkAbsenceDetail(ctx context.Context, q *dbgen.Queries, token LeaseToken, detail []byte) error {
	layout, err := readStorageLayout(ctx, q)
	if err != nil {
		return err
	}
	var declared []string
	for _, t := range layout.Cache {
		declared = append(declared, t.Template)
	}
	row, err := q.DeletionRequestGetForUpdate(ctx, token.RequestID)
	if err != nil {
		return fmt.Errorf("read deletion %s: %w", token.RequestID, err)
	}
	var manifest *StorageManifest
	if row.DestructiveStorageManifest != nil {
		manifest = &StorageManifest{}
		if err := json.Unmarshal(row.DestructiveStorageManifest, manifest); err != nil {
			return refusef("the destructive storage manifest of deletion %s is unreadable: %w", token.RequestID, err)
		}
	}
	if err := checkAbsenceCovers(readAbsenceProof(detail), declared, manifest); err != nil {
		return fmt.Errorf("verification of deletion %s: %w", token.RequestID, err)
	}
	return nil
}

// markStage advances the request token holds from the stage named by from to
// its next stage with a completed checkpoint unit at from, then runs after, if any, in the
// same transaction.
func (s *store) markStage(ctx context.Context, token LeaseToken, from Stage, unit string, detail any, after func(q *dbgen.Queries) error) error {
	if _, err := marshalDetail(detail); err != nil {
		return err
	}
	to, ok := from.Next()
	if !ok {
		return refusef("deletion stage %s has no next stage", from)
	}
	return s.tx(ctx, func(q *dbgen.Queries) error {
		if _, err := lockTransition(ctx, q, token, from); err != nil {
			return err
		}
		if err := advance(ctx, q, token, from, to, nil); err != nil {
			return err
		}
		if err := checkpointCompleted(ctx, q, token, from, unit, detail); err != nil {
			return err
		}
		if after != nil {
			return after(q)
		}
		return nil
	})
}

// lockTransition verifies token at stage, takes the community lock and then
// the request row lock, in that order, and verifies the token again under
// them; it returns the locked row. The first check keeps a stale token from
// queueing on a community lock; the second is the one that counts, as the
// request may have been aborted or reclaimed while this transaction waited.
func lockTransition(ctx context.Context, q *dbgen.Queries, token LeaseToken, stage Stage) (dbgen.CommunityDeletionRequest, error) {
	if err := verifyTokenAt(ctx, q, token, stage); err != nil {
		return dbgen.CommunityDeletionRequest{}, err
	}
	if err := lockCommunity(ctx, q, token.CommunityID); err != nil {
		return dbgen.CommunityDeletionRequest{}, err
	}
	row, err := q.DeletionRequestGetForUpdate(ctx, token.RequestID)
	if errors.Is(err, pgx.ErrNoRows) {
		return row, staleLease(token)
	}
	if err != nil {
		return row, fmt.Errorf("lock deletion %s: %w", token.RequestID, err)
	}
	if err := verifyTokenAt(ctx, q, token, stage); err != nil {
		return row, err
	}
	return row, nil
}

// requireServingWritesDrained refuses while the token's community has
// unexpired serving write leases.
func requireServingWritesDrained(ctx context.Context, q *dbgen.Queries, token LeaseToken) error {
	active, err := q.ServingWriteLeaseCountActive(ctx, token.CommunityID)
	if err != nil {
		return fmt.Errorf("count serving write leases: %w", err)
	}
	if active.ActiveCount > 0 {
		return &ServingWritesNotDrainedError{
			CommunityID: token.CommunityID, ActiveCount: active.ActiveCount, Operations: active.Operations,
		}
	}
	return nil
}
