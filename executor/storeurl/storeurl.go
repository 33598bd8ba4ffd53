package storeurl

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/tombstoneworks/communitydeletion/executor"
	"github.com/tombstoneworks/communitydeletion/executor/rediscache"
	"github.com/tombstoneworks/communitydeletion/executor/s3store"
)

// ErrInvalidURL is matched by every error ParseObjects and ParseCache return.
var ErrInvalidURL = errors.New("invalid URL")

// Which store an Error is about.
const (
	StoreObjects = "objects"
	StoreCache   = "cache"
)

// Error reports a store URL that could not be parsed (Op "parse", matching
// ErrInvalidURL) or a parsed one that could not be opened (Op "open"). Its
// text is one line of at most maxErrorBytes and never repeats a password;
// errors.As still reaches the adapter's own error (*s3store.URLError,
// *rediscache.URLError, …).
type Error struct {
	Store string // StoreObjects or StoreCache
	Op    string // "parse" or "open"
	URL   string // the URL without its password, "" when unparsed
	Err   error
}

// maxErrorBytes bounds an Error's text.
const maxErrorBytes = 600

func (e *Error) Error() string {
	var s string
	if e.URL != "" {
		s = fmt.Sprintf("%s %s URL %s: %v", e.Op, e.Store, e.URL, e.Err)
	} else {
		s = fmt.Sprintf("%s %s URL: %v", e.Op, e.Store, e.Err)
	}
	return bound(s)
}

// Unwrap returns the cause and, for a parse error, ErrInvalidURL.
func (e *Error) Unwrap() []error {
	if e.Op == "parse" {
		return []error{ErrInvalidURL, e.Err}
	}
	return []error{e.Err}
}

// bound folds s onto one line of at most maxErrorBytes.
func bound(s string) string {
	s = strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' {
			return ' '
		}
		return r
	}, s)
	if len(s) > maxErrorBytes {
		cut := maxErrorBytes - 3
		for cut > 0 && s[cut]&0xc0 == 0x80 { // not inside a UTF-8 sequence
			cut--
		}
		s = s[:cut] + "..."
	}
	return s
}

