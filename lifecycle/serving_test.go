package lifecycle_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/testfactory"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

func TestServingLeaseLifecycleWhileActive(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	community := testfactory.Community(ctx, t, b.DB, nil).ID

	lease, err := b.Serving.AcquireWriteLease(ctx, community, "  upload  ", " server-1 ", 1500*time.Millisecond)
	require.NoError(t, err)
	require.Equal(t, community, lease.CommunityID)
	require.Equal(t, "upload", lease.Operation, "operation is trimmed")
	require.Equal(t, "server-1", lease.Owner, "owner is trimmed")
	require.EqualValues(t, 0, lease.FenceGeneration)
	var dbNow time.Time
	require.NoError(t, b.Pool.QueryRow(ctx, "SELECT now()").Scan(&dbNow))
	require.WithinDuration(t, dbNow.Add(2*time.Second), lease.LeaseUntil, time.Second, "1.5s rounds up to 2s")

	second, err := b.Serving.AcquireWriteLease(ctx, community, "upload", "server-1", time.Minute)
	require.NoError(t, err)
	require.Greater(t, second.Generation, lease.Generation, "generations come from the sequence")

	require.True(t, mustServingActive(t, b, community))
	drained, err := b.Engine.ServingWritesDrained(ctx, community)
	require.NoError(t, err)
	require.False(t, drained)

	require.NoError(t, b.Serving.VerifyWriteLease(ctx, lease))
	before := lease.LeaseUntil
	require.NoError(t, b.Serving.RenewWriteLease(ctx, lease, time.Hour))
	require.True(t, lease.LeaseUntil.After(before))

	// A lease that differs from the stored one in any identity field is stale.
	for name, forged := range map[string]func(l *lifecycle.ServingWriteLease){
		"owner":            func(l *lifecycle.ServingWriteLease) { l.Owner = "server-2" },
		"generation":       func(l *lifecycle.ServingWriteLease) { l.Generation++ },
		"fence generation": func(l *lifecycle.ServingWriteLease) { l.FenceGeneration++ },
		"community":        func(l *lifecycle.ServingWriteLease) { l.CommunityID = uuid.New() },
		"id":               func(l *lifecycle.ServingWriteLease) { l.ID = uuid.New() },
	} {
		t.Run(name, func(t *testing.T) {
			copied := *lease
			forged(&copied)
			err := b.Serving.VerifyWriteLease(ctx, &copied)
			var stale *lifecycle.StaleServingLeaseError
			require.ErrorAs(t, err, &stale)
			require.ErrorIs(t, err, lifecycle.ErrAccessDenied)
			require.False(t, lifecycle.IsStaleLease(err), "a serving lease is not a deletion lease")
			require.ErrorIs(t, b.Serving.RenewWriteLease(ctx, &copied, time.Minute), lifecycle.ErrAccessDenied)
			released, err := b.Serving.ReleaseWriteLease(ctx, &copied)
			require.NoError(t, err)
			require.False(t, released)
		})
	}

	released, err := b.Serving.ReleaseWriteLease(ctx, lease)
	require.NoError(t, err)
	require.True(t, released)
	released, err = b.Serving.ReleaseWriteLease(ctx, lease)
	require.NoError(t, err)
	require.False(t, released, "a second release is harmless")
	require.ErrorIs(t, b.Serving.VerifyWriteLease(ctx, lease), lifecycle.ErrAccessDenied)

	// An expired lease is neither current nor renewable.
	_, err = b.Pool.Exec(ctx, "UPDATE community_serving_write_leases SET lease_until = now() - interval '1 second' WHERE id = $1", second.ID)
	require.NoError(t, err)
	require.ErrorIs(t, b.Serving.VerifyWriteLease(ctx, second), lifecycle.ErrAccessDenied)
	require.ErrorIs(t, b.Serving.RenewWriteLease(ctx, second, time.Minute), lifecycle.ErrAccessDenied)
	drained, err = b.Engine.ServingWritesDrained(ctx, community)
	require.NoError(t, err)
	require.True(t, drained)
}

