package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tombstoneworks/communitydeletion/migration"
)

// errPending reports pending migrations under status --fail-on-pending.
var errPending = errors.New("migrations pending")

// execute opens the database and runs cfg's command. extra options follow
// the ones derived from cfg (tests pass their own migrations here).
func execute(ctx context.Context, cfg config, stdout, stderr io.Writer, extra ...migration.Option) (err error) {
	m, err := migration.Open(ctx, cfg.databaseURL, append(cfg.options(stderr), extra...)...)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, m.Close()) }()

	switch cfg.command {
	case "up":
		if cfg.dryRun {
			return dryRun(ctx, m, stdout)
		}
		res, err := m.Up(ctx)
		return finish(ctx, m, stdout, res, err, "no migrations to apply")
	case "up-to":
		res, err := m.UpTo(ctx, cfg.version)
		return finish(ctx, m, stdout, res, err, "no migrations to apply")
	case "down":
		res, err := m.Down(ctx)
		var list []migration.Result
		if res != nil {
			list = append(list, *res)
		}
		return finish(ctx, m, stdout, list, err, "no migrations to roll back")
	case "down-to":
		res, err := m.DownTo(ctx, cfg.version)
		return finish(ctx, m, stdout, res, err, "no migrations to roll back")
	case "status":
		return status(ctx, m, stdout, cfg.json, cfg.failOnPending)
	case "version":
		v, err := m.Version(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, v)
		return nil
	case "adopt-legacy-versions":
		return adopt(ctx, m, stdout)
	case "accept-checksums":
		return acceptChecksums(ctx, m, stdout)
	case "install-ddl-guard":
		if err := m.InstallDDLGuard(ctx); err != nil {
			return err
		}
		fmt.Fprintln(stdout, "installed the DDL guard (event trigger community_deletion_ddl_guard)")
		return nil
	case "uninstall-ddl-guard":
		if err := m.UninstallDDLGuard(ctx); err != nil {
			return err
		}
		fmt.Fprintln(stdout, "removed the DDL guard")
		return nil
	}
	return usagef("unknown command %q", cfg.command)
}

// finish prints the migrations an operation applied or rolled back, then its
// error or the resulting database version.
func finish(ctx context.Context, m *migration.Migrator, stdout io.Writer, res []migration.Result, opErr error, none string) error {
	for _, r := range res {
		verb := "applied"
		if r.Direction == migration.DirectionDown {
			verb = "rolled back"
		}
		fmt.Fprintf(stdout, "%s %s (%s)\n", verb, r.File, formatDuration(r.Duration))
	}
	if opErr != nil {
		return opErr
	}
	v, err := m.Version(ctx)
	if err != nil {
		return err
	}
	if len(res) == 0 {
		fmt.Fprintf(stdout, "%s; database at version %d\n", none, v)
	} else {
		fmt.Fprintf(stdout, "database at version %d\n", v)
	}
	return nil
}

// dryRun lists what up would apply.
func dryRun(ctx context.Context, m *migration.Migrator, stdout io.Writer) error {
	pending, err := m.Pending(ctx)
	if err != nil {
		return err
	}
	v, err := m.Version(ctx)
	if err != nil {
		return err
	}
	if len(pending) == 0 {
		fmt.Fprintf(stdout, "no migrations to apply; database at version %d\n", v)
		return nil
	}
	for _, p := range pending {
		fmt.Fprintf(stdout, "would apply %s\n", p.File)
	}
	fmt.Fprintf(stdout, "dry run: %d migration(s) would be applied; database at version %d\n", len(pending), v)
	return nil
}

