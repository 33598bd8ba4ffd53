package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	dbgen "github.com/tombstoneworks/communitydeletion/db/gen"
)

// MaxServingLeaseReapBatch is the most expired serving write leases one call
// of ReapExpiredServingWriteLeases deletes.
const MaxServingLeaseReapBatch = 10000

// ServingWriteLease is the durable, expiring admission of one external
// serving side effect (an upload, a remote call) of a community. It is
// acquired only while the community is active, so once the deletion starts
// quiescing no new one is admitted, while the leases already admitted may
// still renew, finish and release: the fence waits until none is left.
type ServingWriteLease struct {
	// ID identifies the lease row.
	ID uuid.UUID
	// CommunityID is the community whose writes the lease admits.
	CommunityID uuid.UUID
	// Operation names the side effect, for diagnostics.
	Operation string
	// Owner is the process or executor identity holding the lease.
	Owner string
	// Generation is the lease's generation, drawn from a table-wide
	// sequence, so it never repeats.
	Generation int64
	// FenceGeneration is the community's fence generation at acquisition.
	FenceGeneration int64
	// LeaseUntil is when the lease expires, on the database clock. Renewal
	// updates it.
	LeaseUntil time.Time
}

// ServingLeaseStats is an operational snapshot of the serving write lease
// table.
type ServingLeaseStats struct {
	// Active counts unexpired leases.
	Active int64
	// Expired counts expired leases not reaped yet.
	Expired int64
	// DeadTuples is PostgreSQL's estimate of the lease table's dead tuples.
	DeadTuples int64
}

// StaleServingLeaseError is returned when a serving write lease is no longer
// current: it expired, was released or reaped, does not match the stored
// lease exactly, or its community left the active and quiescing states or
// moved to another fence generation. It matches ErrAccessDenied under
// errors.Is, but not ErrStaleLease, which is about deletion leases.
type StaleServingLeaseError struct {
	// LeaseID is the lease the caller presented.
	LeaseID uuid.UUID
	// CommunityID is the community it was for.
	CommunityID uuid.UUID
	// Owner is the identity it was issued to.
	Owner string
	// Generation is the lease generation the caller presented.
	Generation int64
}

// Error describes the stale serving write lease on one line.
func (e *StaleServingLeaseError) Error() string {
	return fmt.Sprintf("stale serving write lease %s of community %s (owner %q, generation %d)",
		e.LeaseID, e.CommunityID, boundText(e.Owner, MaxOperatorBytes), e.Generation)
}

// Is reports whether target is ErrAccessDenied.
func (e *StaleServingLeaseError) Is(target error) bool {
	return target == ErrAccessDenied
}

