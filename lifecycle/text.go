package lifecycle

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

const (
	// MaxErrorBytes is the most bytes of error text the package stores for a
	// request (last_error, blocked_reason); longer text is truncated.
	MaxErrorBytes = 4096

	// MaxOperatorBytes is the longest operator or executor identity, in bytes
	// after trimming, that the package accepts. The database enforces the
	// same bound.
	MaxOperatorBytes = 512
)

// boundText returns s as text a PostgreSQL text column accepts and no longer
// than limit bytes. Each run of invalid UTF-8 and each NUL byte becomes U+FFFD;
// the result is then cut at the last rune boundary at or before limit. Valid
// input without NUL bytes therefore yields its longest fitting prefix, and
// valid input that already fits is returned unchanged.
func boundText(s string, limit int) string {
	if limit <= 0 {
		return ""
	}
	if !utf8.ValidString(s) || strings.IndexByte(s, 0) >= 0 {
		s = strings.ToValidUTF8(s, "\uFFFD")
		s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	}
	if len(s) <= limit {
		return s
	}
	end := limit
	for end > 0 && !utf8.RuneStart(s[end]) {
		end--
	}
	return s[:end]
}

// validateOperator trims surrounding white space from an operator or executor
// identity and checks it is a storable name: non-empty, valid UTF-8 without
// NUL bytes, and at most MaxOperatorBytes long. what names the field in the
// error, for example "requested_by".
func validateOperator(name, what string) (string, error) {
	trimmed := strings.TrimFunc(name, unicode.IsSpace)
	switch {
	case trimmed == "":
		return "", invalidf("%s must not be empty", what)
	case !utf8.ValidString(trimmed):
		return "", invalidf("%s is not valid UTF-8", what)
	case strings.IndexByte(trimmed, 0) >= 0:
		return "", invalidf("%s contains a NUL byte", what)
	case len(trimmed) > MaxOperatorBytes:
		return "", invalidf("%s is %d bytes long; at most %d are allowed", what, len(trimmed), MaxOperatorBytes)
	}
	return trimmed, nil
}
