package integration

import (
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	communitydeletion "github.com/tombstoneworks/communitydeletion"
)

// driftRow is one row of community_deletion_catalog_drift().
type driftRow struct {
	Table   string
	Problem string
}

// drift returns the catalog drift report, each unregistered table's next
// step (the call that registers it) cut to its class "unregistered";
// rawDrift keeps it.
func drift(t *testing.T, b *testBundle) []driftRow {
	t.Helper()
	report := rawDrift(t, b)
	for i, r := range report {
		if detail, ok := strings.CutPrefix(r.Problem, "unregistered: "); ok &&
			(strings.HasPrefix(detail, "attach it by its ") || strings.HasPrefix(detail, "it references ")) {
			report[i].Problem = "unregistered"
		}
	}
	return report
}

func rawDrift(t *testing.T, b *testBundle) []driftRow {
	t.Helper()
	rows, err := b.pool.Query(t.Context(), "SELECT table_name, problem FROM community_deletion_catalog_drift()")
	require.NoError(t, err)
	report, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (driftRow, error) {
		var r driftRow
		err := row.Scan(&r.Table, &r.Problem)
		return r, err
	})
	require.NoError(t, err)
	return report
}

// fenceTriggers counts the enabled-or-not fence triggers on a relation.
func fenceTriggers(t *testing.T, b *testBundle, relation string) int {
	t.Helper()
	var count int
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_trigger
		WHERE tgrelid = $1::regclass AND tgfoid = 'enforce_community_write_fence()'::regprocedure AND NOT tgisinternal`,
		relation).Scan(&count))
	return count
}

// The fixture database, registered through attach_community_write_fence,
// reports no drift.
func TestCatalogFixtureHasNoDrift(t *testing.T) {
	t.Parallel()
	b := setup(t)
	require.Empty(t, drift(t, b))
	for _, table := range []string{"fixture_members", "fixture_channels", "fixture_messages", "fixture_reactions",
		"fixture_attachments", "fixture_activity", "fixture_activity_default"} {
		require.Equal(t, 3, fenceTriggers(t, b, table), table)
	}
}

// A new table with a community_id uuid column is reported 'unregistered'
// until it is attached; attaching is idempotent and leaves exactly three
// fence triggers, which fence the new table.
func TestCatalogUnregisteredTableUntilAttached(t *testing.T) {
	t.Parallel()
	b := setup(t)
	require.NoError(t, b.exec(t, "CREATE TABLE fixture_polls (id bigint PRIMARY KEY, community_id uuid NOT NULL REFERENCES communities (id))"))
	require.Equal(t, []driftRow{{"public.fixture_polls", "unregistered"}}, drift(t, b))

	require.NoError(t, b.exec(t, "SELECT attach_community_write_fence('fixture_polls')"))
	require.Empty(t, drift(t, b))
	require.Equal(t, 3, fenceTriggers(t, b, "fixture_polls"))

	require.NoError(t, b.exec(t, "SELECT attach_community_write_fence('fixture_polls')"))
	require.NoError(t, b.exec(t, "SELECT attach_community_write_fence('fixture_polls', 'delete')"))
	require.Empty(t, drift(t, b))
	require.Equal(t, 3, fenceTriggers(t, b, "fixture_polls"))
	var action string
	require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT purge_action FROM community_scoped_tables WHERE table_name = 'fixture_polls'").Scan(&action))
	require.Equal(t, "delete", action)

	community, _ := b.communityIn(t, "fenced")
	requireSQLState(t, b.exec(t, "INSERT INTO fixture_polls VALUES (1, $1)", community), sqlstateFenced, "community write to fixture_polls refused")
	require.NoError(t, b.exec(t, "INSERT INTO fixture_polls VALUES (2, $1)", b.createCommunity(t)))
}

// attach_community_write_fence refuses (22023) a table without a uuid
// community_id (a text key needs a tenant table keyed by text) and a NOT
// NULL one for 'nullify' (a nullable one for 'delete' is fine: a row with a
// NULL key belongs to no tenant),
// a control-plane table or a system table, a change or a bad value of purge
// action, a partition and a non-table. A table of another of the service's
// schemas is attached like any other.
func TestCatalogAttachRefusals(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, ddl := range []string{
		"CREATE TABLE no_community (id bigint)",
		"CREATE TABLE text_community (community_id text NOT NULL)",
		"CREATE TABLE nullable_community (community_id uuid)",
		"CREATE VIEW member_view AS SELECT community_id FROM fixture_members",
		"CREATE SCHEMA elsewhere",
		"CREATE TABLE elsewhere.notes (community_id uuid NOT NULL)",
		"CREATE TABLE nn_community (community_id uuid NOT NULL)",
		// Registered 'nullify' while nullable, then made NOT NULL: only the
		// change of purge action can refuse it for 'delete'.
		"CREATE TABLE nn_audit (community_id uuid)",
		"SELECT attach_community_write_fence('nn_audit', 'nullify')",
		"ALTER TABLE nn_audit ALTER COLUMN community_id SET NOT NULL",
		// The mirror image: registered 'delete', then made nullable.
		"CREATE TABLE loose_members (community_id uuid NOT NULL)",
		"SELECT attach_community_write_fence('loose_members')",
		"ALTER TABLE loose_members ALTER COLUMN community_id DROP NOT NULL",
	} {
		require.NoError(t, b.exec(t, ddl))
	}
	const invalid = "22023"

	for name, tc := range map[string]struct{ call, contains string }{
		"no community_id":             {"SELECT attach_community_write_fence('no_community')", "has no column community_id"},
		"text community_id":           {"SELECT attach_community_write_fence('text_community')", "a key of another kind needs a tenant table keyed by it"},
		"NOT NULL for nullify":        {"SELECT attach_community_write_fence('nn_community', 'nullify')", "community_id must be nullable"},
		"control plane":               {"SELECT attach_community_write_fence('community_deletion_requests')", "is not in a schema that holds tenant tables"},
		"control plane nullify":       {"SELECT attach_community_write_fence('community_serving_write_leases', 'nullify')", "is not in a schema that holds tenant tables"},
		"delete to nullify":           {"SELECT attach_community_write_fence('fixture_members', 'nullify')", "community_id must be nullable"},
		"delete to nullify, nullable": {"SELECT attach_community_write_fence('loose_members', 'nullify')", "it cannot change to 'nullify'"},
		"bad purge action":            {"SELECT attach_community_write_fence('fixture_members', 'truncate')", "purge_action must be 'delete' or 'nullify'"},
		"null purge action":           {"SELECT attach_community_write_fence('fixture_members', NULL)", "purge_action must be 'delete' or 'nullify'"},
		"partition":                   {"SELECT attach_community_write_fence('fixture_activity_default')", "is a partition: attach its partitioned parent"},
		"view":                        {"SELECT attach_community_write_fence('member_view')", "is not a table"},
		"system schema":               {"SELECT attach_community_write_fence('pg_catalog.pg_class')", "is not in a schema that holds tenant tables"},
		"nullify to delete":           {"SELECT attach_community_write_fence('fixture_audit_events', 'delete')", "it cannot change to 'delete'"},
		"nullify to delete nn":        {"SELECT attach_community_write_fence('nn_audit', 'delete')", "it cannot change to 'delete'"},
		"nullable text nullify":       {"SELECT attach_community_write_fence('text_community', 'nullify')", "a key of another kind needs a tenant table keyed by it"},
		"no community_id nullify":     {"SELECT attach_community_write_fence('no_community', 'nullify')", "has no column community_id"},
	} {
		t.Run(name, func(t *testing.T) {
			requireSQLState(t, b.exec(t, tc.call), invalid, tc.contains)
		})
	}

	var registered int
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT count(*) FROM community_scoped_tables
		WHERE table_name IN ('no_community', 'text_community', 'nn_community', 'community_deletion_requests',
			'community_serving_write_leases', 'fixture_activity_default', 'member_view', 'pg_class')`).Scan(&registered))
	require.Zero(t, registered)
	require.NoError(t, b.exec(t, "SELECT attach_community_write_fence('elsewhere.notes')"))
	var schema string
	require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT table_schema FROM community_scoped_tables WHERE table_name = 'notes'").Scan(&schema))
	require.Equal(t, "elsewhere", schema)
	var action string
	require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT purge_action FROM community_scoped_tables WHERE table_name = 'fixture_members'").Scan(&action))
	require.Equal(t, "delete", action)
	require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT purge_action FROM community_scoped_tables WHERE table_name = 'nn_audit'").Scan(&action))
	require.Equal(t, "nullify", action)
	require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT purge_action FROM community_scoped_tables WHERE table_name = 'loose_members'").Scan(&action))
	require.Equal(t, "delete", action)

	// The allowed counterparts: the nullable table (as 'delete', its NULL
	// rows of no tenant), the registered table again with its own action.
	require.NoError(t, b.exec(t, "SELECT attach_community_write_fence('nullable_community')"))
	require.NoError(t, b.exec(t, "SELECT attach_community_write_fence('fixture_members')"))
	require.NoError(t, b.exec(t, "SELECT attach_community_write_fence('fixture_audit_events', 'nullify')"))
}

