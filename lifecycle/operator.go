package lifecycle

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	dbgen "github.com/tombstoneworks/communitydeletion/db/gen"
)

// MaxListLimit is the largest page List and ListPage return.
const MaxListLimit = 1000

// Approval is the evidence that an operator approved a request's frozen
// inventory.
type Approval struct {
	// InventoryDigest is the lowercase hex SHA-256 of the approved inventory.
	InventoryDigest string
	// ApprovedBy is the approving operator.
	ApprovedBy string
	// Note is the approver's note, or "".
	Note string
	// ApprovedAt is when the approval was recorded, on the database clock.
	ApprovedAt time.Time
	// GraceUntil is when its grace period ends, or nil for an approval
	// recorded before grace periods existed.
	GraceUntil *time.Time
}

// Checkpoint is one recorded unit of a request's work, or an operator's
// audit record (an abort or an unblock).
type Checkpoint struct {
	// Stage is the stage the unit belongs to.
	Stage Stage
	// UnitKey names the unit within its stage.
	UnitKey string
	// Status is "started", "completed" or "failed".
	Status string
	// LeaseGeneration is the lease generation that last wrote the unit.
	LeaseGeneration int64
	// Attempts counts the unit's recorded attempts.
	Attempts int32
	// Detail is the unit's structured detail, a JSON object.
	Detail json.RawMessage
	// Error is the unit's last bounded failure, or "".
	Error string
	// StartedAt is when the unit was first recorded.
	StartedAt time.Time
	// CompletedAt is when it completed, or nil.
	CompletedAt *time.Time
}

// Inspection is everything recorded about one request.
type Inspection struct {
	// Request is the request as stored.
	Request *Request
	// Approval is its approval, or nil before approval.
	Approval *Approval
	// Checkpoints are its checkpoints in the order they were first recorded.
	Checkpoints []Checkpoint
	// ChunksTotal counts the persisted chunks of its destructive key list.
	ChunksTotal int64
	// ChunksDeleted counts those whose keys were confirmed deleted.
	ChunksDeleted int64
}

// Cursor is a position in the newest-first request listing: the creation
// time and id of the last request of a page.
type Cursor struct {
	// CreatedAt is the request's creation time.
	CreatedAt time.Time
	// ID is the request's id, which breaks ties between equal times.
	ID uuid.UUID
}

// ListParams selects a page of requests for ListPage.
type ListParams struct {
	// Stage, when set, keeps only requests at that stage.
	Stage *Stage
	// Blocked, when set, keeps only blocked (true) or unblocked (false)
	// requests.
	Blocked *bool
	// Limit is the page size, 1 to MaxListLimit.
	Limit int
	// After, when set, starts the page after this position (a previous
	// page's Next).
	After *Cursor
}

// Page is one page of requests, newest first.
type Page struct {
	// Requests are the page's requests.
	Requests []*Request
	// Next is the cursor of the following page, or nil on the last page.
	Next *Cursor
}

