package communitydeletiontest

import (
	"context"
	"fmt"
	"testing"

	"github.com/tombstoneworks/communitydeletion/internal/adoptcheck"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// Coverage returns, one line each, what keeps the service's tenant tables
// from being deleted safely: every row of community_deletion_catalog_drift()
// (a table holding tenant data that is unregistered, unfenced, missing,
// misshapen…) with what to do about it, and, when there is no drift, why
// the purge order cannot be computed. No lines means covered; an error means
// the check itself could not run. deletionctl check runs the same checks.
func (k *Kit) Coverage(ctx context.Context) ([]string, error) {
	results, err := adoptcheck.Run(ctx, adoptcheck.Sources{
		Drift: func(ctx context.Context) ([]lifecycle.DriftFinding, error) {
			report, err := k.Operator.Health(ctx)
			if err != nil {
				return nil, err
			}
			return report.Drift, nil
		},
		PurgeOrder: k.Engine.PurgeOrder,
	})
	if err != nil {
		return nil, fmt.Errorf("communitydeletiontest: %w", err)
	}
	return adoptcheck.Problems(results), nil
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
