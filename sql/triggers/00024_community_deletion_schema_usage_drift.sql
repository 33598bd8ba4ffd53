-- The drift report names a schema of registered tables that a deletion role
-- may not use (issue 17). Attach grants the deletion roles their privileges
-- on the table, but not USAGE on its schema, which a table's owner may not
-- be able to grant: a service that registers analytics.events and forgets
-- GRANT USAGE ON SCHEMA analytics learnt of it only when the first real
-- inventory failed. Now the drift row 'schema_usage_missing' names the
-- schema, the roles and the GRANT, and, like every drift row, stops every
-- deletion until the grant is made; `deletionctl check` and the test kit's
-- Coverage report it too.
--
-- Down restores the drift report of migration 00023.

-- +goose Up
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_catalog_drift() RETURNS TABLE(table_name text, problem text)
    LANGUAGE sql STABLE
    SET jit = off
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
    WITH RECURSIVE home AS (
        SELECT c.relnamespace AS namespace, n.nspname AS nspname
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE c.oid = 'communities'::regclass
    ), registered AS (
        -- oid is NULL when the table is gone or has no uuid column named
        -- by its tenant key.
        SELECT r.table_name, r.purge_action, r.tenant_key, t.oid, t.attnotnull
        FROM community_scoped_tables r
        LEFT JOIN LATERAL (
            SELECT c.oid, a.attnotnull
            FROM pg_class c
            JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = r.table_schema
            JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = r.tenant_key AND NOT a.attisdropped
                AND a.atttypid = 'uuid'::regtype
            WHERE c.relname = r.table_name
              AND c.relkind IN ('r', 'p') AND NOT c.relispartition) t ON true
    ), tenant_table AS (
        -- The service's declared tenant table, when there is one.
        SELECT c.oid, d.key_column
        FROM community_deletion_tenant_table d
        JOIN pg_namespace n ON n.nspname = d.table_schema
        JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = d.table_name
    ), key_names AS (
        -- The names of tenant key columns: community_id and every
        -- registered key but the tenant table's own.
        SELECT 'community_id'::name AS name
        UNION
        SELECT r.tenant_key FROM community_scoped_tables r
        WHERE NOT EXISTS (SELECT 1 FROM community_deletion_tenant_table d
                          WHERE d.table_schema = r.table_schema AND d.table_name = r.table_name)
    ), tenant_chain AS (
        -- communities, the tenant table, every registered 'delete' table,
        -- and every table down a chain of foreign keys from them; the chain
        -- does not run on through a control table or a registered 'nullify'
        -- table (whose rows outlive a deletion).
        SELECT 'communities'::regclass::oid AS oid
        UNION
        SELECT tenant_table.oid FROM tenant_table
        UNION
        SELECT registered.oid FROM registered
        WHERE registered.purge_action = 'delete' AND registered.oid IS NOT NULL
        UNION
        SELECT f.conrelid
        FROM tenant_chain
        JOIN pg_constraint f ON f.contype = 'f' AND f.confrelid = tenant_chain.oid
        JOIN pg_class c ON c.oid = f.conrelid
        CROSS JOIN home
        WHERE c.relnamespace <> home.namespace
          AND NOT EXISTS (SELECT 1 FROM registered
                          WHERE registered.oid = c.oid AND registered.purge_action = 'nullify')
    ), live AS (
        -- Every table, in any schema but the system's and temporary ones, that
        -- looks like tenant data: a column named like a tenant key, of any
        -- type, or a foreign key to communities, the tenant table or (down a
        -- chain of foreign keys) a registered 'delete' table, under any
        -- column name; unless its owner excluded it.
        SELECT c.oid, c.relnamespace = home.namespace AS at_home, c.relname::text AS relname,
               format('%I.%I', n.nspname, c.relname) AS display_name,
               EXISTS (SELECT 1 FROM pg_constraint f JOIN tenant_chain ON tenant_chain.oid = f.confrelid
                       WHERE f.conrelid = c.oid AND f.contype = 'f') AS chained,
               (SELECT string_agg(format('its %I column is %s', a.attname, format_type(a.atttypid, a.atttypmod)), ', ' ORDER BY a.attname)
                FROM pg_attribute a JOIN key_names k ON k.name = a.attname
                WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped AND a.atttypid <> 'uuid'::regtype) AS wrong_keys,
               EXISTS (SELECT 1 FROM pg_attribute a JOIN key_names k ON k.name = a.attname
                       WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped AND a.atttypid = 'uuid'::regtype) AS uuid_key
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
               OR EXISTS (SELECT 1 FROM pg_constraint f JOIN tenant_chain ON tenant_chain.oid = f.confrelid
                          WHERE f.conrelid = c.oid AND f.contype = 'f'))
    ), fence_members AS (
        -- A registered table and, when it is partitioned, every partition.
        SELECT registered.table_name, registered.purge_action, registered.tenant_key, registered.oid
        FROM registered
        WHERE registered.oid IS NOT NULL
        UNION
        SELECT registered.table_name, registered.purge_action, registered.tenant_key, tree.relid
        FROM registered, pg_partition_tree(registered.oid) tree
        WHERE registered.oid IS NOT NULL
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
        WHERE t.tgfoid IN ('enforce_community_write_fence()'::regprocedure, 'enforce_community_kept_row_fence()'::regprocedure)
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
    -- Tenant data no deletion covers; where it can never be registered as
    -- it is, why.
    SELECT live.display_name,
           CASE WHEN live.at_home
                    THEN 'unregistered: it is in schema community_deletion, where no tenant table can be registered; move it to a schema of the service'
                WHEN live.wrong_keys IS NOT NULL AND NOT live.uuid_key AND NOT live.chained
                    THEN 'unregistered: ' || live.wrong_keys || '; a tenant key must be uuid'
                ELSE 'unregistered' END
    FROM live
    WHERE NOT EXISTS (SELECT 1 FROM registered WHERE registered.oid = live.oid)
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
    WHERE fence_members.purge_action = 'delete'
      AND NOT community_deletion_fenced(fence_members.oid, fence_members.tenant_key)
      AND NOT EXISTS (SELECT 1 FROM fence_defects WHERE fence_defects.table_name = fence_members.table_name)
    UNION ALL
    -- A registered 'nullify' table, or a partition, without its kept-row
    -- fence: a late write could link a kept row to a deleted tenant.
    SELECT DISTINCT fence_members.table_name, 'unfenced: no kept-row fence; run attach_community_write_fence again'
    FROM fence_members
    WHERE fence_members.purge_action = 'nullify'
      AND NOT community_deletion_kept_row_fenced(fence_members.oid, fence_members.tenant_key)
      AND NOT EXISTS (SELECT 1 FROM fence_defects WHERE fence_defects.table_name = fence_members.table_name)
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
      AND ((t.tgfoid = 'enforce_community_write_fence()'::regprocedure
            AND NOT EXISTS (SELECT 1 FROM fence_members
                            WHERE fence_members.oid = t.tgrelid AND fence_members.purge_action = 'delete'))
           OR (t.tgfoid = 'enforce_community_kept_row_fence()'::regprocedure
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
    -- A registered 'delete' table, or a partition, that is otherwise fenced
    -- but lacks attach's TRUNCATE fence: TRUNCATE would take a community's
    -- rows past the deletion.
    SELECT DISTINCT fence_members.table_name, 'unfenced: no TRUNCATE fence; run attach_community_write_fence again'
    FROM fence_members
    WHERE fence_members.purge_action = 'delete'
      AND community_deletion_fenced(fence_members.oid, fence_members.tenant_key)
      AND NOT EXISTS (SELECT 1 FROM pg_trigger t
                      WHERE t.tgrelid = fence_members.oid AND NOT t.tgisinternal
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
    GROUP BY s.table_schema    UNION ALL
    SELECT row_secured.table_name,
           format('row_security: its policies apply to %s; grant BYPASSRLS to each (or let it own the table), or disable row level security',
                  row_secured.logins)
    FROM row_secured
    ORDER BY 1, 2
    $$;
-- +goose StatementEnd

SELECT community_deletion.community_deletion_seal_functions();

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_catalog_drift() RETURNS TABLE(table_name text, problem text)
    LANGUAGE sql STABLE
    SET jit = off
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
    WITH RECURSIVE home AS (
        SELECT c.relnamespace AS namespace, n.nspname AS nspname
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE c.oid = 'communities'::regclass
    ), registered AS (
        -- oid is NULL when the table is gone or has no uuid column named
        -- by its tenant key.
        SELECT r.table_name, r.purge_action, r.tenant_key, t.oid, t.attnotnull
        FROM community_scoped_tables r
        LEFT JOIN LATERAL (
            SELECT c.oid, a.attnotnull
            FROM pg_class c
            JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = r.table_schema
            JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = r.tenant_key AND NOT a.attisdropped
                AND a.atttypid = 'uuid'::regtype
            WHERE c.relname = r.table_name
              AND c.relkind IN ('r', 'p') AND NOT c.relispartition) t ON true
    ), tenant_table AS (
        -- The service's declared tenant table, when there is one.
        SELECT c.oid, d.key_column
        FROM community_deletion_tenant_table d
        JOIN pg_namespace n ON n.nspname = d.table_schema
        JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = d.table_name
    ), key_names AS (
        -- The names of tenant key columns: community_id and every
        -- registered key but the tenant table's own.
        SELECT 'community_id'::name AS name
        UNION
        SELECT r.tenant_key FROM community_scoped_tables r
        WHERE NOT EXISTS (SELECT 1 FROM community_deletion_tenant_table d
                          WHERE d.table_schema = r.table_schema AND d.table_name = r.table_name)
    ), tenant_chain AS (
        -- communities, the tenant table, every registered 'delete' table,
        -- and every table down a chain of foreign keys from them; the chain
        -- does not run on through a control table or a registered 'nullify'
        -- table (whose rows outlive a deletion).
        SELECT 'communities'::regclass::oid AS oid
        UNION
        SELECT tenant_table.oid FROM tenant_table
        UNION
        SELECT registered.oid FROM registered
        WHERE registered.purge_action = 'delete' AND registered.oid IS NOT NULL
        UNION
        SELECT f.conrelid
        FROM tenant_chain
        JOIN pg_constraint f ON f.contype = 'f' AND f.confrelid = tenant_chain.oid
        JOIN pg_class c ON c.oid = f.conrelid
        CROSS JOIN home
        WHERE c.relnamespace <> home.namespace
          AND NOT EXISTS (SELECT 1 FROM registered
                          WHERE registered.oid = c.oid AND registered.purge_action = 'nullify')
    ), live AS (
        -- Every table, in any schema but the system's and temporary ones, that
        -- looks like tenant data: a column named like a tenant key, of any
        -- type, or a foreign key to communities, the tenant table or (down a
        -- chain of foreign keys) a registered 'delete' table, under any
        -- column name; unless its owner excluded it.
        SELECT c.oid, c.relnamespace = home.namespace AS at_home, c.relname::text AS relname,
               format('%I.%I', n.nspname, c.relname) AS display_name,
               EXISTS (SELECT 1 FROM pg_constraint f JOIN tenant_chain ON tenant_chain.oid = f.confrelid
                       WHERE f.conrelid = c.oid AND f.contype = 'f') AS chained,
               (SELECT string_agg(format('its %I column is %s', a.attname, format_type(a.atttypid, a.atttypmod)), ', ' ORDER BY a.attname)
                FROM pg_attribute a JOIN key_names k ON k.name = a.attname
                WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped AND a.atttypid <> 'uuid'::regtype) AS wrong_keys,
               EXISTS (SELECT 1 FROM pg_attribute a JOIN key_names k ON k.name = a.attname
                       WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped AND a.atttypid = 'uuid'::regtype) AS uuid_key
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
               OR EXISTS (SELECT 1 FROM pg_constraint f JOIN tenant_chain ON tenant_chain.oid = f.confrelid
                          WHERE f.conrelid = c.oid AND f.contype = 'f'))
    ), fence_members AS (
        -- A registered table and, when it is partitioned, every partition.
        SELECT registered.table_name, registered.purge_action, registered.tenant_key, registered.oid
        FROM registered
        WHERE registered.oid IS NOT NULL
        UNION
        SELECT registered.table_name, registered.purge_action, registered.tenant_key, tree.relid
        FROM registered, pg_partition_tree(registered.oid) tree
        WHERE registered.oid IS NOT NULL
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
        WHERE t.tgfoid IN ('enforce_community_write_fence()'::regprocedure, 'enforce_community_kept_row_fence()'::regprocedure)
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
    -- Tenant data no deletion covers; where it can never be registered as
    -- it is, why.
    SELECT live.display_name,
           CASE WHEN live.at_home
                    THEN 'unregistered: it is in schema community_deletion, where no tenant table can be registered; move it to a schema of the service'
                WHEN live.wrong_keys IS NOT NULL AND NOT live.uuid_key AND NOT live.chained
                    THEN 'unregistered: ' || live.wrong_keys || '; a tenant key must be uuid'
                ELSE 'unregistered' END
    FROM live
    WHERE NOT EXISTS (SELECT 1 FROM registered WHERE registered.oid = live.oid)
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
    WHERE fence_members.purge_action = 'delete'
      AND NOT community_deletion_fenced(fence_members.oid, fence_members.tenant_key)
      AND NOT EXISTS (SELECT 1 FROM fence_defects WHERE fence_defects.table_name = fence_members.table_name)
    UNION ALL
    -- A registered 'nullify' table, or a partition, without its kept-row
    -- fence: a late write could link a kept row to a deleted tenant.
    SELECT DISTINCT fence_members.table_name, 'unfenced: no kept-row fence; run attach_community_write_fence again'
    FROM fence_members
    WHERE fence_members.purge_action = 'nullify'
      AND NOT community_deletion_kept_row_fenced(fence_members.oid, fence_members.tenant_key)
      AND NOT EXISTS (SELECT 1 FROM fence_defects WHERE fence_defects.table_name = fence_members.table_name)
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
      AND ((t.tgfoid = 'enforce_community_write_fence()'::regprocedure
            AND NOT EXISTS (SELECT 1 FROM fence_members
                            WHERE fence_members.oid = t.tgrelid AND fence_members.purge_action = 'delete'))
           OR (t.tgfoid = 'enforce_community_kept_row_fence()'::regprocedure
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
    -- A registered 'delete' table, or a partition, that is otherwise fenced
    -- but lacks attach's TRUNCATE fence: TRUNCATE would take a community's
    -- rows past the deletion.
    SELECT DISTINCT fence_members.table_name, 'unfenced: no TRUNCATE fence; run attach_community_write_fence again'
    FROM fence_members
    WHERE fence_members.purge_action = 'delete'
      AND community_deletion_fenced(fence_members.oid, fence_members.tenant_key)
      AND NOT EXISTS (SELECT 1 FROM pg_trigger t
                      WHERE t.tgrelid = fence_members.oid AND NOT t.tgisinternal
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
    SELECT row_secured.table_name,
           format('row_security: its policies apply to %s; grant BYPASSRLS to each (or let it own the table), or disable row level security',
                  row_secured.logins)
    FROM row_secured
    ORDER BY 1, 2
    $$;
-- +goose StatementEnd

SELECT community_deletion.community_deletion_seal_functions();
