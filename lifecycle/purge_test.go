package lifecycle_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/fixture"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// purgeShape is how many rows purgePopulate writes per fixture table.
type purgeShape struct {
	members, channels, messages, reactions, attachments, activity, audit int
}

// purgeSmall is a few thousand rows per community.
var purgeSmall = purgeShape{members: 120, channels: 12, messages: 1500, reactions: 2500,
	attachments: 400, activity: 1800, audit: 300}

// purgePopulate writes fixture rows for an active community: members who
// were mostly invited by the member before them, and every 37th by the one
// after (a newer row); channels, messages, reactions and attachments that
// reference them; activity; and audit events (the 'nullify' table).
func purgePopulate(t *testing.T, b *testBundle, community uuid.UUID, shape purgeShape) {
	t.Helper()
	statements := []struct {
		sql string
		n   int
	}{
		{`INSERT INTO fixture_members (community_id, handle) SELECT $1, 'member-' || g FROM generate_series(1, $2::int) g`, shape.members},
		{`UPDATE fixture_members m SET invited_by = CASE WHEN m.id % 37 = 0 THEN p.next ELSE p.prev END
			FROM (SELECT id, lag(id) OVER (ORDER BY id) AS prev, lead(id) OVER (ORDER BY id) AS next
			      FROM fixture_members WHERE community_id = $1) p
			WHERE m.id = p.id AND m.community_id = $1 AND $2::int > 0`, 1},
		{`INSERT INTO fixture_channels (community_id, name, created_by)
			SELECT $1, 'channel-' || g, mb[1 + g % cardinality(mb)] FROM generate_series(1, $2::int) g,
			(SELECT array_agg(id ORDER BY id) AS mb FROM fixture_members WHERE community_id = $1) m`, shape.channels},
		{`INSERT INTO fixture_messages (community_id, channel_id, author_id, body)
			SELECT $1, ch[1 + g % cardinality(ch)], mb[1 + g % cardinality(mb)], 'message ' || g FROM generate_series(1, $2::int) g,
			(SELECT array_agg(id ORDER BY id) AS ch FROM fixture_channels WHERE community_id = $1) c,
			(SELECT array_agg(id ORDER BY id) AS mb FROM fixture_members WHERE community_id = $1) m`, shape.messages},
		{`INSERT INTO fixture_reactions (community_id, message_id, member_id, emoji)
			SELECT $1, ms[1 + g % cardinality(ms)], mb[1 + g % cardinality(mb)], 'emoji-' || (g % 5) FROM generate_series(1, $2::int) g,
			(SELECT array_agg(id ORDER BY id) AS ms FROM fixture_messages WHERE community_id = $1) s,
			(SELECT array_agg(id ORDER BY id) AS mb FROM fixture_members WHERE community_id = $1) m`, shape.reactions},
		{`INSERT INTO fixture_attachments (community_id, message_id, storage_key)
			SELECT $1, ms[1 + g % cardinality(ms)], 'key/' || g FROM generate_series(1, $2::int) g,
			(SELECT array_agg(id ORDER BY id) AS ms FROM fixture_messages WHERE community_id = $1) s`, shape.attachments},
		{`INSERT INTO fixture_activity (community_id, kind) SELECT $1, 'kind-' || (g % 7) FROM generate_series(1, $2::int) g`, shape.activity},
		{`INSERT INTO fixture_audit_events (community_id, action) SELECT $1, 'action-' || g FROM generate_series(1, $2::int) g`, shape.audit},
	}
	for _, s := range statements {
		_, err := b.pool.Exec(t.Context(), s.sql, community, s.n)
		require.NoError(t, err, s.sql)
	}
}

// purgeExec runs one statement on the pool.
func purgeExec(t *testing.T, b *testBundle, sql string, args ...any) {
	t.Helper()
	_, err := b.pool.Exec(t.Context(), sql, args...)
	require.NoError(t, err, sql)
}

// purgeAsExecutor runs fn in a transaction carrying the deletion executor
// settings of community at generation.
func purgeAsExecutor(t *testing.T, b *testBundle, community uuid.UUID, generation int64, fn func(tx pgx.Tx) error) {
	t.Helper()
	require.NoError(t, pgx.BeginFunc(t.Context(), b.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(t.Context(), `SELECT set_config('community_deletion.executor_community', $1, true),
			set_config('community_deletion.fence_generation', $2, true)`, community.String(), fmt.Sprint(generation)); err != nil {
			return err
		}
		return fn(tx)
	}))
}

