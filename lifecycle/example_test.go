package lifecycle_test

import (
	"context"
	"fmt"
	"log"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tombstoneworks/communitydeletion/internal/exampledb"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// exampleDatabase returns a fresh database for one example on the package's
// throwaway PostgreSQL (server, started by TestMain), with the connection
// strings of two operators, the executor and the service. It panics on
// error: examples take no *testing.T.
func exampleDatabase() *exampledb.Database { return exampledb.New(server) }

// connect opens a pool on url.
func connect(ctx context.Context, url string) *pgxpool.Pool {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		log.Fatal(err)
	}
	return pool
}

// Example deletes one community, each audience over its own login: one
// operator submits and freezes the inventory, a second approves its digest
// (the database compares their roles), and the executor's engine drives the
// request from the fence to the tombstone. (The object-store and cache
// steps between the fence and the purge are the executor runtime's, which
// executor.Runner takes; here the community has no stored objects.)
func Example() {
	ctx := context.Background()
	db := exampleDatabase()
	db.Community("tenant.example", 3)

	alicePool, bobPool, workerPool := connect(ctx, db.Alice), connect(ctx, db.Bob), connect(ctx, db.Executor)
	defer alicePool.Close()
	defer bobPool.Close()
	defer workerPool.Close()
	alice, err := lifecycle.NewOperator(ctx, alicePool, nil) // checks: a member of community_deletion_operator
	if err != nil {
		log.Fatal(err) // e.g. "login x is not a member of community_deletion_operator: a DBA runs GRANT ..."
	}
	bob, err := lifecycle.NewOperator(ctx, bobPool, nil)
	if err != nil {
		log.Fatal(err)
	}
	engine, err := lifecycle.NewEngine(ctx, workerPool, nil) // community_deletion_executor
	if err != nil {
		log.Fatal(err)
	}

	request, err := alice.Submit(ctx, "tenant.example", "alice", "customer asked to be forgotten")
	if err != nil {
		log.Fatal(err) // one line: what was refused and why
	}
	schema, err := alice.InventorySchema(ctx, request.CommunityID)
	if err != nil {
		log.Fatal(err)
	}
	storage := lifecycle.StorageManifest{Version: lifecycle.StorageManifestVersion, Prefixes: []lifecycle.PrefixManifest{
		{Prefix: "media/" + request.CommunityID.String() + "/", KeysDigest: lifecycle.EmptyKeysDigest},
	}}
	if _, err := alice.FreezeInventory(ctx, request.ID, lifecycle.FrozenInventory{Schema: *schema, Storage: storage}); err != nil {
		log.Fatal(err)
	}
	if _, err := bob.Approve(ctx, request.ID, "bob", "reviewed the frozen inventory"); err != nil {
		log.Fatal(err) // alice's login could not approve her own request
	}

	claim, err := engine.ClaimRequest(ctx, request.ID, "executor-1", lifecycle.DefaultLeaseDuration)
	if err != nil {
		log.Fatal(err) // lifecycle.ErrNothingToClaim when it is not claimable now
	}
	token := claim.Lease
	if err := engine.BeginQuiescing(ctx, token); err != nil {
		log.Fatal(err)
	}
	generation, err := engine.EnterFenced(ctx, token) // from here on, every write to the community is refused
	if err != nil {
		log.Fatal(err)
	}
	token = token.WithFence(generation)
	var purge *lifecycle.PurgeResult
	steps := []func() error{
		func() error { return engine.FreezeDestructiveManifest(ctx, token, storage) },
		func() error { return engine.EnterDrained(ctx, token) },
		func() error { return engine.EnterBindingsRemoved(ctx, token, map[string]int{"keys": 0}) },
		func() error {
			purge, err = engine.EnterPostgresPurged(ctx, token, lifecycle.PurgeOptions{})
			return err
		},
		func() error { return engine.EnterCachePurged(ctx, token, nil) },
		func() error { return engine.CheckPostgresPurged(ctx, token) },
		func() error { return engine.EnterLogicallyVerified(ctx, token, nil) },
		func() error { return engine.EnterRetentionPending(ctx, token, nil) },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			if lifecycle.IsStaleLease(err) {
				log.Fatal("another executor took over: ", err) // never retry with this token
			}
			log.Fatal(err)
		}
	}

	done, err := alice.Get(ctx, request.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("purged fixture_members rows:", purge.Deleted["fixture_members"])
	fmt.Println(done.CommunityHost, "is at", done.Stage)
	// Output:
	// purged fixture_members rows: 3
	// tenant.example is at retention_pending
}

// ExampleServing guards a service's write: in the service's own READ
// COMMITTED transaction, GuardTransaction takes the community's shared
// deletion lock and refuses (lifecycle.ErrAccessDenied) once deletion has
// begun; the write fence refuses tenant-table writes anyway, so the guard is
// for side effects it cannot see.
func ExampleServing() {
	ctx := context.Background()
	db := exampleDatabase()
	community := db.Community("tenant.example", 0)

	pool := connect(ctx, db.Serving)
	defer pool.Close()
	serving, err := lifecycle.NewServing(ctx, pool, nil) // community_deletion_serving
	if err != nil {
		log.Fatal(err)
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := serving.GuardTransaction(ctx, tx, community); err != nil {
			return err // refused: the community is being deleted
		}
		_, err := tx.Exec(ctx, "INSERT INTO fixture_members (community_id, handle) VALUES ($1, 'new member')", community)
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("members:", db.Count("SELECT count(*) FROM fixture_members WHERE community_id = $1", community))
	// Output:
	// members: 1
}
