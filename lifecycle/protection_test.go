package lifecycle_test

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/fixture"
	"github.com/tombstoneworks/communitydeletion/internal/testfactory"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// While a community is deletion-protected no deletion can be submitted for
// it, through the client or by hand; one operator alone cannot clear it; a
// second operator can, and then Submit works again.
func TestDeletionProtectionRefusesSubmitAndNeedsTwoOperatorsToClear(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	community := testfactory.Community(ctx, t, b.DB, nil)

	p, err := b.Operator.Protect(ctx, community.ID, "alice", "legal hold")
	require.NoError(t, err)
	require.True(t, p.Protected)
	_, err = b.Operator.Protect(ctx, community.ID, "alice", "again")
	require.ErrorIs(t, err, lifecycle.ErrRefused, "protected once")

	_, err = b.Operator.Submit(ctx, community.Host, "alice", "forget us")
	require.ErrorIs(t, err, lifecycle.ErrRefused)
	requirePgCode(t, err, "55000")
	require.ErrorContains(t, err, "deletion-protected")
	_, err = b.Approver.Submit(ctx, community.Host, "bob", "forget us")
	require.ErrorIs(t, err, lifecycle.ErrRefused, "whoever submits")
	// By hand, as the operator's login: the same refusal.
	operator := fixture.RolePool(t, b.URL, fixture.RoleOperator)
	_, err = operator.Exec(ctx, `INSERT INTO community_deletion_requests (community_id, community_host, requested_by, requested_by_role)
		VALUES ($1, $2, 'alice', session_user)`, community.ID, community.Host)
	requirePgCode(t, err, "55000")

	// Clearing: a request, then a second operator.
	_, err = b.Operator.ApproveUnprotect(ctx, community.ID, "bob", "no request yet")
	require.ErrorIs(t, err, lifecycle.ErrRefused, "nothing to approve")
	p, err = b.Operator.RequestUnprotect(ctx, community.ID, "alice", "hold lifted")
	require.NoError(t, err)
	require.True(t, p.Protected, "still protected until a second operator approves")
	require.True(t, p.ClearPending)
	_, err = b.Operator.Submit(ctx, community.Host, "alice", "forget us")
	require.ErrorIs(t, err, lifecycle.ErrRefused, "a pending clear still protects")

	_, err = b.Operator.ApproveUnprotect(ctx, community.ID, "Alice ", "me again")
	require.ErrorIs(t, err, lifecycle.ErrRefused, "the requester cannot approve under her own name")
	_, err = b.Operator.ApproveUnprotect(ctx, community.ID, "carol", "alice's login, carol's name")
	require.ErrorIs(t, err, lifecycle.ErrRefused, "nor with her own login under another name")
	requirePgCode(t, err, "23000")
	_, err = b.Approver.ApproveUnprotect(ctx, community.ID, "alice", "bob's login, alice's name")
	require.ErrorIs(t, err, lifecycle.ErrRefused, "nor another login under her name")

	p, err = b.Approver.ApproveUnprotect(ctx, community.ID, "bob", "confirmed with legal")
	require.NoError(t, err)
	require.False(t, p.Protected)
	require.Len(t, p.Events, 3)
	require.Equal(t, lifecycle.ProtectionCleared, p.Events[0].Action)
	require.Equal(t, string(fixture.RoleApprover), p.Events[0].ActorRole, "the login is recorded by the database")

	request, err := b.Operator.Submit(ctx, community.Host, "alice", "forget us")
	require.NoError(t, err)
	_, err = b.Approver.Protect(ctx, community.ID, "bob", "too late")
	require.ErrorIs(t, err, lifecycle.ErrRefused, "not while a request is open")
	require.ErrorContains(t, err, "abort it first")
	_, err = b.Operator.Abort(ctx, request.ID, "alice", "hold again")
	require.NoError(t, err)
	_, err = b.Approver.Protect(ctx, community.ID, "bob", "hold again")
	require.NoError(t, err)
}

// Protection events are audit records: only operators add them, nobody
// changes or removes them, the owner included.
func TestDeletionProtectionEventsAreOperatorOnlyAndAppendOnly(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	community := testfactory.Community(ctx, t, b.DB, nil)
	_, err := b.Operator.Protect(ctx, community.ID, "alice", "legal hold")
	require.NoError(t, err)

	serving := fixture.RolePool(t, b.URL, fixture.RoleServing)
	_, err = serving.Exec(ctx, `INSERT INTO community_deletion_protection_events (community_id, action, actor, reason)
		VALUES ($1, 'clear_requested', 'svc', 'x')`, community.ID)
	requirePgCode(t, err, "42501")
	executor := fixture.RolePool(t, b.URL, fixture.RoleExecutor)
	_, err = executor.Exec(ctx, `DELETE FROM community_deletion_protection_events WHERE community_id = $1`, community.ID)
	requirePgCode(t, err, "42501")

	operator := fixture.RolePool(t, b.URL, fixture.RoleOperator)
	_, err = operator.Exec(ctx, `UPDATE community_deletion_protection_events SET action = 'cleared' WHERE community_id = $1`, community.ID)
	requirePgCode(t, err, "42501")
	// The owner holds every privilege; the guard still refuses.
	requirePgCode(t, b.exec(t, `UPDATE community_deletion_protection_events SET action = 'cleared' WHERE community_id = $1`, community.ID), "23000")
	requirePgCode(t, b.exec(t, `DELETE FROM community_deletion_protection_events WHERE community_id = $1`, community.ID), "23000")
	requirePgCode(t, b.exec(t, `TRUNCATE community_deletion_protection_events`), "55000")
	p, err := b.Operator.Protection(ctx, community.ID)
	require.NoError(t, err)
	require.True(t, p.Protected)
	require.Len(t, p.Events, 1)
}

// A submission and a protection of the same community racing each other:
// exactly one wins every time (each locks the community's row before it
// checks the other), never both.
func TestDeletionProtectionAndSubmitRaceExactlyOneWins(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	for i := range 20 {
		community := testfactory.Community(ctx, t, b.DB, nil)
		var wg sync.WaitGroup
		var submitErr, protectErr error
		start := make(chan struct{})
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			_, submitErr = b.Operator.Submit(ctx, community.Host, "alice", "race")
		}()
		go func() {
			defer wg.Done()
			<-start
			_, protectErr = b.Approver.Protect(ctx, community.ID, "bob", "race")
		}()
		close(start)
		wg.Wait()
		requireNoDeadlock(t, submitErr)
		requireNoDeadlock(t, protectErr)
		require.NotEqual(t, submitErr == nil, protectErr == nil,
			"round %d: submit %v, protect %v: exactly one must win", i, submitErr, protectErr)
	}
}
