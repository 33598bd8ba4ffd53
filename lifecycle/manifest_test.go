package lifecycle

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// storageManifest is a valid manifest of three empty tenant prefixes. (The
// external tests build theirs with testfactory.EmptyStorage, which this
// package's own tests cannot import.)
func storageManifest() StorageManifest {
	return StorageManifest{
		Version: StorageManifestVersion,
		Prefixes: []PrefixManifest{
			{Prefix: "_meta/c/", KeysDigest: EmptyKeysDigest},
			{Prefix: "_uploads/c/", KeysDigest: EmptyKeysDigest},
			{Prefix: "repos/c/", KeysDigest: EmptyKeysDigest},
		},
	}
}

func keysDigest(t *testing.T, keys ...string) (string, uint64) {
	t.Helper()
	var d KeyStreamDigest
	for _, key := range keys {
		require.NoError(t, d.Fold(key))
	}
	return d.Sum()
}

func TestEmptyKeysDigest(t *testing.T) {
	t.Parallel()

	sum := sha256.Sum256(nil)
	require.Equal(t, EmptyKeysDigest, hex.EncodeToString(sum[:]))

	var d KeyStreamDigest
	digest, count := d.Sum()
	require.Equal(t, EmptyKeysDigest, digest)
	require.Zero(t, count)
}

func TestKeyStreamDigestRequiresStrictOrderAndIsChunkingInvariant(t *testing.T) {
	t.Parallel()

	keys := []string{"a/1", "a/2", "a/3"}
	var whole KeyStreamDigest
	for _, key := range keys {
		require.NoError(t, whole.Fold(key))
	}
	wholeDigest, wholeCount := whole.Sum()
	require.Equal(t, uint64(3), wholeCount)

	// The definition: SHA-256 over each key followed by a newline.
	want := sha256.Sum256([]byte("a/1\na/2\na/3\n"))
	require.Equal(t, hex.EncodeToString(want[:]), wholeDigest)

	// Where chunk boundaries fall does not matter, and Sum between chunks
	// does not disturb the stream.
	var split KeyStreamDigest
	require.NoError(t, split.Fold(keys[0]))
	require.NoError(t, split.Fold(keys[1]))
	partial, partialCount := split.Sum()
	require.Equal(t, uint64(2), partialCount)
	require.NotEqual(t, wholeDigest, partial)
	require.NoError(t, split.Fold(keys[2]))
	splitDigest, splitCount := split.Sum()
	require.Equal(t, wholeDigest, splitDigest)
	require.Equal(t, wholeCount, splitCount)

	var outOfOrder KeyStreamDigest
	require.NoError(t, outOfOrder.Fold("b"))
	require.ErrorIs(t, outOfOrder.Fold("a"), ErrRefused)
	// A refused key leaves the stream as it was.
	digest, count := outOfOrder.Sum()
	require.Equal(t, uint64(1), count)
	bOnly, _ := keysDigest(t, "b")
	require.Equal(t, bOnly, digest)

	var duplicate KeyStreamDigest
	require.NoError(t, duplicate.Fold("a"))
	require.ErrorIs(t, duplicate.Fold("a"), ErrRefused)

	// Order is by bytes, as S3 lists: "B" (0x42) sorts before "a" (0x61),
	// and "é" (0xc3 0xa9) after "z".
	_, count = keysDigest(t, "B", "a", "z", "é")
	require.Equal(t, uint64(4), count)
}

func TestKeyStreamDigestRefusesAmbiguousKeys(t *testing.T) {
	t.Parallel()

	// Two different ascending key lists would hash the same bytes
	// "a\nb\nc\n" if keys could contain a newline.
	var d KeyStreamDigest
	require.ErrorIs(t, d.Fold("a\nb"), ErrRefused)
	require.ErrorIs(t, d.Fold(""), ErrRefused)
	require.ErrorIs(t, d.Fold("bad\xff"), ErrRefused)
	digest, count := d.Sum()
	require.Equal(t, EmptyKeysDigest, digest)
	require.Zero(t, count)
}

