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
-- The drift report also names a registered table whose row-level security
-- applies to a login of the executor or operator role (the client reads
-- with row_security off, so such a table would fail the deletion): problem
-- 'row_security: …', saying which logins and what to grant.
--
-- The request guard refuses (42501) an operator's change to a column only
-- the executor writes, on every operator path: an unblock could otherwise
-- rewrite the destructive storage manifest, and the executor would verify a
-- decoy.
--
-- A serving write lease is extended only while its community is active, so
-- once it is quiescing the fence waits at most for the longest lease.
--
-- Down drops the trigger and its function and restores, as migration 00011
-- and 00013 left them, every function this Up replaced.

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
-- The drift report, as migration 00011 left it, also names a registered
-- table whose row-level security applies to a login of the deletion roles
-- (problem 'row_security: …', saying what to grant).
CREATE OR REPLACE FUNCTION community_deletion_catalog_drift() RETURNS TABLE(table_name text, problem text)
    LANGUAGE sql STABLE
    AS $$
    WITH home AS (
        SELECT c.relnamespace AS namespace FROM pg_class c WHERE c.oid = 'communities'::regclass
    ), live AS (
        -- Every table, in any schema but the system's and temporary ones, that
        -- looks like tenant data: a community_id column of any type, or a
        -- foreign key to communities under any column name.
        SELECT c.oid, c.relnamespace = home.namespace AS at_home, c.relname::text AS relname,
               CASE WHEN c.relnamespace = home.namespace THEN c.relname::text
                    ELSE format('%I.%I', n.nspname, c.relname) END AS display_name
        FROM pg_class c
        JOIN pg_namespace n ON n.oid = c.relnamespace
        CROSS JOIN home
        WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition
          AND n.nspname NOT IN ('pg_catalog', 'information_schema')
          AND n.nspname !~ '^pg_(toast|temp_|toast_temp_)'
          AND (EXISTS (SELECT 1 FROM pg_attribute a
                       WHERE a.attrelid = c.oid AND a.attname = 'community_id' AND NOT a.attisdropped)
               OR EXISTS (SELECT 1 FROM pg_constraint f
                          WHERE f.conrelid = c.oid AND f.contype = 'f' AND f.confrelid = 'communities'::regclass))
    ), registered AS (
        -- oid is NULL when the table is gone or has no community_id uuid column.
        SELECT r.table_name, r.purge_action, t.oid, t.attnotnull
        FROM community_scoped_tables r
        CROSS JOIN home
        LEFT JOIN LATERAL (
            SELECT c.oid, a.attnotnull
            FROM pg_class c
            JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'community_id' AND NOT a.attisdropped
                AND a.atttypid = 'uuid'::regtype
            WHERE c.relname = r.table_name AND c.relnamespace = home.namespace
              AND c.relkind IN ('r', 'p') AND NOT c.relispartition) t ON true
    ), fence_members AS (
        -- A registered 'delete' table and, when it is partitioned, every partition.
        SELECT registered.table_name, registered.oid
        FROM registered
        WHERE registered.purge_action = 'delete' AND registered.oid IS NOT NULL
        UNION
        SELECT registered.table_name, tree.relid
        FROM registered, pg_partition_tree(registered.oid) tree
        WHERE registered.purge_action = 'delete' AND registered.oid IS NOT NULL
    ), guards AS (
        SELECT g.table_name, g.trigger_name, g.function_signature, t.tgenabled,
               t.tgfoid = to_regprocedure(g.function_signature) AS same_function
        FROM community_deletion_guard_triggers() g
        LEFT JOIN pg_trigger t ON t.tgrelid = to_regclass(g.table_name) AND t.tgname = g.trigger_name
    ), functions AS (
        SELECT d.function_signature, d.digest, to_regprocedure(d.function_signature) AS oid
        FROM community_deletion_function_digests d
    ), row_secured AS (
        -- A registered table, or a partition of one, whose row-level
        -- security applies to a login of the executor or operator role:
        -- neither superuser nor BYPASSRLS, and not its owner (or the table
        -- forces row security on its owner). The deletion reads with
        -- row_security off, so such a table fails it; reported here first.
        SELECT registered.table_name,
               string_agg(DISTINCT login.rolname::text, ', ') AS logins
        FROM registered
        CROSS JOIN LATERAL (SELECT registered.oid
                            UNION SELECT tree.relid FROM pg_partition_tree(registered.oid) tree) member (relid)
        JOIN pg_class c ON c.oid = member.relid AND c.relrowsecurity
        JOIN pg_roles login ON login.rolcanlogin AND NOT login.rolsuper AND NOT login.rolbypassrls
            AND (pg_has_role(login.oid, 'community_deletion_executor', 'MEMBER')
                 OR pg_has_role(login.oid, 'community_deletion_operator', 'MEMBER'))
            AND (c.relforcerowsecurity OR NOT pg_has_role(login.oid, c.relowner, 'USAGE'))
        WHERE registered.oid IS NOT NULL
        GROUP BY registered.table_name
    )
    SELECT live.display_name, 'unregistered'
    FROM live
    WHERE NOT (live.at_home AND community_deletion_control_table(live.relname))
      AND NOT (live.at_home AND EXISTS (SELECT 1 FROM registered WHERE registered.table_name = live.relname))
    UNION ALL
    SELECT registered.table_name, 'missing'
    FROM registered WHERE registered.oid IS NULL
    UNION ALL
    SELECT registered.table_name, 'shape'
    FROM registered
    WHERE registered.oid IS NOT NULL
      AND registered.attnotnull <> (registered.purge_action = 'delete')
    UNION ALL
    SELECT DISTINCT fence_members.table_name, 'unfenced'
    FROM fence_members
    WHERE NOT community_deletion_fenced(fence_members.oid)
    UNION ALL
    SELECT DISTINCT c.relname::text, 'stray_fence'
    FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
    WHERE t.tgfoid = 'enforce_community_write_fence()'::regprocedure
      AND NOT t.tgisinternal
      AND NOT EXISTS (SELECT 1 FROM fence_members WHERE fence_members.oid = t.tgrelid)
    UNION ALL
    SELECT guards.table_name || '.' || guards.trigger_name,
           CASE WHEN guards.tgenabled IS NULL OR NOT guards.same_function THEN 'guard_missing' ELSE 'guard_disabled' END
    FROM guards
    WHERE guards.tgenabled IS NULL OR NOT guards.same_function OR guards.tgenabled NOT IN ('O', 'A')
    UNION ALL
    SELECT functions.function_signature,
           CASE WHEN functions.oid IS NULL THEN 'function_missing' ELSE 'function_changed' END
    FROM functions
    WHERE functions.oid IS NULL OR community_deletion_function_digest(functions.oid::oid) <> functions.digest
    UNION ALL
    SELECT row_secured.table_name,
           format('row_security: its policies apply to %s; grant BYPASSRLS to each (or let it own the table), or disable row level security',
                  row_secured.logins)
    FROM row_secured
    ORDER BY 1, 2
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The request guard, as migration 00011 left it, also refuses (42501) an
-- operator's change, on any of its paths (inventory, approval, abort,
-- unblock), to a column only the executor writes.
CREATE OR REPLACE FUNCTION enforce_community_deletion_request_guard() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    AS $$
DECLARE
    community_state text;
    community_generation bigint;
    community_host text;
    action text;
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('deletion request %s refused: deletion requests are permanent audit records', OLD.id);
    END IF;

    IF TG_OP = 'INSERT' THEN
        IF NEW.stage <> 'submitted'
           OR NEW.schema_manifest IS NOT NULL OR NEW.storage_manifest IS NOT NULL
           OR NEW.inventory_manifest IS NOT NULL OR NEW.inventory_digest IS NOT NULL
           OR NEW.inventory_frozen_at IS NOT NULL OR NEW.destructive_storage_manifest IS NOT NULL
           OR NEW.fence_generation IS NOT NULL OR NEW.lease_owner IS NOT NULL OR NEW.lease_generation <> 0
           OR NEW.lease_until IS NOT NULL OR NEW.destructive_storage_frozen_at IS NOT NULL
           OR NEW.blocked_at IS NOT NULL OR NEW.blocked_reason IS NOT NULL
           OR NEW.quiescing_started_at IS NOT NULL OR NEW.pre_quiesce_archived_at IS NOT NULL
           OR NEW.retry_stage IS NOT NULL OR NEW.retry_count <> 0 OR NEW.attempts <> 0
           OR NEW.last_error IS NOT NULL OR NEW.last_error_at IS NOT NULL
           OR NEW.completed_at IS NOT NULL OR NEW.aborted_at IS NOT NULL
           OR NEW.aborted_by IS NOT NULL OR NEW.abort_reason IS NOT NULL THEN
            RAISE EXCEPTION USING ERRCODE = '23000',
                MESSAGE = format('deletion request %s refused: a request is created submitted, with nothing frozen, leased or blocked', NEW.id);
        END IF;
        SELECT c.deletion_state, c.host INTO community_state, community_host
        FROM communities c WHERE c.id = NEW.community_id;
        IF community_state IS DISTINCT FROM 'active' OR NEW.community_host IS DISTINCT FROM community_host THEN
            RAISE EXCEPTION USING ERRCODE = '23000',
                MESSAGE = format('deletion request refused: community %s is %s or its host is not %L',
                                 NEW.community_id, coalesce(community_state, 'missing'), NEW.community_host);
        END IF;
        NEW.requested_by_role := session_user;
        NEW.created_at := now();
        NEW.updated_at := now();
        NEW.next_attempt_at := now();
        RETURN NEW;
    END IF;

    IF OLD.stage IN ('aborted', 'retention_pending') THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('deletion request %s refused: stage %s is terminal', OLD.id, OLD.stage);
    END IF;
    IF (NEW.id, NEW.community_id, NEW.community_host, NEW.requested_by, NEW.requested_by_role, NEW.created_at)
       IS DISTINCT FROM (OLD.id, OLD.community_id, OLD.community_host, OLD.requested_by, OLD.requested_by_role, OLD.created_at) THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('deletion request %s refused: its target, requester and creation time never change', OLD.id);
    END IF;
    -- Who may make this change: operators inventory, approve, abort and
    -- unblock, and then only clear a lease or a block; the executor does
    -- everything else.
    IF NEW.stage IS DISTINCT FROM OLD.stage THEN
        action := format('deletion request %s stage %s -> %s', OLD.id, OLD.stage, NEW.stage);
        IF NEW.stage IN ('inventoried', 'approved', 'aborted') THEN
            PERFORM community_deletion_require_member(ARRAY['community_deletion_operator']::name[], action);
        ELSE
            PERFORM community_deletion_require_member(ARRAY['community_deletion_executor']::name[], action);
            action := NULL;
        END IF;
    ELSIF OLD.blocked_at IS NOT NULL AND NEW.blocked_at IS NULL THEN
        action := format('unblock of deletion request %s', OLD.id);
        PERFORM community_deletion_require_member(ARRAY['community_deletion_operator']::name[], action);
    ELSE
        PERFORM community_deletion_require_member(ARRAY['community_deletion_executor']::name[],
                                                  format('change of deletion request %s', OLD.id));
    END IF;
    IF action IS NOT NULL
       AND ((NEW.lease_owner IS NOT NULL AND NEW.lease_owner IS DISTINCT FROM OLD.lease_owner)
            OR (NEW.lease_until IS NOT NULL AND NEW.lease_until IS DISTINCT FROM OLD.lease_until)
            OR (NEW.lease_generation <> OLD.lease_generation AND NEW.stage <> 'aborted')
            OR NEW.attempts <> OLD.attempts
            OR (NEW.blocked_at IS NOT NULL AND NEW.blocked_at IS DISTINCT FROM OLD.blocked_at)
            OR (NEW.pre_quiesce_archived_at, NEW.quiescing_started_at)
               IS DISTINCT FROM (OLD.pre_quiesce_archived_at, OLD.quiescing_started_at)) THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = format('%s refused: an operator only clears a lease or a block, never takes, extends or sets one', action);
    END IF;
    -- The rest of what the executor records is its own too: the destructive
    -- storage manifest it verifies against, its retry and error record
    -- (which an operator only clears) and the schedule (an operator makes a
    -- request due now, never later). The fence generation and completion
    -- time are guarded below and by CHECKs.
    IF action IS NOT NULL
       AND ((NEW.destructive_storage_manifest, NEW.destructive_storage_frozen_at)
                IS DISTINCT FROM (OLD.destructive_storage_manifest, OLD.destructive_storage_frozen_at)
            OR (NEW.retry_stage IS NOT NULL AND NEW.retry_stage IS DISTINCT FROM OLD.retry_stage)
            OR (NEW.retry_count <> 0 AND NEW.retry_count <> OLD.retry_count)
            OR (NEW.last_error IS NOT NULL AND NEW.last_error IS DISTINCT FROM OLD.last_error)
            OR (NEW.last_error_at IS NOT NULL AND NEW.last_error_at IS DISTINCT FROM OLD.last_error_at)
            OR (NEW.next_attempt_at IS DISTINCT FROM OLD.next_attempt_at AND NEW.next_attempt_at <> now())) THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = format('%s refused: an operator never changes what the executor records (destructive storage manifest, retry and error record, schedule)', action);
    END IF;
    -- Executor leases are bounded: an hour from now at most.
    IF NEW.lease_until IS DISTINCT FROM OLD.lease_until AND NEW.lease_until > clock_timestamp() + interval '1 hour' THEN
        RAISE EXCEPTION USING ERRCODE = '23514',
            MESSAGE = format('deletion request %s refused: an executor lease lasts at most 1 hour, not until %s', OLD.id, NEW.lease_until);
    END IF;
    IF (NEW.schema_manifest, NEW.storage_manifest, NEW.inventory_manifest, NEW.inventory_digest, NEW.inventory_frozen_at)
       IS DISTINCT FROM (OLD.schema_manifest, OLD.storage_manifest, OLD.inventory_manifest, OLD.inventory_digest, OLD.inventory_frozen_at)
       AND NOT (OLD.stage = 'submitted' AND NEW.stage = 'inventoried'
                AND OLD.schema_manifest IS NULL AND OLD.storage_manifest IS NULL
                AND OLD.inventory_manifest IS NULL AND OLD.inventory_digest IS NULL
                AND OLD.inventory_frozen_at IS NULL) THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('deletion request %s refused: the frozen inventory is written once, by submitted -> inventoried', OLD.id);
    END IF;
    IF (NEW.destructive_storage_manifest, NEW.destructive_storage_frozen_at)
       IS DISTINCT FROM (OLD.destructive_storage_manifest, OLD.destructive_storage_frozen_at)
       AND NOT (OLD.stage = 'fenced' AND NEW.stage = 'fenced'
                AND OLD.destructive_storage_manifest IS NULL AND OLD.destructive_storage_frozen_at IS NULL) THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('deletion request %s refused: the destructive storage manifest is written once, while fenced', OLD.id);
    END IF;
    IF NEW.lease_generation < OLD.lease_generation
       OR (OLD.fence_generation IS NOT NULL
           AND (NEW.fence_generation IS NULL OR NEW.fence_generation < OLD.fence_generation)) THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('deletion request %s refused: lease and fence generations never decrease', OLD.id);
    END IF;
    IF NEW.fence_generation IS DISTINCT FROM OLD.fence_generation
       AND NOT (NEW.stage IN ('fenced', 'aborted') AND NEW.stage IS DISTINCT FROM OLD.stage) THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('deletion request %s refused: fence_generation is set only by the step to fenced or aborted', OLD.id);
    END IF;

    IF NEW.stage IS DISTINCT FROM OLD.stage THEN
        IF current_setting('transaction_isolation') <> 'read committed' THEN
            RAISE EXCEPTION USING ERRCODE = '25000',
                MESSAGE = format('deletion request %s refused: isolation level %s pins a snapshot that cannot see the community''s current state',
                                 OLD.id, current_setting('transaction_isolation'));
        END IF;
        IF NOT (NEW.stage = community_deletion_next_stage(OLD.stage)
                OR (NEW.stage = 'aborted' AND OLD.stage IN ('submitted', 'inventoried', 'approved', 'fenced'))) THEN
            RAISE EXCEPTION USING ERRCODE = '23000',
                MESSAGE = format('deletion request %s refused: stage %s -> %s is not a lifecycle step', OLD.id, OLD.stage, NEW.stage);
        END IF;
        IF NEW.stage = 'drained' AND NEW.destructive_storage_manifest IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = '23000',
                MESSAGE = format('deletion request %s refused: drained needs the destructive storage manifest frozen', OLD.id);
        END IF;
        IF NEW.stage = 'approved' AND NOT EXISTS (
            SELECT 1 FROM community_deletion_approvals approval
            WHERE approval.request_id = NEW.id
              AND approval.community_id = NEW.community_id
              AND approval.inventory_digest = NEW.inventory_digest) THEN
            RAISE EXCEPTION USING ERRCODE = '23000',
                MESSAGE = format('deletion request %s refused: approved needs an approval of its frozen inventory digest', OLD.id);
        END IF;
    END IF;

    -- Every step (and the destructive freeze) must match the community: from
    -- fenced to bindings_removed it is fenced at the request's generation,
    -- from postgres_purged on it is that generation's tombstone, and an
    -- abort leaves it active. FOR SHARE waits for a concurrent lifecycle
    -- change of the community and reads its newest version.
    IF NEW.stage IS DISTINCT FROM OLD.stage
       OR NEW.destructive_storage_manifest IS DISTINCT FROM OLD.destructive_storage_manifest THEN
        SELECT c.deletion_state, c.deletion_fence_generation INTO community_state, community_generation
        FROM communities c WHERE c.id = NEW.community_id
        FOR SHARE;
        IF NOT (CASE
            WHEN NEW.stage IN ('fenced', 'drained', 'bindings_removed')
                THEN community_state = 'fenced' AND community_generation = NEW.fence_generation
            WHEN NEW.stage IN ('postgres_purged', 'cache_purged', 'logically_verified', 'retention_pending')
                THEN community_state = 'tombstone' AND community_generation = NEW.fence_generation
            WHEN NEW.stage = 'aborted' THEN community_state = 'active'
            ELSE true
        END) IS TRUE THEN
            RAISE EXCEPTION USING ERRCODE = '23000',
                MESSAGE = format('deletion request %s refused: stage %s does not match community %s, which is %s at fence generation %s',
                                 OLD.id, NEW.stage, NEW.community_id, community_state, community_generation);
        END IF;
    END IF;
    NEW.updated_at := now();
    RETURN NEW;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The serving write lease guard, as migration 00011 left it, extends a
