-- The drain and the check of it read one list of the tables with a bound
-- fence, and a drain that gives up names only this database's writers.
--
-- Migration 00035 wrote the query for the tables whose statement fence has
-- the dormant path twice: in community_deletion_fence_drain(), which locks
-- them, and in community_deletion_fence_undrained(), which the arming
-- trigger runs to refuse a quiesce that did not lock them all. Were the two
-- to drift apart, every first quiesce would be refused, or one would be let
-- through without a table drained; both now read
-- community_deletion_fence_bound_tables(). When the drain gave up, its
-- DETAIL listed the sessions holding a lock on a relation of the table's
-- oid in any database (pg_locks shows the whole cluster), so a session of
-- another database whose table had the same oid could be named; it now
-- lists this database's. What is locked and checked is unchanged. The DDL
-- guard keeps its own copy of the query, as before: it calls none of the
-- schema owner's code. Down puts both functions back as 00035 left them
-- and drops the new one.

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION community_deletion.community_deletion_fence_bound_tables() RETURNS SETOF oid
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
    AS $$
        -- The tables whose statement fence is bound (three arguments), so
        -- has the dormant path: each partition with a fence of its own.
        SELECT DISTINCT t.tgrelid FROM pg_trigger t
        WHERE t.tgfoid = 'enforce_community_write_fence()'::regprocedure
          AND t.tgnargs = 3 AND NOT t.tgisinternal
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_fence_undrained() RETURNS text
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
    AS $$
        -- The tables with a bound statement fence (the dormant path) that
        -- this transaction does not hold in SHARE mode or stronger, the
        -- first five by name.
        SELECT string_agg(u.name, ', ' ORDER BY u.name)
        FROM (SELECT b.relid::regclass::text AS name
              FROM community_deletion_fence_bound_tables() b (relid)
              WHERE NOT EXISTS (
                  SELECT 1 FROM pg_locks l
                  WHERE l.locktype = 'relation' AND l.relation = b.relid AND l.granted
                    AND l.pid = pg_backend_pid()
                    AND l.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())
                    AND l.mode IN ('ShareLock', 'ShareRowExclusiveLock', 'ExclusiveLock', 'AccessExclusiveLock'))
              ORDER BY 1 LIMIT 5) u
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_fence_drain() RETURNS integer
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
    SET lock_timeout TO '250ms'
    AS $$
DECLARE
    target regclass;
    drained integer := 0;
    holders text;
