package integration

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/fixture"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// A registered table in a schema the deletion roles may not use could be
// neither counted nor purged: the drift report names the schema, the roles
// and the GRANT, every claim stops, and the grant clears it.
func TestDriftNamesASchemaTheDeletionRolesCannotUse(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	_, request := b.approvedRequest(t)
	for _, stmt := range []string{
		"CREATE SCHEMA analytics",
		"CREATE TABLE analytics.events (id bigint PRIMARY KEY, community_id uuid NOT NULL REFERENCES community_deletion.communities (id))",
		"SELECT community_deletion.attach_community_write_fence('analytics.events')",
	} {
		require.NoError(t, b.exec(t, stmt), stmt)
	}
	want := driftRow{"schema analytics", "schema_usage_missing: community_deletion_executor, community_deletion_operator may not use it; " +
		"GRANT USAGE ON SCHEMA analytics TO community_deletion_executor, community_deletion_operator"}
	require.Equal(t, []driftRow{want}, drift(t, b))

	engine, err := lifecycle.NewEngine(ctx, b.as(fixture.RoleExecutor), nil)
	require.NoError(t, err)
	_, err = engine.ClaimRequest(ctx, request, "executor", lifecycle.DefaultLeaseDuration)
	var blocked *lifecycle.DriftBlockedError
	require.ErrorAs(t, err, &blocked, "the claim is refused")
	require.Contains(t, blocked.Reason, "schema_usage_missing")

	require.NoError(t, b.exec(t, "GRANT USAGE ON SCHEMA analytics TO community_deletion_executor"))
	require.Equal(t, []driftRow{{"schema analytics", "schema_usage_missing: community_deletion_operator may not use it; " +
		"GRANT USAGE ON SCHEMA analytics TO community_deletion_operator"}}, drift(t, b))
	require.NoError(t, b.exec(t, "GRANT USAGE ON SCHEMA analytics TO community_deletion_operator"))
	require.Empty(t, drift(t, b))
}
