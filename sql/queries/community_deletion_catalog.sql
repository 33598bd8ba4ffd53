-- name: CatalogDriftList :many
-- CatalogDriftList returns one row per difference between the live catalog
-- and community_scoped_tables; deletion treats any row as drift.
-- (sqlc does not see the RETURNS TABLE columns, sqlc-dev/sqlc#3391: the
-- alias list names them and the casts type them.)
SELECT drift.table_name::text AS table_name, drift.problem::text AS problem
FROM community_deletion_catalog_drift() AS drift (table_name, problem)
ORDER BY drift.table_name, drift.problem;

-- name: CommunityDeletionLockKey :one
SELECT community_deletion_lock_key(@community_id::uuid);

-- name: SchemaDestructionLockKey :one
SELECT community_schema_destruction_lock_key();
