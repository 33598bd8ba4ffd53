package storeurl_test

// Fuzz targets for the store URLs, deletionctl's outside input. Seeds are
// committed under testdata/fuzz/<target>/; run one with e.g.
// go test ./executor/storeurl -run '^$' -fuzz '^FuzzParseObjects$'.

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tombstoneworks/communitydeletion/executor/storeurl"
	"github.com/tombstoneworks/communitydeletion/internal/errtext/errtexttest"
)

// checkParseError checks what every refusal promises: a *storeurl.Error
// matching ErrInvalidURL, one bounded line.
func checkParseError(t *testing.T, raw string, err error, store string) {
	t.Helper()
	var se *storeurl.Error
	if !errors.As(err, &se) || !errors.Is(err, storeurl.ErrInvalidURL) || se.Store != store || se.Op != "parse" {
		t.Fatalf("%q: error %v (%T) is not a parse *storeurl.Error of the %s URL", raw, err, err, store)
	}
	errtexttest.RequireLine(t, err)
}

// FuzzParseObjects parses arbitrary object-store URLs. ParseObjects never
// panics; a refusal is one bounded line; an accepted URL is an s3 or file
// one, a file one names an absolute, clean directory, and String() parses
// back to the same Objects.
func FuzzParseObjects(f *testing.F) {
	for _, seed := range []string{
		"s3://media/tenants/?endpoint=http://127.0.0.1:9000&region=us-east-1&path_style=true",
		"file:///srv/objects", "file://localhost/srv/a%20b/../c/", "file:relative", "file://host/x",
		"s3://AKIA:secret@media/", "", "memory:",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		o, err := storeurl.ParseObjects(raw)
		if err != nil {
			checkParseError(t, raw, err, storeurl.StoreObjects)
			return
		}
		switch o.Scheme {
		case storeurl.SchemeS3:
			if o.Dir != "" || o.S3.Bucket == "" {
				t.Fatalf("%q: s3 URL parsed to %+v", raw, o)
			}
		case storeurl.SchemeFile:
			if !filepath.IsAbs(o.Dir) || filepath.Clean(o.Dir) != o.Dir || o.S3.Bucket != "" {
				t.Fatalf("%q: file URL parsed to directory %q", raw, o.Dir)
			}
		default:
			t.Fatalf("%q: accepted scheme %q", raw, o.Scheme)
		}
		again, err := storeurl.ParseObjects(o.String())
		if err != nil {
			t.Fatalf("%q parsed, but its String %q does not: %v", raw, o.String(), err)
		}
		if again != o {
			t.Fatalf("%q parsed to %+v, its String %q to %+v", raw, o, o.String(), again)
		}
	})
}

// refusal is ParseCache's refusal of raw as text, "" if it accepts raw.
func refusal(raw string) string {
	if _, err := storeurl.ParseCache(raw); err != nil {
		return err.Error()
	}
	return ""
}

// cacheString is the String of the cache raw parses to, "" if it refuses raw.
func cacheString(raw string) string {
	c, err := storeurl.ParseCache(raw)
	if err != nil {
		return ""
	}
	return c.String()
}

// FuzzParseCache parses arbitrary cache URLs. ParseCache never panics; a
// refusal is one bounded line that never repeats the URL's password; an
// accepted URL is "memory:" or a Redis one with at least one pattern, and
// its String() shows no password and parses again to the same scheme and
// patterns.
func FuzzParseCache(f *testing.F) {
	for _, seed := range []string{
		"memory:", "memory://", "redis://127.0.0.1:6379/0?pattern=app:{community}:*",
		"rediss://ops:supersecret@h:6380?pattern=a:{community}&dial_timeout=3s",
		"redis+cluster://:pw@h1:7000,h2:7000?pattern=a:{{community}}:*",
		"redis://:supersecret@h:x?pattern=a:{community}", "redis://h?pattern=a:*", "unix:///tmp/s",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		c, err := storeurl.ParseCache(raw)
		if err != nil {
			checkParseError(t, raw, err, storeurl.StoreCache)
			if shows, form := errtexttest.ShowsPassword(raw, refusal); shows {
				t.Fatalf("%q: error shows the password %q: %q", raw, form, err.Error())
			}
			return
		}
		if c.Scheme == storeurl.SchemeMemory {
			if raw != "memory:" {
				t.Fatalf("%q accepted as the memory cache", raw)
			}
			return
		}
		if len(c.Redis.Patterns) == 0 || (c.Redis.Client == nil) == (c.Redis.Cluster == nil) {
			t.Fatalf("%q: parsed to %+v", raw, c)
		}
		if shows, form := errtexttest.ShowsPassword(raw, cacheString); shows {
			t.Fatalf("%q: String %q shows the password %q", raw, c.String(), form)
		}
		again, err := storeurl.ParseCache(c.String())
		if err != nil {
			t.Fatalf("%q parsed, but its String %q does not: %v", raw, c.String(), err)
		}
		if again.Scheme != c.Scheme || strings.Join(again.Redis.Patterns, "\x00") != strings.Join(c.Redis.Patterns, "\x00") {
			t.Fatalf("%q parsed to %s %q, its String %q to %s %q", raw, c.Scheme, c.Redis.Patterns, c.String(), again.Scheme, again.Redis.Patterns)
		}
	})
}
