package testfactory_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/ephemeralpg"
	"github.com/tombstoneworks/communitydeletion/internal/fixture"
	"github.com/tombstoneworks/communitydeletion/internal/testfactory"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

var server *ephemeralpg.Server

func TestMain(m *testing.M) {
	ephemeralpg.RunTests(m, ephemeralpg.Options{}, &server)
}

func newDB(t *testing.T) *testfactory.DB {
	t.Helper()
	url, pool := fixture.NewTestPool(t, server)
	return testfactory.NewDB(t, url, pool)
}

// communityState returns the deletion state of a request's community.
func communityState(t *testing.T, db *testfactory.DB, r *lifecycle.Request) string {
	t.Helper()
	var state string
	require.NoError(t, db.Pool.QueryRow(t.Context(), "SELECT deletion_state FROM communities WHERE id = $1", r.CommunityID).Scan(&state))
	return state
}

// Request leaves a request at every stage with its community in the state
// that stage implies and, while the request is runnable, a token that holds
// it there.
func TestRequestAtEveryStage(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := t.Context()
	communityStates := map[lifecycle.Stage]string{
		lifecycle.StageSubmitted: "active", lifecycle.StageInventoried: "active", lifecycle.StageApproved: "active",
		lifecycle.StageFenced: "fenced", lifecycle.StageDrained: "fenced", lifecycle.StageBindingsRemoved: "fenced",
		lifecycle.StagePostgresPurged: "tombstone", lifecycle.StageCachePurged: "tombstone",
		lifecycle.StageLogicallyVerified: "tombstone", lifecycle.StageRetentionPending: "tombstone",
		lifecycle.StageAborted: "active",
	}
	for _, stage := range lifecycle.Stages() {
		t.Run(string(stage), func(t *testing.T) {
			t.Parallel()
			request, token := testfactory.Request(ctx, t, db, &testfactory.RequestOpts{Stage: stage})
			require.Equal(t, stage, request.Stage)
			require.Equal(t, communityStates[stage], communityState(t, db, request))
			require.False(t, request.Blocked())
			switch {
			case stage == lifecycle.StageApproved || !stage.Runnable() && !stage.Terminal():
				require.Zero(t, token, "never claimed")
			case stage.Runnable():
				require.Equal(t, request.ID, token.RequestID)
				require.Equal(t, "executor", token.Owner)
				require.Equal(t, request.FenceGeneration, token.FenceGeneration)
				require.NoError(t, db.Engine.VerifyToken(ctx, token, stage))
			}
		})
	}
}

// The options shape the request: who submits and approves, a claim and a
// quiesced community at approved, an abort at a given stage, a block, the
// frozen storage, and a destructive key list that the frozen destructive
// manifest summarizes.
func TestRequestOptions(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := t.Context()

	t.Run("people", func(t *testing.T) {
		t.Parallel()
		request, _ := testfactory.Request(ctx, t, db, &testfactory.RequestOpts{Stage: lifecycle.StageApproved,
			RequestedBy: "alice", Reason: "spam", ApprovedBy: "bob", ApprovalNote: "checked"})
		require.Equal(t, "alice", request.RequestedBy)
		require.Equal(t, "spam", request.Reason)
		inspection, err := db.Operator.Inspect(ctx, request.ID)
		require.NoError(t, err)
		require.Equal(t, "bob", inspection.Approval.ApprovedBy)
		require.Equal(t, "checked", inspection.Approval.Note)
	})
	t.Run("claimed", func(t *testing.T) {
		t.Parallel()
		request, token := testfactory.Request(ctx, t, db, &testfactory.RequestOpts{Stage: lifecycle.StageApproved,
			Claimed: true, LeaseOwner: "worker-7", LeaseDuration: time.Hour})
		require.Equal(t, "worker-7", request.LeaseOwner)
		require.NoError(t, db.Engine.VerifyToken(ctx, token, lifecycle.StageApproved))
		require.WithinDuration(t, request.UpdatedAt.Add(time.Hour), *request.LeaseUntil, time.Minute)
		require.Equal(t, "active", communityState(t, db, request))
	})
	t.Run("quiesced", func(t *testing.T) {
		t.Parallel()
		request, token := testfactory.Request(ctx, t, db, &testfactory.RequestOpts{Stage: lifecycle.StageApproved, Quiesced: true})
		require.Equal(t, "quiescing", communityState(t, db, request))
		_, err := db.Engine.EnterFenced(ctx, token)
		require.NoError(t, err, "the token fences next")
	})
	t.Run("aborted when fenced", func(t *testing.T) {
		t.Parallel()
		request, token := testfactory.Request(ctx, t, db, &testfactory.RequestOpts{Stage: lifecycle.StageAborted,
			AbortedFrom: lifecycle.StageFenced, AbortedBy: "carol", AbortReason: "kept"})
		require.Equal(t, "carol", request.AbortedBy)
		require.Equal(t, "kept", request.AbortReason)
		require.Equal(t, int64(2), *request.FenceGeneration, "the abort restored the fenced community")
		require.Equal(t, "active", communityState(t, db, request))
		require.True(t, lifecycle.IsStaleLease(db.Engine.VerifyToken(ctx, token, lifecycle.StageFenced)))
	})
	t.Run("blocked before a claim", func(t *testing.T) {
		t.Parallel()
		request, _ := testfactory.Request(ctx, t, db, &testfactory.RequestOpts{Stage: lifecycle.StageInventoried,
			Blocked: true, BlockedUnit: "pre_claim:setup", BlockedReason: "no credentials"})
		require.True(t, request.Blocked())
		require.Equal(t, "no credentials", request.BlockedReason)
	})
	t.Run("blocked while claimed", func(t *testing.T) {
		t.Parallel()
		request, token := testfactory.Request(ctx, t, db, &testfactory.RequestOpts{Stage: lifecycle.StageDrained, Blocked: true})
		require.True(t, request.Blocked())
		require.Empty(t, request.LeaseOwner, "Block releases the lease")
		require.True(t, lifecycle.IsStaleLease(db.Engine.VerifyToken(ctx, token, lifecycle.StageDrained)))
	})
	t.Run("storage and chunks", func(t *testing.T) {
		t.Parallel()
		community := testfactory.Community(ctx, t, db, nil).ID
		prefixes := testfactory.Prefixes(community)
		storage := testfactory.EmptyStorage(community)
		storage.Prefixes[2] = testfactory.Prefix(t, prefixes[2], prefixes[2]+"x")
		chunks := []lifecycle.ManifestKeyChunk{
			{ChunkNo: 0, Prefix: prefixes[0], Keys: []string{prefixes[0] + "a", prefixes[0] + "b"}},
			{ChunkNo: 1, Prefix: prefixes[0], Keys: []string{prefixes[0] + "c"}},
			{ChunkNo: 2, Prefix: prefixes[2], Keys: []string{prefixes[2] + "x"}},
		}
		request, token := testfactory.Request(ctx, t, db, &testfactory.RequestOpts{CommunityID: community,
			Stage: lifecycle.StageDrained, Storage: &storage, Chunks: chunks})
		require.Equal(t, storage, request.Inventory.Storage)
		want := testfactory.EmptyStorage(community)
		want.Prefixes[0] = testfactory.Prefix(t, prefixes[0], prefixes[0]+"a", prefixes[0]+"b", prefixes[0]+"c")
		want.Prefixes[2] = storage.Prefixes[2]
		require.Equal(t, &want, request.DestructiveStorage)
		first, err := db.Engine.NextPendingChunk(ctx, token)
		require.NoError(t, err)
		require.Equal(t, &chunks[0], first)
	})
	t.Run("fenced with the destructive manifest frozen", func(t *testing.T) {
		t.Parallel()
		request, token := testfactory.Request(ctx, t, db, &testfactory.RequestOpts{Stage: lifecycle.StageFenced, DestructiveFrozen: true})
		require.NotNil(t, request.DestructiveStorageFrozenAt)
		require.NoError(t, db.Engine.EnterDrained(ctx, token))
	})
}

