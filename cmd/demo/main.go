// Command demo is the project's first command. It shows a whole community
// deletion, end to end, on a throwaway PostgreSQL (DATABASE_URL or
// TEST_DATABASE_URL if set, else Docker, else the local PostgreSQL binaries):
// it runs the migration job, registers the fixture tenant tables, creates
// three communities with rows, files in an object store and cache entries,
// keeps a writer running against each, and deletes one of them with the
// executor runtime — submitted by one operator, approved by another, with a
// receipt signing key it generates. It prints, in one screen, where its
// PostgreSQL, object store and cache come from, one line per stage with its
// counts and the time it took, the checks, and the deletion's receipt,
// which it exports and verifies offline with the public key. It exits 0
// only if every check passes: the receipt verifies, the target is gone
// everywhere, the rows purged add up to those seeded and written, the
// other two communities' rows, files and cache entries are unchanged,
// their writers kept succeeding, and the target's writer was refused from
// the fence on.
//
// The stores are opened from URLs, as deletionctl run opens them. When
// Versity's S3 gateway (versitygw) is installed the objects live in a real
// S3 server over HTTP, else in a temporary directory (file://); when
// redis-server is installed the cache is a real Redis, else in-process
// (memory:). Both servers are throwaway processes the demo stops (a watchdog
// stops them even if it dies); the output says which stores it used.
// -stores local forces the stand-ins, -stores services the servers.
// -keep DIR keeps the receipts and the signing key in DIR (new or empty),
// and the demo prints the deletionctl command that verifies them again.
//
// Run it with: go run ./cmd/demo
package main

import (
	"context"
	"crypto/ed25519"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tombstoneworks/communitydeletion/executor"
	"github.com/tombstoneworks/communitydeletion/internal/ephemeralpg"
	"github.com/tombstoneworks/communitydeletion/internal/fixture"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
	"github.com/tombstoneworks/communitydeletion/migration"
)

// options are the demo's flags.
type options struct {
	stores string // storesAuto, storesLocal or storesServices
	keep   string // a directory to keep the receipts and key in; "" removes them at exit
}

func main() {
	opts, err := parseOptions(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if errors.Is(err, errFlags) { // the flag package has printed why, with the usage
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "demo: %v\n", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err = run(ctx, os.Stdout, opts)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "demo: %v\n", err)
		os.Exit(1)
	}
}

// errFlags marks a command line the flag package refused and has already
// explained on the usage writer.
var errFlags = errors.New("bad flags")

// parseOptions parses the demo's command line (without the program name),
// writing usage to usage on -h or a bad flag.
func parseOptions(args []string, usage io.Writer) (options, error) {
	var opts options
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(usage)
	fs.StringVar(&opts.stores, "stores", storesAuto, "which stores: auto (the servers that are installed), local (file store, in-process cache) or services (versitygw and redis-server)")
	fs.StringVar(&opts.keep, "keep", "", "keep the receipts and the signing key in `DIR` (new or empty), to verify them again with deletionctl receipt verify")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return options{}, err //nolint:wrapcheck // the usage is printed; nothing to add
		}
		return options{}, fmt.Errorf("%w: %w", errFlags, err)
	}
	if fs.NArg() > 0 {
		return options{}, fmt.Errorf("unexpected argument %q: the demo takes only -stores and -keep", fs.Arg(0))
	}
	if opts.stores != storesAuto && opts.stores != storesLocal && opts.stores != storesServices {
		return options{}, fmt.Errorf("-stores must be auto, local or services, got %q", opts.stores)
	}
	return opts, nil
}

// keepDir prepares -keep's directory: absolute, created if missing, and
// empty, so that the receipts exported there are this run's alone.
func keepDir(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("-keep %s: %w", dir, err)
	}
	if err := os.MkdirAll(abs, 0o750); err != nil {
		return "", fmt.Errorf("-keep %s: %w", dir, err)
	}
	entries, err := os.ReadDir(abs)
	if err != nil {
		return "", fmt.Errorf("-keep %s: %w", dir, err)
	}
	if len(entries) > 0 {
		return "", fmt.Errorf("-keep %s: the directory is not empty; give a new or empty one, so that its receipts are this run's", dir)
	}
	return abs, nil
}

