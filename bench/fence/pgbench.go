package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tombstoneworks/communitydeletion/internal/ephemeralpg"
)

// The -pgbench mode: per-statement latency on the server, from pgbench -r,
// of the unfenced, fenced and floor tables side by side in one script, so
// that each statement pays the same round trip and what differs is the
// trigger. One run reports the average latency per statement; the median
// of -pgbench-runs such averages is reported.
var (
	pgbenchMode = new(bool)
	pgbenchRuns int
	pgbenchTime time.Duration
)

// pgbenchStatements are the script's statements, by what they measure:
// unfenced, fenced and floor INSERTs (the fenced and unfenced rows' ids
// kept), then an UPDATE and a DELETE of each of those rows.
var pgbenchStatements = []struct{ workload, table, sql string }{
	{"single-row INSERT", unfencedTable, "INSERT INTO %[1]s (%[2]s, body) VALUES (%[3]s, 'hello world') RETURNING id AS u \\gset"},
	{"single-row INSERT", fencedTable, "INSERT INTO %[1]s (%[2]s, body) VALUES (%[3]s, 'hello world') RETURNING id AS f \\gset"},
	{"single-row INSERT", floorTable, "INSERT INTO %[1]s (%[2]s, body) VALUES (%[3]s, 'hello world');"},
	{"single-row UPDATE", unfencedTable, "UPDATE %[1]s SET body = 'edited' WHERE id = :u;"},
	{"single-row UPDATE", fencedTable, "UPDATE %[1]s SET body = 'edited' WHERE id = :f;"},
	{"single-row DELETE", unfencedTable, "DELETE FROM %[1]s WHERE id = :u;"},
	{"single-row DELETE", fencedTable, "DELETE FROM %[1]s WHERE id = :f;"},
}

// pgbenchKind runs the script against the database at url, whose tables
// are of kind k with n tenants the workloads write, and returns one row per
// workload (the fenced table against the unfenced one, µs per statement)
// and one for the floor.
func pgbenchKind(ctx context.Context, url, configName string, k kind, n int) ([]row, error) {
	bin, err := ephemeralpg.ClientTool("pgbench")
	if err != nil {
		return nil, err
	}
	key := ":k"
	if k.column == "organization_id" {
		key = "md5(:k::text)::uuid"
	}
	var script strings.Builder
	fmt.Fprintf(&script, "\\set k random(1, %d)\n", n)
	for _, st := range pgbenchStatements {
		fmt.Fprintf(&script, st.sql+"\n", st.table, k.column, key)
	}
	dir, err := os.MkdirTemp("", "bench-fence-pgbench")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	path := filepath.Join(dir, "script.sql")
	if err := os.WriteFile(path, []byte(script.String()), 0o600); err != nil {
		return nil, err
	}
	samples := make([][]float64, len(pgbenchStatements))
	for run := range pgbenchRuns {
		cmd := exec.CommandContext(ctx, bin, "-n", "-r", "-M", "prepared", "-T", strconv.Itoa(int(pgbenchTime.Seconds())), "-f", path, url)
		var out, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &stderr
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("pgbench run %d: %w: %s", run+1, err, strings.TrimSpace(stderr.String()))
		}
		latencies, err := parseStatementLatencies(out.String())
		if err != nil {
			return nil, fmt.Errorf("pgbench run %d: %w", run+1, err)
		}
		for i, st := range pgbenchStatements {
			// pgbench prints a statement without its \gset.
			l, ok := latencies[strings.TrimSpace(strings.TrimSuffix(fmt.Sprintf(st.sql, st.table, k.column, key), `\gset`))]
			if !ok {
				return nil, fmt.Errorf("pgbench run %d reported no latency for %s on %s", run+1, st.workload, st.table)
			}
			samples[i] = append(samples[i], l)
		}
	}
	us := make([]float64, len(samples))
	for i := range samples {
		us[i] = median(samples[i]) * 1000
	}
	c := configName + ", " + k.name
	return []row{
		{config: c, workload: "single-row INSERT", unit: "µs/stmt", unfenced: us[0], fenced: us[1]},
		{config: c, workload: "floor: an empty trigger", unit: "µs/stmt", unfenced: us[0], fenced: us[2]},
		{config: c, workload: "single-row UPDATE", unit: "µs/stmt", unfenced: us[3], fenced: us[4]},
		{config: c, workload: "single-row DELETE", unit: "µs/stmt", unfenced: us[5], fenced: us[6]},
	}, nil
}

// parseStatementLatencies reads pgbench -r's per-statement section: each
// statement's average latency in milliseconds, by its text.
func parseStatementLatencies(out string) (map[string]float64, error) {
	latencies := map[string]float64{}
	in := false
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "statement latencies in milliseconds") {
			in = true
			continue
		}
		if !in {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) < 3 {
			continue
		}
		l, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			continue
		}
		// PostgreSQL 15 prints the failures beside the latency.
		rest := strings.TrimSpace(line)
		rest = strings.TrimSpace(strings.TrimPrefix(rest, fields[0]))
		if _, err := strconv.Atoi(fields[1]); err == nil {
			rest = strings.TrimSpace(strings.TrimPrefix(rest, fields[1]))
		}
		latencies[rest] = l
	}
	if len(latencies) == 0 {
		return nil, fmt.Errorf("no per-statement latencies in pgbench's output: %q", out)
	}
	return latencies, nil
}

// reportPgbench prints the -pgbench rows: each workload's latency on the
// unfenced and the fenced table (or the floor's empty trigger) and what the
// trigger adds, in µs per statement.
func reportPgbench(w io.Writer, rows []row) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "config\tworkload\tunfenced µs\tfenced µs\tadds µs\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%.1f\t%.1f\t%+.1f\t\n", r.config, r.workload, r.unfenced, r.fenced, r.fenced-r.unfenced)
	}
	tw.Flush()
}
