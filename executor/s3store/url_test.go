package s3store_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/executor/s3store"
	"github.com/tombstoneworks/communitydeletion/internal/errtext/errtexttest"
)

func TestParseURL(t *testing.T) {
	t.Parallel()
	good := map[string]s3store.Config{
		"s3://my-bucket":          {Options: s3store.Options{Bucket: "my-bucket"}},
		"s3://my-bucket/":         {Options: s3store.Options{Bucket: "my-bucket"}},
		"S3://my-bucket/tenants":  {Options: s3store.Options{Bucket: "my-bucket", Root: "tenants/"}},
		"s3://my-bucket/a/b%20c/": {Options: s3store.Options{Bucket: "my-bucket", Root: "a/b c/"}},
		"s3://my-bucket/optional/prefix?endpoint=http://127.0.0.1:9000&region=us-east-1&path_style=true&max_attempts=10": {
			Options:  s3store.Options{Bucket: "my-bucket", Root: "optional/prefix/"},
			Endpoint: "http://127.0.0.1:9000", Region: "us-east-1", PathStyle: true, MaxAttempts: 10,
		},
		"s3://b_legacy.1?max_backoff=1500ms&profile=ops@prod&content_md5=1&path_style=false": {
			Options:    s3store.Options{Bucket: "b_legacy.1", ContentMD5: true},
			MaxBackoff: 1500 * time.Millisecond, Profile: "ops@prod",
		},
		"s3://bkt?endpoint=https%3A%2F%2Fs3.example.com%2Fbase": {
			Options: s3store.Options{Bucket: "bkt"}, Endpoint: "https://s3.example.com/base",
		},
	}
	for raw, want := range good {
		got, err := s3store.ParseURL(raw)
		require.NoError(t, err, raw)
		require.Equal(t, want, got, raw)
		again, err := s3store.ParseURL(got.URL())
		require.NoError(t, err, got.URL())
		require.Equal(t, want, again, "round trip of %s via %s", raw, got.URL())
	}

	bad := map[string]string{ // URL → the part at fault
		"":                                         "scheme",
		"http://bucket":                            "scheme",
		"s3:bucket":                                "url",
		"s3://ab":                                  "bucket",
		"s3://-bucket":                             "bucket",
		"s3://bucket:9000":                         "bucket",
		"s3://bucket_/x":                           "bucket",
		"s3://AKIA:supersecret@bucket/":            "url",
		"s3://bucket/a/../b":                       "path",
		"s3://bucket/a//b":                         "path",
		"s3://bucket/a%0Ab":                        "path",
		"s3://bucket#frag":                         "url",
		"s3://bucket/%zz":                          "url",
		"s3://bucket?region=Us-East":               "region",
		"s3://bucket?region=":                      "region",
		"s3://bucket?region=a&region=b":            "region",
		"s3://bucket?path_style=maybe":             "path_style",
		"s3://bucket?max_attempts=0":               "max_attempts",
		"s3://bucket?max_attempts=101":             "max_attempts",
		"s3://bucket?max_backoff=-1s":              "max_backoff",
		"s3://bucket?max_backoff=6m":               "max_backoff",
		"s3://bucket?endpoint=ftp://h":             "endpoint",
		"s3://bucket?endpoint=http://u:p@h":        "endpoint",
		"s3://bucket?endpoint=http://h?x=1":        "endpoint",
		"s3://bucket?profile=a%20b":                "profile",
		"s3://bucket?regoin=us-east-1":             "regoin",
		"s3://bucket?a=%zz":                        "query",
		"s3://bucket/" + strings.Repeat("x", 5000): "url",
	}
	for raw, part := range bad {
		_, err := s3store.ParseURL(raw)
		require.ErrorIs(t, err, s3store.ErrInvalidURL, raw)
		var ue *s3store.URLError
		require.ErrorAs(t, err, &ue, raw)
		require.Equal(t, part, ue.Part, "%s: %v", raw, err)
		require.NotContains(t, err.Error(), "supersecret")
		errtexttest.RequireLine(t, err)
	}
}

