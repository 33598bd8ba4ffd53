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
