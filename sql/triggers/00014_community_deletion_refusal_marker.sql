-- Migration 00011 was revised after a first release: its revision made every
-- refusal of the write fence, of assert_community_write_allowed and of the
-- serving write lease guard name the constraint community_write_fence (so a
-- client recognizes it without reading the message); made
-- community_deletion_seal_functions() grant PUBLIC, at each seal, the five
-- functions a table's owner must call or name (where the first release
-- granted them once after its own seal, and each later seal revoked them);
-- and let operators lock expired serving write leases FOR UPDATE SKIP
-- LOCKED to reap them. A database that applied the first release of 00011
-- never ran that revision. This Up brings it there, and changes nothing on
-- a database that applied 00011 as it is written now. It then documents the
-- refusal contract on the three functions, where psql's \df+ shows it.
--
-- Down removes the comments. It leaves the revised bodies, seal and grant,
-- which are what migration 00011 now installs.

-- +goose Up
-- +goose StatementBegin
-- The explicit write admission for code paths the fence trigger does not
-- cover (serving-lease acquisition, writes to excluded tables). It refuses
-- REPEATABLE READ and SERIALIZABLE with SQLSTATE 25000 before anything else
-- (a pinned snapshot could still see 'active' after the fence committed), then
-- takes the shared community lock until the transaction ends, then refuses
-- with SQLSTATE 55000 unless community_write_allowed() admits the write. Both
-- refusals name the constraint community_write_fence, as the fence's do.
CREATE OR REPLACE FUNCTION assert_community_write_allowed(community uuid) RETURNS void
    LANGUAGE plpgsql VOLATILE
    AS $$
DECLARE
    state text;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION USING
            ERRCODE = '25000',
            MESSAGE = format('community write refused: isolation level %s pins a snapshot that cannot see the deletion fence',
                             current_setting('transaction_isolation')),
            HINT = 'Write community data in READ COMMITTED transactions.',
            CONSTRAINT = 'community_write_fence';
    END IF;
    PERFORM pg_advisory_xact_lock_shared(community_deletion_lock_key(community));
    IF community_write_allowed(community) IS NOT TRUE THEN
        SELECT c.deletion_state INTO state FROM communities c WHERE c.id = community;
        RAISE EXCEPTION USING
            ERRCODE = '55000',
            MESSAGE = format('community write refused: community %s is %s', community, coalesce(state, 'missing')),
            CONSTRAINT = 'community_write_fence';
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Installs the write fence's trigger function with every name qualified by
-- the schema of communities (or pg_catalog): it runs on every write of every
-- tenant table, so it carries no SET search_path (which costs a few
-- microseconds per call) and instead names nothing the writer's search_path,
-- temporary objects or own operators could stand in for. The admitted path
-- and its three-path structure are those of migration 00008. Every refusal
-- names the constraint community_write_fence, so a client recognizes it
-- without reading the message.
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
$fence$, '@home@', quote_ident(home));
END
$install$;
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
                                 NEW.community_id, NEW.fence_generation, coalesce(community_state, 'missing'), community_generation),
                CONSTRAINT = 'community_write_fence';
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
                                 current_setting('transaction_isolation')),
                CONSTRAINT = 'community_write_fence';
        END IF;
        PERFORM pg_advisory_xact_lock_shared(community_deletion_lock_key(OLD.community_id));
        SELECT c.deletion_state, c.deletion_fence_generation INTO community_state, community_generation
        FROM communities c WHERE c.id = NEW.community_id;
        IF OLD.lease_until < clock_timestamp()
           OR community_state NOT IN ('active', 'quiescing') OR community_state IS NULL
           OR community_generation IS DISTINCT FROM OLD.fence_generation THEN
            RAISE EXCEPTION USING ERRCODE = '55000',
                MESSAGE = format('community write refused: serving write lease %s is expired or its community %s is %s at fence generation %s',
                                 OLD.id, OLD.community_id, coalesce(community_state, 'missing'), community_generation),
                CONSTRAINT = 'community_write_fence';
        END IF;
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

ALTER FUNCTION enforce_community_serving_write_lease_guard() SECURITY DEFINER;

-- +goose StatementBegin
-- Fixes the search_path of every installed function (pg_catalog, the schema
-- of communities, pg_temp last) except the two that qualify every name
-- instead, because they run on every tenant write; revokes PUBLIC's default
-- EXECUTE from all of them but the five that check their caller themselves;
-- and records their digests for the drift report.
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
        IF fn IN ('attach_community_write_fence(regclass,text)', 'detach_community_write_fence(regclass)',
                  'community_deletion_register_table(regclass,text)', 'community_deletion_unregister_table(text)',
                  'enforce_community_write_fence()') THEN
            -- These check their caller themselves (a table's owner), or
            -- are trigger functions a table's owner must name.
            EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO PUBLIC', fn::regprocedure);
        ELSE
            EXECUTE format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', fn::regprocedure);
        END IF;
    END LOOP;
    DELETE FROM community_deletion_function_digests;
    INSERT INTO community_deletion_function_digests (function_signature, digest)
    SELECT f.signature, community_deletion_function_digest(f.signature::regprocedure::oid)
    FROM unnest(community_deletion_installed_functions()) AS f (signature);
END
$$;
-- +goose StatementEnd

GRANT UPDATE (heartbeat_at) ON community_serving_write_leases TO community_deletion_operator;

SELECT community_deletion_seal_functions();

COMMENT ON FUNCTION enforce_community_write_fence() IS
    'The write fence of a registered tenant table: refuses a write into a community that is not active (55000), a row without community_id (55000) and any write at REPEATABLE READ or SERIALIZABLE (25000); every refusal names the constraint community_write_fence.';
COMMENT ON FUNCTION assert_community_write_allowed(uuid) IS
    'The explicit write admission for writes the fence trigger does not see: refuses REPEATABLE READ and SERIALIZABLE (25000), takes the shared community lock, refuses a community that is not active (55000); every refusal names the constraint community_write_fence.';
COMMENT ON FUNCTION enforce_community_serving_write_lease_guard() IS
    'Guards community_serving_write_leases: a lease is taken only on an active community at its fence generation and presented only while it and its community are current (55000, 25000 at a pinned snapshot); those refusals name the constraint community_write_fence.';

-- +goose Down
COMMENT ON FUNCTION enforce_community_write_fence() IS NULL;
COMMENT ON FUNCTION assert_community_write_allowed(uuid) IS NULL;
COMMENT ON FUNCTION enforce_community_serving_write_lease_guard() IS NULL;
