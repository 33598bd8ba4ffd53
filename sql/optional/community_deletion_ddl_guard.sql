-- The optional DDL guard: event triggers that make tampering with the
-- deletion schema impossible, not only visible. A table's owner can always
-- ALTER its own objects, and the owner of schema community_deletion can drop
-- or create anything in it; an event trigger sees every DDL command of every
-- role, so a superuser installs it once, after the migrations (it needs
-- migration 00026; install it again after upgrading to a later release):
--
--     go run ./cmd/migrate install-ddl-guard   (or: psql -f this file, as a superuser)
--
-- It lives in schema community_deletion, owned by the installing superuser,
-- runs with search_path = pg_catalog, pg_temp and names everything
-- community_deletion.x or pg_catalog.x (operators too), so nothing another
-- role plants runs inside it. Of the migrations' functions it calls only the
-- constant lists community_deletion_guard_triggers() and
-- community_deletion_control_table(): what it needs of the others (a
-- registered table's fence arguments, whether a table carries its fences,
-- the paths of a table attached through its parents) it computes with its
-- own copies, which TestDDLGuardAgreesWithTheMigrationsOnFences holds to
-- the migrations', so that the schema's owner never has code of its own run
-- as a superuser. Installing it over a guard an earlier release installed
-- in the schema of communities removes that one first (its event triggers,
-- functions, tables and TRUNCATE fences).
--
-- At the end of every DDL command outside a migration run it refuses
-- (SQLSTATE 42501) a command that:
--   * creates or alters anything in schema community_deletion, or moves
--     something into it (CREATE FUNCTION, CREATE OPERATOR, ALTER ... SET
--     SCHEMA community_deletion), or leaves a function or operator there that
--     the migrations did not install; the one exception is the write
--     fence's constant community_deletion_fence_armed() (migration 00035),
--     replaced by one of its two bodies under the fence marker's exclusive
--     lock: armed only while every table with a bound fence is held in
--     SHARE mode, dormant only while no community is quiescing or fenced;
--     and the write fence specialized when a deletion arms it (migration
--     00040), to a body that digests as installed once the branches its
--     first line names are turned back into their markers;
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
--   * leaves a registered table, or any of its partitions, without its whole
--     fence, with exactly the arguments its registration gives it (none for
--     a community_id key, the column for another uuid key, the column and
--     kind for an integer or text key, 'through' and the paths for a table
--     attached through its parents): for a 'delete' table, for each of
--     INSERT, UPDATE and DELETE an enabled AFTER ... FOR EACH STATEMENT
--     trigger of enforce_community_write_fence() with its transition tables,
--     no WHEN clause and no column list, and attach's BEFORE TRUNCATE
--     trigger community_write_fence_truncate; for a 'nullify' table, the
--     kept-row fence on INSERT and UPDATE. A partition that has none of
--     these and was not attached in this transaction (one made in a
--     migration run) is fenced by the enabled clone of its partitioned
--     table's row fence instead; disabling that clone unfences it;
--   * leaves a fence trigger of a registered table with a WHEN clause or a
--     column list, or a fence of the other purge action on it;
--   * leaves the row fence community_write_fence_row of a registered
--     partitioned table (which PostgreSQL clones onto every partition made
--     later) disabled, firing for replication sessions only, or re-created
--     otherwise than attach creates it; a clone on a partition that has its
--     statement fences may be enabled or not (attach disables it);
--   * leaves a table outside the registry (a detached partition) that holds
--     rows and carries part of a write fence;
--   * leaves a registered table dropped, renamed, or reshaped: its tenant key
--     column gone, of a type of another kind than the registered one (uuid;
--     smallint, integer or bigint; text or varchar), or NOT NULL on a
--     'nullify' table (a 'delete' table's key may be nullable);
--   * leaves a table attached through its parents with other paths than it
--     was attached by (a foreign key or declared reference it follows gone,
--     a referencing column renamed), or with a column of a path (its own or
--     a parent's) gone or of another kind than the column it joins;
--   * leaves a registered table (or partition) whose row-level security
--     applies to a login of the executor or operator role;
--   * rewrites a registered table (ALTER COLUMN ... TYPE ... USING, for one)
--     and changes any row of a tenant that is not active: a second event
--     trigger, on table_rewrite, digests those rows before the rewrite (this
--     one holds in migration runs too).
-- A third, on sql_drop, refuses outside a migration run a command that
-- drops a column a registration needs (a tenant key column, a column of a
-- child table's path, on the table or a parent: dropped and added again in
-- one ALTER TABLE, a column would give every row another tenant or none,
-- with no rewrite to see), or the row fence of a registered partitioned
-- table (the drop of a whole table is the check above's). A fourth, at the
-- start of DROP FUNCTION, DROP ROUTINE, DROP SCHEMA and DROP OWNED, refuses
-- them to a member of community_deletion's owner that is not a superuser,
-- outside a migration run: a schema's owner may drop every object in it, the
-- guard's own functions too (and CASCADE takes the event triggers with
-- them, after which nothing fires at the command's end).
--
-- Entitled paths pass: attach_community_write_fence() and
-- attach_child_table() (each command only creates fence triggers exactly
-- as attach does, with the registered arguments once the table is
-- registered, which can only add or restore protection; the rest leaves
-- whole fences); declare_reference() and drop_reference(), which write no
-- DDL; a new partition of a registered table (CREATE TABLE ... PARTITION OF,
-- ALTER TABLE ... ATTACH PARTITION) is fenced and granted at once as attach
-- would, with its clone of the row fence disabled on a leaf, and refused
-- when it holds rows of a tenant that is not active; a partition attached
-- with its fence whole (one detached and re-attached) gets its clone
-- disabled likewise, and is refused when it holds rows of a tenant that was
-- deleted; any DDL that leaves none of the above.
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
    IF pg_catalog.to_regprocedure('community_deletion.enforce_community_write_fence_row()') IS NULL
       OR pg_catalog.to_regclass('community_deletion.community_deletion_references') IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '55000',
            MESSAGE = 'DDL guard not installed: this guard needs migration 00026 (real schemas), and the database is older; migrate it up (migrate up) first';
    END IF;
END
$check$;

-- Whatever guard is installed, this release's or an earlier one's: its
-- event triggers first, so nothing of it runs while it goes.
DROP EVENT TRIGGER IF EXISTS community_deletion_ddl_guard;
DROP EVENT TRIGGER IF EXISTS community_deletion_ddl_guard_rewrite;
DROP EVENT TRIGGER IF EXISTS community_deletion_ddl_guard_drop;
DROP EVENT TRIGGER IF EXISTS community_deletion_ddl_guard_sql_drop;
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


-- What the migrations compute about a registered table's fence, copied so
-- that the guard, a superuser's, calls none of the schema owner's functions
-- (migration 00026's community_deletion_key_kind(), fence_args(),
-- kept_row_args(), trigger_args(), statement_fenced(), row_fenced(),
-- table_references() and child_paths(); TestDDLGuardAgreesWithTheMigrationsOnFences
-- holds them to each other).

-- The kind of a tenant key column's type: 'uuid', 'integer' (smallint,
-- integer, bigint) or 'text' (text, varchar); NULL for any other.
CREATE FUNCTION community_deletion.community_deletion_ddl_guard_key_kind(key_type pg_catalog.oid) RETURNS pg_catalog.text
    LANGUAGE sql IMMUTABLE
    SET search_path = pg_catalog, pg_temp
    AS $body$
    SELECT CASE
        WHEN key_type OPERATOR(pg_catalog.=) 'pg_catalog.uuid'::pg_catalog.regtype::pg_catalog.oid THEN 'uuid'
        WHEN key_type OPERATOR(pg_catalog.=) ANY (ARRAY['pg_catalog.int2'::pg_catalog.regtype::pg_catalog.oid,
                                                       'pg_catalog.int4'::pg_catalog.regtype::pg_catalog.oid,
                                                       'pg_catalog.int8'::pg_catalog.regtype::pg_catalog.oid]) THEN 'integer'
        WHEN key_type OPERATOR(pg_catalog.=) ANY (ARRAY['pg_catalog.text'::pg_catalog.regtype::pg_catalog.oid,
                                                       'pg_catalog.varchar'::pg_catalog.regtype::pg_catalog.oid]) THEN 'text'
    END
$body$;

-- The arguments of a registered table's fence: for a 'delete' table none
-- for a uuid community_id key, the column for another uuid key, (column,
-- kind) for an integer or text key, ('through', {kind, paths}) for a table
-- attached through its parents; for a 'nullify' table's kept-row fence the
-- column, and its kind unless it is a uuid.
CREATE FUNCTION community_deletion.community_deletion_ddl_guard_fence_args(
        purge_action pg_catalog.text, tenant_key pg_catalog.name, key_kind pg_catalog.text, parents pg_catalog.jsonb)
    RETURNS pg_catalog.text[]
    LANGUAGE sql IMMUTABLE
    SET search_path = pg_catalog, pg_temp
    AS $body$
    SELECT CASE
        WHEN purge_action OPERATOR(pg_catalog.<>) 'delete'::pg_catalog.text
            THEN CASE WHEN coalesce(key_kind, 'uuid') OPERATOR(pg_catalog.=) 'uuid'::pg_catalog.text
                      THEN ARRAY[tenant_key::pg_catalog.text] ELSE ARRAY[tenant_key::pg_catalog.text, key_kind] END
        WHEN parents IS NOT NULL
            THEN ARRAY['through'::pg_catalog.text,
                       pg_catalog.jsonb_build_object('kind', coalesce(key_kind, 'uuid'), 'paths', parents)::pg_catalog.text]
        WHEN coalesce(key_kind, 'uuid') OPERATOR(pg_catalog.=) 'uuid'::pg_catalog.text
             AND tenant_key OPERATOR(pg_catalog.=) 'community_id'::pg_catalog.name THEN '{}'::pg_catalog.text[]
        WHEN coalesce(key_kind, 'uuid') OPERATOR(pg_catalog.=) 'uuid'::pg_catalog.text THEN ARRAY[tenant_key::pg_catalog.text]
        ELSE ARRAY[tenant_key::pg_catalog.text, key_kind]
    END
$body$;

-- args as pg_trigger.tgargs stores them.
CREATE FUNCTION community_deletion.community_deletion_ddl_guard_trigger_args(args pg_catalog.text[]) RETURNS pg_catalog.bytea
    LANGUAGE sql IMMUTABLE
    SET search_path = pg_catalog, pg_temp
    AS $body$
    SELECT coalesce((SELECT pg_catalog.string_agg(pg_catalog.convert_to(a.value, 'UTF8') OPERATOR(pg_catalog.||) '\x00'::pg_catalog.bytea,
                                                  ''::pg_catalog.bytea ORDER BY a.ordinality)
                     FROM pg_catalog.unnest(args) WITH ORDINALITY a (value, ordinality)), ''::pg_catalog.bytea)
$body$;

-- Whether relation has the whole statement-level fence of purge_action
-- ('delete': enforce_community_write_fence() on INSERT, UPDATE and DELETE;
-- 'nullify': the kept-row fence on INSERT and UPDATE), enabled, firing for
-- every row change, and every such trigger with exactly the arguments args.
CREATE FUNCTION community_deletion.community_deletion_ddl_guard_statement_fenced(
        relation pg_catalog.oid, purge_action pg_catalog.text, args pg_catalog.text[]) RETURNS pg_catalog.bool
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $body$
    SELECT coalesce(pg_catalog.bool_or((t.tgtype::pg_catalog.int4 OPERATOR(pg_catalog.&) 4) OPERATOR(pg_catalog.=) 4
                                       AND t.tgnewtable OPERATOR(pg_catalog.=) 'community_fence_new'::pg_catalog.name)
                    AND pg_catalog.bool_or((t.tgtype::pg_catalog.int4 OPERATOR(pg_catalog.&) 16) OPERATOR(pg_catalog.=) 16
                                           AND t.tgoldtable OPERATOR(pg_catalog.=) 'community_fence_old'::pg_catalog.name
                                           AND t.tgnewtable OPERATOR(pg_catalog.=) 'community_fence_new'::pg_catalog.name)
                    AND (purge_action OPERATOR(pg_catalog.<>) 'delete'::pg_catalog.text
                         OR pg_catalog.bool_or((t.tgtype::pg_catalog.int4 OPERATOR(pg_catalog.&) 8) OPERATOR(pg_catalog.=) 8
                                               AND t.tgoldtable OPERATOR(pg_catalog.=) 'community_fence_old'::pg_catalog.name))
                    AND pg_catalog.bool_and(t.tgnargs::pg_catalog.int4 OPERATOR(pg_catalog.=) pg_catalog.cardinality(args)
                                            AND t.tgargs OPERATOR(pg_catalog.=) community_deletion.community_deletion_ddl_guard_trigger_args(args)),
                    false)
    FROM pg_catalog.pg_trigger t
    WHERE t.tgrelid OPERATOR(pg_catalog.=) relation
      AND t.tgfoid OPERATOR(pg_catalog.=) pg_catalog.to_regprocedure(CASE WHEN purge_action OPERATOR(pg_catalog.=) 'delete'::pg_catalog.text
                                                                          THEN 'community_deletion.enforce_community_write_fence()'
                                                                          ELSE 'community_deletion.enforce_community_kept_row_fence()' END)::pg_catalog.oid
      AND NOT t.tgisinternal
      AND t.tgenabled OPERATOR(pg_catalog.=) ANY (ARRAY['O', 'A']::pg_catalog."char"[])
      AND (t.tgtype::pg_catalog.int4 OPERATOR(pg_catalog.&) (1 OPERATOR(pg_catalog.|) 2 OPERATOR(pg_catalog.|) 64)) OPERATOR(pg_catalog.=) 0
      AND t.tgqual IS NULL
      AND pg_catalog.cardinality(t.tgattr::pg_catalog.int2[]) OPERATOR(pg_catalog.=) 0
$body$;

-- Whether relation has the row fence community_write_fence_row of
-- purge_action that attach puts on a partitioned table (for INSERT, UPDATE
-- and, 'delete', DELETE), with exactly the arguments args; enabled when
-- enabled is true (a partition's clone), in whatever state otherwise.
CREATE FUNCTION community_deletion.community_deletion_ddl_guard_row_fenced(
        relation pg_catalog.oid, purge_action pg_catalog.text, args pg_catalog.text[], enabled pg_catalog.bool) RETURNS pg_catalog.bool
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $body$
    SELECT EXISTS (
        SELECT 1 FROM pg_catalog.pg_trigger t
        WHERE t.tgrelid OPERATOR(pg_catalog.=) relation
          AND t.tgfoid OPERATOR(pg_catalog.=) pg_catalog.to_regprocedure(CASE WHEN purge_action OPERATOR(pg_catalog.=) 'delete'::pg_catalog.text
                                                                              THEN 'community_deletion.enforce_community_write_fence_row()'
                                                                              ELSE 'community_deletion.enforce_community_kept_row_fence_row()' END)::pg_catalog.oid
          AND t.tgname OPERATOR(pg_catalog.=) 'community_write_fence_row'::pg_catalog.name
          AND (NOT enabled OR t.tgenabled OPERATOR(pg_catalog.=) ANY (ARRAY['O', 'A']::pg_catalog."char"[]))
          AND (t.tgtype::pg_catalog.int4 OPERATOR(pg_catalog.&) 1) OPERATOR(pg_catalog.=) 1
          AND (t.tgtype::pg_catalog.int4 OPERATOR(pg_catalog.&) (2 OPERATOR(pg_catalog.|) 64)) OPERATOR(pg_catalog.=) 0
          AND (t.tgtype::pg_catalog.int4 OPERATOR(pg_catalog.&) (4 OPERATOR(pg_catalog.|) 16)) OPERATOR(pg_catalog.=) (4 OPERATOR(pg_catalog.|) 16)
          AND (purge_action OPERATOR(pg_catalog.<>) 'delete'::pg_catalog.text
               OR (t.tgtype::pg_catalog.int4 OPERATOR(pg_catalog.&) 8) OPERATOR(pg_catalog.=) 8)
          AND t.tgqual IS NULL
          AND pg_catalog.cardinality(t.tgattr::pg_catalog.int2[]) OPERATOR(pg_catalog.=) 0
          AND t.tgnargs::pg_catalog.int4 OPERATOR(pg_catalog.=) pg_catalog.cardinality(args)
          AND t.tgargs OPERATOR(pg_catalog.=) community_deletion.community_deletion_ddl_guard_trigger_args(args))
$body$;

-- The references between relation target and other tables: foreign keys
-- (on the tables themselves, not a partition's clones) and those a table's
-- owner declared (community_deletion_references), in key order: target's
-- own references (reverse false: columns are target's, parent_columns the
-- referenced table's) and those of other tables to target (reverse true:
-- columns are target's referenced columns, parent the referencing table,
-- parent_columns its referencing columns); via says which kind.
CREATE FUNCTION community_deletion.community_deletion_ddl_guard_references(target pg_catalog.oid)
    RETURNS TABLE (via pg_catalog.text, reverse pg_catalog.bool, columns pg_catalog.name[], parent pg_catalog.oid,
                   parent_schema pg_catalog.name, parent_table pg_catalog.name, parent_columns pg_catalog.name[])
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $body$
    SELECT 'foreign key ' OPERATOR(pg_catalog.||) f.conname::pg_catalog.text, false,
           ARRAY(SELECT a.attname FROM pg_catalog.unnest(f.conkey) WITH ORDINALITY k (attnum, ordinality)
                 JOIN pg_catalog.pg_attribute a ON a.attrelid OPERATOR(pg_catalog.=) f.conrelid AND a.attnum OPERATOR(pg_catalog.=) k.attnum
                 ORDER BY k.ordinality),
           f.confrelid, pn.nspname, pc.relname,
           ARRAY(SELECT a.attname FROM pg_catalog.unnest(f.confkey) WITH ORDINALITY k (attnum, ordinality)
                 JOIN pg_catalog.pg_attribute a ON a.attrelid OPERATOR(pg_catalog.=) f.confrelid AND a.attnum OPERATOR(pg_catalog.=) k.attnum
                 ORDER BY k.ordinality)
    FROM pg_catalog.pg_constraint f
    JOIN pg_catalog.pg_class pc ON pc.oid OPERATOR(pg_catalog.=) f.confrelid
    JOIN pg_catalog.pg_namespace pn ON pn.oid OPERATOR(pg_catalog.=) pc.relnamespace
    WHERE f.contype OPERATOR(pg_catalog.=) 'f'::pg_catalog."char" AND f.conrelid OPERATOR(pg_catalog.=) target
      AND f.conparentid OPERATOR(pg_catalog.=) 0::pg_catalog.oid
    UNION ALL
    SELECT 'foreign key ' OPERATOR(pg_catalog.||) f.conname::pg_catalog.text, true,
           ARRAY(SELECT a.attname FROM pg_catalog.unnest(f.confkey) WITH ORDINALITY k (attnum, ordinality)
                 JOIN pg_catalog.pg_attribute a ON a.attrelid OPERATOR(pg_catalog.=) f.confrelid AND a.attnum OPERATOR(pg_catalog.=) k.attnum
                 ORDER BY k.ordinality),
           f.conrelid, pn.nspname, pc.relname,
           ARRAY(SELECT a.attname FROM pg_catalog.unnest(f.conkey) WITH ORDINALITY k (attnum, ordinality)
                 JOIN pg_catalog.pg_attribute a ON a.attrelid OPERATOR(pg_catalog.=) f.conrelid AND a.attnum OPERATOR(pg_catalog.=) k.attnum
                 ORDER BY k.ordinality)
    FROM pg_catalog.pg_constraint f
    JOIN pg_catalog.pg_class pc ON pc.oid OPERATOR(pg_catalog.=) f.conrelid
    JOIN pg_catalog.pg_namespace pn ON pn.oid OPERATOR(pg_catalog.=) pc.relnamespace
    WHERE f.contype OPERATOR(pg_catalog.=) 'f'::pg_catalog."char" AND f.confrelid OPERATOR(pg_catalog.=) target
      AND f.conparentid OPERATOR(pg_catalog.=) 0::pg_catalog.oid AND f.conrelid OPERATOR(pg_catalog.<>) target
    UNION ALL
    SELECT 'declared reference', false, r.child_columns, pc.oid, r.parent_schema, r.parent_table, r.parent_columns
    FROM community_deletion.community_deletion_references r
    JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) target
    JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace AND n.nspname OPERATOR(pg_catalog.=) r.child_schema
    LEFT JOIN pg_catalog.pg_namespace pn ON pn.nspname OPERATOR(pg_catalog.=) r.parent_schema
    LEFT JOIN pg_catalog.pg_class pc ON pc.relnamespace OPERATOR(pg_catalog.=) pn.oid AND pc.relname OPERATOR(pg_catalog.=) r.parent_table
        AND pc.relkind OPERATOR(pg_catalog.=) ANY (ARRAY['r', 'p']::pg_catalog."char"[])
    WHERE r.child_table OPERATOR(pg_catalog.=) c.relname
    UNION ALL
    SELECT 'declared reference', true, r.parent_columns, cc.oid, r.child_schema, r.child_table, r.child_columns
    FROM community_deletion.community_deletion_references r
    JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) target
    JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace AND n.nspname OPERATOR(pg_catalog.=) r.parent_schema
    LEFT JOIN pg_catalog.pg_namespace cn ON cn.nspname OPERATOR(pg_catalog.=) r.child_schema
    LEFT JOIN pg_catalog.pg_class cc ON cc.relnamespace OPERATOR(pg_catalog.=) cn.oid AND cc.relname OPERATOR(pg_catalog.=) r.child_table
        AND cc.relkind OPERATOR(pg_catalog.=) ANY (ARRAY['r', 'p']::pg_catalog."char"[])
    WHERE r.parent_table OPERATOR(pg_catalog.=) c.relname
      AND NOT coalesce(r.child_schema OPERATOR(pg_catalog.=) n.nspname AND r.child_table OPERATOR(pg_catalog.=) c.relname, false)
$body$;

-- The paths by which relation target reaches its tenant: for each of its
-- references to a registered 'delete' table other than itself (only to
-- parent_tables, when that is not NULL) and, only for referrer_tables,
-- each reference of such a table to target, the reference followed by the
-- other table's own key, or by each of its paths. A step through a
-- declared reference says so ("declared"), one against a reference's
-- direction too ("reverse"). {"kind": the root key's kind, "paths": [...]}
-- in a canonical order, or NULL when there is none.
CREATE FUNCTION community_deletion.community_deletion_ddl_guard_child_paths(
        target pg_catalog.oid, parent_tables pg_catalog.oid[], referrer_tables pg_catalog.oid[])
    RETURNS pg_catalog.jsonb
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $body$
    WITH hops AS (
        SELECT ref.parent,
               pg_catalog.jsonb_build_object('schema', ref.parent_schema, 'table', ref.parent_table,
                                             'columns', pg_catalog.to_jsonb(ref.columns::pg_catalog.text[]),
                                             'parent_columns', pg_catalog.to_jsonb(ref.parent_columns::pg_catalog.text[]))
                   OPERATOR(pg_catalog.||) CASE WHEN ref.via OPERATOR(pg_catalog.=) 'declared reference'::pg_catalog.text
                                                THEN '{"declared": true}'::pg_catalog.jsonb ELSE '{}'::pg_catalog.jsonb END
                   OPERATOR(pg_catalog.||) CASE WHEN ref.reverse THEN '{"reverse": true}'::pg_catalog.jsonb ELSE '{}'::pg_catalog.jsonb END AS hop,
               r.tenant_key, coalesce(r.key_kind, 'uuid') AS kind, r.parents
        FROM community_deletion.community_deletion_ddl_guard_references(target) ref
        JOIN community_deletion.community_scoped_tables r
            ON r.table_schema OPERATOR(pg_catalog.=) ref.parent_schema AND r.table_name OPERATOR(pg_catalog.=) ref.parent_table
        WHERE ref.parent IS NOT NULL AND ref.parent OPERATOR(pg_catalog.<>) target
          AND r.purge_action OPERATOR(pg_catalog.=) 'delete'::pg_catalog.text
          AND CASE WHEN ref.reverse THEN ref.parent OPERATOR(pg_catalog.=) ANY (coalesce(referrer_tables, '{}'::pg_catalog.oid[]))
                   ELSE parent_tables IS NULL OR ref.parent OPERATOR(pg_catalog.=) ANY (parent_tables) END
    ), paths AS (
        SELECT hops.kind, pg_catalog.jsonb_build_object('hops', pg_catalog.jsonb_build_array(hops.hop), 'key', hops.tenant_key) AS path
        FROM hops WHERE hops.parents IS NULL
        UNION ALL
        SELECT hops.kind,
               pg_catalog.jsonb_build_object('hops', pg_catalog.jsonb_build_array(hops.hop) OPERATOR(pg_catalog.||) (p.value OPERATOR(pg_catalog.->) 'hops'),
                                             'key', p.value OPERATOR(pg_catalog.->) 'key')
        FROM hops CROSS JOIN pg_catalog.jsonb_array_elements(hops.parents) p
        WHERE hops.parents IS NOT NULL
    )
    SELECT CASE WHEN pg_catalog.count(*) OPERATOR(pg_catalog.=) 0 THEN NULL
                ELSE pg_catalog.jsonb_build_object('kind', pg_catalog.min(paths.kind),
                                                   'paths', pg_catalog.jsonb_agg(paths.path ORDER BY paths.path::pg_catalog.text)) END
    FROM paths
$body$;

-- The tables the first steps of paths lead to, against a reference's
-- direction (reverse) or along it; NULL when there are none.
CREATE FUNCTION community_deletion.community_deletion_ddl_guard_first_steps(paths pg_catalog.jsonb, reverse pg_catalog.bool)
    RETURNS pg_catalog.oid[]
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $body$
    SELECT pg_catalog.array_agg(DISTINCT c.oid ORDER BY c.oid)
    FROM pg_catalog.jsonb_array_elements(paths) p
    JOIN pg_catalog.pg_namespace n
        ON n.nspname OPERATOR(pg_catalog.=) (((p.value OPERATOR(pg_catalog.->) 'hops') OPERATOR(pg_catalog.->) 0) OPERATOR(pg_catalog.->>) 'schema')
    JOIN pg_catalog.pg_class c ON c.relnamespace OPERATOR(pg_catalog.=) n.oid
        AND c.relname OPERATOR(pg_catalog.=) (((p.value OPERATOR(pg_catalog.->) 'hops') OPERATOR(pg_catalog.->) 0) OPERATOR(pg_catalog.->>) 'table')
    WHERE coalesce((((p.value OPERATOR(pg_catalog.->) 'hops') OPERATOR(pg_catalog.->) 0) OPERATOR(pg_catalog.->>) 'reverse')::pg_catalog.bool, false)
          OPERATOR(pg_catalog.=) reverse
$body$;

-- Whether a foreign key, not a query, keeps the rows of a deleted tenant
-- out of registered table target (key column tenant_key, or paths
-- parents): for a table keyed by its own column, a foreign key of that
-- column alone to the declared tenant table's key; for a table attached
-- through its parents, no first step along a declared reference. The
-- tenant table itself is never bound.
CREATE FUNCTION community_deletion.community_deletion_ddl_guard_fence_bound(
        target pg_catalog.oid, tenant_key pg_catalog.name, parents pg_catalog.jsonb) RETURNS pg_catalog.bool
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $body$
    SELECT CASE
        WHEN parents IS NOT NULL THEN
            pg_catalog.jsonb_typeof(parents) OPERATOR(pg_catalog.=) 'array'::pg_catalog.text
            AND pg_catalog.jsonb_array_length(parents) OPERATOR(pg_catalog.>) 0
            AND NOT EXISTS (SELECT 1 FROM pg_catalog.jsonb_array_elements(parents) p
                            WHERE coalesce((((p.value OPERATOR(pg_catalog.->) 'hops') OPERATOR(pg_catalog.->) 0)
                                            OPERATOR(pg_catalog.->>) 'declared')::pg_catalog.bool, false)
                              AND NOT coalesce((((p.value OPERATOR(pg_catalog.->) 'hops') OPERATOR(pg_catalog.->) 0)
                                                OPERATOR(pg_catalog.->>) 'reverse')::pg_catalog.bool, false))
        -- As the migrations' join, written as subqueries: a join of six
        -- catalogs took longer to plan than the guard takes to run.
        ELSE EXISTS (
            SELECT 1
            FROM pg_catalog.pg_constraint f
            WHERE f.conrelid OPERATOR(pg_catalog.=) target AND f.contype OPERATOR(pg_catalog.=) 'f'::pg_catalog."char"
              AND f.conkey OPERATOR(pg_catalog.=) ARRAY[(SELECT a.attnum FROM pg_catalog.pg_attribute a
                                                         WHERE a.attrelid OPERATOR(pg_catalog.=) target
                                                           AND a.attname OPERATOR(pg_catalog.=) tenant_key
                                                           AND a.attnum OPERATOR(pg_catalog.>) 0 AND NOT a.attisdropped)]
              AND EXISTS (SELECT 1
                          FROM community_deletion.community_deletion_tenant_table d
                          JOIN pg_catalog.pg_namespace n ON n.nspname OPERATOR(pg_catalog.=) d.table_schema
                          JOIN pg_catalog.pg_class tc ON tc.relnamespace OPERATOR(pg_catalog.=) n.oid
                              AND tc.relname OPERATOR(pg_catalog.=) d.table_name
                          WHERE tc.oid OPERATOR(pg_catalog.=) f.confrelid AND tc.oid OPERATOR(pg_catalog.<>) target
                            AND f.confkey OPERATOR(pg_catalog.=) ARRAY[(SELECT ta.attnum FROM pg_catalog.pg_attribute ta
                                                                        WHERE ta.attrelid OPERATOR(pg_catalog.=) tc.oid
                                                                          AND ta.attname OPERATOR(pg_catalog.=) d.key_column
                                                                          AND NOT ta.attisdropped)]))
    END
$body$;

-- The arguments of a fence (write or kept-row) bound by a foreign key,
-- from its arguments args otherwise: always three, the key column (or
-- 'through'), the key kind (or the paths) and 'bound'.
CREATE FUNCTION community_deletion.community_deletion_ddl_guard_bound_args(args pg_catalog.text[]) RETURNS pg_catalog.text[]
    LANGUAGE sql IMMUTABLE
    SET search_path = pg_catalog, pg_temp
    AS $body$
    SELECT CASE WHEN coalesce(pg_catalog.cardinality(args), 0) OPERATOR(pg_catalog.=) 0
                    THEN ARRAY['community_id', 'uuid', 'bound']::pg_catalog.text[]
                WHEN pg_catalog.cardinality(args) OPERATOR(pg_catalog.=) 1
                    THEN ARRAY[args[1], 'uuid', 'bound']::pg_catalog.text[]
                ELSE ARRAY[args[1], args[2], 'bound']::pg_catalog.text[] END
$body$;

-- The arguments registered table target's fences are expected to carry:
-- the bound ones when its own fence has them and a foreign key still
-- binds it, the full ones otherwise (which a table is always allowed).
CREATE FUNCTION community_deletion.community_deletion_ddl_guard_expected_args(
        target pg_catalog.oid, purge_action pg_catalog.text, tenant_key pg_catalog.name, key_kind pg_catalog.text, parents pg_catalog.jsonb)
    RETURNS pg_catalog.text[]
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $body$
    SELECT CASE WHEN EXISTS (SELECT 1 FROM pg_catalog.pg_trigger t
                             WHERE t.tgrelid OPERATOR(pg_catalog.=) target AND NOT t.tgisinternal
                               AND t.tgnargs OPERATOR(pg_catalog.=) 3
                               AND t.tgname OPERATOR(pg_catalog.=) ANY (ARRAY['community_write_fence_insert',
                                                                              'community_kept_row_fence_insert']::pg_catalog.name[]))
                     AND community_deletion.community_deletion_ddl_guard_fence_bound(target, tenant_key, parents)
                THEN community_deletion.community_deletion_ddl_guard_bound_args(full_args.args)
                ELSE full_args.args END
    FROM (SELECT community_deletion.community_deletion_ddl_guard_fence_args(purge_action, tenant_key, key_kind, parents) AS args) full_args
$body$;

-- Why the foreign keys that bind registered table target (key column
-- tenant_key, or paths parents) do not, in fact, keep a deleted tenant's
-- rows out of it, or NULL when they do: community_deletion_ddl_guard_fence_bound()
-- does not hold, or no foreign key it relies on is there with every
-- trigger of its (on either table, on every partition) enabled. For a
-- table attached through its parents that is a foreign key for each first
-- step along one; for a table keyed by its own column, one foreign key of
-- that column to the declared tenant table's key. Stricter than the
-- migrations' test, which does not look at the foreign keys of a child
-- table's paths (the paths check does) nor at their triggers.
CREATE FUNCTION community_deletion.community_deletion_ddl_guard_unbound_detail(
        target pg_catalog.oid, tenant_key pg_catalog.name, parents pg_catalog.jsonb) RETURNS pg_catalog.text
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $body$
    WITH steps AS (
        -- What must bind: the tenant table's key, or each first step
        -- along a reference's direction.
        SELECT tc.oid AS parent, d.table_schema::pg_catalog.text AS parent_schema, d.table_name::pg_catalog.text AS parent_table,
               ARRAY[tenant_key::pg_catalog.text] AS columns, ARRAY[d.key_column::pg_catalog.text] AS parent_columns
        FROM community_deletion.community_deletion_tenant_table d
        LEFT JOIN pg_catalog.pg_namespace n ON n.nspname OPERATOR(pg_catalog.=) d.table_schema
        LEFT JOIN pg_catalog.pg_class tc ON tc.relnamespace OPERATOR(pg_catalog.=) n.oid AND tc.relname OPERATOR(pg_catalog.=) d.table_name
        WHERE parents IS NULL
        UNION
        SELECT c.oid, hop OPERATOR(pg_catalog.->>) 'schema', hop OPERATOR(pg_catalog.->>) 'table',
               ARRAY(SELECT x.value FROM pg_catalog.jsonb_array_elements_text(hop OPERATOR(pg_catalog.->) 'columns') WITH ORDINALITY x (value, ordinality)
                     ORDER BY x.ordinality),
               ARRAY(SELECT x.value FROM pg_catalog.jsonb_array_elements_text(hop OPERATOR(pg_catalog.->) 'parent_columns') WITH ORDINALITY x (value, ordinality)
                     ORDER BY x.ordinality)
        FROM pg_catalog.jsonb_array_elements(CASE WHEN pg_catalog.jsonb_typeof(parents) OPERATOR(pg_catalog.=) 'array'::pg_catalog.text
                                                  THEN parents ELSE '[]'::pg_catalog.jsonb END) p
        CROSS JOIN LATERAL (SELECT (p.value OPERATOR(pg_catalog.->) 'hops') OPERATOR(pg_catalog.->) 0) step1 (hop)
        LEFT JOIN pg_catalog.pg_namespace n ON n.nspname OPERATOR(pg_catalog.=) (hop OPERATOR(pg_catalog.->>) 'schema')
        LEFT JOIN pg_catalog.pg_class c ON c.relnamespace OPERATOR(pg_catalog.=) n.oid AND c.relname OPERATOR(pg_catalog.=) (hop OPERATOR(pg_catalog.->>) 'table')
        WHERE NOT coalesce((hop OPERATOR(pg_catalog.->>) 'reverse')::pg_catalog.bool, false)
          AND NOT coalesce((hop OPERATOR(pg_catalog.->>) 'declared')::pg_catalog.bool, false)
    ), keys AS (
        -- The foreign keys of target that make each step, and whether every
        -- trigger of theirs (and of their partitions' clones) is enabled.
        SELECT steps.parent_schema, steps.parent_table, steps.columns, steps.parent_columns, f.conname,
               NOT EXISTS (WITH RECURSIVE clones (oid) AS (
                               SELECT f.oid
                               UNION ALL
                               SELECT k.oid FROM pg_catalog.pg_constraint k JOIN clones ON k.conparentid OPERATOR(pg_catalog.=) clones.oid)
                           SELECT 1 FROM pg_catalog.pg_trigger t JOIN clones ON t.tgconstraint OPERATOR(pg_catalog.=) clones.oid
                           WHERE NOT t.tgenabled OPERATOR(pg_catalog.=) ANY (ARRAY['O', 'A']::pg_catalog."char"[])) AS enabled
        FROM steps
        JOIN pg_catalog.pg_constraint f ON f.conrelid OPERATOR(pg_catalog.=) target AND f.contype OPERATOR(pg_catalog.=) 'f'::pg_catalog."char"
            AND f.confrelid OPERATOR(pg_catalog.=) steps.parent AND f.conrelid OPERATOR(pg_catalog.<>) f.confrelid
        WHERE ARRAY(SELECT a.attname::pg_catalog.text FROM pg_catalog.unnest(f.conkey) WITH ORDINALITY k (attnum, ordinality)
                    JOIN pg_catalog.pg_attribute a ON a.attrelid OPERATOR(pg_catalog.=) f.conrelid AND a.attnum OPERATOR(pg_catalog.=) k.attnum
                    ORDER BY k.ordinality) OPERATOR(pg_catalog.=) steps.columns
          AND ARRAY(SELECT a.attname::pg_catalog.text FROM pg_catalog.unnest(f.confkey) WITH ORDINALITY k (attnum, ordinality)
                    JOIN pg_catalog.pg_attribute a ON a.attrelid OPERATOR(pg_catalog.=) f.confrelid AND a.attnum OPERATOR(pg_catalog.=) k.attnum
                    ORDER BY k.ordinality) OPERATOR(pg_catalog.=) steps.parent_columns
    )
    SELECT CASE
        WHEN NOT community_deletion.community_deletion_ddl_guard_fence_bound(target, tenant_key, parents)
            THEN CASE WHEN parents IS NOT NULL THEN 'a first step to its parents is a declared reference'
                      WHEN NOT EXISTS (SELECT 1 FROM steps) THEN 'no tenant table is declared'
                      ELSE (SELECT pg_catalog.format('no foreign key of its column %I to %I.%I (%I), the tenant table''s key, is there',
                                                     tenant_key, steps.parent_schema, steps.parent_table, steps.parent_columns[1])
                            FROM steps LIMIT 1) END
        ELSE (SELECT pg_catalog.string_agg(problem.text, '; ' ORDER BY problem.text) FROM (
                  SELECT CASE WHEN pg_catalog.count(keys.conname) OPERATOR(pg_catalog.=) 0
                              THEN pg_catalog.format('no foreign key of its (%s) to %I.%I (%s) is there',
                                                     pg_catalog.array_to_string(steps.columns, ', '), steps.parent_schema, steps.parent_table,
                                                     pg_catalog.array_to_string(steps.parent_columns, ', '))
                              ELSE pg_catalog.format('the triggers of its foreign key %s are disabled',
                                                     pg_catalog.string_agg(pg_catalog.quote_ident(keys.conname::pg_catalog.text), ', ' ORDER BY keys.conname)) END
                  FROM steps
                  LEFT JOIN keys ON keys.parent_schema OPERATOR(pg_catalog.=) steps.parent_schema
                      AND keys.parent_table OPERATOR(pg_catalog.=) steps.parent_table
                      AND keys.columns OPERATOR(pg_catalog.=) steps.columns AND keys.parent_columns OPERATOR(pg_catalog.=) steps.parent_columns
                  GROUP BY steps.parent_schema, steps.parent_table, steps.columns, steps.parent_columns
                  HAVING NOT coalesce(pg_catalog.bool_or(keys.enabled), false)) problem (text))
    END
$body$;

-- The tables of a registered table's partition tree (the registered table
-- itself among them, relid = root), by the registry's (table_schema,
-- table_name), with the registration: its purge action, key column (NULL
-- for a table attached through its parents), key kind, paths and the
-- arguments its fences are expected to carry (args, as the migrations'
-- community_deletion_expected_fence_args() gives them: the bound ones when
-- its fence has them and a foreign key binds it); leaf is false for a
-- partitioned table. full_args are the fence's full arguments, which a
-- table may always carry.
CREATE FUNCTION community_deletion.community_deletion_ddl_guard_registered() RETURNS TABLE (
        table_schema pg_catalog.name, table_name pg_catalog.name, purge_action pg_catalog.text,
        root pg_catalog.oid, relid pg_catalog.oid, tenant_key pg_catalog.name, key_kind pg_catalog.text,
        parents pg_catalog.jsonb, args pg_catalog.text[], leaf pg_catalog.bool, full_args pg_catalog.text[])
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $body$
    SELECT reg.table_schema, reg.table_name, reg.purge_action, reg.oid, part.relid, reg.tenant_key,
           reg.key_kind, reg.parents, reg.args, part.leaf, reg.full_args
    FROM (
        -- Once per registered table, not per partition.
        SELECT r.table_schema, r.table_name, r.purge_action::pg_catalog.text AS purge_action, c.oid, c.relkind, r.tenant_key,
               coalesce(r.key_kind, 'uuid') AS key_kind, r.parents,
               community_deletion.community_deletion_ddl_guard_expected_args(c.oid, r.purge_action, r.tenant_key, r.key_kind, r.parents) AS args,
               community_deletion.community_deletion_ddl_guard_fence_args(r.purge_action, r.tenant_key, r.key_kind, r.parents) AS full_args
        FROM community_deletion.community_scoped_tables r
        JOIN pg_catalog.pg_namespace n ON n.nspname OPERATOR(pg_catalog.=) r.table_schema
        JOIN pg_catalog.pg_class c ON c.relnamespace OPERATOR(pg_catalog.=) n.oid AND c.relname OPERATOR(pg_catalog.=) r.table_name
            AND c.relkind OPERATOR(pg_catalog.=) ANY (ARRAY['r', 'p']::pg_catalog."char"[]) AND NOT c.relispartition
        OFFSET 0) reg
    CROSS JOIN LATERAL (SELECT reg.oid, reg.relkind OPERATOR(pg_catalog.<>) 'p'::pg_catalog."char"
                        UNION SELECT tree.relid::pg_catalog.oid, tree.isleaf
                        FROM pg_catalog.pg_partition_tree(reg.oid::pg_catalog.regclass) tree) part (relid, leaf)
$body$;

-- Whether a row of a registered table (alias) belongs to a tenant that is
-- not active, or with only_deleted to one that was deleted (a tombstone):
-- SQL over alias's columns for the fence arguments args, resolving the
-- tenant by the key column or, for a table attached through its parents,
-- through each path as the fence does. Names come from the registry,
-- quoted as identifiers.
CREATE FUNCTION community_deletion.community_deletion_ddl_guard_foreign_rows(
        args pg_catalog.text[], alias pg_catalog.text, only_deleted pg_catalog.bool) RETURNS pg_catalog.text
    LANGUAGE plpgsql IMMUTABLE
    SET search_path = pg_catalog, pg_temp
    AS $body$
DECLARE
    kind pg_catalog.text;
    spec pg_catalog.jsonb;
    path pg_catalog.jsonb;
    hop pg_catalog.jsonb;
    depth pg_catalog.int4;
    hops pg_catalog.int4;
    tables pg_catalog.text[];
    conditions pg_catalog.text[];
    filters pg_catalog.text[] := '{}';
    tenants pg_catalog.text := pg_catalog.format(
        '(SELECT c.id FROM community_deletion.communities c WHERE c.deletion_state %s)',
        CASE WHEN only_deleted THEN 'OPERATOR(pg_catalog.=) ''tombstone''::pg_catalog.text'
             ELSE 'OPERATOR(pg_catalog.<>) ''active''::pg_catalog.text' END);
    id_of pg_catalog.text;
BEGIN
    IF pg_catalog.cardinality(args) OPERATOR(pg_catalog.<) 2 OR args[1] OPERATOR(pg_catalog.<>) 'through'::pg_catalog.text THEN
        kind := CASE WHEN pg_catalog.cardinality(args) OPERATOR(pg_catalog.<) 2 THEN 'uuid' ELSE args[2] END;
        id_of := pg_catalog.format('%I.%I', alias, coalesce(args[1], 'community_id'));
        IF kind OPERATOR(pg_catalog.<>) 'uuid'::pg_catalog.text THEN
            id_of := pg_catalog.format('pg_catalog.md5(''community_deletion tenant '' OPERATOR(pg_catalog.||) %s::pg_catalog.text)::pg_catalog.uuid', id_of);
        END IF;
        RETURN pg_catalog.format('(%s OPERATOR(pg_catalog.=) ANY %s)', id_of, tenants);
    END IF;
    spec := args[2]::pg_catalog.jsonb;
    kind := spec OPERATOR(pg_catalog.->>) 'kind';
    FOR path IN SELECT p.value FROM pg_catalog.jsonb_array_elements(spec OPERATOR(pg_catalog.->) 'paths') p LOOP
        tables := '{}';
        conditions := '{}';
        hops := pg_catalog.jsonb_array_length(path OPERATOR(pg_catalog.->) 'hops');
        FOR depth IN 1 .. hops LOOP
            hop := (path OPERATOR(pg_catalog.->) 'hops') OPERATOR(pg_catalog.->) (depth OPERATOR(pg_catalog.-) 1);
            tables := tables OPERATOR(pg_catalog.||) pg_catalog.format('%I.%I p%s', hop OPERATOR(pg_catalog.->>) 'schema',
                                                                       hop OPERATOR(pg_catalog.->>) 'table', depth);
            conditions := conditions OPERATOR(pg_catalog.||) ARRAY(
                SELECT pg_catalog.format('p%s.%I OPERATOR(pg_catalog.=) %I.%I', depth, pc.value,
                                         CASE WHEN depth OPERATOR(pg_catalog.=) 1 THEN alias
                                              ELSE 'p' OPERATOR(pg_catalog.||) (depth OPERATOR(pg_catalog.-) 1)::pg_catalog.text END,
                                         cc.value)
                FROM pg_catalog.jsonb_array_elements_text(hop OPERATOR(pg_catalog.->) 'columns') WITH ORDINALITY cc
                JOIN pg_catalog.jsonb_array_elements_text(hop OPERATOR(pg_catalog.->) 'parent_columns') WITH ORDINALITY pc
                    ON pc.ordinality OPERATOR(pg_catalog.=) cc.ordinality
                ORDER BY cc.ordinality);
        END LOOP;
        id_of := pg_catalog.format('p%s.%I', hops, path OPERATOR(pg_catalog.->>) 'key');
        IF kind OPERATOR(pg_catalog.<>) 'uuid'::pg_catalog.text THEN
            id_of := pg_catalog.format('pg_catalog.md5(''community_deletion tenant '' OPERATOR(pg_catalog.||) %s::pg_catalog.text)::pg_catalog.uuid', id_of);
        END IF;
        filters := filters OPERATOR(pg_catalog.||) pg_catalog.format(
            'EXISTS (SELECT 1 FROM %s WHERE %s AND %s OPERATOR(pg_catalog.=) ANY %s)',
            pg_catalog.array_to_string(tables, ', '), pg_catalog.array_to_string(conditions, ' AND '), id_of, tenants);
    END LOOP;
    IF pg_catalog.cardinality(filters) OPERATOR(pg_catalog.=) 0 THEN
        RETURN 'false';
    END IF;
    RETURN '(' OPERATOR(pg_catalog.||) pg_catalog.array_to_string(filters, ' OR ') OPERATOR(pg_catalog.||) ')';
END
$body$;
REVOKE ALL ON FUNCTION community_deletion.community_deletion_ddl_guard_key_kind(pg_catalog.oid),
    community_deletion.community_deletion_ddl_guard_fence_args(pg_catalog.text, pg_catalog.name, pg_catalog.text, pg_catalog.jsonb),
    community_deletion.community_deletion_ddl_guard_trigger_args(pg_catalog.text[]),
    community_deletion.community_deletion_ddl_guard_statement_fenced(pg_catalog.oid, pg_catalog.text, pg_catalog.text[]),
    community_deletion.community_deletion_ddl_guard_row_fenced(pg_catalog.oid, pg_catalog.text, pg_catalog.text[], pg_catalog.bool),
    community_deletion.community_deletion_ddl_guard_references(pg_catalog.oid),
    community_deletion.community_deletion_ddl_guard_child_paths(pg_catalog.oid, pg_catalog.oid[], pg_catalog.oid[]),
    community_deletion.community_deletion_ddl_guard_first_steps(pg_catalog.jsonb, pg_catalog.bool),
    community_deletion.community_deletion_ddl_guard_fence_bound(pg_catalog.oid, pg_catalog.name, pg_catalog.jsonb),
    community_deletion.community_deletion_ddl_guard_bound_args(pg_catalog.text[]),
    community_deletion.community_deletion_ddl_guard_expected_args(pg_catalog.oid, pg_catalog.text, pg_catalog.name, pg_catalog.text, pg_catalog.jsonb),
    community_deletion.community_deletion_ddl_guard_unbound_detail(pg_catalog.oid, pg_catalog.name, pg_catalog.jsonb),
    community_deletion.community_deletion_ddl_guard_registered(),
    community_deletion.community_deletion_ddl_guard_foreign_rows(pg_catalog.text[], pg_catalog.text, pg_catalog.bool)
    FROM PUBLIC;

-- The columns the registrations need, by (schema, table) of the table
-- that has them: every tenant key column, and each column of a path of a
-- table attached through its parents, on the table that holds it (the
-- child's referencing columns, each parent's referenced ones) with the
-- registered table whose registration needs it.
CREATE FUNCTION community_deletion.community_deletion_ddl_guard_needed_columns() RETURNS TABLE (
        table_schema pg_catalog.name, table_name pg_catalog.name, column_name pg_catalog.name, registered pg_catalog.text)
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $body$
    SELECT r.table_schema, r.table_name, r.tenant_key,
           pg_catalog.quote_ident(r.table_schema::pg_catalog.text) OPERATOR(pg_catalog.||) '.'
               OPERATOR(pg_catalog.||) pg_catalog.quote_ident(r.table_name::pg_catalog.text)
    FROM community_deletion.community_scoped_tables r
    WHERE r.tenant_key IS NOT NULL
    UNION
    SELECT CASE WHEN h.depth OPERATOR(pg_catalog.=) 1 THEN r.table_schema
                ELSE ((p.value OPERATOR(pg_catalog.->) 'hops') OPERATOR(pg_catalog.->) (h.depth::pg_catalog.int4 OPERATOR(pg_catalog.-) 2)
                      OPERATOR(pg_catalog.->>) 'schema')::pg_catalog.name END,
           CASE WHEN h.depth OPERATOR(pg_catalog.=) 1 THEN r.table_name
                ELSE ((p.value OPERATOR(pg_catalog.->) 'hops') OPERATOR(pg_catalog.->) (h.depth::pg_catalog.int4 OPERATOR(pg_catalog.-) 2)
                      OPERATOR(pg_catalog.->>) 'table')::pg_catalog.name END,
           c.value::pg_catalog.name,
           pg_catalog.quote_ident(r.table_schema::pg_catalog.text) OPERATOR(pg_catalog.||) '.'
               OPERATOR(pg_catalog.||) pg_catalog.quote_ident(r.table_name::pg_catalog.text)
    FROM community_deletion.community_scoped_tables r
    CROSS JOIN LATERAL pg_catalog.jsonb_array_elements(r.parents) p
    CROSS JOIN LATERAL pg_catalog.jsonb_array_elements(p.value OPERATOR(pg_catalog.->) 'hops') WITH ORDINALITY h (hop, depth)
    CROSS JOIN LATERAL pg_catalog.jsonb_array_elements_text(h.hop OPERATOR(pg_catalog.->) 'columns') c
    WHERE r.parents IS NOT NULL
    UNION
    SELECT (h.hop OPERATOR(pg_catalog.->>) 'schema')::pg_catalog.name, (h.hop OPERATOR(pg_catalog.->>) 'table')::pg_catalog.name,
           c.value::pg_catalog.name,
           pg_catalog.quote_ident(r.table_schema::pg_catalog.text) OPERATOR(pg_catalog.||) '.'
               OPERATOR(pg_catalog.||) pg_catalog.quote_ident(r.table_name::pg_catalog.text)
    FROM community_deletion.community_scoped_tables r
    CROSS JOIN LATERAL pg_catalog.jsonb_array_elements(r.parents) p
    CROSS JOIN LATERAL pg_catalog.jsonb_array_elements(p.value OPERATOR(pg_catalog.->) 'hops') h (hop)
    CROSS JOIN LATERAL pg_catalog.jsonb_array_elements_text(h.hop OPERATOR(pg_catalog.->) 'parent_columns') c
    WHERE r.parents IS NOT NULL
$body$;
REVOKE ALL ON FUNCTION community_deletion.community_deletion_ddl_guard_needed_columns() FROM PUBLIC;

-- The hops of the paths of tables attached through their parents whose
-- columns are gone, or of another type than the columns they join and not
-- of the same kind (declare_reference()'s rule), one row per registered
-- table: what its fence, purge and proofs could no longer join.
CREATE FUNCTION community_deletion.community_deletion_ddl_guard_broken_paths() RETURNS TABLE (
        registered pg_catalog.text, detail pg_catalog.text)
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $body$
    WITH hop_columns AS (
        SELECT pg_catalog.quote_ident(r.table_schema::pg_catalog.text) OPERATOR(pg_catalog.||) '.'
                   OPERATOR(pg_catalog.||) pg_catalog.quote_ident(r.table_name::pg_catalog.text) AS registered,
               CASE WHEN h.depth OPERATOR(pg_catalog.=) 1 THEN r.table_schema::pg_catalog.text
                    ELSE (p.value OPERATOR(pg_catalog.->) 'hops') OPERATOR(pg_catalog.->) (h.depth::pg_catalog.int4 OPERATOR(pg_catalog.-) 2)
                         OPERATOR(pg_catalog.->>) 'schema' END AS child_schema,
               CASE WHEN h.depth OPERATOR(pg_catalog.=) 1 THEN r.table_name::pg_catalog.text
                    ELSE (p.value OPERATOR(pg_catalog.->) 'hops') OPERATOR(pg_catalog.->) (h.depth::pg_catalog.int4 OPERATOR(pg_catalog.-) 2)
                         OPERATOR(pg_catalog.->>) 'table' END AS child_table,
               h.hop OPERATOR(pg_catalog.->>) 'schema' AS parent_schema, h.hop OPERATOR(pg_catalog.->>) 'table' AS parent_table,
               cc.value AS child_column, pc.value AS parent_column
        FROM community_deletion.community_scoped_tables r
        CROSS JOIN LATERAL pg_catalog.jsonb_array_elements(r.parents) p
        CROSS JOIN LATERAL pg_catalog.jsonb_array_elements(p.value OPERATOR(pg_catalog.->) 'hops') WITH ORDINALITY h (hop, depth)
        CROSS JOIN LATERAL pg_catalog.jsonb_array_elements_text(h.hop OPERATOR(pg_catalog.->) 'columns') WITH ORDINALITY cc
        JOIN LATERAL pg_catalog.jsonb_array_elements_text(h.hop OPERATOR(pg_catalog.->) 'parent_columns') WITH ORDINALITY pc
            ON pc.ordinality OPERATOR(pg_catalog.=) cc.ordinality
        WHERE r.parents IS NOT NULL
    ), typed AS (
        SELECT hop_columns.*,
               (SELECT a.atttypid FROM pg_catalog.pg_attribute a
                JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) a.attrelid
                JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
                WHERE n.nspname OPERATOR(pg_catalog.=) hop_columns.child_schema AND c.relname OPERATOR(pg_catalog.=) hop_columns.child_table
                  AND a.attname OPERATOR(pg_catalog.=) hop_columns.child_column AND a.attnum OPERATOR(pg_catalog.>) 0
                  AND NOT a.attisdropped) AS child_type,
               (SELECT a.atttypid FROM pg_catalog.pg_attribute a
                JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) a.attrelid
                JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
                WHERE n.nspname OPERATOR(pg_catalog.=) hop_columns.parent_schema AND c.relname OPERATOR(pg_catalog.=) hop_columns.parent_table
                  AND a.attname OPERATOR(pg_catalog.=) hop_columns.parent_column AND a.attnum OPERATOR(pg_catalog.>) 0
                  AND NOT a.attisdropped) AS parent_type
        FROM hop_columns
    )
    SELECT typed.registered,
           pg_catalog.string_agg(DISTINCT CASE
               WHEN typed.child_type IS NULL
                   THEN pg_catalog.format('%I.%I.%I is gone', typed.child_schema, typed.child_table, typed.child_column)
               WHEN typed.parent_type IS NULL
                   THEN pg_catalog.format('%I.%I.%I is gone', typed.parent_schema, typed.parent_table, typed.parent_column)
               ELSE pg_catalog.format('%I.%I.%I is %s, which does not join %I.%I.%I (%s)',
                                      typed.child_schema, typed.child_table, typed.child_column,
                                      pg_catalog.format_type(typed.child_type, NULL),
                                      typed.parent_schema, typed.parent_table, typed.parent_column,
                                      pg_catalog.format_type(typed.parent_type, NULL)) END, '; ')
    FROM typed
    WHERE typed.child_type IS NULL OR typed.parent_type IS NULL
       OR (typed.child_type OPERATOR(pg_catalog.<>) typed.parent_type
           AND community_deletion.community_deletion_ddl_guard_key_kind(typed.child_type)
               IS DISTINCT FROM community_deletion.community_deletion_ddl_guard_key_kind(typed.parent_type))
    GROUP BY typed.registered
$body$;
REVOKE ALL ON FUNCTION community_deletion.community_deletion_ddl_guard_broken_paths() FROM PUBLIC;

-- Whether trigger (one a command just created) is a fence trigger exactly as
-- attach creates it: under the name of its event, enabled, no WHEN clause,
-- no column list, of the purge action of its table's registration and with
-- the registered arguments when its table is (a partition of) a registered
-- table (the full ones, or the bound ones while a foreign key binds the
-- table), any arguments while it is not (attach fences before it
-- registers, and registration checks the arguments). Such a trigger can
-- only add or restore protection.
CREATE FUNCTION community_deletion.community_deletion_ddl_guard_builds_fence(trigger_oid pg_catalog.oid) RETURNS pg_catalog.bool
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $body$
    SELECT EXISTS (
        SELECT 1
        FROM pg_catalog.pg_trigger t
        JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) t.tgrelid
        LEFT JOIN LATERAL (SELECT reg.purge_action, reg.full_args, reg.root, reg.tenant_key, reg.parents
                           FROM community_deletion.community_deletion_ddl_guard_registered() reg
                           WHERE reg.relid OPERATOR(pg_catalog.=) t.tgrelid LIMIT 1) reg ON true
        CROSS JOIN LATERAL (SELECT (reg.full_args IS NULL
                                    OR (t.tgnargs::pg_catalog.int4 OPERATOR(pg_catalog.=) pg_catalog.cardinality(reg.full_args)
                                        AND t.tgargs OPERATOR(pg_catalog.=) community_deletion.community_deletion_ddl_guard_trigger_args(reg.full_args))
                                    OR (t.tgnargs OPERATOR(pg_catalog.=) 3
                                        AND t.tgargs OPERATOR(pg_catalog.=) community_deletion.community_deletion_ddl_guard_trigger_args(
                                                community_deletion.community_deletion_ddl_guard_bound_args(reg.full_args))
                                        AND community_deletion.community_deletion_ddl_guard_unbound_detail(reg.root, reg.tenant_key, reg.parents) IS NULL)) AS registered_args,
                                   coalesce(reg.purge_action, 'delete') OPERATOR(pg_catalog.=) 'delete'::pg_catalog.text AS may_delete,
                                   coalesce(reg.purge_action, 'nullify') OPERATOR(pg_catalog.=) 'nullify'::pg_catalog.text AS may_nullify) k
        WHERE t.oid OPERATOR(pg_catalog.=) trigger_oid
          AND NOT t.tgisinternal AND t.tgenabled OPERATOR(pg_catalog.=) 'O'::pg_catalog."char"
          AND t.tgqual IS NULL
          AND pg_catalog.cardinality(t.tgattr::pg_catalog.int2[]) OPERATOR(pg_catalog.=) 0
          AND ((k.may_delete AND k.registered_args
                AND t.tgfoid OPERATOR(pg_catalog.=) pg_catalog.to_regprocedure('community_deletion.enforce_community_write_fence()')::pg_catalog.oid
                AND ((t.tgname OPERATOR(pg_catalog.=) 'community_write_fence_insert'::pg_catalog.name AND t.tgtype OPERATOR(pg_catalog.=) 4
                      AND t.tgoldtable IS NULL AND t.tgnewtable OPERATOR(pg_catalog.=) 'community_fence_new'::pg_catalog.name)
                  OR (t.tgname OPERATOR(pg_catalog.=) 'community_write_fence_update'::pg_catalog.name AND t.tgtype OPERATOR(pg_catalog.=) 16
                      AND t.tgoldtable OPERATOR(pg_catalog.=) 'community_fence_old'::pg_catalog.name
                      AND t.tgnewtable OPERATOR(pg_catalog.=) 'community_fence_new'::pg_catalog.name)
                  OR (t.tgname OPERATOR(pg_catalog.=) 'community_write_fence_delete'::pg_catalog.name AND t.tgtype OPERATOR(pg_catalog.=) 8
                      AND t.tgoldtable OPERATOR(pg_catalog.=) 'community_fence_old'::pg_catalog.name AND t.tgnewtable IS NULL)))
            OR (k.may_delete
                AND t.tgfoid OPERATOR(pg_catalog.=) pg_catalog.to_regprocedure('community_deletion.enforce_community_truncate_fence()')::pg_catalog.oid
                AND t.tgname OPERATOR(pg_catalog.=) 'community_write_fence_truncate'::pg_catalog.name
                AND t.tgtype OPERATOR(pg_catalog.=) 34 AND t.tgnargs OPERATOR(pg_catalog.=) 0
                AND t.tgoldtable IS NULL AND t.tgnewtable IS NULL)
            OR (k.may_nullify AND k.registered_args
                AND t.tgfoid OPERATOR(pg_catalog.=) pg_catalog.to_regprocedure('community_deletion.enforce_community_kept_row_fence()')::pg_catalog.oid
                AND ((t.tgname OPERATOR(pg_catalog.=) 'community_kept_row_fence_insert'::pg_catalog.name AND t.tgtype OPERATOR(pg_catalog.=) 4
                      AND t.tgoldtable IS NULL AND t.tgnewtable OPERATOR(pg_catalog.=) 'community_fence_new'::pg_catalog.name)
                  OR (t.tgname OPERATOR(pg_catalog.=) 'community_kept_row_fence_update'::pg_catalog.name AND t.tgtype OPERATOR(pg_catalog.=) 16
                      AND t.tgoldtable OPERATOR(pg_catalog.=) 'community_fence_old'::pg_catalog.name
                      AND t.tgnewtable OPERATOR(pg_catalog.=) 'community_fence_new'::pg_catalog.name)))
            OR (k.registered_args
                AND t.tgname OPERATOR(pg_catalog.=) 'community_write_fence_row'::pg_catalog.name
                AND c.relkind OPERATOR(pg_catalog.=) 'p'::pg_catalog."char" AND NOT c.relispartition
                AND t.tgoldtable IS NULL AND t.tgnewtable IS NULL
                AND ((k.may_delete AND t.tgtype OPERATOR(pg_catalog.=) 29
                      AND t.tgfoid OPERATOR(pg_catalog.=) pg_catalog.to_regprocedure('community_deletion.enforce_community_write_fence_row()')::pg_catalog.oid)
                  OR (k.may_nullify AND t.tgtype OPERATOR(pg_catalog.=) 21
                      AND t.tgfoid OPERATOR(pg_catalog.=) pg_catalog.to_regprocedure('community_deletion.enforce_community_kept_row_fence_row()')::pg_catalog.oid)))))
