package integration

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	communitydeletion "github.com/tombstoneworks/communitydeletion"
	"github.com/tombstoneworks/communitydeletion/internal/fixture"
)

// tampering is one owner-level change to the deletion schema, the drift it
// leaves, and how to put things back.
type tampering struct {
	name    string
	tamper  []string
	drift   driftRow
	restore []string
}

// ownerTamperings are what a table owner (or the schema's owner) can do to
// its own objects: each leaves a trace in the drift report while it lasts.
var ownerTamperings = []tampering{
	{
		name:    "disable a fence trigger",
		tamper:  []string{"ALTER TABLE fixture_members DISABLE TRIGGER community_write_fence_insert"},
		drift:   driftRow{"fixture_members", "unfenced"},
		restore: []string{"ALTER TABLE fixture_members ENABLE TRIGGER community_write_fence_insert"},
	},
	{
		name:    "disable every trigger of a partition",
		tamper:  []string{"ALTER TABLE fixture_activity_default DISABLE TRIGGER ALL"},
		drift:   driftRow{"fixture_activity", "unfenced"},
		restore: []string{"ALTER TABLE fixture_activity_default ENABLE TRIGGER ALL"},
	},
	{
		name:    "drop a fence trigger",
		tamper:  []string{"DROP TRIGGER community_write_fence_delete ON fixture_messages"},
		drift:   driftRow{"fixture_messages", "unfenced"},
		restore: []string{"SELECT attach_community_write_fence('fixture_messages')"},
	},
	{
		name:    "make a fence trigger fire only for replication sessions",
		tamper:  []string{"ALTER TABLE fixture_channels ENABLE REPLICA TRIGGER community_write_fence_update"},
		drift:   driftRow{"fixture_channels", "unfenced"},
		restore: []string{"ALTER TABLE fixture_channels ENABLE TRIGGER community_write_fence_update"},
	},
	{
		name:    "disable the tombstone guard",
		tamper:  []string{"ALTER TABLE communities DISABLE TRIGGER communities_tombstone_guard"},
		drift:   driftRow{"communities.communities_tombstone_guard", "guard_disabled"},
		restore: []string{"ALTER TABLE communities ENABLE TRIGGER communities_tombstone_guard"},
	},
	{
		name:   "drop the approval guard",
		tamper: []string{"DROP TRIGGER community_deletion_approvals_guard ON community_deletion_approvals"},
		drift:  driftRow{"community_deletion_approvals.community_deletion_approvals_guard", "guard_missing"},
		restore: []string{`CREATE TRIGGER community_deletion_approvals_guard BEFORE INSERT OR UPDATE OR DELETE ON community_deletion_approvals
			FOR EACH ROW EXECUTE FUNCTION enforce_community_deletion_approval_guard()`},
	},
	{
		name: "replace a guard function",
		tamper: []string{`CREATE OR REPLACE FUNCTION community_deletion.community_deletion_operators_share_role() RETURNS boolean
			LANGUAGE sql STABLE SET search_path = pg_catalog, community_deletion, pg_temp AS 'SELECT true'`},
		drift: driftRow{"community_deletion_operators_share_role()", "function_changed"},
		restore: []string{`CREATE OR REPLACE FUNCTION community_deletion.community_deletion_operators_share_role() RETURNS boolean
			LANGUAGE sql STABLE AS $$
        SELECT coalesce((SELECT s.operators_share_role FROM community_deletion_settings s
                         ORDER BY s.sequence DESC LIMIT 1), false)
    $$`, "ALTER FUNCTION community_deletion_operators_share_role() SET search_path = pg_catalog, community_deletion, pg_temp"},
	},
	{
		name:    "reset a function's search_path",
		tamper:  []string{"ALTER FUNCTION community_write_allowed(uuid) RESET search_path"},
		drift:   driftRow{"community_write_allowed(uuid)", "function_changed"},
		restore: []string{"ALTER FUNCTION community_write_allowed(uuid) SET search_path = pg_catalog, community_deletion, pg_temp"},
	},
	{
		name:    "make a guard function run as its caller",
		tamper:  []string{"ALTER FUNCTION enforce_community_deletion_request_guard() SECURITY INVOKER"},
		drift:   driftRow{"enforce_community_deletion_request_guard()", "function_changed"},
		restore: []string{"ALTER FUNCTION enforce_community_deletion_request_guard() SECURITY DEFINER"},
	},
	{
		// Since migration 00026 a partition added after attach is fenced by
		// its clone of the row fence; disabling that clone unfences it.
		name: "disable the row fence's clone on a partition added after attach",
		tamper: []string{
			"CREATE TABLE fixture_activity_late PARTITION OF fixture_activity FOR VALUES IN ('00000000-0000-0000-0000-00000000abcd')",
			"ALTER TABLE fixture_activity_late DISABLE TRIGGER community_write_fence_row",
		},
		drift:   driftRow{"fixture_activity", "unfenced"},
		restore: []string{"DROP TABLE fixture_activity_late"},
	},
	{
		// A 'delete' table's key may be nullable since migration 00026 (a
		// row of no tenant); a 'nullify' table's must stay so.
		name:    "make a kept table's community_id NOT NULL",
		tamper:  []string{"ALTER TABLE fixture_audit_events ALTER COLUMN community_id SET NOT NULL"},
		drift:   driftRow{"fixture_audit_events", "shape"},
		restore: []string{"ALTER TABLE fixture_audit_events ALTER COLUMN community_id DROP NOT NULL"},
	},
	{
		name:    "rename a registered table",
		tamper:  []string{"ALTER TABLE fixture_reactions RENAME TO fixture_reactions_hidden"},
		drift:   driftRow{"fixture_reactions", "missing"},
		restore: []string{"ALTER TABLE fixture_reactions_hidden RENAME TO fixture_reactions"},
	},
}

