package lifecycle

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	dbgen "github.com/tombstoneworks/communitydeletion/db/gen"
)

// Request is one durable community deletion request, as stored.
type Request struct {
	// ID identifies the request.
	ID uuid.UUID
	// CommunityID is the community to delete.
	CommunityID uuid.UUID
	// TenantKey is the community's tenant key: the value of the service's
	// tenant table's key (for a uuid tenant, CommunityID as text).
	TenantKey TenantKey
	// CommunityHost is the community's host, reserved forever by its
	// tombstone; empty for a tenant of a declared tenant table, which has
	// none.
	CommunityHost string
	// Stage is the request's lifecycle stage.
	Stage Stage
	// RetryStage is the stage at which the current run of consecutive
	// failures started, or nil.
	RetryStage *Stage
	// RequestedBy is the operator who submitted the request.
	RequestedBy string
	// Reason is the submitter's reason, or "".
	Reason string
	// Inventory is the frozen inventory approval is bound to, or nil before
	// the request is inventoried.
	Inventory *FrozenInventory
	// InventoryDigest is the lowercase hex SHA-256 of Inventory, or "".
	InventoryDigest string
	// InventoryFrozenAt is when the inventory was frozen, or nil.
	InventoryFrozenAt *time.Time
	// DestructiveStorage is the storage manifest frozen after the fence, or nil.
	DestructiveStorage *StorageManifest
	// DestructiveStorageFrozenAt is when it was frozen, or nil.
	DestructiveStorageFrozenAt *time.Time
	// FenceGeneration is the community fence generation the request runs
	// under, from the step to fenced on; or nil.
	FenceGeneration *int64
	// LeaseOwner is the executor holding the claim, or "".
	LeaseOwner string
	// LeaseGeneration rises with every claim.
	LeaseGeneration int64
	// LeaseUntil is when the claim expires, or nil.
	LeaseUntil *time.Time
	// Attempts counts claims.
	Attempts int32
	// RetryCount counts consecutive failures at RetryStage.
	RetryCount int32
	// LastError is the last bounded failure, or "".
	LastError string
	// LastErrorAt is when it was recorded, or nil.
	LastErrorAt *time.Time
	// NextAttemptAt is the earliest time the request may be claimed again.
	NextAttemptAt time.Time
	// BlockedAt is when the request was durably blocked, or nil.
	BlockedAt *time.Time
	// BlockedReason says why it is blocked, or "".
	BlockedReason string
	// CreatedAt is when the request was submitted.
	CreatedAt time.Time
	// UpdatedAt is when the request last changed.
	UpdatedAt time.Time
	// PreQuiesceArchivedAt is the community's archived_at before quiescing.
	PreQuiesceArchivedAt *time.Time
	// QuiescingStartedAt is when quiescing began, or nil.
	QuiescingStartedAt *time.Time
	// AbortedBy is the operator who aborted the request, or "".
	AbortedBy string
	// AbortReason is why, or "".
	AbortReason string
	// AbortedAt is when, or nil.
	AbortedAt *time.Time
	// CompletedAt is when the request reached a terminal stage, or nil.
	CompletedAt *time.Time
	// GraceUntil is when the approval's grace period ends (database time),
	// or nil before approval and for an approval without one. Before then
	// nothing is quiesced or fenced.
	GraceUntil *time.Time
}

// InGrace reports whether the request is approved and waiting for its grace
// period to end at now (database time is authoritative; now is a hint).
func (r *Request) InGrace(now time.Time) bool {
	return r.Stage == StageApproved && r.GraceUntil != nil && r.GraceUntil.After(now)
}

// Blocked reports whether the request is durably blocked.
func (r *Request) Blocked() bool { return r.BlockedAt != nil }

// requestFromRow converts a stored row, failing closed on a stage or manifest
// the package does not understand.
func requestFromRow(row *dbgen.CommunityDeletionRequest) (*Request, error) {
	stage, err := ParseStage(row.Stage)
	if err != nil {
		return nil, refusef("deletion %s has stage %q: %w", row.ID, row.Stage, err)
	}
	r := &Request{
		ID:                         row.ID,
		CommunityID:                row.CommunityID,
		TenantKey:                  tenantKeyOf(row.CommunityID, row.CommunityTenantKey),
		CommunityHost:              deref(row.CommunityHost),
		Stage:                      stage,
		RequestedBy:                row.RequestedBy,
		Reason:                     deref(row.Reason),
		InventoryDigest:            digestHex(row.InventoryDigest),
		InventoryFrozenAt:          row.InventoryFrozenAt,
		DestructiveStorageFrozenAt: row.DestructiveStorageFrozenAt,
		FenceGeneration:            row.FenceGeneration,
		LeaseOwner:                 deref(row.LeaseOwner),
		LeaseGeneration:            row.LeaseGeneration,
		LeaseUntil:                 row.LeaseUntil,
		Attempts:                   row.Attempts,
		RetryCount:                 row.RetryCount,
		LastError:                  deref(row.LastError),
		LastErrorAt:                row.LastErrorAt,
		NextAttemptAt:              row.NextAttemptAt,
		BlockedAt:                  row.BlockedAt,
		BlockedReason:              deref(row.BlockedReason),
		CreatedAt:                  row.CreatedAt,
		UpdatedAt:                  row.UpdatedAt,
		PreQuiesceArchivedAt:       row.PreQuiesceArchivedAt,
		QuiescingStartedAt:         row.QuiescingStartedAt,
		AbortedBy:                  deref(row.AbortedBy),
		AbortReason:                deref(row.AbortReason),
		AbortedAt:                  row.AbortedAt,
		CompletedAt:                row.CompletedAt,
	}
	if row.RetryStage != nil {
		retry, err := ParseStage(*row.RetryStage)
		if err != nil {
			return nil, refusef("deletion %s has retry stage %q: %w", row.ID, *row.RetryStage, err)
		}
		r.RetryStage = &retry
	}
	if row.InventoryManifest != nil {
		var inventory FrozenInventory
		if err := json.Unmarshal(row.InventoryManifest, &inventory); err != nil {
			return nil, refusef("deletion %s has an unreadable frozen inventory: %w", row.ID, err)
		}
		r.Inventory = &inventory
	}
	if row.DestructiveStorageManifest != nil {
		var manifest StorageManifest
		if err := json.Unmarshal(row.DestructiveStorageManifest, &manifest); err != nil {
			return nil, refusef("deletion %s has an unreadable destructive storage manifest: %w", row.ID, err)
		}
		r.DestructiveStorage = &manifest
	}
	return r, nil
}

// token returns the lease token of a request just claimed by owner.
func (r *Request) token() LeaseToken {
	return LeaseToken{
		RequestID:       r.ID,
		Owner:           r.LeaseOwner,
		Generation:      r.LeaseGeneration,
		CommunityID:     r.CommunityID,
		TenantKey:       r.TenantKey,
		FenceGeneration: r.FenceGeneration,
	}
}

// String names the request for logs and errors.
func (r *Request) String() string {
	if r.CommunityHost == "" {
		return fmt.Sprintf("deletion %s of %s (%s)", r.ID, r.TenantKey, r.Stage)
	}
	return fmt.Sprintf("deletion %s of %s (%s)", r.ID, r.CommunityHost, r.Stage)
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
