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

	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// emptyPrefix is the summary of a prefix with no objects.
func emptyPrefix(prefix string) lifecycle.PrefixManifest {
	return lifecycle.PrefixManifest{Prefix: prefix, KeysDigest: lifecycle.EmptyKeysDigest}
}

// emptyStorage is a storage manifest of the community's three tenant
// prefixes, all empty.
func emptyStorage(community uuid.UUID) lifecycle.StorageManifest {
	return lifecycle.StorageManifest{
		Version: lifecycle.StorageManifestVersion,
		Prefixes: []lifecycle.PrefixManifest{
			emptyPrefix(fmt.Sprintf("_meta/%s/", community)),
			emptyPrefix(fmt.Sprintf("_uploads/%s/", community)),
			emptyPrefix(fmt.Sprintf("repos/%s/", community)),
		},
	}
}

// summarize returns the prefix summary of keys, each one byte long.
func summarize(t *testing.T, prefix string, keys ...string) lifecycle.PrefixManifest {
	t.Helper()
	var digest lifecycle.KeyStreamDigest
	for _, key := range keys {
		require.NoError(t, digest.Fold(key))
	}
	hexDigest, count := digest.Sum()
	return lifecycle.PrefixManifest{Prefix: prefix, ObjectCount: count, TotalBytes: count, KeysDigest: hexDigest}
}

