package main

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/ephemeralpg"
	"github.com/tombstoneworks/communitydeletion/internal/fixture"
)

// The benchmark runs end to end against the current schema on a small
// workload: it attaches the fence, runs every workload on both tables, then
// again while another tenant is fenced, and reports each row with its added
// cost and its target, for every table shape; with the row-trigger
// candidate and its floor after them for every bound shape.
func TestMeasureReportsEveryWorkload(t *testing.T) {
	t.Parallel()
	rows, err := measure(t.Context(), config{name: "fsync off"},
		settings{txns: 50, durableTxns: 50, bulkRows: 200, bulkRounds: 3, communities: 3, rowCandidate: true})
	require.NoError(t, err)
	bound := 0
	for _, k := range kinds {
		if k.bound {
			bound++
		}
	}
	require.Len(t, rows, 11*len(kinds)+8*bound)
	for _, r := range rows {
		require.Positive(t, r.unfenced, r.workload)
		require.Positive(t, r.fenced, r.workload)
	}

	var out bytes.Buffer
	report(&out, rows)
	for _, want := range []string{"fence adds", "single-row INSERT txns", "single-row UPDATE txns", "single-row DELETE txns", "floor: INSERT, empty trigger", "floor: UPDATE, empty trigger", "floor: DELETE, empty trigger",
		"200-row INSERT", "floor: 200-row INSERT, empty trigger", ">= 0.95", ">= 0.90", "<= 1.02",
		"fsync off, uuid organization_id, another tenant fenced", "fsync off, child via parent", "fsync off, bigint, no foreign key",
		"fsync off, child via parent, another tenant fenced, row-trigger candidate",
		"fsync off, bigint account_id, another tenant fenced, row-trigger candidate's floor (empty row triggers)"} {
		require.Contains(t, out.String(), want)
	}
}

// A target is a floor for throughput and a ceiling for durations, and an
// informational row never fails the run.
func TestRowMeetsItsTarget(t *testing.T) {
	t.Parallel()
	throughput := row{unfenced: 100, fenced: 80, higherIsBetter: true, target: 0.75}
	require.True(t, throughput.meets())
	throughput.target = 0.95
	require.False(t, throughput.meets())

	duration := row{unfenced: 100, fenced: 108, target: 1.10}
	require.True(t, duration.meets())
	duration.fenced = 111
	require.False(t, duration.meets())

	require.True(t, row{unfenced: 100, fenced: 1}.meets(), "no target")
	require.False(t, report(&bytes.Buffer{}, []row{throughput, duration}))
}

// The -pgbench mode reads pgbench -r's per-statement latencies, with
// PostgreSQL 15's failures column, by statement.
func TestParseStatementLatencies(t *testing.T) {
	t.Parallel()
	out := `pgbench (15.8 (Debian 15.8-0+deb12u1))
latency average = 0.412 ms
statement latencies in milliseconds and failures:
         0.002           0  \set k random(1, 50)
         0.061           0  INSERT INTO bench_unfenced (account_id, body) VALUES (:k, 'hello world') RETURNING id AS u \gset
         0.066           0  INSERT INTO bench_fenced (account_id, body) VALUES (:k, 'hello world') RETURNING id AS f \gset
`
	got, err := parseStatementLatencies(out)
	require.NoError(t, err)
	require.InDelta(t, 0.061, got[`INSERT INTO bench_unfenced (account_id, body) VALUES (:k, 'hello world') RETURNING id AS u \gset`], 1e-9)
	require.InDelta(t, 0.066, got[`INSERT INTO bench_fenced (account_id, body) VALUES (:k, 'hello world') RETURNING id AS f \gset`], 1e-9)
	_, err = parseStatementLatencies("latency average = 0.4 ms\n")
	require.Error(t, err)
}

// A -pgbench row is judged only where the target applies (a bound table,
// nothing in flight): it passes within 5 µs of the unfenced statement and 2
// µs of the empty trigger, and fails the run otherwise.
func TestReportPgbenchJudgesTheQuietBoundRows(t *testing.T) {
	t.Parallel()
	near := row{config: "fsync off, bigint account_id", workload: "single-row UPDATE", unfenced: 100, floor: 103, fenced: 104, target: pgbenchTargetUs}
	var out bytes.Buffer
	require.True(t, reportPgbench(&out, []row{near}))
	require.Contains(t, out.String(), "+4.0")
	require.Contains(t, out.String(), "+1.0")
	require.Contains(t, out.String(), "ok")

	overTarget := near
	overTarget.fenced = 106
	require.False(t, reportPgbench(&bytes.Buffer{}, []row{overTarget}), "6 µs over unfenced")
	overFloor := near
	overFloor.floor = 101
	require.False(t, reportPgbench(&bytes.Buffer{}, []row{overFloor}), "3 µs over the empty trigger")

	busy := near
	busy.config += ", another tenant fenced"
	busy.fenced, busy.target = 300, 0
	out.Reset()
	require.True(t, reportPgbench(&out, []row{busy}))
	require.Contains(t, out.String(), "no target")
}

