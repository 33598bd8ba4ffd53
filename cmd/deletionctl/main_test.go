package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/executor"
	"github.com/tombstoneworks/communitydeletion/internal/ephemeralpg"
	"github.com/tombstoneworks/communitydeletion/internal/fixture"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// server is the throwaway PostgreSQL shared by the package's tests; each
// database test gets its own database cloned from a migrated template.
var server *ephemeralpg.Server

func TestMain(m *testing.M) {
	// A prepared transaction holds a lock in the health test.
	ephemeralpg.RunTests(m, ephemeralpg.Options{ExtraConfig: map[string]string{"max_prepared_transactions": "4"}}, &server)
}

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

// cli runs deletionctl in-process and returns its exit code and output.
func cli(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(t.Context(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// requireOneLine checks that stderr is exactly one line containing every
// one of want.
func requireOneLine(t *testing.T, stderr string, want ...string) {
	t.Helper()
	require.True(t, strings.HasSuffix(stderr, "\n"), "stderr %q", stderr)
	require.Equal(t, 1, strings.Count(stderr, "\n"), "stderr %q", stderr)
	for _, w := range want {
		require.Contains(t, stderr, w)
	}
}

func TestParseArgs(t *testing.T) {
	t.Parallel()
	id := uuid.New()
	stage := lifecycle.StageApproved
	yes, no := true, false
	cursor := lifecycle.Cursor{CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 123456000, time.UTC), ID: id}
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want config
	}{
		{"submit", []string{"submit", "--host", "a.example", "--by", "alice", "--reason", "asked"}, nil,
			config{command: "submit", host: "a.example", by: "alice", reason: "asked", limit: 50}},
		{"url from env", []string{"leases"}, map[string]string{"DATABASE_URL": "postgres://env/db"},
			config{command: "leases", databaseURL: "postgres://env/db", limit: 50}},
		{"flag beats env, before the command", []string{"--database-url", "postgres://flag/db", "leases", "--reap", "10"},
			map[string]string{"DATABASE_URL": "postgres://env/db"},
			config{command: "leases", databaseURL: "postgres://flag/db", reap: 10, limit: 50}},
		{"inventory prefixes", []string{"inventory", "--request", id.String(), "--prefix", "b/", "-prefix=a/"}, nil,
			config{command: "inventory", requestID: id, prefixes: []string{"b/", "a/"}, limit: 50}},
		{"approve", []string{"approve", "--request=" + id.String(), "--by", "bob", "--note", "ok"}, nil,
			config{command: "approve", requestID: id, by: "bob", note: "ok", limit: 50}},
		{"list everything", []string{"list", "--stage", "approved", "--blocked", "--limit", "2", "--after", encodeCursor(cursor), "--json"}, nil,
			config{command: "list", stage: &stage, blocked: &yes, limit: 2, after: &cursor, json: true}},
		{"list unblocked", []string{"list", "--blocked=false"}, nil,
			config{command: "list", blocked: &no, limit: 50}},
		{"inspect", []string{"inspect", "--json", "--request", id.String()}, nil,
			config{command: "inspect", requestID: id, json: true, limit: 50}},
		{"abort", []string{"abort", "--request", id.String(), "--by", "carol", "--reason", "mistake"}, nil,
			config{command: "abort", requestID: id, by: "carol", reason: "mistake", limit: 50}},
		{"unblock", []string{"unblock", "--request", id.String(), "--by", "carol", "--reason", "fixed"}, nil,
			config{command: "unblock", requestID: id, by: "carol", reason: "fixed", limit: 50}},
		{"inventory store empty", []string{"inventory", "--request", id.String(), "--store-empty"}, nil,
			config{command: "inventory", requestID: id, storeEmpty: true, limit: 50}},
		{"inventory objects dir", []string{"inventory", "--request", id.String(), "--objects-dir", "/srv/objects/"}, nil,
			config{command: "inventory", requestID: id, objects: "file:///srv/objects", limit: 50}},
		{"inventory objects dir with a space", []string{"inventory", "--request", id.String(), "--objects-dir", "/srv/a b"}, nil,
			config{command: "inventory", requestID: id, objects: "file:///srv/a%20b", limit: 50}},
		{"inventory objects from env", []string{"inventory", "--request", id.String()}, map[string]string{"DELETIONCTL_OBJECTS": "s3://media/t/"},
			config{command: "inventory", requestID: id, objects: "s3://media/t/", limit: 50}},
		{"inventory ignores the run-only variables", []string{"inventory", "--request", id.String()},
			map[string]string{"DELETIONCTL_CACHE": "memory:", "DELETIONCTL_METRICS_ADDR": ":1", "DELETIONCTL_LOG_LEVEL": "debug"},
			config{command: "inventory", requestID: id, limit: 50}},
		{"run", []string{"run", "--objects-dir", "/srv/objects", "--cache", "memory:"}, nil,
			config{command: "run", objects: "file:///srv/objects", cache: "memory:", limit: 50}},
		{"run once", []string{"run", "--once", "--request", id.String(), "--owner", " ops-1 ", "--objects-dir=/o", "--cache=memory:",
			"--lease", "90s", "--chunk-size", "500", "--nice-ratio", "1.5"}, nil,
			config{command: "run", requestID: id, once: true, owner: "ops-1", objects: "file:///o", cache: "memory:", lease: 90 * time.Second, chunkSize: 500,
				niceRatio: 1.5, limit: 50}},
		{"run from env", []string{"run"}, map[string]string{
			"DELETIONCTL_OBJECTS": "s3://media/t/?region=eu-west-1", "DELETIONCTL_CACHE": "redis://:pw@r:6379/1?pattern=app:{community}:*",
			"DELETIONCTL_METRICS_ADDR": ":9464", "DELETIONCTL_LOG_LEVEL": "Warn", "DELETIONCTL_LOG_FORMAT": "JSON"},
			config{command: "run", objects: "s3://media/t/?region=eu-west-1", cache: "redis://:pw@r:6379/1?pattern=app:{community}:*",
				metricsAddr: ":9464", logLevel: "warn", logFormat: "json", limit: 50}},
		{"run flags beat env", []string{"run", "--objects", "file:///a", "--cache", "memory:", "--metrics-addr", "127.0.0.1:0", "--log-level", "debug", "--log-format", "text"},
			map[string]string{"DELETIONCTL_OBJECTS": "s3://media/t/", "DELETIONCTL_CACHE": "redis://r:6379?pattern=a:{community}",
				"DELETIONCTL_METRICS_ADDR": ":9464", "DELETIONCTL_LOG_LEVEL": "warn", "DELETIONCTL_LOG_FORMAT": "json"},
			config{command: "run", objects: "file:///a", cache: "memory:", metricsAddr: "127.0.0.1:0", logLevel: "debug", logFormat: "text", limit: 50}},
		{"objects-dir beats env", []string{"run", "--objects-dir", "/a"}, map[string]string{"DELETIONCTL_OBJECTS": "s3://media/t/", "DELETIONCTL_CACHE": "memory:"},
			config{command: "run", objects: "file:///a", cache: "memory:", limit: 50}},
		{"health", []string{"health", "--json"}, nil, config{command: "health", json: true, limit: 50}},
		{"check", []string{"check", "--json"}, nil, config{command: "check", json: true, limit: 50}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := parseArgs(tc.args, env(tc.env))
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

// TestUsageErrors runs malformed command lines through run, with no
// database anywhere: each exits 2 with one line on stderr.
func TestUsageErrors(t *testing.T) {
	t.Parallel()
	id := uuid.NewString()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "missing command"},
		{[]string{"destroy"}, `unknown command "destroy"`},
		{[]string{"run"}, "run needs --objects URL"},
		{[]string{"run", "--once", "--cache", "memory:"}, "run needs --objects URL (s3://BUCKET/ROOT/?…, file:///DIR; or --objects-dir DIR, or $DELETIONCTL_OBJECTS)"},
		{[]string{"run", "--objects-dir", "/tmp"}, "run needs --cache URL (redis://HOST:PORT/DB?pattern=…, or memory: for a service without a cache; or $DELETIONCTL_CACHE)"},
		{[]string{"run", "--objects-dir", "", "--cache", "memory:"}, "run: --objects-dir must not be empty"},
		{[]string{"run", "--objects", "", "--cache", "memory:"}, "run: --objects: parse objects URL: no scheme"},
		{[]string{"run", "--objects", "file:///a", "--objects-dir", "/a", "--cache", "memory:"}, "give --objects or --objects-dir, not both"},
		{[]string{"run", "--objects", "ftp://host/x", "--cache", "memory:"}, `run: --objects: parse objects URL: scheme "ftp" is not s3 or file`},
		{[]string{"run", "--objects", "s3://AKIA:supersecret@media/", "--cache", "memory:"}, "has user information"},
		{[]string{"run", "--objects-dir", "/tmp", "--cache", "memory"}, "run: --cache: parse cache URL: no scheme"},
		{[]string{"run", "--objects-dir", "/tmp", "--cache", "redis://:supersecret@h:x?pattern=a:{community}"}, "run: --cache: parse cache URL: rediscache: invalid URL"},
		{[]string{"run", "--objects-dir", "/tmp", "--cache", "redis://h:6379"}, "pattern"},
		{[]string{"run", "--objects-dir", "/tmp", "--cache", "memory:", "--metrics-addr", "9464"}, `--metrics-addr must be HOST:PORT (e.g. :9464), got "9464"`},
		{[]string{"run", "--objects-dir", "/tmp", "--cache", "memory:", "--log-level", "loud"}, `--log-level must be debug, info, warn or error, got "loud"`},
		{[]string{"run", "--objects-dir", "/tmp", "--cache", "memory:", "--log-format", "xml"}, `--log-format must be auto, json or text, got "xml"`},
		{[]string{"run", "--objects-dir", "/tmp", "--cache", "memory:", "--lease", "0s"}, "--lease must be positive"},
		{[]string{"run", "--objects-dir", "/tmp", "--cache", "memory:", "--chunk-size", "0"}, "--chunk-size must be between 1 and 10000, got 0"},
		{[]string{"run", "--objects-dir", "/tmp", "--cache", "memory:", "--nice-ratio", "-1"}, "run: --nice-ratio must be a finite number, 0 or more (0: no sleep between purge batches), got -1"},
		{[]string{"run", "--objects-dir", "/tmp", "--cache", "memory:", "--nice-ratio", "NaN"}, "--nice-ratio must be a finite number, 0 or more (0: no sleep between purge batches), got NaN"},
		{[]string{"run", "--objects-dir", "/tmp", "--cache", "memory:", "--nice-ratio", "+Inf"}, "got +Inf"},
		{[]string{"run", "--objects-dir", "/tmp", "--cache", "memory:", "--nice-ratio", "slow"}, "nice-ratio"},
		{[]string{"run", "--objects-dir", "/tmp", "--cache", "memory:", "--owner", " "}, "--owner must not be empty"},
		{[]string{"run", "--objects-dir", "/tmp", "--cache", "memory:", "--json", "--log-format", "text"}, `run: --json writes the log as JSON lines, but --log-format is "text"`},
		{[]string{"plan"}, "plan needs a request (REQUEST or --request ID) or --host HOST|ID, not both"},
		{[]string{"plan", id, "--host", "a.example"}, "plan needs a request (REQUEST or --request ID) or --host HOST|ID, not both"},
		{[]string{"plan", id, "--request", id}, "plan: give the request once, as REQUEST or as --request ID"},
		{[]string{"plan", "not-a-uuid"}, `plan: REQUEST must be a request uuid, got "not-a-uuid"`},
		{[]string{"plan", id, id}, "plan takes one request id"},
		{[]string{"plan", "--host", " "}, "plan: --host must not be empty"},
		{[]string{"plan", id, "--cache", "memory:"}, "plan does not take --cache"},
		{[]string{"receipt", "show"}, "receipt show needs a request: REQUEST or --request ID"},
		{[]string{"receipt", "show", id, "--request", id}, "receipt show: give the request once"},
		{[]string{"inventory", "--request", id, "--cache", "memory:"}, "inventory does not take --cache"},
		{[]string{"inventory", "--request", id, "--objects", "memory:"}, `scheme "memory" is not s3 or file`},
		{[]string{"health", "--request", id}, "health does not take --request"},
		{[]string{"check", "--request", id}, "check does not take --request"},
		{[]string{"inspect", "--request", id, "--objects-dir", "/tmp"}, "inspect does not take --objects-dir"},
		{[]string{"list", "extra"}, `list takes no arguments, got "extra"`},
		{[]string{"submit", "--by", "alice"}, "submit needs --host"},
		{[]string{"submit", "--host", "a.example"}, "submit needs --by"},
		{[]string{"submit", "--host", "a.example", "--by", "  "}, "submit: --by must not be empty"},
		{[]string{"inventory"}, "inventory needs --request"},
		{[]string{"inventory", "--request", id, "--prefix", ""}, "--prefix must not be empty"},
		{[]string{"inventory", "--request", id, "--store-empty", "--objects", "file:///srv"}, "--store-empty asserts there is no object store to list, but one is given"},
		{[]string{"approve", "--request", id, "--by", "bob", "--store-empty"}, "approve does not take --store-empty"},
		{[]string{"approve", "--request", id}, "approve needs --by"},
		{[]string{"abort", "--request", id, "--by", "carol"}, "abort needs --reason"},
		{[]string{"unblock", "--request", id, "--reason", "r"}, "unblock needs --by"},
		{[]string{"inspect", "--request", "not-a-uuid"}, `--request must be a request uuid, got "not-a-uuid"`},
		{[]string{"list", "--stage", "vaporized"}, `unknown stage "vaporized"; the stages are submitted, inventoried, approved, fenced, drained, bindings_removed, postgres_purged, cache_purged, logically_verified, retention_pending, aborted`},
		{[]string{"destroy"}, "the commands are submit, plan, inventory"},
		{[]string{"list", "--limit", "0"}, "--limit must be between 1 and 1000, got 0"},
		{[]string{"list", "--limit", "1001"}, "--limit must be between 1 and 1000, got 1001"},
		{[]string{"list", "--limit", "many"}, `invalid value "many" for flag -limit`},
		{[]string{"list", "--after", "%%%"}, "malformed cursor"},
		{[]string{"list", "--after", "bm90LWEtY3Vyc29y"}, "malformed cursor"},
		{[]string{"list", "--request", id}, "list does not take --request"},
		{[]string{"leases", "--reap", "0"}, "--reap must be between 1 and 10000, got 0"},
		{[]string{"leases", "--reap", "10001"}, "--reap must be between 1 and 10000, got 10001"},
		{[]string{"leases", "--bogus"}, "flag provided but not defined: -bogus"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := cli(t, tc.args...)
			require.Equal(t, exitUsage, code, stderr)
			require.Empty(t, stdout)
			requireOneLine(t, stderr, "deletionctl: ", tc.want, "deletionctl -h")
			require.NotContains(t, stderr, "supersecret")
		})
	}
}

func TestHelp(t *testing.T) {
	t.Parallel()
	approve, _ := spec("approve")
	show, _ := spec("receipt show")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-h"}, usage}, {[]string{"--help"}, usage}, {[]string{"help"}, usage},
		{[]string{"approve", "-h"}, approve.help()}, {[]string{"help", "approve"}, approve.help()},
		{[]string{"approve", "--request", "x", "--help"}, approve.help()},
		{[]string{"receipt", "show", "--help"}, show.help()}, {[]string{"help", "receipt", "show"}, show.help()},
		{[]string{"receipt", "-h"}, receiptHelp()}, {[]string{"help", "nosuch"}, usage},
	} {
		code, stdout, stderr := cli(t, tc.args...)
		require.Equal(t, exitOK, code, "%q", tc.args)
		require.Equal(t, tc.want, stdout, "%q", tc.args)
		require.Empty(t, stderr)
	}
	require.Less(t, strings.Count(usage, "\n"), 60, "the whole usage fits in a screen")
}

