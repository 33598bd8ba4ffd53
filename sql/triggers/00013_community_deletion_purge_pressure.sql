-- What the batched purge waits for between batches: streaming replicas
-- that fall behind, and anti-wraparound autovacuum on a table it purges.

-- +goose Up
-- +goose StatementBegin
-- The pressure on the database a purge should yield to, in one row: how
-- many streaming replicas are attached, the largest replay lag they report
-- (NULL when none reports one: an idle, caught-up replica does not), the
-- most WAL bytes one has yet to replay, and the registered tables (or their
-- partitions) an autovacuum is vacuuming to prevent transaction ID
-- wraparound. SECURITY DEFINER: pg_stat_replication and other sessions'
-- activity are visible in full only to privileged roles (the schema's owner
-- should be a superuser or a member of pg_monitor for this to see them).
CREATE OR REPLACE FUNCTION community_deletion_purge_pressure()
    RETURNS TABLE (replicas integer, replay_lag interval, replay_bytes bigint, wraparound_tables text[])
    LANGUAGE sql STABLE SECURITY DEFINER
    AS $$
        SELECT (SELECT count(*)::integer FROM pg_stat_replication),
               (SELECT max(r.replay_lag) FROM pg_stat_replication r),
               (SELECT max(pg_wal_lsn_diff(pg_current_wal_lsn(), r.replay_lsn))::bigint FROM pg_stat_replication r),
               ARRAY(
                   SELECT DISTINCT registered.table_name
                   FROM pg_stat_progress_vacuum v
                   JOIN pg_stat_activity a ON a.pid = v.pid
                   JOIN pg_class c ON c.oid = coalesce(pg_partition_root(v.relid), v.relid)
                   JOIN community_scoped_tables registered ON registered.table_name = c.relname
                       AND c.relnamespace = (SELECT h.relnamespace FROM pg_class h WHERE h.oid = 'communities'::regclass)
                   WHERE v.datname = current_database()
                     AND a.backend_type = 'autovacuum worker'
                     AND a.query LIKE '%(to prevent wraparound)%'
                   ORDER BY 1)
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
GRANT EXECUTE ON FUNCTION community_deletion_purge_pressure() TO community_deletion_executor, community_deletion_operator;

-- +goose Down
DROP FUNCTION community_deletion_purge_pressure();
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
