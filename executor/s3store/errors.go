package s3store

import (
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	"github.com/tombstoneworks/communitydeletion/internal/errtext"
)

var (
	// ErrInvalidConfig reports Options or a Config that New or Open refuses.
	ErrInvalidConfig = errors.New("s3store: invalid configuration")
	// ErrInvalidKey reports a key Delete refuses to send: empty, or not
	// valid UTF-8 (S3 keys are UTF-8, so such a key names no object).
	ErrInvalidKey = errors.New("s3store: invalid key")
	// ErrInconsistentListing reports a listing the store cannot trust: keys
	// that do not ascend strictly, a key outside the listed prefix, a
	// truncated page without a continuation token. The listing fails
	// closed; nothing after the inconsistency is reported. It comes wrapped
	// in an *Error naming the bucket and prefix.
	ErrInconsistentListing = errors.New("inconsistent listing")
)

// Error is a failed call to the object store: what was attempted, on which
// bucket and key (or prefix), and why. Err is the cause, often a
// smithy.APIError carrying the server's code; errors.As reaches it.
type Error struct {
	Op     string // "list", "delete", "probe"
	Bucket string
	Key    string // the prefix listed or probed, or the first key of a batch
	Err    error
}

func (e *Error) Error() string {
	return bound(fmt.Sprintf("s3store: %s s3://%s/%s: %v", e.Op, e.Bucket, e.Key, e.Err))
}

func (e *Error) Unwrap() error { return e.Err }

// KeyError is one key a DeleteObjects call reported it could not delete.
type KeyError struct {
	Key     string // relative to the store's Root, as passed to Delete
	Code    string
	Message string
}

// DeleteError reports that a DeleteObjects call answered with per-key
// errors: those keys were not deleted (others of the batch may have been).
// It names how many failed and the first few.
type DeleteError struct {
	Bucket string
	Failed int        // keys reported failed
	Total  int        // keys in the batch
	First  []KeyError // the first few failures, at most maxReportedKeys
}

// maxReportedKeys bounds DeleteError.First.
const maxReportedKeys = 3

func (e *DeleteError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "s3store: delete in s3://%s: %d of %d keys not deleted:", e.Bucket, e.Failed, e.Total)
	for i, k := range e.First {
		if i > 0 {
			b.WriteString(";")
		}
		fmt.Fprintf(&b, " %q %s", clip(k.Key, 120), k.Code)
		if k.Message != "" {
			fmt.Fprintf(&b, " (%s)", clip(k.Message, 120))
		}
	}
	if e.Failed > len(e.First) {
		fmt.Fprintf(&b, "; and %d more", e.Failed-len(e.First))
	}
	return bound(b.String())
}

// bound makes s one line of at most errtext.Max bytes, as every error this
// package returns is: a server's message can be arbitrarily long, and an
// error is printed on one line of a log or a CLI.
func bound(s string) string { return errtext.Line(s, errtext.Max) }

// clip cuts s to at most n bytes (n >= 64).
func clip(s string, n int) string { return errtext.Clip(s, n) }

// isNoSuchKey reports whether err is a server's NoSuchKey answer (and not,
// say, NoSuchBucket, which is no proof of deletion).
func isNoSuchKey(err error) bool {
	if _, ok := errors.AsType[*types.NoSuchKey](err); ok {
		return true
	}
	var api smithy.APIError
	return errors.As(err, &api) && api.ErrorCode() == "NoSuchKey"
}