func TestExitCode(t *testing.T) {
	t.Parallel()
	require.Equal(t, exitOK, exitCode(nil))
	require.Equal(t, exitFailure, exitCode(errors.New("boom")))
	require.Equal(t, exitFailure, exitCode(context.Canceled))
	require.Equal(t, exitUsage, exitCode(fmt.Errorf("x: %w", usagef("bad"))))
	require.Equal(t, exitRefused, exitCode(fmt.Errorf("x: %w", lifecycle.ErrRefused)))
	require.Equal(t, exitRefused, exitCode(fmt.Errorf("x: %w", lifecycle.ErrAccessDenied)))
	require.Equal(t, exitRefused, exitCode(&lifecycle.StaleLeaseError{}))
	require.Equal(t, exitRefused, exitCode(&lifecycle.ServingWritesNotDrainedError{}))
	require.Equal(t, exitNotFound, exitCode(fmt.Errorf("x: %w", lifecycle.ErrNotFound)))
	require.Equal(t, exitInvalidInput, exitCode(fmt.Errorf("x: %w", lifecycle.ErrInvalidInput)))
	require.Equal(t, exitRefused, exitCode(fmt.Errorf("x: %w: %w", executor.ErrRetryScheduled, errors.New("boom"))))
	require.Equal(t, exitRefused, exitCode(fmt.Errorf("x: %w: %w", executor.ErrRetryScheduled, lifecycle.ErrInvalidInput)))
	require.Equal(t, exitRefused, exitCode(fmt.Errorf("x: %w: %w", executor.ErrBlocked, lifecycle.ErrRefused)))
}

