package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/tombstoneworks/communitydeletion/internal/cliflag"
	"github.com/tombstoneworks/communitydeletion/internal/exitcode"
)

// flagDoc is one flag of a command as its help shows it.
type flagDoc struct {
	name string // without the dashes
	arg  string // its value's name ("ID"), or "" for a boolean flag
	help string
}

// exitDoc is one exit code of a command and when the command exits with it.
type exitDoc struct {
	code int
	when string
}

// commandSpec is one command: how it is called, what it does, its flags, an
// example, its exit codes and what its --json prints. The usage, each
// command's --help, the check of which flags a command takes, and the tests
// that walk every command all read the one table of them, commands.
type commandSpec struct {
	name     string    // "submit", "receipt show"
	args     string    // positional arguments in the synopsis, e.g. "[REQUEST]"
	summary  string    // one line, for the list of commands
	about    string    // a paragraph for --help
	flags    []flagDoc // besides --json and --database-url, which every command takes
	required []string  // flags that must be given
	example  string    // one command line, after "deletionctl "
	exits    []exitDoc // besides 1 and 2, which every command has
	json     string    // what --json prints, in a few words
	jsonKeys []string  // the top-level keys of that JSON (for run: of every record)
	offline  bool      // never connects (no --database-url)
}

// Flags several commands share.
var (
	flagRequest    = flagDoc{"request", "ID", "the deletion request's id"}
	flagBy         = flagDoc{"by", "NAME", "who you are, as the audit records it"}
	flagObjects    = flagDoc{"objects", "URL", "the object store: s3://BUCKET/ROOT/?… or file:///DIR (default $DELETIONCTL_OBJECTS)"}
	flagObjectsDir = flagDoc{"objects-dir", "DIR", "the object store is the directory DIR (file:///DIR)"}
)

// Exit codes several commands share.
var (
	exitRequestNotFound = exitDoc{exitNotFound, "the request does not exist"}
	exitTenantNotFound  = exitDoc{exitNotFound, "no community has that id or host"}
	exitBadValue        = exitDoc{exitInvalidInput, "a value the lifecycle rejects (an empty or over-long name or reason)"}
)

// requestJSON is what the commands that change one request print with --json.
const requestJSON = "the request as it now stands"

