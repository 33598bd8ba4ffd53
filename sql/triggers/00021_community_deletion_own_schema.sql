-- A schema of its own (issue 16). Until now every object of this project
-- lived in the schema the migrations ran in, which services usually share:
-- a role that may CREATE there could plant a function or operator that a
-- guard, a client query or the DDL guard resolved by name. This moves every
-- object into schema community_deletion, which only the migrating role owns
-- and creates in (PUBLIC has USAGE only), so that every function's fixed
-- search_path (pg_catalog, community_deletion, pg_temp) names no schema
-- another role can write.
--
-- * Names do not change; their schema does. Services name
--   community_deletion.communities in foreign keys and call
--   community_deletion.attach_community_write_fence(). Existing foreign keys,
--   triggers and grants follow the objects (they refer by OID).
-- * Tenant tables stay where the service keeps them: any schema of the
--   service (community_deletion_tenant_schema()). The registry records each
--   table's schema (community_scoped_tables.table_schema); two registered
--   tables may not share a name.
-- * The write fence's hot path keeps no SET clause and now names
--   community_deletion.x wherever it named the old schema.
-- * attach also puts a BEFORE TRUNCATE trigger on each 'delete' table
--   (enforce_community_truncate_fence()), refusing TRUNCATE while any
--   community is quiescing or fenced, without a superuser. This Up adds it
--   to the registered tables the migrating role may alter; the drift report
--   names the others ('unfenced: no TRUNCATE fence') until their owner runs
--   attach again.
-- * The drift report names a role other than the schema's owner that holds
--   CREATE on community_deletion ('schema_create_granted').
-- * The version table of the migration job stays where the job runs.
--
-- It refuses to run while the DDL guard of an earlier release is installed
-- (that guard names the old schema and would refuse every later DDL): run
-- `migrate uninstall-ddl-guard`, migrate, then `migrate install-ddl-guard`.
-- It refuses a schema community_deletion that already exists: only this
-- migration creates it, so that no other role owns or creates in it.
--
-- Down moves everything back to the schema it came from (recorded in
-- community_deletion_install), restores the functions as they were and drops
-- the TRUNCATE fences (refusing while a registered table lives in another
-- schema than that one).

-- +goose Up
-- +goose StatementBegin
DO $refuse$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_event_trigger e
               WHERE e.evtname OPERATOR(pg_catalog.~~) 'community\_deletion\_ddl\_guard%') THEN
        RAISE EXCEPTION USING ERRCODE = '55000',
            MESSAGE = 'migration 00021 refused: the DDL guard of an earlier release is installed and would refuse every DDL once the objects move; run `migrate uninstall-ddl-guard`, migrate, then `migrate install-ddl-guard`';
    END IF;
    IF pg_catalog.to_regnamespace('community_deletion') IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = '42P06',
            MESSAGE = pg_catalog.format('migration 00021 refused: schema community_deletion already exists (owner %s); only this migration creates it, so that no other role owns it: drop or rename it, then migrate',
                                        (SELECT n.nspowner::pg_catalog.regrole FROM pg_catalog.pg_namespace n WHERE n.nspname OPERATOR(pg_catalog.=) 'community_deletion'));
    END IF;
END
$refuse$;
-- +goose StatementEnd

CREATE SCHEMA community_deletion;
REVOKE ALL ON SCHEMA community_deletion FROM PUBLIC;
GRANT USAGE ON SCHEMA community_deletion TO PUBLIC;
COMMENT ON SCHEMA community_deletion IS 'The community deletion lifecycle: only its owner, the migrating role, creates objects here; every function resolves names through pg_catalog and this schema only.';

CREATE TABLE community_deletion.community_deletion_install (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    home_schema name NOT NULL,
    moved_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE community_deletion.community_deletion_install IS 'The schema this project''s objects lived in before migration 00021 moved them here; its Down moves them back.';
REVOKE ALL ON community_deletion.community_deletion_install FROM PUBLIC;
INSERT INTO community_deletion.community_deletion_install (home_schema)
SELECT n.nspname FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE c.oid = 'communities'::pg_catalog.regclass;

-- +goose StatementBegin
DO $move$
DECLARE
    home text := (SELECT i.home_schema FROM community_deletion.community_deletion_install i);
    functions text[];
    item text;
BEGIN
    EXECUTE pg_catalog.format('SELECT %I.community_deletion_installed_functions()', home) INTO functions;
    FOREACH item IN ARRAY ARRAY['communities',
                                  'community_deletion_approvals',
                                  'community_deletion_checkpoints',
                                  'community_deletion_control_digests',
                                  'community_deletion_created_roles',
                                  'community_deletion_executor_heartbeats',
                                  'community_deletion_function_digests',
                                  'community_deletion_manifest_keys',
                                  'community_deletion_protection_events',
                                  'community_deletion_purge_progress',
                                  'community_deletion_receipts',
                                  'community_deletion_requests',
                                  'community_deletion_settings',
                                  'community_deletion_step_authorizations',
                                  'community_deletion_storage_layout',
                                  'community_scoped_tables',
                                  'community_serving_write_leases',
                                  'storage_taxonomy_sweeps'] LOOP
        EXECUTE pg_catalog.format('ALTER TABLE %I.%I SET SCHEMA community_deletion', home, item);
    END LOOP;
    EXECUTE pg_catalog.format('ALTER DOMAIN %I.community_deletion_stage SET SCHEMA community_deletion', home);
    FOREACH item IN ARRAY functions LOOP
        EXECUTE pg_catalog.format('ALTER FUNCTION %I.%s SET SCHEMA community_deletion', home, item);
    END LOOP;
    EXECUTE pg_catalog.format('ALTER TABLE community_deletion.community_scoped_tables ADD COLUMN table_schema name NOT NULL DEFAULT %L', home);
    ALTER TABLE community_deletion.community_scoped_tables ALTER COLUMN table_schema DROP DEFAULT;
END
$move$;
-- +goose StatementEnd
COMMENT ON COLUMN community_deletion.community_scoped_tables.table_schema IS 'The schema of the registered table: any schema of the service (community_deletion_tenant_schema()).';

-- +goose StatementBegin
-- Whether a schema may hold tenant tables: any schema of the service, but
-- not this project's own, the system's, or a temporary one.
CREATE FUNCTION community_deletion.community_deletion_tenant_schema(namespace oid) RETURNS boolean
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
        SELECT n.nspname NOT IN ('community_deletion', 'pg_catalog', 'information_schema')
               AND n.nspname !~ '^pg_(toast|temp_|toast_temp_)'
        FROM pg_namespace n WHERE n.oid = namespace
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The TRUNCATE fence attach puts on every registered 'delete' table: TRUNCATE
-- fires no row triggers, so the write fence never sees it; this refuses it
-- (55000) while any community is quiescing or fenced, whoever asks.
CREATE FUNCTION community_deletion.enforce_community_truncate_fence() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM communities c WHERE c.deletion_state IN ('quiescing', 'fenced')) THEN
        RAISE EXCEPTION USING ERRCODE = '55000',
            MESSAGE = format('TRUNCATE of %I.%I refused: a community is being deleted, and TRUNCATE would take its rows past the deletion; delete rows by community, or truncate once no deletion is under way',
                             TG_TABLE_SCHEMA, TG_TABLE_NAME),
            CONSTRAINT = 'community_write_fence';
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION community_deletion.community_deletion_unregister_table(table_schema name, table_name name) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
DECLARE
    owner oid;
