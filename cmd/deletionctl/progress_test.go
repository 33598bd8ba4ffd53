package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/executor"
	"github.com/tombstoneworks/communitydeletion/internal/fixture"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

func TestRecentRate(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	for _, tc := range []struct {
		name   string
		points []point
		rate   float64
		span   time.Duration
		ok     bool
	}{
		{"the latest point a window before the last anchors", []point{{at(0), 0}, {at(30), 10}, {at(90), 70}, {at(100), 80}}, 1, 70 * time.Second, true},
		{"a point exactly a window back anchors", []point{{at(0), 0}, {at(40), 10}, {at(100), 130}}, 2, 60 * time.Second, true},
		{"without an old enough point, the first anchors", []point{{at(0), 0}, {at(10), 5}, {at(20), 10}}, 0.5, 20 * time.Second, true},
		{"one point is no rate", []point{{at(0), 5}}, 0, 0, false},
		{"no points", nil, 0, 0, false},
		{"no progress in the window is no rate", []point{{at(0), 0}, {at(10), 5}, {at(100), 5}, {at(130), 5}}, 0, 0, false},
		{"no time is no rate", []point{{at(5), 0}, {at(5), 3}}, 0, 0, false},
	} {
		rate, span, ok := recentRate(tc.points, time.Minute)
		require.Equal(t, tc.ok, ok, tc.name)
		require.InDelta(t, tc.rate, rate, 1e-9, tc.name)
		require.Equal(t, tc.span, span, tc.name)
	}

	points := []point{{at(0), 0}, {at(30), 10}, {at(90), 70}, {at(100), 80}}
	e := estimateLeft(points, 30, "rows", at(110))
	require.NotNil(t, e)
	twenty := 20.0
	require.Equal(t, &estimate{Unit: "rows", RatePerSecond: 1, WindowSeconds: 70, Remaining: 30,
		LastProgressAt: at(100), ETA: at(130), SecondsLeft: &twenty}, e)
	late := estimateLeft(points, 30, "rows", at(200))
	require.Nil(t, late.SecondsLeft, "past its ETA: no time left is promised")
	require.True(t, late.Overdue)
	require.Equal(t, "eta: none: 30 rows left, and it is slower than its rate of 1.0 rows/s over the last 1m10s, which had it done by 2026-11-30T12:02:10Z; last progress 1m40s ago",
		describeEstimate(late, at(200)))
	require.Nil(t, estimateLeft(points, 0, "rows", at(110)), "nothing left")
	require.Nil(t, estimateLeft(points[:1], 30, "rows", at(110)), "no rate")
	require.Equal(t, "eta: unknown (no rate yet)", describeEstimate(nil, at(110)))
	require.Equal(t, "eta: 20s left (at 2026-11-30T12:02:10Z), 1.0 rows/s over the last 1m10s; last progress 10s ago", describeEstimate(e, at(110)))
}

func TestStepStatus(t *testing.T) {
	t.Parallel()
	require.Equal(t, statusPending, stepStatus(lifecycle.StageDrained, lifecycle.StageApproved))
	require.Equal(t, statusPending, stepStatus(lifecycle.StageDrained, lifecycle.StageFenced))
	require.Equal(t, statusInProgress, stepStatus(lifecycle.StageDrained, lifecycle.StageDrained))
	require.Equal(t, statusDone, stepStatus(lifecycle.StageDrained, lifecycle.StageBindingsRemoved))
	require.Equal(t, statusDone, stepStatus(lifecycle.StagePostgresPurged, lifecycle.StageRetentionPending))
	require.Equal(t, statusAborted, stepStatus(lifecycle.StageDrained, lifecycle.StageAborted))
}

// inspectProgress returns inspect --json's progress.
func (db *testDB) inspectProgress(t *testing.T, id string) progressView {
	t.Helper()
	var rep struct {
		Progress progressView `json:"progress"`
	}
	require.NoError(t, json.Unmarshal([]byte(db.ok(t, "inspect", "--request", id, "--json")), &rep))
	return rep.Progress
}

