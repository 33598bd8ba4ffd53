-- Removes the optional DDL guard (community_deletion_ddl_guard.sql): its
-- event triggers first (so nothing of it runs while it goes), then its
-- functions and tables, in schema community_deletion and, from a guard an
-- earlier release installed in the schema of communities, wherever they
-- are, with the TRUNCATE fences that release added. It leaves what the
-- migrations installed (attach's community_write_fence_truncate). Run it as
-- a superuser: go run ./cmd/migrate uninstall-ddl-guard
BEGIN;
SET LOCAL search_path = pg_catalog, pg_temp;
DROP EVENT TRIGGER IF EXISTS community_deletion_ddl_guard;
DROP EVENT TRIGGER IF EXISTS community_deletion_ddl_guard_rewrite;
DROP EVENT TRIGGER IF EXISTS community_deletion_ddl_guard_drop;
DROP EVENT TRIGGER IF EXISTS community_deletion_ddl_guard_sql_drop;
DO $uninstall$
DECLARE
    item record;
BEGIN
    -- The TRUNCATE fences an earlier release's guard added.
    FOR item IN
        SELECT t.tgname, t.tgrelid::pg_catalog.regclass AS relid
        FROM pg_catalog.pg_trigger t JOIN pg_catalog.pg_proc p ON p.oid OPERATOR(pg_catalog.=) t.tgfoid
        WHERE p.proname OPERATOR(pg_catalog.=) 'community_deletion_ddl_guard_truncate'
    LOOP
        EXECUTE pg_catalog.format('DROP TRIGGER %I ON %s', item.tgname, item.relid);
    END LOOP;
    -- Only what a superuser created under the guard's names: anything else
    -- of that name is not the guard's to remove.
    FOR item IN
        SELECT p.oid::pg_catalog.regprocedure AS fn
        FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_roles o ON o.oid OPERATOR(pg_catalog.=) p.proowner AND o.rolsuper
        WHERE p.proname OPERATOR(pg_catalog.~) '^community_deletion_ddl_guard($|_)'
    LOOP
        EXECUTE pg_catalog.format('DROP FUNCTION %s', item.fn);
    END LOOP;
    FOR item IN
        SELECT c.oid::pg_catalog.regclass AS relid
        FROM pg_catalog.pg_class c JOIN pg_catalog.pg_roles o ON o.oid OPERATOR(pg_catalog.=) c.relowner AND o.rolsuper
        WHERE c.relkind OPERATOR(pg_catalog.=) 'r'
          AND c.relname OPERATOR(pg_catalog.=) ANY (ARRAY['community_deletion_ddl_guard_state', 'community_deletion_ddl_guard_rewrites',
                                                          'community_deletion_ddl_guard_runs']::pg_catalog.name[])
    LOOP
        EXECUTE pg_catalog.format('DROP TABLE %s', item.relid);
    END LOOP;
END
$uninstall$;
COMMIT;
