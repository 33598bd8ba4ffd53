// Package migration applies the communitydeletion schema migrations to a
// PostgreSQL database. It is a thin wrapper over goose v3's Provider.
//
// Open (or New, over a *sql.DB) returns a Migrator. Up, UpTo, Down and
// DownTo change the schema and return a Result per migration; Status,
// Version and Pending only read, and take no lock: they neither wait for
// nor hold off a migration or a deletion stage. (Like every goose operation,
// on a database without VersionTable they create it.) cmd/migrate is the
// job CI/CD runs over it.
//
// Every operation that changes the schema holds the exclusive session-level
// advisory lock on communitydeletion.SchemaDestructionLockKey from before it
// reads the version table until after its last migration committed, and
// goose runs the migrations on the very connection that holds it. The
// destructive deletion stages take the same key shared at transaction
// level, so a running migration holds them off and a destructive stage in
// flight delays the migration, which waits until WithLockTimeout runs out
// (then ErrLockTimeout). If the session lost the lock before the end, the
// operation fails with ErrLockLost. The connection must therefore go
// straight to PostgreSQL (or through a session-pooling proxy), never
// through a transaction-pooling PgBouncer. Once it holds the lock, the
// session gets a short lock_timeout (WithDDLLockTimeout, 5s by default) and
// an optional statement_timeout (WithStatementTimeout), so a DDL statement
// queued behind a long transaction fails fast instead of blocking every
// writer of the table behind itself.
//
// Each migration file runs in its own transaction unless it is marked
// "-- +goose NO TRANSACTION". A pending migration whose version is lower than
// the highest applied one is refused with ErrOutOfOrder unless
// WithAllowOutOfOrder(true) is given.
//
// The applied migrations are recorded in VersionTable, a goose version table
// of this project's own, so that a service's goose (whose default table is
// LegacyVersionTable), golang-migrate, Atlas or Flyway history in the same
// database never collides with ours. On a database migrated by a release
// before VersionTable, every operation that would change the schema (and
// Pending) refuses with ErrLegacyVersionsNotAdopted until
// AdoptLegacyVersions has copied that history over once.
//
// VersionTable records each applied migration with its checksum, the hex
// SHA-256 of its file as shipped, written in the transaction that records the
// version. Before Up, UpTo, Down or DownTo change anything, and in Pending, an
// applied migration whose recorded checksum differs from the shipped file's,
// or that no shipped file has, is refused with ErrChecksumMismatch
// (*ChecksumMismatchError); Status reports each one's ChecksumState instead.
// Applied migrations without a checksum (recorded before checksums existed,
// or adopted from LegacyVersionTable) get the shipped file's from the next
// operation that holds the lock (see WithChecksumNotice); a person resolves
// a mismatch with AcceptChecksums.
package migration
