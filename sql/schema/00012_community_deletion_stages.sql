-- The deletion stages, defined once: their order in one immutable function,
-- the set a request's stage may take in one domain over it, and the
-- runnable stages (the ones an executor claims) in one immutable function
-- that the claim queries and their partial index share. lifecycle/stage.go
-- is the one Go definition; integration/stages_test.go proves they agree.

-- +goose Up
-- +goose StatementBegin
-- The stages of a deletion in the order a request moves through them;
-- aborted stands outside the order.
CREATE OR REPLACE FUNCTION community_deletion_stage_order() RETURNS text[]
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
        SELECT ARRAY['submitted', 'inventoried', 'approved', 'fenced', 'drained', 'bindings_removed',
                     'postgres_purged', 'cache_purged', 'logically_verified', 'retention_pending']
    $$;
-- +goose StatementEnd

CREATE DOMAIN community_deletion_stage AS text
    CONSTRAINT community_deletion_stage_check
    CHECK (VALUE = 'aborted' OR VALUE = ANY (community_deletion_stage_order()));

ALTER TABLE community_deletion_requests
    DROP CONSTRAINT community_deletion_requests_stage_check,
    DROP CONSTRAINT community_deletion_requests_retry_stage_check;
ALTER TABLE community_deletion_checkpoints
    DROP CONSTRAINT community_deletion_checkpoints_stage_check;
-- The claim index's predicate names the stage column: rebuilt below.
DROP INDEX community_deletion_requests_claimable_idx;
ALTER TABLE community_deletion_requests
    ALTER COLUMN stage TYPE community_deletion_stage,
    ALTER COLUMN retry_stage TYPE community_deletion_stage;
ALTER TABLE community_deletion_checkpoints
    ALTER COLUMN stage TYPE community_deletion_stage;

