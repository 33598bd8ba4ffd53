package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	dbgen "github.com/tombstoneworks/communitydeletion/db/gen"
)

// DefaultLockWait bounds how long a lifecycle step waits for a deletion lock
// (a community's, or the schema-destruction lock) or a row lock.
const DefaultLockWait = 5 * time.Second

// ErrLockWait reports a lifecycle step that waited for a lock longer than its
// bound and gave up, changing nothing. It is transient: retry later (the
// executor does, and blocks the request durably after its retry budget).
var ErrLockWait = errors.New("lifecycle: lock wait timed out")

// LockWaitError names the lock a step gave up on and who held it. It
// matches ErrLockWait.
type LockWaitError struct {
	// Lock names the lock: "the deletion lock of community <id>", "the
	// schema-destruction lock", the fence marker's lock, "a row lock of <table> (tuple (<block>,<n>))"
	// when PostgreSQL said which row, or "a row lock".
	Lock string
	// Waited is the bound the step waited for.
	Waited time.Duration
	// Holders are the sessions and prepared transactions that held the lock
	// when the step gave up, when the database could name them.
	Holders []LockHolder

	community *uuid.UUID
	schema    bool
	marker    bool
	row       *lockedRow
	cause     error
}

// lockedRow is the row a timed-out row lock wait was for, as PostgreSQL's
// error context names it.
type lockedRow struct {
	table string
	tuple string
}

// LockHolder is one holder of a lock.
type LockHolder struct {
	// PID is the holding backend, 0 for a prepared transaction.
	PID int32
	// Role is the holder's login (a prepared transaction's owner).
	Role string
	// ApplicationName is the session's application_name, when visible.
	ApplicationName string
	// Mode is the lock mode held ("row lock" for a row's holder).
	Mode string
	// State is the session's state ("idle in transaction"), when visible:
	// set for a row lock's holders.
	State string
	// PreparedGID is the prepared transaction's gid, or "".
	PreparedGID string
}

func (h LockHolder) String() string {
	if h.PreparedGID != "" {
		return fmt.Sprintf("prepared transaction %q (role %s, %s)", h.PreparedGID, orUnknown(h.Role), h.Mode)
	}
	if h.State != "" {
		return fmt.Sprintf("pid %d (role %s, application_name %q, state %s, %s)",
			h.PID, orUnknown(h.Role), h.ApplicationName, h.State, h.Mode)
	}
	return fmt.Sprintf("pid %d (role %s, application_name %q, %s)", h.PID, orUnknown(h.Role), h.ApplicationName, h.Mode)
}

func orUnknown(s string) string {
	if s == "" {
		return "not visible"
	}
	return s
}

// Error says what was waited for, how long, and who held it, on one line.
func (e *LockWaitError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "waited %s for %s", e.Waited, e.Lock)
	if len(e.Holders) > 0 {
		holders := make([]string, len(e.Holders))
		for i, h := range e.Holders {
			holders[i] = h.String()
		}
		fmt.Fprintf(&b, ", held by %s", strings.Join(holders, "; "))
	}
	return b.String()
}

// Is makes a LockWaitError match ErrLockWait.
func (e *LockWaitError) Is(target error) bool { return target == ErrLockWait }

// Unwrap returns the database error.
func (e *LockWaitError) Unwrap() error { return e.cause }

// isLockTimeout reports a PostgreSQL lock_timeout (SQLSTATE 55P03).
func isLockTimeout(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == pgerrcode.LockNotAvailable
}

// lockCommunity takes community's deletion lock exclusively until the
// transaction ends, waiting at most the transaction's lock_timeout.
func lockCommunity(ctx context.Context, q *dbgen.Queries, community uuid.UUID) error {
	if err := q.CommunityDeletionLockExclusive(ctx, community); err != nil {
		if isLockTimeout(err) {
			return &LockWaitError{Lock: fmt.Sprintf("the deletion lock of community %s", community), community: &community, cause: err}
		}
		return fmt.Errorf("take the deletion lock of community %s: %w", community, err)
	}
	return nil
}

// lockSchemaShared takes the schema-destruction lock shared until the
// transaction ends, waiting at most the transaction's lock_timeout.
func lockSchemaShared(ctx context.Context, q *dbgen.Queries) error {
	if err := q.SchemaDestructionLockShared(ctx); err != nil {
		if isLockTimeout(err) {
			return &LockWaitError{Lock: "the schema-destruction lock", schema: true, cause: err}
		}
		return fmt.Errorf("take the schema-destruction lock: %w", err)
	}
	return nil
}

