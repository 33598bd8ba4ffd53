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
	var rows []row
	for _, k := range kinds {
		got, err := measureKind(ctx, server, cfg, s, k)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k.name, err)
		}
		rows = append(rows, got...)
	}
	return rows, nil
}

// kind is one shape of fenced table, measured in a database of its own
// (a deployment has one tenant key kind): its tables' key column and how
// they are made.
type kind struct {
	name string
	// column is the key the workloads write: the tenant key, or the
	// parent's id for a table fenced through its parent.
	column string
	setup  func(ctx context.Context, pool *pgxpool.Pool, n int) ([]any, error)
}

// kinds are the shapes the report covers: the uuid community_id table the
// benchmark has always measured, a table keyed by a bigint tenant key, and
// a table without a tenant column fenced through its parent (a foreign key
// to a bigint-keyed table).
var kinds = []kind{
	{name: "uuid community_id", column: "community_id", setup: setupUUID},
	{name: "bigint account_id", column: "account_id", setup: setupBigint},
	{name: "child via parent", column: "parent_id", setup: setupChild},
}

func measureKind(ctx context.Context, server *ephemeralpg.Server, cfg config, s settings, k kind) ([]row, error) {
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
	keys, err := k.setup(ctx, pool, s.communities)
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
		sql := fmt.Sprintf("INSERT INTO %s (%s, body) VALUES ($1, 'hello world')", table, k.column)
		return func(i int) error {
			_, err := conn.Exec(ctx, sql, keys[i%len(keys)])
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
		sql := fmt.Sprintf("INSERT INTO %s (%s, body) SELECT $1, 'hello world' FROM generate_series(1, $2::int)", table, k.column)
		return func() error {
			_, err := conn.Exec(ctx, sql, keys[0], s.bulkRows)
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
	c := cfg.name + ", " + k.name
	return []row{
		{config: c, workload: "single-row INSERT txns", unit: "txn/s", unfenced: insertRow[0], fenced: insertRow[1], higherIsBetter: true, target: t.insert},
		{config: c, workload: "floor: an empty trigger", unit: "txn/s", unfenced: insertRow[0], fenced: insertRow[2], higherIsBetter: true},
		{config: c, workload: "single-row UPDATE txns", unit: "txn/s", unfenced: updateRow[0], fenced: updateRow[1], higherIsBetter: true, target: t.update},
		{config: c, workload: "single-row DELETE txns", unit: "txn/s", unfenced: deleteRows[0], fenced: deleteRows[1], higherIsBetter: true, target: t.update},
		{config: c, workload: bulkName, unit: "ms", unfenced: bulkRow[0], fenced: bulkRow[1], target: t.bulk},
		{config: c, workload: "floor: " + bulkName + ", empty trigger", unit: "ms", unfenced: bulkRow[0], fenced: bulkRow[2]},
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
// 10,000-row INSERT at <= 1.05. Issue 22 holds every key kind to them.
var (
	targetsDurable  = targets{insert: 0.92, update: 0.92}
	targetsFsyncOff = targets{insert: 0.85, update: 0.88, bulk: 1.05}
)

// The benchmark's tables, per kind: identical tenant tables, one with the
// write fence attached and one with an empty statement trigger.
const (
	unfencedTable = "bench_unfenced"
	fencedTable   = "bench_fenced"
	floorTable    = "bench_floor"
)

// createTables creates the three tables with key (a column definition) and
// an index leading with its column.
func createTables(ctx context.Context, pool *pgxpool.Pool, column, key string) error {
	for _, table := range []string{unfencedTable, fencedTable, floorTable} {
		ddl := fmt.Sprintf(`CREATE TABLE %[1]s (
			id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
			%[2]s %[3]s,
			body text NOT NULL,
			created_at timestamptz NOT NULL DEFAULT now());
			CREATE INDEX %[1]s_key_idx ON %[1]s (%[2]s, id)`, table, column, key)
		if _, err := pool.Exec(ctx, ddl); err != nil {
			return fmt.Errorf("create %s: %w", table, err)
		}
	}
	floor := fmt.Sprintf(`CREATE FUNCTION bench_empty_trigger() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;
		CREATE TRIGGER bench_floor_insert AFTER INSERT ON %s REFERENCING NEW TABLE AS community_fence_new
		FOR EACH STATEMENT EXECUTE FUNCTION bench_empty_trigger()`, floorTable)
	if _, err := pool.Exec(ctx, floor); err != nil {
		return fmt.Errorf("create the empty trigger: %w", err)
	}
	return nil
}

// setupUUID creates n communities (written directly, as a deployment
// without a declared tenant table does) and community_id tables.
func setupUUID(ctx context.Context, pool *pgxpool.Pool, n int) ([]any, error) {
	keys := make([]any, n)
	for i := range keys {
		id := uuid.New()
		keys[i] = id
		if _, err := pool.Exec(ctx, "INSERT INTO community_deletion.communities (id, host) VALUES ($1, $2)",
			id, fmt.Sprintf("bench-%d.example", i)); err != nil {
			return nil, fmt.Errorf("create community: %w", err)
		}
	}
	if err := createTables(ctx, pool, "community_id", "uuid NOT NULL REFERENCES community_deletion.communities (id)"); err != nil {
		return nil, err
	}
	if _, err := pool.Exec(ctx, "SELECT community_deletion.attach_community_write_fence($1)", fencedTable); err != nil {
		return nil, fmt.Errorf("attach fence: %w", err)
	}
	return keys, nil
}

// bigintTenants declares a tenant table keyed by bigint with n tenants.
func bigintTenants(ctx context.Context, pool *pgxpool.Pool, n int) ([]any, error) {
	if _, err := pool.Exec(ctx, fmt.Sprintf(`CREATE TABLE bench_accounts (id bigint PRIMARY KEY, name text NOT NULL);
		INSERT INTO bench_accounts SELECT i, 'account ' || i FROM generate_series(1, %d) i;
		SELECT community_deletion.declare_tenant_table('bench_accounts')`, n)); err != nil {
		return nil, fmt.Errorf("declare the tenant table: %w", err)
	}
	keys := make([]any, n)
	for i := range keys {
		keys[i] = int64(i + 1)
	}
	return keys, nil
}

// setupBigint creates tables keyed by a bigint account_id under a bigint
// tenant table.
func setupBigint(ctx context.Context, pool *pgxpool.Pool, n int) ([]any, error) {
	keys, err := bigintTenants(ctx, pool, n)
	if err != nil {
		return nil, err
	}
	if err := createTables(ctx, pool, "account_id", "bigint NOT NULL"); err != nil {
		return nil, err
	}
	if _, err := pool.Exec(ctx, "SELECT community_deletion.attach_community_write_fence($1, 'delete', 'account_id')", fencedTable); err != nil {
		return nil, fmt.Errorf("attach fence: %w", err)
	}
	return keys, nil
}

// setupChild creates tables without a tenant column, each row referencing
// a parent (bench_projects, keyed by a bigint account_id) by a foreign key;
// the fenced one is attached through it. The keys written are parents' ids,
// one per tenant.
func setupChild(ctx context.Context, pool *pgxpool.Pool, n int) ([]any, error) {
	if _, err := bigintTenants(ctx, pool, n); err != nil {
		return nil, err
	}
	if _, err := pool.Exec(ctx, fmt.Sprintf(`CREATE TABLE bench_projects (id bigint PRIMARY KEY, account_id bigint NOT NULL);
		CREATE INDEX ON bench_projects (account_id, id);
		INSERT INTO bench_projects SELECT i, i FROM generate_series(1, %d) i;
		SELECT community_deletion.attach_community_write_fence('bench_projects', 'delete', 'account_id')`, n)); err != nil {
		return nil, fmt.Errorf("create the parent table: %w", err)
	}
	if err := createTables(ctx, pool, "parent_id", "bigint NOT NULL REFERENCES bench_projects (id)"); err != nil {
		return nil, err
	}
	if _, err := pool.Exec(ctx, "SELECT community_deletion.attach_child_table($1)", fencedTable); err != nil {
		return nil, fmt.Errorf("attach fence: %w", err)
	}
	keys := make([]any, n)
	for i := range keys {
		keys[i] = int64(i + 1)
	}
	return keys, nil
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
