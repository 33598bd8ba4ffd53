-- A write fence that costs almost nothing while no deletion is in flight
-- (issue 24; docs/invariants.md, "The near-free path").
--
-- * community_deletion_fence_marker, a sequence every role may read, holds
--   a 62-bit set: the bit of each community that is quiescing or fenced
--   (community_deletion_fence_bit()), 0 when none is. PL/pgSQL reads it
--   with pg_sequence_last_value(), a plain expression, without a query.
-- * The marker's advisory lock (two keys, apart from the communities'
--   one-key locks): a fence that admits a write on the near-free path
--   holds it shared until its transaction ends; a community leaving
--   active takes it exclusively, which waits for every such transaction,
--   as CREATE INDEX CONCURRENTLY waits for older ones, then sets the
--   community's bit before its new state commits (the trigger
--   communities_fence_marker_arm). Only community_deletion_settle_fence_marker(),
--   run in a transaction of its own, clears bits, under the same lock, from
--   committed states.
-- * A fence bound by a foreign key (three arguments, migration 00026)
--   admits a READ COMMITTED statement at once when it gets the lock shared
--   and the marker is 0, or when none of the statement's tenants has a bit
--   the marker holds; otherwise it checks as before. A key kept by a
--   foreign key makes a deleted tenant's rows impossible without a query.
-- * Every fence reads a table's own tenant key with a static query
--   (to_jsonb) instead of a dynamic one; the row-level fences of
--   partitions do too.
-- * The drift report gains a row for a marker that lacks the bit of a
--   community in flight.
--
-- Down restores the fences, lists and drift report of migration 00028 and
-- drops the marker.

-- +goose Up
CREATE SEQUENCE community_deletion.community_deletion_fence_marker AS bigint
    MINVALUE 0 MAXVALUE 4611686018427387903 NO CYCLE;
SELECT pg_catalog.setval('community_deletion.community_deletion_fence_marker', 0, true);
COMMENT ON SEQUENCE community_deletion.community_deletion_fence_marker IS 'The bits (community_deletion_fence_bit()) of the communities that are quiescing or fenced, 0 when none is: set by the trigger communities_fence_marker_arm, cleared only by community_deletion_settle_fence_marker(); read by the write fences with pg_sequence_last_value().';
GRANT SELECT ON SEQUENCE community_deletion.community_deletion_fence_marker TO PUBLIC;

-- +goose StatementBegin
-- The marker bit of community: one of 62, from the last 32 bits of its id
-- (random in a random uuid and in the name-based id of a keyed tenant).
CREATE FUNCTION community_deletion.community_deletion_fence_bit(community uuid) RETURNS bigint
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$ SELECT (1::pg_catalog.int8) OPERATOR(pg_catalog.<<)
                 ((('x' OPERATOR(pg_catalog.||) pg_catalog.right(community::pg_catalog.text, 8))::pg_catalog.bit(32)::pg_catalog.int8
                   OPERATOR(pg_catalog.%) 62)::pg_catalog.int4) $$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Takes the marker's advisory lock exclusively until the transaction ends,
-- waiting at most its lock_timeout for every transaction that admitted a
-- write on the near-free path. The executor takes it first when it starts
-- quiescing, before the community's own lock.
CREATE FUNCTION community_deletion.community_deletion_fence_marker_lock() RETURNS void
    LANGUAGE sql
    AS $$ SELECT pg_catalog.pg_advisory_xact_lock(1668246884, 1718510437) $$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Who holds the marker's advisory lock, as community_deletion_lock_holders()
-- names a community lock's holders: the transactions a community leaving
-- active waits for.
CREATE FUNCTION community_deletion.community_deletion_fence_marker_holders() RETURNS TABLE(pid integer, role_name text, application_name text, lock_mode text, prepared_gid text)
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
        SELECT l.pid, coalesce(a.usename::text, p.owner::text), a.application_name, l.mode, p.gid
        FROM pg_locks l
        LEFT JOIN pg_stat_activity a ON a.pid = l.pid
        LEFT JOIN pg_locks x ON l.pid IS NULL AND x.locktype = 'transactionid'
            AND x.virtualtransaction = l.virtualtransaction AND x.pid IS NULL
        LEFT JOIN pg_prepared_xacts p ON p.transaction = x.transactionid
        WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
          AND l.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())
          AND l.classid = 1668246884::oid AND l.objid = 1718510437::oid
        ORDER BY l.pid NULLS FIRST, p.gid
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The trigger communities_fence_marker_arm, BEFORE a community leaves
-- active: takes the marker's lock exclusively, so that every write
-- admitted on the near-free path has committed or aborted, then adds the
-- community's bit (every bit, if the marker was reset) before the new
-- state commits. A bit set by a transaction that then aborts stays until
-- the next settle: a write then takes the full path, never a shorter one.
CREATE FUNCTION community_deletion.enforce_community_fence_marker_arm() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
DECLARE
    marker bigint;
BEGIN
    IF OLD.deletion_state = 'active' AND NEW.deletion_state IS DISTINCT FROM 'active' THEN
        PERFORM community_deletion_fence_marker_lock();
        marker := pg_sequence_last_value('community_deletion_fence_marker'::regclass);
        PERFORM setval('community_deletion_fence_marker',
                       CASE WHEN marker IS NULL THEN 4611686018427387903
                            ELSE marker | community_deletion_fence_bit(OLD.id) END,
                       true);
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER communities_fence_marker_arm BEFORE UPDATE ON community_deletion.communities
    FOR EACH ROW EXECUTE FUNCTION community_deletion.enforce_community_fence_marker_arm();

-- +goose StatementBegin
-- Recomputes the marker from the committed states, in a transaction that
-- has written nothing (55000 otherwise) at READ COMMITTED (25000): the
-- bits of the communities quiescing or fenced. When the marker holds no
-- other bit it returns it unchanged without a lock; otherwise it takes the
-- marker's lock exclusively (waiting at most 5 s for writes admitted on
-- the near-free path, then 55P03) and sets it. Returns the marker.
CREATE FUNCTION community_deletion.community_deletion_settle_fence_marker() RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, community_deletion, pg_temp
    SET lock_timeout = '5s'
    AS $$
DECLARE
    marker bigint;
    wanted bigint;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION USING ERRCODE = '25000',
            MESSAGE = format('fence marker settle refused: isolation level %s pins a snapshot older than the states it must read; settle at READ COMMITTED',
                             current_setting('transaction_isolation'));
    END IF;
    IF pg_current_xact_id_if_assigned() IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = '55000',
            MESSAGE = 'fence marker settle refused: this transaction has written, and the marker is settled only from committed states; settle in a transaction of its own';
    END IF;
    marker := pg_sequence_last_value('community_deletion_fence_marker'::regclass);
    SELECT coalesce(bit_or(community_deletion_fence_bit(c.id)), 0) INTO wanted
    FROM communities c WHERE c.deletion_state IN ('quiescing', 'fenced');
    IF marker IS NOT NULL AND marker & ~wanted = 0 AND marker & wanted = wanted THEN
        RETURN marker;
    END IF;
    PERFORM community_deletion_fence_marker_lock();
    -- A new snapshot, taken after the lock: every community that left
    -- active before has committed its bit and its state.
    SELECT coalesce(bit_or(community_deletion_fence_bit(c.id)), 0) INTO wanted
    FROM communities c WHERE c.deletion_state IN ('quiescing', 'fenced');
    PERFORM setval('community_deletion_fence_marker', wanted, true);
    RETURN wanted;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The write fence of a registered table, statement level. Without
