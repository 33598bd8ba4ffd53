package executor_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/executor"
	"github.com/tombstoneworks/communitydeletion/internal/fixture"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// metric returns the value of the series name{labels} gathered from reg: a
// counter's or gauge's value, a histogram's sample count; -1 when absent.
func metric(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	require.Zero(t, len(labels)%2, "label pairs")
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if !hasLabels(m, labels) {
				continue
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				return float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return -1
}

func hasLabels(m *dto.Metric, labels []string) bool {
	if len(m.GetLabel()) != len(labels)/2 {
		return false
	}
	for i := 0; i < len(labels); i += 2 {
		found := false
		for _, l := range m.GetLabel() {
			found = found || (l.GetName() == labels[i] && l.GetValue() == labels[i+1])
		}
		if !found {
			return false
		}
	}
	return true
}

// lastRows records the rows per table of the last purge event.
type lastRows struct {
	mu   sync.Mutex
	rows map[string]int64
}

func (l *lastRows) event(ev executor.Event) {
	if ev.TablesRows == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rows = ev.TablesRows
}

// The runner's metrics after one whole deletion count exactly what it did.
func TestMetricsOfAFullDeletion(t *testing.T) {
	t.Parallel()
	b := setup(t)
	target := b.createCommunity(t, 3)
	id := b.approve(t, target)

	reg := prometheus.NewRegistry()
	cfg := b.config("executor-1")
	cfg.Metrics = reg
	var purged lastRows
	cfg.Progress = purged.event
	claimed, err := b.runner(t, cfg).RunRequest(t.Context(), id)
	require.NoError(t, err)
	require.True(t, claimed)
	b.requireDeleted(t, id, target)

	m := func(name string, labels ...string) float64 {
		return metric(t, reg, "community_deletion_executor_"+name, labels...)
	}
	require.Equal(t, 1.0, m("claims_total"))
	require.Equal(t, 1.0, m("deletions_total", "stage", "retention_pending", "outcome", "completed"))
	require.Equal(t, float64(len(target.keys)), m("objects_deleted_total"))
	require.Equal(t, float64(chunksOf(3)), m("manifest_chunks_deleted_total"))
	require.Equal(t, 2.0, m("cache_keys_deleted_total"))
	require.NotEmpty(t, purged.rows)
	for table, rows := range purged.rows {
		require.Equal(t, float64(rows), m("rows_purged_total", "table", table), table)
	}
	for _, stage := range []lifecycle.Stage{lifecycle.StageApproved, lifecycle.StageFenced, lifecycle.StageDrained,
		lifecycle.StageBindingsRemoved, lifecycle.StagePostgresPurged, lifecycle.StageCachePurged, lifecycle.StageLogicallyVerified} {
		require.Equal(t, 1.0, m("stage_duration_seconds", "stage", string(stage)), "one duration observed leaving %s", stage)
	}
	require.Equal(t, -1.0, m("stage_duration_seconds", "stage", string(lifecycle.StageRetentionPending)), "nothing leaves retention_pending")
	require.Equal(t, 1.0, m("fence_wait_seconds"))
	require.Zero(t, m("claims_in_flight"))
	require.Zero(t, m("seconds_since_progress"))
	require.Zero(t, m("lease_losses_total"))
	require.Equal(t, -1.0, m("retries_total", "stage", "drained"), "no retry was recorded")

	// Every exported name follows the conventions (promlint: counters end
	// in _total, units in the name, help text present).
	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	require.Empty(t, problems)

	// A second runner cannot register the same names in the same registry.
	cfg2 := b.config("executor-2")
	cfg2.Metrics = reg
	_, err = executor.New(cfg2)
	require.ErrorIs(t, err, lifecycle.ErrInvalidInput)
	require.ErrorContains(t, err, "WrapRegistererWith")
}

// A run that crashed mid purge and the run that resumed it count each row
// once between them: the resumed run starts from the purge's recorded
// progress.
func TestRowsPurgedAreCountedOnceAcrossARestart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	target := b.createCommunity(t, 1)
	id := b.approve(t, target)

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	first := prometheus.NewRegistry()
	cfg := b.config("executor-1")
	cfg.Metrics = first
	cfg.Progress = func(ev executor.Event) {
		if len(ev.TablesRows) > 0 {
			cancel()
		}
	}
	_, err := b.runner(t, cfg).RunRequest(ctx, id)
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, 1.0, metric(t, first, "community_deletion_executor_deletions_total", "stage", "bindings_removed", "outcome", "stopped"))

	b.expireLease(t, id)
	second := prometheus.NewRegistry()
	cfg2 := b.config("executor-2")
	cfg2.Metrics = second
	var purged lastRows
	cfg2.Progress = purged.event
	claimed, err := b.runner(t, cfg2).RunRequest(t.Context(), id)
	require.NoError(t, err)
	require.True(t, claimed)
	b.requireDeleted(t, id, target)

	require.NotEmpty(t, purged.rows)
	var firstRows float64
	for table, rows := range purged.rows {
		a := max(metric(t, first, "community_deletion_executor_rows_purged_total", "table", table), 0)
		c := max(metric(t, second, "community_deletion_executor_rows_purged_total", "table", table), 0)
		require.Equal(t, float64(rows), a+c, "rows of %s: %v by the first run, %v by the second", table, a, c)
		firstRows += a
	}
	require.Positive(t, firstRows, "the first run purged a batch before it stopped")
}

