package lifecycle_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/fixture"
	"github.com/tombstoneworks/communitydeletion/internal/testfactory"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// fewThousandRows is a few thousand rows of one community.
var fewThousandRows = testfactory.Rows{Members: 120, Channels: 12, Messages: 1500, Reactions: 2500,
	Attachments: 400, Activity: 1800, AuditEvents: 300}

// registeredTables are the fixture's registered tables, 'delete' then
// 'nullify'.
var registeredTables = append(append([]string{}, fixture.Tables...), fixture.NullifyTables...)

// rowCounts counts each fixture table's rows of community.
func (b *testBundle) rowCounts(t *testing.T, community uuid.UUID) map[string]int64 {
	t.Helper()
	counts := map[string]int64{}
	for _, table := range registeredTables {
		var n int64
		require.NoError(t, b.Pool.QueryRow(t.Context(), "SELECT count(*) FROM "+pgx.Identifier{table}.Sanitize()+
			" WHERE community_id = $1", community).Scan(&n))
		counts[table] = n
	}
	return counts
}

// purgeScene is a target community at bindings_removed beside another, both
// with fewThousandRows, and what the purge must account for and leave.
type purgeScene struct {
	target, other uuid.UUID
	token         lifecycle.LeaseToken
	counts        map[string]int64  // the target's rows per table
	otherBefore   map[string]string // the other's checksums
}

// newPurgeScene writes the scene.
func (b *testBundle) newPurgeScene(t *testing.T) purgeScene {
	t.Helper()
	ctx := t.Context()
	s := purgeScene{target: testfactory.Community(ctx, t, b.DB, nil).ID, other: testfactory.Community(ctx, t, b.DB, nil).ID}
	testfactory.WriteRows(ctx, t, b.DB, s.target, fewThousandRows)
	testfactory.WriteRows(ctx, t, b.DB, s.other, fewThousandRows)
	s.counts = b.rowCounts(t, s.target)
	s.otherBefore = b.checksums(t, s.other)
	_, s.token = testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{CommunityID: s.target, Stage: lifecycle.StageBindingsRemoved})
	return s
}

// checksums digests each fixture table's rows of community.
func (b *testBundle) checksums(t *testing.T, community uuid.UUID) map[string]string {
	t.Helper()
	sums := map[string]string{}
	for _, table := range registeredTables {
		var sum string
		require.NoError(t, b.Pool.QueryRow(t.Context(), "SELECT md5(coalesce(string_agg(row::text, '|' ORDER BY row::text), '')) FROM "+
			pgx.Identifier{table}.Sanitize()+" row WHERE community_id = $1", community).Scan(&sum))
		sums[table] = sum
	}
	return sums
}

// stage returns a request's stage.
func (b *testBundle) stage(t *testing.T, request uuid.UUID) lifecycle.Stage {
	t.Helper()
	current, err := b.Operator.Get(t.Context(), request)
	require.NoError(t, err)
	return current.Stage
}

// purgeCheckpointRows returns the rows recorded by a completed purge
// checkpoint of request, and whether it exists.
func (b *testBundle) purgeCheckpointRows(t *testing.T, request uuid.UUID, unit string) (int64, bool) {
	t.Helper()
	var detail []byte
	err := b.Pool.QueryRow(t.Context(), `SELECT detail FROM community_deletion_checkpoints
		WHERE request_id = $1 AND stage = 'bindings_removed' AND unit_key = $2 AND status = 'completed'`, request, unit).Scan(&detail)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false
	}
	require.NoError(t, err)
	var d struct {
		Rows int64 `json:"rows"`
	}
	require.NoError(t, json.Unmarshal(detail, &d))
	return d.Rows, true
}

// drift returns the catalog drift report.
func (b *testBundle) drift(t *testing.T) []string {
	t.Helper()
	rows, err := b.Pool.Query(t.Context(), "SELECT table_name || ' ' || problem FROM community_deletion_catalog_drift()")
	require.NoError(t, err)
	drift, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return drift
}

// requirePurged asserts that no fixture table holds a row of the
// community of token, that the community is its scrubbed tombstone with
// its request at postgres_purged, and that the catalog does not drift.
func (b *testBundle) requirePurged(t *testing.T, token lifecycle.LeaseToken) {
	t.Helper()
	for table, n := range b.rowCounts(t, token.CommunityID) {
		require.Zero(t, n, "rows of the purged community left in %s", table)
	}
	tombstone := b.community(t, token.CommunityID)
	require.Equal(t, "tombstone", tombstone.State)
	require.NotNil(t, tombstone.DeletedAt)
	require.Nil(t, tombstone.SigningKey)
	require.Nil(t, tombstone.Icon)
	require.Equal(t, lifecycle.StagePostgresPurged, b.stage(t, token.RequestID))
	require.Empty(t, b.drift(t))
}

