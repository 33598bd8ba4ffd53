package integration

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/fixture"
)

// SQLSTATEs the invariants raise.
const (
	sqlstateIntegrity = "23000" // guard rejections
	sqlstateFenced    = "55000" // write fence and lifecycle refusals
	sqlstateIsolation = "25000" // REPEATABLE READ or SERIALIZABLE writers
	sqlstateCheck     = "23514" // CHECK constraints
	sqlstateUnique    = "23505"
	sqlstateFK        = "23503"
)

// testBundle is one test's database: the project's migrations plus the
// registered fixture tables. pool is the superuser, who sets up what a
// deployment's owner would; the lifecycle helpers act as the role each step
// needs (see roles).
type testBundle struct {
	t     *testing.T
	url   string
	pool  *pgxpool.Pool
	mu    sync.Mutex
	pools map[fixture.Role]*pgxpool.Pool
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	url, pool := fixture.NewTestPool(t, server)
	return &testBundle{t: t, url: url, pool: pool, pools: map[fixture.Role]*pgxpool.Pool{}}
}

// as returns a pool on the test's database connected as role, opened on
// first use.
func (b *testBundle) as(role fixture.Role) *pgxpool.Pool {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if pool, ok := b.pools[role]; ok {
		return pool
	}
	pool := fixture.RolePool(b.t, b.url, role)
	b.pools[role] = pool
	return pool
}

// stageRole is the role that moves a request to stage: operators
// inventory, approve and abort; the executor does the rest.
func stageRole(stage string) fixture.Role {
	switch stage {
	case "inventoried", "approved", "aborted":
		return fixture.RoleOperator
	}
	return fixture.RoleExecutor
}

// requireSQLState asserts that err is a PostgreSQL error with the SQLSTATE
// code and, when given, a message containing contains.
func requireSQLState(t *testing.T, err error, code, contains string) {
	t.Helper()
	require.Error(t, err)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr, "want a PostgreSQL error, got %v", err)
	require.Equal(t, code, pgErr.Code, "unexpected SQLSTATE for: %s", pgErr.Message)
	if contains != "" {
		require.Contains(t, pgErr.Message, contains)
	}
}

// exec runs one statement on the pool.
func (b *testBundle) exec(t *testing.T, sql string, args ...any) error {
	t.Helper()
	_, err := b.pool.Exec(t.Context(), sql, args...)
	return err
}

// createCommunity inserts an active community and returns its id.
func (b *testBundle) createCommunity(t *testing.T) uuid.UUID {
	t.Helper()
	id := uuid.New()
	require.NoError(t, b.exec(t, "INSERT INTO communities (id, host, signing_key, icon) VALUES ($1, $2, $3, $4)",
		id, fmt.Sprintf("c-%s.example", id), []byte("key"), "icon.png"))
	return id
}

// asExecutor runs fn in a transaction that carries the authorized deletion
// executor settings for community at fence generation generation.
func (b *testBundle) asExecutor(t *testing.T, community uuid.UUID, generation int64, fn func(tx pgx.Tx) error) error {
	t.Helper()
	return pgx.BeginFunc(t.Context(), b.as(fixture.RoleExecutor), func(tx pgx.Tx) error {
		if err := setExecutor(t.Context(), tx, community, generation); err != nil {
			return err
		}
		return fn(tx)
	})
}

func setExecutor(ctx context.Context, tx pgx.Tx, community uuid.UUID, generation int64) error {
	_, err := tx.Exec(ctx, `SELECT set_config('community_deletion.executor_community', $1, true),
		set_config('community_deletion.fence_generation', $2, true)`, community.String(), strconv.FormatInt(generation, 10))
	return err
}

// communityState returns a community's deletion state and fence generation.
func (b *testBundle) communityState(t *testing.T, community uuid.UUID) (string, int64) {
	t.Helper()
	var state string
	var generation int64
	require.NoError(t, b.pool.QueryRow(t.Context(),
		"SELECT deletion_state, deletion_fence_generation FROM communities WHERE id = $1", community).Scan(&state, &generation))
	return state, generation
}

