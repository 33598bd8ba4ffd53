package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tombstoneworks/communitydeletion/internal/fixture"
)

// report prints the final report and returns an error naming every check
// that failed.
func report(ctx context.Context, out io.Writer, pool *pgxpool.Pool, w *world, d *deletion,
	before, after *snapshot, writers map[uuid.UUID]*writerResult, took time.Duration,
	receiptChecks func(check func(bool, string, ...any)) error) error {
	var failed []string
	check := func(ok bool, format string, args ...any) {
		mark := "ok  "
		if !ok {
			mark = "FAIL"
			failed = append(failed, fmt.Sprintf(format, args...))
		}
		fmt.Fprintf(out, "  %s %s\n", mark, fmt.Sprintf(format, args...))
	}
	t := w.target

	fmt.Fprintln(out, "\nrows purged per table:")
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	var totalRows int64
	for _, table := range slices.Sorted(maps.Keys(d.rows)) {
		fmt.Fprintf(tw, "  %s\t%d\t\n", table, d.rows[table])
		totalRows += d.rows[table]
	}
	tw.Flush()
	fmt.Fprintf(out, "keys deleted: %d files in %d chunks\n", before.count[t.id], d.chunksTotal)
	fmt.Fprintln(out, "time per stage:")
	for _, s := range d.stages {
		fmt.Fprintf(out, "  %-20s %s\n", s.stage, s.took.Round(time.Millisecond))
	}

	var stage string
	if err := pool.QueryRow(ctx, "SELECT stage FROM community_deletion.community_deletion_requests WHERE id = $1", d.request).Scan(&stage); err != nil {
		return fmt.Errorf("read the request: %w", err)
	}
	var state, host string
	var generation int64
	var deletedAt *time.Time
	var scrubbed bool
	if err := pool.QueryRow(ctx, `SELECT deletion_state, host, deletion_fence_generation, deleted_at,
		signing_key IS NULL AND icon IS NULL FROM community_deletion.communities WHERE id = $1`, t.id).Scan(&state, &host, &generation, &deletedAt, &scrubbed); err != nil {
		return fmt.Errorf("read the tombstone: %w", err)
	}
	fmt.Fprintf(out, "tombstone: %s %s, fence generation %d, deleted at %v, profile scrubbed: %t\n",
		host, state, generation, deletedAt, scrubbed)

	fmt.Fprintln(out, "\nchecks:")
	check(stage == "retention_pending", "the request reached retention_pending (it is %s)", stage)
	check(state == "tombstone" && deletedAt != nil && scrubbed, "%s is a scrubbed tombstone", t.host)
	left := int64(0)
	for _, table := range append(append([]string{}, fixture.Tables...), fixture.NullifyTables...) {
		var n int64
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{table}.Sanitize()+" WHERE community_id = $1", t.id).Scan(&n); err != nil {
			return fmt.Errorf("count %s: %w", table, err)
		}
		left += n
	}
	check(left == 0, "no row of %s is left in any registered table (%d left)", t.host, left)
	anyFiles := false
	for _, prefix := range t.prefixes() {
		found, err := w.stores.objects.Any(ctx, prefix)
		if err != nil {
			return err
		}
		anyFiles = anyFiles || found
	}
	check(!anyFiles, "no file of %s is left in the object store (%s)", t.host, w.stores.objectsKind)
	cacheLeft, err := w.stores.cacheLen(ctx, t.id)
	if err != nil {
		return fmt.Errorf("count cache entries: %w", err)
	}
	check(cacheLeft == 0, "the cache holds nothing of %s (%s)", t.host, w.stores.cacheKind)
	for _, c := range w.communities[1:] {
		check(before.rows[c.id] == after.rows[c.id], "%s: every row unchanged", c.host)
		check(before.files[c.id] == after.files[c.id] && after.count[c.id] == filesEach, "%s: all %d files unchanged", c.host, filesEach)
		check(before.cache[c.id] == after.cache[c.id], "%s: its %d cache entries kept", c.host, after.cache[c.id])
		r := writers[c.id]
		check(r.succeeded > 0 && r.refused == 0 && len(r.otherErrors) == 0,
			"%s: its writer kept succeeding (%d writes, %d refused, %d errors)", c.host, r.succeeded, r.refused, len(r.otherErrors))
	}
	r := writers[t.id]
	check(r.refused > 0 && r.succeededAfterRefusal == 0 && len(r.otherErrors) == 0,
		"%s: its writer was refused from the fence on (%d writes before; after: %d refused by the fence [55000], %d by the purge removing their parents [23503, 40P01], %d admitted, %d other errors)",
		t.host, r.succeeded, r.refused, r.orphaned, r.succeededAfterRefusal, len(r.otherErrors))
	for _, e := range r.otherErrors {
		fmt.Fprintf(out, "       %s\n", e)
	}
	if err := receiptChecks(check); err != nil {
		return fmt.Errorf("read the receipt: %w", err)
	}
	fmt.Fprintf(out, "\ndeleted %s: %d rows, %d files, %d cache entries in %s\n",
		t.host, totalRows, before.count[t.id], before.cache[t.id], took.Round(time.Millisecond))
	if len(failed) > 0 {
		return fmt.Errorf("%d checks failed: %s", len(failed), strings.Join(failed, "; "))
	}
	return nil
}
