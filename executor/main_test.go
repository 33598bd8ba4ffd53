package executor_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/executor"
	"github.com/tombstoneworks/communitydeletion/internal/ephemeralpg"
	"github.com/tombstoneworks/communitydeletion/internal/fixture"
	"github.com/tombstoneworks/communitydeletion/internal/testfactory"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// server is the throwaway PostgreSQL shared by the package's tests; each
// test gets its own database cloned from a migrated template.
var server *ephemeralpg.Server

func TestMain(m *testing.M) {
	// Prepared transactions hold locks in the lock-wait tests.
	ephemeralpg.RunTests(m, ephemeralpg.Options{ExtraConfig: map[string]string{"max_prepared_transactions": "8"}}, &server)
}

// testBundle is one test's database (migrations plus the fixture tenant
// tables) as the test factory writes to it (the superuser's URL and Pool,
// for setting up and inspecting, and the clients over the test logins: the
// executor's Engine, which the Runner uses, an Operator, a second operator
// who approves and the service), a temporary object-store root and a cache.
type testBundle struct {
	*testfactory.DB

	root  string
	files *executor.FileObjectStore
	cache *executor.MemoryCache
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	return setupOn(t, server)
}

// setupOn is setup on a server of the test's own.
func setupOn(t *testing.T, server *ephemeralpg.Server) *testBundle {
	t.Helper()
	url, pool := fixture.NewTestPool(t, server)
	root := t.TempDir()
	return &testBundle{DB: testfactory.NewDB(t, url, pool), root: root, files: executor.NewFileObjectStore(root), cache: executor.NewMemoryCache()}
}

// community is a seeded fixture community.
type community struct {
	id   uuid.UUID
	host string
	keys []string // its object keys, sorted
}

// createCommunity inserts an active community with three rows in every
// fixture table, files under its prefixes (and a decoy beside them) and
// cache keys.
func (b *testBundle) createCommunity(t *testing.T, files int) community {
	t.Helper()
	created := testfactory.Community(t.Context(), t, b.DB, &testfactory.CommunityOpts{Rows: testfactory.Rows{
		Members: 3, Channels: 3, Messages: 3, Reactions: 3, Attachments: 3, Activity: 3, AuditEvents: 3}})
	id := created.ID
	c := community{id: id, host: created.Host}
	for i := range files {
		// "a/…" and "a-…" interleave by byte order, not directory order.
		c.keys = append(c.keys,
			fmt.Sprintf("media/%s/a/%03d.bin", id, i),
			fmt.Sprintf("media/%s/a-%03d.bin", id, i),
			fmt.Sprintf("uploads/%s/%03d", id, i))
	}
	c.keys = append(c.keys, fmt.Sprintf("media/%s/z", id))
	sort.Strings(c.keys)
	for _, key := range append([]string{fmt.Sprintf("media/%s-decoy/keep", id)}, c.keys...) {
		p := filepath.Join(b.root, filepath.FromSlash(key))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(key), 0o644))
	}
	b.cache.Put(lifecycle.UUIDKey(id), "session:1", "feed:"+id.String())
	return c
}

// approve submits the deletion of c with its files summarized as the
// storage inventory, and approves it.
func (b *testBundle) approve(t *testing.T, c community) uuid.UUID {
	t.Helper()
	ctx := t.Context()
	storage, err := executor.SummarizeStorage(ctx, b.files, fixture.ObjectPrefixes(c.id))
	require.NoError(t, err)
	request, _ := testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{CommunityID: c.id, Stage: lifecycle.StageApproved,
		RequestedBy: "alice", Reason: "test", Storage: &storage, ApprovedBy: "bob", ApprovalNote: "ok"})
	return request.ID
}

// config is a runner config over the bundle with small, fast settings.
func (b *testBundle) config(owner string) executor.Config {
	return executor.Config{
		Engine: b.Engine, Objects: b.files, Cache: b.cache, Owner: owner, Prefixes: func(k lifecycle.TenantKey) []string { return fixture.ObjectPrefixesOf(k.String()) },
		ChunkSize: 2, RetryBase: time.Millisecond, RetryMax: 10 * time.Millisecond,
		Purge: lifecycle.PurgeOptions{MaxRowsPerTx: 2},
	}
}

func (b *testBundle) runner(t *testing.T, cfg executor.Config) *executor.Runner {
	t.Helper()
	r, err := executor.New(cfg)
	require.NoError(t, err)
	return r
}

