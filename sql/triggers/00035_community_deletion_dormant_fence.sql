-- The write fence goes dormant while no deletion is in flight.
--
-- Path 0 of enforce_community_write_fence() (migration 00030) admits a
-- statement on a bound table, with no deletion in flight, in three
-- expressions: the isolation test, the fence marker's lock taken shared,
-- the marker read. The last two cost about as much as the first, and they
-- are needed only to see a deletion begin. Now the fence first asks
-- community_deletion_fence_armed(), a constant SQL function that the
-- planner inlines into the expression's cached plan, so asking costs next
-- to nothing: while it says false (dormant), a bound table's statement at
-- READ COMMITTED is admitted there.
--
-- The constant changes only under the marker's exclusive lock, by a
-- catalog change that invalidates every session's plan of it:
--   * armed by enforce_community_fence_marker_arm(), as a community leaves
--     active, and only in a transaction that holds every table with a
--     bound fence in SHARE mode (community_deletion_fence_drain(), which
--     the executor's BeginQuiescing runs after the marker's lock): a
--     writer that took the dormant return holds its table's ROW EXCLUSIVE
--     lock until it ends, so the SHARE lock waited for it, and a writer
--     that locks its table afterwards reads the constant again;
--   * disarmed by community_deletion_settle_fence_marker() when it finds,
--     after the lock, no community quiescing or fenced.
-- Registration takes the marker's lock shared, so a community leaving
-- active also waits for a table attached (and written) in a transaction
-- still open, whose fence its drain cannot see. REPEATABLE READ is still
-- refused: the isolation test comes first. The kept-row and row fences
-- keep their path 0 unchanged. The digest of the constant is that of its
-- dormant body in either state, so the drift report and the DDL guard see
-- any other body as a change; the report also names a dormant fence while
-- a community is quiescing or fenced. Down puts back every function as it
-- was and drops the new ones.

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION community_deletion.community_deletion_fence_armed() RETURNS boolean
    LANGUAGE sql STABLE
    AS $$ SELECT false $$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION community_deletion.community_deletion_fence_dormant() RETURNS boolean
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
    AS $$
        -- Read from the catalog, not by calling the constant: a session's
        -- plan of that may predate a change it has not yet seen. Any body
        -- but the armed one counts as dormant, so it is armed again.
        SELECT coalesce((SELECT p.prosrc <> ' SELECT true '
                         FROM pg_proc p WHERE p.oid = 'community_deletion_fence_armed()'::regprocedure), true)
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION community_deletion.community_deletion_fence_set_armed(armed boolean) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
    AS $$
BEGIN
    -- Only the arming trigger and the settle call this, as the schema's
    -- owner, holding the marker's lock.
    IF armed THEN
        CREATE OR REPLACE FUNCTION community_deletion.community_deletion_fence_armed() RETURNS boolean
            LANGUAGE sql STABLE
            AS $armed$ SELECT true $armed$;
    ELSE
        CREATE OR REPLACE FUNCTION community_deletion.community_deletion_fence_armed() RETURNS boolean
            LANGUAGE sql STABLE
            AS $armed$ SELECT false $armed$;
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION community_deletion.community_deletion_fence_undrained() RETURNS text
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
    AS $$
        -- The tables with a bound statement fence (the dormant path) that
        -- this transaction does not hold in SHARE mode or stronger, the
        -- first five by name.
        SELECT string_agg(u.name, ', ' ORDER BY u.name)
        FROM (SELECT b.relid::regclass::text AS name
              FROM (SELECT DISTINCT t.tgrelid AS relid FROM pg_trigger t
                    WHERE t.tgfoid = 'enforce_community_write_fence()'::regprocedure
                      AND t.tgnargs = 3 AND NOT t.tgisinternal) b
              WHERE NOT EXISTS (
                  SELECT 1 FROM pg_locks l
                  WHERE l.locktype = 'relation' AND l.relation = b.relid AND l.granted
                    AND l.pid = pg_backend_pid()
                    AND l.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())
                    AND l.mode IN ('ShareLock', 'ShareRowExclusiveLock', 'ExclusiveLock', 'AccessExclusiveLock'))
              ORDER BY 1 LIMIT 5) u
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION community_deletion.community_deletion_fence_drain() RETURNS integer
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
    SET lock_timeout TO '250ms'
    AS $$
DECLARE
    target regclass;
    drained integer := 0;
    holders text;
