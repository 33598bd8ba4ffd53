-- Adoption on the schemas services really have (issue 22), with the tables
-- of migration 00025.
--
-- * Tenant keys of every type services use. The declared tenant table's key
--   may be uuid, smallint, integer, bigint, text or varchar; every attached
--   table's key column must be of the same kind (integers among
--   themselves, text and varchar among themselves, uuid with uuid). A
--   tenant whose key is not a uuid gets a lifecycle row whose id is the
--   name-based uuid of its key (community_deletion_tenant_uuid(): the MD5
--   of the key's text after a fixed prefix), so the fence computes the
--   community's id, and its lock, from the key without a lookup. The key's
--   text is kept in communities.tenant_key and in the request.
-- * Tables that reach the tenant through other tables:
--   attach_child_table(target, parents) registers a table without a tenant
--   column through its foreign keys (or declared references,
--   declare_reference()) to registered tables, chained to any depth, a
--   join table through both parents. Its fence resolves each written row's
--   tenant through its parents; the purge, the proofs and the inventory
--   count its rows by the same paths (community_deletion_tenant_filter()).
-- * A NULL tenant key is a row of no tenant: the fence lets it through and
--   no deletion touches it, so a 'delete' table's key may be nullable.
-- * Partitions created later are fenced from the moment they exist: attach
--   puts a row-level fence on a partitioned table, which PostgreSQL clones
--   onto every partition, now and later; on a partition that has the
--   statement-level fences attach gives it, attach disables the clone.
-- * The drift report follows foreign keys and declared references from
--   every registered table, accepts every compatible key type, and says
--   the next step on each line.
--
-- Down refuses while anything only this migration can represent exists
-- (keys that are not uuid, tables attached through parents, declared
-- references); otherwise it restores the functions of migration 00024.

-- +goose Up

-- +goose StatementBegin
-- The kind of a tenant key column's type: 'uuid', 'integer' (smallint,
-- integer, bigint) or 'text' (text, varchar); NULL for any other type.
CREATE FUNCTION community_deletion.community_deletion_key_kind(key_type regtype) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
        SELECT CASE key_type
                   WHEN 'pg_catalog.uuid'::regtype THEN 'uuid'
                   WHEN 'pg_catalog.int2'::regtype THEN 'integer'
                   WHEN 'pg_catalog.int4'::regtype THEN 'integer'
                   WHEN 'pg_catalog.int8'::regtype THEN 'integer'
                   WHEN 'pg_catalog.text'::regtype THEN 'text'
                   WHEN 'pg_catalog.varchar'::regtype THEN 'text'
               END
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The lifecycle id of a tenant whose key is not a uuid: the MD5 of its
-- key's text after a fixed prefix, as a uuid. The fence calls it on its
-- path, so it has no SET clause and is inlined.
CREATE FUNCTION community_deletion.community_deletion_tenant_uuid(tenant_key text) RETURNS uuid
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$ SELECT pg_catalog.md5('community_deletion tenant ' OPERATOR(pg_catalog.||) tenant_key)::pg_catalog.uuid $$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The deployment's tenant key kind: that of the declared tenant table's key
-- column, or 'uuid' when none is declared. Attach, run by a table's owner
-- who may read nothing of the deletion's, asks it; it reads only the
-- declaration.
CREATE FUNCTION community_deletion.community_deletion_tenant_key_kind() RETURNS text
    LANGUAGE sql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
        SELECT coalesce((
            SELECT community_deletion_key_kind(a.atttypid::regtype)
            FROM community_deletion_tenant_table d
            JOIN pg_namespace n ON n.nspname = d.table_schema
            JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = d.table_name
            JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = d.key_column AND NOT a.attisdropped), 'uuid')
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The lifecycle id (communities.id) of the tenant whose key is tenant_key,
-- in the deployment's key kind; NULL for a key that is not of that kind.
-- It does not say whether the tenant exists.
CREATE FUNCTION community_deletion.community_deletion_tenant_id(tenant_key text) RETURNS uuid
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
BEGIN
    CASE community_deletion_tenant_key_kind()
        WHEN 'uuid' THEN
            IF tenant_key ~* '^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$' THEN
                RETURN tenant_key::uuid;
            END IF;
            RETURN NULL;
        WHEN 'integer' THEN
            IF tenant_key ~ '^-?[0-9]{1,19}$' THEN
                BEGIN
                    RETURN community_deletion_tenant_uuid(tenant_key::bigint::text);
                EXCEPTION WHEN numeric_value_out_of_range THEN
                    RETURN NULL;
                END;
            END IF;
            RETURN NULL;
        ELSE
            RETURN community_deletion_tenant_uuid(tenant_key);
    END CASE;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The cast a tenant key's text takes to compare with a key column of the
-- kind: to bigint for every integer type (the comparison uses the index of
-- an integer or smallint column all the same), to text for text and
-- varchar, to uuid.
CREATE FUNCTION community_deletion.community_deletion_key_cast(kind text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
        SELECT CASE kind WHEN 'integer' THEN 'pg_catalog.int8' WHEN 'text' THEN 'pg_catalog.text' ELSE 'pg_catalog.uuid' END
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The row filter that selects the rows of one tenant in a registered table,
-- as SQL over the table's own columns (prefixed with alias and a dot when
-- alias is given) whose parameter $1 is the tenant's key as text: its key
-- column compared with the key, or, for a table attached through its
-- parents, its columns matched against the tenant's rows of each parent,
-- path by path. NULL for a table that is not registered. Names come from
-- the registry, quoted as identifiers.
CREATE FUNCTION community_deletion.community_deletion_tenant_filter(table_schema name, table_name name, alias text DEFAULT NULL) RETURNS text
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
DECLARE
    registered record;
    prefix text := CASE WHEN alias IS NULL THEN '' ELSE quote_ident(alias) || '.' END;
    cast_to text;
    path jsonb;
    hop jsonb;
    depth int;
    sql text;
    filters text[] := '{}';
BEGIN
    SELECT r.tenant_key, coalesce(r.key_kind, 'uuid') AS key_kind, r.parents INTO registered
    FROM community_scoped_tables r
    WHERE r.table_schema = community_deletion_tenant_filter.table_schema
      AND r.table_name = community_deletion_tenant_filter.table_name;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    cast_to := community_deletion_key_cast(registered.key_kind);
    IF registered.parents IS NULL THEN
        RETURN format('%s%I OPERATOR(pg_catalog.=) $1::pg_catalog.text::%s', prefix, registered.tenant_key, cast_to);
    END IF;
    FOR path IN SELECT p.value FROM jsonb_array_elements(registered.parents) p LOOP
        -- (c1, c2) IN (SELECT p1.k1, p1.k2 FROM parent p1 WHERE (p1.c) IN (... WHERE pN.key = $1))
        sql := format('p%s.%I OPERATOR(pg_catalog.=) $1::pg_catalog.text::%s',
                      jsonb_array_length(path -> 'hops'), path ->> 'key', cast_to);
        FOR depth IN REVERSE jsonb_array_length(path -> 'hops') .. 1 LOOP
            hop := path -> 'hops' -> (depth - 1);
            sql := format('(%s) IN (SELECT %s FROM %I.%I p%s WHERE %s)',
                          (SELECT string_agg(CASE WHEN depth = 1 THEN prefix ELSE format('p%s.', depth - 1) END || quote_ident(c.value), ', ' ORDER BY c.ordinality)
                           FROM jsonb_array_elements_text(hop -> 'columns') WITH ORDINALITY c),
                          (SELECT string_agg(format('p%s.%I', depth, c.value), ', ' ORDER BY c.ordinality)
                           FROM jsonb_array_elements_text(hop -> 'parent_columns') WITH ORDINALITY c),
                          hop ->> 'schema', hop ->> 'table', depth, sql);
        END LOOP;
        filters := filters || sql;
    END LOOP;
    RETURN '(' || array_to_string(filters, ' OR ') || ')';
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The query a fence runs for a statement of operation op (INSERT, UPDATE,
-- DELETE; ROW for the row-level fence) on a table whose fence arguments are args: it returns the
-- distinct lifecycle ids of the tenants the statement's rows belong to,
-- from its transition tables (community_fence_new, community_fence_old),
-- or NULL when no row has a tenant. args is (key column, key kind) for a
-- table keyed by an integer or text key, or ('through', paths) for one
-- attached through its parents, paths as community_scoped_tables.parents
-- records them with the root key's kind.
CREATE FUNCTION community_deletion.community_deletion_fence_query(op text, args text[]) RETURNS text
    LANGUAGE plpgsql IMMUTABLE
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
DECLARE
    spec jsonb;
    kind text;
    sides text[];
    side text;
    path jsonb;
    hop jsonb;
    depth int;
    joins text;
    rows text[] := '{}';
    -- TG_ARGV, passed on, counts from 0; an array literal from 1.
    first text := args[array_lower(args, 1)];
    second text := args[array_lower(args, 1) + 1];
BEGIN
    -- A row-level fence (op 'ROW') passes its old and new rows as $1, $2.
    sides := CASE op WHEN 'INSERT' THEN ARRAY['community_fence_new']
                     WHEN 'UPDATE' THEN ARRAY['community_fence_old', 'community_fence_new']
                     WHEN 'ROW' THEN ARRAY['(SELECT ($1).*)', '(SELECT ($2).*)']
                     ELSE ARRAY['community_fence_old'] END;
    IF first = 'through' THEN
        spec := second::jsonb;
        kind := spec ->> 'kind';
        FOREACH side IN ARRAY sides LOOP
            FOR path IN SELECT p.value FROM jsonb_array_elements(spec -> 'paths') p LOOP
                joins := '';
                FOR depth IN 1 .. jsonb_array_length(path -> 'hops') LOOP
                    hop := path -> 'hops' -> (depth - 1);
                    joins := joins || format(' JOIN %I.%I p%s ON %s', hop ->> 'schema', hop ->> 'table', depth,
                        (SELECT string_agg(format('p%s.%I OPERATOR(pg_catalog.=) %s.%I', depth, pc.value,
                                                  CASE WHEN depth = 1 THEN 'w' ELSE 'p' || (depth - 1) END, cc.value), ' AND ')
                         FROM jsonb_array_elements_text(hop -> 'columns') WITH ORDINALITY cc
                         JOIN jsonb_array_elements_text(hop -> 'parent_columns') WITH ORDINALITY pc ON pc.ordinality = cc.ordinality));
                END LOOP;
                rows := rows || format('SELECT p%s.%I::pg_catalog.text FROM %s w%s',
                                       jsonb_array_length(path -> 'hops'), path ->> 'key', side, joins);
            END LOOP;
        END LOOP;
    ELSE
        kind := second;
        FOREACH side IN ARRAY sides LOOP
            rows := rows || format('SELECT w.%I::pg_catalog.text FROM %s w', first, side);
        END LOOP;
    END IF;
    RETURN format('SELECT pg_catalog.array_agg(%s) FROM (SELECT DISTINCT r.k FROM (%s) r (k) WHERE r.k IS NOT NULL) s (k)',
                  CASE kind WHEN 'uuid' THEN 's.k::pg_catalog.uuid' ELSE 'community_deletion.community_deletion_tenant_uuid(s.k)' END,
                  array_to_string(rows, ' UNION ALL '));
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The write fence of a registered table, statement level. Without
-- arguments it reads community_id; with one argument, the uuid key column
-- it names (both by the paths of migration 00023); with two, a key column
-- of another kind or the paths through the table's parents, by the query
-- community_deletion_fence_query() builds. A row whose key is NULL, or
-- whose parents reach no tenant, belongs to no tenant and passes.
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
-- Admits a write touching the tenants touched (lifecycle ids) into table
-- table_name, as the fence's paths 2 and 3 do: refuses snapshot isolation,
-- takes each tenant's shared lock, then refuses a tenant that is not
-- active unless this session is authorized to write it.
CREATE FUNCTION community_deletion.community_deletion_fence_admit(touched uuid[], table_name text) RETURNS void
    LANGUAGE plpgsql
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
DECLARE
    community uuid;
    state text;
    label text;
