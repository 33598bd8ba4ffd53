-- Closes the trust holes of issue 23's second round (docs/roles.md, "Code
-- that runs in the deletion's sessions"; docs/invariants.md).
--
-- * No SECURITY DEFINER function trusts its calling context. Every guard
--   trigger function checks that it runs as the migrations' own trigger of
--   its control table (community_deletion_guard_context()); the fences a
--   table's owner names in CREATE TRIGGER (the kept-row fences, the
--   TRUNCATE fence, the tenant table's trigger) check that they run as
--   attach's trigger of a registered table, with the transition tables
--   they read under their names (community_deletion_fence_context()), so
--   that no relation of the caller's (a temporary view named
--   community_fence_new) is ever read as the function's owner.
--   community_deletion_record_tenant_table() refuses a temporary table as
--   declare_tenant_table() does. The registry and references guards no
--   longer rely on the call stack, which is text a caller writes: they
--   check the row as attach, detach, declare_reference() and
--   drop_reference() would (the table's owner, the paths, what depends on
--   it), whoever inserts or deletes it.
-- * Code written by one role never gains the executor's rights. A trigger
--   or rule on a registered table that the deletion's statements fire
--   (DELETE on a 'delete' table, UPDATE on a 'nullify' one), or a
--   constraint, index or generated column a 'nullify' table's UPDATE
--   evaluates, that calls a function outside pg_catalog and this project
--   is drift (trigger_untrusted, rule_untrusted, expression_untrusted)
--   until the schema's owner declares it trusted in
--   community_deletion_trusted_code (append-only: who, when, why, and the
--   digest of the code trusted; a changed trigger or function is
--   untrusted again). community_deletion_untrusted_code() is what the
--   purge checks around each batch. Row-level security policies never run
--   in the deletion's sessions (row_security = off).
-- * Every admission decision reads the current state: a submission, an
--   approval, a protection event and the grace checks are refused at
--   REPEATABLE READ and SERIALIZABLE (25000), and a claim of a deletion an
--   abort can still undo, and the step to quiescing, are refused while the
--   community is deletion-protected (55000).
-- * Exclusions are history: community_deletion_exclusion_events records
--   each exclude_table() and include_table() (which now takes a reason)
--   and each registration that lifted one; community_deletion_excluded_tables
--   is now the view of the exclusions in force.
-- * A materialized view over tenant data (a registered table, the tenant
--   table, communities, or a view of them), and a foreign table with a
--   column named like a tenant key, is drift until dropped or excluded.
--
-- Down restores migration 00029's functions, lists and table of
-- exclusions (from the exclusions in force), and drops the history and the
-- declarations of trusted code.

-- +goose Up

-- +goose StatementBegin
-- Refuses (42501) unless a guard trigger function runs as the migrations'
-- own trigger: relation is the control table, in schema
-- community_deletion, whose entry in community_deletion_guard_triggers()
-- names fired_as and fn, and timed (the guard's TG_WHEN, TG_LEVEL and
-- TG_OP as it was written for) holds. Attached by anyone to a table of its
-- own, a guard does nothing as its owner.
CREATE FUNCTION community_deletion.community_deletion_guard_context(relation oid, fired_as name, timed boolean, fn text) RETURNS void
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
BEGIN
    IF timed IS NOT TRUE OR NOT EXISTS (
        SELECT 1
        FROM pg_class c
        JOIN community_deletion_guard_triggers() g ON g.table_name = c.relname::text
        WHERE c.oid = relation
          AND c.relnamespace = 'community_deletion'::regnamespace
          AND g.trigger_name = fired_as::text
          AND g.function_signature = fn) THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = format('%s refused: it runs only as the migrations'' guard trigger of a table of schema community_deletion, not as trigger %s on %s',
                             fn, fired_as, relation::regclass);
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Whether a fence trigger function runs as attach's own trigger: relation
-- is a registered table of purge_action, or a partition of one; its
-- trigger fired_as runs fn; and the trigger declares the transition
-- tables the function reads (community_fence_old when old_table,
-- community_fence_new when new_table) under those names, which an
-- unqualified name then resolves to before any relation.
CREATE FUNCTION community_deletion.community_deletion_fence_context(relation oid, fired_as name, fn regprocedure, purge_action text, old_table boolean, new_table boolean) RETURNS boolean
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
        SELECT EXISTS (
                   SELECT 1 FROM pg_trigger t
                   WHERE t.tgrelid = relation AND t.tgname = fired_as AND t.tgfoid = fn AND NOT t.tgisinternal
                     AND (NOT old_table OR t.tgoldtable = 'community_fence_old')
                     AND (NOT new_table OR t.tgnewtable = 'community_fence_new'))
           AND EXISTS (
                   SELECT 1
                   FROM community_scoped_tables r
                   JOIN pg_namespace n ON n.nspname = r.table_schema
                   JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = r.table_name
                   WHERE c.oid = coalesce(pg_partition_root(relation), relation)
                     AND r.purge_action = community_deletion_fence_context.purge_action)
    $$;
-- +goose StatementEnd