func TestPurgePostgresPurgesOneCommunityAndLeavesOthersUntouched(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	target := testfactory.Community(ctx, t, b.DB, nil).ID
	others := []uuid.UUID{testfactory.Community(ctx, t, b.DB, nil).ID, testfactory.Community(ctx, t, b.DB, nil).ID}
	testfactory.WriteRows(ctx, t, b.DB, others[0], fewThousandRows)
	testfactory.WriteRows(ctx, t, b.DB, target, fewThousandRows)
	testfactory.WriteRows(ctx, t, b.DB, others[1], fewThousandRows)
	before := map[uuid.UUID]map[string]string{}
	for _, other := range others {
		before[other] = b.checksums(t, other)
	}
	counts := b.rowCounts(t, target)
	var auditIDs []int64
	rows, err := b.Pool.Query(ctx, "SELECT id FROM fixture_audit_events WHERE community_id = $1", target)
	require.NoError(t, err)
	auditIDs, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Len(t, auditIDs, fewThousandRows.AuditEvents)

	_, token := testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{CommunityID: target, Stage: lifecycle.StageBindingsRemoved})
	var reports []lifecycle.PurgeProgress
	result, err := b.Engine.EnterPostgresPurged(ctx, token, lifecycle.PurgeOptions{
		MaxRowsPerTx: 500,
		Progress:     func(p lifecycle.PurgeProgress) { reports = append(reports, p) },
	})
	require.NoError(t, err)

	// Every row of the target is gone; its audit rows stay, detached.
	b.requirePurged(t, token)
	var kept int
	require.NoError(t, b.Pool.QueryRow(ctx, "SELECT count(*) FROM fixture_audit_events WHERE id = ANY($1) AND community_id IS NULL",
		auditIDs).Scan(&kept))
	require.Equal(t, len(auditIDs), kept)
	// The other communities did not change at all.
	for _, other := range others {
		require.Equal(t, before[other], b.checksums(t, other))
	}

	// The result and the checkpoints account for every row, in batches.
	for _, table := range fixture.Tables {
		require.Equal(t, counts[table], result.Deleted[table], table)
		rows, ok := b.purgeCheckpointRows(t, token.RequestID, "purge:"+table)
		require.True(t, ok, "checkpoint purge:%s", table)
		require.Equal(t, counts[table], rows, table)
	}
	for _, table := range fixture.NullifyTables {
		require.Equal(t, counts[table], result.Nullified[table], table)
		rows, ok := b.purgeCheckpointRows(t, token.RequestID, "nullify:"+table)
		require.True(t, ok, "checkpoint nullify:%s", table)
		require.Equal(t, counts[table], rows, table)
	}
	_, ok := b.purgeCheckpointRows(t, token.RequestID, "postgres_tombstone_committed")
	require.True(t, ok)
	require.Greater(t, result.Batches, len(registeredTables), "a small MaxRowsPerTx splits tables into several batches")
	require.Positive(t, result.LongestTx)
	require.Positive(t, result.FinalTx, "the final transaction's duration")
	require.LessOrEqual(t, result.FinalTx, result.LongestTx)

	// Progress came after every batch, rows so far growing per table, the
	// tables in child-before-parent order, each ending Done.
	last := map[string]lifecycle.PurgeProgress{}
	var order []string
	for _, p := range reports {
		prev, seen := last[p.Table]
		if !seen {
			order = append(order, p.Table)
		}
		require.False(t, prev.Done, "no report after %s was done", p.Table)
		require.GreaterOrEqual(t, p.Rows, prev.Rows)
		require.LessOrEqual(t, p.Rows-prev.Rows, int64(500), "a batch stays under MaxRowsPerTx")
		last[p.Table] = p
	}
	require.Equal(t, []string{"fixture_audit_events", "fixture_activity", "fixture_attachments", "fixture_reactions",
		"fixture_messages", "fixture_channels", "fixture_members"}, order)
	for table, p := range last {
		require.True(t, p.Done, table)
		require.Equal(t, counts[table], p.Rows, table)
	}

	// Purging again is refused: the request moved on.
	_, err = b.Engine.EnterPostgresPurged(ctx, token, lifecycle.PurgeOptions{})
	require.True(t, lifecycle.IsStaleLease(err), "%v", err)

	// Logical verification, once the cache is purged too.
	require.NoError(t, b.Engine.EnterCachePurged(ctx, token, nil))
	require.NoError(t, b.Engine.CheckPostgresPurged(ctx, token))
	// A 'nullify' table refuses a row linked to the deleted community
	// (its kept-row fence); one written past it (a superuser with
	// session_replication_role) fails verification, naming the table.
	requirePgCode(t, b.exec(t, "INSERT INTO fixture_audit_events (community_id, action) VALUES ($1, 'late')", target), "55000")
	require.NoError(t, pgx.BeginFunc(ctx, b.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL session_replication_role = replica"); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "INSERT INTO fixture_audit_events (community_id, action) VALUES ($1, 'late')", target)
		return err
	}))
	err = b.Engine.CheckPostgresPurged(ctx, token)
	require.ErrorIs(t, err, lifecycle.ErrRefused)
	require.Contains(t, err.Error(), "fixture_audit_events")
	require.NoError(t, b.exec(t, "UPDATE fixture_audit_events SET community_id = NULL WHERE community_id = $1", target))
	// So does a table registered since, holding a row of the community.
	require.NoError(t, b.exec(t, "CREATE TABLE purge_late (community_id uuid NOT NULL, note text)"))
	require.NoError(t, b.exec(t, "INSERT INTO purge_late VALUES ($1, 'written before registration')", target))
	require.NoError(t, b.exec(t, "SELECT attach_community_write_fence('purge_late')"))
	err = b.Engine.CheckPostgresPurged(ctx, token)
	require.ErrorIs(t, err, lifecycle.ErrRefused)
	require.Contains(t, err.Error(), "purge_late")
	require.NoError(t, b.exec(t, "SELECT detach_community_write_fence('purge_late')"))
	require.NoError(t, b.exec(t, "DROP TABLE purge_late"))
	require.NoError(t, b.Engine.CheckPostgresPurged(ctx, token))
}