BEGIN
    touched := array_remove(touched, NULL);
    IF touched IS NULL OR cardinality(touched) = 0 THEN
        RETURN;
    END IF;
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION USING
            ERRCODE = '25000',
            MESSAGE = format('community write to %I refused: isolation level %s pins a snapshot that cannot see the deletion fence',
                             table_name, current_setting('transaction_isolation')),
            HINT = 'Write community data in READ COMMITTED transactions.',
            CONSTRAINT = 'community_write_fence';
    END IF;
    PERFORM pg_advisory_xact_lock_shared(community_deletion_lock_key(t.community_id))
    FROM unnest(touched) t(community_id);
    FOREACH community IN ARRAY touched LOOP
        IF community_write_allowed(community) IS NOT TRUE THEN
            SELECT c.deletion_state, coalesce(c.tenant_key, c.id::text) INTO state, label
            FROM communities c WHERE c.id = community;
            RAISE EXCEPTION USING
                ERRCODE = '55000',
                MESSAGE = format('community write to %I refused: community %s is %s',
                                 table_name, coalesce(label, community::text), coalesce(state, 'missing')),
                CONSTRAINT = 'community_write_fence';
        END IF;
    END LOOP;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The write fence of a partition created after its partitioned table was
-- attached, row level: attach puts it on the partitioned table, and
-- PostgreSQL clones it onto every partition from the moment the partition
-- exists; on a partition that has the statement-level fences, attach
-- disables the clone. Its arguments are the statement-level fence's.
CREATE FUNCTION community_deletion.enforce_community_write_fence_row() RETURNS trigger
    LANGUAGE plpgsql
    AS $_$
DECLARE
    args pg_catalog.text[];
    touched pg_catalog.uuid[];
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
    IF touched IS NOT NULL THEN
        PERFORM community_deletion.community_deletion_fence_admit(touched, TG_TABLE_NAME::pg_catalog.text);
    END IF;
    RETURN NULL;
END
$_$;
-- +goose StatementEnd

COMMENT ON FUNCTION community_deletion.enforce_community_write_fence_row() IS 'The write fence of a partition created after attach, row level, cloned by PostgreSQL from its partitioned table: refuses as enforce_community_write_fence() does, one row at a time.';

