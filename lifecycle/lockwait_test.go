package lifecycle_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/testfactory"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// unboundedWaitGuard returns the test's context with a deadline far beyond
// any lock-wait bound the tests set. The holders never let go while a step
// runs, so a step that ignored its bound would end with the deadline's
// error instead of ErrLockWait. No wall time is compared with the bound
// itself (LockWaitError.Waited reports it), so a slow host cannot fail it.
func unboundedWaitGuard(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// A lifecycle step waits for a deletion lock at most its bound, then fails
// with a *LockWaitError that names the lock and every holder: a session by
// pid, role and application_name, a prepared transaction by its gid. It
// changes nothing, and succeeds once the lock is free.
func TestLifecycleStepsBoundTheirLockWaitAndNameTheHolder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	const wait = 200 * time.Millisecond
	store, err := lifecycle.NewEngine(ctx, b.Pool, &lifecycle.Opts{LockWait: wait})
	require.NoError(t, err)
	_, token := testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{Stage: lifecycle.StageApproved, Claimed: true})
	before := b.snapshot(t, token.RequestID)

	// A session holds the community's key (any role can compute it).
	holder, err := pgx.Connect(ctx, b.URL+"&application_name=lock-squatter")
	require.NoError(t, err)
	defer holder.Close(context.WithoutCancel(ctx))
	var pid int32
	require.NoError(t, holder.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid))
	_, err = holder.Exec(ctx, "SELECT pg_advisory_lock(community_deletion_lock_key($1))", token.CommunityID)
	require.NoError(t, err)

	err = store.BeginQuiescing(unboundedWaitGuard(t), token)
	require.ErrorIs(t, err, lifecycle.ErrLockWait, "the wait is bounded")
	var lw *lifecycle.LockWaitError
	require.ErrorAs(t, err, &lw)
	require.Equal(t, wait, lw.Waited)
	require.Len(t, lw.Holders, 1)
	require.Equal(t, pid, lw.Holders[0].PID)
	require.Equal(t, "postgres", lw.Holders[0].Role)
	require.Equal(t, "lock-squatter", lw.Holders[0].ApplicationName)
	require.Contains(t, err.Error(), fmt.Sprintf("the deletion lock of community %s, held by pid %d", token.CommunityID, pid))
	require.Equal(t, before, b.snapshot(t, token.RequestID), "nothing changed")

	// A prepared transaction holding the key shared (as a writer would) is
	// named by its gid.
	_, err = holder.Exec(ctx, "SELECT pg_advisory_unlock_all()")
	require.NoError(t, err)
	gid := "squat-" + uuid.NewString()
	_, err = holder.Exec(ctx, "BEGIN")
	require.NoError(t, err)
	_, err = holder.Exec(ctx, "SELECT pg_advisory_xact_lock_shared(community_deletion_lock_key($1))", token.CommunityID)
	require.NoError(t, err)
	_, err = holder.Exec(ctx, fmt.Sprintf("PREPARE TRANSACTION '%s'", gid))
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = b.Pool.Exec(context.Background(), fmt.Sprintf("ROLLBACK PREPARED '%s'", gid)) })
	err = store.BeginQuiescing(ctx, token)
	require.ErrorAs(t, err, &lw)
	require.Len(t, lw.Holders, 1)
	require.Equal(t, gid, lw.Holders[0].PreparedGID)
	require.Zero(t, lw.Holders[0].PID)
	require.Contains(t, err.Error(), fmt.Sprintf("prepared transaction %q", gid))
	var health []string
	rows, err := b.Pool.Query(ctx, "SELECT subject || ': ' || detail FROM community_deletion_health()")
	require.NoError(t, err)
	health, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Len(t, health, 1, "the health report flags the prepared transaction")
	require.Contains(t, health[0], gid)

	_, err = b.Pool.Exec(ctx, fmt.Sprintf("ROLLBACK PREPARED '%s'", gid))
	require.NoError(t, err)
	require.NoError(t, store.BeginQuiescing(ctx, token), "the lock is free again")
}

// A claim waits for the schema-destruction lock (held exclusively by a
// migration, or by anyone who takes the key) at most its bound.
func TestClaimBoundsItsWaitForTheSchemaLock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	request, _ := testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{Stage: lifecycle.StageApproved})
	store, err := lifecycle.NewEngine(ctx, b.Pool, &lifecycle.Opts{LockWait: 100 * time.Millisecond})
	require.NoError(t, err)
	holder, err := b.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer holder.Release()
	_, err = holder.Exec(ctx, "SELECT pg_advisory_lock(community_schema_destruction_lock_key())")
	require.NoError(t, err)
	defer func() { _, _ = holder.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock_all()") }()

	_, err = store.ClaimRequest(ctx, request.ID, "executor-1", lifecycle.DefaultLeaseDuration)
	var lw *lifecycle.LockWaitError
	require.ErrorAs(t, err, &lw)
	require.Equal(t, "the schema-destruction lock", lw.Lock)
	require.Len(t, lw.Holders, 1)
	require.Equal(t, "ExclusiveLock", lw.Holders[0].Mode)
}

