package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/fixture"
)

// cliAsOperator runs deletionctl against db as the operator login, the role
// check is documented to run as.
func (db *testDB) cliAsOperator(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	fixture.RolePool(t, db.url, fixture.RoleOperator) // creates the test logins
	url, err := fixture.RoleConnString(db.url, fixture.RoleOperator)
	require.NoError(t, err)
	return cli(t, append([]string{"--database-url", url}, args...)...)
}

// A clean database with the layout declared passes every check, as the
// operator.
func TestCheckPassesACleanDatabase(t *testing.T) {
	t.Parallel()
	db := setup(t)
	code, stdout, stderr := db.cliAsOperator(t, "check")
	require.Equal(t, exitOK, code, stderr)
	require.Empty(t, stderr)
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	require.Len(t, lines, 3, stdout)
	require.Equal(t, "ok: no catalog drift: every table holding tenant data is registered and fenced", lines[0])
	order, found := strings.CutPrefix(lines[1], "ok: the purge order is computable: ")
	require.True(t, found, lines[1])
	require.ElementsMatch(t, fixture.Tables, strings.Split(order, ", "))
	require.Equal(t, "ok: a storage layout is declared: 2 object and 0 cache template(s): media/{tenant}/, uploads/{tenant}/", lines[2])

	code, stdout, stderr = db.cliAsOperator(t, "check", "--json")
	require.Equal(t, exitOK, code, stderr)
	var rep checkReport
	require.NoError(t, json.Unmarshal([]byte(stdout), &rep))
	require.True(t, rep.OK)
	require.Equal(t, []string{}, rep.Problems)
	require.Len(t, rep.Checks, 3)
	for _, c := range rep.Checks {
		require.Equal(t, "ok", c.Status, c.Name)
		require.Equal(t, []string{}, c.Problems, c.Name)
	}
	require.Equal(t, []string{"catalog drift", "purge order", "storage layout"},
		[]string{rep.Checks[0].Name, rep.Checks[1].Name, rep.Checks[2].Name})
}

// A forgotten tenant table (a community_id uuid column, never attached)
// fails the check naming it; the purge order is skipped until it is fixed.
func TestCheckNamesAForgottenTable(t *testing.T) {
	t.Parallel()
	db := setup(t)
	_, err := db.pool.Exec(t.Context(), "CREATE TABLE forgotten_notes (id bigint PRIMARY KEY, community_id uuid NOT NULL)")
	require.NoError(t, err)

	code, stdout, stderr := db.cliAsOperator(t, "check")
	require.Equal(t, exitRefused, code, stderr)
	requireOneLine(t, stderr, "deletionctl: refused: check: 1 problem(s) (listed on stdout)")
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	require.Equal(t, []string{
		"problem: table public.forgotten_notes holds tenant data but is not registered: attach it by its community_id column with " +
			"community_deletion.attach_community_write_fence('public.forgotten_notes', 'delete', 'community_id') ('nullify' to keep its rows), " +
			"or exclude it with community_deletion.exclude_table('public.forgotten_notes', reason)",
		"skipped: purge order: fix the catalog drift first",
		"ok: a storage layout is declared: 2 object and 0 cache template(s): media/{tenant}/, uploads/{tenant}/",
	}, lines)

	code, stdout, stderr = db.cliAsOperator(t, "check", "--json")
	require.Equal(t, exitRefused, code, stderr)
	var rep checkReport
	require.NoError(t, json.Unmarshal([]byte(stdout), &rep))
	require.False(t, rep.OK)
	require.Len(t, rep.Problems, 1)
	require.Contains(t, rep.Problems[0], "table public.forgotten_notes holds tenant data but is not registered")
	require.Equal(t, checkResult{Name: "catalog drift", Status: "problem", Problems: rep.Problems}, rep.Checks[0])
	require.Equal(t, checkResult{Name: "purge order", Status: "skipped", Detail: "fix the catalog drift first", Problems: []string{}},
		rep.Checks[1])
	require.Equal(t, "ok", rep.Checks[2].Status)
	require.Contains(t, stdout, `"status": "problem"`, "snake_case keys")
}

// Without a declared layout no inventory can run: check names it.
func TestCheckNamesAMissingLayout(t *testing.T) {
	t.Parallel()
	db := setupBare(t)
	code, stdout, stderr := db.cliAsOperator(t, "check")
	require.Equal(t, exitRefused, code, stderr)
	requireOneLine(t, stderr, "deletionctl: refused: check: 1 problem(s)")
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	require.Len(t, lines, 3, stdout)
	require.True(t, strings.HasPrefix(lines[0], "ok: no catalog drift"), lines[0])
	require.True(t, strings.HasPrefix(lines[1], "ok: the purge order is computable: "), lines[1])
	require.True(t, strings.HasPrefix(lines[2], "problem: no storage layout is declared: the deployment declares, as the schema owner, where a tenant's objects are"), lines[2])

	code, stdout, stderr = db.cliAsOperator(t, "check", "--json")
	require.Equal(t, exitRefused, code, stderr)
	var rep checkReport
	require.NoError(t, json.Unmarshal([]byte(stdout), &rep))
	require.False(t, rep.OK)
	require.Len(t, rep.Problems, 1)
	require.True(t, strings.HasPrefix(rep.Problems[0], "no storage layout is declared: "), rep.Problems[0])
	require.Equal(t, "storage layout", rep.Checks[2].Name)
	require.Equal(t, "problem", rep.Checks[2].Status)
	require.Empty(t, rep.Checks[2].Detail)
}
