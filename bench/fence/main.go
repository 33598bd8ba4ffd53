// Command fence measures what the community write fence costs. It runs one
// workload against a fenced table and an identical unfenced table in the same
// run, on two throwaway PostgreSQL servers: one with production durability
// (fsync and synchronous_commit on) and one with fsync off, which strips the
// disk cost away and exposes the trigger's own cost. Single-row transactions
// alternate between the two tables one by one, so both see the same server
// and disk conditions. A third table with an empty PL/pgSQL statement
// trigger gives the floor any statement-level PL/pgSQL fence pays. It prints
// one table, the unfenced baseline beside the fenced figure and what the
// fence adds per unit of work, and checks these targets:
//
//   - durable, single-row INSERT, UPDATE and DELETE transactions: fenced keeps >= 92% of unfenced throughput
//   - fsync off, single-row INSERT transactions: fenced keeps >= 85%
//   - fsync off, single-row UPDATE and DELETE transactions: fenced keeps >= 88%
//   - fsync off, one 10,000-row INSERT: fenced costs <= 1.05x unfenced
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
	defer func() { _ = drop(ctx) }()

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
	// Each DELETE removes one row the INSERTs wrote (there are warm-up plus
	// txns of them), so every statement finds its row.
	deleteRow := func(table string) func(i int) error {
		sql := fmt.Sprintf("DELETE FROM %s WHERE id = $1", table)
		return func(i int) error {
			tag, err := conn.Exec(ctx, sql, int64(i+1))
			if err == nil && tag.RowsAffected() != 1 {
				err = fmt.Errorf("deleted %d rows, not one", tag.RowsAffected())
			}
			return err
		}
	}
	// Warm the tables and the plan caches.
	if _, err := compareThroughput(insert, insertTables, warmUp); err != nil {
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
	writeTables := []string{unfencedTable, fencedTable}
	updateRow, err := compareThroughput(update, writeTables, txns)
	if err != nil {
		return nil, fmt.Errorf("single-row updates: %w", err)
	}
	deleteRows, err := compareThroughput(deleteRow, writeTables, txns)
	if err != nil {
		return nil, fmt.Errorf("single-row deletes: %w", err)
	}
	bulk := func(table string) func() error {
		sql := fmt.Sprintf("INSERT INTO %s (community_id, body) SELECT $1, 'hello world' FROM generate_series(1, $2::int)", table)
		return func() error {
			_, err := conn.Exec(ctx, sql, communities[0], s.bulkRows)
			return err
		}
	}
	bulkRow, err := compareDuration(bulk, insertTables, s)
	if err != nil {
		return nil, fmt.Errorf("bulk insert: %w", err)
	}

	t := targetsFsyncOff
	if cfg.fsync {
		t = targetsDurable
	}
	bulkName := fmt.Sprintf("%d-row INSERT", s.bulkRows)
	return []row{
		{config: cfg.name, workload: "single-row INSERT txns", unit: "txn/s", unfenced: insertRow[0], fenced: insertRow[1], higherIsBetter: true, target: t.insert},
		{config: cfg.name, workload: "floor: an empty trigger", unit: "txn/s", unfenced: insertRow[0], fenced: insertRow[2], higherIsBetter: true},
		{config: cfg.name, workload: "single-row UPDATE txns", unit: "txn/s", unfenced: updateRow[0], fenced: updateRow[1], higherIsBetter: true, target: t.update},
		{config: cfg.name, workload: "single-row DELETE txns", unit: "txn/s", unfenced: deleteRows[0], fenced: deleteRows[1], higherIsBetter: true, target: t.update},
		{config: cfg.name, workload: bulkName, unit: "ms", unfenced: bulkRow[0], fenced: bulkRow[1], target: t.bulk},
		{config: cfg.name, workload: "floor: " + bulkName + ", empty trigger", unit: "ms", unfenced: bulkRow[0], fenced: bulkRow[2]},
	}, nil
}

