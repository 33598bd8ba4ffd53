// Package exampledb is the plumbing of the runnable examples (the Example
// functions go test runs and checks against their "Output:" comments): a
// fresh database for each example on the test binary's shared throwaway
// PostgreSQL, migrated and with the fixture's tenant tables, the connection
// strings of the fixture's test logins on it, and communities to delete.
//
// Examples take no *testing.T, so every helper here panics on error: a
// panicking example fails its test binary, naming the cause. Databases are
// dropped when the server closes at the end of the test binary.
package exampledb

import (
	"context"
	"fmt"
	"sync"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tombstoneworks/communitydeletion/internal/ephemeralpg"
	"github.com/tombstoneworks/communitydeletion/internal/fixture"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// Database is one example's database. URL is its superuser's connection
// string, for setting up what no client does (communities, tenant rows);
// the others are the fixture's test logins, each a member of the deployment
// role its name says.
type Database struct {
	// URL connects as the superuser.
	URL string
	// Alice and Bob are two operators (community_deletion_operator): the
	// two-person rule needs both.
	Alice, Bob string
	// Executor is the executor's login (community_deletion_executor).
	Executor string
	// Serving is the service's login (community_deletion_serving).
	Serving string
}

// rolesOnce creates the test logins once per test binary.
var rolesOnce sync.Once

// New returns a fresh database on server, migrated and with the fixture
// tables, and creates the test logins (they are cluster-wide) if this
// process has not yet.
func New(server *ephemeralpg.Server) *Database {
	ctx := context.Background()
	url, _, err := server.NewDatabase(ctx, fixture.Template{WithFixture: true})
	must(err)
	var rolesErr error
	rolesOnce.Do(func() { rolesErr = fixture.EnsureRoles(ctx, url) })
	must(rolesErr)
	d := &Database{URL: url}
	for role, into := range map[fixture.Role]*string{fixture.RoleOperator: &d.Alice, fixture.RoleApprover: &d.Bob,
		fixture.RoleExecutor: &d.Executor, fixture.RoleServing: &d.Serving} {
		*into, err = fixture.RoleConnString(url, role)
		must(err)
	}
	return d
}

// Community inserts an active community with host and members rows in the
// fixture's fixture_members table, and returns its id.
func (d *Database) Community(host string, members int) uuid.UUID {
	ctx := context.Background()
	pool := Connect(ctx, d.URL)
	defer pool.Close()
	id := uuid.New()
	_, err := pool.Exec(ctx, "INSERT INTO community_deletion.communities (id, host, signing_key, icon) VALUES ($1, $2, 'key', 'icon.png')", id, host)
	must(err)
	_, err = pool.Exec(ctx, `INSERT INTO fixture_members (community_id, handle)
		SELECT $1, 'member-' || g FROM generate_series(1, $2::int) g`, id, members)
	must(err)
	return id
}

// Count returns the result of a count query run as the superuser, for an
// example to show what a call left behind.
func (d *Database) Count(query string, args ...any) int64 {
	ctx := context.Background()
	pool := Connect(ctx, d.URL)
	defer pool.Close()
	var n int64
	must(pool.QueryRow(ctx, query, args...).Scan(&n))
	return n
}

// Approve takes the community at host through the two operators' steps as
// a deployment would: Alice submits its deletion and freezes its inventory
// with storage (nil: no stored objects under media/<id>/), Bob approves.
// It returns the approved request.
func (d *Database) Approve(host string, storage *lifecycle.StorageManifest) *lifecycle.Request {
	ctx := context.Background()
	alicePool, bobPool := Connect(ctx, d.Alice), Connect(ctx, d.Bob)
	defer alicePool.Close()
	defer bobPool.Close()
	alice, err := lifecycle.NewOperator(ctx, alicePool, nil)
	must(err)
	bob, err := lifecycle.NewOperator(ctx, bobPool, nil)
	must(err)
	request, err := alice.Submit(ctx, host, "alice", "customer asked to be forgotten")
	must(err)
	schema, err := alice.InventorySchema(ctx, request.CommunityID)
	must(err)
	if storage == nil {
		empty := EmptyStorage(request.CommunityID)
		storage = &empty
	}
	_, err = alice.FreezeInventory(ctx, request.ID, lifecycle.FrozenInventory{Schema: *schema, Storage: *storage})
	must(err)
	request, err = bob.Approve(ctx, request.ID, "bob", "reviewed the frozen inventory")
	must(err)
	return request
}

// Fence approves the deletion of the community at host (see Approve) and
// has the executor's engine quiesce and fence it, then release its claim:
// from then on every write to the community is refused.
func (d *Database) Fence(host string) *lifecycle.Request {
	ctx := context.Background()
	request := d.Approve(host, nil)
	pool := Connect(ctx, d.Executor)
	defer pool.Close()
	engine, err := lifecycle.NewEngine(ctx, pool, nil)
	must(err)
	claim, err := engine.ClaimRequest(ctx, request.ID, "executor-1", lifecycle.DefaultLeaseDuration)
	must(err)
	must(engine.BeginQuiescing(ctx, claim.Lease))
	generation, err := engine.EnterFenced(ctx, claim.Lease)
	must(err)
	token := claim.Lease.WithFence(generation)
	must(engine.Stop(ctx, lifecycle.StopParams{ExecutorID: token.Owner, Release: &token}))
	request, err = engine.Get(ctx, request.ID)
	must(err)
	return request
}

// EmptyStorage is the storage inventory of a community without stored
// objects in the fixture's layout (fixture.ObjectPrefixes).
func EmptyStorage(community uuid.UUID) lifecycle.StorageManifest {
	m := lifecycle.StorageManifest{Version: lifecycle.StorageManifestVersion}
	for _, prefix := range fixture.ObjectPrefixes(community) {
		m.Prefixes = append(m.Prefixes, lifecycle.PrefixManifest{Prefix: prefix, KeysDigest: lifecycle.EmptyKeysDigest})
	}
	return m
}

// Connect opens a pool on url.
func Connect(ctx context.Context, url string) *pgxpool.Pool {
	pool, err := pgxpool.New(ctx, url)
	must(err)
	return pool
}

// must panics with err, if any.
func must(err error) {
	if err != nil {
		panic(fmt.Sprintf("exampledb: %v", err))
	}
}
