package ephemeralpg_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"regexp"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/ephemeralpg"
)

// replicationRow is the primary's pg_stat_replication row of one replica.
type replicationRow struct {
	sent, flush, replay string         // LSNs
	behind              int64          // bytes between flush_lsn and replay_lsn
	replayLag           *time.Duration // NULL when idle
}

func (row replicationRow) String() string {
	lag := "NULL"
	if row.replayLag != nil {
		lag = row.replayLag.String()
	}
	return fmt.Sprintf("sent_lsn %s flush_lsn %s replay_lsn %s (%d bytes behind) replay_lag %s",
		row.sent, row.flush, row.replay, row.behind, lag)
}

// replication reads the primary's pg_stat_replication row of the replica
// named name.
func replication(t *testing.T, primary *pgx.Conn, name string) replicationRow {
	t.Helper()
	var row replicationRow
	require.NoError(t, primary.QueryRow(t.Context(), `
		SELECT sent_lsn::text, flush_lsn::text, replay_lsn::text,
		       pg_wal_lsn_diff(flush_lsn, replay_lsn)::bigint, replay_lag
		FROM pg_stat_replication WHERE application_name = $1`, name).
		Scan(&row.sent, &row.flush, &row.replay, &row.behind, &row.replayLag))
	return row
}

// insertFlushed inserts n more rows into t on the primary in a synchronous
// commit and returns the primary's WAL flush position afterwards, which
// covers that commit.
func insertFlushed(t *testing.T, primary *pgx.Conn, n int) string {
	t.Helper()
	_, err := primary.Exec(t.Context(), "INSERT INTO t SELECT generate_series(1, $1)", n)
	require.NoError(t, err)
	var flushed string
	require.NoError(t, primary.QueryRow(t.Context(), "SELECT pg_current_wal_flush_lsn()::text").Scan(&flushed))
	return flushed
}

// waitReceived polls the primary's pg_stat_replication until the replica
// reports WAL up to lsn flushed, and returns that row.
func waitReceived(t *testing.T, primary *pgx.Conn, name, lsn string) replicationRow {
	t.Helper()
	waitFor(t, "replica "+name+" to report "+lsn+" flushed", func() bool {
		var received bool
		require.NoError(t, primary.QueryRow(t.Context(),
			"SELECT flush_lsn >= $2::pg_lsn FROM pg_stat_replication WHERE application_name = $1", name, lsn).Scan(&received))
		return received
	})
	return replication(t, primary, name)
}

// waitFor polls cond in the test's goroutine until it holds, failing the
// test after ten seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		require.True(t, time.Now().Before(deadline), "gave up waiting for %s", what)
		time.Sleep(10 * time.Millisecond)
	}
}

func count(t *testing.T, conn *pgx.Conn) int {
	t.Helper()
	var n int
	require.NoError(t, conn.QueryRow(t.Context(), "SELECT count(*) FROM t").Scan(&n))
	return n
}

