package rediscache_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/executor"
	"github.com/tombstoneworks/communitydeletion/executor/rediscache"
	"github.com/tombstoneworks/communitydeletion/internal/fixture"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// TestExecutorVerifiesTheCache drives a deletion through the executor with
// the Redis cache. The purge stage removes the community's keys; a key
// written back right after it makes verification fail closed (the request
// stays at cache_purged, never logically verified); once it is gone, the
// deletion completes, and another community's keys are untouched
// throughout.
func TestExecutorVerifiesTheCache(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	rc := client(t, redisSrv.URL)
	url, pool := fixture.NewTestPool(t, pgsrv)
	clients := fixture.NewClients(t, url)
	l := newLayout()
	cache, err := rediscache.New(rc, rediscache.Options{Patterns: l.templates, UnlinkBatch: 100})
	require.NoError(t, err)

	target, other := uuid.New(), uuid.New()
	for _, id := range []uuid.UUID{target, other} {
		_, err := pool.Exec(ctx, "INSERT INTO communities (id, host, signing_key, icon) VALUES ($1, $2, 'key', 'icon.png')",
			id, "c-"+id.String()+".example")
		require.NoError(t, err)
	}
	targetKeys, otherKeys := l.keys(t, target, 1000), l.keys(t, other, 300)
	setKeys(t, rc, append(append([]string(nil), targetKeys...), otherKeys...))

	files := executor.NewFileObjectStore(t.TempDir())
	prefixes := func(tenant lifecycle.TenantKey) []string { return []string{"media/" + tenant.String() + "/"} }
	request, err := clients.Operator.Submit(ctx, "c-"+target.String()+".example", "alice", "test")
	require.NoError(t, err)
	schema, err := clients.Operator.InventorySchema(ctx, target)
	require.NoError(t, err)
	storage, err := executor.SummarizeStorage(ctx, files, prefixes(lifecycle.UUIDKey(target)))
	require.NoError(t, err)
	_, err = clients.Operator.FreezeInventory(ctx, request.ID, lifecycle.FrozenInventory{Schema: *schema, Storage: storage})
	require.NoError(t, err)
	_, err = clients.Approver.Approve(ctx, request.ID, "bob", "ok")
	require.NoError(t, err)

	late := keyOf(t, l.templates[0], target, "written-after-the-purge")
	var purged string
	cfg := executor.Config{
		Engine: clients.Engine, Objects: files, Cache: cache, Owner: "executor-1", Prefixes: prefixes,
		RetryBase: time.Millisecond, RetryMax: 5 * time.Millisecond,
		Progress: func(ev executor.Event) {
			if strings.HasPrefix(ev.Message, "cache purged") {
				purged = ev.Message
				// A misbehaving writer: runs on the executor's goroutine,
				// after the purge and before verification.
				require.NoError(t, rc.Set(ctx, late, "v", 0).Err())
			}
		},
	}
	runner, err := executor.New(cfg)
	require.NoError(t, err)
	claimed, err := runner.RunRequest(ctx, request.ID)
	require.True(t, claimed)
	require.ErrorIs(t, err, executor.ErrRetryScheduled)
	require.Contains(t, err.Error(), "cache entries remain")
	require.Equal(t, "cache purged: 1000 keys", purged)
	got, err := clients.Operator.Get(ctx, request.ID)
	require.NoError(t, err)
	require.Equal(t, lifecycle.StageCachePurged, got.Stage)
	require.Equal(t, []string{late}, existing(t, rc, append(targetKeys, late)))

	// An operator removes the stray key; the next run verifies and completes.
	require.NoError(t, rc.Del(ctx, late).Err())
	cfg.Progress, cfg.Owner = nil, "executor-2"
	runner, err = executor.New(cfg)
	require.NoError(t, err)
	deadline := time.Now().Add(30 * time.Second)
	for {
		claimed, err = runner.RunRequest(ctx, request.ID)
		if claimed {
			break
		}
		require.NoError(t, err)
		require.True(t, time.Now().Before(deadline), "not claimable again after its retry delay")
		time.Sleep(10 * time.Millisecond) // polls for the end of a retry delay of a few milliseconds
	}
	require.NoError(t, err)
	got, err = clients.Operator.Get(ctx, request.ID)
	require.NoError(t, err)
	require.Equal(t, lifecycle.StageRetentionPending, got.Stage)
	require.Equal(t, otherKeys, existing(t, rc, otherKeys))
}

// The runner compares the Redis cache's patterns with the cache templates
// the deployment declared: with none declared it runs; with others declared
// it refuses before it claims anything (the request stays approved); with
// the same ones declared it runs.
func TestExecutorRefusesACacheThatDiffersFromTheDeclaredLayout(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url, pool := fixture.NewTestPool(t, pgsrv)
	clients := fixture.NewClients(t, url)
	cache, err := rediscache.New(client(t, redisSrv.URL), rediscache.Options{Patterns: []string{"ws:{community}:*", "q:{{community}}:*"}})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"ws:{tenant}:*", "q:{tenant}:*"}, cache.LayoutTemplates())
	runner, err := executor.New(executor.Config{Engine: clients.Engine, Objects: executor.NewFileObjectStore(t.TempDir()), Cache: cache, Owner: "executor-1"})
	require.NoError(t, err)
	require.NoError(t, runner.CheckLayout(ctx), "no cache layout declared")

	declare := func(template string) {
		_, err := pool.Exec(ctx, "INSERT INTO community_deletion.community_deletion_storage_layout (kind, template, reason) VALUES ('cache', $1, 'test')", template)
		require.NoError(t, err)
	}
	declare("ws:{tenant}:*")
	err = runner.CheckLayout(ctx)
	require.ErrorIs(t, err, executor.ErrLayoutMismatch)
	require.Contains(t, err.Error(), `the declared layout names ["ws:{tenant}:*"]`)
	claimed, err := runner.RunNext(ctx)
	require.False(t, claimed)
	require.ErrorIs(t, err, executor.ErrLayoutMismatch)
	require.ErrorIs(t, runner.Run(ctx), executor.ErrLayoutMismatch, "Run refuses to start")

	declare("q:{tenant}:*")
	require.NoError(t, runner.CheckLayout(ctx))
}
