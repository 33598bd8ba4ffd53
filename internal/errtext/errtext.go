// Package errtext keeps error texts short: one line, a bounded number of
// bytes, cut on a rune boundary with a note of how much was cut. The storage
// adapters use it so that a server's long message never floods a log line
// or the deletion's recorded error.
package errtext

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Max is the adapters' bound on an error text, in bytes.
const Max = 600

// IsLine reports whether s keeps the promise Line makes: one line of valid
// UTF-8 of at most limit bytes.
func IsLine(s string, limit int) bool {
	return !strings.ContainsAny(s, "\r\n") && len(s) <= limit && utf8.ValidString(s)
}

// Line returns s on one line (line breaks become spaces), cut to at most
// limit bytes (limit >= 64).
func Line(s string, limit int) string {
	s = strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' {
			return ' '
		}
		return r
	}, s)
	return Clip(s, limit)
}

// Clip cuts s to at most limit bytes (limit >= 64) on a rune boundary, ending
// with a note of how many bytes it cut.
func Clip(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	cut := limit - 32 // room for the note
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s…(%d bytes cut)", s[:cut], len(s)-cut)
}
