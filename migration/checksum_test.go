package migration_test

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"io/fs"
	"os"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"

	communitydeletion "github.com/tombstoneworks/communitydeletion"
	"github.com/tombstoneworks/communitydeletion/migration"
)

// sum is the hex SHA-256 of a migration file of fsys.
func sum(t *testing.T, fsys fs.FS, name string) string {
	t.Helper()
	data, err := fs.ReadFile(fsys, name)
	require.NoError(t, err)
	s := sha256.Sum256(data)
	return hex.EncodeToString(s[:])
}

// recordedChecksums maps each version above 0 that VersionTable records to
// its recorded checksum ("" when NULL).
func recordedChecksums(t *testing.T, db *sql.DB) map[int64]string {
	t.Helper()
	rows, err := db.Query("SELECT version_id, checksum FROM " + migration.VersionTable + " WHERE version_id > 0")
	require.NoError(t, err)
	defer rows.Close()
	out := map[int64]string{}
	for rows.Next() {
		var v int64
		var c sql.NullString
		require.NoError(t, rows.Scan(&v, &c))
		out[v] = c.String
	}
	require.NoError(t, rows.Err())
	return out
}

// shippedChecksums maps each version of fsys's files to its checksum.
func shippedChecksums(t *testing.T, fsys fs.FS) map[int64]string {
	t.Helper()
	entries, err := fs.ReadDir(fsys, ".")
	require.NoError(t, err)
	out := map[int64]string{}
	for i, e := range entries {
		out[int64(i+1)] = sum(t, fsys, e.Name())
	}
	return out
}

// hasChecksumColumn reports whether VersionTable has the checksum column.
func hasChecksumColumn(t *testing.T, db *sql.DB) bool {
	t.Helper()
	var ok bool
	require.NoError(t, db.QueryRow(`SELECT EXISTS (SELECT 1 FROM information_schema.columns
		WHERE table_schema = current_schema() AND table_name = $1 AND column_name = 'checksum')`,
		migration.VersionTable).Scan(&ok))
	return ok
}

// previousRelease migrates db with fsys the way releases before checksums
// did: goose's own postgres store on VersionTable, without a checksum column.
func previousRelease(t *testing.T, db *sql.DB, fsys fs.FS, version int64) {
	t.Helper()
	p, err := goose.NewProvider(goose.DialectPostgres, db, fsys,
		goose.WithDisableGlobalRegistry(true), goose.WithTableName(migration.VersionTable))
	require.NoError(t, err)
	_, err = p.UpTo(context.Background(), version)
	require.NoError(t, err)
}

// projectMapFS copies the project's migrations into a MapFS, to edit.
func projectMapFS(t *testing.T) fstest.MapFS {
	t.Helper()
	out := fstest.MapFS{}
	for _, name := range projectFiles(t) {
		data, err := fs.ReadFile(communitydeletion.Migrations(), name)
		require.NoError(t, err)
		out[name] = &fstest.MapFile{Data: data}
	}
	return out
}

// Each applied version is recorded with its file's checksum by the same
// INSERT that records the version (in the migration's own transaction, or
// right after a NO TRANSACTION file), so no applied version is ever without
// one; a failed file records neither.
func TestChecksumRecordedWithEachVersion(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	fsys := with(tiny(), "00003_widgets_name_index.sql", "SELECT 1/0;")
	m := newMigrator(t, b.db, migration.WithMigrations(fsys))
	_, err := m.Up(ctx)
	var fileErr *migration.FileError
	require.ErrorAs(t, err, &fileErr)
	want := shippedChecksums(t, fsys)
	delete(want, 3)
	require.Equal(t, want, recordedChecksums(t, b.db), "the failed 00003 records no row and no checksum")

	m = newMigrator(t, b.db, migration.WithMigrations(tiny()))
	res, err := m.Up(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"00003_widgets_name_index.sql"}, files(res))
	require.Equal(t, shippedChecksums(t, tiny()), recordedChecksums(t, b.db),
		"every applied row, the NO TRANSACTION 00003 too, has its file's checksum")

	status, err := m.Status(ctx)
	require.NoError(t, err)
	for _, s := range status {
		require.Equal(t, migration.ChecksumOK, s.ChecksumState, s.File)
		require.Equal(t, sum(t, tiny(), s.File), s.Checksum, s.File)
		require.Equal(t, s.Checksum, s.RecordedChecksum, s.File)
	}
	require.NoError(t, migration.ChecksumError(status))

	// Down removes the row, checksum and all; up records it again.
	_, err = m.Down(ctx)
	require.NoError(t, err)
	require.NotContains(t, recordedChecksums(t, b.db), int64(3))
	_, err = m.Up(ctx)
	require.NoError(t, err)
	require.Equal(t, shippedChecksums(t, tiny()), recordedChecksums(t, b.db))
}

