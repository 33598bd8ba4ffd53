// Package adoptcheck holds the adoption checks a service runs after its
// migrations: every catalog drift row, whether the purge order can be
// computed and, where asked, whether a storage layout is declared. The
// public test kit (communitydeletiontest.Kit.Coverage) and deletionctl check
// both run them, so a service's Go tests and its CI without Go agree.
package adoptcheck

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// The checks, by name.
const (
	CheckDrift      = "catalog drift"
	CheckPurgeOrder = "purge order"
	CheckLayout     = "storage layout"
)

// Status is the outcome of one check.
type Status string

const (
	// StatusOK means the check passed.
	StatusOK Status = "ok"
	// StatusProblem means the check found at least one problem.
	StatusProblem Status = "problem"
	// StatusSkipped means the check did not run because an earlier one
	// found problems it depends on.
	StatusSkipped Status = "skipped"
)

// Result is one check's outcome: what passed (Detail) or, one line each,
// what is wrong and what to do about it (Problems).
type Result struct {
	Name     string
	Status   Status
	Detail   string
	Problems []string
}

// Sources are the reads the checks need. Layout nil skips the storage
// layout check (the test kit, whose deletions name their prefixes).
type Sources struct {
	Drift      func(ctx context.Context) ([]lifecycle.DriftFinding, error)
	PurgeOrder func(ctx context.Context) ([]string, error)
	Layout     func(ctx context.Context) (*lifecycle.StorageLayout, error)
}

// driftHints says, per drift class of community_deletion_catalog_drift(),
// what a service does about it.
var driftHints = map[string]string{
	"unregistered":          "holds tenant data but is not registered; register it with community_deletion.attach_community_write_fence (purge action 'delete', or 'nullify' for rows kept after a deletion; name its tenant key column if it is not community_id) or, without a tenant key column, community_deletion.attach_child_table, or exclude it with community_deletion.exclude_table and a reason",
	"unfenced":              "is registered but lacks its write fence ('delete') or kept-row fence ('nullify'); run community_deletion.attach_community_write_fence on it again",
	"missing":               "is registered but does not exist or has no column of the tenant key's kind named by its tenant key; restore it or unregister it",
	"shape":                 "is a 'nullify' table whose tenant key is NOT NULL, so the deletion could not clear it; make it nullable",
	"parents_changed":       "is attached through its parents, but its references to registered tables changed since",
	"stray_fence":           "carries a write or kept-row fence but is not registered with that purge action; register it or drop the trigger",
	"guard_changed":         "is a guard trigger that differs from the one the migrations created; re-create it as the migrations did",
	"trigger_planted":       "is a trigger on a control table that the migrations did not create; drop it",
	"control_table_changed": "is a control table whose indexes, constraints or triggers differ from what the migrations recorded; restore them",
	"function_planted":      "is a function the migrations did not install, named like or overloading theirs or a built-in; drop, rename or move it",
	"operator_planted":      "is an operator in schema community_deletion, where the project installs none; drop it",
	"schema_create_granted": "lets a role other than its owner create objects in schema community_deletion; revoke CREATE from it",
	"schema_usage_missing":  "holds registered tables that a deletion role may not use; grant USAGE on it as the row says",
}

// nextStep marks the drift classes whose detail, when there is one, is the
// next step itself (the exact call to make), which then replaces the
// class's generic hint.
var nextStep = map[string]bool{"unregistered": true, "parents_changed": true}

// shortHints are the generic hints of nextStep's classes, cut to what the
// detail does not say.
var shortHints = map[string]string{
	"unregistered":    "holds tenant data but is not registered",
	"parents_changed": "is attached through its parents, but its references to registered tables changed since",
}

// Run runs the checks in order: drift, then the purge order (skipped while
// there is drift, which it would only repeat), then the layout when
// src.Layout is set. An error means a check could not run at all.
func Run(ctx context.Context, src Sources) ([]Result, error) {
	drift, err := src.Drift(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the catalog drift: %w", err)
	}
	results := []Result{driftResult(drift)}

	order := Result{Name: CheckPurgeOrder}
	var tables []string
	if len(drift) == 0 {
		tables, err = src.PurgeOrder(ctx)
	}
	switch {
	case len(drift) > 0:
		order.Status, order.Detail = StatusSkipped, "fix the catalog drift first"
	case errors.Is(err, lifecycle.ErrRefused):
		order.Status = StatusProblem
		order.Problems = []string{fmt.Sprintf("the purge order cannot be computed: %v", err)}
	case err != nil:
		return nil, fmt.Errorf("compute the purge order: %w", err)
	case len(tables) == 0:
		// Nothing registered: the drift report had nothing to compare with,
		// so its silence says nothing either.
		results[0] = Result{Name: CheckDrift, Status: StatusProblem, Problems: []string{
			"no table is registered, so nothing would be deleted and the drift report has nothing to compare with: " +
				"declare the service's tenant table with community_deletion.declare_tenant_table('your_tenants'), then attach each table that holds a tenant's rows"}}
		order.Status, order.Detail = StatusSkipped, "nothing is registered"
	default:
		order.Status = StatusOK
		order.Detail = "the purge order is computable: " + strings.Join(tables, ", ")
	}
	results = append(results, order)

	if src.Layout != nil {
		layout, err := src.Layout(ctx)
		if err != nil {
			return nil, err
		}
		results = append(results, layoutResult(layout))
	}
	return results, nil
}

func driftResult(drift []lifecycle.DriftFinding) Result {
	r := Result{Name: CheckDrift, Status: StatusOK,
		Detail: "no catalog drift: every table holding tenant data is registered and fenced"}
	for _, d := range drift {
		// A problem is its kind, optionally followed by ": detail".
		kind, detail, _ := strings.Cut(d.Problem, ": ")
		hint, ok := driftHints[kind]
		switch {
		case !ok:
			hint = "drifted: " + d.Problem
		case nextStep[kind] && detail != "":
			// The detail is the one next step: the call that fixes it.
			hint = shortHints[kind] + ": " + detail
		case detail != "":
			hint += " (" + detail + ")"
		}
		r.Status, r.Detail = StatusProblem, ""
		r.Problems = append(r.Problems, fmt.Sprintf("table %s %s", d.Table, hint))
	}
	return r
}

func layoutResult(layout *lifecycle.StorageLayout) Result {
	r := Result{Name: CheckLayout}
	if err := layout.RequireObjects(); err != nil {
		r.Status = StatusProblem
		r.Problems = []string{strings.TrimPrefix(err.Error(), lifecycle.ErrRefused.Error()+": ")}
		return r
	}
	var templates []string
	for _, t := range layout.Objects {
		templates = append(templates, t.Template)
	}
	for _, t := range layout.Cache {
		templates = append(templates, t.Template)
	}
	r.Status = StatusOK
	r.Detail = fmt.Sprintf("a storage layout is declared: %d object and %d cache template(s): %s",
		len(layout.Objects), len(layout.Cache), strings.Join(templates, ", "))
	return r
}

// Problems returns every problem line of results, in order.
func Problems(results []Result) []string {
	var out []string
	for _, r := range results {
		out = append(out, r.Problems...)
	}
	return out
}