$body$;
REVOKE ALL ON FUNCTION community_deletion.community_deletion_ddl_guard_builds_fence(pg_catalog.oid) FROM PUBLIC;

-- The registered tables whose fences carry bound arguments (three, the
-- last 'bound', on the table or a partition) although no foreign key binds
-- them (community_deletion_ddl_guard_unbound_detail() says why; child: a
-- table attached through its parents): such a fence skips its tenant
-- check while no deletion is in flight, so a deleted tenant's rows could
-- come back.
CREATE FUNCTION community_deletion.community_deletion_ddl_guard_unbound() RETURNS TABLE (
        table_schema pg_catalog.name, table_name pg_catalog.name, registered pg_catalog.text, detail pg_catalog.text,
        child pg_catalog.bool)
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $body$
    SELECT bound.table_schema, bound.table_name,
           pg_catalog.quote_ident(bound.table_schema::pg_catalog.text) OPERATOR(pg_catalog.||) '.'::pg_catalog.text
               OPERATOR(pg_catalog.||) pg_catalog.quote_ident(bound.table_name::pg_catalog.text),
           community_deletion.community_deletion_ddl_guard_unbound_detail(bound.oid, bound.tenant_key, bound.parents),
           bound.parents IS NOT NULL
    FROM (
        SELECT r.table_schema, r.table_name, r.tenant_key, r.parents, c.oid
        FROM community_deletion.community_scoped_tables r
        JOIN pg_catalog.pg_namespace n ON n.nspname OPERATOR(pg_catalog.=) r.table_schema
        JOIN pg_catalog.pg_class c ON c.relnamespace OPERATOR(pg_catalog.=) n.oid AND c.relname OPERATOR(pg_catalog.=) r.table_name
            AND c.relkind OPERATOR(pg_catalog.=) ANY (ARRAY['r', 'p']::pg_catalog."char"[]) AND NOT c.relispartition
        WHERE EXISTS (SELECT 1 FROM pg_catalog.pg_trigger t
                      WHERE t.tgrelid OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT tree.relid::pg_catalog.oid
                                                                          FROM pg_catalog.pg_partition_tree(c.oid::pg_catalog.regclass) tree)
                                                                  OPERATOR(pg_catalog.||) c.oid)
                        AND NOT t.tgisinternal AND t.tgnargs OPERATOR(pg_catalog.=) 3
                        AND t.tgfoid OPERATOR(pg_catalog.=) ANY (ARRAY[
                                pg_catalog.to_regprocedure('community_deletion.enforce_community_write_fence()'),
                                pg_catalog.to_regprocedure('community_deletion.enforce_community_kept_row_fence()'),
                                pg_catalog.to_regprocedure('community_deletion.enforce_community_write_fence_row()'),
                                pg_catalog.to_regprocedure('community_deletion.enforce_community_kept_row_fence_row()')]::pg_catalog.oid[]))
        OFFSET 0) bound
    WHERE community_deletion.community_deletion_ddl_guard_unbound_detail(bound.oid, bound.tenant_key, bound.parents) IS NOT NULL