// A registered table that is dropped, or loses its community_id column, is
// reported 'missing'.
func TestCatalogReportsMissingTables(t *testing.T) {
	t.Parallel()
	b := setup(t)
	require.NoError(t, b.exec(t, "DROP TABLE fixture_attachments"))
	require.Equal(t, []driftRow{{"fixture_attachments", "missing"}}, drift(t, b))

	require.NoError(t, b.exec(t, "ALTER TABLE fixture_audit_events DROP COLUMN community_id"))
	require.Equal(t, []driftRow{{"fixture_attachments", "missing"}, {"fixture_audit_events", "missing"}}, drift(t, b))
}

// A registered 'nullify' table whose key is made NOT NULL is reported
// 'shape' (the purge could not clear it). A 'delete' table's key made
// nullable is not: its rows with a NULL key belong to no tenant.
func TestCatalogReportsReshapedTables(t *testing.T) {
	t.Parallel()
	b := setup(t)
	require.NoError(t, b.exec(t, "ALTER TABLE fixture_attachments ALTER COLUMN community_id DROP NOT NULL"))
	require.Empty(t, drift(t, b))
	require.NoError(t, b.exec(t, "ALTER TABLE fixture_audit_events ALTER COLUMN community_id SET NOT NULL"))
	require.Equal(t, []driftRow{{"fixture_audit_events", "shape"}}, drift(t, b))

	require.NoError(t, b.exec(t, "ALTER TABLE fixture_audit_events ALTER COLUMN community_id DROP NOT NULL"))
	require.Empty(t, drift(t, b))
}

