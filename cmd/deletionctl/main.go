// Command deletionctl is the operator CLI of the whole-community deletion
// lifecycle. It submits deletion requests, freezes their inventories,
// approves them (a second person must), lists and inspects them, aborts and
// unblocks them, reports and reaps serving write leases and checks the
// control plane's health, through package lifecycle.Operator, and runs the
// executor through lifecycle.Engine. Every command but run is one
// transaction: a refused command changes nothing. The login of
// --database-url must be a member of community_deletion_operator (run:
// community_deletion_executor).
//
// Usage:
//
//	deletionctl [--database-url URL] <command> [flags]
//
// The commands are submit, inventory, approve, list, inspect, abort,
// unblock, leases, health, check, receipt (show, export, verify) and run;
// "deletionctl -h" prints the full usage, flags, environment variables and
// exit codes.
//
// check runs, as the operator, the adoption checks of the public test kit's
// RequireCoverage (package internal/adoptcheck) plus the declared storage
// layout, for a service's CI without Go: exit 0 when all pass, 3 otherwise.
//
// Object stores and caches are named by URL (package executor/storeurl):
// --objects s3://BUCKET/ROOT/?endpoint=…&region=… or file:///DIR
// (--objects-dir DIR is file:///DIR), --cache redis://…, rediss://…,
// redis+cluster://… or memory:, or DELETIONCTL_OBJECTS and
// DELETIONCTL_CACHE. A malformed URL, or one that cannot be opened, is a
// usage error (exit 2).
//
// inventory freezes the schema inventory with a storage manifest of every
// given prefix (default "media/<community id>/"). With an object store it
// lists each prefix there and freezes what it found (executor.SummarizeStorage:
// object count, bytes and KeyStreamDigest). Without one every prefix is
// declared EMPTY (lifecycle.EmptyKeysDigest, no objects, no bytes). The
// approval binds the prefixes, not their keys: run deletes whatever the
// approved prefixes hold when it fences the community, and blocks a request
// whose prefixes do not each name its community.
//
// inspect adds, per destructive step (objects, purge, cache), what is done
// and what is left against the frozen inventory, and for the step in
// progress an estimate of the time left from the rate between the last
// progress and the latest progress point at least a minute older (chunk
// stamps; the purge's per-table updates), with no estimate without a rate.
//
// run executes approved deletions with an executor.Runner over the stores
// --objects and --cache name; both are required (memory: is an empty
// in-process cache for a service that has none). With --once it processes
// one request (--request ID, or the next claimable one) and exits: 0 when
// it completed or nothing was claimable, 3 when the request was blocked
// (executor.ErrBlocked) or a retry was scheduled (executor.ErrRetryScheduled).
// Without --once it runs until SIGINT or SIGTERM and exits 0. Its log goes
// to stdout (log/slog): JSON lines off a terminal, text on one with a
// one-line progress bar between the records; --metrics-addr serves
// Prometheus metrics at /metrics and a health check at /healthz.
//
// receipt show prints a completed deletion's receipt, receipt export writes
// receipts into a directory (package receipt's format), and receipt verify
// checks such a directory offline, never connecting to a database.
//
// Exit codes: 0 success, 1 failure, 2 usage error, 3 refused (a lifecycle
// safety refusal, an access denial, a stale lease, a run --once that
// blocked the request or scheduled a retry, a health finding, a check
// problem, or a failed receipt verification), 4 not
// found, 5 invalid input. Every error is one line on stderr naming the
// operation and the lifecycle's reason.
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
	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// Exit codes, from the table shared with cmd/migrate.
const (
	exitOK           = exitcode.OK
	exitFailure      = exitcode.Failure
	exitUsage        = exitcode.Usage
	exitRefused      = exitcode.Refused
	exitNotFound     = exitcode.NotFound
	exitInvalidInput = exitcode.InvalidInput
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
		err = execute(ctx, cfg, stdout)
	}
	return report(ctx, err, stderr)
}

// exitCode maps the outcome of a run to the process exit code. It is the
// only place that does.
func exitCode(err error) int {
	var usageErr *usageError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &usageErr):
		return exitUsage
	case runRefused(err), verifyFailed(err):
		return exitRefused
	case errors.Is(err, lifecycle.ErrInvalidInput):
		return exitInvalidInput
	case errors.Is(err, lifecycle.ErrNotFound):
		return exitNotFound
	case errors.Is(err, lifecycle.ErrRefused),
		errors.Is(err, lifecycle.ErrAccessDenied),
		errors.Is(err, lifecycle.ErrStaleLease):
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
		msg += " (run 'deletionctl -h' for usage)"
	case code == exitRefused:
		msg = "refused: " + msg
	case code == exitNotFound:
		msg = "not found: " + msg
	case code == exitInvalidInput:
		msg = "invalid input: " + msg
	case ctx.Err() != nil:
		msg = "interrupted: " + msg
	}
	fmt.Fprintln(stderr, "deletionctl: "+oneLine(msg))
	return code
}

// oneLine folds a multi-line error message onto one line.
func oneLine(s string) string {
	lines := strings.FieldsFunc(s, func(r rune) bool { return r == '\n' || r == '\r' })
	return strings.Join(lines, "; ")
}