$body$;
REVOKE ALL ON FUNCTION community_deletion.community_deletion_ddl_guard_unbound() FROM PUBLIC;

-- The purge action and full fence arguments of registered table target
-- (not a partition of one), or no row: what
-- community_deletion_ddl_guard_full_fences() needs of the registry, which
-- its caller may not read. The arguments are in pg_trigger, which every
-- role reads, anyway.
CREATE FUNCTION community_deletion.community_deletion_ddl_guard_full_fence_args(target pg_catalog.oid)
    RETURNS TABLE (purge_action pg_catalog.text, args pg_catalog.text[])
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS $body$
    SELECT reg.purge_action, reg.full_args
    FROM community_deletion.community_deletion_ddl_guard_registered() reg
    WHERE reg.relid OPERATOR(pg_catalog.=) target AND reg.root OPERATOR(pg_catalog.=) target
$body$;
REVOKE ALL ON FUNCTION community_deletion.community_deletion_ddl_guard_full_fence_args(pg_catalog.oid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION community_deletion.community_deletion_ddl_guard_full_fence_args(pg_catalog.oid) TO PUBLIC;

-- Gives registered table target (and each of its partitions that has
-- them) its fences with their full arguments, as attach gives them to a
-- table no foreign key binds: the fence then checks every write's tenants,
-- and the foreign key that bound it may be dropped, which the guard
-- refuses while the fence is bound. Runs as its caller, who must own the
-- table (PostgreSQL refuses the triggers otherwise); attach binds the
-- fence again while the foreign key is there.
CREATE FUNCTION community_deletion.community_deletion_ddl_guard_full_fences(target pg_catalog.regclass) RETURNS void
    LANGUAGE plpgsql
    SET search_path = pg_catalog, pg_temp
    AS $body$
DECLARE
    registration record;
    member pg_catalog.regclass;
    arg_list pg_catalog.text;
    names pg_catalog.name[];
BEGIN
    SELECT f.purge_action, f.args INTO registration
    FROM community_deletion.community_deletion_ddl_guard_full_fence_args(target::pg_catalog.oid) f;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = pg_catalog.format('full fences of %s refused: it is not a registered table (a partition''s fences are its partitioned table''s); attach it with community_deletion.attach_community_write_fence() or attach_child_table()',
                                        target);
    END IF;
    arg_list := coalesce((SELECT pg_catalog.string_agg(pg_catalog.quote_literal(a.value), ', ' ORDER BY a.ordinality)
                          FROM pg_catalog.unnest(registration.args) WITH ORDINALITY a (value, ordinality)), '');
    names := CASE WHEN registration.purge_action OPERATOR(pg_catalog.=) 'delete'::pg_catalog.text
                  THEN ARRAY['community_write_fence_insert', 'community_write_fence_update', 'community_write_fence_delete']::pg_catalog.name[]
                  ELSE ARRAY['community_kept_row_fence_insert', 'community_kept_row_fence_update']::pg_catalog.name[] END;
    -- Every table of the tree that has its statement fences (a partition
    -- made in a migration run is fenced by its clone of the row fence alone).
    FOR member IN
        SELECT m.relid::pg_catalog.regclass
        FROM (SELECT target::pg_catalog.oid AS relid
              UNION SELECT tree.relid::pg_catalog.oid FROM pg_catalog.pg_partition_tree(target) tree) m
        WHERE EXISTS (SELECT 1 FROM pg_catalog.pg_trigger t
                      WHERE t.tgrelid OPERATOR(pg_catalog.=) m.relid AND NOT t.tgisinternal
                        AND t.tgname OPERATOR(pg_catalog.=) ANY (names))
        ORDER BY m.relid
    LOOP
        IF registration.purge_action OPERATOR(pg_catalog.=) 'delete'::pg_catalog.text THEN
            EXECUTE pg_catalog.format('CREATE OR REPLACE TRIGGER community_write_fence_insert AFTER INSERT ON %s '
                                      'REFERENCING NEW TABLE AS community_fence_new '
                                      'FOR EACH STATEMENT EXECUTE FUNCTION community_deletion.enforce_community_write_fence(%s)', member, arg_list);
            EXECUTE pg_catalog.format('CREATE OR REPLACE TRIGGER community_write_fence_update AFTER UPDATE ON %s '
                                      'REFERENCING OLD TABLE AS community_fence_old NEW TABLE AS community_fence_new '
                                      'FOR EACH STATEMENT EXECUTE FUNCTION community_deletion.enforce_community_write_fence(%s)', member, arg_list);
            EXECUTE pg_catalog.format('CREATE OR REPLACE TRIGGER community_write_fence_delete AFTER DELETE ON %s '
                                      'REFERENCING OLD TABLE AS community_fence_old '
                                      'FOR EACH STATEMENT EXECUTE FUNCTION community_deletion.enforce_community_write_fence(%s)', member, arg_list);
        ELSE
            EXECUTE pg_catalog.format('CREATE OR REPLACE TRIGGER community_kept_row_fence_insert AFTER INSERT ON %s '
                                      'REFERENCING NEW TABLE AS community_fence_new '
                                      'FOR EACH STATEMENT EXECUTE FUNCTION community_deletion.enforce_community_kept_row_fence(%s)', member, arg_list);
            EXECUTE pg_catalog.format('CREATE OR REPLACE TRIGGER community_kept_row_fence_update AFTER UPDATE ON %s '
                                      'REFERENCING OLD TABLE AS community_fence_old NEW TABLE AS community_fence_new '
                                      'FOR EACH STATEMENT EXECUTE FUNCTION community_deletion.enforce_community_kept_row_fence(%s)', member, arg_list);
        END IF;
    END LOOP;
    -- The row fence of a partitioned table, which PostgreSQL clones onto
    -- its partitions (enabled again on each): disabled again on each leaf
    -- that has its statement fences, as attach leaves it.
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_trigger t
               WHERE t.tgrelid OPERATOR(pg_catalog.=) target::pg_catalog.oid AND NOT t.tgisinternal
                 AND t.tgname OPERATOR(pg_catalog.=) 'community_write_fence_row'::pg_catalog.name) THEN
        EXECUTE pg_catalog.format('CREATE OR REPLACE TRIGGER community_write_fence_row AFTER %s ON %s FOR EACH ROW EXECUTE FUNCTION %s(%s)',
                                  CASE WHEN registration.purge_action OPERATOR(pg_catalog.=) 'delete'::pg_catalog.text
                                       THEN 'INSERT OR UPDATE OR DELETE' ELSE 'INSERT OR UPDATE' END,
                                  target,
                                  CASE WHEN registration.purge_action OPERATOR(pg_catalog.=) 'delete'::pg_catalog.text
                                       THEN 'community_deletion.enforce_community_write_fence_row'
                                       ELSE 'community_deletion.enforce_community_kept_row_fence_row' END,
                                  arg_list);
        FOR member IN
            SELECT tree.relid FROM pg_catalog.pg_partition_tree(target) tree
            WHERE tree.isleaf AND tree.relid::pg_catalog.oid OPERATOR(pg_catalog.<>) target::pg_catalog.oid
              AND EXISTS (SELECT 1 FROM pg_catalog.pg_trigger t
                          WHERE t.tgrelid OPERATOR(pg_catalog.=) tree.relid::pg_catalog.oid AND NOT t.tgisinternal
                            AND t.tgname OPERATOR(pg_catalog.=) ANY (names))
            ORDER BY tree.relid::pg_catalog.oid
        LOOP
            EXECUTE pg_catalog.format('ALTER TABLE %s DISABLE TRIGGER community_write_fence_row', member);
        END LOOP;
    END IF;
