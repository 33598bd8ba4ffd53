package lifecycle_test

import (
	"context"
	"log"
	"os"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/fixture"
	"github.com/tombstoneworks/communitydeletion/internal/testfactory"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// connect opens a pool on the URL in environment variable name.
func connect(ctx context.Context, name string) *pgxpool.Pool {
	pool, err := pgxpool.New(ctx, os.Getenv(name))
	if err != nil {
		log.Fatal(err)
	}
	return pool
}

// Example deletes one community, each audience over its own login: one
// operator submits and freezes the inventory, a second approves its digest
// (the database compares their roles), and the executor's engine drives the
// request from the fence to the tombstone. (The object-store and cache
// steps between the fence and the purge are the executor runtime's; here
// the community has no stored objects.)
func Example() {
	ctx := context.Background()
	alicePool, bobPool, workerPool := connect(ctx, "ALICE_URL"), connect(ctx, "BOB_URL"), connect(ctx, "EXECUTOR_URL")
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
	steps := []func() error{
		func() error { return engine.FreezeDestructiveManifest(ctx, token, storage) },
		func() error { return engine.EnterDrained(ctx, token) },
		func() error { return engine.EnterBindingsRemoved(ctx, token, map[string]int{"keys": 0}) },
		func() error { _, err := engine.EnterPostgresPurged(ctx, token, lifecycle.PurgeOptions{}); return err },
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
}

// ExampleServing guards a service's write: in the service's own READ
// COMMITTED transaction, GuardTransaction takes the community's shared
// deletion lock and refuses (lifecycle.ErrAccessDenied) once deletion has
// begun; the write fence refuses tenant-table writes anyway, so the guard is
// for side effects it cannot see.
func ExampleServing() {
	ctx := context.Background()
	pool := connect(ctx, "APP_URL")
	defer pool.Close()
	serving, err := lifecycle.NewServing(ctx, pool, nil) // community_deletion_serving
	if err != nil {
		log.Fatal(err)
	}
	community := exampleCommunity
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
}

// exampleCommunity is the community ExampleServing writes to; the test sets
// it.
var exampleCommunity uuid.UUID

// The package examples really run, each audience as its own test login:
// Example takes the request all the way to retention_pending, and
// ExampleServing writes to an active community. (Not parallel: they read
// their URLs from the environment.)
func TestExamplesRun(t *testing.T) {
	b := setup(t)
	ctx := t.Context()
	testfactory.Community(ctx, t, b.DB, &testfactory.CommunityOpts{Host: "tenant.example"})
	for name, role := range map[string]fixture.Role{"ALICE_URL": fixture.RoleOperator, "BOB_URL": fixture.RoleApprover,
		"EXECUTOR_URL": fixture.RoleExecutor, "APP_URL": fixture.RoleServing} {
		url, err := fixture.RoleConnString(b.URL, role)
		require.NoError(t, err)
		t.Setenv(name, url)
	}

	other := testfactory.Community(ctx, t, b.DB, nil).ID
	exampleCommunity = other
	ExampleServing()
	var members int
	require.NoError(t, b.Pool.QueryRow(t.Context(), "SELECT count(*) FROM fixture_members WHERE community_id = $1", other).Scan(&members))
	require.Equal(t, 1, members)

	Example()
	var stage string
	require.NoError(t, b.Pool.QueryRow(t.Context(), `SELECT r.stage FROM community_deletion_requests r
		JOIN communities c ON c.id = r.community_id WHERE c.host = 'tenant.example'`).Scan(&stage))
	require.Equal(t, "retention_pending", stage)
	var state string
	require.NoError(t, b.Pool.QueryRow(t.Context(), "SELECT deletion_state FROM communities WHERE host = 'tenant.example'").Scan(&state))
	require.Equal(t, "tombstone", state)
}
