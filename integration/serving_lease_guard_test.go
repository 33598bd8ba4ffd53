package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// leaseQuerier is a pool, connection or transaction.
type leaseQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// acquireLease inserts a one-minute serving write lease for community at
// fenceGeneration and returns its id and generation.
func acquireLease(ctx context.Context, q leaseQuerier, community uuid.UUID, fenceGeneration int64) (uuid.UUID, int64, error) {
	var id uuid.UUID
	var generation int64
	err := q.QueryRow(ctx, `INSERT INTO community_serving_write_leases (community_id, operation, owner, fence_generation, lease_until)
		VALUES ($1, 'upload', 'server-1', $2, now() + interval '1 minute') RETURNING id, generation`,
		community, fenceGeneration).Scan(&id, &generation)
	return id, generation, err
}

// mustAcquireLease acquires a lease for an active community at its current
// fence generation.
func mustAcquireLease(t *testing.T, b *testBundle, community uuid.UUID) uuid.UUID {
	t.Helper()
	_, generation := b.communityState(t, community)
	id, _, err := acquireLease(t.Context(), b.pool, community, generation)
	require.NoError(t, err)
	return id
}

// extendLease pushes a lease's lease_until a minute further out.
func extendLease(t *testing.T, b *testBundle, lease uuid.UUID) error {
	t.Helper()
	return b.exec(t, "UPDATE community_serving_write_leases SET lease_until = lease_until + interval '1 minute', heartbeat_at = now() WHERE id = $1", lease)
}

// A serving write lease is inserted only for an existing, active community at
// its current fence generation; a quiescing, fenced, tombstoned or missing
// community, or a wrong fence generation, is refused with 55000.
func TestServingLeaseInsertedOnlyForActiveCommunityAtItsGeneration(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()

	for _, state := range []string{"quiescing", "fenced", "tombstone"} {
		t.Run(state, func(t *testing.T) {
			community, generation := b.communityIn(t, state)
			_, _, err := acquireLease(ctx, b.pool, community, generation)
			requireSQLState(t, err, sqlstateFenced, fmt.Sprintf("community write refused: community %s is %s", community, state))
		})
	}
	t.Run("missing", func(t *testing.T) {
		missing := uuid.New()
		_, _, err := acquireLease(ctx, b.pool, missing, 0)
		requireSQLState(t, err, sqlstateFenced, fmt.Sprintf("community %s is missing", missing))
	})
	t.Run("quiescing with executor settings", func(t *testing.T) {
		// The executor passes the write admission, but a lease still needs an
		// active community.
		community, generation := b.communityIn(t, "quiescing")
		err := b.asExecutor(t, community, generation, func(tx pgx.Tx) error {
			_, _, err := acquireLease(ctx, tx, community, generation)
			return err
		})
		requireSQLState(t, err, sqlstateFenced, "a new serving write lease needs community "+community.String()+" active")
	})
	t.Run("wrong fence generation", func(t *testing.T) {
		community := b.createCommunity(t)
		for _, generation := range []int64{1, -1} {
			_, _, err := acquireLease(ctx, b.pool, community, generation)
			requireSQLState(t, err, sqlstateFenced, "a new serving write lease needs community "+community.String()+" active")
		}
		_, _, err := acquireLease(ctx, b.pool, community, 0)
		require.NoError(t, err)
	})
	t.Run("after an abort", func(t *testing.T) {
		community, _ := b.communityIn(t, "fenced")
		generation := abortCommunity(t, b, community)
		_, _, err := acquireLease(ctx, b.pool, community, generation-1)
		requireSQLState(t, err, sqlstateFenced, "a new serving write lease needs community")
		_, _, err = acquireLease(ctx, b.pool, community, generation)
		require.NoError(t, err)
	})
}

