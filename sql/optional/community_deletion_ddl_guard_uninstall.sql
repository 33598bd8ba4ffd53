-- Removes the optional DDL guard (community_deletion_ddl_guard.sql): the
-- event trigger, its function, the TRUNCATE fences it added with their
-- function, its table_rewrite trigger, and its records. Run it as a
-- superuser: go run ./cmd/migrate uninstall-ddl-guard
DROP EVENT TRIGGER IF EXISTS community_deletion_ddl_guard;
DROP EVENT TRIGGER IF EXISTS community_deletion_ddl_guard_rewrite;
DO $uninstall$
DECLARE
    guard regprocedure := pg_catalog.to_regprocedure('community_deletion_ddl_guard()');
    truncate_fence regprocedure := pg_catalog.to_regprocedure('community_deletion_ddl_guard_truncate()');
    control_digest regprocedure := pg_catalog.to_regprocedure('community_deletion_ddl_guard_control_digest(oid[])');
    control_tables regprocedure := pg_catalog.to_regprocedure('community_deletion_ddl_guard_control_tables()');
    state regclass := pg_catalog.to_regclass('community_deletion_ddl_guard_state');
    rewrite regprocedure := pg_catalog.to_regprocedure('community_deletion_ddl_guard_rewrite()');
    rows_digest regprocedure := pg_catalog.to_regprocedure('community_deletion_ddl_guard_rows_digest(regclass)');
    rewrites regclass := pg_catalog.to_regclass('community_deletion_ddl_guard_rewrites');
    fenced record;
BEGIN
    IF truncate_fence IS NOT NULL THEN
        FOR fenced IN
            SELECT t.tgname, t.tgrelid::pg_catalog.regclass AS relid FROM pg_catalog.pg_trigger t
            WHERE t.tgfoid OPERATOR(pg_catalog.=) truncate_fence::pg_catalog.oid
        LOOP
            EXECUTE pg_catalog.format('DROP TRIGGER %I ON %s', fenced.tgname, fenced.relid);
        END LOOP;
        EXECUTE pg_catalog.format('DROP FUNCTION %s', truncate_fence);
    END IF;
    IF guard IS NOT NULL THEN
        EXECUTE pg_catalog.format('DROP FUNCTION %s', guard);
    END IF;
    IF control_digest IS NOT NULL THEN
        EXECUTE pg_catalog.format('DROP FUNCTION %s', control_digest);
    END IF;
    IF control_tables IS NOT NULL THEN
        EXECUTE pg_catalog.format('DROP FUNCTION %s', control_tables);
    END IF;
    IF state IS NOT NULL THEN
        EXECUTE pg_catalog.format('DROP TABLE %s', state);
    END IF;
    IF rewrite IS NOT NULL THEN
        EXECUTE pg_catalog.format('DROP FUNCTION %s', rewrite);
    END IF;
    IF rows_digest IS NOT NULL THEN
        EXECUTE pg_catalog.format('DROP FUNCTION %s', rows_digest);
    END IF;
    IF rewrites IS NOT NULL THEN
        EXECUTE pg_catalog.format('DROP TABLE %s', rewrites);
    END IF;
END
$uninstall$;
