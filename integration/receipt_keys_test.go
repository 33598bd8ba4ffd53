package integration

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/fixture"
)

// The receipt key registry and the receipts guard's signing rules
// (migration 00028): the registry is append-only for every role and written
// only by the owner of schema community_deletion; a receipt is signed as
// the registry's newest row says, and by the key the chain is at unless a
// rotation, signed by that key, hands the chain on.

const (
	sqlstateInvalidParameter = "22023"
	registryOwnerLogin       = "cd_test_receipt_key_owner"
)

// testPublicKey is a deterministic Ed25519 public key named by seed, and
// its key id (the first 16 hex digits of its SHA-256).
func testPublicKey(seed string) (raw string, id string) {
	s := sha256.Sum256([]byte(seed))
	pub := ed25519.NewKeyFromSeed(s[:]).Public().(ed25519.PublicKey)
	sum := sha256.Sum256(pub)
	return base64.StdEncoding.EncodeToString(pub), hex.EncodeToString(sum[:8])
}

// fakeSignature is a well-formed signature the guard accepts: the database
// never checks signatures, the verifier does.
var fakeSignature = base64.StdEncoding.EncodeToString(make([]byte, 64))

// registryOwner hands schema community_deletion and the registry table to
// a login that is no superuser, as a deployment's migrating role owns them,
// and returns a pool connected as it.
func registryOwner(t *testing.T, b *testBundle) *pgxpool.Pool {
	t.Helper()
	b.as(fixture.RoleServing) // creates the test logins
	password := registryOwnerLogin + "-password"
	handSchemaTo(t, b, registryOwnerLogin, password,
		"ALTER TABLE community_deletion.community_deletion_receipt_keys OWNER TO "+registryOwnerLogin)
	url, err := fixture.LoginConnString(b.url, registryOwnerLogin, password)
	require.NoError(t, err)
	owner, err := pgxpool.New(t.Context(), url)
	require.NoError(t, err)
	t.Cleanup(owner.Close)
	return owner
}

const registerSQL = "INSERT INTO community_deletion.community_deletion_receipt_keys (action, public_key, reason) VALUES ($1, $2, $3)"

