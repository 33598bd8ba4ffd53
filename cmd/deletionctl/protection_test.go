package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/fixture"
)

// cliAs runs deletionctl against db connected as role.
func (db *testDB) cliAs(t *testing.T, role fixture.Role, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	fixture.RolePool(t, db.url, role) // creates the test logins
	url, err := fixture.RoleConnString(db.url, role)
	require.NoError(t, err)
	return cli(t, append([]string{"--database-url", url}, args...)...)
}

// protect, unprotect and unprotect --approve by a second operator's login;
// submit is refused in between with one line that says what to do.
func TestProtectRefusesSubmitUntilASecondOperatorClears(t *testing.T) {
	t.Parallel()
	db := setup(t)
	community, host := db.createCommunity(t)

	out := db.okAs(t, fixture.RoleOperator, "protect", "--host", host, "--by", "alice", "--reason", "legal hold")
	require.Equal(t, community.String()+" protected\n", out)
	code, _, stderr := db.cliAs(t, fixture.RoleOperator, "submit", "--host", host, "--by", "alice")
	require.Equal(t, exitRefused, code, stderr)
	requireOneLine(t, stderr, "deletionctl: refused: submit of deletion of", "deletion-protected")

	out = db.okAs(t, fixture.RoleOperator, "unprotect", "--host", host, "--by", "alice", "--reason", "hold lifted")
	require.Contains(t, out, "clear requested")
	code, _, stderr = db.cliAs(t, fixture.RoleOperator, "unprotect", "--approve", "--host", host, "--by", "carol", "--reason", "me too")
	require.Equal(t, exitRefused, code, "the requester's login cannot approve: %s", stderr)
	requireOneLine(t, stderr, "cannot also approve it")

	out = db.okAs(t, fixture.RoleApprover, "unprotect", "--approve", "--host", host, "--by", "bob", "--reason", "confirmed")
	require.Equal(t, community.String()+" unprotected\n", out)
	history := db.okAs(t, fixture.RoleOperator, "protection", "--host", host)
	lines := strings.Split(strings.TrimSpace(history), "\n")
	require.Len(t, lines, 4, history)
	require.Contains(t, lines[1], `cleared by "bob" (cd_test_approver)`)
	db.submit(t, host, "alice")
}

// approve --grace shows when the grace period ends; list and inspect too.
func TestApproveWithAGracePeriod(t *testing.T) {
	t.Parallel()
	db := setup(t)
	_, host := db.createCommunity(t)
	id := db.submit(t, host, "alice")
	db.ok(t, "inventory", "--request", id, "--store-empty")
	code, _, stderr := db.cli(t, "approve", "--request", id, "--by", "bob", "--grace", "721h")
	require.Equal(t, exitUsage, code)
	requireOneLine(t, stderr, "--grace must be between 0 and 720h0m0s")
	out := db.okAs(t, fixture.RoleApprover, "approve", "--request", id, "--by", "bob", "--grace", "48h")
	require.Contains(t, out, " grace-until ")
	require.Contains(t, db.ok(t, "list"), "GRACE UNTIL")
	require.Contains(t, db.ok(t, "inspect", "--request", id), "grace period ends")
}
