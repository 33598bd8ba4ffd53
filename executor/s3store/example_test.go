package s3store_test

import (
	"context"
	"fmt"
	"log"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/tombstoneworks/communitydeletion/executor/s3store"
	"github.com/tombstoneworks/communitydeletion/internal/testserver/s3server"
)

// exampleBucket returns the test binary's S3-compatible server (s3srv,
// started by TestMain: Versity's gateway, or TEST_S3_ENDPOINT) and a root
// prefix no other test or example uses, under which it writes keys as a
// service's uploads would have; it panics on error.
func exampleBucket(keys ...string) (*s3server.Server, string) {
	root := s3server.NewRoot()
	client := s3srv.Client("")
	for _, key := range keys {
		_, err := client.PutObject(context.Background(), &s3.PutObjectInput{
			Bucket: aws.String(s3srv.Bucket), Key: aws.String(root + key), Body: strings.NewReader("contents"),
		})
		if err != nil {
			panic(err)
		}
	}
	return s3srv, root
}

// ExampleOpen opens a store on an S3-compatible server and does what the
// executor does with a community's prefix: list it in ascending key order,
// delete what it listed, and check that nothing is left. A neighbouring
// prefix that merely starts alike is never touched.
func ExampleOpen() {
	ctx := context.Background()
	server, root := exampleBucket("media/c1/b.png", "media/c1/a.png", "media/c1/sub/c.png", "media/c10/keep.png")

	store, err := s3store.Open(ctx, s3store.Config{
		Options:  s3store.Options{Bucket: server.Bucket, Root: root}, // keys are relative to Root
		Endpoint: server.Endpoint, Region: server.Region, PathStyle: true,
		Credentials: server.Credentials(), // nil: the SDK's default chain (AWS_* variables, shared config, roles)
	})
	if err != nil {
		log.Fatal(err)
	}
	var keys []string
	err = store.List(ctx, "media/c1/", func(key string, size int64) error {
		fmt.Println(key, size)
		keys = append(keys, key)
		return nil
	})
	if err != nil {
		log.Fatal(err) // s3store.ErrInconsistentListing: a listing it cannot trust is never complete
	}
	if err := store.Delete(ctx, keys); err != nil {
		log.Fatal(err) // a *s3store.DeleteError names the keys the server could not delete
	}
	left, err := store.Any(ctx, "media/c1/")
	if err != nil {
		log.Fatal(err)
	}
	kept, err := store.Any(ctx, "media/c10/")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("left under media/c1/:", left, "media/c10/ kept:", kept)
	if err := store.Delete(ctx, []string{"media/c10/keep.png"}); err != nil {
		log.Fatal(err)
	}
	// Output:
	// media/c1/a.png 8
	// media/c1/b.png 8
	// media/c1/sub/c.png 8
	// left under media/c1/: false media/c10/ kept: true
}

// ExampleNew wraps an *s3.Client the service already has. Deleting a key
// that is already gone counts as deleted, so a resumed deletion can send a
// chunk again.
func ExampleNew() {
	ctx := context.Background()
	server, root := exampleBucket("uploads/c1/report.pdf")
	var client = server.Client("") // the service's own client

	store, err := s3store.New(client, s3store.Options{Bucket: server.Bucket, Root: root})
	if err != nil {
		log.Fatal(err)
	}
	for range 2 {
		if err := store.Delete(ctx, []string{"uploads/c1/report.pdf"}); err != nil {
			log.Fatal(err)
		}
	}
	left, err := store.Any(ctx, "uploads/c1/")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("left:", left)
	// Output:
	// left: false
}
