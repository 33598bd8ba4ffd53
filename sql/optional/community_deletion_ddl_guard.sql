-- The optional DDL guard: event triggers that make tampering with the
-- deletion schema impossible, not only visible. A table's owner can always
-- ALTER its own objects, and the owner of schema community_deletion can drop
-- or create anything in it; an event trigger sees every DDL command of every
-- role, so a superuser installs it once, after the migrations:
--
--     go run ./cmd/migrate install-ddl-guard   (or: psql -f this file, as a superuser)
--
-- It lives in schema community_deletion, owned by the installing superuser,
-- runs with search_path = pg_catalog, pg_temp and names everything
-- community_deletion.x or pg_catalog.x (operators too), so nothing another
-- role plants runs inside it. Of the migrations' functions it calls only the
-- constant lists community_deletion_guard_triggers() and
-- community_deletion_control_table(). Installing it over a guard an earlier
-- release installed in the schema of communities removes that one first
-- (its event triggers, functions, tables and TRUNCATE fences).
--
-- At the end of every DDL command outside a migration run it refuses
-- (SQLSTATE 42501) a command that:
--   * creates or alters anything in schema community_deletion, or moves
--     something into it (CREATE FUNCTION, CREATE OPERATOR, ALTER ... SET
--     SCHEMA community_deletion), or leaves a function or operator there that
--     the migrations did not install;
--   * leaves any role but the schema's owner with CREATE on it (GRANT CREATE
--     ON SCHEMA community_deletion);
--   * leaves a function the migrations installed changed, dropped, re-owned
--     or re-configured (its digest differs from the one they recorded);
--   * leaves a guard trigger of a control table missing, disabled, firing
--     for replication sessions only or calling another function, or creates
--     any trigger on a control table;
--   * changes a control table's indexes, constraints, triggers or column
--     domains (their digest is kept in community_deletion_ddl_guard_state
--     and moves on only in migration runs);
--   * leaves a registered 'delete' table, or any of its partitions, without
--     a whole fence: for each of INSERT, UPDATE and DELETE an enabled AFTER
--     ... FOR EACH STATEMENT trigger of enforce_community_write_fence() with
--     its transition tables, no WHEN clause and no column list, and the
--     BEFORE TRUNCATE trigger of enforce_community_truncate_fence() that
--     attach creates (community_write_fence_truncate), enabled, no WHEN;
--   * leaves a table outside the registry (a detached partition) that holds
--     rows and carries part of a write fence;
--   * leaves a registered table dropped, renamed, or reshaped (its tenant
--     key column gone, retyped or of the wrong nullability);
--   * leaves a registered table (or partition) whose row-level security
--     applies to a login of the executor or operator role;
--   * rewrites a registered table (ALTER COLUMN ... TYPE ... USING, for one)
--     and changes any row of a community that is not active: a second event
--     trigger, on table_rewrite, digests those rows before the rewrite (this
--     one holds in migration runs too).
-- A third, at the start of DROP FUNCTION, DROP ROUTINE, DROP SCHEMA and
-- DROP OWNED, refuses them to a member of community_deletion's owner that
-- is not a superuser, outside a migration run: a schema's owner may drop
-- every object in it, the guard's own functions too (and CASCADE takes the
-- event triggers with them, after which nothing fires at the command's end).
--
-- Entitled paths pass: attach_community_write_fence() (each command only
-- creates fence triggers exactly as attach does, which can only add or
-- restore protection); a new partition of a registered 'delete' table
-- (CREATE TABLE ... PARTITION OF, ALTER TABLE ... ATTACH PARTITION) is
-- fenced and granted at once as attach would, and refused when it holds
-- rows of a community that is not active; any DDL that leaves none of the
-- above.
--
-- The exemption is a migration run: a session whose login (session_user) is
-- a member of the owner of schema community_deletion and that has opened a
-- run with community_deletion.community_deletion_ddl_guard_open_run() (the
-- migration job does, after it takes the schema-destruction lock, and closes
-- it with community_deletion_ddl_guard_close_run() before it lets go). Only
-- that owner can open one: the function refuses everyone else, and the
-- record it writes (the session's pid and start time, its login and
-- application_name) lives in a table that only the superuser's functions
-- write and that stays as a log. The owner can replace every function of
-- the schema in a migration anyway, so the guard does not hold against it;
-- what a run buys is that the owner's DDL outside one (a stray psql
-- session, a service that shares the owner's login) is refused, and that
-- every run is on record. No lock, setting or grant that another role can
-- take opens a run.
--
-- It lives and goes with schema community_deletion: renamed away, every
-- DDL command is refused (failing closed); migration 00021's Down refuses
-- while it is installed. Remove it with `migrate uninstall-ddl-guard`.
BEGIN;
SET LOCAL search_path = pg_catalog, pg_temp;

DO $check$
BEGIN
    IF pg_catalog.to_regclass('community_deletion.communities') IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '55000',
            MESSAGE = 'DDL guard not installed: community_deletion.communities does not exist; migrate the database (migrate up) first';
    END IF;
END
$check$;

