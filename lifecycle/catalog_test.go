package lifecycle_test

import (
	"slices"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/fixture"
	"github.com/tombstoneworks/communitydeletion/internal/testfactory"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
	"github.com/tombstoneworks/communitydeletion/migration"
)

// Ping probes the deletion control plane itself, not the migration ledger.
func TestPingProbesTheControlPlane(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	require.NoError(t, b.Operator.Ping(ctx))
	require.NoError(t, b.exec(t, "ALTER TABLE "+migration.VersionTable+" RENAME TO lc_versions_elsewhere"))
	require.NoError(t, b.Operator.Ping(ctx), "the migration ledger is not what Ping probes")
	require.NoError(t, b.exec(t, "ALTER TABLE community_deletion_requests RENAME TO lc_requests_elsewhere"))
	require.ErrorIs(t, b.Operator.Ping(ctx), lifecycle.ErrRefused)
	require.NoError(t, b.exec(t, "ALTER TABLE lc_requests_elsewhere RENAME TO community_deletion_requests"))
	require.NoError(t, b.Operator.Ping(ctx))
}

// ValidateServingCatalog accepts the migrated schema and refuses, naming
// it, each missing or weakened piece of the serving-path fence.
func TestValidateServingCatalogRefusesAWeakenedFence(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	require.NoError(t, b.Serving.ValidateCatalog(ctx))

	breakages := []struct {
		name, breakSQL, repairSQL, mentions string
	}{
		{"disabled tombstone guard",
			"ALTER TABLE communities DISABLE TRIGGER communities_tombstone_guard",
			"ALTER TABLE communities ENABLE TRIGGER communities_tombstone_guard",
			"enforce_community_tombstone"},
		{"stable write admission",
			"ALTER FUNCTION community_write_allowed(uuid) STABLE",
			"ALTER FUNCTION community_write_allowed(uuid) VOLATILE",
			"not VOLATILE"},
		{"missing assertion",
			"ALTER FUNCTION assert_community_write_allowed(uuid) RENAME TO lc_assert_elsewhere",
			"ALTER FUNCTION lc_assert_elsewhere(uuid) RENAME TO assert_community_write_allowed",
			"assert_community_write_allowed(uuid) is missing"},
		{"unfenced tenant table",
			"DROP TRIGGER community_write_fence_delete ON fixture_members",
			"SELECT attach_community_write_fence('fixture_members')",
			"fixture_members"},
		{"fence trigger with a WHEN clause",
			`DROP TRIGGER community_write_fence_insert ON fixture_members;
			CREATE TRIGGER community_write_fence_insert AFTER INSERT ON fixture_members
				REFERENCING NEW TABLE AS community_fence_new FOR EACH STATEMENT
				WHEN (current_setting('application_name') <> 'backdoor') EXECUTE FUNCTION enforce_community_write_fence()`,
			"DROP TRIGGER community_write_fence_insert ON fixture_members; SELECT attach_community_write_fence('fixture_members')",
			"fixture_members"},
		{"retyped column",
			"ALTER TABLE communities ALTER COLUMN archived_at TYPE timestamp without time zone",
			"ALTER TABLE communities ALTER COLUMN archived_at TYPE timestamp with time zone",
			"communities.archived_at"},
		{"nullable state",
			"ALTER TABLE communities ALTER COLUMN deletion_state DROP NOT NULL",
			"ALTER TABLE communities ALTER COLUMN deletion_state SET NOT NULL",
			"communities.deletion_state"},
		{"missing lease table",
			"ALTER TABLE community_serving_write_leases RENAME TO lc_leases_elsewhere",
			"ALTER TABLE lc_leases_elsewhere RENAME TO community_serving_write_leases",
			"community_serving_write_leases"},
	}
	for _, breakage := range breakages {
		require.NoError(t, b.exec(t, breakage.breakSQL), breakage.name)
		err := b.Serving.ValidateCatalog(ctx)
		require.ErrorIs(t, err, lifecycle.ErrRefused, breakage.name)
		require.Contains(t, err.Error(), breakage.mentions, breakage.name)
		require.NoError(t, b.exec(t, breakage.repairSQL), breakage.name)
		require.NoError(t, b.Serving.ValidateCatalog(ctx), "repaired %s", breakage.name)
	}
}

// ValidateCatalog refuses while the catalog drifts from the registry and
// lists every problem.
func TestValidateCatalogListsEveryDriftRow(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	require.NoError(t, b.Operator.ValidateCatalog(ctx))

	require.NoError(t, b.exec(t, "CREATE TABLE lc_stray_tenant (id bigint PRIMARY KEY, community_id uuid NOT NULL)"))
	require.NoError(t, b.exec(t, "DROP TRIGGER community_write_fence_insert ON fixture_messages"))
	err := b.Operator.ValidateCatalog(ctx)
	require.ErrorIs(t, err, lifecycle.ErrRefused)
	require.Contains(t, err.Error(), "lc_stray_tenant unregistered")
	require.Contains(t, err.Error(), "fixture_messages unfenced")
	require.Contains(t, err.Error(), "2 problem(s)")

	community := testfactory.Community(ctx, t, b.DB, nil).ID
	_, err = b.Operator.InventorySchema(ctx, community)
	require.ErrorIs(t, err, lifecycle.ErrRefused, "no inventory of a drifted catalog")

	require.NoError(t, b.exec(t, "DROP TABLE lc_stray_tenant"))
	require.NoError(t, b.exec(t, "SELECT attach_community_write_fence('fixture_messages')"))
	require.NoError(t, b.Operator.ValidateCatalog(ctx))
}

// InventorySchema lists the registered, fenced and nullify tables, sorted,
// and counts the community's rows in every registered table, only its own.
func TestInventorySchemaListsTablesAndCountsRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	community := testfactory.Community(ctx, t, b.DB, &testfactory.CommunityOpts{Rows: testfactory.Rows{Members: 2, Activity: 1, AuditEvents: 1}}).ID
	testfactory.Community(ctx, t, b.DB, &testfactory.CommunityOpts{Rows: testfactory.Rows{Members: 1}}) // a neighbour

	manifest, err := b.Operator.InventorySchema(ctx, community)
	require.NoError(t, err)
	require.NoError(t, lifecycle.ValidateSchemaManifest(*manifest))
	scoped := slices.Sorted(slices.Values(append(slices.Clone(fixture.Tables), fixture.NullifyTables...)))
	require.Equal(t, scoped, manifest.ScopedTables)
	require.Equal(t, slices.Sorted(slices.Values(fixture.Tables)), manifest.FencedTables, "partitions are not listed")
	require.Equal(t, fixture.NullifyTables, manifest.NullifyTables)
	want := map[string]int64{}
	for _, table := range scoped {
		want[table] = 0
	}
	want["fixture_members"] = 2
	want["fixture_activity"] = 1
	want["fixture_audit_events"] = 1
	require.Equal(t, want, manifest.RowCounts)

	_, err = b.Operator.InventorySchema(ctx, uuid.New())
	require.ErrorIs(t, err, lifecycle.ErrNotFound)
}