func TestStorageManifestShapeInvariantsFailClosed(t *testing.T) {
	t.Parallel()

	require.NoError(t, ValidateStorageManifest(storageManifest()))

	digest, count := keysDigest(t, "_meta/c/1", "_meta/c/2")
	populated := storageManifest()
	populated.Prefixes[0].ObjectCount = count
	populated.Prefixes[0].TotalBytes = 1234
	populated.Prefixes[0].KeysDigest = digest
	require.NoError(t, ValidateStorageManifest(populated))

	cases := map[string]struct {
		mutate func(*StorageManifest)
		detail string
	}{
		"unsorted": {func(m *StorageManifest) {
			m.Prefixes[0], m.Prefixes[1] = m.Prefixes[1], m.Prefixes[0]
		}, "not strictly sorted"},
		"duplicate prefix": {func(m *StorageManifest) {
			m.Prefixes[1].Prefix = m.Prefixes[0].Prefix
		}, "not strictly sorted"},
		"nested prefix": {func(m *StorageManifest) {
			m.Prefixes[1].Prefix = "_meta/c/sub/"
		}, `"_meta/c/sub/" is nested in prefix "_meta/c/"`},
		"whole bucket": {func(m *StorageManifest) {
			m.Prefixes[0].Prefix = ""
		}, "whole bucket"},
		"malformed digest": {func(m *StorageManifest) {
			m.Prefixes[0].KeysDigest = "not-hex"
		}, `prefix "_meta/c/"`},
		"uppercase hex": {func(m *StorageManifest) {
			m.Prefixes[1].KeysDigest = strings.ToUpper(EmptyKeysDigest)
		}, `prefix "_uploads/c/"`},
		"short digest": {func(m *StorageManifest) {
			m.Prefixes[2].KeysDigest = EmptyKeysDigest[:63]
		}, `prefix "repos/c/"`},
		"non-UTF-8 prefix": {func(m *StorageManifest) {
			m.Prefixes[2].Prefix = "repos/\xff/"
		}, "not valid UTF-8"},
		"wrong version": {func(m *StorageManifest) {
			m.Version = 3
		}, "version 3"},
		"no prefixes": {func(m *StorageManifest) {
			m.Prefixes = nil
		}, "no tenant prefixes"},
		"objects with the empty digest": {func(m *StorageManifest) {
			m.Prefixes[0].ObjectCount = 1
		}, "inconsistent"},
		"no objects with a non-empty digest": {func(m *StorageManifest) {
			m.Prefixes[0].KeysDigest = digest
		}, "inconsistent"},
		"bytes without objects": {func(m *StorageManifest) {
			m.Prefixes[0].TotalBytes = 1
		}, "inconsistent"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			m := storageManifest()
			tc.mutate(&m)
			err := ValidateStorageManifest(m)
			require.ErrorIs(t, err, ErrInvalidInput)
			require.Contains(t, err.Error(), tc.detail)
		})
	}
}

