package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	dbgen "github.com/tombstoneworks/communitydeletion/db/gen"
)

// The fence marker (migration 00029; docs/invariants.md, "The near-free
// path") holds a bit for each community that is quiescing or fenced. A
// community's bit is set, under the marker's lock, by the database as the
// community leaves active; only a settle, from committed states, clears
// bits. Until then writes into tables bound by a foreign key take the
// fence's full path, so a settle that never runs costs time, never safety.

// lockFenceMarker takes the fence marker's lock exclusively until the
// transaction ends, waiting at most the transaction's lock_timeout for the
// transactions that wrote on the near-free path. It comes before the
// community's own lock.
func lockFenceMarker(ctx context.Context, q *dbgen.Queries) error {
	if err := q.FenceMarkerLock(ctx); err != nil {
		if isLockTimeout(err) {
			return &LockWaitError{Lock: fenceMarkerLock, marker: true, cause: err}
		}
		return fmt.Errorf("take the fence marker's lock: %w", err)
	}
	return nil
}

// drainFence, while the write fence is dormant (migration 00035), takes
// every table whose fence has the dormant path in SHARE mode until the
// transaction ends: that waits for the writes the dormant fence admitted,
// and the marker's trigger arms the fence, as the community leaves active,
// only in a transaction that holds them. It runs after the marker's lock,
// which keeps the fence from being armed or disarmed meanwhile. A wait
// past the drain's own short bound is a *LockWaitError naming the table
// and its writers.
func drainFence(ctx context.Context, q *dbgen.Queries) error {
	if _, err := q.FenceDrain(ctx); err != nil {
		if isLockTimeout(err) {
			lock := "a SHARE lock on a table of the dormant write fence, for its drain"
			if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok && pgErr.TableName != "" {
				lock = fmt.Sprintf("a SHARE lock on %s.%s, for the dormant write fence's drain (%s)",
					pgErr.SchemaName, pgErr.TableName, pgErr.Detail)
			}
			return &LockWaitError{Lock: lock, Waited: fenceDrainWait, cause: err}
		}
		return fmt.Errorf("drain the dormant write fence: %w", err)
	}
	return nil
}

// fenceDrainWait is the drain's bound on each table's lock (the
// lock_timeout of community_deletion_fence_drain()).
const fenceDrainWait = 250 * time.Millisecond

// fenceMarkerLock names the marker's lock in a LockWaitError.
const fenceMarkerLock = "the fence marker's lock (held by transactions that wrote on the fence's near-free path)"

// settleFenceMarker clears the bits of communities no longer in flight, in
// a transaction of its own, and returns the marker.
func (s *store) settleFenceMarker(ctx context.Context) (int64, error) {
	var marker int64
	err := s.begin(ctx, false, func(tx pgx.Tx) error {
		var err error
		marker, err = dbgen.New(tx).FenceMarkerSettle(ctx)
		if err != nil && isLockTimeout(err) {
			return &LockWaitError{Lock: fenceMarkerLock, marker: true, cause: err}
		}
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("settle the fence marker: %w", err)
	}
	return marker, nil
}

// SettleFenceMarker clears the fence marker's bits of communities that are
// no longer quiescing or fenced, so that writes of their tables take the
// near-free path again, and returns the marker (0 when no deletion is in
// flight). It waits at most 5 s for writes admitted on the near-free path
// and then returns a *LockWaitError; the marker is then unchanged, which
// is safe. The executor settles after each tombstone and before each claim.
func (e *Engine) SettleFenceMarker(ctx context.Context) (int64, error) {
	return e.settleFenceMarker(ctx)
}

// SettleFenceMarker is Engine.SettleFenceMarker for an operator, who
// settles after an abort.
func (o *Operator) SettleFenceMarker(ctx context.Context) (int64, error) {
	return o.settleFenceMarker(ctx)
}
