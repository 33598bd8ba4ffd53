package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/docsnippet"
	"github.com/tombstoneworks/communitydeletion/internal/ephemeralpg"
	"github.com/tombstoneworks/communitydeletion/internal/fixture"
	"github.com/tombstoneworks/communitydeletion/receipt"
)

// walkLogins are the logins docs/deletionctl.md's walk creates; roles are
// the cluster's, so the test drops them when it ends.
var walkLogins = []string{"alice", "bob", "deleter", "app"}

// walkBlock is one fenced block of the walk: its language and lines.
type walkBlock struct {
	lang  string
	lines []string
}

// walkBlocks reads the fenced blocks of docs/deletionctl.md's section
// "From zero: a first deletion", in order.
func walkBlocks(t *testing.T) []walkBlock {
	t.Helper()
	doc, err := os.ReadFile("../../docs/deletionctl.md")
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(doc), "\n## From zero: a first deletion\n")
	require.True(t, ok, `docs/deletionctl.md has a "## From zero: a first deletion" section`)
	section, _, _ = strings.Cut(section, "\n## ")
	var blocks []walkBlock
	var current *walkBlock
	for line := range strings.SplitSeq(section, "\n") {
		switch {
		case current == nil && strings.HasPrefix(line, "```"):
			current = &walkBlock{lang: strings.TrimPrefix(line, "```")}
		case current != nil && line == "```":
			blocks = append(blocks, *current)
			current = nil
		case current != nil:
			current.lines = append(current.lines, line)
		}
	}
	require.Nil(t, current, "an unclosed block")
	return blocks
}

// walker runs the walk: its shell variables, the exported ones, the
// database the logins' URLs point to, and every output so far.
type walker struct {
	t        *testing.T
	db       string // the walk's database, as its owner
	vars     map[string]string
	exported map[string]bool
	outputs  strings.Builder
}

// docHost is the database the walk's URLs name; the test points them at
// its own.
const docHost = "@db.internal/app"

// login turns a URL of the walk (postgres://USER:PASSWORD@db.internal/app)
// into one of the test's database.
func (w *walker) login(raw string) string {
	if !strings.HasSuffix(raw, docHost) {
		return raw
	}
	u, err := url.Parse(raw)
	require.NoError(w.t, err, raw)
	password, _ := u.User.Password()
	conn, err := fixture.LoginConnString(w.db, u.User.Username(), password)
	require.NoError(w.t, err)
	return conn
}

// expand replaces $NAME and ${NAME} in s.
func (w *walker) expand(s string) string {
	return regexp.MustCompile(`\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?`).ReplaceAllStringFunc(s, func(m string) string {
		name := strings.Trim(m, "${}")
		v, ok := w.vars[name]
		require.True(w.t, ok, "the walk uses $%s before setting it", name)
		return v
	})
}

// words splits a shell line into words: spaces separate, "double" and
// 'single' quotes group, $variables expand outside single quotes.
func (w *walker) words(line string) []string {
	var words []string
	var word strings.Builder
	inWord := false
	for i := 0; i < len(line); i++ {
		switch line[i] {
		case '\'':
			end := strings.IndexByte(line[i+1:], '\'')
			require.GreaterOrEqual(w.t, end, 0, "unbalanced quote: %s", line)
			word.WriteString(line[i+1 : i+1+end])
			i += end + 1
			inWord = true
		case '"':
			end := strings.IndexByte(line[i+1:], '"')
			require.GreaterOrEqual(w.t, end, 0, "unbalanced quote: %s", line)
			word.WriteString(w.expand(line[i+1 : i+1+end]))
			i += end + 1
			inWord = true
		case ' ':
			if inWord {
				words = append(words, word.String())
				word.Reset()
				inWord = false
			}
		default:
			j := strings.IndexAny(line[i:], ` '"`)
			if j < 0 {
				j = len(line) - i
			}
			word.WriteString(w.expand(line[i : i+j]))
			i += j - 1
			inWord = true
		}
	}
	if inWord {
		words = append(words, word.String())
	}
	return words
}