func TestPurgePostgresRefusesAStaleTokenBeforeDeletingAnything(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	target := testfactory.Community(ctx, t, b.DB, nil).ID
	testfactory.WriteRows(ctx, t, b.DB, target, fewThousandRows)
	_, stale := testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{CommunityID: target, Stage: lifecycle.StageBindingsRemoved})
	current := testfactory.Reclaim(ctx, t, b.DB, stale, &testfactory.ReclaimOpts{Owner: "purge-executor-2"})
	counts := b.rowCounts(t, target)

	_, err := b.Engine.EnterPostgresPurged(ctx, stale, lifecycle.PurgeOptions{})
	require.True(t, lifecycle.IsStaleLease(err), "%v", err)
	require.Equal(t, counts, b.rowCounts(t, target))
	for _, table := range registeredTables {
		_, ok := b.purgeCheckpointRows(t, stale.RequestID, "purge:"+table)
		require.False(t, ok)
	}
	// A token without a fence generation is refused outright.
	unfenced := current
	unfenced.FenceGeneration = nil
	_, err = b.Engine.EnterPostgresPurged(ctx, unfenced, lifecycle.PurgeOptions{})
	require.ErrorIs(t, err, lifecycle.ErrRefused)
	_, err = b.Engine.EnterPostgresPurged(ctx, current, lifecycle.PurgeOptions{Method: "sideways"})
	require.ErrorIs(t, err, lifecycle.ErrInvalidInput)
	require.Equal(t, counts, b.rowCounts(t, target))

	result, err := b.Engine.EnterPostgresPurged(ctx, current, lifecycle.PurgeOptions{})
	require.NoError(t, err)
	b.requirePurged(t, current)
	require.Equal(t, counts["fixture_messages"], result.Deleted["fixture_messages"])
}

func TestPurgePostgresResumesAfterCancelAndAfterItsConnectionIsKilled(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	scene := b.newPurgeScene(t)
	target, other, counts, otherBefore, first := scene.target, scene.other, scene.counts, scene.otherBefore, scene.token

	// 1. The caller cancels after a few batches.
	cancelCtx, cancel := context.WithCancel(ctx)
	batches := 0
	_, err := b.Engine.EnterPostgresPurged(cancelCtx, first, lifecycle.PurgeOptions{
		MaxRowsPerTx: 300,
		Progress: func(lifecycle.PurgeProgress) {
			if batches++; batches == 5 {
				cancel()
			}
		},
	})
	cancel()
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, 5, batches, "no batch commits after the cancel")
	require.Equal(t, lifecycle.StageBindingsRemoved, b.stage(t, first.RequestID))
	partial := b.rowCounts(t, target)
	require.NotEqual(t, counts, partial, "some rows went")
	require.NotZero(t, partial["fixture_members"], "not all rows went")

	// 2. A new executor claims it and its connection is killed in the middle
	// of a batch: a row lock held here stops a DELETE of fixture_messages.
	second := testfactory.Reclaim(ctx, t, b.DB, first, &testfactory.ReclaimOpts{Owner: "purge-executor-2"})
	var lockedMessage int64
	require.NoError(t, b.Pool.QueryRow(ctx, `SELECT id FROM fixture_messages WHERE community_id = $1
		ORDER BY id OFFSET $2 LIMIT 1`, target, fewThousandRows.Messages/2).Scan(&lockedMessage))
	locker, err := b.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = locker.Rollback(context.WithoutCancel(ctx)) }()
	_, err = locker.Exec(ctx, "SELECT 1 FROM fixture_messages WHERE id = $1 FOR UPDATE", lockedMessage)
	require.NoError(t, err)

	config, err := pgxpool.ParseConfig(b.URL)
	require.NoError(t, err)
	const app = "purge-under-test"
	config.ConnConfig.RuntimeParams["application_name"] = app
	killPool, err := pgxpool.NewWithConfig(ctx, config)
	require.NoError(t, err)
	defer killPool.Close()
	killEngine, err := lifecycle.NewEngine(ctx, killPool, nil)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := killEngine.EnterPostgresPurged(ctx, second, lifecycle.PurgeOptions{MaxRowsPerTx: 300})
		done <- err
	}()
	b.waitForLockWaiters(t, 1, "a.application_name = $1", app)
	var killed bool
	require.NoError(t, b.Pool.QueryRow(ctx, `SELECT bool_and(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE application_name = $1 AND wait_event_type = 'Lock'`, app).Scan(&killed))
	require.True(t, killed)
	require.Error(t, <-done)
	require.NoError(t, locker.Rollback(ctx))
	require.Equal(t, lifecycle.StageBindingsRemoved, b.stage(t, first.RequestID))
	var lockedLeft bool
	require.NoError(t, b.Pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM fixture_messages WHERE id = $1)",
		lockedMessage).Scan(&lockedLeft))
	require.True(t, lockedLeft, "the killed batch rolled back")

	// 3. A third claim finishes the purge with the right totals; the older
	// tokens are stale.
	third := testfactory.Reclaim(ctx, t, b.DB, second, &testfactory.ReclaimOpts{Owner: "purge-executor-3"})
	_, err = b.Engine.EnterPostgresPurged(ctx, second, lifecycle.PurgeOptions{})
	require.True(t, lifecycle.IsStaleLease(err), "%v", err)
	result, err := b.Engine.EnterPostgresPurged(ctx, third, lifecycle.PurgeOptions{MaxRowsPerTx: 300})
	require.NoError(t, err)
	b.requirePurged(t, third)
	for _, table := range fixture.Tables {
		require.Equal(t, counts[table], result.Deleted[table], table)
		rows, _ := b.purgeCheckpointRows(t, first.RequestID, "purge:"+table)
		require.Equal(t, counts[table], rows, table)
	}
	for _, table := range fixture.NullifyTables {
		require.Equal(t, counts[table], result.Nullified[table], table)
	}
	require.Equal(t, otherBefore, b.checksums(t, other))
}