// A registered 'delete' table with one fence trigger disabled or dropped is
// reported 'unfenced'; re-enabling or re-attaching clears it.
func TestCatalogReportsUnfencedTables(t *testing.T) {
	t.Parallel()
	b := setup(t)

	for _, tc := range []struct{ relation, change, table string }{
		{"fixture_members", "ALTER TABLE fixture_members DISABLE TRIGGER community_write_fence_update", "fixture_members"},
		{"fixture_members", "ALTER TABLE fixture_members ENABLE REPLICA TRIGGER community_write_fence_insert", "fixture_members"},
		{"fixture_members", "ALTER TABLE fixture_members DISABLE TRIGGER USER", "fixture_members"},
		{"fixture_members", "DROP TRIGGER community_write_fence_delete ON fixture_members", "fixture_members"},
		{"fixture_activity_default", "ALTER TABLE fixture_activity_default DISABLE TRIGGER community_write_fence_insert", "fixture_activity"},
		{"fixture_activity", "DROP TRIGGER community_write_fence_update ON fixture_activity", "fixture_activity"},
	} {
		t.Run(tc.change, func(t *testing.T) {
			require.NoError(t, b.exec(t, tc.change))
			require.Equal(t, []driftRow{{tc.table, "unfenced"}}, drift(t, b))
			require.NoError(t, b.exec(t, "ALTER TABLE "+tc.relation+" ENABLE TRIGGER USER"))
			require.NoError(t, b.exec(t, "SELECT attach_community_write_fence($1)", tc.table))
			require.Empty(t, drift(t, b))
		})
	}
}

