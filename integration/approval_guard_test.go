package integration

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// insertApproval inserts an approval row with the given fields.
func insertApproval(t *testing.T, b *testBundle, request, community uuid.UUID, digest []byte, approvedBy string) error {
	t.Helper()
	return b.exec(t, `INSERT INTO community_deletion_approvals (request_id, community_id, inventory_digest, approved_by)
		VALUES ($1, $2, $3, $4)`, request, community, digest, approvedBy)
}

// requestDigest reads a request's frozen inventory digest (nil before the freeze).
func requestDigest(t *testing.T, b *testBundle, request uuid.UUID) []byte {
	t.Helper()
	var digest []byte
	require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT inventory_digest FROM community_deletion_requests WHERE id = $1", request).Scan(&digest))
	return digest
}

// An approval is inserted only for an existing, unblocked, 'inventoried'
// request: a submitted, approved, blocked or missing one is refused.
func TestApprovalOnlyForAnUnblockedInventoriedRequest(t *testing.T) {
	t.Parallel()
	b := setup(t)

	submittedCommunity, submitted, _ := b.requestAt(t, "submitted")
	requireSQLState(t, insertApproval(t, b, submitted, submittedCommunity, testDigest(submitted.String()), "approver"),
		sqlstateIntegrity, "is submitted, not an unblocked inventoried request")

	approvedCommunity, approved, _ := b.requestAt(t, "approved")
	requireSQLState(t, insertApproval(t, b, approved, approvedCommunity, requestDigest(t, b, approved), "second-approver"),
		sqlstateIntegrity, "is approved, not an unblocked inventoried request")

	fencedCommunity, fenced, _ := b.requestAt(t, "fenced")
	requireSQLState(t, insertApproval(t, b, fenced, fencedCommunity, requestDigest(t, b, fenced), "second-approver"),
		sqlstateIntegrity, "is fenced, not an unblocked inventoried request")

	missing := uuid.New()
	requireSQLState(t, insertApproval(t, b, missing, submittedCommunity, testDigest("x"), "approver"),
		sqlstateIntegrity, "request "+missing.String()+" does not exist")

	community, blocked, _ := b.requestAt(t, "inventoried")
	require.NoError(t, updateRequest(t, b, blocked, "blocked_at = now(), blocked_reason = 'inventory drift'"))
	requireSQLState(t, insertApproval(t, b, blocked, community, requestDigest(t, b, blocked), "approver"),
		sqlstateIntegrity, "is inventoried and blocked, not an unblocked inventoried request")

	require.NoError(t, updateRequest(t, b, blocked, "blocked_at = NULL, blocked_reason = NULL"))
	require.NoError(t, insertApproval(t, b, blocked, community, requestDigest(t, b, blocked), "approver"))
}

// An approval repeats its request's community and frozen inventory digest;
// a mismatch is refused (by the guard, 23000, before the composite FK).
func TestApprovalMatchesTheRequest(t *testing.T) {
	t.Parallel()
	b := setup(t)
	community, request, _ := b.requestAt(t, "inventoried")
	digest := requestDigest(t, b, request)
	other := b.createCommunity(t)

	requireSQLState(t, insertApproval(t, b, request, other, digest, "approver"),
		sqlstateIntegrity, "does not match request "+request.String()+"'s community and frozen inventory digest")
	requireSQLState(t, insertApproval(t, b, request, community, testDigest("another inventory"), "approver"),
		sqlstateIntegrity, "does not match request "+request.String()+"'s community and frozen inventory digest")
	requireSQLState(t, insertApproval(t, b, request, uuid.New(), digest, "approver"),
		sqlstateIntegrity, "does not match")

	require.NoError(t, insertApproval(t, b, request, community, digest, "approver"))
}

// The two-person rule: the requester cannot approve, however the name is
// cased or padded with whitespace of any kind (spaces, tabs, newlines), on
// either side.
func TestApprovalRequesterCannotApprove(t *testing.T) {
	t.Parallel()
	b := setup(t)
	community, request, _ := b.requestAt(t, "inventoried") // requested by "requester"
	digest := requestDigest(t, b, request)

	for _, by := range []string{
		"requester", " Requester ", "REQUESTER", "requester   ", "  rEqUeStEr",
		"\trequester", "requester\n", "\t Requester\r\n", "\n\tREQUESTER\t\n", "\vrequester\f",
	} {
		requireSQLState(t, insertApproval(t, b, request, community, digest, by),
			sqlstateIntegrity, "requested deletion "+request.String()+" and cannot also approve it")
	}
	require.NoError(t, insertApproval(t, b, request, community, digest, "requester-colleague"))

	// A requester name padded with tabs and newlines is matched the same way.
	padded := b.createCommunity(t)
	paddedRequest := b.submit(t, padded, "\t Alice\n")
	paddedDigest := b.freeze(t, paddedRequest)
	for _, by := range []string{"alice", "ALICE", " alice\t", "\r\nAlice"} {
		requireSQLState(t, insertApproval(t, b, paddedRequest, padded, paddedDigest, by),
			sqlstateIntegrity, "and cannot also approve it")
	}
	require.NoError(t, insertApproval(t, b, paddedRequest, padded, paddedDigest, "\tbob\n"))
}

