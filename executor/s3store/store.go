package s3store

import (
	"context"
	"crypto/md5" //nolint:gosec // for the Content-MD5 header only, see below
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// MaxBatch is the most keys one DeleteObjects call or one ListObjectsV2 page
// carries (S3's limit); it is the default of Options.DeleteBatchSize and
// Options.ListPageSize.
const MaxBatch = 1000

// maxEmptyPages bounds the consecutive truncated pages without a key a
// listing accepts before it gives up, so a server that keeps answering
// "more to come" with nothing cannot loop it forever.
const maxEmptyPages = 100

// Options configures a Store.
type Options struct {
	// Bucket is the bucket that holds the objects. Required.
	Bucket string
	// Root, if not empty, is a key prefix ending in "/" that every key of
	// the store lives under: the store's keys are relative to it (key
	// "media/x" is object Root+"media/x"), and nothing outside it is listed
	// or deleted.
	Root string
	// ListPageSize is MaxKeys of each ListObjectsV2 page; 0 means MaxBatch.
	ListPageSize int32
	// DeleteBatchSize is the most keys one DeleteObjects call carries; 0
	// means MaxBatch, which is also the maximum.
	DeleteBatchSize int
	// ContentMD5 also sends a Content-MD5 header with DeleteObjects, for
	// S3-compatible servers that still require it. The SDK always sends a
	// CRC32 checksum (x-amz-checksum-crc32), which Amazon S3 accepts.
	ContentMD5 bool
}

// validate fills in defaults and checks o.
func (o *Options) validate() error {
	if err := checkBucket(o.Bucket); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	if err := checkRoot(o.Root); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	if o.ListPageSize == 0 {
		o.ListPageSize = MaxBatch
	}
	if o.ListPageSize < 1 || o.ListPageSize > MaxBatch {
		return fmt.Errorf("%w: ListPageSize %d is not between 1 and %d", ErrInvalidConfig, o.ListPageSize, MaxBatch)
	}
	if o.DeleteBatchSize == 0 {
		o.DeleteBatchSize = MaxBatch
	}
	if o.DeleteBatchSize < 1 || o.DeleteBatchSize > MaxBatch {
		return fmt.Errorf("%w: DeleteBatchSize %d is not between 1 and %d", ErrInvalidConfig, o.DeleteBatchSize, MaxBatch)
	}
	return nil
}

// checkBucket accepts S3 bucket names, loosened as S3-compatible servers
// are: 3 to 63 letters, digits, '.', '-' or '_', starting and ending with a
// letter or digit.
func checkBucket(b string) error {
	if len(b) < 3 || len(b) > 63 {
		return fmt.Errorf("bucket name %q is not 3 to 63 characters long", clip(b, 80))
	}
	for i := range len(b) {
		c := b[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || i == len(b)-1 || c != '.' && c != '-' && c != '_') {
			return fmt.Errorf("bucket name %q has a character or an end that bucket names cannot have", b)
		}
	}
	return nil
}

// maxRootBytes bounds Options.Root, leaving most of S3's 1,024 bytes of key
// to the keys under it.
const maxRootBytes = 512

// checkRoot accepts "" or a key prefix ending in "/" made of non-empty
// segments other than "." and "..", without control characters.
func checkRoot(root string) error {
	if root == "" {
		return nil
	}
	switch {
	case len(root) > maxRootBytes:
		return fmt.Errorf("root is longer than %d bytes", maxRootBytes)
	case !utf8.ValidString(root):
		return fmt.Errorf("root %q is not valid UTF-8", root)
	case !strings.HasSuffix(root, "/"):
		return fmt.Errorf("root %q does not end in \"/\"", root)
	case strings.IndexFunc(root, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0:
		return fmt.Errorf("root %q has a control character", root)
	}
	for seg := range strings.SplitSeq(strings.TrimSuffix(root, "/"), "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("root %q has an empty, \".\" or \"..\" segment", root)
		}
	}
	return nil
}

// Store is an ObjectStore over one bucket (and optional root prefix) of an
// S3 client. It is safe for concurrent use.
type Store struct {
	client *s3.Client
	opts   Options
}

// New returns a Store over client with opts. The client's retryer, endpoint
// and credentials are used as they are.
func New(client *s3.Client, opts Options) (*Store, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: client is nil", ErrInvalidConfig)
	}
	if err := opts.validate(); err != nil {
		return nil, err
	}
	return &Store{client: client, opts: opts}, nil
}

// Bucket returns the store's bucket.
func (s *Store) Bucket() string { return s.opts.Bucket }

// StoreKind names the store's kind in a deletion receipt: "s3".
func (s *Store) StoreKind() string { return "s3" }

// Root returns the store's root prefix ("" for the whole bucket).
func (s *Store) Root() string { return s.opts.Root }

func (s *Store) fail(op, key string, err error) error {
	return &Error{Op: op, Bucket: s.opts.Bucket, Key: key, Err: err}
}