-- +goose StatementBegin
-- The kept-row fence of a registered 'nullify' table, statement level: an
-- INSERT, or an UPDATE that sets the key, carrying the key of a quiescing,
-- fenced or deleted tenant is refused (55000). Its arguments are the key
-- column and, for a key that is not a uuid, its kind.
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
-- The kept-row fence of a partition created after its partitioned 'nullify'
-- table was attached, row level, cloned as enforce_community_write_fence_row()
-- is; its arguments are the statement-level kept-row fence's.
CREATE FUNCTION community_deletion.enforce_community_kept_row_fence_row() RETURNS trigger
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
-- The arguments of a registered table's write fence: none for a uuid
-- community_id key, the column for another uuid key, (column, kind) for an
-- integer or text key, ('through', {kind, paths}) for a table attached
-- through its parents.
CREATE FUNCTION community_deletion.community_deletion_fence_args(tenant_key name, key_kind text, parents jsonb) RETURNS text[]
    LANGUAGE sql IMMUTABLE
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
        SELECT CASE
            WHEN parents IS NOT NULL
                THEN ARRAY['through', jsonb_build_object('kind', coalesce(key_kind, 'uuid'), 'paths', parents)::text]
            WHEN coalesce(key_kind, 'uuid') = 'uuid' AND tenant_key = 'community_id' THEN '{}'::text[]
            WHEN coalesce(key_kind, 'uuid') = 'uuid' THEN ARRAY[tenant_key::text]
            ELSE ARRAY[tenant_key::text, key_kind]
        END
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The arguments of a registered 'nullify' table's kept-row fence: the key
-- column, and its kind unless it is a uuid.
CREATE FUNCTION community_deletion.community_deletion_kept_row_args(tenant_key name, key_kind text) RETURNS text[]
    LANGUAGE sql IMMUTABLE
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
        SELECT CASE WHEN coalesce(key_kind, 'uuid') = 'uuid' THEN ARRAY[tenant_key::text]
                    ELSE ARRAY[tenant_key::text, key_kind] END
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
-- args as pg_trigger.tgargs stores them.
CREATE FUNCTION community_deletion.community_deletion_trigger_args(args text[]) RETURNS bytea
    LANGUAGE sql IMMUTABLE
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
        SELECT coalesce((SELECT string_agg(convert_to(a.value, 'UTF8') || '\x00'::bytea, ''::bytea ORDER BY a.ordinality)
                         FROM unnest(args) WITH ORDINALITY a (value, ordinality)), ''::bytea)
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Whether relation has the complete statement-level fence function gives
-- (enforce_community_write_fence() on INSERT, UPDATE and DELETE, or the
-- kept-row fence on INSERT and UPDATE), enabled, firing for every row
-- change, with exactly the arguments args.
CREATE FUNCTION community_deletion.community_deletion_statement_fenced(relation oid, fence regprocedure, args text[]) RETURNS boolean
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
        SELECT coalesce(bool_or(t.tgtype & 4 = 4 AND t.tgnewtable = 'community_fence_new')
                        AND bool_or(t.tgtype & 16 = 16 AND t.tgoldtable = 'community_fence_old'
                                    AND t.tgnewtable = 'community_fence_new')
                        AND (fence <> 'enforce_community_write_fence()'::regprocedure
                             OR bool_or(t.tgtype & 8 = 8 AND t.tgoldtable = 'community_fence_old'))
                        AND bool_and(t.tgnargs = cardinality(args) AND t.tgargs = community_deletion_trigger_args(args)),
                        false)
        FROM pg_trigger t
        WHERE t.tgrelid = relation
          AND t.tgfoid = fence
          AND NOT t.tgisinternal
          AND t.tgenabled IN ('O', 'A')
          AND t.tgtype & (1 | 2 | 64) = 0
          AND t.tgqual IS NULL
          AND cardinality(t.tgattr::int2[]) = 0
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Whether relation has the row-level fence (fence is
-- enforce_community_write_fence_row() or the kept-row one) that attach puts
-- on a partitioned table, for INSERT, UPDATE and (for the write fence)
-- DELETE, with exactly the arguments args, enabled when enabled is true
-- (a partition's clone) or in whatever state otherwise.
CREATE FUNCTION community_deletion.community_deletion_row_fenced(relation oid, fence regprocedure, args text[], enabled boolean) RETURNS boolean
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
        SELECT EXISTS (
            SELECT 1 FROM pg_trigger t
            WHERE t.tgrelid = relation
              AND t.tgfoid = fence
              AND t.tgname = 'community_write_fence_row'
              AND (NOT enabled OR t.tgenabled IN ('O', 'A'))
              AND t.tgtype & 1 = 1 AND t.tgtype & (2 | 64) = 0
              AND t.tgtype & (4 | 16) = (4 | 16)
              AND (fence <> 'enforce_community_write_fence_row()'::regprocedure OR t.tgtype & 8 = 8)
              AND t.tgqual IS NULL
              AND cardinality(t.tgattr::int2[]) = 0
              AND t.tgnargs = cardinality(args) AND t.tgargs = community_deletion_trigger_args(args))
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The references of relation target to other tables that the schema
-- declares (its foreign keys, on the table itself, not a partition's
-- clones) or that its owner declared (community_deletion_references), each
-- with its columns and the referenced table's, in key order.
CREATE FUNCTION community_deletion.community_deletion_table_references(target oid)
    RETURNS TABLE(via text, columns name[], parent oid, parent_schema name, parent_table name, parent_columns name[])
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
        SELECT 'foreign key ' || f.conname::text,
               ARRAY(SELECT a.attname FROM unnest(f.conkey) WITH ORDINALITY k (attnum, ordinality)
                     JOIN pg_attribute a ON a.attrelid = f.conrelid AND a.attnum = k.attnum ORDER BY k.ordinality),
               f.confrelid, pn.nspname, pc.relname,
               ARRAY(SELECT a.attname FROM unnest(f.confkey) WITH ORDINALITY k (attnum, ordinality)
                     JOIN pg_attribute a ON a.attrelid = f.confrelid AND a.attnum = k.attnum ORDER BY k.ordinality)
        FROM pg_constraint f
        JOIN pg_class pc ON pc.oid = f.confrelid
        JOIN pg_namespace pn ON pn.oid = pc.relnamespace
        WHERE f.contype = 'f' AND f.conrelid = target AND f.conparentid = 0
        UNION ALL
        SELECT 'declared reference', r.child_columns, pc.oid, r.parent_schema, r.parent_table, r.parent_columns
        FROM community_deletion_references r
        JOIN pg_class c ON c.oid = target
        JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = r.child_schema
        LEFT JOIN pg_namespace pn ON pn.nspname = r.parent_schema
        LEFT JOIN pg_class pc ON pc.relnamespace = pn.oid AND pc.relname = r.parent_table AND pc.relkind IN ('r', 'p')
        WHERE r.child_table = c.relname
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The paths by which relation target reaches its tenant: for each of its
-- references to a registered 'delete' table other than itself (restricted
-- to the tables only, when only is not NULL), the reference followed by
-- the parent's own key, or by each of the parent's paths when the parent
-- is itself attached through its parents. {"kind": the root key's kind,
-- "paths": [...]} in a canonical order, or NULL when there is none.
CREATE FUNCTION community_deletion.community_deletion_child_paths(target oid, only_parents oid[] DEFAULT NULL) RETURNS jsonb
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
        WITH hops AS (
            SELECT ref.parent, jsonb_build_object('schema', ref.parent_schema, 'table', ref.parent_table,
                                                  'columns', to_jsonb(ref.columns::text[]),
                                                  'parent_columns', to_jsonb(ref.parent_columns::text[])) AS hop,
                   r.tenant_key, coalesce(r.key_kind, 'uuid') AS kind, r.parents
            FROM community_deletion_table_references(target) ref
            JOIN community_scoped_tables r ON r.table_schema = ref.parent_schema AND r.table_name = ref.parent_table
            WHERE ref.parent IS NOT NULL AND ref.parent <> target AND r.purge_action = 'delete'
              AND (only_parents IS NULL OR ref.parent = ANY (only_parents))
        ), paths AS (
            SELECT hops.kind, jsonb_build_object('hops', jsonb_build_array(hops.hop), 'key', hops.tenant_key) AS path
            FROM hops WHERE hops.parents IS NULL
            UNION ALL
            SELECT hops.kind, jsonb_build_object('hops', jsonb_build_array(hops.hop) || (p.value -> 'hops'), 'key', p.value -> 'key')
            FROM hops CROSS JOIN jsonb_array_elements(hops.parents) p
            WHERE hops.parents IS NOT NULL
        )
        SELECT CASE WHEN count(*) = 0 THEN NULL
                    ELSE jsonb_build_object('kind', min(paths.kind),
                                            'paths', jsonb_agg(paths.path ORDER BY paths.path::text)) END
        FROM paths
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Registers a table of the service as tenant data, by its own tenant key
-- column (tenant_key), whose type must be of the kind of the declared
-- tenant table's key (uuid unless one is declared): smallint, integer or
-- bigint for an integer key, text or varchar for a text one. It puts the
-- write fence on it ('delete') or the kept-row fence ('nullify', whose key
-- must be nullable), and on a partitioned table also the row-level fence
-- every partition created later gets; then grants the deletion roles what
-- they need. Only the table's owner may attach it; a registration never
-- changes its purge action or key.
CREATE OR REPLACE FUNCTION community_deletion.attach_community_write_fence(target regclass, purge_action text DEFAULT 'delete', tenant_key name DEFAULT 'community_id') RETURNS void
    LANGUAGE plpgsql
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
DECLARE
    rel record;
    column_type regtype;
    column_not_null boolean;
    kind text;
    tenant_kind text;
    member regclass;
    args text[];
    arg_list text;
BEGIN
    IF purge_action IS NULL OR purge_action NOT IN ('delete', 'nullify') THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('purge_action must be ''delete'' or ''nullify'', not %L', purge_action);
    END IF;
    IF tenant_key IS NULL OR tenant_key = '' THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('attach of %s refused: name its tenant key column (community_id unless the service calls it otherwise), or attach it through its parents with community_deletion.attach_child_table()', target);
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
            MESSAGE = format('attach of %s refused: it has no column %I; name the column that holds the tenant''s key, or attach the table through its parents with community_deletion.attach_child_table()', target, tenant_key);
    END IF;
    kind := community_deletion_key_kind(column_type);
    tenant_kind := community_deletion_tenant_key_kind();
    IF kind IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('attach of %s refused: %s.%I is %s: a tenant key is uuid, smallint, integer, bigint, text or varchar; key the table by such a column, or exclude it with exclude_table()',
                             target, target, tenant_key, column_type);
    END IF;
    IF kind <> tenant_kind THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = CASE WHEN tenant_kind = 'uuid'
                THEN format('attach of %s refused: %s.%I is %s, an %s key, but the tenant key is uuid; a key of another kind needs a tenant table keyed by it: declare it first with community_deletion.declare_tenant_table()',
                            target, target, tenant_key, column_type, kind)
                ELSE format('attach of %s refused: %s.%I is %s (an %s key), but the tenant table''s key is an %s key; attach a column of the same kind',
                            target, target, tenant_key, column_type, kind, tenant_kind) END;
    END IF;
    IF purge_action = 'nullify' AND column_not_null THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('%s.%I must be nullable to be cleared by deletion', target, tenant_key);
    END IF;

    -- The community_id fence runs without arguments, on its static fast
    -- path; another uuid key is its one argument, any other key two.
    args := CASE purge_action WHEN 'delete' THEN community_deletion_fence_args(tenant_key, kind, NULL)
                              ELSE community_deletion_kept_row_args(tenant_key, kind) END;
    arg_list := coalesce((SELECT string_agg(quote_literal(a), ', ') FROM unnest(args) a), '');
    -- A change of purge action or key is refused by
    -- community_deletion_register_table() below, which rolls back the
    -- triggers and grants made here.
    FOR member IN SELECT tree.relid FROM pg_partition_tree(target) tree UNION SELECT target LOOP
        IF purge_action = 'delete' THEN
            EXECUTE format('CREATE OR REPLACE TRIGGER community_write_fence_insert AFTER INSERT ON %s '
                           'REFERENCING NEW TABLE AS community_fence_new '
                           'FOR EACH STATEMENT EXECUTE FUNCTION community_deletion.enforce_community_write_fence(%s)', member, arg_list);
            EXECUTE format('CREATE OR REPLACE TRIGGER community_write_fence_update AFTER UPDATE ON %s '
                           'REFERENCING OLD TABLE AS community_fence_old NEW TABLE AS community_fence_new '
                           'FOR EACH STATEMENT EXECUTE FUNCTION community_deletion.enforce_community_write_fence(%s)', member, arg_list);
            EXECUTE format('CREATE OR REPLACE TRIGGER community_write_fence_delete AFTER DELETE ON %s '
                           'REFERENCING OLD TABLE AS community_fence_old '
                           'FOR EACH STATEMENT EXECUTE FUNCTION community_deletion.enforce_community_write_fence(%s)', member, arg_list);
            EXECUTE format('CREATE OR REPLACE TRIGGER community_write_fence_truncate BEFORE TRUNCATE ON %s '
                           'FOR EACH STATEMENT EXECUTE FUNCTION community_deletion.enforce_community_truncate_fence()', member);
            EXECUTE format('GRANT SELECT, UPDATE, DELETE ON %s TO community_deletion_executor', member);
        ELSE
            EXECUTE format('CREATE OR REPLACE TRIGGER community_kept_row_fence_insert AFTER INSERT ON %s '
                           'REFERENCING NEW TABLE AS community_fence_new '
                           'FOR EACH STATEMENT EXECUTE FUNCTION community_deletion.enforce_community_kept_row_fence(%s)', member, arg_list);
            EXECUTE format('CREATE OR REPLACE TRIGGER community_kept_row_fence_update AFTER UPDATE ON %s '
                           'REFERENCING OLD TABLE AS community_fence_old NEW TABLE AS community_fence_new '
                           'FOR EACH STATEMENT EXECUTE FUNCTION community_deletion.enforce_community_kept_row_fence(%s)', member, arg_list);
            EXECUTE format('GRANT SELECT, UPDATE (%I) ON %s TO community_deletion_executor', tenant_key, member);
        END IF;
        EXECUTE format('GRANT SELECT (%I) ON %s TO community_deletion_operator', tenant_key, member);
    END LOOP;
    PERFORM community_deletion_attach_row_fence(target, purge_action, args);
    PERFORM community_deletion_register_table(target, purge_action, tenant_key);
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- On a partitioned table: the row-level fence that PostgreSQL clones onto
-- every partition, now and later, so that a partition created after attach
-- is fenced from the moment it exists; disabled again on each leaf
-- partition that has the statement-level fences already. Run as the table's owner,
-- by attach.
CREATE FUNCTION community_deletion.community_deletion_attach_row_fence(target regclass, purge_action text, args text[]) RETURNS void
    LANGUAGE plpgsql
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
DECLARE
    member regclass;
BEGIN
    IF (SELECT c.relkind FROM pg_class c WHERE c.oid = target) <> 'p' THEN
        RETURN;
    END IF;
    EXECUTE format('CREATE OR REPLACE TRIGGER community_write_fence_row AFTER %s ON %s FOR EACH ROW EXECUTE FUNCTION %s(%s)',
                   CASE purge_action WHEN 'delete' THEN 'INSERT OR UPDATE OR DELETE' ELSE 'INSERT OR UPDATE' END,
                   target,
                   CASE purge_action WHEN 'delete' THEN 'community_deletion.enforce_community_write_fence_row'
                                     ELSE 'community_deletion.enforce_community_kept_row_fence_row' END,
                   coalesce((SELECT string_agg(quote_literal(a), ', ') FROM unnest(args) a), ''));
    -- Only on the leaves: a partition's clone takes the state of its own
    -- parent's, so a partitioned partition keeps it enabled for the
    -- partitions it gets later; it never fires on a table without rows.
    FOR member IN SELECT tree.relid FROM pg_partition_tree(target) tree WHERE tree.isleaf AND tree.relid <> target LOOP
        EXECUTE format('ALTER TABLE %s DISABLE TRIGGER community_write_fence_row', member);
    END LOOP;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The paths of attach_child_table(target, parents), for target's owner, who
-- may read nothing of the deletion's: every listed parent (by default every
-- registered 'delete' table target references) must be one target
-- references (22023).
CREATE FUNCTION community_deletion.community_deletion_child_spec(target regclass, parents regclass[]) RETURNS jsonb
    LANGUAGE plpgsql STABLE SECURITY DEFINER
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
DECLARE
    owner oid;
    missing text;
    spec jsonb;
BEGIN
    SELECT c.relowner INTO owner FROM pg_class c WHERE c.oid = target;
    IF owner IS NULL OR NOT pg_has_role(session_user, owner, 'MEMBER') THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = format('attach of %s refused: role %s does not own it', target, session_user);
    END IF;
    IF parents IS NOT NULL THEN
        SELECT string_agg(p::text, ', ') INTO missing
        FROM unnest(parents) p
        WHERE NOT EXISTS (SELECT 1 FROM community_deletion_table_references(target) ref
                          JOIN community_scoped_tables r ON r.table_schema = ref.parent_schema AND r.table_name = ref.parent_table
                          WHERE ref.parent = p AND r.purge_action = 'delete');
        IF missing IS NOT NULL THEN
            RAISE EXCEPTION USING ERRCODE = '22023',
                MESSAGE = format('attach of %s refused: it has no foreign key or declared reference to %s as a registered ''delete'' table; attach the parent first, or declare the reference with community_deletion.declare_reference()',
                                 target, missing);
        END IF;
    END IF;
    spec := community_deletion_child_paths(target, parents::oid[]);
    IF spec IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('attach of %s refused: it has no foreign key or declared reference to a registered ''delete'' table; attach its parent first, declare the reference with community_deletion.declare_reference(), or attach it by a tenant key column with community_deletion.attach_community_write_fence()',
                             target);
    END IF;
    RETURN spec;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Registers a table of the service that has no tenant key column of its
