package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"

	"github.com/tombstoneworks/communitydeletion/executor"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// Where a plan's figures come from (deletionPlan.Source).
const (
	// sourceFrozen: the request's frozen inventory, which its approval binds.
	sourceFrozen = "frozen_inventory"
	// sourceLive: counted now, for a request not inventoried yet or a
	// community planned without one.
	sourceLive = "live"
)

// deletionPlan is what deleting one community removes, as plan shows it
// before anything is fenced. Each kind of thing a deletion removes is a
// section of its own (Tables, Objects, KeySources, Cache, Sequences),
// beside what is kept (Excluded) and what would stop it (Drift).
type deletionPlan struct {
	// Request is the request planned, or null for a community planned by
	// --host.
	Request   *requestView  `json:"request"`
	Community planCommunity `json:"community"`
	// Source says whose figures Rows and Objects are: sourceFrozen or
	// sourceLive.
	Source string `json:"source"`
	// Claim says whether the deletion can run now and, if not, why and
	// what to do.
	Claim claimView `json:"claim"`
	// GraceUntil is when an approved request's grace period ends, or null.
	GraceUntil *time.Time     `json:"grace_until"`
	Protection protectionView `json:"protection"`
	// Tables are the registered tables in purge order: the 'nullify'
	// tables first, then the 'delete' tables child before parent.
	Tables []planTable `json:"tables"`
	// Objects are the object-store prefixes the deletion empties.
	Objects []planPrefix `json:"objects"`
	// KeySources are the columns whose values, in the tenant's rows, are
	// the keys of objects the deletion removes wherever they are.
	KeySources []planKeySource `json:"key_sources"`
	// Cache are the cache key patterns of the declared storage layout.
	Cache []planPattern `json:"cache"`
	// Sequences are the per-tenant sequences the purge drops.
	Sequences []planSequence `json:"sequences"`
	// Excluded are the tables their owners excluded: kept, with why.
	Excluded []excludedTable `json:"excluded"`
	// Drift is the catalog drift that blocks every deletion until fixed.
	Drift  []driftFinding `json:"drift"`
	Totals planTotals     `json:"totals"`
}

// planCommunity is the community a plan deletes.
type planCommunity struct {
	ID string `json:"id"`
	// Host is its host, "" for a tenant of a declared tenant table (or a
	// community planned by its id or tenant key).
	Host string `json:"host"`
	// TenantKey is its key in the service's own terms (its id for a uuid
	// tenant), which the storage layout's templates expand.
	TenantKey string `json:"tenant_key"`
}

// planTable is one registered table of a plan.
type planTable struct {
	// Order is its place in the purge, from 1; null when the purge order
	// cannot be computed (catalog drift, a cycle of foreign keys).
	Order  *int   `json:"order"`
	Table  string `json:"table"`
	Action string `json:"action"` // delete, or nullify (rows kept, tenant key cleared)
	// Rows is the frozen inventory's count (Source frozen_inventory), else
	// the count now; null when it was not counted.
	Rows *int64 `json:"rows"`
	// RowsNow is the community's rows in it now, which the purge removes
	// (rows written before the fence add to the frozen count); null when
	// the catalog drifted and nothing could be counted.
	RowsNow *int64 `json:"rows_now"`
}

// planPrefix is one object-store prefix of a plan.
type planPrefix struct {
	Prefix string `json:"prefix"`
	// Objects and Bytes are the frozen inventory's (Source
	// frozen_inventory), else what the store holds now; null when not
	// counted (no store given).
	Objects *uint64 `json:"objects"`
	Bytes   *uint64 `json:"bytes"`
	// ObjectsNow and BytesNow are what the store --objects names holds
	// under the prefix now; null without a store.
	ObjectsNow *uint64 `json:"objects_now"`
	BytesNow   *uint64 `json:"bytes_now"`
}

// planKeySource is one key source of a plan (storage layout kind
// object_keys): a column, schema.table.column, whose values in the tenant's
// rows are object keys.
type planKeySource struct {
	Source string `json:"source"`
	// Objects is the frozen inventory's count of distinct keys (Source
	// frozen_inventory), else the count now; null when not counted.
	Objects *uint64 `json:"objects"`
	// ObjectsNow is the distinct keys the tenant's rows list now, read from
	// the database; null when they could not be read (catalog drift, or a
	// source the layout no longer declares).
	ObjectsNow *uint64 `json:"objects_now"`
}

