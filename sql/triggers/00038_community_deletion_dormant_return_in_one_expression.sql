-- The dormant fence's return in one expression.
--
-- With no deletion in flight, a bound table's fence admits a READ
-- COMMITTED statement on its dormant return (migration 00035). That
-- return evaluated four PL/pgSQL expressions: the default of a variable
-- only the armed path reads, the bound-table and isolation test, the
-- armed constant, and RETURN NULL. Each expression a PL/pgSQL function
-- evaluates costs a plan check and an executor state once per
-- transaction. Measured in a scratch database (pgbench, one client, the
-- tables' transactions interleaved), the return cost 1.7-2 us a
-- single-row statement over an empty trigger, and costs 1-1.5 us so
-- (bench/README.md).
-- The return is now one expression, the armed constant first: armed, the
-- planner folds the whole condition to false, so the armed path pays
-- nothing for it but a constant; dormant, it is the same tests. It
-- returns a variable that is never assigned (NULL, what RETURN NULL
-- gives), which PL/pgSQL returns without evaluating an expression, and
-- the variable only the armed path reads has no default (it is NULL,
-- which IF reads as false, as it did false). What is admitted and
-- refused is unchanged: the armed path no longer asks the constant
-- again, and where it was asked twice and changed in between, the
-- second answer could only have admitted more. Down restores the fence
-- as 00037 left it.

-- +goose Up
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
    spec pg_catalog.jsonb;
    path pg_catalog.jsonb;
    hop pg_catalog.jsonb;
    step pg_catalog.int4;
    keys pg_catalog.text[];
    lean pg_catalog.bool;
    parents pg_catalog.text;
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
                    -- A child table (migration 00037): when every path is
                    -- one step along a one-column reference to a parent
                    -- that no policy hides from the writer, a static query
                    -- reads the statement's referencing values, and one
                    -- dynamic query reads the keys of the parents they name;
                    -- otherwise the query through the paths resolves the
                    -- tenants. A shared bit sends the statement on to
                    -- path 1, which resolves them (resolved stays false).
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
SELECT community_deletion.community_deletion_seal_functions();