// inspect shows, per destructive step, what is done and what is left of the
// frozen inventory, and an estimate for the step in progress.
func TestInspectShowsProgressAndAnEstimate(t *testing.T) {
	t.Parallel()
	db := setup(t)
	community, host := db.createCommunity(t)
	for i := range 3 {
		_, err := db.pool.Exec(t.Context(), "INSERT INTO fixture_members (community_id, handle) VALUES ($1, $2)", community, fmt.Sprint("m", i))
		require.NoError(t, err)
	}
	_, err := db.pool.Exec(t.Context(), "INSERT INTO fixture_activity (community_id, kind) SELECT $1, 'seen' FROM generate_series(1, 5)", community)
	require.NoError(t, err)
	_, err = db.pool.Exec(t.Context(), "INSERT INTO fixture_audit_events (community_id, action) VALUES ($1, 'a'), ($1, 'b')", community)
	require.NoError(t, err)
	dir, _ := writeFiles(t, community, 5)
	id := db.submit(t, host, "alice")
	db.ok(t, "inventory", "--request", id, "--objects-dir", dir)
	db.okAs(t, fixture.RoleApprover, "approve", "--request", id, "--by", "bob")

	p := db.inspectProgress(t, id)
	require.Equal(t, statusPending, p.Objects.Status)
	require.EqualValues(t, 5, p.Objects.KeysTotal, "from the frozen inventory before the manifest")
	require.Equal(t, statusPending, p.Purge.Status)
	require.EqualValues(t, 10, p.Purge.RowsTotal)
	require.Nil(t, p.Objects.Estimate)

	engine := fixture.NewClients(t, db.url).Engine
	// runUntil runs the executor until stop says so.
	runUntil := func(stop func(executor.Event) bool) {
		t.Helper()
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		r, err := executor.New(executor.Config{
			Engine: engine, Objects: executor.NewFileObjectStore(dir), Cache: executor.NewMemoryCache(), Owner: "test",
			ChunkSize: 1, Purge: lifecycle.PurgeOptions{MaxRowsPerTx: 1},
			Progress: func(ev executor.Event) {
				if stop(ev) {
					cancel()
				}
			},
		})
		require.NoError(t, err)
		_, err = r.RunRequest(ctx, uuid.MustParse(id))
		if err != nil {
			require.ErrorIs(t, err, context.Canceled)
		}
	}

	// Two of five chunks deleted.
	runUntil(func(ev executor.Event) bool { return ev.ChunksDone == 2 })
	p = db.inspectProgress(t, id)
	require.Equal(t, statusInProgress, p.Objects.Status)
	require.EqualValues(t, 5, p.Objects.ChunksTotal)
	require.EqualValues(t, 2, p.Objects.ChunksDeleted)
	require.EqualValues(t, 5, p.Objects.KeysTotal)
	require.EqualValues(t, 2, p.Objects.KeysDeleted)
	require.NotNil(t, p.Objects.Estimate, "a rate from the drain to the second stamp")
	require.Equal(t, "chunks", p.Objects.Estimate.Unit)
	require.EqualValues(t, 3, p.Objects.Estimate.Remaining)
	require.Positive(t, p.Objects.Estimate.RatePerSecond)
	require.False(t, p.Objects.Estimate.ETA.Before(p.Objects.Estimate.LastProgressAt))
	require.Equal(t, statusPending, p.Purge.Status)
	out := db.ok(t, "inspect", "--request", id)
	require.Contains(t, out, "objects (drained):")
	require.Contains(t, out, "2 of 5 chunks, 2 of 5 keys deleted")
	require.Contains(t, out, "eta: ")
	require.Contains(t, out, "chunks/s over the last ")

	// The first purge batch committed.
	runUntil(func(ev executor.Event) bool { return len(ev.TablesRows) > 0 })
	p = db.inspectProgress(t, id)
	require.Equal(t, statusDone, p.Objects.Status)
	require.EqualValues(t, 5, p.Objects.ChunksDeleted)
	require.EqualValues(t, 5, p.Objects.KeysDeleted)
	require.Nil(t, p.Objects.Estimate)
	require.Equal(t, statusInProgress, p.Purge.Status)
	require.EqualValues(t, 10, p.Purge.RowsTotal)
	require.EqualValues(t, 1, p.Purge.RowsPurged, "one batch of one row")
	tables := map[string]tableProgress{}
	for _, tp := range p.Purge.Tables {
		tables[tp.Table] = tp
	}
	require.Equal(t, tableProgress{Table: "fixture_members", Action: "delete", RowsTotal: 3}, tables["fixture_members"])
	require.Equal(t, "nullify", tables["fixture_audit_events"].Action)
	require.EqualValues(t, 2, tables["fixture_audit_events"].RowsTotal)
	require.NotNil(t, p.Purge.Estimate)
	require.Equal(t, "rows", p.Purge.Estimate.Unit)
	require.EqualValues(t, 9, p.Purge.Estimate.Remaining)
	out = db.ok(t, "inspect", "--request", id)
	require.Contains(t, out, "purge (bindings_removed):")
	require.Contains(t, out, "1 of 10 rows")
	require.Contains(t, out, "rows/s over the last ")

	// Done.
	runUntil(func(executor.Event) bool { return false })
	p = db.inspectProgress(t, id)
	require.Equal(t, statusDone, p.Objects.Status)
	require.EqualValues(t, 5, p.Objects.ChunksDeleted, "from the step's checkpoint once the chunks are dropped")
	require.Equal(t, statusDone, p.Purge.Status)
	require.EqualValues(t, 10, p.Purge.RowsPurged)
	for _, tp := range p.Purge.Tables {
		require.True(t, tp.Done, tp.Table)
	}
	require.Nil(t, p.Purge.Estimate)
	require.Equal(t, statusDone, p.Cache.Status)
	require.NotNil(t, p.Cache.KeysDeleted)
	require.Zero(t, *p.Cache.KeysDeleted)
	require.NotContains(t, db.ok(t, "inspect", "--request", id), "eta:", "no estimate once done")
}

