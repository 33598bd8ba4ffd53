// Package errtexttest is test support for what the adapters promise of the
// texts they make: an error is one bounded line, and no text made from a URL
// (an error, a String) shows its password. Not for use outside tests.
package errtexttest

import (
	"net/url"
	"strings"
	"testing"

	"github.com/tombstoneworks/communitydeletion/internal/errtext"
)

// RequireLine fails t unless err's text is one line of valid UTF-8 of at most
// errtext.Max bytes.
func RequireLine(t testing.TB, err error) {
	t.Helper()
	if err == nil {
		t.Fatal("no error")
	}
	if text := err.Error(); !errtext.IsLine(text, errtext.Max) {
		t.Fatalf("error text is not one line of at most %d bytes: %q", errtext.Max, text)
	}
}

// MinLength is the shortest password ShowsPassword checks: a shorter one is too
// easily found by chance in any text.
const MinLength = 8

// Password returns the password of raw's userinfo as written, escapes and
// all, or "" when raw has none.
func Password(raw string) string {
	pw, _ := password(raw)
	return pw
}

// password returns the password of raw's userinfo and where it starts in raw.
func password(raw string) (string, int) {
	i := strings.Index(raw, "://")
	if i < 0 {
		return "", 0
	}
	start := i + len("://")
	authority := raw[start:]
	if j := strings.IndexAny(authority, "/?"); j >= 0 {
		authority = authority[:j]
	}
	at := strings.LastIndex(authority, "@")
	if at < 0 {
		return "", 0
	}
	colon := strings.Index(authority[:at], ":")
	if colon < 0 {
		return "", 0
	}
	return authority[colon+1 : at], start + colon + 1
}

// ShowsPassword reports whether render(raw) shows raw's password, as written or
// unescaped, and returns that form. It is a differential test: the text counts
// as showing the password only if it holds it more often than render gives
// for the same URL with the password swapped for a stand-in of the same
// length, so a password that the rest of the URL also spells (a quoted
// pattern, an escape sequence) is not taken for a leak.
func ShowsPassword(raw string, render func(raw string) string) (bool, string) {
	pw, at := password(raw)
	if len(pw) < MinLength {
		return false, ""
	}
	forms := []string{pw}
	if unescaped, err := url.PathUnescape(pw); err == nil && unescaped != pw && len(unescaped) >= MinLength {
		forms = append(forms, unescaped)
	}
	standIn, ok := standInFor(strings.Join(forms, ""), len(pw))
	if !ok {
		return false, ""
	}
	text, baseline := render(raw), render(raw[:at]+standIn+raw[at+len(pw):])
	for _, form := range forms {
		if strings.Count(text, form) > strings.Count(baseline, form) {
			return true, form
		}
	}
	return false, ""
}

// standInFor returns a password of n bytes made of one letter or digit that
// avoid does not hold, so that no occurrence of a form of the password can
// overlap it.
func standInFor(avoid string, n int) (string, bool) {
	const letters = "qzxjkvwyQZXJKVWY0123456789abcdefghilmnoprstuABCDEFGHILMNOPRSTU"
	for _, c := range letters {
		if !strings.ContainsRune(avoid, c) {
			return strings.Repeat(string(c), n), true
		}
	}
	return "", false
}
