-- The bounded PostgreSQL purge (lifecycle/purge.go). The per-table DELETE,
-- UPDATE and EXISTS statements are built in Go from the table and column
-- names these queries return, all read from the registry and the catalog.

-- name: PurgeTableShapes :many
-- Every registered table that exists in its recorded schema, with what
-- the purge needs to batch it: its schema; its tenant key column ('' for a
-- table attached through its parents), the key's kind and the cast its
-- text takes to compare with that column; its tenant row filter
-- (community_deletion_tenant_filter(), whose $1 is the tenant key as text);
-- whether it is attached through its parents; whether it is partitioned;
-- the primary key column besides the tenant key when the primary key is
-- that one column, alone or together with the tenant key ('' otherwise);
-- whether a valid, non-partial btree index leads with (tenant key, that
-- column); whether a valid, non-partial index leads with the tenant key;
-- whether any foreign key references the table.
SELECT registered.table_name::text AS table_name,
       registered.purge_action::text AS purge_action,
       n.nspname::text AS schema_name,
       coalesce(registered.tenant_key::text, '')::text AS tenant_key,
       coalesce(registered.key_kind, 'uuid')::text AS key_kind,
       community_deletion.community_deletion_key_cast(coalesce(registered.key_kind, 'uuid'))::text AS key_cast,
       community_deletion.community_deletion_tenant_filter(n.nspname, c.relname, NULL)::text AS tenant_filter,
       (registered.parents IS NOT NULL)::boolean AS child,
       (c.relkind = 'p')::boolean AS partitioned,
       coalesce(pk.key_column::text, '')::text AS key_column,
       coalesce(pk.key_indexed, false)::boolean AS key_indexed,
       (community.attnum IS NOT NULL AND EXISTS (
           SELECT 1 FROM pg_catalog.pg_index i
           WHERE i.indrelid = c.oid AND i.indisvalid AND i.indpred IS NULL
             AND i.indkey[0] = community.attnum
       ))::boolean AS community_indexed,
       EXISTS (
           SELECT 1 FROM pg_catalog.pg_constraint f WHERE f.contype = 'f' AND f.confrelid = c.oid
       )::boolean AS referenced
FROM community_deletion.community_scoped_tables registered
JOIN pg_catalog.pg_class c ON c.relname = registered.table_name
    AND c.relnamespace = (SELECT rn.oid FROM pg_catalog.pg_namespace rn WHERE rn.nspname = registered.table_schema)
    AND c.relkind IN ('r', 'p')
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_catalog.pg_attribute community ON community.attrelid = c.oid AND community.attname = registered.tenant_key
    AND NOT community.attisdropped
LEFT JOIN LATERAL (
    SELECT a.attname AS key_column,
           community.attnum IS NOT NULL AND EXISTS (
               SELECT 1 FROM pg_catalog.pg_index i
               JOIN pg_catalog.pg_class ic ON ic.oid = i.indexrelid
               JOIN pg_catalog.pg_am am ON am.oid = ic.relam AND am.amname = 'btree'
               WHERE i.indrelid = c.oid AND i.indisvalid AND i.indpred IS NULL AND i.indnkeyatts >= 2
                 AND i.indkey[0] = community.attnum AND i.indkey[1] = a.attnum
           ) AS key_indexed
    FROM pg_catalog.pg_constraint p
    JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum = ANY (p.conkey) AND a.attnum IS DISTINCT FROM community.attnum
    WHERE p.conrelid = c.oid AND p.contype = 'p'
      AND (cardinality(p.conkey) = 1 OR (cardinality(p.conkey) = 2 AND community.attnum = ANY (p.conkey)))
) pk ON true
WHERE registered.parents IS NOT NULL OR community.attnum IS NOT NULL
ORDER BY registered.table_name;

