package ephemeralpg_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/ephemeralpg"
)

var server *ephemeralpg.Server

func TestMain(m *testing.M) { ephemeralpg.RunTests(m, ephemeralpg.Options{}, &server) }

// tableTemplate creates one table and counts its Migrate calls.
type tableTemplate struct {
	hash  string
	table string
	delay time.Duration // widens the window for concurrent builders
	calls atomic.Int32
}

func (m *tableTemplate) Hash() (string, error) { return m.hash, nil }

func (m *tableTemplate) Migrate(ctx context.Context, connString string) error {
	m.calls.Add(1)
	conn, err := pgx.Connect(ctx, connString)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "CREATE TABLE "+pgx.Identifier{m.table}.Sanitize()+" (id int PRIMARY KEY)")
	if err != nil {
		return fmt.Errorf("create table: %w", err)
	}
	select {
	case <-time.After(m.delay):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// newTemplate returns a tableTemplate whose hash no other test or earlier
// run uses, so the test owns its template and can count Migrate calls. The
// template is dropped at cleanup, so a shared TEST_DATABASE_URL server does
// not collect them.
func newTemplate(t *testing.T, version, table string) *tableTemplate {
	t.Helper()
	hash := fmt.Sprintf("%s/%s/%d/%d", t.Name(), version, os.Getpid(), time.Now().UnixNano())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		conn, err := pgx.Connect(ctx, server.ConnString(""))
		require.NoError(t, err)
		defer conn.Close(ctx)
		dropTemplate(ctx, t, conn, hash)
	})
	return &tableTemplate{hash: hash, table: table}
}

// dropTemplate drops the template database for hash, if there is one.
func dropTemplate(ctx context.Context, t *testing.T, admin *pgx.Conn, hash string) {
	t.Helper()
	name := ephemeralpg.TemplateName(hash)
	var exists bool
	err := admin.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1)", name).Scan(&exists)
	require.NoError(t, err)
	if !exists {
		return
	}
	ident := pgx.Identifier{name}.Sanitize()
	_, err = admin.Exec(ctx, "ALTER DATABASE "+ident+" IS_TEMPLATE false")
	require.NoError(t, err)
	_, err = admin.Exec(ctx, "DROP DATABASE "+ident+" WITH (FORCE)")
	require.NoError(t, err)
}

func connect(t *testing.T, connString string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), connString)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

func tables(t *testing.T, conn *pgx.Conn) []string {
	t.Helper()
	rows, err := conn.Query(t.Context(),
		"SELECT table_name::text FROM information_schema.tables WHERE table_schema = 'public' ORDER BY 1")
	require.NoError(t, err)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return names
}

func TestSource(t *testing.T) {
	t.Parallel()
	require.Contains(t,
		[]ephemeralpg.Source{ephemeralpg.SourceURL, ephemeralpg.SourceDocker, ephemeralpg.SourceLocal},
		server.Source())
	t.Logf("source: %s", server.Source())

	var one int
	conn := connect(t, server.ConnString(""))
	require.NoError(t, conn.QueryRow(t.Context(), "SELECT 1").Scan(&one))
	require.Equal(t, 1, one)
}

func TestNewDatabaseIsolated(t *testing.T) {
	t.Parallel()
	m := newTemplate(t, "v1", "widgets")

	a := connect(t, ephemeralpg.NewTestDatabase(t, server, m))
	b := connect(t, ephemeralpg.NewTestDatabase(t, server, m))

	_, err := a.Exec(t.Context(), "CREATE TABLE only_in_a (id int)")
	require.NoError(t, err)
	_, err = a.Exec(t.Context(), "INSERT INTO widgets VALUES (1)")
	require.NoError(t, err)

	require.Equal(t, []string{"only_in_a", "widgets"}, tables(t, a))
	require.Equal(t, []string{"widgets"}, tables(t, b))
	var n int
	require.NoError(t, b.QueryRow(t.Context(), "SELECT count(*) FROM widgets").Scan(&n))
	require.Zero(t, n)
	require.EqualValues(t, 1, m.calls.Load())
}

