-- name: StorageLayoutDeclared :many
-- The declared storage layout: every template whose newest row declares it
-- (a later 'retire' row retires it), by kind and template.
SELECT l.kind, l.template, l.reason, l.declared_by, l.declared_at
FROM community_deletion.community_deletion_storage_layout l
WHERE l.action = 'declare'
  AND NOT EXISTS (
      SELECT 1 FROM community_deletion.community_deletion_storage_layout later
      WHERE later.kind = l.kind AND later.template = l.template AND later.sequence > l.sequence)
ORDER BY l.kind, l.template;

-- name: KeySourceSpec :one
-- A declared key source (storage layout kind object_keys, not retired) as
-- the parts of its schema.table.column and its table's tenant row filter
-- (community_deletion_tenant_filter(), $1 the tenant key as text). No row:
-- source is not a declared key source.
SELECT parts.p[1]::text AS schema_name, parts.p[2]::text AS table_name, parts.p[3]::text AS column_name,
       coalesce(community_deletion.community_deletion_tenant_filter(parts.p[1]::name, parts.p[2]::name, NULL), '')::text AS tenant_filter
FROM (SELECT parse_ident(@source::text) AS p) parts
WHERE EXISTS (
    SELECT 1 FROM community_deletion.community_deletion_storage_layout l
    WHERE l.kind = 'object_keys' AND l.template = @source::text AND l.action = 'declare'
      AND NOT EXISTS (SELECT 1 FROM community_deletion.community_deletion_storage_layout later
                      WHERE later.kind = l.kind AND later.template = l.template AND later.sequence > l.sequence));
