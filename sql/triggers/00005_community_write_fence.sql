-- The write fence on every registered 'delete' table, its attach function and
-- the catalog drift report.

-- +goose Up
-- +goose StatementBegin
-- The write fence: three AFTER ... FOR EACH STATEMENT triggers per table (one
-- each for INSERT, UPDATE and DELETE, since transition tables allow one event
-- per trigger) that see the statement's rows as community_fence_new and
-- community_fence_old. An UPDATE is checked for the communities of both its
-- old and new rows, so a row cannot be moved into or out of a fenced community.
--
-- The admitted path is two queries whatever the statement's size: one takes
-- the shared lock of every distinct community the statement touched, the next
-- (a new statement, so a new READ COMMITTED snapshot taken after the locks)
-- confirms they are all active. Both must stay separate statements: a single
-- query would read communities with a snapshot taken before its lock waits.
-- Anything else goes to the slow path, which asks community_write_allowed()
-- for each community and refuses with SQLSTATE 55000.
-- Because the shared lock is held until the transaction ends, a lifecycle
-- transition (which takes the lock exclusively) waits for open writers, and
-- every write that starts after the fence committed sees it and is refused.
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

-- +goose Down
DROP FUNCTION community_deletion_catalog_drift();
DROP FUNCTION attach_community_write_fence(regclass, text);
DROP FUNCTION enforce_community_write_fence();
