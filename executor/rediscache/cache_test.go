package rediscache_test

import (
	"context"
	"fmt"
	neturl "net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tombstoneworks/communitydeletion/lifecycle"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/executor/rediscache"
	"github.com/tombstoneworks/communitydeletion/internal/errtext/errtexttest"
	"github.com/tombstoneworks/communitydeletion/internal/testserver/redisserver"
)

// layout is a service's key families: four patterns, two of them with the
// id as a hash tag.
type layout struct {
	templates []string
}

func newLayout() layout {
	return layout{templates: []string{
		family("app") + ":{community}:*",
		family("feed") + ":{{community}}:*",
		family("sess") + ":{{community}}*",
		family("quota") + ":{community}",
	}}
}

// keys returns n keys of community spread over the families (one for the
// single-key family).
func (l layout) keys(t *testing.T, community uuid.UUID, n int) []string {
	t.Helper()
	keys := []string{keyOf(t, l.templates[3], community, "")}
	wild := l.templates[:3]
	for i := range n - 1 {
		keys = append(keys, keyOf(t, wild[i%3], community, fmt.Sprintf("k%06d", i)))
	}
	return keys
}

// lookalikes returns keys that resemble community's but are not its: other
// families sharing a prefix, the id in the wrong place or without the
// delimiter, and the id with a case change.
func (l layout) lookalikes(community uuid.UUID) []string {
	id := community.String()
	app, feed, sess, quota := l.templates[0][:len(l.templates[0])-len(":{community}:*")],
		l.templates[1][:len(l.templates[1])-len(":{{community}}:*")],
		l.templates[2][:len(l.templates[2])-len(":{{community}}*")],
		l.templates[3][:len(l.templates[3])-len(":{community}")]
	upper := []byte(id)
	for i, c := range upper {
		if c >= 'a' && c <= 'f' {
			upper[i] = c - 'a' + 'A'
			break
		}
	}
	return []string{
		app + ":" + id,                   // no ":" after the id
		app + ":" + id + "0:x",           // an id of which id is a prefix
		feed + ":{" + id + "0}:x",        // ditto, hash-tagged
		app + "s:" + id + ":x",           // family "apps"
		"x" + app + ":" + id + ":x",      // family "xapp"
		app + ":" + string(upper) + ":x", // the id's case differs
		app + ":{" + id + "}:x",          // hash tag where the family has none
		feed + ":" + id + ":x",           // no hash tag where the family has one
		sess + ":" + id + "x",            // ditto
		quota + ":" + id + ":more",       // the single-key family has no suffix
		quota + ":" + id + "0",
		"other:" + id + ":x",
	}
}

// TestPurgeManyKeys purges 20,000 keys of one community over four families
// and leaves other communities' keys and every look-alike key alone.
func TestPurgeManyKeys(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	rc := client(t, redisSrv.URL)
	l := newLayout()
	target, other1, other2 := uuid.New(), uuid.New(), uuid.New()
	targetKeys := l.keys(t, target, 20_000)
	keep := append(l.keys(t, other1, 500), l.keys(t, other2, 500)...)
	keep = append(keep, l.lookalikes(target)...)
	setKeys(t, rc, append(slices.Clone(targetKeys), keep...))

	var mu sync.Mutex
	var progress []int64
	cache, err := rediscache.New(rc, rediscache.Options{
		Patterns: l.templates, ScanCount: 500, UnlinkBatch: 700,
		Progress: func(n int64) { mu.Lock(); progress = append(progress, n); mu.Unlock() },
	})
	require.NoError(t, err)
	empty, err := cache.Empty(ctx, lifecycle.UUIDKey(target))
	require.NoError(t, err)
	require.False(t, empty)

	n, err := cache.Purge(ctx, lifecycle.UUIDKey(target))
	require.NoError(t, err)
	require.Equal(t, int64(20_000), n)
	require.Empty(t, existing(t, rc, targetKeys))
	require.Equal(t, keep, existing(t, rc, keep), "other communities' and look-alike keys survive")
	empty, err = cache.Empty(ctx, lifecycle.UUIDKey(target))
	require.NoError(t, err)
	require.True(t, empty)
	for _, id := range []uuid.UUID{other1, other2} {
		empty, err = cache.Empty(ctx, lifecycle.UUIDKey(id))
		require.NoError(t, err)
		require.False(t, empty)
	}

	mu.Lock()
	require.True(t, slices.IsSorted(progress))
	require.Equal(t, int64(20_000), progress[len(progress)-1])
	require.GreaterOrEqual(t, len(progress), 20_000/700)
	for i := 1; i < len(progress); i++ {
		require.LessOrEqual(t, progress[i]-progress[i-1], int64(700), "UNLINK rounds of at most UnlinkBatch keys")
	}
	mu.Unlock()

	n, err = cache.Purge(ctx, lifecycle.UUIDKey(target))
	require.NoError(t, err)
	require.Zero(t, n, "purging an empty namespace removes nothing")
}

