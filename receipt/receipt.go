package receipt

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
)

// The formats of a deletion receipt's "format" field. A receipt with any
// other format is refused, so a later format cannot be mistaken for one of
// these. Version 2 states per store what was checked and how (Absence.Kind,
// Checked, Status); version 1 receipts, which claimed every store verified,
// still parse and verify.
const (
	FormatV1 = "communitydeletion.receipt/v1"
	FormatV2 = "communitydeletion.receipt/v2"
	// Format is the format a producer writes: FormatV2.
	Format = FormatV2
)

// The statuses of one store's absence proof (format 2). A store is
// verified only when a real listing of what Checked names found nothing
// of the tenant; a store that was not listed (an in-process cache, a cache
// without key patterns, no prefix to list) is not checked, and says why in
// Detail.
const (
	StatusVerified   = "verified"
	StatusNotChecked = "not_checked"
)

// KindMemory is the Kind of the in-process cache: it lists nothing of a
// deployment's real cache, so its absence proof is never verified.
const KindMemory = "memory"

// SignerUnsigned is the Signer of a receipt that no key signed: its envelope
// carries an empty signature, and Verify refuses it unless
// VerifyOpts.AllowUnsigned.
const SignerUnsigned = "unsigned"

// MaxCount is the largest count, sequence or schema version a receipt
// holds: 2^53-1, the largest integer an IEEE 754 double holds exactly, so
// that any JSON reader (and RFC 8785) reads the numbers unchanged.
const MaxCount = 1<<53 - 1

// MaxText is the longest string field a receipt holds, in bytes.
const MaxText = 4096

// The purge modes of a registered table (community_scoped_tables.purge_action).
const (
	ModeDelete  = "delete"
	ModeNullify = "nullify"
)

// The stores an absence proof covers.
const (
	StorePostgres = "postgres"
	StoreObjects  = "objects"
	StoreCache    = "cache"
)

// The stages a receipt may record, in lifecycle order (lifecycle.Stages
// without aborted; a receipt is only ever produced for a completed deletion).
const (
	StageSubmitted         = "submitted"
	StageInventoried       = "inventoried"
	StageApproved          = "approved"
	StageFenced            = "fenced"
	StageDrained           = "drained"
	StageBindingsRemoved   = "bindings_removed"
	StagePostgresPurged    = "postgres_purged"
	StageCachePurged       = "cache_purged"
	StageLogicallyVerified = "logically_verified"
	StageRetentionPending  = "retention_pending"
)

var stageOrder = []string{
	StageSubmitted, StageInventoried, StageApproved, StageFenced, StageDrained,
	StageBindingsRemoved, StagePostgresPurged, StageCachePurged,
	StageLogicallyVerified, StageRetentionPending,
}

// StageOrder returns the stages a receipt may record, in lifecycle order.
// The caller owns the returned slice.
func StageOrder() []string { return slices.Clone(stageOrder) }

