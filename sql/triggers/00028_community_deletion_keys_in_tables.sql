-- Files and objects whose names live in the database (issue 22).
--
-- * The storage layout takes two more kinds. 'object_keys' names, as
--   schema.table.column, a text column of a registered 'delete' table
--   whose values are object keys (ActiveStorage's blobs.key under random
--   names, say): the inventory and the executor read the keys of the
--   tenant's rows, the executor deletes and checks exactly those, and no
--   per-tenant prefix is needed. 'sequence' names, as schema.name with
--   {tenant} in the name, a per-tenant sequence (conv_dpid_seq_{tenant}):
--   the purge drops it, as the schema's owner, with
--   community_deletion_drop_tenant_objects(), and the step to tombstone is
--   refused while it exists (communities_tenant_objects_proof).
-- * A cache pattern may end at {tenant}: it names one key exactly.
--
-- Down refuses while an 'object_keys' or 'sequence' template is declared.

-- +goose Up
ALTER TABLE community_deletion.community_deletion_storage_layout
    DROP CONSTRAINT community_deletion_storage_layout_kind_check,
    ADD CONSTRAINT community_deletion_storage_layout_kind_check CHECK (kind IN ('objects', 'cache', 'object_keys', 'sequence'));

-- +goose StatementBegin
-- A per-tenant object template's schema and name (with its {tenant}), as
-- an identifier parser reads schema.name; NULL unless it is exactly that,
-- with one {tenant}, in the name.
CREATE FUNCTION community_deletion.community_deletion_tenant_object_parts(template text) RETURNS text[]
    LANGUAGE plpgsql IMMUTABLE
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
DECLARE
    marker constant text := 'zzcommunitydeletiontenantzz';
    parts text[];
BEGIN
    IF template IS NULL OR (length(template) - length(replace(template, '{tenant}', ''))) / length('{tenant}') <> 1
       OR strpos(template, marker) > 0 THEN
        RETURN NULL;
    END IF;
    BEGIN
        parts := parse_ident(replace(template, '{tenant}', marker));
    EXCEPTION WHEN invalid_parameter_value THEN
        RETURN NULL;
    END;
    IF cardinality(parts) <> 2 OR strpos(parts[1], marker) > 0 OR strpos(parts[2], marker) = 0 THEN
        RETURN NULL;
    END IF;
    RETURN ARRAY[parts[1], replace(parts[2], marker, '{tenant}')];
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The qualified, quoted name of a per-tenant object template for the tenant
-- whose key is tenant_key; NULL for a template that is not one.
CREATE FUNCTION community_deletion.community_deletion_tenant_object_name(template text, tenant_key text) RETURNS text
    LANGUAGE sql IMMUTABLE
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
        SELECT format('%I.%I', p[1], replace(p[2], '{tenant}', tenant_key))
        FROM (SELECT community_deletion_tenant_object_parts(template) AS p) parts
        WHERE p IS NOT NULL
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.enforce_community_deletion_storage_layout_guard() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
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
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Drops the per-tenant sequences the storage layout declares for the
-- tenant of community, and returns their names: as the schema's owner, for
-- the authorized executor of that community at its fence generation, with
-- its request at bindings_removed (42501, 55000 otherwise). A name that is
-- not a sequence is refused (55000); a sequence the schema's owner may not
-- drop fails the purge with what to change.
CREATE FUNCTION community_deletion.community_deletion_drop_tenant_objects(community uuid) RETURNS text[]
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, community_deletion, pg_temp
    SET lock_timeout = '2s'
    AS $$
DECLARE
    target record;
    template text;
    object_name text;
    relkind "char";
    dropped text[] := '{}';
