-- The service's own tenant model (issue 17). Until now a tenant table had
-- to carry a column named community_id, and every tenant needed a row in
-- communities that application code wrote.
--
-- * attach_community_write_fence(target, purge_action, tenant_key) names
--   the table's tenant key column (default community_id, so existing calls
--   keep working); it must be uuid. The registry records it
--   (community_scoped_tables.tenant_key) and the fence, the purge, the
--   absence proofs, the drift report and the registry guard read that
--   column. The fence keeps its static fast path for community_id tables
--   (a trigger without arguments); a trigger whose one argument names
--   another key reads it by dynamic SQL.
-- * declare_tenant_table(target, key_column) declares the service's own
--   tenant table (one per deployment, recorded in
--   community_deletion_tenant_table): its existing rows get their
--   lifecycle row in communities, a BEFORE INSERT trigger creates it for
--   each new tenant, and the table itself is attached as a 'delete' table
--   keyed by key_column, so it is fenced and purged last. communities.host
--   becomes optional: NULL for these tenants; a deployment that writes a
--   host still has it reserved for ever.
-- * A 'nullify' table gets a kept-row fence: an INSERT, or an UPDATE that
--   sets the key, carrying the key of a quiescing, fenced or deleted
--   tenant is refused (55000), as 'delete' tables refuse it; clearing the
--   key passes. This Up adds it to the registered 'nullify' tables the
--   migrating role may alter; the drift report names the others until
--   their owner runs attach again.
-- * The drift report finds tenant data by every registered key name and
--   by foreign keys to the declared tenant table; exclude_table(target,
--   reason) records a table its owner keeps out of the deletion, and a
--   table that can never be registered where it is says why.
--
-- Down refuses while a registered table's key is not community_id, a
-- tenant table is declared, or a community has no host.

-- +goose Up
ALTER TABLE community_deletion.community_scoped_tables
    ADD COLUMN tenant_key name NOT NULL DEFAULT 'community_id';
COMMENT ON COLUMN community_deletion.community_scoped_tables.tenant_key IS
    'The column of the registered table that holds its tenant''s id (uuid), as attach_community_write_fence() was given it.';

ALTER TABLE community_deletion.communities ALTER COLUMN host DROP NOT NULL;
ALTER TABLE community_deletion.community_deletion_requests ALTER COLUMN community_host DROP NOT NULL;

