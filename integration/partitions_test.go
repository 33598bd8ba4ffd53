package integration

import (
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/fixture"
)

// notes returns the catalog notes, "table: note" each, but those about
// what a table's fence costs (fenceCostNotes has them).
func notes(t *testing.T, b *testBundle) []string {
	t.Helper()
	var out []string
	require.NoError(t, pgxscanStrings(t, b, "SELECT table_name || ': ' || note FROM community_deletion_catalog_notes() "+
		"WHERE note NOT LIKE 'its fence checks every write%'", &out))
	return out
}

// fenceCostNotes returns the catalog notes about what a table's fence
// costs: the tables a foreign key could bind, or that should be attached
// again to take the near-free path.
func fenceCostNotes(t *testing.T, b *testBundle) []string {
	t.Helper()
	var out []string
	require.NoError(t, pgxscanStrings(t, b, "SELECT table_name || ': ' || note FROM community_deletion_catalog_notes() "+
		"WHERE note LIKE 'its fence checks every write%'", &out))
	return out
}

// newPartitionNote is the note that names a partition created after attach.
func newPartitionNote(parent, partition string) string {
	return fmt.Sprintf("%s: partition svc.%s, created after attach, is fenced row by row and its TRUNCATE is not fenced: "+
		"run attach on svc.%s again to give it the statement-level fences", parent, partition, parent)
}