BEGIN
    -- Runs as its caller (the executor, who may lock the tables it purges).
    -- Armed already: its arming drained, and writers read the marker.
    IF NOT community_deletion_fence_dormant() THEN
        RETURN 0;
    END IF;
    -- Each table whose fence has the dormant path, a partition through its
    -- root (LOCK TABLE recurses). The wait for each lock is short, so that
    -- a writer queued behind a lock taken here, holding another table this
    -- drain needs, is released by this lock_timeout rather than aborted by
    -- its deadlock_timeout.
    FOR target IN
        SELECT DISTINCT coalesce(pg_partition_root(t.tgrelid), t.tgrelid)::regclass
        FROM pg_trigger t
        WHERE t.tgfoid = 'enforce_community_write_fence()'::regprocedure AND t.tgnargs = 3 AND NOT t.tgisinternal
        ORDER BY 1
    LOOP
        BEGIN
            EXECUTE format('LOCK TABLE %s IN SHARE MODE', target);
        EXCEPTION WHEN lock_not_available THEN
            SELECT string_agg(CASE WHEN h.pid IS NULL THEN 'a prepared transaction'
                                   ELSE format('pid %s (%s)', h.pid, a.usename) END, ', ' ORDER BY h.pid)
            INTO holders
            FROM (SELECT DISTINCT l.pid FROM pg_locks l
                  WHERE l.locktype = 'relation' AND l.granted AND l.relation = target
                    AND l.mode IN ('RowExclusiveLock', 'ShareUpdateExclusiveLock', 'ShareRowExclusiveLock',
                                   'ExclusiveLock', 'AccessExclusiveLock')
                  ORDER BY 1 LIMIT 5) h
            LEFT JOIN pg_stat_activity a ON a.pid = h.pid;
            RAISE EXCEPTION USING ERRCODE = '55P03',
                MESSAGE = format('write fence drain of %s gave up after %s, changing nothing: writes the dormant fence admitted still hold it',
                                 target, current_setting('lock_timeout')),
                DETAIL = coalesce('held by ' || holders, 'its holders are not known'),
                HINT = 'Retry once those transactions end.',
                SCHEMA = (SELECT n.nspname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = target),
                TABLE = (SELECT c.relname::text FROM pg_class c WHERE c.oid = target);
        END;
        drained := drained + 1;
    END LOOP;
    RETURN drained;
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
    -- COMMITTED, and then either a dormant fence, or the marker's lock
    -- taken shared and, read after it, a marker of 0, or one that shares
    -- no bit with the statement's tenants. The lock comes first: a
    -- community that leaves active waits for it before it sets its bit, so
    -- a marker read under it is never older than a state that has
    -- committed.
    IF TG_NARGS OPERATOR(pg_catalog.=) 3
       AND pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.=) 'read committed' THEN
        -- Dormant (migration 00035): community_deletion_fence_armed() is
        -- a constant the planner folds into this expression's cached
        -- plan, replaced (a catalog change, which invalidates the plan)
        -- only under the marker's lock: armed by a community leaving
        -- active in a transaction that holds every bound table in SHARE
        -- mode, so it has waited for every writer that took this return;
        -- disarmed by a settle that found no community quiescing or
        -- fenced.
        IF NOT community_deletion.community_deletion_fence_armed() THEN
            RETURN NULL;
        END IF;
        IF pg_catalog.pg_try_advisory_xact_lock_shared(1668246884, 1718510437) THEN
            marker := pg_catalog.pg_sequence_last_value('community_deletion.community_deletion_fence_marker'::pg_catalog.regclass);
            IF marker OPERATOR(pg_catalog.=) 0 THEN
                RETURN NULL;
            END IF;
            IF marker OPERATOR(pg_catalog.<) 4611686018427387903 THEN
                -- One static query ORs the bits of the statement's tenants
                -- (a NULL key has none) for a key of the table's own; a
                -- child table's tenants come through its parents.
                IF TG_ARGV[0] OPERATOR(pg_catalog.=) 'through' THEN
                    resolved := true;
                    EXECUTE community_deletion.community_deletion_fence_query(TG_OP, TG_ARGV) INTO touched;
                    IF touched IS NULL OR pg_catalog.cardinality(touched) OPERATOR(pg_catalog.=) 0 THEN
                        RETURN NULL; -- no row of any tenant
                    END IF;
                    bits := 0;
                    FOREACH community IN ARRAY touched LOOP
                        bits := bits OPERATOR(pg_catalog.|) community_deletion.community_deletion_fence_bit(community);
                    END LOOP;
                ELSIF TG_ARGV[1] OPERATOR(pg_catalog.=) 'uuid' THEN
                    IF TG_OP OPERATOR(pg_catalog.=) 'INSERT' THEN
                        SELECT pg_catalog.bit_or(community_deletion.community_deletion_fence_bit(k.key::pg_catalog.uuid)) INTO bits
                        FROM (SELECT pg_catalog.to_jsonb(n) OPERATOR(pg_catalog.->>) TG_ARGV[0] FROM community_fence_new n) k (key);
                    ELSIF TG_OP OPERATOR(pg_catalog.=) 'UPDATE' THEN
                        SELECT pg_catalog.bit_or(community_deletion.community_deletion_fence_bit(k.key::pg_catalog.uuid)) INTO bits
                        FROM (SELECT pg_catalog.to_jsonb(o) OPERATOR(pg_catalog.->>) TG_ARGV[0] FROM community_fence_old o
                              UNION ALL
                              SELECT pg_catalog.to_jsonb(n) OPERATOR(pg_catalog.->>) TG_ARGV[0] FROM community_fence_new n) k (key);
                    ELSE
                        SELECT pg_catalog.bit_or(community_deletion.community_deletion_fence_bit(k.key::pg_catalog.uuid)) INTO bits
                        FROM (SELECT pg_catalog.to_jsonb(o) OPERATOR(pg_catalog.->>) TG_ARGV[0] FROM community_fence_old o) k (key);
                    END IF;
                ELSE
                    IF TG_OP OPERATOR(pg_catalog.=) 'INSERT' THEN
                        SELECT pg_catalog.bit_or(community_deletion.community_deletion_fence_bit(community_deletion.community_deletion_tenant_uuid(k.key))) INTO bits
                        FROM (SELECT pg_catalog.to_jsonb(n) OPERATOR(pg_catalog.->>) TG_ARGV[0] FROM community_fence_new n) k (key);
                    ELSIF TG_OP OPERATOR(pg_catalog.=) 'UPDATE' THEN
                        SELECT pg_catalog.bit_or(community_deletion.community_deletion_fence_bit(community_deletion.community_deletion_tenant_uuid(k.key))) INTO bits
                        FROM (SELECT pg_catalog.to_jsonb(o) OPERATOR(pg_catalog.->>) TG_ARGV[0] FROM community_fence_old o
                              UNION ALL
                              SELECT pg_catalog.to_jsonb(n) OPERATOR(pg_catalog.->>) TG_ARGV[0] FROM community_fence_new n) k (key);
                    ELSE
                        SELECT pg_catalog.bit_or(community_deletion.community_deletion_fence_bit(community_deletion.community_deletion_tenant_uuid(k.key))) INTO bits
                        FROM (SELECT pg_catalog.to_jsonb(o) OPERATOR(pg_catalog.->>) TG_ARGV[0] FROM community_fence_old o) k (key);
                    END IF;
                END IF;
                IF bits IS NULL OR (bits OPERATOR(pg_catalog.&) marker) OPERATOR(pg_catalog.=) 0 THEN
                    RETURN NULL; -- no row of any tenant, or none with its bit set
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
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.enforce_community_fence_marker_arm() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
    AS $$