func run(ctx context.Context, out io.Writer, opts options) error {
	started := time.Now()
	keyDir, kept := "", opts.keep != ""
	if kept {
		var err error
		if keyDir, err = keepDir(opts.keep); err != nil {
			return err
		}
	}
	if url := os.Getenv("DATABASE_URL"); url != "" && os.Getenv(ephemeralpg.EnvDatabaseURL) == "" {
		os.Setenv(ephemeralpg.EnvDatabaseURL, url)
	}
	// How the server was found (which sources were tried) is for the
	// error, should none work; the output says once where it came from.
	server, err := ephemeralpg.Start(ctx, ephemeralpg.Options{})
	if err != nil {
		return fmt.Errorf("start PostgreSQL: %w", err)
	}
	defer server.Close(context.WithoutCancel(ctx))
	url, drop, err := server.NewEmptyDatabase(ctx)
	if err != nil {
		return fmt.Errorf("create database: %w", err)
	}
	defer func() { _ = drop(context.WithoutCancel(ctx)) }()

	applied, err := migrate(ctx, url)
	if err != nil {
		return err
	}
	// The demo's own connection owns the schema and sets up the world; every
	// lifecycle call and every live write connects as a login of the
	// deployment role it needs.
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer pool.Close()
	if keyDir == "" {
		if keyDir, err = os.MkdirTemp("", "demo-receipts-"); err != nil {
			return fmt.Errorf("create the receipt key directory: %w", err)
		}
		defer os.RemoveAll(keyDir)
	}
	keys, err := generateKeys(keyDir, kept)
	if err != nil {
		return err
	}
	roles, err := connectRoles(ctx, url, keys.private)
	if err != nil {
		return err
	}
	defer roles.close()
	st, err := openStores(ctx, opts.stores)
	if err != nil {
		return err
	}
	defer st.close()

	var version string
	if err := pool.QueryRow(ctx, "SELECT pg_catalog.current_setting('server_version')").Scan(&version); err != nil {
		return fmt.Errorf("read the server's version: %w", err)
	}
	fmt.Fprintln(out, "communitydeletion demo: delete one of three communities while a writer runs against each")
	fmt.Fprintf(out, "  PostgreSQL %s: %s\n", strings.Fields(version)[0], describeSource(server.Source()))
	fmt.Fprintf(out, "  objects: %s\n  cache: %s\n", st.objectsKind, st.cacheKind)
	fmt.Fprintf(out, "  schema: %d migrations; %d fixture tables (%d deleted from, %d kept with the tenant cleared); files under media/{tenant}/ and uploads/{tenant}/\n",
		applied, len(fixture.Tables)+len(fixture.NullifyTables), len(fixture.Tables), len(fixture.NullifyTables))
	fmt.Fprintln(out, "  logins: demo_alice and demo_bob (operators), demo_executor (the executor), demo_web (the service's writers)")

	w, err := buildWorld(ctx, pool, st)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\nseeded: three communities, each with %s rows, %d files and %d cache entries\n", thousands(w.rowsEach), filesEach, cacheEach)
	for _, c := range w.communities {
		role := "kept"
		if c == w.target {
			role = "to delete"
		}
		fmt.Fprintf(out, "  %-19s %s  %s\n", c.host, c.id, role)
	}
	before, err := w.snapshot(ctx)
	if err != nil {
		return err
	}

	writers := startWriters(ctx, roles.web, w)
	deletion, err := deleteTarget(ctx, out, roles, w)
	writerResults := writers.stop()
	if err != nil {
		return err
	}
	after, err := w.snapshot(ctx)
	if err != nil {
		return err
	}
	return report(ctx, out, pool, w, deletion, before, after, writerResults, keys, roles.alice, started)
}

// describeSource says where the demo's PostgreSQL comes from.
func describeSource(source ephemeralpg.Source) string {
	switch source {
	case ephemeralpg.SourceURL:
		return "the server DATABASE_URL (or TEST_DATABASE_URL) names, in a database of its own the demo drops"
	case ephemeralpg.SourceDocker:
		return "a throwaway Docker container"
	case ephemeralpg.SourceLocal:
		return "a throwaway cluster from the local server binaries"
	}
	return string(source)
}

