package main

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tombstoneworks/communitydeletion/executor"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
	"github.com/tombstoneworks/communitydeletion/receipt"
)

// execute connects to the database and runs cfg's command: run as the
// executor (lifecycle.Engine), every other command as an operator
// (lifecycle.Operator). A command that changes something makes its change
// in one call, which is one transaction; the rest only read. The
// connection's login must be a member of the role.
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
			return failed("run", err, "")
		}
		return runExecutor(ctx, engine, pool, cfg, stdout)
	}
	if cfg.command == "receipt rotate" {
		engine, err := lifecycle.NewEngine(ctx, pool, nil)
		if err != nil {
			return failed("receipt rotate", err, "")
		}
		return receiptRotate(ctx, engine, key, cfg, stdout)
	}
	operator, err := lifecycle.NewOperator(ctx, pool, nil)
	if err != nil {
		return failed(cfg.command, err, "")
	}
	return dispatch(ctx, &session{op: operator, pool: pool, cfg: cfg, out: stdout})
}

// session is one operator command: its client, its pool (for the database
// clock), its command line and its output.
type session struct {
	op   *lifecycle.Operator
	pool *pgxpool.Pool
	cfg  config
	out  io.Writer
}

// dbNow reads the database clock, which decides every deadline.
func dbNow(ctx context.Context, pool *pgxpool.Pool) (time.Time, error) {
	var now time.Time
	if err := pool.QueryRow(ctx, "SELECT pg_catalog.statement_timestamp()").Scan(&now); err != nil {
		return time.Time{}, fmt.Errorf("read the database clock: %w", err)
	}
	return now, nil
}

// claim is r's claim on the database clock now; the catalog drift is read
// only for a request that would otherwise be claimable.
func (s *session) claim(ctx context.Context, r *lifecycle.Request, now time.Time) (claimView, error) {
	c := claimOf(r, now, nil)
	if c.Status != claimClaimable {
		return c, nil
	}
	health, err := s.op.Health(ctx)
	if err != nil {
		return claimView{}, err
	}
	return claimOf(r, now, health.Drift), nil
}

// view is r as the JSON outputs show it, with its claim now.
func (s *session) view(ctx context.Context, r *lifecycle.Request, full bool) (requestView, error) {
	now, err := dbNow(ctx, s.pool)
	if err != nil {
		return requestView{}, err
	}
	c, err := s.claim(ctx, r, now)
	if err != nil {
		return requestView{}, err
	}
	v := viewRequest(r, full)
	v.Claim = &c
	return v, nil
}

// printRequest prints what a command that changed r prints: text, or with
// --json the request object.
func (s *session) printRequest(ctx context.Context, r *lifecycle.Request, text string) error {
	if !s.cfg.json {
		fmt.Fprintln(s.out, text)
		return nil
	}
	v, err := s.view(ctx, r, false)
	if err != nil {
		return err
	}
	return writeJSON(s.out, requestReport{Request: v})
}

// requestReport is the JSON of the commands that change one request.
type requestReport struct {
	Request requestView `json:"request"`
}

// dispatch runs cfg's operator command.
func dispatch(ctx context.Context, s *session) error {
	cfg := s.cfg
	id := cfg.requestID.String()
	switch cfg.command {
	case "submit":
		return submit(ctx, s)
	case "plan":
		return plan(ctx, s)
	case "inventory":
		return inventory(ctx, s)
	case "approve":
		r, err := s.op.ApproveWithParams(ctx, cfg.requestID, lifecycle.ApproveParams{
			ApprovedBy: cfg.by, Note: cfg.note, GracePeriod: cfg.grace,
		})
		if err != nil {
			return failed(fmt.Sprintf("approve of request %s by %q", id, cfg.by), err,
				"a second operator, from another login than the submitter's, approves an inventoried request "+
					"(deletionctl inspect --request "+id+" shows its stage)")
		}
		return s.printRequest(ctx, r, fmt.Sprintf("%s %s %s%s", r.ID, r.Stage, r.InventoryDigest, graceSuffix(r)))
	case "protect", "unprotect", "protection":
		return protection(ctx, s)
	case "list":
		return list(ctx, s)
	case "inspect":
		return inspect(ctx, s)
	case "abort":
		r, err := s.op.Abort(ctx, cfg.requestID, cfg.by, cfg.reason)
		if err != nil {
			return failed(fmt.Sprintf("abort of request %s by %q", id, cfg.by), err,
				"only a request before the purge (submitted, inventoried, approved or fenced) can be aborted; "+
					"deletionctl inspect --request "+id+" shows where it is")
		}
		return s.printRequest(ctx, r, fmt.Sprintf("%s %s", r.ID, r.Stage))
	case "unblock":
		r, err := s.op.Unblock(ctx, cfg.requestID, cfg.by, cfg.reason)
		if err != nil {
			return failed(fmt.Sprintf("unblock of request %s by %q", id, cfg.by), err,
				"deletionctl inspect --request "+id+" shows why it waits")
		}
		return s.printRequest(ctx, r, fmt.Sprintf("%s %s", r.ID, r.Stage))
	case "leases":
		return leases(ctx, s)
	case "receipt show":
		return receiptShow(ctx, s.op, cfg, s.out)
	case "receipt head":
		return receiptHead(ctx, s.op, cfg, s.out)
	case "receipt export":
		return receiptExport(ctx, s.op, cfg, s.out)
	case "health":
		return health(ctx, s.op, cfg, s.out)
	case "check":
		return check(ctx, s.op, cfg, s.out)
	}
	return usagef("unknown command %q", cfg.command)
}