// exitComment is a line's comment saying which exit code it expects.
var exitComment = regexp.MustCompile(`\(exit (\d)\)`)

// assignment is NAME=VALUE.
var assignment = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*)=(.*)$`)

// shell runs one line of an sh block.
func (w *walker) shell(line string) {
	t := w.t
	want := 0
	if i := strings.Index(line, "  #"); i >= 0 {
		if m := exitComment.FindStringSubmatch(line[i:]); m != nil {
			want, _ = strconv.Atoi(m[1])
		}
		line = strings.TrimSpace(line[:i])
	}
	line = strings.TrimSpace(line)
	if line == "" || strings.HasPrefix(line, "#") {
		return
	}
	export := false
	if rest, ok := strings.CutPrefix(line, "export "); ok {
		line, export = rest, true
	}
	// NAME=$(COMMAND | jq -r .path): the command's JSON, one field of it.
	if m := assignment.FindStringSubmatch(line); m != nil && strings.HasPrefix(m[2], "$(") && strings.HasSuffix(m[2], ")") {
		inner := strings.TrimSuffix(strings.TrimPrefix(m[2], "$("), ")")
		command, filter, ok := strings.Cut(inner, " | jq -r ")
		require.True(t, ok, "a substitution pipes to jq -r: %s", line)
		out := w.command(w.words(command), 0)
		var v any
		require.NoError(t, json.Unmarshal([]byte(out), &v), out)
		for key := range strings.SplitSeq(strings.TrimPrefix(filter, "."), ".") {
			obj, ok := v.(map[string]any)
			require.True(t, ok, "%s: %s is not in %s", line, filter, out)
			v = obj[key]
		}
		s, ok := v.(string)
		require.True(t, ok, "%s: %s is not a string", line, filter)
		w.vars[m[1]], w.exported[m[1]] = s, w.exported[m[1]] || export
		return
	}
	args := w.words(line)
	env := map[string]string{}
	for len(args) > 0 {
		m := assignment.FindStringSubmatch(args[0])
		if m == nil {
			break
		}
		env[m[1]] = m[2]
		args = args[1:]
	}
	if len(args) == 0 { // NAME=VALUE, exported or not
		for k, v := range env {
			w.vars[k], w.exported[k] = v, w.exported[k] || export
		}
		return
	}
	w.command(args, want, env)
}

// command runs one command with the exported variables and env, requires
// its exit code to be want and returns its stdout.
func (w *walker) command(args []string, want int, env ...map[string]string) string {
	t := w.t
	getenv := func(name string) string {
		for _, e := range env {
			if v, ok := e[name]; ok {
				return w.login(v)
			}
		}
		if w.exported[name] {
			return w.login(w.vars[name])
		}
		return ""
	}
	var stdout, stderr bytes.Buffer
	code := 0
	// deletionctl … > FILE: its stdout into FILE.
	redirect := ""
	if n := len(args); args[0] == "deletionctl" && n >= 3 && args[n-2] == ">" {
		args, redirect = args[:n-2], args[n-1]
	}
	switch args[0] {
	case "deletionctl":
		code = runEnv(t.Context(), args[1:], getenv, &stdout, &stderr)
	case "mkdir":
		require.Equal(t, "-p", args[1])
		for _, dir := range args[2:] {
			require.NoError(t, os.MkdirAll(dir, 0o755))
		}
	case "echo":
		require.Len(t, args, 4, "echo TEXT > FILE")
		require.Equal(t, ">", args[2])
		require.NoError(t, os.WriteFile(args[3], []byte(args[1]+"\n"), 0o644))
	case "openssl":
		cmd := exec.CommandContext(t.Context(), "openssl", args[1:]...)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		require.NoError(t, err, "openssl (apt-get install openssl): %s", stderr.String())
	default:
		t.Fatalf("the walk runs %q, which the test does not know", args[0])
	}
	require.Equal(t, want, code, "%q: stdout %s stderr %s", args, stdout.String(), stderr.String())
	if want == 0 {
		require.Empty(t, stderr.String(), "%q", args)
	} else {
		requireOneLine(t, stderr.String(), "deletionctl: ")
	}
	if redirect != "" {
		require.NoError(t, os.WriteFile(redirect, stdout.Bytes(), 0o600))
		return ""
	}
	w.outputs.WriteString(stdout.String())
	return stdout.String()
}

// sql runs a sql block as the login its first line names: "-- as a DBA",
// "-- as the schema's owner" (both the test's own login) or
// "-- as NAME (URL)".
func (w *walker) sql(lines []string) {
	t := w.t
	who, ok := strings.CutPrefix(lines[0], "-- as ")
	require.True(t, ok, "a sql block starts with -- as WHO: %q", lines[0])
	conn := w.db
	if _, rest, found := strings.Cut(who, "("); found {
		conn = w.login(strings.TrimSuffix(rest, ")"))
	} else {
		require.Contains(t, []string{"a DBA", "the schema's owner"}, who)
	}
	c, err := pgx.Connect(t.Context(), conn)
	require.NoError(t, err)
	defer c.Close(context.Background())
	_, err = c.Exec(t.Context(), strings.Join(lines[1:], "\n"))
	require.NoError(t, err, "the block run as %s", who)
}

// docs/deletionctl.md's walk from zero, run as it is written: the logins,
// the service's tables and tenants, the receipt key, then plan, submit,
// inventory, two approvals (the submitter's refused), the run, inspect and
// the receipt verified offline to the chain head kept apart. Every sample
// output it shows is printed by a step before it. It changes the process's
// directory, so it does not run in parallel.
func TestTheOperatorWalk(t *testing.T) {
	admin, err := pgx.Connect(t.Context(), server.ConnString(""))
	require.NoError(t, err)
	dropLogins := func() {
		for _, name := range walkLogins {
			_, err := admin.Exec(context.Background(), "DROP ROLE IF EXISTS "+pgx.Identifier{name}.Sanitize())
			require.NoError(t, err)
		}
	}
	dropLogins() // a run killed before its cleanup
	t.Cleanup(func() {
		dropLogins()
		_ = admin.Close(context.Background())
	})
	db := ephemeralpg.NewTestDatabase(t, server, fixture.Template{}) // dropped before the logins
	blocks := walkBlocks(t)
	receiptBlocks := receiptDocBlocks(t)
	t.Chdir(t.TempDir())

	w := &walker{t: t, db: db, vars: map[string]string{}, exported: map[string]bool{}}
	var langs []string
	for _, b := range blocks {
		langs = append(langs, b.lang)
		switch b.lang {
		case "sql":
			w.sql(b.lines)
		case "sh":
			for _, line := range b.lines {
				w.shell(line)
			}
		case "text":
			for _, line := range b.lines {
				require.Contains(t, w.outputs.String(), strings.TrimRight(line, " ")+"\n", "the sample output is printed by a step before it")
			}
		default:
			t.Fatalf("a block of %q", b.lang)
		}
	}
	require.Equal(t, []string{"sql", "sql", "sql", "sh", "sh", "sh", "text"}, langs)

	// acme is gone, as a tombstone; globex is untouched.
	pool := fixture.RolePool(t, db, fixture.RoleOperator)
	var docs, workspaces int
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT
		(SELECT count(*) FROM public.documents WHERE workspace_id = '7c9e6679-7425-40de-944b-e07fc1f90ae7'),
		(SELECT count(*) FROM public.workspaces WHERE id = '7c9e6679-7425-40de-944b-e07fc1f90ae7')`).Scan(&docs, &workspaces))
	require.Zero(t, docs+workspaces, "acme's rows are gone")
	var state string
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT deletion_state FROM community_deletion.communities
		WHERE id = '7c9e6679-7425-40de-944b-e07fc1f90ae7'`).Scan(&state))
	require.Equal(t, "tombstone", state)
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT count(*) FROM public.documents WHERE workspace_id = '16fd2706-8baf-433b-82eb-8c7fada847da'`).Scan(&docs))
	require.Equal(t, 3, docs, "globex keeps its documents")
	_, err = os.Stat(filepath.Join("objects", "uploads", "7c9e6679-7425-40de-944b-e07fc1f90ae7", "report.txt"))
	require.ErrorIs(t, err, os.ErrNotExist)
	_, err = os.Stat(filepath.Join("objects", "uploads", "16fd2706-8baf-433b-82eb-8c7fada847da", "logo.txt"))
	require.NoError(t, err, "globex keeps its file")

	out := w.outputs.String()
	id := w.vars["ID"]
	for _, want := range []string{
		"plan of request " + id + " (inventoried)",
		"ok receipt 1 request " + id + " signed by ",
		"verified 1 receipts (1 to 1): 1 signed with key ",
		"; from the chain's first receipt, to the expected head 1:",
	} {
		require.Contains(t, out, want)
	}
	require.Regexp(t, `(?m)^claim: +claimable: claimable now$`, out)
	require.Regexp(t, `(?m)^receipt: +sequence 1, hash [0-9a-f]{64}, signed by [0-9a-f]+$`, out)
	require.Regexp(t, `(?m)^submitted by: +"alice" at \S+ \(login alice\)$`, out)
	require.Regexp(t, `(?m)^approved by: +"bob" at \S+ \(login bob\)$`, out)

	w.receiptDocs(receiptBlocks)
}

