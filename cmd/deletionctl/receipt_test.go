package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/fixture"
	"github.com/tombstoneworks/communitydeletion/receipt"
)

// deleteCommunity runs one deletion end to end through the CLI (submit,
// inventory of its files, approve, run --once with runArgs) and returns the
// request id.
func (db *testDB) deleteCommunity(t *testing.T, runArgs ...string) string {
	t.Helper()
	community, host := db.createCommunity(t)
	dir, _ := writeFiles(t, community, 2)
	id := db.submit(t, host, "alice")
	db.ok(t, "inventory", "--request", id, "--objects-dir", dir)
	db.okAs(t, fixture.RoleApprover, "approve", "--request", id, "--by", "bob")
	args := append([]string{"run", "--once", "--objects-dir", dir, "--cache", "memory:", "--request", id}, runArgs...)
	require.Equal(t, "completed", lastMessage(t, db.ok(t, args...)))
	return id
}

// offline is a database URL nothing answers at: a command that connects
// with it fails.
const offline = "postgres://nobody@127.0.0.1:1/none?connect_timeout=1"

// Two signed deletions produce receipts 1 and 2, which show prints, export
// writes and verify accepts offline with the public key; a field edited in
// a file fails naming the receipt; an executor without the key is refused,
// the third receipt verifies up to the head, and a range verifies only from
// its given start.
func TestReceiptShowExportVerify(t *testing.T) {
	t.Parallel()
	db := setup(t)
	keys := t.TempDir()
	priv, pub := filepath.Join(keys, "receipt.key"), filepath.Join(keys, "receipt.pub")
	pubKey, _, err := receipt.GenerateKey(priv, pub)
	require.NoError(t, err)

	first := db.deleteCommunity(t, "--receipt-key", priv)
	second := db.deleteCommunity(t, "--receipt-key", priv)

	shown := db.ok(t, "receipt", "show", second)
	require.Contains(t, shown, `"request_id": "`+second+`"`)
	require.Contains(t, shown, `"sequence": 2`)
	require.Contains(t, shown, `"signer": "`+receipt.KeyID(pubKey)+`"`)
	require.Contains(t, shown, "\nsignature: ")
	require.NotContains(t, shown, "(unsigned)")

	export := filepath.Join(t.TempDir(), "receipts")
	require.Equal(t, "exported 2 receipts (1 to 2) to "+export+"\n", db.ok(t, "receipt", "export", "--dir", export))
	require.Equal(t, "exported 2 receipts (1 to 2) to "+export+"\n", db.ok(t, "receipt", "export", "--dir", export), "exporting again changes nothing")

	// verify never connects: not to an unreachable database, nor with none.
	for _, global := range [][]string{{"--database-url", offline}, nil} {
		code, stdout, stderr := cli(t, append(global, "receipt", "verify", "--dir", export, "--public-key", pub)...)
		require.Equal(t, exitOK, code, stderr)
		require.Empty(t, stderr)
		lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
		require.Len(t, lines, 3)
		require.True(t, strings.HasPrefix(lines[0], "ok receipt 1 request "+first+" signed by "+receipt.KeyID(pubKey)), lines[0])
		require.True(t, strings.HasPrefix(lines[1], "ok receipt 2 request "+second), lines[1])
		require.True(t, strings.HasPrefix(lines[2], "verified 2 receipts (1 to 2): 2 signed with key "+receipt.KeyID(pubKey)), lines[2])
		require.Contains(t, lines[2], "from the chain's first receipt, with no head given")
	}

	// An edited field fails, naming the receipt and the reason.
	tampered := t.TempDir()
	names, err := filepath.Glob(filepath.Join(export, "*"+receipt.FileSuffix))
	require.NoError(t, err)
	require.Len(t, names, 2)
	for _, name := range names {
		data, err := os.ReadFile(name)
		require.NoError(t, err)
		if strings.HasPrefix(filepath.Base(name), "0000000002-") {
			edited := strings.Replace(string(data), `"name":"bob"`, `"name":"eve"`, 1)
			require.NotEqual(t, string(data), edited)
			data = []byte(edited)
		}
		require.NoError(t, os.WriteFile(filepath.Join(tampered, filepath.Base(name)), data, 0o644))
	}
	code, stdout, stderr := cli(t, "--database-url", offline, "receipt", "verify", "--dir", tampered, "--public-key", pub)
	require.Equal(t, exitRefused, code)
	require.Empty(t, stdout)
	requireOneLine(t, stderr, "refused: receipt verification failed at receipt 2, request "+second, "signature does not verify")

	// Export refuses to overwrite evidence that differs.
	code, _, stderr = db.cli(t, "receipt", "export", "--dir", tampered)
	require.Equal(t, exitFailure, code)
	requireOneLine(t, stderr, "already exists with other content")

	// An executor without the key is refused; with it, receipt 3 follows,
	// and the export verifies up to the head.
	community, host := db.createCommunity(t)
	dir, _ := writeFiles(t, community, 1)
	third := db.submit(t, host, "alice")
	db.ok(t, "inventory", "--request", third, "--objects-dir", dir)
	db.okAs(t, fixture.RoleApprover, "approve", "--request", third, "--by", "bob")
	code, _, stderr = db.cli(t, "run", "--once", "--objects-dir", dir, "--cache", "memory:", "--request", third)
	require.Equal(t, exitRefused, code)
	requireOneLine(t, stderr, "the receipt chain is signed by key "+receipt.KeyID(pubKey)+" up to receipt 2, but this executor has no signing key")
	require.Equal(t, "completed", lastMessage(t, db.ok(t, "run", "--once", "--objects-dir", dir, "--cache", "memory:", "--request", third, "--receipt-key", priv)))
	require.Equal(t, "exported 1 receipts (3 to 3) to "+export+"\n", db.ok(t, "receipt", "export", "--dir", export, "--after", "2"))
	head := db.ok(t, "receipt", "head")
	require.Regexp(t, `^head receipt 3 hash [0-9a-f]{64} at \S+Z signer `+receipt.KeyID(pubKey)+"\nexpect-head 3:[0-9a-f]{64}\n$", head)
	value := strings.TrimPrefix(strings.Split(head, "\n")[1], "expect-head ")
	code, stdout, stderr = cli(t, "receipt", "verify", "--dir", export, "--public-key", pub, "--expect-head", value)
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stdout, "ok receipt 3 request "+third+" signed by "+receipt.KeyID(pubKey))
	require.Contains(t, stdout, "verified 3 receipts (1 to 3): 3 signed with key "+receipt.KeyID(pubKey)+", 0 unsigned, 0 key rotations; from the chain's first receipt, to the expected head "+value)

	// A range: --after and --limit; it verifies only from its given start.
	part := t.TempDir()
	require.Equal(t, "exported 1 receipts (2 to 2) to "+part+"\n", db.ok(t, "receipt", "export", "--dir", part, "--after", "1", "--limit", "1"))
	code, _, stderr = cli(t, "receipt", "verify", "--dir", part, "--public-key", pub)
	require.Equal(t, exitRefused, code)
	requireOneLine(t, stderr, "receipt 1 is missing", "--from-sequence")
	firstFile, err := filepath.Glob(filepath.Join(export, "0000000001-*"))
	require.NoError(t, err)
	env, err := os.ReadFile(firstFile[0])
	require.NoError(t, err)
	parsed, err := receipt.UnmarshalEnvelope(env)
	require.NoError(t, err)
	code, _, stderr = cli(t, "receipt", "verify", "--dir", part, "--public-key", pub, "--from-sequence", "2", "--previous-hash", parsed.Hash())
	require.Equal(t, exitOK, code, stderr)

	code, _, stderr = db.cli(t, "receipt", "show", db.submit(t, func() string { _, host := db.createCommunity(t); return host }(), "carol"))
	require.Equal(t, exitNotFound, code)
	requireOneLine(t, stderr, "has no receipt")
}