DECLARE
    marker bigint;
    undrained text;
BEGIN
    PERFORM community_deletion.community_deletion_guard_context(TG_RELID, TG_NAME,
        TG_WHEN = 'BEFORE' AND TG_LEVEL = 'ROW' AND TG_OP = 'UPDATE', 'enforce_community_fence_marker_arm()');
    IF OLD.deletion_state = 'active' AND NEW.deletion_state IS DISTINCT FROM 'active' THEN
        PERFORM community_deletion_fence_marker_lock();
        marker := pg_sequence_last_value('community_deletion_fence_marker'::regclass);
        PERFORM setval('community_deletion_fence_marker',
                       CASE WHEN marker IS NULL THEN 4611686018427387903
                            ELSE marker | community_deletion_fence_bit(OLD.id) END,
                       true);
        -- A dormant fence (migration 00035) is armed here, in the
        -- transaction that takes the community out of active, and only if
        -- that transaction holds every table whose fence has the dormant
        -- path in SHARE mode: those locks waited for every writer that
        -- took the dormant path (each holds its table's ROW EXCLUSIVE lock
        -- until it ends), and they keep new writers waiting until the
        -- armed fence has committed.
        IF community_deletion_fence_dormant() THEN
            undrained := community_deletion_fence_undrained();
            IF undrained IS NOT NULL THEN
                RAISE EXCEPTION USING ERRCODE = '55000',
                    MESSAGE = format('community %s cannot leave active: the write fence is dormant, and this transaction has not drained the writers of %s',
                                     coalesce(OLD.tenant_key, OLD.id::text), undrained),
                    HINT = 'In the same transaction, after the fence marker''s lock and before the community''s, run SELECT community_deletion.community_deletion_fence_drain(); lifecycle.Engine.BeginQuiescing does.',
                    CONSTRAINT = 'community_write_fence';
            END IF;
            PERFORM community_deletion_fence_set_armed(true);
        END IF;
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_settle_fence_marker() RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
    SET lock_timeout TO '5s'
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
    IF marker IS NOT NULL AND marker & ~wanted = 0 AND marker & wanted = wanted
       AND (wanted <> 0 OR community_deletion_fence_dormant()) THEN
        RETURN marker;
    END IF;
    PERFORM community_deletion_fence_marker_lock();
    -- A new snapshot, taken after the lock: every community that left
    -- active before has committed its bit and its state.
    SELECT coalesce(bit_or(community_deletion_fence_bit(c.id)), 0) INTO wanted
    FROM communities c WHERE c.deletion_state IN ('quiescing', 'fenced');
    PERFORM setval('community_deletion_fence_marker', wanted, true);
    -- No community quiescing or fenced, read after the lock: the fence
    -- goes dormant (migration 00035) until one leaves active again.
    IF wanted = 0 AND NOT community_deletion_fence_dormant() THEN
        PERFORM community_deletion_fence_set_armed(false);
    END IF;
    RETURN wanted;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_function_digest(fn oid) RETURNS text
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
    AS $$
        SELECT md5(concat_ws(E'\x1f',
                             CASE WHEN p.oid = 'community_deletion_fence_armed()'::regprocedure
                                       AND p.prosrc = ' SELECT true ' THEN ' SELECT false ' ELSE p.prosrc END,
                             array_to_string(p.proconfig, E'\x1e'), p.prosecdef::text,
                             p.provolatile::text, pg_get_userbyid(p.proowner)))
        FROM pg_proc p WHERE p.oid = fn
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_installed_functions() RETURNS text[]
    LANGUAGE sql IMMUTABLE
    SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
    AS $$
        SELECT ARRAY[
            'assert_community_write_allowed(uuid)',
            'assert_tenant_write_allowed(text)',
            'attach_child_table(regclass,regclass[],regclass[])',
            'attach_community_write_fence(regclass,text,name)',
            'community_deletion_attach_row_fence(regclass,text,text[])',
            'community_deletion_bound_args(text[])',
            'community_deletion_catalog_drift()',
            'community_deletion_catalog_drift_of_copies()',
            'community_deletion_catalog_drift_of_tables()',
            'community_deletion_catalog_notes()',
            'community_deletion_child_paths(oid,oid[],oid[])',
            'community_deletion_child_spec(regclass,regclass[],regclass[])',
            'community_deletion_code_digest(oid,text,name)',
            'community_deletion_code_functions(oid,oid)',
            'community_deletion_control_digest(text)',
            'community_deletion_control_table(text)',
            'community_deletion_dangling_query(text,text[])',
            'community_deletion_default_grace_period()',
            'community_deletion_drop_tenant_objects(uuid)',
            'community_deletion_expected_fence_args(oid,text,name,text,jsonb)',
            'community_deletion_fence_admit(uuid[],text)',
            'community_deletion_fence_args(name,text,jsonb)',
            'community_deletion_fence_armed()',
            'community_deletion_fence_bit(uuid)',
            'community_deletion_fence_bound(oid,name,jsonb)',
            'community_deletion_fence_context(oid,name,regprocedure,text,boolean,boolean)',
            'community_deletion_fence_dormant()',
            'community_deletion_fence_drain()',
            'community_deletion_fence_marker_holders()',
            'community_deletion_fence_marker_lock()',
            'community_deletion_fence_query(text,text[])',
            'community_deletion_fence_set_armed(boolean)',
            'community_deletion_fence_undrained()',
            'community_deletion_fenced(oid,name)',
            'community_deletion_first_steps(jsonb,boolean)',
            'community_deletion_function_digest(oid)',
            'community_deletion_guard_context(oid,name,boolean,text)',
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
            'community_deletion_table_code(oid)',
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
            'community_deletion_untrusted_code(regclass)',
            'community_schema_destruction_lock_key()',
            'community_write_allowed(uuid)',
            'community_write_fence_excluded_table(text)',
            'declare_reference(regclass,name[],regclass,name[],text)',
            'declare_tenant_table(regclass,name)',
            'detach_community_write_fence(regclass)',
            'drop_reference(regclass,name[])',
            'enforce_community_deletion_approval_guard()',
            'enforce_community_deletion_checkpoint_guard()',
            'enforce_community_deletion_exclusion_guard()',
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
            'enforce_community_deletion_trusted_code_guard()',
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
            'include_table(regclass,text)',
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
        IF fn NOT IN ('community_deletion_lock_key(uuid)', 'enforce_community_write_fence()',
                       'enforce_community_write_fence_row()', 'community_deletion_tenant_uuid(text)',
                       'community_deletion_fence_bit(uuid)', 'community_deletion_fence_armed()') THEN
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
                  'exclude_table(regclass,text)', 'include_table(regclass,text)',
                  'enforce_community_kept_row_fence()', 'enforce_community_tenant_created()',
                  'enforce_community_write_fence()', 'enforce_community_truncate_fence()',
                  'community_deletion_control_table(text)', 'community_deletion_tenant_schema(oid)',
                  'community_deletion_fence_bit(uuid)', 'community_deletion_fence_armed()',
                  'community_deletion_fence_dormant()') THEN
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
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_register_table(target regclass, purge_action text, tenant_key name) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
    AS $$