// receiptDocBlocks reads docs/receipts.md's shell snippets that are not
// illustrative: the key generation, the audit with the command line and
// the check of one exported file by hand.
func receiptDocBlocks(t *testing.T) []docsnippet.Block {
	t.Helper()
	blocks, err := docsnippet.Parse("../../docs/receipts.md")
	require.NoError(t, err)
	var run []docsnippet.Block
	for _, b := range blocks {
		if b.Lang == "sh" && !b.Illustrative {
			run = append(run, b)
		}
	}
	require.Len(t, run, 3, "the key generation, the command line and the check by hand")
	return run
}

// receiptDocs runs docs/receipts.md's shell snippets on the walk's
// receipts, each in a directory of its own: the key generation, the audit
// with the command line (as the walk's operator), and the check of one
// exported file by hand, with Python and OpenSSL.
func (w *walker) receiptDocs(run []docsnippet.Block) {
	t := w.t
	pub, err := os.ReadFile("receipt.pub")
	require.NoError(t, err)

	t.Chdir(t.TempDir())
	bash(t, run[0].Text, nil)
	key, err := receipt.LoadPrivateKey("receipt-signing.key")
	require.NoError(t, err, "%s makes a key the executor loads", run[0])
	made, err := receipt.LoadPublicKey("receipt.pub")
	require.NoError(t, err)
	require.Equal(t, key.Public(), made, "%s makes its public key", run[0])

	t.Chdir(t.TempDir())
	require.NoError(t, os.WriteFile("receipt.pub", pub, 0o644))
	before := w.outputs.Len()
	for line := range strings.SplitSeq(strings.TrimSuffix(run[1].Text, "\n"), "\n") {
		w.shell(line)
	}
	audit := w.outputs.String()[before:]
	require.Contains(t, audit, "ok receipt 1 request "+w.vars["ID"]+" signed by ", run[1])
	require.Contains(t, audit, "; from the chain's first receipt, to the expected head 1:", run[1])

	files, err := filepath.Glob(filepath.Join("receipts", "*.receipt.json"))
	require.NoError(t, err)
	require.Len(t, files, 1, "%s exports the walk's one receipt", run[1])
	envs, err := receipt.ReadDir("receipts")
	require.NoError(t, err)
	byHand := bash(t, run[2].Text, []string{"F=" + files[0]})
	require.Contains(t, byHand, "hash "+envs[0].Hash()+"\n", run[2])
	require.Contains(t, byHand, "Signature Verified Successfully", run[2])
}

// bash runs a snippet with bash -e in the current directory, with the
// test's PATH and env added, and returns its stdout; it fails the test on
// any other exit than 0.
func bash(t *testing.T, script string, env []string) string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "bash", "-euo", "pipefail", "-c", script)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Run(), "bash (needs python3 and openssl):\n%s\nstderr: %s", script, stderr.String())
	return stdout.String()
}
