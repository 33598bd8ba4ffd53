package integration

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/ephemeralpg"
	"github.com/tombstoneworks/communitydeletion/internal/fixture"
)

// illustrativeMark, on the line before a ```sql fence (blank lines
// between allowed), marks a snippet that names objects of the reader's own
// (their tables, their triggers) and is not run.
const illustrativeMark = "<!-- illustrative -->"

// docSnippet is one ```sql block of a page, with the line its fence is on.
type docSnippet struct {
	line int
	sql  string
}

// sqlSnippets returns the ```sql blocks of a markdown file that are not
// marked illustrative, in order.
func sqlSnippets(t *testing.T, path string) []docSnippet {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var (
		snippets    []docSnippet
		current     *docSnippet
		body        strings.Builder
		illustrated bool
	)
	scanner := bufio.NewScanner(f)
	scanner.Buffer(make([]byte, 0, 1<<20), 1<<20)
	for n := 1; scanner.Scan(); n++ {
		line := scanner.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case current == nil && trimmed == "```sql":
			if illustrated {
				current = &docSnippet{line: -n}
			} else {
				current = &docSnippet{line: n}
			}
			body.Reset()
		case current != nil && trimmed == "```":
			if current.line > 0 {
				current.sql = body.String()
				snippets = append(snippets, *current)
			}
			current, illustrated = nil, false
		case current != nil:
			body.WriteString(line)
			body.WriteString("\n")
		case trimmed == illustrativeMark:
			illustrated = true
		case trimmed != "":
			illustrated = false
		}
	}
	require.NoError(t, scanner.Err())
	require.Nil(t, current, "%s ends inside a ```sql block", path)
	return snippets
}

// Every ```sql snippet of README.md and docs/ runs as written, as the
// schema's owner, against a freshly migrated database with the default
// search_path a new user has: each page's snippets in order in one
// transaction, rolled back at the end. A snippet that names objects of
// the reader's own is marked illustrative and skipped.
func TestDocsSQLSnippetsRunAsWritten(t *testing.T) {
	t.Parallel()
	pages, err := filepath.Glob("../docs/*.md")
	require.NoError(t, err)
	pages = append([]string{"../README.md"}, pages...)
	ran := 0
	for _, page := range pages {
		snippets := sqlSnippets(t, page)
		if len(snippets) == 0 {
			continue
		}
		t.Run(filepath.Base(page), func(t *testing.T) {
			url := ephemeralpg.NewTestDatabase(t, server, fixture.Template{})
			conn, err := pgx.Connect(t.Context(), url)
			require.NoError(t, err)
			defer conn.Close(context.WithoutCancel(t.Context()))
			tx, err := conn.Begin(t.Context())
			require.NoError(t, err)
			defer func() { _ = tx.Rollback(context.WithoutCancel(t.Context())) }()
			_, err = tx.Exec(t.Context(), `SET LOCAL search_path = "$user", public`)
			require.NoError(t, err)
			for _, s := range snippets {
				// The simple protocol runs a snippet's statements as one
				// multi-statement query, as psql would send them.
				_, err := tx.Exec(t.Context(), s.sql, pgx.QueryExecModeSimpleProtocol)
				require.NoError(t, err, "%s:%d:\n%s", page, s.line, s.sql)
			}
		})
		ran += len(snippets)
	}
	require.Positive(t, ran)
}