// TestReplicaPausedReplayShowsAsLagOnThePrimary proves the machinery a
// replication-lag throttle is tested with: a replica of a local primary
// follows it; with replay paused it receives WAL without applying it, and
// the primary's pg_stat_replication shows that as growing replay lag;
// resumed, it catches up.
//
// What PostgreSQL 15 reports in pg_stat_replication.replay_lag, as measured
// here: while the replica is caught up and idle it is NULL (the walsender
// clears the lags once a reply shows everything sent replayed and nothing
// new happened), just after a catch-up it keeps the last measured value
// for a moment, and while replay is stuck behind sent WAL it is the age of
// the oldest unreplayed WAL as of the replica's last reply, so it grows
// with every reply: on each receipt of new WAL, and every
// wal_receiver_status_interval (1s for these replicas, 10s by default)
// even without new WAL. replay_lsn is stuck meanwhile and flush_lsn moves.
func TestReplicaPausedReplayShowsAsLagOnThePrimary(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	// A primary of its own, whatever this binary's server is, so that no
	// other test's WAL shares the experiment.
	primary, err := ephemeralpg.StartLocal(ctx, ephemeralpg.Options{}, t.Logf)
	require.NoError(t, err)
	defer func() { require.NoError(t, primary.Close(context.WithoutCancel(ctx))) }()
	replica, err := primary.StartReplica(ctx, ephemeralpg.ReplicaOptions{})
	require.NoError(t, err)
	name := replica.Name()

	dbString, _, err := primary.NewEmptyDatabase(ctx)
	require.NoError(t, err)
	cfg, err := pgx.ParseConfig(dbString)
	require.NoError(t, err)
	p := connect(t, dbString)
	_, err = p.Exec(ctx, "SET synchronous_commit = on")
	require.NoError(t, err)
	_, err = p.Exec(ctx, "CREATE TABLE t (id int)")
	require.NoError(t, err)
	insertFlushed(t, p, 100)

	// Caught up: the database, the table and the rows are all there.
	require.NoError(t, replica.WaitCaughtUp(ctx))
	r := connect(t, replica.ConnString(cfg.Database))
	require.Equal(t, 100, count(t, r))
	_, err = r.Exec(ctx, "INSERT INTO t VALUES (1)")
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr, "the replica is read-only")
	require.Equal(t, "25006", pgErr.Code) // read_only_sql_transaction

	require.NoError(t, replica.PauseReplay(ctx))
	var pausedAt string
	require.NoError(t, r.QueryRow(ctx, "SELECT pg_last_wal_replay_lsn()::text").Scan(&pausedAt))

	// Received and flushed, not replayed: the primary sees replay_lsn
	// stuck behind flush_lsn, and replay_lag measured.
	first := waitReceived(t, p, name, insertFlushed(t, p, 100))
	t.Logf("paused, after the first write: %s", first)
	require.Equal(t, pausedAt, first.replay)
	require.Positive(t, first.behind)
	require.NotNil(t, first.replayLag, "replay_lag while replay is stuck behind sent WAL")
	require.Equal(t, 100, count(t, r), "rows committed after the pause are invisible on the replica")

	// More WAL: the lag grows, in bytes and in time.
	second := waitReceived(t, p, name, insertFlushed(t, p, 100))
	t.Logf("paused, after the second write: %s", second)
	require.Equal(t, pausedAt, second.replay)
	require.Greater(t, second.behind, first.behind)
	require.NotNil(t, second.replayLag)
	require.Greater(t, *second.replayLag, *first.replayLag)
	require.Equal(t, 100, count(t, r))

	err = replica.WaitCaughtUp(ctx)
	require.ErrorIs(t, err, ephemeralpg.ErrReplayPaused, "a paused replica never catches up")

	require.NoError(t, replica.ResumeReplay(ctx))
	require.NoError(t, replica.WaitCaughtUp(ctx))
	require.Equal(t, 300, count(t, r))
	// The primary hears of it too: replay_lsn reaches what was sent.
	waitFor(t, "the primary's pg_stat_replication to show the replica caught up", func() bool {
		var caughtUp bool
		require.NoError(t, p.QueryRow(ctx,
			"SELECT replay_lsn >= $2::pg_lsn AND replay_lsn = sent_lsn FROM pg_stat_replication WHERE application_name = $1",
			name, second.flush).Scan(&caughtUp))
		return caughtUp
	})

	// Close stops and removes the replica and drops its slot.
	var dataDir string
	require.NoError(t, r.QueryRow(ctx, "SELECT current_setting('data_directory')").Scan(&dataDir))
	require.NoError(t, replica.Close(ctx))
	require.NoError(t, replica.Close(ctx), "Close is idempotent")
	_, err = os.Stat(dataDir)
	require.ErrorIs(t, err, fs.ErrNotExist, "replica's data directory")
	var slots int
	require.NoError(t, p.QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1", name).Scan(&slots))
	require.Zero(t, slots, "replication slot %s outlived its replica", name)
	requireUnreachable(t, replica.ConnString(""))
}

// requireUnreachable fails unless nothing answers at connString.
func requireUnreachable(t *testing.T, connString string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, connString)
	if err == nil {
		_ = conn.Close(ctx)
	}
	require.Error(t, err, "a server still answers at %s", connString)
}

