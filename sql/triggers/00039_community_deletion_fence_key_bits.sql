-- The fence's armed path computes a key's bit from the key itself.
--
-- While a deletion is in flight, path 0 of a bound table's fence ORs the
-- bits of the statement's tenants and compares them with the fence
-- marker. The bit was community_deletion_fence_bit() of the tenant's
-- uuid: for a key that is not a uuid, an md5 of the key (its uuid), and
-- for every key a round trip through text to a bit string. Measured in a
-- scratch database (pgbench -r, one client, fsync off, a one-row INSERT
-- into a table whose statement trigger reads its key the fence's way),
-- ORing those bits cost 9-17 us a statement over reading the key, the md5
-- alone 6-7 us; a bit from hashtext() of the key's text cost 0-2 us.
-- Most of it is paid once per statement, not per row: the casts through
-- text look their types' I/O functions up for each new executor state.
--
-- community_deletion_fence_key_bit(text) is that bit. The marker now
-- holds, for each community quiescing or fenced, what
-- community_deletion_fence_bits(id, tenant_key) gives: its uuid's bit as
-- before (for the paths that know a tenant only by its uuid: a child
-- table's query through its paths, the row fences), the key bit of the
-- uuid's text (a uuid key), and the key bit of its tenant key (any other
-- kind). Path 0 of a table with a key of its own, and of a child whose
-- parents are looked up by value, ORs the key bits of the keys' text,
-- which is the text community_deletion_tenant_uuid() is given for the
-- same key, so a community in flight always has its key bit in the
-- marker. More bits a community means more statements of other tenants
-- sent on to path 1, never fewer refused.
--
-- The marker only gains bits here: taken under the marker's exclusive
-- lock (a writer's path 0 that finds it held goes on to path 1), it is
-- ORed with the new bits of every community in flight, so a writer still
-- running the old fence, which reads the uuid's bit, finds it as before,
-- and the new fence, visible only once this commits, finds its key bits.
-- The arming trigger, the settle and the drift report compute the same
-- bits. Down puts back every function as 00038 left it and drops the two
-- new ones; it leaves the marker's extra bits, which the old fence reads
-- as other communities' (statements sent to path 1) until the next settle
-- recomputes the marker.

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION community_deletion.community_deletion_fence_key_bit(tenant_key text) RETURNS bigint
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$ SELECT (1::pg_catalog.int8) OPERATOR(pg_catalog.<<)
                 (((pg_catalog.hashtext(tenant_key) OPERATOR(pg_catalog.&) 2147483647) OPERATOR(pg_catalog.%) 62)::pg_catalog.int4) $$;
-- +goose StatementEnd
-- +goose StatementBegin
COMMENT ON FUNCTION community_deletion.community_deletion_fence_key_bit(text) IS 'The fence marker bit of a tenant key''s text (a uuid key''s canonical text): one of 62, from hashtext(). Inlined into the write fence''s armed path; the marker holds it for every community quiescing or fenced (community_deletion_fence_bits()).';
-- +goose StatementEnd
-- +goose StatementBegin
CREATE FUNCTION community_deletion.community_deletion_fence_bits(community uuid, tenant_key text) RETURNS bigint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT community_deletion.community_deletion_fence_bit(community)
                 OPERATOR(pg_catalog.|) community_deletion.community_deletion_fence_key_bit(community::pg_catalog.text)
                 OPERATOR(pg_catalog.|) COALESCE(community_deletion.community_deletion_fence_key_bit(tenant_key), 0) $$;
-- +goose StatementEnd
-- +goose StatementBegin
COMMENT ON FUNCTION community_deletion.community_deletion_fence_bits(uuid, text) IS 'Every fence marker bit of a community (its id and tenant key): its uuid''s bit (community_deletion_fence_bit()), the key bit of its uuid''s text and that of its tenant key (community_deletion_fence_key_bit()). The marker holds them all while the community is quiescing or fenced.';
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
    resolved pg_catalog.bool; -- NULL, which IF reads as false, until path 0 resolves the tenants
    admitted pg_catalog.int4; -- never assigned: RETURN admitted returns NULL without evaluating an expression
    community pg_catalog.uuid;
    label pg_catalog.text;
    dangling_sql pg_catalog.text;
    dangling pg_catalog.text;
    marker pg_catalog.int8;
    bits pg_catalog.int8;
    key_column pg_catalog.text;
    key_kind pg_catalog.text;
    spec pg_catalog.jsonb;
    path pg_catalog.jsonb;
    hop pg_catalog.jsonb;
    step pg_catalog.int4;
    keys pg_catalog.text[];
    lean pg_catalog.bool;
    parents pg_catalog.text;
BEGIN
    -- Dormant (migration 00035): a bound table, READ COMMITTED, and no
    -- deletion in flight. community_deletion_fence_armed() is a constant
    -- the planner folds into this expression's cached plan, replaced (a
    -- catalog change, which invalidates the plan) only under the marker's
    -- lock: armed by a community leaving active in a transaction that
    -- holds every bound table in SHARE mode, so it has waited for every
    -- writer that took this return; disarmed by a settle that found no
    -- community quiescing or fenced. Armed, the whole condition folds to
    -- false. One expression and a return of a variable (migration 00038):
    -- each expression a PL/pgSQL function evaluates costs it a plan check
    -- and an executor state per transaction.
    IF NOT community_deletion.community_deletion_fence_armed()
       AND TG_NARGS OPERATOR(pg_catalog.=) 3
       AND pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.=) 'read committed' THEN
        RETURN admitted;
    END IF;

    -- Path 0, near-free (docs/invariants.md): a bound table, READ
    -- COMMITTED, the fence armed, and then the marker's lock taken shared
    -- and, read after it, a marker of 0, or one that shares no bit with
    -- the statement's tenants. The lock comes first: a community that
    -- leaves active waits for it before it sets its bit, so a marker read
    -- under it is never older than a state that has committed.
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
                    -- A child table (migration 00037): when every path is
                    -- one step along a one-column reference to a parent
                    -- that no policy hides from the writer, a static query
                    -- reads the statement's referencing values, and one
                    -- dynamic query reads the keys of the parents they name;
                    -- otherwise the query through the paths resolves the
                    -- tenants. A shared bit sends the statement on to
                    -- path 1, which resolves them (resolved stays NULL).
                    spec := TG_ARGV[1]::pg_catalog.jsonb;
                    lean := true;
                    parents := NULL;
                    FOR step IN 0 .. pg_catalog.jsonb_array_length(spec OPERATOR(pg_catalog.->) 'paths') OPERATOR(pg_catalog.-) 1 LOOP
                        path := spec OPERATOR(pg_catalog.->) 'paths' OPERATOR(pg_catalog.->) step;
                        hop := path OPERATOR(pg_catalog.->) 'hops' OPERATOR(pg_catalog.->) 0;
                        IF pg_catalog.jsonb_array_length(path OPERATOR(pg_catalog.->) 'hops') OPERATOR(pg_catalog.<>) 1
                           OR pg_catalog.jsonb_array_length(hop OPERATOR(pg_catalog.->) 'columns') OPERATOR(pg_catalog.<>) 1
                           OR pg_catalog.row_security_active(pg_catalog.format('%I.%I', hop OPERATOR(pg_catalog.->>) 'schema', hop OPERATOR(pg_catalog.->>) 'table')) THEN
                            lean := false;
                            EXIT;
                        END IF;
                        key_column := hop OPERATOR(pg_catalog.->) 'columns' OPERATOR(pg_catalog.->>) 0;
                        IF TG_OP OPERATOR(pg_catalog.=) 'INSERT' THEN
                            SELECT pg_catalog.array_agg(pg_catalog.to_jsonb(n) OPERATOR(pg_catalog.->>) key_column) INTO keys
                            FROM community_fence_new n;
                        ELSIF TG_OP OPERATOR(pg_catalog.=) 'UPDATE' THEN
                            SELECT pg_catalog.array_agg(k.key) INTO keys
                            FROM (SELECT pg_catalog.to_jsonb(o) OPERATOR(pg_catalog.->>) key_column FROM community_fence_old o
                                  UNION ALL
                                  SELECT pg_catalog.to_jsonb(n) OPERATOR(pg_catalog.->>) key_column FROM community_fence_new n) k (key);
                        ELSE
                            SELECT pg_catalog.array_agg(pg_catalog.to_jsonb(o) OPERATOR(pg_catalog.->>) key_column) INTO keys
                            FROM community_fence_old o;
                        END IF;
                        IF keys IS NULL THEN
                            RETURN NULL; -- the statement wrote no row
                        END IF;
                        parents := COALESCE(parents OPERATOR(pg_catalog.||) ' UNION ALL ', '') OPERATOR(pg_catalog.||) pg_catalog.format(
                            'SELECT p.%I::pg_catalog.text FROM %I.%I p WHERE p.%I OPERATOR(pg_catalog.=) ANY (%L)',
                            path OPERATOR(pg_catalog.->>) 'key', hop OPERATOR(pg_catalog.->>) 'schema', hop OPERATOR(pg_catalog.->>) 'table',
                            hop OPERATOR(pg_catalog.->) 'parent_columns' OPERATOR(pg_catalog.->>) 0, keys::pg_catalog.text);
                    END LOOP;
                    IF lean AND parents IS NOT NULL THEN
                        -- The parents' keys; their bits by a static query,
                        -- whose plan keeps the bit function inlined: the
                        -- key bit of each key's text, whatever its kind
                        -- (migration 00039).
                        EXECUTE 'SELECT pg_catalog.array_agg(b.key) FROM (' OPERATOR(pg_catalog.||) parents OPERATOR(pg_catalog.||) ') b (key)' INTO keys;
                        SELECT pg_catalog.bit_or(community_deletion.community_deletion_fence_key_bit(k.key)) INTO bits
                        FROM pg_catalog.unnest(keys) k (key);
                    ELSE
                        resolved := true;
                        EXECUTE community_deletion.community_deletion_fence_query(TG_OP, TG_ARGV) INTO touched;
                        IF touched IS NULL OR pg_catalog.cardinality(touched) OPERATOR(pg_catalog.=) 0 THEN
                            RETURN NULL; -- no row of any tenant
                        END IF;
                        bits := 0;
                        FOREACH community IN ARRAY touched LOOP
                            bits := bits OPERATOR(pg_catalog.|) community_deletion.community_deletion_fence_bit(community);
                        END LOOP;
                    END IF;
                ELSE
                    -- A key of the table's own, of any kind: the key bit
                    -- of its text (migration 00039), which the marker
                    -- holds for every community in flight. Neither a uuid
                    -- nor an md5 is computed here.
                    IF TG_OP OPERATOR(pg_catalog.=) 'INSERT' THEN
                        SELECT pg_catalog.bit_or(community_deletion.community_deletion_fence_key_bit(k.key)) INTO bits
                        FROM (SELECT pg_catalog.to_jsonb(n) OPERATOR(pg_catalog.->>) TG_ARGV[0] FROM community_fence_new n) k (key);
                    ELSIF TG_OP OPERATOR(pg_catalog.=) 'UPDATE' THEN
                        SELECT pg_catalog.bit_or(community_deletion.community_deletion_fence_key_bit(k.key)) INTO bits
                        FROM (SELECT pg_catalog.to_jsonb(o) OPERATOR(pg_catalog.->>) TG_ARGV[0] FROM community_fence_old o
                              UNION ALL
                              SELECT pg_catalog.to_jsonb(n) OPERATOR(pg_catalog.->>) TG_ARGV[0] FROM community_fence_new n) k (key);
                    ELSE
                        SELECT pg_catalog.bit_or(community_deletion.community_deletion_fence_key_bit(k.key)) INTO bits
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
    SELECT coalesce(bit_or(community_deletion_fence_bits(c.id, c.tenant_key)), 0) INTO wanted
    FROM communities c WHERE c.deletion_state IN ('quiescing', 'fenced');
    IF marker IS NOT NULL AND marker & ~wanted = 0 AND marker & wanted = wanted
       AND (wanted <> 0 OR community_deletion_fence_dormant()) THEN
        RETURN marker;
    END IF;
    PERFORM community_deletion_fence_marker_lock();
    -- A new snapshot, taken after the lock: every community that left
    -- active before has committed its bit and its state.
    SELECT coalesce(bit_or(community_deletion_fence_bits(c.id, c.tenant_key)), 0) INTO wanted
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
                            ELSE marker | community_deletion_fence_bits(OLD.id, OLD.tenant_key) END,
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
    -- A community in flight whose bits the marker lacks (one is enough):
    -- the near-free path would admit its writes.
    RETURN QUERY SELECT 'community_deletion_fence_marker'::text,
           format('fence_marker: community %s is %s, but the fence marker lacks its bits, so bound tables would admit its writes; run SELECT community_deletion.community_deletion_settle_fence_marker()',
                  coalesce(c.tenant_key, c.id::text), c.deletion_state)
    FROM communities c
    WHERE c.deletion_state IN ('quiescing', 'fenced')
      AND (community_deletion_fence_bits(c.id, c.tenant_key) & ~pg_sequence_last_value('community_deletion_fence_marker'::regclass)) <> 0
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
            'community_deletion_fence_bits(uuid,text)',
            'community_deletion_fence_bound_tables()',
            'community_deletion_fence_bound(oid,name,jsonb)',
            'community_deletion_fence_context(oid,name,regprocedure,text,boolean,boolean)',
            'community_deletion_fence_dormant()',
            'community_deletion_fence_key_bit(text)',
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
                       'community_deletion_fence_bit(uuid)', 'community_deletion_fence_key_bit(text)',
                       'community_deletion_fence_armed()') THEN
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
                  'community_deletion_fence_bit(uuid)', 'community_deletion_fence_key_bit(text)',
                  'community_deletion_fence_bits(uuid,text)',
                  'community_deletion_fence_armed()', 'community_deletion_fence_dormant()') THEN
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