// openRequest returns the community's open (not aborted) deletion request
// and its stage, or uuid.Nil when there is none.
func (b *testBundle) openRequest(t *testing.T, community uuid.UUID) (uuid.UUID, string) {
	t.Helper()
	var id uuid.UUID
	var stage string
	err := b.pool.QueryRow(t.Context(), `SELECT id, stage FROM community_deletion_requests
		WHERE community_id = $1 AND stage <> 'aborted'`, community).Scan(&id, &stage)
	if errors.Is(err, pgx.ErrNoRows) {
		return uuid.Nil, ""
	}
	require.NoError(t, err)
	return id, stage
}

// quiesce moves an active community to quiescing as the executor, first
// giving it an approved deletion request when it has no open one.
func (b *testBundle) quiesce(t *testing.T, community uuid.UUID) {
	t.Helper()
	if request, _ := b.openRequest(t, community); request == uuid.Nil {
		request = b.submit(t, community, "requester")
		b.freeze(t, request)
		b.approve(t, request, "approver")
	}
	_, generation := b.communityState(t, community)
	require.NoError(t, b.asExecutor(t, community, generation, func(tx pgx.Tx) error {
		// As BeginQuiescing: the marker's lock, then the dormant fence's
		// drain, which its arming requires.
		if _, err := tx.Exec(t.Context(), "SELECT community_deletion.community_deletion_fence_marker_lock()"); err != nil {
			return err
		}
		if _, err := tx.Exec(t.Context(), "SELECT community_deletion.community_deletion_fence_drain()"); err != nil {
			return err
		}
		_, err := tx.Exec(t.Context(), "UPDATE communities SET deletion_state = 'quiescing', archived_at = now() WHERE id = $1", community)
		return err
	}))
}

// fence moves a quiescing community to fenced under a new generation, and
// its approved request with it, and returns the generation.
func (b *testBundle) fence(t *testing.T, community uuid.UUID) int64 {
	t.Helper()
	_, generation := b.communityState(t, community)
	next := generation + 1
	require.NoError(t, b.asExecutor(t, community, next, func(tx pgx.Tx) error {
		if _, err := tx.Exec(t.Context(), "UPDATE communities SET deletion_state = 'fenced', deletion_fence_generation = $2 WHERE id = $1", community, next); err != nil {
			return err
		}
		_, err := tx.Exec(t.Context(), `UPDATE community_deletion_requests SET stage = 'fenced', fence_generation = $2
			WHERE community_id = $1 AND stage = 'approved'`, community, next)
		return err
	}))
	return next
}

// advance moves a request one stage forward, as the role that takes that
// step.
func (b *testBundle) advance(t *testing.T, request uuid.UUID, to string) {
	t.Helper()
	_, err := b.as(stageRole(to)).Exec(t.Context(), "UPDATE community_deletion_requests SET stage = $2 WHERE id = $1", request, to)
	require.NoError(t, err)
}

// freezeDestructive freezes a fenced request's destructive storage manifest.
func (b *testBundle) freezeDestructive(t *testing.T, request uuid.UUID) {
	t.Helper()
	_, err := b.as(fixture.RoleExecutor).Exec(t.Context(), `UPDATE community_deletion_requests
		SET destructive_storage_manifest = '{"version": 4}', destructive_storage_frozen_at = now() WHERE id = $1`, request)
	require.NoError(t, err)
}

// tombstone walks a fenced community's request on to bindings_removed, then
// tombstones the community (scrubbing its profile) and moves the request to
// postgres_purged, as the purge does.
func (b *testBundle) tombstone(t *testing.T, community uuid.UUID) {
	t.Helper()
	request, stage := b.openRequest(t, community)
	switch stage {
	case "fenced":
		b.freezeDestructive(t, request)
		b.advance(t, request, "drained")
		fallthrough
	case "drained":
		b.advance(t, request, "bindings_removed")
	case "bindings_removed":
	default:
		t.Fatalf("tombstone needs a request at fenced, drained or bindings_removed, not %q", stage)
	}
	_, generation := b.communityState(t, community)
	require.NoError(t, b.asExecutor(t, community, generation, func(tx pgx.Tx) error {
		if _, err := tx.Exec(t.Context(), `UPDATE communities SET deletion_state = 'tombstone', deleted_at = now(),
			signing_key = NULL, icon = NULL WHERE id = $1`, community); err != nil {
			return err
		}
		_, err := tx.Exec(t.Context(), "UPDATE community_deletion_requests SET stage = 'postgres_purged' WHERE id = $1", request)
		return err
	}))
}