// sqlChunkState summarizes what the storage calls may change: the chunk
// count, the stamped chunk count, whether the manifest is frozen and the
// count of chunk checkpoints of request.
func (b *testBundle) sqlChunkState(t *testing.T, request uuid.UUID) string {
	t.Helper()
	var chunks, stamped, checkpoints int
	var frozen bool
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT
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
	community, token := b.storeFencedToken(t)
	request := token.RequestID
	inventory := emptyStorage(community)

	meta := fmt.Sprintf("_meta/%s/", community)
	keys := []string{meta + strings.Repeat("a", 64) + ".json", meta + strings.Repeat("b", 64) + ".json"}
	require.NoError(t, b.engine.AppendManifestChunk(ctx, token, lifecycle.ManifestKeyChunk{ChunkNo: 0, Prefix: meta, Keys: keys[:1]}))
	require.NoError(t, b.engine.AppendManifestChunk(ctx, token, lifecycle.ManifestKeyChunk{ChunkNo: 1, Prefix: meta, Keys: keys[1:]}))
	require.NoError(t, b.engine.AppendManifestChunk(ctx, token, lifecycle.ManifestKeyChunk{ChunkNo: 1, Prefix: meta, Keys: keys[1:]}),
		"appending the identical chunk again is a harmless retry")
	err := b.engine.AppendManifestChunk(ctx, token, lifecycle.ManifestKeyChunk{ChunkNo: 1, Prefix: meta, Keys: []string{meta + "c"}})
	require.ErrorIs(t, err, lifecycle.ErrRefused, "a different chunk under an existing number")

	// A manifest whose digests do not cover the chunk stream does not freeze.
	require.ErrorIs(t, b.engine.FreezeDestructiveManifest(ctx, token, inventory), lifecycle.ErrRefused)
	short := emptyStorage(community)
	short.Prefixes[0] = summarize(t, meta, keys[0])
	require.ErrorIs(t, b.engine.FreezeDestructiveManifest(ctx, token, short), lifecycle.ErrRefused)
	require.Equal(t, "chunks=2 stamped=0 frozen=false checkpoints=0", b.sqlChunkState(t, request))

	storage := emptyStorage(community)
	storage.Prefixes[0] = summarize(t, meta, keys...)
	require.NoError(t, b.engine.FreezeDestructiveManifest(ctx, token, storage), "the manifest matching the chunks freezes")
	require.NoError(t, b.engine.FreezeDestructiveManifest(ctx, token, storage), "freezing the same manifest again is idempotent")
	other := emptyStorage(community)
	other.Prefixes[0] = summarize(t, meta, keys...)
	other.Prefixes[0].TotalBytes = 99
	require.ErrorIs(t, b.engine.FreezeDestructiveManifest(ctx, token, other), lifecycle.ErrRefused,
		"a different manifest never replaces the frozen one")
	var frozenAt *time.Time
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT destructive_storage_frozen_at FROM community_deletion_requests WHERE id = $1", request).Scan(&frozenAt))
	require.NotNil(t, frozenAt)

	// Frozen chunks are immutable working data.
	_, err = b.pool.Exec(ctx, `UPDATE community_deletion_manifest_keys SET keys = '["x"]' WHERE request_id = $1 AND chunk_no = 0`, request)
	requirePgCode(t, err, "23000")
	_, err = b.pool.Exec(ctx, "DELETE FROM community_deletion_manifest_keys WHERE request_id = $1", request)
	requirePgCode(t, err, "23000")
	require.ErrorIs(t, b.engine.ClearManifestChunks(ctx, token), lifecycle.ErrRefused)
	err = b.engine.AppendManifestChunk(ctx, token, lifecycle.ManifestKeyChunk{ChunkNo: 2, Prefix: meta, Keys: []string{meta + "z"}})
	require.ErrorIs(t, err, lifecycle.ErrRefused, "no chunk is appended after the freeze")
	requirePgCode(t, err, "23000")
	require.Equal(t, "chunks=2 stamped=0 frozen=true checkpoints=0", b.sqlChunkState(t, request))

	// Chunks are stamped only once the request is drained.
	require.True(t, lifecycle.IsStaleLease(b.engine.MarkChunkDeleted(ctx, token, 0, nil)))
	require.NoError(t, b.engine.EnterDrained(ctx, token))

	first, err := b.engine.NextPendingChunk(ctx, token)
	require.NoError(t, err)
	require.Equal(t, &lifecycle.ManifestKeyChunk{ChunkNo: 0, Prefix: meta, Keys: keys[:1]}, first)
	require.NoError(t, b.engine.MarkChunkDeleted(ctx, token, 0, map[string]int{"deleted": 1}))
	err = b.engine.MarkChunkDeleted(ctx, token, 0, nil)
	require.ErrorIs(t, err, lifecycle.ErrRefused, "a chunk stamp is one-way")
	require.Contains(t, err.Error(), "missing or already stamped")
	require.ErrorIs(t, b.engine.MarkChunkDeleted(ctx, token, 7, nil), lifecycle.ErrRefused, "a missing chunk")

	total, deleted, err := b.engine.ChunkProgress(ctx, request)
	require.NoError(t, err)
	require.Equal(t, [2]int64{2, 1}, [2]int64{total, deleted})

	second, err := b.engine.NextPendingChunk(ctx, token)
	require.NoError(t, err)
	require.EqualValues(t, 1, second.ChunkNo, "a resumed executor continues at the first unstamped chunk")
	require.NoError(t, b.engine.MarkChunkDeleted(ctx, token, 1, map[string]int{"deleted": 1}))
	none, err := b.engine.NextPendingChunk(ctx, token)
	require.NoError(t, err)
	require.Nil(t, none)
	total, deleted, err = b.engine.ChunkProgress(ctx, request)
	require.NoError(t, err)
	require.Equal(t, [2]int64{2, 2}, [2]int64{total, deleted})

	// Each stamp was checkpointed in its own transaction.
	var units []string
	var details []string
	rows, err := b.pool.Query(ctx, `SELECT unit_key, detail::text FROM community_deletion_checkpoints
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
	total, deleted, err = b.engine.ChunkProgress(ctx, uuid.New())
	require.NoError(t, err)
	require.Equal(t, [2]int64{0, 0}, [2]int64{total, deleted})

	// Terminal cleanup: the chunks are dropped once the request is
	// logically verified.
	require.NoError(t, b.engine.EnterBindingsRemoved(ctx, token, map[string]int{"deleted_keys": 2}))
	b.purgeToTombstone(t, token)
	require.NoError(t, b.engine.EnterCachePurged(ctx, token, nil))
	require.NoError(t, b.engine.CheckPostgresPurged(ctx, token))
	total, deleted, err = b.engine.ChunkProgress(ctx, request)
	require.NoError(t, err)
	require.Equal(t, [2]int64{2, 2}, [2]int64{total, deleted}, "chunks stay until logical verification")
	require.NoError(t, b.engine.EnterLogicallyVerified(ctx, token, nil))
	total, deleted, err = b.engine.ChunkProgress(ctx, request)
	require.NoError(t, err)
	require.Equal(t, [2]int64{0, 0}, [2]int64{total, deleted})
}

// An empty tenant freezes with no chunks, and chunks of an interrupted
// enumeration can be cleared and rewritten until the freeze.
func TestManifestKeyChunksClearBeforeFreeze(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	community, token := b.storeFencedToken(t)
	repos := fmt.Sprintf("repos/%s/", community)

	require.NoError(t, b.engine.AppendManifestChunk(ctx, token, lifecycle.ManifestKeyChunk{ChunkNo: 0, Prefix: repos, Keys: []string{repos + "old"}}))
	require.NoError(t, b.engine.ClearManifestChunks(ctx, token))
	require.Equal(t, "chunks=0 stamped=0 frozen=false checkpoints=0", b.sqlChunkState(t, token.RequestID))
	require.NoError(t, b.engine.AppendManifestChunk(ctx, token, lifecycle.ManifestKeyChunk{ChunkNo: 0, Prefix: repos, Keys: []string{repos + "new"}}))
	require.NoError(t, b.engine.ClearManifestChunks(ctx, token))

	require.NoError(t, b.engine.FreezeDestructiveManifest(ctx, token, emptyStorage(community)))
	require.ErrorIs(t, b.engine.ClearManifestChunks(ctx, token), lifecycle.ErrRefused,
		"even without chunks, clearing after the freeze is refused")
	require.NoError(t, b.engine.EnterDrained(ctx, token))
	next, err := b.engine.NextPendingChunk(ctx, token)
	require.NoError(t, err)
	require.Nil(t, next)
}

// A chunk append that is in flight when the freeze starts is ordered by the
// request row lock: the freeze waits for it and then sees the new chunk.
func TestFreezeWaitsForConcurrentChunkAppend(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	community, token := b.storeFencedToken(t)
	meta := fmt.Sprintf("_meta/%s/", community)
	require.NoError(t, b.engine.AppendManifestChunk(ctx, token, lifecycle.ManifestKeyChunk{ChunkNo: 0, Prefix: meta, Keys: []string{meta + "a"}}))

	// A late appender holds the chunk guard's FOR SHARE lock on the request.
	late, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer late.Rollback(context.Background())
	_, err = late.Exec(ctx, `INSERT INTO community_deletion_manifest_keys (request_id, chunk_no, prefix, keys)
		VALUES ($1, 1, $2, jsonb_build_array($2 || 'b'))`, token.RequestID, meta)
	require.NoError(t, err)

	storage := emptyStorage(community)
	storage.Prefixes[0] = summarize(t, meta, meta+"a")
	frozen := make(chan error, 1)
	go func() { frozen <- b.engine.FreezeDestructiveManifest(ctx, token, storage) }()
	b.waitForRowLockWaiter(t)
	require.NoError(t, late.Commit(ctx))

	require.ErrorIs(t, <-frozen, lifecycle.ErrRefused, "the freeze saw the late chunk, which its manifest does not cover")
	storage.Prefixes[0] = summarize(t, meta, meta+"a", meta+"b")
	require.NoError(t, b.engine.FreezeDestructiveManifest(ctx, token, storage))
}

// waitForRowLockWaiter blocks until some backend of the test database
// waits for a row or transaction lock.
func (b *testBundle) waitForRowLockWaiter(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for {
		var waiting bool
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT EXISTS (
			SELECT 1 FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'
			  AND wait_event IN ('transactionid', 'tuple'))`).Scan(&waiting))
		if waiting {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal("no backend started waiting for a row lock")
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// Every mutating storage call, and the pending-chunk read, refuses a token
// that no longer owns its request, before it changes anything.
func TestStorageCallsRefuseStaleTokens(t *testing.T) {
	t.Parallel()
	b := setup(t)

	type fixture struct {
		community uuid.UUID
		token     lifecycle.LeaseToken
		meta      string
	}
	// fenced is a fenced request with one appended chunk; drained has it
	// frozen and drained.
	fenced := func(t *testing.T) fixture {
		community, token := b.storeFencedToken(t)
		meta := fmt.Sprintf("_meta/%s/", community)
		require.NoError(t, b.engine.AppendManifestChunk(t.Context(), token, lifecycle.ManifestKeyChunk{ChunkNo: 0, Prefix: meta, Keys: []string{meta + "a"}}))
		return fixture{community: community, token: token, meta: meta}
	}
	manifest := func(t *testing.T, f fixture) lifecycle.StorageManifest {
		storage := emptyStorage(f.community)
		storage.Prefixes[0] = summarize(t, f.meta, f.meta+"a")
		return storage
	}
	drained := func(t *testing.T) fixture {
		f := fenced(t)
		require.NoError(t, b.engine.FreezeDestructiveManifest(t.Context(), f.token, manifest(t, f)))
		require.NoError(t, b.engine.EnterDrained(t.Context(), f.token))
		return f
	}

	calls := []struct {
		name  string
		setup func(t *testing.T) fixture
		call  func(ctx context.Context, f fixture, token lifecycle.LeaseToken) error
	}{
		{"freeze", fenced, func(ctx context.Context, f fixture, token lifecycle.LeaseToken) error {
			return b.engine.FreezeDestructiveManifest(ctx, token, manifest(t, f))
		}},
		{"clear", fenced, func(ctx context.Context, f fixture, token lifecycle.LeaseToken) error {
			return b.engine.ClearManifestChunks(ctx, token)
		}},
		{"append", fenced, func(ctx context.Context, f fixture, token lifecycle.LeaseToken) error {
			return b.engine.AppendManifestChunk(ctx, token, lifecycle.ManifestKeyChunk{ChunkNo: 1, Prefix: f.meta, Keys: []string{f.meta + "b"}})
		}},
		{"mark deleted", drained, func(ctx context.Context, f fixture, token lifecycle.LeaseToken) error {
			return b.engine.MarkChunkDeleted(ctx, token, 0, nil)
		}},
		{"next pending", drained, func(ctx context.Context, f fixture, token lifecycle.LeaseToken) error {
			_, err := b.engine.NextPendingChunk(ctx, token)
			return err
		}},
	}
	staleness := []struct {
		name  string
		stale func(t *testing.T, f fixture) lifecycle.LeaseToken
	}{
		{"older lease generation", func(t *testing.T, f fixture) lifecycle.LeaseToken {
			// The lease lapses and the same executor claims the request again.
			_, err := b.pool.Exec(t.Context(), "UPDATE community_deletion_requests SET lease_until = now() - interval '1 second' WHERE id = $1", f.token.RequestID)
			require.NoError(t, err)
			newer := b.storeClaim(t, f.token.RequestID)
			require.Greater(t, newer.Generation, f.token.Generation)
			return f.token
		}},
		{"other owner", func(t *testing.T, f fixture) lifecycle.LeaseToken {
			token := f.token
			token.Owner = "intruder"
			return token
		}},
		{"wrong community", func(t *testing.T, f fixture) lifecycle.LeaseToken {
			token := f.token
			token.CommunityID, _ = b.createCommunity(t)
			return token
		}},
		{"wrong fence generation", func(t *testing.T, f fixture) lifecycle.LeaseToken {
			return f.token.WithFence(*f.token.FenceGeneration + 1)
		}},
		{"expired lease", func(t *testing.T, f fixture) lifecycle.LeaseToken {
			_, err := b.pool.Exec(t.Context(), "UPDATE community_deletion_requests SET lease_until = now() - interval '1 second' WHERE id = $1", f.token.RequestID)
			require.NoError(t, err)
			return f.token
		}},
		{"blocked request", func(t *testing.T, f fixture) lifecycle.LeaseToken {
			_, err := b.pool.Exec(t.Context(), "UPDATE community_deletion_requests SET blocked_at = now(), blocked_reason = 'operator hold' WHERE id = $1", f.token.RequestID)
			require.NoError(t, err)
			return f.token
		}},
	}
	for _, c := range calls {
		for _, s := range staleness {
			t.Run(c.name+"/"+s.name, func(t *testing.T) {
				t.Parallel()
				f := c.setup(t)
				token := s.stale(t, f)
				before := b.sqlChunkState(t, f.token.RequestID)
				err := c.call(t.Context(), f, token)
				require.True(t, lifecycle.IsStaleLease(err), "want a stale lease, got %v", err)
				require.ErrorIs(t, err, lifecycle.ErrAccessDenied)
				require.Equal(t, before, b.sqlChunkState(t, f.token.RequestID), "a stale token changes nothing")
			})
		}
		t.Run(c.name+"/no fence generation", func(t *testing.T) {
			t.Parallel()
			f := c.setup(t)
			token := f.token
			token.FenceGeneration = nil
			require.ErrorIs(t, c.call(t.Context(), f, token), lifecycle.ErrRefused)
		})
	}
}

// Malformed chunks and sweeps are refused before any database work.
func TestStorageInputsAreValidatedFirst(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	community, token := b.storeFencedToken(t)
	meta := fmt.Sprintf("_meta/%s/", community)

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
			require.ErrorIs(t, b.engine.AppendManifestChunk(ctx, token, chunk), lifecycle.ErrInvalidInput)
		})
	}
	require.NoError(t, b.engine.AppendManifestChunk(ctx, token, lifecycle.ManifestKeyChunk{ChunkNo: 0, Prefix: meta, Keys: manyKeys(meta, lifecycle.MaxManifestChunkKeys)}))

	malformed := emptyStorage(community)
	malformed.Version = 3
	require.ErrorIs(t, b.engine.FreezeDestructiveManifest(ctx, token, malformed), lifecycle.ErrInvalidInput)
	require.ErrorIs(t, b.engine.MarkChunkDeleted(ctx, token, -1, nil), lifecycle.ErrInvalidInput)
	require.ErrorIs(t, b.engine.MarkChunkDeleted(ctx, token, 0, func() {}), lifecycle.ErrInvalidInput)
	require.Equal(t, "chunks=1 stamped=0 frozen=false checkpoints=0", b.sqlChunkState(t, token.RequestID))
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

	none, err := b.operator.LatestTaxonomySweep(ctx)
	require.NoError(t, err)
	require.Nil(t, none)

	var dbNow time.Time
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&dbNow))
	skewed, err := b.engine.RecordTaxonomySweep(ctx, lifecycle.TaxonomySweepParams{StartedAt: dbNow.Add(time.Minute), Listed: 1, Unknown: 0, Sample: nil, ObjectCap: 100})
	require.NoError(t, err)
	require.Equal(t, skewed.CompletedAt, skewed.StartedAt, "a start slightly in the future is clamped to the completion")
	require.Empty(t, skewed.UnknownKeySample)

	dirty, err := b.engine.RecordTaxonomySweep(ctx, lifecycle.TaxonomySweepParams{StartedAt: dbNow.Add(-time.Hour), Listed: 2, Unknown: 1, Sample: []string{"unknown/key"}, ObjectCap: 100})
	require.NoError(t, err)
	require.True(t, dirty.CompletedAt.After(skewed.CompletedAt))
	require.True(t, dirty.StartedAt.Equal(dbNow.Add(-time.Hour)))

	latest, err := b.operator.LatestTaxonomySweep(ctx)
	require.NoError(t, err)
	require.Equal(t, dirty, latest, "the sweep that completed last on the database clock wins, whatever its start")
	require.Equal(t, []string{"unknown/key"}, latest.UnknownKeySample)
	require.EqualValues(t, 2, latest.ListedObjects)
	require.EqualValues(t, 1, latest.UnknownObjectCount)
	require.EqualValues(t, 100, latest.ObjectCap)

	_, err = b.engine.RecordTaxonomySweep(ctx, lifecycle.TaxonomySweepParams{StartedAt: dbNow.Add(time.Hour), Listed: 1, Unknown: 0, Sample: nil, ObjectCap: 100})
	require.ErrorIs(t, err, lifecycle.ErrRefused, "a start far in the database's future")
	latest, err = b.operator.LatestTaxonomySweep(ctx)
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
			_, err := b.engine.RecordTaxonomySweep(ctx, lifecycle.TaxonomySweepParams{StartedAt: now, Listed: math.MaxInt64 + 1, Unknown: 0, Sample: nil, ObjectCap: 1})
			return err
		},
		"unknown overflow": func() error {
			_, err := b.engine.RecordTaxonomySweep(ctx, lifecycle.TaxonomySweepParams{StartedAt: now, Listed: 1, Unknown: math.MaxUint64, Sample: nil, ObjectCap: 1})
			return err
		},
		"cap overflow": func() error {
			_, err := b.engine.RecordTaxonomySweep(ctx, lifecycle.TaxonomySweepParams{StartedAt: now, Listed: 1, Unknown: 0, Sample: nil, ObjectCap: math.MaxUint64})
			return err
		},
		"unknown > listed": func() error {
			_, err := b.engine.RecordTaxonomySweep(ctx, lifecycle.TaxonomySweepParams{StartedAt: now, Listed: 1, Unknown: 2, Sample: nil, ObjectCap: 1})
			return err
		},
		"sample > unknown": func() error {
			_, err := b.engine.RecordTaxonomySweep(ctx, lifecycle.TaxonomySweepParams{StartedAt: now, Listed: 5, Unknown: 1, Sample: []string{"a", "b"}, ObjectCap: 1})
			return err
		},
		"zero start": func() error {
			_, err := b.engine.RecordTaxonomySweep(ctx, lifecycle.TaxonomySweepParams{StartedAt: time.Time{}, Listed: 1, Unknown: 0, Sample: nil, ObjectCap: 1})
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
	sweep, err := b.engine.RecordTaxonomySweep(ctx, lifecycle.TaxonomySweepParams{StartedAt: now, Listed: math.MaxInt64, Unknown: 1000, Sample: sample, ObjectCap: 0})
	require.NoError(t, err)
	require.Len(t, sweep.UnknownKeySample, lifecycle.MaxTaxonomySampleKeys, "the sample is bounded")
	require.Len(t, sweep.UnknownKeySample[0], lifecycle.MaxTaxonomySampleKeyBytes, "each sampled key is bounded")
	require.Equal(t, sample[1:lifecycle.MaxTaxonomySampleKeys], sweep.UnknownKeySample[1:])
	require.EqualValues(t, math.MaxInt64, sweep.ListedObjects)
	stored, err := b.operator.LatestTaxonomySweep(ctx)
	require.NoError(t, err)
	require.Equal(t, sweep, stored)
}
