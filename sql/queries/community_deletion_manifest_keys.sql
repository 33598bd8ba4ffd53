-- name: DeletionManifestKeyDeleteByRequest :execrows
-- Withdraws every chunk of a request; the guard refuses once the destructive
-- manifest is frozen (until the request is logically verified).
DELETE FROM community_deletion.community_deletion_manifest_keys
WHERE request_id = @request_id;

-- name: DeletionManifestKeyGetNextPending :one
-- The first chunk, in chunk order, not yet stamped deleted.
SELECT *
FROM community_deletion.community_deletion_manifest_keys
WHERE request_id = @request_id
  AND deleted_at IS NULL
ORDER BY chunk_no
LIMIT 1;

-- name: DeletionManifestKeyInsert :execrows
-- Appends one chunk; an existing chunk of the same number is left alone (the
-- caller compares it). The guard refuses unless the request is fenced and
-- not yet frozen.
INSERT INTO community_deletion.community_deletion_manifest_keys (request_id, chunk_no, prefix, keys)
VALUES (@request_id, @chunk_no, @prefix, @keys::jsonb)
ON CONFLICT (request_id, chunk_no) DO NOTHING;

-- name: DeletionManifestKeyListByRequest :many
SELECT *
FROM community_deletion.community_deletion_manifest_keys
WHERE request_id = @request_id
ORDER BY chunk_no;

-- name: DeletionManifestKeyMarkDeleted :execrows
-- Stamps one chunk deleted, once; the guard sets the database clock and
-- refuses unless the request is drained with its manifest frozen.
UPDATE community_deletion.community_deletion_manifest_keys
SET deleted_at = now()
WHERE request_id = @request_id
  AND chunk_no = @chunk_no
  AND deleted_at IS NULL;

-- name: DeletionManifestKeyMatches :one
-- Whether chunk chunk_no of the request holds exactly this prefix and keys.
SELECT EXISTS (
    SELECT 1
    FROM community_deletion.community_deletion_manifest_keys
    WHERE request_id = @request_id
      AND chunk_no = @chunk_no
      AND prefix = @prefix
      AND keys = @keys::jsonb
)::boolean AS matches;

-- name: DeletionManifestKeyProgress :one
SELECT count(*)::bigint AS total,
       count(deleted_at)::bigint AS deleted
FROM community_deletion.community_deletion_manifest_keys
WHERE request_id = @request_id;

-- name: DeletionRequestDestructiveStorageFreeze :execrows
-- Freezes the destructive storage manifest of a leased, unblocked, fenced
-- request that has none yet. The caller holds the request row lock.
UPDATE community_deletion.community_deletion_requests
SET destructive_storage_manifest = @manifest::jsonb,
    destructive_storage_frozen_at = now()
WHERE id = @id
  AND stage = 'fenced'
  AND lease_owner = @lease_owner
  AND lease_generation = @lease_generation
  AND lease_until >= now()
  AND blocked_at IS NULL
  AND destructive_storage_manifest IS NULL;

-- name: DeletionRequestDestructiveStorageMatches :one
-- Whether the request's frozen destructive storage manifest equals manifest
-- as jsonb (key order and white space aside).
SELECT (destructive_storage_manifest IS NOT NULL
        AND destructive_storage_manifest = @manifest::jsonb)::boolean AS matches
FROM community_deletion.community_deletion_requests
WHERE id = @id;
