package executor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// stopTimeout bounds the StopExecutor call made on shutdown.
const stopTimeout = 10 * time.Second

// job is one claim being driven.
type job struct {
	r        *Runner
	req      *lifecycle.Request
	stage    lifecycle.Stage
	unit     string // the unit in flight, for RecordRetry and Block
	manifest *lifecycle.StorageManifest

	// log is the runner's logger with the claim's request_id, community_id
	// and lease_generation; every record adds the stage.
	log *slog.Logger

	mu sync.Mutex
	// stageName is stage, for the heartbeat goroutine's records.
	stageName lifecycle.Stage
	// lastEvent and lastRenewal are when the claim last reported progress
	// and last renewed its lease (the claim counts as a renewal).
	lastEvent, lastRenewal time.Time
	token                  lifecycle.LeaseToken
	// tokenVersion rises whenever token changes, so the heartbeat can tell a
	// stale answer to an old token from the loss of the lease.
	tokenVersion int
	// changingLease is set while a step that changes the lease is in
	// flight (the fence, which re-issues the token, and the final step,
	// which releases the lease): a stale answer to a heartbeat may then be
	// the step's own doing.
	changingLease bool
}

func (j *job) setChangingLease(on bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.changingLease = on
}

func (j *job) isChangingLease() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.changingLease
}

func (j *job) currentToken() (lifecycle.LeaseToken, int) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.token, j.tokenVersion
}

func (j *job) setToken(t lifecycle.LeaseToken) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.token = t
	j.tokenVersion++
}

// setStage records that the request moved to stage.
func (j *job) setStage(stage lifecycle.Stage) {
	j.stage = stage
	j.mu.Lock()
	j.stageName = stage
	j.mu.Unlock()
}

// event reports ev to Config.Progress and logs it at level with attrs,
// ev.Message being the record's message.
func (j *job) event(level slog.Level, ev Event, attrs ...slog.Attr) {
	ev.RequestID = j.req.ID
	if ev.Stage == "" {
		ev.Stage = j.stage
	}
	j.mu.Lock()
	j.lastEvent = time.Now()
	j.mu.Unlock()
	j.r.emit(ev)
	j.logAt(level, ev.Stage, ev.Message, attrs...)
}

// logAt writes one record about the claim at stage.
func (j *job) logAt(level slog.Level, stage lifecycle.Stage, msg string, attrs ...slog.Attr) {
	ctx := context.Background()
	if !j.log.Enabled(ctx, level) {
		return
	}
	j.log.LogAttrs(ctx, level, msg, append([]slog.Attr{slog.String("stage", string(stage))}, attrs...)...)
}

// renewed records a successful lease renewal.
func (j *job) renewed() {
	j.mu.Lock()
	j.lastRenewal = time.Now()
	j.mu.Unlock()
}

// currentStage is the stage as the heartbeat goroutine may read it.
func (j *job) currentStage() lifecycle.Stage {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.stageName
}

// refusedf returns a fail-closed refusal (matching lifecycle.ErrRefused).
func refusedf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", lifecycle.ErrRefused, fmt.Sprintf(format, args...))
}

// retryableError marks a refusal that waiting can cure (serving writes not
// drained yet), which must be retried rather than blocked.
type retryableError struct{ err error }

func (e *retryableError) Error() string { return e.err.Error() }
func (e *retryableError) Unwrap() error { return e.err }

