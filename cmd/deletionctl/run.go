package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tombstoneworks/communitydeletion/executor"
	"github.com/tombstoneworks/communitydeletion/executor/storeurl"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// healthTimeout bounds the database check of /healthz.
const healthTimeout = 2 * time.Second

// openObjects opens the object store at the URL raw. The URL was parsed
// with the command line; one that still cannot be opened (a missing
// directory, an unusable AWS configuration) is a usage error.
func openObjects(ctx context.Context, raw string) (executor.ObjectStore, error) {
	store, err := storeurl.OpenObjects(ctx, raw)
	if err != nil {
		return nil, usagef("--objects: %v", err)
	}
	return store, nil
}

// openCache opens the cache at the URL raw, likewise.
func openCache(raw string) (storeurl.ClosableCache, error) {
	cache, err := storeurl.OpenCache(raw)
	if err != nil {
		return nil, usagef("--cache: %v", err)
	}
	return cache, nil
}

// shown is a store URL as the log shows it: without a password.
func shown(raw string, cache bool) string {
	if cache {
		c, err := storeurl.ParseCache(raw)
		if err != nil {
			return "(unparsable)"
		}
		return c.String()
	}
	o, err := storeurl.ParseObjects(raw)
	if err != nil {
		return "(unparsable)"
	}
	return o.String()
}

// defaultOwner is run's executor identity without --owner.
func defaultOwner() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	return fmt.Sprintf("deletionctl-%s-%d", host, os.Getpid())
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	info, err := f.Stat()
	return err == nil && info.Mode()&os.ModeCharDevice != 0
}

// runOutput is where run writes: its log on stdout, JSON lines off a
// terminal (or with --log-format json), text on one (or with --log-format
// text), and on a terminal with text the console's progress bar between the
// records.
type runOutput struct {
	log     *slog.Logger
	console *console // nil: no progress bar
}

func newRunOutput(stdout io.Writer, terminal bool, cfg config) runOutput {
	level := slog.LevelInfo
	switch cfg.logLevel {
	case "debug":
		level = slog.LevelDebug
	case "warn":
		level = slog.LevelWarn
	case "error":
		level = slog.LevelError
	}
	opts := &slog.HandlerOptions{Level: level}
	text := cfg.logFormat == "text" || ((cfg.logFormat == "" || cfg.logFormat == "auto") && terminal)
	if !text {
		return runOutput{log: slog.New(slog.NewJSONHandler(stdout, opts))}
	}
	if !terminal {
		return runOutput{log: slog.New(slog.NewTextHandler(stdout, opts))}
	}
	c := &console{w: stdout}
	return runOutput{log: slog.New(slog.NewTextHandler(c, opts)), console: c}
}

// progress is the runner's Progress callback: the console's bar, or none.
func (o runOutput) progress() func(executor.Event) {
	if o.console == nil {
		return nil
	}
	return o.console.event
}

// finish leaves the console on a fresh line.
func (o runOutput) finish() {
	if o.console != nil {
		o.console.finish()
	}
}

