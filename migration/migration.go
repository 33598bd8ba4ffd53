package migration

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"math"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	communitydeletion "github.com/tombstoneworks/communitydeletion"
)

// ErrOutOfOrder reports pending migrations whose version is lower than the
// highest version already applied, while out-of-order migrations are not
// allowed (see WithAllowOutOfOrder).
var ErrOutOfOrder = errors.New("refusing out-of-order migrations")

// VersionTable is the table, in the schema the migrations run in (the first
// schema of the search_path), where a Migrator records which of this
// project's migrations are applied. It has goose's layout and is a contract:
// it never changes name.
const VersionTable = "community_deletion_schema_migrations"

// LegacyVersionTable is goose's default version table. Releases before
// VersionTable existed recorded this project's migrations there, where a
// service's own goose migrations usually live too; see AdoptLegacyVersions.
const LegacyVersionTable = "goose_db_version"

// applicationName is the application_name Open gives its sessions unless the
// connection string sets one.
const applicationName = "communitydeletion-migrate"

// Direction says whether a migration was applied or rolled back.
type Direction string

// The two directions of a migration.
const (
	// DirectionUp applies a migration.
	DirectionUp Direction = "up"
	// DirectionDown rolls a migration back.
	DirectionDown Direction = "down"
)

// Result reports one migration that was applied or rolled back.
type Result struct {
	// Version is the migration's version number.
	Version int64 `json:"version"`
	// File is the migration's file name.
	File string `json:"file"`
	// Direction says whether it was applied or rolled back.
	Direction Direction `json:"direction"`
	// Duration is how long it took.
	Duration time.Duration `json:"duration"`
	// Empty is true when the migration had no statements for this direction.
	Empty bool `json:"empty,omitempty"`
}

// State says whether a migration has been applied.
type State string

// The two states of a migration.
const (
	// StateApplied is a migration recorded in the database.
	StateApplied State = "applied"
	// StatePending is a migration not yet recorded in the database.
	StatePending State = "pending"
)

// Status describes one known migration and whether it has been applied.
type Status struct {
	// Version is the migration's version number.
	Version int64 `json:"version"`
	// File is the migration's file name.
	File string `json:"file"`
	// State is StateApplied or StatePending.
	State State `json:"state"`
	// AppliedAt is when it was applied, as goose records it; zero if pending.
	AppliedAt time.Time `json:"applied_at,omitzero"`
	// Checksum is the hex SHA-256 of the shipped file; empty for an applied
	// version that no shipped file has (File is empty too).
	Checksum string `json:"checksum,omitempty"`
	// RecordedChecksum is the checksum VersionTable records for an applied
	// migration; empty when pending or none is recorded.
	RecordedChecksum string `json:"recorded_checksum,omitempty"`
	// ChecksumState compares the two for an applied migration; empty when
	// pending.
	ChecksumState ChecksumState `json:"checksum_state,omitempty"`
}

// FileError reports the migration file that failed. The migrations of
// the same operation that succeeded before it are returned next to the error.
type FileError struct {
	// Version is the failed migration's version number.
	Version int64
	// File is the failed migration's file name.
	File string
	// Direction is the direction it failed in.
	Direction Direction
	// Err is the underlying error, usually a *pgconn.PgError.
	Err error

	ddlLockTimeout time.Duration
}

// Error describes the failed migration, the cause, and, for a lock timeout,
// why the statement gave up.
func (e *FileError) Error() string {
	msg := fmt.Sprintf("migration %s (version %d) failed going %s: %v", e.File, e.Version, e.Direction, e.Err)
	var pgErr *pgconn.PgError
	if errors.As(e.Err, &pgErr) && pgErr.Code == "55P03" && e.ddlLockTimeout > 0 {
		msg += fmt.Sprintf(" (a statement waited longer than the DDL lock_timeout of %s behind another transaction's lock)", e.ddlLockTimeout)
	}
	return msg
}

// Unwrap returns the underlying error.
func (e *FileError) Unwrap() error { return e.Err }

// Migrator applies and inspects the migrations of one database. Its methods
// may be called concurrently; schema-changing calls serialize on the lock.
type Migrator struct {
	db     *sql.DB
	ownsDB bool
	cfg    config
	// locked runs schema changes under the advisory lock; reader only reads.
	locked *goose.Provider
	reader *goose.Provider
	// versions are the known migrations' versions, ascending; files names
	// each version's file.
	versions []int64
	files    map[int64]string
	// checksums are the shipped files' checksums, by version.
	checksums map[int64]string
}

