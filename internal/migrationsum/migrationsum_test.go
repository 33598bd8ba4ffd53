package migrationsum_test

import (
	"errors"
	"io/fs"
	"os"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/migrationsum"
)

// released copies the repository's migrations and its integrity file, so
// that each case tampers with a copy.
func released(t *testing.T) (fstest.MapFS, []byte) {
	t.Helper()
	copyFS := fstest.MapFS{}
	repo := os.DirFS("../../sql")
	for _, dir := range migrationsum.Dirs {
		names, err := fs.Glob(repo, dir+"/*.sql")
		require.NoError(t, err)
		require.NotEmpty(t, names)
		for _, name := range names {
			body, err := fs.ReadFile(repo, name)
			require.NoError(t, err)
			copyFS[name] = &fstest.MapFile{Data: body}
		}
	}
	sum, err := os.ReadFile("../../" + migrationsum.Path)
	require.NoError(t, err)
	return copyFS, sum
}

// The committed integrity file matches the committed migrations.
func TestCommittedMigrationsMatchTheIntegrityFile(t *testing.T) {
	t.Parallel()
	files, sum := released(t)
	require.NoError(t, migrationsum.Verify(files, sum))
	again, err := migrationsum.Record(files, sum)
	require.NoError(t, err)
	require.Equal(t, string(sum), string(again), "recording with nothing new changes nothing")
}

func TestTamperedMigrationsAreRefused(t *testing.T) {
	t.Parallel()
	const edited = "triggers/00011_community_deletion_least_privilege.sql"
	for name, tc := range map[string]struct {
		tamper func(fstest.MapFS)
		want   error
		says   string
	}{
		"edited": {
			tamper: func(f fstest.MapFS) { f[edited].Data = append(f[edited].Data, []byte("\n-- one more line\n")...) },
			want:   migrationsum.ErrReleasedMigrationChanged,
			says:   "sql/" + edited + " was edited after release; restore it (git checkout main -- sql/" + edited + ") and add a new migration instead",
		},
		"whitespace only": {
			tamper: func(f fstest.MapFS) { f[edited].Data = append([]byte(" "), f[edited].Data...) },
			want:   migrationsum.ErrReleasedMigrationChanged,
			says:   "was edited after release",
		},
		"removed": {
			tamper: func(f fstest.MapFS) { delete(f, "schema/00012_community_deletion_stages.sql") },
			want:   migrationsum.ErrReleasedMigrationChanged,
			says:   "sql/schema/00012_community_deletion_stages.sql was removed after release",
		},
		"renamed": {
			tamper: func(f fstest.MapFS) {
				f["schema/00012_stages.sql"] = f["schema/00012_community_deletion_stages.sql"]
				delete(f, "schema/00012_community_deletion_stages.sql")
			},
			want: migrationsum.ErrReleasedMigrationChanged,
			says: "sql/schema/00012_community_deletion_stages.sql was renamed to sql/schema/00012_stages.sql after release",
		},
		"moved to the other folder": {
			tamper: func(f fstest.MapFS) {
				f["triggers/00012_community_deletion_stages.sql"] = f["schema/00012_community_deletion_stages.sql"]
				delete(f, "schema/00012_community_deletion_stages.sql")
			},
			want: migrationsum.ErrReleasedMigrationChanged,
			says: "was renamed to sql/triggers/00012_community_deletion_stages.sql",
		},
		"inserted below the top": {
			tamper: func(f fstest.MapFS) {
				f["schema/00007_late.sql"] = &fstest.MapFile{Data: []byte("-- +goose Up\nSELECT 1;\n")}
			},
			want: migrationsum.ErrReleasedMigrationChanged,
			says: "sql/schema/00007_late.sql has version 7, not above the newest released migration (",
		},
		"new on top, unrecorded": {
			tamper: func(f fstest.MapFS) {
				f["schema/99999_next.sql"] = &fstest.MapFile{Data: []byte("-- +goose Up\nSELECT 1;\n")}
			},
			want: migrationsum.ErrUnrecorded,
			says: "sql/schema/99999_next.sql is not in sql/migrations.sum; run make migrations-sum and commit it with the migration",
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			files, sum := released(t)
			tc.tamper(files)
			err := migrationsum.Verify(files, sum)
			require.ErrorIs(t, err, tc.want)
			require.ErrorContains(t, err, tc.says)
			require.NotContains(t, err.Error(), "\n", "one line")
			if errors.Is(tc.want, migrationsum.ErrReleasedMigrationChanged) {
				_, err := migrationsum.Record(files, sum)
				require.ErrorIs(t, err, tc.want, "recording cannot launder a changed release")
			}
		})
	}
}

func TestANewMigrationOnTopIsRecordedOnce(t *testing.T) {
	t.Parallel()
	files, sum := released(t)
	files["triggers/99999_next.sql"] = &fstest.MapFile{Data: []byte("-- +goose Up\nSELECT 1;\n")}
	recorded, err := migrationsum.Record(files, sum)
	require.NoError(t, err)
	require.NoError(t, migrationsum.Verify(files, recorded))
	require.Contains(t, string(recorded), string(sum[len(sum)-40:]), "earlier lines kept")
	require.Contains(t, string(recorded), "triggers/99999_next.sql h1:")

	// Once recorded, it is released like the rest.
	files["triggers/99999_next.sql"].Data = []byte("-- +goose Up\nSELECT 2;\n")
	require.ErrorIs(t, migrationsum.Verify(files, recorded), migrationsum.ErrReleasedMigrationChanged)
}

func TestAHandEditedIntegrityFileIsRefused(t *testing.T) {
	t.Parallel()
	files, sum := released(t)
	// Re-hash an edited migration into its line without fixing the header.
	forged := []byte(string(sum[:len(sum)-2]) + "X\n")
	err := migrationsum.Verify(files, forged)
	require.ErrorIs(t, err, migrationsum.ErrCorrupt)
	require.ErrorContains(t, err, "own checksum does not match its lines")
}