func TestCursorRoundTrip(t *testing.T) {
	t.Parallel()
	c := lifecycle.Cursor{CreatedAt: time.Date(2026, 11, 29, 23, 59, 1, 999999000, time.FixedZone("x", 3600)), ID: uuid.New()}
	s := encodeCursor(c)
	require.NotContains(t, s, "|")
	got, err := decodeCursor(s)
	require.NoError(t, err)
	require.True(t, c.CreatedAt.Equal(got.CreatedAt))
	require.Equal(t, c.ID, got.ID)
}

// testDB is one test's migrated database with the fixture tenant tables.
type testDB struct {
	url  string
	pool *pgxpool.Pool
}

// setup returns a test database whose owner declared the fixture's storage
// layout (media/{tenant}/ and uploads/{tenant}/).
func setup(t *testing.T) *testDB {
	t.Helper()
	db := setupBare(t)
	require.NoError(t, fixture.DeclareLayout(t.Context(), db.pool))
	return db
}

// setupBare returns a test database with no storage layout declared.
func setupBare(t *testing.T) *testDB {
	t.Helper()
	url, pool := fixture.NewTestPool(t, server)
	return &testDB{url: url, pool: pool}
}

// createCommunity inserts an active community and returns its id and host.
func (db *testDB) createCommunity(t *testing.T) (uuid.UUID, string) {
	t.Helper()
	id := uuid.New()
	host := fmt.Sprintf("c-%s.example", id)
	_, err := db.pool.Exec(t.Context(), "INSERT INTO communities (id, host, signing_key, icon) VALUES ($1, $2, 'key', 'icon.png')", id, host)
	require.NoError(t, err)
	return id, host
}