-- arguments it reads community_id; with one argument, the uuid key column
-- it names; with two, a key column of another kind or the paths through
-- the table's parents; with three, the same two and 'bound': a foreign key
-- keeps a deleted tenant's rows out of the table, and the fence first
-- tries the near-free path. A row whose key is NULL, or whose parents
-- reach no tenant, belongs to no tenant and passes.
CREATE OR REPLACE FUNCTION community_deletion.enforce_community_write_fence() RETURNS trigger
    LANGUAGE plpgsql
    AS $_$
DECLARE
    first_community pg_catalog.uuid;
    locked pg_catalog.bool;
    mixed pg_catalog.bool;
    state pg_catalog.text;
    isolation pg_catalog.text;
    touched pg_catalog.uuid[];
    resolved pg_catalog.bool := false;
    community pg_catalog.uuid;
    label pg_catalog.text;
    dangling_sql pg_catalog.text;
    dangling pg_catalog.text;
    marker pg_catalog.int8;
    bits pg_catalog.int8;
    key_column pg_catalog.text;
    key_kind pg_catalog.text;
BEGIN
    -- Path 0, near-free (docs/invariants.md): a bound table, READ
    -- COMMITTED, the marker's lock taken shared, and then, read after it,
    -- a marker of 0, or one that shares no bit with the statement's
    -- tenants. The lock comes first: a community that leaves active waits
    -- for it before it sets its bit, so a marker read under it is never
    -- older than a state that has committed.
    IF TG_NARGS OPERATOR(pg_catalog.=) 3
       AND pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.=) 'read committed' THEN
        IF pg_catalog.pg_try_advisory_xact_lock_shared(1668246884, 1718510437) THEN
            marker := pg_catalog.pg_sequence_last_value('community_deletion.community_deletion_fence_marker'::pg_catalog.regclass);
            IF marker OPERATOR(pg_catalog.=) 0 THEN
                RETURN NULL;
            END IF;
            IF marker OPERATOR(pg_catalog.<) 4611686018427387903 THEN
                resolved := true;
                IF TG_ARGV[0] OPERATOR(pg_catalog.=) 'through' THEN
                    EXECUTE community_deletion.community_deletion_fence_query(TG_OP, TG_ARGV) INTO touched;
                ELSE
                    key_column := TG_ARGV[0];
                    key_kind := TG_ARGV[1];
                    IF TG_OP OPERATOR(pg_catalog.=) 'INSERT' THEN
                        SELECT pg_catalog.array_agg(DISTINCT CASE WHEN key_kind OPERATOR(pg_catalog.=) 'uuid' THEN k.key::pg_catalog.uuid
                                                                  ELSE community_deletion.community_deletion_tenant_uuid(k.key) END)
                        INTO touched
                        FROM (SELECT pg_catalog.to_jsonb(n) OPERATOR(pg_catalog.->>) key_column FROM community_fence_new n) k (key)
                        WHERE k.key IS NOT NULL;
                    ELSIF TG_OP OPERATOR(pg_catalog.=) 'UPDATE' THEN
                        SELECT pg_catalog.array_agg(DISTINCT CASE WHEN key_kind OPERATOR(pg_catalog.=) 'uuid' THEN k.key::pg_catalog.uuid
                                                                  ELSE community_deletion.community_deletion_tenant_uuid(k.key) END)
                        INTO touched
                        FROM (SELECT pg_catalog.to_jsonb(o) OPERATOR(pg_catalog.->>) key_column FROM community_fence_old o
                              UNION ALL
                              SELECT pg_catalog.to_jsonb(n) OPERATOR(pg_catalog.->>) key_column FROM community_fence_new n) k (key)
                        WHERE k.key IS NOT NULL;
                    ELSE
                        SELECT pg_catalog.array_agg(DISTINCT CASE WHEN key_kind OPERATOR(pg_catalog.=) 'uuid' THEN k.key::pg_catalog.uuid
                                                                  ELSE community_deletion.community_deletion_tenant_uuid(k.key) END)
                        INTO touched
                        FROM (SELECT pg_catalog.to_jsonb(o) OPERATOR(pg_catalog.->>) key_column FROM community_fence_old o) k (key)
                        WHERE k.key IS NOT NULL;
                    END IF;
                END IF;
                IF touched IS NULL OR pg_catalog.cardinality(touched) OPERATOR(pg_catalog.=) 0 THEN
                    RETURN NULL; -- no row of any tenant
                END IF;
                bits := 0;
                FOREACH community IN ARRAY touched LOOP
                    bits := bits OPERATOR(pg_catalog.|) community_deletion.community_deletion_fence_bit(community);
                END LOOP;
                IF (bits OPERATOR(pg_catalog.&) marker) OPERATOR(pg_catalog.=) 0 THEN
                    RETURN NULL;
                END IF;
            END IF;
        END IF;
    END IF;

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
        -- Path 1 for any other key: the statement's distinct tenants, by a
        -- static query for a key column of the table's own and a dynamic
        -- one through its parents.
        IF resolved THEN
            NULL; -- path 0 found them
        ELSIF TG_ARGV[0] OPERATOR(pg_catalog.<>) 'through' THEN
            key_column := TG_ARGV[0];
            key_kind := CASE WHEN TG_NARGS OPERATOR(pg_catalog.=) 1 THEN 'uuid' ELSE TG_ARGV[1] END;
            IF TG_OP OPERATOR(pg_catalog.=) 'INSERT' THEN
                SELECT pg_catalog.array_agg(DISTINCT CASE WHEN key_kind OPERATOR(pg_catalog.=) 'uuid' THEN k.key::pg_catalog.uuid
                                                          ELSE community_deletion.community_deletion_tenant_uuid(k.key) END)
                INTO touched
                FROM (SELECT pg_catalog.to_jsonb(n) OPERATOR(pg_catalog.->>) key_column FROM community_fence_new n) k (key)
                WHERE k.key IS NOT NULL;
            ELSIF TG_OP OPERATOR(pg_catalog.=) 'UPDATE' THEN
                SELECT pg_catalog.array_agg(DISTINCT CASE WHEN key_kind OPERATOR(pg_catalog.=) 'uuid' THEN k.key::pg_catalog.uuid
                                                          ELSE community_deletion.community_deletion_tenant_uuid(k.key) END)
                INTO touched
                FROM (SELECT pg_catalog.to_jsonb(o) OPERATOR(pg_catalog.->>) key_column FROM community_fence_old o
                      UNION ALL
                      SELECT pg_catalog.to_jsonb(n) OPERATOR(pg_catalog.->>) key_column FROM community_fence_new n) k (key)
                WHERE k.key IS NOT NULL;
            ELSE
                SELECT pg_catalog.array_agg(DISTINCT CASE WHEN key_kind OPERATOR(pg_catalog.=) 'uuid' THEN k.key::pg_catalog.uuid
                                                          ELSE community_deletion.community_deletion_tenant_uuid(k.key) END)
                INTO touched
                FROM (SELECT pg_catalog.to_jsonb(o) OPERATOR(pg_catalog.->>) key_column FROM community_fence_old o) k (key)
                WHERE k.key IS NOT NULL;
            END IF;
        ELSE
            EXECUTE community_deletion.community_deletion_fence_query(TG_OP, TG_ARGV) INTO touched;
            IF TG_NARGS OPERATOR(pg_catalog.<>) 3 THEN
                -- A bound table has no first step along a declared reference.
                dangling_sql := community_deletion.community_deletion_dangling_query(TG_OP, TG_ARGV);
            END IF;
            IF dangling_sql IS NOT NULL THEN
                EXECUTE dangling_sql INTO dangling;
                IF dangling IS NOT NULL THEN
                    RAISE EXCEPTION USING
                        ERRCODE = '55000',
                        MESSAGE = pg_catalog.format('community write to %I refused: a row''s declared reference to %s names no row there; write the row it references first',
                                                    TG_TABLE_NAME, dangling),
                        CONSTRAINT = 'community_write_fence';
                END IF;
            END IF;
        END IF;
        IF touched IS NULL OR pg_catalog.cardinality(touched) OPERATOR(pg_catalog.=) 0 THEN
            RETURN NULL; -- no row of any tenant
        END IF;
        IF pg_catalog.cardinality(touched) OPERATOR(pg_catalog.=) 1
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
        touched := pg_catalog.array_remove(touched, NULL);
        IF touched IS NULL OR pg_catalog.cardinality(touched) OPERATOR(pg_catalog.=) 0 THEN
            RETURN NULL; -- no row of any tenant
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
        IF community_deletion.community_write_allowed(community) IS NOT TRUE THEN
            SELECT c.deletion_state, COALESCE(c.tenant_key, c.id::pg_catalog.text) INTO state, label
            FROM community_deletion.communities c WHERE c.id OPERATOR(pg_catalog.=) community;
            RAISE EXCEPTION USING
                ERRCODE = '55000',
                MESSAGE = pg_catalog.format('community write to %I refused: community %s is %s',
                                            TG_TABLE_NAME, COALESCE(label, community::pg_catalog.text), COALESCE(state, 'missing')),
                CONSTRAINT = 'community_write_fence';
        END IF;
    END LOOP;
    RETURN NULL;
