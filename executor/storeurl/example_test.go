package storeurl_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/tombstoneworks/communitydeletion/lifecycle"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/tombstoneworks/communitydeletion/executor/storeurl"
	"github.com/tombstoneworks/communitydeletion/internal/testserver/redisserver"
	"github.com/tombstoneworks/communitydeletion/internal/testserver/s3server"
)

// The examples' servers start on first use, so the package's other tests,
// which parse and open URLs without a server, do not wait for them.
var (
	redisOnce, s3Once sync.Once
	redisSrv          *redisserver.Server
	s3Srv             *s3server.Server
	stops             []func()
)

func TestMain(m *testing.M) {
	code := m.Run()
	for _, stop := range stops {
		stop()
	}
	os.Exit(code)
}

// exampleRedisURL returns the redis:// URL of the test binary's Redis
// (redis-server, or TEST_REDIS_URL), starting it on first use.
func exampleRedisURL() string {
	redisOnce.Do(func() {
		var stop func()
		redisSrv, stop = redisserver.StartForTests()
		stops = append(stops, stop)
	})
	return redisSrv.URL
}

// exampleS3 returns the test binary's S3-compatible server (Versity's
// gateway, or TEST_S3_ENDPOINT), starting it on first use.
func exampleS3() *s3server.Server {
	s3Once.Do(func() {
		var stop func()
		s3Srv, stop = s3server.StartForTests()
		stops = append(stops, stop)
	})
	return s3Srv
}

// setRedisKey writes key on the Redis at url, as the service would have,
// panicking on error.
func setRedisKey(url, key string) {
	opts, err := redis.ParseURL(url)
	if err != nil {
		panic(err)
	}
	client := redis.NewClient(opts)
	defer client.Close()
	if err := client.Set(context.Background(), key, "v", 0).Err(); err != nil {
		panic(err)
	}
}

// ExampleOpenObjects opens the object store a file:// URL names, as
// deletionctl run --objects does; an s3:// URL opens s3store the same way.
func ExampleOpenObjects() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "objects-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.MkdirAll(filepath.Join(dir, "media", "c1"), 0o755); err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "media", "c1", "a.png"), []byte("png"), 0o644); err != nil {
		log.Fatal(err)
	}

	objects, err := storeurl.OpenObjects(ctx, (&url.URL{Scheme: "file", Path: dir}).String())
	if err != nil {
		log.Fatal(err) // a *storeurl.Error: one line, never a password
	}
	err = objects.List(ctx, "media/", func(key string, size int64) error {
		fmt.Println(key, size)
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}

	_, err = storeurl.OpenObjects(ctx, "file:relative/dir")
	fmt.Println("relative directory refused:", errors.Is(err, storeurl.ErrInvalidURL))
	// Output:
	// media/c1/a.png 3
	// relative directory refused: true
}

// ExampleParseObjects parses an s3:// URL into s3store's configuration,
// sets credentials (which a URL never carries; without them the SDK's
// default chain applies) and opens the store.
func ExampleParseObjects() {
	ctx := context.Background()
	server := exampleS3()
	raw := "s3://" + server.Bucket + "/tenants/?path_style=true&region=" + server.Region +
		"&endpoint=" + url.QueryEscape(server.Endpoint)

	parsed, err := storeurl.ParseObjects(raw)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(parsed.Scheme, "root", parsed.S3.Root, "path style", parsed.S3.PathStyle)
	parsed.S3.Credentials = server.Credentials()
	objects, err := parsed.Open(ctx)
	if err != nil {
		log.Fatal(err)
	}
	found, err := objects.Any(ctx, "media/"+uuid.NewString()+"/")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("objects under a new community's prefix:", found)
	// Output:
	// s3 root tenants/ path style true
	// objects under a new community's prefix: false
}

// ExampleOpenCache opens the cache a URL names, as deletionctl run
// --cache does: redis:// (or rediss://, redis+cluster://…) with one
// pattern= parameter per key family, or memory: for the in-process cache.
// String never shows a password.
func ExampleOpenCache() {
	ctx := context.Background()
	community := uuid.New()
	setRedisKey(exampleRedisURL(), "exsession:"+community.String()+":web")

	cache, err := storeurl.OpenCache(exampleRedisURL() + "?pattern=exsession:%7Bcommunity%7D:*")
	if err != nil {
		log.Fatal(err)
	}
	defer cache.Close()
	removed, err := cache.Purge(ctx, lifecycle.UUIDKey(community))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("removed:", removed)

	parsed, err := storeurl.ParseCache("redis://app:s3cret@cache.internal:6379/0?pattern=session:%7Bcommunity%7D:*")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(parsed)

	memory, err := storeurl.OpenCache("memory:")
	if err != nil {
		log.Fatal(err)
	}
	defer memory.Close()
	empty, err := memory.Empty(ctx, lifecycle.UUIDKey(uuid.New()))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("memory cache empty:", empty)
	// Output:
	// removed: 1
	// redis://app:xxxxx@cache.internal:6379/0?pattern=session:%7Bcommunity%7D:*
	// memory cache empty: true
}