-- lease only while its community is active (55000 once it is quiescing).
CREATE OR REPLACE FUNCTION enforce_community_serving_write_lease_guard() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    AS $$
DECLARE
    community_state text;
    community_generation bigint;
BEGIN
    IF TG_OP = 'DELETE' THEN
        -- Anyone entitled to the table may reap an expired lease; an
        -- unexpired one is released only by its holders' role.
        IF OLD.lease_until >= clock_timestamp() THEN
            PERFORM community_deletion_require_member(ARRAY['community_deletion_serving', 'community_deletion_executor']::name[],
                                                      format('release of unexpired serving write lease %s', OLD.id));
        END IF;
        RETURN OLD;
    END IF;
    PERFORM community_deletion_require_member(ARRAY['community_deletion_serving', 'community_deletion_executor']::name[],
                                              format('serving write lease of community %s', NEW.community_id));
    IF TG_OP = 'INSERT' THEN
        PERFORM assert_community_write_allowed(NEW.community_id);
        SELECT c.deletion_state, c.deletion_fence_generation INTO community_state, community_generation
        FROM communities c WHERE c.id = NEW.community_id;
        IF community_state IS DISTINCT FROM 'active' OR NEW.fence_generation IS DISTINCT FROM community_generation THEN
            RAISE EXCEPTION USING ERRCODE = '55000',
                MESSAGE = format('community write refused: a new serving write lease needs community %s active at fence generation %s, and it is %s at %s',
                                 NEW.community_id, NEW.fence_generation, coalesce(community_state, 'missing'), community_generation),
                CONSTRAINT = 'community_write_fence';
        END IF;
        NEW.generation := nextval('community_serving_write_lease_generation_seq');
        NEW.created_at := now();
        NEW.heartbeat_at := now();
        RETURN NEW;
    END IF;
    -- heartbeat_at is the database clock of the last extension; the lease
    -- bound CHECK measures from it.
    NEW.heartbeat_at := CASE WHEN NEW.lease_until > OLD.lease_until THEN now() ELSE OLD.heartbeat_at END;

    IF (NEW.id, NEW.community_id, NEW.operation, NEW.owner, NEW.generation, NEW.fence_generation, NEW.created_at)
       IS DISTINCT FROM (OLD.id, OLD.community_id, OLD.operation, OLD.owner, OLD.generation, OLD.fence_generation, OLD.created_at) THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('serving write lease %s refused: a lease''s identity never changes', OLD.id);
    END IF;
    IF NEW.lease_until > OLD.lease_until THEN
        IF current_setting('transaction_isolation') <> 'read committed' THEN
            RAISE EXCEPTION USING ERRCODE = '25000',
                MESSAGE = format('community write refused: isolation level %s pins a snapshot that cannot see the deletion fence',
                                 current_setting('transaction_isolation')),
                CONSTRAINT = 'community_write_fence';
        END IF;
        PERFORM pg_advisory_xact_lock_shared(community_deletion_lock_key(OLD.community_id));
        SELECT c.deletion_state, c.deletion_fence_generation INTO community_state, community_generation
        FROM communities c WHERE c.id = NEW.community_id;
        -- Only while active: once quiescing, every lease runs out by its
        -- lease_until, so the fence waits at most for the longest lease.
        IF OLD.lease_until < clock_timestamp()
           OR community_state IS DISTINCT FROM 'active'
           OR community_generation IS DISTINCT FROM OLD.fence_generation THEN
            RAISE EXCEPTION USING ERRCODE = '55000',
                MESSAGE = format('community write refused: serving write lease %s is expired or its community %s is %s at fence generation %s; a lease is extended only while its community is active',
                                 OLD.id, OLD.community_id, coalesce(community_state, 'missing'), community_generation),
                CONSTRAINT = 'community_write_fence';
        END IF;
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

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
CREATE OR REPLACE FUNCTION enforce_community_serving_write_lease_guard() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    AS $$
DECLARE
    community_state text;
    community_generation bigint;
