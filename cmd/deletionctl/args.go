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
	"unicode"

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
	niceRatio   float64       // run: the purge's PurgeOptions.NiceRatio; 0 means no sleep
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
	fs.Float64Var(&cfg.niceRatio, "nice-ratio", 0, "")
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
	if positional, err = cfg.setCommand(command, positional); err != nil {
		return config{}, err
	}
	spec, _ := spec(cfg.command)
	switch {
	case spec.args != "" && len(positional) > 1:
		return config{}, usagef("%s takes one request id, got %q", cfg.command, positional)
	case spec.args == "" && len(positional) > 0:
		return config{}, usagef("%s takes no arguments, got %q", cfg.command, positional[0])
	}

	set := map[string]bool{}
	var flagErr error
	fs.Visit(func(f *flag.Flag) {
		set[f.Name] = true
		if !spec.accepts(f.Name) && flagErr == nil {
			flagErr = usagef("%s does not take --%s", cfg.command, f.Name)
		}
	})
	if flagErr != nil {
		return config{}, flagErr
	}
	if err := requireGiven(spec, set, fs); err != nil {
		return config{}, err
	}

	if err := cfg.requestArg(set, request, positional); err != nil {
		return config{}, err
	}
	cfg.prefixes = prefixes
	if slices.Contains(cfg.prefixes, "") {
		return config{}, usagef("inventory: --prefix must not be empty (it would name the whole bucket)")
	}
	if set["stage"] {
		s, err := lifecycle.ParseStage(stage)
		if err != nil {
			return config{}, usagef("list: --stage: unknown stage %q; the stages are %s", stage, stageNames())
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
	if cfg.command == "run" && cfg.json {
		if set["log-format"] && !strings.EqualFold(cfg.logFormat, "json") {
			return config{}, usagef("run: --json writes the log as JSON lines, but --log-format is %q; give one of them", cfg.logFormat)
		}
		cfg.logFormat = "json"
	}
	if cfg.storeEmpty && cfg.objects != "" {
		return config{}, usagef("inventory: --store-empty asserts there is no object store to list, but one is given; drop --store-empty to list it")
	}

	if cfg.databaseURL == "" {
		cfg.databaseURL = getenv(envDatabaseURL)
	}
	return cfg, nil
}

// requireGiven refuses a command line without one of the command's
// required flags, or with a required --host, --by or --reason that is
// blank.
func requireGiven(spec commandSpec, set map[string]bool, fs *flag.FlagSet) error {
	for _, name := range spec.required {
		if !set[name] {
			return usagef("%s needs --%s", spec.name, name)
		}
	}
	for _, name := range []string{"host", "by", "reason"} {
		if set[name] && slices.Contains(spec.required, name) && strings.TrimSpace(fs.Lookup(name).Value.String()) == "" {
			return usagef("%s: --%s must not be empty", spec.name, name)
		}
	}
	return nil
}

// setCommand sets cfg.command to a known command, taking receipt's
// subcommand off positional, and returns what is left. A two-word command
// is two arguments: "receipt show" as one is no command.
func (cfg *config) setCommand(command string, positional []string) ([]string, error) {
	cfg.command = command
	if command == "receipt" {
		if len(positional) == 0 || !slices.Contains(receiptCommands, positional[0]) {
			return nil, usagef("receipt needs a subcommand: show, export, verify, head or rotate")
		}
		cfg.command = "receipt " + positional[0]
		positional = positional[1:]
	}
	if _, known := spec(cfg.command); !known || strings.ContainsFunc(command, unicode.IsSpace) {
		return nil, usagef("unknown command %q; the commands are %s", command, commandNames())
	}
	return positional, nil
}

// requestArg sets cfg.requestID from --request or, for a command that takes
// one (plan, receipt show), from its one positional argument: receipt show
// needs one of them, plan one of them or --host.
func (cfg *config) requestArg(set map[string]bool, flagValue string, positional []string) error {
	raw, from := "", ""
	switch {
	case len(positional) == 1 && set["request"]:
		return usagef("%s: give the request once, as REQUEST or as --request ID", cfg.command)
	case len(positional) == 1:
		raw, from = positional[0], "REQUEST"
	case set["request"]:
		raw, from = flagValue, "--request"
	}
	if from != "" {
		id, err := uuid.Parse(raw)
		if err != nil {
			return usagef("%s: %s must be a request uuid, got %q", cfg.command, from, raw)
		}
		cfg.requestID = id
	}
	switch {
	case cfg.command == "receipt show" && cfg.requestID == uuid.Nil:
		return usagef("receipt show needs a request: REQUEST or --request ID")
	case cfg.command == "plan" && set["host"] == (cfg.requestID != uuid.Nil):
		return usagef("plan needs a request (REQUEST or --request ID) or --host HOST|ID, not both")
	case cfg.command == "plan" && set["host"] && strings.TrimSpace(cfg.host) == "":
		return usagef("plan: --host must not be empty")
	}
	return nil
}

// commandNames lists the commands for a usage error.
func commandNames() string {
	names := make([]string, 0, len(commands))
	for _, c := range commands {
		if !strings.HasPrefix(c.name, "receipt ") {
			names = append(names, c.name)
		}
	}
	return strings.Join(append(names, "receipt"), ", ")
}

// stageNames lists the lifecycle's stages for a usage error.
func stageNames() string {
	names := make([]string, 0, len(lifecycle.Stages()))
	for _, s := range lifecycle.Stages() {
		names = append(names, string(s))
	}
	return strings.Join(names, ", ")
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

// runFlags checks run's --owner, --lease, --chunk-size and --nice-ratio.
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
	if set["nice-ratio"] && lifecycle.CheckNiceRatio(cfg.niceRatio) != nil {
		return usagef("run: --nice-ratio must be a finite number, 0 or more (0: no sleep between purge batches), got %g", cfg.niceRatio)
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
	if c, _ := spec(cfg.command); !set[flag] && c.accepts(flag) {
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
