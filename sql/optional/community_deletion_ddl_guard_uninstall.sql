-- Removes the optional DDL guard (community_deletion_ddl_guard.sql). Run it
-- as a superuser: go run ./cmd/migrate uninstall-ddl-guard
DROP EVENT TRIGGER IF EXISTS community_deletion_ddl_guard;
DO $uninstall$
DECLARE
    guard regprocedure := to_regprocedure('community_deletion_ddl_guard()');
BEGIN
    IF guard IS NOT NULL THEN
        EXECUTE format('DROP FUNCTION %s', guard);
    END IF;
END
$uninstall$;