BEGIN
    SELECT c.relowner INTO owner FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = community_deletion_unregister_table.table_schema
      AND c.relname = community_deletion_unregister_table.table_name
      AND c.relkind IN ('r', 'p');
    IF owner IS NULL THEN
        -- The table is gone: only the owner of the deletion schema may forget it.
        SELECT n.nspowner INTO owner FROM pg_namespace n WHERE n.nspname = 'community_deletion';
    END IF;
    IF NOT pg_has_role(session_user, owner, 'MEMBER') THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = format('unregistration of %I.%I refused: role %s does not own it', table_schema, table_name, session_user);
    END IF;
    DELETE FROM community_scoped_tables r
    WHERE r.table_schema = community_deletion_unregister_table.table_schema
      AND r.table_name = community_deletion_unregister_table.table_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = format('%I.%I is not a registered tenant table', table_schema, table_name);
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.enforce_community_write_fence() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    first_community pg_catalog.uuid;
    locked pg_catalog.bool;
    mixed pg_catalog.bool;
    state pg_catalog.text;
    isolation pg_catalog.text;
    touched pg_catalog.uuid[];
    community pg_catalog.uuid;
BEGIN
    -- Path 1: one community, its lock free, active, READ COMMITTED.
    IF TG_OP OPERATOR(pg_catalog.=) 'INSERT' THEN
        SELECT n.community_id,
               pg_catalog.pg_try_advisory_xact_lock_shared(community_deletion.community_deletion_lock_key(n.community_id)),
               EXISTS (SELECT 1 FROM community_fence_new other
                       WHERE other.community_id IS NULL
                          OR other.community_id OPERATOR(pg_catalog.<>) n.community_id)
        INTO first_community, locked, mixed
        FROM community_fence_new n;
    ELSIF TG_OP OPERATOR(pg_catalog.=) 'UPDATE' THEN
        SELECT o.community_id,
               pg_catalog.pg_try_advisory_xact_lock_shared(community_deletion.community_deletion_lock_key(o.community_id)),
               EXISTS (SELECT 1 FROM community_fence_old other
                       WHERE other.community_id IS NULL
                          OR other.community_id OPERATOR(pg_catalog.<>) o.community_id)
               OR EXISTS (SELECT 1 FROM community_fence_new other
                          WHERE other.community_id IS NULL
                             OR other.community_id OPERATOR(pg_catalog.<>) o.community_id)
        INTO first_community, locked, mixed
        FROM community_fence_old o;
    ELSE
        SELECT o.community_id,
               pg_catalog.pg_try_advisory_xact_lock_shared(community_deletion.community_deletion_lock_key(o.community_id)),
               EXISTS (SELECT 1 FROM community_fence_old other
                       WHERE other.community_id IS NULL
                          OR other.community_id OPERATOR(pg_catalog.<>) o.community_id)
        INTO first_community, locked, mixed
        FROM community_fence_old o;
    END IF;
    IF FOUND AND locked AND NOT mixed THEN
        SELECT c.deletion_state, pg_catalog.current_setting('transaction_isolation')
        INTO state, isolation
        FROM community_deletion.communities c WHERE c.id OPERATOR(pg_catalog.=) first_community;
        IF state OPERATOR(pg_catalog.=) 'active' AND isolation OPERATOR(pg_catalog.=) 'read committed' THEN
            RETURN NULL;
        END IF;
    END IF;

    -- Path 2: refuse snapshot isolation, wait for every lock, then confirm.
    IF pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.<>) 'read committed' THEN
        RAISE EXCEPTION USING
            ERRCODE = '25000',
            MESSAGE = pg_catalog.format('community write to %I refused: isolation level %s pins a snapshot that cannot see the deletion fence',
                                        TG_TABLE_NAME, pg_catalog.current_setting('transaction_isolation')),
            HINT = 'Write community data in READ COMMITTED transactions.',
            CONSTRAINT = 'community_write_fence';
    END IF;
    IF TG_OP OPERATOR(pg_catalog.=) 'INSERT' THEN
        SELECT pg_catalog.array_agg(DISTINCT community_id) INTO touched FROM community_fence_new;
    ELSIF TG_OP OPERATOR(pg_catalog.=) 'UPDATE' THEN
        SELECT pg_catalog.array_agg(rows.community_id) INTO touched
        FROM (SELECT community_id FROM community_fence_old UNION SELECT community_id FROM community_fence_new) rows;
    ELSE
        SELECT pg_catalog.array_agg(DISTINCT community_id) INTO touched FROM community_fence_old;
    END IF;
    IF touched IS NULL THEN
        RETURN NULL; -- the statement wrote no rows
    END IF;
    PERFORM pg_catalog.pg_advisory_xact_lock_shared(community_deletion.community_deletion_lock_key(t.community_id))
    FROM pg_catalog.unnest(touched) t(community_id);
    IF NOT EXISTS (
        SELECT 1 FROM pg_catalog.unnest(touched) t(community_id)
        LEFT JOIN community_deletion.communities c ON c.id OPERATOR(pg_catalog.=) t.community_id
        WHERE c.deletion_state IS NULL OR c.deletion_state OPERATOR(pg_catalog.<>) 'active') THEN
        RETURN NULL;
    END IF;

    -- Path 3: ask about each community and name the first refused.
    FOREACH community IN ARRAY touched LOOP
        IF community IS NULL THEN
            RAISE EXCEPTION USING
                ERRCODE = '55000',
                MESSAGE = pg_catalog.format('community write to %I refused: a row has no community_id', TG_TABLE_NAME),
                CONSTRAINT = 'community_write_fence';
        END IF;
        IF community_deletion.community_write_allowed(community) IS NOT TRUE THEN
            SELECT c.deletion_state INTO state FROM community_deletion.communities c WHERE c.id OPERATOR(pg_catalog.=) community;
            RAISE EXCEPTION USING
                ERRCODE = '55000',
                MESSAGE = pg_catalog.format('community write to %I refused: community %s is %s',
                                            TG_TABLE_NAME, community, coalesce(state, 'missing')),
                CONSTRAINT = 'community_write_fence';
        END IF;
    END LOOP;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.attach_community_write_fence(target regclass, purge_action text DEFAULT 'delete'::text) RETURNS void
    LANGUAGE plpgsql
    SET search_path = pg_catalog, community_deletion, pg_temp
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
            MESSAGE = format('attach of %s refused: it is a temporary table; attach the service''s table by its schema-qualified name', target);
    END IF;
    IF NOT community_deletion_tenant_schema(rel.relnamespace) THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('%s is not in a schema that holds tenant tables: attach a table of the service''s own schema', target);
    END IF;
    IF rel.relkind NOT IN ('r', 'p') THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = format('%s is not a table', target);
    END IF;
    IF rel.relispartition THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('%s is a partition: attach its partitioned parent', target);
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
                           'FOR EACH STATEMENT EXECUTE FUNCTION community_deletion.enforce_community_write_fence()', member);
            EXECUTE format('CREATE OR REPLACE TRIGGER community_write_fence_update AFTER UPDATE ON %s '
                           'REFERENCING OLD TABLE AS community_fence_old NEW TABLE AS community_fence_new '
                           'FOR EACH STATEMENT EXECUTE FUNCTION community_deletion.enforce_community_write_fence()', member);
            EXECUTE format('CREATE OR REPLACE TRIGGER community_write_fence_delete AFTER DELETE ON %s '
                           'REFERENCING OLD TABLE AS community_fence_old '
                           'FOR EACH STATEMENT EXECUTE FUNCTION community_deletion.enforce_community_write_fence()', member);
            EXECUTE format('CREATE OR REPLACE TRIGGER community_write_fence_truncate BEFORE TRUNCATE ON %s '
                           'FOR EACH STATEMENT EXECUTE FUNCTION community_deletion.enforce_community_truncate_fence()', member);
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
CREATE OR REPLACE FUNCTION community_deletion.detach_community_write_fence(target regclass) RETURNS void
    LANGUAGE plpgsql
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
DECLARE
    rel record;
    member regclass;