END
$body$;
REVOKE ALL ON FUNCTION community_deletion.community_deletion_ddl_guard_full_fences(pg_catalog.regclass) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION community_deletion.community_deletion_ddl_guard_full_fences(pg_catalog.regclass) TO PUBLIC;

-- Table rewrites of registered tables (and their partitions) in this
-- transaction, recorded by the table_rewrite trigger and judged at the
-- command's end. The rewrite trigger reads no row: by then the catalog has
-- the columns' new types while the table still holds the old ones, and
-- reading it would misread them (PostgreSQL 15 crashes).
CREATE TABLE community_deletion.community_deletion_ddl_guard_rewrites (
    xid pg_catalog.int8 NOT NULL,
    relid pg_catalog.oid NOT NULL,
    PRIMARY KEY (xid, relid)
);
REVOKE ALL ON community_deletion.community_deletion_ddl_guard_rewrites FROM PUBLIC;

CREATE FUNCTION community_deletion.community_deletion_ddl_guard_rewrite() RETURNS event_trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    SET jit = off
    AS $body$
DECLARE
    relation pg_catalog.oid := pg_catalog.pg_event_trigger_table_rewrite_oid();
BEGIN
    IF pg_catalog.to_regclass('community_deletion.community_scoped_tables'::pg_catalog.text) IS NOT NULL
       AND EXISTS (SELECT 1 FROM community_deletion.community_deletion_ddl_guard_registered() reg
                   WHERE reg.relid OPERATOR(pg_catalog.=) relation) THEN
        INSERT INTO community_deletion.community_deletion_ddl_guard_rewrites (xid, relid)
        VALUES (pg_catalog.txid_current(), relation)
        ON CONFLICT DO NOTHING;
    END IF;
