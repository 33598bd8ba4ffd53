// Command fence measures what the community write fence costs. It runs one
// workload against a fenced table and an identical unfenced table in the same
// run, on two throwaway PostgreSQL servers: one with production durability
// (fsync and synchronous_commit on) and one with fsync off, which strips the
// disk cost away and exposes the trigger's own cost. Single-row transactions
// alternate between the two tables one by one, so both see the same server
// and disk conditions. A third table with an empty PL/pgSQL statement
// trigger gives the floor any statement-level PL/pgSQL fence pays. It prints
// one table, the unfenced baseline beside the fenced figure and what the
// fence adds per unit of work, and checks three targets:
//
//   - durable, single-row write transactions: fenced keeps >= 95% of unfenced throughput
//   - fsync off, single-row write transactions: fenced keeps >= 75%
//   - fsync off, one 10,000-row INSERT: fenced costs <= 1.10x unfenced
//
// Run it with: go run ./bench/fence
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tombstoneworks/communitydeletion/internal/ephemeralpg"
	"github.com/tombstoneworks/communitydeletion/internal/fixture"
)

type settings struct {
	txns        int
	durableTxns int
	bulkRows    int
	bulkRounds  int
	communities int
	strict      bool
}

type config struct {
	name  string
	fsync bool
}

// row is one line of the report.
type row struct {
	config, workload, unit string
	unfenced, fenced       float64
	// higherIsBetter is true for throughput, false for durations.
	higherIsBetter bool
	// target bounds fenced/unfenced: a floor for throughput, a ceiling for
	// durations; 0 marks an informational row.
	target float64
}

func (r row) ratio() float64 { return r.fenced / r.unfenced }

// added is what the fence adds to one unit of work: microseconds per
// transaction for throughput rows, milliseconds per statement otherwise. It
// carries over to other hardware better than the ratio does, since the ratio
// also depends on how long a commit takes to reach the disk.
func (r row) added() string {
	if r.higherIsBetter {
		return fmt.Sprintf("%+.1f µs/txn", 1e6/r.fenced-1e6/r.unfenced)
	}
	return fmt.Sprintf("%+.1f ms", r.fenced-r.unfenced)
}

func (r row) meets() bool {
	if r.target == 0 {
		return true
	}
	if r.higherIsBetter {
		return r.ratio() >= r.target
	}
	return r.ratio() <= r.target
}

func main() {
	var s settings
	flag.IntVar(&s.txns, "txns", 20000, "single-row write transactions per table, fsync off")
	flag.IntVar(&s.durableTxns, "durable-txns", 10000, "single-row write transactions per table, durable")
	flag.IntVar(&s.bulkRows, "bulk-rows", 10000, "rows in one bulk INSERT")
	flag.IntVar(&s.bulkRounds, "bulk-rounds", 21, "bulk INSERTs per table (the median is reported)")
	flag.IntVar(&s.communities, "communities", 50, "communities the writes spread over")
	flag.BoolVar(&s.strict, "strict", false, "exit 1 when a target is missed")
	only := flag.String("only", "", `run one configuration: "durable" or "fsync-off"`)
	flag.Parse()

	ctx := context.Background()
	var rows []row
	for _, cfg := range []config{{name: "durable", fsync: true}, {name: "fsync off", fsync: false}} {
		if *only != "" && *only != strings.ReplaceAll(cfg.name, " ", "-") {
			continue
		}
		got, err := measure(ctx, cfg, s)
		if err != nil {
			fmt.Fprintf(os.Stderr, "fence benchmark (%s): %v\n", cfg.name, err)
			os.Exit(1)
		}
		rows = append(rows, got...)
	}
	ok := report(os.Stdout, rows)
	if !ok && s.strict {
		os.Exit(1)
	}
}

