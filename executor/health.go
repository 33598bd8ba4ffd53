package executor

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// ErrUnhealthy is matched by every error Health returns.
var ErrUnhealthy = errors.New("executor: unhealthy")

// Health reports whether the runner is healthy: nil when the database
// answers (Engine.Ping, bounded by ctx: give it a short deadline) and every
// claim in flight renewed its lease within 2 × HeartbeatInterval (the claim
// itself counts as the first renewal). Otherwise it returns one line matching
// ErrUnhealthy that names each problem. A runner with nothing claimed is
// healthy while the database answers.
func (r *Runner) Health(ctx context.Context) error {
	var problems []string
	if err := r.cfg.Engine.Ping(ctx); err != nil {
		problems = append(problems, "database: "+oneLine(err))
	}
	problems = append(problems, r.staleLeases(time.Now())...)
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrUnhealthy, strings.Join(problems, "; "))
}

// staleLeases names each claim in flight whose last renewal is older than
// 2 × HeartbeatInterval at now.
func (r *Runner) staleLeases(now time.Time) []string {
	limit := 2 * r.cfg.HeartbeatInterval
	r.mu.Lock()
	defer r.mu.Unlock()
	var problems []string
	for j := range r.jobs {
		j.mu.Lock()
		age := now.Sub(j.lastRenewal)
		j.mu.Unlock()
		if age > limit {
			problems = append(problems, fmt.Sprintf("lease of deletion %s last renewed %s ago (more than 2 × the heartbeat interval %s)",
				j.req.ID, age.Round(time.Millisecond), r.cfg.HeartbeatInterval))
		}
	}
	return problems
}

// inFlight returns how many claims are in flight and, of those, the longest
// time since one reported progress (0 with none).
func (r *Runner) inFlight(now time.Time) (int, time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var longest time.Duration
	for j := range r.jobs {
		j.mu.Lock()
		longest = max(longest, now.Sub(j.lastEvent))
		j.mu.Unlock()
	}
	return len(r.jobs), longest
}

// track adds j to the claims in flight; the returned func removes it.
func (r *Runner) track(j *job) func() {
	now := time.Now()
	j.mu.Lock()
	j.lastEvent, j.lastRenewal = now, now
	j.mu.Unlock()
	r.mu.Lock()
	r.jobs[j] = struct{}{}
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		delete(r.jobs, j)
		r.mu.Unlock()
	}
}
