package integration

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	communitydeletion "github.com/tombstoneworks/communitydeletion"
	"github.com/tombstoneworks/communitydeletion/ephemeralpg"
)

// migrateBinary builds cmd/migrate once for this test binary.
var migrateBinary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "migrate-job-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "migrate")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/tombstoneworks/communitydeletion/cmd/migrate").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build cmd/migrate: %w\n%s", err, out)
	}
	return bin, nil
})

// migrateJob is one run of the real migration job.
type migrateJob struct {
	cmd            *exec.Cmd
	stdout, stderr *bytes.Buffer
	waiting        chan struct{} // closed when it reports waiting for the lock
}

func startMigrate(t *testing.T, url string, args ...string) *migrateJob {
	t.Helper()
	bin, err := migrateBinary()
	require.NoError(t, err)
	job := &migrateJob{stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}, waiting: make(chan struct{})}
	job.cmd = exec.CommandContext(t.Context(), bin, append([]string{"--database-url", url}, args...)...)
	job.cmd.Stdout = job.stdout
	stderr, err := job.cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, job.cmd.Start())
	go func() {
		var once sync.Once
		scanner := bufio.NewScanner(stderr)
		for scanner.Scan() {
			line := scanner.Text()
			job.stderr.WriteString(line + "\n")
			if strings.Contains(line, "waiting up to") {
				once.Do(func() { close(job.waiting) })
			}
		}
		io.Copy(io.Discard, stderr)
	}()
	return job
}

// wait returns the job's exit code.
func (j *migrateJob) wait(t *testing.T) int {
	t.Helper()
	err := j.cmd.Wait()
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		return exitErr.ExitCode()
	}
	require.NoError(t, err)
	return 0
}

func runMigrate(t *testing.T, url string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	job := startMigrate(t, url, args...)
	code = job.wait(t)
	return code, job.stdout.String(), job.stderr.String()
}

// Two migrate up runs started together against one database: one applies
// every migration, the other waits for the schema lock and then applies
// nothing; both exit 0.
func TestConcurrentMigrateJobs(t *testing.T) {
	t.Parallel()
	url := ephemeralpg.NewEmptyTestDatabase(t, server)
	ctx := t.Context()

	// Hold the schema lock so both jobs are demonstrably waiting together.
	holder, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer holder.Close(context.WithoutCancel(ctx))
	_, err = holder.Exec(ctx, "SELECT pg_advisory_lock($1)", communitydeletion.SchemaDestructionLockKey)
	require.NoError(t, err)

	first := startMigrate(t, url, "up")
	second := startMigrate(t, url, "up")
	<-first.waiting
	<-second.waiting
	_, err = holder.Exec(ctx, "SELECT pg_advisory_unlock($1)", communitydeletion.SchemaDestructionLockKey)
	require.NoError(t, err)

	require.Equal(t, 0, first.wait(t), first.stderr.String())
	require.Equal(t, 0, second.wait(t), second.stderr.String())
	outputs := first.stdout.String() + "\n----\n" + second.stdout.String()
	require.Equal(t, 1, strings.Count(outputs, "applied 00001_communities.sql"), outputs)
	require.Contains(t, outputs, "no migrations to apply", outputs)

	var applied int
	require.NoError(t, holder.QueryRow(ctx, "SELECT count(*) FROM goose_db_version WHERE version_id > 0").Scan(&applied))
	require.Equal(t, migrationCount(t), applied)
}

// The job's readiness gate, dry run and lock timeout behave as documented:
// status --fail-on-pending exits 3 while migrations are pending, up --dry-run
// applies nothing, and a held schema lock makes up exit 4 naming the lock.
func TestMigrateJobExitCodes(t *testing.T) {
	t.Parallel()
	url := ephemeralpg.NewEmptyTestDatabase(t, server)
	ctx := t.Context()

	code, _, stderr := runMigrate(t, url, "status", "--fail-on-pending")
	require.Equal(t, 3, code, stderr)

	code, stdout, stderr := runMigrate(t, url, "up", "--dry-run")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "00007_community_deletion_guards.sql")
	code, _, _ = runMigrate(t, url, "status", "--fail-on-pending")
	require.Equal(t, 3, code, "a dry run applies nothing")

	holder, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer holder.Close(context.WithoutCancel(ctx))
	_, err = holder.Exec(ctx, "SELECT pg_advisory_lock($1)", communitydeletion.SchemaDestructionLockKey)
	require.NoError(t, err)
	code, _, stderr = runMigrate(t, url, "up", "--lock-timeout", "1s")
	require.Equal(t, 4, code, stderr)
	require.Contains(t, stderr, "0x6364736368656d61")
	_, err = holder.Exec(ctx, "SELECT pg_advisory_unlock($1)", communitydeletion.SchemaDestructionLockKey)
	require.NoError(t, err)

	code, stdout, stderr = runMigrate(t, url, "up")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "applied 00001_communities.sql")
	code, stdout, stderr = runMigrate(t, url, "status", "--fail-on-pending", "--json")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, `"state": "applied"`)
}

// migrationCount is the number of embedded migration files.
func migrationCount(t *testing.T) int {
	t.Helper()
	entries, err := fs.ReadDir(communitydeletion.Migrations(), ".")
	require.NoError(t, err)
	return len(entries)
}