// Community writes the rows it is asked for, and only to its community.
func TestCommunityRows(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := t.Context()
	rows := testfactory.Rows{Members: 5, Channels: 2, Messages: 7, Reactions: 3, Attachments: 4, Activity: 6, AuditEvents: 1}
	community := testfactory.Community(ctx, t, db, &testfactory.CommunityOpts{Host: "rows.example", Rows: rows})
	require.Equal(t, "rows.example", community.Host)
	other := testfactory.Community(ctx, t, db, nil)
	testfactory.WriteRows(ctx, t, db, other.ID, testfactory.Rows{Members: 1})
	want := map[string]int{"fixture_members": 5, "fixture_channels": 2, "fixture_messages": 7, "fixture_reactions": 3,
		"fixture_attachments": 4, "fixture_activity": 6, "fixture_audit_events": 1}
	for table, n := range want {
		var got int
		require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM "+table+" WHERE community_id = $1", community.ID).Scan(&got))
		require.Equal(t, n, got, table)
	}
	var otherMembers int
	require.NoError(t, db.Pool.QueryRow(ctx, "SELECT count(*) FROM fixture_members WHERE community_id = $1", other.ID).Scan(&otherMembers))
	require.Equal(t, 1, otherMembers)
}

// Reclaim makes the old token stale and hands out the next generation;
// an expired serving lease no longer verifies.
func TestReclaimAndExpiredLeases(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := t.Context()
	_, token := testfactory.Request(ctx, t, db, &testfactory.RequestOpts{Stage: lifecycle.StageFenced})
	next := testfactory.Reclaim(ctx, t, db, token, &testfactory.ReclaimOpts{Owner: "successor"})
	require.Equal(t, token.Generation+1, next.Generation)
	require.Equal(t, "successor", next.Owner)
	require.Equal(t, token.FenceGeneration, next.FenceGeneration)
	require.NoError(t, db.Engine.VerifyToken(ctx, next, lifecycle.StageFenced))
	require.True(t, lifecycle.IsStaleLease(db.Engine.VerifyToken(ctx, token, lifecycle.StageFenced)))

	live := testfactory.ServingLease(ctx, t, db, nil)
	require.NoError(t, db.Serving.VerifyWriteLease(ctx, live))
	expired := testfactory.ServingLease(ctx, t, db, &testfactory.ServingLeaseOpts{CommunityID: live.CommunityID, Owner: "server-2", Expired: true})
	require.ErrorIs(t, db.Serving.VerifyWriteLease(ctx, expired), lifecycle.ErrAccessDenied)
}
