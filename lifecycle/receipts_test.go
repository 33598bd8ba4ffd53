package lifecycle_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/fixture"
	"github.com/tombstoneworks/communitydeletion/internal/testfactory"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
	"github.com/tombstoneworks/communitydeletion/receipt"
)

// signedEngine is an Engine over the test executor login that signs its
// receipts with a new key.
func signedEngine(t *testing.T, b *testBundle) (*lifecycle.Engine, ed25519.PublicKey) {
	t.Helper()
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	engine, err := lifecycle.NewEngine(t.Context(), fixture.RolePool(t, b.URL, fixture.RoleExecutor), &lifecycle.Opts{ReceiptKey: key})
	require.NoError(t, err)
	return engine, pub
}

func receiptCount(t *testing.T, b *testBundle) int {
	t.Helper()
	var n int
	require.NoError(t, b.Pool.QueryRow(t.Context(), "SELECT count(*) FROM community_deletion_receipts").Scan(&n))
	return n
}

// Completing a deletion writes its receipt in the same transaction: signed
// with the Engine's key, first in the chain, stating what the database
// recorded (the tombstone, both commitments, rows per table with its mode,
// objects per prefix, the operators and their logins, every stage time on
// the database clock, the schema version), and verifiable offline.
func TestReceiptWrittenWithCompletion(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	engine, pub := signedEngine(t, b)
	community := testfactory.Community(ctx, t, b.DB, &testfactory.CommunityOpts{
		Rows: testfactory.Rows{Members: 3, Channels: 2, Messages: 4, AuditEvents: 2},
	})
	meta := testfactory.Prefixes(community.ID)[0]
	request, token := testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{
		CommunityID: community.ID, Stage: lifecycle.StageLogicallyVerified, Claimed: true,
		Chunks: []lifecycle.ManifestKeyChunk{{ChunkNo: 0, Prefix: meta, Keys: []string{meta + "a", meta + "b"}}},
	})
	_, err := b.Operator.Receipt(ctx, request.ID)
	require.ErrorIs(t, err, lifecycle.ErrNotFound, "no receipt before completion")

	require.NoError(t, engine.EnterRetentionPending(ctx, token, nil))
	env, err := b.Operator.Receipt(ctx, request.ID)
	require.NoError(t, err)
	rep, err := receipt.Verify([]receipt.Envelope{env}, pub, receipt.VerifyOpts{})
	require.NoError(t, err)
	require.Equal(t, 1, rep.Signed)

	r, err := env.Receipt()
	require.NoError(t, err)
	done, err := b.Operator.Get(ctx, request.ID)
	require.NoError(t, err)
	require.Equal(t, int64(1), r.Sequence)
	require.Empty(t, r.PreviousHash)
	require.Equal(t, receipt.KeyID(pub), r.Signer)
	require.Equal(t, request.ID, r.RequestID)
	require.Equal(t, receipt.Tenant{ID: community.ID, Host: community.Host, DeletedAt: r.Community.DeletedAt}, r.Community)
	require.Equal(t, done.InventoryDigest, r.InventoryDigest)
	manifestDigest, err := done.DestructiveStorage.Digest()
	require.NoError(t, err)
	require.Equal(t, manifestDigest, r.ManifestDigest)
	require.Len(t, r.ManifestDigest, 64)
	_, err = hex.DecodeString(r.ManifestDigest)
	require.NoError(t, err)

	tables := map[string]receipt.Table{}
	for _, table := range r.Tables {
		tables[table.Table] = table
	}
	require.Equal(t, receipt.Table{Table: "fixture_members", Mode: receipt.ModeDelete, Rows: 3}, tables["fixture_members"])
	require.Equal(t, receipt.Table{Table: "fixture_messages", Mode: receipt.ModeDelete, Rows: 4}, tables["fixture_messages"])
	require.Equal(t, receipt.Table{Table: "fixture_audit_events", Mode: receipt.ModeNullify, Rows: 2}, tables["fixture_audit_events"])
	require.Contains(t, r.Objects, receipt.Objects{Prefix: meta, Deleted: 2})
	require.Len(t, r.Objects, len(done.DestructiveStorage.Prefixes))

	require.Equal(t, receipt.Operator{Name: "requester", Login: string(fixture.RoleOperator)}, r.SubmittedBy)
	require.Equal(t, receipt.Operator{Name: "approver", Login: string(fixture.RoleApprover)}, r.ApprovedBy)
	require.False(t, r.OperatorsShareRole)
	var stages []string
	for _, s := range r.Stages {
		stages = append(stages, s.Stage)
	}
	require.Equal(t, receipt.StageOrder(), stages, "every stage is timed")
	at, _ := r.Stage(receipt.StageRetentionPending)
	require.True(t, at.Equal(*done.CompletedAt))
	at, _ = r.Stage(receipt.StageSubmitted)
	require.True(t, at.Equal(done.CreatedAt))
	var version int64
	require.NoError(t, b.Pool.QueryRow(ctx, "SELECT max(version_id) FROM community_deletion_schema_migrations WHERE is_applied").Scan(&version))
	require.Equal(t, version, r.SchemaVersion)
	require.GreaterOrEqual(t, r.SchemaVersion, int64(16))
	require.Equal(t, receipt.StorePostgres, r.Absence[len(r.Absence)-1].Store)

	// A completed request takes no more steps, and keeps one receipt.
	require.True(t, lifecycle.IsStaleLease(engine.EnterRetentionPending(ctx, token, nil)))
	require.Equal(t, 1, receiptCount(t, b))
}