// runExecutor is the run command: it drives approved deletions with an
// executor.Runner over the stores the URLs name, logging to stdout and
// serving /metrics and /healthz when asked.
func runExecutor(ctx context.Context, engine *lifecycle.Engine, pool *pgxpool.Pool, cfg config, stdout io.Writer) error {
	objects, err := openObjects(ctx, cfg.objects)
	if err != nil {
		return err
	}
	cache, err := openCache(cfg.cache)
	if err != nil {
		return err
	}
	defer cache.Close()
	owner := cfg.owner
	if owner == "" {
		owner = defaultOwner()
	}
	out := newRunOutput(stdout, isTerminal(stdout), cfg)
	defer out.finish()
	log := out.log.With(slog.String("executor", owner))

	var (
		registry *prometheus.Registry
		metrics  prometheus.Registerer
	)
	if cfg.metricsAddr != "" {
		registry = prometheus.NewRegistry()
		registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		metrics = registry
	}
	runner, err := executor.New(executor.Config{
		Engine:        engine,
		Objects:       objects,
		Cache:         cache,
		Owner:         owner,
		LeaseDuration: cfg.lease,
		ChunkSize:     cfg.chunkSize,
		Purge:         lifecycle.PurgeOptions{NiceRatio: cfg.niceRatio},
		Progress:      out.progress(),
		Logger:        out.log,
		Metrics:       metrics,
	})
	if err != nil {
		return fmt.Errorf("run: %w", err)
	}
	if registry != nil {
		stop, err := serveMetrics(ctx, cfg.metricsAddr, registry, runner.Health, log)
		if err != nil {
			return err
		}
		defer stop()
	}
	log.LogAttrs(ctx, slog.LevelInfo, "executor started", slog.String("objects", shown(cfg.objects, false)),
		slog.String("cache", shown(cfg.cache, true)), slog.Bool("once", cfg.once))

	if !cfg.once {
		err := runner.Run(ctx)
		if err != nil && ctx.Err() != nil {
			log.LogAttrs(context.WithoutCancel(ctx), slog.LevelInfo, "executor stopped")
			return nil // SIGINT or SIGTERM: a clean stop
		}
		if err != nil {
			return failed("run", err, "")
		}
		return nil
	}

	op := "run of the next claimable request"
	var claimed bool
	if cfg.requestID == uuid.Nil {
		claimed, err = runner.RunNext(ctx)
	} else {
		op = fmt.Sprintf("run of request %s", cfg.requestID)
		claimed, err = runner.RunRequest(ctx, cfg.requestID)
	}
	switch {
	case err != nil:
		return failed(op, err, runNext(err, cfg))
	case !claimed && cfg.requestID != uuid.Nil:
		return notClaimed(ctx, engine, pool, log, op, cfg.requestID)
	case !claimed:
		attrs := []slog.Attr{slog.String("reason", "no approved, unblocked request is due")}
		if n, err := engine.RequestsInGrace(ctx); err == nil {
			attrs = append(attrs, slog.Int64("requests_in_grace", n))
		}
		log.LogAttrs(ctx, slog.LevelInfo, "nothing to claim", attrs...)
	}
	return nil
}

// runNext is what to do after run --once failed with err.
func runNext(err error, cfg config) string {
	id := cfg.requestID.String()
	if cfg.requestID == uuid.Nil {
		id = "ID"
	}
	switch {
	case errors.Is(err, executor.ErrBlocked):
		return "remedy the cause, then deletionctl unblock --request " + id + " --by NAME --reason TEXT"
	case errors.Is(err, executor.ErrRetryScheduled):
		return "it is retried after its backoff; deletionctl inspect --request " + id + " shows when"
	}
	return ""
}

// notClaimed explains why run --once --request id claimed nothing: it logs
// the request's claim (why, what to do, until when) and returns nil for a
// request that is complete already, else a refusal (exit 3) saying the same.
func notClaimed(ctx context.Context, engine *lifecycle.Engine, pool *pgxpool.Pool, log *slog.Logger, op string, id uuid.UUID) error {
	r, err := engine.Get(ctx, id)
	if err != nil {
		return failed(op, err, "")
	}
	now, err := dbNow(ctx, pool)
	if err != nil {
		return failed(op, err, "")
	}
	c := claimOf(r, now, nil)
	if c.Status == claimClaimable {
		// Claimable on its own terms: another claim held its row.
		c = claimView{Status: claimLeased, Reason: "another executor was claiming it at that moment",
			NextStep: "deletionctl inspect --request " + id.String() + " shows who holds it"}
	}
	attrs := []slog.Attr{slog.String("request_id", id.String()), slog.String("status", c.Status),
		slog.String("reason", c.Reason), slog.String("next_step", c.NextStep)}
	if c.Until != nil {
		attrs = append(attrs, slog.Time("until", *c.Until))
	}
	if c.Status == claimCompleted {
		log.LogAttrs(ctx, slog.LevelInfo, "nothing to claim: "+c.Reason, attrs...)
		return nil
	}
	log.LogAttrs(ctx, slog.LevelWarn, "not claimable: "+c.Reason, attrs...)
	return failed(op, refusedf("not claimable: %s", c.Reason), c.NextStep)
}

