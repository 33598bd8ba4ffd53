-- name: ReceiptChainHead :one
-- The newest receipt's sequence and hash (0 and '' for none) and the
-- schema version (0 if unknown), after queueing on the chain's advisory lock.
SELECT h.sequence::bigint AS sequence, coalesce(h.body_sha256, '')::text AS body_sha256,
       coalesce(h.schema_version, 0)::bigint AS schema_version
FROM community_deletion.community_deletion_receipt_chain_head() h;

-- name: ReceiptFacts :one
-- What a completed request's receipt states from its request, approval,
-- community (the tombstone) and the deployment's settings.
SELECT r.community_id, c.host, c.tenant_key, c.deleted_at, r.requested_by, coalesce(r.requested_by_role::text, '')::text AS requested_by_role,
       r.inventory_digest, r.destructive_storage_manifest, r.created_at, r.inventory_frozen_at, r.completed_at,
       a.approved_by, coalesce(a.approved_by_role::text, '')::text AS approved_by_role, a.approved_at,
       community_deletion.community_deletion_operators_share_role()::boolean AS operators_share_role
FROM community_deletion.community_deletion_requests r
JOIN community_deletion.community_deletion_approvals a ON a.request_id = r.id
JOIN community_deletion.communities c ON c.id = r.community_id
WHERE r.id = @id;

-- name: ReceiptStageCheckpoints :many
-- The completed checkpoints of the units that moved a request from stage
-- to stage: at most one row per (stage, unit), found through the unit index.
SELECT stage, unit_key, completed_at, detail
FROM community_deletion.community_deletion_checkpoints
WHERE request_id = @request_id AND status = 'completed'
  AND stage = ANY (@stages::text[]) AND unit_key = ANY (@unit_keys::text[]);

-- name: ReceiptInsert :exec
INSERT INTO community_deletion.community_deletion_receipts
    (sequence, request_id, body, body_sha256, previous_sha256, signature, signer)
VALUES (@sequence, @request_id::uuid, @body, @body_sha256, sqlc.narg('previous_sha256'), @signature, @signer);

-- name: ReceiptGetByRequest :one
SELECT sequence, body, signature
FROM community_deletion.community_deletion_receipts
WHERE request_id = @request_id::uuid;

-- name: ReceiptList :many
-- Receipts after sequence after, in chain order, at most max_rows.
SELECT sequence, body, signature
FROM community_deletion.community_deletion_receipts
WHERE sequence > @after
ORDER BY sequence
LIMIT @max_rows;

-- name: ReceiptKeyRegistered :many
-- The newest row of the receipt key registry (migration 00028), if any:
-- how the deployment signs its receipts now.
SELECT k.sequence, k.action, coalesce(k.key_id, '')::text AS key_id, coalesce(k.public_key, '')::text AS public_key,
       k.previous_key_lost, k.reason, k.declared_by::text AS declared_by, k.declared_at
FROM community_deletion.community_deletion_receipt_keys k
ORDER BY k.sequence DESC
LIMIT 1;

-- name: ReceiptNewest :many
-- The newest entry of the chain (a receipt or a key rotation), if any.
SELECT r.sequence, r.kind, r.body, r.signature, r.signer
FROM community_deletion.community_deletion_receipts r
ORDER BY r.sequence DESC
LIMIT 1;

-- name: ReceiptRotationInsert :exec
INSERT INTO community_deletion.community_deletion_receipts
    (sequence, kind, body, body_sha256, previous_sha256, signature, signer)
VALUES (@sequence, 'rotation', @body, @body_sha256, @previous_sha256, @signature, @signer);

-- name: ReceiptExclusions :many
-- Every exclusion of a table in force at some time from the request's
-- submission until now (migration 00030): the table, schema-qualified,
-- why, who and when, and when the table's next exclusion event ended it
-- (ended false while it is in force), in table and event order.
SELECT format('%I.%I', e.table_schema, e.table_name)::text AS table_name,
       e.reason, e.actor::text AS excluded_by, e.recorded_at AS excluded_at,
       (next_event.recorded_at IS NOT NULL)::boolean AS ended,
       coalesce(next_event.recorded_at, e.recorded_at)::timestamptz AS ended_at
FROM community_deletion.community_deletion_exclusion_events e
CROSS JOIN (SELECT r.created_at FROM community_deletion.community_deletion_requests r WHERE r.id = @request_id::uuid) request
LEFT JOIN LATERAL (SELECT l.recorded_at FROM community_deletion.community_deletion_exclusion_events l
                   WHERE l.table_schema = e.table_schema AND l.table_name = e.table_name AND l.sequence > e.sequence
                   ORDER BY l.sequence LIMIT 1) next_event ON true
WHERE e.action = 'exclude'
  AND (next_event.recorded_at IS NULL OR next_event.recorded_at >= request.created_at)
ORDER BY 1, e.sequence;