func (r *Runner) execute(ctx context.Context, claim *lifecycle.ClaimedDeletion) error {
	token := claim.Lease
	if token.FenceGeneration == nil && claim.Request.FenceGeneration != nil {
		token = token.WithFence(*claim.Request.FenceGeneration)
	}
	j := &job{r: r, req: claim.Request, stage: claim.Request.Stage, stageName: claim.Request.Stage, token: token,
		manifest: claim.Request.DestructiveStorage,
		log: r.log.With(slog.String("request_id", claim.Request.ID.String()),
			slog.String("community_id", claim.Request.CommunityID.String()), slog.String("tenant_key", claim.Request.TenantKey.String()),
			slog.Int64("lease_generation", token.Generation))}
	defer r.track(j)()
	r.metrics.claims.Inc()
	j.event(slog.LevelInfo, Event{Message: fmt.Sprintf("claimed at %s (lease generation %d)", j.stage, token.Generation)},
		slog.Int("retry_count", int(claim.Request.RetryCount)))

	workCtx, cancelWork := context.WithCancelCause(ctx)
	defer cancelWork(nil)
	hbCtx, stopHB := context.WithCancel(workCtx)
	var hbDone sync.WaitGroup
	hbDone.Go(func() {
		r.heartbeat(hbCtx, j, cancelWork)
	})

	err := j.drive(workCtx)
	stopHB()
	hbDone.Wait()
	token, _ = j.currentToken()

	if err == nil {
		r.metrics.deletions.WithLabelValues(string(j.stage), OutcomeCompleted).Inc()
		j.event(slog.LevelInfo, Event{Message: "completed"})
		return nil
	}
	if ctx.Err() != nil {
		// Shutdown: the unit in flight was abandoned (every store call is one
		// transaction, every adapter call idempotent); release the claim.
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopTimeout)
		defer cancel()
		r.metrics.deletions.WithLabelValues(string(j.stage), OutcomeStopped).Inc()
		if stopErr := r.cfg.Engine.Stop(stopCtx, lifecycle.StopParams{ExecutorID: r.cfg.Owner, Release: &token}); stopErr != nil {
			j.event(slog.LevelWarn, Event{Message: "stop executor: " + oneLine(stopErr)}, slog.String("unit", j.unit))
		} else {
			j.event(slog.LevelInfo, Event{Message: "stopped; claim released"}, slog.String("unit", j.unit))
		}
		return ctx.Err()
	}
	lost := false
	if cause := context.Cause(workCtx); cause != nil && !errors.Is(cause, context.Canceled) {
		err, lost = cause, true
	}
	stage := string(j.stage)
	if lost || lifecycle.IsStaleLease(err) {
		r.metrics.leaseLosses.Inc()
		r.metrics.deletions.WithLabelValues(stage, OutcomeLeaseLost).Inc()
		j.event(slog.LevelWarn, Event{Message: "lease lost; dropping the request: " + oneLine(err)},
			slog.String("unit", j.unit), slog.String("error", oneLine(err)))
		return fmt.Errorf("executor: deletion %s at %s: %w", j.req.ID, j.stage, err)
	}
	var retryable *retryableError
	if errors.Is(err, lifecycle.ErrRefused) && !errors.As(err, &retryable) {
		if blockErr := r.cfg.Engine.Block(ctx, token, lifecycle.BlockParams{Stage: j.stage, Unit: j.unit, Err: err.Error()}); blockErr != nil {
			r.metrics.deletions.WithLabelValues(stage, OutcomeError).Inc()
			j.logAt(slog.LevelError, j.stage, "could not block the request", slog.String("unit", j.unit),
				slog.String("error", oneLine(err)), slog.String("block_error", oneLine(blockErr)))
			return fmt.Errorf("executor: block deletion %s at %s after %v: %w", j.req.ID, j.stage, err, blockErr)
		}
		r.metrics.blocks.WithLabelValues(stage, BlockRefused).Inc()
		r.metrics.deletions.WithLabelValues(stage, OutcomeBlocked).Inc()
		j.event(slog.LevelError, Event{Message: "blocked: " + oneLine(err)},
			slog.String("unit", j.unit), slog.String("error", oneLine(err)), slog.String("cause", BlockRefused))
		return fmt.Errorf("%w: deletion %s at %s unit %s: %w", ErrBlocked, j.req.ID, j.stage, j.unit, err)
	}
	delay := r.backoff(j)
	if retryErr := r.cfg.Engine.RecordRetry(ctx, token, lifecycle.RetryParams{Stage: j.stage, Unit: j.unit, Err: err.Error(), After: delay}); retryErr != nil {
		r.metrics.deletions.WithLabelValues(stage, OutcomeError).Inc()
		j.logAt(slog.LevelError, j.stage, "could not record the retry", slog.String("unit", j.unit),
			slog.String("error", oneLine(err)), slog.String("retry_error", oneLine(retryErr)))
		return fmt.Errorf("executor: record retry of deletion %s at %s after %v: %w", j.req.ID, j.stage, err, retryErr)
	}
	r.metrics.retries.WithLabelValues(stage).Inc()
	streak := r.streak(j) + 1
	if streak >= lifecycle.MaxConsecutiveRetries {
		// The store blocked the request instead of scheduling another attempt.
		r.metrics.blocks.WithLabelValues(stage, BlockRetryBudget).Inc()
		r.metrics.deletions.WithLabelValues(stage, OutcomeBlocked).Inc()
		j.event(slog.LevelError, Event{Message: fmt.Sprintf("blocked after %d consecutive failures: %s", streak, oneLine(err))},
			slog.String("unit", j.unit), slog.String("error", oneLine(err)), slog.String("cause", BlockRetryBudget),
			slog.Int("retry_count", streak))
	} else {
		r.metrics.deletions.WithLabelValues(stage, OutcomeRetry).Inc()
		j.event(slog.LevelWarn, Event{Message: fmt.Sprintf("retry in %s: %s", delay, oneLine(err))},
			slog.String("unit", j.unit), slog.String("error", oneLine(err)), seconds("retry_in_seconds", delay),
			slog.Int("retry_count", streak))
	}
	return fmt.Errorf("%w: deletion %s at %s unit %s: %w", ErrRetryScheduled, j.req.ID, j.stage, j.unit, err)
}

// streak is the number of consecutive failures recorded at the job's stage
// before this run: the claim's retry count if it failed at this stage.
func (r *Runner) streak(j *job) int {
	if j.req.RetryStage != nil && *j.req.RetryStage == j.stage {
		return int(j.req.RetryCount)
	}
	return 0
}

