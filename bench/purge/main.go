// Command purge measures the bounded PostgreSQL purge of a whole community
// against the naive purge it replaces. On a throwaway PostgreSQL server it
// builds one database holding a community of -rows rows spread over the
// fixture tables and a two-level chain of tables attached through their
// parents (generated with INSERT ... SELECT generate_series, every trigger
// and foreign key in force) beside another community's rows, with the
// deletion request already at bindings_removed; the server clones it with
// CREATE DATABASE ... TEMPLATE so every run starts from identical data.
// Then, on separate clones:
//
//   - single transaction: one DELETE per table, child before parent, and the
//     'nullify' UPDATE, in one transaction as the authorized executor;
//   - batched: lifecycle.Engine.EnterPostgresPurged, bounded transactions,
//     once per PurgeOptions.NiceRatio of -nice (default 0, 0.5, 1 and 2, and
//     the ratio recommended for the host: the curve of total time against
//     the bystander's latency), and once per further mechanic of -methods
//     at the first ratio.
//
// During each purge another tenant's traffic runs beside it, in a process of
// its own (single-row INSERTs into a fenced table and primary-key reads,
// four workers), and the same traffic runs alone on the clone first; the
// idle windows of a run are pooled into the idle latency every phase is
// compared with. Each purge is followed by a VACUUM of the purged tables,
// timed apart. The executor's heap in use is sampled during the batched
// purge. -autovacuum=false turns autovacuum off on the server, to measure
// its share; -shared-buffers sets the server's shared_buffers (PostgreSQL's
// default, 128MB, is too small for the indexes a 10,000,000-row tenant
// leaves behind); -set name=value sets any other setting of the server;
// -idle-window sets how long the bystander runs alone; -top N prints each
// purge's costliest statements, nested ones included (pg_stat_statements).
//
// It prints the runs side by side and checks these targets:
//
//   - total time of the batched purge at nice 0 <= 1.2x the single
//     transaction
//   - longest batched purge transaction < 250 ms, at every ratio
//   - the bystander's p99 write and read latency during the batched purge
//     at the ratio docs/executor.md recommends for the host
//     (recommendedNiceFor) <= 1.5x its idle p99
//   - the executor's peak heap in use does not grow with the rows purged
//     (each quarter of the purge peaks within 2x of the first quarter)
//
// Run it with: go run ./bench/purge (1,000,000 rows), or -rows 10000000.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tombstoneworks/communitydeletion/internal/ephemeralpg"
	"github.com/tombstoneworks/communitydeletion/internal/fixture"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// The targets.
const (
	maxTotalRatio     = 1.2
	maxLongestTx      = 250 * time.Millisecond
	maxBystanderRatio = 1.5
	maxHeapGrowth     = 2.0
	defaultIdleWindow = 3 * time.Second
)

// Fixed identities, so every clone names the same community and request.
var (
	target    = uuid.MustParse("0b5e55ed-0000-4000-8000-000000000001")
	bystander = uuid.MustParse("0b5e55ed-0000-4000-8000-000000000002")
)

const executor = "bench-purge-executor"

// share is one table's part of a community's rows, in millionths.
type share struct {
	table string
	parts int
	// of selects the rows of the community whose key is the placeholder
	// %[1]s: by the table's community_id, or for a table attached through
	// its parent, through the parent's rows.
	of string
}

// byCommunity selects a table's rows by its community_id.
const byCommunity = "community_id = %[1]s"

// shares spread a community's rows over the tables: the fixture's and a
// two-level chain of tables attached through their parents (a message's
// revisions and a revision's notes, neither with a community_id). The
// parents are few, and every referencing column is indexed, so a parent
// row deleted costs an index probe of each table that references it, in
// both purges alike.
var shares = []share{
	{"fixture_members", 1000, byCommunity},
	{"fixture_channels", 100, byCommunity},
	{"fixture_messages", 200000, byCommunity},
	{"fixture_reactions", 400000, byCommunity},
	{"fixture_attachments", 2000, byCommunity},
	{"bench_message_revisions", 40000, "message_id IN (SELECT id FROM fixture_messages WHERE community_id = %[1]s)"},
	{"bench_revision_notes", 40000, "revision_id IN (SELECT r.id FROM bench_message_revisions r JOIN fixture_messages m " +
		"ON m.id = r.message_id WHERE m.community_id = %[1]s)"},
	{"fixture_activity", 306900, byCommunity},
	{"fixture_audit_events", 10000, byCommunity},
}

// deleteOrder is the single transaction's order, child before parent, and
// nullifyTables its 'nullify' tables, cleared last.
var (
	deleteOrder = []string{"fixture_reactions", "fixture_attachments", "bench_revision_notes", "bench_message_revisions",
		"fixture_messages", "fixture_channels", "fixture_activity", "fixture_members"}
	nullifyTables = fixture.NullifyTables
)

// chainSQL adds the two-level chain to the fixture: revisions of a message
// and notes of a revision, attached through their foreign keys
// (attach_child_table), with the referencing columns indexed.
const chainSQL = `
CREATE TABLE bench_message_revisions (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    message_id bigint NOT NULL REFERENCES fixture_messages (id),
    body text NOT NULL
);
CREATE INDEX bench_message_revisions_message_idx ON bench_message_revisions (message_id);
CREATE TABLE bench_revision_notes (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    revision_id bigint NOT NULL REFERENCES bench_message_revisions (id),
    note text NOT NULL
);
CREATE INDEX bench_revision_notes_revision_idx ON bench_revision_notes (revision_id);
SELECT community_deletion.attach_child_table('bench_message_revisions');
SELECT community_deletion.attach_child_table('bench_revision_notes');
`

// shareOf returns the share of table.
func shareOf(table string) share {
	for _, s := range shares {
		if s.table == table {
			return s
		}
	}
	panic("no share of " + table)
}

// dataset is a Migrator: the fixture schema plus the generated rows and the
// deletion request, built once per server as a template database.
type dataset struct {
	rows, otherRows int
	rounds          int
	// load runs the bystander's traffic beside each purge (not part of the
	// data: it does not change the hash).
	load bool
}

func (d dataset) counts(total int) map[string]int {
	counts := map[string]int{}
	for _, s := range shares {
		counts[s.table] = max(total*s.parts/1000000, 1)
	}
	return counts
}

