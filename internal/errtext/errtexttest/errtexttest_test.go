package errtexttest_test

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/tombstoneworks/communitydeletion/internal/errtext/errtexttest"
)

func TestPassword(t *testing.T) {
	for raw, want := range map[string]string{
		"redis://:supersecret@h:6379?pattern=a":   "supersecret",
		"redis://user:p%40ss:word@h/0":            "p%40ss:word",
		"redis://user@h":                          "",
		"redis://h?pattern=a:b@c":                 "",
		"memory:":                                 "",
		"s3://AKIA:se@cret@bucket/prefix?x=y:z@w": "se@cret",
	} {
		if got := errtexttest.Password(raw); got != want {
			t.Errorf("Password(%q) = %q, want %q", raw, got, want)
		}
	}
}

// leak is what a parser under test adds to its refusal.
type leak int

const (
	leakNothing  leak = iota
	leakURL           // the URL as written
	leakPassword      // the password, unescaped
)

// parse stands for a parser under test: it refuses a pattern that does not
// start with "a", quoting the pattern and whatever leak says.
func parse(raw string, leak leak) error {
	u, err := url.Parse(raw)
	if err != nil {
		return errors.New("invalid URL")
	}
	p := u.Query().Get("pattern")
	if strings.HasPrefix(p, "a") {
		return nil
	}
	switch leak {
	case leakURL:
		return fmt.Errorf("invalid key pattern %q in %q", p, raw)
	case leakPassword:
		pw, _ := u.User.Password()
		return fmt.Errorf("invalid key pattern %q for %s", p, pw)
	}
	return fmt.Errorf("invalid key pattern %q", p)
}

func TestShowsPassword(t *testing.T) {
	text := func(leak leak) func(string) string {
		return func(raw string) string {
			if err := parse(raw, leak); err != nil {
				return err.Error()
			}
			return ""
		}
	}
	for _, tc := range []struct {
		name, raw string
		leak      leak
		want      string
	}{
		{name: "the URL", raw: "redis://:supersecret@h?pattern=b", leak: leakURL, want: "supersecret"},
		{name: "the URL, escaped", raw: "redis://:super%2Fsecret@h?pattern=b", leak: leakURL, want: "super%2Fsecret"},
		{name: "the password, unescaped", raw: "redis://:super%2Fsecret@h?pattern=b", leak: leakPassword, want: "super/secret"},
		{name: "no leak", raw: "redis://:supersecret@h?pattern=b"},
		{name: "accepted", raw: "redis://:supersecret@h?pattern=a", leak: leakURL},
		{name: "too short to tell", raw: "redis://:secret@h?pattern=b", leak: leakURL},
		{name: "the pattern spells it", raw: "redis://:supersecret@h?pattern=bsupersecret"},
		{name: "the pattern's escape spells it", raw: "redis://:00000000@?pattern=\x800000000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			shows, form := errtexttest.ShowsPassword(tc.raw, text(tc.leak))
			if shows != (tc.want != "") || form != tc.want {
				t.Fatalf("ShowsPassword(%q) = %v, %q; want %q", tc.raw, shows, form, tc.want)
			}
		})
	}
}