// Receipt is the signed body of a deletion receipt: what one completed
// deletion covered, on whose authority, and when, with its place in the
// deployment's chain. It holds no personal data of the deleted tenant beyond
// what the tombstone keeps. Field meanings and the encoding are specified in
// docs/receipts.md; Validate states the rules a receipt must satisfy.
type Receipt struct {
	// Format is always Format.
	Format string
	// Sequence is the receipt's position in the deployment's chain, from 1.
	Sequence int64
	// RequestID is the deletion request the receipt covers.
	RequestID uuid.UUID
	// Community is what the tenant's tombstone keeps.
	Community Tenant
	// InventoryDigest is the lowercase hex SHA-256 of the frozen inventory
	// that the approval was bound to.
	InventoryDigest string
	// ManifestDigest is the lowercase hex SHA-256 of the destructive storage
	// manifest frozen before anything was destroyed.
	ManifestDigest string
	// Tables lists every registered table with the rows purged or nullified,
	// sorted by Table.
	Tables []Table
	// Objects lists the object-store keys deleted per prefix, sorted by Prefix.
	Objects []Objects
	// Cache lists the cache entries deleted per pattern, sorted by Pattern.
	Cache []Cache
	// Absence lists the absence proof's result per store, sorted by Store.
	Absence []Absence
	// Excluded lists every exclusion of a table from the deletion that was
	// in force at some time between the request's submission and its
	// receipt, sorted by Table and ExcludedAt (format 2; empty in format 1,
	// which cannot hold it). Excluded tables keep their rows.
	Excluded []Exclusion
	// SubmittedBy and ApprovedBy are the two operators, each by the name
	// given to the lifecycle and the database login (session_user) used.
	SubmittedBy Operator
	ApprovedBy  Operator
	// OperatorsShareRole records that the deployment declared its operators
	// share one database login (community_deletion_settings), so the two
	// logins may be equal; the names never may.
	OperatorsShareRole bool
	// Stages are the times the request entered each recorded stage, on the
	// database clock, in lifecycle order, ending with retention_pending.
	Stages []StageTime
	// SchemaVersion is the deployment's schema (migration) version when the
	// receipt was produced.
	SchemaVersion int64
	// PreviousHash is Hash of the previous receipt in the chain, lowercase
	// hex; empty for Sequence 1.
	PreviousHash string
	// Signer is KeyID of the signing key, or SignerUnsigned.
	Signer string
}

// Tenant is what a community's tombstone keeps: its id, its host (empty if
// the deployment does not keep it) and when it became a tombstone.
type Tenant struct {
	ID        uuid.UUID
	Host      string
	DeletedAt time.Time
}

// Table is one registered table's purge: Mode is ModeDelete or ModeNullify
// and Rows the number of rows deleted or nullified.
type Table struct {
	Table string
	Mode  string
	Rows  int64
}

// Exclusion is one exclusion of a table from the deletion
// (community_deletion.exclude_table()): the schema-qualified Table, the
// Reason its owner gave, the login that excluded it and when, and Until,
// the time a later event (an inclusion, a new exclusion, a registration)
// ended it, or the zero time while it was still in force at the receipt.
type Exclusion struct {
	Table      string
	Reason     string
	ExcludedBy string
	ExcludedAt time.Time
	Until      time.Time
}

// Objects is the number of object-store keys deleted under one prefix.
type Objects struct {
	Prefix  string
	Deleted int64
}

// Cache is the number of cache entries deleted under one pattern.
type Cache struct {
	Pattern string
	Deleted int64
}

// Absence is one store's absence proof. Kind names the store's kind (the
// adapter: "postgresql", "s3", "file", "redis", "memory"…), Checked what was
// listed and found empty (the declared cache templates, the object prefixes,
// the registered tables), and Status whether it counts as verified
// (StatusVerified) or not (StatusNotChecked, with Checked empty and Detail
// saying why). A version 1 receipt has no Kind or Checked, and its Status
// is StatusVerified for "verified": true.
type Absence struct {
	Store   string
	Kind    string
	Checked []string
	Status  string
	Detail  string
}

// Verified reports whether the store's absence was verified.
func (a Absence) Verified() bool { return a.Status == StatusVerified }

// Operator is a person acting on a request: the name they gave and the
// database login they acted as.
type Operator struct {
	Name  string
	Login string
}

// StageTime is the time on the database clock at which a request entered
// Stage.
type StageTime struct {
	Stage string
	At    time.Time
}

// Stage returns the time the receipt records for stage and whether it
// records one.
func (r Receipt) Stage(stage string) (time.Time, bool) {
	for _, s := range r.Stages {
		if s.Stage == stage {
			return s.At, true
		}
	}
	return time.Time{}, false
}

// ErrInconsistent matches every error Validate returns: a receipt whose
// fields contradict the format's rules or each other.
var ErrInconsistent = errors.New("receipt is internally inconsistent")

var (
	hexDigest = regexp.MustCompile(`^[0-9a-f]{64}$`)
	hexKeyID  = regexp.MustCompile(`^[0-9a-f]{16}$`)
)

func inconsistent(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInconsistent, fmt.Sprintf(format, args...))
}