// A lease's generation comes from the table's sequence whatever the client
// passes, and increases across inserts; created_at and heartbeat_at are the
// database clock.
func TestServingLeaseGenerationFromSequence(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	community := b.createCommunity(t)

	var first, second, third int64
	var created, heartbeat, now time.Time
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `INSERT INTO community_serving_write_leases
			(community_id, operation, owner, generation, fence_generation, lease_until, created_at, heartbeat_at)
			VALUES ($1, 'upload', 'server-1', 999999, 0, now() + interval '1 minute', '2000-01-01', '2000-01-01')
			RETURNING generation, created_at, heartbeat_at, now()`, community).Scan(&first, &created, &heartbeat, &now)
	}))
	require.NotEqual(t, int64(999999), first)
	require.True(t, created.Equal(now), "created_at %v is not now() %v", created, now)
	require.True(t, heartbeat.Equal(now), "heartbeat_at %v is not now() %v", heartbeat, now)

	require.NoError(t, b.pool.QueryRow(ctx, `INSERT INTO community_serving_write_leases
		(community_id, operation, owner, generation, fence_generation, lease_until)
		VALUES ($1, 'upload', 'server-2', $2, 0, now() + interval '1 minute') RETURNING generation`, community, first).Scan(&second))
	require.Greater(t, second, first, "a client-chosen generation (an old one) is replaced by a fresh one")
	_, third, err := acquireLease(ctx, b.pool, community, 0)
	require.NoError(t, err)
	require.Greater(t, third, second)

	var stored int64
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT max(generation) FROM community_serving_write_leases").Scan(&stored))
	require.Equal(t, third, stored)
	require.Less(t, stored, int64(999999))
}

// A lease's identity (id, community, operation, owner, generations,
// created_at) never changes (23000); its heartbeat does.
func TestServingLeaseIdentityNeverChanges(t *testing.T) {
	t.Parallel()
	b := setup(t)
	community := b.createCommunity(t)
	other := b.createCommunity(t)
	lease := mustAcquireLease(t, b, community)

	for name, set := range map[string]string{
		"id":               "id = gen_random_uuid()",
		"community_id":     "community_id = '" + other.String() + "'",
		"operation":        "operation = 'delete'",
		"owner":            "owner = 'server-2'",
		"generation":       "generation = generation + 1",
		"fence_generation": "fence_generation = fence_generation + 1",
		"created_at":       "created_at = created_at - interval '1 day'",
	} {
		t.Run(name, func(t *testing.T) {
			requireSQLState(t, b.exec(t, "UPDATE community_serving_write_leases SET "+set+" WHERE id = $1", lease),
				sqlstateIntegrity, "a lease's identity never changes")
		})
	}
	require.NoError(t, b.exec(t, "UPDATE community_serving_write_leases SET heartbeat_at = now() WHERE id = $1", lease))
}

// lease_until is extended only while the lease is unexpired and its community
// is active at the lease's fence generation (else 55000: once quiescing, after
// the fence, after an abort to a new generation, once expired); shortening is
// free.
func TestServingLeaseExtendedOnlyWhileValid(t *testing.T) {
	t.Parallel()
	b := setup(t)

	community := b.createCommunity(t)
	lease := mustAcquireLease(t, b, community)
	require.NoError(t, extendLease(t, b, lease), "active")
	b.quiesce(t, community)
	requireSQLState(t, extendLease(t, b, lease), sqlstateFenced,
		fmt.Sprintf("serving write lease %s is expired or its community %s is quiescing", lease, community))
	b.fence(t, community)
	requireSQLState(t, extendLease(t, b, lease), sqlstateFenced,
		fmt.Sprintf("serving write lease %s is expired or its community %s is fenced", lease, community))
	require.NoError(t, b.exec(t, "UPDATE community_serving_write_leases SET lease_until = now() WHERE id = $1", lease),
		"shortening a lease is always allowed")

	aborted := b.createCommunity(t)
	stale := mustAcquireLease(t, b, aborted)
	b.quiesce(t, aborted)
	abortCommunity(t, b, aborted)
	requireSQLState(t, extendLease(t, b, stale), sqlstateFenced, "is active at fence generation 1")

	active := b.createCommunity(t)
	expired := mustAcquireLease(t, b, active)
	require.NoError(t, b.exec(t, "UPDATE community_serving_write_leases SET lease_until = now() - interval '1 second' WHERE id = $1", expired))
	requireSQLState(t, extendLease(t, b, expired), sqlstateFenced, "serving write lease "+expired.String()+" is expired")
	requireSQLState(t, b.exec(t, "UPDATE community_serving_write_leases SET lease_until = now() + interval '1 hour' WHERE id = $1", expired),
		sqlstateFenced, "is expired")
}