// Retries count per stage, and the failure that spends the retry budget is
// counted as a block.
func TestMetricsOfRetriesAndBlocks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	target := b.createCommunity(t, 1)
	id := b.approve(t, target)

	objects := newCounting(b.files)
	objects.fail = true
	reg := prometheus.NewRegistry()
	cfg := b.config("executor-1")
	cfg.Objects = objects
	cfg.Metrics = reg
	r := b.runner(t, cfg)
	deadline := time.Now().Add(time.Minute)
	for {
		request, err := b.Operator.Get(t.Context(), id)
		require.NoError(t, err)
		if request.Blocked() {
			break
		}
		require.True(t, time.Now().Before(deadline), "not blocked in time")
		_, _ = r.RunRequest(t.Context(), id)
	}
	m := func(name string, labels ...string) float64 {
		return metric(t, reg, "community_deletion_executor_"+name, labels...)
	}
	budget := float64(lifecycle.MaxConsecutiveRetries)
	require.Equal(t, budget, m("retries_total", "stage", "drained"))
	require.Equal(t, budget-1, m("deletions_total", "stage", "drained", "outcome", "retry"))
	require.Equal(t, 1.0, m("deletions_total", "stage", "drained", "outcome", "blocked"))
	require.Equal(t, 1.0, m("blocks_total", "stage", "drained", "cause", "retry_budget"))
	require.Zero(t, m("objects_deleted_total"))

	// A fail-closed refusal blocks at once.
	other := b.createCommunity(t, 1)
	otherID := b.approve(t, other)
	regRefusing := prometheus.NewRegistry()
	refusing := b.config("executor-2")
	refusing.Metrics = regRefusing
	refusing.Prefixes = func(c lifecycle.TenantKey) []string { return []string{"media/" + c.String() + "/"} }
	claimed, err := b.runner(t, refusing).RunRequest(t.Context(), otherID)
	require.True(t, claimed)
	require.ErrorIs(t, err, executor.ErrBlocked)
	require.Equal(t, 1.0, metric(t, regRefusing, "community_deletion_executor_blocks_total", "stage", "fenced", "cause", "refused"))
	require.Equal(t, 1.0, metric(t, regRefusing, "community_deletion_executor_deletions_total", "stage", "fenced", "outcome", "blocked"))
	require.Equal(t, -1.0, metric(t, regRefusing, "community_deletion_executor_retries_total", "stage", "fenced"))
}

