package migration_test

import (
	"context"
	"database/sql"
	"maps"
	"strconv"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	communitydeletion "github.com/tombstoneworks/communitydeletion"
	"github.com/tombstoneworks/communitydeletion/internal/ephemeralpg"
	"github.com/tombstoneworks/communitydeletion/migration"
)

const key = communitydeletion.SchemaDestructionLockKey

// testBundle is what a database test gets from setup.
type testBundle struct {
	// url addresses a fresh, empty database that only this test uses.
	url string
	// db is a pool on that database.
	db *sql.DB
}

// server is the throwaway PostgreSQL these tests share; each test gets its
// own empty database on it.
var server *ephemeralpg.Server

func TestMain(m *testing.M) { ephemeralpg.RunTests(m, ephemeralpg.Options{}, &server) }

// setup creates a fresh, empty database for the test and drops it when the
// test ends. Advisory locks are per database, so tests that each own a
// database can run in parallel.
func setup(t *testing.T) testBundle {
	t.Helper()
	url := ephemeralpg.NewEmptyTestDatabase(t, server)
	config, err := pgx.ParseConfig(url)
	require.NoError(t, err)
	db := stdlib.OpenDB(*config)
	t.Cleanup(func() { _ = db.Close() })
	return testBundle{url: url, db: db}
}

// tiny is three small migrations; the third runs outside a transaction.
func tiny() fstest.MapFS {
	return fstest.MapFS{
		"00001_create_widgets.sql": {Data: []byte(`-- +goose Up
CREATE TABLE widgets (id bigint PRIMARY KEY);
-- +goose Down
DROP TABLE widgets;
`)},
		"00002_add_name.sql": {Data: []byte(`-- +goose Up
ALTER TABLE widgets ADD COLUMN name text;
-- +goose Down
ALTER TABLE widgets DROP COLUMN name;
`)},
		"00003_widgets_name_index.sql": {Data: []byte(`-- +goose NO TRANSACTION
-- +goose Up
CREATE INDEX CONCURRENTLY widgets_name_idx ON widgets (name);
-- +goose Down
DROP INDEX CONCURRENTLY widgets_name_idx;
`)},
	}
}

// with returns a copy of fsys with the file name set to an up-only migration.
func with(fsys fstest.MapFS, name, up string) fstest.MapFS {
	out := fstest.MapFS{}
	maps.Copy(out, fsys)
	out[name] = &fstest.MapFile{Data: []byte("-- +goose Up\n" + up + "\n")}
	return out
}

func newMigrator(t *testing.T, db *sql.DB, opts ...migration.Option) *migration.Migrator {
	t.Helper()
	m, err := migration.New(db, opts...)
	require.NoError(t, err)
	return m
}

func files(res []migration.Result) []string {
	var out []string
	for _, r := range res {
		out = append(out, r.File)
	}
	return out
}

// lockHolders counts the sessions holding the schema destruction lock in mode
// ("ExclusiveLock" or "ShareLock") on the test database.
func lockHolders(t *testing.T, db *sql.DB, mode string) int {
	t.Helper()
	n, err := countHolders(db, mode)
	require.NoError(t, err)
	return n
}

func countHolders(db *sql.DB, mode string) (int, error) {
	var n int
	err := db.QueryRow(`
SELECT count(*) FROM pg_locks
WHERE locktype = 'advisory' AND granted AND mode = $1 AND objsubid = 1
  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND classid::bigint = $2 AND objid::bigint = $3`,
		mode, int64(uint64(key)>>32), int64(uint64(key)&0xffffffff)).Scan(&n)
	return n, err
}

func TestNewValidatesOptions(t *testing.T) {
	t.Parallel()
	db := stdlib.OpenDB(pgx.ConnConfig{}) // never connects
	t.Cleanup(func() { _ = db.Close() })

	_, err := migration.New(nil)
	require.Error(t, err)
	_, err = migration.New(db, migration.WithMigrations(tiny()), migration.WithLockTimeout(-time.Second))
	require.ErrorContains(t, err, "lock timeout must not be negative")
	_, err = migration.New(db, migration.WithMigrations(tiny()), migration.WithDDLLockTimeout(-time.Second))
	require.ErrorContains(t, err, "DDL lock timeout must not be negative")
	_, err = migration.New(db, migration.WithMigrations(fstest.MapFS{}))
	require.ErrorContains(t, err, "no migrations found")
	m, err := migration.New(db, migration.WithMigrations(tiny()))
	require.NoError(t, err)
	require.NoError(t, m.Close())
}