func TestPurgePostgresWaitsForAMigrationAndRefusesTheDriftItCommits(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	target := testfactory.Community(ctx, t, b.DB, nil).ID
	testfactory.WriteRows(ctx, t, b.DB, target, fewThousandRows)
	counts := b.rowCounts(t, target)
	_, token := testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{CommunityID: target, Stage: lifecycle.StageBindingsRemoved})

	// A migration session: it takes the schema-destruction lock exclusively
	// (as the migration job does, at session level) once the purge is under
	// way, and commits a new, unregistered tenant table while holding it.
	migration, err := pgx.Connect(ctx, b.URL)
	require.NoError(t, err)
	defer migration.Close(context.WithoutCancel(ctx))
	var once sync.Once
	migrating := make(chan struct{})
	var deletedAtLock int64
	var migrationErr error
	done := make(chan error, 1)
	go func() {
		_, err := b.Engine.EnterPostgresPurged(ctx, token, lifecycle.PurgeOptions{
			MaxRowsPerTx: 1000,
			Progress: func(p lifecycle.PurgeProgress) {
				if p.Table != "fixture_reactions" || !p.Done {
					return
				}
				once.Do(func() {
					defer close(migrating)
					deletedAtLock = p.Rows
					if _, migrationErr = migration.Exec(ctx, "SELECT pg_advisory_lock(community_schema_destruction_lock_key())"); migrationErr != nil {
						return
					}
					_, migrationErr = migration.Exec(ctx, "CREATE TABLE purge_probe (community_id uuid NOT NULL, payload text)")
				})
			},
		})
		done <- err
	}()
	<-migrating
	require.NoError(t, migrationErr)
	// The purge's next transaction waits for the lock.
	b.waitForLockWaiters(t, 1, advisoryLock+` AND l.mode = 'ShareLock' AND l.objsubid = 1
		AND ((l.classid::bigint << 32) | l.objid::bigint) = community_schema_destruction_lock_key()`)
	require.Equal(t, counts["fixture_reactions"], deletedAtLock)
	var messagesLeft int64
	require.NoError(t, b.Pool.QueryRow(ctx, "SELECT count(*) FROM fixture_messages WHERE community_id = $1", target).Scan(&messagesLeft))
	require.Equal(t, counts["fixture_messages"], messagesLeft, "nothing is deleted while the migration runs")
	_, err = migration.Exec(ctx, "SELECT pg_advisory_unlock(community_schema_destruction_lock_key())")
	require.NoError(t, err)

	// The purge goes on, and its final transaction refuses the drift.
	err = <-done
	require.ErrorIs(t, err, lifecycle.ErrRefused)
	require.Contains(t, err.Error(), "purge_probe")
	require.Equal(t, lifecycle.StageBindingsRemoved, b.stage(t, token.RequestID))
	var state string
	require.NoError(t, b.Pool.QueryRow(ctx, "SELECT deletion_state FROM communities WHERE id = $1", target).Scan(&state))
	require.Equal(t, "fenced", state)
	require.Zero(t, b.rowCounts(t, target)["fixture_messages"], "the batches after the migration ran")

	// Once the migration is undone, the purge finishes.
	require.NoError(t, b.exec(t, "DROP TABLE purge_probe"))
	result, err := b.Engine.EnterPostgresPurged(ctx, token, lifecycle.PurgeOptions{})
	require.NoError(t, err)
	b.requirePurged(t, token)
	for _, table := range fixture.Tables {
		require.Equal(t, counts[table], result.Deleted[table], table)
	}
}

