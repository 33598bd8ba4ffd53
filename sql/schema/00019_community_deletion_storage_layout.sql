-- The storage layout (docs/vendoring.md, "Declaring your storage layout"):
-- where a deployment keeps a tenant's objects and cache keys, declared once
-- in the database as templates with one {tenant} placeholder
-- ('uploads/{tenant}/', 'ws:{tenant}:*') and used by every inventory, so no
-- operator types prefixes per deletion and no default layout exists.
--
-- Only the schema's owner declares (the deletion roles may only read). The
-- table is append-only: a template is retired by inserting it again with
-- action 'retire', so the layout any past inventory was taken against can
-- be read back. The guard refuses, at declaration, a template that does not
-- isolate one tenant: an object prefix with a wildcard, or whose {tenant} is
-- not followed by '/' ('media/{tenant}' would also cover
-- 'media/<id>-decoy/'); a cache pattern with a glob character before
-- {tenant}, or whose {tenant} is not followed by a literal delimiter.
--
-- The request guard is replaced whole to allow one more step: an operator
-- re-inventories an unblocked inventoried request that has no approval,
-- replacing its whole frozen inventory.

-- +goose Up
CREATE TABLE community_deletion_storage_layout (
    sequence bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind text NOT NULL CHECK (kind IN ('objects', 'cache')),
    template text NOT NULL CHECK (octet_length(template) BETWEEN 1 AND 1024),
    action text NOT NULL DEFAULT 'declare' CHECK (action IN ('declare', 'retire')),
    reason text NOT NULL CHECK (btrim(reason) <> ''),
    declared_by name NOT NULL DEFAULT session_user,
    declared_at timestamptz NOT NULL DEFAULT now()
);

-- +goose StatementBegin
-- Guards community_deletion_storage_layout: append-only for every role
-- (23000); a declaration needs a template that isolates one tenant
-- (22023 malformed, 23514 not isolating) and not already declared (23505);
-- a retirement needs a declared template (22023).
CREATE OR REPLACE FUNCTION enforce_community_deletion_storage_layout_guard() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
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

CREATE TRIGGER community_deletion_storage_layout_guard
    BEFORE INSERT OR UPDATE OR DELETE ON community_deletion_storage_layout
    FOR EACH ROW EXECUTE FUNCTION enforce_community_deletion_storage_layout_guard();
CREATE TRIGGER community_deletion_storage_layout_truncate_guard
    BEFORE TRUNCATE ON community_deletion_storage_layout
    FOR EACH STATEMENT EXECUTE FUNCTION refuse_community_deletion_truncate();

REVOKE ALL ON community_deletion_storage_layout FROM PUBLIC;
GRANT SELECT ON community_deletion_storage_layout
    TO community_deletion_serving, community_deletion_operator, community_deletion_executor;

-- +goose StatementBegin
-- The request guard of migration 00015, whole, with one more step: an
-- operator's re-inventory of an unblocked, never approved inventoried
-- request replaces its whole frozen inventory.
CREATE OR REPLACE FUNCTION enforce_community_deletion_request_guard() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    AS $$
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
$$;

-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion_control_table(table_name text) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
        SELECT coalesce(table_name = ANY (ARRAY[
            'communities',
            'community_deletion_approvals',
            'community_deletion_checkpoints',
            'community_deletion_created_roles',
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
            'community_scoped_tables',
            'community_serving_write_leases',
            'storage_taxonomy_sweeps']), false)
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion_guard_triggers()
    RETURNS TABLE (table_name text, trigger_name text, function_signature text)
    LANGUAGE sql IMMUTABLE
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
            ('community_deletion_storage_layout', 'community_deletion_storage_layout_truncate_guard', 'refuse_community_deletion_truncate()')
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion_installed_functions() RETURNS text[]
    LANGUAGE sql IMMUTABLE
    AS $$
        SELECT ARRAY[
            'assert_community_write_allowed(uuid)',
            'attach_community_write_fence(regclass,text)',
            'community_deletion_catalog_drift()',
            'community_deletion_control_table(text)',
            'community_deletion_default_grace_period()',
            'community_deletion_fenced(oid)',
            'community_deletion_function_digest(oid)',
            'community_deletion_guard_triggers()',
            'community_deletion_health()',
            'community_deletion_installed_functions()',
            'community_deletion_is_member(name)',
            'community_deletion_lock_holders(bigint)',
            'community_deletion_lock_key(uuid)',
            'community_deletion_next_stage(text)',
            'community_deletion_operators_share_role()',
            'community_deletion_protection_state(uuid)',
            'community_deletion_purge_pressure()',
            'community_deletion_receipt_chain_head()',
            'community_deletion_register_table(regclass,text)',
            'community_deletion_require_member(name[],text)',
            'community_deletion_restore_active(uuid,timestamptz)',
            'community_deletion_seal_functions()',
            'community_deletion_stage_order()',
            'community_deletion_stage_runnable(text)',
            'community_deletion_step_authorized(uuid,text)',
            'community_deletion_unregister_table(text)',
            'community_schema_destruction_lock_key()',
            'community_write_allowed(uuid)',
            'community_write_fence_excluded_table(text)',
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
            'enforce_community_scoped_table_guard()',
            'enforce_community_serving_write_lease_guard()',
            'enforce_community_tombstone()',
            'enforce_community_tombstone_proof()',
            'enforce_community_write_fence()',
            'refuse_community_deletion_truncate()'
        ]
    $$;
