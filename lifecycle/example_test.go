package lifecycle_test

import (
	"context"
	"log"
	"os"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/fixture"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// Example walks one community through the lifecycle: one operator submits,
// the inventory is frozen, a second operator approves its digest, and an
// executor claims the request and drives it from the fence to the tombstone.
// (The object-store and cache steps between the fence and the purge are the
// executor runtime's; here the community has no stored objects.)
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	store := lifecycle.New(pool)
	// The approver is another operator: the database compares their roles.
	approverPool, err := pgxpool.New(ctx, os.Getenv("APPROVER_DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer approverPool.Close()
	approver := lifecycle.New(approverPool)

	request, err := store.Submit(ctx, "tenant.example", "alice", "customer asked to be forgotten")
	if err != nil {
		log.Fatal(err) // one line: what was refused and why
	}
	schema, err := store.InventorySchema(ctx, request.CommunityID)
	if err != nil {
		log.Fatal(err)
	}
	storage := lifecycle.StorageManifest{Version: lifecycle.StorageManifestVersion, Prefixes: []lifecycle.PrefixManifest{
		{Prefix: "media/" + request.CommunityID.String() + "/", KeysDigest: lifecycle.EmptyKeysDigest},
	}}
	if _, err := store.FreezeInventory(ctx, request.ID, lifecycle.FrozenInventory{Schema: *schema, Storage: storage}); err != nil {
		log.Fatal(err)
	}
	if _, err := approver.Approve(ctx, request.ID, "bob", "reviewed the frozen inventory"); err != nil {
		log.Fatal(err) // alice could not approve her own request
	}

	claim, err := store.ClaimSpecific(ctx, request.ID, "executor-1", lifecycle.DefaultLeaseDuration)
	if err != nil || claim == nil {
		log.Fatal("not claimable: ", err)
	}
	token := claim.Lease
	if err := store.BeginQuiescing(ctx, token); err != nil {
		log.Fatal(err)
	}
	generation, err := store.Fence(ctx, token) // from here on, every write to the community is refused
	if err != nil {
		log.Fatal(err)
	}
	token = token.WithFence(generation)
	steps := []func() error{
		func() error { return store.FreezeDestructiveStorageManifest(ctx, token, storage) },
		func() error { return store.MarkDrained(ctx, token) },
		func() error { return store.MarkBindingsRemoved(ctx, token, map[string]int{"keys": 0}) },
		func() error { _, err := store.PurgePostgres(ctx, token, lifecycle.PurgeOptions{}); return err },
		func() error { return store.MarkCachePurged(ctx, token, nil) },
		func() error { return store.VerifyPostgresLogicallyDeleted(ctx, token) },
		func() error { return store.MarkLogicallyVerified(ctx, token, nil) },
		func() error { return store.MarkRetentionPending(ctx, token, nil) },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			if lifecycle.IsStaleLease(err) {
				log.Fatal("another executor took over: ", err) // never retry with this token
			}
			log.Fatal(err)
		}
	}
}

// The package example really runs: against a fresh database with the
// community it names, it takes the request all the way to retention_pending.
// (Not parallel: it sets DATABASE_URL for the example.)
func TestExampleRuns(t *testing.T) {
	b := setup(t)
	_, err := b.pool.Exec(t.Context(), "INSERT INTO communities (host, signing_key, icon) VALUES ('tenant.example', 'key', 'icon.png')")
	require.NoError(t, err)
	t.Setenv("DATABASE_URL", b.url)
	approverURL, err := fixture.RoleConnString(b.url, fixture.RoleApprover)
	require.NoError(t, err)
	fixture.RolePool(t, b.url, fixture.RoleApprover) // creates the test logins
	t.Setenv("APPROVER_DATABASE_URL", approverURL)

	Example()

	var stage string
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT r.stage FROM community_deletion_requests r
		JOIN communities c ON c.id = r.community_id WHERE c.host = 'tenant.example'`).Scan(&stage))
	require.Equal(t, "retention_pending", stage)
	var state string
	require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT deletion_state FROM communities WHERE host = 'tenant.example'").Scan(&state))
	require.Equal(t, "tombstone", state)
}
