package adoptcheck_test

import (
	"context"
	"strings"
	"testing"

	"github.com/tombstoneworks/communitydeletion/internal/adoptcheck"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// With nothing registered the drift report has nothing to compare with, so
// its silence is not an "ok": the checks report a problem that names the
// next step, and skip the purge order.
func TestNothingRegisteredIsAProblem(t *testing.T) {
	results, err := adoptcheck.Run(t.Context(), adoptcheck.Sources{
		Drift:      func(context.Context) ([]lifecycle.DriftFinding, error) { return nil, nil },
		PurgeOrder: func(context.Context) ([]string, error) { return nil, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	problems := adoptcheck.Problems(results)
	if len(problems) != 1 || !strings.Contains(problems[0], "declare the service's tenant table with community_deletion.declare_tenant_table(") {
		t.Fatalf("problems %q", problems)
	}
	for _, r := range results {
		if r.Status == adoptcheck.StatusOK {
			t.Fatalf("check %s says ok: %s", r.Name, r.Detail)
		}
	}

	// Once something is registered, the same silence is an ok.
	results, err = adoptcheck.Run(t.Context(), adoptcheck.Sources{
		Drift:      func(context.Context) ([]lifecycle.DriftFinding, error) { return nil, nil },
		PurgeOrder: func(context.Context) ([]string, error) { return []string{"notes"}, nil },
	})
	if err != nil || len(adoptcheck.Problems(results)) != 0 {
		t.Fatalf("with a registered table: %v, %q", err, adoptcheck.Problems(results))
	}
}