// planSequence is one per-tenant sequence of a plan (storage layout kind
// sequence), named for the tenant; the purge drops it.
type planSequence struct {
	Sequence string `json:"sequence"`
}

// planPattern is one cache key pattern of a plan; its keys are not counted
// ahead of the purge.
type planPattern struct {
	Pattern string `json:"pattern"`
}

// planTotals adds the sections up; a total is null when any of its parts
// was not counted.
type planTotals struct {
	Tables     int     `json:"tables"`
	Rows       *int64  `json:"rows"`
	RowsNow    *int64  `json:"rows_now"`
	Prefixes   int     `json:"prefixes"`
	Objects    *uint64 `json:"objects"`
	ObjectsNow *uint64 `json:"objects_now"`
	// KeySources, Keys and KeysNow add up the key sources as Prefixes,
	// Objects and ObjectsNow add up the prefixes.
	KeySources int     `json:"key_sources"`
	Keys       *uint64 `json:"keys"`
	KeysNow    *uint64 `json:"keys_now"`
}

// plan shows what deleting the request's community (or --host's) removes.
// It only reads: the request, the registry with the community's row
// counts, the purge order, the storage layout (and the store, listed, when
// --objects names one), the protection and the catalog's health.
func plan(ctx context.Context, s *session) error {
	cfg := s.cfg
	op := fmt.Sprintf("plan of request %s", cfg.requestID)
	if cfg.requestID == uuid.Nil {
		op = fmt.Sprintf("plan of %q", cfg.host)
	}
	p, err := buildPlan(ctx, s)
	if err != nil {
		return failed(op, err, "")
	}
	if cfg.json {
		return writeJSON(s.out, p)
	}
	return writePlan(s.out, p, cfg.objects != "")
}

// buildPlan gathers the plan.
func buildPlan(ctx context.Context, s *session) (*deletionPlan, error) {
	cfg := s.cfg
	p := &deletionPlan{Source: sourceLive, Tables: []planTable{}, Objects: []planPrefix{}, KeySources: []planKeySource{},
		Cache: []planPattern{}, Sequences: []planSequence{}, Excluded: []excludedTable{}, Drift: []driftFinding{}}
	var request *lifecycle.Request
	var community uuid.UUID
	var tenant lifecycle.TenantKey
	var protection *lifecycle.Protection
	if cfg.requestID != uuid.Nil {
		var err error
		if request, err = s.op.Get(ctx, cfg.requestID); err != nil {
			return nil, err
		}
		community, tenant = request.CommunityID, request.TenantKey
		p.Community = planCommunity{ID: community.String(), Host: request.CommunityHost, TenantKey: tenant.String()}
		if protection, err = s.op.Protection(ctx, community); err != nil {
			return nil, err
		}
	} else {
		var err error
		if community, protection, err = resolveTenant(ctx, s.op, cfg.host); err != nil {
			return nil, err
		}
		if tenant, err = s.op.CommunityTenantKey(ctx, community); err != nil {
			return nil, err
		}
		p.Community = planCommunity{ID: community.String(), TenantKey: tenant.String()}
		if named := strings.TrimSpace(cfg.host); !strings.EqualFold(named, community.String()) && named != tenant.String() {
			p.Community.Host = cfg.host
		}
	}
	p.Protection = viewProtection(protection)

	health, err := s.op.Health(ctx)
	if err != nil {
		return nil, err
	}
	for _, d := range health.Drift {
		p.Drift = append(p.Drift, driftFinding(d))
	}
	for _, e := range health.Excluded {
		p.Excluded = append(p.Excluded, excludedTable(e))
	}

	now, err := dbNow(ctx, s.pool)
	if err != nil {
		return nil, err
	}
	var frozen *lifecycle.FrozenInventory
	if request != nil {
		v := viewRequest(request, false)
		c := claimOf(request, now, health.Drift)
		v.Claim = &c
		p.Request, p.Claim, frozen = &v, c, request.Inventory
		if request.Stage == lifecycle.StageApproved {
			p.GraceUntil = request.GraceUntil
		}
	} else {
		p.Claim = hostClaim(cfg.host, protection)
	}
	if frozen != nil {
		p.Source = sourceFrozen
	}

	if err := p.planTables(ctx, s.op, community, frozen); err != nil {
		return nil, err
	}
	if err := p.planStorage(ctx, s.op, cfg.objects, tenant, frozen); err != nil {
		return nil, err
	}
	if err := p.planKeySources(ctx, s.op, community, frozen); err != nil {
		return nil, err
	}
	p.total()
	return p, nil
}

