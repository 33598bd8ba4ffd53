package communitydeletion_test

import (
	"fmt"
	"io/fs"
	"log"

	communitydeletion "github.com/tombstoneworks/communitydeletion"
)

// ExampleMigrations lists the embedded migrations: sql/schema and
// sql/triggers merged into the one flat directory goose reads, in the one
// version sequence. A service that vendors the schema hands this fs.FS to
// its own goose, or to migration.WithMigrations.
func ExampleMigrations() {
	entries, err := fs.ReadDir(communitydeletion.Migrations(), ".")
	if err != nil {
		log.Fatal(err)
	}
	for _, e := range entries[:5] {
		fmt.Println(e.Name())
	}
	fmt.Printf("schema destruction lock key: %#x\n", communitydeletion.SchemaDestructionLockKey)
	// Output:
	// 00001_communities.sql
	// 00002_community_deletion_requests.sql
	// 00003_community_deletion_execution.sql
	// 00004_community_deletion_locks.sql
	// 00005_community_write_fence.sql
	// schema destruction lock key: 0x6364736368656d61
}
