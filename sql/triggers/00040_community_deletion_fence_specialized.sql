-- The write fence's armed path reads the statement's keys with a static
-- query written for its table.
--
-- While a deletion is in flight, path 0 of a bound table's fence reads the
-- tenants of the statement's rows to compare their bits with the fence
-- marker. One function serves every table, so it read a key by its name
-- (to_jsonb(row) ->> column, which converts every column of the row), and
-- a child table's parents by a query built and planned for each
-- statement (EXECUTE). bench/README.md measured both: reading by name
-- about 9 us a statement over the floor, a child's dynamic query 150-200
-- us, where a query written for the table, whose plan PL/pgSQL keeps,
-- costs a few.
--
-- PL/pgSQL compiles a trigger function once per trigger, and parses a
-- statement's columns only when it first runs. So one body can hold a
-- branch per table shape, each selected by its trigger's exact arguments
-- and naming its columns in its text; each compiled copy runs only its
-- own. When a deletion arms the fence, community_deletion_fence_set_armed()
-- now calls community_deletion_fence_specialize(), which writes those
-- branches (community_deletion_fence_regions()) at the markers the body
-- below carries, for the tables with a bound fence (the most written
-- shapes first, while the branches fit in 24 kB), and replaces the body. A branch runs the query the generic code runs for the same
-- arguments: in path 0, the key bits of a key column of the table's own,
-- or of the parents' keys that a child's one-step references name; in
-- path 1, where a statement whose bits the marker shares goes, a child's
-- tenants through the same references; each with the generic code's row
-- security test. Any other table takes the generic code, as before. A
-- table attached while the fence is armed takes it until the next arm.
--
-- The drift report and the digests compare the body with its branches
-- taken out again (community_deletion_fence_normalized()), so a
-- specialized fence is the installed fence, and a body whose branches are
-- not exactly what the generator writes at its markers is not. The
-- specializer builds only on a body that digests as installed. Replacing
-- the body is a catalog change: each session compiles the fence again
-- once per trigger, once per arm.
--
-- Down puts back the body, community_deletion_function_digest() and
-- community_deletion_fence_set_armed() as 00039 left them and drops the
-- three new functions.

-- +goose Up
-- +goose StatementBegin
CREATE FUNCTION community_deletion.community_deletion_fence_regions(branches jsonb) RETURNS text[]
    LANGUAGE plpgsql IMMUTABLE
    AS $$
DECLARE
    key_name text;
    spec_text text;
    spec jsonb;
    path jsonb;
    hop jsonb;
    branch text[] := '{}';
    resolve text[] := '{}';
    keys_code text;
    children_code text;
    paths_code text;
    tests text;
    parents_new text;
    parents_old text;
    parents_both text;
    joins_new text;
    joins_old text;
    tenant text;
    lean boolean;
