package s3store_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/executor"
	"github.com/tombstoneworks/communitydeletion/internal/fixture"
	"github.com/tombstoneworks/communitydeletion/internal/testserver/s3server"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// storagePrefixes is the layout of the test service's objects.
func storagePrefixes(tenant lifecycle.TenantKey) []string {
	return []string{"media/" + tenant.String() + "/", "uploads/" + tenant.String() + "/"}
}

// communityKeys are a community's objects: 7 under media/ (so chunks of 3
// make 3 chunks) and 2 under uploads/, and one "decoy" beside its prefix.
func communityKeys(id uuid.UUID) (keys []string, decoy string) {
	for i := range 7 {
		keys = append(keys, fmt.Sprintf("media/%s/%02d with space+plus", id, i))
	}
	keys = append(keys, fmt.Sprintf("uploads/%s/a", id), fmt.Sprintf("uploads/%s/b", id))
	return keys, fmt.Sprintf("media/%s-decoy/keep", id)
}

// TestExecutorDeletesThroughS3 drives a whole deletion through the executor
// with the S3 store. A chunk whose DeleteObjects reports a per-key failure is
// not stamped deleted and the request goes to retry; once the store recovers
// the resumed runner completes, and every key of the community is gone while
// another community's keys and a look-alike prefix survive.
func TestExecutorDeletesThroughS3(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	e := newEnv(t, nil)
	url, pool := fixture.NewTestPool(t, pgsrv)
	clients := fixture.NewClients(t, url)

	target, other := uuid.New(), uuid.New()
	var otherKeys []string
	for _, id := range []uuid.UUID{target, other} {
		_, err := pool.Exec(ctx, "INSERT INTO communities (id, host, signing_key, icon) VALUES ($1, $2, 'key', 'icon.png')",
			id, "c-"+id.String()+".example")
		require.NoError(t, err)
		keys, decoy := communityKeys(id)
		all := append(keys, decoy) //nolint:gocritic // keys is not used again
		e.put(t, all...)
		if id == other {
			otherKeys = all
		}
	}
	targetKeys, targetDecoy := communityKeys(target)

	request, err := clients.Operator.Submit(ctx, "c-"+target.String()+".example", "alice", "test")
	require.NoError(t, err)
	schema, err := clients.Operator.InventorySchema(ctx, target)
	require.NoError(t, err)
	storage, err := executor.SummarizeStorage(ctx, e.store, storagePrefixes(lifecycle.UUIDKey(target)))
	require.NoError(t, err)
	require.Equal(t, uint64(7), storage.Prefixes[0].ObjectCount)
	_, err = clients.Operator.FreezeInventory(ctx, request.ID, lifecycle.FrozenInventory{Schema: *schema, Storage: storage})
	require.NoError(t, err)
	_, err = clients.Approver.Approve(ctx, request.ID, "bob", "ok")
	require.NoError(t, err)

	// The 5th media key (in chunk 1 of 0..3) cannot be deleted.
	stuck := e.cfg.Root + targetKeys[4]
	e.proxy.SetHook(s3srv.PartialDelete(func(key string) *s3server.KeyFailure {
		if key == stuck {
			return &s3server.KeyFailure{Code: "InternalError", Message: "We encountered an internal error."}
		}
		return nil
	}))
	cfg := executor.Config{
		Engine: clients.Engine, Objects: e.store, Cache: executor.NewMemoryCache(), Owner: "executor-1",
		Prefixes: storagePrefixes, ChunkSize: 3, RetryBase: time.Millisecond, RetryMax: 5 * time.Millisecond,
	}
	runner, err := executor.New(cfg)
	require.NoError(t, err)
	claimed, err := runner.RunRequest(ctx, request.ID)
	require.True(t, claimed)
	require.ErrorIs(t, err, executor.ErrRetryScheduled)
	require.Contains(t, err.Error(), "1 of 3 keys not deleted")

	require.Equal(t, []bool{true, false, false, false}, chunkStamps(t, pool, request.ID),
		"only the chunk before the failure is stamped deleted")
	require.True(t, e.exists(t, targetKeys[4]), "the key reported failed is still there")
	for _, key := range targetKeys[:3] {
		require.False(t, e.exists(t, key), key)
	}
	got, err := clients.Operator.Get(ctx, request.ID)
	require.NoError(t, err)
	require.Equal(t, lifecycle.StageDrained, got.Stage)

	// The store recovers; a runner resumes at the unstamped chunk.
	e.proxy.SetHook(nil)
	cfg.Owner = "executor-2"
	var deleted []string
	cfg.Progress = func(ev executor.Event) {
		if strings.HasPrefix(ev.Message, "chunk ") {
			deleted = append(deleted, ev.Message)
		}
	}
	runner, err = executor.New(cfg)
	require.NoError(t, err)
	deadline := time.Now().Add(30 * time.Second)
	for {
		claimed, err = runner.RunRequest(ctx, request.ID)
		if claimed {
			break
		}
		require.NoError(t, err)
		require.True(t, time.Now().Before(deadline), "not claimable again after its retry delay")
		time.Sleep(10 * time.Millisecond) // polls for the end of a retry delay of a few milliseconds
	}
	require.NoError(t, err)
	got, err = clients.Operator.Get(ctx, request.ID)
	require.NoError(t, err)
	require.Equal(t, lifecycle.StageRetentionPending, got.Stage)
	require.Equal(t, []string{"chunk 1 deleted (3 keys)", "chunk 2 deleted (1 keys)", "chunk 3 deleted (2 keys)"}, deleted,
		"the resumed runner starts at the unstamped chunk")
	require.Empty(t, chunkStamps(t, pool, request.ID), "chunks are removed after verification")

	for _, key := range targetKeys {
		require.False(t, e.exists(t, key), key)
	}
	require.True(t, e.exists(t, targetDecoy), "the look-alike prefix survives")
	for _, key := range otherKeys {
		require.True(t, e.exists(t, key), key)
	}
	left, _ := e.list(t, "media/"+target.String())
	require.Equal(t, []string{targetDecoy}, left)
}

// chunkStamps returns, per manifest chunk in order, whether it is stamped
// deleted.
func chunkStamps(t *testing.T, pool *pgxpool.Pool, requestID uuid.UUID) []bool {
	t.Helper()
	rows, err := pool.Query(t.Context(),
		"SELECT deleted_at IS NOT NULL FROM community_deletion_manifest_keys WHERE request_id = $1 ORDER BY chunk_no", requestID)
	require.NoError(t, err)
	var stamps []bool
	for rows.Next() {
		var stamped bool
		require.NoError(t, rows.Scan(&stamped))
		stamps = append(stamps, stamped)
	}
	require.NoError(t, rows.Err())
	return stamps
}