// A partition added to fixture_activity after attach is fenced from the
// moment it exists, by the clone of the partitioned table's row-level fence:
// no drift, a write into a fenced community refused whether it names the
// partition or its parent; the notes say that attach again gives it the
// statement-level fences (and so its TRUNCATE fence), which disables the
// clone.
func TestCatalogNewPartitionFencedFromCreation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	community := b.createCommunity(t)
	require.NoError(t, b.exec(t, fmt.Sprintf(
		"CREATE TABLE fixture_activity_one PARTITION OF fixture_activity FOR VALUES IN ('%s')", community)))
	require.Empty(t, drift(t, b))
	require.Zero(t, fenceTriggers(t, b, "fixture_activity_one"))
	b.quiesce(t, community)
	b.fence(t, community)
	// (A partition of PostgreSQL 15 does not inherit its parent's identity
	// column: a write to it names the id.)
	requireSQLState(t, b.exec(t, "INSERT INTO fixture_activity_one (community_id, id, kind) VALUES ($1, 9001, 'late')", community),
		sqlstateFenced, "community write to fixture_activity_one refused")
	requireSQLState(t, b.exec(t, "INSERT INTO fixture_activity (community_id, kind) VALUES ($1, 'late')", community),
		sqlstateFenced, "community write to fixture_activity_one refused")
	var notes []string
	require.NoError(t, pgxscanStrings(t, b, "SELECT note FROM community_deletion_catalog_notes()", &notes))
	require.Len(t, notes, 1)
	require.Contains(t, notes[0], "partition public.fixture_activity_one, created after attach, is fenced row by row")

	require.NoError(t, b.exec(t, "SELECT attach_community_write_fence('fixture_activity')"))
	require.Empty(t, drift(t, b))
	require.Equal(t, 3, fenceTriggers(t, b, "fixture_activity_one"))
	require.NoError(t, pgxscanStrings(t, b, "SELECT note FROM community_deletion_catalog_notes()", &notes))
	require.Empty(t, notes)
	requireSQLState(t, b.exec(t, "INSERT INTO fixture_activity_one (community_id, id, kind) VALUES ($1, 9002, 'late')", community),
		sqlstateFenced, "community write to fixture_activity_one refused")
}

// pgxscanStrings reads one text column of every row of sql into out.
func pgxscanStrings(t *testing.T, b *testBundle, sql string, out *[]string) error {
	t.Helper()
	rows, err := b.pool.Query(t.Context(), sql)
	if err != nil {
		return err
	}
	*out, err = pgx.CollectRows(rows, pgx.RowTo[string])
	return err
}