// cli runs deletionctl against db.
func (db *testDB) cli(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return cli(t, append([]string{"--database-url", db.url}, args...)...)
}

// okAs runs deletionctl against db connected as role, requires success and
// returns stdout.
func (db *testDB) okAs(t *testing.T, role fixture.Role, args ...string) string {
	t.Helper()
	fixture.RolePool(t, db.url, role) // creates the test logins
	url, err := fixture.RoleConnString(db.url, role)
	require.NoError(t, err)
	code, stdout, stderr := cli(t, append([]string{"--database-url", url}, args...)...)
	require.Equal(t, 0, code, "deletionctl %v as %s: %s", args, role, stderr)
	return stdout
}

// ok runs deletionctl against db, requires success and returns stdout.
func (db *testDB) ok(t *testing.T, args ...string) string {
	t.Helper()
	code, stdout, stderr := db.cli(t, args...)
	require.Equal(t, exitOK, code, "%q: %s", args, stderr)
	require.Empty(t, stderr)
	return stdout
}

// submit submits the deletion of host by requester and returns the id.
func (db *testDB) submit(t *testing.T, host, requester string) string {
	t.Helper()
	fields := strings.Fields(db.ok(t, "submit", "--host", host, "--by", requester, "--reason", "test"))
	require.Len(t, fields, 2)
	require.Equal(t, "submitted", fields[1])
	_, err := uuid.Parse(fields[0])
	require.NoError(t, err)
	return fields[0]
}