// commands is every command of deletionctl, in the order the usage lists them.
var commands = []commandSpec{
	{
		name: "submit", summary: "request the deletion of a community",
		about: "Requests the deletion of the active community HOST: its host, or its id for a tenant of a declared tenant " +
			"table (which has no host). Prints \"<request id> submitted\". Submitting again while your own request is " +
			"still submitted, with the same reason, prints that request again; with another reason it is refused, " +
			"since the request keeps the reason it was submitted with (abort it and submit again to change it).",
		flags:    []flagDoc{{"host", "HOST|ID", "the community's host, or a tenant's id"}, flagBy, {"reason", "TEXT", "why, for the audit and the receipt"}},
		required: []string{"host", "by"},
		example:  `submit --host acme.example --by alice --reason "contract ended"`,
		exits: []exitDoc{{exitOK, "submitted (or the same submission again)"},
			{exitRefused, "refused: the community is protected, not active, or already has an open request (also yours, with another reason)"},
			exitTenantNotFound, exitBadValue},
		json: requestJSON, jsonKeys: []string{"request"},
	},
	{
		name: "plan", args: "[REQUEST]", summary: "show what a deletion will remove, before anything is fenced",
		about: "Shows what deleting the community of REQUEST (or --request ID, or the community --host names) removes, " +
			"before anything is fenced: every registered table in purge order with its rows and purge action, every object " +
			"prefix with its objects (counted in the store --objects names, else \"not counted\"), the object keys its rows " +
			"list, every cache pattern and per-tenant sequence, every excluded table with its reason, the catalog drift that would block it, and the grace period and protection. " +
			"Figures of an inventoried request are its frozen inventory's, beside what the tables hold now. It changes nothing.",
		flags: []flagDoc{flagRequest, {"host", "HOST|ID", "plan the deletion of this community instead (with or without a request)"},
			flagObjects, flagObjectsDir},
		example: "plan 2f1b6c9e-8c1a-4f57-9d7e-0a1b2c3d4e5f --objects-dir /srv/objects",
		exits: []exitDoc{{exitOK, "the plan is printed (even when the deletion would be refused or blocked: the plan says why)"},
			{exitNotFound, "the request or community does not exist"}},
		json:     "the plan: its request, community, claim, grace, protection and one section per store",
		jsonKeys: []string{"request", "community", "source", "claim", "grace_until", "protection", "tables", "objects", "key_sources", "cache", "sequences", "excluded", "drift", "totals"},
	},
	{
		name: "inventory", summary: "freeze the inventory a deletion is approved for",
		about: "Counts the request's rows in every registered table, lists every object prefix of the declared storage " +
			"layout (expanded for its tenant's key) in the object store and reads the keys its rows list in each key source, " +
			"and freezes them as the inventory an approval binds. Prints \"<request id> inventoried <digest>\". With a prefix " +
			"declared and no object store it refuses, unless --store-empty asserts that the store holds nothing under the " +
			"prefixes. An inventoried request not yet approved may be inventoried again.",
		flags: []flagDoc{flagRequest, {"prefix", "PREFIX", "a check: each must be a declared prefix, and together all of them (repeatable)"},
			flagObjects, flagObjectsDir, {"store-empty", "", "assert that the store holds nothing under the declared prefixes"}},
		required: []string{"request"},
		example:  "inventory --request 2f1b6c9e-8c1a-4f57-9d7e-0a1b2c3d4e5f --objects s3://media/tenants/",
		exits: []exitDoc{{exitOK, "frozen"},
			{exitRefused, "refused: no storage layout, no store, a --prefix that is not the layout's, or a request past inventoried"},
			exitRequestNotFound},
		json: requestJSON, jsonKeys: []string{"request"},
	},
	{
		name: "approve", summary: "approve a frozen inventory (a second operator)",
		about: "Approves the request's frozen inventory. NAME must not be the submitter, and the database requires another " +
			"login than the submitter's. --grace holds the approved request that long before anything is quiesced or fenced; " +
			"abort undoes it until then with no effect on the community. Prints \"<id> approved <digest> [grace-until T]\".",
		flags: []flagDoc{flagRequest, {"by", "NAME", "who approves: not the submitter"}, {"note", "TEXT", "a note kept with the approval"},
			{"grace", "D", "the grace period, 0 to 720h (default: the deployment's default_grace_period, zero unless set)"}},
		required: []string{"request", "by"},
		example:  "approve --request 2f1b6c9e-8c1a-4f57-9d7e-0a1b2c3d4e5f --by bob --grace 24h",
		exits: []exitDoc{{exitOK, "approved"},
			{exitRefused, "refused: the submitter (or the submitter's login) approving, or a request that is not inventoried or is blocked"},
			exitRequestNotFound, {exitInvalidInput, "a value the lifecycle rejects (an empty name, a grace period out of range)"}},
		json: requestJSON, jsonKeys: []string{"request"},
	},
	{
		name: "protect", summary: "protect a community from deletion",
		about: "Marks the community deletion-protected: submit is refused for it until a second operator clears the " +
			"protection. Refused while the community has an open request. Prints \"<community id> protected\".",
		flags:    []flagDoc{{"host", "HOST|ID", "the community's host or id"}, flagBy, {"reason", "TEXT", "why (required)"}},
		required: []string{"host", "by", "reason"},
		example:  `protect --host acme.example --by alice --reason "legal hold"`,
		exits:    []exitDoc{{exitOK, "protected"}, {exitRefused, "refused: already protected, or a request is open"}, exitTenantNotFound, exitBadValue},
		json:     "the community's protection", jsonKeys: protectionKeys,
	},
	{
		name: "unprotect", summary: "ask to clear a protection, or (--approve) clear it",
		about: "Asks to clear the community's deletion protection; a second operator (another name and login) then runs " +
			"it with --approve to clear it. Prints \"<community id> protected (clear requested …)\" or \"… unprotected\".",
		flags: []flagDoc{{"host", "HOST|ID", "the community's host or id"}, flagBy, {"reason", "TEXT", "why (required)"},
			{"approve", "", "approve the pending clear request, as the second operator"}},
		required: []string{"host", "by", "reason"},
		example:  `unprotect --host acme.example --by bob --reason "hold lifted" --approve`,
		exits: []exitDoc{{exitOK, "requested, or cleared"},
			{exitRefused, "refused: not protected, no clear requested, or the requester approving"}, exitTenantNotFound, exitBadValue},
		json: "the community's protection", jsonKeys: protectionKeys,
	},
	{
		name: "protection", summary: "show a community's protection and its history",
		about:    "Shows whether the community is protected, and its protection history, newest first.",
		flags:    []flagDoc{{"host", "HOST|ID", "the community's host or id"}},
		required: []string{"host"},
		example:  "protection --host acme.example",
		exits:    []exitDoc{{exitOK, "shown"}, exitTenantNotFound},
		json:     "the community's protection", jsonKeys: protectionKeys,
	},
	{
		name: "list", summary: "list requests, newest first, and why each waits",
		about: "Lists requests newest first, a page of at most N, with each one's claim: whether the executor can take it " +
			"now, and if not why (in grace until T, blocked, awaiting approval, held by an executor, retrying, catalog " +
			"drift). \"next: CURSOR\" names the following page for --after.",
		flags: []flagDoc{{"stage", "STAGE", "only requests at STAGE"}, {"blocked", "", "only blocked requests (--blocked=false: only unblocked)"},
			{"limit", "N", "the page size, 1 to 1000 (default 50)"}, {"after", "CURSOR", "the page after a previous page's next"}},
		example: "list --stage approved --limit 20",
		exits:   []exitDoc{{exitOK, "listed"}},
		json:    "a page of request objects and the next page's cursor", jsonKeys: []string{"requests", "next"},
	},
	{
		name: "inspect", summary: "show a request: who, why it waits, progress, receipt",
		about: "Shows a request: who submitted and approved it, its claim (why it waits, and what to do), its grace period " +
			"and protection, its progress per destructive step with an estimate of the time left when one can be made " +
			"honestly, its receipt once it exists, and its checkpoints.",
		flags:    []flagDoc{flagRequest},
		required: []string{"request"},
		example:  "inspect --request 2f1b6c9e-8c1a-4f57-9d7e-0a1b2c3d4e5f",
		exits:    []exitDoc{{exitOK, "shown"}, exitRequestNotFound},
		json:     "the request, its approval, claim, protection, receipt, progress and checkpoints",
		jsonKeys: []string{"request", "approval", "protection", "receipt", "progress", "checkpoints"},
	},
	{
		name: "abort", summary: "cancel a request before the purge",
		about: "Cancels a request that is submitted, inventoried, approved or fenced; a fenced community is restored to " +
			"active. Past the fence a deletion runs to its end. Prints \"<id> aborted\".",
		flags:    []flagDoc{flagRequest, flagBy, {"reason", "TEXT", "why (required)"}},
		required: []string{"request", "by", "reason"},
		example:  `abort --request 2f1b6c9e-8c1a-4f57-9d7e-0a1b2c3d4e5f --by carol --reason "customer renewed"`,
		exits:    []exitDoc{{exitOK, "aborted"}, {exitRefused, "refused: the request is past fenced, or aborted already"}, exitRequestNotFound, exitBadValue},
		json:     requestJSON, jsonKeys: []string{"request"},
	},
	{
		name: "unblock", summary: "clear a durable block once its cause is fixed",
		about: "Clears a request's durable block (8 failures in a row at one stage, a refusal, or catalog drift) after its " +
			"cause is remedied: the request is due again at once. Prints \"<id> <stage>\".",
		flags:    []flagDoc{flagRequest, flagBy, {"reason", "TEXT", "what was remedied (required)"}},
		required: []string{"request", "by", "reason"},
		example:  `unblock --request 2f1b6c9e-8c1a-4f57-9d7e-0a1b2c3d4e5f --by carol --reason "dropped the stray trigger"`,
		exits:    []exitDoc{{exitOK, "unblocked"}, {exitRefused, "refused: not blocked, complete, or still leased"}, exitRequestNotFound, exitBadValue},
		json:     requestJSON, jsonKeys: []string{"request"},
	},
	{
		name: "leases", summary: "show serving write leases, or reap expired ones",
		about: "Shows how many serving write leases are active and expired; with --reap N it first deletes up to N " +
			"expired leases.",
		flags:   []flagDoc{{"reap", "N", "delete up to N (1 to 10000) expired leases first"}},
		example: "leases --reap 1000",
		exits:   []exitDoc{{exitOK, "shown (and reaped)"}},
		json:    "the lease counts, and how many were reaped", jsonKeys: []string{"reaped", "active", "expired", "dead_tuples"},
	},
	{
		name: "health", summary: "report prepared transactions holding locks, and catalog drift",
		about: "Prints what community_deletion_health() (prepared transactions holding an advisory lock) and " +
			"community_deletion_catalog_drift() report, and the excluded tables.",
		example: "health --json",
		exits:   []exitDoc{{exitOK, "healthy"}, {exitRefused, "either report has a row (listed on stdout)"}},
		json:    "the findings", jsonKeys: []string{"healthy", "findings", "drift", "excluded"},
	},
	{
		name: "check", summary: "the adoption checks for a service's CI",
		about: "Runs the adoption checks, as the operator, after a service's migrations: catalog drift, the purge order, " +
			"and the storage layout. Prints \"ok: …\" per check passed and \"problem: …\" per problem, saying what to do.",
		example: "check",
		exits:   []exitDoc{{exitOK, "every check passed"}, {exitRefused, "a check found a problem (listed on stdout)"}},
		json:    "every check's result", jsonKeys: []string{"ok", "checks", "problems"},
	},
	{
		name: "run", summary: "run the executor: fence, delete, purge, verify, sign",
		about: "Runs the executor over the stores the URLs name (docs/executor.md). With --once it processes one " +
			"request (--request ID, or the next claimable) and exits; else it runs until SIGINT or SIGTERM. It " +
			"refuses to start without the registered receipt key, or with memory: where cache templates are declared. " +
			"It logs to stdout (JSON lines off a terminal); with --once its last record says how it " +
			"ended and, for a request not claimed, why and what to do.",
		flags: []flagDoc{flagRequest, {"once", "", "process one request and exit"}, flagObjects, flagObjectsDir,
			{"cache", "URL", "the cache: redis://HOST:PORT/DB?pattern=…, or memory: for none (default $DELETIONCTL_CACHE)"},
			{"owner", "NAME", "the executor's identity (default deletionctl-<hostname>-<pid>)"},
			{"lease", "D", "the claim's length (default 60s)"}, {"chunk-size", "N", "keys per manifest chunk, 1 to 10000 (default 1000)"},
			{"nice-ratio", "R", "after each purge batch, sleep R times its duration"},
			{"metrics-addr", "HOST:PORT", "serve /metrics and /healthz there"}, {"log-level", "LEVEL", "debug, info (default), warn or error"},
			{"log-format", "FORMAT", "auto (default), json or text"},
			{"receipt-key", "FILE", "sign receipts with this Ed25519 key, a file only its owner may read (default $COMMUNITYDELETION_RECEIPT_KEY, the key itself)"}},
		example: "run --once --request 2f1b6c9e-8c1a-4f57-9d7e-0a1b2c3d4e5f --objects s3://media/tenants/ --cache memory:",
		exits: []exitDoc{{exitOK, "completed, nothing was claimable (no --request), the request is complete already, or stopped by a signal"},
			{exitRefused, "refused to start (receipt key, cache), or --once blocked the request, scheduled a retry or could not claim --request ID (stderr says why)"},
			exitRequestNotFound},
		json:     "JSON lines, one log record each (docs/executor.md, \"Logs\")",
		jsonKeys: []string{"time", "level", "msg", "executor"},
	},
	{
		name: "receipt show", args: "[REQUEST]", summary: "print a completed deletion's receipt",
		about: "Prints the receipt of a completed request (REQUEST or --request ID): its body as indented JSON, its " +
			"signature (or \"(unsigned)\") and its hash.",
		flags:    []flagDoc{flagRequest},
		example:  "receipt show --request 2f1b6c9e-8c1a-4f57-9d7e-0a1b2c3d4e5f",
		exits:    []exitDoc{{exitOK, "shown"}, {exitNotFound, "the request has no receipt: it is not complete, or does not exist"}},
		json:     "the receipt's sequence, request, signer, hash and signature, and its body",
		jsonKeys: []string{"sequence", "request_id", "signer", "hash", "signature", "body"},
	},
	{
		name: "receipt export", summary: "write receipts into a directory, one file each",
		about: "Writes the stored receipts after sequence N (default 0: from the first), at most --limit of them (default " +
			"all), into DIR, one file each (docs/receipts.md). A file already there with the same bytes is kept; one with " +
			"other bytes is refused.",
		flags: []flagDoc{{"dir", "DIR", "the export directory"}, {"after", "N", "export the receipts after sequence N"},
			{"limit", "N", "at most N receipts"}},
		required: []string{"dir"},
		example:  "receipt export --dir receipts/",
		exits:    []exitDoc{{exitOK, "exported (or nothing to export)"}},
		json:     "how many receipts were written, their range and the directory", jsonKeys: []string{"exported", "first", "last", "dir"},
	},
	{
		name: "receipt verify", summary: "verify exported receipts offline",
		about: "Verifies the export in DIR offline, never connecting to a database, from the chain's first receipt (an " +
			"export without it fails) unless --from-sequence and --previous-hash give the start of a later range: every " +
			"signature with the public key of the first signed entry and then the key each rotation names, the chain and " +
			"each receipt's consistency, and with --expect-head that the export reaches that head unchanged (without it, " +
			"receipts after the last one exported are not proven absent, and the summary says so). Prints a line per entry " +
			"and a summary, or exits 3 naming the first failure. Unsigned receipts fail unless --allow-unsigned, and always " +
			"after a signed entry unless a signed rotation to unsigned precedes them.",
		flags: []flagDoc{{"dir", "DIR", "the export directory"}, {"public-key", "FILE", "the first signer's public key (PEM PKIX or base64)"},
			{"allow-unsigned", "", "accept unsigned receipts (never after a signed entry without a rotation to unsigned)"},
			{"expect-head", "N:HASH|FILE", "the chain's head, as receipt head prints it or the file receipt head --json wrote"},
			{"from-sequence", "N", "start at receipt N (2 or more), with --previous-hash"},
			{"previous-hash", "HEX", "receipt N's previous_hash: the last hash of the range verified before"}},
		required: []string{"dir", "public-key"},
		example:  "receipt verify --dir receipts/ --public-key receipt.pub --expect-head head.json",
		exits: []exitDoc{{exitOK, "every entry verifies (to the expected head, when given)"},
			{exitRefused, "an entry fails, or the export does not reach the expected head (stderr names it and why)"}},
		json: "every entry verified, the counts, the keys, where the range starts and whether a head was checked",
		jsonKeys: []string{"receipts", "verified", "rotations", "first", "last", "signed", "unsigned", "key_id", "keys", "last_hash",
			"from_sequence", "previous_hash", "head_checked", "head"},
		offline: true,
	},
	{
		name: "receipt head", summary: "print the head of the receipt chain, to keep outside the database",
		about: "Prints the head of the receipt chain: its newest entry's sequence, hash, time and signer, and the value " +
			"N:HASH that receipt verify --expect-head takes. --json prints the head file, which carries the signed newest " +
			"entry; keep it outside the database, so that an export missing its last receipts fails verification.",
		example:  "receipt head --json",
		exits:    []exitDoc{{exitOK, "shown"}, {exitNotFound, "the chain is empty: no receipt was written yet"}},
		json:     "the head file (the format receipt verify --expect-head reads back exactly)",
		jsonKeys: []string{"format", "hash", "receipt", "sequence", "signature", "signer", "time"},
	},
	{
		name: "receipt rotate", summary: "hand the receipt chain on to a newly registered key",
		about: "As the executor's login: hands the receipt chain on from the key it is signed with (FILE, the old private " +
			"key) to what the schema's owner registered next in community_deletion_receipt_keys (a new key, or unsigned), " +
			"with a key rotation entry signed by the old key (docs/receipts.md, \"Rotating a key\"). Prints the rotation's " +
			"sequence, the keys and its hash.",
		flags:    []flagDoc{{"old-key", "FILE", "the key the chain is signed with now (PEM PKCS#8 Ed25519 or its base64 seed; chmod 600)"}},
		required: []string{"old-key"},
		example:  "receipt rotate --old-key old.key",
		exits: []exitDoc{{exitOK, "rotated"},
			{exitRefused, "refused: FILE is not the chain's key, or nothing new is registered"}},
		json:     "the rotation entry written: its sequence, the old and the new signer, and its hash",
		jsonKeys: []string{"sequence", "signer", "new_signer", "hash"},
	},
}

