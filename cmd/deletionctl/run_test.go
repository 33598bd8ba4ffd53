package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/executor"
	"github.com/tombstoneworks/communitydeletion/internal/fixture"
	"github.com/tombstoneworks/communitydeletion/internal/testserver/redisserver"
	"github.com/tombstoneworks/communitydeletion/internal/testserver/s3server"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// writeFiles writes files under "media/<community>/" in a fresh objects dir
// and returns the dir and the files' paths.
func writeFiles(t *testing.T, community uuid.UUID, n int) (string, []string) {
	t.Helper()
	dir := t.TempDir()
	var paths []string
	for i := range n {
		p := filepath.Join(dir, "media", community.String(), "sub", string(rune('a'+i))+".bin")
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, bytes.Repeat([]byte{'x'}, 10+i), 0o644))
		paths = append(paths, p)
	}
	return dir, paths
}

// inspectStage returns the request's stage and blocked flag from inspect --json.
func (db *testDB) inspectStage(t *testing.T, id string) (string, bool) {
	t.Helper()
	var rep struct {
		Request struct {
			Stage   string `json:"stage"`
			Blocked bool   `json:"blocked"`
		} `json:"request"`
	}
	require.NoError(t, json.Unmarshal([]byte(db.ok(t, "inspect", "--request", id, "--json")), &rep))
	return rep.Request.Stage, rep.Request.Blocked
}

// records parses run's stdout: one JSON log record per line.
func records(t *testing.T, out string) []map[string]any {
	t.Helper()
	var recs []map[string]any
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var rec map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &rec), "not a JSON record: %q", sc.Text())
		recs = append(recs, rec)
	}
	require.NoError(t, sc.Err())
	return recs
}

// record returns the first record whose message is msg.
func record(t *testing.T, recs []map[string]any, msg string) map[string]any {
	t.Helper()
	for _, rec := range recs {
		if rec["msg"] == msg {
			return rec
		}
	}
	t.Fatalf("no record %q in %v", msg, recs)
	return nil
}

// recordPrefix returns the first record whose message starts with prefix.
func recordPrefix(t *testing.T, recs []map[string]any, prefix string) map[string]any {
	t.Helper()
	for _, rec := range recs {
		if msg, _ := rec["msg"].(string); strings.HasPrefix(msg, prefix) {
			return rec
		}
	}
	t.Fatalf("no record %q… in %v", prefix, recs)
	return nil
}

// lastMessage is the message of run's last record.
func lastMessage(t *testing.T, out string) string {
	t.Helper()
	recs := records(t, out)
	require.NotEmpty(t, recs)
	return recs[len(recs)-1]["msg"].(string)
}

