package storeurl_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tombstoneworks/communitydeletion/lifecycle"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/executor"
	"github.com/tombstoneworks/communitydeletion/executor/rediscache"
	"github.com/tombstoneworks/communitydeletion/executor/s3store"
	"github.com/tombstoneworks/communitydeletion/executor/storeurl"
)

// requireOneLine checks an error's text is one bounded line.
func requireOneLine(t *testing.T, err error) {
	t.Helper()
	text := err.Error()
	require.NotContains(t, text, "\n")
	require.NotContains(t, text, "\r")
	require.LessOrEqual(t, len(text), 600, text)
}

func TestParseObjects(t *testing.T) {
	t.Parallel()
	good := []struct {
		raw  string
		want storeurl.Objects
		url  string // String(); "" means raw
	}{
		{"s3://media/tenants/?endpoint=http://127.0.0.1:9000&region=us-east-1&path_style=true", storeurl.Objects{
			Scheme: "s3", S3: s3store.Config{Options: s3store.Options{Bucket: "media", Root: "tenants/"},
				Endpoint: "http://127.0.0.1:9000", Region: "us-east-1", PathStyle: true},
		}, "s3://media/tenants/?endpoint=http%3A%2F%2F127.0.0.1%3A9000&path_style=true&region=us-east-1"},
		{"S3://media", storeurl.Objects{Scheme: "s3", S3: s3store.Config{Options: s3store.Options{Bucket: "media"}}}, "s3://media"},
		{"s3://media?max_attempts=5&max_backoff=2s", storeurl.Objects{Scheme: "s3", S3: s3store.Config{
			Options: s3store.Options{Bucket: "media"}, MaxAttempts: 5, MaxBackoff: 2 * time.Second}}, ""},
		{"file:///srv/objects", storeurl.Objects{Scheme: "file", Dir: "/srv/objects"}, ""},
		{"file://localhost/srv/objects/", storeurl.Objects{Scheme: "file", Dir: "/srv/objects"}, "file:///srv/objects"},
		{"file:///srv/a%20b/../c", storeurl.Objects{Scheme: "file", Dir: "/srv/c"}, "file:///srv/c"},
		{"FILE:///", storeurl.Objects{Scheme: "file", Dir: "/"}, "file:///"},
	}
	for _, tc := range good {
		got, err := storeurl.ParseObjects(tc.raw)
		require.NoError(t, err, tc.raw)
		require.Equal(t, tc.want, got, tc.raw)
		want := tc.url
		if want == "" {
			want = tc.raw
		}
		require.Equal(t, want, got.String(), tc.raw)
		again, err := storeurl.ParseObjects(got.String())
		require.NoError(t, err)
		require.Equal(t, got, again, "round trip of %s", tc.raw)
	}

	bad := map[string]string{ // URL → a part of the one-line error
		"":                                  "no scheme",
		"/srv/objects":                      "no scheme",
		"http://bucket":                     `scheme "http" is not s3 or file`,
		"s3://ab":                           "s3store: invalid URL: bucket",
		"s3://AKIA:supersecret@media/":      "has user information",
		"s3://media?regoin=x":               "regoin",
		"file:relative/dir":                 "file:///ABSOLUTE/DIR",
		"file://server/share":               `names host "server"`,
		"file:///srv?x=1":                   "has a query",
		"file:///srv#top":                   "fragment",
		"file://u:pw@localhost/srv":         "user information",
		"file://":                           "no absolute directory",
		"file:///a%0Ab":                     "control character",
		"file:///%zz":                       "file URL",
		"s3://" + strings.Repeat("b", 9000): "longer than 8192 bytes",
	}
	for raw, want := range bad {
		_, err := storeurl.ParseObjects(raw)
		require.ErrorIs(t, err, storeurl.ErrInvalidURL, raw)
		var se *storeurl.Error
		require.ErrorAs(t, err, &se, raw)
		require.Equal(t, storeurl.StoreObjects, se.Store)
		require.Contains(t, err.Error(), want, raw)
		require.True(t, strings.HasPrefix(err.Error(), "parse objects URL: "), err.Error())
		require.NotContains(t, err.Error(), "supersecret")
		requireOneLine(t, err)
	}
	_, err := storeurl.ParseObjects("s3://ab")
	var s3err *s3store.URLError
	require.ErrorAs(t, err, &s3err, "the adapter's error stays reachable")
	require.Equal(t, "bucket", s3err.Part)
}

