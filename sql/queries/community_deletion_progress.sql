-- Read-only progress and health reports for operators (lifecycle/progress.go):
-- what inspect estimates from, and what deletionctl health prints.

-- name: ProgressPurgeUnits :many
-- The purge's working progress of a request, one row per unit
-- ('purge:<table>' or 'nullify:<table>'): rows so far, whether the table is
-- done, and when the row was last written, oldest first.
SELECT unit_key, row_count, done, updated_at
FROM community_deletion.community_deletion_purge_progress
WHERE request_id = @request_id
ORDER BY updated_at, unit_key;

-- name: ProgressChunkStamps :many
-- When each manifest key chunk of a request was stamped deleted, oldest
-- first (the chunks are dropped at logical verification).
SELECT chunk_no, coalesce(deleted_at, now())::timestamptz AS deleted_at
FROM community_deletion.community_deletion_manifest_keys
WHERE request_id = @request_id
  AND deleted_at IS NOT NULL
ORDER BY deleted_at, chunk_no;

-- name: ProgressDatabaseNow :one
-- The database clock, which every progress timestamp is on.
SELECT now()::timestamptz AS now;

-- name: HealthFindings :many
-- community_deletion_health(): prepared transactions holding an advisory
-- lock of the database, one row each.
-- (sqlc does not see the RETURNS TABLE columns, sqlc-dev/sqlc#3391: the
-- alias list names them and the casts type them.)
SELECT health.subject::text AS subject, health.problem::text AS problem, health.detail::text AS detail
FROM community_deletion.community_deletion_health() AS health (subject, problem, detail)
ORDER BY 1, 2, 3;
