package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tombstoneworks/communitydeletion/internal/ephemeralpg"
	"github.com/tombstoneworks/communitydeletion/internal/fixture"
)

// The -breakdown mode: what each step of the armed fence's path 0 costs on
// the server, while another tenant of the same tables is fenced, so that
// the "another tenant fenced" rows can be read as a sum. A trigger function
// of the benchmark's own runs the steps of path 0 in the fence's order,
// each calling the schema's own functions, and returns after the step its
// table names; the real fence's tables beside them show that the last step
// of each branch costs what the fence does (a child table's long way, the
// query through its paths, is the one a path of several steps takes). The
// writes go to tenants whose
// fence bit the fenced tenant does not share, so that no statement leaves
// path 0.
var (
	breakdownMode   = new(bool)
	breakdownRounds int
)

// breakdownStep is one table of the breakdown: what its trigger does, and
// the step (an argument of bench_breakdown_step()) it stops after; an
// empty step is a table of its own (no trigger, the empty trigger, or the
// real fence).
type breakdownStep struct {
	name, table, column, step string
	// after is the table whose figure this one's adds to.
	after string
	// row, for a candidate the fence does not take, is the call of the
	// function its table's AFTER INSERT row trigger runs, and when that
	// trigger's WHEN condition, if it has one.
	row, when string
	// statement, for a candidate statement trigger, is the call of the
	// function its AFTER INSERT statement trigger runs instead of a step.
	statement string
}

// candidate says whether st is a row-trigger candidate, measured in the
// candidates' runs.
func (st breakdownStep) candidate() bool { return st.row != "" }

// The breakdown's groups, each measured in a rotation of its own with the
// reference tables beside it: the fence's path 0 step by step, a child's
// long way, and the row-trigger candidates.
const (
	groupSteps = iota
	groupLongWay
	groupCandidates
	groups
)

// groupNames name the groups other than the steps in the report.
var groupNames = [groups]string{groupLongWay: "the long way's", groupCandidates: "the candidates'"}

// group is the rotation st is measured in. The long way's statements run
// apart from the steps: each plans a query through the paths, and in a
// shared rotation that moved the fence's child row by about 20 µs.
func (st breakdownStep) group() int {
	switch {
	case st.candidate():
		return groupCandidates
	case st.step == "generate" || st.step == "execute":
		return groupLongWay
	default:
		return groupSteps
	}
}

// reference says whether st is measured in every group's runs: no trigger
// and the empty statement trigger, which each group's figures are read
// against.
func (st breakdownStep) reference() bool { return st.table == "bd_none" || st.table == "bd_floor" }

