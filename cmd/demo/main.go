// Command demo is the project's first command: it starts a throwaway
// PostgreSQL (DATABASE_URL or TEST_DATABASE_URL if set, else Docker, else the
// local PostgreSQL binaries), runs the migration job against it, registers the
// fixture tenant tables, and prints the migration status and the deletion
// catalog check. It exits non-zero if any step fails or the catalog drifts.
//
// Run it with: go run ./cmd/demo
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tombstoneworks/communitydeletion/ephemeralpg"
	"github.com/tombstoneworks/communitydeletion/fixture"
	"github.com/tombstoneworks/communitydeletion/migration"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "demo: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out io.Writer) error {
	if url := os.Getenv("DATABASE_URL"); url != "" && os.Getenv(ephemeralpg.EnvDatabaseURL) == "" {
		os.Setenv(ephemeralpg.EnvDatabaseURL, url)
	}
	server, err := ephemeralpg.Start(ctx, ephemeralpg.Options{
		Logf: func(format string, args ...any) { fmt.Fprintf(out, "server: "+format+"\n", args...) },
	})
	if err != nil {
		return fmt.Errorf("start PostgreSQL: %w", err)
	}
	defer server.Close(context.WithoutCancel(ctx))
	url, drop, err := server.NewEmptyDatabase(ctx)
	if err != nil {
		return fmt.Errorf("create database: %w", err)
	}
	defer drop(context.WithoutCancel(ctx))

	migrator, err := migration.Open(ctx, url, migration.WithLockTimeout(time.Minute))
	if err != nil {
		return fmt.Errorf("open migrator: %w", err)
	}
	defer migrator.Close()
	applied, err := migrator.Up(ctx)
	if err != nil {
		return fmt.Errorf("migrate up: %w", err)
	}
	fmt.Fprintf(out, "\nmigrate up: applied %d migrations\n", len(applied))
	for _, result := range applied {
		fmt.Fprintf(out, "  applied %s (%s)\n", result.File, result.Duration.Round(time.Millisecond))
	}
	status, err := migrator.Status(ctx)
	if err != nil {
		return fmt.Errorf("migration status: %w", err)
	}
	fmt.Fprintln(out, "\nmigrate status:")
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  version\tstate\tfile\t")
	for _, s := range status {
		fmt.Fprintf(tw, "  %d\t%s\t%s\t\n", s.Version, s.State, s.File)
	}
	tw.Flush()

	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := fixture.Apply(ctx, conn); err != nil {
		return err
	}
	rows, err := conn.Query(ctx, "SELECT table_name, purge_action FROM community_scoped_tables ORDER BY table_name")
	if err != nil {
		return fmt.Errorf("list registered tables: %w", err)
	}
	registered, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct{ Table, Action string }])
	if err != nil {
		return fmt.Errorf("list registered tables: %w", err)
	}
	fmt.Fprintf(out, "\nregistered tenant tables (fixture): %d\n", len(registered))
	for _, r := range registered {
		fmt.Fprintf(out, "  %-22s %s\n", r.Table, r.Action)
	}
	rows, err = conn.Query(ctx, "SELECT table_name, problem FROM community_deletion_catalog_drift()")
	if err != nil {
		return fmt.Errorf("check catalog: %w", err)
	}
	drift, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct{ Table, Problem string }])
	if err != nil {
		return fmt.Errorf("check catalog: %w", err)
	}
	if len(drift) > 0 {
		return fmt.Errorf("catalog drift: %v", drift)
	}
	fmt.Fprintln(out, "\ncatalog check: no drift (every tenant table is registered and fenced)")
	return nil
}