// warmUp is the single-row INSERTs per table that warm the tables and the
// plan caches before anything is timed.
const warmUp = 1000

// targets bound fenced/unfenced per workload in one configuration; 0 makes
// a row informational.
type targets struct{ insert, update, bulk float64 }

// The targets of issues 8 and 11: the fence's admitted path keeps durable
// single-row writes at >= 0.92 of unfenced; with fsync off (the trigger's
// own cost) INSERT at >= 0.85, UPDATE and DELETE at >= 0.88, and a
// 10,000-row INSERT at <= 1.05.
var (
	targetsDurable  = targets{insert: 0.92, update: 0.92}
	targetsFsyncOff = targets{insert: 0.85, update: 0.88, bulk: 1.05}
)

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
		if _, err := pool.Exec(ctx, "INSERT INTO community_deletion.communities (id, host) VALUES ($1, $2)",
			communities[i], fmt.Sprintf("bench-%d.example", i)); err != nil {
			return nil, fmt.Errorf("create community: %w", err)
		}
	}
	for _, table := range []string{unfencedTable, fencedTable, floorTable} {
		ddl := fmt.Sprintf(`CREATE TABLE %[1]s (
			id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
			community_id uuid NOT NULL REFERENCES community_deletion.communities (id),
			body text NOT NULL,
			created_at timestamptz NOT NULL DEFAULT now());
			CREATE INDEX %[1]s_community_idx ON %[1]s (community_id, id)`, table)
		if _, err := pool.Exec(ctx, ddl); err != nil {
			return nil, fmt.Errorf("create %s: %w", table, err)
		}
	}
	if _, err := pool.Exec(ctx, "SELECT community_deletion.attach_community_write_fence($1)", fencedTable); err != nil {
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
// for each table in order. The transactions run in blocks and each table's
// figure is its median over the blocks: a burst of noise from a neighbour
// on a shared machine, which slows the server's share of the work (the
// fence's) more than the client's, then spoils one block, not the figure.
func compareThroughput(workload func(table string) func(i int) error, tables []string, txns int) ([]float64, error) {
	ops := make([]func(int) error, len(tables))
	for k, table := range tables {
		ops[k] = workload(table)
	}
	blocks := min(throughputBlocks, txns)
	samples := make([][]float64, len(tables))
	for b := range blocks {
		from, to := b*txns/blocks, (b+1)*txns/blocks
		elapsed := make([]time.Duration, len(tables))
		for i := from; i < to; i++ {
			for k := range tables {
				idx := (k + i) % len(tables)
				start := time.Now()
				if err := ops[idx](i); err != nil {
					return nil, fmt.Errorf("%s: %w", tables[idx], err)
				}
				elapsed[idx] += time.Since(start)
			}
		}
		for k := range tables {
			samples[k] = append(samples[k], float64(to-from)/elapsed[k].Seconds())
		}
	}
	perSecond := make([]float64, len(tables))
	for k := range tables {
		perSecond[k] = median(samples[k])
	}
	return perSecond, nil
}

// throughputBlocks is the blocks a throughput comparison is cut into.
const throughputBlocks = 9

// compareDuration times one statement against each table, rotating which
// goes first, and returns the median in milliseconds per table in order.
func compareDuration(workload func(table string) func() error, tables []string, s settings) ([]float64, error) {
	samples := make([][]float64, len(tables))
	for round := range s.bulkRounds {
		for k := range tables {
			idx := (k + round) % len(tables)
			start := time.Now()
			if err := workload(tables[idx])(); err != nil {
				return nil, fmt.Errorf("%s: %w", tables[idx], err)
			}
			samples[idx] = append(samples[idx], float64(time.Since(start).Microseconds())/1000)
		}
	}
	medians := make([]float64, len(tables))
	for k := range tables {
		medians[k] = median(samples[k])
	}
	return medians, nil
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
