package ephemeralpg

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// ReplicaOptions configures StartReplica.
type ReplicaOptions struct {
	// ExtraConfig holds extra postgresql.conf settings for the replica
	// (name -> value). They override the settings the replica copies from
	// its primary and this package's replica defaults: hot_standby = on and
	// wal_receiver_status_interval = 1s, so that the primary's
	// pg_stat_replication hears of replay progress within a second rather
	// than PostgreSQL's default ten on an idle connection.
	ExtraConfig map[string]string
}

// ReplicaUnsupportedError is returned by StartReplica for a server that
// was not started from the local server binaries: only for those does
// this package own the primary's files, binaries and configuration.
type ReplicaUnsupportedError struct {
	Source Source // where the primary comes from
}

func (e *ReplicaUnsupportedError) Error() string {
	return fmt.Sprintf("ephemeralpg: streaming replicas need a primary started from the local server binaries (%s); this server comes from %s",
		SourceLocal, e.Source)
}

// ErrReplayPaused is returned (wrapped) by Replica.WaitCaughtUp while the
// replica's replay is paused: it could never catch up.
var ErrReplayPaused = errors.New("replay is paused")

// replicaStatusPoll is how often Replica methods poll a condition.
const replicaStatusPoll = 10 * time.Millisecond

// replicaWaitLimit bounds every wait of StartReplica and the Replica methods
// whose ctx has no deadline of its own, so that a replica that never
// streams fails a test instead of hanging it.
const replicaWaitLimit = time.Minute

// Replica is a hot-standby streaming replica of a local Server, read-only
// and in its own temporary cluster. It is safe for concurrent use. Its
// waits, and StartReplica's, give up after a minute when ctx has no
// deadline.
type Replica struct {
	primary *Server
	c       *cluster
	name    string // application_name and physical replication slot on the primary

	closeOnce sync.Once
	closeErr  error
}

// StartReplica starts a hot-standby streaming replica of s, which must come
// from the local server binaries (else a *ReplicaUnsupportedError), and
// returns once the primary's pg_stat_replication shows it streaming. The
// replica is a pg_basebackup of s in a temporary directory of its own, on a
// free 127.0.0.1 port, streaming through a physical replication slot named
// Name(); Close it (Close of s does too), or a watchdog removes it when the
// process dies.
func (s *Server) StartReplica(ctx context.Context, opts ReplicaOptions) (_ *Replica, err error) {
	if err := checkSettings(opts.ExtraConfig); err != nil {
		return nil, fmt.Errorf("ephemeralpg: start replica: %w", err)
	}
	if s.local == nil {
		return nil, &ReplicaUnsupportedError{Source: s.source}
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil, errClosed
	}

	began := time.Now()
	r, err := s.startReplica(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("ephemeralpg: start replica: %w", err)
	}
	// Register, unless Close of s ran meanwhile: then nobody would close r.
	s.mu.Lock()
	closed = s.closed
	if !closed {
		s.replicas[r] = struct{}{}
	}
	s.mu.Unlock()
	if closed {
		return nil, errors.Join(errClosed, r.Close(context.WithoutCancel(ctx)))
	}
	s.logf("ephemeralpg: started streaming replica %s of 127.0.0.1:%d on 127.0.0.1:%d in %v, cluster in %s",
		r.name, s.local.port, r.c.port, time.Since(began).Round(time.Millisecond), r.c.dir)
	return r, nil
}