BEGIN
    IF TG_OP = 'DELETE' THEN
        -- Anyone entitled to the table may reap an expired lease; an
        -- unexpired one is released only by its holders' role.
        IF OLD.lease_until >= clock_timestamp() THEN
            PERFORM community_deletion_require_member(ARRAY['community_deletion_serving', 'community_deletion_executor']::name[],
                                                      format('release of unexpired serving write lease %s', OLD.id));
        END IF;
        RETURN OLD;
    END IF;
    PERFORM community_deletion_require_member(ARRAY['community_deletion_serving', 'community_deletion_executor']::name[],
                                              format('serving write lease of community %s', NEW.community_id));
    IF TG_OP = 'INSERT' THEN
        PERFORM assert_community_write_allowed(NEW.community_id);
        SELECT c.deletion_state, c.deletion_fence_generation INTO community_state, community_generation
        FROM communities c WHERE c.id = NEW.community_id;
        IF community_state IS DISTINCT FROM 'active' OR NEW.fence_generation IS DISTINCT FROM community_generation THEN
            RAISE EXCEPTION USING ERRCODE = '55000',
                MESSAGE = format('community write refused: a new serving write lease needs community %s active at fence generation %s, and it is %s at %s',
                                 NEW.community_id, NEW.fence_generation, coalesce(community_state, 'missing'), community_generation),
                CONSTRAINT = 'community_write_fence';
        END IF;
        NEW.generation := nextval('community_serving_write_lease_generation_seq');
        NEW.created_at := now();
        NEW.heartbeat_at := now();
        RETURN NEW;
    END IF;
    -- heartbeat_at is the database clock of the last extension; the lease
    -- bound CHECK measures from it.
    NEW.heartbeat_at := CASE WHEN NEW.lease_until > OLD.lease_until THEN now() ELSE OLD.heartbeat_at END;

    IF (NEW.id, NEW.community_id, NEW.operation, NEW.owner, NEW.generation, NEW.fence_generation, NEW.created_at)
       IS DISTINCT FROM (OLD.id, OLD.community_id, OLD.operation, OLD.owner, OLD.generation, OLD.fence_generation, OLD.created_at) THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('serving write lease %s refused: a lease''s identity never changes', OLD.id);
    END IF;
    IF NEW.lease_until > OLD.lease_until THEN
        IF current_setting('transaction_isolation') <> 'read committed' THEN
            RAISE EXCEPTION USING ERRCODE = '25000',
                MESSAGE = format('community write refused: isolation level %s pins a snapshot that cannot see the deletion fence',
                                 current_setting('transaction_isolation')),
                CONSTRAINT = 'community_write_fence';
        END IF;
        PERFORM pg_advisory_xact_lock_shared(community_deletion_lock_key(OLD.community_id));
        SELECT c.deletion_state, c.deletion_fence_generation INTO community_state, community_generation
        FROM communities c WHERE c.id = NEW.community_id;
        IF OLD.lease_until < clock_timestamp()
           OR community_state NOT IN ('active', 'quiescing') OR community_state IS NULL
           OR community_generation IS DISTINCT FROM OLD.fence_generation THEN
            RAISE EXCEPTION USING ERRCODE = '55000',
                MESSAGE = format('community write refused: serving write lease %s is expired or its community %s is %s at fence generation %s',
                                 OLD.id, OLD.community_id, coalesce(community_state, 'missing'), community_generation),
                CONSTRAINT = 'community_write_fence';
        END IF;
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION enforce_community_deletion_request_guard() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    AS $$
DECLARE
    community_state text;
    community_generation bigint;
    community_host text;
    action text;
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('deletion request %s refused: deletion requests are permanent audit records', OLD.id);
    END IF;

    IF TG_OP = 'INSERT' THEN
        IF NEW.stage <> 'submitted'
           OR NEW.schema_manifest IS NOT NULL OR NEW.storage_manifest IS NOT NULL
           OR NEW.inventory_manifest IS NOT NULL OR NEW.inventory_digest IS NOT NULL
           OR NEW.inventory_frozen_at IS NOT NULL OR NEW.destructive_storage_manifest IS NOT NULL
           OR NEW.fence_generation IS NOT NULL OR NEW.lease_owner IS NOT NULL OR NEW.lease_generation <> 0
           OR NEW.lease_until IS NOT NULL OR NEW.destructive_storage_frozen_at IS NOT NULL
           OR NEW.blocked_at IS NOT NULL OR NEW.blocked_reason IS NOT NULL
           OR NEW.quiescing_started_at IS NOT NULL OR NEW.pre_quiesce_archived_at IS NOT NULL
           OR NEW.retry_stage IS NOT NULL OR NEW.retry_count <> 0 OR NEW.attempts <> 0
           OR NEW.last_error IS NOT NULL OR NEW.last_error_at IS NOT NULL
           OR NEW.completed_at IS NOT NULL OR NEW.aborted_at IS NOT NULL
           OR NEW.aborted_by IS NOT NULL OR NEW.abort_reason IS NOT NULL THEN
            RAISE EXCEPTION USING ERRCODE = '23000',
                MESSAGE = format('deletion request %s refused: a request is created submitted, with nothing frozen, leased or blocked', NEW.id);
        END IF;
        SELECT c.deletion_state, c.host INTO community_state, community_host
        FROM communities c WHERE c.id = NEW.community_id;
        IF community_state IS DISTINCT FROM 'active' OR NEW.community_host IS DISTINCT FROM community_host THEN
            RAISE EXCEPTION USING ERRCODE = '23000',
                MESSAGE = format('deletion request refused: community %s is %s or its host is not %L',
                                 NEW.community_id, coalesce(community_state, 'missing'), NEW.community_host);
        END IF;
        NEW.requested_by_role := session_user;
        NEW.created_at := now();
        NEW.updated_at := now();
        NEW.next_attempt_at := now();
        RETURN NEW;
    END IF;

    IF OLD.stage IN ('aborted', 'retention_pending') THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('deletion request %s refused: stage %s is terminal', OLD.id, OLD.stage);
    END IF;
    IF (NEW.id, NEW.community_id, NEW.community_host, NEW.requested_by, NEW.requested_by_role, NEW.created_at)
       IS DISTINCT FROM (OLD.id, OLD.community_id, OLD.community_host, OLD.requested_by, OLD.requested_by_role, OLD.created_at) THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('deletion request %s refused: its target, requester and creation time never change', OLD.id);
    END IF;
    -- Who may make this change: operators inventory, approve, abort and
    -- unblock, and then only clear a lease or a block; the executor does
    -- everything else.
    IF NEW.stage IS DISTINCT FROM OLD.stage THEN
        action := format('deletion request %s stage %s -> %s', OLD.id, OLD.stage, NEW.stage);
        IF NEW.stage IN ('inventoried', 'approved', 'aborted') THEN
            PERFORM community_deletion_require_member(ARRAY['community_deletion_operator']::name[], action);
        ELSE
            PERFORM community_deletion_require_member(ARRAY['community_deletion_executor']::name[], action);
            action := NULL;
        END IF;
    ELSIF OLD.blocked_at IS NOT NULL AND NEW.blocked_at IS NULL THEN
        action := format('unblock of deletion request %s', OLD.id);
        PERFORM community_deletion_require_member(ARRAY['community_deletion_operator']::name[], action);
    ELSE
        PERFORM community_deletion_require_member(ARRAY['community_deletion_executor']::name[],
                                                  format('change of deletion request %s', OLD.id));
    END IF;
    IF action IS NOT NULL
       AND ((NEW.lease_owner IS NOT NULL AND NEW.lease_owner IS DISTINCT FROM OLD.lease_owner)
            OR (NEW.lease_until IS NOT NULL AND NEW.lease_until IS DISTINCT FROM OLD.lease_until)
            OR (NEW.lease_generation <> OLD.lease_generation AND NEW.stage <> 'aborted')
            OR NEW.attempts <> OLD.attempts
            OR (NEW.blocked_at IS NOT NULL AND NEW.blocked_at IS DISTINCT FROM OLD.blocked_at)
            OR (NEW.pre_quiesce_archived_at, NEW.quiescing_started_at)
               IS DISTINCT FROM (OLD.pre_quiesce_archived_at, OLD.quiescing_started_at)) THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = format('%s refused: an operator only clears a lease or a block, never takes, extends or sets one', action);
    END IF;
    -- Executor leases are bounded: an hour from now at most.
    IF NEW.lease_until IS DISTINCT FROM OLD.lease_until AND NEW.lease_until > clock_timestamp() + interval '1 hour' THEN
        RAISE EXCEPTION USING ERRCODE = '23514',
            MESSAGE = format('deletion request %s refused: an executor lease lasts at most 1 hour, not until %s', OLD.id, NEW.lease_until);
    END IF;
    IF (NEW.schema_manifest, NEW.storage_manifest, NEW.inventory_manifest, NEW.inventory_digest, NEW.inventory_frozen_at)
       IS DISTINCT FROM (OLD.schema_manifest, OLD.storage_manifest, OLD.inventory_manifest, OLD.inventory_digest, OLD.inventory_frozen_at)
       AND NOT (OLD.stage = 'submitted' AND NEW.stage = 'inventoried'
                AND OLD.schema_manifest IS NULL AND OLD.storage_manifest IS NULL
                AND OLD.inventory_manifest IS NULL AND OLD.inventory_digest IS NULL
                AND OLD.inventory_frozen_at IS NULL) THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('deletion request %s refused: the frozen inventory is written once, by submitted -> inventoried', OLD.id);
    END IF;
    IF (NEW.destructive_storage_manifest, NEW.destructive_storage_frozen_at)
       IS DISTINCT FROM (OLD.destructive_storage_manifest, OLD.destructive_storage_frozen_at)
       AND NOT (OLD.stage = 'fenced' AND NEW.stage = 'fenced'
                AND OLD.destructive_storage_manifest IS NULL AND OLD.destructive_storage_frozen_at IS NULL) THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('deletion request %s refused: the destructive storage manifest is written once, while fenced', OLD.id);
    END IF;
    IF NEW.lease_generation < OLD.lease_generation
       OR (OLD.fence_generation IS NOT NULL
           AND (NEW.fence_generation IS NULL OR NEW.fence_generation < OLD.fence_generation)) THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('deletion request %s refused: lease and fence generations never decrease', OLD.id);
    END IF;
    IF NEW.fence_generation IS DISTINCT FROM OLD.fence_generation
       AND NOT (NEW.stage IN ('fenced', 'aborted') AND NEW.stage IS DISTINCT FROM OLD.stage) THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('deletion request %s refused: fence_generation is set only by the step to fenced or aborted', OLD.id);
    END IF;

    IF NEW.stage IS DISTINCT FROM OLD.stage THEN
        IF current_setting('transaction_isolation') <> 'read committed' THEN
            RAISE EXCEPTION USING ERRCODE = '25000',
                MESSAGE = format('deletion request %s refused: isolation level %s pins a snapshot that cannot see the community''s current state',
                                 OLD.id, current_setting('transaction_isolation'));
        END IF;
        IF NOT (NEW.stage = community_deletion_next_stage(OLD.stage)
                OR (NEW.stage = 'aborted' AND OLD.stage IN ('submitted', 'inventoried', 'approved', 'fenced'))) THEN
            RAISE EXCEPTION USING ERRCODE = '23000',
                MESSAGE = format('deletion request %s refused: stage %s -> %s is not a lifecycle step', OLD.id, OLD.stage, NEW.stage);
        END IF;
        IF NEW.stage = 'drained' AND NEW.destructive_storage_manifest IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = '23000',
                MESSAGE = format('deletion request %s refused: drained needs the destructive storage manifest frozen', OLD.id);
        END IF;
        IF NEW.stage = 'approved' AND NOT EXISTS (
            SELECT 1 FROM community_deletion_approvals approval
            WHERE approval.request_id = NEW.id
              AND approval.community_id = NEW.community_id
              AND approval.inventory_digest = NEW.inventory_digest) THEN
            RAISE EXCEPTION USING ERRCODE = '23000',
                MESSAGE = format('deletion request %s refused: approved needs an approval of its frozen inventory digest', OLD.id);
        END IF;
    END IF;

    -- Every step (and the destructive freeze) must match the community: from
    -- fenced to bindings_removed it is fenced at the request's generation,
    -- from postgres_purged on it is that generation's tombstone, and an
    -- abort leaves it active. FOR SHARE waits for a concurrent lifecycle
    -- change of the community and reads its newest version.
    IF NEW.stage IS DISTINCT FROM OLD.stage
       OR NEW.destructive_storage_manifest IS DISTINCT FROM OLD.destructive_storage_manifest THEN
        SELECT c.deletion_state, c.deletion_fence_generation INTO community_state, community_generation
        FROM communities c WHERE c.id = NEW.community_id
        FOR SHARE;
        IF NOT (CASE
            WHEN NEW.stage IN ('fenced', 'drained', 'bindings_removed')
                THEN community_state = 'fenced' AND community_generation = NEW.fence_generation
            WHEN NEW.stage IN ('postgres_purged', 'cache_purged', 'logically_verified', 'retention_pending')
                THEN community_state = 'tombstone' AND community_generation = NEW.fence_generation
            WHEN NEW.stage = 'aborted' THEN community_state = 'active'
            ELSE true
        END) IS TRUE THEN
            RAISE EXCEPTION USING ERRCODE = '23000',
                MESSAGE = format('deletion request %s refused: stage %s does not match community %s, which is %s at fence generation %s',
                                 OLD.id, NEW.stage, NEW.community_id, community_state, community_generation);
        END IF;
    END IF;
    NEW.updated_at := now();
    RETURN NEW;
