package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/docsnippet"
	"github.com/tombstoneworks/communitydeletion/receipt"
)

// number parses the first submatch of re in out, a number with commas.
func number(t *testing.T, out, re string) int64 {
	t.Helper()
	m := regexp.MustCompile(re).FindStringSubmatch(out)
	require.NotNil(t, m, "no %s in:\n%s", re, out)
	n, err := strconv.ParseInt(strings.ReplaceAll(m[1], ",", ""), 10, 64)
	require.NoError(t, err)
	return n
}

// readmeOptions parses the options of README.md's demo command.
func readmeOptions(t *testing.T) options {
	t.Helper()
	blocks, err := docsnippet.Parse("../../README.md")
	require.NoError(t, err)
	var commands []string
	for _, b := range blocks {
		if strings.HasPrefix(b.Text, "go run ./cmd/demo") {
			commands = append(commands, strings.TrimSpace(b.Text))
		}
	}
	require.Len(t, commands, 1, "README.md shows the demo command once")
	args, ok := strings.CutPrefix(commands[0], "go run ./cmd/demo")
	require.True(t, ok)
	require.NotContains(t, args, "\n", "one command")
	opts, err := parseOptions(strings.Fields(args), io.Discard)
	require.NoError(t, err, commands[0])
	return opts
}

// The demo deletes one community end to end and proves every check it
// prints; run returns an error naming any check that failed. Its output
// fits on a screen: about 40 lines, none repeated, the environment stated
// once, one line per stage, and numbers that add up. With the servers
// installed (as .ci/run installs them) it deletes from a real S3 server
// and a real Redis; with -stores local from a directory and an in-process
// cache. -keep DIR keeps the receipt and the key, which then verify
// offline with the command it prints. The services run is README.md's
// command, as written there, with -keep added.
func TestDemoDeletesOneCommunityAndKeepsTheOthers(t *testing.T) {
	t.Parallel()
	for mode, want := range map[string][]string{
		storesServices: {"\n  objects: S3 over HTTP, Versity's gateway (a throwaway process)\n", "\n  cache: Redis, redis-server (a throwaway process)\n",
			" absence verified: postgres, objects, cache "},
		// The in-process cache lists nothing of a deployment's cache: the
		// receipt says it was not checked, and so does the demo.
		storesLocal: {"\n  objects: a local directory, ", " (a stand-in: as -stores local asks)\n",
			"\n  cache: in the demo's memory (a stand-in: as -stores local asks)\n",
			" absence verified: postgres, objects; cache not checked ",
			"\n  not checked: the cache (memory): the in-process cache (memory:) lists nothing of the deployment's cache\n"},
	} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			opts, keep := options{stores: mode}, ""
			if mode == storesServices {
				// README.md's command, with -keep: on a machine with the
				// servers installed, as CI's, auto picks them.
				opts = readmeOptions(t)
				require.Equal(t, storesAuto, opts.stores)
				keep = filepath.Join(t.TempDir(), "kept")
				opts.keep = keep
			}
			var buf bytes.Buffer
			require.NoError(t, run(t.Context(), &buf, opts), buf.String())
			out := buf.String()
			for _, w := range want {
				require.Contains(t, out, w)
			}
			lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
			require.LessOrEqual(t, len(lines), 42, "one screen:\n%s", out)
			seen := map[string]bool{}
			for _, line := range lines {
				require.False(t, seen[line] && line != "", "a repeated line %q in:\n%s", line, out)
				seen[line] = true
				require.NotRegexp(t, `\[[a-z]+ [a-z]+|UTC|\+0000|map\[|&\{`, line, "no Go default formats")
			}
			require.NotContains(t, out, "FAIL")
			if mode == storesServices {
				require.NotContains(t, out, "not checked", "Redis is listed by its patterns: its absence is checked")
			}
			require.NotContains(t, out, "docker", "the environment is stated calmly, once")
			require.Equal(t, 1, strings.Count(out, "\n  PostgreSQL "), out)
			require.Regexp(t, `\n  PostgreSQL [\d.]+: (a throwaway cluster from the local server binaries|a throwaway Docker container|the server DATABASE_URL)`, out)
			require.Regexp(t, `\ndeleted alpha\.demo\.example in [0-9.]+ m?s of wall time, setup included: all 8 checks passed\n$`, out)

			// One line per stage the executor moved the request into, each
			// with its time; the total is their sum.
			for _, stage := range []string{"fenced", "drained", "bindings_removed", "postgres_purged", "cache_purged", "logically_verified", "retention_pending"} {
				require.Regexp(t, `(?m)^  `+stage+` +\S.* [0-9.]+ m?s$`, out)
				require.Equal(t, 1, strings.Count(out, "\n  "+stage+" "), stage)
			}
			require.Regexp(t, `(?m)^  total +from the claim to completion \(the demo's wall clock\) +[0-9.]+ m?s$`, out)

			// The numbers add up: the rows purged are those seeded and those
			// the writer added, and the stage lines and the receipt agree.
			seeded := number(t, out, `each with ([\d,]+) rows, 300 files and 50 cache entries`)
			purged := number(t, out, `rows purged: ([\d,]+) = [\d,]+ seeded \+`)
			require.Equal(t, seeded, number(t, out, `rows purged: [\d,]+ = ([\d,]+) seeded \+`))
			written := number(t, out, `rows purged: [\d,]+ = [\d,]+ seeded \+ ([\d,]+) its writer added before the fence`)
			before := number(t, out, `its writer was refused from the fence on: ([\d,]+) writes before`)
			require.Equal(t, seeded+written, purged)
			require.Equal(t, written, before)
			require.Equal(t, purged, number(t, out, `postgres_purged +([\d,]+) rows purged from 7 tables`))
			require.Equal(t, int64(300), number(t, out, `bindings_removed +(\d+) files deleted`))
			require.Equal(t, int64(50), number(t, out, `cache_purged +(\d+) cache entries purged`))

			if keep == "" {
				require.Contains(t, out, "removed at exit: -keep DIR keeps them")
				return
			}
			// -keep: the printed command verifies what was kept, from receipt 1
			// to the head kept beside the export.
			m := regexp.MustCompile(`\n    go run \./cmd/deletionctl receipt verify --dir (\S+) --public-key (\S+) --expect-head (\S+)\n`).FindStringSubmatch(out)
			require.NotNil(t, m, out)
			require.Equal(t, filepath.Join(keep, "receipts"), m[1])
			require.Equal(t, filepath.Join(keep, "receipt.pub"), m[2])
			require.Equal(t, filepath.Join(keep, "head.json"), m[3])
			envs, err := receipt.ReadDir(m[1])
			require.NoError(t, err)
			pub, err := receipt.LoadPublicKey(m[2])
			require.NoError(t, err)
			data, err := os.ReadFile(m[3])
			require.NoError(t, err)
			head, err := receipt.ParseHead(data)
			require.NoError(t, err)
			rep, err := receipt.Verify(envs, pub, receipt.VerifyOpts{Head: &head})
			require.NoError(t, err)
			require.Equal(t, 1, rep.Signed)
			require.True(t, rep.HeadChecked)
			_, err = os.Stat(filepath.Join(keep, "receipt.key"))
			require.NoError(t, err, "the signing key is kept too")
		})
	}
}