BEGIN
    -- The text community_deletion_fence_specialize() puts in place of the
    -- write fence's markers, and community_deletion_fence_normalized()
    -- takes out again: [the header line, keys begin, keys end, children
    -- begin, children end, paths begin, paths end]. Each region holds its
    -- marker, so a body normalizes to the installed one only if each region
    -- stands where its marker stood. A branch is selected by its table's
    -- exact trigger arguments and runs the query the generic code runs for
    -- those arguments, with the columns named in its text, so that its
    -- plan is kept: path 0's bits of a key of the table's own (keys) or of
    -- a child's parents (children), and path 1's tenants of a child
    -- (paths).
    FOR key_name IN SELECT k.value FROM jsonb_array_elements_text(coalesce(branches -> 'keys', '[]')) k LOOP
        CONTINUE WHEN position('--@' IN key_name) > 0;
        branch := branch || format(
            E'IF TG_ARGV[0] OPERATOR(pg_catalog.=) %L THEN\n'
            '    IF TG_OP OPERATOR(pg_catalog.=) ''INSERT'' THEN\n'
            '        SELECT pg_catalog.bit_or(community_deletion.community_deletion_fence_key_bit(n.%I::pg_catalog.text)) INTO bits\n'
            '        FROM community_fence_new n;\n'
            '    ELSIF TG_OP OPERATOR(pg_catalog.=) ''UPDATE'' THEN\n'
            '        SELECT pg_catalog.bit_or(community_deletion.community_deletion_fence_key_bit(k.key)) INTO bits\n'
            '        FROM (SELECT o.%I::pg_catalog.text FROM community_fence_old o\n'
            '              UNION ALL\n'
            '              SELECT n.%I::pg_catalog.text FROM community_fence_new n) k (key);\n'
            '    ELSE\n'
            '        SELECT pg_catalog.bit_or(community_deletion.community_deletion_fence_key_bit(o.%I::pg_catalog.text)) INTO bits\n'
            '        FROM community_fence_old o;\n'
            '    END IF;\n',
            key_name, key_name, key_name, key_name, key_name);
    END LOOP;
    keys_code := CASE WHEN cardinality(branch) = 0 THEN '--@keys-begin@'
                      ELSE array_to_string(branch, 'ELS') || E'ELSE\n--@keys-begin@' END;

    branch := '{}';
    FOR spec_text IN SELECT s.value FROM jsonb_array_elements_text(coalesce(branches -> 'children', '[]')) s LOOP
        CONTINUE WHEN position('--@' IN spec_text) > 0;
        spec := spec_text::jsonb;
        -- Only a spec whose every path is one step along a one-column
        -- reference: what the generic code's lean way serves.
        lean := jsonb_typeof(spec -> 'paths') = 'array' AND jsonb_array_length(spec -> 'paths') > 0;
        tests := '';
        parents_new := NULL;
        parents_old := NULL;
        parents_both := NULL;
        joins_new := NULL;
        joins_old := NULL;
        IF lean THEN
            FOR path IN SELECT p.value FROM jsonb_array_elements(spec -> 'paths') p LOOP
                hop := path -> 'hops' -> 0;
                IF jsonb_typeof(path -> 'hops') IS DISTINCT FROM 'array' OR jsonb_array_length(path -> 'hops') <> 1
                   OR jsonb_typeof(hop -> 'columns') IS DISTINCT FROM 'array' OR jsonb_array_length(hop -> 'columns') <> 1
                   OR jsonb_typeof(hop -> 'parent_columns') IS DISTINCT FROM 'array'
                   OR jsonb_array_length(hop -> 'parent_columns') < 1
                   OR hop ->> 'schema' IS NULL OR hop ->> 'table' IS NULL OR path ->> 'key' IS NULL
                   OR hop -> 'columns' ->> 0 IS NULL OR hop -> 'parent_columns' ->> 0 IS NULL THEN
                    lean := false;
                    EXIT;
                END IF;
                -- The generic code takes its lean way, and joins as the
                -- writer, only while no policy applies to the writer on a
                -- parent; so does the branch.
                tests := tests || format(E'\n   AND NOT pg_catalog.row_security_active(%L::pg_catalog.text)',
                                         format('%I.%I', hop ->> 'schema', hop ->> 'table'));
                parents_new := coalesce(parents_new || E'\n              UNION ALL\n              ', '') || format(
                    'SELECT p.%I::pg_catalog.text FROM %I.%I p WHERE p.%I OPERATOR(pg_catalog.=) ANY (SELECT n.%I FROM community_fence_new n)',
                    path ->> 'key', hop ->> 'schema', hop ->> 'table', hop -> 'parent_columns' ->> 0, hop -> 'columns' ->> 0);
                parents_old := coalesce(parents_old || E'\n              UNION ALL\n              ', '') || format(
                    'SELECT p.%I::pg_catalog.text FROM %I.%I p WHERE p.%I OPERATOR(pg_catalog.=) ANY (SELECT o.%I FROM community_fence_old o)',
                    path ->> 'key', hop ->> 'schema', hop ->> 'table', hop -> 'parent_columns' ->> 0, hop -> 'columns' ->> 0);
                parents_both := coalesce(parents_both || E'\n              UNION ALL\n              ', '') || format(
                    'SELECT p.%I::pg_catalog.text FROM %I.%I p WHERE p.%I OPERATOR(pg_catalog.=) ANY '
                    '(SELECT o.%I FROM community_fence_old o UNION ALL SELECT n.%I FROM community_fence_new n)',
                    path ->> 'key', hop ->> 'schema', hop ->> 'table', hop -> 'parent_columns' ->> 0,
                    hop -> 'columns' ->> 0, hop -> 'columns' ->> 0);
                joins_new := coalesce(joins_new || E'\n              UNION ALL\n              ', '') || format(
                    'SELECT p.%I::pg_catalog.text FROM community_fence_new w JOIN %I.%I p ON p.%I OPERATOR(pg_catalog.=) w.%I',
                    path ->> 'key', hop ->> 'schema', hop ->> 'table', hop -> 'parent_columns' ->> 0, hop -> 'columns' ->> 0);
                joins_old := coalesce(joins_old || E'\n              UNION ALL\n              ', '') || format(
                    'SELECT p.%I::pg_catalog.text FROM community_fence_old w JOIN %I.%I p ON p.%I OPERATOR(pg_catalog.=) w.%I',
                    path ->> 'key', hop ->> 'schema', hop ->> 'table', hop -> 'parent_columns' ->> 0, hop -> 'columns' ->> 0);
            END LOOP;
        END IF;
        IF lean THEN
            branch := branch || format(
                E'IF TG_ARGV[1] OPERATOR(pg_catalog.=) %L%s THEN\n'
                '    IF TG_OP OPERATOR(pg_catalog.=) ''INSERT'' THEN\n'
                '        SELECT pg_catalog.bit_or(community_deletion.community_deletion_fence_key_bit(k.key)) INTO bits\n'
                '        FROM (%s) k (key);\n'
                '    ELSIF TG_OP OPERATOR(pg_catalog.=) ''UPDATE'' THEN\n'
                '        SELECT pg_catalog.bit_or(community_deletion.community_deletion_fence_key_bit(k.key)) INTO bits\n'
                '        FROM (%s) k (key);\n'
                '    ELSE\n'
                '        SELECT pg_catalog.bit_or(community_deletion.community_deletion_fence_key_bit(k.key)) INTO bits\n'
                '        FROM (%s) k (key);\n'
                '    END IF;\n',
                spec_text, tests, parents_new, parents_both, parents_old);
            -- Path 1's distinct tenants, as community_deletion_fence_query()
            -- writes them for these paths.
            tenant := CASE spec ->> 'kind' WHEN 'uuid' THEN 's.k::pg_catalog.uuid'
                           ELSE 'community_deletion.community_deletion_tenant_uuid(s.k)' END;
            resolve := resolve || format(
                E'IF TG_ARGV[1] OPERATOR(pg_catalog.=) %L%s THEN\n'
                '    IF TG_OP OPERATOR(pg_catalog.=) ''INSERT'' THEN\n'
                '        SELECT pg_catalog.array_agg(%s) INTO touched\n'
                '        FROM (SELECT DISTINCT r.k FROM (%s) r (k) WHERE r.k IS NOT NULL) s (k);\n'
                '    ELSIF TG_OP OPERATOR(pg_catalog.=) ''UPDATE'' THEN\n'
                '        SELECT pg_catalog.array_agg(%s) INTO touched\n'
                '        FROM (SELECT DISTINCT r.k FROM (%s\n              UNION ALL\n              %s) r (k) WHERE r.k IS NOT NULL) s (k);\n'
                '    ELSE\n'
                '        SELECT pg_catalog.array_agg(%s) INTO touched\n'
                '        FROM (SELECT DISTINCT r.k FROM (%s) r (k) WHERE r.k IS NOT NULL) s (k);\n'
                '    END IF;\n',
                spec_text, tests, tenant, joins_new, tenant, joins_old, joins_new, tenant, joins_old);
        END IF;
    END LOOP;
    children_code := CASE WHEN cardinality(branch) = 0 THEN '--@children-begin@'
                          ELSE array_to_string(branch, 'ELS') || E'ELSE\n--@children-begin@' END;
    paths_code := CASE WHEN cardinality(resolve) = 0 THEN '--@paths-begin@'
                       ELSE array_to_string(resolve, 'ELS') || E'ELSE\n--@paths-begin@' END;

    RETURN ARRAY[
        '-- fence specialized for: ' || coalesce(branches, '{}'::jsonb)::text,
        keys_code,
        CASE WHEN keys_code = '--@keys-begin@' THEN '--@keys-end@' ELSE E'--@keys-end@\nEND IF;' END,
        children_code,
        CASE WHEN children_code = '--@children-begin@' THEN '--@children-end@' ELSE E'--@children-end@\nEND IF;' END,
        paths_code,
        CASE WHEN paths_code = '--@paths-begin@' THEN '--@paths-end@' ELSE E'--@paths-end@\nEND IF;' END];
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION community_deletion.community_deletion_fence_normalized(body text) RETURNS text
    LANGUAGE plpgsql IMMUTABLE
    AS $$