END
$$;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion_catalog_drift() RETURNS TABLE(table_name text, problem text)
    LANGUAGE sql STABLE
    AS $$
    WITH home AS (
        SELECT c.relnamespace AS namespace FROM pg_class c WHERE c.oid = 'communities'::regclass
    ), live AS (
        -- Every table, in any schema but the system's and temporary ones, that
        -- looks like tenant data: a community_id column of any type, or a
        -- foreign key to communities under any column name.
        SELECT c.oid, c.relnamespace = home.namespace AS at_home, c.relname::text AS relname,
               CASE WHEN c.relnamespace = home.namespace THEN c.relname::text
                    ELSE format('%I.%I', n.nspname, c.relname) END AS display_name
        FROM pg_class c
        JOIN pg_namespace n ON n.oid = c.relnamespace
        CROSS JOIN home
        WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition
          AND n.nspname NOT IN ('pg_catalog', 'information_schema')
          AND n.nspname !~ '^pg_(toast|temp_|toast_temp_)'
          AND (EXISTS (SELECT 1 FROM pg_attribute a
                       WHERE a.attrelid = c.oid AND a.attname = 'community_id' AND NOT a.attisdropped)
               OR EXISTS (SELECT 1 FROM pg_constraint f
                          WHERE f.conrelid = c.oid AND f.contype = 'f' AND f.confrelid = 'communities'::regclass))
    ), registered AS (
        -- oid is NULL when the table is gone or has no community_id uuid column.
        SELECT r.table_name, r.purge_action, t.oid, t.attnotnull
        FROM community_scoped_tables r
        CROSS JOIN home
        LEFT JOIN LATERAL (
            SELECT c.oid, a.attnotnull
            FROM pg_class c
            JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'community_id' AND NOT a.attisdropped
                AND a.atttypid = 'uuid'::regtype
            WHERE c.relname = r.table_name AND c.relnamespace = home.namespace
              AND c.relkind IN ('r', 'p') AND NOT c.relispartition) t ON true
    ), fence_members AS (
        -- A registered 'delete' table and, when it is partitioned, every partition.
        SELECT registered.table_name, registered.oid
        FROM registered
        WHERE registered.purge_action = 'delete' AND registered.oid IS NOT NULL
        UNION
        SELECT registered.table_name, tree.relid
        FROM registered, pg_partition_tree(registered.oid) tree
        WHERE registered.purge_action = 'delete' AND registered.oid IS NOT NULL
    ), guards AS (
        SELECT g.table_name, g.trigger_name, g.function_signature, t.tgenabled,
               t.tgfoid = to_regprocedure(g.function_signature) AS same_function
        FROM community_deletion_guard_triggers() g
        LEFT JOIN pg_trigger t ON t.tgrelid = to_regclass(g.table_name) AND t.tgname = g.trigger_name
    ), functions AS (
        SELECT d.function_signature, d.digest, to_regprocedure(d.function_signature) AS oid
        FROM community_deletion_function_digests d
    )
    SELECT live.display_name, 'unregistered'
    FROM live
    WHERE NOT (live.at_home AND community_deletion_control_table(live.relname))
      AND NOT (live.at_home AND EXISTS (SELECT 1 FROM registered WHERE registered.table_name = live.relname))
    UNION ALL
    SELECT registered.table_name, 'missing'
    FROM registered WHERE registered.oid IS NULL
    UNION ALL
    SELECT registered.table_name, 'shape'
    FROM registered
    WHERE registered.oid IS NOT NULL
      AND registered.attnotnull <> (registered.purge_action = 'delete')
    UNION ALL
    SELECT DISTINCT fence_members.table_name, 'unfenced'
    FROM fence_members
    WHERE NOT community_deletion_fenced(fence_members.oid)
    UNION ALL
    SELECT DISTINCT c.relname::text, 'stray_fence'
    FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
    WHERE t.tgfoid = 'enforce_community_write_fence()'::regprocedure
      AND NOT t.tgisinternal
      AND NOT EXISTS (SELECT 1 FROM fence_members WHERE fence_members.oid = t.tgrelid)
    UNION ALL
    SELECT guards.table_name || '.' || guards.trigger_name,
           CASE WHEN guards.tgenabled IS NULL OR NOT guards.same_function THEN 'guard_missing' ELSE 'guard_disabled' END
    FROM guards
    WHERE guards.tgenabled IS NULL OR NOT guards.same_function OR guards.tgenabled NOT IN ('O', 'A')
    UNION ALL
    SELECT functions.function_signature,
           CASE WHEN functions.oid IS NULL THEN 'function_missing' ELSE 'function_changed' END
    FROM functions
    WHERE functions.oid IS NULL OR community_deletion_function_digest(functions.oid::oid) <> functions.digest
    ORDER BY 1, 2
    $$;
-- +goose StatementEnd
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
