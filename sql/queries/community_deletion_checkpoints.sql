-- name: DeletionCheckpointComplete :exec
INSERT INTO community_deletion_checkpoints
    (request_id, stage, unit_key, status, lease_generation, detail, completed_at)
VALUES (@request_id, @stage, @unit_key, 'completed', @lease_generation, @detail, now())
ON CONFLICT (request_id, stage, unit_key) DO UPDATE
SET status = 'completed',
    lease_generation = EXCLUDED.lease_generation,
    attempts = community_deletion_checkpoints.attempts + 1,
    detail = EXCLUDED.detail,
    error = NULL,
    completed_at = now();

-- name: DeletionCheckpointFail :exec
INSERT INTO community_deletion_checkpoints
    (request_id, stage, unit_key, status, lease_generation, detail, error)
VALUES (@request_id, @stage, @unit_key, 'failed', @lease_generation, @detail, @error)
ON CONFLICT (request_id, stage, unit_key) DO UPDATE
SET status = 'failed',
    lease_generation = EXCLUDED.lease_generation,
    attempts = community_deletion_checkpoints.attempts + 1,
    detail = EXCLUDED.detail,
    error = EXCLUDED.error,
    completed_at = NULL;

-- name: DeletionCheckpointGet :one
SELECT *
FROM community_deletion_checkpoints
WHERE request_id = @request_id AND stage = @stage AND unit_key = @unit_key;

-- name: DeletionCheckpointInsertCompleted :exec
-- An audit checkpoint with a unique unit key (operator abort, unblock).
INSERT INTO community_deletion_checkpoints
    (request_id, stage, unit_key, status, lease_generation, detail, completed_at)
VALUES (@request_id, @stage, @unit_key, 'completed', @lease_generation, @detail, now());

-- name: DeletionCheckpointListByRequest :many
SELECT *
FROM community_deletion_checkpoints
WHERE request_id = @request_id
ORDER BY sequence;
