package migration

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pressly/goose/v3/lock"
)

var (
	// ErrLockTimeout reports that the schema destruction advisory lock stayed
	// held by someone else (another migration, or a destructive deletion
	// stage) for the whole lock timeout. Nothing was applied.
	ErrLockTimeout = errors.New("timed out waiting for the schema destruction advisory lock")

	// ErrLockLost reports that the migration session no longer held the
	// schema destruction advisory lock when it released it (pg_advisory_unlock
	// returned false, or the session was gone), so destructive deletion stages
	// may have run concurrently with part of the migration.
	ErrLockLost = errors.New("schema destruction advisory lock was lost during the migration")
)

// lockError carries a lock failure through goose's error wrapping; it matches
// ErrLockTimeout or ErrLockLost with errors.Is.
type lockError struct {
	kind error
	msg  string
	// sessionGone marks a lost lock whose session failed, rather than one
	// that pg_advisory_unlock reported as not held.
	sessionGone bool
}

func (e *lockError) Error() string { return e.msg }
func (e *lockError) Unwrap() error { return e.kind }

// sessionLocker is goose's lock.SessionLocker for the schema destruction key.
// It replaces lock.NewPostgresSessionLocker because that locker polls with a
// whole-second period and, at unlock, retries for a minute while
// pg_advisory_unlock returns false instead of reporting the lost lock.
//
// goose calls SessionLock and SessionUnlock on the same *sql.Conn it runs the
// SQL migrations and the version-table writes on (Provider.initialize,
// runIndividually), so the lock covers the whole operation and the session
// settings made here apply to every migration statement.
type sessionLocker struct {
	key              int64
	wait             time.Duration
	poll             time.Duration
	ddlLockTimeout   time.Duration
	statementTimeout time.Duration
	notice           func(message string)
	// guard, if set, runs on the session once it holds the lock, before
	// goose reads the version table; its error ends the operation.
	guard func(ctx context.Context, conn *sql.Conn) error
}

var _ lock.SessionLocker = (*sessionLocker)(nil)

// pollInterval returns the interval between lock attempts: a tenth of the
// wait, between 50ms and 1s.
func pollInterval(wait time.Duration) time.Duration {
	return min(max(wait/10, 50*time.Millisecond), time.Second)
}

// keyString names the lock key in decimal and hexadecimal.
func keyString(key int64) string {
	return fmt.Sprintf("%d (%#x)", key, uint64(key)) //nolint:gosec // the same 64 bits, printed unsigned
}