// TestGlobCharactersInFamilies uses family names with glob characters: the
// cache matches them literally, so keys that would match them as globs
// survive.
func TestGlobCharactersInFamilies(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	rc := client(t, redisSrv.URL)
	base := family("g")
	templates := []string{base + `we?rd[1]\x^-:{community}:*`, base + `q?:{{community}}`}
	id := uuid.New()
	mine := []string{keyOf(t, templates[0], id, "a"), keyOf(t, templates[0], id, "*?[]"), keyOf(t, templates[1], id, "")}
	notMine := []string{
		base + `weXrd1x^-:` + id.String() + ":a",   // matches the family as an unescaped glob
		base + `we?rd[1]x^-:` + id.String() + ":a", // "\x" as a glob escape
		base + `qZ:{` + id.String() + "}",
	}
	setKeys(t, rc, append(slices.Clone(mine), notMine...))
	cache, err := rediscache.New(rc, rediscache.Options{Patterns: templates})
	require.NoError(t, err)
	n, err := cache.Purge(ctx, lifecycle.UUIDKey(id))
	require.NoError(t, err)
	require.Equal(t, int64(len(mine)), n)
	require.Empty(t, existing(t, rc, mine))
	require.Equal(t, notMine, existing(t, rc, notMine))
	empty, err := cache.Empty(ctx, lifecycle.UUIDKey(id))
	require.NoError(t, err)
	require.True(t, empty)
}

// TestEmptyFailsClosedWhileAWriterWrites keeps writing the community's keys
// during and after the purge: Empty must then report false, every time.
func TestEmptyFailsClosedWhileAWriterWrites(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	rc := client(t, redisSrv.URL)
	l := newLayout()
	id := uuid.New()
	setKeys(t, rc, l.keys(t, id, 2000))
	cache, err := rediscache.New(rc, rediscache.Options{Patterns: l.templates, ScanCount: 100, UnlinkBatch: 100})
	require.NoError(t, err)

	writerCtx, stopWriter := context.WithCancel(ctx)
	written := make(chan struct{}) // one receive per key written
	writerDone := make(chan error, 1)
	go func() {
		defer close(writerDone)
		for i := 0; ; i++ {
			key := keyOf(t, l.templates[i%3], id, fmt.Sprintf("late%d", i)) //nolint:testifylint // the templates are fixed and valid; keyOf cannot fail here
			if err := rc.Set(writerCtx, key, "v", 0).Err(); err != nil {
				if writerCtx.Err() == nil {
					writerDone <- err
				}
				return
			}
			select {
			case written <- struct{}{}:
			case <-writerCtx.Done():
				return
			}
		}
	}()
	for range 3 {
		<-written
		_, err := cache.Purge(ctx, lifecycle.UUIDKey(id))
		require.NoError(t, err)
		// The writer may be blocked reporting a key written (and perhaps
		// unlinked) during the purge; the key after that one was written
		// after the purge returned, and since the writer never deletes, it
		// exists for Empty's whole walk.
		<-written
		<-written
		empty, err := cache.Empty(ctx, lifecycle.UUIDKey(id))
		require.NoError(t, err)
		require.False(t, empty, "keys written during and after the purge are left")
	}
	stopWriter()
	require.NoError(t, <-writerDone)

	_, err = cache.Purge(ctx, lifecycle.UUIDKey(id))
	require.NoError(t, err)
	empty, err := cache.Empty(ctx, lifecycle.UUIDKey(id))
	require.NoError(t, err)
	require.True(t, empty, "once the writer stopped, a purge empties it")
}

