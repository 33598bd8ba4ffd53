package lifecycle

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	dbgen "github.com/tombstoneworks/communitydeletion/db/gen"
)

// DefaultLeaseDuration is the claim a deletion executor holds on a request
// between heartbeats.
const DefaultLeaseDuration = 60 * time.Second

// MaxLeaseDuration bounds every lease: an executor's claim and heartbeat and
// a serving write lease. The schema refuses longer ones too (SQLSTATE
// 23514), so a lease of a process that died never strands a request or a
// fence for longer.
const MaxLeaseDuration = time.Hour

// store is what the three clients share: the pool and the bounds every
// transaction runs under. Every operation is one short READ COMMITTED
// transaction over the generated queries, on database time only, one
// statement at a time. The invariants it relies on are enforced by the
// schema's triggers as well; the clients check them first to explain a
// refusal, never as the only guard.
type store struct {
	pool     *pgxpool.Pool
	lockWait time.Duration
	// receiptKey signs the Engine's receipts; nil for unsigned.
	receiptKey ed25519.PrivateKey
}

// rowSecurityOff is in every transaction's BEGIN: a row-level security
// policy that would hide a tenant row from the deletion's counts, purge or
// proofs makes the statement fail (42501) instead of skipping the row. The
// search_path names only pg_catalog and this project's schema, which no
// other role may create in, so nothing a query names (an operator between
// a domain and a literal, say) resolves through a schema another role can
// write; the queries qualify their objects as well.
const rowSecurityOff = "SET LOCAL row_security = off; SET LOCAL search_path = pg_catalog, community_deletion, pg_temp"

// txOptions are every transaction's: READ COMMITTED, with the lock wait
// bound and row security off (rowSecurityOff) set in the BEGIN itself, so
// they cost no round trip.
func (s *store) txOptions(readOnly bool) pgx.TxOptions {
	mode := ""
	if readOnly {
		mode = " READ ONLY"
	}
	return pgx.TxOptions{
		IsoLevel: pgx.ReadCommitted,
		BeginQuery: fmt.Sprintf("BEGIN ISOLATION LEVEL READ COMMITTED%s; SET LOCAL lock_timeout = '%dms'; %s",
			mode, s.lockWait.Milliseconds(), rowSecurityOff),
		AccessMode: accessMode(readOnly),
	}
}

func accessMode(readOnly bool) pgx.TxAccessMode {
	if readOnly {
		return pgx.ReadOnly
	}
	return pgx.ReadWrite
}

// begin runs fn in one transaction with txOptions and commits it if fn
// returns nil. A lock wait that timed out comes back as a *LockWaitError
// naming the lock's holders; a guard's refusal as translate says.
func (s *store) begin(ctx context.Context, readOnly bool, fn func(tx pgx.Tx) error) error {
	err := pgx.BeginTxFunc(ctx, s.pool, s.txOptions(readOnly), fn)
	if err != nil && (isLockTimeout(err) || errors.As(err, new(*LockWaitError))) {
		return s.describeLockWait(ctx, err)
	}
	return translate(err)
}

// LeaseToken is the proof of a claim that every execution call presents. A
// newer claim raises the request's lease generation and makes older tokens
// stale; FenceGeneration binds the token to the community's fence once the
// request is fenced.
type LeaseToken struct {
	// RequestID is the claimed deletion request.
	RequestID uuid.UUID
	// Owner is the executor identity that holds the claim.
	Owner string
	// Generation is the request's lease generation at the claim.
	Generation int64
	// CommunityID is the community the request deletes.
	CommunityID uuid.UUID
	// TenantKey is that community's tenant key; empty means its id (a uuid
	// tenant).
	TenantKey TenantKey
	// FenceGeneration is the community's fence generation once fenced, or nil.
	FenceGeneration *int64
}

// WithFence returns a copy of the token bound to fence generation generation.
func (t LeaseToken) WithFence(generation int64) LeaseToken {
	t.FenceGeneration = &generation
	return t
}

// tx runs fn in one READ COMMITTED transaction and commits it if fn returns
// nil. PostgreSQL errors that carry a guard's refusal come back wrapped in
// ErrRefused (or ErrAccessDenied for a write fence) with the database's own
// message.
func (s *store) tx(ctx context.Context, fn func(q *dbgen.Queries) error) error {
	return s.begin(ctx, false, func(tx pgx.Tx) error { return fn(dbgen.New(tx)) })
}

// translate classifies a PostgreSQL error raised by the schema's guards.
func translate(err error) error {
	var pgErr *pgconn.PgError
	if err == nil || !errors.As(err, &pgErr) {
		return err
	}
	switch pgErr.Code {
	case pgerrcode.InsufficientPrivilege:
		return deniedf("%w", err)
	case pgerrcode.ObjectNotInPrerequisiteState:
		if pgErr.ConstraintName == WriteFenceConstraint {
			return deniedf("%w", err)
		}
		return refusef("%w", err)
	case pgerrcode.IntegrityConstraintViolation, pgerrcode.CheckViolation, pgerrcode.InvalidTransactionState:
		return refusef("%w", err)
	}
	return err
}