END
$body$;
REVOKE ALL ON FUNCTION community_deletion.community_deletion_ddl_guard_rewrite() FROM PUBLIC;
CREATE EVENT TRIGGER community_deletion_ddl_guard_rewrite ON table_rewrite
    EXECUTE FUNCTION community_deletion.community_deletion_ddl_guard_rewrite();

-- What the rewrites of this transaction's command did to the tenants of
-- registered tables' rows, or NULL: a rewrite that changes a column that
-- decides a row's tenant (a tenant key column, a column of a path of a
-- table attached through its parents, on either side) is refused while a
-- deletion is under way (a tenant quiescing or fenced), since it could move
-- rows into or out of it; at any time when it leaves a row of a tenant that
-- was deleted. Which columns changed, pg_attribute says: the rows this
-- transaction wrote. Holds in migration runs too. Consumes the records.
CREATE FUNCTION community_deletion.community_deletion_ddl_guard_rewritten(command pg_catalog.text) RETURNS pg_catalog.text
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    SET jit = off
    AS $body$
DECLARE
    member record;
    changed pg_catalog.text;
    deleted_rows pg_catalog.bool;
    problem pg_catalog.text;
BEGIN
    FOR member IN
        SELECT w.relid::pg_catalog.regclass AS relid, reg.table_schema, reg.table_name, reg.args
        FROM community_deletion.community_deletion_ddl_guard_rewrites w
        CROSS JOIN LATERAL (SELECT r.table_schema, r.table_name, r.args
                            FROM community_deletion.community_deletion_ddl_guard_registered() r
                            WHERE r.relid OPERATOR(pg_catalog.=) w.relid LIMIT 1) reg
        WHERE w.xid OPERATOR(pg_catalog.=) pg_catalog.txid_current()
        ORDER BY w.relid
    LOOP
        SELECT pg_catalog.string_agg(DISTINCT pg_catalog.quote_ident(a.attname::pg_catalog.text), ', ') INTO changed
        FROM pg_catalog.pg_attribute a
        JOIN community_deletion.community_deletion_ddl_guard_needed_columns() n
            ON n.table_schema OPERATOR(pg_catalog.=) member.table_schema AND n.table_name OPERATOR(pg_catalog.=) member.table_name
           AND n.column_name OPERATOR(pg_catalog.=) a.attname
        WHERE a.attrelid OPERATOR(pg_catalog.=) member.relid::pg_catalog.oid AND NOT a.attisdropped
          AND pg_catalog.age(a.xmin) OPERATOR(pg_catalog.<=) 0;
        IF changed IS NULL THEN
            CONTINUE;
        END IF;
        IF EXISTS (SELECT 1 FROM community_deletion.communities c
                   WHERE c.deletion_state OPERATOR(pg_catalog.=) ANY (ARRAY['quiescing', 'fenced']::pg_catalog.text[])) THEN
            problem := pg_catalog.format('DDL refused: %s rewrites %s and changes %s, which decide its rows'' tenants, while a deletion is under way; change them once no deletion is under way, without moving rows between tenants',
                                         command, member.relid, changed);
            EXIT;
        END IF;
        EXECUTE pg_catalog.format('SELECT EXISTS (SELECT 1 FROM %s m WHERE %s)', member.relid,
                                  community_deletion.community_deletion_ddl_guard_foreign_rows(member.args, 'm', true))
            INTO deleted_rows;
        IF deleted_rows THEN
            problem := pg_catalog.format('DDL refused: %s rewrites %s and changes %s so that rows belong to a tenant that was deleted; a deleted tenant''s key is never reused',
                                         command, member.relid, changed);
            EXIT;
        END IF;
    END LOOP;
    DELETE FROM community_deletion.community_deletion_ddl_guard_rewrites w WHERE w.xid OPERATOR(pg_catalog.=) pg_catalog.txid_current();
    RETURN problem;
END
$body$;
REVOKE ALL ON FUNCTION community_deletion.community_deletion_ddl_guard_rewritten(pg_catalog.text) FROM PUBLIC;

-- At the end of a command that drops something (sql_drop): refused
-- outside a migration run, a column a registration needs, of a table that
-- is still there (dropped and added again in one ALTER TABLE, a key column
-- would give every row another tenant or none, and no rewrite shows it),
-- the row fence of a registered partitioned table, which
-- detach_community_write_fence() alone removes (after unregistering), and
-- the foreign key that binds a bound fence (one that is re-created in the
-- same command, as ALTER COLUMN ... TYPE does, or beside another that
-- binds, passes).
CREATE FUNCTION community_deletion.community_deletion_ddl_guard_dropped() RETURNS event_trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    SET jit = off
    AS $body$
DECLARE
    problem record;
BEGIN
    IF community_deletion.community_deletion_ddl_guard_in_run()
       OR pg_catalog.to_regclass('community_deletion.community_scoped_tables'::pg_catalog.text) IS NULL THEN
        RETURN;
    END IF;
    SELECT found.message INTO problem
    FROM (
        SELECT pg_catalog.format('drops column %I of %s, which the registration of %s needs; detach %s first (community_deletion.detach_community_write_fence), or change the column without dropping it',
                                 d.address_names[3], d.objid::pg_catalog.regclass, n.registered, n.registered) AS message,
               0 AS rank
        FROM pg_catalog.pg_event_trigger_dropped_objects() d
        JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) d.objid
        JOIN pg_catalog.pg_class root ON root.oid OPERATOR(pg_catalog.=) coalesce(pg_catalog.pg_partition_root(c.oid::pg_catalog.regclass)::pg_catalog.oid, c.oid)
        JOIN pg_catalog.pg_namespace rn ON rn.oid OPERATOR(pg_catalog.=) root.relnamespace
        JOIN community_deletion.community_deletion_ddl_guard_needed_columns() n
            ON n.table_schema OPERATOR(pg_catalog.=) rn.nspname AND n.table_name OPERATOR(pg_catalog.=) root.relname
           AND n.column_name::pg_catalog.text OPERATOR(pg_catalog.=) d.address_names[3]
        WHERE d.object_type OPERATOR(pg_catalog.=) 'table column'::pg_catalog.text
          AND d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass::pg_catalog.oid
        UNION ALL
        SELECT pg_catalog.format('drops trigger community_write_fence_row of %I.%I, the row fence that fences its partitions as they are made; only community_deletion.detach_community_write_fence() removes it',
                                 d.address_names[1], d.address_names[2]),
               0
        FROM pg_catalog.pg_event_trigger_dropped_objects() d
        JOIN community_deletion.community_scoped_tables r
            ON r.table_schema::pg_catalog.text OPERATOR(pg_catalog.=) d.address_names[1]
           AND r.table_name::pg_catalog.text OPERATOR(pg_catalog.=) d.address_names[2]
        JOIN pg_catalog.pg_namespace n ON n.nspname::pg_catalog.text OPERATOR(pg_catalog.=) d.address_names[1]
        JOIN pg_catalog.pg_class c ON c.relnamespace OPERATOR(pg_catalog.=) n.oid AND c.relname::pg_catalog.text OPERATOR(pg_catalog.=) d.address_names[2]
        WHERE d.object_type OPERATOR(pg_catalog.=) 'trigger'::pg_catalog.text
          AND d.address_names[3] OPERATOR(pg_catalog.=) 'community_write_fence_row'::pg_catalog.text
        UNION ALL
        -- A constraint of a table whose fence is bound, which no foreign key
        -- binds any more: the foreign key it relied on, named as the command
        -- named it before the clones PostgreSQL drops with it (those of a
        -- partitioned parent's partitions, named otherwise).
        SELECT CASE WHEN u.child
                    THEN pg_catalog.format('drops foreign key %I of %s, which binds its fence and is a first step of its paths: a bound fence skips the tenant check while no deletion is in flight, so without the key a deleted tenant''s rows could come back; change the references %s is attached by in a migration run only: detach it there and attach it again with community_deletion.attach_child_table()',
                                           d.address_names[3], u.registered, u.registered)
                    ELSE pg_catalog.format('drops foreign key %I of %s, which binds its fence: a bound fence skips the tenant check while no deletion is in flight, so without the key a deleted tenant''s rows could come back; give %s full fences first with SELECT community_deletion.community_deletion_ddl_guard_full_fences(%L), then drop the key',
                                           d.address_names[3], u.registered, u.registered, u.registered) END,
               CASE WHEN d.original THEN 0 WHEN d.normal THEN 1 ELSE 2 END
        FROM pg_catalog.pg_event_trigger_dropped_objects() d
        JOIN community_deletion.community_deletion_ddl_guard_unbound() u
            ON u.table_schema::pg_catalog.text OPERATOR(pg_catalog.=) d.address_names[1]
           AND u.table_name::pg_catalog.text OPERATOR(pg_catalog.=) d.address_names[2]
        WHERE d.object_type OPERATOR(pg_catalog.=) 'table constraint'::pg_catalog.text
    ) found
    ORDER BY found.rank, found.message
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = pg_catalog.format('DDL refused: %s %s', TG_TAG, problem.message);
    END IF;