-- +goose StatementEnd

SELECT community_deletion_seal_functions();

-- +goose Down
DROP TABLE community_deletion_storage_layout;
DROP FUNCTION enforce_community_deletion_storage_layout_guard();

-- +goose StatementBegin
-- The request guard, as migration 00011 left it, also refuses (42501) an
-- operator's change, on any of its paths (inventory, approval, abort,
-- unblock), to a column only the executor writes.
CREATE OR REPLACE FUNCTION enforce_community_deletion_request_guard() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    AS $$
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
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('deletion request %s refused: the frozen inventory is written once, by submitted -> inventoried', OLD.id);
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
$$;

-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion_control_table(table_name text) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
        SELECT coalesce(table_name = ANY (ARRAY[
            'communities',
            'community_deletion_approvals',
            'community_deletion_checkpoints',
            'community_deletion_created_roles',
            'community_deletion_executor_heartbeats',
            'community_deletion_function_digests',
            'community_deletion_manifest_keys',
            'community_deletion_protection_events',
            'community_deletion_purge_progress',
            'community_deletion_receipts',
            'community_deletion_requests',
            'community_deletion_settings',
            'community_deletion_step_authorizations',
            'community_scoped_tables',
            'community_serving_write_leases',
            'storage_taxonomy_sweeps']), false)
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion_guard_triggers()
    RETURNS TABLE (table_name text, trigger_name text, function_signature text)
    LANGUAGE sql IMMUTABLE
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
            ('community_deletion_receipts', 'community_deletion_receipts_truncate_guard', 'refuse_community_deletion_truncate()')
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion_installed_functions() RETURNS text[]
    LANGUAGE sql IMMUTABLE
    AS $$
        SELECT ARRAY[
            'assert_community_write_allowed(uuid)',
            'attach_community_write_fence(regclass,text)',
            'community_deletion_catalog_drift()',
            'community_deletion_control_table(text)',
            'community_deletion_default_grace_period()',
            'community_deletion_fenced(oid)',
            'community_deletion_function_digest(oid)',
            'community_deletion_guard_triggers()',
            'community_deletion_health()',
            'community_deletion_installed_functions()',
            'community_deletion_is_member(name)',
            'community_deletion_lock_holders(bigint)',
            'community_deletion_lock_key(uuid)',
            'community_deletion_next_stage(text)',
            'community_deletion_operators_share_role()',
            'community_deletion_protection_state(uuid)',
            'community_deletion_purge_pressure()',
            'community_deletion_receipt_chain_head()',
            'community_deletion_register_table(regclass,text)',
            'community_deletion_require_member(name[],text)',
            'community_deletion_restore_active(uuid,timestamptz)',
            'community_deletion_seal_functions()',
            'community_deletion_stage_order()',
            'community_deletion_stage_runnable(text)',
            'community_deletion_step_authorized(uuid,text)',
            'community_deletion_unregister_table(text)',
            'community_schema_destruction_lock_key()',
            'community_write_allowed(uuid)',
            'community_write_fence_excluded_table(text)',
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
            'enforce_community_scoped_table_guard()',
            'enforce_community_serving_write_lease_guard()',
            'enforce_community_tombstone()',
            'enforce_community_tombstone_proof()',
            'enforce_community_write_fence()',
            'refuse_community_deletion_truncate()'
        ]
    $$;
-- +goose StatementEnd

SELECT community_deletion_seal_functions();