-- own: its rows belong to the tenants of the rows they reference in
-- registered 'delete' tables, through its foreign keys or the references
-- declared for it (declare_reference()), to any depth. parents restricts
-- the references followed to those tables; by default every reference to
-- a registered table is. It gets the write fence, which resolves each
-- written row's tenants through those references (a row that reaches none
-- belongs to no tenant), and is purged before its parents. Only the
-- table's owner may attach it; its parents must be attached first.
CREATE FUNCTION community_deletion.attach_child_table(target regclass, parents regclass[] DEFAULT NULL) RETURNS void
    LANGUAGE plpgsql
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
DECLARE
    rel record;
    spec jsonb;
    args text[];
    arg_list text;
    member regclass;
    hop jsonb;
    grant_needed text;
BEGIN
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
    spec := community_deletion_child_spec(target, parents);
    -- Every role that counts, purges or proves the table's rows follows its
    -- paths: the operator reads each parent's referenced columns.
    FOR hop IN SELECT DISTINCT h.value - 'columns' FROM jsonb_array_elements(spec -> 'paths') p, jsonb_array_elements(p.value -> 'hops') h LOOP
        SELECT string_agg(quote_ident(c.value), ', ') INTO grant_needed
        FROM jsonb_array_elements_text(hop -> 'parent_columns') c
        WHERE NOT has_column_privilege('community_deletion_operator', format('%I.%I', hop ->> 'schema', hop ->> 'table'), c.value, 'SELECT');
        IF grant_needed IS NOT NULL THEN
            grant_needed := format('GRANT SELECT (%s) ON %I.%I TO community_deletion_operator', grant_needed, hop ->> 'schema', hop ->> 'table');
            IF pg_has_role(current_user, (SELECT c.relowner FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                                          WHERE n.nspname = hop ->> 'schema' AND c.relname = hop ->> 'table'), 'USAGE') THEN
                EXECUTE grant_needed;
            ELSE
                RAISE EXCEPTION USING ERRCODE = '42501',
                    MESSAGE = format('attach of %s refused: the deletion''s operators cannot read the columns it references; have the owner of %I.%I run: %s',
                                     target, hop ->> 'schema', hop ->> 'table', grant_needed);
            END IF;
        END IF;
    END LOOP;
    args := community_deletion_fence_args(NULL, spec ->> 'kind', spec -> 'paths');
    arg_list := (SELECT string_agg(quote_literal(a), ', ') FROM unnest(args) a);
    FOR member IN SELECT tree.relid FROM pg_partition_tree(target) tree UNION SELECT target LOOP
        EXECUTE format('CREATE OR REPLACE TRIGGER community_write_fence_insert AFTER INSERT ON %s '
                       'REFERENCING NEW TABLE AS community_fence_new '
                       'FOR EACH STATEMENT EXECUTE FUNCTION community_deletion.enforce_community_write_fence(%s)', member, arg_list);
        EXECUTE format('CREATE OR REPLACE TRIGGER community_write_fence_update AFTER UPDATE ON %s '
                       'REFERENCING OLD TABLE AS community_fence_old NEW TABLE AS community_fence_new '
                       'FOR EACH STATEMENT EXECUTE FUNCTION community_deletion.enforce_community_write_fence(%s)', member, arg_list);
        EXECUTE format('CREATE OR REPLACE TRIGGER community_write_fence_delete AFTER DELETE ON %s '
                       'REFERENCING OLD TABLE AS community_fence_old '
                       'FOR EACH STATEMENT EXECUTE FUNCTION community_deletion.enforce_community_write_fence(%s)', member, arg_list);
        EXECUTE format('CREATE OR REPLACE TRIGGER community_write_fence_truncate BEFORE TRUNCATE ON %s '
                       'FOR EACH STATEMENT EXECUTE FUNCTION community_deletion.enforce_community_truncate_fence()', member);
        EXECUTE format('GRANT SELECT, UPDATE, DELETE ON %s TO community_deletion_executor', member);
        EXECUTE format('GRANT SELECT (%s) ON %s TO community_deletion_operator',
                       (SELECT string_agg(DISTINCT quote_ident(c.value), ', ')
                        FROM jsonb_array_elements(spec -> 'paths') p, jsonb_array_elements_text(p.value -> 'hops' -> 0 -> 'columns') c),
                       member);
    END LOOP;
    PERFORM community_deletion_attach_row_fence(target, 'delete', args);
    PERFORM community_deletion_register_child_table(target, spec);
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Declares a reference the schema has no constraint for, in the manner of
-- GitLab's loose foreign keys: child's columns hold the values of parent's
-- columns (by default its primary key), which must be unique in parent.
-- attach_child_table() and the drift report follow it like a foreign key.
-- Only the owner of child may declare it; it never changes, and
-- drop_reference() removes it while no table is attached through it.
CREATE FUNCTION community_deletion.declare_reference(child regclass, child_columns name[], parent regclass, parent_columns name[] DEFAULT NULL, reason text DEFAULT NULL) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
DECLARE
    crel record;
    prel record;
    i int;
    ctype oid;
    ptype oid;
    existing record;
BEGIN
    SELECT c.relname, c.relowner, c.relkind, c.relispartition, c.relpersistence, c.relnamespace, n.nspname INTO crel
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = child;
    SELECT c.oid, c.relname, c.relkind, c.relispartition, c.relpersistence, c.relnamespace, n.nspname INTO prel
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = parent;
    IF crel.relname IS NULL OR NOT pg_has_role(session_user, crel.relowner, 'MEMBER') THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = format('reference from %s refused: only its owner (%s) may declare its references', child, pg_get_userbyid(crel.relowner));
    END IF;
    IF crel.relpersistence = 't' OR prel.relpersistence = 't'
       OR NOT community_deletion_tenant_schema(crel.relnamespace) OR NOT community_deletion_tenant_schema(prel.relnamespace)
       OR crel.relkind NOT IN ('r', 'p') OR prel.relkind NOT IN ('r', 'p') OR crel.relispartition OR prel.relispartition THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('reference from %s to %s refused: both must be permanent tables (not partitions) of schemas of the service', child, parent);
    END IF;
    IF parent_columns IS NULL THEN
        SELECT ARRAY(SELECT a.attname FROM unnest(k.conkey) WITH ORDINALITY u (attnum, ordinality)
                     JOIN pg_attribute a ON a.attrelid = k.conrelid AND a.attnum = u.attnum ORDER BY u.ordinality)
        INTO parent_columns
        FROM pg_constraint k WHERE k.conrelid = parent AND k.contype = 'p';
        IF parent_columns IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = '22023',
                MESSAGE = format('reference from %s to %s refused: %s has no primary key; name the parent columns', child, parent, parent);
        END IF;
    END IF;
    IF child_columns IS NULL OR cardinality(child_columns) = 0 OR cardinality(child_columns) <> cardinality(parent_columns)
       OR cardinality(child_columns) > 32 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('reference from %s to %s refused: name as many columns of the child as of the parent (1 to 32)', child, parent);
    END IF;
    FOR i IN 1 .. cardinality(child_columns) LOOP
        SELECT a.atttypid INTO ctype FROM pg_attribute a
        WHERE a.attrelid = child AND a.attname = child_columns[i] AND a.attnum > 0 AND NOT a.attisdropped;
        SELECT a.atttypid INTO ptype FROM pg_attribute a
        WHERE a.attrelid = parent AND a.attname = parent_columns[i] AND a.attnum > 0 AND NOT a.attisdropped;
        IF ctype IS NULL OR ptype IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = '22023',
                MESSAGE = format('reference from %s to %s refused: %s has no column %I', child, parent,
                                 CASE WHEN ctype IS NULL THEN child ELSE parent END,
                                 CASE WHEN ctype IS NULL THEN child_columns[i] ELSE parent_columns[i] END);
        END IF;
        IF ctype <> ptype AND community_deletion_key_kind(ctype::regtype) IS DISTINCT FROM community_deletion_key_kind(ptype::regtype) THEN
            RAISE EXCEPTION USING ERRCODE = '22023',
                MESSAGE = format('reference from %s to %s refused: %I is %s but %I is %s; a reference joins columns of one type (or of integer types, or of text types)',
                                 child, parent, child_columns[i], format_type(ctype, NULL), parent_columns[i], format_type(ptype, NULL));
        END IF;
    END LOOP;
    IF NOT EXISTS (SELECT 1 FROM pg_index x
                   WHERE x.indrelid = parent AND x.indisunique AND x.indisvalid AND x.indpred IS NULL
                     AND x.indnkeyatts = cardinality(parent_columns)
                     AND (SELECT array_agg(a.attname ORDER BY a.attname) FROM pg_attribute a
                          WHERE a.attrelid = parent AND a.attnum = ANY (x.indkey::int2[]))
                         = (SELECT array_agg(c ORDER BY c) FROM unnest(parent_columns) c)) THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('reference from %s to %s refused: (%s) is not unique in %s; reference its primary key or a unique key',
                             child, parent, array_to_string(parent_columns, ', '), parent);
    END IF;
    SELECT r.parent_schema, r.parent_table, r.parent_columns INTO existing
    FROM community_deletion_references r
    WHERE r.child_schema = crel.nspname AND r.child_table = crel.relname AND r.child_columns = declare_reference.child_columns;
    IF FOUND THEN
        IF (existing.parent_schema, existing.parent_table, existing.parent_columns) IS DISTINCT FROM (prel.nspname, prel.relname, declare_reference.parent_columns) THEN
            RAISE EXCEPTION USING ERRCODE = '22023',
                MESSAGE = format('reference from %s (%s) refused: it is declared to %I.%I already; a declared reference never changes: drop it first',
                                 child, array_to_string(child_columns, ', '), existing.parent_schema, existing.parent_table);
        END IF;
        RETURN;
    END IF;
    INSERT INTO community_deletion_references (child_schema, child_table, child_columns, parent_schema, parent_table, parent_columns, reason)
    VALUES (crel.nspname, crel.relname, child_columns, prel.nspname, prel.relname, parent_columns, reason);
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Drops a declared reference, by child's owner, while no registered table is
-- attached through it.
CREATE FUNCTION community_deletion.drop_reference(child regclass, child_columns name[]) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
DECLARE
    crel record;
    dependent text;
BEGIN
    SELECT c.relname, c.relowner, n.nspname INTO crel
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = child;
    IF crel.relname IS NULL OR NOT pg_has_role(session_user, crel.relowner, 'MEMBER') THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = format('reference from %s refused: only its owner (%s) may drop its references', child, pg_get_userbyid(crel.relowner));
    END IF;
    IF EXISTS (SELECT 1 FROM community_scoped_tables r
               WHERE r.table_schema = crel.nspname AND r.table_name = crel.relname AND r.parents IS NOT NULL
                 AND EXISTS (SELECT 1 FROM jsonb_array_elements(r.parents) p
                             WHERE p.value -> 'hops' -> 0 -> 'columns' = to_jsonb(drop_reference.child_columns::text[]))) THEN
        RAISE EXCEPTION USING ERRCODE = '55000',
            MESSAGE = format('drop of the reference from %s (%s) refused: %s is attached through it; detach it first',
                             child, array_to_string(child_columns, ', '), child);
    END IF;
    DELETE FROM community_deletion_references r
    WHERE r.child_schema = crel.nspname AND r.child_table = crel.relname AND r.child_columns = drop_reference.child_columns;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('%s has no declared reference by (%s)', child, array_to_string(child_columns, ', '));
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Guards community_deletion_references: written only by declare_reference()
-- and drop_reference(), never updated (42501, 23000).
CREATE FUNCTION community_deletion.enforce_community_deletion_reference_guard() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
DECLARE
    stack text;
