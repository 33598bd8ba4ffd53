package main

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/fixture"
	"github.com/tombstoneworks/communitydeletion/receipt"
)

// receiptKeys writes a new signing key (mode 0600) and its public key into
// a temporary directory and returns their paths.
func receiptKeys(t *testing.T) (priv, pub string) {
	t.Helper()
	dir := t.TempDir()
	priv, pub = filepath.Join(dir, "receipt.key"), filepath.Join(dir, "receipt.pub")
	_, _, err := receipt.GenerateKey(priv, pub)
	require.NoError(t, err)
	return priv, pub
}

// An export with its first receipt removed fails verification with one
// line naming what is missing; the whole export verifies.
func TestReceiptVerifyRefusesAnExportWithoutItsFirstReceipt(t *testing.T) {
	t.Parallel()
	db := setup(t)
	priv, pub := receiptKeys(t)
	db.deleteCommunity(t, "--receipt-key", priv)
	second := db.deleteCommunity(t, "--receipt-key", priv)
	export := filepath.Join(t.TempDir(), "receipts")
	db.ok(t, "receipt", "export", "--dir", export)
	code, _, stderr := cli(t, "receipt", "verify", "--dir", export, "--public-key", pub)
	require.Equal(t, exitOK, code, stderr)

	names, err := filepath.Glob(filepath.Join(export, "0000000001-*"+receipt.FileSuffix))
	require.NoError(t, err)
	require.Len(t, names, 1)
	require.NoError(t, os.Remove(names[0]))
	code, stdout, stderr := cli(t, "receipt", "verify", "--dir", export, "--public-key", pub)
	require.Equal(t, exitRefused, code, stdout)
	require.Empty(t, stdout)
	requireOneLine(t, stderr, "refused: receipt verification failed at receipt 2, request "+second, "receipt 1 is missing")
}

// With a cache layout declared, an executor given the in-memory cache
// (which lists nothing of the declared layout) refuses to run: it never
// completes the deletion, so no receipt claims the cache verified.
func TestReceiptNeverClaimsAMemoryCacheVerifiedUnderADeclaredCacheLayout(t *testing.T) {
	t.Parallel()
	db := setup(t)
	_, err := db.pool.Exec(t.Context(), `INSERT INTO community_deletion.community_deletion_storage_layout (kind, template, reason)
		VALUES ('cache', 'ws:{tenant}:*', 'test: the service caches workspaces')`)
	require.NoError(t, err)
	community, host := db.createCommunity(t)
	dir, _ := writeFiles(t, community, 2)
	id := db.submit(t, host, "alice")
	db.ok(t, "inventory", "--request", id, "--objects-dir", dir)
	db.okAs(t, fixture.RoleApprover, "approve", "--request", id, "--by", "bob")

	code, _, stderr := db.cli(t, "run", "--once", "--objects-dir", dir, "--cache", "memory:", "--request", id)
	require.Equal(t, exitRefused, code)
	requireOneLine(t, stderr, "memory:", "ws:{tenant}:*", "pattern=")
	code, _, _ = db.cli(t, "receipt", "show", id)
	require.Equal(t, exitNotFound, code, "the deletion did not complete")
	var stage string
	require.NoError(t, db.pool.QueryRow(t.Context(), "SELECT stage FROM community_deletion.community_deletion_requests WHERE id = $1", id).Scan(&stage))
	require.Equal(t, "approved", stage, "nothing was fenced or deleted")
}

// An executor without its key, in a deployment whose chain is signed,
// refuses to run rather than append an unsigned receipt after a signed one.
func TestReceiptExecutorWithoutTheKeyOfASignedChainRefusesToRun(t *testing.T) {
	t.Parallel()
	db := setup(t)
	priv, _ := receiptKeys(t)
	db.deleteCommunity(t, "--receipt-key", priv)

	community, host := db.createCommunity(t)
	dir, _ := writeFiles(t, community, 1)
	id := db.submit(t, host, "alice")
	db.ok(t, "inventory", "--request", id, "--objects-dir", dir)
	db.okAs(t, fixture.RoleApprover, "approve", "--request", id, "--by", "bob")
	code, _, stderr := db.cli(t, "run", "--once", "--objects-dir", dir, "--cache", "memory:", "--request", id)
	require.Equal(t, exitRefused, code)
	requireOneLine(t, stderr, "signed by key", "--receipt-key")
	var n int
	require.NoError(t, db.pool.QueryRow(t.Context(), "SELECT count(*) FROM community_deletion.community_deletion_receipts").Scan(&n))
	require.Equal(t, 1, n, "no unsigned receipt was appended")
}

