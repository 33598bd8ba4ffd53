package s3store

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// ErrInvalidURL is matched by every error ParseURL returns (a *URLError).
var ErrInvalidURL = errors.New("s3store: invalid URL")

// URLError reports why ParseURL refused a URL: the part at fault ("url",
// "scheme", "bucket", "path" or a query parameter's name) and the reason. It
// never repeats credentials the URL may have carried.
type URLError struct {
	Part   string
	Reason string
}

func (e *URLError) Error() string {
	return bound(fmt.Sprintf("s3store: invalid URL: %s: %s", e.Part, e.Reason))
}

func (e *URLError) Unwrap() error { return ErrInvalidURL }

func urlErr(part, format string, args ...any) error {
	return &URLError{Part: part, Reason: fmt.Sprintf(format, args...)}
}

// maxURLBytes bounds what ParseURL reads.
const maxURLBytes = 4096

// URL query parameters.
const (
	paramEndpoint    = "endpoint"
	paramRegion      = "region"
	paramPathStyle   = "path_style"
	paramMaxAttempts = "max_attempts"
	paramMaxBackoff  = "max_backoff"
	paramProfile     = "profile"
	paramContentMD5  = "content_md5"
)

// ParseURL parses the URL form of a Config:
//
//	s3://BUCKET[/ROOT/][?endpoint=URL&region=R&path_style=true&max_attempts=N&max_backoff=D&profile=P&content_md5=true]
//
// ROOT (percent-encoded as a URL path) becomes Options.Root with a trailing
// "/"; max_backoff is a Go duration ("2s"). Every parameter is optional and
// may appear once; an unknown one, user information (credentials belong to
// the SDK's chain, never in a URL) or a fragment is refused. Errors are
// *URLError values matching ErrInvalidURL.
func ParseURL(raw string) (Config, error) {
	var cfg Config
	if len(raw) > maxURLBytes {
		return cfg, urlErr("url", "longer than %d bytes", maxURLBytes)
	}
	if strings.ContainsRune(raw, '#') {
		return cfg, urlErr("url", "has a fragment")
	}
	u, err := url.Parse(raw)
	if err != nil {
		// url.Error repeats the URL, credentials included: give the reason only.
		if ue, ok := errors.AsType[*url.Error](err); ok {
			err = ue.Err
		}
		return cfg, urlErr("url", "%v", err)
	}
	if u.Scheme != "s3" {
		return cfg, urlErr("scheme", "%q is not s3", clip(u.Scheme, 64))
	}
	if u.User != nil {
		return cfg, urlErr("url", "has user information: credentials come from the SDK's default chain, never from the URL")
	}
	if u.Opaque != "" {
		return cfg, urlErr("url", "is not of the form s3://bucket/root/")
	}
	if err := checkBucket(u.Host); err != nil {
		return cfg, urlErr("bucket", "%v", err)
	}
	cfg.Bucket = u.Host
	if root := strings.TrimPrefix(u.Path, "/"); root != "" {
		if !strings.HasSuffix(root, "/") {
			root += "/"
		}
		if err := checkRoot(root); err != nil {
			return cfg, urlErr("path", "%v", err)
		}
		cfg.Root = root
	}
	query, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return cfg, urlErr("query", "%v", err)
	}
	for name, values := range query {
		if len(values) != 1 {
			return cfg, urlErr(clip(name, 64), "given %d times", len(values))
		}
		value := values[0]
		if value == "" {
			return cfg, urlErr(clip(name, 64), "is empty")
		}
		if err := cfg.setParam(name, value); err != nil {
			return Config{}, err
		}
	}
	return cfg, nil
}

// setParam sets the Config field of one URL query parameter.
func (c *Config) setParam(name, value string) error {
	switch name {
	case paramEndpoint:
		if err := checkEndpoint(value); err != nil {
			return urlErr(name, "%v", err)
		}
		c.Endpoint = value
	case paramRegion:
		if err := checkRegion(value); err != nil {
			return urlErr(name, "%v", err)
		}
		c.Region = value
	case paramPathStyle, paramContentMD5:
		b, err := strconv.ParseBool(value)
		if err != nil {
			return urlErr(name, "%q is not true or false", clip(value, 64))
		}
		if name == paramPathStyle {
			c.PathStyle = b
		} else {
			c.ContentMD5 = b
		}
	case paramMaxAttempts:
		n, err := strconv.Atoi(value)
		if err != nil || n < 1 || n > MaxAttemptsLimit {
			return urlErr(name, "%q is not a number from 1 to %d", clip(value, 64), MaxAttemptsLimit)
		}
		c.MaxAttempts = n
	case paramMaxBackoff:
		d, err := time.ParseDuration(value)
		if err != nil || d <= 0 || d > MaxBackoffLimit {
			return urlErr(name, "%q is not a duration above 0 and at most %s", clip(value, 64), MaxBackoffLimit)
		}
		c.MaxBackoff = d
	case paramProfile:
		if err := checkProfile(value); err != nil {
			return urlErr(name, "%v", err)
		}
		c.Profile = value
	default:
		return urlErr(clip(name, 64), "is not a known parameter (endpoint, region, path_style, max_attempts, max_backoff, profile, content_md5)")
	}
	return nil
}

// URL returns the URL form of c that ParseURL reads back to the same Config,
// without Credentials, HTTPClient and the Options that have no URL form
// (ListPageSize, DeleteBatchSize).
func (c Config) URL() string {
	q := url.Values{}
	if c.Endpoint != "" {
		q.Set(paramEndpoint, c.Endpoint)
	}
	if c.Region != "" {
		q.Set(paramRegion, c.Region)
	}
	if c.PathStyle {
		q.Set(paramPathStyle, "true")
	}
	if c.MaxAttempts != 0 {
		q.Set(paramMaxAttempts, strconv.Itoa(c.MaxAttempts))
	}
	if c.MaxBackoff != 0 {
		q.Set(paramMaxBackoff, c.MaxBackoff.String())
	}
	if c.Profile != "" {
		q.Set(paramProfile, c.Profile)
	}
	if c.ContentMD5 {
		q.Set(paramContentMD5, "true")
	}
	u := url.URL{Scheme: "s3", Host: c.Bucket, RawQuery: q.Encode()}
	if c.Root != "" {
		u.Path = "/" + c.Root
	}
	return u.String()
}

// checkEndpoint accepts an http or https URL with a host and no user
// information, query or fragment.
func checkEndpoint(s string) error {
	if len(s) > 1024 || strings.IndexFunc(s, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0 {
		return fmt.Errorf("endpoint %q is too long or has a space or control character", clip(s, 80))
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Opaque != "" {
		return fmt.Errorf("endpoint %q is not an http:// or https:// URL with a host", clip(s, 80))
	}
	if u.User != nil || u.RawQuery != "" || u.ForceQuery || strings.Contains(s, "#") {
		return errors.New("endpoint has user information, a query or a fragment")
	}
	return nil
}

// checkRegion accepts a region name: lowercase letters, digits and '-'.
func checkRegion(s string) error {
	if len(s) > 64 || strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-')
	}) >= 0 {
		return fmt.Errorf("region %q is not lowercase letters, digits and '-' (at most 64)", clip(s, 80))
	}
	return nil
}

// checkProfile accepts a profile name: letters, digits and ._-+@/:.
func checkProfile(s string) error {
	if len(s) > 128 || strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._-+@/:", r))
	}) >= 0 {
		return fmt.Errorf("profile %q is not letters, digits and ._-+@/: (at most 128)", clip(s, 80))
	}
	return nil
}