// A fence trigger created by hand on a table that is not a registered
// 'delete' table (or its partition) is reported 'stray_fence'.
func TestCatalogReportsStrayFences(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const stray = `CREATE TRIGGER community_write_fence_insert AFTER INSERT ON %s
		REFERENCING NEW TABLE AS community_fence_new FOR EACH STATEMENT EXECUTE FUNCTION enforce_community_write_fence()`

	require.NoError(t, b.exec(t, "CREATE TABLE scratch (id bigint)"))
	require.NoError(t, b.exec(t, fmt.Sprintf(stray, "scratch")))
	require.Equal(t, []driftRow{{"scratch", "stray_fence"}}, drift(t, b))

	require.NoError(t, b.exec(t, fmt.Sprintf(stray, "fixture_audit_events")))
	require.Equal(t, []driftRow{{"fixture_audit_events", "stray_fence"}, {"scratch", "stray_fence"}}, drift(t, b))

	require.NoError(t, b.exec(t, "CREATE TABLE polls (community_id uuid NOT NULL)"))
	require.NoError(t, b.exec(t, fmt.Sprintf(stray, "polls")))
	require.Equal(t, []driftRow{
		{"fixture_audit_events", "stray_fence"}, {"polls", "stray_fence"}, {"public.polls", "unregistered"}, {"scratch", "stray_fence"},
	}, drift(t, b))

	// Registering polls turns its hand-made trigger into part of the fence.
	require.NoError(t, b.exec(t, "SELECT attach_community_write_fence('polls')"))
	require.NoError(t, b.exec(t, "DROP TRIGGER community_write_fence_insert ON scratch"))
	require.NoError(t, b.exec(t, "DROP TRIGGER community_write_fence_insert ON fixture_audit_events"))
	require.Empty(t, drift(t, b))
}

// A 'nullify' table gets no write fence and is excluded from it, like the
// control plane; 'delete' tables are not excluded.
func TestCatalogNullifyTablesAndExclusion(t *testing.T) {
	t.Parallel()
	b := setup(t)
	require.Zero(t, fenceTriggers(t, b, "fixture_audit_events"))

	require.NoError(t, b.exec(t, "CREATE TABLE fixture_exports (id bigint, community_id uuid REFERENCES communities (id))"))
	require.Equal(t, []driftRow{{"public.fixture_exports", "unregistered"}}, drift(t, b))
	require.NoError(t, b.exec(t, "SELECT attach_community_write_fence('fixture_exports', 'nullify')"))
	require.Zero(t, fenceTriggers(t, b, "fixture_exports"))
	require.Empty(t, drift(t, b))

	excluded := func(table string) bool {
		var out bool
		require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT community_write_fence_excluded_table($1)", table).Scan(&out))
		return out
	}
	for _, table := range []string{
		"communities", "community_deletion_approvals", "community_deletion_checkpoints",
		"community_deletion_executor_heartbeats", "community_deletion_manifest_keys", "community_deletion_requests",
		"community_scoped_tables", "community_serving_write_leases", "storage_taxonomy_sweeps",
		"fixture_audit_events", "fixture_exports",
	} {
		require.True(t, excluded(table), table)
	}
	for _, table := range []string{"fixture_members", "fixture_activity", "fixture_messages", "unknown_table", ""} {
		require.False(t, excluded(table), table)
	}

	// A 'nullify' table takes rows that name no community, but not one that
	// links a row to a fenced community (its kept-row fence, 55000).
	fenced, _ := b.communityIn(t, "fenced")
	require.NoError(t, b.exec(t, "INSERT INTO fixture_audit_events (community_id, action) VALUES (NULL, 'fenced')"))
	requireSQLState(t, b.exec(t, "INSERT INTO fixture_audit_events (community_id, action) VALUES ($1, 'fenced')", fenced),
		sqlstateFenced, "kept rows stay unlinked")
	requireSQLState(t, insertMember(t.Context(), b.pool, fenced, "late"), sqlstateFenced, "community write to fixture_members refused")
}