// Hash identifies the dataset: the fixture schema and the generation.
func (d dataset) Hash() (string, error) {
	base, err := fixture.Template{WithFixture: true}.Hash()
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(fmt.Appendf(nil, "%s\x00purge-bench-v2\x00%d\x00%d\x00%d\x00%v\x00%s", base, d.rows, d.otherRows, d.rounds, shares, chainSQL))
	return hex.EncodeToString(sum[:]), nil
}

// Migrate builds the dataset into the database at connString.
func (d dataset) Migrate(ctx context.Context, connString string) error {
	if err := (fixture.Template{WithFixture: true}).Migrate(ctx, connString); err != nil {
		return err
	}
	conn, err := pgx.Connect(ctx, connString)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	exec := func(sql string, args ...any) error {
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			return fmt.Errorf("%s: %w", strings.Join(strings.Fields(sql), " "), err)
		}
		return nil
	}
	if err := exec(chainSQL); err != nil {
		return err
	}
	for i, c := range []uuid.UUID{target, bystander} {
		if err := exec("INSERT INTO community_deletion.communities (id, host, signing_key, icon) VALUES ($1, $2, 'key', 'icon.png')",
			c, fmt.Sprintf("bench-%d.example", i)); err != nil {
			return err
		}
	}
	// Interleave the two communities in rounds, as tenants share pages.
	for round := range d.rounds {
		for _, c := range []struct {
			id    uuid.UUID
			total int
		}{{target, d.rows}, {bystander, d.otherRows}} {
			if err := populate(exec, c.id, d.counts(c.total), round, d.rounds); err != nil {
				return err
			}
		}
	}
	for _, c := range []uuid.UUID{target, bystander} {
		// Members were invited by the member before them; every 97th by a
		// newer one (an import), which the purge must cope with too.
		if err := exec(`UPDATE fixture_members m SET invited_by = CASE WHEN m.id % 97 = 0 THEN p.next ELSE p.prev END
			FROM (SELECT id, lag(id) OVER (ORDER BY id) AS prev, lead(id) OVER (ORDER BY id) AS next
			      FROM fixture_members WHERE community_id = $1) p
			WHERE m.id = p.id`, c); err != nil {
			return err
		}
	}
	if err := ready(ctx, conn); err != nil {
		return err
	}
	return exec("VACUUM ANALYZE")
}

// populate writes round (of rounds) of the rows of community: its share of
// each table, and all the members and channels in the first round, so
// later rows can refer to them.
func populate(exec func(string, ...any) error, community uuid.UUID, counts map[string]int, round, rounds int) error {
	statements := []struct {
		table, sql string
	}{
		{"fixture_members", `INSERT INTO fixture_members (community_id, handle) SELECT $1, 'member-' || g FROM generate_series(1, $2::int) g`},
		{"fixture_channels", `INSERT INTO fixture_channels (community_id, name, created_by)
			SELECT $1, 'channel-' || g, mb[1 + g % cardinality(mb)] FROM generate_series(1, $2::int) g,
			(SELECT array_agg(id) AS mb FROM fixture_members WHERE community_id = $1) m`},
		{"fixture_messages", `INSERT INTO fixture_messages (community_id, channel_id, author_id, body)
			SELECT $1, ch[1 + g % cardinality(ch)], mb[1 + g % cardinality(mb)], 'a message of some length, number ' || g
			FROM generate_series(1, $2::int) g,
			(SELECT array_agg(id) AS ch FROM fixture_channels WHERE community_id = $1) c,
			(SELECT array_agg(id) AS mb FROM fixture_members WHERE community_id = $1) m`},
		{"fixture_reactions", `INSERT INTO fixture_reactions (community_id, message_id, member_id, emoji)
			SELECT $1, ms[1 + g % cardinality(ms)], mb[1 + g % cardinality(mb)], 'emoji-' || (g % 5)
			FROM generate_series(1, $2::int) g,
			(SELECT array_agg(id) AS ms FROM fixture_messages WHERE community_id = $1) s,
			(SELECT array_agg(id) AS mb FROM fixture_members WHERE community_id = $1) m`},
		{"fixture_attachments", `INSERT INTO fixture_attachments (community_id, message_id, storage_key)
			SELECT $1, ms[1 + g % cardinality(ms)], 'objects/' || g FROM generate_series(1, $2::int) g,
			(SELECT array_agg(id) AS ms FROM fixture_messages WHERE community_id = $1) s`},
		{"bench_message_revisions", `INSERT INTO bench_message_revisions (message_id, body)
			SELECT ms[1 + g % cardinality(ms)], 'revision ' || g FROM generate_series(1, $2::int) g,
			(SELECT array_agg(id) AS ms FROM fixture_messages WHERE community_id = $1) s`},
		{"bench_revision_notes", `INSERT INTO bench_revision_notes (revision_id, note)
			SELECT rv[1 + g % cardinality(rv)], 'note ' || g FROM generate_series(1, $2::int) g,
			(SELECT array_agg(r.id) AS rv FROM bench_message_revisions r JOIN fixture_messages m ON m.id = r.message_id
			 WHERE m.community_id = $1) r`},
		{"fixture_activity", `INSERT INTO fixture_activity (community_id, kind) SELECT $1, 'kind-' || (g % 7) FROM generate_series(1, $2::int) g`},
		{"fixture_audit_events", `INSERT INTO fixture_audit_events (community_id, action) SELECT $1, 'action-' || g FROM generate_series(1, $2::int) g`},
	}
	for _, s := range statements {
		n := counts[s.table] / rounds
		if round == rounds-1 {
			n = counts[s.table] - n*(rounds-1)
		}
		if s.table == "fixture_members" || s.table == "fixture_channels" {
			if n = 0; round == 0 {
				n = counts[s.table]
			}
		}
		if n == 0 {
			continue
		}
		if err := exec(s.sql, community, n); err != nil {
			return err
		}
	}
	return nil
}