// protectionKeys are the top-level keys of the protection commands' JSON.
var protectionKeys = []string{"community_id", "protected", "clear_pending", "events"}

// spec returns the command named name.
func spec(name string) (commandSpec, bool) {
	i := slices.IndexFunc(commands, func(c commandSpec) bool { return c.name == name })
	if i < 0 {
		return commandSpec{}, false
	}
	return commands[i], true
}

// accepts reports whether the command takes flag name. Every command takes
// --database-url, even one that never connects (receipt verify), so that a
// shell's global flags do not break it.
func (c commandSpec) accepts(name string) bool {
	if name == "json" || name == "database-url" {
		return true
	}
	return slices.ContainsFunc(c.flags, func(f flagDoc) bool { return f.name == name })
}

// synopsis is the command's line of the usage: its name, arguments and flags.
func (c commandSpec) synopsis() string {
	parts := []string{c.name}
	if c.args != "" {
		parts = append(parts, c.args)
	}
	for _, f := range c.flags {
		s := "--" + f.name
		if f.arg != "" {
			s += " " + f.arg
		}
		if !slices.Contains(c.required, f.name) {
			s = "[" + s + "]"
		}
		parts = append(parts, s)
	}
	return strings.Join(append(parts, "[--json]"), " ")
}

// exitCodes are the command's exit codes in order, 1 and 2 included.
func (c commandSpec) exitCodes() []exitDoc {
	exits := append(slices.Clone(c.exits),
		exitDoc{exitFailure, "any other failure (connection, SQL, I/O, interrupted)"},
		exitDoc{exitUsage, "a malformed command line"})
	slices.SortStableFunc(exits, func(a, b exitDoc) int { return a.code - b.code })
	return exits
}

