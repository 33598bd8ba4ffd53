-- Registry hardening, three of issue 16's smaller holes:
--
-- * The registry accepts only tables of the schema of communities, by their
--   owner: community_deletion_register_table() refuses a temporary table
--   (through which a role that owns nothing could record another owner's
--   table name) and a table of any other schema (42501).
-- * Temporary relations are not drift: the drift report ignores them and
--   their triggers, so a session's temporary table with a fence trigger no
--   longer blocks every approved request.
-- * A tenant table's owner attaches and detaches its table without any
--   deletion role: attach and detach no longer read the registry as their
--   caller (register and unregister, SECURITY DEFINER, say what it holds),
--   and the constant list community_deletion_control_table() is executable
--   by PUBLIC.

-- +goose Up

-- +goose StatementBegin
-- Records a tenant table in community_scoped_tables, the one way into the
-- registry. SECURITY DEFINER: the caller needs no privilege on the registry,
-- only to be (a member of) the table's owner; the registry guard checks the
-- table's shape and, for 'delete', its complete fence. Idempotent. It
-- refuses (42501) a temporary table, which only shadows a real table's name,
-- and a table outside the schema of communities, so the name it records is
-- the table its caller owns; and a change of purge action (22023).
CREATE OR REPLACE FUNCTION community_deletion_register_table(target regclass, purge_action text) RETURNS void
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    AS $$
DECLARE
    rel record;
    home oid := (SELECT c.relnamespace FROM pg_class c WHERE c.oid = 'communities'::regclass);
    registered_action text;
BEGIN
    SELECT c.relname, c.relowner, c.relnamespace, c.relpersistence INTO rel FROM pg_class c WHERE c.oid = target;
    IF rel.relpersistence = 't' OR rel.relnamespace = pg_my_temp_schema() OR pg_is_other_temp_schema(rel.relnamespace) THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = format('registration of %s refused: it is a temporary table; attach the table of schema %s by its qualified name',
                             target, home::regnamespace);
    END IF;
    IF rel.relnamespace IS DISTINCT FROM home THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = format('registration of %s refused: it is not in schema %s, where tenant tables are registered; create it there and attach it',
                             target, home::regnamespace);
    END IF;
    IF rel.relname IS NULL OR NOT pg_has_role(session_user, rel.relowner, 'MEMBER') THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = format('registration of %s refused: role %s does not own it', target, session_user);
    END IF;
    SELECT registered.purge_action INTO registered_action
    FROM community_scoped_tables registered WHERE registered.table_name = rel.relname;
    IF registered_action IS NOT NULL AND registered_action <> purge_action THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('%s is registered with purge_action %L; it cannot change to %L',
                             target, registered_action, purge_action);
    END IF;
    INSERT INTO community_scoped_tables (table_name, purge_action)
    VALUES (rel.relname, purge_action)
    ON CONFLICT (table_name) DO NOTHING;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Registers a tenant table with the deletion lifecycle. Only the table's
-- owner (a role with its privileges) may: for a 'delete' table it puts the
-- write fence on the table and each of its partitions; it grants
-- community_deletion_executor what the purge needs (SELECT, UPDATE, DELETE on
-- a 'delete' table and its partitions; SELECT and UPDATE of community_id on a
-- 'nullify' table) and community_deletion_operator SELECT of community_id for
-- the inventory's row counts; then it records the table through
-- community_deletion_register_table(). Idempotent: run it again after adding
-- partitions. It refuses tables outside the schema of communities,
-- partitions, control-plane tables, tables without a community_id uuid
-- column, a nullable community_id on a 'delete' table or a NOT NULL one on a
-- 'nullify' table, and a change of purge action (SQLSTATE 22023); a
-- temporary table, which only shadows a real one's name, with 42501. It
-- needs no deletion role: what it reads of the registry it reads through
-- community_deletion_register_table().
CREATE OR REPLACE FUNCTION attach_community_write_fence(target regclass, purge_action text DEFAULT 'delete')
    RETURNS void
    LANGUAGE plpgsql VOLATILE
    AS $$
DECLARE
    rel record;
    column_type regtype;
    column_not_null boolean;
    member regclass;
