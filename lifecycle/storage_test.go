package lifecycle_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/testfactory"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// requestWithChunk is a request at stage whose destructive key list is one
// chunk: key "a" under its _meta prefix.
func (b *testBundle) requestWithChunk(t *testing.T, stage lifecycle.Stage) (*lifecycle.Request, lifecycle.LeaseToken) {
	t.Helper()
	community := testfactory.Community(t.Context(), t, b.DB, nil).ID
	meta := testfactory.Prefixes(community)[0]
	return testfactory.Request(t.Context(), t, b.DB, &testfactory.RequestOpts{CommunityID: community, Stage: stage,
		Chunks: []lifecycle.ManifestKeyChunk{{ChunkNo: 0, Prefix: meta, Keys: []string{meta + "a"}}}})
}

// chunkState summarizes what the storage calls may change: the chunk
// count, the stamped chunk count, whether the manifest is frozen and the
// count of chunk checkpoints of request.
func (b *testBundle) chunkState(t *testing.T, request uuid.UUID) string {
	t.Helper()
	var chunks, stamped, checkpoints int
	var frozen bool
	require.NoError(t, b.Pool.QueryRow(t.Context(), `SELECT
		(SELECT count(*) FROM community_deletion_manifest_keys WHERE request_id = $1),
		(SELECT count(deleted_at) FROM community_deletion_manifest_keys WHERE request_id = $1),
		(SELECT destructive_storage_manifest IS NOT NULL FROM community_deletion_requests WHERE id = $1),
		(SELECT count(*) FROM community_deletion_checkpoints WHERE request_id = $1 AND unit_key LIKE 'chunk:%')`, request).
		Scan(&chunks, &stamped, &frozen, &checkpoints))
	return fmt.Sprintf("chunks=%d stamped=%d frozen=%t checkpoints=%d", chunks, stamped, frozen, checkpoints)
}