// Submit records a deletion request for the active community whose id is
// host, or else whose host is host (compared case-insensitively; a tenant
// of a declared tenant table has no host), on behalf of requestedBy with an
// optional reason. Submitting again while the same requester's request is
// still submitted returns that request unchanged. A missing, quiescing,
// fenced or tombstoned community, and one that already has an open request
// (of another requester, or past submitted), are refused with an error
// matching ErrRefused; malformed arguments match ErrInvalidInput.
func (o *Operator) Submit(ctx context.Context, host, requestedBy, reason string) (*Request, error) {
	host, err := validateOperator(host, "community host")
	if err != nil {
		return nil, err
	}
	requestedBy, err = validateOperator(requestedBy, "requested_by")
	if err != nil {
		return nil, err
	}
	var reasonArg *string
	if r := boundText(strings.TrimFunc(reason, unicode.IsSpace), MaxErrorBytes); r != "" {
		reasonArg = &r
	}

	var request *Request
	err = o.tx(ctx, func(q *dbgen.Queries) error {
		row, err := q.DeletionRequestSubmit(ctx, dbgen.DeletionRequestSubmitParams{
			Host: host, RequestedBy: requestedBy, Reason: reasonArg,
		})
		if errors.Is(err, pgx.ErrNoRows) {
			return submitRefusal(ctx, q, host)
		}
		if err != nil {
			return err
		}
		stored := dbgen.CommunityDeletionRequest(row)
		request, err = requestFromRow(&stored)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("submit deletion of %q: %w", boundText(host, 256), err)
	}
	return request, nil
}

// submitRefusal explains why host could not be submitted.
func submitRefusal(ctx context.Context, q *dbgen.Queries, host string) error {
	community, err := q.CommunityGetByHost(ctx, host)
	if errors.Is(err, pgx.ErrNoRows) {
		return refusef("no community has id or host %q; name the tenant by its id, or the community by its host", boundText(host, 256))
	}
	if err != nil {
		return fmt.Errorf("read community: %w", err)
	}
	if community.DeletionState != "active" {
		return refusef("community %s is %s", community.ID, community.DeletionState)
	}
	return refusef("community %s already has an open deletion request", community.ID)
}

// List returns one page of requests, newest first (by creation time,
// then id), filtered by stage and blocked state when those are set. It
// pages by keyset: pass the returned Next as After for the following page;
// requests created meanwhile never shift a page. Next is nil on the last
// page.
func (o *Operator) List(ctx context.Context, params ListParams) (*Page, error) {
	if err := checkListLimit(params.Limit); err != nil {
		return nil, err
	}
	if params.Stage != nil && !params.Stage.Valid() {
		return nil, invalidf("unknown deletion stage %q", boundText(string(*params.Stage), 64))
	}
	var afterAt *time.Time
	var afterID *uuid.UUID
	if params.After != nil {
		if params.After.CreatedAt.IsZero() {
			return nil, invalidf("list cursor has no creation time")
		}
		afterAt, afterID = &params.After.CreatedAt, &params.After.ID
	}
	// One row more than the page tells whether another page follows.
	fetch := int32(params.Limit + 1) //nolint:gosec // checkListLimit bounds Limit by MaxListLimit

	var page *Page
	err := o.tx(ctx, func(q *dbgen.Queries) error {
		var rows []dbgen.CommunityDeletionRequest
		var err error
		switch {
		case params.Stage != nil:
			rows, err = q.DeletionRequestListPageByStage(ctx, dbgen.DeletionRequestListPageByStageParams{
				Stage: string(*params.Stage), AfterCreatedAt: afterAt, AfterID: afterID,
				Blocked: params.Blocked, MaxRows: fetch,
			})
		case params.Blocked != nil && *params.Blocked:
			rows, err = q.DeletionRequestListPageBlocked(ctx, dbgen.DeletionRequestListPageBlockedParams{
				AfterCreatedAt: afterAt, AfterID: afterID, MaxRows: fetch,
			})
		default:
			rows, err = q.DeletionRequestListPage(ctx, dbgen.DeletionRequestListPageParams{
				AfterCreatedAt: afterAt, AfterID: afterID, Blocked: params.Blocked, MaxRows: fetch,
			})
		}
		if err != nil {
			return err
		}
		more := len(rows) > params.Limit
		if more {
			rows = rows[:params.Limit]
		}
		requests, err := requestsFromRows(rows)
		if err != nil {
			return err
		}
		if err := fillGraceUntil(ctx, q, requests...); err != nil {
			return err
		}
		page = &Page{Requests: requests}
		if more {
			last := rows[len(rows)-1]
			page.Next = &Cursor{CreatedAt: last.CreatedAt, ID: last.ID}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list deletion requests: %w", err)
	}
	return page, nil
}

// get returns one request, or an error matching ErrNotFound.
func (s *store) get(ctx context.Context, id uuid.UUID) (*Request, error) {
	var request *Request
	err := s.tx(ctx, func(q *dbgen.Queries) error {
		row, err := getRequestRow(ctx, q, id)
		if err != nil {
			return err
		}
		if request, err = requestFromRow(&row); err != nil {
			return err
		}
		return fillGraceUntil(ctx, q, request)
	})
	if err != nil {
		return nil, fmt.Errorf("get deletion %s: %w", id, err)
	}
	return request, nil
}

// Inspect returns a request with its approval, its checkpoints and the
// progress of its destructive key chunks, or an error matching ErrNotFound.
func (o *Operator) Inspect(ctx context.Context, id uuid.UUID) (*Inspection, error) {
	var inspection *Inspection
	err := o.tx(ctx, func(q *dbgen.Queries) error {
		row, err := getRequestRow(ctx, q, id)
		if err != nil {
			return err
		}
		request, err := requestFromRow(&row)
		if err != nil {
			return err
		}
		result := &Inspection{Request: request, Checkpoints: []Checkpoint{}}

		approval, err := q.DeletionApprovalGetByRequest(ctx, id)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return fmt.Errorf("read approval: %w", err)
		default:
			result.Approval = &Approval{
				InventoryDigest: digestHex(approval.InventoryDigest),
				ApprovedBy:      approval.ApprovedBy,
				Note:            deref(approval.Note),
				ApprovedAt:      approval.ApprovedAt,
				GraceUntil:      approval.GraceUntil,
			}
			request.GraceUntil = approval.GraceUntil
		}

		checkpoints, err := q.DeletionCheckpointListByRequest(ctx, id)
		if err != nil {
			return fmt.Errorf("list checkpoints: %w", err)
		}
		for _, c := range checkpoints {
			stage, err := ParseStage(c.Stage)
			if err != nil {
				return refusef("checkpoint %d has stage %q: %w", c.Sequence, c.Stage, err)
			}
			result.Checkpoints = append(result.Checkpoints, Checkpoint{
				Stage:           stage,
				UnitKey:         c.UnitKey,
				Status:          c.Status,
				LeaseGeneration: c.LeaseGeneration,
				Attempts:        c.Attempts,
				Detail:          json.RawMessage(c.Detail),
				Error:           deref(c.Error),
				StartedAt:       c.StartedAt,
				CompletedAt:     c.CompletedAt,
			})
		}

		progress, err := q.DeletionManifestKeyProgress(ctx, id)
		if err != nil {
			return fmt.Errorf("count manifest key chunks: %w", err)
		}
		result.ChunksTotal, result.ChunksDeleted = progress.Total, progress.Deleted
		inspection = result
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("inspect deletion %s: %w", id, err)
	}
	return inspection, nil
}

// FreezeInventory freezes inv as the inventory of the submitted request id
// and moves it to inventoried, in one step: the schema and storage manifests,
// the whole inventory and its digest (FrozenInventory.Digest) are written
// together. On an unblocked inventoried request it replaces the frozen
// inventory (a re-inventory); once approved, the approval binds the digest
// and only abort and resubmit change it. inv must pass
// ValidateStorageManifest and ValidateSchemaManifest (else ErrInvalidInput)
// and, when the deployment declared a storage layout, freeze exactly its
// object prefixes for the request's community (else ErrRefused). A request
// that is not an unblocked submitted or inventoried request is refused with
// ErrRefused.
func (o *Operator) FreezeInventory(ctx context.Context, id uuid.UUID, inv FrozenInventory) (*Request, error) {
	if err := ValidateStorageManifest(inv.Storage); err != nil {
		return nil, err
	}
	if err := ValidateSchemaManifest(inv.Schema); err != nil {
		return nil, err
	}
	frozen, err := freezeInventoryParams(id, inv)
	if err != nil {
		return nil, err
	}

	var request *Request
	err = o.tx(ctx, func(q *dbgen.Queries) error {
		current, err := lockRequestForOperator(ctx, q, id)
		if err != nil {
			return err
		}
		if (current.Stage != string(StageSubmitted) && current.Stage != string(StageInventoried)) || current.BlockedAt != nil {
			return refusef("deletion %s is %s, not an unblocked submitted or inventoried request; "+
				"to change what it deletes, abort it and submit a new one", id, describeStage(&current))
		}
		layout, err := readStorageLayout(ctx, q)
		if err != nil {
			return fmt.Errorf("read the storage layout: %w", err)
		}
		if err := checkDeclaredPrefixes(layout, tenantKeyOf(current.CommunityID, current.CommunityTenantKey), inv.Storage); err != nil {
			return err
		}
		row, err := q.DeletionRequestFreezeInventory(ctx, frozen)
		if errors.Is(err, pgx.ErrNoRows) {
			return refusef("deletion %s changed before its inventory could be frozen", id)
		}
		if err != nil {
			return err
		}
		request, err = requestFromRow(&row)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("freeze inventory of deletion %s: %w", id, err)
	}
	return request, nil
}

// freezeInventoryParams encodes inv's parts and digest for storage.
func freezeInventoryParams(id uuid.UUID, inv FrozenInventory) (dbgen.DeletionRequestFreezeInventoryParams, error) {
	digest, err := inv.Digest()
	if err != nil {
		return dbgen.DeletionRequestFreezeInventoryParams{}, err
	}
	whole, err := inv.canonicalJSON()
	if err != nil {
		return dbgen.DeletionRequestFreezeInventoryParams{}, err
	}
	// The parts are stored as the canonical encoding's own sub-objects, so
	// every stored form decodes to the same inventory.
	var parts struct {
		Schema  json.RawMessage `json:"schema"`
		Storage json.RawMessage `json:"storage"`
	}
	if err := json.Unmarshal(whole, &parts); err != nil {
		return dbgen.DeletionRequestFreezeInventoryParams{}, invalidf("encode frozen inventory: %w", err)
	}
	return dbgen.DeletionRequestFreezeInventoryParams{
		SchemaManifest: parts.Schema, StorageManifest: parts.Storage,
		InventoryManifest: whole, InventoryDigest: digest[:], ID: id,
	}, nil
}

// Approve records approvedBy's approval of the inventoried request id and
// moves it to approved. The digest is recomputed from the stored inventory
// (and from its stored parts) and must equal the stored digest, or the
// approval is refused. The requester cannot approve their own request
// (compared ignoring case and surrounding white space; the database enforces
// the same rule). note is optional. Refusals match ErrRefused.
func (o *Operator) Approve(ctx context.Context, id uuid.UUID, approvedBy, note string) (*Request, error) {
	return o.approve(ctx, id, approvedBy, note, pgtype.Interval{})
}

// approve records the approval with grace, a NULL interval for the
// deployment's default grace period.
func (o *Operator) approve(ctx context.Context, id uuid.UUID, approvedBy, note string, grace pgtype.Interval) (*Request, error) {
	approvedBy, err := validateOperator(approvedBy, "approved_by")
	if err != nil {
		return nil, err
	}
	var noteArg *string
	if n := boundText(strings.TrimFunc(note, unicode.IsSpace), MaxErrorBytes); n != "" {
		noteArg = &n
	}

	var request *Request
	err = o.tx(ctx, func(q *dbgen.Queries) error {
		current, err := lockRequestForOperator(ctx, q, id)
		if err != nil {
			return err
		}
		if current.Stage != string(StageInventoried) || current.BlockedAt != nil {
			return refusef("deletion %s is %s, not an unblocked inventoried request", id, describeStage(&current))
		}
		if sameOperator(approvedBy, current.RequestedBy) {
			return refusef("%q requested deletion %s and cannot also approve it", boundText(current.RequestedBy, MaxOperatorBytes), id)
		}
		if err := checkStoredDigest(&current); err != nil {
			return err
		}
		if _, err := q.DeletionApprovalInsert(ctx, dbgen.DeletionApprovalInsertParams{
			RequestID: id, CommunityID: current.CommunityID, InventoryDigest: current.InventoryDigest,
			ApprovedBy: approvedBy, Note: noteArg, GracePeriod: grace,
		}); err != nil {
			return fmt.Errorf("record approval: %w", err)
		}
		row, err := q.DeletionRequestMarkApproved(ctx, id)
		if errors.Is(err, pgx.ErrNoRows) {
			return refusef("deletion %s changed before its approval could be recorded", id)
		}
		if err != nil {
			return err
		}
		if request, err = requestFromRow(&row); err != nil {
			return err
		}
		return fillGraceUntil(ctx, q, request)
	})
	if err != nil {
		return nil, fmt.Errorf("approve deletion %s: %w", id, err)
	}
	return request, nil
}

// checkStoredDigest refuses unless the stored inventory, and its stored
// schema and storage parts, hash to the stored digest.
func checkStoredDigest(row *dbgen.CommunityDeletionRequest) error {
	var inv FrozenInventory
	if err := json.Unmarshal(row.InventoryManifest, &inv); err != nil {
		return refusef("deletion %s has an unreadable frozen inventory: %w", row.ID, err)
	}
	digest, err := inv.Digest()
	if err != nil {
		return refusef("deletion %s frozen inventory cannot be hashed: %w", row.ID, err)
	}
	if !bytes.Equal(digest[:], row.InventoryDigest) {
		return refusef("deletion %s frozen inventory hashes to %s, not to its stored digest %s",
			row.ID, digestHex(digest[:]), digestHex(row.InventoryDigest))
	}
	var parts FrozenInventory
	if err := json.Unmarshal(row.SchemaManifest, &parts.Schema); err != nil {
		return refusef("deletion %s has an unreadable schema manifest: %w", row.ID, err)
	}
	if err := json.Unmarshal(row.StorageManifest, &parts.Storage); err != nil {
		return refusef("deletion %s has an unreadable storage manifest: %w", row.ID, err)
	}
	partsDigest, err := parts.Digest()
	if err != nil || !bytes.Equal(partsDigest[:], row.InventoryDigest) {
		return refusef("deletion %s stored schema and storage manifests do not match its frozen inventory digest", row.ID)
	}
	return nil
}

// sameOperator reports whether two identities name the same person under
// the two-person rule: equal ignoring case and surrounding white space.
func sameOperator(a, b string) bool {
	return strings.EqualFold(strings.TrimFunc(a, unicode.IsSpace), strings.TrimFunc(b, unicode.IsSpace))
}

// Abort terminally cancels request id on behalf of abortedBy, from
// submitted, inventoried, approved or fenced. It takes the community lock
// first, so it serializes with the executor's quiesce and fence instead of
// deadlocking with them. When the community is quiescing or fenced it is
// restored to active under a new fence generation with the archived_at it
// had before quiescing; that restore is refused (ErrRefused, as a
// *ServingWritesNotDrainedError) while unexpired serving write leases
// remain, as the new generation would strand them. The request keeps its
// audit trail: an 'operator_abort:<uuid>' checkpoint, aborted_by, the
// reason and the time; its lease is cleared and its lease generation raised,
// so every outstanding token is stale. A new request may then be submitted
// for the community. After the commit it settles the fence marker, best
// effort (see SettleFenceMarker).
func (o *Operator) Abort(ctx context.Context, id uuid.UUID, abortedBy, reason string) (*Request, error) {
	abortedBy, err := validateOperator(abortedBy, "aborted_by")
	if err != nil {
		return nil, err
	}
	reason, err = requireReason(reason, "abort reason")
	if err != nil {
		return nil, err
	}

	var request *Request
	err = o.tx(ctx, func(q *dbgen.Queries) error {
		current, err := lockRequestForOperator(ctx, q, id)
		if err != nil {
			return err
		}
		stage := Stage(current.Stage)
		if !stage.Abortable() {
			return refusef("deletion %s is %s and can no longer be aborted", id, describeStage(&current))
		}

		// No row lock: the community's deletion lock, held since
		// lockRequestForOperator, orders every lifecycle step, and
		// community_deletion_restore_active locks the row itself (an
		// operator has no UPDATE on communities).
		community, err := q.CommunityGetByID(ctx, current.CommunityID)
		if err != nil {
			return fmt.Errorf("read community %s: %w", current.CommunityID, err)
		}
		oldGeneration := community.DeletionFenceGeneration
		var newGeneration *int64
		switch community.DeletionState {
		case "active":
		case "quiescing", "fenced":
			active, err := q.ServingWriteLeaseCountActive(ctx, current.CommunityID)
			if err != nil {
				return fmt.Errorf("count serving write leases: %w", err)
			}
			if active.ActiveCount > 0 {
				return &ServingWritesNotDrainedError{
					CommunityID: current.CommunityID, ActiveCount: active.ActiveCount, Operations: active.Operations,
				}
			}
			if oldGeneration == math.MaxInt64 {
				return refusef("community %s fence generation would overflow", current.CommunityID)
			}
			archivedAt := community.ArchivedAt
			if current.QuiescingStartedAt != nil {
				archivedAt = current.PreQuiesceArchivedAt
			}
			// An operator is not the executor: the database authorizes this
			// one step for this transaction (community_deletion_restore_active).
			next, err := q.CommunityRestoreActive(ctx, dbgen.CommunityRestoreActiveParams{
				RequestID: id, ArchivedAt: archivedAt,
			})
			if err != nil {
				return fmt.Errorf("restore community %s: %w", current.CommunityID, err)
			}
			newGeneration = &next
		default:
			return refusef("community %s is %s and cannot be restored", current.CommunityID, community.DeletionState)
		}

		if err := recordOperatorAudit(ctx, q, &current, "operator_abort", map[string]any{
			"aborted_by":           abortedBy,
			"reason":               reason,
			"community_state":      community.DeletionState,
			"old_fence_generation": oldGeneration,
			"new_fence_generation": newGeneration,
		}); err != nil {
			return err
		}
		row, err := q.DeletionRequestAbort(ctx, dbgen.DeletionRequestAbortParams{
			AbortedBy: &abortedBy, AbortReason: &reason, FenceGeneration: newGeneration,
			ID: id, FromStage: current.Stage,
		})
		if errors.Is(err, pgx.ErrNoRows) {
			return refusef("deletion %s changed while it was being aborted", id)
		}
		if err != nil {
			return err
		}
		request, err = requestFromRow(&row)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("abort deletion %s: %w", id, err)
	}
	// Best effort, after the commit: a community back to active loses its
	// fence marker bit. Should this fail, writes of its tables take the
	// fence's full path until the executor's next settle.
	_, _ = o.settleFenceMarker(ctx)
	return request, nil
}

// Unblock clears the durable block of request id after an operator
// remediated its cause. It keeps the request's target, inventory, approval,
// stage and fence generation and its earlier failure checkpoints, and
// appends an 'operator_unblock:<uuid>' checkpoint recording unblockedBy,
// reason and the block it cleared. The retry streak, the last error and any
// expired lease are cleared and the request is due at once. A request that
// is not blocked, is terminal, or whose executor lease is still unexpired on
// the database clock is refused with ErrRefused.
func (o *Operator) Unblock(ctx context.Context, id uuid.UUID, unblockedBy, reason string) (*Request, error) {
	unblockedBy, err := validateOperator(unblockedBy, "unblocked_by")
	if err != nil {
		return nil, err
	}
	reason, err = requireReason(reason, "unblock reason")
	if err != nil {
		return nil, err
	}

	var request *Request
	err = o.tx(ctx, func(q *dbgen.Queries) error {
		locked, err := lockRequestWithLease(ctx, q, id)
		if err != nil {
			return err
		}
		current := locked.CommunityDeletionRequest
		switch {
		case current.BlockedAt == nil:
			return refusef("deletion %s is not blocked", id)
		case Stage(current.Stage).Terminal():
			return refusef("deletion %s is at terminal stage %s and cannot resume", id, current.Stage)
		case locked.LeaseLive:
			return refusef("deletion %s still has a live executor lease (owner %q)", id, boundText(deref(current.LeaseOwner), MaxOperatorBytes))
		}
		if err := recordOperatorAudit(ctx, q, &current, "operator_unblock", map[string]any{
			"unblocked_by":   unblockedBy,
			"reason":         reason,
			"previous_block": current.BlockedReason,
		}); err != nil {
			return err
		}
		row, err := q.DeletionRequestUnblock(ctx, id)
		if errors.Is(err, pgx.ErrNoRows) {
			return refusef("deletion %s changed while it was being unblocked", id)
		}
		if err != nil {
			return err
		}
		request, err = requestFromRow(&row)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("unblock deletion %s: %w", id, err)
	}
	return request, nil
}

// BlockBeforeClaim durably blocks request id for a failure that happened
// before any executor claimed it (an executor that cannot even be set up,
// say), with a failed checkpoint unitKey at the request's stage carrying
// errText, which is stored bounded to MaxErrorBytes. It returns the blocked
// request. A terminal request, or one an executor holds an unexpired lease
// on (which must use Block instead), is refused with ErrRefused.
func (e *Engine) BlockBeforeClaim(ctx context.Context, id uuid.UUID, unitKey, errText string) (*Request, error) {
	if err := checkUnitKey(unitKey); err != nil {
		return nil, err
	}
	message := boundText(errText, MaxErrorBytes)

	var request *Request
	err := e.tx(ctx, func(q *dbgen.Queries) error {
		locked, err := lockRequestWithLease(ctx, q, id)
		if err != nil {
			return err
		}
		current := locked.CommunityDeletionRequest
		switch {
		case Stage(current.Stage).Terminal():
			return refusef("deletion %s is at terminal stage %s and cannot record a setup failure", id, current.Stage)
		case locked.LeaseLive:
			return refusef("deletion %s is leased by executor %q", id, boundText(deref(current.LeaseOwner), MaxOperatorBytes))
		}
		if err := checkpointFailed(ctx, q, id, current.LeaseGeneration, Stage(current.Stage), unitKey, message); err != nil {
			return err
		}
		row, err := q.DeletionRequestBlock(ctx, dbgen.DeletionRequestBlockParams{ID: id, Reason: &message})
		if err != nil {
			return fmt.Errorf("block deletion %s: %w", id, err)
		}
		request, err = requestFromRow(&row)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("record setup failure of deletion %s: %w", id, err)
	}
	return request, nil
}

// Block durably blocks the request token holds at stage, with a failed
// checkpoint unitKey carrying errText (stored bounded to MaxErrorBytes), and
// releases the lease: no executor claims it again until an operator calls
// Unblock. A token that no longer holds the request at stage (or under its
// fence generation, from StageFenced on) returns a stale-lease error and
// changes nothing.
func (e *Engine) Block(ctx context.Context, token LeaseToken, params BlockParams) error {
	stage, unitKey, errText := params.Stage, params.Unit, params.Err
	if err := checkExecutionStage(stage); err != nil {
		return err
	}
	if err := checkUnitKey(unitKey); err != nil {
		return err
	}
	message := boundText(errText, MaxErrorBytes)
	err := e.tx(ctx, func(q *dbgen.Queries) error {
		if err := verifyTokenAt(ctx, q, token, stage); err != nil {
			return err
		}
		if err := checkpointFailed(ctx, q, token.RequestID, token.Generation, stage, unitKey, message); err != nil {
			return err
		}
		n, err := q.DeletionRequestBlockLeased(ctx, dbgen.DeletionRequestBlockLeasedParams{
			Reason: &message, ID: token.RequestID, Stage: string(stage),
			LeaseOwner: &token.Owner, LeaseGeneration: token.Generation,
		})
		if err != nil {
			return fmt.Errorf("block: %w", err)
		}
		if n != 1 {
			return staleLease(token)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("block deletion %s at %s: %w", token.RequestID, stage, err)
	}
	return nil
}

// lockRequestForOperator reads request id, takes its community's deletion
// lock and then the request row lock, in that order (the order every
// lifecycle transition uses), and returns the locked row. A missing request
// matches ErrNotFound.
func lockRequestForOperator(ctx context.Context, q *dbgen.Queries, id uuid.UUID) (dbgen.CommunityDeletionRequest, error) {
	first, err := getRequestRow(ctx, q, id)
	if err != nil {
		return first, err
	}
	if err := lockCommunity(ctx, q, first.CommunityID); err != nil {
		return first, err
	}
	row, err := lockRequestRow(ctx, q, id)
	if err != nil {
		return row, err
	}
	if row.CommunityID != first.CommunityID {
		return row, refusef("deletion %s changed community while waiting for the community lock", id)
	}
	return row, nil
}

// lockRequestWithLease locks request id for an operator action that must
// not race an executor, and says whether an executor still holds an
// unexpired lease on it. A missing request matches ErrNotFound.
func lockRequestWithLease(ctx context.Context, q *dbgen.Queries, id uuid.UUID) (dbgen.DeletionRequestGetForOperatorRow, error) {
	locked, err := q.DeletionRequestGetForOperator(ctx, id)
	return locked, requestReadErr(err, "lock", id)
}

// lockRequestRow locks request id FOR UPDATE, or returns an error matching
// ErrNotFound.
func lockRequestRow(ctx context.Context, q *dbgen.Queries, id uuid.UUID) (dbgen.CommunityDeletionRequest, error) {
	row, err := q.DeletionRequestGetForUpdate(ctx, id)
	return row, requestReadErr(err, "lock", id)
}

// getRequestRow reads request id or returns an error matching ErrNotFound.
func getRequestRow(ctx context.Context, q *dbgen.Queries, id uuid.UUID) (dbgen.CommunityDeletionRequest, error) {
	row, err := q.DeletionRequestGet(ctx, id)
	return row, requestReadErr(err, "read", id)
}

// requestReadErr maps the error of reading request id: no row matches
// ErrNotFound; another error is wrapped with what was done (verb).
func requestReadErr(err error, verb string, id uuid.UUID) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return notFoundf("deletion %s", id)
	}
	if err != nil {
		return fmt.Errorf("%s deletion %s: %w", verb, id, err)
	}
	return nil
}

// requestsFromRows converts stored rows, failing closed on the first bad one.
func requestsFromRows(rows []dbgen.CommunityDeletionRequest) ([]*Request, error) {
	requests := make([]*Request, 0, len(rows))
	for i := range rows {
		request, err := requestFromRow(&rows[i])
		if err != nil {
			return nil, err
		}
		requests = append(requests, request)
	}
	return requests, nil
}

// describeStage names a stored request's stage and, when it is, that it is
// blocked.
func describeStage(row *dbgen.CommunityDeletionRequest) string {
	if row.BlockedAt != nil {
		return row.Stage + " and blocked"
	}
	return row.Stage
}

func checkListLimit(limit int) error {
	if limit < 1 || limit > MaxListLimit {
		return invalidf("list limit must be between 1 and %d, not %d", MaxListLimit, limit)
	}
	return nil
}

// requireReason trims an operator's reason and requires one, bounded to
// MaxErrorBytes.
func requireReason(reason, what string) (string, error) {
	reason = strings.TrimFunc(reason, unicode.IsSpace)
	if reason == "" {
		return "", invalidf("%s must not be empty", what)
	}
	return boundText(reason, MaxErrorBytes), nil
}

// checkUnitKey checks a checkpoint unit key the database will accept.
func checkUnitKey(unitKey string) error {
	switch {
	case unitKey == "":
		return invalidf("checkpoint unit key must not be empty")
	case !utf8.ValidString(unitKey) || strings.IndexByte(unitKey, 0) >= 0:
		return invalidf("checkpoint unit key %q is not NUL-free UTF-8", boundText(unitKey, 64))
	case len(unitKey) > MaxOperatorBytes:
		return invalidf("checkpoint unit key is %d bytes long; at most %d are allowed", len(unitKey), MaxOperatorBytes)
	}
	return nil
}

// recordOperatorAudit appends a completed checkpoint '<kind>:<uuid>' at the
// request's stage whose detail records an operator's action.
func recordOperatorAudit(ctx context.Context, q *dbgen.Queries, current *dbgen.CommunityDeletionRequest, kind string, detail map[string]any) error {
	b, err := json.Marshal(detail)
	if err != nil {
		return fmt.Errorf("encode %s audit: %w", kind, err)
	}
	if err := q.DeletionCheckpointInsertCompleted(ctx, dbgen.DeletionCheckpointInsertCompletedParams{
		RequestID: current.ID, Stage: current.Stage, UnitKey: kind + ":" + uuid.NewString(),
		LeaseGeneration: max(current.LeaseGeneration, 1), Detail: b,
	}); err != nil {
		return fmt.Errorf("record %s audit: %w", kind, err)
	}
	return nil
}