func TestRunOnce(t *testing.T) {
	t.Parallel()
	db := setup(t)
	community, host := db.createCommunity(t)
	for _, handle := range []string{"ann", "ben", "cid"} {
		_, err := db.pool.Exec(t.Context(), "INSERT INTO fixture_members (community_id, handle) VALUES ($1, $2)", community, handle)
		require.NoError(t, err)
	}
	dir, paths := writeFiles(t, community, 5)
	// A neighbour's file that must survive.
	other := filepath.Join(dir, "media", uuid.NewString(), "keep.bin")
	require.NoError(t, os.MkdirAll(filepath.Dir(other), 0o755))
	require.NoError(t, os.WriteFile(other, []byte("keep"), 0o644))

	id := db.submit(t, host, "alice")
	require.Contains(t, db.ok(t, "inventory", "--request", id, "--objects", "file://"+dir), id+" inventoried ")

	// The frozen inventory summarizes the files found.
	var rep struct {
		Request struct {
			Inventory struct {
				Storage lifecycle.StorageManifest `json:"storage"`
			} `json:"inventory"`
		} `json:"request"`
	}
	require.NoError(t, json.Unmarshal([]byte(db.ok(t, "inspect", "--request", id, "--json")), &rep))
	want, err := executor.SummarizeStorage(t.Context(), executor.NewFileObjectStore(dir), fixture.ObjectPrefixes(community))
	require.NoError(t, err)
	require.Equal(t, want.Prefixes, rep.Request.Inventory.Storage.Prefixes)
	require.EqualValues(t, 5, rep.Request.Inventory.Storage.Prefixes[0].ObjectCount)

	db.okAs(t, fixture.RoleApprover, "approve", "--request", id, "--by", "bob")

	out := db.ok(t, "run", "--once", "--objects-dir", dir, "--cache", "memory:", "--request", id, "--owner", "test-executor", "--chunk-size", "2",
		"--nice-ratio", "1")
	require.NotContains(t, out, "\r", "no progress bar off a terminal")
	recs := records(t, out)
	started := recs[0]
	require.Equal(t, "executor started", started["msg"])
	require.Equal(t, "file://"+dir, started["objects"])
	require.Equal(t, "memory:", started["cache"])
	require.Equal(t, "test-executor", started["executor"])
	// Before it claims, the runner says how it signs receipts: here it has
	// no key and none is registered, a warning about the process.
	signing := recs[1]
	require.Equal(t, "WARN", signing["level"])
	require.True(t, strings.HasPrefix(signing["msg"].(string), "receipts are unsigned: "), signing)
	require.Equal(t, false, signing["receipts_signed"])
	require.Equal(t, "test-executor", signing["executor"])
	for _, rec := range recs[2:] {
		// Every record about the claim carries it.
		require.Equal(t, id, rec["request_id"], rec)
		require.Equal(t, community.String(), rec["community_id"], rec)
		require.NotEmpty(t, rec["stage"], rec)
		require.Positive(t, rec["lease_generation"], rec)
		require.Equal(t, "test-executor", rec["executor"], rec)
		require.NotEqual(t, "DEBUG", rec["level"], "info by default")
	}
	require.EqualValues(t, 3, record(t, recs, "drained")["chunks_total"], "5 keys in chunks of 2")
	// A duration says its unit: seconds under a key that ends in _seconds,
	// never bare nanoseconds.
	fenced := recordPrefix(t, recs, "fenced at generation ")
	require.NotContains(t, fenced, "fence_wait")
	wait, ok := fenced["fence_wait_seconds"].(float64)
	require.True(t, ok, fenced)
	require.Less(t, wait, 60.0, "seconds, not nanoseconds")
	purged := recordPrefix(t, recs, "postgres purged in ")
	require.EqualValues(t, 3, purged["rows_by_table"].(map[string]any)["fixture_members"])
	// --nice-ratio reached the purge: it slept after its batches.
	niced, ok := purged["niced_seconds"].(float64)
	require.True(t, ok, purged)
	require.Positive(t, niced, "the purge slept its nice ratio")
	require.Equal(t, "completed", lastMessage(t, out))

	stage, blocked := db.inspectStage(t, id)
	require.Equal(t, string(lifecycle.StageRetentionPending), stage)
	require.False(t, blocked)
	for _, p := range paths {
		_, err := os.Stat(p)
		require.ErrorIs(t, err, os.ErrNotExist, p)
	}
	_, err = os.Stat(other)
	require.NoError(t, err, "a neighbour's file survives")

	// Nothing is left to claim, neither next nor this request.
	require.Equal(t, "nothing to claim", lastMessage(t, db.ok(t, "run", "--once", "--objects-dir", dir, "--cache", "memory:")))
	require.Contains(t, lastMessage(t, db.ok(t, "run", "--once", "--objects-dir", dir, "--cache", "memory:", "--request", id)), "nothing to claim")

	// --log-level debug adds the per-chunk records; --log-format text
	// writes text lines.
	out = db.ok(t, "run", "--once", "--objects-dir", dir, "--cache", "memory:", "--log-format", "text", "--log-level", "debug")
	require.Contains(t, out, `level=INFO msg="nothing to claim"`)
}