func TestUpStatusVersionPending(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	m, err := migration.Open(ctx, b.url, migration.WithMigrations(tiny()))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, m.Close()) })

	v, err := m.Version(ctx)
	require.NoError(t, err)
	require.Zero(t, v)
	pending, err := m.Pending(ctx)
	require.NoError(t, err)
	require.Len(t, pending, 3)
	require.Equal(t, "00001_create_widgets.sql", pending[0].File)
	v, err = m.Version(ctx)
	require.NoError(t, err)
	require.Zero(t, v, "the dry run applies nothing")

	res, err := m.Up(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"00001_create_widgets.sql", "00002_add_name.sql", "00003_widgets_name_index.sql"}, files(res))
	for i, r := range res {
		require.Equal(t, int64(i+1), r.Version)
		require.Equal(t, migration.DirectionUp, r.Direction)
		require.Positive(t, r.Duration)
	}
	require.Zero(t, lockHolders(t, b.db, "ExclusiveLock"), "the lock is released after the run")

	v, err = m.Version(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(3), v)
	res, err = m.Up(ctx)
	require.NoError(t, err)
	require.Empty(t, res)
	pending, err = m.Pending(ctx)
	require.NoError(t, err)
	require.Empty(t, pending)

	status, err := m.Status(ctx)
	require.NoError(t, err)
	require.Len(t, status, 3)
	for _, s := range status {
		require.Equal(t, migration.StateApplied, s.State, s.File)
		require.False(t, s.AppliedAt.IsZero(), s.File)
	}
}

func TestUpToDownDownTo(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	m := newMigrator(t, b.db, migration.WithMigrations(tiny()))

	res, err := m.UpTo(ctx, 2)
	require.NoError(t, err)
	require.Equal(t, []string{"00001_create_widgets.sql", "00002_add_name.sql"}, files(res))
	status, err := m.Status(ctx)
	require.NoError(t, err)
	require.Equal(t, migration.StateApplied, status[1].State)
	require.Equal(t, migration.StatePending, status[2].State)
	require.True(t, status[2].AppliedAt.IsZero())

	_, err = m.UpTo(ctx, 0)
	require.Error(t, err)

	one, err := m.Down(ctx)
	require.NoError(t, err)
	require.NotNil(t, one)
	require.Equal(t, "00002_add_name.sql", one.File)
	require.Equal(t, migration.DirectionDown, one.Direction)

	_, err = m.Up(ctx)
	require.NoError(t, err)
	res, err = m.DownTo(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, []string{"00003_widgets_name_index.sql", "00002_add_name.sql", "00001_create_widgets.sql"}, files(res))
	v, err := m.Version(ctx)
	require.NoError(t, err)
	require.Zero(t, v)

	one, err = m.Down(ctx)
	require.NoError(t, err)
	require.Nil(t, one, "nothing to roll back")
	res, err = m.DownTo(ctx, 0)
	require.NoError(t, err)
	require.Empty(t, res)
	_, err = m.DownTo(ctx, -1)
	require.Error(t, err)
}

// gateKey is an advisory lock a test holds to park a migration mid-run: the
// migration's SQL waits on it while goose holds the schema lock.
const gateKey = 4242

// closeGate takes the gate lock on a session of its own and returns the
// func that opens it.
func closeGate(t *testing.T, db *sql.DB) (open func()) {
	t.Helper()
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	require.NoError(t, err)
	_, err = conn.ExecContext(ctx, "SELECT pg_advisory_lock($1)", gateKey)
	require.NoError(t, err)
	var once sync.Once
	open = func() {
		once.Do(func() {
			_, err := conn.ExecContext(ctx, "SELECT pg_advisory_unlock($1)", gateKey)
			require.NoError(t, err)
			require.NoError(t, conn.Close())
		})
	}
	t.Cleanup(open)
	return open
}

