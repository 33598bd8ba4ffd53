package migration

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"

	"github.com/pressly/goose/v3/database"
)

// ErrChecksumMismatch reports that the migrations VersionTable records as
// applied differ from the shipped files: an applied file was edited, or no
// shipped file has an applied version. Every operation that would change the
// schema refuses it, changing nothing, until a person has resolved it.
var ErrChecksumMismatch = errors.New("applied migrations differ from the shipped files")

// checksumColumn is the column of VersionTable that records, for each
// applied migration, the hex SHA-256 of its file as it was applied.
const checksumColumn = "checksum"

// ChecksumState compares the checksum VersionTable records for an applied
// migration with the shipped file's.
type ChecksumState string

// The checksum states of an applied migration; a pending one has none.
const (
	// ChecksumOK: the recorded checksum is the shipped file's.
	ChecksumOK ChecksumState = "ok"
	// ChecksumEarlierRelease: the recorded checksum is that of an earlier
	// release of the file, which the project revised in place and whose
	// database a later migration brings to the revision (the first release
	// of 00011, see migration 00014). Accepted as ok.
	ChecksumEarlierRelease ChecksumState = "earlier-release"
	// ChecksumUnrecorded: no checksum is recorded (applied before checksums
	// existed, or adopted from LegacyVersionTable). The next operation that
	// holds the schema lock records the shipped file's (trust on first use).
	ChecksumUnrecorded ChecksumState = "unrecorded"
	// ChecksumMismatch: the shipped file differs from the one applied.
	ChecksumMismatch ChecksumState = "mismatch"
	// ChecksumNoFile: the version is applied but no shipped file has it.
	ChecksumNoFile ChecksumState = "no-file"
)

// blocks reports whether the state refuses schema changes.
func (s ChecksumState) blocks() bool { return s == ChecksumMismatch || s == ChecksumNoFile }

// ChecksumProblem is one applied migration that differs from the shipped
// files.
type ChecksumProblem struct {
	// Version is the applied migration's version.
	Version int64 `json:"version"`
	// File is the shipped file of that version; empty when there is none.
	File string `json:"file,omitempty"`
	// Recorded is the checksum VersionTable records.
	Recorded string `json:"recorded"`
	// Shipped is the shipped file's checksum; empty when there is no file.
	Shipped string `json:"shipped,omitempty"`
}

// ChecksumMismatchError is the refusal of a database whose applied
// migrations differ from the shipped files; it matches ErrChecksumMismatch.
// Nothing was applied, rolled back or recorded.
type ChecksumMismatchError struct {
	// Problems lists each differing migration, by version.
	Problems []ChecksumProblem
	// accepting marks AcceptChecksums' refusal, whose advice differs.
	accepting bool
}

// Error names each differing migration and what to do, on one line.
func (e *ChecksumMismatchError) Error() string {
	var parts []string
	noFile := false
	for _, p := range e.Problems {
		if p.Shipped == "" {
			noFile = true
			parts = append(parts, fmt.Sprintf("version %d is applied (checksum %s) but no shipped migration file has it",
				p.Version, short(p.Recorded)))
			continue
		}
		parts = append(parts, fmt.Sprintf("%s (version %d) was applied with checksum %s but the shipped file has %s",
			p.File, p.Version, short(p.Recorded), short(p.Shipped)))
	}
	if e.accepting {
		return fmt.Sprintf("%s, refusing to accept checksums, nothing changed: %s; "+
			"restore the missing files (or run the release that ships them), then retry",
			ErrChecksumMismatch, strings.Join(parts, "; "))
	}
	cause := "a released migration was edited"
	if noFile {
		cause = "a released migration was edited or removed"
	}
	return fmt.Sprintf("%s, refusing to migrate, nothing changed: %s; %s: restore the released files "+
		"(change the schema with a new migration instead), or, only once a person has confirmed that the "+
		"database matches the shipped files, run 'migrate accept-checksums' (Migrator.AcceptChecksums)",
		ErrChecksumMismatch, strings.Join(parts, "; "), cause)
}