// SessionLock takes the exclusive session-level advisory lock on conn,
// polling pg_try_advisory_lock until the wait runs out, then sets the
// session's lock_timeout and statement_timeout and runs the guard. On a
// failure after the lock was taken it releases the lock again.
func (l *sessionLocker) SessionLock(ctx context.Context, conn *sql.Conn) error {
	deadline := time.Now().Add(l.wait)
	noticed := false
	for {
		var locked bool
		if err := conn.QueryRowContext(ctx, "SELECT pg_try_advisory_lock($1)", l.key).Scan(&locked); err != nil {
			return fmt.Errorf("try advisory lock %s: %w", keyString(l.key), err)
		}
		if locked {
			break
		}
		left := time.Until(deadline)
		if left <= 0 {
			return &lockError{kind: ErrLockTimeout, msg: fmt.Sprintf(
				"%s %s after %s: another migration or a destructive deletion stage holds it%s",
				ErrLockTimeout, keyString(l.key), l.wait, holders(ctx, conn, l.key))}
		}
		if !noticed && l.notice != nil {
			noticed = true
			l.notice(fmt.Sprintf("waiting up to %s for schema destruction advisory lock %s%s",
				l.wait, keyString(l.key), holders(ctx, conn, l.key)))
		}
		t := time.NewTimer(min(l.poll, left))
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("waiting for advisory lock %s: %w", keyString(l.key), ctx.Err())
		case <-t.C:
		}
	}
	settings := [][2]string{
		{"lock_timeout", postgresDuration(l.ddlLockTimeout)},
		{"statement_timeout", postgresDuration(l.statementTimeout)},
	}
	for _, s := range settings {
		if _, err := conn.ExecContext(ctx, "SELECT set_config($1, $2, false)", s[0], s[1]); err != nil {
			_, unlockErr := conn.ExecContext(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", l.key)
			return errors.Join(fmt.Errorf("set %s on the migration session: %w", s[0], err), unlockErr)
		}
	}
	if _, err := conn.ExecContext(ctx, openGuardRun); err != nil {
		_, unlockErr := conn.ExecContext(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", l.key)
		return errors.Join(fmt.Errorf("open a migration run for the DDL guard: %w", err), unlockErr)
	}
	if l.guard != nil {
		if err := l.guard(ctx, conn); err != nil {
			return errors.Join(err, l.SessionUnlock(context.WithoutCancel(ctx), conn))
		}
	}
	return nil
}

// SessionUnlock releases the advisory lock. It reports ErrLockLost when the
// session no longer held it, instead of retrying as goose's locker does. It
// then restores the session defaults of the settings, since conn goes back to
// the pool. If the session cannot be cleaned up, the connection is discarded:
// ending the session releases whatever it still holds.
func (l *sessionLocker) SessionUnlock(ctx context.Context, conn *sql.Conn) error {
	// A migration interrupted by cancellation can leave its transaction open
	// and aborted on the session (database/sql rolls back with the canceled
	// context, which pgx refuses). Nothing in it may be kept; end it so the
	// unlock can run. Session-level advisory locks survive a rollback.
	_, _ = conn.ExecContext(ctx, "ROLLBACK")
	// A session that stays in a migration run would be exempt from the DDL
	// guard after it went back to the pool: end the session instead.
	if _, err := conn.ExecContext(ctx, closeGuardRun); err != nil {
		defer discard(conn)
	}
	var unlocked bool
	var err error
	for range 3 {
		err = conn.QueryRowContext(ctx, "SELECT pg_advisory_unlock($1)", l.key).Scan(&unlocked)
		// A cancel request sent for the interrupted migration can reach the
		// server late and cancel this statement instead; try again.
		if !isQueryCanceled(err) {
			break
		}
	}
	if err != nil {
		discard(conn)
		return &lockError{kind: ErrLockLost, sessionGone: true, msg: fmt.Sprintf(
			"%s: could not release advisory lock %s, the migration session failed (%v); "+
				"destructive deletion stages may have run concurrently with the migration",
			ErrLockLost, keyString(l.key), err)}
	}
	var lost error
	if !unlocked {
		lost = &lockError{kind: ErrLockLost, msg: fmt.Sprintf(
			"%s: advisory lock %s was no longer held by the migration session at unlock "+
				"(did a migration run pg_advisory_unlock_all or DISCARD ALL?); "+
				"destructive deletion stages may have run concurrently with the migration",
			ErrLockLost, keyString(l.key))}
	}
	for _, name := range []string{"lock_timeout", "statement_timeout"} {
		if _, err := conn.ExecContext(ctx, "RESET "+name); err != nil {
			discard(conn) // rather than pool a session with our settings
			break
		}
	}
	return lost
}

// openGuardRun and closeGuardRun open and close a migration run of the
// optional DDL guard (sql/optional/community_deletion_ddl_guard.sql), when it
// is installed: the guard exempts the DDL of a session in a run that a login
// of the owner of schema community_deletion opened, and no other.
const (
	openGuardRun = `DO $$ BEGIN
IF pg_catalog.to_regprocedure('community_deletion.community_deletion_ddl_guard_open_run()') IS NOT NULL THEN
    PERFORM community_deletion.community_deletion_ddl_guard_open_run();
END IF; END $$`
	closeGuardRun = `DO $$ BEGIN
IF pg_catalog.to_regprocedure('community_deletion.community_deletion_ddl_guard_close_run()') IS NOT NULL THEN
    PERFORM community_deletion.community_deletion_ddl_guard_close_run();
END IF; END $$`
)

// discard closes conn's session instead of returning it to the pool.
func discard(conn *sql.Conn) {
	_ = conn.Raw(func(any) error { return driver.ErrBadConn })
}

func isQueryCanceled(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "57014"
}

// holders describes, best effort, the sessions that hold the advisory lock:
// an exclusive holder is another migration, a shared one a destructive stage.
func holders(ctx context.Context, conn *sql.Conn, key int64) string {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	rows, err := conn.QueryContext(ctx, `
SELECT l.pid, l.mode, coalesce(a.application_name, '')
FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND l.classid::bigint = $1 AND l.objid::bigint = $2
  AND l.pid <> pg_backend_pid()
ORDER BY l.pid`, int64(uint64(key)>>32), int64(uint64(key)&0xffffffff)) //nolint:gosec // splits the key's 64 bits into pg_locks' two 32-bit halves
	if err != nil {
		return ""
	}
	defer rows.Close()
	var found []string
	for rows.Next() {
		var pid int64
		var mode, app string
		if rows.Scan(&pid, &mode, &app) != nil {
			return ""
		}
		who := "a destructive deletion stage"
		if mode == "ExclusiveLock" {
			who = "another migration"
		}
		s := fmt.Sprintf("pid %d, %s: %s", pid, mode, who)
		if app != "" {
			s += fmt.Sprintf(", application_name %q", app)
		}
		found = append(found, s)
	}
	if rows.Err() != nil || len(found) == 0 {
		return ""
	}
	return " (held by " + strings.Join(found, "; ") + ")"
}
