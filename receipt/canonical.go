package receipt

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
)

// TimeLayout is how a receipt writes a time: RFC 3339 in UTC with exactly
// nine fractional digits, so that every instant has one spelling.
const TimeLayout = "2006-01-02T15:04:05.000000000Z"

// ErrNotCanonical matches the error Parse and UnmarshalEnvelope return for
// bytes that are not exactly the canonical encoding: malformed JSON, an
// unknown, missing, repeated or misordered key, whitespace, another number
// or string spelling, or a time not in TimeLayout.
var ErrNotCanonical = errors.New("not a canonical receipt encoding")

// Normalize returns r with its lists in canonical order (tables, objects,
// cache and absence sorted by their key, stages in lifecycle order) and its
// times in UTC. It does not remove duplicates; Validate refuses them.
func Normalize(r Receipt) Receipt {
	r.Community.DeletedAt = r.Community.DeletedAt.UTC()
	r.Tables = slices.Clone(r.Tables)
	slices.SortStableFunc(r.Tables, func(a, b Table) int { return cmp.Compare(a.Table, b.Table) })
	r.Objects = slices.Clone(r.Objects)
	slices.SortStableFunc(r.Objects, func(a, b Objects) int { return cmp.Compare(a.Prefix, b.Prefix) })
	r.Cache = slices.Clone(r.Cache)
	slices.SortStableFunc(r.Cache, func(a, b Cache) int { return cmp.Compare(a.Pattern, b.Pattern) })
	r.Absence = slices.Clone(r.Absence)
	for i := range r.Absence {
		if r.Absence[i].Checked != nil {
			r.Absence[i].Checked = slices.Sorted(slices.Values(r.Absence[i].Checked))
		}
	}
	slices.SortStableFunc(r.Absence, func(a, b Absence) int { return cmp.Compare(a.Store, b.Store) })
	r.Excluded = slices.Clone(r.Excluded)
	for i := range r.Excluded {
		r.Excluded[i].ExcludedAt = r.Excluded[i].ExcludedAt.UTC()
		if !r.Excluded[i].Until.IsZero() {
			r.Excluded[i].Until = r.Excluded[i].Until.UTC()
		}
	}
	slices.SortStableFunc(r.Excluded, func(a, b Exclusion) int {
		return cmp.Or(cmp.Compare(a.Table, b.Table), a.ExcludedAt.Compare(b.ExcludedAt))
	})
	r.Stages = slices.Clone(r.Stages)
	for i := range r.Stages {
		r.Stages[i].At = r.Stages[i].At.UTC()
	}
	rank := func(s string) int {
		if i := slices.Index(stageOrder, s); i >= 0 {
			return i
		}
		return len(stageOrder)
	}
	slices.SortStableFunc(r.Stages, func(a, b StageTime) int { return cmp.Compare(rank(a.Stage), rank(b.Stage)) })
	return r
}

// Canonical returns the canonical encoding of Normalize(r), the bytes a
// signature covers and Hash digests, after Validate accepts it. The
// encoding is specified in docs/receipts.md: RFC 8785 (JCS) JSON of the
// receipt's fields, which for a receipt means sorted keys, no whitespace,
// integers only and minimal string escaping.
func Canonical(r Receipt) ([]byte, error) {
	r = Normalize(r)
	if err := Validate(r); err != nil {
		return nil, err
	}
	return encode(r)
}

// Hash returns the lowercase hex SHA-256 of Canonical(r): the value the
// next receipt's PreviousHash holds.
func Hash(r Receipt) (string, error) {
	b, err := Canonical(r)
	if err != nil {
		return "", err
	}
	return HashBytes(b), nil
}

// HashBytes returns the lowercase hex SHA-256 of a receipt's canonical
// bytes, as stored in an Envelope.
func HashBytes(body []byte) string {
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:])
}

// Parse decodes a receipt from its canonical bytes. It refuses (with
// ErrNotCanonical) any input that differs by one byte from the encoding of
// the receipt it decodes to, so a reformatted or reordered export cannot pass
// as the original; it then refuses (with ErrInconsistent) a receipt that
// Validate refuses.
func Parse(b []byte) (Receipt, error) {
	r, err := decodeCanonical(b)
	if err != nil {
		return Receipt{}, err
	}
	if err := Validate(r); err != nil {
		return Receipt{}, err
	}
	return r, nil
}

