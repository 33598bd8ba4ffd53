-- Keeps the kept-row fences near-free (issue 24) after migration 00030's
-- context checks (issue 23): the check that a fence runs as attach's
-- trigger of a registered 'nullify' table, two catalog queries, ran
-- before the near-free return, on every statement (and, for the row
-- fence, every row) written to a 'nullify' table while no deletion is in
-- flight. It now runs after that return and before the fence reads any
-- relation: the return reads only the marker sequence, named
-- schema-qualified, and admits nothing a fence would refuse, so a fence
-- attached elsewhere still never reads a caller's relation as its owner.
--
-- Down restores migration 00030's two fences.

-- +goose Up

-- +goose StatementBegin
-- The kept-row statement fence: the near-free return, then the context
-- check, then the fence.
CREATE OR REPLACE FUNCTION community_deletion.enforce_community_kept_row_fence()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
AS $function$
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
    -- Before it reads any relation: only as attach's trigger on a
    -- registered 'nullify' table (or a partition of one), with the
    -- transition tables it reads under their names; anywhere else
    -- community_fence_new would name a relation of the caller's, read as
    -- this function's owner. The near-free return above reads none.
    IF TG_WHEN OPERATOR(pg_catalog.<>) 'AFTER' OR TG_LEVEL OPERATOR(pg_catalog.<>) 'STATEMENT'
       OR TG_OP OPERATOR(pg_catalog.<>) ALL (ARRAY['INSERT', 'UPDATE'])
       OR NOT community_deletion.community_deletion_fence_context(TG_RELID, TG_NAME,
                  'community_deletion.enforce_community_kept_row_fence()'::pg_catalog.regprocedure, 'nullify',
                  TG_OP OPERATOR(pg_catalog.=) 'UPDATE', true) THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = pg_catalog.format('enforce_community_kept_row_fence() refused: it runs only as attach''s AFTER INSERT or UPDATE statement trigger, with its transition tables, on a registered nullify table, not as trigger %s on %s',
                                        TG_NAME, TG_RELID::pg_catalog.regclass);
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
$function$
;
-- +goose StatementEnd

-- +goose StatementBegin
-- As enforce_community_kept_row_fence(), row by row.
CREATE OR REPLACE FUNCTION community_deletion.enforce_community_kept_row_fence_row()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
AS $function$
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
    -- Before it reads anything of the row: only as the row fence attach
    -- puts on a registered partitioned 'nullify' table (or its clone on a
    -- partition). The near-free return above reads no relation.
    IF TG_WHEN <> 'AFTER' OR TG_LEVEL <> 'ROW' OR TG_OP NOT IN ('INSERT', 'UPDATE')
       OR NOT community_deletion_fence_context(TG_RELID, TG_NAME,
                  'community_deletion.enforce_community_kept_row_fence_row()'::regprocedure, 'nullify', false, false) THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = format('enforce_community_kept_row_fence_row() refused: it runs only as attach''s AFTER INSERT OR UPDATE row trigger on a registered partitioned nullify table, not as trigger %s on %s',
                             TG_NAME, TG_RELID::regclass);
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
$function$
;
-- +goose StatementEnd

SELECT community_deletion.community_deletion_seal_functions();

-- +goose Down

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.enforce_community_kept_row_fence()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
AS $function$
DECLARE
    linked pg_catalog.uuid[];
    community pg_catalog.uuid;
    state pg_catalog.text;
    label pg_catalog.text;
    key_column pg_catalog.text := TG_ARGV[0];
    key_kind pg_catalog.text := CASE WHEN TG_NARGS OPERATOR(pg_catalog.>) 1 THEN TG_ARGV[1] ELSE 'uuid' END;
BEGIN
    -- Only as attach's trigger on a registered 'nullify' table (or a
    -- partition of one), with the transition tables it reads under their
    -- names: anywhere else community_fence_new would name a relation of
    -- the caller's, read as this function's owner.
    IF TG_WHEN OPERATOR(pg_catalog.<>) 'AFTER' OR TG_LEVEL OPERATOR(pg_catalog.<>) 'STATEMENT'
       OR TG_OP OPERATOR(pg_catalog.<>) ALL (ARRAY['INSERT', 'UPDATE'])
       OR NOT community_deletion.community_deletion_fence_context(TG_RELID, TG_NAME,
                  'community_deletion.enforce_community_kept_row_fence()'::pg_catalog.regprocedure, 'nullify',
                  TG_OP OPERATOR(pg_catalog.=) 'UPDATE', true) THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = pg_catalog.format('enforce_community_kept_row_fence() refused: it runs only as attach''s AFTER INSERT or UPDATE statement trigger, with its transition tables, on a registered nullify table, not as trigger %s on %s',
                                        TG_NAME, TG_RELID::pg_catalog.regclass);
    END IF;
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
$function$
;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.enforce_community_kept_row_fence_row()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
AS $function$
DECLARE
    key text;
    community uuid;
    state text;
BEGIN
    -- Only as the row fence attach puts on a registered partitioned
    -- 'nullify' table (or its clone on a partition).
    IF TG_WHEN <> 'AFTER' OR TG_LEVEL <> 'ROW' OR TG_OP NOT IN ('INSERT', 'UPDATE')
       OR NOT community_deletion_fence_context(TG_RELID, TG_NAME,
                  'community_deletion.enforce_community_kept_row_fence_row()'::regprocedure, 'nullify', false, false) THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = format('enforce_community_kept_row_fence_row() refused: it runs only as attach''s AFTER INSERT OR UPDATE row trigger on a registered partitioned nullify table, not as trigger %s on %s',
                             TG_NAME, TG_RELID::regclass);
    END IF;
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
$function$
;
-- +goose StatementEnd

SELECT community_deletion.community_deletion_seal_functions();
