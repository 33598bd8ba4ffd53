package integration

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/fixture"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// The tests of migration 00015: the database proves absence at the
// tombstone, row security cannot hide rows from the deletion, operators
// never change executor-only columns, and a serving lease is extended only
// while its community is active. Each attack runs as a real login and
// asserts its refusal and that nothing changed.

// tombstoneStatement is the statement the purge's final transaction runs.
const tombstoneStatement = `UPDATE communities SET deletion_state = 'tombstone', deleted_at = now(),
	signing_key = NULL, icon = NULL WHERE id = $1`

// tombstoneAs tries to tombstone community at generation as role, with the
// executor's settings, and returns the error.
func (b *testBundle) tombstoneAs(t *testing.T, role fixture.Role, community uuid.UUID, generation int64) error {
	t.Helper()
	return b.tryAs(t, role, func(tx pgx.Tx) error {
		if err := setExecutor(t.Context(), tx, community, generation); err != nil {
			return err
		}
		_, err := tx.Exec(t.Context(), tombstoneStatement, community)
		return err
	})
}

// bindingsRemoved creates a community, writes a member row and an audit
// event of it while active, and walks it and its request to fenced at
// bindings_removed, the stage the purge starts from.
func (b *testBundle) bindingsRemoved(t *testing.T) (community, request uuid.UUID, generation int64) {
	t.Helper()
	community = b.createCommunity(t)
	require.NoError(t, insertMember(t.Context(), b.as(fixture.RoleServing), community, "member"))
	require.NoError(t, b.exec(t, "INSERT INTO fixture_audit_events (community_id, action) VALUES ($1, 'joined')", community))
	request = b.submit(t, community, "requester")
	b.freeze(t, request)
	b.approve(t, request, "approver")
	b.quiesce(t, community)
	generation = b.fence(t, community)
	b.freezeDestructive(t, request)
	b.advance(t, request, "drained")
	b.advance(t, request, "bindings_removed")
	return community, request, generation
}

// The step to tombstone is refused by the database while a registered
// 'delete' table holds a row of the community, and while a 'nullify' table
// still carries its id, whoever takes it (the executor, or the superuser
// with the executor's settings); the refusal names the table and changes
// nothing. Once the rows are gone the executor's step succeeds.
func TestTombstoneProofRefusesWhileRowsRemain(t *testing.T) {
	t.Parallel()
	b := setup(t)
	community, request, generation := b.bindingsRemoved(t)
	before := b.footprint(t, community)

	requireSQLState(t, b.tombstoneAs(t, fixture.RoleExecutor, community, generation), sqlstateFenced,
		"registered delete table fixture_members still holds its rows")
	err := pgx.BeginFunc(t.Context(), b.pool, func(tx pgx.Tx) error {
		if err := setExecutor(t.Context(), tx, community, generation); err != nil {
			return err
		}
		_, err := tx.Exec(t.Context(), tombstoneStatement, community)
		return err
	})
	requireSQLState(t, err, sqlstateFenced, "fixture_members still holds its rows")
	require.Equal(t, before, b.footprint(t, community))
	require.Equal(t, "bindings_removed", requestStage(t, b, request))

	// The 'delete' rows gone, the 'nullify' table still carries the id.
	require.NoError(t, b.asExecutor(t, community, generation, func(tx pgx.Tx) error {
		_, err := tx.Exec(t.Context(), "DELETE FROM fixture_members WHERE community_id = $1", community)
		return err
	}))
	requireSQLState(t, b.tombstoneAs(t, fixture.RoleExecutor, community, generation), sqlstateFenced,
		"registered nullify table fixture_audit_events still holds its rows")
	state, _ := b.communityState(t, community)
	require.Equal(t, "fenced", state)

	// Cleared, the executor's step goes through, with the request's.
	require.NoError(t, b.asExecutor(t, community, generation, func(tx pgx.Tx) error {
		_, err := tx.Exec(t.Context(), "UPDATE fixture_audit_events SET community_id = NULL WHERE community_id = $1", community)
		return err
	}))
	require.NoError(t, b.tryAs(t, fixture.RoleExecutor, func(tx pgx.Tx) error {
		if err := setExecutor(t.Context(), tx, community, generation); err != nil {
			return err
		}
		if _, err := tx.Exec(t.Context(), tombstoneStatement, community); err != nil {
			return err
		}
		_, err := tx.Exec(t.Context(), "UPDATE community_deletion_requests SET stage = 'postgres_purged' WHERE id = $1", request)
		return err
	}))
	state, _ = b.communityState(t, community)
	require.Equal(t, "tombstone", state)
	require.Equal(t, "postgres_purged", requestStage(t, b, request))
}