func mustServingActive(t *testing.T, b *testBundle, community uuid.UUID) bool {
	t.Helper()
	active, err := b.Serving.IsActive(t.Context(), community)
	require.NoError(t, err)
	return active
}

func TestServingLeaseInputsAreValidatedFirst(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	community := testfactory.Community(ctx, t, b.DB, nil).ID

	for name, call := range map[string]func() error{
		"nil community": func() error {
			_, err := b.Serving.AcquireWriteLease(ctx, uuid.Nil, "upload", "owner", time.Minute)
			return err
		},
		"blank operation": func() error {
			_, err := b.Serving.AcquireWriteLease(ctx, community, " \t", "owner", time.Minute)
			return err
		},
		"long owner": func() error {
			_, err := b.Serving.AcquireWriteLease(ctx, community, "upload", strings.Repeat("o", 513), time.Minute)
			return err
		},
		"NUL owner": func() error {
			_, err := b.Serving.AcquireWriteLease(ctx, community, "upload", "own\x00er", time.Minute)
			return err
		},
		"zero duration": func() error {
			_, err := b.Serving.AcquireWriteLease(ctx, community, "upload", "owner", 0)
			return err
		},
		"negative duration": func() error {
			_, err := b.Serving.AcquireWriteLease(ctx, community, "upload", "owner", -time.Second)
			return err
		},
		"renew nil lease":   func() error { return b.Serving.RenewWriteLease(ctx, nil, time.Minute) },
		"verify nil lease":  func() error { return b.Serving.VerifyWriteLease(ctx, nil) },
		"release nil lease": func() error { _, err := b.Serving.ReleaseWriteLease(ctx, nil); return err },
		"renew zero duration": func() error {
			return b.Serving.RenewWriteLease(ctx, &lifecycle.ServingWriteLease{ID: uuid.New(), CommunityID: community, Owner: "o"}, 0)
		},
		"reap zero":         func() error { _, err := b.Operator.ReapExpiredServingWriteLeases(ctx, 0); return err },
		"reap over 10000":   func() error { _, err := b.Operator.ReapExpiredServingWriteLeases(ctx, 10001); return err },
		"guard nil tx":      func() error { return b.Serving.GuardTransaction(ctx, nil, community) },
		"guard nil lease":   func() error { return b.Serving.GuardTransactionWithLease(ctx, nil, nil) },
		"lease without ids": func() error { return b.Serving.VerifyWriteLease(ctx, &lifecycle.ServingWriteLease{Owner: "o"}) },
	} {
		t.Run(name, func(t *testing.T) {
			require.ErrorIs(t, call(), lifecycle.ErrInvalidInput)
		})
	}
	var leases int
	require.NoError(t, b.Pool.QueryRow(ctx, "SELECT count(*) FROM community_serving_write_leases").Scan(&leases))
	require.Zero(t, leases)
}