// backoff is RetryBase*2^retry_count capped at RetryMax, with equal jitter
// (a uniformly random point in its upper half).
func (r *Runner) backoff(j *job) time.Duration {
	count := r.streak(j)
	d := r.cfg.RetryBase
	for i := 0; i < count && d < r.cfg.RetryMax; i++ {
		d *= 2
	}
	if d > r.cfg.RetryMax || d <= 0 {
		d = r.cfg.RetryMax
	}
	half := d / 2
	if half > 0 {
		d = half + rand.N(half+1)
	}
	return d
}

// heartbeatInconclusive is the log message of a heartbeat that found the
// lease changed while a step that changes it was in flight.
const heartbeatInconclusive = "heartbeat inconclusive: a step in flight changes the lease"

// heartbeat renews the lease every HeartbeatInterval until ctx is done. A
// stale answer to the current token cancels the work at once, as does going a
// whole lease without a successful renewal.
func (r *Runner) heartbeat(ctx context.Context, j *job, cancelWork context.CancelCauseFunc) {
	ticker := time.NewTicker(r.cfg.HeartbeatInterval)
	defer ticker.Stop()
	lastOK := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		for {
			token, version := j.currentToken()
			err := r.cfg.Engine.Heartbeat(ctx, token, r.cfg.LeaseDuration)
			if err == nil {
				lastOK = time.Now()
				j.renewed()
				r.metrics.renewals.Inc()
				j.logAt(slog.LevelDebug, j.currentStage(), "lease renewed", seconds("lease_seconds", r.cfg.LeaseDuration))
				break
			}
			if ctx.Err() != nil {
				return
			}
			if lifecycle.IsStaleLease(err) {
				if _, now := j.currentToken(); now != version {
					continue // the token moved on (fenced) meanwhile: renew with the new one
				}
				if j.isChangingLease() {
					// Inconclusive while the step commits; the next tick tells.
					j.logAt(slog.LevelDebug, j.currentStage(), heartbeatInconclusive)
					break
				}
				cancelWork(err)
				return
			}
			r.metrics.renewalFailures.Inc()
			j.logAt(slog.LevelWarn, j.currentStage(), "lease renewal failed", slog.String("error", oneLine(err)),
				seconds("since_renewal_seconds", time.Since(lastOK)))
			if time.Since(lastOK) >= r.cfg.LeaseDuration {
				cancelWork(fmt.Errorf("no successful heartbeat for a whole lease: %w", err))
				return
			}
			break
		}
	}
}