// A row that a row-level security policy hides from the executor does not
// escape the proof: the step to tombstone fails on the policy (42501)
// rather than skipping the row, and nothing changes.
func TestTombstoneProofSeesRowsHiddenByRowSecurity(t *testing.T) {
	t.Parallel()
	b := setup(t)
	service := b.as(fixture.RoleServing)
	require.NoError(t, b.exec(t, `CREATE TABLE tenant_secrets (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		community_id uuid NOT NULL REFERENCES communities (id), body text NOT NULL)`))
	require.NoError(t, b.exec(t, "ALTER TABLE tenant_secrets OWNER TO cd_test_serving"))
	for _, sql := range []string{
		"SELECT attach_community_write_fence('tenant_secrets')",
		"ALTER TABLE tenant_secrets ENABLE ROW LEVEL SECURITY",
		"CREATE POLICY tenant_secrets_service_only ON tenant_secrets USING (current_user = 'cd_test_serving')",
	} {
		_, err := service.Exec(t.Context(), sql)
		require.NoError(t, err, sql)
	}
	community, request := b.approvedRequest(t)
	_, err := service.Exec(t.Context(), "INSERT INTO tenant_secrets (community_id, body) VALUES ($1, 'secret')", community)
	require.NoError(t, err)
	b.quiesce(t, community)
	generation := b.fence(t, community)
	b.freezeDestructive(t, request)
	b.advance(t, request, "drained")
	b.advance(t, request, "bindings_removed")

	requireSQLState(t, b.tombstoneAs(t, fixture.RoleExecutor, community, generation), "42501",
		`row-level security policy for table "tenant_secrets"`)
	state, _ := b.communityState(t, community)
	require.Equal(t, "fenced", state)
	require.Equal(t, "bindings_removed", requestStage(t, b, request))
	var n int
	require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT count(*) FROM tenant_secrets WHERE community_id = $1", community).Scan(&n))
	require.Equal(t, 1, n)
}

// requestRow is the whole stored row of a request, as text.
func (b *testBundle) requestRow(t *testing.T, request uuid.UUID) string {
	t.Helper()
	var row string
	require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT r::text FROM community_deletion_requests r WHERE id = $1", request).Scan(&row))
	return row
}