func TestPurgePostgresDetachesAndDropsTheCommunitysOwnPartition(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	target := testfactory.Community(ctx, t, b.DB, nil).ID
	other := testfactory.Community(ctx, t, b.DB, nil).ID
	require.NoError(t, b.exec(t, fmt.Sprintf("CREATE TABLE fixture_activity_target PARTITION OF fixture_activity FOR VALUES IN ('%s')", target)))
	require.NoError(t, b.exec(t, "SELECT attach_community_write_fence('fixture_activity')"))
	require.Empty(t, b.drift(t))
	testfactory.WriteRows(ctx, t, b.DB, target, fewThousandRows)
	testfactory.WriteRows(ctx, t, b.DB, other, fewThousandRows)
	var inPartition int64
	require.NoError(t, b.Pool.QueryRow(ctx, "SELECT count(*) FROM fixture_activity_target").Scan(&inPartition))
	require.Equal(t, int64(fewThousandRows.Activity), inPartition)
	otherBefore := b.checksums(t, other)
	_, token := testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{CommunityID: target, Stage: lifecycle.StageBindingsRemoved})

	// An executor whose login owns the partitioned table (here the
	// superuser) may detach and drop.
	owner, err := lifecycle.NewEngine(ctx, b.Pool, nil)
	require.NoError(t, err)
	result, err := owner.EnterPostgresPurged(ctx, token, lifecycle.PurgeOptions{})
	require.NoError(t, err)
	var exists bool
	require.NoError(t, b.Pool.QueryRow(ctx, "SELECT to_regclass('fixture_activity_target') IS NOT NULL").Scan(&exists))
	require.False(t, exists, "the community's partition is dropped")
	b.requirePurged(t, token)
	require.Equal(t, inPartition, result.Deleted["fixture_activity"])
	rows, _ := b.purgeCheckpointRows(t, token.RequestID, "purge:fixture_activity")
	require.Equal(t, inPartition, rows)
	require.Equal(t, otherBefore, b.checksums(t, other))
	var otherActivity int64
	require.NoError(t, b.Pool.QueryRow(ctx, "SELECT count(*) FROM fixture_activity_default WHERE community_id = $1", other).Scan(&otherActivity))
	require.Equal(t, int64(fewThousandRows.Activity), otherActivity)
}

// An executor login that does not own the partitioned table (the least
// privileged deployment) may not DETACH or DROP: the purge deletes the
// partition's rows in batches instead, and the empty partition stays for its
// owner.
func TestPurgePostgresAsTheExecutorRoleEmptiesAPartitionItDoesNotOwn(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	target := testfactory.Community(ctx, t, b.DB, nil).ID
	require.NoError(t, b.exec(t, fmt.Sprintf("CREATE TABLE fixture_activity_target PARTITION OF fixture_activity FOR VALUES IN ('%s')", target)))
	require.NoError(t, b.exec(t, "SELECT attach_community_write_fence('fixture_activity')"))
	testfactory.WriteRows(ctx, t, b.DB, target, fewThousandRows)
	_, token := testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{CommunityID: target, Stage: lifecycle.StageBindingsRemoved})

	// b.Engine's login is a member of community_deletion_executor only.
	result, err := b.Engine.EnterPostgresPurged(ctx, token, lifecycle.PurgeOptions{})
	require.NoError(t, err)
	require.Equal(t, int64(fewThousandRows.Activity), result.Deleted["fixture_activity"])
	var rows int64
	require.NoError(t, b.Pool.QueryRow(ctx, "SELECT count(*) FROM fixture_activity_target").Scan(&rows))
	require.Zero(t, rows, "the partition stays, empty")
	b.requirePurged(t, token)
}

func TestPurgePostgresRefusesAForeignKeyCycleAndPurgesABreakableOne(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	target := testfactory.Community(ctx, t, b.DB, nil).ID
	testfactory.WriteRows(ctx, t, b.DB, target, fewThousandRows)
	require.NoError(t, b.exec(t, `CREATE TABLE purge_cycle_a (id bigint PRIMARY KEY, community_id uuid NOT NULL REFERENCES communities (id), b_id bigint)`))
	require.NoError(t, b.exec(t, `CREATE TABLE purge_cycle_b (id bigint PRIMARY KEY, community_id uuid NOT NULL REFERENCES communities (id),
		a_id bigint NOT NULL REFERENCES purge_cycle_a (id))`))
	require.NoError(t, b.exec(t, `ALTER TABLE purge_cycle_a ADD CONSTRAINT purge_cycle_a_b_fkey FOREIGN KEY (b_id) REFERENCES purge_cycle_b (id)`))
	require.NoError(t, b.exec(t, "SELECT attach_community_write_fence('purge_cycle_a')"))
	require.NoError(t, b.exec(t, "SELECT attach_community_write_fence('purge_cycle_b')"))
	require.NoError(t, b.exec(t, "INSERT INTO purge_cycle_a (id, community_id) SELECT g, $1 FROM generate_series(1, 50) g", target))
	require.NoError(t, b.exec(t, "INSERT INTO purge_cycle_b (id, community_id, a_id) SELECT g, $1, g FROM generate_series(1, 50) g", target))
	require.NoError(t, b.exec(t, "UPDATE purge_cycle_a SET b_id = id"))
	counts := b.rowCounts(t, target)
	_, token := testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{CommunityID: target, Stage: lifecycle.StageBindingsRemoved})

	_, err := b.Engine.EnterPostgresPurged(ctx, token, lifecycle.PurgeOptions{})
	require.ErrorIs(t, err, lifecycle.ErrRefused)
	require.Contains(t, err.Error(), "[purge_cycle_a, purge_cycle_b]")
	require.Equal(t, lifecycle.StageBindingsRemoved, b.stage(t, token.RequestID))
	require.Equal(t, counts, b.rowCounts(t, target), "nothing is deleted")

	// ON DELETE SET NULL on one key breaks the cycle: purge_cycle_b goes
	// first and its deletes clear purge_cycle_a.b_id.
	require.NoError(t, b.exec(t, `ALTER TABLE purge_cycle_a DROP CONSTRAINT purge_cycle_a_b_fkey,
		ADD CONSTRAINT purge_cycle_a_b_fkey FOREIGN KEY (b_id) REFERENCES purge_cycle_b (id) ON DELETE SET NULL`))
	result, err := b.Engine.EnterPostgresPurged(ctx, token, lifecycle.PurgeOptions{})
	require.NoError(t, err)
	b.requirePurged(t, token)
	require.Equal(t, int64(50), result.Deleted["purge_cycle_a"])
	require.Equal(t, int64(50), result.Deleted["purge_cycle_b"])
}

