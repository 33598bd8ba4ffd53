package lifecycle_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// ExampleEngine_ClaimNext claims the next approved deletion as the
// executor: the claim's lease token is what every later step presents, and
// a newer claim makes it stale. With nothing due, ClaimNext returns
// ErrNothingToClaim. (executor.Runner does this, and every step after, for
// most services.)
func ExampleEngine_ClaimNext() {
	ctx := context.Background()
	db := exampleDatabase()
	db.Community("tenant.example", 0)
	db.Approve("tenant.example", nil) // alice submits and freezes, bob approves

	pool := connect(ctx, db.Executor) // a login that is a member of community_deletion_executor
	defer pool.Close()
	engine, err := lifecycle.NewEngine(ctx, pool, nil)
	if err != nil {
		log.Fatal(err)
	}
	claim, err := engine.ClaimNext(ctx, "executor-1", lifecycle.DefaultLeaseDuration)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("claimed", claim.Request.CommunityHost, "at", claim.Request.Stage, "as", claim.Lease.Owner)

	// Work on it, renewing the lease while working...
	if err := engine.Heartbeat(ctx, claim.Lease, lifecycle.DefaultLeaseDuration); err != nil {
		log.Fatal(err) // lifecycle.IsStaleLease(err): another executor took it over
	}

	_, err = engine.ClaimNext(ctx, "executor-2", lifecycle.DefaultLeaseDuration)
	fmt.Println("a second executor finds nothing to claim:", errors.Is(err, lifecycle.ErrNothingToClaim))

	// ... or release the claim, so another executor may take it at once.
	if err := engine.Stop(ctx, lifecycle.StopParams{ExecutorID: "executor-1", Release: &claim.Lease}); err != nil {
		log.Fatal(err)
	}
	again, err := engine.ClaimNext(ctx, "executor-2", lifecycle.DefaultLeaseDuration)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("claimed again by", again.Lease.Owner, "with a newer lease:", again.Lease.Generation > claim.Lease.Generation)
	// Output:
	// claimed tenant.example at approved as executor-1
	// a second executor finds nothing to claim: true
	// claimed again by executor-2 with a newer lease: true
}