BEGIN
    IF TG_OP = 'UPDATE' THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = 'community_deletion_references refused: a declared reference never changes; drop it and declare it again';
    END IF;
    GET DIAGNOSTICS stack = PG_CONTEXT;
    IF stack !~ E'\nPL/pgSQL function (declare_reference\\(regclass,name\\[\\],regclass,name\\[\\],text\\)|drop_reference\\(regclass,name\\[\\]\\)) line [0-9]+ at SQL statement' THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = 'community_deletion_references refused: references are declared only by community_deletion.declare_reference() and dropped only by community_deletion.drop_reference()';
    END IF;
    IF TG_OP = 'DELETE' THEN
        RETURN OLD;
    END IF;
    NEW.declared_by := session_user;
    NEW.declared_at := now();
    RETURN NEW;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER community_deletion_references_guard BEFORE INSERT OR DELETE OR UPDATE ON community_deletion.community_deletion_references
    FOR EACH ROW EXECUTE FUNCTION community_deletion.enforce_community_deletion_reference_guard();

-- +goose StatementBegin
-- Records a table attach fenced by its own tenant key, with the key's kind.
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_register_table(target regclass, purge_action text, tenant_key name) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, community_deletion, pg_temp
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
    DELETE FROM community_deletion_excluded_tables e
    WHERE e.table_schema = rel.nspname AND e.table_name = rel.relname;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Records a table attach_child_table() fenced through its parents; its
-- paths are recomputed from the catalog here, as the schema's owner, and
-- must be those the fence was given.
CREATE FUNCTION community_deletion.community_deletion_register_child_table(target regclass, spec jsonb) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, community_deletion, pg_temp
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
    -- The paths given must be those of some set of the table's parents.
    SELECT array_agg(DISTINCT c.oid) INTO parent_tables
    FROM jsonb_array_elements(spec -> 'paths') p
    JOIN pg_namespace n ON n.nspname = p.value -> 'hops' -> 0 ->> 'schema'
    JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = p.value -> 'hops' -> 0 ->> 'table';
    IF parent_tables IS NULL OR community_deletion_child_paths(target, parent_tables) IS DISTINCT FROM spec THEN
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
    DELETE FROM community_deletion_excluded_tables e
    WHERE e.table_schema = rel.nspname AND e.table_name = rel.relname;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Guards community_scoped_tables: rows come and go only through the
-- registration functions, by a table's owner, for a table that has the
-- complete, enabled fence of its purge action and key; never updated; no
-- unregistration while a deletion is in flight.
CREATE OR REPLACE FUNCTION community_deletion.enforce_community_scoped_table_guard() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
DECLARE
    stack text;
    target oid;
    column_type regtype;
    column_not_null boolean;
    args text[];
BEGIN
    IF TG_OP = 'UPDATE' THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('registration of %s refused: a registration never changes; detach and attach the table again', OLD.table_name);
    END IF;
    GET DIAGNOSTICS stack = PG_CONTEXT;
    IF stack !~ E'\nPL/pgSQL function community_deletion_(un)?register_(child_)?table\\((regclass,text,name|name,name|regclass,jsonb)\\) line [0-9]+ at SQL statement' THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = 'community_scoped_tables refused: tenant tables are registered only by attach_community_write_fence() or attach_child_table() and unregistered only by detach_community_write_fence()';
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
    IF NEW.parents IS NULL THEN
        SELECT a.atttypid::regtype, a.attnotnull INTO column_type, column_not_null
        FROM pg_attribute a WHERE a.attrelid = target AND a.attname = NEW.tenant_key AND a.attnum > 0 AND NOT a.attisdropped;
        IF target IS NULL
           OR community_deletion_key_kind(column_type) IS DISTINCT FROM coalesce(NEW.key_kind, 'uuid')
           OR community_deletion_key_kind(column_type) IS DISTINCT FROM community_deletion_tenant_key_kind()
           OR (NEW.purge_action = 'nullify' AND column_not_null) THEN
            RAISE EXCEPTION USING ERRCODE = '23000',
                MESSAGE = format('registration of %s refused: it is not a tenant table with the %I column of the tenant key''s kind that purge action %s needs',
                                 NEW.table_name, NEW.tenant_key, NEW.purge_action);
        END IF;
        args := CASE NEW.purge_action WHEN 'delete' THEN community_deletion_fence_args(NEW.tenant_key, NEW.key_kind, NULL)
                                      ELSE community_deletion_kept_row_args(NEW.tenant_key, NEW.key_kind) END;
    ELSE
        IF target IS NULL OR NEW.purge_action <> 'delete' OR NEW.key_kind IS DISTINCT FROM community_deletion_tenant_key_kind() THEN
            RAISE EXCEPTION USING ERRCODE = '23000',
                MESSAGE = format('registration of %s refused: a table attached through its parents is a ''delete'' table of the tenant key''s kind', NEW.table_name);
        END IF;
        args := community_deletion_fence_args(NULL, NEW.key_kind, NEW.parents);
    END IF;
    IF NOT community_deletion_statement_fenced(target,
               CASE NEW.purge_action WHEN 'delete' THEN 'enforce_community_write_fence()' ELSE 'enforce_community_kept_row_fence()' END::regprocedure, args)
       OR EXISTS (
        SELECT 1
        FROM pg_partition_tree(target) tree
        WHERE tree.relid <> target
          AND NOT community_deletion_statement_fenced(tree.relid,
                  CASE NEW.purge_action WHEN 'delete' THEN 'enforce_community_write_fence()' ELSE 'enforce_community_kept_row_fence()' END::regprocedure, args)) THEN
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
-- Unregisters a table and removes its fences and grants, by its owner; not
-- while a deletion is in flight, nor while a table is attached through it.
CREATE OR REPLACE FUNCTION community_deletion.detach_community_write_fence(target regclass) RETURNS void
    LANGUAGE plpgsql
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $_$
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
        IF key IS NOT NULL AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = member AND a.attname = key AND NOT a.attisdropped) THEN
            EXECUTE format('REVOKE SELECT (%1$I), UPDATE (%1$I) ON %2$s FROM community_deletion_executor', key, member);
        END IF;
        -- The operator was granted the key, or a child table's referencing
        -- columns.
        EXECUTE format('REVOKE SELECT (%s) ON %s FROM community_deletion_operator',
                       (SELECT string_agg(quote_ident(a.attname), ', ') FROM pg_attribute a
                        WHERE a.attrelid = member AND a.attnum > 0 AND NOT a.attisdropped), member);
    END LOOP;
    -- The row-level fence lives on the partitioned table; its clones go with it.
    EXECUTE format('DROP TRIGGER IF EXISTS community_write_fence_row ON %s', target);
END
$_$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Removes a table's registration for detach, by its owner (or, for a table
-- that is gone, the deletion schema's owner), while no table is attached
-- through it; returns its tenant key column (NULL for a table attached
-- through its parents).
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_unregister_table(table_schema name, table_name name) RETURNS name
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
DECLARE
    owner oid;
    key name;
    dependent text;
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
    SELECT string_agg(format('%I.%I', r.table_schema, r.table_name), ', ' ORDER BY r.table_schema, r.table_name) INTO dependent
    FROM community_scoped_tables r
    WHERE r.parents IS NOT NULL
      AND (r.table_schema, r.table_name) IS DISTINCT FROM (community_deletion_unregister_table.table_schema, community_deletion_unregister_table.table_name)
      AND EXISTS (SELECT 1 FROM jsonb_array_elements(r.parents) p, jsonb_array_elements(p.value -> 'hops') h
                  WHERE h.value ->> 'schema' = community_deletion_unregister_table.table_schema
                    AND h.value ->> 'table' = community_deletion_unregister_table.table_name);
    IF dependent IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = '55000',
            MESSAGE = format('detach of %I.%I refused: %s is attached through it; detach that first', table_schema, table_name, dependent);
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
-- Declares the service's tenant table (once per deployment, by its owner):
-- its key column (uuid, smallint, integer, bigint, text or varchar, NOT
-- NULL, unique on its own) is the tenant key every attached table's key
-- must match in kind. Every existing tenant gets its lifecycle row, and a
-- trigger gives every new one its row; the table is attached as a
-- 'delete' table keyed by its key column, so it is fenced and purged last.
CREATE OR REPLACE FUNCTION community_deletion.declare_tenant_table(target regclass, key_column name DEFAULT 'id') RETURNS void
    LANGUAGE plpgsql
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
DECLARE
    rel record;
    key record;
    tenants text[];
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
    IF community_deletion_key_kind(key.type) IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('declaration of %s as the tenant table refused: %s.%I is %s: a tenant key is uuid, smallint, integer, bigint, text or varchar',
                             target, target, key_column, key.type);
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
    EXECUTE format('SELECT array_agg(t.%I::text) FROM %s t', key_column, target) INTO tenants;
    PERFORM community_deletion_record_tenant_table(target, key_column, coalesce(tenants, '{}'));
    PERFORM attach_community_write_fence(target, 'delete', key_column);
END
$$;
-- +goose StatementEnd

DROP FUNCTION community_deletion.community_deletion_record_tenant_table(regclass, name, uuid[]);

-- +goose StatementBegin
-- Records the tenant table's declaration (once, by its owner) and the
-- lifecycle rows of the tenants whose keys (as text) are given: a uuid
-- key is the community's id; any other key's id is its name-based uuid,
-- and the key is kept in tenant_key.
CREATE FUNCTION community_deletion.community_deletion_record_tenant_table(target regclass, key_column name, tenants text[]) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
DECLARE
    rel record;
    declared record;
    kind text;