func TestPurgePostgresClearsSelfReferencesThatPointAtNewerRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	target := testfactory.Community(ctx, t, b.DB, nil).ID
	other := testfactory.Community(ctx, t, b.DB, nil).ID
	testfactory.WriteRows(ctx, t, b.DB, other, fewThousandRows)
	// Every member invites the next one and is invited by it: deleting
	// newest first leaves a reference to a deleted row after every batch.
	require.NoError(t, b.exec(t, "INSERT INTO fixture_members (community_id, handle) SELECT $1, 'm' || g FROM generate_series(1, 40) g", target))
	require.NoError(t, b.exec(t, `UPDATE fixture_members m SET invited_by = CASE WHEN p.rn % 2 = 1 THEN p.next ELSE p.prev END
		FROM (SELECT id, row_number() OVER (ORDER BY id) AS rn, lag(id) OVER (ORDER BY id) AS prev,
		             lead(id) OVER (ORDER BY id) AS next FROM fixture_members WHERE community_id = $1) p
		WHERE m.id = p.id`, target))
	otherBefore := b.checksums(t, other)
	_, token := testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{CommunityID: target, Stage: lifecycle.StageBindingsRemoved})

	result, err := b.Engine.EnterPostgresPurged(ctx, token, lifecycle.PurgeOptions{MaxRowsPerTx: 3})
	require.NoError(t, err)
	b.requirePurged(t, token)
	require.Equal(t, int64(40), result.Deleted["fixture_members"])
	require.Equal(t, otherBefore, b.checksums(t, other))
}

// createPurgeChild creates purge_child, a table of the fixture's messages'
// children with no tenant column of its own, indexed on its parent and
// attached through it.
func (b *testBundle) createPurgeChild(t *testing.T) {
	t.Helper()
	require.NoError(t, b.exec(t, `CREATE TABLE purge_child (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		message_id bigint NOT NULL REFERENCES fixture_messages (id), payload text)`))
	require.NoError(t, b.exec(t, "CREATE INDEX ON purge_child (message_id)"))
	require.NoError(t, b.exec(t, "SELECT attach_child_table('purge_child')"))
}

func TestPurgePostgresBatchMethods(t *testing.T) {
	t.Parallel()
	for _, method := range []lifecycle.PurgeMethod{
		lifecycle.PurgeMethodAuto, lifecycle.PurgeMethodKeyset, lifecycle.PurgeMethodKeysetCTID,
		lifecycle.PurgeMethodKeysetArray, lifecycle.PurgeMethodCommunityCTID, lifecycle.PurgeMethodTIDRange,
	} {
		name := string(method)
		if name == "" {
			name = "auto"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := t.Context()
			// A registered table with neither a key nor an index, and one
			// keyed by uuid.
			require.NoError(t, b.exec(t, "CREATE TABLE purge_bare (community_id uuid NOT NULL REFERENCES communities (id), payload text)"))
			require.NoError(t, b.exec(t, `CREATE TABLE purge_uuid (id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
				community_id uuid NOT NULL REFERENCES communities (id), payload text)`))
			require.NoError(t, b.exec(t, "CREATE INDEX ON purge_uuid (community_id, id)"))
			require.NoError(t, b.exec(t, "SELECT attach_community_write_fence('purge_bare')"))
			require.NoError(t, b.exec(t, "SELECT attach_community_write_fence('purge_uuid')"))
			// A table attached through its parent, whose rows lie in the
			// reverse of their parents' order: a batch that follows the
			// parents' index does not walk its heap in order.
			b.createPurgeChild(t)
			target := testfactory.Community(ctx, t, b.DB, nil).ID
			other := testfactory.Community(ctx, t, b.DB, nil).ID
			for _, c := range []uuid.UUID{other, target, other} {
				testfactory.WriteRows(ctx, t, b.DB, c, fewThousandRows)
				require.NoError(t, b.exec(t, "INSERT INTO purge_bare SELECT $1, 'p' || g FROM generate_series(1, 3000) g", c))
				require.NoError(t, b.exec(t, "INSERT INTO purge_uuid (community_id, payload) SELECT $1, 'p' || g FROM generate_series(1, 700) g", c))
				require.NoError(t, b.exec(t, `INSERT INTO purge_child (message_id, payload)
					SELECT id, 'c' FROM fixture_messages WHERE community_id = $1 ORDER BY id DESC`, c))
			}
			require.NoError(t, b.exec(t, "ANALYZE"))
			otherBefore := b.checksums(t, other)
			var otherBare, otherUUID int64
			require.NoError(t, b.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM purge_bare WHERE community_id = $1),
				(SELECT count(*) FROM purge_uuid WHERE community_id = $1)`, other).Scan(&otherBare, &otherUUID))
			counts := b.rowCounts(t, target)
			_, token := testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{CommunityID: target, Stage: lifecycle.StageBindingsRemoved})

			result, err := b.Engine.EnterPostgresPurged(ctx, token, lifecycle.PurgeOptions{MaxRowsPerTx: 400, Method: method})
			require.NoError(t, err)
			b.requirePurged(t, token)
			for _, table := range fixture.Tables {
				require.Equal(t, counts[table], result.Deleted[table], table)
			}
			require.Equal(t, int64(3000), result.Deleted["purge_bare"])
			require.Equal(t, int64(700), result.Deleted["purge_uuid"])
			require.Equal(t, int64(fewThousandRows.Messages), result.Deleted["purge_child"])
			require.Equal(t, otherBefore, b.checksums(t, other))
			var bare, keyed int64
			require.NoError(t, b.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM purge_bare WHERE community_id = $1),
				(SELECT count(*) FROM purge_uuid WHERE community_id = $1)`, other).Scan(&bare, &keyed))
			require.Equal(t, otherBare, bare)
			require.Equal(t, otherUUID, keyed)
		})
	}
}