END
$_$;
-- +goose StatementEnd

COMMENT ON FUNCTION community_deletion.enforce_community_write_fence() IS 'The write fence of a registered tenant table: refuses a write into a community that is not active (55000) and any write of a tenant''s row at REPEATABLE READ or SERIALIZABLE (25000); every refusal names the constraint community_write_fence. Without arguments it reads community_id; one argument names another uuid key column; two name a key column of another kind or the paths through the table''s parents; a third, ''bound'', lets it admit a statement without a query while no deletion is in flight. A row of no tenant (a NULL key) passes.';

-- +goose StatementBegin
-- The write fence of a partition created after its partitioned table was
-- attached, row level: attach puts it on the partitioned table, and
-- PostgreSQL clones it onto every partition from the moment the partition
-- exists; on a partition that has the statement-level fences, attach
-- disables the clone. Its arguments, and its near-free path, are the
-- statement-level fence's.
CREATE OR REPLACE FUNCTION community_deletion.enforce_community_write_fence_row() RETURNS trigger
    LANGUAGE plpgsql
    AS $_$
DECLARE
    args pg_catalog.text[];
    touched pg_catalog.uuid[];
    dangling_sql pg_catalog.text;
    dangling pg_catalog.text;
    marker pg_catalog.int8;
    bits pg_catalog.int8 := 0;
    community pg_catalog.uuid;
    old_key pg_catalog.text;
    new_key pg_catalog.text;
BEGIN
    -- (TG_ARGV counts from 0, args from 1.)
    args := CASE TG_NARGS WHEN 0 THEN ARRAY['community_id', 'uuid']
                          WHEN 1 THEN ARRAY[TG_ARGV[0], 'uuid']
                          ELSE ARRAY[TG_ARGV[0], TG_ARGV[1]] END;
    -- The statement-level fence's path 0, a row at a time.
    IF TG_NARGS OPERATOR(pg_catalog.=) 3
       AND pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.=) 'read committed'
       AND pg_catalog.pg_try_advisory_xact_lock_shared(1668246884, 1718510437) THEN
        marker := pg_catalog.pg_sequence_last_value('community_deletion.community_deletion_fence_marker'::pg_catalog.regclass);
        IF marker OPERATOR(pg_catalog.=) 0 THEN
            RETURN NULL;
        END IF;
    END IF;
    IF args[1] OPERATOR(pg_catalog.<>) 'through' THEN
        -- A key column of the table's own: read without a query.
        IF TG_OP OPERATOR(pg_catalog.<>) 'INSERT' THEN
            old_key := pg_catalog.to_jsonb(OLD) OPERATOR(pg_catalog.->>) args[1];
        END IF;
        IF TG_OP OPERATOR(pg_catalog.<>) 'DELETE' THEN
            new_key := pg_catalog.to_jsonb(NEW) OPERATOR(pg_catalog.->>) args[1];
        END IF;
        IF old_key IS NOT NULL THEN
            touched := ARRAY[CASE WHEN args[2] OPERATOR(pg_catalog.=) 'uuid' THEN old_key::pg_catalog.uuid
                                  ELSE community_deletion.community_deletion_tenant_uuid(old_key) END];
        END IF;
        IF new_key IS NOT NULL AND new_key IS DISTINCT FROM old_key THEN
            touched := touched OPERATOR(pg_catalog.||) CASE WHEN args[2] OPERATOR(pg_catalog.=) 'uuid' THEN new_key::pg_catalog.uuid
                                                            ELSE community_deletion.community_deletion_tenant_uuid(new_key) END;
        END IF;
    ELSIF TG_OP OPERATOR(pg_catalog.=) 'INSERT' THEN
        EXECUTE community_deletion.community_deletion_fence_query('ROW', args) INTO touched USING NEW, NEW;
    ELSIF TG_OP OPERATOR(pg_catalog.=) 'UPDATE' THEN
        EXECUTE community_deletion.community_deletion_fence_query('ROW', args) INTO touched USING OLD, NEW;
    ELSE
        EXECUTE community_deletion.community_deletion_fence_query('ROW', args) INTO touched USING OLD, OLD;
    END IF;
    IF TG_NARGS OPERATOR(pg_catalog.<>) 3 THEN
        dangling_sql := community_deletion.community_deletion_dangling_query(CASE TG_OP WHEN 'DELETE' THEN 'DELETE' ELSE 'ROW' END, args);
    END IF;
    IF dangling_sql IS NOT NULL THEN
        EXECUTE dangling_sql INTO dangling USING NEW, NEW;
        IF dangling IS NOT NULL THEN
            RAISE EXCEPTION USING
                ERRCODE = '55000',
                MESSAGE = pg_catalog.format('community write to %I refused: a row''s declared reference to %s names no row there; write the row it references first',
                                            TG_TABLE_NAME, dangling),
                CONSTRAINT = 'community_write_fence';
        END IF;
    END IF;
    IF touched IS NULL THEN
        RETURN NULL;
    END IF;
    IF marker IS NOT NULL AND marker OPERATOR(pg_catalog.<) 4611686018427387903 THEN
        -- Under the marker's lock (marker is read only after it): no bit shared.
        FOREACH community IN ARRAY touched LOOP
            bits := bits OPERATOR(pg_catalog.|) community_deletion.community_deletion_fence_bit(community);
        END LOOP;
        IF (bits OPERATOR(pg_catalog.&) marker) OPERATOR(pg_catalog.=) 0 THEN
            RETURN NULL;
        END IF;
    END IF;
    PERFORM community_deletion.community_deletion_fence_admit(touched, TG_TABLE_NAME::pg_catalog.text);
    RETURN NULL;