DECLARE
    header text := substring(body FROM E'^\n-- fence specialized for: ([^\n]*)\n');
    regions text[];
BEGIN
    -- The write fence's body with the regions community_deletion_fence_specialize()
    -- put in (community_deletion_fence_regions() of the branches its first
    -- line names) turned back into their markers. A body it specialized
    -- comes back as the migrations installed it; any other comes back
    -- changed or as it came, and digests as changed.
    IF header IS NULL OR header = '{}' THEN
        RETURN body;
    END IF;
    BEGIN
        regions := community_deletion_fence_regions(header::jsonb);
    EXCEPTION WHEN OTHERS THEN
        RETURN body; -- not a header this project writes
    END;
    RETURN replace(replace(replace(replace(replace(replace(replace(body,
               regions[1], '-- fence specialized for: {}'),
               regions[2], '--@keys-begin@'),
               regions[3], '--@keys-end@'),
               regions[4], '--@children-begin@'),
               regions[5], '--@children-end@'),
               regions[6], '--@paths-begin@'),
               regions[7], '--@paths-end@');
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION community_deletion.community_deletion_fence_specialize() RETURNS boolean
    LANGUAGE plpgsql
    AS $_$
DECLARE
    fence oid := 'enforce_community_write_fence()'::regprocedure;
    t record;
    args text[];
    rest bytea;
    pos int;
    size int;
    spent int := 0;
    keys text[];
    children text[];
    branches jsonb := '{}';
    installed text;
    regions text[];
    body text;
