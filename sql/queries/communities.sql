-- name: CommunityFence :execrows
-- Fences a quiescing community under a new fence generation. The caller is
-- the authorized executor at that generation and holds the community lock.
UPDATE community_deletion.communities
SET deletion_state = 'fenced',
    deletion_fence_generation = @fence_generation,
    archived_at = COALESCE(archived_at, now())
WHERE id = @id
  AND deletion_state = 'quiescing';

-- name: CommunityGetByHost :one
-- The community whose tenant key is host (its id, as text, for a uuid
-- tenant; tenant_key for an integer or text one), or else whose host is
-- host (case-insensitive): a tenant of a declared tenant table has no host.
SELECT *
FROM community_deletion.communities
WHERE id = coalesce(
    (SELECT c.id FROM community_deletion.communities c WHERE c.id::text = lower(@host::text)),
    (SELECT c.id FROM community_deletion.communities c WHERE c.tenant_key = @host::text),
    (SELECT c.id FROM community_deletion.communities c WHERE lower(c.host) = lower(@host::text)));

-- name: CommunityGetByID :one
SELECT *
FROM community_deletion.communities
WHERE id = @id;

-- name: CommunityGetForUpdate :one
-- Locks the community row for a lifecycle step. FOR NO KEY UPDATE, not FOR
-- UPDATE: a writer's foreign key to communities holds FOR KEY SHARE on the row
-- before its fence trigger asks for the shared community lock, so FOR UPDATE
-- here (taken while holding the exclusive community lock) would deadlock with
-- every writer caught in between.
SELECT *
FROM community_deletion.communities
WHERE id = @id
FOR NO KEY UPDATE;

-- name: CommunityInsert :one
INSERT INTO community_deletion.communities (host, signing_key, icon)
VALUES (@host, sqlc.narg('signing_key'), sqlc.narg('icon'))
RETURNING *;

-- name: CommunityListByIDs :many
SELECT *
FROM community_deletion.communities
WHERE id = ANY(@ids::uuid[])
ORDER BY id;

-- name: CommunityQuiesce :execrows
-- Moves an active (or already quiescing) community to quiescing and marks it
-- archived unless it already was. The caller is the authorized executor at
-- the current fence generation and holds the community lock.
UPDATE community_deletion.communities
SET deletion_state = 'quiescing',
    archived_at = COALESCE(archived_at, now())
WHERE id = @id
  AND deletion_state IN ('active', 'quiescing')
  AND deleted_at IS NULL;

-- name: CommunityRestoreActive :one
-- Returns the quiescing or fenced community of an approved or fenced request
-- to active under a new fence generation, with the archived_at it had before
-- quiescing (an operator's abort), and returns that generation. The
-- operator is not the executor: the SECURITY DEFINER function authorizes
-- exactly this step for this transaction.
SELECT community_deletion.community_deletion_restore_active(@request_id::uuid, sqlc.narg('archived_at')::timestamptz)::bigint AS fence_generation;