// help is the command's --help: its synopsis, what it does, its flags, one
// example and its exit codes.
func (c commandSpec) help() string {
	var b strings.Builder
	fmt.Fprintf(&b, "usage: deletionctl %s\n\n%s\n\nFlags:\n", c.synopsis(), wrap(c.about, 78, ""))
	flags := append(slices.Clone(c.flags), flagDoc{"json", "", "print " + c.json + ", as JSON (docs/deletionctl.md, \"JSON output\")"})
	if !c.offline {
		flags = append(flags, flagDoc{"database-url", "URL", "the database (default $DATABASE_URL; else the PG* variables)"})
	}
	width := 0
	for _, f := range flags {
		width = max(width, len(flagLabel(f)))
	}
	for _, f := range flags {
		label := flagLabel(f)
		fmt.Fprintf(&b, "  %s%s  %s\n", label, strings.Repeat(" ", width-len(label)), wrap(f.help, 76-width, strings.Repeat(" ", width+4)))
	}
	fmt.Fprintf(&b, "\nExample:\n  deletionctl %s\n\nExit codes:\n", c.example)
	for _, e := range c.exitCodes() {
		fmt.Fprintf(&b, "  %d  %s\n", e.code, wrap(e.when, 74, "     "))
	}
	return b.String()
}