BEGIN
    -- Called by community_deletion_fence_set_armed(true), as the schema's
    -- owner, when a deletion arms the fence: every table with a bound
    -- fence is held in SHARE mode, so none of its writers runs the body
    -- replaced here. Gives the write fence's path 0 a static branch for
    -- each bound table's trigger arguments (a key column of its own; a
    -- child's one-step paths, for path 0 and path 1). Returns whether it
    -- replaced the body.
    --
    -- Only a body that digests as the one the migrations installed is
    -- built on: a changed fence is the drift report's to name.
    IF community_deletion_function_digest(fence) IS DISTINCT FROM
       (SELECT d.digest FROM community_deletion_function_digests d
        WHERE d.function_signature = 'enforce_community_write_fence()') THEN
        RETURN false;
    END IF;
    keys := '{}';
    children := '{}';
    -- The most written shapes first, while the branches fit in 24 kB: each
    -- session compiles the whole body once per trigger, so its memory grows
    -- with every branch, used or not (bench/README.md). The generic body is
    -- about 19 kB.
    FOR t IN
        SELECT tg.tgnargs, tg.tgargs, sum(coalesce(s.n_tup_ins + s.n_tup_upd + s.n_tup_del, 0)) AS writes
        FROM pg_trigger tg
        LEFT JOIN pg_stat_all_tables s ON s.relid = tg.tgrelid
        WHERE tg.tgfoid = fence AND tg.tgnargs = 3 AND NOT tg.tgisinternal
        GROUP BY tg.tgnargs, tg.tgargs
        ORDER BY writes DESC, tg.tgargs
    LOOP
        args := '{}';
        rest := t.tgargs;
        FOR pos IN 1 .. t.tgnargs LOOP
            EXIT WHEN position('\x00'::bytea IN rest) = 0;
            args := args || convert_from(substring(rest FROM 1 FOR position('\x00'::bytea IN rest) - 1), getdatabaseencoding());
            rest := substring(rest FROM position('\x00'::bytea IN rest) + 1);
        END LOOP;
        CONTINUE WHEN cardinality(args) <> 3 OR args[3] <> 'bound' OR args[1] ~ '--@' OR args[2] ~ '--@'
                      OR (args[1] = 'through' AND args[2] = ANY (children))
                      OR (args[1] <> 'through' AND args[1] = ANY (keys));
        regions := community_deletion_fence_regions(CASE WHEN args[1] = 'through'
                                                         THEN jsonb_build_object('children', jsonb_build_array(args[2]))
                                                         ELSE jsonb_build_object('keys', jsonb_build_array(args[1])) END);
        size := length(regions[2]) + length(regions[4]) + length(regions[6]) - 47;
        CONTINUE WHEN size <= 0; -- no branch: not a child whose every path is one step
        size := size + length(regions[1]) - 26; -- and its name in the header
        CONTINUE WHEN spent + size > 24576;
        spent := spent + size;
        IF args[1] = 'through' THEN
            children := children || args[2];
        ELSE
            keys := keys || args[1];
        END IF;
    END LOOP;
    IF cardinality(keys) > 0 OR cardinality(children) > 0 THEN
        branches := jsonb_build_object('keys', to_jsonb(keys), 'children', to_jsonb(children));
    END IF;
    SELECT community_deletion_fence_normalized(p.prosrc) INTO installed FROM pg_proc p WHERE p.oid = fence;
    regions := community_deletion_fence_regions(branches);
    body := replace(replace(replace(replace(replace(replace(replace(installed,
                '-- fence specialized for: {}', regions[1]),
                '--@keys-begin@', regions[2]),
                '--@keys-end@', regions[3]),
                '--@children-begin@', regions[4]),
                '--@children-end@', regions[5]),
                '--@paths-begin@', regions[6]),
                '--@paths-end@', regions[7]);
    IF body = (SELECT p.prosrc FROM pg_proc p WHERE p.oid = fence) THEN
        RETURN false;
    END IF;
    BEGIN
        EXECUTE format('CREATE OR REPLACE FUNCTION community_deletion.enforce_community_write_fence() RETURNS trigger LANGUAGE plpgsql AS %L', body);
    EXCEPTION WHEN insufficient_privilege THEN
        -- An event trigger (a DDL guard older than this migration) refused
        -- it: the generic body stays, which fences the same writes.
        RETURN false;
    END;
    RETURN true;
