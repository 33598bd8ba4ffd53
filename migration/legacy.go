package migration

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ErrLegacyVersionsNotAdopted reports a database whose applied migrations of
// this project are recorded in LegacyVersionTable, by a release before
// VersionTable, and not yet in VersionTable. Every operation that would
// change the schema refuses it until AdoptLegacyVersions has run once.
var ErrLegacyVersionsNotAdopted = errors.New("this project's migrations are recorded in " +
	LegacyVersionTable + " and not yet adopted")

// AmbiguousLegacyVersionsError reports that AdoptLegacyVersions refused
// because the two kinds of evidence disagree: LegacyVersionTable records one
// of this project's version numbers whose objects are absent (it may be a
// service's own migration of that number), or a version's objects exist
// although no table records it. Nothing was adopted.
type AmbiguousLegacyVersionsError struct {
	// Versions lists the ambiguous versions, ascending.
	Versions []int64
	reasons  []string
}

// Error names each ambiguous version and why, on one line.
func (e *AmbiguousLegacyVersionsError) Error() string {
	return "refusing to adopt, nothing adopted: " + strings.Join(e.reasons, "; ")
}

// Adoption reports what AdoptLegacyVersions did.
type Adoption struct {
	// Adopted lists the migrations copied from LegacyVersionTable into
	// VersionTable, in version order, with the time LegacyVersionTable
	// records; empty when nothing was copied.
	Adopted []Status
	// AlreadyTracked is true when VersionTable already recorded applied
	// migrations, so there was nothing to adopt (a second adoption, or a
	// database migrated by this release from the start).
	AlreadyTracked bool
}

// AdoptLegacyVersions copies, once, this project's versions that
// LegacyVersionTable records as applied into VersionTable (with their
// times), in one transaction under the schema destruction lock, and leaves
// LegacyVersionTable as it is. Each version is copied only if the objects it
// creates exist; when a recorded version's objects are absent, or a
// version's objects exist unrecorded, it copies nothing and returns
// *AmbiguousLegacyVersionsError. Each copied version is recorded with the
// shipped file's checksum (trust on first use). Once VersionTable records
// applied migrations it does nothing and reports AlreadyTracked.
func (m *Migrator) AdoptLegacyVersions(ctx context.Context) (Adoption, error) {
	const op = "adopt legacy versions"
	var adoption Adoption
	err := m.underLock(ctx, nil, func(ctx context.Context, conn *sql.Conn) error {
		var err error
		adoption, err = m.adopt(ctx, conn)
		return err
	})
	if err != nil {
		return adoption, fmt.Errorf("%s: %w", op, err)
	}
	return adoption, nil
}

// adopt is AdoptLegacyVersions on a session that holds the lock.
func (m *Migrator) adopt(ctx context.Context, conn *sql.Conn) (Adoption, error) {
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return Adoption{}, err
	}
	defer tx.Rollback()

	state, err := m.readVersionTables(ctx, tx)
	if err != nil {
		return Adoption{}, err
	}
	if state.tracked {
		return Adoption{AlreadyTracked: true}, nil
	}
	var ambiguous []int64
	var reasons []string
	for _, version := range m.versions {
		file := m.files[version]
		recorded := slices.ContainsFunc(state.legacy, func(r legacyRow) bool { return r.version == version })
		checks, known := m.cfg.probes[version]
		var missing []string
		if known {
			if missing, err = probe(ctx, tx, checks); err != nil {
				return Adoption{}, err
			}
		}
		var reason string
		switch {
		case recorded && !known:
			reason = fmt.Sprintf("%s records version %d (%s) but there is no probe to check its objects",
				LegacyVersionTable, version, file)
		case recorded && len(missing) > 0:
			reason = fmt.Sprintf("%s records version %d (%s) but its objects are absent (%s), so it is not this project's migration",
				LegacyVersionTable, version, file, strings.Join(missing, ", "))
		case !recorded && known && len(missing) == 0:
			reason = fmt.Sprintf("the objects of version %d (%s) exist but %s does not record it",
				version, file, LegacyVersionTable)
		default:
			continue
		}
		ambiguous = append(ambiguous, version)
		reasons = append(reasons, reason)
	}
	if len(ambiguous) > 0 {
		return Adoption{}, &AmbiguousLegacyVersionsError{Versions: ambiguous, reasons: reasons}
	}
	if len(state.legacy) == 0 {
		return Adoption{}, nil
	}

	if !state.versionTableExists {
		store, err := newChecksumStore(m.checksums)
		if err != nil {
			return Adoption{}, err
		}
		if err := store.CreateVersionTable(ctx, tx); err != nil {
			return Adoption{}, fmt.Errorf("create %s: %w", VersionTable, err)
		}
	} else if err := addChecksumColumn(ctx, tx); err != nil {
		return Adoption{}, err
	}
	// goose expects the version 0 row it writes when it creates the table.
	if _, err := tx.ExecContext(ctx, `INSERT INTO `+VersionTable+` (version_id, is_applied)
		SELECT 0, true WHERE NOT EXISTS (SELECT 1 FROM `+VersionTable+` WHERE version_id = 0)`); err != nil {
		return Adoption{}, fmt.Errorf("record version 0 in %s: %w", VersionTable, err)
	}
	var adoption Adoption
	// Each adopted version gets the shipped file's checksum: trust on first
	// use, as for a VersionTable written before checksums existed.
	for _, r := range state.legacy {
		if _, err := tx.ExecContext(ctx, `INSERT INTO `+VersionTable+` (version_id, is_applied, tstamp, `+checksumColumn+`)
			VALUES ($1, true, $2, $3)`, r.version, r.appliedAt, m.checksums[r.version]); err != nil {
			return Adoption{}, fmt.Errorf("record version %d in %s: %w", r.version, VersionTable, err)
		}
		adoption.Adopted = append(adoption.Adopted, Status{
			Version: r.version, File: m.files[r.version], State: StateApplied, AppliedAt: r.appliedAt,
		})
	}
	if err := tx.Commit(); err != nil {
		return Adoption{}, fmt.Errorf("commit: %w", err)
	}
	return adoption, nil
}

