package lifecycle_test

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// The PostgreSQL scenarios of the reference design's DeletionStore, ported
// with the same intent and assertions, plus the helpers the request, claim
// and transition tests share. Helpers carry an lc prefix so they stay clear
// of the other test files of the package.

// lcLease is the lease every scenario claims with.
const lcLease = lifecycle.DefaultLeaseDuration

// lcStorage is an empty two-prefix storage manifest of community.
func lcStorage(community uuid.UUID) lifecycle.StorageManifest {
	return lifecycle.StorageManifest{
		Version: lifecycle.StorageManifestVersion,
		Prefixes: []lifecycle.PrefixManifest{
			{Prefix: "_meta/" + community.String() + "/", KeysDigest: lifecycle.EmptyKeysDigest},
			{Prefix: "_uploads/" + community.String() + "/", KeysDigest: lifecycle.EmptyKeysDigest},
		},
	}
}

// lcInventoried submits a deletion of a new community as "requester" and
// freezes its live inventory.
func (b *testBundle) lcInventoried(t *testing.T) (*lifecycle.Request, lifecycle.FrozenInventory) {
	t.Helper()
	ctx := t.Context()
	community, host := b.createCommunity(t)
	submitted, err := b.operator.Submit(ctx, host, "requester", "test deletion")
	require.NoError(t, err)
	require.Equal(t, community, submitted.CommunityID)
	schema, err := b.operator.InventorySchema(ctx, community)
	require.NoError(t, err)
	inventory := lifecycle.FrozenInventory{Schema: *schema, Storage: lcStorage(community)}
	request, err := b.operator.FreezeInventory(ctx, submitted.ID, inventory)
	require.NoError(t, err)
	require.Equal(t, lifecycle.StageInventoried, request.Stage)
	return request, inventory
}

// lcApproved is lcInventoried approved by "approver".
func (b *testBundle) lcApproved(t *testing.T) *lifecycle.Request {
	t.Helper()
	request, _ := b.lcInventoried(t)
	approved, err := b.approver.Approve(t.Context(), request.ID, "approver", "")
	require.NoError(t, err)
	require.Equal(t, lifecycle.StageApproved, approved.Stage)
	return approved
}

// lcClaimed is lcApproved claimed by "executor".
func (b *testBundle) lcClaimed(t *testing.T) (*lifecycle.Request, lifecycle.LeaseToken) {
	t.Helper()
	request := b.lcApproved(t)
	claim, err := b.engine.ClaimRequest(t.Context(), request.ID, "executor", lcLease)
	require.NoError(t, err)
	require.NotNil(t, claim)
	return claim.Request, claim.Lease
}

// lcAt walks a new request to stage through the Store (and, for the steps
// other engineers own, through SQL as they would) and returns it with a
// live token. quiesced leaves an approved request's community quiescing.
func (b *testBundle) lcAt(t *testing.T, stage lifecycle.Stage, quiesced bool) (*lifecycle.Request, lifecycle.LeaseToken) {
	t.Helper()
	ctx := t.Context()
	request, token := b.lcClaimed(t)
	if stage == lifecycle.StageApproved {
		if quiesced {
			require.NoError(t, b.engine.BeginQuiescing(ctx, token))
		}
		return request, token
	}
	require.NoError(t, b.engine.BeginQuiescing(ctx, token))
	generation, err := b.engine.EnterFenced(ctx, token)
	require.NoError(t, err)
	token = token.WithFence(generation)
	b.lcFreezeDestructive(t, request.ID, request.CommunityID)
	steps := []struct {
		to   lifecycle.Stage
		step func() error
	}{
		{lifecycle.StageDrained, func() error { return b.engine.EnterDrained(ctx, token) }},
		{lifecycle.StageBindingsRemoved, func() error { return b.engine.EnterBindingsRemoved(ctx, token, map[string]int{"keys": 0}) }},
		{lifecycle.StagePostgresPurged, func() error { b.lcTombstone(t, request.CommunityID, request.ID); return nil }},
		{lifecycle.StageCachePurged, func() error { return b.engine.EnterCachePurged(ctx, token, map[string]int{"keys": 0}) }},
		{lifecycle.StageLogicallyVerified, func() error { return b.engine.EnterLogicallyVerified(ctx, token, map[string]bool{"all": true}) }},
	}
	for _, s := range steps {
		if stage == lifecycle.StageFenced {
			break
		}
		require.NoError(t, s.step(), "step to %s", s.to)
		if s.to == stage {
			break
		}
	}
	current, err := b.operator.Get(ctx, request.ID)
	require.NoError(t, err)
	require.Equal(t, stage, current.Stage)
	return current, token
}

