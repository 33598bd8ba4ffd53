-- A cheaper admitted path for the write fence. Most writes touch one community
-- and find it active; this version admits them with two lean queries (one
-- over the transition table, one primary-key read of communities) and keeps
-- everything else (mixed statements, a contended lock, a community that is
-- not active, a snapshot isolation level) on the slower paths of the previous
-- version, unchanged in what they admit and refuse. bench/fence measures it.

-- +goose Up
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

-- +goose Down
-- +goose StatementBegin
-- The previous version: two statements over the transition tables for every
-- write (lock every touched community, then confirm all are active).
CREATE OR REPLACE FUNCTION enforce_community_write_fence() RETURNS trigger
    LANGUAGE plpgsql VOLATILE
    AS $$
DECLARE
    touched uuid[];
    community uuid;
    state text;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION USING
            ERRCODE = '25000',
            MESSAGE = format('community write to %I refused: isolation level %s pins a snapshot that cannot see the deletion fence',
                             TG_TABLE_NAME, current_setting('transaction_isolation')),
            HINT = 'Write community data in READ COMMITTED transactions.';
    END IF;

    -- The admitted path. Each branch is the same two statements over the
    -- transition tables its event has; arrays and set-returning helpers cost
    -- measurably more per single-row statement (see bench/fence).
    IF TG_OP = 'INSERT' THEN
        PERFORM pg_advisory_xact_lock_shared(community_deletion_lock_key(rows.community_id))
        FROM (SELECT DISTINCT community_id FROM community_fence_new) rows;
        IF NOT EXISTS (
            SELECT 1 FROM (SELECT DISTINCT community_id FROM community_fence_new) rows
            LEFT JOIN communities c ON c.id = rows.community_id
            WHERE c.deletion_state IS DISTINCT FROM 'active') THEN
            RETURN NULL;
        END IF;
        SELECT array_agg(DISTINCT community_id) INTO touched FROM community_fence_new;
    ELSIF TG_OP = 'UPDATE' THEN
        PERFORM pg_advisory_xact_lock_shared(community_deletion_lock_key(rows.community_id))
        FROM (SELECT community_id FROM community_fence_old UNION SELECT community_id FROM community_fence_new) rows;
        IF NOT EXISTS (
            SELECT 1 FROM (SELECT community_id FROM community_fence_old
                           UNION SELECT community_id FROM community_fence_new) rows
            LEFT JOIN communities c ON c.id = rows.community_id
            WHERE c.deletion_state IS DISTINCT FROM 'active') THEN
            RETURN NULL;
        END IF;
        SELECT array_agg(rows.community_id) INTO touched
        FROM (SELECT community_id FROM community_fence_old UNION SELECT community_id FROM community_fence_new) rows;
    ELSE
        PERFORM pg_advisory_xact_lock_shared(community_deletion_lock_key(rows.community_id))
        FROM (SELECT DISTINCT community_id FROM community_fence_old) rows;
        IF NOT EXISTS (
            SELECT 1 FROM (SELECT DISTINCT community_id FROM community_fence_old) rows
            LEFT JOIN communities c ON c.id = rows.community_id
            WHERE c.deletion_state IS DISTINCT FROM 'active') THEN
            RETURN NULL;
        END IF;
        SELECT array_agg(DISTINCT community_id) INTO touched FROM community_fence_old;
    END IF;

    -- The slow path: the locks are held; ask each community whether this
    -- transaction may write it, and name the first that refuses.
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