func TestOpenRefusesBadOptions(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]s3store.Config{
		"no bucket":         {},
		"root without /":    {Options: s3store.Options{Bucket: "bucket", Root: "tenants"}},
		"page too big":      {Options: s3store.Options{Bucket: "bucket", ListPageSize: 1001}},
		"batch too big":     {Options: s3store.Options{Bucket: "bucket", DeleteBatchSize: 1001}},
		"negative attempts": {Options: s3store.Options{Bucket: "bucket"}, MaxAttempts: -1},
		"bad endpoint":      {Options: s3store.Options{Bucket: "bucket"}, Endpoint: "127.0.0.1:9000"},
	} {
		_, err := s3store.Open(t.Context(), cfg)
		require.ErrorIs(t, err, s3store.ErrInvalidConfig, name)
	}
	_, err := s3store.New(nil, s3store.Options{Bucket: "bucket"})
	require.ErrorIs(t, err, s3store.ErrInvalidConfig)
}

// TestOpenURLUsesTheDefaultChain opens a store from its URL form with the
// credentials in the environment, as deletionctl will, and uses it.
func TestOpenURLUsesTheDefaultChain(t *testing.T) {
	// Not parallel: it sets environment variables.
	t.Setenv("AWS_ACCESS_KEY_ID", s3srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", s3srv.SecretKey)
	t.Setenv("AWS_CONFIG_FILE", t.TempDir()+"/none")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", t.TempDir()+"/none")
	e := newEnv(t, nil)
	e.put(t, "u/1", "u/2")
	cfg := s3store.Config{Options: s3store.Options{Bucket: s3srv.Bucket, Root: e.cfg.Root}, Endpoint: s3srv.Endpoint,
		Region: s3srv.Region, PathStyle: true, MaxAttempts: 2}
	store, err := s3store.OpenURL(t.Context(), cfg.URL())
	require.NoError(t, err)
	require.Equal(t, s3srv.Bucket, store.Bucket())
	require.Equal(t, e.cfg.Root, store.Root())
	var keys []string
	require.NoError(t, store.List(t.Context(), "u/", func(k string, _ int64) error { keys = append(keys, k); return nil }))
	require.Equal(t, []string{"u/1", "u/2"}, keys)

	t.Setenv("AWS_SECRET_ACCESS_KEY", "wrong")
	store, err = s3store.OpenURL(t.Context(), cfg.URL())
	require.NoError(t, err)
	_, err = store.Any(t.Context(), "u/")
	require.Error(t, err, "the environment's credentials are the ones used")
}

// FuzzParseURL: ParseURL never panics; what it accepts, URL writes back to
// the same Config; what it refuses, it refuses with a *URLError on one
// bounded line.
func FuzzParseURL(f *testing.F) {
	for _, seed := range []string{
		"s3://my-bucket/optional/prefix?endpoint=http://127.0.0.1:9000&region=us-east-1&path_style=true&max_attempts=10",
		"s3://bucket", "s3://bucket/a%20b/c?max_backoff=2s&profile=p&content_md5=true",
		"s3://user:pw@bucket/", "s3://bucket/../x", "s3://bucket?endpoint=http://h:1/p%3Fq",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		cfg, err := s3store.ParseURL(raw)
		if err != nil {
			var ue *s3store.URLError
			if !errors.As(err, &ue) || !errors.Is(err, s3store.ErrInvalidURL) {
				t.Fatalf("error %v is not a *URLError", err)
			}
			errtexttest.RequireLine(t, err)
			return
		}
		if cfg.Root != "" && !strings.HasSuffix(cfg.Root, "/") {
			t.Fatalf("root %q does not end in /", cfg.Root)
		}
		again, err := s3store.ParseURL(cfg.URL())
		if err != nil {
			t.Fatalf("%q → %q: %v", raw, cfg.URL(), err)
		}
		if again != cfg {
			t.Fatalf("%q → %q → %+v, want %+v", raw, cfg.URL(), again, cfg)
		}
	})
}
