package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/tombstoneworks/communitydeletion/executor"
	"github.com/tombstoneworks/communitydeletion/executor/storeurl"
	"github.com/tombstoneworks/communitydeletion/internal/testserver"
	"github.com/tombstoneworks/communitydeletion/internal/testserver/redisserver"
	"github.com/tombstoneworks/communitydeletion/internal/testserver/s3server"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// Which stores the demo uses (its -stores flag).
const (
	storesAuto     = "auto"     // each real server whose binary is installed, else the local stand-in
	storesLocal    = "local"    // the file store and the in-process cache
	storesServices = "services" // versitygw and redis-server, or fail
)

// cachePattern is the demo service's one cache key family in Redis.
const cachePattern = "demo:{community}:*"

// stores are the object store and cache the demo deletes from, opened from
// URLs as deletionctl run opens them, with what the demo needs to fill and
// inspect them.
type stores struct {
	objects executor.ObjectStore
	cache   executor.Cache
	// objectsURL and cacheURL name them (without a password).
	objectsURL, cacheURL string
	// objectsKind and cacheKind say what serves them, for the output.
	objectsKind, cacheKind string

	put      func(ctx context.Context, key string, body []byte) error
	cachePut func(ctx context.Context, community uuid.UUID, key string) error
	cacheLen func(ctx context.Context, community uuid.UUID) (int, error)
	closers  []func() error
}

// close stops what openStores started and removes what it wrote.
func (s *stores) close() {
	for _, closer := range slices.Backward(s.closers) {
		_ = closer()
	}
}

// openStores opens the stores mode asks for. In auto mode a server that
// is not installed, or does not start, is replaced by its local stand-in;
// the stores' kinds say which and, for a stand-in, why.
func openStores(ctx context.Context, mode string) (_ *stores, err error) {
	s := &stores{}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	useS3, useRedis := mode == storesServices, mode == storesServices
	var whyFiles, whyMemory string
	if mode == storesLocal {
		whyFiles, whyMemory = "as -stores local asks", "as -stores local asks"
	}
	if mode == storesAuto {
		_, errS3 := testserver.FindBinary("versitygw")
		_, errRedis := testserver.FindBinary("redis-server")
		useS3, useRedis = errS3 == nil, errRedis == nil
		if errS3 != nil {
			whyFiles = "versitygw is not installed: " + s3server.InstallCommand
		}
		if errRedis != nil {
			whyMemory = "redis-server is not installed: " + redisserver.InstallCommand
		}
	}
	if useS3 {
		if err := s.openS3(ctx); err != nil {
			if mode == storesServices {
				return nil, fmt.Errorf("start the S3 gateway: %w", err)
			}
			whyFiles = "the S3 gateway did not start: " + oneLine(err)
			useS3 = false
		}
	}
	if !useS3 {
		if err := s.openFiles(ctx); err != nil {
			return nil, err
		}
		if whyFiles != "" {
			s.objectsKind += " (a stand-in: " + whyFiles + ")"
		}
	}
	if useRedis {
		if err := s.openRedis(ctx); err != nil {
			if mode == storesServices {
				return nil, fmt.Errorf("start redis-server: %w", err)
			}
			whyMemory = "redis-server did not start: " + oneLine(err)
			useRedis = false
		}
	}
	if !useRedis {
		s.openMemory()
		if whyMemory != "" {
			s.cacheKind += " (a stand-in: " + whyMemory + ")"
		}
	}
	return s, nil
}