BEGIN
    IF NOT community_deletion_is_member('community_deletion_executor') THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = format('drop of the per-tenant objects of community %s refused: role %s is not a member of community_deletion_executor', community, session_user);
    END IF;
    SELECT c.id, coalesce(c.tenant_key, c.id::text) AS tenant_key, c.deletion_state, c.deletion_fence_generation, r.stage, r.fence_generation
    INTO target
    FROM communities c
    LEFT JOIN community_deletion_requests r ON r.community_id = c.id AND r.stage <> 'aborted'
    WHERE c.id = community;
    IF target.id IS NULL OR target.deletion_state <> 'fenced' OR target.stage IS DISTINCT FROM 'bindings_removed'
       OR target.fence_generation IS DISTINCT FROM target.deletion_fence_generation
       OR coalesce(current_setting('community_deletion.executor_community', true), '') <> community::text
       OR coalesce(current_setting('community_deletion.fence_generation', true), '') <> target.deletion_fence_generation::text THEN
        RAISE EXCEPTION USING ERRCODE = '55000',
            MESSAGE = format('drop of the per-tenant objects of community %s refused: only the authorized executor drops them, while its deletion is at bindings_removed under the community''s fence generation', community);
    END IF;
    FOR template IN
        SELECT l.template FROM community_deletion_storage_layout l
        WHERE l.kind = 'sequence' AND l.action = 'declare'
          AND NOT EXISTS (SELECT 1 FROM community_deletion_storage_layout later
                          WHERE later.kind = l.kind AND later.template = l.template AND later.sequence > l.sequence)
        ORDER BY l.template
    LOOP
        object_name := community_deletion_tenant_object_name(template, target.tenant_key);
        SELECT c.relkind INTO relkind FROM pg_class c WHERE c.oid = to_regclass(object_name);
        CONTINUE WHEN NOT FOUND;
        IF relkind <> 'S' THEN
            RAISE EXCEPTION USING ERRCODE = '55000',
                MESSAGE = format('drop of %s refused: the layout''s template %L names it as a per-tenant sequence, but it is not a sequence; rename it or retire the template', object_name, template);
        END IF;
        BEGIN
            EXECUTE format('DROP SEQUENCE %s', object_name);
        EXCEPTION WHEN insufficient_privilege THEN
            RAISE EXCEPTION USING ERRCODE = '42501',
                MESSAGE = format('drop of per-tenant sequence %s refused: the owner of schema community_deletion drops per-tenant objects, and it does not own it (%s does); create them as that role, or make it their owner',
                                 object_name, (SELECT pg_get_userbyid(c.relowner) FROM pg_class c WHERE c.oid = to_regclass(object_name)));
        END;
        dropped := dropped || object_name;
    END LOOP;
    RETURN dropped;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The proof that a tombstoned tenant's declared per-tenant objects are gone:
-- the step to tombstone is refused while one exists (55000).
CREATE FUNCTION community_deletion.enforce_community_tenant_objects_proof() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
DECLARE
    object_name text;
BEGIN
    IF NEW.deletion_state IS DISTINCT FROM 'tombstone' OR OLD.deletion_state IS NOT DISTINCT FROM 'tombstone' THEN
        RETURN NEW;
    END IF;
    SELECT community_deletion_tenant_object_name(l.template, coalesce(OLD.tenant_key, OLD.id::text)) INTO object_name
    FROM community_deletion_storage_layout l
    WHERE l.kind = 'sequence' AND l.action = 'declare'
      AND NOT EXISTS (SELECT 1 FROM community_deletion_storage_layout later
                      WHERE later.kind = l.kind AND later.template = l.template AND later.sequence > l.sequence)
      AND to_regclass(community_deletion_tenant_object_name(l.template, coalesce(OLD.tenant_key, OLD.id::text))) IS NOT NULL
    ORDER BY l.template
    LIMIT 1;
    IF object_name IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = '55000',
            MESSAGE = format('tombstone of community %s refused: its per-tenant object %s still exists; drop it first',
                             coalesce(OLD.tenant_key, OLD.id::text), object_name);
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER communities_tenant_objects_proof BEFORE UPDATE ON community_deletion.communities
    FOR EACH ROW EXECUTE FUNCTION community_deletion.enforce_community_tenant_objects_proof();

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
            ('communities', 'communities_tenant_objects_proof', 'enforce_community_tenant_objects_proof()')
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