// ready walks a deletion request of the target to bindings_removed, the way
// the guards want it, claimed by executor for an hour.
func ready(ctx context.Context, conn *pgx.Conn) error {
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		asExecutor := func(generation int64) error {
			_, err := tx.Exec(ctx, `SELECT set_config('community_deletion.executor_community', $1, true),
				set_config('community_deletion.fence_generation', $2, true)`, target.String(), strconv.FormatInt(generation, 10))
			return err
		}
		var request uuid.UUID
		if err := tx.QueryRow(ctx, `INSERT INTO community_deletion.community_deletion_requests (community_id, community_host, requested_by)
			SELECT id, host, 'bench-requester' FROM community_deletion.communities WHERE id = $1 RETURNING id`, target).Scan(&request); err != nil {
			return err
		}
		digest := sha256.Sum256(request[:])
		steps := []func() error{
			func() error {
				// One superuser plays every role here: declare it, as a
				// deployment whose operators share one login would.
				_, err := tx.Exec(ctx, `INSERT INTO community_deletion.community_deletion_settings (operators_share_role, reason)
					VALUES (true, 'bench: one superuser submits and approves')`)
				return err
			},
			func() error {
				_, err := tx.Exec(ctx, `UPDATE community_deletion.community_deletion_requests
					SET stage = 'inventoried', schema_manifest = '{}', storage_manifest = '{}', inventory_manifest = '{}',
					    inventory_digest = $2, inventory_frozen_at = now() WHERE id = $1`, request, digest[:])
				return err
			},
			func() error {
				_, err := tx.Exec(ctx, `INSERT INTO community_deletion.community_deletion_approvals (request_id, community_id, inventory_digest, approved_by)
					SELECT id, community_id, inventory_digest, 'bench-approver' FROM community_deletion.community_deletion_requests WHERE id = $1`, request)
				return err
			},
			func() error {
				_, err := tx.Exec(ctx, "UPDATE community_deletion.community_deletion_requests SET stage = 'approved' WHERE id = $1", request)
				return err
			},
			func() error {
				_, err := tx.Exec(ctx, `UPDATE community_deletion.community_deletion_requests SET lease_owner = $2,
					lease_generation = 1, lease_until = now() + interval '1 hour', attempts = 1 WHERE id = $1`, request, executor)
				return err
			},
			func() error { return asExecutor(0) },
			// As BeginQuiescing: the fence marker's lock, then the dormant
			// fence's drain, which its arming requires.
			func() error {
				_, err := tx.Exec(ctx, "SELECT community_deletion.community_deletion_fence_marker_lock()")
				return err
			},
			func() error {
				_, err := tx.Exec(ctx, "SELECT community_deletion.community_deletion_fence_drain()")
				return err
			},
			func() error {
				_, err := tx.Exec(ctx, "UPDATE community_deletion.communities SET deletion_state = 'quiescing', archived_at = now() WHERE id = $1", target)
				return err
			},
			func() error { return asExecutor(1) },
			func() error {
				_, err := tx.Exec(ctx, "UPDATE community_deletion.communities SET deletion_state = 'fenced', deletion_fence_generation = 1 WHERE id = $1", target)
				return err
			},
			func() error {
				_, err := tx.Exec(ctx, "UPDATE community_deletion.community_deletion_requests SET stage = 'fenced', fence_generation = 1 WHERE id = $1", request)
				return err
			},
			func() error {
				_, err := tx.Exec(ctx, `UPDATE community_deletion.community_deletion_requests
					SET destructive_storage_manifest = '{"version": 1}', destructive_storage_frozen_at = now() WHERE id = $1`, request)
				return err
			},
			func() error {
				_, err := tx.Exec(ctx, "UPDATE community_deletion.community_deletion_requests SET stage = 'drained' WHERE id = $1", request)
				return err
			},
			func() error {
				_, err := tx.Exec(ctx, "UPDATE community_deletion.community_deletion_requests SET stage = 'bindings_removed' WHERE id = $1", request)
				return err
			},
		}
		for i, step := range steps {
			if err := step(); err != nil {
				return fmt.Errorf("deletion request step %d: %w", i+1, err)
			}
		}
		return nil
	})
}

// run is one measured purge.
type run struct {
	name          string
	total         time.Duration
	batches       int
	longestTx     time.Duration
	longestTxWork string
	// finalTx is the batched purge's final transaction
	// (PurgeResult.FinalTx).
	finalTx  time.Duration
	rows     int64
	perTable map[string]tableRun
	digest   string
	// vacuum is the VACUUM of the purged tables that follows the purge:
	// the cleanup the single transaction leaves entirely to after its
	// commit, and the batched purge partly to autovacuum while it runs.
	vacuum time.Duration
	// idle and busy are the bystander's latencies alone and beside the
	// purge.
	idle, busy latencies
	// heapPeak is the executor's peak heap in use during a batched purge,
	// and heapByQuarter its peak in each quarter of the rows purged.
	heapPeak      uint64
	heapByQuarter [4]uint64
	// niced is how long a batched purge slept for its nice ratio.
	niced time.Duration
	// overCap is the batches a batched purge rolled back at their
	// statement cap and tried again smaller (PurgeResult.OverCapBatches).
	overCap int
	// heapWalks are the child tables a batched purge turned to walking by
	// their heap (PurgeResult.HeapWalks).
	heapWalks []string
	// statements are the purge's costliest statements, with -top.
	statements []statementStat
	// checkpoints are the checkpoints the server began while the purge ran
	// (pg_stat_bgwriter, the whole server's).
	checkpoints int64
}

// tableRun is one table's part of a run.
type tableRun struct {
	rows    int64
	batches int
	elapsed time.Duration
}