// flagLabel is "--name ARG" or "--name".
func flagLabel(f flagDoc) string {
	if f.arg == "" {
		return "--" + f.name
	}
	return "--" + f.name + " " + f.arg
}

// wrap folds s into lines of at most width, the lines after the first
// indented by indent.
func wrap(s string, width int, indent string) string {
	var lines []string
	line := ""
	for w := range strings.FieldsSeq(s) {
		if line != "" && len(line)+1+len(w) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	lines = append(lines, line)
	return strings.Join(lines, "\n"+indent)
}

// receiptHelp is the help of receipt without a subcommand.
func receiptHelp() string {
	var b strings.Builder
	b.WriteString("usage: deletionctl receipt show|export|verify|head|rotate [flags]\n\nDeletion receipts (docs/receipts.md):\n")
	for _, c := range commands {
		if sub, ok := strings.CutPrefix(c.name, "receipt "); ok {
			fmt.Fprintf(&b, "  %-8s %s\n", sub, c.summary)
		}
	}
	b.WriteString("\nRun 'deletionctl receipt SUBCOMMAND --help' for its flags, an example and its exit codes.\n")
	return b.String()
}

// usage is the whole usage: every command in a line, the shared flags, the
// environment and the exit codes.
var usage = func() string {
	var b strings.Builder
	b.WriteString(`usage: deletionctl [--database-url URL] <command> [flags]

Operates the whole-community deletion lifecycle: plans, submits,
inventories, approves, lists, inspects, aborts and unblocks deletion
requests, runs the executor, and shows, exports and verifies receipts. A
refusal changes nothing and says in one line what was refused, why and
what to do.

Commands:
`)
	for _, c := range commands {
		fmt.Fprintf(&b, "  %-15s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(&b, `
Run 'deletionctl COMMAND --help' (or 'deletionctl help COMMAND') for a
command's flags, an example and its exit codes. Every command takes --json
(docs/deletionctl.md, "JSON output").

Global flag (before or after the command):
  --database-url URL   PostgreSQL URL or key=value string; default
                       $DATABASE_URL; if empty, pgx uses the PG* variables

Environment (a flag given wins):
  DATABASE_URL               --database-url
  DELETIONCTL_OBJECTS        --objects (run, inventory, plan)
  DELETIONCTL_CACHE          --cache (run)
  DELETIONCTL_METRICS_ADDR   --metrics-addr (run)
  DELETIONCTL_LOG_LEVEL      --log-level (run)
  DELETIONCTL_LOG_FORMAT     --log-format (run)
  COMMUNITYDELETION_RECEIPT_KEY
                             the receipt signing key itself (run), where
                             --receipt-key names a file

Exit codes (shared with cmd/migrate; README.md, "Exit codes"):
  %d success, %d failure, %d usage error, %d refused, %d not found, %d invalid input
`, exitcode.OK, exitcode.Failure, exitcode.Usage, exitcode.Refused, exitcode.NotFound, exitcode.InvalidInput)
	return b.String()
}()

// helpText is the help a command line that asked for help gets: the
// command's own when it names one, else the whole usage.
func helpText(err error) string {
	topic := cliflag.HelpTopic(err)
	switch {
	case len(topic) == 0:
		return usage
	case topic[0] == "receipt" && len(topic) == 1:
		return receiptHelp()
	case topic[0] == "receipt":
		if c, ok := spec("receipt " + topic[1]); ok {
			return c.help()
		}
		return receiptHelp()
	}
	if c, ok := spec(topic[0]); ok {
		return c.help()
	}
	return usage
}