func TestParseCache(t *testing.T) {
	t.Parallel()
	good := []struct {
		raw, scheme, shown string
		patterns           []string
		cluster            bool
	}{
		{"memory:", "memory", "memory:", nil, false},
		{"redis://127.0.0.1:6379/2?pattern=app:{community}:*&pattern=s:{{community}}", "redis",
			"redis://127.0.0.1:6379/2?pattern=app:{community}:*&pattern=s:{{community}}", []string{"app:{community}:*", "s:{{community}}"}, false},
		{"rediss://ops:supersecret@cache.internal:6380/0?pattern=a:{community}&dial_timeout=3s", "rediss",
			"rediss://ops:xxxxx@cache.internal:6380/0?pattern=a:{community}&dial_timeout=3s", []string{"a:{community}"}, false},
		{"redis+cluster://:supersecret@h1:7000,h2:7000?pattern=a:{{community}}:*", "redis+cluster",
			"redis+cluster://:xxxxx@h1:7000,h2:7000?pattern=a:{{community}}:*", []string{"a:{{community}}:*"}, true},
		{"REDISS+CLUSTER://h1:7000?pattern=a:{{community}}", "rediss+cluster", "REDISS+CLUSTER://h1:7000?pattern=a:{{community}}",
			[]string{"a:{{community}}"}, true},
	}
	for _, tc := range good {
		got, err := storeurl.ParseCache(tc.raw)
		require.NoError(t, err, tc.raw)
		require.Equal(t, tc.scheme, got.Scheme, tc.raw)
		require.Equal(t, tc.shown, got.String(), tc.raw)
		require.NotContains(t, got.String(), "supersecret")
		require.Equal(t, tc.patterns, got.Redis.Patterns, tc.raw)
		require.Equal(t, tc.cluster, got.Redis.Cluster != nil, tc.raw)
		if tc.scheme != "memory" {
			require.Equal(t, !tc.cluster, got.Redis.Client != nil, tc.raw)
		}
	}

	bad := map[string]string{
		"":                    "no scheme",
		"memory":              "no scheme",
		"memory://":           `exactly "memory:"`,
		"MEMORY:":             `exactly "memory:"`,
		"memcached://h:11211": `scheme "memcached" is not redis`,
		"redis://h:6379":      "pattern",
		"redis://:supersecret@h:x?pattern=a:{community}":   "rediscache: invalid URL",
		"redis://h:6379?pattern=a:{community}&bogus=1":     "bogus",
		"redis://h1:1,h2:2?pattern=a:{community}":          "redis+cluster://",
		"redis://h?pattern=a:" + strings.Repeat("x", 9000): "longer than 8192 bytes",
	}
	for raw, want := range bad {
		_, err := storeurl.ParseCache(raw)
		require.ErrorIs(t, err, storeurl.ErrInvalidURL, raw)
		var se *storeurl.Error
		require.ErrorAs(t, err, &se, raw)
		require.Equal(t, storeurl.StoreCache, se.Store)
		require.Contains(t, err.Error(), want, raw)
		require.True(t, strings.HasPrefix(err.Error(), "parse cache URL: "), err.Error())
		require.NotContains(t, err.Error(), "supersecret", raw)
		requireOneLine(t, err)
	}
	_, err := storeurl.ParseCache("redis://h:6379?pattern=a:*")
	var rerr *rediscache.URLError
	require.ErrorAs(t, err, &rerr, "the adapter's error stays reachable")
	require.Equal(t, "pattern", rerr.Part)
}

func TestOpenObjects(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := t.TempDir()
	key := "media/" + uuid.NewString() + "/a.bin"
	require.NoError(t, os.MkdirAll(filepath.Join(dir, filepath.Dir(key)), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, key), []byte("x"), 0o644))

	store, err := storeurl.OpenObjects(ctx, "file://"+dir)
	require.NoError(t, err)
	require.IsType(t, &executor.FileObjectStore{}, store)
	found, err := store.Any(ctx, "media/")
	require.NoError(t, err)
	require.True(t, found, "the store is rooted at the URL's directory")

	for raw, want := range map[string]string{
		"file://" + filepath.Join(dir, "missing"): "no such file or directory",
		"file://" + filepath.Join(dir, key):       "is not a directory",
	} {
		_, err := storeurl.OpenObjects(ctx, raw)
		require.Error(t, err, raw)
		require.NotErrorIs(t, err, storeurl.ErrInvalidURL, "a well-formed URL")
		var se *storeurl.Error
		require.ErrorAs(t, err, &se)
		require.Equal(t, "open", se.Op)
		require.Contains(t, err.Error(), "open objects URL file://")
		require.Contains(t, err.Error(), want)
		requireOneLine(t, err)
	}

	// An S3 store is built without a request (no server listens there).
	store, err = storeurl.OpenObjects(ctx, "s3://media/tenants/?endpoint=http://127.0.0.1:1&region=us-east-1&path_style=true")
	require.NoError(t, err)
	s3, ok := store.(*s3store.Store)
	require.True(t, ok, "%T", store)
	require.Equal(t, "media", s3.Bucket())
	require.Equal(t, "tenants/", s3.Root())
}

func TestOpenCache(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mem, err := storeurl.OpenCache("memory:")
	require.NoError(t, err)
	community := uuid.New()
	empty, err := mem.Empty(ctx, lifecycle.UUIDKey(community))
	require.NoError(t, err)
	require.True(t, empty)
	require.NoError(t, mem.Close())

	// A Redis cache is built without a request (no server listens there).
	cache, err := storeurl.OpenCache("redis://127.0.0.1:1/0?pattern=app:{community}:*&dial_timeout=100ms&max_retries=-1")
	require.NoError(t, err)
	rc, ok := cache.(*rediscache.Cache)
	require.True(t, ok, "%T", cache)
	require.Len(t, rc.Patterns(), 1)
	_, err = cache.Empty(ctx, lifecycle.UUIDKey(community))
	require.Error(t, err, "nothing listens on port 1")
	require.NoError(t, cache.Close())
}