// Once quiescing, no new lease is taken and no lease is renewed (so the
// fence waits at most for the longest lease), but an admitted lease still
// verifies until it is released or runs out.
func TestQuiescingRejectsNewLeasesAndRenewalsButHonoursAdmittedLeases(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	serving := testfactory.ServingLease(ctx, t, b.DB, &testfactory.ServingLeaseOpts{Operation: "test_external", Owner: "test-owner"})
	community := serving.CommunityID
	_, token := testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{CommunityID: community, Stage: lifecycle.StageApproved, Claimed: true})

	require.NoError(t, b.Engine.BeginQuiescing(ctx, token))
	_, err := b.Serving.AcquireWriteLease(ctx, community, "late_external", "late-owner", time.Minute)
	require.ErrorIs(t, err, lifecycle.ErrAccessDenied)
	require.False(t, lifecycle.IsStaleLease(err))
	require.Contains(t, err.Error(), "is quiescing")
	require.False(t, mustServingActive(t, b, community))

	require.NoError(t, b.Serving.VerifyWriteLease(ctx, serving))
	before := serving.LeaseUntil
	err = b.Serving.RenewWriteLease(ctx, serving, 2*time.Minute)
	require.ErrorIs(t, err, lifecycle.ErrAccessDenied, "no renewal while quiescing")
	var stale *lifecycle.StaleServingLeaseError
	require.ErrorAs(t, err, &stale)
	require.Equal(t, before, serving.LeaseUntil)
	require.NoError(t, b.Serving.VerifyWriteLease(ctx, serving), "the admitted lease still verifies")

	_, err = b.Engine.EnterFenced(ctx, token)
	var notDrained *lifecycle.ServingWritesNotDrainedError
	require.ErrorAs(t, err, &notDrained)
	require.EqualValues(t, 1, notDrained.ActiveCount)
	require.Equal(t, []string{"test_external"}, notDrained.Operations)
	require.Equal(t, "quiescing", b.community(t, community).State)

	released, err := b.Serving.ReleaseWriteLease(ctx, serving)
	require.NoError(t, err)
	require.True(t, released)
	generation, err := b.Engine.EnterFenced(ctx, token)
	require.NoError(t, err)
	require.EqualValues(t, 1, generation)
	require.Equal(t, "fenced", b.community(t, community).State)

	// Past the fence nothing renews or verifies, not even a lease of the
	// old generation that was still in the table.
	require.ErrorIs(t, b.Serving.RenewWriteLease(ctx, serving, time.Minute), lifecycle.ErrAccessDenied)
	require.ErrorIs(t, b.Serving.VerifyWriteLease(ctx, serving), lifecycle.ErrAccessDenied)
}

// Port of sustained_admission_cannot_starve_fence_after_quiescing.
func TestSustainedAdmissionCannotStarveFenceAfterQuiescing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	quiescing, token := testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{Stage: lifecycle.StageApproved, Quiesced: true})
	community := quiescing.CommunityID

	for attempt := range 100 {
		_, err := b.Serving.AcquireWriteLease(ctx, community, "sustained_admission", fmt.Sprintf("owner-%d", attempt), time.Minute)
		require.ErrorIs(t, err, lifecycle.ErrAccessDenied, "attempt %d", attempt)
	}
	generation, err := b.Engine.EnterFenced(ctx, token)
	require.NoError(t, err)
	require.EqualValues(t, 1, generation)
}

// Lock ordering: BeginQuiescing waits for an in-flight guarded writer, and
// an acquisition that arrives while it waits queues behind it instead of
// starving it; once the transition commits, the acquisition sees quiescing
// and is refused.
func TestServingLeaseAcquisitionQueuesBehindWaitingTransition(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	request, token := testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{Stage: lifecycle.StageApproved, Claimed: true})
	community := request.CommunityID

	writer, err := b.Pool.Begin(ctx)
	require.NoError(t, err)
	defer writer.Rollback(context.Background())
	require.NoError(t, b.Serving.GuardTransaction(ctx, writer, community))

	quiesced := make(chan error, 1)
	go func() { quiesced <- b.Engine.BeginQuiescing(ctx, token) }()
	b.waitForLockWaiters(t, 1, advisoryLock)

	acquired := make(chan error, 1)
	go func() {
		_, err := b.Serving.AcquireWriteLease(ctx, community, "upload", "server-1", time.Minute)
		acquired <- err
	}()
	b.waitForLockWaiters(t, 2, advisoryLock)

	require.NoError(t, writeMember(ctx, writer, community))
	require.NoError(t, writer.Commit(ctx))
	require.NoError(t, <-quiesced)
	require.ErrorIs(t, <-acquired, lifecycle.ErrAccessDenied, "the queued acquisition sees the committed transition")
	require.Equal(t, "quiescing", b.community(t, community).State)
	drained, err := b.Engine.ServingWritesDrained(ctx, community)
	require.NoError(t, err)
	require.True(t, drained)
}

