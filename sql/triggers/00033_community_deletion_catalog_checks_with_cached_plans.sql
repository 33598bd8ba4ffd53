-- The catalog checks behind the drift report keep their plans.
--
-- community_deletion_catalog_drift() runs before every destructive step,
-- in health and in the purge's final proof. The six functions below were
-- LANGUAGE sql with SET clauses, which PostgreSQL never inlines and plans
-- afresh on every call: the drift report's table query alone took about
-- 10 ms to plan for 25 ms of execution, and table_code, code_functions and
-- fence_bound were planned once per registered table per report. As
-- PL/pgSQL, each statement is planned once per session and its plan kept
-- (the queries have no parameters, or only oids, so the plan is generic).
--
-- Each body is the same query, word for word. #variable_conflict
-- use_column gives a name that is both a column and a parameter the
-- column, as a SQL function does; a RETURNS TABLE column is never
-- referenced unqualified as a variable. Ownership, grants, volatility,
-- SECURITY DEFINER and SET clauses are unchanged (CREATE OR REPLACE keeps
-- them), and the functions are sealed again. Down puts back the LANGUAGE
-- sql definitions exactly.

-- +goose Up
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_catalog_drift_of_tables()
 RETURNS TABLE(table_name text, problem text)
 LANGUAGE plpgsql
 STABLE
 SET jit TO 'off'
 SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
