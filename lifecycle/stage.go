package lifecycle

import (
	"slices"
)

// Stage is the lifecycle stage of a community deletion request. Its values
// are the exact names stored in the database.
type Stage string

// The lifecycle stages, in order. Aborted is reachable only from
// StageSubmitted, StageInventoried, StageApproved and StageFenced.
const (
	// StageSubmitted is a new request whose inventory is not frozen yet.
	StageSubmitted Stage = "submitted"
	// StageInventoried means the PostgreSQL and storage inventory is frozen.
	StageInventoried Stage = "inventoried"
	// StageApproved means an operator approved the frozen inventory digest.
	StageApproved Stage = "approved"
	// StageFenced means the community's serving-path write fence is active.
	StageFenced Stage = "fenced"
	// StageDrained means in-flight serving writes finished behind the fence.
	StageDrained Stage = "drained"
	// StageBindingsRemoved means the tenant's object-store bindings are gone.
	StageBindingsRemoved Stage = "bindings_removed"
	// StagePostgresPurged means the tenant's PostgreSQL rows are purged.
	StagePostgresPurged Stage = "postgres_purged"
	// StageCachePurged means the tenant's cache namespace is purged.
	StageCachePurged Stage = "cache_purged"
	// StageLogicallyVerified means absence was verified across all stores.
	StageLogicallyVerified Stage = "logically_verified"
	// StageRetentionPending is terminal: the deletion is logically complete
	// and only deferred physical expiry of shared storage remains.
	StageRetentionPending Stage = "retention_pending"
	// StageAborted is terminal: an operator cancelled the request before any
	// irreversible deletion began.
	StageAborted Stage = "aborted"
)

// stages is the lifecycle order with the aborted stage last.
var stages = []Stage{
	StageSubmitted,
	StageInventoried,
	StageApproved,
	StageFenced,
	StageDrained,
	StageBindingsRemoved,
	StagePostgresPurged,
	StageCachePurged,
	StageLogicallyVerified,
	StageRetentionPending,
	StageAborted,
}

// Stages returns every stage in lifecycle order, StageAborted last. The
// caller owns the returned slice.
func Stages() []Stage {
	return slices.Clone(stages)
}

// ParseStage returns the stage named s. An unknown name returns an error
// matching ErrInvalidInput.
func ParseStage(s string) (Stage, error) {
	stage := Stage(s)
	if !stage.Valid() {
		return "", invalidf("unknown deletion stage %q", boundText(s, 64))
	}
	return stage, nil
}

// Valid reports whether s is one of the eleven lifecycle stages.
func (s Stage) Valid() bool {
	return slices.Contains(stages, s)
}

// String returns the stage's database name.
func (s Stage) String() string {
	return string(s)
}

// Next returns the single stage a request may advance to from s. It returns
// false for the terminal stages and for an invalid stage; moving to
// StageAborted is an abort, not an advance, and is governed by Abortable.
func (s Stage) Next() (Stage, bool) {
	i := slices.Index(stages, s)
	if i < 0 || s == StageRetentionPending || s == StageAborted {
		return "", false
	}
	return stages[i+1], true
}

// Runnable reports whether an executor may claim a request at stage s, that
// is whether s is one of StageApproved through StageLogicallyVerified.
func (s Stage) Runnable() bool {
	switch s {
	case StageApproved, StageFenced, StageDrained, StageBindingsRemoved,
		StagePostgresPurged, StageCachePurged, StageLogicallyVerified:
		return true
	}
	return false
}

// Terminal reports whether s is StageRetentionPending or StageAborted, the
// stages a request never leaves.
func (s Stage) Terminal() bool {
	return s == StageRetentionPending || s == StageAborted
}

// Abortable reports whether a request at stage s may still be aborted: only
// from StageSubmitted, StageInventoried, StageApproved and StageFenced, as
// nothing irreversible has happened before the fence drains.
func (s Stage) Abortable() bool {
	switch s {
	case StageSubmitted, StageInventoried, StageApproved, StageFenced:
		return true
	}
	return false
}

// MarshalText implements encoding.TextMarshaler. An invalid stage is
// refused with an error matching ErrInvalidInput rather than written out.
func (s Stage) MarshalText() ([]byte, error) {
	if !s.Valid() {
		return nil, invalidf("unknown deletion stage %q", boundText(string(s), 64))
	}
	return []byte(s), nil
}

// UnmarshalText implements encoding.TextUnmarshaler. It accepts exactly the
// names ParseStage accepts.
func (s *Stage) UnmarshalText(text []byte) error {
	stage, err := ParseStage(string(text))
	if err != nil {
		return err
	}
	*s = stage
	return nil
}
