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
-- community and its new fence generation). A tombstone never changes and is
-- never deleted; no community with a deletion request is ever deleted.
CREATE OR REPLACE FUNCTION enforce_community_tombstone() RETURNS trigger
    LANGUAGE plpgsql VOLATILE
    AS $$
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
    IF NEW.deletion_state = OLD.deletion_state
       AND NEW.deletion_fence_generation = OLD.deletion_fence_generation
       AND OLD.deletion_state = 'active' THEN
        -- An ordinary change to an active community.
        RETURN NEW;
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
        WHEN NEW.deletion_state = 'active' THEN NEW.deletion_fence_generation > OLD.deletion_fence_generation
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
    RETURN NEW;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER communities_tombstone_guard
    BEFORE INSERT OR UPDATE OR DELETE ON communities
    FOR EACH ROW EXECUTE FUNCTION enforce_community_tombstone();

-- +goose Down
DROP TRIGGER communities_tombstone_guard ON communities;
DROP FUNCTION enforce_community_tombstone();