func main() {
	runIfBystander()
	var d dataset
	flag.IntVar(&d.rows, "rows", 1000000, "rows of the purged community, spread over the fixture tables")
	flag.IntVar(&d.otherRows, "other-rows", 200000, "rows of the other community, which must survive")
	flag.IntVar(&d.rounds, "rounds", 10, "insert rounds interleaving the two communities")
	flag.BoolVar(&d.load, "load", true, "run another tenant's traffic beside each purge and report its latency")
	var o benchOptions
	flag.IntVar(&o.repeat, "repeat", 1, "runs of each purge on fresh clones (the median is reported)")
	methods := flag.String("methods", "auto", `batched mechanics to run, comma-separated: auto, keyset, keyset-ctid, keyset-array, community-ctid, tid-range, or "all"`)
	nices := flag.String("nice", defaultNices, "PurgeOptions.NiceRatio values of the curve, comma-separated (the first method runs at each, the others at the first); by default the recommended ratio for the host is added when missing")
	budget := flag.Duration("tx-budget", lifecycle.DefaultPurgeTxBudget, "PurgeOptions.TxBudget")
	maxRows := flag.Int("max-rows", lifecycle.DefaultPurgeMaxRowsPerTx, "PurgeOptions.MaxRowsPerTx")
	flag.BoolVar(&o.autovacuum, "autovacuum", true, "leave autovacuum on (false: off on the throwaway server, to measure its share)")
	flag.StringVar(&o.sharedBuffers, "shared-buffers", "", "shared_buffers of the throwaway server (default: PostgreSQL's own, 128MB; a host sized for its data sets about a quarter of its memory)")
	flag.DurationVar(&o.idleWindow, "idle-window", defaultIdleWindow, "how long the bystander's traffic runs alone on each clone before its purge")
	o.set = serverSettings{}
	flag.Var(o.set, "set", "a setting of the throwaway server, name=value (repeat the flag for more), such as max_wal_size=16GB")
	flag.IntVar(&o.top, "top", 0, "print each purge's N costliest statements, nested ones included (pg_stat_statements)")
	flag.Float64Var(&o.recommended, "recommended-nice", 0, "the nice ratio the bystander's p99 target is checked at (default: the one docs/executor.md recommends for the host: 8 on 2 cores or fewer, else 1)")
	strict := flag.Bool("strict", false, "exit 1 when a target is missed")
	flag.Parse()

	all := allMethods
	for m := range strings.SplitSeq(*methods, ",") {
		switch m = strings.TrimSpace(m); m {
		case "all":
			o.methods = all
		case "auto":
			o.methods = append(o.methods, lifecycle.PurgeMethodAuto)
		default:
			if !slices.Contains(all, lifecycle.PurgeMethod(m)) {
				fmt.Fprintf(os.Stderr, "unknown method %q\n", m)
				os.Exit(2)
			}
			o.methods = append(o.methods, lifecycle.PurgeMethod(m))
		}
	}
	for n := range strings.SplitSeq(*nices, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(n), 64)
		if err == nil {
			err = lifecycle.CheckNiceRatio(v)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "-nice: %q is not a nice ratio (a finite number, 0 or more)\n", n)
			os.Exit(2)
		}
		o.nices = append(o.nices, v)
	}
	if o.idleWindow <= 0 {
		fmt.Fprintf(os.Stderr, "-idle-window: %s is not a duration above 0\n", o.idleWindow)
		os.Exit(2)
	}
	o.purge = lifecycle.PurgeOptions{TxBudget: *budget, MaxRowsPerTx: *maxRows}
	o.addRecommended = true
	flag.Visit(func(f *flag.Flag) { o.addRecommended = o.addRecommended && f.Name != "nice" })

	ctx := context.Background()
	ok, err := bench(ctx, os.Stdout, d, o)
	if err != nil {
		fmt.Fprintf(os.Stderr, "purge benchmark: %v\n", err)
		os.Exit(1)
	}
	if !ok && *strict {
		os.Exit(1)
	}
}

// allMethods are the batched mechanics -methods=all runs.
var allMethods = []lifecycle.PurgeMethod{lifecycle.PurgeMethodAuto, lifecycle.PurgeMethodKeyset, lifecycle.PurgeMethodKeysetCTID,
	lifecycle.PurgeMethodKeysetArray, lifecycle.PurgeMethodCommunityCTID, lifecycle.PurgeMethodTIDRange}

// The NiceRatio docs/executor.md recommends for a purge beside live
// traffic (recommendedNice), and for a database host of smallHostCores or
// fewer (recommendedNiceSmallHost); the bystander's p99 target applies at
// the one for the host the benchmark runs on.
const (
	recommendedNice          = 1.0
	recommendedNiceSmallHost = 8.0
	smallHostCores           = 2
)

// recommendedNiceFor returns the ratio docs/executor.md recommends for the
// server the benchmark runs on, and why: its own throwaway server runs on
// this machine, whose cores it counts; of a TEST_DATABASE_URL server it
// knows nothing, and takes the general recommendation.
func recommendedNiceFor(source ephemeralpg.Source, cores int) (float64, string) {
	if source == ephemeralpg.SourceURL {
		return recommendedNice, "beside live traffic; the TEST_DATABASE_URL server's cores are not known here, set -recommended-nice for a small host"
	}
	if cores <= smallHostCores {
		return recommendedNiceSmallHost, fmt.Sprintf("for a database host of %d cores or fewer; this one has %d", smallHostCores, cores)
	}
	return recommendedNice, fmt.Sprintf("beside live traffic, on a host of more than %d cores", smallHostCores)
}

// benchOptions are what one run of the benchmark compares.
type benchOptions struct {
	// methods are the batched mechanics: the first runs at every ratio of
	// nices, the others at the first ratio.
	methods []lifecycle.PurgeMethod
	// nices are the NiceRatio values of the curve.
	nices  []float64
	repeat int
	// purge is the options every batched purge starts from.
	purge lifecycle.PurgeOptions
	// autovacuum false turns autovacuum off on the throwaway server.
	autovacuum bool
	// top > 0 records each purge's top statements (pg_stat_statements).
	top int
	// sharedBuffers, when set, is the throwaway server's shared_buffers.
	sharedBuffers string
	// set are further settings of the throwaway server (-set).
	set serverSettings
	// idleWindow is how long the bystander's traffic runs alone before each
	// run; zero means defaultIdleWindow.
	idleWindow time.Duration
	// recommended is the nice ratio the bystander's target is checked at;
	// zero means the one docs/executor.md recommends for the host.
	recommended float64
	// addRecommended adds the ratio the target is checked at to nices
	// when they leave it out (the default curve, not an explicit -nice).
	addRecommended bool
}

// defaultNices is the curve -nice runs unless told otherwise.
const defaultNices = "0,0.5,1,2"