// decodeCanonical decodes b and checks it is exactly the encoding of what it
// decodes to, without Validate.
func decodeCanonical(b []byte) (Receipt, error) {
	r, err := decode(b)
	if err != nil {
		return Receipt{}, err
	}
	again, err := encode(r)
	if err != nil {
		return Receipt{}, fmt.Errorf("%w: %v", ErrNotCanonical, err)
	}
	if !bytes.Equal(again, b) {
		at := firstDifference(again, b)
		return Receipt{}, fmt.Errorf("%w: differs from the canonical encoding at byte %d", ErrNotCanonical, at)
	}
	return r, nil
}

func firstDifference(a, b []byte) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// tree is the receipt as JSON values: map[string]any, []any, string, int64
// and bool, in the shape docs/receipts.md specifies.
func tree(r Receipt) map[string]any {
	tables := make([]any, 0, len(r.Tables))
	for _, t := range r.Tables {
		tables = append(tables, map[string]any{"table": t.Table, "mode": t.Mode, "rows": t.Rows})
	}
	objects := make([]any, 0, len(r.Objects))
	for _, o := range r.Objects {
		objects = append(objects, map[string]any{"prefix": o.Prefix, "deleted": o.Deleted})
	}
	cache := make([]any, 0, len(r.Cache))
	for _, c := range r.Cache {
		cache = append(cache, map[string]any{"pattern": c.Pattern, "deleted": c.Deleted})
	}
	absence := make([]any, 0, len(r.Absence))
	for _, a := range r.Absence {
		if r.Format == FormatV1 {
			absence = append(absence, map[string]any{"store": a.Store, "verified": a.Verified(), "detail": a.Detail})
			continue
		}
		checked := make([]any, 0, len(a.Checked))
		for _, c := range a.Checked {
			checked = append(checked, c)
		}
		absence = append(absence, map[string]any{"store": a.Store, "kind": a.Kind, "checked": checked, "status": a.Status, "detail": a.Detail})
	}
	stages := make([]any, 0, len(r.Stages))
	for _, s := range r.Stages {
		stages = append(stages, map[string]any{"stage": s.Stage, "at": formatTime(s.At)})
	}
	operator := func(o Operator) map[string]any { return map[string]any{"name": o.Name, "login": o.Login} }
	body := map[string]any{
		"format":     r.Format,
		"sequence":   r.Sequence,
		"request_id": r.RequestID.String(),
		"community": map[string]any{
			"id":         r.Community.ID.String(),
			"host":       r.Community.Host,
			"deleted_at": formatTime(r.Community.DeletedAt),
		},
		"inventory_digest":     r.InventoryDigest,
		"manifest_digest":      r.ManifestDigest,
		"tables":               tables,
		"objects":              objects,
		"cache":                cache,
		"absence":              absence,
		"submitted_by":         operator(r.SubmittedBy),
		"approved_by":          operator(r.ApprovedBy),
		"operators_share_role": r.OperatorsShareRole,
		"stages":               stages,
		"schema_version":       r.SchemaVersion,
		"previous_hash":        r.PreviousHash,
		"signer":               r.Signer,
	}
	if r.Format != FormatV1 {
		excluded := make([]any, 0, len(r.Excluded))
		for _, e := range r.Excluded {
			until := ""
			if !e.Until.IsZero() {
				until = formatTime(e.Until)
			}
			excluded = append(excluded, map[string]any{"table": e.Table, "reason": e.Reason, "excluded_by": e.ExcludedBy,
				"excluded_at": formatTime(e.ExcludedAt), "until": until})
		}
		body["excluded_tables"] = excluded
	}
	return body
}

func formatTime(t time.Time) string { return t.UTC().Format(TimeLayout) }

func encode(r Receipt) ([]byte, error) {
	return appendValue(nil, tree(r))
}

