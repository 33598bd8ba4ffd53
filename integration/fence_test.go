package integration

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/fixture"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// The write fence (enforce_community_write_fence on every registered 'delete'
// table) admits writes to active communities and refuses every write to a
// quiescing, fenced, tombstoned or missing one with SQLSTATE 55000.
func TestWriteFenceRefusesNonActiveCommunities(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()

	active := b.createCommunity(t)
	require.NoError(t, insertMember(ctx, b.pool, active, "admitted"))

	quiescing := b.createCommunity(t)
	require.NoError(t, insertMember(ctx, b.pool, quiescing, "before"))
	b.quiesce(t, quiescing)

	fenced := b.createCommunity(t)
	require.NoError(t, insertMember(ctx, b.pool, fenced, "before"))
	b.quiesce(t, fenced)
	b.fence(t, fenced)

	tombstoned := b.createCommunity(t)
	b.quiesce(t, tombstoned)
	b.fence(t, tombstoned)
	b.tombstone(t, tombstoned)

	for name, tc := range map[string]struct {
		community uuid.UUID
		state     string
	}{
		"quiescing": {quiescing, "quiescing"},
		"fenced":    {fenced, "fenced"},
		"tombstone": {tombstoned, "tombstone"},
	} {
		t.Run(name, func(t *testing.T) {
			want := fmt.Sprintf("community %s is %s", tc.community, tc.state)
			requireSQLState(t, insertMember(ctx, b.pool, tc.community, "late"), sqlstateFenced, want)
			requireSQLState(t, b.exec(t, `INSERT INTO fixture_members (community_id, handle)
				SELECT $1, 'late-' || n FROM generate_series(1, 100) n`, tc.community), sqlstateFenced, want)
			if tc.state != "tombstone" { // a tombstone has no rows left to update or delete
				requireSQLState(t, b.exec(t, "UPDATE fixture_members SET handle = 'x' WHERE community_id = $1", tc.community),
					sqlstateFenced, want)
				requireSQLState(t, b.exec(t, "DELETE FROM fixture_members WHERE community_id = $1", tc.community),
					sqlstateFenced, want)
			}
		})
	}
}

// A registered table without a foreign key to communities still refuses rows
// of a community that does not exist: the fence, not the FK, is the guard.
func TestWriteFenceRefusesMissingCommunity(t *testing.T) {
	t.Parallel()
	b := setup(t)
	require.NoError(t, b.exec(t, "CREATE TABLE loose_notes (community_id uuid NOT NULL, body text)"))
	require.NoError(t, b.exec(t, "SELECT attach_community_write_fence('loose_notes')"))
	missing := uuid.New()
	requireSQLState(t, b.exec(t, "INSERT INTO loose_notes VALUES ($1, 'orphan')", missing),
		sqlstateFenced, "community "+missing.String()+" is missing")
	active := b.createCommunity(t)
	require.NoError(t, b.exec(t, "INSERT INTO loose_notes VALUES ($1, 'kept')", active))
}

// An UPDATE that moves a row between communities is checked for both: a row
// can be moved neither out of nor into a fenced community.
func TestWriteFenceChecksBothSidesOfAMove(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()

	active := b.createCommunity(t)
	fenced := b.createCommunity(t)
	require.NoError(t, insertMember(ctx, b.pool, active, "mover"))
	require.NoError(t, insertMember(ctx, b.pool, fenced, "stayer"))
	b.quiesce(t, fenced)
	b.fence(t, fenced)

	move := "UPDATE fixture_members SET community_id = $2 WHERE community_id = $1"
	requireSQLState(t, b.exec(t, move, active, fenced), sqlstateFenced, fenced.String())
	requireSQLState(t, b.exec(t, move, fenced, active), sqlstateFenced, fenced.String())

	other := b.createCommunity(t)
	require.NoError(t, b.exec(t, move, active, other),
		"a move between two active communities is admitted")
}

