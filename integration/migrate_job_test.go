package integration

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"

	communitydeletion "github.com/tombstoneworks/communitydeletion"
	"github.com/tombstoneworks/communitydeletion/internal/ephemeralpg"
	"github.com/tombstoneworks/communitydeletion/internal/exitcode"
	"github.com/tombstoneworks/communitydeletion/migration"
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
	stderrDone     chan struct{} // closed when its stderr has been read to the end
}

func startMigrate(t *testing.T, url string, args ...string) *migrateJob {
	t.Helper()
	bin, err := migrateBinary()
	require.NoError(t, err)
	job := &migrateJob{stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}, waiting: make(chan struct{}), stderrDone: make(chan struct{})}
	job.cmd = exec.CommandContext(t.Context(), bin, append([]string{"--database-url", url}, args...)...)
	job.cmd.Stdout = job.stdout
	stderr, err := job.cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, job.cmd.Start())
	go func() {
		defer close(job.stderrDone)
		var once sync.Once
		scanner := bufio.NewScanner(stderr)
		for scanner.Scan() {
			line := scanner.Text()
			job.stderr.WriteString(line + "\n")
			if strings.Contains(line, "waiting up to") {
				once.Do(func() { close(job.waiting) })
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	return job
}

// wait returns the job's exit code, once its stderr has been read to the
// end: the pipe's reader writes j.stderr, and Wait must not close the pipe
// before every read is done.
func (j *migrateJob) wait(t *testing.T) int {
	t.Helper()
	<-j.stderrDone
	err := j.cmd.Wait()
	if exitErr, ok := errors.AsType[*exec.ExitError](err); ok {
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
	require.NoError(t, holder.QueryRow(ctx, "SELECT count(*) FROM "+migration.VersionTable+" WHERE version_id > 0").Scan(&applied))
	require.Equal(t, migrationCount(t), applied)
}

// The job's readiness gate, dry run and lock timeout behave as documented:
// status --fail-on-pending exits 6 while migrations are pending, up --dry-run
// applies nothing, and a held schema lock makes up exit 7 naming the lock.
func TestMigrateJobExitCodes(t *testing.T) {
	t.Parallel()
	url := ephemeralpg.NewEmptyTestDatabase(t, server)
	ctx := t.Context()

	code, _, stderr := runMigrate(t, url, "status", "--fail-on-pending")
	require.Equal(t, exitcode.Pending, code, stderr)

	code, stdout, stderr := runMigrate(t, url, "up", "--dry-run")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stdout, "00007_community_deletion_guards.sql")
	code, _, _ = runMigrate(t, url, "status", "--fail-on-pending")
	require.Equal(t, exitcode.Pending, code, "a dry run applies nothing")

	holder, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer holder.Close(context.WithoutCancel(ctx))
	_, err = holder.Exec(ctx, "SELECT pg_advisory_lock($1)", communitydeletion.SchemaDestructionLockKey)
	require.NoError(t, err)
	code, _, stderr = runMigrate(t, url, "up", "--lock-timeout", "1s")
	require.Equal(t, exitcode.LockTimeout, code, stderr)
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

// A database migrated by a release that recorded the migrations in
// goose_db_version: the job refuses up (exit 3, one line naming the command
// to run) until adopt-legacy-versions has run, which adopts once and then
// says there is nothing to adopt.
func TestMigrateJobAdoptsLegacyVersions(t *testing.T) {
	t.Parallel()
	url := ephemeralpg.NewEmptyTestDatabase(t, server)
	ctx := t.Context()
	db, err := sql.Open("pgx", url)
	require.NoError(t, err)
	defer db.Close()
	legacy, err := goose.NewProvider(goose.DialectPostgres, db, communitydeletion.Migrations(),
		goose.WithDisableGlobalRegistry(true))
	require.NoError(t, err)
	_, err = legacy.Up(ctx)
	require.NoError(t, err)
	count := migrationCount(t)

	code, stdout, stderr := runMigrate(t, url, "up")
	require.Equal(t, exitcode.Refused, code, stderr)
	require.Empty(t, stdout)
	require.Equal(t, 1, strings.Count(stderr, "\n"), stderr)
	require.Contains(t, stderr, "migrate: up: this project's migrations are recorded in goose_db_version and not yet adopted")
	require.Contains(t, stderr, "run 'migrate adopt-legacy-versions'")

	code, stdout, stderr = runMigrate(t, url, "adopt-legacy-versions")
	require.Equal(t, exitcode.OK, code, stderr)
	require.Equal(t, count+1, strings.Count(stdout, "\n"), stdout)
	require.Contains(t, stdout, "adopted 00001_communities.sql (applied ")
	require.Contains(t, stdout, fmt.Sprintf("adopted %d migration(s) from goose_db_version", count))

	code, stdout, stderr = runMigrate(t, url, "adopt-legacy-versions")
	require.Equal(t, exitcode.OK, code, stderr)
	require.Equal(t, fmt.Sprintf("nothing to adopt: %s already records the applied migrations; database at version %d\n",
		migration.VersionTable, count), stdout)

	code, stdout, stderr = runMigrate(t, url, "up")
	require.Equal(t, exitcode.OK, code, stderr)
	require.Contains(t, stdout, "no migrations to apply")
	code, _, stderr = runMigrate(t, url, "status", "--fail-on-pending")
	require.Equal(t, exitcode.OK, code, stderr)
}

// A database whose recorded checksum of an applied migration differs from
// the shipped file (as if the file was edited after it was applied): status,
// up and down exit 3 with one line naming the file and what to do, changing
// nothing, until accept-checksums records the shipped checksum. Checksums
// that are not recorded at all are adopted by the next up, which says so.
func TestMigrateJobRefusesAChangedMigration(t *testing.T) {
	t.Parallel()
	url := ephemeralpg.NewEmptyTestDatabase(t, server)
	ctx := t.Context()
	count := migrationCount(t)
	code, _, stderr := runMigrate(t, url, "up")
	require.Equal(t, exitcode.OK, code, stderr)
	db, err := sql.Open("pgx", url)
	require.NoError(t, err)
	defer db.Close()
	_, err = db.ExecContext(ctx, "UPDATE "+migration.VersionTable+" SET checksum = repeat('0', 64) WHERE version_id = 5")
	require.NoError(t, err)

	code, stdout, stderr := runMigrate(t, url, "status")
	require.Equal(t, exitcode.Refused, code, stderr)
	require.Regexp(t, `(?m)^5 +applied +\S+ +mismatch +00005_community_write_fence.sql$`, stdout)
	require.Regexp(t, `(?m)^4 +applied +\S+ +ok +00004_community_deletion_locks.sql$`, stdout)
	require.Equal(t, 1, strings.Count(stderr, "\n"), stderr)
	require.Contains(t, stderr, "migrate: status: applied migrations differ from the shipped files, refusing to migrate, nothing changed: "+
		"00005_community_write_fence.sql (version 5) was applied with checksum 000000000000… but the shipped file has ")
	require.Contains(t, stderr, "run 'migrate accept-checksums'")
	code, stdout, _ = runMigrate(t, url, "status", "--json")
	require.Equal(t, exitcode.Refused, code)
	require.Contains(t, stdout, `"checksum_mismatches": 1`)
	require.Contains(t, stdout, `"checksum_state": "mismatch"`)

	for _, args := range [][]string{{"up"}, {"down"}, {"down-to", "0"}} {
		code, stdout, stderr = runMigrate(t, url, args...)
		require.Equal(t, exitcode.Refused, code, "%v: %s", args, stderr)
		require.Empty(t, stdout)
		require.Equal(t, 1, strings.Count(stderr, "\n"), stderr)
		require.Contains(t, stderr, "applied migrations differ from the shipped files")
	}
	code, stdout, _ = runMigrate(t, url, "version")
	require.Equal(t, exitcode.OK, code)
	require.Equal(t, fmt.Sprintln(count), stdout, "nothing was rolled back")

	code, stdout, stderr = runMigrate(t, url, "accept-checksums")
	require.Equal(t, exitcode.OK, code, stderr)
	require.Contains(t, stdout, "accepted 00005_community_write_fence.sql (version 5): recorded checksum ")
	require.Contains(t, stdout, "was "+strings.Repeat("0", 64))
	code, _, stderr = runMigrate(t, url, "status", "--fail-on-pending")
	require.Equal(t, exitcode.OK, code, stderr)

	// A database whose rows predate checksums: status says unrecorded and
	// passes; the next up records them and says so.
	_, err = db.ExecContext(ctx, "UPDATE "+migration.VersionTable+" SET checksum = NULL")
	require.NoError(t, err)
	code, stdout, stderr = runMigrate(t, url, "status")
	require.Equal(t, exitcode.OK, code, stderr)
	require.Regexp(t, `(?m)^1 +applied +\S+ +unrecorded +00001_communities.sql$`, stdout)
	code, stdout, stderr = runMigrate(t, url, "up")
	require.Equal(t, exitcode.OK, code, stderr)
	require.Contains(t, stdout, "no migrations to apply")
	require.Equal(t, fmt.Sprintf("migrate: recorded the shipped files' checksums for applied versions 1-%d, which had none "+
		"(applied before checksums were recorded): from now on an edit of those files is refused\n", count), stderr)
	var unrecorded int
	require.NoError(t, db.QueryRowContext(ctx, "SELECT count(*) FROM "+migration.VersionTable+
		" WHERE version_id > 0 AND checksum IS NULL").Scan(&unrecorded))
	require.Zero(t, unrecorded)
}

// shortRollbackSteps is how many of the newest migrations
// TestMigrationsRollBackStepByStep steps through under go test -short.
const shortRollbackSteps = 3

// Every migration's Down undoes exactly what its Up did: climbing one
// version at a time and then descending one at a time, the schema at each
// version is the same both ways, and version 0 leaves nothing behind. This is
// what lets a migration that replaces a function restore the previous body.
func TestMigrationsRollBackStepByStep(t *testing.T) {
	t.Parallel()
	url := ephemeralpg.NewEmptyTestDatabase(t, server)
	conn, err := pgx.Connect(t.Context(), url)
	require.NoError(t, err)
	defer conn.Close(context.WithoutCancel(t.Context()))

	count := migrationCount(t)
	climbing := [][]string{schemaFingerprint(t, conn)}
	require.Empty(t, climbing[0], "an empty database has no project objects")
	// Under go test -short only the newest shortRollbackSteps migrations are
	// stepped through (the one a contributor adds is the newest): the job
	// first climbs to below them in one run. sql/migrations.sum keeps every
	// recorded migration from changing; make test steps through them all.
	first := 1
	if testing.Short() && count > shortRollbackSteps {
		first = count - shortRollbackSteps + 1
		code, _, stderr := runMigrate(t, url, "up-to", strconv.Itoa(first-1))
		require.Equal(t, 0, code, stderr)
		for range first - 2 {
			climbing = append(climbing, nil) // not stepped through
		}
		climbing = append(climbing, schemaFingerprint(t, conn))
	}
	for version := first; version <= count; version++ {
		code, _, stderr := runMigrate(t, url, "up-to", strconv.Itoa(version))
		require.Equal(t, 0, code, stderr)
		climbing = append(climbing, schemaFingerprint(t, conn))
	}
	for version := count - 1; version >= first-1; version-- {
		code, _, stderr := runMigrate(t, url, "down")
		require.Equal(t, 0, code, stderr)
		missing, extra := setDifference(climbing[version], schemaFingerprint(t, conn))
		require.Empty(t, missing, "objects missing after rolling back to version %d", version)
		require.Empty(t, extra, "objects left over after rolling back to version %d", version)
	}
}

// schemaFingerprint lists the project's objects in the current schema (every
// relation, column, default, constraint, index, trigger and function
// definition, and every privilege on them, defaults spelled out), sorted,
// leaving out the project's version table (and its sequence and index), which
// stays at version 0. goose's default table is not left out: the migrations
// must never create it.
func schemaFingerprint(t *testing.T, conn *pgx.Conn) []string {
	t.Helper()
	rows, err := conn.Query(t.Context(), `
		WITH rels AS (
			SELECT c.oid, c.relname, c.relkind, c.relacl, c.relowner FROM pg_class c
			WHERE c.relnamespace = current_schema()::regnamespace
			  AND c.relname NOT IN ($1::text, $1::text || '_pkey', $1::text || '_id_seq')
		)
		SELECT entry FROM (
			SELECT format('relation %s %s', relname, relkind) FROM rels
			UNION ALL
			SELECT format('column %s.%s %s not null=%s default=%s', rels.relname, a.attname,
			              format_type(a.atttypid, a.atttypmod), a.attnotnull, pg_get_expr(d.adbin, d.adrelid))
			FROM rels JOIN pg_attribute a ON a.attrelid = rels.oid AND a.attnum > 0 AND NOT a.attisdropped
			     AND rels.relkind IN ('r', 'p')
			LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
			UNION ALL
			SELECT format('constraint %s %s %s', rels.relname, con.conname, pg_get_constraintdef(con.oid))
			FROM rels JOIN pg_constraint con ON con.conrelid = rels.oid
			UNION ALL
			SELECT format('index %s', pg_get_indexdef(i.indexrelid))
			FROM rels JOIN pg_index i ON i.indrelid = rels.oid
			UNION ALL
			SELECT format('trigger %s', pg_get_triggerdef(tg.oid))
			FROM rels JOIN pg_trigger tg ON tg.tgrelid = rels.oid AND NOT tg.tgisinternal
			UNION ALL
			SELECT format('function %s', pg_get_functiondef(p.oid))
			FROM pg_proc p WHERE p.pronamespace = current_schema()::regnamespace AND p.prokind IN ('f', 'p')
			UNION ALL
			SELECT format('grant on %s to %s: %s', rels.relname, acl.grantee, acl.privileges)
			FROM rels, LATERAL (
				SELECT coalesce(nullif(e.grantee, 0)::regrole::text, 'PUBLIC') AS grantee,
				       string_agg(e.privilege_type, ',' ORDER BY e.privilege_type) AS privileges
				FROM aclexplode(coalesce(rels.relacl, acldefault(CASE WHEN rels.relkind = 'S' THEN 's' ELSE 'r' END::"char", rels.relowner))) e
				GROUP BY e.grantee) acl
			UNION ALL
			SELECT format('grant on column %s.%s to %s: %s', rels.relname, a.attname, acl.grantee, acl.privileges)
			FROM rels JOIN pg_attribute a ON a.attrelid = rels.oid AND a.attnum > 0 AND a.attacl IS NOT NULL,
			LATERAL (
				SELECT coalesce(nullif(e.grantee, 0)::regrole::text, 'PUBLIC') AS grantee,
				       string_agg(e.privilege_type, ',' ORDER BY e.privilege_type) AS privileges
				FROM aclexplode(a.attacl) e GROUP BY e.grantee) acl
			UNION ALL
			SELECT format('grant on function %s to %s: %s', p.oid::regprocedure, acl.grantee, acl.privileges)
			FROM pg_proc p, LATERAL (
				SELECT coalesce(nullif(e.grantee, 0)::regrole::text, 'PUBLIC') AS grantee,
				       string_agg(e.privilege_type, ',' ORDER BY e.privilege_type) AS privileges
				FROM aclexplode(coalesce(p.proacl, acldefault('f'::"char", p.proowner))) e GROUP BY e.grantee) acl
			WHERE p.pronamespace = current_schema()::regnamespace AND p.prokind IN ('f', 'p')
			UNION ALL
			SELECT format('grant on schema to %s: %s', e.grantee::regrole, e.privilege_type)
			FROM pg_namespace n, aclexplode(n.nspacl) e
			WHERE n.oid = current_schema()::regnamespace AND e.grantee::regrole::text LIKE 'community\_deletion\_%'
		) fingerprint(entry)
		ORDER BY entry`, migration.VersionTable)
	require.NoError(t, err)
	entries, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return entries
}

// setDifference returns the entries only in want and those only in got, each
// cut to its first line so that a failure names the objects briefly.
func setDifference(want, got []string) (missing, extra []string) {
	firstLine := func(s string) string { line, _, _ := strings.Cut(s, "\n"); return line }
	for _, w := range want {
		if !slices.Contains(got, w) {
			missing = append(missing, firstLine(w))
		}
	}
	for _, g := range got {
		if !slices.Contains(want, g) {
			extra = append(extra, firstLine(g))
		}
	}
	return missing, extra
}

// migrationCount is the number of embedded migration files.
func migrationCount(t *testing.T) int {
	t.Helper()
	entries, err := fs.ReadDir(communitydeletion.Migrations(), ".")
	require.NoError(t, err)
	return len(entries)
}