BEGIN
    SELECT c.relname, c.relowner, c.relpersistence, n.nspname INTO rel
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = target;
    IF rel.relpersistence = 't' THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = format('detach of %s refused: it is a temporary table; detach the service''s table by its schema-qualified name', target);
    END IF;
    IF NOT pg_has_role(current_user, rel.relowner, 'USAGE') THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = format('detach of %s refused: only its owner (%s) may unregister it', target, pg_get_userbyid(rel.relowner));
    END IF;
    -- Whether it is registered, community_deletion_unregister_table() says
    -- (22023), so the owner needs no privilege on the registry.
    PERFORM community_deletion_unregister_table(rel.nspname, rel.relname);
    FOR member IN SELECT tree.relid FROM pg_partition_tree(target) tree UNION SELECT target LOOP
        EXECUTE format('DROP TRIGGER IF EXISTS community_write_fence_insert ON %s', member);
        EXECUTE format('DROP TRIGGER IF EXISTS community_write_fence_update ON %s', member);
        EXECUTE format('DROP TRIGGER IF EXISTS community_write_fence_delete ON %s', member);
        EXECUTE format('DROP TRIGGER IF EXISTS community_write_fence_truncate ON %s', member);
        EXECUTE format('REVOKE SELECT, UPDATE, DELETE ON %s FROM community_deletion_executor', member);
        EXECUTE format('REVOKE SELECT (community_id), UPDATE (community_id) ON %s FROM community_deletion_executor', member);
        EXECUTE format('REVOKE SELECT (community_id) ON %s FROM community_deletion_operator', member);
    END LOOP;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_register_table(target regclass, purge_action text) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
DECLARE
    rel record;
    registered record;
BEGIN
    SELECT c.relname, c.relowner, c.relnamespace, c.relpersistence, n.nspname INTO rel
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = target;
    IF rel.relpersistence = 't' OR rel.relnamespace = pg_my_temp_schema() OR pg_is_other_temp_schema(rel.relnamespace) THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = format('registration of %s refused: it is a temporary table; attach the service''s table by its schema-qualified name', target);
    END IF;
    IF NOT community_deletion_tenant_schema(rel.relnamespace) THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = format('registration of %s refused: schema %I does not hold tenant tables; attach a table of the service''s own schema',
                             target, rel.nspname);
    END IF;
    IF rel.relname IS NULL OR NOT pg_has_role(session_user, rel.relowner, 'MEMBER') THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = format('registration of %s refused: role %s does not own it', target, session_user);
    END IF;
    SELECT r.table_schema, r.purge_action INTO registered
    FROM community_scoped_tables r WHERE r.table_name = rel.relname;
    IF registered.table_schema IS NOT NULL AND registered.table_schema <> rel.nspname THEN
        RAISE EXCEPTION USING ERRCODE = '42710',
            MESSAGE = format('registration of %s refused: a table named %I is already registered from schema %I; registered tables need distinct names, so rename one',
                             target, rel.relname, registered.table_schema);
    END IF;
    IF registered.purge_action IS NOT NULL AND registered.purge_action <> purge_action THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('%s is registered with purge_action %L; it cannot change to %L',
                             target, registered.purge_action, purge_action);
    END IF;
    INSERT INTO community_scoped_tables (table_schema, table_name, purge_action)
    VALUES (rel.nspname, rel.relname, purge_action)
    ON CONFLICT (table_name) DO NOTHING;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.enforce_community_scoped_table_guard() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
DECLARE
    stack text;
    target oid;
    column_type regtype;
    column_not_null boolean;
BEGIN
    IF TG_OP = 'UPDATE' THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('registration of %s refused: a registration never changes; detach and attach the table again', OLD.table_name);
    END IF;
    GET DIAGNOSTICS stack = PG_CONTEXT;
    IF stack !~ E'\nPL/pgSQL function community_deletion_(un)?register_table\\((regclass,text|name,name)\\) line [0-9]+ at SQL statement' THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = 'community_scoped_tables refused: tenant tables are registered only by attach_community_write_fence() and unregistered only by detach_community_write_fence()';
    END IF;
    IF TG_OP = 'DELETE' THEN
        IF EXISTS (SELECT 1 FROM community_deletion_requests r
                   WHERE r.stage IN ('approved', 'fenced', 'drained', 'bindings_removed')) THEN
            RAISE EXCEPTION USING ERRCODE = '55000',
                MESSAGE = format('unregistration of %s refused: a deletion is in flight and its approval covers this table', OLD.table_name);
        END IF;
        RETURN OLD;
    END IF;

    SELECT c.oid INTO target FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE c.relname = NEW.table_name AND n.nspname = NEW.table_schema
      AND c.relkind IN ('r', 'p') AND NOT c.relispartition
      AND community_deletion_tenant_schema(c.relnamespace);
    SELECT a.atttypid::regtype, a.attnotnull INTO column_type, column_not_null
    FROM pg_attribute a WHERE a.attrelid = target AND a.attname = 'community_id' AND NOT a.attisdropped;
    IF target IS NULL
       OR column_type IS DISTINCT FROM 'uuid'::regtype
       OR column_not_null IS DISTINCT FROM (NEW.purge_action = 'delete') THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('registration of %s refused: it is not a tenant table with the community_id column purge action %s needs',
                             NEW.table_name, NEW.purge_action);
    END IF;
    IF NEW.purge_action = 'delete' AND EXISTS (
        SELECT 1
        FROM (SELECT tree.relid FROM pg_partition_tree(target) tree UNION SELECT target) member (relid)
        WHERE NOT community_deletion_fenced(member.relid)) THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('registration of %s refused: it or a partition lacks the complete, enabled write fence', NEW.table_name);
    END IF;
    NEW.registered_at := now();
    NEW.registered_by := session_user;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.enforce_community_tombstone_proof() RETURNS trigger
    LANGUAGE plpgsql
    SET row_security TO 'off'
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $_$
DECLARE
    registered record;
    remains boolean;
