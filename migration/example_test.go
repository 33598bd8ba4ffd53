package migration_test

import (
	"context"
	"fmt"
	"log"

	"github.com/tombstoneworks/communitydeletion/migration"
)

// exampleDatabaseURL returns the URL of a fresh, empty database on the
// package's throwaway PostgreSQL (server, started by TestMain), as a role
// that may create the deployment roles. It panics on error: examples take
// no *testing.T.
func exampleDatabaseURL() string {
	url, _, err := server.NewEmptyDatabase(context.Background()) // dropped when the server closes
	if err != nil {
		panic(err)
	}
	return url
}

// ExampleOpen migrates a database as the migration job (cmd/migrate up)
// does: Up holds the schema-destruction lock, applies every pending
// migration in version order and reports what it applied; a second Up
// applies nothing.
func ExampleOpen() {
	ctx := context.Background()
	migrator, err := migration.Open(ctx, exampleDatabaseURL(),
		migration.WithLockTimeout(migration.DefaultLockTimeout)) // how long to wait for a deletion stage in flight
	if err != nil {
		log.Fatal(err)
	}
	defer migrator.Close()

	applied, err := migrator.Up(ctx)
	if err != nil {
		log.Fatal(err) // migration.ErrLockTimeout names the lock's holder
	}
	fmt.Println("first applied:", applied[0].File, applied[0].Direction)
	version, err := migrator.Version(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("at the last applied version:", version == applied[len(applied)-1].Version)

	again, err := migrator.Up(ctx)
	if err != nil {
		log.Fatal(err)
	}
	pending, err := migrator.Pending(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("applied again:", len(again), "pending:", len(pending))
	// Output:
	// first applied: 00001_communities.sql up
	// at the last applied version: true
	// applied again: 0 pending: 0
}

// ExampleMigrator_Status reads which migrations a database has applied,
// without taking any lock (cmd/migrate status; --fail-on-pending makes it a
// readiness gate). Here the database was migrated up to version 4 only.
func ExampleMigrator_Status() {
	ctx := context.Background()
	migrator, err := migration.Open(ctx, exampleDatabaseURL())
	if err != nil {
		log.Fatal(err)
	}
	defer migrator.Close()
	if _, err := migrator.UpTo(ctx, 4); err != nil {
		log.Fatal(err)
	}

	statuses, err := migrator.Status(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for _, s := range statuses[:6] {
		fmt.Println(s.File, s.State)
	}
	// Output:
	// 00001_communities.sql applied
	// 00002_community_deletion_requests.sql applied
	// 00003_community_deletion_execution.sql applied
	// 00004_community_deletion_locks.sql applied
	// 00005_community_write_fence.sql pending
	// 00006_community_tombstone.sql pending
}