func measure(ctx context.Context, cfg config, s settings) ([]row, error) {
	server, err := ephemeralpg.Start(ctx, ephemeralpg.Options{Fsync: cfg.fsync})
	if err != nil {
		return nil, fmt.Errorf("start server: %w", err)
	}
	defer server.Close(ctx)
	if server.Source() == ephemeralpg.SourceURL {
		fmt.Fprintf(os.Stderr, "note: TEST_DATABASE_URL is set, so %q runs with that server's durability settings\n", cfg.name)
	}
	url, drop, err := server.NewDatabase(ctx, fixture.Template{})
	if err != nil {
		return nil, fmt.Errorf("create database: %w", err)
	}
	defer drop(ctx)

	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	defer pool.Close()
	communities, err := setup(ctx, pool, s.communities)
	if err != nil {
		return nil, err
	}

	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("acquire: %w", err)
	}
	defer conn.Release()

	// The floor table carries an empty PL/pgSQL statement trigger with a
	// transition table: what any statement-level PL/pgSQL fence pays before
	// its first query.
	insertTables := []string{unfencedTable, fencedTable, floorTable}
	insert := func(table string) func(i int) error {
		sql := fmt.Sprintf("INSERT INTO %s (community_id, body) VALUES ($1, 'hello world')", table)
		return func(i int) error {
			_, err := conn.Exec(ctx, sql, communities[i%len(communities)])
			return err
		}
	}
	update := func(table string) func(i int) error {
		sql := fmt.Sprintf("UPDATE %s SET body = 'edited' WHERE id = $1", table)
		return func(i int) error {
			_, err := conn.Exec(ctx, sql, int64(i%1000+1))
			return err
		}
	}
	// Warm the tables and the plan caches.
	if _, err := compareThroughput(insert, insertTables, 1000); err != nil {
		return nil, fmt.Errorf("warm up: %w", err)
	}

	txns := s.txns
	if cfg.fsync {
		txns = s.durableTxns
	}
	insertRow, err := compareThroughput(insert, insertTables, txns)
	if err != nil {
		return nil, fmt.Errorf("single-row inserts: %w", err)
	}
	updateRow, err := compareThroughput(update, []string{unfencedTable, fencedTable}, txns)
	if err != nil {
		return nil, fmt.Errorf("single-row updates: %w", err)
	}
	bulk := func(table string) func() error {
		sql := fmt.Sprintf("INSERT INTO %s (community_id, body) SELECT $1, 'hello world' FROM generate_series(1, $2::int)", table)
		return func() error {
			_, err := conn.Exec(ctx, sql, communities[0], s.bulkRows)
			return err
		}
	}
	bulkRow, err := compareDuration(bulk, s)
	if err != nil {
		return nil, fmt.Errorf("bulk insert: %w", err)
	}

	insertTarget, bulkTarget := 0.95, 0.0
	if !cfg.fsync {
		insertTarget, bulkTarget = 0.75, 1.10
	}
	return []row{
		{config: cfg.name, workload: "single-row INSERT txns", unit: "txn/s", unfenced: insertRow[0], fenced: insertRow[1], higherIsBetter: true, target: insertTarget},
		{config: cfg.name, workload: "floor: an empty trigger", unit: "txn/s", unfenced: insertRow[0], fenced: insertRow[2], higherIsBetter: true},
		{config: cfg.name, workload: "single-row UPDATE txns", unit: "txn/s", unfenced: updateRow[0], fenced: updateRow[1], higherIsBetter: true},
		{config: cfg.name, workload: fmt.Sprintf("%d-row INSERT", s.bulkRows), unit: "ms", unfenced: bulkRow[0], fenced: bulkRow[1], target: bulkTarget},
	}, nil
}

// The benchmark's tables: identical tenant tables, one with the write fence
// attached and one with an empty statement trigger.
const (
	unfencedTable = "bench_unfenced"
	fencedTable   = "bench_fenced"
	floorTable    = "bench_floor"
)

