package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tombstoneworks/communitydeletion/internal/fixture"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
	"github.com/tombstoneworks/communitydeletion/receipt"
)

// deleted is what the deletion's receipt says it deleted, and in which
// stores it says absence was verified and in which it was not checked.
type deleted struct {
	rows, nullified  int64
	tables           int
	objects, cache   int64
	prefixes, stores int
	verified         []string
	notChecked       []receipt.Absence
}

// tally adds up the receipt r.
func tally(r receipt.Receipt) deleted {
	d := deleted{tables: len(r.Tables), prefixes: len(r.Objects), stores: len(r.Absence)}
	// In the order the executor checks them: PostgreSQL, objects, cache.
	absence := slices.Clone(r.Absence)
	slices.SortStableFunc(absence, func(a, b receipt.Absence) int { return storeRank(a.Store) - storeRank(b.Store) })
	for _, a := range absence {
		if a.Verified() {
			d.verified = append(d.verified, a.Store)
		} else {
			d.notChecked = append(d.notChecked, a)
		}
	}
	for _, t := range r.Tables {
		d.rows += t.Rows
		if t.Mode == "nullify" {
			d.nullified += t.Rows
		}
	}
	for _, o := range r.Objects {
		d.objects += o.Deleted
	}
	for _, c := range r.Cache {
		d.cache += c.Deleted
	}
	return d
}

// storeRank orders the receipt's stores as the executor checks them.
func storeRank(store string) int {
	if i := slices.Index([]string{receipt.StorePostgres, receipt.StoreObjects, receipt.StoreCache}, store); i >= 0 {
		return i
	}
	return 3
}

// report prints the stages, the checks and the receipt, and returns an
// error naming every check that failed.
func report(ctx context.Context, out io.Writer, pool *pgxpool.Pool, w *world, d *deletion,
	before, after *snapshot, writers map[uuid.UUID]*writerResult, keys *demoKeys, operator *lifecycle.Operator, started time.Time) error {
	t := w.target
	env, err := operator.Receipt(ctx, d.request)
	if err != nil {
		return fmt.Errorf("read the receipt: %w", err)
	}
	r, err := env.Receipt()
	if err != nil {
		return fmt.Errorf("the stored receipt does not parse: %w", err)
	}
	got := tally(r)
	var generation int64
	var state string
	var deletedAt *time.Time
	var scrubbed bool
	if err := pool.QueryRow(ctx, `SELECT deletion_state, deletion_fence_generation, deleted_at,
		signing_key IS NULL AND icon IS NULL FROM community_deletion.communities WHERE id = $1`, t.id).Scan(&state, &generation, &deletedAt, &scrubbed); err != nil {
		return fmt.Errorf("read the tombstone: %w", err)
	}

	fmt.Fprintf(out, "  %-19s %-56s %s\n", "stage reached", "what it took", "time")
	var total time.Duration
	for _, s := range d.steps {
		total += s.took
		fmt.Fprintf(out, "  %-19s %-56s %s\n", s.reached, describeStep(s.reached, got, d, generation, r.Sequence), seconds(s.took))
	}
	fmt.Fprintf(out, "  %-19s %-56s %s\n", "total", "from the claim to completion (the demo's wall clock)", seconds(total))
	for _, a := range got.notChecked {
		fmt.Fprintf(out, "  not checked: the %s (%s): %s\n", a.Store, a.Kind, a.Detail)
	}
	written := writers[t.id].succeeded
	fmt.Fprintf(out, "  rows purged: %s = %s seeded + %s its writer added before the fence (%s of them kept in %s, tenant cleared)\n",
		thousands(got.rows), thousands(w.rowsEach), thousands(written), thousands(got.nullified), strings.Join(fixture.NullifyTables, ", "))

	var failed []string
	var passed int
	check := func(ok bool, format string, args ...any) {
		mark := "ok  "
		if ok {
			passed++
		} else {
			mark = "FAIL"
			failed = append(failed, fmt.Sprintf(format, args...))
		}
		fmt.Fprintf(out, "  %s %s\n", mark, fmt.Sprintf(format, args...))
	}
	fmt.Fprintln(out, "\nchecks:")
	var stage string
	if err := pool.QueryRow(ctx, "SELECT stage FROM community_deletion.community_deletion_requests WHERE id = $1", d.request).Scan(&stage); err != nil {
		return fmt.Errorf("read the request: %w", err)
	}
	profile := "its profile scrubbed"
	if !scrubbed {
		profile = "its profile NOT scrubbed"
	}
	check(stage == string(lifecycle.StageRetentionPending) && state == "tombstone" && deletedAt != nil && scrubbed,
		"%s: the request is at %s, the community a %s with %s", t.host, stage, state, profile)
	left := int64(0)
	for _, table := range append(append([]string{}, fixture.Tables...), fixture.NullifyTables...) {
		var n int64
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{table}.Sanitize()+" WHERE community_id = $1", t.id).Scan(&n); err != nil {
			return fmt.Errorf("count %s: %w", table, err)
		}
		left += n
	}
	filesLeft := false
	for _, prefix := range t.prefixes() {
		found, err := w.stores.objects.Any(ctx, prefix)
		if err != nil {
			return err
		}
		filesLeft = filesLeft || found
	}
	cacheLeft, err := w.stores.cacheLen(ctx, t.id)
	if err != nil {
		return fmt.Errorf("count cache entries: %w", err)
	}
	check(left == 0 && !filesLeft && cacheLeft == 0, "%s: nothing left: %d rows in the registered tables, %s in the object store, %d cache entries",
		t.host, left, filesWord(filesLeft), cacheLeft)
	wr := writers[t.id]
	check(wr.refused > 0 && wr.succeededAfterRefusal == 0 && len(wr.otherErrors) == 0,
		"%s: its writer was refused from the fence on: %s writes before; after, %s refused by the fence (55000), %s by the purge removing their parents (23503, 40P01), %d admitted, %d other errors",
		t.host, thousands(wr.succeeded), thousands(wr.refused), thousands(wr.orphaned), wr.succeededAfterRefusal, len(wr.otherErrors))
	for _, e := range wr.otherErrors {
		fmt.Fprintf(out, "       %s\n", e)
	}
	for _, c := range w.communities[1:] {
		cw := writers[c.id]
		check(before.rows[c.id] == after.rows[c.id] && before.files[c.id] == after.files[c.id] && after.count[c.id] == filesEach &&
			before.cache[c.id] == after.cache[c.id] && cw.succeeded > 0 && cw.refused == 0 && len(cw.otherErrors) == 0,
			"%s: every row, all %d files and its %d cache entries unchanged; its writer kept writing (%s writes, %d refused, %d errors)",
			c.host, after.count[c.id], after.cache[c.id], thousands(cw.succeeded), cw.refused, len(cw.otherErrors))
	}
	check(got.rows == w.rowsEach+written && got.objects == before.count[t.id] && got.cache == int64(before.cache[t.id]),
		"the receipt's figures add up: %s rows = %s seeded + %s written before the fence; %d files and %d cache entries, as seeded",
		thousands(got.rows), thousands(w.rowsEach), thousands(written), got.objects, got.cache)
	if err := checkReceipt(ctx, operator, d.request, r, keys, check); err != nil {
		return err
	}

	fmt.Fprintf(out, "\nreceipt %d: hash %s, %s bytes, signed by %s; %s a tombstone since %s\n",
		r.Sequence, env.Hash(), thousands(len(env.Body)), r.Signer, t.host, r.Community.DeletedAt.UTC().Format(time.RFC3339))
	if keys.kept {
		fmt.Fprintf(out, "  kept in %s with the chain's head; verify it again with:\n    go run ./cmd/deletionctl receipt verify --dir %s --public-key %s --expect-head %s\n",
			keys.dir, keys.exportDir(), keys.pubPath, keys.headPath())
	} else {
		fmt.Fprintln(out, "  the receipt, its head and the key are removed at exit: -keep DIR keeps them, to verify them again with deletionctl")
	}
	took := seconds(time.Since(started))
	if len(failed) > 0 {
		fmt.Fprintf(out, "\n%d of %d checks FAILED (%s of wall time, setup included)\n", len(failed), passed+len(failed), took)
		return fmt.Errorf("%d checks failed: %s", len(failed), strings.Join(failed, "; "))
	}
	fmt.Fprintf(out, "\ndeleted %s in %s of wall time, setup included: all %d checks passed\n", t.host, took, passed)
	return nil
}