// While a claim is in flight the gauges say so, and time since progress
// grows while the object store hangs; the lease renewals are counted.
func TestInFlightGaugesAndRenewals(t *testing.T) {
	t.Parallel()
	b := setup(t)
	target := b.createCommunity(t, 1)
	id := b.approve(t, target)
	objects := &blockingObjects{ObjectStore: b.files, entered: make(chan struct{}, 1)}
	reg := prometheus.NewRegistry()
	cfg := b.config("executor-1")
	cfg.Objects = objects
	cfg.Metrics = reg
	cfg.HeartbeatInterval = 10 * time.Millisecond
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := b.runner(t, cfg).RunRequest(ctx, id) //nolint:testifylint // b.runner only builds the runner; its require cannot fail after setup
		done <- err
	}()
	<-objects.entered
	m := func(name string) float64 { return metric(t, reg, "community_deletion_executor_"+name) }
	require.Equal(t, 1.0, m("claims_in_flight"))
	since := m("seconds_since_progress")
	require.Positive(t, since)
	require.Eventually(t, func() bool {
		return m("seconds_since_progress") >= since+0.05 && m("lease_renewals_total") >= 2
	}, 30*time.Second, 10*time.Millisecond, "time since progress grows while Delete hangs; heartbeats renew")
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	require.Zero(t, m("claims_in_flight"))
	require.Zero(t, m("seconds_since_progress"))
	require.Equal(t, 1.0, metric(t, reg, "community_deletion_executor_deletions_total", "stage", "drained", "outcome", "stopped"))
}

// Health is nil while the lease renews, names the claim while its
// heartbeats are stuck behind a lock for more than two intervals, and
// recovers once they go through again.
func TestHealthReportsAStuckLease(t *testing.T) {
	t.Parallel()
	b := setup(t)
	target := b.createCommunity(t, 1)
	id := b.approve(t, target)
	objects := &blockingObjects{ObjectStore: b.files, entered: make(chan struct{}, 1)}
	cfg := b.config("executor-1")
	cfg.Objects = objects
	cfg.LeaseDuration = time.Minute
	cfg.HeartbeatInterval = 20 * time.Millisecond
	r := b.runner(t, cfg)
	require.NoError(t, r.Health(t.Context()), "nothing claimed, the database answers")

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := r.RunRequest(ctx, id)
		done <- err
	}()
	<-objects.entered
	require.Eventually(t, func() bool { return r.Health(t.Context()) == nil }, 30*time.Second, 5*time.Millisecond)

	// Hold the request row: every heartbeat waits for it (up to the lock
	// wait bound) and the last renewal ages.
	tx, err := b.Pool.Begin(t.Context())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }() // on failure too, or the pool never closes
	_, err = tx.Exec(t.Context(), "SELECT 1 FROM community_deletion_requests WHERE id = $1 FOR UPDATE", id)
	require.NoError(t, err)
	var unhealthy error
	require.Eventually(t, func() bool { unhealthy = r.Health(t.Context()); return unhealthy != nil }, 30*time.Second, 5*time.Millisecond)
	require.ErrorIs(t, unhealthy, executor.ErrUnhealthy)
	require.ErrorContains(t, unhealthy, "lease of deletion "+id.String()+" last renewed")
	require.NotContains(t, unhealthy.Error(), "database")
	require.NotContains(t, unhealthy.Error(), "\n")
	require.NoError(t, tx.Rollback(t.Context()))
	require.Eventually(t, func() bool { return r.Health(t.Context()) == nil }, 30*time.Second, 5*time.Millisecond)

	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	require.NoError(t, r.Health(t.Context()), "nothing claimed any more")
}

// Health fails when the database does not answer.
func TestHealthReportsAnUnreachableDatabase(t *testing.T) {
	t.Parallel()
	b := setup(t)
	pool := fixture.RolePool(t, b.URL, fixture.RoleExecutor)
	engine, err := lifecycle.NewEngine(t.Context(), pool, nil)
	require.NoError(t, err)
	cfg := b.config("executor-1")
	cfg.Engine = engine
	r := b.runner(t, cfg)
	require.NoError(t, r.Health(t.Context()))
	pool.Close()
	err = r.Health(t.Context())
	require.ErrorIs(t, err, executor.ErrUnhealthy)
	require.ErrorContains(t, err, "database: ")
}

// logRecords parses JSON log lines.
func logRecords(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var records []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(buf.Bytes()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var rec map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &rec), sc.Text())
		records = append(records, rec)
	}
	require.NoError(t, sc.Err())
	return records
}

// syncBuffer is a bytes.Buffer safe for the heartbeat's concurrent records.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