func TestPurgePostgresTakesATableRegisteredWhileItRuns(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	target := testfactory.Community(ctx, t, b.DB, nil).ID
	other := testfactory.Community(ctx, t, b.DB, nil).ID
	testfactory.WriteRows(ctx, t, b.DB, target, fewThousandRows)
	testfactory.WriteRows(ctx, t, b.DB, other, fewThousandRows)
	_, token := testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{CommunityID: target, Stage: lifecycle.StageBindingsRemoved})

	// A migration, after the purge planned its tables, creates a tenant
	// table, backfills rows of both communities into it (it is not fenced
	// yet) and registers it. The final proof finds the target's rows there,
	// and the purge plans again and takes them.
	var once sync.Once
	var migrationErr error
	result, err := b.Engine.EnterPostgresPurged(ctx, token, lifecycle.PurgeOptions{
		Progress: func(lifecycle.PurgeProgress) {
			once.Do(func() {
				migrationErr = pgx.BeginFunc(ctx, b.Pool, func(tx pgx.Tx) error {
					for _, sql := range []string{
						"CREATE TABLE purge_midway (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, community_id uuid NOT NULL, note text)",
						"CREATE INDEX ON purge_midway (community_id, id)",
						fmt.Sprintf("INSERT INTO purge_midway (community_id, note) SELECT c, 'n' || g FROM generate_series(1, 500) g, "+
							"unnest(ARRAY['%s', '%s', '%s']::uuid[]) c", target, other, target),
						"SELECT attach_community_write_fence('purge_midway')",
					} {
						if _, err := tx.Exec(ctx, sql); err != nil {
							return err
						}
					}
					return nil
				})
			})
		},
	})
	require.NoError(t, migrationErr)
	require.NoError(t, err)
	require.Equal(t, int64(1000), result.Deleted["purge_midway"])
	rows, ok := b.purgeCheckpointRows(t, token.RequestID, "purge:purge_midway")
	require.True(t, ok)
	require.Equal(t, int64(1000), rows)
	b.requirePurged(t, token)
	var left int64
	require.NoError(t, b.Pool.QueryRow(ctx, "SELECT count(*) FROM purge_midway WHERE community_id = $1", other).Scan(&left))
	require.Equal(t, int64(500), left)
}

