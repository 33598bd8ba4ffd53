package s3store_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/executor"
	"github.com/tombstoneworks/communitydeletion/executor/s3store"
	"github.com/tombstoneworks/communitydeletion/internal/ephemeralpg"
	"github.com/tombstoneworks/communitydeletion/internal/testserver"
	"github.com/tombstoneworks/communitydeletion/internal/testserver/s3server"
)

// The store is an executor.ObjectStore.
var _ executor.ObjectStore = (*s3store.Store)(nil)

var (
	// s3srv is the S3-compatible server the tests share; each test works
	// under a root prefix of its own.
	s3srv *s3server.Server
	// pgsrv is the PostgreSQL of the executor test.
	pgsrv *ephemeralpg.Server
)

func TestMain(m *testing.M) {
	s3, stopS3 := s3server.StartForTests()
	s3srv = s3
	pg, stopPG := ephemeralpg.StartForTests(ephemeralpg.Options{})
	pgsrv = pg
	code := m.Run()
	stopPG()
	stopS3()
	os.Exit(code)
}

// env is one test's store, reached through a fault-injecting proxy, and a
// direct client to the server to set up and inspect objects.
type env struct {
	proxy  *testserver.Proxy
	store  *s3store.Store
	cfg    s3store.Config
	direct *s3.Client
}

// newEnv opens a store under a fresh root through a new proxy; mod, if not
// nil, adjusts the Config first.
func newEnv(t *testing.T, mod func(*s3store.Config)) *env {
	t.Helper()
	proxy, err := testserver.NewProxy(s3srv.Endpoint)
	require.NoError(t, err)
	t.Cleanup(proxy.Close)
	cfg := s3store.Config{
		Options:  s3store.Options{Bucket: s3srv.Bucket, Root: s3server.NewRoot()},
		Endpoint: proxy.URL, Region: s3srv.Region, PathStyle: true,
		MaxAttempts: 5, MaxBackoff: 20 * time.Millisecond,
		Credentials: s3srv.Credentials(),
	}
	if mod != nil {
		mod(&cfg)
	}
	store, err := s3store.Open(t.Context(), cfg)
	require.NoError(t, err)
	e := &env{proxy: proxy, store: store, cfg: cfg, direct: s3srv.Client("")}
	t.Cleanup(func() { e.removeAll(t) })
	return e
}

// removeAll deletes whatever the test left under its root, so a shared
// TEST_S3_ENDPOINT bucket does not fill up.
func (e *env) removeAll(t *testing.T) {
	ctx := context.Background() // t.Context is canceled before cleanups run
	e.proxy.SetHook(nil)
	var keys []string
	err := e.store.List(ctx, "", func(key string, _ int64) error { keys = append(keys, key); return nil })
	if err == nil {
		err = e.store.Delete(ctx, keys)
	}
	if err != nil {
		t.Errorf("remove the test's objects: %v", err)
	}
}

// put writes each key (relative to the root) with the key as its body,
// directly on the server, a few at a time.
func (e *env) put(t *testing.T, keys ...string) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, len(keys))
	sem := make(chan struct{}, 8)
	for _, key := range keys {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			_, err := e.direct.PutObject(t.Context(), &s3.PutObjectInput{
				Bucket: aws.String(e.cfg.Bucket), Key: aws.String(e.cfg.Root + key), Body: strings.NewReader(key),
			})
			if err != nil {
				errs <- fmt.Errorf("put %q: %w", key, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

// exists reports whether key (relative to the root) is an object, asking
// the server directly.
func (e *env) exists(t *testing.T, key string) bool {
	t.Helper()
	_, err := e.direct.HeadObject(t.Context(), &s3.HeadObjectInput{Bucket: aws.String(e.cfg.Bucket), Key: aws.String(e.cfg.Root + key)})
	var api smithy.APIError
	if errors.As(err, &api) && (api.ErrorCode() == "NotFound" || api.ErrorCode() == "NoSuchKey") {
		return false
	}
	require.NoError(t, err, key)
	return true
}

// list returns what the store lists under prefix, and the sizes' sum.
func (e *env) list(t *testing.T, prefix string) ([]string, int64) {
	t.Helper()
	var keys []string
	var total int64
	require.NoError(t, e.store.List(t.Context(), prefix, func(key string, size int64) error {
		keys = append(keys, key)
		total += size
		return nil
	}))
	return keys, total
}

// sorted returns keys in byte order.
func sorted(keys []string) []string {
	s := slices.Clone(keys)
	slices.Sort(s)
	return s
}

// sizeOf is what put stores for keys: each key's own length.
func sizeOf(keys []string) int64 {
	var n int64
	for _, k := range keys {
		n += int64(len(k))
	}
	return n
}

// countOps counts the requests a hook sees, by kind, and forwards them.
type countOps struct {
	mu     sync.Mutex
	counts map[string]int
}

func kind(r *http.Request) string {
	switch {
	case s3server.IsListObjectsV2(r):
		return "list"
	case s3server.IsDeleteObjects(r):
		return "deleteObjects"
	case r.Method == http.MethodDelete:
		return "deleteObject"
	default:
		return r.Method
	}
}

func (c *countOps) add(r *http.Request) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.counts == nil {
		c.counts = map[string]int{}
	}
	c.counts[kind(r)]++
}

func (c *countOps) get(k string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[k]
}

func putInput(bucket, key string) *s3.PutObjectInput {
	return &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: strings.NewReader(key)}
}

func headInput(bucket, key string) *s3.HeadObjectInput {
	return &s3.HeadObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)}
}