END
$body$;
REVOKE ALL ON FUNCTION community_deletion.community_deletion_ddl_guard_dropped() FROM PUBLIC;
CREATE EVENT TRIGGER community_deletion_ddl_guard_sql_drop ON sql_drop
    EXECUTE FUNCTION community_deletion.community_deletion_ddl_guard_dropped();

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

-- The write fence's specialization (migration 00040): the regions
-- community_deletion_fence_specialize() writes at the fence's markers, and
-- the body with them turned back into the markers, which is what the
-- fence's digest is computed from. Copies of community_deletion_fence_regions()
-- and community_deletion_fence_normalized(), which
-- TestDDLGuardAgreesWithTheMigrationsOnFences holds to the migrations'.
CREATE FUNCTION community_deletion.community_deletion_ddl_guard_fence_regions(branches pg_catalog.jsonb) RETURNS pg_catalog.text[]
    LANGUAGE plpgsql IMMUTABLE
    SET search_path = pg_catalog, pg_temp
    AS $body$
DECLARE
    key_name pg_catalog.text;
    spec_text pg_catalog.text;
    spec pg_catalog.jsonb;
    path pg_catalog.jsonb;
    hop pg_catalog.jsonb;
    branch pg_catalog.text[] := '{}';
    resolve pg_catalog.text[] := '{}';
    keys_code pg_catalog.text;
    children_code pg_catalog.text;
    paths_code pg_catalog.text;
    tests pg_catalog.text;
    parents_new pg_catalog.text;
    parents_old pg_catalog.text;
    parents_both pg_catalog.text;
    joins_new pg_catalog.text;
    joins_old pg_catalog.text;
    tenant pg_catalog.text;
    lean pg_catalog.bool;
BEGIN
    FOR key_name IN SELECT k.value FROM pg_catalog.jsonb_array_elements_text(COALESCE(branches OPERATOR(pg_catalog.->) 'keys', '[]'::pg_catalog.jsonb)) k LOOP
        CONTINUE WHEN pg_catalog.strpos(key_name, '--@') OPERATOR(pg_catalog.>) 0;
        branch := branch OPERATOR(pg_catalog.||) pg_catalog.format(
            E'IF TG_ARGV[0] OPERATOR(pg_catalog.=) %L THEN\n'
            '    IF TG_OP OPERATOR(pg_catalog.=) ''INSERT'' THEN\n'
            '        SELECT pg_catalog.bit_or(community_deletion.community_deletion_fence_key_bit(n.%I::pg_catalog.text)) INTO bits\n'
            '        FROM community_fence_new n;\n'
            '    ELSIF TG_OP OPERATOR(pg_catalog.=) ''UPDATE'' THEN\n'
            '        SELECT pg_catalog.bit_or(community_deletion.community_deletion_fence_key_bit(k.key)) INTO bits\n'
            '        FROM (SELECT o.%I::pg_catalog.text FROM community_fence_old o\n'
            '              UNION ALL\n'
            '              SELECT n.%I::pg_catalog.text FROM community_fence_new n) k (key);\n'
            '    ELSE\n'
            '        SELECT pg_catalog.bit_or(community_deletion.community_deletion_fence_key_bit(o.%I::pg_catalog.text)) INTO bits\n'
            '        FROM community_fence_old o;\n'
            '    END IF;\n',
            key_name, key_name, key_name, key_name, key_name);
    END LOOP;
    keys_code := CASE WHEN pg_catalog.cardinality(branch) OPERATOR(pg_catalog.=) 0 THEN '--@keys-begin@'
                      ELSE pg_catalog.array_to_string(branch, 'ELS') OPERATOR(pg_catalog.||) E'ELSE\n--@keys-begin@' END;

    branch := '{}';
    FOR spec_text IN SELECT s.value FROM pg_catalog.jsonb_array_elements_text(COALESCE(branches OPERATOR(pg_catalog.->) 'children', '[]'::pg_catalog.jsonb)) s LOOP
        CONTINUE WHEN pg_catalog.strpos(spec_text, '--@') OPERATOR(pg_catalog.>) 0;
        spec := spec_text::pg_catalog.jsonb;
        lean := pg_catalog.jsonb_typeof(spec OPERATOR(pg_catalog.->) 'paths') OPERATOR(pg_catalog.=) 'array'
                AND pg_catalog.jsonb_array_length(spec OPERATOR(pg_catalog.->) 'paths') OPERATOR(pg_catalog.>) 0;
        tests := '';
        parents_new := NULL;
        parents_old := NULL;
        parents_both := NULL;
        joins_new := NULL;
        joins_old := NULL;
        IF lean THEN
            FOR path IN SELECT p.value FROM pg_catalog.jsonb_array_elements(spec OPERATOR(pg_catalog.->) 'paths') p LOOP
                hop := path OPERATOR(pg_catalog.->) 'hops' OPERATOR(pg_catalog.->) 0;
                IF pg_catalog.jsonb_typeof(path OPERATOR(pg_catalog.->) 'hops') IS DISTINCT FROM 'array'
                   OR pg_catalog.jsonb_array_length(path OPERATOR(pg_catalog.->) 'hops') OPERATOR(pg_catalog.<>) 1
                   OR pg_catalog.jsonb_typeof(hop OPERATOR(pg_catalog.->) 'columns') IS DISTINCT FROM 'array'
                   OR pg_catalog.jsonb_array_length(hop OPERATOR(pg_catalog.->) 'columns') OPERATOR(pg_catalog.<>) 1
                   OR pg_catalog.jsonb_typeof(hop OPERATOR(pg_catalog.->) 'parent_columns') IS DISTINCT FROM 'array'
                   OR pg_catalog.jsonb_array_length(hop OPERATOR(pg_catalog.->) 'parent_columns') OPERATOR(pg_catalog.<) 1
                   OR hop OPERATOR(pg_catalog.->>) 'schema' IS NULL OR hop OPERATOR(pg_catalog.->>) 'table' IS NULL
                   OR path OPERATOR(pg_catalog.->>) 'key' IS NULL
                   OR hop OPERATOR(pg_catalog.->) 'columns' OPERATOR(pg_catalog.->>) 0 IS NULL
                   OR hop OPERATOR(pg_catalog.->) 'parent_columns' OPERATOR(pg_catalog.->>) 0 IS NULL THEN
                    lean := false;
                    EXIT;
                END IF;
                tests := tests OPERATOR(pg_catalog.||) pg_catalog.format(E'\n   AND NOT pg_catalog.row_security_active(%L::pg_catalog.text)',
                                         pg_catalog.format('%I.%I', hop OPERATOR(pg_catalog.->>) 'schema', hop OPERATOR(pg_catalog.->>) 'table'));
                parents_new := COALESCE(parents_new OPERATOR(pg_catalog.||) E'\n              UNION ALL\n              ', '') OPERATOR(pg_catalog.||) pg_catalog.format(
                    'SELECT p.%I::pg_catalog.text FROM %I.%I p WHERE p.%I OPERATOR(pg_catalog.=) ANY (SELECT n.%I FROM community_fence_new n)',
                    path OPERATOR(pg_catalog.->>) 'key', hop OPERATOR(pg_catalog.->>) 'schema', hop OPERATOR(pg_catalog.->>) 'table',
                    hop OPERATOR(pg_catalog.->) 'parent_columns' OPERATOR(pg_catalog.->>) 0, hop OPERATOR(pg_catalog.->) 'columns' OPERATOR(pg_catalog.->>) 0);
                parents_old := COALESCE(parents_old OPERATOR(pg_catalog.||) E'\n              UNION ALL\n              ', '') OPERATOR(pg_catalog.||) pg_catalog.format(
                    'SELECT p.%I::pg_catalog.text FROM %I.%I p WHERE p.%I OPERATOR(pg_catalog.=) ANY (SELECT o.%I FROM community_fence_old o)',
                    path OPERATOR(pg_catalog.->>) 'key', hop OPERATOR(pg_catalog.->>) 'schema', hop OPERATOR(pg_catalog.->>) 'table',
                    hop OPERATOR(pg_catalog.->) 'parent_columns' OPERATOR(pg_catalog.->>) 0, hop OPERATOR(pg_catalog.->) 'columns' OPERATOR(pg_catalog.->>) 0);
                parents_both := COALESCE(parents_both OPERATOR(pg_catalog.||) E'\n              UNION ALL\n              ', '') OPERATOR(pg_catalog.||) pg_catalog.format(
                    'SELECT p.%I::pg_catalog.text FROM %I.%I p WHERE p.%I OPERATOR(pg_catalog.=) ANY '
                    '(SELECT o.%I FROM community_fence_old o UNION ALL SELECT n.%I FROM community_fence_new n)',
                    path OPERATOR(pg_catalog.->>) 'key', hop OPERATOR(pg_catalog.->>) 'schema', hop OPERATOR(pg_catalog.->>) 'table',
                    hop OPERATOR(pg_catalog.->) 'parent_columns' OPERATOR(pg_catalog.->>) 0,
                    hop OPERATOR(pg_catalog.->) 'columns' OPERATOR(pg_catalog.->>) 0, hop OPERATOR(pg_catalog.->) 'columns' OPERATOR(pg_catalog.->>) 0);
                joins_new := COALESCE(joins_new OPERATOR(pg_catalog.||) E'\n              UNION ALL\n              ', '') OPERATOR(pg_catalog.||) pg_catalog.format(
                    'SELECT p.%I::pg_catalog.text FROM community_fence_new w JOIN %I.%I p ON p.%I OPERATOR(pg_catalog.=) w.%I',
                    path OPERATOR(pg_catalog.->>) 'key', hop OPERATOR(pg_catalog.->>) 'schema', hop OPERATOR(pg_catalog.->>) 'table',
                    hop OPERATOR(pg_catalog.->) 'parent_columns' OPERATOR(pg_catalog.->>) 0, hop OPERATOR(pg_catalog.->) 'columns' OPERATOR(pg_catalog.->>) 0);
                joins_old := COALESCE(joins_old OPERATOR(pg_catalog.||) E'\n              UNION ALL\n              ', '') OPERATOR(pg_catalog.||) pg_catalog.format(
                    'SELECT p.%I::pg_catalog.text FROM community_fence_old w JOIN %I.%I p ON p.%I OPERATOR(pg_catalog.=) w.%I',
                    path OPERATOR(pg_catalog.->>) 'key', hop OPERATOR(pg_catalog.->>) 'schema', hop OPERATOR(pg_catalog.->>) 'table',
                    hop OPERATOR(pg_catalog.->) 'parent_columns' OPERATOR(pg_catalog.->>) 0, hop OPERATOR(pg_catalog.->) 'columns' OPERATOR(pg_catalog.->>) 0);
            END LOOP;
        END IF;
        IF lean THEN
            branch := branch OPERATOR(pg_catalog.||) pg_catalog.format(
                E'IF TG_ARGV[1] OPERATOR(pg_catalog.=) %L%s THEN\n'
                '    IF TG_OP OPERATOR(pg_catalog.=) ''INSERT'' THEN\n'
                '        SELECT pg_catalog.bit_or(community_deletion.community_deletion_fence_key_bit(k.key)) INTO bits\n'
                '        FROM (%s) k (key);\n'
                '    ELSIF TG_OP OPERATOR(pg_catalog.=) ''UPDATE'' THEN\n'
                '        SELECT pg_catalog.bit_or(community_deletion.community_deletion_fence_key_bit(k.key)) INTO bits\n'
                '        FROM (%s) k (key);\n'
                '    ELSE\n'
                '        SELECT pg_catalog.bit_or(community_deletion.community_deletion_fence_key_bit(k.key)) INTO bits\n'
                '        FROM (%s) k (key);\n'
                '    END IF;\n',
                spec_text, tests, parents_new, parents_both, parents_old);
            tenant := CASE spec OPERATOR(pg_catalog.->>) 'kind' WHEN 'uuid' THEN 's.k::pg_catalog.uuid'
                           ELSE 'community_deletion.community_deletion_tenant_uuid(s.k)' END;
            resolve := resolve OPERATOR(pg_catalog.||) pg_catalog.format(
                E'IF TG_ARGV[1] OPERATOR(pg_catalog.=) %L%s THEN\n'
                '    IF TG_OP OPERATOR(pg_catalog.=) ''INSERT'' THEN\n'
                '        SELECT pg_catalog.array_agg(%s) INTO touched\n'
                '        FROM (SELECT DISTINCT r.k FROM (%s) r (k) WHERE r.k IS NOT NULL) s (k);\n'
                '    ELSIF TG_OP OPERATOR(pg_catalog.=) ''UPDATE'' THEN\n'
                '        SELECT pg_catalog.array_agg(%s) INTO touched\n'
                '        FROM (SELECT DISTINCT r.k FROM (%s\n              UNION ALL\n              %s) r (k) WHERE r.k IS NOT NULL) s (k);\n'
                '    ELSE\n'
                '        SELECT pg_catalog.array_agg(%s) INTO touched\n'
                '        FROM (SELECT DISTINCT r.k FROM (%s) r (k) WHERE r.k IS NOT NULL) s (k);\n'
                '    END IF;\n',
                spec_text, tests, tenant, joins_new, tenant, joins_old, joins_new, tenant, joins_old);
        END IF;
    END LOOP;
    children_code := CASE WHEN pg_catalog.cardinality(branch) OPERATOR(pg_catalog.=) 0 THEN '--@children-begin@'
                          ELSE pg_catalog.array_to_string(branch, 'ELS') OPERATOR(pg_catalog.||) E'ELSE\n--@children-begin@' END;
    paths_code := CASE WHEN pg_catalog.cardinality(resolve) OPERATOR(pg_catalog.=) 0 THEN '--@paths-begin@'
                       ELSE pg_catalog.array_to_string(resolve, 'ELS') OPERATOR(pg_catalog.||) E'ELSE\n--@paths-begin@' END;

    RETURN ARRAY[
        '-- fence specialized for: ' OPERATOR(pg_catalog.||) COALESCE(branches, '{}'::pg_catalog.jsonb)::pg_catalog.text,
        keys_code,
        CASE WHEN keys_code OPERATOR(pg_catalog.=) '--@keys-begin@' THEN '--@keys-end@' ELSE E'--@keys-end@\nEND IF;' END,
        children_code,
        CASE WHEN children_code OPERATOR(pg_catalog.=) '--@children-begin@' THEN '--@children-end@' ELSE E'--@children-end@\nEND IF;' END,
        paths_code,
        CASE WHEN paths_code OPERATOR(pg_catalog.=) '--@paths-begin@' THEN '--@paths-end@' ELSE E'--@paths-end@\nEND IF;' END];
END
$body$;
REVOKE ALL ON FUNCTION community_deletion.community_deletion_ddl_guard_fence_regions(pg_catalog.jsonb) FROM PUBLIC;

CREATE FUNCTION community_deletion.community_deletion_ddl_guard_fence_normalized(body pg_catalog.text) RETURNS pg_catalog.text
    LANGUAGE plpgsql IMMUTABLE
    SET search_path = pg_catalog, pg_temp
    AS $body$
DECLARE
    header pg_catalog.text := pg_catalog.substring(body, E'^\n-- fence specialized for: ([^\n]*)\n');
    regions pg_catalog.text[];
