-- Second thoughts before anything is destroyed: a grace period between
-- approval and the fence, and deletion protection, a per-community flag
-- that refuses a new deletion request while it is set.
--
-- Both are added as triggers of their own beside the existing guards, so
-- no earlier guard's body changes.

-- +goose Up

-- The deployment-wide default grace period, recorded like every setting in
-- an append-only row. Zero keeps today's behaviour: an approved request runs
-- at once.
ALTER TABLE community_deletion_settings
    ADD COLUMN default_grace_period interval NOT NULL DEFAULT interval '0',
    ADD CONSTRAINT community_deletion_settings_grace_period_check
        CHECK (default_grace_period >= interval '0' AND default_grace_period <= interval '30 days');

-- The grace period an approval chose (NULL: the deployment's default) and
-- the moment it ends, which the approval guard computes on database time.
ALTER TABLE community_deletion_approvals
    ADD COLUMN grace_period interval,
    ADD COLUMN grace_until timestamptz,
    ADD CONSTRAINT community_deletion_approvals_grace_period_check
        CHECK (grace_period IS NULL OR (grace_period >= interval '0' AND grace_period <= interval '30 days'));

-- Deletion protection: an append-only history per community. A community is
-- protected while its newest event is 'set' or 'clear_requested'; 'cleared'
-- needs a second operator, as an approval does.
CREATE TABLE community_deletion_protection_events (
    sequence bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    community_id uuid NOT NULL REFERENCES communities (id),
    action text NOT NULL CHECK (action IN ('set', 'clear_requested', 'cleared')),
    actor text NOT NULL CHECK (actor ~ '[^[:space:]]' AND octet_length(actor) <= 512),
    actor_role name NOT NULL DEFAULT session_user,
    reason text NOT NULL CHECK (reason ~ '[^[:space:]]' AND octet_length(reason) <= 4096),
    recorded_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX community_deletion_protection_events_community_idx
    ON community_deletion_protection_events (community_id, sequence DESC);

-- +goose StatementBegin
-- The deployment's default grace period: the newest setting's.
CREATE FUNCTION community_deletion_default_grace_period() RETURNS interval
    LANGUAGE sql STABLE
    AS $$
        SELECT coalesce((SELECT s.default_grace_period FROM community_deletion_settings s
                         ORDER BY s.sequence DESC LIMIT 1), interval '0')
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The newest protection event of a community, or NULL when it never had one.
CREATE FUNCTION community_deletion_protection_state(community uuid) RETURNS text
    LANGUAGE sql STABLE
    AS $$
        SELECT e.action FROM community_deletion_protection_events e
        WHERE e.community_id = community
        ORDER BY e.sequence DESC LIMIT 1
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Approvals: the grace period ends at approval time plus the approval's
-- grace period, or the deployment's default. Whatever the approver wrote in
-- grace_until is overwritten.
CREATE FUNCTION enforce_community_deletion_grace_period() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    AS $$
BEGIN
    NEW.grace_until := now() + coalesce(NEW.grace_period, community_deletion_default_grace_period());
    RETURN NEW;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Communities: no quiescing or fence before the grace period of the open
-- request's approval has ended, whoever asks.
CREATE FUNCTION enforce_community_deletion_grace_fence() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    AS $$
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
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Protection events: appended by operators only, in order (set, then a
-- clear request, then a clear by a second operator), never changed.
CREATE FUNCTION enforce_community_deletion_protection_guard() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    AS $$
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
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Deletion requests: none is submitted for a protected community.
CREATE FUNCTION enforce_community_deletion_protection_submit() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    AS $$
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
$$;
-- +goose StatementEnd

CREATE TRIGGER community_deletion_approvals_grace_period
    BEFORE INSERT ON community_deletion_approvals
    FOR EACH ROW EXECUTE FUNCTION enforce_community_deletion_grace_period();
CREATE TRIGGER communities_grace_fence_guard
    BEFORE UPDATE ON communities
    FOR EACH ROW EXECUTE FUNCTION enforce_community_deletion_grace_fence();
CREATE TRIGGER community_deletion_protection_events_guard
    BEFORE INSERT OR UPDATE OR DELETE ON community_deletion_protection_events
    FOR EACH ROW EXECUTE FUNCTION enforce_community_deletion_protection_guard();
CREATE TRIGGER community_deletion_protection_events_truncate_guard
    BEFORE TRUNCATE ON community_deletion_protection_events
    FOR EACH STATEMENT EXECUTE FUNCTION refuse_community_deletion_truncate();
CREATE TRIGGER community_deletion_requests_protection_guard
    BEFORE INSERT ON community_deletion_requests
    FOR EACH ROW EXECUTE FUNCTION enforce_community_deletion_protection_submit();

GRANT SELECT, INSERT ON community_deletion_protection_events TO community_deletion_operator;
GRANT SELECT ON community_deletion_protection_events TO community_deletion_executor, community_deletion_serving;
GRANT EXECUTE ON FUNCTION community_deletion_protection_state(uuid) TO community_deletion_operator, community_deletion_executor, community_deletion_serving;
GRANT EXECUTE ON FUNCTION community_deletion_default_grace_period() TO community_deletion_operator, community_deletion_executor;

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
            ('community_deletion_protection_events', 'community_deletion_protection_events_truncate_guard', 'refuse_community_deletion_truncate()')
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

-- +goose Down
DROP TRIGGER community_deletion_requests_protection_guard ON community_deletion_requests;
DROP TRIGGER community_deletion_protection_events_truncate_guard ON community_deletion_protection_events;
DROP TRIGGER community_deletion_protection_events_guard ON community_deletion_protection_events;
DROP TRIGGER communities_grace_fence_guard ON communities;
DROP TRIGGER community_deletion_approvals_grace_period ON community_deletion_approvals;
DROP FUNCTION enforce_community_deletion_protection_submit();
DROP FUNCTION enforce_community_deletion_protection_guard();
DROP FUNCTION enforce_community_deletion_grace_fence();
DROP FUNCTION enforce_community_deletion_grace_period();
DROP FUNCTION community_deletion_protection_state(uuid);
DROP FUNCTION community_deletion_default_grace_period();
DROP TABLE community_deletion_protection_events;
ALTER TABLE community_deletion_approvals
    DROP CONSTRAINT community_deletion_approvals_grace_period_check,
    DROP COLUMN grace_until,
    DROP COLUMN grace_period;
ALTER TABLE community_deletion_settings
    DROP CONSTRAINT community_deletion_settings_grace_period_check,
    DROP COLUMN default_grace_period;

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
            'community_deletion_purge_progress',
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
            ('community_deletion_requests', 'community_deletion_requests_guard', 'enforce_community_deletion_request_guard()'),
            ('community_deletion_requests', 'community_deletion_requests_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('community_deletion_approvals', 'community_deletion_approvals_guard', 'enforce_community_deletion_approval_guard()'),
            ('community_deletion_approvals', 'community_deletion_approvals_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('community_deletion_checkpoints', 'community_deletion_checkpoints_guard', 'enforce_community_deletion_checkpoint_guard()'),
            ('community_deletion_checkpoints', 'community_deletion_checkpoints_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('community_deletion_manifest_keys', 'community_deletion_manifest_keys_guard', 'enforce_community_deletion_manifest_key_guard()'),
            ('community_deletion_manifest_keys', 'community_deletion_manifest_keys_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('community_serving_write_leases', 'community_serving_write_leases_guard', 'enforce_community_serving_write_lease_guard()'),
            ('community_serving_write_leases', 'community_serving_write_leases_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('community_scoped_tables', 'community_scoped_tables_guard', 'enforce_community_scoped_table_guard()'),
            ('community_scoped_tables', 'community_scoped_tables_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('community_deletion_settings', 'community_deletion_settings_guard', 'enforce_community_deletion_settings_guard()'),
            ('community_deletion_settings', 'community_deletion_settings_truncate_guard', 'refuse_community_deletion_truncate()')
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
            'community_deletion_purge_pressure()',
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
            'enforce_community_deletion_manifest_key_guard()',
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
