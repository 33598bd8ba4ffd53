package migration_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"testing/fstest"
	"time"

	"github.com/stretchr/testify/require"

	communitydeletion "github.com/tombstoneworks/communitydeletion"
	"github.com/tombstoneworks/communitydeletion/migration"
)

// legacyGoose migrates db as releases before migration.VersionTable did:
// goose's defaults, so the history goes to goose_db_version.
func legacyGoose(t *testing.T, db *sql.DB, version int64) {
	t.Helper()
	_, err := serviceGoose(t, db, communitydeletion.Migrations()).UpTo(context.Background(), version)
	require.NoError(t, err)
}

// tableRows renders every row of a goose version table, to compare before
// and after.
func tableRows(t *testing.T, db *sql.DB, table string) []string {
	t.Helper()
	rows, err := db.Query("SELECT id, version_id, is_applied, tstamp FROM " + table + " ORDER BY id")
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id, version int64
		var applied bool
		var at time.Time
		require.NoError(t, rows.Scan(&id, &version, &applied, &at))
		out = append(out, fmt.Sprintf("%d %d %t %s", id, version, applied, at.Format(time.RFC3339Nano)))
	}
	require.NoError(t, rows.Err())
	return out
}

// legacyTimes maps each version goose_db_version records to its time.
func legacyTimes(t *testing.T, db *sql.DB) map[int64]time.Time {
	t.Helper()
	rows, err := db.Query("SELECT version_id, tstamp FROM " + migration.LegacyVersionTable + " WHERE version_id > 0")
	require.NoError(t, err)
	defer rows.Close()
	out := map[int64]time.Time{}
	for rows.Next() {
		var v int64
		var at time.Time
		require.NoError(t, rows.Scan(&v, &at))
		out[v] = at
	}
	require.NoError(t, rows.Err())
	return out
}

// Each legacy probe passes exactly when its version is applied: climbing one
// version at a time and descending again, at version k the probes of 1..k
// pass and the others fail. A probe that passes too early would adopt a
// version that never ran; one that stops passing would refuse a database
// that is fine.
func TestLegacyProbesMatchEachVersion(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	m := newMigrator(t, b.db)
	count := int64(len(projectFiles(t)))

	requireProbes := func(at int64) {
		t.Helper()
		got, err := migration.ProbeVersions(ctx, b.db)
		require.NoError(t, err)
		for version := int64(1); version <= count; version++ {
			require.Equal(t, version <= at, got[version],
				"at version %d, the probe of version %d (see legacyProbes in migration/probes.go)", at, version)
		}
	}
	requireProbes(0)
	for version := int64(1); version <= count; version++ {
		_, err := m.UpTo(ctx, version)
		require.NoError(t, err)
		requireProbes(version)
	}
	for version := count - 1; version >= 0; version-- {
		_, err := m.Down(ctx)
		require.NoError(t, err)
		requireProbes(version)
	}
}

