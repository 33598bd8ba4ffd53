-- Adopts community deletion (docs/adopting.md) without rewriting a table,
-- adding a column or writing a mirror row: accounts is declared the tenant
-- table by its integer id, every table holding an account's rows is
-- attached by the account_id column it already has (integer or bigint,
-- NULL where the service writes rows of no account), the two tables that
-- reach an account only through ids the schema has no constraint for are
-- attached through declared references, and the storage layout says where
-- an account's files, display-id sequences and cache keys are. Runs after
-- the library's own migrations, as the role that owns these tables and the
-- deletion schema (the role that owns the per-account sequences, too).
--
-- Needs the tenant-key, child-table, declared-reference and layout API of
-- issue 22; it does not run against a library without it.

-- +goose Up
-- Attach waits for writers already in the table (SHARE ROW EXCLUSIVE);
-- fail fast and retry rather than queue every later writer behind it.
SET LOCAL lock_timeout = '5s';

-- First the tenant table: the fence refuses writes for an account that has
-- no lifecycle row, so the backfill comes before any other attach.
SELECT community_deletion.declare_tenant_table('accounts');

-- Tables keyed by account_id. Their keys are integer or bigint, which the
-- integer accounts.id admits; account_users and labels have a nullable key,
-- and email_templates really writes NULL: the installation's own templates,
-- rows of no account, which no deletion touches.
SELECT community_deletion.attach_community_write_fence('account_users', 'delete', 'account_id');
SELECT community_deletion.attach_community_write_fence('channel_api', 'delete', 'account_id');
SELECT community_deletion.attach_community_write_fence('inboxes', 'delete', 'account_id');
SELECT community_deletion.attach_community_write_fence('contacts', 'delete', 'account_id');
SELECT community_deletion.attach_community_write_fence('conversations', 'delete', 'account_id');
SELECT community_deletion.attach_community_write_fence('messages', 'delete', 'account_id');
SELECT community_deletion.attach_community_write_fence('attachments', 'delete', 'account_id');
SELECT community_deletion.attach_community_write_fence('labels', 'delete', 'account_id');
SELECT community_deletion.attach_community_write_fence('campaigns', 'delete', 'account_id');
SELECT community_deletion.attach_community_write_fence('email_templates', 'delete', 'account_id');

-- contact_inboxes has no account_id and no foreign key: it joins a contact
-- and an inbox by their ids, which the schema does not constrain. Declare
-- both references, then attach it through them.
SELECT community_deletion.declare_reference('contact_inboxes', ARRAY['contact_id'], 'contacts', ARRAY['id']);
SELECT community_deletion.declare_reference('contact_inboxes', ARRAY['inbox_id'], 'inboxes', ARRAY['id']);
SELECT community_deletion.attach_child_table('contact_inboxes');

-- ActiveStorage. An attachment row names its record polymorphically
-- (record_type, record_id); this service attaches blobs only to its own
-- attachments (record_type 'Attachment'), so record_id is a reference to
-- attachments.id. A blob is reached the other way round: by the foreign key
-- fk_rails_c3b3935057 that the attachment row holds to it; its key column
-- lists the account's objects (the layout below).
SELECT community_deletion.declare_reference('active_storage_attachments', ARRAY['record_id'], 'attachments', ARRAY['id']);
SELECT community_deletion.attach_child_table('active_storage_attachments');
SELECT community_deletion.attach_child_table('active_storage_blobs', referenced_by => ARRAY['active_storage_attachments'::regclass]);

-- Where an account's data lives outside its rows. Its files are the blobs
-- its rows list (random keys at the bucket's root, no prefix to declare);
-- its two display-id sequences are named after its id and created by
-- accounts_after_insert_row_tr as the migrating role, which owns this
-- schema too; its presence sets in Redis are keyed by its id.
-- The inventory (as an operator) and the executor read the keys.
GRANT SELECT (key) ON active_storage_blobs TO community_deletion_operator, community_deletion_executor;
INSERT INTO community_deletion.community_deletion_storage_layout (kind, template, reason) VALUES
    ('object_keys', 'public.active_storage_blobs.key', 'ActiveStorage files: random object keys listed in active_storage_blobs.key, reached through active_storage_attachments (Service.AttachFile)'),
    ('sequence', 'public.conv_dpid_seq_{tenant}', 'per-account conversation display ids (accounts_after_insert_row_tr)'),
    ('sequence', 'public.camp_dpid_seq_{tenant}', 'per-account campaign display ids (accounts_after_insert_row_tr)'),
    ('cache', 'ONLINE_PRESENCE::{tenant}::*', 'online presence sorted sets of an account (Service.SetOnline)');

-- The application's logins are members of community_deletion_serving (the
-- deployment grants that); the service grants its own tables and their id
-- sequences to the role. The per-account sequences need no grant: only the
-- triggers, running as their owner, use them.
GRANT SELECT, INSERT, UPDATE, DELETE ON accounts, users, account_users, channel_api, inboxes, contacts,
    contact_inboxes, conversations, messages, attachments, active_storage_blobs, active_storage_attachments,
    labels, campaigns, email_templates TO community_deletion_serving;
GRANT USAGE ON SEQUENCE accounts_id_seq, users_id_seq, account_users_id_seq, channel_api_id_seq, inboxes_id_seq,
    contacts_id_seq, contact_inboxes_id_seq, conversations_id_seq, messages_id_seq, attachments_id_seq,
    active_storage_blobs_id_seq, active_storage_attachments_id_seq, labels_id_seq, campaigns_id_seq,
    email_templates_id_seq TO community_deletion_serving;

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