// startReplica does the work of StartReplica.
func (s *Server) startReplica(ctx context.Context, opts ReplicaOptions) (_ *Replica, err error) {
	primary := s.local
	_, chown, err := postgresUser()
	if err != nil {
		return nil, err
	}
	// Beside its primary's: in memory when the primary's fsync is off.
	dir, err := os.MkdirTemp(filepath.Dir(primary.dir), "ephemeralpg-replica-")
	if err != nil {
		return nil, fmt.Errorf("create temporary directory: %w", err)
	}
	c := &cluster{
		bin:    primary.bin,
		dir:    dir,
		data:   filepath.Join(dir, "data"),
		log:    filepath.Join(dir, "postgres.log"),
		attr:   primary.attr,
		noSync: primary.noSync,
	}
	if err := chown(dir); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("hand %s to the postgres user: %w", dir, err)
	}
	if c.release, err = startWatchdog(c); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	r := &Replica{primary: s, c: c, name: uniqueName("ephemeralpg_replica_")}
	defer func() {
		if err != nil {
			err = errors.Join(err, r.shutdown(context.WithoutCancel(ctx)))
		}
	}()

	// -R writes standby.signal, and primary_conninfo (with our
	// application_name) and primary_slot_name to postgresql.auto.conf; -C
	// creates the slot, which keeps the primary's WAL until the replica
	// has it.
	source := fmt.Sprintf("host=127.0.0.1 port=%d user=postgres application_name=%s", primary.port, r.name)
	basebackup := []string{"-D", c.data, "-d", source, "-X", "stream", "-C", "-S", r.name, "-R", "-c", "fast"}
	if c.noSync {
		basebackup = append(basebackup, "--no-sync")
	}
	if _, err := c.run(ctx, "pg_basebackup", basebackup...); err != nil {
		return nil, err
	}

	settings := map[string]string{
		"hot_standby":                  "on",
		"wal_receiver_status_interval": "1s",
	}
	maps.Copy(settings, opts.ExtraConfig)
	// The copied postgresql.conf names the primary's socket directory.
	settings["unix_socket_directories"] = dir
	if err := appendFile(filepath.Join(c.data, "postgresql.conf"), confLines("Added by ephemeralpg for a replica.", settings)); err != nil {
		return nil, fmt.Errorf("write replica's postgresql.conf: %w", err)
	}
	if _, err := c.start(ctx); err != nil {
		return nil, err
	}
	if err := r.waitStreaming(ctx); err != nil {
		return nil, err
	}
	return r, nil
}

// waitStreaming waits until the primary's pg_stat_replication shows the
// replica streaming.
func (r *Replica) waitStreaming(ctx context.Context) error {
	conn, err := r.primary.connectAdmin(ctx)
	if err != nil {
		return fmt.Errorf("primary: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	return poll(ctx, func() (bool, error) {
		var streaming bool
		err := conn.QueryRow(ctx,
			"SELECT EXISTS (SELECT FROM pg_stat_replication WHERE application_name = $1 AND state = 'streaming')",
			r.name).Scan(&streaming)
		if err != nil {
			return false, fmt.Errorf("read the primary's pg_stat_replication: %w", err)
		}
		return streaming, nil
	}, func() string {
		return "replica " + r.name + " streaming, as the primary's pg_stat_replication shows\nreplica's server log:\n" + r.c.logTail(0)
	})
}

// Name returns the replica's application_name, which identifies it in the
// primary's pg_stat_replication, and the name of its physical replication
// slot on the primary.
func (r *Replica) Name() string { return r.name }

// ConnString returns the connection string of the named database on the
// replica, for the postgres superuser; an empty name means the postgres
// database. The replica is read-only.
func (r *Replica) ConnString(database string) string {
	if database == "" {
		database = "postgres"
	}
	return localConnString(r.c.port, database)
}

// PauseReplay pauses WAL replay on the replica (pg_wal_replay_pause()) and
// returns once pg_get_wal_replay_pause_state() says "paused", which
// PostgreSQL 15 does at once, even with no WAL arriving. Until ResumeReplay,
// WAL is still received but not applied: changes stay invisible on the
// replica, and the primary's pg_stat_replication shows replay_lsn stuck
// while flush_lsn advances.
func (r *Replica) PauseReplay(ctx context.Context) error {
	if err := r.pauseReplay(ctx); err != nil {
		return fmt.Errorf("ephemeralpg: replica %s: pause replay: %w", r.name, err)
	}
	return nil
}

