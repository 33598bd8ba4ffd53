package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
)

// The -row-candidate rows (settings.rowCandidate): after the "another
// tenant fenced" rows, each bound shape runs the same single-row workloads,
// and the 10,000-row INSERT, once more with the fenced table's three
// statement triggers replaced (CREATE OR REPLACE TRIGGER, as a deletion's
// arm would) by AFTER ... FOR EACH ROW triggers of the benchmark's own.
// Each is written for its table: it reads the row's key without a query (a
// child: its parent's key by one static query), takes the marker's lock
// shared, reads the marker, and admits a row whose key bit the marker
// lacks; any other row gets the full check of its tenant (its lock, then
// community_write_allowed()). It is the armed path bench/README.md
// describes as the one way toward the >= 0.90 row, measured through pgx as
// the fence is, so that the design can be judged before it is built. Then
// the same with empty row triggers, the floor of any PL/pgSQL row fence.

// rowFenceTenant is the SQL for the tenant uuid of the key text k, per
// key kind.
func rowFenceTenant(column string) string {
	if column == "organization_id" {
		return "k::pg_catalog.uuid"
	}
	return "community_deletion.community_deletion_tenant_uuid(k)"
}

// rowFenceKey is the SQL for the key text of the row rec (NEW or OLD).
func rowFenceKey(column, rec string) string {
	if column == "parent_id" {
		return fmt.Sprintf("(SELECT p.account_id::pg_catalog.text FROM public.bench_projects p WHERE p.id OPERATOR(pg_catalog.=) %s.parent_id)", rec)
	}
	return fmt.Sprintf("%s.%s::pg_catalog.text", rec, column)
}

// rowFenceFunction is the candidate's function for one operation: recs
// are the rows it checks (NEW, OLD, or both for an UPDATE).
func rowFenceFunction(column, op string, recs []string) string {
	bits := make([]string, 0, len(recs))
	keys := make([]string, 0, len(recs))
	for _, rec := range recs {
		key := rowFenceKey(column, rec)
		bits = append(bits, "community_deletion.community_deletion_fence_key_bit("+key+")")
		keys = append(keys, key)
	}
	return fmt.Sprintf(`CREATE OR REPLACE FUNCTION public.bench_row_fence_%[1]s() RETURNS trigger LANGUAGE plpgsql AS $fn$
DECLARE
    admitted pg_catalog.int4;
    k pg_catalog.text;
    tenant pg_catalog.uuid;
BEGIN
    -- The admitted path: one expression, the lock before the marker read.
    IF (CASE WHEN pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.=) 'read committed'
                 AND pg_catalog.pg_try_advisory_xact_lock_shared(1668246884, 1718510437)
            THEN (pg_catalog.pg_sequence_last_value('community_deletion.community_deletion_fence_marker'::pg_catalog.regclass)
                  OPERATOR(pg_catalog.&) (%[2]s)) OPERATOR(pg_catalog.=) 0
        END) THEN
        RETURN admitted;
    END IF;
    IF pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.<>) 'read committed' THEN
        RAISE EXCEPTION USING ERRCODE = '25000', MESSAGE = 'bench row fence: not READ COMMITTED';
    END IF;
    FOREACH k IN ARRAY ARRAY[%[3]s] LOOP
        CONTINUE WHEN k IS NULL;
        tenant := %[4]s;
        PERFORM pg_catalog.pg_advisory_xact_lock_shared(community_deletion.community_deletion_lock_key(tenant));
        IF community_deletion.community_write_allowed(tenant) IS NOT TRUE THEN
            RAISE EXCEPTION USING ERRCODE = '55000',
                MESSAGE = pg_catalog.format('bench row fence: community write to %%I refused: community %%s is not active', TG_TABLE_NAME, k);
        END IF;
    END LOOP;
    RETURN admitted;
END
$fn$`, op, strings.Join(bits, " OPERATOR(pg_catalog.|) "), strings.Join(keys, ", "), rowFenceTenant(column))
}

// rowFenceOps are the fence's three triggers: the operation, and the rows
// a row trigger for it checks.
var rowFenceOps = []struct {
	name, event string
	recs        []string
}{
	{"insert", "INSERT", []string{"NEW"}},
	{"update", "UPDATE", []string{"OLD", "NEW"}},
	{"delete", "DELETE", []string{"OLD"}},
}

// swapInRowFence replaces the fenced table's three statement triggers with
// the candidate's row triggers, under the names the fence gave them.
func swapInRowFence(ctx context.Context, pool *pgxpool.Pool, column string) error {
	for _, op := range rowFenceOps {
		if _, err := pool.Exec(ctx, rowFenceFunction(column, op.name, op.recs)); err != nil {
			return fmt.Errorf("create the row fence for %s: %w", op.event, err)
		}
	}
	return swapRowTriggers(ctx, pool, func(op string) string { return "public.bench_row_fence_" + op + "()" })
}

// swapInEmptyRowTriggers replaces the fenced table's three triggers with
// row triggers whose function returns at once: what any PL/pgSQL row
// fence pays before its first expression.
func swapInEmptyRowTriggers(ctx context.Context, pool *pgxpool.Pool, _ string) error {
	if _, err := pool.Exec(ctx, `CREATE OR REPLACE FUNCTION public.bench_row_fence_empty() RETURNS trigger LANGUAGE plpgsql AS $$
		DECLARE admitted pg_catalog.int4; BEGIN RETURN admitted; END $$`); err != nil {
		return fmt.Errorf("create the empty row trigger: %w", err)
	}
	return swapRowTriggers(ctx, pool, func(string) string { return "public.bench_row_fence_empty()" })
}

// swapRowTriggers replaces the fenced table's three triggers with AFTER
// ... FOR EACH ROW triggers calling call(op), by CREATE OR REPLACE TRIGGER,
// the statement an arm would use (it needs the TRIGGER privilege, not the
// table's ownership; the benchmark runs it as the superuser).
func swapRowTriggers(ctx context.Context, pool *pgxpool.Pool, call func(op string) string) error {
	for _, op := range rowFenceOps {
		if _, err := pool.Exec(ctx, fmt.Sprintf(`CREATE OR REPLACE TRIGGER community_write_fence_%[1]s AFTER %[2]s ON %[3]s
			FOR EACH ROW EXECUTE FUNCTION %[4]s`, op.name, op.event, fencedTable, call(op.name))); err != nil {
			return fmt.Errorf("replace the %s trigger: %w", op.event, err)
		}
	}
	return nil
}