DECLARE
    rel record;
    registered record;
    kind text;
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
    SELECT community_deletion_key_kind(a.atttypid::regtype) INTO kind
    FROM pg_attribute a WHERE a.attrelid = target AND a.attname = tenant_key AND a.attnum > 0 AND NOT a.attisdropped;
    SELECT r.table_schema, r.purge_action, r.tenant_key, r.parents INTO registered
    FROM community_scoped_tables r WHERE r.table_name = rel.relname;
    IF registered.table_schema IS NOT NULL AND registered.table_schema <> rel.nspname THEN
        RAISE EXCEPTION USING ERRCODE = '42710',
            MESSAGE = format('registration of %s refused: a table named %I is already registered from schema %I; registered tables need distinct names, so rename one',
                             target, rel.relname, registered.table_schema);
    END IF;
    IF registered.parents IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('%s is registered through its parents; it cannot change to tenant key %I: detach it and attach it again', target, tenant_key);
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
    -- The fence marker's lock, shared until this transaction ends: a
    -- community leaving active takes it exclusively, so it waits for a
    -- registration in flight, whose table's writes in this transaction
    -- took a dormant fence that the community's drain cannot see yet
    -- (migration 00035).
    PERFORM pg_advisory_xact_lock_shared(1668246884, 1718510437);
    INSERT INTO community_scoped_tables (table_schema, table_name, purge_action, tenant_key, key_kind)
    VALUES (rel.nspname, rel.relname, purge_action, tenant_key, kind)
    ON CONFLICT (table_name) DO NOTHING;
    -- A registered table is no longer excluded; the history keeps that it was.
    INSERT INTO community_deletion_exclusion_events (table_schema, table_name, action, reason)
    SELECT e.table_schema, e.table_name, 'include', 'registered as a tenant table'
    FROM community_deletion_excluded_tables e
    WHERE e.table_schema = rel.nspname AND e.table_name = rel.relname;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_register_child_table(target regclass, spec jsonb) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
    AS $$
