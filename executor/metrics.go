package executor

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// MetricsNamespace prefixes every metric name the runner exports:
// community_deletion_executor_….
const MetricsNamespace = "community_deletion_executor"

// Outcomes of a run, the outcome label of deletions_total.
const (
	OutcomeCompleted = "completed"  // the request reached retention_pending
	OutcomeRetry     = "retry"      // a retryable failure was recorded; claimable again after a backoff
	OutcomeBlocked   = "blocked"    // blocked durably: a refusal, the retry budget spent, or catalog drift at the claim
	OutcomeLeaseLost = "lease_lost" // the lease was taken over or expired; the run stopped acting
	OutcomeStopped   = "stopped"    // the context ended; the claim was released
	OutcomeError     = "error"      // recording the failure itself failed
)

// Causes of a durable block, the cause label of blocks_total.
const (
	BlockRefused      = "refused"      // a fail-closed refusal blocked at once
	BlockRetryBudget  = "retry_budget" // the lifecycle.MaxConsecutiveRetries-th failure at one stage
	BlockCatalogDrift = "catalog_drift"
)

// stageUnknown labels a drift-blocked claim, whose stage the claim does not
// return.
const stageUnknown = "unknown"

// metrics are the runner's Prometheus collectors. They exist (and count)
// whether or not Config.Metrics registered them.
type metrics struct {
	claims          prometheus.Counter
	deletions       *prometheus.CounterVec   // stage, outcome
	stageDuration   *prometheus.HistogramVec // stage
	rowsPurged      *prometheus.CounterVec   // table
	pauses          *prometheus.CounterVec   // activity, cause
	overCap         *prometheus.CounterVec   // table
	objectsDeleted  prometheus.Counter
	chunksDeleted   prometheus.Counter
	cacheKeys       prometheus.Counter
	retries         *prometheus.CounterVec // stage
	blocks          *prometheus.CounterVec // stage, cause
	renewals        prometheus.Counter
	renewalFailures prometheus.Counter
	leaseLosses     prometheus.Counter
	fenceWait       prometheus.Histogram
	inFlight        prometheus.GaugeFunc
	sinceProgress   prometheus.GaugeFunc
	inGrace         prometheus.GaugeFunc
}

// durationBuckets span 10ms to about two hours.
var durationBuckets = prometheus.ExponentialBucketsRange(0.01, 7200, 14)

func newMetrics(r *Runner) *metrics {
	name := func(n string) prometheus.Opts {
		return prometheus.Opts{Namespace: MetricsNamespace, Name: n}
	}
	counter := func(n, help string) prometheus.Counter {
		o := name(n)
		o.Help = help
		return prometheus.NewCounter(prometheus.CounterOpts(o))
	}
	counterVec := func(n, help string, labels ...string) *prometheus.CounterVec {
		o := name(n)
		o.Help = help
		return prometheus.NewCounterVec(prometheus.CounterOpts(o), labels)
	}
	return &metrics{
		claims: counter("claims_total", "Deletion requests this runner claimed."),
		deletions: counterVec("deletions_total",
			"Runs of a claimed deletion by the stage the run ended at and its outcome (completed, retry, blocked, lease_lost, stopped, error).",
			"stage", "outcome"),
		stageDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: MetricsNamespace, Name: "stage_duration_seconds", Buckets: durationBuckets,
			Help: "Time one run took to move a request out of a stage, by that stage (approved: quiesce, drain and fence; fenced: list and freeze the keys; drained: delete the objects; bindings_removed: the PostgreSQL purge; …).",
		}, []string{"stage"}),
		rowsPurged: counterVec("rows_purged_total",
			"Rows this runner deleted (or, for a nullify table, cleared) by registered table.", "table"),
		overCap: counterVec("purge_batches_over_cap_total",
			"Purge batches that ran past their statement cap (twice the purge's TxBudget), were rolled back and were tried again smaller, by registered table.", "table"),
		pauses: counterVec("pauses_total",
			"Pauses before a write to the database, by activity (listing, object_deletion, purge) and cause (replication_lag, wraparound_vacuum, rate_cap); a pause that gains a cause counts again for it.", "activity", "cause"),
		objectsDeleted: counter("objects_deleted_total", "Object-store keys in manifest chunks this runner deleted and stamped."),
		chunksDeleted:  counter("manifest_chunks_deleted_total", "Manifest key chunks this runner deleted and stamped."),
		cacheKeys:      counter("cache_keys_deleted_total", "Cache keys the cache purges of this runner removed."),
		retries: counterVec("retries_total",
			"Retryable failures this runner recorded, by stage (each releases the claim until its backoff ends).", "stage"),
		blocks: counterVec("blocks_total",
			"Requests this runner saw blocked durably, by stage and cause (refused, retry_budget, catalog_drift).", "stage", "cause"),
		renewals:        counter("lease_renewals_total", "Successful lease renewals (heartbeats)."),
		renewalFailures: counter("lease_renewal_failures_total", "Heartbeats that failed without proving the lease lost (the database did not answer, a lock wait)."),
		leaseLosses:     counter("lease_losses_total", "Claims lost to a takeover or an expiry; the run stopped acting on them."),
		fenceWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: MetricsNamespace, Name: "fence_wait_seconds", Buckets: durationBuckets,
			Help: "Time from BeginQuiescing to a committed fence: the wait for serving writes to drain.",
		}),
		inFlight: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: MetricsNamespace, Name: "claims_in_flight",
			Help: "Claims this runner is driving now.",
		}, func() float64 { n, _ := r.inFlight(time.Now()); return float64(n) }),
		sinceProgress: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: MetricsNamespace, Name: "seconds_since_progress",
			Help: "Seconds since the claim in flight that progressed least recently last reported progress (any event: a claim, a listed or deleted chunk, a purge batch, a stage); 0 when no claim is in flight.",
		}, func() float64 { _, d := r.inFlight(time.Now()); return d.Seconds() }),
		inGrace: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: MetricsNamespace, Name: "requests_in_grace",
			Help: "Approved, unblocked requests waiting for their grace period to end (read from the database at each scrape; NaN when it did not answer within 2s).",
		}, r.requestsInGrace),
	}
}

// requestsInGrace reads the number of requests in their grace period, bounded
// by a short timeout so that a slow database cannot stall a scrape.
func (r *Runner) requestsInGrace() float64 {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	n, err := r.cfg.Engine.RequestsInGrace(ctx)
	if err != nil {
		return math.NaN()
	}
	return float64(n)
}

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{
		m.claims, m.deletions, m.stageDuration, m.rowsPurged, m.overCap, m.pauses, m.objectsDeleted, m.chunksDeleted, m.cacheKeys,
		m.retries, m.blocks, m.renewals, m.renewalFailures, m.leaseLosses, m.fenceWait, m.inFlight, m.sinceProgress, m.inGrace,
	}
}

// register registers every collector with reg, or none.
func (m *metrics) register(reg prometheus.Registerer) error {
	var done []prometheus.Collector
	for _, c := range m.collectors() {
		if err := reg.Register(c); err != nil {
			for _, d := range done {
				reg.Unregister(d)
			}
			return fmt.Errorf("Metrics: %v (give each Runner its own registry, or wrap it with prometheus.WrapRegistererWith)", err) //nolint:staticcheck // names the Config field Metrics
		}
		done = append(done, c)
	}
	return nil
}