// TestServerRestartMidPurge restarts redis-server (keeping its data set)
// between two UNLINK rounds: the purge fails rather than trust a SCAN cursor
// across the restart, Empty never reports the half-purged namespace empty,
// and a retried purge completes.
func TestServerRestartMidPurge(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	srv, err := redisserver.StartLocal(ctx, nil) // its own: this test restarts it
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, srv.Close()) })
	rc := client(t, srv.URL)
	l := newLayout()
	id, other := uuid.New(), uuid.New()
	keys := l.keys(t, id, 5000)
	otherKeys := l.keys(t, other, 100)
	setKeys(t, rc, append(slices.Clone(keys), otherKeys...))

	restarted := false
	cache, err := rediscache.New(rc, rediscache.Options{
		Patterns: l.templates, ScanCount: 200, UnlinkBatch: 500,
		Progress: func(_ int64) {
			if !restarted {
				restarted = true
				require.NoError(t, srv.Restart(ctx))
			}
		},
	})
	require.NoError(t, err)
	n, err := cache.Purge(ctx, lifecycle.UUIDKey(id))
	require.True(t, restarted)
	require.ErrorIs(t, err, rediscache.ErrServerRestarted)
	errtexttest.RequireLine(t, err)
	left := existing(t, rc, keys)
	require.Equal(t, int64(len(keys)-len(left)), n, "the count is what UNLINK removed")
	t.Logf("%d of %d keys left after the interrupted purge", len(left), len(keys))

	empty, err := cache.Empty(ctx, lifecycle.UUIDKey(id))
	require.NoError(t, err)
	require.Equal(t, len(left) == 0, empty, "Empty tells the truth after the restart")

	n, err = cache.Purge(ctx, lifecycle.UUIDKey(id))
	require.NoError(t, err)
	require.Equal(t, int64(len(left)), n)
	empty, err = cache.Empty(ctx, lifecycle.UUIDKey(id))
	require.NoError(t, err)
	require.True(t, empty)
	require.Equal(t, otherKeys, existing(t, rc, otherKeys))
}

// TestEmptyRefusesAcrossARestart: a scan that spans a restart proves
// nothing, so Empty fails instead of answering.
func TestEmptyRefusesAcrossARestart(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	srv, err := redisserver.StartLocal(ctx, nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, srv.Close()) })
	rc := client(t, srv.URL)
	l := newLayout()
	id := uuid.New()
	// Only other keys: a SCAN finds none of id's, page after page.
	setKeys(t, rc, l.keys(t, uuid.New(), 3000))
	var once sync.Once
	rc.AddHook(scanHook{after: func() { once.Do(func() { require.NoError(t, srv.Restart(ctx)) }) }})
	cache, err := rediscache.New(rc, rediscache.Options{Patterns: l.templates, ScanCount: 100})
	require.NoError(t, err)
	_, err = cache.Empty(ctx, lifecycle.UUIDKey(id))
	require.ErrorIs(t, err, rediscache.ErrServerRestarted)
}

// scanHook calls after once a SCAN command has returned.
type scanHook struct{ after func() }

func (h scanHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h scanHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if cmd.Name() == "scan" {
			h.after()
		}
		return err
	}
}
func (h scanHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestCluster purges through a 3-master Redis Cluster opened from its URL
// form: keys of hash-tagged families sit in one slot, the others spread over
// every master, and all of them go.
func TestCluster(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cluster, err := redisserver.StartCluster(ctx, 3)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, cluster.Close()) })

	l := newLayout()
	var url strings.Builder
	url.WriteString("redis+cluster://" + cluster.Addrs[0] + "," + cluster.Addrs[1] + "?dial_timeout=5s")
	for _, p := range l.templates {
		url.WriteString("&pattern=" + neturl.QueryEscape(p))
	}
	cache, err := rediscache.OpenURL(url.String())
	require.NoError(t, err)
	t.Cleanup(func() { _ = cache.Close() })
	rc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs})
	t.Cleanup(func() { _ = rc.Close() })

	id, other := uuid.New(), uuid.New()
	keys := l.keys(t, id, 3000)
	otherKeys := append(l.keys(t, other, 300), l.lookalikes(id)...)
	for _, k := range append(slices.Clone(keys), otherKeys...) {
		require.NoError(t, rc.Set(ctx, k, "v", 0).Err())
	}
	// Every master holds some of id's keys; a hash-tagged family's keys
	// share one.
	perMaster := map[string]int{}
	taggedOn := map[string]bool{}
	for i, k := range keys {
		node, err := rc.MasterForKey(ctx, k)
		require.NoError(t, err)
		perMaster[node.Options().Addr]++
		if i > 0 && (i-1)%3 == 1 { // l.templates[1], "feed:{{community}}:*"
			taggedOn[node.Options().Addr] = true
		}
	}
	require.Len(t, perMaster, 3)
	require.Len(t, taggedOn, 1)

	n, err := cache.Purge(ctx, lifecycle.UUIDKey(id))
	require.NoError(t, err)
	require.Equal(t, int64(len(keys)), n)
	empty, err := cache.Empty(ctx, lifecycle.UUIDKey(id))
	require.NoError(t, err)
	require.True(t, empty)
	for _, k := range keys {
		require.Zero(t, rc.Exists(ctx, k).Val(), k)
	}
	for _, k := range otherKeys {
		require.Equal(t, int64(1), rc.Exists(ctx, k).Val(), k)
	}

	// One key left on one master is enough for Empty to say no.
	require.NoError(t, rc.Set(ctx, keys[1], "v", 0).Err())
	empty, err = cache.Empty(ctx, lifecycle.UUIDKey(id))
	require.NoError(t, err)
	require.False(t, empty)
}