func (b *testBundle) registrySnapshot(t *testing.T) string {
	t.Helper()
	var s string
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT coalesce(string_agg(row_to_json(k)::text, ',' ORDER BY k.sequence), '')
		FROM community_deletion.community_deletion_receipt_keys k`).Scan(&s))
	return s
}

// Only the schema's owner registers how receipts are signed, and nobody,
// the owner included, changes or removes a registration: every deployment
// role lacks the privilege (42501), a login the owner granted INSERT is
// refused by the guard (42501), the owner's UPDATE and DELETE by the guard
// (23000) and its TRUNCATE by the truncate guard (55000). The owner's
// malformed registrations are refused too, and nothing changes.
func TestReceiptKeyRegistryIsWrittenOnlyByTheSchemaOwner(t *testing.T) {
	t.Parallel()
	b := setup(t)
	owner := registryOwner(t, b)
	keyA, idA := testPublicKey("a")
	_, err := owner.Exec(t.Context(), registerSQL, "sign", keyA, "the deployment's key")
	require.NoError(t, err)
	var id, by string
	require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT key_id, declared_by FROM community_deletion.community_deletion_receipt_keys").Scan(&id, &by))
	require.Equal(t, idA, id, "the guard fills in the key id")
	require.Equal(t, registryOwnerLogin, by)
	before := b.registrySnapshot(t)

	keyB, _ := testPublicKey("b")
	insert := func(pool *pgxpool.Pool) error {
		_, err := pool.Exec(t.Context(), registerSQL, "sign", keyB, "an attacker's key")
		return err
	}
	for _, role := range []fixture.Role{fixture.RoleExecutor, fixture.RoleOperator, fixture.RoleApprover, fixture.RoleServing, fixture.RoleOutsider} {
		t.Run(string(role), func(t *testing.T) {
			requireSQLState(t, insert(b.as(role)), sqlstatePrivilege, "permission denied")
			for _, sql := range []string{
				"UPDATE community_deletion.community_deletion_receipt_keys SET public_key = '" + keyB + "'",
				"DELETE FROM community_deletion.community_deletion_receipt_keys",
				"TRUNCATE community_deletion.community_deletion_receipt_keys",
			} {
				requireSQLState(t, b.execAs(t, role, sql), sqlstatePrivilege, "permission denied")
			}
		})
	}
	t.Run("a login granted INSERT", func(t *testing.T) {
		_, err := owner.Exec(t.Context(), "GRANT SELECT, INSERT ON community_deletion.community_deletion_receipt_keys TO "+string(fixture.RoleOutsider))
		require.NoError(t, err)
		requireSQLState(t, insert(b.as(fixture.RoleOutsider)), sqlstatePrivilege,
			"role "+string(fixture.RoleOutsider)+" is not the owner of schema community_deletion")
	})
	t.Run("the owner", func(t *testing.T) {
		for sql, code := range map[string]string{
			"UPDATE community_deletion.community_deletion_receipt_keys SET public_key = '" + keyB + "'": sqlstateIntegrity,
			"UPDATE community_deletion.community_deletion_receipt_keys SET reason = reason":             sqlstateIntegrity,
			"DELETE FROM community_deletion.community_deletion_receipt_keys":                            sqlstateIntegrity,
			"TRUNCATE community_deletion.community_deletion_receipt_keys":                               sqlstateFenced,
		} {
			_, err := owner.Exec(t.Context(), sql)
			requireSQLState(t, err, code, "")
		}
		for name, tc := range map[string]struct {
			sql      string
			args     []any
			code     string
			contains string
		}{
			"a key of 31 bytes": {registerSQL, []any{"sign", base64.StdEncoding.EncodeToString(make([]byte, 31)), "short"}, sqlstateInvalidParameter, "standard padded base64 (44 characters)"},
			"a wrong key id": {"INSERT INTO community_deletion.community_deletion_receipt_keys (action, key_id, public_key, reason) VALUES ('sign', '0123456789abcdef', $1, 'x')",
				[]any{keyB}, sqlstateInvalidParameter, "is not the key id of public_key"},
			"unsigned naming a key": {registerSQL, []any{"unsigned", keyB, "x"}, sqlstateInvalidParameter, "runs unsigned names no key"},
			"the same key again":    {registerSQL, []any{"sign", keyA, "again"}, sqlstateUnique, "already registered"},
			"no reason":             {registerSQL, []any{"sign", keyB, " "}, sqlstateCheck, "reason"},
		} {
			t.Run(name, func(t *testing.T) {
				_, err := owner.Exec(t.Context(), tc.sql, tc.args...)
				requireSQLState(t, err, tc.code, tc.contains)
			})
		}
	})
	require.Equal(t, before, b.registrySnapshot(t), "the registry is unchanged")
}

// completeSigned completes a fresh logically verified request as the
// executor, with the next receipt in the chain naming signer (and a
// well-formed signature unless unsigned), and returns the guard's answer;
// a refused completion changes nothing.
func (b *testBundle) completeSigned(t *testing.T, signer string) error {
	t.Helper()
	_, request, _ := b.requestAt(t, "logically_verified")
	return b.tryAs(t, fixture.RoleExecutor, func(tx pgx.Tx) error {
		if _, err := tx.Exec(t.Context(), completeSQL, request); err != nil {
			return err
		}
		r, err := nextReceipt(t.Context(), tx, request)
		if err != nil {
			return err
		}
		r.signer = signer
		r.body = strings.Replace(r.body, `"signer":"unsigned"`, `"signer":"`+signer+`"`, 1)
		if signer != "unsigned" {
			r.signature = fakeSignature
		}
		return insertReceipt(t.Context(), tx, r)
	})
}

// rotate appends, as role, a key rotation signed by signer that hands the
// chain to newSigner with public key newKey ("" for unsigned).
func (b *testBundle) rotate(t *testing.T, role fixture.Role, signer, newSigner, newKey string) error {
	t.Helper()
	return b.tryAs(t, role, func(tx pgx.Tx) error {
		var sequence int64
		var head *string
		if err := tx.QueryRow(context.WithoutCancel(t.Context()), `SELECT sequence, body_sha256 FROM community_deletion.community_deletion_receipts
			ORDER BY sequence DESC LIMIT 1`).Scan(&sequence, &head); err != nil {
			return err
		}
		body, err := json.Marshal(map[string]any{
			"format": "communitydeletion.key-rotation/v1", "sequence": sequence + 1, "previous_hash": *head,
			"signer": signer, "new_signer": newSigner, "new_public_key": newKey,
		})
		require.NoError(t, err)
		_, err = tx.Exec(t.Context(), `INSERT INTO community_deletion.community_deletion_receipts
			(sequence, kind, body, body_sha256, previous_sha256, signature, signer) VALUES ($1, 'rotation', $2, $3, $4, $5, $6)`,
			sequence+1, string(body), sha256Hex(string(body)), *head, fakeSignature, signer)
		return err
	})
}

// The guard refuses a receipt signed otherwise than the registry says, an
// unsigned receipt after a signed one, and a new key's receipt before a
// rotation hands the chain on; it admits a rotation only from the executor,
// signed by the key the chain is at and naming the registered key; and it
// admits format 2 receipts only. A key recorded lost lets the chain pass to
// the new key once, without a rotation.
func TestReceiptGuardSignsAsTheRegistryAndTheChainSay(t *testing.T) {
	t.Parallel()
	b := setup(t)
	keyA, idA := testPublicKey("a")
	keyB, idB := testPublicKey("b")
	register := func(action, key, reason string) {
		t.Helper()
		var err error
		if key == "" {
			err = b.exec(t, "INSERT INTO community_deletion.community_deletion_receipt_keys (action, reason) VALUES ($1, $2)", action, reason)
		} else {
			err = b.exec(t, registerSQL, action, key, reason)
		}
		require.NoError(t, err)
	}

	require.NoError(t, b.completeSigned(t, "unsigned"), "receipt 1: nothing registered, unsigned")
	require.NoError(t, b.completeSigned(t, idB), "receipt 2: nothing registered, an unregistered key may follow unsigned receipts")
	requireSQLState(t, b.completeSigned(t, "unsigned"), sqlstateIntegrity,
		"it is signed by unsigned, but the chain is signed by key "+idB+" up to receipt 2")

	register("sign", keyA, "the deployment's key")
	requireSQLState(t, b.completeSigned(t, idB), sqlstateIntegrity, "but the deployment registered "+idA)
	requireSQLState(t, b.completeSigned(t, "unsigned"), sqlstateIntegrity, "but the deployment registered "+idA)
	requireSQLState(t, b.completeSigned(t, idA), sqlstateIntegrity, "the chain is signed by key "+idB+" up to receipt 2; write a key rotation signed by "+idB)

	// Rotations: only the executor, signed by the chain's key, to the
	// registered key.
	requireSQLState(t, b.rotate(t, fixture.RoleOperator, idB, idA, keyA), sqlstatePrivilege, "")
	requireSQLState(t, b.rotate(t, fixture.RoleExecutor, idA, idA, keyA), sqlstateIntegrity, "a rotation is signed by the key the chain is at ("+idB+")")
	requireSQLState(t, b.rotate(t, fixture.RoleExecutor, idB, "unsigned", ""), sqlstateIntegrity, "it hands the chain to unsigned, but the deployment registered "+idA)
	keyC, _ := testPublicKey("c")
	requireSQLState(t, b.rotate(t, fixture.RoleExecutor, idB, idA, keyC), sqlstateIntegrity, "a rotation names the registered key")
	require.NoError(t, b.rotate(t, fixture.RoleExecutor, idB, idA, keyA), "rotation 3 from B to A")
	requireSQLState(t, b.completeSigned(t, idB), sqlstateIntegrity, "but the deployment registered "+idA)
	require.NoError(t, b.completeSigned(t, idA), "receipt 4, signed by A after the rotation")

	// Running unsigned is recorded, and the chain handed on to unsigned.
	register("unsigned", "", "the auditors accept unsigned receipts")
	requireSQLState(t, b.completeSigned(t, "unsigned"), sqlstateIntegrity, "the chain is signed by key "+idA+" up to receipt 4")
	require.NoError(t, b.rotate(t, fixture.RoleExecutor, idA, "unsigned", ""), "rotation 5 from A to unsigned")
	require.NoError(t, b.completeSigned(t, "unsigned"), "receipt 6, unsigned")

	// A lost key: the chain passes to the new key once, without a rotation.
	register("sign", keyB, "back to B")
	require.NoError(t, b.completeSigned(t, idB), "receipt 7: a key may follow unsigned receipts")
	register("sign", keyA, "A again")
	requireSQLState(t, b.completeSigned(t, idA), sqlstateIntegrity, "the chain is signed by key "+idB+" up to receipt 7")
	require.NoError(t, b.exec(t, "INSERT INTO community_deletion.community_deletion_receipt_keys (action, public_key, previous_key_lost, reason) VALUES ('sign', $1, true, 'B is lost')", keyA))
	require.NoError(t, b.completeSigned(t, idA), "receipt 8: B recorded lost")
	require.Equal(t, 8, b.receiptCount(t))

	// A format 1 body is refused: it cannot say what was checked.
	err := b.tryAs(t, fixture.RoleExecutor, func(tx pgx.Tx) error {
		_, request, _ := b.requestAt(t, "logically_verified")
		if _, err := tx.Exec(t.Context(), completeSQL, request); err != nil {
			return err
		}
		r, err := nextReceipt(t.Context(), tx, request)
		require.NoError(t, err)
		r.signer, r.signature = idA, fakeSignature
		r.body = strings.Replace(strings.Replace(r.body, "receipt/v2", "receipt/v1", 1), `"signer":"unsigned"`, `"signer":"`+idA+`"`, 1)
		return insertReceipt(t.Context(), tx, r)
	})
	requireSQLState(t, err, sqlstateIntegrity, "format communitydeletion.receipt/v1 claims every store verified")
	require.Equal(t, 8, b.receiptCount(t))
}
