package rediscache_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"testing"

	"github.com/tombstoneworks/communitydeletion/lifecycle"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/executor"
	"github.com/tombstoneworks/communitydeletion/executor/rediscache"
	"github.com/tombstoneworks/communitydeletion/internal/ephemeralpg"
	"github.com/tombstoneworks/communitydeletion/internal/testserver/redisserver"
)

// The cache is an executor.Cache.
var _ executor.Cache = (*rediscache.Cache)(nil)

var (
	// redisSrv is the Redis the tests share; each test uses key families
	// of its own.
	redisSrv *redisserver.Server
	// pgsrv is the PostgreSQL of the executor test.
	pgsrv *ephemeralpg.Server
)

func TestMain(m *testing.M) {
	r, stopRedis := redisserver.StartForTests()
	redisSrv = r
	pg, stopPG := ephemeralpg.StartForTests(ephemeralpg.Options{})
	pgsrv = pg
	code := m.Run()
	stopPG()
	stopRedis()
	os.Exit(code)
}

// client returns a go-redis client to url, closed when the test ends.
func client(t *testing.T, url string) *redis.Client {
	t.Helper()
	opts, err := redis.ParseURL(url)
	require.NoError(t, err)
	c := redis.NewClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// family returns a key-family name no other test uses.
func family(name string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return "t" + hex.EncodeToString(b) + "-" + name
}

// setKeys writes keys (value "v") in pipelined rounds, and deletes them
// when the test ends, so a shared TEST_REDIS_URL server does not fill up.
func setKeys(t *testing.T, c redis.Cmdable, keys []string) {
	t.Helper()
	t.Cleanup(func() {
		ctx := context.Background() // t.Context is canceled before cleanups run
		for start := 0; start < len(keys); start += 1000 {
			if err := c.Del(ctx, keys[start:min(start+1000, len(keys))]...).Err(); err != nil {
				t.Errorf("remove the test's keys: %v", err)
				return
			}
		}
	})
	for start := 0; start < len(keys); start += 1000 {
		_, err := c.Pipelined(t.Context(), func(p redis.Pipeliner) error {
			for _, k := range keys[start:min(start+1000, len(keys))] {
				p.Set(t.Context(), k, "v", 0)
			}
			return nil
		})
		require.NoError(t, err)
	}
}

// existing returns which of keys exist.
func existing(t *testing.T, c redis.Cmdable, keys []string) []string {
	t.Helper()
	var left []string
	for start := 0; start < len(keys); start += 1000 {
		batch := keys[start:min(start+1000, len(keys))]
		cmds, err := c.Pipelined(t.Context(), func(p redis.Pipeliner) error {
			for _, k := range batch {
				p.Exists(t.Context(), k)
			}
			return nil
		})
		require.NoError(t, err)
		for i, cmd := range cmds {
			if cmd.(*redis.IntCmd).Val() == 1 {
				left = append(left, batch[i])
			}
		}
	}
	return left
}

// keyOf returns template's key of community with suffix, checking
// Pattern.Key against a plain substitution.
func keyOf(t *testing.T, template string, community uuid.UUID, suffix string) string {
	t.Helper()
	p, err := rediscache.ParsePattern(template)
	require.NoError(t, err)
	id := community.String()
	want := strings.ReplaceAll(template, rediscache.HashTagPlaceholder, "{"+id+"}")
	want = strings.TrimSuffix(strings.ReplaceAll(want, rediscache.Placeholder, id), "*") + suffix
	key, err := p.Key(lifecycle.UUIDKey(community), suffix)
	require.NoError(t, err)
	require.Equal(t, want, key)
	return key
}