// curve is the nice ratios a run measures: nices, and the ratio the
// bystander's target is checked at when addRecommended and nices leave it
// out, so that the default run checks that target.
func (o benchOptions) curve(recommended float64) []float64 {
	if !o.addRecommended || slices.Contains(o.nices, recommended) {
		return o.nices
	}
	return append(slices.Clone(o.nices), recommended)
}

// bystanderNice is the ratio the bystander's target is checked at, and
// why: -recommended-nice, or the docs' ratio for the host (recommendedNiceFor).
func (o benchOptions) bystanderNice(source ephemeralpg.Source) (float64, string) {
	if o.recommended != 0 {
		return o.recommended, "as -recommended-nice says"
	}
	return recommendedNiceFor(source, runtime.NumCPU())
}

func (o benchOptions) idle() time.Duration {
	if o.idleWindow == 0 {
		return defaultIdleWindow
	}
	return o.idleWindow
}

// batchedConfig is one batched purge of a run.
type batchedConfig struct {
	method lifecycle.PurgeMethod
	nice   float64
}

func (c batchedConfig) name() string {
	if c.nice == 0 {
		return "batched (" + methodName(c.method) + ")"
	}
	return fmt.Sprintf("batched (%s, nice %g)", methodName(c.method), c.nice)
}

// configs are the batched purges of a run, in the order they run.
func (o benchOptions) configs() []batchedConfig {
	var cs []batchedConfig
	for i, m := range o.methods {
		for j, n := range o.nices {
			if i == 0 || j == 0 {
				cs = append(cs, batchedConfig{method: m, nice: n})
			}
		}
	}
	return cs
}

// serverSettings are the throwaway server's settings given with -set.
type serverSettings map[string]string

func (s serverSettings) String() string {
	names := slices.Sorted(maps.Keys(s))
	for i, n := range names {
		names[i] = n + "=" + s[n]
	}
	return strings.Join(names, " ")
}

// Set takes one name=value.
func (s serverSettings) Set(v string) error {
	name, value, ok := strings.Cut(v, "=")
	if name = strings.TrimSpace(name); !ok || name == "" {
		return fmt.Errorf("%q is not name=value", v)
	}
	s[name] = strings.TrimSpace(value)
	return nil
}

// serverConfig is the throwaway server's settings beyond ephemeralpg's:
// those of the flags that name one, then -set's, which win.
func (o benchOptions) serverConfig() map[string]string {
	config := map[string]string{}
	if !o.autovacuum {
		config["autovacuum"] = "off"
	}
	if o.sharedBuffers != "" {
		config["shared_buffers"] = o.sharedBuffers
	}
	if o.top > 0 {
		config["shared_preload_libraries"] = "pg_stat_statements"
		config["pg_stat_statements.track"] = "all"
		config["pg_stat_statements.max"] = "10000"
	}
	maps.Copy(config, o.set)
	return config
}

