package lifecycle

import (
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
)

// Sentinel errors classify every failure the package returns. Match them with
// errors.Is; the message of a returned error carries the detail.
var (
	// ErrNotFound reports that a deletion request, approval or other record
	// the call names does not exist.
	ErrNotFound = errors.New("lifecycle: not found")

	// ErrRefused reports a fail-closed safety refusal: the package (or the
	// database under it) saw a state it cannot prove safe and stopped rather
	// than guess. Retrying without changing that state does not help.
	ErrRefused = errors.New("lifecycle: refused")

	// ErrAccessDenied reports that the caller is not allowed to perform the
	// operation, for example because it does not hold the request's lease.
	ErrAccessDenied = errors.New("lifecycle: access denied")

	// ErrStaleLease reports that the caller's deletion lease was taken over
	// or expired. Every error matching it also matches ErrAccessDenied, and
	// the usual reaction is to drop the request and claim again.
	ErrStaleLease = errors.New("lifecycle: stale deletion lease")

	// ErrInvalidInput reports an argument that is malformed on its own,
	// before any database state is consulted.
	ErrInvalidInput = errors.New("lifecycle: invalid input")

	// ErrNothingToClaim reports that a claim found no request it may take
	// now: none is approved, unblocked and due, or the one named is not.
	ErrNothingToClaim = errors.New("lifecycle: nothing to claim")
)

// WriteFenceConstraint is the constraint name every refusal of the write
// fence carries (pgconn.PgError.ConstraintName): the fence's triggers,
// assert_community_write_allowed() and the serving lease guard. Match it
// with IsWriteFenceRefusal rather than reading messages.
const WriteFenceConstraint = "community_write_fence"

// IsWriteFenceRefusal reports whether err is (or wraps) a refusal of the
// write fence: a write into a community that is not active, or one under a
// snapshot isolation level.
func IsWriteFenceRefusal(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.ConstraintName == WriteFenceConstraint
}

// DriftBlockedError reports that a claim found the request it would have
// taken but the catalog drifted: the request is now blocked durably with
// Reason. It matches ErrRefused.
type DriftBlockedError struct {
	// RequestID is the request that was blocked.
	RequestID uuid.UUID
	// Reason is the drift, as recorded on the request.
	Reason string
}

// Error says which request was blocked and why.
func (e *DriftBlockedError) Error() string {
	return fmt.Sprintf("deletion %s blocked on catalog drift: %s", e.RequestID, e.Reason)
}

// Is makes a DriftBlockedError match ErrRefused.
func (e *DriftBlockedError) Is(target error) bool { return target == ErrRefused }

// StaleLeaseError is returned when an execution call presents a lease that no
// longer owns its deletion request. It matches both ErrStaleLease and
// ErrAccessDenied under errors.Is.
type StaleLeaseError struct {
	// RequestID is the deletion request the lease was for.
	RequestID uuid.UUID
	// Owner is the executor identity the lease was issued to.
	Owner string
	// Generation is the lease generation the caller presented.
	Generation int64
}

// Error describes the stale lease on one line.
func (e *StaleLeaseError) Error() string {
	return fmt.Sprintf("stale deletion lease %s (owner %q, generation %d)",
		e.RequestID, boundText(e.Owner, MaxOperatorBytes), e.Generation)
}

// Is reports whether target is ErrStaleLease or ErrAccessDenied, so that a
// stale lease is handled as the access denial it is.
func (e *StaleLeaseError) Is(target error) bool {
	return target == ErrStaleLease || target == ErrAccessDenied
}

// IsStaleLease reports whether err, or any error it wraps, is a stale
// deletion lease. Other access denials report false, so a claim loop can
// tell "someone else owns this request now" from a real authorization
// failure.
func IsStaleLease(err error) bool {
	return errors.Is(err, ErrStaleLease)
}

// ServingWritesNotDrainedError is returned when a community still has live
// serving-path write leases at the point where the deletion must see none.
// It matches ErrRefused under errors.Is; the deletion may be retried once
// the listed operations have finished or their leases expired.
type ServingWritesNotDrainedError struct {
	// CommunityID is the community being deleted.
	CommunityID uuid.UUID
	// ActiveCount is the number of unexpired serving write leases.
	ActiveCount int64
	// Operations are the distinct operation names holding those leases.
	Operations []string
}

// Error names the community, the number of active leases and their
// operations on one line.
func (e *ServingWritesNotDrainedError) Error() string {
	ops := "none"
	if len(e.Operations) > 0 {
		ops = strings.Join(e.Operations, ", ")
	}
	msg := fmt.Sprintf("serving writes not drained for community %s: %d active write lease(s) (operations: %s)",
		e.CommunityID, e.ActiveCount, ops)
	return boundText(msg, MaxErrorBytes)
}

// Is reports whether target is ErrRefused.
func (e *ServingWritesNotDrainedError) Is(target error) bool {
	return target == ErrRefused
}

// kindError attaches one of the package sentinels to a detailed error. Its
// message is "<sentinel>: <detail>" and it unwraps to both, so %w verbs in the
// detail keep their causes reachable.
type kindError struct {
	kind   error
	detail error
}

func (e *kindError) Error() string { return e.kind.Error() + ": " + e.detail.Error() }

func (e *kindError) Unwrap() []error { return []error{e.kind, e.detail} }

// refusef returns a fail-closed safety refusal matching ErrRefused.
func refusef(format string, args ...any) error {
	return &kindError{kind: ErrRefused, detail: fmt.Errorf(format, args...)}
}

// invalidf returns a malformed-argument error matching ErrInvalidInput.
func invalidf(format string, args ...any) error {
	return &kindError{kind: ErrInvalidInput, detail: fmt.Errorf(format, args...)}
}

// notFoundf returns an error matching ErrNotFound.
func notFoundf(format string, args ...any) error {
	return &kindError{kind: ErrNotFound, detail: fmt.Errorf(format, args...)}
}

// deniedf returns an access denial matching ErrAccessDenied but not
// ErrStaleLease.
func deniedf(format string, args ...any) error {
	return &kindError{kind: ErrAccessDenied, detail: fmt.Errorf(format, args...)}
}
