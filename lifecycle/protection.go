package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	dbgen "github.com/tombstoneworks/communitydeletion/db/gen"
)

// ProtectionAction is one step of a community's deletion protection.
type ProtectionAction string

// The protection actions, in the only order the database accepts them.
const (
	// ProtectionSet protects the community: Submit is refused until cleared.
	ProtectionSet ProtectionAction = "set"
	// ProtectionClearRequested asks to clear it; the community stays
	// protected until a second operator approves.
	ProtectionClearRequested ProtectionAction = "clear_requested"
	// ProtectionCleared is the second operator's approval: the community is
	// no longer protected.
	ProtectionCleared ProtectionAction = "cleared"
)

// maxProtectionEvents bounds the history Protection returns.
const maxProtectionEvents = 100

// ProtectionEvent is one audited protection action.
type ProtectionEvent struct {
	// Action is what was done.
	Action ProtectionAction
	// Actor is the operator who did it, and ActorRole their database login.
	Actor     string
	ActorRole string
	// Reason is why.
	Reason string
	// RecordedAt is when, on the database clock.
	RecordedAt time.Time
}

// Protection is a community's deletion protection: whether it is set, and
// its history, newest first (at most 100 events).
type Protection struct {
	// CommunityID is the community.
	CommunityID uuid.UUID
	// Protected is true while the newest event is set or clear_requested.
	Protected bool
	// ClearPending is true while a clear request awaits a second operator.
	ClearPending bool
	// Events is the history, newest first.
	Events []ProtectionEvent
}

// Protect sets community's deletion protection on behalf of by: from then on
// Submit is refused for it, whoever asks. It is refused (ErrRefused) while
// the community is already protected or has an open deletion request.
func (o *Operator) Protect(ctx context.Context, community uuid.UUID, by, reason string) (*Protection, error) {
	return o.protectionEvent(ctx, community, ProtectionSet, by, reason)
}

// RequestUnprotect asks to clear community's deletion protection; it stays
// protected until ApproveUnprotect by a second operator (another name and,
// unless the deployment declared its operators share one, another login).
func (o *Operator) RequestUnprotect(ctx context.Context, community uuid.UUID, by, reason string) (*Protection, error) {
	return o.protectionEvent(ctx, community, ProtectionClearRequested, by, reason)
}

// ApproveUnprotect clears community's deletion protection as the second
// operator of a pending RequestUnprotect. The requester cannot approve their
// own request (ErrRefused); the database enforces the same rule.
func (o *Operator) ApproveUnprotect(ctx context.Context, community uuid.UUID, by, reason string) (*Protection, error) {
	return o.protectionEvent(ctx, community, ProtectionCleared, by, reason)
}

// Protection returns community's deletion protection and its history.
func (o *Operator) Protection(ctx context.Context, community uuid.UUID) (*Protection, error) {
	var p *Protection
	err := o.tx(ctx, func(q *dbgen.Queries) error {
		var err error
		p, err = readProtection(ctx, q, community)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read deletion protection of community %s: %w", community, err)
	}
	return p, nil
}

func (o *Operator) protectionEvent(ctx context.Context, community uuid.UUID, action ProtectionAction, by, reason string) (*Protection, error) {
	by, err := validateOperator(by, "protection actor")
	if err != nil {
		return nil, err
	}
	reason = boundText(strings.TrimFunc(reason, unicode.IsSpace), MaxErrorBytes)
	if reason == "" {
		return nil, invalidf("a protection %s needs a reason", action)
	}
	var p *Protection
	err = o.tx(ctx, func(q *dbgen.Queries) error {
		if _, err := q.ProtectionEventInsert(ctx, dbgen.ProtectionEventInsertParams{
			CommunityID: community, Action: string(action), Actor: by, Reason: reason,
		}); err != nil {
			return err
		}
		p, err = readProtection(ctx, q, community)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("deletion protection %s of community %s: %w", action, community, err)
	}
	return p, nil
}

func readProtection(ctx context.Context, q *dbgen.Queries, community uuid.UUID) (*Protection, error) {
	if _, err := q.CommunityGetByID(ctx, community); errors.Is(err, pgx.ErrNoRows) {
		return nil, notFoundf("community %s", community)
	} else if err != nil {
		return nil, fmt.Errorf("read community: %w", err)
	}
	rows, err := q.ProtectionEventsByCommunity(ctx, dbgen.ProtectionEventsByCommunityParams{
		CommunityID: community, MaxEvents: maxProtectionEvents,
	})
	if err != nil {
		return nil, fmt.Errorf("read protection events: %w", err)
	}
	p := &Protection{CommunityID: community, Events: make([]ProtectionEvent, 0, len(rows))}
	for _, row := range rows {
		p.Events = append(p.Events, ProtectionEvent{
			Action: ProtectionAction(row.Action), Actor: row.Actor, ActorRole: row.ActorRole,
			Reason: row.Reason, RecordedAt: row.RecordedAt,
		})
	}
	if len(p.Events) > 0 {
		newest := p.Events[0].Action
		p.Protected = newest == ProtectionSet || newest == ProtectionClearRequested
		p.ClearPending = newest == ProtectionClearRequested
	}
	return p, nil
}

// CommunityTenantKey returns the tenant key of community: its id for a
// uuid tenant, else the key its declared tenant table records. It only
// reads; a missing community returns an error matching ErrNotFound.
func (o *Operator) CommunityTenantKey(ctx context.Context, community uuid.UUID) (TenantKey, error) {
	var key TenantKey
	err := o.tx(ctx, func(q *dbgen.Queries) error {
		row, err := q.CommunityGetByID(ctx, community)
		if errors.Is(err, pgx.ErrNoRows) {
			return notFoundf("community %s", community)
		}
		if err != nil {
			return fmt.Errorf("read community: %w", err)
		}
		key = tenantKeyOf(row.ID, row.TenantKey)
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("tenant key of community %s: %w", community, err)
	}
	return key, nil
}

// CommunityByHost returns the id of the community whose host is host
// (compared case-insensitively), or an error matching ErrNotFound.
func (o *Operator) CommunityByHost(ctx context.Context, host string) (uuid.UUID, error) {
	host, err := validateOperator(host, "community host")
	if err != nil {
		return uuid.Nil, err
	}
	var id uuid.UUID
	err = o.tx(ctx, func(q *dbgen.Queries) error {
		row, err := q.CommunityGetByHost(ctx, host)
		if errors.Is(err, pgx.ErrNoRows) {
			return notFoundf("no community has host %q", boundText(host, 256))
		}
		if err != nil {
			return fmt.Errorf("read community: %w", err)
		}
		id = row.ID
		return nil
	})
	if err != nil {
		return uuid.Nil, fmt.Errorf("look up community %q: %w", boundText(host, 256), err)
	}
	return id, nil
}
