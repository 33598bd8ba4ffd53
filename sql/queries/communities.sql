-- name: CommunityGetByHost :one
SELECT *
FROM communities
WHERE lower(host) = lower(@host);

-- name: CommunityGetByID :one
SELECT *
FROM communities
WHERE id = @id;

-- name: CommunityInsert :one
INSERT INTO communities (host, signing_key, icon)
VALUES (@host, sqlc.narg('signing_key'), sqlc.narg('icon'))
RETURNING *;

-- name: CommunityListByIDs :many
SELECT *
FROM communities
WHERE id = ANY(@ids::uuid[])
ORDER BY id;
