// Package s3store is an executor.ObjectStore over Amazon S3 or an
// S3-compatible server (MinIO, Ceph RGW, Versity's gateway), through
// aws-sdk-go-v2.
//
// List pages through ListObjectsV2 and fails closed on a listing it cannot
// trust (keys that do not strictly ascend, a key outside the prefix, a
// truncated page without a continuation token): ErrInconsistentListing.
// Delete sends DeleteObjects in quiet mode, at most 1,000 keys a call, and
// fails with a *DeleteError if the answer reports any key it could not
// delete; a missing key counts as deleted. Any is one ListObjectsV2 call
// with MaxKeys 1. Keys are relative to Options.Root; nothing outside it is
// listed or deleted.
//
// New wraps a client the service already has; Open builds one from a Config
// and OpenURL from an s3://BUCKET[/ROOT/][?endpoint=…&region=…] URL
// (ParseURL), both with the SDK's default credential and region chain
// (overridden by Config.Credentials, Region and Profile) and its standard
// retryer. Error texts are one line of bounded length; errors.As still
// reaches the SDK's smithy.APIError.
package s3store