// openS3 starts Versity's S3 gateway as a throwaway process and opens the
// object store over HTTP from its s3:// URL, with the gateway's static
// credentials in place of the SDK's default chain.
func (s *stores) openS3(ctx context.Context) error {
	srv, err := s3server.Start(ctx)
	if err != nil {
		return err
	}
	s.closers = append(s.closers, srv.Close)
	root := s3server.NewRoot()
	raw := fmt.Sprintf("s3://%s/%s?endpoint=%s&region=%s&path_style=true", srv.Bucket, root, srv.Endpoint, srv.Region)
	spec, err := storeurl.ParseObjects(raw)
	if err != nil {
		return err
	}
	spec.S3.Credentials = srv.Credentials()
	objects, err := spec.Open(ctx)
	if err != nil {
		return err
	}
	client := srv.Client("")
	s.objects, s.objectsURL = objects, spec.String()
	s.objectsKind = "S3 over HTTP, Versity's gateway (a throwaway process)"
	if srv.Source == s3server.EnvEndpoint {
		s.objectsKind = "S3 over HTTP, the server " + s3server.EnvEndpoint + " names"
	}
	s.put = func(ctx context.Context, key string, body []byte) error {
		_, err := client.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(srv.Bucket), Key: aws.String(root + key),
			Body: bytes.NewReader(body)})
		return err
	}
	if srv.Source == s3server.EnvEndpoint {
		// That server outlives the demo: remove what the demo wrote there.
		s.closers = append(s.closers, func() error {
			var keys []string
			if err := objects.List(context.Background(), "", func(key string, _ int64) error {
				keys = append(keys, key)
				return nil
			}); err != nil {
				return err
			}
			for len(keys) > 0 {
				n := min(len(keys), 1000)
				if err := objects.Delete(context.Background(), keys[:n]); err != nil {
					return err
				}
				keys = keys[n:]
			}
			return nil
		})
	}
	return nil
}

// openFiles opens the file store over a temporary directory.
func (s *stores) openFiles(ctx context.Context) error {
	root, err := os.MkdirTemp("", "demo-objects-")
	if err != nil {
		return fmt.Errorf("object store directory: %w", err)
	}
	s.closers = append(s.closers, func() error { return os.RemoveAll(root) })
	raw := "file://" + root
	objects, err := storeurl.OpenObjects(ctx, raw)
	if err != nil {
		return err
	}
	s.objects, s.objectsURL, s.objectsKind = objects, raw, "a local directory, "+root
	s.put = func(_ context.Context, key string, body []byte) error {
		path := filepath.Join(root, filepath.FromSlash(key))
		if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
			return err
		}
		return os.WriteFile(path, body, 0o600)
	}
	return nil
}

// openRedis starts redis-server as a throwaway process and opens the cache
// from its redis:// URL.
func (s *stores) openRedis(ctx context.Context) error {
	srv, err := redisserver.StartLocal(ctx, nil)
	if err != nil {
		return err
	}
	s.closers = append(s.closers, srv.Close)
	raw := srv.URL + "?pattern=" + cachePattern
	cache, err := storeurl.OpenCache(raw)
	if err != nil {
		return err
	}
	s.closers = append(s.closers, cache.Close)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr})
	s.closers = append(s.closers, client.Close)
	s.cache, s.cacheURL, s.cacheKind = cache, raw, "Redis, redis-server (a throwaway process)"
	key := func(community uuid.UUID, suffix string) string { return "demo:" + community.String() + ":" + suffix }
	s.cachePut = func(ctx context.Context, community uuid.UUID, k string) error {
		return client.Set(ctx, key(community, k), "v", 0).Err()
	}
	s.cacheLen = func(ctx context.Context, community uuid.UUID) (int, error) {
		n := 0
		iter := client.Scan(ctx, 0, key(community, "*"), 1000).Iterator()
		for iter.Next(ctx) {
			n++
		}
		return n, iter.Err()
	}
	return nil
}

// openMemory opens the in-process cache.
func (s *stores) openMemory() {
	mem := executor.NewMemoryCache()
	s.cache, s.cacheURL, s.cacheKind = mem, "memory:", "in the demo's memory"
	s.cachePut = func(_ context.Context, community uuid.UUID, k string) error {
		mem.Put(lifecycle.UUIDKey(community), k)
		return nil
	}
	s.cacheLen = func(_ context.Context, community uuid.UUID) (int, error) {
		return mem.Len(lifecycle.UUIDKey(community)), nil
	}
}

// oneLine folds an error onto one line.
func oneLine(err error) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", " ")), " ")
}

// putAll writes objects with a few writers at once.
func (s *stores) putAll(ctx context.Context, keys []string) error {
	const writers = 8
	work := make(chan string)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for range writers {
		wg.Go(func() {
			for key := range work {
				if err := s.put(ctx, key, []byte(key)); err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("object store: put %s: %w", key, err))
					mu.Unlock()
				}
			}
		})
	}
	for _, key := range keys {
		work <- key
	}
	close(work)
	wg.Wait()
	return errors.Join(errs...)
}
