package lifecycle_test

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// explainQuery returns the plan nodes of the named query in sql/queries/file,
// its parameters (@name and sqlc.arg/sqlc.narg) numbered in order of first
// use, as sqlc numbers them, and bound to args.
func (b *testBundle) explainQuery(t *testing.T, file, name string, args ...any) []map[string]any {
	t.Helper()
	body, err := os.ReadFile("../sql/queries/" + file)
	require.NoError(t, err)
	var query string
	for _, block := range strings.Split(string(body), "-- name: ")[1:] {
		if strings.HasPrefix(block, name+" ") {
			query = block
		}
	}
	require.NotEmpty(t, query, "query %s not found in %s", name, file)
	var lines []string
	for _, line := range strings.Split(query, "\n")[1:] {
		if !strings.HasPrefix(strings.TrimSpace(line), "--") {
			lines = append(lines, line)
		}
	}
	params := map[string]int{}
	param := regexp.MustCompile(`@([a-z_]+)|sqlc\.n?arg\('([a-z_]+)'\)`)
	query = param.ReplaceAllStringFunc(strings.Join(lines, "\n"), func(match string) string {
		groups := param.FindStringSubmatch(match)
		key := groups[1] + groups[2]
		if _, ok := params[key]; !ok {
			params[key] = len(params) + 1
		}
		return fmt.Sprintf("$%d", params[key])
	})
	require.Len(t, args, len(params), "arguments for %s", name)
	query = strings.TrimSuffix(strings.TrimSpace(query), ";")
	var plan []byte
	require.NoError(t, b.Pool.QueryRow(t.Context(), "EXPLAIN (FORMAT JSON) "+query, args...).Scan(&plan))
	var doc []struct {
		Plan map[string]any `json:"Plan"` //nolint:tagliatelle // the key of PostgreSQL's EXPLAIN (FORMAT JSON)
	}
	require.NoError(t, json.Unmarshal(plan, &doc))
	require.Len(t, doc, 1)
	var nodes []map[string]any
	var walk func(node map[string]any)
	walk = func(node map[string]any) {
		nodes = append(nodes, node)
		children, _ := node["Plans"].([]any)
		for _, child := range children {
			if c, ok := child.(map[string]any); ok {
				walk(c)
			}
		}
	}
	walk(doc[0].Plan)
	return nodes
}

// requireIndexUse asserts that some node of plan reads index.
func requireIndexUse(t *testing.T, plan []map[string]any, index string) {
	t.Helper()
	var seen []string
	for _, node := range plan {
		kind, _ := node["Node Type"].(string)
		name, _ := node["Index Name"].(string)
		seen = append(seen, fmt.Sprintf("%s(%s)", kind, name))
		switch kind {
		case "Index Scan", "Index Only Scan", "Bitmap Index Scan":
			if name == index {
				return
			}
		}
	}
	t.Fatalf("plan does not use %s: %s", index, strings.Join(seen, " -> "))
}

// requireNoSeqScan asserts that no node of plan scans all of relation.
func requireNoSeqScan(t *testing.T, plan []map[string]any, relation string) {
	t.Helper()
	for _, node := range plan {
		if node["Node Type"] == "Seq Scan" && node["Relation Name"] == relation {
			t.Fatalf("plan scans all of %s", relation)
		}
	}
}
