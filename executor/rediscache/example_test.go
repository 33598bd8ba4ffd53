package rediscache_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/tombstoneworks/communitydeletion/lifecycle"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/tombstoneworks/communitydeletion/executor/rediscache"
)

// exampleRedis returns a client to the test binary's Redis (redisSrv,
// started by TestMain: redis-server, or TEST_REDIS_URL), panicking on
// error.
func exampleRedis() *redis.Client {
	opts, err := redis.ParseURL(redisSrv.URL)
	if err != nil {
		panic(err)
	}
	return redis.NewClient(opts)
}

// ExampleNew purges one community's keys from Redis, given the key
// patterns the service writes: Purge SCANs each pattern and UNLINKs what
// it finds, Empty proves nothing is left. Another community's keys, and a
// family whose name merely starts alike, are never matched.
func ExampleNew() {
	ctx := context.Background()
	client := exampleRedis() // the service's *redis.Client or *redis.ClusterClient
	defer client.Close()
	target := uuid.MustParse("4a3a2d70-0c1e-4c55-8b7e-1f2d3c4b5a69")
	other := uuid.MustParse("9f8e7d6c-5b4a-4321-8fed-cba987654321")
	for _, key := range []string{
		"exfeed:" + target.String() + ":1", "exfeed:" + target.String() + ":2",
		"exsession:{" + target.String() + "}:web", "exquota:" + target.String(),
		"exfeed:" + other.String() + ":1", "exfeeds:" + target.String() + ":1",
	} {
		if err := client.Set(ctx, key, "v", 0).Err(); err != nil {
			log.Fatal(err)
		}
	}

	cache, err := rediscache.New(client, rediscache.Options{Patterns: []string{
		"exfeed:{community}:*",      // {community} is the community's id; a final * any suffix
		"exsession:{{community}}:*", // {{community}}: the id as a Redis Cluster hash tag
		"exquota:{community}",       // without *: exactly one key
	}})
	if err != nil {
		log.Fatal(err)
	}
	removed, err := cache.Purge(ctx, lifecycle.UUIDKey(target))
	if err != nil {
		log.Fatal(err) // rediscache.ErrServerRestarted: a restart during the walk proves nothing
	}
	empty, err := cache.Empty(ctx, lifecycle.UUIDKey(target))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("removed:", removed, "empty:", empty)
	kept, err := client.Exists(ctx, "exfeed:"+other.String()+":1", "exfeeds:"+target.String()+":1").Result()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("other keys kept:", kept)
	client.Del(ctx, "exfeed:"+other.String()+":1", "exfeeds:"+target.String()+":1")
	// Output:
	// removed: 4 empty: true
	// other keys kept: 2
}

// ExampleOpenURL opens the cache from its URL form, as deletionctl run
// does: the server, then one pattern= parameter per key family
// (percent-encoded). A malformed URL is refused before any connection.
func ExampleOpenURL() {
	ctx := context.Background()
	cache, err := rediscache.OpenURL(redisSrv.URL + "?pattern=exapp:%7Bcommunity%7D:*&scan_count=100")
	if err != nil {
		log.Fatal(err) // a *rediscache.URLError, which never shows the password
	}
	defer cache.Close()
	empty, err := cache.Empty(ctx, lifecycle.UUIDKey(uuid.MustParse("4a3a2d70-0c1e-4c55-8b7e-1f2d3c4b5a69")))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("empty:", empty)

	_, err = rediscache.OpenURL(redisSrv.URL + "?pattern=exapp:*") // names no community
	fmt.Println("refused:", errors.Is(err, rediscache.ErrInvalidURL))
	// Output:
	// empty: true
	// refused: true
}