var breakdownSteps = []breakdownStep{
	{name: "no trigger (for reference)", table: "bd_none", column: "account_id"},
	{name: "an empty statement trigger (the floor)", table: "bd_floor", column: "account_id"},
	{name: "+ the isolation test and the armed constant", table: "bd_armed", column: "account_id", step: "armed", after: "bd_floor"},
	{name: "+ the marker's lock, taken shared", table: "bd_lock", column: "account_id", step: "lock", after: "bd_armed"},
	{name: "+ the marker read", table: "bd_marker", column: "account_id", step: "marker", after: "bd_lock"},
	{name: "+ one query counting the statement's rows", table: "bd_scan", column: "account_id", step: "scan", after: "bd_marker"},
	{name: "+ one query reading the statement's keys (to_jsonb)", table: "bd_keys", column: "account_id", step: "keys", after: "bd_marker"},
	{name: "+ that query, ORing the keys' bits (community_deletion_fence_key_bit)", table: "bd_bits", column: "account_id", step: "bits", after: "bd_marker"},
	{name: "the fence, a key of the table's own", table: "bd_fenced", column: "account_id", after: "bd_bits"},
	{name: "child: + one query reading the referencing values", table: "bd_refs", column: "parent_id", step: "refs", after: "bd_marker"},
	{name: "child: + one dynamic query ORing the bits of the parents they name", table: "bd_parents", column: "parent_id", step: "parents", after: "bd_refs"},
	{name: "the fence, a child through its parent", table: "bd_child", column: "parent_id", after: "bd_parents"},
	{name: "candidate: path 0 in one query written for its table (the isolation test, the lock, the marker, the bits)", table: "bd_one_query", column: "account_id", after: "bd_floor", statement: "bench_one_query()"},
	{name: "candidate, child: path 0 in one query written for its table, its parents by a static query", table: "bd_one_query_child", column: "parent_id", after: "bd_floor", statement: "bench_one_query_child()"},
	{name: "child, the long way: the marker, then the query through the paths, generated", table: "bd_generate", column: "parent_id", step: "generate", after: "bd_floor"},
	{name: "child, the long way: + that query run (EXECUTE), and the bits", table: "bd_execute", column: "parent_id", step: "execute", after: "bd_generate"},
	// Candidates for an armed path that reads no transition table: a row
	// trigger reads its row's key without a query. Each compares the key's
	// bit with the marker's value as a constant the planner folds (as the
	// armed constant is), but the one that reads the marker itself.
	{name: "candidate: an empty row trigger (the floor of a row fence)", table: "bd_row_floor", column: "account_id", after: "bd_floor", row: "bench_empty_trigger()"},
	{name: "candidate: row trigger, the key by name (to_jsonb), its bit against a constant", table: "bd_row_by_name", column: "account_id", after: "bd_row_floor", row: "bench_row_by_name('account_id')"},
	{name: "candidate: that trigger behind WHEN (the armed constant)", table: "bd_row_when", column: "account_id", after: "bd_row_by_name", row: "bench_row_by_name('account_id')", when: "community_deletion.community_deletion_fence_armed()"},
	{name: "candidate: row trigger written for its table (NEW.account_id), its bit against a constant", table: "bd_row_direct", column: "account_id", after: "bd_row_floor", row: "bench_row_direct()"},
	{name: "candidate: that trigger, the marker's lock and read in place of the constant", table: "bd_row_marker", column: "account_id", after: "bd_row_direct", row: "bench_row_marker()"},
	{name: "candidate: that trigger, a bit from hashint8(NEW.account_id) in place of the fence's", table: "bd_row_hash", column: "account_id", after: "bd_row_floor", row: "bench_row_hash()"},
	{name: "candidate, child: row trigger written for its table, its parent's key by a static query", table: "bd_row_child", column: "parent_id", after: "bd_row_floor", row: "bench_row_child()"},
}

