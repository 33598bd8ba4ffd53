package migration

import (
	"errors"
	"fmt"
	"io/fs"
	"time"

	communitydeletion "github.com/tombstoneworks/communitydeletion"
)

// Default values of the options.
const (
	// DefaultLockTimeout is how long a Migrator waits, by default, for the
	// schema destruction lock before giving up with ErrLockTimeout.
	DefaultLockTimeout = 5 * time.Minute
	// DefaultDDLLockTimeout is the default PostgreSQL lock_timeout of the
	// migration session: how long one migration statement may wait for a
	// table lock before it fails.
	DefaultDDLLockTimeout = 5 * time.Second
	// DefaultStatementTimeout is the default PostgreSQL statement_timeout of
	// the migration session; zero means no limit.
	DefaultStatementTimeout time.Duration = 0
)

// Option configures a Migrator; pass options to New or Open.
type Option func(*config)

// config is the resolved set of options.
type config struct {
	fsys             fs.FS
	lockTimeout      time.Duration
	ddlLockTimeout   time.Duration
	statementTimeout time.Duration
	allowOutOfOrder  bool
	lockWaitNotice   func(message string)
	checksumNotice   func(message string)
	// probes are the legacy probes of the migrations: legacyProbes for the
	// project's own, none for migrations given with WithMigrations.
	probes map[int64][]check
	// earlierReleases are the accepted checksums of earlier releases of
	// revised files: earlierReleases for the project's own migrations,
	// none for migrations given with WithMigrations.
	earlierReleases map[int64][]string
}

// WithMigrations sets the migrations to run: an fs.FS whose root directory
// holds goose .sql files. The default is communitydeletion.Migrations(); tests
// pass their own, for example a testing/fstest.MapFS. The checks of
// AdoptLegacyVersions know only the default migrations: with others, every
// version LegacyVersionTable records counts as one whose objects are unknown;
// likewise only the default migrations accept an earlier release's checksum
// (ChecksumEarlierRelease).
func WithMigrations(fsys fs.FS) Option {
	return func(c *config) { c.fsys = fsys }
}

// WithLockTimeout bounds the wait for the schema destruction advisory lock
// (DefaultLockTimeout if not given). Zero means a single attempt without
// waiting. When the wait runs out, the operation fails with ErrLockTimeout.
func WithLockTimeout(d time.Duration) Option {
	return func(c *config) { c.lockTimeout = d }
}

// WithDDLLockTimeout sets the PostgreSQL lock_timeout of the migration session
// (DefaultDDLLockTimeout if not given), so that a migration statement that
// queues behind a long transaction fails quickly instead of blocking every
// other writer of the table behind itself. Zero disables the limit.
func WithDDLLockTimeout(d time.Duration) Option {
	return func(c *config) { c.ddlLockTimeout = d }
}

// WithStatementTimeout sets the PostgreSQL statement_timeout of the migration
// session. Zero, the default, means no limit.
func WithStatementTimeout(d time.Duration) Option {
	return func(c *config) { c.statementTimeout = d }
}

// WithAllowOutOfOrder allows applying pending migrations whose version is lower
// than the highest version already applied. By default such migrations are
// refused with ErrOutOfOrder.
func WithAllowOutOfOrder(allow bool) Option {
	return func(c *config) { c.allowOutOfOrder = allow }
}

// WithLockWaitNotice registers fn to be called once, with a one-line message
// naming the lock and its holders, when the lock is not free on the first
// attempt and the Migrator starts waiting for it.
func WithLockWaitNotice(fn func(message string)) Option {
	return func(c *config) { c.lockWaitNotice = fn }
}

// WithChecksumNotice registers fn to be called with a one-line message when
// an operation holding the lock records the shipped files' checksums for
// applied migrations that had none (applied before checksums were recorded,
// or adopted from LegacyVersionTable): trust on first use.
func WithChecksumNotice(fn func(message string)) Option {
	return func(c *config) { c.checksumNotice = fn }
}

// newConfig applies opts over the defaults and validates the result.
func newConfig(opts []Option) (config, error) {
	c := config{
		lockTimeout:      DefaultLockTimeout,
		ddlLockTimeout:   DefaultDDLLockTimeout,
		statementTimeout: DefaultStatementTimeout,
	}
	for _, opt := range opts {
		if opt != nil {
			opt(&c)
		}
	}
	if c.fsys == nil {
		c.fsys = communitydeletion.Migrations()
		c.probes = legacyProbes
		c.earlierReleases = earlierReleases
	}
	var errs []error
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"lock timeout", c.lockTimeout},
		{"DDL lock timeout", c.ddlLockTimeout},
		{"statement timeout", c.statementTimeout},
	} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("%s must not be negative, got %s", d.name, d.v))
		}
	}
	return c, errors.Join(errs...)
}

// postgresDuration renders d as a PostgreSQL duration setting in whole
// milliseconds, rounding up so that a positive duration never becomes 0, which
// PostgreSQL reads as "no limit".
func postgresDuration(d time.Duration) string {
	ms := d / time.Millisecond
	if d%time.Millisecond != 0 {
		ms++
	}
	return fmt.Sprintf("%dms", ms)
}