BEGIN
    SELECT c.relname, c.relowner, n.nspname INTO rel
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = target;
    IF rel.relname IS NULL OR NOT pg_has_role(session_user, rel.relowner, 'MEMBER') THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = format('declaration of %s as the tenant table refused: role %s does not own it', target, session_user);
    END IF;
    SELECT community_deletion_key_kind(a.atttypid::regtype) INTO kind
    FROM pg_attribute a WHERE a.attrelid = target AND a.attname = key_column AND a.attnum > 0 AND NOT a.attisdropped;
    IF kind IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('declaration of %s as the tenant table refused: %I is not a tenant key column', target, key_column);
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
        IF kind <> 'uuid' AND EXISTS (SELECT 1 FROM community_scoped_tables r WHERE coalesce(r.key_kind, 'uuid') <> kind) THEN
            RAISE EXCEPTION USING ERRCODE = '55000',
                MESSAGE = format('declaration of %s as the tenant table refused: its key is %s, but tables keyed by uuid are registered already; detach them first',
                                 target, kind);
        END IF;
        INSERT INTO community_deletion_tenant_table (table_schema, table_name, key_column)
        VALUES (rel.nspname, rel.relname, key_column);
    END IF;
    IF kind = 'uuid' THEN
        INSERT INTO communities (id)
        SELECT t.key::uuid FROM unnest(tenants) t (key) WHERE t.key IS NOT NULL
        ON CONFLICT (id) DO NOTHING;
    ELSE
        INSERT INTO communities (id, tenant_key)
        SELECT community_deletion_tenant_uuid(t.key), t.key FROM unnest(tenants) t (key) WHERE t.key IS NOT NULL
        ON CONFLICT (id) DO NOTHING;
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The declared tenant table's BEFORE INSERT trigger: gives each new
-- tenant its lifecycle row, and refuses a tenant whose key was deleted.
CREATE OR REPLACE FUNCTION community_deletion.enforce_community_tenant_created() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
DECLARE
    declared record;
    key text;
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
    key := to_jsonb(NEW) ->> TG_ARGV[0];
    IF key IS NULL THEN
        RETURN NEW; -- the key's NOT NULL refuses the row
    END IF;
    IF community_deletion_tenant_key_kind() = 'uuid' THEN
        tenant := key::uuid;
        INSERT INTO communities (id) VALUES (tenant) ON CONFLICT (id) DO NOTHING;
    ELSE
        tenant := community_deletion_tenant_uuid(key);
        INSERT INTO communities (id, tenant_key) VALUES (tenant, key) ON CONFLICT (id) DO NOTHING;
    END IF;
    IF NOT FOUND THEN
        SELECT c.deletion_state INTO state FROM communities c WHERE c.id = tenant;
        IF state = 'tombstone' THEN
            RAISE EXCEPTION USING ERRCODE = '55000',
                MESSAGE = format('tenant %s refused: it was deleted, and a deleted tenant''s key is never reused; create the tenant with a new key', key),
                CONSTRAINT = 'community_write_fence';
        END IF;
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The database's proof of absence at the tombstone: no registered table,
-- 'delete' or 'nullify', may still hold a row of the community, by its key
-- or through its parents.
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
        SELECT r.table_name, r.purge_action, n.nspname, c.relname
        FROM community_scoped_tables r
        JOIN pg_namespace n ON n.nspname = r.table_schema
        JOIN pg_class c ON c.relname = r.table_name AND c.relnamespace = n.oid
        WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition
        ORDER BY r.purge_action, r.table_name
    LOOP
        EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I.%I t WHERE %s)',
                       registered.nspname, registered.relname,
                       community_deletion_tenant_filter(registered.nspname, registered.relname, 't'))
            INTO remains USING coalesce(OLD.tenant_key, OLD.id::text);
        IF remains THEN
            RAISE EXCEPTION USING ERRCODE = '55000',
                MESSAGE = format('tombstone of community %s refused: registered %s table %s still holds its rows; purge them first',
                                 coalesce(OLD.tenant_key, OLD.id::text), registered.purge_action, registered.table_name);
        END IF;
    END LOOP;
    RETURN NEW;
END
$_$;
-- +goose StatementEnd

-- A keyed tenant's id is the name-based uuid of its key.
ALTER TABLE community_deletion.communities ADD CONSTRAINT communities_tenant_key_check
    CHECK (tenant_key IS NULL OR (tenant_key <> '' AND octet_length(tenant_key) <= 1024
                                  AND id = community_deletion.community_deletion_tenant_uuid(tenant_key)));

-- +goose StatementBegin
-- Guards the tenant keys of communities and requests: a community's key
-- never changes; a request's is its community's, set when it is submitted,
-- and never changes (23000).
CREATE FUNCTION community_deletion.enforce_community_tenant_key_guard() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
BEGIN
    IF TG_TABLE_NAME = 'communities' THEN
        IF NEW.tenant_key IS DISTINCT FROM OLD.tenant_key THEN
            RAISE EXCEPTION USING ERRCODE = '23000',
                MESSAGE = format('community %s refused: its tenant key never changes', OLD.id);
        END IF;
        RETURN NEW;
    END IF;
    IF TG_OP = 'INSERT' THEN
        NEW.community_tenant_key := (SELECT c.tenant_key FROM communities c WHERE c.id = NEW.community_id);
    ELSIF NEW.community_tenant_key IS DISTINCT FROM OLD.community_tenant_key THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('deletion request %s refused: its target, requester and creation time never change', OLD.id);
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER communities_tenant_key_guard BEFORE UPDATE ON community_deletion.communities
    FOR EACH ROW EXECUTE FUNCTION community_deletion.enforce_community_tenant_key_guard();
CREATE TRIGGER community_deletion_requests_tenant_key_guard BEFORE INSERT OR UPDATE ON community_deletion.community_deletion_requests
    FOR EACH ROW EXECUTE FUNCTION community_deletion.enforce_community_tenant_key_guard();