// A lifecycle step waits for a row lock (of its request or its community)
// at most its bound, then fails with a *LockWaitError that names the row
// and the session holding it: pid, role, application_name and state. It
// changes nothing, and succeeds once the row is free.
func TestLifecycleStepRowLockWaitNamesTheHolder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	const wait = 200 * time.Millisecond
	store, err := lifecycle.NewEngine(ctx, b.Pool, &lifecycle.Opts{LockWait: wait})
	require.NoError(t, err)
	_, token := testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{Stage: lifecycle.StageApproved, Claimed: true})
	before := b.snapshot(t, token.RequestID)

	holder, err := pgx.Connect(ctx, b.URL+"&application_name=row-squatter")
	require.NoError(t, err)
	defer holder.Close(context.WithoutCancel(ctx))
	var pid int32
	require.NoError(t, holder.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid))

	for table, lock := range map[string]string{
		"community_deletion_requests": "SELECT 1 FROM community_deletion_requests WHERE id = $1 FOR UPDATE",
		"communities":                 "SELECT 1 FROM communities WHERE id = $1 FOR NO KEY UPDATE",
	} {
		id := token.RequestID
		if table == "communities" {
			id = token.CommunityID
		}
		_, err = holder.Exec(ctx, "BEGIN")
		require.NoError(t, err)
		_, err = holder.Exec(ctx, lock, id)
		require.NoError(t, err)

		err = store.BeginQuiescing(unboundedWaitGuard(t), token)
		require.ErrorIs(t, err, lifecycle.ErrLockWait, "%s: the wait is bounded", table)
		var lw *lifecycle.LockWaitError
		require.ErrorAs(t, err, &lw)
		require.Equal(t, wait, lw.Waited)
		require.Contains(t, lw.Lock, "a row lock of "+table+" (tuple (")
		require.Len(t, lw.Holders, 1, table)
		require.Equal(t, pid, lw.Holders[0].PID)
		require.Equal(t, "postgres", lw.Holders[0].Role)
		require.Equal(t, "row-squatter", lw.Holders[0].ApplicationName)
		require.Equal(t, "idle in transaction", lw.Holders[0].State)
		require.Contains(t, err.Error(), fmt.Sprintf(`held by pid %d (role postgres, application_name "row-squatter", state idle in transaction, row lock)`, pid))
		require.Equal(t, before, b.snapshot(t, token.RequestID), "nothing changed")

		_, err = holder.Exec(ctx, "ROLLBACK")
		require.NoError(t, err)
	}
	require.NoError(t, store.BeginQuiescing(ctx, token), "the rows are free again")
}

// While the write fence is dormant, BeginQuiescing first drains the tables
// it admits writes to; a write still open there holds it back for at most
// the drain's bound, and it then fails with a *LockWaitError naming the
// table and the writer, changing nothing. Once the write has committed the
// quiesce arms the fence.
func TestBeginQuiescingNamesTheWriteTheDormantFenceAdmitted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	for _, sql := range []string{
		"CREATE SCHEMA svc",
		"GRANT USAGE ON SCHEMA svc TO community_deletion_operator, community_deletion_executor, community_deletion_serving",
		"CREATE TABLE svc.workspaces (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), slug text NOT NULL UNIQUE)",
		`CREATE TABLE svc.docs (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
			workspace_id uuid NOT NULL REFERENCES svc.workspaces (id), body text)`,
		"SELECT community_deletion.declare_tenant_table('svc.workspaces')",
		"SELECT community_deletion.attach_community_write_fence('svc.docs', 'delete', 'workspace_id')",
	} {
		require.NoError(t, b.exec(t, sql), sql)
	}
	var target uuid.UUID
	require.NoError(t, b.Pool.QueryRow(ctx, "INSERT INTO svc.workspaces (slug) VALUES ('target') RETURNING id").Scan(&target))
	_, token := testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{CommunityID: target, Stage: lifecycle.StageApproved, Claimed: true})
	before := b.snapshot(t, token.RequestID)

	writer, err := pgx.Connect(ctx, b.URL+"&application_name=open-writer")
	require.NoError(t, err)
	defer writer.Close(context.WithoutCancel(ctx))
	var pid int32
	require.NoError(t, writer.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid))
	tx, err := writer.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "INSERT INTO svc.docs (workspace_id, body) VALUES ($1, 'open')", target)
	require.NoError(t, err)

	err = b.Engine.BeginQuiescing(unboundedWaitGuard(t), token)
	require.ErrorIs(t, err, lifecycle.ErrLockWait)
	var lw *lifecycle.LockWaitError
	require.ErrorAs(t, err, &lw)
	require.Equal(t, 250*time.Millisecond, lw.Waited, "the drain's own bound")
	require.Contains(t, err.Error(), fmt.Sprintf("a SHARE lock on svc.docs, for the dormant write fence's drain (held by pid %d (postgres))", pid))
	require.Equal(t, before, b.snapshot(t, token.RequestID), "nothing changed")

	require.NoError(t, tx.Commit(ctx))
	require.NoError(t, b.Engine.BeginQuiescing(ctx, token))
	var dormant bool
	require.NoError(t, b.Pool.QueryRow(ctx, "SELECT community_deletion.community_deletion_fence_dormant()").Scan(&dormant))
	require.False(t, dormant, "the quiesce armed the fence")
}
