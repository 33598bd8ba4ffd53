package rediscache

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// Placeholders of a key pattern.
const (
	// Placeholder stands for the community's id.
	Placeholder = "{community}"
	// HashTagPlaceholder stands for the community's id inside a Redis
	// Cluster hash tag: "{" + id + "}", so that all the keys of one
	// community that a pattern covers live in one slot.
	HashTagPlaceholder = "{{community}}"
)

// maxPatternBytes bounds a key pattern.
const maxPatternBytes = 512

// ErrInvalidPattern is matched by every error ParsePattern returns.
var ErrInvalidPattern = errors.New("rediscache: invalid key pattern")

// Pattern is one key family of a community, parsed from a template such as
//
//	app:{community}:*        keys app:<id>:…
//	app:{{community}}:*      keys app:{<id>}:…, hashed on the id in a cluster
//	quota:{community}        the single key quota:<id>
//
// A template starts with a literal part (the family's name), names the
// community with {community} or {{community}} at least once, and may end
// with "*", which stands for any suffix. Every other character is literal:
// glob characters (?, [, ], \) are escaped when matching, and "{", "}" and a
// "*" anywhere but at the end are refused, so a hash tag is never formed by
// accident.
type Pattern struct {
	raw      string
	parts    []part
	wildcard bool // ends in "*"
}

// part is a literal or the community's id (hash-tagged or not).
type part struct {
	literal string
	id      bool
	hashTag bool
}

// ParsePattern parses a key-pattern template (see Pattern).
func ParsePattern(template string) (Pattern, error) {
	p := Pattern{raw: template}
	fail := func(format string, args ...any) (Pattern, error) {
		return Pattern{}, fmt.Errorf("%w %q: %s", ErrInvalidPattern, clip(template, 80), fmt.Sprintf(format, args...))
	}
	switch {
	case template == "":
		return fail("empty")
	case len(template) > maxPatternBytes:
		return fail("longer than %d bytes", maxPatternBytes)
	case !utf8.ValidString(template):
		return fail("not valid UTF-8")
	case strings.IndexFunc(template, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0:
		return fail("has a control character")
	}
	rest := template
	if strings.HasSuffix(rest, "*") {
		p.wildcard = true
		rest = strings.TrimSuffix(rest, "*")
	}
	var literal strings.Builder
	flush := func() {
		if literal.Len() > 0 {
			p.parts = append(p.parts, part{literal: literal.String()})
			literal.Reset()
		}
	}
	ids := 0
	for rest != "" {
		switch {
		case strings.HasPrefix(rest, HashTagPlaceholder):
			flush()
			p.parts = append(p.parts, part{id: true, hashTag: true})
			rest = rest[len(HashTagPlaceholder):]
			ids++
		case strings.HasPrefix(rest, Placeholder):
			flush()
			p.parts = append(p.parts, part{id: true})
			rest = rest[len(Placeholder):]
			ids++
		case rest[0] == '{' || rest[0] == '}':
			return fail("has a %q that is not part of %s or %s", rest[0], Placeholder, HashTagPlaceholder)
		case rest[0] == '*':
			return fail(`has a "*" before its end`)
		default:
			literal.WriteByte(rest[0])
			rest = rest[1:]
		}
	}
	flush()
	if ids == 0 {
		return fail("does not name the community with %s or %s", Placeholder, HashTagPlaceholder)
	}
	if p.parts[0].id {
		return fail("does not start with a literal family name")
	}
	return p, nil
}

// String returns the template the pattern was parsed from.
func (p Pattern) String() string { return p.raw }

// HashTagged reports whether the pattern puts the id in a hash tag.
func (p Pattern) HashTagged() bool {
	for _, pt := range p.parts {
		if pt.hashTag {
			return true
		}
	}
	return false
}

// Wildcard reports whether the pattern ends in "*" (a key family) rather
// than naming one key.
func (p Pattern) Wildcard() bool { return p.wildcard }

// Key returns the key of the tenant with suffix under the pattern: the
// expansion followed by suffix. suffix must be empty for a pattern without
// a wildcard.
func (p Pattern) Key(tenant lifecycle.TenantKey, suffix string) (string, error) {
	if suffix != "" && !p.wildcard {
		return "", fmt.Errorf("%w %q: a suffix for a pattern without \"*\"", ErrInvalidPattern, p.raw)
	}
	return p.expand(tenant, false) + suffix, nil
}

// Match returns the SCAN MATCH glob for the tenant's keys: the literal parts
// and its key with glob characters escaped, then "*" if the pattern ends in
// one.
func (p Pattern) Match(tenant lifecycle.TenantKey) string {
	m := p.expand(tenant, true)
	if p.wildcard {
		m += "*"
	}
	return m
}

func (p Pattern) expand(tenant lifecycle.TenantKey, escape bool) string {
	id := tenant.String()
	var b strings.Builder
	for _, pt := range p.parts {
		s := pt.literal
		switch {
		case pt.hashTag:
			s = "{" + id + "}"
		case pt.id:
			s = id
		}
		if escape {
			s = escapeGlob(s)
		}
		b.WriteString(s)
	}
	return b.String()
}

// escapeGlob escapes the characters Redis's glob matcher treats specially.
func escapeGlob(s string) string {
	if !strings.ContainsAny(s, `*?[]\`) {
		return s
	}
	var b strings.Builder
	for i := range len(s) {
		switch s[i] {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