// An applied file edited afterwards: every schema change is refused with one
// line naming the file and both checksums, applying and rolling back
// nothing; status shows the mismatch; after a person accepts the shipped
// checksums, up proceeds.
func TestChangedFileIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	_, err := newMigrator(t, b.db, migration.WithMigrations(tiny())).UpTo(ctx, 2)
	require.NoError(t, err)
	before := recordedChecksums(t, b.db)

	edited := with(tiny(), "00002_add_name.sql", "ALTER TABLE widgets ADD COLUMN name text; -- edited after release")
	m := newMigrator(t, b.db, migration.WithMigrations(edited), migration.WithLockTimeout(time.Second))
	original, shipped := sum(t, tiny(), "00002_add_name.sql"), sum(t, edited, "00002_add_name.sql")

	requireRefused := func(op string, err error) {
		t.Helper()
		require.ErrorIs(t, err, migration.ErrChecksumMismatch)
		var mismatch *migration.ChecksumMismatchError
		require.ErrorAs(t, err, &mismatch)
		require.Equal(t, []migration.ChecksumProblem{{Version: 2, File: "00002_add_name.sql", Recorded: original, Shipped: shipped}},
			mismatch.Problems)
		require.NotContains(t, err.Error(), "\n")
		require.True(t, strings.HasPrefix(err.Error(), op+": applied migrations differ from the shipped files, refusing to migrate, nothing changed: "+
			"00002_add_name.sql (version 2) was applied with checksum "+original[:12]+"… but the shipped file has "+shipped[:12]+"…"), err.Error())
		require.ErrorContains(t, err, "run 'migrate accept-checksums'")
		require.Zero(t, lockHolders(t, b.db, "ExclusiveLock"), "the refusal released the lock")
	}
	res, err := m.Up(ctx)
	requireRefused("up", err)
	require.Empty(t, res)
	_, err = m.UpTo(ctx, 3)
	requireRefused("up to 3", err)
	_, err = m.Pending(ctx)
	requireRefused("pending", err)
	// Down and DownTo go straight to goose: the refusal comes from the check
	// under the lock.
	one, err := m.Down(ctx)
	requireRefused("down", err)
	require.Nil(t, one)
	res, err = m.DownTo(ctx, 0)
	requireRefused("down to 0", err)
	require.Empty(t, res)
	require.Equal(t, before, recordedChecksums(t, b.db), "nothing applied, rolled back or recorded")
	require.True(t, relationExists(t, b.db, "widgets"))

	status, err := m.Status(ctx)
	require.NoError(t, err, "status reports the mismatch, it does not fail")
	require.Len(t, status, 3)
	require.Equal(t, migration.ChecksumOK, status[0].ChecksumState)
	require.Equal(t, migration.ChecksumMismatch, status[1].ChecksumState)
	require.Equal(t, original, status[1].RecordedChecksum)
	require.Equal(t, shipped, status[1].Checksum)
	require.Equal(t, migration.StatePending, status[2].State, "the migration after it stays pending")
	require.Empty(t, status[2].ChecksumState)
	require.ErrorIs(t, migration.ChecksumError(status), migration.ErrChecksumMismatch)

	// Accepting waits for the schema lock like a migration.
	holder, err := b.db.Conn(ctx)
	require.NoError(t, err)
	_, err = holder.ExecContext(ctx, "SELECT pg_advisory_lock($1)", key)
	require.NoError(t, err)
	_, err = m.AcceptChecksums(ctx)
	require.ErrorIs(t, err, migration.ErrLockTimeout)
	require.Equal(t, before, recordedChecksums(t, b.db))
	_, err = holder.ExecContext(ctx, "SELECT pg_advisory_unlock($1)", key)
	require.NoError(t, err)
	require.NoError(t, holder.Close())

	changes, err := m.AcceptChecksums(ctx)
	require.NoError(t, err)
	require.Equal(t, []migration.ChecksumChange{{Version: 2, File: "00002_add_name.sql", Previous: original, Recorded: shipped}}, changes)
	require.Zero(t, lockHolders(t, b.db, "ExclusiveLock"))
	changes, err = m.AcceptChecksums(ctx)
	require.NoError(t, err)
	require.Empty(t, changes, "a second acceptance changes nothing")

	res, err = m.Up(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"00003_widgets_name_index.sql"}, files(res))
	require.Equal(t, shippedChecksums(t, edited), recordedChecksums(t, b.db))
}

