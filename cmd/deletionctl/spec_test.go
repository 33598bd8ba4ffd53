package main

import (
	"bufio"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/exitcode"
	"github.com/tombstoneworks/communitydeletion/internal/fixture"
	"github.com/tombstoneworks/communitydeletion/receipt"
)

// The exit codes a command may document: the shared table's.
var sharedCodes = []int{exitcode.OK, exitcode.Failure, exitcode.Usage, exitcode.Refused, exitcode.NotFound, exitcode.InvalidInput}

// Every command has its own --help, which fits on a screen: its synopsis,
// each flag it takes, --json, one example that parses to that command, and
// its exit codes, each from the shared table. "help COMMAND" and -h print
// the same; the whole usage names every command.
func TestEveryCommandHasItsOwnHelp(t *testing.T) {
	t.Parallel()
	for _, c := range commands {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			words := strings.Fields(c.name)
			for _, args := range [][]string{append(slices.Clone(words), "--help"), append(slices.Clone(words), "-h"), append([]string{"help"}, words...)} {
				code, stdout, stderr := cli(t, args...)
				require.Equal(t, exitOK, code, "%q", args)
				require.Empty(t, stderr)
				require.Equal(t, c.help(), stdout, "%q", args)
			}
			help := c.help()
			require.True(t, strings.HasPrefix(help, "usage: deletionctl "+c.name+" "), help)
			require.LessOrEqual(t, strings.Count(help, "\n"), 45, "the help of %s fits on a screen", c.name)
			for _, f := range append(slices.Clone(c.flags), flagDoc{name: "json"}) {
				require.Regexp(t, `(?m)^  --`+regexp.QuoteMeta(f.name)+`\b`, help, "--%s is described", f.name)
			}
			for _, name := range c.required {
				require.True(t, slices.ContainsFunc(c.flags, func(f flagDoc) bool { return f.name == name }), "required --%s is one of its flags", name)
			}

			_, example, ok := strings.Cut(help, "\nExample:\n  deletionctl ")
			require.True(t, ok, help)
			example, _, _ = strings.Cut(example, "\n")
			cfg, err := parseArgs(shellWords(t, example), func(string) string { return "" })
			require.NoError(t, err, "the example %q parses", example)
			require.Equal(t, c.name, cfg.command)

			_, exits, ok := strings.Cut(help, "\nExit codes:\n")
			require.True(t, ok, help)
			var codes []int
			for _, m := range regexp.MustCompile(`(?m)^  (\d) `).FindAllStringSubmatch(exits, -1) {
				n, _ := strconv.Atoi(m[1])
				require.Contains(t, sharedCodes, n, "exit code %d is the shared table's", n)
				codes = append(codes, n)
			}
			require.True(t, slices.IsSorted(codes), "%v", codes)
			require.Subset(t, codes, []int{exitOK, exitFailure, exitUsage})
			require.Len(t, slices.Compact(slices.Clone(codes)), len(codes), "each code once: %v", codes)

			require.Contains(t, usage, "\n  "+c.name+" ", "the usage lists %s", c.name)
		})
	}
}

// shellWords splits a command line as a shell would, for the examples: by
// spaces, with "double quotes" kept together.
func shellWords(t *testing.T, line string) []string {
	t.Helper()
	var words []string
	var word strings.Builder
	quoted, inWord := false, false
	for _, r := range line {
		switch {
		case r == '"':
			quoted, inWord = !quoted, true
		case r == ' ' && !quoted:
			if inWord {
				words = append(words, word.String())
				word.Reset()
				inWord = false
			}
		default:
			word.WriteRune(r)
			inWord = true
		}
	}
	require.False(t, quoted, "unbalanced quotes in %q", line)
	if inWord {
		words = append(words, word.String())
	}
	return words
}

// keysOf returns the sorted top-level keys of the JSON object out.
func keysOf(t *testing.T, out string) []string {
	t.Helper()
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal([]byte(out), &m), out)
	return slices.Sorted(maps.Keys(m))
}