// One statement touching several communities is refused as a whole when any
// of them is fenced, and nothing it wrote survives.
func TestWriteFenceRefusesAMultiCommunityStatementWhole(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()

	active := b.createCommunity(t)
	fenced := b.createCommunity(t)
	b.quiesce(t, fenced)
	b.fence(t, fenced)

	err := b.exec(t, `INSERT INTO fixture_members (community_id, handle)
		SELECT c, 'bulk-' || n FROM unnest($1::uuid[]) c, generate_series(1, 500) n`, []uuid.UUID{active, fenced})
	requireSQLState(t, err, sqlstateFenced, fenced.String())

	var count int
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM fixture_members WHERE handle LIKE 'bulk-%'").Scan(&count))
	require.Zero(t, count)

	require.NoError(t, b.exec(t, `INSERT INTO fixture_members (community_id, handle)
		SELECT $1, 'bulk-' || n FROM generate_series(1, 500) n`, active))
	other := b.createCommunity(t)
	require.NoError(t, b.exec(t, `INSERT INTO fixture_members (community_id, handle)
		SELECT c, 'mixed-' || n FROM unnest($1::uuid[]) c, generate_series(1, 500) n`, []uuid.UUID{active, other}),
		"a statement over several active communities is admitted")
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM fixture_members WHERE handle LIKE 'mixed-%'").Scan(&count))
	require.Equal(t, 1000, count)
}

// The authorized executor (settings naming the community and its current
// fence generation) writes while quiescing and fenced; a wrong community, a
// stale or future generation, or settings reset to the empty string on a pooled
// connection are refused, and none of them raises a cast error.
func TestWriteFenceAdmitsOnlyTheAuthorizedExecutor(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()

	community := b.createCommunity(t)
	other := b.createCommunity(t)
	require.NoError(t, insertMember(ctx, b.pool, community, "member"))
	b.quiesce(t, community)

	// The executor's writes are the purge's: it may update and delete the
	// rows of registered tables, not insert.
	write := func(t *testing.T, executorCommunity uuid.UUID, generation int64) error {
		return b.asExecutor(t, executorCommunity, generation, func(tx pgx.Tx) error {
			tag, err := tx.Exec(ctx, "UPDATE fixture_members SET handle = handle || '.' WHERE community_id = $1", community)
			if err == nil && tag.RowsAffected() != 1 {
				return fmt.Errorf("updated %d rows, want 1", tag.RowsAffected())
			}
			return err
		})
	}
	require.NoError(t, write(t, community, 0), "executor at the current generation writes while quiescing")
	requireSQLState(t, write(t, other, 0), sqlstateFenced, "is quiescing")
	requireSQLState(t, write(t, community, 1), sqlstateFenced, "is quiescing")

	generation := b.fence(t, community)
	require.NoError(t, write(t, community, generation), "executor at the new generation writes while fenced")
	requireSQLState(t, write(t, community, generation-1), sqlstateFenced, "is fenced")

	// A connection whose transaction-local settings were reset reads them as
	// '' (not NULL): the fence must refuse cleanly, not fail a cast.
	conn, err := b.pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, setExecutor(ctx, tx, community, generation))
	require.NoError(t, tx.Rollback(ctx))
	var setting string
	require.NoError(t, conn.QueryRow(ctx, "SELECT current_setting('community_deletion.fence_generation', true)").Scan(&setting))
	require.Empty(t, setting)
	_, err = conn.Exec(ctx, "INSERT INTO fixture_members (community_id, handle) VALUES ($1, 'reset')", community)
	requireSQLState(t, err, sqlstateFenced, "is fenced")
	_, err = conn.Exec(ctx, "SELECT set_config('community_deletion.fence_generation', 'not-a-number', false)")
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "INSERT INTO fixture_members (community_id, handle) VALUES ($1, 'garbage')", community)
	requireSQLState(t, err, sqlstateFenced, "is fenced")
}