BEGIN
    -- Runs as its caller (the executor, who may lock the tables it purges).
    -- Armed already: its arming drained, and writers read the marker.
    IF NOT community_deletion_fence_dormant() THEN
        RETURN 0;
    END IF;
    -- Each table whose fence has the dormant path, a partition through its
    -- root (LOCK TABLE recurses). The wait for each lock is short, so that
    -- a writer queued behind a lock taken here, holding another table this
    -- drain needs, is released by this lock_timeout rather than aborted by
    -- its deadlock_timeout.
    FOR target IN
        SELECT DISTINCT coalesce(pg_partition_root(b.relid), b.relid)::regclass
        FROM community_deletion_fence_bound_tables() b (relid)
        ORDER BY 1
    LOOP
        BEGIN
            EXECUTE format('LOCK TABLE %s IN SHARE MODE', target);
        EXCEPTION WHEN lock_not_available THEN
            SELECT string_agg(CASE WHEN h.pid IS NULL THEN 'a prepared transaction'
                                   ELSE format('pid %s (%s)', h.pid, a.usename) END, ', ' ORDER BY h.pid)
            INTO holders
            FROM (SELECT DISTINCT l.pid FROM pg_locks l
                  WHERE l.locktype = 'relation' AND l.granted AND l.relation = target
                    AND l.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())
                    AND l.mode IN ('RowExclusiveLock', 'ShareUpdateExclusiveLock', 'ShareRowExclusiveLock',
                                   'ExclusiveLock', 'AccessExclusiveLock')
                  ORDER BY 1 LIMIT 5) h
            LEFT JOIN pg_stat_activity a ON a.pid = h.pid;
            RAISE EXCEPTION USING ERRCODE = '55P03',
                MESSAGE = format('write fence drain of %s gave up after %s, changing nothing: writes the dormant fence admitted still hold it',
                                 target, current_setting('lock_timeout')),
                DETAIL = coalesce('held by ' || holders, 'its holders are not known'),
                HINT = 'Retry once those transactions end.',
                SCHEMA = (SELECT n.nspname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = target),
                TABLE = (SELECT c.relname::text FROM pg_class c WHERE c.oid = target);
        END;
        drained := drained + 1;
    END LOOP;
    RETURN drained;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_installed_functions() RETURNS text[]
    LANGUAGE sql IMMUTABLE
    SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
    AS $$
        SELECT ARRAY[
            'assert_community_write_allowed(uuid)',
            'assert_tenant_write_allowed(text)',
            'attach_child_table(regclass,regclass[],regclass[])',
            'attach_community_write_fence(regclass,text,name)',
            'community_deletion_attach_row_fence(regclass,text,text[])',
            'community_deletion_bound_args(text[])',
            'community_deletion_catalog_drift()',
            'community_deletion_catalog_drift_of_copies()',
            'community_deletion_catalog_drift_of_tables()',
            'community_deletion_catalog_notes()',
            'community_deletion_child_paths(oid,oid[],oid[])',
            'community_deletion_child_spec(regclass,regclass[],regclass[])',
            'community_deletion_code_digest(oid,text,name)',
            'community_deletion_code_functions(oid,oid)',
            'community_deletion_control_digest(text)',
            'community_deletion_control_table(text)',
            'community_deletion_dangling_query(text,text[])',
            'community_deletion_default_grace_period()',
            'community_deletion_drop_tenant_objects(uuid)',
            'community_deletion_expected_fence_args(oid,text,name,text,jsonb)',
            'community_deletion_fence_admit(uuid[],text)',
            'community_deletion_fence_args(name,text,jsonb)',
            'community_deletion_fence_armed()',
            'community_deletion_fence_bit(uuid)',
            'community_deletion_fence_bound_tables()',
            'community_deletion_fence_bound(oid,name,jsonb)',
            'community_deletion_fence_context(oid,name,regprocedure,text,boolean,boolean)',
            'community_deletion_fence_dormant()',
            'community_deletion_fence_drain()',
            'community_deletion_fence_marker_holders()',
            'community_deletion_fence_marker_lock()',
            'community_deletion_fence_query(text,text[])',
            'community_deletion_fence_set_armed(boolean)',
            'community_deletion_fence_undrained()',
            'community_deletion_fenced(oid,name)',
            'community_deletion_first_steps(jsonb,boolean)',
            'community_deletion_function_digest(oid)',
            'community_deletion_guard_context(oid,name,boolean,text)',
            'community_deletion_guard_digest(text,text)',
            'community_deletion_guard_triggers()',
            'community_deletion_health()',
            'community_deletion_installed_functions()',
            'community_deletion_is_member(name)',
            'community_deletion_kept_row_args(name,text)',
            'community_deletion_kept_row_fenced(oid,name)',
            'community_deletion_key_cast(text)',
            'community_deletion_key_kind(regtype)',
            'community_deletion_lock_holders(bigint)',
            'community_deletion_lock_key(uuid)',
            'community_deletion_next_stage(text)',
            'community_deletion_operators_share_role()',
            'community_deletion_path_keys(jsonb,jsonb)',
            'community_deletion_protection_state(uuid)',
            'community_deletion_purge_pressure()',
            'community_deletion_receipt_chain_head()',
            'community_deletion_record_tenant_table(regclass,name,text[])',
            'community_deletion_register_child_table(regclass,jsonb)',
            'community_deletion_register_table(regclass,text,name)',
            'community_deletion_require_member(name[],text)',
            'community_deletion_restore_active(uuid,timestamptz)',
            'community_deletion_row_fenced(oid,regprocedure,text[],boolean)',
            'community_deletion_seal_functions()',
            'community_deletion_settle_fence_marker()',
            'community_deletion_stage_order()',
            'community_deletion_stage_runnable(text)',
            'community_deletion_statement_fenced(oid,regprocedure,text[])',
            'community_deletion_step_authorized(uuid,text)',
            'community_deletion_table_code(oid)',
            'community_deletion_table_references(oid)',
            'community_deletion_tenant_filter(name,name,text)',
            'community_deletion_tenant_id(text)',
            'community_deletion_tenant_key_kind()',
            'community_deletion_tenant_object_name(text,text)',
            'community_deletion_tenant_object_parts(text)',
            'community_deletion_tenant_schema(oid)',
            'community_deletion_tenant_uuid(text)',
            'community_deletion_trigger_args(text[])',
            'community_deletion_unregister_table(name,name)',
            'community_deletion_untrusted_code(regclass)',
            'community_schema_destruction_lock_key()',
            'community_write_allowed(uuid)',
            'community_write_fence_excluded_table(text)',
            'declare_reference(regclass,name[],regclass,name[],text)',
            'declare_tenant_table(regclass,name)',
            'detach_community_write_fence(regclass)',
            'drop_reference(regclass,name[])',
            'enforce_community_deletion_approval_guard()',
            'enforce_community_deletion_checkpoint_guard()',
            'enforce_community_deletion_exclusion_guard()',
            'enforce_community_deletion_grace_fence()',
            'enforce_community_deletion_grace_period()',
            'enforce_community_deletion_manifest_key_guard()',
            'enforce_community_deletion_protection_guard()',
            'enforce_community_deletion_protection_submit()',
            'enforce_community_deletion_receipt_guard()',
            'enforce_community_deletion_receipt_key_guard()',
            'enforce_community_deletion_receipt_required()',
            'enforce_community_deletion_reference_guard()',
            'enforce_community_deletion_request_guard()',
            'enforce_community_deletion_settings_guard()',
            'enforce_community_deletion_storage_layout_guard()',
            'enforce_community_deletion_tenant_table_guard()',
            'enforce_community_deletion_trusted_code_guard()',
            'enforce_community_fence_marker_arm()',
            'enforce_community_kept_row_fence()',
            'enforce_community_kept_row_fence_row()',
            'enforce_community_scoped_table_guard()',
            'enforce_community_serving_write_lease_guard()',
            'enforce_community_tenant_created()',
            'enforce_community_tenant_key_guard()',
            'enforce_community_tenant_objects_proof()',
            'enforce_community_tombstone()',
            'enforce_community_tombstone_proof()',
            'enforce_community_truncate_fence()',
            'enforce_community_write_fence()',
            'enforce_community_write_fence_row()',
            'exclude_table(regclass,text)',
            'include_table(regclass,text)',
            'refuse_community_deletion_truncate()'
        ]
    $$;