// Unwrap returns ErrChecksumMismatch.
func (e *ChecksumMismatchError) Unwrap() error { return ErrChecksumMismatch }

// short abbreviates a checksum for messages.
func short(sum string) string {
	if sum == "" {
		return "none"
	}
	if len(sum) > 12 {
		return sum[:12] + "…"
	}
	return sum
}

// ChecksumError returns a *ChecksumMismatchError naming every migration of
// list (as Status returns it) whose state is ChecksumMismatch or
// ChecksumNoFile, or nil when there is none.
func ChecksumError(list []Status) error {
	var problems []ChecksumProblem
	for _, s := range list {
		if s.ChecksumState.blocks() {
			problems = append(problems, ChecksumProblem{
				Version: s.Version, File: s.File, Recorded: s.RecordedChecksum, Shipped: s.Checksum,
			})
		}
	}
	if len(problems) == 0 {
		return nil
	}
	return &ChecksumMismatchError{Problems: problems}
}

// ChecksumChange is one checksum that AcceptChecksums recorded.
type ChecksumChange struct {
	// Version is the applied migration's version.
	Version int64 `json:"version"`
	// File is its shipped file.
	File string `json:"file"`
	// Previous is the checksum recorded before; empty when there was none.
	Previous string `json:"previous,omitempty"`
	// Recorded is the shipped file's checksum, now recorded.
	Recorded string `json:"recorded"`
}

// fileChecksum is the hex SHA-256 of a migration file's bytes.
func fileChecksum(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// earlierReleases lists, per version of the project's own migrations, the
// checksums of earlier releases of a file that was revised in place after
// release, each reconciled by a later migration: a database that recorded
// one of them is as good as one that applied the revision.
var earlierReleases = map[int64][]string{
	// The first release of 00011 (migration/testdata); 00014 brings it to
	// the revision.
	11: {"3fa2418f0e9b8ab094f15dfbc73e661913969820500e852c0d6e96cf88fa3c5d"},
}

// shippedChecksums reads each migration file of fsys at the given paths.
func shippedChecksums(fsys fs.FS, paths map[int64]string) (map[int64]string, error) {
	out := make(map[int64]string, len(paths))
	for version, p := range paths {
		data, err := fs.ReadFile(fsys, p)
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", p, err)
		}
		out[version] = fileChecksum(data)
	}
	return out, nil
}

// checksumState compares the recorded checksum of an applied version with
// the shipped file's.
func (m *Migrator) checksumState(version int64, recorded sql.NullString) ChecksumState {
	shipped, ok := m.checksums[version]
	switch {
	case !ok:
		return ChecksumNoFile
	case !recorded.Valid:
		return ChecksumUnrecorded
	case recorded.String == shipped:
		return ChecksumOK
	case slices.Contains(m.cfg.earlierReleases[version], recorded.String):
		return ChecksumEarlierRelease
	default:
		return ChecksumMismatch
	}
}

// checksumStore is goose's PostgreSQL store of VersionTable, which also
// records each applied migration's checksum: CreateVersionTable adds the
// column and Insert writes the checksum in the statement that records the
// version, so in the migration's own transaction (for a migration that runs
// in one).
type checksumStore struct {
	database.StoreExtender

	// checksums are the shipped checksums by version; filled once the
	// migrations are loaded, before any Insert.
	checksums map[int64]string
}

func newChecksumStore(checksums map[int64]string) (*checksumStore, error) {
	store, err := database.NewStore(database.DialectPostgres, VersionTable)
	if err != nil {
		return nil, err
	}
	extended, ok := store.(database.StoreExtender)
	if !ok {
		return nil, errors.New("goose's postgres store does not implement TableExists")
	}
	return &checksumStore{StoreExtender: extended, checksums: checksums}, nil
}

// CreateVersionTable creates goose's table with the checksum column.
func (s *checksumStore) CreateVersionTable(ctx context.Context, db database.DBTxConn) error {
	if err := s.StoreExtender.CreateVersionTable(ctx, db); err != nil {
		return err
	}
	if _, err := db.ExecContext(ctx, `ALTER TABLE `+VersionTable+` ADD COLUMN `+checksumColumn+` text`); err != nil {
		return fmt.Errorf("add column %s to %s: %w", checksumColumn, VersionTable, err)
	}
	return nil
}