-- Whatever guard is installed, this release's or an earlier one's: its
-- event triggers first, so nothing of it runs while it goes.
DROP EVENT TRIGGER IF EXISTS community_deletion_ddl_guard;
DROP EVENT TRIGGER IF EXISTS community_deletion_ddl_guard_rewrite;
DROP EVENT TRIGGER IF EXISTS community_deletion_ddl_guard_drop;
DO $remove$
DECLARE
    item record;
BEGIN
    FOR item IN
        SELECT t.tgname, t.tgrelid::pg_catalog.regclass AS relid
        FROM pg_catalog.pg_trigger t JOIN pg_catalog.pg_proc p ON p.oid OPERATOR(pg_catalog.=) t.tgfoid
        WHERE p.proname OPERATOR(pg_catalog.=) 'community_deletion_ddl_guard_truncate'
    LOOP
        EXECUTE pg_catalog.format('DROP TRIGGER %I ON %s', item.tgname, item.relid);
    END LOOP;
    FOR item IN
        SELECT p.oid::pg_catalog.regprocedure AS fn
        FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_roles o ON o.oid OPERATOR(pg_catalog.=) p.proowner AND o.rolsuper
        WHERE p.proname OPERATOR(pg_catalog.~) '^community_deletion_ddl_guard($|_)'
    LOOP
        EXECUTE pg_catalog.format('DROP FUNCTION %s', item.fn);
    END LOOP;
    -- The run log is kept across a re-install; the rest is rebuilt.
    FOR item IN
        SELECT c.oid::pg_catalog.regclass AS relid
        FROM pg_catalog.pg_class c JOIN pg_catalog.pg_roles o ON o.oid OPERATOR(pg_catalog.=) c.relowner AND o.rolsuper
        WHERE c.relkind OPERATOR(pg_catalog.=) 'r'
          AND c.relname OPERATOR(pg_catalog.=) ANY (ARRAY['community_deletion_ddl_guard_state',
                                                          'community_deletion_ddl_guard_rewrites']::pg_catalog.name[])
    LOOP
        EXECUTE pg_catalog.format('DROP TABLE %s', item.relid);
    END LOOP;
END
$remove$;

-- Migration runs: opened and closed by the schema's owner, kept as a log.
CREATE TABLE IF NOT EXISTS community_deletion.community_deletion_ddl_guard_runs (
    id pg_catalog.int8 GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    pid pg_catalog.int4 NOT NULL,
    backend_start pg_catalog.timestamptz NOT NULL,
    login pg_catalog.name NOT NULL,
    application_name pg_catalog.text NOT NULL,
    opened_at pg_catalog.timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    closed_at pg_catalog.timestamptz
);
REVOKE ALL ON community_deletion.community_deletion_ddl_guard_runs FROM PUBLIC;

-- Whether this session is in a migration run it opened, and its login is
-- (still) a member of the schema's owner.
CREATE FUNCTION community_deletion.community_deletion_ddl_guard_in_run() RETURNS pg_catalog.bool
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS $body$
    SELECT EXISTS (
        SELECT 1
        FROM community_deletion.community_deletion_ddl_guard_runs r
        CROSS JOIN pg_catalog.pg_stat_get_activity(pg_catalog.pg_backend_pid()) me
        WHERE r.pid OPERATOR(pg_catalog.=) pg_catalog.pg_backend_pid()
          AND r.backend_start OPERATOR(pg_catalog.=) me.backend_start
          AND r.closed_at IS NULL)
       AND pg_catalog.pg_has_role(session_user,
                                  (SELECT n.nspowner FROM pg_catalog.pg_namespace n
                                   WHERE n.nspname OPERATOR(pg_catalog.=) 'community_deletion'::pg_catalog.name),
                                  'MEMBER'::pg_catalog.text)
$body$;

-- Opens a migration run for this session: only a login that is a member of
-- the owner of schema community_deletion may. Closes runs of sessions that
-- have ended.
CREATE FUNCTION community_deletion.community_deletion_ddl_guard_open_run() RETURNS void
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS $body$
DECLARE
    owner pg_catalog.oid := (SELECT n.nspowner FROM pg_catalog.pg_namespace n
                             WHERE n.nspname OPERATOR(pg_catalog.=) 'community_deletion'::pg_catalog.name);
BEGIN
    IF NOT pg_catalog.pg_has_role(session_user, owner, 'MEMBER'::pg_catalog.text) THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = pg_catalog.format('migration run refused: login %I is not a member of %I, the owner of schema community_deletion; run migrations as that owner',
                                        session_user, pg_catalog.pg_get_userbyid(owner));
    END IF;
    UPDATE community_deletion.community_deletion_ddl_guard_runs r
    SET closed_at = pg_catalog.clock_timestamp()
    WHERE r.closed_at IS NULL
      AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_stat_get_activity(r.pid) a
                      WHERE a.backend_start OPERATOR(pg_catalog.=) r.backend_start);
    IF NOT community_deletion.community_deletion_ddl_guard_in_run() THEN
        INSERT INTO community_deletion.community_deletion_ddl_guard_runs (pid, backend_start, login, application_name)
        SELECT pg_catalog.pg_backend_pid(), me.backend_start, session_user,
               pg_catalog.current_setting('application_name'::pg_catalog.text)
        FROM pg_catalog.pg_stat_get_activity(pg_catalog.pg_backend_pid()) me;
    END IF;
END
$body$;