// Port of serving_lease_reaper_is_bounded_and_reports_stats.
func TestServingLeaseReaperIsBoundedAndReportsStats(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	community := testfactory.Community(ctx, t, b.DB, nil).ID
	for _, owner := range []string{"expired-a", "expired-b", "expired-c", "live"} {
		testfactory.ServingLease(ctx, t, b.DB, &testfactory.ServingLeaseOpts{CommunityID: community,
			Operation: "reaper_test", Owner: owner, Expired: owner != "live"})
	}

	before, err := b.Operator.ServingLeaseStats(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(3), before.Expired)
	require.Equal(t, int64(1), before.Active)
	require.GreaterOrEqual(t, before.DeadTuples, int64(0))

	reaped, err := b.Operator.ReapExpiredServingWriteLeases(ctx, 2)
	require.NoError(t, err)
	require.Equal(t, int64(2), reaped, "the batch is bounded")
	after, err := b.Operator.ServingLeaseStats(ctx)
	require.NoError(t, err)
	require.Equal(t, before.Expired-2, after.Expired)
	require.Equal(t, before.Active, after.Active, "live leases are never reaped")

	reaped, err = b.Operator.ReapExpiredServingWriteLeases(ctx, lifecycle.MaxServingLeaseReapBatch)
	require.NoError(t, err)
	require.Equal(t, int64(1), reaped)
	reaped, err = b.Operator.ReapExpiredServingWriteLeases(ctx, 1)
	require.NoError(t, err)
	require.Zero(t, reaped)
}

// A lease another transaction holds is skipped, not waited for.
func TestServingLeaseReaperSkipsLockedRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	community := testfactory.Community(ctx, t, b.DB, nil).ID
	var ids []uuid.UUID
	for _, owner := range []string{"a", "b"} {
		lease := testfactory.ServingLease(ctx, t, b.DB, &testfactory.ServingLeaseOpts{CommunityID: community, Owner: owner, Expired: true})
		ids = append(ids, lease.ID)
	}

	holder, err := b.Pool.Begin(ctx)
	require.NoError(t, err)
	defer holder.Rollback(context.Background())
	_, err = holder.Exec(ctx, "SELECT 1 FROM community_serving_write_leases WHERE id = $1 FOR UPDATE", ids[0])
	require.NoError(t, err)

	reaped, err := b.Operator.ReapExpiredServingWriteLeases(ctx, 10)
	require.NoError(t, err)
	require.Equal(t, int64(1), reaped, "the locked lease is skipped")
	require.NoError(t, holder.Rollback(ctx))
	reaped, err = b.Operator.ReapExpiredServingWriteLeases(ctx, 10)
	require.NoError(t, err)
	require.Equal(t, int64(1), reaped)
}

// Port of serving_lease_reaper_remains_global_across_tombstoned_tenant.
func TestServingLeaseReaperRemainsGlobalAcrossTombstonedTenant(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	activeA := testfactory.Community(ctx, t, b.DB, nil).ID
	target := testfactory.Community(ctx, t, b.DB, nil).ID
	activeX := testfactory.Community(ctx, t, b.DB, nil).ID
	for _, community := range []uuid.UUID{activeA, target, activeX} {
		testfactory.ServingLease(ctx, t, b.DB, &testfactory.ServingLeaseOpts{CommunityID: community,
			Operation: "global_reaper_test", Owner: "owner", Expired: true})
	}

	// The target is deleted to a tombstone: its expired lease does not hold
	// the fence off.
	testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{CommunityID: target, Stage: lifecycle.StagePostgresPurged})
	require.Equal(t, "tombstone", b.community(t, target).State)

	reaped, err := b.Operator.ReapExpiredServingWriteLeases(ctx, 10)
	require.NoError(t, err)
	require.Equal(t, int64(3), reaped, "the reaper is global: a tombstoned tenant's leases go too")
}