// New returns a Migrator that runs on db, which must be a PostgreSQL database
// opened through a driver such as pgx's stdlib. Close does not close db.
func New(db *sql.DB, opts ...Option) (*Migrator, error) {
	if db == nil {
		return nil, errors.New("new migrator: db is nil")
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, fmt.Errorf("new migrator: %w", err)
	}
	return newMigrator(db, false, cfg)
}

// Open connects to databaseURL with pgx and returns a Migrator that owns the
// connection pool; Close closes it. databaseURL is a postgres:// URL or a
// key=value connection string; it may be empty, and pgx fills what it lacks
// from the libpq PG* environment variables. The DDL lock_timeout and the
// statement_timeout also become the session defaults of every connection.
func Open(ctx context.Context, databaseURL string, opts ...Option) (*Migrator, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, fmt.Errorf("open migrator: %w", err)
	}
	connConfig, err := pgx.ParseConfig(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("open migrator: parse database URL: %w", err)
	}
	if connConfig.RuntimeParams == nil {
		connConfig.RuntimeParams = map[string]string{}
	}
	connConfig.RuntimeParams["lock_timeout"] = postgresDuration(cfg.ddlLockTimeout)
	connConfig.RuntimeParams["statement_timeout"] = postgresDuration(cfg.statementTimeout)
	if connConfig.RuntimeParams["application_name"] == "" {
		connConfig.RuntimeParams["application_name"] = applicationName
	}
	// On cancellation (SIGINT, SIGTERM), have the server cancel the running
	// statement, rather than pgx's default of only cutting the connection,
	// which leaves a long statement running on the server, lock held, until
	// it finishes. The session usually survives to release the lock at once;
	// the deadline still frees a connection to a dead server.
	connConfig.BuildContextWatcherHandler = func(conn *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: conn, DeadlineDelay: 10 * time.Second}
	}
	db := stdlib.OpenDB(*connConfig)
	m, err := newMigrator(db, true, cfg)
	if err != nil {
		return nil, errors.Join(err, db.Close())
	}
	if err := db.PingContext(ctx); err != nil {
		return nil, errors.Join(fmt.Errorf("open migrator: connect: %w", err), db.Close())
	}
	return m, nil
}

func newMigrator(db *sql.DB, ownsDB bool, cfg config) (*Migrator, error) {
	m := &Migrator{db: db, ownsDB: ownsDB, cfg: cfg, files: map[int64]string{}, checksums: map[int64]string{}}
	// The store records each applied version with its file's checksum; it
	// shares m.checksums, filled below once goose has found the files.
	store, err := newChecksumStore(m.checksums)
	if err != nil {
		return nil, fmt.Errorf("new migrator: %w", err)
	}
	common := []goose.ProviderOption{
		goose.WithDisableGlobalRegistry(true),
		goose.WithAllowOutofOrder(cfg.allowOutOfOrder),
		goose.WithStore(store),
	}
	m.locked, err = goose.NewProvider(goose.DialectCustom, db, cfg.fsys,
		append(slices.Clone(common), goose.WithSessionLocker(m.newLocker(m.guard)))...)
	if err != nil {
		return nil, fmt.Errorf("new migrator: load migrations: %w", err)
	}
	m.reader, err = goose.NewProvider(goose.DialectCustom, db, cfg.fsys, common...)
	if err != nil {
		return nil, fmt.Errorf("new migrator: load migrations: %w", err)
	}
	paths := map[int64]string{}
	for _, source := range m.reader.ListSources() {
		m.versions = append(m.versions, source.Version)
		m.files[source.Version] = path.Base(source.Path)
		paths[source.Version] = source.Path
	}
	checksums, err := shippedChecksums(cfg.fsys, paths)
	if err != nil {
		return nil, fmt.Errorf("new migrator: %w", err)
	}
	maps.Copy(m.checksums, checksums)
	return m, nil
}

