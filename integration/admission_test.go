package integration

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/fixture"
)

const protectSQL = `INSERT INTO community_deletion_protection_events (community_id, action, actor, reason)
	VALUES ($1, 'set', 'alice', 'legal hold')`

// A submission whose REPEATABLE READ snapshot predates a protection that
// committed meanwhile would be decided on that stale snapshot: it is
// refused (25000), and the protected community has no open request. The
// events are ordered by commits, not timing: the snapshot is taken, the
// protection commits, then the submission runs. Against migration 00029
// the submission was admitted.
func TestSubmitOnASnapshotOlderThanItsProtectionIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	community := b.createCommunity(t)

	submitter := roleSession(t, b, fixture.RoleOperator)
	tx, err := submitter.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	var events int
	require.NoError(t, tx.QueryRow(ctx, "SELECT count(*) FROM community_deletion_protection_events WHERE community_id = $1",
		community).Scan(&events))
	require.Zero(t, events, "the snapshot is taken before the protection")

	_, err = b.as(fixture.RoleApprover).Exec(ctx, protectSQL, community)
	require.NoError(t, err)

	_, err = tx.Exec(ctx, `INSERT INTO community_deletion_requests (community_id, community_host, requested_by)
		SELECT id, host, 'requester' FROM communities WHERE id = $1`, community)
	requireSQLState(t, err, sqlstateIsolation, "submit at READ COMMITTED")
	require.NoError(t, tx.Rollback(ctx))
	request, _ := b.openRequest(t, community)
	require.Equal(t, uuid.Nil, request, "the protected community has no open request")

	// At READ COMMITTED the same submission sees the protection (55000).
	_, err = b.as(fixture.RoleOperator).Exec(ctx, `INSERT INTO community_deletion_requests (community_id, community_host, requested_by)
		SELECT id, host, 'requester' FROM communities WHERE id = $1`, community)
	requireSQLState(t, err, sqlstateFenced, "deletion-protected")
}

// Every other admission decision refuses a pinned snapshot too (25000): a
// protection event, an approval (its grace period stamped from the
// settings), a claim, and the step out of active that the grace period
// holds back.
func TestAdmissionRefusesPinnedSnapshots(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	repeatable := func(role fixture.Role, sql string, args ...any) error {
		return pgx.BeginTxFunc(ctx, b.as(role), pgx.TxOptions{IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, sql, args...)
			return err
		})
	}
	requireSQLState(t, repeatable(fixture.RoleOperator, protectSQL, b.createCommunity(t)), sqlstateIsolation, "protect at READ COMMITTED")

	community := b.createCommunity(t)
	request := b.submit(t, community, "requester")
	b.freeze(t, request)
	err := repeatable(fixture.RoleApprover, `INSERT INTO community_deletion_approvals (request_id, community_id, inventory_digest, approved_by)
		SELECT id, community_id, inventory_digest, 'approver' FROM community_deletion_requests WHERE id = $1`, request)
	requireSQLState(t, err, sqlstateIsolation, "approve at READ COMMITTED")

	b.approve(t, request, "approver")
	err = pgx.BeginTxFunc(ctx, b.as(fixture.RoleExecutor), pgx.TxOptions{IsoLevel: pgx.Serializable}, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, claimSQL, request)
		return err
	})
	requireSQLState(t, err, sqlstateIsolation, "claim at READ COMMITTED")

	// The step out of active, which the grace period holds back.
	_, generation := b.communityState(t, community)
	err = pgx.BeginTxFunc(ctx, b.as(fixture.RoleExecutor), pgx.TxOptions{IsoLevel: pgx.RepeatableRead}, func(tx pgx.Tx) error {
		if err := setExecutor(ctx, tx, community, generation); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "UPDATE communities SET deletion_state = 'quiescing', archived_at = now() WHERE id = $1", community)
		return err
	})
	requireSQLState(t, err, sqlstateIsolation, "cannot see its deletion's grace period")
	state, _ := b.communityState(t, community)
	require.Equal(t, "active", state)
}

const claimSQL = `UPDATE community_deletion_requests
	SET lease_owner = 'executor', lease_generation = lease_generation + 1, lease_until = now() + interval '1 minute'
	WHERE id = $1`

// A community protected while its deletion was already approved (as a
// submission on a stale snapshot left communities under migration 00029;
// here the event is written past the guards) is never quiesced: the claim
// of the approved request and the step to quiescing are both refused
// (55000), and the community stays active.
func TestProtectionIsReadAgainAtClaimAndBeforeQuiescing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	community, request := b.approvedRequest(t)
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL session_replication_role = replica"); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO community_deletion_protection_events (community_id, action, actor, reason, actor_role, recorded_at)
			VALUES ($1, 'set', 'alice', 'legal hold', 'cd_test_operator', $2)`, community, time.Now())
		return err
	}))

	_, err := b.as(fixture.RoleExecutor).Exec(ctx, claimSQL, request)
	requireSQLState(t, err, sqlstateFenced, "is deletion-protected")

	_, generation := b.communityState(t, community)
	err = b.asExecutor(t, community, generation, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "UPDATE communities SET deletion_state = 'quiescing', archived_at = now() WHERE id = $1", community)
		return err
	})
	requireSQLState(t, err, sqlstateFenced, "nothing of a protected community is quiesced")
	state, _ := b.communityState(t, community)
	require.Equal(t, "active", state)
}