// adopt copies a history recorded in goose_db_version into the project's
// version table and prints what it adopted, or why there was nothing to.
func adopt(ctx context.Context, m *migration.Migrator, stdout io.Writer) error {
	adoption, err := m.AdoptLegacyVersions(ctx)
	if err != nil {
		return err
	}
	if !adoption.AlreadyTracked && len(adoption.Adopted) == 0 {
		fmt.Fprintf(stdout, "nothing to adopt: %s records none of this project's migrations\n", migration.LegacyVersionTable)
		return nil
	}
	for _, s := range adoption.Adopted {
		fmt.Fprintf(stdout, "adopted %s (applied %s)\n", s.File, s.AppliedAt.Format(time.RFC3339))
	}
	v, err := m.Version(ctx)
	if err != nil {
		return err
	}
	if adoption.AlreadyTracked {
		fmt.Fprintf(stdout, "nothing to adopt: %s already records the applied migrations; database at version %d\n",
			migration.VersionTable, v)
		return nil
	}
	fmt.Fprintf(stdout, "adopted %d migration(s) from %s, which is left as it is, into %s; database at version %d\n",
		len(adoption.Adopted), migration.LegacyVersionTable, migration.VersionTable, v)
	return nil
}

// acceptChecksums records the shipped files' checksums for the applied
// migrations whose recorded ones differ, and prints what it changed.
func acceptChecksums(ctx context.Context, m *migration.Migrator, stdout io.Writer) error {
	changes, err := m.AcceptChecksums(ctx)
	if err != nil {
		return err
	}
	for _, c := range changes {
		previous := "none"
		if c.Previous != "" {
			previous = c.Previous
		}
		fmt.Fprintf(stdout, "accepted %s (version %d): recorded checksum %s, was %s\n", c.File, c.Version, c.Recorded, previous)
	}
	if len(changes) == 0 {
		fmt.Fprintln(stdout, "nothing to accept: every applied migration's recorded checksum matches its shipped file")
		return nil
	}
	fmt.Fprintf(stdout, "accepted the shipped checksums of %d applied migration(s) in %s\n", len(changes), migration.VersionTable)
	return nil
}

// statusReport is the JSON output of status --json.
type statusReport struct {
	Version            int64              `json:"version"`
	Pending            int                `json:"pending"`
	ChecksumMismatches int                `json:"checksum_mismatches"`
	Migrations         []migration.Status `json:"migrations"`
}

// status prints every migration and its checksum state, then fails with a
// *migration.ChecksumMismatchError when an applied migration differs from
// the shipped files and, with failOnPending, with errPending when some are
// pending.
func status(ctx context.Context, m *migration.Migrator, stdout io.Writer, asJSON, failOnPending bool) error {
	list, err := m.Status(ctx)
	if err != nil {
		return err
	}
	v, err := m.Version(ctx)
	if err != nil {
		return err
	}
	var pending []string
	for _, s := range list {
		if s.State == migration.StatePending {
			pending = append(pending, s.File)
		}
	}
	checksumErr := migration.ChecksumError(list)
	mismatches := 0
	if mismatch, ok := errors.AsType[*migration.ChecksumMismatchError](checksumErr); ok {
		mismatches = len(mismatch.Problems)
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		report := statusReport{Version: v, Pending: len(pending), ChecksumMismatches: mismatches, Migrations: list}
		if err := enc.Encode(report); err != nil {
			return fmt.Errorf("status: write JSON: %w", err)
		}
	} else {
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "VERSION\tSTATE\tAPPLIED AT\tCHECKSUM\tFILE")
		for _, s := range list {
			at := "-"
			if !s.AppliedAt.IsZero() {
				at = s.AppliedAt.Format(time.RFC3339)
			}
			checksum := string(s.ChecksumState)
			if checksum == "" {
				checksum = "-"
			}
			file := s.File
			if file == "" {
				file = "(no shipped file)"
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", s.Version, s.State, at, checksum, file)
		}
		if err := tw.Flush(); err != nil {
			return fmt.Errorf("status: write: %w", err)
		}
		fmt.Fprintf(stdout, "database at version %d, %d pending\n", v, len(pending))
	}
	if checksumErr != nil {
		return fmt.Errorf("status: %w", checksumErr)
	}

	if failOnPending && len(pending) > 0 {
		return fmt.Errorf("%w: %d not applied (%s); database at version %d",
			errPending, len(pending), strings.Join(pending, ", "), v)
	}
	return nil
}

// formatDuration rounds d for display: 12ms, 1.234s, 850µs.
func formatDuration(d time.Duration) string {
	if d >= time.Millisecond {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Microsecond).String()
}