// GuardTransaction runs the database's write admission in the caller's
// transaction.
func TestGuardTransactionAdmitsOnlyReadCommittedWritesToActiveCommunities(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	active := testfactory.Community(ctx, t, b.DB, nil).ID

	t.Run("repeatable read", func(t *testing.T) {
		for _, level := range []pgx.TxIsoLevel{pgx.RepeatableRead, pgx.Serializable} {
			tx, err := b.Pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: level})
			require.NoError(t, err)
			err = b.Serving.GuardTransaction(ctx, tx, active)
			require.ErrorIs(t, err, lifecycle.ErrRefused, "level %s", level)
			requirePgCode(t, err, "25000")
			require.NoError(t, tx.Rollback(ctx))
		}
	})

	t.Run("active", func(t *testing.T) {
		tx, err := b.Pool.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(context.Background())
		require.NoError(t, b.Serving.GuardTransaction(ctx, tx, active))
		require.NoError(t, writeMember(ctx, tx, active))
		// The guard holds the shared community lock: a transition cannot
		// take it exclusively until the transaction ends.
		var locked bool
		require.NoError(t, b.Pool.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock(community_deletion_lock_key($1))`, active).Scan(&locked))
		require.False(t, locked)
		require.NoError(t, tx.Commit(ctx))
	})

	fenced, _ := testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{Stage: lifecycle.StageFenced})
	quiescing, _ := testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{Stage: lifecycle.StageApproved, Quiesced: true})
	for name, community := range map[string]uuid.UUID{"fenced": fenced.CommunityID, "quiescing": quiescing.CommunityID, "missing": uuid.New()} {
		t.Run(name, func(t *testing.T) {
			tx, err := b.Pool.Begin(ctx)
			require.NoError(t, err)
			defer tx.Rollback(context.Background())
			err = b.Serving.GuardTransaction(ctx, tx, community)
			require.ErrorIs(t, err, lifecycle.ErrAccessDenied)
			require.False(t, lifecycle.IsStaleLease(err))
			requirePgCode(t, err, "55000")
		})
	}
}

// GuardTransactionWithServingLease lets the admitted side effect finish its
// writes while quiescing, and nothing else.
func TestGuardTransactionWithServingLeaseAdmitsQuiescingWriteOnlyWithCurrentLease(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	lease := testfactory.ServingLease(ctx, t, b.DB, nil)
	community := lease.CommunityID
	spare := testfactory.ServingLease(ctx, t, b.DB, &testfactory.ServingLeaseOpts{CommunityID: community, Owner: "server-2", Expired: true})
	testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{CommunityID: community, Stage: lifecycle.StageApproved, Quiesced: true})

	// Without the lease the write fence refuses the write.
	err := pgx.BeginFunc(ctx, b.Pool, func(tx pgx.Tx) error { return writeMember(ctx, tx, community) })
	requirePgCode(t, err, "55000")

	// With the current lease it is admitted.
	require.NoError(t, pgx.BeginFunc(ctx, b.Pool, func(tx pgx.Tx) error {
		if err := b.Serving.GuardTransactionWithLease(ctx, tx, lease); err != nil {
			return err
		}
		return writeMember(ctx, tx, community)
	}))
	var members int
	require.NoError(t, b.Pool.QueryRow(ctx, "SELECT count(*) FROM fixture_members WHERE community_id = $1", community).Scan(&members))
	require.Equal(t, 1, members)

	// Pinned snapshots are refused before anything else.
	tx, err := b.Pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	require.ErrorIs(t, b.Serving.GuardTransactionWithLease(ctx, tx, lease), lifecycle.ErrRefused)
	require.NoError(t, tx.Rollback(ctx))

	// A stale lease is refused: forged, expired or released.
	forged := *lease
	forged.Generation = spare.Generation + 1
	released, err := b.Serving.ReleaseWriteLease(ctx, lease)
	require.NoError(t, err)
	require.True(t, released)
	for name, stale := range map[string]*lifecycle.ServingWriteLease{"forged": &forged, "expired": spare, "released": lease} {
		t.Run(name, func(t *testing.T) {
			tx, err := b.Pool.Begin(ctx)
			require.NoError(t, err)
			defer tx.Rollback(context.Background())
			err = b.Serving.GuardTransactionWithLease(ctx, tx, stale)
			var staleErr *lifecycle.StaleServingLeaseError
			require.ErrorAs(t, err, &staleErr)
			require.ErrorIs(t, err, lifecycle.ErrAccessDenied)
			require.Equal(t, stale.ID, staleErr.LeaseID)
		})
	}

	// No new lease is admitted to carry a write while quiescing.
	fresh, err := b.Serving.AcquireWriteLease(ctx, community, "upload", "server-3", time.Minute)
	require.ErrorIs(t, err, lifecycle.ErrAccessDenied)
	require.Nil(t, fresh)
}

// The guarded write and a fence that starts during it are ordered by the
// shared community lock: the fence waits for the write to commit.
func TestGuardTransactionWithServingLeaseHoldsTransitionsOff(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	lease := testfactory.ServingLease(ctx, t, b.DB, nil)
	community := lease.CommunityID
	_, token := testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{CommunityID: community, Stage: lifecycle.StageApproved, Quiesced: true})

	writer, err := b.Pool.Begin(ctx)
	require.NoError(t, err)
	defer writer.Rollback(context.Background())
	require.NoError(t, b.Serving.GuardTransactionWithLease(ctx, writer, lease))

	type fenced struct {
		generation int64
		err        error
	}
	done := make(chan fenced, 1)
	go func() {
		generation, err := b.Engine.EnterFenced(ctx, token)
		done <- fenced{generation, err}
	}()
	b.waitForLockWaiters(t, 1, advisoryLock)

	// The side effect makes its final write and releases its lease in the
	// same transaction; only then does the fence run, and find it drained.
	require.NoError(t, writeMember(ctx, writer, community))
	_, err = writer.Exec(ctx, "DELETE FROM community_serving_write_leases WHERE id = $1", lease.ID)
	require.NoError(t, err)
	require.NoError(t, writer.Commit(ctx))
	result := <-done
	require.NoError(t, result.err)
	require.EqualValues(t, 1, result.generation)
	var members int
	require.NoError(t, b.Pool.QueryRow(ctx, "SELECT count(*) FROM fixture_members WHERE community_id = $1", community).Scan(&members))
	require.Equal(t, 1, members, "the write committed before the fence")
}

// The serving-lease lookups by community and the reaper stay index reads
// on a large lease table.
func TestServingLeaseQueriesUseTheirIndexes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	_, err := b.Pool.Exec(ctx, `INSERT INTO communities (host)
		SELECT format('explain-%s.example', g) FROM generate_series(1, 200) g`)
	require.NoError(t, err)
	_, err = b.Pool.Exec(ctx, `INSERT INTO community_serving_write_leases (community_id, operation, owner, fence_generation, lease_until)
		SELECT c.id, 'upload', format('server-%s', g), 0, now() + ((g % 100) - 5) * interval '30 seconds'
		FROM communities c CROSS JOIN generate_series(1, 100) g`)
	require.NoError(t, err)
	_, err = b.Pool.Exec(ctx, "ANALYZE community_serving_write_leases")
	require.NoError(t, err)
	var rows int
	require.NoError(t, b.Pool.QueryRow(ctx, "SELECT count(*) FROM community_serving_write_leases").Scan(&rows))
	require.Equal(t, 20000, rows)
	var community uuid.UUID
	require.NoError(t, b.Pool.QueryRow(ctx, "SELECT id FROM communities ORDER BY host LIMIT 1").Scan(&community))

	const file = "community_serving_write_leases.sql"
	requireIndexUse(t, b.explainQuery(t, file, "ServingWriteLeaseCountActive", community),
		"community_serving_write_leases_community_idx")
	reaper := b.explainQuery(t, file, "ServingWriteLeaseDeleteExpired", 100)
	requireIndexUse(t, reaper, "community_serving_write_leases_lease_until_idx")
	requireIndexUse(t, reaper, "community_serving_write_leases_pkey")
	requireIndexUse(t, b.explainQuery(t, file, "ServingWriteLeaseValid", uuid.New(), community, "server-1", 1, 0),
		"community_serving_write_leases_pkey")

	// And the calls behave on the large table.
	drained, err := b.Engine.ServingWritesDrained(ctx, community)
	require.NoError(t, err)
	require.False(t, drained)
	reaped, err := b.Operator.ReapExpiredServingWriteLeases(ctx, 100)
	require.NoError(t, err)
	require.Equal(t, int64(100), reaped)
}
