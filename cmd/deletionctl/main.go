// Command deletionctl is the operator CLI of the whole-community deletion
// lifecycle. It submits deletion requests, freezes their inventories,
// approves them (a second person must), lists and inspects them, aborts and
// unblocks them, and reports and reaps serving write leases, through package
// lifecycle. Every command is one transaction of lifecycle.Store: a refused
// command changes nothing.
//
// Usage:
//
//	deletionctl [--database-url URL] <command> [flags]
//
// The commands are submit, inventory, approve, list, inspect, abort, unblock
// and leases; "deletionctl -h" prints the full usage, flags and exit codes.
// Executing approved requests is the executor's job, not this command's.
//
// inventory freezes the schema inventory with a storage manifest that
// declares every given prefix (default "media/<community id>/") EMPTY
// (lifecycle.EmptyKeysDigest, no objects, no bytes). A real deployment
// supplies its object-store inventory instead: it lists each prefix and
// freezes the KeyStreamDigest summaries of what it found.
//
// Exit codes: 0 success, 1 failure, 2 usage error, 3 refused (a lifecycle
// safety refusal, an access denial or a stale lease), 4 not found, 5 invalid
// input. Every error is one line on stderr naming the operation and the
// lifecycle's reason.
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

	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// Exit codes.
const (
	exitOK           = 0
	exitFailure      = 1
	exitUsage        = 2
	exitRefused      = 3
	exitNotFound     = 4
	exitInvalidInput = 5
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