// hostClaim is the claim of a community planned without a request.
func hostClaim(host string, protection *lifecycle.Protection) claimView {
	if protection.Protected {
		c := claimView{Status: claimProtected, Reason: "deletion-protected: submit is refused",
			NextStep: "two operators clear it first: deletionctl unprotect --host " + strconv.Quote(host) + " --by NAME --reason TEXT, then another runs it with --approve"}
		if len(protection.Events) > 0 {
			e := protection.Events[0]
			c.Reason = fmt.Sprintf("deletion-protected (%s by %s: %s): submit is refused", e.Action, strconv.Quote(e.Actor), e.Reason)
		}
		return c
	}
	return claimView{Status: claimNoRequest, Reason: "planned from the community: no request is named",
		NextStep: "deletionctl submit --host " + strconv.Quote(host) + " --by NAME --reason TEXT (refused while it has an open request: deletionctl list shows it)"}
}

// planTables fills the tables: the live registry with the community's rows
// now, in purge order, beside the frozen inventory's counts. Under catalog
// drift nothing is counted now, and the frozen inventory's tables (if any)
// are listed without an order.
func (p *deletionPlan) planTables(ctx context.Context, store *lifecycle.Operator, community uuid.UUID, frozen *lifecycle.FrozenInventory) error {
	var live *lifecycle.SchemaManifest
	if len(p.Drift) == 0 {
		var err error
		if live, err = store.InventorySchema(ctx, community); err != nil && !errors.Is(err, lifecycle.ErrRefused) {
			return err
		}
	}
	schema := live
	if schema == nil && frozen != nil {
		schema = &frozen.Schema
	}
	if schema == nil {
		return nil // nothing to list: the drift section says why
	}
	var order []string
	if live != nil {
		var err error
		if order, err = store.PurgeOrder(ctx); err != nil && !errors.Is(err, lifecycle.ErrRefused) {
			return err
		}
	}
	nullify := slices.Clone(schema.NullifyTables)
	slices.Sort(nullify)
	var names []string
	if order != nil {
		names = slices.Concat(nullify, order)
	}
	for _, t := range schema.ScopedTables {
		if !slices.Contains(names, t) {
			names = append(names, t)
		}
	}
	for i, name := range names {
		t := planTable{Table: name, Action: "delete"}
		if slices.Contains(schema.NullifyTables, name) {
			t.Action = "nullify"
		}
		if order != nil && i < len(nullify)+len(order) {
			n := i + 1
			t.Order = &n
		}
		if live != nil {
			if n, ok := live.RowCounts[name]; ok {
				t.RowsNow = &n
			}
		}
		t.Rows = t.RowsNow
		if frozen != nil {
			t.Rows = nil
			if n, ok := frozen.Schema.RowCounts[name]; ok {
				t.Rows = &n
			}
		}
		p.Tables = append(p.Tables, t)
	}
	return nil
}

// planStorage fills the object prefixes (the frozen inventory's, which the
// approval binds, else the declared layout's for the community) and the
// cache patterns; with a store, each prefix is listed in it.
func (p *deletionPlan) planStorage(ctx context.Context, store *lifecycle.Operator, objectsURL string, tenant lifecycle.TenantKey, frozen *lifecycle.FrozenInventory) error {
	layout, err := store.StorageLayout(ctx)
	if err != nil {
		return err
	}
	expanded := layout.ExpandLayout(tenant)
	for _, pattern := range expanded.CachePatterns {
		p.Cache = append(p.Cache, planPattern{Pattern: pattern})
	}
	for _, t := range layout.Sequences {
		p.Sequences = append(p.Sequences, planSequence{Sequence: lifecycle.ExpandTemplate(t.Template, tenant)})
	}
	prefixes := expanded.ObjectPrefixes
	if frozen != nil {
		prefixes = nil
		for _, pm := range frozen.Storage.Prefixes {
			prefixes = append(prefixes, pm.Prefix)
		}
	}
	var now map[string]lifecycle.PrefixManifest
	if objectsURL != "" && len(prefixes) > 0 {
		objects, err := openObjects(ctx, objectsURL)
		if err != nil {
			return err
		}
		summary, err := executor.SummarizeStorage(ctx, objects, prefixes)
		if err != nil {
			return fmt.Errorf("list the prefixes in the object store: %w", err)
		}
		now = map[string]lifecycle.PrefixManifest{}
		for _, pm := range summary.Prefixes {
			now[pm.Prefix] = pm
		}
	}
	for _, prefix := range prefixes {
		pp := planPrefix{Prefix: prefix}
		if pm, ok := now[prefix]; ok {
			pp.ObjectsNow, pp.BytesNow = &pm.ObjectCount, &pm.TotalBytes
			pp.Objects, pp.Bytes = pp.ObjectsNow, pp.BytesNow
		}
		if frozen != nil {
			i := slices.IndexFunc(frozen.Storage.Prefixes, func(pm lifecycle.PrefixManifest) bool { return pm.Prefix == prefix })
			pm := frozen.Storage.Prefixes[i]
			pp.Objects, pp.Bytes = &pm.ObjectCount, &pm.TotalBytes
		}
		p.Objects = append(p.Objects, pp)
	}
	return nil
}