// The -breakdown mode runs every step against the armed fence with
// another tenant fenced: a step's trigger raises, failing pgbench, if the
// fence were dormant or a written tenant shared the fenced one's bit, and
// the copied arguments are the real fence's for its shape.
func TestBreakdownReportsEveryStep(t *testing.T) {
	t.Parallel()
	rows, err := breakdown(t.Context(), 3, 1, time.Second)
	require.NoError(t, err)
	require.Len(t, rows, len(breakdownSteps))
	var out bytes.Buffer
	reportBreakdown(&out, rows)
	for _, r := range rows {
		require.Positive(t, r.us, r.step.name)
		require.Contains(t, out.String(), r.step.name)
		if r.step.reference() {
			for g := range groups {
				require.Positive(t, r.groupUs[g], r.step.name)
			}
			require.Contains(t, out.String(), r.step.name+", in the candidates' runs")
			require.Contains(t, out.String(), r.step.name+", in the long way's runs")
		}
	}
	require.Contains(t, out.String(), "(bd_generate)")
	require.Contains(t, out.String(), "(bd_row_floor)")
}

// The breakdown's steps and candidates that compare a tenant's fence bit
// refuse a row of the fenced tenant and admit one of a written tenant: the
// rows they time took the admitted path, not one that admits everything.
func TestBreakdownStepsRefuseTheFencedTenant(t *testing.T) {
	t.Parallel()
	checked := 0
	_, err := inBreakdownDatabase(t.Context(), 3, func(url string, host int64) ([]breakdownRow, error) {
		conn, err := pgx.Connect(t.Context(), url)
		if err != nil {
			return nil, err
		}
		defer func() { _ = conn.Close(context.WithoutCancel(t.Context())) }()
		for _, st := range breakdownSteps {
			// The floors and the hash's candidate compare no fence bit.
			if !slices.Contains([]string{"bits", "parents", "execute"}, st.step) && st.statement == "" &&
				(!st.candidate() || st.table == "bd_row_floor" || st.table == "bd_row_hash") {
				continue
			}
			insert := fmt.Sprintf("INSERT INTO %s (%s, body) VALUES ($1, 'hello world')", st.table, st.column)
			_, err := conn.Exec(t.Context(), insert, host)
			require.ErrorContains(t, err, "share", st.table)
			_, err = conn.Exec(t.Context(), insert, 1)
			require.NoError(t, err, st.table)
			checked++
		}
		return nil, nil
	})
	require.NoError(t, err)
	require.Equal(t, 10, checked)
}

// The -row-candidate mode's row triggers fence what the fence does: once
// swapped in with another tenant fenced, a row of that tenant is refused
// (55000), whether written, moved into or out of it or deleted, a REPEATABLE
// READ write is refused (25000), and a row of an active tenant is admitted.
// The rows it times took the admitted path of a fence, not a trigger that
// admits everything.
func TestRowCandidateFencesTheFencedTenant(t *testing.T) {
	t.Parallel()
	server, err := ephemeralpg.Start(t.Context(), ephemeralpg.Options{Fsync: false})
	require.NoError(t, err)
	t.Cleanup(func() { server.Close(context.WithoutCancel(t.Context())) })
	for _, k := range kinds {
		if !k.bound {
			continue
		}
		t.Run(k.name, func(t *testing.T) {
			url, drop, err := server.NewDatabase(t.Context(), fixture.Template{})
			require.NoError(t, err)
			t.Cleanup(func() { _ = drop(context.WithoutCancel(t.Context())) })
			pool, err := pgxpool.New(t.Context(), url)
			require.NoError(t, err)
			t.Cleanup(pool.Close)
			keys, err := k.setup(t.Context(), pool, 3)
			require.NoError(t, err)
			require.NoError(t, fenceAnotherTenant(t.Context(), url, k.inFlight))
			require.NoError(t, swapInRowFence(t.Context(), pool, k.column))
			var fenced any = int64(0)
			if k.column == "organization_id" {
				fenced = inFlightUUID
			}

			insert := fmt.Sprintf("INSERT INTO %s (%s, body) VALUES ($1, 'x') RETURNING id", fencedTable, k.column)
			var id int64
			require.NoError(t, pool.QueryRow(t.Context(), insert, keys[0]).Scan(&id))
			_, err = pool.Exec(t.Context(), insert, fenced)
			requireSQLState(t, err, "55000")
			_, err = pool.Exec(t.Context(), fmt.Sprintf("UPDATE %s SET %s = $1 WHERE id = $2", fencedTable, k.column), fenced, id)
			requireSQLState(t, err, "55000")

			// A row of the fenced tenant, written past the fence as the
			// superuser with the triggers off, cannot be deleted.
			tx, err := pool.Begin(t.Context())
			require.NoError(t, err)
			_, err = tx.Exec(t.Context(), "SET LOCAL session_replication_role = replica")
			require.NoError(t, err)
			var planted int64
			require.NoError(t, tx.QueryRow(t.Context(), insert, fenced).Scan(&planted))
			require.NoError(t, tx.Commit(t.Context()))
			_, err = pool.Exec(t.Context(), fmt.Sprintf("DELETE FROM %s WHERE id = $1", fencedTable), planted)
			requireSQLState(t, err, "55000")
			_, err = pool.Exec(t.Context(), fmt.Sprintf("UPDATE %s SET %s = $1 WHERE id = $2", fencedTable, k.column), keys[0], planted)
			requireSQLState(t, err, "55000")

			tx, err = pool.BeginTx(t.Context(), pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
			require.NoError(t, err)
			_, err = tx.Exec(t.Context(), insert, keys[1])
			requireSQLState(t, err, "25000")
			require.NoError(t, tx.Rollback(t.Context()))

			_, err = pool.Exec(t.Context(), fmt.Sprintf("DELETE FROM %s WHERE id = $1", fencedTable), id)
			require.NoError(t, err)
		})
	}
}

func requireSQLState(t *testing.T, err error, code string) {
	t.Helper()
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, code, pgErr.Code, pgErr.Message)
}