func TestSubmitInventoryApproveInspectAbort(t *testing.T) {
	t.Parallel()
	db := setup(t)
	community, host := db.createCommunity(t)
	id := db.submit(t, host, "alice")

	out := db.ok(t, "inventory", "--request", id, "--store-empty")
	fields := strings.Fields(out)
	require.Len(t, fields, 3, out)
	require.Equal(t, []string{id, "inventoried"}, fields[:2])
	digest := fields[2]
	require.Regexp(t, "^[0-9a-f]{64}$", digest)

	// Inventorying again before approval replaces the same inventory.
	require.Equal(t, out, db.ok(t, "inventory", "--request", id, "--store-empty"))

	// The requester cannot approve their own request.
	code, stdout, stderr := db.cli(t, "approve", "--request", id, "--by", "alice")
	require.Equal(t, exitRefused, code, stderr)
	require.Empty(t, stdout)
	requireOneLine(t, stderr, "deletionctl: refused: approve of request "+id+` by "alice": "alice" requested deletion `+id+" and cannot also approve it; "+
		"a second operator, from another login than the submitter's, approves")
	require.NotContains(t, stderr, "lifecycle:", "no wrapped context")

	out = db.okAs(t, fixture.RoleApprover, "approve", "--request", id, "--by", "bob", "--note", "reviewed")
	require.Equal(t, id+" approved "+digest+"\n", out)

	var rep struct {
		Request struct {
			ID              string `json:"id"`
			CommunityID     string `json:"community_id"`
			CommunityHost   string `json:"community_host"`
			Stage           string `json:"stage"`
			Blocked         bool   `json:"blocked"`
			RequestedBy     string `json:"requested_by"`
			InventoryDigest string `json:"inventory_digest"`
			Inventory       struct {
				Storage lifecycle.StorageManifest `json:"storage"`
			} `json:"inventory"`
		} `json:"request"`
		Approval *struct {
			ApprovedBy      string `json:"approved_by"`
			Note            string `json:"note"`
			InventoryDigest string `json:"inventory_digest"`
		} `json:"approval"`
		Checkpoints []json.RawMessage `json:"checkpoints"`
		Protection  *protectionView   `json:"protection"`
		Receipt     *receiptSummary   `json:"receipt"`
	}
	require.NoError(t, json.Unmarshal([]byte(db.ok(t, "inspect", "--request", id, "--json")), &rep))
	require.Equal(t, id, rep.Request.ID)
	require.Equal(t, community.String(), rep.Request.CommunityID)
	require.Equal(t, host, rep.Request.CommunityHost)
	require.Equal(t, "approved", rep.Request.Stage)
	require.False(t, rep.Request.Blocked)
	require.Equal(t, "alice", rep.Request.RequestedBy)
	require.Equal(t, digest, rep.Request.InventoryDigest)
	require.Equal(t, []lifecycle.PrefixManifest{
		{Prefix: "media/" + community.String() + "/", KeysDigest: lifecycle.EmptyKeysDigest},
		{Prefix: "uploads/" + community.String() + "/", KeysDigest: lifecycle.EmptyKeysDigest},
	}, rep.Request.Inventory.Storage.Prefixes)
	require.NotNil(t, rep.Approval)
	require.Equal(t, "bob", rep.Approval.ApprovedBy)
	require.Equal(t, "reviewed", rep.Approval.Note)
	require.Equal(t, digest, rep.Approval.InventoryDigest)
	require.NotNil(t, rep.Checkpoints)
	require.NotNil(t, rep.Protection)
	require.False(t, rep.Protection.Protected)
	require.Nil(t, rep.Receipt, "no receipt before the deletion completes")

	// The plain inspection names the same things.
	out = db.ok(t, "inspect", "--request", id)
	require.Contains(t, out, "stage:")
	require.Contains(t, out, "approved")
	require.Contains(t, out, `"bob"`)
	require.Contains(t, out, digest)
	require.Regexp(t, `(?m)^submitted by: +"alice" at `, out)
	require.Regexp(t, `(?m)^claim: +claimable: claimable now$`, out)
	require.Regexp(t, `(?m)^grace period: +none$`, out)
	require.Regexp(t, `(?m)^protection: +unprotected$`, out)
	require.Regexp(t, `(?m)^receipt: +none yet: it is written when the deletion completes$`, out)
	require.NotContains(t, out, "chunks deleted:", "the progress says it, once")

	out = db.ok(t, "abort", "--request", id, "--by", "carol", "--reason", "customer changed their mind")
	require.Equal(t, id+" aborted\n", out)
	code, stdout, stderr = db.cli(t, "abort", "--request", id, "--by", "carol", "--reason", "again")
	require.Equal(t, exitRefused, code, stderr)
	require.Empty(t, stdout)
	requireOneLine(t, stderr, "deletionctl: refused: abort of request "+id+` by "carol": deletion `+id+" is aborted and can no longer be aborted; only a request before the purge")

	require.NoError(t, json.Unmarshal([]byte(db.ok(t, "inspect", "--request", id, "--json")), &rep))
	require.Equal(t, "aborted", rep.Request.Stage)
	require.NotEmpty(t, rep.Checkpoints, "the abort leaves an audit checkpoint")
}