// The read-only proof before the final transaction finds no row, and a
// migration then commits a registered table holding rows of the target
// before the final transaction takes its lock. The tombstone's own proof
// in the database refuses, and the purge names the table, plans again and
// takes its rows, as if the read-only proof had found them.
func TestPurgePostgresTakesATableRegisteredAfterItsProof(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	target := testfactory.Community(ctx, t, b.DB, &testfactory.CommunityOpts{Rows: fewThousandRows}).ID
	other := testfactory.Community(ctx, t, b.DB, &testfactory.CommunityOpts{Rows: fewThousandRows}).ID

	// A first purge, of a third community, counts the tables the plan
	// finishes, so the second knows which is its last.
	first := testfactory.Community(ctx, t, b.DB, &testfactory.CommunityOpts{Rows: fewThousandRows}).ID
	_, firstToken := testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{CommunityID: first, Stage: lifecycle.StageBindingsRemoved})
	tables := 0
	_, err := b.Engine.EnterPostgresPurged(ctx, firstToken, lifecycle.PurgeOptions{MaxRowsPerTx: 1000,
		Progress: func(p lifecycle.PurgeProgress) {
			if p.Done {
				tables++
			}
		}})
	require.NoError(t, err)
	require.Positive(t, tables)

	_, token := testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{CommunityID: target, Stage: lifecycle.StageBindingsRemoved})
	// Once the last table is done (its closing sweep and the read-only
	// proof follow, neither under the schema lock), the migration takes
	// the schema lock, creates, fills and registers its table, and commits
	// only when the final transaction waits for the lock.
	migration, err := b.Pool.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = migration.Rollback(context.Background()) })
	var migrationErr error
	finished := 0
	done := make(chan error, 1)
	go func() {
		_, err := b.Engine.EnterPostgresPurged(ctx, token, lifecycle.PurgeOptions{MaxRowsPerTx: 1000,
			Progress: func(p lifecycle.PurgeProgress) {
				if !p.Done {
					return
				}
				if finished++; finished != tables {
					return
				}
				for _, sql := range []string{
					"SELECT pg_advisory_xact_lock(community_schema_destruction_lock_key())",
					"CREATE TABLE purge_late (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, community_id uuid NOT NULL, note text)",
					"CREATE INDEX ON purge_late (community_id, id)",
					fmt.Sprintf("INSERT INTO purge_late (community_id, note) SELECT c, 'n' || g FROM generate_series(1, 300) g, "+
						"unnest(ARRAY['%s', '%s']::uuid[]) c", target, other),
					"SELECT attach_community_write_fence('purge_late')",
				} {
					if _, migrationErr = migration.Exec(ctx, sql); migrationErr != nil {
						return
					}
				}
			}})
		done <- err
	}()
	b.waitForLockWaiters(t, 1, advisoryLock+` AND l.mode = 'ShareLock' AND l.objsubid = 1
		AND ((l.classid::bigint << 32) | l.objid::bigint) = community_schema_destruction_lock_key()`)
	require.NoError(t, migrationErr)
	require.NoError(t, migration.Commit(ctx))

	require.NoError(t, <-done)
	b.requirePurged(t, token)
	var targetLeft, otherLeft int64
	require.NoError(t, b.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE community_id = $1), count(*) FILTER (WHERE community_id = $2)
		FROM purge_late`, target, other).Scan(&targetLeft, &otherLeft))
	require.Zero(t, targetLeft)
	require.Equal(t, int64(300), otherLeft)
	rows, ok := b.purgeCheckpointRows(t, token.RequestID, "purge:purge_late")
	require.True(t, ok)
	require.Equal(t, int64(300), rows)
}

func TestPurgePostgresWithinTheWholeLifecycle(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	community := testfactory.Community(ctx, t, b.DB, &testfactory.CommunityOpts{Rows: fewThousandRows}).ID
	other := testfactory.Community(ctx, t, b.DB, &testfactory.CommunityOpts{Rows: fewThousandRows}).ID
	otherBefore := b.checksums(t, other)
	counts := b.rowCounts(t, community)

	// Every step before and after the purge through the clients.
	request, token := testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{CommunityID: community, Stage: lifecycle.StageBindingsRemoved})

	result, err := b.Engine.EnterPostgresPurged(ctx, token, lifecycle.PurgeOptions{MaxRowsPerTx: 1000})
	require.NoError(t, err)
	for _, table := range fixture.Tables {
		require.Equal(t, counts[table], result.Deleted[table], table)
	}
	b.requirePurged(t, token)
	require.Equal(t, otherBefore, b.checksums(t, other))

	// Verification belongs to cache_purged.
	err = b.Engine.CheckPostgresPurged(ctx, token)
	require.True(t, lifecycle.IsStaleLease(err), "%v", err)
	require.NoError(t, b.Engine.EnterCachePurged(ctx, token, map[string]int{"keys": 0}))
	require.NoError(t, b.Engine.CheckPostgresPurged(ctx, token))
	require.NoError(t, b.Engine.EnterLogicallyVerified(ctx, token, map[string]bool{"all": true}))
	require.NoError(t, b.Engine.EnterRetentionPending(ctx, token, map[string]string{"objects": "none"}))
	current, err := b.Operator.Get(ctx, request.ID)
	require.NoError(t, err)
	require.Equal(t, lifecycle.StageRetentionPending, current.Stage)
	require.NotNil(t, current.CompletedAt)
	for table, n := range b.rowCounts(t, community) {
		require.Zero(t, n, "%s still holds rows of the deleted community", table)
	}
	require.Equal(t, otherBefore, b.checksums(t, other), "no other community's row changed")
}

// A row the keyset walk left behind it (written by a superuser who set
// session_replication_role, past the fence) is found by the walk's own
// sweep, which walks the table again at once, not only by the final proof.
func TestPurgePostgresSweepFindsARowLeftBehindTheKeyset(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	scene := b.newPurgeScene(t)

	const table = "fixture_activity"
	var reports []lifecycle.PurgeProgress
	planted := false
	result, err := b.Engine.EnterPostgresPurged(ctx, scene.token, lifecycle.PurgeOptions{
		MaxRowsPerTx: 500,
		Method:       lifecycle.PurgeMethodKeyset,
		Progress: func(p lifecycle.PurgeProgress) {
			reports = append(reports, p)
			if p.Table != table || p.Done || planted {
				return
			}
			planted = true
			require.NoError(t, pgx.BeginFunc(ctx, b.Pool, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, "SET LOCAL session_replication_role = replica"); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, `INSERT INTO fixture_activity (community_id, id, kind) OVERRIDING SYSTEM VALUE
					VALUES ($1, -1, 'behind the cursor')`, scene.target)
				return err
			}))
		},
	})
	require.NoError(t, err)
	require.True(t, planted, "the table took more than one batch")
	b.requirePurged(t, scene.token)
	require.Equal(t, scene.counts[table]+1, result.Deleted[table])
	require.Equal(t, scene.otherBefore, b.checksums(t, scene.other))

	// The table finished twice in a row: its walk, then the walk the sweep
	// ordered. Another table between them would mean the final proof found
	// the row instead.
	var sequence []string
	for _, p := range reports {
		if len(sequence) == 0 || sequence[len(sequence)-1] != p.Table {
			sequence = append(sequence, p.Table)
		}
	}
	require.Equal(t, 1, strings.Count(strings.Join(sequence, " "), table), "%s is walked in one stretch: %v", table, sequence)
	require.NotEqual(t, table, sequence[len(sequence)-1], "a table after %s tells the sweep from the final proof: %v", table, sequence)
	var done int
	for _, p := range reports {
		if p.Table == table && p.Done {
			done++
		}
	}
	require.Equal(t, 2, done, "%s finished, was found unclean by its sweep and finished again", table)
}
