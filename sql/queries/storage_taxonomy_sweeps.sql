-- name: StorageTaxonomySweepGetLatest :one
-- The sweep that completed last. Served by storage_taxonomy_sweeps_completed_idx.
SELECT *
FROM community_deletion.storage_taxonomy_sweeps
ORDER BY completed_at DESC, id DESC
LIMIT 1;

-- name: StorageTaxonomySweepInsert :one
-- Records a completed sweep. Completion is clock_timestamp(); a start up to
-- five minutes in the database's future is clamped to it, a later one
-- inserts nothing.
INSERT INTO community_deletion.storage_taxonomy_sweeps
    (started_at, completed_at, listed_objects, unknown_object_count, unknown_key_sample, object_cap)
SELECT LEAST(@started_at::timestamptz, clock.db_now),
       clock.db_now,
       @listed_objects::bigint,
       @unknown_object_count::bigint,
       @unknown_key_sample::jsonb,
       @object_cap::bigint
FROM (SELECT clock_timestamp() AS db_now) clock
WHERE @started_at::timestamptz <= clock.db_now + interval '5 minutes'
RETURNING *;