// An applied version that no shipped file has is refused too, and cannot be
// accepted: its file must come back.
func TestAppliedVersionWithoutFileIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	_, err := newMigrator(t, b.db, migration.WithMigrations(tiny())).UpTo(ctx, 2)
	require.NoError(t, err)
	before := recordedChecksums(t, b.db)
	withoutTwo := tiny()
	delete(withoutTwo, "00002_add_name.sql")
	m := newMigrator(t, b.db, migration.WithMigrations(withoutTwo), migration.WithAllowOutOfOrder(true))

	res, err := m.Up(ctx)
	require.ErrorIs(t, err, migration.ErrChecksumMismatch)
	require.Empty(t, res)
	require.ErrorContains(t, err, "up: applied migrations differ from the shipped files, refusing to migrate, nothing changed: "+
		"version 2 is applied (checksum "+before[2][:12]+"…) but no shipped migration file has it; "+
		"a released migration was edited or removed")
	_, err = m.Down(ctx)
	require.ErrorIs(t, err, migration.ErrChecksumMismatch)

	status, err := m.Status(ctx)
	require.NoError(t, err)
	require.Equal(t, []int64{1, 2, 3}, []int64{status[0].Version, status[1].Version, status[2].Version})
	require.Equal(t, migration.Status{Version: 2, State: migration.StateApplied, AppliedAt: status[1].AppliedAt,
		RecordedChecksum: before[2], ChecksumState: migration.ChecksumNoFile}, status[1])

	changes, err := m.AcceptChecksums(ctx)
	require.ErrorIs(t, err, migration.ErrChecksumMismatch)
	require.Empty(t, changes)
	require.NotContains(t, err.Error(), "\n")
	require.ErrorContains(t, err, "accept checksums: applied migrations differ from the shipped files, refusing to accept checksums, nothing changed: version 2")
	require.Equal(t, before, recordedChecksums(t, b.db))
}

