-- Advisory locks and transaction-local settings of the deletion lifecycle.

-- name: CommunityDeletionLockExclusive :exec
-- Takes the community's deletion lock exclusively until the transaction ends.
-- Every lifecycle transition takes it before any row lock.
SELECT pg_advisory_xact_lock(community_deletion.community_deletion_lock_key(@community_id::uuid));

-- name: CommunityDeletionLockShared :exec
-- Takes the community's deletion lock shared until the transaction ends, as
-- every writer of community data does. It runs in a service's own
-- transaction too (GuardTransactionWithLease), under the service's
-- search_path, so it qualifies every name.
SELECT pg_catalog.pg_advisory_xact_lock_shared(community_deletion.community_deletion_lock_key(@community_id));

-- name: CommunityWriteAssertAllowed :exec
-- The explicit write admission: refuses REPEATABLE READ and SERIALIZABLE with
-- SQLSTATE 25000, takes the community's deletion lock shared until the
-- transaction ends, then refuses with SQLSTATE 55000 ("community write
-- refused: ...") unless community_write_allowed() admits the transaction.
-- It runs in a service's own transaction (GuardTransaction), under the
-- service's search_path, so it qualifies every name.
SELECT community_deletion.assert_community_write_allowed(@community_id);

-- name: DeletionExecutorSet :exec
-- Marks the transaction as the authorized deletion executor of a community at
-- a fence generation (transaction-local settings the guards read).
SELECT set_config('community_deletion.executor_community', @community_id::text, true),
       set_config('community_deletion.fence_generation', @fence_generation::text, true);

-- name: SchemaDestructionLockShared :exec
-- Takes the schema-destruction lock shared until the transaction ends; a
-- running migration holds it exclusively.
SELECT pg_advisory_xact_lock_shared(community_deletion.community_schema_destruction_lock_key());

-- name: SchemaDestructionLockTryShared :one
-- Tries the schema-destruction lock shared without waiting.
SELECT pg_try_advisory_xact_lock_shared(community_deletion.community_schema_destruction_lock_key())::boolean AS locked;

-- name: ServingWriteLeaseSet :exec
-- Carries a serving write lease in the transaction, for the write fence. It
-- runs in a service's own transaction, under the service's search_path, so
-- it qualifies every name.
SELECT pg_catalog.set_config('community_deletion.serving_write_lease_id', @lease_id, true),
       pg_catalog.set_config('community_deletion.serving_write_owner', @owner, true),
       pg_catalog.set_config('community_deletion.serving_write_generation', @generation, true),
       pg_catalog.set_config('community_deletion.serving_write_fence_generation', @fence_generation, true);

-- name: TransactionIsolationGet :one
-- The transaction's isolation level, as PostgreSQL names it ('read committed').
-- It runs in a service's own transaction, under the service's search_path,
-- so it qualifies every name.
SELECT pg_catalog.current_setting('transaction_isolation') AS isolation;

-- name: LockHoldersList :many
-- The sessions and prepared transactions that hold an advisory lock key, for
-- a lifecycle step whose lock wait timed out to name them.
SELECT coalesce(holder.pid, 0)::integer AS pid,
       coalesce(holder.role_name, '')::text AS role_name,
       coalesce(holder.application_name, '')::text AS application_name,
       holder.lock_mode::text AS lock_mode,
       coalesce(holder.prepared_gid, '')::text AS prepared_gid
FROM community_deletion.community_deletion_lock_holders(@lock_key::bigint)
    AS holder (pid, role_name, application_name, lock_mode, prepared_gid);

-- name: CommunityRowLockHoldersList :many
-- The sessions and prepared transactions that hold a lock on the row of
-- communities at @tuple (a ctid a lock wait named): the transaction in the
-- row's xmax while it is still running. A row locked by several
-- transactions at once (a multixact) names none.
SELECT coalesce(l.pid, 0)::integer AS pid,
       coalesce(a.usename::text, p.owner::text, '')::text AS role_name,
       coalesce(a.application_name, '')::text AS application_name,
       coalesce(a.state, '')::text AS state,
       coalesce(p.gid, '')::text AS prepared_gid
FROM community_deletion.communities c
JOIN pg_catalog.pg_locks l ON l.locktype = 'transactionid' AND l.granted AND l.mode = 'ExclusiveLock'
    AND l.transactionid = c.xmax
LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
LEFT JOIN pg_catalog.pg_prepared_xacts p ON p.transaction = l.transactionid
WHERE c.ctid = CAST(@tuple::text AS tid)
ORDER BY 1, 5;

-- name: RequestRowLockHoldersList :many
-- As CommunityRowLockHoldersList, for a row of community_deletion_requests.
SELECT coalesce(l.pid, 0)::integer AS pid,
       coalesce(a.usename::text, p.owner::text, '')::text AS role_name,
       coalesce(a.application_name, '')::text AS application_name,
       coalesce(a.state, '')::text AS state,
       coalesce(p.gid, '')::text AS prepared_gid
FROM community_deletion.community_deletion_requests r
JOIN pg_catalog.pg_locks l ON l.locktype = 'transactionid' AND l.granted AND l.mode = 'ExclusiveLock'
    AND l.transactionid = r.xmax
LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
LEFT JOIN pg_catalog.pg_prepared_xacts p ON p.transaction = l.transactionid
WHERE r.ctid = CAST(@tuple::text AS tid)
ORDER BY 1, 5;

-- name: TenantWriteAssertAllowed :exec
-- assert_tenant_write_allowed() in the caller's own transaction, whose
-- search_path is the service's: every name is qualified.
SELECT community_deletion.assert_tenant_write_allowed(@tenant_key::pg_catalog.text);

-- name: FenceMarkerHoldersList :many
-- The sessions and prepared transactions that hold the fence marker's
-- lock: those that wrote on the fence's near-free path, which a community
-- leaving active waits for.
SELECT coalesce(holder.pid, 0)::integer AS pid,
       coalesce(holder.role_name, '')::text AS role_name,
       coalesce(holder.application_name, '')::text AS application_name,
       holder.lock_mode::text AS lock_mode,
       coalesce(holder.prepared_gid, '')::text AS prepared_gid
FROM community_deletion.community_deletion_fence_marker_holders() AS holder;

-- name: FenceMarkerLock :exec
-- Takes the fence marker's advisory lock exclusively until the transaction
-- ends (waiting at most its lock_timeout for the transactions that wrote on
-- the fence's near-free path). BeginQuiescing takes it before the
-- community's own lock, in the order the marker's trigger needs.
SELECT community_deletion.community_deletion_fence_marker_lock();

-- name: FenceMarkerSettle :one
-- Recomputes the fence marker from committed states, in a transaction that
-- has written nothing, and returns it.
SELECT community_deletion.community_deletion_settle_fence_marker()::bigint AS marker;

-- name: FenceDrain :one
-- While the write fence is dormant, takes every table whose fence has the
-- dormant path in SHARE mode until the transaction ends, waiting for the
-- writes it admitted, and returns how many it locked (0 when the fence is
-- armed). BeginQuiescing runs it after the fence marker's lock and before
-- the community's; the marker's trigger arms the fence only if it ran.
SELECT community_deletion.community_deletion_fence_drain()::integer AS drained;

-- name: FenceDormant :one
-- Whether the write fence is dormant: no community has left active since
-- the last settle found none in flight.
SELECT community_deletion.community_deletion_fence_dormant()::boolean AS dormant;
