// Command deletionctl is the operator CLI of the whole-community deletion
// lifecycle. It plans deletions (what one removes, before anything is
// fenced), submits deletion requests, freezes their inventories, approves
// them (a second person must), lists and inspects them with why each waits,
// aborts and unblocks them, reports and reaps serving write leases, checks
// the control plane's health and a service's adoption, through package
// lifecycle.Operator, runs the executor through lifecycle.Engine, and shows,
// exports and verifies receipts. A command that changes something makes its
// change in one transaction: a refused command changes nothing. The login
// of --database-url must be a member of community_deletion_operator (run:
// community_deletion_executor).
//
// Usage:
//
//	deletionctl [--database-url URL] <command> [flags]
//
// The commands are submit, plan, inventory, approve, protect, unprotect,
// protection, list, inspect, abort, unblock, leases, health, check, run and
// receipt (show, export, verify); their table is commands, in spec.go, from
// which the usage, each command's --help (its flags, one example, its exit
// codes) and the check of which flags a command takes are made. Every
// command takes --json; docs/deletionctl.md documents each one's JSON.
//
// Every failure is one line on stderr: what was refused (the command and
// its subject), why (the lifecycle's reason, without the context it was
// wrapped in) and what to do next (opError, in errors.go).
//
// plan reads, as the operator, the request or community, the registry with
// the community's row counts, the purge order, the storage layout (and the
// object store, when given), the protection and the catalog's health, and
// prints the deletion's sections (tables, objects, cache, excluded tables,
// drift) with the frozen inventory's figures where one exists. inspect,
// list and plan give each request a claim (claim.go): whether an executor
// can take it now and, if not, why and what to do.
//
// Object stores and caches are named by URL (package executor/storeurl):
// --objects s3://BUCKET/ROOT/?endpoint=…&region=… or file:///DIR
// (--objects-dir DIR is file:///DIR), --cache redis://…, rediss://…,
// redis+cluster://… or memory:, or DELETIONCTL_OBJECTS and
// DELETIONCTL_CACHE. A malformed URL, or one that cannot be opened, is a
// usage error (exit 2).
//
// run executes approved deletions with an executor.Runner over the stores
// --objects and --cache name. With --once it processes one request
// (--request ID, or the next claimable one) and exits: 0 when it completed,
// nothing was claimable, or the named request is complete already; 3 when
// the request was blocked (executor.ErrBlocked), a retry was scheduled
// (executor.ErrRetryScheduled), or the named request could not be claimed
// (its claim says why). Without --once it runs until SIGINT or SIGTERM and
// exits 0. Its log goes to stdout (log/slog): JSON lines off a terminal (or
// with --json), text on one with a one-line progress bar between the
// records; --metrics-addr serves Prometheus metrics at /metrics and a
// health check at /healthz.
//
// Exit codes, from the table shared with cmd/migrate (internal/exitcode): 0
// success, 1 failure, 2 usage error, 3 refused, 4 not found, 5 invalid
// input.
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
	return runEnv(ctx, args, os.Getenv, stdout, stderr)
}

// runEnv is run with the environment variables getenv returns.
func runEnv(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	cfg, err := parseArgs(args, getenv)
	if errors.Is(err, errHelp) {
		fmt.Fprint(stdout, helpText(err))
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
	msg := describe(err)
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
