package executor_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/tombstoneworks/communitydeletion/lifecycle"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/executor"
)

func TestFileObjectStoreListsInByteOrder(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	for _, key := range []string{"p/a/b", "p/a-b", "p/a/a", "p/ab", "p/a.b", "q/x", "pp/y"} {
		path := filepath.Join(root, filepath.FromSlash(key))
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(key), 0o644))
	}
	store := executor.NewFileObjectStore(root)
	ctx := t.Context()
	var keys []string
	var total int64
	require.NoError(t, store.List(ctx, "p/", func(key string, size int64) error {
		keys = append(keys, key)
		total += size
		return nil
	}))
	require.Equal(t, []string{"p/a-b", "p/a.b", "p/a/a", "p/a/b", "p/ab"}, keys)
	require.Equal(t, int64(len("p/a-b")+len("p/a.b")+len("p/a/a")+len("p/a/b")+len("p/ab")), total)

	keys = nil
	require.NoError(t, store.List(ctx, "p/a", func(key string, _ int64) error { keys = append(keys, key); return nil }))
	require.Equal(t, []string{"p/a-b", "p/a.b", "p/a/a", "p/a/b", "p/ab"}, keys)
	require.NoError(t, store.List(ctx, "missing/", func(string, int64) error { t.Fatal("listed"); return nil }))

	found, err := store.Any(ctx, "p/a/")
	require.NoError(t, err)
	require.True(t, found)
	require.NoError(t, store.Delete(ctx, []string{"p/a/a", "p/a/b", "p/a/gone"}))
	found, err = store.Any(ctx, "p/a/")
	require.NoError(t, err)
	require.False(t, found)
	found, err = store.Any(ctx, "p/")
	require.NoError(t, err)
	require.True(t, found)

	require.Error(t, store.Delete(ctx, []string{"../x"}))
	require.Error(t, store.Delete(ctx, []string{"/etc/passwd"}))
	require.Error(t, store.List(ctx, "p/../", func(string, int64) error { return nil }))
}

func TestMemoryCache(t *testing.T) {
	t.Parallel()
	cache := executor.NewMemoryCache()
	a, b := uuid.New(), uuid.New()
	cache.Put(lifecycle.UUIDKey(a), "x", "y")
	cache.Put(lifecycle.UUIDKey(b), "z")
	ctx := context.Background()
	empty, err := cache.Empty(ctx, lifecycle.UUIDKey(a))
	require.NoError(t, err)
	require.False(t, empty)
	n, err := cache.Purge(ctx, lifecycle.UUIDKey(a))
	require.NoError(t, err)
	require.Equal(t, int64(2), n)
	empty, err = cache.Empty(ctx, lifecycle.UUIDKey(a))
	require.NoError(t, err)
	require.True(t, empty)
	require.Equal(t, 1, cache.Len(lifecycle.UUIDKey(b)))
}