CREATE TABLE community_deletion.community_deletion_tenant_table (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    table_schema name NOT NULL,
    table_name name NOT NULL,
    key_column name NOT NULL,
    declared_by name NOT NULL DEFAULT session_user,
    declared_at timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE community_deletion.community_deletion_tenant_table IS
    'The service''s own tenant table, declared once by its owner with declare_tenant_table(); written only by that function.';

CREATE TABLE community_deletion.community_deletion_excluded_tables (
    table_schema name NOT NULL,
    table_name name NOT NULL,
    reason text NOT NULL CHECK (btrim(reason) <> '' AND octet_length(reason) <= 1024),
    excluded_by name NOT NULL DEFAULT session_user,
    excluded_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (table_schema, table_name)
);
COMMENT ON TABLE community_deletion.community_deletion_excluded_tables IS
    'Tables that look like tenant data but that their owner keeps out of the deletion (exclude_table()), with why; the drift report does not flag them.';

-- The drift report, which every deletion role runs, reads both.
GRANT SELECT ON community_deletion.community_deletion_tenant_table, community_deletion.community_deletion_excluded_tables
    TO community_deletion_serving, community_deletion_operator, community_deletion_executor;

CREATE TRIGGER community_deletion_tenant_table_truncate_guard BEFORE TRUNCATE ON community_deletion.community_deletion_tenant_table
    FOR EACH STATEMENT EXECUTE FUNCTION community_deletion.refuse_community_deletion_truncate();
CREATE TRIGGER community_deletion_excluded_tables_truncate_guard BEFORE TRUNCATE ON community_deletion.community_deletion_excluded_tables
    FOR EACH STATEMENT EXECUTE FUNCTION community_deletion.refuse_community_deletion_truncate();

-- +goose StatementBegin
-- Guards community_deletion_tenant_table: the declaration never changes
-- nor goes (23000), for every role.
CREATE FUNCTION community_deletion.enforce_community_deletion_tenant_table_guard() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = '23000',
        MESSAGE = format('tenant table declaration of %I.%I refused: a declaration never changes, since the lifecycle rows of its tenants follow it',
                         OLD.table_schema, OLD.table_name);
END
$$;
-- +goose StatementEnd
CREATE TRIGGER community_deletion_tenant_table_guard BEFORE UPDATE OR DELETE ON community_deletion.community_deletion_tenant_table
    FOR EACH ROW EXECUTE FUNCTION community_deletion.enforce_community_deletion_tenant_table_guard();


-- +goose StatementBegin
-- The write fence of a registered 'delete' table. A trigger without
-- arguments reads the column community_id (the static fast path, planned
-- once per session); a trigger whose one argument names the table's
-- declared tenant key reads that column by dynamic SQL.
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
    IF TG_NARGS OPERATOR(pg_catalog.=) 0 THEN
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
    ELSE
        -- Path 1 for a declared tenant key: the statement's distinct keys
        -- (NULL among them when a row has none) by one dynamic query.
        IF TG_OP OPERATOR(pg_catalog.=) 'INSERT' THEN
            EXECUTE pg_catalog.format('SELECT pg_catalog.array_agg(DISTINCT n.%I) FROM community_fence_new n', TG_ARGV[0])
            INTO touched;
        ELSIF TG_OP OPERATOR(pg_catalog.=) 'UPDATE' THEN
            EXECUTE pg_catalog.format('SELECT pg_catalog.array_agg(k.key) FROM (SELECT o.%1$I FROM community_fence_old o '
                                      'UNION SELECT n.%1$I FROM community_fence_new n) k (key)', TG_ARGV[0])
            INTO touched;
        ELSE
            EXECUTE pg_catalog.format('SELECT pg_catalog.array_agg(DISTINCT o.%I) FROM community_fence_old o', TG_ARGV[0])
            INTO touched;
        END IF;
        IF touched IS NULL THEN
            RETURN NULL; -- the statement wrote no rows
        END IF;
        IF pg_catalog.cardinality(touched) OPERATOR(pg_catalog.=) 1 AND touched[1] IS NOT NULL
           AND pg_catalog.pg_try_advisory_xact_lock_shared(community_deletion.community_deletion_lock_key(touched[1])) THEN
            SELECT c.deletion_state, pg_catalog.current_setting('transaction_isolation')
            INTO state, isolation
            FROM community_deletion.communities c WHERE c.id OPERATOR(pg_catalog.=) touched[1];
            IF state OPERATOR(pg_catalog.=) 'active' AND isolation OPERATOR(pg_catalog.=) 'read committed' THEN
                RETURN NULL;
            END IF;
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
    IF TG_NARGS OPERATOR(pg_catalog.=) 0 THEN
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
                MESSAGE = pg_catalog.format('community write to %I refused: a row has no %s', TG_TABLE_NAME,
                                            CASE WHEN TG_NARGS OPERATOR(pg_catalog.=) 0 THEN 'community_id' ELSE TG_ARGV[0] END),
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
-- The kept-row fence of a registered 'nullify' table (argument: its tenant
-- key): an INSERT, or an UPDATE that sets the key, carrying the key of a
-- tenant that is not writable (quiescing or fenced outside a lease or the
-- executor, or a tombstone) is refused (55000), at REPEATABLE READ or
-- SERIALIZABLE always (25000); a key no community holds passes, as before.
-- Clearing the key (the executor's UPDATE) always passes. It runs as its
-- owner, so any login that writes the table may.
CREATE FUNCTION community_deletion.enforce_community_kept_row_fence() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
DECLARE
    linked pg_catalog.uuid[];
    community pg_catalog.uuid;
    state pg_catalog.text;
BEGIN
    IF TG_OP OPERATOR(pg_catalog.=) 'INSERT' THEN
        EXECUTE pg_catalog.format('SELECT pg_catalog.array_agg(DISTINCT n.%1$I) FROM community_fence_new n '
                                  'WHERE n.%1$I IS NOT NULL', TG_ARGV[0])
        INTO linked;
    ELSE
        EXECUTE pg_catalog.format('SELECT pg_catalog.array_agg(k.key) FROM (SELECT n.%1$I FROM community_fence_new n '
                                  'WHERE n.%1$I IS NOT NULL EXCEPT SELECT o.%1$I FROM community_fence_old o) k (key)', TG_ARGV[0])
        INTO linked;
    END IF;
    IF linked IS NULL THEN
        RETURN NULL; -- no row was linked to a tenant
    END IF;
    IF pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.<>) 'read committed' THEN
        RAISE EXCEPTION USING
            ERRCODE = '25000',
            MESSAGE = pg_catalog.format('community write to %I refused: isolation level %s pins a snapshot that cannot see the deletion fence',
                                        TG_TABLE_NAME, pg_catalog.current_setting('transaction_isolation')),
            HINT = 'Write rows that carry a tenant key in READ COMMITTED transactions.',
            CONSTRAINT = 'community_write_fence';
    END IF;
    PERFORM pg_catalog.pg_advisory_xact_lock_shared(community_deletion.community_deletion_lock_key(t.community_id))
    FROM pg_catalog.unnest(linked) t(community_id);
    FOREACH community IN ARRAY linked LOOP
        SELECT c.deletion_state INTO state FROM community_deletion.communities c WHERE c.id OPERATOR(pg_catalog.=) community;
        IF state IS NOT NULL AND state OPERATOR(pg_catalog.<>) 'active'
           AND community_deletion.community_write_allowed(community) IS NOT TRUE THEN
            RAISE EXCEPTION USING
                ERRCODE = '55000',
                MESSAGE = pg_catalog.format('community write to %I refused: it links a row to community %s, which is %s; kept rows stay unlinked from a deleted tenant',
                                            TG_TABLE_NAME, community, state),
                CONSTRAINT = 'community_write_fence';
        END IF;
    END LOOP;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Whether relation carries the complete, enabled write fence for its
-- tenant key: the INSERT, UPDATE and DELETE statement triggers with their
-- transition tables, without arguments for community_id and with the key's
-- name as their one argument for any other key.
CREATE FUNCTION community_deletion.community_deletion_fenced(relation oid, tenant_key name) RETURNS boolean
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
        SELECT coalesce(bool_or(t.tgtype & 4 = 4 AND t.tgnewtable = 'community_fence_new')
                        AND bool_or(t.tgtype & 16 = 16 AND t.tgoldtable = 'community_fence_old'
                                    AND t.tgnewtable = 'community_fence_new')
                        AND bool_or(t.tgtype & 8 = 8 AND t.tgoldtable = 'community_fence_old')
                        AND bool_and(CASE WHEN tenant_key = 'community_id' THEN t.tgnargs = 0
                                          ELSE t.tgnargs = 1 AND t.tgargs = convert_to(tenant_key::text, 'UTF8') || '\x00'::bytea END),
                        false)
        FROM pg_trigger t
        WHERE t.tgrelid = relation
          AND t.tgfoid = 'enforce_community_write_fence()'::regprocedure
          AND NOT t.tgisinternal
          AND t.tgenabled IN ('O', 'A')
          AND t.tgtype & (1 | 2 | 64) = 0
          AND t.tgqual IS NULL
          AND cardinality(t.tgattr::int2[]) = 0
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Whether relation carries the complete, enabled kept-row fence of a
-- 'nullify' table for its tenant key: the INSERT and UPDATE statement
-- triggers with their transition tables and the key's name as argument.
CREATE FUNCTION community_deletion.community_deletion_kept_row_fenced(relation oid, tenant_key name) RETURNS boolean
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
        SELECT coalesce(bool_or(t.tgtype & 4 = 4 AND t.tgnewtable = 'community_fence_new')
                        AND bool_or(t.tgtype & 16 = 16 AND t.tgoldtable = 'community_fence_old'
                                    AND t.tgnewtable = 'community_fence_new')
                        AND bool_and(t.tgnargs = 1 AND t.tgargs = convert_to(tenant_key::text, 'UTF8') || '\x00'::bytea),
                        false)
        FROM pg_trigger t
        WHERE t.tgrelid = relation
          AND t.tgfoid = 'enforce_community_kept_row_fence()'::regprocedure
          AND NOT t.tgisinternal
          AND t.tgenabled IN ('O', 'A')
          AND t.tgtype & (1 | 2 | 64) = 0
          AND t.tgqual IS NULL
          AND cardinality(t.tgattr::int2[]) = 0
    $$;
-- +goose StatementEnd

DROP FUNCTION community_deletion.attach_community_write_fence(regclass, text);

-- +goose StatementBegin
-- Registers a tenant table of the service, as its owner: its tenant key
-- column tenant_key (uuid; NOT NULL for 'delete', nullable for 'nullify'),
-- the write fence ('delete') or the kept-row fence ('nullify') on it and
-- each partition, and the grants the deletion roles need on it.
-- Idempotent; a registration never changes its purge action or key.
CREATE FUNCTION community_deletion.attach_community_write_fence(target regclass, purge_action text DEFAULT 'delete',
                                                                tenant_key name DEFAULT 'community_id') RETURNS void
    LANGUAGE plpgsql
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
DECLARE
    rel record;
    column_type regtype;
    column_not_null boolean;
    member regclass;
    fence_args text;
BEGIN
    IF purge_action IS NULL OR purge_action NOT IN ('delete', 'nullify') THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('purge_action must be ''delete'' or ''nullify'', not %L', purge_action);
    END IF;
    IF tenant_key IS NULL OR tenant_key = '' THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('attach of %s refused: name its tenant key column (community_id unless the service calls it otherwise)', target);
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
    WHERE a.attrelid = target AND a.attname = tenant_key AND a.attnum > 0 AND NOT a.attisdropped;
    IF column_type IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('attach of %s refused: it has no column %I; name the column that holds the tenant''s id', target, tenant_key);
    END IF;
    IF column_type IS DISTINCT FROM 'uuid'::regtype THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('attach of %s refused: %s.%I is %s: a tenant key must be uuid; key the table by a uuid column, or exclude it with exclude_table()',
                             target, target, tenant_key, column_type);
    END IF;
    IF purge_action = 'delete' AND NOT column_not_null THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('%s.%I must be NOT NULL to be purged by deletion', target, tenant_key);
    END IF;
    IF purge_action = 'nullify' AND column_not_null THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('%s.%I must be nullable to be cleared by deletion', target, tenant_key);
    END IF;

    -- The community_id fence runs without arguments, on its static fast
    -- path; any other key is the fence's one argument.
    fence_args := CASE WHEN tenant_key = 'community_id' THEN '' ELSE quote_literal(tenant_key) END;
    -- A change of purge action or key is refused by
    -- community_deletion_register_table() below, which rolls back the
    -- triggers and grants made here.
    FOR member IN SELECT tree.relid FROM pg_partition_tree(target) tree UNION SELECT target LOOP
        IF purge_action = 'delete' THEN
            EXECUTE format('CREATE OR REPLACE TRIGGER community_write_fence_insert AFTER INSERT ON %s '
                           'REFERENCING NEW TABLE AS community_fence_new '
                           'FOR EACH STATEMENT EXECUTE FUNCTION community_deletion.enforce_community_write_fence(%s)', member, fence_args);
            EXECUTE format('CREATE OR REPLACE TRIGGER community_write_fence_update AFTER UPDATE ON %s '
                           'REFERENCING OLD TABLE AS community_fence_old NEW TABLE AS community_fence_new '
                           'FOR EACH STATEMENT EXECUTE FUNCTION community_deletion.enforce_community_write_fence(%s)', member, fence_args);
            EXECUTE format('CREATE OR REPLACE TRIGGER community_write_fence_delete AFTER DELETE ON %s '
                           'REFERENCING OLD TABLE AS community_fence_old '
                           'FOR EACH STATEMENT EXECUTE FUNCTION community_deletion.enforce_community_write_fence(%s)', member, fence_args);
            EXECUTE format('CREATE OR REPLACE TRIGGER community_write_fence_truncate BEFORE TRUNCATE ON %s '
                           'FOR EACH STATEMENT EXECUTE FUNCTION community_deletion.enforce_community_truncate_fence()', member);
            EXECUTE format('GRANT SELECT, UPDATE, DELETE ON %s TO community_deletion_executor', member);
        ELSE
            EXECUTE format('CREATE OR REPLACE TRIGGER community_kept_row_fence_insert AFTER INSERT ON %s '
                           'REFERENCING NEW TABLE AS community_fence_new '
                           'FOR EACH STATEMENT EXECUTE FUNCTION community_deletion.enforce_community_kept_row_fence(%L)', member, tenant_key);
            EXECUTE format('CREATE OR REPLACE TRIGGER community_kept_row_fence_update AFTER UPDATE ON %s '
                           'REFERENCING OLD TABLE AS community_fence_old NEW TABLE AS community_fence_new '
                           'FOR EACH STATEMENT EXECUTE FUNCTION community_deletion.enforce_community_kept_row_fence(%L)', member, tenant_key);
            EXECUTE format('GRANT SELECT, UPDATE (%I) ON %s TO community_deletion_executor', tenant_key, member);
        END IF;
        EXECUTE format('GRANT SELECT (%I) ON %s TO community_deletion_operator', tenant_key, member);
    END LOOP;
    PERFORM community_deletion_register_table(target, purge_action, tenant_key);
END
$$;
-- +goose StatementEnd

DROP FUNCTION community_deletion.community_deletion_register_table(regclass, text);

-- +goose StatementBegin
-- Records a tenant table in the registry, for attach_community_write_fence()
-- run by the table's owner (checked against the session's login, 42501): a
-- table of a schema of the service, not temporary, named apart from every
-- other registered table; a registration never changes its purge action or
-- tenant key (22023). It lifts an exclusion of the table.
CREATE FUNCTION community_deletion.community_deletion_register_table(target regclass, purge_action text, tenant_key name) RETURNS void
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
    SELECT r.table_schema, r.purge_action, r.tenant_key INTO registered
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
    IF registered.tenant_key IS NOT NULL AND registered.tenant_key <> tenant_key THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('%s is registered with tenant key %I; it cannot change to %I: detach it and attach it again',
                             target, registered.tenant_key, tenant_key);
    END IF;
    INSERT INTO community_scoped_tables (table_schema, table_name, purge_action, tenant_key)
    VALUES (rel.nspname, rel.relname, purge_action, tenant_key)
    ON CONFLICT (table_name) DO NOTHING;
    DELETE FROM community_deletion_excluded_tables e
    WHERE e.table_schema = rel.nspname AND e.table_name = rel.relname;