GRANT EXECUTE ON FUNCTION community_deletion.community_deletion_drop_tenant_objects(uuid) TO community_deletion_executor;
GRANT EXECUTE ON FUNCTION community_deletion.community_deletion_tenant_object_parts(text),
    community_deletion.community_deletion_tenant_object_name(text, text)
    TO community_deletion_serving, community_deletion_operator, community_deletion_executor;

SELECT community_deletion.community_deletion_seal_functions();

-- +goose Down
-- +goose StatementBegin
DO $refuse$
BEGIN
    IF EXISTS (SELECT 1 FROM community_deletion.community_deletion_storage_layout l WHERE l.kind IN ('object_keys', 'sequence')) THEN
        RAISE EXCEPTION USING ERRCODE = '55000',
            MESSAGE = 'migration 00027 down refused: object_keys or sequence templates are declared, which earlier releases cannot read; the layout is append-only, so it cannot be undone';
    END IF;
END
$refuse$;
-- +goose StatementEnd

DROP TRIGGER communities_tenant_objects_proof ON community_deletion.communities;
DROP FUNCTION community_deletion.enforce_community_tenant_objects_proof();
DROP FUNCTION community_deletion.community_deletion_drop_tenant_objects(uuid);
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.enforce_community_deletion_storage_layout_guard() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
DECLARE
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
    IF NEW.kind IS NULL OR NEW.kind NOT IN ('objects', 'cache') THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = format('storage layout kind %L refused: write ''objects'' for object-store prefixes or ''cache'' for cache key patterns', NEW.kind);
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
        IF after = '' OR left(after, 1) ~ '[[:alnum:]_*?\[\]\\-]' THEN
            RAISE EXCEPTION USING ERRCODE = '23514',
                MESSAGE = format('%s refused: {tenant} must be followed by a literal delimiter, or it also matches every tenant whose id it starts; write %L',
                                 subject, before || placeholder || ':' || CASE WHEN after = '' THEN '*' ELSE after END);
        END IF;
    END IF;
    NEW.declared_by := session_user;
    NEW.declared_at := now();
    RETURN NEW;
END
$$;
-- +goose StatementEnd

DROP FUNCTION community_deletion.community_deletion_tenant_object_name(text, text);
DROP FUNCTION community_deletion.community_deletion_tenant_object_parts(text);
ALTER TABLE community_deletion.community_deletion_storage_layout
    DROP CONSTRAINT community_deletion_storage_layout_kind_check,
    ADD CONSTRAINT community_deletion_storage_layout_kind_check CHECK (kind IN ('objects', 'cache'));

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
            'attach_child_table(regclass,regclass[],regclass[])',
            'attach_community_write_fence(regclass,text,name)',
            'community_deletion_attach_row_fence(regclass,text,text[])',
            'community_deletion_bound_args(text[])',
            'community_deletion_catalog_drift()',
            'community_deletion_catalog_notes()',
            'community_deletion_child_paths(oid,oid[],oid[])',
            'community_deletion_first_steps(jsonb,boolean)',
            'community_deletion_child_spec(regclass,regclass[],regclass[])',
            'community_deletion_control_digest(text)',
            'community_deletion_control_table(text)',
            'community_deletion_default_grace_period()',
            'community_deletion_expected_fence_args(oid,text,name,text,jsonb)',
            'community_deletion_fence_admit(uuid[],text)',
            'community_deletion_fence_args(name,text,jsonb)',
            'community_deletion_fence_bound(oid,name,jsonb)',
            'community_deletion_dangling_query(text,text[])',
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

SELECT community_deletion.community_deletion_seal_functions();