// REPEATABLE READ and SERIALIZABLE writers are refused with 25000 before any
// authorization, by the fence and by assert_community_write_allowed alike,
// even for an active community and even with executor settings.
func TestWriteFenceRefusesSnapshotIsolation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	community := b.createCommunity(t)

	for _, level := range []pgx.TxIsoLevel{pgx.RepeatableRead, pgx.Serializable} {
		t.Run(string(level), func(t *testing.T) {
			for name, stmt := range map[string]func(tx pgx.Tx) error{
				"fence": func(tx pgx.Tx) error { return insertMember(ctx, tx, community, "pinned") },
				"fence, no rows": func(tx pgx.Tx) error {
					_, err := tx.Exec(ctx, "UPDATE fixture_members SET handle = 'x' WHERE false")
					return err
				},
				"assert": func(tx pgx.Tx) error {
					_, err := tx.Exec(ctx, "SELECT assert_community_write_allowed($1)", community)
					return err
				},
			} {
				tx, err := b.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: level})
				require.NoError(t, err)
				require.NoError(t, setExecutor(ctx, tx, community, 0))
				requireSQLState(t, stmt(tx), sqlstateIsolation, "pins a snapshot")
				require.NoError(t, tx.Rollback(ctx), name)
			}
		})
	}
}

// assert_community_write_allowed admits an active community and refuses a
// missing, quiescing, fenced or tombstoned one with 55000 and a message that
// begins "community write".
func TestAssertCommunityWriteAllowed(t *testing.T) {
	t.Parallel()
	b := setup(t)

	active := b.createCommunity(t)
	require.NoError(t, b.exec(t, "SELECT assert_community_write_allowed($1)", active))

	quiescing := b.createCommunity(t)
	b.quiesce(t, quiescing)
	fenced := b.createCommunity(t)
	b.quiesce(t, fenced)
	b.fence(t, fenced)
	tombstoned := b.createCommunity(t)
	b.quiesce(t, tombstoned)
	b.fence(t, tombstoned)
	b.tombstone(t, tombstoned)

	for _, community := range []uuid.UUID{quiescing, fenced, tombstoned, uuid.New()} {
		requireSQLState(t, b.exec(t, "SELECT assert_community_write_allowed($1)", community),
			sqlstateFenced, "community write refused: community "+community.String())
	}
	requireSQLState(t, b.exec(t, "SELECT assert_community_write_allowed(NULL)"), sqlstateFenced, "community write refused")
}