-- Closes this session's migration run, if it has one.
CREATE FUNCTION community_deletion.community_deletion_ddl_guard_close_run() RETURNS void
    LANGUAGE sql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS $body$
    UPDATE community_deletion.community_deletion_ddl_guard_runs r
    SET closed_at = pg_catalog.clock_timestamp()
    WHERE r.pid OPERATOR(pg_catalog.=) pg_catalog.pg_backend_pid() AND r.closed_at IS NULL
$body$;
GRANT EXECUTE ON FUNCTION community_deletion.community_deletion_ddl_guard_in_run(),
    community_deletion.community_deletion_ddl_guard_open_run(),
    community_deletion.community_deletion_ddl_guard_close_run() TO PUBLIC;

-- The control tables: every table of schema community_deletion that
-- community_deletion_control_table() names, and their indexes,
-- constraints, triggers and column domains as the guard last accepted them
-- (at install, and after each command of a migration run).
CREATE FUNCTION community_deletion.community_deletion_ddl_guard_control_tables() RETURNS pg_catalog.oid[]
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $body$
    SELECT coalesce(pg_catalog.array_agg(c.oid ORDER BY c.oid), '{}')
    FROM pg_catalog.pg_class c
    WHERE c.relnamespace OPERATOR(pg_catalog.=) 'community_deletion'::pg_catalog.regnamespace::pg_catalog.oid
      AND c.relkind OPERATOR(pg_catalog.=) ANY (ARRAY['r', 'p']::pg_catalog."char"[])
      AND community_deletion.community_deletion_control_table(c.relname::pg_catalog.text)
$body$;

CREATE FUNCTION community_deletion.community_deletion_ddl_guard_control_digest(tables pg_catalog.oid[]) RETURNS pg_catalog.text
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
$body$;
REVOKE ALL ON FUNCTION community_deletion.community_deletion_ddl_guard_control_tables() FROM PUBLIC;
REVOKE ALL ON FUNCTION community_deletion.community_deletion_ddl_guard_control_digest(pg_catalog.oid[]) FROM PUBLIC;

CREATE TABLE community_deletion.community_deletion_ddl_guard_state (
    singleton pg_catalog.bool PRIMARY KEY DEFAULT true CHECK (singleton),
    control_tables pg_catalog.oid[] NOT NULL,
    control_digest pg_catalog.text NOT NULL
);
REVOKE ALL ON community_deletion.community_deletion_ddl_guard_state FROM PUBLIC;
INSERT INTO community_deletion.community_deletion_ddl_guard_state (control_tables, control_digest)
SELECT t.oids, community_deletion.community_deletion_ddl_guard_control_digest(t.oids)
FROM (SELECT community_deletion.community_deletion_ddl_guard_control_tables() AS oids) t;

-- The tables of a registered table's partition tree (the registered table
-- itself first), by the registry's (table_schema, table_name), with the
-- registered table's tenant key column.
CREATE FUNCTION community_deletion.community_deletion_ddl_guard_registered() RETURNS TABLE (
        table_schema pg_catalog.name, table_name pg_catalog.name, purge_action pg_catalog.text,
        root pg_catalog.oid, relid pg_catalog.oid, tenant_key pg_catalog.name)
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $body$
    SELECT r.table_schema, r.table_name, r.purge_action::pg_catalog.text, c.oid, part.relid, r.tenant_key
    FROM community_deletion.community_scoped_tables r
    JOIN pg_catalog.pg_namespace n ON n.nspname OPERATOR(pg_catalog.=) r.table_schema
    JOIN pg_catalog.pg_class c ON c.relnamespace OPERATOR(pg_catalog.=) n.oid AND c.relname OPERATOR(pg_catalog.=) r.table_name
        AND c.relkind OPERATOR(pg_catalog.=) ANY (ARRAY['r', 'p']::pg_catalog."char"[]) AND NOT c.relispartition
    CROSS JOIN LATERAL (SELECT c.oid UNION SELECT tree.relid::pg_catalog.oid
                        FROM pg_catalog.pg_partition_tree(c.oid::pg_catalog.regclass) tree) part (relid)
$body$;
REVOKE ALL ON FUNCTION community_deletion.community_deletion_ddl_guard_registered() FROM PUBLIC;

-- Table rewrites of registered tables: the rows of every community that is
-- not active, digested before the rewrite and compared after it.
CREATE FUNCTION community_deletion.community_deletion_ddl_guard_rows_digest(relation pg_catalog.regclass) RETURNS pg_catalog.text
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $body$
DECLARE
    digest pg_catalog.text;
    key pg_catalog.name;
