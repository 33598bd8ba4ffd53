package lifecycle_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tombstoneworks/communitydeletion/internal/exampledb"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// ExampleOperator_Submit submits the deletion of a community by its host.
// Submitting again for the same requester returns the same request; a host
// with no active community is refused in one line.
func ExampleOperator_Submit() {
	ctx := context.Background()
	db := exampleDatabase()
	db.Community("tenant.example", 0)

	pool := connect(ctx, db.Alice) // a login that is a member of community_deletion_operator
	defer pool.Close()
	alice, err := lifecycle.NewOperator(ctx, pool, nil)
	if err != nil {
		log.Fatal(err)
	}
	request, err := alice.Submit(ctx, "Tenant.Example", "alice", "customer asked to be forgotten")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(request.CommunityHost, request.Stage, "by", request.RequestedBy)

	again, err := alice.Submit(ctx, "tenant.example", "alice", "customer asked to be forgotten")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("same request:", again.ID == request.ID)

	_, err = alice.Submit(ctx, "nowhere.example", "alice", "typo")
	fmt.Println("unknown host refused:", errors.Is(err, lifecycle.ErrRefused))
	// Output:
	// tenant.example submitted by alice
	// same request: true
	// unknown host refused: true
}

// ExampleOperator_FreezeInventory builds a community's schema inventory,
// freezes it with the storage inventory, and so binds the coming approval
// to the inventory's SHA-256 digest.
func ExampleOperator_FreezeInventory() {
	ctx := context.Background()
	db := exampleDatabase()
	db.Community("tenant.example", 4)

	pool := connect(ctx, db.Alice)
	defer pool.Close()
	alice, err := lifecycle.NewOperator(ctx, pool, nil)
	if err != nil {
		log.Fatal(err)
	}
	request, err := alice.Submit(ctx, "tenant.example", "alice", "customer asked to be forgotten")
	if err != nil {
		log.Fatal(err)
	}
	schema, err := alice.InventorySchema(ctx, request.CommunityID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("fixture_members rows:", schema.RowCounts["fixture_members"])
	fmt.Println("kept with community_id cleared:", schema.NullifyTables)

	// The storage inventory comes from the object store (the executor's
	// SummarizeStorage lists it); this community stores no objects.
	storage := exampledb.EmptyStorage(request.CommunityID)
	inventoried, err := alice.FreezeInventory(ctx, request.ID, lifecycle.FrozenInventory{Schema: *schema, Storage: storage})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(inventoried.Stage, "with a digest of", len(inventoried.InventoryDigest), "hex digits")
	// Output:
	// fixture_members rows: 4
	// kept with community_id cleared: [fixture_audit_events]
	// inventoried with a digest of 64 hex digits
}

// ExampleOperator_Approve shows the two-person rule: the operator who
// submitted a request cannot approve it, not even under another name (the
// database compares the logins), and a second operator's login can.
func ExampleOperator_Approve() {
	ctx := context.Background()
	db := exampleDatabase()
	db.Community("tenant.example", 0)
	alicePool, bobPool := connect(ctx, db.Alice), connect(ctx, db.Bob)
	defer alicePool.Close()
	defer bobPool.Close()
	alice, err := lifecycle.NewOperator(ctx, alicePool, nil)
	if err != nil {
		log.Fatal(err)
	}
	bob, err := lifecycle.NewOperator(ctx, bobPool, nil)
	if err != nil {
		log.Fatal(err)
	}
	request, err := alice.Submit(ctx, "tenant.example", "alice", "customer asked to be forgotten")
	if err != nil {
		log.Fatal(err)
	}
	schema, err := alice.InventorySchema(ctx, request.CommunityID)
	if err != nil {
		log.Fatal(err)
	}
	inv := lifecycle.FrozenInventory{Schema: *schema, Storage: exampledb.EmptyStorage(request.CommunityID)}
	if _, err := alice.FreezeInventory(ctx, request.ID, inv); err != nil {
		log.Fatal(err)
	}

	_, err = alice.Approve(ctx, request.ID, "alice", "looks fine")
	fmt.Println("alice approves as alice, refused:", errors.Is(err, lifecycle.ErrRefused))
	_, err = alice.Approve(ctx, request.ID, "carol", "looks fine")
	var pgErr *pgconn.PgError
	if errors.Is(err, lifecycle.ErrRefused) && errors.As(err, &pgErr) {
		fmt.Println("alice's login approves as carol, refused by the database: SQLSTATE", pgErr.Code)
	}

	approved, err := bob.Approve(ctx, request.ID, "bob", "reviewed the frozen inventory")
	if err != nil {
		log.Fatal(err)
	}
	inspection, err := bob.Inspect(ctx, request.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(approved.Stage, "by", inspection.Approval.ApprovedBy)
	fmt.Println("approval bound to the frozen digest:", inspection.Approval.InventoryDigest == approved.InventoryDigest)
	// Output:
	// alice approves as alice, refused: true
	// alice's login approves as carol, refused by the database: SQLSTATE 23000
	// approved by bob
	// approval bound to the frozen digest: true
}

// ExampleOperator_Abort aborts a request before anything destructive ran.
// The request keeps its audit trail and the community may be submitted
// again.
func ExampleOperator_Abort() {
	ctx := context.Background()
	db := exampleDatabase()
	db.Community("tenant.example", 0)
	pool := connect(ctx, db.Alice)
	defer pool.Close()
	alice, err := lifecycle.NewOperator(ctx, pool, nil)
	if err != nil {
		log.Fatal(err)
	}
	request, err := alice.Submit(ctx, "tenant.example", "alice", "customer asked to be forgotten")
	if err != nil {
		log.Fatal(err)
	}

	aborted, err := alice.Abort(ctx, request.ID, "alice", "customer changed their mind")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(aborted.Stage, "by", aborted.AbortedBy+":", aborted.AbortReason)

	_, err = alice.Abort(ctx, request.ID, "alice", "again")
	fmt.Println("aborting twice refused:", errors.Is(err, lifecycle.ErrRefused))

	next, err := alice.Submit(ctx, "tenant.example", "alice", "customer asked again")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("a new request:", next.ID != request.ID, next.Stage)
	// Output:
	// aborted by alice: customer changed their mind
	// aborting twice refused: true
	// a new request: true submitted
}

// ExampleOperator_List pages through the requests, newest first, filtered
// by stage; Get reads one by id, and an unknown id matches ErrNotFound.
func ExampleOperator_List() {
	ctx := context.Background()
	db := exampleDatabase()
	for _, host := range []string{"a.example", "b.example", "c.example"} {
		db.Community(host, 0)
	}
	db.Approve("a.example", nil) // alice submits, bob approves

	pool := connect(ctx, db.Alice)
	defer pool.Close()
	alice, err := lifecycle.NewOperator(ctx, pool, nil)
	if err != nil {
		log.Fatal(err)
	}
	for _, host := range []string{"b.example", "c.example"} {
		if _, err := alice.Submit(ctx, host, "alice", "tenant closed"); err != nil {
			log.Fatal(err)
		}
	}

	submitted := lifecycle.StageSubmitted
	params := lifecycle.ListParams{Stage: &submitted, Limit: 1}
	for {
		page, err := alice.List(ctx, params)
		if err != nil {
			log.Fatal(err)
		}
		for _, r := range page.Requests {
			fmt.Println(r.CommunityHost, r.Stage)
		}
		if page.Next == nil {
			break
		}
		params.After = page.Next
	}

	all, err := alice.List(ctx, lifecycle.ListParams{Limit: lifecycle.MaxListLimit})
	if err != nil {
		log.Fatal(err)
	}
	oldest := all.Requests[len(all.Requests)-1]
	got, err := alice.Get(ctx, oldest.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("oldest:", got.CommunityHost, got.Stage)

	_, err = alice.Get(ctx, db.Community("d.example", 0)) // a community's id is no request's
	fmt.Println("unknown id:", errors.Is(err, lifecycle.ErrNotFound))
	// Output:
	// c.example submitted
	// b.example submitted
	// oldest: a.example approved
	// unknown id: true
}
