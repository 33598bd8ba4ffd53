-- The tables of the real-schema tenant model (issue 22); the functions that
-- use them are migration 00026.
--
-- * communities.tenant_key: the service's own tenant key, as text, for a
--   tenant whose key is not a uuid (an integer or a text id). NULL means
--   the key is the community's id itself, as for every tenant before this
--   migration; no existing row changes. Migration 00026 checks that the id
--   of a keyed tenant is the name-based uuid of its key.
-- * community_deletion_requests.community_tenant_key: the key the request
--   targets, copied from its community when it is submitted and never
--   changed, like community_host; NULL for a uuid tenant.
-- * community_scoped_tables.key_kind ('uuid', 'integer' or 'text') and
--   parents: a table is registered either by a tenant key column of its own
--   (tenant_key, as before) or, without one, through its parents (parents:
--   the foreign keys or declared references to registered tables, resolved
--   to the tenant key at the root). A NULL key_kind is 'uuid'.
-- * community_deletion_references: references a schema has no constraint
--   for (GitLab's loose foreign keys), declared by the referencing table's
--   owner, so that a table can be attached through them and the drift
--   report can follow them.
--
-- Down refuses while any of this is in use.

-- +goose Up
ALTER TABLE community_deletion.communities ADD COLUMN tenant_key text;
COMMENT ON COLUMN community_deletion.communities.tenant_key IS
    'The service''s tenant key as text when it is not a uuid (an integer or text id of the declared tenant table); NULL when the key is id itself.';

ALTER TABLE community_deletion.community_deletion_requests ADD COLUMN community_tenant_key text;
COMMENT ON COLUMN community_deletion.community_deletion_requests.community_tenant_key IS
    'The tenant key of the targeted community when it is not its id (communities.tenant_key), copied at submission; never changes.';

ALTER TABLE community_deletion.community_scoped_tables ALTER COLUMN tenant_key DROP NOT NULL;
ALTER TABLE community_deletion.community_scoped_tables
    ADD COLUMN key_kind text,
    ADD COLUMN parents jsonb,
    ADD CONSTRAINT community_scoped_tables_key_kind_check CHECK (key_kind IN ('uuid', 'integer', 'text')),
    ADD CONSTRAINT community_scoped_tables_tenant_check CHECK (
        (tenant_key IS NOT NULL AND parents IS NULL)
        OR (tenant_key IS NULL AND jsonb_typeof(parents) = 'array' AND jsonb_array_length(parents) > 0
            AND purge_action = 'delete'));
COMMENT ON COLUMN community_deletion.community_scoped_tables.tenant_key IS
    'The column of the registered table that holds its tenant''s key, as attach_community_write_fence() was given it; NULL for a table attached through its parents.';
COMMENT ON COLUMN community_deletion.community_scoped_tables.key_kind IS
    'The kind of the tenant key: uuid, integer (smallint, integer or bigint) or text (text or varchar); NULL means uuid.';
COMMENT ON COLUMN community_deletion.community_scoped_tables.parents IS
    'For a table attached through its parents (attach_child_table()): each path from its columns through foreign keys or declared references to the tenant key of a table holding one.';

CREATE TABLE community_deletion.community_deletion_references (
    child_schema name NOT NULL,
    child_table name NOT NULL,
    child_columns name[] NOT NULL,
    parent_schema name NOT NULL,
    parent_table name NOT NULL,
    parent_columns name[] NOT NULL,
    reason text CHECK (reason IS NULL OR (btrim(reason) <> '' AND octet_length(reason) <= 1024)),
    declared_by name NOT NULL DEFAULT session_user,
    declared_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (child_schema, child_table, child_columns),
    CHECK (cardinality(child_columns) BETWEEN 1 AND 32 AND cardinality(child_columns) = cardinality(parent_columns))
);
COMMENT ON TABLE community_deletion.community_deletion_references IS
    'References a schema declares no foreign key for (declare_reference()), by the referencing table''s owner: attach_child_table() and the drift report follow them like foreign keys.';

-- The drift report, which every deletion role runs, reads it.
GRANT SELECT ON community_deletion.community_deletion_references
    TO community_deletion_serving, community_deletion_operator, community_deletion_executor;

CREATE TRIGGER community_deletion_references_truncate_guard BEFORE TRUNCATE ON community_deletion.community_deletion_references
    FOR EACH STATEMENT EXECUTE FUNCTION community_deletion.refuse_community_deletion_truncate();

-- +goose Down
-- +goose StatementBegin
DO $refuse$
BEGIN
    IF EXISTS (SELECT 1 FROM community_deletion.communities c WHERE c.tenant_key IS NOT NULL)
       OR EXISTS (SELECT 1 FROM community_deletion.community_deletion_requests r WHERE r.community_tenant_key IS NOT NULL) THEN
        RAISE EXCEPTION USING ERRCODE = '55000',
            MESSAGE = 'migration 00025 down refused: a tenant is keyed by an integer or text key, which earlier releases cannot represent; it cannot be undone';
    END IF;
    IF EXISTS (SELECT 1 FROM community_deletion.community_scoped_tables r
               WHERE r.tenant_key IS NULL OR r.key_kind IS DISTINCT FROM 'uuid' AND r.key_kind IS NOT NULL) THEN
        RAISE EXCEPTION USING ERRCODE = '55000',
            MESSAGE = 'migration 00025 down refused: a table is registered through its parents or by a key that is not a uuid, which earlier releases cannot read; detach it first';
    END IF;
    IF EXISTS (SELECT 1 FROM community_deletion.community_deletion_references) THEN
        RAISE EXCEPTION USING ERRCODE = '55000',
            MESSAGE = 'migration 00025 down refused: references are declared (community_deletion_references); drop them with community_deletion.drop_reference first';
    END IF;
END
$refuse$;
-- +goose StatementEnd

DROP TABLE community_deletion.community_deletion_references;
ALTER TABLE community_deletion.community_scoped_tables
    DROP CONSTRAINT community_scoped_tables_tenant_check,
    DROP CONSTRAINT community_scoped_tables_key_kind_check,
    DROP COLUMN parents,
    DROP COLUMN key_kind;
ALTER TABLE community_deletion.community_scoped_tables ALTER COLUMN tenant_key SET NOT NULL;
COMMENT ON COLUMN community_deletion.community_scoped_tables.tenant_key IS
    'The column of the registered table that holds its tenant''s id (uuid), as attach_community_write_fence() was given it.';
ALTER TABLE community_deletion.community_deletion_requests DROP COLUMN community_tenant_key;
ALTER TABLE community_deletion.communities DROP COLUMN tenant_key;