-- Exclusions are history, not state.
CREATE TABLE community_deletion.community_deletion_exclusion_events (
    sequence bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    table_schema name NOT NULL,
    table_name name NOT NULL,
    action text NOT NULL CHECK (action IN ('exclude', 'include')),
    reason text NOT NULL CHECK (btrim(reason) <> '' AND octet_length(reason) <= 1024),
    actor name NOT NULL DEFAULT session_user,
    recorded_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX community_deletion_exclusion_events_table_idx
    ON community_deletion.community_deletion_exclusion_events (table_schema, table_name, sequence);
COMMENT ON TABLE community_deletion.community_deletion_exclusion_events IS
    'Every exclusion of a table from the deletion and every lifting of one (exclude_table(), include_table(), a registration), with who, when and why. Append-only; a table''s newest event says whether it is excluded (community_deletion_excluded_tables).';

INSERT INTO community_deletion.community_deletion_exclusion_events (table_schema, table_name, action, reason, actor, recorded_at)
SELECT e.table_schema, e.table_name, 'exclude', e.reason, e.excluded_by, e.excluded_at
FROM community_deletion.community_deletion_excluded_tables e
ORDER BY e.excluded_at, e.table_schema, e.table_name;

DROP TABLE community_deletion.community_deletion_excluded_tables;

CREATE VIEW community_deletion.community_deletion_excluded_tables AS
    SELECT latest.table_schema, latest.table_name, latest.reason, latest.actor AS excluded_by,
           latest.recorded_at AS excluded_at, latest.sequence
    FROM (SELECT DISTINCT ON (e.table_schema, e.table_name) e.table_schema, e.table_name, e.action, e.reason,
                 e.actor, e.recorded_at, e.sequence
          FROM community_deletion.community_deletion_exclusion_events e
          ORDER BY e.table_schema, e.table_name, e.sequence DESC) latest
    WHERE latest.action OPERATOR(pg_catalog.=) 'exclude';
COMMENT ON VIEW community_deletion.community_deletion_excluded_tables IS
    'The exclusions in force: each table whose newest exclusion event excludes it, with that event''s reason, login and time.';

GRANT SELECT ON community_deletion.community_deletion_exclusion_events, community_deletion.community_deletion_excluded_tables
    TO community_deletion_serving, community_deletion_operator, community_deletion_executor;

-- +goose StatementBegin
-- Guards community_deletion_exclusion_events: append-only for every role,
-- the owner included (23000). An exclusion is of a permanent table (not a
-- partition), materialized view or foreign table of the service's schemas
-- that is not registered (22023), by its owner (42501); an inclusion
-- lifts an exclusion in force (22023), by the table's owner or, for a
-- table that is gone, the owner of schema community_deletion (42501). The
-- database records who and when.
CREATE FUNCTION community_deletion.enforce_community_deletion_exclusion_guard() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
DECLARE
    rel record;
    excluded boolean;
    subject text;
BEGIN
    IF TG_OP <> 'INSERT' THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('exclusion event %s refused: exclusions are history and never change; exclude_table() and include_table() append a new event', OLD.sequence);
    END IF;
    subject := format('%s of %I.%I', CASE NEW.action WHEN 'include' THEN 'inclusion' ELSE 'exclusion' END, NEW.table_schema, NEW.table_name);
    -- One event at a time, so that "is it excluded?" cannot race.
    PERFORM pg_advisory_xact_lock(hashtext('community_deletion_exclusion_events'));
    SELECT c.oid, c.relowner, c.relkind, c.relispartition, c.relpersistence, c.relnamespace INTO rel
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = NEW.table_schema AND c.relname = NEW.table_name;
    SELECT e.action = 'exclude' INTO excluded
    FROM community_deletion_exclusion_events e
    WHERE e.table_schema = NEW.table_schema AND e.table_name = NEW.table_name
    ORDER BY e.sequence DESC LIMIT 1;
    IF rel.oid IS NULL THEN
        IF NEW.action <> 'include'
           OR NOT pg_has_role(session_user, (SELECT n.nspowner FROM pg_namespace n WHERE n.nspname = 'community_deletion'), 'MEMBER') THEN
            RAISE EXCEPTION USING ERRCODE = '42501',
                MESSAGE = format('%s refused: there is no such relation; only the owner of schema community_deletion lifts the exclusion of a table that is gone', subject);
        END IF;
    ELSIF NOT pg_has_role(session_user, rel.relowner, 'MEMBER') THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = format('%s refused: only its owner (%s) may %s it', subject, pg_get_userbyid(rel.relowner), NEW.action);
    END IF;
    IF NEW.action = 'exclude' THEN
        IF rel.relpersistence = 't' OR NOT community_deletion_tenant_schema(rel.relnamespace)
           OR rel.relkind NOT IN ('r', 'p', 'm', 'f') OR rel.relispartition THEN
            RAISE EXCEPTION USING ERRCODE = '22023',
                MESSAGE = format('%s refused: only a permanent table (not a partition), materialized view or foreign table of a schema of the service is excluded', subject);
        END IF;
        IF EXISTS (SELECT 1 FROM community_scoped_tables r WHERE r.table_schema = NEW.table_schema AND r.table_name = NEW.table_name) THEN
            RAISE EXCEPTION USING ERRCODE = '22023',
                MESSAGE = format('%s refused: it is a registered tenant table; detach it first', subject);
        END IF;
    ELSIF excluded IS NOT TRUE THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('%s refused: it is not excluded', subject);
    END IF;
    NEW.actor := session_user;
    NEW.recorded_at := now();
    RETURN NEW;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER community_deletion_exclusion_events_guard
    BEFORE INSERT OR UPDATE OR DELETE ON community_deletion.community_deletion_exclusion_events
    FOR EACH ROW EXECUTE FUNCTION community_deletion.enforce_community_deletion_exclusion_guard();
CREATE TRIGGER community_deletion_exclusion_events_truncate_guard
    BEFORE TRUNCATE ON community_deletion.community_deletion_exclusion_events
    FOR EACH STATEMENT EXECUTE FUNCTION community_deletion.refuse_community_deletion_truncate();

-- +goose StatementBegin
-- Excludes target (a table, materialized view or foreign table that looks
-- like tenant data but is not the service's tenant data) from the
-- deletion, by its owner, with a reason: an exclusion event, which the
-- guard checks. Excluding it again records the new reason.
CREATE OR REPLACE FUNCTION community_deletion.exclude_table(target regclass, reason text) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
DECLARE
    rel record;
BEGIN
    SELECT c.relname, c.relowner, n.nspname INTO rel
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = target;
    IF rel.relname IS NULL OR NOT pg_has_role(session_user, rel.relowner, 'MEMBER') THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = format('exclusion of %s refused: only its owner (%s) may exclude it', target, pg_get_userbyid(rel.relowner));
    END IF;
    IF reason IS NULL OR btrim(reason) = '' OR octet_length(reason) > 1024 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('exclusion of %s refused: give a reason (at most 1024 bytes) why its rows outlive a tenant''s deletion', target);
    END IF;
    INSERT INTO community_deletion_exclusion_events (table_schema, table_name, action, reason)
    VALUES (rel.nspname, rel.relname, 'exclude', reason);
END
$$;
-- +goose StatementEnd

DROP FUNCTION community_deletion.include_table(regclass);

-- +goose StatementBegin
-- Lifts target's exclusion, by its owner, with a reason: an inclusion
-- event. From then on the drift report flags it again until it is
-- registered or excluded anew.
CREATE FUNCTION community_deletion.include_table(target regclass, reason text DEFAULT NULL) RETURNS void
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
DECLARE
    rel record;
BEGIN
    SELECT c.relname, c.relowner, n.nspname INTO rel
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = target;
    IF rel.relname IS NULL OR NOT pg_has_role(session_user, rel.relowner, 'MEMBER') THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = format('inclusion of %s refused: only its owner (%s) may lift its exclusion', target, pg_get_userbyid(rel.relowner));
    END IF;
    IF reason IS NULL OR btrim(reason) = '' OR octet_length(reason) > 1024 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('inclusion of %s refused: give a reason (at most 1024 bytes) why its rows are a tenant''s after all: community_deletion.include_table(%L, reason)', target, target::text);
    END IF;
    IF NOT EXISTS (SELECT 1 FROM community_deletion_excluded_tables e WHERE e.table_schema = rel.nspname AND e.table_name = rel.relname) THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = format('%s is not excluded', target);
    END IF;
    INSERT INTO community_deletion_exclusion_events (table_schema, table_name, action, reason)
    VALUES (rel.nspname, rel.relname, 'include', reason);
END
$$;
-- +goose StatementEnd


-- Code that runs in the deletion's sessions.
CREATE TABLE community_deletion.community_deletion_trusted_code (
    sequence bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    table_schema name NOT NULL,
    table_name name NOT NULL,
    kind text NOT NULL CHECK (kind IN ('trigger', 'rule', 'constraint', 'index', 'column')),
    object_name name NOT NULL,
    action text NOT NULL DEFAULT 'trust' CHECK (action IN ('trust', 'distrust')),
    digest text,
    reason text NOT NULL CHECK (btrim(reason) <> '' AND octet_length(reason) <= 1024),
    declared_by name NOT NULL DEFAULT session_user,
    declared_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX community_deletion_trusted_code_object_idx
    ON community_deletion.community_deletion_trusted_code (table_schema, table_name, kind, object_name, sequence);
COMMENT ON TABLE community_deletion.community_deletion_trusted_code IS
    'The deployment''s declarations that code on a registered table which the deletion''s statements run (a trigger, rule, constraint, index expression or generated column calling functions of its own) may run with the executor''s rights: what, the digest of the code declared, who, when and why. Append-only; written only by the schema''s owner; the newest row of an object counts while its digest matches.';
GRANT SELECT ON community_deletion.community_deletion_trusted_code
    TO community_deletion_serving, community_deletion_operator, community_deletion_executor;

-- +goose StatementBegin
-- The functions a catalog object calls that are neither PostgreSQL's own
-- (pg_catalog) nor this project's installed ones: those it depends on
-- directly, through an operator, or through a cast.
CREATE FUNCTION community_deletion.community_deletion_code_functions(object_class oid, object_id oid) RETURNS SETOF oid
    LANGUAGE sql STABLE
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
        SELECT f.oid
        FROM (SELECT d.refobjid AS oid FROM pg_depend d
              WHERE d.classid = object_class AND d.objid = object_id AND d.refclassid = 'pg_proc'::regclass
              UNION
              SELECT o.oprcode::oid FROM pg_depend d JOIN pg_operator o ON o.oid = d.refobjid
              WHERE d.classid = object_class AND d.objid = object_id AND d.refclassid = 'pg_operator'::regclass
              UNION
              SELECT k.castfunc FROM pg_depend d JOIN pg_cast k ON k.oid = d.refobjid
              WHERE d.classid = object_class AND d.objid = object_id AND d.refclassid = 'pg_cast'::regclass
                AND k.castfunc <> 0) f
        JOIN pg_proc p ON p.oid = f.oid
        WHERE p.pronamespace <> 'pg_catalog'::regnamespace
          AND p.oid NOT IN (SELECT to_regprocedure('community_deletion.' || s) FROM unnest(community_deletion_installed_functions()) s
                            WHERE to_regprocedure('community_deletion.' || s) IS NOT NULL)
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The code the deletion's statements on relation (a registered table or
-- a partition of one) would run: the triggers the purge's DELETE (of a
-- 'delete' table) or UPDATE (of a 'nullify' one; INSERT too when it is
-- partitioned, for rows that move) fires, the rules on those events, and
-- for a 'nullify' table the CHECK and exclusion constraints, index
-- expressions and predicates and generated columns the UPDATE evaluates.
-- kind is trigger, rule, constraint, index or column; calls lists the
-- functions of the object's own (community_deletion_code_functions()); a
-- rule is code however it is written. A trigger a partition has from its
-- partitioned table is the partitioned table's.
CREATE FUNCTION community_deletion.community_deletion_table_code(relation oid)
    RETURNS TABLE(relid oid, kind text, object_name name, object_class oid, object_id oid, calls oid[])
    LANGUAGE sql STABLE
    SET jit = off
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
        WITH registered AS (
            SELECT r.purge_action, root.relkind = 'p' AS partitioned
            FROM community_scoped_tables r
            JOIN pg_namespace n ON n.nspname = r.table_schema
            JOIN pg_class root ON root.relnamespace = n.oid AND root.relname = r.table_name
            WHERE root.oid = coalesce(pg_partition_root(relation), relation)
        ), objects AS (
            SELECT t.tgrelid AS relid, 'trigger'::text AS kind, t.tgname AS object_name,
                   'pg_trigger'::regclass::oid AS object_class, t.oid AS object_id
            FROM registered, pg_trigger t
            WHERE t.tgrelid = relation AND NOT t.tgisinternal AND t.tgparentid = 0
              AND CASE WHEN registered.purge_action = 'delete' THEN t.tgtype & 8 = 8
                       ELSE t.tgtype & 16 = 16 OR (registered.partitioned AND t.tgtype & 4 = 4) END
            UNION ALL
            SELECT w.ev_class, 'rule', w.rulename, 'pg_rewrite'::regclass::oid, w.oid
            FROM registered, pg_rewrite w
            WHERE w.ev_class = relation AND w.rulename <> '_RETURN'
              AND CASE WHEN registered.purge_action = 'delete' THEN w.ev_type = '4'
                       ELSE w.ev_type = '2' OR (registered.partitioned AND w.ev_type = '3') END
            UNION ALL
            SELECT k.conrelid, 'constraint', k.conname, 'pg_constraint'::regclass::oid, k.oid
            FROM registered, pg_constraint k
            WHERE registered.purge_action = 'nullify' AND k.conrelid = relation AND k.contype IN ('c', 'x') AND k.conislocal
            UNION ALL
            SELECT i.indrelid, 'index', ic.relname, 'pg_class'::regclass::oid, i.indexrelid
            FROM registered, pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid
            WHERE registered.purge_action = 'nullify' AND i.indrelid = relation
              AND (i.indexprs IS NOT NULL OR i.indpred IS NOT NULL)
              AND NOT EXISTS (SELECT 1 FROM pg_inherits h WHERE h.inhrelid = i.indexrelid)
            UNION ALL
            SELECT d.adrelid, 'column', a.attname, 'pg_attrdef'::regclass::oid, d.oid
            FROM registered, pg_attrdef d
            JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
            WHERE registered.purge_action = 'nullify' AND d.adrelid = relation AND a.attgenerated <> '' AND a.attislocal
        )
        SELECT o.relid, o.kind, o.object_name, o.object_class, o.object_id,
               coalesce(ARRAY(SELECT f FROM community_deletion_code_functions(o.object_class, o.object_id) f ORDER BY f), '{}')
        FROM objects o
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The digest of one object of relation that community_deletion_table_code()
-- lists (kind and name): its definition and, for each function it calls
-- of its own, that function's body, settings, security and owner
-- (community_deletion_function_digest()). NULL when there is none.
CREATE FUNCTION community_deletion.community_deletion_code_digest(relation oid, kind text, object_name name) RETURNS text
    LANGUAGE sql STABLE
    SET jit = off
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
        SELECT md5(concat_ws(E'\x1f', code.kind,
                             CASE code.kind
                                 WHEN 'trigger' THEN pg_get_triggerdef(code.object_id)
                                 WHEN 'rule' THEN pg_get_ruledef(code.object_id)
                                 WHEN 'constraint' THEN pg_get_constraintdef(code.object_id)
                                 WHEN 'index' THEN pg_get_indexdef(code.object_id)
                                 ELSE (SELECT pg_get_expr(d.adbin, d.adrelid) FROM pg_attrdef d WHERE d.oid = code.object_id)
                             END,
                             (SELECT string_agg(f::regprocedure::text || '=' || community_deletion_function_digest(f), E'\x1e' ORDER BY f)
                              FROM unnest(code.calls) f)))
        FROM community_deletion_table_code(relation) code
        WHERE code.kind = community_deletion_code_digest.kind AND code.object_name = community_deletion_code_digest.object_name
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The untrusted code of target (a registered table, its partitions
-- included): one drift row per trigger, rule or expression that the
-- deletion's statements would run and that calls code of its own, unless
-- the schema's owner declared it trusted at its current digest. The purge
-- checks a table's before and after each batch, under the batch's lock.
CREATE FUNCTION community_deletion.community_deletion_untrusted_code(target regclass) RETURNS TABLE(table_name text, problem text)
    LANGUAGE sql STABLE
    SET jit = off
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
        SELECT format('%I.%I', n.nspname, c.relname),
               format('%s_untrusted: %s %I on %I.%I %s, code that the deletion''s %s would run with the executor''s rights; drop it, or have the owner of schema community_deletion declare it trusted: INSERT INTO community_deletion.community_deletion_trusted_code (table_schema, table_name, kind, object_name, reason) VALUES (%L, %L, %L, %L, ''why'')',
                      CASE code.kind WHEN 'trigger' THEN 'trigger' WHEN 'rule' THEN 'rule' ELSE 'expression' END,
                      code.kind, code.object_name, n.nspname, c.relname,
                      CASE WHEN cardinality(code.calls) = 0 THEN 'rewrites the statement'
                           ELSE 'calls ' || (SELECT string_agg(format('%s (owned by %s)', p.oid::regprocedure, pg_get_userbyid(p.proowner)), ', ' ORDER BY p.oid)
                                             FROM pg_proc p WHERE p.oid = ANY (code.calls)) END,
                      CASE WHEN EXISTS (SELECT 1 FROM community_scoped_tables r
                                        JOIN pg_namespace rn ON rn.nspname = r.table_schema
                                        JOIN pg_class rc ON rc.relnamespace = rn.oid AND rc.relname = r.table_name
                                        WHERE rc.oid = coalesce(pg_partition_root(c.oid), c.oid) AND r.purge_action = 'delete')
                           THEN 'DELETE' ELSE 'UPDATE' END,
                      n.nspname, c.relname, code.kind, code.object_name)
        FROM (SELECT target::oid AS oid UNION SELECT tree.relid FROM pg_partition_tree(target) tree) member
        CROSS JOIN LATERAL community_deletion_table_code(member.oid) code
        JOIN pg_class c ON c.oid = code.relid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE (code.kind = 'rule' OR cardinality(code.calls) > 0)
          AND (SELECT t.action = 'trust' AND t.digest = community_deletion_code_digest(code.relid, code.kind, code.object_name)
               FROM community_deletion_trusted_code t
               WHERE t.table_schema = n.nspname AND t.table_name = c.relname
                 AND t.kind = code.kind AND t.object_name = code.object_name
               ORDER BY t.sequence DESC LIMIT 1) IS NOT TRUE
        ORDER BY 1, 2
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Guards community_deletion_trusted_code: append-only for every role, the
-- owner included (23000); only a member of the owner of schema
-- community_deletion declares (42501), of an object of a table that
-- community_deletion_table_code() lists (22023). The database records
-- the object's current digest, so the declaration covers exactly the
-- code there now, and who and when.
CREATE FUNCTION community_deletion.enforce_community_deletion_trusted_code_guard() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
DECLARE
    relation oid;
BEGIN
    IF TG_OP <> 'INSERT' THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('trusted code declaration %s refused: declarations are append-only; insert a new row (action distrust to withdraw one)', OLD.sequence);
    END IF;
    IF NOT pg_has_role(session_user, (SELECT n.nspowner FROM pg_namespace n WHERE n.nspname = 'community_deletion'), 'MEMBER') THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = format('declaration of %s %I on %I.%I as trusted refused: role %s is not the owner of schema community_deletion; only the deployment''s owner lets code run with the executor''s rights',
                             NEW.kind, NEW.object_name, NEW.table_schema, NEW.table_name, session_user);
    END IF;
    SELECT c.oid INTO relation FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = NEW.table_schema AND c.relname = NEW.table_name;
    NEW.digest := community_deletion_code_digest(relation, NEW.kind, NEW.object_name);
    IF NEW.digest IS NULL AND NEW.action = 'trust' THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('declaration of %s %I on %I.%I as trusted refused: the deletion''s statements run no such %s there (a registered table''s trigger or rule on the purge''s event, or a nullify table''s constraint, index or generated column)',
                             NEW.kind, NEW.object_name, NEW.table_schema, NEW.table_name, NEW.kind);
    END IF;
    NEW.declared_by := session_user;
    NEW.declared_at := now();
    RETURN NEW;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER community_deletion_trusted_code_guard
    BEFORE INSERT OR UPDATE OR DELETE ON community_deletion.community_deletion_trusted_code
    FOR EACH ROW EXECUTE FUNCTION community_deletion.enforce_community_deletion_trusted_code_guard();
CREATE TRIGGER community_deletion_trusted_code_truncate_guard
    BEFORE TRUNCATE ON community_deletion.community_deletion_trusted_code
    FOR EACH STATEMENT EXECUTE FUNCTION community_deletion.refuse_community_deletion_truncate();

-- +goose StatementBegin
-- Copies of tenant rows the deletion cannot purge: a materialized view
-- over communities, the tenant table, a registered table or a view of
-- them (to any depth), or with a column named like a tenant key; a
-- foreign table with such a column. Each is drift until dropped or
-- excluded (exclude_table()).
CREATE FUNCTION community_deletion.community_deletion_catalog_drift_of_copies() RETURNS TABLE(table_name text, problem text)
    LANGUAGE sql STABLE
    SET jit = off
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $_$
    WITH RECURSIVE tenant_data AS (
        SELECT 'community_deletion.communities'::regclass::oid AS oid
        UNION
        SELECT c.oid FROM community_deletion_tenant_table d
        JOIN pg_namespace n ON n.nspname = d.table_schema
        JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = d.table_name
        UNION
        SELECT tree.relid FROM community_scoped_tables r
        JOIN pg_namespace n ON n.nspname = r.table_schema
        JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = r.table_name
        CROSS JOIN LATERAL (SELECT c.oid AS relid UNION SELECT t.relid FROM pg_partition_tree(c.oid) t) tree
    ), derived AS (
        -- Views and materialized views reading tenant data, and those
        -- reading them.
        SELECT w.ev_class AS oid, d.refobjid AS source
        FROM pg_depend d JOIN pg_rewrite w ON w.oid = d.objid
        WHERE d.classid = 'pg_rewrite'::regclass AND d.refclassid = 'pg_class'::regclass
          AND d.refobjid IN (SELECT tenant_data.oid FROM tenant_data) AND w.ev_class <> d.refobjid
        UNION
        SELECT w.ev_class, derived.source
        FROM derived
        JOIN pg_depend d ON d.refclassid = 'pg_class'::regclass AND d.refobjid = derived.oid AND d.classid = 'pg_rewrite'::regclass
        JOIN pg_rewrite w ON w.oid = d.objid
        WHERE w.ev_class <> derived.oid
    ), key_names AS (
        SELECT 'community_id'::name AS name
        UNION
        SELECT r.tenant_key FROM community_scoped_tables r
        WHERE r.tenant_key IS NOT NULL
          AND NOT EXISTS (SELECT 1 FROM community_deletion_tenant_table d
                          WHERE d.table_schema = r.table_schema AND d.table_name = r.table_name)
    ), copies AS (
        SELECT c.oid, c.relkind, n.nspname, c.relname,
               (SELECT string_agg(DISTINCT format('%I.%I', sn.nspname, sc.relname), ', ')
                FROM derived JOIN pg_class sc ON sc.oid = derived.source JOIN pg_namespace sn ON sn.oid = sc.relnamespace
                WHERE derived.oid = c.oid) AS sources,
               (SELECT min(a.attname::text) FROM pg_attribute a JOIN key_names k ON k.name = a.attname
                WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped) AS key_column
        FROM pg_class c
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE c.relkind IN ('m', 'f')
          AND c.relpersistence <> 't'
          AND n.nspname NOT IN ('pg_catalog', 'information_schema')
          AND n.nspname !~ '^pg_(toast|temp_|toast_temp_)'
          AND NOT EXISTS (SELECT 1 FROM community_deletion_excluded_tables e
                          WHERE e.table_schema = n.nspname AND e.table_name = c.relname)
    )
    SELECT format('%I.%I', copies.nspname, copies.relname),
           CASE WHEN copies.relkind = 'm'
                THEN format('unregistered: materialized view %I.%I keeps a copy of %s, which no deletion purges; drop it, or exclude it with community_deletion.exclude_table(%L, reason) if it keeps no tenant''s rows',
                            copies.nspname, copies.relname,
                            coalesce('rows of ' || copies.sources, format('tenant rows (its %I column)', copies.key_column)),
                            format('%I.%I', copies.nspname, copies.relname))
                ELSE format('unregistered: foreign table %I.%I has a %I column, and the deletion cannot purge a foreign table; exclude it with community_deletion.exclude_table(%L, reason) if its rows are deleted where they live, or drop it',
                            copies.nspname, copies.relname, copies.key_column, format('%I.%I', copies.nspname, copies.relname)) END
    FROM copies
    WHERE (copies.relkind = 'm' AND (copies.sources IS NOT NULL OR copies.key_column IS NOT NULL))
       OR (copies.relkind = 'f' AND copies.key_column IS NOT NULL)
    ORDER BY 1, 2
    $_$;
-- +goose StatementEnd

GRANT EXECUTE ON FUNCTION community_deletion.community_deletion_code_functions(oid, oid),
                          community_deletion.community_deletion_table_code(oid),
                          community_deletion.community_deletion_code_digest(oid, text, name),
                          community_deletion.community_deletion_untrusted_code(regclass),
                          community_deletion.community_deletion_catalog_drift_of_copies()
    TO community_deletion_serving, community_deletion_operator, community_deletion_executor;


-- +goose StatementBegin
-- The fences a table's owner names in CREATE TRIGGER: each checks that it
-- runs as attach's trigger of a registered table (42501 otherwise).
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
-- As enforce_community_kept_row_fence(), row by row, for partitions
-- created after attach.
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

-- +goose StatementBegin
-- The TRUNCATE fence of a registered 'delete' table and its partitions.
CREATE OR REPLACE FUNCTION community_deletion.enforce_community_truncate_fence()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
AS $function$
BEGIN
    -- Only as attach's BEFORE TRUNCATE trigger on a registered 'delete'
    -- table or a partition of one.
    IF TG_WHEN <> 'BEFORE' OR TG_LEVEL <> 'STATEMENT' OR TG_OP <> 'TRUNCATE'
       OR NOT community_deletion_fence_context(TG_RELID, TG_NAME,
                  'community_deletion.enforce_community_truncate_fence()'::regprocedure, 'delete', false, false) THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = format('enforce_community_truncate_fence() refused: it runs only as attach''s BEFORE TRUNCATE trigger on a registered delete table, not as trigger %s on %s; drop the trigger, or attach the table',
                             TG_NAME, TG_RELID::regclass);
    END IF;
    IF EXISTS (SELECT 1 FROM communities c WHERE c.deletion_state IN ('quiescing', 'fenced')) THEN
        RAISE EXCEPTION USING ERRCODE = '55000',
            MESSAGE = format('TRUNCATE of %I.%I refused: a community is being deleted, and TRUNCATE would take its rows past the deletion; delete rows by community, or truncate once no deletion is under way',
                             TG_TABLE_SCHEMA, TG_TABLE_NAME),
            CONSTRAINT = 'community_write_fence';
    END IF;
    RETURN NULL;
END
$function$
;
-- +goose StatementEnd

-- +goose StatementBegin
-- The declared tenant table's BEFORE INSERT row trigger.
CREATE OR REPLACE FUNCTION community_deletion.enforce_community_tenant_created()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
AS $function$
DECLARE
    declared record;
    key text;
    tenant uuid;
    state text;
BEGIN
    SELECT d.table_schema, d.table_name, d.key_column INTO declared FROM community_deletion_tenant_table d;
    IF declared.table_name IS NULL OR TG_TABLE_SCHEMA <> declared.table_schema OR TG_TABLE_NAME <> declared.table_name
       OR TG_WHEN <> 'BEFORE' OR TG_LEVEL <> 'ROW' OR TG_OP <> 'INSERT'
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
$function$
;
-- +goose StatementEnd

-- +goose StatementBegin
-- Refuses a temporary table as declare_tenant_table() does: called
-- directly, it would otherwise make one the deployment's tenant table.
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_record_tenant_table(target regclass, key_column name, tenants text[])
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
AS $function$
DECLARE
    rel record;
    declared record;
    kind text;
BEGIN
    SELECT c.relname, c.relowner, n.nspname, c.relkind, c.relispartition, c.relpersistence, c.relnamespace INTO rel
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = target;
    IF rel.relname IS NULL OR NOT pg_has_role(session_user, rel.relowner, 'MEMBER') THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = format('declaration of %s as the tenant table refused: role %s does not own it', target, session_user);
    END IF;
    -- What declare_tenant_table() checks, checked again here: called
    -- directly, a login's own temporary table would otherwise become the
    -- deployment's one tenant table for good.
    IF rel.relpersistence = 't' OR NOT community_deletion_tenant_schema(rel.relnamespace) OR rel.relkind NOT IN ('r', 'p') OR rel.relispartition THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = format('declaration of %s as the tenant table refused: declare a permanent table (not a partition) of a schema of the service', target);
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
$function$
;
-- +goose StatementEnd

-- +goose StatementBegin
-- A registration lifts an exclusion by an inclusion event.
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_register_table(target regclass, purge_action text, tenant_key name)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
AS $function$
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
$function$
;
-- +goose StatementEnd

-- +goose StatementBegin
-- A registration lifts an exclusion by an inclusion event.
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_register_child_table(target regclass, spec jsonb)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
AS $function$
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
$function$
;
-- +goose StatementEnd

-- +goose StatementBegin
-- The communities guard; the step to quiescing is refused while the
-- community is deletion-protected (55000).
CREATE OR REPLACE FUNCTION community_deletion.enforce_community_tombstone()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
AS $function$
DECLARE
    request_stage text;
    request_generation bigint;
BEGIN
    PERFORM community_deletion.community_deletion_guard_context(TG_RELID, TG_NAME,
        TG_WHEN = 'BEFORE' AND TG_LEVEL = 'ROW', 'enforce_community_tombstone()');
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
        -- Protection is read again before anything is quiesced: a
        -- protection that raced the submission stops the deletion here.
        -- It locks this row FOR UPDATE, so it is either committed before
        -- this update locked the row (and read here, at READ COMMITTED),
        -- or it waits and then sees the open request.
        IF OLD.deletion_state = 'active' AND community_deletion_protection_state(OLD.id) IN ('set', 'clear_requested') THEN
            RAISE EXCEPTION USING ERRCODE = '55000',
                MESSAGE = format('community %s refused: it is deletion-protected, and nothing of a protected community is quiesced; abort its deletion request, or clear the protection (two operators)', OLD.id);
        END IF;
    END IF;
    RETURN NEW;
END
$function$
;
-- +goose StatementEnd

-- +goose StatementBegin
-- The requests guard; a submission is refused at REPEATABLE READ and
-- SERIALIZABLE (25000), and a claim of an approved or fenced deletion while
-- its community is deletion-protected (55000).
CREATE OR REPLACE FUNCTION community_deletion.enforce_community_deletion_request_guard()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
AS $function$
DECLARE
    community_state text;
    community_generation bigint;
    community_host text;
    action text;
BEGIN
    PERFORM community_deletion.community_deletion_guard_context(TG_RELID, TG_NAME,
        TG_WHEN = 'BEFORE' AND TG_LEVEL = 'ROW', 'enforce_community_deletion_request_guard()');
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('deletion request %s refused: deletion requests are permanent audit records', OLD.id);
    END IF;

    IF TG_OP = 'INSERT' THEN
        -- A submission is decided on the community's current state and
        -- protection: a snapshot older than the statement could miss both.
        IF current_setting('transaction_isolation') <> 'read committed' THEN
            RAISE EXCEPTION USING ERRCODE = '25000',
                MESSAGE = format('deletion request of community %s refused: isolation level %s pins a snapshot that cannot see the community''s current state and protection; submit at READ COMMITTED',
                                 NEW.community_id, current_setting('transaction_isolation'));
        END IF;
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
    ELSIF OLD.stage = 'inventoried' AND NEW.stage = 'inventoried'
          AND (NEW.inventory_digest, NEW.inventory_frozen_at)
              IS DISTINCT FROM (OLD.inventory_digest, OLD.inventory_frozen_at) THEN
        action := format('re-inventory of deletion request %s', OLD.id);
        PERFORM community_deletion_require_member(ARRAY['community_deletion_operator']::name[], action);
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
    -- The rest of what the executor records is its own too: the destructive
    -- storage manifest it verifies against, its retry and error record
    -- (which an operator only clears) and the schedule (an operator makes a
    -- request due now, never later). The fence generation and completion
    -- time are guarded below and by CHECKs.
    IF action IS NOT NULL
       AND ((NEW.destructive_storage_manifest, NEW.destructive_storage_frozen_at)
                IS DISTINCT FROM (OLD.destructive_storage_manifest, OLD.destructive_storage_frozen_at)
            OR (NEW.retry_stage IS NOT NULL AND NEW.retry_stage IS DISTINCT FROM OLD.retry_stage)
            OR (NEW.retry_count <> 0 AND NEW.retry_count <> OLD.retry_count)
            OR (NEW.last_error IS NOT NULL AND NEW.last_error IS DISTINCT FROM OLD.last_error)
            OR (NEW.last_error_at IS NOT NULL AND NEW.last_error_at IS DISTINCT FROM OLD.last_error_at)
            OR (NEW.next_attempt_at IS DISTINCT FROM OLD.next_attempt_at AND NEW.next_attempt_at <> now())) THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = format('%s refused: an operator never changes what the executor records (destructive storage manifest, retry and error record, schedule)', action);
    END IF;
    -- A claim (a new lease generation) of a deletion that an abort can
    -- still undo is refused while its community is deletion-protected: a
    -- protection that raced the submission stops it before anything is
    -- quiesced. Read after the row lock the claim holds, at READ COMMITTED.
    IF NEW.lease_generation > OLD.lease_generation AND NEW.stage IN ('approved', 'fenced') THEN
        IF current_setting('transaction_isolation') <> 'read committed' THEN
            RAISE EXCEPTION USING ERRCODE = '25000',
                MESSAGE = format('claim of deletion request %s refused: isolation level %s pins a snapshot that cannot see the community''s protection; claim at READ COMMITTED',
                                 OLD.id, current_setting('transaction_isolation'));
        END IF;
        IF community_deletion_protection_state(NEW.community_id) IN ('set', 'clear_requested') THEN
            RAISE EXCEPTION USING ERRCODE = '55000',
                MESSAGE = format('claim of deletion request %s refused: community %s is deletion-protected; abort the request, or clear the protection (two operators) and unblock it',
                                 OLD.id, NEW.community_id);
        END IF;
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
        -- A re-inventory replaces the whole frozen inventory of an unblocked,
        -- never approved inventoried request; once approved, the approval's
        -- digest binds it and only abort and resubmit can change it.
        IF NOT (OLD.stage = 'inventoried' AND NEW.stage = 'inventoried'
                AND OLD.blocked_at IS NULL AND NEW.blocked_at IS NULL
                AND NEW.schema_manifest IS NOT NULL AND NEW.storage_manifest IS NOT NULL
                AND NEW.inventory_manifest IS NOT NULL AND NEW.inventory_digest IS NOT NULL
                AND NEW.inventory_frozen_at IS NOT NULL
                AND NEW.inventory_frozen_at = now()
                AND NEW.inventory_frozen_at IS DISTINCT FROM OLD.inventory_frozen_at) THEN
            RAISE EXCEPTION USING ERRCODE = '23000',
                MESSAGE = format('deletion request %s refused: the frozen inventory is written once, by submitted -> inventoried, and replaced whole only by a re-inventory while inventoried and unblocked; otherwise abort the request and submit a new one', OLD.id);
        END IF;
        IF EXISTS (SELECT 1 FROM community_deletion_approvals approval WHERE approval.request_id = OLD.id) THEN
            RAISE EXCEPTION USING ERRCODE = '23000',
                MESSAGE = format('deletion request %s refused: the frozen inventory is written once, by submitted -> inventoried, and its approval binds it; abort the request and submit a new one', OLD.id);
        END IF;
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
$function$
;
-- +goose StatementEnd

-- +goose StatementBegin
-- The approvals guard; an approval is refused at REPEATABLE READ and
-- SERIALIZABLE (25000).
CREATE OR REPLACE FUNCTION community_deletion.enforce_community_deletion_approval_guard()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
AS $function$
DECLARE
    request community_deletion_requests%ROWTYPE;
BEGIN
    PERFORM community_deletion.community_deletion_guard_context(TG_RELID, TG_NAME,
        TG_WHEN = 'BEFORE' AND TG_LEVEL = 'ROW', 'enforce_community_deletion_approval_guard()');
    IF TG_OP <> 'INSERT' THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('deletion approval %s refused: approvals are immutable evidence', OLD.request_id);
    END IF;
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION USING ERRCODE = '25000',
            MESSAGE = format('deletion approval of request %s refused: isolation level %s pins a snapshot that cannot see the request''s current state; approve at READ COMMITTED',
                             NEW.request_id, current_setting('transaction_isolation'));
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
$function$
;
-- +goose StatementEnd

-- +goose StatementBegin
-- Stamps an approval's grace period; refused at REPEATABLE READ and
-- SERIALIZABLE (25000).
CREATE OR REPLACE FUNCTION community_deletion.enforce_community_deletion_grace_period()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
AS $function$
BEGIN
    PERFORM community_deletion.community_deletion_guard_context(TG_RELID, TG_NAME,
        TG_WHEN = 'BEFORE' AND TG_LEVEL = 'ROW' AND TG_OP = 'INSERT', 'enforce_community_deletion_grace_period()');
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION USING ERRCODE = '25000',
            MESSAGE = format('deletion approval of request %s refused: isolation level %s pins a snapshot that cannot see the current grace period setting; approve at READ COMMITTED',
                             NEW.request_id, current_setting('transaction_isolation'));
    END IF;
    NEW.grace_until := now() + coalesce(NEW.grace_period, community_deletion_default_grace_period());
    RETURN NEW;
END
$function$
;
-- +goose StatementEnd

-- +goose StatementBegin
-- Holds a community active during its deletion's grace period; refused at
-- REPEATABLE READ and SERIALIZABLE (25000).
CREATE OR REPLACE FUNCTION community_deletion.enforce_community_deletion_grace_fence()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
AS $function$
DECLARE
    ends timestamptz;
BEGIN
    PERFORM community_deletion.community_deletion_guard_context(TG_RELID, TG_NAME,
        TG_WHEN = 'BEFORE' AND TG_LEVEL = 'ROW' AND TG_OP = 'UPDATE', 'enforce_community_deletion_grace_fence()');
    IF OLD.deletion_state = 'active' AND NEW.deletion_state IS DISTINCT FROM OLD.deletion_state THEN
        IF current_setting('transaction_isolation') <> 'read committed' THEN
            RAISE EXCEPTION USING ERRCODE = '25000',
                MESSAGE = format('community %s refused: isolation level %s pins a snapshot that cannot see its deletion''s grace period',
                                 OLD.id, current_setting('transaction_isolation'));
        END IF;
        SELECT a.grace_until INTO ends
        FROM community_deletion_requests r
        JOIN community_deletion_approvals a ON a.request_id = r.id
        WHERE r.community_id = OLD.id AND r.stage <> 'aborted'
        ORDER BY a.grace_until DESC NULLS LAST
        LIMIT 1;
        IF ends > now() THEN
            RAISE EXCEPTION USING ERRCODE = '55000',
                MESSAGE = format('community %s refused: its deletion''s grace period ends at %s; nothing is quiesced or fenced before then',
                                 OLD.id, ends),
                HINT = 'Wait for the grace period to end, or abort the request to keep the community.';
        END IF;
    END IF;
    RETURN NEW;
END
$function$
;
-- +goose StatementEnd

-- +goose StatementBegin
-- The protection events guard; refused at REPEATABLE READ and
-- SERIALIZABLE (25000).
CREATE OR REPLACE FUNCTION community_deletion.enforce_community_deletion_protection_guard()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
AS $function$
DECLARE
    state text;
    pending community_deletion_protection_events%ROWTYPE;
BEGIN
    PERFORM community_deletion.community_deletion_guard_context(TG_RELID, TG_NAME,
        TG_WHEN = 'BEFORE' AND TG_LEVEL = 'ROW', 'enforce_community_deletion_protection_guard()');
    IF TG_OP <> 'INSERT' THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('deletion protection event %s refused: protection events are append-only audit records', OLD.sequence);
    END IF;
    PERFORM community_deletion_require_member(ARRAY['community_deletion_operator']::name[],
                                              format('deletion protection %s of community %s', NEW.action, NEW.community_id));
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION USING ERRCODE = '25000',
            MESSAGE = format('deletion protection %s of community %s refused: isolation level %s pins a snapshot that cannot see its open requests and protection; protect at READ COMMITTED',
                             NEW.action, NEW.community_id, current_setting('transaction_isolation'));
    END IF;
    -- Serialises with a submission (which locks the same row) and with
    -- other protection events of the community.
    PERFORM 1 FROM communities c WHERE c.id = NEW.community_id FOR UPDATE;
    state := community_deletion_protection_state(NEW.community_id);
    NEW.actor_role := session_user;
    NEW.recorded_at := now();
    IF NEW.action = 'set' THEN
        IF state IN ('set', 'clear_requested') THEN
            RAISE EXCEPTION USING ERRCODE = '55000',
                MESSAGE = format('deletion protection of community %s refused: it is already protected', NEW.community_id);
        END IF;
        IF EXISTS (SELECT 1 FROM community_deletion_requests r
                   WHERE r.community_id = NEW.community_id AND r.stage NOT IN ('aborted', 'retention_pending')) THEN
            RAISE EXCEPTION USING ERRCODE = '55000',
                MESSAGE = format('deletion protection of community %s refused: a deletion request is open; abort it first', NEW.community_id);
        END IF;
        RETURN NEW;
    END IF;
    IF NEW.action = 'clear_requested' THEN
        IF state IS DISTINCT FROM 'set' THEN
            RAISE EXCEPTION USING ERRCODE = '55000',
                MESSAGE = format('clearing the deletion protection of community %s refused: it is %s',
                                 NEW.community_id, CASE WHEN state = 'clear_requested' THEN 'already awaiting a second operator' ELSE 'not protected' END);
        END IF;
        RETURN NEW;
    END IF;
    -- 'cleared': a second operator approves a pending clear request.
    IF state IS DISTINCT FROM 'clear_requested' THEN
        RAISE EXCEPTION USING ERRCODE = '55000',
            MESSAGE = format('clearing the deletion protection of community %s refused: no clear request awaits approval', NEW.community_id);
    END IF;
    SELECT * INTO pending FROM community_deletion_protection_events e
    WHERE e.community_id = NEW.community_id ORDER BY e.sequence DESC LIMIT 1;
    IF lower(btrim(NEW.actor)) = lower(btrim(pending.actor)) THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('clearing the deletion protection of community %s refused: %s requested it and cannot also approve it',
                             NEW.community_id, pending.actor);
    END IF;
    IF NEW.actor_role = pending.actor_role AND NOT community_deletion_operators_share_role() THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('clearing the deletion protection of community %s refused: role %s requested it and cannot also approve it',
                             NEW.community_id, session_user);
    END IF;
    RETURN NEW;
END
$function$
;
-- +goose StatementEnd

-- +goose StatementBegin
-- Refuses the submission of a protected community; refused at REPEATABLE
-- READ and SERIALIZABLE (25000).
CREATE OR REPLACE FUNCTION community_deletion.enforce_community_deletion_protection_submit()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
AS $function$
DECLARE
    protected community_deletion_protection_events%ROWTYPE;
BEGIN
    PERFORM community_deletion.community_deletion_guard_context(TG_RELID, TG_NAME,
        TG_WHEN = 'BEFORE' AND TG_LEVEL = 'ROW' AND TG_OP = 'INSERT', 'enforce_community_deletion_protection_submit()');
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION USING ERRCODE = '25000',
            MESSAGE = format('deletion of community %s refused: isolation level %s pins a snapshot that cannot see its protection; submit at READ COMMITTED',
                             NEW.community_id, current_setting('transaction_isolation'));
    END IF;
    -- Serialises with a protection event of the same community, which locks
    -- the row FOR UPDATE; two submissions share the lock.
    PERFORM 1 FROM communities c WHERE c.id = NEW.community_id FOR SHARE;
    SELECT * INTO protected FROM community_deletion_protection_events e
    WHERE e.community_id = NEW.community_id ORDER BY e.sequence DESC LIMIT 1;
    IF protected.action IN ('set', 'clear_requested') THEN
        RAISE EXCEPTION USING ERRCODE = '55000',
            MESSAGE = format('deletion of community %s refused: it is deletion-protected (%s by %s at %s)',
                             NEW.community_id, protected.action, protected.actor, protected.recorded_at),
            HINT = 'Clear the protection first: one operator requests it, a second approves.';
    END IF;
    RETURN NEW;
END
$function$
;
-- +goose StatementEnd

-- +goose StatementBegin
-- The manifest keys guard, checking where it runs.
CREATE OR REPLACE FUNCTION community_deletion.enforce_community_deletion_manifest_key_guard()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
AS $function$
DECLARE
    request_stage text;
    frozen boolean;
BEGIN
    PERFORM community_deletion.community_deletion_guard_context(TG_RELID, TG_NAME,
        TG_WHEN = 'BEFORE' AND TG_LEVEL = 'ROW', 'enforce_community_deletion_manifest_key_guard()');
    SELECT r.stage, r.destructive_storage_manifest IS NOT NULL INTO request_stage, frozen
    FROM community_deletion_requests r
    WHERE r.id = CASE WHEN TG_OP = 'DELETE' THEN OLD.request_id ELSE NEW.request_id END
    FOR SHARE;

    IF TG_OP = 'INSERT' THEN
        IF request_stage IS DISTINCT FROM 'fenced' OR frozen IS NOT FALSE OR NEW.deleted_at IS NOT NULL THEN
            RAISE EXCEPTION USING ERRCODE = '23000',
                MESSAGE = format('manifest key chunk %s of request %s refused: chunks are appended only while fenced, before the destructive manifest freezes',
                                 NEW.chunk_no, NEW.request_id);
        END IF;
        RETURN NEW;
    END IF;

    IF TG_OP = 'DELETE' THEN
        IF frozen IS NOT FALSE AND request_stage NOT IN ('logically_verified', 'retention_pending') THEN
            RAISE EXCEPTION USING ERRCODE = '23000',
                MESSAGE = format('manifest key chunk %s of request %s refused: frozen chunks stay until the request is logically verified',
                                 OLD.chunk_no, OLD.request_id);
        END IF;
        RETURN OLD;
    END IF;

    IF (NEW.request_id, NEW.chunk_no, NEW.prefix, NEW.keys) IS DISTINCT FROM (OLD.request_id, OLD.chunk_no, OLD.prefix, OLD.keys) THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('manifest key chunk %s of request %s refused: a chunk''s keys never change', OLD.chunk_no, OLD.request_id);
    END IF;
    IF OLD.deleted_at IS NOT NULL THEN
        IF NEW.deleted_at IS DISTINCT FROM OLD.deleted_at THEN
            RAISE EXCEPTION USING ERRCODE = '23000',
                MESSAGE = format('manifest key chunk %s of request %s refused: deleted_at is stamped once', OLD.chunk_no, OLD.request_id);
        END IF;
    ELSIF NEW.deleted_at IS NOT NULL THEN
        IF request_stage IS DISTINCT FROM 'drained' OR frozen IS NOT TRUE THEN
            RAISE EXCEPTION USING ERRCODE = '23000',
                MESSAGE = format('manifest key chunk %s of request %s refused: chunks are stamped deleted only while drained', OLD.chunk_no, OLD.request_id);
        END IF;
        NEW.deleted_at := now();
    END IF;
    RETURN NEW;
END
$function$
;
-- +goose StatementEnd

-- +goose StatementBegin
-- The serving write leases guard, checking where it runs.
CREATE OR REPLACE FUNCTION community_deletion.enforce_community_serving_write_lease_guard()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
AS $function$
DECLARE
    community_state text;
    community_generation bigint;
BEGIN
    PERFORM community_deletion.community_deletion_guard_context(TG_RELID, TG_NAME,
        TG_WHEN = 'BEFORE' AND TG_LEVEL = 'ROW', 'enforce_community_serving_write_lease_guard()');
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
        -- Only while active: once quiescing, every lease runs out by its
        -- lease_until, so the fence waits at most for the longest lease.
        IF OLD.lease_until < clock_timestamp()
           OR community_state IS DISTINCT FROM 'active'
           OR community_generation IS DISTINCT FROM OLD.fence_generation THEN
            RAISE EXCEPTION USING ERRCODE = '55000',
                MESSAGE = format('community write refused: serving write lease %s is expired or its community %s is %s at fence generation %s; a lease is extended only while its community is active',
                                 OLD.id, OLD.community_id, coalesce(community_state, 'missing'), community_generation),
                CONSTRAINT = 'community_write_fence';
        END IF;
    END IF;
    RETURN NEW;
END
$function$
;
-- +goose StatementEnd

-- +goose StatementBegin
-- The checkpoints guard, checking where it runs.
CREATE OR REPLACE FUNCTION community_deletion.enforce_community_deletion_checkpoint_guard()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
AS $function$
BEGIN
    PERFORM community_deletion.community_deletion_guard_context(TG_RELID, TG_NAME,
        TG_WHEN = 'BEFORE' AND TG_LEVEL = 'ROW', 'enforce_community_deletion_checkpoint_guard()');
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
$function$
;
-- +goose StatementEnd

-- +goose StatementBegin
-- The settings guard, checking where it runs.
CREATE OR REPLACE FUNCTION community_deletion.enforce_community_deletion_settings_guard()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
AS $function$
BEGIN
    PERFORM community_deletion.community_deletion_guard_context(TG_RELID, TG_NAME,
        TG_WHEN = 'BEFORE' AND TG_LEVEL = 'ROW', 'enforce_community_deletion_settings_guard()');
    IF TG_OP <> 'INSERT' THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('deletion setting %s refused: settings are append-only; insert a new row', OLD.sequence);
    END IF;
    NEW.changed_by := session_user;
    NEW.changed_at := now();
    RETURN NEW;
END
$function$
;
-- +goose StatementEnd

-- +goose StatementBegin
-- A completion needs its receipt; checking where it runs.
CREATE OR REPLACE FUNCTION community_deletion.enforce_community_deletion_receipt_required()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
AS $function$
BEGIN
    PERFORM community_deletion.community_deletion_guard_context(TG_RELID, TG_NAME,
        TG_WHEN = 'AFTER' AND TG_LEVEL = 'ROW' AND TG_OP = 'UPDATE', 'enforce_community_deletion_receipt_required()');
    IF OLD.stage IS DISTINCT FROM 'retention_pending' AND NEW.stage = 'retention_pending'
       AND NOT EXISTS (SELECT 1 FROM community_deletion_receipts r WHERE r.request_id = NEW.id) THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('completion of deletion %s refused: it has no receipt; write the receipt in the transaction that completes the deletion', NEW.id);
    END IF;
    RETURN NULL;
END
$function$
;
-- +goose StatementEnd

-- +goose StatementBegin
-- The storage layout guard, checking where it runs.
CREATE OR REPLACE FUNCTION community_deletion.enforce_community_deletion_storage_layout_guard()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
AS $function$
DECLARE
    parts text[];
    key_type oid;
    placeholder constant text := '{tenant}';
    occurrences integer;
    before text;
    after text;
    declared boolean;
    subject text;
BEGIN
    PERFORM community_deletion.community_deletion_guard_context(TG_RELID, TG_NAME,
        TG_WHEN = 'BEFORE' AND TG_LEVEL = 'ROW', 'enforce_community_deletion_storage_layout_guard()');
    IF TG_OP <> 'INSERT' THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('storage layout row %s refused: the layout is append-only; retire a template by inserting it again with action ''retire''', OLD.sequence);
    END IF;
    IF NEW.kind IS NULL OR NEW.kind NOT IN ('objects', 'cache', 'object_keys', 'sequence') THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('storage layout kind %L refused: write ''objects'' for object-store prefixes, ''object_keys'' for object keys listed in a column of a registered table, ''cache'' for cache key patterns or ''sequence'' for per-tenant sequences', NEW.kind);
    END IF;
    IF NEW.action IS NULL OR NEW.action NOT IN ('declare', 'retire') THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('storage layout action %L refused: write ''declare'' or ''retire''', NEW.action);
    END IF;
    subject := format('%s template %L', NEW.kind, NEW.template);
    IF NEW.reason IS NULL OR btrim(NEW.reason) = '' THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('%s refused: give a reason (what the service keeps there, or why it is retired)', subject);
    END IF;

    -- One declaration or retirement at a time, so that "is it declared?"
    -- below cannot race another transaction's insert.
    PERFORM pg_advisory_xact_lock(hashtext('community_deletion_storage_layout'));
    SELECT latest.action = 'declare' INTO declared
    FROM community_deletion_storage_layout latest
    WHERE latest.kind = NEW.kind AND latest.template = NEW.template
    ORDER BY latest.sequence DESC
    LIMIT 1;
    IF NEW.action = 'retire' THEN
        IF declared IS NOT TRUE THEN
            RAISE EXCEPTION USING ERRCODE = '22023',
                MESSAGE = format('retirement of %s refused: it is not declared; retire a template exactly as it was declared', subject);
        END IF;
        NEW.declared_by := session_user;
        NEW.declared_at := now();
        RETURN NEW;
    END IF;
    IF declared IS TRUE THEN
        RAISE EXCEPTION USING ERRCODE = '23505',
            MESSAGE = format('declaration of %s refused: it is already declared; nothing to do', subject);
    END IF;

    IF NEW.template IS NULL OR octet_length(NEW.template) > 1024 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('%s refused: a template is 1 to 1024 bytes, for example ''uploads/{tenant}/''', subject);
    END IF;
    IF NEW.kind = 'object_keys' THEN
        -- schema.table.column of a registered 'delete' table whose text
        -- column lists object keys: the inventory freezes the keys of the
        -- tenant's rows, and the executor deletes exactly those.
        BEGIN
            parts := parse_ident(NEW.template);
        EXCEPTION WHEN invalid_parameter_value THEN
            parts := NULL;
        END;
        IF cardinality(parts) IS DISTINCT FROM 3 THEN
            RAISE EXCEPTION USING ERRCODE = '22023',
                MESSAGE = format('%s refused: name the column that lists object keys as schema.table.column, as in ''public.active_storage_blobs.key''', subject);
        END IF;
        IF NOT EXISTS (SELECT 1 FROM community_scoped_tables r
                       WHERE r.table_schema = parts[1] AND r.table_name = parts[2] AND r.purge_action = 'delete') THEN
            RAISE EXCEPTION USING ERRCODE = '22023',
                MESSAGE = format('%s refused: %I.%I is not a registered ''delete'' table; attach it first (by its tenant key, or through its parents or the rows that reference it), so that its rows are a tenant''s',
                                 subject, parts[1], parts[2]);
        END IF;
        SELECT a.atttypid INTO key_type
        FROM pg_attribute a
        JOIN pg_class c ON c.oid = a.attrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = parts[1] AND c.relname = parts[2] AND a.attname = parts[3] AND a.attnum > 0 AND NOT a.attisdropped;
        IF key_type IS NULL OR key_type NOT IN ('pg_catalog.text'::regtype, 'pg_catalog.varchar'::regtype) THEN
            RAISE EXCEPTION USING ERRCODE = '22023',
                MESSAGE = format('%s refused: %I.%I has no text or varchar column %I', subject, parts[1], parts[2], parts[3]);
        END IF;
        IF NOT has_column_privilege('community_deletion_operator', format('%I.%I', parts[1], parts[2]), parts[3], 'SELECT')
           OR NOT has_column_privilege('community_deletion_executor', format('%I.%I', parts[1], parts[2]), parts[3], 'SELECT') THEN
            RAISE EXCEPTION USING ERRCODE = '42501',
                MESSAGE = format('%s refused: the inventory and the executor read the keys: GRANT SELECT (%I) ON %I.%I TO community_deletion_operator, community_deletion_executor first',
                                 subject, parts[3], parts[1], parts[2]);
        END IF;
        NEW.declared_by := session_user;
        NEW.declared_at := now();
        RETURN NEW;
    END IF;
    occurrences := (length(NEW.template) - length(replace(NEW.template, placeholder, ''))) / length(placeholder);
    IF occurrences <> 1 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('%s refused: it names {tenant} %s times, not once; write one {tenant}, as in %L',
                             subject, occurrences, CASE NEW.kind WHEN 'objects' THEN 'uploads/{tenant}/' ELSE 'ws:{tenant}:*' END);
    END IF;
    IF strpos(replace(NEW.template, placeholder, ''), '{') > 0 OR strpos(replace(NEW.template, placeholder, ''), '}') > 0 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('%s refused: {tenant} is the only placeholder and no other brace may appear; write the rest literally', subject);
    END IF;
    before := split_part(NEW.template, placeholder, 1);
    after := split_part(NEW.template, placeholder, 2);

    IF NEW.kind = 'sequence' THEN
        -- schema.name, {tenant} in the name: the tenant's own sequence,
        -- named exactly so, which the deletion drops.
        parts := community_deletion_tenant_object_parts(NEW.template);
        IF parts IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = '22023',
                MESSAGE = format('%s refused: name the per-tenant sequence as schema.name with {tenant} in the name, as in ''public.conv_dpid_seq_{tenant}''', subject);
        END IF;
        IF NOT coalesce(community_deletion_tenant_schema(to_regnamespace(quote_ident(parts[1]))::oid), false) THEN
            RAISE EXCEPTION USING ERRCODE = '22023',
                MESSAGE = format('%s refused: schema %I is not a schema of the service', subject, parts[1]);
        END IF;
        NEW.declared_by := session_user;
        NEW.declared_at := now();
        RETURN NEW;
    END IF;

    IF NEW.kind = 'objects' THEN
        -- An object prefix is listed literally: a wildcard character in it
        -- is a mistake, never a pattern.
        IF NEW.template ~ '[*?\[\]\\]' THEN
            RAISE EXCEPTION USING ERRCODE = '23514',
                MESSAGE = format('%s refused: an object prefix is literal and has no wildcards; write the prefix the service writes, as in ''uploads/{tenant}/''', subject);
        END IF;
        IF left(after, 1) <> '/' THEN
            RAISE EXCEPTION USING ERRCODE = '23514',
                MESSAGE = format('%s refused: {tenant} must be followed by "/", or it also covers every tenant whose id it starts; write %L',
                                 subject, before || placeholder || '/' || after);
        END IF;
        IF right(after, 1) <> '/' THEN
            RAISE EXCEPTION USING ERRCODE = '23514',
                MESSAGE = format('%s refused: an object prefix ends in "/"; write %L', subject, NEW.template || '/');
        END IF;
        IF EXISTS (SELECT 1 FROM community_deletion_storage_layout other
                   WHERE other.kind = 'objects' AND other.action = 'declare'
                     AND (starts_with(other.template, NEW.template) OR starts_with(NEW.template, other.template))
                     AND NOT EXISTS (SELECT 1 FROM community_deletion_storage_layout later
                                     WHERE later.kind = other.kind AND later.template = other.template
                                       AND later.sequence > other.sequence)) THEN
            RAISE EXCEPTION USING ERRCODE = '23514',
                MESSAGE = format('%s refused: it nests in or contains a declared objects template; declare only the outer prefix', subject);
        END IF;
    ELSE
        IF before ~ '[*?\[\]\\]' THEN
            RAISE EXCEPTION USING ERRCODE = '23514',
                MESSAGE = format('%s refused: a glob character before {tenant} matches other tenants'' keys; write the literal key prefix, as in ''ws:{tenant}:*''', subject);
        END IF;
        -- A pattern may end at {tenant}: it then names one key exactly
        -- ('presence::{tenant}'), which no other tenant's key matches.
        IF left(after, 1) ~ '[[:alnum:]_*?\[\]\\-]' THEN
            RAISE EXCEPTION USING ERRCODE = '23514',
                MESSAGE = format('%s refused: {tenant} must be followed by a literal delimiter, or it also matches every tenant whose id it starts; write %L',
                                 subject, before || placeholder || ':' || CASE WHEN after = '' THEN '*' ELSE after END);
        END IF;
    END IF;
    NEW.declared_by := session_user;
    NEW.declared_at := now();
    RETURN NEW;
END
$function$
;
-- +goose StatementEnd

-- +goose StatementBegin
-- Arms the fence marker; checking where it runs.
CREATE OR REPLACE FUNCTION community_deletion.enforce_community_fence_marker_arm()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
AS $function$
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
$function$
;
-- +goose StatementEnd

-- +goose StatementBegin
-- The registry guard: checks where it runs, and the row as attach and
-- detach would, whoever the caller.
CREATE OR REPLACE FUNCTION community_deletion.enforce_community_scoped_table_guard()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
AS $function$
DECLARE
    stack text;
    target oid;
    column_type regtype;
    column_not_null boolean;
    args text[];
    owner oid;
    dependent text;
BEGIN
    PERFORM community_deletion.community_deletion_guard_context(TG_RELID, TG_NAME,
        TG_WHEN = 'BEFORE' AND TG_LEVEL = 'ROW', 'enforce_community_scoped_table_guard()');
    IF TG_OP = 'UPDATE' THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('registration of %s refused: a registration never changes; detach and attach the table again', OLD.table_name);
    END IF;
    GET DIAGNOSTICS stack = PG_CONTEXT;
    IF stack !~ E'\nPL/pgSQL function community_deletion_(un)?register_(child_)?table\\((regclass,text,name|name,name|regclass,jsonb)\\) line [0-9]+ at SQL statement' THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = 'community_scoped_tables refused: tenant tables are registered only by attach_community_write_fence() or attach_child_table() and unregistered only by detach_community_write_fence()';
    END IF;
    -- The stack names a function as its search_path showed it when it was
    -- compiled: any other function of these names could be the caller.
    IF EXISTS (SELECT 1 FROM pg_proc p
               WHERE p.proname ~ '^community_deletion_(un)?register_(child_)?table$'
                 AND p.oid NOT IN ('community_deletion_register_table(regclass,text,name)'::regprocedure,
                                   'community_deletion_unregister_table(name,name)'::regprocedure,
                                   'community_deletion_register_child_table(regclass,jsonb)'::regprocedure)) THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = 'community_scoped_tables refused: tenant tables are registered only by attach_community_write_fence() or attach_child_table() and unregistered only by detach_community_write_fence(), and another function has one of their names; drop it';
    END IF;
    -- The call stack is text its caller writes (a comment in a statement
    -- shows in it): what follows holds whoever the caller is. A row is
    -- registered or removed only as attach and detach would: by the
    -- table's owner, for a table that can be registered, with the paths
    -- its references give it, and never while something depends on it.
    IF TG_OP = 'DELETE' THEN
        SELECT c.relowner INTO owner FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = OLD.table_schema AND c.relname = OLD.table_name AND c.relkind IN ('r', 'p');
        IF NOT pg_has_role(session_user, coalesce(owner, (SELECT n.nspowner FROM pg_namespace n WHERE n.nspname = 'community_deletion')), 'MEMBER') THEN
            RAISE EXCEPTION USING ERRCODE = '42501',
                MESSAGE = format('unregistration of %I.%I refused: role %s does not own it', OLD.table_schema, OLD.table_name, session_user);
        END IF;
        IF EXISTS (SELECT 1 FROM community_deletion_requests r
                   WHERE r.stage IN ('approved', 'fenced', 'drained', 'bindings_removed')) THEN
            RAISE EXCEPTION USING ERRCODE = '55000',
                MESSAGE = format('unregistration of %s refused: a deletion is in flight and its approval covers this table', OLD.table_name);
        END IF;
        SELECT string_agg(format('%I.%I', r.table_schema, r.table_name), ', ' ORDER BY r.table_schema, r.table_name) INTO dependent
        FROM community_scoped_tables r
        WHERE r.parents IS NOT NULL
          AND (r.table_schema, r.table_name) IS DISTINCT FROM (OLD.table_schema, OLD.table_name)
          AND EXISTS (SELECT 1 FROM jsonb_array_elements(r.parents) p, jsonb_array_elements(p.value -> 'hops') h
                      WHERE h.value ->> 'schema' = OLD.table_schema AND h.value ->> 'table' = OLD.table_name);
        IF dependent IS NOT NULL THEN
            RAISE EXCEPTION USING ERRCODE = '55000',
                MESSAGE = format('unregistration of %I.%I refused: %s is attached through it; detach that first', OLD.table_schema, OLD.table_name, dependent);
        END IF;
        RETURN OLD;
    END IF;

    SELECT c.oid, c.relowner INTO target, owner FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE c.relname = NEW.table_name AND n.nspname = NEW.table_schema
      AND c.relkind IN ('r', 'p') AND NOT c.relispartition AND c.relpersistence <> 't'
      AND community_deletion_tenant_schema(c.relnamespace);
    IF target IS NOT NULL AND NOT pg_has_role(session_user, owner, 'MEMBER') THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = format('registration of %I.%I refused: role %s does not own it', NEW.table_schema, NEW.table_name, session_user);
    END IF;
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
        args := community_deletion_expected_fence_args(target, NEW.purge_action, NEW.tenant_key, NEW.key_kind, NULL);
    ELSE
        IF target IS NULL OR NEW.purge_action <> 'delete' OR NEW.key_kind IS DISTINCT FROM community_deletion_tenant_key_kind() THEN
            RAISE EXCEPTION USING ERRCODE = '23000',
                MESSAGE = format('registration of %s refused: a table attached through its parents is a ''delete'' table of the tenant key''s kind', NEW.table_name);
        END IF;
        IF community_deletion_child_paths(target, coalesce(community_deletion_first_steps(NEW.parents, false), '{}'),
                                          community_deletion_first_steps(NEW.parents, true))
           IS DISTINCT FROM jsonb_build_object('kind', NEW.key_kind, 'paths', NEW.parents) THEN
            RAISE EXCEPTION USING ERRCODE = '42501',
                MESSAGE = format('registration of %s refused: its paths are not those of its references to registered tables', NEW.table_name);
        END IF;
        args := community_deletion_expected_fence_args(target, 'delete', NULL, NEW.key_kind, NEW.parents);
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
$function$
;
-- +goose StatementEnd

-- +goose StatementBegin
-- The declared references guard: checks the row as declare_reference()
-- and drop_reference() would, whoever the caller.
CREATE OR REPLACE FUNCTION community_deletion.enforce_community_deletion_reference_guard()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
AS $function$
DECLARE
    stack text;
    child_rel record;
    parent_rel record;
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
    -- The stack names a function as its search_path showed it when it was
    -- compiled: any other function of these names could be the caller.
    IF EXISTS (SELECT 1 FROM pg_proc p
               WHERE p.proname IN ('declare_reference', 'drop_reference')
                 AND p.oid NOT IN ('declare_reference(regclass,name[],regclass,name[],text)'::regprocedure,
                                   'drop_reference(regclass,name[])'::regprocedure)) THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = 'community_deletion_references refused: references are declared only by community_deletion.declare_reference() and dropped only by community_deletion.drop_reference(), and another function has one of their names; drop it';
    END IF;
    -- The call stack is text its caller writes (a comment in a statement
    -- shows in it): what follows holds whoever the caller is. Only the
    -- child's owner declares or drops a reference, between permanent
    -- tables of the service's schemas, and never one a registered table is
    -- attached through.
    SELECT c.relowner, c.relkind, c.relpersistence, c.relnamespace INTO child_rel
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = CASE TG_OP WHEN 'DELETE' THEN OLD.child_schema ELSE NEW.child_schema END
      AND c.relname = CASE TG_OP WHEN 'DELETE' THEN OLD.child_table ELSE NEW.child_table END
      AND c.relkind IN ('r', 'p');
    IF NOT pg_has_role(session_user, coalesce(child_rel.relowner, (SELECT n.nspowner FROM pg_namespace n WHERE n.nspname = 'community_deletion')), 'MEMBER')
       OR (TG_OP = 'INSERT' AND child_rel.relowner IS NULL) THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = format('community_deletion_references refused: role %s does not own the referencing table', session_user);
    END IF;
    IF TG_OP = 'DELETE' THEN
        IF EXISTS (SELECT 1 FROM community_scoped_tables r
                   WHERE r.table_schema = OLD.child_schema AND r.table_name = OLD.child_table AND r.parents IS NOT NULL
                     AND EXISTS (SELECT 1 FROM jsonb_array_elements(r.parents) p
                                 WHERE p.value -> 'hops' -> 0 -> 'columns' = to_jsonb(OLD.child_columns::text[]))) THEN
            RAISE EXCEPTION USING ERRCODE = '55000',
                MESSAGE = format('drop of the reference from %I.%I (%s) refused: %I.%I is attached through it; detach it first',
                                 OLD.child_schema, OLD.child_table, array_to_string(OLD.child_columns, ', '), OLD.child_schema, OLD.child_table);
        END IF;
        RETURN OLD;
    END IF;
    SELECT c.relkind, c.relpersistence, c.relnamespace, c.relispartition INTO parent_rel
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = NEW.parent_schema AND c.relname = NEW.parent_table AND c.relkind IN ('r', 'p');
    IF child_rel.relpersistence = 't' OR parent_rel.relkind IS NULL OR parent_rel.relpersistence = 't' OR parent_rel.relispartition
       OR NOT community_deletion_tenant_schema(child_rel.relnamespace) OR NOT community_deletion_tenant_schema(parent_rel.relnamespace) THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('reference from %I.%I to %I.%I refused: both must be permanent tables (not partitions) of schemas of the service',
                             NEW.child_schema, NEW.child_table, NEW.parent_schema, NEW.parent_table);
    END IF;
    NEW.declared_by := session_user;
    NEW.declared_at := now();
    RETURN NEW;
END
$function$
;
-- +goose StatementEnd

-- +goose StatementBegin
-- The catalog drift report: migration 00029's, with copies of tenant rows
-- and untrusted code; the marker's rows are judged under its lock, as
-- 00029 judges them.
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_catalog_drift()
 RETURNS TABLE(table_name text, problem text)
 LANGUAGE plpgsql
 SET jit TO 'off'
 SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
 SET lock_timeout TO '5s'
AS $function$
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
$function$
;
-- +goose StatementEnd

-- +goose StatementBegin
-- The control tables' guard triggers.
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_guard_triggers()
 RETURNS TABLE(table_name text, trigger_name text, function_signature text)
 LANGUAGE sql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
AS $function$
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
            ('communities', 'communities_tenant_key_guard', 'enforce_community_tenant_key_guard()'),
            ('community_deletion_requests', 'community_deletion_requests_tenant_key_guard', 'enforce_community_tenant_key_guard()'),
            ('community_deletion_references', 'community_deletion_references_guard', 'enforce_community_deletion_reference_guard()'),
            ('community_deletion_references', 'community_deletion_references_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('communities', 'communities_tenant_objects_proof', 'enforce_community_tenant_objects_proof()'),
            ('community_deletion_receipt_keys', 'community_deletion_receipt_keys_guard', 'enforce_community_deletion_receipt_key_guard()'),
            ('community_deletion_receipt_keys', 'community_deletion_receipt_keys_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('communities', 'communities_fence_marker_arm', 'enforce_community_fence_marker_arm()'),
            ('community_deletion_exclusion_events', 'community_deletion_exclusion_events_guard', 'enforce_community_deletion_exclusion_guard()'),
            ('community_deletion_exclusion_events', 'community_deletion_exclusion_events_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('community_deletion_trusted_code', 'community_deletion_trusted_code_guard', 'enforce_community_deletion_trusted_code_guard()'),
            ('community_deletion_trusted_code', 'community_deletion_trusted_code_truncate_guard', 'refuse_community_deletion_truncate()')
    $function$
;
-- +goose StatementEnd

-- +goose StatementBegin
-- The control tables.
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_control_table(table_name text)
 RETURNS boolean
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
 SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
AS $function$
        SELECT coalesce(table_name = ANY (ARRAY[
            'communities',
            'community_deletion_approvals',
            'community_deletion_checkpoints',
            'community_deletion_created_roles',
            'community_deletion_excluded_tables',
            'community_deletion_exclusion_events',
            'community_deletion_executor_heartbeats',
            'community_deletion_function_digests',
            'community_deletion_manifest_keys',
            'community_deletion_protection_events',
            'community_deletion_purge_progress',
            'community_deletion_receipt_keys',
            'community_deletion_receipts',
            'community_deletion_references',
            'community_deletion_requests',
            'community_deletion_settings',
            'community_deletion_step_authorizations',
            'community_deletion_storage_layout',
            'community_deletion_tenant_table',
            'community_deletion_trusted_code',
            'community_scoped_tables',
            'community_serving_write_leases',
            'storage_taxonomy_sweeps']), false)
    $function$
;
-- +goose StatementEnd

-- +goose StatementBegin
-- Every function the migrations installed.
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_installed_functions()
 RETURNS text[]
 LANGUAGE sql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
AS $function$
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
    $function$
;
-- +goose StatementEnd

-- +goose StatementBegin
-- Seals the installed functions: include_table() now takes a reason.
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_seal_functions()
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
AS $function$
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
$function$
;
-- +goose StatementEnd

SELECT community_deletion.community_deletion_seal_functions();
-- +goose Down
-- The exclusions in force, kept as migration 00029's table holds them.
CREATE TEMPORARY TABLE community_deletion_excluded_restore ON COMMIT DROP AS
    SELECT e.table_schema, e.table_name, e.reason, e.excluded_by, e.excluded_at
    FROM community_deletion.community_deletion_excluded_tables e;

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

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.enforce_community_truncate_fence()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
AS $function$
BEGIN
    IF EXISTS (SELECT 1 FROM communities c WHERE c.deletion_state IN ('quiescing', 'fenced')) THEN
        RAISE EXCEPTION USING ERRCODE = '55000',
            MESSAGE = format('TRUNCATE of %I.%I refused: a community is being deleted, and TRUNCATE would take its rows past the deletion; delete rows by community, or truncate once no deletion is under way',
                             TG_TABLE_SCHEMA, TG_TABLE_NAME),
            CONSTRAINT = 'community_write_fence';
    END IF;
    RETURN NULL;
END
$function$
;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.enforce_community_tenant_created()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
AS $function$
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
$function$
;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_record_tenant_table(target regclass, key_column name, tenants text[])
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
AS $function$
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
$function$
;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_register_table(target regclass, purge_action text, tenant_key name)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
AS $function$
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
$function$
;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_register_child_table(target regclass, spec jsonb)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
AS $function$
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
    DELETE FROM community_deletion_excluded_tables e
    WHERE e.table_schema = rel.nspname AND e.table_name = rel.relname;
END
$function$
;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.enforce_community_tombstone()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
AS $function$
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
$function$
;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.enforce_community_deletion_request_guard()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
AS $function$
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
    ELSIF OLD.stage = 'inventoried' AND NEW.stage = 'inventoried'
          AND (NEW.inventory_digest, NEW.inventory_frozen_at)
              IS DISTINCT FROM (OLD.inventory_digest, OLD.inventory_frozen_at) THEN
        action := format('re-inventory of deletion request %s', OLD.id);
        PERFORM community_deletion_require_member(ARRAY['community_deletion_operator']::name[], action);
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
    -- The rest of what the executor records is its own too: the destructive
    -- storage manifest it verifies against, its retry and error record
    -- (which an operator only clears) and the schedule (an operator makes a
    -- request due now, never later). The fence generation and completion
    -- time are guarded below and by CHECKs.
    IF action IS NOT NULL
       AND ((NEW.destructive_storage_manifest, NEW.destructive_storage_frozen_at)
                IS DISTINCT FROM (OLD.destructive_storage_manifest, OLD.destructive_storage_frozen_at)
            OR (NEW.retry_stage IS NOT NULL AND NEW.retry_stage IS DISTINCT FROM OLD.retry_stage)
            OR (NEW.retry_count <> 0 AND NEW.retry_count <> OLD.retry_count)
            OR (NEW.last_error IS NOT NULL AND NEW.last_error IS DISTINCT FROM OLD.last_error)
            OR (NEW.last_error_at IS NOT NULL AND NEW.last_error_at IS DISTINCT FROM OLD.last_error_at)
            OR (NEW.next_attempt_at IS DISTINCT FROM OLD.next_attempt_at AND NEW.next_attempt_at <> now())) THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = format('%s refused: an operator never changes what the executor records (destructive storage manifest, retry and error record, schedule)', action);
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
        -- A re-inventory replaces the whole frozen inventory of an unblocked,
        -- never approved inventoried request; once approved, the approval's
        -- digest binds it and only abort and resubmit can change it.
        IF NOT (OLD.stage = 'inventoried' AND NEW.stage = 'inventoried'
                AND OLD.blocked_at IS NULL AND NEW.blocked_at IS NULL
                AND NEW.schema_manifest IS NOT NULL AND NEW.storage_manifest IS NOT NULL
                AND NEW.inventory_manifest IS NOT NULL AND NEW.inventory_digest IS NOT NULL
                AND NEW.inventory_frozen_at IS NOT NULL
                AND NEW.inventory_frozen_at = now()
                AND NEW.inventory_frozen_at IS DISTINCT FROM OLD.inventory_frozen_at) THEN
            RAISE EXCEPTION USING ERRCODE = '23000',
                MESSAGE = format('deletion request %s refused: the frozen inventory is written once, by submitted -> inventoried, and replaced whole only by a re-inventory while inventoried and unblocked; otherwise abort the request and submit a new one', OLD.id);
        END IF;
        IF EXISTS (SELECT 1 FROM community_deletion_approvals approval WHERE approval.request_id = OLD.id) THEN
            RAISE EXCEPTION USING ERRCODE = '23000',
                MESSAGE = format('deletion request %s refused: the frozen inventory is written once, by submitted -> inventoried, and its approval binds it; abort the request and submit a new one', OLD.id);
        END IF;
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
$function$
;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.enforce_community_deletion_approval_guard()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
AS $function$
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
$function$
;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.enforce_community_deletion_grace_period()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
AS $function$
BEGIN
    NEW.grace_until := now() + coalesce(NEW.grace_period, community_deletion_default_grace_period());
    RETURN NEW;
END
$function$
;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.enforce_community_deletion_grace_fence()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
AS $function$
DECLARE
    ends timestamptz;
BEGIN
    IF OLD.deletion_state = 'active' AND NEW.deletion_state IS DISTINCT FROM OLD.deletion_state THEN
        SELECT a.grace_until INTO ends
        FROM community_deletion_requests r
        JOIN community_deletion_approvals a ON a.request_id = r.id
        WHERE r.community_id = OLD.id AND r.stage <> 'aborted'
        ORDER BY a.grace_until DESC NULLS LAST
        LIMIT 1;
        IF ends > now() THEN
            RAISE EXCEPTION USING ERRCODE = '55000',
                MESSAGE = format('community %s refused: its deletion''s grace period ends at %s; nothing is quiesced or fenced before then',
                                 OLD.id, ends),
                HINT = 'Wait for the grace period to end, or abort the request to keep the community.';
        END IF;
    END IF;
    RETURN NEW;
END
$function$
;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.enforce_community_deletion_protection_guard()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
AS $function$
DECLARE
    state text;
    pending community_deletion_protection_events%ROWTYPE;
BEGIN
    IF TG_OP <> 'INSERT' THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('deletion protection event %s refused: protection events are append-only audit records', OLD.sequence);
    END IF;
    PERFORM community_deletion_require_member(ARRAY['community_deletion_operator']::name[],
                                              format('deletion protection %s of community %s', NEW.action, NEW.community_id));
    -- Serialises with a submission (which locks the same row) and with
    -- other protection events of the community.
    PERFORM 1 FROM communities c WHERE c.id = NEW.community_id FOR UPDATE;
    state := community_deletion_protection_state(NEW.community_id);
    NEW.actor_role := session_user;
    NEW.recorded_at := now();
    IF NEW.action = 'set' THEN
        IF state IN ('set', 'clear_requested') THEN
            RAISE EXCEPTION USING ERRCODE = '55000',
                MESSAGE = format('deletion protection of community %s refused: it is already protected', NEW.community_id);
        END IF;
        IF EXISTS (SELECT 1 FROM community_deletion_requests r
                   WHERE r.community_id = NEW.community_id AND r.stage NOT IN ('aborted', 'retention_pending')) THEN
            RAISE EXCEPTION USING ERRCODE = '55000',
                MESSAGE = format('deletion protection of community %s refused: a deletion request is open; abort it first', NEW.community_id);
        END IF;
        RETURN NEW;
    END IF;
    IF NEW.action = 'clear_requested' THEN
        IF state IS DISTINCT FROM 'set' THEN
            RAISE EXCEPTION USING ERRCODE = '55000',
                MESSAGE = format('clearing the deletion protection of community %s refused: it is %s',
                                 NEW.community_id, CASE WHEN state = 'clear_requested' THEN 'already awaiting a second operator' ELSE 'not protected' END);
        END IF;
        RETURN NEW;
    END IF;
    -- 'cleared': a second operator approves a pending clear request.
    IF state IS DISTINCT FROM 'clear_requested' THEN
        RAISE EXCEPTION USING ERRCODE = '55000',
            MESSAGE = format('clearing the deletion protection of community %s refused: no clear request awaits approval', NEW.community_id);
    END IF;
    SELECT * INTO pending FROM community_deletion_protection_events e
    WHERE e.community_id = NEW.community_id ORDER BY e.sequence DESC LIMIT 1;
    IF lower(btrim(NEW.actor)) = lower(btrim(pending.actor)) THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('clearing the deletion protection of community %s refused: %s requested it and cannot also approve it',
                             NEW.community_id, pending.actor);
    END IF;
    IF NEW.actor_role = pending.actor_role AND NOT community_deletion_operators_share_role() THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('clearing the deletion protection of community %s refused: role %s requested it and cannot also approve it',
                             NEW.community_id, session_user);
    END IF;
    RETURN NEW;
END
$function$
;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.enforce_community_deletion_protection_submit()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
AS $function$
DECLARE
    protected community_deletion_protection_events%ROWTYPE;
BEGIN
    -- Serialises with a protection event of the same community, which locks
    -- the row FOR UPDATE; two submissions share the lock.
    PERFORM 1 FROM communities c WHERE c.id = NEW.community_id FOR SHARE;
    SELECT * INTO protected FROM community_deletion_protection_events e
    WHERE e.community_id = NEW.community_id ORDER BY e.sequence DESC LIMIT 1;
    IF protected.action IN ('set', 'clear_requested') THEN
        RAISE EXCEPTION USING ERRCODE = '55000',
            MESSAGE = format('deletion of community %s refused: it is deletion-protected (%s by %s at %s)',
                             NEW.community_id, protected.action, protected.actor, protected.recorded_at),
            HINT = 'Clear the protection first: one operator requests it, a second approves.';
    END IF;
    RETURN NEW;
END
$function$
;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.enforce_community_deletion_manifest_key_guard()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
AS $function$
DECLARE
    request_stage text;
    frozen boolean;
BEGIN
    SELECT r.stage, r.destructive_storage_manifest IS NOT NULL INTO request_stage, frozen
    FROM community_deletion_requests r
    WHERE r.id = CASE WHEN TG_OP = 'DELETE' THEN OLD.request_id ELSE NEW.request_id END
    FOR SHARE;

    IF TG_OP = 'INSERT' THEN
        IF request_stage IS DISTINCT FROM 'fenced' OR frozen IS NOT FALSE OR NEW.deleted_at IS NOT NULL THEN
            RAISE EXCEPTION USING ERRCODE = '23000',
                MESSAGE = format('manifest key chunk %s of request %s refused: chunks are appended only while fenced, before the destructive manifest freezes',
                                 NEW.chunk_no, NEW.request_id);
        END IF;
        RETURN NEW;
    END IF;

    IF TG_OP = 'DELETE' THEN
        IF frozen IS NOT FALSE AND request_stage NOT IN ('logically_verified', 'retention_pending') THEN
            RAISE EXCEPTION USING ERRCODE = '23000',
                MESSAGE = format('manifest key chunk %s of request %s refused: frozen chunks stay until the request is logically verified',
                                 OLD.chunk_no, OLD.request_id);
        END IF;
        RETURN OLD;
    END IF;

    IF (NEW.request_id, NEW.chunk_no, NEW.prefix, NEW.keys) IS DISTINCT FROM (OLD.request_id, OLD.chunk_no, OLD.prefix, OLD.keys) THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('manifest key chunk %s of request %s refused: a chunk''s keys never change', OLD.chunk_no, OLD.request_id);
    END IF;
    IF OLD.deleted_at IS NOT NULL THEN
        IF NEW.deleted_at IS DISTINCT FROM OLD.deleted_at THEN
            RAISE EXCEPTION USING ERRCODE = '23000',
                MESSAGE = format('manifest key chunk %s of request %s refused: deleted_at is stamped once', OLD.chunk_no, OLD.request_id);
        END IF;
    ELSIF NEW.deleted_at IS NOT NULL THEN
        IF request_stage IS DISTINCT FROM 'drained' OR frozen IS NOT TRUE THEN
            RAISE EXCEPTION USING ERRCODE = '23000',
                MESSAGE = format('manifest key chunk %s of request %s refused: chunks are stamped deleted only while drained', OLD.chunk_no, OLD.request_id);
        END IF;
        NEW.deleted_at := now();
    END IF;
    RETURN NEW;
END
$function$
;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.enforce_community_serving_write_lease_guard()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
AS $function$
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
        -- Only while active: once quiescing, every lease runs out by its
        -- lease_until, so the fence waits at most for the longest lease.
        IF OLD.lease_until < clock_timestamp()
           OR community_state IS DISTINCT FROM 'active'
           OR community_generation IS DISTINCT FROM OLD.fence_generation THEN
            RAISE EXCEPTION USING ERRCODE = '55000',
                MESSAGE = format('community write refused: serving write lease %s is expired or its community %s is %s at fence generation %s; a lease is extended only while its community is active',
                                 OLD.id, OLD.community_id, coalesce(community_state, 'missing'), community_generation),
                CONSTRAINT = 'community_write_fence';
        END IF;
    END IF;
    RETURN NEW;
END
$function$
;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.enforce_community_deletion_checkpoint_guard()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
AS $function$
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
$function$
;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.enforce_community_deletion_settings_guard()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
AS $function$
BEGIN
    IF TG_OP <> 'INSERT' THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('deletion setting %s refused: settings are append-only; insert a new row', OLD.sequence);
    END IF;
    NEW.changed_by := session_user;
    NEW.changed_at := now();
    RETURN NEW;
END
$function$
;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.enforce_community_deletion_receipt_required()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
AS $function$
BEGIN
    IF OLD.stage IS DISTINCT FROM 'retention_pending' AND NEW.stage = 'retention_pending'
       AND NOT EXISTS (SELECT 1 FROM community_deletion_receipts r WHERE r.request_id = NEW.id) THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('completion of deletion %s refused: it has no receipt; write the receipt in the transaction that completes the deletion', NEW.id);
    END IF;
    RETURN NULL;
END
$function$
;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.enforce_community_deletion_storage_layout_guard()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
AS $function$
DECLARE
    parts text[];
    key_type oid;
    placeholder constant text := '{tenant}';
    occurrences integer;
    before text;
    after text;
    declared boolean;
    subject text;
BEGIN
    IF TG_OP <> 'INSERT' THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('storage layout row %s refused: the layout is append-only; retire a template by inserting it again with action ''retire''', OLD.sequence);
    END IF;
    IF NEW.kind IS NULL OR NEW.kind NOT IN ('objects', 'cache', 'object_keys', 'sequence') THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('storage layout kind %L refused: write ''objects'' for object-store prefixes, ''object_keys'' for object keys listed in a column of a registered table, ''cache'' for cache key patterns or ''sequence'' for per-tenant sequences', NEW.kind);
    END IF;
    IF NEW.action IS NULL OR NEW.action NOT IN ('declare', 'retire') THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('storage layout action %L refused: write ''declare'' or ''retire''', NEW.action);
    END IF;
    subject := format('%s template %L', NEW.kind, NEW.template);
    IF NEW.reason IS NULL OR btrim(NEW.reason) = '' THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('%s refused: give a reason (what the service keeps there, or why it is retired)', subject);
    END IF;

    -- One declaration or retirement at a time, so that "is it declared?"
    -- below cannot race another transaction's insert.
    PERFORM pg_advisory_xact_lock(hashtext('community_deletion_storage_layout'));
    SELECT latest.action = 'declare' INTO declared
    FROM community_deletion_storage_layout latest
    WHERE latest.kind = NEW.kind AND latest.template = NEW.template
    ORDER BY latest.sequence DESC
    LIMIT 1;
    IF NEW.action = 'retire' THEN
        IF declared IS NOT TRUE THEN
            RAISE EXCEPTION USING ERRCODE = '22023',
                MESSAGE = format('retirement of %s refused: it is not declared; retire a template exactly as it was declared', subject);
        END IF;
        NEW.declared_by := session_user;
        NEW.declared_at := now();
        RETURN NEW;
    END IF;
    IF declared IS TRUE THEN
        RAISE EXCEPTION USING ERRCODE = '23505',
            MESSAGE = format('declaration of %s refused: it is already declared; nothing to do', subject);
    END IF;

    IF NEW.template IS NULL OR octet_length(NEW.template) > 1024 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('%s refused: a template is 1 to 1024 bytes, for example ''uploads/{tenant}/''', subject);
    END IF;
    IF NEW.kind = 'object_keys' THEN
        -- schema.table.column of a registered 'delete' table whose text
        -- column lists object keys: the inventory freezes the keys of the
        -- tenant's rows, and the executor deletes exactly those.
        BEGIN
            parts := parse_ident(NEW.template);
        EXCEPTION WHEN invalid_parameter_value THEN
            parts := NULL;
        END;
        IF cardinality(parts) IS DISTINCT FROM 3 THEN
            RAISE EXCEPTION USING ERRCODE = '22023',
                MESSAGE = format('%s refused: name the column that lists object keys as schema.table.column, as in ''public.active_storage_blobs.key''', subject);
        END IF;
        IF NOT EXISTS (SELECT 1 FROM community_scoped_tables r
                       WHERE r.table_schema = parts[1] AND r.table_name = parts[2] AND r.purge_action = 'delete') THEN
            RAISE EXCEPTION USING ERRCODE = '22023',
                MESSAGE = format('%s refused: %I.%I is not a registered ''delete'' table; attach it first (by its tenant key, or through its parents or the rows that reference it), so that its rows are a tenant''s',
                                 subject, parts[1], parts[2]);
        END IF;
        SELECT a.atttypid INTO key_type
        FROM pg_attribute a
        JOIN pg_class c ON c.oid = a.attrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = parts[1] AND c.relname = parts[2] AND a.attname = parts[3] AND a.attnum > 0 AND NOT a.attisdropped;
        IF key_type IS NULL OR key_type NOT IN ('pg_catalog.text'::regtype, 'pg_catalog.varchar'::regtype) THEN
            RAISE EXCEPTION USING ERRCODE = '22023',
                MESSAGE = format('%s refused: %I.%I has no text or varchar column %I', subject, parts[1], parts[2], parts[3]);
        END IF;
        IF NOT has_column_privilege('community_deletion_operator', format('%I.%I', parts[1], parts[2]), parts[3], 'SELECT')
           OR NOT has_column_privilege('community_deletion_executor', format('%I.%I', parts[1], parts[2]), parts[3], 'SELECT') THEN
            RAISE EXCEPTION USING ERRCODE = '42501',
                MESSAGE = format('%s refused: the inventory and the executor read the keys: GRANT SELECT (%I) ON %I.%I TO community_deletion_operator, community_deletion_executor first',
                                 subject, parts[3], parts[1], parts[2]);
        END IF;
        NEW.declared_by := session_user;
        NEW.declared_at := now();
        RETURN NEW;
    END IF;
    occurrences := (length(NEW.template) - length(replace(NEW.template, placeholder, ''))) / length(placeholder);
    IF occurrences <> 1 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('%s refused: it names {tenant} %s times, not once; write one {tenant}, as in %L',
                             subject, occurrences, CASE NEW.kind WHEN 'objects' THEN 'uploads/{tenant}/' ELSE 'ws:{tenant}:*' END);
    END IF;
    IF strpos(replace(NEW.template, placeholder, ''), '{') > 0 OR strpos(replace(NEW.template, placeholder, ''), '}') > 0 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('%s refused: {tenant} is the only placeholder and no other brace may appear; write the rest literally', subject);
    END IF;
    before := split_part(NEW.template, placeholder, 1);
    after := split_part(NEW.template, placeholder, 2);

    IF NEW.kind = 'sequence' THEN
        -- schema.name, {tenant} in the name: the tenant's own sequence,
        -- named exactly so, which the deletion drops.
        parts := community_deletion_tenant_object_parts(NEW.template);
        IF parts IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = '22023',
                MESSAGE = format('%s refused: name the per-tenant sequence as schema.name with {tenant} in the name, as in ''public.conv_dpid_seq_{tenant}''', subject);
        END IF;
        IF NOT coalesce(community_deletion_tenant_schema(to_regnamespace(quote_ident(parts[1]))::oid), false) THEN
            RAISE EXCEPTION USING ERRCODE = '22023',
                MESSAGE = format('%s refused: schema %I is not a schema of the service', subject, parts[1]);
        END IF;
        NEW.declared_by := session_user;
        NEW.declared_at := now();
        RETURN NEW;
    END IF;

    IF NEW.kind = 'objects' THEN
        -- An object prefix is listed literally: a wildcard character in it
        -- is a mistake, never a pattern.
        IF NEW.template ~ '[*?\[\]\\]' THEN
            RAISE EXCEPTION USING ERRCODE = '23514',
                MESSAGE = format('%s refused: an object prefix is literal and has no wildcards; write the prefix the service writes, as in ''uploads/{tenant}/''', subject);
        END IF;
        IF left(after, 1) <> '/' THEN
            RAISE EXCEPTION USING ERRCODE = '23514',
                MESSAGE = format('%s refused: {tenant} must be followed by "/", or it also covers every tenant whose id it starts; write %L',
                                 subject, before || placeholder || '/' || after);
        END IF;
        IF right(after, 1) <> '/' THEN
            RAISE EXCEPTION USING ERRCODE = '23514',
                MESSAGE = format('%s refused: an object prefix ends in "/"; write %L', subject, NEW.template || '/');
        END IF;
        IF EXISTS (SELECT 1 FROM community_deletion_storage_layout other
                   WHERE other.kind = 'objects' AND other.action = 'declare'
                     AND (starts_with(other.template, NEW.template) OR starts_with(NEW.template, other.template))
                     AND NOT EXISTS (SELECT 1 FROM community_deletion_storage_layout later
                                     WHERE later.kind = other.kind AND later.template = other.template
                                       AND later.sequence > other.sequence)) THEN
            RAISE EXCEPTION USING ERRCODE = '23514',
                MESSAGE = format('%s refused: it nests in or contains a declared objects template; declare only the outer prefix', subject);
        END IF;
    ELSE
        IF before ~ '[*?\[\]\\]' THEN
            RAISE EXCEPTION USING ERRCODE = '23514',
                MESSAGE = format('%s refused: a glob character before {tenant} matches other tenants'' keys; write the literal key prefix, as in ''ws:{tenant}:*''', subject);
        END IF;
        -- A pattern may end at {tenant}: it then names one key exactly
        -- ('presence::{tenant}'), which no other tenant's key matches.
        IF left(after, 1) ~ '[[:alnum:]_*?\[\]\\-]' THEN
            RAISE EXCEPTION USING ERRCODE = '23514',
                MESSAGE = format('%s refused: {tenant} must be followed by a literal delimiter, or it also matches every tenant whose id it starts; write %L',
                                 subject, before || placeholder || ':' || CASE WHEN after = '' THEN '*' ELSE after END);
        END IF;
    END IF;
    NEW.declared_by := session_user;
    NEW.declared_at := now();
    RETURN NEW;
END
$function$
;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.enforce_community_fence_marker_arm()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
AS $function$
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
$function$
;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.enforce_community_scoped_table_guard()
 RETURNS trigger
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
AS $function$
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
    -- The stack names a function as its search_path showed it when it was
    -- compiled: any other function of these names could be the caller.
    IF EXISTS (SELECT 1 FROM pg_proc p
               WHERE p.proname ~ '^community_deletion_(un)?register_(child_)?table$'
                 AND p.oid NOT IN ('community_deletion_register_table(regclass,text,name)'::regprocedure,
                                   'community_deletion_unregister_table(name,name)'::regprocedure,
                                   'community_deletion_register_child_table(regclass,jsonb)'::regprocedure)) THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = 'community_scoped_tables refused: tenant tables are registered only by attach_community_write_fence() or attach_child_table() and unregistered only by detach_community_write_fence(), and another function has one of their names; drop it';
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
        args := community_deletion_expected_fence_args(target, NEW.purge_action, NEW.tenant_key, NEW.key_kind, NULL);
    ELSE
        IF target IS NULL OR NEW.purge_action <> 'delete' OR NEW.key_kind IS DISTINCT FROM community_deletion_tenant_key_kind() THEN
            RAISE EXCEPTION USING ERRCODE = '23000',
                MESSAGE = format('registration of %s refused: a table attached through its parents is a ''delete'' table of the tenant key''s kind', NEW.table_name);
        END IF;
        args := community_deletion_expected_fence_args(target, 'delete', NULL, NEW.key_kind, NEW.parents);
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
$function$
;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.enforce_community_deletion_reference_guard()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
AS $function$
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
    -- The stack names a function as its search_path showed it when it was
    -- compiled: any other function of these names could be the caller.
    IF EXISTS (SELECT 1 FROM pg_proc p
               WHERE p.proname IN ('declare_reference', 'drop_reference')
                 AND p.oid NOT IN ('declare_reference(regclass,name[],regclass,name[],text)'::regprocedure,
                                   'drop_reference(regclass,name[])'::regprocedure)) THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = 'community_deletion_references refused: references are declared only by community_deletion.declare_reference() and dropped only by community_deletion.drop_reference(), and another function has one of their names; drop it';
    END IF;
    IF TG_OP = 'DELETE' THEN
        RETURN OLD;
    END IF;
    NEW.declared_by := session_user;
    NEW.declared_at := now();
    RETURN NEW;
END
$function$
;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_catalog_drift()
 RETURNS TABLE(table_name text, problem text)
 LANGUAGE plpgsql
 SET jit TO 'off'
 SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
 SET lock_timeout TO '5s'
AS $function$
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
$function$
;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.exclude_table(target regclass, reason text)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
AS $function$
DECLARE
    rel record;
BEGIN
    SELECT c.relname, c.relowner, c.relkind, c.relispartition, c.relpersistence, c.relnamespace, n.nspname INTO rel
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = target;
    IF rel.relname IS NULL OR NOT pg_has_role(session_user, rel.relowner, 'MEMBER') THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = format('exclusion of %s refused: only its owner (%s) may exclude it', target, pg_get_userbyid(rel.relowner));
    END IF;
    IF rel.relpersistence = 't' OR NOT community_deletion_tenant_schema(rel.relnamespace) OR rel.relkind NOT IN ('r', 'p') OR rel.relispartition THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('exclusion of %s refused: only a permanent table (not a partition) of a schema of the service is excluded', target);
    END IF;
    IF reason IS NULL OR btrim(reason) = '' OR octet_length(reason) > 1024 THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('exclusion of %s refused: give a reason (at most 1024 bytes) why its rows outlive a tenant''s deletion', target);
    END IF;
    IF EXISTS (SELECT 1 FROM community_scoped_tables r WHERE r.table_schema = rel.nspname AND r.table_name = rel.relname) THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('exclusion of %s refused: it is a registered tenant table; detach it first', target);
    END IF;
    INSERT INTO community_deletion_excluded_tables (table_schema, table_name, reason)
    VALUES (rel.nspname, rel.relname, reason)
    ON CONFLICT (table_schema, table_name) DO UPDATE
    SET reason = EXCLUDED.reason, excluded_by = session_user, excluded_at = now();
END
$function$
;
-- +goose StatementEnd

DROP FUNCTION community_deletion.include_table(regclass, text);
DROP FUNCTION community_deletion.community_deletion_catalog_drift_of_copies();
DROP FUNCTION community_deletion.community_deletion_untrusted_code(regclass);
DROP TABLE community_deletion.community_deletion_trusted_code;
DROP FUNCTION community_deletion.enforce_community_deletion_trusted_code_guard();
DROP FUNCTION community_deletion.community_deletion_code_digest(oid, text, name);
DROP FUNCTION community_deletion.community_deletion_table_code(oid);
DROP FUNCTION community_deletion.community_deletion_code_functions(oid, oid);
DROP FUNCTION community_deletion.community_deletion_fence_context(oid, name, regprocedure, text, boolean, boolean);
DROP FUNCTION community_deletion.community_deletion_guard_context(oid, name, boolean, text);

DROP VIEW community_deletion.community_deletion_excluded_tables;
DROP TABLE community_deletion.community_deletion_exclusion_events;
DROP FUNCTION community_deletion.enforce_community_deletion_exclusion_guard();

CREATE TABLE community_deletion.community_deletion_excluded_tables (
    table_schema name NOT NULL,
    table_name name NOT NULL,
    reason text NOT NULL,
    excluded_by name DEFAULT SESSION_USER NOT NULL,
    excluded_at timestamp with time zone DEFAULT now() NOT NULL,
    CONSTRAINT community_deletion_excluded_tables_reason_check CHECK (((btrim(reason) <> ''::text) AND (octet_length(reason) <= 1024))),
    CONSTRAINT community_deletion_excluded_tables_pkey PRIMARY KEY (table_schema, table_name)
);
COMMENT ON TABLE community_deletion.community_deletion_excluded_tables IS 'Tables that look like tenant data but that their owner keeps out of the deletion (exclude_table()), with why; the drift report does not flag them.';
INSERT INTO community_deletion.community_deletion_excluded_tables (table_schema, table_name, reason, excluded_by, excluded_at)
SELECT r.table_schema, r.table_name, r.reason, r.excluded_by, r.excluded_at FROM community_deletion_excluded_restore r;
CREATE TRIGGER community_deletion_excluded_tables_truncate_guard BEFORE TRUNCATE ON community_deletion.community_deletion_excluded_tables
    FOR EACH STATEMENT EXECUTE FUNCTION community_deletion.refuse_community_deletion_truncate();
GRANT SELECT ON community_deletion.community_deletion_excluded_tables
    TO community_deletion_serving, community_deletion_operator, community_deletion_executor;

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.include_table(target regclass)
 RETURNS void
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
AS $function$
DECLARE
    rel record;
BEGIN
    SELECT c.relname, c.relowner, n.nspname INTO rel
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = target;
    IF rel.relname IS NULL OR NOT pg_has_role(session_user, rel.relowner, 'MEMBER') THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = format('inclusion of %s refused: only its owner (%s) may lift its exclusion', target, pg_get_userbyid(rel.relowner));
    END IF;
    DELETE FROM community_deletion_excluded_tables e WHERE e.table_schema = rel.nspname AND e.table_name = rel.relname;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = '22023', MESSAGE = format('%s is not excluded', target);
    END IF;
END
$function$
;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_guard_triggers()
 RETURNS TABLE(table_name text, trigger_name text, function_signature text)
 LANGUAGE sql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
AS $function$
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
    $function$
;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_control_table(table_name text)
 RETURNS boolean
 LANGUAGE sql
 IMMUTABLE PARALLEL SAFE
 SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
AS $function$
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
            'community_deletion_receipt_keys',
            'community_deletion_receipts',
            'community_deletion_references',
            'community_deletion_requests',
            'community_deletion_settings',
            'community_deletion_step_authorizations',
            'community_deletion_storage_layout',
            'community_deletion_tenant_table',
            'community_scoped_tables',
            'community_serving_write_leases',
            'storage_taxonomy_sweeps']), false)
    $function$
;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_installed_functions()
 RETURNS text[]
 LANGUAGE sql
 IMMUTABLE
 SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
AS $function$
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
    $function$
;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_seal_functions()
 RETURNS void
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
AS $function$
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
$function$
;
-- +goose StatementEnd

SELECT community_deletion.community_deletion_seal_functions();
