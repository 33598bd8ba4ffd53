package integration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/fixture"
)

// The receipts' guards (migration 00017): community_deletion_receipts is
// append-only for every role, the owner included; an insert needs the
// executor, a request at retention_pending, the next place in the chain and
// a body that agrees with its row; and a request reaches retention_pending
// only in a transaction that also writes its receipt.

const sqlstatePrivilege = "42501"

// receiptRow is one row of community_deletion_receipts as a test writes it.
// body is the canonical bytes in a real receipt; the guard reads only the
// fields it compares, so a test builds a body with just those.
type receiptRow struct {
	sequence  int64
	request   uuid.UUID
	body      string
	previous  *string
	signature string
	signer    string
}

// receiptBody is a body with the fields the guard compares.
func receiptBody(request, community uuid.UUID, sequence int64, previous, signer string) string {
	b, err := json.Marshal(map[string]any{
		"format": "communitydeletion.receipt/v2", "request_id": request.String(),
		"community": map[string]any{"id": community.String()}, "sequence": sequence,
		"previous_hash": previous, "signer": signer,
	})
	if err != nil {
		panic(err)
	}
	return string(b)
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// nextReceipt is the unsigned receipt row that comes next in the chain for
// request, read in tx.
func nextReceipt(ctx context.Context, tx pgx.Tx, request uuid.UUID) (receiptRow, error) {
	var sequence int64
	var head *string
	if err := tx.QueryRow(ctx, "SELECT sequence, body_sha256 FROM community_deletion_receipt_chain_head()").Scan(&sequence, &head); err != nil {
		return receiptRow{}, err
	}
	var community uuid.UUID
	if err := tx.QueryRow(ctx, "SELECT community_id FROM community_deletion_requests WHERE id = $1", request).Scan(&community); err != nil {
		return receiptRow{}, err
	}
	previous := ""
	if head != nil {
		previous = *head
	}
	return receiptRow{
		sequence: sequence + 1, request: request, previous: head, signer: "unsigned",
		body: receiptBody(request, community, sequence+1, previous, "unsigned"),
	}, nil
}

// insertReceipt inserts r in tx.
func insertReceipt(ctx context.Context, tx pgx.Tx, r receiptRow) error {
	_, err := tx.Exec(ctx, `INSERT INTO community_deletion_receipts
		(sequence, request_id, body, body_sha256, previous_sha256, signature, signer)
		VALUES ($1, $2, $3, $4, $5, $6, $7)`,
		r.sequence, r.request, r.body, sha256Hex(r.body), r.previous, r.signature, r.signer)
	return err
}

// completeSQL is the completion of a logically verified request.
const completeSQL = "UPDATE community_deletion_requests SET stage = 'retention_pending', completed_at = now() WHERE id = $1"

// complete moves a logically verified request to retention_pending with its
// receipt, in one transaction as the executor, as the lifecycle does.
func (b *testBundle) complete(t *testing.T, request uuid.UUID) {
	t.Helper()
	require.NoError(t, b.tryAs(t, fixture.RoleExecutor, func(tx pgx.Tx) error {
		if _, err := tx.Exec(t.Context(), completeSQL, request); err != nil {
			return err
		}
		r, err := nextReceipt(t.Context(), tx, request)
		if err != nil {
			return err
		}
		return insertReceipt(t.Context(), tx, r)
	}))
}

// receiptSnapshot is everything about receipt sequence that an attack might
// change.
func (b *testBundle) receiptSnapshot(t *testing.T, sequence int64) string {
	t.Helper()
	var snapshot string
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT coalesce((SELECT row_to_json(r)::text
		FROM community_deletion_receipts r WHERE r.sequence = $1), 'missing')`, sequence).Scan(&snapshot))
	return snapshot
}

func (b *testBundle) receiptCount(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT count(*) FROM community_deletion_receipts").Scan(&n))
	return n
}

// No role can update, delete or truncate a receipt: the deployment roles
// lack the privilege (42501), and the table's owner, who has every
// privilege, is refused by the guard (23000) and the truncate guard (55000).
func TestReceiptRowsAreAppendOnlyForEveryRole(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, request, _ := b.requestAt(t, "retention_pending")
	before := b.receiptSnapshot(t, 1)
	require.Contains(t, before, request.String())

	attacks := map[string]string{
		"update body":      "UPDATE community_deletion_receipts SET body = body || ' ' WHERE sequence = 1",
		"update signature": "UPDATE community_deletion_receipts SET signature = '' WHERE sequence = 1",
		"no-op update":     "UPDATE community_deletion_receipts SET sequence = sequence WHERE sequence = 1",
		"delete":           "DELETE FROM community_deletion_receipts WHERE sequence = 1",
		"truncate":         "TRUNCATE community_deletion_receipts",
	}
	roles := map[string]*struct {
		run                  func(sql string) error
		refusal, truncRefuse string
	}{}
	for _, role := range []fixture.Role{fixture.RoleExecutor, fixture.RoleOperator, fixture.RoleServing, fixture.RoleOutsider} {
		roles[string(role)] = &struct {
			run                  func(sql string) error
			refusal, truncRefuse string
		}{func(sql string) error { return b.execAs(t, role, sql) }, sqlstatePrivilege, sqlstatePrivilege}
	}
	roles["owner"] = &struct {
		run                  func(sql string) error
		refusal, truncRefuse string
	}{func(sql string) error { return b.exec(t, sql) }, sqlstateIntegrity, sqlstateFenced}

	for name, role := range roles {
		for attack, sql := range attacks {
			t.Run(name+" "+attack, func(t *testing.T) {
				want, contains := role.refusal, ""
				if attack == "truncate" {
					want = role.truncRefuse
				}
				if name == "owner" {
					contains = "receipts are append-only"
					if attack == "truncate" {
						contains = "TRUNCATE community_deletion_receipts refused"
					}
				}
				requireSQLState(t, role.run(sql), want, contains)
				require.Equal(t, before, b.receiptSnapshot(t, 1), "the receipt is unchanged")
			})
		}
	}
}

// An insert is refused unless it is by the executor, for a request at
// retention_pending, at the next place in the chain, with a body that agrees
// with its row and its request.
func TestReceiptInsertRefusals(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, first, _ := b.requestAt(t, "retention_pending")
	headHash := sha256Hex(b.receiptSnapshotBody(t, 1))
	community, request, _ := b.requestAt(t, "logically_verified")
	wrongHash := sha256Hex("not the head")

	// attempt completes request and inserts the row mutate makes of the
	// valid next receipt, as role, and rolls back.
	attempt := func(t *testing.T, role fixture.Role, completeFirst bool, mutate func(r *receiptRow)) error {
		t.Helper()
		tx, err := b.as(role).Begin(t.Context())
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(context.Background()) }()
		if completeFirst {
			if _, err := tx.Exec(t.Context(), completeSQL, request); err != nil {
				return err
			}
		}
		r := receiptRow{
			sequence: 2, request: request, previous: &headHash, signer: "unsigned",
			body: receiptBody(request, community, 2, headHash, "unsigned"),
		}
		mutate(&r)
		return insertReceipt(t.Context(), tx, r)
	}
	body := func(r *receiptRow, sequence int64, previous, signer string) {
		r.body = receiptBody(r.request, community, sequence, previous, signer)
	}

	for name, tc := range map[string]struct {
		mutate         func(r *receiptRow)
		code, contains string
	}{
		"a gap in the chain": {func(r *receiptRow) { r.sequence = 3; body(r, 3, headHash, "unsigned") },
			sqlstateIntegrity, "receipt 2 does not exist"},
		"a second first receipt": {func(r *receiptRow) { r.sequence = 1; r.previous = nil; body(r, 1, "", "unsigned") },
			sqlstateIntegrity, "already has a first receipt"},
		"a wrong previous hash": {func(r *receiptRow) { r.previous = &wrongHash; body(r, 2, wrongHash, "unsigned") },
			sqlstateIntegrity, "is not " + headHash},
		"a body naming another request": {func(r *receiptRow) { r.body = receiptBody(first, community, 2, headHash, "unsigned") },
			sqlstateIntegrity, "disagree with the row"},
		"a body naming another community": {func(r *receiptRow) { r.body = receiptBody(request, uuid.New(), 2, headHash, "unsigned") },
			sqlstateIntegrity, "disagree with the row"},
		"a body with another sequence": {func(r *receiptRow) { body(r, 7, headHash, "unsigned") },
			sqlstateIntegrity, "disagree with the row"},
		"a body with another previous hash": {func(r *receiptRow) { body(r, 2, wrongHash, "unsigned") },
			sqlstateIntegrity, "disagree with the row"},
		"a body with another signer": {func(r *receiptRow) { body(r, 2, headHash, "0123456789abcdef") },
			sqlstateIntegrity, "disagree with the row"},
		"a body of another format": {func(r *receiptRow) { r.body = `{"format":"v0"}` },
			sqlstateIntegrity, "disagree with the row"},
		"a body that is not JSON": {func(r *receiptRow) { r.body = "receipt" },
			sqlstateIntegrity, "its body is not JSON"},
		"a signer without a signature": {func(r *receiptRow) { r.signer = "0123456789abcdef"; body(r, 2, headHash, r.signer) },
			sqlstateCheck, "community_deletion_receipts_unsigned_check"},
	} {
		t.Run(name, func(t *testing.T) {
			requireSQLState(t, attempt(t, fixture.RoleExecutor, true, tc.mutate), tc.code, tc.contains)
		})
	}

	t.Run("a body whose hash column lies", func(t *testing.T) {
		err := b.tryAs(t, fixture.RoleExecutor, func(tx pgx.Tx) error {
			if _, err := tx.Exec(t.Context(), completeSQL, request); err != nil {
				return err
			}
			r, err := nextReceipt(t.Context(), tx, request)
			require.NoError(t, err)
			_, err = tx.Exec(t.Context(), `INSERT INTO community_deletion_receipts
				(sequence, request_id, body, body_sha256, previous_sha256, signature, signer)
				VALUES ($1, $2, $3, $4, $5, '', 'unsigned')`, r.sequence, r.request, r.body, wrongHash, r.previous)
			return err
		})
		requireSQLState(t, err, sqlstateCheck, "body_sha256")
	})

	t.Run("a request not at retention_pending", func(t *testing.T) {
		requireSQLState(t, attempt(t, fixture.RoleExecutor, false, func(*receiptRow) {}), sqlstateFenced, "not retention_pending")
	})

	t.Run("an operator", func(t *testing.T) {
		requireSQLState(t, attempt(t, fixture.RoleOperator, false, func(*receiptRow) {}), sqlstatePrivilege, "permission denied")
	})

	t.Run("a login granted INSERT but not the executor", func(t *testing.T) {
		require.NoError(t, b.exec(t, "GRANT SELECT, INSERT ON community_deletion_receipts TO "+string(fixture.RoleOutsider)))
		requireSQLState(t, attempt(t, fixture.RoleOutsider, false, func(*receiptRow) {}), sqlstatePrivilege,
			"is not a member of community_deletion_executor")
	})

	require.Equal(t, 1, b.receiptCount(t), "nothing was inserted")
	require.Equal(t, "logically_verified", requestStage(t, b, request))
	b.complete(t, request)
	require.Equal(t, 2, b.receiptCount(t), "the valid next receipt is accepted")
}

// receiptSnapshotBody reads receipt sequence's body.
func (b *testBundle) receiptSnapshotBody(t *testing.T, sequence int64) string {
	t.Helper()
	var body string
	require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT body FROM community_deletion_receipts WHERE sequence = $1", sequence).Scan(&body))
	return body
}

// A completion without a receipt is refused when its transaction commits,
// whoever runs it, and leaves the request logically verified; with the
// receipt in the same transaction it commits.
func TestReceiptCompletionWithoutOneIsRefusedAtCommit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, request, _ := b.requestAt(t, "logically_verified")

	for name, pool := range map[string]func() error{
		"executor": func() error { return b.execAs(t, fixture.RoleExecutor, completeSQL, request) },
		"owner":    func() error { return b.exec(t, completeSQL, request) },
	} {
		t.Run(name, func(t *testing.T) {
			requireSQLState(t, pool(), sqlstateIntegrity, fmt.Sprintf("completion of deletion %s refused: it has no receipt", request))
			require.Equal(t, "logically_verified", requestStage(t, b, request))
		})
	}
	t.Run("in a transaction, refused at commit", func(t *testing.T) {
		tx, err := b.as(fixture.RoleExecutor).Begin(t.Context())
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(context.Background()) }()
		_, err = tx.Exec(t.Context(), completeSQL, request)
		require.NoError(t, err, "the check is deferred to commit")
		requireSQLState(t, tx.Commit(t.Context()), sqlstateIntegrity, "it has no receipt")
		require.Equal(t, "logically_verified", requestStage(t, b, request))
	})

	require.Equal(t, 0, b.receiptCount(t))
	b.complete(t, request)
	require.Equal(t, "retention_pending", requestStage(t, b, request))
	require.Equal(t, 1, b.receiptCount(t))
}