func TestServerCloseClosesItsReplicas(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	primary, err := ephemeralpg.StartLocal(ctx, ephemeralpg.Options{}, t.Logf)
	require.NoError(t, err)
	defer func() { require.NoError(t, primary.Close(context.WithoutCancel(ctx))) }()
	replica, err := primary.StartReplica(ctx, ephemeralpg.ReplicaOptions{
		ExtraConfig: map[string]string{"work_mem": "5MB"},
	})
	require.NoError(t, err)

	var workMem string
	r := connect(t, replica.ConnString(""))
	require.NoError(t, r.QueryRow(ctx, "SHOW work_mem").Scan(&workMem))
	require.Equal(t, "5MB", workMem, "ReplicaOptions.ExtraConfig reaches the replica")
	var dataDir string
	require.NoError(t, r.QueryRow(ctx, "SELECT current_setting('data_directory')").Scan(&dataDir))
	require.NoError(t, r.Close(ctx))

	require.NoError(t, primary.Close(ctx))
	_, err = os.Stat(dataDir)
	require.ErrorIs(t, err, fs.ErrNotExist, "replica's data directory outlived its primary's Close")
	requireUnreachable(t, replica.ConnString(""))
	require.NoError(t, replica.Close(ctx), "closing a replica its primary closed")

	_, err = primary.StartReplica(ctx, ephemeralpg.ReplicaOptions{})
	require.Error(t, err, "StartReplica after Close")
}

func TestStartReplicaRefusesBadExtraConfig(t *testing.T) {
	t.Parallel()
	// Checked before anything else, so any server will do.
	_, err := server.StartReplica(t.Context(), ephemeralpg.ReplicaOptions{
		ExtraConfig: map[string]string{"work_mem": "1MB\nfsync = off"},
	})
	require.ErrorContains(t, err, "ExtraConfig: setting work_mem: value contains a NUL or line break")
}

func TestStartReplicaNeedsLocalBinaries(t *testing.T) {
	t.Parallel()
	// This binary's server, seen as if named by TEST_DATABASE_URL.
	s, err := ephemeralpg.StartURL(t.Context(), server.ConnString(""), t.Logf)
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close(context.Background())) }()

	_, err = s.StartReplica(t.Context(), ephemeralpg.ReplicaOptions{})
	var unsupported *ephemeralpg.ReplicaUnsupportedError
	require.ErrorAs(t, err, &unsupported)
	require.Equal(t, ephemeralpg.SourceURL, unsupported.Source)
	require.ErrorContains(t, err, "streaming replicas need a primary started from the local server binaries")
}

// replicaCrashEnv makes TestHelperReplicaCrash start a local cluster and a
// replica of it and exit without closing either.
const replicaCrashEnv = "EPHEMERALPG_TEST_HELPER_REPLICA_CRASH"

var replicaClusterLine = regexp.MustCompile(`(?m)^(primary|replica): (\S+) (\S+)$`)

func TestReplicaRemovedWhenProcessDies(t *testing.T) {
	t.Parallel()
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestHelperReplicaCrash$", "-test.count=1")
	// The child's TestMain uses this test's server; TestHelperReplicaCrash
	// starts a local primary and a replica of its own.
	cmd.Env = append(os.Environ(), replicaCrashEnv+"=1", ephemeralpg.EnvDatabaseURL+"="+server.ConnString(""))
	out, err := cmd.CombinedOutput()
	var exitErr *exec.ExitError
	require.ErrorAs(t, err, &exitErr, "%s", out)
	require.Equal(t, 3, exitErr.ExitCode(), "%s", out)
	matches := replicaClusterLine.FindAllSubmatch(out, -1)
	require.Len(t, matches, 2, "%s", out)

	for _, match := range matches {
		role, dir, connString := string(match[1]), string(match[2]), string(match[3])
		require.Eventually(t, func() bool {
			_, err := os.Stat(dir)
			return errors.Is(err, fs.ErrNotExist)
		}, 30*time.Second, 50*time.Millisecond, "%s directory %s outlived its process", role, dir)
		requireUnreachable(t, connString)
	}
}

// TestHelperReplicaCrash is a child process of
// TestReplicaRemovedWhenProcessDies; run directly, it does nothing.
func TestHelperReplicaCrash(t *testing.T) {
	t.Parallel()
	if os.Getenv(replicaCrashEnv) == "" {
		return
	}
	s, err := ephemeralpg.StartLocal(t.Context(), ephemeralpg.Options{}, t.Logf)
	require.NoError(t, err)
	replica, err := s.StartReplica(t.Context(), ephemeralpg.ReplicaOptions{})
	require.NoError(t, err)
	for _, srv := range []struct{ role, connString string }{
		{"primary", s.ConnString("")},
		{"replica", replica.ConnString("")},
	} {
		var dir string
		conn := connect(t, srv.connString)
		require.NoError(t, conn.QueryRow(t.Context(), "SELECT current_setting('unix_socket_directories')").Scan(&dir))
		fmt.Printf("%s: %s %s\n", srv.role, dir, srv.connString)
	}
	os.Exit(3) // no Close, no cleanups
}