// breakdownSetup creates the tables, in a database of the schema's
// template: a bigint tenant table, a parent keyed by it, and one table per
// step. Each step's trigger gets the real fence's arguments for its shape
// after the step, so the generated query is the one the fence runs.
const breakdownSetup = `
CREATE TABLE bench_tenants (id bigint PRIMARY KEY, name text NOT NULL);
INSERT INTO bench_tenants SELECT i, 'tenant ' || i FROM generate_series(1, %[1]d) i;
SELECT community_deletion.declare_tenant_table('bench_tenants');
CREATE TABLE bench_projects (id bigint PRIMARY KEY, account_id bigint NOT NULL REFERENCES bench_tenants (id));
CREATE INDEX ON bench_projects (account_id, id);
INSERT INTO bench_projects SELECT i, i FROM generate_series(1, %[1]d) i;
SELECT community_deletion.attach_community_write_fence('bench_projects', 'delete', 'account_id');
CREATE FUNCTION bench_empty_trigger() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;
-- Path 0 of community_deletion.enforce_community_write_fence(), step by
-- step (TG_ARGV: the step to stop after, then the fence's own arguments).
CREATE FUNCTION bench_breakdown_step() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    keys text[];
    touched uuid[];
    community uuid;
    marker int8;
    bits int8;
    q text;
    args text[] := TG_ARGV[1:];
    spec jsonb;
    path jsonb;
    hop jsonb;
    step int4;
    key_column text;
    parents text;
BEGIN
    -- The dormant return's condition, as migration 00038 orders it:
    -- armed, the planner folds it to false.
    IF NOT community_deletion.community_deletion_fence_armed()
       AND TG_NARGS = 4 AND pg_catalog.current_setting('transaction_isolation') = 'read committed' THEN
        RAISE EXCEPTION 'the breakdown measures the armed fence, and it is dormant';
    END IF;
    IF TG_NARGS = 4 AND pg_catalog.current_setting('transaction_isolation') = 'read committed' THEN
        IF TG_ARGV[0] = 'armed' THEN RETURN NULL; END IF;
        IF pg_catalog.pg_try_advisory_xact_lock_shared(1668246884, 1718510437) THEN
            IF TG_ARGV[0] = 'lock' THEN RETURN NULL; END IF;
            marker := pg_catalog.pg_sequence_last_value('community_deletion.community_deletion_fence_marker'::pg_catalog.regclass);
            IF TG_ARGV[0] = 'marker' THEN RETURN NULL; END IF;
            IF TG_ARGV[1] = 'through' AND TG_ARGV[0] IN ('refs', 'parents') THEN
                -- The fence's way for one-step paths (migration 00037).
                spec := TG_ARGV[2]::jsonb;
                parents := NULL;
                FOR step IN 0 .. jsonb_array_length(spec -> 'paths') - 1 LOOP
                    path := spec -> 'paths' -> step;
                    hop := path -> 'hops' -> 0;
                    IF jsonb_array_length(path -> 'hops') <> 1 OR jsonb_array_length(hop -> 'columns') <> 1
                       OR row_security_active(format('%%I.%%I', hop ->> 'schema', hop ->> 'table')) THEN
                        RAISE EXCEPTION 'the breakdown measures one-step paths';
                    END IF;
                    key_column := hop -> 'columns' ->> 0;
                    SELECT pg_catalog.array_agg(pg_catalog.to_jsonb(n) ->> key_column) INTO keys FROM community_fence_new n;
                    parents := COALESCE(parents || ' UNION ALL ', '') || format(
                        'SELECT p.%%I::pg_catalog.text FROM %%I.%%I p WHERE p.%%I OPERATOR(pg_catalog.=) ANY (%%L)',
                        path ->> 'key', hop ->> 'schema', hop ->> 'table', hop -> 'parent_columns' ->> 0, keys::text);
                END LOOP;
                IF TG_ARGV[0] = 'refs' THEN RETURN NULL; END IF;
                EXECUTE 'SELECT pg_catalog.array_agg(b.key) FROM (' || parents || ') b (key)' INTO keys;
                SELECT pg_catalog.bit_or(community_deletion.community_deletion_fence_key_bit(k.key)) INTO bits
                FROM pg_catalog.unnest(keys) k (key);
            ELSIF TG_ARGV[1] = 'through' THEN
                q := community_deletion.community_deletion_fence_query(TG_OP, args);
                IF TG_ARGV[0] = 'generate' THEN RETURN NULL; END IF;
                EXECUTE q INTO touched;
                bits := 0;
                FOREACH community IN ARRAY touched LOOP
                    bits := bits | community_deletion.community_deletion_fence_bit(community);
                END LOOP;
            ELSIF TG_ARGV[0] = 'scan' THEN
                SELECT pg_catalog.count(*) INTO bits FROM community_fence_new n;
                RETURN NULL;
            ELSIF TG_ARGV[0] = 'keys' THEN
                SELECT pg_catalog.array_agg(pg_catalog.to_jsonb(n) ->> TG_ARGV[1]) INTO keys FROM community_fence_new n;
                RETURN NULL;
            ELSE
                SELECT pg_catalog.bit_or(community_deletion.community_deletion_fence_key_bit(k.key)) INTO bits
                FROM (SELECT pg_catalog.to_jsonb(n) ->> TG_ARGV[1] FROM community_fence_new n) k (key);
            END IF;
            IF bits IS NULL OR (bits & marker) <> 0 THEN
                RAISE EXCEPTION 'the breakdown measures path 0, and this statement''s tenants share the fenced one''s bit';
            END IF;
        END IF;
    END IF;
    RETURN NULL;
END
$$;
-- The candidates' constant, replaced by the marker's value once the other
-- tenant is fenced. Each candidate admits a row whose tenant's fence bit
-- the constant lacks and raises otherwise, so that no row takes a shorter
-- way than the one measured. A variable never assigned is returned, as
-- the fence returns it, without evaluating an expression.
CREATE FUNCTION bench_fenced_bits() RETURNS int8 LANGUAGE sql STABLE AS $$ SELECT 0::int8 $$;
CREATE FUNCTION bench_row_by_name() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE admitted int4;
BEGIN
    IF pg_catalog.current_setting('transaction_isolation') = 'read committed'
       AND (bench_fenced_bits() & community_deletion.community_deletion_fence_key_bit(pg_catalog.to_jsonb(NEW) ->> TG_ARGV[0])) = 0 THEN
        RETURN admitted;
    END IF;
    RAISE EXCEPTION 'the breakdown measures the admitted path, and this row''s tenant shares the fenced one''s bit';
END
$$;
CREATE FUNCTION bench_row_direct() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE admitted int4;
BEGIN
    IF pg_catalog.current_setting('transaction_isolation') = 'read committed'
       AND (bench_fenced_bits() & community_deletion.community_deletion_fence_key_bit(NEW.account_id::text)) = 0 THEN
        RETURN admitted;
    END IF;
    RAISE EXCEPTION 'the breakdown measures the admitted path, and this row''s tenant shares the fenced one''s bit';
END
$$;
CREATE FUNCTION bench_row_marker() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE admitted int4;
BEGIN
    IF pg_catalog.current_setting('transaction_isolation') = 'read committed'
       AND pg_catalog.pg_try_advisory_xact_lock_shared(1668246884, 1718510437)
       AND (pg_catalog.pg_sequence_last_value('community_deletion.community_deletion_fence_marker'::pg_catalog.regclass)
            & community_deletion.community_deletion_fence_key_bit(NEW.account_id::text)) = 0 THEN
        RETURN admitted;
    END IF;
    RAISE EXCEPTION 'the breakdown measures the admitted path, and this row''s tenant shares the fenced one''s bit';
END
$$;
-- A bit the fence does not use: a hash of the key itself, with no
-- text. 2 is a bit no such hash gives (it gives the even ones).
CREATE FUNCTION bench_row_hash() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE admitted int4;
BEGIN
    IF pg_catalog.current_setting('transaction_isolation') = 'read committed'
       AND (2::int8 & (1::int8 << (pg_catalog.hashint8(NEW.account_id) & 62)::int4)) = 0 THEN
        RETURN admitted;
    END IF;
    RAISE EXCEPTION 'the breakdown measures the admitted path, and this row''s tenant shares the fenced one''s bit';
END
$$;
CREATE FUNCTION bench_row_child() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    admitted int4;
    tenant int8;
BEGIN
    SELECT p.account_id INTO tenant FROM bench_projects p WHERE p.id = NEW.parent_id;
    IF pg_catalog.current_setting('transaction_isolation') = 'read committed'
       AND (bench_fenced_bits() & community_deletion.community_deletion_fence_key_bit(tenant::text)) = 0 THEN
        RETURN admitted;
    END IF;
    RAISE EXCEPTION 'the breakdown measures the admitted path, and this row''s tenant shares the fenced one''s bit';
END
$$;
`

