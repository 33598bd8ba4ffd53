-- name: CommunityScopedTableAttach :exec
SELECT attach_community_write_fence((@table_name::text)::regclass, @purge_action::text);

-- name: CommunityScopedTableList :many
SELECT *
FROM community_scoped_tables
ORDER BY table_name;
