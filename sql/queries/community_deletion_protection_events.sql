-- name: ProtectionEventInsert :one
-- The protection guard checks the order of events and the second operator,
-- and sets actor_role and recorded_at.
INSERT INTO community_deletion.community_deletion_protection_events (community_id, action, actor, reason)
VALUES (@community_id, @action, @actor, @reason)
RETURNING *;

-- name: ProtectionEventsByCommunity :many
-- A community's protection history, newest first.
SELECT *
FROM community_deletion.community_deletion_protection_events
WHERE community_id = @community_id
ORDER BY sequence DESC
LIMIT @max_events;