// parkedMigrations is tiny() plus a migration that waits at the gate.
func parkedMigrations() fstest.MapFS {
	return with(tiny(), "00002_add_name.sql",
		"SELECT pg_advisory_xact_lock(4242);\nALTER TABLE widgets ADD COLUMN name text;")
}

// waitingOn waits until some session waits for the advisory lock
// (classid, objid) of key in this database.
func requireWaiter(t *testing.T, db *sql.DB, key int64) {
	t.Helper()
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, db.QueryRow(`SELECT count(*) FROM pg_locks
			WHERE locktype = 'advisory' AND NOT granted
			  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
			  AND classid::bigint = $1 AND objid::bigint = $2`,
			int64(uint64(key)>>32), int64(uint64(key)&0xffffffff)).Scan(&n))
		return n > 0
	}, 30*time.Second, 5*time.Millisecond)
}

func TestConcurrentUpAppliesOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	open := closeGate(t, b.db)
	first := newMigrator(t, b.db, migration.WithMigrations(parkedMigrations()))
	waiting := make(chan string, 1)
	second := newMigrator(t, b.db, migration.WithMigrations(parkedMigrations()),
		migration.WithLockWaitNotice(func(msg string) { waiting <- msg }))

	var wg sync.WaitGroup
	var firstRes, secondRes []migration.Result
	var firstErr, secondErr error
	wg.Go(func() { firstRes, firstErr = first.Up(ctx) })
	requireWaiter(t, b.db, gateKey) // the first run is parked inside 00002, holding the schema lock
	require.Equal(t, 1, lockHolders(t, b.db, "ExclusiveLock"))
	wg.Go(func() { secondRes, secondErr = second.Up(ctx) })
	notice := <-waiting // the second run saw the lock taken and waits
	open()
	wg.Wait()

	require.NoError(t, firstErr)
	require.NoError(t, secondErr)
	require.Len(t, firstRes, 3)
	require.Empty(t, secondRes, "the second run waits for the lock, then finds nothing to apply")
	require.Contains(t, notice, "waiting up to 5m0s")
	require.Contains(t, notice, "another migration")
}

// stuckGuard returns ctx with a deadline far beyond any lock timeout the
// tests set: a migrator that ignored its timeout, or kept retrying, would
// wait on a holder who never lets go and end with the deadline's error
// instead of the one the test expects. No elapsed time is compared with a
// bound, so a slow host cannot fail a test.
func stuckGuard(ctx context.Context, t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func TestLockTimeout(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		hold   string
		holder string
	}{
		{"held by another migration", "SELECT pg_advisory_lock($1)", "ExclusiveLock: another migration"},
		{"held by a destructive stage", "SELECT pg_advisory_xact_lock_shared($1)", "ShareLock: a destructive deletion stage"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			tx, err := b.db.BeginTx(ctx, nil)
			require.NoError(t, err)
			_, err = tx.ExecContext(ctx, tc.hold, key)
			require.NoError(t, err)

			m := newMigrator(t, b.db, migration.WithMigrations(tiny()), migration.WithLockTimeout(time.Second))
			start := time.Now()
			res, err := m.Up(stuckGuard(ctx, t))
			elapsed := time.Since(start)
			require.ErrorIs(t, err, migration.ErrLockTimeout, "the wait is bounded")
			require.Empty(t, res)
			require.GreaterOrEqual(t, elapsed, time.Second) // a slow host only waits longer
			require.ErrorContains(t, err, strconv.FormatInt(key, 10))
			require.ErrorContains(t, err, "0x6364736368656d61")
			require.ErrorContains(t, err, "another migration or a destructive deletion stage holds it")
			require.ErrorContains(t, err, tc.holder)
			_, err = m.Down(ctx)
			require.ErrorIs(t, err, migration.ErrLockTimeout)

			// A transaction-level lock goes with the transaction; the
			// session-level one needs an explicit unlock on its session.
			_, err = tx.ExecContext(ctx, "SELECT pg_advisory_unlock_all()")
			require.NoError(t, err)
			require.NoError(t, tx.Rollback())
			res, err = m.Up(ctx)
			require.NoError(t, err)
			require.Len(t, res, 3)
		})
	}
}