func TestManifestKeyChunksMustHashToTheFrozenSummaries(t *testing.T) {
	t.Parallel()

	keys := []string{"_meta/c/1", "_meta/c/2"}
	digest, count := keysDigest(t, keys...)
	manifest := storageManifest()
	manifest.Prefixes[0].ObjectCount = count
	manifest.Prefixes[0].KeysDigest = digest

	chunk := func(no int64, keys ...string) ManifestKeyChunk {
		return ManifestKeyChunk{ChunkNo: no, Prefix: "_meta/c/", Keys: keys}
	}

	require.NoError(t, ValidateManifestKeyChunks(manifest, []ManifestKeyChunk{chunk(0, keys[0]), chunk(1, keys[1])}))
	require.NoError(t, ValidateManifestKeyChunks(manifest, []ManifestKeyChunk{chunk(0, keys...)}))

	refused := map[string][]ManifestKeyChunk{
		// Missing, reordered or extra keys change the digest.
		"missing key":   {chunk(0, keys[0])},
		"reordered":     {chunk(0, keys[1]), chunk(1, keys[0])},
		"extra key":     {chunk(0, keys[0], keys[1], "_meta/c/3")},
		"duplicate key": {chunk(0, keys...), chunk(1, keys[1])},
		// A gap in the chunk sequence is an interrupted write, not a manifest.
		"gap":        {chunk(1, keys...)},
		"gap later":  {chunk(0, keys[0]), chunk(2, keys[1])},
		"renumbered": {chunk(0, keys[0]), chunk(0, keys[1])},
		// A key outside its chunk's prefix must never freeze.
		"foreign key":    {chunk(0, keys...), chunk(1, "_uploads/other/1")},
		"empty chunk":    {chunk(0, keys...), chunk(1)},
		"unknown prefix": {chunk(0, keys...), {ChunkNo: 1, Prefix: "_meta/d/", Keys: []string{"_meta/d/1"}}},
		// No chunks at all only matches an all-empty manifest.
		"no chunks": nil,
	}
	for name, chunks := range refused {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			require.ErrorIs(t, ValidateManifestKeyChunks(manifest, chunks), ErrRefused)
		})
	}

	require.NoError(t, ValidateManifestKeyChunks(storageManifest(), nil))
	require.NoError(t, ValidateManifestKeyChunks(storageManifest(), []ManifestKeyChunk{}))
}

func TestManifestKeyChunksFollowManifestPrefixOrder(t *testing.T) {
	t.Parallel()

	meta := []string{"_meta/c/a", "_meta/c/b"}
	repos := []string{"repos/c/1", "repos/c/2", "repos/c/3"}
	manifest := storageManifest()
	manifest.Prefixes[0].KeysDigest, manifest.Prefixes[0].ObjectCount = keysDigest(t, meta...)
	manifest.Prefixes[2].KeysDigest, manifest.Prefixes[2].ObjectCount = keysDigest(t, repos...)
	require.NoError(t, ValidateStorageManifest(manifest))

	metaChunk := func(no int64, keys ...string) ManifestKeyChunk {
		return ManifestKeyChunk{ChunkNo: no, Prefix: "_meta/c/", Keys: keys}
	}
	reposChunk := func(no int64, keys ...string) ManifestKeyChunk {
		return ManifestKeyChunk{ChunkNo: no, Prefix: "repos/c/", Keys: keys}
	}

	// The empty _uploads/c/ prefix between them has no chunks.
	require.NoError(t, ValidateManifestKeyChunks(manifest, []ManifestKeyChunk{
		metaChunk(0, meta...),
		reposChunk(1, repos[0]),
		reposChunk(2, repos[1:]...),
	}))

	// Prefix groups out of manifest order.
	require.ErrorIs(t, ValidateManifestKeyChunks(manifest, []ManifestKeyChunk{
		reposChunk(0, repos...),
		metaChunk(1, meta...),
	}), ErrRefused)

	// A prefix's chunks split by another prefix's.
	require.ErrorIs(t, ValidateManifestKeyChunks(manifest, []ManifestKeyChunk{
		metaChunk(0, meta[0]),
		reposChunk(1, repos...),
		metaChunk(2, meta[1]),
	}), ErrRefused)

	// A non-empty prefix left without chunks.
	require.ErrorIs(t, ValidateManifestKeyChunks(manifest, []ManifestKeyChunk{
		metaChunk(0, meta...),
	}), ErrRefused)

	// Chunks for a prefix summarized as empty.
	require.ErrorIs(t, ValidateManifestKeyChunks(manifest, []ManifestKeyChunk{
		metaChunk(0, meta...),
		{ChunkNo: 1, Prefix: "_uploads/c/", Keys: []string{"_uploads/c/x"}},
		reposChunk(2, repos...),
	}), ErrRefused)

	// A malformed manifest is refused before any chunk is read.
	bad := manifest
	bad.Version = 1
	err := ValidateManifestKeyChunks(bad, nil)
	require.ErrorIs(t, err, ErrRefused)
	require.ErrorIs(t, err, ErrInvalidInput)
}

