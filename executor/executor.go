package executor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// Defaults of Config.
const (
	DefaultDrainTimeout = 30 * time.Second
	DefaultChunkSize    = 1000
	DefaultRetryBase    = time.Second
	DefaultRetryMax     = 5 * time.Minute
	DefaultPollInterval = time.Second
)

var (
	// ErrRetryScheduled reports that a run recorded a retryable failure:
	// the request was released and becomes claimable again after a backoff
	// (or was blocked by the store on the last allowed attempt).
	ErrRetryScheduled = errors.New("executor: retry scheduled")
	// ErrBlocked reports that a run durably blocked the request after a
	// fail-closed refusal; an operator must Unblock it.
	ErrBlocked = errors.New("executor: blocked")
	// ErrLayoutMismatch reports that the cache purges other key patterns
	// than the storage layout the deployment declared, or, not being a
	// LayoutCache (the in-process cache, a cache without patterns), cannot
	// list the declared cache templates at all: the runner refuses to run
	// rather than miss a tenant's keys or claim a check it did not make.
	ErrLayoutMismatch = errors.New("executor: the cache does not match the declared storage layout")
	// ErrReceiptKey reports that the runner's receipt signing key is not
	// what the deployment requires (lifecycle.Engine.CheckReceiptKey): the
	// runner refuses to run rather than write receipts the chain refuses
	// or an unsigned receipt after signed ones.
	ErrReceiptKey = errors.New("executor: the receipt signing key is not the deployment's")
)

// Config configures a Runner.
type Config struct {
	// Engine is the lifecycle engine, over a pool whose login is a member of
	// community_deletion_executor. Required. Give it lifecycle.Opts.ReceiptKey
	// to sign the receipt each completed deletion writes (else unsigned):
	// where the deployment registered a key, the runner refuses to run
	// without it (ErrReceiptKey).
	Engine *lifecycle.Engine
	// Objects is the object store holding the communities' files. Required.
	Objects ObjectStore
	// Cache is the cache holding the communities' entries. Required. Only a
	// LayoutCache (one that names its key patterns) counts as verified in a
	// receipt; where the deployment declares cache templates, the runner
	// refuses any other (ErrLayoutMismatch).
	Cache Cache
	// Owner is the executor identity claims and heartbeats are recorded
	// under. Required; at most lifecycle.MaxOperatorBytes after trimming.
	Owner string
	// Prefixes returns a tenant's object-store key prefixes, each ending in
	// "/" and naming the tenant's key. They must be exactly the prefixes of
	// the request's approved inventory (the runner refuses to delete
	// anything else). When nil, the approved inventory's prefixes are used.
	Prefixes func(tenant lifecycle.TenantKey) []string
	// LeaseDuration is the claim length; default lifecycle.DefaultLeaseDuration.
	LeaseDuration time.Duration
	// HeartbeatInterval is how often the lease is renewed while working;
	// default LeaseDuration/3. It must be shorter than LeaseDuration.
	HeartbeatInterval time.Duration
	// DrainTimeout bounds the wait for serving writes to drain before the
	// fence; on timeout a retry is recorded. Default 30s.
	DrainTimeout time.Duration
	// ChunkSize is the number of keys per persisted manifest chunk (and per
	// ObjectStore.Delete call); default 1000, at most
	// lifecycle.MaxManifestChunkKeys.
	ChunkSize int
	// RetryBase and RetryMax shape the backoff after a retryable failure:
	// RetryBase*2^retry_count, capped at RetryMax, with jitter. Defaults 1s
	// and 5m.
	RetryBase, RetryMax time.Duration
	// PollInterval is how long Run sleeps when nothing is claimable (or after
	// an unexpected error); default 1s.
	PollInterval time.Duration
	// Purge bounds the PostgreSQL purge transactions. Its Progress, if set,
	// is called as well as the runner's own.
	Purge lifecycle.PurgeOptions
	// Progress, if not nil, receives the runner's events, synchronously on
	// the working goroutine: it must return quickly.
	Progress func(Event)
	// Logger receives the runner's structured log: a record per event (see
	// docs/executor.md, "Running the executor"), each about a claim carrying
	// request_id, community_id, stage, lease_generation and executor.
	// Per-chunk and per-batch records are at Debug, stage changes at Info,
	// retries and lost leases at Warn, blocks at Error. Nil discards them.
	Logger *slog.Logger
	// Metrics, if not nil, is where New registers the runner's Prometheus
	// collectors (named community_deletion_executor_…; see MetricsNamespace).
	// Each Runner needs a registry of its own, or one wrapped with
	// prometheus.WrapRegistererWith; nil exports nothing.
	Metrics prometheus.Registerer
}