// checkAdopted returns an error matching ErrLegacyVersionsNotAdopted when
// VersionTable records no applied migration while LegacyVersionTable records
// one of this project's versions that may be ours: its objects exist, or it
// has no probe. A recorded version whose objects are absent is a service's
// own migration of that number and does not count: up then installs the
// schema afresh.
func (m *Migrator) checkAdopted(ctx context.Context, q querier) error {
	state, err := m.readVersionTables(ctx, q)
	if err != nil {
		return fmt.Errorf("check for legacy versions: %w", err)
	}
	if state.tracked {
		return nil
	}
	var ours []int64
	for _, r := range state.legacy {
		checks, known := m.cfg.probes[r.version]
		if known {
			missing, err := probe(ctx, q, checks)
			if err != nil {
				return fmt.Errorf("check for legacy versions: %w", err)
			}
			if len(missing) > 0 {
				continue
			}
		}
		ours = append(ours, r.version)
	}
	if len(ours) == 0 {
		return nil
	}
	return &unadoptedError{versions: ours}
}

// unadoptedError is checkAdopted's refusal.
type unadoptedError struct{ versions []int64 }

func (e *unadoptedError) Error() string {
	return fmt.Sprintf("%s (it records versions %s with their objects present, %s none): "+
		"run 'migrate adopt-legacy-versions' (Migrator.AdoptLegacyVersions) once, then retry",
		ErrLegacyVersionsNotAdopted, versionRanges(e.versions), VersionTable)
}

func (e *unadoptedError) Unwrap() error { return ErrLegacyVersionsNotAdopted }

// legacyRow is one of this project's versions that LegacyVersionTable
// records as applied.
type legacyRow struct {
	version   int64
	appliedAt time.Time
}

// versionTables is what the two version tables record.
type versionTables struct {
	versionTableExists bool
	// tracked is true when VersionTable records an applied migration.
	tracked bool
	// legacy lists this project's versions LegacyVersionTable records as
	// applied, ascending; versions of no migration of ours are left out.
	legacy []legacyRow
}

// readVersionTables reads both version tables, each where goose looks for
// it: in current_schema().
func (m *Migrator) readVersionTables(ctx context.Context, q querier) (versionTables, error) {
	var state versionTables
	var err error
	if state.versionTableExists, err = tableExists(ctx, q, VersionTable); err != nil {
		return versionTables{}, err
	}
	if state.versionTableExists {
		rows, err := appliedRows(ctx, q, VersionTable)
		if err != nil {
			return versionTables{}, err
		}
		state.tracked = len(rows) > 0
	}
	legacyExists, err := tableExists(ctx, q, LegacyVersionTable)
	if err != nil || !legacyExists {
		return state, err
	}
	rows, err := appliedRows(ctx, q, LegacyVersionTable)
	if err != nil {
		return versionTables{}, err
	}
	for _, r := range rows {
		if _, ours := m.files[r.version]; ours {
			state.legacy = append(state.legacy, r)
		}
	}
	return state, nil
}

// tableExists reports whether a table of this name is in current_schema(),
// as goose's postgres store checks.
func tableExists(ctx context.Context, q querier, name string) (bool, error) {
	var exists bool
	err := q.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM pg_tables
		WHERE schemaname = current_schema() AND tablename = $1)`, name).Scan(&exists)
	if err != nil {
		return false, fmt.Errorf("look for %s: %w", name, err)
	}
	return exists, nil
}

// appliedRows lists the versions above 0 a goose version table records as
// applied, ascending: for each version its latest row, as goose reads it (the
// goose releases before Provider recorded a rollback as a row with
// is_applied false).
func appliedRows(ctx context.Context, q querier, name string) ([]legacyRow, error) {
	rows, err := q.QueryContext(ctx, `SELECT version_id, tstamp FROM (
			SELECT DISTINCT ON (version_id) version_id, is_applied, tstamp FROM `+name+`
			WHERE version_id > 0 ORDER BY version_id, id DESC) latest
		WHERE is_applied ORDER BY version_id`)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	defer rows.Close()
	var out []legacyRow
	for rows.Next() {
		var r legacyRow
		if err := rows.Scan(&r.version, &r.appliedAt); err != nil {
			return nil, fmt.Errorf("read %s: %w", name, err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	return out, nil
}

// versionRanges renders ascending versions compactly: "1-3, 5".
func versionRanges(versions []int64) string {
	var parts []string
	for i := 0; i < len(versions); {
		j := i
		for j+1 < len(versions) && versions[j+1] == versions[j]+1 {
			j++
		}
		part := strconv.FormatInt(versions[i], 10)
		if j > i {
			part += "-" + strconv.FormatInt(versions[j], 10)
		}
		parts = append(parts, part)
		i = j + 1
	}
	return strings.Join(parts, ", ")
}
