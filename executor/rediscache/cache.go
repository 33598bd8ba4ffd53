package rediscache

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/tombstoneworks/communitydeletion/lifecycle"

	"github.com/redis/go-redis/v9"

	"github.com/tombstoneworks/communitydeletion/internal/errtext"
)

// Defaults and limits of Options.
const (
	DefaultScanCount   = 1000
	MaxScanCount       = 100_000
	DefaultUnlinkBatch = 500
	MaxUnlinkBatch     = 10_000
	// MaxPatterns bounds Options.Patterns.
	MaxPatterns = 64
)

var (
	// ErrInvalidConfig reports Options or a Config that New or Open refuses.
	ErrInvalidConfig = errors.New("rediscache: invalid configuration")
	// ErrServerRestarted reports that a server restarted (its run_id
	// changed) during a Purge or Empty, whose SCAN then proves nothing:
	// run it again.
	ErrServerRestarted = errors.New("rediscache: server restarted during the scan")
)

// Options configures a Cache.
type Options struct {
	// Patterns are the templates of the key families a community owns, at
	// least one (see Pattern), e.g. "app:{community}:*" and
	// "session:{{community}}:*".
	Patterns []string
	// ScanCount is the COUNT hint of each SCAN call; default
	// DefaultScanCount, at most MaxScanCount.
	ScanCount int64
	// UnlinkBatch is the most keys one pipelined round of UNLINK removes;
	// default DefaultUnlinkBatch, at most MaxUnlinkBatch.
	UnlinkBatch int
	// Progress, if not nil, is called after each UNLINK round with how many
	// keys Purge has removed so far. Calls are serialized, but on a cluster
	// they come from the goroutine of whichever master is being purged.
	Progress func(unlinked int64)
}

// Cache is a Cache over a Redis client. It is safe for concurrent use.
type Cache struct {
	client   redis.UniversalClient
	patterns []Pattern
	opts     Options
	owned    bool // Close closes the client

	progressMu sync.Mutex
}

// New returns a Cache over client (a *redis.Client, *redis.ClusterClient or
// *redis.Ring) with opts. Close does not close a client passed to New.
func New(client redis.UniversalClient, opts Options) (*Cache, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: client is nil", ErrInvalidConfig)
	}
	patterns, err := opts.validate()
	if err != nil {
		return nil, err
	}
	return &Cache{client: client, patterns: patterns, opts: opts}, nil
}

func (o *Options) validate() ([]Pattern, error) {
	if len(o.Patterns) == 0 {
		return nil, fmt.Errorf("%w: no key patterns", ErrInvalidConfig)
	}
	if len(o.Patterns) > MaxPatterns {
		return nil, fmt.Errorf("%w: more than %d key patterns", ErrInvalidConfig, MaxPatterns)
	}
	patterns := make([]Pattern, len(o.Patterns))
	seen := make(map[string]bool, len(o.Patterns))
	for i, t := range o.Patterns {
		p, err := ParsePattern(t)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
		if seen[t] {
			return nil, fmt.Errorf("%w: key pattern %q given twice", ErrInvalidConfig, clip(t, 80))
		}
		seen[t] = true
		patterns[i] = p
	}
	if o.ScanCount == 0 {
		o.ScanCount = DefaultScanCount
	}
	if o.ScanCount < 1 || o.ScanCount > MaxScanCount {
		return nil, fmt.Errorf("%w: ScanCount %d is not between 1 and %d", ErrInvalidConfig, o.ScanCount, MaxScanCount)
	}
	if o.UnlinkBatch == 0 {
		o.UnlinkBatch = DefaultUnlinkBatch
	}
	if o.UnlinkBatch < 1 || o.UnlinkBatch > MaxUnlinkBatch {
		return nil, fmt.Errorf("%w: UnlinkBatch %d is not between 1 and %d", ErrInvalidConfig, o.UnlinkBatch, MaxUnlinkBatch)
	}
	return patterns, nil
}

// Patterns returns the cache's key patterns.
func (c *Cache) Patterns() []Pattern { return append([]Pattern(nil), c.patterns...) }

// LayoutTemplates returns the cache's key patterns as storage layout
// templates, for the executor to compare with the declared layout
// (executor.LayoutCache): {community} and the hash-tagged {{community}}
// are both written {tenant}, the layout's one placeholder.
func (c *Cache) LayoutTemplates() []string {
	out := make([]string, len(c.opts.Patterns))
	for i, t := range c.opts.Patterns {
		t = strings.ReplaceAll(t, HashTagPlaceholder, Placeholder)
		out[i] = strings.ReplaceAll(t, Placeholder, "{tenant}") // lifecycle.TenantPlaceholder
	}
	return out
}

// StoreKind names the store's kind in a deletion receipt: "redis".
func (c *Cache) StoreKind() string { return "redis" }

// Close closes the client if Open created it.
func (c *Cache) Close() error {
	if !c.owned {
		return nil
	}
	return c.client.Close()
}

// forEachNode calls fn on every master: each master of a cluster and each
// shard of a ring (concurrently), or the one server.
func (c *Cache) forEachNode(ctx context.Context, fn func(ctx context.Context, node *redis.Client) error) error {
	switch client := c.client.(type) {
	case *redis.ClusterClient:
		return client.ForEachMaster(ctx, fn)
	case *redis.Ring:
		return client.ForEachShard(ctx, fn)
	case *redis.Client:
		return fn(ctx, client)
	default:
		return fmt.Errorf("%w: unsupported client type %T", ErrInvalidConfig, c.client)
	}
}