// A deployment that never had a key: its receipts say they are unsigned and
// verify only with --allow-unsigned; an empty chain has no head.
func TestReceiptUnsignedDeploymentVerifiesOnlyWithAllowUnsigned(t *testing.T) {
	t.Parallel()
	db := setup(t)
	_, pub := receiptKeys(t)
	code, _, stderr := db.cli(t, "receipt", "head")
	require.Equal(t, exitNotFound, code)
	requireOneLine(t, stderr, "the receipt chain is empty")
	id := db.deleteCommunity(t)
	require.Contains(t, db.ok(t, "receipt", "show", id), "signature: (unsigned)")
	export := t.TempDir()
	db.ok(t, "receipt", "export", "--dir", export)
	code, _, stderr = cli(t, "receipt", "verify", "--dir", export, "--public-key", pub)
	require.Equal(t, exitRefused, code)
	requireOneLine(t, stderr, "at receipt 1, request "+id, "unsigned")
	code, stdout, stderr := cli(t, "receipt", "verify", "--dir", export, "--public-key", pub, "--allow-unsigned")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stdout, "ok receipt 1 request "+id+" unsigned (allowed)")
	require.Contains(t, stdout, "verified 1 receipts (1 to 1): 0 signed with no key, 1 unsigned")
}

// An unreadable receipt key or public key is a usage error before anything
// connects, and quotes no key material.
func TestReceiptKeyErrors(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "missing.key")
	code, _, stderr := cli(t, "--database-url", offline, "run", "--once", "--objects-dir", t.TempDir(), "--cache", "memory:", "--receipt-key", missing)
	require.Equal(t, exitUsage, code)
	requireOneLine(t, stderr, "run: --receipt-key", "missing.key")

	bad := filepath.Join(t.TempDir(), "bad.key")
	require.NoError(t, os.WriteFile(bad, []byte("c2VjcmV0LW5vdC1hLWtleQ=="), 0o600))
	code, _, stderr = cli(t, "--database-url", offline, "run", "--once", "--objects-dir", t.TempDir(), "--cache", "memory:", "--receipt-key", bad)
	require.Equal(t, exitUsage, code)
	requireOneLine(t, stderr, "neither a PEM PKCS#8 Ed25519 key nor a base64 32-byte seed")
	require.NotContains(t, stderr, "c2VjcmV0")

	code, _, stderr = cli(t, "receipt", "verify", "--dir", t.TempDir(), "--public-key", missing)
	require.Equal(t, exitUsage, code)
	requireOneLine(t, stderr, "--public-key")

	cfg, err := parseArgs([]string{"run", "--objects-dir", "/x", "--cache", "memory:"}, env(map[string]string{envReceiptKey: "seed"}))
	require.NoError(t, err)
	require.Equal(t, "seed", cfg.receiptEnv, "the key comes from the environment")
	cfg, err = parseArgs([]string{"run", "--objects-dir", "/x", "--cache", "memory:", "--receipt-key", "k"}, env(map[string]string{envReceiptKey: "seed"}))
	require.NoError(t, err)
	require.Equal(t, "k", cfg.receiptKey)
	require.Empty(t, cfg.receiptEnv, "the flag wins")
	_, err = receiptKey(config{receiptEnv: "not a key"})
	require.ErrorContains(t, err, "$"+envReceiptKey)

	for _, args := range [][]string{
		{"receipt"}, {"receipt", "sign"}, {"receipt", "show"}, {"receipt", "show", "not-a-uuid"},
		{"receipt", "export"}, {"receipt", "export", "--dir", "d", "--after", "-1"},
		{"receipt", "export", "--dir", "d", "--limit", "0"}, {"receipt", "verify", "--dir", "d"},
		{"receipt", "verify", "--dir", "d", "--public-key", "k", "--limit", "3"},
		{"receipt", "verify", "--dir", "d", "--public-key", "k", "--from-sequence", "2"},
		{"receipt", "verify", "--dir", "d", "--public-key", "k", "--previous-hash", strings.Repeat("a", 64)},
		{"receipt", "verify", "--dir", "d", "--public-key", "k", "--from-sequence", "1", "--previous-hash", strings.Repeat("a", 64)},
		{"receipt", "verify", "--dir", "d", "--public-key", "k", "--from-sequence", "2", "--previous-hash", "abc"},
		{"receipt", "head", "--dir", "d"}, {"receipt", "rotate"}, {"receipt", "rotate", "--old-key", ""},
	} {
		code, _, stderr := cli(t, args...)
		require.Equal(t, exitUsage, code, "%q: %s", args, stderr)
		requireOneLine(t, stderr)
	}
}