// The operator's login never changes a column only the executor writes,
// on any of its paths: unblocking, aborting or freezing an inventory while
// also rewriting the destructive storage manifest (so the executor would
// verify a decoy), setting a retry or an error, or scheduling the request
// later, is refused (42501) and changes nothing. The plain unblock, abort
// and freeze still work.
func TestOperatorsNeverChangeExecutorOnlyColumns(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, request, _ := b.fencedRequest(t)
	// The executor blocks the fenced request, as after a failed unit.
	require.NoError(t, b.execAs(t, fixture.RoleExecutor, `UPDATE community_deletion_requests
		SET blocked_at = now(), blocked_reason = 'stuck', last_error = 'stuck', last_error_at = now(),
		    retry_stage = 'fenced', retry_count = 3
		WHERE id = $1`, request))
	before := b.requestRow(t, request)

	// unblockWith is the operator's unblock (as DeletionRequestUnblock
	// writes it) with the given assignments in place of its own.
	unblockWith := func(set map[string]string) string {
		columns := []string{"blocked_at", "blocked_reason", "retry_count", "retry_stage", "last_error", "last_error_at",
			"next_attempt_at", "lease_owner", "lease_until"}
		values := map[string]string{"retry_count": "0", "next_attempt_at": "now()"}
		var assignments []string
		for _, c := range columns {
			v, ok := set[c]
			if !ok {
				v, ok = values[c]
			}
			if !ok {
				v = "NULL"
			}
			assignments = append(assignments, c+" = "+v)
		}
		for c, v := range set {
			if !slices.Contains(columns, c) {
				assignments = append(assignments, c+" = "+v)
			}
		}
		return "UPDATE community_deletion_requests SET " + strings.Join(assignments, ", ") + " WHERE id = $1"
	}
	decoy := map[string]string{"destructive_storage_manifest": `'{"version": 4}'`, "destructive_storage_frozen_at": "now()"}
	const decoySQL = `destructive_storage_manifest = '{"version": 4}', destructive_storage_frozen_at = now()`
	for name, sql := range map[string]string{
		"unblock writing the destructive manifest": unblockWith(decoy),
		"unblock setting a retry stage":            unblockWith(map[string]string{"retry_stage": "'drained'"}),
		"unblock keeping the retry count":          unblockWith(map[string]string{"retry_count": "2"}),
		"unblock writing an error":                 unblockWith(map[string]string{"last_error": "'forged'", "last_error_at": "now()"}),
		"unblock scheduling later":                 unblockWith(map[string]string{"next_attempt_at": "now() + interval '1 day'"}),
		"abort writing the destructive manifest": `UPDATE community_deletion_requests SET stage = 'aborted', aborted_by = 'op',
			abort_reason = 'r', aborted_at = now(), completed_at = now(), blocked_at = NULL, blocked_reason = NULL, ` + decoySQL + ` WHERE id = $1`,
	} {
		requireSQLState(t, b.execAs(t, fixture.RoleOperator, sql, request), "42501", "an operator never changes what the executor records")
		require.Equal(t, before, b.requestRow(t, request), name)
	}

	// The plain unblock works; the executor then freezes its manifest.
	require.NoError(t, b.execAs(t, fixture.RoleOperator, unblockWith(nil), request))
	b.freezeDestructive(t, request)

	// Freezing an inventory while writing the destructive manifest is
	// refused too; the plain freeze works.
	other := b.createCommunity(t)
	submitted := b.submit(t, other, "requester")
	const freeze = `UPDATE community_deletion_requests SET stage = 'inventoried', schema_manifest = '{}', storage_manifest = '{}',
		inventory_manifest = '{}', inventory_digest = $2, inventory_frozen_at = now()`
	requireSQLState(t, b.execAs(t, fixture.RoleOperator, freeze+", "+decoySQL+" WHERE id = $1", submitted, testDigest("x")),
		"42501", "an operator never changes what the executor records")
	require.Equal(t, "submitted", requestStage(t, b, submitted))
	require.NoError(t, b.execAs(t, fixture.RoleOperator, freeze+" WHERE id = $1", submitted, testDigest("x")))
}

// A serving write lease is extended only while its community is active: the
// service's own login extends it while active, and once the community is
// quiescing its extension is refused (55000, naming the constraint
// community_write_fence) and lease_until stays, so the fence waits at most
// for the longest lease. The lease itself stays valid until it runs out,
// and the service can still shorten or release it.
func TestServingLeaseExtendedOnlyWhileActive(t *testing.T) {
	t.Parallel()
	b := setup(t)
	service := b.as(fixture.RoleServing)
	community, _ := b.approvedRequest(t)
	lease, _, err := acquireLease(t.Context(), service, community, 0)
	require.NoError(t, err)
	const extend = "UPDATE community_serving_write_leases SET lease_until = lease_until + interval '1 minute' WHERE id = $1"
	leaseUntil := func() string {
		var until string
		require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT lease_until::text FROM community_serving_write_leases WHERE id = $1", lease).Scan(&until))
		return until
	}
	before := leaseUntil()
	_, err = service.Exec(t.Context(), extend, lease)
	require.NoError(t, err, "active: the service extends its lease")
	require.NotEqual(t, before, leaseUntil())

	b.quiesce(t, community)
	before = leaseUntil()
	_, err = service.Exec(t.Context(), extend, lease)
	requireSQLState(t, err, sqlstateFenced, "a lease is extended only while its community is active")
	require.Equal(t, before, leaseUntil())
	require.True(t, lifecycle.IsWriteFenceRefusal(err))

	_, err = service.Exec(t.Context(), "UPDATE community_serving_write_leases SET lease_until = now() + interval '1 second' WHERE id = $1", lease)
	require.NoError(t, err, "shortening is always allowed")
	_, err = service.Exec(t.Context(), "DELETE FROM community_serving_write_leases WHERE id = $1", lease)
	require.NoError(t, err, "and so is the release")
}
