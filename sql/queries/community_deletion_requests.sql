-- name: DeletionRequestAbort :one
-- Terminally aborts an abortable request: records who and why, clears the
-- lease and any block, and raises lease_generation so every token is stale.
-- fence_generation changes only when given (the community was restored to
-- active under a new generation); the guard allows that only on this step.
UPDATE community_deletion.community_deletion_requests
SET stage = 'aborted',
    aborted_by = @aborted_by,
    abort_reason = @abort_reason,
    aborted_at = now(),
    completed_at = now(),
    fence_generation = COALESCE(sqlc.narg('fence_generation')::bigint, fence_generation),
    lease_owner = NULL,
    lease_until = NULL,
    lease_generation = lease_generation + 1,
    blocked_at = NULL,
    blocked_reason = NULL,
    retry_count = 0,
    retry_stage = NULL,
    next_attempt_at = now()
WHERE id = @id
  AND stage = @from_stage
RETURNING *;

-- name: DeletionRequestAdvance :execrows
-- Moves a leased, unblocked request one stage forward and clears its retry
-- streak; fence_generation is set when given (the step to fenced).
UPDATE community_deletion.community_deletion_requests
SET stage = @to_stage,
    fence_generation = COALESCE(sqlc.narg('fence_generation')::bigint, fence_generation),
    retry_count = 0,
    retry_stage = NULL,
    last_error = NULL,
    last_error_at = NULL
WHERE id = @id
  AND stage = @from_stage
  AND lease_owner = @lease_owner
  AND lease_generation = @lease_generation
  AND lease_until >= now()
  AND blocked_at IS NULL;

-- name: DeletionRequestBlock :one
-- Durably blocks a request that no executor holds (a pre-claim failure or a
-- claim that found catalog drift) and drops any expired lease.
UPDATE community_deletion.community_deletion_requests
SET blocked_at = now(),
    blocked_reason = @reason,
    last_error = @reason,
    last_error_at = now(),
    lease_owner = NULL,
    lease_until = NULL
WHERE id = @id
RETURNING *;

-- name: DeletionRequestBlockLeased :execrows
-- Durably blocks the request its current lease holder names and releases
-- the lease. No row: the lease is stale.
UPDATE community_deletion.community_deletion_requests
SET blocked_at = now(),
    blocked_reason = @reason,
    last_error = @reason,
    last_error_at = now(),
    lease_owner = NULL,
    lease_until = NULL
WHERE id = @id
  AND stage = @stage
  AND lease_owner = @lease_owner
  AND lease_generation = @lease_generation
  AND lease_until >= now()
  AND blocked_at IS NULL;

-- name: DeletionRequestClaim :one
-- Leases a candidate the caller holds FOR UPDATE to owner under a new lease
-- generation. The lease runs from clock_timestamp(), so time spent waiting
-- for locks is not lost from it.
UPDATE community_deletion.community_deletion_requests
SET lease_owner = @lease_owner,
    lease_generation = lease_generation + 1,
    lease_until = clock_timestamp() + @lease_duration::interval,
    attempts = attempts + 1
WHERE id = @id
RETURNING *;

-- name: DeletionRequestClaimNextCandidate :one
-- The oldest claimable request: approved for its frozen inventory, past its
-- grace period, runnable, unblocked, due and not leased. Rows another claim holds are skipped. Served
-- by community_deletion_requests_claimable_idx.
SELECT request.*
FROM community_deletion.community_deletion_requests request
JOIN community_deletion.community_deletion_approvals approval ON approval.request_id = request.id
    AND approval.community_id = request.community_id
    AND approval.inventory_digest = request.inventory_digest
WHERE request.blocked_at IS NULL
  AND community_deletion.community_deletion_stage_runnable(request.stage)
  AND request.next_attempt_at <= now()
  AND (request.lease_until IS NULL OR request.lease_until < now())
  AND (approval.grace_until IS NULL OR approval.grace_until <= now())
ORDER BY request.created_at, request.id
LIMIT 1
FOR UPDATE OF request SKIP LOCKED;

-- name: DeletionRequestClaimSpecificCandidate :one
-- The request id when it is claimable, on the same terms as
-- DeletionRequestClaimNextCandidate.
SELECT request.*
FROM community_deletion.community_deletion_requests request
JOIN community_deletion.community_deletion_approvals approval ON approval.request_id = request.id
    AND approval.community_id = request.community_id
    AND approval.inventory_digest = request.inventory_digest
