package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime/metrics"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// latencies are the bystander's single-row writes and reads of one phase.
type latencies struct {
	writes, reads []time.Duration
	errors        int
}

// quantile returns the q-quantile of d (0 when empty).
func quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(int(q*float64(len(s))), len(s)-1)]
}

// plus is l and m pooled.
func (l latencies) plus(m latencies) latencies {
	return latencies{
		writes: append(slices.Clone(l.writes), m.writes...),
		reads:  append(slices.Clone(l.reads), m.reads...),
		errors: l.errors + m.errors,
	}
}

// bystanderLoad is traffic of another tenant beside a purge, in a child
// process of its own (this program, with bystanderEnv set), as another
// service's would be: the executor's garbage collector and the heap
// sampling do not touch its latencies. Each of its workers alternates a
// single-row INSERT into a fenced tenant table and a primary-key SELECT of
// one of the tenant's messages, with a short pause between (a closed loop at
// a modest rate, so that the load itself does not saturate a small
// machine).
type bystanderLoad struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	result chan loadResult
}

type loadResult struct {
	l   latencies
	err error
}

// loadWorkers and loadPause shape the bystander's traffic.
const (
	loadWorkers = 4
	loadPause   = 2 * time.Millisecond
)

// startLoad starts the bystander's traffic on the database at url and
// returns once it runs.
func startLoad(ctx context.Context, url string) (*bystanderLoad, error) {
	cmd := exec.CommandContext(ctx, os.Args[0]) //nolint:gosec // re-runs this benchmark's own binary as the bystander
	cmd.Env = append(os.Environ(), bystanderEnv+"="+url)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the bystander: %w", err)
	}
	b := &bystanderLoad{cmd: cmd, stdin: stdin, result: make(chan loadResult, 1)}
	ready := make(chan error, 1)
	go func() {
		dec := json.NewDecoder(stdout)
		var hello string
		if err := dec.Decode(&hello); err != nil || hello != "ready" {
			ready <- fmt.Errorf("the bystander did not start: %v", err)
			b.result <- loadResult{err: errors.New("the bystander did not start")}
			return
		}
		ready <- nil
		var report loadReport
		err := dec.Decode(&report) //nolint:musttag // encoded by the bystander with the same struct
		if waitErr := cmd.Wait(); err == nil {
			err = waitErr
		}
		b.result <- loadResult{l: report.latencies(), err: err}
	}()
	if err := <-ready; err != nil {
		_ = cmd.Wait()
		return nil, err
	}
	return b, nil
}

// finish stops the traffic and returns its latencies.
func (b *bystanderLoad) finish() (latencies, error) {
	b.stdin.Close()
	r := <-b.result
	if r.err != nil {
		return latencies{}, fmt.Errorf("bystander: %w", r.err)
	}
	return r.l, nil
}

// idleLoad measures the bystander's traffic alone for d.
func idleLoad(ctx context.Context, url string, d time.Duration) (latencies, error) {
	b, err := startLoad(ctx, url)
	if err != nil {
		return latencies{}, err
	}
	time.Sleep(d)
	return b.finish()
}

// loadReport is what the bystander process writes when its stdin closes.
type loadReport struct {
	Writes, Reads []int64 // nanoseconds
	Errors        int
}

func (r loadReport) latencies() latencies {
	l := latencies{errors: r.Errors}
	for _, w := range r.Writes {
		l.writes = append(l.writes, time.Duration(w))
	}
	for _, rd := range r.Reads {
		l.reads = append(l.reads, time.Duration(rd))
	}
	return l
}

// bystanderEnv, set to a database URL, makes this program (or its test
// binary) the bystander process.
const bystanderEnv = "BENCH_PURGE_BYSTANDER"

// runIfBystander runs the bystander process and exits when bystanderEnv is
// set; otherwise it returns.
func runIfBystander() {
	url := os.Getenv(bystanderEnv)
	if url == "" {
		return
	}
	if err := runBystander(url); err != nil {
		fmt.Fprintf(os.Stderr, "bystander: %v\n", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// runBystander is the bystander process: it runs the traffic on the
// database at url, writes "ready" once it runs and, when stdin closes, its
// latencies, all as JSON on stdout.
func runBystander(url string) error {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	var ids []int64
	rows, err := pool.Query(ctx, "SELECT id FROM fixture_messages WHERE community_id = $1 ORDER BY id LIMIT 10000", bystander)
	if err != nil {
		return fmt.Errorf("list bystander messages: %w", err)
	}
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return err
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil || len(ids) == 0 {
		return fmt.Errorf("list bystander messages: %v (%d found)", err, len(ids))
	}
	stop := make(chan struct{})
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		report loadReport
	)
	for w := range loadWorkers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7)) //nolint:gosec // w ranges over loadWorkers, never negative
			for {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				_, err := pool.Exec(ctx, "INSERT INTO fixture_activity (community_id, kind) VALUES ($1, 'bystander load')", bystander)
				write := time.Since(start)
				start = time.Now()
				var body string
				rerr := pool.QueryRow(ctx, "SELECT body FROM fixture_messages WHERE id = $1", ids[rng.IntN(len(ids))]).Scan(&body)
				read := time.Since(start)
				mu.Lock()
				if err != nil || rerr != nil {
					report.Errors++
				} else {
					report.Writes = append(report.Writes, int64(write))
					report.Reads = append(report.Reads, int64(read))
				}
				mu.Unlock()
				time.Sleep(loadPause)
			}
		})
	}
	enc := json.NewEncoder(os.Stdout)
	if err := enc.Encode("ready"); err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, os.Stdin) // until the parent closes it
	close(stop)
	wg.Wait()
	return enc.Encode(report) //nolint:musttag // decoded by startLoad with the same struct: field names are the keys
}

// heapSampler tracks the process's peak heap in use while it runs, read
// through runtime/metrics, which does not stop the world.
type heapSampler struct {
	stop chan struct{}
	done chan struct{}
	peak uint64
}

func sampleHeap() *heapSampler {
	h := &heapSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(h.done)
		ticker := time.NewTicker(20 * time.Millisecond)
		defer ticker.Stop()
		for {
			h.peak = max(h.peak, heapInUse())
			select {
			case <-h.stop:
				return
			case <-ticker.C:
			}
		}
	}()
	return h
}

// finish stops sampling and returns the peak.
func (h *heapSampler) finish() uint64 {
	close(h.stop)
	<-h.done
	return h.peak
}

// heapInUse is the heap's bytes in in-use spans (runtime.MemStats'
// HeapInuse): its live and not yet swept objects and the free space in
// their spans.
func heapInUse() uint64 {
	samples := []metrics.Sample{
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/heap/unused:bytes"},
	}
	metrics.Read(samples)
	return samples[0].Value.Uint64() + samples[1].Value.Uint64()
}
