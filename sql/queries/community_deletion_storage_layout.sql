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
