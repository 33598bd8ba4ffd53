package lifecycle

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"hash"
	"slices"
	"strings"
	"unicode/utf8"
)

// StorageManifestVersion is the only StorageManifest.Version this package
// accepts.
const StorageManifestVersion = 4

// EmptyKeysDigest is the keys digest of a prefix with no objects: the hex
// SHA-256 of the empty key stream, and what Sum returns on a zero
// KeyStreamDigest.
const EmptyKeysDigest = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

// SchemaManifest is the frozen PostgreSQL side of a community's inventory.
type SchemaManifest struct {
	// ScopedTables are the community-scoped tables the purge covers, sorted.
	ScopedTables []string `json:"scoped_tables"`
	// RowCounts are the community's row counts per scoped table.
	RowCounts map[string]int64 `json:"row_counts"`
	// FencedTables are the tables carrying the write-fence trigger, sorted.
	FencedTables []string `json:"fenced_tables"`
	// NullifyTables are the scoped tables whose rows are kept with their
	// community reference cleared instead of deleted, sorted.
	NullifyTables []string `json:"nullify_tables"`
}

// PrefixManifest is the frozen summary of the objects under one
// community-scoped object-store key prefix.
type PrefixManifest struct {
	// Prefix is the exact listing prefix. It is never empty.
	Prefix string `json:"prefix"`
	// ObjectCount is the number of objects under Prefix when it was listed.
	ObjectCount uint64 `json:"object_count"`
	// TotalBytes is the total size of those objects.
	TotalBytes uint64 `json:"total_bytes"`
	// KeysDigest is the lowercase hex SHA-256 of the prefix's key stream as
	// computed by KeyStreamDigest.
	KeysDigest string `json:"keys_digest"`
}

// StorageManifest is the frozen object-store side of a community's
// inventory: one summary per tenant prefix. The key lists themselves are not
// part of it; they are persisted separately as ManifestKeyChunk rows that
// must hash to these summaries (see ValidateManifestKeyChunks).
type StorageManifest struct {
	// Version is the manifest format version, StorageManifestVersion.
	Version int `json:"version"`
	// Prefixes are the per-prefix summaries, strictly sorted by Prefix.
	Prefixes []PrefixManifest `json:"prefixes"`
	// KeySources are the summaries of the object keys listed in a column of
	// the tenant's rows (storage layout kind object_keys), strictly sorted
	// by Source. Omitted when there are none, so that inventories frozen
	// before key sources existed keep their digests.
	KeySources []KeySourceManifest `json:"key_sources,omitempty"`
}

// KeySourceManifest is the frozen summary of the object keys one declared
// key source (schema.table.column) lists for a tenant: its rows' distinct,
// non-empty values of the column.
type KeySourceManifest struct {
	// Source is the layout's template, schema.table.column.
	Source string `json:"source"`
	// ObjectCount is the number of distinct keys listed.
	ObjectCount uint64 `json:"object_count"`
	// KeysDigest is the lowercase hex SHA-256 of the keys in strictly
	// ascending byte order, as KeyStreamDigest computes it.
	KeysDigest string `json:"keys_digest"`
}

// FrozenInventory is the whole inventory an operator approves before any
// destructive stage runs. The approval binds to its Digest.
type FrozenInventory struct {
	// Schema is the PostgreSQL catalog state.
	Schema SchemaManifest `json:"schema"`
	// Storage is the object-store state.
	Storage StorageManifest `json:"storage"`
}

// Digest returns the SHA-256 of the inventory's canonical encoding, the
// value an approval binds to.
//
// The canonical encoding is compact JSON (no insignificant white space) with
// struct fields in declaration order under their json tag names, map keys
// sorted bytewise, nil slices and maps written as [] and {}, integers in
// decimal, and strings escaped as encoding/json does with HTML escaping
// turned off. It is a stored contract: approvals of inventories already in
// the database depend on it, so it must never change. A string that is not
// valid UTF-8 would not encode unambiguously and returns an error matching
// ErrInvalidInput.
func (inv FrozenInventory) Digest() ([32]byte, error) {
	canonical, err := inv.canonicalJSON()
	if err != nil {
		return [32]byte{}, err
	}
	return sha256.Sum256(canonical), nil
}