// Port of manifest_key_chunks_bind_freeze_execution_and_cleanup.
func TestManifestKeyChunksBindFreezeExecutionAndCleanup(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	fenced, token := testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{Stage: lifecycle.StageFenced})
	community := fenced.CommunityID
	request := token.RequestID
	inventory := testfactory.EmptyStorage(community)

	meta := testfactory.Prefixes(community)[0]
	keys := []string{meta + strings.Repeat("a", 64) + ".json", meta + strings.Repeat("b", 64) + ".json"}
	require.NoError(t, b.Engine.AppendManifestChunk(ctx, token, lifecycle.ManifestKeyChunk{ChunkNo: 0, Prefix: meta, Keys: keys[:1]}))
	require.NoError(t, b.Engine.AppendManifestChunk(ctx, token, lifecycle.ManifestKeyChunk{ChunkNo: 1, Prefix: meta, Keys: keys[1:]}))
	require.NoError(t, b.Engine.AppendManifestChunk(ctx, token, lifecycle.ManifestKeyChunk{ChunkNo: 1, Prefix: meta, Keys: keys[1:]}),
		"appending the identical chunk again is a harmless retry")
	err := b.Engine.AppendManifestChunk(ctx, token, lifecycle.ManifestKeyChunk{ChunkNo: 1, Prefix: meta, Keys: []string{meta + "c"}})
	require.ErrorIs(t, err, lifecycle.ErrRefused, "a different chunk under an existing number")

	// A manifest whose digests do not cover the chunk stream does not freeze.
	require.ErrorIs(t, b.Engine.FreezeDestructiveManifest(ctx, token, inventory), lifecycle.ErrRefused)
	short := testfactory.EmptyStorage(community)
	short.Prefixes[0] = testfactory.Prefix(t, meta, keys[0])
	require.ErrorIs(t, b.Engine.FreezeDestructiveManifest(ctx, token, short), lifecycle.ErrRefused)
	require.Equal(t, "chunks=2 stamped=0 frozen=false checkpoints=0", b.chunkState(t, request))

	storage := testfactory.EmptyStorage(community)
	storage.Prefixes[0] = testfactory.Prefix(t, meta, keys...)
	require.NoError(t, b.Engine.FreezeDestructiveManifest(ctx, token, storage), "the manifest matching the chunks freezes")
	require.NoError(t, b.Engine.FreezeDestructiveManifest(ctx, token, storage), "freezing the same manifest again is idempotent")
	other := testfactory.EmptyStorage(community)
	other.Prefixes[0] = testfactory.Prefix(t, meta, keys...)
	other.Prefixes[0].TotalBytes = 99
	require.ErrorIs(t, b.Engine.FreezeDestructiveManifest(ctx, token, other), lifecycle.ErrRefused,
		"a different manifest never replaces the frozen one")
	var frozenAt *time.Time
	require.NoError(t, b.Pool.QueryRow(ctx, "SELECT destructive_storage_frozen_at FROM community_deletion_requests WHERE id = $1", request).Scan(&frozenAt))
	require.NotNil(t, frozenAt)

	// Frozen chunks are immutable working data.
	_, err = b.Pool.Exec(ctx, `UPDATE community_deletion_manifest_keys SET keys = '["x"]' WHERE request_id = $1 AND chunk_no = 0`, request)
	requirePgCode(t, err, "23000")
	_, err = b.Pool.Exec(ctx, "DELETE FROM community_deletion_manifest_keys WHERE request_id = $1", request)
	requirePgCode(t, err, "23000")
	require.ErrorIs(t, b.Engine.ClearManifestChunks(ctx, token), lifecycle.ErrRefused)
	err = b.Engine.AppendManifestChunk(ctx, token, lifecycle.ManifestKeyChunk{ChunkNo: 2, Prefix: meta, Keys: []string{meta + "z"}})
	require.ErrorIs(t, err, lifecycle.ErrRefused, "no chunk is appended after the freeze")
	requirePgCode(t, err, "23000")
	require.Equal(t, "chunks=2 stamped=0 frozen=true checkpoints=0", b.chunkState(t, request))

	// Chunks are stamped only once the request is drained.
	require.True(t, lifecycle.IsStaleLease(b.Engine.MarkChunkDeleted(ctx, token, 0, nil)))
	require.NoError(t, b.Engine.EnterDrained(ctx, token))

	first, err := b.Engine.NextPendingChunk(ctx, token)
	require.NoError(t, err)
	require.Equal(t, &lifecycle.ManifestKeyChunk{ChunkNo: 0, Prefix: meta, Keys: keys[:1]}, first)
	require.NoError(t, b.Engine.MarkChunkDeleted(ctx, token, 0, map[string]int{"deleted": 1}))
	err = b.Engine.MarkChunkDeleted(ctx, token, 0, nil)
	require.ErrorIs(t, err, lifecycle.ErrRefused, "a chunk stamp is one-way")
	require.Contains(t, err.Error(), "missing or already stamped")
	require.ErrorIs(t, b.Engine.MarkChunkDeleted(ctx, token, 7, nil), lifecycle.ErrRefused, "a missing chunk")

	total, deleted, err := b.Engine.ChunkProgress(ctx, request)
	require.NoError(t, err)
	require.Equal(t, [2]int64{2, 1}, [2]int64{total, deleted})

	second, err := b.Engine.NextPendingChunk(ctx, token)
	require.NoError(t, err)
	require.EqualValues(t, 1, second.ChunkNo, "a resumed executor continues at the first unstamped chunk")
	require.NoError(t, b.Engine.MarkChunkDeleted(ctx, token, 1, map[string]int{"deleted": 1}))
	none, err := b.Engine.NextPendingChunk(ctx, token)
	require.NoError(t, err)
	require.Nil(t, none)
	total, deleted, err = b.Engine.ChunkProgress(ctx, request)
	require.NoError(t, err)
	require.Equal(t, [2]int64{2, 2}, [2]int64{total, deleted})

	// Each stamp was checkpointed in its own transaction.
	var units []string
	var details []string
	rows, err := b.Pool.Query(ctx, `SELECT unit_key, detail::text FROM community_deletion_checkpoints
		WHERE request_id = $1 AND stage = 'drained' AND status = 'completed' ORDER BY unit_key`, request)
	require.NoError(t, err)
	for rows.Next() {
		var unit, detail string
		require.NoError(t, rows.Scan(&unit, &detail))
		units = append(units, unit)
		details = append(details, detail)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"chunk:0", "chunk:1"}, units)
	require.Equal(t, []string{`{"deleted": 1}`, `{"deleted": 1}`}, details)

	// A different request's progress is its own.
	total, deleted, err = b.Engine.ChunkProgress(ctx, uuid.New())
	require.NoError(t, err)
	require.Equal(t, [2]int64{0, 0}, [2]int64{total, deleted})

	// Terminal cleanup: the chunks are dropped once the request is
	// logically verified.
	require.NoError(t, b.Engine.EnterBindingsRemoved(ctx, token, map[string]int{"deleted_keys": 2}))
	_, err = b.Engine.EnterPostgresPurged(ctx, token, lifecycle.PurgeOptions{})
	require.NoError(t, err)
	require.NoError(t, b.Engine.EnterCachePurged(ctx, token, nil))
	require.NoError(t, b.Engine.CheckPostgresPurged(ctx, token))
	total, deleted, err = b.Engine.ChunkProgress(ctx, request)
	require.NoError(t, err)
	require.Equal(t, [2]int64{2, 2}, [2]int64{total, deleted}, "chunks stay until logical verification")
	require.NoError(t, b.Engine.EnterLogicallyVerified(ctx, token, nil))
	total, deleted, err = b.Engine.ChunkProgress(ctx, request)
	require.NoError(t, err)
	require.Equal(t, [2]int64{0, 0}, [2]int64{total, deleted})
}