-- The marker gains the new bits of every community in flight, read after
-- its exclusive lock. A marker never set (NULL) is left for the arming
-- trigger, which sets every bit.
SELECT community_deletion.community_deletion_fence_marker_lock();
SELECT pg_catalog.setval('community_deletion.community_deletion_fence_marker',
                         m.marker OPERATOR(pg_catalog.|) COALESCE(
                             (SELECT pg_catalog.bit_or(community_deletion.community_deletion_fence_bits(c.id, c.tenant_key))
                              FROM community_deletion.communities c
                              WHERE c.deletion_state IN ('quiescing', 'fenced')), 0),
                         true)
FROM (SELECT pg_catalog.pg_sequence_last_value('community_deletion.community_deletion_fence_marker'::pg_catalog.regclass)) m (marker)
WHERE m.marker IS NOT NULL;
COMMENT ON SEQUENCE community_deletion.community_deletion_fence_marker IS 'The bits (community_deletion_fence_bits()) of the communities that are quiescing or fenced, 0 when none is: set by the trigger communities_fence_marker_arm, cleared only by community_deletion_settle_fence_marker(); read by the write fences with pg_sequence_last_value().';
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
    resolved pg_catalog.bool; -- NULL, which IF reads as false, until path 0 resolves the tenants
    admitted pg_catalog.int4; -- never assigned: RETURN admitted returns NULL without evaluating an expression
    community pg_catalog.uuid;
    label pg_catalog.text;
    dangling_sql pg_catalog.text;
    dangling pg_catalog.text;
    marker pg_catalog.int8;
    bits pg_catalog.int8;
    key_column pg_catalog.text;
    key_kind pg_catalog.text;
    spec pg_catalog.jsonb;
    path pg_catalog.jsonb;
    hop pg_catalog.jsonb;
    step pg_catalog.int4;
    keys pg_catalog.text[];
    lean pg_catalog.bool;
    parents pg_catalog.text;
