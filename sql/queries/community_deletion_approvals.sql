-- name: DeletionApprovalGetByRequest :one
SELECT *
FROM community_deletion_approvals
WHERE request_id = @request_id;

-- name: DeletionApprovalInsert :one
INSERT INTO community_deletion_approvals (request_id, community_id, inventory_digest, approved_by, note)
VALUES (@request_id, @community_id, @inventory_digest, @approved_by, sqlc.narg('note'))
RETURNING *;