BEGIN
    IF TG_OP <> 'UPDATE' OR NEW.deletion_state IS DISTINCT FROM 'tombstone'
       OR OLD.deletion_state IS NOT DISTINCT FROM 'tombstone' THEN
        RETURN NEW;
    END IF;
    FOR registered IN
        SELECT r.table_name, r.purge_action, n.nspname, c.relname
        FROM community_scoped_tables r
        JOIN pg_namespace n ON n.nspname = r.table_schema
        JOIN pg_class c ON c.relname = r.table_name AND c.relnamespace = n.oid
        WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition
        ORDER BY r.purge_action, r.table_name
    LOOP
        EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I.%I t WHERE t.community_id OPERATOR(pg_catalog.=) $1)',
                       registered.nspname, registered.relname)
            INTO remains USING OLD.id;
        IF remains THEN
            RAISE EXCEPTION USING ERRCODE = '55000',
                MESSAGE = format('tombstone of community %s refused: registered %s table %s still holds its rows; purge them first',
                                 OLD.id, registered.purge_action, registered.table_name);
        END IF;
    END LOOP;
    RETURN NEW;
END
$_$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_purge_pressure() RETURNS TABLE(replicas integer, replay_lag interval, replay_bytes bigint, wraparound_tables text[])
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
        SELECT (SELECT count(*)::integer FROM pg_stat_replication),
               (SELECT max(r.replay_lag) FROM pg_stat_replication r),
               (SELECT max(pg_wal_lsn_diff(pg_current_wal_lsn(), r.replay_lsn))::bigint FROM pg_stat_replication r),
               ARRAY(
                   SELECT DISTINCT registered.table_name
                   FROM pg_stat_progress_vacuum v
                   JOIN pg_stat_activity a ON a.pid = v.pid
                   JOIN pg_class c ON c.oid = coalesce(pg_partition_root(v.relid), v.relid)
                   JOIN community_scoped_tables registered ON registered.table_name = c.relname
                       AND registered.table_schema = (SELECT n.nspname FROM pg_namespace n WHERE n.oid = c.relnamespace)
                   WHERE v.datname = current_database()
                     AND a.backend_type = 'autovacuum worker'
                     AND a.query LIKE '%(to prevent wraparound)%'
                   ORDER BY 1)
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_receipt_chain_head() RETURNS TABLE(sequence bigint, body_sha256 text, schema_version bigint)
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
DECLARE
    versions regclass;
    version bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(8242555388204445233);
    -- The migration job's version table stays in the schema the migrations
    -- run in (recorded by migration 00021); it counts only when the owner of
    -- this schema owns it, so no other role can forge the schema version.
    SELECT c.oid INTO versions
    FROM community_deletion_install i
    JOIN pg_namespace n ON n.nspname = i.home_schema
    JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = 'community_deletion_schema_migrations'
    WHERE c.relowner = (SELECT d.nspowner FROM pg_namespace d WHERE d.nspname = 'community_deletion');
    IF versions IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '55000',
            MESSAGE = 'receipt chain head refused: community_deletion_schema_migrations is missing (or not owned by the owner of schema community_deletion), so the schema version is unknown; migrate with the migration job';
    END IF;
    EXECUTE format('SELECT max(m.version_id) FROM %s m WHERE m.is_applied', versions) INTO version;
    RETURN QUERY
    SELECT coalesce(h.sequence, 0), h.body_sha256, version
    FROM (SELECT 1) one
    LEFT JOIN LATERAL (SELECT r.sequence, r.body_sha256 FROM community_deletion_receipts r
                       ORDER BY r.sequence DESC LIMIT 1) h ON true;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_catalog_drift() RETURNS TABLE(table_name text, problem text)
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
    WITH RECURSIVE home AS (
        SELECT c.relnamespace AS namespace, n.nspname AS nspname
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE c.oid = 'communities'::regclass
    ), registered AS (
        -- oid is NULL when the table is gone or has no community_id uuid column.
        SELECT r.table_name, r.purge_action, t.oid, t.attnotnull
        FROM community_scoped_tables r
        LEFT JOIN LATERAL (
            SELECT c.oid, a.attnotnull
            FROM pg_class c
            JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = r.table_schema
            JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'community_id' AND NOT a.attisdropped
                AND a.atttypid = 'uuid'::regtype
            WHERE c.relname = r.table_name
              AND c.relkind IN ('r', 'p') AND NOT c.relispartition) t ON true
    ), tenant_chain AS (
        -- communities, every registered 'delete' table, and every table down
        -- a chain of foreign keys from them; the chain does not run on
        -- through a control table or a registered 'nullify' table (whose
        -- rows outlive a deletion).
        SELECT 'communities'::regclass::oid AS oid
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
        -- looks like tenant data: a community_id column of any type, or a
        -- foreign key to communities or (down a chain of foreign keys) to a
        -- registered 'delete' table, under any column name.
        SELECT c.oid, c.relnamespace = home.namespace AS at_home, c.relname::text AS relname,
               format('%I.%I', n.nspname, c.relname) AS display_name
        FROM pg_class c
        JOIN pg_namespace n ON n.oid = c.relnamespace
        CROSS JOIN home
        WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition
          AND n.nspname NOT IN ('pg_catalog', 'information_schema')
          AND n.nspname !~ '^pg_(toast|temp_|toast_temp_)'
          AND c.relpersistence <> 't'
          AND c.oid <> 'communities'::regclass
          AND (EXISTS (SELECT 1 FROM pg_attribute a
                       WHERE a.attrelid = c.oid AND a.attname = 'community_id' AND NOT a.attisdropped)
               OR EXISTS (SELECT 1 FROM pg_constraint f JOIN tenant_chain ON tenant_chain.oid = f.confrelid
                          WHERE f.conrelid = c.oid AND f.contype = 'f'))
    ), fence_members AS (
        -- A registered 'delete' table and, when it is partitioned, every partition.
        SELECT registered.table_name, registered.oid
        FROM registered
        WHERE registered.purge_action = 'delete' AND registered.oid IS NOT NULL
        UNION
        SELECT registered.table_name, tree.relid
        FROM registered, pg_partition_tree(registered.oid) tree
        WHERE registered.purge_action = 'delete' AND registered.oid IS NOT NULL
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
        WHERE t.tgfoid = 'enforce_community_write_fence()'::regprocedure
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
    SELECT live.display_name, 'unregistered'
    FROM live
    WHERE NOT live.at_home
      AND NOT EXISTS (SELECT 1 FROM registered WHERE registered.oid = live.oid)
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
      AND NOT EXISTS (SELECT 1 FROM fence_defects WHERE fence_defects.table_name = fence_members.table_name)
    UNION ALL
    SELECT fence_defects.table_name, 'unfenced: ' || fence_defects.defects
    FROM fence_defects
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
    WHERE community_deletion_fenced(fence_members.oid)
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

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_installed_functions() RETURNS text[]
    LANGUAGE sql IMMUTABLE
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
        SELECT ARRAY[
            'assert_community_write_allowed(uuid)',
            'attach_community_write_fence(regclass,text)',
            'community_deletion_catalog_drift()',
            'community_deletion_control_digest(text)',
            'community_deletion_control_table(text)',
            'community_deletion_default_grace_period()',
            'community_deletion_fenced(oid)',
            'community_deletion_function_digest(oid)',
            'community_deletion_guard_digest(text,text)',
            'community_deletion_guard_triggers()',
            'community_deletion_health()',
            'community_deletion_installed_functions()',
            'community_deletion_is_member(name)',
            'community_deletion_lock_holders(bigint)',
            'community_deletion_lock_key(uuid)',
            'community_deletion_next_stage(text)',
            'community_deletion_operators_share_role()',
            'community_deletion_protection_state(uuid)',
            'community_deletion_purge_pressure()',
            'community_deletion_receipt_chain_head()',
            'community_deletion_register_table(regclass,text)',
            'community_deletion_require_member(name[],text)',
            'community_deletion_restore_active(uuid,timestamptz)',
            'community_deletion_seal_functions()',
            'community_deletion_stage_order()',
            'community_deletion_stage_runnable(text)',
            'community_deletion_step_authorized(uuid,text)',
            'community_deletion_tenant_schema(oid)',
            'community_deletion_unregister_table(name,name)',
            'community_schema_destruction_lock_key()',
            'community_write_allowed(uuid)',
            'community_write_fence_excluded_table(text)',
            'detach_community_write_fence(regclass)',
            'enforce_community_deletion_approval_guard()',
            'enforce_community_deletion_checkpoint_guard()',
            'enforce_community_deletion_grace_fence()',
            'enforce_community_deletion_grace_period()',
            'enforce_community_deletion_manifest_key_guard()',
            'enforce_community_deletion_protection_guard()',
            'enforce_community_deletion_protection_submit()',
            'enforce_community_deletion_receipt_guard()',
            'enforce_community_deletion_receipt_required()',
            'enforce_community_deletion_request_guard()',
            'enforce_community_deletion_settings_guard()',
            'enforce_community_deletion_storage_layout_guard()',
            'enforce_community_scoped_table_guard()',
            'enforce_community_serving_write_lease_guard()',
            'enforce_community_tombstone()',
            'enforce_community_tombstone_proof()',
            'enforce_community_truncate_fence()',
            'enforce_community_write_fence()',
            'refuse_community_deletion_truncate()'
        ]
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_seal_functions() RETURNS void
    LANGUAGE plpgsql
    SET search_path = pg_catalog, community_deletion, pg_temp
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
                  'community_deletion_register_table(regclass,text)', 'community_deletion_unregister_table(name,name)',
                  'enforce_community_write_fence()', 'enforce_community_truncate_fence()',
                  'community_deletion_control_table(text)', 'community_deletion_tenant_schema(oid)') THEN
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
    -- The control tables' shape and each guard trigger's definition, which
    -- the drift report compares with the live catalog.
    DELETE FROM community_deletion_control_digests;
    INSERT INTO community_deletion_control_digests (kind, subject, digest)
    SELECT 'table', c.relname::text, community_deletion_control_digest(c.relname::text)
    FROM pg_catalog.pg_class c
    WHERE c.relnamespace = (SELECT h.relnamespace FROM pg_catalog.pg_class h WHERE h.oid = 'communities'::regclass)
      AND c.relkind IN ('r', 'p') AND community_deletion_control_table(c.relname::text)
    UNION ALL
    SELECT 'guard', g.table_name || '.' || g.trigger_name, community_deletion_guard_digest(g.table_name, g.trigger_name)
    FROM community_deletion_guard_triggers() g
    WHERE community_deletion_guard_digest(g.table_name, g.trigger_name) IS NOT NULL;
