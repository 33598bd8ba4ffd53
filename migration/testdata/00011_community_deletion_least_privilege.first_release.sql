-- Least privilege: every invariant holds against any role that is not
-- entitled to pass it. The executor's transaction-local settings only say
-- which community and fence generation it acts on; admission needs
-- membership of community_deletion_executor (of serving or executor to hold
-- and present a serving write lease). Approvals compare database roles. Every
-- control table is written only by the roles that need it; the registry
-- changes only through attach and detach; checkpoints are append-only;
-- leases are bounded; every function resolves names with a fixed search_path
-- (pg_temp last) or schema-qualifies every name; the drift report sees
-- tenant data in any schema and flags disabled guards and changed functions.
--
-- Identity is session_user throughout: it is the login (or, behind a
-- session pooler, the pooler's login), SET ROLE does not change it, and a
-- SECURITY DEFINER function cannot lend its owner's identity to a caller.

-- +goose Up
-- +goose StatementBegin
-- The per-community advisory lock key, unchanged in value; its body is now
-- schema-qualified because it is inlined into the write fence's queries and
-- so parsed with the writer's search_path.
CREATE OR REPLACE FUNCTION community_deletion_lock_key(community uuid) RETURNS bigint
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$ SELECT pg_catalog.uuid_hash_extended(community, 7161958637654340729) $$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The deletion control plane: tables that survive a community purge, now
-- with the tables of least privilege.
CREATE OR REPLACE FUNCTION community_deletion_control_table(table_name text) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
        SELECT coalesce(table_name = ANY (ARRAY[
            'communities',
            'community_deletion_approvals',
            'community_deletion_checkpoints',
            'community_deletion_created_roles',
            'community_deletion_executor_heartbeats',
            'community_deletion_function_digests',
            'community_deletion_manifest_keys',
            'community_deletion_purge_progress',
            'community_deletion_requests',
            'community_deletion_settings',
            'community_deletion_step_authorizations',
            'community_scoped_tables',
            'community_serving_write_leases',
            'storage_taxonomy_sweeps']), false)
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Whether the session's login (session_user) is a member of role_name: the
-- authority every guard asks for. SET ROLE and SECURITY DEFINER functions do
-- not change the answer.
CREATE OR REPLACE FUNCTION community_deletion_is_member(role_name name) RETURNS boolean
    LANGUAGE sql STABLE
    AS $$ SELECT pg_has_role(session_user, role_name, 'MEMBER') $$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Refuses with SQLSTATE 42501 unless the session's login is a member of one
-- of role_names; what names the refused action.
CREATE OR REPLACE FUNCTION community_deletion_require_member(role_names name[], what text) RETURNS void
    LANGUAGE plpgsql STABLE
    AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM unnest(role_names) r WHERE community_deletion_is_member(r)) THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = format('%s refused: role %s is not a member of %s', what, session_user, array_to_string(role_names, ' or '));
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Whether this transaction may write community data now. It admits a write
-- when the community is active; or when the session's login is a member of
-- community_deletion_executor and the transaction names the community and its
-- current fence generation (community_deletion.executor_community and
-- community_deletion.fence_generation) while it is quiescing or fenced; or,
-- while it is quiescing, when a member of community_deletion_serving or
-- community_deletion_executor presents a still-valid serving write lease of
-- the community (community_deletion.serving_write_lease_id, _owner,
-- _generation and _fence_generation). It takes no lock: callers take the
-- shared community lock first, in an earlier statement.
CREATE OR REPLACE FUNCTION community_write_allowed(community uuid) RETURNS boolean
    LANGUAGE plpgsql VOLATILE
    AS $$
DECLARE
    current_state text;
    current_generation bigint;
    lease_id text;
BEGIN
    SELECT c.deletion_state, c.deletion_fence_generation INTO current_state, current_generation
    FROM communities c WHERE c.id = community;
    IF current_state IS NULL THEN
        RETURN false;
    END IF;
    IF current_state = 'active' THEN
        RETURN true;
    END IF;
    IF current_state NOT IN ('quiescing', 'fenced') THEN
        RETURN false;
    END IF;
    IF coalesce(current_setting('community_deletion.executor_community', true), '') = community::text
       AND coalesce(current_setting('community_deletion.fence_generation', true), '') = current_generation::text
       AND community_deletion_is_member('community_deletion_executor') THEN
        RETURN true;
    END IF;
    IF current_state <> 'quiescing' THEN
        RETURN false;
    END IF;
    lease_id := coalesce(current_setting('community_deletion.serving_write_lease_id', true), '');
    IF lease_id !~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' THEN
        RETURN false;
    END IF;
    IF NOT (community_deletion_is_member('community_deletion_serving')
            OR community_deletion_is_member('community_deletion_executor')) THEN
        RETURN false;
    END IF;
    RETURN EXISTS (
        SELECT 1 FROM community_serving_write_leases lease
        WHERE lease.id = lease_id::uuid
          AND lease.community_id = community
          AND lease.owner = coalesce(current_setting('community_deletion.serving_write_owner', true), '')
          AND lease.generation::text
              = coalesce(current_setting('community_deletion.serving_write_generation', true), '')
          AND lease.fence_generation::text
              = coalesce(current_setting('community_deletion.serving_write_fence_generation', true), '')
          AND lease.fence_generation = current_generation
          AND lease.lease_until >= clock_timestamp());
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Installs the write fence's trigger function with every name qualified by
-- the schema of communities (or pg_catalog): it runs on every write of every
-- tenant table, so it carries no SET search_path (which costs a few
-- microseconds per call) and instead names nothing the writer's search_path,
-- temporary objects or own operators could stand in for. The admitted path
-- and its three-path structure are those of migration 00008.
DO $install$
DECLARE
    home text := (SELECT n.nspname FROM pg_catalog.pg_class c
                  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                  WHERE c.oid = 'communities'::regclass);
BEGIN
    EXECUTE replace($fence$
CREATE OR REPLACE FUNCTION @home@.enforce_community_write_fence() RETURNS trigger
    LANGUAGE plpgsql VOLATILE
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
            HINT = 'Write community data in READ COMMITTED transactions.';
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
                MESSAGE = pg_catalog.format('community write to %I refused: a row has no community_id', TG_TABLE_NAME);
        END IF;
        IF @home@.community_write_allowed(community) IS NOT TRUE THEN
            SELECT c.deletion_state INTO state FROM @home@.communities c WHERE c.id OPERATOR(pg_catalog.=) community;
            RAISE EXCEPTION USING
                ERRCODE = '55000',
                MESSAGE = pg_catalog.format('community write to %I refused: community %s is %s',
                                            TG_TABLE_NAME, community, coalesce(state, 'missing'));
        END IF;
    END LOOP;
    RETURN NULL;
END
$$
$fence$, '@home@', quote_ident(home));
END
$install$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Registers a tenant table with the deletion lifecycle. Only the table's
-- owner (a role with its privileges) may: for a 'delete' table it puts the
-- write fence on the table and each of its partitions; it grants
-- community_deletion_executor what the purge needs (SELECT, UPDATE, DELETE on
-- a 'delete' table and its partitions; SELECT and UPDATE of community_id on a
-- 'nullify' table) and community_deletion_operator SELECT of community_id for
-- the inventory's row counts; then it records the table through
-- community_deletion_register_table(). Idempotent: run it again after adding
-- partitions. It refuses tables outside the schema of communities,
-- partitions, control-plane tables, tables without a community_id uuid
-- column, a nullable community_id on a 'delete' table or a NOT NULL one on a
-- 'nullify' table, and a change of purge action (SQLSTATE 22023).
CREATE OR REPLACE FUNCTION attach_community_write_fence(target regclass, purge_action text DEFAULT 'delete')
    RETURNS void
    LANGUAGE plpgsql VOLATILE
    AS $$
DECLARE
    rel record;
    column_type regtype;
    column_not_null boolean;
    registered_action text;
    member regclass;
BEGIN
    IF purge_action IS NULL OR purge_action NOT IN ('delete', 'nullify') THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('purge_action must be ''delete'' or ''nullify'', not %L', purge_action);
    END IF;
    SELECT c.relname, c.relkind, c.relispartition, c.relnamespace, c.relowner INTO rel
    FROM pg_class c WHERE c.oid = target;
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

    SELECT registered.purge_action INTO registered_action
    FROM community_scoped_tables registered WHERE registered.table_name = rel.relname;
    IF registered_action IS NOT NULL AND registered_action <> purge_action THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('%s is registered with purge_action %L; it cannot change to %L',
                             target, registered_action, purge_action);
    END IF;

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
-- Unregisters a tenant table: only its owner may, and not while a deletion
-- is in flight (a request approved and not yet purged), since its rows would
-- escape the purge the approval covered. It removes the table through
-- community_deletion_unregister_table(), then drops the write fence from the
-- table and its partitions and revokes what attach granted.
CREATE OR REPLACE FUNCTION detach_community_write_fence(target regclass) RETURNS void
    LANGUAGE plpgsql VOLATILE
    AS $$
DECLARE
    rel record;
    member regclass;
BEGIN
    SELECT c.relname, c.relowner INTO rel FROM pg_class c WHERE c.oid = target;
    IF NOT pg_has_role(current_user, rel.relowner, 'USAGE') THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = format('detach of %s refused: only its owner (%s) may unregister it', target, pg_get_userbyid(rel.relowner));
    END IF;
    IF (SELECT c.relnamespace FROM pg_class c WHERE c.oid = target)
       IS DISTINCT FROM (SELECT c.relnamespace FROM pg_class c WHERE c.oid = 'communities'::regclass)
       OR NOT EXISTS (SELECT 1 FROM community_scoped_tables r WHERE r.table_name = rel.relname) THEN
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
-- Records a tenant table in community_scoped_tables, the one way into the
-- registry. SECURITY DEFINER: the caller needs no privilege on the registry,
-- only to be (a member of) the table's owner; the registry guard checks the
-- table's shape and, for 'delete', its complete fence. Idempotent.
CREATE OR REPLACE FUNCTION community_deletion_register_table(target regclass, purge_action text) RETURNS void
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    AS $$
DECLARE
    rel record;
BEGIN
    SELECT c.relname, c.relowner INTO rel FROM pg_class c WHERE c.oid = target;
    IF rel.relname IS NULL OR NOT pg_has_role(session_user, rel.relowner, 'MEMBER') THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = format('registration of %s refused: role %s does not own it', target, session_user);
    END IF;
    INSERT INTO community_scoped_tables (table_name, purge_action)
    VALUES (rel.relname, purge_action)
    ON CONFLICT (table_name) DO NOTHING;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Removes a table from community_scoped_tables, the one way out of the
-- registry. SECURITY DEFINER: an existing table may be unregistered by (a
-- member of) its owner, a table that no longer exists by (a member of) the
-- owner of communities; never while a deletion is in flight.
CREATE OR REPLACE FUNCTION community_deletion_unregister_table(table_name text) RETURNS void
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
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
-- Guards community_scoped_tables: rows come and go only through
-- community_deletion_register_table() and community_deletion_unregister_table()
-- (so through attach and detach), never by plain DML; a registration never
-- changes. An inserted row must describe a table in the schema of
-- communities with the shape its purge action needs and, for 'delete', the
-- complete write fence on it and every partition; registered_at and
-- registered_by are the database's. A row leaves only while no deletion is
-- in flight. Rejections use SQLSTATE 23000, the wrong path 42501.
CREATE OR REPLACE FUNCTION enforce_community_scoped_table_guard() RETURNS trigger
    LANGUAGE plpgsql VOLATILE
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
-- Whether a table carries the complete, enabled write fence: its INSERT,
-- UPDATE and DELETE statement triggers over their transition tables, enabled
-- for ordinary sessions.
CREATE OR REPLACE FUNCTION community_deletion_fenced(relation oid) RETURNS boolean
    LANGUAGE sql STABLE
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
    $$;
-- +goose StatementEnd

CREATE TRIGGER community_scoped_tables_guard
    BEFORE INSERT OR UPDATE OR DELETE ON community_scoped_tables
    FOR EACH ROW EXECUTE FUNCTION enforce_community_scoped_table_guard();
CREATE TRIGGER community_scoped_tables_truncate_guard
    BEFORE TRUNCATE ON community_scoped_tables
    FOR EACH STATEMENT EXECUTE FUNCTION refuse_community_deletion_truncate();

