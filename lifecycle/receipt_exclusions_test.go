package lifecycle_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/testfactory"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
	"github.com/tombstoneworks/communitydeletion/receipt"
)

// A receipt lists every table excluded at some time during its deletion,
// with who excluded it, when and why, and when a later event ended the
// exclusion: one excluded before the request and still in force, one
// excluded and lifted while the deletion ran. One excluded and lifted
// before the request is not listed. The receipt verifies.
func TestReceiptListsTheExclusionsOfItsDeletion(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	for _, sql := range []string{
		"CREATE TABLE public.partner_notes (id bigint PRIMARY KEY, community_id uuid)",
		"CREATE TABLE public.old_drafts (id bigint PRIMARY KEY, community_id uuid)",
		"SELECT community_deletion.exclude_table('public.partner_notes', 'notes of the partner system')",
		"SELECT community_deletion.exclude_table('public.old_drafts', 'drafts outlive their author')",
		"SELECT community_deletion.include_table('public.old_drafts', 'they are tenant data after all')",
		"DROP TABLE public.old_drafts",
	} {
		require.NoError(t, b.exec(t, sql), sql)
	}
	engine, pub := signedEngine(t, b)
	community := testfactory.Community(ctx, t, b.DB, &testfactory.CommunityOpts{Rows: testfactory.Rows{Members: 1}})
	request, token := testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{
		CommunityID: community.ID, Stage: lifecycle.StageLogicallyVerified, Claimed: true,
	})
	for _, sql := range []string{
		"CREATE TABLE public.legal_hold (id bigint PRIMARY KEY, community_id uuid)",
		"SELECT community_deletion.exclude_table('public.legal_hold', 'held for the court')",
		"SELECT community_deletion.include_table('public.legal_hold', 'the hold ended')",
		"DROP TABLE public.legal_hold",
	} {
		require.NoError(t, b.exec(t, sql), sql)
	}
	require.NoError(t, engine.EnterRetentionPending(ctx, token, nil))

	env, err := b.Operator.Receipt(ctx, request.ID)
	require.NoError(t, err)
	_, err = receipt.Verify([]receipt.Envelope{env}, pub, receipt.VerifyOpts{})
	require.NoError(t, err)
	r, err := env.Receipt()
	require.NoError(t, err)
	require.Len(t, r.Excluded, 2)
	hold, notes := r.Excluded[0], r.Excluded[1]
	require.Equal(t, "public.legal_hold", hold.Table)
	require.Equal(t, "held for the court", hold.Reason)
	require.False(t, hold.Until.IsZero(), "lifted during the deletion")
	require.False(t, hold.Until.Before(hold.ExcludedAt))
	require.Equal(t, "public.partner_notes", notes.Table)
	require.Equal(t, "notes of the partner system", notes.Reason)
	require.Equal(t, "postgres", notes.ExcludedBy)
	require.True(t, notes.Until.IsZero(), "still in force")
	require.True(t, notes.ExcludedAt.Before(request.CreatedAt))
}