func TestValidateSchemaManifest(t *testing.T) {
	t.Parallel()

	valid := func() SchemaManifest {
		return SchemaManifest{
			ScopedTables:  []string{"channels", "events", "users"},
			RowCounts:     map[string]int64{"channels": 2, "events": 0, "users": 7},
			FencedTables:  []string{"channels", "events", "users"},
			NullifyTables: []string{"events"},
		}
	}
	require.NoError(t, ValidateSchemaManifest(valid()))

	cases := map[string]func(*SchemaManifest){
		"no scoped tables":     func(m *SchemaManifest) { m.ScopedTables = nil },
		"unsorted scoped":      func(m *SchemaManifest) { m.ScopedTables = []string{"events", "channels", "users"} },
		"duplicate scoped":     func(m *SchemaManifest) { m.ScopedTables = []string{"channels", "channels", "events", "users"} },
		"empty table name":     func(m *SchemaManifest) { m.FencedTables = []string{"", "events"} },
		"unsorted fenced":      func(m *SchemaManifest) { m.FencedTables = []string{"users", "events"} },
		"duplicate nullify":    func(m *SchemaManifest) { m.NullifyTables = []string{"events", "events"} },
		"nullify not scoped":   func(m *SchemaManifest) { m.NullifyTables = []string{"audit_log"} },
		"negative row count":   func(m *SchemaManifest) { m.RowCounts["users"] = -1 },
		"row count not scoped": func(m *SchemaManifest) { m.RowCounts["audit_log"] = 1 },
		"non-UTF-8 table name": func(m *SchemaManifest) { m.ScopedTables = append(m.ScopedTables, "zz\xff") },
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			m := valid()
			mutate(&m)
			require.ErrorIs(t, ValidateSchemaManifest(m), ErrInvalidInput)
		})
	}
}

func frozenInventory() FrozenInventory {
	return FrozenInventory{
		Schema: SchemaManifest{
			ScopedTables:  []string{"events", "users"},
			RowCounts:     map[string]int64{"events": 3, "users": 1},
			FencedTables:  []string{"events", "users"},
			NullifyTables: []string{"users"},
		},
		Storage: storageManifest(),
	}
}

func TestFrozenInventoryDigestIsStable(t *testing.T) {
	t.Parallel()

	inv := frozenInventory()
	first, err := inv.Digest()
	require.NoError(t, err)
	second, err := inv.Digest()
	require.NoError(t, err)
	require.Equal(t, first, second)
	require.Len(t, first, 32)

	// Map insertion order does not matter.
	counts := map[string]int64{}
	counts["users"] = 1
	counts["events"] = 3
	reordered := frozenInventory()
	reordered.Schema.RowCounts = counts
	got, err := reordered.Digest()
	require.NoError(t, err)
	require.Equal(t, first, got)

	// Nil and empty collections are the same inventory.
	a, b := frozenInventory(), frozenInventory()
	a.Schema.NullifyTables, b.Schema.NullifyTables = nil, []string{}
	a.Schema.RowCounts, b.Schema.RowCounts = nil, map[string]int64{}
	da, err := a.Digest()
	require.NoError(t, err)
	db, err := b.Digest()
	require.NoError(t, err)
	require.Equal(t, da, db)

	// A JSON round trip, as through a jsonb column, keeps the digest.
	data, err := json.Marshal(inv)
	require.NoError(t, err)
	var decoded FrozenInventory
	require.NoError(t, json.Unmarshal(data, &decoded))
	got, err = decoded.Digest()
	require.NoError(t, err)
	require.Equal(t, first, got)
}

