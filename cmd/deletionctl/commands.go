package main

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tombstoneworks/communitydeletion/executor"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
	"github.com/tombstoneworks/communitydeletion/receipt"
)

// execute connects to the database and runs cfg's command: run as the
// executor (lifecycle.Engine), every other command as an operator
// (lifecycle.Operator), each making its changes in one call, which is one
// transaction. The connection's login must be a member of the role.
func execute(ctx context.Context, cfg config, stdout io.Writer) error {
	if cfg.command == "receipt verify" {
		return receiptVerify(cfg, stdout)
	}
	var key ed25519.PrivateKey
	switch cfg.command {
	case "run":
		var err error
		if key, err = receiptKey(cfg); err != nil {
			return err
		}
	case "receipt rotate":
		var err error
		if key, err = receipt.LoadPrivateKey(cfg.oldKey); err != nil {
			return usagef("receipt rotate: --old-key: %v", err)
		}
	}
	poolCfg, err := pgxpool.ParseConfig(cfg.databaseURL)
	if err != nil {
		return usagef("--database-url: %v", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer pool.Close()
	if cfg.command == "run" {
		engine, err := lifecycle.NewEngine(ctx, pool, &lifecycle.Opts{ReceiptKey: key})
		if err != nil {
			return fmt.Errorf("run: %w", err)
		}
		return runExecutor(ctx, engine, cfg, stdout)
	}
	if cfg.command == "receipt rotate" {
		engine, err := lifecycle.NewEngine(ctx, pool, nil)
		if err != nil {
			return fmt.Errorf("receipt rotate: %w", err)
		}
		return receiptRotate(ctx, engine, key, stdout)
	}
	operator, err := lifecycle.NewOperator(ctx, pool, nil)
	if err != nil {
		return fmt.Errorf("%s: %w", cfg.command, err)
	}
	return dispatch(ctx, operator, cfg, stdout)
}

// dispatch runs cfg's operator command.
func dispatch(ctx context.Context, store *lifecycle.Operator, cfg config, stdout io.Writer) error {
	switch cfg.command {
	case "submit":
		return submit(ctx, store, cfg, stdout)
	case "inventory":
		return inventory(ctx, store, cfg, stdout)
	case "approve":
		r, err := store.ApproveWithParams(ctx, cfg.requestID, lifecycle.ApproveParams{
			ApprovedBy: cfg.by, Note: cfg.note, GracePeriod: cfg.grace,
		})
		if err != nil {
			return fmt.Errorf("approve of request %s by %q: %w", cfg.requestID, cfg.by, err)
		}
		fmt.Fprintf(stdout, "%s %s %s%s\n", r.ID, r.Stage, r.InventoryDigest, graceSuffix(r))
		return nil
	case "protect", "unprotect", "protection":
		return protection(ctx, store, cfg, stdout)
	case "list":
		return list(ctx, store, cfg, stdout)
	case "inspect":
		return inspect(ctx, store, cfg, stdout)
	case "abort":
		r, err := store.Abort(ctx, cfg.requestID, cfg.by, cfg.reason)
		if err != nil {
			return fmt.Errorf("abort of request %s by %q: %w", cfg.requestID, cfg.by, err)
		}
		fmt.Fprintf(stdout, "%s %s\n", r.ID, r.Stage)
		return nil
	case "unblock":
		r, err := store.Unblock(ctx, cfg.requestID, cfg.by, cfg.reason)
		if err != nil {
			return fmt.Errorf("unblock of request %s by %q: %w", cfg.requestID, cfg.by, err)
		}
		fmt.Fprintf(stdout, "%s %s\n", r.ID, r.Stage)
		return nil
	case "leases":
		return leases(ctx, store, cfg, stdout)
	case "receipt show":
		return receiptShow(ctx, store, cfg, stdout)
	case "receipt head":
		return receiptHead(ctx, store, cfg, stdout)
	case "receipt export":
		return receiptExport(ctx, store, cfg, stdout)
	case "health":
		return health(ctx, store, cfg, stdout)
	case "check":
		return check(ctx, store, cfg, stdout)
	}
	return usagef("unknown command %q", cfg.command)
}

func submit(ctx context.Context, store *lifecycle.Operator, cfg config, stdout io.Writer) error {
	r, err := store.Submit(ctx, cfg.host, cfg.by, cfg.reason)
	if err != nil {
		return fmt.Errorf("submit of deletion of %q by %q: %w", cfg.host, cfg.by, err)
	}
	fmt.Fprintf(stdout, "%s %s\n", r.ID, r.Stage)
	return nil
}

// inventory freezes the request's schema inventory with a storage manifest
// of the declared storage layout's object prefixes for its community. With
// an object store (--objects, --objects-dir or DELETIONCTL_OBJECTS) it lists
// each prefix in it and freezes the summaries (executor.SummarizeStorage,
// KeyStreamDigest) of what it found; without one it refuses unless
// --store-empty asserts that each prefix is empty, and the executor's
// destructive storage manifest must then agree. It refuses, before any
// listing, a request whose inventory the lifecycle would refuse to replace.
func inventory(ctx context.Context, store *lifecycle.Operator, cfg config, stdout io.Writer) error {
	op := fmt.Sprintf("inventory of request %s", cfg.requestID)
	r, err := store.Get(ctx, cfg.requestID)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if (r.Stage != lifecycle.StageSubmitted && r.Stage != lifecycle.StageInventoried) || r.Blocked() {
		return fmt.Errorf("%s: %w: the request is %s, and only an unblocked submitted or inventoried request is inventoried; "+
			"to change what it deletes, abort it and submit a new one", op, lifecycle.ErrRefused, r.Stage)
	}
	layout, err := store.StorageLayout(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if err := layout.RequireObjects(); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	prefixes := layout.ExpandLayout(r.TenantKey).ObjectPrefixes
	if err := checkPrefixFlags(cfg.prefixes, prefixes); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if cfg.objects == "" && !cfg.storeEmpty && len(prefixes) > 0 {
		return fmt.Errorf("%s: %w: no object store to list the declared prefixes %q in; "+
			"give --objects URL or --objects-dir DIR, or --store-empty if the store holds nothing under them",
			op, lifecycle.ErrRefused, prefixes)
	}
	schema, err := store.InventorySchema(ctx, r.CommunityID)
	if err != nil {
		return fmt.Errorf("%s: schema of community %s: %w", op, r.CommunityID, err)
	}
	storage := lifecycle.StorageManifest{Version: lifecycle.StorageManifestVersion}
	if cfg.objects != "" {
		objects, err := openObjects(ctx, cfg.objects)
		if err != nil {
			return err
		}
		storage, err = executor.SummarizeStorage(ctx, objects, prefixes)
		if err != nil {
			return fmt.Errorf("%s: summarize storage: %w", op, err)
		}
	} else {
		for _, p := range prefixes {
			storage.Prefixes = append(storage.Prefixes, lifecycle.PrefixManifest{Prefix: p, KeysDigest: lifecycle.EmptyKeysDigest})
		}
	}
	// Keys listed in the tenant's rows are read from the database, store or not.
	if storage.KeySources, err = store.InventoryKeySources(ctx, r.CommunityID); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	r, err = store.FreezeInventory(ctx, cfg.requestID, lifecycle.FrozenInventory{Schema: *schema, Storage: storage})
	if err != nil {
		return fmt.Errorf("%s: freeze: %w", op, err)
	}
	fmt.Fprintf(stdout, "%s %s %s\n", r.ID, r.Stage, r.InventoryDigest)
	return nil
}

// checkPrefixFlags refuses --prefix values that are not exactly the
// declared prefixes: each must be declared and none may be left out. No
// --prefix takes the declared prefixes as they are.
func checkPrefixFlags(given, declared []string) error {
	if len(given) == 0 {
		return nil
	}
	for _, p := range given {
		if !slices.Contains(declared, p) {
			return fmt.Errorf("%w: --prefix %q is not a prefix of the declared storage layout %q; "+
				"omit --prefix to inventory the declared layout, or have the deployment declare this prefix's template", lifecycle.ErrRefused, p, declared)
		}
	}
	for _, p := range declared {
		if !slices.Contains(given, p) {
			return fmt.Errorf("%w: --prefix leaves out the declared prefix %q; omit --prefix to inventory every declared prefix", lifecycle.ErrRefused, p)
		}
	}
	return nil
}

// listReport is the JSON output of list --json.
type listReport struct {
	Requests []requestView `json:"requests"`
	Next     *string       `json:"next"`
}

func list(ctx context.Context, store *lifecycle.Operator, cfg config, stdout io.Writer) error {
	params := lifecycle.ListParams{Stage: cfg.stage, Blocked: cfg.blocked, Limit: cfg.limit, After: cfg.after}
	page, err := store.List(ctx, params)
	if err != nil {
		return fmt.Errorf("list: %w", err)
	}
	var next *string
	if page.Next != nil {
		s := encodeCursor(*page.Next)
		next = &s
	}
	if cfg.json {
		rep := listReport{Requests: []requestView{}, Next: next}
		for _, r := range page.Requests {
			rep.Requests = append(rep.Requests, viewRequest(r, false))
		}
		return writeJSON(stdout, rep)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tHOST\tSTAGE\tBLOCKED\tCREATED AT\tREQUESTED BY\tGRACE UNTIL")
	for _, r := range page.Requests {
		grace := "-"
		if r.GraceUntil != nil {
			grace = r.GraceUntil.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%t\t%s\t%s\t%s\n", r.ID, r.CommunityHost, r.Stage, r.Blocked(),
			r.CreatedAt.UTC().Format(time.RFC3339), strconv.Quote(r.RequestedBy), grace)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("list: write: %w", err)
	}
	if next != nil {
		fmt.Fprintf(stdout, "next: %s\n", *next)
	}
	return nil
}

// inspectReport is the JSON output of inspect --json.
type inspectReport struct {
	Request       requestView      `json:"request"`
	Approval      *approvalView    `json:"approval"`
	Checkpoints   []checkpointView `json:"checkpoints"`
	ChunksTotal   int64            `json:"chunks_total"`
	ChunksDeleted int64            `json:"chunks_deleted"`
	Progress      progressView     `json:"progress"`
}

type approvalView struct {
	InventoryDigest string     `json:"inventory_digest"`
	ApprovedBy      string     `json:"approved_by"`
	Note            string     `json:"note"`
	ApprovedAt      time.Time  `json:"approved_at"`
	GraceUntil      *time.Time `json:"grace_until,omitempty"`
}

type checkpointView struct {
	Stage           lifecycle.Stage `json:"stage"`
	UnitKey         string          `json:"unit_key"`
	Status          string          `json:"status"`
	LeaseGeneration int64           `json:"lease_generation"`
	Attempts        int32           `json:"attempts"`
	Detail          json.RawMessage `json:"detail,omitempty"`
	Error           string          `json:"error,omitempty"`
	StartedAt       time.Time       `json:"started_at"`
	CompletedAt     *time.Time      `json:"completed_at"`
}

// requestView is a request as the JSON outputs show it.
type requestView struct {
	ID                         string                     `json:"id"`
	CommunityID                string                     `json:"community_id"`
	CommunityHost              string                     `json:"community_host"`
	Stage                      lifecycle.Stage            `json:"stage"`
	Blocked                    bool                       `json:"blocked"`
	BlockedAt                  *time.Time                 `json:"blocked_at,omitempty"`
	BlockedReason              string                     `json:"blocked_reason,omitempty"`
	RequestedBy                string                     `json:"requested_by"`
	Reason                     string                     `json:"reason,omitempty"`
	CreatedAt                  time.Time                  `json:"created_at"`
	UpdatedAt                  time.Time                  `json:"updated_at"`
	InventoryDigest            string                     `json:"inventory_digest,omitempty"`
	InventoryFrozenAt          *time.Time                 `json:"inventory_frozen_at,omitempty"`
	Inventory                  *lifecycle.FrozenInventory `json:"inventory,omitempty"`
	DestructiveStorage         *lifecycle.StorageManifest `json:"destructive_storage,omitempty"`
	DestructiveStorageFrozenAt *time.Time                 `json:"destructive_storage_frozen_at,omitempty"`
	FenceGeneration            *int64                     `json:"fence_generation,omitempty"`
	RetryStage                 *lifecycle.Stage           `json:"retry_stage,omitempty"`
	RetryCount                 int32                      `json:"retry_count"`
	Attempts                   int32                      `json:"attempts"`
	LastError                  string                     `json:"last_error,omitempty"`
	LastErrorAt                *time.Time                 `json:"last_error_at,omitempty"`
	NextAttemptAt              time.Time                  `json:"next_attempt_at"`
	LeaseOwner                 string                     `json:"lease_owner,omitempty"`
	LeaseGeneration            int64                      `json:"lease_generation"`
	LeaseUntil                 *time.Time                 `json:"lease_until,omitempty"`
	AbortedBy                  string                     `json:"aborted_by,omitempty"`
	AbortReason                string                     `json:"abort_reason,omitempty"`
	AbortedAt                  *time.Time                 `json:"aborted_at,omitempty"`
	CompletedAt                *time.Time                 `json:"completed_at,omitempty"`
	GraceUntil                 *time.Time                 `json:"grace_until,omitempty"`
}

// viewRequest converts r; the inventories only with full.
func viewRequest(r *lifecycle.Request, full bool) requestView {
	v := requestView{
		ID: r.ID.String(), CommunityID: r.CommunityID.String(), CommunityHost: r.CommunityHost,
		Stage: r.Stage, Blocked: r.Blocked(), BlockedAt: r.BlockedAt, BlockedReason: r.BlockedReason,
		RequestedBy: r.RequestedBy, Reason: r.Reason, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
		InventoryDigest: r.InventoryDigest, InventoryFrozenAt: r.InventoryFrozenAt,
		DestructiveStorageFrozenAt: r.DestructiveStorageFrozenAt, FenceGeneration: r.FenceGeneration,
		RetryStage: r.RetryStage, RetryCount: r.RetryCount, Attempts: r.Attempts,
		LastError: r.LastError, LastErrorAt: r.LastErrorAt, NextAttemptAt: r.NextAttemptAt,
		LeaseOwner: r.LeaseOwner, LeaseGeneration: r.LeaseGeneration, LeaseUntil: r.LeaseUntil,
		AbortedBy: r.AbortedBy, AbortReason: r.AbortReason, AbortedAt: r.AbortedAt, CompletedAt: r.CompletedAt,
		GraceUntil: r.GraceUntil,
	}
	if full {
		v.Inventory = r.Inventory
		v.DestructiveStorage = r.DestructiveStorage
	}
	return v
}

func inspect(ctx context.Context, store *lifecycle.Operator, cfg config, stdout io.Writer) error {
	in, err := store.Inspect(ctx, cfg.requestID)
	if err != nil {
		return fmt.Errorf("inspect of request %s: %w", cfg.requestID, err)
	}
	progress, err := store.Progress(ctx, cfg.requestID)
	if err != nil {
		return fmt.Errorf("inspect of request %s: %w", cfg.requestID, err)
	}
	rep := inspectReport{
		Request:       viewRequest(in.Request, true),
		Checkpoints:   []checkpointView{},
		ChunksTotal:   in.ChunksTotal,
		ChunksDeleted: in.ChunksDeleted,
		Progress:      buildProgress(in, progress),
	}
	if a := in.Approval; a != nil {
		rep.Approval = &approvalView{InventoryDigest: a.InventoryDigest, ApprovedBy: a.ApprovedBy, Note: a.Note, ApprovedAt: a.ApprovedAt,
			GraceUntil: a.GraceUntil}
	}
	for _, c := range in.Checkpoints {
		rep.Checkpoints = append(rep.Checkpoints, checkpointView{
			Stage: c.Stage, UnitKey: c.UnitKey, Status: c.Status, LeaseGeneration: c.LeaseGeneration,
			Attempts: c.Attempts, Detail: c.Detail, Error: c.Error, StartedAt: c.StartedAt, CompletedAt: c.CompletedAt,
		})
	}
	if cfg.json {
		return writeJSON(stdout, rep)
	}
	return writeInspection(stdout, rep)
}

// writeInspection prints rep for a person.
func writeInspection(w io.Writer, rep inspectReport) error {
	r := rep.Request
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	line := func(k string, v any) { fmt.Fprintf(tw, "%s:\t%v\n", k, v) }
	optTime := func(k string, t *time.Time) {
		if t != nil {
			line(k, t.UTC().Format(time.RFC3339Nano))
		}
	}
	optStr := func(k, v string) {
		if v != "" {
			line(k, strconv.Quote(v))
		}
	}
	line("id", r.ID)
	line("community", r.CommunityID+" ("+r.CommunityHost+")")
	line("stage", r.Stage)
	line("blocked", r.Blocked)
	optTime("blocked at", r.BlockedAt)
	optStr("blocked reason", r.BlockedReason)
	line("requested by", strconv.Quote(r.RequestedBy))
	optStr("reason", r.Reason)
	line("created at", r.CreatedAt.UTC().Format(time.RFC3339Nano))
	line("updated at", r.UpdatedAt.UTC().Format(time.RFC3339Nano))
	if r.InventoryDigest != "" {
		line("inventory digest", r.InventoryDigest)
	}
	optTime("inventory frozen at", r.InventoryFrozenAt)
	if r.FenceGeneration != nil {
		line("fence generation", *r.FenceGeneration)
	}
	line("attempts", r.Attempts)
	if r.RetryStage != nil {
		line("retrying", fmt.Sprintf("%d at %s", r.RetryCount, *r.RetryStage))
	}
	optStr("last error", r.LastError)
	if r.LeaseOwner != "" {
		line("lease", fmt.Sprintf("%s generation %d", strconv.Quote(r.LeaseOwner), r.LeaseGeneration))
	}
	optTime("lease until", r.LeaseUntil)
	optStr("aborted by", r.AbortedBy)
	optStr("abort reason", r.AbortReason)
	optTime("aborted at", r.AbortedAt)
	optTime("completed at", r.CompletedAt)
	if a := rep.Approval; a != nil {
		line("approved by", strconv.Quote(a.ApprovedBy))
		optStr("approval note", a.Note)
		line("approved at", a.ApprovedAt.UTC().Format(time.RFC3339Nano))
		optTime("grace period ends", a.GraceUntil)
	} else {
		line("approval", "none")
	}
	line("chunks deleted", fmt.Sprintf("%d of %d", rep.ChunksDeleted, rep.ChunksTotal))
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("inspect: write: %w", err)
	}
	if err := writeProgress(w, rep.Progress); err != nil {
		return err
	}
	fmt.Fprintf(w, "checkpoints: %d\n", len(rep.Checkpoints))
	if len(rep.Checkpoints) == 0 {
		return nil
	}
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  STAGE\tUNIT\tSTATUS\tATTEMPTS\tSTARTED AT\tERROR")
	for _, c := range rep.Checkpoints {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\t%s\t%s\n", c.Stage, c.UnitKey, c.Status, c.Attempts,
			c.StartedAt.UTC().Format(time.RFC3339), oneLine(c.Error))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("inspect: write: %w", err)
	}
	return nil
}

func leases(ctx context.Context, store *lifecycle.Operator, cfg config, stdout io.Writer) error {
	if cfg.reap > 0 {
		n, err := store.ReapExpiredServingWriteLeases(ctx, cfg.reap)
		if err != nil {
			return fmt.Errorf("reap of up to %d expired serving write leases: %w", cfg.reap, err)
		}
		fmt.Fprintf(stdout, "reaped %d expired serving write leases\n", n)
		return nil
	}
	st, err := store.ServingLeaseStats(ctx)
	if err != nil {
		return fmt.Errorf("serving write lease stats: %w", err)
	}
	fmt.Fprintf(stdout, "active: %d\nexpired: %d\ndead tuples: %d\n", st.Active, st.Expired, st.DeadTuples)
	return nil
}

// healthReport is the JSON output of health --json.
type healthReport struct {
	Healthy  bool            `json:"healthy"`
	Findings []healthFinding `json:"findings"`
	Drift    []driftFinding  `json:"drift"`
	Excluded []excludedTable `json:"excluded"`
}

type excludedTable struct {
	Table      string `json:"table"`
	Reason     string `json:"reason"`
	ExcludedBy string `json:"excluded_by"`
}

type healthFinding struct {
	Subject string `json:"subject"`
	Problem string `json:"problem"`
	Detail  string `json:"detail"`
}

type driftFinding struct {
	Table   string `json:"table"`
	Problem string `json:"problem"`
}

// health prints what community_deletion_health() and the catalog drift
// report find, and refuses (exit 3) when either finds anything.
func health(ctx context.Context, store *lifecycle.Operator, cfg config, stdout io.Writer) error {
	rep, err := store.Health(ctx)
	if err != nil {
		return err
	}
	if cfg.json {
		out := healthReport{Healthy: rep.Healthy(), Findings: []healthFinding{}, Drift: []driftFinding{}, Excluded: []excludedTable{}}
		for _, f := range rep.Findings {
			out.Findings = append(out.Findings, healthFinding(f))
		}
		for _, d := range rep.Drift {
			out.Drift = append(out.Drift, driftFinding(d))
		}
		for _, e := range rep.Excluded {
			out.Excluded = append(out.Excluded, excludedTable(e))
		}
		if err := writeJSON(stdout, out); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		for _, f := range rep.Findings {
			fmt.Fprintf(tw, "health\t%s\t%s\t%s\n", f.Problem, f.Subject, oneLine(f.Detail))
		}
		for _, d := range rep.Drift {
			fmt.Fprintf(tw, "drift\t%s\t%s\t\n", d.Problem, d.Table)
		}
		for _, e := range rep.Excluded {
			fmt.Fprintf(tw, "excluded\t%s\tby %s\t%s\n", e.Table, e.ExcludedBy, oneLine(e.Reason))
		}
		if err := tw.Flush(); err != nil {
			return fmt.Errorf("health: write: %w", err)
		}
		if rep.Healthy() {
			fmt.Fprintln(stdout, "healthy: no prepared transaction holds an advisory lock, no catalog drift")
		}
	}
	if !rep.Healthy() {
		return fmt.Errorf("health: %d health findings and %d catalog drift rows (listed on stdout): %w",
			len(rep.Findings), len(rep.Drift), lifecycle.ErrRefused)
	}
	return nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("write JSON: %w", err)
	}
	return nil
}

// graceSuffix is approve's note of when the grace period ends, if any.
func graceSuffix(r *lifecycle.Request) string {
	if r.GraceUntil == nil || !r.GraceUntil.After(r.UpdatedAt) {
		return ""
	}
	return " grace-until " + r.GraceUntil.UTC().Format(time.RFC3339)
}

// protection runs protect, unprotect (a clear request, or with --approve the
// second operator's clear) and protection (show) for the community of
// --host, printing the community, whether it is protected, and its newest
// events.
func protection(ctx context.Context, store *lifecycle.Operator, cfg config, stdout io.Writer) error {
	op := fmt.Sprintf("%s of %q", cfg.command, cfg.host)
	community, err := store.CommunityByHost(ctx, cfg.host)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	var p *lifecycle.Protection
	switch {
	case cfg.command == "protect":
		p, err = store.Protect(ctx, community, cfg.by, cfg.reason)
	case cfg.command == "unprotect" && cfg.approve:
		p, err = store.ApproveUnprotect(ctx, community, cfg.by, cfg.reason)
	case cfg.command == "unprotect":
		p, err = store.RequestUnprotect(ctx, community, cfg.by, cfg.reason)
	default:
		p, err = store.Protection(ctx, community)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	state := "unprotected"
	switch {
	case p.ClearPending:
		state = "protected (clear requested: a second operator runs unprotect --approve)"
	case p.Protected:
		state = "protected"
	}
	fmt.Fprintf(stdout, "%s %s\n", p.CommunityID, state)
	if cfg.command != "protection" {
		return nil
	}
	for _, e := range p.Events {
		fmt.Fprintf(stdout, "%s %s by %s (%s): %s\n", e.RecordedAt.UTC().Format(time.RFC3339), e.Action,
			strconv.Quote(e.Actor), e.ActorRole, strconv.Quote(e.Reason))
	}
	return nil
}
