package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/migration"
)

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

func TestParseArgs(t *testing.T) {
	t.Parallel()
	defaults := config{
		lockTimeout:    5 * time.Minute,
		ddlLockTimeout: 5 * time.Second,
	}
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want func(c *config)
	}{
		{"up", []string{"up"}, nil, func(c *config) { c.command = "up" }},
		{"url from env", []string{"up"}, map[string]string{"DATABASE_URL": "postgres://env/db"},
			func(c *config) { c.command = "up"; c.databaseURL = "postgres://env/db" }},
		{"flag beats env", []string{"--database-url", "postgres://flag/db", "up"}, map[string]string{"DATABASE_URL": "postgres://env/db"},
			func(c *config) { c.command = "up"; c.databaseURL = "postgres://flag/db" }},
		{"no url at all is allowed (PG* variables)", []string{"version"}, nil, func(c *config) { c.command = "version" }},
		{"flags after command", []string{"up", "--dry-run", "--lock-timeout=2s", "--allow-out-of-order"}, nil,
			func(c *config) {
				c.command = "up"
				c.dryRun = true
				c.lockTimeout = 2 * time.Second
				c.allowOutOfOrder = true
			}},
		{"single dash flags", []string{"-ddl-lock-timeout", "1s", "-statement-timeout", "30s", "down"}, nil,
			func(c *config) {
				c.command = "down"
				c.ddlLockTimeout = time.Second
				c.statementTimeout = 30 * time.Second
			}},
		{"up-to", []string{"up-to", "7"}, nil, func(c *config) { c.command = "up-to"; c.version = 7 }},
		{"down-to zero, flag after version", []string{"down-to", "0", "--lock-timeout", "0s"}, nil,
			func(c *config) { c.command = "down-to"; c.lockTimeout = 0 }},
		{"status json fail-on-pending", []string{"status", "--json", "--fail-on-pending"}, nil,
			func(c *config) { c.command = "status"; c.json = true; c.failOnPending = true }},
		{"double dash ends flags", []string{"up-to", "--", "3"}, nil, func(c *config) { c.command = "up-to"; c.version = 3 }},
		{"adopt-legacy-versions", []string{"adopt-legacy-versions", "--lock-timeout", "1m"}, nil,
			func(c *config) { c.command = "adopt-legacy-versions"; c.lockTimeout = time.Minute }},
		{"accept-checksums", []string{"accept-checksums"}, nil, func(c *config) { c.command = "accept-checksums" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := parseArgs(tc.args, env(tc.env))
			require.NoError(t, err)
			want := defaults
			tc.want(&want)
			require.Equal(t, want, got)
		})
	}
}

func TestParseArgsUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "missing command"},
		{[]string{"sideways"}, `unknown command "sideways"`},
		{[]string{"up", "extra"}, `up takes no arguments, got "extra"`},
		{[]string{"up-to"}, "up-to needs a VERSION argument"},
		{[]string{"down-to", "1", "2"}, "down-to takes one VERSION argument, got 2 arguments"},
		{[]string{"up-to", "x"}, `up-to: VERSION must be an integer, got "x"`},
		{[]string{"up-to", "0"}, "up-to: VERSION must be at least 1, got 0"},
		{[]string{"down-to", "-1"}, "flag provided but not defined: -1"},
		{[]string{"up", "--bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"up", "--lock-timeout", "soon"}, `invalid value "soon" for flag -lock-timeout`},
		{[]string{"up", "--lock-timeout", "-1s"}, "--lock-timeout must not be negative, got -1s"},
		{[]string{"status", "--dry-run"}, "flag --dry-run is only valid with up"},
		{[]string{"up", "--json"}, "flag --json is only valid with status"},
		{[]string{"version", "--fail-on-pending"}, "flag --fail-on-pending is only valid with status"},
		{[]string{"adopt-legacy-versions", "8"}, `adopt-legacy-versions takes no arguments, got "8"`},
		{[]string{"adopt-legacy-versions", "--dry-run"}, "flag --dry-run is only valid with up"},
		{[]string{"accept-checksums", "2"}, `accept-checksums takes no arguments, got "2"`},
		{[]string{"accept-checksums", "--json"}, "flag --json is only valid with status"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			_, err := parseArgs(tc.args, env(nil))
			var usageErr *usageError
			require.ErrorAs(t, err, &usageErr)
			require.ErrorContains(t, err, tc.want)
			require.Equal(t, exitUsage, exitCode(err))
		})
	}
}

