package lifecycle

// Fuzz targets for everything in the package that parses or validates outside
// input: frozen inventories and their digest, storage and schema manifests,
// persisted key chunks, key streams and stage names. Each checks the
// function's documented contract against an independent statement of it (an
// oracle written from the doc comment), not merely that it does not panic.
// Seeds are added here and committed under testdata/fuzz/<target>/; run one
// with e.g. go test ./lifecycle -run '^$' -fuzz '^FuzzKeyStreamDigest$'.

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// fzLowerHexSHA256 is the oracle's idea of a well-formed keys digest.
var fzLowerHexSHA256 = regexp.MustCompile(`^[0-9a-f]{64}$`)

// fzKeysDigest is the oracle's keys digest: SHA-256 of each key followed by a
// newline, in the order given.
func fzKeysDigest(keys []string) string {
	h := sha256.New()
	for _, k := range keys {
		h.Write([]byte(k + "\n"))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// fzStorageManifestProblem says what is wrong with m according to
// ValidateStorageManifest's doc comment, or "" when nothing is. It checks
// nesting against every earlier prefix, not only the predecessor.
func fzStorageManifestProblem(m StorageManifest) string {
	if m.Version != StorageManifestVersion {
		return "version"
	}
	if len(m.Prefixes) == 0 {
		return "no prefixes"
	}
	for i, p := range m.Prefixes {
		switch {
		case p.Prefix == "":
			return "empty prefix"
		case !utf8.ValidString(p.Prefix):
			return "prefix not UTF-8"
		case !fzLowerHexSHA256.MatchString(p.KeysDigest):
			return "keys digest not lowercase hex SHA-256"
		case p.ObjectCount == 0 && (p.TotalBytes != 0 || p.KeysDigest != EmptyKeysDigest):
			return "empty prefix with bytes or a non-empty digest"
		case p.ObjectCount != 0 && p.KeysDigest == EmptyKeysDigest:
			return "objects with the empty digest"
		}
		for _, earlier := range m.Prefixes[:i] {
			if earlier.Prefix >= p.Prefix {
				return "not strictly sorted"
			}
			if strings.HasPrefix(p.Prefix, earlier.Prefix) {
				return "nested"
			}
		}
	}
	return ""
}

// fzKeyChunksProblem says what is wrong with chunks as the enumeration of m
// according to ValidateManifestKeyChunks's doc comment, or "" when nothing is.
func fzKeyChunksProblem(m StorageManifest, chunks []ManifestKeyChunk) string {
	if p := fzStorageManifestProblem(m); p != "" {
		return "manifest: " + p
	}
	index := make(map[string]int, len(m.Prefixes))
	for i, p := range m.Prefixes {
		index[p.Prefix] = i
	}
	keysOf := make([][]string, len(m.Prefixes))
	lastOpened := -1
	for i, c := range chunks {
		if c.ChunkNo != int64(i) {
			return "chunk numbers"
		}
		j, ok := index[c.Prefix]
		if !ok {
			return "chunk prefix not in the manifest"
		}
		if i == 0 || c.Prefix != chunks[i-1].Prefix {
			if j <= lastOpened {
				return "prefix out of order or revisited"
			}
			lastOpened = j
		}
		if len(c.Keys) == 0 {
			return "empty chunk"
		}
		for _, k := range c.Keys {
			if !strings.HasPrefix(k, c.Prefix) {
				return "key outside its chunk's prefix"
			}
		}
		keysOf[j] = append(keysOf[j], c.Keys...)
	}
	for j, p := range m.Prefixes {
		keys := keysOf[j]
		for i, k := range keys {
			if k == "" || !utf8.ValidString(k) || strings.Contains(k, "\n") || (i > 0 && k <= keys[i-1]) {
				return "bad key stream"
			}
		}
		if uint64(len(keys)) != p.ObjectCount || fzKeysDigest(keys) != p.KeysDigest {
			return "keys do not reproduce the summary"
		}
	}
	return ""
}

// fzSchemaManifestProblem says what is wrong with m according to
// ValidateSchemaManifest's doc comment, or "" when nothing is.
func fzSchemaManifestProblem(m SchemaManifest) string {
	if len(m.ScopedTables) == 0 {
		return "no scoped tables"
	}
	for _, list := range [][]string{m.ScopedTables, m.FencedTables, m.NullifyTables} {
		for i, table := range list {
			if table == "" || !utf8.ValidString(table) || (i > 0 && table <= list[i-1]) {
				return "bad table list"
			}
		}
	}
	scoped := make(map[string]bool, len(m.ScopedTables))
	for _, table := range m.ScopedTables {
		scoped[table] = true
	}
	for _, table := range m.NullifyTables {
		if !scoped[table] {
			return "nullify table not scoped"
		}
	}
	for table, n := range m.RowCounts {
		if !scoped[table] || n < 0 {
			return "bad row count"
		}
	}
	return ""
}

// fzNormalized returns inv with nil slices and maps made empty, the form
// Digest treats it as.
func fzNormalized(inv FrozenInventory) FrozenInventory {
	inv.Schema.ScopedTables = nonNilSlice(inv.Schema.ScopedTables)
	inv.Schema.FencedTables = nonNilSlice(inv.Schema.FencedTables)
	inv.Schema.NullifyTables = nonNilSlice(inv.Schema.NullifyTables)
	if inv.Schema.RowCounts == nil {
		inv.Schema.RowCounts = map[string]int64{}
	}
	inv.Storage.Prefixes = nonNilSlice(inv.Storage.Prefixes)
	return inv
}

// fzDenormalized returns inv with empty slices and maps made nil.
func fzDenormalized(inv FrozenInventory) FrozenInventory {
	nilIfEmpty := func(s []string) []string {
		if len(s) == 0 {
			return nil
		}
		return s
	}
	inv.Schema.ScopedTables = nilIfEmpty(inv.Schema.ScopedTables)
	inv.Schema.FencedTables = nilIfEmpty(inv.Schema.FencedTables)
	inv.Schema.NullifyTables = nilIfEmpty(inv.Schema.NullifyTables)
	if len(inv.Schema.RowCounts) == 0 {
		inv.Schema.RowCounts = nil
	}
	if len(inv.Storage.Prefixes) == 0 {
		inv.Storage.Prefixes = nil
	}
	return inv
}

// fzValidInventoryJSON is a frozen inventory that passes both validators.
var fzValidInventoryJSON = `{"schema":{"scoped_tables":["messages","posts"],"row_counts":{"messages":3,"posts":0},` +
	`"fenced_tables":["messages","posts"],"nullify_tables":["posts"]},"storage":{"version":4,"prefixes":[` +
	`{"prefix":"_meta/c/","object_count":0,"total_bytes":0,"keys_digest":"` + EmptyKeysDigest + `"},` +
	`{"prefix":"media/c/","object_count":1,"total_bytes":5,"keys_digest":"` + fzKeysDigest([]string{"media/c/a"}) + `"}]}}`

// FuzzFrozenInventoryDigest decodes arbitrary JSON as a FrozenInventory: the
// digest is deterministic and blind to nil versus empty; the canonical JSON
// is compact, decodes back to the same inventory (so equal digests mean equal
// inventories) and is a fixed point; a round trip through encoding/json keeps
// the digest; and the validators never panic and judge the round-tripped
// inventory as they judged the original.
func FuzzFrozenInventoryDigest(f *testing.F) {
	f.Add([]byte(fzValidInventoryJSON))
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"schema":{"scoped_tables":null,"row_counts":null},"storage":{"prefixes":[]}}`))
	f.Add([]byte(`{"schema":{"scoped_tables":["<b>&amp;","\u2028","\ud800"],"row_counts":{"z":-1,"a":9223372036854775807}}}`))
	f.Add([]byte(`{"SCHEMA":{"Scoped_Tables":["x"]},"storage":{"version":4,"prefixes":[{"prefix":"a","object_count":18446744073709551615}]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var inv FrozenInventory
		if json.Unmarshal(data, &inv) != nil {
			return
		}
		// encoding/json yields valid UTF-8 only, so Digest must succeed.
		digest, err := inv.Digest()
		require.NoError(t, err)
		again, err := inv.Digest()
		require.NoError(t, err)
		require.Equal(t, digest, again, "Digest is deterministic")
		for _, variant := range []FrozenInventory{fzNormalized(inv), fzDenormalized(inv)} {
			d, err := variant.Digest()
			require.NoError(t, err)
			require.Equal(t, digest, d, "nil and empty slices and maps digest alike")
		}

		canonical, err := inv.canonicalJSON()
		require.NoError(t, err)
		require.Equal(t, sha256.Sum256(canonical), digest, "Digest hashes the canonical JSON")
		var compact bytes.Buffer
		require.NoError(t, json.Compact(&compact, canonical))
		require.Equal(t, compact.Bytes(), canonical, "canonical JSON is compact")
		var decoded FrozenInventory
		require.NoError(t, json.Unmarshal(canonical, &decoded))
		require.Equal(t, fzNormalized(inv), decoded, "canonical JSON encodes the inventory faithfully")
		recanonical, err := decoded.canonicalJSON()
		require.NoError(t, err)
		require.Equal(t, canonical, recanonical, "canonical JSON is a fixed point")

		encoded, err := json.Marshal(inv)
		require.NoError(t, err)
		var roundTripped FrozenInventory
		require.NoError(t, json.Unmarshal(encoded, &roundTripped))
		d, err := roundTripped.Digest()
		require.NoError(t, err)
		require.Equal(t, digest, d, "a JSON round trip keeps the digest")

		schemaErr := ValidateSchemaManifest(inv.Schema)
		storageErr := ValidateStorageManifest(inv.Storage)
		require.Equal(t, schemaErr == nil, ValidateSchemaManifest(roundTripped.Schema) == nil)
		require.Equal(t, storageErr == nil, ValidateStorageManifest(roundTripped.Storage) == nil)
		require.Equal(t, fzSchemaManifestProblem(inv.Schema) == "", schemaErr == nil, "%v", schemaErr)
		require.Equal(t, fzStorageManifestProblem(inv.Storage) == "", storageErr == nil, "%v", storageErr)
	})
}

// FuzzFrozenInventoryDigestUTF8 puts arbitrary bytes into every string of an
// inventory: Digest fails, with ErrInvalidInput and a printable message,
// exactly when one of them is not valid UTF-8 (encoding/json would silently
// rewrite it, so two inventories could share a digest); otherwise changing
// any one string changes the digest.
func FuzzFrozenInventoryDigestUTF8(f *testing.F) {
	f.Add("messages", "posts", "posts", "messages", "media/c/", EmptyKeysDigest)
	f.Add("a\xffb", "", "", "", "", "")
	f.Add("", "", "", "\xc3", "p/", "")
	f.Add("", "", "", "", "p/\xed\xa0\x80", "")
	f.Add("", "", "", "", "p/", "\x80")
	f.Add("\x00", "\u2028", "<>&", "\"", "\\", "\ufffd")
	f.Fuzz(func(t *testing.T, scoped, fenced, nullify, counted, prefix, keysDigest string) {
		strs := []*string{&scoped, &fenced, &nullify, &counted, &prefix, &keysDigest}
		build := func() FrozenInventory {
			return FrozenInventory{
				Schema: SchemaManifest{
					ScopedTables: []string{scoped}, FencedTables: []string{fenced},
					NullifyTables: []string{nullify}, RowCounts: map[string]int64{counted: 1},
				},
				Storage: StorageManifest{Version: StorageManifestVersion, Prefixes: []PrefixManifest{{Prefix: prefix, KeysDigest: keysDigest}}},
			}
		}
		valid := true
		for _, s := range strs {
			valid = valid && utf8.ValidString(*s)
		}
		digest, err := build().Digest()
		if !valid {
			require.ErrorIs(t, err, ErrInvalidInput)
			require.True(t, utf8.ValidString(err.Error()), "the refusal is printable: %q", err.Error())
			return
		}
		require.NoError(t, err)
		for _, s := range strs {
			saved := *s
			*s += "x"
			changed, err := build().Digest()
			require.NoError(t, err)
			require.NotEqual(t, digest, changed, "changing %q changes the digest", saved)
			*s = saved
		}
	})
}

// FuzzValidateStorageManifest builds manifests from arbitrary prefixes and
// summaries: ValidateStorageManifest accepts exactly what its contract
// allows (compared with an oracle that checks nesting against every earlier
// prefix), refuses with ErrInvalidInput, and what it accepts survives a JSON
// round trip unchanged and still accepted.
func FuzzValidateStorageManifest(f *testing.F) {
	f.Add(StorageManifestVersion, "_meta/c/\x00media/c/\x00repos/c/", []byte{0, 0, 0})
	f.Add(StorageManifestVersion, "a/\x00a/b/", []byte{0, 0})
	f.Add(StorageManifestVersion, "a\x00ab\x00b", []byte{0, 0, 0})
	f.Add(StorageManifestVersion, "b/\x00a/", []byte{0, 0})
	f.Add(StorageManifestVersion, "a/\x00a/", []byte{0, 0})
	f.Add(StorageManifestVersion, "", []byte{})
	f.Add(StorageManifestVersion, "media/c/", []byte{0x11})
	f.Add(StorageManifestVersion, "media/c/", []byte{0x21})
	f.Add(StorageManifestVersion, "media/c/", []byte{0x13, 0x32})
	f.Add(3, "media/c/", []byte{0})
	f.Add(StorageManifestVersion, "p\xff/", []byte{0})
	f.Fuzz(func(t *testing.T, version int, prefixes string, summaries []byte) {
		m := StorageManifest{Version: version}
		if prefixes != "" || len(summaries) > 0 {
			for i, prefix := range strings.Split(prefixes, "\x00") {
				// Each summary byte: low bits pick the digest, high bits the
				// object count and size.
				var b byte
				if i < len(summaries) {
					b = summaries[i]
				}
				digests := []string{EmptyKeysDigest, fzKeysDigest([]string{prefix + "k"}), strings.ToUpper(fzKeysDigest(nil)), "", EmptyKeysDigest[:63]}
				m.Prefixes = append(m.Prefixes, PrefixManifest{
					Prefix:      prefix,
					ObjectCount: uint64(b>>4) & 3,
					TotalBytes:  uint64(b >> 6),
					KeysDigest:  digests[int(b&0xf)%len(digests)],
				})
			}
		}
		err := ValidateStorageManifest(m)
		problem := fzStorageManifestProblem(m)
		require.Equal(t, problem == "", err == nil, "oracle says %q, ValidateStorageManifest says %v", problem, err)
		if err != nil {
			require.ErrorIs(t, err, ErrInvalidInput)
			require.True(t, utf8.ValidString(err.Error()), "the refusal is printable: %q", err.Error())
			return
		}
		encoded, err := json.Marshal(m)
		require.NoError(t, err)
		var decoded StorageManifest
		require.NoError(t, json.Unmarshal(encoded, &decoded))
		require.Equal(t, m, decoded)
		require.NoError(t, ValidateStorageManifest(decoded))
	})
}

// FuzzValidateSchemaManifest builds schema manifests from arbitrary table
// lists: ValidateSchemaManifest accepts exactly what its contract allows and
// refuses with ErrInvalidInput.
func FuzzValidateSchemaManifest(f *testing.F) {
	f.Add("messages,posts", "messages,posts", "posts", "messages,posts", int64(3))
	f.Add("posts,messages", "", "", "", int64(0))
	f.Add("a,a", "", "", "", int64(0))
	f.Add("a,b", "", "c", "", int64(0))
	f.Add("a,b", "", "", "c", int64(0))
	f.Add("a,b", "", "", "a", int64(-1))
	f.Add("a,,b", "", "", "", int64(0))
	f.Add("", "a", "", "", int64(0))
	f.Add("a\xff", "", "", "", int64(0))
	f.Add("b", "a,b", "b", "b", int64(9223372036854775807))
	f.Fuzz(func(t *testing.T, scoped, fenced, nullify, counted string, n int64) {
		list := func(s string) []string {
			if s == "" {
				return nil
			}
			return strings.Split(s, ",")
		}
		m := SchemaManifest{ScopedTables: list(scoped), FencedTables: list(fenced), NullifyTables: list(nullify)}
		if counted != "" {
			m.RowCounts = map[string]int64{}
			for i, table := range list(counted) {
				m.RowCounts[table] = n - int64(i)
			}
		}
		err := ValidateSchemaManifest(m)
		problem := fzSchemaManifestProblem(m)
		require.Equal(t, problem == "", err == nil, "oracle says %q, ValidateSchemaManifest says %v", problem, err)
		if err != nil {
			require.ErrorIs(t, err, ErrInvalidInput)
			require.True(t, utf8.ValidString(err.Error()), "the refusal is printable: %q", err.Error())
		}
	})
}

// FuzzKeyStreamDigest folds arbitrary keys, asking for the sum at arbitrary
// points: Fold refuses (ErrRefused) exactly the keys its contract names and a
// refusal leaves the stream unchanged; Sum never changes the stream; and the
// result is the SHA-256 of the accepted keys, each followed by a newline.
func FuzzKeyStreamDigest(f *testing.F) {
	f.Add("a/1\x00a/2\x00a/3", []byte{1})
	f.Add("b\x00a\x00c", []byte{0xff})
	f.Add("a\x00a\x00b", []byte{})
	f.Add("\x00x", []byte{1})
	f.Add("a\nb\x00c", []byte{})
	f.Add("k\xff\x00k", []byte{2})
	f.Add("a\x00ab\x00a\x00b", []byte{5})
	f.Fuzz(func(t *testing.T, keys string, sums []byte) {
		var d KeyStreamDigest
		var accepted []string
		for i, key := range strings.Split(keys, "\x00") {
			if i < 8*len(sums) && sums[i/8]&(1<<(i%8)) != 0 {
				got, n := d.Sum()
				require.Equal(t, fzKeysDigest(accepted), got)
				require.Equal(t, uint64(len(accepted)), n)
			}
			refuse := key == "" || !utf8.ValidString(key) || strings.Contains(key, "\n") ||
				(len(accepted) > 0 && key <= accepted[len(accepted)-1])
			err := d.Fold(key)
			if refuse {
				require.ErrorIs(t, err, ErrRefused, "key %q after %q", key, accepted)
				require.True(t, utf8.ValidString(err.Error()), "the refusal is printable: %q", err.Error())
				continue
			}
			require.NoError(t, err, "key %q after %q", key, accepted)
			accepted = append(accepted, key)
		}
		got, n := d.Sum()
		require.Equal(t, fzKeysDigest(accepted), got)
		require.Equal(t, uint64(len(accepted)), n)
		if n == 0 {
			require.Equal(t, EmptyKeysDigest, got)
		}
	})
}

// fzPrefixes are the manifest prefixes FuzzValidateManifestKeyChunks files
// its keys under.
var fzPrefixes = []string{"_meta/c/", "media/c/", "repos/c/"}

// fzChunk splits each prefix's keys into chunks whose sizes cycle through
// sizes (each at least 1); no sizes puts each prefix's keys in one chunk.
func fzChunk(keysOf [][]string, sizes []int) []ManifestKeyChunk {
	var chunks []ManifestKeyChunk
	s := 0
	for j, keys := range keysOf {
		for len(keys) > 0 {
			n := len(keys)
			if len(sizes) > 0 {
				n = min(n, sizes[s%len(sizes)])
				s++
			}
			chunks = append(chunks, ManifestKeyChunk{ChunkNo: int64(len(chunks)), Prefix: fzPrefixes[j], Keys: slices.Clone(keys[:n])})
			keys = keys[n:]
		}
	}
	return chunks
}

// FuzzValidateManifestKeyChunks files arbitrary keys under three prefixes,
// summarizes them as a producer would, and persists them in arbitrary
// chunkings: every chunking of the sorted, unique keys is accepted (the
// digest does not depend on it), and each kind of tampering (a dropped,
// repeated, extra or misplaced key, keys out of order, a gap in the chunk
// numbers, an empty chunk, prefixes out of order) is refused with
// ErrRefused.
func FuzzValidateManifestKeyChunks(f *testing.F) {
	f.Add("1\x002\x00333\x004444\x0055", []byte{2}, byte(0))
	f.Add("a\x00b\x00c\x00d", []byte{1, 3}, byte(2))
	f.Add("x\x00yy\x00zzz\x00x", []byte{}, byte(7))
	f.Add("", []byte{}, byte(0))
	f.Add("k\x00k\x00k\x00\xff", []byte{1}, byte(1))
	f.Add("one\x00two\x00three\x00four\x00five\x00six", []byte{1, 2}, byte(3))
	f.Add("q\x00qq", []byte{1}, byte(4))
	f.Add("q\x00r", []byte{1}, byte(5))
	f.Add("q\x00r\x00s", []byte{1}, byte(6))
	f.Fuzz(func(t *testing.T, rawKeys string, cuts []byte, tamper byte) {
		// Keys under the prefix chosen by their length, sorted and unique:
		// what a listing in ascending key order yields.
		keysOf := make([][]string, len(fzPrefixes))
		if rawKeys != "" {
			for raw := range strings.SplitSeq(rawKeys, "\x00") {
				if !utf8.ValidString(raw) || strings.Contains(raw, "\n") {
					continue
				}
				j := len(raw) % len(fzPrefixes)
				keysOf[j] = append(keysOf[j], fzPrefixes[j]+raw)
			}
		}
		m := StorageManifest{Version: StorageManifestVersion}
		for j := range keysOf {
			slices.Sort(keysOf[j])
			keysOf[j] = slices.Compact(keysOf[j])
			var d KeyStreamDigest
			var size uint64
			for _, key := range keysOf[j] {
				require.NoError(t, d.Fold(key))
				size += uint64(len(key))
			}
			digest, count := d.Sum()
			require.Equal(t, fzKeysDigest(keysOf[j]), digest)
			m.Prefixes = append(m.Prefixes, PrefixManifest{Prefix: fzPrefixes[j], ObjectCount: count, TotalBytes: size, KeysDigest: digest})
		}
		require.NoError(t, ValidateStorageManifest(m))

		sizes := make([]int, len(cuts))
		for i, c := range cuts {
			sizes[i] = int(c%7) + 1
		}
		for _, chunking := range [][]int{sizes, nil, {1}} {
			chunks := fzChunk(keysOf, chunking)
			require.NoError(t, ValidateManifestKeyChunks(m, chunks), "chunk sizes %v", chunking)
			require.Empty(t, fzKeyChunksProblem(m, chunks))
		}

		chunks := fzChunk(keysOf, sizes)
		if len(chunks) == 0 {
			return
		}
		last := &chunks[len(chunks)-1]
		lastKey := last.Keys[len(last.Keys)-1]
		samePrefix := func(i int) bool { return i > 0 && chunks[i-1].Prefix == chunks[i].Prefix }
		tampers := []func() bool{
			func() bool { // drop a key
				last.Keys = last.Keys[:len(last.Keys)-1]
				if len(last.Keys) == 0 {
					chunks = chunks[:len(chunks)-1]
				}
				return true
			},
			func() bool { last.Keys = append(last.Keys, lastKey); return true },     // repeat a key
			func() bool { last.Keys = append(last.Keys, lastKey+"~"); return true }, // an extra key
			func() bool { last.Keys = append(last.Keys, "~"+lastKey); return true }, // a key outside the prefix
			func() bool { last.ChunkNo++; return true },                             // a gap
			func() bool {
				chunks = append(chunks, ManifestKeyChunk{ChunkNo: int64(len(chunks)), Prefix: last.Prefix})
				return true
			}, // an empty chunk
			func() bool { // two keys out of order
				for i := range chunks {
					if len(chunks[i].Keys) > 1 {
						chunks[i].Keys[0], chunks[i].Keys[1] = chunks[i].Keys[1], chunks[i].Keys[0]
						return true
					}
					if samePrefix(i) {
						chunks[i-1].Keys, chunks[i].Keys = chunks[i].Keys, chunks[i-1].Keys
						return true
					}
				}
				return false
			},
			func() bool { // the first prefix's chunks moved to the end
				n := 1
				for n < len(chunks) && samePrefix(n) {
					n++
				}
				if n == len(chunks) {
					return false
				}
				chunks = slices.Concat(chunks[n:], chunks[:n])
				for i := range chunks {
					chunks[i].ChunkNo = int64(i)
				}
				return true
			},
		}
		if !tampers[int(tamper)%len(tampers)]() {
			tampers[0]()
		}
		err := ValidateManifestKeyChunks(m, chunks)
		require.ErrorIs(t, err, ErrRefused, "tampering %d", int(tamper)%len(tampers))
		require.NotEmpty(t, fzKeyChunksProblem(m, chunks))
		require.True(t, utf8.ValidString(err.Error()), "the refusal is printable: %q", err.Error())
	})
}

// FuzzValidateManifestKeyChunksJSON decodes an arbitrary manifest and chunk
// list, as a stored row would be read: ValidateManifestKeyChunks never
// panics, refuses with ErrRefused, and accepts exactly what its contract
// allows.
func FuzzValidateManifestKeyChunksJSON(f *testing.F) {
	f.Add([]byte(`{"manifest":{"version":4,"prefixes":[{"prefix":"a/","keys_digest":"` + EmptyKeysDigest + `"}]},"chunks":[]}`))
	f.Add([]byte(`{"manifest":{"version":4,"prefixes":[{"prefix":"a/","object_count":1,"total_bytes":1,"keys_digest":"` +
		fzKeysDigest([]string{"a/x"}) + `"}]},"chunks":[{"chunk_no":0,"prefix":"a/","keys":["a/x"]}]}`))
	f.Add([]byte(`{"manifest":{"version":4,"prefixes":[{"prefix":"a/","object_count":2,"total_bytes":1,"keys_digest":"` +
		fzKeysDigest([]string{"a/x", "a/y"}) + `"}]},"chunks":[{"chunk_no":0,"prefix":"a/","keys":["a/x"]},{"chunk_no":1,"prefix":"a/","keys":["a/y"]}]}`))
	f.Add([]byte(`{"manifest":{"version":4,"prefixes":[{"prefix":"a/","keys_digest":"` + EmptyKeysDigest + `"},{"prefix":"b/","keys_digest":"` +
		EmptyKeysDigest + `"}]},"chunks":[{"chunk_no":0,"prefix":"b/","keys":[]},{"chunk_no":1,"prefix":"a/","keys":["a/"]}]}`))
	f.Add([]byte(`{"chunks":[{"chunk_no":-1,"prefix":"","keys":null}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var input struct {
			Manifest StorageManifest    `json:"manifest"`
			Chunks   []ManifestKeyChunk `json:"chunks"`
		}
		if json.Unmarshal(data, &input) != nil {
			return
		}
		err := ValidateManifestKeyChunks(input.Manifest, input.Chunks)
		problem := fzKeyChunksProblem(input.Manifest, input.Chunks)
		require.Equal(t, problem == "", err == nil, "oracle says %q, ValidateManifestKeyChunks says %v", problem, err)
		if err != nil {
			require.ErrorIs(t, err, ErrRefused)
		}
	})
}

// FuzzParseStage parses arbitrary stage names: exactly the eleven stages
// parse, the text and JSON encodings round-trip, an unknown name is refused
// with ErrInvalidInput and a short printable message (by ParseStage,
// MarshalText, UnmarshalText and JSON decoding alike, leaving the target
// unchanged), and an unknown stage has no successor and no lifecycle role.
func FuzzParseStage(f *testing.F) {
	for _, s := range Stages() {
		f.Add(string(s))
	}
	for _, s := range []string{"", "Approved", " approved", "approved\x00", "fenced\n", "\xff", strings.Repeat("x", 300), `"approved"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		stage, err := ParseStage(name)
		known := slices.Contains(Stages(), Stage(name))
		require.Equal(t, known, err == nil, "%q: %v", name, err)
		text := StageFenced
		textErr := text.UnmarshalText([]byte(name))
		encoded, marshalErr := Stage(name).MarshalText()
		jsonName, err2 := json.Marshal(name)
		require.NoError(t, err2)
		fromJSON := StageFenced
		jsonErr := json.Unmarshal(jsonName, &fromJSON)

		if !known {
			require.Empty(t, string(stage))
			for _, err := range []error{err, textErr, marshalErr, jsonErr} {
				require.ErrorIs(t, err, ErrInvalidInput)
				require.True(t, utf8.ValidString(err.Error()), "the refusal is printable: %q", err.Error())
				require.LessOrEqual(t, len(err.Error()), 400, "the refusal is bounded")
			}
			if utf8.ValidString(name) {
				require.Equal(t, StageFenced, fromJSON, "a refused JSON stage leaves the target unchanged")
			}
			require.Equal(t, StageFenced, text, "a refused text stage leaves the target unchanged")
			s := Stage(name)
			_, hasNext := s.Next()
			require.False(t, s.Valid() || hasNext || s.Runnable() || s.Terminal() || s.Abortable())
			return
		}
		require.Equal(t, name, stage.String())
		require.NoError(t, textErr)
		require.Equal(t, stage, text)
		require.NoError(t, marshalErr)
		require.Equal(t, name, string(encoded))
		require.NoError(t, jsonErr)
		require.Equal(t, stage, fromJSON)
		out, err := json.Marshal(stage)
		require.NoError(t, err)
		require.Equal(t, jsonName, out)

		// Next walks Stages() in order, stopping at the terminal stages.
		next, ok := stage.Next()
		i := slices.Index(Stages(), stage)
		require.Equal(t, !stage.Terminal(), ok)
		if ok {
			require.Equal(t, Stages()[i+1], next)
		}
		require.False(t, stage.Terminal() && (stage.Runnable() || stage.Abortable()))
	})
}