// Without the DDL guard, a table owner can tamper with its own objects, but
// every tampering that lasts shows in the drift report (and so stops every
// deletion, which refuses while drift is reported); put back, the report is
// clean again. docs/roles.md lists what leaves no trace once put back.
func TestOwnerTamperingShowsInTheDriftReport(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, tc := range ownerTamperings {
		t.Run(tc.name, func(t *testing.T) {
			for _, sql := range tc.tamper {
				require.NoError(t, b.exec(t, sql), sql)
			}
			require.Contains(t, drift(t, b), tc.drift)
			for _, sql := range tc.restore {
				require.NoError(t, b.exec(t, sql), sql)
			}
			require.Empty(t, drift(t, b))
		})
	}
}

// installDDLGuard installs the optional DDL guard in the test's database.
func installDDLGuard(t *testing.T, b *testBundle) {
	t.Helper()
	install, _ := communitydeletion.DDLGuard()
	require.NoError(t, b.exec(t, install))
}

// With the DDL guard installed, the same tamperings are refused (42501) as
// the DDL command ends, whoever issues them (here the superuser who owns
// everything), and nothing changes. A migration run of this project, which
// the schema's owner opens, may still change functions.
func TestOwnerTamperingIsRefusedByTheDDLGuard(t *testing.T) {
	t.Parallel()
	b := setup(t)
	installDDLGuard(t, b)
	for _, tc := range ownerTamperings {
		if len(tc.tamper) > 1 {
			continue // a partition the guard fences at once; see below
		}
		t.Run(tc.name, func(t *testing.T) {
			requireSQLState(t, b.exec(t, tc.tamper[0]), pgerrcode.InsufficientPrivilege, "DDL refused: ")
			require.Empty(t, drift(t, b))
		})
	}

	// A migration run (opened by the schema's owner, here the superuser)
	// may replace a function.
	ctx := t.Context()
	conn, err := b.pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, "SELECT community_deletion.community_deletion_ddl_guard_open_run()")
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "ALTER FUNCTION community_write_allowed(uuid) RESET search_path")
	require.NoError(t, err, "allowed inside a migration run")
	_, err = conn.Exec(ctx, "ALTER FUNCTION community_write_allowed(uuid) SET search_path = pg_catalog, community_deletion, pg_temp")
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "SELECT community_deletion.community_deletion_ddl_guard_close_run()")
	require.NoError(t, err)
	require.Empty(t, drift(t, b))
}