// Insert records an applied version with its shipped file's checksum
// (none for goose's version 0).
func (s *checksumStore) Insert(ctx context.Context, db database.DBTxConn, req database.InsertRequest) error {
	var checksum sql.NullString
	if sum, ok := s.checksums[req.Version]; ok && req.Version > 0 {
		checksum = sql.NullString{String: sum, Valid: true}
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO `+VersionTable+` (version_id, is_applied, `+checksumColumn+`)
		VALUES ($1, true, $2)`, req.Version, checksum); err != nil {
		return fmt.Errorf("insert version %d: %w", req.Version, err)
	}
	return nil
}

// appliedChecksum is one applied version of VersionTable and the checksum
// recorded for it.
type appliedChecksum struct {
	legacyRow

	checksum sql.NullString
}

// hasChecksumColumn reports whether VersionTable, in current_schema(), has
// the checksum column (tables created before checksums existed do not).
func hasChecksumColumn(ctx context.Context, q querier) (bool, error) {
	var exists bool
	err := q.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM pg_attribute
		WHERE attrelid = to_regclass(format('%I.%I', current_schema(), $1::text))
		  AND attname = $2 AND NOT attisdropped)`, VersionTable, checksumColumn).Scan(&exists)
	if err != nil {
		return false, fmt.Errorf("look for %s.%s: %w", VersionTable, checksumColumn, err)
	}
	return exists, nil
}

