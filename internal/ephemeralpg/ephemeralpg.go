// Package ephemeralpg provides a throwaway PostgreSQL server for tests and
// demos, and cheap per-test databases cloned from migrated templates.
//
// Start picks the first PostgreSQL it can use, in this order:
//
//  1. the server named by the TEST_DATABASE_URL environment variable;
//  2. a postgres container started with testcontainers-go, if a Docker
//     daemon is reachable;
//  3. a cluster created in a temporary directory with the PostgreSQL
//     server binaries (initdb, pg_ctl) found on PATH or under
//     /usr/lib/postgresql/*/bin.
//
// If none works, Start returns an error that says what was tried; it never
// pretends to succeed. Databases are created by NewDatabase, which migrates a
// template database once per TemplateBuilder hash and clones it with
// CREATE DATABASE ... TEMPLATE, so every test gets a fresh, fully migrated
// database in milliseconds.
//
// A local cluster is removed even if the process dies without Close (a
// panicking test, go test's timeout): a watchdog process stops it and
// deletes its directory when the process exits. Docker containers get the
// same treatment from testcontainers' reaper.
//
// Server.StartReplica starts a hot-standby streaming replica of a server
// run from the local binaries (pg_basebackup into another temporary
// cluster, watched by a watchdog of its own), for tests of code that
// reads replication lag: Replica.PauseReplay stops applying WAL, which the
// primary's pg_stat_replication then shows as a stuck replay_lsn and a
// growing replay_lag, ResumeReplay and WaitCaughtUp let it catch up. A
// TEST_DATABASE_URL or Docker server returns a *ReplicaUnsupportedError.
//
// A typical test binary starts one server in TestMain:
//
//	var server *ephemeralpg.Server
//
//	func TestMain(m *testing.M) {
//		srv, stop := ephemeralpg.StartForTests(ephemeralpg.Options{})
//		server = srv
//		code := m.Run()
//		stop()
//		os.Exit(code)
//	}
//
//	func TestSomething(t *testing.T) {
//		t.Parallel()
//		connString := ephemeralpg.NewTestDatabase(t, server, migrator)
//		// ...
//	}
package ephemeralpg

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
)

// EnvDatabaseURL is the environment variable that, when set, names an
// existing PostgreSQL server for Start to use instead of starting one.
const EnvDatabaseURL = "TEST_DATABASE_URL"

// Name prefixes of the databases this package creates. On a shared
// TEST_DATABASE_URL server they mark what this package owns.
const (
	databasePrefix = "cdtest_"
	templatePrefix = "cdtpl_"
)

// Options configures Start.
type Options struct {
	// Fsync false starts a local or Docker server with fsync=off,
	// synchronous_commit=off and full_page_writes=off, which is fast and
	// fine for throwaway data. True keeps PostgreSQL's production
	// durability defaults (used by benchmarks). It has no effect on a
	// TEST_DATABASE_URL server.
	Fsync bool

	// Logf, if not nil, receives one line per notable event: which source
	// was used, where the cluster lives, when a template is migrated.
	Logf func(format string, args ...any)

	// ExtraConfig holds extra postgresql.conf settings (name -> value),
	// e.g. {"max_connections": "300"}, for a server Start creates (local
	// or Docker). They override this package's defaults. It has no effect
	// on a TEST_DATABASE_URL server.
	ExtraConfig map[string]string
}

// Source says where a Server's PostgreSQL comes from.
type Source string

// The sources Start tries, in order.
const (
	// SourceURL is the existing server named by TEST_DATABASE_URL.
	SourceURL Source = "TEST_DATABASE_URL"
	// SourceDocker is a container started with testcontainers-go.
	SourceDocker Source = "docker"
	// SourceLocal is a temporary cluster run with local server binaries.
	SourceLocal Source = "local binaries"
)

// Server is a PostgreSQL server for tests. It is safe for concurrent use.
type Server struct {
	source  Source
	admin   string // connection string of the admin database
	isURL   bool   // admin is a URL (else keyword/value)
	logf    func(format string, args ...any)
	closeFn func(ctx context.Context) error // stops what Start created; nil for SourceURL
	local   *cluster                        // the cluster of a SourceLocal server; else nil

	mu        sync.Mutex
	closed    bool
	created   map[string]struct{}   // databases created and not yet dropped
	templates map[string]*template  // by template database name
	replicas  map[*Replica]struct{} // started by StartReplica and not yet closed
}

