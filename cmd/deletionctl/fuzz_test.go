package main

// Fuzz targets for the command line, deletionctl's outside input. Seeds are
// added here and committed under testdata/fuzz/<target>/; run one with e.g.
// go test ./cmd/deletionctl -run '^$' -fuzz '^FuzzParseArgs$'.

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/cliflag/clitest"
)

// command is this command as the shared command-line checks know it.
var command = clitest.Command{Name: "deletionctl", Usage: usage, Run: run, Help: func(args []string) string {
	_, err := parseArgs(args, func(string) string { return "" })
	return helpText(err)
}}

// fzRender writes cfg back as a command line: the command and, before or
// after it, one --name=value flag per setting that differs from what the
// command gets without the flag (and every required one).
func fzRender(cfg config, flagsFirst bool) []string {
	spec, _ := spec(cfg.command)
	accepts := spec.accepts
	required := func(name string) bool { return slices.Contains(spec.required, name) }
	var flags []string
	add := func(name, value string) { flags = append(flags, "--"+name+"="+value) }

	if cfg.databaseURL != "" {
		add("database-url", cfg.databaseURL)
	}
	for _, f := range []struct{ name, value string }{
		{"host", cfg.host}, {"by", cfg.by}, {"reason", cfg.reason}, {"note", cfg.note},
		{"objects", cfg.objects}, {"cache", cfg.cache}, {"metrics-addr", cfg.metricsAddr},
		{"log-level", cfg.logLevel}, {"log-format", cfg.logFormat}, {"owner", cfg.owner},
	} {
		if accepts(f.name) && (f.value != "" || required(f.name)) {
			add(f.name, f.value)
		}
	}
	if accepts("request") && (cfg.requestID != uuid.Nil || required("request")) {
		add("request", cfg.requestID.String())
	}
	for _, p := range cfg.prefixes {
		add("prefix", p)
	}
	if cfg.stage != nil {
		add("stage", cfg.stage.String())
	}
	if cfg.blocked != nil {
		add("blocked", strconv.FormatBool(*cfg.blocked))
	}
	if accepts("limit") {
		add("limit", strconv.Itoa(cfg.limit))
	}
	if cfg.after != nil {
		add("after", encodeCursor(*cfg.after)) // as list prints "next: CURSOR"
	}
	if cfg.json {
		add("json", "true")
	}
	if cfg.reap != 0 {
		add("reap", strconv.Itoa(cfg.reap))
	}
	if cfg.once {
		add("once", "true")
	}
	if cfg.lease != 0 {
		add("lease", cfg.lease.String())
	}
	if cfg.chunkSize != 0 {
		add("chunk-size", strconv.Itoa(cfg.chunkSize))
	}
	if cfg.niceRatio != 0 {
		add("nice-ratio", strconv.FormatFloat(cfg.niceRatio, 'g', -1, 64))
	}
	words := strings.Fields(cfg.command) // "receipt show" is two arguments
	if flagsFirst {
		return append(flags, words...)
	}
	return append(words, flags...)
}