// drive runs every stage from the current one to retention_pending.
func (j *job) drive(ctx context.Context) error {
	for {
		if j.stage == lifecycle.StageRetentionPending {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		var err error
		from, began := j.stage, time.Now()
		switch j.stage {
		case lifecycle.StageApproved:
			err = j.quiesceAndFence(ctx)
		case lifecycle.StageFenced:
			err = j.enumerate(ctx)
		case lifecycle.StageDrained:
			err = j.deleteObjects(ctx)
		case lifecycle.StageBindingsRemoved:
			err = j.purgePostgres(ctx)
		case lifecycle.StagePostgresPurged:
			err = j.purgeCache(ctx)
		case lifecycle.StageCachePurged:
			err = j.verify(ctx)
		case lifecycle.StageLogicallyVerified:
			j.unit = "retention_pending"
			token, _ := j.currentToken()
			// Once it commits the lease is gone: every later heartbeat
			// answers stale, and the run is done.
			j.setChangingLease(true)
			err = j.r.cfg.Engine.EnterRetentionPending(ctx, token, map[string]string{"executor": j.r.cfg.Owner})
			if err != nil {
				j.setChangingLease(false)
			} else {
				j.advance(lifecycle.StageRetentionPending, "retention pending")
			}
		default:
			j.unit = "stage"
			return refusedf("deletion %s is at stage %q, which the executor cannot run", j.req.ID, j.stage)
		}
		if err != nil {
			return err
		}
		if j.stage != from {
			j.r.metrics.stageDuration.WithLabelValues(string(from)).Observe(time.Since(began).Seconds())
		}
	}
}

// advance records that the request moved to stage to and reports it.
func (j *job) advance(to lifecycle.Stage, message string, attrs ...slog.Attr) {
	j.setStage(to)
	j.event(slog.LevelInfo, Event{Message: message}, attrs...)
}

func (j *job) quiesceAndFence(ctx context.Context) error {
	store := j.r.cfg.Engine
	token, _ := j.currentToken()
	j.unit = "quiesce"
	if err := store.BeginQuiescing(ctx, token); err != nil {
		return err
	}
	quiesced := time.Now()
	j.event(slog.LevelInfo, Event{Message: "quiescing"})
	j.unit = "drain_serving_writes"
	deadline := time.Now().Add(j.r.cfg.DrainTimeout)
	poll := min(max(j.r.cfg.DrainTimeout/20, 10*time.Millisecond), time.Second)
	for {
		drained, err := store.ServingWritesDrained(ctx, j.req.CommunityID)
		if err != nil {
			return err
		}
		if drained {
			break
		}
		if !time.Now().Before(deadline) {
			return fmt.Errorf("serving writes of community %s did not drain within %s", j.req.CommunityID, j.r.cfg.DrainTimeout)
		}
		t := time.NewTimer(poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
	j.unit = "fence"
	j.setChangingLease(true)
	generation, err := store.EnterFenced(ctx, token)
	if err != nil {
		j.setChangingLease(false)
		return markNotDrainedRetryable(err)
	}
	j.setToken(token.WithFence(generation))
	j.setChangingLease(false)
	wait := time.Since(quiesced)
	j.r.metrics.fenceWait.Observe(wait.Seconds())
	j.advance(lifecycle.StageFenced, fmt.Sprintf("fenced at generation %d", generation),
		slog.Int64("fence_generation", generation), seconds("fence_wait_seconds", wait))
	return nil
}

// markNotDrainedRetryable keeps a "serving writes not drained" refusal from
// blocking the request: it is cured by waiting.
func markNotDrainedRetryable(err error) error {
	if _, ok := errors.AsType[*lifecycle.ServingWritesNotDrainedError](err); ok {
		return &retryableError{err}
	}
	return err
}

// prefixes returns the community's storage prefixes, sorted, after checking
// them against the approved inventory.
func (j *job) prefixes() ([]string, error) {
	var approved []string
	if j.req.Inventory != nil {
		for _, p := range j.req.Inventory.Storage.Prefixes {
			approved = append(approved, p.Prefix)
		}
	}
	var prefixes []string
	if j.r.cfg.Prefixes != nil {
		prefixes = append(prefixes, j.r.cfg.Prefixes(j.req.TenantKey)...)
	} else {
		prefixes = append(prefixes, approved...)
	}
	sort.Strings(prefixes)
	if len(prefixes) == 0 && (j.req.Inventory == nil || len(j.req.Inventory.Storage.KeySources) == 0) {
		// A tenant whose objects are the keys its rows list needs no prefix.
		return nil, refusedf("community %s has no storage prefixes", j.req.TenantKey)
	}
	for i, p := range prefixes {
		switch {
		case !strings.HasSuffix(p, "/"):
			return nil, refusedf("storage prefix %q does not end in \"/\"", p)
		case !prefixNamesTenant(p, j.req.TenantKey):
			return nil, refusedf("storage prefix %q does not name community %s", p, j.req.TenantKey)
		case i > 0 && strings.HasPrefix(p, prefixes[i-1]):
			return nil, refusedf("storage prefix %q repeats or nests in %q", p, prefixes[i-1])
		}
	}
	if j.req.Inventory != nil {
		sort.Strings(approved)
		if strings.Join(approved, "\x00") != strings.Join(prefixes, "\x00") {
			return nil, refusedf("storage prefixes %q differ from the approved inventory's %q", prefixes, approved)
		}
	}
	return prefixes, nil
}

// prefixNamesTenant reports whether prefix has the tenant's key as a whole
// path segment or at the end of one ("uploads/42/", "t-42/"), as a declared
// template's {tenant} followed by "/" expands: never as a part of another
// key ("uploads/142/" does not name tenant 42).
func prefixNamesTenant(prefix string, tenant lifecycle.TenantKey) bool {
	key := tenant.String()
	if key == "" {
		return false
	}
	for rest, offset := prefix, 0; ; {
		i := strings.Index(rest, key+"/")
		if i < 0 {
			return false
		}
		at := offset + i
		if at == 0 || !isKeyByte(prefix[at-1]) {
			return true
		}
		rest, offset = rest[i+1:], at+1
	}
}

// isKeyByte reports whether b may belong to a tenant key that another key
// could extend: letters and digits.
func isKeyByte(b byte) bool {
	return b >= '0' && b <= '9' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z'
}

// enumerate lists every prefix into persisted key chunks, freezes the
// destructive manifest they add up to and marks the request drained.
func (j *job) enumerate(ctx context.Context) error {
	store := j.r.cfg.Engine
	token, _ := j.currentToken()
	if token.FenceGeneration == nil {
		j.unit = "fence_generation"
		return refusedf("deletion %s is fenced but its claim carries no fence generation", j.req.ID)
	}
	if j.manifest == nil {
		j.unit = "storage_prefixes"
		prefixes, err := j.prefixes()
		if err != nil {
			return err
		}
		j.unit = "enumerate"
		if err := store.ClearManifestChunks(ctx, token); err != nil {
			return err
		}
		var chunkNo int64
		manifest, err := summarize(ctx, j.r.cfg.Objects, prefixes, j.r.cfg.ChunkSize, func(prefix string, keys []string) error {
			chunk := lifecycle.ManifestKeyChunk{ChunkNo: chunkNo, Prefix: prefix, Keys: keys}
			if err := j.awaitHeadroom(ctx, activityListing); err != nil {
				return err
			}
			if err := store.AppendManifestChunk(ctx, token, chunk); err != nil {
				return err
			}
			chunkNo++
			j.event(slog.LevelDebug, Event{Message: fmt.Sprintf("listed chunk %d of %s (%d keys)", chunk.ChunkNo, prefix, len(keys)), ChunksTotal: chunkNo},
				slog.Int64("chunk_no", chunk.ChunkNo), slog.String("prefix", prefix), slog.Int("keys", len(keys)))
			return nil
		})
		if err != nil {
			return err
		}
		if err := j.enumerateKeySources(ctx, token, &manifest, &chunkNo); err != nil {
			return err
		}
		j.unit = "freeze_manifest"
		if err := store.FreezeDestructiveManifest(ctx, token, manifest); err != nil {
			return err
		}
		j.manifest = &manifest
		var objects uint64
		for _, p := range manifest.Prefixes {
			objects += p.ObjectCount
		}
		for _, k := range manifest.KeySources {
			objects += k.ObjectCount
		}
		j.event(slog.LevelInfo, Event{Message: fmt.Sprintf("destructive manifest frozen: %d chunks", chunkNo), ChunksTotal: chunkNo},
			slog.Int64("chunks_total", chunkNo), slog.Uint64("objects", objects))
	}
	j.unit = "drain"
	if err := store.EnterDrained(ctx, token); err != nil {
		return markNotDrainedRetryable(err)
	}
	total, _, err := store.ChunkProgress(ctx, j.req.ID)
	if err != nil {
		total = 0
	}
	j.setStage(lifecycle.StageDrained)
	j.event(slog.LevelInfo, Event{Message: "drained", ChunksTotal: total}, slog.Int64("chunks_total", total))
	return nil
}

// enumerateKeySources lists, after the prefixes, the keys of every key
// source of the approved inventory (storage layout kind object_keys) from
// the fenced tenant's rows into persisted key chunks, numbered on from
// *chunkNo, and adds their summaries to manifest. The sources must be the
// declared layout's.
func (j *job) enumerateKeySources(ctx context.Context, token lifecycle.LeaseToken, manifest *lifecycle.StorageManifest, chunkNo *int64) error {
	store := j.r.cfg.Engine
	var approved []string
	if j.req.Inventory != nil {
		for _, k := range j.req.Inventory.Storage.KeySources {
			approved = append(approved, k.Source)
		}
	}
	layout, err := store.StorageLayout(ctx)
	if err != nil {
		return err
	}
	if declared := layout.KeySources(); strings.Join(declared, "\x00") != strings.Join(approved, "\x00") {
		j.unit = "key_sources"
		return refusedf("key sources %q differ from the approved inventory's %q", declared, approved)
	}
	for _, source := range approved {
		j.unit = "enumerate:" + source
		var digest lifecycle.KeyStreamDigest
		err := store.KeySourceKeys(ctx, token, source, j.r.cfg.ChunkSize, func(keys []string) error {
			for _, k := range keys {
				if err := digest.Fold(k); err != nil {
					return err
				}
			}
			if err := j.awaitHeadroom(ctx, activityListing); err != nil {
				return err
			}
			chunk := lifecycle.ManifestKeyChunk{ChunkNo: *chunkNo, Prefix: source, Keys: keys}
			if err := store.AppendManifestChunk(ctx, token, chunk); err != nil {
				return err
			}
			*chunkNo++
			return nil
		})
		if err != nil {
			return err
		}
		sum, count := digest.Sum()
		manifest.KeySources = append(manifest.KeySources, lifecycle.KeySourceManifest{Source: source, ObjectCount: count, KeysDigest: sum})
	}
	return nil
}

// summarize lists prefixes in order and returns their storage manifest,
// handing every run of up to chunkSize keys of one prefix to chunk (when not
// nil). Keys must come strictly ascending and under their prefix.
func summarize(ctx context.Context, objects ObjectStore, prefixes []string, chunkSize int, chunk func(prefix string, keys []string) error) (lifecycle.StorageManifest, error) {
	manifest := lifecycle.StorageManifest{Version: lifecycle.StorageManifestVersion}
	for _, prefix := range prefixes {
		var (
			digest lifecycle.KeyStreamDigest
			bytes  uint64
			batch  []string
		)
		flush := func() error {
			if len(batch) == 0 || chunk == nil {
				batch = nil
				return nil
			}
			keys := batch
			batch = nil
			return chunk(prefix, keys)
		}
		err := objects.List(ctx, prefix, func(key string, size int64) error {
			if !strings.HasPrefix(key, prefix) {
				return refusedf("object store listed key %q outside prefix %q", key, prefix)
			}
			if size < 0 {
				return refusedf("object store listed key %q with negative size %d", key, size)
			}
			if err := digest.Fold(key); err != nil {
				return err
			}
			bytes += uint64(size)
			batch = append(batch, key)
			if len(batch) >= chunkSize {
				return flush()
			}
			return nil
		})
		if err != nil {
			return manifest, err
		}
		if err := flush(); err != nil {
			return manifest, err
		}
		hexDigest, count := digest.Sum()
		manifest.Prefixes = append(manifest.Prefixes, lifecycle.PrefixManifest{
			Prefix: prefix, ObjectCount: count, TotalBytes: bytes, KeysDigest: hexDigest,
		})
	}
	return manifest, nil
}

// SummarizeStorage lists prefixes (sorted first) and returns the storage
// manifest an inventory freezes: per prefix the object count, total bytes and
// keys digest.
func SummarizeStorage(ctx context.Context, objects ObjectStore, prefixes []string) (lifecycle.StorageManifest, error) {
	sorted := append([]string(nil), prefixes...)
	sort.Strings(sorted)
	return summarize(ctx, objects, sorted, DefaultChunkSize, nil)
}

// deleteObjects deletes every pending manifest chunk from the object store
// and marks the bindings removed.
func (j *job) deleteObjects(ctx context.Context) error {
	store := j.r.cfg.Engine
	token, _ := j.currentToken()
	j.unit = "manifest"
	if j.manifest == nil {
		return refusedf("deletion %s is drained without a destructive storage manifest", j.req.ID)
	}
	allowed := make(map[string]bool, len(j.manifest.Prefixes))
	sources := make(map[string]bool, len(j.manifest.KeySources))
	var objects, bytes uint64
	for _, p := range j.manifest.Prefixes {
		if !prefixNamesTenant(p.Prefix, j.req.TenantKey) {
			return refusedf("destructive manifest prefix %q does not name community %s", p.Prefix, j.req.TenantKey)
		}
		allowed[p.Prefix] = true
		objects += p.ObjectCount
		bytes += p.TotalBytes
	}
	for _, k := range j.manifest.KeySources {
		sources[k.Source] = true
		objects += k.ObjectCount
	}
	total, done, err := store.ChunkProgress(ctx, j.req.ID)
	if err != nil {
		return err
	}
	for {
		j.unit = "next_chunk"
		chunk, err := store.NextPendingChunk(ctx, token)
		if err != nil {
			return err
		}
		if chunk == nil {
			break
		}
		j.unit = "chunk:" + strconv.FormatInt(chunk.ChunkNo, 10)
		switch {
		case sources[chunk.Prefix]:
			// Keys listed in the tenant's rows: exactly these, wherever they are.
		case !allowed[chunk.Prefix]:
			return refusedf("manifest chunk %d prefix %q is not in the destructive manifest", chunk.ChunkNo, chunk.Prefix)
		default:
			for _, key := range chunk.Keys {
				if key == chunk.Prefix || !strings.HasPrefix(key, chunk.Prefix) {
					return refusedf("manifest chunk %d key %q is outside its prefix %q", chunk.ChunkNo, key, chunk.Prefix)
				}
			}
		}
		if err := j.awaitHeadroom(ctx, activityObjectDeletion); err != nil {
			return err
		}
		if err := j.r.cfg.Objects.Delete(ctx, chunk.Keys); err != nil {
			return err
		}
		if err := store.MarkChunkDeleted(ctx, token, chunk.ChunkNo, map[string]int{"keys": len(chunk.Keys)}); err != nil {
			return err
		}
		done++
		j.r.metrics.chunksDeleted.Inc()
		j.r.metrics.objectsDeleted.Add(float64(len(chunk.Keys)))
		j.event(slog.LevelDebug, Event{Message: fmt.Sprintf("chunk %d deleted (%d keys)", chunk.ChunkNo, len(chunk.Keys)), ChunksDone: done, ChunksTotal: total},
			slog.Int64("chunk_no", chunk.ChunkNo), slog.Int("keys", len(chunk.Keys)), slog.Int64("chunks_done", done), slog.Int64("chunks_total", total))
	}
	j.unit = "bindings_removed"
	if err := store.EnterBindingsRemoved(ctx, token, map[string]any{"chunks": total, "objects": objects, "bytes": bytes}); err != nil {
		return err
	}
	j.advance(lifecycle.StageBindingsRemoved, fmt.Sprintf("object bindings removed: %d objects", objects),
		slog.Uint64("objects", objects), slog.Uint64("bytes", bytes), slog.Int64("chunks_total", total))
	return nil
}

func (j *job) purgePostgres(ctx context.Context) error {
	token, _ := j.currentToken()
	j.unit = "purge"
	opts := j.r.cfg.Purge
	userProgress := opts.Progress
	// counted holds, per table, the rows already counted in rows_purged_total:
	// what earlier runs recorded, then what this one reported.
	counted := make(map[string]int64)
	earlier, err := j.r.cfg.Engine.PurgeProgress(ctx, j.req.ID)
	if err != nil {
		return err
	}
	for _, t := range earlier {
		counted[t.Table] = t.Rows
	}
	rows := make(map[string]int64)
	pauses := &pauseReport{j: j, activity: activityPurge}
	opts.Progress = func(p lifecycle.PurgeProgress) {
		if p.Paused != "" {
			pauses.paused(p.Paused, p.PausedFor, slog.String("table", p.Table))
			if userProgress != nil {
				userProgress(p)
			}
			return
		}
		if p.OverCap {
			j.r.metrics.overCap.WithLabelValues(p.Table).Inc()
			j.event(slog.LevelDebug, Event{Message: "a purge batch of " + p.Table + " ran past its statement cap and was rolled back; trying it smaller, or uncapped after one row"},
				slog.String("table", p.Table))
			if userProgress != nil {
				userProgress(p)
			}
			return
		}
		pauses.resumed(slog.String("table", p.Table))
		rows[p.Table] = p.Rows
		if delta := p.Rows - counted[p.Table]; delta > 0 {
			j.r.metrics.rowsPurged.WithLabelValues(p.Table).Add(float64(delta))
			counted[p.Table] = p.Rows
		}
		snapshot := make(map[string]int64, len(rows))
		maps.Copy(snapshot, rows)
		msg := fmt.Sprintf("purged %d rows of %s", p.Rows, p.Table)
		if p.Done {
			msg += " (table done)"
		}
		j.event(slog.LevelDebug, Event{Message: msg, TablesRows: snapshot},
			slog.String("table", p.Table), slog.Int64("rows", p.Rows), slog.Bool("table_done", p.Done))
		if userProgress != nil {
			userProgress(p)
		}
	}
	result, err := j.r.cfg.Engine.EnterPostgresPurged(ctx, token, opts)
	if err != nil {
		return err
	}
	// The community is a tombstone now: its marker bit goes, so that
	// writes of bound tables skip the fence's tenant check again.
	j.r.settleFenceMarker(ctx, j.log)
	final := make(map[string]int64, len(result.Deleted)+len(result.Nullified))
	maps.Copy(final, result.Deleted)
	maps.Copy(final, result.Nullified)
	var total int64
	for _, v := range final {
		total += v
	}
	j.setStage(lifecycle.StagePostgresPurged)
	j.event(slog.LevelInfo, Event{Message: fmt.Sprintf("postgres purged in %d batches", result.Batches), TablesRows: final},
		slog.Int("batches", result.Batches), slog.Int64("rows", total), slog.Any("rows_by_table", final),
		seconds("longest_tx_seconds", result.LongestTx), slog.String("longest_tx_work", result.LongestTxWork),
		seconds("final_tx_seconds", result.FinalTx), seconds("niced_seconds", result.Niced), slog.Int("batches_over_cap", result.OverCapBatches))
	return nil
}

// Activities that pause for the database's headroom, as metric labels and
// in log messages.
const (
	activityListing        = "listing"
	activityObjectDeletion = "object_deletion"
	activityPurge          = "purge"
)

// pauseReport reports one activity's pauses: an event, and a log record
// when a pause starts or gains a cause (at Info, or at Debug for the rate
// cap alone, which holds back nearly every purge batch), each new cause
// counted once in pauses_total; then, at Info, the pause's end. The polls of
// a pause under way log nothing.
type pauseReport struct {
	j        *job
	activity string
	causes   []lifecycle.PurgePauseCause // of the pause under way, nil if none
	since    time.Time
}

// paused reports a look that found reason (with causes) to wait.
func (p *pauseReport) paused(reason string, causes []lifecycle.PurgePauseCause, attrs ...slog.Attr) {
	if p.causes == nil {
		p.since = time.Now()
	}
	var fresh []string
	for _, cause := range causes {
		if !slices.Contains(p.causes, cause) {
			p.j.r.metrics.pauses.WithLabelValues(p.activity, string(cause)).Inc()
			fresh = append(fresh, string(cause))
		}
	}
	p.causes = causes
	level := slog.LevelInfo
	switch {
	case len(fresh) == 0:
		level = slog.LevelDebug - 4
	case onlyRateCap(causes):
		level = slog.LevelDebug
	}
	msg := p.name() + " paused: " + reason
	p.j.event(level, Event{Message: msg, Paused: reason}, append(attrs, slog.Any("causes", fresh))...)
}

// resumed reports that the activity goes on, ending the pause under way.
func (p *pauseReport) resumed(attrs ...slog.Attr) {
	if p.causes != nil && !onlyRateCap(p.causes) {
		p.j.logAt(slog.LevelInfo, p.j.stage, p.name()+" resumed", append(attrs, seconds("paused_seconds", time.Since(p.since)))...)
	}
	p.causes = nil
}

func (p *pauseReport) name() string { return strings.ReplaceAll(p.activity, "_", " ") }

// awaitHeadroom waits, before activity writes to the database, while a
// replica lags or a wraparound vacuum runs (Config.Purge's bounds),
// reporting the pause.
func (j *job) awaitHeadroom(ctx context.Context, activity string) error {
	report := &pauseReport{j: j, activity: activity}
	err := j.r.cfg.Engine.AwaitHeadroom(ctx, lifecycle.HeadroomOpts{
		MaxReplicationLag: j.r.cfg.Purge.MaxReplicationLag,
		MaxPause:          j.r.cfg.Purge.MaxPause,
		Paused: func(reason string, causes []lifecycle.PurgePauseCause) {
			report.paused(reason, causes)
		},
	})
	if err == nil {
		report.resumed()
	}
	return err
}

// onlyRateCap reports whether causes is the rate cap alone.
func onlyRateCap(causes []lifecycle.PurgePauseCause) bool {
	return len(causes) == 1 && causes[0] == lifecycle.PauseRateCap
}

func (j *job) purgeCache(ctx context.Context) error {
	token, _ := j.currentToken()
	j.unit = "cache_purge"
	n, err := j.r.cfg.Cache.Purge(ctx, j.req.TenantKey)
	if err != nil {
		return err
	}
	j.r.metrics.cacheKeys.Add(float64(n))
	if err := j.r.cfg.Engine.EnterCachePurged(ctx, token, map[string]int64{"keys": n}); err != nil {
		return err
	}
	j.advance(lifecycle.StageCachePurged, fmt.Sprintf("cache purged: %d keys", n), slog.Int64("keys", n))
	return nil
}

// keysLeft returns the first key of the frozen chunks of sources that the
// object store still holds, by an exact listing of each key, or "".
func (j *job) keysLeft(ctx context.Context, sources []string) (string, error) {
	chunks, err := j.r.cfg.Engine.ManifestChunks(ctx, j.req.ID)
	if err != nil {
		return "", err
	}
	want := make(map[string]bool, len(sources))
	for _, s := range sources {
		want[s] = true
	}
	for _, chunk := range chunks {
		if !want[chunk.Prefix] {
			continue
		}
		for _, key := range chunk.Keys {
			found := false
			err := j.r.cfg.Objects.List(ctx, key, func(listed string, _ int64) error {
				if listed == key {
					found = true
					return errStopList
				}
				return nil
			})
			if err != nil && !errors.Is(err, errStopList) {
				return "", err
			}
			if found {
				return key, nil
			}
		}
	}
	return "", nil
}

// errStopList ends a listing that found what it looked for.
var errStopList = errors.New("stop listing")

func (j *job) verify(ctx context.Context) error {
	store := j.r.cfg.Engine
	token, _ := j.currentToken()
	j.unit = "verify_postgres"
	if err := store.CheckPostgresPurged(ctx, token); err != nil {
		return err
	}
	j.unit = "verify_objects"
	if j.manifest == nil {
		return refusedf("deletion %s has no destructive storage manifest to verify", j.req.ID)
	}
	objects := lifecycle.StoreCheck{Kind: storeKind(j.r.cfg.Objects), Checked: []string{}}
	for _, p := range j.manifest.Prefixes {
		left, err := j.r.cfg.Objects.Any(ctx, p.Prefix)
		if err != nil {
			return err
		}
		if left {
			return fmt.Errorf("objects remain under prefix %q of community %s", p.Prefix, j.req.TenantKey)
		}
		objects.Checked = append(objects.Checked, p.Prefix)
	}
	var sources []string
	for _, k := range j.manifest.KeySources {
		sources = append(sources, k.Source)
	}
	if len(sources) > 0 {
		j.unit = "verify_object_keys"
		left, err := j.keysLeft(ctx, sources)
		if err != nil {
			return err
		}
		if left != "" {
			return fmt.Errorf("object %q listed for community %s remains", left, j.req.TenantKey)
		}
		// Each key the source listed, by an exact listing of it.
		objects.Checked = append(objects.Checked, sources...)
	}
	if len(objects.Checked) == 0 {
		objects.NotChecked = "the destructive manifest has no prefix to list and no key source"
	}
	j.unit = "verify_cache"
	empty, err := j.r.cfg.Cache.Empty(ctx, j.req.TenantKey)
	if err != nil {
		return err
	}
	if !empty {
		return fmt.Errorf("cache entries remain for community %s", j.req.TenantKey)
	}
	cache := cacheCheck(j.r.cfg.Cache)
	j.unit = "logically_verified"
	proof := lifecycle.AbsenceProof{Postgres: true, Stores: &lifecycle.AbsenceStores{Objects: objects, Cache: cache}}
	if err := store.EnterLogicallyVerified(ctx, token, proof); err != nil {
		return err
	}
	how := "verified"
	if cache.NotChecked != "" {
		how = "not checked (" + cache.Kind + ")"
	}
	j.advance(lifecycle.StageLogicallyVerified, "absence verified in postgres and the object store; cache "+how)
	return nil
}

// cacheCheck is what a cache's Empty proved: the key templates of a
// LayoutCache, walked; nothing for a cache that names none (the in-process
// cache, a cache that is not a LayoutCache), which the receipt then says.
func cacheCheck(c Cache) lifecycle.StoreCheck {
	check := lifecycle.StoreCheck{Kind: storeKind(c), Checked: []string{}}
	lc, ok := c.(LayoutCache)
	switch {
	case check.Kind == "memory":
		check.NotChecked = "the in-process cache (memory:) lists nothing of the deployment's cache"
	case !ok:
		check.NotChecked = "the cache names no key patterns (it is not an executor.LayoutCache), so what its check covered is unknown"
	default:
		check.Checked = slices.Compact(slices.Sorted(slices.Values(lc.LayoutTemplates())))
		if len(check.Checked) == 0 {
			check.NotChecked = "the cache names no key patterns"
		}
	}
	return check
}

// seconds is a duration as a log attribute: seconds, as a float, under a
// key that says so. slog.Duration would write unlabelled nanoseconds in
// JSON.
func seconds(key string, d time.Duration) slog.Attr {
	return slog.Float64(key, d.Seconds())
}
