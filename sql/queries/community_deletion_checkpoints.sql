-- name: DeletionCheckpointComplete :exec
-- Appends the completion of a unit; a unit completes once, so a repeated
-- completion (a step retried after its commit was lost) keeps the first.
-- attempts counts the unit's failures before it, plus this one.
INSERT INTO community_deletion.community_deletion_checkpoints
    (request_id, stage, unit_key, status, lease_generation, attempts, detail, completed_at)
SELECT @request_id, @stage::text, @unit_key, 'completed', @lease_generation,
       1 + count(*) FILTER (WHERE c.status = 'failed'), @detail, now()
FROM community_deletion.community_deletion_checkpoints c
WHERE c.request_id = @request_id AND c.stage = @stage::text AND c.unit_key = @unit_key
ON CONFLICT (request_id, stage, unit_key) WHERE status = 'completed' DO NOTHING;

-- name: DeletionCheckpointFail :exec
-- Appends a failure of a unit, numbered by its attempt.
INSERT INTO community_deletion.community_deletion_checkpoints
    (request_id, stage, unit_key, status, lease_generation, attempts, detail, error)
SELECT @request_id, @stage::text, @unit_key, 'failed', @lease_generation,
       1 + count(*) FILTER (WHERE c.status = 'failed'), @detail, @error
FROM community_deletion.community_deletion_checkpoints c
WHERE c.request_id = @request_id AND c.stage = @stage::text AND c.unit_key = @unit_key;

-- name: DeletionCheckpointGet :one
-- The newest checkpoint of a unit.
SELECT *
FROM community_deletion.community_deletion_checkpoints
WHERE request_id = @request_id AND stage = @stage AND unit_key = @unit_key
ORDER BY sequence DESC
LIMIT 1;

-- name: DeletionCheckpointInsertCompleted :exec
-- An audit checkpoint with a unique unit key (operator abort, unblock).
INSERT INTO community_deletion.community_deletion_checkpoints
    (request_id, stage, unit_key, status, lease_generation, detail, completed_at)
VALUES (@request_id, @stage, @unit_key, 'completed', @lease_generation, @detail, now());

-- name: DeletionCheckpointListByRequest :many
SELECT *
FROM community_deletion.community_deletion_checkpoints
WHERE request_id = @request_id
ORDER BY sequence;
