package lifecycle_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/fixture"
	"github.com/tombstoneworks/communitydeletion/internal/testfactory"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// schemaOwnerPool makes a login that is no superuser the owner of schema
// community_deletion and of every table and function in it, as in a deployment migrated
// by a non-superuser, and returns a pool of that login.
func schemaOwnerPool(t *testing.T, b *testBundle) *pgxpool.Pool {
	t.Helper()
	ctx := t.Context()
	owner := "cd_test_owner_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	require.NoError(t, b.exec(t, "CREATE ROLE "+owner+" LOGIN NOSUPERUSER NOBYPASSRLS PASSWORD 'pw'"))
	t.Cleanup(func() {
		_, _ = b.Pool.Exec(t.Context(), "REASSIGN OWNED BY "+owner+" TO CURRENT_USER")
		_, _ = b.Pool.Exec(t.Context(), "DROP OWNED BY "+owner)
		_, _ = b.Pool.Exec(t.Context(), "DROP ROLE "+owner)
	})
	require.NoError(t, b.exec(t, "ALTER SCHEMA community_deletion OWNER TO "+owner))
	rows, err := b.Pool.Query(ctx, `SELECT format('%I.%I', n.nspname, c.relname) FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'community_deletion' AND c.relkind = 'r'`)
	require.NoError(t, err)
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	for _, table := range tables {
		require.NoError(t, b.exec(t, "ALTER TABLE "+table+" OWNER TO "+owner))
	}
	rows, err = b.Pool.Query(ctx, `SELECT p.oid::regprocedure::text FROM pg_proc p
		WHERE p.pronamespace = 'community_deletion'::regnamespace`)
	require.NoError(t, err)
	functions, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	for _, function := range functions {
		require.NoError(t, b.exec(t, "ALTER FUNCTION "+function+" OWNER TO "+owner))
	}
	require.NoError(t, b.exec(t, "ALTER DOMAIN community_deletion.community_deletion_stage OWNER TO "+owner))
	require.NoError(t, b.exec(t, "ALTER SEQUENCE community_deletion.community_deletion_fence_marker OWNER TO "+owner))
	url, err := fixture.LoginConnString(b.URL, owner, "pw")
	require.NoError(t, err)
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// The grace period and deletion protection hold against the owner of the
// deletion schema and its tables, who holds every table privilege but is no
// superuser: its own writes meet the same triggers (only a DDL that
// disables them, which the optional DDL guard refuses, gets past them).
func TestGraceAndProtectionHoldAgainstTheSchemaOwner(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	request := b.inventoried(t)
	_, err := b.Approver.ApproveWithParams(ctx, request.ID, lifecycle.ApproveParams{
		ApprovedBy: "approver", GracePeriod: new(time.Hour)})
	require.NoError(t, err)
	protected := testfactory.Community(ctx, t, b.DB, nil)
	_, err = b.Operator.Protect(ctx, protected.ID, "alice", "legal hold")
	require.NoError(t, err)

	owner := schemaOwnerPool(t, b)
	for _, attack := range []struct {
		sql      string
		args     []any
		code     string
		contains string
	}{
		// Fence a community in its grace period, in one step or two.
		{"UPDATE community_deletion.communities SET deletion_state = 'quiescing', archived_at = now() WHERE id = $1",
			[]any{request.CommunityID}, "55000", "grace period ends at"},
		{"UPDATE community_deletion.communities SET deletion_state = 'fenced', deletion_fence_generation = deletion_fence_generation + 1 WHERE id = $1",
			[]any{request.CommunityID}, "55000", "grace period ends at"},
		// Shorten the grace period the approval recorded.
		{"UPDATE community_deletion.community_deletion_approvals SET grace_period = interval '0' WHERE request_id = $1",
			[]any{request.ID}, "23000", "approvals are immutable evidence"},
		// Submit a deletion of a protected community by hand.
		{`INSERT INTO community_deletion.community_deletion_requests (community_id, community_host, requested_by, requested_by_role)
			VALUES ($1, $2, 'mallory', session_user)`, []any{protected.ID, protected.Host}, "55000", "it is deletion-protected"},
		// Clear the protection by rewriting or erasing its history.
		{"UPDATE community_deletion.community_deletion_protection_events SET action = 'cleared' WHERE community_id = $1",
			[]any{protected.ID}, "23000", "append-only audit records"},
		{"DELETE FROM community_deletion.community_deletion_protection_events WHERE community_id = $1",
			[]any{protected.ID}, "23000", "append-only audit records"},
		{"TRUNCATE community_deletion.community_deletion_protection_events", nil, "55000", "deletion evidence"},
	} {
		_, err := owner.Exec(ctx, attack.sql, attack.args...)
		requirePgCode(t, err, attack.code)
		require.ErrorContains(t, err, attack.contains, attack.sql)
	}

	require.Equal(t, "active", b.community(t, request.CommunityID).State, "still in its grace period")
	got, err := b.Operator.Get(ctx, request.ID)
	require.NoError(t, err)
	require.Equal(t, lifecycle.StageApproved, got.Stage)
	require.NotNil(t, got.GraceUntil)
	require.True(t, got.InGrace(time.Now()), "the grace period still ends an hour after the approval")
	p, err := b.Operator.Protection(ctx, protected.ID)
	require.NoError(t, err)
	require.True(t, p.Protected)
	require.Len(t, p.Events, 1)
	_, err = b.Operator.Submit(ctx, protected.Host, "alice", "forget us")
	requirePgCode(t, err, "55000")
}