func submit(ctx context.Context, s *session) error {
	cfg := s.cfg
	r, err := submitRequest(ctx, s.op, cfg)
	if err != nil {
		return failed(fmt.Sprintf("submit of %q by %q", cfg.host, cfg.by), err,
			"deletionctl list shows an open request, deletionctl protection --host "+strconv.Quote(cfg.host)+" a protection")
	}
	return s.printRequest(ctx, r, fmt.Sprintf("%s %s", r.ID, r.Stage))
}

// submitRequest is submit's whole call of the lifecycle: the arguments it
// passes, and how it reads the answer. A refusal for a community that does
// not exist is not found (exit 4); submitting again with another reason
// than the open request's is refused, since the request keeps its own.
func submitRequest(ctx context.Context, store *lifecycle.Operator, cfg config) (*lifecycle.Request, error) {
	r, err := store.Submit(ctx, cfg.host, cfg.by, cfg.reason)
	if errors.Is(err, lifecycle.ErrRefused) {
		if _, _, lookErr := resolveTenant(ctx, store, cfg.host); errors.Is(lookErr, lifecycle.ErrNotFound) {
			return nil, lookErr
		}
	}
	if err != nil {
		return nil, err
	}
	if !sameReason(cfg.reason, r.Reason) {
		return nil, refusedf("request %s is already submitted by %q with the reason %q, which it keeps: yours was not recorded; "+
			"submit with the same reason to get its id, or abort it (deletionctl abort --request %s) and submit again",
			r.ID, r.RequestedBy, r.Reason, r.ID)
	}
	return r, nil
}

// sameReason reports whether the reason given to submit is stored, the
// lifecycle trimming it and bounding it to lifecycle.MaxErrorBytes.
func sameReason(given, stored string) bool {
	given = strings.TrimSpace(given)
	if given == stored {
		return true
	}
	return len(given) > lifecycle.MaxErrorBytes && len(stored) >= lifecycle.MaxErrorBytes-3 && strings.HasPrefix(given, stored)
}

// resolveTenant finds the community hostOrID names, as submit does: by its
// id first, then by its host. It returns the community's protection with
// it, or an error matching lifecycle.ErrNotFound.
func resolveTenant(ctx context.Context, store *lifecycle.Operator, hostOrID string) (uuid.UUID, *lifecycle.Protection, error) {
	if id, err := uuid.Parse(strings.TrimSpace(hostOrID)); err == nil {
		p, err := store.Protection(ctx, id)
		if err == nil {
			return id, p, nil
		}
		if !errors.Is(err, lifecycle.ErrNotFound) {
			return uuid.Nil, nil, err
		}
	}
	id, err := store.CommunityByHost(ctx, hostOrID)
	if err != nil {
		if errors.Is(err, lifecycle.ErrNotFound) {
			return uuid.Nil, nil, fmt.Errorf("%w: no community has id or host %q", lifecycle.ErrNotFound, hostOrID)
		}
		return uuid.Nil, nil, err
	}
	p, err := store.Protection(ctx, id)
	if err != nil {
		return uuid.Nil, nil, err
	}
	return id, p, nil
}