// Every completion yields exactly one receipt, chained after the one
// before: an unsigned Engine's, which says so and verifies only when
// unsigned receipts are allowed, then a signed Engine's. After a signed
// receipt an unsigned one is refused. Two completions racing queue on the
// chain head and both commit, as receipts 2 and 3 or 3 and 2.
func TestReceiptChainAcrossCompletions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	signed, pub := signedEngine(t, b)

	first, token := testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{Stage: lifecycle.StageLogicallyVerified, Claimed: true})
	require.NoError(t, b.Engine.EnterRetentionPending(ctx, token, nil), "the factory's Engine has no key")
	second, token := testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{Stage: lifecycle.StageLogicallyVerified, Claimed: true})
	require.NoError(t, signed.EnterRetentionPending(ctx, token, nil))

	envs, err := b.Operator.Receipts(ctx, lifecycle.ReceiptsParams{})
	require.NoError(t, err)
	require.Len(t, envs, 2)
	one, err := envs[0].Receipt()
	require.NoError(t, err)
	two, err := envs[1].Receipt()
	require.NoError(t, err)
	require.Equal(t, first.ID, one.RequestID)
	require.Equal(t, second.ID, two.RequestID)
	require.Equal(t, int64(2), two.Sequence)
	require.Equal(t, envs[0].Hash(), two.PreviousHash)
	require.Equal(t, receipt.SignerUnsigned, one.Signer)
	require.Empty(t, envs[0].Signature)
	require.Equal(t, receipt.KeyID(pub), two.Signer)

	_, err = receipt.Verify(envs, pub, receipt.VerifyOpts{})
	require.ErrorIs(t, err, receipt.ErrUnsigned)
	var ve *receipt.VerifyError
	require.ErrorAs(t, err, &ve)
	require.Equal(t, int64(1), ve.Sequence)
	rep, err := receipt.Verify(envs, pub, receipt.VerifyOpts{AllowUnsigned: true})
	require.NoError(t, err)
	require.Equal(t, 1, rep.Signed)
	require.Equal(t, 1, rep.Unsigned)

	page, err := b.Operator.Receipts(ctx, lifecycle.ReceiptsParams{After: 1, Limit: 1})
	require.NoError(t, err)
	require.Len(t, page, 1)
	require.Equal(t, envs[1].Body, page[0].Body)

	// An unsigned receipt after the signed one is refused, and the
	// completion with it: the deletion stays logically verified.
	third, token := testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{Stage: lifecycle.StageLogicallyVerified, Claimed: true})
	err = b.Engine.EnterRetentionPending(ctx, token, nil)
	require.ErrorIs(t, err, lifecycle.ErrRefused)
	require.ErrorContains(t, err, "but the chain is signed by key "+receipt.KeyID(pub)+" up to receipt 2")
	got, err := b.Operator.Get(ctx, third.ID)
	require.NoError(t, err)
	require.Equal(t, lifecycle.StageLogicallyVerified, got.Stage)

	// Two completions at once.
	var tokens []lifecycle.LeaseToken
	for range 2 {
		_, token := testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{Stage: lifecycle.StageLogicallyVerified, Claimed: true})
		tokens = append(tokens, token)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(tokens))
	for i, token := range tokens {
		wg.Go(func() { errs[i] = signed.EnterRetentionPending(ctx, token, nil) })
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	envs, err = b.Operator.Receipts(ctx, lifecycle.ReceiptsParams{})
	require.NoError(t, err)
	require.Len(t, envs, 4)
	_, err = receipt.Verify(envs, pub, receipt.VerifyOpts{AllowUnsigned: true})
	require.NoError(t, err)
	require.Equal(t, 4, receiptCount(t, b))
}

// A receipt key that is not an Ed25519 private key is refused when the
// Engine is made.
func TestReceiptKeyMustBeEd25519(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, err := lifecycle.NewEngine(t.Context(), fixture.RolePool(t, b.URL, fixture.RoleExecutor), &lifecycle.Opts{ReceiptKey: make([]byte, 12)})
	require.ErrorIs(t, err, lifecycle.ErrInvalidInput)
}
