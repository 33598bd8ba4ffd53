package executor_test

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/executor"
	"github.com/tombstoneworks/communitydeletion/internal/fixture"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
	"github.com/tombstoneworks/communitydeletion/receipt"
)

// absenceOf returns the receipt's absence proof per store.
func absenceOf(t *testing.T, cfg executor.Config, id [16]byte) map[string]receipt.Absence {
	t.Helper()
	env, err := cfg.Engine.Receipt(t.Context(), id)
	require.NoError(t, err)
	r, err := env.Receipt()
	require.NoError(t, err)
	require.Equal(t, receipt.Format, r.Format)
	out := map[string]receipt.Absence{}
	for _, a := range r.Absence {
		out[a.Store] = a
	}
	return out
}

// A receipt states per store what was checked and how: the file store's
// prefixes listed empty and the registered delete tables are verified; the
// in-process cache lists nothing of a deployment's cache, so the receipt
// says it was not checked, and why, never "verified".
func TestReceiptSaysTheMemoryCacheWasNotChecked(t *testing.T) {
	t.Parallel()
	b := setup(t)
	target := b.createCommunity(t, 1)
	id := b.approve(t, target)
	cfg := b.config("executor-1")
	claimed, err := b.runner(t, cfg).RunRequest(t.Context(), id)
	require.NoError(t, err)
	require.True(t, claimed)

	absence := absenceOf(t, cfg, id)
	require.Len(t, absence, 3)
	cache := absence[receipt.StoreCache]
	require.Equal(t, receipt.StatusNotChecked, cache.Status)
	require.False(t, cache.Verified())
	require.Equal(t, receipt.KindMemory, cache.Kind)
	require.Empty(t, cache.Checked)
	require.Contains(t, cache.Detail, "the in-process cache (memory:) lists nothing")

	objects := absence[receipt.StoreObjects]
	require.Equal(t, receipt.StatusVerified, objects.Status)
	require.Equal(t, "file", objects.Kind)
	require.Equal(t, fixture.ObjectPrefixes(target.id), objects.Checked)

	postgres := absence[receipt.StorePostgres]
	require.Equal(t, receipt.StatusVerified, postgres.Status)
	require.Equal(t, lifecycle.KindPostgreSQL, postgres.Kind)
	require.Contains(t, postgres.Checked, "fixture_messages")
	require.NotContains(t, postgres.Checked, "fixture_audit_events", "a nullify table is cleared, not proven empty")
}

// A cache that names no key patterns cannot list a declared cache layout:
// with cache templates declared, the runner refuses to run before it claims
// anything, and the request stays approved.
func TestReceiptLayoutTheCacheCannotCheckIsRefusedBeforeTheClaim(t *testing.T) {
	t.Parallel()
	b := setup(t)
	target := b.createCommunity(t, 1)
	id := b.approve(t, target)
	_, err := b.Pool.Exec(t.Context(), `INSERT INTO community_deletion.community_deletion_storage_layout (kind, template, reason)
		VALUES ('cache', 'feed:{tenant}:*', 'test: feeds')`)
	require.NoError(t, err)
	runner := b.runner(t, b.config("executor-1"))
	claimed, err := runner.RunRequest(t.Context(), id)
	require.False(t, claimed)
	require.ErrorIs(t, err, executor.ErrLayoutMismatch)
	require.ErrorContains(t, err, `the cache (the in-process cache memory:) names no key patterns, so it cannot list the declared cache templates ["feed:{tenant}:*"]`)
	require.ErrorIs(t, runner.Run(t.Context()), executor.ErrLayoutMismatch, "Run refuses to start")
	got, err := b.Operator.Get(t.Context(), id)
	require.NoError(t, err)
	require.Equal(t, lifecycle.StageApproved, got.Stage)
}