// purgeReady walks a new deletion request of community to bindings_removed
// with SQL, the way the guards want it: submitted, inventoried, approved by
// a second person, claimed, quiesced and fenced (generation 1) as the
// executor, its destructive manifest frozen, drained, bindings removed. It
// returns the claim's token.
func purgeReady(t *testing.T, b *testBundle, community uuid.UUID) lifecycle.LeaseToken {
	t.Helper()
	ctx := t.Context()
	var request uuid.UUID
	require.NoError(t, b.pool.QueryRow(ctx, `INSERT INTO community_deletion_requests (community_id, community_host, requested_by)
		SELECT id, host, 'requester' FROM communities WHERE id = $1 RETURNING id`, community).Scan(&request))
	digest := sha256.Sum256([]byte(request.String()))
	purgeExec(t, b, `UPDATE community_deletion_requests
		SET stage = 'inventoried', schema_manifest = '{}', storage_manifest = '{}', inventory_manifest = '{}',
		    inventory_digest = $2, inventory_frozen_at = now()
		WHERE id = $1`, request, digest[:])
	// The approval is a second operator's: the database compares roles.
	approver := fixture.RolePool(t, b.url, fixture.RoleApprover)
	require.NoError(t, pgx.BeginFunc(ctx, approver, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO community_deletion_approvals (request_id, community_id, inventory_digest, approved_by)
			SELECT id, community_id, inventory_digest, 'approver' FROM community_deletion_requests WHERE id = $1`, request); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "UPDATE community_deletion_requests SET stage = 'approved' WHERE id = $1", request)
		return err
	}))
	const owner = "purge-executor-1"
	var generation int64
	require.NoError(t, b.pool.QueryRow(ctx, `UPDATE community_deletion_requests
		SET lease_owner = $2, lease_generation = lease_generation + 1,
		    lease_until = now() + interval '5 minutes', attempts = attempts + 1
		WHERE id = $1 RETURNING lease_generation`, request, owner).Scan(&generation))
	purgeAsExecutor(t, b, community, 0, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "UPDATE communities SET deletion_state = 'quiescing', archived_at = now() WHERE id = $1", community)
		return err
	})
	purgeAsExecutor(t, b, community, 1, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "UPDATE communities SET deletion_state = 'fenced', deletion_fence_generation = 1 WHERE id = $1", community); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "UPDATE community_deletion_requests SET stage = 'fenced', fence_generation = 1 WHERE id = $1", request)
		return err
	})
	purgeExec(t, b, `UPDATE community_deletion_requests
		SET destructive_storage_manifest = '{"version": 1}', destructive_storage_frozen_at = now() WHERE id = $1`, request)
	purgeExec(t, b, "UPDATE community_deletion_requests SET stage = 'drained' WHERE id = $1", request)
	purgeExec(t, b, "UPDATE community_deletion_requests SET stage = 'bindings_removed' WHERE id = $1", request)
	return lifecycle.LeaseToken{RequestID: request, Owner: owner, Generation: generation, CommunityID: community}.WithFence(1)
}

// purgeReclaim lets token's lease expire and claims the request again for
// owner, as a new executor does after a crash; token is then stale.
func purgeReclaim(t *testing.T, b *testBundle, token lifecycle.LeaseToken, owner string) lifecycle.LeaseToken {
	t.Helper()
	purgeExec(t, b, "UPDATE community_deletion_requests SET lease_until = now() - interval '1 second' WHERE id = $1", token.RequestID)
	var generation int64
	require.NoError(t, b.pool.QueryRow(t.Context(), `UPDATE community_deletion_requests
		SET lease_owner = $2, lease_generation = lease_generation + 1,
		    lease_until = now() + interval '5 minutes', attempts = attempts + 1
		WHERE id = $1 AND lease_until < now() RETURNING lease_generation`, token.RequestID, owner).Scan(&generation))
	next := token
	next.Owner, next.Generation = owner, generation
	return next
}

// purgeTables are the fixture's registered tables, 'delete' then 'nullify'.
var purgeTables = append(append([]string{}, fixture.Tables...), fixture.NullifyTables...)

// purgeCounts counts each fixture table's rows of community.
func purgeCounts(t *testing.T, b *testBundle, community uuid.UUID) map[string]int64 {
	t.Helper()
	counts := map[string]int64{}
	for _, table := range purgeTables {
		var n int64
		require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT count(*) FROM "+pgx.Identifier{table}.Sanitize()+
			" WHERE community_id = $1", community).Scan(&n))
		counts[table] = n
	}
	return counts
}

// purgeChecksums digests each fixture table's rows of community.
func purgeChecksums(t *testing.T, b *testBundle, community uuid.UUID) map[string]string {
	t.Helper()
	sums := map[string]string{}
	for _, table := range purgeTables {
		var sum string
		require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT md5(coalesce(string_agg(row::text, '|' ORDER BY row::text), '')) FROM "+
			pgx.Identifier{table}.Sanitize()+" row WHERE community_id = $1", community).Scan(&sum))
		sums[table] = sum
	}
	return sums
}

// purgeStage returns a request's stage.
func purgeStage(t *testing.T, b *testBundle, request uuid.UUID) string {
	t.Helper()
	var stage string
	require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT stage FROM community_deletion_requests WHERE id = $1", request).Scan(&stage))
	return stage
}

// purgeCheckpointRows returns the rows recorded by a purge checkpoint, and
// whether it exists.
func purgeCheckpointRows(t *testing.T, b *testBundle, request uuid.UUID, unit string) (int64, bool) {
	t.Helper()
	var detail []byte
	err := b.pool.QueryRow(t.Context(), `SELECT detail FROM community_deletion_checkpoints
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

// purgeDrift returns the catalog drift report.
func purgeDrift(t *testing.T, b *testBundle) []string {
	t.Helper()
	rows, err := b.pool.Query(t.Context(), "SELECT table_name || ' ' || problem FROM community_deletion_catalog_drift()")
	require.NoError(t, err)
	drift, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return drift
}

// purgeRequireGone asserts that no fixture 'delete' table holds a row of
// community and that the community is its tombstone with its request at
// postgres_purged.
func purgeRequireGone(t *testing.T, b *testBundle, token lifecycle.LeaseToken) {
	t.Helper()
	for table, n := range purgeCounts(t, b, token.CommunityID) {
		require.Zero(t, n, "rows of the purged community left in %s", table)
	}
	var state string
	var deletedAt *time.Time
	var signingKey []byte
	var icon *string
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT deletion_state, deleted_at, signing_key, icon
		FROM communities WHERE id = $1`, token.CommunityID).Scan(&state, &deletedAt, &signingKey, &icon))
	require.Equal(t, "tombstone", state)
	require.NotNil(t, deletedAt)
	require.Nil(t, signingKey)
	require.Nil(t, icon)
	require.Equal(t, "postgres_purged", purgeStage(t, b, token.RequestID))
	require.Empty(t, purgeDrift(t, b))
}

// purgeNewCommunity creates an active community with a profile to scrub.
func purgeNewCommunity(t *testing.T, b *testBundle) uuid.UUID {
	t.Helper()
	id, _ := b.createCommunity(t)
	return id
}

func TestPurgePostgresPurgesOneCommunityAndLeavesOthersUntouched(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	target := purgeNewCommunity(t, b)
	others := []uuid.UUID{purgeNewCommunity(t, b), purgeNewCommunity(t, b)}
	purgePopulate(t, b, others[0], purgeSmall)
	purgePopulate(t, b, target, purgeSmall)
	purgePopulate(t, b, others[1], purgeSmall)
	before := map[uuid.UUID]map[string]string{}
	for _, other := range others {
		before[other] = purgeChecksums(t, b, other)
	}
	counts := purgeCounts(t, b, target)
	var auditIDs []int64
	rows, err := b.pool.Query(ctx, "SELECT id FROM fixture_audit_events WHERE community_id = $1", target)
	require.NoError(t, err)
	auditIDs, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Len(t, auditIDs, purgeSmall.audit)

	token := purgeReady(t, b, target)
	var reports []lifecycle.PurgeProgress
	result, err := b.engine.EnterPostgresPurged(ctx, token, lifecycle.PurgeOptions{
		MaxRowsPerTx: 500,
		Progress:     func(p lifecycle.PurgeProgress) { reports = append(reports, p) },
	})
	require.NoError(t, err)

	// Every row of the target is gone; its audit rows stay, detached.
	purgeRequireGone(t, b, token)
	var kept int
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM fixture_audit_events WHERE id = ANY($1) AND community_id IS NULL",
		auditIDs).Scan(&kept))
	require.Equal(t, len(auditIDs), kept)
	// The other communities did not change at all.
	for _, other := range others {
		require.Equal(t, before[other], purgeChecksums(t, b, other))
	}

	// The result and the checkpoints account for every row, in batches.
	for _, table := range fixture.Tables {
		require.Equal(t, counts[table], result.Deleted[table], table)
		rows, ok := purgeCheckpointRows(t, b, token.RequestID, "purge:"+table)
		require.True(t, ok, "checkpoint purge:%s", table)
		require.Equal(t, counts[table], rows, table)
	}
	for _, table := range fixture.NullifyTables {
		require.Equal(t, counts[table], result.Nullified[table], table)
		rows, ok := purgeCheckpointRows(t, b, token.RequestID, "nullify:"+table)
		require.True(t, ok, "checkpoint nullify:%s", table)
		require.Equal(t, counts[table], rows, table)
	}
	_, ok := purgeCheckpointRows(t, b, token.RequestID, "postgres_tombstone_committed")
	require.True(t, ok)
	require.Greater(t, result.Batches, len(purgeTables), "a small MaxRowsPerTx splits tables into several batches")
	require.Positive(t, result.LongestTx)

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
	_, err = b.engine.EnterPostgresPurged(ctx, token, lifecycle.PurgeOptions{})
	require.True(t, lifecycle.IsStaleLease(err), "%v", err)

	// Logical verification, once the cache is purged too.
	purgeExec(t, b, "UPDATE community_deletion_requests SET stage = 'cache_purged' WHERE id = $1", token.RequestID)
	require.NoError(t, b.engine.CheckPostgresPurged(ctx, token))
	// A row of the community in a 'nullify' table (they are not fenced)
	// fails it, naming the table.
	purgeExec(t, b, "INSERT INTO fixture_audit_events (community_id, action) VALUES ($1, 'late')", target)
	err = b.engine.CheckPostgresPurged(ctx, token)
	require.ErrorIs(t, err, lifecycle.ErrRefused)
	require.Contains(t, err.Error(), "fixture_audit_events")
	purgeExec(t, b, "UPDATE fixture_audit_events SET community_id = NULL WHERE community_id = $1", target)
	// So does a table registered since, holding a row of the community.
	purgeExec(t, b, "CREATE TABLE purge_late (community_id uuid NOT NULL, note text)")
	purgeExec(t, b, "INSERT INTO purge_late VALUES ($1, 'written before registration')", target)
	purgeExec(t, b, "SELECT attach_community_write_fence('purge_late')")
	err = b.engine.CheckPostgresPurged(ctx, token)
	require.ErrorIs(t, err, lifecycle.ErrRefused)
	require.Contains(t, err.Error(), "purge_late")
	purgeExec(t, b, "SELECT detach_community_write_fence('purge_late')")
	purgeExec(t, b, "DROP TABLE purge_late")
	require.NoError(t, b.engine.CheckPostgresPurged(ctx, token))
}

func TestPurgePostgresRefusesAStaleTokenBeforeDeletingAnything(t *testing.T) {
	t.Parallel()
	b := setup(t)
	target := purgeNewCommunity(t, b)
	purgePopulate(t, b, target, purgeSmall)
	stale := purgeReady(t, b, target)
	current := purgeReclaim(t, b, stale, "purge-executor-2")
	counts := purgeCounts(t, b, target)

	_, err := b.engine.EnterPostgresPurged(t.Context(), stale, lifecycle.PurgeOptions{})
	require.True(t, lifecycle.IsStaleLease(err), "%v", err)
	require.Equal(t, counts, purgeCounts(t, b, target))
	for _, table := range purgeTables {
		_, ok := purgeCheckpointRows(t, b, stale.RequestID, "purge:"+table)
		require.False(t, ok)
	}
	// A token without a fence generation is refused outright.
	unfenced := current
	unfenced.FenceGeneration = nil
	_, err = b.engine.EnterPostgresPurged(t.Context(), unfenced, lifecycle.PurgeOptions{})
	require.ErrorIs(t, err, lifecycle.ErrRefused)
	_, err = b.engine.EnterPostgresPurged(t.Context(), current, lifecycle.PurgeOptions{Method: "sideways"})
	require.ErrorIs(t, err, lifecycle.ErrInvalidInput)
	require.Equal(t, counts, purgeCounts(t, b, target))

	result, err := b.engine.EnterPostgresPurged(t.Context(), current, lifecycle.PurgeOptions{})
	require.NoError(t, err)
	purgeRequireGone(t, b, current)
	require.Equal(t, counts["fixture_messages"], result.Deleted["fixture_messages"])
}

// purgeWaitFor polls query until it returns true; the context bounds it.
func purgeWaitFor(t *testing.T, b *testBundle, query string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for {
		var ok bool
		require.NoError(t, b.pool.QueryRow(ctx, query, args...).Scan(&ok), "waiting for: %s", query)
		if ok {
			return
		}
	}
}

func TestPurgePostgresResumesAfterCancelAndAfterItsConnectionIsKilled(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	target := purgeNewCommunity(t, b)
	other := purgeNewCommunity(t, b)
	purgePopulate(t, b, target, purgeSmall)
	purgePopulate(t, b, other, purgeSmall)
	counts := purgeCounts(t, b, target)
	otherBefore := purgeChecksums(t, b, other)
	first := purgeReady(t, b, target)

	// 1. The caller cancels after a few batches.
	cancelCtx, cancel := context.WithCancel(ctx)
	batches := 0
	_, err := b.engine.EnterPostgresPurged(cancelCtx, first, lifecycle.PurgeOptions{
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
	require.Equal(t, "bindings_removed", purgeStage(t, b, first.RequestID))
	partial := purgeCounts(t, b, target)
	require.NotEqual(t, counts, partial, "some rows went")
	require.NotZero(t, partial["fixture_members"], "not all rows went")

	// 2. A new executor claims it and its connection is killed in the middle
	// of a batch: a row lock held here stops a DELETE of fixture_messages.
	second := purgeReclaim(t, b, first, "purge-executor-2")
	var lockedMessage int64
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT id FROM fixture_messages WHERE community_id = $1
		ORDER BY id OFFSET $2 LIMIT 1`, target, purgeSmall.messages/2).Scan(&lockedMessage))
	locker, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = locker.Rollback(context.WithoutCancel(ctx)) }()
	_, err = locker.Exec(ctx, "SELECT 1 FROM fixture_messages WHERE id = $1 FOR UPDATE", lockedMessage)
	require.NoError(t, err)

	config, err := pgxpool.ParseConfig(b.url)
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
	purgeWaitFor(t, b, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
		WHERE application_name = $1 AND wait_event_type = 'Lock')`, app)
	var killed bool
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT bool_and(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE application_name = $1 AND wait_event_type = 'Lock'`, app).Scan(&killed))
	require.True(t, killed)
	require.Error(t, <-done)
	require.NoError(t, locker.Rollback(ctx))
	require.Equal(t, "bindings_removed", purgeStage(t, b, first.RequestID))
	var lockedLeft bool
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM fixture_messages WHERE id = $1)",
		lockedMessage).Scan(&lockedLeft))
	require.True(t, lockedLeft, "the killed batch rolled back")

	// 3. A third claim finishes the purge with the right totals; the older
	// tokens are stale.
	third := purgeReclaim(t, b, second, "purge-executor-3")
	_, err = b.engine.EnterPostgresPurged(ctx, second, lifecycle.PurgeOptions{})
	require.True(t, lifecycle.IsStaleLease(err), "%v", err)
	result, err := b.engine.EnterPostgresPurged(ctx, third, lifecycle.PurgeOptions{MaxRowsPerTx: 300})
	require.NoError(t, err)
	purgeRequireGone(t, b, third)
	for _, table := range fixture.Tables {
		require.Equal(t, counts[table], result.Deleted[table], table)
		rows, _ := purgeCheckpointRows(t, b, first.RequestID, "purge:"+table)
		require.Equal(t, counts[table], rows, table)
	}
	for _, table := range fixture.NullifyTables {
		require.Equal(t, counts[table], result.Nullified[table], table)
	}
	require.Equal(t, otherBefore, purgeChecksums(t, b, other))
}