func TestFrozenInventoryDigestCoversEveryField(t *testing.T) {
	t.Parallel()

	base, err := frozenInventory().Digest()
	require.NoError(t, err)

	changes := map[string]func(*FrozenInventory){
		"scoped table":    func(inv *FrozenInventory) { inv.Schema.ScopedTables = []string{"events"} },
		"row count value": func(inv *FrozenInventory) { inv.Schema.RowCounts = map[string]int64{"events": 4, "users": 1} },
		"row count key":   func(inv *FrozenInventory) { inv.Schema.RowCounts = map[string]int64{"events": 3} },
		"fenced table":    func(inv *FrozenInventory) { inv.Schema.FencedTables = []string{"users"} },
		"nullify table":   func(inv *FrozenInventory) { inv.Schema.NullifyTables = nil },
		"storage version": func(inv *FrozenInventory) { inv.Storage.Version = 5 },
		"prefix name":     func(inv *FrozenInventory) { inv.Storage.Prefixes[2].Prefix = "repos/d/" },
		"object count":    func(inv *FrozenInventory) { inv.Storage.Prefixes[1].ObjectCount = 1 },
		"total bytes":     func(inv *FrozenInventory) { inv.Storage.Prefixes[1].TotalBytes = 1 },
		"keys digest":     func(inv *FrozenInventory) { inv.Storage.Prefixes[0].KeysDigest = strings.Repeat("0", 64) },
		"prefix dropped":  func(inv *FrozenInventory) { inv.Storage.Prefixes = inv.Storage.Prefixes[:2] },
		"table moved lists": func(inv *FrozenInventory) {
			inv.Schema.FencedTables, inv.Schema.NullifyTables = inv.Schema.NullifyTables, inv.Schema.FencedTables
		},
	}
	for name, change := range changes {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			inv := frozenInventory()
			change(&inv)
			got, err := inv.Digest()
			require.NoError(t, err)
			require.NotEqual(t, base, got)
		})
	}
}

// TestFrozenInventoryCanonicalEncodingIsPinned guards the canonical encoding.
// Approvals stored in the database bind to digests of this encoding, so if
// this test fails the change breaks every pending approval: revert it.
func TestFrozenInventoryCanonicalEncodingIsPinned(t *testing.T) {
	t.Parallel()

	inv := frozenInventory()
	inv.Storage.Prefixes[1].Prefix = "_uploads/c&<o>/"
	canonical, err := inv.canonicalJSON()
	require.NoError(t, err)
	require.Equal(t, `{"schema":{"scoped_tables":["events","users"],"row_counts":{"events":3,"users":1},"fenced_tables":["events","users"],"nullify_tables":["users"]},`+
		`"storage":{"version":4,"prefixes":[`+
		`{"prefix":"_meta/c/","object_count":0,"total_bytes":0,"keys_digest":"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},`+
		`{"prefix":"_uploads/c&<o>/","object_count":0,"total_bytes":0,"keys_digest":"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},`+
		`{"prefix":"repos/c/","object_count":0,"total_bytes":0,"keys_digest":"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"}]}}`,
		string(canonical))

	digest, err := inv.Digest()
	require.NoError(t, err)
	require.Equal(t, "df591a0c2f3e91d086627110e30aa8a507fce0270dc22ba4d6fd71e062bd932d", hex.EncodeToString(digest[:]))
}

func TestFrozenInventoryDigestRefusesInvalidUTF8(t *testing.T) {
	t.Parallel()

	// encoding/json would rewrite both strings to U+FFFD, so two different
	// inventories would share a digest.
	for _, mutate := range []func(*FrozenInventory){
		func(inv *FrozenInventory) { inv.Storage.Prefixes[0].Prefix = "_meta/\xff/" },
		func(inv *FrozenInventory) { inv.Schema.ScopedTables[0] = "ev\xfeents" },
		func(inv *FrozenInventory) { inv.Schema.RowCounts["\xff"] = 1 },
	} {
		inv := frozenInventory()
		mutate(&inv)
		_, err := inv.Digest()
		require.ErrorIs(t, err, ErrInvalidInput)
	}
}