func TestParseArgsHelp(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"-h"}, {"--help"}, {"help"}, {"up", "-h"}} {
		_, err := parseArgs(args, env(nil))
		require.ErrorIs(t, err, errHelp, "%q", args)
	}
}

// Exit codes follow the table shared with deletionctl (internal/exitcode);
// the numbers are spelled out because scripts depend on them.
func TestExitCode(t *testing.T) {
	t.Parallel()
	require.Equal(t, 0, exitCode(nil))
	require.Equal(t, 1, exitCode(errors.New("boom")))
	require.Equal(t, 2, exitCode(fmt.Errorf("parse: %w", usagef("bad"))))
	require.Equal(t, 6, exitCode(fmt.Errorf("%w: 2 not applied", errPending)))
	require.Equal(t, 7, exitCode(fmt.Errorf("up: %w", migration.ErrLockTimeout)))
	require.Equal(t, 1, exitCode(fmt.Errorf("up: %w", migration.ErrLockLost)))
	require.Equal(t, 3, exitCode(fmt.Errorf("up: %w", migration.ErrOutOfOrder)))
	require.Equal(t, 3, exitCode(fmt.Errorf("up: %w: versions 1-8", migration.ErrLegacyVersionsNotAdopted)))
	require.Equal(t, 3, exitCode(fmt.Errorf("adopt legacy versions: %w",
		&migration.AmbiguousLegacyVersionsError{Versions: []int64{1}})))
	require.Equal(t, 3, exitCode(fmt.Errorf("status: %w", &migration.ChecksumMismatchError{
		Problems: []migration.ChecksumProblem{{Version: 2, File: "00002_b.sql", Recorded: "ab", Shipped: "cd"}}})))
	require.Equal(t, 1, exitCode(context.Canceled))
	require.Equal(t, []int{exitOK, exitFailure, exitUsage, exitRefused, exitPending, exitLockTimeout},
		[]int{0, 1, 2, 3, 6, 7})
}

func TestReportPrintsOneLine(t *testing.T) {
	t.Parallel()
	var stderr bytes.Buffer
	code := report(context.Background(), errors.Join(errors.New("first"), errors.New("second")), &stderr)
	require.Equal(t, exitFailure, code)
	require.Equal(t, "migrate: first; second\n", stderr.String())

	stderr.Reset()
	code = report(context.Background(), fmt.Errorf("up: %w: pending 00002_b.sql", migration.ErrOutOfOrder), &stderr)
	require.Equal(t, exitRefused, code)
	require.Contains(t, stderr.String(), "--allow-out-of-order")

	stderr.Reset()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	report(ctx, context.Canceled, &stderr)
	require.Equal(t, "migrate: interrupted: context canceled\n", stderr.String())
}

func TestRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	var stdout, stderr bytes.Buffer
	require.Equal(t, exitOK, run(ctx, []string{"--help"}, &stdout, &stderr))
	require.Contains(t, stdout.String(), "usage: migrate <command>")
	require.Empty(t, stderr.String())

	stdout.Reset()
	require.Equal(t, exitUsage, run(ctx, []string{"up", "--json"}, &stdout, &stderr))
	require.Equal(t, "migrate: flag --json is only valid with status (run 'migrate -h' for usage)\n", stderr.String())
	require.Empty(t, stdout.String())

	// Nothing listens on port 1: the connection fails with one clear line.
	stderr.Reset()
	code := run(ctx, []string{"up", "--database-url", "postgres://nobody@127.0.0.1:1/none?connect_timeout=2"}, &stdout, &stderr)
	require.Equal(t, exitFailure, code)
	require.Empty(t, stdout.String())
	require.True(t, strings.HasPrefix(stderr.String(), "migrate: open migrator: connect: "), stderr.String())
	require.Equal(t, 1, strings.Count(stderr.String(), "\n"))
}

func TestFormatDuration(t *testing.T) {
	t.Parallel()
	require.Equal(t, "12ms", formatDuration(12*time.Millisecond+300*time.Microsecond))
	require.Equal(t, "1.235s", formatDuration(1234567*time.Microsecond))
	require.Equal(t, "850µs", formatDuration(850*time.Microsecond+200))
}