WHERE request.id = @id
  AND request.blocked_at IS NULL
  AND community_deletion.community_deletion_stage_runnable(request.stage)
  AND request.next_attempt_at <= now()
  AND (request.lease_until IS NULL OR request.lease_until < now())
  AND (approval.grace_until IS NULL OR approval.grace_until <= now())
FOR UPDATE OF request SKIP LOCKED;

-- name: DeletionRequestComplete :execrows
-- Moves a leased, logically verified request to the terminal
-- retention_pending stage under its fence generation and releases the lease.
UPDATE community_deletion.community_deletion_requests
SET stage = 'retention_pending',
    completed_at = now(),
    lease_owner = NULL,
    lease_until = NULL,
    retry_count = 0,
    retry_stage = NULL,
    last_error = NULL,
    last_error_at = NULL
WHERE id = @id
  AND stage = 'logically_verified'
  AND lease_owner = @lease_owner
  AND lease_generation = @lease_generation
  AND lease_until >= now()
  AND blocked_at IS NULL
  AND fence_generation = @fence_generation;

-- name: DeletionRequestFreezeInventory :one
-- Freezes the inventory of an unblocked submitted request and moves it to
-- inventoried, or replaces the frozen inventory of an unblocked inventoried
-- request (the request guard refuses one with an approval). No row: the
-- request is neither.
UPDATE community_deletion.community_deletion_requests
SET stage = 'inventoried',
    schema_manifest = @schema_manifest::jsonb,
    storage_manifest = @storage_manifest::jsonb,
    inventory_manifest = @inventory_manifest::jsonb,
    inventory_digest = @inventory_digest,
    inventory_frozen_at = now(),
    last_error = NULL,
    last_error_at = NULL
WHERE id = @id
  AND stage IN ('submitted', 'inventoried')
  AND blocked_at IS NULL
RETURNING *;

-- name: DeletionRequestGet :one
SELECT *
FROM community_deletion.community_deletion_requests
WHERE id = @id;

-- name: DeletionRequestGetForOperator :one
-- Locks a request for an operator action and says, on the database clock,
-- whether an executor still holds an unexpired lease on it.
SELECT sqlc.embed(request),
       (request.lease_owner IS NOT NULL AND request.lease_until >= clock_timestamp())::boolean AS lease_live
FROM community_deletion.community_deletion_requests request
WHERE request.id = @id
FOR UPDATE;

-- name: DeletionRequestGetForUpdate :one
SELECT *
FROM community_deletion.community_deletion_requests
WHERE id = @id
FOR UPDATE;

-- name: DeletionRequestHeartbeat :execrows
-- Renews the lease its holder presents while the request is unexpired,
-- unblocked, runnable, approved for its frozen inventory and under the
-- token's fence generation (none before the fence).
UPDATE community_deletion.community_deletion_requests request
SET lease_until = clock_timestamp() + @lease_duration::interval
WHERE request.id = @id
  AND request.community_id = @community_id
  AND request.lease_owner = @lease_owner
  AND request.lease_generation = @lease_generation
  AND request.lease_until >= now()
  AND request.blocked_at IS NULL
  AND request.fence_generation IS NOT DISTINCT FROM sqlc.narg('fence_generation')::bigint
  AND community_deletion.community_deletion_stage_runnable(request.stage)
  AND EXISTS (
      SELECT 1
      FROM community_deletion.community_deletion_approvals approval
      WHERE approval.request_id = request.id
        AND approval.community_id = request.community_id
        AND approval.inventory_digest = request.inventory_digest);

-- name: DeletionRequestLeaseFenceValid :one
-- Whether a lease token is current at a stage under a fence generation: the
-- request is leased to it, unexpired, unblocked and approved, and the
-- community is fenced (or a tombstone) at that generation.
SELECT EXISTS (
    SELECT 1
    FROM community_deletion.community_deletion_requests request
    JOIN community_deletion.communities community ON community.id = request.community_id
    JOIN community_deletion.community_deletion_approvals approval ON approval.request_id = request.id
        AND approval.community_id = request.community_id
        AND approval.inventory_digest = request.inventory_digest
    WHERE request.id = @id
      AND request.community_id = @community_id
      AND request.stage = @stage
      AND request.lease_owner = @lease_owner
      AND request.lease_generation = @lease_generation
      AND request.lease_until >= now()
      AND request.blocked_at IS NULL
      AND request.fence_generation = @fence_generation
      AND community.deletion_state IN ('fenced', 'tombstone')
      AND community.deletion_fence_generation = @fence_generation
)::boolean AS valid;