// lcFreezeDestructive freezes a fenced request's destructive storage
// manifest with SQL, standing in for the storage engineer's freeze.
func (b *testBundle) lcFreezeDestructive(t *testing.T, request, community uuid.UUID) {
	t.Helper()
	manifest, err := json.Marshal(lcStorage(community))
	require.NoError(t, err)
	_, err = b.pool.Exec(t.Context(), `UPDATE community_deletion_requests
		SET destructive_storage_manifest = $2::jsonb, destructive_storage_frozen_at = now() WHERE id = $1`, request, manifest)
	require.NoError(t, err)
}

// lcTombstone tombstones a fenced community whose request is at
// bindings_removed and moves the request to postgres_purged, as the purge
// does, with SQL as the authorized executor.
func (b *testBundle) lcTombstone(t *testing.T, community, request uuid.UUID) {
	t.Helper()
	ctx := t.Context()
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		var generation int64
		if err := tx.QueryRow(ctx, "SELECT deletion_fence_generation FROM communities WHERE id = $1", community).Scan(&generation); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SELECT set_config('community_deletion.executor_community', $1, true),
			set_config('community_deletion.fence_generation', $2, true)`, community.String(), fmt.Sprint(generation)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE communities SET deletion_state = 'tombstone', deleted_at = now(),
			signing_key = NULL, icon = NULL WHERE id = $1`, community); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "UPDATE community_deletion_requests SET stage = 'postgres_purged' WHERE id = $1", request)
		return err
	}))
}

// lcExec runs one statement on the pool.
func (b *testBundle) lcExec(t *testing.T, sql string, args ...any) error {
	t.Helper()
	_, err := b.pool.Exec(t.Context(), sql, args...)
	return err
}

// lcCommunity returns a community's deletion state, fence generation and
// archived_at.
func (b *testBundle) lcCommunity(t *testing.T, community uuid.UUID) (string, int64, *time.Time) {
	t.Helper()
	var state string
	var generation int64
	var archivedAt *time.Time
	require.NoError(t, b.pool.QueryRow(t.Context(),
		"SELECT deletion_state, deletion_fence_generation, archived_at FROM communities WHERE id = $1",
		community).Scan(&state, &generation, &archivedAt))
	return state, generation, archivedAt
}

