package main

import (
	"encoding/base64"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/tombstoneworks/communitydeletion/internal/cliflag"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

const usage = `usage: deletionctl [--database-url URL] <command> [flags]

Operates the whole-community deletion lifecycle: submits, inventories,
approves, lists, inspects, aborts and unblocks deletion requests, reports
and reaps serving write leases, and runs the executor. Every command but run
is one short transaction; a refusal changes nothing.

Commands:
  submit --host HOST --by NAME [--reason TEXT]
        request the deletion of the active community HOST; prints
        "<request id> <stage>"
  inventory --request ID [--prefix PREFIX ...] [--objects-dir DIR]
        build the schema inventory of the request's community and freeze it
        with a storage manifest of one summary per --prefix (default
        "media/<community id>/"); prints "<request id> <stage> <digest>".
        With --objects-dir, each prefix is listed in the filesystem object
        store rooted at DIR and its object count, bytes and keys digest are
        frozen (executor.SummarizeStorage). Without it every prefix is frozen
        EMPTY: the command asserts that no prefix holds objects. (The
        approval binds the prefixes: run deletes whatever they hold when it
        fences the community, and blocks a request whose prefixes are not
        the community's)
  approve --request ID --by NAME [--note TEXT]
        approve the frozen inventory; NAME must not be the requester
  list [--stage STAGE] [--blocked[=false]] [--limit N] [--after CURSOR] [--json]
        list requests newest first, one page of at most N (default 50, at
        most 1000), only those at STAGE and only blocked (--blocked=false:
        unblocked) ones when asked; "next: CURSOR" (or "next" in JSON) names
        the following page for --after
  inspect --request ID [--json]
        show a request, its approval, checkpoints and chunk progress
  abort --request ID --by NAME --reason TEXT
        cancel a request that is submitted, inventoried, approved or fenced
  unblock --request ID --by NAME --reason TEXT
        clear a request's durable block after remediating its cause
  leases [--reap N]
        show serving write lease statistics; with --reap, delete up to N
        (1 to 10000) expired leases and print how many
  run --objects-dir DIR [--once] [--request ID] [--owner NAME] [--lease D]
      [--chunk-size N]
        execute approved deletions (the executor loop): fence, freeze the
        destructive manifest, delete the objects, purge PostgreSQL and the
        cache, verify and complete. The object store is the filesystem one
        rooted at DIR (required: this command has no S3 client; services
        embed executor.Runner with their own ObjectStore and Cache adapters).
        The cache is an in-memory one, empty in a fresh process, so its purge
        and verification trivially pass. --owner is the executor identity
        (default "deletionctl-<hostname>-<pid>"), --lease the claim length
        (default 60s), --chunk-size the keys per manifest chunk (default
        1000, at most 10000). With --once, process one request (--request
        ID, or the next claimable one) and exit: 0 when it completed or
        nothing was claimable ("nothing to claim"), 3 with one stderr line saying
        why when it was blocked or a retry was scheduled. Without --once,
        run until SIGINT or SIGTERM, then release any claim and exit 0.
        Progress goes to stdout: a self-rewriting progress bar on a
        terminal, otherwise one line per event (at most one per purge batch)

Global flag (before or after the command):
  --database-url URL   PostgreSQL URL or key=value string; default
                       $DATABASE_URL; if empty, pgx uses the PG* variables

Exit codes:
  0 success, 1 failure, 2 usage error, 3 refused (a lifecycle safety
  refusal, access denied, stale lease, or a run --once that blocked the
  request or scheduled a retry), 4 not found, 5 invalid input
`

// defaultListLimit is list's page size without --limit.
const defaultListLimit = 50

// config is a parsed command line.
type config struct {
	command     string
	databaseURL string

	host      string
	by        string
	reason    string
	note      string
	requestID uuid.UUID
	prefixes  []string

	stage   *lifecycle.Stage
	blocked *bool // nil: either
	limit   int
	after   *lifecycle.Cursor
	json    bool

	reap int // 0: no reaping

	objectsDir string        // run, inventory: root of the filesystem object store
	once       bool          // run: one request, then exit
	owner      string        // run: executor identity; "" means the default
	lease      time.Duration // run: claim length; 0 means the executor default
	chunkSize  int           // run: keys per manifest chunk; 0 means the executor default
}

// usageError is a malformed command line (exit code 2).
type usageError = cliflag.UsageError

// usagef returns a *usageError.
var usagef = cliflag.Usagef

// errHelp reports that usage was asked for (-h, --help or "help").
var errHelp = cliflag.ErrHelp

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }

func (l *stringList) Set(v string) error {
	*l = append(*l, v)
	return nil
}

// commandFlags lists, per command, the flags it accepts besides
// --database-url, and which of them are required.
var commandFlags = map[string]struct{ accepted, required []string }{
	"submit":    {[]string{"host", "by", "reason"}, []string{"host", "by"}},
	"inventory": {[]string{"request", "prefix", "objects-dir"}, []string{"request"}},
	"approve":   {[]string{"request", "by", "note"}, []string{"request", "by"}},
	"list":      {[]string{"stage", "blocked", "limit", "after", "json"}, nil},
	"inspect":   {[]string{"request", "json"}, []string{"request"}},
	"abort":     {[]string{"request", "by", "reason"}, []string{"request", "by", "reason"}},
	"unblock":   {[]string{"request", "by", "reason"}, []string{"request", "by", "reason"}},
	"leases":    {[]string{"reap"}, nil},
	"run":       {[]string{"request", "once", "owner", "objects-dir", "lease", "chunk-size"}, []string{"objects-dir"}},
}

// parseArgs parses the command line; getenv supplies DATABASE_URL. Flags may
// come before or after the command.
func parseArgs(args []string, getenv func(string) string) (config, error) {
	cfg := config{limit: defaultListLimit}
	var (
		blocked  bool
		request  string
		stage    string
		after    string
		prefixes stringList
	)
	fs := flag.NewFlagSet("deletionctl", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.StringVar(&cfg.databaseURL, "database-url", "", "")
	fs.StringVar(&cfg.host, "host", "", "")
	fs.StringVar(&cfg.by, "by", "", "")
	fs.StringVar(&cfg.reason, "reason", "", "")
	fs.StringVar(&cfg.note, "note", "", "")
	fs.StringVar(&request, "request", "", "")
	fs.Var(&prefixes, "prefix", "")
	fs.StringVar(&stage, "stage", "", "")
	fs.BoolVar(&blocked, "blocked", false, "")
	fs.IntVar(&cfg.limit, "limit", defaultListLimit, "")
	fs.StringVar(&after, "after", "", "")
	fs.BoolVar(&cfg.json, "json", false, "")
	fs.IntVar(&cfg.reap, "reap", 0, "")
	fs.StringVar(&cfg.objectsDir, "objects-dir", "", "")
	fs.BoolVar(&cfg.once, "once", false, "")
	fs.StringVar(&cfg.owner, "owner", "", "")
	fs.DurationVar(&cfg.lease, "lease", 0, "")
	fs.IntVar(&cfg.chunkSize, "chunk-size", 0, "")

	command, positional, err := cliflag.ParseCommand(fs, args)
	if err != nil {
		return config{}, err
	}
	cfg.command = command
	spec, ok := commandFlags[cfg.command]
	if !ok {
		return config{}, usagef("unknown command %q", cfg.command)
	}
	if len(positional) > 0 {
		return config{}, usagef("%s takes no arguments, got %q", cfg.command, positional[0])
	}

	set := map[string]bool{}
	var flagErr error
	fs.Visit(func(f *flag.Flag) {
		set[f.Name] = true
		if f.Name != "database-url" && !slices.Contains(spec.accepted, f.Name) && flagErr == nil {
			flagErr = usagef("%s does not take --%s", cfg.command, f.Name)
		}
	})
	if flagErr != nil {
		return config{}, flagErr
	}
	for _, name := range spec.required {
		if !set[name] {
			return config{}, usagef("%s needs --%s", cfg.command, name)
		}
	}
	for _, name := range []string{"host", "by", "reason", "objects-dir"} {
		if set[name] && slices.Contains(spec.required, name) && strings.TrimSpace(fs.Lookup(name).Value.String()) == "" {
			return config{}, usagef("%s: --%s must not be empty", cfg.command, name)
		}
	}

	if set["request"] {
		id, err := uuid.Parse(request)
		if err != nil {
			return config{}, usagef("%s: --request must be a request uuid, got %q", cfg.command, request)
		}
		cfg.requestID = id
	}
	cfg.prefixes = prefixes
	for _, p := range cfg.prefixes {
		if p == "" {
			return config{}, usagef("inventory: --prefix must not be empty (it would name the whole bucket)")
		}
	}
	if set["stage"] {
		s, err := lifecycle.ParseStage(stage)
		if err != nil {
			return config{}, usagef("list: --stage: unknown stage %q", stage)
		}
		cfg.stage = &s
	}
	if set["blocked"] {
		cfg.blocked = &blocked
	}
	if set["limit"] && (cfg.limit < 1 || cfg.limit > lifecycle.MaxListLimit) {
		return config{}, usagef("list: --limit must be between 1 and %d, got %d", lifecycle.MaxListLimit, cfg.limit)
	}
	if set["after"] {
		c, err := decodeCursor(after)
		if err != nil {
			return config{}, usagef("list: --after: %v", err)
		}
		cfg.after = c
	}
	if set["reap"] && (cfg.reap < 1 || cfg.reap > lifecycle.MaxServingLeaseReapBatch) {
		return config{}, usagef("leases: --reap must be between 1 and %d, got %d", lifecycle.MaxServingLeaseReapBatch, cfg.reap)
	}

	if set["objects-dir"] && strings.TrimSpace(cfg.objectsDir) == "" {
		return config{}, usagef("%s: --objects-dir must not be empty", cfg.command)
	}
	if set["owner"] {
		cfg.owner = strings.TrimSpace(cfg.owner)
		if cfg.owner == "" {
			return config{}, usagef("run: --owner must not be empty")
		}
	}
	if set["lease"] && cfg.lease <= 0 {
		return config{}, usagef("run: --lease must be positive, got %s", cfg.lease)
	}
	if set["chunk-size"] && (cfg.chunkSize < 1 || cfg.chunkSize > lifecycle.MaxManifestChunkKeys) {
		return config{}, usagef("run: --chunk-size must be between 1 and %d, got %d", lifecycle.MaxManifestChunkKeys, cfg.chunkSize)
	}

	if cfg.databaseURL == "" {
		cfg.databaseURL = getenv("DATABASE_URL")
	}
	return cfg, nil
}

// encodeCursor renders a list position as an opaque string: base64url of
// "<RFC3339Nano created_at>|<uuid>".
func encodeCursor(c lifecycle.Cursor) string {
	raw := c.CreatedAt.UTC().Format(time.RFC3339Nano) + "|" + c.ID.String()
	return base64.RawURLEncoding.EncodeToString([]byte(raw))
}

// decodeCursor parses a cursor encodeCursor wrote.
func decodeCursor(s string) (*lifecycle.Cursor, error) {
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("malformed cursor %q", s)
	}
	at, id, ok := strings.Cut(string(raw), "|")
	if !ok {
		return nil, fmt.Errorf("malformed cursor %q", s)
	}
	createdAt, err := time.Parse(time.RFC3339Nano, at)
	// encodeCursor writes UTC: a time whose UTC year leaves 0000-9999 could
	// not be written back, and no stored row has one.
	if err != nil || createdAt.UTC().Year() < 0 || createdAt.UTC().Year() > 9999 {
		return nil, fmt.Errorf("malformed cursor %q: bad time", s)
	}
	uid, err := uuid.Parse(id)
	if err != nil {
		return nil, fmt.Errorf("malformed cursor %q: bad id", s)
	}
	return &lifecycle.Cursor{CreatedAt: createdAt, ID: uid}, nil
}
