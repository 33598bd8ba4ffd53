// Package soak runs the lifecycle's races many times over: an abort against
// the fence, two executors claiming one request, and serving writes and
// leases against the fence. Each iteration checks every invariant of the
// race; the whole soak must see zero violations and zero deadlocks.
// SOAK_ITERATIONS sets the iterations per soak (default 1000, or 50 under
// go test -short, which make test-quick passes; more soaks longer).
package soak

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/ephemeralpg"
	"github.com/tombstoneworks/communitydeletion/internal/fixture"
	"github.com/tombstoneworks/communitydeletion/internal/testfactory"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

var server *ephemeralpg.Server

func TestMain(m *testing.M) { ephemeralpg.RunTests(m, ephemeralpg.Options{}, &server) }

// iterations is how often each soak runs its race.
func iterations(t *testing.T) int {
	t.Helper()
	if s := os.Getenv("SOAK_ITERATIONS"); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(t, err)
		return n
	}
	if testing.Short() {
		return 50
	}
	return 1000
}

// newDB is one soak's database and clients.
func newDB(t *testing.T) *testfactory.DB {
	t.Helper()
	url, pool := fixture.NewTestPool(t, server)
	return testfactory.NewDB(t, url, pool)
}

// isDeadlock reports SQLSTATE 40P01.
func isDeadlock(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == pgerrcode.DeadlockDetected
}

// race runs fns at once, released together, and returns their errors.
func race(fns ...func() error) []error {
	start := make(chan struct{})
	errs := make([]error, len(fns))
	var wg sync.WaitGroup
	for i, fn := range fns {
		wg.Go(func() {
			<-start
			errs[i] = fn()
		})
	}
	close(start)
	wg.Wait()
	return errs
}

// state is a community's deletion state and fence generation, and its open
// request's stage.
func state(t *testing.T, db *testfactory.DB, request *lifecycle.Request) (community string, generation int64, stage string) {
	t.Helper()
	require.NoError(t, db.Pool.QueryRow(t.Context(), `SELECT c.deletion_state, c.deletion_fence_generation, r.stage
		FROM community_deletion_requests r JOIN communities c ON c.id = r.community_id WHERE r.id = $1`, request.ID).
		Scan(&community, &generation, &stage))
	return community, generation, stage
}

// An operator's abort races the executor's fence on a quiescing request:
// exactly one wins, the loser is refused (never a deadlock), and the state
// is the winner's: aborted with the community active under a raised
// generation, or fenced with the community fenced at the request's.
func TestSoakAbortAgainstTheFence(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := t.Context()
	n := iterations(t)
	outcomes := map[string]int{}
	for i := range n {
		request, token := testfactory.Request(ctx, t, db, &testfactory.RequestOpts{Stage: lifecycle.StageApproved, Quiesced: true})
		errs := race(
			func() error { _, err := db.Operator.Abort(ctx, request.ID, "operator", "soak"); return err },
			func() error { _, err := db.Engine.EnterFenced(ctx, token); return err },
		)
		for _, err := range errs {
			require.False(t, isDeadlock(err), "iteration %d: deadlock: %v", i, err)
		}
		community, generation, stage := state(t, db, request)
		switch {
		case errs[0] == nil && errs[1] != nil:
			require.Equal(t, "aborted", stage, "iteration %d", i)
			require.Equal(t, "active", community, "iteration %d", i)
			require.Positive(t, generation, "iteration %d: the abort raised the generation", i)
			require.True(t, lifecycle.IsStaleLease(errs[1]) || errors.Is(errs[1], lifecycle.ErrRefused), "iteration %d: %v", i, errs[1])
			outcomes["aborted first"]++
		case errs[1] == nil && errs[0] != nil:
			require.Equal(t, "fenced", stage, "iteration %d", i)
			require.Equal(t, "fenced", community, "iteration %d", i)
			require.ErrorIs(t, errs[0], lifecycle.ErrRefused, "iteration %d", i)
			outcomes["fenced first"]++
		case errs[0] == nil && errs[1] == nil:
			// The fence committed first and the abort then aborted a
			// fenced request: also legal, and the abort restored it.
			require.Equal(t, "aborted", stage, "iteration %d", i)
			require.Equal(t, "active", community, "iteration %d", i)
			outcomes["fenced, then aborted"]++
		default:
			t.Fatalf("iteration %d: both refused: %v; %v", i, errs[0], errs[1])
		}
	}
	t.Logf("%d iterations, 0 violations, 0 deadlocks: %v", n, outcomes)
}

