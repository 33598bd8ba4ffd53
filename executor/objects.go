package executor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"

	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// ObjectStore is the object storage (S3 or compatible) a community's files
// live in. A service plugs its own client in; NewFileObjectStore is a
// reference adapter over a local directory.
type ObjectStore interface {
	// List calls fn for every object whose key starts with prefix, in
	// strictly ascending byte order of the key (the order of S3
	// ListObjectsV2), with the object's size in bytes. An error from fn stops
	// the listing and is returned.
	List(ctx context.Context, prefix string, fn func(key string, size int64) error) error
	// Delete deletes the objects keys names: at most Config.ChunkSize keys,
	// all under one prefix (with the default of 1000, one S3 DeleteObjects
	// call). It must fail if any key could not be deleted. A key that does
	// not exist is not an error: deletion is idempotent, and a resumed
	// executor may delete a chunk again.
	Delete(ctx context.Context, keys []string) error
	// Any reports whether at least one object's key starts with prefix.
	Any(ctx context.Context, prefix string) (bool, error)
}

// Cache is the cache (Redis or compatible) a community's entries live in.
// A service plugs its own client in; NewMemoryCache is a reference adapter.
type Cache interface {
	// Purge deletes every cache entry of the tenant whose key is tenant and
	// returns how many it deleted. Purging an empty namespace returns 0 and
	// no error.
	Purge(ctx context.Context, tenant lifecycle.TenantKey) (int64, error)
	// Empty reports whether the tenant has no cache entry left.
	Empty(ctx context.Context, tenant lifecycle.TenantKey) (bool, error)
}

// LayoutCache is a Cache that names the key patterns it purges, as storage
// layout templates with the {tenant} placeholder ("ws:{tenant}:*"). The
// runner compares them with the deployment's declared cache layout before
// it claims anything, and refuses to run on a mismatch (ErrLayoutMismatch).
type LayoutCache interface {
	Cache
	LayoutTemplates() []string
}

// KindedStore is an ObjectStore or a Cache that names its kind ("s3",
// "file", "redis", "memory"…): the receipt states it for each store it
// checked. A store that does not name one is stated by its Go type.
type KindedStore interface {
	StoreKind() string
}

// storeKind is the kind a receipt states for store.
func storeKind(store any) string {
	if k, ok := store.(KindedStore); ok && strings.TrimSpace(k.StoreKind()) != "" {
		return strings.TrimSpace(k.StoreKind())
	}
	return fmt.Sprintf("go:%T", store)
}

// FileObjectStore is an ObjectStore over the regular files under a root
// directory: a key is a file's slash-separated path relative to the root.
// Symbolic links and other non-regular files are ignored.
type FileObjectStore struct {
	root string
}

// NewFileObjectStore returns a FileObjectStore over root.
func NewFileObjectStore(root string) *FileObjectStore {
	return &FileObjectStore{root: root}
}

// StoreKind implements KindedStore: "file".
func (f *FileObjectStore) StoreKind() string { return "file" }

// errStopWalk ends a walk early.
var errStopWalk = errors.New("stop walk")