END
$_$;
-- +goose StatementEnd

COMMENT ON FUNCTION community_deletion.enforce_community_write_fence_row() IS 'The write fence of a partition created after attach, row level, cloned by PostgreSQL from its partitioned table: refuses as enforce_community_write_fence() does, one row at a time.';

-- +goose StatementBegin
-- The kept-row fence of a registered 'nullify' table, statement level: an
-- INSERT, or an UPDATE that sets the key, carrying the key of a quiescing,
-- fenced or deleted tenant is refused (55000). Its arguments are the key
-- column and, for a key that is not a uuid, its kind; a third, 'bound',
-- lets it admit a statement without a query while no deletion is in
-- flight (a foreign key refuses a deleted tenant's key).
CREATE OR REPLACE FUNCTION community_deletion.enforce_community_kept_row_fence() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $_$
DECLARE
    linked pg_catalog.uuid[];
    community pg_catalog.uuid;
    state pg_catalog.text;
    label pg_catalog.text;
    key_column pg_catalog.text := TG_ARGV[0];
    key_kind pg_catalog.text := CASE WHEN TG_NARGS OPERATOR(pg_catalog.>) 1 THEN TG_ARGV[1] ELSE 'uuid' END;
BEGIN
    IF TG_NARGS OPERATOR(pg_catalog.=) 3
       AND pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.=) 'read committed'
       AND pg_catalog.pg_try_advisory_xact_lock_shared(1668246884, 1718510437) THEN
        IF pg_catalog.pg_sequence_last_value('community_deletion.community_deletion_fence_marker'::pg_catalog.regclass) OPERATOR(pg_catalog.=) 0 THEN
            RETURN NULL;
        END IF;
    END IF;
    IF TG_OP OPERATOR(pg_catalog.=) 'INSERT' THEN
        SELECT pg_catalog.array_agg(DISTINCT CASE WHEN key_kind OPERATOR(pg_catalog.=) 'uuid' THEN k.key::pg_catalog.uuid
                                                  ELSE community_deletion.community_deletion_tenant_uuid(k.key) END)
        INTO linked
        FROM (SELECT pg_catalog.to_jsonb(n) OPERATOR(pg_catalog.->>) key_column FROM community_fence_new n) k (key)
        WHERE k.key IS NOT NULL;
    ELSE
        SELECT pg_catalog.array_agg(CASE WHEN key_kind OPERATOR(pg_catalog.=) 'uuid' THEN k.key::pg_catalog.uuid
                                         ELSE community_deletion.community_deletion_tenant_uuid(k.key) END)
        INTO linked
        FROM (SELECT pg_catalog.to_jsonb(n) OPERATOR(pg_catalog.->>) key_column FROM community_fence_new n
              EXCEPT
              SELECT pg_catalog.to_jsonb(o) OPERATOR(pg_catalog.->>) key_column FROM community_fence_old o) k (key)
        WHERE k.key IS NOT NULL;
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
        SELECT c.deletion_state, COALESCE(c.tenant_key, c.id::pg_catalog.text) INTO state, label
        FROM community_deletion.communities c WHERE c.id OPERATOR(pg_catalog.=) community;
        IF state IS NOT NULL AND state OPERATOR(pg_catalog.<>) 'active'
           AND community_deletion.community_write_allowed(community) IS NOT TRUE THEN
            RAISE EXCEPTION USING
                ERRCODE = '55000',
                MESSAGE = pg_catalog.format('community write to %I refused: it links a row to community %s, which is %s; kept rows stay unlinked from a deleted tenant',
                                            TG_TABLE_NAME, label, state),
                CONSTRAINT = 'community_write_fence';
        END IF;
    END LOOP;
    RETURN NULL;
END
$_$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The kept-row fence of a partition created after its partitioned 'nullify'
-- table was attached, row level, cloned as enforce_community_write_fence_row()
-- is; its arguments, and its near-free path, are the statement-level
-- kept-row fence's.
CREATE OR REPLACE FUNCTION community_deletion.enforce_community_kept_row_fence_row() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
DECLARE
    key text;
    community uuid;
    state text;
BEGIN
    IF TG_NARGS = 3 AND current_setting('transaction_isolation') = 'read committed'
       AND pg_try_advisory_xact_lock_shared(1668246884, 1718510437) THEN
        IF pg_sequence_last_value('community_deletion_fence_marker'::regclass) = 0 THEN
            RETURN NULL;
        END IF;
    END IF;
    key := to_jsonb(NEW) ->> TG_ARGV[0];
    IF key IS NULL OR (TG_OP = 'UPDATE' AND key IS NOT DISTINCT FROM to_jsonb(OLD) ->> TG_ARGV[0]) THEN
        RETURN NULL; -- not linked to a tenant, or not newly
    END IF;
    community := CASE WHEN TG_NARGS > 1 AND TG_ARGV[1] <> 'uuid' THEN community_deletion_tenant_uuid(key) ELSE key::uuid END;
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION USING
            ERRCODE = '25000',
            MESSAGE = format('community write to %I refused: isolation level %s pins a snapshot that cannot see the deletion fence',
                             TG_TABLE_NAME, current_setting('transaction_isolation')),
            HINT = 'Write rows that carry a tenant key in READ COMMITTED transactions.',
            CONSTRAINT = 'community_write_fence';
    END IF;
    PERFORM pg_advisory_xact_lock_shared(community_deletion_lock_key(community));
    SELECT c.deletion_state INTO state FROM communities c WHERE c.id = community;
    IF state IS NOT NULL AND state <> 'active' AND community_write_allowed(community) IS NOT TRUE THEN
        RAISE EXCEPTION USING
            ERRCODE = '55000',
            MESSAGE = format('community write to %I refused: it links a row to community %s, which is %s; kept rows stay unlinked from a deleted tenant',
                             TG_TABLE_NAME, key, state),
            CONSTRAINT = 'community_write_fence';
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- The drift report: the tables' rows of migration 00028's report, and one
-- for the marker.
ALTER FUNCTION community_deletion.community_deletion_catalog_drift() RENAME TO community_deletion_catalog_drift_of_tables;

