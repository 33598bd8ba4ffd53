package docsnippet_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/docsnippet"
)

// Pages returns README.md and every page of docs/, relative to this package.
func pages(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob("../../docs/*.md")
	require.NoError(t, err)
	require.NotEmpty(t, docs)
	return append([]string{"../../README.md"}, docs...)
}

// shellLangs are the fence languages of shell snippets.
var shellLangs = map[string]bool{"sh": true, "bash": true, "shell": true, "console": true}

// runner is WHERE of a <!-- runs in: WHERE -->: a Go test file and one of
// its tests, or a script.
var runner = regexp.MustCompile(`^([\w./-]+)(?: (Test\w+))?$`)

// Every code block of README.md and docs/ is fenced with its language, and
// every shell snippet either runs somewhere or says it is illustrative: a
// "runs in" mark names a test that exists and reads the page, or a script
// that runs each of the snippet's commands. (Every ```sql block that is not
// illustrative runs in integration's TestDocsSQLSnippetsRunAsWritten.)
func TestEveryShellSnippetRunsOrIsIllustrative(t *testing.T) {
	shell := 0
	for _, page := range pages(t) {
		blocks, err := docsnippet.Parse(page)
		require.NoError(t, err)
		for _, b := range blocks {
			require.False(t, b.Indented, "%s: an indented code block: fence it with its language (```sql, ```sh, ```text)", b)
			require.NotEmpty(t, b.Lang, "%s: a fence without a language", b)
			require.False(t, b.Illustrative && b.RunsIn != "", "%s: both illustrative and run", b)
			if b.Lang == "sql" {
				require.Empty(t, b.RunsIn, "%s: a sql block runs in TestDocsSQLSnippetsRunAsWritten; mark only its other runner in the test", b)
			}
			if !shellLangs[b.Lang] {
				continue
			}
			shell++
			if b.Illustrative {
				continue
			}
			require.NotEmpty(t, b.RunsIn, "%s: a shell snippet that nothing runs: mark it <!-- runs in: FILE TestName --> from the test that runs it, or <!-- illustrative -->", b)
			m := runner.FindStringSubmatch(b.RunsIn)
			require.NotNil(t, m, "%s: runs in %q: want FILE or FILE TestName", b, b.RunsIn)
			src, err := os.ReadFile(filepath.Join("../..", m[1]))
			require.NoError(t, err, "%s: runs in %s", b, m[1])
			if m[2] != "" {
				if !strings.Contains(string(src), "func "+m[2]+"(t *testing.T)") {
					t.Fatalf("%s: %s has no %s", b, m[1], m[2])
				}
				if page := strings.TrimPrefix(b.File, "../../"); !strings.Contains(string(src), page) {
					t.Fatalf("%s: %s never names %s, the page it runs", b, m[1], page)
				}
				continue
			}
			for line := range strings.SplitSeq(strings.TrimSpace(b.Text), "\n") {
				if !strings.Contains(string(src), "\n"+line+"\n") {
					t.Fatalf("%s: %s does not run %q", b, m[1], line)
				}
			}
		}
	}
	require.Positive(t, shell)
}

// write puts a page into a temporary directory and returns its path.
func write(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "page.md")
	require.NoError(t, os.WriteFile(path, []byte(text), 0o600))
	return path
}

// Parse finds fenced blocks (in list items too), indented blocks outside
// and inside list items, marks on the line before a block, setup comments
// and sections; a list item's wrapped paragraph is not a code block.
func TestParseReadsEveryKindOfBlock(t *testing.T) {
	page := write(t, "# Title\n\nIntro.\n\n    indented code\n    more\n\n"+
		"## Steps\n\n- **An item** that wraps\n  onto a second line.\n\n  A paragraph of the item.\n\n"+
		"      item code\n\n- another item:\n\n  <!-- illustrative -->\n  ```sql\n  SELECT 1;\n  ```\n\n"+
		"<!-- setup: the reader's tables\n```sql\nCREATE TABLE t ();\n```\n-->\n\n"+
		"<!-- runs in: cmd/x/x_test.go TestX -->\n\n```sh\necho hi\n```\n\n```\nbare\n```\n")
	blocks, err := docsnippet.Parse(page)
	require.NoError(t, err)
	type got struct {
		Line                       int
		Lang, Section, Text, Runs  string
		Indented, Illustrative, Up bool
	}
	var all []got
	for _, b := range blocks {
		all = append(all, got{b.Line, b.Lang, b.Section, b.Text, b.RunsIn, b.Indented, b.Illustrative, b.Setup})
	}
	require.Equal(t, []got{
		{Line: 5, Section: "Title", Text: "indented code\nmore\n", Indented: true},
		{Line: 15, Section: "Steps", Text: "item code\n", Indented: true},
		{Line: 20, Lang: "sql", Section: "Steps", Text: "SELECT 1;\n", Illustrative: true},
		{Line: 25, Lang: "sql", Section: "Steps", Text: "CREATE TABLE t ();\n", Up: true},
		{Line: 32, Lang: "sh", Section: "Steps", Text: "echo hi\n", Runs: "cmd/x/x_test.go TestX"},
		{Line: 36, Section: "Steps", Text: "bare\n"},
	}, all)

	_, err = docsnippet.Parse(write(t, "```sh\nnever closed\n"))
	require.ErrorContains(t, err, "never closed")
}