// Approvals are immutable evidence: no column is ever updated (not even to
// its own value) and no approval is ever deleted.
func TestApprovalsAreNeverUpdatedOrDeleted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, request, _ := b.requestAt(t, "approved")
	const immutable = "approvals are immutable evidence"

	for name, set := range map[string]string{
		"approved_by":      "approved_by = 'someone-else'",
		"approved_at":      "approved_at = approved_at - interval '1 day'",
		"note":             "note = 'added later'",
		"inventory_digest": "inventory_digest = decode(repeat('ef', 32), 'hex')",
		"no-op":            "note = note",
	} {
		t.Run(name, func(t *testing.T) {
			requireSQLState(t, b.exec(t, "UPDATE community_deletion_approvals SET "+set+" WHERE request_id = $1", request),
				sqlstateIntegrity, immutable)
		})
	}
	requireSQLState(t, b.exec(t, "DELETE FROM community_deletion_approvals WHERE request_id = $1", request),
		sqlstateIntegrity, immutable)

	var approvedBy string
	require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT approved_by FROM community_deletion_approvals WHERE request_id = $1",
		request).Scan(&approvedBy))
	require.Equal(t, "approver", approvedBy)
}

// approved_at is the database clock, whatever the client passes.
func TestApprovalApprovedAtIsTheDatabaseClock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	_, request, _ := b.requestAt(t, "inventoried")

	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		var approvedAt, now time.Time
		if err := tx.QueryRow(ctx, `INSERT INTO community_deletion_approvals (request_id, community_id, inventory_digest, approved_by, approved_at)
			SELECT id, community_id, inventory_digest, 'approver', '2000-01-01T00:00:00Z' FROM community_deletion_requests WHERE id = $1
			RETURNING approved_at, now()`, request).Scan(&approvedAt, &now); err != nil {
			return err
		}
		require.True(t, approvedAt.Equal(now), "approved_at %v is not now() %v", approvedAt, now)
		return nil
	}))
}

// The legal path: a submitted request is frozen, approved by another
// operator (with a note) and moves to approved in the same transaction.
func TestApprovalLegalPath(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	community := b.createCommunity(t)
	request := b.submit(t, community, "alice")
	digest := b.freeze(t, request)

	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO community_deletion_approvals (request_id, community_id, inventory_digest, approved_by, note)
			VALUES ($1, $2, $3, 'bob', 'checked the inventory')`, request, community, digest); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "UPDATE community_deletion_requests SET stage = 'approved' WHERE id = $1", request)
		return err
	}))
	require.Equal(t, "approved", requestStage(t, b, request))

	var approvedBy, note string
	var approvedDigest []byte
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT approved_by, note, inventory_digest FROM community_deletion_approvals
		WHERE request_id = $1 AND community_id = $2`, request, community).Scan(&approvedBy, &note, &approvedDigest))
	require.Equal(t, "bob", approvedBy)
	require.Equal(t, "checked the inventory", note)
	require.Equal(t, digest, approvedDigest)
}

// Every name (requested_by, approved_by, lease_owner, executor_id and a
// serving lease's operation and owner) needs a non-whitespace character:
// empty and whitespace-only names of any kind (tab, newline) are refused
// (23514); padding around a real name is not.
func TestNamesNeedANonSpaceCharacter(t *testing.T) {
	t.Parallel()
	b := setup(t)
	blanks := map[string]string{
		"empty": "", "space": " ", "tab": "\t", "newline": "\n", "crlf": "\r\n", "mixed": " \t\v\f\r\n ",
	}
	insertLease := func(t *testing.T, operation, owner string) error {
		return b.exec(t, `INSERT INTO community_serving_write_leases (community_id, operation, owner, fence_generation, lease_until)
			VALUES ($1, $2, $3, 0, now() + interval '1 minute')`, b.createCommunity(t), operation, owner)
	}

	for field, tc := range map[string]struct {
		constraint string
		write      func(t *testing.T, name string) error
	}{
		"requested_by": {"community_deletion_requests_requested_by_check", func(t *testing.T, name string) error {
			return b.exec(t, `INSERT INTO community_deletion_requests (community_id, community_host, requested_by)
				SELECT id, host, $2 FROM communities WHERE id = $1`, b.createCommunity(t), name)
		}},
		"approved_by": {"community_deletion_approvals_approved_by_check", func(t *testing.T, name string) error {
			community, request, _ := b.requestAt(t, "inventoried")
			return insertApproval(t, b, request, community, requestDigest(t, b, request), name)
		}},
		"lease_owner": {"community_deletion_requests_lease_check", func(t *testing.T, name string) error {
			_, request, _ := b.requestAt(t, "approved")
			return updateRequest(t, b, request, "lease_owner = $2, lease_until = now() + interval '1 minute', lease_generation = 1", name)
		}},
		"executor_id": {"community_deletion_executor_heartbeats_executor_id_check", func(t *testing.T, name string) error {
			return b.exec(t, "INSERT INTO community_deletion_executor_heartbeats (executor_id, mode) VALUES ($1, 'run')", name)
		}},
		"operation": {"community_serving_write_leases_operation_check", func(t *testing.T, name string) error {
			return insertLease(t, name, "server-1")
		}},
		"owner": {"community_serving_write_leases_owner_check", func(t *testing.T, name string) error {
			return insertLease(t, "upload", name)
		}},
	} {
		t.Run(field, func(t *testing.T) {
			for blank, name := range blanks {
				t.Run(blank, func(t *testing.T) {
					requireSQLState(t, tc.write(t, name), sqlstateCheck, tc.constraint)
				})
			}
			require.NoError(t, tc.write(t, "\t"+field+"-name\n"), "a real name, even padded, is accepted")
		})
	}
}
