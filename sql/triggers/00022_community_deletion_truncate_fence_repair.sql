-- Migration 00021 meant to put attach's TRUNCATE fence on every registered
-- 'delete' table (and partition) the migrating role may alter, but it listed
-- the tables with pg_partition_tree() alone, which returns no rows for a
-- table that is not partitioned: a plain registered table upgraded by 00021
-- kept no TRUNCATE fence, and the drift report named it until its owner ran
-- attach again. 00021 is released, so this repairs it: the same fence on
-- every registered 'delete' table and partition the migrating role may
-- alter that lacks one. It records which it added, so that Down removes
-- exactly those; a fence attach adds later is not this migration's.

-- +goose Up
CREATE TABLE community_deletion.community_deletion_truncate_fence_repairs (
    table_schema name NOT NULL,
    table_name name NOT NULL,
    repaired_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (table_schema, table_name)
);
COMMENT ON TABLE community_deletion.community_deletion_truncate_fence_repairs IS 'The tables migration 00022 gave the TRUNCATE fence that 00021 missed; its Down removes exactly these.';
REVOKE ALL ON community_deletion.community_deletion_truncate_fence_repairs FROM PUBLIC;

-- +goose StatementBegin
DO $repair$
DECLARE
    member record;
BEGIN
    FOR member IN
        SELECT mn.nspname, mc.relname, m.relid
        FROM community_deletion.community_scoped_tables r
        JOIN pg_catalog.pg_namespace n ON n.nspname OPERATOR(pg_catalog.=) r.table_schema
        JOIN pg_catalog.pg_class c ON c.relnamespace OPERATOR(pg_catalog.=) n.oid AND c.relname OPERATOR(pg_catalog.=) r.table_name
        CROSS JOIN LATERAL (SELECT t.relid FROM pg_catalog.pg_partition_tree(c.oid) t
                            UNION SELECT c.oid) m (relid)
        JOIN pg_catalog.pg_class mc ON mc.oid OPERATOR(pg_catalog.=) m.relid
        JOIN pg_catalog.pg_namespace mn ON mn.oid OPERATOR(pg_catalog.=) mc.relnamespace
        WHERE r.purge_action OPERATOR(pg_catalog.=) 'delete' AND mc.relkind IN ('r', 'p')
          AND pg_catalog.pg_has_role(current_user, mc.relowner, 'USAGE')
          AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger t
                          WHERE t.tgrelid OPERATOR(pg_catalog.=) m.relid
                            AND t.tgname OPERATOR(pg_catalog.=) 'community_write_fence_truncate')
    LOOP
        EXECUTE pg_catalog.format('CREATE TRIGGER community_write_fence_truncate BEFORE TRUNCATE ON %I.%I '
                                  'FOR EACH STATEMENT EXECUTE FUNCTION community_deletion.enforce_community_truncate_fence()',
                                  member.nspname, member.relname);
        INSERT INTO community_deletion.community_deletion_truncate_fence_repairs (table_schema, table_name)
        VALUES (member.nspname, member.relname);
    END LOOP;
END
$repair$;
-- +goose StatementEnd

SELECT community_deletion.community_deletion_seal_functions();

-- +goose Down
-- +goose StatementBegin
DO $undo$
DECLARE
    repaired record;
BEGIN
    FOR repaired IN SELECT r.table_schema, r.table_name FROM community_deletion.community_deletion_truncate_fence_repairs r LOOP
        IF pg_catalog.to_regclass(pg_catalog.format('%I.%I', repaired.table_schema, repaired.table_name)) IS NOT NULL THEN
            EXECUTE pg_catalog.format('DROP TRIGGER IF EXISTS community_write_fence_truncate ON %I.%I',
                                      repaired.table_schema, repaired.table_name);
        END IF;
    END LOOP;
END
$undo$;
-- +goose StatementEnd
DROP TABLE community_deletion.community_deletion_truncate_fence_repairs;

SELECT community_deletion.community_deletion_seal_functions();