END
$$;
-- +goose StatementEnd

DROP FUNCTION community_deletion.community_deletion_unregister_table(name, name);

-- +goose StatementBegin
-- Removes a table from the registry, for detach_community_write_fence() run
-- by the table's owner (or, for a table that is gone, the deletion schema's
-- owner), and returns its tenant key; 22023 when it is not registered.
CREATE FUNCTION community_deletion.community_deletion_unregister_table(table_schema name, table_name name) RETURNS name
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
DECLARE
    owner oid;
    key name;
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
      AND r.table_name = community_deletion_unregister_table.table_name
    RETURNING r.tenant_key INTO key;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = format('%I.%I is not a registered tenant table', table_schema, table_name);
    END IF;
    RETURN key;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Unregisters a tenant table, as its owner: the registry row, its fences
-- and the deletion roles' grants on it and each partition.
CREATE OR REPLACE FUNCTION community_deletion.detach_community_write_fence(target regclass) RETURNS void
    LANGUAGE plpgsql
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
DECLARE
    rel record;
    member regclass;
    key name;
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
    key := community_deletion_unregister_table(rel.nspname, rel.relname);
    FOR member IN SELECT tree.relid FROM pg_partition_tree(target) tree UNION SELECT target LOOP
        EXECUTE format('DROP TRIGGER IF EXISTS community_write_fence_insert ON %s', member);
        EXECUTE format('DROP TRIGGER IF EXISTS community_write_fence_update ON %s', member);
        EXECUTE format('DROP TRIGGER IF EXISTS community_write_fence_delete ON %s', member);
        EXECUTE format('DROP TRIGGER IF EXISTS community_write_fence_truncate ON %s', member);
        EXECUTE format('DROP TRIGGER IF EXISTS community_kept_row_fence_insert ON %s', member);
        EXECUTE format('DROP TRIGGER IF EXISTS community_kept_row_fence_update ON %s', member);
        EXECUTE format('REVOKE SELECT, UPDATE, DELETE ON %s FROM community_deletion_executor', member);
        IF EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = member AND a.attname = key AND NOT a.attisdropped) THEN
            EXECUTE format('REVOKE SELECT (%1$I), UPDATE (%1$I) ON %2$s FROM community_deletion_executor', key, member);
            EXECUTE format('REVOKE SELECT (%I) ON %s FROM community_deletion_operator', key, member);
        END IF;
    END LOOP;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Guards community_scoped_tables: rows are written only by