// A signing key file that its group or others may read is refused before
// anything connects, as ssh refuses such a key.
func TestReceiptKeyFileReadableByOthersIsRefused(t *testing.T) {
	t.Parallel()
	priv, _ := receiptKeys(t)
	for _, mode := range []os.FileMode{0o640, 0o604, 0o644} {
		require.NoError(t, os.Chmod(priv, mode))
		code, _, stderr := cli(t, "--database-url", offline, "run", "--once", "--objects-dir", t.TempDir(), "--cache", "memory:", "--receipt-key", priv)
		require.Equal(t, exitUsage, code, stderr)
		requireOneLine(t, stderr, priv, fmt.Sprintf("mode %04o", mode), "chmod 600 "+priv)
	}
}

// approved creates a community with a file, submits, inventories and
// approves its deletion, and returns the request id and the files' root.
func (db *testDB) approved(t *testing.T) (id, dir string) {
	t.Helper()
	community, host := db.createCommunity(t)
	dir, _ = writeFiles(t, community, 1)
	id = db.submit(t, host, "alice")
	db.ok(t, "inventory", "--request", id, "--objects-dir", dir)
	db.okAs(t, fixture.RoleApprover, "approve", "--request", id, "--by", "bob")
	return id, dir
}

// register records, as the schema's owner, that receipts are signed with
// the public key in file pub, or (pub empty) that the deployment runs
// unsigned.
func (db *testDB) register(t *testing.T, pub, reason string) {
	t.Helper()
	if pub == "" {
		_, err := db.pool.Exec(t.Context(), "INSERT INTO community_deletion.community_deletion_receipt_keys (action, reason) VALUES ('unsigned', $1)", reason)
		require.NoError(t, err)
		return
	}
	key, err := receipt.LoadPublicKey(pub)
	require.NoError(t, err)
	_, err = db.pool.Exec(t.Context(), "INSERT INTO community_deletion.community_deletion_receipt_keys (action, public_key, reason) VALUES ('sign', $1, $2)",
		base64.StdEncoding.EncodeToString(key), reason)
	require.NoError(t, err)
}

// keyID is the key id of the public key in file pub.
func keyID(t *testing.T, pub string) string {
	t.Helper()
	key, err := receipt.LoadPublicKey(pub)
	require.NoError(t, err)
	return receipt.KeyID(key)
}

// With key A registered, an executor without it or with another key
// refuses to start; after the owner registers key B, the executor with B
// refuses until the chain is handed on by a rotation signed by A; then one
// verify call, given A's public key only, checks the whole chain up to the
// head. Without the rotation entry, or without its last receipt (given the
// head), the export fails.
func TestReceiptRotationIsVerifiedInOneCall(t *testing.T) {
	t.Parallel()
	db := setup(t)
	privA, pubA := receiptKeys(t)
	privB, pubB := receiptKeys(t)
	a, b := keyID(t, pubA), keyID(t, pubB)
	db.register(t, pubA, "the deployment's first receipt key")
	db.deleteCommunity(t, "--receipt-key", privA)

	id, dir := db.approved(t)
	runWith := func(args ...string) (int, string, string) {
		return db.cli(t, append([]string{"run", "--once", "--objects-dir", dir, "--cache", "memory:", "--request", id}, args...)...)
	}
	code, _, stderr := runWith()
	require.Equal(t, exitRefused, code)
	requireOneLine(t, stderr, "the deployment signs its receipts with key "+a, "has no signing key", "--receipt-key FILE")
	code, _, stderr = runWith("--receipt-key", privB)
	require.Equal(t, exitRefused, code)
	requireOneLine(t, stderr, "signs its receipts with key "+a, "this executor's key is "+b)

	db.register(t, pubB, "yearly rotation")
	code, _, stderr = runWith("--receipt-key", privB)
	require.Equal(t, exitRefused, code)
	requireOneLine(t, stderr, "the receipt chain is signed by key "+a+" up to receipt 1", "deletionctl receipt rotate --old-key FILE")
	code, _, stderr = db.cli(t, "receipt", "rotate", "--old-key", privB)
	require.Equal(t, exitRefused, code)
	requireOneLine(t, stderr, "not by the given key "+b)
	require.Regexp(t, `^rotation 2 hands the receipt chain from key `+a+` to `+b+`; hash [0-9a-f]{64}\n$`,
		db.okAs(t, fixture.RoleExecutor, "receipt", "rotate", "--old-key", privA))
	code, _, stderr = db.cli(t, "receipt", "rotate", "--old-key", privA)
	require.Equal(t, exitRefused, code, "a second rotation to the same key")
	requireOneLine(t, stderr, "is signed by key "+b)
	code, _, stderr = runWith("--receipt-key", privB)
	require.Equal(t, exitOK, code, stderr)

	export := t.TempDir()
	db.ok(t, "receipt", "export", "--dir", export)
	headFile := filepath.Join(t.TempDir(), "head.json")
	require.NoError(t, os.WriteFile(headFile, []byte(db.ok(t, "receipt", "head", "--json")), 0o644))
	code, stdout, stderr := cli(t, "receipt", "verify", "--dir", export, "--public-key", pubA, "--expect-head", headFile)
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stdout, "ok rotation 2 from key "+a+" to "+b+" file 0000000002-key-rotation-"+b+receipt.FileSuffix)
	require.Contains(t, stdout, "ok receipt 3 request "+id+" signed by "+b)
	require.Contains(t, stdout, "verified 3 receipts (1 to 3): 2 signed with key "+a+" then "+b+", 0 unsigned, 1 key rotations; from the chain's first receipt, to the expected head 3:")

	without := func(t *testing.T, pattern string) string {
		t.Helper()
		dir := t.TempDir()
		names, err := filepath.Glob(filepath.Join(export, "*"+receipt.FileSuffix))
		require.NoError(t, err)
		for _, name := range names {
			if ok, _ := filepath.Match(pattern, filepath.Base(name)); ok {
				continue
			}
			data, err := os.ReadFile(name)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(dir, filepath.Base(name)), data, 0o644))
		}
		return dir
	}
	code, _, stderr = cli(t, "receipt", "verify", "--dir", without(t, "0000000002-*"), "--public-key", pubA)
	require.Equal(t, exitRefused, code)
	requireOneLine(t, stderr, "at receipt 3, request "+id, "signed by key "+b+", but the chain is signed by key "+a+" and no rotation names "+b)
	code, _, stderr = cli(t, "receipt", "verify", "--dir", without(t, "0000000003-*"), "--public-key", pubA, "--expect-head", headFile)
	require.Equal(t, exitRefused, code)
	requireOneLine(t, stderr, "the export ends at receipt 2, but the expected head is receipt 3: receipt 3 is missing from the end")
	code, _, _ = cli(t, "receipt", "verify", "--dir", without(t, "0000000003-*"), "--public-key", pubA)
	require.Equal(t, exitOK, code, "without the head, a missing last receipt cannot show")
}