-- +goose StatementBegin
-- Whether an executor claims a request at stage: from approved to
-- logically_verified.
CREATE OR REPLACE FUNCTION community_deletion_stage_runnable(stage text) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
        SELECT coalesce(array_position(community_deletion_stage_order(), stage)
                        BETWEEN array_position(community_deletion_stage_order(), 'approved')
                            AND array_position(community_deletion_stage_order(), 'logically_verified'), false)
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The next stage of a request, or NULL for the terminal stages: the order's.
CREATE OR REPLACE FUNCTION community_deletion_next_stage(stage text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
        SELECT (community_deletion_stage_order())[array_position(community_deletion_stage_order(), stage) + 1]
    $$;
-- +goose StatementEnd

-- ClaimNext: runnable, unblocked requests in submission order.
CREATE INDEX community_deletion_requests_claimable_idx
    ON community_deletion_requests (created_at, id)
    WHERE blocked_at IS NULL AND community_deletion_stage_runnable(stage);

-- The order and runnable functions are installed functions like the rest.
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion_installed_functions() RETURNS text[]
    LANGUAGE sql IMMUTABLE
    AS $$
        SELECT ARRAY[
            'assert_community_write_allowed(uuid)',
            'attach_community_write_fence(regclass,text)',
            'community_deletion_catalog_drift()',
            'community_deletion_control_table(text)',
            'community_deletion_fenced(oid)',
            'community_deletion_function_digest(oid)',
            'community_deletion_guard_triggers()',
            'community_deletion_health()',
            'community_deletion_installed_functions()',
            'community_deletion_is_member(name)',
            'community_deletion_lock_holders(bigint)',
            'community_deletion_lock_key(uuid)',
            'community_deletion_next_stage(text)',
            'community_deletion_operators_share_role()',
            'community_deletion_register_table(regclass,text)',
            'community_deletion_require_member(name[],text)',
            'community_deletion_restore_active(uuid,timestamptz)',
            'community_deletion_seal_functions()',
            'community_deletion_stage_order()',
            'community_deletion_stage_runnable(text)',
            'community_deletion_step_authorized(uuid,text)',
            'community_deletion_unregister_table(text)',
            'community_schema_destruction_lock_key()',
            'community_write_allowed(uuid)',
            'community_write_fence_excluded_table(text)',
            'detach_community_write_fence(regclass)',
            'enforce_community_deletion_approval_guard()',
            'enforce_community_deletion_checkpoint_guard()',
            'enforce_community_deletion_manifest_key_guard()',
            'enforce_community_deletion_request_guard()',
            'enforce_community_deletion_settings_guard()',
            'enforce_community_scoped_table_guard()',
            'enforce_community_serving_write_lease_guard()',
            'enforce_community_tombstone()',
            'enforce_community_write_fence()',
            'refuse_community_deletion_truncate()'
        ]
    $$;
-- +goose StatementEnd

SELECT community_deletion_seal_functions();
GRANT EXECUTE ON FUNCTION community_deletion_stage_order(), community_deletion_stage_runnable(text),
    community_deletion_next_stage(text)
    TO community_deletion_serving, community_deletion_operator, community_deletion_executor;

-- +goose Down
DROP INDEX community_deletion_requests_claimable_idx;
ALTER TABLE community_deletion_checkpoints
    ALTER COLUMN stage TYPE text;
ALTER TABLE community_deletion_requests
    ALTER COLUMN stage TYPE text,
    ALTER COLUMN retry_stage TYPE text;
ALTER TABLE community_deletion_checkpoints
    ADD CONSTRAINT community_deletion_checkpoints_stage_check CHECK (stage IN (
        'submitted', 'inventoried', 'approved', 'fenced', 'drained', 'bindings_removed',
        'postgres_purged', 'cache_purged', 'logically_verified', 'retention_pending', 'aborted'));
ALTER TABLE community_deletion_requests
    ADD CONSTRAINT community_deletion_requests_stage_check CHECK (stage IN (
        'submitted', 'inventoried', 'approved', 'fenced', 'drained', 'bindings_removed',
        'postgres_purged', 'cache_purged', 'logically_verified', 'retention_pending', 'aborted')),
    ADD CONSTRAINT community_deletion_requests_retry_stage_check CHECK (retry_stage IN (
        'submitted', 'inventoried', 'approved', 'fenced', 'drained', 'bindings_removed',
        'postgres_purged', 'cache_purged', 'logically_verified', 'retention_pending', 'aborted'));
CREATE INDEX community_deletion_requests_claimable_idx
    ON community_deletion_requests (created_at, id)
    WHERE blocked_at IS NULL AND stage IN ('approved', 'fenced', 'drained', 'bindings_removed',
        'postgres_purged', 'cache_purged', 'logically_verified');
DROP DOMAIN community_deletion_stage;

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion_next_stage(stage text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
        SELECT CASE stage
            WHEN 'submitted' THEN 'inventoried'
            WHEN 'inventoried' THEN 'approved'
            WHEN 'approved' THEN 'fenced'
            WHEN 'fenced' THEN 'drained'
            WHEN 'drained' THEN 'bindings_removed'
            WHEN 'bindings_removed' THEN 'postgres_purged'
            WHEN 'postgres_purged' THEN 'cache_purged'
            WHEN 'cache_purged' THEN 'logically_verified'
            WHEN 'logically_verified' THEN 'retention_pending'
        END
    $$;
-- +goose StatementEnd
DROP FUNCTION community_deletion_stage_runnable(text);
DROP FUNCTION community_deletion_stage_order();
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion_installed_functions() RETURNS text[]
    LANGUAGE sql IMMUTABLE
    AS $$
        SELECT ARRAY[
            'assert_community_write_allowed(uuid)',
            'attach_community_write_fence(regclass,text)',
            'community_deletion_catalog_drift()',
            'community_deletion_control_table(text)',
            'community_deletion_fenced(oid)',
            'community_deletion_function_digest(oid)',
            'community_deletion_guard_triggers()',
            'community_deletion_health()',
            'community_deletion_installed_functions()',
            'community_deletion_is_member(name)',
            'community_deletion_lock_holders(bigint)',
            'community_deletion_lock_key(uuid)',
            'community_deletion_next_stage(text)',
            'community_deletion_operators_share_role()',
            'community_deletion_register_table(regclass,text)',
            'community_deletion_require_member(name[],text)',
            'community_deletion_restore_active(uuid,timestamptz)',
            'community_deletion_seal_functions()',
            'community_deletion_step_authorized(uuid,text)',
            'community_deletion_unregister_table(text)',
            'community_schema_destruction_lock_key()',
            'community_write_allowed(uuid)',
            'community_write_fence_excluded_table(text)',
            'detach_community_write_fence(regclass)',
            'enforce_community_deletion_approval_guard()',
            'enforce_community_deletion_checkpoint_guard()',
            'enforce_community_deletion_manifest_key_guard()',
            'enforce_community_deletion_request_guard()',
            'enforce_community_deletion_settings_guard()',
            'enforce_community_scoped_table_guard()',
            'enforce_community_serving_write_lease_guard()',
            'enforce_community_tombstone()',
            'enforce_community_write_fence()',
            'refuse_community_deletion_truncate()'
        ]
    $$;
-- +goose StatementEnd
SELECT community_deletion_seal_functions();