END
$_$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_function_digest(fn oid) RETURNS text
    LANGUAGE sql STABLE
    SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
    AS $$
        SELECT md5(concat_ws(E'\x1f',
                             CASE WHEN p.oid = 'community_deletion_fence_armed()'::regprocedure
                                       AND p.prosrc = ' SELECT true ' THEN ' SELECT false '
                                  -- A write fence specialized when a deletion armed it
                                  -- digests as the body the migrations installed (00040).
                                  WHEN p.oid = 'enforce_community_write_fence()'::regprocedure
                                  THEN community_deletion_fence_normalized(p.prosrc)
                                  ELSE p.prosrc END,
                             array_to_string(p.proconfig, E'\x1e'), p.prosecdef::text,
                             p.provolatile::text, pg_get_userbyid(p.proowner)))
        FROM pg_proc p WHERE p.oid = fn
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_fence_set_armed(armed boolean) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
    AS $_$
BEGIN
    -- Only the arming trigger and the settle call this, as the schema's
    -- owner, holding the marker's lock.
    IF armed THEN
        -- Path 0's static branches for the tables it now serves
        -- (migration 00040); it stays specialized once disarmed.
        PERFORM community_deletion_fence_specialize();
        CREATE OR REPLACE FUNCTION community_deletion.community_deletion_fence_armed() RETURNS boolean
            LANGUAGE sql STABLE
            AS $armed$ SELECT true $armed$;
    ELSE
        CREATE OR REPLACE FUNCTION community_deletion.community_deletion_fence_armed() RETURNS boolean
            LANGUAGE sql STABLE
            AS $armed$ SELECT false $armed$;
    END IF;
