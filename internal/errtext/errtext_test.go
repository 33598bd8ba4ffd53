package errtext_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tombstoneworks/communitydeletion/internal/errtext"
)

func TestLine(t *testing.T) {
	t.Parallel()
	if got := errtext.Line("short\r\ntext", 64); got != "short  text" {
		t.Fatalf("got %q", got)
	}
	long := strings.Repeat("é", 1000) // 2 bytes a rune
	got := errtext.Line(long, 101)
	if len(got) > 101 || !utf8.ValidString(got) || !strings.HasSuffix(got, "bytes cut)") {
		t.Fatalf("got %d bytes: %q", len(got), got)
	}
	if errtext.Clip("exactly", 7) != "exactly" {
		t.Fatal("a text that fits is cut")
	}
}

func TestIsLine(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "one line", strings.Repeat("é", 32)} {
		if !errtext.IsLine(s, 64) {
			t.Errorf("IsLine(%q, 64) = false", s)
		}
	}
	for _, s := range []string{"two\nlines", "a\rb", strings.Repeat("x", 65), "bad \xff byte"} {
		if errtext.IsLine(s, 64) {
			t.Errorf("IsLine(%q, 64) = true", s)
		}
	}
	// Whatever Line is given, what it returns keeps the promise.
	for _, s := range []string{"a\r\nb", strings.Repeat("é\n", 500), "bad \xff\xfe bytes " + strings.Repeat("z", 200)} {
		if got := errtext.Line(s, 101); !errtext.IsLine(got, 101) {
			t.Errorf("Line(%q, 101) = %q, not one bounded line", s, got)
		}
	}
}
