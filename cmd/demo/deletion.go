package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/tombstoneworks/communitydeletion/executor"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// step is one stage the executor moved the request into, and how long the
// work that took it there took, on the demo's wall clock.
type step struct {
	reached lifecycle.Stage
	took    time.Duration
}

// deletion is what deleting the target produced.
type deletion struct {
	request     uuid.UUID
	steps       []step
	chunksTotal int64
	// inventoryRows is the rows the frozen inventory counted.
	inventoryRows int64
}

// deleteTarget submits the target's deletion as one operator (alice),
// freezes its inventory, approves it as another (bob), and runs the executor
// to the end as the executor's login. It prints two lines: the submission
// with its inventory, and the approvals.
func deleteTarget(ctx context.Context, out io.Writer, r *roles, w *world) (*deletion, error) {
	t := w.target
	request, err := r.alice.Submit(ctx, t.host, "alice", "demo: the tenant asked to be forgotten")
	if err != nil {
		return nil, err
	}
	schema, err := r.alice.InventorySchema(ctx, t.id)
	if err != nil {
		return nil, err
	}
	// The inventory lists the deployment's declared layout, never a guess.
	layout, err := r.alice.StorageLayout(ctx)
	if err != nil {
		return nil, err
	}
	if err := layout.RequireObjects(); err != nil {
		return nil, err
	}
	storage, err := executor.SummarizeStorage(ctx, w.stores.objects, layout.ExpandLayout(lifecycle.UUIDKey(t.id)).ObjectPrefixes)
	if err != nil {
		return nil, err
	}
	request, err = r.alice.FreezeInventory(ctx, request.ID, lifecycle.FrozenInventory{Schema: *schema, Storage: storage})
	if err != nil {
		return nil, err
	}
	d := &deletion{request: request.ID}
	var objects uint64
	for _, n := range schema.RowCounts {
		d.inventoryRows += n
	}
	for _, p := range storage.Prefixes {
		objects += p.ObjectCount
	}
	fmt.Fprintf(out, "\ndeleting %s, request %s:\n", t.host, request.ID)
	fmt.Fprintf(out, "  submitted by alice; inventory frozen: %s rows in %d tables (its writer's rows so far included), %d files under %d prefixes\n",
		thousands(d.inventoryRows), len(schema.ScopedTables), objects, len(storage.Prefixes))
	_, err = r.alice.Approve(ctx, request.ID, "alice", "approving my own request")
	if !errors.Is(err, lifecycle.ErrRefused) {
		return nil, fmt.Errorf("the requester's own approval was not refused: %v", err)
	}
	if _, err := r.bob.Approve(ctx, request.ID, "bob", "checked the frozen inventory"); err != nil {
		return nil, err
	}
	fmt.Fprintln(out, "  alice's own approval refused (the submitter cannot approve); approved by bob, from his own login")

	current, since := lifecycle.StageApproved, time.Now()
	runner, err := newRunner(r.executor, w, func(e executor.Event) {
		if e.Stage != current && e.Stage != "" {
			d.steps = append(d.steps, step{reached: e.Stage, took: time.Since(since)})
			current, since = e.Stage, time.Now()
		}
		d.chunksTotal = max(d.chunksTotal, e.ChunksTotal)
	})
	if err != nil {
		return nil, err
	}
	if _, err := runner.RunRequest(ctx, request.ID); err != nil {
		return nil, fmt.Errorf("run the deletion: %w", err)
	}
	return d, nil
}

// thousands renders n with comma separators: 8,810.
func thousands[N int64 | uint64 | int](n N) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