BEGIN
    IF purge_action IS NULL OR purge_action NOT IN ('delete', 'nullify') THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('purge_action must be ''delete'' or ''nullify'', not %L', purge_action);
    END IF;
    SELECT c.relname, c.relkind, c.relispartition, c.relnamespace, c.relowner, c.relpersistence INTO rel
    FROM pg_class c WHERE c.oid = target;
    IF rel.relpersistence = 't' THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = format('attach of %s refused: it is a temporary table; attach the table of the schema of communities by its qualified name', target);
    END IF;
    IF rel.relnamespace IS DISTINCT FROM (SELECT c.relnamespace FROM pg_class c WHERE c.oid = 'communities'::regclass) THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('%s is not in the schema of communities', target);
    END IF;
    IF rel.relkind NOT IN ('r', 'p') THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = format('%s is not a table', target);
    END IF;
    IF rel.relispartition THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('%s is a partition: attach its partitioned parent', target);
    END IF;
    IF community_deletion_control_table(rel.relname) THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('%s is a deletion control-plane table', target);
    END IF;
    IF NOT pg_has_role(current_user, rel.relowner, 'USAGE') THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = format('attach of %s refused: only its owner (%s) may register it', target, pg_get_userbyid(rel.relowner));
    END IF;
    SELECT a.atttypid::regtype, a.attnotnull INTO column_type, column_not_null
    FROM pg_attribute a
    WHERE a.attrelid = target AND a.attname = 'community_id' AND NOT a.attisdropped;
    IF column_type IS DISTINCT FROM 'uuid'::regtype THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('%s has no community_id uuid column', target);
    END IF;
    IF purge_action = 'delete' AND NOT column_not_null THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('%s.community_id must be NOT NULL to be purged by deletion', target);
    END IF;
    IF purge_action = 'nullify' AND column_not_null THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('%s.community_id must be nullable to be cleared by deletion', target);
    END IF;

    -- A change of purge action is refused by community_deletion_register_table()
    -- below, which rolls back the triggers and grants made here.
    FOR member IN SELECT tree.relid FROM pg_partition_tree(target) tree UNION SELECT target LOOP
        IF purge_action = 'delete' THEN
            EXECUTE format('CREATE OR REPLACE TRIGGER community_write_fence_insert AFTER INSERT ON %s '
                           'REFERENCING NEW TABLE AS community_fence_new '
                           'FOR EACH STATEMENT EXECUTE FUNCTION enforce_community_write_fence()', member);
            EXECUTE format('CREATE OR REPLACE TRIGGER community_write_fence_update AFTER UPDATE ON %s '
                           'REFERENCING OLD TABLE AS community_fence_old NEW TABLE AS community_fence_new '
                           'FOR EACH STATEMENT EXECUTE FUNCTION enforce_community_write_fence()', member);
            EXECUTE format('CREATE OR REPLACE TRIGGER community_write_fence_delete AFTER DELETE ON %s '
                           'REFERENCING OLD TABLE AS community_fence_old '
                           'FOR EACH STATEMENT EXECUTE FUNCTION enforce_community_write_fence()', member);
            EXECUTE format('GRANT SELECT, UPDATE, DELETE ON %s TO community_deletion_executor', member);
        ELSE
            EXECUTE format('GRANT SELECT, UPDATE (community_id) ON %s TO community_deletion_executor', member);
        END IF;
        EXECUTE format('GRANT SELECT (community_id) ON %s TO community_deletion_operator', member);
    END LOOP;
    PERFORM community_deletion_register_table(target, purge_action);
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Unregisters a tenant table: only its owner may, and not while a deletion
-- is in flight (a request approved and not yet purged), since its rows would
-- escape the purge the approval covered. It removes the table through
-- community_deletion_unregister_table(), then drops the write fence from the
-- table and its partitions and revokes what attach granted. A temporary
-- table is refused (42501). It needs no deletion role.
CREATE OR REPLACE FUNCTION detach_community_write_fence(target regclass) RETURNS void
    LANGUAGE plpgsql VOLATILE
    AS $$
DECLARE
    rel record;
    member regclass;
BEGIN
    SELECT c.relname, c.relowner, c.relpersistence INTO rel FROM pg_class c WHERE c.oid = target;
    IF rel.relpersistence = 't' THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = format('detach of %s refused: it is a temporary table; detach the table of the schema of communities by its qualified name', target);
    END IF;
    IF NOT pg_has_role(current_user, rel.relowner, 'USAGE') THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = format('detach of %s refused: only its owner (%s) may unregister it', target, pg_get_userbyid(rel.relowner));
    END IF;
    -- Whether it is registered, community_deletion_unregister_table() says
    -- (22023), so the owner needs no privilege on the registry.
    IF (SELECT c.relnamespace FROM pg_class c WHERE c.oid = target)
       IS DISTINCT FROM (SELECT c.relnamespace FROM pg_class c WHERE c.oid = 'communities'::regclass) THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = format('%s is not a registered tenant table', target);
    END IF;
    PERFORM community_deletion_unregister_table(rel.relname);
    FOR member IN SELECT tree.relid FROM pg_partition_tree(target) tree UNION SELECT target LOOP
        EXECUTE format('DROP TRIGGER IF EXISTS community_write_fence_insert ON %s', member);
        EXECUTE format('DROP TRIGGER IF EXISTS community_write_fence_update ON %s', member);
        EXECUTE format('DROP TRIGGER IF EXISTS community_write_fence_delete ON %s', member);
        EXECUTE format('REVOKE SELECT, UPDATE, DELETE ON %s FROM community_deletion_executor', member);
        EXECUTE format('REVOKE SELECT (community_id), UPDATE (community_id) ON %s FROM community_deletion_executor', member);
        EXECUTE format('REVOKE SELECT (community_id) ON %s FROM community_deletion_operator', member);
    END LOOP;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The drift report, as migration 00015 left it, except that temporary
