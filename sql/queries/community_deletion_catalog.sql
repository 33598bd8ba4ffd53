-- name: CatalogCommunityColumns :many
-- The deletion columns of communities as they are: name, formatted type and
-- NOT NULL. No rows when communities does not resolve.
SELECT attribute.attname::text AS column_name,
       format_type(attribute.atttypid, attribute.atttypmod)::text AS type_name,
       attribute.attnotnull AS not_null
FROM pg_catalog.pg_attribute attribute
WHERE attribute.attrelid = to_regclass('community_deletion.communities')
  AND attribute.attname::text = ANY(@column_names::text[])
  AND attribute.attnum > 0
  AND NOT attribute.attisdropped
ORDER BY attribute.attname;

-- name: CatalogDriftList :many
-- CatalogDriftList returns one row per difference between the live catalog
-- and community_scoped_tables; deletion treats any row as drift.
-- (sqlc does not see the RETURNS TABLE columns, sqlc-dev/sqlc#3391: the
-- alias list names them and the casts type them.)
SELECT drift.table_name::text AS table_name, drift.problem::text AS problem
FROM community_deletion.community_deletion_catalog_drift() AS drift (table_name, problem)
ORDER BY drift.table_name, drift.problem;

-- name: CatalogDriftOfTables :many
-- The registered tables' part of CatalogDriftList (registry, fences,
-- guards, digests, unregistered tenant tables); the purge runs it, and the
-- other parts, each in a transaction of its own before the whole check, so
-- that the whole check runs on a session whose caches are warm.
SELECT drift.table_name::text AS table_name, drift.problem::text AS problem
FROM community_deletion.community_deletion_catalog_drift_of_tables() AS drift (table_name, problem)
ORDER BY drift.table_name, drift.problem;

-- name: CatalogDriftOfCopies :many
-- The materialized views' and foreign tables' part of CatalogDriftList.
SELECT drift.table_name::text AS table_name, drift.problem::text AS problem
FROM community_deletion.community_deletion_catalog_drift_of_copies() AS drift (table_name, problem)
ORDER BY drift.table_name, drift.problem;

-- name: CatalogUntrustedCode :many
-- The untrusted code part of CatalogDriftList: for every registered table,
-- the code of its owner that the deletion's statements would run.
SELECT u.table_name::text AS table_name, u.problem::text AS problem
FROM community_deletion.community_scoped_tables r
JOIN pg_catalog.pg_namespace n ON n.nspname = r.table_schema
JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = r.table_name
                          AND c.relkind IN ('r', 'p') AND NOT c.relispartition
CROSS JOIN LATERAL community_deletion.community_deletion_untrusted_code(c.oid::regclass) u
ORDER BY 1, 2;

-- name: CatalogFencedTables :many
-- The tables (partitioned parents and plain tables, not partitions) in the
-- service's schemas that carry the complete, enabled write fence: its
-- INSERT, UPDATE and DELETE statement triggers with their transition tables.
SELECT rel.relname::text AS table_name
FROM pg_catalog.pg_class rel
JOIN pg_catalog.pg_trigger trig ON trig.tgrelid = rel.oid
WHERE community_deletion.community_deletion_tenant_schema(rel.relnamespace)
  AND rel.relkind IN ('r', 'p')
  AND NOT rel.relispartition
  AND trig.tgfoid = to_regprocedure('community_deletion.enforce_community_write_fence()')
  AND NOT trig.tgisinternal
  AND trig.tgenabled IN ('O', 'A')
  AND trig.tgtype & 67 = 0
GROUP BY rel.relname
HAVING bool_or(trig.tgtype & 4 = 4 AND trig.tgnewtable::text = 'community_fence_new')
   AND bool_or(trig.tgtype & 16 = 16 AND trig.tgoldtable::text = 'community_fence_old'
               AND trig.tgnewtable::text = 'community_fence_new')
   AND bool_or(trig.tgtype & 8 = 8 AND trig.tgoldtable::text = 'community_fence_old')
ORDER BY rel.relname;

-- name: CatalogPing :one
-- Whether the deletion control plane is installed. It probes the catalog,
-- not the migration tool's version table.
SELECT (to_regclass('community_deletion.community_deletion_requests') IS NOT NULL)::boolean AS installed;