// A database migrated into goose_db_version by an earlier release, next to a
// service's own goose history: every schema change is refused until
// adoption, adoption copies exactly our versions under the schema lock and
// leaves goose_db_version alone, and a second adoption does nothing.
func TestAdoptLegacyVersions(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	want := projectFiles(t)
	count := int64(len(want))
	legacyGoose(t, b.db, count)
	// The service's own migration, recorded after ours in the shared table;
	// a timestamp version, as goose creates them, that no migration of ours
	// will ever have.
	_, err := serviceGoose(t, b.db, fstest.MapFS{
		"20250101000000_app.sql": {Data: []byte("-- +goose Up\nCREATE TABLE app_accounts (id bigint PRIMARY KEY);\n")},
	}).Up(ctx)
	require.NoError(t, err)
	legacyBefore := tableRows(t, b.db, migration.LegacyVersionTable)
	times := legacyTimes(t, b.db)

	m := newMigrator(t, b.db, migration.WithLockTimeout(time.Second))
	res, err := m.Up(ctx)
	require.ErrorIs(t, err, migration.ErrLegacyVersionsNotAdopted)
	require.Empty(t, res)
	require.NotContains(t, err.Error(), "\n")
	require.ErrorContains(t, err, "up: this project's migrations are recorded in goose_db_version and not yet adopted")
	require.ErrorContains(t, err, fmt.Sprintf("versions 1-%d", count))
	require.ErrorContains(t, err, "run 'migrate adopt-legacy-versions'")
	_, err = m.UpTo(ctx, count)
	require.ErrorIs(t, err, migration.ErrLegacyVersionsNotAdopted)
	_, err = m.Pending(ctx)
	require.ErrorIs(t, err, migration.ErrLegacyVersionsNotAdopted)
	_, err = m.Down(ctx)
	require.ErrorIs(t, err, migration.ErrLegacyVersionsNotAdopted)
	require.ErrorContains(t, err, "down: this project's migrations")
	_, err = m.DownTo(ctx, 0)
	require.ErrorIs(t, err, migration.ErrLegacyVersionsNotAdopted)
	require.True(t, relationExists(t, b.db, "community_deletion_requests"), "nothing was rolled back")
	require.Zero(t, lockHolders(t, b.db, "ExclusiveLock"), "the refusal released the lock")
	status, err := m.Status(ctx)
	require.NoError(t, err)
	require.Len(t, status, len(want), "status lists only our migrations, never the service's")

	// Adoption waits for the schema lock like a migration.
	holder, err := b.db.Conn(ctx)
	require.NoError(t, err)
	_, err = holder.ExecContext(ctx, "SELECT pg_advisory_lock($1)", key)
	require.NoError(t, err)
	_, err = m.AdoptLegacyVersions(ctx)
	require.ErrorIs(t, err, migration.ErrLockTimeout)
	require.Empty(t, appliedVersions(t, b.db, migration.VersionTable), "nothing adopted without the lock")
	_, err = holder.ExecContext(ctx, "SELECT pg_advisory_unlock($1)", key)
	require.NoError(t, err)
	require.NoError(t, holder.Close())

	adoption, err := m.AdoptLegacyVersions(ctx)
	require.NoError(t, err)
	require.False(t, adoption.AlreadyTracked)
	var adopted []string
	for i, s := range adoption.Adopted {
		adopted = append(adopted, s.File)
		require.Equal(t, int64(i+1), s.Version)
		require.Equal(t, migration.StateApplied, s.State)
		require.True(t, times[s.Version].Equal(s.AppliedAt), "%s keeps the time it was applied", s.File)
	}
	require.Equal(t, want, adopted)
	require.Equal(t, upTo(len(want)), appliedVersions(t, b.db, migration.VersionTable), "exactly our versions")
	require.Equal(t, legacyBefore, tableRows(t, b.db, migration.LegacyVersionTable), "goose_db_version untouched")
	require.Zero(t, lockHolders(t, b.db, "ExclusiveLock"))

	oursBefore := tableRows(t, b.db, migration.VersionTable)
	again, err := m.AdoptLegacyVersions(ctx)
	require.NoError(t, err)
	require.Equal(t, migration.Adoption{AlreadyTracked: true}, again, "a second adoption does nothing")
	require.Equal(t, oursBefore, tableRows(t, b.db, migration.VersionTable))

	res, err = m.Up(ctx)
	require.NoError(t, err)
	require.Empty(t, res, "every migration counts as applied")
	status, err = m.Status(ctx)
	require.NoError(t, err)
	for _, s := range status {
		require.Equal(t, migration.StateApplied, s.State, s.File)
		require.True(t, times[s.Version].Equal(s.AppliedAt), s.File)
	}
	v, err := m.Version(ctx)
	require.NoError(t, err)
	require.Equal(t, count, v)
}