// describeStep says what the executor did to reach stage, with its counts.
func describeStep(stage lifecycle.Stage, got deleted, d *deletion, generation, sequence int64) string {
	switch stage {
	case lifecycle.StageFenced:
		return fmt.Sprintf("quiesced, serving writes drained, fenced (generation %d)", generation)
	case lifecycle.StageDrained:
		return fmt.Sprintf("%d keys listed into %d chunks, the manifest frozen", got.objects, d.chunksTotal)
	case lifecycle.StageBindingsRemoved:
		return fmt.Sprintf("%d files deleted, chunk by chunk", got.objects)
	case lifecycle.StagePostgresPurged:
		return fmt.Sprintf("%s rows purged from %d tables, the tombstone written", thousands(got.rows), got.tables)
	case lifecycle.StageCachePurged:
		return fmt.Sprintf("%d cache entries purged", got.cache)
	case lifecycle.StageLogicallyVerified:
		parts := []string{"absence verified: " + strings.Join(got.verified, ", ")}
		for _, a := range got.notChecked {
			parts = append(parts, a.Store+" not checked")
		}
		return strings.Join(parts, "; ")
	case lifecycle.StageRetentionPending:
		return fmt.Sprintf("completed; receipt %d written and signed", sequence)
	}
	return string(stage)
}

// seconds renders a duration for a person: "243 ms", "2.14 s".
func seconds(d time.Duration) string {
	if d < time.Second {
		return fmt.Sprintf("%d ms", d.Milliseconds())
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}

// filesWord says whether files were found.
func filesWord(some bool) string {
	if some {
		return "some files"
	}
	return "no file"
}
