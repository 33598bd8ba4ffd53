// Package crash kills the deletion executor, and PostgreSQL under it, at
// seeded random points across every stage of a real deletion (PostgreSQL,
// files in a directory, keys in a real redis-server), restarts them, and
// proves that each run ends at retention_pending with nothing of the target
// left and every bystander unchanged.
//
// The executor runs in a child process: this test binary re-executed with
// CRASH_CHILD set, which TestMain turns into an executor.Runner. The parent
// reads the child's progress events on its stdout and kills it with SIGKILL.
// CRASH_SEED replays a run; CRASH_KILLS sets how many kill points (default
// 50, or 10 under go test -short, which make test-quick passes).
package crash

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/executor"
	"github.com/tombstoneworks/communitydeletion/executor/rediscache"
	"github.com/tombstoneworks/communitydeletion/internal/ephemeralpg"
	"github.com/tombstoneworks/communitydeletion/internal/fixture"
	"github.com/tombstoneworks/communitydeletion/internal/testserver/redisserver"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// The child's environment.
const (
	envChild     = "CRASH_CHILD"
	envDatabase  = "CRASH_DATABASE_URL"
	envObjects   = "CRASH_OBJECTS_DIR"
	envRedis     = "CRASH_REDIS_URL"
	envRequest   = "CRASH_REQUEST"
	childAppName = "crash-executor"
	keyPattern   = "app:{community}:*"
)

func TestMain(m *testing.M) {
	if os.Getenv(envChild) != "" {
		os.Exit(child())
	}
	os.Exit(m.Run())
}