BEGIN
    IF header IS NULL OR header OPERATOR(pg_catalog.=) '{}' THEN
        RETURN body;
    END IF;
    BEGIN
        regions := community_deletion.community_deletion_ddl_guard_fence_regions(header::pg_catalog.jsonb);
    EXCEPTION WHEN OTHERS THEN
        RETURN body;
    END;
    RETURN pg_catalog.replace(pg_catalog.replace(pg_catalog.replace(pg_catalog.replace(pg_catalog.replace(pg_catalog.replace(pg_catalog.replace(body,
               regions[1], '-- fence specialized for: {}'),
               regions[2], '--@keys-begin@'),
               regions[3], '--@keys-end@'),
               regions[4], '--@children-begin@'),
               regions[5], '--@children-end@'),
               regions[6], '--@paths-begin@'),
               regions[7], '--@paths-end@');
END
$body$;
REVOKE ALL ON FUNCTION community_deletion.community_deletion_ddl_guard_fence_normalized(pg_catalog.text) FROM PUBLIC;

-- Whether this command's replacement of the write fence's constant
-- (migration 00035) is one the deletion makes: NULL if so, otherwise why
-- not. The transaction must hold the fence marker's lock exclusively; an
-- armed body needs every table whose fence has the dormant path held in
-- SHARE mode or stronger (the drain, which waited for the writers the
-- dormant fence admitted), and a dormant one no community quiescing or
-- fenced. The constant's other attributes are the digest's to check.
CREATE FUNCTION community_deletion.community_deletion_ddl_guard_switch() RETURNS pg_catalog.text
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    SET jit = off
    AS $body$
DECLARE
    body pg_catalog.text;
    fence pg_catalog.oid := pg_catalog.to_regprocedure('community_deletion.enforce_community_write_fence()'::pg_catalog.text)::pg_catalog.oid;
BEGIN
    SELECT p.prosrc INTO body FROM pg_catalog.pg_proc p
    WHERE p.oid OPERATOR(pg_catalog.=) pg_catalog.to_regprocedure('community_deletion.community_deletion_fence_armed()'::pg_catalog.text)::pg_catalog.oid;
    IF body IS NULL OR body OPERATOR(pg_catalog.<>) ALL (ARRAY[' SELECT true ', ' SELECT false ']::pg_catalog.text[]) THEN
        RETURN 'leaves it with a body the migrations did not install';
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_locks l
                   WHERE l.locktype OPERATOR(pg_catalog.=) 'advisory'::pg_catalog.text AND l.granted
                     AND l.pid OPERATOR(pg_catalog.=) pg_catalog.pg_backend_pid()
                     AND l.classid OPERATOR(pg_catalog.=) 1668246884::pg_catalog.oid
                     AND l.objid OPERATOR(pg_catalog.=) 1718510437::pg_catalog.oid
                     AND l.objsubid OPERATOR(pg_catalog.=) 2
                     AND l.mode OPERATOR(pg_catalog.=) 'ExclusiveLock'::pg_catalog.text) THEN
        RETURN 'without the fence marker''s lock, which serializes arming and disarming the fence';
    END IF;
    IF body OPERATOR(pg_catalog.=) ' SELECT true '::pg_catalog.text THEN
        IF EXISTS (SELECT 1 FROM pg_catalog.pg_trigger t
                   WHERE t.tgfoid OPERATOR(pg_catalog.=) fence AND t.tgnargs OPERATOR(pg_catalog.=) 3 AND NOT t.tgisinternal
                     AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_locks l
                                     WHERE l.locktype OPERATOR(pg_catalog.=) 'relation'::pg_catalog.text AND l.granted
                                       AND l.pid OPERATOR(pg_catalog.=) pg_catalog.pg_backend_pid()
                                       AND l.relation OPERATOR(pg_catalog.=) t.tgrelid
                                       AND l.mode OPERATOR(pg_catalog.=) ANY (ARRAY['ShareLock', 'ShareRowExclusiveLock', 'ExclusiveLock',
                                                                                  'AccessExclusiveLock']::pg_catalog.text[]))) THEN
            RETURN 'arms the fence without draining it: hold every table with a bound fence in SHARE mode first (community_deletion.community_deletion_fence_drain())';
        END IF;
    ELSIF EXISTS (SELECT 1 FROM community_deletion.communities c
                  WHERE c.deletion_state OPERATOR(pg_catalog.=) ANY (ARRAY['quiescing', 'fenced']::pg_catalog.text[])) THEN
        RETURN 'makes the fence dormant while a community is quiescing or fenced';
    END IF;
    RETURN NULL;
END
$body$;
REVOKE ALL ON FUNCTION community_deletion.community_deletion_ddl_guard_switch() FROM PUBLIC;

-- The checks at the end of every DDL command. jit is off here and in the
-- other event triggers: the checks' plan is costed high (function scans
-- estimate a thousand rows each) and JIT-compiling it took seconds a
-- command.
CREATE FUNCTION community_deletion.community_deletion_ddl_guard() RETURNS event_trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    SET jit = off
    AS $body$
DECLARE
    home pg_catalog.oid := pg_catalog.to_regnamespace('community_deletion'::pg_catalog.text)::pg_catalog.oid;
    fence_function pg_catalog.oid;
    truncate_function pg_catalog.oid;
    kept_function pg_catalog.oid;
    row_function pg_catalog.oid;
    kept_row_function pg_catalog.oid;
    member record;
    problem record;
    rewrite_problem pg_catalog.text;
    foreign_rows pg_catalog.bool;
    arg_list pg_catalog.text;
    read_columns pg_catalog.text;
