package integration

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/fixture"
)

// pg_partman (Debian's postgresql-15-partman, 4.7) creates a registered
// table's partitions after attach, by CREATE TABLE ... (LIKE template) and
// ALTER TABLE ... ATTACH PARTITION, while the service writes into the
// parent: its create_parent(), create_partition_time() and
// run_maintenance() never fail a write of an active tenant, and every
// partition it made is fenced from the moment it exists (55000 for a
// fenced tenant's row, written into the parent or into the partition),
// with no drift; the notes name each partition until attach runs again.
// pg_partman itself runs as a superuser, as a maintenance job does, and
// gives the parent's owner its partitions; its template table, which holds
// the tenant key column, is excluded by its owner.
func TestPgPartmanPartitionsAreFenced(t *testing.T) {
	t.Parallel()
	b := setupBare(t)
	ctx := t.Context()
	owner := newServiceOwner(t, b)
	owner.run(t,
		"CREATE TABLE svc.accounts (id bigint PRIMARY KEY, name text NOT NULL)",
		`CREATE TABLE svc.events (account_id bigint NOT NULL, id bigint NOT NULL, at timestamptz NOT NULL DEFAULT now(), kind text NOT NULL,
			PRIMARY KEY (id, at)) PARTITION BY RANGE (at)`,
		"CREATE INDEX ON svc.events (account_id, at)",
		"CREATE SEQUENCE svc.events_id_seq",
		"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA svc TO community_deletion_serving",
		"GRANT USAGE ON SEQUENCE svc.events_id_seq TO community_deletion_serving",
		"SELECT community_deletion.declare_tenant_table('svc.accounts')",
		"SELECT community_deletion.attach_community_write_fence('svc.events', 'delete', 'account_id')",
	)
	require.NoError(t, b.execAs(t, fixture.RoleServing, "INSERT INTO svc.accounts (id, name) VALUES (1, 'active'), (2, 'doomed')"))
	for _, sql := range []string{
		"CREATE SCHEMA partman",
		"CREATE EXTENSION pg_partman SCHEMA partman",
		`SELECT partman.create_parent(p_parent_table := 'svc.events', p_control := 'at', p_type := 'native',
			p_interval := 'daily', p_premake := 1, p_jobmon := false)`,
		// Partitions owned by the parent's owner, with its grants.
		"UPDATE partman.part_config SET inherit_privileges = true WHERE parent_table = 'svc.events'",
		"SELECT partman.reapply_privileges('svc.events')",
		"GRANT USAGE ON SCHEMA partman TO " + owner.name,
	} {
		require.NoError(t, b.exec(t, sql), sql)
	}
	b.walkTenant(t, 2, "fenced")

	// The service writes the active account's events into the parent, one
	// statement after another, while pg_partman makes partitions.
	writer := b.as(fixture.RoleServing)
	var written atomic.Int64
	wrote := make(chan struct{}, 1) // a write since the last receive
	stop := make(chan struct{})
	writerDone := make(chan error, 1)
	go func() {
		for {
			_, err := writer.Exec(ctx, "INSERT INTO svc.events (account_id, id, kind) VALUES (1, nextval('svc.events_id_seq'), 'live')")
			if err != nil {
				writerDone <- fmt.Errorf("write %d: %w", written.Load()+1, err)
				return
			}
			written.Add(1)
			select {
			case wrote <- struct{}{}:
			default:
			}
			select {
			case <-stop:
				writerDone <- nil
				return
			default:
			}
		}
	}()
	waitForWrite := func(after int64) {
		t.Helper()
		for written.Load() <= after {
			select {
			case <-wrote:
			case err := <-writerDone:
				t.Fatalf("the writer stopped after %d writes: %v", written.Load(), err)
			}
		}
	}
	waitForWrite(0)
	for _, sql := range []string{
		`SELECT partman.create_partition_time('svc.events',
			ARRAY[date_trunc('day', now()) + interval '3 days', date_trunc('day', now()) + interval '4 days'])`,
		"UPDATE partman.part_config SET premake = 6 WHERE parent_table = 'svc.events'",
		"SELECT partman.run_maintenance('svc.events', p_jobmon := false)",
	} {
		require.NoError(t, b.exec(t, sql), sql)
	}
	// At least one more write after maintenance, then stop.
	waitForWrite(written.Load())
	close(stop)
	require.NoError(t, <-writerDone, "an active account's writes pass while pg_partman works")

	// Every partition pg_partman made, with a moment inside its range.
	rows, err := b.pool.Query(ctx, `SELECT p.partition_tablename, i.child_start_time + interval '1 hour'
		FROM partman.show_partitions('svc.events') p,
		LATERAL partman.show_partition_info(p.partition_schemaname || '.' || p.partition_tablename) i ORDER BY 1`)
	require.NoError(t, err)
	type partition struct {
		name string
		at   time.Time
	}
	partitions, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (partition, error) {
		var p partition
		return p, row.Scan(&p.name, &p.at)
	})
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(partitions), 7, "create_parent: yesterday to tomorrow; then 3 and 4 days ahead; run_maintenance: 5 and 6")
	partitions = append(partitions, partition{"events_default", time.Date(2999, 1, 1, 0, 0, 0, 0, time.UTC)})

	// pg_partman's template table has the tenant key column: drift names
	// it until its owner (the parent's) excludes it.
	require.Equal(t, []driftRow{{"partman.template_svc_events", "unregistered"}}, drift(t, b))
	owner.run(t, "SELECT community_deletion.exclude_table('partman.template_svc_events', 'pg_partman''s template, which holds no rows')")
	require.Empty(t, rawDrift(t, b))
	var wantNotes []string
	for _, p := range partitions {
		wantNotes = append(wantNotes, newPartitionNote("events", p.name))
	}
	require.ElementsMatch(t, wantNotes, notes(t, b))

	serving := roleSession(t, b, fixture.RoleServing)
	for _, p := range partitions {
		refused := fmt.Sprintf("community write to %s refused: community 2 is fenced", p.name)
		for _, table := range []string{"events", p.name} {
			_, err := serving.Exec(ctx, fmt.Sprintf("INSERT INTO svc.%s (account_id, id, at, kind) VALUES ($1, nextval('svc.events_id_seq'), $2, 'late')", table), 2, p.at)
			requireSQLState(t, err, sqlstateFenced, refused)
			_, err = serving.Exec(ctx, fmt.Sprintf("INSERT INTO svc.%s (account_id, id, at, kind) VALUES ($1, nextval('svc.events_id_seq'), $2, 'ok')", table), 1, p.at)
			require.NoError(t, err, "%s at %s", table, p.at)
		}
		_, err := serving.Exec(ctx, fmt.Sprintf("UPDATE svc.%s SET account_id = 2 WHERE account_id = 1", p.name))
		requireSQLState(t, err, sqlstateFenced, refused)
	}
	var late int
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM svc.events WHERE account_id = 2").Scan(&late))
	require.Zero(t, late)

	// Attach again gives them the statement-level fences; the notes clear.
	owner.run(t, "SELECT community_deletion.attach_community_write_fence('svc.events', 'delete', 'account_id')")
	require.Empty(t, notes(t, b))
	require.Empty(t, rawDrift(t, b))
}
