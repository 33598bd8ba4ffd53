-- The DDL guard as the release before migration 00021 shipped it (in the
-- schema of communities), kept to test that installing today's guard over
-- it replaces it. Not shipped.
-- The optional DDL guard: an event trigger that makes owner-level tampering
-- with the deletion schema impossible, not only visible. A table owner can
-- always ALTER its own objects; an event trigger sees every DDL command of
-- every role, so a superuser installs it once, after the migrations:
--
--     go run ./cmd/migrate install-ddl-guard   (or: psql -f this file, as a superuser)
--
-- At the end of every DDL command it refuses (SQLSTATE 42501) a command that
-- leaves any of these:
--   * a function the migrations installed changed, dropped, re-owned or
--     re-configured (its digest differs from the one the migrations recorded);
--   * a guard trigger of a control table missing, disabled, firing for
--     replication sessions only or calling another function; and any
--     CREATE TRIGGER on a control table (a new trigger, or a guard trigger
--     replaced with fewer events or another WHEN clause);
--   * a registered 'delete' table, or one of its partitions, without a whole
--     fence: for each of INSERT, UPDATE and DELETE an enabled AFTER ...
--     FOR EACH STATEMENT trigger of enforce_community_write_fence(), with its
--     transition tables, no WHEN clause and no column list;
--   * a table outside the registry (a detached partition) that still holds
--     rows and carries part of a fence;
--   * a registered table dropped, renamed, or reshaped (community_id gone,
--     retyped or of the wrong nullability);
--   * a registered table (or partition) whose row-level security applies to
--     a login of the executor or operator role;
--   * a table rewrite of a registered table (ALTER COLUMN ... TYPE ...
--     USING, for one) that changes any row of a community that is not
--     active: a second event trigger, on table_rewrite, digests those rows
--     before the rewrite;
--   * a change to a control table's indexes, constraints, triggers or column
--     domains (their digest is kept in community_deletion_ddl_guard_state
--     and moves on only in migration runs).
-- Every table of a registered 'delete' table also gets a BEFORE TRUNCATE
-- trigger, community_deletion_truncate_fence, that refuses TRUNCATE (55000)
-- while any community is quiescing or fenced; the guard adds it with each
-- new write fence and refuses DDL that drops, disables or narrows it.
-- A new partition of a registered 'delete' table (CREATE TABLE ... PARTITION
-- OF, ALTER TABLE ... ATTACH PARTITION) is fenced and granted at once, as
-- attach_community_write_fence() would; one that holds rows of a community
-- that is not active is refused. A command that only creates fence triggers
-- exactly as attach does is not refused (attach builds a fence one trigger
-- at a time): it can only add or restore protection.
--
-- The one exemption is a migration run of this project: a session whose
-- login (session_user) is a member of the role that owns communities and
-- that holds the schema-destruction lock exclusively. The lock alone, which
-- any role may take, exempts nothing.
--
-- The guard runs as its superuser owner with search_path = pg_catalog,
-- pg_temp: every table and function of the deletion schema it names is
-- qualified with the schema of communities, and it calls none of that
-- schema's functions but the two constant lists
-- community_deletion_guard_triggers() and community_deletion_control_table(),
-- so nothing a role that may CREATE in that schema plants runs inside it.
--
-- It is installed in the schema of communities (found through the
-- installing session's search_path). It refuses every DDL command (failing
-- closed) once the deletion schema's functions are gone: uninstall it
-- before migrating down past version 11. Remove it with
-- `migrate uninstall-ddl-guard`.

DO $install$
DECLARE
    home text := (SELECT n.nspname FROM pg_catalog.pg_class c
                  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                  WHERE c.oid = 'communities'::pg_catalog.regclass);
    member record;
