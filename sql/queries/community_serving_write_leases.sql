-- name: ServingWriteLeaseCountActive :one
-- Counts a community's unexpired serving write leases and names their
-- distinct operations, sorted. It gates the fence, so it judges expiry on
-- now(), which errs towards "still active". Served by
-- community_serving_write_leases_community_idx.
SELECT count(*)::bigint AS active_count,
       coalesce(array_agg(DISTINCT lease.operation ORDER BY lease.operation), '{}')::text[] AS operations
FROM community_deletion.community_serving_write_leases lease
WHERE lease.community_id = @community_id
  AND lease.lease_until >= now();

-- name: ServingWriteLeaseDelete :execrows
-- Releases exactly one lease; a lease already reaped deletes nothing.
DELETE FROM community_deletion.community_serving_write_leases
WHERE id = @id
  AND community_id = @community_id
  AND owner = @owner
  AND generation = @generation
  AND fence_generation = @fence_generation;

-- name: ServingWriteLeaseDeleteExpired :execrows
-- Reaps at most max_rows expired leases, oldest expiry first, skipping rows
-- another transaction holds. The row lock rechecks expiry against a
-- concurrent renewal, and the guard never extends an expired lease. Served
-- by community_serving_write_leases_lease_until_idx, then the primary key.
WITH expired AS (
    SELECT id
    FROM community_deletion.community_serving_write_leases
    WHERE lease_until < now()
    ORDER BY lease_until
    LIMIT @max_rows::integer
    FOR UPDATE SKIP LOCKED
)
DELETE FROM community_deletion.community_serving_write_leases
WHERE id = ANY (ARRAY(SELECT expired.id FROM expired));

-- name: ServingWriteLeaseInsert :one
-- Admits a new lease for an active community at its current fence generation.
-- The caller has already asserted the write admission (which holds the shared
-- community lock); the row guard asserts it again and draws the generation
-- from community_serving_write_lease_generation_seq. No row: not active.
INSERT INTO community_deletion.community_serving_write_leases (community_id, operation, owner, fence_generation, lease_until)
SELECT community.id,
       @operation::text,
       @owner::text,
       community.deletion_fence_generation,
       now() + make_interval(secs => @lease_seconds::bigint)
FROM community_deletion.communities community
WHERE community.id = @community_id
  AND community.deletion_state = 'active'
RETURNING *;

-- name: ServingWriteLeaseRenew :one
-- Extends exactly this unexpired lease while its community is active at
-- the lease's fence generation (once quiescing, a lease only runs out). The
-- caller holds the shared community lock. No row: the lease is stale.
UPDATE community_deletion.community_serving_write_leases lease
SET lease_until = now() + make_interval(secs => @lease_seconds::bigint),
    heartbeat_at = now()
FROM community_deletion.communities community
WHERE lease.id = @id
  AND lease.community_id = @community_id
  AND lease.owner = @owner
  AND lease.generation = @generation
  AND lease.fence_generation = @fence_generation
  AND lease.lease_until >= clock_timestamp()
  AND community.id = lease.community_id
  AND community.deletion_state = 'active'
  AND community.deletion_fence_generation = lease.fence_generation
RETURNING lease.lease_until;

-- name: ServingWriteLeaseStats :one
-- Active and expired lease counts and PostgreSQL's dead-tuple estimate for
-- the lease table.
SELECT count(*) FILTER (WHERE lease.lease_until >= now())::bigint AS active,
       count(*) FILTER (WHERE lease.lease_until < now())::bigint AS expired,
       pg_stat_get_dead_tuples('community_deletion.community_serving_write_leases'::regclass)::bigint AS dead_tuples
FROM community_deletion.community_serving_write_leases lease;

-- name: ServingWriteLeaseValid :one
-- Whether exactly this lease is unexpired and its community is active or
-- quiescing at the lease's fence generation. Expiry is judged on
-- clock_timestamp(), so a lease that expired while the transaction waited
-- for a lock is never taken as current. It runs in a service's own
-- transaction too (GuardTransactionWithLease), under the service's
-- search_path, so it qualifies every name and operator.
SELECT EXISTS (
    SELECT 1
    FROM community_deletion.community_serving_write_leases lease
    JOIN community_deletion.communities community ON community.id OPERATOR(pg_catalog.=) lease.community_id
    WHERE lease.id OPERATOR(pg_catalog.=) @id
      AND lease.community_id OPERATOR(pg_catalog.=) @community_id
      AND lease.owner OPERATOR(pg_catalog.=) @owner
      AND lease.generation OPERATOR(pg_catalog.=) @generation
      AND lease.fence_generation OPERATOR(pg_catalog.=) @fence_generation
      AND lease.lease_until OPERATOR(pg_catalog.>=) pg_catalog.clock_timestamp()
      AND community.deletion_state OPERATOR(pg_catalog.=) ANY ('{active,quiescing}'::pg_catalog.text[])
      AND community.deletion_fence_generation OPERATOR(pg_catalog.=) lease.fence_generation
) AS valid;
