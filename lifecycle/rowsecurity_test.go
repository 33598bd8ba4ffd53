package lifecycle_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/fixture"
	"github.com/tombstoneworks/communitydeletion/internal/testfactory"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// fewRows is a few rows of one community in every fixture table.
var fewRows = testfactory.Rows{Members: 5, Channels: 2, Messages: 10, Reactions: 10, Attachments: 3, Activity: 5, AuditEvents: 5}

// hidingPolicy shows tenant_secrets' rows to the service alone: the
// deletion's logins are subject to it (they neither own the table nor have
// BYPASSRLS).
const hidingPolicy = "CREATE POLICY tenant_secrets_service_only ON tenant_secrets USING (current_user = 'cd_test_serving')"

// rowSecurityScene is a target community at bindings_removed and a
// bystander, each with fixture rows and rows in tenant_secrets, a table the
// service login owns and registered itself.
type rowSecurityScene struct {
	target, other uuid.UUID
	token         lifecycle.LeaseToken
	counts        map[string]int64
	service       *pgxpool.Pool
}

func (b *testBundle) newRowSecurityScene(t *testing.T) rowSecurityScene {
	t.Helper()
	ctx := t.Context()
	s := rowSecurityScene{service: fixture.RolePool(t, b.URL, fixture.RoleServing)}
	require.NoError(t, b.exec(t, `CREATE TABLE tenant_secrets (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		community_id uuid NOT NULL REFERENCES communities (id), body text NOT NULL)`))
	require.NoError(t, b.exec(t, "CREATE INDEX tenant_secrets_community_idx ON tenant_secrets (community_id, id)"))
	require.NoError(t, b.exec(t, "ALTER TABLE tenant_secrets OWNER TO cd_test_serving"))
	_, err := s.service.Exec(ctx, "SELECT attach_community_write_fence('tenant_secrets')")
	require.NoError(t, err)
	s.target = testfactory.Community(ctx, t, b.DB, &testfactory.CommunityOpts{Rows: fewRows}).ID
	s.other = testfactory.Community(ctx, t, b.DB, &testfactory.CommunityOpts{Rows: fewRows}).ID
	for _, c := range []uuid.UUID{s.target, s.other, s.target} {
		_, err := s.service.Exec(ctx, "INSERT INTO tenant_secrets (community_id, body) VALUES ($1, 'secret')", c)
		require.NoError(t, err)
	}
	s.counts = b.rowCounts(t, s.target)
	_, s.token = testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{CommunityID: s.target, Stage: lifecycle.StageBindingsRemoved})
	return s
}

// hide turns on tenant_secrets' row security with hidingPolicy, as the
// service that owns it.
func (s rowSecurityScene) hide(ctx context.Context) error {
	for _, sql := range []string{"ALTER TABLE tenant_secrets ENABLE ROW LEVEL SECURITY", hidingPolicy} {
		if _, err := s.service.Exec(ctx, sql); err != nil {
			return err
		}
	}
	return nil
}

// secrets counts community's rows of tenant_secrets, as the superuser.
func (b *testBundle) secrets(t *testing.T, community uuid.UUID) int64 {
	t.Helper()
	var n int64
	require.NoError(t, b.Pool.QueryRow(t.Context(), "SELECT count(*) FROM tenant_secrets WHERE community_id = $1", community).Scan(&n))
	return n
}

// requireUntouched asserts that the scene's request is still at
// bindings_removed, its community fenced, and every row of it in place.
func (b *testBundle) requireUntouched(t *testing.T, s rowSecurityScene, counts map[string]int64) {
	t.Helper()
	require.Equal(t, lifecycle.StageBindingsRemoved, b.stage(t, s.token.RequestID))
	require.Equal(t, "fenced", b.community(t, s.target).State)
	require.Equal(t, int64(2), b.secrets(t, s.target))
	require.Equal(t, counts, b.rowCounts(t, s.target))
}

// A registered table, owned by the service, whose row-level security hides
// its rows from the deletion's logins (turned on after the inventory, which
// refuses it as drift too) is drift that names those logins and
// what to grant, and the purge refuses it before deleting anything. With
// row security disabled again the purge takes the table's rows.
func TestPurgePostgresRefusesATableWhosePoliciesHideRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := b.newRowSecurityScene(t)
	require.NoError(t, s.hide(t.Context()))

	drift := b.drift(t)
	require.Len(t, drift, 1)
	require.Contains(t, drift[0], "tenant_secrets row_security: its policies apply to cd_test_approver, cd_test_executor, cd_test_operator; grant BYPASSRLS")

	_, err := b.Engine.EnterPostgresPurged(t.Context(), s.token, lifecycle.PurgeOptions{})
	require.ErrorIs(t, err, lifecycle.ErrRefused)
	require.Contains(t, err.Error(), "tenant_secrets (row_security")
	b.requireUntouched(t, s, s.counts)

	_, err = s.service.Exec(t.Context(), "ALTER TABLE tenant_secrets DISABLE ROW LEVEL SECURITY")
	require.NoError(t, err)
	require.Empty(t, b.drift(t))
	result, err := b.Engine.EnterPostgresPurged(t.Context(), s.token, lifecycle.PurgeOptions{})
	require.NoError(t, err)
	require.Equal(t, int64(2), result.Deleted["tenant_secrets"])
	b.requirePurged(t, s.token)
	require.Zero(t, b.secrets(t, s.target))
	require.Equal(t, int64(1), b.secrets(t, s.other))
}

// Row security turned on while the purge runs, after the drift check of its
// plan, fails the purge's next statement on that table (42501) instead of
// letting it skip the hidden rows: the request stays at bindings_removed and
// the rows stay.
func TestPurgePostgresFailsLoudlyOnRowsHiddenMidway(t *testing.T) {
	t.Parallel()
	b := setup(t)
	s := b.newRowSecurityScene(t)
	require.Empty(t, b.drift(t))

	var hideErr error
	hidden := false
	_, err := b.Engine.EnterPostgresPurged(t.Context(), s.token, lifecycle.PurgeOptions{
		Progress: func(p lifecycle.PurgeProgress) {
			// 'nullify' tables go first: hide the rows before any 'delete'
			// table's batch.
			if hidden || p.Table != "fixture_audit_events" || !p.Done {
				return
			}
			hidden = true
			hideErr = s.hide(t.Context())
		},
	})
	require.NoError(t, hideErr)
	require.True(t, hidden)
	require.ErrorIs(t, err, lifecycle.ErrAccessDenied)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr, "want the database's error, got %v", err)
	require.Equal(t, "42501", pgErr.Code)
	require.Contains(t, pgErr.Message, `row-level security policy for table "tenant_secrets"`)
	require.Equal(t, lifecycle.StageBindingsRemoved, b.stage(t, s.token.RequestID))
	require.Equal(t, "fenced", b.community(t, s.target).State)
	require.Equal(t, int64(2), b.secrets(t, s.target))
}