// inventory freezes the request's schema inventory with a storage manifest
// of the declared storage layout's object prefixes for its community. With
// an object store (--objects, --objects-dir or DELETIONCTL_OBJECTS) it lists
// each prefix in it and freezes the summaries (executor.SummarizeStorage,
// KeyStreamDigest) of what it found; without one it refuses unless
// --store-empty asserts that each prefix is empty, and the executor's
// destructive storage manifest must then agree. It refuses, before any
// listing, a request whose inventory the lifecycle would refuse to replace.
func inventory(ctx context.Context, s *session) error {
	cfg := s.cfg
	op := fmt.Sprintf("inventory of request %s", cfg.requestID)
	r, err := s.op.Get(ctx, cfg.requestID)
	if err != nil {
		return failed(op, err, "")
	}
	if (r.Stage != lifecycle.StageSubmitted && r.Stage != lifecycle.StageInventoried) || r.Blocked() {
		stage := string(r.Stage)
		if r.Blocked() {
			stage += " and blocked"
		}
		return failed(op, refusedf("the request is %s, and only an unblocked submitted or inventoried request is inventoried", stage),
			"to change what it deletes, abort it and submit a new one")
	}
	layout, err := s.op.StorageLayout(ctx)
	if err != nil {
		return failed(op, err, "")
	}
	if err := layout.RequireObjects(); err != nil {
		return failed(op, err, "")
	}
	prefixes := layout.ExpandLayout(r.TenantKey).ObjectPrefixes
	if err := checkPrefixFlags(cfg.prefixes, prefixes); err != nil {
		return failed(op, err, "")
	}
	if cfg.objects == "" && !cfg.storeEmpty && len(prefixes) > 0 {
		return failed(op, refusedf("no object store to list the declared prefixes %q in", prefixes),
			"give --objects URL or --objects-dir DIR, or --store-empty if the store holds nothing under them")
	}
	schema, err := s.op.InventorySchema(ctx, r.CommunityID)
	if err != nil {
		return failed(op, err, "")
	}
	storage := lifecycle.StorageManifest{Version: lifecycle.StorageManifestVersion}
	if cfg.objects != "" {
		objects, err := openObjects(ctx, cfg.objects)
		if err != nil {
			return err
		}
		storage, err = executor.SummarizeStorage(ctx, objects, prefixes)
		if err != nil {
			return failed(op+": summarize storage", err, "")
		}
	} else {
		for _, p := range prefixes {
			storage.Prefixes = append(storage.Prefixes, lifecycle.PrefixManifest{Prefix: p, KeysDigest: lifecycle.EmptyKeysDigest})
		}
	}
	// Keys listed in the tenant's rows are read from the database, store or not.
	if storage.KeySources, err = s.op.InventoryKeySources(ctx, r.CommunityID); err != nil {
		return failed(op, err, "")
	}
	r, err = s.op.FreezeInventory(ctx, cfg.requestID, lifecycle.FrozenInventory{Schema: *schema, Storage: storage})
	if err != nil {
		return failed(op, err, "")
	}
	return s.printRequest(ctx, r, fmt.Sprintf("%s %s %s", r.ID, r.Stage, r.InventoryDigest))
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
			return refusedf("--prefix %q is not a prefix of the declared storage layout %q; "+
				"omit --prefix to inventory the declared layout, or have the deployment declare this prefix's template", p, declared)
		}
	}
	for _, p := range declared {
		if !slices.Contains(given, p) {
			return refusedf("--prefix leaves out the declared prefix %q; omit --prefix to inventory every declared prefix", p)
		}
	}
	return nil
}

// listReport is the JSON output of list --json.
type listReport struct {
	Requests []requestView `json:"requests"`
	Next     *string       `json:"next"`
}