// planKeySources fills the key sources: the frozen inventory's, which the
// approval binds, else the declared layout's, each with the distinct keys
// the tenant's rows list now beside the frozen count. Under catalog drift
// nothing is read now.
func (p *deletionPlan) planKeySources(ctx context.Context, store *lifecycle.Operator, community uuid.UUID, frozen *lifecycle.FrozenInventory) error {
	now := map[string]uint64{}
	var live []lifecycle.KeySourceManifest
	if len(p.Drift) == 0 {
		var err error
		if live, err = store.InventoryKeySources(ctx, community); err != nil && !errors.Is(err, lifecycle.ErrRefused) {
			return err
		}
		for _, k := range live {
			now[k.Source] = k.ObjectCount
		}
	}
	sources := live
	if frozen != nil {
		sources = frozen.Storage.KeySources
	}
	for _, k := range sources {
		ks := planKeySource{Source: k.Source}
		if n, ok := now[k.Source]; ok {
			ks.ObjectsNow = &n
		}
		ks.Objects = ks.ObjectsNow
		if frozen != nil {
			n := k.ObjectCount
			ks.Objects = &n
		}
		p.KeySources = append(p.KeySources, ks)
	}
	return nil
}

// total adds the sections up.
func (p *deletionPlan) total() {
	p.Totals = planTotals{Tables: len(p.Tables), Prefixes: len(p.Objects)}
	p.Totals.Rows = sum(p.Tables, func(t planTable) *int64 { return t.Rows })
	p.Totals.RowsNow = sum(p.Tables, func(t planTable) *int64 { return t.RowsNow })
	p.Totals.Objects = sum(p.Objects, func(o planPrefix) *uint64 { return o.Objects })
	p.Totals.ObjectsNow = sum(p.Objects, func(o planPrefix) *uint64 { return o.ObjectsNow })
	p.Totals.KeySources = len(p.KeySources)
	p.Totals.Keys = sum(p.KeySources, func(k planKeySource) *uint64 { return k.Objects })
	p.Totals.KeysNow = sum(p.KeySources, func(k planKeySource) *uint64 { return k.ObjectsNow })
}

// sum adds what of returns over items, or nil when any is nil.
func sum[T any, N int64 | uint64](items []T, of func(T) *N) *N {
	var total N
	for _, item := range items {
		n := of(item)
		if n == nil {
			return nil
		}
		total += *n
	}
	return &total
}