-- name: PurgeForeignKeys :many
-- The foreign keys between registered 'delete' tables (partitions mapped to
-- their partitioned root; the per-partition clones skipped), with whether the
-- ON DELETE action removes or clears the child rows itself (CASCADE, SET
-- NULL, SET DEFAULT), whether every referencing column is nullable, and the
-- referencing columns in key order.
SELECT child.relname::text AS child_table,
       parent.relname::text AS parent_table,
       con.conname::text AS constraint_name,
       (con.confdeltype IN ('c', 'n', 'd'))::boolean AS soft,
       coalesce(NOT EXISTS (
           SELECT 1 FROM pg_catalog.pg_attribute a
           WHERE a.attrelid = con.conrelid AND a.attnum = ANY (con.conkey) AND a.attnotnull
       ), false)::boolean AS nullable,
       ARRAY(
           SELECT a.attname::text
           FROM unnest(con.conkey) WITH ORDINALITY AS k (attnum, position)
           JOIN pg_catalog.pg_attribute a ON a.attrelid = con.conrelid AND a.attnum = k.attnum
           ORDER BY k.position
       )::text[] AS columns
FROM pg_catalog.pg_constraint con
JOIN pg_catalog.pg_class child ON child.oid = coalesce(pg_partition_root(con.conrelid), con.conrelid)
JOIN pg_catalog.pg_class parent ON parent.oid = coalesce(pg_partition_root(con.confrelid), con.confrelid)
WHERE con.contype = 'f' AND con.conparentid = 0
  AND EXISTS (
      SELECT 1 FROM community_deletion.community_scoped_tables r
      JOIN pg_catalog.pg_namespace rn ON rn.nspname = r.table_schema
      WHERE r.purge_action = 'delete' AND r.table_name = child.relname AND rn.oid = child.relnamespace)
  AND EXISTS (
      SELECT 1 FROM community_deletion.community_scoped_tables r
      JOIN pg_catalog.pg_namespace rn ON rn.nspname = r.table_schema
      WHERE r.purge_action = 'delete' AND r.table_name = parent.relname AND rn.oid = parent.relnamespace)
UNION
-- A table attached through its parents goes before each of them, whether
-- a foreign key or a declared reference leads there; one attached through
-- the rows that reference it goes after their table.
SELECT CASE WHEN reverse THEN step_table ELSE registered.table_name::text END AS child_table,
       CASE WHEN reverse THEN registered.table_name::text ELSE step_table END AS parent_table,
       'reference of '::text || registered.table_name::text AS constraint_name,
       false AS soft,
       false AS nullable,
       ARRAY(SELECT c.value FROM jsonb_array_elements_text(p.value -> 'hops' -> 0 -> 'columns') c)::text[] AS columns
FROM community_deletion.community_scoped_tables registered
CROSS JOIN LATERAL jsonb_array_elements(registered.parents) p
CROSS JOIN LATERAL (SELECT (p.value -> 'hops' -> 0 ->> 'table')::text AS step_table,
                           coalesce((p.value -> 'hops' -> 0 ->> 'reverse')::boolean, false) AS reverse) step
WHERE registered.parents IS NOT NULL
ORDER BY 1, 2, 3;

-- name: PurgeCommunityPartitions :many
-- The partitions of registered 'delete' tables, partitioned LIST by their
-- tenant key, whose bound holds exactly this community's key (as text): they go by
-- DETACH PARTITION and DROP TABLE instead of row deletes, where the purging
-- role has the privileges of the owners of the table and the partition (an
-- executor that does not deletes their rows in batches instead).
SELECT registered.table_name::text AS table_name,
       pn.nspname::text AS partition_schema,
       part.relname::text AS partition_name
FROM community_deletion.community_scoped_tables registered
JOIN pg_catalog.pg_class parent ON parent.relname = registered.table_name
    AND parent.relnamespace = (SELECT rn.oid FROM pg_catalog.pg_namespace rn WHERE rn.nspname = registered.table_schema)
    AND parent.relkind = 'p'
JOIN pg_catalog.pg_inherits inh ON inh.inhparent = parent.oid
JOIN pg_catalog.pg_class part ON part.oid = inh.inhrelid
JOIN pg_catalog.pg_namespace pn ON pn.oid = part.relnamespace
WHERE registered.purge_action = 'delete'
  AND pg_has_role(current_user, parent.relowner, 'USAGE')
  AND pg_has_role(current_user, part.relowner, 'USAGE')
  AND pg_get_partkeydef(parent.oid) = format('LIST (%s)', quote_ident(registered.tenant_key))
  AND pg_get_expr(part.relpartbound, part.oid) = format(CASE coalesce(registered.key_kind, 'uuid') WHEN 'integer' THEN 'FOR VALUES IN (%s)'
                                                                                                 ELSE 'FOR VALUES IN (%L)' END,
                                                        @tenant_key::text)