func TestTemplateMigratedOnce(t *testing.T) {
	t.Parallel()
	m := newTemplate(t, "v1", "widgets")
	m.delay = 200 * time.Millisecond

	const n = 20
	var wg sync.WaitGroup
	connStrings := make([]string, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			var drop func(context.Context) error
			connStrings[i], drop, errs[i] = server.NewDatabase(t.Context(), m)
			if errs[i] == nil {
				t.Cleanup(func() { require.NoError(t, drop(context.Background())) })
			}
		})
	}
	wg.Wait()

	for _, err := range errs {
		require.NoError(t, err)
	}
	require.EqualValues(t, 1, m.calls.Load())
	seen := make(map[string]bool)
	for _, cs := range connStrings {
		require.False(t, seen[cs], "duplicate database %s", cs)
		seen[cs] = true
		require.Equal(t, []string{"widgets"}, tables(t, connect(t, cs)))
	}
}

func TestDifferentHashesDifferentTemplates(t *testing.T) {
	t.Parallel()
	m1 := newTemplate(t, "v1", "widgets")
	m2 := newTemplate(t, "v2", "gadgets")

	require.Equal(t, []string{"widgets"}, tables(t, connect(t, ephemeralpg.NewTestDatabase(t, server, m1))))
	require.Equal(t, []string{"gadgets"}, tables(t, connect(t, ephemeralpg.NewTestDatabase(t, server, m2))))
	require.Equal(t, []string{"widgets"}, tables(t, connect(t, ephemeralpg.NewTestDatabase(t, server, m1))))
	require.EqualValues(t, 1, m1.calls.Load())
	require.EqualValues(t, 1, m2.calls.Load())
}

func TestNewEmptyTestDatabase(t *testing.T) {
	t.Parallel()
	conn := connect(t, ephemeralpg.NewEmptyTestDatabase(t, server))
	require.Empty(t, tables(t, conn))
}

func TestDropRemovesDatabase(t *testing.T) {
	t.Parallel()
	m := newTemplate(t, "v1", "widgets")
	connString, drop, err := server.NewDatabase(t.Context(), m)
	require.NoError(t, err)
	cfg, err := pgx.ParseConfig(connString)
	require.NoError(t, err)

	// A session left open must not block the drop.
	conn, err := pgx.Connect(t.Context(), connString)
	require.NoError(t, err)
	defer conn.Close(context.Background())

	require.NoError(t, drop(t.Context()))
	require.NoError(t, drop(t.Context()), "drop is idempotent")

	var exists bool
	admin := connect(t, server.ConnString(""))
	require.NoError(t, admin.QueryRow(t.Context(),
		"SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1)", cfg.Database).Scan(&exists))
	require.False(t, exists)
}

func TestMigrateErrorIsReported(t *testing.T) {
	t.Parallel()
	m := newTemplate(t, "v1", "") // empty identifier: invalid
	_, _, err := server.NewDatabase(t.Context(), m)
	require.ErrorContains(t, err, "migrate")

	// The failed template is not cached: a fixed migrator with the same
	// hash builds it.
	m.table = "widgets"
	require.Equal(t, []string{"widgets"}, tables(t, connect(t, ephemeralpg.NewTestDatabase(t, server, m))))
	require.EqualValues(t, 2, m.calls.Load())
}

func TestIncompleteTemplateIsRebuilt(t *testing.T) {
	t.Parallel()
	m := newTemplate(t, "v1", "widgets")

	// A process that crashed mid-migration leaves the template database
	// behind without IS_TEMPLATE.
	admin := connect(t, server.ConnString(""))
	_, err := admin.Exec(t.Context(), "CREATE DATABASE "+pgx.Identifier{ephemeralpg.TemplateName(m.hash)}.Sanitize())
	require.NoError(t, err)

	conn := connect(t, ephemeralpg.NewTestDatabase(t, server, m))
	require.Equal(t, []string{"widgets"}, tables(t, conn))
	require.EqualValues(t, 1, m.calls.Load())
}

func TestDroppedTemplateIsRebuilt(t *testing.T) {
	t.Parallel()
	m := newTemplate(t, "v1", "widgets")
	ephemeralpg.NewTestDatabase(t, server, m)

	// Someone prunes the server while this process holds the template as
	// ready.
	dropTemplate(t.Context(), t, connect(t, server.ConnString("")), m.hash)

	conn := connect(t, ephemeralpg.NewTestDatabase(t, server, m))
	require.Equal(t, []string{"widgets"}, tables(t, conn))
	require.EqualValues(t, 2, m.calls.Load())
}