func bench(ctx context.Context, out io.Writer, d dataset, o benchOptions) (bool, error) {
	server, err := ephemeralpg.Start(ctx, ephemeralpg.Options{Fsync: false, ExtraConfig: o.serverConfig()})
	if err != nil {
		return false, fmt.Errorf("start server: %w", err)
	}
	defer server.Close(ctx)
	recommended, why := o.bystanderNice(server.Source())
	o.nices = o.curve(recommended)
	durability := "fsync, synchronous_commit and full_page_writes off (a throwaway server; disk cost left out of both sides alike)"
	if server.Source() == ephemeralpg.SourceURL {
		durability = "the TEST_DATABASE_URL server's own durability settings"
	}

	fmt.Fprintf(out, "building %d + %d rows (once, as a template database)...\n", d.rows, d.otherRows)
	start := time.Now()
	clone := func() (string, func(context.Context) error, error) { return server.NewDatabase(ctx, d) }
	url, drop, err := clone()
	if err != nil {
		return false, fmt.Errorf("build dataset: %w", err)
	}
	var version, autovacuum, sharedBuffers string
	var rows int64
	// -set's settings as the server reports them, not as asked.
	var set []string
	if err := withPool(ctx, url, func(pool *pgxpool.Pool) error {
		if err := pool.QueryRow(ctx, "SELECT current_setting('server_version'), current_setting('autovacuum'), current_setting('shared_buffers')").Scan(&version, &autovacuum, &sharedBuffers); err != nil {
			return err
		}
		for _, name := range slices.Sorted(maps.Keys(o.set)) {
			var value string
			if err := pool.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&value); err != nil {
				return fmt.Errorf("-set %s: %w", name, err)
			}
			set = append(set, ", "+name+" "+value)
		}
		for _, s := range shares {
			var n int64
			if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{s.table}.Sanitize()+" WHERE "+fmt.Sprintf(s.of, "$1"), target).Scan(&n); err != nil {
				return err
			}
			rows += n
		}
		return nil
	}); err != nil {
		return false, err
	}
	_ = drop(ctx)
	fmt.Fprintf(out, "built in %s\n\n", time.Since(start).Round(time.Second))

	configs := o.configs()
	single := make([]run, 0, o.repeat)
	batched := make(map[batchedConfig][]run)
	for i := range o.repeat {
		// Alternate which side goes first.
		sides := []func() error{
			func() error {
				r, err := onClone(ctx, clone, d.load, o.idle(), o.top, runSingle)
				single = append(single, r)
				return err
			},
			func() error {
				for _, c := range configs {
					p := o.purge
					p.Method, p.NiceRatio = c.method, c.nice
					r, err := onClone(ctx, clone, d.load, o.idle(), o.top, func(ctx context.Context, pool *pgxpool.Pool) (run, error) {
						return runBatched(ctx, pool, c.name(), p, rows)
					})
					batched[c] = append(batched[c], r)
					if err != nil {
						return err
					}
				}
				return nil
			},
		}
		if i%2 == 1 {
			slices.Reverse(sides)
		}
		for _, side := range sides {
			if err := side(); err != nil {
				return false, err
			}
		}
	}

	base := median(single)
	fmt.Fprintf(out, "PostgreSQL %s, %s, autovacuum %s, shared_buffers %s%s\n", version, durability, autovacuum, sharedBuffers, strings.Join(set, ""))
	fmt.Fprintf(out, "purged community: %d rows in %d tables (+ %d rows of another community that must survive); median of %d run(s)\n",
		rows, len(shares), d.otherRows, o.repeat)
	fmt.Fprintf(out, "batched: TxBudget %s, MaxRowsPerTx %d\n\n", o.purge.TxBudget, o.purge.MaxRowsPerTx)
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "purge\ttotal\tbatches\tover cap\tlongest tx\trows/s\ttotal vs single\tniced\tcheckpoints\tthen VACUUM\twith VACUUM vs single\t")
	line := func(r run) {
		fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%s\t%.0f\t%.2fx\t%s\t%d\t%s\t%.2fx\t\n", r.name, r.total.Round(time.Millisecond), r.batches, r.overCap,
			r.longestTx.Round(time.Millisecond), float64(r.rows)/r.total.Seconds(), r.total.Seconds()/base.total.Seconds(),
			r.niced.Round(time.Millisecond), r.checkpoints, r.vacuum.Round(time.Millisecond), (r.total+r.vacuum).Seconds()/(base.total+base.vacuum).Seconds())
	}
	line(base)
	for _, c := range configs {
		line(median(batched[c]))
	}
	w.Flush()

	// Per table, for the purges at the first ratio (the others only
	// stretch the same work by their sleeps).
	var flat []batchedConfig
	for _, c := range configs {
		if c.nice == o.nices[0] {
			flat = append(flat, c)
		}
	}
	fmt.Fprintln(out, "\nper table (single: the statement's time; batched: batches, and time from the previous table's last batch to this one's,")
	fmt.Fprintln(out, "so the plan counts toward the first table and each table's closing sweep toward the next):")
	w = tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(w, "table\trows\tsingle\t")
	for _, c := range flat {
		fmt.Fprintf(w, "%s batches\t%s\t", c.name(), c.name())
	}
	fmt.Fprintln(w)
	for _, s := range shares {
		fmt.Fprintf(w, "%s\t%d\t%s\t", s.table, base.perTable[s.table].rows, base.perTable[s.table].elapsed.Round(time.Millisecond))
		for _, c := range flat {
			t := median(batched[c]).perTable[s.table]
			fmt.Fprintf(w, "%d\t%s\t", t.batches, t.elapsed.Round(time.Millisecond))
		}
		fmt.Fprintln(w)
	}
	w.Flush()
	for _, c := range flat {
		if walks := median(batched[c]).heapWalks; len(walks) > 0 {
			fmt.Fprintf(out, "%s walked by their heap, once the batches through their parents grew slow: %s\n", c.name(), strings.Join(walks, ", "))
		}
	}

	ok := true
	check := func(pass bool) string {
		if pass {
			return "PASS"
		}
		ok = false
		return "MISS"
	}
	fmt.Fprintln(out)
	for _, c := range configs {
		r := median(batched[c])
		if r.digest != base.digest {
			return false, fmt.Errorf("%s left different surviving data than the single transaction", r.name)
		}
		ratio := r.total.Seconds() / base.total.Seconds()
		total := fmt.Sprintf("total %.2fx the single transaction (target <= %.1fx at nice 0) %s", ratio, maxTotalRatio, check(ratio <= maxTotalRatio))
		if c.nice != 0 {
			total = fmt.Sprintf("total %.2fx the single transaction (no target: it sleeps %.0f%% of it)", ratio, 100*r.niced.Seconds()/r.total.Seconds())
		}
		fmt.Fprintf(out, "%s: %s; longest transaction %s, a %s (target < %s) %s; the final transaction %s\n", r.name, total,
			r.longestTx.Round(time.Millisecond), r.longestTxWork, maxLongestTx, check(r.longestTx < maxLongestTx),
			r.finalTx.Round(time.Millisecond))
	}
	if d.load {
		// Every phase against the idle traffic of all the run's idle windows
		// pooled (each clone's, just before its purge): one window's p99 moves
		// by 2x from one to the next on a shared machine.
		var idle latencies
		windows := 0
		for _, r := range single {
			idle = idle.plus(r.idle)
			windows++
		}
		for _, c := range configs {
			for _, r := range batched[c] {
				idle = idle.plus(r.idle)
				windows++
			}
		}
		fmt.Fprintf(out, "\nthe trade: the bystander tenant's traffic (%d workers: single-row INSERT into a fenced table, primary-key SELECT)\n", loadWorkers)
		fmt.Fprintln(out, "beside each purge, against its total time; nice R sleeps R times each batch's duration after it:")
		w = tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(w, "phase\ttotal\tvs single\tlongest tx\twrite p50\twrite p99\twrite vs idle\tread p50\tread p99\tread vs idle\tstatements\t")
		phase := func(name string, r *run, l latencies) {
			total, vs, longest := "-", "-", "-"
			if r != nil {
				total, vs, longest = r.total.Round(time.Millisecond).String(), fmt.Sprintf("%.2fx", r.total.Seconds()/base.total.Seconds()),
					r.longestTx.Round(time.Millisecond).String()
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%.2fx\t%s\t%s\t%.2fx\t%d\t\n", name, total, vs, longest,
				quantile(l.writes, 0.5).Round(time.Microsecond), quantile(l.writes, 0.99).Round(time.Microsecond),
				ratio(quantile(l.writes, 0.99), quantile(idle.writes, 0.99)),
				quantile(l.reads, 0.5).Round(time.Microsecond), quantile(l.reads, 0.99).Round(time.Microsecond),
				ratio(quantile(l.reads, 0.99), quantile(idle.reads, 0.99)), len(l.writes)+len(l.reads))
		}
		phase(fmt.Sprintf("idle (%d windows of %s)", windows, o.idle()), nil, idle)
		phase("single transaction", &base, base.busy)
		for _, c := range configs {
			r := median(batched[c])
			phase(r.name, &r, r.busy)
		}
		w.Flush()
		checked := false
		for _, c := range configs {
			if c.nice != recommended || c.method != o.methods[0] {
				continue
			}
			checked = true
			r := median(batched[c])
			wr := ratio(quantile(r.busy.writes, 0.99), quantile(idle.writes, 0.99))
			rd := ratio(quantile(r.busy.reads, 0.99), quantile(idle.reads, 0.99))
			fmt.Fprintf(out, "%s (the recommended setting, %s): the bystander's p99 beside it %.2fx (writes) and %.2fx (reads) its idle p99 (target <= %.1fx) %s\n",
				r.name, why, wr, rd, maxBystanderRatio, check(wr <= maxBystanderRatio && rd <= maxBystanderRatio))
		}
		if !checked {
			fmt.Fprintf(out, "the bystander's p99 target applies at the recommended nice %g (%s), which this run did not include: not checked\n", recommended, why)
		}
	}
	fmt.Fprintln(out)
	for _, c := range flat {
		r := median(batched[c])
		growth := float64(slices.Max(r.heapByQuarter[:])) / float64(max(r.heapByQuarter[0], 1))
		fmt.Fprintf(out, "%s: executor heap in use peaked at %.1f MiB; by quarter of the rows purged %s (%.2fx the first; target <= %.1fx) %s\n",
			r.name, float64(r.heapPeak)/(1<<20), mib(r.heapByQuarter[:]), growth, maxHeapGrowth, check(growth <= maxHeapGrowth))
	}
	if o.top > 0 {
		printStatements(out, base)
		for _, c := range configs {
			printStatements(out, median(batched[c]))
		}
	}
	fmt.Fprintln(out, "surviving data (the other community, the nullified audit rows) is identical after every run")
	return ok, nil
}