END
$_$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.enforce_community_write_fence() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
-- fence specialized for: {}
-- (The line above names the static branches that
-- community_deletion_fence_specialize() puts at the --@...@ markers below
-- when a deletion arms the fence, migration 00040; {} while there are none.)
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
--@children-begin@
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
--@children-end@
                ELSE
                    -- A key of the table's own, of any kind: the key bit
                    -- of its text (migration 00039), which the marker
                    -- holds for every community in flight. Neither a uuid
                    -- nor an md5 is computed here.
--@keys-begin@
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
--@keys-end@
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
--@paths-begin@
            EXECUTE community_deletion.community_deletion_fence_query(TG_OP, TG_ARGV) INTO touched;
--@paths-end@
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
            'community_deletion_fence_normalized(text)',
            'community_deletion_fence_regions(jsonb)',
            'community_deletion_fence_specialize()',
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
COMMENT ON FUNCTION community_deletion.community_deletion_fence_regions(jsonb) IS 'The text the write fence''s specialization puts at each of its markers for the given branches (keys: key columns of the tables'' own; children: the paths arguments of child tables), in order: the header line, keys begin and end, children begin and end (path 0), paths begin and end (path 1). Each region contains its marker.';
-- +goose StatementEnd
-- +goose StatementBegin
COMMENT ON FUNCTION community_deletion.community_deletion_fence_normalized(text) IS 'A write fence body with the regions its header line names turned back into their markers: the body the migrations installed, for a body community_deletion_fence_specialize() wrote. What the fence''s digest is computed from.';
-- +goose StatementEnd
-- +goose StatementBegin
COMMENT ON FUNCTION community_deletion.community_deletion_fence_specialize() IS 'Gives the write fence''s armed path a static branch for each table with a bound fence (the most written first, up to 24 kB of branches), replacing its body, when a deletion arms it; builds only on a body that digests as installed. Returns whether it replaced the body.';
-- +goose StatementEnd
GRANT EXECUTE ON FUNCTION community_deletion.community_deletion_fence_regions(jsonb) TO community_deletion_serving, community_deletion_operator, community_deletion_executor;
GRANT EXECUTE ON FUNCTION community_deletion.community_deletion_fence_normalized(text) TO community_deletion_serving, community_deletion_operator, community_deletion_executor;
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
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_fence_set_armed(armed boolean) RETURNS void
    LANGUAGE plpgsql
    SET search_path TO 'pg_catalog', 'community_deletion', 'pg_temp'
    AS $_$
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
$_$;
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

DROP FUNCTION community_deletion.community_deletion_fence_specialize();
DROP FUNCTION community_deletion.community_deletion_fence_normalized(text);
DROP FUNCTION community_deletion.community_deletion_fence_regions(jsonb);

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

SELECT community_deletion.community_deletion_seal_functions();