-- +goose StatementEnd
SELECT community_deletion.community_deletion_seal_functions();
-- The executor's drain reads the list as its caller.
GRANT EXECUTE ON FUNCTION community_deletion.community_deletion_fence_bound_tables() TO community_deletion_executor;

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_fence_undrained() RETURNS text
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
    AS $$
        -- The tables with a bound statement fence (the dormant path) that
        -- this transaction does not hold in SHARE mode or stronger, the
        -- first five by name.
        SELECT string_agg(u.name, ', ' ORDER BY u.name)
        FROM (SELECT b.relid::regclass::text AS name
              FROM (SELECT DISTINCT t.tgrelid AS relid FROM pg_trigger t
                    WHERE t.tgfoid = 'enforce_community_write_fence()'::regprocedure
                      AND t.tgnargs = 3 AND NOT t.tgisinternal) b
              WHERE NOT EXISTS (
                  SELECT 1 FROM pg_locks l
                  WHERE l.locktype = 'relation' AND l.relation = b.relid AND l.granted
                    AND l.pid = pg_backend_pid()
                    AND l.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())
                    AND l.mode IN ('ShareLock', 'ShareRowExclusiveLock', 'ExclusiveLock', 'AccessExclusiveLock'))
              ORDER BY 1 LIMIT 5) u
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_fence_drain() RETURNS integer
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
    SET lock_timeout TO '250ms'
    AS $$
DECLARE
    target regclass;
    drained integer := 0;
    holders text;