// Release (DELETE) always works: while active, quiescing, after the fence and
// once expired.
func TestServingLeaseReleaseAlwaysWorks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	release := func(lease uuid.UUID) {
		t.Helper()
		tag, err := b.pool.Exec(t.Context(), "DELETE FROM community_serving_write_leases WHERE id = $1", lease)
		require.NoError(t, err)
		require.EqualValues(t, 1, tag.RowsAffected())
	}

	community := b.createCommunity(t)
	leases := []uuid.UUID{mustAcquireLease(t, b, community), mustAcquireLease(t, b, community), mustAcquireLease(t, b, community), mustAcquireLease(t, b, community)}
	release(leases[0])
	b.quiesce(t, community)
	release(leases[1])
	b.fence(t, community)
	release(leases[2])
	require.NoError(t, b.exec(t, "UPDATE community_serving_write_leases SET lease_until = now() - interval '1 second' WHERE id = $1", leases[3]))
	release(leases[3])
}

// A lease is acquired only in READ COMMITTED: REPEATABLE READ and
// SERIALIZABLE pin a snapshot that cannot see the fence (25000).
func TestServingLeaseInsertRefusesSnapshotIsolation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	community := b.createCommunity(t)

	for _, level := range []pgx.TxIsoLevel{pgx.RepeatableRead, pgx.Serializable} {
		err := pgx.BeginTxFunc(ctx, b.pool, pgx.TxOptions{IsoLevel: level}, func(tx pgx.Tx) error {
			_, _, err := acquireLease(ctx, tx, community, 0)
			return err
		})
		requireSQLState(t, err, sqlstateIsolation, "pins a snapshot that cannot see the deletion fence")
	}
	require.NoError(t, pgx.BeginTxFunc(ctx, b.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		_, _, err := acquireLease(ctx, tx, community, 0)
		return err
	}))
}

// An extension is a write that must see the fence like an acquisition: a
// REPEATABLE READ transaction whose snapshot predates the fence must not
// extend the lease after the fence committed.
func TestServingLeaseExtensionCannotUseAPinnedSnapshot(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	community := b.createCommunity(t)
	lease := mustAcquireLease(t, b, community)
	b.quiesce(t, community)

	pinned, err := b.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	defer pinned.Rollback(ctx)
	var state string
	require.NoError(t, pinned.QueryRow(ctx, "SELECT deletion_state FROM communities WHERE id = $1", community).Scan(&state))
	require.Equal(t, "quiescing", state) // the snapshot is taken before the fence

	b.fence(t, community)
	requireSQLState(t, extendLease(t, b, lease), sqlstateFenced, "is fenced")

	_, err = pinned.Exec(ctx, "UPDATE community_serving_write_leases SET lease_until = lease_until + interval '1 hour' WHERE id = $1", lease)
	require.Error(t, err, "a lease was extended after the fence through a snapshot that predates it")
	requireSQLState(t, err, sqlstateIsolation, "pins a snapshot")
}

