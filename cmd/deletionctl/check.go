package main

import (
	"context"
	"fmt"
	"io"

	"github.com/tombstoneworks/communitydeletion/internal/adoptcheck"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// checkReport is the JSON output of check --json.
type checkReport struct {
	// OK is true when no check found a problem.
	OK bool `json:"ok"`
	// Checks are the checks in the order they ran.
	Checks []checkResult `json:"checks"`
	// Problems are every check's problem lines, in order.
	Problems []string `json:"problems"`
}

type checkResult struct {
	Name     string   `json:"name"`
	Status   string   `json:"status"` // ok, problem or skipped
	Detail   string   `json:"detail,omitempty"`
	Problems []string `json:"problems"`
}

// check runs the adoption checks (package adoptcheck, as
// communitydeletiontest's Coverage does, plus the declared storage layout
// inventories require) as the operator, prints "ok: …" per passed check and
// one line per problem (or the JSON report), and refuses (exit 3) when any
// check found a problem.
func check(ctx context.Context, store *lifecycle.Operator, cfg config, stdout io.Writer) error {
	results, err := adoptcheck.Run(ctx, adoptcheck.Sources{
		Drift: func(ctx context.Context) ([]lifecycle.DriftFinding, error) {
			report, err := store.Health(ctx)
			if err != nil {
				return nil, err
			}
			return report.Drift, nil
		},
		PurgeOrder: store.PurgeOrder,
		Layout:     store.StorageLayout,
	})
	if err != nil {
		return fmt.Errorf("check: %w", err)
	}
	problems := adoptcheck.Problems(results)
	if cfg.json {
		out := checkReport{OK: len(problems) == 0, Checks: []checkResult{}, Problems: []string{}}
		out.Problems = append(out.Problems, problems...)
		for _, r := range results {
			out.Checks = append(out.Checks, checkResult{Name: r.Name, Status: string(r.Status), Detail: r.Detail,
				Problems: append([]string{}, r.Problems...)})
		}
		if err := writeJSON(stdout, out); err != nil {
			return fmt.Errorf("check: %w", err)
		}
	} else {
		for _, r := range results {
			switch r.Status {
			case adoptcheck.StatusOK:
				fmt.Fprintf(stdout, "ok: %s\n", r.Detail)
			case adoptcheck.StatusSkipped:
				fmt.Fprintf(stdout, "skipped: %s: %s\n", r.Name, r.Detail)
			case adoptcheck.StatusProblem:
				for _, p := range r.Problems {
					fmt.Fprintf(stdout, "problem: %s\n", oneLine(p))
				}
			}
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("check: %d problem(s) (listed on stdout); fix each as it says and run check again: %w",
			len(problems), lifecycle.ErrRefused)
	}
	return nil
}