// Partitions created after attach, by the service at runtime, are fenced
// from the moment they exist, without attach running again: one created by
// the owner (CREATE TABLE ... PARTITION OF), one by the service's own
// SECURITY DEFINER function called by its serving login, one attached as
// pg_partman does (CREATE TABLE ... (LIKE ...), then ATTACH PARTITION), and
// one of a partitioned table attached through its parent. A fenced
// tenant's write is refused (55000) through the parent and into the
// partition, an UPDATE and a DELETE of its rows too; any write at
// REPEATABLE READ is refused (25000); an active tenant's rows and rows of
// no tenant pass. The drift report stays empty; the notes name each new
// partition until attach runs again; a clone disabled by the owner is
// drift ('unfenced').
func TestRuntimePartitionsAreFencedFromCreation(t *testing.T) {
	t.Parallel()
	b := setupBare(t)
	ctx := t.Context()
	owner := newServiceOwner(t, b)
	owner.run(t,
		"CREATE TABLE svc.accounts (id bigint PRIMARY KEY, name text NOT NULL)",
		`CREATE TABLE svc.events (account_id bigint NOT NULL, id bigint NOT NULL, at timestamptz NOT NULL, kind text NOT NULL,
			PRIMARY KEY (account_id, id, at)) PARTITION BY RANGE (at)`,
		"CREATE TABLE svc.events_2020 PARTITION OF svc.events FOR VALUES FROM ('2020-01-01') TO ('2021-01-01')",
		// Reaches the tenant through its foreign key to the tenant table.
		`CREATE TABLE svc.audit_trail (actor bigint REFERENCES svc.accounts (id), at timestamptz NOT NULL, what text NOT NULL)
			PARTITION BY RANGE (at)`,
		"CREATE TABLE svc.audit_trail_2020 PARTITION OF svc.audit_trail FOR VALUES FROM ('2020-01-01') TO ('2021-01-01')",
		// The service's partition maker, which its serving login runs.
		`CREATE FUNCTION svc.make_events_partition(year integer) RETURNS void
			LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
			BEGIN
				EXECUTE format('CREATE TABLE IF NOT EXISTS svc.%I PARTITION OF svc.events FOR VALUES FROM (%L) TO (%L)',
				               'events_' || year, make_date(year, 1, 1), make_date(year + 1, 1, 1));
				EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON svc.%I TO community_deletion_serving', 'events_' || year);
			END $$`,
		"REVOKE ALL ON FUNCTION svc.make_events_partition(integer) FROM PUBLIC",
		"GRANT EXECUTE ON FUNCTION svc.make_events_partition(integer) TO community_deletion_serving",
		"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA svc TO community_deletion_serving",
		"SELECT community_deletion.declare_tenant_table('svc.accounts')",
		"SELECT community_deletion.attach_community_write_fence('svc.events', 'delete', 'account_id')",
		"SELECT community_deletion.attach_child_table('svc.audit_trail')",
	)
	require.Empty(t, rawDrift(t, b))
	require.Empty(t, notes(t, b))
	serving := roleSession(t, b, fixture.RoleServing)
	_, err := serving.Exec(ctx, "INSERT INTO svc.accounts (id, name) VALUES (1, 'active'), (2, 'doomed')")
	require.NoError(t, err)

	// The partitions of 2021 to 2023, made three ways.
	owner.run(t,
		"CREATE TABLE svc.events_2021 PARTITION OF svc.events FOR VALUES FROM ('2021-01-01') TO ('2022-01-01')",
		"GRANT SELECT, INSERT, UPDATE, DELETE ON svc.events_2021 TO community_deletion_serving",
		"CREATE TABLE svc.audit_trail_2021 PARTITION OF svc.audit_trail FOR VALUES FROM ('2021-01-01') TO ('2022-01-01')",
		"GRANT SELECT, INSERT, UPDATE, DELETE ON svc.audit_trail_2021 TO community_deletion_serving",
	)
	_, err = serving.Exec(ctx, "SELECT svc.make_events_partition(2022)")
	require.NoError(t, err)
	owner.run(t,
		"CREATE TABLE svc.events_2023 (LIKE svc.events INCLUDING ALL)",
		"ALTER TABLE svc.events ATTACH PARTITION svc.events_2023 FOR VALUES FROM ('2023-01-01') TO ('2024-01-01')",
		"GRANT SELECT, INSERT, UPDATE, DELETE ON svc.events_2023 TO community_deletion_serving",
	)
	require.Empty(t, rawDrift(t, b))
	require.Equal(t, []string{
		newPartitionNote("audit_trail", "audit_trail_2021"),
		newPartitionNote("events", "events_2021"),
		newPartitionNote("events", "events_2022"),
		newPartitionNote("events", "events_2023"),
	}, notes(t, b))

	// Rows of both accounts in every partition while both are active; then
	// account 2 is fenced.
	id := 0
	write := func(sql string, args ...any) error {
		t.Helper()
		_, err := serving.Exec(ctx, sql, args...)
		return err
	}
	insertEvent := func(table string, account any, year int) error {
		t.Helper()
		id++
		return write(fmt.Sprintf("INSERT INTO svc.%s (account_id, id, at, kind) VALUES ($1, $2, make_date($3, 6, 1), 'k')", table), account, id, year)
	}
	insertAudit := func(table string, actor any, year int) error {
		t.Helper()
		return write(fmt.Sprintf("INSERT INTO svc.%s (actor, at, what) VALUES ($1, make_date($2, 6, 1), 'w')", table), actor, year)
	}
	for year := 2020; year <= 2023; year++ {
		for _, account := range []int{1, 2} {
			require.NoError(t, insertEvent("events", account, year))
			if year <= 2021 {
				require.NoError(t, insertAudit("audit_trail", account, year))
			}
		}
	}
	b.walkTenant(t, 2, "fenced")

	for year := 2020; year <= 2023; year++ {
		partition := fmt.Sprintf("events_%d", year)
		refused := fmt.Sprintf("community write to %s refused: community 2 is fenced", partition)
		requireSQLState(t, insertEvent("events", 2, year), sqlstateFenced, "community 2 is fenced")
		requireSQLState(t, insertEvent(partition, 2, year), sqlstateFenced, refused)
		requireSQLState(t, write(fmt.Sprintf("UPDATE svc.%s SET kind = 'edited' WHERE account_id = 2", partition)), sqlstateFenced, refused)
		requireSQLState(t, write(fmt.Sprintf("DELETE FROM svc.%s WHERE account_id = 2", partition)), sqlstateFenced, refused)
		requireSQLState(t, write(fmt.Sprintf("UPDATE svc.%s SET account_id = 2 WHERE account_id = 1", partition)), sqlstateFenced, refused)
		require.NoError(t, insertEvent("events", 1, year), partition)
		require.NoError(t, insertEvent(partition, 1, year), partition)
		require.NoError(t, write(fmt.Sprintf("UPDATE svc.%s SET kind = 'edited' WHERE account_id = 1", partition)), partition)

		tx, err := serving.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
		require.NoError(t, err)
		id++
		_, err = tx.Exec(ctx, fmt.Sprintf("INSERT INTO svc.%s (account_id, id, at, kind) VALUES (1, $1, make_date($2, 6, 1), 'rr')", partition), id, year)
		requireSQLState(t, err, sqlstateIsolation, "pins a snapshot")
		require.NoError(t, tx.Rollback(ctx))
	}
	for _, partition := range []string{"audit_trail_2020", "audit_trail_2021"} {
		year := map[string]int{"audit_trail_2020": 2020, "audit_trail_2021": 2021}[partition]
		refused := fmt.Sprintf("community write to %s refused: community 2 is fenced", partition)
		requireSQLState(t, insertAudit("audit_trail", 2, year), sqlstateFenced, "community 2 is fenced")
		requireSQLState(t, insertAudit(partition, 2, year), sqlstateFenced, refused)
		requireSQLState(t, write(fmt.Sprintf("DELETE FROM svc.%s WHERE actor = 2", partition)), sqlstateFenced, refused)
		require.NoError(t, insertAudit(partition, 1, year), partition)
		require.NoError(t, insertAudit(partition, nil, year), partition)
	}

	// The owner disables a new partition's clone: that is drift, which
	// stops every claim, until it is enabled again.
	owner.run(t, "ALTER TABLE svc.events_2022 DISABLE TRIGGER community_write_fence_row")
	require.Equal(t, []driftRow{{"events", "unfenced"}}, drift(t, b))
	owner.run(t, "ALTER TABLE svc.events_2022 ENABLE TRIGGER community_write_fence_row")
	require.Empty(t, rawDrift(t, b))

	// Attach again: every partition has the statement-level fences (and its
	// TRUNCATE fence), the notes are empty, and the partitions stay fenced.
	owner.run(t,
		"SELECT community_deletion.attach_community_write_fence('svc.events', 'delete', 'account_id')",
		"SELECT community_deletion.attach_child_table('svc.audit_trail')",
	)
	require.Empty(t, rawDrift(t, b))
	require.Empty(t, notes(t, b))
	for year := 2021; year <= 2023; year++ {
		partition := fmt.Sprintf("events_%d", year)
		require.Equal(t, 3, fenceTriggers(t, b, "svc."+partition), partition)
		requireSQLState(t, insertEvent(partition, 2, year), sqlstateFenced, fmt.Sprintf("community write to %s refused: community 2 is fenced", partition))
		require.NoError(t, insertEvent(partition, 1, year))
	}
	requireSQLState(t, insertAudit("audit_trail_2021", 2, 2021), sqlstateFenced, "community write to audit_trail_2021 refused: community 2 is fenced")
}