// guard runs under the lock before goose reads the version table: it
// refuses a database whose history is still in LegacyVersionTable, and one
// whose applied migrations differ from the shipped files, and records the
// checksums of applied migrations that have none.
func (m *Migrator) guard(ctx context.Context, conn *sql.Conn) error {
	if err := checkTrustBoundary(ctx, conn); err != nil {
		return err
	}
	if err := m.checkAdopted(ctx, conn); err != nil {
		return err
	}
	return m.reconcileChecksums(ctx, conn)
}

// ErrUntrustedSchema reports that a role other than the migrating one could
// change what the migrations install or record: it may create objects in
// schema community_deletion, or it owns the version table.
var ErrUntrustedSchema = errors.New("the deletion schema is writable by another role")

// checkTrustBoundary refuses to migrate while a role other than the owner of
// schema community_deletion holds CREATE there (it could plant a function or
// operator every guard resolves), or while the version table belongs to a
// role the session is not a member of (its owner could rewrite the history).
func checkTrustBoundary(ctx context.Context, conn *sql.Conn) error {
	var creators, versionOwner sql.NullString
	err := conn.QueryRowContext(ctx, `SELECT
		(SELECT string_agg(DISTINCT acl.grantee::regrole::text, ', ')
		 FROM pg_catalog.pg_namespace n CROSS JOIN LATERAL pg_catalog.aclexplode(n.nspacl) acl
		 WHERE n.nspname = 'community_deletion' AND acl.privilege_type = 'CREATE'
		   AND acl.grantee <> n.nspowner),
		(SELECT c.relowner::regrole::text FROM pg_catalog.pg_class c
		 WHERE c.oid = pg_catalog.to_regclass(pg_catalog.format('%I.%I', pg_catalog.current_schema(), $1::text))
		   AND NOT pg_catalog.pg_has_role(current_user, c.relowner, 'USAGE'))`, VersionTable).Scan(&creators, &versionOwner)
	if err != nil {
		return fmt.Errorf("check who may change the deletion schema: %w", err)
	}
	if creators.Valid {
		return fmt.Errorf("%w: %s may CREATE in schema community_deletion; revoke it (REVOKE CREATE ON SCHEMA community_deletion FROM ...), then migrate",
			ErrUntrustedSchema, creators.String)
	}
	if versionOwner.Valid {
		return fmt.Errorf("%w: the version table %s belongs to %s, not to the migrating role; migrate as its owner or give it to the migrating role",
			ErrUntrustedSchema, VersionTable, versionOwner.String)
	}
	return nil
}

// newLocker returns the session locker of the schema destruction lock with
// m's settings; guard, if not nil, runs once the lock is held.
func (m *Migrator) newLocker(guard func(ctx context.Context, conn *sql.Conn) error) *sessionLocker {
	return &sessionLocker{
		key:              communitydeletion.SchemaDestructionLockKey,
		wait:             m.cfg.lockTimeout,
		poll:             pollInterval(m.cfg.lockTimeout),
		ddlLockTimeout:   m.cfg.ddlLockTimeout,
		statementTimeout: m.cfg.statementTimeout,
		notice:           m.cfg.lockWaitNotice,
		guard:            guard,
	}
}

// Close closes the connection pool if Open created it.
func (m *Migrator) Close() error {
	if !m.ownsDB {
		return nil
	}
	if err := m.db.Close(); err != nil {
		return fmt.Errorf("close migrator: %w", err)
	}
	return nil
}

// Up applies every pending migration, in version order, and returns those it
// applied (none when the database is up to date). On failure it returns the
// ones applied before the failure together with the error.
func (m *Migrator) Up(ctx context.Context) ([]Result, error) {
	return m.upTo(ctx, "up", math.MaxInt64)
}

// UpTo applies the pending migrations with a version up to and including
// version, like Up.
func (m *Migrator) UpTo(ctx context.Context, version int64) ([]Result, error) {
	op := "up to " + strconv.FormatInt(version, 10)
	if version < 1 {
		return nil, fmt.Errorf("%s: version must be at least 1", op)
	}
	return m.upTo(ctx, op, version)
}