-- +goose StatementBegin
-- The explicit write admission for a tenant named by its key (as text, in
-- the deployment's key kind), for writes the fence does not see: as
-- assert_community_write_allowed() does for a community's id.
CREATE FUNCTION community_deletion.assert_tenant_write_allowed(tenant_key text) RETURNS void
    LANGUAGE plpgsql
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
DECLARE
    community uuid := community_deletion_tenant_id(tenant_key);
BEGIN
    IF community IS NULL THEN
        RAISE EXCEPTION USING
            ERRCODE = '55000',
            MESSAGE = format('community write refused: %L is not a tenant key of this deployment''s kind (%s)',
                             tenant_key, community_deletion_tenant_key_kind()),
            CONSTRAINT = 'community_write_fence';
    END IF;
    PERFORM assert_community_write_allowed(community);
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The catalog drift report: every way the live catalog differs from what
-- the deletion relies on, one row each, with the next step in the problem
-- where there is one. Every claim stops while it returns a row.
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_catalog_drift() RETURNS TABLE(table_name text, problem text)
    LANGUAGE sql STABLE
    SET jit = off
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
    WITH RECURSIVE home AS (
        SELECT c.relnamespace AS namespace, n.nspname AS nspname
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE c.oid = 'communities'::regclass
    ), tenant_kind AS (
        SELECT community_deletion_tenant_key_kind() AS kind
    ), registered AS (
        -- oid is NULL when the table is gone or, for a table keyed by its
        -- own column, has no column of the registered kind named by its
        -- tenant key. args are its fence's expected arguments.
        SELECT r.table_schema, r.table_name, r.purge_action, r.tenant_key, coalesce(r.key_kind, 'uuid') AS key_kind, r.parents,
               t.oid, t.attnotnull,
               CASE WHEN r.purge_action = 'delete' THEN community_deletion_fence_args(r.tenant_key, r.key_kind, r.parents)
                    ELSE community_deletion_kept_row_args(r.tenant_key, r.key_kind) END AS args,
               CASE WHEN r.purge_action = 'delete' THEN 'enforce_community_write_fence()'::regprocedure
                    ELSE 'enforce_community_kept_row_fence()'::regprocedure END AS fence,
               CASE WHEN r.purge_action = 'delete' THEN 'enforce_community_write_fence_row()'::regprocedure
                    ELSE 'enforce_community_kept_row_fence_row()'::regprocedure END AS row_fence
        FROM community_scoped_tables r
        LEFT JOIN LATERAL (
            SELECT c.oid, a.attnotnull
            FROM pg_class c
            JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = r.table_schema
            LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = r.tenant_key AND NOT a.attisdropped
            WHERE c.relname = r.table_name
              AND c.relkind IN ('r', 'p') AND NOT c.relispartition
              AND (r.parents IS NOT NULL
                   OR community_deletion_key_kind(a.atttypid::regtype) = coalesce(r.key_kind, 'uuid'))) t ON true
    ), tenant_table AS (
        -- The service's declared tenant table, when there is one.
        SELECT c.oid, d.key_column, c.relname
        FROM community_deletion_tenant_table d
        JOIN pg_namespace n ON n.nspname = d.table_schema
        JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = d.table_name
    ), key_names AS (
        -- The names of tenant key columns: community_id, every registered
        -- key but the tenant table's own, and the names a column that
        -- holds the tenant table's key usually has: for a tenant table
        -- accounts or "Account", account_id, accountId and AccountId (and
        -- tenant_id, tenantId).
        SELECT 'community_id'::name AS name
        UNION
        SELECT r.tenant_key FROM community_scoped_tables r
        WHERE r.tenant_key IS NOT NULL
          AND NOT EXISTS (SELECT 1 FROM community_deletion_tenant_table d
                          WHERE d.table_schema = r.table_schema AND d.table_name = r.table_name)
        UNION
        SELECT unnest(ARRAY[stem.s || '_id', stem.s || 'Id', lower(stem.s) || '_id',
                            lower(left(stem.s, 1)) || substr(stem.s, 2) || 'Id', 'tenant_id', 'tenantId'])::name
        FROM tenant_table
        CROSS JOIN LATERAL (SELECT CASE WHEN tenant_table.relname ~ 'ies$' THEN regexp_replace(tenant_table.relname, 'ies$', 'y')
                                        WHEN tenant_table.relname ~ '[^s]s$' THEN left(tenant_table.relname, -1)
                                        ELSE tenant_table.relname::text END) stem (s)
    ), refs AS (
        -- Every reference between tables of the service's schemas: foreign
        -- keys (on partitioned roots, not their clones) and declared ones.
        SELECT f.conrelid AS child, f.confrelid AS parent
        FROM pg_constraint f WHERE f.contype = 'f' AND f.conparentid = 0
        UNION
        SELECT cc.oid, pc.oid
        FROM community_deletion_references dr
        JOIN pg_namespace cn ON cn.nspname = dr.child_schema
        JOIN pg_class cc ON cc.relnamespace = cn.oid AND cc.relname = dr.child_table
        JOIN pg_namespace pn ON pn.nspname = dr.parent_schema
        JOIN pg_class pc ON pc.relnamespace = pn.oid AND pc.relname = dr.parent_table
    ), tenant_chain AS (
        -- communities, the tenant table, every registered 'delete' table,
        -- and every table down a chain of references from them; the chain
        -- does not run on through a control table or a registered 'nullify'
        -- table (whose rows outlive a deletion).
        SELECT 'communities'::regclass::oid AS oid
        UNION
        SELECT tenant_table.oid FROM tenant_table
        UNION
        SELECT registered.oid FROM registered
        WHERE registered.purge_action = 'delete' AND registered.oid IS NOT NULL
        UNION
        SELECT refs.child
        FROM tenant_chain
        JOIN refs ON refs.parent = tenant_chain.oid
        JOIN pg_class c ON c.oid = refs.child
        CROSS JOIN home
        WHERE c.relnamespace <> home.namespace
          AND NOT EXISTS (SELECT 1 FROM registered
                          WHERE registered.oid = c.oid AND registered.purge_action = 'nullify')
    ), live AS (
        -- Every table, in any schema but the system's and temporary ones, that
        -- looks like tenant data: a column named like a tenant key, of any
        -- type, or a reference to communities, the tenant table or (down a
        -- chain of references) a registered 'delete' table, under any
        -- column name; unless its owner excluded it.
        SELECT c.oid, c.relnamespace = home.namespace AS at_home, c.relname::text AS relname,
               format('%I.%I', n.nspname, c.relname) AS display_name,
               (SELECT string_agg(DISTINCT format('%I.%I', pn.nspname, pc.relname), ', ')
                FROM refs JOIN tenant_chain ON tenant_chain.oid = refs.parent
                JOIN pg_class pc ON pc.oid = refs.parent JOIN pg_namespace pn ON pn.oid = pc.relnamespace
                WHERE refs.child = c.oid AND refs.parent <> c.oid) AS chained_to,
               (SELECT string_agg(format('its %I column is %s', a.attname, format_type(a.atttypid, a.atttypmod)), ', ' ORDER BY a.attname)
                FROM pg_attribute a JOIN key_names k ON k.name = a.attname
                WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
                  AND community_deletion_key_kind(a.atttypid::regtype) IS DISTINCT FROM (SELECT tenant_kind.kind FROM tenant_kind)) AS wrong_keys,
               (SELECT min(a.attname::text)
                FROM pg_attribute a JOIN key_names k ON k.name = a.attname
                WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
                  AND community_deletion_key_kind(a.atttypid::regtype) = (SELECT tenant_kind.kind FROM tenant_kind)) AS key_column
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
               OR EXISTS (SELECT 1 FROM refs JOIN tenant_chain ON tenant_chain.oid = refs.parent
                          WHERE refs.child = c.oid AND refs.parent <> c.oid))
    ), fence_members AS (
        -- A registered table and, when it is partitioned, every partition;
        -- root marks the registered table itself.
        SELECT registered.table_name, registered.purge_action, registered.args, registered.fence, registered.row_fence,
               registered.oid, true AS root, false AS leaf_partition
        FROM registered
        WHERE registered.oid IS NOT NULL
        UNION ALL
        SELECT registered.table_name, registered.purge_action, registered.args, registered.fence, registered.row_fence,
               tree.relid, false, tree.isleaf
        FROM registered, pg_partition_tree(registered.oid) tree
        WHERE registered.oid IS NOT NULL AND tree.relid <> registered.oid
    ), fencing AS (
        -- How each member is fenced: by the statement-level fences attach
        -- gives it, or, for a partition created since, by the enabled clone
        -- of its partitioned table's row-level fence.
        SELECT fence_members.*,
               community_deletion_statement_fenced(fence_members.oid, fence_members.fence, fence_members.args) AS statement_fenced,
               (NOT fence_members.root
                AND community_deletion_row_fenced(fence_members.oid, fence_members.row_fence, fence_members.args, true)) AS row_fenced
        FROM fence_members
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
        WHERE t.tgfoid IN ('enforce_community_write_fence()'::regprocedure, 'enforce_community_kept_row_fence()'::regprocedure,
                           'enforce_community_write_fence_row()'::regprocedure, 'enforce_community_kept_row_fence_row()'::regprocedure)
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
    -- Tenant data no deletion covers, with the call that registers it; where
    -- it can never be registered as it is, why.
    SELECT live.display_name,
           CASE WHEN live.at_home
                    THEN 'unregistered: it is in schema community_deletion, where no tenant table can be registered; move it to a schema of the service'
                WHEN live.key_column IS NOT NULL
                    THEN format('unregistered: attach it by its %I column with community_deletion.attach_community_write_fence(%L, ''delete'', %L) (''nullify'' to keep its rows), or exclude it with community_deletion.exclude_table(%L, reason)',
                                live.key_column, live.display_name, live.key_column, live.display_name)
                WHEN live.chained_to IS NOT NULL
                    THEN format('unregistered: it references %s; attach it through its parents with community_deletion.attach_child_table(%L), or exclude it with community_deletion.exclude_table(%L, reason)',
                                live.chained_to, live.display_name, live.display_name)
                WHEN live.wrong_keys IS NOT NULL
                    THEN format('unregistered: %s, but the tenant key is %s; key it by a column of that kind, or exclude it with community_deletion.exclude_table(%L, reason)',
                                live.wrong_keys, (SELECT tenant_kind.kind FROM tenant_kind), live.display_name)
                ELSE 'unregistered' END
    FROM live
    WHERE NOT EXISTS (SELECT 1 FROM registered WHERE registered.oid = live.oid)
    UNION ALL
    SELECT registered.table_name, 'missing'
    FROM registered WHERE registered.oid IS NULL
    UNION ALL
    SELECT registered.table_name, 'shape'
    FROM registered
    WHERE registered.oid IS NOT NULL AND registered.purge_action = 'nullify' AND registered.attnotnull
    UNION ALL
    -- A table attached through its parents whose paths are no longer those
    -- of its references to registered tables.
    SELECT registered.table_name,
           format('parents_changed: its references to registered tables changed since it was attached; detach it and attach it again with community_deletion.attach_child_table(%L)',
                  format('%I.%I', registered.table_schema, registered.table_name))
    FROM registered
    WHERE registered.oid IS NOT NULL AND registered.parents IS NOT NULL
      AND community_deletion_child_paths(registered.oid,
              ARRAY(SELECT c.oid FROM jsonb_array_elements(registered.parents) p
                    JOIN pg_namespace n ON n.nspname = p.value -> 'hops' -> 0 ->> 'schema'
                    JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = p.value -> 'hops' -> 0 ->> 'table'))
          IS DISTINCT FROM jsonb_build_object('kind', registered.key_kind, 'paths', registered.parents)
    UNION ALL
    SELECT DISTINCT fencing.table_name, 'unfenced'
    FROM fencing
    WHERE fencing.purge_action = 'delete'
      AND NOT fencing.statement_fenced AND NOT fencing.row_fenced
      AND NOT EXISTS (SELECT 1 FROM fence_defects WHERE fence_defects.table_name = fencing.table_name)
    UNION ALL
    -- A registered 'nullify' table, or a partition, without its kept-row
    -- fence: a late write could link a kept row to a deleted tenant.
    SELECT DISTINCT fencing.table_name, 'unfenced: no kept-row fence; run attach_community_write_fence again'
    FROM fencing
    WHERE fencing.purge_action = 'nullify'
      AND NOT fencing.statement_fenced AND NOT fencing.row_fenced
      AND NOT EXISTS (SELECT 1 FROM fence_defects WHERE fence_defects.table_name = fencing.table_name)
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
      AND ((t.tgfoid IN ('enforce_community_write_fence()'::regprocedure, 'enforce_community_write_fence_row()'::regprocedure)
            AND NOT EXISTS (SELECT 1 FROM fence_members
                            WHERE fence_members.oid = t.tgrelid AND fence_members.purge_action = 'delete'))
           OR (t.tgfoid IN ('enforce_community_kept_row_fence()'::regprocedure, 'enforce_community_kept_row_fence_row()'::regprocedure)
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
    -- A registered 'delete' table, or a partition attach fenced, that lacks
    -- attach's TRUNCATE fence: TRUNCATE would take a community's rows past
    -- the deletion. (A partition created since attach has none; the notes
    -- say so.)
    SELECT DISTINCT fencing.table_name, 'unfenced: no TRUNCATE fence; run attach_community_write_fence again'
    FROM fencing
    WHERE fencing.purge_action = 'delete'
      AND fencing.statement_fenced
      AND NOT EXISTS (SELECT 1 FROM pg_trigger t
                      WHERE t.tgrelid = fencing.oid AND NOT t.tgisinternal
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
    -- A schema holding registered tables that a deletion role may not use:
    -- the inventory, the purge and the proofs could not name its tables.
    SELECT format('schema %I', s.table_schema),
           format('schema_usage_missing: %s may not use it; GRANT USAGE ON SCHEMA %I TO %s',
                  string_agg(r.rolname, ', ' ORDER BY r.rolname), s.table_schema,
                  string_agg(r.rolname, ', ' ORDER BY r.rolname))
    FROM (SELECT DISTINCT registered_schema.table_schema FROM community_scoped_tables registered_schema) s
    CROSS JOIN (VALUES ('community_deletion_executor'::name), ('community_deletion_operator'::name)) r (rolname)
    WHERE to_regnamespace(s.table_schema) IS NOT NULL
      AND NOT has_schema_privilege(r.rolname, s.table_schema, 'USAGE')
    GROUP BY s.table_schema
    UNION ALL
    SELECT row_secured.table_name,
           format('row_security: its policies apply to %s; grant BYPASSRLS to each (or let it own the table), or disable row level security',
                  row_secured.logins)
    FROM row_secured
    ORDER BY 1, 2
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
-- What the deletion works with but that stops nothing, for an operator to
-- act on: a partitioned table whose partitions created later would not be
-- fenced (attached before this release), a partition fenced row by row
-- since it was created after attach (slower writes, no TRUNCATE fence).
CREATE FUNCTION community_deletion.community_deletion_catalog_notes() RETURNS TABLE(table_name text, note text)
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
    WITH registered AS (
        SELECT r.table_schema, r.table_name, r.purge_action, c.oid,
               CASE WHEN r.purge_action = 'delete' THEN community_deletion_fence_args(r.tenant_key, r.key_kind, r.parents)
                    ELSE community_deletion_kept_row_args(r.tenant_key, r.key_kind) END AS args,
               CASE WHEN r.purge_action = 'delete' THEN 'enforce_community_write_fence()'::regprocedure
                    ELSE 'enforce_community_kept_row_fence()'::regprocedure END AS fence,
               CASE WHEN r.purge_action = 'delete' THEN 'enforce_community_write_fence_row()'::regprocedure
                    ELSE 'enforce_community_kept_row_fence_row()'::regprocedure END AS row_fence
        FROM community_scoped_tables r
        JOIN pg_namespace n ON n.nspname = r.table_schema
        JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = r.table_name AND c.relkind = 'p'
    )
    SELECT registered.table_name,
           format('partitions created from now on will not be fenced: run community_deletion.attach_community_write_fence (or attach_child_table) on %I.%I again to fence them as they are created',
                  registered.table_schema, registered.table_name)
    FROM registered
    WHERE NOT community_deletion_row_fenced(registered.oid, registered.row_fence, registered.args, false)
       OR NOT EXISTS (SELECT 1 FROM pg_trigger t WHERE t.tgrelid = registered.oid AND t.tgname = 'community_write_fence_row'
                      AND t.tgenabled IN ('O', 'A'))
    UNION ALL
    SELECT registered.table_name,
           format('partition %I.%I, created after attach, is fenced row by row and its TRUNCATE is not fenced: run attach on %I.%I again to give it the statement-level fences',
                  pn.nspname, pc.relname, registered.table_schema, registered.table_name)
    FROM registered
    CROSS JOIN LATERAL pg_partition_tree(registered.oid) tree
    JOIN pg_class pc ON pc.oid = tree.relid
    JOIN pg_namespace pn ON pn.oid = pc.relnamespace
    WHERE tree.isleaf AND tree.relid <> registered.oid
      AND NOT community_deletion_statement_fenced(tree.relid, registered.fence, registered.args)
      AND community_deletion_row_fenced(tree.relid, registered.row_fence, registered.args, true)
    ORDER BY 1, 2
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_control_table(table_name text) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, community_deletion, pg_temp
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
            'community_deletion_references',
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
            ('community_deletion_references', 'community_deletion_references_truncate_guard', 'refuse_community_deletion_truncate()')
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
            'attach_child_table(regclass,regclass[])',
            'attach_community_write_fence(regclass,text,name)',
            'community_deletion_attach_row_fence(regclass,text,text[])',
            'community_deletion_catalog_drift()',
            'community_deletion_catalog_notes()',
            'community_deletion_child_paths(oid,oid[])',
            'community_deletion_child_spec(regclass,regclass[])',
            'community_deletion_control_digest(text)',
            'community_deletion_control_table(text)',
            'community_deletion_default_grace_period()',
            'community_deletion_fence_admit(uuid[],text)',
            'community_deletion_fence_args(name,text,jsonb)',
            'community_deletion_fence_query(text,text[])',
            'community_deletion_fenced(oid,name)',
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
                  'attach_child_table(regclass,regclass[])', 'community_deletion_register_child_table(regclass,jsonb)',
                  'declare_reference(regclass,name[],regclass,name[],text)', 'drop_reference(regclass,name[])',
                  'enforce_community_write_fence_row()', 'enforce_community_kept_row_fence_row()',
                  'community_deletion_attach_row_fence(regclass,text,text[])', 'community_deletion_key_kind(regtype)',
                  'community_deletion_tenant_key_kind()', 'community_deletion_fence_args(name,text,jsonb)',
                  'community_deletion_kept_row_args(name,text)', 'community_deletion_child_spec(regclass,regclass[])',
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

-- The deletion roles run these as their caller (the fence as the writer,
-- the drift report and the proofs as every role).
GRANT EXECUTE ON FUNCTION
    community_deletion.community_deletion_tenant_uuid(text),
    community_deletion.community_deletion_tenant_id(text),
    community_deletion.community_deletion_key_cast(text),
    community_deletion.community_deletion_tenant_filter(name, name, text),
    community_deletion.community_deletion_fence_query(text, text[]),
    community_deletion.community_deletion_fence_admit(uuid[], text),
    community_deletion.community_deletion_trigger_args(text[]),
    community_deletion.community_deletion_statement_fenced(oid, regprocedure, text[]),
    community_deletion.community_deletion_row_fenced(oid, regprocedure, text[], boolean),
    community_deletion.community_deletion_catalog_notes(),
    community_deletion.community_deletion_child_paths(oid, oid[]),
    community_deletion.community_deletion_table_references(oid)
    TO community_deletion_serving, community_deletion_operator, community_deletion_executor;
GRANT EXECUTE ON FUNCTION community_deletion.assert_tenant_write_allowed(text)
    TO community_deletion_serving, community_deletion_executor;

SELECT community_deletion.community_deletion_seal_functions();

-- +goose Down
-- +goose StatementBegin
DO $refuse$
DECLARE
    found text;
BEGIN
    IF EXISTS (SELECT 1 FROM community_deletion.communities c WHERE c.tenant_key IS NOT NULL)
       OR community_deletion.community_deletion_tenant_key_kind() OPERATOR(pg_catalog.<>) 'uuid' THEN
        RAISE EXCEPTION USING ERRCODE = '55000',
            MESSAGE = 'migration 00026 down refused: the tenant table is keyed by an integer or text key, which earlier releases cannot represent; it cannot be undone';
    END IF;
    SELECT pg_catalog.format('%I.%I', r.table_schema, r.table_name) INTO found
    FROM community_deletion.community_scoped_tables r
    WHERE r.parents IS NOT NULL OR r.tenant_key IS NULL LIMIT 1;
    IF found IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = '55000',
            MESSAGE = pg_catalog.format('migration 00026 down refused: %s is attached through its parents, which earlier releases cannot read; detach it first', found);
    END IF;
    SELECT pg_catalog.format('%I.%I', r.table_schema, r.table_name) INTO found
    FROM community_deletion.community_scoped_tables r
    JOIN pg_catalog.pg_namespace n ON n.nspname OPERATOR(pg_catalog.=) r.table_schema
    JOIN pg_catalog.pg_class c ON c.relnamespace OPERATOR(pg_catalog.=) n.oid AND c.relname OPERATOR(pg_catalog.=) r.table_name
    JOIN pg_catalog.pg_attribute a ON a.attrelid OPERATOR(pg_catalog.=) c.oid AND a.attname OPERATOR(pg_catalog.=) r.tenant_key
    WHERE r.purge_action OPERATOR(pg_catalog.=) 'delete' AND NOT a.attnotnull LIMIT 1;
    IF found IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = '55000',
            MESSAGE = pg_catalog.format('migration 00026 down refused: ''delete'' table %s has a nullable tenant key, which earlier releases refuse; detach it or make the key NOT NULL first', found);
    END IF;
    IF EXISTS (SELECT 1 FROM community_deletion.community_deletion_references) THEN
        RAISE EXCEPTION USING ERRCODE = '55000',
            MESSAGE = 'migration 00026 down refused: references are declared; drop them with community_deletion.drop_reference first';
    END IF;
END
$refuse$;
-- +goose StatementEnd

DROP TRIGGER communities_tenant_key_guard ON community_deletion.communities;
DROP TRIGGER community_deletion_requests_tenant_key_guard ON community_deletion.community_deletion_requests;
DROP TRIGGER community_deletion_references_guard ON community_deletion.community_deletion_references;
ALTER TABLE community_deletion.communities DROP CONSTRAINT communities_tenant_key_check;
DROP FUNCTION community_deletion.community_deletion_record_tenant_table(regclass, name, text[]);

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
$_$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.enforce_community_kept_row_fence() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
    AS $_$
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
$_$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.attach_community_write_fence(target regclass, purge_action text DEFAULT 'delete'::text, tenant_key name DEFAULT 'community_id'::name) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
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

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_register_table(target regclass, purge_action text, tenant_key name) RETURNS void
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
CREATE OR REPLACE FUNCTION community_deletion.detach_community_write_fence(target regclass) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
    AS $_$
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
$_$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_unregister_table(table_schema name, table_name name) RETURNS name
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
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
CREATE OR REPLACE FUNCTION community_deletion.declare_tenant_table(target regclass, key_column name DEFAULT 'id'::name) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
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
CREATE FUNCTION community_deletion.community_deletion_record_tenant_table(target regclass, key_column name, tenants uuid[]) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
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
CREATE OR REPLACE FUNCTION community_deletion.enforce_community_tenant_created() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
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
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_catalog_drift() RETURNS TABLE(table_name text, problem text)
    LANGUAGE sql STABLE
    SET jit TO 'off'
    SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
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
    -- A schema holding registered tables that a deletion role may not use:
    -- the inventory, the purge and the proofs could not name its tables.
    SELECT format('schema %I', s.table_schema),
           format('schema_usage_missing: %s may not use it; GRANT USAGE ON SCHEMA %I TO %s',
                  string_agg(r.rolname, ', ' ORDER BY r.rolname), s.table_schema,
                  string_agg(r.rolname, ', ' ORDER BY r.rolname))
    FROM (SELECT DISTINCT registered_schema.table_schema FROM community_scoped_tables registered_schema) s
    CROSS JOIN (VALUES ('community_deletion_executor'::name), ('community_deletion_operator'::name)) r (rolname)
    WHERE to_regnamespace(s.table_schema) IS NOT NULL
      AND NOT has_schema_privilege(r.rolname, s.table_schema, 'USAGE')
    GROUP BY s.table_schema    UNION ALL
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

-- The row-level fences of partitioned tables go with their functions.
DROP FUNCTION community_deletion.enforce_community_write_fence_row() CASCADE;
DROP FUNCTION community_deletion.enforce_community_kept_row_fence_row() CASCADE;
DROP FUNCTION community_deletion.enforce_community_tenant_key_guard();
DROP FUNCTION community_deletion.enforce_community_deletion_reference_guard();
DROP FUNCTION community_deletion.assert_tenant_write_allowed(text);
DROP FUNCTION community_deletion.community_deletion_catalog_notes();
DROP FUNCTION community_deletion.attach_child_table(regclass, regclass[]);
DROP FUNCTION community_deletion.community_deletion_child_spec(regclass, regclass[]);
DROP FUNCTION community_deletion.community_deletion_register_child_table(regclass, jsonb);
DROP FUNCTION community_deletion.declare_reference(regclass, name[], regclass, name[], text);
DROP FUNCTION community_deletion.drop_reference(regclass, name[]);
DROP FUNCTION community_deletion.community_deletion_attach_row_fence(regclass, text, text[]);
DROP FUNCTION community_deletion.community_deletion_child_paths(oid, oid[]);
DROP FUNCTION community_deletion.community_deletion_table_references(oid);
DROP FUNCTION community_deletion.community_deletion_row_fenced(oid, regprocedure, text[], boolean);
DROP FUNCTION community_deletion.community_deletion_statement_fenced(oid, regprocedure, text[]);
DROP FUNCTION community_deletion.community_deletion_trigger_args(text[]);
DROP FUNCTION community_deletion.community_deletion_kept_row_args(name, text);
DROP FUNCTION community_deletion.community_deletion_fence_args(name, text, jsonb);
DROP FUNCTION community_deletion.community_deletion_fence_admit(uuid[], text);
DROP FUNCTION community_deletion.community_deletion_fence_query(text, text[]);
DROP FUNCTION community_deletion.community_deletion_tenant_filter(name, name, text);
DROP FUNCTION community_deletion.community_deletion_key_cast(text);
DROP FUNCTION community_deletion.community_deletion_tenant_id(text);
DROP FUNCTION community_deletion.community_deletion_tenant_key_kind();
DROP FUNCTION community_deletion.community_deletion_tenant_uuid(text);
DROP FUNCTION community_deletion.community_deletion_key_kind(regtype);

SELECT community_deletion.community_deletion_seal_functions();