// A database migrated before checksums existed (VersionTable without the
// checksum column) is adopted: status reports the applied migrations as
// unrecorded and writes nothing; the next operation under the lock adds the
// column and records the shipped checksums, and says so; from then on an
// edit is refused.
func TestChecksumsAdoptedOnADatabaseMigratedBeforeThem(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		applied int64 // by the previous release
		run     func(m *migration.Migrator) ([]migration.Result, error)
		want    []string
	}{
		{"up with a migration pending", 2, func(m *migration.Migrator) ([]migration.Result, error) { return m.Up(ctx) },
			[]string{"00003_widgets_name_index.sql"}},
		{"up with nothing pending", 3, func(m *migration.Migrator) ([]migration.Result, error) { return m.Up(ctx) }, nil},
		{"down", 3, func(m *migration.Migrator) ([]migration.Result, error) {
			r, err := m.Down(ctx)
			return []migration.Result{*r}, err
		}, []string{"00003_widgets_name_index.sql"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			previousRelease(t, b.db, tiny(), tc.applied)
			require.False(t, hasChecksumColumn(t, b.db))
			var notices []string
			m := newMigrator(t, b.db, migration.WithMigrations(tiny()),
				migration.WithChecksumNotice(func(msg string) { notices = append(notices, msg) }))

			status, err := m.Status(ctx)
			require.NoError(t, err)
			for _, s := range status[:tc.applied] {
				require.Equal(t, migration.ChecksumUnrecorded, s.ChecksumState, s.File)
				require.Empty(t, s.RecordedChecksum)
			}
			require.NoError(t, migration.ChecksumError(status), "an unrecorded checksum is no mismatch")
			_, err = m.Pending(ctx)
			require.NoError(t, err)
			require.False(t, hasChecksumColumn(t, b.db), "status and the dry run write nothing")
			require.Empty(t, notices)

			res, err := tc.run(m)
			require.NoError(t, err)
			require.Equal(t, tc.want, files(res))
			require.Len(t, notices, 1)
			require.Contains(t, notices[0], "recorded the shipped files' checksums for applied versions 1-")
			want := shippedChecksums(t, tiny())
			for v := range want {
				if _, applied := recordedChecksums(t, b.db)[v]; !applied {
					delete(want, v)
				}
			}
			require.Equal(t, want, recordedChecksums(t, b.db), "every applied row has its shipped checksum")
			status, err = m.Status(ctx)
			require.NoError(t, err)
			for _, s := range status {
				if s.State == migration.StateApplied {
					require.Equal(t, migration.ChecksumOK, s.ChecksumState, s.File)
				}
			}

			// Adopted once: a later edit of an applied file is refused.
			edited := with(tiny(), "00001_create_widgets.sql", "CREATE TABLE widgets (id bigint PRIMARY KEY, edited int);")
			_, err = newMigrator(t, b.db, migration.WithMigrations(edited)).Up(ctx)
			require.ErrorIs(t, err, migration.ErrChecksumMismatch)
			require.ErrorContains(t, err, "00001_create_widgets.sql (version 1)")
		})
	}
}

// The history adopted from goose_db_version is recorded with the shipped
// checksums, also into a VersionTable created before checksums existed.
func TestAdoptedLegacyVersionsHaveChecksums(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	count := int64(len(projectFiles(t)))
	legacyGoose(t, b.db, count)
	// A previous release's status created VersionTable, empty and without
	// the checksum column.
	p, err := goose.NewProvider(goose.DialectPostgres, b.db, communitydeletion.Migrations(),
		goose.WithDisableGlobalRegistry(true), goose.WithTableName(migration.VersionTable))
	require.NoError(t, err)
	_, err = p.Status(ctx)
	require.NoError(t, err)
	require.False(t, hasChecksumColumn(t, b.db))

	m := newMigrator(t, b.db)
	adoption, err := m.AdoptLegacyVersions(ctx)
	require.NoError(t, err)
	require.Len(t, adoption.Adopted, int(count))
	require.Equal(t, shippedChecksums(t, communitydeletion.Migrations()), recordedChecksums(t, b.db))
	status, err := m.Status(ctx)
	require.NoError(t, err)
	for _, s := range status {
		require.Equal(t, migration.ChecksumOK, s.ChecksumState, s.File)
	}
}

// The earlier release of a file revised in place that the project vouches
// for (the first release of 00011, which 00014 reconciles) is accepted with
// its own state, while any other content of 00011 is refused.
func TestEarlierReleaseIsAccepted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	first := projectMapFS(t)
	data, err := os.ReadFile("testdata/00011_community_deletion_least_privilege.first_release.sql")
	require.NoError(t, err)
	first["00011_community_deletion_least_privilege.sql"] = &fstest.MapFile{Data: data}
	other := projectMapFS(t)
	other["00011_community_deletion_least_privilege.sql"] = &fstest.MapFile{Data: append(data, "\n-- edited\n"...)}

	for _, tc := range []struct {
		name  string
		fsys  fstest.MapFS
		state migration.ChecksumState
	}{
		{"first release", first, migration.ChecksumEarlierRelease},
		{"any other edit", other, migration.ChecksumMismatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			_, err := newMigrator(t, b.db, migration.WithMigrations(tc.fsys)).UpTo(ctx, 11)
			require.NoError(t, err)
			m := newMigrator(t, b.db)
			status, err := m.Status(ctx)
			require.NoError(t, err)
			require.Equal(t, tc.state, status[10].ChecksumState)
			_, err = m.UpTo(ctx, 12)
			if tc.state == migration.ChecksumMismatch {
				require.ErrorIs(t, err, migration.ErrChecksumMismatch)
				return
			}
			require.NoError(t, err)
		})
	}
}