// Event reports the runner's progress on one request.
type Event struct {
	// RequestID is the request worked on.
	RequestID uuid.UUID
	// Stage is the request's stage when the event happened.
	Stage lifecycle.Stage
	// Message says what happened, on one line.
	Message string
	// TablesRows are the rows purged so far per table, during the purge.
	TablesRows map[string]int64
	// Paused, when not empty, says why the purge waits before its next
	// batch (a replica's lag, a wraparound vacuum, the rate cap).
	Paused string
	// ChunksDone and ChunksTotal count the manifest key chunks deleted and
	// persisted, while deleting objects.
	ChunksDone, ChunksTotal int64
}

// Runner drives claimed deletions. It is safe to call RunNext and RunRequest from
// several goroutines; each call works on its own claim.
type Runner struct {
	cfg     Config
	log     *slog.Logger
	metrics *metrics

	mu   sync.Mutex
	jobs map[*job]struct{} // the claims in flight

	signingLogged sync.Once // the receipt signing note is logged once
}

// New validates cfg, fills in its defaults and returns a Runner.
func New(cfg Config) (*Runner, error) {
	var problems []string
	if cfg.Engine == nil {
		problems = append(problems, "Engine is nil")
	}
	if cfg.Objects == nil {
		problems = append(problems, "Objects is nil")
	}
	if cfg.Cache == nil {
		problems = append(problems, "Cache is nil")
	}
	cfg.Owner = strings.TrimSpace(cfg.Owner)
	if cfg.Owner == "" {
		problems = append(problems, "Owner is empty")
	} else if len(cfg.Owner) > lifecycle.MaxOperatorBytes {
		problems = append(problems, fmt.Sprintf("Owner is longer than %d bytes", lifecycle.MaxOperatorBytes))
	}
	if cfg.LeaseDuration == 0 {
		cfg.LeaseDuration = lifecycle.DefaultLeaseDuration
	}
	if cfg.LeaseDuration < time.Second {
		problems = append(problems, "LeaseDuration is shorter than 1s")
	}
	if cfg.HeartbeatInterval == 0 {
		cfg.HeartbeatInterval = cfg.LeaseDuration / 3
	}
	if cfg.HeartbeatInterval <= 0 || cfg.HeartbeatInterval >= cfg.LeaseDuration {
		problems = append(problems, "HeartbeatInterval must be positive and shorter than LeaseDuration")
	}
	if cfg.DrainTimeout == 0 {
		cfg.DrainTimeout = DefaultDrainTimeout
	}
	if cfg.DrainTimeout < 0 {
		problems = append(problems, "DrainTimeout is negative")
	}
	if cfg.ChunkSize == 0 {
		cfg.ChunkSize = DefaultChunkSize
	}
	if cfg.ChunkSize < 0 || cfg.ChunkSize > lifecycle.MaxManifestChunkKeys {
		problems = append(problems, fmt.Sprintf("ChunkSize must be between 1 and %d", lifecycle.MaxManifestChunkKeys))
	}
	if cfg.RetryBase == 0 {
		cfg.RetryBase = DefaultRetryBase
	}
	if cfg.RetryMax == 0 {
		cfg.RetryMax = DefaultRetryMax
	}
	if cfg.RetryBase < 0 || cfg.RetryMax < cfg.RetryBase {
		problems = append(problems, "RetryBase must be positive and at most RetryMax")
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	if cfg.PollInterval < 0 {
		problems = append(problems, "PollInterval is negative")
	}
	if lifecycle.CheckNiceRatio(cfg.Purge.NiceRatio) != nil {
		problems = append(problems, fmt.Sprintf("Purge.NiceRatio must be a finite number, 0 or more, not %g", cfg.Purge.NiceRatio))
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("executor: invalid config: %s: %w", strings.Join(problems, "; "), lifecycle.ErrInvalidInput)
	}
	r := &Runner{cfg: cfg, log: cfg.Logger, jobs: make(map[*job]struct{})}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	r.log = r.log.With(slog.String("executor", cfg.Owner))
	r.metrics = newMetrics(r)
	if cfg.Metrics != nil {
		if err := r.metrics.register(cfg.Metrics); err != nil {
			return nil, fmt.Errorf("executor: invalid config: %w: %w", err, lifecycle.ErrInvalidInput)
		}
	}
	return r, nil
}

// Run claims and drives deletions until ctx is done, sleeping PollInterval
// when nothing is claimable. Failures of single requests are reported
// through Progress and do not stop it. When ctx is done it releases any claim
// it holds, records the executor stopped and returns ctx.Err().
func (r *Runner) Run(ctx context.Context) error {
	if err := r.preflight(ctx); err != nil {
		return err
	}
	defer func() {
		// Record that this executor stopped (a claim in flight was already
		// released by the run).
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopTimeout)
		defer cancel()
		_ = r.cfg.Engine.Stop(stopCtx, lifecycle.StopParams{ExecutorID: r.cfg.Owner})
	}()
	for {
		claimed, err := r.RunNext(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if claimed && err == nil {
			continue
		}
		if err != nil && !errors.Is(err, ErrRetryScheduled) && !errors.Is(err, ErrBlocked) && !lifecycle.IsStaleLease(err) {
			r.emit(Event{Message: "error: " + oneLine(err)})
			r.log.LogAttrs(ctx, slog.LevelError, "run failed", slog.String("error", oneLine(err)))
		}
		if claimed {
			continue
		}
		t := time.NewTimer(r.cfg.PollInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// RunNext claims the oldest claimable request and drives it through every
// runnable stage to retention_pending or until a failure. It reports whether
// it claimed a request: (false, nil) when nothing is claimable. A failure it
// recorded returns an error matching ErrRetryScheduled or ErrBlocked (and the
// cause; a request the claim found drifted is ErrBlocked too); a lost lease
// returns an error matching lifecycle.ErrStaleLease; when ctx is done it
// releases the claim and returns ctx.Err().
func (r *Runner) RunNext(ctx context.Context) (bool, error) {
	return r.run(ctx, func() (*lifecycle.ClaimedDeletion, error) {
		return r.cfg.Engine.ClaimNext(ctx, r.cfg.Owner, r.cfg.LeaseDuration)
	})
}

// RunRequest is RunNext for request id only: (false, nil) when it is not
// claimable now, an error matching lifecycle.ErrNotFound when it does not
// exist.
func (r *Runner) RunRequest(ctx context.Context, id uuid.UUID) (bool, error) {
	return r.run(ctx, func() (*lifecycle.ClaimedDeletion, error) {
		return r.cfg.Engine.ClaimRequest(ctx, id, r.cfg.Owner, r.cfg.LeaseDuration)
	})
}

// CheckLayout compares the key patterns of a cache that names them (a
// LayoutCache) with the cache templates of the declared storage layout, and
// returns an error matching ErrLayoutMismatch when the layout declares cache
// templates and they differ, or when the cache names no patterns (the
// in-process cache, a cache that is not a LayoutCache) and so cannot list
// them. Run calls it before it starts, and RunNext and RunRequest before
// each claim, so a mismatch deletes nothing.
func (r *Runner) CheckLayout(ctx context.Context) error {
	layout, err := r.cfg.Engine.StorageLayout(ctx)
	if err != nil {
		return fmt.Errorf("executor: check the cache against the storage layout: %w", err)
	}
	declared := make([]string, 0, len(layout.Cache))
	for _, t := range layout.Cache {
		declared = append(declared, t.Template)
	}
	if len(declared) == 0 {
		return nil // no cache layout declared: nothing to compare
	}
	slices.Sort(declared)
	cache, ok := r.cfg.Cache.(LayoutCache)
	if !ok {
		return fmt.Errorf("%w: the cache (%s) names no key patterns, so it cannot list the declared cache templates %q, and no receipt may claim them checked; give the executor a Redis cache with a pattern= for each template (--cache redis://HOST:PORT?pattern=…)",
			ErrLayoutMismatch, describeCache(r.cfg.Cache), declared)
	}
	configured := slices.Sorted(slices.Values(cache.LayoutTemplates()))
	if !slices.Equal(slices.Compact(configured), slices.Compact(declared)) {
		return fmt.Errorf("%w: the cache purges %q, the declared layout names %q; configure the cache with the declared templates, or declare the templates the service uses (community_deletion_storage_layout)",
			ErrLayoutMismatch, configured, declared)
	}
	return nil
}

// describeCache names a cache in a refusal: the in-process cache by its
// URL, another by its kind.
func describeCache(c Cache) string {
	kind := storeKind(c)
	if kind == "memory" {
		return "the in-process cache memory:"
	}
	return "kind " + kind
}

// CheckReceiptKey checks the runner's receipt signing key against the
// deployment (lifecycle.Engine.CheckReceiptKey) and returns an error
// matching ErrReceiptKey and lifecycle.ErrRefused when it is not the one
// the deployment requires. Run calls it before it starts, and RunNext and
// RunRequest before each claim; the first call logs how receipts are
// signed, at Warn when they are unsigned.
func (r *Runner) CheckReceiptKey(ctx context.Context) error {
	check, err := r.cfg.Engine.CheckReceiptKey(ctx)
	if errors.Is(err, lifecycle.ErrRefused) {
		return fmt.Errorf("%w: %w", ErrReceiptKey, err)
	}
	if err != nil {
		return fmt.Errorf("executor: check the receipt signing key: %w", err)
	}
	r.signingLogged.Do(func() {
		level := slog.LevelInfo
		if !check.Signed {
			level = slog.LevelWarn
		}
		r.log.LogAttrs(ctx, level, check.Note, slog.Bool("receipts_signed", check.Signed),
			slog.String("receipt_key", check.KeyID), slog.Bool("receipt_key_registered", check.Registered))
	})
	return nil
}

// preflight is what every run checks before it claims: the cache against
// the declared layout, the receipt key against the deployment.
func (r *Runner) preflight(ctx context.Context) error {
	if err := r.CheckLayout(ctx); err != nil {
		return err
	}
	return r.CheckReceiptKey(ctx)
}

// run claims with claim and executes what it claimed.
func (r *Runner) run(ctx context.Context, claim func() (*lifecycle.ClaimedDeletion, error)) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if err := r.preflight(ctx); err != nil {
		return false, err
	}
	r.settleFenceMarker(ctx, r.log)
	claimed, err := claim()
	switch {
	case err == nil:
		return true, r.execute(ctx, claimed)
	case ctx.Err() != nil:
		return false, ctx.Err()
	case errors.Is(err, lifecycle.ErrNothingToClaim):
		return false, nil
	case errors.As(err, new(*lifecycle.DriftBlockedError)):
		var drift *lifecycle.DriftBlockedError
		errors.As(err, &drift)
		r.metrics.blocks.WithLabelValues(stageUnknown, BlockCatalogDrift).Inc()
		r.metrics.deletions.WithLabelValues(stageUnknown, OutcomeBlocked).Inc()
		r.log.LogAttrs(ctx, slog.LevelError, "claim blocked the request on catalog drift",
			slog.String("request_id", drift.RequestID.String()), slog.String("reason", oneLine(errors.New(drift.Reason))))
		return false, fmt.Errorf("%w: %w", ErrBlocked, err)
	default:
		return false, fmt.Errorf("executor: claim: %w", err)
	}
}

// settleFenceMarker clears the fence marker's bits of communities no longer
// in flight (lifecycle.Engine.SettleFenceMarker), best effort: until it
// succeeds their tables' writes take the fence's full path, which is slower
// but as safe.
func (r *Runner) settleFenceMarker(ctx context.Context, log *slog.Logger) {
	start := time.Now()
	if _, err := r.cfg.Engine.SettleFenceMarker(ctx); err != nil {
		log.LogAttrs(ctx, slog.LevelWarn, "fence marker not settled; bound tables' writes take the fence's full path until it is",
			slog.String("error", oneLine(err)), slog.Float64("waited_seconds", time.Since(start).Seconds()))
	}
}

func (r *Runner) emit(ev Event) {
	if r.cfg.Progress != nil {
		r.cfg.Progress(ev)
	}
}

// oneLine bounds an error's text for events.
func oneLine(err error) string {
	s := strings.ReplaceAll(err.Error(), "\n", " ")
	if len(s) > lifecycle.MaxErrorBytes {
		s = s[:lifecycle.MaxErrorBytes]
	}
	return s
}
