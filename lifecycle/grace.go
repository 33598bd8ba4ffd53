package lifecycle

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"

	dbgen "github.com/tombstoneworks/communitydeletion/db/gen"
)

// MaxGracePeriod is the longest grace period an approval or the deployment's
// default may set; the database refuses more (23514).
const MaxGracePeriod = 30 * 24 * time.Hour

// ApproveParams are the arguments of ApproveWithParams.
type ApproveParams struct {
	// ApprovedBy is the approving operator; never the submitter.
	ApprovedBy string
	// Note is optional.
	Note string
	// GracePeriod, when not nil, is how long after the approval the request
	// waits before anything is quiesced or fenced: zero runs it at once, at
	// most MaxGracePeriod. Nil takes the deployment's default
	// (community_deletion_settings.default_grace_period, zero unless set).
	GracePeriod *time.Duration
}

// ApproveWithParams is Approve with a grace period. During the grace period
// the executor does not claim the request, the database refuses to quiesce
// or fence its community whoever asks, and Abort leaves the community as it
// was; Request.GraceUntil says when it ends.
func (o *Operator) ApproveWithParams(ctx context.Context, id uuid.UUID, params ApproveParams) (*Request, error) {
	grace := pgtype.Interval{}
	if params.GracePeriod != nil {
		d := *params.GracePeriod
		if d < 0 || d > MaxGracePeriod {
			return nil, fmt.Errorf("approve deletion %s: %w", id,
				invalidf("grace period %s is outside 0 to %s; choose a shorter one", d, MaxGracePeriod))
		}
		grace = pgtype.Interval{Microseconds: d.Microseconds(), Valid: true}
	}
	return o.approve(ctx, id, params.ApprovedBy, params.Note, grace)
}

// fillGraceUntil sets GraceUntil on the requests that have an approval with
// a grace period, in one query.
func fillGraceUntil(ctx context.Context, q *dbgen.Queries, requests ...*Request) error {
	ids := make([]uuid.UUID, 0, len(requests))
	for _, r := range requests {
		if r != nil {
			ids = append(ids, r.ID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	rows, err := q.DeletionApprovalGraceUntil(ctx, ids)
	if err != nil {
		return fmt.Errorf("read grace periods: %w", err)
	}
	ends := make(map[uuid.UUID]*time.Time, len(rows))
	for _, row := range rows {
		ends[row.RequestID] = row.GraceUntil
	}
	for _, r := range requests {
		if r != nil {
			r.GraceUntil = ends[r.ID]
		}
	}
	return nil
}

// RequestsInGrace counts the approved, unblocked requests whose grace period
// has not ended: the requests the executor leaves alone for now.
func (e *Engine) RequestsInGrace(ctx context.Context) (int64, error) {
	var n int64
	err := e.tx(ctx, func(q *dbgen.Queries) error {
		var err error
		n, err = q.DeletionRequestsInGrace(ctx)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("count requests in grace: %w", err)
	}
	return n, nil
}
