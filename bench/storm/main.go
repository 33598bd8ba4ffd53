// Command storm measures the write fence under a storm of writers: 16
// connections write single rows into the target community and 16 into a
// bystander, as fast as they can, while the executor quiesces and then
// fences the target. It prints, side by side:
//
//   - how long BeginQuiescing and EnterFenced took, from the call to the
//     return, and how long after each call the last target write was still
//     admitted;
//   - the bystander's write latency (p50, p99) before the fence and during
//     it;
//   - the proof: every target write that was admitted started before the
//     step that refuses it returned (unleased writes stop at quiescing),
//     and every target write that started after the fence was refused.
//
// Target: the bystander's p99 during the fence <= 1.5x its p99 before.
//
// Run it with: go run ./bench/storm
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tombstoneworks/communitydeletion/internal/ephemeralpg"
	"github.com/tombstoneworks/communitydeletion/internal/fixture"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// maxBystanderRatio is the target: the bystander's p99 during the fence
// over its p99 before.
const maxBystanderRatio = 1.5

// settings are the storm's shape.
type settings struct {
	writers int           // per community
	before  time.Duration // the storm alone, before the steps
	after   time.Duration // the storm after the fence
}

func main() {
	var s settings
	flag.IntVar(&s.writers, "writers", 16, "writer connections per community")
	flag.DurationVar(&s.before, "before", 3*time.Second, "how long the storm runs before quiescing")
	flag.DurationVar(&s.after, "after", time.Second, "how long the storm runs after the fence")
	strict := flag.Bool("strict", false, "exit 1 when the target is missed")
	flag.Parse()
	ok, err := storm(context.Background(), os.Stdout, s)
	if err != nil {
		fmt.Fprintf(os.Stderr, "storm benchmark: %v\n", err)
		os.Exit(1)
	}
	if !ok && *strict {
		os.Exit(1)
	}
}

// write is one writer's statement: when it started and ended, and whether
// it was admitted.
type write struct {
	start, end time.Time
	admitted   bool
}

// writers hammer one community until stopped.
type writers struct {
	stop chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	log  []write
	errs []error
}

func startWriters(ctx context.Context, pool *pgxpool.Pool, community uuid.UUID, n int) *writers {
	w := &writers{stop: make(chan struct{})}
	for range n {
		w.wg.Go(func() {
			for {
				select {
				case <-w.stop:
					return
				default:
				}
				start := time.Now()
				_, err := pool.Exec(ctx, "INSERT INTO fixture_activity (community_id, kind) VALUES ($1, 'storm')", community)
				end := time.Now()
				w.mu.Lock()
				w.log = append(w.log, write{start: start, end: end, admitted: err == nil})
				if err != nil && !lifecycle.IsWriteFenceRefusal(err) {
					w.errs = append(w.errs, err)
				}
				w.mu.Unlock()
			}
		})
	}
	return w
}

func (w *writers) finish() []write {
	close(w.stop)
	w.wg.Wait()
	return w.log
}

// p returns the q-quantile of the durations of the writes in [from, to).
func p(log []write, from, to time.Time, q float64) time.Duration {
	var d []time.Duration
	for _, w := range log {
		if !w.start.Before(from) && w.start.Before(to) && w.admitted {
			d = append(d, w.end.Sub(w.start))
		}
	}
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[min(int(q*float64(len(d))), len(d)-1)]
}