func TestRunOnceNothingToClaim(t *testing.T) {
	t.Parallel()
	db := setup(t)
	require.Equal(t, "nothing to claim", lastMessage(t, db.ok(t, "run", "--once", "--objects-dir", t.TempDir(), "--cache", "memory:")))

	// A submitted, unapproved request is not claimable either: named, it
	// is refused, saying why and what to do.
	_, host := db.createCommunity(t)
	id := db.submit(t, host, "alice")
	require.Equal(t, "nothing to claim", lastMessage(t, db.ok(t, "run", "--once", "--objects-dir", t.TempDir(), "--cache", "memory:")))
	code, stdout, stderr := db.cli(t, "run", "--once", "--objects-dir", t.TempDir(), "--cache", "memory:", "--request", id)
	require.Equal(t, exitRefused, code, stderr)
	requireOneLine(t, stderr, "deletionctl: refused: run of request "+id+": not claimable: submitted: its inventory is not frozen yet; "+
		"deletionctl plan "+id+", then deletionctl inventory --request "+id)
	last := records(t, stdout)[len(records(t, stdout))-1]
	require.Equal(t, "not claimable: submitted: its inventory is not frozen yet", last["msg"])
	require.Equal(t, claimNotInventoried, last["status"])
	require.Contains(t, last["next_step"], "deletionctl inventory --request "+id)

	code, stdout, stderr = db.cli(t, "run", "--once", "--objects-dir", t.TempDir(), "--cache", "memory:", "--request", uuid.NewString())
	require.Equal(t, exitNotFound, code, stderr)
	recs := records(t, stdout)
	require.Len(t, recs, 2, "the start and how receipts are signed, nothing about a claim")
	require.Equal(t, "executor started", recs[0]["msg"])
	require.True(t, strings.HasPrefix(recs[1]["msg"].(string), "receipts are unsigned: "), recs[1])
	requireOneLine(t, stderr, "deletionctl: not found: run of request ")
}

func TestRunObjectsDir(t *testing.T) {
	t.Parallel()
	db := setup(t)
	code, _, stderr := db.cli(t, "run", "--once", "--cache", "memory:")
	require.Equal(t, exitUsage, code, stderr)
	requireOneLine(t, stderr, "run needs --objects URL")

	missing := filepath.Join(t.TempDir(), "nope")
	code, _, stderr = db.cli(t, "run", "--once", "--objects-dir", missing, "--cache", "memory:")
	require.Equal(t, exitUsage, code, stderr)
	requireOneLine(t, stderr, "--objects: open objects URL file://", "nope", "no such file or directory")

	_, host := db.createCommunity(t)
	id := db.submit(t, host, "alice")
	code, _, stderr = db.cli(t, "inventory", "--request", id, "--objects-dir", missing)
	require.Equal(t, exitUsage, code, stderr)
	requireOneLine(t, stderr, "--objects", "nope")
	stage, _ := db.inspectStage(t, id)
	require.Equal(t, "submitted", stage, "nothing frozen")
}

// TestRunOnceRefused approves prefixes that are not the community's (a
// frozen inventory that does not match where its files are, frozen through
// the library in a deployment that declared no layout, since deletionctl
// inventory only freezes the declared one): the run blocks the request,
// deletes nothing and exits 3 with one line.
func TestRunOnceRefused(t *testing.T) {
	t.Parallel()
	db := setupBare(t)
	community, host := db.createCommunity(t)
	dir, paths := writeFiles(t, community, 3)
	id := db.submit(t, host, "alice")
	clients := fixture.NewClients(t, db.url)
	schema, err := clients.Operator.InventorySchema(t.Context(), community)
	require.NoError(t, err)
	storage, err := executor.SummarizeStorage(t.Context(), executor.NewFileObjectStore(dir), []string{"media/someone-else/"})
	require.NoError(t, err)
	_, err = clients.Operator.FreezeInventory(t.Context(), uuid.MustParse(id), lifecycle.FrozenInventory{Schema: *schema, Storage: storage})
	require.NoError(t, err)
	db.okAs(t, fixture.RoleApprover, "approve", "--request", id, "--by", "bob")

	code, stdout, stderr := db.cli(t, "run", "--once", "--objects-dir", dir, "--cache", "memory:", "--request", id)
	require.Equal(t, exitRefused, code, "stdout %s stderr %s", stdout, stderr)
	requireOneLine(t, stderr, "deletionctl: refused: run of request "+id+": blocked the request: ", "does not name community "+community.String(),
		"; remedy the cause, then deletionctl unblock --request "+id)
	recs := records(t, stdout)
	blockedRec := recs[len(recs)-1]
	require.Equal(t, "ERROR", blockedRec["level"])
	require.Contains(t, blockedRec["msg"], "blocked: ")
	require.Equal(t, "refused", blockedRec["cause"])
	for _, p := range paths {
		_, err := os.Stat(p)
		require.NoError(t, err, "nothing deleted: %s", p)
	}
	stage, blocked := db.inspectStage(t, id)
	require.NotEqual(t, string(lifecycle.StageRetentionPending), stage)
	require.True(t, blocked)

	// Blocked, it is no longer claimable.
	require.Equal(t, "nothing to claim", lastMessage(t, db.ok(t, "run", "--once", "--objects-dir", dir, "--cache", "memory:")))
}

