package integration

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/docsnippet"
	"github.com/tombstoneworks/communitydeletion/internal/ephemeralpg"
	"github.com/tombstoneworks/communitydeletion/internal/fixture"
)

// sqlSnippets returns the ```sql blocks of a markdown page that are not
// marked illustrative, hidden setup blocks included, in order.
func sqlSnippets(t *testing.T, path string) []docsnippet.Block {
	t.Helper()
	blocks, err := docsnippet.Parse(path)
	require.NoError(t, err)
	var snippets []docsnippet.Block
	for _, b := range blocks {
		if b.Lang == "sql" && !b.Illustrative {
			snippets = append(snippets, b)
		}
	}
	return snippets
}

// Every ```sql snippet of README.md and docs/ runs as written, as the
// schema's owner, against a freshly migrated database with the default
// search_path a new user has: each page's snippets in order in one
// transaction, rolled back at the end. The objects of the reader's own
// that a page's snippets name are created by a <!-- setup --> block
// hidden in the page; a snippet that cannot run in a test database (a DBA's
// step before migrating, a placeholder) is marked illustrative.
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
				_, err := tx.Exec(t.Context(), s.Text, pgx.QueryExecModeSimpleProtocol)
				require.NoError(t, err, "%s:\n%s", s, s.Text)
			}
		})
		ran += len(snippets)
	}
	require.Positive(t, ran)
}