// requireFence returns the token's fence generation or refuses.
func requireFence(token LeaseToken) (int64, error) {
	if token.FenceGeneration == nil {
		return 0, refusef("deletion %s has no fence generation in its lease token", token.RequestID)
	}
	return *token.FenceGeneration, nil
}

// staleLease is the error for a token that no longer owns its request.
func staleLease(token LeaseToken) error {
	return &StaleLeaseError{RequestID: token.RequestID, Owner: token.Owner, Generation: token.Generation}
}

// verifyLease proves token current at stage in the caller's transaction.
func verifyLease(ctx context.Context, q *dbgen.Queries, token LeaseToken, stage Stage) error {
	valid, err := q.DeletionRequestLeaseValid(ctx, dbgen.DeletionRequestLeaseValidParams{
		ID: token.RequestID, CommunityID: token.CommunityID, Stage: string(stage),
		LeaseOwner: &token.Owner, LeaseGeneration: token.Generation,
	})
	if err != nil {
		return fmt.Errorf("verify deletion lease: %w", err)
	}
	if !valid {
		return staleLease(token)
	}
	return nil
}

// verifyLeaseAndFence proves token current at stage under its fence
// generation, with the community fenced (or a tombstone) at that generation.
func verifyLeaseAndFence(ctx context.Context, q *dbgen.Queries, token LeaseToken, stage Stage) error {
	generation, err := requireFence(token)
	if err != nil {
		return err
	}
	valid, err := q.DeletionRequestLeaseFenceValid(ctx, dbgen.DeletionRequestLeaseFenceValidParams{
		ID: token.RequestID, CommunityID: token.CommunityID, Stage: string(stage),
		LeaseOwner: &token.Owner, LeaseGeneration: token.Generation, FenceGeneration: &generation,
	})
	if err != nil {
		return fmt.Errorf("verify deletion lease and fence: %w", err)
	}
	if !valid {
		return staleLease(token)
	}
	return nil
}

// advance moves the leased request from one stage to its next.
func advance(ctx context.Context, q *dbgen.Queries, token LeaseToken, from, to Stage, fenceGeneration *int64) error {
	if next, ok := from.Next(); !ok || next != to {
		return refusef("illegal deletion transition %s -> %s", from, to)
	}
	rows, err := q.DeletionRequestAdvance(ctx, dbgen.DeletionRequestAdvanceParams{
		ToStage: string(to), FenceGeneration: fenceGeneration, ID: token.RequestID,
		FromStage: string(from), LeaseOwner: &token.Owner, LeaseGeneration: token.Generation,
	})
	if err != nil {
		return fmt.Errorf("advance deletion %s to %s: %w", token.RequestID, to, err)
	}
	if rows != 1 {
		return staleLease(token)
	}
	return nil
}

// marshalDetail encodes a checkpoint's detail; nil becomes {}.
func marshalDetail(detail any) ([]byte, error) {
	if detail == nil {
		return []byte("{}"), nil
	}
	b, err := json.Marshal(detail)
	if err != nil {
		return nil, invalidf("checkpoint detail is not JSON: %w", err)
	}
	return b, nil
}

// checkpointCompleted records a completed unit of the token's request.
func checkpointCompleted(ctx context.Context, q *dbgen.Queries, token LeaseToken, stage Stage, unit string, detail any) error {
	b, err := marshalDetail(detail)
	if err != nil {
		return err
	}
	if err := q.DeletionCheckpointComplete(ctx, dbgen.DeletionCheckpointCompleteParams{
		RequestID: token.RequestID, Stage: string(stage), UnitKey: unit,
		LeaseGeneration: token.Generation, Detail: b,
	}); err != nil {
		return fmt.Errorf("checkpoint %s/%s: %w", stage, unit, err)
	}
	return nil
}

// checkpointFailed records a failed unit; message is already bounded.
func checkpointFailed(ctx context.Context, q *dbgen.Queries, request uuid.UUID, generation int64, stage Stage, unit, message string) error {
	detail, err := json.Marshal(map[string]string{"error": message})
	if err != nil {
		return fmt.Errorf("encode checkpoint failure: %w", err)
	}
	if err := q.DeletionCheckpointFail(ctx, dbgen.DeletionCheckpointFailParams{
		RequestID: request, Stage: string(stage), UnitKey: unit,
		LeaseGeneration: max(generation, 1), Detail: detail, Error: &message,
	}); err != nil {
		return fmt.Errorf("checkpoint failure %s/%s: %w", stage, unit, err)
	}
	return nil
}

// setExecutor marks the transaction as the community's authorized deletion
// executor at generation.
func setExecutor(ctx context.Context, q *dbgen.Queries, community uuid.UUID, generation int64) error {
	if err := q.DeletionExecutorSet(ctx, dbgen.DeletionExecutorSetParams{
		CommunityID: community.String(), FenceGeneration: strconv.FormatInt(generation, 10),
	}); err != nil {
		return fmt.Errorf("set deletion executor: %w", err)
	}
	return nil
}

// digestHex renders a stored digest, or "" when none.
func digestHex(b []byte) string {
	if b == nil {
		return ""
	}
	return hex.EncodeToString(b)
}