// syncBuffer is a bytes.Buffer that a running command and the test may use
// at once.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// TestRunUntilCancelled runs the loop without --once, serving /metrics and
// /healthz, until its context is cancelled, then exits 0.
func TestRunUntilCancelled(t *testing.T) {
	t.Parallel()
	db := setup(t)
	community, host := db.createCommunity(t)
	dir, paths := writeFiles(t, community, 2)
	id := db.submit(t, host, "alice")
	db.ok(t, "inventory", "--request", id, "--objects-dir", dir)
	db.okAs(t, fixture.RoleApprover, "approve", "--request", id, "--by", "bob")

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan int, 1)
	var out, errOut syncBuffer
	go func() {
		done <- run(ctx, []string{"--database-url", db.url, "run", "--objects-dir", dir, "--cache", "memory:",
			"--metrics-addr", "127.0.0.1:0"}, &out, &errOut)
	}()
	var addr string
	require.Eventually(t, func() bool {
		for line := range strings.SplitSeq(out.String(), "\n") {
			var rec map[string]any
			if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == "serving /metrics and /healthz" {
				addr = rec["addr"].(string)
				return true
			}
		}
		return false
	}, time.Minute, 10*time.Millisecond)
	require.Eventually(t, func() bool {
		stage, _ := db.inspectStage(t, id)
		return stage == string(lifecycle.StageRetentionPending)
	}, time.Minute, 100*time.Millisecond)

	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(body)
	}
	code, body := get("/healthz")
	require.Equal(t, http.StatusOK, code, body)
	require.Equal(t, "ok\n", body)
	code, body = get("/metrics")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `community_deletion_executor_deletions_total{outcome="completed",stage="retention_pending"} 1`)
	require.Contains(t, body, "community_deletion_executor_objects_deleted_total 2\n")
	require.Contains(t, body, "community_deletion_executor_claims_in_flight 0\n")
	require.Contains(t, body, "go_goroutines ")
	require.Contains(t, body, "process_start_time_seconds ")

	cancel()
	require.Equal(t, exitOK, <-done, errOut.String())
	require.Empty(t, errOut.String())
	require.Contains(t, out.String(), `"msg":"completed"`)
	for _, p := range paths {
		_, err := os.Stat(p)
		require.ErrorIs(t, err, os.ErrNotExist)
	}
	_, err := http.Get("http://" + addr + "/healthz") //nolint:bodyclose // the server is gone: Get fails and there is no body
	require.Error(t, err, "the server stopped with the run")
}

func TestHealthHandler(t *testing.T) {
	t.Parallel()
	var deadline time.Time
	h := healthHandler(func(ctx context.Context) error {
		deadline, _ = ctx.Deadline()
		return nil
	})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	require.Equal(t, "ok\n", rec.Body.String())
	require.WithinDuration(t, time.Now().Add(healthTimeout), deadline, time.Second, "the check is bounded")

	h = healthHandler(func(context.Context) error {
		return fmt.Errorf("%w: lease of deletion x last renewed 5s ago\nsecond line", executor.ErrUnhealthy)
	})
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	require.Equal(t, http.StatusServiceUnavailable, rec.Code)
	require.Equal(t, "executor: unhealthy: lease of deletion x last renewed 5s ago; second line\n", rec.Body.String())
}