DECLARE
    rel record;
    registered record;
    parent_tables oid[];
BEGIN
    SELECT c.relname, c.relowner, c.relnamespace, c.relpersistence, n.nspname INTO rel
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = target;
    IF rel.relpersistence = 't' OR rel.relnamespace = pg_my_temp_schema() OR pg_is_other_temp_schema(rel.relnamespace)
       OR NOT community_deletion_tenant_schema(rel.relnamespace) THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = format('registration of %s refused: attach a permanent table of the service''s own schema', target);
    END IF;
    IF rel.relname IS NULL OR NOT pg_has_role(session_user, rel.relowner, 'MEMBER') THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = format('registration of %s refused: role %s does not own it', target, session_user);
    END IF;
    -- The paths given must be those of some sets of the table's parents and
    -- referrers.
    parent_tables := community_deletion_first_steps(spec -> 'paths', false);
    IF (parent_tables IS NULL AND community_deletion_first_steps(spec -> 'paths', true) IS NULL)
       OR community_deletion_child_paths(target, coalesce(parent_tables, '{}'), community_deletion_first_steps(spec -> 'paths', true))
          IS DISTINCT FROM spec THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = format('registration of %s refused: its paths are not those of its references to registered tables', target);
    END IF;
    SELECT r.table_schema, r.tenant_key, r.parents INTO registered
    FROM community_scoped_tables r WHERE r.table_name = rel.relname;
    IF registered.table_schema IS NOT NULL AND registered.table_schema <> rel.nspname THEN
        RAISE EXCEPTION USING ERRCODE = '42710',
            MESSAGE = format('registration of %s refused: a table named %I is already registered from schema %I; registered tables need distinct names, so rename one',
                             target, rel.relname, registered.table_schema);
    END IF;
    IF registered.tenant_key IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('%s is registered with tenant key %I; it cannot change to be attached through its parents: detach it and attach it again',
                             target, registered.tenant_key);
    END IF;
    IF registered.parents IS NOT NULL AND registered.parents IS DISTINCT FROM spec -> 'paths' THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('%s is registered through other paths to its parents; detach it and attach it again', target);
    END IF;
    -- The fence marker's lock, shared until this transaction ends: a
    -- community leaving active takes it exclusively, so it waits for a
    -- registration in flight, whose table's writes in this transaction
    -- took a dormant fence that the community's drain cannot see yet
    -- (migration 00035).
    PERFORM pg_advisory_xact_lock_shared(1668246884, 1718510437);
    INSERT INTO community_scoped_tables (table_schema, table_name, purge_action, tenant_key, key_kind, parents)
    VALUES (rel.nspname, rel.relname, 'delete', NULL, spec ->> 'kind', spec -> 'paths')
    ON CONFLICT (table_name) DO NOTHING;
    -- A registered table is no longer excluded; the history keeps that it was.
    INSERT INTO community_deletion_exclusion_events (table_schema, table_name, action, reason)
    SELECT e.table_schema, e.table_name, 'include', 'registered as a tenant table'
    FROM community_deletion_excluded_tables e
    WHERE e.table_schema = rel.nspname AND e.table_name = rel.relname;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_catalog_drift() RETURNS TABLE(table_name text, problem text)
    LANGUAGE plpgsql
    SET jit TO 'off'
    SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
    SET lock_timeout TO '5s'
    AS $$
