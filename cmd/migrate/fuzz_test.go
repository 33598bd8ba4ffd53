package main

// A fuzz target for the migration job's command line, its outside input.
// Seeds are added here and committed under testdata/fuzz/FuzzParseArgs/;
// run it with go test ./cmd/migrate -run '^$' -fuzz '^FuzzParseArgs$'.

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/cliflag/clitest"
)

// command is this command as the shared command-line checks know it.
var command = clitest.Command{Name: "migrate", Usage: usage, Run: run}

// fzRender writes cfg back as a canonical command line: the command, its
// VERSION, then one --name=value flag per setting.
func fzRender(cfg config) []string {
	args := []string{cfg.command}
	if commandArgs[cfg.command] != "" {
		args = append(args, strconv.FormatInt(cfg.version, 10))
	}
	if cfg.databaseURL != "" {
		args = append(args, "--database-url="+cfg.databaseURL)
	}
	args = append(args,
		"--lock-timeout="+cfg.lockTimeout.String(),
		"--ddl-lock-timeout="+cfg.ddlLockTimeout.String(),
		"--statement-timeout="+cfg.statementTimeout.String())
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"allow-out-of-order", cfg.allowOutOfOrder}, {"dry-run", cfg.dryRun},
		{"json", cfg.json}, {"fail-on-pending", cfg.failOnPending},
	} {
		if f.set {
			args = append(args, "--"+f.name)
		}
	}
	return args
}

// FuzzParseArgs parses arbitrary command lines (NUL-separated). parseArgs
// never panics and fails only with a usage error or a request for help,
// which run reports as exit 2 and one stderr line, or exit 0 and the usage,
// without touching a database. An accepted command line names a known
// command, a VERSION exactly when the command takes one (never negative,
// at least 1 for up-to), command-specific flags only with their command and
// no negative timeout; written back canonically it parses to the same
// config.
func FuzzParseArgs(f *testing.F) {
	for _, args := range [][]string{
		{"up"},
		{"--database-url", "postgres://flag/db", "up", "--dry-run", "--lock-timeout=2s", "--allow-out-of-order"},
		{"-ddl-lock-timeout", "1s", "-statement-timeout", "30s", "down"},
		{"up-to", "7"},
		{"down-to", "0", "--lock-timeout", "0s"},
		{"status", "--json", "--fail-on-pending"},
		{"up-to", "--", "3"},
		{"up-to", "+0012"},
		{"adopt-legacy-versions", "--lock-timeout", "1m"},
		{"up-to", "0"},
		{"down-to", "-1"},
		{"status", "--dry-run"},
		{"up", "--lock-timeout=-1ns"},
		{"version", "--statement-timeout", "2562047h47m16.854775807s"},
		{"help"},
		{"up", "--nope\nx"},
		{},
	} {
		f.Add(strings.Join(args, "\x00"), "postgres://env/db")
	}
	f.Fuzz(func(t *testing.T, argString, envURL string) {
		args := clitest.SplitArgs(argString)
		getenv := func(name string) string {
			if name == "DATABASE_URL" {
				return envURL
			}
			return ""
		}
		cfg, err := parseArgs(args, getenv)
		if err != nil {
			command.RequireRefusal(t, args, err)
			return
		}

		argName, known := commandArgs[cfg.command]
		require.True(t, known, "accepted unknown command %q", cfg.command)
		require.GreaterOrEqual(t, cfg.version, int64(0))
		if argName == "" {
			require.Zero(t, cfg.version)
		}
		if cfg.command == "up-to" {
			require.Positive(t, cfg.version)
		}
		for name, set := range map[string]bool{"dry-run": cfg.dryRun, "json": cfg.json, "fail-on-pending": cfg.failOnPending} {
			require.True(t, !set || commandFlags[name] == cfg.command, "--%s accepted with %s", name, cfg.command)
		}
		require.False(t, cfg.lockTimeout < 0 || cfg.ddlLockTimeout < 0 || cfg.statementTimeout < 0)
		if cfg.databaseURL == "" {
			require.Empty(t, envURL, "DATABASE_URL fills in a missing --database-url")
		}

		rendered := fzRender(cfg)
		again, err := parseArgs(rendered, getenv)
		require.NoError(t, err, "%q accepted as %+v, but its rendering %q is refused", args, cfg, rendered)
		require.Equal(t, cfg, again, "%q re-rendered as %q", args, rendered)
	})
}