-- name: DeletionRequestLeaseValid :one
-- Whether a lease token is current at a stage: the request is leased to it,
-- unexpired, unblocked, and approved for its frozen inventory.
SELECT EXISTS (
    SELECT 1
    FROM community_deletion.community_deletion_requests request
    JOIN community_deletion.community_deletion_approvals approval ON approval.request_id = request.id
        AND approval.community_id = request.community_id
        AND approval.inventory_digest = request.inventory_digest
    WHERE request.id = @id
      AND request.community_id = @community_id
      AND request.stage = @stage
      AND request.lease_owner = @lease_owner
      AND request.lease_generation = @lease_generation
      AND request.lease_until >= now()
      AND request.blocked_at IS NULL
)::boolean AS valid;

-- name: DeletionRequestList :many
-- The newest requests first. Served by community_deletion_requests_created_idx.
SELECT *
FROM community_deletion.community_deletion_requests
ORDER BY created_at DESC, id DESC
LIMIT @max_rows::integer;

-- name: DeletionRequestListPage :many
-- One page of requests, newest first, strictly after the keyset cursor
-- (created_at, id), optionally only the blocked or only the unblocked ones.
-- Without a cursor it starts at the newest request. Served by
-- community_deletion_requests_created_idx.
SELECT *
FROM community_deletion.community_deletion_requests
WHERE (created_at, id) < (coalesce(sqlc.narg('after_created_at')::timestamptz, 'infinity'::timestamptz),
                         coalesce(sqlc.narg('after_id')::uuid, 'ffffffff-ffff-ffff-ffff-ffffffffffff'::uuid))
  AND (sqlc.narg('blocked')::boolean IS NULL OR (blocked_at IS NOT NULL) = sqlc.narg('blocked')::boolean)
ORDER BY created_at DESC, id DESC
LIMIT @max_rows::integer;

-- name: DeletionRequestListPageBlocked :many
-- DeletionRequestListPage for blocked requests only. Served by the partial
-- index community_deletion_requests_blocked_created_idx.
SELECT *
FROM community_deletion.community_deletion_requests
WHERE blocked_at IS NOT NULL
  AND (created_at, id) < (coalesce(sqlc.narg('after_created_at')::timestamptz, 'infinity'::timestamptz),
                         coalesce(sqlc.narg('after_id')::uuid, 'ffffffff-ffff-ffff-ffff-ffffffffffff'::uuid))
ORDER BY created_at DESC, id DESC
LIMIT @max_rows::integer;

-- name: DeletionRequestListPageByStage :many
-- DeletionRequestListPage for one stage. Served by
-- community_deletion_requests_stage_created_idx.
SELECT *
FROM community_deletion.community_deletion_requests
WHERE stage = @stage
  AND (created_at, id) < (coalesce(sqlc.narg('after_created_at')::timestamptz, 'infinity'::timestamptz),
                         coalesce(sqlc.narg('after_id')::uuid, 'ffffffff-ffff-ffff-ffff-ffffffffffff'::uuid))
  AND (sqlc.narg('blocked')::boolean IS NULL OR (blocked_at IS NOT NULL) = sqlc.narg('blocked')::boolean)
ORDER BY created_at DESC, id DESC
LIMIT @max_rows::integer;

-- name: DeletionRequestMarkApproved :one
-- Moves an unblocked inventoried request to approved and makes it due now;
-- the guard refuses unless its approval row already exists.
UPDATE community_deletion.community_deletion_requests
SET stage = 'approved',
    next_attempt_at = now()
WHERE id = @id
  AND stage = 'inventoried'
  AND blocked_at IS NULL
RETURNING *;

-- name: DeletionRequestRecordQuiescing :execrows
-- Records, once, the community's archived_at from before quiescing and when
-- quiescing started, so an abort can restore it.
UPDATE community_deletion.community_deletion_requests
SET pre_quiesce_archived_at = sqlc.narg('pre_quiesce_archived_at')::timestamptz,
    quiescing_started_at = now()