// requireRefusedAs runs deletionctl as role and requires a refusal (exit 3)
// on one line containing every want, and that the request stays at stage.
func (db *testDB) requireRefusedAs(t *testing.T, role fixture.Role, id, stage string, args []string, want ...string) {
	t.Helper()
	code, stdout, stderr := db.cliAs(t, role, args...)
	require.Equal(t, exitRefused, code, stderr)
	require.Empty(t, stdout)
	requireOneLine(t, stderr, append([]string{"deletionctl: refused: inventory of request " + id}, want...)...)
	got, _ := db.inspectStage(t, id)
	require.Equal(t, stage, got, "a refusal changes nothing")
}

// inventoryPrefixes returns the prefixes of request id's frozen inventory.
func (db *testDB) inventoryPrefixes(t *testing.T, id string) []lifecycle.PrefixManifest {
	t.Helper()
	var rep struct {
		Request struct {
			Inventory struct {
				Storage lifecycle.StorageManifest `json:"storage"`
			} `json:"inventory"`
		} `json:"request"`
	}
	require.NoError(t, json.Unmarshal([]byte(db.ok(t, "inspect", "--request", id, "--json")), &rep))
	return rep.Request.Inventory.Storage.Prefixes
}

// Without a declared layout, inventory refuses and says how to declare one:
// there is no default prefix.
func TestInventoryWithoutALayout(t *testing.T) {
	t.Parallel()
	db := setupBare(t)
	_, host := db.createCommunity(t)
	id := db.submit(t, host, "alice")
	dir := t.TempDir()
	for _, args := range [][]string{
		{"inventory", "--request", id, "--store-empty"},
		{"inventory", "--request", id, "--objects-dir", dir},
	} {
		db.requireRefusedAs(t, fixture.RoleOperator, id, "submitted", args,
			"no storage layout is declared: the deployment declares, as the schema owner, where a tenant's objects are")
	}
}

// inventory freezes every declared prefix: listed in the object store, or
// asserted empty only with --store-empty; a --prefix outside the layout, or
// one that leaves a declared prefix out, is refused.
func TestInventoryLayout(t *testing.T) {
	t.Parallel()
	db := setup(t)
	community, host := db.createCommunity(t)
	id := db.submit(t, host, "alice")
	media, uploads := "media/"+community.String()+"/", "uploads/"+community.String()+"/"

	db.requireRefusedAs(t, fixture.RoleOperator, id, "submitted", []string{"inventory", "--request", id},
		"no object store to list the declared prefixes", media, uploads, "give --objects URL or --objects-dir DIR, or --store-empty")
	db.requireRefusedAs(t, fixture.RoleOperator, id, "submitted", []string{"inventory", "--request", id, "--store-empty", "--prefix", "uploads/", "--prefix", media},
		`--prefix "uploads/" is not a prefix of the declared storage layout`, "omit --prefix")
	db.requireRefusedAs(t, fixture.RoleOperator, id, "submitted", []string{"inventory", "--request", id, "--store-empty", "--prefix", media},
		"--prefix leaves out the declared prefix", uploads)
	code, _, stderr := db.cliAs(t, fixture.RoleOperator, "inventory", "--request", id, "--store-empty", "--objects-dir", t.TempDir())
	require.Equal(t, exitUsage, code, stderr)
	requireOneLine(t, stderr, "--store-empty asserts there is no object store to list")

	// With the store, every declared prefix is listed, the undeclared
	// neighbour's files are not.
	dir, _ := writeFiles(t, community, 3)
	upload := filepath.Join(dir, "uploads", community.String(), "a.txt")
	require.NoError(t, os.MkdirAll(filepath.Dir(upload), 0o755))
	require.NoError(t, os.WriteFile(upload, []byte("upload"), 0o644))
	out := db.okAs(t, fixture.RoleOperator, "inventory", "--request", id, "--objects-dir", dir)
	require.Contains(t, out, id+" inventoried ")
	got := db.inventoryPrefixes(t, id)
	require.Len(t, got, 2)
	require.Equal(t, media, got[0].Prefix)
	require.EqualValues(t, 3, got[0].ObjectCount)
	require.Equal(t, uploads, got[1].Prefix)
	require.EqualValues(t, 1, got[1].ObjectCount)

	// Re-inventory before approval replaces the inventory; --prefix naming
	// exactly the declared prefixes is accepted.
	again := db.okAs(t, fixture.RoleOperator, "inventory", "--request", id, "--store-empty", "--prefix", uploads, "--prefix", media)
	require.NotEqual(t, out, again)
	require.Equal(t, []lifecycle.PrefixManifest{
		{Prefix: media, KeysDigest: lifecycle.EmptyKeysDigest},
		{Prefix: uploads, KeysDigest: lifecycle.EmptyKeysDigest},
	}, db.inventoryPrefixes(t, id))
	again = db.okAs(t, fixture.RoleOperator, "inventory", "--request", id, "--objects-dir", dir)
	require.Equal(t, out, again, "the same storage freezes the same digest")

	digest := strings.Fields(again)[2]
	require.Equal(t, id+" approved "+digest+"\n", db.okAs(t, fixture.RoleApprover, "approve", "--request", id, "--by", "bob"))
	db.requireRefusedAs(t, fixture.RoleOperator, id, "approved", []string{"inventory", "--request", id, "--objects-dir", dir},
		"the request is approved", "abort it and submit a new one")
}

