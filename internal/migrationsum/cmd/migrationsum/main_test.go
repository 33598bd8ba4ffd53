package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// CI's check (make migrations-sum-check) fails on a copy of the repository's
// sql/ in which a released migration was edited, with one line that says to
// add a new migration instead; on the untouched copy it passes.
func TestTheCheckFailsOnACopyWithAnEditedReleasedMigration(t *testing.T) {
	root := t.TempDir()
	require.NoError(t, os.CopyFS(filepath.Join(root, "sql"), os.DirFS("../../../../sql")))
	t.Chdir(root)
	require.NoError(t, run(true))

	const edited = "sql/triggers/00005_community_write_fence.sql"
	require.NoError(t, os.Chmod(edited, 0o644))
	f, err := os.OpenFile(edited, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString("\n-- a quiet fix\n")
	require.NoError(t, err)
	require.NoError(t, f.Close())

	err = run(true)
	require.Error(t, err)
	msg := err.Error()
	require.NotContains(t, msg, "\n", "one line: %q", msg)
	require.Contains(t, msg, edited+" was edited after release")
	require.Contains(t, msg, "add a new migration instead")

	// Recording does not launder it either, and leaves the file as it was.
	before, err := os.ReadFile("sql/migrations.sum")
	require.NoError(t, err)
	require.Error(t, run(false))
	after, err := os.ReadFile("sql/migrations.sum")
	require.NoError(t, err)
	require.Equal(t, before, after)
}

// The binary exits non-zero, which is what fails make and CI.
func TestTheCheckExitsNonZero(t *testing.T) {
	root := t.TempDir()
	require.NoError(t, os.CopyFS(filepath.Join(root, "sql"), os.DirFS("../../../../sql")))
	require.NoError(t, os.Remove(filepath.Join(root, "sql/schema/00001_communities.sql")))
	bin := filepath.Join(t.TempDir(), "migrationsum")
	build := exec.Command("go", "build", "-o", bin, ".")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)
	cmd := exec.Command(bin, "-check")
	cmd.Dir = root
	out, err = cmd.CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	require.Equal(t, 1, exit.ExitCode())
	require.Equal(t, "migrationsum: a released migration changed: sql/schema/00001_communities.sql was removed after release; restore it, and undo what it did with a new migration instead\n", string(out))
}
