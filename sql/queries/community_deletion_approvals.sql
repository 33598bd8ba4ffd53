-- name: DeletionApprovalGetByRequest :one
SELECT *
FROM community_deletion.community_deletion_approvals
WHERE request_id = @request_id;

-- name: DeletionApprovalInsert :one
-- The approval guard sets approved_at and grace_until on database time;
-- a NULL grace_period takes the deployment's default.
INSERT INTO community_deletion.community_deletion_approvals (request_id, community_id, inventory_digest, approved_by, note, grace_period)
VALUES (@request_id, @community_id, @inventory_digest, @approved_by, sqlc.narg('note'), sqlc.narg('grace_period')::interval)
RETURNING *;

-- name: DeletionApprovalGraceUntil :many
-- When the grace period of each of the given requests' approvals ends.
SELECT request_id, grace_until
FROM community_deletion.community_deletion_approvals
WHERE request_id = ANY (@request_ids::uuid[])
  AND grace_until IS NOT NULL;

-- name: DeletionRequestsInGrace :one
-- How many approved, unblocked requests wait for their grace period to end.
SELECT count(*)
FROM community_deletion.community_deletion_requests request
JOIN community_deletion.community_deletion_approvals approval ON approval.request_id = request.id
WHERE request.stage = 'approved'
  AND request.blocked_at IS NULL
  AND approval.grace_until > now();
