-- Guards on the deletion control plane: requests, approvals, the frozen key
-- manifest and serving-write leases. They make forged, skipped, rewound or
-- retargeted lifecycle records unrepresentable, whatever code writes them.

-- +goose Up
-- +goose StatementBegin
-- The next stage of a request, or NULL for the terminal stages.
CREATE OR REPLACE FUNCTION community_deletion_next_stage(stage text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
        SELECT CASE stage
            WHEN 'submitted' THEN 'inventoried'
            WHEN 'inventoried' THEN 'approved'
            WHEN 'approved' THEN 'fenced'
            WHEN 'fenced' THEN 'drained'
            WHEN 'drained' THEN 'bindings_removed'
            WHEN 'bindings_removed' THEN 'postgres_purged'
            WHEN 'postgres_purged' THEN 'cache_purged'
            WHEN 'cache_purged' THEN 'logically_verified'
            WHEN 'logically_verified' THEN 'retention_pending'
        END
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
-- Guards community_deletion_requests. A request is born 'submitted' with
-- nothing frozen, and is never deleted. Its target (community_id,
-- community_host), requested_by and created_at never change; the inventory
-- (schema_manifest, storage_manifest, inventory_manifest, inventory_digest,
-- inventory_frozen_at) is written once, by the submitted -> inventoried step;
-- the destructive storage manifest is written once, while fenced. The stage
-- moves one step forward, or to aborted from submitted, inventoried, approved
-- or fenced; aborted and retention_pending are terminal. It becomes approved
-- only with a matching approval row; from fenced to bindings_removed (and
-- the destructive freeze) only while the community is fenced at the request's
-- fence generation, from postgres_purged on only when it is that generation's
-- tombstone, and aborted only when the community is active again;
-- drained needs the destructive manifest frozen. A stage change runs at READ
-- COMMITTED. lease_generation never decreases; fence_generation is set only by
-- the step to fenced or aborted and never decreases; created_at and
-- updated_at are the database clock.
CREATE OR REPLACE FUNCTION enforce_community_deletion_request_guard() RETURNS trigger
    LANGUAGE plpgsql VOLATILE
    AS $$
DECLARE
    community_state text;
    community_generation bigint;
    community_host text;
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
        NEW.created_at := now();
        NEW.updated_at := now();
        NEW.next_attempt_at := now();
        RETURN NEW;
    END IF;

    IF OLD.stage IN ('aborted', 'retention_pending') THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('deletion request %s refused: stage %s is terminal', OLD.id, OLD.stage);
    END IF;
    IF (NEW.id, NEW.community_id, NEW.community_host, NEW.requested_by, NEW.created_at)
       IS DISTINCT FROM (OLD.id, OLD.community_id, OLD.community_host, OLD.requested_by, OLD.created_at) THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('deletion request %s refused: its target, requester and creation time never change', OLD.id);
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

CREATE TRIGGER community_deletion_requests_guard
    BEFORE INSERT OR UPDATE OR DELETE ON community_deletion_requests
    FOR EACH ROW EXECUTE FUNCTION enforce_community_deletion_request_guard();

-- +goose StatementBegin
-- Guards community_deletion_approvals. An approval is inserted only for an
-- unblocked 'inventoried' request whose community and frozen inventory digest
-- it repeats, and only by someone other than the requester (the two-person
-- rule, compared ignoring case and surrounding whitespace). It takes the request row lock
-- first, so it serializes with every change to the request. approved_at is the
-- database clock. An approval is never updated or deleted.
CREATE OR REPLACE FUNCTION enforce_community_deletion_approval_guard() RETURNS trigger
    LANGUAGE plpgsql VOLATILE
    AS $$
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
    NEW.approved_at := now();
    RETURN NEW;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER community_deletion_approvals_guard
    BEFORE INSERT OR UPDATE OR DELETE ON community_deletion_approvals
    FOR EACH ROW EXECUTE FUNCTION enforce_community_deletion_approval_guard();

-- +goose StatementBegin
-- Guards community_deletion_manifest_keys. A chunk is inserted only while its
-- request is 'fenced' with no destructive manifest frozen yet, under a lock on
-- the request row that the freeze also takes, so a late chunk can never slip
-- in beside a freeze. request_id, chunk_no, prefix and keys never change;
-- deleted_at goes from NULL to the database clock once, while the request is
-- drained. A chunk is deleted only before its request's destructive manifest
-- is frozen, or once the request reached logically_verified. Rejections use
-- SQLSTATE 23000.
CREATE OR REPLACE FUNCTION enforce_community_deletion_manifest_key_guard() RETURNS trigger
    LANGUAGE plpgsql VOLATILE
    AS $$
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
$$;
-- +goose StatementEnd

CREATE TRIGGER community_deletion_manifest_keys_guard
    BEFORE INSERT OR UPDATE OR DELETE ON community_deletion_manifest_keys
    FOR EACH ROW EXECUTE FUNCTION enforce_community_deletion_manifest_key_guard();

-- +goose StatementBegin
-- Guards community_serving_write_leases, the admission record of an external
-- serving side effect. A lease is inserted only through the write admission
-- (READ COMMITTED, shared community lock) for an active community, at its
-- current fence generation, with a fresh generation from the table's sequence.
-- Its identity (id, community, operation, owner, generations, created_at) never
-- changes, and it is extended only while unexpired and while its community is
-- still active or quiescing at the same fence generation. Release and reaping
-- delete freely.
CREATE OR REPLACE FUNCTION enforce_community_serving_write_lease_guard() RETURNS trigger
    LANGUAGE plpgsql VOLATILE
    AS $$
DECLARE
    community_state text;
    community_generation bigint;
BEGIN
    IF TG_OP = 'INSERT' THEN
        PERFORM assert_community_write_allowed(NEW.community_id);
        SELECT c.deletion_state, c.deletion_fence_generation INTO community_state, community_generation
        FROM communities c WHERE c.id = NEW.community_id;
        IF community_state IS DISTINCT FROM 'active' OR NEW.fence_generation IS DISTINCT FROM community_generation THEN
            RAISE EXCEPTION USING ERRCODE = '55000',
                MESSAGE = format('community write refused: a new serving write lease needs community %s active at fence generation %s, and it is %s at %s',
                                 NEW.community_id, NEW.fence_generation, coalesce(community_state, 'missing'), community_generation);
        END IF;
        NEW.generation := nextval('community_serving_write_lease_generation_seq');
        NEW.created_at := now();
        NEW.heartbeat_at := now();
        RETURN NEW;
    END IF;

    IF (NEW.id, NEW.community_id, NEW.operation, NEW.owner, NEW.generation, NEW.fence_generation, NEW.created_at)
       IS DISTINCT FROM (OLD.id, OLD.community_id, OLD.operation, OLD.owner, OLD.generation, OLD.fence_generation, OLD.created_at) THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('serving write lease %s refused: a lease''s identity never changes', OLD.id);
    END IF;
    IF NEW.lease_until > OLD.lease_until THEN
        IF current_setting('transaction_isolation') <> 'read committed' THEN
            RAISE EXCEPTION USING ERRCODE = '25000',
                MESSAGE = format('community write refused: isolation level %s pins a snapshot that cannot see the deletion fence',
                                 current_setting('transaction_isolation'));
        END IF;
        PERFORM pg_advisory_xact_lock_shared(community_deletion_lock_key(OLD.community_id));
        SELECT c.deletion_state, c.deletion_fence_generation INTO community_state, community_generation
        FROM communities c WHERE c.id = NEW.community_id;
        IF OLD.lease_until < clock_timestamp()
           OR community_state NOT IN ('active', 'quiescing') OR community_state IS NULL
           OR community_generation IS DISTINCT FROM OLD.fence_generation THEN
            RAISE EXCEPTION USING ERRCODE = '55000',
                MESSAGE = format('community write refused: serving write lease %s is expired or its community %s is %s at fence generation %s',
                                 OLD.id, OLD.community_id, coalesce(community_state, 'missing'), community_generation);
        END IF;
    END IF;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER community_serving_write_leases_guard
    BEFORE INSERT OR UPDATE ON community_serving_write_leases
    FOR EACH ROW EXECUTE FUNCTION enforce_community_serving_write_lease_guard();

CREATE TRIGGER community_deletion_requests_truncate_guard
    BEFORE TRUNCATE ON community_deletion_requests
    FOR EACH STATEMENT EXECUTE FUNCTION refuse_community_deletion_truncate();
CREATE TRIGGER community_deletion_approvals_truncate_guard
    BEFORE TRUNCATE ON community_deletion_approvals
    FOR EACH STATEMENT EXECUTE FUNCTION refuse_community_deletion_truncate();
CREATE TRIGGER community_deletion_checkpoints_truncate_guard
    BEFORE TRUNCATE ON community_deletion_checkpoints
    FOR EACH STATEMENT EXECUTE FUNCTION refuse_community_deletion_truncate();
CREATE TRIGGER community_deletion_manifest_keys_truncate_guard
    BEFORE TRUNCATE ON community_deletion_manifest_keys
    FOR EACH STATEMENT EXECUTE FUNCTION refuse_community_deletion_truncate();
CREATE TRIGGER community_serving_write_leases_truncate_guard
    BEFORE TRUNCATE ON community_serving_write_leases
    FOR EACH STATEMENT EXECUTE FUNCTION refuse_community_deletion_truncate();

-- +goose Down
DROP TRIGGER community_serving_write_leases_truncate_guard ON community_serving_write_leases;
DROP TRIGGER community_deletion_manifest_keys_truncate_guard ON community_deletion_manifest_keys;
DROP TRIGGER community_deletion_checkpoints_truncate_guard ON community_deletion_checkpoints;
DROP TRIGGER community_deletion_approvals_truncate_guard ON community_deletion_approvals;
DROP TRIGGER community_deletion_requests_truncate_guard ON community_deletion_requests;
DROP TRIGGER community_serving_write_leases_guard ON community_serving_write_leases;
DROP FUNCTION enforce_community_serving_write_lease_guard();
DROP TRIGGER community_deletion_manifest_keys_guard ON community_deletion_manifest_keys;
DROP FUNCTION enforce_community_deletion_manifest_key_guard();
DROP TRIGGER community_deletion_approvals_guard ON community_deletion_approvals;
DROP FUNCTION enforce_community_deletion_approval_guard();
DROP TRIGGER community_deletion_requests_guard ON community_deletion_requests;
DROP FUNCTION enforce_community_deletion_request_guard();
DROP FUNCTION community_deletion_next_stage(text);