// Adoption never guesses: a version goose_db_version records whose objects
// are absent (the service's own migration of that number) is named and
// nothing is adopted.
func TestAdoptRefusesAmbiguousVersions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("only the service's versions", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := serviceGoose(t, b.db, serviceMigrations()).Up(ctx)
		require.NoError(t, err)
		legacyBefore := tableRows(t, b.db, migration.LegacyVersionTable)
		m := newMigrator(t, b.db)

		_, err = m.AdoptLegacyVersions(ctx)
		var ambiguous *migration.AmbiguousLegacyVersionsError
		require.ErrorAs(t, err, &ambiguous)
		require.Equal(t, []int64{1, 2}, ambiguous.Versions)
		require.NotContains(t, err.Error(), "\n")
		require.ErrorContains(t, err, "adopt legacy versions: refusing to adopt, nothing adopted: "+
			"goose_db_version records version 1 (00001_communities.sql) but its objects are absent "+
			"(table communities, table community_scoped_tables), so it is not this project's migration")
		require.ErrorContains(t, err, "version 2 (00002_community_deletion_requests.sql)")
		require.Empty(t, appliedVersions(t, b.db, migration.VersionTable))
		require.Equal(t, legacyBefore, tableRows(t, b.db, migration.LegacyVersionTable))

		// Those versions are not ours, so up is not refused: it installs
		// the schema beside the service's history.
		res, err := m.Up(ctx)
		require.NoError(t, err)
		require.Equal(t, projectFiles(t), files(res))
	})

	t.Run("ours then a service version of the same number", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		legacyGoose(t, b.db, 3)
		// The service's goose, over its own files, records its version 4
		// in the shared table.
		_, err := serviceGoose(t, b.db, fstest.MapFS{
			"00004_app.sql": {Data: []byte("-- +goose Up\nCREATE TABLE app_accounts (id bigint PRIMARY KEY);\n")},
		}).Up(ctx)
		require.NoError(t, err)
		require.Equal(t, []int64{1, 2, 3, 4}, appliedVersions(t, b.db, migration.LegacyVersionTable))
		m := newMigrator(t, b.db)

		_, err = m.Up(ctx)
		require.ErrorIs(t, err, migration.ErrLegacyVersionsNotAdopted)
		require.ErrorContains(t, err, "versions 1-3 with their objects present")
		_, err = m.AdoptLegacyVersions(ctx)
		var ambiguous *migration.AmbiguousLegacyVersionsError
		require.ErrorAs(t, err, &ambiguous)
		require.Equal(t, []int64{4}, ambiguous.Versions)
		require.ErrorContains(t, err, "goose_db_version records version 4 (00004_community_deletion_locks.sql) but its objects are absent")
		require.Empty(t, appliedVersions(t, b.db, migration.VersionTable))
	})

	t.Run("objects present but unrecorded", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		legacyGoose(t, b.db, 2)
		_, err := b.db.Exec("DELETE FROM " + migration.LegacyVersionTable + " WHERE version_id = 2")
		require.NoError(t, err)
		_, err = newMigrator(t, b.db).AdoptLegacyVersions(ctx)
		var ambiguous *migration.AmbiguousLegacyVersionsError
		require.ErrorAs(t, err, &ambiguous)
		require.Equal(t, []int64{2}, ambiguous.Versions)
		require.ErrorContains(t, err, "the objects of version 2 (00002_community_deletion_requests.sql) exist but goose_db_version does not record it")
		require.Empty(t, appliedVersions(t, b.db, migration.VersionTable))
	})

	t.Run("nothing to adopt", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		adoption, err := newMigrator(t, b.db).AdoptLegacyVersions(ctx)
		require.NoError(t, err)
		require.Equal(t, migration.Adoption{}, adoption)
		require.False(t, relationExists(t, b.db, migration.VersionTable), "adopting nothing writes nothing")
	})
}

// A rollback recorded the way goose releases before Provider did (a row with
// is_applied false) means the version is not applied: it is not adopted.
func TestAdoptReadsTheLatestRowOfEachVersion(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	legacyGoose(t, b.db, 2)
	_, err := serviceGoose(t, b.db, communitydeletion.Migrations()).Down(ctx)
	require.NoError(t, err)
	_, err = b.db.Exec("INSERT INTO " + migration.LegacyVersionTable + " (version_id, is_applied) VALUES (2, true), (2, false)")
	require.NoError(t, err)

	adoption, err := newMigrator(t, b.db).AdoptLegacyVersions(ctx)
	require.NoError(t, err)
	require.Len(t, adoption.Adopted, 1)
	require.Equal(t, "00001_communities.sql", adoption.Adopted[0].File)
	require.Equal(t, []int64{1}, appliedVersions(t, b.db, migration.VersionTable))
}
