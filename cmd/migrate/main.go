// Command migrate is the schema migration job that CI/CD runs against the
// communitydeletion PostgreSQL database. It applies, rolls back and reports
// the embedded goose migrations (communitydeletion.Migrations) through package
// migration.
//
// Usage:
//
//	migrate <command> [flags]
//
// The commands are up, up-to VERSION, down, down-to VERSION, status,
// version, adopt-legacy-versions and accept-checksums; "migrate -h" prints
// the full usage, flags and exit codes.
//
// migrate records each applied migration's checksum (SHA-256 of its file)
// and refuses (exit 3) to migrate a database whose applied migrations differ
// from the shipped files; status shows each checksum state and exits 3 too.
// accept-checksums records the shipped checksums once a person has confirmed
// the database matches them. Migrations applied before checksums existed get
// the shipped checksum on the next run that holds the lock.
//
// migrate records the applied migrations in migration.VersionTable, a table
// of the project's own, so that a service's goose history in
// goose_db_version never collides with ours. A database migrated by a
// release that still recorded them in goose_db_version is refused (exit 3)
// until adopt-legacy-versions has copied that history over once; see
// migration.Migrator.AdoptLegacyVersions.
//
// While it changes the schema, migrate holds the exclusive session-level
// advisory lock communitydeletion.SchemaDestructionLockKey, which holds off
// the destructive deletion stages and another migrate run. A session-level
// lock only works on a connection that stays the same server session for the
// whole run: the job must connect directly to PostgreSQL (or through a
// session-pooling proxy), never through a transaction-pooling PgBouncer, which
// would hand the lock's session to other clients between transactions.
//
// Exit codes, shared with cmd/deletionctl (package internal/exitcode): 0
// success, 1 failure, 2 usage error, 3 refused (out-of-order migrations, a
// history not yet adopted from goose_db_version, an ambiguous adoption,
// applied migrations that differ from the shipped files), 6
// migrations pending (status --fail-on-pending), 7 timed out waiting for the
// advisory lock.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/tombstoneworks/communitydeletion/internal/exitcode"
	"github.com/tombstoneworks/communitydeletion/migration"
)

// Exit codes, from the table shared with cmd/deletionctl.
const (
	exitOK          = exitcode.OK
	exitFailure     = exitcode.Failure
	exitUsage       = exitcode.Usage
	exitRefused     = exitcode.Refused
	exitPending     = exitcode.Pending
	exitLockTimeout = exitcode.LockTimeout
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run parses args, runs the command and returns the process exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := parseArgs(args, os.Getenv)
	if errors.Is(err, errHelp) {
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	if err == nil {
		err = execute(ctx, cfg, stdout, stderr)
	}
	return report(ctx, err, stderr)
}

// exitCode maps the outcome of a run to the process exit code.
func exitCode(err error) int {
	var usageErr *usageError
	var ambiguous *migration.AmbiguousLegacyVersionsError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &usageErr):
		return exitUsage
	case errors.Is(err, errPending):
		return exitPending
	case errors.Is(err, migration.ErrLockTimeout):
		return exitLockTimeout
	case errors.Is(err, migration.ErrOutOfOrder),
		errors.Is(err, migration.ErrLegacyVersionsNotAdopted),
		errors.Is(err, migration.ErrDDLGuardNeedsSuperuser),
		errors.Is(err, migration.ErrChecksumMismatch),
		errors.As(err, &ambiguous):
		return exitRefused
	default:
		return exitFailure
	}
}

// report prints err, if any, as one line on stderr and returns the exit code.
func report(ctx context.Context, err error, stderr io.Writer) int {
	code := exitCode(err)
	if err == nil {
		return code
	}
	msg := err.Error()
	switch {
	case code == exitUsage:
		msg += " (run 'migrate -h' for usage)"
	case errors.Is(err, migration.ErrOutOfOrder):
		msg += "; rerun with --allow-out-of-order to apply them"
	case ctx.Err() != nil:
		msg = "interrupted: " + msg
	}
	fmt.Fprintln(stderr, "migrate: "+oneLine(msg))
	return code
}

// oneLine folds a multi-line error message onto one line.
func oneLine(s string) string {
	lines := strings.FieldsFunc(s, func(r rune) bool { return r == '\n' || r == '\r' })
	return strings.Join(lines, "; ")
}
