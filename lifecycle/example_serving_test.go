package lifecycle_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// ExampleServing_AcquireWriteLease holds a serving write lease across a
// side effect the write fence cannot see (an upload to the object store),
// so the deletion's fence waits for it; releasing it twice is harmless.
func ExampleServing_AcquireWriteLease() {
	ctx := context.Background()
	db := exampleDatabase()
	community := db.Community("tenant.example", 0)

	pool := connect(ctx, db.Serving) // a login that is a member of community_deletion_serving
	defer pool.Close()
	serving, err := lifecycle.NewServing(ctx, pool, nil)
	if err != nil {
		log.Fatal(err)
	}
	lease, err := serving.AcquireWriteLease(ctx, community, "upload", "web-1", time.Minute)
	if err != nil {
		log.Fatal(err) // lifecycle.ErrAccessDenied once the community's deletion began
	}
	fmt.Println("lease for", lease.Operation, "held by", lease.Owner)

	// ... upload, renewing with RenewWriteLease if it runs long, and check
	// VerifyWriteLease (or GuardTransactionWithLease) before recording it.
	if err := serving.VerifyWriteLease(ctx, lease); err != nil {
		log.Fatal(err) // the lease expired or was reaped: undo the upload
	}

	released, err := serving.ReleaseWriteLease(ctx, lease)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("released:", released)
	released, err = serving.ReleaseWriteLease(ctx, lease)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("released again:", released)
	// Output:
	// lease for upload held by web-1
	// released: true
	// released again: false
}

// ExampleIsWriteFenceRefusal shows what the service sees once a deletion
// has fenced its community: every write to a tenant table is refused by the
// database with SQLSTATE 55000 and the constraint name
// community_write_fence, which IsWriteFenceRefusal recognizes without
// reading the message, and no new serving write lease is admitted.
func ExampleIsWriteFenceRefusal() {
	ctx := context.Background()
	db := exampleDatabase()
	community := db.Community("tenant.example", 1)
	db.Fence("tenant.example") // two operators approve, the executor fences

	pool := connect(ctx, db.Serving)
	defer pool.Close()
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "INSERT INTO fixture_members (community_id, handle) VALUES ($1, 'late member')", community)
		return err
	})
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok {
		fmt.Println("SQLSTATE", pgErr.Code, "constraint", pgErr.ConstraintName)
	}
	fmt.Println("write fence refusal:", lifecycle.IsWriteFenceRefusal(err))

	serving, err := lifecycle.NewServing(ctx, pool, nil)
	if err != nil {
		log.Fatal(err)
	}
	_, err = serving.AcquireWriteLease(ctx, community, "upload", "web-1", time.Minute)
	fmt.Println("lease refused:", errors.Is(err, lifecycle.ErrAccessDenied))
	// Output:
	// SQLSTATE 55000 constraint community_write_fence
	// write fence refusal: true
	// lease refused: true
}
