package structure_test

import (
	"context"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/ephemeralpg"
	"github.com/tombstoneworks/communitydeletion/internal/fixture"
	"github.com/tombstoneworks/communitydeletion/internal/structure"
)

// Two databases migrated alike dump byte-identically, and the dump is the
// committed sql/structure.sql (the same check as make structure-diff, so a
// plain go test ./... catches a stale file too).
func TestTheCommittedStructureIsWhatTheMigrationsProduce(t *testing.T) {
	ctx := t.Context()
	server, err := ephemeralpg.Start(ctx, ephemeralpg.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, server.Close(context.Background())) })

	var dumps [2][]byte
	for i := range dumps {
		url, drop, err := server.NewDatabase(ctx, fixture.Template{})
		require.NoError(t, err)
		t.Cleanup(func() { _ = drop(context.Background()) })
		dumps[i], err = structure.Dump(ctx, url)
		require.NoError(t, err)
	}
	require.Equal(t, string(dumps[0]), string(dumps[1]), "the dump depends on more than the schema")
	committed, err := os.ReadFile("../../" + structure.Path)
	require.NoError(t, err)
	require.Equal(t, string(committed), string(dumps[0]), "%s is stale: run make structure", structure.Path)
}

func TestNormalizeDropsWhatDependsOnTheRun(t *testing.T) {
	t.Parallel()
	dump := "--\n-- PostgreSQL database dump\n--\n\n\\restrict abc123\n\n-- Dumped from database version 15.18\n" +
		"-- Dumped by pg_dump version 15.18\n\nSET statement_timeout = 0;\nSELECT pg_catalog.set_config('search_path', '', false);\n\n\n\n" +
		"CREATE TABLE public.t (id uuid);   \r\n\n\n\n\\unrestrict abc123\n--\n-- PostgreSQL database dump complete\n--\n\n"
	require.Equal(t, "CREATE TABLE public.t (id uuid);\n", string(structure.Normalize([]byte(dump))))
}