BEGIN
    -- Runs as its caller (the executor, who may lock the tables it purges).
    -- Armed already: its arming drained, and writers read the marker.
    IF NOT community_deletion_fence_dormant() THEN
        RETURN 0;
    END IF;
    -- Each table whose fence has the dormant path, a partition through its
    -- root (LOCK TABLE recurses). The wait for each lock is short, so that
    -- a writer queued behind a lock taken here, holding another table this
    -- drain needs, is released by this lock_timeout rather than aborted by
    -- its deadlock_timeout.
    FOR target IN
        SELECT DISTINCT coalesce(pg_partition_root(t.tgrelid), t.tgrelid)::regclass
        FROM pg_trigger t
        WHERE t.tgfoid = 'enforce_community_write_fence()'::regprocedure AND t.tgnargs = 3 AND NOT t.tgisinternal
        ORDER BY 1
    LOOP
        BEGIN
            EXECUTE format('LOCK TABLE %s IN SHARE MODE', target);
        EXCEPTION WHEN lock_not_available THEN
            SELECT string_agg(CASE WHEN h.pid IS NULL THEN 'a prepared transaction'
                                   ELSE format('pid %s (%s)', h.pid, a.usename) END, ', ' ORDER BY h.pid)
            INTO holders
            FROM (SELECT DISTINCT l.pid FROM pg_locks l
                  WHERE l.locktype = 'relation' AND l.granted AND l.relation = target
                    AND l.mode IN ('RowExclusiveLock', 'ShareUpdateExclusiveLock', 'ShareRowExclusiveLock',
                                   'ExclusiveLock', 'AccessExclusiveLock')
                  ORDER BY 1 LIMIT 5) h
            LEFT JOIN pg_stat_activity a ON a.pid = h.pid;
            RAISE EXCEPTION USING ERRCODE = '55P03',
                MESSAGE = format('write fence drain of %s gave up after %s, changing nothing: writes the dormant fence admitted still hold it',
                                 target, current_setting('lock_timeout')),
                DETAIL = coalesce('held by ' || holders, 'its holders are not known'),
                HINT = 'Retry once those transactions end.',
                SCHEMA = (SELECT n.nspname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = target),
                TABLE = (SELECT c.relname::text FROM pg_class c WHERE c.oid = target);
        END;
        drained := drained + 1;
    END LOOP;
    RETURN drained;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_installed_functions() RETURNS text[]
    LANGUAGE sql IMMUTABLE
    SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
    AS $$
        SELECT ARRAY[
            'assert_community_write_allowed(uuid)',
            'assert_tenant_write_allowed(text)',
            'attach_child_table(regclass,regclass[],regclass[])',
            'attach_community_write_fence(regclass,text,name)',
            'community_deletion_attach_row_fence(regclass,text,text[])',
            'community_deletion_bound_args(text[])',
            'community_deletion_catalog_drift()',
            'community_deletion_catalog_drift_of_copies()',
            'community_deletion_catalog_drift_of_tables()',
            'community_deletion_catalog_notes()',
            'community_deletion_child_paths(oid,oid[],oid[])',
            'community_deletion_child_spec(regclass,regclass[],regclass[])',
            'community_deletion_code_digest(oid,text,name)',
            'community_deletion_code_functions(oid,oid)',
            'community_deletion_control_digest(text)',
            'community_deletion_control_table(text)',
            'community_deletion_dangling_query(text,text[])',
            'community_deletion_default_grace_period()',
            'community_deletion_drop_tenant_objects(uuid)',
            'community_deletion_expected_fence_args(oid,text,name,text,jsonb)',
            'community_deletion_fence_admit(uuid[],text)',
            'community_deletion_fence_args(name,text,jsonb)',
            'community_deletion_fence_armed()',
            'community_deletion_fence_bit(uuid)',
            'community_deletion_fence_bound(oid,name,jsonb)',
            'community_deletion_fence_context(oid,name,regprocedure,text,boolean,boolean)',
            'community_deletion_fence_dormant()',
            'community_deletion_fence_drain()',
            'community_deletion_fence_marker_holders()',
            'community_deletion_fence_marker_lock()',
            'community_deletion_fence_query(text,text[])',
            'community_deletion_fence_set_armed(boolean)',
            'community_deletion_fence_undrained()',
            'community_deletion_fenced(oid,name)',
            'community_deletion_first_steps(jsonb,boolean)',
            'community_deletion_function_digest(oid)',
            'community_deletion_guard_context(oid,name,boolean,text)',
            'community_deletion_guard_digest(text,text)',
            'community_deletion_guard_triggers()',
            'community_deletion_health()',
            'community_deletion_installed_functions()',
            'community_deletion_is_member(name)',
            'community_deletion_kept_row_args(name,text)',
            'community_deletion_kept_row_fenced(oid,name)',
            'community_deletion_key_cast(text)',
            'community_deletion_key_kind(regtype)',
            'community_deletion_lock_holders(bigint)',
            'community_deletion_lock_key(uuid)',
            'community_deletion_next_stage(text)',
            'community_deletion_operators_share_role()',
            'community_deletion_path_keys(jsonb,jsonb)',
            'community_deletion_protection_state(uuid)',
            'community_deletion_purge_pressure()',
            'community_deletion_receipt_chain_head()',
            'community_deletion_record_tenant_table(regclass,name,text[])',
            'community_deletion_register_child_table(regclass,jsonb)',
            'community_deletion_register_table(regclass,text,name)',
            'community_deletion_require_member(name[],text)',
            'community_deletion_restore_active(uuid,timestamptz)',
            'community_deletion_row_fenced(oid,regprocedure,text[],boolean)',
            'community_deletion_seal_functions()',
            'community_deletion_settle_fence_marker()',
            'community_deletion_stage_order()',
            'community_deletion_stage_runnable(text)',
            'community_deletion_statement_fenced(oid,regprocedure,text[])',
            'community_deletion_step_authorized(uuid,text)',
            'community_deletion_table_code(oid)',
            'community_deletion_table_references(oid)',
            'community_deletion_tenant_filter(name,name,text)',
            'community_deletion_tenant_id(text)',
            'community_deletion_tenant_key_kind()',
            'community_deletion_tenant_object_name(text,text)',
            'community_deletion_tenant_object_parts(text)',
            'community_deletion_tenant_schema(oid)',
            'community_deletion_tenant_uuid(text)',
            'community_deletion_trigger_args(text[])',
            'community_deletion_unregister_table(name,name)',
            'community_deletion_untrusted_code(regclass)',
            'community_schema_destruction_lock_key()',
            'community_write_allowed(uuid)',
            'community_write_fence_excluded_table(text)',
            'declare_reference(regclass,name[],regclass,name[],text)',
            'declare_tenant_table(regclass,name)',
            'detach_community_write_fence(regclass)',
            'drop_reference(regclass,name[])',
            'enforce_community_deletion_approval_guard()',
            'enforce_community_deletion_checkpoint_guard()',
            'enforce_community_deletion_exclusion_guard()',
            'enforce_community_deletion_grace_fence()',
            'enforce_community_deletion_grace_period()',
            'enforce_community_deletion_manifest_key_guard()',
            'enforce_community_deletion_protection_guard()',
            'enforce_community_deletion_protection_submit()',
            'enforce_community_deletion_receipt_guard()',
            'enforce_community_deletion_receipt_key_guard()',
            'enforce_community_deletion_receipt_required()',
            'enforce_community_deletion_reference_guard()',
            'enforce_community_deletion_request_guard()',
            'enforce_community_deletion_settings_guard()',
            'enforce_community_deletion_storage_layout_guard()',
            'enforce_community_deletion_tenant_table_guard()',
            'enforce_community_deletion_trusted_code_guard()',
            'enforce_community_fence_marker_arm()',
            'enforce_community_kept_row_fence()',
            'enforce_community_kept_row_fence_row()',
            'enforce_community_scoped_table_guard()',
            'enforce_community_serving_write_lease_guard()',
            'enforce_community_tenant_created()',
            'enforce_community_tenant_key_guard()',
            'enforce_community_tenant_objects_proof()',
            'enforce_community_tombstone()',
            'enforce_community_tombstone_proof()',
            'enforce_community_truncate_fence()',
            'enforce_community_write_fence()',
            'enforce_community_write_fence_row()',
            'exclude_table(regclass,text)',
            'include_table(regclass,text)',
            'refuse_community_deletion_truncate()'
        ]
    $$;
-- +goose StatementEnd
DROP FUNCTION community_deletion.community_deletion_fence_bound_tables();
SELECT community_deletion.community_deletion_seal_functions();