AS $function$
#variable_conflict use_column
BEGIN
    RETURN QUERY WITH RECURSIVE home AS (
        SELECT c.relnamespace AS namespace, n.nspname AS nspname
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE c.oid = 'communities'::regclass
    ), tenant_kind AS (
        SELECT community_deletion_tenant_key_kind() AS kind
    ), registered AS (
        -- oid is NULL when the table is gone or, for a table keyed by its
        -- own column, has no column of the registered kind named by its
        -- tenant key. args are its fence's expected arguments.
        SELECT r.table_schema, r.table_name, r.purge_action, r.tenant_key, coalesce(r.key_kind, 'uuid') AS key_kind, r.parents,
               t.oid, t.attnotnull,
               community_deletion_expected_fence_args(t.oid, r.purge_action, r.tenant_key, r.key_kind, r.parents) AS args,
               CASE WHEN r.purge_action = 'delete' THEN 'enforce_community_write_fence()'::regprocedure
                    ELSE 'enforce_community_kept_row_fence()'::regprocedure END AS fence,
               CASE WHEN r.purge_action = 'delete' THEN 'enforce_community_write_fence_row()'::regprocedure
                    ELSE 'enforce_community_kept_row_fence_row()'::regprocedure END AS row_fence
        FROM community_scoped_tables r
        LEFT JOIN LATERAL (
            SELECT c.oid, a.attnotnull
            FROM pg_class c
            JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = r.table_schema
            LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = r.tenant_key AND NOT a.attisdropped
            WHERE c.relname = r.table_name
              AND c.relkind IN ('r', 'p') AND NOT c.relispartition
              AND (r.parents IS NOT NULL
                   OR community_deletion_key_kind(a.atttypid::regtype) = coalesce(r.key_kind, 'uuid'))) t ON true
    ), tenant_table AS (
        -- The service's declared tenant table, when there is one.
        SELECT c.oid, d.key_column, c.relname
        FROM community_deletion_tenant_table d
        JOIN pg_namespace n ON n.nspname = d.table_schema
        JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = d.table_name
    ), key_names AS (
        -- The names of tenant key columns: community_id, every registered
        -- key but the tenant table's own, and the names a column that
        -- holds the tenant table's key usually has: for a tenant table
        -- accounts or "Account", account_id, accountId and AccountId (and
        -- tenant_id, tenantId).
        SELECT 'community_id'::name AS name
        UNION
        SELECT r.tenant_key FROM community_scoped_tables r
        WHERE r.tenant_key IS NOT NULL
          AND NOT EXISTS (SELECT 1 FROM community_deletion_tenant_table d
                          WHERE d.table_schema = r.table_schema AND d.table_name = r.table_name)
        UNION
        SELECT unnest(ARRAY[stem.s || '_id', stem.s || 'Id', lower(stem.s) || '_id',
                            lower(left(stem.s, 1)) || substr(stem.s, 2) || 'Id', 'tenant_id', 'tenantId'])::name
        FROM tenant_table
        CROSS JOIN LATERAL (SELECT CASE WHEN tenant_table.relname ~ 'ies$' THEN regexp_replace(tenant_table.relname, 'ies$', 'y')
                                        WHEN tenant_table.relname ~ '[^s]s$' THEN left(tenant_table.relname, -1)
                                        ELSE tenant_table.relname::text END) stem (s)
    ), refs AS (
        -- Every reference between tables of the service's schemas: foreign
        -- keys (on partitioned roots, not their clones) and declared ones.
        SELECT f.conrelid AS child, f.confrelid AS parent
        FROM pg_constraint f WHERE f.contype = 'f' AND f.conparentid = 0
        UNION
        SELECT cc.oid, pc.oid
        FROM community_deletion_references dr
        JOIN pg_namespace cn ON cn.nspname = dr.child_schema
        JOIN pg_class cc ON cc.relnamespace = cn.oid AND cc.relname = dr.child_table
        JOIN pg_namespace pn ON pn.nspname = dr.parent_schema
        JOIN pg_class pc ON pc.relnamespace = pn.oid AND pc.relname = dr.parent_table
    ), tenant_chain AS (
        -- communities, the tenant table, every registered 'delete' table,
        -- and every table down a chain of references from them; the chain
        -- does not run on through a control table or a registered 'nullify'
        -- table (whose rows outlive a deletion).
        SELECT 'communities'::regclass::oid AS oid
        UNION
        SELECT tenant_table.oid FROM tenant_table
        UNION
        SELECT registered.oid FROM registered
        WHERE registered.purge_action = 'delete' AND registered.oid IS NOT NULL
        UNION
        SELECT refs.child
        FROM tenant_chain
        JOIN refs ON refs.parent = tenant_chain.oid
        JOIN pg_class c ON c.oid = refs.child
        CROSS JOIN home
        WHERE c.relnamespace <> home.namespace
          AND NOT EXISTS (SELECT 1 FROM registered
                          WHERE registered.oid = c.oid AND registered.purge_action = 'nullify')
    ), live AS (
        -- Every table, in any schema but the system's and temporary ones, that
        -- looks like tenant data: a column named like a tenant key, of any
        -- type, or a reference to communities, the tenant table or (down a
        -- chain of references) a registered 'delete' table, under any
        -- column name; unless its owner excluded it.
        SELECT c.oid, c.relnamespace = home.namespace AS at_home, c.relname::text AS relname,
               format('%I.%I', n.nspname, c.relname) AS display_name,
               (SELECT string_agg(DISTINCT format('%I.%I', pn.nspname, pc.relname), ', ')
                FROM refs JOIN tenant_chain ON tenant_chain.oid = refs.parent
                JOIN pg_class pc ON pc.oid = refs.parent JOIN pg_namespace pn ON pn.oid = pc.relnamespace
                WHERE refs.child = c.oid AND refs.parent <> c.oid) AS chained_to,
               (SELECT string_agg(format('its %I column is %s', a.attname, format_type(a.atttypid, a.atttypmod)), ', ' ORDER BY a.attname)
                FROM pg_attribute a JOIN key_names k ON k.name = a.attname
                WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
                  AND community_deletion_key_kind(a.atttypid::regtype) IS DISTINCT FROM (SELECT tenant_kind.kind FROM tenant_kind)) AS wrong_keys,
               (SELECT min(a.attname::text)
                FROM pg_attribute a JOIN key_names k ON k.name = a.attname
                WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
                  AND community_deletion_key_kind(a.atttypid::regtype) = (SELECT tenant_kind.kind FROM tenant_kind)) AS key_column
        FROM pg_class c
        JOIN pg_namespace n ON n.oid = c.relnamespace
        CROSS JOIN home
        WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition
          AND n.nspname NOT IN ('pg_catalog', 'information_schema')
          AND n.nspname !~ '^pg_(toast|temp_|toast_temp_)'
          AND c.relpersistence <> 't'
          AND c.oid <> 'communities'::regclass
          AND NOT (c.relnamespace = home.namespace AND community_deletion_control_table(c.relname::text))
          AND NOT EXISTS (SELECT 1 FROM community_deletion_excluded_tables e
                          WHERE e.table_schema = n.nspname AND e.table_name = c.relname)
          AND (c.oid IN (SELECT tenant_table.oid FROM tenant_table)
               OR EXISTS (SELECT 1 FROM pg_attribute a JOIN key_names k ON k.name = a.attname
                          WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped)
               OR EXISTS (SELECT 1 FROM refs JOIN tenant_chain ON tenant_chain.oid = refs.parent
                          WHERE refs.child = c.oid AND refs.parent <> c.oid))
    ), fence_members AS (
        -- A registered table and, when it is partitioned, every partition;
        -- root marks the registered table itself.
        SELECT registered.table_name, registered.purge_action, registered.args, registered.fence, registered.row_fence,
               registered.oid, true AS root, false AS leaf_partition
        FROM registered
        WHERE registered.oid IS NOT NULL
        UNION ALL
        SELECT registered.table_name, registered.purge_action, registered.args, registered.fence, registered.row_fence,
               tree.relid, false, tree.isleaf
        FROM registered, pg_partition_tree(registered.oid) tree
        WHERE registered.oid IS NOT NULL AND tree.relid <> registered.oid
    ), fencing AS (
        -- How each member is fenced: by the statement-level fences attach
        -- gives it, or, for a partition created since, by the enabled clone
        -- of its partitioned table's row-level fence.
        SELECT fence_members.*,
               community_deletion_statement_fenced(fence_members.oid, fence_members.fence, fence_members.args) AS statement_fenced,
               (NOT fence_members.root
                AND community_deletion_row_fenced(fence_members.oid, fence_members.row_fence, fence_members.args, true)) AS row_fenced
        FROM fence_members
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
        WHERE t.tgfoid IN ('enforce_community_write_fence()'::regprocedure, 'enforce_community_kept_row_fence()'::regprocedure,
                           'enforce_community_write_fence_row()'::regprocedure, 'enforce_community_kept_row_fence_row()'::regprocedure)
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
    -- Tenant data no deletion covers, with the call that registers it; where
    -- it can never be registered as it is, why.
    SELECT live.display_name,
           CASE WHEN live.at_home
                    THEN 'unregistered: it is in schema community_deletion, where no tenant table can be registered; move it to a schema of the service'
                WHEN live.key_column IS NOT NULL
                    THEN format('unregistered: attach it by its %I column with community_deletion.attach_community_write_fence(%L, ''delete'', %L) (''nullify'' to keep its rows), or exclude it with community_deletion.exclude_table(%L, reason)',
                                live.key_column, live.display_name, live.key_column, live.display_name)
                WHEN live.chained_to IS NOT NULL
                    THEN format('unregistered: it references %s; attach it through its parents with community_deletion.attach_child_table(%L), or exclude it with community_deletion.exclude_table(%L, reason)',
                                live.chained_to, live.display_name, live.display_name)
                WHEN live.wrong_keys IS NOT NULL
                    THEN format('unregistered: %s, but the tenant key is %s; key it by a column of that kind, or exclude it with community_deletion.exclude_table(%L, reason)',
                                live.wrong_keys, (SELECT tenant_kind.kind FROM tenant_kind), live.display_name)
                ELSE 'unregistered' END
    FROM live
    WHERE NOT EXISTS (SELECT 1 FROM registered WHERE registered.oid = live.oid)
    UNION ALL
    SELECT registered.table_name, 'missing'
    FROM registered WHERE registered.oid IS NULL
    UNION ALL
    SELECT registered.table_name, 'shape'
    FROM registered
    WHERE registered.oid IS NOT NULL AND registered.purge_action = 'nullify' AND registered.attnotnull
    UNION ALL
    -- A table attached through its parents whose paths are no longer those
    -- of its references to registered tables.
    SELECT registered.table_name,
           format('parents_changed: its references to registered tables changed since it was attached; detach it and attach it again with community_deletion.attach_child_table(%L)',
                  format('%I.%I', registered.table_schema, registered.table_name))
    FROM registered
    WHERE registered.oid IS NOT NULL AND registered.parents IS NOT NULL
      AND community_deletion_child_paths(registered.oid,
              coalesce(community_deletion_first_steps(registered.parents, false), '{}'),
              community_deletion_first_steps(registered.parents, true))
          IS DISTINCT FROM jsonb_build_object('kind', registered.key_kind, 'paths', registered.parents)
    UNION ALL
    SELECT DISTINCT fencing.table_name, 'unfenced'
    FROM fencing
    WHERE fencing.purge_action = 'delete'
      AND NOT fencing.statement_fenced AND NOT fencing.row_fenced
      AND NOT EXISTS (SELECT 1 FROM fence_defects WHERE fence_defects.table_name = fencing.table_name)
    UNION ALL
    -- A registered 'nullify' table, or a partition, without its kept-row
    -- fence: a late write could link a kept row to a deleted tenant.
    SELECT DISTINCT fencing.table_name, 'unfenced: no kept-row fence; run attach_community_write_fence again'
    FROM fencing
    WHERE fencing.purge_action = 'nullify'
      AND NOT fencing.statement_fenced AND NOT fencing.row_fenced
      AND NOT EXISTS (SELECT 1 FROM fence_defects WHERE fence_defects.table_name = fencing.table_name)
    UNION ALL
    -- A fence that skips its tenant check while no deletion is in flight,
    -- on a table that no foreign key binds any more.
    SELECT registered.table_name,
           format('unbound: its fence skips the tenant check while no deletion is in flight, which is safe only while %s; add it back, or attach %I.%I again to fence every write in full',
                  CASE WHEN registered.parents IS NULL
                       THEN format('a foreign key from %I to the tenant table''s key keeps a deleted tenant''s rows out', registered.tenant_key)
                       ELSE 'no first step to its parents is a declared reference' END,
                  registered.table_schema, registered.table_name)
    FROM registered
    WHERE registered.oid IS NOT NULL
      AND EXISTS (SELECT 1 FROM pg_trigger t
                  WHERE t.tgrelid = registered.oid AND NOT t.tgisinternal AND t.tgnargs = 3
                    AND t.tgfoid IN (registered.fence, registered.row_fence))
      AND NOT community_deletion_fence_bound(registered.oid, registered.tenant_key, registered.parents)
    UNION ALL
    SELECT fence_defects.table_name, 'unfenced: ' || fence_defects.defects
    FROM fence_defects
    UNION ALL
    -- A write fence on a table that is not a registered 'delete' table (or
    -- a partition of one); a kept-row fence on a table that is not
    -- registered as 'nullify'.
    SELECT DISTINCT c.relname::text, 'stray_fence'
    FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
    JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE NOT t.tgisinternal
      AND c.relpersistence <> 't'
      AND ((t.tgfoid IN ('enforce_community_write_fence()'::regprocedure, 'enforce_community_write_fence_row()'::regprocedure)
            AND NOT EXISTS (SELECT 1 FROM fence_members
                            WHERE fence_members.oid = t.tgrelid AND fence_members.purge_action = 'delete'))
           OR (t.tgfoid IN ('enforce_community_kept_row_fence()'::regprocedure, 'enforce_community_kept_row_fence_row()'::regprocedure)
               AND NOT EXISTS (SELECT 1 FROM fence_members
                               WHERE fence_members.oid = t.tgrelid AND fence_members.purge_action = 'nullify')
               AND NOT EXISTS (SELECT 1 FROM community_scoped_tables r
                               WHERE r.purge_action = 'nullify' AND r.table_schema = n.nspname
                                 AND r.table_name = coalesce((SELECT root.relname FROM pg_class root
                                                              WHERE root.oid = pg_partition_root(c.oid)), c.relname))))
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
    -- A registered 'delete' table, or a partition attach fenced, that lacks
    -- attach's TRUNCATE fence: TRUNCATE would take a community's rows past
    -- the deletion. (A partition created since attach has none; the notes
    -- say so.)
    SELECT DISTINCT fencing.table_name, 'unfenced: no TRUNCATE fence; run attach_community_write_fence again'
    FROM fencing
    WHERE fencing.purge_action = 'delete'
      AND fencing.statement_fenced
      AND NOT EXISTS (SELECT 1 FROM pg_trigger t
                      WHERE t.tgrelid = fencing.oid AND NOT t.tgisinternal
                        AND t.tgfoid = 'enforce_community_truncate_fence()'::regprocedure
                        AND t.tgtype = 34 AND t.tgqual IS NULL AND t.tgenabled IN ('O', 'A'))
    UNION ALL
    -- A role other than its owner that may create objects in this project's
    -- schema could plant a function or operator every guard would resolve.
    SELECT 'schema community_deletion',
           format('schema_create_granted: %s may CREATE in it; revoke it', acl.grantee::regrole)
    FROM pg_namespace n
    CROSS JOIN LATERAL aclexplode(n.nspacl) acl
    WHERE n.nspname = 'community_deletion' AND acl.privilege_type = 'CREATE' AND acl.grantee <> n.nspowner
    UNION ALL
    -- A schema holding registered tables that a deletion role may not use:
    -- the inventory, the purge and the proofs could not name its tables.
    SELECT format('schema %I', s.table_schema),
           format('schema_usage_missing: %s may not use it; GRANT USAGE ON SCHEMA %I TO %s',
                  string_agg(r.rolname, ', ' ORDER BY r.rolname), s.table_schema,
                  string_agg(r.rolname, ', ' ORDER BY r.rolname))
    FROM (SELECT DISTINCT registered_schema.table_schema FROM community_scoped_tables registered_schema) s
    CROSS JOIN (VALUES ('community_deletion_executor'::name), ('community_deletion_operator'::name)) r (rolname)
    WHERE to_regnamespace(s.table_schema) IS NOT NULL
      AND NOT has_schema_privilege(r.rolname, s.table_schema, 'USAGE')
    GROUP BY s.table_schema
    UNION ALL
    SELECT row_secured.table_name,
           format('row_security: its policies apply to %s; grant BYPASSRLS to each (or let it own the table), or disable row level security',
                  row_secured.logins)
    FROM row_secured
    ORDER BY 1, 2;
END
$function$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_catalog_drift_of_copies()
 RETURNS TABLE(table_name text, problem text)
 LANGUAGE plpgsql
 STABLE
 SET jit TO 'off'
 SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
AS $function$
#variable_conflict use_column
BEGIN
    RETURN QUERY WITH RECURSIVE tenant_data AS (
        SELECT 'community_deletion.communities'::regclass::oid AS oid
        UNION
        SELECT c.oid FROM community_deletion_tenant_table d
        JOIN pg_namespace n ON n.nspname = d.table_schema
        JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = d.table_name
        UNION
        SELECT tree.relid FROM community_scoped_tables r
        JOIN pg_namespace n ON n.nspname = r.table_schema
        JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = r.table_name
        CROSS JOIN LATERAL (SELECT c.oid AS relid UNION SELECT t.relid FROM pg_partition_tree(c.oid) t) tree
    ), derived AS (
        -- Views and materialized views reading tenant data, and those
        -- reading them.
        SELECT w.ev_class AS oid, d.refobjid AS source
        FROM pg_depend d JOIN pg_rewrite w ON w.oid = d.objid
        WHERE d.classid = 'pg_rewrite'::regclass AND d.refclassid = 'pg_class'::regclass
          AND d.refobjid IN (SELECT tenant_data.oid FROM tenant_data) AND w.ev_class <> d.refobjid
        UNION
        SELECT w.ev_class, derived.source
        FROM derived
        JOIN pg_depend d ON d.refclassid = 'pg_class'::regclass AND d.refobjid = derived.oid AND d.classid = 'pg_rewrite'::regclass
        JOIN pg_rewrite w ON w.oid = d.objid
        WHERE w.ev_class <> derived.oid
    ), key_names AS (
        SELECT 'community_id'::name AS name
        UNION
        SELECT r.tenant_key FROM community_scoped_tables r
        WHERE r.tenant_key IS NOT NULL
          AND NOT EXISTS (SELECT 1 FROM community_deletion_tenant_table d
                          WHERE d.table_schema = r.table_schema AND d.table_name = r.table_name)
    ), copies AS (
        SELECT c.oid, c.relkind, n.nspname, c.relname,
               (SELECT string_agg(DISTINCT format('%I.%I', sn.nspname, sc.relname), ', ')
                FROM derived JOIN pg_class sc ON sc.oid = derived.source JOIN pg_namespace sn ON sn.oid = sc.relnamespace
                WHERE derived.oid = c.oid) AS sources,
               (SELECT min(a.attname::text) FROM pg_attribute a JOIN key_names k ON k.name = a.attname
                WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped) AS key_column
        FROM pg_class c
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE c.relkind IN ('m', 'f')
          AND c.relpersistence <> 't'
          AND n.nspname NOT IN ('pg_catalog', 'information_schema')
          AND n.nspname !~ '^pg_(toast|temp_|toast_temp_)'
          AND NOT EXISTS (SELECT 1 FROM community_deletion_excluded_tables e
                          WHERE e.table_schema = n.nspname AND e.table_name = c.relname)
    )
    SELECT format('%I.%I', copies.nspname, copies.relname),
           CASE WHEN copies.relkind = 'm'
                THEN format('unregistered: materialized view %I.%I keeps a copy of %s, which no deletion purges; drop it, or exclude it with community_deletion.exclude_table(%L, reason) if it keeps no tenant''s rows',
                            copies.nspname, copies.relname,
                            coalesce('rows of ' || copies.sources, format('tenant rows (its %I column)', copies.key_column)),
                            format('%I.%I', copies.nspname, copies.relname))
                ELSE format('unregistered: foreign table %I.%I has a %I column, and the deletion cannot purge a foreign table; exclude it with community_deletion.exclude_table(%L, reason) if its rows are deleted where they live, or drop it',
                            copies.nspname, copies.relname, copies.key_column, format('%I.%I', copies.nspname, copies.relname)) END
    FROM copies
    WHERE (copies.relkind = 'm' AND (copies.sources IS NOT NULL OR copies.key_column IS NOT NULL))
       OR (copies.relkind = 'f' AND copies.key_column IS NOT NULL)
    ORDER BY 1, 2;
END
$function$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_untrusted_code(target regclass)
 RETURNS TABLE(table_name text, problem text)
 LANGUAGE plpgsql
 STABLE
 SET jit TO 'off'
 SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
AS $function$
#variable_conflict use_column
BEGIN
    RETURN QUERY SELECT format('%I.%I', n.nspname, c.relname),
               format('%s_untrusted: %s %I on %I.%I %s, code that the deletion''s %s would run with the executor''s rights; drop it, or have the owner of schema community_deletion declare it trusted: INSERT INTO community_deletion.community_deletion_trusted_code (table_schema, table_name, kind, object_name, reason) VALUES (%L, %L, %L, %L, ''why'')',
                      CASE code.kind WHEN 'trigger' THEN 'trigger' WHEN 'rule' THEN 'rule' ELSE 'expression' END,
                      code.kind, code.object_name, n.nspname, c.relname,
                      CASE WHEN cardinality(code.calls) = 0 THEN 'rewrites the statement'
                           ELSE 'calls ' || (SELECT string_agg(format('%s (owned by %s)', p.oid::regprocedure, pg_get_userbyid(p.proowner)), ', ' ORDER BY p.oid)
                                             FROM pg_proc p WHERE p.oid = ANY (code.calls)) END,
                      CASE WHEN EXISTS (SELECT 1 FROM community_scoped_tables r
                                        JOIN pg_namespace rn ON rn.nspname = r.table_schema
                                        JOIN pg_class rc ON rc.relnamespace = rn.oid AND rc.relname = r.table_name
                                        WHERE rc.oid = coalesce(pg_partition_root(c.oid), c.oid) AND r.purge_action = 'delete')
                           THEN 'DELETE' ELSE 'UPDATE' END,
                      n.nspname, c.relname, code.kind, code.object_name)
        FROM (SELECT target::oid AS oid UNION SELECT tree.relid FROM pg_partition_tree(target) tree) member
        CROSS JOIN LATERAL community_deletion_table_code(member.oid) code
        JOIN pg_class c ON c.oid = code.relid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE (code.kind = 'rule' OR cardinality(code.calls) > 0)
          AND (SELECT t.action = 'trust' AND t.digest = community_deletion_code_digest(code.relid, code.kind, code.object_name)
               FROM community_deletion_trusted_code t
               WHERE t.table_schema = n.nspname AND t.table_name = c.relname
                 AND t.kind = code.kind AND t.object_name = code.object_name
               ORDER BY t.sequence DESC LIMIT 1) IS NOT TRUE
        ORDER BY 1, 2;
END
$function$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_table_code(relation oid)
 RETURNS TABLE(relid oid, kind text, object_name name, object_class oid, object_id oid, calls oid[])
 LANGUAGE plpgsql
 STABLE
 SET jit TO 'off'
 SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
AS $function$
#variable_conflict use_column
BEGIN
    RETURN QUERY WITH registered AS (
            SELECT r.purge_action, root.relkind = 'p' AS partitioned
            FROM community_scoped_tables r
            JOIN pg_namespace n ON n.nspname = r.table_schema
            JOIN pg_class root ON root.relnamespace = n.oid AND root.relname = r.table_name
            WHERE root.oid = coalesce(pg_partition_root(relation), relation)
        ), objects AS (
            SELECT t.tgrelid AS relid, 'trigger'::text AS kind, t.tgname AS object_name,
                   'pg_trigger'::regclass::oid AS object_class, t.oid AS object_id
            FROM registered, pg_trigger t
            WHERE t.tgrelid = relation AND NOT t.tgisinternal AND t.tgparentid = 0
              AND CASE WHEN registered.purge_action = 'delete' THEN t.tgtype & 8 = 8
                       ELSE t.tgtype & 16 = 16 OR (registered.partitioned AND t.tgtype & 4 = 4) END
            UNION ALL
            SELECT w.ev_class, 'rule', w.rulename, 'pg_rewrite'::regclass::oid, w.oid
            FROM registered, pg_rewrite w
            WHERE w.ev_class = relation AND w.rulename <> '_RETURN'
              AND CASE WHEN registered.purge_action = 'delete' THEN w.ev_type = '4'
                       ELSE w.ev_type = '2' OR (registered.partitioned AND w.ev_type = '3') END
            UNION ALL
            SELECT k.conrelid, 'constraint', k.conname, 'pg_constraint'::regclass::oid, k.oid
            FROM registered, pg_constraint k
            WHERE registered.purge_action = 'nullify' AND k.conrelid = relation AND k.contype IN ('c', 'x') AND k.conislocal
            UNION ALL
            SELECT i.indrelid, 'index', ic.relname, 'pg_class'::regclass::oid, i.indexrelid
            FROM registered, pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid
            WHERE registered.purge_action = 'nullify' AND i.indrelid = relation
              AND (i.indexprs IS NOT NULL OR i.indpred IS NOT NULL)
              AND NOT EXISTS (SELECT 1 FROM pg_inherits h WHERE h.inhrelid = i.indexrelid)
            UNION ALL
            SELECT d.adrelid, 'column', a.attname, 'pg_attrdef'::regclass::oid, d.oid
            FROM registered, pg_attrdef d
            JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
            WHERE registered.purge_action = 'nullify' AND d.adrelid = relation AND a.attgenerated <> '' AND a.attislocal
        )
        SELECT o.relid, o.kind, o.object_name, o.object_class, o.object_id,
               coalesce(ARRAY(SELECT f FROM community_deletion_code_functions(o.object_class, o.object_id) f ORDER BY f), '{}')
        FROM objects o;
END
$function$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_code_functions(object_class oid, object_id oid)
 RETURNS SETOF oid
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
AS $function$
#variable_conflict use_column
BEGIN
    RETURN QUERY SELECT f.oid
        FROM (SELECT d.refobjid AS oid FROM pg_depend d
              WHERE d.classid = object_class AND d.objid = object_id AND d.refclassid = 'pg_proc'::regclass
              UNION
              SELECT o.oprcode::oid FROM pg_depend d JOIN pg_operator o ON o.oid = d.refobjid
              WHERE d.classid = object_class AND d.objid = object_id AND d.refclassid = 'pg_operator'::regclass
              UNION
              SELECT k.castfunc FROM pg_depend d JOIN pg_cast k ON k.oid = d.refobjid
              WHERE d.classid = object_class AND d.objid = object_id AND d.refclassid = 'pg_cast'::regclass
                AND k.castfunc <> 0) f
        JOIN pg_proc p ON p.oid = f.oid
        WHERE p.pronamespace <> 'pg_catalog'::regnamespace
          AND p.oid NOT IN (SELECT to_regprocedure('community_deletion.' || s) FROM unnest(community_deletion_installed_functions()) s
                            WHERE to_regprocedure('community_deletion.' || s) IS NOT NULL);
END
$function$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_fence_bound(target oid, tenant_key name, parents jsonb)
 RETURNS boolean
 LANGUAGE plpgsql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
AS $function$
#variable_conflict use_column
BEGIN
    RETURN (SELECT CASE
            WHEN parents IS NOT NULL THEN
                jsonb_typeof(parents) = 'array' AND jsonb_array_length(parents) > 0
                AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements(parents) p
                                WHERE coalesce((p.value -> 'hops' -> 0 ->> 'declared')::boolean, false)
                                  AND NOT coalesce((p.value -> 'hops' -> 0 ->> 'reverse')::boolean, false))
            ELSE EXISTS (
                SELECT 1
                FROM community_deletion_tenant_table d
                JOIN pg_namespace n ON n.nspname = d.table_schema
                JOIN pg_class tc ON tc.relnamespace = n.oid AND tc.relname = d.table_name
                JOIN pg_attribute ta ON ta.attrelid = tc.oid AND ta.attname = d.key_column AND NOT ta.attisdropped
                JOIN pg_attribute a ON a.attrelid = target AND a.attname = tenant_key AND a.attnum > 0 AND NOT a.attisdropped
                JOIN pg_constraint f ON f.conrelid = target AND f.contype = 'f' AND f.confrelid = tc.oid
                WHERE tc.oid <> target
                  AND f.conkey = ARRAY[a.attnum] AND f.confkey = ARRAY[ta.attnum])
        END
    );
