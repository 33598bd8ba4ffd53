package lifecycle_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/ephemeralpg"
	"github.com/tombstoneworks/communitydeletion/internal/fixture"
	"github.com/tombstoneworks/communitydeletion/internal/testfactory"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// server is the throwaway PostgreSQL shared by the package's tests; each
// test gets its own database cloned from a migrated template.
var server *ephemeralpg.Server

func TestMain(m *testing.M) {
	// Prepared transactions hold locks in the lock-wait tests.
	ephemeralpg.RunTests(m, ephemeralpg.Options{ExtraConfig: map[string]string{"max_prepared_transactions": "8"}}, &server)
}

// testBundle is one test's database (migrations plus the fixture tenant
// tables) as the test factory writes to it: the superuser's URL and Pool,
// for setting up and inspecting, and the clients over the test logins (an
// Operator, a second operator as Approver, the executor's Engine and the
// service's Serving). Its methods inspect what the tests assert on.
type testBundle struct {
	*testfactory.DB
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	url, pool := fixture.NewTestPool(t, server)
	return &testBundle{testfactory.NewDB(t, url, pool)}
}

// exec runs one statement as the superuser and returns its error: the
// tests' way to forge, tamper and repair behind the clients' backs.
func (b *testBundle) exec(t *testing.T, sql string, args ...any) error {
	t.Helper()
	_, err := b.Pool.Exec(t.Context(), sql, args...)
	return err
}

// communityRow is a community's deletion state and profile as stored.
type communityRow struct {
	State           string
	FenceGeneration int64
	ArchivedAt      *time.Time
	DeletedAt       *time.Time
	SigningKey      []byte
	Icon            *string
}

// community reads community's row.
func (b *testBundle) community(t *testing.T, community uuid.UUID) communityRow {
	t.Helper()
	var c communityRow
	require.NoError(t, b.Pool.QueryRow(t.Context(), `SELECT deletion_state, deletion_fence_generation, archived_at,
		deleted_at, signing_key, icon FROM communities WHERE id = $1`, community).
		Scan(&c.State, &c.FenceGeneration, &c.ArchivedAt, &c.DeletedAt, &c.SigningKey, &c.Icon))
	return c
}

// snapshot renders everything a refused call must leave alone: the request
// row, its community, its approval, checkpoints and chunks, the executor
// heartbeats and the number of requests.
func (b *testBundle) snapshot(t *testing.T, request uuid.UUID) string {
	t.Helper()
	var snapshot string
	require.NoError(t, b.Pool.QueryRow(t.Context(), `SELECT json_build_object(
		'request', (SELECT row_to_json(r) FROM community_deletion_requests r WHERE r.id = $1),
		'community', (SELECT row_to_json(c) FROM communities c JOIN community_deletion_requests r ON r.community_id = c.id WHERE r.id = $1),
		'approval', (SELECT row_to_json(a) FROM community_deletion_approvals a WHERE a.request_id = $1),
		'checkpoints', (SELECT json_agg(k ORDER BY k.sequence) FROM community_deletion_checkpoints k WHERE k.request_id = $1),
		'chunks', (SELECT json_agg(m ORDER BY m.chunk_no) FROM community_deletion_manifest_keys m WHERE m.request_id = $1),
		'heartbeats', (SELECT json_agg(h ORDER BY h.executor_id) FROM community_deletion_executor_heartbeats h),
		'requests', (SELECT count(*) FROM community_deletion_requests))::text`, request).Scan(&snapshot))
	return snapshot
}

// Which waits waitForLockWaiters counts.
const (
	// advisoryLock is a wait for an advisory lock: a community's deletion
	// lock or the schema-destruction lock.
	advisoryLock = "l.locktype = 'advisory'"
	// rowLock is a wait for a row lock, or for the transaction holding one.
	rowLock = "l.locktype IN ('transactionid', 'tuple')"
)

