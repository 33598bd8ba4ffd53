-- The community row guard: lifecycle states move only along their one path,
-- only inside the authorized deletion executor, and a tombstone is permanent.

-- +goose Up
-- +goose StatementBegin
-- Guards communities. A community is created active at fence generation 0.
-- deletion_state moves only active -> quiescing -> fenced -> tombstone, or
-- back to active from quiescing or fenced (an abort, which must raise the
-- fence generation); the generation never decreases and changes only with a
-- lifecycle step; every such step, and every change to a quiescing or fenced
-- community, needs the authorized executor settings (community_deletion.
-- executor_community and community_deletion.fence_generation naming the
-- community and its new fence generation), and must match the community's
-- open deletion request: quiesce and fence an approved request, abort an
-- approved or fenced one, tombstone one whose bindings are removed at this
-- fence generation. A community's host is pinned while a request names it.
-- A tombstone never changes and is never deleted; no community with a
-- deletion request is ever deleted.
CREATE OR REPLACE FUNCTION enforce_community_tombstone() RETURNS trigger
    LANGUAGE plpgsql VOLATILE
    AS $$
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

    IF coalesce(current_setting('community_deletion.executor_community', true), '') <> OLD.id::text
       OR coalesce(current_setting('community_deletion.fence_generation', true), '')
          <> NEW.deletion_fence_generation::text THEN
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
$$;
-- +goose StatementEnd

CREATE TRIGGER communities_tombstone_guard
    BEFORE INSERT OR UPDATE OR DELETE ON communities
    FOR EACH ROW EXECUTE FUNCTION enforce_community_tombstone();

-- +goose StatementBegin
-- Refuses TRUNCATE of the tables whose rows are permanent or guard a
-- deletion in flight: row triggers never see a TRUNCATE.
CREATE OR REPLACE FUNCTION refuse_community_deletion_truncate() RETURNS trigger
    LANGUAGE plpgsql VOLATILE
    AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = '55000',
        MESSAGE = format('TRUNCATE %I refused: its rows are deletion evidence or guard a deletion in flight', TG_TABLE_NAME);
END
$$;
-- +goose StatementEnd

CREATE TRIGGER communities_truncate_guard
    BEFORE TRUNCATE ON communities
    FOR EACH STATEMENT EXECUTE FUNCTION refuse_community_deletion_truncate();

-- +goose Down
DROP TRIGGER communities_truncate_guard ON communities;
DROP FUNCTION refuse_community_deletion_truncate();
DROP TRIGGER communities_tombstone_guard ON communities;
DROP FUNCTION enforce_community_tombstone();