// clip shortens an echoed fragment of input.
func clip(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// maxURLBytes bounds what the parsers read.
const maxURLBytes = 8192

// Object-store schemes.
const (
	SchemeS3   = "s3"
	SchemeFile = "file"
)

// Objects is a parsed object-store URL: exactly one of S3 (Scheme "s3") or
// Dir (Scheme "file") is set.
type Objects struct {
	Scheme string
	// S3 is the parsed s3store configuration; set Credentials or HTTPClient
	// on it before Open to override the SDK's default chain.
	S3 s3store.Config
	// Dir is the file store's root: absolute and clean.
	Dir string
}

// ParseObjects parses an object-store URL: s3://… (s3store.ParseURL) or
// file:///ABSOLUTE/DIR (no host but "localhost", no query or fragment).
// Errors are *Error values matching ErrInvalidURL.
func ParseObjects(raw string) (Objects, error) {
	fail := func(err error) (Objects, error) {
		return Objects{}, &Error{Store: StoreObjects, Op: "parse", Err: err}
	}
	if len(raw) > maxURLBytes {
		return fail(fmt.Errorf("longer than %d bytes", maxURLBytes))
	}
	scheme, _, ok := strings.Cut(raw, ":")
	if !ok {
		return fail(errors.New("no scheme: want s3://BUCKET/ROOT/ or file:///DIR"))
	}
	switch strings.ToLower(scheme) {
	case SchemeS3:
		cfg, err := s3store.ParseURL(raw)
		if err != nil {
			return fail(err)
		}
		return Objects{Scheme: SchemeS3, S3: cfg}, nil
	case SchemeFile:
		dir, err := parseFileURL(raw)
		if err != nil {
			return fail(err)
		}
		return Objects{Scheme: SchemeFile, Dir: dir}, nil
	default:
		return fail(fmt.Errorf("scheme %q is not s3 or file", clip(scheme, 40)))
	}
}

// parseFileURL returns the directory of file:///DIR.
func parseFileURL(raw string) (string, error) {
	if strings.ContainsAny(raw, "#\x00") {
		return "", errors.New("file URL has a fragment or a NUL byte")
	}
	u, err := url.Parse(raw)
	if err != nil {
		if ue, ok := errors.AsType[*url.Error](err); ok {
			err = ue.Err
		}
		return "", fmt.Errorf("file URL: %v", err)
	}
	switch {
	case u.Opaque != "":
		return "", errors.New("file URL is not of the form file:///ABSOLUTE/DIR")
	case u.User != nil:
		return "", errors.New("file URL has user information")
	case u.Host != "" && u.Host != "localhost":
		return "", fmt.Errorf("file URL names host %q: only a local directory (file:///DIR)", clip(u.Host, 64))
	case u.RawQuery != "" || u.ForceQuery:
		return "", errors.New("file URL has a query")
	case !strings.HasPrefix(u.Path, "/"):
		return "", errors.New("file URL has no absolute directory (file:///DIR)")
	case strings.ContainsFunc(u.Path, func(r rune) bool { return r < ' ' || r == 0x7f }):
		return "", errors.New("file URL path has a control character")
	}
	return filepath.Clean(u.Path), nil
}

// String returns the URL form of o, which ParseObjects reads back to o
// (without S3's Credentials and HTTPClient, which have no URL form). It
// holds no secret: an s3:// URL never carries credentials.
func (o Objects) String() string {
	switch o.Scheme {
	case SchemeS3:
		return o.S3.URL()
	case SchemeFile:
		return (&url.URL{Scheme: SchemeFile, Path: o.Dir}).String()
	}
	return ""
}

// Open returns the object store o names. A file store's root must be an
// existing directory; an S3 store is built from the SDK's default chain
// (s3store.Open) without any request. Errors are *Error values.
func (o Objects) Open(ctx context.Context) (executor.ObjectStore, error) {
	fail := func(err error) (executor.ObjectStore, error) {
		return nil, &Error{Store: StoreObjects, Op: "open", URL: o.String(), Err: err}
	}
	switch o.Scheme {
	case SchemeS3:
		store, err := s3store.Open(ctx, o.S3)
		if err != nil {
			return fail(err)
		}
		return store, nil
	case SchemeFile:
		info, err := os.Stat(o.Dir)
		if err != nil {
			return fail(fmt.Errorf("directory: %w", err))
		}
		if !info.IsDir() {
			return fail(fmt.Errorf("%q is not a directory", o.Dir))
		}
		return executor.NewFileObjectStore(o.Dir), nil
	}
	return fail(fmt.Errorf("unknown scheme %q", o.Scheme))
}

// OpenObjects is ParseObjects followed by Open.
func OpenObjects(ctx context.Context, raw string) (executor.ObjectStore, error) {
	o, err := ParseObjects(raw)
	if err != nil {
		return nil, err
	}
	return o.Open(ctx)
}

// SchemeMemory is the in-process cache's URL, whole.
const SchemeMemory = "memory"

// Cache is a parsed cache URL: Scheme "memory", or a Redis scheme with Redis
// set.
type Cache struct {
	Scheme string
	// Redis is the parsed rediscache configuration.
	Redis rediscache.Config
	// redacted is the URL without its password.
	redacted string
}

// ParseCache parses a cache URL: redis://, rediss://, redis+cluster:// or
// rediss+cluster:// (rediscache.ParseURL, at least one pattern=), or
// "memory:". Errors are *Error values matching ErrInvalidURL; none repeats
// the URL's password.
func ParseCache(raw string) (Cache, error) {
	fail := func(err error) (Cache, error) {
		return Cache{}, &Error{Store: StoreCache, Op: "parse", Err: err}
	}
	if len(raw) > maxURLBytes {
		return fail(fmt.Errorf("longer than %d bytes", maxURLBytes))
	}
	if raw == SchemeMemory+":" {
		return Cache{Scheme: SchemeMemory, redacted: raw}, nil
	}
	scheme, _, ok := strings.Cut(raw, ":")
	if !ok {
		return fail(errors.New("no scheme: want a redis://HOST:PORT/DB?pattern=…, redis+cluster://… or memory: URL"))
	}
	switch lower := strings.ToLower(scheme); lower {
	case "redis", "rediss", "redis+cluster", "rediss+cluster":
		cfg, err := rediscache.ParseURL(raw)
		if err != nil {
			return fail(err)
		}
		return Cache{Scheme: lower, Redis: cfg, redacted: redactPassword(raw)}, nil
	case SchemeMemory:
		return fail(errors.New(`the in-process cache is exactly "memory:"`))
	default:
		return fail(fmt.Errorf("scheme %q is not redis, rediss, redis+cluster, rediss+cluster or memory", clip(scheme, 40)))
	}
}

// redactPassword replaces the password of a redis URL's user information
// with "xxxxx".
func redactPassword(raw string) string {
	i := strings.Index(raw, "://")
	if i < 0 {
		return raw
	}
	rest := raw[i+3:]
	authority := rest
	if j := strings.IndexAny(rest, "/?"); j >= 0 {
		authority = rest[:j]
	}
	at := strings.LastIndex(authority, "@")
	if at < 0 {
		return raw
	}
	user, _, hasPassword := strings.Cut(authority[:at], ":")
	if !hasPassword {
		return raw
	}
	return raw[:i+3] + user + ":xxxxx" + rest[at:]
}

// String returns the URL with its password replaced by "xxxxx".
func (c Cache) String() string { return c.redacted }

// ClosableCache is a cache Open returned; Close releases its client.
type ClosableCache interface {
	executor.Cache
	Close() error
}

// memoryCache is a MemoryCache with a Close that does nothing.
type memoryCache struct{ *executor.MemoryCache }

func (memoryCache) Close() error { return nil }

// Open returns the cache c names, over a new client (without any request).
// Errors are *Error values.
func (c Cache) Open() (ClosableCache, error) {
	if c.Scheme == SchemeMemory {
		return memoryCache{executor.NewMemoryCache()}, nil
	}
	if c.Redis.Client == nil && c.Redis.Cluster == nil {
		return nil, &Error{Store: StoreCache, Op: "open", URL: c.String(), Err: fmt.Errorf("unknown scheme %q", c.Scheme)}
	}
	cache, err := rediscache.Open(c.Redis)
	if err != nil {
		return nil, &Error{Store: StoreCache, Op: "open", URL: c.String(), Err: err}
	}
	return cache, nil
}

// OpenCache is ParseCache followed by Open.
func OpenCache(raw string) (ClosableCache, error) {
	c, err := ParseCache(raw)
	if err != nil {
		return nil, err
	}
	return c.Open()
}