// Validate checks every rule docs/receipts.md states for one receipt on its
// own (the chain rules need its neighbours: see Verify). The error matches
// ErrInconsistent and names the first broken rule.
func Validate(r Receipt) error {
	if r.Format != FormatV1 && r.Format != FormatV2 {
		return inconsistent("format is %q, want %q (or %q)", clip(r.Format), FormatV2, FormatV1)
	}
	if r.Sequence < 1 || r.Sequence > MaxCount {
		return inconsistent("sequence %d is outside 1..%d", r.Sequence, int64(MaxCount))
	}
	if r.RequestID == uuid.Nil {
		return inconsistent("request_id is the nil uuid")
	}
	if r.Community.ID == uuid.Nil {
		return inconsistent("community.id is the nil uuid")
	}
	if err := text("community.host", r.Community.Host, true); err != nil {
		return err
	}
	if err := checkTime("community.deleted_at", r.Community.DeletedAt); err != nil {
		return err
	}
	if !hexDigest.MatchString(r.InventoryDigest) {
		return inconsistent("inventory_digest %q is not 64 lowercase hex digits", clip(r.InventoryDigest))
	}
	if !hexDigest.MatchString(r.ManifestDigest) {
		return inconsistent("manifest_digest %q is not 64 lowercase hex digits", clip(r.ManifestDigest))
	}
	for i, t := range r.Tables {
		if err := text(fmt.Sprintf("tables[%d].table", i), t.Table, false); err != nil {
			return err
		}
		if i > 0 && r.Tables[i-1].Table >= t.Table {
			return inconsistent("tables are not unique and sorted: %q follows %q", clip(t.Table), clip(r.Tables[i-1].Table))
		}
		if t.Mode != ModeDelete && t.Mode != ModeNullify {
			return inconsistent("table %q has mode %q, want delete or nullify", clip(t.Table), clip(t.Mode))
		}
		if err := count("table "+quote(t.Table)+" rows", t.Rows); err != nil {
			return err
		}
	}
	for i, o := range r.Objects {
		if err := text(fmt.Sprintf("objects[%d].prefix", i), o.Prefix, false); err != nil {
			return err
		}
		if i > 0 && r.Objects[i-1].Prefix >= o.Prefix {
			return inconsistent("object prefixes are not unique and sorted: %q follows %q", clip(o.Prefix), clip(r.Objects[i-1].Prefix))
		}
		if err := count("objects deleted under "+quote(o.Prefix), o.Deleted); err != nil {
			return err
		}
	}
	for i, c := range r.Cache {
		if err := text(fmt.Sprintf("cache[%d].pattern", i), c.Pattern, false); err != nil {
			return err
		}
		if i > 0 && r.Cache[i-1].Pattern >= c.Pattern {
			return inconsistent("cache patterns are not unique and sorted: %q follows %q", clip(c.Pattern), clip(r.Cache[i-1].Pattern))
		}
		if err := count("cache entries deleted under "+quote(c.Pattern), c.Deleted); err != nil {
			return err
		}
	}
	if err := checkAbsence(r.Format, r.Absence); err != nil {
		return err
	}
	if err := checkExcluded(r.Format, r.Excluded); err != nil {
		return err
	}
	if err := checkOperators(r); err != nil {
		return err
	}
	if err := checkStages(r); err != nil {
		return err
	}
	if r.SchemaVersion < 1 || r.SchemaVersion > MaxCount {
		return inconsistent("schema_version %d is outside 1..%d", r.SchemaVersion, int64(MaxCount))
	}
	switch {
	case r.Sequence == 1 && r.PreviousHash != "":
		return inconsistent("sequence 1 has previous_hash %q, want empty", clip(r.PreviousHash))
	case r.Sequence > 1 && !hexDigest.MatchString(r.PreviousHash):
		return inconsistent("previous_hash %q is not 64 lowercase hex digits", clip(r.PreviousHash))
	}
	if r.Signer != SignerUnsigned && !hexKeyID.MatchString(r.Signer) {
		return inconsistent("signer %q is neither %q nor a 16-hex-digit key id", clip(r.Signer), SignerUnsigned)
	}
	return nil
}