// statementStat is one statement's cost during a purge, from
// pg_stat_statements (nested statements included: foreign key checks and
// cascades, the fence's queries).
type statementStat struct {
	calls       int64
	total, mean time.Duration
	rows        int64
	query       string
}

// printStatements prints the costliest statements of r.
func printStatements(out io.Writer, r run) {
	fmt.Fprintf(out, "\n%s: its costliest statements (pg_stat_statements, nested included; the bystander's too):\n", r.name)
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "total\tcalls\tmean\trows\tstatement")
	for _, s := range r.statements {
		fmt.Fprintf(w, "%s\t%d\t%s\t%d\t%s\n", s.total.Round(time.Millisecond), s.calls, s.mean.Round(time.Microsecond), s.rows, s.query)
	}
	w.Flush()
}

// topStatements reads the database's top n statements by total time since
// the last reset.
func topStatements(ctx context.Context, pool *pgxpool.Pool, n int) ([]statementStat, error) {
	rows, err := pool.Query(ctx, `SELECT calls, total_exec_time, mean_exec_time, rows, query FROM pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
		ORDER BY total_exec_time DESC LIMIT $1`, n)
	if err != nil {
		return nil, fmt.Errorf("read pg_stat_statements: %w", err)
	}
	defer rows.Close()
	var stats []statementStat
	for rows.Next() {
		var s statementStat
		var total, mean float64
		if err := rows.Scan(&s.calls, &total, &mean, &s.rows, &s.query); err != nil {
			return nil, err
		}
		s.total, s.mean = time.Duration(total*float64(time.Millisecond)), time.Duration(mean*float64(time.Millisecond))
		if s.query = strings.Join(strings.Fields(s.query), " "); len(s.query) > 160 {
			s.query = s.query[:160] + "…"
		}
		stats = append(stats, s)
	}
	return stats, rows.Err()
}

// ratio is a/b, 0 when b is 0.
func ratio(a, b time.Duration) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// mib renders byte counts in MiB.
func mib(v []uint64) string {
	parts := make([]string, len(v))
	for i, b := range v {
		parts[i] = fmt.Sprintf("%.1f", float64(b)/(1<<20))
	}
	return strings.Join(parts, " / ") + " MiB"
}

func methodName(m lifecycle.PurgeMethod) string {
	if m == lifecycle.PurgeMethodAuto {
		return "auto"
	}
	return string(m)
}

// median returns the run with the median total.
func median(runs []run) run {
	sorted := slices.Clone(runs)
	slices.SortFunc(sorted, func(a, b run) int { return int(a.total - b.total) })
	return sorted[len(sorted)/2]
}

func withPool(ctx context.Context, url string, fn func(*pgxpool.Pool) error) error {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	return fn(pool)
}

// onClone runs fn on a fresh clone of the dataset and digests what survives.
// With load, the bystander's traffic runs alone on the clone first and then
// beside fn.
func onClone(ctx context.Context, clone func() (string, func(context.Context) error, error), load bool, idleWindow time.Duration, top int,
	fn func(context.Context, *pgxpool.Pool) (run, error)) (run, error) {
	url, drop, err := clone()
	if err != nil {
		return run{}, fmt.Errorf("clone dataset: %w", err)
	}
	defer func() { _ = drop(ctx) }()
	var r run
	err = withPool(ctx, url, func(pool *pgxpool.Pool) error {
		if top > 0 {
			if _, err := pool.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err != nil {
				return err
			}
		}
		var idle latencies
		var traffic *bystanderLoad
		if load {
			var err error
			if idle, err = idleLoad(ctx, url, idleWindow); err != nil {
				return err
			}
			if traffic, err = startLoad(ctx, url); err != nil {
				return err
			}
		}
		if top > 0 {
			if _, err := pool.Exec(ctx, "SELECT pg_stat_statements_reset()"); err != nil {
				return err
			}
		}
		checkpoints := func() (n int64, err error) {
			err = pool.QueryRow(ctx, "SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter").Scan(&n)
			return n, err
		}
		before, err := checkpoints()
		if err != nil {
			return err
		}
		r, err = fn(ctx, pool)
		if after, cerr := checkpoints(); err == nil {
			r.checkpoints, err = after-before, cerr
		}
		if top > 0 && err == nil {
			if r.statements, err = topStatements(ctx, pool, top); err != nil {
				return err
			}
		}
		if traffic != nil {
			busy, loadErr := traffic.finish()
			if loadErr != nil {
				return loadErr
			}
			r.idle, r.busy = idle, busy
			if r.busy.errors > 0 {
				return fmt.Errorf("%s: %d bystander statements failed", r.name, r.busy.errors)
			}
		}
		if err != nil {
			return fmt.Errorf("%s: %w", r.name, err)
		}
		start := time.Now()
		for _, s := range shares {
			if _, err := pool.Exec(ctx, "VACUUM "+s.table); err != nil {
				return fmt.Errorf("vacuum %s: %w", s.table, err)
			}
		}
		r.vacuum = time.Since(start)
		// The bystander's own rows go into the digest: drop them first.
		if _, err := pool.Exec(ctx, "DELETE FROM fixture_activity WHERE community_id = $1 AND kind = 'bystander load'", bystander); err != nil {
			return err
		}
		r.digest, err = survivors(ctx, pool)
		return err
	})
	return r, err
}

