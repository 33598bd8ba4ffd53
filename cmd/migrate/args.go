package main

import (
	"flag"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/tombstoneworks/communitydeletion/internal/cliflag"
	"github.com/tombstoneworks/communitydeletion/migration"
)

const usage = `usage: migrate <command> [flags]

Applies the communitydeletion schema migrations while holding the schema
destruction advisory lock. Connect directly to PostgreSQL, never through a
transaction-pooling PgBouncer: the lock belongs to the session. The applied
migrations are recorded in the table community_deletion_schema_migrations.

Commands:
  up               apply every pending migration
  up-to VERSION    apply pending migrations up to and including VERSION
  down             roll back the most recently applied migration
  down-to VERSION  roll back every migration above VERSION (0: all of them)
  status           list every migration as applied or pending, with its
                   checksum state (ok, earlier-release, unrecorded, mismatch,
                   no-file); exit 3 when an applied one differs from the
                   shipped files
  version          print the current database version
  adopt-legacy-versions
                   once, on a database migrated by a release that recorded
                   them in goose_db_version: copy exactly this project's
                   applied versions, after checking that their objects
                   exist, into community_deletion_schema_migrations; leaves
                   goose_db_version as it is; a second run does nothing
  accept-checksums only once a person has confirmed that the database
                   matches the shipped files: record their checksums for
                   the applied migrations whose recorded checksum differs
                   (up, down and status refuse such a database, exit 3)
  install-ddl-guard
                   as a superuser: install the optional event trigger that
                   refuses DDL which disables or drops a deletion guard,
                   changes an installed function or leaves a registered
                   table unfenced, outside migration runs (idempotent)
  uninstall-ddl-guard
                   as a superuser: remove it

Flags (before or after the command):
  --database-url URL          PostgreSQL URL or key=value string; default
                              $DATABASE_URL; if empty, pgx uses the PG*
                              environment variables
  --lock-timeout DURATION     how long to wait for the advisory lock (default 5m)
  --ddl-lock-timeout DURATION lock_timeout of the migration session: how long
                              a statement may wait for a table lock (default 5s)
  --statement-timeout DURATION
                              statement_timeout of the migration session
                              (default 0: none)
  --allow-out-of-order        apply pending migrations older than the database
                              version instead of refusing
  --dry-run                   up: list what up would apply, apply nothing
  --json                      status: print JSON
  --fail-on-pending           status: exit 6 when migrations are pending

Exit codes (shared with deletionctl):
  0 success, 1 failure, 2 usage error, 3 refused (out-of-order migrations,
  a history in goose_db_version not yet adopted, an ambiguous adoption,
  a DDL guard command without superuser, applied migrations that differ
  from the shipped files),
  6 migrations pending (status --fail-on-pending), 7 timed out waiting for
  the advisory lock
`

// config is a parsed command line.
type config struct {
	command          string
	version          int64 // target of up-to and down-to
	databaseURL      string
	lockTimeout      time.Duration
	ddlLockTimeout   time.Duration
	statementTimeout time.Duration
	allowOutOfOrder  bool
	dryRun           bool
	json             bool
	failOnPending    bool
}

// options returns the migration options of c; notices go to stderr.
func (c config) options(stderr io.Writer) []migration.Option {
	return []migration.Option{
		migration.WithLockTimeout(c.lockTimeout),
		migration.WithDDLLockTimeout(c.ddlLockTimeout),
		migration.WithStatementTimeout(c.statementTimeout),
		migration.WithAllowOutOfOrder(c.allowOutOfOrder),
		migration.WithLockWaitNotice(func(msg string) { fmt.Fprintln(stderr, "migrate: "+msg) }),
		migration.WithChecksumNotice(func(msg string) { fmt.Fprintln(stderr, "migrate: "+msg) }),
	}
}

// usageError is a malformed command line (exit code 2).
type usageError = cliflag.UsageError

// usagef returns a *usageError.
var usagef = cliflag.Usagef

// errHelp reports that usage was asked for (-h, --help or "help").
var errHelp = cliflag.ErrHelp

// commandFlags lists the flags that only some commands accept.
var commandFlags = map[string]string{
	"dry-run":         "up",
	"json":            "status",
	"fail-on-pending": "status",
}

// commandArgs maps each command to its positional argument, if any.
var commandArgs = map[string]string{
	"up": "", "up-to": "VERSION", "down": "", "down-to": "VERSION", "status": "", "version": "",
	"adopt-legacy-versions": "", "accept-checksums": "", "install-ddl-guard": "", "uninstall-ddl-guard": "",
}

// parseArgs parses the command line; getenv supplies DATABASE_URL. Flags may
// come before or after the command and its argument.
func parseArgs(args []string, getenv func(string) string) (config, error) {
	cfg := config{}
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.StringVar(&cfg.databaseURL, "database-url", "", "")
	fs.DurationVar(&cfg.lockTimeout, "lock-timeout", migration.DefaultLockTimeout, "")
	fs.DurationVar(&cfg.ddlLockTimeout, "ddl-lock-timeout", migration.DefaultDDLLockTimeout, "")
	fs.DurationVar(&cfg.statementTimeout, "statement-timeout", migration.DefaultStatementTimeout, "")
	fs.BoolVar(&cfg.allowOutOfOrder, "allow-out-of-order", false, "")
	fs.BoolVar(&cfg.dryRun, "dry-run", false, "")
	fs.BoolVar(&cfg.json, "json", false, "")
	fs.BoolVar(&cfg.failOnPending, "fail-on-pending", false, "")

	command, positional, err := cliflag.ParseCommand(fs, args)
	if err != nil {
		return config{}, err
	}
	cfg.command = command
	argName, ok := commandArgs[cfg.command]
	if !ok {
		return config{}, usagef("unknown command %q", cfg.command)
	}
	switch {
	case argName == "" && len(positional) > 0:
		return config{}, usagef("%s takes no arguments, got %q", cfg.command, positional[0])
	case argName != "" && len(positional) == 0:
		return config{}, usagef("%s needs a %s argument", cfg.command, argName)
	case argName != "" && len(positional) > 1:
		return config{}, usagef("%s takes one %s argument, got %d arguments", cfg.command, argName, len(positional))
	case argName != "":
		v, err := strconv.ParseInt(positional[0], 10, 64)
		if err != nil {
			return config{}, usagef("%s: %s must be an integer, got %q", cfg.command, argName, positional[0])
		}
		if cfg.command == "up-to" && v < 1 {
			return config{}, usagef("up-to: %s must be at least 1, got %d", argName, v)
		}
		if v < 0 {
			return config{}, usagef("%s: %s must not be negative, got %d", cfg.command, argName, v)
		}
		cfg.version = v
	}

	var flagErr error
	fs.Visit(func(f *flag.Flag) {
		if only, ok := commandFlags[f.Name]; ok && only != cfg.command && flagErr == nil {
			flagErr = usagef("flag --%s is only valid with %s", f.Name, only)
		}
	})
	if flagErr != nil {
		return config{}, flagErr
	}
	for _, d := range []struct {
		name  string
		value time.Duration
	}{
		{"lock-timeout", cfg.lockTimeout},
		{"ddl-lock-timeout", cfg.ddlLockTimeout},
		{"statement-timeout", cfg.statementTimeout},
	} {
		if d.value < 0 {
			return config{}, usagef("--%s must not be negative, got %s", d.name, d.value)
		}
	}
	if cfg.databaseURL == "" {
		cfg.databaseURL = getenv("DATABASE_URL")
	}
	return cfg, nil
}