ORDER BY 1, 3;

-- name: PurgeLeafRelations :many
-- The tables that hold the rows of a registered table: the table itself, or
-- the leaf partitions of a partitioned one, with their size in blocks and
-- the most line pointers a block holds (MaxHeapTuplesPerPage), for TID range
-- batches, and whether the purging role may delete from and update it
-- directly (a partition created after attach has none of the grants attach
-- gave the others; through its partitioned table it is reached all the
-- same).
SELECT n.nspname::text AS schema_name,
       c.relname::text AS relation_name,
       (pg_relation_size(c.oid) / current_setting('block_size')::bigint)::bigint AS blocks,
       ((current_setting('block_size')::bigint - 24) / 28)::bigint AS slots_per_block,
       (has_table_privilege(c.oid, 'DELETE') AND has_table_privilege(c.oid, 'UPDATE')
        AND has_table_privilege(c.oid, 'SELECT'))::boolean AS writable
FROM pg_catalog.pg_class root
JOIN pg_catalog.pg_class c ON c.oid = root.oid
    OR c.oid IN (SELECT tree.relid FROM pg_partition_tree(root.oid) tree WHERE tree.isleaf)
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE root.relname = @table_name::text
  AND root.relnamespace = (
      SELECT rn.oid FROM pg_catalog.pg_namespace rn
      JOIN community_deletion.community_scoped_tables r ON r.table_schema = rn.nspname
      WHERE r.table_name = @table_name::text)
  AND c.relkind = 'r'
ORDER BY c.relname;

-- name: PurgeProgressList :many
-- The purge's progress per table of a request: rows so far and whether done.
SELECT unit_key, row_count, done
FROM community_deletion.community_deletion_purge_progress
WHERE request_id = @request_id
ORDER BY unit_key;

-- name: PurgeProgressRecord :exec
-- Records a table's rows so far after a committed batch.
INSERT INTO community_deletion.community_deletion_purge_progress (request_id, unit_key, row_count, done, lease_generation)
VALUES (@request_id, @unit_key, @row_count, @done, @lease_generation)
ON CONFLICT (request_id, unit_key) DO UPDATE
SET row_count = EXCLUDED.row_count,
    done = EXCLUDED.done,
    lease_generation = EXCLUDED.lease_generation,
    updated_at = now();

-- name: PurgeCommunityTombstone :execrows
-- Turns the fenced community into its tombstone at the fence generation and
-- scrubs its profile; the tombstone guard admits it only as the executor
-- with the request at bindings_removed under the same generation.
UPDATE community_deletion.communities
SET deletion_state = 'tombstone',
    deleted_at = COALESCE(deleted_at, now()),
    archived_at = COALESCE(archived_at, now()),
    signing_key = NULL,
    icon = NULL
WHERE id = @id AND deletion_state = 'fenced' AND deletion_fence_generation = @fence_generation;

-- name: PurgeCommunityTombstoned :one
-- Whether the community is the tombstone of a fence generation.
SELECT EXISTS (
    SELECT 1 FROM community_deletion.communities
    WHERE id = @id AND deletion_state = 'tombstone' AND deleted_at IS NOT NULL
      AND deletion_fence_generation = @fence_generation
)::boolean AS tombstoned;

-- name: PurgeSeqScanGet :one
-- The transaction's enable_seqscan, to restore after the proofs.
SELECT current_setting('enable_seqscan')::text AS value;

-- name: PurgeSeqScanSet :exec
-- Sets enable_seqscan for the rest of the transaction: the absence proofs
-- run with it off, so they use an index wherever one exists. (With the
-- statistics of before the purge, the planner expects an early match and
-- picks a scan of the whole table.) It also turns JIT off for the rest of
-- the transaction: a disabled sequential scan costs 10^10 in the
-- planner's estimate, far over jit_above_cost, and compiling each proof
-- (and each fence query its statements fire) took 0.3-1.5 s of a
-- transaction whose queries take a millisecond.
SELECT set_config('enable_seqscan', @value::text, true), set_config('jit', 'off', true);