END
$$;
-- +goose StatementEnd

DROP FUNCTION community_deletion.community_deletion_unregister_table(text);

-- +goose StatementBegin
-- The TRUNCATE fence on the registered 'delete' tables (and partitions)
-- the migrating role may alter; the drift report names the others.
DO $truncate$
DECLARE
    member regclass;
BEGIN
    FOR member IN
        SELECT m.relid::pg_catalog.regclass
        FROM community_deletion.community_scoped_tables r
        JOIN pg_catalog.pg_namespace n ON n.nspname OPERATOR(pg_catalog.=) r.table_schema
        JOIN pg_catalog.pg_class c ON c.relnamespace OPERATOR(pg_catalog.=) n.oid AND c.relname OPERATOR(pg_catalog.=) r.table_name
        CROSS JOIN LATERAL (SELECT t.relid FROM pg_catalog.pg_partition_tree(c.oid) t) m
        JOIN pg_catalog.pg_class mc ON mc.oid OPERATOR(pg_catalog.=) m.relid
        WHERE r.purge_action OPERATOR(pg_catalog.=) 'delete' AND mc.relkind IN ('r', 'p')
          AND pg_catalog.pg_has_role(current_user, mc.relowner, 'USAGE')
    LOOP
        EXECUTE pg_catalog.format('CREATE OR REPLACE TRIGGER community_write_fence_truncate BEFORE TRUNCATE ON %s '
                                  'FOR EACH STATEMENT EXECUTE FUNCTION community_deletion.enforce_community_truncate_fence()', member);
    END LOOP;
END
$truncate$;
-- +goose StatementEnd

SELECT community_deletion.community_deletion_seal_functions();

-- +goose Down

-- +goose StatementBegin
DO $refuse$
DECLARE
    home text := (SELECT i.home_schema FROM community_deletion.community_deletion_install i);
    elsewhere text;
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_event_trigger e
               WHERE e.evtname OPERATOR(pg_catalog.~~) 'community\_deletion\_ddl\_guard%') THEN
        RAISE EXCEPTION USING ERRCODE = '55000',
            MESSAGE = 'migration 00021 down refused: the DDL guard is installed in schema community_deletion, which this Down drops; run `migrate uninstall-ddl-guard` first';
    END IF;
    SELECT pg_catalog.format('%I.%I', r.table_schema, r.table_name) INTO elsewhere
    FROM community_deletion.community_scoped_tables r
    WHERE r.table_schema OPERATOR(pg_catalog.<>) home LIMIT 1;
    IF elsewhere IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = '55000',
            MESSAGE = pg_catalog.format('migration 00021 down refused: registered table %s is outside schema %I, where earlier releases register tenant tables; detach it first', elsewhere, home);
    END IF;
END
$refuse$;
-- +goose StatementEnd

-- CASCADE drops the TRUNCATE fences, on whichever tables they are.
DROP FUNCTION community_deletion.enforce_community_truncate_fence() CASCADE;
DROP FUNCTION community_deletion.community_deletion_tenant_schema(oid);
DROP FUNCTION community_deletion.community_deletion_unregister_table(name, name);
ALTER TABLE community_deletion.community_scoped_tables DROP COLUMN table_schema;