// With the optional DDL guard installed, a deployment keyed by an integer
// declares its tenant table and attaches its tables (one by its key, one
// through its parent), and a partition created after attach is let
// through and fenced like any other: the DDL succeeds, the drift report
// stays empty, and the partition refuses a fenced tenant's rows (55000)
// while it takes an active tenant's.
func TestDDLGuardLetsPartitionsOfIntegerAndChildTablesThrough(t *testing.T) {
	t.Parallel()
	b := setupBare(t)
	installDDLGuard(t, b)
	owner := newServiceOwner(t, b)
	owner.run(t,
		"CREATE TABLE svc.accounts (id bigint PRIMARY KEY, name text NOT NULL)",
		`CREATE TABLE svc.events (account_id bigint NOT NULL, id bigint NOT NULL, at timestamptz NOT NULL,
			PRIMARY KEY (account_id, id, at)) PARTITION BY RANGE (at)`,
		`CREATE TABLE svc.audit_trail (actor bigint REFERENCES svc.accounts (id), at timestamptz NOT NULL) PARTITION BY RANGE (at)`,
		"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA svc TO community_deletion_serving",
		"SELECT community_deletion.declare_tenant_table('svc.accounts')",
		"SELECT community_deletion.attach_community_write_fence('svc.events', 'delete', 'account_id')",
		"SELECT community_deletion.attach_child_table('svc.audit_trail')",
	)
	require.NoError(t, b.execAs(t, fixture.RoleServing, "INSERT INTO svc.accounts (id, name) VALUES (1, 'active'), (2, 'doomed')"))
	b.walkTenant(t, 2, "fenced")
	for _, sql := range []string{
		"CREATE TABLE svc.events_2021 PARTITION OF svc.events FOR VALUES FROM ('2021-01-01') TO ('2022-01-01')",
		"CREATE TABLE svc.audit_trail_2021 PARTITION OF svc.audit_trail FOR VALUES FROM ('2021-01-01') TO ('2022-01-01')",
		"GRANT SELECT, INSERT, UPDATE, DELETE ON svc.events_2021, svc.audit_trail_2021 TO community_deletion_serving",
	} {
		require.NoError(t, owner.exec(t, sql), sql)
	}
	require.Empty(t, rawDrift(t, b))
	for _, tc := range []struct{ table, insert string }{
		{"events_2021", "INSERT INTO svc.events_2021 (account_id, id, at) VALUES ($1, 1, '2021-06-01')"},
		{"audit_trail_2021", "INSERT INTO svc.audit_trail_2021 (actor, at) VALUES ($1, '2021-06-01')"},
	} {
		requireSQLState(t, b.execAs(t, fixture.RoleServing, tc.insert, 2), sqlstateFenced,
			fmt.Sprintf("community write to %s refused: community 2 is fenced", tc.table))
		require.NoError(t, b.execAs(t, fixture.RoleServing, tc.insert, 1), tc.table)
	}
}
