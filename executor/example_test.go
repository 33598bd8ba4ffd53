package executor_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tombstoneworks/communitydeletion/executor"
	"github.com/tombstoneworks/communitydeletion/internal/exampledb"
	"github.com/tombstoneworks/communitydeletion/internal/fixture"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// exampleDatabase returns a fresh database for one example on the package's
// throwaway PostgreSQL (server, started by TestMain), with the connection
// strings of two operators, the executor and the service. It panics on
// error: examples take no *testing.T.
func exampleDatabase() *exampledb.Database { return exampledb.New(server) }

// writeObjects writes each key as a file under root, as the service's
// uploads would have, panicking on error.
func writeObjects(root string, keys ...string) {
	for _, key := range keys {
		path := filepath.Join(root, filepath.FromSlash(key))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			panic(err)
		}
		if err := os.WriteFile(path, []byte("contents of "+key), 0o644); err != nil {
			panic(err)
		}
	}
}

// approveWithObjects approves the deletion of the community at host as two
// operators would, with the storage inventory objects holds under the
// fixture's prefixes (media/<id>/ and uploads/<id>/); it panics on error.
func approveWithObjects(db *exampledb.Database, objects executor.ObjectStore, host string, community uuid.UUID) *lifecycle.Request {
	storage, err := executor.SummarizeStorage(context.Background(), objects, fixture.ObjectPrefixes(community))
	if err != nil {
		panic(err)
	}
	return db.Approve(host, &storage)
}

// ExampleRunner_RunRequest deletes a community end to end: an approved
// request, whose storage inventory lists two files, is claimed by a Runner
// that fences the community, deletes its objects, purges its rows and its
// cache entries, verifies all three stores and leaves the tombstone.
// Another community's files and cache entries are untouched.
func ExampleRunner_RunRequest() {
	ctx := context.Background()
	db := exampleDatabase()
	target := db.Community("tenant.example", 3)
	other := db.Community("other.example", 3)
	root, err := os.MkdirTemp("", "objects-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(root)
	writeObjects(root, "media/"+target.String()+"/avatar.png", "uploads/"+target.String()+"/report.pdf",
		"media/"+other.String()+"/avatar.png")
	objects := executor.NewFileObjectStore(root) // or s3store, for S3
	cache := executor.NewMemoryCache()           // or rediscache, for Redis
	cache.Put(lifecycle.UUIDKey(target), "session:1", "feed")
	cache.Put(lifecycle.UUIDKey(other), "session:1")
	request := approveWithObjects(db, objects, "tenant.example", target)

	pool, err := pgxpool.New(ctx, db.Executor) // a login that is a member of community_deletion_executor
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	engine, err := lifecycle.NewEngine(ctx, pool, nil)
	if err != nil {
		log.Fatal(err)
	}
	runner, err := executor.New(executor.Config{
		Engine: engine, Objects: objects, Cache: cache, Owner: "executor-1",
		Prefixes: func(k lifecycle.TenantKey) []string { return fixture.ObjectPrefixesOf(k.String()) }, // where the service keeps a community's objects
	})
	if err != nil {
		log.Fatal(err)
	}
	claimed, err := runner.RunRequest(ctx, request.ID)
	if err != nil {
		log.Fatal(err) // errors.Is(err, executor.ErrRetryScheduled) or executor.ErrBlocked: recorded on the request
	}
	done, err := engine.Get(ctx, request.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("claimed:", claimed, "stage:", done.Stage)
	left, err := objects.Any(ctx, "media/"+target.String()+"/")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("objects left:", left, "cache keys left:", cache.Len(lifecycle.UUIDKey(target)))
	fmt.Println("rows left:", db.Count("SELECT count(*) FROM fixture_members WHERE community_id = $1", target))
	kept, err := objects.Any(ctx, "media/"+other.String()+"/")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("other community kept:", kept, cache.Len(lifecycle.UUIDKey(other)),
		db.Count("SELECT count(*) FROM fixture_members WHERE community_id = $1", other))
	// Output:
	// claimed: true stage: retention_pending
	// objects left: false cache keys left: 0
	// rows left: 0
	// other community kept: true 1 3
}

// ExampleRunner_RunNext drains the queue the way deletionctl run does
// between polls: RunNext claims the oldest claimable request and drives it
// to retention_pending, and reports false once nothing is claimable. (Run
// loops over RunNext until its context is done.)
func ExampleRunner_RunNext() {
	ctx := context.Background()
	db := exampleDatabase()
	for _, host := range []string{"a.example", "b.example"} {
		db.Community(host, 2)
		db.Approve(host, nil) // no stored objects
	}
	pool, err := pgxpool.New(ctx, db.Executor)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	engine, err := lifecycle.NewEngine(ctx, pool, nil)
	if err != nil {
		log.Fatal(err)
	}
	root, err := os.MkdirTemp("", "objects-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(root)
	var stages []lifecycle.Stage // the stages each deletion went through
	runner, err := executor.New(executor.Config{
		Engine: engine, Objects: executor.NewFileObjectStore(root), Cache: executor.NewMemoryCache(),
		Owner: "executor-1",
		Progress: func(e executor.Event) { // called on the working goroutine: return quickly
			if len(stages) == 0 || stages[len(stages)-1] != e.Stage {
				stages = append(stages, e.Stage)
			}
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	for {
		claimed, err := runner.RunNext(ctx)
		if err != nil {
			log.Fatal(err)
		}
		if !claimed {
			break
		}
		fmt.Println(stages)
		stages = nil
	}
	fmt.Println("nothing left to claim")
	// Output:
	// [approved fenced drained bindings_removed postgres_purged cache_purged logically_verified retention_pending]
	// [approved fenced drained bindings_removed postgres_purged cache_purged logically_verified retention_pending]
	// nothing left to claim
}

// ExampleSummarizeStorage lists a community's prefixes into the storage
// inventory an operator freezes: per prefix the object count, the bytes and
// a digest of the keys, which the executor checks again after the fence.
func ExampleSummarizeStorage() {
	ctx := context.Background()
	community := uuid.MustParse("4a3a2d70-0c1e-4c55-8b7e-1f2d3c4b5a69")
	root, err := os.MkdirTemp("", "objects-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(root)
	writeObjects(root, "media/"+community.String()+"/a.png", "media/"+community.String()+"/b.png")

	storage, err := executor.SummarizeStorage(ctx, executor.NewFileObjectStore(root), fixture.ObjectPrefixes(community))
	if err != nil {
		log.Fatal(err)
	}
	for _, p := range storage.Prefixes {
		fmt.Printf("%s: %d objects, %d bytes, empty: %v\n", p.Prefix, p.ObjectCount, p.TotalBytes, p.KeysDigest == lifecycle.EmptyKeysDigest)
	}
	// Output:
	// media/4a3a2d70-0c1e-4c55-8b7e-1f2d3c4b5a69/: 2 objects, 120 bytes, empty: false
	// uploads/4a3a2d70-0c1e-4c55-8b7e-1f2d3c4b5a69/: 0 objects, 0 bytes, empty: true
}