// appendValue appends the RFC 8785 encoding of v, restricted to the values a
// receipt holds: objects (sorted by key; receipt keys are ASCII, so byte
// order is JCS's UTF-16 order), arrays, strings, integers in ±(2^53-1) and
// booleans.
func appendValue(b []byte, v any) ([]byte, error) {
	var err error
	switch v := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			if !isASCII(k) {
				return nil, fmt.Errorf("object key %q is not ASCII", k)
			}
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b = append(b, '{')
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, k)
			b = append(b, ':')
			if b, err = appendValue(b, v[k]); err != nil {
				return nil, err
			}
		}
		return append(b, '}'), nil
	case []any:
		b = append(b, '[')
		for i, e := range v {
			if i > 0 {
				b = append(b, ',')
			}
			if b, err = appendValue(b, e); err != nil {
				return nil, err
			}
		}
		return append(b, ']'), nil
	case string:
		if !utf8.ValidString(v) {
			return nil, errors.New("a string is not valid UTF-8")
		}
		return appendString(b, v), nil
	case int64:
		if v < -MaxCount || v > MaxCount {
			return nil, fmt.Errorf("integer %d is outside ±(2^53-1)", v)
		}
		return strconv.AppendInt(b, v, 10), nil
	case json.Number:
		n, err := strconv.ParseInt(string(v), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("number %s is not an integer", v)
		}
		return appendValue(b, n)
	case bool:
		return strconv.AppendBool(b, v), nil
	default:
		return nil, fmt.Errorf("value of type %T has no receipt encoding", v)
	}
}