// insertMember writes one fixture row for community.
func insertMember(ctx context.Context, q interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}, community uuid.UUID, handle string) error {
	_, err := q.Exec(ctx, "INSERT INTO fixture_members (community_id, handle) VALUES ($1, $2)", community, handle)
	return err
}

// submit inserts a submitted deletion request for community, as the
// operator.
func (b *testBundle) submit(t *testing.T, community uuid.UUID, requestedBy string) uuid.UUID {
	t.Helper()
	var id uuid.UUID
	require.NoError(t, b.as(fixture.RoleOperator).QueryRow(t.Context(), `INSERT INTO community_deletion_requests (community_id, community_host, requested_by)
		SELECT id, host, $2 FROM communities WHERE id = $1 RETURNING id`, community, requestedBy).Scan(&id))
	return id
}

// testDigest is a stand-in frozen inventory digest.
func testDigest(seed string) []byte {
	sum := sha256.Sum256([]byte(seed))
	return sum[:]
}

// freeze moves a submitted request to inventoried with a stand-in inventory,
// as the operator, and returns its digest.
func (b *testBundle) freeze(t *testing.T, request uuid.UUID) []byte {
	t.Helper()
	digest := testDigest(request.String())
	_, err := b.as(fixture.RoleOperator).Exec(t.Context(), `UPDATE community_deletion_requests
		SET stage = 'inventoried', schema_manifest = '{}', storage_manifest = '{}', inventory_manifest = '{}',
		    inventory_digest = $2, inventory_frozen_at = now()
		WHERE id = $1`, request, digest)
	require.NoError(t, err)
	return digest
}

// approve records an approval by approver, as the second operator (the
// approver role), and moves the request to approved.
func (b *testBundle) approve(t *testing.T, request uuid.UUID, approver string) {
	t.Helper()
	require.NoError(t, pgx.BeginFunc(t.Context(), b.as(fixture.RoleApprover), func(tx pgx.Tx) error {
		if _, err := tx.Exec(t.Context(), `INSERT INTO community_deletion_approvals (request_id, community_id, inventory_digest, approved_by)
			SELECT id, community_id, inventory_digest, $2 FROM community_deletion_requests WHERE id = $1`, request, approver); err != nil {
			return err
		}
		_, err := tx.Exec(t.Context(), "UPDATE community_deletion_requests SET stage = 'approved' WHERE id = $1", request)
		return err
	}))
}

// approvedRequest creates a community with an approved deletion request.
func (b *testBundle) approvedRequest(t *testing.T) (community, request uuid.UUID) {
	t.Helper()
	community = b.createCommunity(t)
	request = b.submit(t, community, "requester")
	b.freeze(t, request)
	b.approve(t, request, "approver")
	return community, request
}

// fencedRequest walks an approved request to fenced (community and request)
// and returns the fence generation.
func (b *testBundle) fencedRequest(t *testing.T) (community, request uuid.UUID, generation int64) {
	t.Helper()
	community, request = b.approvedRequest(t)
	b.quiesce(t, community)
	generation = b.fence(t, community)
	return community, request, generation
}

// requireWaitingOnLock waits until backend pid is waiting on a heavyweight
// lock (a row lock shows as wait_event_type 'Lock').
func requireWaitingOnLock(t *testing.T, b *testBundle, pid uint32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for {
		var waiting bool
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE pid = $1 AND wait_event_type = 'Lock')`, int32(pid)).Scan(&waiting))
		if waiting {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("backend %d never waited on a lock", pid)
		case <-time.After(5 * time.Millisecond):
		}
	}
}