-- relations are never drift: a temporary table (with or without a fence
-- trigger) lives only as long as its session and is never registered.
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
-- Fixes the search_path of every installed function (pg_catalog, the schema
-- of communities, pg_temp last) except the two that qualify every name
-- instead, because they run on every tenant write; revokes PUBLIC's default
-- EXECUTE from all of them but the five that check their caller themselves
-- and the pure list of control-plane tables attach consults as its caller;
-- and records their digests for the drift report.
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

SELECT community_deletion_seal_functions();

-- +goose Down

-- +goose StatementBegin
-- Fixes the search_path of every installed function (pg_catalog, the schema
-- of communities, pg_temp last) except the two that qualify every name
-- instead, because they run on every tenant write; revokes PUBLIC's default
-- EXECUTE from all of them but the five that check their caller themselves;
-- and records their digests for the drift report.
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
                  'enforce_community_write_fence()') THEN
            -- These check their caller themselves (a table's owner), or
            -- are trigger functions a table's owner must name.
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
-- Unregisters a tenant table: only its owner may, and not while a deletion
-- is in flight (a request approved and not yet purged), since its rows would
-- escape the purge the approval covered. It removes the table through
-- community_deletion_unregister_table(), then drops the write fence from the
-- table and its partitions and revokes what attach granted.
CREATE OR REPLACE FUNCTION detach_community_write_fence(target regclass) RETURNS void
    LANGUAGE plpgsql VOLATILE
    AS $$
DECLARE
    rel record;
    member regclass;
BEGIN
    SELECT c.relname, c.relowner INTO rel FROM pg_class c WHERE c.oid = target;
    IF NOT pg_has_role(current_user, rel.relowner, 'USAGE') THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = format('detach of %s refused: only its owner (%s) may unregister it', target, pg_get_userbyid(rel.relowner));
    END IF;
    IF (SELECT c.relnamespace FROM pg_class c WHERE c.oid = target)
       IS DISTINCT FROM (SELECT c.relnamespace FROM pg_class c WHERE c.oid = 'communities'::regclass)
       OR NOT EXISTS (SELECT 1 FROM community_scoped_tables r WHERE r.table_name = rel.relname) THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = format('%s is not a registered tenant table', target);
    END IF;
    PERFORM community_deletion_unregister_table(rel.relname);
    FOR member IN SELECT tree.relid FROM pg_partition_tree(target) tree UNION SELECT target LOOP
        EXECUTE format('DROP TRIGGER IF EXISTS community_write_fence_insert ON %s', member);
        EXECUTE format('DROP TRIGGER IF EXISTS community_write_fence_update ON %s', member);
        EXECUTE format('DROP TRIGGER IF EXISTS community_write_fence_delete ON %s', member);
        EXECUTE format('REVOKE SELECT, UPDATE, DELETE ON %s FROM community_deletion_executor', member);
        EXECUTE format('REVOKE SELECT (community_id), UPDATE (community_id) ON %s FROM community_deletion_executor', member);
        EXECUTE format('REVOKE SELECT (community_id) ON %s FROM community_deletion_operator', member);
    END LOOP;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Registers a tenant table with the deletion lifecycle. Only the table's
-- owner (a role with its privileges) may: for a 'delete' table it puts the
-- write fence on the table and each of its partitions; it grants
-- community_deletion_executor what the purge needs (SELECT, UPDATE, DELETE on
-- a 'delete' table and its partitions; SELECT and UPDATE of community_id on a
-- 'nullify' table) and community_deletion_operator SELECT of community_id for
-- the inventory's row counts; then it records the table through
-- community_deletion_register_table(). Idempotent: run it again after adding
-- partitions. It refuses tables outside the schema of communities,
-- partitions, control-plane tables, tables without a community_id uuid
-- column, a nullable community_id on a 'delete' table or a NOT NULL one on a
-- 'nullify' table, and a change of purge action (SQLSTATE 22023).
CREATE OR REPLACE FUNCTION attach_community_write_fence(target regclass, purge_action text DEFAULT 'delete')
    RETURNS void
    LANGUAGE plpgsql VOLATILE
    AS $$
DECLARE
    rel record;
    column_type regtype;
    column_not_null boolean;
    registered_action text;
    member regclass;
BEGIN
    IF purge_action IS NULL OR purge_action NOT IN ('delete', 'nullify') THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('purge_action must be ''delete'' or ''nullify'', not %L', purge_action);
    END IF;
    SELECT c.relname, c.relkind, c.relispartition, c.relnamespace, c.relowner INTO rel
    FROM pg_class c WHERE c.oid = target;
    IF rel.relnamespace IS DISTINCT FROM (SELECT c.relnamespace FROM pg_class c WHERE c.oid = 'communities'::regclass) THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('%s is not in the schema of communities', target);
    END IF;
    IF rel.relkind NOT IN ('r', 'p') THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = format('%s is not a table', target);
    END IF;
    IF rel.relispartition THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('%s is a partition: attach its partitioned parent', target);
    END IF;
    IF community_deletion_control_table(rel.relname) THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('%s is a deletion control-plane table', target);
    END IF;
    IF NOT pg_has_role(current_user, rel.relowner, 'USAGE') THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = format('attach of %s refused: only its owner (%s) may register it', target, pg_get_userbyid(rel.relowner));
    END IF;
    SELECT a.atttypid::regtype, a.attnotnull INTO column_type, column_not_null
    FROM pg_attribute a
    WHERE a.attrelid = target AND a.attname = 'community_id' AND NOT a.attisdropped;
    IF column_type IS DISTINCT FROM 'uuid'::regtype THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('%s has no community_id uuid column', target);
    END IF;
    IF purge_action = 'delete' AND NOT column_not_null THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('%s.community_id must be NOT NULL to be purged by deletion', target);
    END IF;
    IF purge_action = 'nullify' AND column_not_null THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('%s.community_id must be nullable to be cleared by deletion', target);
    END IF;

    SELECT registered.purge_action INTO registered_action
    FROM community_scoped_tables registered WHERE registered.table_name = rel.relname;
    IF registered_action IS NOT NULL AND registered_action <> purge_action THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('%s is registered with purge_action %L; it cannot change to %L',
                             target, registered_action, purge_action);
    END IF;

    FOR member IN SELECT tree.relid FROM pg_partition_tree(target) tree UNION SELECT target LOOP
        IF purge_action = 'delete' THEN
            EXECUTE format('CREATE OR REPLACE TRIGGER community_write_fence_insert AFTER INSERT ON %s '
                           'REFERENCING NEW TABLE AS community_fence_new '
                           'FOR EACH STATEMENT EXECUTE FUNCTION enforce_community_write_fence()', member);
            EXECUTE format('CREATE OR REPLACE TRIGGER community_write_fence_update AFTER UPDATE ON %s '
                           'REFERENCING OLD TABLE AS community_fence_old NEW TABLE AS community_fence_new '
                           'FOR EACH STATEMENT EXECUTE FUNCTION enforce_community_write_fence()', member);
            EXECUTE format('CREATE OR REPLACE TRIGGER community_write_fence_delete AFTER DELETE ON %s '
                           'REFERENCING OLD TABLE AS community_fence_old '
                           'FOR EACH STATEMENT EXECUTE FUNCTION enforce_community_write_fence()', member);
            EXECUTE format('GRANT SELECT, UPDATE, DELETE ON %s TO community_deletion_executor', member);
        ELSE
            EXECUTE format('GRANT SELECT, UPDATE (community_id) ON %s TO community_deletion_executor', member);
        END IF;
        EXECUTE format('GRANT SELECT (community_id) ON %s TO community_deletion_operator', member);
    END LOOP;
    PERFORM community_deletion_register_table(target, purge_action);
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Records a tenant table in community_scoped_tables, the one way into the
-- registry. SECURITY DEFINER: the caller needs no privilege on the registry,
-- only to be (a member of) the table's owner; the registry guard checks the
-- table's shape and, for 'delete', its complete fence. Idempotent.
CREATE OR REPLACE FUNCTION community_deletion_register_table(target regclass, purge_action text) RETURNS void
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    AS $$
DECLARE
    rel record;
BEGIN
    SELECT c.relname, c.relowner INTO rel FROM pg_class c WHERE c.oid = target;
    IF rel.relname IS NULL OR NOT pg_has_role(session_user, rel.relowner, 'MEMBER') THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = format('registration of %s refused: role %s does not own it', target, session_user);
    END IF;
    INSERT INTO community_scoped_tables (table_name, purge_action)
    VALUES (rel.relname, purge_action)
    ON CONFLICT (table_name) DO NOTHING;
END
$$;
-- +goose StatementEnd

SELECT community_deletion_seal_functions();