// health prints what community_deletion_health() and the drift report find
// and exits 3 when either finds anything.
func TestHealthCommand(t *testing.T) {
	t.Parallel()
	db := setup(t)
	require.Equal(t, "healthy: no prepared transaction holds an advisory lock, no catalog drift\n", db.ok(t, "health"))
	var rep healthReport
	require.NoError(t, json.Unmarshal([]byte(db.ok(t, "health", "--json")), &rep))
	require.Equal(t, healthReport{Healthy: true, Findings: []healthFinding{}, Drift: []driftFinding{}, Excluded: []excludedTable{}}, rep)

	ctx := t.Context()
	_, err := db.pool.Exec(ctx, "CREATE TABLE stray_notes (id bigint PRIMARY KEY, community_id uuid)")
	require.NoError(t, err)
	gid := "forgotten-" + uuid.NewString()
	conn, err := db.pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	for _, q := range []string{"BEGIN", "SELECT pg_advisory_xact_lock(community_deletion_lock_key(gen_random_uuid()))", "PREPARE TRANSACTION '" + gid + "'"} {
		_, err = conn.Exec(ctx, q)
		require.NoError(t, err)
	}
	t.Cleanup(func() { _, _ = db.pool.Exec(context.Background(), "ROLLBACK PREPARED '"+gid+"'") })

	code, stdout, stderr := db.cli(t, "health")
	require.Equal(t, exitRefused, code, stderr)
	requireOneLine(t, stderr, "deletionctl: refused: health: 1 health findings and 1 catalog drift rows (listed on stdout)")
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	require.Len(t, lines, 2, stdout)
	require.Equal(t, []string{"health", "prepared_lock", "prepared", "transaction", gid}, strings.Fields(lines[0])[:5])
	fields := strings.Fields(lines[1])
	require.Equal(t, []string{"drift", "unregistered:", "attach"}, fields[:3])
	require.Equal(t, "public.stray_notes", fields[len(fields)-1])

	code, stdout, stderr = db.cli(t, "health", "--json")
	require.Equal(t, exitRefused, code, stderr)
	rep = healthReport{}
	require.NoError(t, json.Unmarshal([]byte(stdout), &rep))
	require.False(t, rep.Healthy)
	require.Len(t, rep.Findings, 1)
	require.Equal(t, "prepared_lock", rep.Findings[0].Problem)
	require.Equal(t, []driftFinding{{Table: "public.stray_notes", Problem: "unregistered: attach it by its community_id column with " +
		"community_deletion.attach_community_write_fence('public.stray_notes', 'delete', 'community_id') ('nullify' to keep its rows), " +
		"or exclude it with community_deletion.exclude_table('public.stray_notes', reason)"}}, rep.Drift)
	require.Contains(t, stdout, `"problem": "prepared_lock"`, "snake_case keys")

	// An excluded table is listed, with its reason, and is not drift.
	_, err = db.pool.Exec(ctx, "ROLLBACK PREPARED '"+gid+"'")
	require.NoError(t, err)
	_, err = db.pool.Exec(ctx, "SELECT community_deletion.exclude_table('public.stray_notes', 'notes outlive their tenant')")
	require.NoError(t, err)
	stdout = db.ok(t, "health")
	require.Contains(t, stdout, "healthy: no prepared transaction holds an advisory lock, no catalog drift")
	require.Equal(t, []string{"excluded", "public.stray_notes", "by", "postgres", "notes", "outlive", "their", "tenant"},
		strings.Fields(strings.Split(stdout, "\n")[0]))
	rep = healthReport{}
	require.NoError(t, json.Unmarshal([]byte(db.ok(t, "health", "--json")), &rep))
	require.True(t, rep.Healthy)
	require.Equal(t, []excludedTable{{Table: "public.stray_notes", Reason: "notes outlive their tenant", ExcludedBy: "postgres"}}, rep.Excluded)
}
