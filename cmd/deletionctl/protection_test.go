package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

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
	requireOneLine(t, stderr, fmt.Sprintf("deletionctl: refused: submit of %q by \"alice\": deletion of community %s refused: it is deletion-protected", host, community))
	require.NotContains(t, stderr, "lifecycle:")

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
	require.Regexp(t, `(?m)^grace period: +until `, db.ok(t, "inspect", "--request", id))

	// The executor leaves it alone until then, and says so.
	code, stdout, stderr := db.cli(t, "run", "--once", "--request", id, "--objects-dir", t.TempDir(), "--cache", "memory:")
	require.Equal(t, exitRefused, code, stderr)
	requireOneLine(t, stderr, "deletionctl: refused: run of request "+id+": not claimable: in its grace period until ",
		"; wait: it is claimable then; deletionctl abort --request "+id+" cancels it")
	recs := records(t, stdout)
	require.Equal(t, claimInGrace, recs[len(recs)-1]["status"])
	require.NotEmpty(t, recs[len(recs)-1]["until"])
	// Without --request nothing is claimable either, which is no failure:
	// the record says how many requests wait for their grace period.
	recs = records(t, db.ok(t, "run", "--once", "--objects-dir", t.TempDir(), "--cache", "memory:"))
	require.Equal(t, "nothing to claim", recs[len(recs)-1]["msg"])
	require.EqualValues(t, 1, recs[len(recs)-1]["requests_in_grace"])
	var rep struct {
		Request struct {
			Claim claimView `json:"claim"`
		} `json:"request"`
	}
	require.NoError(t, json.Unmarshal([]byte(db.ok(t, "inspect", "--request", id, "--json")), &rep))
	require.Equal(t, claimInGrace, rep.Request.Claim.Status)
	require.NotNil(t, rep.Request.Claim.Until)
	require.WithinDuration(t, time.Now().Add(48*time.Hour), *rep.Request.Claim.Until, time.Hour)
}