// migrate runs the migration job's library, registers the fixture and
// declares its storage layout, as the schema's owner, and returns how many
// migrations it applied.
func migrate(ctx context.Context, url string) (int, error) {
	migrator, err := migration.Open(ctx, url, migration.WithLockTimeout(time.Minute))
	if err != nil {
		return 0, fmt.Errorf("open migrator: %w", err)
	}
	defer migrator.Close()
	applied, err := migrator.Up(ctx)
	if err != nil {
		return 0, fmt.Errorf("migrate up: %w", err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return 0, fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := fixture.Apply(ctx, conn); err != nil {
		return 0, err
	}
	if err := fixture.DeclareLayout(ctx, conn); err != nil {
		return 0, err
	}
	return len(applied), nil
}

// demoLogins are the logins the demo connects as: two operators (the
// two-person rule compares database roles), the executor, and the web
// service that keeps writing.
var demoLogins = []fixture.Login{
	{Name: "demo_alice", Password: "demo", Member: "community_deletion_operator"},
	{Name: "demo_bob", Password: "demo", Member: "community_deletion_operator"},
	{Name: "demo_executor", Password: "demo", Member: "community_deletion_executor"},
	{Name: "demo_web", Password: "demo", Member: "community_deletion_serving"},
}

// roles holds the demo's three audiences, each over its own login: the two
// operators' lifecycle.Operator, the executor's lifecycle.Engine, and the web
// service's pool (its writes go straight to its tenant tables, through the
// write fence).
type roles struct {
	alice, bob *lifecycle.Operator
	executor   *lifecycle.Engine
	web        *pgxpool.Pool
	pools      []*pgxpool.Pool
}

// connectRoles creates the demo's logins and connects as each.
// The executor's Engine signs each receipt with receiptKey.
func connectRoles(ctx context.Context, url string, receiptKey ed25519.PrivateKey) (*roles, error) {
	if err := fixture.EnsureLogins(ctx, url, demoLogins); err != nil {
		return nil, err
	}
	r := &roles{}
	connect := func(login fixture.Login) (*pgxpool.Pool, error) {
		loginURL, err := fixture.LoginConnString(url, login.Name, login.Password)
		if err != nil {
			return nil, err
		}
		pool, err := pgxpool.New(ctx, loginURL)
		if err != nil {
			return nil, fmt.Errorf("connect as %s: %w", login.Name, err)
		}
		r.pools = append(r.pools, pool)
		return pool, nil
	}
	var pools [4]*pgxpool.Pool
	for i, login := range demoLogins {
		pool, err := connect(login)
		if err != nil {
			r.close()
			return nil, err
		}
		pools[i] = pool
	}
	var err error
	if r.alice, err = lifecycle.NewOperator(ctx, pools[0], nil); err == nil {
		if r.bob, err = lifecycle.NewOperator(ctx, pools[1], nil); err == nil {
			r.executor, err = lifecycle.NewEngine(ctx, pools[2], &lifecycle.Opts{ReceiptKey: receiptKey})
		}
	}
	if err != nil {
		r.close()
		return nil, err
	}
	r.web = pools[3]
	return r, nil
}

func (r *roles) close() {
	for _, pool := range r.pools {
		pool.Close()
	}
}

// newRunner is the executor the demo deletes with.
func newRunner(engine *lifecycle.Engine, w *world, progress func(executor.Event)) (*executor.Runner, error) {
	return executor.New(executor.Config{
		Engine:            engine,
		Objects:           w.stores.objects,
		Cache:             w.stores.cache,
		Owner:             "demo-executor",
		LeaseDuration:     30 * time.Second,
		HeartbeatInterval: 5 * time.Second,
		DrainTimeout:      10 * time.Second,
		ChunkSize:         100,
		RetryBase:         100 * time.Millisecond,
		Purge:             lifecycle.PurgeOptions{TxBudget: 50 * time.Millisecond},
		Progress:          progress,
	})
}