// readChecksums lists the versions above 0 VersionTable records as applied,
// ascending, with their recorded checksums (none where the table has no
// checksum column); none when the table does not exist.
func readChecksums(ctx context.Context, q querier) ([]appliedChecksum, error) {
	exists, err := tableExists(ctx, q, VersionTable)
	if err != nil || !exists {
		return nil, err
	}
	column := "NULL::text"
	if has, err := hasChecksumColumn(ctx, q); err != nil {
		return nil, err
	} else if has {
		column = checksumColumn
	}
	rows, err := q.QueryContext(ctx, `SELECT version_id, tstamp, checksum FROM (
			SELECT DISTINCT ON (version_id) version_id, is_applied, tstamp, `+column+` AS checksum
			FROM `+VersionTable+` WHERE version_id > 0 ORDER BY version_id, id DESC) latest
		WHERE is_applied ORDER BY version_id`)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", VersionTable, err)
	}
	defer rows.Close()
	var out []appliedChecksum
	for rows.Next() {
		var r appliedChecksum
		if err := rows.Scan(&r.version, &r.appliedAt, &r.checksum); err != nil {
			return nil, fmt.Errorf("read %s: %w", VersionTable, err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", VersionTable, err)
	}
	return out, nil
}

// addChecksumColumn adds the checksum column to a VersionTable created
// before checksums existed; it does nothing when the table lacks or has it.
func addChecksumColumn(ctx context.Context, tx *sql.Tx) error {
	exists, err := tableExists(ctx, tx, VersionTable)
	if err != nil || !exists {
		return err
	}
	has, err := hasChecksumColumn(ctx, tx)
	if err != nil || has {
		return err
	}
	if _, err := tx.ExecContext(ctx, `ALTER TABLE `+VersionTable+` ADD COLUMN IF NOT EXISTS `+checksumColumn+` text`); err != nil {
		return fmt.Errorf("add column %s to %s: %w", checksumColumn, VersionTable, err)
	}
	return nil
}

// recordChecksum records sum as the checksum of an applied version.
func recordChecksum(ctx context.Context, tx *sql.Tx, version int64, sum string) error {
	if _, err := tx.ExecContext(ctx, `UPDATE `+VersionTable+` SET `+checksumColumn+` = $2
		WHERE version_id = $1 AND is_applied`, version, sum); err != nil {
		return fmt.Errorf("record the checksum of version %d in %s: %w", version, VersionTable, err)
	}
	return nil
}

// reconcileChecksums runs under the schema lock before any migration is
// applied or rolled back: it gives an old VersionTable the checksum column,
// refuses with *ChecksumMismatchError when an applied migration differs from
// the shipped files, and otherwise records the shipped checksum of each
// applied migration that has none (trust on first use), all in one
// transaction, then reports the adoption through WithChecksumNotice.
func (m *Migrator) reconcileChecksums(ctx context.Context, conn *sql.Conn) error {
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("check checksums: %w", err)
	}
	defer tx.Rollback()
	if err := addChecksumColumn(ctx, tx); err != nil {
		return fmt.Errorf("check checksums: %w", err)
	}
	applied, err := readChecksums(ctx, tx)
	if err != nil {
		return fmt.Errorf("check checksums: %w", err)
	}
	var problems []ChecksumProblem
	var unrecorded []int64
	for _, r := range applied {
		switch m.checksumState(r.version, r.checksum) {
		case ChecksumMismatch, ChecksumNoFile:
			problems = append(problems, ChecksumProblem{Version: r.version, File: m.files[r.version],
				Recorded: r.checksum.String, Shipped: m.checksums[r.version]})
		case ChecksumUnrecorded:
			unrecorded = append(unrecorded, r.version)
		}
	}
	if len(problems) > 0 {
		return &ChecksumMismatchError{Problems: problems}
	}
	for _, version := range unrecorded {
		if err := recordChecksum(ctx, tx, version, m.checksums[version]); err != nil {
			return fmt.Errorf("check checksums: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("check checksums: commit: %w", err)
	}
	if len(unrecorded) > 0 && m.cfg.checksumNotice != nil {
		m.cfg.checksumNotice(fmt.Sprintf("recorded the shipped files' checksums for applied versions %s, "+
			"which had none (applied before checksums were recorded): from now on an edit of those files is refused",
			versionRanges(unrecorded)))
	}
	return nil
}

// AcceptChecksums records, under the schema destruction lock and in one
// transaction, the shipped file's checksum for every applied migration whose
// recorded checksum differs or is missing, and returns what it changed. It
// is how a person resolves ErrChecksumMismatch after confirming that the
// database matches the shipped files; it refuses, changing nothing, while a
// version is applied that no shipped file has.
func (m *Migrator) AcceptChecksums(ctx context.Context) ([]ChecksumChange, error) {
	const op = "accept checksums"
	guard := func(ctx context.Context, conn *sql.Conn) error { return m.checkAdopted(ctx, conn) }
	var changes []ChecksumChange
	err := m.underLock(ctx, guard, func(ctx context.Context, conn *sql.Conn) error {
		tx, err := conn.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if err := addChecksumColumn(ctx, tx); err != nil {
			return err
		}
		applied, err := readChecksums(ctx, tx)
		if err != nil {
			return err
		}
		var missing []ChecksumProblem
		for _, r := range applied {
			switch m.checksumState(r.version, r.checksum) {
			case ChecksumNoFile:
				missing = append(missing, ChecksumProblem{Version: r.version, Recorded: r.checksum.String})
			case ChecksumMismatch, ChecksumUnrecorded:
				changes = append(changes, ChecksumChange{Version: r.version, File: m.files[r.version],
					Previous: r.checksum.String, Recorded: m.checksums[r.version]})
			}
		}
		if len(missing) > 0 {
			return &ChecksumMismatchError{Problems: missing, accepting: true}
		}
		for _, c := range changes {
			if err := recordChecksum(ctx, tx, c.Version, c.Recorded); err != nil {
				return err
			}
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("commit: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	return changes, nil
}

// underLock runs fn on a session that holds the schema destruction lock;
// guard, if not nil, runs first, once the lock is held.
func (m *Migrator) underLock(ctx context.Context, guard, fn func(ctx context.Context, conn *sql.Conn) error) (err error) {
	conn, err := m.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, conn.Close()) }()
	locker := m.newLocker(guard)
	if err := locker.SessionLock(ctx, conn); err != nil {
		return err
	}
	err = fn(ctx, conn)
	if unlockErr := locker.SessionUnlock(context.WithoutCancel(ctx), conn); unlockErr != nil {
		err = errors.Join(err, unlockErr)
	}
	return err
}