// A cache layout declared while a deletion runs, after the runner checked
// the layout: the verification cannot cover it, so the lifecycle refuses to
// record the deletion verified and the runner blocks it with the reason;
// it never completes with a receipt claiming the cache.
func TestReceiptLayoutDeclaredMidDeletionBlocksVerification(t *testing.T) {
	t.Parallel()
	b := setup(t)
	target := b.createCommunity(t, 1)
	id := b.approve(t, target)
	cfg := b.config("executor-1")
	cfg.Progress = func(ev executor.Event) {
		if strings.HasPrefix(ev.Message, "cache purged") {
			_, err := b.Pool.Exec(t.Context(), `INSERT INTO community_deletion.community_deletion_storage_layout (kind, template, reason)
				VALUES ('cache', 'feed:{tenant}:*', 'test: feeds')`)
			require.NoError(t, err)
		}
	}
	claimed, err := b.runner(t, cfg).RunRequest(t.Context(), id)
	require.True(t, claimed)
	require.ErrorIs(t, err, executor.ErrBlocked)
	got, err := b.Operator.Get(t.Context(), id)
	require.NoError(t, err)
	require.Equal(t, lifecycle.StageCachePurged, got.Stage)
	require.True(t, got.Blocked())
	require.Contains(t, got.BlockedReason, `the deployment declares the cache templates ["feed:{tenant}:*"], but the in-process cache (memory:) lists nothing`)
	_, err = cfg.Engine.Receipt(t.Context(), id)
	require.ErrorIs(t, err, lifecycle.ErrNotFound)
}

// With a receipt key registered, a runner without it, or with another,
// refuses before it claims anything; one with the registered key runs and
// signs. A runner without any key where none is registered runs, and its
// log says, once and at Warn, that its receipts are unsigned.
func TestReceiptKeyRegisteredIsRequiredToRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	target := b.createCommunity(t, 1)
	id := b.approve(t, target)
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)
	_, other, err := ed25519.GenerateKey(rand.Reader)
	require.NoError(t, err)

	var log bytes.Buffer
	cfg := b.config("executor-1")
	cfg.Logger = slog.New(slog.NewJSONHandler(&log, nil))
	unsigned := b.runner(t, cfg)
	require.NoError(t, unsigned.CheckReceiptKey(t.Context()))
	require.NoError(t, unsigned.CheckReceiptKey(t.Context()))
	require.Equal(t, 1, strings.Count(log.String(), `"level":"WARN","msg":"receipts are unsigned: this executor has no signing key and the deployment registered none`), log.String())

	_, err = b.Pool.Exec(t.Context(), "INSERT INTO community_deletion.community_deletion_receipt_keys (action, public_key, reason) VALUES ('sign', $1, 'test')",
		base64.StdEncoding.EncodeToString(pub))
	require.NoError(t, err)
	for name, engineKey := range map[string]ed25519.PrivateKey{"no key": nil, "another key": other} {
		t.Run(name, func(t *testing.T) {
			engine, err := lifecycle.NewEngine(t.Context(), fixture.RolePool(t, b.URL, fixture.RoleExecutor), &lifecycle.Opts{ReceiptKey: engineKey})
			require.NoError(t, err)
			cfg := b.config("executor-" + name)
			cfg.Engine = engine
			runner := b.runner(t, cfg)
			claimed, err := runner.RunRequest(t.Context(), id)
			require.False(t, claimed)
			require.ErrorIs(t, err, executor.ErrReceiptKey)
			require.ErrorIs(t, err, lifecycle.ErrRefused)
			require.ErrorContains(t, err, "the deployment signs its receipts with key "+receipt.KeyID(pub))
			require.ErrorIs(t, runner.Run(t.Context()), executor.ErrReceiptKey, "Run refuses to start")
			got, err := b.Operator.Get(t.Context(), id)
			require.NoError(t, err)
			require.Equal(t, lifecycle.StageApproved, got.Stage)
		})
	}
	engine, err := lifecycle.NewEngine(t.Context(), fixture.RolePool(t, b.URL, fixture.RoleExecutor), &lifecycle.Opts{ReceiptKey: key})
	require.NoError(t, err)
	cfg.Engine = engine
	claimed, err := b.runner(t, cfg).RunRequest(t.Context(), id)
	require.NoError(t, err)
	require.True(t, claimed)
	env, err := engine.Receipt(t.Context(), id)
	require.NoError(t, err)
	_, err = receipt.Verify([]receipt.Envelope{env}, pub, receipt.VerifyOpts{})
	require.NoError(t, err)
}