// With the DDL guard, a partition added to a registered table is fenced (and
// granted to the deletion roles) as it is created or attached; attaching one
// that holds rows of a community being deleted is refused, so those rows
// cannot come back.
func TestDDLGuardFencesNewPartitionsAndRefusesForeignRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	installDDLGuard(t, b)
	ctx := t.Context()
	active := b.createCommunity(t)
	require.NoError(t, b.exec(t, fmt.Sprintf("CREATE TABLE fixture_activity_a PARTITION OF fixture_activity FOR VALUES IN ('%s')", active)))
	require.Equal(t, 3, fenceTriggers(t, b, "fixture_activity_a"))
	require.Empty(t, drift(t, b))
	// Fenced for real: the serving role writes the active community through
	// it, and the executor's grant is there.
	require.NoError(t, b.execAs(t, fixture.RoleServing, "INSERT INTO fixture_activity (community_id, kind) VALUES ($1, 'k')", active))
	require.NoError(t, b.execAs(t, fixture.RoleExecutor, "SELECT count(*) FROM fixture_activity_a"))

	_, fenced, _ := b.quiescingAndFenced(t)
	for _, sql := range []string{
		"CREATE TABLE smuggled (community_id uuid NOT NULL REFERENCES communities (id), id bigint GENERATED ALWAYS AS IDENTITY, kind text NOT NULL, PRIMARY KEY (community_id, id))",
		fmt.Sprintf("INSERT INTO smuggled (community_id, kind) VALUES ('%s', 'smuggled back')", fenced),
	} {
		require.NoError(t, b.exec(t, sql), sql)
	}
	err := b.exec(t, fmt.Sprintf("ALTER TABLE fixture_activity ATTACH PARTITION smuggled FOR VALUES IN ('%s')", fenced))
	requireSQLState(t, err, pgerrcode.InsufficientPrivilege, "holds rows of a community that is being deleted")
	var attached bool
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT relispartition FROM pg_class WHERE oid = 'smuggled'::regclass").Scan(&attached))
	require.False(t, attached)
	require.NoError(t, b.exec(t, "DROP TABLE smuggled"))

	// A service still creates and attaches a new tenant table of its own.
	require.NoError(t, b.exec(t, "CREATE TABLE fixture_polls (id bigint PRIMARY KEY, community_id uuid NOT NULL REFERENCES communities (id))"))
	require.NoError(t, b.exec(t, "SELECT attach_community_write_fence('fixture_polls')"))
	require.Empty(t, drift(t, b))
}

// Tenant data the purge could not see is drift: a table in another schema
// with a community_id column, a table keyed by a foreign key to communities
// under another column name, and a community_id of another type.
func TestDriftSeesTenantDataAnywhere(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, tc := range []struct {
		sql  []string
		want driftRow
	}{
		{[]string{"CREATE SCHEMA archive", "CREATE TABLE archive.old_messages (community_id uuid NOT NULL, body text)"},
			driftRow{"archive.old_messages", "unregistered"}},
		{[]string{"CREATE TABLE invoices (tenant uuid NOT NULL REFERENCES communities (id), total numeric)"},
			driftRow{"public.invoices", "unregistered"}},
		{[]string{"CREATE TABLE legacy_notes (community_id text NOT NULL, note text)"},
			driftRow{"public.legacy_notes", "unregistered: its community_id column is text, but the tenant key is uuid; " +
				"key it by a column of that kind, or exclude it with community_deletion.exclude_table('public.legacy_notes', reason)"}},
	} {
		for _, sql := range tc.sql {
			require.NoError(t, b.exec(t, sql), sql)
		}
		require.Contains(t, drift(t, b), tc.want)
	}
	// A temporary table is session-local and not tenant data.
	require.NoError(t, pgx.BeginFunc(t.Context(), b.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(t.Context(), "CREATE TEMP TABLE scratch (community_id uuid) ON COMMIT DROP"); err != nil {
			return err
		}
		var n int
		if err := tx.QueryRow(t.Context(), "SELECT count(*) FROM community_deletion_catalog_drift() WHERE table_name LIKE '%scratch%'").Scan(&n); err != nil {
			return err
		}
		if n != 0 {
			return errors.New("a temporary table was reported as drift")
		}
		return nil
	}))
}