BEGIN
    DROP EVENT TRIGGER IF EXISTS community_deletion_ddl_guard;
    EXECUTE pg_catalog.replace($truncate$
CREATE OR REPLACE FUNCTION @home@.community_deletion_ddl_guard_truncate() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS $body$
BEGIN
    IF EXISTS (SELECT 1 FROM @home@.communities c
               WHERE c.deletion_state OPERATOR(pg_catalog.=) ANY (ARRAY['quiescing', 'fenced']::pg_catalog.text[])) THEN
        RAISE EXCEPTION USING ERRCODE = '55000',
            MESSAGE = pg_catalog.format('TRUNCATE of %I.%I refused: a community is being deleted, and TRUNCATE would take its rows past the deletion; delete rows by community, or truncate once no deletion is under way',
                                        TG_TABLE_SCHEMA, TG_TABLE_NAME);
    END IF;
    RETURN NULL;
END
$body$
$truncate$, '@home@', pg_catalog.quote_ident(home));
    EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %I.community_deletion_ddl_guard_truncate() FROM PUBLIC', home);
    -- Every table of a registered 'delete' table's partition tree gets its
    -- TRUNCATE fence; the guard adds it to each table fenced later.
    FOR member IN EXECUTE pg_catalog.format($members$
        SELECT part.relid::pg_catalog.regclass AS relid
        FROM %1$I.community_scoped_tables r
        JOIN pg_catalog.pg_class c ON c.relname OPERATOR(pg_catalog.=) r.table_name
            AND c.relnamespace OPERATOR(pg_catalog.=) %2$L::pg_catalog.regnamespace::pg_catalog.oid
            AND c.relkind OPERATOR(pg_catalog.=) ANY (ARRAY['r', 'p']::pg_catalog."char"[]) AND NOT c.relispartition
        CROSS JOIN LATERAL (SELECT c.oid UNION SELECT tree.relid::pg_catalog.oid
                            FROM pg_catalog.pg_partition_tree(c.oid::pg_catalog.regclass) tree) part (relid)
        WHERE r.purge_action OPERATOR(pg_catalog.=) 'delete'
          AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger t
                          WHERE t.tgrelid OPERATOR(pg_catalog.=) part.relid
                            AND t.tgname OPERATOR(pg_catalog.=) 'community_deletion_truncate_fence')
        $members$, home, pg_catalog.quote_ident(home))
    LOOP
        EXECUTE pg_catalog.format('CREATE TRIGGER community_deletion_truncate_fence BEFORE TRUNCATE ON %s '
                                  'FOR EACH STATEMENT EXECUTE FUNCTION %I.community_deletion_ddl_guard_truncate()', member.relid, home);
    END LOOP;
    -- The control tables' indexes, constraints, triggers and column domains,
    -- as the guard last accepted them (at install, and after each command of
    -- a migration run).
    EXECUTE pg_catalog.replace(pg_catalog.replace($digest$
CREATE OR REPLACE FUNCTION @home@.community_deletion_ddl_guard_control_tables() RETURNS pg_catalog.oid[]
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $body$
        SELECT coalesce(pg_catalog.array_agg(c.oid ORDER BY c.oid), '{}')
        FROM pg_catalog.pg_class c
        WHERE c.relnamespace OPERATOR(pg_catalog.=) @homeoid@
          AND c.relkind OPERATOR(pg_catalog.=) ANY (ARRAY['r', 'p']::pg_catalog."char"[])
          AND @home@.community_deletion_control_table(c.relname::pg_catalog.text)
$body$;

CREATE OR REPLACE FUNCTION @home@.community_deletion_ddl_guard_control_digest(tables pg_catalog.oid[]) RETURNS text
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $body$
    WITH control AS (
        SELECT c.oid, c.relname
        FROM pg_catalog.pg_class c
        WHERE c.oid OPERATOR(pg_catalog.=) ANY (tables)
    )
    SELECT pg_catalog.md5(coalesce(pg_catalog.string_agg(item.line, E'\n' ORDER BY item.line), ''))
    FROM (
        -- Raw catalog columns (expressions as their node trees): cheaper than
        -- deparsing, and as exact.
        SELECT pg_catalog.concat_ws(' ', 'index', control.relname, x.relname, i.indkey, i.indclass, i.indoption,
                                    i.indcollation, i.indisunique, i.indisprimary, i.indisexclusion, i.indimmediate,
                                    i.indisvalid, i.indisready, i.indislive, i.indnullsnotdistinct, x.relam,
                                    i.indexprs, i.indpred) AS line
        FROM control
        JOIN pg_catalog.pg_index i ON i.indrelid OPERATOR(pg_catalog.=) control.oid
        JOIN pg_catalog.pg_class x ON x.oid OPERATOR(pg_catalog.=) i.indexrelid
        UNION ALL
        SELECT pg_catalog.concat_ws(' ', 'constraint', control.relname, k.conname, k.contype, k.condeferrable,
                                    k.condeferred, k.convalidated, k.conkey, k.confrelid, k.confkey, k.confupdtype,
                                    k.confdeltype, k.confmatchtype, k.conexclop, k.connoinherit, k.conbin)
        FROM control JOIN pg_catalog.pg_constraint k ON k.conrelid OPERATOR(pg_catalog.=) control.oid
        UNION ALL
        SELECT pg_catalog.concat_ws(' ', 'trigger', control.relname, t.tgname, t.tgfoid, t.tgtype, t.tgenabled,
                                    t.tgdeferrable, t.tginitdeferred, t.tgattr, t.tgargs, t.tgqual,
                                    t.tgoldtable, t.tgnewtable)
        FROM control JOIN pg_catalog.pg_trigger t ON t.tgrelid OPERATOR(pg_catalog.=) control.oid AND NOT t.tgisinternal
        UNION ALL
        SELECT DISTINCT pg_catalog.concat_ws(' ', 'domain', ty.typname, ty.typbasetype, ty.typtypmod, ty.typnotnull,
                                             k.conname, k.convalidated, k.conbin)
        FROM control
        JOIN pg_catalog.pg_attribute a ON a.attrelid OPERATOR(pg_catalog.=) control.oid AND NOT a.attisdropped
        JOIN pg_catalog.pg_type ty ON ty.oid OPERATOR(pg_catalog.=) a.atttypid AND ty.typtype OPERATOR(pg_catalog.=) 'd'
        LEFT JOIN pg_catalog.pg_constraint k ON k.contypid OPERATOR(pg_catalog.=) ty.oid
    ) item
$body$
$digest$, '@homeoid@', pg_catalog.format('%L::pg_catalog.regnamespace::pg_catalog.oid', pg_catalog.quote_ident(home))),
       '@home@', pg_catalog.quote_ident(home));
    EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %I.community_deletion_ddl_guard_control_tables() FROM PUBLIC', home);
    EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %I.community_deletion_ddl_guard_control_digest(pg_catalog.oid[]) FROM PUBLIC', home);
    EXECUTE pg_catalog.format('CREATE TABLE IF NOT EXISTS %I.community_deletion_ddl_guard_state ('
                              'singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton), '
                              'control_tables oid[] NOT NULL, control_digest text NOT NULL)', home);
    EXECUTE pg_catalog.format('REVOKE ALL ON %I.community_deletion_ddl_guard_state FROM PUBLIC', home);
    EXECUTE pg_catalog.format('INSERT INTO %1$I.community_deletion_ddl_guard_state (control_tables, control_digest) '
                              'SELECT t.oids, %1$I.community_deletion_ddl_guard_control_digest(t.oids) '
                              'FROM (SELECT %1$I.community_deletion_ddl_guard_control_tables() AS oids) t '
                              'ON CONFLICT (singleton) DO UPDATE SET control_tables = excluded.control_tables, '
                              'control_digest = excluded.control_digest', home);
    -- Table rewrites of registered tables: the rows of every community that
    -- is not active, digested before the rewrite and compared after it.
    EXECUTE pg_catalog.replace($rewrite$
CREATE OR REPLACE FUNCTION @home@.community_deletion_ddl_guard_rows_digest(relation pg_catalog.regclass) RETURNS text
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $body$
DECLARE
    digest text;
BEGIN
    EXECUTE pg_catalog.format('SELECT pg_catalog.md5(coalesce(pg_catalog.string_agg(m.line, E''\n'' ORDER BY m.line), '''')) '
                              'FROM (SELECT m::pg_catalog.text AS line FROM %s m '
                              'WHERE m.community_id IN (SELECT c.id FROM @home@.communities c '
                              'WHERE c.deletion_state OPERATOR(pg_catalog.<>) ''active'')) m', relation) INTO digest;
    RETURN digest;
END
$body$;

CREATE OR REPLACE FUNCTION @home@.community_deletion_ddl_guard_rewrite() RETURNS event_trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS $body$
DECLARE
    relation pg_catalog.oid := pg_catalog.pg_event_trigger_table_rewrite_oid();
BEGIN
    IF EXISTS (
        SELECT 1
        FROM @home@.community_scoped_tables r
        JOIN pg_catalog.pg_class c ON c.relname OPERATOR(pg_catalog.=) r.table_name
            AND c.relnamespace OPERATOR(pg_catalog.=) (SELECT x.relnamespace FROM pg_catalog.pg_class x
                                                        WHERE x.oid OPERATOR(pg_catalog.=) '@home@.communities'::pg_catalog.regclass::pg_catalog.oid)
            AND NOT c.relispartition
        CROSS JOIN LATERAL (SELECT c.oid UNION SELECT tree.relid::pg_catalog.oid
                            FROM pg_catalog.pg_partition_tree(c.oid::pg_catalog.regclass) tree) part (relid)
        WHERE part.relid OPERATOR(pg_catalog.=) relation)
       AND EXISTS (SELECT 1 FROM pg_catalog.pg_attribute a
                   WHERE a.attrelid OPERATOR(pg_catalog.=) relation AND a.attname OPERATOR(pg_catalog.=) 'community_id'
                     AND NOT a.attisdropped) THEN
        INSERT INTO @home@.community_deletion_ddl_guard_rewrites (xid, relid, digest)
        VALUES (pg_catalog.txid_current(), relation,
                @home@.community_deletion_ddl_guard_rows_digest(relation::pg_catalog.regclass));
    END IF;
END
$body$;
$rewrite$, '@home@', pg_catalog.quote_ident(home));
    EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %I.community_deletion_ddl_guard_rows_digest(pg_catalog.regclass) FROM PUBLIC', home);
    EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %I.community_deletion_ddl_guard_rewrite() FROM PUBLIC', home);
    EXECUTE pg_catalog.format('CREATE TABLE IF NOT EXISTS %I.community_deletion_ddl_guard_rewrites ('
                              'xid bigint NOT NULL, relid oid NOT NULL, digest text, PRIMARY KEY (xid, relid))', home);
    EXECUTE pg_catalog.format('REVOKE ALL ON %I.community_deletion_ddl_guard_rewrites FROM PUBLIC', home);
    DROP EVENT TRIGGER IF EXISTS community_deletion_ddl_guard_rewrite;
    EXECUTE pg_catalog.format('CREATE EVENT TRIGGER community_deletion_ddl_guard_rewrite ON table_rewrite '
                              'EXECUTE FUNCTION %I.community_deletion_ddl_guard_rewrite()', home);
    EXECUTE pg_catalog.replace(pg_catalog.replace($guard$
CREATE OR REPLACE FUNCTION @home@.community_deletion_ddl_guard() RETURNS event_trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS $body$
DECLARE
    home_prefix constant text := @homeprefix@;
    communities_table pg_catalog.oid;
    home_namespace pg_catalog.oid;
    fence_function pg_catalog.oid;
    truncate_function pg_catalog.oid;
    member record;
    problem record;
    foreign_rows boolean;
BEGIN
    communities_table := pg_catalog.to_regclass(home_prefix OPERATOR(pg_catalog.||) 'communities');
    -- A table rewrite of a registered table (ALTER COLUMN ... TYPE ...
    -- USING, for one) must leave the rows of every community that is not
    -- active as they were: recorded before it by the table_rewrite trigger.
    FOR member IN
        SELECT w.relid::pg_catalog.regclass AS relid, w.digest
        FROM @home@.community_deletion_ddl_guard_rewrites w
        WHERE w.xid OPERATOR(pg_catalog.=) pg_catalog.txid_current()
    LOOP
        DELETE FROM @home@.community_deletion_ddl_guard_rewrites w
        WHERE w.xid OPERATOR(pg_catalog.=) pg_catalog.txid_current()
          AND w.relid OPERATOR(pg_catalog.=) member.relid::pg_catalog.oid;
        IF @home@.community_deletion_ddl_guard_rows_digest(member.relid) IS DISTINCT FROM member.digest THEN
            RAISE EXCEPTION USING ERRCODE = '42501',
                MESSAGE = pg_catalog.format('DDL refused: %s rewrites %s and changes rows of a community that is being deleted or deleted; change it once no deletion is under way, without moving rows between communities',
                                            TG_TAG, member.relid);
        END IF;
    END LOOP;
    -- A migration run of this project: a login of the schema's owner that
    -- holds the schema-destruction lock exclusively at session level.
    IF EXISTS (
        SELECT 1 FROM pg_catalog.pg_locks l
        WHERE l.locktype OPERATOR(pg_catalog.=) 'advisory' AND l.pid OPERATOR(pg_catalog.=) pg_catalog.pg_backend_pid()
          AND l.granted AND l.mode OPERATOR(pg_catalog.=) 'ExclusiveLock' AND l.objsubid OPERATOR(pg_catalog.=) 1
          AND l.database OPERATOR(pg_catalog.=) (SELECT d.oid FROM pg_catalog.pg_database d
                                                  WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())
          AND l.classid OPERATOR(pg_catalog.=) ((7161976178216365409::pg_catalog.int8 OPERATOR(pg_catalog.>>) 32)
                                                 OPERATOR(pg_catalog.&) 4294967295)::pg_catalog.oid
          AND l.objid OPERATOR(pg_catalog.=) (7161976178216365409::pg_catalog.int8
                                               OPERATOR(pg_catalog.&) 4294967295)::pg_catalog.oid)
       AND EXISTS (
        SELECT 1 FROM pg_catalog.pg_class c
        WHERE c.oid OPERATOR(pg_catalog.=) communities_table
          AND pg_catalog.pg_has_role(session_user, c.relowner, 'MEMBER'::pg_catalog.text)) THEN
        IF pg_catalog.to_regprocedure(home_prefix OPERATOR(pg_catalog.||) 'community_deletion_control_table(text)') IS NOT NULL THEN
            UPDATE @home@.community_deletion_ddl_guard_state s
            SET control_tables = t.oids, control_digest = @home@.community_deletion_ddl_guard_control_digest(t.oids)
            FROM (SELECT @home@.community_deletion_ddl_guard_control_tables() AS oids) t;
        END IF;
        RETURN;
    END IF;
    IF communities_table IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = pg_catalog.format('DDL refused: %s runs while the deletion schema is gone; uninstall the DDL guard (migrate uninstall-ddl-guard) before migrating down', TG_TAG);
    END IF;
    home_namespace := (SELECT c.relnamespace FROM pg_catalog.pg_class c WHERE c.oid OPERATOR(pg_catalog.=) communities_table);
    fence_function := pg_catalog.to_regprocedure(home_prefix OPERATOR(pg_catalog.||) 'enforce_community_write_fence()');
    truncate_function := pg_catalog.to_regprocedure(home_prefix OPERATOR(pg_catalog.||) 'community_deletion_ddl_guard_truncate()');

    -- A trigger on a control table is created only by the migrations: a new
    -- one could undo a guard's work, a replaced guard could lose events.
    SELECT c.relname::pg_catalog.text AS table_name, t.tgname::pg_catalog.text AS trigger_name INTO problem
    FROM pg_catalog.pg_event_trigger_ddl_commands() cmd
    JOIN pg_catalog.pg_trigger t ON t.oid OPERATOR(pg_catalog.=) cmd.objid
    JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) t.tgrelid
    WHERE cmd.object_type OPERATOR(pg_catalog.=) 'trigger'
      AND c.relnamespace OPERATOR(pg_catalog.=) home_namespace
      AND @home@.community_deletion_control_table(c.relname::pg_catalog.text)
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = pg_catalog.format('DDL refused: %s creates trigger %s on control table %s; change the deletion schema only through its migrations',
                                        TG_TAG, problem.trigger_name, problem.table_name);
    END IF;

    -- The control tables' indexes, constraints, triggers and domains change
    -- only in migration runs (a dropped index or CHECK would let a guard's
    -- rule go unenforced).
    IF NOT EXISTS (SELECT 1 FROM @home@.community_deletion_ddl_guard_state s
                   WHERE s.control_digest OPERATOR(pg_catalog.=) @home@.community_deletion_ddl_guard_control_digest(s.control_tables)) THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = pg_catalog.format('DDL refused: %s changes an index, constraint, trigger or domain of a deletion control table; change the deletion schema only through its migrations',
                                        TG_TAG);
    END IF;

    -- Building a fence (attach, or the fencing below) creates its three
    -- triggers one command at a time. A command that only creates triggers
    -- exactly as attach does, each under the name of its event, can only add
    -- or restore protection. (A DROP command lists nothing here, and is
    -- checked.)
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_event_trigger_ddl_commands()) AND NOT EXISTS (
        SELECT 1 FROM pg_catalog.pg_event_trigger_ddl_commands() cmd
        WHERE NOT (cmd.object_type OPERATOR(pg_catalog.=) 'trigger' AND EXISTS (
            SELECT 1 FROM pg_catalog.pg_trigger t
            WHERE t.oid OPERATOR(pg_catalog.=) cmd.objid
              AND t.tgfoid OPERATOR(pg_catalog.=) fence_function
              AND NOT t.tgisinternal AND t.tgenabled OPERATOR(pg_catalog.=) 'O'
              AND t.tgqual IS NULL
              AND pg_catalog.cardinality(t.tgattr::pg_catalog.int2[]) OPERATOR(pg_catalog.=) 0
              AND ((t.tgname OPERATOR(pg_catalog.=) 'community_write_fence_insert' AND t.tgtype OPERATOR(pg_catalog.=) 4
                    AND t.tgoldtable IS NULL AND t.tgnewtable OPERATOR(pg_catalog.=) 'community_fence_new')
                OR (t.tgname OPERATOR(pg_catalog.=) 'community_write_fence_update' AND t.tgtype OPERATOR(pg_catalog.=) 16
                    AND t.tgoldtable OPERATOR(pg_catalog.=) 'community_fence_old' AND t.tgnewtable OPERATOR(pg_catalog.=) 'community_fence_new')
                OR (t.tgname OPERATOR(pg_catalog.=) 'community_write_fence_delete' AND t.tgtype OPERATOR(pg_catalog.=) 8
                    AND t.tgoldtable OPERATOR(pg_catalog.=) 'community_fence_old' AND t.tgnewtable IS NULL))))) THEN
        -- A table whose write fence is now complete gets its TRUNCATE fence.
        FOR member IN
            SELECT DISTINCT t.tgrelid::pg_catalog.regclass AS relid
            FROM pg_catalog.pg_event_trigger_ddl_commands() cmd
            JOIN pg_catalog.pg_trigger t ON t.oid OPERATOR(pg_catalog.=) cmd.objid
            WHERE (SELECT pg_catalog.count(DISTINCT f.tgtype) FROM pg_catalog.pg_trigger f
                   WHERE f.tgrelid OPERATOR(pg_catalog.=) t.tgrelid AND f.tgfoid OPERATOR(pg_catalog.=) fence_function
                     AND f.tgtype OPERATOR(pg_catalog.=) ANY (ARRAY[4, 8, 16]::pg_catalog.int2[])) OPERATOR(pg_catalog.=) 3
              AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger f
                              WHERE f.tgrelid OPERATOR(pg_catalog.=) t.tgrelid
                                AND f.tgfoid OPERATOR(pg_catalog.=) truncate_function)
        LOOP
            EXECUTE pg_catalog.format('CREATE TRIGGER community_deletion_truncate_fence BEFORE TRUNCATE ON %s '
                                      'FOR EACH STATEMENT EXECUTE FUNCTION %s', member.relid, truncate_function::pg_catalog.regprocedure);
        END LOOP;
        RETURN;
    END IF;

    -- New partitions of registered 'delete' tables (no fence trigger at
    -- all): fence and grant them, unless they hold rows of a community that
    -- is not active.
    FOR member IN
        SELECT tree.relid::pg_catalog.regclass AS relid, r.table_name
        FROM @home@.community_scoped_tables r
        JOIN pg_catalog.pg_class parent ON parent.relname OPERATOR(pg_catalog.=) r.table_name
            AND parent.relkind OPERATOR(pg_catalog.=) 'p' AND parent.relnamespace OPERATOR(pg_catalog.=) home_namespace
        CROSS JOIN LATERAL pg_catalog.pg_partition_tree(parent.oid::pg_catalog.regclass) tree
        WHERE r.purge_action OPERATOR(pg_catalog.=) 'delete' AND tree.relid::pg_catalog.oid OPERATOR(pg_catalog.<>) parent.oid
          AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger t
                          WHERE t.tgrelid OPERATOR(pg_catalog.=) tree.relid::pg_catalog.oid AND NOT t.tgisinternal
                            AND t.tgfoid OPERATOR(pg_catalog.=) fence_function)
    LOOP
        EXECUTE pg_catalog.format('SELECT EXISTS (SELECT 1 FROM %s m JOIN %scommunities c ON c.id OPERATOR(pg_catalog.=) m.community_id '
                                  'WHERE c.deletion_state OPERATOR(pg_catalog.<>) ''active'')', member.relid, home_prefix) INTO foreign_rows;
        IF foreign_rows THEN
            RAISE EXCEPTION USING ERRCODE = '42501',
                MESSAGE = pg_catalog.format('DDL refused: %s makes %s a partition of %s while it holds rows of a community that is being deleted',
                                            TG_TAG, member.relid, member.table_name);
        END IF;
        EXECUTE pg_catalog.format('CREATE OR REPLACE TRIGGER community_write_fence_insert AFTER INSERT ON %s '
                                  'REFERENCING NEW TABLE AS community_fence_new '
                                  'FOR EACH STATEMENT EXECUTE FUNCTION %s', member.relid, fence_function::pg_catalog.regprocedure);
        EXECUTE pg_catalog.format('CREATE OR REPLACE TRIGGER community_write_fence_update AFTER UPDATE ON %s '
                                  'REFERENCING OLD TABLE AS community_fence_old NEW TABLE AS community_fence_new '
                                  'FOR EACH STATEMENT EXECUTE FUNCTION %s', member.relid, fence_function::pg_catalog.regprocedure);
        EXECUTE pg_catalog.format('CREATE OR REPLACE TRIGGER community_write_fence_delete AFTER DELETE ON %s '
                                  'REFERENCING OLD TABLE AS community_fence_old '
                                  'FOR EACH STATEMENT EXECUTE FUNCTION %s', member.relid, fence_function::pg_catalog.regprocedure);
        EXECUTE pg_catalog.format('GRANT SELECT, UPDATE, DELETE ON %s TO community_deletion_executor', member.relid);
        EXECUTE pg_catalog.format('GRANT SELECT (community_id) ON %s TO community_deletion_operator', member.relid);
    END LOOP;

    -- Everything else the drift report flags about registered tables, guard
    -- triggers and installed functions, checked here without calling it (its
    -- search_path includes the schema of communities). Unregistered tables
    -- are not refused (a service creates a tenant table, then attaches it),
    -- nor a fence on a table not yet registered (attach fences before it
    -- registers) unless that table holds rows and its fence is incomplete.
    WITH registered AS (
        -- oid is NULL when the table is gone or has no community_id uuid column.
        SELECT r.table_name, r.purge_action, t.oid, t.attnotnull
        FROM @home@.community_scoped_tables r
        LEFT JOIN LATERAL (
            SELECT c.oid, a.attnotnull
            FROM pg_catalog.pg_class c
            JOIN pg_catalog.pg_attribute a ON a.attrelid OPERATOR(pg_catalog.=) c.oid
                AND a.attname OPERATOR(pg_catalog.=) 'community_id' AND NOT a.attisdropped
                AND a.atttypid OPERATOR(pg_catalog.=) 'pg_catalog.uuid'::pg_catalog.regtype::pg_catalog.oid
            WHERE c.relname OPERATOR(pg_catalog.=) r.table_name AND c.relnamespace OPERATOR(pg_catalog.=) home_namespace
              AND c.relkind OPERATOR(pg_catalog.=) ANY (ARRAY['r', 'p']::pg_catalog."char"[]) AND NOT c.relispartition) t ON true
    ), members AS (
        -- Every table of a registered 'delete' table's partition tree.
        SELECT registered.table_name, registered.oid AS relid
        FROM registered
        WHERE registered.purge_action OPERATOR(pg_catalog.=) 'delete' AND registered.oid IS NOT NULL
        UNION
        SELECT registered.table_name, tree.relid::pg_catalog.oid
        FROM registered, pg_catalog.pg_partition_tree(registered.oid::pg_catalog.regclass) tree
        WHERE registered.purge_action OPERATOR(pg_catalog.=) 'delete' AND registered.oid IS NOT NULL
    ), fence_state AS (
        -- Per table with a fence trigger: is each event covered whole?
        SELECT t.tgrelid AS relid,
               pg_catalog.bool_or(t.tgtype OPERATOR(pg_catalog.=) 4
                                  AND t.tgnewtable OPERATOR(pg_catalog.=) 'community_fence_new' AND ok.whole) AS on_insert,
               pg_catalog.bool_or(t.tgtype OPERATOR(pg_catalog.=) 16 AND t.tgoldtable OPERATOR(pg_catalog.=) 'community_fence_old'
                                  AND t.tgnewtable OPERATOR(pg_catalog.=) 'community_fence_new' AND ok.whole) AS on_update,
               pg_catalog.bool_or(t.tgtype OPERATOR(pg_catalog.=) 8
                                  AND t.tgoldtable OPERATOR(pg_catalog.=) 'community_fence_old' AND ok.whole) AS on_delete
        FROM pg_catalog.pg_trigger t
        CROSS JOIN LATERAL (SELECT t.tgenabled OPERATOR(pg_catalog.=) ANY (ARRAY['O', 'A']::pg_catalog."char"[])
                                   AND t.tgqual IS NULL
                                   AND pg_catalog.cardinality(t.tgattr::pg_catalog.int2[]) OPERATOR(pg_catalog.=) 0) ok (whole)
        WHERE t.tgfoid OPERATOR(pg_catalog.=) fence_function AND NOT t.tgisinternal
        GROUP BY t.tgrelid
    ), guards AS (
        SELECT g.table_name, g.trigger_name, t.tgenabled,
               t.tgfoid OPERATOR(pg_catalog.=) pg_catalog.to_regprocedure(home_prefix OPERATOR(pg_catalog.||) g.function_signature)::pg_catalog.oid AS same_function
        FROM @home@.community_deletion_guard_triggers() g
        LEFT JOIN pg_catalog.pg_trigger t
            ON t.tgrelid OPERATOR(pg_catalog.=) pg_catalog.to_regclass(home_prefix OPERATOR(pg_catalog.||) pg_catalog.quote_ident(g.table_name))::pg_catalog.oid
           AND t.tgname OPERATOR(pg_catalog.=) g.trigger_name
    ), row_secured AS (
        SELECT registered.table_name
        FROM registered
        CROSS JOIN LATERAL (SELECT registered.oid
                            UNION SELECT tree.relid::pg_catalog.oid
                                  FROM pg_catalog.pg_partition_tree(registered.oid::pg_catalog.regclass) tree) part (relid)
        JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) part.relid AND c.relrowsecurity
        JOIN pg_catalog.pg_roles login ON login.rolcanlogin AND NOT login.rolsuper AND NOT login.rolbypassrls
            AND (pg_catalog.pg_has_role(login.oid, 'community_deletion_executor'::pg_catalog.name, 'MEMBER'::pg_catalog.text)
                 OR pg_catalog.pg_has_role(login.oid, 'community_deletion_operator'::pg_catalog.name, 'MEMBER'::pg_catalog.text))
            AND (c.relforcerowsecurity OR NOT pg_catalog.pg_has_role(login.oid, c.relowner, 'USAGE'::pg_catalog.text))
        WHERE registered.oid IS NOT NULL
    )
    SELECT found.subject, found.problem INTO problem
    FROM (
        SELECT registered.table_name AS subject, 'missing' AS problem
        FROM registered WHERE registered.oid IS NULL
        UNION ALL
        SELECT registered.table_name, 'shape'
        FROM registered
        WHERE registered.oid IS NOT NULL
          AND registered.attnotnull OPERATOR(pg_catalog.<>) (registered.purge_action OPERATOR(pg_catalog.=) 'delete')
        UNION ALL
        SELECT members.table_name, 'unfenced'
        FROM members LEFT JOIN fence_state f ON f.relid OPERATOR(pg_catalog.=) members.relid
        WHERE NOT coalesce(f.on_insert AND f.on_update AND f.on_delete, false)
        UNION ALL
        SELECT members.table_name, 'without its TRUNCATE fence'
        FROM members
        WHERE NOT EXISTS (
            SELECT 1 FROM pg_catalog.pg_trigger t
            WHERE t.tgrelid OPERATOR(pg_catalog.=) members.relid AND t.tgfoid OPERATOR(pg_catalog.=) truncate_function
              AND t.tgtype OPERATOR(pg_catalog.=) 34 AND t.tgqual IS NULL
              AND t.tgenabled OPERATOR(pg_catalog.=) ANY (ARRAY['O', 'A']::pg_catalog."char"[]))
        UNION ALL
        SELECT c.relname::pg_catalog.text, 'partly fenced and holding rows'
        FROM fence_state f
        JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) f.relid
        WHERE NOT (f.on_insert AND f.on_update AND f.on_delete)
          AND NOT EXISTS (SELECT 1 FROM members WHERE members.relid OPERATOR(pg_catalog.=) f.relid)
          AND c.relkind OPERATOR(pg_catalog.=) 'r' AND c.relpersistence OPERATOR(pg_catalog.<>) 't'
          AND pg_catalog.pg_relation_size(c.oid::pg_catalog.regclass) OPERATOR(pg_catalog.>) 0
        UNION ALL
        SELECT guards.table_name OPERATOR(pg_catalog.||) '.' OPERATOR(pg_catalog.||) guards.trigger_name,
               CASE WHEN guards.tgenabled IS NULL OR NOT guards.same_function THEN 'guard_missing' ELSE 'guard_disabled' END
        FROM guards
        WHERE guards.tgenabled IS NULL OR NOT guards.same_function
           OR NOT guards.tgenabled OPERATOR(pg_catalog.=) ANY (ARRAY['O', 'A']::pg_catalog."char"[])
        UNION ALL
        SELECT d.function_signature,
               CASE WHEN p.oid IS NULL THEN 'function_missing' ELSE 'function_changed' END
        FROM @home@.community_deletion_function_digests d
        LEFT JOIN pg_catalog.pg_proc p
            ON p.oid OPERATOR(pg_catalog.=) pg_catalog.to_regprocedure(home_prefix OPERATOR(pg_catalog.||) d.function_signature)::pg_catalog.oid
        WHERE p.oid IS NULL
           OR pg_catalog.md5(pg_catalog.concat_ws(E'\x1f', p.prosrc, pg_catalog.array_to_string(p.proconfig, E'\x1e'),
                                                  p.prosecdef::pg_catalog.text, p.provolatile::pg_catalog.text,
                                                  pg_catalog.pg_get_userbyid(p.proowner)))
              OPERATOR(pg_catalog.<>) d.digest
        UNION ALL
        SELECT DISTINCT row_secured.table_name, 'row_security'
        FROM row_secured
    ) found
    ORDER BY 1, 2
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = pg_catalog.format('DDL refused: %s leaves %s %s (see community_deletion_catalog_drift()); change the deletion schema only through its migrations',
                                        TG_TAG, problem.subject, problem.problem);
    END IF;
END
$body$
$guard$, '@homeprefix@', pg_catalog.quote_literal(pg_catalog.quote_ident(home) OPERATOR(pg_catalog.||) '.')),
       '@home@', pg_catalog.quote_ident(home));
    EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %I.community_deletion_ddl_guard() FROM PUBLIC', home);
    EXECUTE pg_catalog.format('CREATE EVENT TRIGGER community_deletion_ddl_guard ON ddl_command_end '
                              'EXECUTE FUNCTION %I.community_deletion_ddl_guard()', home);
END
$install$;