// helperHashEnv passes a Migrator hash to TestHelperProcess.
const helperHashEnv = "EPHEMERALPG_TEST_HELPER_HASH"

var migrateCallsLine = regexp.MustCompile(`(?m)^migrate calls: (\d+)$`)

func TestTemplateMigratedOnceAcrossProcesses(t *testing.T) {
	t.Parallel()
	m := newTemplate(t, "v1", "widgets")

	// Each process is this test binary running TestHelperProcess against
	// this test's server, as if it were a shared TEST_DATABASE_URL server.
	const procs = 4
	outs := make([][]byte, procs)
	errs := make([]error, procs)
	var wg sync.WaitGroup
	for i := range procs {
		wg.Go(func() {
			cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
			cmd.Env = append(os.Environ(), helperHashEnv+"="+m.hash, ephemeralpg.EnvDatabaseURL+"="+server.ConnString(""))
			outs[i], errs[i] = cmd.CombinedOutput()
		})
	}
	wg.Wait()

	total := 0
	for i := range procs {
		require.NoError(t, errs[i], "process %d:\n%s", i, outs[i])
		match := migrateCallsLine.FindSubmatch(outs[i])
		require.NotNil(t, match, "process %d:\n%s", i, outs[i])
		n, err := strconv.Atoi(string(match[1]))
		require.NoError(t, err)
		total += n
	}
	require.Equal(t, 1, total, "Migrate calls across %d processes", procs)
}

// TestHelperProcess is a child process of
// TestTemplateMigratedOnceAcrossProcesses; run directly, it does nothing.
func TestHelperProcess(t *testing.T) {
	t.Parallel()
	hash := os.Getenv(helperHashEnv)
	if hash == "" {
		return
	}
	m := &tableTemplate{hash: hash, table: "widgets", delay: 300 * time.Millisecond}
	conn := connect(t, ephemeralpg.NewTestDatabase(t, server, m))
	require.Equal(t, []string{"widgets"}, tables(t, conn))
	fmt.Printf("migrate calls: %d\n", m.calls.Load())
}

// crashEnv makes TestHelperCrash start a local cluster and exit without
// closing it.
const crashEnv = "EPHEMERALPG_TEST_HELPER_CRASH"

var clusterLine = regexp.MustCompile(`(?m)^cluster: (\S+) (\S+)$`)

func TestLocalClusterRemovedWhenProcessDies(t *testing.T) {
	t.Parallel()
	if _, err := ephemeralpg.FindBinDir(); err != nil {
		t.Skipf("no local PostgreSQL server binaries: %v", err)
	}

	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestHelperCrash$", "-test.count=1")
	// The child's TestMain uses this test's server; TestHelperCrash starts
	// a local cluster of its own.
	cmd.Env = append(os.Environ(), crashEnv+"=1", ephemeralpg.EnvDatabaseURL+"="+server.ConnString(""))
	out, err := cmd.CombinedOutput()
	var exitErr *exec.ExitError
	require.ErrorAs(t, err, &exitErr, "%s", out)
	require.Equal(t, 3, exitErr.ExitCode(), "%s", out)
	match := clusterLine.FindSubmatch(out)
	require.NotNil(t, match, "%s", out)
	dir, connString := string(match[1]), string(match[2])

	require.Eventually(t, func() bool {
		_, err := os.Stat(dir)
		return errors.Is(err, fs.ErrNotExist)
	}, 30*time.Second, 50*time.Millisecond, "cluster directory %s outlived its process", dir)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, connString)
	if err == nil {
		_ = conn.Close(ctx)
	}
	require.Error(t, err, "server outlived its process")
}

// TestHelperCrash is a child process of
// TestLocalClusterRemovedWhenProcessDies; run directly, it does nothing.
func TestHelperCrash(t *testing.T) {
	t.Parallel()
	if os.Getenv(crashEnv) == "" {
		return
	}
	s, err := ephemeralpg.StartLocal(t.Context(), ephemeralpg.Options{}, t.Logf)
	require.NoError(t, err)
	var dir string
	conn := connect(t, s.ConnString(""))
	require.NoError(t, conn.QueryRow(t.Context(), "SELECT current_setting('unix_socket_directories')").Scan(&dir))
	fmt.Printf("cluster: %s %s\n", dir, s.ConnString(""))
	os.Exit(3) // no Close, no cleanups
}
