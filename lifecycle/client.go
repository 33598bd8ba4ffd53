package lifecycle

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The deployment roles (see docs/roles.md): each client
// needs its connection's login to be a member of one.
const (
	// RoleOperator is the group role of people and deletionctl.
	RoleOperator = "community_deletion_operator"
	// RoleExecutor is the group role of the deletion executor.
	RoleExecutor = "community_deletion_executor"
	// RoleServing is the group role of the service's application logins.
	RoleServing = "community_deletion_serving"
)

// Opts configures a client; nil means the defaults.
type Opts struct {
	// LockWait bounds how long each transaction waits for any lock (a
	// deletion lock or a row lock) before it gives up with a
	// *LockWaitError. Zero means DefaultLockWait.
	LockWait time.Duration
	// ReceiptKey signs the receipt an Engine writes as each deletion
	// completes (docs/receipts.md); nil writes unsigned receipts, which say
	// so. Only an Engine uses it; it must be an Ed25519 private key. The
	// database refuses a receipt that is not signed as the deployment's
	// receipt key registry says, or by the key the chain is at:
	// Engine.CheckReceiptKey says so before anything is claimed.
	ReceiptKey ed25519.PrivateKey
}

// Operator is the deletion lifecycle for operators (people, deletionctl):
// submit, inventory, approve, list, inspect, abort and unblock. Its pool's
// login must be a member of RoleOperator. Safe for concurrent use.
type Operator struct{ *store }

// Engine is the executor's step-by-step API over RoleExecutor: claims,
// heartbeats, every stage step from the fence to retention, retries and
// blocks. executor.Runner drives it; most services never call it directly.
// Safe for concurrent use.
type Engine struct{ *store }

// Serving is the lifecycle for the service's own write paths over
// RoleServing: guard a transaction's writes to a community, and hold a
// serving write lease across a side effect the write fence cannot see. Safe
// for concurrent use.
type Serving struct{ *store }

// NewOperator returns an Operator over pool after checking, once, that the
// pool's login is a member of RoleOperator; otherwise the error says which
// grant is missing and matches ErrAccessDenied.
func NewOperator(ctx context.Context, pool *pgxpool.Pool, opts *Opts) (*Operator, error) {
	s, err := newStore(ctx, pool, opts, RoleOperator)
	if err != nil {
		return nil, err
	}
	return &Operator{s}, nil
}

// NewEngine returns an Engine over pool after checking, once, that the
// pool's login is a member of RoleExecutor.
func NewEngine(ctx context.Context, pool *pgxpool.Pool, opts *Opts) (*Engine, error) {
	s, err := newStore(ctx, pool, opts, RoleExecutor)
	if err != nil {
		return nil, err
	}
	return &Engine{s}, nil
}

// NewServing returns a Serving over pool after checking, once, that the
// pool's login is a member of RoleServing.
func NewServing(ctx context.Context, pool *pgxpool.Pool, opts *Opts) (*Serving, error) {
	s, err := newStore(ctx, pool, opts, RoleServing)
	if err != nil {
		return nil, err
	}
	return &Serving{s}, nil
}

// RoleError reports a login that is not a member of the deployment role a
// client needs. It matches ErrAccessDenied.
type RoleError struct {
	// Login is the connection's session_user.
	Login string
	// Role is the deployment role it lacks.
	Role string
}

// Error names the login, the role and the grant that would fix it.
func (e *RoleError) Error() string {
	return fmt.Sprintf("login %s is not a member of %s: a DBA runs GRANT %s TO %s", e.Login, e.Role, e.Role, e.Login)
}

// Is makes a RoleError match ErrAccessDenied.
func (e *RoleError) Is(target error) bool { return target == ErrAccessDenied }

// newStore checks that pool's login is a member of role and returns the
// store over it.
func newStore(ctx context.Context, pool *pgxpool.Pool, opts *Opts, role string) (*store, error) {
	if pool == nil {
		return nil, invalidf("a %s client needs a pool", role)
	}
	s := &store{pool: pool, lockWait: DefaultLockWait}
	if opts != nil && opts.LockWait != 0 {
		s.lockWait = max(opts.LockWait, time.Millisecond)
	}
	if opts != nil && opts.ReceiptKey != nil {
		if len(opts.ReceiptKey) != ed25519.PrivateKeySize {
			return nil, invalidf("the receipt key is %d bytes, not an Ed25519 private key", len(opts.ReceiptKey))
		}
		s.receiptKey = opts.ReceiptKey
	}
	var member bool
	var login string
	// In a transaction of the store's, whose search_path names no schema
	// another role can write: pg_has_role with an unknown argument would
	// otherwise resolve to a better match planted in the session's.
	err := pgx.BeginTxFunc(ctx, pool, s.txOptions(true), func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, "SELECT pg_has_role(session_user, $1::text, 'MEMBER'), session_user::text", role).Scan(&member, &login)
	})
	if err != nil {
		return nil, fmt.Errorf("check membership of %s: %w", role, catalogMissing(translate(err)))
	}
	if !member {
		return nil, &RoleError{Login: login, Role: role}
	}
	return s, nil
}

// Ping checks that the database is reachable and the deletion control plane
// is installed.
func (o *Operator) Ping(ctx context.Context) error { return o.ping(ctx) }

// Ping checks that the database is reachable and the deletion control plane
// is installed.
func (e *Engine) Ping(ctx context.Context) error { return e.ping(ctx) }

// Ping checks that the database is reachable and the deletion control plane
// is installed.
func (s *Serving) Ping(ctx context.Context) error { return s.ping(ctx) }

// Get returns deletion request id, or an error matching ErrNotFound.
func (o *Operator) Get(ctx context.Context, id uuid.UUID) (*Request, error) { return o.get(ctx, id) }

// Get returns deletion request id, or an error matching ErrNotFound.
func (e *Engine) Get(ctx context.Context, id uuid.UUID) (*Request, error) { return e.get(ctx, id) }

// ValidateCatalog refuses, naming every problem, unless the live catalog
// matches the registry and what the migrations installed (see
// community_deletion_catalog_drift).
func (o *Operator) ValidateCatalog(ctx context.Context) error { return o.validateCatalog(ctx) }

// ValidateCatalog refuses, naming every problem, unless the live catalog
// matches the registry and what the migrations installed.
func (e *Engine) ValidateCatalog(ctx context.Context) error { return e.validateCatalog(ctx) }