func storm(ctx context.Context, out io.Writer, s settings) (bool, error) {
	server, err := ephemeralpg.Start(ctx, ephemeralpg.Options{ExtraConfig: map[string]string{"max_connections": "200"}})
	if err != nil {
		return false, fmt.Errorf("start server: %w", err)
	}
	defer server.Close(ctx)
	url, drop, err := server.NewDatabase(ctx, fixture.Template{WithFixture: true})
	if err != nil {
		return false, err
	}
	defer func() { _ = drop(ctx) }()
	if err := fixture.EnsureRoles(ctx, url); err != nil {
		return false, err
	}
	pools := map[fixture.Role]*pgxpool.Pool{}
	for _, role := range []fixture.Role{fixture.RoleOperator, fixture.RoleApprover, fixture.RoleExecutor, fixture.RoleServing} {
		roleURL, err := fixture.RoleConnString(url, role)
		if err != nil {
			return false, err
		}
		config, err := pgxpool.ParseConfig(roleURL)
		if err != nil {
			return false, err
		}
		config.MaxConns = int32(2*s.writers + 4) //nolint:gosec // writers is a small flag value
		pool, err := pgxpool.NewWithConfig(ctx, config)
		if err != nil {
			return false, err
		}
		defer pool.Close()
		pools[role] = pool
	}
	admin, err := pgxpool.New(ctx, url)
	if err != nil {
		return false, err
	}
	defer admin.Close()
	operator, err := lifecycle.NewOperator(ctx, pools[fixture.RoleOperator], nil)
	if err != nil {
		return false, err
	}
	approver, err := lifecycle.NewOperator(ctx, pools[fixture.RoleApprover], nil)
	if err != nil {
		return false, err
	}
	engine, err := lifecycle.NewEngine(ctx, pools[fixture.RoleExecutor], nil)
	if err != nil {
		return false, err
	}

	target, bystander := uuid.New(), uuid.New()
	for _, c := range []uuid.UUID{target, bystander} {
		if _, err := admin.Exec(ctx, "INSERT INTO community_deletion.communities (id, host) VALUES ($1, $2)", c, "storm-"+c.String()+".example"); err != nil {
			return false, err
		}
	}
	request, err := operator.Submit(ctx, "storm-"+target.String()+".example", "alice", "storm")
	if err != nil {
		return false, err
	}
	schema, err := operator.InventorySchema(ctx, target)
	if err != nil {
		return false, err
	}
	storage := lifecycle.StorageManifest{Version: lifecycle.StorageManifestVersion, Prefixes: []lifecycle.PrefixManifest{
		{Prefix: "media/" + target.String() + "/", KeysDigest: lifecycle.EmptyKeysDigest}}}
	if _, err := operator.FreezeInventory(ctx, request.ID, lifecycle.FrozenInventory{Schema: *schema, Storage: storage}); err != nil {
		return false, err
	}
	if _, err := approver.Approve(ctx, request.ID, "bob", "storm"); err != nil {
		return false, err
	}
	claim, err := engine.ClaimRequest(ctx, request.ID, "executor-1", lifecycle.MaxLeaseDuration)
	if err != nil {
		return false, err
	}

	serving := pools[fixture.RoleServing]
	targetWriters := startWriters(ctx, serving, target, s.writers)
	bystanderWriters := startWriters(ctx, serving, bystander, s.writers)
	time.Sleep(s.before)

	quiesceCalled := time.Now()
	if err := engine.BeginQuiescing(ctx, claim.Lease); err != nil {
		return false, fmt.Errorf("begin quiescing: %w", err)
	}
	quiesceReturned := time.Now()
	fenceCalled := time.Now()
	generation, err := engine.EnterFenced(ctx, claim.Lease)
	if err != nil {
		return false, fmt.Errorf("fence: %w", err)
	}
	fenceReturned := time.Now()
	time.Sleep(s.after)
	targetLog := targetWriters.finish()
	bystanderLog := bystanderWriters.finish()
	for _, w := range []*writers{targetWriters, bystanderWriters} {
		if len(w.errs) > 0 {
			return false, fmt.Errorf("%d writes failed other than by the fence, e.g. %v", len(w.errs), w.errs[0])
		}
	}

	// The proof, and the last admitted target write.
	var lastAdmitted time.Time
	var admitted, refused, lateAdmitted int
	for _, w := range targetLog {
		if w.admitted {
			admitted++
			if w.end.After(lastAdmitted) {
				lastAdmitted = w.end
			}
			if w.start.After(quiesceReturned) {
				lateAdmitted++
			}
		} else {
			refused++
		}
	}
	var afterFence int
	for _, w := range targetLog {
		if w.start.After(fenceReturned) {
			afterFence++
		}
	}
	var rows int
	if err := admin.QueryRow(ctx, "SELECT count(*) FROM fixture_activity WHERE community_id = $1", target).Scan(&rows); err != nil {
		return false, err
	}
	if rows != admitted {
		return false, fmt.Errorf("the target holds %d rows, but %d writes were admitted", rows, admitted)
	}

	fmt.Fprintf(out, "%d writers on the target community, %d on a bystander, single-row INSERTs into a fenced table, as fast as they go\n\n",
		s.writers, s.writers)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "step\tcall to return\tcall to the last admitted target write\t")
	fmt.Fprintf(tw, "BeginQuiescing\t%s\t%s\t\n", quiesceReturned.Sub(quiesceCalled).Round(time.Microsecond), lastAdmitted.Sub(quiesceCalled).Round(time.Microsecond))
	fmt.Fprintf(tw, "EnterFenced (generation %d)\t%s\t-\t\n", generation, fenceReturned.Sub(fenceCalled).Round(time.Microsecond))
	tw.Flush()

	beforeP50, beforeP99 := p(bystanderLog, quiesceCalled.Add(-s.before), quiesceCalled, 0.5), p(bystanderLog, quiesceCalled.Add(-s.before), quiesceCalled, 0.99)
	duringP50, duringP99 := p(bystanderLog, quiesceCalled, fenceReturned, 0.5), p(bystanderLog, quiesceCalled, fenceReturned, 0.99)
	fmt.Fprintln(out)
	tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "bystander writes\tp50\tp99\t")
	fmt.Fprintf(tw, "before the steps (%s)\t%s\t%s\t\n", s.before, beforeP50.Round(time.Microsecond), beforeP99.Round(time.Microsecond))
	fmt.Fprintf(tw, "during quiescing and the fence\t%s\t%s\t\n", duringP50.Round(time.Microsecond), duringP99.Round(time.Microsecond))
	tw.Flush()

	ok := true
	ratio := float64(duringP99) / float64(max(beforeP99, 1))
	result := "PASS"
	if ratio > maxBystanderRatio {
		result, ok = "MISS", false
	}
	fmt.Fprintf(out, "\nbystander p99 during the steps: %.2fx before (target <= %.1fx) %s\n", ratio, maxBystanderRatio, result)
	fmt.Fprintf(out, "target writes: %d admitted (all before quiescing returned: %d started after it), %d refused; %d started after the fence returned, all refused\n",
		admitted, lateAdmitted, refused, afterFence)
	if lateAdmitted > 0 {
		return false, fmt.Errorf("%d target writes that started after quiescing returned were admitted", lateAdmitted)
	}
	return ok, nil
}