// Writes straight into a partition of fixture_activity are fenced like
// writes through the parent.
func TestCatalogPartitionWritesAreFenced(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	community := b.createCommunity(t)
	partition := "fixture_activity_own"
	require.NoError(t, b.exec(t, fmt.Sprintf("CREATE TABLE %s PARTITION OF fixture_activity FOR VALUES IN ('%s')", partition, community)))
	require.NoError(t, b.exec(t, "SELECT attach_community_write_fence('fixture_activity')"))
	require.Empty(t, drift(t, b))

	require.NoError(t, b.exec(t, "INSERT INTO "+partition+" (community_id, id, kind) VALUES ($1, 1000, 'direct')", community),
		"active: a direct partition write is admitted")
	require.NoError(t, b.exec(t, "INSERT INTO fixture_activity (community_id, kind) VALUES ($1, 'parent')", community))

	b.quiesce(t, community)
	b.fence(t, community)
	want := fmt.Sprintf("community %s is fenced", community)
	for name, stmt := range map[string]string{
		"direct insert": "INSERT INTO " + partition + " (community_id, id, kind) VALUES ($1, 1001, 'direct')",
		"direct update": "UPDATE " + partition + " SET kind = 'changed' WHERE community_id = $1",
		"direct delete": "DELETE FROM " + partition + " WHERE community_id = $1",
		"parent insert": "INSERT INTO fixture_activity (community_id, kind) VALUES ($1, 'parent')",
		"parent update": "UPDATE fixture_activity SET kind = 'changed' WHERE community_id = $1",
		"parent delete": "DELETE FROM fixture_activity WHERE community_id = $1",
	} {
		t.Run(name, func(t *testing.T) {
			requireSQLState(t, b.exec(t, stmt, community), sqlstateFenced, want)
		})
	}
	var count int
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM "+partition+" WHERE kind IN ('direct', 'parent')").Scan(&count))
	require.Equal(t, 2, count)
}

// A 'nullify' table keeps its rows and has community_id cleared, so
// attach_community_write_fence refuses (22023) one whose community_id is NOT
// NULL: the purge could never clear it. Nullable, it registers.
func TestCatalogAttachNullifyNeedsNullable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	require.NoError(t, b.exec(t, "CREATE TABLE fixture_exports (id bigint, community_id uuid NOT NULL REFERENCES communities (id))"))
	require.Equal(t, []driftRow{{"public.fixture_exports", "unregistered"}}, drift(t, b))

	requireSQLState(t, b.exec(t, "SELECT attach_community_write_fence('fixture_exports', 'nullify')"), "22023",
		"fixture_exports.community_id must be nullable to be cleared by deletion")
	var registered int
	require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT count(*) FROM community_scoped_tables WHERE table_name = 'fixture_exports'").Scan(&registered))
	require.Zero(t, registered)
	require.Equal(t, []driftRow{{"public.fixture_exports", "unregistered"}}, drift(t, b))

	require.NoError(t, b.exec(t, "ALTER TABLE fixture_exports ALTER COLUMN community_id DROP NOT NULL"))
	require.NoError(t, b.exec(t, "SELECT attach_community_write_fence('fixture_exports', 'nullify')"))
	require.NoError(t, b.exec(t, "SELECT attach_community_write_fence('fixture_audit_events', 'nullify')"), "the fixture's nullify table again")
	require.Empty(t, drift(t, b))
	require.Zero(t, fenceTriggers(t, b, "fixture_exports"))
}

// The SQL lock-key functions return what the Go code and the migration job
// use: the schema-destruction key is the documented constant, and the
// community key is stable and differs between communities.
func TestLockKeysMatchTheGoConstants(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var key int64
	require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT community_schema_destruction_lock_key()").Scan(&key))
	require.Equal(t, communitydeletion.SchemaDestructionLockKey, key)

	var first, again, other int64
	//nolint:dupword // the same key twice, to show it is stable
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT community_deletion_lock_key('11111111-1111-1111-1111-111111111111'),
		community_deletion_lock_key('11111111-1111-1111-1111-111111111111'),
		community_deletion_lock_key('22222222-2222-2222-2222-222222222222')`).Scan(&first, &again, &other))
	require.Equal(t, first, again)
	require.NotEqual(t, first, other)
	require.NotEqual(t, communitydeletion.SchemaDestructionLockKey, first)
}