// survivors digests the other community's rows and the audit rows, and
// fails if the target kept any row.
func survivors(ctx context.Context, pool *pgxpool.Pool) (string, error) {
	sum := sha256.New()
	for _, s := range shares {
		var left int64
		var digest string
		// What survives is every row but the target's (the other
		// community's, and rows of none).
		table := pgx.Identifier{s.table}.Sanitize()
		if err := pool.QueryRow(ctx, "SELECT (SELECT count(*) FROM "+table+" WHERE "+fmt.Sprintf(s.of, "$1")+"), "+
			"(SELECT md5(coalesce(string_agg(t::text, '|' ORDER BY t::text), '')) FROM "+table+" t)", target).Scan(&left, &digest); err != nil {
			return "", err
		}
		if left != 0 {
			return "", fmt.Errorf("%d rows of the purged community left in %s", left, s.table)
		}
		fmt.Fprintf(sum, "%s=%s\n", s.table, digest)
	}
	return hex.EncodeToString(sum.Sum(nil)), nil
}

// runBatched runs Engine.EnterPostgresPurged.
func runBatched(ctx context.Context, pool *pgxpool.Pool, name string, opts lifecycle.PurgeOptions, expected int64) (run, error) {
	r := run{name: name, perTable: map[string]tableRun{}}
	var token lifecycle.LeaseToken
	// The clone's lease is as old as the template: renew it.
	if err := pool.QueryRow(ctx, `UPDATE community_deletion.community_deletion_requests SET lease_until = now() + interval '1 hour'
		WHERE community_id = $1 AND stage = 'bindings_removed'
		RETURNING id, lease_owner, lease_generation`, target).Scan(&token.RequestID, &token.Owner, &token.Generation); err != nil {
		return r, fmt.Errorf("find the request: %w", err)
	}
	token.CommunityID = target
	token = token.WithFence(1)
	engine, err := lifecycle.NewEngine(ctx, pool, nil)
	if err != nil {
		return r, err
	}
	last := time.Now()
	var done int64
	opts.Progress = func(p lifecycle.PurgeProgress) {
		if p.Paused != "" {
			return
		}
		now := time.Now()
		t := r.perTable[p.Table]
		done += p.Rows - t.rows
		t.rows, t.batches, t.elapsed = p.Rows, t.batches+1, t.elapsed+now.Sub(last)
		r.perTable[p.Table] = t
		last = now
		q := min(int(4*done/max(expected, 1)), 3)
		r.heapByQuarter[q] = max(r.heapByQuarter[q], heapInUse())
	}
	runtime.GC()
	heap := sampleHeap()
	// A lease lasts at most an hour (the database refuses longer), and a
	// slow purge (autovacuum off at 10,000,000 rows) outlasts it: renew it
	// as the executor does.
	renewCtx, stopRenewing := context.WithCancel(ctx)
	renewed := make(chan error, 1)
	go func() { renewed <- renewLease(renewCtx, engine, token) }()
	start := time.Now()
	result, err := engine.EnterPostgresPurged(ctx, token, opts)
	r.total = time.Since(start)
	r.heapPeak = heap.finish()
	stopRenewing()
	// A renewal that races the purge's last commit fails harmlessly: only
	// a purge that failed reports it.
	if renewErr := <-renewed; err != nil && renewErr != nil {
		err = fmt.Errorf("%w (%w)", err, renewErr)
	}
	if err != nil {
		return r, err
	}
	r.batches, r.longestTx, r.longestTxWork, r.niced = result.Batches, result.LongestTx, result.LongestTxWork, result.Niced
	r.finalTx = result.FinalTx
	r.heapWalks = result.HeapWalks
	r.overCap = result.OverCapBatches
	for _, n := range result.Deleted {
		r.rows += n
	}
	for _, n := range result.Nullified {
		r.rows += n
	}
	return r, nil
}

// renewLease renews token's lease every ten minutes for an hour until ctx
// ends, and returns the first renewal that failed.
func renewLease(ctx context.Context, engine *lifecycle.Engine, token lifecycle.LeaseToken) error {
	ticker := time.NewTicker(10 * time.Minute)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
		if err := engine.Heartbeat(ctx, token, time.Hour); err != nil && ctx.Err() == nil {
			return fmt.Errorf("renew the purge's lease: %w", err)
		}
	}
}

// runSingle deletes the target's rows with one DELETE per table, child
// before parent, and clears its 'nullify' rows, in one transaction as the
// authorized executor.
func runSingle(ctx context.Context, pool *pgxpool.Pool) (run, error) {
	r := run{name: "single transaction", batches: 1, perTable: map[string]tableRun{}}
	start := time.Now()
	err := pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock_shared(community_deletion.community_schema_destruction_lock_key())"); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SELECT set_config('community_deletion.executor_community', $1, true),
			set_config('community_deletion.fence_generation', '1', true)`, target.String()); err != nil {
			return err
		}
		statements := make([][2]string, 0, len(deleteOrder)+len(nullifyTables))
		for _, table := range deleteOrder {
			statements = append(statements, [2]string{table, "DELETE FROM " + pgx.Identifier{table}.Sanitize() + " WHERE " + fmt.Sprintf(shareOf(table).of, "$1")})
		}
		for _, table := range nullifyTables {
			statements = append(statements, [2]string{table, "UPDATE " + pgx.Identifier{table}.Sanitize() + " SET community_id = NULL WHERE community_id = $1"})
		}
		for _, s := range statements {
			began := time.Now()
			tag, err := tx.Exec(ctx, s[1], target)
			if err != nil {
				return fmt.Errorf("%s: %w", s[0], err)
			}
			r.perTable[s[0]] = tableRun{rows: tag.RowsAffected(), batches: 1, elapsed: time.Since(began)}
			r.rows += tag.RowsAffected()
		}
		return nil
	})
	r.total = time.Since(start)
	r.longestTx = r.total
	return r, err
}
