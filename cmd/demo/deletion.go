package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/tombstoneworks/communitydeletion/executor"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// stageTime is how long the runner spent at one stage.
type stageTime struct {
	stage lifecycle.Stage
	took  time.Duration
}

// deletion is what deleting the target produced.
type deletion struct {
	request     uuid.UUID
	stages      []stageTime
	rows        map[string]int64
	chunksTotal int64
}

// deleteTarget submits the target's deletion as one operator (alice),
// freezes its inventory, approves it as another (bob), and runs the executor
// to the end as the executor's login.
func deleteTarget(ctx context.Context, out io.Writer, r *roles, w *world) (*deletion, error) {
	t := w.target
	fmt.Fprintf(out, "\ndeleting %s\n", t.host)
	request, err := r.alice.Submit(ctx, t.host, "alice", "demo: the tenant asked to be forgotten")
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "  submitted by alice: request %s\n", request.ID)
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
	fmt.Fprintf(out, "  inventory frozen: %d tables, %d prefixes, digest %s\n",
		len(schema.ScopedTables), len(storage.Prefixes), request.InventoryDigest)
	_, err = r.alice.Approve(ctx, request.ID, "alice", "approving my own request")
	if err == nil {
		return nil, errors.New("the requester approved her own deletion")
	}
	fmt.Fprintf(out, "  alice's own approval refused: %v\n", err)
	if _, err := r.bob.Approve(ctx, request.ID, "bob", "checked the frozen inventory"); err != nil {
		return nil, err
	}
	fmt.Fprintln(out, "  approved by bob")

	d := &deletion{request: request.ID, rows: map[string]int64{}}
	current, since := lifecycle.StageApproved, time.Now()
	lastTable := ""
	runner, err := newRunner(r.executor, w, func(e executor.Event) {
		if e.Stage != current {
			d.stages = append(d.stages, stageTime{stage: current, took: time.Since(since)})
			current, since = e.Stage, time.Now()
		}
		switch {
		case e.TablesRows != nil:
			maps.Copy(d.rows, e.TablesRows)
			for _, table := range slices.Sorted(maps.Keys(e.TablesRows)) {
				if table != lastTable && e.TablesRows[table] > 0 {
					lastTable = table
					fmt.Fprintf(out, "  [%s] purging %s\n", e.Stage, table)
				}
			}
		case e.ChunksTotal > 0:
			d.chunksTotal = e.ChunksTotal
			if e.ChunksDone == e.ChunksTotal || e.ChunksDone%10 == 0 {
				fmt.Fprintf(out, "  [%s] %s (%d of %d chunks deleted)\n", e.Stage, e.Message, e.ChunksDone, e.ChunksTotal)
			}
		default:
			fmt.Fprintf(out, "  [%s] %s\n", e.Stage, e.Message)
		}
	})
	if err != nil {
		return nil, err
	}
	if _, err := runner.RunRequest(ctx, request.ID); err != nil {
		return nil, fmt.Errorf("run the deletion: %w", err)
	}
	d.stages = append(d.stages, stageTime{stage: current, took: time.Since(since)})
	return d, nil
}