// Purge removes every key of community that the patterns cover, on every
// master: SCAN MATCH in COUNT-sized steps, UNLINK in rounds of at most
// UnlinkBatch keys. It returns how many keys UNLINK removed. A key written
// while it runs may survive; Empty tells.
func (c *Cache) Purge(ctx context.Context, tenant lifecycle.TenantKey) (int64, error) {
	var (
		mu    sync.Mutex
		total int64
	)
	err := c.forEachNode(ctx, func(ctx context.Context, node *redis.Client) error {
		return c.stable(ctx, node, "purge", func() error {
			for _, p := range c.patterns {
				match := p.Match(tenant)
				var batch []string
				unlink := func() error {
					if len(batch) == 0 {
						return nil
					}
					n, err := unlinkKeys(ctx, node, batch)
					batch = batch[:0]
					mu.Lock()
					total += n
					running := total
					mu.Unlock()
					if err != nil {
						return c.fail("purge", node, match, err)
					}
					c.progress(running)
					return nil
				}
				err := c.scan(ctx, node, match, func(keys []string) (bool, error) {
					for _, key := range keys {
						batch = append(batch, key)
						if len(batch) >= c.opts.UnlinkBatch {
							if err := unlink(); err != nil {
								return false, err
							}
						}
					}
					return true, nil
				})
				if err != nil {
					return err
				}
				if err := unlink(); err != nil {
					return err
				}
			}
			return nil
		})
	})
	mu.Lock()
	defer mu.Unlock()
	return total, err
}

// unlinkKeys removes keys with one UNLINK each, pipelined: keys of a
// cluster node may lie in different slots, which a multi-key UNLINK refuses.
func unlinkKeys(ctx context.Context, node *redis.Client, keys []string) (int64, error) {
	cmds, err := node.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for _, key := range keys {
			pipe.Unlink(ctx, key)
		}
		return nil
	})
	var n int64
	for _, cmd := range cmds {
		if c, ok := cmd.(*redis.IntCmd); ok && c.Err() == nil {
			n += c.Val()
		}
	}
	return n, err
}

func (c *Cache) progress(total int64) {
	if c.opts.Progress == nil {
		return
	}
	c.progressMu.Lock()
	defer c.progressMu.Unlock()
	c.opts.Progress(total)
}

// Empty reports whether no key of community that the patterns cover is left
// on any master. It walks every SCAN to cursor 0 (a key present for the
// whole walk is always found) and stops at the first key it finds.
func (c *Cache) Empty(ctx context.Context, tenant lifecycle.TenantKey) (bool, error) {
	var found atomic.Bool
	err := c.forEachNode(ctx, func(ctx context.Context, node *redis.Client) error {
		return c.stable(ctx, node, "probe", func() error {
			for _, p := range c.patterns {
				if found.Load() {
					return nil
				}
				err := c.scan(ctx, node, p.Match(tenant), func(keys []string) (bool, error) {
					if len(keys) > 0 {
						found.Store(true)
					}
					return !found.Load(), nil
				})
				if err != nil {
					return err
				}
			}
			return nil
		})
	})
	if err != nil {
		return false, err
	}
	return !found.Load(), nil
}

// scan walks SCAN MATCH match on node from cursor 0 until cursor 0 comes
// back or fn returns false, handing fn each step's keys.
func (c *Cache) scan(ctx context.Context, node *redis.Client, match string, fn func(keys []string) (bool, error)) error {
	var cursor uint64
	for {
		keys, next, err := node.Scan(ctx, cursor, match, c.opts.ScanCount).Result()
		if err != nil {
			return c.fail("scan", node, match, err)
		}
		more, err := fn(keys)
		if err != nil || !more {
			return err
		}
		if next == 0 {
			return nil
		}
		cursor = next
	}
}

// stable runs fn and fails if node's run_id changed meanwhile: a server that
// restarted invalidates a SCAN walked across the restart.
func (c *Cache) stable(ctx context.Context, node *redis.Client, op string, fn func() error) error {
	before, err := runID(ctx, node)
	if err != nil {
		return c.fail(op, node, "", err)
	}
	if err := fn(); err != nil {
		return err
	}
	after, err := runID(ctx, node)
	if err != nil {
		return c.fail(op, node, "", err)
	}
	if before != after {
		return c.fail(op, node, "", ErrServerRestarted)
	}
	return nil
}

// runID returns the server's run_id from INFO server.
func runID(ctx context.Context, node *redis.Client) (string, error) {
	info, err := node.Info(ctx, "server").Result()
	if err != nil {
		return "", err
	}
	for line := range strings.SplitSeq(info, "\n") {
		if id, ok := strings.CutPrefix(strings.TrimSpace(line), "run_id:"); ok && id != "" {
			return id, nil
		}
	}
	return "", errors.New("INFO server has no run_id")
}

// Error is a failed Redis call: what was attempted, on which server, for
// which SCAN pattern, and why.
type Error struct {
	Op    string // "purge", "probe", "scan"
	Addr  string
	Match string
	Err   error
}

func (e *Error) Error() string {
	s := fmt.Sprintf("rediscache: %s on %s", e.Op, e.Addr)
	if e.Match != "" {
		s += fmt.Sprintf(" (MATCH %q)", e.Match)
	}
	return bound(s + ": " + e.Err.Error())
}

func (e *Error) Unwrap() error { return e.Err }

func (c *Cache) fail(op string, node *redis.Client, match string, err error) error {
	if _, ok := errors.AsType[*Error](err); ok {
		return err
	}
	return &Error{Op: op, Addr: node.Options().Addr, Match: match, Err: err}
}

// bound makes s one line of at most errtext.Max bytes, as every error this
// package returns is: a server's message can be arbitrarily long, and an
// error is printed on one line of a log or a CLI.
func bound(s string) string { return errtext.Line(s, errtext.Max) }

// clip cuts s to at most n bytes (n >= 64).
func clip(s string, n int) string { return errtext.Clip(s, n) }
