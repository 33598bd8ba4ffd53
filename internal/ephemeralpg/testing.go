package ephemeralpg

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"
)

// Timeouts for the test helpers, which have no caller context to honor.
const (
	startTimeout   = 3 * time.Minute // covers a Docker image pull
	cleanupTimeout = time.Minute
)

// StartForTests starts a server for a test binary's TestMain, logging
// notable events to stderr if opts.Logf is nil. On failure it prints why
// and exits with status 1, also outside CI: tests that need PostgreSQL
// never skip silently. Call the returned func after m.Run, before
// os.Exit, to close the server; it reports a failure to stderr.
func StartForTests(opts Options) (*Server, func()) {
	if opts.Logf == nil {
		opts.Logf = func(format string, args ...any) {
			fmt.Fprintf(os.Stderr, format+"\n", args...)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	s, err := Start(ctx, opts)
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: tests need PostgreSQL: %v\n", err)
		os.Exit(1)
	}
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		if err := s.Close(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "ephemeralpg: %v\n", err)
		}
	}
	return s, stop
}

// NewTestDatabase is NewDatabase for tests: it fails the test on error and
// drops the database in t.Cleanup.
func NewTestDatabase(t testing.TB, s *Server, m TemplateBuilder) string {
	t.Helper()
	connString, drop, err := s.NewDatabase(t.Context(), m)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testDrop(t, drop) })
	return connString
}

// NewEmptyTestDatabase is NewEmptyDatabase for tests that run migrations
// themselves: it fails the test on error and drops the database in
// t.Cleanup.
func NewEmptyTestDatabase(t testing.TB, s *Server) string {
	t.Helper()
	connString, drop, err := s.NewEmptyDatabase(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testDrop(t, drop) })
	return connString
}

// testDrop drops a test's database, failing the test on error. It cannot
// use t.Context, which is canceled before cleanups run.
func testDrop(t testing.TB, drop func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	if err := drop(ctx); err != nil {
		t.Error(err)
	}
}

// RunTests is a test binary's whole TestMain: it starts a server with opts
// (failing the binary if none can be had, as StartForTests does), stores it
// in *server for the tests, runs them, closes the server and exits with the
// tests' status.
//
//	var server *ephemeralpg.Server
//
//	func TestMain(m *testing.M) { ephemeralpg.RunTests(m, ephemeralpg.Options{}, &server) }
func RunTests(m *testing.M, opts Options, server **Server) {
	s, stop := StartForTests(opts)
	*server = s
	code := m.Run()
	stop()
	os.Exit(code)
}
