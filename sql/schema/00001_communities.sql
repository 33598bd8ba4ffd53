-- Communities (tenants) and the registry of tables that hold their data.

-- +goose Up
CREATE TABLE communities (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    host text NOT NULL,
    deletion_state text NOT NULL DEFAULT 'active',
    deletion_fence_generation bigint NOT NULL DEFAULT 0,
    archived_at timestamptz,
    deleted_at timestamptz,
    created_at timestamptz NOT NULL DEFAULT now(),
    -- Scrubbable profile columns: nulled when the community becomes a tombstone.
    signing_key bytea,
    icon text,
    CONSTRAINT communities_host_check CHECK (host <> '' AND host = btrim(host)),
    CONSTRAINT communities_deletion_state_check
        CHECK (deletion_state IN ('active', 'quiescing', 'fenced', 'tombstone')),
    CONSTRAINT communities_deletion_fence_generation_check CHECK (deletion_fence_generation >= 0),
    CONSTRAINT communities_tombstone_deleted_at_check
        CHECK ((deletion_state = 'tombstone') = (deleted_at IS NOT NULL)),
    CONSTRAINT communities_tombstone_scrubbed_check
        CHECK (deletion_state <> 'tombstone' OR (signing_key IS NULL AND icon IS NULL))
);

-- Tombstones keep their row, so a deleted host can never be taken again.
CREATE UNIQUE INDEX communities_host_lower_key ON communities (lower(host));

-- The tenant tables that whole-community deletion purges. A service that vendors
-- this schema registers each of its tenant tables here, in its own migration,
-- through attach_community_write_fence(). 'delete' tables lose the community's
-- rows; 'nullify' tables keep their rows as deployment-global evidence and have
-- community_id cleared.
CREATE TABLE community_scoped_tables (
    table_name text PRIMARY KEY,
    purge_action text NOT NULL DEFAULT 'delete',
    registered_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT community_scoped_tables_purge_action_check CHECK (purge_action IN ('delete', 'nullify')),
    CONSTRAINT community_scoped_tables_table_name_check CHECK (table_name <> '')
);

-- +goose Down
DROP TABLE community_scoped_tables;
DROP TABLE communities;