// lcSnapshot renders everything a refused call must leave alone: the
// request row, its community, its approval, checkpoints and chunks, and
// the executor heartbeats.
func (b *testBundle) lcSnapshot(t *testing.T, request uuid.UUID) string {
	t.Helper()
	var snapshot string
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT json_build_object(
		'request', (SELECT row_to_json(r) FROM community_deletion_requests r WHERE r.id = $1),
		'community', (SELECT row_to_json(c) FROM communities c JOIN community_deletion_requests r ON r.community_id = c.id WHERE r.id = $1),
		'approval', (SELECT row_to_json(a) FROM community_deletion_approvals a WHERE a.request_id = $1),
		'checkpoints', (SELECT json_agg(k ORDER BY k.sequence) FROM community_deletion_checkpoints k WHERE k.request_id = $1),
		'chunks', (SELECT json_agg(m ORDER BY m.chunk_no) FROM community_deletion_manifest_keys m WHERE m.request_id = $1),
		'heartbeats', (SELECT json_agg(h ORDER BY h.executor_id) FROM community_deletion_executor_heartbeats h),
		'requests', (SELECT count(*) FROM community_deletion_requests))::text`, request).Scan(&snapshot))
	return snapshot
}

// lcWaitForLockWaiters blocks until at least n backends of the test
// database wait for an advisory lock: how a test learns, from pg_locks
// rather than a sleep, that concurrent calls have queued behind a lock.
func (b *testBundle) lcWaitForLockWaiters(t *testing.T, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for {
		var waiting int
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks
			WHERE locktype = 'advisory' AND NOT granted
			  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&waiting))
		if waiting >= n {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d backend(s) never waited on an advisory lock (%d did)", n, waiting)
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// lcHoldCommunityLock takes community's deletion lock exclusively in a
// transaction of its own and returns it; commit or roll back to release.
func (b *testBundle) lcHoldCommunityLock(t *testing.T, community uuid.UUID) pgx.Tx {
	t.Helper()
	gate, err := b.pool.Begin(t.Context())
	require.NoError(t, err)
	t.Cleanup(func() { _ = gate.Rollback(context.Background()) })
	_, err = gate.Exec(t.Context(), "SELECT pg_advisory_xact_lock(community_deletion_lock_key($1))", community)
	require.NoError(t, err)
	return gate
}

// lcRequireNoDeadlock fails if err carries SQLSTATE 40P01.
func lcRequireNoDeadlock(t *testing.T, err error) {
	t.Helper()
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		require.NotEqual(t, "40P01", pgErr.Code, "PostgreSQL reported a deadlock: %s", pgErr.Message)
	}
}

// lcCheckpoint returns the request's checkpoint whose unit key has prefix.
func lcCheckpoint(t *testing.T, inspection *lifecycle.Inspection, prefix string) lifecycle.Checkpoint {
	t.Helper()
	// The newest: checkpoints are append-only, oldest first.
	for _, c := range slices.Backward(inspection.Checkpoints) {
		if strings.HasPrefix(c.UnitKey, prefix) {
			return c
		}
	}
	t.Fatalf("no checkpoint %s* among %d", prefix, len(inspection.Checkpoints))
	return lifecycle.Checkpoint{}
}

type lcAbortResult struct {
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
	request, inventory := b.lcInventoried(t)
	claim, err := b.engine.ClaimRequest(ctx, request.ID, "executor-a", lcLease)
	require.ErrorIs(t, err, lifecycle.ErrNothingToClaim, "an inventoried request is not claimable")
	require.Nil(t, claim)

	// Row counts are observational evidence: serving churn after the freeze
	// changes the live count but not the catalog, and approval still binds.
	_, err = b.pool.Exec(ctx, "INSERT INTO fixture_members (community_id, handle) VALUES ($1, 'late')", request.CommunityID)
	require.NoError(t, err)
	live, err := b.operator.InventorySchema(ctx, request.CommunityID)
	require.NoError(t, err)
	require.Equal(t, inventory.Schema.RowCounts["fixture_members"]+1, live.RowCounts["fixture_members"])
	require.Equal(t, inventory.Schema.ScopedTables, live.ScopedTables)
	require.Equal(t, inventory.Schema.FencedTables, live.FencedTables)

	_, err = b.pool.Exec(ctx, `INSERT INTO community_deletion_approvals (request_id, community_id, inventory_digest, approved_by)
		VALUES ($1, $2, $3, 'tampered')`, request.ID, request.CommunityID, make([]byte, 32))
	require.Error(t, err, "a mismatched approval must be unrepresentable")

	approved, err := b.approver.Approve(ctx, request.ID, "approver-a", "reviewed")
	require.NoError(t, err)
	require.Equal(t, lifecycle.StageApproved, approved.Stage)
	digest, err := inventory.Digest()
	require.NoError(t, err)
	require.Equal(t, hex.EncodeToString(digest[:]), approved.InventoryDigest)

	_, err = b.pool.Exec(ctx, "UPDATE community_deletion_approvals SET inventory_digest = $2 WHERE request_id = $1", request.ID, make([]byte, 32))
	require.Error(t, err, "the approval digest stays bound to the frozen request digest")
	ones := make([]byte, 32)
	for i := range ones {
		ones[i] = 1
	}
	_, err = b.pool.Exec(ctx, "UPDATE community_deletion_requests SET inventory_digest = $2 WHERE id = $1", request.ID, ones)
	require.Error(t, err, "the frozen request digest stays bound to its approval")

	claim, err = b.engine.ClaimRequest(ctx, request.ID, "executor-a", lcLease)
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
	request, _ := b.lcInventoried(t)
	control, controlHost := b.createCommunity(t)

	for name, mutation := range map[string]func() error{
		"community_id": func() error {
			return b.lcExec(t, "UPDATE community_deletion_requests SET community_id = $2 WHERE id = $1", request.ID, control)
		},
		"community_host": func() error {
			return b.lcExec(t, "UPDATE community_deletion_requests SET community_host = $2 WHERE id = $1", request.ID, controlHost)
		},
		"inventory_manifest": func() error {
			return b.lcExec(t, "UPDATE community_deletion_requests SET inventory_manifest = '{}' WHERE id = $1", request.ID)
		},
		"storage_manifest": func() error {
			return b.lcExec(t, "UPDATE community_deletion_requests SET storage_manifest = '{}' WHERE id = $1", request.ID)
		},
	} {
		require.Error(t, mutation(), "the frozen %s must be immutable", name)
	}

	_, err := b.approver.Approve(ctx, request.ID, "approver", "")
	require.NoError(t, err)
	claim, err := b.engine.ClaimRequest(ctx, request.ID, "forged-executor", lcLease)
	require.NoError(t, err)
	require.NotNil(t, claim)

	require.Error(t, b.lcExec(t, "DELETE FROM community_deletion_approvals WHERE request_id = $1", request.ID),
		"approval evidence must be immutable")
	for _, update := range []string{
		"UPDATE community_deletion_approvals SET approved_by = 'forged' WHERE request_id = $1",
		"UPDATE community_deletion_approvals SET approved_at = now() + interval '1 hour' WHERE request_id = $1",
		"UPDATE community_deletion_approvals SET note = 'rewritten' WHERE request_id = $1",
	} {
		require.Error(t, b.lcExec(t, update, request.ID), "approval updates must be refused: %s", update)
	}
	require.NoError(t, b.engine.VerifyToken(ctx, claim.Lease, lifecycle.StageApproved))

	require.NoError(t, b.lcExec(t, "UPDATE community_deletion_requests SET blocked_at = now(), blocked_reason = 'operator hold' WHERE id = $1", request.ID))
	err = b.engine.Heartbeat(ctx, claim.Lease, lcLease)
	require.True(t, lifecycle.IsStaleLease(err), "a blocked request must not renew its lease: %v", err)

	forged, _ := b.lcInventoried(t)
	err = b.lcExec(t, "UPDATE community_deletion_requests SET stage = 'approved' WHERE id = $1", forged.ID)
	require.Error(t, err, "a runnable stage without an approval is refused by the database")
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr))
	require.Equal(t, "23000", pgErr.Code)
	claim, err = b.engine.ClaimRequest(ctx, forged.ID, "forged-executor-2", lcLease)
	require.ErrorIs(t, err, lifecycle.ErrNothingToClaim)
	require.Nil(t, claim)

	// The requester cannot approve, in Go or in the database.
	_, err = b.approver.Approve(ctx, forged.ID, " REQUESTER ", "")
	require.ErrorIs(t, err, lifecycle.ErrRefused)
	err = b.lcExec(t, `INSERT INTO community_deletion_approvals (request_id, community_id, inventory_digest, approved_by)
		SELECT id, community_id, inventory_digest, 'Requester' FROM community_deletion_requests WHERE id = $1`, forged.ID)
	require.Error(t, err)
	unchanged, err := b.operator.Get(ctx, forged.ID)
	require.NoError(t, err)
	require.Equal(t, lifecycle.StageInventoried, unchanged.Stage)
}

// The eighth consecutive failure at one stage blocks durably; an operator
// unblock resets the streak, and progress to the next stage resets it too.
func TestScenarioRetryExhaustionBlocksOnlyTheConsecutiveStageAndProgressResetsIt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	request := b.lcApproved(t)

	for attempt := int32(1); attempt <= lifecycle.MaxConsecutiveRetries; attempt++ {
		claim, err := b.engine.ClaimRequest(ctx, request.ID, "executor", lcLease)
		require.NoError(t, err)
		require.NotNil(t, claim, "claimable before exhaustion (attempt %d)", attempt)
		require.NoError(t, b.engine.RecordRetry(ctx, claim.Lease, lifecycle.RetryParams{Stage: lifecycle.StageApproved, Unit: "dependency", Err: "dependency unavailable", After: 0}))
		observed, err := b.operator.Get(ctx, request.ID)
		require.NoError(t, err)
		require.Equal(t, attempt, observed.RetryCount)
		require.NotNil(t, observed.RetryStage)
		require.Equal(t, lifecycle.StageApproved, *observed.RetryStage)
		require.Equal(t, attempt == lifecycle.MaxConsecutiveRetries, observed.Blocked(), "attempt %d", attempt)
		require.Empty(t, observed.LeaseOwner)
	}
	claim, err := b.engine.ClaimRequest(ctx, request.ID, "blocked-executor", lcLease)
	require.ErrorIs(t, err, lifecycle.ErrNothingToClaim)
	require.Nil(t, claim)

	recovered, err := b.operator.Unblock(ctx, request.ID, "operator", "dependency repaired")
	require.NoError(t, err)
	require.Zero(t, recovered.RetryCount)
	require.Nil(t, recovered.RetryStage)
	require.False(t, recovered.Blocked())

	// Seven failures, then progress: the streak restarts at the next stage.
	for range lifecycle.MaxConsecutiveRetries - 1 {
		claim, err := b.engine.ClaimRequest(ctx, request.ID, "executor", lcLease)
		require.NoError(t, err)
		require.NotNil(t, claim)
		require.NoError(t, b.engine.RecordRetry(ctx, claim.Lease, lifecycle.RetryParams{Stage: lifecycle.StageApproved, Unit: "dependency", Err: "flaky", After: 0}))
	}
	claim, err = b.engine.ClaimRequest(ctx, request.ID, "successor", lcLease)
	require.NoError(t, err)
	require.NotNil(t, claim)
	require.NoError(t, b.engine.BeginQuiescing(ctx, claim.Lease))
	generation, err := b.engine.EnterFenced(ctx, claim.Lease)
	require.NoError(t, err)
	advanced, err := b.operator.Get(ctx, request.ID)
	require.NoError(t, err)
	require.Equal(t, lifecycle.StageFenced, advanced.Stage)
	require.Zero(t, advanced.RetryCount)
	require.Nil(t, advanced.RetryStage)

	token := claim.Lease.WithFence(generation)
	require.NoError(t, b.engine.RecordRetry(ctx, token, lifecycle.RetryParams{Stage: lifecycle.StageFenced, Unit: "drain", Err: "still draining", After: 0}))
	after, err := b.operator.Get(ctx, request.ID)
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
	request, token := b.lcClaimed(t)
	gate := b.lcHoldCommunityLock(t, request.CommunityID)

	aborted := make(chan lcAbortResult, 1)
	go func() {
		r, err := b.operator.Abort(ctx, request.ID, "operator", "race recovery")
		aborted <- lcAbortResult{r, err}
	}()
	b.lcWaitForLockWaiters(t, 1)
	quiesced := make(chan error, 1)
	go func() { quiesced <- b.engine.BeginQuiescing(ctx, token) }()
	b.lcWaitForLockWaiters(t, 2)
	select {
	case <-aborted:
		t.Fatal("abort finished while the community lock was held")
	case <-quiesced:
		t.Fatal("quiescing finished while the community lock was held")
	default:
	}
	require.NoError(t, gate.Commit(ctx))

	result := <-aborted
	require.NoError(t, result.err)
	require.Equal(t, lifecycle.StageAborted, result.request.Stage)
	err := <-quiesced
	require.Error(t, err, "the re-verification under the lock rejects the aborted request")
	require.True(t, lifecycle.IsStaleLease(err), "%v", err)
	lcRequireNoDeadlock(t, err)
	state, generation, _ := b.lcCommunity(t, request.CommunityID)
	require.Equal(t, "active", state)
	require.Zero(t, generation)
}

// The same for the fence: abort restores the quiescing community and the
// fence queued behind it fails closed, with no SQLSTATE 40P01.
func TestScenarioAbortSerializesBeforeFenceWithoutDeadlock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	request, token := b.lcAt(t, lifecycle.StageApproved, true)
	gate := b.lcHoldCommunityLock(t, request.CommunityID)

	aborted := make(chan lcAbortResult, 1)
	go func() {
		r, err := b.operator.Abort(ctx, request.ID, "operator", "race recovery")
		aborted <- lcAbortResult{r, err}
	}()
	b.lcWaitForLockWaiters(t, 1)
	fenced := make(chan error, 1)
	go func() {
		_, err := b.engine.EnterFenced(ctx, token)
		fenced <- err
	}()
	b.lcWaitForLockWaiters(t, 2)
	select {
	case <-aborted:
		t.Fatal("abort finished while the community lock was held")
	case <-fenced:
		t.Fatal("the fence finished while the community lock was held")
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
	lcRequireNoDeadlock(t, err)
	state, generation, archivedAt := b.lcCommunity(t, request.CommunityID)
	require.Equal(t, "active", state)
	require.Equal(t, int64(1), generation, "the abort restored the community under a new generation")
	require.Nil(t, archivedAt, "the pre-quiesce archived_at is restored")
}

// An aborted request stays as audit and the community can be requested
// afresh.
func TestScenarioAbortPreservesAuditAndAllowsFreshRequest(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	request := b.lcApproved(t)
	aborted, err := b.operator.Abort(ctx, request.ID, "operator", "cancel deletion")
	require.NoError(t, err)
	require.Equal(t, lifecycle.StageAborted, aborted.Stage)
	require.Equal(t, "operator", aborted.AbortedBy)
	require.Equal(t, "cancel deletion", aborted.AbortReason)
	require.NotNil(t, aborted.AbortedAt)
	require.NotNil(t, aborted.CompletedAt)
	require.Equal(t, request.LeaseGeneration+1, aborted.LeaseGeneration)

	replacement, err := b.operator.Submit(ctx, request.CommunityHost, "second-operator", "fresh review")
	require.NoError(t, err)
	require.NotEqual(t, request.ID, replacement.ID)
	require.Equal(t, lifecycle.StageSubmitted, replacement.Stage)
	require.Empty(t, replacement.InventoryDigest)
	require.Nil(t, replacement.Inventory)

	preserved, err := b.operator.Inspect(ctx, request.ID)
	require.NoError(t, err)
	require.Equal(t, lifecycle.StageAborted, preserved.Request.Stage)
	require.NotNil(t, preserved.Approval, "the approval evidence stays")
	audit := lcCheckpoint(t, preserved, "operator_abort:")
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
	request := b.lcApproved(t)
	blocked, err := b.engine.BlockBeforeClaim(ctx, request.ID, "pre_claim:service_setup", "S3_ENDPOINT is required")
	require.NoError(t, err)
	require.Equal(t, lifecycle.StageApproved, blocked.Stage)
	require.Equal(t, "S3_ENDPOINT is required", blocked.BlockedReason)
	require.Equal(t, "S3_ENDPOINT is required", blocked.LastError)
	require.Empty(t, blocked.LeaseOwner)
	inspection, err := b.operator.Inspect(ctx, request.ID)
	require.NoError(t, err)
	checkpoint := lcCheckpoint(t, inspection, "pre_claim:service_setup")
	require.Equal(t, "failed", checkpoint.Status)
	require.Equal(t, "S3_ENDPOINT is required", checkpoint.Error)
	require.Equal(t, int32(1), checkpoint.Attempts)
	require.Nil(t, checkpoint.CompletedAt)

	_, err = b.operator.Unblock(ctx, request.ID, "operator", "dependency repaired")
	require.NoError(t, err)
	blockedAgain, err := b.engine.BlockBeforeClaim(ctx, request.ID, "pre_claim:service_setup", "REDIS_URL is required")
	require.NoError(t, err)
	require.Equal(t, "REDIS_URL is required", blockedAgain.BlockedReason)
	require.Equal(t, "REDIS_URL is required", blockedAgain.LastError)
	repeated, err := b.operator.Inspect(ctx, request.ID)
	require.NoError(t, err)
	checkpoint = lcCheckpoint(t, repeated, "pre_claim:service_setup")
	require.Equal(t, "failed", checkpoint.Status)
	require.Equal(t, int32(2), checkpoint.Attempts)
	require.Equal(t, "REDIS_URL is required", checkpoint.Error)
	var detail map[string]string
	require.NoError(t, json.Unmarshal(checkpoint.Detail, &detail))
	require.Equal(t, "REDIS_URL is required", detail["error"])
	require.Nil(t, checkpoint.CompletedAt)

	// A live lease belongs to Block, not to a pre-claim failure.
	_, err = b.operator.Unblock(ctx, request.ID, "operator", "repaired again")
	require.NoError(t, err)
	claim, err := b.engine.ClaimRequest(ctx, request.ID, "executor", lcLease)
	require.NoError(t, err)
	require.NotNil(t, claim)
	before := b.lcSnapshot(t, request.ID)
	_, err = b.engine.BlockBeforeClaim(ctx, request.ID, "pre_claim:service_setup", "late")
	require.ErrorIs(t, err, lifecycle.ErrRefused)
	require.Equal(t, before, b.lcSnapshot(t, request.ID))
}

// Unblocking keeps the approval, inventory, stage and fence generation and
// records who recovered the request and from what.
func TestScenarioOperatorUnblockPreservesApprovalAndRecordsRecovery(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	request, token := b.lcClaimed(t)
	require.NoError(t, b.engine.Block(ctx, token, lifecycle.BlockParams{Stage: lifecycle.StageApproved, Unit: "dependency", Err: "operator repair required"}))

	_, err := b.operator.Unblock(ctx, request.ID, "", "repair")
	require.ErrorIs(t, err, lifecycle.ErrInvalidInput)
	recovered, err := b.operator.Unblock(ctx, request.ID, "operator", "bucket policy repaired")
	require.NoError(t, err)
	require.Equal(t, lifecycle.StageApproved, recovered.Stage)
	require.False(t, recovered.Blocked())
	require.Empty(t, recovered.LastError)
	require.Equal(t, request.InventoryDigest, recovered.InventoryDigest)
	require.Equal(t, request.FenceGeneration, recovered.FenceGeneration)
	_, err = b.operator.Unblock(ctx, request.ID, "operator", "again")
	require.ErrorIs(t, err, lifecycle.ErrRefused, "a request that is not blocked cannot be unblocked")
	claim, err := b.engine.ClaimRequest(ctx, request.ID, "successor", lcLease)
	require.NoError(t, err)
	require.NotNil(t, claim)

	inspection, err := b.operator.Inspect(ctx, request.ID)
	require.NoError(t, err)
	require.NotNil(t, inspection.Approval)
	require.Equal(t, "approver", inspection.Approval.ApprovedBy)
	audit := lcCheckpoint(t, inspection, "operator_unblock:")
	var detail map[string]any
	require.NoError(t, json.Unmarshal(audit.Detail, &detail))
	require.Equal(t, "operator", detail["unblocked_by"])
	require.Equal(t, "bucket policy repaired", detail["reason"])
	require.Equal(t, "operator repair required", detail["previous_block"])
	failure := lcCheckpoint(t, inspection, "dependency")
	require.Equal(t, "failed", failure.Status, "the failure checkpoint stays")

	// A blocked request whose executor lease is still live on the database
	// clock is not unblocked under it.
	require.NoError(t, b.lcExec(t, "UPDATE community_deletion_requests SET blocked_at = now(), blocked_reason = 'hold' WHERE id = $1", request.ID))
	_, err = b.operator.Unblock(ctx, request.ID, "operator", "too early")
	require.ErrorIs(t, err, lifecycle.ErrRefused)
	require.NoError(t, b.lcExec(t, "UPDATE community_deletion_requests SET lease_until = now() - interval '1 second' WHERE id = $1", request.ID))
	_, err = b.operator.Unblock(ctx, request.ID, "operator", "lease expired")
	require.NoError(t, err)
}

// An older lease generation, a token bound to another community and a
// wrong fence generation all fail closed.
func TestScenarioStaleClaimAndFenceGenerationFailClosed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	request, token := b.lcClaimed(t)
	stale := token
	stale.Generation--
	_, err := b.engine.EnterFenced(ctx, stale)
	require.True(t, lifecycle.IsStaleLease(err), "%v", err)

	other, _ := b.createCommunity(t)
	wrongCommunity := token
	wrongCommunity.CommunityID = other
	require.True(t, lifecycle.IsStaleLease(b.engine.BeginQuiescing(ctx, wrongCommunity)),
		"a token stays bound to its request's community")
	state, _, _ := b.lcCommunity(t, other)
	require.Equal(t, "active", state)

	require.NoError(t, b.engine.BeginQuiescing(ctx, token))
	generation, err := b.engine.EnterFenced(ctx, token)
	require.NoError(t, err)
	require.Equal(t, int64(1), generation)
	b.lcFreezeDestructive(t, request.ID, request.CommunityID)
	wrongFence := token.WithFence(generation + 1)
	require.True(t, lifecycle.IsStaleLease(b.engine.EnterDrained(ctx, wrongFence)), "a wrong fence generation is refused")
	require.ErrorIs(t, b.engine.EnterDrained(ctx, token), lifecycle.ErrRefused, "a token without its fence generation is refused")
	require.NoError(t, b.engine.EnterDrained(ctx, token.WithFence(generation)))
}

// A write admitted before the fence holds it off; the fence then commits
// and every later write is refused.
func TestScenarioFenceWaitsForOpenWriteAndRejectsItAfterTransition(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	request, token := b.lcClaimed(t)

	writer, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer writer.Rollback(ctx)
	_, err = writer.Exec(ctx, "INSERT INTO fixture_members (community_id, handle) VALUES ($1, 'in-flight')", request.CommunityID)
	require.NoError(t, err, "the write takes the shared community lock")

	fenced := make(chan error, 1)
	go func() {
		if err := b.engine.BeginQuiescing(ctx, token); err != nil {
			fenced <- err
			return
		}
		_, err := b.engine.EnterFenced(ctx, token)
		fenced <- err
	}()
	b.lcWaitForLockWaiters(t, 1)
	select {
	case err := <-fenced:
		t.Fatalf("the fence finished while a writer held the shared lock: %v", err)
	default:
	}
	require.NoError(t, writer.Commit(ctx), "the writer admitted before the fence commits")
	require.NoError(t, <-fenced)

	var inFlight int
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM fixture_members WHERE community_id = $1 AND handle = 'in-flight'",
		request.CommunityID).Scan(&inFlight))
	require.Equal(t, 1, inFlight)
	_, err = b.pool.Exec(ctx, "INSERT INTO fixture_members (community_id, handle) VALUES ($1, 'after')", request.CommunityID)
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "a write after the fence is refused: %v", err)
	require.Equal(t, "55000", pgErr.Code)
	require.Contains(t, pgErr.Message, "is fenced")
}