// oneQueryCandidate is a statement-trigger candidate: path 0 as one query,
// the isolation test and the marker's lock (and test, any further
// condition) ordered by a CASE before the marker read and bits, the
// statement's bits; name is the function's.
func oneQueryCandidate(name, test, bits string) string {
	return fmt.Sprintf(`CREATE FUNCTION %s() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    admitted int4;
    clear bool;
BEGIN
    IF NOT community_deletion.community_deletion_fence_armed()
       AND TG_NARGS = 0 AND pg_catalog.current_setting('transaction_isolation') = 'read committed' THEN
        RAISE EXCEPTION 'the breakdown measures the armed fence, and it is dormant';
    END IF;
    SELECT CASE WHEN pg_catalog.current_setting('transaction_isolation') = 'read committed'
                     AND pg_catalog.pg_try_advisory_xact_lock_shared(1668246884, 1718510437)%s
                THEN (%s)
                     & pg_catalog.pg_sequence_last_value('community_deletion.community_deletion_fence_marker'::pg_catalog.regclass) = 0
           END INTO clear;
    IF clear THEN
        RETURN admitted;
    END IF;
    RAISE EXCEPTION 'the breakdown measures the admitted path, and this statement''s tenants share the fenced one''s bit';
END
$$`, name, test, bits)
}

