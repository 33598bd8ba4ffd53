-- name: CommunityScopedTableAttach :exec
SELECT community_deletion.attach_community_write_fence((@table_name::text)::regclass, @purge_action::text);

-- name: CommunityScopedTableList :many
SELECT *
FROM community_deletion.community_scoped_tables
ORDER BY table_name;