// Extending a lease (raising lease_until) is a write that must see the fence:
// REPEATABLE READ and SERIALIZABLE are refused (25000) even for a valid lease
// of an active community; heartbeats and shortening are not extensions.
func TestServingLeaseExtensionRefusesSnapshotIsolation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	community := b.createCommunity(t)
	lease := mustAcquireLease(t, b, community)
	update := func(level pgx.TxIsoLevel, set string) error {
		return pgx.BeginTxFunc(ctx, b.pool, pgx.TxOptions{IsoLevel: level}, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "UPDATE community_serving_write_leases SET "+set+" WHERE id = $1", lease)
			return err
		})
	}
	leaseUntil := func(t *testing.T) time.Time {
		var until time.Time
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT lease_until FROM community_serving_write_leases WHERE id = $1", lease).Scan(&until))
		return until
	}

	for _, level := range []pgx.TxIsoLevel{pgx.RepeatableRead, pgx.Serializable} {
		t.Run(string(level), func(t *testing.T) {
			before := leaseUntil(t)
			requireSQLState(t, update(level, "lease_until = lease_until + interval '1 minute'"), sqlstateIsolation,
				"pins a snapshot that cannot see the deletion fence")
			requireSQLState(t, update(level, "lease_until = lease_until + interval '1 second', heartbeat_at = now()"), sqlstateIsolation,
				"pins a snapshot that cannot see the deletion fence")
			require.True(t, before.Equal(leaseUntil(t)))
			require.NoError(t, update(level, "heartbeat_at = now()"), "a heartbeat alone is not an extension")
			require.NoError(t, update(level, "lease_until = lease_until - interval '1 second'"), "shortening is not an extension")
		})
	}

	before := leaseUntil(t)
	require.NoError(t, update(pgx.ReadCommitted, "lease_until = lease_until + interval '1 minute', heartbeat_at = now()"))
	require.True(t, leaseUntil(t).After(before))
}

// An extension takes the shared community lock until its transaction ends,
// so a lifecycle transition (which takes it exclusively) waits for it; and
// an extension queued behind a fence re-reads the community and is refused.
func TestServingLeaseExtensionTakesTheSharedCommunityLock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	tryExclusive := func(t *testing.T, community uuid.UUID) bool {
		var got bool
		require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			return tx.QueryRow(ctx, "SELECT pg_try_advisory_xact_lock(community_deletion_lock_key($1))", community).Scan(&got)
		}))
		return got
	}

	t.Run("held until commit", func(t *testing.T) {
		community := b.createCommunity(t)
		lease := mustAcquireLease(t, b, community)
		require.True(t, tryExclusive(t, community))

		extender, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		defer extender.Rollback(ctx)
		_, err = extender.Exec(ctx, "UPDATE community_serving_write_leases SET lease_until = lease_until + interval '1 minute' WHERE id = $1", lease)
		require.NoError(t, err)
		require.False(t, tryExclusive(t, community), "the open extension holds the shared community lock")
		require.NoError(t, extender.Commit(ctx))
		require.True(t, tryExclusive(t, community))
	})

	t.Run("queued behind the quiesce", func(t *testing.T) {
		community, _ := b.approvedRequest(t)
		lease := mustAcquireLease(t, b, community)
		require.NoError(t, extendLease(t, b, lease), "active: the lease extends")

		lifecycle, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		defer lifecycle.Rollback(ctx)
		_, err = lifecycle.Exec(ctx, "SELECT pg_advisory_xact_lock(community_deletion_lock_key($1))", community)
		require.NoError(t, err)

		extenderConn, err := b.pool.Acquire(ctx)
		require.NoError(t, err)
		defer extenderConn.Release()
		pid := extenderConn.Conn().PgConn().PID()
		extended := make(chan error, 1)
		go func() {
			_, err := extenderConn.Exec(ctx, "UPDATE community_serving_write_leases SET lease_until = lease_until + interval '1 minute' WHERE id = $1", lease)
			extended <- err
		}()
		requireWaitingOnLock(t, b, pid)
		select {
		case err := <-extended:
			t.Fatalf("the extension finished while the lifecycle held the community lock: %v", err)
		default:
		}

		require.NoError(t, setExecutor(ctx, lifecycle, community, 0))
		_, err = lifecycle.Exec(ctx, "UPDATE communities SET deletion_state = 'quiescing', archived_at = now() WHERE id = $1", community)
		require.NoError(t, err)
		require.NoError(t, lifecycle.Commit(ctx))
		requireSQLState(t, <-extended, sqlstateFenced, fmt.Sprintf("its community %s is quiescing", community))
	})
}