// waitedTuple matches the context PostgreSQL gives a lock_timeout while a
// statement waited for a row's locker: "while locking tuple (0,5) in
// relation "communities"" (or updating, deleting).
var waitedTuple = regexp.MustCompile(`while (?:locking|updating|deleting) tuple (\(\d+,\d+\)) in relation "([^"]+)"`)

// rowLockWait is the LockWaitError of a timed-out row lock wait, naming the
// row when the error's context does.
func rowLockWait(err error) *LockWaitError {
	lw := &LockWaitError{Lock: "a row lock", cause: err}
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok {
		if m := waitedTuple.FindStringSubmatch(pgErr.Where); m != nil {
			lw.row = &lockedRow{table: m[2], tuple: m[1]}
			lw.Lock = fmt.Sprintf("a row lock of %s (tuple %s)", m[2], m[1])
		}
	}
	return lw
}

// describeTimeout bounds the short transaction that names a lock's holders.
const describeTimeout = 5 * time.Second

// describeLockWait completes a LockWaitError from a failed transaction: the
// bound waited and, in a short transaction of its own, who holds the lock
// now. It is best effort; the error stands without holders.
func (s *store) describeLockWait(ctx context.Context, err error) error {
	var lw *LockWaitError
	if !errors.As(err, &lw) {
		if !isLockTimeout(err) {
			return err
		}
		lw = rowLockWait(err)
		err = lw
	}
	if lw.Waited == 0 {
		lw.Waited = s.lockWait
	}
	if lw.community == nil && !lw.schema && !lw.marker && lw.row == nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), describeTimeout)
	defer cancel()
	// Best effort: a failure leaves the error without holders. The
	// transaction's search_path names no schema another role can write.
	_ = pgx.BeginTxFunc(ctx, s.pool, s.txOptions(true), func(tx pgx.Tx) error {
		q := dbgen.New(tx)
		if lw.row != nil {
			lw.Holders = rowLockHolders(ctx, q, *lw.row)
			return nil
		}
		if lw.marker {
			holders, err := q.FenceMarkerHoldersList(ctx)
			if err != nil {
				return err
			}
			for _, h := range holders {
				lw.Holders = append(lw.Holders, LockHolder{
					PID: h.Pid, Role: h.RoleName, ApplicationName: h.ApplicationName, Mode: h.LockMode, PreparedGID: h.PreparedGid,
				})
			}
			return nil
		}
		var key int64
		var err error
		if lw.schema {
			key, err = q.SchemaDestructionLockKey(ctx)
		} else {
			key, err = q.CommunityDeletionLockKey(ctx, *lw.community)
		}
		if err != nil {
			return err
		}
		holders, err := q.LockHoldersList(ctx, key)
		if err != nil {
			return err
		}
		for _, h := range holders {
			lw.Holders = append(lw.Holders, LockHolder{
				PID: h.Pid, Role: h.RoleName, ApplicationName: h.ApplicationName, Mode: h.LockMode, PreparedGID: h.PreparedGid,
			})
		}
		return nil
	})
	return err
}

// rowLockHolders names who holds a lock on row, for the two control tables
// lifecycle steps lock rows of: the running transaction in the row's xmax,
// found in pg_locks, with its session's pid, role, application_name and
// state (or a prepared transaction's gid). The waiter's own
// pg_blocking_pids() is empty once its wait has timed out; the row still
// names its locker. Best effort: nil when the row, its table or its holder
// cannot be read.
func rowLockHolders(ctx context.Context, q *dbgen.Queries, row lockedRow) []LockHolder {
	var holders []LockHolder
	add := func(pid int32, role, app, state, gid string) {
		holders = append(holders, LockHolder{
			PID: pid, Role: role, ApplicationName: app, State: state, Mode: "row lock", PreparedGID: gid,
		})
	}
	switch row.table {
	case "communities":
		rows, err := q.CommunityRowLockHoldersList(ctx, row.tuple)
		if err != nil {
			return nil
		}
		for _, h := range rows {
			add(h.Pid, h.RoleName, h.ApplicationName, h.State, h.PreparedGid)
		}
	case "community_deletion_requests":
		rows, err := q.RequestRowLockHoldersList(ctx, row.tuple)
		if err != nil {
			return nil
		}
		for _, h := range rows {
			add(h.Pid, h.RoleName, h.ApplicationName, h.State, h.PreparedGid)
		}
	}
	return holders
}