// canonicalJSON returns the canonical encoding Digest hashes.
func (inv FrozenInventory) canonicalJSON() ([]byte, error) {
	c := inv
	c.Schema.ScopedTables = nonNilSlice(c.Schema.ScopedTables)
	c.Schema.FencedTables = nonNilSlice(c.Schema.FencedTables)
	c.Schema.NullifyTables = nonNilSlice(c.Schema.NullifyTables)
	if c.Schema.RowCounts == nil {
		c.Schema.RowCounts = map[string]int64{}
	}
	c.Storage.Prefixes = nonNilSlice(c.Storage.Prefixes)

	if err := c.checkUTF8(); err != nil {
		return nil, err
	}

	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(c); err != nil {
		return nil, invalidf("encode frozen inventory: %w", err)
	}
	// Encode terminates its output with a newline; the canonical form has none.
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// checkUTF8 refuses any string that encoding/json would silently rewrite.
func (inv FrozenInventory) checkUTF8() error {
	lists := [][]string{inv.Schema.ScopedTables, inv.Schema.FencedTables, inv.Schema.NullifyTables}
	for _, list := range lists {
		for _, s := range list {
			if !utf8.ValidString(s) {
				return invalidf("frozen inventory table name %q is not valid UTF-8", boundText(s, 64))
			}
		}
	}
	for table := range inv.Schema.RowCounts {
		if !utf8.ValidString(table) {
			return invalidf("frozen inventory row count key %q is not valid UTF-8", boundText(table, 64))
		}
	}
	for _, p := range inv.Storage.Prefixes {
		if !utf8.ValidString(p.Prefix) || !utf8.ValidString(p.KeysDigest) {
			return invalidf("frozen inventory prefix %q is not valid UTF-8", boundText(p.Prefix, 64))
		}
	}
	for _, k := range inv.Storage.KeySources {
		if !utf8.ValidString(k.Source) || !utf8.ValidString(k.KeysDigest) {
			return invalidf("frozen inventory key source %q is not valid UTF-8", boundText(k.Source, 64))
		}
	}
	return nil
}

func nonNilSlice[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// ManifestKeyChunk is one persisted chunk of the destructive key list: a run
// of keys under a single prefix.
type ManifestKeyChunk struct {
	// ChunkNo is the chunk's position in the sequence, counting from 0.
	ChunkNo int64 `json:"chunk_no"`
	// Prefix is the manifest prefix every key in the chunk lies under.
	Prefix string `json:"prefix"`
	// Keys are the chunk's object keys, strictly ascending.
	Keys []string `json:"keys"`
}

// KeyStreamDigest computes a prefix's keys digest: the SHA-256 of its keys
// in strictly ascending byte order (the order of S3 ListObjectsV2), each
// followed by a newline. The zero value is an empty stream ready to use.
//
// The digest depends only on the sequence of keys, not on how the caller
// splits it into batches or chunks, which is what lets a chunked, persisted
// key list be checked against a summary taken from a single listing. A
// KeyStreamDigest must not be copied after its first Fold.
type KeyStreamDigest struct {
	h     hash.Hash
	last  string
	count uint64
}

// Fold appends key to the stream. A key that does not sort strictly after
// the previous one (out of order or repeated), an empty key, a key that is
// not valid UTF-8 and a key containing a newline are refused with an error
// matching ErrRefused and leave the stream unchanged: each would otherwise
// yield a digest that no longer identifies exactly one key list.
func (d *KeyStreamDigest) Fold(key string) error {
	switch {
	case key == "":
		return refusef("storage key stream contains an empty key")
	case !utf8.ValidString(key):
		return refusef("storage key %q is not valid UTF-8", boundText(key, 256))
	case strings.IndexByte(key, '\n') >= 0:
		return refusef("storage key %q contains a newline", boundText(key, 256))
	case d.count > 0 && key == d.last:
		return refusef("storage key stream repeats key %q", boundText(key, 256))
	case d.count > 0 && key < d.last:
		return refusef("storage key stream is not strictly ascending at %q", boundText(key, 256))
	}
	if d.h == nil {
		d.h = sha256.New()
	}
	d.h.Write([]byte(key))
	d.h.Write([]byte{'\n'})
	d.last = key
	d.count++
	return nil
}

// Sum returns the lowercase hex digest and the number of keys folded so far.
// It does not change the stream; more keys may be folded afterwards.
func (d *KeyStreamDigest) Sum() (hexDigest string, count uint64) {
	if d.h == nil {
		return EmptyKeysDigest, 0
	}
	return hex.EncodeToString(d.h.Sum(nil)), d.count
}

// ValidateStorageManifest checks the shape of a storage manifest before it is
// frozen or used. It requires version StorageManifestVersion, at least one
// prefix, no empty prefix (it would name the whole bucket), prefixes in
// strictly ascending order with none nested inside its predecessor (their
// keys would be listed twice), lowercase hex SHA-256 keys digests, and
// summaries that agree on emptiness: a prefix with no objects has zero bytes
// and EmptyKeysDigest, and only such a prefix has EmptyKeysDigest. Failures
// match ErrInvalidInput and name the offending prefix.
func ValidateStorageManifest(m StorageManifest) error {
	if m.Version != StorageManifestVersion {
		return invalidf("unsupported storage manifest version %d (want %d)", m.Version, StorageManifestVersion)
	}
	if len(m.Prefixes) == 0 && len(m.KeySources) == 0 {
		return invalidf("storage manifest has no tenant prefixes and no key sources")
	}
	for i, k := range m.KeySources {
		name := boundText(k.Source, 256)
		switch {
		case k.Source == "" || !utf8.ValidString(k.Source) || strings.HasSuffix(k.Source, "/"):
			return invalidf("storage manifest key source #%d %q is not schema.table.column", i, name)
		case i > 0 && k.Source <= m.KeySources[i-1].Source:
			return invalidf("storage manifest key sources are not strictly sorted: %q follows %q", name, boundText(m.KeySources[i-1].Source, 256))
		case !isLowerHexSHA256(k.KeysDigest):
			return invalidf("storage manifest keys digest for key source %q is not lowercase hex SHA-256", name)
		case (k.ObjectCount == 0) != (k.KeysDigest == EmptyKeysDigest):
			return invalidf("storage manifest summary for key source %q is inconsistent: %d keys, keys digest %s", name, k.ObjectCount, k.KeysDigest)
		}
	}
	for i, p := range m.Prefixes {
		name := boundText(p.Prefix, 256)
		switch {
		case p.Prefix == "":
			return invalidf("storage manifest prefix #%d is empty and would name the whole bucket", i)
		case !utf8.ValidString(p.Prefix):
			return invalidf("storage manifest prefix %q is not valid UTF-8", name)
		}
		if i > 0 {
			prev := m.Prefixes[i-1].Prefix
			if p.Prefix <= prev {
				return invalidf("storage manifest prefixes are not strictly sorted: %q follows %q", name, boundText(prev, 256))
			}
			// In sorted order a prefix nested in any earlier one is nested
			// in its immediate predecessor, so one comparison suffices.
			if strings.HasPrefix(p.Prefix, prev) {
				return invalidf("storage manifest prefix %q is nested in prefix %q", name, boundText(prev, 256))
			}
		}
		if !isLowerHexSHA256(p.KeysDigest) {
			return invalidf("storage manifest keys digest for prefix %q is not lowercase hex SHA-256", name)
		}
		empty := p.ObjectCount == 0
		if empty != (p.KeysDigest == EmptyKeysDigest) || (empty && p.TotalBytes != 0) {
			return invalidf("storage manifest summary for prefix %q is inconsistent: %d objects, %d bytes, keys digest %s",
				name, p.ObjectCount, p.TotalBytes, p.KeysDigest)
		}
	}
	return nil
}

func isLowerHexSHA256(s string) bool {
	if len(s) != 2*sha256.Size {
		return false
	}
	for i := range len(s) {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// ValidateManifestKeyChunks checks that persisted key chunks are exactly the
// enumeration m summarizes. Chunk numbers must run 0, 1, 2, … without gaps;
// chunks must come grouped by prefix in the manifest's prefix order, then
// by key source (a chunk's Prefix is the source's name) in source order; no
// chunk may be empty; every key of a prefix's chunk must lie under the
// prefix; and for every prefix and source the keys of its chunks, in order,
// must reproduce the manifest's keys digest and object count, so one without
// chunks must be summarized as empty. The manifest itself must pass
// ValidateStorageManifest. Failures match ErrRefused.
func ValidateManifestKeyChunks(m StorageManifest, chunks []ManifestKeyChunk) error {
	if err := ValidateStorageManifest(m); err != nil {
		return refusef("destructive storage manifest is malformed: %w", err)
	}
	entries := manifestEntries(m)

	// next is the index of the entry the next chunk may open; current is the
	// entry being folded, or nil before the first chunk.
	next := 0
	var current *manifestEntry
	var digest KeyStreamDigest

	for i, chunk := range chunks {
		if chunk.ChunkNo != int64(i) {
			return refusef("frozen key chunk sequence has a gap: chunk #%d is numbered %d", i, chunk.ChunkNo)
		}
		if current == nil || chunk.Prefix != current.name {
			if current != nil {
				if err := current.close(&digest); err != nil {
					return err
				}
			}
			// The chunk must open an entry not yet visited: one outside the
			// manifest, or revisiting an earlier one, is out of order.
			j := slices.IndexFunc(entries[next:], func(e manifestEntry) bool { return e.name == chunk.Prefix })
			if j < 0 {
				return refusef("frozen key chunk %d has prefix %q, which is not a later prefix or key source of the destructive manifest",
					chunk.ChunkNo, boundText(chunk.Prefix, 256))
			}
			// Entries skipped over have no chunks; each must be empty.
			for ; j > 0; j-- {
				if err := entries[next].close(&KeyStreamDigest{}); err != nil {
					return err
				}
				next++
			}
			current = &entries[next]
			next++
			digest = KeyStreamDigest{}
		}
		if len(chunk.Keys) == 0 {
			return refusef("frozen key chunk %d is empty", chunk.ChunkNo)
		}
		for _, key := range chunk.Keys {
			if current.prefix && !strings.HasPrefix(key, chunk.Prefix) {
				return refusef("frozen key %q in chunk %d is outside its prefix %q",
					boundText(key, 256), chunk.ChunkNo, boundText(chunk.Prefix, 256))
			}
			if err := digest.Fold(key); err != nil {
				return err
			}
		}
	}
	if current != nil {
		if err := current.close(&digest); err != nil {
			return err
		}
	}
	for ; next < len(entries); next++ {
		if err := entries[next].close(&KeyStreamDigest{}); err != nil {
			return err
		}
	}
	return nil
}

// manifestEntry is one prefix or key source of a storage manifest, in the
// order of its chunks.
type manifestEntry struct {
	name   string
	prefix bool
	count  uint64
	digest string
}

// manifestEntries lists m's prefixes, then its key sources.
func manifestEntries(m StorageManifest) []manifestEntry {
	entries := make([]manifestEntry, 0, len(m.Prefixes)+len(m.KeySources))
	for _, p := range m.Prefixes {
		entries = append(entries, manifestEntry{name: p.Prefix, prefix: true, count: p.ObjectCount, digest: p.KeysDigest})
	}
	for _, k := range m.KeySources {
		entries = append(entries, manifestEntry{name: k.Source, count: k.ObjectCount, digest: k.KeysDigest})
	}
	return entries
}

// close refuses unless digest reproduces the entry's digest and count.
func (e *manifestEntry) close(digest *KeyStreamDigest) error {
	hexDigest, count := digest.Sum()
	if hexDigest != e.digest || count != e.count {
		what := "key source"
		if e.prefix {
			what = "prefix"
		}
		return refusef("frozen key chunks for %s %q do not match the destructive manifest: %d keys hashing to %s, manifest has %d keys hashing to %s",
			what, boundText(e.name, 256), count, hexDigest, e.count, e.digest)
	}
	return nil
}

// ValidateSchemaManifest checks the shape of a schema manifest: at least one
// scoped table; every table list strictly sorted (hence free of duplicates)
// and without empty or non-UTF-8 names; nullify tables a subset of the scoped
// tables; and row counts keyed only by scoped tables and never negative.
// Whether the tables match the live catalog is checked against the database,
// not here. Failures match ErrInvalidInput.
func ValidateSchemaManifest(m SchemaManifest) error {
	if len(m.ScopedTables) == 0 {
		return invalidf("schema manifest has no scoped tables")
	}
	lists := []struct {
		what   string
		tables []string
	}{
		{"scoped_tables", m.ScopedTables},
		{"fenced_tables", m.FencedTables},
		{"nullify_tables", m.NullifyTables},
	}
	for _, list := range lists {
		if err := checkTableList(list.what, list.tables); err != nil {
			return err
		}
	}
	for _, table := range m.NullifyTables {
		if _, ok := slices.BinarySearch(m.ScopedTables, table); !ok {
			return invalidf("schema manifest nullify table %q is not a scoped table", boundText(table, 256))
		}
	}
	// Visit row counts in sorted order so the reported table is deterministic.
	tables := make([]string, 0, len(m.RowCounts))
	for table := range m.RowCounts {
		tables = append(tables, table)
	}
	slices.Sort(tables)
	for _, table := range tables {
		if _, ok := slices.BinarySearch(m.ScopedTables, table); !ok {
			return invalidf("schema manifest has a row count for %q, which is not a scoped table", boundText(table, 256))
		}
		if n := m.RowCounts[table]; n < 0 {
			return invalidf("schema manifest row count for %q is negative (%d)", boundText(table, 256), n)
		}
	}
	return nil
}

func checkTableList(what string, tables []string) error {
	for i, table := range tables {
		switch {
		case table == "":
			return invalidf("schema manifest %s entry #%d is empty", what, i)
		case !utf8.ValidString(table):
			return invalidf("schema manifest %s entry %q is not valid UTF-8", what, boundText(table, 256))
		case i > 0 && table <= tables[i-1]:
			return invalidf("schema manifest %s are not strictly sorted: %q follows %q",
				what, boundText(table, 256), boundText(tables[i-1], 256))
		}
	}
	return nil
}