-- name: PurgeLockTimeoutSet :exec
-- Bounds how long the transaction's DDL waits for a table lock.
SELECT set_config('lock_timeout', @timeout::text, true);

-- name: PurgeStatementCapSet :exec
-- Caps each statement of a batch transaction at @cap_ms milliseconds, or at
-- the session's own statement_timeout where that is shorter. The setting
-- reads as 0 or as a number and a unit (30ms, 2s, 1min, 1h, 1d), which an
-- interval takes as it is; pg_settings, which gives it in milliseconds,
-- cost 0.5-0.7 ms a batch.
SELECT pg_catalog.set_config('statement_timeout',
    CASE WHEN pg_catalog.current_setting('statement_timeout') OPERATOR(pg_catalog.=) '0' THEN @cap_ms::pg_catalog.int8
         ELSE LEAST(pg_catalog.ceil(EXTRACT(epoch FROM pg_catalog.current_setting('statement_timeout')::pg_catalog.interval) OPERATOR(pg_catalog.*) 1000)::pg_catalog.int8,
                    @cap_ms::pg_catalog.int8) END::pg_catalog.text, true);


-- name: PurgePressure :one
-- What the purge yields to between batches (see community_deletion_purge_pressure()).
-- (sqlc does not see the RETURNS TABLE columns: the alias list names them
-- and the casts type them.)
SELECT pressure.replicas::integer AS replicas,
       coalesce(extract(epoch FROM pressure.replay_lag), 0)::float8 AS replay_lag_seconds,
       coalesce(pressure.replay_bytes, 0)::bigint AS replay_bytes,
       pressure.wraparound_tables::text[] AS wraparound_tables
FROM community_deletion.community_deletion_purge_pressure() AS pressure (replicas, replay_lag, replay_bytes, wraparound_tables);

-- name: PurgeTenantTable :one
-- The declared tenant table's name, registered like any 'delete' table; ''
-- when none is declared. The purge deletes it last.
SELECT coalesce((SELECT d.table_name::text FROM community_deletion.community_deletion_tenant_table d), '')::text AS table_name;

-- name: PurgeReverseReferences :many
-- The registered tables attached through the rows that reference them
-- (attach_child_table(..., referenced_by)): per table, each referencing
-- registered table and the one column on each side. The purge deletes such
-- a table's rows with the last row of its tenant that references them.
SELECT registered.table_name::text AS table_name,
       (p.value -> 'hops' -> 0 -> 'columns' ->> 0)::text AS table_column,
       (p.value -> 'hops' -> 0 ->> 'schema')::text AS referrer_schema,
       (p.value -> 'hops' -> 0 ->> 'table')::text AS referrer_table,
       (p.value -> 'hops' -> 0 -> 'parent_columns' ->> 0)::text AS referrer_column
FROM community_deletion.community_scoped_tables registered
CROSS JOIN LATERAL jsonb_array_elements(registered.parents) p
WHERE registered.parents IS NOT NULL
  AND coalesce((p.value -> 'hops' -> 0 ->> 'reverse')::boolean, false)
GROUP BY 1, 2, 3, 4, 5
ORDER BY 1, 3, 4, 5;

-- name: PurgeDropTenantObjects :one
-- Drops the tenant's declared per-tenant sequences (storage layout kind
-- sequence) as the schema's owner and returns their names; the caller is
-- the authorized executor at bindings_removed.
SELECT coalesce(community_deletion.community_deletion_drop_tenant_objects(@community_id::uuid), '{}')::text[] AS dropped;

-- name: PurgeUntrustedCode :many
-- The untrusted code of a registered table (migration 00030): each trigger,
-- rule or expression the purge's statement on it runs that calls code of
-- its own and that the schema's owner has not declared trusted at its
-- current digest. A batch reads it after its statement, under the
-- statement's lock, and rolls back on any row.
SELECT u.table_name::text AS table_name, u.problem::text AS problem
FROM pg_catalog.pg_class root
JOIN pg_catalog.pg_namespace n ON n.oid = root.relnamespace
JOIN community_deletion.community_scoped_tables r ON r.table_schema = n.nspname AND r.table_name = root.relname
CROSS JOIN LATERAL community_deletion.community_deletion_untrusted_code(root.oid::regclass) u
WHERE r.table_name = @table_name::text;