// While quiescing, a transaction carrying a still-valid serving write lease
// of the community may write; an expired, foreign, forged or mismatched
// lease may not, and no lease admits anything once the community is fenced.
func TestWriteFenceServingLeaseAdmission(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()

	community := b.createCommunity(t)
	other := b.createCommunity(t)
	type lease struct {
		id                   uuid.UUID
		owner                string
		generation, fenceGen int64
	}
	acquire := func(t *testing.T, community uuid.UUID, owner string) lease {
		l := lease{owner: owner}
		require.NoError(t, b.pool.QueryRow(ctx, `INSERT INTO community_serving_write_leases
			(community_id, operation, owner, fence_generation, lease_until)
			SELECT id, 'upload', $2, deletion_fence_generation, now() + interval '1 minute' FROM communities WHERE id = $1
			RETURNING id, generation, fence_generation`, community, owner).Scan(&l.id, &l.generation, &l.fenceGen))
		return l
	}
	valid := acquire(t, community, "owner-a")
	expired := acquire(t, community, "owner-b")
	foreign := acquire(t, other, "owner-c")
	require.NoError(t, b.exec(t, "UPDATE community_serving_write_leases SET lease_until = now() - interval '1 second' WHERE id = $1", expired.id))
	b.quiesce(t, community)

	write := func(l lease) error {
		return pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SELECT set_config('community_deletion.serving_write_lease_id', $1, true),
				set_config('community_deletion.serving_write_owner', $2, true),
				set_config('community_deletion.serving_write_generation', $3, true),
				set_config('community_deletion.serving_write_fence_generation', $4, true)`,
				l.id.String(), l.owner, strconv.FormatInt(l.generation, 10), strconv.FormatInt(l.fenceGen, 10)); err != nil {
				return err
			}
			return insertMember(ctx, tx, community, "leased")
		})
	}
	require.NoError(t, write(valid), "a valid admitted lease finishes its write while quiescing")
	for name, l := range map[string]lease{
		"expired":          expired,
		"other community":  foreign,
		"wrong owner":      {id: valid.id, owner: "intruder", generation: valid.generation, fenceGen: valid.fenceGen},
		"wrong generation": {id: valid.id, owner: valid.owner, generation: valid.generation + 1, fenceGen: valid.fenceGen},
		"wrong fence":      {id: valid.id, owner: valid.owner, generation: valid.generation, fenceGen: valid.fenceGen + 1},
		"unknown id":       {id: uuid.New(), owner: valid.owner, generation: valid.generation, fenceGen: valid.fenceGen},
	} {
		requireSQLState(t, write(l), sqlstateFenced, "is quiescing")
		_ = name
	}

	b.fence(t, community)
	requireSQLState(t, write(valid), sqlstateFenced, "is fenced")
}

// The fence serializes with open writers: a writer that took the shared
// community lock delays the fence until it commits, so its row lands before
// the fence; and a write that starts after the fence committed is refused.
func TestFenceWaitsForOpenWriterAndRefusesLaterWrites(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	community, _ := b.approvedRequest(t)

	writer, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer writer.Rollback(ctx)
	require.NoError(t, insertMember(ctx, writer, community, "in-flight"))

	// The lifecycle transition takes the community lock exclusively, as the
	// executor does, on its own connection.
	fenced := make(chan error, 1)
	var lifecyclePID uint32
	lifecycle, err := b.pool.Acquire(ctx)
	require.NoError(t, err)
	defer lifecycle.Release()
	lifecyclePID = lifecycle.Conn().PgConn().PID()
	go func() {
		fenced <- pgx.BeginFunc(ctx, lifecycle, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(community_deletion_lock_key($1))", community); err != nil {
				return err
			}
			if err := setExecutor(ctx, tx, community, 0); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, "UPDATE communities SET deletion_state = 'quiescing' WHERE id = $1", community); err != nil {
				return err
			}
			if err := setExecutor(ctx, tx, community, 1); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "UPDATE communities SET deletion_state = 'fenced', deletion_fence_generation = 1 WHERE id = $1", community)
			return err
		})
	}()

	// Wait until the lifecycle transaction is blocked on the writer's lock
	// (observed in pg_locks, not guessed with a sleep).
	requireWaitingOnLock(t, b, lifecyclePID)
	select {
	case err := <-fenced:
		t.Fatalf("the fence finished while a writer held the shared lock: %v", err)
	default:
	}

	require.NoError(t, writer.Commit(ctx), "the writer admitted before the fence commits")
	require.NoError(t, <-fenced)

	state, _ := b.communityState(t, community)
	require.Equal(t, "fenced", state)
	var inFlight int
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM fixture_members WHERE community_id = $1 AND handle = 'in-flight'", community).Scan(&inFlight))
	require.Equal(t, 1, inFlight)
	requireSQLState(t, insertMember(ctx, b.pool, community, "after"), sqlstateFenced, "is fenced")
}

// A writer that is blocked on the lock while the fence commits re-reads the
// community after the lock is granted, and is refused.
func TestWriterQueuedBehindFenceIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	community := b.createCommunity(t)
	b.quiesce(t, community)

	lifecycle, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer lifecycle.Rollback(ctx)
	_, err = lifecycle.Exec(ctx, "SELECT pg_advisory_xact_lock(community_deletion_lock_key($1))", community)
	require.NoError(t, err)

	writerConn, err := b.pool.Acquire(ctx)
	require.NoError(t, err)
	defer writerConn.Release()
	writerPID := writerConn.Conn().PgConn().PID()
	written := make(chan error, 1)
	go func() {
		// The community is still quiescing with no lease, so only the
		// executor could write; use an active-looking race instead: the
		// writer is admitted by nothing once fenced.
		_, err := writerConn.Exec(ctx, "SELECT assert_community_write_allowed($1)", community)
		written <- err
	}()
	requireWaitingOnLock(t, b, writerPID)

	require.NoError(t, setExecutor(ctx, lifecycle, community, 1))
	_, err = lifecycle.Exec(ctx, "UPDATE communities SET deletion_state = 'fenced', deletion_fence_generation = 1 WHERE id = $1", community)
	require.NoError(t, err)
	require.NoError(t, lifecycle.Commit(ctx))
	requireSQLState(t, <-written, sqlstateFenced, "is fenced")
}

// Writers that arrive while a lifecycle step holds the community lock
// exclusively (its state change not yet committed) cannot take the fence's
// lock-free admitted path: the try-lock fails, they wait for the lock, read
// the state the step committed, and are refused. INSERT, UPDATE and DELETE
// each wait on their own connection.
func TestWriteFenceRefusesWritersArrivingDuringATransition(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	community, _ := b.approvedRequest(t)
	require.NoError(t, insertMember(ctx, b.pool, community, "existing"))

	lifecycle, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer lifecycle.Rollback(ctx)
	_, err = lifecycle.Exec(ctx, "SELECT pg_advisory_xact_lock(community_deletion_lock_key($1))", community)
	require.NoError(t, err)
	require.NoError(t, setExecutor(ctx, lifecycle, community, 0))
	_, err = lifecycle.Exec(ctx, "UPDATE communities SET deletion_state = 'quiescing' WHERE id = $1", community)
	require.NoError(t, err)

	writes := map[string]string{
		"insert": "INSERT INTO fixture_members (community_id, handle) VALUES ($1, 'late')",
		"update": "UPDATE fixture_members SET handle = 'edited' WHERE community_id = $1",
		"delete": "DELETE FROM fixture_members WHERE community_id = $1",
	}
	results := make(map[string]chan error, len(writes))
	for name, sql := range writes {
		// Own connections, so the pool stays free for requireWaitingOnLock.
		conn, err := pgx.ConnectConfig(ctx, b.pool.Config().ConnConfig.Copy())
		require.NoError(t, err)
		defer conn.Close(context.WithoutCancel(ctx))
		results[name] = make(chan error, 1)
		go func() {
			_, err := conn.Exec(ctx, sql, community)
			results[name] <- err
		}()
		requireWaitingOnLock(t, b, conn.PgConn().PID())
	}

	require.NoError(t, lifecycle.Commit(ctx))
	for name, result := range results {
		t.Run(name, func(t *testing.T) {
			requireSQLState(t, <-result, sqlstateFenced, "is quiescing")
		})
	}
	var handle string
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT string_agg(handle, ',') FROM fixture_members WHERE community_id = $1", community).Scan(&handle))
	require.Equal(t, "existing", handle)
}

// Every refusal of the write fence names the constraint
// community_write_fence, so a client recognizes it without reading the
// message: the fence's triggers (55000 and 25000),
// assert_community_write_allowed() and the serving lease guard.
func TestWriteFenceRefusalsNameTheirConstraint(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	_, fenced, generation := b.quiescingAndFenced(t)
	serving := b.as(fixture.RoleServing)
	requireFence := func(t *testing.T, err error, code string) {
		t.Helper()
		requireSQLState(t, err, code, "")
		require.True(t, lifecycle.IsWriteFenceRefusal(err), "%v names no constraint", err)
	}
	requireFence(t, insertMember(ctx, serving, fenced, "late"), pgerrcode.ObjectNotInPrerequisiteState)
	_, err := serving.Exec(ctx, "SELECT assert_community_write_allowed($1)", fenced)
	requireFence(t, err, pgerrcode.ObjectNotInPrerequisiteState)
	_, _, err = acquireLease(ctx, serving, fenced, generation)
	requireFence(t, err, pgerrcode.ObjectNotInPrerequisiteState)
	tx, err := serving.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	requireFence(t, insertMember(ctx, tx, b.createCommunity(t), "pinned"), pgerrcode.InvalidTransactionState)
	// Other guards' refusals are not the fence's.
	err = b.exec(t, "DELETE FROM community_deletion_requests")
	require.Error(t, err)
	require.False(t, lifecycle.IsWriteFenceRefusal(err))
}