WHERE id = @id
  AND quiescing_started_at IS NULL;

-- name: DeletionRequestRecordRetry :one
-- Records a retryable failure of the lease holder at its current stage and
-- releases the lease. The streak counts consecutive failures at one stage;
-- the failure that brings it to max_retries blocks the request durably
-- instead of scheduling another attempt. No row: the lease is stale.
UPDATE community_deletion.community_deletion_requests
SET retry_count = CASE WHEN retry_stage = @stage THEN retry_count + 1 ELSE 1 END,
    retry_stage = @stage,
    last_error = @error,
    last_error_at = now(),
    next_attempt_at = CASE
        WHEN (CASE WHEN retry_stage = @stage THEN retry_count + 1 ELSE 1 END) >= @max_retries::integer
            THEN next_attempt_at
        ELSE now() + @retry_after::interval
    END,
    blocked_at = CASE
        WHEN (CASE WHEN retry_stage = @stage THEN retry_count + 1 ELSE 1 END) >= @max_retries::integer
            THEN now()
    END,
    blocked_reason = CASE
        WHEN (CASE WHEN retry_stage = @stage THEN retry_count + 1 ELSE 1 END) >= @max_retries::integer
            THEN @error
    END,
    lease_owner = NULL,
    lease_until = NULL
WHERE id = @id
  AND stage = @stage
  AND lease_owner = @lease_owner
  AND lease_generation = @lease_generation
  AND lease_until >= now()
  AND blocked_at IS NULL
RETURNING *;

-- name: DeletionRequestReleaseLease :execrows
-- Releases a lease its holder presents, expired or not. No row: the lease
-- was already taken over or released.
UPDATE community_deletion.community_deletion_requests
SET lease_owner = NULL,
    lease_until = NULL
WHERE id = @id
  AND community_id = @community_id
  AND lease_owner = @lease_owner
  AND lease_generation = @lease_generation
  AND fence_generation IS NOT DISTINCT FROM sqlc.narg('fence_generation')::bigint;

-- name: DeletionRequestSubmit :one
-- Submits a request for the active community whose tenant key is host (its
-- id for a uuid tenant, as text; communities.tenant_key for an integer or
-- text one), or else whose host is host (case-insensitive): a tenant of a
-- declared tenant table has no host. Submitting again while the same
-- requester's request is still submitted returns that request. No row: the
-- community is missing, not active, or already has an open request.
WITH target AS (
    SELECT community.id, community.host
    FROM community_deletion.communities community
    WHERE community.id = coalesce(
        (SELECT c.id FROM community_deletion.communities c WHERE c.id::text = lower(@host::text)),
        (SELECT c.id FROM community_deletion.communities c WHERE c.tenant_key = @host::text),
        (SELECT c.id FROM community_deletion.communities c WHERE lower(c.host) = lower(@host::text)))
      AND community.deletion_state = 'active'
      AND community.deleted_at IS NULL
), inserted AS (
    INSERT INTO community_deletion.community_deletion_requests (community_id, community_host, requested_by, reason)
    SELECT target.id, target.host, @requested_by::text, sqlc.narg('reason')::text
    FROM target
    ON CONFLICT (community_id) WHERE stage <> 'aborted' DO NOTHING
    RETURNING *
)
SELECT inserted.*
FROM inserted
UNION ALL
SELECT request.*
FROM community_deletion.community_deletion_requests request
JOIN target ON target.id = request.community_id
WHERE request.stage = 'submitted'
  AND request.requested_by = @requested_by::text
  AND NOT EXISTS (SELECT 1 FROM inserted)
LIMIT 1;

-- name: DeletionRequestUnblock :one
-- Clears a block after an operator's remediation: the retry streak, the last
-- error and any expired lease go, and the request is due now.
UPDATE community_deletion.community_deletion_requests
SET blocked_at = NULL,
    blocked_reason = NULL,
    retry_count = 0,
    retry_stage = NULL,
    last_error = NULL,
    last_error_at = NULL,
    next_attempt_at = now(),
    lease_owner = NULL,
    lease_until = NULL
WHERE id = @id
  AND blocked_at IS NOT NULL
RETURNING *;
