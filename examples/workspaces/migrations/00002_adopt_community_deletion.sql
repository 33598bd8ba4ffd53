-- Adopts community deletion (docs/adopting.md) without rewriting a table
-- or writing a row of the deletion schema from the service: workspaces is
-- declared the tenant table (the library keeps a lifecycle row per
-- workspace itself), every table holding a workspace's rows is attached by
-- its own workspace_id column, and the storage layout says where a
-- workspace's uploads and cache keys live. Runs after the library's own
-- migrations, as the role that owns these tables and the deletion schema.

-- +goose Up
-- Attach waits for writers already in the table (SHARE ROW EXCLUSIVE);
-- fail fast and retry rather than queue every later writer behind it.
SET LOCAL lock_timeout = '5s';

-- First the tenant table: the fence refuses writes for a workspace that
-- has no lifecycle row, so the backfill comes before any other attach.
SELECT community_deletion.declare_tenant_table('workspaces');

SELECT community_deletion.attach_community_write_fence('projects', 'delete', 'workspace_id');
SELECT community_deletion.attach_community_write_fence('comments', 'delete', 'workspace_id');
SELECT community_deletion.attach_community_write_fence('audit_log', 'nullify', 'workspace_id');
SELECT community_deletion.attach_community_write_fence('analytics.events', 'delete', 'workspace_id');

INSERT INTO community_deletion.community_deletion_storage_layout (kind, template, reason) VALUES
    ('objects', 'uploads/{tenant}/', 'files uploaded to a workspace (Service.Upload)'),
    ('cache', 'ws:{tenant}:*', 'cached values of a workspace (Service.Remember)');

-- The deletion roles reach the second schema; attach granted the tables.
GRANT USAGE ON SCHEMA analytics TO community_deletion_executor, community_deletion_operator;

-- The application's logins are members of community_deletion_serving (the
-- deployment grants that); the service grants its own tables to the role.
GRANT USAGE ON SCHEMA analytics TO community_deletion_serving;
GRANT SELECT, INSERT, UPDATE, DELETE ON workspaces, projects, comments, analytics.events TO community_deletion_serving;
GRANT SELECT, INSERT ON audit_log TO community_deletion_serving;

-- +goose Down
-- +goose StatementBegin
DO $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = '0A000',
        MESSAGE = 'rolling back the adoption of community deletion refused: its registry and storage layout are audit records; '
                  'detach each table with community_deletion.detach_community_write_fence and retire the layout templates by hand';
END
$$;
-- +goose StatementEnd