BEGIN
    -- A table rewrite of a registered table (ALTER COLUMN ... TYPE ...
    -- USING, for one) must not move rows into or out of a tenant being
    -- deleted, nor into a deleted one. This holds in migration runs too,
    -- and is reported last: a reshape is the more telling refusal.
    IF pg_catalog.to_regclass('community_deletion.community_scoped_tables'::pg_catalog.text) IS NOT NULL THEN
        rewrite_problem := community_deletion.community_deletion_ddl_guard_rewritten(TG_TAG);
    END IF;
    -- A migration run, opened by a login of the schema's owner.
    IF community_deletion.community_deletion_ddl_guard_in_run() THEN
        IF rewrite_problem IS NOT NULL THEN
            RAISE EXCEPTION USING ERRCODE = '42501', MESSAGE = rewrite_problem;
        END IF;
        IF pg_catalog.to_regprocedure('community_deletion.community_deletion_control_table(text)'::pg_catalog.text) IS NOT NULL THEN
            UPDATE community_deletion.community_deletion_ddl_guard_state s
            SET control_tables = t.oids, control_digest = community_deletion.community_deletion_ddl_guard_control_digest(t.oids)
            FROM (SELECT community_deletion.community_deletion_ddl_guard_control_tables() AS oids) t;
        END IF;
        RETURN;
    END IF;
    IF pg_catalog.to_regclass('community_deletion.communities'::pg_catalog.text) IS NULL
       OR pg_catalog.to_regclass('community_deletion.community_scoped_tables'::pg_catalog.text) IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = pg_catalog.format('DDL refused: %s runs while community_deletion.communities is gone; put schema community_deletion back, or uninstall the DDL guard (migrate uninstall-ddl-guard)', TG_TAG);
    END IF;
    fence_function := pg_catalog.to_regprocedure('community_deletion.enforce_community_write_fence()'::pg_catalog.text);
    truncate_function := pg_catalog.to_regprocedure('community_deletion.enforce_community_truncate_fence()'::pg_catalog.text);
    kept_function := pg_catalog.to_regprocedure('community_deletion.enforce_community_kept_row_fence()'::pg_catalog.text);
    row_function := pg_catalog.to_regprocedure('community_deletion.enforce_community_write_fence_row()'::pg_catalog.text);
    kept_row_function := pg_catalog.to_regprocedure('community_deletion.enforce_community_kept_row_fence_row()'::pg_catalog.text);

    -- Schema community_deletion changes only in migration runs: nothing is
    -- created or altered in it, nor moved into it (ALTER ... SET SCHEMA),
    -- and no role but its owner may CREATE there.
    -- Except the write fence going dormant or armed (migration 00035): its
    -- constant replaced by one of its two bodies, as the arming trigger
    -- and the settle replace it (see community_deletion_ddl_guard_switch).
    SELECT cmd.command_tag, cmd.object_type, cmd.object_identity INTO problem
    FROM pg_catalog.pg_event_trigger_ddl_commands() cmd
    WHERE (cmd.schema_name OPERATOR(pg_catalog.=) 'community_deletion'::pg_catalog.text
           OR (cmd.object_type OPERATOR(pg_catalog.=) 'schema'::pg_catalog.text
               AND cmd.object_identity OPERATOR(pg_catalog.=) 'community_deletion'::pg_catalog.text))
      AND NOT (cmd.command_tag OPERATOR(pg_catalog.=) 'CREATE FUNCTION'::pg_catalog.text
               AND cmd.object_identity OPERATOR(pg_catalog.=) 'community_deletion.community_deletion_fence_armed()'::pg_catalog.text
               AND community_deletion.community_deletion_ddl_guard_switch() IS NULL)
      -- And the write fence specialized (migration 00040): a body that,
      -- its branches turned back into their markers, is the installed
      -- one; the digest check below holds it to that.
      AND NOT (cmd.command_tag OPERATOR(pg_catalog.=) 'CREATE FUNCTION'::pg_catalog.text
               AND cmd.object_identity OPERATOR(pg_catalog.=) 'community_deletion.enforce_community_write_fence()'::pg_catalog.text
               AND EXISTS (SELECT 1 FROM pg_catalog.pg_proc p
                           JOIN community_deletion.community_deletion_function_digests d
                             ON d.function_signature OPERATOR(pg_catalog.=) 'enforce_community_write_fence()'::pg_catalog.text
                           WHERE p.oid OPERATOR(pg_catalog.=) cmd.objid
                             AND pg_catalog.md5(pg_catalog.concat_ws(E'\x1f',
                                     community_deletion.community_deletion_ddl_guard_fence_normalized(p.prosrc),
                                     pg_catalog.array_to_string(p.proconfig, E'\x1e'),
                                     p.prosecdef::pg_catalog.text, p.provolatile::pg_catalog.text,
                                     pg_catalog.pg_get_userbyid(p.proowner))) OPERATOR(pg_catalog.=) d.digest))
    LIMIT 1;
    IF FOUND AND problem.object_identity OPERATOR(pg_catalog.=) 'community_deletion.community_deletion_fence_armed()'::pg_catalog.text THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = pg_catalog.format('DDL refused: %s of community_deletion.community_deletion_fence_armed() outside a migration run %s',
                                        problem.command_tag, community_deletion.community_deletion_ddl_guard_switch());
    END IF;
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

    -- The fence marker (migration 00029), which the write fences read to
    -- tell whether a deletion is in flight: still there, and no role but
    -- its owner (whose functions set it) may change it (setval and nextval
    -- need UPDATE or USAGE). ALTER SEQUENCE (its owner too) is refused
    -- above, as a change in schema community_deletion; DROP SEQUENCE and
    -- GRANT list nothing there, and are checked here.
    IF EXISTS (SELECT 1 FROM community_deletion.community_deletion_function_digests d
               WHERE d.function_signature OPERATOR(pg_catalog.=) 'community_deletion_fence_bit(uuid)'::pg_catalog.text) THEN
        SELECT found.problem INTO problem
        FROM (
            SELECT 'gone; the write fences read it to tell whether a deletion is in flight'::pg_catalog.text AS problem
            WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_class c
                              WHERE c.relnamespace OPERATOR(pg_catalog.=) home
                                AND c.relname OPERATOR(pg_catalog.=) 'community_deletion_fence_marker'::pg_catalog.name
                                AND c.relkind OPERATOR(pg_catalog.=) 'S'::pg_catalog."char")
            UNION ALL
            SELECT pg_catalog.format('with %s granted to %s: only its owner may change it (setval, nextval); revoke it',
                                     acl.privilege_type,
                                     CASE WHEN acl.grantee OPERATOR(pg_catalog.=) 0::pg_catalog.oid THEN 'PUBLIC'::pg_catalog.text
                                          ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(acl.grantee)::pg_catalog.text) END)
            FROM pg_catalog.pg_class c
            CROSS JOIN LATERAL pg_catalog.aclexplode(c.relacl) acl
            WHERE c.relnamespace OPERATOR(pg_catalog.=) home
              AND c.relname OPERATOR(pg_catalog.=) 'community_deletion_fence_marker'::pg_catalog.name
              AND acl.grantee OPERATOR(pg_catalog.<>) c.relowner
              AND acl.privilege_type OPERATOR(pg_catalog.<>) 'SELECT'::pg_catalog.text
        ) found
        ORDER BY 1
        LIMIT 1;
        IF FOUND THEN
            RAISE EXCEPTION USING ERRCODE = '42501',
                MESSAGE = pg_catalog.format('DDL refused: %s leaves the fence marker community_deletion.community_deletion_fence_marker %s; change the deletion schema only through its migrations',
                                            TG_TAG, problem.problem);
        END IF;
    END IF;

    -- Building a fence (attach, attach_child_table, or the fencing below)
    -- creates its triggers one command at a time. A command that only
    -- creates triggers exactly as attach does, each under the name of its
    -- event and with its table's registered arguments, can only add or
    -- restore protection. (A DROP command lists nothing here, and is
    -- checked.)
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_event_trigger_ddl_commands()) AND NOT EXISTS (
        SELECT 1 FROM pg_catalog.pg_event_trigger_ddl_commands() cmd
        WHERE NOT (cmd.object_type OPERATOR(pg_catalog.=) 'trigger'::pg_catalog.text
                   AND community_deletion.community_deletion_ddl_guard_builds_fence(cmd.objid))) THEN
        IF rewrite_problem IS NOT NULL THEN
            RAISE EXCEPTION USING ERRCODE = '42501', MESSAGE = rewrite_problem;
        END IF;
        RETURN;
    END IF;

    -- A bound fence (three arguments, the last 'bound') skips its tenant
    -- check while no deletion is in flight: it holds only while the
    -- foreign key that binds its table is there, with its triggers enabled
    -- (the sql_drop trigger names a foreign key dropped).
    SELECT u.registered, u.detail INTO problem
    FROM community_deletion.community_deletion_ddl_guard_unbound() u
    ORDER BY 1
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = pg_catalog.format('DDL refused: %s leaves the fence of %s bound although %s: a bound fence skips the tenant check while no deletion is in flight, so a deleted tenant''s rows could come back; put that back, or give %s full fences first with SELECT community_deletion.community_deletion_ddl_guard_full_fences(%L)',
                                        TG_TAG, problem.registered, problem.detail, problem.registered, problem.registered);
    END IF;

    -- Partitions new to a registered table: one without any fence trigger
    -- (neither attach's statement fences nor a clone of the row fence: made
    -- before the row fence existed), or one attached or created in this
    -- transaction without attach's statement fences, is fenced and granted
    -- as attach would, unless it holds rows of a tenant that is not active;
    -- one attached in this transaction with its statement fences (detached
    -- and re-attached) is refused when it holds rows of a tenant that was
    -- deleted. On a leaf, the clone of the row fence goes disabled, as
    -- attach leaves it.
    FOR member IN
        SELECT reg.relid::pg_catalog.regclass AS relid, reg.table_name, reg.purge_action, reg.tenant_key, reg.parents, reg.args, reg.leaf,
               EXISTS (SELECT 1 FROM pg_catalog.pg_trigger t
                       WHERE t.tgrelid OPERATOR(pg_catalog.=) reg.relid AND NOT t.tgisinternal
                         AND t.tgfoid OPERATOR(pg_catalog.=) ANY (CASE WHEN reg.purge_action OPERATOR(pg_catalog.=) 'delete'::pg_catalog.text
                                                                       THEN ARRAY[fence_function, truncate_function]
                                                                       ELSE ARRAY[kept_function] END)) AS statement_triggers,
               EXISTS (SELECT 1 FROM pg_catalog.pg_inherits i
                       WHERE i.inhrelid OPERATOR(pg_catalog.=) reg.relid AND pg_catalog.age(i.xmin) OPERATOR(pg_catalog.<=) 0) AS attached_now
        FROM community_deletion.community_deletion_ddl_guard_registered() reg
        WHERE reg.relid OPERATOR(pg_catalog.<>) reg.root
        ORDER BY reg.relid
    LOOP
        IF NOT member.attached_now AND EXISTS (
            SELECT 1 FROM pg_catalog.pg_trigger t
            WHERE t.tgrelid OPERATOR(pg_catalog.=) member.relid::pg_catalog.oid AND NOT t.tgisinternal
              AND t.tgfoid OPERATOR(pg_catalog.=) ANY (ARRAY[fence_function, truncate_function, kept_function, row_function, kept_row_function])) THEN
            CONTINUE; -- a partition the checks below judge
        END IF;
        EXECUTE pg_catalog.format('SELECT EXISTS (SELECT 1 FROM %s m WHERE %s)', member.relid,
                                  community_deletion.community_deletion_ddl_guard_foreign_rows(member.args, 'm', member.statement_triggers))
            INTO foreign_rows;
        IF foreign_rows THEN
            RAISE EXCEPTION USING ERRCODE = '42501',
                MESSAGE = pg_catalog.format('DDL refused: %s makes %s a partition of %s while it holds rows of a community that %s; delete those rows from it first, or keep it apart',
                                            TG_TAG, member.relid, member.table_name,
                                            CASE WHEN member.statement_triggers THEN 'was deleted' ELSE 'is being deleted or was deleted' END);
        END IF;
        IF NOT member.statement_triggers THEN
            arg_list := coalesce((SELECT pg_catalog.string_agg(pg_catalog.quote_literal(a.value), ', ' ORDER BY a.ordinality)
                                  FROM pg_catalog.unnest(member.args) WITH ORDINALITY a (value, ordinality)), '');
            -- What the operator reads of it: its key, or the columns of its paths' first hops.
            read_columns := coalesce(pg_catalog.quote_ident(member.tenant_key::pg_catalog.text), (
                SELECT pg_catalog.string_agg(DISTINCT pg_catalog.quote_ident(c.value), ', ')
                FROM pg_catalog.jsonb_array_elements(member.parents) p,
                     pg_catalog.jsonb_array_elements_text(((p.value OPERATOR(pg_catalog.->) 'hops') OPERATOR(pg_catalog.->) 0)
                                                          OPERATOR(pg_catalog.->) 'columns') c));
            IF member.purge_action OPERATOR(pg_catalog.=) 'delete'::pg_catalog.text THEN
                EXECUTE pg_catalog.format('CREATE OR REPLACE TRIGGER community_write_fence_insert AFTER INSERT ON %s '
                                          'REFERENCING NEW TABLE AS community_fence_new '
                                          'FOR EACH STATEMENT EXECUTE FUNCTION community_deletion.enforce_community_write_fence(%s)', member.relid, arg_list);
                EXECUTE pg_catalog.format('CREATE OR REPLACE TRIGGER community_write_fence_update AFTER UPDATE ON %s '
                                          'REFERENCING OLD TABLE AS community_fence_old NEW TABLE AS community_fence_new '
                                          'FOR EACH STATEMENT EXECUTE FUNCTION community_deletion.enforce_community_write_fence(%s)', member.relid, arg_list);
                EXECUTE pg_catalog.format('CREATE OR REPLACE TRIGGER community_write_fence_delete AFTER DELETE ON %s '
                                          'REFERENCING OLD TABLE AS community_fence_old '
                                          'FOR EACH STATEMENT EXECUTE FUNCTION community_deletion.enforce_community_write_fence(%s)', member.relid, arg_list);
                EXECUTE pg_catalog.format('CREATE OR REPLACE TRIGGER community_write_fence_truncate BEFORE TRUNCATE ON %s '
                                          'FOR EACH STATEMENT EXECUTE FUNCTION community_deletion.enforce_community_truncate_fence()', member.relid);
                EXECUTE pg_catalog.format('GRANT SELECT, UPDATE, DELETE ON %s TO community_deletion_executor', member.relid);
            ELSE
                EXECUTE pg_catalog.format('CREATE OR REPLACE TRIGGER community_kept_row_fence_insert AFTER INSERT ON %s '
                                          'REFERENCING NEW TABLE AS community_fence_new '
                                          'FOR EACH STATEMENT EXECUTE FUNCTION community_deletion.enforce_community_kept_row_fence(%s)', member.relid, arg_list);
                EXECUTE pg_catalog.format('CREATE OR REPLACE TRIGGER community_kept_row_fence_update AFTER UPDATE ON %s '
                                          'REFERENCING OLD TABLE AS community_fence_old NEW TABLE AS community_fence_new '
                                          'FOR EACH STATEMENT EXECUTE FUNCTION community_deletion.enforce_community_kept_row_fence(%s)', member.relid, arg_list);
                EXECUTE pg_catalog.format('GRANT SELECT, UPDATE (%s) ON %s TO community_deletion_executor', read_columns, member.relid);
            END IF;
            EXECUTE pg_catalog.format('GRANT SELECT (%s) ON %s TO community_deletion_operator', read_columns, member.relid);
        END IF;
        IF member.leaf
           AND community_deletion.community_deletion_ddl_guard_statement_fenced(member.relid::pg_catalog.oid, member.purge_action, member.args)
           AND EXISTS (SELECT 1 FROM pg_catalog.pg_trigger t
                       WHERE t.tgrelid OPERATOR(pg_catalog.=) member.relid::pg_catalog.oid
                         AND t.tgname OPERATOR(pg_catalog.=) 'community_write_fence_row'::pg_catalog.name
                         AND t.tgenabled OPERATOR(pg_catalog.<>) 'D'::pg_catalog."char") THEN
            EXECUTE pg_catalog.format('ALTER TABLE %s DISABLE TRIGGER community_write_fence_row', member.relid);
        END IF;
    END LOOP;

    -- Everything else the drift report flags about registered tables,
    -- fences, guard triggers, installed functions and row security, checked
    -- here without calling it. Unregistered tables are not refused (a
    -- service creates a tenant table, then attaches it), nor a fence on a
    -- table not yet registered (attach fences before it registers) unless
    -- that table holds rows and its fence is incomplete.
    WITH registered AS (
        -- oid is NULL when the table is gone; key is its tenant key column.
        SELECT r.table_schema, r.table_name, r.purge_action, r.tenant_key, coalesce(r.key_kind, 'uuid') AS key_kind, r.parents,
               t.oid, key.atttypid AS key_type, key.attnotnull AS key_not_null,
               community_deletion.community_deletion_ddl_guard_expected_args(t.oid, r.purge_action, r.tenant_key, r.key_kind, r.parents) AS args,
               pg_catalog.quote_ident(r.table_schema::pg_catalog.text) OPERATOR(pg_catalog.||) '.'::pg_catalog.text
                   OPERATOR(pg_catalog.||) pg_catalog.quote_ident(r.table_name::pg_catalog.text) AS display_name
        FROM community_deletion.community_scoped_tables r
        LEFT JOIN LATERAL (
            SELECT c.oid
            FROM pg_catalog.pg_class c
            JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace
            WHERE c.relname OPERATOR(pg_catalog.=) r.table_name AND n.nspname OPERATOR(pg_catalog.=) r.table_schema
              AND c.relkind OPERATOR(pg_catalog.=) ANY (ARRAY['r', 'p']::pg_catalog."char"[]) AND NOT c.relispartition) t ON true
        LEFT JOIN pg_catalog.pg_attribute key
            ON key.attrelid OPERATOR(pg_catalog.=) t.oid AND key.attname OPERATOR(pg_catalog.=) r.tenant_key
           AND key.attnum OPERATOR(pg_catalog.>) 0 AND NOT key.attisdropped
    ), members AS (
        -- Every table of a registered table's partition tree.
        SELECT registered.display_name, registered.purge_action, registered.args, part.relid,
               part.relid OPERATOR(pg_catalog.=) registered.oid AS root
        FROM registered
        CROSS JOIN LATERAL (SELECT registered.oid
                            UNION SELECT tree.relid::pg_catalog.oid
                                  FROM pg_catalog.pg_partition_tree(registered.oid::pg_catalog.regclass) tree) part (relid)
        WHERE registered.oid IS NOT NULL
    ), member_fences AS (
        -- How each is fenced: by attach's statement fences (and, 'delete',
        -- its TRUNCATE fence), or, for a partition that has none of them,
        -- by the enabled clone of its partitioned table's row fence.
        SELECT members.*,
               community_deletion.community_deletion_ddl_guard_statement_fenced(members.relid, members.purge_action, members.args) AS statement_fenced,
               EXISTS (SELECT 1 FROM pg_catalog.pg_trigger t
                       WHERE t.tgrelid OPERATOR(pg_catalog.=) members.relid AND NOT t.tgisinternal
                         AND t.tgfoid OPERATOR(pg_catalog.=) ANY (CASE WHEN members.purge_action OPERATOR(pg_catalog.=) 'delete'::pg_catalog.text
                                                                       THEN ARRAY[fence_function, truncate_function]
                                                                       ELSE ARRAY[kept_function] END)) AS statement_triggers,
               (NOT members.root
                AND community_deletion.community_deletion_ddl_guard_row_fenced(members.relid, members.purge_action, members.args, true)) AS clone_fenced,
               EXISTS (SELECT 1 FROM pg_catalog.pg_trigger t
                       WHERE t.tgrelid OPERATOR(pg_catalog.=) members.relid AND t.tgfoid OPERATOR(pg_catalog.=) truncate_function
                         AND t.tgtype OPERATOR(pg_catalog.=) 34 AND t.tgqual IS NULL AND NOT t.tgisinternal
                         AND t.tgenabled OPERATOR(pg_catalog.=) ANY (ARRAY['O', 'A']::pg_catalog."char"[])) AS truncate_fenced
        FROM members
    ), fence_state AS (
        -- Per table with a write fence trigger: is each event covered whole?
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
        SELECT members.display_name
        FROM members
        JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) members.relid AND c.relrowsecurity
        JOIN pg_catalog.pg_roles login ON login.rolcanlogin AND NOT login.rolsuper AND NOT login.rolbypassrls
            AND (pg_catalog.pg_has_role(login.oid, 'community_deletion_executor'::pg_catalog.name, 'MEMBER'::pg_catalog.text)
                 OR pg_catalog.pg_has_role(login.oid, 'community_deletion_operator'::pg_catalog.name, 'MEMBER'::pg_catalog.text))
            AND (c.relforcerowsecurity OR NOT pg_catalog.pg_has_role(login.oid, c.relowner, 'USAGE'::pg_catalog.text))
    )
    SELECT found.subject, found.problem INTO problem
    FROM (
        SELECT registered.display_name AS subject, 'missing'::pg_catalog.text AS problem
        FROM registered WHERE registered.oid IS NULL
        UNION ALL
        -- A table registered by its own key column: the column there, of
        -- the registered kind, nullable for 'nullify'.
        SELECT registered.display_name,
               CASE WHEN registered.key_type IS NULL
                        THEN pg_catalog.format('shape: its tenant key column %I is gone', registered.tenant_key)
                    WHEN community_deletion.community_deletion_ddl_guard_key_kind(registered.key_type) IS DISTINCT FROM registered.key_kind
                        THEN pg_catalog.format('shape: its tenant key column %I is %s, not of the kind it was registered with (%s)',
                                               registered.tenant_key, pg_catalog.format_type(registered.key_type, NULL), registered.key_kind)
                    ELSE pg_catalog.format('shape: its tenant key column %I is NOT NULL, but deletion clears a ''nullify'' table''s key',
                                           registered.tenant_key) END
        FROM registered
        WHERE registered.oid IS NOT NULL AND registered.parents IS NULL
          AND (registered.key_type IS NULL
               OR community_deletion.community_deletion_ddl_guard_key_kind(registered.key_type) IS DISTINCT FROM registered.key_kind
               OR (registered.purge_action OPERATOR(pg_catalog.=) 'nullify'::pg_catalog.text AND registered.key_not_null))
        UNION ALL
        -- A table attached through its parents: its references to them as
        -- it was attached by, and every column of its paths there and
        -- joining its counterpart.
        SELECT registered.display_name,
               'parents_changed: its references to registered tables are not those it was attached by; put them back, or detach it and attach it again with community_deletion.attach_child_table()'
        FROM registered
        WHERE registered.oid IS NOT NULL AND registered.parents IS NOT NULL
          AND community_deletion.community_deletion_ddl_guard_child_paths(registered.oid,
                  coalesce(community_deletion.community_deletion_ddl_guard_first_steps(registered.parents, false), '{}'::pg_catalog.oid[]),
                  community_deletion.community_deletion_ddl_guard_first_steps(registered.parents, true))
              IS DISTINCT FROM pg_catalog.jsonb_build_object('kind', registered.key_kind, 'paths', registered.parents)
        UNION ALL
        SELECT broken.registered, 'parents_changed: ' OPERATOR(pg_catalog.||) broken.detail
        FROM community_deletion.community_deletion_ddl_guard_broken_paths() broken
        UNION ALL
        SELECT member_fences.display_name,
               CASE WHEN member_fences.purge_action OPERATOR(pg_catalog.<>) 'delete'::pg_catalog.text THEN 'unfenced: no kept-row fence'
                    WHEN member_fences.statement_fenced THEN 'unfenced: no TRUNCATE fence'
                    ELSE 'unfenced' END
        FROM member_fences
        WHERE NOT ((member_fences.statement_fenced
                    AND (member_fences.truncate_fenced OR member_fences.purge_action OPERATOR(pg_catalog.<>) 'delete'::pg_catalog.text))
                   OR (NOT member_fences.statement_triggers AND member_fences.clone_fenced))
        UNION ALL
        -- The row fence of a registered partitioned table, when it has one
        -- (a registration older than migration 00026 has none until attach
        -- runs again), is attach's, enabled.
        SELECT member_fences.display_name,
               'unfenced: its row fence community_write_fence_row, which fences its partitions as they are made, is disabled or not the one attach creates; run attach again'
        FROM member_fences
        JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) member_fences.relid AND c.relkind OPERATOR(pg_catalog.=) 'p'::pg_catalog."char"
        WHERE member_fences.root
          AND EXISTS (SELECT 1 FROM pg_catalog.pg_trigger t
                      WHERE t.tgrelid OPERATOR(pg_catalog.=) member_fences.relid AND NOT t.tgisinternal
                        AND (t.tgname OPERATOR(pg_catalog.=) 'community_write_fence_row'::pg_catalog.name
                             OR t.tgfoid OPERATOR(pg_catalog.=) ANY (ARRAY[row_function, kept_row_function])))
          AND NOT community_deletion.community_deletion_ddl_guard_row_fenced(member_fences.relid, member_fences.purge_action, member_fences.args, true)
        UNION ALL
        -- A fence trigger that fires for only some writes, even beside a
        -- whole fence; a fence of the other purge action.
        SELECT members.display_name,
               CASE WHEN t.tgfoid OPERATOR(pg_catalog.=) ANY (CASE WHEN members.purge_action OPERATOR(pg_catalog.=) 'delete'::pg_catalog.text
                                                                  THEN ARRAY[kept_function, kept_row_function]
                                                                  ELSE ARRAY[fence_function, row_function, truncate_function] END)
                        THEN pg_catalog.format('stray_fence: trigger %s on %s is a fence of the other purge action', t.tgname, members.relid::pg_catalog.regclass)
                    ELSE pg_catalog.format('unfenced: fence trigger %s on %s has %s', t.tgname, members.relid::pg_catalog.regclass,
                                           CASE WHEN t.tgqual IS NOT NULL THEN 'a WHEN clause' ELSE 'a column list' END) END
        FROM members
        JOIN pg_catalog.pg_trigger t ON t.tgrelid OPERATOR(pg_catalog.=) members.relid AND NOT t.tgisinternal
        WHERE (t.tgfoid OPERATOR(pg_catalog.=) ANY (ARRAY[fence_function, kept_function, row_function, kept_row_function])
               AND (t.tgqual IS NOT NULL OR pg_catalog.cardinality(t.tgattr::pg_catalog.int2[]) OPERATOR(pg_catalog.>) 0))
           OR t.tgfoid OPERATOR(pg_catalog.=) ANY (CASE WHEN members.purge_action OPERATOR(pg_catalog.=) 'delete'::pg_catalog.text
                                                       THEN ARRAY[kept_function, kept_row_function]
                                                       ELSE ARRAY[fence_function, row_function, truncate_function] END)
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
           OR pg_catalog.md5(pg_catalog.concat_ws(E'\x1f',
                                                  -- The armed constant digests as its dormant body (migration 00035).
                                                  CASE WHEN installed.function_signature OPERATOR(pg_catalog.=) 'community_deletion_fence_armed()'::pg_catalog.text
                                                            AND p.prosrc OPERATOR(pg_catalog.=) ' SELECT true '::pg_catalog.text
                                                       THEN ' SELECT false '::pg_catalog.text
                                                       -- The write fence specialized digests as installed (migration 00040).
                                                       WHEN installed.function_signature OPERATOR(pg_catalog.=) 'enforce_community_write_fence()'::pg_catalog.text
                                                       THEN community_deletion.community_deletion_ddl_guard_fence_normalized(p.prosrc)
                                                       ELSE p.prosrc END,
                                                  pg_catalog.array_to_string(p.proconfig, E'\x1e'),
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
    IF rewrite_problem IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = '42501', MESSAGE = rewrite_problem;
    END IF;
END
$body$;
REVOKE ALL ON FUNCTION community_deletion.community_deletion_ddl_guard() FROM PUBLIC;
CREATE EVENT TRIGGER community_deletion_ddl_guard ON ddl_command_end
    EXECUTE FUNCTION community_deletion.community_deletion_ddl_guard();
COMMIT;