// AcquireWriteLease admits one external serving side effect of
// community for d and returns its lease. It first asserts the community write
// admission, which refuses REPEATABLE READ and SERIALIZABLE and takes the
// shared community lock, so a lifecycle transition (which takes that lock
// exclusively) orders either before the acquisition, which then sees it, or
// after it, and then counts the new lease. A community that is quiescing,
// fenced, a tombstone or missing is refused with an error matching
// ErrAccessDenied. The lease's fence generation is the community's current
// one and its generation comes from the lease table's sequence. owner and
// operation are trimmed and must be storable names; d must be positive and
// is rounded up to whole seconds.
func (s *Serving) AcquireWriteLease(ctx context.Context, community uuid.UUID, operation, owner string, d time.Duration) (*ServingWriteLease, error) {
	if community == uuid.Nil {
		return nil, invalidf("serving write lease needs a community id")
	}
	operation, err := validateOperator(operation, "serving write operation")
	if err != nil {
		return nil, err
	}
	owner, err = validateOperator(owner, "serving write owner")
	if err != nil {
		return nil, err
	}
	seconds, err := servingLeaseSeconds(d)
	if err != nil {
		return nil, err
	}
	var lease *ServingWriteLease
	err = s.tx(ctx, func(q *dbgen.Queries) error {
		if err := q.CommunityWriteAssertAllowed(ctx, community); err != nil {
			return fmt.Errorf("admit serving write for community %s: %w", community, err)
		}
		row, err := q.ServingWriteLeaseInsert(ctx, dbgen.ServingWriteLeaseInsertParams{
			Operation: operation, Owner: owner, LeaseSeconds: seconds, CommunityID: community,
		})
		if errors.Is(err, pgx.ErrNoRows) {
			return deniedf("community %s is not active: no serving write lease is admitted", community)
		}
		if err != nil {
			return fmt.Errorf("insert serving write lease for community %s: %w", community, err)
		}
		lease = servingLeaseFromRow(&row)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return lease, nil
}

// RenewWriteLease extends lease to d from now and updates
// lease.LeaseUntil. Under the shared community lock it renews only exactly
// this unexpired lease, and only while its community is active at the
// lease's fence generation: a lease admitted before quiescing keeps its
// exclusion proof until its lease_until, but nothing renews it once the
// community is quiescing, so the fence waits at most for the longest
// lease. A lease that cannot be renewed returns a *StaleServingLeaseError.
// d must be positive and is rounded up to whole seconds.
func (s *Serving) RenewWriteLease(ctx context.Context, lease *ServingWriteLease, d time.Duration) error {
	if err := checkServingLease(lease); err != nil {
		return err
	}
	seconds, err := servingLeaseSeconds(d)
	if err != nil {
		return err
	}
	var until time.Time
	err = s.tx(ctx, func(q *dbgen.Queries) error {
		if err := q.CommunityDeletionLockShared(ctx, lease.CommunityID); err != nil {
			return fmt.Errorf("lock community %s: %w", lease.CommunityID, err)
		}
		renewed, err := q.ServingWriteLeaseRenew(ctx, dbgen.ServingWriteLeaseRenewParams{
			LeaseSeconds: seconds, ID: lease.ID, CommunityID: lease.CommunityID, Owner: lease.Owner,
			Generation: lease.Generation, FenceGeneration: lease.FenceGeneration,
		})
		if errors.Is(err, pgx.ErrNoRows) {
			return staleServingLease(lease)
		}
		if err != nil {
			return fmt.Errorf("renew serving write lease %s: %w", lease.ID, err)
		}
		until = renewed
		return nil
	})
	if err != nil {
		return err
	}
	lease.LeaseUntil = until
	return nil
}

// ReleaseWriteLease deletes exactly lease and reports whether it was
// still there. Releasing a lease that expired and was reaped, or was already
// released, is harmless and reports false.
func (s *Serving) ReleaseWriteLease(ctx context.Context, lease *ServingWriteLease) (bool, error) {
	if err := checkServingLease(lease); err != nil {
		return false, err
	}
	var released bool
	err := s.tx(ctx, func(q *dbgen.Queries) error {
		rows, err := q.ServingWriteLeaseDelete(ctx, dbgen.ServingWriteLeaseDeleteParams{
			ID: lease.ID, CommunityID: lease.CommunityID, Owner: lease.Owner,
			Generation: lease.Generation, FenceGeneration: lease.FenceGeneration,
		})
		if err != nil {
			return fmt.Errorf("release serving write lease %s: %w", lease.ID, err)
		}
		released = rows == 1
		return nil
	})
	if err != nil {
		return false, err
	}
	return released, nil
}

// VerifyWriteLease checks, under the shared community lock, that lease
// is still exactly current: unexpired on the database clock, with its
// community active or quiescing at the lease's fence generation. It returns a
// *StaleServingLeaseError otherwise. To make the final write of a side effect
// under the lease, use GuardTransactionWithServingLease in that write's own
// transaction instead: a check in a separate transaction proves nothing about
// a later one.
func (s *Serving) VerifyWriteLease(ctx context.Context, lease *ServingWriteLease) error {
	if err := checkServingLease(lease); err != nil {
		return err
	}
	return s.tx(ctx, func(q *dbgen.Queries) error {
		if err := q.CommunityDeletionLockShared(ctx, lease.CommunityID); err != nil {
			return fmt.Errorf("lock community %s: %w", lease.CommunityID, err)
		}
		return verifyServingLease(ctx, q, lease)
	})
}

// ReapExpiredServingWriteLeases deletes at most limit expired serving write
// leases, oldest expiry first, across all communities (tombstones included),
// and returns how many it deleted. Rows another transaction holds are skipped,
// so concurrent reapers never wait for one another. limit must be between 1
// and MaxServingLeaseReapBatch.
func (o *Operator) ReapExpiredServingWriteLeases(ctx context.Context, limit int) (int64, error) {
	if limit < 1 || limit > MaxServingLeaseReapBatch {
		return 0, invalidf("serving lease reap limit %d is outside 1..%d", limit, MaxServingLeaseReapBatch)
	}
	var reaped int64
	err := o.tx(ctx, func(q *dbgen.Queries) error {
		rows, err := q.ServingWriteLeaseDeleteExpired(ctx, int32(limit)) //nolint:gosec // limit is checked to be at most MaxServingLeaseReapBatch
		if err != nil {
			return fmt.Errorf("reap expired serving write leases: %w", err)
		}
		reaped = rows
		return nil
	})
	if err != nil {
		return 0, err
	}
	return reaped, nil
}

// ServingLeaseStats returns the number of active and expired serving write
// leases and PostgreSQL's dead-tuple estimate for their table, for
// monitoring the reaper. It counts the whole table.
func (o *Operator) ServingLeaseStats(ctx context.Context) (ServingLeaseStats, error) {
	var stats ServingLeaseStats
	err := o.tx(ctx, func(q *dbgen.Queries) error {
		row, err := q.ServingWriteLeaseStats(ctx)
		if err != nil {
			return fmt.Errorf("serving write lease stats: %w", err)
		}
		stats = ServingLeaseStats{Active: row.Active, Expired: row.Expired, DeadTuples: row.DeadTuples}
		return nil
	})
	if err != nil {
		return ServingLeaseStats{}, err
	}
	return stats, nil
}

// IsActive reports whether community exists, is active (no deletion
// has started quiescing it) and is not archived: whether the serving path
// should offer it at all. It is advice for the serving path, not an
// admission: admit writes with AcquireServingWriteLease or GuardTransaction.
func (s *Serving) IsActive(ctx context.Context, community uuid.UUID) (bool, error) {
	var active bool
	err := s.tx(ctx, func(q *dbgen.Queries) error {
		row, err := q.CommunityGetByID(ctx, community)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("get community %s: %w", community, err)
		}
		active = row.DeletionState == "active" && row.ArchivedAt == nil && row.DeletedAt == nil
		return nil
	})
	if err != nil {
		return false, err
	}
	return active, nil
}

// ServingWritesDrained reports whether community has no unexpired serving
// write lease left. It is an observation: the fence repeats the count under
// the exclusive community lock before it commits.
func (e *Engine) ServingWritesDrained(ctx context.Context, community uuid.UUID) (bool, error) {
	var drained bool
	err := e.tx(ctx, func(q *dbgen.Queries) error {
		row, err := q.ServingWriteLeaseCountActive(ctx, community)
		if err != nil {
			return fmt.Errorf("count serving write leases of community %s: %w", community, err)
		}
		drained = row.ActiveCount == 0
		return nil
	})
	if err != nil {
		return false, err
	}
	return drained, nil
}

// GuardTransaction admits the caller's own transaction tx to write community
// data of community. It runs the database's write admission
// (assert_community_write_allowed) in tx, which refuses REPEATABLE READ and
// SERIALIZABLE (an error matching ErrRefused that wraps the *pgconn.PgError
// with SQLSTATE 25000), then takes the shared community lock until tx ends,
// then refuses a community that is missing or not active (an error matching
// ErrAccessDenied). A transaction that already carries the deletion
// executor's or a serving write lease's settings is admitted exactly as the
// database admits it. Call it before the transaction's first write; the
// shared lock makes a lifecycle transition wait for tx. After a refusal tx is
// aborted and must be rolled back.
func (s *Serving) GuardTransaction(ctx context.Context, tx pgx.Tx, community uuid.UUID) error {
	if tx == nil {
		return invalidf("guard transaction needs a transaction")
	}
	if community == uuid.Nil {
		return invalidf("guard transaction needs a community id")
	}
	if err := dbgen.New(tx).CommunityWriteAssertAllowed(ctx, community); err != nil {
		return translate(fmt.Errorf("admit write to community %s: %w", community, err))
	}
	return nil
}

// GuardTenantTransaction is GuardTransaction for a tenant named by its key
// in the service's tenant table (IntKey, TextKey, UUIDKey): it runs
// assert_tenant_write_allowed in tx, with the same refusals. Call it before
// the transaction's first write; after a refusal tx must be rolled back.
func (s *Serving) GuardTenantTransaction(ctx context.Context, tx pgx.Tx, tenant TenantKey) error {
	if tx == nil {
		return invalidf("guard transaction needs a transaction")
	}
	if tenant == "" {
		return invalidf("guard transaction needs a tenant key")
	}
	if err := dbgen.New(tx).TenantWriteAssertAllowed(ctx, tenant.String()); err != nil {
		return translate(fmt.Errorf("admit write to community %s: %w", tenant, err))
	}
	return nil
}

// GuardTransactionWithLease admits the caller's own transaction tx to
// make the final writes of the side effect lease admitted. In tx it refuses
// any isolation level but READ COMMITTED (ErrRefused), takes the shared
// community lock until tx ends, verifies that lease is still exactly current
// (a *StaleServingLeaseError otherwise), and then carries the lease in tx's
// settings, so the write fence admits tx's writes to the community while it
// is quiescing; while it is active they are admitted anyway. The check and
// the writes share one transaction and one lock, so the fence cannot commit
// between them. After a refusal tx must be rolled back.
func (s *Serving) GuardTransactionWithLease(ctx context.Context, tx pgx.Tx, lease *ServingWriteLease) error {
	if tx == nil {
		return invalidf("guard transaction needs a transaction")
	}
	if err := checkServingLease(lease); err != nil {
		return err
	}
	q := dbgen.New(tx)
	isolation, err := q.TransactionIsolationGet(ctx)
	if err != nil {
		return translate(fmt.Errorf("read transaction isolation: %w", err))
	}
	if isolation != "read committed" {
		return refusef("serving write under lease %s refused: isolation level %s pins a snapshot that cannot see the deletion fence; use READ COMMITTED",
			lease.ID, isolation)
	}
	if err := q.CommunityDeletionLockShared(ctx, lease.CommunityID); err != nil {
		return translate(fmt.Errorf("lock community %s: %w", lease.CommunityID, err))
	}
	if err := verifyServingLease(ctx, q, lease); err != nil {
		return translate(err)
	}
	if err := q.ServingWriteLeaseSet(ctx, dbgen.ServingWriteLeaseSetParams{
		LeaseID: lease.ID.String(), Owner: lease.Owner,
		Generation: strconv.FormatInt(lease.Generation, 10), FenceGeneration: strconv.FormatInt(lease.FenceGeneration, 10),
	}); err != nil {
		return translate(fmt.Errorf("carry serving write lease %s: %w", lease.ID, err))
	}
	return nil
}

// verifyServingLease proves lease exactly current in the caller's
// transaction, which already holds the shared community lock.
func verifyServingLease(ctx context.Context, q *dbgen.Queries, lease *ServingWriteLease) error {
	valid, err := q.ServingWriteLeaseValid(ctx, dbgen.ServingWriteLeaseValidParams{
		ID: lease.ID, CommunityID: lease.CommunityID, Owner: lease.Owner,
		Generation: lease.Generation, FenceGeneration: lease.FenceGeneration,
	})
	if err != nil {
		return fmt.Errorf("verify serving write lease %s: %w", lease.ID, err)
	}
	if !valid {
		return staleServingLease(lease)
	}
	return nil
}

// checkServingLease refuses a lease that cannot name a stored lease.
func checkServingLease(lease *ServingWriteLease) error {
	switch {
	case lease == nil:
		return invalidf("serving write lease is nil")
	case lease.ID == uuid.Nil || lease.CommunityID == uuid.Nil:
		return invalidf("serving write lease has no id or community id")
	case strings.TrimSpace(lease.Owner) == "":
		return invalidf("serving write lease %s has no owner", lease.ID)
	}
	return nil
}

// staleServingLease is the error for a lease that is no longer current.
func staleServingLease(lease *ServingWriteLease) error {
	return &StaleServingLeaseError{
		LeaseID: lease.ID, CommunityID: lease.CommunityID, Owner: lease.Owner, Generation: lease.Generation,
	}
}

// servingLeaseSeconds converts a serving lease duration to the whole seconds
// the database adds to its clock, rounding up. d must be positive and at most
// MaxLeaseDuration.
func servingLeaseSeconds(d time.Duration) (int64, error) {
	if d <= 0 || d > MaxLeaseDuration {
		return 0, invalidf("serving write lease duration must be positive and at most %s, not %s", MaxLeaseDuration, d)
	}
	seconds := int64(d / time.Second)
	if d%time.Second != 0 {
		seconds++
	}
	return seconds, nil
}

// servingLeaseFromRow converts a stored lease.
func servingLeaseFromRow(row *dbgen.CommunityServingWriteLease) *ServingWriteLease {
	return &ServingWriteLease{
		ID:              row.ID,
		CommunityID:     row.CommunityID,
		Operation:       row.Operation,
		Owner:           row.Owner,
		Generation:      row.Generation,
		FenceGeneration: row.FenceGeneration,
		LeaseUntil:      row.LeaseUntil,
	}
}