-- +goose StatementBegin
-- The catalog drift report: every way the live catalog differs from what
-- the deletion relies on, one row each, with the next step in the problem
-- where there is one. Every claim stops while it returns a row.
--
-- The marker's rows are judged under its lock, taken shared until the
-- transaction ends (at most 5 s): neither the arm trigger nor a settle can
-- change the marker then, and at READ COMMITTED the query after the lock
-- reads states no older than the marker, so a community that left flight
-- and was settled a moment ago is not reported. At REPEATABLE READ and
-- SERIALIZABLE the snapshot may predate a settle, and the marker is
-- reported as not checked.
CREATE FUNCTION community_deletion.community_deletion_catalog_drift() RETURNS TABLE(table_name text, problem text)
    LANGUAGE plpgsql
    SET jit = off
    SET search_path = pg_catalog, community_deletion, pg_temp
    SET lock_timeout = '5s'
    AS $$
BEGIN
    RETURN QUERY SELECT d.table_name, d.problem FROM community_deletion_catalog_drift_of_tables() d;
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RETURN QUERY SELECT 'community_deletion_fence_marker'::text,
            format('fence_marker: not checked at isolation level %s, whose snapshot may predate a settle; run the report at READ COMMITTED',
                   current_setting('transaction_isolation'));
        RETURN;
    END IF;
    PERFORM pg_advisory_xact_lock_shared(1668246884, 1718510437);
    -- A community in flight whose bit the marker lacks: the near-free
    -- path would admit its writes.
    RETURN QUERY SELECT 'community_deletion_fence_marker'::text,
           format('fence_marker: community %s is %s, but the fence marker lacks its bit, so bound tables would admit its writes; run SELECT community_deletion.community_deletion_settle_fence_marker()',
                  coalesce(c.tenant_key, c.id::text), c.deletion_state)
    FROM communities c
    WHERE c.deletion_state IN ('quiescing', 'fenced')
      AND (pg_sequence_last_value('community_deletion_fence_marker'::regclass) & community_deletion_fence_bit(c.id)) = 0
    ORDER BY 2;
END
$$;
-- +goose StatementEnd

REVOKE ALL ON FUNCTION community_deletion.community_deletion_catalog_drift() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION community_deletion.community_deletion_catalog_drift()
    TO community_deletion_serving, community_deletion_operator, community_deletion_executor;
GRANT EXECUTE ON FUNCTION community_deletion.community_deletion_settle_fence_marker()
    TO community_deletion_operator, community_deletion_executor;
GRANT EXECUTE ON FUNCTION community_deletion.community_deletion_fence_marker_lock()
    TO community_deletion_executor;
GRANT EXECUTE ON FUNCTION community_deletion.community_deletion_fence_marker_holders()
    TO community_deletion_operator, community_deletion_executor;

-- The marker of the communities already in flight.
-- +goose StatementBegin
DO $arm$
BEGIN
    PERFORM community_deletion.community_deletion_fence_marker_lock();
    PERFORM pg_catalog.setval('community_deletion.community_deletion_fence_marker',
                              (SELECT COALESCE(pg_catalog.bit_or(community_deletion.community_deletion_fence_bit(c.id)), 0)
                               FROM community_deletion.communities c
                               WHERE c.deletion_state IN ('quiescing', 'fenced')), true);
