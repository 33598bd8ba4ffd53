-- The drift report sees more (issue 16, and issue 17's foreign-key chains):
--
-- * Fence triggers are checked whole: a fence trigger with a WHEN clause or
--   an UPDATE OF column list fires for only some rows, so it no longer
--   counts towards a fence (community_deletion_fenced(), which the registry
--   guard also uses), and the drift report names it ('unfenced: fence
--   trigger ... has a WHEN clause').
-- * The control tables keep their shape: a trigger on a control table that
--   the migrations did not create is 'trigger_planted'; a guard trigger
--   whose definition (events, WHEN clause, column list, timing) differs from
--   the one recorded at the last migration is 'guard_changed'; a control
--   table whose indexes, constraints or triggers differ from the digest
--   recorded at the last migration (an index or CHECK dropped) is
--   'control_table_changed'. community_deletion_seal_functions(), which
--   every migration ends with, records the digests in
--   community_deletion_control_digests, so a migration that changes a
--   control table re-records them by ending as every migration does.
-- * Functions and operators the migrations did not install: a function in
--   the schema of communities named like this project's
--   (community_deletion_*, community_write_*, enforce_community_*,
--   attach_community_*, detach_community_*, assert_community_*) or
--   overloading an installed function's name or (unless an extension's) a
--   built-in function's name, that is not one of
--   community_deletion_installed_functions(), is 'function_planted'; any
--   operator created there (not by an extension) is 'operator_planted'. The
--   optional DDL guard's own functions, owned by a superuser, are not.
-- * A table in any schema with a foreign key to a registered 'delete' table
--   (down a chain of foreign keys from communities through tables that are
--   neither control tables nor registered 'nullify' tables) holds tenant
--   data: it is 'unregistered' until registered.

-- +goose Up

CREATE TABLE community_deletion_control_digests (
    kind text NOT NULL CHECK (kind IN ('table', 'guard')),
    subject text NOT NULL,
    digest text NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (kind, subject)
);
COMMENT ON TABLE community_deletion_control_digests IS 'Digests of the control tables (indexes, constraints, triggers) and of each guard trigger''s definition, as the last migration left them (community_deletion_seal_functions()); community_deletion_catalog_drift() compares the live catalog with them.';
REVOKE ALL ON community_deletion_control_digests FROM PUBLIC;
GRANT SELECT ON community_deletion_control_digests
    TO community_deletion_serving, community_deletion_operator, community_deletion_executor;

-- +goose StatementBegin
-- The digest of one control table of the schema of communities: an md5 over
-- its index definitions, its constraints and its triggers that are not
-- internal, NULL when the table is gone. Deparsed names depend on the
-- search_path, which the seal fixes, so the recorded and the live digest are
-- computed alike.
CREATE OR REPLACE FUNCTION community_deletion_control_digest(table_name text) RETURNS text
    LANGUAGE sql STABLE
    AS $$
        SELECT md5(coalesce((
            SELECT string_agg(item.line, E'\n' ORDER BY item.line)
            FROM (SELECT concat_ws(' ', 'index', pg_get_indexdef(i.indexrelid), i.indisvalid::text) AS line
                  FROM pg_index i WHERE i.indrelid = rel.oid
                  UNION ALL
                  SELECT concat_ws(' ', 'constraint', k.conname, pg_get_constraintdef(k.oid), k.convalidated::text)
                  FROM pg_constraint k WHERE k.conrelid = rel.oid
                  UNION ALL
                  SELECT concat_ws(' ', 'trigger', pg_get_triggerdef(t.oid))
                  FROM pg_trigger t WHERE t.tgrelid = rel.oid AND NOT t.tgisinternal) item), ''))
        FROM pg_class rel
        WHERE rel.relname = table_name
          AND rel.relnamespace = (SELECT c.relnamespace FROM pg_class c WHERE c.oid = 'communities'::regclass)
          AND rel.relkind IN ('r', 'p')
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Whether a relation carries a whole write fence: for each of INSERT, UPDATE
-- and DELETE an enabled AFTER ... FOR EACH STATEMENT trigger of
-- enforce_community_write_fence() with its transition tables, and with no
-- WHEN clause and no column list (either lets some writes past).
CREATE OR REPLACE FUNCTION community_deletion_fenced(relation oid) RETURNS boolean
    LANGUAGE sql STABLE
    AS $$
        SELECT coalesce(bool_or(t.tgtype & 4 = 4 AND t.tgnewtable = 'community_fence_new')
                        AND bool_or(t.tgtype & 16 = 16 AND t.tgoldtable = 'community_fence_old'
                                    AND t.tgnewtable = 'community_fence_new')
                        AND bool_or(t.tgtype & 8 = 8 AND t.tgoldtable = 'community_fence_old'), false)
        FROM pg_trigger t
        WHERE t.tgrelid = relation
          AND t.tgfoid = 'enforce_community_write_fence()'::regprocedure
          AND NOT t.tgisinternal
          AND t.tgenabled IN ('O', 'A')
          AND t.tgtype & (1 | 2 | 64) = 0
          AND t.tgqual IS NULL
          AND cardinality(t.tgattr::int2[]) = 0
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The digest of one guard trigger's definition (events, timing, WHEN clause,
-- column list, function) on a control table of the schema of communities;
-- NULL when it is gone.
CREATE OR REPLACE FUNCTION community_deletion_guard_digest(table_name text, trigger_name text) RETURNS text
    LANGUAGE sql STABLE
    AS $$
        SELECT md5(pg_get_triggerdef(t.oid))
        FROM pg_trigger t
        JOIN pg_class c ON c.oid = t.tgrelid
        WHERE c.relname = table_name AND t.tgname = trigger_name
          AND c.relnamespace = (SELECT h.relnamespace FROM pg_class h WHERE h.oid = 'communities'::regclass)
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
            'community_deletion_control_digest(text)',
            'community_deletion_control_table(text)',
            'community_deletion_default_grace_period()',
            'community_deletion_fenced(oid)',
            'community_deletion_function_digest(oid)',
            'community_deletion_guard_digest(text,text)',
            'community_deletion_guard_triggers()',
            'community_deletion_health()',
            'community_deletion_installed_functions()',
            'community_deletion_is_member(name)',
            'community_deletion_lock_holders(bigint)',
            'community_deletion_lock_key(uuid)',
            'community_deletion_next_stage(text)',
            'community_deletion_operators_share_role()',
            'community_deletion_protection_state(uuid)',
            'community_deletion_purge_pressure()',
            'community_deletion_receipt_chain_head()',
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
            'enforce_community_deletion_grace_fence()',
            'enforce_community_deletion_grace_period()',
            'enforce_community_deletion_manifest_key_guard()',
            'enforce_community_deletion_protection_guard()',
            'enforce_community_deletion_protection_submit()',
            'enforce_community_deletion_receipt_guard()',
            'enforce_community_deletion_receipt_required()',
            'enforce_community_deletion_request_guard()',
            'enforce_community_deletion_settings_guard()',
            'enforce_community_deletion_storage_layout_guard()',
            'enforce_community_scoped_table_guard()',
            'enforce_community_serving_write_lease_guard()',
            'enforce_community_tombstone()',
            'enforce_community_tombstone_proof()',
            'enforce_community_write_fence()',
            'refuse_community_deletion_truncate()'
        ]
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Fixes the search_path of every installed function (pg_catalog, the schema
-- of communities, pg_temp last) except the two that qualify every name
-- instead, because they run on every tenant write; revokes PUBLIC's default
-- EXECUTE from all of them but the five that check their caller themselves
-- and the pure list of control-plane tables attach consults as its caller;
-- and records their digests, and the control tables' and guard triggers'
-- digests, for the drift report. Every migration ends with it, so one that
-- changes a control table re-records that table's digest.
CREATE OR REPLACE FUNCTION community_deletion_seal_functions() RETURNS void
    LANGUAGE plpgsql VOLATILE
    AS $$
