package rediscache_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tombstoneworks/communitydeletion/lifecycle"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/executor/rediscache"
	"github.com/tombstoneworks/communitydeletion/internal/errtext/errtexttest"
)

func TestParsePattern(t *testing.T) {
	t.Parallel()
	id := uuid.MustParse("0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d")
	good := map[string]struct {
		match, key string
		tagged     bool
	}{
		"app:{community}:*":             {"app:0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d:*", "app:0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d:s", false},
		"app:{{community}}:*":           {"app:{0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d}:*", "app:{0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d}:s", true},
		"quota:{community}":             {"quota:0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d", "quota:0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d", false},
		`we?rd[x]\:{community}*`:        {`we\?rd\[x\]\\:0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d*`, `we?rd[x]\:0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d` + "s", false},
		"a:{community}:b:{{community}}": {"a:0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d:b:{0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d}", "a:0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d:b:{0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d}", true},
	}
	for template, want := range good {
		p, err := rediscache.ParsePattern(template)
		require.NoError(t, err, template)
		require.Equal(t, template, p.String())
		require.Equal(t, want.match, p.Match(lifecycle.UUIDKey(id)), template)
		require.Equal(t, want.tagged, p.HashTagged(), template)
		suffix := ""
		if p.Wildcard() {
			suffix = "s"
		}
		key, err := p.Key(lifecycle.UUIDKey(id), suffix)
		require.NoError(t, err)
		require.Equal(t, want.key, key)
		require.True(t, globMatch(p.Match(lifecycle.UUIDKey(id)), key))
	}
	bad := []string{
		"", "*", "{community}:*", "app:*", "app:{community}:*:x", "app:*{community}", "app:{community}}", "app:{{community}",
		"app:{id}:*", "app:{community", "app}:{community}", "app:\n{community}", "app:\xff{community}",
		"a:" + strings.Repeat("x", 600) + "{community}",
	}
	for _, template := range bad {
		_, err := rediscache.ParsePattern(template)
		require.ErrorIs(t, err, rediscache.ErrInvalidPattern, "%q", template)
		errtexttest.RequireLine(t, err)
	}
	p, err := rediscache.ParsePattern("quota:{community}")
	require.NoError(t, err)
	_, err = p.Key(lifecycle.UUIDKey(id), "suffix")
	require.ErrorIs(t, err, rediscache.ErrInvalidPattern, "a single-key pattern takes no suffix")
}

// FuzzPattern: for any template ParsePattern accepts, a key generated for
// community A matches A's SCAN pattern and never B's, and changing one byte
// of the key outside its suffix stops it matching A's.
func FuzzPattern(f *testing.F) {
	for _, seed := range []string{
		"app:{community}:*", "app:{{community}}:*", "quota:{community}", `we?rd[x]\:{community}*`,
		"a:{community}:b:{{community}}", "x{community}", `\[{community}]*`, "a:{community}{community}*",
	} {
		f.Add(seed, "suffix", []byte("0123456789abcdef"), []byte("fedcba9876543210"), uint(3))
	}
	f.Fuzz(func(t *testing.T, template, suffix string, a, b []byte, flip uint) {
		p, err := rediscache.ParsePattern(template)
		if err != nil {
			if !errors.Is(err, rediscache.ErrInvalidPattern) {
				t.Fatalf("error %v does not match ErrInvalidPattern", err)
			}
			return
		}
		idA, idB := idFrom(a), idFrom(b)
		if idA == idB {
			idB[0] ^= 1
		}
		if !p.Wildcard() {
			suffix = ""
		}
		key, err := p.Key(lifecycle.UUIDKey(idA), suffix)
		if err != nil {
			t.Fatal(err)
		}
		if !globMatch(p.Match(lifecycle.UUIDKey(idA)), key) {
			t.Fatalf("key %q does not match %q", key, p.Match(lifecycle.UUIDKey(idA)))
		}
		if globMatch(p.Match(lifecycle.UUIDKey(idB)), key) {
			t.Fatalf("key %q of %s matches %q of %s", key, idA, p.Match(lifecycle.UUIDKey(idB)), idB)
		}
		// Every byte before the suffix is fixed by the pattern.
		body := len(key) - len(suffix)
		if body > 0 {
			i := int(flip % uint(body))
			changed := []byte(key)
			changed[i] ^= 0x20
			if globMatch(p.Match(lifecycle.UUIDKey(idA)), string(changed)) {
				t.Fatalf("key %q with byte %d changed (%q) still matches %q", key, i, changed, p.Match(lifecycle.UUIDKey(idA)))
			}
		}
	})
}