END
$function$;
-- +goose StatementEnd
SELECT community_deletion.community_deletion_seal_functions();

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_catalog_drift_of_tables()
 RETURNS TABLE(table_name text, problem text)
 LANGUAGE sql
 STABLE
 SET jit TO 'off'
 SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
AS $function$
    WITH RECURSIVE home AS (
        SELECT c.relnamespace AS namespace, n.nspname AS nspname
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE c.oid = 'communities'::regclass
    ), tenant_kind AS (
        SELECT community_deletion_tenant_key_kind() AS kind
    ), registered AS (
        -- oid is NULL when the table is gone or, for a table keyed by its
        -- own column, has no column of the registered kind named by its
        -- tenant key. args are its fence's expected arguments.
        SELECT r.table_schema, r.table_name, r.purge_action, r.tenant_key, coalesce(r.key_kind, 'uuid') AS key_kind, r.parents,
               t.oid, t.attnotnull,
               community_deletion_expected_fence_args(t.oid, r.purge_action, r.tenant_key, r.key_kind, r.parents) AS args,
               CASE WHEN r.purge_action = 'delete' THEN 'enforce_community_write_fence()'::regprocedure
                    ELSE 'enforce_community_kept_row_fence()'::regprocedure END AS fence,
               CASE WHEN r.purge_action = 'delete' THEN 'enforce_community_write_fence_row()'::regprocedure
                    ELSE 'enforce_community_kept_row_fence_row()'::regprocedure END AS row_fence
        FROM community_scoped_tables r
        LEFT JOIN LATERAL (
            SELECT c.oid, a.attnotnull
            FROM pg_class c
            JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = r.table_schema
            LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = r.tenant_key AND NOT a.attisdropped
            WHERE c.relname = r.table_name
              AND c.relkind IN ('r', 'p') AND NOT c.relispartition
              AND (r.parents IS NOT NULL
                   OR community_deletion_key_kind(a.atttypid::regtype) = coalesce(r.key_kind, 'uuid'))) t ON true
    ), tenant_table AS (
        -- The service's declared tenant table, when there is one.
        SELECT c.oid, d.key_column, c.relname
        FROM community_deletion_tenant_table d
        JOIN pg_namespace n ON n.nspname = d.table_schema
        JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = d.table_name
    ), key_names AS (
        -- The names of tenant key columns: community_id, every registered
        -- key but the tenant table's own, and the names a column that
        -- holds the tenant table's key usually has: for a tenant table
        -- accounts or "Account", account_id, accountId and AccountId (and
        -- tenant_id, tenantId).
        SELECT 'community_id'::name AS name
        UNION
        SELECT r.tenant_key FROM community_scoped_tables r
        WHERE r.tenant_key IS NOT NULL
          AND NOT EXISTS (SELECT 1 FROM community_deletion_tenant_table d
                          WHERE d.table_schema = r.table_schema AND d.table_name = r.table_name)
        UNION
        SELECT unnest(ARRAY[stem.s || '_id', stem.s || 'Id', lower(stem.s) || '_id',
                            lower(left(stem.s, 1)) || substr(stem.s, 2) || 'Id', 'tenant_id', 'tenantId'])::name
        FROM tenant_table
        CROSS JOIN LATERAL (SELECT CASE WHEN tenant_table.relname ~ 'ies$' THEN regexp_replace(tenant_table.relname, 'ies$', 'y')
                                        WHEN tenant_table.relname ~ '[^s]s$' THEN left(tenant_table.relname, -1)
                                        ELSE tenant_table.relname::text END) stem (s)
    ), refs AS (
        -- Every reference between tables of the service's schemas: foreign
        -- keys (on partitioned roots, not their clones) and declared ones.
        SELECT f.conrelid AS child, f.confrelid AS parent
        FROM pg_constraint f WHERE f.contype = 'f' AND f.conparentid = 0
        UNION
        SELECT cc.oid, pc.oid
        FROM community_deletion_references dr
        JOIN pg_namespace cn ON cn.nspname = dr.child_schema
        JOIN pg_class cc ON cc.relnamespace = cn.oid AND cc.relname = dr.child_table
        JOIN pg_namespace pn ON pn.nspname = dr.parent_schema
        JOIN pg_class pc ON pc.relnamespace = pn.oid AND pc.relname = dr.parent_table
    ), tenant_chain AS (
        -- communities, the tenant table, every registered 'delete' table,
        -- and every table down a chain of references from them; the chain
        -- does not run on through a control table or a registered 'nullify'
        -- table (whose rows outlive a deletion).
        SELECT 'communities'::regclass::oid AS oid
        UNION
        SELECT tenant_table.oid FROM tenant_table
        UNION
        SELECT registered.oid FROM registered
        WHERE registered.purge_action = 'delete' AND registered.oid IS NOT NULL
        UNION
        SELECT refs.child
        FROM tenant_chain
        JOIN refs ON refs.parent = tenant_chain.oid
        JOIN pg_class c ON c.oid = refs.child
        CROSS JOIN home
        WHERE c.relnamespace <> home.namespace
          AND NOT EXISTS (SELECT 1 FROM registered
                          WHERE registered.oid = c.oid AND registered.purge_action = 'nullify')
    ), live AS (
        -- Every table, in any schema but the system's and temporary ones, that
        -- looks like tenant data: a column named like a tenant key, of any
        -- type, or a reference to communities, the tenant table or (down a
        -- chain of references) a registered 'delete' table, under any
        -- column name; unless its owner excluded it.
        SELECT c.oid, c.relnamespace = home.namespace AS at_home, c.relname::text AS relname,
               format('%I.%I', n.nspname, c.relname) AS display_name,
               (SELECT string_agg(DISTINCT format('%I.%I', pn.nspname, pc.relname), ', ')
                FROM refs JOIN tenant_chain ON tenant_chain.oid = refs.parent
                JOIN pg_class pc ON pc.oid = refs.parent JOIN pg_namespace pn ON pn.oid = pc.relnamespace
                WHERE refs.child = c.oid AND refs.parent <> c.oid) AS chained_to,
               (SELECT string_agg(format('its %I column is %s', a.attname, format_type(a.atttypid, a.atttypmod)), ', ' ORDER BY a.attname)
                FROM pg_attribute a JOIN key_names k ON k.name = a.attname
                WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
                  AND community_deletion_key_kind(a.atttypid::regtype) IS DISTINCT FROM (SELECT tenant_kind.kind FROM tenant_kind)) AS wrong_keys,
               (SELECT min(a.attname::text)
                FROM pg_attribute a JOIN key_names k ON k.name = a.attname
                WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
                  AND community_deletion_key_kind(a.atttypid::regtype) = (SELECT tenant_kind.kind FROM tenant_kind)) AS key_column
        FROM pg_class c
        JOIN pg_namespace n ON n.oid = c.relnamespace
        CROSS JOIN home
        WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition
          AND n.nspname NOT IN ('pg_catalog', 'information_schema')
          AND n.nspname !~ '^pg_(toast|temp_|toast_temp_)'
          AND c.relpersistence <> 't'
          AND c.oid <> 'communities'::regclass
          AND NOT (c.relnamespace = home.namespace AND community_deletion_control_table(c.relname::text))
          AND NOT EXISTS (SELECT 1 FROM community_deletion_excluded_tables e
                          WHERE e.table_schema = n.nspname AND e.table_name = c.relname)
          AND (c.oid IN (SELECT tenant_table.oid FROM tenant_table)
               OR EXISTS (SELECT 1 FROM pg_attribute a JOIN key_names k ON k.name = a.attname
                          WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped)
               OR EXISTS (SELECT 1 FROM refs JOIN tenant_chain ON tenant_chain.oid = refs.parent
                          WHERE refs.child = c.oid AND refs.parent <> c.oid))
    ), fence_members AS (
        -- A registered table and, when it is partitioned, every partition;
        -- root marks the registered table itself.
        SELECT registered.table_name, registered.purge_action, registered.args, registered.fence, registered.row_fence,
               registered.oid, true AS root, false AS leaf_partition
        FROM registered
        WHERE registered.oid IS NOT NULL
        UNION ALL
        SELECT registered.table_name, registered.purge_action, registered.args, registered.fence, registered.row_fence,
               tree.relid, false, tree.isleaf
        FROM registered, pg_partition_tree(registered.oid) tree
        WHERE registered.oid IS NOT NULL AND tree.relid <> registered.oid
    ), fencing AS (
        -- How each member is fenced: by the statement-level fences attach
        -- gives it, or, for a partition created since, by the enabled clone
        -- of its partitioned table's row-level fence.
        SELECT fence_members.*,
               community_deletion_statement_fenced(fence_members.oid, fence_members.fence, fence_members.args) AS statement_fenced,
               (NOT fence_members.root
                AND community_deletion_row_fenced(fence_members.oid, fence_members.row_fence, fence_members.args, true)) AS row_fenced
        FROM fence_members
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
        WHERE t.tgfoid IN ('enforce_community_write_fence()'::regprocedure, 'enforce_community_kept_row_fence()'::regprocedure,
                           'enforce_community_write_fence_row()'::regprocedure, 'enforce_community_kept_row_fence_row()'::regprocedure)
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
    -- Tenant data no deletion covers, with the call that registers it; where
    -- it can never be registered as it is, why.
    SELECT live.display_name,
           CASE WHEN live.at_home
                    THEN 'unregistered: it is in schema community_deletion, where no tenant table can be registered; move it to a schema of the service'
                WHEN live.key_column IS NOT NULL
                    THEN format('unregistered: attach it by its %I column with community_deletion.attach_community_write_fence(%L, ''delete'', %L) (''nullify'' to keep its rows), or exclude it with community_deletion.exclude_table(%L, reason)',
                                live.key_column, live.display_name, live.key_column, live.display_name)
                WHEN live.chained_to IS NOT NULL
                    THEN format('unregistered: it references %s; attach it through its parents with community_deletion.attach_child_table(%L), or exclude it with community_deletion.exclude_table(%L, reason)',
                                live.chained_to, live.display_name, live.display_name)
                WHEN live.wrong_keys IS NOT NULL
                    THEN format('unregistered: %s, but the tenant key is %s; key it by a column of that kind, or exclude it with community_deletion.exclude_table(%L, reason)',
                                live.wrong_keys, (SELECT tenant_kind.kind FROM tenant_kind), live.display_name)
                ELSE 'unregistered' END
    FROM live
    WHERE NOT EXISTS (SELECT 1 FROM registered WHERE registered.oid = live.oid)
    UNION ALL
    SELECT registered.table_name, 'missing'
    FROM registered WHERE registered.oid IS NULL
    UNION ALL
    SELECT registered.table_name, 'shape'
    FROM registered
    WHERE registered.oid IS NOT NULL AND registered.purge_action = 'nullify' AND registered.attnotnull
    UNION ALL
    -- A table attached through its parents whose paths are no longer those
    -- of its references to registered tables.
    SELECT registered.table_name,
           format('parents_changed: its references to registered tables changed since it was attached; detach it and attach it again with community_deletion.attach_child_table(%L)',
                  format('%I.%I', registered.table_schema, registered.table_name))
    FROM registered
    WHERE registered.oid IS NOT NULL AND registered.parents IS NOT NULL
      AND community_deletion_child_paths(registered.oid,
              coalesce(community_deletion_first_steps(registered.parents, false), '{}'),
              community_deletion_first_steps(registered.parents, true))
          IS DISTINCT FROM jsonb_build_object('kind', registered.key_kind, 'paths', registered.parents)
    UNION ALL
    SELECT DISTINCT fencing.table_name, 'unfenced'
    FROM fencing
    WHERE fencing.purge_action = 'delete'
      AND NOT fencing.statement_fenced AND NOT fencing.row_fenced
      AND NOT EXISTS (SELECT 1 FROM fence_defects WHERE fence_defects.table_name = fencing.table_name)
    UNION ALL
    -- A registered 'nullify' table, or a partition, without its kept-row
    -- fence: a late write could link a kept row to a deleted tenant.
    SELECT DISTINCT fencing.table_name, 'unfenced: no kept-row fence; run attach_community_write_fence again'
    FROM fencing
    WHERE fencing.purge_action = 'nullify'
      AND NOT fencing.statement_fenced AND NOT fencing.row_fenced
      AND NOT EXISTS (SELECT 1 FROM fence_defects WHERE fence_defects.table_name = fencing.table_name)
    UNION ALL
    -- A fence that skips its tenant check while no deletion is in flight,
    -- on a table that no foreign key binds any more.
    SELECT registered.table_name,
           format('unbound: its fence skips the tenant check while no deletion is in flight, which is safe only while %s; add it back, or attach %I.%I again to fence every write in full',
                  CASE WHEN registered.parents IS NULL
                       THEN format('a foreign key from %I to the tenant table''s key keeps a deleted tenant''s rows out', registered.tenant_key)
                       ELSE 'no first step to its parents is a declared reference' END,
                  registered.table_schema, registered.table_name)
    FROM registered
    WHERE registered.oid IS NOT NULL
      AND EXISTS (SELECT 1 FROM pg_trigger t
                  WHERE t.tgrelid = registered.oid AND NOT t.tgisinternal AND t.tgnargs = 3
                    AND t.tgfoid IN (registered.fence, registered.row_fence))
      AND NOT community_deletion_fence_bound(registered.oid, registered.tenant_key, registered.parents)
    UNION ALL
    SELECT fence_defects.table_name, 'unfenced: ' || fence_defects.defects
    FROM fence_defects
    UNION ALL
    -- A write fence on a table that is not a registered 'delete' table (or
    -- a partition of one); a kept-row fence on a table that is not
    -- registered as 'nullify'.
    SELECT DISTINCT c.relname::text, 'stray_fence'
    FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
    JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE NOT t.tgisinternal
      AND c.relpersistence <> 't'
      AND ((t.tgfoid IN ('enforce_community_write_fence()'::regprocedure, 'enforce_community_write_fence_row()'::regprocedure)
            AND NOT EXISTS (SELECT 1 FROM fence_members
                            WHERE fence_members.oid = t.tgrelid AND fence_members.purge_action = 'delete'))
           OR (t.tgfoid IN ('enforce_community_kept_row_fence()'::regprocedure, 'enforce_community_kept_row_fence_row()'::regprocedure)
               AND NOT EXISTS (SELECT 1 FROM fence_members
                               WHERE fence_members.oid = t.tgrelid AND fence_members.purge_action = 'nullify')
               AND NOT EXISTS (SELECT 1 FROM community_scoped_tables r
                               WHERE r.purge_action = 'nullify' AND r.table_schema = n.nspname
                                 AND r.table_name = coalesce((SELECT root.relname FROM pg_class root
                                                              WHERE root.oid = pg_partition_root(c.oid)), c.relname))))
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
    -- A registered 'delete' table, or a partition attach fenced, that lacks
    -- attach's TRUNCATE fence: TRUNCATE would take a community's rows past
    -- the deletion. (A partition created since attach has none; the notes
    -- say so.)
    SELECT DISTINCT fencing.table_name, 'unfenced: no TRUNCATE fence; run attach_community_write_fence again'
    FROM fencing
    WHERE fencing.purge_action = 'delete'
      AND fencing.statement_fenced
      AND NOT EXISTS (SELECT 1 FROM pg_trigger t
                      WHERE t.tgrelid = fencing.oid AND NOT t.tgisinternal
                        AND t.tgfoid = 'enforce_community_truncate_fence()'::regprocedure
                        AND t.tgtype = 34 AND t.tgqual IS NULL AND t.tgenabled IN ('O', 'A'))
    UNION ALL
    -- A role other than its owner that may create objects in this project's
    -- schema could plant a function or operator every guard would resolve.
    SELECT 'schema community_deletion',
           format('schema_create_granted: %s may CREATE in it; revoke it', acl.grantee::regrole)
    FROM pg_namespace n
    CROSS JOIN LATERAL aclexplode(n.nspacl) acl
    WHERE n.nspname = 'community_deletion' AND acl.privilege_type = 'CREATE' AND acl.grantee <> n.nspowner
    UNION ALL
    -- A schema holding registered tables that a deletion role may not use:
    -- the inventory, the purge and the proofs could not name its tables.
    SELECT format('schema %I', s.table_schema),
           format('schema_usage_missing: %s may not use it; GRANT USAGE ON SCHEMA %I TO %s',
                  string_agg(r.rolname, ', ' ORDER BY r.rolname), s.table_schema,
                  string_agg(r.rolname, ', ' ORDER BY r.rolname))
    FROM (SELECT DISTINCT registered_schema.table_schema FROM community_scoped_tables registered_schema) s
    CROSS JOIN (VALUES ('community_deletion_executor'::name), ('community_deletion_operator'::name)) r (rolname)
    WHERE to_regnamespace(s.table_schema) IS NOT NULL
      AND NOT has_schema_privilege(r.rolname, s.table_schema, 'USAGE')
    GROUP BY s.table_schema
    UNION ALL
    SELECT row_secured.table_name,
           format('row_security: its policies apply to %s; grant BYPASSRLS to each (or let it own the table), or disable row level security',
                  row_secured.logins)
    FROM row_secured
    ORDER BY 1, 2
    $function$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_catalog_drift_of_copies()
 RETURNS TABLE(table_name text, problem text)
 LANGUAGE sql
 STABLE
 SET jit TO 'off'
 SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
AS $function$
    WITH RECURSIVE tenant_data AS (
        SELECT 'community_deletion.communities'::regclass::oid AS oid
        UNION
        SELECT c.oid FROM community_deletion_tenant_table d
        JOIN pg_namespace n ON n.nspname = d.table_schema
        JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = d.table_name
        UNION
        SELECT tree.relid FROM community_scoped_tables r
        JOIN pg_namespace n ON n.nspname = r.table_schema
        JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = r.table_name
        CROSS JOIN LATERAL (SELECT c.oid AS relid UNION SELECT t.relid FROM pg_partition_tree(c.oid) t) tree
    ), derived AS (
        -- Views and materialized views reading tenant data, and those
        -- reading them.
        SELECT w.ev_class AS oid, d.refobjid AS source
        FROM pg_depend d JOIN pg_rewrite w ON w.oid = d.objid
        WHERE d.classid = 'pg_rewrite'::regclass AND d.refclassid = 'pg_class'::regclass
          AND d.refobjid IN (SELECT tenant_data.oid FROM tenant_data) AND w.ev_class <> d.refobjid
        UNION
        SELECT w.ev_class, derived.source
        FROM derived
        JOIN pg_depend d ON d.refclassid = 'pg_class'::regclass AND d.refobjid = derived.oid AND d.classid = 'pg_rewrite'::regclass
        JOIN pg_rewrite w ON w.oid = d.objid
        WHERE w.ev_class <> derived.oid
    ), key_names AS (
        SELECT 'community_id'::name AS name
        UNION
        SELECT r.tenant_key FROM community_scoped_tables r
        WHERE r.tenant_key IS NOT NULL
          AND NOT EXISTS (SELECT 1 FROM community_deletion_tenant_table d
                          WHERE d.table_schema = r.table_schema AND d.table_name = r.table_name)
    ), copies AS (
        SELECT c.oid, c.relkind, n.nspname, c.relname,
               (SELECT string_agg(DISTINCT format('%I.%I', sn.nspname, sc.relname), ', ')
                FROM derived JOIN pg_class sc ON sc.oid = derived.source JOIN pg_namespace sn ON sn.oid = sc.relnamespace
                WHERE derived.oid = c.oid) AS sources,
               (SELECT min(a.attname::text) FROM pg_attribute a JOIN key_names k ON k.name = a.attname
                WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped) AS key_column
        FROM pg_class c
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE c.relkind IN ('m', 'f')
          AND c.relpersistence <> 't'
          AND n.nspname NOT IN ('pg_catalog', 'information_schema')
          AND n.nspname !~ '^pg_(toast|temp_|toast_temp_)'
          AND NOT EXISTS (SELECT 1 FROM community_deletion_excluded_tables e
                          WHERE e.table_schema = n.nspname AND e.table_name = c.relname)
    )
    SELECT format('%I.%I', copies.nspname, copies.relname),
           CASE WHEN copies.relkind = 'm'
                THEN format('unregistered: materialized view %I.%I keeps a copy of %s, which no deletion purges; drop it, or exclude it with community_deletion.exclude_table(%L, reason) if it keeps no tenant''s rows',
                            copies.nspname, copies.relname,
                            coalesce('rows of ' || copies.sources, format('tenant rows (its %I column)', copies.key_column)),
                            format('%I.%I', copies.nspname, copies.relname))
                ELSE format('unregistered: foreign table %I.%I has a %I column, and the deletion cannot purge a foreign table; exclude it with community_deletion.exclude_table(%L, reason) if its rows are deleted where they live, or drop it',
                            copies.nspname, copies.relname, copies.key_column, format('%I.%I', copies.nspname, copies.relname)) END
    FROM copies
    WHERE (copies.relkind = 'm' AND (copies.sources IS NOT NULL OR copies.key_column IS NOT NULL))
       OR (copies.relkind = 'f' AND copies.key_column IS NOT NULL)
    ORDER BY 1, 2
    $function$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_untrusted_code(target regclass)
 RETURNS TABLE(table_name text, problem text)
 LANGUAGE sql
 STABLE
 SET jit TO 'off'
 SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
AS $function$
        SELECT format('%I.%I', n.nspname, c.relname),
               format('%s_untrusted: %s %I on %I.%I %s, code that the deletion''s %s would run with the executor''s rights; drop it, or have the owner of schema community_deletion declare it trusted: INSERT INTO community_deletion.community_deletion_trusted_code (table_schema, table_name, kind, object_name, reason) VALUES (%L, %L, %L, %L, ''why'')',
                      CASE code.kind WHEN 'trigger' THEN 'trigger' WHEN 'rule' THEN 'rule' ELSE 'expression' END,
                      code.kind, code.object_name, n.nspname, c.relname,
                      CASE WHEN cardinality(code.calls) = 0 THEN 'rewrites the statement'
                           ELSE 'calls ' || (SELECT string_agg(format('%s (owned by %s)', p.oid::regprocedure, pg_get_userbyid(p.proowner)), ', ' ORDER BY p.oid)
                                             FROM pg_proc p WHERE p.oid = ANY (code.calls)) END,
                      CASE WHEN EXISTS (SELECT 1 FROM community_scoped_tables r
                                        JOIN pg_namespace rn ON rn.nspname = r.table_schema
                                        JOIN pg_class rc ON rc.relnamespace = rn.oid AND rc.relname = r.table_name
                                        WHERE rc.oid = coalesce(pg_partition_root(c.oid), c.oid) AND r.purge_action = 'delete')
                           THEN 'DELETE' ELSE 'UPDATE' END,
                      n.nspname, c.relname, code.kind, code.object_name)
        FROM (SELECT target::oid AS oid UNION SELECT tree.relid FROM pg_partition_tree(target) tree) member
        CROSS JOIN LATERAL community_deletion_table_code(member.oid) code
        JOIN pg_class c ON c.oid = code.relid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE (code.kind = 'rule' OR cardinality(code.calls) > 0)
          AND (SELECT t.action = 'trust' AND t.digest = community_deletion_code_digest(code.relid, code.kind, code.object_name)
               FROM community_deletion_trusted_code t
               WHERE t.table_schema = n.nspname AND t.table_name = c.relname
                 AND t.kind = code.kind AND t.object_name = code.object_name
               ORDER BY t.sequence DESC LIMIT 1) IS NOT TRUE
        ORDER BY 1, 2
    $function$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_table_code(relation oid)
 RETURNS TABLE(relid oid, kind text, object_name name, object_class oid, object_id oid, calls oid[])
 LANGUAGE sql
 STABLE
 SET jit TO 'off'
 SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
AS $function$
        WITH registered AS (
            SELECT r.purge_action, root.relkind = 'p' AS partitioned
            FROM community_scoped_tables r
            JOIN pg_namespace n ON n.nspname = r.table_schema
            JOIN pg_class root ON root.relnamespace = n.oid AND root.relname = r.table_name
            WHERE root.oid = coalesce(pg_partition_root(relation), relation)
        ), objects AS (
            SELECT t.tgrelid AS relid, 'trigger'::text AS kind, t.tgname AS object_name,
                   'pg_trigger'::regclass::oid AS object_class, t.oid AS object_id
            FROM registered, pg_trigger t
            WHERE t.tgrelid = relation AND NOT t.tgisinternal AND t.tgparentid = 0
              AND CASE WHEN registered.purge_action = 'delete' THEN t.tgtype & 8 = 8
                       ELSE t.tgtype & 16 = 16 OR (registered.partitioned AND t.tgtype & 4 = 4) END
            UNION ALL
            SELECT w.ev_class, 'rule', w.rulename, 'pg_rewrite'::regclass::oid, w.oid
            FROM registered, pg_rewrite w
            WHERE w.ev_class = relation AND w.rulename <> '_RETURN'
              AND CASE WHEN registered.purge_action = 'delete' THEN w.ev_type = '4'
                       ELSE w.ev_type = '2' OR (registered.partitioned AND w.ev_type = '3') END
            UNION ALL
            SELECT k.conrelid, 'constraint', k.conname, 'pg_constraint'::regclass::oid, k.oid
            FROM registered, pg_constraint k
            WHERE registered.purge_action = 'nullify' AND k.conrelid = relation AND k.contype IN ('c', 'x') AND k.conislocal
            UNION ALL
            SELECT i.indrelid, 'index', ic.relname, 'pg_class'::regclass::oid, i.indexrelid
            FROM registered, pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid
            WHERE registered.purge_action = 'nullify' AND i.indrelid = relation
              AND (i.indexprs IS NOT NULL OR i.indpred IS NOT NULL)
              AND NOT EXISTS (SELECT 1 FROM pg_inherits h WHERE h.inhrelid = i.indexrelid)
            UNION ALL
            SELECT d.adrelid, 'column', a.attname, 'pg_attrdef'::regclass::oid, d.oid
            FROM registered, pg_attrdef d
            JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
            WHERE registered.purge_action = 'nullify' AND d.adrelid = relation AND a.attgenerated <> '' AND a.attislocal
        )
        SELECT o.relid, o.kind, o.object_name, o.object_class, o.object_id,
               coalesce(ARRAY(SELECT f FROM community_deletion_code_functions(o.object_class, o.object_id) f ORDER BY f), '{}')
        FROM objects o
    $function$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_code_functions(object_class oid, object_id oid)
 RETURNS SETOF oid
 LANGUAGE sql
 STABLE
 SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
AS $function$
        SELECT f.oid
        FROM (SELECT d.refobjid AS oid FROM pg_depend d
              WHERE d.classid = object_class AND d.objid = object_id AND d.refclassid = 'pg_proc'::regclass
              UNION
              SELECT o.oprcode::oid FROM pg_depend d JOIN pg_operator o ON o.oid = d.refobjid
              WHERE d.classid = object_class AND d.objid = object_id AND d.refclassid = 'pg_operator'::regclass
              UNION
              SELECT k.castfunc FROM pg_depend d JOIN pg_cast k ON k.oid = d.refobjid
              WHERE d.classid = object_class AND d.objid = object_id AND d.refclassid = 'pg_cast'::regclass
                AND k.castfunc <> 0) f
        JOIN pg_proc p ON p.oid = f.oid
        WHERE p.pronamespace <> 'pg_catalog'::regnamespace
          AND p.oid NOT IN (SELECT to_regprocedure('community_deletion.' || s) FROM unnest(community_deletion_installed_functions()) s
                            WHERE to_regprocedure('community_deletion.' || s) IS NOT NULL)
    $function$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_fence_bound(target oid, tenant_key name, parents jsonb)
 RETURNS boolean
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
AS $function$
        SELECT CASE
            WHEN parents IS NOT NULL THEN
                jsonb_typeof(parents) = 'array' AND jsonb_array_length(parents) > 0
                AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements(parents) p
                                WHERE coalesce((p.value -> 'hops' -> 0 ->> 'declared')::boolean, false)
                                  AND NOT coalesce((p.value -> 'hops' -> 0 ->> 'reverse')::boolean, false))
            ELSE EXISTS (
                SELECT 1
                FROM community_deletion_tenant_table d
                JOIN pg_namespace n ON n.nspname = d.table_schema
                JOIN pg_class tc ON tc.relnamespace = n.oid AND tc.relname = d.table_name
                JOIN pg_attribute ta ON ta.attrelid = tc.oid AND ta.attname = d.key_column AND NOT ta.attisdropped
                JOIN pg_attribute a ON a.attrelid = target AND a.attname = tenant_key AND a.attnum > 0 AND NOT a.attisdropped
                JOIN pg_constraint f ON f.conrelid = target AND f.contype = 'f' AND f.confrelid = tc.oid
                WHERE tc.oid <> target
                  AND f.conkey = ARRAY[a.attnum] AND f.confkey = ARRAY[ta.attnum])
        END
    $function$;
-- +goose StatementEnd
SELECT community_deletion.community_deletion_seal_functions();