// writePlan prints p for a person; counted says whether a store was listed.
func writePlan(w io.Writer, p *deletionPlan, counted bool) error {
	what := "the deletion of community " + p.Community.ID
	if p.Community.Host != "" {
		what += " (" + p.Community.Host + ")"
	}
	if p.Request != nil {
		what = fmt.Sprintf("request %s (%s): %s", p.Request.ID, p.Request.Stage, what)
	}
	fmt.Fprintf(w, "plan of %s\n", what)
	fmt.Fprintf(w, "claim: %s: %s\nnext: %s\n", p.Claim.Status, p.Claim.Reason, p.Claim.NextStep)
	switch {
	case p.GraceUntil != nil:
		fmt.Fprintf(w, "grace period: until %s\n", stamp(*p.GraceUntil))
	case p.Request != nil && p.Request.Stage == lifecycle.StageApproved:
		fmt.Fprintln(w, "grace period: none")
	case p.Request == nil || p.Request.Stage == lifecycle.StageSubmitted || p.Request.Stage == lifecycle.StageInventoried:
		fmt.Fprintln(w, "grace period: set at approval (approve --grace, else the deployment's default)")
	}
	fmt.Fprintf(w, "protection: %s\n", p.Protection.describe())
	if p.Source == sourceFrozen {
		fmt.Fprintln(w, "figures: the frozen inventory's, which the approval binds; \"now\" is what the community holds now, all of which is deleted")
	} else {
		fmt.Fprintln(w, "figures: counted now; the inventory freezes them")
	}

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "\ntables, in purge order: %d, %s rows (%s now)\n", p.Totals.Tables, count(p.Totals.Rows), count(p.Totals.RowsNow))
	if len(p.Tables) > 0 {
		fmt.Fprintln(tw, "  ORDER\tTABLE\tACTION\tROWS\tNOW")
	}
	for _, t := range p.Tables {
		order := "-"
		if t.Order != nil {
			order = strconv.Itoa(*t.Order)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", order, t.Table, t.Action, count(t.Rows), count(t.RowsNow))
	}
	if len(p.Tables) == 0 {
		fmt.Fprintln(tw, "  none listed: the catalog drifted (see below)")
	}
	fmt.Fprintf(tw, "\nobjects, under %s: %s (%s now)\n", plural(p.Totals.Prefixes, "prefix", "prefixes"), countObjects(p.Totals.Objects, counted), countObjects(p.Totals.ObjectsNow, counted))
	if len(p.Objects) > 0 {
		fmt.Fprintln(tw, "  PREFIX\tOBJECTS\tBYTES\tNOW")
	}
	for _, o := range p.Objects {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", o.Prefix, countObjects(o.Objects, counted), countObjects(o.Bytes, counted), countObjects(o.ObjectsNow, counted))
	}
	switch {
	case len(p.Objects) == 0 && len(p.KeySources) > 0:
		fmt.Fprintln(tw, "  none: the tenant's objects are the keys its rows list (below)")
	case len(p.Objects) == 0:
		fmt.Fprintln(tw, "  none: no storage layout is declared, and inventory refuses until one is")
	}
	if len(p.KeySources) > 0 {
		fmt.Fprintf(tw, "\nobjects listed in the tenant's rows, in %s: %s (%s now)\n", plural(p.Totals.KeySources, "column", "columns"),
			countObjects(p.Totals.Keys, true), countObjects(p.Totals.KeysNow, true))
		fmt.Fprintln(tw, "  COLUMN\tKEYS\tNOW")
		for _, k := range p.KeySources {
			fmt.Fprintf(tw, "  %s\t%s\t%s\n", k.Source, countObjects(k.Objects, true), countObjects(k.ObjectsNow, true))
		}
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("plan: write: %w", err)
	}
	if len(p.Cache) == 0 {
		fmt.Fprintln(w, "\ncache: no pattern declared; the executor purges what its --cache URL's patterns name")
	} else {
		fmt.Fprintf(w, "\ncache, %s (keys are not counted ahead):\n", plural(len(p.Cache), "pattern", "patterns"))
		for _, c := range p.Cache {
			fmt.Fprintf(w, "  %s\n", c.Pattern)
		}
	}
	if len(p.Sequences) > 0 {
		fmt.Fprintf(w, "\nper-tenant sequences, dropped: %d\n", len(p.Sequences))
		for _, q := range p.Sequences {
			fmt.Fprintf(w, "  %s\n", q.Sequence)
		}
	}
	fmt.Fprintf(w, "\nexcluded tables, kept: %d\n", len(p.Excluded))
	for _, e := range p.Excluded {
		fmt.Fprintf(w, "  %s (by %s): %s\n", e.Table, e.ExcludedBy, oneLine(e.Reason))
	}
	if len(p.Drift) == 0 {
		fmt.Fprintln(w, "\ncatalog drift: none")
		return nil
	}
	fmt.Fprintf(w, "\ncatalog drift: %s; no deletion destroys anything until each is fixed (deletionctl health):\n", plural(len(p.Drift), "row", "rows"))
	for _, d := range p.Drift {
		fmt.Fprintf(w, "  %s %s\n", d.Table, d.Problem)
	}
	return nil
}

// count renders a row count, or "not counted".
func count(n *int64) string {
	if n == nil {
		return "not counted"
	}
	return strconv.FormatInt(*n, 10)
}

// countObjects renders an object figure, or why it is missing.
func countObjects(n *uint64, counted bool) string {
	switch {
	case n != nil:
		return strconv.FormatUint(*n, 10)
	case counted:
		return "not counted"
	}
	return "not counted (give --objects URL)"
}

// plural is "1 prefix" or "2 prefixes".
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}