// waitForLockWaiters blocks until at least n backends of the test database
// wait for a heavyweight lock matching where (a condition on pg_locks l and
// pg_stat_activity a; args are its parameters): how a test learns, from
// pg_locks rather than from a sleep, that concurrent calls have queued
// behind a lock. It fails the test after a minute.
func (b *testBundle) waitForLockWaiters(t *testing.T, n int, where string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for {
		var waiting int
		require.NoError(t, b.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
			WHERE NOT l.granted AND a.datname = current_database() AND (`+where+`)`, args...).Scan(&waiting),
			"waiting for %d lock waiter(s): %s", n, where)
		if waiting >= n {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d backend(s) never waited for a lock where %s (%d did)", n, where, waiting)
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// holdCommunityLock takes community's deletion lock exclusively in a
// transaction of its own and returns it; commit or roll back to release.
func (b *testBundle) holdCommunityLock(t *testing.T, community uuid.UUID) pgx.Tx {
	t.Helper()
	gate, err := b.Pool.Begin(t.Context())
	require.NoError(t, err)
	t.Cleanup(func() { _ = gate.Rollback(context.Background()) })
	_, err = gate.Exec(t.Context(), "SELECT pg_advisory_xact_lock(community_deletion_lock_key($1))", community)
	require.NoError(t, err)
	return gate
}

// requirePgCode asserts that err wraps a PostgreSQL error with SQLSTATE code.
func requirePgCode(t *testing.T, err error, code string) {
	t.Helper()
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr, "want a wrapped PostgreSQL error, got %v", err)
	require.Equal(t, code, pgErr.Code, pgErr.Message)
}

// requireNoDeadlock fails if err carries SQLSTATE 40P01.
func requireNoDeadlock(t *testing.T, err error) {
	t.Helper()
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok {
		require.NotEqual(t, "40P01", pgErr.Code, "PostgreSQL reported a deadlock: %s", pgErr.Message)
	}
}

// checkpoint returns the newest checkpoint of inspection whose unit key has
// prefix (checkpoints are append-only, oldest first).
func checkpoint(t *testing.T, inspection *lifecycle.Inspection, prefix string) lifecycle.Checkpoint {
	t.Helper()
	for _, c := range slices.Backward(inspection.Checkpoints) {
		if strings.HasPrefix(c.UnitKey, prefix) {
			return c
		}
	}
	t.Fatalf("no checkpoint %s* among %d", prefix, len(inspection.Checkpoints))
	return lifecycle.Checkpoint{}
}

// writeMember inserts one fixture_members row of community in tx.
func writeMember(ctx context.Context, tx pgx.Tx, community uuid.UUID) error {
	_, err := tx.Exec(ctx, "INSERT INTO fixture_members (community_id, handle) VALUES ($1, 'member')", community)
	return err
}

// tokenCall is a call that presents a lease token, for
// requireStaleTokensRefused.
type tokenCall struct {
	name string
	// request builds the request the call is made on, at the stage the
	// call needs.
	request func(t *testing.T) (*lifecycle.Request, lifecycle.LeaseToken)
	// lenient calls may act on an expired lease or a blocked request (to
	// release the lease): those variants are not probed.
	lenient bool
	// fenceRequired calls refuse (ErrRefused) a token without a fence
	// generation outright; the others find it a stale lease.
	fenceRequired bool
	call          func(ctx context.Context, request *lifecycle.Request, token lifecycle.LeaseToken) error
}

// staleToken is one way a lease token stops holding its request.
type staleToken struct {
	name string
	// stale returns the token to present in place of holder, the current
	// token, having changed the request if the variant needs to; and the
	// token that holds the request afterwards.
	stale func(t *testing.T, b *testBundle, holder lifecycle.LeaseToken) (presented, next lifecycle.LeaseToken)
	// restore undoes stale's change to the request, if any.
	restore string
	// touchesLease marks the variants that expire or block the lease.
	touchesLease bool
	// dropsFence marks the variant that drops the fence generation, which
	// only a token bound to one has.
	dropsFence bool
}

// staleTokens are the ways a token goes stale that every token call must
// refuse.
var staleTokens = []staleToken{
	{name: "older lease generation", stale: func(t *testing.T, b *testBundle, holder lifecycle.LeaseToken) (lifecycle.LeaseToken, lifecycle.LeaseToken) {
		// The lease lapses and the same executor claims the request again.
		next := testfactory.Reclaim(t.Context(), t, b.DB, holder, nil)
		require.Greater(t, next.Generation, holder.Generation)
		return holder, next
	}},
	{name: "other owner", stale: func(_ *testing.T, _ *testBundle, holder lifecycle.LeaseToken) (lifecycle.LeaseToken, lifecycle.LeaseToken) {
		presented := holder
		presented.Owner = "impostor"
		return presented, holder
	}},
	{name: "wrong community", stale: func(t *testing.T, b *testBundle, holder lifecycle.LeaseToken) (lifecycle.LeaseToken, lifecycle.LeaseToken) {
		presented := holder
		presented.CommunityID = testfactory.Community(t.Context(), t, b.DB, nil).ID
		return presented, holder
	}},
	{name: "wrong fence generation", stale: func(_ *testing.T, _ *testBundle, holder lifecycle.LeaseToken) (lifecycle.LeaseToken, lifecycle.LeaseToken) {
		if holder.FenceGeneration == nil {
			return holder.WithFence(7), holder
		}
		return holder.WithFence(*holder.FenceGeneration + 1), holder
	}},
	{name: "expired lease", touchesLease: true,
		stale: func(t *testing.T, b *testBundle, holder lifecycle.LeaseToken) (lifecycle.LeaseToken, lifecycle.LeaseToken) {
			testfactory.ExpireLease(t.Context(), t, b.DB, holder.RequestID)
			return holder, holder
		},
		restore: "UPDATE community_deletion_requests SET lease_until = now() + interval '1 hour' WHERE id = $1"},
	{name: "blocked request", touchesLease: true,
		stale: func(t *testing.T, b *testBundle, holder lifecycle.LeaseToken) (lifecycle.LeaseToken, lifecycle.LeaseToken) {
			require.NoError(t, b.exec(t, "UPDATE community_deletion_requests SET blocked_at = now(), blocked_reason = 'hold' WHERE id = $1", holder.RequestID))
			return holder, holder
		},
		restore: "UPDATE community_deletion_requests SET blocked_at = NULL, blocked_reason = NULL WHERE id = $1"},
	{name: "missing fence generation", dropsFence: true,
		stale: func(_ *testing.T, _ *testBundle, holder lifecycle.LeaseToken) (lifecycle.LeaseToken, lifecycle.LeaseToken) {
			presented := holder
			presented.FenceGeneration = nil
			return presented, holder
		}},
}

// requireStaleTokensRefused makes each call, on a request of its own, with
// every stale token that applies (staleTokens, one after the other on the
// same request, each undone before the next) and asserts that it is a stale
// lease (or, without a fence generation where one is required, a refusal)
// that changed nothing. Then the call must succeed with the current token:
// the refusals were about the token, not the setup. Calls run one at a
// time, as snapshot covers rows every request shares.
func (b *testBundle) requireStaleTokensRefused(t *testing.T, calls []tokenCall) {
	t.Helper()
	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			request, holder := c.request(t)
			for _, v := range staleTokens {
				if (c.lenient && v.touchesLease) || (v.dropsFence && holder.FenceGeneration == nil) {
					continue
				}
				t.Run(v.name, func(t *testing.T) {
					presented, next := v.stale(t, b, holder)
					before := b.snapshot(t, request.ID)
					err := c.call(t.Context(), request, presented)
					if v.dropsFence && c.fenceRequired {
						require.ErrorIs(t, err, lifecycle.ErrRefused)
						require.False(t, lifecycle.IsStaleLease(err), "%v", err)
					} else {
						require.True(t, lifecycle.IsStaleLease(err), "want a stale lease, got %v", err)
						require.ErrorIs(t, err, lifecycle.ErrAccessDenied)
					}
					require.Equal(t, before, b.snapshot(t, request.ID), "a refused call changes nothing")
					if v.restore != "" {
						require.NoError(t, b.exec(t, v.restore, request.ID))
					}
					holder = next
				})
			}
			require.NoError(t, c.call(t.Context(), request, holder), "with the current token")
		})
	}
}
