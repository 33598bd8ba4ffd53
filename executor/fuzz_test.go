package executor_test

// A fuzz target for the reference ObjectStore's key handling, the storage
// key listings the executor freezes and deletes. Seeds are added here and
// committed under testdata/fuzz/FuzzFileObjectStore/; run it with
// go test ./executor -run '^$' -fuzz '^FuzzFileObjectStore$'.

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/executor"
)

// fzSymlink is a symbolic link in the fuzz store's root to a directory
// outside it.
const fzSymlink = "ln"

// fzPrefixOK says whether FileObjectStore's contract admits s as a prefix:
// a relative slash-separated path without NUL, backslash, "." or "..".
func fzPrefixOK(s string) bool {
	if strings.ContainsAny(s, "\x00\\") || strings.HasPrefix(s, "/") {
		return false
	}
	for seg := range strings.SplitSeq(s, "/") {
		if seg == "." || seg == ".." {
			return false
		}
	}
	return true
}

// fzKeyOK says whether the contract admits s as a key: a prefix that also
// names a file (not empty, no empty segment, no trailing slash).
func fzKeyOK(s string) bool {
	return fzPrefixOK(s) && s != "" && !strings.HasSuffix(s, "/") && !strings.Contains(s, "//")
}

// fzStorable says whether the filesystem can hold s at all (segments of at
// most 255 bytes): longer names fail with ENAMETOOLONG, a different error.
func fzStorable(s string) bool {
	for seg := range strings.SplitSeq(s, "/") {
		if len(seg) > 255 {
			return false
		}
	}
	return len(s) <= 1024
}

// fzIsSymlink reports whether key names fzSymlink itself: not a regular
// file, so Delete refuses it.
func fzIsSymlink(key string) bool { return key == fzSymlink }

// FuzzFileObjectStore stores files under arbitrary keys (newline-separated)
// and lists, probes and deletes an arbitrary prefix. Delete refuses exactly
// the keys the contract refuses, before deleting anything; List and Any
// refuse exactly the bad prefixes; List yields exactly the stored keys under
// the prefix, in strictly ascending byte order with their sizes, and never
// what a symbolic link points to; Any agrees with List; deleting what List
// yielded empties the prefix and leaves every other key and everything
// outside the root alone.
func FuzzFileObjectStore(f *testing.F) {
	f.Add("media/c/a\nmedia/c/b/c\nmedia/c-d\nmedia/cd", "media/c")
	f.Add("a/b\na-b\na.b\na/b.c", "a")
	f.Add("x/../y\n./x\n/abs\nx//y\nx/\nx\\y", "x")
	f.Add("ok/1\nok/2", "../")
	f.Add("ok/1\nok/2", "")
	f.Add("ok/1\nln/secret", "ln/")
	f.Add("a\na/b", "a/")
	f.Add("p/\xff\xfe\np/\u00e9\np/z", "p/")
	f.Fuzz(func(t *testing.T, keyList, prefix string) {
		ctx := t.Context()
		tmp := t.TempDir()
		root := filepath.Join(tmp, "root")
		outside := filepath.Join(tmp, "outside")
		require.NoError(t, os.MkdirAll(root, 0o755))
		require.NoError(t, os.MkdirAll(outside, 0o755))
		secret := filepath.Join(outside, "secret")
		require.NoError(t, os.WriteFile(secret, []byte("secret"), 0o644))
		require.NoError(t, os.Symlink(outside, filepath.Join(root, fzSymlink)))
		store := executor.NewFileObjectStore(root)

		// On the empty store, Delete refuses exactly the bad keys.
		var good, bad []string
		for key := range strings.SplitSeq(keyList, "\n") {
			if !fzStorable(key) || fzIsSymlink(key) {
				continue
			}
			err := store.Delete(ctx, []string{key})
			require.Equal(t, fzKeyOK(key), err == nil, "Delete(%q): %v", key, err)
			// A key through the link to the outside deletes nothing there.
			_, statErr := os.Stat(secret)
			require.NoError(t, statErr, "Delete(%q) reached outside the root", key)
			if err == nil {
				good = append(good, key)
			} else {
				bad = append(bad, key)
			}
		}
		sizes := map[string]int64{}
		for _, key := range good {
			if key == fzSymlink || strings.HasPrefix(key, fzSymlink+"/") {
				continue // would write through the link, outside the root
			}
			p := filepath.Join(root, filepath.FromSlash(key))
			if os.MkdirAll(filepath.Dir(p), 0o755) != nil || os.WriteFile(p, []byte(key)[:len(key)%7], 0o644) != nil {
				continue // a file where a directory must go, or the reverse
			}
			sizes[key] = int64(len(key) % 7)
		}
		stored := slices.Sorted(maps.Keys(sizes))
		// A batch with one bad key deletes nothing.
		for _, key := range bad {
			require.Error(t, store.Delete(ctx, append(slices.Clone(stored), key)))
			for _, k := range stored {
				_, err := os.Stat(filepath.Join(root, filepath.FromSlash(k)))
				require.NoError(t, err, "%q deleted by a refused batch", k)
			}
		}

		type object struct {
			key  string
			size int64
		}
		var listed []object
		err := store.List(ctx, prefix, func(key string, size int64) error {
			listed = append(listed, object{key, size})
			return nil
		})
		found, anyErr := store.Any(ctx, prefix)
		if !fzStorable(prefix) {
			return
		}
		if !fzPrefixOK(prefix) {
			require.Error(t, err, "List(%q)", prefix)
			require.Error(t, anyErr, "Any(%q)", prefix)
			return
		}
		require.NoError(t, err, "List(%q)", prefix)
		require.NoError(t, anyErr, "Any(%q)", prefix)

		var want []object
		for key, size := range sizes {
			if strings.HasPrefix(key, prefix) {
				want = append(want, object{key, size})
			}
		}
		slices.SortFunc(want, func(a, b object) int { return strings.Compare(a.key, b.key) })
		require.Equal(t, want, listed, "List(%q) of %q", prefix, stored)
		require.Equal(t, len(listed) > 0, found, "Any(%q)", prefix)

		keys := make([]string, len(listed))
		for i, o := range listed {
			keys[i] = o.key
		}
		require.NoError(t, store.Delete(ctx, keys))
		require.NoError(t, store.Delete(ctx, keys), "deleting again is not an error")
		found, err = store.Any(ctx, prefix)
		require.NoError(t, err)
		require.False(t, found, "Any(%q) after deleting its listing", prefix)
		for key := range sizes {
			_, statErr := os.Stat(filepath.Join(root, filepath.FromSlash(key)))
			if strings.HasPrefix(key, prefix) {
				require.ErrorIs(t, statErr, os.ErrNotExist, "%q survived", key)
			} else {
				require.NoError(t, statErr, "%q, outside prefix %q, was deleted", key, prefix)
			}
		}
		_, err = os.Stat(secret)
		require.NoError(t, err, "the file outside the root was deleted")
	})
}