// An empty tenant freezes with no chunks, and chunks of an interrupted
// enumeration can be cleared and rewritten until the freeze.
func TestManifestKeyChunksClearBeforeFreeze(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	fenced, token := testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{Stage: lifecycle.StageFenced})
	community := fenced.CommunityID
	repos := testfactory.Prefixes(community)[2]

	require.NoError(t, b.Engine.AppendManifestChunk(ctx, token, lifecycle.ManifestKeyChunk{ChunkNo: 0, Prefix: repos, Keys: []string{repos + "old"}}))
	require.NoError(t, b.Engine.ClearManifestChunks(ctx, token))
	require.Equal(t, "chunks=0 stamped=0 frozen=false checkpoints=0", b.chunkState(t, token.RequestID))
	require.NoError(t, b.Engine.AppendManifestChunk(ctx, token, lifecycle.ManifestKeyChunk{ChunkNo: 0, Prefix: repos, Keys: []string{repos + "new"}}))
	require.NoError(t, b.Engine.ClearManifestChunks(ctx, token))

	require.NoError(t, b.Engine.FreezeDestructiveManifest(ctx, token, testfactory.EmptyStorage(community)))
	require.ErrorIs(t, b.Engine.ClearManifestChunks(ctx, token), lifecycle.ErrRefused,
		"even without chunks, clearing after the freeze is refused")
	require.NoError(t, b.Engine.EnterDrained(ctx, token))
	next, err := b.Engine.NextPendingChunk(ctx, token)
	require.NoError(t, err)
	require.Nil(t, next)
}