// FuzzParseArgs parses arbitrary command lines. parseArgs never panics and
// fails only with a usage error or a request for help; run turns those into
// exit 2 with exactly one line on stderr and nothing on stdout, or exit 0
// with the usage on stdout, without touching a database. Every command line
// it accepts names a known command with its required flags, and the config
// written back as a canonical command line (flags before or after the
// command, the cursor as list prints it) parses to the same config.
func FuzzParseArgs(f *testing.F) {
	id := "2f1b6c9e-8c1a-4f57-9d7e-0a1b2c3d4e5f"
	cursor := "MjAyNi0wMS0wMlQwMzowNDowNS4xMjM0NTZafDJmMWI2YzllLThjMWEtNGY1Ny05ZDdlLTBhMWIyYzNkNGU1Zg"
	for _, args := range [][]string{
		{"submit", "--host", "a.example", "--by", "alice", "--reason", "asked"},
		{"--database-url", "postgres://flag/db", "leases", "--reap", "10"},
		{"inventory", "--request", id, "--prefix", "b/", "-prefix=a/", "--objects-dir", "/srv/objects"},
		{"approve", "--request=" + id, "--by", "bob", "--note", "ok"},
		{"list", "--stage", "approved", "--blocked", "--limit", "2", "--after", cursor, "--json"},
		{"list", "--blocked=false", "--", "--json"},
		{"inspect", "--json", "--request", id},
		{"abort", "--request", id, "--by", "carol", "--reason", "mistake"},
		{"unblock", "--request", id, "--by", "carol", "--reason", "fixed"},
		{"run", "--once", "--request", id, "--owner", " ops-1 ", "--objects-dir=/o", "--cache", "memory:", "--lease", "90s", "--chunk-size", "500"},
		{"run", "--objects-dir", "/o", "--cache=memory:", "--lease", "2562047h47m16.854775807s"},
		{"run", "--objects-dir", "/o", "--cache=memory:", "--nice-ratio", "0.5"},
		{"run", "--objects-dir", "/o", "--cache=memory:", "--nice-ratio", "NaN"},
		{"run", "--objects", "s3://media/t/?endpoint=http://127.0.0.1:9000&region=us-east-1&path_style=true",
			"--cache", "redis://:pw@127.0.0.1:6379/0?pattern=app:{community}:*", "--metrics-addr", ":9464", "--log-level", "DEBUG", "--log-format", "json"},
		{"run", "--objects", "file:///srv", "--objects-dir", "/srv", "--cache", "memory:"},
		{"run", "--objects", "ftp://x", "--cache", "memory:"},
		{"run", "--objects", "file:///srv", "--cache", "memory://"},
		{"run", "--objects", "file:///srv", "--cache", "memory:", "--metrics-addr", "9464"},
		{"inventory", "--request", id, "--objects", "s3://media"},
		{"health", "--json"},
		{"check", "--json"},
		{"plan", id, "--objects-dir", "/srv/objects", "--json"},
		{"plan", "--host", "a.example"},
		{"plan", "--request", id, id},
		{"receipt", "show", "--request", id, "--json"},
		{"receipt", "show", id},
		{"run", "--once", "--objects-dir", "/o", "--cache", "memory:", "--json", "--log-format", "JSON"},
		{"submit", "--host", "h", "--by", "b", "--json"},
		{"leases", "--reap", "5", "--json"},
		{"help", "receipt", "verify"},
		{"inspect", "-h", "--request"},
		{"help"},
		{"approve", "-h"},
		{"list", "--limit", "many"},
		{"leases", "--bogus\nsecond line"},
		{"submit", "--host", "h", "--by", " \t"},
		{"list", "--after", "%%%"},
		{},
	} {
		f.Add(strings.Join(args, "\x00"), "postgres://env/db", false)
	}
	f.Fuzz(func(t *testing.T, argString, envURL string, flagsFirst bool) {
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

		spec, known := spec(cfg.command)
		require.True(t, known, "accepted unknown command %q", cfg.command)
		for word := range strings.FieldsSeq(cfg.command) {
			require.True(t, slices.Contains(args, word), "the command is among the arguments")
		}
		for _, name := range spec.required {
			require.True(t, slices.ContainsFunc(args, func(a string) bool {
				a = strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
				return a == name || strings.HasPrefix(a, name+"=")
			}), "accepted %q without its required --%s", args, name)
		}
		if cfg.databaseURL == "" {
			require.Empty(t, envURL, "DATABASE_URL fills in a missing --database-url")
		}

		rendered := fzRender(cfg, flagsFirst)
		again, err := parseArgs(rendered, getenv)
		require.NoError(t, err, "%q accepted as %+v, but its rendering %q is refused", args, cfg, rendered)
		if cfg.after != nil {
			require.NotNil(t, again.after)
			require.True(t, cfg.after.CreatedAt.Equal(again.after.CreatedAt), "cursor time %v, re-parsed %v", cfg.after.CreatedAt, again.after.CreatedAt)
			require.Equal(t, cfg.after.ID, again.after.ID)
			cfg.after, again.after = nil, nil
		}
		require.Equal(t, cfg, again, "%q re-rendered as %q", args, rendered)
	})
}

// FuzzCursor decodes arbitrary --after values: decodeCursor never panics,
// and any cursor it accepts encodes (as list prints it) to one it decodes to
// the same position, and whose encoding is then stable.
func FuzzCursor(f *testing.F) {
	f.Add("MjAyNi0wMS0wMlQwMzowNDowNS4xMjM0NTZafDJmMWI2YzllLThjMWEtNGY1Ny05ZDdlLTBhMWIyYzNkNGU1Zg")
	f.Add("MjAyNi0xMS0yOVQyMzo1OTowMS45OTk5OTkrMDE6MDB8MmYxYjZjOWUtOGMxYS00ZjU3LTlkN2UtMGExYjJjM2Q0ZTVm")
	f.Add("")
	f.Add("%%%")
	f.Add("bm90LWEtY3Vyc29y")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := decodeCursor(s)
		if err != nil {
			require.Nil(t, c)
			return
		}
		encoded := encodeCursor(*c)
		again, err := decodeCursor(encoded)
		require.NoError(t, err, "%q decodes to %v, whose encoding %q does not decode", s, c.CreatedAt, encoded)
		require.True(t, c.CreatedAt.Equal(again.CreatedAt))
		require.Equal(t, c.ID, again.ID)
		require.Equal(t, encoded, encodeCursor(*again))
	})
}