BEGIN
    -- Dormant (migration 00035): a bound table, READ COMMITTED, and no
    -- deletion in flight. community_deletion_fence_armed() is a constant
    -- the planner folds into this expression's cached plan, replaced (a
    -- catalog change, which invalidates the plan) only under the marker's
    -- lock: armed by a community leaving active in a transaction that
    -- holds every bound table in SHARE mode, so it has waited for every
    -- writer that took this return; disarmed by a settle that found no
    -- community quiescing or fenced. Armed, the whole condition folds to
    -- false. One expression and a return of a variable (migration 00038):
    -- each expression a PL/pgSQL function evaluates costs it a plan check
    -- and an executor state per transaction.
    IF NOT community_deletion.community_deletion_fence_armed()
       AND TG_NARGS OPERATOR(pg_catalog.=) 3
       AND pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.=) 'read committed' THEN
        RETURN admitted;
    END IF;

    -- Path 0, near-free (docs/invariants.md): a bound table, READ
    -- COMMITTED, the fence armed, and then the marker's lock taken shared
    -- and, read after it, a marker of 0, or one that shares no bit with
    -- the statement's tenants. The lock comes first: a community that
    -- leaves active waits for it before it sets its bit, so a marker read
    -- under it is never older than a state that has committed.
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
                    -- A child table (migration 00037): when every path is
                    -- one step along a one-column reference to a parent
                    -- that no policy hides from the writer, a static query
                    -- reads the statement's referencing values, and one
                    -- dynamic query reads the keys of the parents they name;
                    -- otherwise the query through the paths resolves the
                    -- tenants. A shared bit sends the statement on to
                    -- path 1, which resolves them (resolved stays NULL).
                    spec := TG_ARGV[1]::pg_catalog.jsonb;
                    lean := true;
                    parents := NULL;
                    FOR step IN 0 .. pg_catalog.jsonb_array_length(spec OPERATOR(pg_catalog.->) 'paths') OPERATOR(pg_catalog.-) 1 LOOP
                        path := spec OPERATOR(pg_catalog.->) 'paths' OPERATOR(pg_catalog.->) step;
                        hop := path OPERATOR(pg_catalog.->) 'hops' OPERATOR(pg_catalog.->) 0;
                        IF pg_catalog.jsonb_array_length(path OPERATOR(pg_catalog.->) 'hops') OPERATOR(pg_catalog.<>) 1
                           OR pg_catalog.jsonb_array_length(hop OPERATOR(pg_catalog.->) 'columns') OPERATOR(pg_catalog.<>) 1
                           OR pg_catalog.row_security_active(pg_catalog.format('%I.%I', hop OPERATOR(pg_catalog.->>) 'schema', hop OPERATOR(pg_catalog.->>) 'table')) THEN
                            lean := false;
                            EXIT;
                        END IF;
                        key_column := hop OPERATOR(pg_catalog.->) 'columns' OPERATOR(pg_catalog.->>) 0;
                        IF TG_OP OPERATOR(pg_catalog.=) 'INSERT' THEN
                            SELECT pg_catalog.array_agg(pg_catalog.to_jsonb(n) OPERATOR(pg_catalog.->>) key_column) INTO keys
                            FROM community_fence_new n;
                        ELSIF TG_OP OPERATOR(pg_catalog.=) 'UPDATE' THEN
                            SELECT pg_catalog.array_agg(k.key) INTO keys
                            FROM (SELECT pg_catalog.to_jsonb(o) OPERATOR(pg_catalog.->>) key_column FROM community_fence_old o
                                  UNION ALL
                                  SELECT pg_catalog.to_jsonb(n) OPERATOR(pg_catalog.->>) key_column FROM community_fence_new n) k (key);
                        ELSE
                            SELECT pg_catalog.array_agg(pg_catalog.to_jsonb(o) OPERATOR(pg_catalog.->>) key_column) INTO keys
                            FROM community_fence_old o;
                        END IF;
                        IF keys IS NULL THEN
                            RETURN NULL; -- the statement wrote no row
                        END IF;
                        parents := COALESCE(parents OPERATOR(pg_catalog.||) ' UNION ALL ', '') OPERATOR(pg_catalog.||) pg_catalog.format(
                            'SELECT p.%I::pg_catalog.text FROM %I.%I p WHERE p.%I OPERATOR(pg_catalog.=) ANY (%L)',
                            path OPERATOR(pg_catalog.->>) 'key', hop OPERATOR(pg_catalog.->>) 'schema', hop OPERATOR(pg_catalog.->>) 'table',
                            hop OPERATOR(pg_catalog.->) 'parent_columns' OPERATOR(pg_catalog.->>) 0, keys::pg_catalog.text);
                    END LOOP;
                    IF lean AND parents IS NOT NULL THEN
                        -- The parents' keys; their bits by a static query,
                        -- whose plan keeps the bit functions inlined.
                        EXECUTE 'SELECT pg_catalog.array_agg(b.key) FROM (' OPERATOR(pg_catalog.||) parents OPERATOR(pg_catalog.||) ') b (key)' INTO keys;
                        IF spec OPERATOR(pg_catalog.->>) 'kind' OPERATOR(pg_catalog.=) 'uuid' THEN
                            SELECT pg_catalog.bit_or(community_deletion.community_deletion_fence_bit(k.key::pg_catalog.uuid)) INTO bits
                            FROM pg_catalog.unnest(keys) k (key);
                        ELSE
                            SELECT pg_catalog.bit_or(community_deletion.community_deletion_fence_bit(community_deletion.community_deletion_tenant_uuid(k.key))) INTO bits
                            FROM pg_catalog.unnest(keys) k (key);
                        END IF;
                    ELSE
                        resolved := true;
                        EXECUTE community_deletion.community_deletion_fence_query(TG_OP, TG_ARGV) INTO touched;
                        IF touched IS NULL OR pg_catalog.cardinality(touched) OPERATOR(pg_catalog.=) 0 THEN
                            RETURN NULL; -- no row of any tenant
                        END IF;
                        bits := 0;
                        FOREACH community IN ARRAY touched LOOP
                            bits := bits OPERATOR(pg_catalog.|) community_deletion.community_deletion_fence_bit(community);
                        END LOOP;
                    END IF;
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
            'community_deletion_fence_bound_tables()',
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

COMMENT ON SEQUENCE community_deletion.community_deletion_fence_marker IS 'The bits (community_deletion_fence_bit()) of the communities that are quiescing or fenced, 0 when none is: set by the trigger communities_fence_marker_arm, cleared only by community_deletion_settle_fence_marker(); read by the write fences with pg_sequence_last_value().';
DROP FUNCTION community_deletion.community_deletion_fence_bits(uuid, text);
DROP FUNCTION community_deletion.community_deletion_fence_key_bit(text);
SELECT community_deletion.community_deletion_seal_functions();