// A chunk append that is in flight when the freeze starts is ordered by the
// request row lock: the freeze waits for it and then sees the new chunk.
func TestFreezeWaitsForConcurrentChunkAppend(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	fenced, token := b.requestWithChunk(t, lifecycle.StageFenced)
	community := fenced.CommunityID
	meta := testfactory.Prefixes(community)[0]

	// A late appender holds the chunk guard's FOR SHARE lock on the request.
	late, err := b.Pool.Begin(ctx)
	require.NoError(t, err)
	defer late.Rollback(context.Background())
	_, err = late.Exec(ctx, `INSERT INTO community_deletion_manifest_keys (request_id, chunk_no, prefix, keys)
		VALUES ($1, 1, $2, jsonb_build_array($2 || 'b'))`, token.RequestID, meta)
	require.NoError(t, err)

	storage := testfactory.EmptyStorage(community)
	storage.Prefixes[0] = testfactory.Prefix(t, meta, meta+"a")
	frozen := make(chan error, 1)
	go func() { frozen <- b.Engine.FreezeDestructiveManifest(ctx, token, storage) }()
	b.waitForLockWaiters(t, 1, rowLock)
	require.NoError(t, late.Commit(ctx))

	require.ErrorIs(t, <-frozen, lifecycle.ErrRefused, "the freeze saw the late chunk, which its manifest does not cover")
	storage.Prefixes[0] = testfactory.Prefix(t, meta, meta+"a", meta+"b")
	require.NoError(t, b.Engine.FreezeDestructiveManifest(ctx, token, storage))
}

// Every mutating storage call, and the pending-chunk read, refuses a token
// that no longer owns its request, before it changes anything, as every
// transition does (TestTransitionsRejectStaleTokensEverywhere), and refuses
// a token without a fence generation outright.
func TestStorageCallsRefuseStaleTokens(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// fenced is a fenced request with one appended chunk; drained has it
	// frozen and drained.
	fenced := func(t *testing.T) (*lifecycle.Request, lifecycle.LeaseToken) {
		return b.requestWithChunk(t, lifecycle.StageFenced)
	}
	drained := func(t *testing.T) (*lifecycle.Request, lifecycle.LeaseToken) {
		return b.requestWithChunk(t, lifecycle.StageDrained)
	}
	meta := func(r *lifecycle.Request) string { return testfactory.Prefixes(r.CommunityID)[0] }
	b.requireStaleTokensRefused(t, []tokenCall{
		{name: "freeze", request: fenced, fenceRequired: true, call: func(ctx context.Context, r *lifecycle.Request, token lifecycle.LeaseToken) error {
			storage := testfactory.EmptyStorage(r.CommunityID)
			storage.Prefixes[0] = testfactory.Prefix(t, meta(r), meta(r)+"a")
			return b.Engine.FreezeDestructiveManifest(ctx, token, storage)
		}},
		{name: "clear", request: fenced, fenceRequired: true, call: func(ctx context.Context, _ *lifecycle.Request, token lifecycle.LeaseToken) error {
			return b.Engine.ClearManifestChunks(ctx, token)
		}},
		{name: "append", request: fenced, fenceRequired: true, call: func(ctx context.Context, r *lifecycle.Request, token lifecycle.LeaseToken) error {
			return b.Engine.AppendManifestChunk(ctx, token, lifecycle.ManifestKeyChunk{ChunkNo: 1, Prefix: meta(r), Keys: []string{meta(r) + "b"}})
		}},
		{name: "mark deleted", request: drained, fenceRequired: true, call: func(ctx context.Context, _ *lifecycle.Request, token lifecycle.LeaseToken) error {
			return b.Engine.MarkChunkDeleted(ctx, token, 0, nil)
		}},
		{name: "next pending", request: drained, fenceRequired: true, call: func(ctx context.Context, _ *lifecycle.Request, token lifecycle.LeaseToken) error {
			_, err := b.Engine.NextPendingChunk(ctx, token)
			return err
		}},
	})
}

