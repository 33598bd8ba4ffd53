-- The optional DDL guard: an event trigger that makes owner-level tampering
-- with the deletion schema impossible, not only visible. A table owner can
-- always ALTER its own objects; an event trigger sees every DDL command of
-- every role, so a superuser installs it once, after the migrations:
--
--     go run ./cmd/migrate install-ddl-guard   (or: psql -f this file, as a superuser)
--
-- At the end of every DDL command, outside a migration run of this project
-- (which holds the schema-destruction lock exclusively for its session), it
-- refuses (SQLSTATE 42501) a command that leaves anything the drift report
-- flags about what is registered or installed:
--   * a function the migrations installed changed, dropped, re-owned or
--     re-configured (its digest differs from the one the migrations recorded);
--   * a guard trigger of a control table dropped, disabled or replaced;
--   * a registered 'delete' table, or one of its partitions, with a fence
--     trigger disabled or dropped;
--   * a registered table dropped, renamed, or reshaped (community_id gone,
--     retyped or of the wrong nullability).
-- A new partition of a registered 'delete' table (CREATE TABLE ... PARTITION
-- OF, ALTER TABLE ... ATTACH PARTITION) is fenced and granted at once, as
-- attach_community_write_fence() would; one that holds rows of a community
-- that is not active is refused. A command that only creates fence triggers
-- is never refused (attach builds a fence one trigger at a time). Remove it
-- with `migrate uninstall-ddl-guard`.
--
-- It is installed in the schema of communities (found through the
-- installing session's search_path), with that schema in its fixed
-- search_path. It refuses every DDL command (failing closed) once the
-- deletion schema's functions are gone: uninstall it before migrating down
-- past version 11.

DO $install$
DECLARE
    home text := (SELECT n.nspname FROM pg_catalog.pg_class c
                  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                  WHERE c.oid = 'communities'::regclass);
BEGIN
    EXECUTE replace($guard$
CREATE OR REPLACE FUNCTION @home@.community_deletion_ddl_guard() RETURNS event_trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, @home@, pg_temp
    AS $body$
DECLARE
    member record;
    problem record;
    foreign_rows boolean;
BEGIN
    -- A migration run of this project holds the schema-destruction lock
    -- exclusively at session level: it may change everything.
    IF EXISTS (
        SELECT 1 FROM pg_locks l
        WHERE l.locktype = 'advisory' AND l.pid = pg_backend_pid() AND l.granted
          AND l.mode = 'ExclusiveLock' AND l.objsubid = 1
          AND l.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())
          AND l.classid = ((7161976178216365409::bigint >> 32) & 4294967295)::oid
          AND l.objid = (7161976178216365409::bigint & 4294967295)::oid) THEN
        RETURN;
    END IF;
    -- Building a fence (attach, or the fencing below) creates its three
    -- triggers one command at a time; such a command only adds protection.
    -- (A DROP command lists nothing here, and is checked.)
    IF EXISTS (SELECT 1 FROM pg_event_trigger_ddl_commands()) AND NOT EXISTS (
        SELECT 1 FROM pg_event_trigger_ddl_commands() cmd
        WHERE NOT (cmd.object_type = 'trigger' AND EXISTS (
            SELECT 1 FROM pg_trigger t
            WHERE t.oid = cmd.objid AND t.tgfoid = 'enforce_community_write_fence()'::regprocedure))) THEN
        RETURN;
    END IF;

    -- New partitions of registered 'delete' tables (no fence trigger at
    -- all): fence and grant them, unless they hold rows of a community that
    -- is not active.
    FOR member IN
        SELECT tree.relid::regclass AS relid, r.table_name
        FROM community_scoped_tables r
        JOIN pg_class parent ON parent.relname = r.table_name AND parent.relkind = 'p'
            AND parent.relnamespace = (SELECT c.relnamespace FROM pg_class c WHERE c.oid = 'communities'::regclass)
        CROSS JOIN LATERAL pg_partition_tree(parent.oid) tree
        WHERE r.purge_action = 'delete' AND tree.relid <> parent.oid
          AND NOT EXISTS (SELECT 1 FROM pg_trigger t
                          WHERE t.tgrelid = tree.relid AND NOT t.tgisinternal
                            AND t.tgfoid = 'enforce_community_write_fence()'::regprocedure)
    LOOP
        EXECUTE format('SELECT EXISTS (SELECT 1 FROM %s m JOIN communities c ON c.id = m.community_id '
                       'WHERE c.deletion_state <> ''active'')', member.relid) INTO foreign_rows;
        IF foreign_rows THEN
            RAISE EXCEPTION USING ERRCODE = '42501',
                MESSAGE = format('DDL refused: %s makes %s a partition of %s while it holds rows of a community that is being deleted',
                                 TG_TAG, member.relid, member.table_name);
        END IF;
        EXECUTE format('CREATE OR REPLACE TRIGGER community_write_fence_insert AFTER INSERT ON %s '
                       'REFERENCING NEW TABLE AS community_fence_new '
                       'FOR EACH STATEMENT EXECUTE FUNCTION enforce_community_write_fence()', member.relid);
        EXECUTE format('CREATE OR REPLACE TRIGGER community_write_fence_update AFTER UPDATE ON %s '
                       'REFERENCING OLD TABLE AS community_fence_old NEW TABLE AS community_fence_new '
                       'FOR EACH STATEMENT EXECUTE FUNCTION enforce_community_write_fence()', member.relid);
        EXECUTE format('CREATE OR REPLACE TRIGGER community_write_fence_delete AFTER DELETE ON %s '
                       'REFERENCING OLD TABLE AS community_fence_old '
                       'FOR EACH STATEMENT EXECUTE FUNCTION enforce_community_write_fence()', member.relid);
        EXECUTE format('GRANT SELECT, UPDATE, DELETE ON %s TO community_deletion_executor', member.relid);
        EXECUTE format('GRANT SELECT (community_id) ON %s TO community_deletion_operator', member.relid);
    END LOOP;

    -- Everything else the drift report flags about registered tables, guard
    -- triggers and installed functions is refused. Unregistered tables are
    -- not (a service creates a tenant table, then attaches it), nor a fence
    -- on a table not yet registered (attach fences before it registers).
    SELECT d.table_name, d.problem INTO problem
    FROM community_deletion_catalog_drift() d
    WHERE d.problem NOT IN ('unregistered', 'stray_fence')
    ORDER BY d.table_name, d.problem
    LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = format('DDL refused: %s leaves %s %s (see community_deletion_catalog_drift()); change the deletion schema only through its migrations',
                             TG_TAG, problem.table_name, problem.problem);
    END IF;
END
$body$
$guard$, '@home@', quote_ident(home));
    EXECUTE format('REVOKE ALL ON FUNCTION %I.community_deletion_ddl_guard() FROM PUBLIC', home);
    DROP EVENT TRIGGER IF EXISTS community_deletion_ddl_guard;
    EXECUTE format('CREATE EVENT TRIGGER community_deletion_ddl_guard ON ddl_command_end '
                   'EXECUTE FUNCTION %I.community_deletion_ddl_guard()', home);
END
$install$;
