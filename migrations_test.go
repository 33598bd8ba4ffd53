package communitydeletion

import (
	"io/fs"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"
)

// Migrations merges sql/schema and sql/triggers into one directory whose
// files share one strictly increasing version sequence.
func TestMigrationsIsOneFlatSequence(t *testing.T) {
	t.Parallel()
	entries, err := fs.ReadDir(Migrations(), ".")
	require.NoError(t, err)
	require.NotEmpty(t, entries)

	var schema, triggers int
	for i, entry := range entries {
		version, _, ok := strings.Cut(entry.Name(), "_")
		require.True(t, ok, entry.Name())
		n, err := strconv.Atoi(version)
		require.NoError(t, err, entry.Name())
		require.Equal(t, i+1, n, "versions run 1, 2, 3, ... across both folders: %s", entry.Name())
		body, err := fs.ReadFile(Migrations(), entry.Name())
		require.NoError(t, err)
		require.Contains(t, string(body), "-- +goose Up")
		if _, err := fs.Stat(migrationFiles, "sql/schema/"+entry.Name()); err == nil {
			schema++
		} else {
			triggers++
		}
	}
	require.Positive(t, schema)
	require.Positive(t, triggers)
}

// A file name present in both folders is an error, not a silent shadow.
func TestMigrationsRefusesADuplicateName(t *testing.T) {
	t.Parallel()
	base := fstest.MapFS{
		"a/00001_x.sql": {Data: []byte("-- +goose Up\n")},
		"b/00001_x.sql": {Data: []byte("-- +goose Up\n")},
	}
	merged := flatFS{base: base, dirs: []string{"a", "b"}}
	_, err := fs.ReadDir(merged, ".")
	require.ErrorIs(t, err, errDuplicateMigration)
	_, err = merged.Open("00001_x.sql")
	require.ErrorIs(t, err, errDuplicateMigration)
	_, err = merged.Open("missing.sql")
	require.ErrorIs(t, err, fs.ErrNotExist)
}