// Malformed chunks and sweeps are refused before any database work.
func TestStorageInputsAreValidatedFirst(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	fenced, token := testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{Stage: lifecycle.StageFenced})
	community := fenced.CommunityID
	meta := testfactory.Prefixes(community)[0]

	for name, chunk := range map[string]lifecycle.ManifestKeyChunk{
		"empty keys":         {ChunkNo: 0, Prefix: meta},
		"empty key":          {ChunkNo: 0, Prefix: meta, Keys: []string{""}},
		"empty prefix":       {ChunkNo: 0, Prefix: "", Keys: []string{"a"}},
		"negative number":    {ChunkNo: -1, Prefix: meta, Keys: []string{meta + "a"}},
		"descending":         {ChunkNo: 0, Prefix: meta, Keys: []string{meta + "b", meta + "a"}},
		"repeated":           {ChunkNo: 0, Prefix: meta, Keys: []string{meta + "a", meta + "a"}},
		"outside prefix":     {ChunkNo: 0, Prefix: meta, Keys: []string{meta + "a", "repos/" + community.String() + "/b"}},
		"newline":            {ChunkNo: 0, Prefix: meta, Keys: []string{meta + "a\nb"}},
		"invalid UTF-8 key":  {ChunkNo: 0, Prefix: meta, Keys: []string{meta + "\xff"}},
		"too many keys":      {ChunkNo: 0, Prefix: meta, Keys: manyKeys(meta, lifecycle.MaxManifestChunkKeys+1)},
		"invalid UTF-8 root": {ChunkNo: 0, Prefix: "\xff/", Keys: []string{"\xff/a"}},
	} {
		t.Run(name, func(t *testing.T) {
			require.ErrorIs(t, b.Engine.AppendManifestChunk(ctx, token, chunk), lifecycle.ErrInvalidInput)
		})
	}
	require.NoError(t, b.Engine.AppendManifestChunk(ctx, token, lifecycle.ManifestKeyChunk{ChunkNo: 0, Prefix: meta, Keys: manyKeys(meta, lifecycle.MaxManifestChunkKeys)}))

	malformed := testfactory.EmptyStorage(community)
	malformed.Version = 3
	require.ErrorIs(t, b.Engine.FreezeDestructiveManifest(ctx, token, malformed), lifecycle.ErrInvalidInput)
	require.ErrorIs(t, b.Engine.MarkChunkDeleted(ctx, token, -1, nil), lifecycle.ErrInvalidInput)
	require.ErrorIs(t, b.Engine.MarkChunkDeleted(ctx, token, 0, func() {}), lifecycle.ErrInvalidInput)
	require.Equal(t, "chunks=1 stamped=0 frozen=false checkpoints=0", b.chunkState(t, token.RequestID))
}

func manyKeys(prefix string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s%08d", prefix, i)
	}
	return keys
}

// Port of taxonomy_sweep_uses_database_completion_order.
func TestTaxonomySweepUsesDatabaseCompletionOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()

	none, err := b.Operator.LatestTaxonomySweep(ctx)
	require.NoError(t, err)
	require.Nil(t, none)

	var dbNow time.Time
	require.NoError(t, b.Pool.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&dbNow))
	skewed, err := b.Engine.RecordTaxonomySweep(ctx, lifecycle.TaxonomySweepParams{StartedAt: dbNow.Add(time.Minute), Listed: 1, Unknown: 0, Sample: nil, ObjectCap: 100})
	require.NoError(t, err)
	require.Equal(t, skewed.CompletedAt, skewed.StartedAt, "a start slightly in the future is clamped to the completion")
	require.Empty(t, skewed.UnknownKeySample)

	dirty, err := b.Engine.RecordTaxonomySweep(ctx, lifecycle.TaxonomySweepParams{StartedAt: dbNow.Add(-time.Hour), Listed: 2, Unknown: 1, Sample: []string{"unknown/key"}, ObjectCap: 100})
	require.NoError(t, err)
	require.True(t, dirty.CompletedAt.After(skewed.CompletedAt))
	require.True(t, dirty.StartedAt.Equal(dbNow.Add(-time.Hour)))

	latest, err := b.Operator.LatestTaxonomySweep(ctx)
	require.NoError(t, err)
	require.Equal(t, dirty, latest, "the sweep that completed last on the database clock wins, whatever its start")
	require.Equal(t, []string{"unknown/key"}, latest.UnknownKeySample)
	require.EqualValues(t, 2, latest.ListedObjects)
	require.EqualValues(t, 1, latest.UnknownObjectCount)
	require.EqualValues(t, 100, latest.ObjectCap)

	_, err = b.Engine.RecordTaxonomySweep(ctx, lifecycle.TaxonomySweepParams{StartedAt: dbNow.Add(time.Hour), Listed: 1, Unknown: 0, Sample: nil, ObjectCap: 100})
	require.ErrorIs(t, err, lifecycle.ErrRefused, "a start far in the database's future")
	latest, err = b.Operator.LatestTaxonomySweep(ctx)
	require.NoError(t, err)
	require.Equal(t, dirty.ID, latest.ID)
}