-- name: CatalogRegistryList :many
-- The registry of tenant tables, with each one's tenant key column ('' for
-- a table attached through its parents), the key's kind, its parents (the
-- schema-qualified tables of its paths' first steps), whether it names a
-- deletion control-plane table (which must never be registered) and its
-- tenant row filter (community_deletion_tenant_filter(), $1 the tenant key
-- as text).
SELECT registered.table_name,
       registered.table_schema::text AS table_schema,
       registered.purge_action,
       coalesce(registered.tenant_key::text, '')::text AS tenant_key,
       coalesce(registered.key_kind, 'uuid')::text AS key_kind,
       ARRAY(SELECT DISTINCT format('%I.%I', p.value -> 'hops' -> 0 ->> 'schema', p.value -> 'hops' -> 0 ->> 'table')
             FROM jsonb_array_elements(coalesce(registered.parents, '[]'::jsonb)) p
             ORDER BY 1)::text[] AS parents,
       community_deletion.community_deletion_control_table(registered.table_name)::boolean AS control_plane,
       coalesce(community_deletion.community_deletion_tenant_filter(registered.table_schema, registered.table_name::name, NULL), '')::text AS tenant_filter
FROM community_deletion.community_scoped_tables registered
ORDER BY registered.table_name;

-- name: CatalogRelationsPresent :many
-- Which of table_names exist as tables in schema community_deletion.
SELECT rel.relname::text AS table_name
FROM pg_catalog.pg_class rel
WHERE rel.relname::text = ANY(@table_names::text[])
  AND rel.relkind IN ('r', 'p')
  AND rel.relnamespace = 'community_deletion'::regnamespace
ORDER BY rel.relname;

-- name: CatalogServingObjects :one
-- Whether each function and trigger the serving-path write fence relies on
-- is installed: community_write_allowed must be VOLATILE (a STABLE one could
-- be evaluated once per statement), and the tombstone guard must be an
-- enabled BEFORE INSERT OR UPDATE OR DELETE row trigger on communities.
SELECT (to_regprocedure('community_deletion.community_deletion_lock_key(uuid)') IS NOT NULL)::boolean AS lock_key,
       (to_regprocedure('community_deletion.community_write_allowed(uuid)') IS NOT NULL)::boolean AS write_allowed,
       coalesce((SELECT proc.provolatile = 'v'
                 FROM pg_catalog.pg_proc proc
                 WHERE proc.oid = to_regprocedure('community_deletion.community_write_allowed(uuid)')), false)::boolean AS write_allowed_volatile,
       (to_regprocedure('community_deletion.assert_community_write_allowed(uuid)') IS NOT NULL)::boolean AS assert_write_allowed,
       (to_regprocedure('community_deletion.enforce_community_write_fence()') IS NOT NULL)::boolean AS write_fence,
       (to_regprocedure('community_deletion.community_deletion_catalog_drift()') IS NOT NULL)::boolean AS catalog_drift,
       EXISTS (
           SELECT 1
           FROM pg_catalog.pg_trigger trig
           JOIN pg_catalog.pg_proc proc ON proc.oid = trig.tgfoid
           WHERE trig.tgrelid = to_regclass('community_deletion.communities')
             AND proc.proname::text = 'enforce_community_tombstone'
             AND NOT trig.tgisinternal
             AND trig.tgenabled IN ('O', 'A')
             AND trig.tgtype & 31 = 31
       )::boolean AS tombstone_guard;

-- name: CommunityDeletionLockKey :one
SELECT community_deletion.community_deletion_lock_key(@community_id::uuid);

-- name: SchemaDestructionLockKey :one
SELECT community_deletion.community_schema_destruction_lock_key();

-- name: CatalogExcludedTables :many
-- The tables their owners excluded from the deletion (exclude_table()),
-- schema-qualified, with why and by whom.
SELECT format('%I.%I', e.table_schema, e.table_name)::text AS table_name,
       e.reason,
       e.excluded_by::text AS excluded_by
FROM community_deletion.community_deletion_excluded_tables e
ORDER BY e.table_schema, e.table_name;
