package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
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

func (l latencies) String() string {
	return fmt.Sprintf("write p50 %s p99 %s, read p50 %s p99 %s (%d writes, %d reads)",
		quantile(l.writes, 0.5).Round(time.Microsecond), quantile(l.writes, 0.99).Round(time.Microsecond),
		quantile(l.reads, 0.5).Round(time.Microsecond), quantile(l.reads, 0.99).Round(time.Microsecond),
		len(l.writes), len(l.reads))
}

// bystanderLoad is traffic of another tenant beside a purge: each worker
// alternates a single-row INSERT into a fenced tenant table and a
// primary-key SELECT of one of the tenant's messages, with a short pause
// between (a closed loop at a modest rate, so that the load itself does not
// saturate a small machine).
type bystanderLoad struct {
	stop chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	l    latencies
}

// loadWorkers and loadPause shape the bystander's traffic.
const (
	loadWorkers = 4
	loadPause   = 2 * time.Millisecond
)

// startLoad starts the bystander's traffic on pool.
func startLoad(ctx context.Context, pool *pgxpool.Pool) (*bystanderLoad, error) {
	var ids []int64
	rows, err := pool.Query(ctx, "SELECT id FROM fixture_messages WHERE community_id = $1 ORDER BY id LIMIT 10000", bystander)
	if err != nil {
		return nil, fmt.Errorf("list bystander messages: %w", err)
	}
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil || len(ids) == 0 {
		return nil, fmt.Errorf("list bystander messages: %v (%d found)", err, len(ids))
	}
	b := &bystanderLoad{stop: make(chan struct{})}
	for w := range loadWorkers {
		b.wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for {
				select {
				case <-b.stop:
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
				b.mu.Lock()
				if err != nil || rerr != nil {
					b.l.errors++
				} else {
					b.l.writes = append(b.l.writes, write)
					b.l.reads = append(b.l.reads, read)
				}
				b.mu.Unlock()
				time.Sleep(loadPause)
			}
		})
	}
	return b, nil
}

// finish stops the traffic and returns its latencies.
func (b *bystanderLoad) finish() latencies {
	close(b.stop)
	b.wg.Wait()
	return b.l
}

// idleLoad measures the bystander's traffic alone for d.
func idleLoad(ctx context.Context, pool *pgxpool.Pool, d time.Duration) (latencies, error) {
	b, err := startLoad(ctx, pool)
	if err != nil {
		return latencies{}, err
	}
	time.Sleep(d)
	return b.finish(), nil
}

// heapSampler tracks the process's peak heap in use while it runs.
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
		var m runtime.MemStats
		for {
			runtime.ReadMemStats(&m)
			h.peak = max(h.peak, m.HeapInuse)
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