BEGIN
    RETURN QUERY SELECT d.table_name, d.problem FROM community_deletion_catalog_drift_of_tables() d;
    -- Materialized views and foreign tables holding tenant rows.
    RETURN QUERY SELECT d.table_name, d.problem FROM community_deletion_catalog_drift_of_copies() d;
    -- Code of a table's owner that the deletion's statements would run
    -- with the executor's rights.
    RETURN QUERY SELECT u.table_name, u.problem
    FROM community_scoped_tables r
    JOIN pg_namespace n ON n.nspname = r.table_schema
    JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = r.table_name AND c.relkind IN ('r', 'p') AND NOT c.relispartition
    CROSS JOIN LATERAL community_deletion_untrusted_code(c.oid::regclass) u
    ORDER BY 1, 2;
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
    -- A dormant fence while a community is in flight (migration 00035):
    -- bound tables would admit its writes without reading the marker.
    IF community_deletion_fence_dormant() THEN
        RETURN QUERY SELECT 'community_deletion_fence_armed()'::text,
               format('fence_dormant: community %s is %s, but the write fence is dormant, so bound tables would admit its writes; abort its deletion (its next quiesce arms the fence) and find who replaced community_deletion_fence_armed()',
                      coalesce(c.tenant_key, c.id::text), c.deletion_state)
        FROM communities c
        WHERE c.deletion_state IN ('quiescing', 'fenced')
        ORDER BY 2;
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
DO $$
BEGIN
    -- A database with a deletion in flight starts armed; its quiesce
    -- waited for the writers of the fence this replaces (path 0's lock).
    IF EXISTS (SELECT 1 FROM community_deletion.communities c WHERE c.deletion_state IN ('quiescing', 'fenced')) THEN
        PERFORM community_deletion.community_deletion_fence_set_armed(true);
    END IF;
END
$$;
-- +goose StatementEnd
GRANT EXECUTE ON FUNCTION community_deletion.community_deletion_fence_drain() TO community_deletion_executor;
SELECT community_deletion.community_deletion_seal_functions();

-- +goose Down
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
                -- One static query ORs the bits of the statement's tenants
                -- (a NULL key has none) for a key of the table's own; a
                -- child table's tenants come through its parents.
                IF TG_ARGV[0] OPERATOR(pg_catalog.=) 'through' THEN
                    resolved := true;
                    EXECUTE community_deletion.community_deletion_fence_query(TG_OP, TG_ARGV) INTO touched;
                    IF touched IS NULL OR pg_catalog.cardinality(touched) OPERATOR(pg_catalog.=) 0 THEN
                        RETURN NULL; -- no row of any tenant
                    END IF;
                    bits := 0;
                    FOREACH community IN ARRAY touched LOOP
                        bits := bits OPERATOR(pg_catalog.|) community_deletion.community_deletion_fence_bit(community);
                    END LOOP;
                ELSIF TG_ARGV[1] OPERATOR(pg_catalog.=) 'uuid' THEN
                    IF TG_OP OPERATOR(pg_catalog.=) 'INSERT' THEN
                        SELECT pg_catalog.bit_or(community_deletion.community_deletion_fence_bit(k.key::pg_catalog.uuid)) INTO bits
                        FROM (SELECT pg_catalog.to_jsonb(n) OPERATOR(pg_catalog.->>) TG_ARGV[0] FROM community_fence_new n) k (key);
                    ELSIF TG_OP OPERATOR(pg_catalog.=) 'UPDATE' THEN
                        SELECT pg_catalog.bit_or(community_deletion.community_deletion_fence_bit(k.key::pg_catalog.uuid)) INTO bits
                        FROM (SELECT pg_catalog.to_jsonb(o) OPERATOR(pg_catalog.->>) TG_ARGV[0] FROM community_fence_old o
                              UNION ALL
                              SELECT pg_catalog.to_jsonb(n) OPERATOR(pg_catalog.->>) TG_ARGV[0] FROM community_fence_new n) k (key);
                    ELSE
                        SELECT pg_catalog.bit_or(community_deletion.community_deletion_fence_bit(k.key::pg_catalog.uuid)) INTO bits
                        FROM (SELECT pg_catalog.to_jsonb(o) OPERATOR(pg_catalog.->>) TG_ARGV[0] FROM community_fence_old o) k (key);
                    END IF;
                ELSE
                    IF TG_OP OPERATOR(pg_catalog.=) 'INSERT' THEN
                        SELECT pg_catalog.bit_or(community_deletion.community_deletion_fence_bit(community_deletion.community_deletion_tenant_uuid(k.key))) INTO bits
                        FROM (SELECT pg_catalog.to_jsonb(n) OPERATOR(pg_catalog.->>) TG_ARGV[0] FROM community_fence_new n) k (key);
                    ELSIF TG_OP OPERATOR(pg_catalog.=) 'UPDATE' THEN
                        SELECT pg_catalog.bit_or(community_deletion.community_deletion_fence_bit(community_deletion.community_deletion_tenant_uuid(k.key))) INTO bits
                        FROM (SELECT pg_catalog.to_jsonb(o) OPERATOR(pg_catalog.->>) TG_ARGV[0] FROM community_fence_old o
                              UNION ALL
                              SELECT pg_catalog.to_jsonb(n) OPERATOR(pg_catalog.->>) TG_ARGV[0] FROM community_fence_new n) k (key);
                    ELSE
                        SELECT pg_catalog.bit_or(community_deletion.community_deletion_fence_bit(community_deletion.community_deletion_tenant_uuid(k.key))) INTO bits
                        FROM (SELECT pg_catalog.to_jsonb(o) OPERATOR(pg_catalog.->>) TG_ARGV[0] FROM community_fence_old o) k (key);
                    END IF;
                END IF;
                IF bits IS NULL OR (bits OPERATOR(pg_catalog.&) marker) OPERATOR(pg_catalog.=) 0 THEN
                    RETURN NULL; -- no row of any tenant, or none with its bit set
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
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.enforce_community_fence_marker_arm() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
    AS $$
DECLARE
    marker bigint;
BEGIN
    PERFORM community_deletion.community_deletion_guard_context(TG_RELID, TG_NAME,
        TG_WHEN = 'BEFORE' AND TG_LEVEL = 'ROW' AND TG_OP = 'UPDATE', 'enforce_community_fence_marker_arm()');
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

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_settle_fence_marker() RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
    SET lock_timeout TO '5s'
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
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_function_digest(fn oid) RETURNS text
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
    AS $$
        SELECT md5(concat_ws(E'\x1f', p.prosrc, array_to_string(p.proconfig, E'\x1e'), p.prosecdef::text,
                             p.provolatile::text, pg_get_userbyid(p.proowner)))
        FROM pg_proc p WHERE p.oid = fn
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_installed_functions() RETURNS text[]
    LANGUAGE sql IMMUTABLE
    SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
    AS $$
        SELECT ARRAY[
            'assert_community_write_allowed(uuid)',
            'assert_tenant_write_allowed(text)',
            'attach_child_table(regclass,regclass[],regclass[])',
            'attach_community_write_fence(regclass,text,name)',
            'community_deletion_attach_row_fence(regclass,text,text[])',
            'community_deletion_bound_args(text[])',
            'community_deletion_catalog_drift()',
            'community_deletion_catalog_drift_of_copies()',
            'community_deletion_catalog_drift_of_tables()',
            'community_deletion_catalog_notes()',
            'community_deletion_child_paths(oid,oid[],oid[])',
            'community_deletion_child_spec(regclass,regclass[],regclass[])',
            'community_deletion_code_digest(oid,text,name)',
            'community_deletion_code_functions(oid,oid)',
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
            'community_deletion_fence_context(oid,name,regprocedure,text,boolean,boolean)',
            'community_deletion_fence_marker_holders()',
            'community_deletion_fence_marker_lock()',
            'community_deletion_fence_query(text,text[])',
            'community_deletion_fenced(oid,name)',
            'community_deletion_first_steps(jsonb,boolean)',
            'community_deletion_function_digest(oid)',
            'community_deletion_guard_context(oid,name,boolean,text)',
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
            'community_deletion_table_code(oid)',
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
            'community_deletion_untrusted_code(regclass)',
            'community_schema_destruction_lock_key()',
            'community_write_allowed(uuid)',
            'community_write_fence_excluded_table(text)',
            'declare_reference(regclass,name[],regclass,name[],text)',
            'declare_tenant_table(regclass,name)',
            'detach_community_write_fence(regclass)',
            'drop_reference(regclass,name[])',
            'enforce_community_deletion_approval_guard()',
            'enforce_community_deletion_checkpoint_guard()',
            'enforce_community_deletion_exclusion_guard()',
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
            'enforce_community_deletion_trusted_code_guard()',
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
            'include_table(regclass,text)',
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
                  'exclude_table(regclass,text)', 'include_table(regclass,text)',
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

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_register_table(target regclass, purge_action text, tenant_key name) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
    AS $$
DECLARE
    rel record;
    registered record;
    kind text;
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
    SELECT community_deletion_key_kind(a.atttypid::regtype) INTO kind
    FROM pg_attribute a WHERE a.attrelid = target AND a.attname = tenant_key AND a.attnum > 0 AND NOT a.attisdropped;
    SELECT r.table_schema, r.purge_action, r.tenant_key, r.parents INTO registered
    FROM community_scoped_tables r WHERE r.table_name = rel.relname;
    IF registered.table_schema IS NOT NULL AND registered.table_schema <> rel.nspname THEN
        RAISE EXCEPTION USING ERRCODE = '42710',
            MESSAGE = format('registration of %s refused: a table named %I is already registered from schema %I; registered tables need distinct names, so rename one',
                             target, rel.relname, registered.table_schema);
    END IF;
    IF registered.parents IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('%s is registered through its parents; it cannot change to tenant key %I: detach it and attach it again', target, tenant_key);
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
    INSERT INTO community_scoped_tables (table_schema, table_name, purge_action, tenant_key, key_kind)
    VALUES (rel.nspname, rel.relname, purge_action, tenant_key, kind)
    ON CONFLICT (table_name) DO NOTHING;
    -- A registered table is no longer excluded; the history keeps that it was.
    INSERT INTO community_deletion_exclusion_events (table_schema, table_name, action, reason)
    SELECT e.table_schema, e.table_name, 'include', 'registered as a tenant table'
    FROM community_deletion_excluded_tables e
    WHERE e.table_schema = rel.nspname AND e.table_name = rel.relname;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_register_child_table(target regclass, spec jsonb) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
    AS $$
DECLARE
    rel record;
    registered record;
    parent_tables oid[];
BEGIN
    SELECT c.relname, c.relowner, c.relnamespace, c.relpersistence, n.nspname INTO rel
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = target;
    IF rel.relpersistence = 't' OR rel.relnamespace = pg_my_temp_schema() OR pg_is_other_temp_schema(rel.relnamespace)
       OR NOT community_deletion_tenant_schema(rel.relnamespace) THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = format('registration of %s refused: attach a permanent table of the service''s own schema', target);
    END IF;
    IF rel.relname IS NULL OR NOT pg_has_role(session_user, rel.relowner, 'MEMBER') THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = format('registration of %s refused: role %s does not own it', target, session_user);
    END IF;
    -- The paths given must be those of some sets of the table's parents and
    -- referrers.
    parent_tables := community_deletion_first_steps(spec -> 'paths', false);
    IF (parent_tables IS NULL AND community_deletion_first_steps(spec -> 'paths', true) IS NULL)
       OR community_deletion_child_paths(target, coalesce(parent_tables, '{}'), community_deletion_first_steps(spec -> 'paths', true))
          IS DISTINCT FROM spec THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = format('registration of %s refused: its paths are not those of its references to registered tables', target);
    END IF;
    SELECT r.table_schema, r.tenant_key, r.parents INTO registered
    FROM community_scoped_tables r WHERE r.table_name = rel.relname;
    IF registered.table_schema IS NOT NULL AND registered.table_schema <> rel.nspname THEN
        RAISE EXCEPTION USING ERRCODE = '42710',
            MESSAGE = format('registration of %s refused: a table named %I is already registered from schema %I; registered tables need distinct names, so rename one',
                             target, rel.relname, registered.table_schema);
    END IF;
    IF registered.tenant_key IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('%s is registered with tenant key %I; it cannot change to be attached through its parents: detach it and attach it again',
                             target, registered.tenant_key);
    END IF;
    IF registered.parents IS NOT NULL AND registered.parents IS DISTINCT FROM spec -> 'paths' THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('%s is registered through other paths to its parents; detach it and attach it again', target);
    END IF;
    INSERT INTO community_scoped_tables (table_schema, table_name, purge_action, tenant_key, key_kind, parents)
    VALUES (rel.nspname, rel.relname, 'delete', NULL, spec ->> 'kind', spec -> 'paths')
    ON CONFLICT (table_name) DO NOTHING;
    -- A registered table is no longer excluded; the history keeps that it was.
    INSERT INTO community_deletion_exclusion_events (table_schema, table_name, action, reason)
    SELECT e.table_schema, e.table_name, 'include', 'registered as a tenant table'
    FROM community_deletion_excluded_tables e
    WHERE e.table_schema = rel.nspname AND e.table_name = rel.relname;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_catalog_drift() RETURNS TABLE(table_name text, problem text)
    LANGUAGE plpgsql
    SET jit TO 'off'
    SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
    SET lock_timeout TO '5s'
    AS $$
BEGIN
    RETURN QUERY SELECT d.table_name, d.problem FROM community_deletion_catalog_drift_of_tables() d;
    -- Materialized views and foreign tables holding tenant rows.
    RETURN QUERY SELECT d.table_name, d.problem FROM community_deletion_catalog_drift_of_copies() d;
    -- Code of a table's owner that the deletion's statements would run
    -- with the executor's rights.
    RETURN QUERY SELECT u.table_name, u.problem
    FROM community_scoped_tables r
    JOIN pg_namespace n ON n.nspname = r.table_schema
    JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = r.table_name AND c.relkind IN ('r', 'p') AND NOT c.relispartition
    CROSS JOIN LATERAL community_deletion_untrusted_code(c.oid::regclass) u
    ORDER BY 1, 2;
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

DROP FUNCTION community_deletion.community_deletion_fence_drain();
DROP FUNCTION community_deletion.community_deletion_fence_undrained();
DROP FUNCTION community_deletion.community_deletion_fence_set_armed(boolean);
DROP FUNCTION community_deletion.community_deletion_fence_dormant();
DROP FUNCTION community_deletion.community_deletion_fence_armed();
SELECT community_deletion.community_deletion_seal_functions();