// submit of a community that does not exist is not found (4); of one with
// an open request, refused (3); the same submission again returns the same
// request, and one with another reason is refused, since the request keeps
// its own.
func TestSubmitRefusals(t *testing.T) {
	t.Parallel()
	db := setup(t)
	for _, host := range []string{"nowhere.example", uuid.NewString()} {
		code, stdout, stderr := db.cli(t, "submit", "--host", host, "--by", "alice")
		require.Equal(t, exitNotFound, code, stderr)
		require.Empty(t, stdout)
		requireOneLine(t, stderr, fmt.Sprintf(`deletionctl: not found: submit of %q by "alice": no community has id or host %q`, host, host))
	}

	_, host := db.createCommunity(t)
	id := db.submit(t, host, "alice")
	require.Equal(t, id+" submitted\n", db.ok(t, "submit", "--host", host, "--by", "alice", "--reason", "  test "), "the same submission again")
	code, stdout, stderr := db.cli(t, "submit", "--host", host, "--by", "alice", "--reason", "another reason")
	require.Equal(t, exitRefused, code, stderr)
	require.Empty(t, stdout)
	requireOneLine(t, stderr, fmt.Sprintf(`deletionctl: refused: submit of %q by "alice": request %s is already submitted by "alice" with the reason "test", which it keeps: yours was not recorded`, host, id),
		"abort it (deletionctl abort --request "+id+")")
	var rep struct {
		Request struct {
			Reason string `json:"reason"`
		} `json:"request"`
	}
	require.NoError(t, json.Unmarshal([]byte(db.ok(t, "inspect", "--request", id, "--json")), &rep))
	require.Equal(t, "test", rep.Request.Reason)

	code, _, stderr = db.cli(t, "submit", "--host", host, "--by", "bob")
	require.Equal(t, exitRefused, code, stderr)
	requireOneLine(t, stderr, fmt.Sprintf(`deletionctl: refused: submit of %q by "bob": community `, host), "already has an open deletion request; deletionctl list shows")
	require.NotContains(t, stderr, "lifecycle:")
}

func TestList(t *testing.T) {
	t.Parallel()
	db := setup(t)
	var ids []string
	for range 3 {
		_, host := db.createCommunity(t)
		ids = append(ids, db.submit(t, host, "alice"))
	}
	// Newest first.
	want := []string{ids[2], ids[1], ids[0]}

	// Plain table, two pages.
	out := db.ok(t, "list", "--limit", "2")
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	require.Len(t, lines, 4, out)
	require.Equal(t, []string{"ID", "HOST", "STAGE", "BLOCKED", "CREATED", "AT", "REQUESTED", "BY", "GRACE", "UNTIL", "CLAIM"}, strings.Fields(lines[0]))
	col := strings.Index(lines[0], "STAGE")
	for i, line := range lines[1:3] {
		f := strings.Fields(line)
		require.Equal(t, want[i], f[0])
		require.Equal(t, "submitted", f[2])
		require.Equal(t, "false", f[3])
		require.Equal(t, `"alice"`, f[5])
		require.Equal(t, "-", f[6], "no grace period before approval")
		require.Equal(t, claimNotInventoried, f[7], "why the executor leaves it")
		require.Equal(t, "submitted", line[col:col+len("submitted")], "aligned columns")
	}
	require.True(t, strings.HasPrefix(lines[3], "next: "), lines[3])
	next := strings.TrimPrefix(lines[3], "next: ")
	out = db.ok(t, "list", "--limit", "2", "--after", next)
	lines = strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	require.Len(t, lines, 2, out)
	require.Equal(t, want[2], strings.Fields(lines[1])[0])

	// JSON, two pages.
	type page struct {
		Requests []struct {
			ID    string `json:"id"`
			Stage string `json:"stage"`
		} `json:"requests"`
		Next *string `json:"next"`
	}
	var p page
	require.NoError(t, json.Unmarshal([]byte(db.ok(t, "list", "--limit", "2", "--json")), &p))
	require.Len(t, p.Requests, 2)
	require.Equal(t, want[0], p.Requests[0].ID)
	require.Equal(t, want[1], p.Requests[1].ID)
	require.NotNil(t, p.Next)
	require.Equal(t, next, *p.Next)
	p = page{}
	raw := db.ok(t, "list", "--limit", "2", "--json", "--after", next)
	require.NoError(t, json.Unmarshal([]byte(raw), &p))
	require.Len(t, p.Requests, 1)
	require.Equal(t, want[2], p.Requests[0].ID)
	require.Nil(t, p.Next)
	require.Contains(t, raw, `"next": null`)

	// Filters.
	db.ok(t, "abort", "--request", ids[1], "--by", "carol", "--reason", "test")
	require.NoError(t, json.Unmarshal([]byte(db.ok(t, "list", "--stage", "aborted", "--json")), &p))
	require.Len(t, p.Requests, 1)
	require.Equal(t, ids[1], p.Requests[0].ID)
	require.NoError(t, json.Unmarshal([]byte(db.ok(t, "list", "--blocked", "--json")), &p))
	require.Empty(t, p.Requests)
	require.Contains(t, db.ok(t, "list", "--blocked", "--json"), `"requests": []`)
	out = db.ok(t, "list", "--blocked")
	require.Equal(t, 1, strings.Count(out, "\n"), "header only: %q", out)
	require.NoError(t, json.Unmarshal([]byte(db.ok(t, "list", "--blocked=false", "--json")), &p))
	require.Len(t, p.Requests, 3)
}