func list(ctx context.Context, s *session) error {
	cfg := s.cfg
	params := lifecycle.ListParams{Stage: cfg.stage, Blocked: cfg.blocked, Limit: cfg.limit, After: cfg.after}
	page, err := s.op.List(ctx, params)
	if err != nil {
		return failed("list", err, "")
	}
	now, err := dbNow(ctx, s.pool)
	if err != nil {
		return failed("list", err, "")
	}
	var drift []lifecycle.DriftFinding
	claims := make([]claimView, len(page.Requests))
	for i, r := range page.Requests {
		if claims[i] = claimOf(r, now, nil); claims[i].Status == claimClaimable && drift == nil {
			health, err := s.op.Health(ctx)
			if err != nil {
				return failed("list", err, "")
			}
			drift = health.Drift
			if drift == nil {
				drift = []lifecycle.DriftFinding{}
			}
		}
		if claims[i].Status == claimClaimable {
			claims[i] = claimOf(r, now, drift)
		}
	}
	var next *string
	if page.Next != nil {
		c := encodeCursor(*page.Next)
		next = &c
	}
	if cfg.json {
		rep := listReport{Requests: []requestView{}, Next: next}
		for i, r := range page.Requests {
			v := viewRequest(r, false)
			v.Claim = &claims[i]
			rep.Requests = append(rep.Requests, v)
		}
		return writeJSON(s.out, rep)
	}
	tw := tabwriter.NewWriter(s.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tHOST\tSTAGE\tBLOCKED\tCREATED AT\tREQUESTED BY\tGRACE UNTIL\tCLAIM")
	for i, r := range page.Requests {
		grace := "-"
		if r.GraceUntil != nil {
			grace = stamp(*r.GraceUntil)
		}
		host := r.CommunityHost
		if host == "" {
			host = r.CommunityID.String()
		}
		claim := claims[i].Status
		if claims[i].Until != nil {
			claim += " until " + stamp(*claims[i].Until)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%t\t%s\t%s\t%s\t%s\n", r.ID, host, r.Stage, r.Blocked(),
			stamp(r.CreatedAt), strconv.Quote(r.RequestedBy), grace, claim)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("list: write: %w", err)
	}
	if next != nil {
		fmt.Fprintf(s.out, "next: %s\n", *next)
	}
	return nil
}

// inspectReport is the JSON output of inspect --json.
type inspectReport struct {
	Request     requestView      `json:"request"`
	Approval    *approvalView    `json:"approval"`
	Protection  protectionView   `json:"protection"`
	Receipt     *receiptSummary  `json:"receipt"`
	Progress    progressView     `json:"progress"`
	Checkpoints []checkpointView `json:"checkpoints"`
}

type approvalView struct {
	InventoryDigest string     `json:"inventory_digest"`
	ApprovedBy      string     `json:"approved_by"`
	Note            string     `json:"note"`
	ApprovedAt      time.Time  `json:"approved_at"`
	GraceUntil      *time.Time `json:"grace_until"`
}

// receiptSummary is what inspect shows of a completed deletion's receipt:
// where it stands in the chain, its hash, who signed it and the logins of
// the two operators.
type receiptSummary struct {
	Sequence       int64  `json:"sequence"`
	Hash           string `json:"hash"`
	Signer         string `json:"signer"`
	SubmittedLogin string `json:"submitted_by_login"`
	ApprovedLogin  string `json:"approved_by_login"`
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

// requestView is a request as the JSON outputs show it: the request
// object of docs/deletionctl.md.
type requestView struct {
	ID                         string                     `json:"id"`
	CommunityID                string                     `json:"community_id"`
	CommunityHost              string                     `json:"community_host"`
	Stage                      lifecycle.Stage            `json:"stage"`
	Claim                      *claimView                 `json:"claim"`
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

// viewRequest converts r; the inventories only with full. The claim is
// the caller's to fill in.
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

func inspect(ctx context.Context, s *session) error {
	cfg := s.cfg
	op := fmt.Sprintf("inspect of request %s", cfg.requestID)
	in, err := s.op.Inspect(ctx, cfg.requestID)
	if err != nil {
		return failed(op, err, "")
	}
	progress, err := s.op.Progress(ctx, cfg.requestID)
	if err != nil {
		return failed(op, err, "")
	}
	claim, err := s.claim(ctx, in.Request, progress.Now)
	if err != nil {
		return failed(op, err, "")
	}
	protection, err := s.op.Protection(ctx, in.Request.CommunityID)
	if err != nil {
		return failed(op, err, "")
	}
	rep := inspectReport{
		Request:     viewRequest(in.Request, true),
		Protection:  viewProtection(protection),
		Checkpoints: []checkpointView{},
		Progress:    buildProgress(in, progress),
	}
	rep.Request.Claim = &claim
	if receipt, ok, err := summarizeReceipt(ctx, s.op, in.Request); err != nil {
		return failed(op, err, "")
	} else if ok {
		rep.Receipt = &receipt
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
		return writeJSON(s.out, rep)
	}
	return writeInspection(s.out, rep)
}

// summarizeReceipt is the receipt of a completed request r; false before
// it completes (or for one completed before receipts were written).
func summarizeReceipt(ctx context.Context, store *lifecycle.Operator, r *lifecycle.Request) (receiptSummary, bool, error) {
	if r.Stage != lifecycle.StageRetentionPending {
		return receiptSummary{}, false, nil
	}
	env, err := store.Receipt(ctx, r.ID)
	if errors.Is(err, lifecycle.ErrNotFound) {
		return receiptSummary{}, false, nil
	}
	if err != nil {
		return receiptSummary{}, false, err
	}
	body, err := env.Receipt()
	if err != nil {
		return receiptSummary{}, false, fmt.Errorf("the stored receipt does not parse: %w", err)
	}
	return receiptSummary{Sequence: body.Sequence, Hash: env.Hash(), Signer: body.Signer,
		SubmittedLogin: body.SubmittedBy.Login, ApprovedLogin: body.ApprovedBy.Login}, true, nil
}

// writeInspection prints rep for a person.
func writeInspection(w io.Writer, rep inspectReport) error {
	r := rep.Request
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	line := func(k string, v any) { fmt.Fprintf(tw, "%s:\t%v\n", k, v) }
	optTime := func(k string, t *time.Time) {
		if t != nil {
			line(k, stamp(*t))
		}
	}
	optStr := func(k, v string) {
		if v != "" {
			line(k, strconv.Quote(v))
		}
	}
	host := r.CommunityHost
	if host == "" {
		host = "no host: a tenant of the declared tenant table"
	}
	line("id", r.ID)
	line("community", r.CommunityID+" ("+host+")")
	line("stage", r.Stage)
	if r.Claim != nil {
		line("claim", r.Claim.Status+": "+r.Claim.Reason)
		line("next", r.Claim.NextStep)
	}
	submitted := fmt.Sprintf("%s at %s", strconv.Quote(r.RequestedBy), stamp(r.CreatedAt))
	if rep.Receipt != nil {
		submitted += " (login " + rep.Receipt.SubmittedLogin + ")"
	}
	line("submitted by", submitted)
	optStr("reason", r.Reason)
	if a := rep.Approval; a != nil {
		approved := fmt.Sprintf("%s at %s", strconv.Quote(a.ApprovedBy), stamp(a.ApprovedAt))
		if rep.Receipt != nil {
			approved += " (login " + rep.Receipt.ApprovedLogin + ")"
		}
		line("approved by", approved)
		optStr("approval note", a.Note)
		if a.GraceUntil != nil && a.GraceUntil.After(a.ApprovedAt) {
			line("grace period", "until "+stamp(*a.GraceUntil))
		} else {
			line("grace period", "none")
		}
	} else {
		line("approved by", "not approved yet")
		line("grace period", "set at approval (approve --grace, else the deployment's default)")
	}
	line("protection", rep.Protection.describe())
	if r.InventoryDigest != "" {
		line("inventory", fmt.Sprintf("digest %s, frozen at %s", r.InventoryDigest, stamp(*r.InventoryFrozenAt)))
	}
	if r.FenceGeneration != nil {
		line("fence generation", *r.FenceGeneration)
	}
	line("attempts", r.Attempts)
	if r.RetryStage != nil {
		line("retrying", fmt.Sprintf("failure %d in a row at %s", r.RetryCount, *r.RetryStage))
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
	switch {
	case rep.Receipt != nil:
		line("receipt", fmt.Sprintf("sequence %d, hash %s, signed by %s", rep.Receipt.Sequence, rep.Receipt.Hash, rep.Receipt.Signer))
	case r.Stage == lifecycle.StageRetentionPending:
		line("receipt", "none: the deletion completed before receipts were written")
	case r.Stage != lifecycle.StageAborted:
		line("receipt", "none yet: it is written when the deletion completes")
	}
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
			stamp(c.StartedAt), oneLine(c.Error))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("inspect: write: %w", err)
	}
	return nil
}

// leasesReport is the JSON output of leases --json.
type leasesReport struct {
	// Reaped is how many expired leases --reap deleted, or null without it.
	Reaped     *int64 `json:"reaped"`
	Active     int64  `json:"active"`
	Expired    int64  `json:"expired"`
	DeadTuples int64  `json:"dead_tuples"`
}

func leases(ctx context.Context, s *session) error {
	var rep leasesReport
	if s.cfg.reap > 0 {
		n, err := s.op.ReapExpiredServingWriteLeases(ctx, s.cfg.reap)
		if err != nil {
			return failed(fmt.Sprintf("reap of up to %d expired serving write leases", s.cfg.reap), err, "")
		}
		rep.Reaped = &n
		if !s.cfg.json {
			fmt.Fprintf(s.out, "reaped %d expired serving write leases\n", n)
			return nil
		}
	}
	st, err := s.op.ServingLeaseStats(ctx)
	if err != nil {
		return failed("serving write lease stats", err, "")
	}
	rep.Active, rep.Expired, rep.DeadTuples = st.Active, st.Expired, st.DeadTuples
	if s.cfg.json {
		return writeJSON(s.out, rep)
	}
	fmt.Fprintf(s.out, "active: %d\nexpired: %d\ndead tuples: %d\n", st.Active, st.Expired, st.DeadTuples)
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
		return failed("health", err, "")
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
		return failed("health", refusedf("%d health findings and %d catalog drift rows (listed on stdout)", len(rep.Findings), len(rep.Drift)),
			"end each prepared transaction named, and fix or exclude each drifted table, then run health again")
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
	return " grace-until " + stamp(*r.GraceUntil)
}

// protectionView is a community's protection as the JSON outputs show it.
type protectionView struct {
	CommunityID  string                `json:"community_id"`
	Protected    bool                  `json:"protected"`
	ClearPending bool                  `json:"clear_pending"`
	Events       []protectionEventView `json:"events"`
}

type protectionEventView struct {
	Action     lifecycle.ProtectionAction `json:"action"`
	Actor      string                     `json:"actor"`
	ActorRole  string                     `json:"actor_role"`
	Reason     string                     `json:"reason"`
	RecordedAt time.Time                  `json:"recorded_at"`
}

func viewProtection(p *lifecycle.Protection) protectionView {
	v := protectionView{CommunityID: p.CommunityID.String(), Protected: p.Protected, ClearPending: p.ClearPending,
		Events: []protectionEventView{}}
	for _, e := range p.Events {
		v.Events = append(v.Events, protectionEventView(e))
	}
	return v
}

// describe says in a few words whether the community is protected.
func (p protectionView) describe() string {
	switch {
	case p.ClearPending:
		return "protected (clear requested: a second operator runs unprotect --approve)"
	case p.Protected && len(p.Events) > 0:
		return fmt.Sprintf("protected by %s: %s", strconv.Quote(p.Events[0].Actor), p.Events[0].Reason)
	case p.Protected:
		return "protected"
	}
	return "unprotected"
}

// protection runs protect, unprotect (a clear request, or with --approve the
// second operator's clear) and protection (show) for the community of
// --host, printing the community, whether it is protected, and its newest
// events.
func protection(ctx context.Context, s *session) error {
	cfg := s.cfg
	op := fmt.Sprintf("%s of %q", cfg.command, cfg.host)
	community, p, err := resolveTenant(ctx, s.op, cfg.host)
	if err != nil {
		return failed(op, err, "")
	}
	next := "deletionctl protection --host " + strconv.Quote(cfg.host) + " shows its protection"
	switch {
	case cfg.command == "protect":
		p, err = s.op.Protect(ctx, community, cfg.by, cfg.reason)
		next = "protect is refused while the community has an open request (deletionctl list shows it); " + next
	case cfg.command == "unprotect" && cfg.approve:
		p, err = s.op.ApproveUnprotect(ctx, community, cfg.by, cfg.reason)
		next = "another operator than the one who asked, from another login, approves the clear; " + next
	case cfg.command == "unprotect":
		p, err = s.op.RequestUnprotect(ctx, community, cfg.by, cfg.reason)
	}
	if err != nil {
		return failed(op, err, next)
	}
	v := viewProtection(p)
	if cfg.json {
		return writeJSON(s.out, v)
	}
	state := "unprotected"
	switch {
	case p.ClearPending:
		state = "protected (clear requested: a second operator runs unprotect --approve)"
	case p.Protected:
		state = "protected"
	}
	fmt.Fprintf(s.out, "%s %s\n", p.CommunityID, state)
	if cfg.command != "protection" {
		return nil
	}
	for _, e := range p.Events {
		fmt.Fprintf(s.out, "%s %s by %s (%s): %s\n", stamp(e.RecordedAt), e.Action,
			strconv.Quote(e.Actor), e.ActorRole, strconv.Quote(e.Reason))
	}
	return nil
}