// serveMetrics serves registry at /metrics and health at /healthz on addr
// until the returned stop is called; ctx bounds only the listen.
func serveMetrics(ctx context.Context, addr string, registry *prometheus.Registry, health func(context.Context) error, log *slog.Logger) (func(), error) {
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("run: --metrics-addr: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{Registry: registry}))
	mux.Handle("/healthz", healthHandler(health))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.LogAttrs(context.WithoutCancel(ctx), slog.LevelError, "metrics server failed", slog.String("error", err.Error()))
		}
	}()
	log.LogAttrs(context.Background(), slog.LevelInfo, "serving /metrics and /healthz", slog.String("addr", ln.Addr().String()))
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	}, nil
}

// healthHandler answers 200 "ok" when check passes within healthTimeout,
// else 503 with check's error on one line.
func healthHandler(check func(context.Context) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), healthTimeout)
		defer cancel()
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		if err := check(ctx); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, oneLine(err.Error()))
			return
		}
		fmt.Fprintln(w, "ok")
	})
}

// console is a terminal shared by the text log and a one-line progress bar
// that rewrites itself (\r) for listing, chunk deletion and the purge. A log
// record first ends the bar's line, so the two never overwrite each other.
type console struct {
	mu     sync.Mutex
	w      io.Writer
	bar    bool // a progress bar is on the current line
	barLen int  // its length, to blank the rest on rewrite
}

// barWidth is the width of the progress bar's [###...] part; maxLine caps
// a rewritten line.
const (
	barWidth = 30
	maxLine  = 120
)

// Write writes one log record on a line of its own.
func (c *console) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.endBar()
	return c.w.Write(p)
}

// event draws the progress events of e as the bar; the log tells the rest.
func (c *console) event(e executor.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case e.Paused != "":
		c.drawBar("purge paused: " + e.Paused)
	case e.TablesRows != nil && e.Stage == lifecycle.StageBindingsRemoved:
		c.drawBar("purge: " + formatRows(e.TablesRows))
	case e.ChunksDone > 0 && e.ChunksTotal > 0:
		filled := int(min(e.ChunksDone, e.ChunksTotal) * barWidth / e.ChunksTotal)
		c.drawBar(fmt.Sprintf("deleting [%s%s] %d/%d chunks", strings.Repeat("#", filled),
			strings.Repeat(".", barWidth-filled), e.ChunksDone, e.ChunksTotal))
	case e.ChunksTotal > 0 && e.Stage == lifecycle.StageFenced:
		c.drawBar(fmt.Sprintf("listing: %d chunks", e.ChunksTotal))
	}
}

// drawBar rewrites the current line with s.
func (c *console) drawBar(s string) {
	if len(s) > maxLine {
		s = s[:maxLine-3] + "..."
	}
	pad := ""
	if n := c.barLen - len(s); n > 0 {
		pad = strings.Repeat(" ", n)
	}
	fmt.Fprintf(c.w, "\r%s%s", s, pad)
	c.bar, c.barLen = true, len(s)
}

// endBar ends the progress bar's line, if one is drawn.
func (c *console) endBar() {
	if c.bar {
		fmt.Fprintln(c.w)
		c.bar, c.barLen = false, 0
	}
}

// finish leaves the cursor on a fresh line.
func (c *console) finish() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.endBar()
}

// formatRows renders rows per table as "table=n ..." in table order.
func formatRows(rows map[string]int64) string {
	if len(rows) == 0 {
		return "none"
	}
	parts := make([]string, 0, len(rows))
	for _, table := range slices.Sorted(maps.Keys(rows)) {
		parts = append(parts, fmt.Sprintf("%s=%d", table, rows[table]))
	}
	return strings.Join(parts, " ")
}

// runRefused reports whether err is a run outcome that exits 3: the
// request was blocked or a retry was scheduled, or the runner refused to
// start with a cache or a receipt key the deployment did not declare.
func runRefused(err error) bool {
	return errors.Is(err, executor.ErrBlocked) || errors.Is(err, executor.ErrRetryScheduled) ||
		errors.Is(err, executor.ErrLayoutMismatch) || errors.Is(err, executor.ErrReceiptKey)
}