-- +goose StatementBegin
DO $move$
DECLARE
    home text := (SELECT i.home_schema FROM community_deletion.community_deletion_install i);
    item text;
BEGIN
    FOR item IN SELECT p.oid::pg_catalog.regprocedure::text FROM pg_catalog.pg_proc p
                WHERE p.pronamespace OPERATOR(pg_catalog.=) 'community_deletion'::pg_catalog.regnamespace LOOP
        EXECUTE pg_catalog.format('ALTER FUNCTION %s SET SCHEMA %I', item, home);
    END LOOP;
    FOREACH item IN ARRAY ARRAY['communities',
                                  'community_deletion_approvals',
                                  'community_deletion_checkpoints',
                                  'community_deletion_control_digests',
                                  'community_deletion_created_roles',
                                  'community_deletion_executor_heartbeats',
                                  'community_deletion_function_digests',
                                  'community_deletion_manifest_keys',
                                  'community_deletion_protection_events',
                                  'community_deletion_purge_progress',
                                  'community_deletion_receipts',
                                  'community_deletion_requests',
                                  'community_deletion_settings',
                                  'community_deletion_step_authorizations',
                                  'community_deletion_storage_layout',
                                  'community_scoped_tables',
                                  'community_serving_write_leases',
                                  'storage_taxonomy_sweeps'] LOOP
        EXECUTE pg_catalog.format('ALTER TABLE community_deletion.%I SET SCHEMA %I', item, home);
    END LOOP;
    EXECUTE pg_catalog.format('ALTER DOMAIN community_deletion.community_deletion_stage SET SCHEMA %I', home);
END
$move$;
-- +goose StatementEnd

DROP TABLE community_deletion.community_deletion_install;
DROP SCHEMA community_deletion;

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion_unregister_table(table_name text) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    AS $$
DECLARE
    owner oid;
BEGIN
    SELECT c.relowner INTO owner FROM pg_class c
    WHERE c.relname = community_deletion_unregister_table.table_name
      AND c.relnamespace = (SELECT home.relnamespace FROM pg_class home WHERE home.oid = 'communities'::regclass)
      AND c.relkind IN ('r', 'p');
    IF owner IS NULL THEN
        SELECT c.relowner INTO owner FROM pg_class c WHERE c.oid = 'communities'::regclass;
    END IF;
    IF NOT pg_has_role(session_user, owner, 'MEMBER') THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = format('unregistration of %s refused: role %s does not own it', table_name, session_user);
    END IF;
    DELETE FROM community_scoped_tables r WHERE r.table_name = community_deletion_unregister_table.table_name;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = format('%s is not a registered tenant table', table_name);
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION attach_community_write_fence(target regclass, purge_action text DEFAULT 'delete'::text) RETURNS void
    LANGUAGE plpgsql
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
CREATE OR REPLACE FUNCTION detach_community_write_fence(target regclass) RETURNS void
    LANGUAGE plpgsql
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
CREATE OR REPLACE FUNCTION community_deletion_register_table(target regclass, purge_action text) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
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
CREATE OR REPLACE FUNCTION enforce_community_scoped_table_guard() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    AS $$
DECLARE
    stack text;
    target oid;
    column_type regtype;
    column_not_null boolean;
BEGIN
    IF TG_OP = 'UPDATE' THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('registration of %s refused: a registration never changes; detach and attach the table again', OLD.table_name);
    END IF;
    GET DIAGNOSTICS stack = PG_CONTEXT;
    IF stack !~ E'\nPL/pgSQL function community_deletion_(un)?register_table\\((regclass,text|text)\\) line [0-9]+ at SQL statement' THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = 'community_scoped_tables refused: tenant tables are registered only by attach_community_write_fence() and unregistered only by detach_community_write_fence()';
    END IF;
    IF TG_OP = 'DELETE' THEN
        IF EXISTS (SELECT 1 FROM community_deletion_requests r
                   WHERE r.stage IN ('approved', 'fenced', 'drained', 'bindings_removed')) THEN
            RAISE EXCEPTION USING ERRCODE = '55000',
                MESSAGE = format('unregistration of %s refused: a deletion is in flight and its approval covers this table', OLD.table_name);
        END IF;
        RETURN OLD;
    END IF;

    SELECT c.oid INTO target FROM pg_class c
    WHERE c.relname = NEW.table_name AND c.relkind IN ('r', 'p') AND NOT c.relispartition
      AND c.relnamespace = (SELECT home.relnamespace FROM pg_class home WHERE home.oid = 'communities'::regclass);
    SELECT a.atttypid::regtype, a.attnotnull INTO column_type, column_not_null
    FROM pg_attribute a WHERE a.attrelid = target AND a.attname = 'community_id' AND NOT a.attisdropped;
    IF target IS NULL OR community_deletion_control_table(NEW.table_name)
       OR column_type IS DISTINCT FROM 'uuid'::regtype
       OR column_not_null IS DISTINCT FROM (NEW.purge_action = 'delete') THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('registration of %s refused: it is not a table of the schema of communities with the community_id column purge action %s needs',
                             NEW.table_name, NEW.purge_action);
    END IF;
    IF NEW.purge_action = 'delete' AND EXISTS (
        SELECT 1
        FROM (SELECT tree.relid FROM pg_partition_tree(target) tree UNION SELECT target) member (relid)
        WHERE NOT community_deletion_fenced(member.relid)) THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('registration of %s refused: it or a partition lacks the complete, enabled write fence', NEW.table_name);
    END IF;
    NEW.registered_at := now();
    NEW.registered_by := session_user;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION enforce_community_tombstone_proof() RETURNS trigger
    LANGUAGE plpgsql
    SET row_security TO 'off'
    AS $_$
DECLARE
    registered record;
    remains boolean;
BEGIN
    IF TG_OP <> 'UPDATE' OR NEW.deletion_state IS DISTINCT FROM 'tombstone'
       OR OLD.deletion_state IS NOT DISTINCT FROM 'tombstone' THEN
        RETURN NEW;
    END IF;
    FOR registered IN
        SELECT r.table_name, r.purge_action, n.nspname, c.relname
        FROM community_scoped_tables r
        JOIN pg_class c ON c.relname = r.table_name
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE c.relnamespace = (SELECT home.relnamespace FROM pg_class home WHERE home.oid = 'communities'::regclass)
          AND c.relkind IN ('r', 'p') AND NOT c.relispartition
        ORDER BY r.purge_action, r.table_name
    LOOP
        EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I.%I t WHERE t.community_id OPERATOR(pg_catalog.=) $1)',
                       registered.nspname, registered.relname)
            INTO remains USING OLD.id;
        IF remains THEN
            RAISE EXCEPTION USING ERRCODE = '55000',
                MESSAGE = format('tombstone of community %s refused: registered %s table %s still holds its rows; purge them first',
                                 OLD.id, registered.purge_action, registered.table_name);
        END IF;
    END LOOP;
    RETURN NEW;
