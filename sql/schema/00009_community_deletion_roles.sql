-- The deployment roles. Three NOLOGIN group roles separate who serves, who
-- operates and who executes deletions; the role that runs these migrations
-- owns every object. Roles are cluster-wide: this migration creates the ones
-- that are missing (the migrating role needs CREATEROLE for that, or a DBA
-- creates them first) and records which it created, so that its Down drops
-- only those, and only when no other database still uses them.

-- +goose Up
CREATE TABLE community_deletion_created_roles (
    role_name name PRIMARY KEY,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- +goose StatementBegin
DO $roles$
DECLARE
    missing text[];
    wanted text;
BEGIN
    SELECT array_agg(w.role_name ORDER BY w.role_name) INTO missing
    FROM unnest(ARRAY['community_deletion_executor', 'community_deletion_operator',
                      'community_deletion_serving']) AS w (role_name)
    WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.rolname = w.role_name);
    IF missing IS NULL THEN
        RETURN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r
                   WHERE r.rolname = current_user AND (r.rolcreaterole OR r.rolsuper)) THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = format('community deletion roles are missing and role %s may not create roles; have a DBA run first: %s',
                             current_user,
                             (SELECT string_agg(format('CREATE ROLE %I NOLOGIN;', m), ' ') FROM unnest(missing) m));
    END IF;
    FOREACH wanted IN ARRAY missing LOOP
        BEGIN
            EXECUTE format('CREATE ROLE %I NOLOGIN', wanted);
            INSERT INTO community_deletion_created_roles (role_name) VALUES (wanted);
        EXCEPTION WHEN duplicate_object OR unique_violation THEN
            NULL; -- the migration of another database created it meanwhile
        END;
    END LOOP;
END
$roles$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DO $roles$
DECLARE
    created name;
BEGIN
    FOR created IN SELECT c.role_name FROM community_deletion_created_roles c ORDER BY c.role_name LOOP
        BEGIN
            EXECUTE format('DROP ROLE IF EXISTS %I', created);
        EXCEPTION WHEN dependent_objects_still_exist THEN
            RAISE NOTICE 'role % is still used by another database; it stays', created;
        END;
    END LOOP;
END
$roles$;
-- +goose StatementEnd
DROP TABLE community_deletion_created_roles;