-- community_deletion_register_table() and removed only by
-- community_deletion_unregister_table() (42501), never updated (23000),
-- and not removed while a deletion is in flight (55000); a new row needs a
-- table of a schema of the service with its tenant key column (uuid, NOT
-- NULL for 'delete', nullable for 'nullify') and its complete fence.
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
    IF stack !~ E'\nPL/pgSQL function community_deletion_(un)?register_table\\((regclass,text,name|name,name)\\) line [0-9]+ at SQL statement' THEN
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
    FROM pg_attribute a WHERE a.attrelid = target AND a.attname = NEW.tenant_key AND a.attnum > 0 AND NOT a.attisdropped;
    IF target IS NULL
       OR column_type IS DISTINCT FROM 'uuid'::regtype
       OR column_not_null IS DISTINCT FROM (NEW.purge_action = 'delete') THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('registration of %s refused: it is not a tenant table with the %I uuid column purge action %s needs',
                             NEW.table_name, NEW.tenant_key, NEW.purge_action);
    END IF;
    IF EXISTS (
        SELECT 1
        FROM (SELECT tree.relid FROM pg_partition_tree(target) tree UNION SELECT target) member (relid)
        WHERE NOT CASE NEW.purge_action
                      WHEN 'delete' THEN community_deletion_fenced(member.relid, NEW.tenant_key)
                      ELSE community_deletion_kept_row_fenced(member.relid, NEW.tenant_key) END) THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('registration of %s refused: it or a partition lacks the complete, enabled fence of its purge action and tenant key', NEW.table_name);
    END IF;
    NEW.registered_at := now();
    NEW.registered_by := session_user;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Refuses the tombstone (55000) while any registered table still holds a
-- row whose tenant key is the community's id.
CREATE OR REPLACE FUNCTION community_deletion.enforce_community_tombstone_proof() RETURNS trigger
    LANGUAGE plpgsql
    SET row_security = off
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
        SELECT r.table_name, r.purge_action, r.tenant_key, n.nspname, c.relname
        FROM community_scoped_tables r
        JOIN pg_namespace n ON n.nspname = r.table_schema
        JOIN pg_class c ON c.relname = r.table_name AND c.relnamespace = n.oid
        WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition
        ORDER BY r.purge_action, r.table_name
    LOOP
        EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I.%I t WHERE t.%I OPERATOR(pg_catalog.=) $1)',
                       registered.nspname, registered.relname, registered.tenant_key)
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
-- Creates the lifecycle row of each new tenant of the declared tenant
-- table (a BEFORE INSERT row trigger whose argument is the key column), so
-- application code never writes communities. The id of a deleted tenant
-- stays its tombstone: its re-insert is refused (55000).
CREATE FUNCTION community_deletion.enforce_community_tenant_created() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
DECLARE
    declared record;
    tenant uuid;
    state text;
BEGIN
    SELECT d.table_schema, d.table_name, d.key_column INTO declared FROM community_deletion_tenant_table d;
    IF declared.table_name IS NULL OR TG_TABLE_SCHEMA <> declared.table_schema OR TG_TABLE_NAME <> declared.table_name
       OR TG_NARGS <> 1 OR TG_ARGV[0] IS DISTINCT FROM declared.key_column::text THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = format('tenant creation on %I.%I refused: it is not the declared tenant table; declare it with community_deletion.declare_tenant_table()',
                             TG_TABLE_SCHEMA, TG_TABLE_NAME);
    END IF;
    tenant := (to_jsonb(NEW) ->> TG_ARGV[0])::uuid;
    IF tenant IS NULL THEN
        RETURN NEW; -- the key's NOT NULL refuses the row
    END IF;
    INSERT INTO communities (id) VALUES (tenant) ON CONFLICT (id) DO NOTHING;
    IF NOT FOUND THEN
        SELECT c.deletion_state INTO state FROM communities c WHERE c.id = tenant;
        IF state = 'tombstone' THEN
            RAISE EXCEPTION USING ERRCODE = '55000',
                MESSAGE = format('tenant %s refused: it was deleted, and a deleted tenant''s id is never reused; create the tenant with a new id', tenant),
                CONSTRAINT = 'community_write_fence';
        END IF;
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Records the declared tenant table, for declare_tenant_table() run by the
-- table's owner (checked against the session's login, 42501), and creates
-- the lifecycle rows of its existing tenants. A deployment has one tenant
-- table: declaring another is refused (55000); declaring the same again is
-- a no-op.
CREATE FUNCTION community_deletion.community_deletion_record_tenant_table(target regclass, key_column name, tenants uuid[]) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
DECLARE
    rel record;
    declared record;
BEGIN
    SELECT c.relname, c.relowner, n.nspname INTO rel
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = target;
    IF rel.relname IS NULL OR NOT pg_has_role(session_user, rel.relowner, 'MEMBER') THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = format('declaration of %s as the tenant table refused: role %s does not own it', target, session_user);
    END IF;
    -- One declaration at a time.
    LOCK TABLE community_deletion_tenant_table IN SHARE ROW EXCLUSIVE MODE;
    SELECT d.table_schema, d.table_name, d.key_column INTO declared FROM community_deletion_tenant_table d;
    IF declared.table_name IS NOT NULL
       AND (declared.table_schema, declared.table_name, declared.key_column) IS DISTINCT FROM (rel.nspname, rel.relname, key_column) THEN
        RAISE EXCEPTION USING ERRCODE = '55000',
            MESSAGE = format('declaration of %s (%I) as the tenant table refused: %I.%I is the declared tenant table (%I), and a deployment has one; a declaration never changes',
                             target, key_column, declared.table_schema, declared.table_name, declared.key_column);
    END IF;
    IF declared.table_name IS NULL THEN
        INSERT INTO community_deletion_tenant_table (table_schema, table_name, key_column)
        VALUES (rel.nspname, rel.relname, key_column);
    END IF;
    INSERT INTO communities (id)
    SELECT t.id FROM unnest(tenants) t (id) WHERE t.id IS NOT NULL
    ON CONFLICT (id) DO NOTHING;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Declares the service's own tenant table, as its owner: key_column must be
-- uuid NOT NULL with a unique index. Every existing row gets its lifecycle
-- row in communities (host NULL), a BEFORE INSERT trigger creates it for
-- each new row, and the table is attached as a 'delete' table keyed by
-- key_column, so it is fenced and purged after every table referencing it.
CREATE FUNCTION community_deletion.declare_tenant_table(target regclass, key_column name DEFAULT 'id') RETURNS void
    LANGUAGE plpgsql
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
DECLARE
    rel record;
    key record;
    tenants uuid[];
