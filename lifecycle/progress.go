package lifecycle

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	dbgen "github.com/tombstoneworks/communitydeletion/db/gen"
)

// PurgeTableProgress is the PostgreSQL purge's recorded progress on one
// registered table of a request.
type PurgeTableProgress struct {
	// Table is the registered table.
	Table string
	// Action is "delete" (unit "purge:<table>") or "nullify" (unit
	// "nullify:<table>").
	Action string
	// Rows is the rows deleted (or cleared) so far, across every run.
	Rows int64
	// Done is set once the table is finished.
	Done bool
	// UpdatedAt is when the purge last recorded this table, on the database
	// clock.
	UpdatedAt time.Time
}

// Progress is the recorded destructive progress of one request, the data an
// estimate of what is left is computed from. It is read in one read-only
// transaction.
type Progress struct {
	// Now is the database clock when it was read; every time here is on it.
	Now time.Time
	// Purge is the purge's progress per table, oldest update first.
	Purge []PurgeTableProgress
	// ChunkStamps are the times the deleted manifest key chunks were stamped,
	// oldest first (empty before the deletion and again after logical
	// verification drops the chunks).
	ChunkStamps []time.Time
}

// Progress returns request id's recorded purge progress per table and the
// stamps of its deleted key chunks, read-only, or an error matching
// ErrNotFound.
func (o *Operator) Progress(ctx context.Context, id uuid.UUID) (*Progress, error) {
	var progress *Progress
	err := o.begin(ctx, true, func(tx pgx.Tx) error {
		q := dbgen.New(tx)
		if _, err := getRequestRow(ctx, q, id); err != nil {
			return err
		}
		now, err := q.ProgressDatabaseNow(ctx)
		if err != nil {
			return fmt.Errorf("read the database clock: %w", err)
		}
		tables, err := purgeTables(ctx, q, id)
		if err != nil {
			return err
		}
		stamps, err := q.ProgressChunkStamps(ctx, id)
		if err != nil {
			return fmt.Errorf("list chunk stamps: %w", err)
		}
		p := &Progress{Now: now, Purge: tables, ChunkStamps: make([]time.Time, 0, len(stamps))}
		for _, st := range stamps {
			p.ChunkStamps = append(p.ChunkStamps, st.DeletedAt)
		}
		progress = p
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("progress of deletion %s: %w", id, err)
	}
	return progress, nil
}

// PurgeProgress returns request id's recorded purge progress per table,
// oldest update first (none before the purge starts). The executor reads it
// to count only the rows a run purges itself.
func (e *Engine) PurgeProgress(ctx context.Context, id uuid.UUID) ([]PurgeTableProgress, error) {
	var tables []PurgeTableProgress
	err := e.begin(ctx, true, func(tx pgx.Tx) error {
		var err error
		tables, err = purgeTables(ctx, dbgen.New(tx), id)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("purge progress of deletion %s: %w", id, err)
	}
	return tables, nil
}

// purgeTables reads the purge's progress rows of request id.
func purgeTables(ctx context.Context, q *dbgen.Queries, id uuid.UUID) ([]PurgeTableProgress, error) {
	rows, err := q.ProgressPurgeUnits(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("list purge progress: %w", err)
	}
	tables := make([]PurgeTableProgress, 0, len(rows))
	for _, r := range rows {
		action, table, ok := strings.Cut(r.UnitKey, ":")
		if action == "purge" {
			action = "delete"
		}
		if !ok || (action != "delete" && action != "nullify") {
			return nil, refusef("purge progress unit %q is neither purge:<table> nor nullify:<table>", boundText(r.UnitKey, 128))
		}
		tables = append(tables, PurgeTableProgress{Table: table, Action: action, Rows: r.RowCount, Done: r.Done, UpdatedAt: r.UpdatedAt})
	}
	return tables, nil
}

// HealthFinding is one row of community_deletion_health(): a prepared
// transaction holding an advisory lock of the database.
type HealthFinding struct {
	// Subject names what is unhealthy ("prepared transaction <gid>").
	Subject string
	// Problem classifies it ("prepared_lock").
	Problem string
	// Detail says what it holds, since when and who owns it.
	Detail string
}

// DriftFinding is one row of community_deletion_catalog_drift().
type DriftFinding struct {
	// Table is the table (or function, or guard) at fault.
	Table string
	// Problem is the drift class ("unregistered", "unfenced", …).
	Problem string
}

// ExcludedTable is a table that looks like tenant data but that its owner
// excluded from the deletion with community_deletion.exclude_table(): the
// drift report does not flag it, and a deletion leaves its rows alone.
type ExcludedTable struct {
	// Table is the table, schema-qualified.
	Table string
	// Reason is why its owner excluded it.
	Reason string
	// ExcludedBy is the login that excluded it.
	ExcludedBy string
}

// HealthReport is what community_deletion_health() and the catalog drift
// report find; both empty means healthy. Excluded lists, for the record,
// the tables their owners excluded; they do not make it unhealthy.
type HealthReport struct {
	Findings []HealthFinding
	Drift    []DriftFinding
	Excluded []ExcludedTable
}

// Healthy reports whether neither report found anything.
func (r *HealthReport) Healthy() bool { return len(r.Findings) == 0 && len(r.Drift) == 0 }

// Health runs community_deletion_health() and community_deletion_catalog_drift()
// in one read-only transaction and returns their rows. Any drift row stops
// every deletion from destroying anything until it is fixed.
func (o *Operator) Health(ctx context.Context) (*HealthReport, error) {
	report := &HealthReport{Findings: []HealthFinding{}, Drift: []DriftFinding{}, Excluded: []ExcludedTable{}}
	err := o.begin(ctx, true, func(tx pgx.Tx) error {
		q := dbgen.New(tx)
		findings, err := q.HealthFindings(ctx)
		if err != nil {
			return fmt.Errorf("community_deletion_health(): %w", err)
		}
		for _, f := range findings {
			report.Findings = append(report.Findings, HealthFinding{Subject: f.Subject, Problem: f.Problem, Detail: f.Detail})
		}
		drift, err := q.CatalogDriftList(ctx)
		if err != nil {
			return fmt.Errorf("community_deletion_catalog_drift(): %w", err)
		}
		for _, d := range drift {
			report.Drift = append(report.Drift, DriftFinding{Table: d.TableName, Problem: d.Problem})
		}
		excluded, err := q.CatalogExcludedTables(ctx)
		if err != nil {
			return fmt.Errorf("list excluded tables: %w", err)
		}
		for _, e := range excluded {
			report.Excluded = append(report.Excluded, ExcludedTable{Table: e.TableName, Reason: e.Reason, ExcludedBy: e.ExcludedBy})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("health: %w", catalogMissing(err))
	}
	return report, nil
}
