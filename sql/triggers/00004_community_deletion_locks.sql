-- Advisory lock keys and the write-admission functions every guard shares.
--
-- Custom settings are read defensively: current_setting(name, true) is NULL in
-- a fresh session but '' after a transaction-local value was reset on the same
-- (pooled) connection. They are compared as text and never cast unchecked, and
-- every authorization test is written so that a NULL refuses.

-- +goose Up
-- +goose StatementBegin
-- The per-community advisory lock key. Writers take it shared for their whole
-- transaction; lifecycle transitions (quiesce, fence, abort) take it
-- exclusively. It must never change: a rolling deploy would otherwise run two
-- keys side by side and lose the exclusion between them.
CREATE OR REPLACE FUNCTION community_deletion_lock_key(community uuid) RETURNS bigint
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$ SELECT uuid_hash_extended(community, 7161958637654340729) $$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The deployment-global key that serializes migrations (exclusive, session
-- level) with destructive deletion stages (shared, transaction level). ASCII
-- "cdschema"; a documented constant that must never change.
CREATE OR REPLACE FUNCTION community_schema_destruction_lock_key() RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT 7161976178216365409::bigint $$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The deletion control plane: tables that survive a community purge.
CREATE OR REPLACE FUNCTION community_deletion_control_table(table_name text) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
        SELECT coalesce(table_name = ANY (ARRAY[
            'communities',
            'community_deletion_approvals',
            'community_deletion_checkpoints',
            'community_deletion_executor_heartbeats',
            'community_deletion_manifest_keys',
            'community_deletion_requests',
            'community_scoped_tables',
            'community_serving_write_leases',
            'storage_taxonomy_sweeps']), false)
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Tables that carry a community_id but no write fence: the control plane and
-- the registered 'nullify' tables, whose rows outlive the community.
CREATE OR REPLACE FUNCTION community_write_fence_excluded_table(table_name text) RETURNS boolean
    LANGUAGE sql STABLE
    AS $$
        SELECT community_deletion_control_table(table_name)
            OR EXISTS (
                SELECT 1 FROM community_scoped_tables registered
                WHERE registered.table_name = community_write_fence_excluded_table.table_name
                  AND registered.purge_action = 'nullify')
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Whether this transaction may write community data now. It admits a write
-- when the community is active; or when the transaction is the authorized
-- deletion executor (community_deletion.executor_community and
-- community_deletion.fence_generation name the community and its current fence
-- generation) while it is quiescing or fenced; or, while it is quiescing, when
-- the transaction carries a still-valid serving write lease of the community
-- (community_deletion.serving_write_lease_id, _owner, _generation and
-- _fence_generation). It takes no lock: callers take the shared community lock
-- first, in an earlier statement, so this read sees the latest committed state.
CREATE OR REPLACE FUNCTION community_write_allowed(community uuid) RETURNS boolean
    LANGUAGE plpgsql VOLATILE
    AS $$
DECLARE
    current_state text;
    current_generation bigint;
    lease_id text;
BEGIN
    SELECT c.deletion_state, c.deletion_fence_generation INTO current_state, current_generation
    FROM communities c WHERE c.id = community;
    IF current_state IS NULL THEN
        RETURN false;
    END IF;
    IF current_state = 'active' THEN
        RETURN true;
    END IF;
    IF current_state NOT IN ('quiescing', 'fenced') THEN
        RETURN false;
    END IF;
    IF coalesce(current_setting('community_deletion.executor_community', true), '') = community::text
       AND coalesce(current_setting('community_deletion.fence_generation', true), '') = current_generation::text THEN
        RETURN true;
    END IF;
    IF current_state <> 'quiescing' THEN
        RETURN false;
    END IF;
    lease_id := coalesce(current_setting('community_deletion.serving_write_lease_id', true), '');
    IF lease_id !~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' THEN
        RETURN false;
    END IF;
    RETURN EXISTS (
        SELECT 1 FROM community_serving_write_leases lease
        WHERE lease.id = lease_id::uuid
          AND lease.community_id = community
          AND lease.owner = coalesce(current_setting('community_deletion.serving_write_owner', true), '')
          AND lease.generation::text
              = coalesce(current_setting('community_deletion.serving_write_generation', true), '')
          AND lease.fence_generation::text
              = coalesce(current_setting('community_deletion.serving_write_fence_generation', true), '')
          AND lease.fence_generation = current_generation
          AND lease.lease_until >= clock_timestamp());
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The explicit write admission for code paths the fence trigger does not
-- cover (serving-lease acquisition, writes to excluded tables). It refuses
-- REPEATABLE READ and SERIALIZABLE with SQLSTATE 25000 before anything else
-- (a pinned snapshot could still see 'active' after the fence committed), then
-- takes the shared community lock until the transaction ends, then refuses
-- with SQLSTATE 55000 unless community_write_allowed() admits the write.
CREATE OR REPLACE FUNCTION assert_community_write_allowed(community uuid) RETURNS void
    LANGUAGE plpgsql VOLATILE
    AS $$
DECLARE
    state text;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION USING
            ERRCODE = '25000',
            MESSAGE = format('community write refused: isolation level %s pins a snapshot that cannot see the deletion fence',
                             current_setting('transaction_isolation')),
            HINT = 'Write community data in READ COMMITTED transactions.';
    END IF;
    PERFORM pg_advisory_xact_lock_shared(community_deletion_lock_key(community));
    IF community_write_allowed(community) IS NOT TRUE THEN
        SELECT c.deletion_state INTO state FROM communities c WHERE c.id = community;
        RAISE EXCEPTION USING
            ERRCODE = '55000',
            MESSAGE = format('community write refused: community %s is %s', community, coalesce(state, 'missing'));
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION assert_community_write_allowed(uuid);
DROP FUNCTION community_write_allowed(uuid);
DROP FUNCTION community_write_fence_excluded_table(text);
DROP FUNCTION community_deletion_control_table(text);
DROP FUNCTION community_schema_destruction_lock_key();
DROP FUNCTION community_deletion_lock_key(uuid);