BEGIN
    SELECT c.relkind, c.relispartition, c.relowner, c.relpersistence, c.relnamespace INTO rel FROM pg_class c WHERE c.oid = target;
    IF rel.relpersistence = 't' OR NOT community_deletion_tenant_schema(rel.relnamespace) OR rel.relkind NOT IN ('r', 'p') OR rel.relispartition THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('declaration of %s as the tenant table refused: declare a permanent table (not a partition) of a schema of the service', target);
    END IF;
    IF NOT pg_has_role(current_user, rel.relowner, 'USAGE') THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = format('declaration of %s as the tenant table refused: only its owner (%s) may declare it', target, pg_get_userbyid(rel.relowner));
    END IF;
    SELECT a.attnum, a.atttypid::regtype AS type, a.attnotnull INTO key
    FROM pg_attribute a WHERE a.attrelid = target AND a.attname = key_column AND a.attnum > 0 AND NOT a.attisdropped;
    IF key.attnum IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('declaration of %s as the tenant table refused: it has no column %I; name its key column', target, key_column);
    END IF;
    IF key.type IS DISTINCT FROM 'uuid'::regtype THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('declaration of %s as the tenant table refused: %s.%I is %s: a tenant key must be uuid', target, target, key_column, key.type);
    END IF;
    IF NOT key.attnotnull THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('declaration of %s as the tenant table refused: %s.%I must be NOT NULL', target, target, key_column);
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_index i
                   WHERE i.indrelid = target AND i.indisunique AND i.indisvalid AND i.indpred IS NULL
                     AND i.indnkeyatts = 1 AND i.indkey[0] = key.attnum) THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('declaration of %s as the tenant table refused: %s.%I needs a unique index of its own (a primary key or UNIQUE constraint)', target, target, key_column);
    END IF;
    -- The trigger first: its lock (SHARE ROW EXCLUSIVE) holds off new
    -- tenants until the backfill below commits.
    EXECUTE format('CREATE OR REPLACE TRIGGER community_tenant_created BEFORE INSERT ON %s '
                   'FOR EACH ROW EXECUTE FUNCTION community_deletion.enforce_community_tenant_created(%L)', target, key_column);
    EXECUTE format('SELECT array_agg(t.%I) FROM %s t', key_column, target) INTO tenants;
    PERFORM community_deletion_record_tenant_table(target, key_column, coalesce(tenants, '{}'));
    PERFORM attach_community_write_fence(target, 'delete', key_column);
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Keeps a table that looks like tenant data out of the deletion, as its
-- owner (checked against the session's login, 42501), with a reason
-- (22023 without one); the drift report then leaves it alone and health
-- lists it. A registered table is refused (22023): detach it first.
CREATE FUNCTION community_deletion.exclude_table(target regclass, reason text) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
DECLARE
    rel record;
BEGIN
    SELECT c.relname, c.relowner, c.relkind, c.relispartition, c.relpersistence, c.relnamespace, n.nspname INTO rel
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = target;
    IF rel.relname IS NULL OR NOT pg_has_role(session_user, rel.relowner, 'MEMBER') THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = format('exclusion of %s refused: only its owner (%s) may exclude it', target, pg_get_userbyid(rel.relowner));
    END IF;
    IF rel.relpersistence = 't' OR NOT community_deletion_tenant_schema(rel.relnamespace) OR rel.relkind NOT IN ('r', 'p') OR rel.relispartition THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('exclusion of %s refused: only a permanent table (not a partition) of a schema of the service is excluded', target);
    END IF;
    IF reason IS NULL OR btrim(reason) = '' OR octet_length(reason) > 1024 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('exclusion of %s refused: give a reason (at most 1024 bytes) why its rows outlive a tenant''s deletion', target);
    END IF;
    IF EXISTS (SELECT 1 FROM community_scoped_tables r WHERE r.table_schema = rel.nspname AND r.table_name = rel.relname) THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('exclusion of %s refused: it is a registered tenant table; detach it first', target);
    END IF;
    INSERT INTO community_deletion_excluded_tables (table_schema, table_name, reason)
    VALUES (rel.nspname, rel.relname, reason)
    ON CONFLICT (table_schema, table_name) DO UPDATE
    SET reason = EXCLUDED.reason, excluded_by = session_user, excluded_at = now();
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Lifts an exclusion, as the table's owner (42501); 22023 when the table
-- is not excluded. The drift report flags the table again until it is
-- registered.
CREATE FUNCTION community_deletion.include_table(target regclass) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
DECLARE
    rel record;
BEGIN
    SELECT c.relname, c.relowner, n.nspname INTO rel
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = target;
    IF rel.relname IS NULL OR NOT pg_has_role(session_user, rel.relowner, 'MEMBER') THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = format('inclusion of %s refused: only its owner (%s) may lift its exclusion', target, pg_get_userbyid(rel.relowner));
    END IF;
    DELETE FROM community_deletion_excluded_tables e WHERE e.table_schema = rel.nspname AND e.table_name = rel.relname;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = format('%s is not excluded', target);
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The drift report, now with the service's tenant keys and tenant table.
-- Its many catalog joins are estimated costly enough to be JIT-compiled,
-- which took seconds for a few milliseconds of work: jit is off for it.
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_catalog_drift() RETURNS TABLE(table_name text, problem text)
    LANGUAGE sql STABLE
    SET jit = off
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
    WITH RECURSIVE home AS (
        SELECT c.relnamespace AS namespace, n.nspname AS nspname
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE c.oid = 'communities'::regclass
    ), registered AS (
        -- oid is NULL when the table is gone or has no uuid column named
        -- by its tenant key.
        SELECT r.table_name, r.purge_action, r.tenant_key, t.oid, t.attnotnull
        FROM community_scoped_tables r
        LEFT JOIN LATERAL (
            SELECT c.oid, a.attnotnull
            FROM pg_class c
            JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = r.table_schema
            JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = r.tenant_key AND NOT a.attisdropped
                AND a.atttypid = 'uuid'::regtype
            WHERE c.relname = r.table_name
              AND c.relkind IN ('r', 'p') AND NOT c.relispartition) t ON true
    ), tenant_table AS (
        -- The service's declared tenant table, when there is one.
        SELECT c.oid, d.key_column
        FROM community_deletion_tenant_table d
        JOIN pg_namespace n ON n.nspname = d.table_schema
        JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = d.table_name
    ), key_names AS (
        -- The names of tenant key columns: community_id and every
        -- registered key but the tenant table's own.
        SELECT 'community_id'::name AS name
        UNION
        SELECT r.tenant_key FROM community_scoped_tables r
        WHERE NOT EXISTS (SELECT 1 FROM community_deletion_tenant_table d
                          WHERE d.table_schema = r.table_schema AND d.table_name = r.table_name)
    ), tenant_chain AS (
        -- communities, the tenant table, every registered 'delete' table,
        -- and every table down a chain of foreign keys from them; the chain
        -- does not run on through a control table or a registered 'nullify'
        -- table (whose rows outlive a deletion).
        SELECT 'communities'::regclass::oid AS oid
        UNION
        SELECT tenant_table.oid FROM tenant_table
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
        -- looks like tenant data: a column named like a tenant key, of any
        -- type, or a foreign key to communities, the tenant table or (down a
        -- chain of foreign keys) a registered 'delete' table, under any
        -- column name; unless its owner excluded it.
        SELECT c.oid, c.relnamespace = home.namespace AS at_home, c.relname::text AS relname,
               format('%I.%I', n.nspname, c.relname) AS display_name,
               EXISTS (SELECT 1 FROM pg_constraint f JOIN tenant_chain ON tenant_chain.oid = f.confrelid
                       WHERE f.conrelid = c.oid AND f.contype = 'f') AS chained,
               (SELECT string_agg(format('its %I column is %s', a.attname, format_type(a.atttypid, a.atttypmod)), ', ' ORDER BY a.attname)
                FROM pg_attribute a JOIN key_names k ON k.name = a.attname
                WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped AND a.atttypid <> 'uuid'::regtype) AS wrong_keys,
               EXISTS (SELECT 1 FROM pg_attribute a JOIN key_names k ON k.name = a.attname
                       WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped AND a.atttypid = 'uuid'::regtype) AS uuid_key
        FROM pg_class c
        JOIN pg_namespace n ON n.oid = c.relnamespace
        CROSS JOIN home
        WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition
          AND n.nspname NOT IN ('pg_catalog', 'information_schema')
          AND n.nspname !~ '^pg_(toast|temp_|toast_temp_)'
          AND c.relpersistence <> 't'
          AND c.oid <> 'communities'::regclass
          AND NOT (c.relnamespace = home.namespace AND community_deletion_control_table(c.relname::text))
          AND NOT EXISTS (SELECT 1 FROM community_deletion_excluded_tables e
                          WHERE e.table_schema = n.nspname AND e.table_name = c.relname)
          AND (c.oid IN (SELECT tenant_table.oid FROM tenant_table)
               OR EXISTS (SELECT 1 FROM pg_attribute a JOIN key_names k ON k.name = a.attname
                          WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped)
               OR EXISTS (SELECT 1 FROM pg_constraint f JOIN tenant_chain ON tenant_chain.oid = f.confrelid
                          WHERE f.conrelid = c.oid AND f.contype = 'f'))
    ), fence_members AS (
        -- A registered table and, when it is partitioned, every partition.
        SELECT registered.table_name, registered.purge_action, registered.tenant_key, registered.oid
        FROM registered
        WHERE registered.oid IS NOT NULL
        UNION
        SELECT registered.table_name, registered.purge_action, registered.tenant_key, tree.relid
        FROM registered, pg_partition_tree(registered.oid) tree
        WHERE registered.oid IS NOT NULL
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
        WHERE t.tgfoid IN ('enforce_community_write_fence()'::regprocedure, 'enforce_community_kept_row_fence()'::regprocedure)
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
    -- Tenant data no deletion covers; where it can never be registered as
    -- it is, why.
    SELECT live.display_name,
           CASE WHEN live.at_home
                    THEN 'unregistered: it is in schema community_deletion, where no tenant table can be registered; move it to a schema of the service'
                WHEN live.wrong_keys IS NOT NULL AND NOT live.uuid_key AND NOT live.chained
                    THEN 'unregistered: ' || live.wrong_keys || '; a tenant key must be uuid'
                ELSE 'unregistered' END
    FROM live
    WHERE NOT EXISTS (SELECT 1 FROM registered WHERE registered.oid = live.oid)
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
    WHERE fence_members.purge_action = 'delete'
      AND NOT community_deletion_fenced(fence_members.oid, fence_members.tenant_key)
      AND NOT EXISTS (SELECT 1 FROM fence_defects WHERE fence_defects.table_name = fence_members.table_name)
    UNION ALL
    -- A registered 'nullify' table, or a partition, without its kept-row
    -- fence: a late write could link a kept row to a deleted tenant.
    SELECT DISTINCT fence_members.table_name, 'unfenced: no kept-row fence; run attach_community_write_fence again'
    FROM fence_members
    WHERE fence_members.purge_action = 'nullify'
      AND NOT community_deletion_kept_row_fenced(fence_members.oid, fence_members.tenant_key)
      AND NOT EXISTS (SELECT 1 FROM fence_defects WHERE fence_defects.table_name = fence_members.table_name)
    UNION ALL
    SELECT fence_defects.table_name, 'unfenced: ' || fence_defects.defects
    FROM fence_defects
    UNION ALL
    -- A write fence on a table that is not a registered 'delete' table (or
    -- a partition of one); a kept-row fence on a table that is not
    -- registered as 'nullify'.
    SELECT DISTINCT c.relname::text, 'stray_fence'
    FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
    JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE NOT t.tgisinternal
      AND c.relpersistence <> 't'
      AND ((t.tgfoid = 'enforce_community_write_fence()'::regprocedure
            AND NOT EXISTS (SELECT 1 FROM fence_members
                            WHERE fence_members.oid = t.tgrelid AND fence_members.purge_action = 'delete'))
           OR (t.tgfoid = 'enforce_community_kept_row_fence()'::regprocedure
               AND NOT EXISTS (SELECT 1 FROM fence_members
                               WHERE fence_members.oid = t.tgrelid AND fence_members.purge_action = 'nullify')
               AND NOT EXISTS (SELECT 1 FROM community_scoped_tables r
                               WHERE r.purge_action = 'nullify' AND r.table_schema = n.nspname
                                 AND r.table_name = coalesce((SELECT root.relname FROM pg_class root
                                                              WHERE root.oid = pg_partition_root(c.oid)), c.relname))))
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
    WHERE fence_members.purge_action = 'delete'
      AND community_deletion_fenced(fence_members.oid, fence_members.tenant_key)
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
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_control_table(table_name text) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
    AS $$
        SELECT coalesce(table_name = ANY (ARRAY[
            'communities',
            'community_deletion_approvals',
            'community_deletion_checkpoints',
            'community_deletion_created_roles',
            'community_deletion_excluded_tables',
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
            'community_deletion_tenant_table',
            'community_scoped_tables',
            'community_serving_write_leases',
            'storage_taxonomy_sweeps']), false)
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_guard_triggers() RETURNS TABLE(table_name text, trigger_name text, function_signature text)
    LANGUAGE sql IMMUTABLE
    SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
    AS $$
        VALUES
            ('communities', 'communities_tombstone_guard', 'enforce_community_tombstone()'),
            ('communities', 'communities_tombstone_proof', 'enforce_community_tombstone_proof()'),
            ('communities', 'communities_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('communities', 'communities_grace_fence_guard', 'enforce_community_deletion_grace_fence()'),
            ('community_deletion_requests', 'community_deletion_requests_guard', 'enforce_community_deletion_request_guard()'),
            ('community_deletion_requests', 'community_deletion_requests_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('community_deletion_requests', 'community_deletion_requests_protection_guard', 'enforce_community_deletion_protection_submit()'),
            ('community_deletion_requests', 'community_deletion_requests_receipt_required', 'enforce_community_deletion_receipt_required()'),
            ('community_deletion_approvals', 'community_deletion_approvals_guard', 'enforce_community_deletion_approval_guard()'),
            ('community_deletion_approvals', 'community_deletion_approvals_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('community_deletion_approvals', 'community_deletion_approvals_grace_period', 'enforce_community_deletion_grace_period()'),
            ('community_deletion_checkpoints', 'community_deletion_checkpoints_guard', 'enforce_community_deletion_checkpoint_guard()'),
            ('community_deletion_checkpoints', 'community_deletion_checkpoints_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('community_deletion_manifest_keys', 'community_deletion_manifest_keys_guard', 'enforce_community_deletion_manifest_key_guard()'),
            ('community_deletion_manifest_keys', 'community_deletion_manifest_keys_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('community_serving_write_leases', 'community_serving_write_leases_guard', 'enforce_community_serving_write_lease_guard()'),
            ('community_serving_write_leases', 'community_serving_write_leases_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('community_scoped_tables', 'community_scoped_tables_guard', 'enforce_community_scoped_table_guard()'),
            ('community_scoped_tables', 'community_scoped_tables_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('community_deletion_settings', 'community_deletion_settings_guard', 'enforce_community_deletion_settings_guard()'),
            ('community_deletion_settings', 'community_deletion_settings_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('community_deletion_protection_events', 'community_deletion_protection_events_guard', 'enforce_community_deletion_protection_guard()'),
            ('community_deletion_protection_events', 'community_deletion_protection_events_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('community_deletion_receipts', 'community_deletion_receipts_guard', 'enforce_community_deletion_receipt_guard()'),
            ('community_deletion_receipts', 'community_deletion_receipts_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('community_deletion_storage_layout', 'community_deletion_storage_layout_guard', 'enforce_community_deletion_storage_layout_guard()'),
            ('community_deletion_storage_layout', 'community_deletion_storage_layout_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('community_deletion_tenant_table', 'community_deletion_tenant_table_guard', 'enforce_community_deletion_tenant_table_guard()'),
            ('community_deletion_tenant_table', 'community_deletion_tenant_table_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('community_deletion_excluded_tables', 'community_deletion_excluded_tables_truncate_guard', 'refuse_community_deletion_truncate()')
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_installed_functions() RETURNS text[]
    LANGUAGE sql IMMUTABLE
    SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
    AS $$
        SELECT ARRAY[
            'assert_community_write_allowed(uuid)',
            'attach_community_write_fence(regclass,text,name)',
            'community_deletion_catalog_drift()',
            'community_deletion_control_digest(text)',
            'community_deletion_control_table(text)',
            'community_deletion_default_grace_period()',
            'community_deletion_fenced(oid,name)',
            'community_deletion_function_digest(oid)',
            'community_deletion_guard_digest(text,text)',
            'community_deletion_guard_triggers()',
            'community_deletion_health()',
            'community_deletion_installed_functions()',
            'community_deletion_is_member(name)',
            'community_deletion_kept_row_fenced(oid,name)',
            'community_deletion_lock_holders(bigint)',
            'community_deletion_lock_key(uuid)',
            'community_deletion_next_stage(text)',
            'community_deletion_operators_share_role()',
            'community_deletion_protection_state(uuid)',
            'community_deletion_purge_pressure()',
            'community_deletion_receipt_chain_head()',
            'community_deletion_record_tenant_table(regclass,name,uuid[])',
            'community_deletion_register_table(regclass,text,name)',
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
            'declare_tenant_table(regclass,name)',
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
            'enforce_community_deletion_tenant_table_guard()',
            'enforce_community_kept_row_fence()',
            'enforce_community_scoped_table_guard()',
            'enforce_community_serving_write_lease_guard()',
            'enforce_community_tenant_created()',
            'enforce_community_tombstone()',
            'enforce_community_tombstone_proof()',
            'enforce_community_truncate_fence()',
            'enforce_community_write_fence()',
            'exclude_table(regclass,text)',
            'include_table(regclass)',
            'refuse_community_deletion_truncate()'
        ]
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_seal_functions() RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
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
        IF fn IN ('attach_community_write_fence(regclass,text,name)', 'detach_community_write_fence(regclass)',
                  'community_deletion_register_table(regclass,text,name)', 'community_deletion_unregister_table(name,name)',
                  'declare_tenant_table(regclass,name)', 'community_deletion_record_tenant_table(regclass,name,uuid[])',
                  'exclude_table(regclass,text)', 'include_table(regclass)',
                  'enforce_community_kept_row_fence()', 'enforce_community_tenant_created()',
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


COMMENT ON FUNCTION community_deletion.enforce_community_write_fence() IS 'The write fence of a registered tenant table: refuses a write into a community that is not active (55000), a row without its tenant key (55000) and any write at REPEATABLE READ or SERIALIZABLE (25000); every refusal names the constraint community_write_fence. Without arguments it reads community_id; its one argument names any other tenant key.';

-- The drift report and the registry guard run these as their caller.
GRANT EXECUTE ON FUNCTION community_deletion.community_deletion_fenced(oid, name),
    community_deletion.community_deletion_kept_row_fenced(oid, name)
    TO community_deletion_serving, community_deletion_operator, community_deletion_executor;

-- +goose StatementBegin
-- 'nullify' tables registered before this migration: the kept-row fence
-- attach now puts on them, where the migrating role may alter them; the
-- drift report names the others until their owner runs attach again.
DO $kept$
DECLARE
    member record;
BEGIN
    FOR member IN
        SELECT m.relid::pg_catalog.regclass AS relid, r.tenant_key
        FROM community_deletion.community_scoped_tables r
        JOIN pg_catalog.pg_namespace n ON n.nspname OPERATOR(pg_catalog.=) r.table_schema
        JOIN pg_catalog.pg_class c ON c.relnamespace OPERATOR(pg_catalog.=) n.oid AND c.relname OPERATOR(pg_catalog.=) r.table_name
        CROSS JOIN LATERAL (SELECT t.relid FROM pg_catalog.pg_partition_tree(c.oid) t UNION SELECT c.oid) m
        JOIN pg_catalog.pg_class mc ON mc.oid OPERATOR(pg_catalog.=) m.relid
        WHERE r.purge_action OPERATOR(pg_catalog.=) 'nullify' AND mc.relkind IN ('r', 'p')
          AND pg_catalog.pg_has_role(current_user, mc.relowner, 'USAGE')
    LOOP
        EXECUTE pg_catalog.format('CREATE OR REPLACE TRIGGER community_kept_row_fence_insert AFTER INSERT ON %s '
                                  'REFERENCING NEW TABLE AS community_fence_new '
                                  'FOR EACH STATEMENT EXECUTE FUNCTION community_deletion.enforce_community_kept_row_fence(%L)',
                                  member.relid, member.tenant_key);
        EXECUTE pg_catalog.format('CREATE OR REPLACE TRIGGER community_kept_row_fence_update AFTER UPDATE ON %s '
                                  'REFERENCING OLD TABLE AS community_fence_old NEW TABLE AS community_fence_new '
                                  'FOR EACH STATEMENT EXECUTE FUNCTION community_deletion.enforce_community_kept_row_fence(%L)',
                                  member.relid, member.tenant_key);
    END LOOP;
END
$kept$;
-- +goose StatementEnd

DROP FUNCTION community_deletion.community_deletion_fenced(oid);

SELECT community_deletion.community_deletion_seal_functions();

-- +goose Down

-- +goose StatementBegin
DO $refuse$
DECLARE
    keyed text;
BEGIN
    SELECT pg_catalog.format('%I.%I (%I)', r.table_schema, r.table_name, r.tenant_key) INTO keyed
    FROM community_deletion.community_scoped_tables r
    WHERE r.tenant_key OPERATOR(pg_catalog.<>) 'community_id' LIMIT 1;
    IF keyed IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = '55000',
            MESSAGE = pg_catalog.format('migration 00023 down refused: registered table %s has a tenant key other than community_id, which earlier releases cannot read; detach it first', keyed);
    END IF;
    IF EXISTS (SELECT 1 FROM community_deletion.community_deletion_tenant_table) THEN
        RAISE EXCEPTION USING ERRCODE = '55000',
            MESSAGE = 'migration 00023 down refused: a tenant table is declared, and earlier releases cannot keep its tenants'' lifecycle rows; it cannot be undone';
    END IF;
    IF EXISTS (SELECT 1 FROM community_deletion.communities c WHERE c.host IS NULL)
       OR EXISTS (SELECT 1 FROM community_deletion.community_deletion_requests r WHERE r.community_host IS NULL) THEN
        RAISE EXCEPTION USING ERRCODE = '55000',
            MESSAGE = 'migration 00023 down refused: a community has no host, which earlier releases require; give each one a host first';
    END IF;
END
$refuse$;
-- +goose StatementEnd

DROP FUNCTION community_deletion.exclude_table(regclass, text);
DROP FUNCTION community_deletion.include_table(regclass);
DROP FUNCTION community_deletion.declare_tenant_table(regclass, name);
DROP FUNCTION community_deletion.community_deletion_record_tenant_table(regclass, name, uuid[]);
DROP FUNCTION community_deletion.enforce_community_tenant_created() CASCADE;

-- +goose StatementBegin
CREATE FUNCTION community_deletion.community_deletion_fenced(relation oid) RETURNS boolean
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
    AS $$
        SELECT coalesce(bool_or(t.tgtype & 4 = 4 AND t.tgnewtable = 'community_fence_new')
                        AND bool_or(t.tgtype & 16 = 16 AND t.tgoldtable = 'community_fence_old'
                                    AND t.tgnewtable = 'community_fence_new')
                        AND bool_or(t.tgtype & 8 = 8 AND t.tgoldtable = 'community_fence_old'), false)
        FROM pg_trigger t
        WHERE t.tgrelid = relation
          AND t.tgfoid = 'enforce_community_write_fence()'::regprocedure
          AND NOT t.tgisinternal
          AND t.tgenabled IN ('O', 'A')
          AND t.tgtype & (1 | 2 | 64) = 0
          AND t.tgqual IS NULL
          AND cardinality(t.tgattr::int2[]) = 0
    $$;
-- +goose StatementEnd

GRANT EXECUTE ON FUNCTION community_deletion.community_deletion_fenced(oid)
    TO community_deletion_serving, community_deletion_operator, community_deletion_executor;

DROP FUNCTION community_deletion.attach_community_write_fence(regclass, text, name);
-- +goose StatementBegin
CREATE FUNCTION community_deletion.attach_community_write_fence(target regclass, purge_action text DEFAULT 'delete'::text) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
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

DROP FUNCTION community_deletion.community_deletion_register_table(regclass, text, name);
-- +goose StatementBegin
CREATE FUNCTION community_deletion.community_deletion_register_table(target regclass, purge_action text) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
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

DROP FUNCTION community_deletion.community_deletion_unregister_table(name, name);
-- +goose StatementBegin
CREATE FUNCTION community_deletion.community_deletion_unregister_table(table_schema name, table_name name) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
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
CREATE OR REPLACE FUNCTION community_deletion.detach_community_write_fence(target regclass) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
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
CREATE OR REPLACE FUNCTION community_deletion.enforce_community_scoped_table_guard() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
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
    SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
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
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_catalog_drift() RETURNS TABLE(table_name text, problem text)
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
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
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_control_table(table_name text) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
    AS $$
        SELECT coalesce(table_name = ANY (ARRAY[
            'communities',
            'community_deletion_approvals',
            'community_deletion_checkpoints',
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
            'storage_taxonomy_sweeps']), false)
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_guard_triggers() RETURNS TABLE(table_name text, trigger_name text, function_signature text)
    LANGUAGE sql IMMUTABLE
    SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
    AS $$
        VALUES
            ('communities', 'communities_tombstone_guard', 'enforce_community_tombstone()'),
            ('communities', 'communities_tombstone_proof', 'enforce_community_tombstone_proof()'),
            ('communities', 'communities_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('communities', 'communities_grace_fence_guard', 'enforce_community_deletion_grace_fence()'),
            ('community_deletion_requests', 'community_deletion_requests_guard', 'enforce_community_deletion_request_guard()'),
            ('community_deletion_requests', 'community_deletion_requests_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('community_deletion_requests', 'community_deletion_requests_protection_guard', 'enforce_community_deletion_protection_submit()'),
            ('community_deletion_requests', 'community_deletion_requests_receipt_required', 'enforce_community_deletion_receipt_required()'),
            ('community_deletion_approvals', 'community_deletion_approvals_guard', 'enforce_community_deletion_approval_guard()'),
            ('community_deletion_approvals', 'community_deletion_approvals_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('community_deletion_approvals', 'community_deletion_approvals_grace_period', 'enforce_community_deletion_grace_period()'),
            ('community_deletion_checkpoints', 'community_deletion_checkpoints_guard', 'enforce_community_deletion_checkpoint_guard()'),
            ('community_deletion_checkpoints', 'community_deletion_checkpoints_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('community_deletion_manifest_keys', 'community_deletion_manifest_keys_guard', 'enforce_community_deletion_manifest_key_guard()'),
            ('community_deletion_manifest_keys', 'community_deletion_manifest_keys_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('community_serving_write_leases', 'community_serving_write_leases_guard', 'enforce_community_serving_write_lease_guard()'),
            ('community_serving_write_leases', 'community_serving_write_leases_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('community_scoped_tables', 'community_scoped_tables_guard', 'enforce_community_scoped_table_guard()'),
            ('community_scoped_tables', 'community_scoped_tables_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('community_deletion_settings', 'community_deletion_settings_guard', 'enforce_community_deletion_settings_guard()'),
            ('community_deletion_settings', 'community_deletion_settings_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('community_deletion_protection_events', 'community_deletion_protection_events_guard', 'enforce_community_deletion_protection_guard()'),
            ('community_deletion_protection_events', 'community_deletion_protection_events_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('community_deletion_receipts', 'community_deletion_receipts_guard', 'enforce_community_deletion_receipt_guard()'),
            ('community_deletion_receipts', 'community_deletion_receipts_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('community_deletion_storage_layout', 'community_deletion_storage_layout_guard', 'enforce_community_deletion_storage_layout_guard()'),
            ('community_deletion_storage_layout', 'community_deletion_storage_layout_truncate_guard', 'refuse_community_deletion_truncate()')
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_installed_functions() RETURNS text[]
    LANGUAGE sql IMMUTABLE
    SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
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
    SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
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

COMMENT ON FUNCTION community_deletion.enforce_community_write_fence() IS 'The write fence of a registered tenant table: refuses a write into a community that is not active (55000), a row without community_id (55000) and any write at REPEATABLE READ or SERIALIZABLE (25000); every refusal names the constraint community_write_fence.';

-- CASCADE drops the kept-row fences, on whichever tables they are.
DROP FUNCTION community_deletion.enforce_community_kept_row_fence() CASCADE;
DROP FUNCTION community_deletion.community_deletion_fenced(oid, name);
DROP FUNCTION community_deletion.community_deletion_kept_row_fenced(oid, name);
DROP TABLE community_deletion.community_deletion_excluded_tables;
DROP TABLE community_deletion.community_deletion_tenant_table;
DROP FUNCTION community_deletion.enforce_community_deletion_tenant_table_guard();
ALTER TABLE community_deletion.community_deletion_requests ALTER COLUMN community_host SET NOT NULL;
ALTER TABLE community_deletion.communities ALTER COLUMN host SET NOT NULL;
ALTER TABLE community_deletion.community_scoped_tables DROP COLUMN tenant_key;

SELECT community_deletion.community_deletion_seal_functions();