func TestMigrationHoldsOffDestructiveStages(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	open := closeGate(t, b.db)
	// Without the CREATE INDEX CONCURRENTLY file: it waits for every older
	// snapshot, including the stage queued on the lock, which would be a
	// deadlock (PostgreSQL aborts one side with 40P01). Destructive stages
	// must therefore not wait for this lock inside a long statement.
	fsys := parkedMigrations()
	delete(fsys, "00003_widgets_name_index.sql")
	m := newMigrator(t, b.db, migration.WithMigrations(fsys))

	done := make(chan error, 1)
	go func() { _, err := m.Up(ctx); done <- err }()
	requireWaiter(t, b.db, gateKey)

	// A destructive stage takes the key shared at transaction level: it
	// queues behind the running migration and gets the lock once it ends.
	tx, err := b.db.BeginTx(ctx, nil)
	require.NoError(t, err)
	defer tx.Rollback()
	shared := make(chan error, 1)
	go func() {
		_, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock_shared($1)", key)
		shared <- err
	}()
	requireWaiter(t, b.db, key)
	select {
	case err := <-shared:
		t.Fatalf("a destructive stage took the lock while a migration ran: %v", err)
	default:
	}
	open()
	require.NoError(t, <-done)
	require.NoError(t, <-shared)
}

func TestLockLost(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	m := newMigrator(t, b.db, migration.WithMigrations(
		with(tiny(), "00002_add_name.sql", "ALTER TABLE widgets ADD COLUMN name text;\nSELECT pg_advisory_unlock_all();")))

	res, err := m.Up(stuckGuard(ctx, t))
	require.ErrorIs(t, err, migration.ErrLockLost, "a lost lock is reported, not retried")
	require.ErrorContains(t, err, "0x6364736368656d61")
	require.Len(t, res, 3, "the results still report what was applied")
}

func TestOutOfOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	// 00003 does not need 00002, and is the same file in both sets: an
	// applied file that changed would be refused first (ErrChecksumMismatch).
	all := with(tiny(), "00003_widgets_name_index.sql", "CREATE INDEX widgets_id_idx ON widgets (id);")
	oneAndThree := fstest.MapFS{
		"00001_create_widgets.sql":     all["00001_create_widgets.sql"],
		"00003_widgets_name_index.sql": all["00003_widgets_name_index.sql"],
	}
	_, err := newMigrator(t, b.db, migration.WithMigrations(oneAndThree)).Up(ctx)
	require.NoError(t, err)

	strict := newMigrator(t, b.db, migration.WithMigrations(all))
	_, err = strict.Pending(ctx)
	require.ErrorIs(t, err, migration.ErrOutOfOrder)
	require.ErrorContains(t, err, "00002_add_name.sql")
	res, err := strict.Up(ctx)
	require.ErrorIs(t, err, migration.ErrOutOfOrder)
	require.Empty(t, res)

	lenient := newMigrator(t, b.db, migration.WithMigrations(all), migration.WithAllowOutOfOrder(true))
	pending, err := lenient.Pending(ctx)
	require.NoError(t, err)
	require.Len(t, pending, 1)
	require.Equal(t, "00002_add_name.sql", pending[0].File)
	res, err = lenient.Up(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"00002_add_name.sql"}, files(res))
}

func TestDDLLockTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	m := newMigrator(t, b.db, migration.WithMigrations(tiny()), migration.WithDDLLockTimeout(500*time.Millisecond))
	_, err := m.UpTo(ctx, 1)
	require.NoError(t, err)

	// A long reader of widgets: ALTER TABLE would queue behind it.
	blocker, err := b.db.BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = blocker.ExecContext(ctx, "LOCK TABLE widgets IN ACCESS SHARE MODE")
	require.NoError(t, err)

	res, err := m.Up(stuckGuard(ctx, t))
	require.Empty(t, res)
	var migErr *migration.FileError
	require.ErrorAs(t, err, &migErr)
	require.Equal(t, "00002_add_name.sql", migErr.File)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "55P03", pgErr.Code)
	require.ErrorContains(t, err, "DDL lock_timeout of 500ms")
	require.Zero(t, lockHolders(t, b.db, "ExclusiveLock"))

	require.NoError(t, blocker.Rollback())
	res, err = m.Up(ctx)
	require.NoError(t, err)
	require.Len(t, res, 2)
}

func TestStatementTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	m := newMigrator(t, b.db, migration.WithStatementTimeout(300*time.Millisecond),
		migration.WithMigrations(with(tiny(), "00002_add_name.sql", "SELECT pg_sleep(5);")))
	res, err := m.Up(ctx)
	require.Equal(t, []string{"00001_create_widgets.sql"}, files(res))
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "57014", pgErr.Code)
}

func TestEachFileInItsOwnTransaction(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	m := newMigrator(t, b.db, migration.WithMigrations(
		with(tiny(), "00002_add_name.sql", "CREATE TABLE gadgets (id bigint);\nSELECT 1/0;")))
	res, err := m.Up(ctx)
	var migErr *migration.FileError
	require.ErrorAs(t, err, &migErr)
	require.Equal(t, int64(2), migErr.Version)
	require.Equal(t, migration.DirectionUp, migErr.Direction)
	require.ErrorContains(t, err, "division by zero")
	require.Equal(t, []string{"00001_create_widgets.sql"}, files(res))

	var gadgets sql.NullString
	require.NoError(t, b.db.QueryRow("SELECT to_regclass('gadgets')::text").Scan(&gadgets))
	require.False(t, gadgets.Valid, "the failed file's statements were rolled back with it")
	v, err := m.Version(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(1), v)
}

func TestSessionSettings(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	// One connection: the migration session is the pool's only session, so
	// its settings must be restored when the lock is released.
	b.db.SetMaxOpenConns(1)
	m := newMigrator(t, b.db, migration.WithDDLLockTimeout(1234*time.Millisecond),
		migration.WithStatementTimeout(time.Minute),
		migration.WithMigrations(with(tiny(), "00002_add_name.sql",
			"ALTER TABLE widgets ADD COLUMN name text;\n"+
				"CREATE TABLE seen AS SELECT current_setting('lock_timeout') AS lt, current_setting('statement_timeout') AS st;")))
	_, err := m.Up(ctx)
	require.NoError(t, err)

	var lt, st string
	require.NoError(t, b.db.QueryRow("SELECT lt, st FROM seen").Scan(&lt, &st))
	require.Equal(t, "1234ms", lt)
	require.Equal(t, "1min", st)
	require.NoError(t, b.db.QueryRow("SELECT current_setting('lock_timeout'), current_setting('statement_timeout')").Scan(&lt, &st))
	require.Equal(t, "0", lt, "settings restored on the pooled connection")
	require.Equal(t, "0", st)
	require.Zero(t, lockHolders(t, b.db, "ExclusiveLock"))
}

func TestCancelReleasesLock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	m, err := migration.Open(context.Background(), b.url, migration.WithMigrations(
		with(tiny(), "00002_add_name.sql", "SELECT pg_sleep(30);")))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, m.Close()) })

	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		defer cancel()
		// Cancel once the second migration is running (its pg_sleep shows in
		// pg_stat_activity), not after a guessed delay.
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
			var running bool
			err := b.db.QueryRow(`SELECT EXISTS (SELECT FROM pg_stat_activity
				WHERE datname = current_database() AND state = 'active' AND query LIKE '%pg_sleep(30)%'
				  AND pid <> pg_backend_pid())`).Scan(&running)
			if err != nil || running {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	res, err := m.Up(ctx)
	require.Error(t, err)
	require.NotErrorIs(t, err, migration.ErrLockLost, "%v", err)
	require.ErrorContains(t, err, "00002_add_name.sql")
	require.Equal(t, []string{"00001_create_widgets.sql"}, files(res))
	// The lock is released, or its session closed; the server may take a
	// moment to finish a closed session.
	require.Eventually(t, func() bool { return lockHolders(t, b.db, "ExclusiveLock") == 0 },
		2*time.Second, 10*time.Millisecond)
	v, err := m.Version(context.Background())
	require.NoError(t, err)
	require.Equal(t, int64(len(res)), v)
}