func (m *Migrator) upTo(ctx context.Context, op string, target int64) ([]Result, error) {
	// A lock-free check first, for a typed out-of-order refusal and to skip
	// the lock when there is nothing to do; goose checks again under the lock.
	plan, unrecorded, err := m.plan(ctx, target)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	if len(plan) == 0 {
		if unrecorded {
			// Nothing to apply, but checksums to record: goose would not
			// take the lock, so take it for the guard.
			noop := func(context.Context, *sql.Conn) error { return nil }
			if err := m.underLock(ctx, m.guard, noop); err != nil {
				return nil, m.finishErr(ctx, op, err)
			}
		}
		return nil, nil
	}
	res, err := m.locked.UpTo(ctx, target)
	return m.finish(ctx, op, res, err)
}

// Down rolls back the most recently applied migration and returns it, or nil
// when no migration is applied.
func (m *Migrator) Down(ctx context.Context) (*Result, error) {
	res, err := m.locked.Down(ctx)
	if errors.Is(err, goose.ErrNoNextVersion) {
		return nil, nil //nolint:nilnil // documented: nothing to roll back is no result and no error
	}
	var list []*goose.MigrationResult
	if res != nil {
		list = append(list, res)
	}
	out, err := m.finish(ctx, "down", list, err)
	if len(out) == 0 {
		return nil, err
	}
	return &out[0], err
}

// DownTo rolls back, most recent first, every applied migration with a
// version above version; DownTo(ctx, 0) rolls back all of them.
func (m *Migrator) DownTo(ctx context.Context, version int64) ([]Result, error) {
	op := "down to " + strconv.FormatInt(version, 10)
	if version < 0 {
		return nil, fmt.Errorf("%s: version must not be negative", op)
	}
	res, err := m.locked.DownTo(ctx, version)
	return m.finish(ctx, op, res, err)
}

// Status lists every known migration, in version order, as applied (with its
// time and checksum state) or pending, as VersionTable records them, and
// every applied version that no shipped file has (ChecksumNoFile); it reads
// no other table. A differing migration is reported in its ChecksumState,
// not as an error; ChecksumError(list) turns it into one.
func (m *Migrator) Status(ctx context.Context) ([]Status, error) {
	list, err := m.reader.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("status: %w", err)
	}
	applied, err := readChecksums(ctx, m.db)
	if err != nil {
		return nil, fmt.Errorf("status: %w", err)
	}
	recorded := map[int64]sql.NullString{}
	for _, r := range applied {
		recorded[r.version] = r.checksum
	}
	out := make([]Status, 0, len(list))
	for _, s := range list {
		st := Status{Version: s.Source.Version, File: path.Base(s.Source.Path), State: StatePending,
			Checksum: m.checksums[s.Source.Version]}
		if s.State == goose.StateApplied {
			st.State = StateApplied
			st.AppliedAt = s.AppliedAt
			st.RecordedChecksum = recorded[st.Version].String
			st.ChecksumState = m.checksumState(st.Version, recorded[st.Version])
		}
		out = append(out, st)
	}
	for _, r := range applied {
		if _, shipped := m.files[r.version]; !shipped {
			out = append(out, Status{Version: r.version, State: StateApplied, AppliedAt: r.appliedAt,
				RecordedChecksum: r.checksum.String, ChecksumState: ChecksumNoFile})
		}
	}
	slices.SortStableFunc(out, func(a, b Status) int { return cmp.Compare(a.Version, b.Version) })
	return out, nil
}

// Version returns the highest migration version applied to the database, 0
// when none is.
func (m *Migrator) Version(ctx context.Context) (int64, error) {
	v, err := m.reader.GetDBVersion(ctx)
	if err != nil {
		return 0, fmt.Errorf("version: %w", err)
	}
	return v, nil
}

// Pending lists, in the order Up would apply them, the migrations Up would
// apply, without applying anything: the dry run of Up. It fails with
// ErrOutOfOrder, ErrLegacyVersionsNotAdopted or ErrChecksumMismatch where Up
// would.
func (m *Migrator) Pending(ctx context.Context) ([]Status, error) {
	plan, _, err := m.plan(ctx, math.MaxInt64)
	if err != nil {
		return nil, fmt.Errorf("pending: %w", err)
	}
	return plan, nil
}

