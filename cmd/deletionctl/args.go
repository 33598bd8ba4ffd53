package main

import (
	"encoding/base64"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/tombstoneworks/communitydeletion/executor/storeurl"
	"github.com/tombstoneworks/communitydeletion/internal/cliflag"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// Environment variables that stand in for flags not given (a flag always
// wins), for the commands that take the flag.
const (
	envDatabaseURL = "DATABASE_URL"
	envObjects     = "DELETIONCTL_OBJECTS"      // --objects
	envCache       = "DELETIONCTL_CACHE"        // --cache
	envMetricsAddr = "DELETIONCTL_METRICS_ADDR" // --metrics-addr
	envLogLevel    = "DELETIONCTL_LOG_LEVEL"    // --log-level
	envLogFormat   = "DELETIONCTL_LOG_FORMAT"   // --log-format
	// envReceiptKey holds the receipt signing key itself (PEM PKCS#8 or the
	// base64 seed), not a file name: --receipt-key names a file.
	envReceiptKey = "COMMUNITYDELETION_RECEIPT_KEY" // --receipt-key
)

const usage = `usage: deletionctl [--database-url URL] <command> [flags]

Operates the whole-community deletion lifecycle: submits, inventories,
approves, lists, inspects, aborts and unblocks deletion requests, reports
and reaps serving write leases, checks the deletion control plane's health
and a service's adoption, and runs the executor. Every command but run and
check is one short transaction (check: a few read-only ones); a refusal
changes nothing.

Commands:
  submit --host HOST|ID --by NAME [--reason TEXT]
        request the deletion of the active community HOST (or of the
        tenant ID of a declared tenant table, which has no host); prints
        "<request id> <stage>"
  inventory --request ID [--prefix PREFIX ...] (--objects URL | --objects-dir DIR | --store-empty)
        build the schema inventory of the request's community and freeze it
        with a storage manifest of one summary per object prefix of the
        deployment's declared storage layout (the templates in
        community_deletion.community_deletion_storage_layout, such as "uploads/{tenant}/",
        expanded for the community); prints "<request id> <stage> <digest>".
        There is no default layout: with none declared it refuses. Each
        --prefix must be one of the declared prefixes, and together they
        must be all of them (a check, never a choice). With an object store
        (--objects, --objects-dir DIR as file:///DIR, or
        $DELETIONCTL_OBJECTS), each prefix is listed in it and its object
        count, bytes and keys digest are frozen (executor.SummarizeStorage).
        Without one it refuses, unless --store-empty asserts that the store
        holds nothing under any declared prefix. An inventoried request not
        yet approved may be inventoried again: the new inventory replaces
        the old. (The approval binds the prefixes: run deletes whatever they
        hold when it fences the community)
  approve --request ID --by NAME [--note TEXT] [--grace D]
        approve the frozen inventory; NAME must not be the requester.
        --grace is how long the approved request waits before anything is
        quiesced or fenced (0 to 720h; default the deployment's
        default_grace_period setting, zero unless set); abort undoes it
        with no effect on the community until then
  protect --host HOST --by NAME --reason TEXT
        mark the community deletion-protected: submit is refused for it
        (refused while a request is open: abort it first)
  unprotect --host HOST --by NAME --reason TEXT [--approve]
        ask to clear the protection; a second operator (another name and
        login) then runs it with --approve to clear it
  protection --host HOST
        show whether the community is protected and its protection history
  list [--stage STAGE] [--blocked[=false]] [--limit N] [--after CURSOR] [--json]
        list requests newest first, one page of at most N (default 50, at
        most 1000), only those at STAGE and only blocked (--blocked=false:
        unblocked) ones when asked; "next: CURSOR" (or "next" in JSON) names
        the following page for --after
  inspect --request ID [--json]
        show a request, its approval, checkpoints, and its progress per
        destructive stage (objects: chunks and keys deleted of the frozen
        manifest; purge: rows per table of the frozen inventory; cache) with
        an estimate of the time left from the rate of the last minute of
        progress (none without a rate)
  abort --request ID --by NAME --reason TEXT
        cancel a request that is submitted, inventoried, approved or fenced
  unblock --request ID --by NAME --reason TEXT
        clear a request's durable block after remediating its cause
  leases [--reap N]
        show serving write lease statistics; with --reap, delete up to N
        (1 to 10000) expired leases and print how many
  health [--json]
        print what community_deletion.community_deletion_health() (prepared transactions
        holding an advisory lock) and community_deletion.community_deletion_catalog_drift()
        report; exit 3 when either reports anything
  check [--json]
        the adoption checks for a service's CI, as the operator, after its
        migrations (the same as communitydeletiontest's RequireCoverage,
        plus the storage layout): every community_deletion.community_deletion_catalog_drift()
        row, whether the purge order can be computed, and whether a storage
        layout is declared for inventory. Prints "ok: …" for each check that
        passed and one line per problem, saying what to do; exit 3 when
        there is any problem
  receipt show REQUEST
        print the deletion receipt of a completed request: its body as
        indented JSON, then its signature (docs/receipts.md)
  receipt export --dir DIR [--after N] [--limit N]
        write the stored receipts after sequence N (default 0: from the
        first), at most N of them (default all), into DIR, one file each;
        a file already there with other content is refused
  receipt verify --dir DIR --public-key FILE [--allow-unsigned]
      [--expect-head SEQUENCE:HASH|FILE] [--from-sequence N --previous-hash HEX]
        verify the receipts exported in DIR offline, with no database,
        from the chain's first receipt (or from receipt N, whose
        previous_hash must be HEX): each signature with the public key
        (PEM PKIX or base64) of the first signed entry and then the key
        each key rotation names, the chain and each receipt's consistency;
        with --expect-head (a head receipt head printed, or the file
        receipt head --json wrote), that the export reaches that head
        unchanged. One line per entry verified and a summary, or exit 3
        naming the first failure. Unsigned receipts fail unless
        --allow-unsigned, and always after a signed entry unless a signed
        rotation to unsigned precedes them
  receipt head [--json]
        print the head of the receipt chain: the newest entry's sequence,
        hash, time and signer; keep it outside the database and give it to
        receipt verify --expect-head. --json prints the file form, which
        carries the signed entry
  receipt rotate --old-key FILE
        as the executor's login: hand the receipt chain on from the key
        it is signed with (FILE, the old private key) to what the schema's
        owner registered in community_deletion_receipt_keys (a new key, or
        unsigned), with a key rotation entry signed by the old key
  run --objects URL --cache URL [--once] [--request ID] [--owner NAME]
      [--lease D] [--chunk-size N] [--metrics-addr HOST:PORT]
      [--log-level LEVEL] [--log-format FORMAT] [--receipt-key FILE]
        execute approved deletions (the executor loop): fence, freeze the
        destructive manifest, delete the objects, purge PostgreSQL and the
        cache, verify and complete, writing each deletion's receipt as it
        completes, signed with --receipt-key FILE (PEM PKCS#8 Ed25519, as
        openssl genpkey -algorithm ed25519 writes, or its base64 seed) or
        $COMMUNITYDELETION_RECEIPT_KEY (the key itself); without either the
        receipts are unsigned and say so. An unreadable key is a usage
        error.
        --objects is the object store: s3://BUCKET[/ROOT/][?endpoint=URL&
        region=R&path_style=true&max_attempts=N&max_backoff=D&profile=P&
        content_md5=true] (credentials from the AWS SDK's default chain) or
        file:///DIR; --objects-dir DIR is file:///DIR.
        --cache is the cache: redis://[USER:PASSWORD@]HOST:PORT[/DB]?pattern=
        P[&pattern=P…] (rediss:// over TLS, redis+cluster://HOST:PORT,HOST:
        PORT… for a cluster; each pattern a key family, e.g.
        app:{community}:*), or memory: for a service without a cache (an
        empty in-process cache: its purge and verification trivially pass).
        Both are required: a forgotten cache would be verified empty.
        --owner is the executor identity (default
        "deletionctl-<hostname>-<pid>"), --lease the claim length (default
        60s), --chunk-size the keys per manifest chunk (default 1000, at most
        10000). --metrics-addr serves Prometheus metrics at /metrics and a
        health check at /healthz (200 "ok", or 503 naming the problem: the
        database did not answer within 2s, or a claim's lease was last
        renewed more than two heartbeat intervals ago).
        With --once, process one request (--request ID, or the next
        claimable one) and exit: 0 when it completed or nothing was
        claimable ("nothing to claim"), 3 with one stderr line saying why
        when it was blocked or a retry was scheduled. Without --once, run
        until SIGINT or SIGTERM, then release any claim and exit 0.
        The run's log goes to stdout, each record carrying request_id,
        community_id, stage, lease_generation and executor: JSON lines when
        stdout is not a terminal; on a terminal text lines with a
        self-rewriting progress bar for listing, chunk deletion and the
        purge (--log-format json or text forces one). --log-level (default
        info) shows per-chunk and per-batch records at debug. stderr gets
        only the final one-line error, if any

Global flag (before or after the command):
  --database-url URL   PostgreSQL URL or key=value string; default
                       $DATABASE_URL; if empty, pgx uses the PG* variables

Environment (a flag given wins):
  DATABASE_URL               --database-url
  DELETIONCTL_OBJECTS        --objects (run, inventory)
  DELETIONCTL_CACHE          --cache (run)
  DELETIONCTL_METRICS_ADDR   --metrics-addr (run)
  DELETIONCTL_LOG_LEVEL      --log-level (run)
  DELETIONCTL_LOG_FORMAT     --log-format (run)
  COMMUNITYDELETION_RECEIPT_KEY
                             the receipt signing key itself (run), where
                             --receipt-key names a file

Exit codes:
  0 success, 1 failure, 2 usage error (also a store URL that cannot be
  opened), 3 refused (a lifecycle safety refusal, access denied, stale
  lease, a run --once that blocked the request or scheduled a retry, a
  health finding, a check problem, or a receipt verify that failed), 4 not found, 5 invalid
  input
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

	grace   *time.Duration // approve: the grace period; nil: the deployment's default
	approve bool           // unprotect: approve a pending clear request as the second operator

	objects     string        // run, inventory: object-store URL (storeurl.ParseObjects); "" none
	storeEmpty  bool          // inventory: the operator asserts the object store holds nothing of the community
	cache       string        // run: cache URL (storeurl.ParseCache)
	metricsAddr string        // run: address of the /metrics and /healthz server; "" none
	logLevel    string        // run: debug, info, warn or error; "" means info
	logFormat   string        // run: auto, json or text; "" means auto
	once        bool          // run: one request, then exit
	owner       string        // run: executor identity; "" means the default
	lease       time.Duration // run: claim length; 0 means the executor default
	chunkSize   int           // run: keys per manifest chunk; 0 means the executor default
	receiptKey  string        // run: --receipt-key file; "" none
	receiptEnv  string        // run: $COMMUNITYDELETION_RECEIPT_KEY, when --receipt-key is not given

	dir           string // receipt export, verify: the export directory
	afterSequence int64  // receipt export: the sequence to export after
	publicKey     string // receipt verify: the public key file
	allowUnsigned bool   // receipt verify
	fromSequence  int64  // receipt verify: the first receipt's sequence; 0 the chain's first
	previousHash  string // receipt verify: that receipt's previous_hash
	expectHead    string // receipt verify: SEQUENCE:HASH or a head file; "" none
	oldKey        string // receipt rotate: the old signing key's file
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
	"submit":     {[]string{"host", "by", "reason"}, []string{"host", "by"}},
	"inventory":  {[]string{"request", "prefix", "objects", "objects-dir", "store-empty"}, []string{"request"}},
	"approve":    {[]string{"request", "by", "note", "grace"}, []string{"request", "by"}},
	"protect":    {[]string{"host", "by", "reason"}, []string{"host", "by", "reason"}},
	"unprotect":  {[]string{"host", "by", "reason", "approve"}, []string{"host", "by", "reason"}},
	"protection": {[]string{"host"}, []string{"host"}},
	"list":       {[]string{"stage", "blocked", "limit", "after", "json"}, nil},
	"inspect":    {[]string{"request", "json"}, []string{"request"}},
	"abort":      {[]string{"request", "by", "reason"}, []string{"request", "by", "reason"}},
	"unblock":    {[]string{"request", "by", "reason"}, []string{"request", "by", "reason"}},
	"leases":     {[]string{"reap"}, nil},
	"health":     {[]string{"json"}, nil},
	"check":      {[]string{"json"}, nil},
	"run": {[]string{"request", "once", "owner", "objects", "objects-dir", "cache", "metrics-addr", "log-level", "log-format",
		"lease", "chunk-size", "receipt-key"}, nil},
	"receipt show":   {nil, nil},
	"receipt export": {[]string{"dir", "after", "limit"}, []string{"dir"}},
	"receipt verify": {[]string{"dir", "public-key", "allow-unsigned", "expect-head", "from-sequence", "previous-hash"}, []string{"dir", "public-key"}},
	"receipt head":   {[]string{"json"}, nil},
	"receipt rotate": {[]string{"old-key"}, []string{"old-key"}},
}

// receiptCommands are the subcommands of receipt.
var receiptCommands = []string{"show", "export", "verify", "head", "rotate"}

// parseArgs parses the command line; getenv supplies DATABASE_URL and the
// DELETIONCTL_* variables of flags not given. Flags may come before or after
// the command. Store URLs are parsed (not opened) here, so a malformed one is
// a usage error before anything connects.
func parseArgs(args []string, getenv func(string) string) (config, error) {
	cfg := config{limit: defaultListLimit}
	var (
		blocked    bool
		request    string
		stage      string
		after      string
		prefixes   stringList
		objectsDir string
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
	fs.StringVar(&cfg.objects, "objects", "", "")
	fs.StringVar(&objectsDir, "objects-dir", "", "")
	fs.BoolVar(&cfg.storeEmpty, "store-empty", false, "")
	fs.StringVar(&cfg.cache, "cache", "", "")
	fs.StringVar(&cfg.metricsAddr, "metrics-addr", "", "")
	fs.StringVar(&cfg.logLevel, "log-level", "", "")
	fs.StringVar(&cfg.logFormat, "log-format", "", "")
	fs.BoolVar(&cfg.once, "once", false, "")
	fs.StringVar(&cfg.owner, "owner", "", "")
	fs.DurationVar(&cfg.lease, "lease", 0, "")
	fs.IntVar(&cfg.chunkSize, "chunk-size", 0, "")
	var grace time.Duration
	fs.DurationVar(&grace, "grace", 0, "")
	fs.BoolVar(&cfg.approve, "approve", false, "")
	fs.StringVar(&cfg.receiptKey, "receipt-key", "", "")
	fs.StringVar(&cfg.dir, "dir", "", "")
	fs.StringVar(&cfg.publicKey, "public-key", "", "")
	fs.BoolVar(&cfg.allowUnsigned, "allow-unsigned", false, "")
	fs.Int64Var(&cfg.fromSequence, "from-sequence", 0, "")
	fs.StringVar(&cfg.previousHash, "previous-hash", "", "")
	fs.StringVar(&cfg.expectHead, "expect-head", "", "")
	fs.StringVar(&cfg.oldKey, "old-key", "", "")

	command, positional, err := cliflag.ParseCommand(fs, args)
	if err != nil {
		return config{}, err
	}
	cfg.command = command
	if command == "receipt" {
		if positional, err = cfg.receiptSubcommand(positional); err != nil {
			return config{}, err
		}
	}
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
	for _, name := range []string{"host", "by", "reason"} {
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
	if slices.Contains(cfg.prefixes, "") {
		return config{}, usagef("inventory: --prefix must not be empty (it would name the whole bucket)")
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
	if cfg.command == "receipt export" {
		if err := cfg.exportFlags(set, after); err != nil {
			return config{}, err
		}
	} else if set["limit"] && (cfg.limit < 1 || cfg.limit > lifecycle.MaxListLimit) {
		return config{}, usagef("list: --limit must be between 1 and %d, got %d", lifecycle.MaxListLimit, cfg.limit)
	}
	if err := cfg.verifyFlags(set); err != nil {
		return config{}, err
	}
	for _, name := range []string{"dir", "public-key", "receipt-key", "expect-head", "old-key"} {
		if set[name] && strings.TrimSpace(fs.Lookup(name).Value.String()) == "" {
			return config{}, usagef("%s: --%s must not be empty", cfg.command, name)
		}
	}
	if cfg.command == "run" && !set["receipt-key"] {
		cfg.receiptEnv = getenv(envReceiptKey)
	}
	if set["after"] && cfg.command == "list" {
		c, err := decodeCursor(after)
		if err != nil {
			return config{}, usagef("list: --after: %v", err)
		}
		cfg.after = c
	}
	if err := cfg.boundedFlags(set, grace); err != nil {
		return config{}, err
	}

	if err := cfg.storeFlags(set, objectsDir, getenv); err != nil {
		return config{}, err
	}
	if err := cfg.runFlags(set); err != nil {
		return config{}, err
	}
	if cfg.storeEmpty && cfg.objects != "" {
		return config{}, usagef("inventory: --store-empty asserts there is no object store to list, but one is given; drop --store-empty to list it")
	}

	if cfg.databaseURL == "" {
		cfg.databaseURL = getenv(envDatabaseURL)
	}
	return cfg, nil
}

// receiptSubcommand takes receipt's subcommand (and show's request id) off
// positional and returns what is left.
func (cfg *config) receiptSubcommand(positional []string) ([]string, error) {
	if len(positional) == 0 || !slices.Contains(receiptCommands, positional[0]) {
		return nil, usagef("receipt needs a subcommand: show, export, verify, head or rotate")
	}
	cfg.command, positional = "receipt "+positional[0], positional[1:]
	if cfg.command != "receipt show" {
		return positional, nil
	}
	if len(positional) != 1 {
		return nil, usagef("receipt show needs one request id")
	}
	id, err := uuid.Parse(positional[0])
	if err != nil {
		return nil, usagef("receipt show: %q is not a request uuid", positional[0])
	}
	cfg.requestID = id
	return nil, nil
}

// boundedFlags checks approve's --grace and leases' --reap.
func (cfg *config) boundedFlags(set map[string]bool, grace time.Duration) error {
	if set["grace"] {
		if grace < 0 || grace > lifecycle.MaxGracePeriod {
			return usagef("approve: --grace must be between 0 and %s, got %s", lifecycle.MaxGracePeriod, grace)
		}
		cfg.grace = &grace
	}
	if set["reap"] && (cfg.reap < 1 || cfg.reap > lifecycle.MaxServingLeaseReapBatch) {
		return usagef("leases: --reap must be between 1 and %d, got %d", lifecycle.MaxServingLeaseReapBatch, cfg.reap)
	}
	return nil
}

// runFlags checks run's --owner, --lease and --chunk-size.
func (cfg *config) runFlags(set map[string]bool) error {
	if set["owner"] {
		cfg.owner = strings.TrimSpace(cfg.owner)
		if cfg.owner == "" {
			return usagef("run: --owner must not be empty")
		}
	}
	if set["lease"] && cfg.lease <= 0 {
		return usagef("run: --lease must be positive, got %s", cfg.lease)
	}
	if set["chunk-size"] && (cfg.chunkSize < 1 || cfg.chunkSize > lifecycle.MaxManifestChunkKeys) {
		return usagef("run: --chunk-size must be between 1 and %d, got %d", lifecycle.MaxManifestChunkKeys, cfg.chunkSize)
	}
	return nil
}

// exportFlags checks receipt export's --after (a sequence, not a list
// cursor) and --limit (0, the default, means every receipt after --after).
func (cfg *config) exportFlags(set map[string]bool, after string) error {
	if !set["limit"] {
		cfg.limit = 0
	} else if cfg.limit < 1 {
		return usagef("receipt export: --limit must be at least 1, got %d", cfg.limit)
	}
	if set["after"] {
		n, err := strconv.ParseInt(after, 10, 64)
		if err != nil || n < 0 {
			return usagef("receipt export: --after must be a receipt sequence (0 or more), got %q", after)
		}
		cfg.afterSequence = n
	}
	return nil
}

// verifyFlags checks receipt verify's start: --from-sequence and
// --previous-hash come together, a sequence from 2 and 64 lowercase hex
// digits.
func (cfg *config) verifyFlags(set map[string]bool) error {
	if set["from-sequence"] != set["previous-hash"] {
		return usagef("receipt verify: --from-sequence and --previous-hash go together: a range after the chain's first receipt needs both its first sequence and that receipt's previous_hash")
	}
	if !set["from-sequence"] {
		return nil
	}
	if cfg.fromSequence < 2 {
		return usagef("receipt verify: --from-sequence must be 2 or more (without it, verification starts at the chain's first receipt), got %d", cfg.fromSequence)
	}
	if len(cfg.previousHash) != 64 || strings.Trim(cfg.previousHash, "0123456789abcdef") != "" {
		return usagef("receipt verify: --previous-hash must be 64 lowercase hex digits, got %q", cfg.previousHash)
	}
	return nil
}

// fromEnv fills *value from the environment variable env when the command
// takes flag but it was not given.
func (cfg *config) fromEnv(set map[string]bool, flag string, value *string, env string, getenv func(string) string) {
	if !set[flag] && slices.Contains(commandFlags[cfg.command].accepted, flag) {
		*value = getenv(env)
	}
}

// storeFlags checks the store, metrics and log settings of run and
// inventory, each from its flag or else its environment variable.
// --objects-dir DIR is --objects file://ABSOLUTE-DIR.
func (cfg *config) storeFlags(set map[string]bool, objectsDir string, getenv func(string) string) error {
	if set["objects-dir"] {
		if set["objects"] {
			return usagef("%s: give --objects or --objects-dir, not both", cfg.command)
		}
		if strings.TrimSpace(objectsDir) == "" {
			return usagef("%s: --objects-dir must not be empty", cfg.command)
		}
		abs, err := filepath.Abs(objectsDir)
		if err != nil {
			return usagef("%s: --objects-dir: %v", cfg.command, err)
		}
		cfg.objects = (&url.URL{Scheme: storeurl.SchemeFile, Path: abs}).String()
	}
	if !set["objects-dir"] {
		cfg.fromEnv(set, "objects", &cfg.objects, envObjects, getenv)
	}
	cfg.fromEnv(set, "cache", &cfg.cache, envCache, getenv)
	cfg.fromEnv(set, "metrics-addr", &cfg.metricsAddr, envMetricsAddr, getenv)
	cfg.fromEnv(set, "log-level", &cfg.logLevel, envLogLevel, getenv)
	cfg.fromEnv(set, "log-format", &cfg.logFormat, envLogFormat, getenv)

	if cfg.objects != "" || set["objects"] {
		if _, err := storeurl.ParseObjects(cfg.objects); err != nil {
			return usagef("%s: --objects: %v", cfg.command, err)
		}
	}
	if cfg.cache != "" || set["cache"] {
		if _, err := storeurl.ParseCache(cfg.cache); err != nil {
			return usagef("%s: --cache: %v", cfg.command, err)
		}
	}
	if cfg.command == "run" {
		if cfg.objects == "" {
			return usagef("run needs --objects URL (s3://BUCKET/ROOT/?…, file:///DIR; or --objects-dir DIR, or $%s)", envObjects)
		}
		if cfg.cache == "" {
			return usagef("run needs --cache URL (redis://HOST:PORT/DB?pattern=…, or memory: for a service without a cache; or $%s)", envCache)
		}
	}
	if cfg.metricsAddr != "" || set["metrics-addr"] {
		if _, _, err := net.SplitHostPort(cfg.metricsAddr); err != nil {
			return usagef("run: --metrics-addr must be HOST:PORT (e.g. :9464), got %q", cfg.metricsAddr)
		}
	}
	if cfg.logLevel != "" || set["log-level"] {
		level := strings.ToLower(cfg.logLevel)
		if !slices.Contains([]string{"debug", "info", "warn", "error"}, level) {
			return usagef("run: --log-level must be debug, info, warn or error, got %q", cfg.logLevel)
		}
		cfg.logLevel = level
	}
	if cfg.logFormat != "" || set["log-format"] {
		format := strings.ToLower(cfg.logFormat)
		if !slices.Contains([]string{"auto", "json", "text"}, format) {
			return usagef("run: --log-format must be auto, json or text, got %q", cfg.logFormat)
		}
		cfg.logFormat = format
	}
	return nil
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