-- +goose StatementBegin
-- The digest of a function's definition: its body, configuration (search
-- path), security, volatility and owner.
CREATE OR REPLACE FUNCTION community_deletion_function_digest(fn oid) RETURNS text
    LANGUAGE sql STABLE
    AS $$
        SELECT md5(concat_ws(E'\x1f', p.prosrc, array_to_string(p.proconfig, E'\x1e'), p.prosecdef::text,
                             p.provolatile::text, pg_get_userbyid(p.proowner)))
        FROM pg_proc p WHERE p.oid = fn
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The guard triggers the schema installs on its control tables: table,
-- trigger, function. The drift report flags one that is missing or not
-- enabled for ordinary sessions.
CREATE OR REPLACE FUNCTION community_deletion_guard_triggers()
    RETURNS TABLE (table_name text, trigger_name text, function_signature text)
    LANGUAGE sql IMMUTABLE
    AS $$
        VALUES
            ('communities', 'communities_tombstone_guard', 'enforce_community_tombstone()'),
            ('communities', 'communities_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('community_deletion_requests', 'community_deletion_requests_guard', 'enforce_community_deletion_request_guard()'),
            ('community_deletion_requests', 'community_deletion_requests_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('community_deletion_approvals', 'community_deletion_approvals_guard', 'enforce_community_deletion_approval_guard()'),
            ('community_deletion_approvals', 'community_deletion_approvals_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('community_deletion_checkpoints', 'community_deletion_checkpoints_guard', 'enforce_community_deletion_checkpoint_guard()'),
            ('community_deletion_checkpoints', 'community_deletion_checkpoints_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('community_deletion_manifest_keys', 'community_deletion_manifest_keys_guard', 'enforce_community_deletion_manifest_key_guard()'),
            ('community_deletion_manifest_keys', 'community_deletion_manifest_keys_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('community_serving_write_leases', 'community_serving_write_leases_guard', 'enforce_community_serving_write_lease_guard()'),
            ('community_serving_write_leases', 'community_serving_write_leases_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('community_scoped_tables', 'community_scoped_tables_guard', 'enforce_community_scoped_table_guard()'),
            ('community_scoped_tables', 'community_scoped_tables_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('community_deletion_settings', 'community_deletion_settings_guard', 'enforce_community_deletion_settings_guard()'),
            ('community_deletion_settings', 'community_deletion_settings_truncate_guard', 'refuse_community_deletion_truncate()')
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Compares the live catalog with the registry and with what the migrations
-- installed, exactly. One row per problem:
--   unregistered      a table in any schema with a community_id column (of any type) or a
--                     foreign key to communities that is neither registered nor a control table
--   missing           a registered table that no longer exists or lost its community_id uuid column
--   shape             a registered 'delete' table whose community_id became nullable, or a
--                     'nullify' table whose community_id became NOT NULL
--   unfenced          a registered 'delete' table, or one of its partitions, without the
--                     complete, enabled fence
--   stray_fence       a fence trigger on a table that is not a registered 'delete' table (or its partition)
--   guard_missing     a guard trigger of a control table is gone or runs another function
--   guard_disabled    a guard trigger is disabled (or fires only for replication sessions)
--   function_changed  a function whose definition differs from the one the migrations recorded
--   function_missing  a function the migrations recorded is gone
-- Deletion treats any row as drift and refuses to destroy anything.
CREATE OR REPLACE FUNCTION community_deletion_catalog_drift()
    RETURNS TABLE (table_name text, problem text)
    LANGUAGE sql STABLE
    AS $$
    WITH home AS (
        SELECT c.relnamespace AS namespace FROM pg_class c WHERE c.oid = 'communities'::regclass
    ), live AS (
        -- Every table, in any schema but the system's and temporary ones, that
        -- looks like tenant data: a community_id column of any type, or a
        -- foreign key to communities under any column name.
        SELECT c.oid, c.relnamespace = home.namespace AS at_home, c.relname::text AS relname,
               CASE WHEN c.relnamespace = home.namespace THEN c.relname::text
                    ELSE format('%I.%I', n.nspname, c.relname) END AS display_name
        FROM pg_class c
        JOIN pg_namespace n ON n.oid = c.relnamespace
        CROSS JOIN home
        WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition
          AND n.nspname NOT IN ('pg_catalog', 'information_schema')
          AND n.nspname !~ '^pg_(toast|temp_|toast_temp_)'
          AND (EXISTS (SELECT 1 FROM pg_attribute a
                       WHERE a.attrelid = c.oid AND a.attname = 'community_id' AND NOT a.attisdropped)
               OR EXISTS (SELECT 1 FROM pg_constraint f
                          WHERE f.conrelid = c.oid AND f.contype = 'f' AND f.confrelid = 'communities'::regclass))
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
    ), fence_members AS (
        -- A registered 'delete' table and, when it is partitioned, every partition.
        SELECT registered.table_name, registered.oid
        FROM registered
        WHERE registered.purge_action = 'delete' AND registered.oid IS NOT NULL
        UNION
        SELECT registered.table_name, tree.relid
        FROM registered, pg_partition_tree(registered.oid) tree
        WHERE registered.purge_action = 'delete' AND registered.oid IS NOT NULL
    ), guards AS (
        SELECT g.table_name, g.trigger_name, g.function_signature, t.tgenabled,
               t.tgfoid = to_regprocedure(g.function_signature) AS same_function
        FROM community_deletion_guard_triggers() g
        LEFT JOIN pg_trigger t ON t.tgrelid = to_regclass(g.table_name) AND t.tgname = g.trigger_name
    ), functions AS (
        SELECT d.function_signature, d.digest, to_regprocedure(d.function_signature) AS oid
        FROM community_deletion_function_digests d
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
    UNION ALL
    SELECT DISTINCT c.relname::text, 'stray_fence'
    FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
    WHERE t.tgfoid = 'enforce_community_write_fence()'::regprocedure
      AND NOT t.tgisinternal
      AND NOT EXISTS (SELECT 1 FROM fence_members WHERE fence_members.oid = t.tgrelid)
    UNION ALL
    SELECT guards.table_name || '.' || guards.trigger_name,
           CASE WHEN guards.tgenabled IS NULL OR NOT guards.same_function THEN 'guard_missing' ELSE 'guard_disabled' END
    FROM guards
    WHERE guards.tgenabled IS NULL OR NOT guards.same_function OR guards.tgenabled NOT IN ('O', 'A')
    UNION ALL
    SELECT functions.function_signature,
           CASE WHEN functions.oid IS NULL THEN 'function_missing' ELSE 'function_changed' END
    FROM functions
    WHERE functions.oid IS NULL OR community_deletion_function_digest(functions.oid::oid) <> functions.digest
    ORDER BY 1, 2
    $$;
-- +goose StatementEnd


-- +goose StatementBegin
CREATE OR REPLACE FUNCTION enforce_community_tombstone() RETURNS trigger
    LANGUAGE plpgsql VOLATILE
    AS $$
DECLARE
    request_stage text;
    request_generation bigint;
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.deletion_state <> 'active' OR NEW.deletion_fence_generation <> 0 OR NEW.deleted_at IS NOT NULL THEN
            RAISE EXCEPTION USING ERRCODE = '23000',
                MESSAGE = format('community %s refused: a community is created active at fence generation 0', NEW.id);
        END IF;
        RETURN NEW;
    END IF;

    IF TG_OP = 'DELETE' THEN
        IF OLD.deletion_state = 'tombstone' THEN
            RAISE EXCEPTION USING ERRCODE = '55000',
                MESSAGE = format('community %s is a tombstone: tombstones are permanent', OLD.id);
        END IF;
        IF EXISTS (SELECT 1 FROM community_deletion_requests r WHERE r.community_id = OLD.id) THEN
            RAISE EXCEPTION USING ERRCODE = '55000',
                MESSAGE = format('community %s has a deletion request: it is removed only by the deletion lifecycle', OLD.id);
        END IF;
        IF OLD.deletion_state <> 'active' THEN
            RAISE EXCEPTION USING ERRCODE = '55000',
                MESSAGE = format('community %s is %s: it is removed only by the deletion lifecycle', OLD.id, OLD.deletion_state);
        END IF;
        RETURN OLD;
    END IF;

    IF OLD.deletion_state = 'tombstone' THEN
        IF NEW IS DISTINCT FROM OLD THEN
            RAISE EXCEPTION USING ERRCODE = '55000',
                MESSAGE = format('community %s is a tombstone: tombstones are permanent', OLD.id);
        END IF;
        RETURN NEW;
    END IF;
    IF NEW.id IS DISTINCT FROM OLD.id THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('community %s refused: a community id never changes', OLD.id);
    END IF;
    IF NEW.deletion_fence_generation < OLD.deletion_fence_generation THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('community %s refused: deletion_fence_generation never decreases (%s to %s)',
                             OLD.id, OLD.deletion_fence_generation, NEW.deletion_fence_generation);
    END IF;
    -- The host is pinned while a deletion request names it.
    IF NEW.host IS DISTINCT FROM OLD.host AND EXISTS (
        SELECT 1 FROM community_deletion_requests r
        WHERE r.community_id = OLD.id AND r.stage <> 'aborted') THEN
        RAISE EXCEPTION USING ERRCODE = '55000',
            MESSAGE = format('community %s refused: its host cannot change while a deletion request names it', OLD.id);
    END IF;
    IF NEW.deletion_state = OLD.deletion_state
       AND NEW.deletion_fence_generation = OLD.deletion_fence_generation
       AND OLD.deletion_state = 'active' THEN
        -- An ordinary change to an active community.
        RETURN NEW;
    END IF;
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION USING ERRCODE = '25000',
            MESSAGE = format('community %s refused: isolation level %s pins a snapshot that cannot see its deletion request',
                             OLD.id, current_setting('transaction_isolation'));
    END IF;

    IF (coalesce(current_setting('community_deletion.executor_community', true), '') <> OLD.id::text
        OR coalesce(current_setting('community_deletion.fence_generation', true), '')
           <> NEW.deletion_fence_generation::text
        OR NOT community_deletion_is_member('community_deletion_executor'))
       AND NOT (NEW.deletion_state = 'active' AND community_deletion_step_authorized(OLD.id, 'restore_active')) THEN
        RAISE EXCEPTION USING ERRCODE = '55000',
            MESSAGE = format('community %s refused: while %s, and for any change of deletion state or fence generation, it changes only inside the authorized deletion executor',
                             OLD.id, OLD.deletion_state);
    END IF;
    IF NOT (CASE
        -- An abort: back to active, always under a new fence generation.
        WHEN NEW.deletion_state = 'active' THEN OLD.deletion_state IN ('quiescing', 'fenced')
            AND NEW.deletion_fence_generation > OLD.deletion_fence_generation
        -- The fence: always a new generation.
        WHEN OLD.deletion_state = 'quiescing' AND NEW.deletion_state = 'fenced'
            THEN NEW.deletion_fence_generation > OLD.deletion_fence_generation
        WHEN (OLD.deletion_state, NEW.deletion_state) IN (
                ('active', 'quiescing'), ('quiescing', 'quiescing'), ('fenced', 'fenced'), ('fenced', 'tombstone'))
            THEN NEW.deletion_fence_generation = OLD.deletion_fence_generation
        ELSE false
    END) THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('community %s refused: deletion_state %s -> %s at fence generation %s -> %s is not a lifecycle step',
                             OLD.id, OLD.deletion_state, NEW.deletion_state,
                             OLD.deletion_fence_generation, NEW.deletion_fence_generation);
    END IF;

    -- Each step answers to the open deletion request of the community: quiesce
    -- and fence an approved request, abort an approved or fenced one (which
    -- is then aborted in the same transaction), and tombstone only a request
    -- whose bindings are removed under this very fence generation.
    IF NEW.deletion_state IS DISTINCT FROM OLD.deletion_state
       OR NEW.deletion_fence_generation IS DISTINCT FROM OLD.deletion_fence_generation THEN
        -- FOR SHARE waits for a concurrent change of the request (an abort)
        -- and reads its newest version.
        SELECT r.stage, r.fence_generation INTO request_stage, request_generation
        FROM community_deletion_requests r
        WHERE r.community_id = OLD.id AND r.stage <> 'aborted'
        FOR SHARE;
        IF NOT (CASE NEW.deletion_state
            WHEN 'quiescing' THEN request_stage = 'approved'
            WHEN 'fenced' THEN request_stage = 'approved'
            WHEN 'tombstone' THEN request_stage = 'bindings_removed'
                AND request_generation = NEW.deletion_fence_generation
            ELSE request_stage IN ('approved', 'fenced')
        END) IS TRUE THEN
            RAISE EXCEPTION USING ERRCODE = '55000',
                MESSAGE = format('community %s refused: deletion_state %s -> %s does not match its deletion request (%s)',
                                 OLD.id, OLD.deletion_state, NEW.deletion_state, coalesce(request_stage, 'none open'));
        END IF;
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION enforce_community_deletion_request_guard() RETURNS trigger
    LANGUAGE plpgsql VOLATILE
    AS $$
DECLARE
    community_state text;
    community_generation bigint;
    community_host text;
    action text;
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('deletion request %s refused: deletion requests are permanent audit records', OLD.id);
    END IF;

    IF TG_OP = 'INSERT' THEN
        IF NEW.stage <> 'submitted'
           OR NEW.schema_manifest IS NOT NULL OR NEW.storage_manifest IS NOT NULL
           OR NEW.inventory_manifest IS NOT NULL OR NEW.inventory_digest IS NOT NULL
           OR NEW.inventory_frozen_at IS NOT NULL OR NEW.destructive_storage_manifest IS NOT NULL
           OR NEW.fence_generation IS NOT NULL OR NEW.lease_owner IS NOT NULL OR NEW.lease_generation <> 0
           OR NEW.lease_until IS NOT NULL OR NEW.destructive_storage_frozen_at IS NOT NULL
           OR NEW.blocked_at IS NOT NULL OR NEW.blocked_reason IS NOT NULL
           OR NEW.quiescing_started_at IS NOT NULL OR NEW.pre_quiesce_archived_at IS NOT NULL
           OR NEW.retry_stage IS NOT NULL OR NEW.retry_count <> 0 OR NEW.attempts <> 0
           OR NEW.last_error IS NOT NULL OR NEW.last_error_at IS NOT NULL
           OR NEW.completed_at IS NOT NULL OR NEW.aborted_at IS NOT NULL
           OR NEW.aborted_by IS NOT NULL OR NEW.abort_reason IS NOT NULL THEN
            RAISE EXCEPTION USING ERRCODE = '23000',
                MESSAGE = format('deletion request %s refused: a request is created submitted, with nothing frozen, leased or blocked', NEW.id);
        END IF;
        SELECT c.deletion_state, c.host INTO community_state, community_host
        FROM communities c WHERE c.id = NEW.community_id;
        IF community_state IS DISTINCT FROM 'active' OR NEW.community_host IS DISTINCT FROM community_host THEN
            RAISE EXCEPTION USING ERRCODE = '23000',
                MESSAGE = format('deletion request refused: community %s is %s or its host is not %L',
                                 NEW.community_id, coalesce(community_state, 'missing'), NEW.community_host);
        END IF;
        NEW.requested_by_role := session_user;
        NEW.created_at := now();
        NEW.updated_at := now();
        NEW.next_attempt_at := now();
        RETURN NEW;
    END IF;

    IF OLD.stage IN ('aborted', 'retention_pending') THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('deletion request %s refused: stage %s is terminal', OLD.id, OLD.stage);
    END IF;
    IF (NEW.id, NEW.community_id, NEW.community_host, NEW.requested_by, NEW.requested_by_role, NEW.created_at)
       IS DISTINCT FROM (OLD.id, OLD.community_id, OLD.community_host, OLD.requested_by, OLD.requested_by_role, OLD.created_at) THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('deletion request %s refused: its target, requester and creation time never change', OLD.id);
    END IF;
    -- Who may make this change: operators inventory, approve, abort and
    -- unblock, and then only clear a lease or a block; the executor does
    -- everything else.
    IF NEW.stage IS DISTINCT FROM OLD.stage THEN
        action := format('deletion request %s stage %s -> %s', OLD.id, OLD.stage, NEW.stage);
        IF NEW.stage IN ('inventoried', 'approved', 'aborted') THEN
            PERFORM community_deletion_require_member(ARRAY['community_deletion_operator']::name[], action);
        ELSE
            PERFORM community_deletion_require_member(ARRAY['community_deletion_executor']::name[], action);
            action := NULL;
        END IF;
    ELSIF OLD.blocked_at IS NOT NULL AND NEW.blocked_at IS NULL THEN
        action := format('unblock of deletion request %s', OLD.id);
        PERFORM community_deletion_require_member(ARRAY['community_deletion_operator']::name[], action);
    ELSE
        PERFORM community_deletion_require_member(ARRAY['community_deletion_executor']::name[],
                                                  format('change of deletion request %s', OLD.id));
    END IF;
    IF action IS NOT NULL
       AND ((NEW.lease_owner IS NOT NULL AND NEW.lease_owner IS DISTINCT FROM OLD.lease_owner)
            OR (NEW.lease_until IS NOT NULL AND NEW.lease_until IS DISTINCT FROM OLD.lease_until)
            OR (NEW.lease_generation <> OLD.lease_generation AND NEW.stage <> 'aborted')
            OR NEW.attempts <> OLD.attempts
            OR (NEW.blocked_at IS NOT NULL AND NEW.blocked_at IS DISTINCT FROM OLD.blocked_at)
            OR (NEW.pre_quiesce_archived_at, NEW.quiescing_started_at)
               IS DISTINCT FROM (OLD.pre_quiesce_archived_at, OLD.quiescing_started_at)) THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = format('%s refused: an operator only clears a lease or a block, never takes, extends or sets one', action);
    END IF;
    -- Executor leases are bounded: an hour from now at most.
    IF NEW.lease_until IS DISTINCT FROM OLD.lease_until AND NEW.lease_until > clock_timestamp() + interval '1 hour' THEN
        RAISE EXCEPTION USING ERRCODE = '23514',
            MESSAGE = format('deletion request %s refused: an executor lease lasts at most 1 hour, not until %s', OLD.id, NEW.lease_until);
    END IF;
    IF (NEW.schema_manifest, NEW.storage_manifest, NEW.inventory_manifest, NEW.inventory_digest, NEW.inventory_frozen_at)
       IS DISTINCT FROM (OLD.schema_manifest, OLD.storage_manifest, OLD.inventory_manifest, OLD.inventory_digest, OLD.inventory_frozen_at)
       AND NOT (OLD.stage = 'submitted' AND NEW.stage = 'inventoried'
                AND OLD.schema_manifest IS NULL AND OLD.storage_manifest IS NULL
                AND OLD.inventory_manifest IS NULL AND OLD.inventory_digest IS NULL
                AND OLD.inventory_frozen_at IS NULL) THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('deletion request %s refused: the frozen inventory is written once, by submitted -> inventoried', OLD.id);
    END IF;
    IF (NEW.destructive_storage_manifest, NEW.destructive_storage_frozen_at)
       IS DISTINCT FROM (OLD.destructive_storage_manifest, OLD.destructive_storage_frozen_at)
       AND NOT (OLD.stage = 'fenced' AND NEW.stage = 'fenced'
                AND OLD.destructive_storage_manifest IS NULL AND OLD.destructive_storage_frozen_at IS NULL) THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('deletion request %s refused: the destructive storage manifest is written once, while fenced', OLD.id);
    END IF;
    IF NEW.lease_generation < OLD.lease_generation
       OR (OLD.fence_generation IS NOT NULL
           AND (NEW.fence_generation IS NULL OR NEW.fence_generation < OLD.fence_generation)) THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('deletion request %s refused: lease and fence generations never decrease', OLD.id);
    END IF;
    IF NEW.fence_generation IS DISTINCT FROM OLD.fence_generation
       AND NOT (NEW.stage IN ('fenced', 'aborted') AND NEW.stage IS DISTINCT FROM OLD.stage) THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('deletion request %s refused: fence_generation is set only by the step to fenced or aborted', OLD.id);
    END IF;

    IF NEW.stage IS DISTINCT FROM OLD.stage THEN
        IF current_setting('transaction_isolation') <> 'read committed' THEN
            RAISE EXCEPTION USING ERRCODE = '25000',
                MESSAGE = format('deletion request %s refused: isolation level %s pins a snapshot that cannot see the community''s current state',
                                 OLD.id, current_setting('transaction_isolation'));
        END IF;
        IF NOT (NEW.stage = community_deletion_next_stage(OLD.stage)
                OR (NEW.stage = 'aborted' AND OLD.stage IN ('submitted', 'inventoried', 'approved', 'fenced'))) THEN
            RAISE EXCEPTION USING ERRCODE = '23000',
                MESSAGE = format('deletion request %s refused: stage %s -> %s is not a lifecycle step', OLD.id, OLD.stage, NEW.stage);
        END IF;
        IF NEW.stage = 'drained' AND NEW.destructive_storage_manifest IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = '23000',
                MESSAGE = format('deletion request %s refused: drained needs the destructive storage manifest frozen', OLD.id);
        END IF;
        IF NEW.stage = 'approved' AND NOT EXISTS (
            SELECT 1 FROM community_deletion_approvals approval
            WHERE approval.request_id = NEW.id
              AND approval.community_id = NEW.community_id
              AND approval.inventory_digest = NEW.inventory_digest) THEN
            RAISE EXCEPTION USING ERRCODE = '23000',
                MESSAGE = format('deletion request %s refused: approved needs an approval of its frozen inventory digest', OLD.id);
        END IF;
    END IF;

    -- Every step (and the destructive freeze) must match the community: from
    -- fenced to bindings_removed it is fenced at the request's generation,
    -- from postgres_purged on it is that generation's tombstone, and an
    -- abort leaves it active. FOR SHARE waits for a concurrent lifecycle
    -- change of the community and reads its newest version.
    IF NEW.stage IS DISTINCT FROM OLD.stage
       OR NEW.destructive_storage_manifest IS DISTINCT FROM OLD.destructive_storage_manifest THEN
        SELECT c.deletion_state, c.deletion_fence_generation INTO community_state, community_generation
        FROM communities c WHERE c.id = NEW.community_id
        FOR SHARE;
        IF NOT (CASE
            WHEN NEW.stage IN ('fenced', 'drained', 'bindings_removed')
                THEN community_state = 'fenced' AND community_generation = NEW.fence_generation
            WHEN NEW.stage IN ('postgres_purged', 'cache_purged', 'logically_verified', 'retention_pending')
                THEN community_state = 'tombstone' AND community_generation = NEW.fence_generation
            WHEN NEW.stage = 'aborted' THEN community_state = 'active'
            ELSE true
        END) IS TRUE THEN
            RAISE EXCEPTION USING ERRCODE = '23000',
                MESSAGE = format('deletion request %s refused: stage %s does not match community %s, which is %s at fence generation %s',
                                 OLD.id, NEW.stage, NEW.community_id, community_state, community_generation);
        END IF;
    END IF;
    NEW.updated_at := now();
    RETURN NEW;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION enforce_community_deletion_approval_guard() RETURNS trigger
    LANGUAGE plpgsql VOLATILE
    AS $$
DECLARE
    request community_deletion_requests%ROWTYPE;
BEGIN
    IF TG_OP <> 'INSERT' THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('deletion approval %s refused: approvals are immutable evidence', OLD.request_id);
    END IF;
    SELECT * INTO request FROM community_deletion_requests r WHERE r.id = NEW.request_id FOR UPDATE;
    IF request.id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('deletion approval refused: request %s does not exist', NEW.request_id);
    END IF;
    IF request.stage <> 'inventoried' OR request.blocked_at IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('deletion approval refused: request %s is %s%s, not an unblocked inventoried request',
                             request.id, request.stage, CASE WHEN request.blocked_at IS NULL THEN '' ELSE ' and blocked' END);
    END IF;
    IF NEW.community_id IS DISTINCT FROM request.community_id
       OR NEW.inventory_digest IS DISTINCT FROM request.inventory_digest THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('deletion approval refused: it does not match request %s''s community and frozen inventory digest', request.id);
    END IF;
    IF lower(regexp_replace(NEW.approved_by, '^[[:space:]]+|[[:space:]]+$', '', 'g'))
       = lower(regexp_replace(request.requested_by, '^[[:space:]]+|[[:space:]]+$', '', 'g')) THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('deletion approval refused: %s requested deletion %s and cannot also approve it', request.requested_by, request.id);
    END IF;
    -- The two-person rule on identities: the approver's database role is not
    -- the submitter's, unless the deployment declared that its operators
    -- share one role (community_deletion_settings).
    IF request.requested_by_role IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('deletion approval refused: request %s was submitted before submitters were recorded as database roles; abort it and submit it again', request.id);
    END IF;
    NEW.approved_by_role := session_user;
    IF NEW.approved_by_role = request.requested_by_role AND NOT community_deletion_operators_share_role() THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('deletion approval refused: role %s submitted deletion %s and cannot also approve it', session_user, request.id);
    END IF;
    NEW.approved_at := now();
    RETURN NEW;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION enforce_community_serving_write_lease_guard() RETURNS trigger
    LANGUAGE plpgsql VOLATILE
    AS $$
DECLARE
    community_state text;
    community_generation bigint;
BEGIN
    IF TG_OP = 'DELETE' THEN
        -- Anyone entitled to the table may reap an expired lease; an
        -- unexpired one is released only by its holders' role.
        IF OLD.lease_until >= clock_timestamp() THEN
            PERFORM community_deletion_require_member(ARRAY['community_deletion_serving', 'community_deletion_executor']::name[],
                                                      format('release of unexpired serving write lease %s', OLD.id));
        END IF;
        RETURN OLD;
    END IF;
    PERFORM community_deletion_require_member(ARRAY['community_deletion_serving', 'community_deletion_executor']::name[],
                                              format('serving write lease of community %s', NEW.community_id));
    IF TG_OP = 'INSERT' THEN
        PERFORM assert_community_write_allowed(NEW.community_id);
        SELECT c.deletion_state, c.deletion_fence_generation INTO community_state, community_generation
        FROM communities c WHERE c.id = NEW.community_id;
        IF community_state IS DISTINCT FROM 'active' OR NEW.fence_generation IS DISTINCT FROM community_generation THEN
            RAISE EXCEPTION USING ERRCODE = '55000',
                MESSAGE = format('community write refused: a new serving write lease needs community %s active at fence generation %s, and it is %s at %s',
                                 NEW.community_id, NEW.fence_generation, coalesce(community_state, 'missing'), community_generation);
        END IF;
        NEW.generation := nextval('community_serving_write_lease_generation_seq');
        NEW.created_at := now();
        NEW.heartbeat_at := now();
        RETURN NEW;
    END IF;
    -- heartbeat_at is the database clock of the last extension; the lease
    -- bound CHECK measures from it.
    NEW.heartbeat_at := CASE WHEN NEW.lease_until > OLD.lease_until THEN now() ELSE OLD.heartbeat_at END;

    IF (NEW.id, NEW.community_id, NEW.operation, NEW.owner, NEW.generation, NEW.fence_generation, NEW.created_at)
       IS DISTINCT FROM (OLD.id, OLD.community_id, OLD.operation, OLD.owner, OLD.generation, OLD.fence_generation, OLD.created_at) THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('serving write lease %s refused: a lease''s identity never changes', OLD.id);
    END IF;
    IF NEW.lease_until > OLD.lease_until THEN
        IF current_setting('transaction_isolation') <> 'read committed' THEN
            RAISE EXCEPTION USING ERRCODE = '25000',
                MESSAGE = format('community write refused: isolation level %s pins a snapshot that cannot see the deletion fence',
                                 current_setting('transaction_isolation'));
        END IF;
        PERFORM pg_advisory_xact_lock_shared(community_deletion_lock_key(OLD.community_id));
        SELECT c.deletion_state, c.deletion_fence_generation INTO community_state, community_generation
        FROM communities c WHERE c.id = NEW.community_id;
        IF OLD.lease_until < clock_timestamp()
           OR community_state NOT IN ('active', 'quiescing') OR community_state IS NULL
           OR community_generation IS DISTINCT FROM OLD.fence_generation THEN
            RAISE EXCEPTION USING ERRCODE = '55000',
                MESSAGE = format('community write refused: serving write lease %s is expired or its community %s is %s at fence generation %s',
                                 OLD.id, OLD.community_id, coalesce(community_state, 'missing'), community_generation);
        END IF;
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Whether the owner of the schema authorized step on community in this very
-- transaction, by a row only it can write (see
-- community_deletion_restore_active). SECURITY DEFINER so that anyone's guard
-- can ask; the answer is only ever about the caller's own transaction.
CREATE OR REPLACE FUNCTION community_deletion_step_authorized(community uuid, step text) RETURNS boolean
    LANGUAGE sql STABLE SECURITY DEFINER
    AS $$
        SELECT EXISTS (
            SELECT 1 FROM community_deletion_step_authorizations a
            WHERE a.transaction_id = pg_current_xact_id()
              AND a.community_id = community_deletion_step_authorized.community
              AND a.step = community_deletion_step_authorized.step)
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Whether the deployment declared that its operators share one database role
-- (the newest row of community_deletion_settings; off when there is none).
CREATE OR REPLACE FUNCTION community_deletion_operators_share_role() RETURNS boolean
    LANGUAGE sql STABLE
    AS $$
        SELECT coalesce((SELECT s.operators_share_role FROM community_deletion_settings s
                         ORDER BY s.sequence DESC LIMIT 1), false)
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Returns a quiescing or fenced community to active under a new fence
-- generation, for an operator aborting its approved or fenced request, and
-- returns that generation. SECURITY DEFINER: operators are not the executor,
-- so it authorizes exactly this one step by a row of
-- community_deletion_step_authorizations that the tombstone guard reads in
-- the same transaction. The caller aborts the request in that transaction;
-- until it is aborted, the request's later steps are refused (its community
-- no longer matches), so nothing is destroyed.
CREATE OR REPLACE FUNCTION community_deletion_restore_active(request_id uuid, archived_at timestamptz) RETURNS bigint
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    AS $$
DECLARE
    request_community uuid;
    request_stage text;
    state text;
    generation bigint;
BEGIN
    PERFORM community_deletion_require_member(ARRAY['community_deletion_operator']::name[],
                                              format('restore of the community of deletion %s', request_id));
    SELECT r.community_id, r.stage INTO request_community, request_stage
    FROM community_deletion_requests r WHERE r.id = request_id FOR UPDATE;
    IF request_stage IS DISTINCT FROM 'approved' AND request_stage IS DISTINCT FROM 'fenced' THEN
        RAISE EXCEPTION USING ERRCODE = '55000',
            MESSAGE = format('restore refused: deletion %s is %s, not approved or fenced', request_id, coalesce(request_stage, 'missing'));
    END IF;
    -- FOR NO KEY UPDATE, as every lifecycle step: see CommunityGetForUpdate.
    SELECT c.deletion_state, c.deletion_fence_generation INTO state, generation
    FROM communities c WHERE c.id = request_community FOR NO KEY UPDATE;
    IF state NOT IN ('quiescing', 'fenced') THEN
        RAISE EXCEPTION USING ERRCODE = '55000',
            MESSAGE = format('restore refused: community %s is %s, not quiescing or fenced', request_community, state);
    END IF;
    INSERT INTO community_deletion_step_authorizations (community_id, step) VALUES (request_community, 'restore_active');
    UPDATE communities c
    SET deletion_state = 'active', deletion_fence_generation = generation + 1,
        archived_at = community_deletion_restore_active.archived_at
    WHERE c.id = request_community;
    DELETE FROM community_deletion_step_authorizations a
    WHERE a.transaction_id = pg_current_xact_id() AND a.community_id = request_community AND a.step = 'restore_active';
    RETURN generation + 1;
END
$$;
-- +goose StatementEnd


-- +goose StatementBegin
-- Guards community_deletion_checkpoints, the audit trail: rows are
-- append-only. Operators append only their own audit units ('operator_…');
-- the executor appends everything else and moves a started unit once to
-- completed or failed. started_at and completed_at are the database clock.
-- A row is never deleted (SQLSTATE 23000); the wrong role gets 42501.
CREATE OR REPLACE FUNCTION enforce_community_deletion_checkpoint_guard() RETURNS trigger
    LANGUAGE plpgsql VOLATILE
    AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('checkpoint %s of deletion %s refused: checkpoints are append-only audit records', OLD.unit_key, OLD.request_id);
    END IF;
    IF TG_OP = 'INSERT' THEN
        IF NEW.unit_key LIKE 'operator\_%' THEN
            PERFORM community_deletion_require_member(ARRAY['community_deletion_operator']::name[],
                                                      format('operator checkpoint %s of deletion %s', NEW.unit_key, NEW.request_id));
        ELSE
            PERFORM community_deletion_require_member(ARRAY['community_deletion_executor']::name[],
                                                      format('checkpoint %s of deletion %s', NEW.unit_key, NEW.request_id));
        END IF;
        NEW.started_at := now();
        NEW.completed_at := CASE WHEN NEW.status = 'completed' THEN now() END;
        RETURN NEW;
    END IF;
    PERFORM community_deletion_require_member(ARRAY['community_deletion_executor']::name[],
                                              format('update of checkpoint %s of deletion %s', OLD.unit_key, OLD.request_id));
    IF OLD.status <> 'started' OR NEW.status NOT IN ('completed', 'failed')
       OR (NEW.sequence, NEW.request_id, NEW.stage, NEW.unit_key, NEW.lease_generation, NEW.attempts, NEW.started_at)
          IS DISTINCT FROM (OLD.sequence, OLD.request_id, OLD.stage, OLD.unit_key, OLD.lease_generation, OLD.attempts, OLD.started_at) THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('checkpoint %s of deletion %s refused: checkpoints are append-only; a started unit moves once to completed or failed',
                             OLD.unit_key, OLD.request_id);
    END IF;
    NEW.completed_at := CASE WHEN NEW.status = 'completed' THEN now() END;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER community_deletion_checkpoints_guard
    BEFORE INSERT OR UPDATE OR DELETE ON community_deletion_checkpoints
    FOR EACH ROW EXECUTE FUNCTION enforce_community_deletion_checkpoint_guard();

-- +goose StatementBegin
-- Guards community_deletion_settings: append-only, each row dated and signed
-- by the database (changed_at, changed_by), so the newest row is in force
-- and the older ones are its audit trail.
CREATE OR REPLACE FUNCTION enforce_community_deletion_settings_guard() RETURNS trigger
    LANGUAGE plpgsql VOLATILE
    AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('deletion setting %s refused: settings are append-only; insert a new row', OLD.sequence);
    END IF;
    NEW.changed_by := session_user;
    NEW.changed_at := now();
    RETURN NEW;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER community_deletion_settings_guard
    BEFORE INSERT OR UPDATE OR DELETE ON community_deletion_settings
    FOR EACH ROW EXECUTE FUNCTION enforce_community_deletion_settings_guard();
CREATE TRIGGER community_deletion_settings_truncate_guard
    BEFORE TRUNCATE ON community_deletion_settings
    FOR EACH STATEMENT EXECUTE FUNCTION refuse_community_deletion_truncate();

-- +goose StatementBegin
-- The sessions and prepared transactions that hold the advisory lock key:
-- pid (NULL for a prepared transaction), role, application_name, lock mode
-- and the prepared transaction's gid. A lifecycle step whose lock wait timed
-- out names them. SECURITY DEFINER, so its owner's view of pg_stat_activity
-- (all sessions for a superuser or pg_read_all_stats) applies.
CREATE OR REPLACE FUNCTION community_deletion_lock_holders(lock_key bigint)
    RETURNS TABLE (pid integer, role_name text, application_name text, lock_mode text, prepared_gid text)
    LANGUAGE sql STABLE SECURITY DEFINER
    AS $$
        SELECT l.pid, coalesce(a.usename::text, p.owner::text), a.application_name, l.mode, p.gid
        FROM pg_locks l
        LEFT JOIN pg_stat_activity a ON a.pid = l.pid
        LEFT JOIN pg_locks x ON l.pid IS NULL AND x.locktype = 'transactionid'
            AND x.virtualtransaction = l.virtualtransaction AND x.pid IS NULL
        LEFT JOIN pg_prepared_xacts p ON p.transaction = x.transactionid
        WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
          AND l.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())
          AND l.classid = ((lock_key >> 32) & 4294967295)::oid
          AND l.objid = (lock_key & 4294967295)::oid
        ORDER BY l.pid NULLS FIRST, p.gid
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Health findings beyond the catalog: one row per prepared transaction that
-- holds an advisory lock of this database (a community's deletion lock or the
-- schema-destruction lock held that way blocks every lifecycle step on it
-- until someone commits or rolls it back). subject names the transaction.
CREATE OR REPLACE FUNCTION community_deletion_health()
    RETURNS TABLE (subject text, problem text, detail text)
    LANGUAGE sql STABLE SECURITY DEFINER
    AS $$
        SELECT format('prepared transaction %s', p.gid), 'prepared_lock',
               format('owner %s, prepared at %s, holds advisory lock %s in %s mode%s',
                      p.owner, p.prepared, ((l.classid::bigint << 32) | l.objid::bigint), l.mode,
                      CASE WHEN ((l.classid::bigint << 32) | l.objid::bigint) = community_schema_destruction_lock_key()
                           THEN ' (the schema-destruction lock)' ELSE '' END)
        FROM pg_locks l
        JOIN pg_locks x ON x.locktype = 'transactionid' AND x.virtualtransaction = l.virtualtransaction AND x.pid IS NULL
        JOIN pg_prepared_xacts p ON p.transaction = x.transactionid
        WHERE l.locktype = 'advisory' AND l.pid IS NULL AND l.objsubid = 1
          AND l.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())
        ORDER BY 1, 3
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Every function these migrations install, by signature. Each later
-- migration that adds or replaces a function keeps this list whole and ends
-- with SELECT community_deletion_seal_functions().
CREATE OR REPLACE FUNCTION community_deletion_installed_functions() RETURNS text[]
    LANGUAGE sql IMMUTABLE
    AS $$
        SELECT ARRAY[
            'assert_community_write_allowed(uuid)',
            'attach_community_write_fence(regclass,text)',
            'community_deletion_catalog_drift()',
            'community_deletion_control_table(text)',
            'community_deletion_fenced(oid)',
            'community_deletion_function_digest(oid)',
            'community_deletion_guard_triggers()',
            'community_deletion_health()',
            'community_deletion_installed_functions()',
            'community_deletion_is_member(name)',
            'community_deletion_lock_holders(bigint)',
            'community_deletion_lock_key(uuid)',
            'community_deletion_next_stage(text)',
            'community_deletion_operators_share_role()',
            'community_deletion_register_table(regclass,text)',
            'community_deletion_require_member(name[],text)',
            'community_deletion_restore_active(uuid,timestamptz)',
            'community_deletion_seal_functions()',
            'community_deletion_step_authorized(uuid,text)',
            'community_deletion_unregister_table(text)',
            'community_schema_destruction_lock_key()',
            'community_write_allowed(uuid)',
            'community_write_fence_excluded_table(text)',
            'detach_community_write_fence(regclass)',
            'enforce_community_deletion_approval_guard()',
            'enforce_community_deletion_checkpoint_guard()',
            'enforce_community_deletion_manifest_key_guard()',
            'enforce_community_deletion_request_guard()',
            'enforce_community_deletion_settings_guard()',
            'enforce_community_scoped_table_guard()',
            'enforce_community_serving_write_lease_guard()',
            'enforce_community_tombstone()',
            'enforce_community_write_fence()',
            'refuse_community_deletion_truncate()'
        ]
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Fixes the search_path of every installed function (pg_catalog, the schema
-- of communities, pg_temp last) except the two that qualify every name
-- instead, because they run on every tenant write; revokes PUBLIC's default
-- EXECUTE from all of them; and records their digests for the drift report.
CREATE OR REPLACE FUNCTION community_deletion_seal_functions() RETURNS void
    LANGUAGE plpgsql VOLATILE
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
        EXECUTE format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', fn::regprocedure);
    END LOOP;
    DELETE FROM community_deletion_function_digests;
    INSERT INTO community_deletion_function_digests (function_signature, digest)
    SELECT f.signature, community_deletion_function_digest(f.signature::regprocedure::oid)
    FROM unnest(community_deletion_installed_functions()) AS f (signature);
END
$$;
-- +goose StatementEnd

-- The guard triggers that change shape: the serving lease guard now also
-- sees DELETE, the tombstone guard and the request and approval guards have
-- new bodies (above and below).
DROP TRIGGER community_serving_write_leases_guard ON community_serving_write_leases;
CREATE TRIGGER community_serving_write_leases_guard
    BEFORE INSERT OR UPDATE OR DELETE ON community_serving_write_leases
    FOR EACH ROW EXECUTE FUNCTION enforce_community_serving_write_lease_guard();

-- Privileges. PUBLIC keeps nothing; each role gets what its calls need.
REVOKE ALL ON communities, community_scoped_tables, community_deletion_requests,
    community_deletion_approvals, community_deletion_checkpoints, community_deletion_executor_heartbeats,
    community_deletion_manifest_keys, community_serving_write_leases, storage_taxonomy_sweeps,
    community_deletion_settings, community_deletion_function_digests, community_deletion_purge_progress,
    community_deletion_step_authorizations, community_deletion_created_roles
    FROM PUBLIC;

GRANT SELECT ON communities, community_scoped_tables, community_deletion_settings,
    community_deletion_function_digests
    TO community_deletion_serving, community_deletion_operator, community_deletion_executor;
GRANT SELECT, INSERT, UPDATE, DELETE ON community_serving_write_leases
    TO community_deletion_serving, community_deletion_executor;
GRANT USAGE ON SEQUENCE community_serving_write_lease_generation_seq
    TO community_deletion_serving, community_deletion_executor;

GRANT SELECT ON community_deletion_requests, community_deletion_approvals, community_deletion_checkpoints,
    community_deletion_executor_heartbeats, community_deletion_manifest_keys, community_serving_write_leases,
    storage_taxonomy_sweeps, community_deletion_purge_progress, community_deletion_step_authorizations
    TO community_deletion_operator, community_deletion_executor;
GRANT INSERT, UPDATE ON community_deletion_requests TO community_deletion_operator;
GRANT INSERT ON community_deletion_approvals TO community_deletion_operator;
GRANT INSERT ON community_deletion_checkpoints TO community_deletion_operator;
GRANT DELETE ON community_serving_write_leases TO community_deletion_operator;
GRANT USAGE ON SEQUENCE community_deletion_checkpoints_sequence_seq
    TO community_deletion_operator, community_deletion_executor;

GRANT UPDATE ON communities, community_deletion_requests TO community_deletion_executor;
GRANT INSERT, UPDATE ON community_deletion_checkpoints, community_deletion_executor_heartbeats
    TO community_deletion_executor;
GRANT INSERT, UPDATE, DELETE ON community_deletion_manifest_keys, community_deletion_purge_progress
    TO community_deletion_executor;
GRANT INSERT ON storage_taxonomy_sweeps TO community_deletion_executor;

-- +goose StatementBegin
DO $usage$
DECLARE
    home text := (SELECT n.nspname FROM pg_catalog.pg_class c
                  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                  WHERE c.oid = 'communities'::regclass);
    grantee text;
BEGIN
    FOREACH grantee IN ARRAY ARRAY['community_deletion_serving', 'community_deletion_operator', 'community_deletion_executor'] LOOP
        IF NOT has_schema_privilege(grantee, home, 'USAGE') THEN
            EXECUTE format('GRANT USAGE ON SCHEMA %I TO %I', home, grantee);
        END IF;
    END LOOP;
END
$usage$;
-- +goose StatementEnd

-- The guard triggers of the control tables act as the owner of the schema:
-- they read and lock rows the role that fired them may not (an operator's
-- approval locks the community FOR SHARE), and decide on the session's login
-- (session_user), which a SECURITY DEFINER function does not change. The
-- write fence stays SECURITY INVOKER: it runs on every tenant write.
ALTER FUNCTION enforce_community_tombstone() SECURITY DEFINER;
ALTER FUNCTION enforce_community_deletion_request_guard() SECURITY DEFINER;
ALTER FUNCTION enforce_community_deletion_approval_guard() SECURITY DEFINER;
ALTER FUNCTION enforce_community_deletion_manifest_key_guard() SECURITY DEFINER;
ALTER FUNCTION enforce_community_deletion_checkpoint_guard() SECURITY DEFINER;
ALTER FUNCTION enforce_community_serving_write_lease_guard() SECURITY DEFINER;
ALTER FUNCTION enforce_community_scoped_table_guard() SECURITY DEFINER;
ALTER FUNCTION enforce_community_deletion_settings_guard() SECURITY DEFINER;

SELECT community_deletion_seal_functions();

GRANT EXECUTE ON FUNCTION attach_community_write_fence(regclass, text), detach_community_write_fence(regclass),
    community_deletion_register_table(regclass, text), community_deletion_unregister_table(text),
    enforce_community_write_fence()
    TO PUBLIC;
GRANT EXECUTE ON FUNCTION community_deletion_lock_key(uuid), community_deletion_is_member(name),
    community_deletion_require_member(name[], text), community_deletion_control_table(text),
    community_write_fence_excluded_table(text), community_deletion_next_stage(text),
    community_deletion_catalog_drift(), community_deletion_fenced(oid), community_deletion_guard_triggers(),
    community_deletion_function_digest(oid), community_deletion_step_authorized(uuid, text),
    community_deletion_operators_share_role()
    TO community_deletion_serving, community_deletion_operator, community_deletion_executor;
GRANT EXECUTE ON FUNCTION community_write_allowed(uuid), assert_community_write_allowed(uuid)
    TO community_deletion_serving, community_deletion_executor;
GRANT EXECUTE ON FUNCTION community_schema_destruction_lock_key(), community_deletion_lock_holders(bigint),
    community_deletion_health()
    TO community_deletion_operator, community_deletion_executor;
GRANT EXECUTE ON FUNCTION community_deletion_restore_active(uuid, timestamptz) TO community_deletion_operator;

-- Tables registered before this migration: grant the roles what attach now
-- grants. Where the migrating role does not own a tenant table it cannot,
-- and says so: run attach_community_write_fence() again as its owner.
-- +goose StatementBegin
DO $regrant$
DECLARE
    registered record;
    member regclass;
BEGIN
    FOR registered IN
        SELECT c.oid, r.table_name, r.purge_action
        FROM community_scoped_tables r
        JOIN pg_class c ON c.relname = r.table_name
            AND c.relnamespace = (SELECT home.relnamespace FROM pg_class home WHERE home.oid = 'communities'::regclass)
    LOOP
        BEGIN
            FOR member IN SELECT tree.relid FROM pg_partition_tree(registered.oid) tree UNION SELECT registered.oid LOOP
                IF registered.purge_action = 'delete' THEN
                    EXECUTE format('GRANT SELECT, UPDATE, DELETE ON %s TO community_deletion_executor', member);
                ELSE
                    EXECUTE format('GRANT SELECT, UPDATE (community_id) ON %s TO community_deletion_executor', member);
                END IF;
                EXECUTE format('GRANT SELECT (community_id) ON %s TO community_deletion_operator', member);
            END LOOP;
        EXCEPTION WHEN insufficient_privilege THEN
            RAISE NOTICE 'run SELECT attach_community_write_fence(%L, %L) as the owner of %s to grant the deletion roles what they need',
                registered.table_name, registered.purge_action, registered.table_name;
        END;
    END LOOP;
END
$regrant$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DO $revoke$
DECLARE
    registered record;
    member regclass;
    home text := (SELECT n.nspname FROM pg_catalog.pg_class c
                  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                  WHERE c.oid = 'communities'::regclass);
BEGIN
    FOR registered IN
        SELECT c.oid, r.table_name
        FROM community_scoped_tables r
        JOIN pg_class c ON c.relname = r.table_name
            AND c.relnamespace = (SELECT h.relnamespace FROM pg_class h WHERE h.oid = 'communities'::regclass)
    LOOP
        BEGIN
            FOR member IN SELECT tree.relid FROM pg_partition_tree(registered.oid) tree UNION SELECT registered.oid LOOP
                EXECUTE format('REVOKE ALL ON %s FROM community_deletion_executor, community_deletion_operator', member);
                EXECUTE format('REVOKE SELECT (community_id), UPDATE (community_id) ON %s FROM community_deletion_executor, community_deletion_operator', member);
            END LOOP;
        EXCEPTION WHEN insufficient_privilege THEN
            RAISE NOTICE 'the owner of % keeps grants to the deletion roles: revoke them as its owner', registered.table_name;
        END;
    END LOOP;
    EXECUTE format('REVOKE USAGE ON SCHEMA %I FROM community_deletion_serving, community_deletion_operator, community_deletion_executor', home);
END
$revoke$;
-- +goose StatementEnd

REVOKE ALL ON communities, community_scoped_tables, community_deletion_requests,
    community_deletion_approvals, community_deletion_checkpoints, community_deletion_executor_heartbeats,
    community_deletion_manifest_keys, community_serving_write_leases, storage_taxonomy_sweeps,
    community_deletion_settings, community_deletion_function_digests, community_deletion_purge_progress,
    community_deletion_step_authorizations
    FROM community_deletion_serving, community_deletion_operator, community_deletion_executor;
REVOKE ALL ON SEQUENCE community_serving_write_lease_generation_seq, community_deletion_checkpoints_sequence_seq
    FROM community_deletion_serving, community_deletion_operator, community_deletion_executor;
REVOKE ALL ON FUNCTION assert_community_write_allowed(uuid), attach_community_write_fence(regclass, text),
    community_deletion_catalog_drift(), community_deletion_control_table(text), community_deletion_lock_key(uuid),
    community_deletion_next_stage(text), community_schema_destruction_lock_key(), community_write_allowed(uuid),
    community_write_fence_excluded_table(text), enforce_community_deletion_approval_guard(),
    enforce_community_deletion_manifest_key_guard(), enforce_community_deletion_request_guard(),
    enforce_community_serving_write_lease_guard(), enforce_community_tombstone(), enforce_community_write_fence(),
    refuse_community_deletion_truncate()
    FROM community_deletion_serving, community_deletion_operator, community_deletion_executor;
GRANT EXECUTE ON FUNCTION assert_community_write_allowed(uuid), attach_community_write_fence(regclass, text),
    community_deletion_catalog_drift(), community_deletion_control_table(text), community_deletion_lock_key(uuid),
    community_deletion_next_stage(text), community_schema_destruction_lock_key(), community_write_allowed(uuid),
    community_write_fence_excluded_table(text), enforce_community_deletion_approval_guard(),
    enforce_community_deletion_manifest_key_guard(), enforce_community_deletion_request_guard(),
    enforce_community_serving_write_lease_guard(), enforce_community_tombstone(), enforce_community_write_fence(),
    refuse_community_deletion_truncate()
    TO PUBLIC;

DROP TRIGGER community_serving_write_leases_guard ON community_serving_write_leases;
CREATE TRIGGER community_serving_write_leases_guard
    BEFORE INSERT OR UPDATE ON community_serving_write_leases
    FOR EACH ROW EXECUTE FUNCTION enforce_community_serving_write_lease_guard();
DROP TRIGGER community_deletion_settings_truncate_guard ON community_deletion_settings;
DROP TRIGGER community_deletion_settings_guard ON community_deletion_settings;
DROP TRIGGER community_deletion_checkpoints_guard ON community_deletion_checkpoints;
DROP TRIGGER community_scoped_tables_truncate_guard ON community_scoped_tables;
DROP TRIGGER community_scoped_tables_guard ON community_scoped_tables;

DROP FUNCTION community_deletion_seal_functions();
DROP FUNCTION community_deletion_installed_functions();
DROP FUNCTION community_deletion_health();
DROP FUNCTION community_deletion_lock_holders(bigint);
DROP FUNCTION enforce_community_deletion_settings_guard();
DROP FUNCTION enforce_community_deletion_checkpoint_guard();
DROP FUNCTION community_deletion_restore_active(uuid, timestamptz);
DROP FUNCTION community_deletion_operators_share_role();
DROP FUNCTION community_deletion_step_authorized(uuid, text);
DROP FUNCTION community_deletion_function_digest(oid);
DROP FUNCTION community_deletion_guard_triggers();
DROP FUNCTION enforce_community_scoped_table_guard();
DROP FUNCTION community_deletion_fenced(oid);
DROP FUNCTION community_deletion_unregister_table(text);
DROP FUNCTION community_deletion_register_table(regclass, text);
DROP FUNCTION detach_community_write_fence(regclass);
DROP FUNCTION community_deletion_require_member(name[], text);
DROP FUNCTION community_deletion_is_member(name);

ALTER FUNCTION assert_community_write_allowed(uuid) RESET ALL;
ALTER FUNCTION community_schema_destruction_lock_key() RESET ALL;
ALTER FUNCTION community_write_fence_excluded_table(text) RESET ALL;
ALTER FUNCTION refuse_community_deletion_truncate() RESET ALL;
ALTER FUNCTION community_deletion_next_stage(text) RESET ALL;
ALTER FUNCTION enforce_community_deletion_manifest_key_guard() RESET ALL;
ALTER FUNCTION enforce_community_deletion_manifest_key_guard() SECURITY INVOKER;

-- The previous bodies (migrations 00004 to 00008), without a fixed search_path.

-- +goose StatementBegin
-- The per-community advisory lock key. Writers take it shared for their whole
-- transaction; lifecycle transitions (quiesce, fence, abort) take it
-- exclusively. It must never change: a rolling deploy would otherwise run two
-- keys side by side and lose the exclusion between them.
CREATE OR REPLACE FUNCTION community_deletion_lock_key(community uuid) RETURNS bigint
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$ SELECT uuid_hash_extended(community, 7161958637654340729) $$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Whether this transaction may write community data now. It admits a write
-- when the community is active; or when the transaction is the authorized
-- deletion executor (community_deletion.executor_community and
-- community_deletion.fence_generation name the community and its current fence
-- generation) while it is quiescing or fenced; or, while it is quiescing, when
-- the transaction carries a still-valid serving write lease of the community
-- (community_deletion.serving_write_lease_id, _owner, _generation and
-- _fence_generation). It takes no lock: callers take the shared community lock
-- first, in an earlier statement, so this read sees the latest committed state.
CREATE OR REPLACE FUNCTION community_write_allowed(community uuid) RETURNS boolean
    LANGUAGE plpgsql VOLATILE
    AS $$
DECLARE
    current_state text;
    current_generation bigint;
    lease_id text;
BEGIN
    SELECT c.deletion_state, c.deletion_fence_generation INTO current_state, current_generation
    FROM communities c WHERE c.id = community;
    IF current_state IS NULL THEN
        RETURN false;
    END IF;
    IF current_state = 'active' THEN
        RETURN true;
    END IF;
    IF current_state NOT IN ('quiescing', 'fenced') THEN
        RETURN false;
    END IF;
    IF coalesce(current_setting('community_deletion.executor_community', true), '') = community::text
       AND coalesce(current_setting('community_deletion.fence_generation', true), '') = current_generation::text THEN
        RETURN true;
    END IF;
    IF current_state <> 'quiescing' THEN
        RETURN false;
    END IF;
    lease_id := coalesce(current_setting('community_deletion.serving_write_lease_id', true), '');
    IF lease_id !~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' THEN
        RETURN false;
    END IF;
    RETURN EXISTS (
        SELECT 1 FROM community_serving_write_leases lease
        WHERE lease.id = lease_id::uuid
          AND lease.community_id = community
          AND lease.owner = coalesce(current_setting('community_deletion.serving_write_owner', true), '')
          AND lease.generation::text
              = coalesce(current_setting('community_deletion.serving_write_generation', true), '')
          AND lease.fence_generation::text
              = coalesce(current_setting('community_deletion.serving_write_fence_generation', true), '')
          AND lease.fence_generation = current_generation
          AND lease.lease_until >= clock_timestamp());
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The write fence: three AFTER ... FOR EACH STATEMENT triggers per table (one
-- each for INSERT, UPDATE and DELETE, since transition tables allow one event
-- per trigger) that see the statement's rows as community_fence_new and
-- community_fence_old. An UPDATE is checked for the communities of both its
-- old and new rows, so a row cannot be moved into or out of a fenced community.
--
-- Three paths, cheapest first:
--
--  1. The admitted path, for a statement whose rows all belong to one
--     community. The first query reads that community from the transition
--     table, learns whether any row names another one, and takes the shared
--     community lock if it is free (pg_try_advisory_xact_lock_shared never
--     waits). The second query, a new statement with a new READ COMMITTED
--     snapshot taken after the lock was granted, reads the community's state
--     and the isolation level. Active and READ COMMITTED: admitted. Anything
--     else (two communities, a lock held by a lifecycle step, any NULL) falls
--     through; nothing on this path is a setting a caller could forge.
--  2. The shared path, for every statement path 1 did not admit: it refuses
--     REPEATABLE READ and SERIALIZABLE (25000), waits for the shared lock of
--     every community the statement touched, then confirms in a later
--     statement (so with a snapshot taken after the waits) that all are active.
--  3. The refusal path: with the locks held, community_write_allowed() is asked
--     about each community (this is where the deletion executor and serving
--     write leases are admitted) and the first one refused is named (55000).
--
-- Because the shared lock is held until the transaction ends, a lifecycle
-- transition (which takes the lock exclusively) waits for open writers, and
-- every write that starts after the fence committed sees it and is refused.
-- The lock and the state read must stay separate statements: a single query
-- would read communities with a snapshot taken before its lock was granted.
CREATE OR REPLACE FUNCTION enforce_community_write_fence() RETURNS trigger
    LANGUAGE plpgsql VOLATILE
    AS $$
DECLARE
    first_community uuid;
    locked boolean;
    mixed boolean;
    state text;
    isolation text;
    touched uuid[];
    community uuid;
BEGIN
    -- Path 1. Each event has its own transition tables, so each has its own
    -- copy of the first query; a shared generic form costs more per statement.
    IF TG_OP = 'INSERT' THEN
        SELECT n.community_id,
               pg_try_advisory_xact_lock_shared(community_deletion_lock_key(n.community_id)),
               EXISTS (SELECT 1 FROM community_fence_new other
                       WHERE other.community_id IS DISTINCT FROM n.community_id)
        INTO first_community, locked, mixed
        FROM community_fence_new n;
    ELSIF TG_OP = 'UPDATE' THEN
        SELECT o.community_id,
               pg_try_advisory_xact_lock_shared(community_deletion_lock_key(o.community_id)),
               EXISTS (SELECT 1 FROM community_fence_old other
                       WHERE other.community_id IS DISTINCT FROM o.community_id)
               OR EXISTS (SELECT 1 FROM community_fence_new other
                          WHERE other.community_id IS DISTINCT FROM o.community_id)
        INTO first_community, locked, mixed
        FROM community_fence_old o;
    ELSE
        SELECT o.community_id,
               pg_try_advisory_xact_lock_shared(community_deletion_lock_key(o.community_id)),
               EXISTS (SELECT 1 FROM community_fence_old other
                       WHERE other.community_id IS DISTINCT FROM o.community_id)
        INTO first_community, locked, mixed
        FROM community_fence_old o;
    END IF;
    IF FOUND AND locked AND NOT mixed THEN
        SELECT c.deletion_state, current_setting('transaction_isolation')
        INTO state, isolation
        FROM communities c WHERE c.id = first_community;
        IF state = 'active' AND isolation = 'read committed' THEN
            RETURN NULL;
        END IF;
    END IF;

    -- Path 2.
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION USING
            ERRCODE = '25000',
            MESSAGE = format('community write to %I refused: isolation level %s pins a snapshot that cannot see the deletion fence',
                             TG_TABLE_NAME, current_setting('transaction_isolation')),
            HINT = 'Write community data in READ COMMITTED transactions.';
    END IF;
    IF TG_OP = 'INSERT' THEN
        SELECT array_agg(DISTINCT community_id) INTO touched FROM community_fence_new;
    ELSIF TG_OP = 'UPDATE' THEN
        SELECT array_agg(rows.community_id) INTO touched
        FROM (SELECT community_id FROM community_fence_old UNION SELECT community_id FROM community_fence_new) rows;
    ELSE
        SELECT array_agg(DISTINCT community_id) INTO touched FROM community_fence_old;
    END IF;
    IF touched IS NULL THEN
        RETURN NULL; -- the statement wrote no rows
    END IF;
    PERFORM pg_advisory_xact_lock_shared(community_deletion_lock_key(t.community_id))
    FROM unnest(touched) t(community_id);
    IF NOT EXISTS (
        SELECT 1 FROM unnest(touched) t(community_id)
        LEFT JOIN communities c ON c.id = t.community_id
        WHERE c.deletion_state IS DISTINCT FROM 'active') THEN
        RETURN NULL;
    END IF;

    -- Path 3.
    FOREACH community IN ARRAY touched LOOP
        IF community IS NULL THEN
            RAISE EXCEPTION USING
                ERRCODE = '55000',
                MESSAGE = format('community write to %I refused: a row has no community_id', TG_TABLE_NAME);
        END IF;
        IF community_write_allowed(community) IS NOT TRUE THEN
            SELECT c.deletion_state INTO state FROM communities c WHERE c.id = community;
            RAISE EXCEPTION USING
                ERRCODE = '55000',
                MESSAGE = format('community write to %I refused: community %s is %s',
                                 TG_TABLE_NAME, community, coalesce(state, 'missing'));
        END IF;
    END LOOP;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Registers a tenant table with the deletion lifecycle and, for 'delete'
-- tables, attaches the write fence to it and to each of its partitions.
-- Idempotent: run it again after adding partitions. It refuses tables outside
-- the schema of communities, partitions, control-plane tables, tables without
-- a community_id uuid column, a nullable community_id on a 'delete' table or a
-- NOT NULL one on a 'nullify' table, and a change of purge action.
CREATE OR REPLACE FUNCTION attach_community_write_fence(target regclass, purge_action text DEFAULT 'delete')
    RETURNS void
    LANGUAGE plpgsql VOLATILE
    AS $$
DECLARE
    rel record;
    column_type regtype;
    column_not_null boolean;
    registered_action text;
    member regclass;
BEGIN
    IF purge_action IS NULL OR purge_action NOT IN ('delete', 'nullify') THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('purge_action must be ''delete'' or ''nullify'', not %L', purge_action);
    END IF;
    SELECT c.relname, c.relkind, c.relispartition, c.relnamespace INTO rel
    FROM pg_class c WHERE c.oid = target;
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

    IF purge_action = 'delete' THEN
        FOR member IN SELECT tree.relid FROM pg_partition_tree(target) tree UNION SELECT target LOOP
            EXECUTE format('CREATE OR REPLACE TRIGGER community_write_fence_insert AFTER INSERT ON %s '
                           'REFERENCING NEW TABLE AS community_fence_new '
                           'FOR EACH STATEMENT EXECUTE FUNCTION enforce_community_write_fence()', member);
            EXECUTE format('CREATE OR REPLACE TRIGGER community_write_fence_update AFTER UPDATE ON %s '
                           'REFERENCING OLD TABLE AS community_fence_old NEW TABLE AS community_fence_new '
                           'FOR EACH STATEMENT EXECUTE FUNCTION enforce_community_write_fence()', member);
            EXECUTE format('CREATE OR REPLACE TRIGGER community_write_fence_delete AFTER DELETE ON %s '
                           'REFERENCING OLD TABLE AS community_fence_old '
                           'FOR EACH STATEMENT EXECUTE FUNCTION enforce_community_write_fence()', member);
        END LOOP;
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Compares the live catalog with the registry, exactly. One row per problem:
--   unregistered  a table with a community_id column that is neither registered nor excluded
--   missing       a registered table that no longer exists or lost its community_id uuid column
--   shape         a registered 'delete' table whose community_id became nullable, or a
--                 'nullify' table whose community_id became NOT NULL
--   unfenced      a registered 'delete' table, or one of its partitions, without the complete enabled fence
--   stray_fence   a fence trigger on a table that is not a registered 'delete' table (or its partition)
-- Deletion treats any row as drift and refuses to destroy anything.
CREATE OR REPLACE FUNCTION community_deletion_catalog_drift()
    RETURNS TABLE (table_name text, problem text)
    LANGUAGE sql STABLE
    AS $$
    WITH home AS (
        SELECT c.relnamespace AS namespace FROM pg_class c WHERE c.oid = 'communities'::regclass
    ), live AS (
        SELECT c.oid, c.relname::text AS relname, a.attnotnull
        FROM pg_class c
        JOIN home ON home.namespace = c.relnamespace
        JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'community_id' AND NOT a.attisdropped
        WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition
          AND a.atttypid = 'uuid'::regtype
    ), registered AS (
        SELECT r.table_name, r.purge_action, live.oid, live.attnotnull
        FROM community_scoped_tables r
        LEFT JOIN live ON live.relname = r.table_name
    ), fence_members AS (
        -- A registered 'delete' table and, when it is partitioned, every partition.
        SELECT registered.table_name, registered.oid
        FROM registered
        WHERE registered.purge_action = 'delete' AND registered.oid IS NOT NULL
        UNION
        SELECT registered.table_name, tree.relid
        FROM registered, pg_partition_tree(registered.oid) tree
        WHERE registered.purge_action = 'delete' AND registered.oid IS NOT NULL
    ), fenced AS (
        SELECT t.tgrelid AS oid,
               bool_or(t.tgtype & 4 = 4 AND t.tgnewtable = 'community_fence_new') AS on_insert,
               bool_or(t.tgtype & 16 = 16 AND t.tgoldtable = 'community_fence_old'
                       AND t.tgnewtable = 'community_fence_new') AS on_update,
               bool_or(t.tgtype & 8 = 8 AND t.tgoldtable = 'community_fence_old') AS on_delete
        FROM pg_trigger t
        WHERE t.tgfoid = 'enforce_community_write_fence()'::regprocedure
          AND NOT t.tgisinternal
          AND t.tgenabled IN ('O', 'A')
          AND t.tgtype & (1 | 2 | 64) = 0
        GROUP BY t.tgrelid
    )
    SELECT live.relname, 'unregistered'
    FROM live
    WHERE NOT community_deletion_control_table(live.relname)
      AND NOT EXISTS (SELECT 1 FROM registered WHERE registered.table_name = live.relname)
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
    LEFT JOIN fenced ON fenced.oid = fence_members.oid
    WHERE NOT (coalesce(fenced.on_insert, false) AND coalesce(fenced.on_update, false)
               AND coalesce(fenced.on_delete, false))
    UNION ALL
    SELECT DISTINCT c.relname::text, 'stray_fence'
    FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
    WHERE t.tgfoid = 'enforce_community_write_fence()'::regprocedure
      AND NOT t.tgisinternal
      AND NOT EXISTS (SELECT 1 FROM fence_members WHERE fence_members.oid = t.tgrelid)
    ORDER BY 1, 2
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Guards communities. A community is created active at fence generation 0.
-- deletion_state moves only active -> quiescing -> fenced -> tombstone, or
-- back to active from quiescing or fenced (an abort, which must raise the
-- fence generation); the generation never decreases and changes only with a
-- lifecycle step; every such step, and every change to a quiescing or fenced
-- community, needs the authorized executor settings (community_deletion.
-- executor_community and community_deletion.fence_generation naming the
-- community and its new fence generation), and must match the community's
-- open deletion request: quiesce and fence an approved request, abort an
-- approved or fenced one, tombstone one whose bindings are removed at this
-- fence generation. A community's host is pinned while a request names it.
-- A tombstone never changes and is never deleted; no community with a
-- deletion request is ever deleted.
CREATE OR REPLACE FUNCTION enforce_community_tombstone() RETURNS trigger
    LANGUAGE plpgsql VOLATILE
    AS $$
DECLARE
    request_stage text;
    request_generation bigint;
BEGIN
    IF TG_OP = 'INSERT' THEN
        IF NEW.deletion_state <> 'active' OR NEW.deletion_fence_generation <> 0 OR NEW.deleted_at IS NOT NULL THEN
            RAISE EXCEPTION USING ERRCODE = '23000',
                MESSAGE = format('community %s refused: a community is created active at fence generation 0', NEW.id);
        END IF;
        RETURN NEW;
    END IF;

    IF TG_OP = 'DELETE' THEN
        IF OLD.deletion_state = 'tombstone' THEN
            RAISE EXCEPTION USING ERRCODE = '55000',
                MESSAGE = format('community %s is a tombstone: tombstones are permanent', OLD.id);
        END IF;
        IF EXISTS (SELECT 1 FROM community_deletion_requests r WHERE r.community_id = OLD.id) THEN
            RAISE EXCEPTION USING ERRCODE = '55000',
                MESSAGE = format('community %s has a deletion request: it is removed only by the deletion lifecycle', OLD.id);
        END IF;
        IF OLD.deletion_state <> 'active' THEN
            RAISE EXCEPTION USING ERRCODE = '55000',
                MESSAGE = format('community %s is %s: it is removed only by the deletion lifecycle', OLD.id, OLD.deletion_state);
        END IF;
        RETURN OLD;
    END IF;

    IF OLD.deletion_state = 'tombstone' THEN
        IF NEW IS DISTINCT FROM OLD THEN
            RAISE EXCEPTION USING ERRCODE = '55000',
                MESSAGE = format('community %s is a tombstone: tombstones are permanent', OLD.id);
        END IF;
        RETURN NEW;
    END IF;
    IF NEW.id IS DISTINCT FROM OLD.id THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('community %s refused: a community id never changes', OLD.id);
    END IF;
    IF NEW.deletion_fence_generation < OLD.deletion_fence_generation THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('community %s refused: deletion_fence_generation never decreases (%s to %s)',
                             OLD.id, OLD.deletion_fence_generation, NEW.deletion_fence_generation);
    END IF;
    -- The host is pinned while a deletion request names it.
    IF NEW.host IS DISTINCT FROM OLD.host AND EXISTS (
        SELECT 1 FROM community_deletion_requests r
        WHERE r.community_id = OLD.id AND r.stage <> 'aborted') THEN
        RAISE EXCEPTION USING ERRCODE = '55000',
            MESSAGE = format('community %s refused: its host cannot change while a deletion request names it', OLD.id);
    END IF;
    IF NEW.deletion_state = OLD.deletion_state
       AND NEW.deletion_fence_generation = OLD.deletion_fence_generation
       AND OLD.deletion_state = 'active' THEN
        -- An ordinary change to an active community.
        RETURN NEW;
    END IF;
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION USING ERRCODE = '25000',
            MESSAGE = format('community %s refused: isolation level %s pins a snapshot that cannot see its deletion request',
                             OLD.id, current_setting('transaction_isolation'));
    END IF;

    IF coalesce(current_setting('community_deletion.executor_community', true), '') <> OLD.id::text
       OR coalesce(current_setting('community_deletion.fence_generation', true), '')
          <> NEW.deletion_fence_generation::text THEN
        RAISE EXCEPTION USING ERRCODE = '55000',
            MESSAGE = format('community %s refused: while %s, and for any change of deletion state or fence generation, it changes only inside the authorized deletion executor',
                             OLD.id, OLD.deletion_state);
    END IF;
    IF NOT (CASE
        -- An abort: back to active, always under a new fence generation.
        WHEN NEW.deletion_state = 'active' THEN OLD.deletion_state IN ('quiescing', 'fenced')
            AND NEW.deletion_fence_generation > OLD.deletion_fence_generation
        -- The fence: always a new generation.
        WHEN OLD.deletion_state = 'quiescing' AND NEW.deletion_state = 'fenced'
            THEN NEW.deletion_fence_generation > OLD.deletion_fence_generation
        WHEN (OLD.deletion_state, NEW.deletion_state) IN (
                ('active', 'quiescing'), ('quiescing', 'quiescing'), ('fenced', 'fenced'), ('fenced', 'tombstone'))
            THEN NEW.deletion_fence_generation = OLD.deletion_fence_generation
        ELSE false
    END) THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('community %s refused: deletion_state %s -> %s at fence generation %s -> %s is not a lifecycle step',
                             OLD.id, OLD.deletion_state, NEW.deletion_state,
                             OLD.deletion_fence_generation, NEW.deletion_fence_generation);
    END IF;

    -- Each step answers to the open deletion request of the community: quiesce
    -- and fence an approved request, abort an approved or fenced one (which
    -- is then aborted in the same transaction), and tombstone only a request
    -- whose bindings are removed under this very fence generation.
    IF NEW.deletion_state IS DISTINCT FROM OLD.deletion_state
       OR NEW.deletion_fence_generation IS DISTINCT FROM OLD.deletion_fence_generation THEN
        -- FOR SHARE waits for a concurrent change of the request (an abort)
        -- and reads its newest version.
        SELECT r.stage, r.fence_generation INTO request_stage, request_generation
        FROM community_deletion_requests r
        WHERE r.community_id = OLD.id AND r.stage <> 'aborted'
        FOR SHARE;
        IF NOT (CASE NEW.deletion_state
            WHEN 'quiescing' THEN request_stage = 'approved'
            WHEN 'fenced' THEN request_stage = 'approved'
            WHEN 'tombstone' THEN request_stage = 'bindings_removed'
                AND request_generation = NEW.deletion_fence_generation
            ELSE request_stage IN ('approved', 'fenced')
        END) IS TRUE THEN
            RAISE EXCEPTION USING ERRCODE = '55000',
                MESSAGE = format('community %s refused: deletion_state %s -> %s does not match its deletion request (%s)',
                                 OLD.id, OLD.deletion_state, NEW.deletion_state, coalesce(request_stage, 'none open'));
        END IF;
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Guards community_deletion_requests. A request is born 'submitted' with
-- nothing frozen, and is never deleted. Its target (community_id,
-- community_host), requested_by and created_at never change; the inventory
-- (schema_manifest, storage_manifest, inventory_manifest, inventory_digest,
-- inventory_frozen_at) is written once, by the submitted -> inventoried step;
-- the destructive storage manifest is written once, while fenced. The stage
-- moves one step forward, or to aborted from submitted, inventoried, approved
-- or fenced; aborted and retention_pending are terminal. It becomes approved
-- only with a matching approval row; from fenced to bindings_removed (and
-- the destructive freeze) only while the community is fenced at the request's
-- fence generation, from postgres_purged on only when it is that generation's
-- tombstone, and aborted only when the community is active again;
-- drained needs the destructive manifest frozen. A stage change runs at READ
-- COMMITTED. lease_generation never decreases; fence_generation is set only by
-- the step to fenced or aborted and never decreases; created_at and
-- updated_at are the database clock.
CREATE OR REPLACE FUNCTION enforce_community_deletion_request_guard() RETURNS trigger
    LANGUAGE plpgsql VOLATILE
    AS $$
DECLARE
    community_state text;
    community_generation bigint;
    community_host text;
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('deletion request %s refused: deletion requests are permanent audit records', OLD.id);
    END IF;

    IF TG_OP = 'INSERT' THEN
        IF NEW.stage <> 'submitted'
           OR NEW.schema_manifest IS NOT NULL OR NEW.storage_manifest IS NOT NULL
           OR NEW.inventory_manifest IS NOT NULL OR NEW.inventory_digest IS NOT NULL
           OR NEW.inventory_frozen_at IS NOT NULL OR NEW.destructive_storage_manifest IS NOT NULL
           OR NEW.fence_generation IS NOT NULL OR NEW.lease_owner IS NOT NULL OR NEW.lease_generation <> 0
           OR NEW.lease_until IS NOT NULL OR NEW.destructive_storage_frozen_at IS NOT NULL
           OR NEW.blocked_at IS NOT NULL OR NEW.blocked_reason IS NOT NULL
           OR NEW.quiescing_started_at IS NOT NULL OR NEW.pre_quiesce_archived_at IS NOT NULL
           OR NEW.retry_stage IS NOT NULL OR NEW.retry_count <> 0 OR NEW.attempts <> 0
           OR NEW.last_error IS NOT NULL OR NEW.last_error_at IS NOT NULL
           OR NEW.completed_at IS NOT NULL OR NEW.aborted_at IS NOT NULL
           OR NEW.aborted_by IS NOT NULL OR NEW.abort_reason IS NOT NULL THEN
            RAISE EXCEPTION USING ERRCODE = '23000',
                MESSAGE = format('deletion request %s refused: a request is created submitted, with nothing frozen, leased or blocked', NEW.id);
        END IF;
        SELECT c.deletion_state, c.host INTO community_state, community_host
        FROM communities c WHERE c.id = NEW.community_id;
        IF community_state IS DISTINCT FROM 'active' OR NEW.community_host IS DISTINCT FROM community_host THEN
            RAISE EXCEPTION USING ERRCODE = '23000',
                MESSAGE = format('deletion request refused: community %s is %s or its host is not %L',
                                 NEW.community_id, coalesce(community_state, 'missing'), NEW.community_host);
        END IF;
        NEW.created_at := now();
        NEW.updated_at := now();
        NEW.next_attempt_at := now();
        RETURN NEW;
    END IF;

    IF OLD.stage IN ('aborted', 'retention_pending') THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('deletion request %s refused: stage %s is terminal', OLD.id, OLD.stage);
    END IF;
    IF (NEW.id, NEW.community_id, NEW.community_host, NEW.requested_by, NEW.created_at)
       IS DISTINCT FROM (OLD.id, OLD.community_id, OLD.community_host, OLD.requested_by, OLD.created_at) THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('deletion request %s refused: its target, requester and creation time never change', OLD.id);
    END IF;
    IF (NEW.schema_manifest, NEW.storage_manifest, NEW.inventory_manifest, NEW.inventory_digest, NEW.inventory_frozen_at)
       IS DISTINCT FROM (OLD.schema_manifest, OLD.storage_manifest, OLD.inventory_manifest, OLD.inventory_digest, OLD.inventory_frozen_at)
       AND NOT (OLD.stage = 'submitted' AND NEW.stage = 'inventoried'
                AND OLD.schema_manifest IS NULL AND OLD.storage_manifest IS NULL
                AND OLD.inventory_manifest IS NULL AND OLD.inventory_digest IS NULL
                AND OLD.inventory_frozen_at IS NULL) THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('deletion request %s refused: the frozen inventory is written once, by submitted -> inventoried', OLD.id);
    END IF;
    IF (NEW.destructive_storage_manifest, NEW.destructive_storage_frozen_at)
       IS DISTINCT FROM (OLD.destructive_storage_manifest, OLD.destructive_storage_frozen_at)
       AND NOT (OLD.stage = 'fenced' AND NEW.stage = 'fenced'
                AND OLD.destructive_storage_manifest IS NULL AND OLD.destructive_storage_frozen_at IS NULL) THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('deletion request %s refused: the destructive storage manifest is written once, while fenced', OLD.id);
    END IF;
    IF NEW.lease_generation < OLD.lease_generation
       OR (OLD.fence_generation IS NOT NULL
           AND (NEW.fence_generation IS NULL OR NEW.fence_generation < OLD.fence_generation)) THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('deletion request %s refused: lease and fence generations never decrease', OLD.id);
    END IF;
    IF NEW.fence_generation IS DISTINCT FROM OLD.fence_generation
       AND NOT (NEW.stage IN ('fenced', 'aborted') AND NEW.stage IS DISTINCT FROM OLD.stage) THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('deletion request %s refused: fence_generation is set only by the step to fenced or aborted', OLD.id);
    END IF;

    IF NEW.stage IS DISTINCT FROM OLD.stage THEN
        IF current_setting('transaction_isolation') <> 'read committed' THEN
            RAISE EXCEPTION USING ERRCODE = '25000',
                MESSAGE = format('deletion request %s refused: isolation level %s pins a snapshot that cannot see the community''s current state',
                                 OLD.id, current_setting('transaction_isolation'));
        END IF;
        IF NOT (NEW.stage = community_deletion_next_stage(OLD.stage)
                OR (NEW.stage = 'aborted' AND OLD.stage IN ('submitted', 'inventoried', 'approved', 'fenced'))) THEN
            RAISE EXCEPTION USING ERRCODE = '23000',
                MESSAGE = format('deletion request %s refused: stage %s -> %s is not a lifecycle step', OLD.id, OLD.stage, NEW.stage);
        END IF;
        IF NEW.stage = 'drained' AND NEW.destructive_storage_manifest IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = '23000',
                MESSAGE = format('deletion request %s refused: drained needs the destructive storage manifest frozen', OLD.id);
        END IF;
        IF NEW.stage = 'approved' AND NOT EXISTS (
            SELECT 1 FROM community_deletion_approvals approval
            WHERE approval.request_id = NEW.id
              AND approval.community_id = NEW.community_id
              AND approval.inventory_digest = NEW.inventory_digest) THEN
            RAISE EXCEPTION USING ERRCODE = '23000',
                MESSAGE = format('deletion request %s refused: approved needs an approval of its frozen inventory digest', OLD.id);
        END IF;
    END IF;

    -- Every step (and the destructive freeze) must match the community: from
    -- fenced to bindings_removed it is fenced at the request's generation,
    -- from postgres_purged on it is that generation's tombstone, and an
    -- abort leaves it active. FOR SHARE waits for a concurrent lifecycle
    -- change of the community and reads its newest version.
    IF NEW.stage IS DISTINCT FROM OLD.stage
       OR NEW.destructive_storage_manifest IS DISTINCT FROM OLD.destructive_storage_manifest THEN
        SELECT c.deletion_state, c.deletion_fence_generation INTO community_state, community_generation
        FROM communities c WHERE c.id = NEW.community_id
        FOR SHARE;
        IF NOT (CASE
            WHEN NEW.stage IN ('fenced', 'drained', 'bindings_removed')
                THEN community_state = 'fenced' AND community_generation = NEW.fence_generation
            WHEN NEW.stage IN ('postgres_purged', 'cache_purged', 'logically_verified', 'retention_pending')
                THEN community_state = 'tombstone' AND community_generation = NEW.fence_generation
            WHEN NEW.stage = 'aborted' THEN community_state = 'active'
            ELSE true
        END) IS TRUE THEN
            RAISE EXCEPTION USING ERRCODE = '23000',
                MESSAGE = format('deletion request %s refused: stage %s does not match community %s, which is %s at fence generation %s',
                                 OLD.id, NEW.stage, NEW.community_id, community_state, community_generation);
        END IF;
    END IF;
    NEW.updated_at := now();
    RETURN NEW;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Guards community_deletion_approvals. An approval is inserted only for an
-- unblocked 'inventoried' request whose community and frozen inventory digest
-- it repeats, and only by someone other than the requester (the two-person
-- rule, compared ignoring case and surrounding whitespace). It takes the request row lock
-- first, so it serializes with every change to the request. approved_at is the
-- database clock. An approval is never updated or deleted.
CREATE OR REPLACE FUNCTION enforce_community_deletion_approval_guard() RETURNS trigger
    LANGUAGE plpgsql VOLATILE
    AS $$
DECLARE
    request community_deletion_requests%ROWTYPE;
BEGIN
    IF TG_OP <> 'INSERT' THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('deletion approval %s refused: approvals are immutable evidence', OLD.request_id);
    END IF;
    SELECT * INTO request FROM community_deletion_requests r WHERE r.id = NEW.request_id FOR UPDATE;
    IF request.id IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('deletion approval refused: request %s does not exist', NEW.request_id);
    END IF;
    IF request.stage <> 'inventoried' OR request.blocked_at IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('deletion approval refused: request %s is %s%s, not an unblocked inventoried request',
                             request.id, request.stage, CASE WHEN request.blocked_at IS NULL THEN '' ELSE ' and blocked' END);
    END IF;
    IF NEW.community_id IS DISTINCT FROM request.community_id
       OR NEW.inventory_digest IS DISTINCT FROM request.inventory_digest THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('deletion approval refused: it does not match request %s''s community and frozen inventory digest', request.id);
    END IF;
    IF lower(regexp_replace(NEW.approved_by, '^[[:space:]]+|[[:space:]]+$', '', 'g'))
       = lower(regexp_replace(request.requested_by, '^[[:space:]]+|[[:space:]]+$', '', 'g')) THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('deletion approval refused: %s requested deletion %s and cannot also approve it', request.requested_by, request.id);
    END IF;
    NEW.approved_at := now();
    RETURN NEW;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Guards community_serving_write_leases, the admission record of an external
-- serving side effect. A lease is inserted only through the write admission
-- (READ COMMITTED, shared community lock) for an active community, at its
-- current fence generation, with a fresh generation from the table's sequence.
-- Its identity (id, community, operation, owner, generations, created_at) never
-- changes, and it is extended only while unexpired and while its community is
-- still active or quiescing at the same fence generation. Release and reaping
-- delete freely.
CREATE OR REPLACE FUNCTION enforce_community_serving_write_lease_guard() RETURNS trigger
    LANGUAGE plpgsql VOLATILE
    AS $$
DECLARE
    community_state text;
    community_generation bigint;
BEGIN
    IF TG_OP = 'INSERT' THEN
        PERFORM assert_community_write_allowed(NEW.community_id);
        SELECT c.deletion_state, c.deletion_fence_generation INTO community_state, community_generation
        FROM communities c WHERE c.id = NEW.community_id;
        IF community_state IS DISTINCT FROM 'active' OR NEW.fence_generation IS DISTINCT FROM community_generation THEN
            RAISE EXCEPTION USING ERRCODE = '55000',
                MESSAGE = format('community write refused: a new serving write lease needs community %s active at fence generation %s, and it is %s at %s',
                                 NEW.community_id, NEW.fence_generation, coalesce(community_state, 'missing'), community_generation);
        END IF;
        NEW.generation := nextval('community_serving_write_lease_generation_seq');
        NEW.created_at := now();
        NEW.heartbeat_at := now();
        RETURN NEW;
    END IF;

    IF (NEW.id, NEW.community_id, NEW.operation, NEW.owner, NEW.generation, NEW.fence_generation, NEW.created_at)
       IS DISTINCT FROM (OLD.id, OLD.community_id, OLD.operation, OLD.owner, OLD.generation, OLD.fence_generation, OLD.created_at) THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('serving write lease %s refused: a lease''s identity never changes', OLD.id);
    END IF;
    IF NEW.lease_until > OLD.lease_until THEN
        IF current_setting('transaction_isolation') <> 'read committed' THEN
            RAISE EXCEPTION USING ERRCODE = '25000',
                MESSAGE = format('community write refused: isolation level %s pins a snapshot that cannot see the deletion fence',
                                 current_setting('transaction_isolation'));
        END IF;
        PERFORM pg_advisory_xact_lock_shared(community_deletion_lock_key(OLD.community_id));
        SELECT c.deletion_state, c.deletion_fence_generation INTO community_state, community_generation
        FROM communities c WHERE c.id = NEW.community_id;
        IF OLD.lease_until < clock_timestamp()
           OR community_state NOT IN ('active', 'quiescing') OR community_state IS NULL
           OR community_generation IS DISTINCT FROM OLD.fence_generation THEN
            RAISE EXCEPTION USING ERRCODE = '55000',
                MESSAGE = format('community write refused: serving write lease %s is expired or its community %s is %s at fence generation %s',
                                 OLD.id, OLD.community_id, coalesce(community_state, 'missing'), community_generation);
        END IF;
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The deletion control plane: tables that survive a community purge.
CREATE OR REPLACE FUNCTION community_deletion_control_table(table_name text) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
        SELECT coalesce(table_name = ANY (ARRAY[
            'communities',
            'community_deletion_approvals',
            'community_deletion_checkpoints',
            'community_deletion_executor_heartbeats',
            'community_deletion_manifest_keys',
            'community_deletion_requests',
            'community_scoped_tables',
            'community_serving_write_leases',
            'storage_taxonomy_sweeps']), false)
    $$;
-- +goose StatementEnd