DECLARE
    home text := (SELECT n.nspname FROM pg_catalog.pg_class c
                  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                  WHERE c.oid = 'communities'::regclass);
    fn text;
BEGIN
    FOREACH fn IN ARRAY community_deletion_installed_functions() LOOP
        IF fn NOT IN ('community_deletion_lock_key(uuid)', 'enforce_community_write_fence()') THEN
            EXECUTE format('ALTER FUNCTION %s SET search_path = pg_catalog, %I, pg_temp', fn::regprocedure, home);
        END IF;
        IF fn IN ('attach_community_write_fence(regclass,text)', 'detach_community_write_fence(regclass)',
                  'community_deletion_register_table(regclass,text)', 'community_deletion_unregister_table(text)',
                  'enforce_community_write_fence()', 'community_deletion_control_table(text)') THEN
            -- These check their caller themselves (a table's owner), are
            -- trigger functions a table's owner must name, or (a constant
            -- list) are what attach, run as a table's owner, consults.
            EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO PUBLIC', fn::regprocedure);
        ELSE
            EXECUTE format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', fn::regprocedure);
        END IF;
    END LOOP;
    DELETE FROM community_deletion_function_digests;
    INSERT INTO community_deletion_function_digests (function_signature, digest)
    SELECT f.signature, community_deletion_function_digest(f.signature::regprocedure::oid)
    FROM unnest(community_deletion_installed_functions()) AS f (signature);
    -- The control tables' shape and each guard trigger's definition, which
    -- the drift report compares with the live catalog.
    DELETE FROM community_deletion_control_digests;
    INSERT INTO community_deletion_control_digests (kind, subject, digest)
    SELECT 'table', c.relname::text, community_deletion_control_digest(c.relname::text)
    FROM pg_catalog.pg_class c
    WHERE c.relnamespace = (SELECT h.relnamespace FROM pg_catalog.pg_class h WHERE h.oid = 'communities'::regclass)
      AND c.relkind IN ('r', 'p') AND community_deletion_control_table(c.relname::text)
    UNION ALL
    SELECT 'guard', g.table_name || '.' || g.trigger_name, community_deletion_guard_digest(g.table_name, g.trigger_name)
    FROM community_deletion_guard_triggers() g
    WHERE community_deletion_guard_digest(g.table_name, g.trigger_name) IS NOT NULL;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Every way the live catalog differs from what the deletion needs, one row