func checkAbsence(format string, absence []Absence) error {
	known := []string{StoreCache, StoreObjects, StorePostgres}
	for i, a := range absence {
		if !slices.Contains(known, a.Store) {
			return inconsistent("absence store %q is not one of cache, objects, postgres", clip(a.Store))
		}
		if i > 0 && absence[i-1].Store >= a.Store {
			return inconsistent("absence stores are not unique and sorted: %q follows %q", a.Store, absence[i-1].Store)
		}
		if err := text("absence "+a.Store+" detail", a.Detail, true); err != nil {
			return err
		}
		if format == FormatV1 {
			if a.Kind != "" || len(a.Checked) != 0 {
				return inconsistent("absence in store %q names a kind or what was checked, which format %s cannot hold", a.Store, FormatV1)
			}
			if !a.Verified() {
				return inconsistent("absence in store %q is not verified, yet the deletion is complete", a.Store)
			}
			continue
		}
		if err := checkStoreCheck(a); err != nil {
			return err
		}
	}
	if !slices.ContainsFunc(absence, func(a Absence) bool { return a.Store == StorePostgres }) {
		return inconsistent("absence has no postgres proof")
	}
	return nil
}

// checkStoreCheck is the format 2 rule for one store: a kind; what was
// checked, unique and sorted; verified only for a non-empty listing by a
// store that is not the in-process cache; not checked with nothing listed
// and a reason.
func checkStoreCheck(a Absence) error {
	if err := text("absence "+a.Store+" kind", a.Kind, false); err != nil {
		return err
	}
	for i, c := range a.Checked {
		if err := text(fmt.Sprintf("absence %s checked[%d]", a.Store, i), c, false); err != nil {
			return err
		}
		if i > 0 && a.Checked[i-1] >= c {
			return inconsistent("absence %s checked is not unique and sorted: %q follows %q", a.Store, clip(c), clip(a.Checked[i-1]))
		}
	}
	switch a.Status {
	case StatusVerified:
		if len(a.Checked) == 0 {
			return inconsistent("absence in store %q is verified, but names nothing that was checked", a.Store)
		}
		if a.Kind == KindMemory {
			return inconsistent("absence in store %q is verified by the in-process cache (kind %s), which lists nothing of the deployment's cache", a.Store, KindMemory)
		}
	case StatusNotChecked:
		if len(a.Checked) != 0 {
			return inconsistent("absence in store %q is not checked, yet names what was checked", a.Store)
		}
		if strings.TrimSpace(a.Detail) == "" {
			return inconsistent("absence in store %q is not checked and its detail does not say why", a.Store)
		}
	default:
		return inconsistent("absence in store %q has status %q, want %s or %s", a.Store, clip(a.Status), StatusVerified, StatusNotChecked)
	}
	return nil
}

// checkExcluded is the rule for the exclusions: none in format 1; in
// format 2 each names its table, reason and login, with times, ended no
// earlier than it began, sorted by table and then time.
func checkExcluded(format string, excluded []Exclusion) error {
	if format == FormatV1 && len(excluded) > 0 {
		return inconsistent("excluded_tables are listed, which format %s cannot hold", FormatV1)
	}
	for i, e := range excluded {
		for _, f := range []struct{ field, value string }{
			{"table", e.Table}, {"reason", e.Reason}, {"excluded_by", e.ExcludedBy},
		} {
			if err := text(fmt.Sprintf("excluded_tables[%d].%s", i, f.field), f.value, false); err != nil {
				return err
			}
		}
		if err := checkTime(fmt.Sprintf("excluded_tables[%d].excluded_at", i), e.ExcludedAt); err != nil {
			return err
		}
		if !e.Until.IsZero() {
			if err := checkTime(fmt.Sprintf("excluded_tables[%d].until", i), e.Until); err != nil {
				return err
			}
			if e.Until.Before(e.ExcludedAt) {
				return inconsistent("the exclusion of %q ends at %s, before it began at %s", clip(e.Table), formatTime(e.Until), formatTime(e.ExcludedAt))
			}
		}
		if i > 0 {
			p := excluded[i-1]
			if p.Table > e.Table || (p.Table == e.Table && p.ExcludedAt.After(e.ExcludedAt)) {
				return inconsistent("excluded_tables are not sorted by table and time: %q at %s follows %q at %s",
					clip(e.Table), formatTime(e.ExcludedAt), clip(p.Table), formatTime(p.ExcludedAt))
			}
		}
	}
	return nil
}

