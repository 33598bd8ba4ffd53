-- Adopts community deletion (docs/adopting.md) without rewriting a table,
-- adding a column or writing a mirror row: "Organization" is declared the
-- tenant table by its text id (a cuid), the few tables that carry
-- "organizationId" are attached by it, every table below them is attached
-- as a child through the foreign keys it has, and the two tables whose
-- references have no constraint are attached through declared references.
-- The partitioned "WebhookDelivery" is attached once, as its parent: the
-- partitions the service creates every day are fenced from the moment they
-- exist. Runs after the library's own migrations, as the role that owns
-- these tables and the deletion schema.
--
-- Needs the tenant-key, child-table, declared-reference and runtime
-- partition API of issue 22; it does not run against a library without it.

-- +goose Up
-- Attach waits for writers already in the table (SHARE ROW EXCLUSIVE);
-- fail fast and retry rather than queue every later writer behind it.
SET LOCAL lock_timeout = '5s';

-- First the tenant table: the fence refuses writes for an organization that
-- has no lifecycle row, so the backfill comes before any other attach.
SELECT community_deletion.declare_tenant_table('"Organization"', 'id');

-- The tables that carry the organization's id themselves.
SELECT community_deletion.attach_community_write_fence('"OrgMember"', 'delete', 'organizationId');
SELECT community_deletion.attach_community_write_fence('"Project"', 'delete', 'organizationId');
SELECT community_deletion.attach_community_write_fence('"RuntimeEnvironment"', 'delete', 'organizationId');
SELECT community_deletion.attach_community_write_fence('"WebhookEndpoint"', 'delete', 'organizationId');
SELECT community_deletion.attach_community_write_fence('"WebhookDelivery"', 'delete', 'organizationId');

-- Tables without an organization column, through every foreign key they
-- have to a registered table, parents first: one level below (workers,
-- queues, runs, tags, bulk actions), two (attempts; the implicit
-- many-to-many tables, each through both parents).
SELECT community_deletion.attach_child_table('"BackgroundWorker"');
SELECT community_deletion.attach_child_table('"TaskQueue"');
SELECT community_deletion.attach_child_table('"TaskRun"');
SELECT community_deletion.attach_child_table('"TaskRunTag"');
SELECT community_deletion.attach_child_table('"BulkActionGroup"');
SELECT community_deletion.attach_child_table('"TaskRunAttempt"');
SELECT community_deletion.attach_child_table('"_BackgroundWorkerToTaskQueue"');
SELECT community_deletion.attach_child_table('"_TaskRunToTaskRunTag"');

-- References the schema has no constraint for, declared in the manner of
-- GitLab's loose foreign keys, then attached through: a batch names its
-- environment, and a bulk-action item maps its group to the runs it acts
-- on. A batch's items are below the batch (and its runs) by foreign key.
SELECT community_deletion.declare_reference('"BatchTaskRun"', ARRAY['runtimeEnvironmentId'], '"RuntimeEnvironment"', ARRAY['id']);
SELECT community_deletion.attach_child_table('"BatchTaskRun"');
SELECT community_deletion.attach_child_table('"BatchTaskRunItem"');
SELECT community_deletion.declare_reference('"BulkActionItem"', ARRAY['groupId'], '"BulkActionGroup"', ARRAY['id']);
SELECT community_deletion.declare_reference('"BulkActionItem"', ARRAY['sourceRunId'], '"TaskRun"', ARRAY['id']);
SELECT community_deletion.attach_child_table('"BulkActionItem"');

-- Run payloads over a size are stored under the organization's prefix.
INSERT INTO community_deletion.community_deletion_storage_layout (kind, template, reason) VALUES
    ('objects', 'packets/{tenant}/', 'run payloads offloaded to the object store (Service.Trigger)');

-- The application's logins are members of community_deletion_serving (the
-- deployment grants that); the service grants its own tables, and its
-- partition manager, to the role.
GRANT SELECT, INSERT, UPDATE, DELETE ON "User", "Organization", "OrgMember", "Project", "RuntimeEnvironment",
    "BackgroundWorker", "TaskQueue", "_BackgroundWorkerToTaskQueue", "TaskRun", "TaskRunTag", "_TaskRunToTaskRunTag",
    "TaskRunAttempt", "BatchTaskRun", "BatchTaskRunItem", "BulkActionGroup", "BulkActionItem", "WebhookEndpoint",
    "WebhookDelivery" TO community_deletion_serving;
GRANT EXECUTE ON FUNCTION create_webhook_delivery_partition(date) TO community_deletion_serving;

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
