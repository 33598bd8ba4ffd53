package executor_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/executor"
	"github.com/tombstoneworks/communitydeletion/internal/ephemeralpg"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// Listing keys into manifest chunks and stamping deleted chunks write to
// PostgreSQL too, so they wait for a streaming replica that falls behind,
// as the purge does: a pause longer than MaxPause records a retry, with a
// log record and a count per activity; with the replica caught up the
// deletion completes. (A cluster of its own: pg_stat_replication is
// cluster-wide.)
func TestObjectWorkWaitsForALaggingReplica(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	srv, err := ephemeralpg.Start(ctx, ephemeralpg.Options{})
	require.NoError(t, err)
	defer srv.Close(context.WithoutCancel(ctx))
	b := setupOn(t, srv)
	replica, err := srv.StartReplica(ctx, ephemeralpg.ReplicaOptions{})
	require.NoError(t, err)
	defer replica.Close(context.WithoutCancel(ctx))
	target := b.createCommunity(t, 3)
	id := b.approve(t, target)

	// fallBehind pauses the replica's replay and writes until the primary
	// reports a replay lag above the bound.
	const bound = 300 * time.Millisecond
	fallBehind := func() {
		require.NoError(t, replica.PauseReplay(ctx))
		_, err := b.Pool.Exec(ctx, "CREATE TABLE IF NOT EXISTS lag_maker AS SELECT 1 AS g; INSERT INTO lag_maker SELECT g FROM generate_series(1, 10000) g")
		require.NoError(t, err)
		require.NoError(t, replica.WaitReplayLag(ctx, bound))
	}
	catchUp := func() {
		require.NoError(t, replica.ResumeReplay(ctx))
		require.NoError(t, replica.WaitCaughtUp(ctx))
	}
	var out syncBuffer
	reg := prometheus.NewRegistry()
	cfg := b.config("executor-1")
	cfg.Metrics = reg
	cfg.Logger = slog.New(slog.NewJSONHandler(&out, nil))
	cfg.Purge.MaxReplicationLag = bound
	cfg.Purge.MaxPause = time.Second
	var onDrained func()
	cfg.Progress = func(ev executor.Event) {
		if ev.Message == "drained" && onDrained != nil {
			onDrained()
		}
	}
	r := b.runner(t, cfg)
	// run runs the request once it is claimable again after a retry's backoff.
	run := func() error {
		for {
			claimed, err := r.RunRequest(ctx, id)
			if claimed || err != nil {
				return err
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	pauses := func(activity string) float64 {
		return metric(t, reg, "community_deletion_executor_pauses_total", "activity", activity, "cause", "replication_lag")
	}
	infoRecord := func(prefix string) bool {
		for _, rec := range logRecords(t, &out.buf) {
			if msg, _ := rec["msg"].(string); rec["level"] == "INFO" && strings.HasPrefix(msg, prefix) {
				return true
			}
		}
		return false
	}

	// Behind before the listing: no chunk is written, a retry is recorded.
	fallBehind()
	require.ErrorIs(t, run(), executor.ErrRetryScheduled)
	request, err := b.Operator.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, lifecycle.StageFenced, request.Stage)
	require.Contains(t, request.LastError, "replication lag")
	require.Equal(t, 1.0, pauses("listing"))
	require.True(t, infoRecord("listing paused: replication lag"))
	var chunks int
	require.NoError(t, b.Pool.QueryRow(ctx, "SELECT count(*) FROM community_deletion_manifest_keys WHERE request_id = $1", id).Scan(&chunks))
	require.Zero(t, chunks, "nothing was listed into the database while the replica was behind")

	// Caught up, the listing runs; behind again once drained, the object
	// deletion waits and retries.
	catchUp()
	onDrained = func() { onDrained = nil; fallBehind() }
	require.ErrorIs(t, run(), executor.ErrRetryScheduled)
	request, err = b.Operator.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, lifecycle.StageDrained, request.Stage)
	require.Equal(t, 1.0, pauses("object_deletion"))
	require.True(t, infoRecord("object deletion paused: replication lag"))
	for _, key := range target.keys {
		require.True(t, b.exists(t, key), "%s was deleted while the replica was behind", key)
	}

	catchUp()
	require.NoError(t, run())
	b.requireDeleted(t, id, target)
}