-- per table (or trigger, function, operator) and problem; docs/roles.md
-- lists the problems. Any row stops every destructive step.
CREATE OR REPLACE FUNCTION community_deletion_catalog_drift() RETURNS TABLE(table_name text, problem text)
    LANGUAGE sql STABLE
    AS $$
    WITH RECURSIVE home AS (
        SELECT c.relnamespace AS namespace, n.nspname AS nspname
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE c.oid = 'communities'::regclass
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
    ), tenant_chain AS (
        -- communities, every registered 'delete' table, and every table down
        -- a chain of foreign keys from them; the chain does not run on
        -- through a control table or a registered 'nullify' table (whose
        -- rows outlive a deletion).
        SELECT 'communities'::regclass::oid AS oid
        UNION
        SELECT registered.oid FROM registered
        WHERE registered.purge_action = 'delete' AND registered.oid IS NOT NULL
        UNION
        SELECT f.conrelid
        FROM tenant_chain
        JOIN pg_constraint f ON f.contype = 'f' AND f.confrelid = tenant_chain.oid
        JOIN pg_class c ON c.oid = f.conrelid
        CROSS JOIN home
        WHERE NOT (c.relnamespace = home.namespace
                   AND (community_deletion_control_table(c.relname::text)
                        OR c.relname::text IN (SELECT registered.table_name FROM registered
                                               WHERE registered.purge_action = 'nullify')))
    ), live AS (
        -- Every table, in any schema but the system's and temporary ones, that
        -- looks like tenant data: a community_id column of any type, or a
        -- foreign key to communities or (down a chain of foreign keys) to a
        -- registered 'delete' table, under any column name.
        SELECT c.oid, c.relnamespace = home.namespace AS at_home, c.relname::text AS relname,
               CASE WHEN c.relnamespace = home.namespace THEN c.relname::text
                    ELSE format('%I.%I', n.nspname, c.relname) END AS display_name
        FROM pg_class c
        JOIN pg_namespace n ON n.oid = c.relnamespace
        CROSS JOIN home
        WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition
          AND n.nspname NOT IN ('pg_catalog', 'information_schema')
          AND n.nspname !~ '^pg_(toast|temp_|toast_temp_)'
          AND c.relpersistence <> 't'
          AND c.oid <> 'communities'::regclass
          AND (EXISTS (SELECT 1 FROM pg_attribute a
                       WHERE a.attrelid = c.oid AND a.attname = 'community_id' AND NOT a.attisdropped)
               OR EXISTS (SELECT 1 FROM pg_constraint f JOIN tenant_chain ON tenant_chain.oid = f.confrelid
                          WHERE f.conrelid = c.oid AND f.contype = 'f'))
    ), fence_members AS (
        -- A registered 'delete' table and, when it is partitioned, every partition.
        SELECT registered.table_name, registered.oid
        FROM registered
        WHERE registered.purge_action = 'delete' AND registered.oid IS NOT NULL
        UNION
        SELECT registered.table_name, tree.relid
        FROM registered, pg_partition_tree(registered.oid) tree
        WHERE registered.purge_action = 'delete' AND registered.oid IS NOT NULL
    ), fence_defects AS (
        -- A fence trigger that fires for only some writes: one with a WHEN
        -- clause or an UPDATE OF column list.
        SELECT fence_members.table_name,
               string_agg(format('fence trigger %s on %s has %s', t.tgname, c.relname,
                                 CASE WHEN t.tgqual IS NOT NULL THEN 'a WHEN clause' ELSE 'a column list' END),
                          '; ' ORDER BY c.relname, t.tgname) AS defects
        FROM fence_members
        JOIN pg_trigger t ON t.tgrelid = fence_members.oid
        JOIN pg_class c ON c.oid = t.tgrelid
        WHERE t.tgfoid = 'enforce_community_write_fence()'::regprocedure
          AND NOT t.tgisinternal
          AND (t.tgqual IS NOT NULL OR cardinality(t.tgattr::int2[]) > 0)
        GROUP BY fence_members.table_name
    ), guards AS (
        SELECT g.table_name, g.trigger_name, g.function_signature, t.tgenabled,
               t.tgfoid = to_regprocedure(g.function_signature) AS same_function
        FROM community_deletion_guard_triggers() g
        LEFT JOIN pg_trigger t ON t.tgrelid = to_regclass(g.table_name) AND t.tgname = g.trigger_name
    ), control AS (
        SELECT c.relname::text AS table_name
        FROM pg_class c CROSS JOIN home
        WHERE c.relnamespace = home.namespace AND c.relkind IN ('r', 'p')
          AND community_deletion_control_table(c.relname::text)
    ), recorded_tables AS (
        SELECT d.subject, d.digest FROM community_deletion_control_digests d WHERE d.kind = 'table'
    ), functions AS (
        SELECT d.function_signature, d.digest, to_regprocedure(d.function_signature) AS oid
        FROM community_deletion_function_digests d
    ), installed AS (
        SELECT to_regprocedure(format('%I.%s', home.nspname, f.signature))::oid AS oid,
               split_part(f.signature, '(', 1) AS name
        FROM unnest(community_deletion_installed_functions()) AS f (signature)
        CROSS JOIN home
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
      AND NOT EXISTS (SELECT 1 FROM fence_defects WHERE fence_defects.table_name = fence_members.table_name)
    UNION ALL
    SELECT fence_defects.table_name, 'unfenced: ' || fence_defects.defects
    FROM fence_defects
    UNION ALL
    SELECT DISTINCT c.relname::text, 'stray_fence'
    FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
    WHERE t.tgfoid = 'enforce_community_write_fence()'::regprocedure
      AND NOT t.tgisinternal
      AND c.relpersistence <> 't'
      AND NOT EXISTS (SELECT 1 FROM fence_members WHERE fence_members.oid = t.tgrelid)
    UNION ALL
    SELECT guards.table_name || '.' || guards.trigger_name,
           CASE WHEN guards.tgenabled IS NULL OR NOT guards.same_function THEN 'guard_missing' ELSE 'guard_disabled' END
    FROM guards
    WHERE guards.tgenabled IS NULL OR NOT guards.same_function OR guards.tgenabled NOT IN ('O', 'A')
    UNION ALL
    -- A guard trigger re-created with other events, timing, a WHEN clause or
    -- a column list than the migrations gave it.
    SELECT guards.table_name || '.' || guards.trigger_name, 'guard_changed'
    FROM guards
    WHERE guards.tgenabled IS NOT NULL AND guards.same_function
      AND community_deletion_guard_digest(guards.table_name, guards.trigger_name) IS DISTINCT FROM
          (SELECT d.digest FROM community_deletion_control_digests d
           WHERE d.kind = 'guard' AND d.subject = guards.table_name || '.' || guards.trigger_name)
    UNION ALL
    -- A trigger on a control table that the migrations did not create: it
    -- could undo a guard's work.
    SELECT c.relname::text || '.' || t.tgname::text, 'trigger_planted'
    FROM pg_trigger t
    JOIN pg_class c ON c.oid = t.tgrelid
    CROSS JOIN home
    WHERE c.relnamespace = home.namespace
      AND community_deletion_control_table(c.relname::text)
      AND NOT t.tgisinternal
      AND NOT EXISTS (SELECT 1 FROM community_deletion_guard_triggers() g
                      WHERE g.table_name = c.relname::text AND g.trigger_name = t.tgname::text)
    UNION ALL
    -- A control table whose indexes, constraints or triggers differ from
    -- those the last migration recorded (an index or CHECK dropped).
    SELECT coalesce(control.table_name, recorded_tables.subject), 'control_table_changed'
    FROM control
    FULL JOIN recorded_tables ON recorded_tables.subject = control.table_name
    WHERE community_deletion_control_digest(coalesce(control.table_name, recorded_tables.subject))
          IS DISTINCT FROM recorded_tables.digest
    UNION ALL
    SELECT functions.function_signature,
           CASE WHEN functions.oid IS NULL THEN 'function_missing' ELSE 'function_changed' END
    FROM functions
    WHERE functions.oid IS NULL OR community_deletion_function_digest(functions.oid::oid) <> functions.digest
    UNION ALL
    -- A function the migrations did not install, named like this project's,
    -- overloading an installed function's name, or (unless an extension's)
    -- overloading a built-in's: a better match for a call that some guard
    -- or client makes. The optional DDL guard's own functions are owned by
    -- a superuser.
    SELECT p.oid::regprocedure::text, 'function_planted'
    FROM pg_proc p
    CROSS JOIN home
    WHERE p.pronamespace = home.namespace
      AND (p.proname::text ~ '^(community_deletion_|community_write_|enforce_community_|attach_community_|detach_community_|assert_community_)'
           OR p.proname::text IN (SELECT installed.name FROM installed)
           OR (EXISTS (SELECT 1 FROM pg_proc builtin
                       WHERE builtin.pronamespace = 'pg_catalog'::regnamespace AND builtin.proname = p.proname)
               AND NOT EXISTS (SELECT 1 FROM pg_depend d
                               WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e')))
      AND NOT EXISTS (SELECT 1 FROM installed WHERE installed.oid = p.oid)
      AND NOT (p.proname::text LIKE 'community\_deletion\_ddl\_guard%'
               AND EXISTS (SELECT 1 FROM pg_roles owner WHERE owner.oid = p.proowner AND owner.rolsuper))
    UNION ALL
    -- Any operator in the schema of communities but an extension's: this
    -- project installs none.
    SELECT format('operator %s(%s, %s)', o.oprname, o.oprleft::regtype, o.oprright::regtype), 'operator_planted'
    FROM pg_operator o
    CROSS JOIN home
    WHERE o.oprnamespace = home.namespace
      AND NOT EXISTS (SELECT 1 FROM pg_depend d
                      WHERE d.classid = 'pg_operator'::regclass AND d.objid = o.oid AND d.deptype = 'e')
    UNION ALL
    SELECT row_secured.table_name,
           format('row_security: its policies apply to %s; grant BYPASSRLS to each (or let it own the table), or disable row level security',
                  row_secured.logins)
    FROM row_secured
    ORDER BY 1, 2
    $$;
-- +goose StatementEnd

SELECT community_deletion_seal_functions();

-- The drift report runs as its caller: each deletion role needs the lists
-- and digests it consults.
GRANT EXECUTE ON FUNCTION community_deletion_installed_functions(), community_deletion_control_digest(text),
    community_deletion_guard_digest(text, text)
    TO community_deletion_serving, community_deletion_operator, community_deletion_executor;

-- +goose Down

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
          AND c.relpersistence <> 't'
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
      AND c.relpersistence <> 't'
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
CREATE OR REPLACE FUNCTION community_deletion_seal_functions() RETURNS void
    LANGUAGE plpgsql VOLATILE
    AS $$
DECLARE
    home text := (SELECT n.nspname FROM pg_catalog.pg_class c
                  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                  WHERE c.oid = 'communities'::regclass);
    fn text;
BEGIN
    FOREACH fn IN ARRAY community_deletion_installed_functions() LOOP
        IF fn NOT IN ('community_deletion_lock_key(uuid)', 'enforce_community_write_fence()') THEN
            EXECUTE format('ALTER FUNCTION %s SET search_path = pg_catalog, %I, pg_temp', fn::regprocedure, home);
        END IF;
        IF fn IN ('attach_community_write_fence(regclass,text)', 'detach_community_write_fence(regclass)',
                  'community_deletion_register_table(regclass,text)', 'community_deletion_unregister_table(text)',
                  'enforce_community_write_fence()', 'community_deletion_control_table(text)') THEN
            -- These check their caller themselves (a table's owner), are
            -- trigger functions a table's owner must name, or (a constant
            -- list) are what attach, run as a table's owner, consults.
            EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO PUBLIC', fn::regprocedure);
        ELSE
            EXECUTE format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', fn::regprocedure);
        END IF;
    END LOOP;
    DELETE FROM community_deletion_function_digests;
    INSERT INTO community_deletion_function_digests (function_signature, digest)
    SELECT f.signature, community_deletion_function_digest(f.signature::regprocedure::oid)
    FROM unnest(community_deletion_installed_functions()) AS f (signature);
END
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
            'community_deletion_default_grace_period()',
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
            'community_deletion_protection_state(uuid)',
            'community_deletion_purge_pressure()',
            'community_deletion_receipt_chain_head()',
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
            'enforce_community_deletion_grace_fence()',
            'enforce_community_deletion_grace_period()',
            'enforce_community_deletion_manifest_key_guard()',
            'enforce_community_deletion_protection_guard()',
            'enforce_community_deletion_protection_submit()',
            'enforce_community_deletion_receipt_guard()',
            'enforce_community_deletion_receipt_required()',
            'enforce_community_deletion_request_guard()',
            'enforce_community_deletion_settings_guard()',
            'enforce_community_deletion_storage_layout_guard()',
            'enforce_community_scoped_table_guard()',
            'enforce_community_serving_write_lease_guard()',
            'enforce_community_tombstone()',
            'enforce_community_tombstone_proof()',
            'enforce_community_write_fence()',
            'refuse_community_deletion_truncate()'
        ]
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion_fenced(relation oid) RETURNS boolean
    LANGUAGE sql STABLE
    AS $$
        SELECT coalesce(bool_or(t.tgtype & 4 = 4 AND t.tgnewtable = 'community_fence_new')
                        AND bool_or(t.tgtype & 16 = 16 AND t.tgoldtable = 'community_fence_old'
                                    AND t.tgnewtable = 'community_fence_new')
                        AND bool_or(t.tgtype & 8 = 8 AND t.tgoldtable = 'community_fence_old'), false)
        FROM pg_trigger t
        WHERE t.tgrelid = relation
          AND t.tgfoid = 'enforce_community_write_fence()'::regprocedure
          AND NOT t.tgisinternal
          AND t.tgenabled IN ('O', 'A')
          AND t.tgtype & (1 | 2 | 64) = 0
    $$;
-- +goose StatementEnd

REVOKE EXECUTE ON FUNCTION community_deletion_installed_functions()
    FROM community_deletion_serving, community_deletion_operator, community_deletion_executor;
DROP FUNCTION community_deletion_guard_digest(text, text);
DROP FUNCTION community_deletion_control_digest(text);
DROP TABLE community_deletion_control_digests;

SELECT community_deletion_seal_functions();