// child runs the executor on one request until it completes: exit 0 once
// the request is at retention_pending, 3 when it was blocked, 1 on any other
// failure (the parent starts another). It prints one line per event.
func child() int {
	ctx := context.Background()
	out := bufio.NewWriter(os.Stdout)
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stderr, "crash child: "+format+"\n", args...)
		return 1
	}
	config, err := pgxpool.ParseConfig(os.Getenv(envDatabase))
	if err != nil {
		return fail("%v", err)
	}
	config.ConnConfig.RuntimeParams["application_name"] = childAppName
	pool, err := pgxpool.NewWithConfig(ctx, config)
	if err != nil {
		return fail("%v", err)
	}
	defer pool.Close()
	engine, err := lifecycle.NewEngine(ctx, pool, nil)
	if err != nil {
		return fail("%v", err)
	}
	redisOpts, err := redis.ParseURL(os.Getenv(envRedis))
	if err != nil {
		return fail("%v", err)
	}
	cache, err := rediscache.New(redis.NewClient(redisOpts), rediscache.Options{Patterns: []string{keyPattern}, UnlinkBatch: 25, ScanCount: 25})
	if err != nil {
		return fail("%v", err)
	}
	request, err := uuid.Parse(os.Getenv(envRequest))
	if err != nil {
		return fail("%v", err)
	}
	runner, err := executor.New(executor.Config{
		Engine: engine, Objects: executor.NewFileObjectStore(os.Getenv(envObjects)), Cache: cache,
		Owner: fmt.Sprintf("crash-%d", os.Getpid()), Prefixes: func(k lifecycle.TenantKey) []string { return fixture.ObjectPrefixesOf(k.String()) },
		LeaseDuration: 2 * time.Second, HeartbeatInterval: 300 * time.Millisecond,
		ChunkSize: 10, RetryBase: time.Millisecond, RetryMax: 20 * time.Millisecond,
		Purge: lifecycle.PurgeOptions{MaxRowsPerTx: 150, TxBudget: 5 * time.Millisecond},
		Progress: func(e executor.Event) {
			fmt.Fprintf(out, "event %s %s\n", e.Stage, strings.ReplaceAll(e.Message, "\n", " "))
			out.Flush()
		},
	})
	if err != nil {
		return fail("%v", err)
	}
	fmt.Fprintln(out, "started")
	out.Flush()
	for {
		claimed, err := runner.RunRequest(ctx, request)
		switch {
		case errors.Is(err, executor.ErrBlocked):
			return fail("blocked: %v", err)
		case errors.Is(err, executor.ErrRetryScheduled), lifecycle.IsStaleLease(err):
			continue
		case err != nil:
			return fail("%v", err)
		case claimed:
			fmt.Fprintln(out, "done")
			out.Flush()
			return 0
		}
		// Not claimable: a predecessor's lease has not expired, or the
		// request is blocked (then say why and stop).
		if r, err := engine.Get(ctx, request); err == nil {
			switch {
			case r.Blocked():
				return fail("blocked: %s", r.BlockedReason)
			case r.Stage == lifecycle.StageRetentionPending:
				fmt.Fprintln(out, "done") // completed before a kill took the last one down
				out.Flush()
				return 0
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// world is one deletion to crash through: the servers, the target and a
// bystander.
type world struct {
	srv       *ephemeralpg.Server
	url       string
	pool      *pgxpool.Pool
	redisURL  string
	rdb       *redis.Client
	root      string
	target    uuid.UUID
	bystander uuid.UUID
	request   uuid.UUID
}

// populate writes a community's rows, files and cache keys.
func (w *world) populate(t *testing.T, community uuid.UUID, scale int) {
	t.Helper()
	ctx := t.Context()
	for _, sql := range []string{
		`INSERT INTO fixture_members (community_id, handle) SELECT $1, 'member-' || g FROM generate_series(1, $2::int * 20) g`,
		`INSERT INTO fixture_channels (community_id, name, created_by)
			SELECT $1, 'channel-' || g, (SELECT min(id) FROM fixture_members WHERE community_id = $1) FROM generate_series(1, $2::int) g`,
		`INSERT INTO fixture_messages (community_id, channel_id, author_id, body)
			SELECT $1, (SELECT min(id) FROM fixture_channels WHERE community_id = $1), (SELECT max(id) FROM fixture_members WHERE community_id = $1),
			       'message ' || g FROM generate_series(1, $2::int * 100) g`,
		`INSERT INTO fixture_reactions (community_id, message_id, member_id, emoji)
			SELECT $1, m.id, (SELECT min(id) FROM fixture_members WHERE community_id = $1), 'x'
			FROM fixture_messages m WHERE m.community_id = $1 AND m.id % 2 = 0 AND $2::int > 0`,
		`INSERT INTO fixture_activity (community_id, kind) SELECT $1, 'kind-' || g FROM generate_series(1, $2::int * 50) g`,
		`INSERT INTO fixture_audit_events (community_id, action) SELECT $1, 'action-' || g FROM generate_series(1, $2::int * 10) g`,
	} {
		_, err := w.pool.Exec(ctx, sql, community, scale)
		require.NoError(t, err)
	}
	for i := range scale * 30 {
		for _, prefix := range fixture.ObjectPrefixes(community) {
			path := filepath.Join(w.root, filepath.FromSlash(prefix+fmt.Sprintf("dir-%d/file-%04d", i%7, i)))
			require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
			require.NoError(t, os.WriteFile(path, []byte(path), 0o644))
		}
	}
	pipe := w.rdb.Pipeline()
	for i := range scale * 40 {
		pipe.Set(ctx, fmt.Sprintf("app:%s:key-%d", community, i), "v", 0)
	}
	_, err := pipe.Exec(ctx)
	require.NoError(t, err)
}

// fingerprint is everything of a community across the three stores.
func (w *world) fingerprint(t *testing.T, community uuid.UUID) string {
	t.Helper()
	ctx := t.Context()
	sum := sha256.New()
	for _, table := range append(slices.Clone(fixture.Tables), fixture.NullifyTables...) {
		var digest string
		require.NoError(t, w.pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) || ':' || coalesce(md5(string_agg(t::text, ',' ORDER BY t::text)), '')
			FROM %s t WHERE community_id = $1`, table), community).Scan(&digest))
		fmt.Fprintf(sum, "%s=%s\n", table, digest)
	}
	for _, prefix := range fixture.ObjectPrefixes(community) {
		_ = filepath.WalkDir(filepath.Join(w.root, filepath.FromSlash(prefix)), func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				body, _ := os.ReadFile(path)
				fmt.Fprintf(sum, "file %s %x\n", path, sha256.Sum256(body))
			}
			return nil
		})
	}
	keys, err := w.rdb.Keys(ctx, fmt.Sprintf("app:%s:*", community)).Result()
	require.NoError(t, err)
	slices.Sort(keys)
	fmt.Fprintf(sum, "keys %s\n", strings.Join(keys, ","))
	return hex.EncodeToString(sum.Sum(nil))
}

// leftovers counts what is left of a community: rows of its 'delete'
// tables, rows still naming it in 'nullify' tables, files and cache keys.
func (w *world) leftovers(t *testing.T, community uuid.UUID) map[string]int {
	t.Helper()
	ctx := t.Context()
	left := map[string]int{}
	for _, table := range append(slices.Clone(fixture.Tables), fixture.NullifyTables...) {
		var n int
		require.NoError(t, w.pool.QueryRow(ctx, fmt.Sprintf("SELECT count(*) FROM %s WHERE community_id = $1", table), community).Scan(&n))
		if n > 0 {
			left[table] = n
		}
	}
	for _, prefix := range fixture.ObjectPrefixes(community) {
		_ = filepath.WalkDir(filepath.Join(w.root, filepath.FromSlash(prefix)), func(_ string, d fs.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				left["files"]++
			}
			return nil
		})
	}
	keys, err := w.rdb.Keys(ctx, fmt.Sprintf("app:%s:*", community)).Result()
	require.NoError(t, err)
	if len(keys) > 0 {
		left["cache keys"] = len(keys)
	}
	return left
}

// newWorld starts PostgreSQL (a cluster of this test's own: it is crashed)
// and redis-server, populates a target and a bystander, and has two
// operators submit, inventory and approve the target's deletion.
func newWorld(t *testing.T, scale int) *world {
	t.Helper()
	ctx := t.Context()
	srv, err := ephemeralpg.Start(ctx, ephemeralpg.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close(context.Background()) })
	if srv.Source() != ephemeralpg.SourceLocal {
		t.Fatalf("the crash suite restarts PostgreSQL: it needs the local server binaries, not %s", srv.Source())
	}
	url, _, err := srv.NewDatabase(ctx, fixture.Template{WithFixture: true})
	require.NoError(t, err)
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	rs, err := redisserver.StartLocal(ctx, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = rs.Close() })
	redisOpts, err := redis.ParseURL(rs.URL)
	require.NoError(t, err)
	w := &world{srv: srv, url: url, pool: pool, redisURL: rs.URL, rdb: redis.NewClient(redisOpts), root: t.TempDir(),
		target: uuid.New(), bystander: uuid.New()}
	t.Cleanup(func() { _ = w.rdb.Close() })
	for _, c := range []uuid.UUID{w.target, w.bystander} {
		_, err := pool.Exec(ctx, "INSERT INTO communities (id, host, signing_key, icon) VALUES ($1, $2, 'key', 'icon.png')",
			c, "c-"+c.String()+".example")
		require.NoError(t, err)
		w.populate(t, c, scale)
	}
	clients := fixture.NewClients(t, url)
	request, err := clients.Operator.Submit(ctx, "c-"+w.target.String()+".example", "alice", "crash suite")
	require.NoError(t, err)
	schema, err := clients.Operator.InventorySchema(ctx, w.target)
	require.NoError(t, err)
	storage, err := executor.SummarizeStorage(ctx, executor.NewFileObjectStore(w.root), fixture.ObjectPrefixes(w.target))
	require.NoError(t, err)
	_, err = clients.Operator.FreezeInventory(ctx, request.ID, lifecycle.FrozenInventory{Schema: *schema, Storage: storage})
	require.NoError(t, err)
	// A short grace period: the first executor starts while it runs and
	// must wait it out before anything is quiesced.
	_, err = clients.Approver.ApproveWithParams(ctx, request.ID, lifecycle.ApproveParams{
		ApprovedBy: "bob", Note: "crash suite", GracePeriod: new(300 * time.Millisecond)})
	require.NoError(t, err)
	w.request = request.ID
	return w
}

// childProcess is one running executor child.
type childProcess struct {
	cmd    *exec.Cmd
	events eventLines
	stderr *strings.Builder
}

// eventLines are the child's stdout lines ("event <stage> ...", "done"),
// closed at EOF.
type eventLines chan string

// lines yields the lines, failing the test when none comes for quiet (a
// stuck child).
func (e eventLines) lines(t *testing.T, quiet time.Duration, stderr *strings.Builder) func(func(string) bool) {
	return func(yield func(string) bool) {
		for {
			select {
			case line, ok := <-e:
				if !ok || !yield(line) {
					return
				}
			case <-time.After(quiet):
				t.Fatalf("the executor child printed nothing for %s; its stderr: %s", quiet, stderr.String())
			}
		}
	}
}

func (w *world) startChild(t *testing.T) *childProcess {
	t.Helper()
	executorURL, err := fixture.RoleConnString(w.url, fixture.RoleExecutor)
	require.NoError(t, err)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envChild+"=1", envDatabase+"="+executorURL, envObjects+"="+w.root,
		envRedis+"="+w.redisURL, envRequest+"="+w.request.String())
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	c := &childProcess{cmd: cmd, events: make(eventLines, 1024), stderr: &strings.Builder{}}
	cmd.Stderr = c.stderr
	require.NoError(t, cmd.Start())
	go func() {
		defer close(c.events)
		scanner := bufio.NewScanner(stdout)
		for scanner.Scan() {
			c.events <- scanner.Text()
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	return c
}

// kill SIGKILLs the child and reaps it.
func (c *childProcess) kill() {
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	_ = c.cmd.Wait()
	for range c.events { // drain
	}
}

// expireLeases ends the dead executor's lease on the database clock, as
// waiting out its duration would.
func (w *world) expireLeases(t *testing.T) {
	t.Helper()
	_, err := w.pool.Exec(context.WithoutCancel(t.Context()), `UPDATE community_deletion_requests
		SET lease_until = now() - interval '1 second' WHERE id = $1 AND lease_until > now()`, w.request)
	require.NoError(t, err)
}

// fault is what happens at a kill point.
type fault string

const (
	faultKill      fault = "SIGKILL the executor"
	faultRestart   fault = "crash-restart PostgreSQL"
	faultTerminate fault = "pg_terminate_backend the executor's sessions"
)

// crashSeed is the run's seed: CRASH_SEED, or the clock.
func crashSeed(t *testing.T) uint64 {
	t.Helper()
	if s := os.Getenv("CRASH_SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		require.NoError(t, err)
		return seed
	}
	return uint64(time.Now().UnixNano())
}

// Every kill point ends well: the executor is killed at seeded random
// points of every stage (the first event of each stage it reaches, and then
// after a random number of events, each a random 0-3 ms later so it lands
// inside a step), PostgreSQL is crash-restarted and the
// executor's sessions are terminated in the middle of the purge; each time a
// new executor starts. The deletion still ends at retention_pending with no
// row, file or cache key of the target left, and the bystander unchanged.
func TestDeletionSurvivesKillsAndRestartsAtEveryStage(t *testing.T) {
	seed := crashSeed(t)
	t.Logf("CRASH_SEED=%d", seed)
	kills := 50
	if testing.Short() {
		kills = 10 // make test-quick: a handful of kill points, still one in every stage's first event
	}
	if s := os.Getenv("CRASH_KILLS"); s != "" {
		var err error
		kills, err = strconv.Atoi(s)
		require.NoError(t, err)
	}
	rng := rand.New(rand.NewPCG(seed, seed>>1|1))
	w := newWorld(t, 8)
	ctx := t.Context()
	bystanderBefore := w.fingerprint(t, w.bystander)

	var (
		points      = map[fault]int{}
		stagesSeen  = map[string]int{}
		stageKilled = map[string]bool{}
		perStage    = map[string]int{}
		started     = time.Now()
	)
	countdown := 1 + rng.IntN(4)
	for attempt := 0; ; attempt++ {
		require.Less(t, attempt, kills*4+50, "the deletion never finished")
		c := w.startChild(t)
		killed := false
		for line := range c.events.lines(t, 20*time.Second, c.stderr) {
			if line == "done" {
				break
			}
			fields := strings.Fields(line)
			if len(fields) < 2 || fields[0] != "event" {
				continue
			}
			stage := fields[1]
			stagesSeen[stage]++
			// The first event of every stage is a kill point; after that,
			// every few events, while the stage has budget left: the stages
			// with many events (listing, deleting and purging in batches)
			// share the kills between them.
			firstOfStage := !stageKilled[stage]
			if !firstOfStage {
				if perStage[stage] >= kills/3+1 || points[faultKill]+points[faultRestart]+points[faultTerminate] >= kills {
					continue
				}
				if countdown--; countdown > 0 {
					continue
				}
			}
			countdown = 1 + rng.IntN(4)
			stageKilled[stage] = true
			perStage[stage]++
			f := faultKill
			if stage == string(lifecycle.StageBindingsRemoved) && !firstOfStage {
				// The purge: now and then crash PostgreSQL under it, or cut
				// its sessions, instead.
				switch rng.IntN(4) {
				case 0:
					f = faultRestart
				case 1:
					f = faultTerminate
				}
			}
			points[f]++
			if os.Getenv("CRASH_VERBOSE") != "" {
				t.Logf("kill point %d at %s: %s (%s)", points[faultKill]+points[faultRestart]+points[faultTerminate], stage, f, line)
			}
			// Land inside whatever the executor does next, not only
			// between its events.
			time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond)
			switch f {
			case faultKill:
				c.kill()
			case faultRestart:
				require.NoError(t, w.srv.CrashRestart(ctx))
				w.pool.Reset() // its connections died with the server
				c.kill()
			case faultTerminate:
				_, err := w.pool.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1", childAppName)
				require.NoError(t, err)
				c.kill()
			}
			killed = true
			break
		}
		if killed {
			w.expireLeases(t)
			continue
		}
		err := c.cmd.Wait()
		if err != nil {
			// A child that failed on its own (its database connection cut
			// by a restart before it was killed, say): start another.
			if strings.Contains(c.stderr.String(), "blocked:") {
				t.Fatalf("seed %d: the deletion was blocked: %s", seed, strings.TrimSpace(c.stderr.String()))
			}
			t.Logf("child exited: %v: %s", err, strings.TrimSpace(c.stderr.String()))
			w.expireLeases(t)
			continue
		}
		break
	}
	total := points[faultKill] + points[faultRestart] + points[faultTerminate]
	t.Logf("seed %d: %d kill points (%d SIGKILL, %d PostgreSQL crash-restarts, %d terminated sessions), per stage %v, in %s",
		seed, total, points[faultKill], points[faultRestart], points[faultTerminate], perStage, time.Since(started).Round(time.Millisecond))

	var stage string
	require.NoError(t, w.pool.QueryRow(ctx, "SELECT stage FROM community_deletion_requests WHERE id = $1", w.request).Scan(&stage))
	require.Equal(t, string(lifecycle.StageRetentionPending), stage)
	var receipts int
	require.NoError(t, w.pool.QueryRow(ctx, "SELECT count(*) FROM community_deletion_receipts WHERE request_id = $1", w.request).Scan(&receipts))
	require.Equal(t, 1, receipts, "seed %d: the completed deletion has exactly one receipt", seed)
	require.Empty(t, w.leftovers(t, w.target), "nothing of the target is left")
	require.Equal(t, bystanderBefore, w.fingerprint(t, w.bystander), "the bystander is unchanged")
	require.GreaterOrEqual(t, total, kills, "seed %d: fewer kill points than asked", seed)
	for _, s := range []lifecycle.Stage{lifecycle.StageApproved, lifecycle.StageFenced, lifecycle.StageDrained,
		lifecycle.StageBindingsRemoved, lifecycle.StagePostgresPurged, lifecycle.StageCachePurged, lifecycle.StageLogicallyVerified} {
		require.True(t, stageKilled[string(s)], "seed %d: no kill point at %s", seed, s)
	}
}