// setup creates the communities and the three tables.
func setup(ctx context.Context, pool *pgxpool.Pool, n int) ([]uuid.UUID, error) {
	communities := make([]uuid.UUID, n)
	for i := range communities {
		communities[i] = uuid.New()
		if _, err := pool.Exec(ctx, "INSERT INTO communities (id, host) VALUES ($1, $2)",
			communities[i], fmt.Sprintf("bench-%d.example", i)); err != nil {
			return nil, fmt.Errorf("create community: %w", err)
		}
	}
	for _, table := range []string{unfencedTable, fencedTable, floorTable} {
		ddl := fmt.Sprintf(`CREATE TABLE %[1]s (
			id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
			community_id uuid NOT NULL REFERENCES communities (id),
			body text NOT NULL,
			created_at timestamptz NOT NULL DEFAULT now());
			CREATE INDEX %[1]s_community_idx ON %[1]s (community_id, id)`, table)
		if _, err := pool.Exec(ctx, ddl); err != nil {
			return nil, fmt.Errorf("create %s: %w", table, err)
		}
	}
	if _, err := pool.Exec(ctx, "SELECT attach_community_write_fence($1)", fencedTable); err != nil {
		return nil, fmt.Errorf("attach fence: %w", err)
	}
	floor := fmt.Sprintf(`CREATE FUNCTION bench_empty_trigger() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;
		CREATE TRIGGER bench_floor_insert AFTER INSERT ON %s REFERENCING NEW TABLE AS community_fence_new
		FOR EACH STATEMENT EXECUTE FUNCTION bench_empty_trigger()`, floorTable)
	if _, err := pool.Exec(ctx, floor); err != nil {
		return nil, fmt.Errorf("create the empty trigger: %w", err)
	}
	return communities, nil
}

// compareThroughput runs single-statement transactions against each table,
// interleaved one by one (the table that goes first rotates), so that all see
// the same server and disk conditions, and returns transactions per second
// for each table in order.
func compareThroughput(workload func(table string) func(i int) error, tables []string, txns int) ([]float64, error) {
	ops := make([]func(int) error, len(tables))
	for k, table := range tables {
		ops[k] = workload(table)
	}
	elapsed := make([]time.Duration, len(tables))
	for i := range txns {
		for k := range tables {
			idx := (k + i) % len(tables)
			start := time.Now()
			if err := ops[idx](i); err != nil {
				return nil, fmt.Errorf("%s: %w", tables[idx], err)
			}
			elapsed[idx] += time.Since(start)
		}
	}
	perSecond := make([]float64, len(tables))
	for k := range tables {
		perSecond[k] = float64(txns) / elapsed[k].Seconds()
	}
	return perSecond, nil
}

// compareDuration times one statement against both tables, alternating, and
// returns the median in milliseconds for [unfenced, fenced].
func compareDuration(workload func(table string) func() error, s settings) ([2]float64, error) {
	tables := [2]string{unfencedTable, fencedTable}
	var samples [2][]float64
	for round := range s.bulkRounds {
		for k := range 2 {
			idx := (k + round) % 2
			start := time.Now()
			if err := workload(tables[idx])(); err != nil {
				return [2]float64{}, fmt.Errorf("%s: %w", tables[idx], err)
			}
			samples[idx] = append(samples[idx], float64(time.Since(start).Microseconds())/1000)
		}
	}
	return [2]float64{median(samples[0]), median(samples[1])}, nil
}

func median(v []float64) float64 {
	slices.Sort(v)
	return v[len(v)/2]
}

func report(w io.Writer, rows []row) bool {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "config\tworkload\tunit\tunfenced\tfenced\tfence adds\tfenced/unfenced\ttarget\tresult\t")
	all := true
	for _, r := range rows {
		target, result := "-", "info"
		if r.target != 0 {
			op := ">="
			if !r.higherIsBetter {
				op = "<="
			}
			target = fmt.Sprintf("%s %.2f", op, r.target)
			result = "ok"
			if !r.meets() {
				result, all = "MISSED", false
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.1f\t%.1f\t%s\t%.3f\t%s\t%s\t\n",
			r.config, r.workload, r.unit, r.unfenced, r.fenced, r.added(), r.ratio(), target, result)
	}
	tw.Flush()
	return all
}