func (r *Replica) pauseReplay(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, r.ConnString(""))
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "SELECT pg_wal_replay_pause()"); err != nil {
		return err
	}
	var state string
	return poll(ctx, func() (bool, error) {
		err := conn.QueryRow(ctx, "SELECT pg_get_wal_replay_pause_state()").Scan(&state)
		return state == "paused", err
	}, func() string { return `pg_get_wal_replay_pause_state() "paused" (it says "` + state + `")` })
}

// ResumeReplay resumes WAL replay on the replica (pg_wal_replay_resume()).
func (r *Replica) ResumeReplay(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, r.ConnString(""))
	if err == nil {
		_, err = conn.Exec(ctx, "SELECT pg_wal_replay_resume()")
		conn.Close(context.WithoutCancel(ctx))
	}
	if err != nil {
		return fmt.Errorf("ephemeralpg: replica %s: resume replay: %w", r.name, err)
	}
	return nil
}

// WaitCaughtUp waits until the replica has replayed all the WAL the primary
// had written when it was called, so every transaction committed on the
// primary before is visible on the replica (to have that WAL sent even under
// synchronous_commit = off, it first commits an empty transaction with an
// xid on the primary synchronously). It fails with ErrReplayPaused while
// replay is paused.
func (r *Replica) WaitCaughtUp(ctx context.Context) error {
	if err := r.waitCaughtUp(ctx); err != nil {
		return fmt.Errorf("ephemeralpg: replica %s: wait until caught up: %w", r.name, err)
	}
	return nil
}

func (r *Replica) waitCaughtUp(ctx context.Context) error {
	primary, err := r.primary.connectAdmin(ctx)
	if err != nil {
		return fmt.Errorf("primary: %w", err)
	}
	defer primary.Close(context.WithoutCancel(ctx))
	var target string
	if err := primary.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&target); err != nil {
		return fmt.Errorf("read the primary's WAL insert position: %w", err)
	}
	// The commit record of a transaction with an xid lies after target,
	// and a synchronous commit flushes WAL up to it, and so all of target:
	// the walsender sends only flushed WAL.
	err = pgx.BeginFunc(ctx, primary, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL synchronous_commit = on"); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "SELECT pg_current_xact_id()")
		return err
	})
	if err != nil {
		return fmt.Errorf("flush the primary's WAL: %w", err)
	}

	replica, err := pgx.Connect(ctx, r.ConnString(""))
	if err != nil {
		return fmt.Errorf("connect to replica: %w", err)
	}
	defer replica.Close(context.WithoutCancel(ctx))
	var replayed string
	return poll(ctx, func() (bool, error) {
		var caughtUp bool
		var pause string
		err := replica.QueryRow(ctx,
			"SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn, pg_last_wal_replay_lsn()::text, pg_get_wal_replay_pause_state()",
			target).Scan(&caughtUp, &replayed, &pause)
		switch {
		case err != nil:
			return false, fmt.Errorf("read the replica's replay position: %w", err)
		case caughtUp:
			return true, nil
		case pause != "not paused":
			return false, fmt.Errorf("replayed up to %s of %s: %w (%s)", replayed, target, ErrReplayPaused, pause)
		}
		return false, nil
	}, func() string { return "replay up to " + target + " (replayed up to " + replayed + ")" })
}

// WaitReplayLag returns once the primary's pg_stat_replication reports this
// replica's replay lag above bound. Pause replay and write on the primary
// first: the replica reports its position about once a second, and an idle
// one reports no lag at all.
func (r *Replica) WaitReplayLag(ctx context.Context, bound time.Duration) error {
	primary, err := r.primary.connectAdmin(ctx)
	if err != nil {
		return fmt.Errorf("ephemeralpg: replica %s: primary: %w", r.name, err)
	}
	defer primary.Close(context.WithoutCancel(ctx))
	var lag float64
	err = poll(ctx, func() (bool, error) {
		err := primary.QueryRow(ctx,
			"SELECT coalesce(max(extract(epoch FROM replay_lag)), 0)::float8 FROM pg_stat_replication WHERE application_name = $1",
			r.name).Scan(&lag)
		if err != nil {
			return false, fmt.Errorf("read pg_stat_replication: %w", err)
		}
		return time.Duration(lag*float64(time.Second)) > bound, nil
	}, func() string { return fmt.Sprintf("a replay lag above %s (last %.3fs)", bound, lag) })
	if err != nil {
		return fmt.Errorf("ephemeralpg: replica %s: wait for lag: %w", r.name, err)
	}
	return nil
}

