-- name: DeletionExecutorHeartbeatStop :execrows
-- Marks an executor stopped and draining, holding no request.
UPDATE community_deletion.community_deletion_executor_heartbeats
SET request_id = NULL,
    draining = true,
    heartbeat_at = now(),
    stopped_at = now()
WHERE executor_id = @executor_id;

-- name: DeletionExecutorHeartbeatUpsert :exec
-- Records an executor's liveness, its mode and the request it works on.
INSERT INTO community_deletion.community_deletion_executor_heartbeats (executor_id, mode, request_id, draining)
VALUES (@executor_id, @mode, @request_id, @draining)
ON CONFLICT (executor_id) DO UPDATE
SET mode = EXCLUDED.mode,
    request_id = EXCLUDED.request_id,
    heartbeat_at = now(),
    draining = EXCLUDED.draining,
    stopped_at = NULL;