// Every record of a run carries the request, the community, the stage and
// the lease generation (and the executor); the levels follow the events.
func TestEveryLogRecordCarriesTheClaim(t *testing.T) {
	t.Parallel()
	b := setup(t)
	target := b.createCommunity(t, 2)
	id := b.approve(t, target)

	var out syncBuffer
	cfg := b.config("executor-1")
	cfg.HeartbeatInterval = 5 * time.Millisecond
	cfg.Logger = slog.New(slog.NewJSONHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug}))
	claimed, err := b.runner(t, cfg).RunRequest(t.Context(), id)
	require.NoError(t, err)
	require.True(t, claimed)
	request, err := b.Operator.Get(t.Context(), id)
	require.NoError(t, err)

	records := logRecords(t, &out.buf)
	require.NotEmpty(t, records)
	// The first record is about the process, not the claim: how its
	// receipts are signed (here unsigned, so at Warn).
	signing := records[0]
	require.Equal(t, "WARN", signing["level"], signing)
	require.True(t, strings.HasPrefix(signing["msg"].(string), "receipts are unsigned: "), signing)
	require.Equal(t, "executor-1", signing["executor"], signing)
	require.NotContains(t, signing, "request_id")
	levels := map[string]map[string]bool{}
	stages := map[string]bool{}
	var purged map[string]any
	for _, rec := range records[1:] {
		require.Equal(t, id.String(), rec["request_id"], rec)
		require.Equal(t, target.id.String(), rec["community_id"], rec)
		require.Equal(t, float64(request.LeaseGeneration), rec["lease_generation"], rec)
		require.Equal(t, "executor-1", rec["executor"], rec)
		stage, ok := rec["stage"].(string)
		require.True(t, ok, rec)
		_, err := lifecycle.ParseStage(stage)
		require.NoError(t, err, rec)
		stages[stage] = true
		level, msg := rec["level"].(string), rec["msg"].(string)
		if levels[level] == nil {
			levels[level] = map[string]bool{}
		}
		levels[level][msg] = true
		if strings.HasPrefix(msg, "postgres purged in ") {
			purged = rec
		}
	}
	// The purge's record times its final transaction, within its longest.
	require.NotNil(t, purged, "no record of the purge")
	require.Positive(t, purged["final_tx_seconds"], purged)
	require.LessOrEqual(t, purged["final_tx_seconds"], purged["longest_tx_seconds"], purged)
	require.True(t, levels["INFO"]["claimed at approved (lease generation "+itoa(request.LeaseGeneration)+")"], levels)
	require.True(t, levels["INFO"]["completed"], levels)
	require.True(t, levels["DEBUG"]["chunk 0 deleted (2 keys)"], levels)
	for _, s := range []lifecycle.Stage{lifecycle.StageApproved, lifecycle.StageFenced, lifecycle.StageDrained, lifecycle.StageBindingsRemoved,
		lifecycle.StagePostgresPurged, lifecycle.StageCachePurged, lifecycle.StageLogicallyVerified, lifecycle.StageRetentionPending} {
		require.True(t, stages[string(s)], "no record at %s", s)
	}

	// A block is an ERROR record with its cause, carrying the claim too.
	other := b.createCommunity(t, 1)
	otherID := b.approve(t, other)
	out.buf.Reset()
	cfg = b.config("executor-2")
	cfg.Logger = slog.New(slog.NewJSONHandler(&out, nil))
	cfg.Prefixes = func(c lifecycle.TenantKey) []string { return []string{"media/" + c.String() + "/"} }
	_, err = b.runner(t, cfg).RunRequest(t.Context(), otherID)
	require.ErrorIs(t, err, executor.ErrBlocked)
	records = logRecords(t, &out.buf)
	last := records[len(records)-1]
	require.Equal(t, "ERROR", last["level"])
	require.Equal(t, "refused", last["cause"])
	require.Equal(t, "fenced", last["stage"])
	require.Equal(t, otherID.String(), last["request_id"])
	require.Contains(t, last["error"], "differ from the approved inventory")
	for _, rec := range records {
		require.NotEqual(t, "DEBUG", rec["level"], "the default level leaves out per-chunk records")
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// stoppedClock is a purge clock that stands still but for the purge's own
// sleeps: the rate cap then holds back every batch after one that deleted
// rows, however long the host takes to run a batch.
type stoppedClock struct {
	mu    sync.Mutex
	now   time.Time
	slept time.Duration
}

func (c *stoppedClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *stoppedClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	c.slept += d
	return ctx.Err()
}

// A purge held back by its rate cap reports each pause: an event saying
// why, a Debug record with the cause, and a count per pause in
// pauses_total{activity="purge",cause="rate_cap"}; no Info record, since the cap holds
// back nearly every batch. The purge's clock stands still but for its own
// sleeps, so the cap holds batches back however slow the host is, and the
// test sleeps for none of them.
func TestAPurgeHeldByItsRateCapReportsThePauses(t *testing.T) {
	t.Parallel()
	b := setup(t)
	target := b.createCommunity(t, 1)
	id := b.approve(t, target)

	var out syncBuffer
	reg := prometheus.NewRegistry()
	cfg := b.config("executor-1")
	cfg.Metrics = reg
	cfg.Logger = slog.New(slog.NewJSONHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug}))
	cfg.Purge.MaxRowsPerSecond = 40
	clock := &stoppedClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	cfg.Purge.Clock = clock
	var mu sync.Mutex
	var paused []string
	cfg.Progress = func(ev executor.Event) {
		if ev.Paused != "" {
			mu.Lock()
			paused = append(paused, ev.Paused)
			mu.Unlock()
		}
	}
	claimed, err := b.runner(t, cfg).RunRequest(t.Context(), id)
	require.NoError(t, err)
	require.True(t, claimed)
	b.requireDeleted(t, id, target)

	mu.Lock()
	require.NotEmpty(t, paused)
	require.Equal(t, "rate cap of 40 rows/s", paused[0])
	mu.Unlock()
	// The cap kept the purge's average at 40 rows/s on its clock: it slept
	// until the last batch's rows were due.
	var purged int64
	require.NoError(t, b.Pool.QueryRow(t.Context(), `SELECT coalesce(sum(row_count), 0) FROM community_deletion.community_deletion_purge_progress
		WHERE request_id = $1`, id).Scan(&purged))
	require.Positive(t, purged)
	clock.mu.Lock()
	require.Positive(t, clock.slept)
	require.LessOrEqual(t, clock.slept, time.Duration(purged)*time.Second/40)
	clock.mu.Unlock()
	pauses := metric(t, reg, "community_deletion_executor_pauses_total", "activity", "purge", "cause", "rate_cap")
	require.Equal(t, float64(len(paused)), pauses, "one count per pause")
	var records int
	for _, rec := range logRecords(t, &out.buf) {
		if rec["msg"] == "purge paused: rate cap of 40 rows/s" {
			records++
			require.Equal(t, "DEBUG", rec["level"], rec)
			require.Equal(t, []any{"rate_cap"}, rec["causes"], rec)
			require.Equal(t, "bindings_removed", rec["stage"], rec)
		}
		require.NotEqual(t, "purge resumed", rec["msg"], "the rate cap's pauses are routine")
	}
	require.Equal(t, len(paused), records)
}