func TestNotFoundAndBadIDs(t *testing.T) {
	t.Parallel()
	db := setup(t)
	missing := uuid.NewString()
	for _, args := range [][]string{
		{"inspect", "--request", missing},
		{"inventory", "--request", missing},
		{"approve", "--request", missing, "--by", "bob"},
		{"abort", "--request", missing, "--by", "bob", "--reason", "r"},
		{"unblock", "--request", missing, "--by", "bob", "--reason", "r"},
	} {
		code, stdout, stderr := db.cli(t, args...)
		require.Equal(t, exitNotFound, code, "%q: %s", args, stderr)
		require.Empty(t, stdout)
		requireOneLine(t, stderr, "deletionctl: not found: "+args[0]+" of request "+missing)
		require.True(t, strings.HasSuffix(stderr, ": deletion "+missing+" does not exist\n"), "the reason, and no advice for a request that exists: %s", stderr)
		require.NotContains(t, stderr, "lifecycle:")
	}
	code, _, stderr := db.cli(t, "inspect", "--request", "12345")
	require.Equal(t, exitUsage, code, stderr)
	requireOneLine(t, stderr, `"12345"`)
}

func TestUnblockNotBlocked(t *testing.T) {
	t.Parallel()
	db := setup(t)
	_, host := db.createCommunity(t)
	id := db.submit(t, host, "alice")
	code, stdout, stderr := db.cli(t, "unblock", "--request", id, "--by", "carol", "--reason", "fixed it")
	require.Equal(t, exitRefused, code, stderr)
	require.Empty(t, stdout)
	requireOneLine(t, stderr, "deletionctl: refused: unblock of request "+id+` by "carol": deletion `+id+" is not blocked; deletionctl inspect --request "+id+" shows why it waits")
}

func TestLeases(t *testing.T) {
	t.Parallel()
	db := setup(t)
	community, _ := db.createCommunity(t)
	serving := fixture.NewClients(t, db.url).Serving
	_, err := serving.AcquireWriteLease(t.Context(), community, "upload", "web-1", time.Minute)
	require.NoError(t, err)
	short, err := serving.AcquireWriteLease(t.Context(), community, "upload", "web-2", time.Second)
	require.NoError(t, err)
	// Expire the short lease on the database clock.
	_, err = db.pool.Exec(t.Context(), "UPDATE community_serving_write_leases SET lease_until = now() - interval '1 minute' WHERE id = $1", short.ID)
	require.NoError(t, err)

	out := db.ok(t, "leases")
	require.Contains(t, out, "active: 1\n")
	require.Contains(t, out, "expired: 1\n")
	require.Contains(t, out, "dead tuples: ")

	require.Equal(t, "reaped 1 expired serving write leases\n", db.ok(t, "leases", "--reap", "10"))
	require.Equal(t, "reaped 0 expired serving write leases\n", db.ok(t, "leases", "--reap", "10"))
	out = db.ok(t, "leases")
	require.Contains(t, out, "active: 1\n")
	require.Contains(t, out, "expired: 0\n")
}

func TestConnectionFailure(t *testing.T) {
	t.Parallel()
	code, stdout, stderr := cli(t, "--database-url", "postgres://nobody@127.0.0.1:1/none?connect_timeout=2", "leases")
	require.Equal(t, exitFailure, code)
	require.Empty(t, stdout)
	requireOneLine(t, stderr, "deletionctl: ")
}