// Where the deployment recorded in the database that it runs unsigned, an
// executor without a key runs, after the chain's key handed it on to
// unsigned, and its log says the receipts are unsigned; an executor with a
// key is refused there.
func TestReceiptExecutorRunsUnsignedOnlyWhereTheDeploymentRecordedIt(t *testing.T) {
	t.Parallel()
	db := setup(t)
	priv, pub := receiptKeys(t)
	a := keyID(t, pub)
	db.register(t, pub, "first key")
	db.deleteCommunity(t, "--receipt-key", priv)
	db.register(t, "", "the auditors accept unsigned receipts from now on")

	id, dir := db.approved(t)
	run := []string{"run", "--once", "--objects-dir", dir, "--cache", "memory:", "--request", id}
	code, _, stderr := db.cli(t, append(run, "--receipt-key", priv)...)
	require.Equal(t, exitRefused, code)
	requireOneLine(t, stderr, "the deployment recorded that it runs unsigned", "has key "+a)
	code, _, stderr = db.cli(t, run...)
	require.Equal(t, exitRefused, code)
	requireOneLine(t, stderr, "the receipt chain is signed by key "+a+" up to receipt 1, and the deployment registered unsigned")
	require.Contains(t, db.okAs(t, fixture.RoleExecutor, "receipt", "rotate", "--old-key", priv), "from key "+a+" to unsigned")
	stdout := db.ok(t, run...)
	var warned bool
	for _, rec := range records(t, stdout) {
		if rec["level"] == "WARN" && strings.HasPrefix(rec["msg"].(string), "receipts are unsigned: the deployment recorded that it runs unsigned") {
			warned = rec["receipts_signed"] == false
		}
	}
	require.True(t, warned, "the log says the receipts are unsigned:\n%s", stdout)
	require.Equal(t, "completed", lastMessage(t, stdout))

	export := t.TempDir()
	db.ok(t, "receipt", "export", "--dir", export)
	code, _, stderr = cli(t, "receipt", "verify", "--dir", export, "--public-key", pub)
	require.Equal(t, exitRefused, code)
	requireOneLine(t, stderr, "at receipt 3", "the receipt is unsigned")
	code, stdout, stderr = cli(t, "receipt", "verify", "--dir", export, "--public-key", pub, "--allow-unsigned")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stdout, "ok rotation 2 from key "+a+" to unsigned")
}