func TestRecordTaxonomySweepBoundsItsInputs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	now := time.Now()

	for name, call := range map[string]func() error{
		"listed overflow": func() error {
			_, err := b.Engine.RecordTaxonomySweep(ctx, lifecycle.TaxonomySweepParams{StartedAt: now, Listed: math.MaxInt64 + 1, Unknown: 0, Sample: nil, ObjectCap: 1})
			return err
		},
		"unknown overflow": func() error {
			_, err := b.Engine.RecordTaxonomySweep(ctx, lifecycle.TaxonomySweepParams{StartedAt: now, Listed: 1, Unknown: math.MaxUint64, Sample: nil, ObjectCap: 1})
			return err
		},
		"cap overflow": func() error {
			_, err := b.Engine.RecordTaxonomySweep(ctx, lifecycle.TaxonomySweepParams{StartedAt: now, Listed: 1, Unknown: 0, Sample: nil, ObjectCap: math.MaxUint64})
			return err
		},
		"unknown > listed": func() error {
			_, err := b.Engine.RecordTaxonomySweep(ctx, lifecycle.TaxonomySweepParams{StartedAt: now, Listed: 1, Unknown: 2, Sample: nil, ObjectCap: 1})
			return err
		},
		"sample > unknown": func() error {
			_, err := b.Engine.RecordTaxonomySweep(ctx, lifecycle.TaxonomySweepParams{StartedAt: now, Listed: 5, Unknown: 1, Sample: []string{"a", "b"}, ObjectCap: 1})
			return err
		},
		"zero start": func() error {
			_, err := b.Engine.RecordTaxonomySweep(ctx, lifecycle.TaxonomySweepParams{StartedAt: time.Time{}, Listed: 1, Unknown: 0, Sample: nil, ObjectCap: 1})
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			require.ErrorIs(t, call(), lifecycle.ErrInvalidInput)
		})
	}

	sample := make([]string, 250)
	for i := range sample {
		sample[i] = fmt.Sprintf("unknown/%03d", i)
	}
	sample[0] = "unknown/" + strings.Repeat("k", 5000)
	sweep, err := b.Engine.RecordTaxonomySweep(ctx, lifecycle.TaxonomySweepParams{StartedAt: now, Listed: math.MaxInt64, Unknown: 1000, Sample: sample, ObjectCap: 0})
	require.NoError(t, err)
	require.Len(t, sweep.UnknownKeySample, lifecycle.MaxTaxonomySampleKeys, "the sample is bounded")
	require.Len(t, sweep.UnknownKeySample[0], lifecycle.MaxTaxonomySampleKeyBytes, "each sampled key is bounded")
	require.Equal(t, sample[1:lifecycle.MaxTaxonomySampleKeys], sweep.UnknownKeySample[1:])
	require.EqualValues(t, math.MaxInt64, sweep.ListedObjects)
	stored, err := b.Operator.LatestTaxonomySweep(ctx)
	require.NoError(t, err)
	require.Equal(t, sweep, stored)
}