// A log record ends the progress bar's line first: the two never share a
// line, and the bar rewrites itself in place.
func TestConsole(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	c := &console{w: &b}
	id := uuid.New()
	fmt.Fprint(c, "level=INFO msg=claimed\n")
	c.event(executor.Event{RequestID: id, Stage: lifecycle.StageApproved, Message: "quiescing"})
	c.event(executor.Event{RequestID: id, Stage: lifecycle.StageFenced, Message: "listed chunk 0", ChunksTotal: 1})
	c.event(executor.Event{RequestID: id, Stage: lifecycle.StageFenced, Message: "listed chunk 1", ChunksTotal: 2})
	fmt.Fprint(c, "level=INFO msg=drained\n")
	c.event(executor.Event{RequestID: id, Stage: lifecycle.StageDrained, Message: "chunk 1 deleted", ChunksDone: 1, ChunksTotal: 4})
	c.event(executor.Event{RequestID: id, Stage: lifecycle.StageDrained, Message: "chunk 2 deleted", ChunksDone: 2, ChunksTotal: 4})
	fmt.Fprint(c, "level=INFO msg=\"object bindings removed\"\n")
	c.event(executor.Event{RequestID: id, Stage: lifecycle.StageBindingsRemoved, Message: "purged", TablesRows: map[string]int64{"b": 2, "a": 1}})
	c.event(executor.Event{RequestID: id, Stage: lifecycle.StageBindingsRemoved, Message: "purged", TablesRows: map[string]int64{"b": 5, "a": 1}})
	c.finish()
	require.Equal(t, "level=INFO msg=claimed\n"+
		"\rlisting: 1 chunks\rlisting: 2 chunks\n"+
		"level=INFO msg=drained\n"+
		"\rdeleting ["+strings.Repeat("#", 7)+strings.Repeat(".", 23)+"] 1/4 chunks"+
		"\rdeleting ["+strings.Repeat("#", 15)+strings.Repeat(".", 15)+"] 2/4 chunks\n"+
		"level=INFO msg=\"object bindings removed\"\n"+
		"\rpurge: a=1 b=2\rpurge: a=1 b=5\n", b.String())
	c.finish()
	require.True(t, strings.HasSuffix(b.String(), "b=5\n"), "finish twice adds nothing")
}