// Start returns a running PostgreSQL server from the first source that
// works: TEST_DATABASE_URL, then Docker, then local server binaries.
//
// If TEST_DATABASE_URL is set but unusable, Start fails rather than
// falling back: an explicit choice should not be silently ignored. If no
// source works, the error lists why each one failed. The caller must Close
// the Server.
func Start(ctx context.Context, opts Options) (*Server, error) {
	logf := opts.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	if _, err := serverSettings(opts); err != nil {
		return nil, fmt.Errorf("ephemeralpg: %w", err)
	}

	if dsn := os.Getenv(EnvDatabaseURL); dsn != "" {
		s, err := startURL(ctx, dsn, logf)
		if err != nil {
			return nil, fmt.Errorf("ephemeralpg: %s is set but unusable: %w", EnvDatabaseURL, err)
		}
		return s, nil
	}

	var errs []error
	s, err := startDocker(ctx, opts, logf)
	if err == nil {
		return s, nil
	}
	logf("ephemeralpg: docker: %v", err)
	errs = append(errs, fmt.Errorf("docker: %w", err))

	s, err = startLocal(ctx, opts, logf)
	if err == nil {
		return s, nil
	}
	errs = append(errs, fmt.Errorf("local binaries: %w", err))

	return nil, fmt.Errorf("ephemeralpg: no PostgreSQL available (%s unset; tried Docker, then local server binaries): %w",
		EnvDatabaseURL, errors.Join(errs...))
}

// newServer returns a Server for the admin connection string.
func newServer(source Source, admin string, logf func(string, ...any), closeFn func(context.Context) error) *Server {
	return &Server{
		source:    source,
		admin:     admin,
		isURL:     strings.HasPrefix(admin, "postgres://") || strings.HasPrefix(admin, "postgresql://"),
		logf:      logf,
		closeFn:   closeFn,
		created:   make(map[string]struct{}),
		templates: make(map[string]*template),
		replicas:  make(map[*Replica]struct{}),
	}
}

// startURL checks that the server named by dsn is reachable and recent
// enough, and returns a Server for it.
func startURL(ctx context.Context, dsn string, logf func(string, ...any)) (*Server, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("parse: %w", err)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))

	var db string
	var version int
	err = conn.QueryRow(ctx, "SELECT current_database(), current_setting('server_version_num')::int").Scan(&db, &version)
	if err != nil {
		return nil, fmt.Errorf("query server: %w", err)
	}
	// DROP DATABASE ... WITH (FORCE) needs PostgreSQL 13.
	if version < 130000 {
		return nil, fmt.Errorf("server version %d is too old: need PostgreSQL 13 or newer", version)
	}
	logf("ephemeralpg: using %s: %s:%d database %q (server_version_num %d)", EnvDatabaseURL, cfg.Host, cfg.Port, db, version)
	return newServer(SourceURL, dsn, logf, nil), nil
}

// Source reports where the server comes from.
func (s *Server) Source() Source { return s.source }

// ConnString returns the connection string of the named database on this
// server, for the admin user. An empty name returns the admin database's
// connection string. For a TEST_DATABASE_URL server in keyword/value form
// the result is in keyword/value form too; otherwise it is a URL.
func (s *Server) ConnString(database string) string {
	if database == "" {
		return s.admin
	}
	if s.isURL {
		u, err := url.Parse(s.admin)
		if err == nil {
			u.Path = "/" + database
			u.RawPath = ""
			return u.String()
		}
	}
	// Keyword/value: a later dbname overrides an earlier one.
	r := strings.NewReplacer(`\`, `\\`, `'`, `\'`)
	return s.admin + " dbname='" + r.Replace(database) + "'"
}

// Close stops and removes whatever Start created, replicas included. On a
// TEST_DATABASE_URL server it drops only the test databases this Server
// created and has not dropped yet; it leaves template databases in place
// for later runs to reuse. Close is idempotent.
func (s *Server) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	leftover := make([]string, 0, len(s.created))
	for name := range s.created {
		leftover = append(leftover, name)
	}
	replicas := slices.Collect(maps.Keys(s.replicas))
	s.mu.Unlock()

	var replicaErrs []error
	for _, r := range replicas {
		if err := r.Close(ctx); err != nil {
			replicaErrs = append(replicaErrs, err)
		}
	}
	if s.closeFn != nil {
		// The whole server goes away; no need to drop anything.
		if err := s.closeFn(ctx); err != nil {
			replicaErrs = append(replicaErrs, fmt.Errorf("ephemeralpg: close %s server: %w", s.source, err))
		}
		return errors.Join(replicaErrs...)
	}
	var errs []error
	for _, name := range leftover {
		if err := s.dropDatabase(ctx, name); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("ephemeralpg: close: %w", err)
	}
	return nil
}

// connectAdmin connects to the admin database.
func (s *Server) connectAdmin(ctx context.Context) (*pgx.Conn, error) {
	conn, err := pgx.Connect(ctx, s.admin)
	if err != nil {
		return nil, fmt.Errorf("connect to admin database: %w", err)
	}
	return conn, nil
}

// errClosed is returned by methods called after Close.
var errClosed = errors.New("ephemeralpg: server is closed")

// uniqueName returns a fresh lowercase database name with the given prefix.
func uniqueName(prefix string) string {
	b := make([]byte, 8)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+).
	return prefix + hex.EncodeToString(b)
}
