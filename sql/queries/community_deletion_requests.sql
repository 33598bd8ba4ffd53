-- name: DeletionRequestAdvance :execrows
-- Moves a leased, unblocked request one stage forward and clears its retry
-- streak; fence_generation is set when given (the step to fenced).
UPDATE community_deletion_requests
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

-- name: DeletionRequestGet :one
SELECT *
FROM community_deletion_requests
WHERE id = @id;

-- name: DeletionRequestGetForUpdate :one
SELECT *
FROM community_deletion_requests
WHERE id = @id
FOR UPDATE;

-- name: DeletionRequestLeaseFenceValid :one
-- Whether a lease token is current at a stage under a fence generation: the
-- request is leased to it, unexpired, unblocked and approved, and the
-- community is fenced (or a tombstone) at that generation.
SELECT EXISTS (
    SELECT 1
    FROM community_deletion_requests request
    JOIN communities community ON community.id = request.community_id
    JOIN community_deletion_approvals approval ON approval.request_id = request.id
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
    FROM community_deletion_requests request
    JOIN community_deletion_approvals approval ON approval.request_id = request.id
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
