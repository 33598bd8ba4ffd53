-- A first slice of a trust boundary of the project's own: the database
-- itself proves, at the step that makes a community a tombstone, that no
-- registered table still holds a row of it.
--
-- communities_tombstone_proof fires after communities_tombstone_guard (BEFORE
-- triggers fire in name order) on the step to 'tombstone'. Its function is
-- SECURITY INVOKER, so it reads the tenant tables as the role taking the
-- step: the executor, which attach_community_write_fence grants SELECT on
-- every registered table (a role without it is refused by the permission
-- check itself), and with row_security off, so a policy that would hide a
-- row from that role is an error (42501), never a silent skip. The step to
-- postgres_purged needs the tombstone (enforce_community_deletion_request_guard),
-- so it is proven too.
--
-- Down drops the trigger and its function and restores the lists they were
-- added to.

-- +goose Up
-- +goose StatementBegin
-- Refuses (55000) the step that makes a community a tombstone while any
-- registered table, 'delete' or 'nullify', holds a row carrying its id: one
-- bounded EXISTS per registered table, on its community_id, through names
-- qualified from the catalog, with row_security off.
CREATE OR REPLACE FUNCTION enforce_community_tombstone_proof() RETURNS trigger
    LANGUAGE plpgsql
    SET row_security = off
    AS $$
DECLARE
    registered record;
    remains boolean;
BEGIN
    IF TG_OP <> 'UPDATE' OR NEW.deletion_state IS DISTINCT FROM 'tombstone'
       OR OLD.deletion_state IS NOT DISTINCT FROM 'tombstone' THEN
        RETURN NEW;
    END IF;
    FOR registered IN
        SELECT r.table_name, r.purge_action, n.nspname, c.relname
        FROM community_scoped_tables r
        JOIN pg_class c ON c.relname = r.table_name
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE c.relnamespace = (SELECT home.relnamespace FROM pg_class home WHERE home.oid = 'communities'::regclass)
          AND c.relkind IN ('r', 'p') AND NOT c.relispartition
        ORDER BY r.purge_action, r.table_name
    LOOP
        EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I.%I t WHERE t.community_id OPERATOR(pg_catalog.=) $1)',
                       registered.nspname, registered.relname)
            INTO remains USING OLD.id;
        IF remains THEN
            RAISE EXCEPTION USING ERRCODE = '55000',
                MESSAGE = format('tombstone of community %s refused: registered %s table %s still holds its rows; purge them first',
                                 OLD.id, registered.purge_action, registered.table_name);
        END IF;
    END LOOP;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER communities_tombstone_proof BEFORE UPDATE ON communities
    FOR EACH ROW EXECUTE FUNCTION enforce_community_tombstone_proof();

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion_guard_triggers() RETURNS TABLE(table_name text, trigger_name text, function_signature text)
    LANGUAGE sql IMMUTABLE
    AS $$
        VALUES
            ('communities', 'communities_tombstone_guard', 'enforce_community_tombstone()'),
            ('communities', 'communities_tombstone_proof', 'enforce_community_tombstone_proof()'),
            ('communities', 'communities_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('community_deletion_requests', 'community_deletion_requests_guard', 'enforce_community_deletion_request_guard()'),
            ('community_deletion_requests', 'community_deletion_requests_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('community_deletion_approvals', 'community_deletion_approvals_guard', 'enforce_community_deletion_approval_guard()'),
            ('community_deletion_approvals', 'community_deletion_approvals_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('community_deletion_checkpoints', 'community_deletion_checkpoints_guard', 'enforce_community_deletion_checkpoint_guard()'),
            ('community_deletion_checkpoints', 'community_deletion_checkpoints_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('community_deletion_manifest_keys', 'community_deletion_manifest_keys_guard', 'enforce_community_deletion_manifest_key_guard()'),
            ('community_deletion_manifest_keys', 'community_deletion_manifest_keys_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('community_serving_write_leases', 'community_serving_write_leases_guard', 'enforce_community_serving_write_lease_guard()'),
            ('community_serving_write_leases', 'community_serving_write_leases_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('community_scoped_tables', 'community_scoped_tables_guard', 'enforce_community_scoped_table_guard()'),
            ('community_scoped_tables', 'community_scoped_tables_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('community_deletion_settings', 'community_deletion_settings_guard', 'enforce_community_deletion_settings_guard()'),
            ('community_deletion_settings', 'community_deletion_settings_truncate_guard', 'refuse_community_deletion_truncate()')
    $$;
-- +goose StatementEnd

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
            'community_deletion_purge_pressure()',
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
            'enforce_community_tombstone_proof()',
            'enforce_community_write_fence()',
            'refuse_community_deletion_truncate()'
        ]
    $$;
-- +goose StatementEnd

SELECT community_deletion_seal_functions();

-- +goose Down
DROP TRIGGER communities_tombstone_proof ON communities;
DROP FUNCTION enforce_community_tombstone_proof();
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion_guard_triggers() RETURNS TABLE(table_name text, trigger_name text, function_signature text)
    LANGUAGE sql IMMUTABLE
    AS $$
        VALUES
            ('communities', 'communities_tombstone_guard', 'enforce_community_tombstone()'),
            ('communities', 'communities_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('community_deletion_requests', 'community_deletion_requests_guard', 'enforce_community_deletion_request_guard()'),
            ('community_deletion_requests', 'community_deletion_requests_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('community_deletion_approvals', 'community_deletion_approvals_guard', 'enforce_community_deletion_approval_guard()'),
            ('community_deletion_approvals', 'community_deletion_approvals_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('community_deletion_checkpoints', 'community_deletion_checkpoints_guard', 'enforce_community_deletion_checkpoint_guard()'),
            ('community_deletion_checkpoints', 'community_deletion_checkpoints_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('community_deletion_manifest_keys', 'community_deletion_manifest_keys_guard', 'enforce_community_deletion_manifest_key_guard()'),
            ('community_deletion_manifest_keys', 'community_deletion_manifest_keys_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('community_serving_write_leases', 'community_serving_write_leases_guard', 'enforce_community_serving_write_lease_guard()'),
            ('community_serving_write_leases', 'community_serving_write_leases_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('community_scoped_tables', 'community_scoped_tables_guard', 'enforce_community_scoped_table_guard()'),
            ('community_scoped_tables', 'community_scoped_tables_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('community_deletion_settings', 'community_deletion_settings_guard', 'enforce_community_deletion_settings_guard()'),
            ('community_deletion_settings', 'community_deletion_settings_truncate_guard', 'refuse_community_deletion_truncate()')
    $$;
-- +goose StatementEnd
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
            'community_deletion_purge_pressure()',
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