// oneQueryCandidates are the statement-trigger candidates' functions: for
// a key of the table's own, and for a child, its parents by a static query
// behind the row security test the fence's branch makes.
var oneQueryCandidates = []string{
	oneQueryCandidate("bench_one_query", "",
		"SELECT pg_catalog.bit_or(community_deletion.community_deletion_fence_key_bit(n.account_id::text)) FROM community_fence_new n"),
	oneQueryCandidate("bench_one_query_child", "\n                     AND NOT pg_catalog.row_security_active('public.bench_projects')",
		`SELECT pg_catalog.bit_or(community_deletion.community_deletion_fence_key_bit(p.account_id::text))
                      FROM public.bench_projects p WHERE p.id IN (SELECT n.parent_id FROM community_fence_new n)`),
}

// breakdownTable creates one step's table and its trigger.
func breakdownTable(ctx context.Context, pool *pgxpool.Pool, st breakdownStep) error {
	key := "bigint NOT NULL REFERENCES bench_tenants (id)"
	if st.column == "parent_id" {
		key = "bigint NOT NULL REFERENCES bench_projects (id)"
	}
	if _, err := pool.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, %s %s, body text NOT NULL, created_at timestamptz NOT NULL DEFAULT now())`,
		st.table, st.column, key)); err != nil {
		return fmt.Errorf("create %s: %w", st.table, err)
	}
	switch st.table {
	case "bd_fenced":
		_, err := pool.Exec(ctx, "SELECT community_deletion.attach_community_write_fence($1, 'delete', 'account_id')", st.table)
		return err
	case "bd_child":
		_, err := pool.Exec(ctx, "SELECT community_deletion.attach_child_table($1)", st.table)
		return err
	}
	if _, err := pool.Exec(ctx, "SELECT community_deletion.exclude_table($1, 'the fence benchmark''s breakdown')", st.table); err != nil {
		return fmt.Errorf("exclude %s: %w", st.table, err)
	}
	if st.row != "" {
		when := ""
		if st.when != "" {
			when = "WHEN (" + st.when + ") "
		}
		_, err := pool.Exec(ctx, fmt.Sprintf(`CREATE TRIGGER bench_breakdown AFTER INSERT ON %s FOR EACH ROW %sEXECUTE FUNCTION %s`, st.table, when, st.row))
		return err
	}
	var trigger string
	switch {
	case st.table == "bd_none":
		return nil
	case st.table == "bd_floor":
		trigger = "bench_empty_trigger()"
	case st.statement != "":
		trigger = st.statement
	default:
		// The real fence's arguments for this shape, after the step.
		var args []string
		if err := pool.QueryRow(ctx, `SELECT string_to_array(rtrim(encode(t.tgargs, 'escape'), '\000'), '\000')
			FROM pg_trigger t WHERE t.tgrelid = $1::regclass AND t.tgname = 'community_write_fence_insert'`,
			map[string]string{"account_id": "bd_fenced", "parent_id": "bd_child"}[st.column]).Scan(&args); err != nil {
			return fmt.Errorf("read the fence's arguments: %w", err)
		}
		quoted := []string{quote(st.step)}
		for _, a := range args {
			quoted = append(quoted, quote(a))
		}
		trigger = fmt.Sprintf("bench_breakdown_step(%s)", strings.Join(quoted, ", "))
	}
	_, err := pool.Exec(ctx, fmt.Sprintf(`CREATE TRIGGER bench_breakdown AFTER INSERT ON %s REFERENCING NEW TABLE AS community_fence_new
		FOR EACH STATEMENT EXECUTE FUNCTION %s`, st.table, trigger))
	return err
}

// breakdownRow is one step's median latency in µs per INSERT; a reference
// step's in each group's runs is groupUs, the steps' included.
type breakdownRow struct {
	step    breakdownStep
	us      float64
	groupUs [groups]float64
}

// breakdown runs the -breakdown mode on a throwaway fsync-off server: n
// tenants the INSERTs write, and one more, fenced, whose bit none of them
// shares; rounds rotations of pgbench runs of runTime each.
func breakdown(ctx context.Context, n, rounds int, runTime time.Duration) ([]breakdownRow, error) {
	return inBreakdownDatabase(ctx, n, func(url string, _ int64) ([]breakdownRow, error) {
		return runBreakdown(ctx, url, n, rounds, runTime)
	})
}

// inBreakdownDatabase sets up the breakdown's database, with n tenants the
// INSERTs write and host, the fenced one, and returns what run returns.
func inBreakdownDatabase(ctx context.Context, n int, run func(url string, host int64) ([]breakdownRow, error)) ([]breakdownRow, error) {
	server, err := ephemeralpg.Start(ctx, ephemeralpg.Options{Fsync: false})
	if err != nil {
		return nil, fmt.Errorf("start server: %w", err)
	}
	defer server.Close(ctx)
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
	if _, err := pool.Exec(ctx, fmt.Sprintf(breakdownSetup, n)); err != nil {
		return nil, fmt.Errorf("set up: %w", err)
	}
	for _, fn := range oneQueryCandidates {
		if _, err := pool.Exec(ctx, fn); err != nil {
			return nil, fmt.Errorf("set up the one-query candidates: %w", err)
		}
	}
	// Real tables first: a step's trigger copies their arguments.
	var fences, steps []breakdownStep
	for _, st := range breakdownSteps {
		if st.table == "bd_fenced" || st.table == "bd_child" {
			fences = append(fences, st)
		} else {
			steps = append(steps, st)
		}
	}
	for _, st := range append(fences, steps...) {
		if err := breakdownTable(ctx, pool, st); err != nil {
			return nil, err
		}
	}
	// The fenced tenant: the first key past the written ones none of whose
	// marker bits (its uuid's and its key's, community_deletion_fence_bits())
	// any of them has, so that every step and candidate admits them.
	var host int64
	if err := pool.QueryRow(ctx, `SELECT k FROM generate_series($1::bigint + 1, $1::bigint + 100000) k
		WHERE community_deletion.community_deletion_fence_bits(community_deletion.community_deletion_tenant_uuid(k::text), k::text)
		      & (SELECT bit_or(community_deletion.community_deletion_fence_bits(community_deletion.community_deletion_tenant_uuid(i::text), i::text))
		         FROM generate_series(1, $1::bigint) i) = 0
		ORDER BY k LIMIT 1`, n).Scan(&host); err != nil {
		return nil, fmt.Errorf("pick the fenced tenant: %w", err)
	}
	for _, sql := range []string{"INSERT INTO bench_tenants VALUES ($1, 'fenced')", "INSERT INTO bench_projects VALUES ($1, $1)"} {
		if _, err := pool.Exec(ctx, sql, host); err != nil {
			return nil, fmt.Errorf("create the fenced tenant: %w", err)
		}
	}
	if err := fenceAnotherTenant(ctx, url, strconv.FormatInt(host, 10)); err != nil {
		return nil, fmt.Errorf("fence another tenant: %w", err)
	}
	// The candidates' constant is the marker as the fence left it.
	var marker int64
	if err := pool.QueryRow(ctx, "SELECT pg_sequence_last_value('community_deletion.community_deletion_fence_marker'::regclass)").Scan(&marker); err != nil {
		return nil, fmt.Errorf("read the marker: %w", err)
	}
	if marker == 0 {
		return nil, errors.New("the marker is 0 with another tenant fenced")
	}
	if _, err := pool.Exec(ctx, fmt.Sprintf("CREATE OR REPLACE FUNCTION bench_fenced_bits() RETURNS int8 LANGUAGE sql STABLE AS $$ SELECT %d::int8 $$", marker)); err != nil {
		return nil, fmt.Errorf("set the candidates' constant: %w", err)
	}
	return run(url, host)
}

// runBreakdown runs pgbench -r over one script of an INSERT per step, the
// statements rotated by one place from run to run so that in each round
// every statement takes every place once (a statement's place in a script
// moves its latency by a few µs), and reports each step's median over the
// runs. The fence's steps and the candidates run in scripts of their own,
// each with the reference tables: a statement pays for what the one before
// it left (the child's long way leaves the most), and a rotation keeps the
// order, so a step is compared only with the steps it ran among.
func runBreakdown(ctx context.Context, url string, n, rounds int, runTime time.Duration) ([]breakdownRow, error) {
	bin, err := ephemeralpg.ClientTool("pgbench")
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "bench-fence-breakdown")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	statement := func(st breakdownStep) string {
		return fmt.Sprintf("INSERT INTO %s (%s, body) VALUES (:k, 'hello world');", st.table, st.column)
	}
	rows := make([]breakdownRow, len(breakdownSteps))
	for g := range groups {
		var group []int
		for i, st := range breakdownSteps {
			if st.reference() || st.group() == g {
				group = append(group, i)
			}
		}
		samples := make([][]float64, len(group))
		runs := len(group) * max(1, rounds)
		for run := range runs {
			var script strings.Builder
			fmt.Fprintf(&script, "\\set k random(1, %d)\n", n)
			for j := range group {
				fmt.Fprintln(&script, statement(breakdownSteps[group[(j+run)%len(group)]]))
			}
			path := filepath.Join(dir, fmt.Sprintf("script-%d-%d.sql", g, run))
			if err := os.WriteFile(path, []byte(script.String()), 0o600); err != nil {
				return nil, err
			}
			latencies, err := pgbenchLatencies(ctx, bin, url, path, max(1, int(runTime.Seconds())))
			if err != nil {
				return nil, fmt.Errorf("pgbench run %d: %w", run+1, err)
			}
			for j, i := range group {
				l, ok := latencies[statement(breakdownSteps[i])]
				if !ok {
					return nil, fmt.Errorf("pgbench run %d reported no latency for %s", run+1, breakdownSteps[i].table)
				}
				samples[j] = append(samples[j], l)
			}
		}
		for j, i := range group {
			us := median(samples[j]) * 1000
			rows[i].step = breakdownSteps[i]
			rows[i].groupUs[g] = us
			if g == groupSteps || !breakdownSteps[i].reference() {
				rows[i].us = us
			}
		}
	}
	return rows, nil
}

// reportBreakdown prints each step's latency, what it adds to the step it
// follows (the real fence: to the last step of its branch), and what it
// adds to the empty trigger, the candidates against the reference tables
// of their own runs, which are printed again before them. The table
// without a trigger is printed for reference only: with a foreign key, its
// INSERT has measured slower than the empty trigger's.
func reportBreakdown(w io.Writer, rows []breakdownRow) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "fsync off, another tenant fenced, one-row INSERT\tµs/stmt\tadds to the row it follows, µs\tadds to the floor, µs\t")
	var us [groups]map[string]float64
	for g := range groups {
		us[g] = map[string]float64{}
		for _, r := range rows {
			if r.step.reference() || r.step.group() == g {
				us[g][r.step.table] = r.groupUs[g]
			}
		}
	}
	line := func(r breakdownRow, g int, name string) {
		v := r.groupUs[g]
		if r.step.after == "" {
			fmt.Fprintf(tw, "%s\t%.1f\t-\t-\t\n", name, v)
			return
		}
		fmt.Fprintf(tw, "%s\t%.1f\t%+.1f (%s)\t%+.1f\t\n", name, v, v-us[g][r.step.after], r.step.after, v-us[g]["bd_floor"])
	}
	for g := range groups {
		for _, r := range rows {
			switch {
			case r.step.reference() && g != groupSteps:
				line(r, g, r.step.name+", in "+groupNames[g]+" runs")
			case r.step.reference() || r.step.group() == g:
				line(r, g, r.step.name)
			}
		}
	}
	tw.Flush()
}