// Close stops the replica, removes its directory and drops its replication
// slot on the primary. Close is idempotent.
func (r *Replica) Close(ctx context.Context) error {
	r.closeOnce.Do(func() {
		r.closeErr = r.shutdown(ctx)
		r.primary.mu.Lock()
		delete(r.primary.replicas, r)
		r.primary.mu.Unlock()
		if r.closeErr != nil {
			r.closeErr = fmt.Errorf("ephemeralpg: close replica %s: %w", r.name, r.closeErr)
		}
	})
	return r.closeErr
}

// shutdown stops and removes the replica's cluster, then drops its slot
// on the primary, if pg_basebackup created it.
func (r *Replica) shutdown(ctx context.Context) error {
	err := r.c.stop(ctx)
	if dropErr := r.dropSlot(ctx); dropErr != nil {
		err = errors.Join(err, dropErr)
	}
	return err
}

// dropSlot drops the replica's replication slot on the primary once the
// walsender that served it has let go of it.
func (r *Replica) dropSlot(ctx context.Context) error {
	conn, err := r.primary.connectAdmin(ctx)
	if err != nil {
		return fmt.Errorf("drop replication slot: primary: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	err = poll(ctx, func() (bool, error) {
		// The walsender may hold the slot for a moment after the replica
		// stopped; nothing else takes it.
		_, err := conn.Exec(ctx,
			"SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1 AND NOT active", r.name)
		if err != nil {
			return false, err
		}
		var exists bool
		err = conn.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_replication_slots WHERE slot_name = $1)", r.name).Scan(&exists)
		return !exists, err
	}, func() string { return "replication slot " + r.name + " inactive" })
	if err != nil {
		return fmt.Errorf("drop replication slot: %w", err)
	}
	return nil
}

// poll calls cond every replicaStatusPoll until it reports true or fails,
// or ctx is done (after replicaWaitLimit if ctx has no deadline); then the
// error names what was awaited.
func poll(ctx context.Context, cond func() (bool, error), awaited func() string) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, replicaWaitLimit,
			fmt.Errorf("gave up after %v", replicaWaitLimit))
		defer cancel()
	}
	ticker := time.NewTicker(replicaStatusPoll)
	defer ticker.Stop()
	for {
		ok, err := cond()
		if err != nil && ctx.Err() == nil {
			return err
		}
		if ok && err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", awaited(), context.Cause(ctx))
		case <-ticker.C:
		}
	}
}

// ErrNotLocal reports an operation that only a server started from the
// local binaries supports.
var ErrNotLocal = errors.New("ephemeralpg: only a server started from the local binaries supports this")

// CrashRestart stops a local server the way a crash would (pg_ctl stop -m
// immediate: no checkpoint, every session cut) and starts it again on the
// same port, so that it runs crash recovery. Sessions are gone; connection
// strings stay valid.
func (s *Server) CrashRestart(ctx context.Context) error {
	if s.local == nil {
		return ErrNotLocal
	}
	c := s.local
	if _, err := c.run(ctx, "pg_ctl", "stop", "-D", c.data, "-m", "immediate", "-w", "-t", "30", "-s"); err != nil {
		return fmt.Errorf("ephemeralpg: crash the server: %w", err)
	}
	if _, err := c.run(ctx, "pg_ctl", "start", "-D", c.data, "-l", c.log, "-w", "-t", "60", "-s",
		"-o", "-p "+strconv.Itoa(c.port)); err != nil {
		return fmt.Errorf("ephemeralpg: restart the server after a crash: %w", err)
	}
	return nil
}