func checkOperators(r Receipt) error {
	for _, f := range []struct {
		field string
		value string
	}{
		{"submitted_by.name", r.SubmittedBy.Name},
		{"submitted_by.login", r.SubmittedBy.Login},
		{"approved_by.name", r.ApprovedBy.Name},
		{"approved_by.login", r.ApprovedBy.Login},
	} {
		if err := text(f.field, f.value, false); err != nil {
			return err
		}
		if strings.TrimSpace(f.value) == "" {
			return inconsistent("%s is blank", f.field)
		}
	}
	// The same comparison the approval guard makes: trimmed, case-folded.
	if strings.EqualFold(strings.TrimSpace(r.SubmittedBy.Name), strings.TrimSpace(r.ApprovedBy.Name)) {
		return inconsistent("%q both submitted and approved the deletion; a second person must approve", clip(r.SubmittedBy.Name))
	}
	if r.SubmittedBy.Login == r.ApprovedBy.Login && !r.OperatorsShareRole {
		return inconsistent("login %q both submitted and approved the deletion, and operators_share_role is false", clip(r.SubmittedBy.Login))
	}
	return nil
}

func checkStages(r Receipt) error {
	last := -1
	for i, s := range r.Stages {
		pos := slices.Index(stageOrder, s.Stage)
		if pos < 0 {
			return inconsistent("stages[%d] is %q, not a stage of a completed deletion", i, clip(s.Stage))
		}
		if pos <= last {
			return inconsistent("stage %s is recorded after %s, out of lifecycle order or repeated", s.Stage, stageOrder[last])
		}
		if err := checkTime("stage "+s.Stage+" time", s.At); err != nil {
			return err
		}
		if i > 0 && s.At.Before(r.Stages[i-1].At) {
			return inconsistent("stage %s at %s is earlier than stage %s at %s",
				s.Stage, formatTime(s.At), r.Stages[i-1].Stage, formatTime(r.Stages[i-1].At))
		}
		last = pos
	}
	for _, want := range []string{StageSubmitted, StageApproved, StageRetentionPending} {
		if _, ok := r.Stage(want); !ok {
			return inconsistent("stages do not record %s", want)
		}
	}
	approved, _ := r.Stage(StageApproved)
	done, _ := r.Stage(StageRetentionPending)
	if r.Community.DeletedAt.Before(approved) || r.Community.DeletedAt.After(done) {
		return inconsistent("community.deleted_at %s is outside the approved (%s) to retention_pending (%s) interval",
			formatTime(r.Community.DeletedAt), formatTime(approved), formatTime(done))
	}
	return nil
}

func text(field, s string, emptyOK bool) error {
	switch {
	case s == "" && !emptyOK:
		return inconsistent("%s is empty", field)
	case len(s) > MaxText:
		return inconsistent("%s is %d bytes, more than %d", field, len(s), MaxText)
	case !utf8.ValidString(s):
		return inconsistent("%s is not valid UTF-8", field)
	}
	return nil
}

func count(what string, n int64) error {
	if n < 0 || n > MaxCount {
		return inconsistent("%s is %d, outside 0..%d", what, n, int64(MaxCount))
	}
	return nil
}

func checkTime(field string, t time.Time) error {
	if t.IsZero() {
		return inconsistent("%s is missing", field)
	}
	if y := t.UTC().Year(); y < 1 || y > 9999 {
		return inconsistent("%s is in year %d, outside 1..9999", field, y)
	}
	return nil
}

// clip bounds a value quoted in an error message.
func clip(s string) string {
	if len(s) <= 80 {
		return s
	}
	return strings.ToValidUTF8(s[:80], "") + "…"
}

func quote(s string) string { return fmt.Sprintf("%q", clip(s)) }