// List calls fn for every object whose key starts with prefix (relative to
// Root), in strictly ascending byte order, with its size. It pages through
// ListObjectsV2 and checks every page: a key that does not follow the one
// before, lies outside the prefix or comes without a size, or a truncated
// page without a new continuation token, ends the listing with an error
// matching ErrInconsistentListing. An error from fn is returned as it is.
func (s *Store) List(ctx context.Context, prefix string, fn func(key string, size int64) error) error {
	full := s.opts.Root + prefix
	var (
		token      *string
		last       string
		listed     bool
		emptyPages int
	)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		out, err := s.client.ListObjectsV2(ctx, &s3.ListObjectsV2Input{
			Bucket:            aws.String(s.opts.Bucket),
			Prefix:            aws.String(full),
			MaxKeys:           aws.Int32(s.opts.ListPageSize),
			ContinuationToken: token,
			// Keys with characters XML cannot carry come back intact; a
			// server that ignores this answers without EncodingType and
			// raw keys.
			EncodingType: types.EncodingTypeUrl,
		})
		if err != nil {
			return s.fail("list", full, err)
		}
		for _, obj := range out.Contents {
			key, err := listedKey(out.EncodingType, obj.Key)
			if err != nil {
				return s.fail("list", full, err)
			}
			switch {
			case !strings.HasPrefix(key, full):
				return s.fail("list", full, fmt.Errorf("%w: key %q is outside the prefix", ErrInconsistentListing, key))
			case listed && key <= last:
				return s.fail("list", full, fmt.Errorf("%w: key %q does not follow %q", ErrInconsistentListing, key, last))
			case obj.Size == nil || *obj.Size < 0:
				return s.fail("list", full, fmt.Errorf("%w: key %q comes without a valid size", ErrInconsistentListing, key))
			}
			last, listed = key, true
			if err := fn(key[len(s.opts.Root):], *obj.Size); err != nil {
				return err
			}
		}
		if !aws.ToBool(out.IsTruncated) {
			return nil
		}
		next := aws.ToString(out.NextContinuationToken)
		if next == "" {
			return s.fail("list", full, fmt.Errorf("%w: a truncated page has no continuation token", ErrInconsistentListing))
		}
		if token != nil && next == *token {
			return s.fail("list", full, fmt.Errorf("%w: the continuation token repeats", ErrInconsistentListing))
		}
		if len(out.Contents) == 0 {
			if emptyPages++; emptyPages > maxEmptyPages {
				return s.fail("list", full, fmt.Errorf("%w: %d truncated pages in a row without a key", ErrInconsistentListing, emptyPages))
			}
		} else {
			emptyPages = 0
		}
		token = &next
	}
}

// listedKey returns a listed object's key, decoded if the server URL-encoded
// it.
func listedKey(encoding types.EncodingType, k *string) (string, error) {
	if k == nil {
		return "", fmt.Errorf("%w: an object comes without a key", ErrInconsistentListing)
	}
	if encoding != types.EncodingTypeUrl {
		return *k, nil
	}
	key, err := url.QueryUnescape(*k)
	if err != nil {
		return "", fmt.Errorf("%w: key %q is not URL-encoded: %v", ErrInconsistentListing, *k, err)
	}
	return key, nil
}

// Any reports whether at least one object's key starts with prefix
// (relative to Root), with one ListObjectsV2 call of MaxKeys 1. An answer it
// cannot trust (a listed key outside the prefix, or no key but "truncated")
// is an error, never false.
func (s *Store) Any(ctx context.Context, prefix string) (bool, error) {
	full := s.opts.Root + prefix
	out, err := s.client.ListObjectsV2(ctx, &s3.ListObjectsV2Input{
		Bucket:       aws.String(s.opts.Bucket),
		Prefix:       aws.String(full),
		MaxKeys:      aws.Int32(1),
		EncodingType: types.EncodingTypeUrl,
	})
	if err != nil {
		return false, s.fail("probe", full, err)
	}
	if len(out.Contents) > 0 {
		key, err := listedKey(out.EncodingType, out.Contents[0].Key)
		if err != nil {
			return false, s.fail("probe", full, err)
		}
		if !strings.HasPrefix(key, full) {
			return false, s.fail("probe", full, fmt.Errorf("%w: key %q is outside the prefix", ErrInconsistentListing, key))
		}
		return true, nil
	}
	if aws.ToBool(out.IsTruncated) {
		return false, s.fail("probe", full, fmt.Errorf("%w: no key, but the listing is truncated", ErrInconsistentListing))
	}
	return false, nil
}