func TestPurgePostgresWaitsForAMigrationAndRefusesTheDriftItCommits(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	target := purgeNewCommunity(t, b)
	purgePopulate(t, b, target, purgeSmall)
	counts := purgeCounts(t, b, target)
	token := purgeReady(t, b, target)

	// A migration session: it takes the schema-destruction lock exclusively
	// (as the migration job does, at session level) once the purge is under
	// way, and commits a new, unregistered tenant table while holding it.
	migration, err := pgx.Connect(ctx, b.url)
	require.NoError(t, err)
	defer migration.Close(context.WithoutCancel(ctx))
	var once sync.Once
	migrating := make(chan struct{})
	var deletedAtLock int64
	var migrationErr error
	done := make(chan error, 1)
	go func() {
		_, err := b.engine.EnterPostgresPurged(ctx, token, lifecycle.PurgeOptions{
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
	purgeWaitFor(t, b, `SELECT EXISTS (SELECT 1 FROM pg_locks l
		WHERE l.locktype = 'advisory' AND NOT l.granted AND l.mode = 'ShareLock' AND l.objsubid = 1
		  AND ((l.classid::bigint << 32) | l.objid::bigint) = community_schema_destruction_lock_key())`)
	require.Equal(t, counts["fixture_reactions"], deletedAtLock)
	var messagesLeft int64
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM fixture_messages WHERE community_id = $1", target).Scan(&messagesLeft))
	require.Equal(t, counts["fixture_messages"], messagesLeft, "nothing is deleted while the migration runs")
	_, err = migration.Exec(ctx, "SELECT pg_advisory_unlock(community_schema_destruction_lock_key())")
	require.NoError(t, err)

	// The purge goes on, and its final transaction refuses the drift.
	err = <-done
	require.ErrorIs(t, err, lifecycle.ErrRefused)
	require.Contains(t, err.Error(), "purge_probe")
	require.Equal(t, "bindings_removed", purgeStage(t, b, token.RequestID))
	var state string
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT deletion_state FROM communities WHERE id = $1", target).Scan(&state))
	require.Equal(t, "fenced", state)
	require.Zero(t, purgeCounts(t, b, target)["fixture_messages"], "the batches after the migration ran")

	// Once the migration is undone, the purge finishes.
	purgeExec(t, b, "DROP TABLE purge_probe")
	result, err := b.engine.EnterPostgresPurged(ctx, token, lifecycle.PurgeOptions{})
	require.NoError(t, err)
	purgeRequireGone(t, b, token)
	for _, table := range fixture.Tables {
		require.Equal(t, counts[table], result.Deleted[table], table)
	}
}

func TestPurgePostgresDetachesAndDropsTheCommunitysOwnPartition(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	target := purgeNewCommunity(t, b)
	other := purgeNewCommunity(t, b)
	purgeExec(t, b, fmt.Sprintf("CREATE TABLE fixture_activity_target PARTITION OF fixture_activity FOR VALUES IN ('%s')", target))
	purgeExec(t, b, "SELECT attach_community_write_fence('fixture_activity')")
	require.Empty(t, purgeDrift(t, b))
	purgePopulate(t, b, target, purgeSmall)
	purgePopulate(t, b, other, purgeSmall)
	var inPartition int64
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM fixture_activity_target").Scan(&inPartition))
	require.Equal(t, int64(purgeSmall.activity), inPartition)
	otherBefore := purgeChecksums(t, b, other)
	token := purgeReady(t, b, target)

	// An executor whose login owns the partitioned table (here the
	// superuser) may detach and drop.
	owner, err := lifecycle.NewEngine(ctx, b.pool, nil)
	require.NoError(t, err)
	result, err := owner.EnterPostgresPurged(ctx, token, lifecycle.PurgeOptions{})
	require.NoError(t, err)
	var exists bool
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT to_regclass('fixture_activity_target') IS NOT NULL").Scan(&exists))
	require.False(t, exists, "the community's partition is dropped")
	purgeRequireGone(t, b, token)
	require.Equal(t, inPartition, result.Deleted["fixture_activity"])
	rows, _ := purgeCheckpointRows(t, b, token.RequestID, "purge:fixture_activity")
	require.Equal(t, inPartition, rows)
	require.Equal(t, otherBefore, purgeChecksums(t, b, other))
	var otherActivity int64
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM fixture_activity_default WHERE community_id = $1", other).Scan(&otherActivity))
	require.Equal(t, int64(purgeSmall.activity), otherActivity)
}

// An executor login that does not own the partitioned table (the least
// privileged deployment) may not DETACH or DROP: the purge deletes the
// partition's rows in batches instead, and the empty partition stays for its
// owner.
func TestPurgePostgresAsTheExecutorRoleEmptiesAPartitionItDoesNotOwn(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	target := purgeNewCommunity(t, b)
	purgeExec(t, b, fmt.Sprintf("CREATE TABLE fixture_activity_target PARTITION OF fixture_activity FOR VALUES IN ('%s')", target))
	purgeExec(t, b, "SELECT attach_community_write_fence('fixture_activity')")
	purgePopulate(t, b, target, purgeSmall)
	token := purgeReady(t, b, target)

	// b.engine's login is a member of community_deletion_executor only.
	result, err := b.engine.EnterPostgresPurged(ctx, token, lifecycle.PurgeOptions{})
	require.NoError(t, err)
	require.Equal(t, int64(purgeSmall.activity), result.Deleted["fixture_activity"])
	var rows int64
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM fixture_activity_target").Scan(&rows))
	require.Zero(t, rows, "the partition stays, empty")
	purgeRequireGone(t, b, token)
}

func TestPurgePostgresRefusesAForeignKeyCycleAndPurgesABreakableOne(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	target := purgeNewCommunity(t, b)
	purgePopulate(t, b, target, purgeSmall)
	purgeExec(t, b, `CREATE TABLE purge_cycle_a (id bigint PRIMARY KEY, community_id uuid NOT NULL REFERENCES communities (id), b_id bigint)`)
	purgeExec(t, b, `CREATE TABLE purge_cycle_b (id bigint PRIMARY KEY, community_id uuid NOT NULL REFERENCES communities (id),
		a_id bigint NOT NULL REFERENCES purge_cycle_a (id))`)
	purgeExec(t, b, `ALTER TABLE purge_cycle_a ADD CONSTRAINT purge_cycle_a_b_fkey FOREIGN KEY (b_id) REFERENCES purge_cycle_b (id)`)
	purgeExec(t, b, "SELECT attach_community_write_fence('purge_cycle_a')")
	purgeExec(t, b, "SELECT attach_community_write_fence('purge_cycle_b')")
	purgeExec(t, b, "INSERT INTO purge_cycle_a (id, community_id) SELECT g, $1 FROM generate_series(1, 50) g", target)
	purgeExec(t, b, "INSERT INTO purge_cycle_b (id, community_id, a_id) SELECT g, $1, g FROM generate_series(1, 50) g", target)
	purgeExec(t, b, "UPDATE purge_cycle_a SET b_id = id")
	counts := purgeCounts(t, b, target)
	token := purgeReady(t, b, target)

	_, err := b.engine.EnterPostgresPurged(ctx, token, lifecycle.PurgeOptions{})
	require.ErrorIs(t, err, lifecycle.ErrRefused)
	require.Contains(t, err.Error(), "[purge_cycle_a, purge_cycle_b]")
	require.Equal(t, "bindings_removed", purgeStage(t, b, token.RequestID))
	require.Equal(t, counts, purgeCounts(t, b, target), "nothing is deleted")

	// ON DELETE SET NULL on one key breaks the cycle: purge_cycle_b goes
	// first and its deletes clear purge_cycle_a.b_id.
	purgeExec(t, b, `ALTER TABLE purge_cycle_a DROP CONSTRAINT purge_cycle_a_b_fkey,
		ADD CONSTRAINT purge_cycle_a_b_fkey FOREIGN KEY (b_id) REFERENCES purge_cycle_b (id) ON DELETE SET NULL`)
	result, err := b.engine.EnterPostgresPurged(ctx, token, lifecycle.PurgeOptions{})
	require.NoError(t, err)
	purgeRequireGone(t, b, token)
	require.Equal(t, int64(50), result.Deleted["purge_cycle_a"])
	require.Equal(t, int64(50), result.Deleted["purge_cycle_b"])
}

func TestPurgePostgresClearsSelfReferencesThatPointAtNewerRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	target := purgeNewCommunity(t, b)
	other := purgeNewCommunity(t, b)
	purgePopulate(t, b, other, purgeSmall)
	// Every member invites the next one and is invited by it: deleting
	// newest first leaves a reference to a deleted row after every batch.
	purgeExec(t, b, "INSERT INTO fixture_members (community_id, handle) SELECT $1, 'm' || g FROM generate_series(1, 40) g", target)
	purgeExec(t, b, `UPDATE fixture_members m SET invited_by = CASE WHEN p.rn % 2 = 1 THEN p.next ELSE p.prev END
		FROM (SELECT id, row_number() OVER (ORDER BY id) AS rn, lag(id) OVER (ORDER BY id) AS prev,
		             lead(id) OVER (ORDER BY id) AS next FROM fixture_members WHERE community_id = $1) p
		WHERE m.id = p.id`, target)
	otherBefore := purgeChecksums(t, b, other)
	token := purgeReady(t, b, target)

	result, err := b.engine.EnterPostgresPurged(ctx, token, lifecycle.PurgeOptions{MaxRowsPerTx: 3})
	require.NoError(t, err)
	purgeRequireGone(t, b, token)
	require.Equal(t, int64(40), result.Deleted["fixture_members"])
	require.Equal(t, otherBefore, purgeChecksums(t, b, other))
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
			purgeExec(t, b, "CREATE TABLE purge_bare (community_id uuid NOT NULL REFERENCES communities (id), payload text)")
			purgeExec(t, b, `CREATE TABLE purge_uuid (id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
				community_id uuid NOT NULL REFERENCES communities (id), payload text)`)
			purgeExec(t, b, "CREATE INDEX ON purge_uuid (community_id, id)")
			purgeExec(t, b, "SELECT attach_community_write_fence('purge_bare')")
			purgeExec(t, b, "SELECT attach_community_write_fence('purge_uuid')")
			target := purgeNewCommunity(t, b)
			other := purgeNewCommunity(t, b)
			for _, c := range []uuid.UUID{other, target, other} {
				purgePopulate(t, b, c, purgeSmall)
				purgeExec(t, b, "INSERT INTO purge_bare SELECT $1, 'p' || g FROM generate_series(1, 3000) g", c)
				purgeExec(t, b, "INSERT INTO purge_uuid (community_id, payload) SELECT $1, 'p' || g FROM generate_series(1, 700) g", c)
			}
			otherBefore := purgeChecksums(t, b, other)
			var otherBare, otherUUID int64
			require.NoError(t, b.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM purge_bare WHERE community_id = $1),
				(SELECT count(*) FROM purge_uuid WHERE community_id = $1)`, other).Scan(&otherBare, &otherUUID))
			counts := purgeCounts(t, b, target)
			token := purgeReady(t, b, target)

			result, err := b.engine.EnterPostgresPurged(ctx, token, lifecycle.PurgeOptions{MaxRowsPerTx: 400, Method: method})
			require.NoError(t, err)
			purgeRequireGone(t, b, token)
			for _, table := range fixture.Tables {
				require.Equal(t, counts[table], result.Deleted[table], table)
			}
			require.Equal(t, int64(3000), result.Deleted["purge_bare"])
			require.Equal(t, int64(700), result.Deleted["purge_uuid"])
			require.Equal(t, otherBefore, purgeChecksums(t, b, other))
			var bare, keyed int64
			require.NoError(t, b.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM purge_bare WHERE community_id = $1),
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
	target := purgeNewCommunity(t, b)
	other := purgeNewCommunity(t, b)
	purgePopulate(t, b, target, purgeSmall)
	purgePopulate(t, b, other, purgeSmall)
	token := purgeReady(t, b, target)

	// A migration, after the purge planned its tables, creates a tenant
	// table, backfills rows of both communities into it (it is not fenced
	// yet) and registers it. The final proof finds the target's rows there,
	// and the purge plans again and takes them.
	var once sync.Once
	var migrationErr error
	result, err := b.engine.EnterPostgresPurged(ctx, token, lifecycle.PurgeOptions{
		Progress: func(lifecycle.PurgeProgress) {
			once.Do(func() {
				migrationErr = pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
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
	rows, ok := purgeCheckpointRows(t, b, token.RequestID, "purge:purge_midway")
	require.True(t, ok)
	require.Equal(t, int64(1000), rows)
	purgeRequireGone(t, b, token)
	var left int64
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM purge_midway WHERE community_id = $1", other).Scan(&left))
	require.Equal(t, int64(500), left)
}

func TestPurgePostgresWithinTheWholeLifecycle(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	community, host := b.createCommunity(t)
	other := purgeNewCommunity(t, b)
	purgePopulate(t, b, community, purgeSmall)
	purgePopulate(t, b, other, purgeSmall)
	otherBefore := purgeChecksums(t, b, other)
	counts := purgeCounts(t, b, community)

	// Every step before and after the purge through the Store.
	submitted, err := b.operator.Submit(ctx, host, "requester", "purge end to end")
	require.NoError(t, err)
	schema, err := b.operator.InventorySchema(ctx, community)
	require.NoError(t, err)
	storage := lifecycle.StorageManifest{Version: lifecycle.StorageManifestVersion, Prefixes: []lifecycle.PrefixManifest{
		{Prefix: "_uploads/" + community.String() + "/", KeysDigest: lifecycle.EmptyKeysDigest},
	}}
	request, err := b.operator.FreezeInventory(ctx, submitted.ID, lifecycle.FrozenInventory{Schema: *schema, Storage: storage})
	require.NoError(t, err)
	_, err = b.approver.Approve(ctx, request.ID, "approver", "")
	require.NoError(t, err)
	claim, err := b.engine.ClaimRequest(ctx, request.ID, "executor", lifecycle.DefaultLeaseDuration)
	require.NoError(t, err)
	require.NotNil(t, claim)
	token := claim.Lease
	require.NoError(t, b.engine.BeginQuiescing(ctx, token))
	generation, err := b.engine.EnterFenced(ctx, token)
	require.NoError(t, err)
	token = token.WithFence(generation)
	require.NoError(t, b.engine.FreezeDestructiveManifest(ctx, token, storage))
	require.NoError(t, b.engine.EnterDrained(ctx, token))
	require.NoError(t, b.engine.EnterBindingsRemoved(ctx, token, map[string]int{"keys": 0}))

	result, err := b.engine.EnterPostgresPurged(ctx, token, lifecycle.PurgeOptions{MaxRowsPerTx: 1000})
	require.NoError(t, err)
	for _, table := range fixture.Tables {
		require.Equal(t, counts[table], result.Deleted[table], table)
	}
	purgeRequireGone(t, b, token)
	require.Equal(t, otherBefore, purgeChecksums(t, b, other))

	// Verification belongs to cache_purged.
	err = b.engine.CheckPostgresPurged(ctx, token)
	require.True(t, lifecycle.IsStaleLease(err), "%v", err)
	require.NoError(t, b.engine.EnterCachePurged(ctx, token, map[string]int{"keys": 0}))
	require.NoError(t, b.engine.CheckPostgresPurged(ctx, token))
	require.NoError(t, b.engine.EnterLogicallyVerified(ctx, token, map[string]bool{"all": true}))
	require.NoError(t, b.engine.EnterRetentionPending(ctx, token, map[string]string{"objects": "none"}))
	current, err := b.operator.Get(ctx, request.ID)
	require.NoError(t, err)
	require.Equal(t, lifecycle.StageRetentionPending, current.Stage)
	require.NotNil(t, current.CompletedAt)
	for table, n := range purgeCounts(t, b, community) {
		require.Zero(t, n, "%s still holds rows of the deleted community", table)
	}
	require.Equal(t, otherBefore, purgeChecksums(t, b, other), "no other community's row changed")
}