// A purge batch that runs past its statement cap counts in
// purge_batches_over_cap_total under its table: here every row of the
// first table the purge works on is locked until the counter moves, so the
// test would wait forever (a minute) without it.
func TestMetricsCountAPurgeBatchOverItsCap(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	target := b.createCommunity(t, 1)
	id := b.approve(t, target)

	holder, err := b.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback(ctx) }()
	_, err = holder.Exec(ctx, "SELECT 1 FROM fixture_audit_events WHERE community_id = $1 FOR UPDATE", target.id)
	require.NoError(t, err)

	reg := prometheus.NewRegistry()
	cfg := b.config("executor-1")
	cfg.Metrics = reg
	cfg.Purge.TxBudget = 25 * time.Millisecond
	runner := b.runner(t, cfg)
	done := make(chan error, 1)
	go func() {
		_, err := runner.RunRequest(ctx, id)
		done <- err
	}()
	wait, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for metric(t, reg, "community_deletion_executor_purge_batches_over_cap_total", "table", "fixture_audit_events") < 1 {
		select {
		case <-wait.Done():
			t.Fatal("no purge batch of fixture_audit_events was counted over its cap")
		case <-time.After(5 * time.Millisecond):
		}
	}
	require.NoError(t, holder.Commit(ctx))
	require.NoError(t, <-done)
	b.requireDeleted(t, id, target)
}