// Delete deletes the objects keys names (relative to Root): DeleteObjects
// in quiet mode, at most DeleteBatchSize keys a call, in order. It fails on
// the first call that fails or answers with any per-key error (a
// *DeleteError), except NoSuchKey: a missing key counts as deleted, so
// Delete is idempotent. A key with a character XML cannot carry is deleted
// alone with DeleteObject, where the key travels in the URL.
func (s *Store) Delete(ctx context.Context, keys []string) error {
	var batch, alone []string
	for _, key := range keys {
		switch {
		case key == "":
			return fmt.Errorf("%w: empty key", ErrInvalidKey)
		case !utf8.ValidString(key):
			return fmt.Errorf("%w: key %q is not valid UTF-8", ErrInvalidKey, clip(key, 120))
		case !xmlSafe(s.opts.Root + key):
			alone = append(alone, key)
		default:
			batch = append(batch, key)
		}
	}
	for start := 0; start < len(batch); start += s.opts.DeleteBatchSize {
		if err := s.deleteBatch(ctx, batch[start:min(start+s.opts.DeleteBatchSize, len(batch))]); err != nil {
			return err
		}
	}
	for _, key := range alone {
		if err := s.deleteOne(ctx, key); err != nil {
			return err
		}
	}
	return nil
}

// xmlSafe reports whether every character of s is one XML 1.0 can carry. The
// SDK replaces any other with U+FFFD in a request body, which would name
// another key.
func xmlSafe(s string) bool {
	for _, r := range s {
		if !(r == 0x09 || r == 0x0A || r == 0x0D || r >= 0x20 && r <= 0xD7FF ||
			r >= 0xE000 && r <= 0xFFFD || r >= 0x10000 && r <= 0x10FFFF) {
			return false
		}
	}
	return true
}

func (s *Store) deleteBatch(ctx context.Context, keys []string) error {
	objects := make([]types.ObjectIdentifier, len(keys))
	for i, key := range keys {
		objects[i] = types.ObjectIdentifier{Key: aws.String(s.opts.Root + key)}
	}
	var optFns []func(*s3.Options)
	if s.opts.ContentMD5 {
		optFns = append(optFns, withContentMD5)
	}
	out, err := s.client.DeleteObjects(ctx, &s3.DeleteObjectsInput{
		Bucket: aws.String(s.opts.Bucket),
		// Quiet: the answer lists only the keys that failed, which is all
		// Delete needs; a missing Errors entry means deleted.
		Delete: &types.Delete{Objects: objects, Quiet: aws.Bool(true)},
	}, optFns...)
	if err != nil {
		return s.fail("delete", s.opts.Root+keys[0], err)
	}
	var failed []KeyError
	for _, e := range out.Errors {
		code := aws.ToString(e.Code)
		if code == "NoSuchKey" {
			continue // already gone: that is what was asked
		}
		failed = append(failed, KeyError{
			Key: strings.TrimPrefix(aws.ToString(e.Key), s.opts.Root), Code: code, Message: aws.ToString(e.Message),
		})
	}
	if len(failed) == 0 {
		return nil
	}
	return &DeleteError{Bucket: s.opts.Bucket, Failed: len(failed), Total: len(keys), First: failed[:min(len(failed), maxReportedKeys)]}
}

// deleteOne deletes one key with DeleteObject; NoSuchKey counts as deleted.
func (s *Store) deleteOne(ctx context.Context, key string) error {
	_, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{
		Bucket: aws.String(s.opts.Bucket),
		Key:    aws.String(s.opts.Root + key),
	})
	if err != nil && !isNoSuchKey(err) {
		return s.fail("delete", s.opts.Root+key, err)
	}
	return nil
}

// withContentMD5 adds a Content-MD5 header of the request body to one call,
// before it is signed.
func withContentMD5(o *s3.Options) {
	o.APIOptions = append(o.APIOptions, func(stack *middleware.Stack) error {
		return stack.Build.Add(middleware.BuildMiddlewareFunc("s3store.ContentMD5",
			func(ctx context.Context, in middleware.BuildInput, next middleware.BuildHandler) (middleware.BuildOutput, middleware.Metadata, error) {
				req, ok := in.Request.(*smithyhttp.Request)
				if !ok {
					return middleware.BuildOutput{}, middleware.Metadata{}, fmt.Errorf("content-md5: unexpected request type %T", in.Request)
				}
				if stream := req.GetStream(); stream != nil && req.Header.Get("Content-MD5") == "" {
					if !req.IsStreamSeekable() {
						return middleware.BuildOutput{}, middleware.Metadata{}, errors.New("content-md5: request body cannot be rewound")
					}
					h := md5.New() //nolint:gosec // S3's Content-MD5 header is defined as MD5: an integrity check, not security
					if _, err := io.Copy(h, stream); err != nil {
						return middleware.BuildOutput{}, middleware.Metadata{}, fmt.Errorf("content-md5: %w", err)
					}
					if err := req.RewindStream(); err != nil {
						return middleware.BuildOutput{}, middleware.Metadata{}, fmt.Errorf("content-md5: %w", err)
					}
					req.Header.Set("Content-MD5", base64.StdEncoding.EncodeToString(h.Sum(nil)))
				}
				return next.HandleBuild(ctx, in)
			}), middleware.After)
	})
}