// plan returns the pending migrations up to target, applying goose's
// out-of-order rule: a pending version below the database version is
// "missing", refused unless out-of-order migrations are allowed. It refuses a
// database whose history is still in LegacyVersionTable and one whose applied
// migrations differ from the shipped files; unrecorded reports applied
// migrations without a recorded checksum.
func (m *Migrator) plan(ctx context.Context, target int64) (_ []Status, unrecorded bool, _ error) {
	if err := m.checkAdopted(ctx, m.db); err != nil {
		return nil, false, err
	}
	all, err := m.Status(ctx)
	if err != nil {
		return nil, false, err
	}
	if err := ChecksumError(all); err != nil {
		return nil, false, err
	}
	unrecorded = slices.ContainsFunc(all, func(s Status) bool { return s.ChecksumState == ChecksumUnrecorded })
	current, err := m.Version(ctx)
	if err != nil {
		return nil, false, err
	}
	var missing []string
	var plan []Status
	for _, s := range all {
		if s.State != StatePending || s.Version > target {
			continue
		}
		if s.Version < current {
			missing = append(missing, s.File)
		}
		plan = append(plan, s)
	}
	if len(missing) > 0 && !m.cfg.allowOutOfOrder {
		return nil, false, fmt.Errorf("%w: pending %s older than database version %d (out-of-order migrations are not allowed)",
			ErrOutOfOrder, strings.Join(missing, ", "), current)
	}
	return plan, unrecorded, nil
}

// finish converts goose's results and error. It keeps the migrations applied
// before a failure, turns goose's PartialError into a FileError, and
// drops goose's wrapping around a lock timeout.
func (m *Migrator) finish(ctx context.Context, op string, res []*goose.MigrationResult, err error) ([]Result, error) {
	out := convertResults(res)
	if err == nil {
		return out, nil
	}
	if unadopted, ok := errors.AsType[*unadoptedError](err); ok {
		return out, fmt.Errorf("%s: %w", op, unadopted)
	}
	if mismatch, ok := errors.AsType[*ChecksumMismatchError](err); ok {
		return out, fmt.Errorf("%s: %w", op, mismatch)
	}
	var lockErr *lockError
	if errors.As(err, &lockErr) && errors.Is(lockErr, ErrLockTimeout) {
		return out, fmt.Errorf("%s: %w", op, lockErr)
	}
	// goose joins the operation's error and the unlock error with multierr.
	var parts []error
	for _, part := range splitErrors(err) {
		var partial *goose.PartialError
		var lockErr *lockError
		switch {
		case errors.As(part, &partial):
			out = append(out, convertResults(partial.Applied)...)
			part = &FileError{
				Version:        partial.Failed.Source.Version,
				File:           path.Base(partial.Failed.Source.Path),
				Direction:      Direction(partial.Failed.Direction),
				Err:            errors.Join(splitErrors(partial.Err)...),
				ddlLockTimeout: m.cfg.ddlLockTimeout,
			}
		case errors.As(part, &lockErr) && lockErr.sessionGone && ctx.Err() != nil:
			// Cancellation cut the session, which ended the statement in
			// flight and released the lock with it: not a lost lock.
			continue
		}
		parts = append(parts, part)
	}
	return out, fmt.Errorf("%s: %w", op, errors.Join(parts...))
}

// finishErr is finish for an operation without results.
func (m *Migrator) finishErr(ctx context.Context, op string, err error) error {
	_, err = m.finish(ctx, op, nil, err)
	return err
}

// splitErrors flattens the top-level multi-errors goose builds and drops the
// follow-up noise of a failed transaction or closed connection
// (sql.ErrTxDone, sql.ErrConnDone) when a real cause is present.
func splitErrors(err error) []error {
	var all, kept []error
	var walk func(error)
	walk = func(e error) {
		if multi, ok := e.(interface{ Unwrap() []error }); ok {
			for _, inner := range multi.Unwrap() {
				walk(inner)
			}
			return
		}
		if e != nil {
			all = append(all, e)
		}
	}
	walk(err)
	for _, e := range all {
		if e != sql.ErrTxDone && e != sql.ErrConnDone { //nolint:errorlint // e is a leaf of the error tree walked above
			kept = append(kept, e)
		}
	}
	if len(kept) == 0 {
		return all
	}
	return kept
}

func convertResults(res []*goose.MigrationResult) []Result {
	var out []Result
	for _, r := range res {
		if r == nil {
			continue
		}
		out = append(out, Result{
			Version:   r.Source.Version,
			File:      path.Base(r.Source.Path),
			Direction: Direction(r.Direction),
			Duration:  r.Duration,
			Empty:     r.Empty,
		})
	}
	return out
}