// -keep refuses a directory that is not empty, before anything starts:
// its receipts would mix with another run's.
func TestDemoKeepRefusesADirectoryInUse(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "receipt.pub"), []byte("old"), 0o600))
	var out bytes.Buffer
	err := run(t.Context(), &out, options{stores: storesLocal, keep: dir})
	require.ErrorContains(t, err, "the directory is not empty; give a new or empty one")
	require.Empty(t, out.String())
}

// The demo's command line: no flags is auto without -keep; a bad -stores
// or a stray argument is refused.
func TestParseOptions(t *testing.T) {
	opts, err := parseOptions(nil, io.Discard)
	require.NoError(t, err)
	require.Equal(t, options{stores: storesAuto}, opts)
	opts, err = parseOptions([]string{"-stores", "local", "-keep", "d"}, io.Discard)
	require.NoError(t, err)
	require.Equal(t, options{stores: storesLocal, keep: "d"}, opts)
	_, err = parseOptions([]string{"-stores", "s3"}, io.Discard)
	require.ErrorContains(t, err, `-stores must be auto, local or services, got "s3"`)
	_, err = parseOptions([]string{"-nope"}, io.Discard)
	require.ErrorIs(t, err, errFlags)
	_, err = parseOptions([]string{"extra"}, io.Discard)
	require.ErrorContains(t, err, `unexpected argument "extra"`)
}