BEGIN
    SELECT reg.tenant_key INTO key FROM community_deletion.community_deletion_ddl_guard_registered() reg
    WHERE reg.relid OPERATOR(pg_catalog.=) relation::pg_catalog.oid LIMIT 1;
    EXECUTE pg_catalog.format('SELECT pg_catalog.md5(coalesce(pg_catalog.string_agg(m.line, E''\n'' ORDER BY m.line), '''')) '
                              'FROM (SELECT m::pg_catalog.text AS line FROM %s m '
                              'WHERE m.%I IN (SELECT c.id FROM community_deletion.communities c '
                              'WHERE c.deletion_state OPERATOR(pg_catalog.<>) ''active''::pg_catalog.text)) m',
                              relation, coalesce(key, 'community_id'::pg_catalog.name)) INTO digest;
    RETURN digest;
END
$body$;
REVOKE ALL ON FUNCTION community_deletion.community_deletion_ddl_guard_rows_digest(pg_catalog.regclass) FROM PUBLIC;

CREATE TABLE community_deletion.community_deletion_ddl_guard_rewrites (
    xid pg_catalog.int8 NOT NULL,
    relid pg_catalog.oid NOT NULL,
    digest pg_catalog.text,
    PRIMARY KEY (xid, relid)
);
REVOKE ALL ON community_deletion.community_deletion_ddl_guard_rewrites FROM PUBLIC;

CREATE FUNCTION community_deletion.community_deletion_ddl_guard_rewrite() RETURNS event_trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS $body$
DECLARE
    relation pg_catalog.oid := pg_catalog.pg_event_trigger_table_rewrite_oid();
BEGIN
    IF EXISTS (SELECT 1 FROM community_deletion.community_deletion_ddl_guard_registered() reg
               JOIN pg_catalog.pg_attribute a ON a.attrelid OPERATOR(pg_catalog.=) relation
                   AND a.attname OPERATOR(pg_catalog.=) reg.tenant_key AND NOT a.attisdropped
               WHERE reg.relid OPERATOR(pg_catalog.=) relation) THEN
        INSERT INTO community_deletion.community_deletion_ddl_guard_rewrites (xid, relid, digest)
        VALUES (pg_catalog.txid_current(), relation,
                community_deletion.community_deletion_ddl_guard_rows_digest(relation::pg_catalog.regclass));
    END IF;
END
$body$;
REVOKE ALL ON FUNCTION community_deletion.community_deletion_ddl_guard_rewrite() FROM PUBLIC;
CREATE EVENT TRIGGER community_deletion_ddl_guard_rewrite ON table_rewrite
    EXECUTE FUNCTION community_deletion.community_deletion_ddl_guard_rewrite();

-- At the start of a DROP that could take the guard's functions with it
-- (the owner of a schema may drop anything in it): refused to a member of
-- the schema's owner, outside a migration run. Runs as the caller, to see
-- who that is (current_user); it reads only catalogs, and the run record
-- through the superuser's community_deletion_ddl_guard_in_run().
CREATE FUNCTION community_deletion.community_deletion_ddl_guard_drop() RETURNS event_trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $body$
BEGIN
    IF pg_catalog.pg_has_role(current_user,
                              (SELECT n.nspowner FROM pg_catalog.pg_namespace n
                               WHERE n.nspname OPERATOR(pg_catalog.=) 'community_deletion'::pg_catalog.name),
                              'MEMBER'::pg_catalog.text)
       AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r
                       WHERE r.rolname OPERATOR(pg_catalog.=) current_user AND r.rolsuper)
       AND NOT community_deletion.community_deletion_ddl_guard_in_run() THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = pg_catalog.format('DDL refused: %s by %I, a member of the owner of schema community_deletion, outside a migration run could drop the DDL guard with that schema''s objects; run it as another role, or in a migration run',
                                        TG_TAG, current_user);
    END IF;
END
$body$;
GRANT EXECUTE ON FUNCTION community_deletion.community_deletion_ddl_guard_drop() TO PUBLIC;
CREATE EVENT TRIGGER community_deletion_ddl_guard_drop ON ddl_command_start
    WHEN TAG IN ('DROP FUNCTION', 'DROP ROUTINE', 'DROP SCHEMA', 'DROP OWNED')
    EXECUTE FUNCTION community_deletion.community_deletion_ddl_guard_drop();

CREATE FUNCTION community_deletion.community_deletion_ddl_guard() RETURNS event_trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS $body$
DECLARE
    home pg_catalog.oid := pg_catalog.to_regnamespace('community_deletion'::pg_catalog.text)::pg_catalog.oid;
    fence_function pg_catalog.oid;
    truncate_function pg_catalog.oid;
    member record;
    problem record;
    foreign_rows pg_catalog.bool;
BEGIN
    -- A table rewrite of a registered table (ALTER COLUMN ... TYPE ...
    -- USING, for one) must leave the rows of every community that is not
    -- active as they were: recorded before it by the table_rewrite trigger.
    -- This holds in migration runs too.
    FOR member IN
        SELECT w.relid::pg_catalog.regclass AS relid, w.digest
        FROM community_deletion.community_deletion_ddl_guard_rewrites w
        WHERE w.xid OPERATOR(pg_catalog.=) pg_catalog.txid_current()
    LOOP
        DELETE FROM community_deletion.community_deletion_ddl_guard_rewrites w
        WHERE w.xid OPERATOR(pg_catalog.=) pg_catalog.txid_current()
          AND w.relid OPERATOR(pg_catalog.=) member.relid::pg_catalog.oid;
        IF community_deletion.community_deletion_ddl_guard_rows_digest(member.relid) IS DISTINCT FROM member.digest THEN
            RAISE EXCEPTION USING ERRCODE = '42501',
                MESSAGE = pg_catalog.format('DDL refused: %s rewrites %s and changes rows of a community that is being deleted or deleted; change it once no deletion is under way, without moving rows between communities',
                                            TG_TAG, member.relid);
        END IF;
    END LOOP;
    -- A migration run, opened by a login of the schema's owner.
    IF community_deletion.community_deletion_ddl_guard_in_run() THEN
        IF pg_catalog.to_regprocedure('community_deletion.community_deletion_control_table(text)'::pg_catalog.text) IS NOT NULL THEN
            UPDATE community_deletion.community_deletion_ddl_guard_state s
            SET control_tables = t.oids, control_digest = community_deletion.community_deletion_ddl_guard_control_digest(t.oids)
            FROM (SELECT community_deletion.community_deletion_ddl_guard_control_tables() AS oids) t;
        END IF;
        RETURN;
    END IF;
    IF pg_catalog.to_regclass('community_deletion.communities'::pg_catalog.text) IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = pg_catalog.format('DDL refused: %s runs while community_deletion.communities is gone; put schema community_deletion back, or uninstall the DDL guard (migrate uninstall-ddl-guard)', TG_TAG);
    END IF;
    fence_function := pg_catalog.to_regprocedure('community_deletion.enforce_community_write_fence()'::pg_catalog.text);
    truncate_function := pg_catalog.to_regprocedure('community_deletion.enforce_community_truncate_fence()'::pg_catalog.text);

    -- Schema community_deletion changes only in migration runs: nothing is
    -- created or altered in it, nor moved into it (ALTER ... SET SCHEMA),
    -- and no role but its owner may CREATE there.
    SELECT cmd.command_tag, cmd.object_type, cmd.object_identity INTO problem
    FROM pg_catalog.pg_event_trigger_ddl_commands() cmd
    WHERE cmd.schema_name OPERATOR(pg_catalog.=) 'community_deletion'::pg_catalog.text
       OR (cmd.object_type OPERATOR(pg_catalog.=) 'schema'::pg_catalog.text
           AND cmd.object_identity OPERATOR(pg_catalog.=) 'community_deletion'::pg_catalog.text)
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = pg_catalog.format('DDL refused: %s changes %s %s in schema community_deletion outside a migration run; change that schema only through its migrations',
                                        problem.command_tag, problem.object_type, problem.object_identity);
    END IF;
    SELECT CASE WHEN acl.grantee OPERATOR(pg_catalog.=) 0::pg_catalog.oid THEN 'PUBLIC'::pg_catalog.text
                ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(acl.grantee)::pg_catalog.text) END AS grantee INTO problem
    FROM pg_catalog.pg_namespace n
    CROSS JOIN LATERAL pg_catalog.aclexplode(n.nspacl) acl
    WHERE n.oid OPERATOR(pg_catalog.=) home AND acl.privilege_type OPERATOR(pg_catalog.=) 'CREATE'::pg_catalog.text
      AND acl.grantee OPERATOR(pg_catalog.<>) n.nspowner
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = pg_catalog.format('DDL refused: %s leaves CREATE on schema community_deletion with %s; only its owner may create there',
                                        TG_TAG, problem.grantee);
    END IF;

    -- A trigger on a control table is created only by the migrations: a new
    -- one could undo a guard's work, a replaced guard could lose events.
    SELECT c.relname::pg_catalog.text AS table_name, t.tgname::pg_catalog.text AS trigger_name INTO problem
    FROM pg_catalog.pg_event_trigger_ddl_commands() cmd
    JOIN pg_catalog.pg_trigger t ON t.oid OPERATOR(pg_catalog.=) cmd.objid
    JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) t.tgrelid
    WHERE cmd.object_type OPERATOR(pg_catalog.=) 'trigger'::pg_catalog.text
      AND c.relnamespace OPERATOR(pg_catalog.=) home
      AND community_deletion.community_deletion_control_table(c.relname::pg_catalog.text)
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = pg_catalog.format('DDL refused: %s creates trigger %s on control table %s; change the deletion schema only through its migrations',
                                        TG_TAG, problem.trigger_name, problem.table_name);
    END IF;

    -- The control tables' indexes, constraints, triggers and domains change
    -- only in migration runs (a dropped index or CHECK would let a guard's
    -- rule go unenforced).
    IF NOT EXISTS (SELECT 1 FROM community_deletion.community_deletion_ddl_guard_state s
                   WHERE s.control_digest OPERATOR(pg_catalog.=) community_deletion.community_deletion_ddl_guard_control_digest(s.control_tables)) THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = pg_catalog.format('DDL refused: %s changes an index, constraint, trigger or domain of a deletion control table; change the deletion schema only through its migrations',
                                        TG_TAG);
    END IF;

    -- Building a fence (attach, or the fencing below) creates its triggers
    -- one command at a time. A command that only creates triggers exactly as
    -- attach does, each under the name of its event, can only add or restore
    -- protection. (A DROP command lists nothing here, and is checked.)
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_event_trigger_ddl_commands()) AND NOT EXISTS (
        SELECT 1 FROM pg_catalog.pg_event_trigger_ddl_commands() cmd
        WHERE NOT (cmd.object_type OPERATOR(pg_catalog.=) 'trigger'::pg_catalog.text AND EXISTS (
            SELECT 1 FROM pg_catalog.pg_trigger t
            WHERE t.oid OPERATOR(pg_catalog.=) cmd.objid
              AND NOT t.tgisinternal AND t.tgenabled OPERATOR(pg_catalog.=) 'O'::pg_catalog."char"
              AND t.tgqual IS NULL
              AND pg_catalog.cardinality(t.tgattr::pg_catalog.int2[]) OPERATOR(pg_catalog.=) 0
              AND ((t.tgfoid OPERATOR(pg_catalog.=) fence_function
                    AND ((t.tgname OPERATOR(pg_catalog.=) 'community_write_fence_insert'::pg_catalog.name AND t.tgtype OPERATOR(pg_catalog.=) 4
                          AND t.tgoldtable IS NULL AND t.tgnewtable OPERATOR(pg_catalog.=) 'community_fence_new'::pg_catalog.name)
                      OR (t.tgname OPERATOR(pg_catalog.=) 'community_write_fence_update'::pg_catalog.name AND t.tgtype OPERATOR(pg_catalog.=) 16
                          AND t.tgoldtable OPERATOR(pg_catalog.=) 'community_fence_old'::pg_catalog.name
                          AND t.tgnewtable OPERATOR(pg_catalog.=) 'community_fence_new'::pg_catalog.name)
                      OR (t.tgname OPERATOR(pg_catalog.=) 'community_write_fence_delete'::pg_catalog.name AND t.tgtype OPERATOR(pg_catalog.=) 8
                          AND t.tgoldtable OPERATOR(pg_catalog.=) 'community_fence_old'::pg_catalog.name AND t.tgnewtable IS NULL)))
                OR (t.tgfoid OPERATOR(pg_catalog.=) truncate_function
                    AND t.tgname OPERATOR(pg_catalog.=) 'community_write_fence_truncate'::pg_catalog.name
                    AND t.tgtype OPERATOR(pg_catalog.=) 34 AND t.tgoldtable IS NULL AND t.tgnewtable IS NULL))))) THEN
        RETURN;
    END IF;

    -- New partitions of registered 'delete' tables (no fence trigger at
    -- all): fence and grant them as attach would, unless they hold rows of
    -- a community that is not active.
    FOR member IN
        SELECT reg.relid::pg_catalog.regclass AS relid, reg.table_name, reg.tenant_key,
               -- A community_id fence takes no argument; any other key is its one argument.
               pg_catalog.rtrim(fence_function::pg_catalog.regprocedure::pg_catalog.text, ')')
                   OPERATOR(pg_catalog.||) CASE WHEN reg.tenant_key OPERATOR(pg_catalog.=) 'community_id'::pg_catalog.name THEN ''
                                                ELSE pg_catalog.quote_literal(reg.tenant_key) END
                   OPERATOR(pg_catalog.||) ')' AS fence_call
        FROM community_deletion.community_deletion_ddl_guard_registered() reg
        WHERE reg.purge_action OPERATOR(pg_catalog.=) 'delete'::pg_catalog.text
          AND reg.relid OPERATOR(pg_catalog.<>) reg.root
          AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger t
                          WHERE t.tgrelid OPERATOR(pg_catalog.=) reg.relid AND NOT t.tgisinternal
                            AND t.tgfoid OPERATOR(pg_catalog.=) ANY (ARRAY[fence_function, truncate_function]))
    LOOP
        EXECUTE pg_catalog.format('SELECT EXISTS (SELECT 1 FROM %s m JOIN community_deletion.communities c ON c.id OPERATOR(pg_catalog.=) m.%I '
                                  'WHERE c.deletion_state OPERATOR(pg_catalog.<>) ''active''::pg_catalog.text)', member.relid, member.tenant_key) INTO foreign_rows;
        IF foreign_rows THEN
            RAISE EXCEPTION USING ERRCODE = '42501',
                MESSAGE = pg_catalog.format('DDL refused: %s makes %s a partition of %s while it holds rows of a community that is being deleted',
                                            TG_TAG, member.relid, member.table_name);
        END IF;
        EXECUTE pg_catalog.format('CREATE OR REPLACE TRIGGER community_write_fence_insert AFTER INSERT ON %s '
                                  'REFERENCING NEW TABLE AS community_fence_new '
                                  'FOR EACH STATEMENT EXECUTE FUNCTION %s', member.relid, member.fence_call);
        EXECUTE pg_catalog.format('CREATE OR REPLACE TRIGGER community_write_fence_update AFTER UPDATE ON %s '
                                  'REFERENCING OLD TABLE AS community_fence_old NEW TABLE AS community_fence_new '
                                  'FOR EACH STATEMENT EXECUTE FUNCTION %s', member.relid, member.fence_call);
        EXECUTE pg_catalog.format('CREATE OR REPLACE TRIGGER community_write_fence_delete AFTER DELETE ON %s '
                                  'REFERENCING OLD TABLE AS community_fence_old '
                                  'FOR EACH STATEMENT EXECUTE FUNCTION %s', member.relid, member.fence_call);
        EXECUTE pg_catalog.format('CREATE OR REPLACE TRIGGER community_write_fence_truncate BEFORE TRUNCATE ON %s '
                                  'FOR EACH STATEMENT EXECUTE FUNCTION %s', member.relid, truncate_function::pg_catalog.regprocedure);
        EXECUTE pg_catalog.format('GRANT SELECT, UPDATE, DELETE ON %s TO community_deletion_executor', member.relid);
        EXECUTE pg_catalog.format('GRANT SELECT (%I) ON %s TO community_deletion_operator', member.tenant_key, member.relid);
    END LOOP;

    -- Everything else the drift report flags about registered tables,
    -- fences, guard triggers, installed functions and row security, checked
    -- here without calling it. Unregistered tables are not refused (a
    -- service creates a tenant table, then attaches it), nor a fence on a
    -- table not yet registered (attach fences before it registers) unless
    -- that table holds rows and its fence is incomplete.
    WITH registered AS (
        -- oid is NULL when the table is gone or has no uuid column named by its tenant key.
        SELECT r.table_schema, r.table_name, r.purge_action, t.oid, t.attnotnull,
               pg_catalog.quote_ident(r.table_schema::pg_catalog.text) OPERATOR(pg_catalog.||) '.'::pg_catalog.text
                   OPERATOR(pg_catalog.||) pg_catalog.quote_ident(r.table_name::pg_catalog.text) AS display_name
        FROM community_deletion.community_scoped_tables r
        LEFT JOIN LATERAL (
            SELECT c.oid, a.attnotnull
            FROM pg_catalog.pg_class c
            JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
            JOIN pg_catalog.pg_attribute a ON a.attrelid OPERATOR(pg_catalog.=) c.oid
                AND a.attname OPERATOR(pg_catalog.=) r.tenant_key AND NOT a.attisdropped
                AND a.atttypid OPERATOR(pg_catalog.=) 'pg_catalog.uuid'::pg_catalog.regtype::pg_catalog.oid
            WHERE c.relname OPERATOR(pg_catalog.=) r.table_name AND n.nspname OPERATOR(pg_catalog.=) r.table_schema
              AND c.relkind OPERATOR(pg_catalog.=) ANY (ARRAY['r', 'p']::pg_catalog."char"[]) AND NOT c.relispartition) t ON true
    ), members AS (
        -- Every table of a registered 'delete' table's partition tree.
        SELECT registered.display_name, part.relid
        FROM registered
        CROSS JOIN LATERAL (SELECT registered.oid
                            UNION SELECT tree.relid::pg_catalog.oid
                                  FROM pg_catalog.pg_partition_tree(registered.oid::pg_catalog.regclass) tree) part (relid)
        WHERE registered.purge_action OPERATOR(pg_catalog.=) 'delete'::pg_catalog.text AND registered.oid IS NOT NULL
    ), fence_state AS (
        -- Per table with a fence trigger: is each event covered whole?
        SELECT t.tgrelid AS relid,
               pg_catalog.bool_or(t.tgtype OPERATOR(pg_catalog.=) 4
                                  AND t.tgnewtable OPERATOR(pg_catalog.=) 'community_fence_new'::pg_catalog.name AND ok.whole) AS on_insert,
               pg_catalog.bool_or(t.tgtype OPERATOR(pg_catalog.=) 16 AND t.tgoldtable OPERATOR(pg_catalog.=) 'community_fence_old'::pg_catalog.name
                                  AND t.tgnewtable OPERATOR(pg_catalog.=) 'community_fence_new'::pg_catalog.name AND ok.whole) AS on_update,
               pg_catalog.bool_or(t.tgtype OPERATOR(pg_catalog.=) 8
                                  AND t.tgoldtable OPERATOR(pg_catalog.=) 'community_fence_old'::pg_catalog.name AND ok.whole) AS on_delete
        FROM pg_catalog.pg_trigger t
        CROSS JOIN LATERAL (SELECT t.tgenabled OPERATOR(pg_catalog.=) ANY (ARRAY['O', 'A']::pg_catalog."char"[])
                                   AND t.tgqual IS NULL
                                   AND pg_catalog.cardinality(t.tgattr::pg_catalog.int2[]) OPERATOR(pg_catalog.=) 0) ok (whole)
        WHERE t.tgfoid OPERATOR(pg_catalog.=) fence_function AND NOT t.tgisinternal
        GROUP BY t.tgrelid
    ), guards AS (
        SELECT g.table_name, g.trigger_name, t.tgenabled,
               t.tgfoid OPERATOR(pg_catalog.=) pg_catalog.to_regprocedure('community_deletion.'::pg_catalog.text
                                                                          OPERATOR(pg_catalog.||) g.function_signature)::pg_catalog.oid AS same_function
        FROM community_deletion.community_deletion_guard_triggers() g
        LEFT JOIN pg_catalog.pg_trigger t
            ON t.tgrelid OPERATOR(pg_catalog.=) pg_catalog.to_regclass('community_deletion.'::pg_catalog.text
                                                                      OPERATOR(pg_catalog.||) pg_catalog.quote_ident(g.table_name))::pg_catalog.oid
           AND t.tgname OPERATOR(pg_catalog.=) g.trigger_name
    ), installed AS (
        SELECT d.function_signature,
               pg_catalog.to_regprocedure('community_deletion.'::pg_catalog.text OPERATOR(pg_catalog.||) d.function_signature)::pg_catalog.oid AS oid,
               d.digest
        FROM community_deletion.community_deletion_function_digests d
    ), row_secured AS (
        SELECT registered.display_name
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
        SELECT registered.display_name AS subject, 'missing'::pg_catalog.text AS problem
        FROM registered WHERE registered.oid IS NULL
        UNION ALL
        SELECT registered.display_name, 'shape'
        FROM registered
        WHERE registered.oid IS NOT NULL
          AND registered.attnotnull OPERATOR(pg_catalog.<>) (registered.purge_action OPERATOR(pg_catalog.=) 'delete'::pg_catalog.text)
        UNION ALL
        SELECT members.display_name, 'unfenced'
        FROM members LEFT JOIN fence_state f ON f.relid OPERATOR(pg_catalog.=) members.relid
        WHERE NOT coalesce(f.on_insert AND f.on_update AND f.on_delete, false)
        UNION ALL
        SELECT members.display_name, 'unfenced: no TRUNCATE fence'
        FROM members
        WHERE NOT EXISTS (
            SELECT 1 FROM pg_catalog.pg_trigger t
            WHERE t.tgrelid OPERATOR(pg_catalog.=) members.relid AND t.tgfoid OPERATOR(pg_catalog.=) truncate_function
              AND t.tgtype OPERATOR(pg_catalog.=) 34 AND t.tgqual IS NULL AND NOT t.tgisinternal
              AND t.tgenabled OPERATOR(pg_catalog.=) ANY (ARRAY['O', 'A']::pg_catalog."char"[]))
        UNION ALL
        SELECT c.oid::pg_catalog.regclass::pg_catalog.text, 'partly fenced and holding rows'
        FROM fence_state f
        JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) f.relid
        WHERE NOT (f.on_insert AND f.on_update AND f.on_delete)
          AND NOT EXISTS (SELECT 1 FROM members WHERE members.relid OPERATOR(pg_catalog.=) f.relid)
          AND c.relkind OPERATOR(pg_catalog.=) 'r'::pg_catalog."char" AND c.relpersistence OPERATOR(pg_catalog.<>) 't'::pg_catalog."char"
          AND pg_catalog.pg_relation_size(c.oid::pg_catalog.regclass) OPERATOR(pg_catalog.>) 0
        UNION ALL
        SELECT guards.table_name OPERATOR(pg_catalog.||) '.'::pg_catalog.text OPERATOR(pg_catalog.||) guards.trigger_name,
               CASE WHEN guards.tgenabled IS NULL OR NOT guards.same_function THEN 'guard_missing' ELSE 'guard_disabled' END
        FROM guards
        WHERE guards.tgenabled IS NULL OR NOT guards.same_function
           OR NOT guards.tgenabled OPERATOR(pg_catalog.=) ANY (ARRAY['O', 'A']::pg_catalog."char"[])
        UNION ALL
        SELECT installed.function_signature,
               CASE WHEN p.oid IS NULL THEN 'function_missing' ELSE 'function_changed' END
        FROM installed
        LEFT JOIN pg_catalog.pg_proc p ON p.oid OPERATOR(pg_catalog.=) installed.oid
        WHERE p.oid IS NULL
           OR pg_catalog.md5(pg_catalog.concat_ws(E'\x1f', p.prosrc, pg_catalog.array_to_string(p.proconfig, E'\x1e'),
                                                  p.prosecdef::pg_catalog.text, p.provolatile::pg_catalog.text,
                                                  pg_catalog.pg_get_userbyid(p.proowner)))
              OPERATOR(pg_catalog.<>) installed.digest
        UNION ALL
        -- A function in schema community_deletion that the migrations did
        -- not install (nor is the guard's own, a superuser's), and any
        -- operator there: this project installs none.
        SELECT p.oid::pg_catalog.regprocedure::pg_catalog.text, 'function_planted'
        FROM pg_catalog.pg_proc p
        WHERE p.pronamespace OPERATOR(pg_catalog.=) home
          AND NOT EXISTS (SELECT 1 FROM installed WHERE installed.oid OPERATOR(pg_catalog.=) p.oid)
          AND NOT (p.proname OPERATOR(pg_catalog.~) '^community_deletion_ddl_guard($|_)'::pg_catalog.text
                   AND EXISTS (SELECT 1 FROM pg_catalog.pg_roles o WHERE o.oid OPERATOR(pg_catalog.=) p.proowner AND o.rolsuper))
        UNION ALL
        SELECT pg_catalog.format('operator %s(%s, %s)', o.oprname, o.oprleft::pg_catalog.regtype, o.oprright::pg_catalog.regtype),
               'operator_planted'
        FROM pg_catalog.pg_operator o
        WHERE o.oprnamespace OPERATOR(pg_catalog.=) home
        UNION ALL
        SELECT DISTINCT row_secured.display_name, 'row_security'
        FROM row_secured
    ) found
    ORDER BY 1, 2
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = pg_catalog.format('DDL refused: %s leaves %s %s (see community_deletion.community_deletion_catalog_drift()); change the deletion schema only through its migrations',
                                        TG_TAG, problem.subject, problem.problem);
    END IF;
END
$body$;
REVOKE ALL ON FUNCTION community_deletion.community_deletion_ddl_guard() FROM PUBLIC;
CREATE EVENT TRIGGER community_deletion_ddl_guard ON ddl_command_end
    EXECUTE FUNCTION community_deletion.community_deletion_ddl_guard();
COMMIT;
