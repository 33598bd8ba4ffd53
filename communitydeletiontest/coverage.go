package communitydeletiontest

import (
	"context"
	"fmt"
	"testing"
)

// driftHints says, per drift class of community_deletion_catalog_drift(),
// what a service does about it.
var driftHints = map[string]string{
	"unregistered": "holds tenant data but is not registered; register it with attach_community_write_fence (purge action 'delete', or 'nullify' for rows kept after a deletion)",
	"unfenced":     "is registered for 'delete' but lacks its write fence; run attach_community_write_fence on it again",
	"missing":      "is registered but does not exist or has no community_id uuid column; restore it or unregister it",
	"shape":        "has the wrong community_id nullability for its purge action: NOT NULL for 'delete', nullable for 'nullify'",
	"stray_fence":  "carries the write fence but is not registered; register it or drop the trigger",
}

// Coverage returns, one line each, what keeps the service's tenant tables
// from being deleted safely: every row of community_deletion_catalog_drift()
// (a table holding tenant data that is unregistered, unfenced, missing,
// misshapen…) with what to do about it, and, when there is no drift, why
// the purge order cannot be computed. No lines means covered; an error means
// the check itself could not run.
func (k *Kit) Coverage(ctx context.Context) ([]string, error) {
	report, err := k.Operator.Health(ctx)
	if err != nil {
		return nil, fmt.Errorf("communitydeletiontest: read the catalog drift: %w", err)
	}
	var problems []string
	for _, d := range report.Drift {
		hint, ok := driftHints[d.Problem]
		if !ok {
			hint = "drifted: " + d.Problem
		}
		problems = append(problems, fmt.Sprintf("table %s %s", d.Table, hint))
	}
	if len(problems) > 0 {
		return problems, nil
	}
	if _, err := k.Engine.PurgeOrder(ctx); err != nil {
		problems = append(problems, fmt.Sprintf("the purge order cannot be computed: %v", err))
	}
	return problems, nil
}

// RequireCoverage fails tb with one line per problem Coverage finds, and
// fatally when the check cannot run. A service's test calls it after its
// migrations to prove every tenant table is registered and fenced.
func (k *Kit) RequireCoverage(tb testing.TB) {
	tb.Helper()
	problems, err := k.Coverage(tb.Context())
	if err != nil {
		tb.Fatal(err)
	}
	for _, p := range problems {
		tb.Error("communitydeletiontest: coverage: " + p)
	}
}