END
$_$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion_purge_pressure() RETURNS TABLE(replicas integer, replay_lag interval, replay_bytes bigint, wraparound_tables text[])
    LANGUAGE sql STABLE SECURITY DEFINER
    AS $$
        SELECT (SELECT count(*)::integer FROM pg_stat_replication),
               (SELECT max(r.replay_lag) FROM pg_stat_replication r),
               (SELECT max(pg_wal_lsn_diff(pg_current_wal_lsn(), r.replay_lsn))::bigint FROM pg_stat_replication r),
               ARRAY(
                   SELECT DISTINCT registered.table_name
                   FROM pg_stat_progress_vacuum v
                   JOIN pg_stat_activity a ON a.pid = v.pid
                   JOIN pg_class c ON c.oid = coalesce(pg_partition_root(v.relid), v.relid)
                   JOIN community_scoped_tables registered ON registered.table_name = c.relname
                       AND c.relnamespace = (SELECT h.relnamespace FROM pg_class h WHERE h.oid = 'communities'::regclass)
                   WHERE v.datname = current_database()
                     AND a.backend_type = 'autovacuum worker'
                     AND a.query LIKE '%(to prevent wraparound)%'
                   ORDER BY 1)
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion_receipt_chain_head() RETURNS TABLE(sequence bigint, body_sha256 text, schema_version bigint)
    LANGUAGE plpgsql SECURITY DEFINER
    AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(8242555388204445233);
    IF to_regclass('community_deletion_schema_migrations') IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '55000',
            MESSAGE = 'receipt chain head refused: community_deletion_schema_migrations is missing, so the schema version is unknown; migrate with the migration job';
    END IF;
    RETURN QUERY
    SELECT coalesce(h.sequence, 0), h.body_sha256,
           (SELECT max(m.version_id) FROM community_deletion_schema_migrations m WHERE m.is_applied)
    FROM (SELECT 1) one
    LEFT JOIN LATERAL (SELECT r.sequence, r.body_sha256 FROM community_deletion_receipts r
                       ORDER BY r.sequence DESC LIMIT 1) h ON true;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion_catalog_drift() RETURNS TABLE(table_name text, problem text)
    LANGUAGE sql STABLE
    AS $$
    WITH RECURSIVE home AS (
        SELECT c.relnamespace AS namespace, n.nspname AS nspname
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE c.oid = 'communities'::regclass
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
    ), tenant_chain AS (
        -- communities, every registered 'delete' table, and every table down
        -- a chain of foreign keys from them; the chain does not run on
        -- through a control table or a registered 'nullify' table (whose
        -- rows outlive a deletion).
        SELECT 'communities'::regclass::oid AS oid
        UNION
        SELECT registered.oid FROM registered
        WHERE registered.purge_action = 'delete' AND registered.oid IS NOT NULL
        UNION
        SELECT f.conrelid
        FROM tenant_chain
        JOIN pg_constraint f ON f.contype = 'f' AND f.confrelid = tenant_chain.oid
        JOIN pg_class c ON c.oid = f.conrelid
        CROSS JOIN home
        WHERE NOT (c.relnamespace = home.namespace
                   AND (community_deletion_control_table(c.relname::text)
                        OR c.relname::text IN (SELECT registered.table_name FROM registered
                                               WHERE registered.purge_action = 'nullify')))
    ), live AS (
        -- Every table, in any schema but the system's and temporary ones, that
        -- looks like tenant data: a community_id column of any type, or a
        -- foreign key to communities or (down a chain of foreign keys) to a
        -- registered 'delete' table, under any column name.
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
          AND c.oid <> 'communities'::regclass
          AND (EXISTS (SELECT 1 FROM pg_attribute a
                       WHERE a.attrelid = c.oid AND a.attname = 'community_id' AND NOT a.attisdropped)
               OR EXISTS (SELECT 1 FROM pg_constraint f JOIN tenant_chain ON tenant_chain.oid = f.confrelid
                          WHERE f.conrelid = c.oid AND f.contype = 'f'))
    ), fence_members AS (
        -- A registered 'delete' table and, when it is partitioned, every partition.
        SELECT registered.table_name, registered.oid
        FROM registered
        WHERE registered.purge_action = 'delete' AND registered.oid IS NOT NULL
        UNION
        SELECT registered.table_name, tree.relid
        FROM registered, pg_partition_tree(registered.oid) tree
        WHERE registered.purge_action = 'delete' AND registered.oid IS NOT NULL
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
        WHERE t.tgfoid = 'enforce_community_write_fence()'::regprocedure
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
      AND NOT EXISTS (SELECT 1 FROM fence_defects WHERE fence_defects.table_name = fence_members.table_name)
    UNION ALL
    SELECT fence_defects.table_name, 'unfenced: ' || fence_defects.defects
    FROM fence_defects
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
    SELECT row_secured.table_name,
           format('row_security: its policies apply to %s; grant BYPASSRLS to each (or let it own the table), or disable row level security',
                  row_secured.logins)
    FROM row_secured
    ORDER BY 1, 2
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion_installed_functions() RETURNS text[]
    LANGUAGE sql IMMUTABLE
    AS $$
        SELECT ARRAY[
            'assert_community_write_allowed(uuid)',
            'attach_community_write_fence(regclass,text)',
            'community_deletion_catalog_drift()',
            'community_deletion_control_digest(text)',
            'community_deletion_control_table(text)',
            'community_deletion_default_grace_period()',
            'community_deletion_fenced(oid)',
            'community_deletion_function_digest(oid)',
            'community_deletion_guard_digest(text,text)',
            'community_deletion_guard_triggers()',
            'community_deletion_health()',
            'community_deletion_installed_functions()',
            'community_deletion_is_member(name)',
            'community_deletion_lock_holders(bigint)',
            'community_deletion_lock_key(uuid)',
            'community_deletion_next_stage(text)',
            'community_deletion_operators_share_role()',
            'community_deletion_protection_state(uuid)',
            'community_deletion_purge_pressure()',
            'community_deletion_receipt_chain_head()',
            'community_deletion_register_table(regclass,text)',
            'community_deletion_require_member(name[],text)',
            'community_deletion_restore_active(uuid,timestamptz)',
            'community_deletion_seal_functions()',
            'community_deletion_stage_order()',
            'community_deletion_stage_runnable(text)',
            'community_deletion_step_authorized(uuid,text)',
            'community_deletion_unregister_table(text)',
            'community_schema_destruction_lock_key()',
            'community_write_allowed(uuid)',
            'community_write_fence_excluded_table(text)',
            'detach_community_write_fence(regclass)',
            'enforce_community_deletion_approval_guard()',
            'enforce_community_deletion_checkpoint_guard()',
            'enforce_community_deletion_grace_fence()',
            'enforce_community_deletion_grace_period()',
            'enforce_community_deletion_manifest_key_guard()',
            'enforce_community_deletion_protection_guard()',
            'enforce_community_deletion_protection_submit()',
            'enforce_community_deletion_receipt_guard()',
            'enforce_community_deletion_receipt_required()',
            'enforce_community_deletion_request_guard()',
            'enforce_community_deletion_settings_guard()',
            'enforce_community_deletion_storage_layout_guard()',
            'enforce_community_scoped_table_guard()',
            'enforce_community_serving_write_lease_guard()',
            'enforce_community_tombstone()',
            'enforce_community_tombstone_proof()',
            'enforce_community_write_fence()',
            'refuse_community_deletion_truncate()'
        ]
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion_seal_functions() RETURNS void
    LANGUAGE plpgsql
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
    -- The control tables' shape and each guard trigger's definition, which
    -- the drift report compares with the live catalog.
    DELETE FROM community_deletion_control_digests;
    INSERT INTO community_deletion_control_digests (kind, subject, digest)
    SELECT 'table', c.relname::text, community_deletion_control_digest(c.relname::text)
    FROM pg_catalog.pg_class c
    WHERE c.relnamespace = (SELECT h.relnamespace FROM pg_catalog.pg_class h WHERE h.oid = 'communities'::regclass)
      AND c.relkind IN ('r', 'p') AND community_deletion_control_table(c.relname::text)
    UNION ALL
    SELECT 'guard', g.table_name || '.' || g.trigger_name, community_deletion_guard_digest(g.table_name, g.trigger_name)
    FROM community_deletion_guard_triggers() g
    WHERE community_deletion_guard_digest(g.table_name, g.trigger_name) IS NOT NULL;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
DO $install$
DECLARE
    home text := (SELECT n.nspname FROM pg_catalog.pg_class c
                  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                  WHERE c.oid = 'communities'::pg_catalog.regclass);
BEGIN
    EXECUTE pg_catalog.replace($fence$
CREATE OR REPLACE FUNCTION @home@.enforce_community_write_fence() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    first_community pg_catalog.uuid;
    locked pg_catalog.bool;
    mixed pg_catalog.bool;
    state pg_catalog.text;
    isolation pg_catalog.text;
    touched pg_catalog.uuid[];
    community pg_catalog.uuid;
BEGIN
    -- Path 1: one community, its lock free, active, READ COMMITTED.
    IF TG_OP OPERATOR(pg_catalog.=) 'INSERT' THEN
        SELECT n.community_id,
               pg_catalog.pg_try_advisory_xact_lock_shared(@home@.community_deletion_lock_key(n.community_id)),
               EXISTS (SELECT 1 FROM community_fence_new other
                       WHERE other.community_id IS NULL
                          OR other.community_id OPERATOR(pg_catalog.<>) n.community_id)
        INTO first_community, locked, mixed
        FROM community_fence_new n;
    ELSIF TG_OP OPERATOR(pg_catalog.=) 'UPDATE' THEN
        SELECT o.community_id,
               pg_catalog.pg_try_advisory_xact_lock_shared(@home@.community_deletion_lock_key(o.community_id)),
               EXISTS (SELECT 1 FROM community_fence_old other
                       WHERE other.community_id IS NULL
                          OR other.community_id OPERATOR(pg_catalog.<>) o.community_id)
               OR EXISTS (SELECT 1 FROM community_fence_new other
                          WHERE other.community_id IS NULL
                             OR other.community_id OPERATOR(pg_catalog.<>) o.community_id)
        INTO first_community, locked, mixed
        FROM community_fence_old o;
    ELSE
        SELECT o.community_id,
               pg_catalog.pg_try_advisory_xact_lock_shared(@home@.community_deletion_lock_key(o.community_id)),
               EXISTS (SELECT 1 FROM community_fence_old other
                       WHERE other.community_id IS NULL
                          OR other.community_id OPERATOR(pg_catalog.<>) o.community_id)
        INTO first_community, locked, mixed
        FROM community_fence_old o;
    END IF;
    IF FOUND AND locked AND NOT mixed THEN
        SELECT c.deletion_state, pg_catalog.current_setting('transaction_isolation')
        INTO state, isolation
        FROM @home@.communities c WHERE c.id OPERATOR(pg_catalog.=) first_community;
        IF state OPERATOR(pg_catalog.=) 'active' AND isolation OPERATOR(pg_catalog.=) 'read committed' THEN
            RETURN NULL;
        END IF;
    END IF;

    -- Path 2: refuse snapshot isolation, wait for every lock, then confirm.
    IF pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.<>) 'read committed' THEN
        RAISE EXCEPTION USING
            ERRCODE = '25000',
            MESSAGE = pg_catalog.format('community write to %I refused: isolation level %s pins a snapshot that cannot see the deletion fence',
                                        TG_TABLE_NAME, pg_catalog.current_setting('transaction_isolation')),
            HINT = 'Write community data in READ COMMITTED transactions.',
            CONSTRAINT = 'community_write_fence';
    END IF;
    IF TG_OP OPERATOR(pg_catalog.=) 'INSERT' THEN
        SELECT pg_catalog.array_agg(DISTINCT community_id) INTO touched FROM community_fence_new;
    ELSIF TG_OP OPERATOR(pg_catalog.=) 'UPDATE' THEN
        SELECT pg_catalog.array_agg(rows.community_id) INTO touched
        FROM (SELECT community_id FROM community_fence_old UNION SELECT community_id FROM community_fence_new) rows;
    ELSE
        SELECT pg_catalog.array_agg(DISTINCT community_id) INTO touched FROM community_fence_old;
    END IF;
    IF touched IS NULL THEN
        RETURN NULL; -- the statement wrote no rows
    END IF;
    PERFORM pg_catalog.pg_advisory_xact_lock_shared(@home@.community_deletion_lock_key(t.community_id))
    FROM pg_catalog.unnest(touched) t(community_id);
    IF NOT EXISTS (
        SELECT 1 FROM pg_catalog.unnest(touched) t(community_id)
        LEFT JOIN @home@.communities c ON c.id OPERATOR(pg_catalog.=) t.community_id
        WHERE c.deletion_state IS NULL OR c.deletion_state OPERATOR(pg_catalog.<>) 'active') THEN
        RETURN NULL;
    END IF;

    -- Path 3: ask about each community and name the first refused.
    FOREACH community IN ARRAY touched LOOP
        IF community IS NULL THEN
            RAISE EXCEPTION USING
                ERRCODE = '55000',
                MESSAGE = pg_catalog.format('community write to %I refused: a row has no community_id', TG_TABLE_NAME),
                CONSTRAINT = 'community_write_fence';
        END IF;
        IF @home@.community_write_allowed(community) IS NOT TRUE THEN
            SELECT c.deletion_state INTO state FROM @home@.communities c WHERE c.id OPERATOR(pg_catalog.=) community;
            RAISE EXCEPTION USING
                ERRCODE = '55000',
                MESSAGE = pg_catalog.format('community write to %I refused: community %s is %s',
                                            TG_TABLE_NAME, community, coalesce(state, 'missing')),
                CONSTRAINT = 'community_write_fence';
        END IF;
    END LOOP;
    RETURN NULL;
END
$$
$fence$, '@home@', pg_catalog.quote_ident(home));
END
$install$;
-- +goose StatementEnd

SELECT community_deletion_seal_functions();