// rows counts c's rows across the fixture tables.
func (b *testBundle) rows(t *testing.T, id uuid.UUID) int64 {
	t.Helper()
	var total int64
	for _, table := range append(append([]string(nil), fixture.Tables...), fixture.NullifyTables...) {
		var n int64
		require.NoError(t, b.Pool.QueryRow(t.Context(), "SELECT count(*) FROM "+table+" WHERE community_id = $1", id).Scan(&n))
		total += n
	}
	return total
}

// exists reports whether key is a file under the root.
func (b *testBundle) exists(t *testing.T, key string) bool {
	t.Helper()
	_, err := os.Stat(filepath.Join(b.root, filepath.FromSlash(key)))
	if os.IsNotExist(err) {
		return false
	}
	require.NoError(t, err)
	return true
}

// requireDeleted checks that c's deletion completed and left nothing.
func (b *testBundle) requireDeleted(t *testing.T, requestID uuid.UUID, c community) {
	t.Helper()
	request, err := b.Operator.Get(t.Context(), requestID)
	require.NoError(t, err)
	require.Equal(t, lifecycle.StageRetentionPending, request.Stage)
	require.Zero(t, b.rows(t, c.id))
	for _, key := range c.keys {
		require.False(t, b.exists(t, key), key)
	}
	require.True(t, b.exists(t, fmt.Sprintf("media/%s-decoy/keep", c.id)))
	require.Zero(t, b.cache.Len(lifecycle.UUIDKey(c.id)))
	var state string
	require.NoError(t, b.Pool.QueryRow(t.Context(), "SELECT deletion_state FROM communities WHERE id = $1", c.id).Scan(&state))
	require.Equal(t, "tombstone", state)
}

// requireIntact checks that c kept its rows, files and cache.
func (b *testBundle) requireIntact(t *testing.T, c community, rows int64) {
	t.Helper()
	require.Equal(t, rows, b.rows(t, c.id))
	for _, key := range c.keys {
		require.True(t, b.exists(t, key), key)
	}
	require.Equal(t, 2, b.cache.Len(lifecycle.UUIDKey(c.id)))
}

// expireLease makes the request's lease (if any) expired on the database
// clock, as a crashed executor's would be.
func (b *testBundle) expireLease(t *testing.T, requestID uuid.UUID) {
	t.Helper()
	_, err := b.Pool.Exec(context.WithoutCancel(t.Context()), `UPDATE community_deletion_requests
		SET lease_until = now() - interval '1 second' WHERE id = $1 AND lease_until IS NOT NULL`, requestID)
	require.NoError(t, err)
}

// awaitNextAttempt waits until the request may be claimed again: its
// next_attempt_at has passed on the database clock.
func (b *testBundle) awaitNextAttempt(t *testing.T, requestID uuid.UUID) {
	t.Helper()
	var wait time.Duration
	require.NoError(t, b.Pool.QueryRow(t.Context(), `SELECT GREATEST(next_attempt_at - clock_timestamp(), interval '0')
		FROM community_deletion_requests WHERE id = $1`, requestID).Scan(&wait))
	time.Sleep(wait)
}

// countingObjects wraps an ObjectStore, counting Delete calls per first key
// and failing Delete while fail is set.
type countingObjects struct {
	executor.ObjectStore

	mu      sync.Mutex
	calls   map[string]int
	fail    bool
	attempt int
}

func newCounting(inner executor.ObjectStore) *countingObjects {
	return &countingObjects{ObjectStore: inner, calls: make(map[string]int)}
}

func (c *countingObjects) Delete(ctx context.Context, keys []string) error {
	c.mu.Lock()
	c.attempt++
	fail := c.fail
	if !fail && len(keys) > 0 {
		c.calls[keys[0]]++
	}
	c.mu.Unlock()
	if fail {
		return errors.New("object store unavailable")
	}
	return c.ObjectStore.Delete(ctx, keys)
}

func (c *countingObjects) attempts() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.attempt
}

// requireEachOnce checks that every chunk (by first key) was deleted once.
func (c *countingObjects) requireEachOnce(t *testing.T, chunks int) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	require.Len(t, c.calls, chunks)
	for key, n := range c.calls {
		require.Equal(t, 1, n, "chunk starting at %s", key)
	}
}