// checkKeyPath refuses a key or prefix that would name something outside the
// root: absolute, with "." or ".." segments, or with a NUL byte.
func checkKeyPath(s string, isPrefix bool) error {
	if strings.ContainsRune(s, 0) || strings.HasPrefix(s, "/") || strings.Contains(s, `\`) {
		return fmt.Errorf("file object store: key %q is not a relative slash-separated path", s)
	}
	for seg := range strings.SplitSeq(s, "/") {
		if seg == "." || seg == ".." {
			return fmt.Errorf("file object store: key %q has a %q segment", s, seg)
		}
	}
	if !isPrefix {
		if s == "" || strings.HasSuffix(s, "/") || strings.Contains(s, "//") {
			return fmt.Errorf("file object store: key %q does not name a file", s)
		}
	}
	return nil
}

// walk visits, in no particular order, every regular file whose key starts
// with prefix.
func (f *FileObjectStore) walk(ctx context.Context, prefix string, fn func(key string, size int64) error) error {
	if err := checkKeyPath(prefix, true); err != nil {
		return err
	}
	// Only the directory holding the prefix's last segment can contain
	// matching keys.
	dir := ""
	if i := strings.LastIndex(prefix, "/"); i >= 0 {
		dir = prefix[:i]
	}
	start := filepath.Join(f.root, filepath.FromSlash(dir))
	err := filepath.WalkDir(start, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		rel, err := filepath.Rel(f.root, p)
		if err != nil {
			return err
		}
		key := filepath.ToSlash(rel)
		if !strings.HasPrefix(key, prefix) {
			return nil
		}
		info, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		return fn(key, info.Size())
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// List implements ObjectStore. It collects the matching keys and sorts them
// by their full key bytes, so "a/b" and "a-b" come in byte order ("a-b"
// first) whatever the directory layout.
func (f *FileObjectStore) List(ctx context.Context, prefix string, fn func(key string, size int64) error) error {
	type object struct {
		key  string
		size int64
	}
	var objects []object
	if err := f.walk(ctx, prefix, func(key string, size int64) error {
		objects = append(objects, object{key, size})
		return nil
	}); err != nil {
		return fmt.Errorf("file object store: list %q: %w", prefix, err)
	}
	sort.Slice(objects, func(i, j int) bool { return objects[i].key < objects[j].key })
	for _, o := range objects {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fn(o.key, o.size); err != nil {
			return err
		}
	}
	return nil
}

// Delete implements ObjectStore. Missing files are not an error, and
// neither is a key that reaches through a symbolic link or a regular file
// (List never yields one: it is not an object of this store); such a key
// deletes nothing. Removal goes through an os.Root, so nothing outside the
// root is ever touched, even if a link is planted meanwhile.
func (f *FileObjectStore) Delete(ctx context.Context, keys []string) error {
	for _, key := range keys {
		if err := checkKeyPath(key, false); err != nil {
			return err
		}
	}
	root, err := os.OpenRoot(f.root)
	if err != nil {
		return fmt.Errorf("file object store: open root: %w", err)
	}
	defer root.Close()
	for _, key := range keys {
		if err := ctx.Err(); err != nil {
			return err
		}
		name := filepath.FromSlash(path.Clean(key))
		present, err := f.storedFile(root, name)
		if err != nil {
			return fmt.Errorf("file object store: delete %q: %w", key, err)
		}
		if !present {
			continue
		}
		if err := root.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("file object store: delete %q: %w", key, err)
		}
	}
	return nil
}

// storedFile reports whether name (relative to the root) is an object of
// the store: every directory on the way a real directory, not a symbolic
// link, and name itself a regular file. A name whose last element exists
// but is not a regular file is an error; anything else missing is false.
func (f *FileObjectStore) storedFile(root *os.Root, name string) (bool, error) {
	parts := strings.Split(name, string(filepath.Separator))
	for i := range parts {
		info, err := root.Lstat(filepath.Join(parts[:i+1]...))
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if i < len(parts)-1 {
			if !info.IsDir() {
				return false, nil // through a link or a file: not a stored key
			}
			continue
		}
		if !info.Mode().IsRegular() {
			return false, errors.New("not a regular file")
		}
	}
	return true, nil
}

// Any implements ObjectStore.
func (f *FileObjectStore) Any(ctx context.Context, prefix string) (bool, error) {
	found := false
	err := f.walk(ctx, prefix, func(string, int64) error {
		found = true
		return errStopWalk
	})
	if err != nil && !errors.Is(err, errStopWalk) {
		return false, fmt.Errorf("file object store: probe %q: %w", prefix, err)
	}
	return found, nil
}

// MemoryCache is an in-process Cache: a set of keys per tenant. It is safe
// for concurrent use. It lists nothing of a deployment's real cache, so a
// receipt never calls the cache verified by it, and a runner refuses it
// where the deployment declares cache templates.
type MemoryCache struct {
	mu      sync.Mutex
	entries map[lifecycle.TenantKey]map[string]struct{}
}

// NewMemoryCache returns an empty MemoryCache.
func NewMemoryCache() *MemoryCache {
	return &MemoryCache{entries: make(map[lifecycle.TenantKey]map[string]struct{})}
}

// Put adds keys to tenant's namespace.
func (c *MemoryCache) Put(tenant lifecycle.TenantKey, keys ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	set := c.entries[tenant]
	if set == nil {
		set = make(map[string]struct{})
		c.entries[tenant] = set
	}
	for _, k := range keys {
		set[k] = struct{}{}
	}
}

// StoreKind implements KindedStore: "memory" (receipt.KindMemory).
func (c *MemoryCache) StoreKind() string { return "memory" }

// Len returns how many keys tenant's namespace holds.
func (c *MemoryCache) Len(tenant lifecycle.TenantKey) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries[tenant])
}

// Purge implements Cache.
func (c *MemoryCache) Purge(ctx context.Context, tenant lifecycle.TenantKey) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n := int64(len(c.entries[tenant]))
	delete(c.entries, tenant)
	return n, nil
}

// Empty implements Cache.
func (c *MemoryCache) Empty(ctx context.Context, tenant lifecycle.TenantKey) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries[tenant]) == 0, nil
}