END
$arm$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_guard_triggers() RETURNS TABLE(table_name text, trigger_name text, function_signature text)
    LANGUAGE sql IMMUTABLE
    SET search_path = pg_catalog, community_deletion, pg_temp
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
            ('community_deletion_excluded_tables', 'community_deletion_excluded_tables_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('communities', 'communities_tenant_key_guard', 'enforce_community_tenant_key_guard()'),
            ('community_deletion_requests', 'community_deletion_requests_tenant_key_guard', 'enforce_community_tenant_key_guard()'),
            ('community_deletion_references', 'community_deletion_references_guard', 'enforce_community_deletion_reference_guard()'),
            ('community_deletion_references', 'community_deletion_references_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('communities', 'communities_tenant_objects_proof', 'enforce_community_tenant_objects_proof()'),
            ('community_deletion_receipt_keys', 'community_deletion_receipt_keys_guard', 'enforce_community_deletion_receipt_key_guard()'),
            ('community_deletion_receipt_keys', 'community_deletion_receipt_keys_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('communities', 'communities_fence_marker_arm', 'enforce_community_fence_marker_arm()')
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_installed_functions() RETURNS text[]
    LANGUAGE sql IMMUTABLE
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
        SELECT ARRAY[
            'assert_community_write_allowed(uuid)',
            'assert_tenant_write_allowed(text)',
            'attach_child_table(regclass,regclass[],regclass[])',
            'attach_community_write_fence(regclass,text,name)',
            'community_deletion_attach_row_fence(regclass,text,text[])',
            'community_deletion_bound_args(text[])',
            'community_deletion_catalog_drift()',
            'community_deletion_catalog_drift_of_tables()',
            'community_deletion_catalog_notes()',
            'community_deletion_child_paths(oid,oid[],oid[])',
            'community_deletion_child_spec(regclass,regclass[],regclass[])',
            'community_deletion_control_digest(text)',
            'community_deletion_control_table(text)',
            'community_deletion_dangling_query(text,text[])',
            'community_deletion_default_grace_period()',
            'community_deletion_drop_tenant_objects(uuid)',
            'community_deletion_expected_fence_args(oid,text,name,text,jsonb)',
            'community_deletion_fence_admit(uuid[],text)',
            'community_deletion_fence_args(name,text,jsonb)',
            'community_deletion_fence_bit(uuid)',
            'community_deletion_fence_bound(oid,name,jsonb)',
            'community_deletion_fence_marker_holders()',
            'community_deletion_fence_marker_lock()',
            'community_deletion_fence_query(text,text[])',
            'community_deletion_fenced(oid,name)',
            'community_deletion_first_steps(jsonb,boolean)',
            'community_deletion_function_digest(oid)',
            'community_deletion_guard_digest(text,text)',
            'community_deletion_guard_triggers()',
            'community_deletion_health()',
            'community_deletion_installed_functions()',
            'community_deletion_is_member(name)',
            'community_deletion_kept_row_args(name,text)',
            'community_deletion_kept_row_fenced(oid,name)',
            'community_deletion_key_cast(text)',
            'community_deletion_key_kind(regtype)',
            'community_deletion_lock_holders(bigint)',
            'community_deletion_lock_key(uuid)',
            'community_deletion_next_stage(text)',
            'community_deletion_operators_share_role()',
            'community_deletion_path_keys(jsonb,jsonb)',
            'community_deletion_protection_state(uuid)',
            'community_deletion_purge_pressure()',
            'community_deletion_receipt_chain_head()',
            'community_deletion_record_tenant_table(regclass,name,text[])',
            'community_deletion_register_child_table(regclass,jsonb)',
            'community_deletion_register_table(regclass,text,name)',
            'community_deletion_require_member(name[],text)',
            'community_deletion_restore_active(uuid,timestamptz)',
            'community_deletion_row_fenced(oid,regprocedure,text[],boolean)',
            'community_deletion_seal_functions()',
            'community_deletion_settle_fence_marker()',
            'community_deletion_stage_order()',
            'community_deletion_stage_runnable(text)',
            'community_deletion_statement_fenced(oid,regprocedure,text[])',
            'community_deletion_step_authorized(uuid,text)',
            'community_deletion_table_references(oid)',
            'community_deletion_tenant_filter(name,name,text)',
            'community_deletion_tenant_id(text)',
            'community_deletion_tenant_key_kind()',
            'community_deletion_tenant_object_name(text,text)',
            'community_deletion_tenant_object_parts(text)',
            'community_deletion_tenant_schema(oid)',
            'community_deletion_tenant_uuid(text)',
            'community_deletion_trigger_args(text[])',
            'community_deletion_unregister_table(name,name)',
            'community_schema_destruction_lock_key()',
            'community_write_allowed(uuid)',
            'community_write_fence_excluded_table(text)',
            'declare_reference(regclass,name[],regclass,name[],text)',
            'declare_tenant_table(regclass,name)',
            'detach_community_write_fence(regclass)',
            'drop_reference(regclass,name[])',
            'enforce_community_deletion_approval_guard()',
            'enforce_community_deletion_checkpoint_guard()',
            'enforce_community_deletion_grace_fence()',
            'enforce_community_deletion_grace_period()',
            'enforce_community_deletion_manifest_key_guard()',
            'enforce_community_deletion_protection_guard()',
            'enforce_community_deletion_protection_submit()',
            'enforce_community_deletion_receipt_guard()',
            'enforce_community_deletion_receipt_key_guard()',
            'enforce_community_deletion_receipt_required()',
            'enforce_community_deletion_reference_guard()',
            'enforce_community_deletion_request_guard()',
            'enforce_community_deletion_settings_guard()',
            'enforce_community_deletion_storage_layout_guard()',
            'enforce_community_deletion_tenant_table_guard()',
            'enforce_community_fence_marker_arm()',
            'enforce_community_kept_row_fence()',
            'enforce_community_kept_row_fence_row()',
            'enforce_community_scoped_table_guard()',
            'enforce_community_serving_write_lease_guard()',
            'enforce_community_tenant_created()',
            'enforce_community_tenant_key_guard()',
            'enforce_community_tenant_objects_proof()',
            'enforce_community_tombstone()',
            'enforce_community_tombstone_proof()',
            'enforce_community_truncate_fence()',
            'enforce_community_write_fence()',
            'enforce_community_write_fence_row()',
            'exclude_table(regclass,text)',
            'include_table(regclass)',
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
        IF fn NOT IN ('community_deletion_lock_key(uuid)', 'enforce_community_write_fence()',
                       'enforce_community_write_fence_row()', 'community_deletion_tenant_uuid(text)',
                       'community_deletion_fence_bit(uuid)') THEN
            EXECUTE format('ALTER FUNCTION %s SET search_path = pg_catalog, %I, pg_temp', fn::regprocedure, home);
        END IF;
        IF fn IN ('attach_community_write_fence(regclass,text,name)', 'detach_community_write_fence(regclass)',
                  'community_deletion_register_table(regclass,text,name)', 'community_deletion_unregister_table(name,name)',
                  'declare_tenant_table(regclass,name)', 'community_deletion_record_tenant_table(regclass,name,text[])',
                  'attach_child_table(regclass,regclass[],regclass[])', 'community_deletion_register_child_table(regclass,jsonb)',
                  'declare_reference(regclass,name[],regclass,name[],text)', 'drop_reference(regclass,name[])',
                  'enforce_community_write_fence_row()', 'enforce_community_kept_row_fence_row()',
                  'community_deletion_attach_row_fence(regclass,text,text[])', 'community_deletion_key_kind(regtype)',
                  'community_deletion_tenant_key_kind()', 'community_deletion_fence_args(name,text,jsonb)',
                  'community_deletion_fence_bound(oid,name,jsonb)', 'community_deletion_bound_args(text[])',
                  'community_deletion_kept_row_args(name,text)', 'community_deletion_child_spec(regclass,regclass[],regclass[])',
                  'exclude_table(regclass,text)', 'include_table(regclass)',
                  'enforce_community_kept_row_fence()', 'enforce_community_tenant_created()',
                  'enforce_community_write_fence()', 'enforce_community_truncate_fence()',
                  'community_deletion_control_table(text)', 'community_deletion_tenant_schema(oid)',
                  'community_deletion_fence_bit(uuid)') THEN
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

SELECT community_deletion.community_deletion_seal_functions();

-- +goose Down
DROP TRIGGER communities_fence_marker_arm ON community_deletion.communities;
DROP FUNCTION community_deletion.community_deletion_catalog_drift();
ALTER FUNCTION community_deletion.community_deletion_catalog_drift_of_tables() RENAME TO community_deletion_catalog_drift;

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.enforce_community_write_fence() RETURNS trigger
    LANGUAGE plpgsql
    AS $_$
DECLARE
    first_community pg_catalog.uuid;
    locked pg_catalog.bool;
    mixed pg_catalog.bool;
    state pg_catalog.text;
    isolation pg_catalog.text;
    touched pg_catalog.uuid[];
    community pg_catalog.uuid;
    label pg_catalog.text;
    dangling_sql pg_catalog.text;
    dangling pg_catalog.text;
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
        -- Path 1 for any other key: the statement's distinct tenants, by one
        -- dynamic query.
        IF TG_NARGS OPERATOR(pg_catalog.=) 1 THEN
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
            touched := pg_catalog.array_remove(touched, NULL);
        ELSE
            EXECUTE community_deletion.community_deletion_fence_query(TG_OP, TG_ARGV) INTO touched;
            dangling_sql := community_deletion.community_deletion_dangling_query(TG_OP, TG_ARGV);
            IF dangling_sql IS NOT NULL THEN
                EXECUTE dangling_sql INTO dangling;
                IF dangling IS NOT NULL THEN
                    RAISE EXCEPTION USING
                        ERRCODE = '55000',
                        MESSAGE = pg_catalog.format('community write to %I refused: a row''s declared reference to %s names no row there; write the row it references first',
                                                    TG_TABLE_NAME, dangling),
                        CONSTRAINT = 'community_write_fence';
                END IF;
            END IF;
        END IF;
        IF touched IS NULL OR pg_catalog.cardinality(touched) OPERATOR(pg_catalog.=) 0 THEN
            RETURN NULL; -- no row of any tenant
        END IF;
        IF pg_catalog.cardinality(touched) OPERATOR(pg_catalog.=) 1
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
        touched := pg_catalog.array_remove(touched, NULL);
        IF touched IS NULL OR pg_catalog.cardinality(touched) OPERATOR(pg_catalog.=) 0 THEN
            RETURN NULL; -- no row of any tenant
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
        IF community_deletion.community_write_allowed(community) IS NOT TRUE THEN
            SELECT c.deletion_state, COALESCE(c.tenant_key, c.id::pg_catalog.text) INTO state, label
            FROM community_deletion.communities c WHERE c.id OPERATOR(pg_catalog.=) community;
            RAISE EXCEPTION USING
                ERRCODE = '55000',
                MESSAGE = pg_catalog.format('community write to %I refused: community %s is %s',
                                            TG_TABLE_NAME, COALESCE(label, community::pg_catalog.text), COALESCE(state, 'missing')),
                CONSTRAINT = 'community_write_fence';
        END IF;
    END LOOP;
    RETURN NULL;
END
$_$;
-- +goose StatementEnd

COMMENT ON FUNCTION community_deletion.enforce_community_write_fence() IS 'The write fence of a registered tenant table: refuses a write into a community that is not active (55000) and any write of a tenant''s row at REPEATABLE READ or SERIALIZABLE (25000); every refusal names the constraint community_write_fence. Without arguments it reads community_id; one argument names another uuid key column; two name a key column of another kind or the paths through the table''s parents. A row of no tenant (a NULL key) passes.';

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.enforce_community_write_fence_row() RETURNS trigger
    LANGUAGE plpgsql
    AS $_$
DECLARE
    args pg_catalog.text[];
    touched pg_catalog.uuid[];
    dangling_sql pg_catalog.text;
    dangling pg_catalog.text;
BEGIN
    args := CASE TG_NARGS WHEN 0 THEN ARRAY['community_id', 'uuid']
                          WHEN 1 THEN ARRAY[TG_ARGV[0], 'uuid']
                          ELSE TG_ARGV END;
    IF TG_OP OPERATOR(pg_catalog.=) 'INSERT' THEN
        EXECUTE community_deletion.community_deletion_fence_query('ROW', args) INTO touched USING NEW, NEW;
    ELSIF TG_OP OPERATOR(pg_catalog.=) 'UPDATE' THEN
        EXECUTE community_deletion.community_deletion_fence_query('ROW', args) INTO touched USING OLD, NEW;
    ELSE
        EXECUTE community_deletion.community_deletion_fence_query('ROW', args) INTO touched USING OLD, OLD;
    END IF;
    dangling_sql := community_deletion.community_deletion_dangling_query(CASE TG_OP WHEN 'DELETE' THEN 'DELETE' ELSE 'ROW' END, args);
    IF dangling_sql IS NOT NULL THEN
        EXECUTE dangling_sql INTO dangling USING NEW, NEW;
        IF dangling IS NOT NULL THEN
            RAISE EXCEPTION USING
                ERRCODE = '55000',
                MESSAGE = pg_catalog.format('community write to %I refused: a row''s declared reference to %s names no row there; write the row it references first',
                                            TG_TABLE_NAME, dangling),
                CONSTRAINT = 'community_write_fence';
        END IF;
    END IF;
    IF touched IS NOT NULL THEN
        PERFORM community_deletion.community_deletion_fence_admit(touched, TG_TABLE_NAME::pg_catalog.text);
    END IF;
    RETURN NULL;
END
$_$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.enforce_community_kept_row_fence() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $_$
DECLARE
    linked pg_catalog.uuid[];
    community pg_catalog.uuid;
    state pg_catalog.text;
    label pg_catalog.text;
    id_of pg_catalog.text;
BEGIN
    id_of := CASE WHEN TG_NARGS OPERATOR(pg_catalog.>) 1 AND TG_ARGV[1] OPERATOR(pg_catalog.<>) 'uuid'
                  THEN 'community_deletion.community_deletion_tenant_uuid(%s::pg_catalog.text)' ELSE '%s' END;
    IF TG_OP OPERATOR(pg_catalog.=) 'INSERT' THEN
        EXECUTE pg_catalog.format('SELECT pg_catalog.array_agg(DISTINCT %s) FROM community_fence_new n WHERE n.%I IS NOT NULL',
                                  pg_catalog.format(id_of, pg_catalog.format('n.%I', TG_ARGV[0])), TG_ARGV[0])
        INTO linked;
    ELSE
        EXECUTE pg_catalog.format('SELECT pg_catalog.array_agg(%s) FROM (SELECT n.%2$I FROM community_fence_new n '
                                  'WHERE n.%2$I IS NOT NULL EXCEPT SELECT o.%2$I FROM community_fence_old o) k',
                                  pg_catalog.format(id_of, pg_catalog.format('k.%I', TG_ARGV[0])), TG_ARGV[0])
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
        SELECT c.deletion_state, COALESCE(c.tenant_key, c.id::pg_catalog.text) INTO state, label
        FROM community_deletion.communities c WHERE c.id OPERATOR(pg_catalog.=) community;
        IF state IS NOT NULL AND state OPERATOR(pg_catalog.<>) 'active'
           AND community_deletion.community_write_allowed(community) IS NOT TRUE THEN
            RAISE EXCEPTION USING
                ERRCODE = '55000',
                MESSAGE = pg_catalog.format('community write to %I refused: it links a row to community %s, which is %s; kept rows stay unlinked from a deleted tenant',
                                            TG_TABLE_NAME, label, state),
                CONSTRAINT = 'community_write_fence';
        END IF;
    END LOOP;
    RETURN NULL;
END
$_$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.enforce_community_kept_row_fence_row() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
DECLARE
    key text;
    community uuid;
    state text;
BEGIN
    key := to_jsonb(NEW) ->> TG_ARGV[0];
    IF key IS NULL OR (TG_OP = 'UPDATE' AND key IS NOT DISTINCT FROM to_jsonb(OLD) ->> TG_ARGV[0]) THEN
        RETURN NULL; -- not linked to a tenant, or not newly
    END IF;
    community := CASE WHEN TG_NARGS > 1 AND TG_ARGV[1] <> 'uuid' THEN community_deletion_tenant_uuid(key) ELSE key::uuid END;
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION USING
            ERRCODE = '25000',
            MESSAGE = format('community write to %I refused: isolation level %s pins a snapshot that cannot see the deletion fence',
                             TG_TABLE_NAME, current_setting('transaction_isolation')),
            HINT = 'Write rows that carry a tenant key in READ COMMITTED transactions.',
            CONSTRAINT = 'community_write_fence';
    END IF;
    PERFORM pg_advisory_xact_lock_shared(community_deletion_lock_key(community));
    SELECT c.deletion_state INTO state FROM communities c WHERE c.id = community;
    IF state IS NOT NULL AND state <> 'active' AND community_write_allowed(community) IS NOT TRUE THEN
        RAISE EXCEPTION USING
            ERRCODE = '55000',
            MESSAGE = format('community write to %I refused: it links a row to community %s, which is %s; kept rows stay unlinked from a deleted tenant',
                             TG_TABLE_NAME, key, state),
            CONSTRAINT = 'community_write_fence';
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_guard_triggers() RETURNS TABLE(table_name text, trigger_name text, function_signature text)
    LANGUAGE sql IMMUTABLE
    SET search_path = pg_catalog, community_deletion, pg_temp
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
            ('community_deletion_excluded_tables', 'community_deletion_excluded_tables_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('communities', 'communities_tenant_key_guard', 'enforce_community_tenant_key_guard()'),
            ('community_deletion_requests', 'community_deletion_requests_tenant_key_guard', 'enforce_community_tenant_key_guard()'),
            ('community_deletion_references', 'community_deletion_references_guard', 'enforce_community_deletion_reference_guard()'),
            ('community_deletion_references', 'community_deletion_references_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('communities', 'communities_tenant_objects_proof', 'enforce_community_tenant_objects_proof()'),
            ('community_deletion_receipt_keys', 'community_deletion_receipt_keys_guard', 'enforce_community_deletion_receipt_key_guard()'),
            ('community_deletion_receipt_keys', 'community_deletion_receipt_keys_truncate_guard', 'refuse_community_deletion_truncate()')
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_installed_functions() RETURNS text[]
    LANGUAGE sql IMMUTABLE
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
        SELECT ARRAY[
            'assert_community_write_allowed(uuid)',
            'assert_tenant_write_allowed(text)',
            'attach_child_table(regclass,regclass[],regclass[])',
            'attach_community_write_fence(regclass,text,name)',
            'community_deletion_attach_row_fence(regclass,text,text[])',
            'community_deletion_bound_args(text[])',
            'community_deletion_catalog_drift()',
            'community_deletion_catalog_notes()',
            'community_deletion_child_paths(oid,oid[],oid[])',
            'community_deletion_child_spec(regclass,regclass[],regclass[])',
            'community_deletion_control_digest(text)',
            'community_deletion_control_table(text)',
            'community_deletion_dangling_query(text,text[])',
            'community_deletion_default_grace_period()',
            'community_deletion_drop_tenant_objects(uuid)',
            'community_deletion_expected_fence_args(oid,text,name,text,jsonb)',
            'community_deletion_fence_admit(uuid[],text)',
            'community_deletion_fence_args(name,text,jsonb)',
            'community_deletion_fence_bound(oid,name,jsonb)',
            'community_deletion_fence_query(text,text[])',
            'community_deletion_fenced(oid,name)',
            'community_deletion_first_steps(jsonb,boolean)',
            'community_deletion_function_digest(oid)',
            'community_deletion_guard_digest(text,text)',
            'community_deletion_guard_triggers()',
            'community_deletion_health()',
            'community_deletion_installed_functions()',
            'community_deletion_is_member(name)',
            'community_deletion_kept_row_args(name,text)',
            'community_deletion_kept_row_fenced(oid,name)',
            'community_deletion_key_cast(text)',
            'community_deletion_key_kind(regtype)',
            'community_deletion_lock_holders(bigint)',
            'community_deletion_lock_key(uuid)',
            'community_deletion_next_stage(text)',
            'community_deletion_operators_share_role()',
            'community_deletion_path_keys(jsonb,jsonb)',
            'community_deletion_protection_state(uuid)',
            'community_deletion_purge_pressure()',
            'community_deletion_receipt_chain_head()',
            'community_deletion_record_tenant_table(regclass,name,text[])',
            'community_deletion_register_child_table(regclass,jsonb)',
            'community_deletion_register_table(regclass,text,name)',
            'community_deletion_require_member(name[],text)',
            'community_deletion_restore_active(uuid,timestamptz)',
            'community_deletion_row_fenced(oid,regprocedure,text[],boolean)',
            'community_deletion_seal_functions()',
            'community_deletion_stage_order()',
            'community_deletion_stage_runnable(text)',
            'community_deletion_statement_fenced(oid,regprocedure,text[])',
            'community_deletion_step_authorized(uuid,text)',
            'community_deletion_table_references(oid)',
            'community_deletion_tenant_filter(name,name,text)',
            'community_deletion_tenant_id(text)',
            'community_deletion_tenant_key_kind()',
            'community_deletion_tenant_object_name(text,text)',
            'community_deletion_tenant_object_parts(text)',
            'community_deletion_tenant_schema(oid)',
            'community_deletion_tenant_uuid(text)',
            'community_deletion_trigger_args(text[])',
            'community_deletion_unregister_table(name,name)',
            'community_schema_destruction_lock_key()',
            'community_write_allowed(uuid)',
            'community_write_fence_excluded_table(text)',
            'declare_reference(regclass,name[],regclass,name[],text)',
            'declare_tenant_table(regclass,name)',
            'detach_community_write_fence(regclass)',
            'drop_reference(regclass,name[])',
            'enforce_community_deletion_approval_guard()',
            'enforce_community_deletion_checkpoint_guard()',
            'enforce_community_deletion_grace_fence()',
            'enforce_community_deletion_grace_period()',
            'enforce_community_deletion_manifest_key_guard()',
            'enforce_community_deletion_protection_guard()',
            'enforce_community_deletion_protection_submit()',
            'enforce_community_deletion_receipt_guard()',
            'enforce_community_deletion_receipt_key_guard()',
            'enforce_community_deletion_receipt_required()',
            'enforce_community_deletion_reference_guard()',
            'enforce_community_deletion_request_guard()',
            'enforce_community_deletion_settings_guard()',
            'enforce_community_deletion_storage_layout_guard()',
            'enforce_community_deletion_tenant_table_guard()',
            'enforce_community_kept_row_fence()',
            'enforce_community_kept_row_fence_row()',
            'enforce_community_scoped_table_guard()',
            'enforce_community_serving_write_lease_guard()',
            'enforce_community_tenant_created()',
            'enforce_community_tenant_key_guard()',
            'enforce_community_tenant_objects_proof()',
            'enforce_community_tombstone()',
            'enforce_community_tombstone_proof()',
            'enforce_community_truncate_fence()',
            'enforce_community_write_fence()',
            'enforce_community_write_fence_row()',
            'exclude_table(regclass,text)',
            'include_table(regclass)',
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
        IF fn NOT IN ('community_deletion_lock_key(uuid)', 'enforce_community_write_fence()',
                       'enforce_community_write_fence_row()', 'community_deletion_tenant_uuid(text)') THEN
            EXECUTE format('ALTER FUNCTION %s SET search_path = pg_catalog, %I, pg_temp', fn::regprocedure, home);
        END IF;
        IF fn IN ('attach_community_write_fence(regclass,text,name)', 'detach_community_write_fence(regclass)',
                  'community_deletion_register_table(regclass,text,name)', 'community_deletion_unregister_table(name,name)',
                  'declare_tenant_table(regclass,name)', 'community_deletion_record_tenant_table(regclass,name,text[])',
                  'attach_child_table(regclass,regclass[],regclass[])', 'community_deletion_register_child_table(regclass,jsonb)',
                  'declare_reference(regclass,name[],regclass,name[],text)', 'drop_reference(regclass,name[])',
                  'enforce_community_write_fence_row()', 'enforce_community_kept_row_fence_row()',
                  'community_deletion_attach_row_fence(regclass,text,text[])', 'community_deletion_key_kind(regtype)',
                  'community_deletion_tenant_key_kind()', 'community_deletion_fence_args(name,text,jsonb)',
                  'community_deletion_fence_bound(oid,name,jsonb)', 'community_deletion_bound_args(text[])',
                  'community_deletion_kept_row_args(name,text)', 'community_deletion_child_spec(regclass,regclass[],regclass[])',
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
DROP FUNCTION community_deletion.community_deletion_settle_fence_marker();
DROP FUNCTION community_deletion.enforce_community_fence_marker_arm();
DROP FUNCTION community_deletion.community_deletion_fence_marker_holders();
DROP FUNCTION community_deletion.community_deletion_fence_marker_lock();
DROP FUNCTION community_deletion.community_deletion_fence_bit(uuid);
DROP SEQUENCE community_deletion.community_deletion_fence_marker;

SELECT community_deletion.community_deletion_seal_functions();