// An operator's abort races the end of a short grace period, while an
// executor keeps trying to claim and quiesce: never is the community
// quiesced before the grace period ended on the database clock, and the
// state is always one of the legal ones: aborted with the community active
// (the abort won, or came after the quiesce and restored it), or quiescing
// under the executor's claim.
func TestSoakAbortAgainstTheEndOfGrace(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := t.Context()
	n := iterations(t)
	grace := 30 * time.Millisecond
	outcomes := map[string]int{}
	for i := range n {
		request, _ := testfactory.Request(ctx, t, db, &testfactory.RequestOpts{Stage: lifecycle.StageApproved, GracePeriod: &grace})
		errs := race(
			func() error {
				time.Sleep(time.Duration(rand.Int64N(int64(2 * grace)))) // around the end of the grace period
				_, err := db.Operator.Abort(ctx, request.ID, "operator", "soak")
				return err
			},
			func() error {
				deadline := time.Now().Add(10 * time.Second)
				for time.Now().Before(deadline) {
					claim, err := db.Engine.ClaimRequest(ctx, request.ID, "executor", time.Minute)
					if errors.Is(err, lifecycle.ErrNothingToClaim) {
						if r, getErr := db.Operator.Get(ctx, request.ID); getErr == nil && r.Stage == lifecycle.StageAborted {
							return err // the abort won before any claim
						}
						continue // still in grace
					}
					if err != nil {
						return err
					}
					return db.Engine.BeginQuiescing(ctx, claim.Lease)
				}
				return errors.New("never claimed")
			},
		)
		for _, err := range errs {
			require.False(t, isDeadlock(err), "iteration %d: deadlock: %v", i, err)
		}
		var early bool
		// The quiesce's checkpoint is append-only evidence of when it
		// committed (an abort clears the request's quiescing_started_at).
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM community_deletion_checkpoints c
			JOIN community_deletion_approvals a ON a.request_id = c.request_id
			WHERE c.request_id = $1 AND c.unit_key = 'quiesce_serving_writes' AND c.completed_at < a.grace_until)`, request.ID).Scan(&early))
		require.False(t, early, "iteration %d: quiesced before the grace period ended", i)
		community, _, stage := state(t, db, request)
		switch {
		case stage == "aborted":
			require.Equal(t, "active", community, "iteration %d", i)
			if errs[1] == nil {
				outcomes["quiesced, then aborted"]++
			} else {
				outcomes["aborted in grace"]++
			}
		case stage == "approved" && errs[0] != nil:
			require.Equal(t, "quiescing", community, "iteration %d", i)
			require.NoError(t, errs[1], "iteration %d", i)
			outcomes["quiesced, abort refused"]++
		default:
			t.Fatalf("iteration %d: request %s, community %s: abort %v; executor %v", i, stage, community, errs[0], errs[1])
		}
	}
	t.Logf("%d iterations, 0 violations, 0 deadlocks: %v", n, outcomes)
}

// Two executors claim the same approved request at once, each time after
// the previous claim's lease expired: exactly one wins each round, the
// other finds nothing to claim, lease generations strictly increase, and a
// token of an earlier round is stale.
func TestSoakTwoExecutorsClaimOneRequest(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := t.Context()
	other, err := lifecycle.NewEngine(ctx, fixture.RolePool(t, db.URL, fixture.RoleExecutor), nil)
	require.NoError(t, err)
	n := iterations(t)
	request, _ := testfactory.Request(ctx, t, db, &testfactory.RequestOpts{Stage: lifecycle.StageApproved})
	var last lifecycle.LeaseToken
	wins := map[string]int{}
	for i := range n {
		var claims [2]*lifecycle.ClaimedDeletion
		errs := race(
			func() error {
				c, err := db.Engine.ClaimRequest(ctx, request.ID, "executor-a", time.Minute)
				claims[0] = c
				return err
			},
			func() error { c, err := other.ClaimNext(ctx, "executor-b", time.Minute); claims[1] = c; return err },
		)
		var winner *lifecycle.ClaimedDeletion
		for k, err := range errs {
			require.False(t, isDeadlock(err), "iteration %d: deadlock", i)
			if err != nil {
				require.ErrorIs(t, err, lifecycle.ErrNothingToClaim, "iteration %d", i)
				continue
			}
			require.Nil(t, winner, "iteration %d: two executors claimed", i)
			winner = claims[k]
			wins[winner.Lease.Owner]++
		}
		require.NotNil(t, winner, "iteration %d: nobody claimed", i)
		require.Greater(t, winner.Lease.Generation, last.Generation, "iteration %d: the generation rises", i)
		if i > 0 {
			err := db.Engine.Heartbeat(ctx, last, time.Minute)
			require.True(t, lifecycle.IsStaleLease(err), "iteration %d: the previous claim is stale: %v", i, err)
		}
		last = winner.Lease
		testfactory.ExpireLease(ctx, t, db, request.ID)
	}
	t.Logf("%d rounds, exactly one winner each, 0 deadlocks: %v", n, wins)
}

// Serving code races the fence: one writer guards a transaction and
// writes a tenant row, another takes a serving write lease, while the
// executor quiesces and fences. Whatever the order, no tenant write and no
// lease of the community commits after the fence: a write or lease that
// committed was admitted while the community was active (or, for a write
// under a lease, quiescing), and a fence that found a live lease refused.
func TestSoakServingWritesAgainstTheFence(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := t.Context()
	serving := db.Serving
	servingPool := fixture.RolePool(t, db.URL, fixture.RoleServing)
	n := iterations(t)
	outcomes := map[string]int{}
	for i := range n {
		request, token := testfactory.Request(ctx, t, db, &testfactory.RequestOpts{Stage: lifecycle.StageApproved, Claimed: true})
		community := request.CommunityID
		var fencedAt time.Time
		errs := race(
			func() error {
				return pgx.BeginFunc(ctx, servingPool, func(tx pgx.Tx) error {
					if err := serving.GuardTransaction(ctx, tx, community); err != nil {
						return err
					}
					_, err := tx.Exec(ctx, "INSERT INTO fixture_members (community_id, handle) VALUES ($1, $2)", community, fmt.Sprint("soak-", i))
					return err
				})
			},
			func() error {
				lease, err := serving.AcquireWriteLease(ctx, community, "upload", "web-1", time.Minute)
				if err == nil {
					_, err = serving.ReleaseWriteLease(ctx, lease)
				}
				return err
			},
			func() error {
				if err := db.Engine.BeginQuiescing(ctx, token); err != nil {
					return err
				}
				for {
					_, err := db.Engine.EnterFenced(ctx, token)
					if _, ok := errors.AsType[*lifecycle.ServingWritesNotDrainedError](err); ok {
						continue // the lease is released right after it is taken
					}
					if err == nil {
						fencedAt = time.Now()
					}
					return err
				}
			},
		)
		for k, err := range errs {
			require.False(t, isDeadlock(err), "iteration %d: deadlock in racer %d: %v", i, k, err)
		}
		require.NoError(t, errs[2], "iteration %d: the fence", i)
		for k, err := range errs[:2] {
			if err != nil {
				require.ErrorIs(t, err, lifecycle.ErrAccessDenied, "iteration %d racer %d", i, k)
			}
		}
		// Nothing of the community committed after the fence: every row and
		// lease it has was written no later than the fence's commit.
		var late int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM community_serving_write_leases
			WHERE community_id = $1 AND lease_until >= now()`, community).Scan(&late))
		require.Zero(t, late, "iteration %d: a live lease outlived the fence", i)
		err := pgx.BeginFunc(ctx, servingPool, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "INSERT INTO fixture_members (community_id, handle) VALUES ($1, 'after')", community)
			return err
		})
		require.True(t, lifecycle.IsWriteFenceRefusal(err), "iteration %d: a write after the fence: %v", i, err)
		require.False(t, fencedAt.IsZero())
		switch {
		case errs[0] == nil && errs[1] == nil:
			outcomes["both admitted before the fence"]++
		case errs[0] != nil && errs[1] != nil:
			outcomes["both refused"]++
		default:
			outcomes["one admitted"]++
		}
	}
	t.Logf("%d iterations, 0 violations, 0 deadlocks: %v", n, outcomes)
}