// appendString writes s as RFC 8785 does: '"' and '\' escaped with a
// backslash, U+0008, U+0009, U+000A, U+000C and U+000D as \b \t \n \f \r,
// the other code points below U+0020 as \u00xx in lowercase hex, and every
// other code point as its UTF-8 bytes.
func appendString(b []byte, s string) []byte {
	const hexDigits = "0123456789abcdef"
	b = append(b, '"')
	for i := range len(s) {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c == '\b':
			b = append(b, '\\', 'b')
		case c == '\t':
			b = append(b, '\\', 't')
		case c == '\n':
			b = append(b, '\\', 'n')
		case c == '\f':
			b = append(b, '\\', 'f')
		case c == '\r':
			b = append(b, '\\', 'r')
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

func isASCII(s string) bool {
	for i := range len(s) {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// The receipt as decoded; strings where the receipt holds uuids and times so
// that a bad one is reported as such.
type wireReceipt struct {
	Format             string         `json:"format"`
	Sequence           int64          `json:"sequence"`
	RequestID          string         `json:"request_id"`
	Community          wireTenant     `json:"community"`
	InventoryDigest    string         `json:"inventory_digest"`
	ManifestDigest     string         `json:"manifest_digest"`
	Tables             []wireTable    `json:"tables"`
	Objects            []wireObjects  `json:"objects"`
	Cache              []wireCache    `json:"cache"`
	Absence            []wireAbsence  `json:"absence"`
	ExcludedTables     []wireExcluded `json:"excluded_tables"`
	SubmittedBy        wireOperator   `json:"submitted_by"`
	ApprovedBy         wireOperator   `json:"approved_by"`
	OperatorsShareRole bool           `json:"operators_share_role"`
	Stages             []wireStage    `json:"stages"`
	SchemaVersion      int64          `json:"schema_version"`
	PreviousHash       string         `json:"previous_hash"`
	Signer             string         `json:"signer"`
}

type wireTenant struct {
	ID        string `json:"id"`
	Host      string `json:"host"`
	DeletedAt string `json:"deleted_at"`
}

type wireTable struct {
	Table string `json:"table"`
	Mode  string `json:"mode"`
	Rows  int64  `json:"rows"`
}

type wireObjects struct {
	Prefix  string `json:"prefix"`
	Deleted int64  `json:"deleted"`
}

type wireCache struct {
	Pattern string `json:"pattern"`
	Deleted int64  `json:"deleted"`
}

// wireAbsence holds the keys of both formats; the canonical re-encoding
// refuses a body with the other format's keys.
type wireAbsence struct {
	Store    string   `json:"store"`
	Verified bool     `json:"verified"`
	Kind     string   `json:"kind"`
	Checked  []string `json:"checked"`
	Status   string   `json:"status"`
	Detail   string   `json:"detail"`
}

type wireExcluded struct {
	Table      string `json:"table"`
	Reason     string `json:"reason"`
	ExcludedBy string `json:"excluded_by"`
	ExcludedAt string `json:"excluded_at"`
	Until      string `json:"until"`
}

type wireOperator struct {
	Name  string `json:"name"`
	Login string `json:"login"`
}

type wireStage struct {
	Stage string `json:"stage"`
	At    string `json:"at"`
}

// decode reads b's fields into a Receipt. It is lenient where encoding/json
// is (key case, whitespace, missing keys); decodeCanonical's byte comparison
// refuses all of that.
func decode(b []byte) (Receipt, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var w wireReceipt
	if err := dec.Decode(&w); err != nil {
		return Receipt{}, fmt.Errorf("%w: %v", ErrNotCanonical, err)
	}
	r := Receipt{
		Format:             w.Format,
		Sequence:           w.Sequence,
		InventoryDigest:    w.InventoryDigest,
		ManifestDigest:     w.ManifestDigest,
		SubmittedBy:        Operator(w.SubmittedBy),
		ApprovedBy:         Operator(w.ApprovedBy),
		OperatorsShareRole: w.OperatorsShareRole,
		SchemaVersion:      w.SchemaVersion,
		PreviousHash:       w.PreviousHash,
		Signer:             w.Signer,
	}
	var err error
	if r.RequestID, err = parseUUID("request_id", w.RequestID); err != nil {
		return Receipt{}, err
	}
	if r.Community.ID, err = parseUUID("community.id", w.Community.ID); err != nil {
		return Receipt{}, err
	}
	r.Community.Host = w.Community.Host
	if r.Community.DeletedAt, err = parseTime("community.deleted_at", w.Community.DeletedAt); err != nil {
		return Receipt{}, err
	}
	for _, t := range w.Tables {
		r.Tables = append(r.Tables, Table(t))
	}
	for _, o := range w.Objects {
		r.Objects = append(r.Objects, Objects(o))
	}
	for _, c := range w.Cache {
		r.Cache = append(r.Cache, Cache(c))
	}
	for _, a := range w.Absence {
		if w.Format == FormatV1 {
			status := ""
			if a.Verified {
				status = StatusVerified
			}
			r.Absence = append(r.Absence, Absence{Store: a.Store, Status: status, Detail: a.Detail})
			continue
		}
		checked := a.Checked
		if checked == nil {
			checked = []string{}
		}
		r.Absence = append(r.Absence, Absence{Store: a.Store, Kind: a.Kind, Checked: checked, Status: a.Status, Detail: a.Detail})
	}
	for i, e := range w.ExcludedTables {
		x := Exclusion{Table: e.Table, Reason: e.Reason, ExcludedBy: e.ExcludedBy}
		if x.ExcludedAt, err = parseTime(fmt.Sprintf("excluded_tables[%d].excluded_at", i), e.ExcludedAt); err != nil {
			return Receipt{}, err
		}
		if e.Until != "" {
			if x.Until, err = parseTime(fmt.Sprintf("excluded_tables[%d].until", i), e.Until); err != nil {
				return Receipt{}, err
			}
		}
		r.Excluded = append(r.Excluded, x)
	}
	for _, s := range w.Stages {
		at, err := parseTime("stage "+quote(s.Stage)+" time", s.At)
		if err != nil {
			return Receipt{}, err
		}
		r.Stages = append(r.Stages, StageTime{Stage: s.Stage, At: at})
	}
	return r, nil
}

func parseUUID(field, s string) (uuid.UUID, error) {
	id, err := uuid.Parse(s)
	if err != nil {
		return uuid.Nil, inconsistent("%s %q is not a uuid", field, clip(s))
	}
	return id, nil
}

func parseTime(field, s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, inconsistent("%s %q is not an RFC 3339 time", field, clip(s))
	}
	return t.UTC(), nil
}