func idFrom(b []byte) uuid.UUID {
	var id uuid.UUID
	copy(id[:], b)
	return id
}

// globMatch is Redis's stringmatchlen (util.c) for the glob forms a
// Pattern's Match produces: literal bytes, "\" escapes, "?" and "*". A "["
// is never produced unescaped; meeting one fails the test's assumption.
func globMatch(pattern, s string) bool {
	for len(pattern) > 0 && len(s) > 0 {
		switch pattern[0] {
		case '*':
			for len(pattern) > 1 && pattern[1] == '*' {
				pattern = pattern[1:]
			}
			if len(pattern) == 1 {
				return true
			}
			for len(s) > 0 {
				if globMatch(pattern[1:], s) {
					return true
				}
				s = s[1:]
			}
			return false
		case '?':
			s = s[1:]
		case '[':
			panic("globMatch: unescaped [ in " + pattern)
		case '\\':
			if len(pattern) >= 2 {
				pattern = pattern[1:]
			}
			fallthrough
		default:
			if pattern[0] != s[0] {
				return false
			}
			s = s[1:]
		}
		pattern = pattern[1:]
		if len(s) == 0 {
			for len(pattern) > 0 && pattern[0] == '*' {
				pattern = pattern[1:]
			}
			break
		}
	}
	return len(pattern) == 0 && len(s) == 0
}

func TestGlobMatchAgreesWithRedis(t *testing.T) {
	t.Parallel()
	// Spot checks of the port against the behaviour the Redis tests rely on.
	require.True(t, globMatch(`a\?b*`, "a?bcd"))
	require.False(t, globMatch(`a\?b*`, "aXbcd"))
	require.True(t, globMatch(`a?b`, "aXb"))
	require.True(t, globMatch(`a\\b`, `a\b`))
	require.True(t, globMatch(`a*`, "a"))
	require.False(t, globMatch(`ab`, "a"))
}