// docJSON is what docs/deletionctl.md's "JSON output" table lists: the
// top-level keys of each command's --json, by command.
func docJSON(t *testing.T) map[string][]string {
	t.Helper()
	doc, err := os.ReadFile("../../docs/deletionctl.md")
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(doc), "\n## JSON output\n")
	require.True(t, ok, `docs/deletionctl.md has a "## JSON output" section`)
	section, _, _ = strings.Cut(section, "\n## ")
	tick := regexp.MustCompile("`([^`]+)`")
	listed := map[string][]string{}
	for line := range strings.SplitSeq(section, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) != 4 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			continue
		}
		var keys []string
		for _, m := range tick.FindAllStringSubmatch(outsideParens(cells[2]), -1) {
			keys = append(keys, m[1])
		}
		for _, m := range tick.FindAllStringSubmatch(cells[1], -1) {
			listed[m[1]] = slices.Sorted(slices.Values(keys))
		}
	}
	return listed
}

// outsideParens is s without its parenthesized asides.
func outsideParens(s string) string {
	var b strings.Builder
	depth := 0
	for _, r := range s {
		switch {
		case r == '(':
			depth++
		case r == ')' && depth > 0:
			depth--
		case depth == 0:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// docs/deletionctl.md documents every command's --json: the same top-level
// keys the command prints.
func TestTheDocsListEveryCommandsJSON(t *testing.T) {
	t.Parallel()
	listed := docJSON(t)
	for _, c := range commands {
		want := slices.Sorted(slices.Values(c.jsonKeys))
		require.Equal(t, want, listed[c.name], "docs/deletionctl.md's JSON output of %s", c.name)
	}
	require.Len(t, listed, len(commands), "no command is documented that does not exist")
}

// Every command takes --json and prints the top-level keys its help and
// docs/deletionctl.md name: a walk through every command against one
// database, from check to receipt verify.
func TestEveryCommandPrintsItsJSON(t *testing.T) {
	t.Parallel()
	db := setup(t)
	ctx := t.Context()
	done := map[string]bool{}
	// object runs args as role, requires success, and checks its keys.
	object := func(role fixture.Role, args ...string) string {
		t.Helper()
		out := db.okAs(t, role, append(args, "--json")...)
		c := commandOf(t, args)
		require.Equal(t, slices.Sorted(slices.Values(c.jsonKeys)), keysOf(t, out), "%q", args)
		done[c.name] = true
		return out
	}
	requestOf := func(out string) requestView {
		t.Helper()
		var rep requestReport
		require.NoError(t, json.Unmarshal([]byte(out), &rep))
		require.NotNil(t, rep.Request.Claim, "every request object says whether it can be claimed")
		return rep.Request
	}
	op, approver := fixture.RoleOperator, fixture.RoleApprover
	keys := t.TempDir()
	priv, pub := filepath.Join(keys, "receipt.key"), filepath.Join(keys, "receipt.pub")
	_, _, err := receipt.GenerateKey(priv, pub)
	require.NoError(t, err)

	object(op, "check")
	object(op, "health")
	community, host := db.createCommunity(t)
	dir, _ := writeFiles(t, community, 2)
	r := requestOf(object(op, "submit", "--host", host, "--by", "alice", "--reason", "walk"))
	require.Equal(t, claimNotInventoried, r.Claim.Status)
	id := r.ID
	object(op, "plan", id, "--objects-dir", dir)
	require.Equal(t, "inventoried", string(requestOf(object(op, "inventory", "--request", id, "--objects-dir", dir)).Stage))
	require.Equal(t, claimClaimable, requestOf(object(approver, "approve", "--request", id, "--by", "bob")).Claim.Status)
	object(op, "list")
	object(op, "inspect", "--request", id)

	out := db.ok(t, "run", "--once", "--request", id, "--objects-dir", dir, "--cache", "memory:", "--receipt-key", priv, "--json")
	run, _ := spec("run")
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var rec map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(sc.Bytes(), &rec), sc.Text())
		for _, k := range run.jsonKeys {
			require.Contains(t, rec, k, sc.Text())
		}
	}
	require.Equal(t, "completed", lastMessage(t, out))
	done["run"] = true

	object(op, "receipt", "show", id)
	object(op, "receipt", "show", "--request", id)
	export := t.TempDir()
	object(op, "receipt", "export", "--dir", export)
	code, stdout, stderr := cli(t, "receipt", "verify", "--dir", export, "--public-key", pub, "--json")
	require.Equal(t, exitOK, code, stderr)
	verify, _ := spec("receipt verify")
	require.Equal(t, slices.Sorted(slices.Values(verify.jsonKeys)), keysOf(t, stdout))
	done["receipt verify"] = true
	headFile := filepath.Join(t.TempDir(), "head.json")
	require.NoError(t, os.WriteFile(headFile, []byte(object(op, "receipt", "head")), 0o600))

	// The chain handed on to a newly registered key: the rotation's JSON,
	// then a verify to the new head that lists it as an entry of its own.
	keysB := t.TempDir()
	privB, pubB := filepath.Join(keysB, "receipt.key"), filepath.Join(keysB, "receipt.pub")
	_, _, err = receipt.GenerateKey(privB, pubB)
	require.NoError(t, err)
	db.register(t, pubB, "the walk's rotation")
	var rotated receiptRotateReport
	require.NoError(t, json.Unmarshal([]byte(object(fixture.RoleExecutor, "receipt", "rotate", "--old-key", priv)), &rotated))
	require.Equal(t, receiptRotateReport{Sequence: 2, Signer: keyID(t, pub), NewSigner: keyID(t, pubB), Hash: rotated.Hash}, rotated)
	export = t.TempDir()
	db.ok(t, "receipt", "export", "--dir", export)
	code, stdout, stderr = cli(t, "receipt", "verify", "--dir", export, "--public-key", pub, "--expect-head", "2:"+rotated.Hash, "--json")
	require.Equal(t, exitOK, code, stderr)
	var verified receiptVerifyReport
	require.NoError(t, json.Unmarshal([]byte(stdout), &verified))
	require.Equal(t, []string{entryDeletion, entryRotation}, []string{verified.Receipts[0].Kind, verified.Receipts[1].Kind})
	require.Equal(t, id, *verified.Receipts[0].RequestID)
	require.Nil(t, verified.Receipts[1].RequestID)
	require.Equal(t, keyID(t, pubB), *verified.Receipts[1].NewSigner)
	require.Equal(t, []string{keyID(t, pub)}, verified.Keys)
	require.Equal(t, int64(1), verified.FromSequence)
	require.Nil(t, verified.PreviousHash)
	require.True(t, verified.HeadChecked)
	require.Equal(t, "2:"+rotated.Hash, *verified.Head)
	require.Equal(t, 1, verified.Verified)
	require.Equal(t, 1, verified.Rotations)
	// The head kept before the rotation still names receipt 1 as it was.
	code, _, stderr = cli(t, "receipt", "verify", "--dir", export, "--public-key", pub, "--expect-head", headFile, "--json")
	require.Equal(t, exitOK, code, stderr)

	object(op, "leases")
	object(op, "leases", "--reap", "10")

	_, other := db.createCommunity(t)
	object(op, "protect", "--host", other, "--by", "alice", "--reason", "hold")
	object(op, "unprotect", "--host", other, "--by", "alice", "--reason", "lifted")
	object(approver, "unprotect", "--host", other, "--by", "bob", "--reason", "lifted", "--approve")
	object(op, "protection", "--host", other)

	aborted := db.submit(t, other, "alice")
	require.Equal(t, claimAborted, requestOf(object(op, "abort", "--request", aborted, "--by", "carol", "--reason", "walk")).Claim.Status)

	_, third := db.createCommunity(t)
	blocked := db.submit(t, third, "alice")
	_, err = fixture.NewClients(t, db.url).Engine.BlockBeforeClaim(ctx, uuid.MustParse(blocked), "walk:setup", "a test block")
	require.NoError(t, err)
	var rep inspectReport
	require.NoError(t, json.Unmarshal([]byte(db.ok(t, "inspect", "--request", blocked, "--json")), &rep))
	require.Equal(t, claimBlocked, rep.Request.Claim.Status)
	require.Contains(t, rep.Request.Claim.Reason, "a test block")
	require.Contains(t, rep.Request.Claim.NextStep, "deletionctl unblock --request "+blocked)
	require.Equal(t, claimNotInventoried, requestOf(object(op, "unblock", "--request", blocked, "--by", "carol", "--reason", "fixed")).Claim.Status)

	for _, c := range commands {
		require.True(t, done[c.name], "the walk ran %s --json", c.name)
	}
}

// commandOf is the command args name.
func commandOf(t *testing.T, args []string) commandSpec {
	t.Helper()
	name := args[0]
	if name == "receipt" {
		name += " " + args[1]
	}
	c, ok := spec(name)
	require.True(t, ok, name)
	return c
}