// TestRunAgainstS3AndRedis deletes a community whose files live in an S3
// server (Versity's gateway over HTTP) and whose cache keys live in Redis,
// from the store URLs alone, and keeps a neighbour's. It sets the AWS
// credential variables, so it does not run in parallel.
func TestRunAgainstS3AndRedis(t *testing.T) {
	ctx := t.Context()
	s3srv, err := s3server.Start(ctx)
	require.NoError(t, err, "install with %s", s3server.InstallCommand)
	t.Cleanup(func() { _ = s3srv.Close() })
	rds, err := redisserver.StartLocal(ctx, []string{"--user", "ops", "on", ">sekret-pass-42", "~*", "&*", "+@all"})
	require.NoError(t, err, "install with %s", redisserver.InstallCommand)
	t.Cleanup(func() { _ = rds.Close() })
	t.Setenv("AWS_ACCESS_KEY_ID", s3srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", s3srv.SecretKey)
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))

	db := setup(t)
	target, host := db.createCommunity(t)
	neighbour, _ := db.createCommunity(t)
	root := s3server.NewRoot()
	client := s3srv.Client("")
	put := func(key string) {
		_, err := client.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(s3srv.Bucket), Key: aws.String(root + key),
			Body: strings.NewReader(key)})
		require.NoError(t, err)
	}
	for i := range 5 {
		put(fmt.Sprintf("media/%s/%d.bin", target, i))
	}
	put(fmt.Sprintf("media/%s/keep.bin", neighbour))
	rc := redis.NewClient(&redis.Options{Addr: rds.Addr, Username: "ops", Password: "sekret-pass-42"})
	defer rc.Close()
	for _, c := range []uuid.UUID{target, neighbour} {
		for i := range 3 {
			require.NoError(t, rc.Set(ctx, fmt.Sprintf("app:%s:%d", c, i), "v", 0).Err())
		}
	}

	objectsURL := fmt.Sprintf("s3://%s/%s?endpoint=%s&region=%s&path_style=true", s3srv.Bucket, root, s3srv.Endpoint, s3srv.Region)
	cacheURL := fmt.Sprintf("redis://ops:sekret-pass-42@%s/0?pattern=app:{community}:*", rds.Addr)
	id := db.submit(t, host, "alice")
	db.ok(t, "inventory", "--request", id, "--objects", objectsURL)
	db.okAs(t, fixture.RoleApprover, "approve", "--request", id, "--by", "bob")
	out := db.ok(t, "run", "--once", "--request", id, "--objects", objectsURL, "--cache", cacheURL, "--chunk-size", "2")
	require.NotContains(t, out, "sekret-pass-42", "the log never shows the cache's password")
	recs := records(t, out)
	require.Equal(t, strings.Replace(cacheURL, "sekret-pass-42", "xxxxx", 1), record(t, recs, "executor started")["cache"])
	require.EqualValues(t, 3, record(t, recs, "cache purged: 3 keys")["keys"])
	require.Equal(t, "completed", lastMessage(t, out))

	listed, err := client.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(s3srv.Bucket), Prefix: aws.String(root)})
	require.NoError(t, err)
	var left []string
	for _, o := range listed.Contents {
		left = append(left, strings.TrimPrefix(aws.ToString(o.Key), root))
	}
	require.Equal(t, []string{fmt.Sprintf("media/%s/keep.bin", neighbour)}, left)
	keys, err := rc.Keys(ctx, "app:*").Result()
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"app:" + neighbour.String() + ":0", "app:" + neighbour.String() + ":1", "app:" + neighbour.String() + ":2"}, keys)
	stage, _ := db.inspectStage(t, id)
	require.Equal(t, string(lifecycle.StageRetentionPending), stage)

	// The same URLs from the environment; the flags' absence is no error.
	code, stdout, stderr := cliEnv(t, map[string]string{"DELETIONCTL_OBJECTS": objectsURL, "DELETIONCTL_CACHE": cacheURL},
		"--database-url", db.url, "run", "--once")
	require.Equal(t, exitOK, code, stderr)
	require.Equal(t, "nothing to claim", lastMessage(t, stdout))
}

// cliEnv runs deletionctl with env's variables set for it.
func cliEnv(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	for k, v := range env {
		t.Setenv(k, v)
	}
	return cli(t, args...)
}

// The log's format and the progress bar follow the terminal and
// --log-format; the level follows --log-level.
func TestRunOutput(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		terminal      bool
		format, level string
		json, bar     bool
		debug         bool
	}{
		{terminal: false, json: true},
		{terminal: true, bar: true},
		{terminal: false, format: "text"},
		{terminal: true, format: "json", json: true},
		{terminal: true, format: "text", bar: true, level: "debug", debug: true},
		{terminal: false, format: "auto", level: "warn", json: true},
	} {
		var b bytes.Buffer
		o := newRunOutput(&b, tc.terminal, config{logFormat: tc.format, logLevel: tc.level})
		require.Equal(t, tc.bar, o.console != nil, "%+v", tc)
		require.Equal(t, tc.bar, o.progress() != nil, "%+v", tc)
		o.log.Info("hello", "k", "v")
		o.log.Debug("detail")
		o.finish()
		out := b.String()
		if tc.level == "warn" {
			require.Empty(t, out, "%+v", tc)
			continue
		}
		if tc.json {
			require.Contains(t, out, `"msg":"hello","k":"v"`, "%+v", tc)
		} else {
			require.Contains(t, out, `level=INFO msg=hello k=v`, "%+v", tc)
		}
		require.Equal(t, tc.debug, strings.Contains(out, "detail"), "%+v", tc)
	}
}