func TestParseURL(t *testing.T) {
	t.Parallel()
	cfg, err := rediscache.ParseURL("redis://127.0.0.1:6390/2?pattern=app:%7Bcommunity%7D:*&pattern=s:{{community}}*&scan_count=50&unlink_batch=20&dial_timeout=3s")
	require.NoError(t, err)
	require.Equal(t, []string{"app:{community}:*", "s:{{community}}*"}, cfg.Patterns)
	require.Equal(t, int64(50), cfg.ScanCount)
	require.Equal(t, 20, cfg.UnlinkBatch)
	require.Nil(t, cfg.Cluster)
	require.Equal(t, "127.0.0.1:6390", cfg.Client.Addr)
	require.Equal(t, 2, cfg.Client.DB)
	require.Equal(t, 3*time.Second, cfg.Client.DialTimeout)

	cfg, err = rediscache.ParseURL("rediss://svc:pw@cache.internal:6380?pattern=a:{community}")
	require.NoError(t, err)
	require.NotNil(t, cfg.Client.TLSConfig)
	require.Equal(t, "svc", cfg.Client.Username)
	require.Equal(t, "pw", cfg.Client.Password)
	require.Equal(t, int64(rediscache.DefaultScanCount), cfg.ScanCount)

	cfg, err = rediscache.ParseURL("redis+cluster://u:p@10.0.0.1:7000,10.0.0.2:7000,10.0.0.3:7001?pattern=a:{{community}}:*&max_redirects=5")
	require.NoError(t, err)
	require.Nil(t, cfg.Client)
	require.Equal(t, []string{"10.0.0.1:7000", "10.0.0.2:7000", "10.0.0.3:7001"}, cfg.Cluster.Addrs)
	require.Equal(t, 5, cfg.Cluster.MaxRedirects)
	require.Equal(t, "p", cfg.Cluster.Password)
	cfg, err = rediscache.ParseURL("rediss+cluster://h1:1,h2:2?pattern=a:{community}")
	require.NoError(t, err)
	require.NotNil(t, cfg.Cluster.TLSConfig)

	bad := map[string]string{ // URL → the part at fault
		"http://h?pattern=a:{community}":                             "scheme",
		"h:6379?pattern=a:{community}":                               "scheme",
		"redis://h:6379":                                             "query",
		"redis://h:6379?pattern=a:*":                                 "pattern",
		"redis://h:6379?pattern=a:{community}&pattern=a:{community}": "query",
		"redis://h:6379?pattern=a:{community}&scan_count=0":          "scan_count",
		"redis://h:6379?pattern=a:{community}&unlink_batch=x":        "unlink_batch",
		"redis://h:6379?pattern=a:{community}&colour=red":            "url",
		"redis://h1:1,h2:2?pattern=a:{community}":                    "host",
		"redis+cluster://h1:1,,h3:3?pattern=a:{community}":           "host",
		"redis+cluster://h1:1/3?pattern=a:{community}":               "path",
		"redis://:Sup3rSecretPw@h:notaport?pattern=a:{community}":    "url",
		"redis://u:Sup3rSecretPw@h:1/x?pattern=a:{community}":        "url",
		"redis://h:1?pattern=a:{community}#x":                        "url",
		"redis://h:1?pattern=%zz":                                    "query",
	}
	for raw, part := range bad {
		_, err := rediscache.ParseURL(raw)
		require.ErrorIs(t, err, rediscache.ErrInvalidURL, raw)
		var ue *rediscache.URLError
		require.ErrorAs(t, err, &ue, raw)
		require.Equal(t, part, ue.Part, "%s: %v", raw, err)
		require.NotContains(t, err.Error(), "Sup3rSecretPw")
		errtexttest.RequireLine(t, err)
	}
}

// FuzzParseURL: ParseURL never panics; what it refuses it refuses with a
// *URLError on one bounded line that never shows the password; what it
// accepts has valid patterns and exactly one client configuration.
func FuzzParseURL(f *testing.F) {
	for _, seed := range []string{
		"redis://127.0.0.1:6379/0?pattern=app:{community}:*&pattern=s:{{community}}",
		"rediss://u:secretpw@h:6380?pattern=a:{community}&dial_timeout=3s",
		"redis+cluster://h1:1,h2:2?pattern=a:{{community}}:*&scan_count=10",
		"redis://:secretpw@h:x?pattern=a:{community}", "redis://h?pattern=a:*", "unix:///tmp/s",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		cfg, err := rediscache.ParseURL(raw)
		if err != nil {
			var ue *rediscache.URLError
			if !errors.As(err, &ue) || !errors.Is(err, rediscache.ErrInvalidURL) {
				t.Fatalf("error %v is not a *URLError", err)
			}
			errtexttest.RequireLine(t, err)
			if shows, form := errtexttest.ShowsPassword(raw, refusal); shows {
				t.Fatalf("%q: error %q shows the password %q", raw, err.Error(), form)
			}
			return
		}
		if (cfg.Client == nil) == (cfg.Cluster == nil) {
			t.Fatalf("%q: Client %v, Cluster %v", raw, cfg.Client, cfg.Cluster)
		}
		if len(cfg.Patterns) == 0 {
			t.Fatalf("%q: no patterns", raw)
		}
		for _, p := range cfg.Patterns {
			if _, err := rediscache.ParsePattern(p); err != nil {
				t.Fatalf("%q: accepted pattern %q: %v", raw, p, err)
			}
		}
	})
}

// refusal is ParseURL's refusal of raw as text, "" if it accepts raw.
func refusal(raw string) string {
	if _, err := rediscache.ParseURL(raw); err != nil {
		return err.Error()
	}
	return ""
}
