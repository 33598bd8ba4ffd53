package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	dbgen "github.com/tombstoneworks/communitydeletion/db/gen"
)

// Defaults of PurgeOptions.
const (
	// DefaultPurgeTxBudget is the time each purge transaction aims at.
	DefaultPurgeTxBudget = 100 * time.Millisecond
	// DefaultPurgeMaxRowsPerTx caps the rows one purge transaction deletes.
	DefaultPurgeMaxRowsPerTx = 50000
)

const (
	// purgeStartRows is the first batch of a table no other table
	// references: its rows cost about the same each, so a modest start
	// grows to the budget in a few batches.
	purgeStartRows = 1000
	// purgeStartReferencedRows is the first batch of a table that other
	// tables reference. Each of its rows costs a foreign key check per
	// referencing table, which without an index on the referencing columns
	// is a scan of that whole table, so it starts tiny and grows.
	purgeStartReferencedRows = 4
	// purgeStartWindow is the first TID range window, in line pointer
	// slots (a few blocks).
	purgeStartWindow = 1024
	// purgeMaxWindow bounds a TID range window, in slots (some 3,600 blocks
	// of 8 kB).
	purgeMaxWindow = 1 << 20
	// purgeMaxGrowth bounds how fast a batch grows from one to the next.
	purgeMaxGrowth = 4
	// purgeStatementCapFactor times TxBudget is a batch's statement cap
	// (statement_timeout): an estimate that overshot, a region of the heap
	// denser than the one the window was sized on, cannot hold a batch
	// transaction open for longer than about that.
	purgeStatementCapFactor = 2
	// purgeCapShrink is how much smaller a batch cancelled at its cap is
	// tried again.
	purgeCapShrink = 4
	// purgeMaxPasses bounds how often the purge re-plans when its final
	// proof still finds rows (a table registered meanwhile, rows moved).
	purgeMaxPasses = 3
	// purgeDDLLockTimeout bounds how long DETACH PARTITION waits for its
	// ACCESS EXCLUSIVE lock on the partitioned table, while queueing every
	// other user of that table behind itself.
	purgeDDLLockTimeout = "2s"
	// purgeDDLAttempts is how often a lock-timed-out DETACH is tried.
	purgeDDLAttempts = 3
)

// Checkpoint units of the purge, all at StageBindingsRemoved.
const (
	purgeUnitPrefix    = "purge:"
	nullifyUnitPrefix  = "nullify:"
	purgeTombstoneUnit = "postgres_tombstone_committed"
	purgeActionDelete  = "delete"
	purgeActionNullify = "nullify"
)

// PurgeMethod selects how a table's rows are cut into batches.
type PurgeMethod string

// The batch mechanics. The zero value, PurgeMethodAuto, picks per table from
// the catalog; the others force one mechanic wherever the table allows it
// (and fall back as Auto does where it does not), for benchmarks and tests.
const (
	// PurgeMethodAuto uses PurgeMethodKeyset where the table has a primary
	// key column besides its tenant key (community_id unless attach named
	// another) and an index on (tenant key, that column); else
	// PurgeMethodCommunityCTID where an index leads with the tenant key;
	// else PurgeMethodTIDRange. A table attached through its parents
	// starts with PurgeMethodCommunityCTID through its parents' rows and
	// turns to PurgeMethodTIDRange once those batches' time per row has
	// grown (PurgeResult.HeapWalks names it).
	PurgeMethodAuto PurgeMethod = ""
	// PurgeMethodKeyset walks a keyset cursor over (tenant key, key): each
	// batch finds the key N rows past the cursor with an index-only scan and
	// deletes the key range up to it, so no batch revisits the index
	// entries an earlier batch left dead.
	PurgeMethodKeyset PurgeMethod = "keyset"
	// PurgeMethodKeysetCTID is the keyset cursor deleting by the batch's
	// row addresses: DELETE ... WHERE ctid = ANY(ARRAY(SELECT ctid ...
	// ORDER BY key LIMIT N)).
	PurgeMethodKeysetCTID PurgeMethod = "keyset-ctid"
	// PurgeMethodKeysetArray is the keyset cursor deleting by the batch's
	// keys: DELETE ... WHERE key = ANY(ARRAY(SELECT key ... LIMIT N)).
	PurgeMethodKeysetArray PurgeMethod = "keyset-array"
	// PurgeMethodCommunityCTID deletes the first N rows the community index
	// yields, by address, with no cursor.
	PurgeMethodCommunityCTID PurgeMethod = "community-ctid"
	// PurgeMethodTIDRange walks each heap (each leaf partition) in windows
	// of row addresses (TID range scans, PostgreSQL 14+) and deletes up to N
	// of the community's rows from each, resuming after the last. Its cost
	// follows the size of the heap, not the community's share of it.
	PurgeMethodTIDRange PurgeMethod = "tid-range"
)

// PurgeOptions bounds the transactions of PurgePostgres.
type PurgeOptions struct {
	// TxBudget is the time each batch transaction aims at; the batch size
	// grows while transactions finish faster and shrinks when they run
	// slower. A batch's statements are cancelled at twice the budget
	// (statement_timeout, or the session's own where shorter), and the
	// batch, rolled back, is tried again a quarter the size; one of a
	// single row that still overruns is tried without the cap, as are the
	// batches after it until one fits. Zero means DefaultPurgeTxBudget.
	TxBudget time.Duration
	// MaxRowsPerTx caps the rows one batch transaction deletes or clears.
	// Zero means DefaultPurgeMaxRowsPerTx.
	MaxRowsPerTx int
	// Progress, if not nil, is called after every committed batch with the
	// rows so far of its table, on the purging goroutine.
	Progress func(PurgeProgress)
	// Method forces the batch mechanics; the zero value picks per table.
	Method PurgeMethod
	// MaxReplicationLag pauses the purge before a batch while a streaming
	// replica's replay lag exceeds it (pg_stat_replication, through
	// community_deletion_purge_pressure(), looked at before the first
	// batch and then at most once a second). Zero means
	// DefaultMaxReplicationLag; negative disables the check.
	MaxReplicationLag time.Duration
	// MaxRowsPerSecond caps the purge's average rate over the call, for a
	// gentle deletion; zero means no cap.
	MaxRowsPerSecond float64
	// NiceRatio is a relative throttle: after each batch the purge sleeps
	// NiceRatio times that batch's own duration (read on Clock), so it
	// takes at most 1/(1+NiceRatio) of the time on the database and slows
	// down by itself when the database is busy. Zero means no sleep; it
	// must be finite and not negative. With MaxRowsPerSecond, the longer
	// wait wins; the headroom pauses come on top.
	NiceRatio float64
	// MaxPause bounds one pause (for replication lag or wraparound
	// vacuum): past it the purge stops with a *PurgePausedError, which the
	// executor records as a retry. Zero means DefaultMaxPause.
	MaxPause time.Duration
	// Clock is what the rate cap and NiceRatio read the time from and sleep
	// on; nil is the wall clock. A test gives one of its own to decide when
	// the cap holds a batch back and how long a batch took, whatever the
	// host's speed.
	Clock PurgeClock
}

// PurgeClock is the time source of a purge's rate cap and nice ratio.
type PurgeClock interface {
	// Now returns the current time.
	Now() time.Time
	// Sleep waits for d, or until ctx is done (then it returns ctx.Err()).
	Sleep(ctx context.Context, d time.Duration) error
}

// wallClock is the PurgeClock of the wall clock.
type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

func (wallClock) Sleep(ctx context.Context, d time.Duration) error { return sleepCtx(ctx, d) }

// Defaults of the purge's throttle.
const (
	// DefaultMaxReplicationLag is the replay lag a purge pauses above.
	DefaultMaxReplicationLag = 5 * time.Second
	// DefaultMaxPause bounds one pause of a purge.
	DefaultMaxPause = 5 * time.Minute
	// purgePausePoll is how often a paused purge looks again.
	purgePausePoll = 200 * time.Millisecond
	// purgeHeadroomRecheck is how long a look that found headroom holds
	// before a batch looks again, as pt-archiver's --check-interval: a
	// look reads pg_stat_replication and pg_stat_activity, which cost
	// about as much as a small batch.
	purgeHeadroomRecheck = time.Second
)

// PurgePausedError reports a purge that paused longer than its MaxPause
// and stopped, changing nothing more: retry later. It is not a refusal.
type PurgePausedError struct {
	// Reason is why it paused, e.g. "replication lag 12s above 5s".
	Reason string
	// Paused is how long it waited.
	Paused time.Duration
}

// Error says why the purge stopped.
func (e *PurgePausedError) Error() string {
	return fmt.Sprintf("purge paused for %s (%s); stopped to retry later", e.Paused.Round(time.Millisecond), e.Reason)
}

// PurgeProgress reports one committed batch.
type PurgeProgress struct {
	// Table is the registered table the batch worked on.
	Table string
	// Rows is the rows deleted (or, for a 'nullify' table, cleared) from
	// Table so far, across every run of this request's purge.
	Rows int64
	// Done is set on the batch that finished the table. (Should the proof
	// that follows still find a row, the table is walked again and reported
	// again.)
	Done bool
	// Paused, when not empty, says why the purge is waiting before its next
	// batch of Table, and PausedFor names the causes; Rows is then
	// unchanged.
	Paused    string
	PausedFor []PurgePauseCause
	// OverCap is set when a batch of Table ran past its statement cap
	// (twice TxBudget) and was rolled back; Rows is then unchanged, and
	// the next batch of Table is smaller, or, after a batch of one row,
	// runs without the cap.
	OverCap bool
}

// PurgePauseCause names why a purge waits before a batch.
type PurgePauseCause string

// The causes of a purge's pause.
const (
	// PauseRateCap: PurgeOptions.MaxRowsPerSecond holds the next batch back.
	PauseRateCap PurgePauseCause = "rate_cap"
	// PauseReplicationLag: a streaming replica's replay lag is above
	// PurgeOptions.MaxReplicationLag.
	PauseReplicationLag PurgePauseCause = "replication_lag"
	// PauseWraparoundVacuum: an anti-wraparound autovacuum works on a
	// table the purge deletes from.
	PauseWraparoundVacuum PurgePauseCause = "wraparound_vacuum"
)

// PurgeResult describes a completed purge.
type PurgeResult struct {
	// Deleted is the rows deleted per registered 'delete' table, across
	// every run of this request's purge (rows an ON DELETE CASCADE removed
	// are counted by neither table).
	Deleted map[string]int64
	// Nullified is the rows whose community_id was cleared per registered
	// 'nullify' table, across every run.
	Nullified map[string]int64
	// Dropped are the per-tenant sequences the storage layout declares that
	// the final transaction dropped, qualified (storage layout kind
	// sequence).
	Dropped []string
	// Batches is the batch transactions this call committed.
	Batches int
	// OverCapBatches is the batch transactions this call rolled back at
	// their statement cap and tried again smaller (see TxBudget).
	OverCapBatches int
	// Niced is how long this call slept for PurgeOptions.NiceRatio, on its
	// clock.
	Niced time.Duration
	// HeapWalks names the tables attached through their parents whose
	// batches by their parents grew slow, and which this call walked by
	// their heap instead (see PurgeMethodAuto).
	HeapWalks []string
	// LongestTx is the longest transaction this call ran, the final one
	// included, waits for locks included, and LongestTxWork says what it
	// did (e.g. "batch of messages", "sweep of messages", "final proof").
	LongestTx     time.Duration
	LongestTxWork string
	// FinalTx is the final transaction's duration, waits for locks
	// included: the catalog check, the tombstone and its proof, which
	// walks what the batches left in the indexes. Zero when this call did
	// not commit it.
	FinalTx time.Duration
}

// EnterPostgresPurged purges the community of a request at StageBindingsRemoved
// from every registered table, in bounded batches, and finally makes the
// community a tombstone and advances the request to StagePostgresPurged.
//
// Every batch is a short transaction of its own: it takes the shared
// schema-destruction lock, proves token current at bindings_removed under
// its fence generation, acts as the authorized executor, deletes (or, for a
// 'nullify' table, clears community_id of) at most a batch of the
// community's rows from one table, and checkpoints the table's rows so far
// as unit "purge:<table>" (or "nullify:<table>"). The batch size adapts to
// opts.TxBudget. Tables go child before parent along the foreign keys among
// them; a partition holding exactly this community goes whole, by DETACH
// PARTITION and DROP TABLE. The final transaction validates the catalog,
// proves that no registered table holds a row of the community, clears
// stragglers in 'nullify' tables, writes the tombstone, advances the
// request and checkpoints "postgres_tombstone_committed" with the counts.
//
// After a crash or an error, calling PurgePostgres again (with a newer
// claim's token) continues where the checkpoints left off. A token that is
// not current is refused with ErrStaleLease before anything is deleted;
// catalog drift, a foreign-key cycle no ON DELETE action breaks, and rows
// outside the community that still reference it are refused with
// ErrRefused. The lease must stay current for the whole call: the caller
// heartbeats it.
func (e *Engine) EnterPostgresPurged(ctx context.Context, token LeaseToken, opts PurgeOptions) (*PurgeResult, error) {
	generation, err := requireFence(token)
	if err != nil {
		return nil, err
	}
	if opts.TxBudget <= 0 {
		opts.TxBudget = DefaultPurgeTxBudget
	}
	if opts.MaxRowsPerTx <= 0 {
		opts.MaxRowsPerTx = DefaultPurgeMaxRowsPerTx
	}
	switch opts.Method {
	case PurgeMethodAuto, PurgeMethodKeyset, PurgeMethodKeysetCTID, PurgeMethodKeysetArray,
		PurgeMethodCommunityCTID, PurgeMethodTIDRange:
	default:
		return nil, invalidf("unknown purge method %q", boundText(string(opts.Method), 64))
	}
	if err := CheckNiceRatio(opts.NiceRatio); err != nil {
		return nil, err
	}
	if opts.Clock == nil {
		opts.Clock = wallClock{}
	}
	run := &purgeRun{
		store: e.store, token: token, generation: generation, opts: opts, started: opts.Clock.Now(),
		result: &PurgeResult{Deleted: map[string]int64{}, Nullified: map[string]int64{}},
	}
	for pass := 1; ; pass++ {
		plan, err := run.plan(ctx, pass > 1)
		if err != nil {
			return nil, err
		}
		for _, t := range plan.nullify {
			if err := run.purgeTable(ctx, t); err != nil {
				return nil, err
			}
		}
		for _, t := range plan.delete {
			if err := run.purgeTable(ctx, t); err != nil {
				return nil, err
			}
		}
		remaining, err := run.finish(ctx)
		if err != nil {
			return nil, err
		}
		if len(remaining) == 0 {
			return run.result, nil
		}
		if pass == purgeMaxPasses {
			return nil, refusef("purge of community %s: rows remain in %s after %d passes",
				token.CommunityID, strings.Join(remaining, ", "), pass)
		}
	}
}

// CheckNiceRatio refuses a PurgeOptions.NiceRatio that is negative, NaN
// or infinite, with ErrInvalidInput.
func CheckNiceRatio(ratio float64) error {
	if math.IsNaN(ratio) || math.IsInf(ratio, 0) || ratio < 0 {
		return invalidf("purge nice ratio %g refused: it must be a finite number, 0 or more (0: no sleep between batches)", ratio)
	}
	return nil
}

// CheckPostgresPurged proves, for a request at StageCachePurged,
// that the community is its fence generation's tombstone and that no
// registered table, 'delete' or 'nullify', holds a row of it. It runs under
// the shared schema-destruction lock after validating the catalog, so a
// table created since the purge cannot escape the proof. Any failure is
// refused with ErrRefused naming the table; it changes nothing.
func (e *Engine) CheckPostgresPurged(ctx context.Context, token LeaseToken) error {
	generation, err := requireFence(token)
	if err != nil {
		return err
	}
	return purgeTx(ctx, e.store, func(tx pgx.Tx, q *dbgen.Queries) error {
		if err := lockSchemaShared(ctx, q); err != nil {
			return err
		}
		if err := purgeValidateCatalog(ctx, q); err != nil {
			return err
		}
		if err := verifyLeaseAndFence(ctx, q, token, StageCachePurged); err != nil {
			return err
		}
		tombstoned, err := q.PurgeCommunityTombstoned(ctx, dbgen.PurgeCommunityTombstonedParams{
			ID: token.CommunityID, FenceGeneration: generation,
		})
		if err != nil {
			return fmt.Errorf("read the tombstone of community %s: %w", token.CommunityID, err)
		}
		if !tombstoned {
			return refusef("community %s is not the tombstone of fence generation %d", token.CommunityID, generation)
		}
		shapes, err := q.PurgeTableShapes(ctx)
		if err != nil {
			return fmt.Errorf("list registered tables: %w", err)
		}
		if err := q.PurgeSeqScanSet(ctx, "off"); err != nil {
			return fmt.Errorf("set enable_seqscan: %w", err)
		}
		for _, shape := range shapes {
			remains, err := purgeRowsRemain(ctx, tx, shape, token)
			if err != nil {
				return err
			}
			if remains {
				return refusef("logical verification of community %s found its rows in %s (%s)",
					token.CommunityID, shape.TableName, shape.PurgeAction)
			}
		}
		return nil
	})
}

// purgeRun is one call of PurgePostgres.
type purgeRun struct {
	store      *store
	token      LeaseToken
	generation int64
	opts       PurgeOptions
	result     *PurgeResult
	// started and rows are the call's start and the rows it deleted or
	// cleared so far, for the rate cap.
	started time.Time
	rows    int64
	// headroomAt is when a look last found headroom (zero: never).
	headroomAt time.Time
}

// purgePlan is the work of one pass, read in one transaction.
type purgePlan struct {
	nullify []*purgeTable
	delete  []*purgeTable
}

// purgeTable is one registered table and how its rows are batched.
type purgeTable struct {
	name, schema string
	action       string
	partitioned  bool
	// tenant is the table's declared tenant key column (community_id
	// unless attach named another), or "" for a table attached through its
	// parents (child).
	tenant string
	// keyCast is the type the tenant key's text is cast to for comparing
	// with the tenant column.
	keyCast string
	// filter selects the tenant's rows, $1 being its key as text
	// (community_deletion_tenant_filter()).
	filter string
	// child is set for a table attached through its parents.
	child bool
	// key is the primary key column besides the tenant key, or "".
	key string
	// method is the resolved batch mechanic.
	method PurgeMethod
	// referenced is set when a foreign key references the table.
	referenced bool
	// selfRefs are the hard foreign keys from the table to itself.
	selfRefs []dbgen.PurgeForeignKeysRow
	// partitions hold exactly this community.
	partitions []dbgen.PurgeCommunityPartitionsRow
	// dependents are the tables attached through the rows of this one that
	// reference them: each batch deletes their rows that no other row
	// references any more, in the same statement.
	dependents []purgeDependent

	// rows so far, from the checkpoint, then counted on.
	rows int64
	// done is set when the checkpoint (or this run) finished the table.
	done bool
}

func (t *purgeTable) unit() string {
	if t.action == purgeActionNullify {
		return nullifyUnitPrefix + t.name
	}
	return purgeUnitPrefix + t.name
}

func (t *purgeTable) ident() string { return pgx.Identifier{t.schema, t.name}.Sanitize() }

// tenantCol is the table's tenant key column, quoted as an identifier.
func (t *purgeTable) tenantCol() string { return pgx.Identifier{t.tenant}.Sanitize() }

// purgeDependent is a table attached through the rows of another that
// reference it (attach_child_table(..., referenced_by)).
type purgeDependent struct {
	table *purgeTable
	// column is its referenced column; via is the referencing column of
	// the table whose batch deletes it.
	column, via string
	// referrers are every registered table and column that reference it
	// (the batch's own table among them): a row any of them still
	// references stays.
	referrers []dbgen.PurgeReverseReferencesRow
}

// purgeCheckpoint is the detail of a per-table purge checkpoint.
type purgeCheckpoint struct {
	Rows int64 `json:"rows"`
	Done bool  `json:"done"`
}

// purgeTx runs fn in one READ COMMITTED transaction, as Store.tx does, with
// the transaction itself for the dynamic per-table statements.
func purgeTx(ctx context.Context, s *store, fn func(tx pgx.Tx, q *dbgen.Queries) error) error {
	return s.begin(ctx, false, func(tx pgx.Tx) error { return fn(tx, dbgen.New(tx)) })
}

// tx runs fn as one purge transaction: the shared schema-destruction lock
// first; then, with validate, the catalog checked against the registry;
// then the token proven current at bindings_removed under its fence
// generation; then the executor settings. It records the transaction's
// duration.
func (r *purgeRun) tx(ctx context.Context, work string, validate bool, fn func(tx pgx.Tx, q *dbgen.Queries) error) (time.Duration, error) {
	start := time.Now()
	err := purgeTx(ctx, r.store, func(tx pgx.Tx, q *dbgen.Queries) error {
		if err := lockSchemaShared(ctx, q); err != nil {
			return err
		}
		if validate {
			if err := purgeValidateCatalog(ctx, q); err != nil {
				return err
			}
		}
		if err := verifyLeaseAndFence(ctx, q, r.token, StageBindingsRemoved); err != nil {
			return err
		}
		if err := setExecutor(ctx, q, r.token.CommunityID, r.generation); err != nil {
			return err
		}
		return fn(tx, q)
	})
	elapsed := time.Since(start)
	r.noteTx(work, elapsed)
	return elapsed, err
}

// noteTx keeps the longest transaction's duration and work.
func (r *purgeRun) noteTx(work string, elapsed time.Duration) {
	if elapsed > r.result.LongestTx {
		r.result.LongestTx, r.result.LongestTxWork = elapsed, work
	}
}

// purgeValidateCatalog refuses when the live catalog differs from the
// registry.
func purgeValidateCatalog(ctx context.Context, q *dbgen.Queries) error {
	drift, err := q.CatalogDriftList(ctx)
	if err != nil {
		return fmt.Errorf("check catalog drift: %w", err)
	}
	if len(drift) == 0 {
		return nil
	}
	problems := make([]string, 0, len(drift))
	for _, d := range drift {
		problems = append(problems, d.TableName+" ("+d.Problem+")")
	}
	return refusef("catalog drift: %s", strings.Join(problems, ", "))
}

// precheckCatalog runs the parts of the catalog check one transaction each
// and refuses on any drift they find. The plan's transaction still runs the
// whole check: these only move the cost of a cold session (planning the
// check's queries, loading the catalog caches, about twice a warm check's
// time) out of it, so that no one transaction carries the whole check cold.
// The two small parts run first: the catalog caches they load are the
// registered tables' part's too, which is the largest and would otherwise
// carry them alone (at 100,000 rows on a quiet host its transaction took
// 114 ms when first, 74-78 ms when last).
func (r *purgeRun) precheckCatalog(ctx context.Context) error {
	parts := []struct {
		work string
		list func(q *dbgen.Queries) ([]catalogProblem, error)
	}{
		{"catalog pre-check of copies", func(q *dbgen.Queries) ([]catalogProblem, error) {
			rows, err := q.CatalogDriftOfCopies(ctx)
			return catalogProblems(rows, func(d dbgen.CatalogDriftOfCopiesRow) catalogProblem { return catalogProblem(d) }), err
		}},
		{"catalog pre-check of untrusted code", func(q *dbgen.Queries) ([]catalogProblem, error) {
			rows, err := q.CatalogUntrustedCode(ctx)
			return catalogProblems(rows, func(d dbgen.CatalogUntrustedCodeRow) catalogProblem { return catalogProblem(d) }), err
		}},
		{"catalog pre-check of the registered tables", func(q *dbgen.Queries) ([]catalogProblem, error) {
			rows, err := q.CatalogDriftOfTables(ctx)
			return catalogProblems(rows, func(d dbgen.CatalogDriftOfTablesRow) catalogProblem { return catalogProblem(d) }), err
		}},
	}
	for _, part := range parts {
		_, err := r.tx(ctx, part.work, false, func(_ pgx.Tx, q *dbgen.Queries) error {
			problems, err := part.list(q)
			if err != nil {
				return fmt.Errorf("%s: %w", part.work, err)
			}
			if len(problems) == 0 {
				return nil
			}
			texts := make([]string, 0, len(problems))
			for _, p := range problems {
				texts = append(texts, p.TableName+" ("+p.Problem+")")
			}
			return refusef("catalog drift: %s", strings.Join(texts, ", "))
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// catalogProblem is one row of a part of the catalog check.
type catalogProblem struct {
	TableName string
	Problem   string
}

func catalogProblems[T any](rows []T, conv func(T) catalogProblem) []catalogProblem {
	out := make([]catalogProblem, 0, len(rows))
	for _, row := range rows {
		out = append(out, conv(row))
	}
	return out
}

// purgeCheckTableCode refuses, rolling the batch back, when the batch's
// statement on table ran code that no one trusted: a trigger, rule or
// expression of the table's owner calling functions of its own, planted
// after the plan's drift check. It reads the catalog after the statement,
// whose lock keeps such code from appearing until the batch commits.
func purgeCheckTableCode(ctx context.Context, q *dbgen.Queries, table string) error {
	untrusted, err := q.PurgeUntrustedCode(ctx, table)
	if err != nil {
		return fmt.Errorf("check the code the purge of %s runs: %w", table, err)
	}
	if len(untrusted) == 0 {
		return nil
	}
	problems := make([]string, 0, len(untrusted))
	for _, u := range untrusted {
		problems = append(problems, u.TableName+" ("+u.Problem+")")
	}
	return refusef("catalog drift: %s", strings.Join(problems, ", "))
}

// plan reads, in one transaction under the purge's guards, the registered
// tables, the foreign keys among them, the community's own partitions and
// the checkpoints so far, and orders the tables. recheck ignores the
// checkpoints' done marks (a later pass).
func (r *purgeRun) plan(ctx context.Context, recheck bool) (*purgePlan, error) {
	if err := r.precheckCatalog(ctx); err != nil {
		return nil, err
	}
	plan := &purgePlan{}
	_, err := r.tx(ctx, "plan", true, func(_ pgx.Tx, q *dbgen.Queries) error {
		shapes, err := q.PurgeTableShapes(ctx)
		if err != nil {
			return fmt.Errorf("list registered tables: %w", err)
		}
		keys, err := q.PurgeForeignKeys(ctx)
		if err != nil {
			return fmt.Errorf("list foreign keys: %w", err)
		}
		partitions, err := q.PurgeCommunityPartitions(ctx, r.token.tenantKey())
		if err != nil {
			return fmt.Errorf("list the community's partitions: %w", err)
		}
		progress, err := q.PurgeProgressList(ctx, r.token.RequestID)
		if err != nil {
			return fmt.Errorf("read purge progress: %w", err)
		}
		done := make(map[string]purgeCheckpoint, len(progress))
		for _, p := range progress {
			done[p.UnitKey] = purgeCheckpoint{Rows: p.RowCount, Done: p.Done}
		}

		tables := make(map[string]*purgeTable, len(shapes))
		var deleteNames []string
		for _, shape := range shapes {
			t := &purgeTable{
				name: shape.TableName, schema: shape.SchemaName, action: shape.PurgeAction,
				partitioned: shape.Partitioned, key: shape.KeyColumn, referenced: shape.Referenced,
				tenant: shape.TenantKey, keyCast: shape.KeyCast, filter: shape.TenantFilter, child: shape.Child,
			}
			t.method = purgeResolveMethod(r.opts.Method, shape)
			if c, ok := done[t.unit()]; ok {
				t.rows = c.Rows
				t.done = c.Done && !recheck
			}
			tables[t.name] = t
			switch t.action {
			case purgeActionDelete:
				deleteNames = append(deleteNames, t.name)
			case purgeActionNullify:
				plan.nullify = append(plan.nullify, t)
			default:
				return refusef("registered table %s has purge action %q", t.name, t.action)
			}
		}
		tenantTable, err := q.PurgeTenantTable(ctx)
		if err != nil {
			return fmt.Errorf("read the tenant table: %w", err)
		}
		edges := purgeEdges(keys, tenantTable, deleteNames)
		for _, k := range keys {
			if parent := tables[k.ParentTable]; parent != nil && k.ChildTable == k.ParentTable && !k.Soft {
				parent.selfRefs = append(parent.selfRefs, k)
			}
		}
		for _, p := range partitions {
			if t := tables[p.TableName]; t != nil {
				t.partitions = append(t.partitions, p)
			}
		}
		reverse, err := q.PurgeReverseReferences(ctx)
		if err != nil {
			return fmt.Errorf("list the references into tables attached through them: %w", err)
		}
		for _, ref := range reverse {
			referrer, dependent := tables[ref.ReferrerTable], tables[ref.TableName]
			if referrer == nil || dependent == nil {
				continue
			}
			d := purgeDependent{table: dependent, column: ref.TableColumn, via: ref.ReferrerColumn}
			for _, other := range reverse {
				if other.TableName == ref.TableName && other.TableColumn == ref.TableColumn {
					d.referrers = append(d.referrers, other)
				}
			}
			referrer.dependents = append(referrer.dependents, d)
			// A partition of it dropped whole would leave the rows only its
			// rows referenced: they go in batches too.
			referrer.partitions = nil
			// Its batches are picked by address under the tenant's filter,
			// the one statement shape that returns what it deleted.
			referrer.method = PurgeMethodCommunityCTID
		}
		order, err := purgeOrder(deleteNames, edges)
		if err != nil {
			return err
		}
		for _, name := range order {
			plan.delete = append(plan.delete, tables[name])
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, t := range plan.nullify {
		r.result.Nullified[t.name] = t.rows
	}
	for _, t := range plan.delete {
		r.result.Deleted[t.name] = t.rows
	}
	return plan, nil
}

// purgeResolveMethod picks the batch mechanic of one table.
func purgeResolveMethod(forced PurgeMethod, shape dbgen.PurgeTableShapesRow) PurgeMethod {
	if shape.Child {
		// A table attached through its parents has no tenant column to
		// walk: its batches are the first N rows its parents' rows of the
		// tenant reach (through the referencing columns' index, where
		// there is one), deleted by address under the same filter.
		if forced == PurgeMethodTIDRange {
			return forced
		}
		return PurgeMethodCommunityCTID
	}
	keyset := shape.KeyColumn != "" && shape.KeyIndexed
	switch forced {
	case PurgeMethodKeyset, PurgeMethodKeysetArray:
		if keyset {
			return forced
		}
	case PurgeMethodKeysetCTID:
		// A partitioned table repeats row addresses across partitions.
		if keyset && !shape.Partitioned {
			return forced
		}
		if keyset {
			return PurgeMethodKeysetArray
		}
	case PurgeMethodCommunityCTID:
		if shape.CommunityIndexed {
			return forced
		}
	case PurgeMethodTIDRange:
		return forced
	}
	switch {
	case keyset:
		return PurgeMethodKeyset
	case shape.CommunityIndexed:
		return PurgeMethodCommunityCTID
	default:
		return PurgeMethodTIDRange
	}
}

// purgeBatcher cuts one table's rows into batches.
type purgeBatcher struct {
	run   *purgeRun
	table *purgeTable
	// clear switches a 'delete' table to clearing its self-references.
	clear bool
	// n is the next batch's size in rows.
	n int
	// cursor is the last key done (nil before the first batch).
	cursor any
	// bounds are the upper keys of this walk's keyset batches, in walk
	// order, for the sweep.
	bounds []any
	// leaves, leaf, slot and window walk the heaps for PurgeMethodTIDRange:
	// slot counts line pointers from the start of the leaf, slots_per_block
	// to a block; a batch scans at most window slots from slot on.
	leaves []dbgen.PurgeLeafRelationsRow
	leaf   int
	slot   int64
	window int64
	// windowDone is set when the last batch scanned its whole window.
	windowDone bool
	// uncapped is set when a batch of one row (one slot) ran past the
	// statement cap: the next batch runs without it, so the purge goes on
	// where one row costs more than the cap (a foreign key check that
	// scans a table without an index, say), and so do the ones after it
	// until one's statement fits in the cap.
	uncapped bool
	// minPerRow is the least statement time per row of a child table's
	// full batches by its parents so far (see heapWalkDue).
	minPerRow time.Duration
}

// purgeHeapWalkGrowth is how many times the least time per row of a child
// table's full batches by its parents a later one must take before the
// table is walked by its heap instead.
const purgeHeapWalkGrowth = 4

// heapWalkDue reports, after a full batch of rows of a table attached
// through its parents, taken as the first N rows its parents reach
// (PurgeMethodCommunityCTID, which Auto picks for such a table), whether the
// rest of the table should be walked by its heap (PurgeMethodTIDRange).
// That batch has no cursor: each starts over past every row the ones
// before it deleted or skipped, so its time per row grows with the purge's
// progress, and the batch, sized to the budget, shrinks (at 1,000,000 rows,
// to a few rows a second). A heap walk's cost follows the table's size
// instead, which only a large share of it repays: so the batches by the
// parents go on while their time per row holds (a small community's few
// rows are found through the parents' index at once), and the heap walk
// takes over once it has grown purgeHeapWalkGrowth times.
func (b *purgeBatcher) heapWalkDue(rows int64, stmt time.Duration) bool {
	t := b.table
	if !t.child || t.method != PurgeMethodCommunityCTID || b.run.opts.Method != PurgeMethodAuto ||
		b.clear || len(t.dependents) > 0 || rows == 0 {
		return false
	}
	perRow := max(stmt/time.Duration(rows), time.Nanosecond)
	if b.minPerRow == 0 || perRow < b.minPerRow {
		b.minPerRow = perRow
		return false
	}
	return perRow > purgeHeapWalkGrowth*b.minPerRow
}

// purgeTable works through one table: its own partitions first, then its
// rows in batches until a batch finds no more.
func (r *purgeRun) purgeTable(ctx context.Context, t *purgeTable) error {
	if t.done {
		return nil
	}
	for _, p := range t.partitions {
		if err := r.dropPartition(ctx, t, p); err != nil {
			return err
		}
	}
	b := &purgeBatcher{run: r, table: t}
	b.reset()
	// restart walks the table again from the start, keeping the batch size.
	restart := func() {
		n := b.n
		b.reset()
		b.n = n
	}
	cleared, swept := false, false
	for {
		done, err := b.batch(ctx)
		var pgErr *pgconn.PgError
		switch {
		case errors.As(err, &pgErr) && pgErr.Code == pgerrcode.ForeignKeyViolation:
			if cleared || !t.hasSelfRef(pgErr.ConstraintName) {
				return refusef("purge of %s: rows the purge does not delete still reference the community's rows: %w", t.name, err)
			}
			// A row references a newer one, which the walk (newest first)
			// deleted before it: clear the self-references of the
			// community's rows, then walk again (clearing may move rows).
			if !t.selfRefsNullable() {
				return refusef("purge of %s: a row references a newer one through %s, which is NOT NULL: %w",
					t.name, pgErr.ConstraintName, err)
			}
			if err := r.clearSelfRefs(ctx, t); err != nil {
				return err
			}
			cleared = true
			restart()
			continue
		case err != nil:
			return err
		case !done:
			continue
		}
		if t.method == PurgeMethodKeyset && !swept {
			// Prove the walk left nothing, range by range; once is enough.
			swept = true
			clean, err := b.sweep(ctx)
			if err != nil {
				return err
			}
			if !clean {
				restart()
				continue
			}
		}
		t.done = true
		return nil
	}
}

// sweep proves that the keyset walk left no row of the community, one
// batch's key range at a time, each in a short read-only transaction. Each
// probe visits the index entries its batch left dead, and marks them so
// (once no snapshot can still see the rows), so the final transaction's
// proof does not walk them all at once.
//
// The probes must walk the index that proof walks, the one led by
// community_id (a keyset table has one over (community_id, key)), and
// bounded at both ends of their range. Written "community_id = $1 AND key
// > $2", the planner, whose statistics still count the purged rows, often
// chose a primary key on the key alone, marked its entries instead, and the
// final proof then visited the heap for every dead entry of the
// community's index (577 ms of a 784 ms final transaction at 10,000,000
// rows). A row comparison over (community_id, key) steers the planner but
// bounds only the start of a PostgreSQL 15 index scan, which then walks to
// the end of the community. So community_id is matched as a one-element
// array: still an equality for the index scan, which keeps both key bounds,
// but not one that makes "ORDER BY community_id, key" redundant, so that
// only the community's index yields the order.
func (b *purgeBatcher) sweep(ctx context.Context) (bool, error) {
	t := b.table
	key := pgx.Identifier{t.key}.Sanitize()
	after, upTo, order := " > ", " <= ", " ASC"
	if b.descending() {
		after, upTo, order = " < ", " >= ", " DESC"
	}
	tenant := t.tenantCol()
	orderBy := " ORDER BY " + tenant + order + ", " + key + order
	var from any
	for i := 0; i <= len(b.bounds); i++ {
		// community_id = ANY of a one-element array, not "=": see above.
		args := []any{b.run.token.tenantKey()}
		filter := tenant + " = ANY (ARRAY[$1::pg_catalog.text::" + t.keyCast + "])"
		if from != nil {
			args = append(args, from)
			filter += " AND " + key + after + fmt.Sprintf("$%d", len(args))
		}
		if i < len(b.bounds) {
			args = append(args, b.bounds[i])
			filter += " AND " + key + upTo + fmt.Sprintf("$%d", len(args))
			from = b.bounds[i]
		}
		var found bool
		start := time.Now()
		err := pgx.BeginTxFunc(ctx, b.run.store.pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted, AccessMode: pgx.ReadOnly,
			BeginQuery: "BEGIN ISOLATION LEVEL READ COMMITTED READ ONLY; " + rowSecurityOff},
			func(tx pgx.Tx) error {
				if err := dbgen.New(tx).PurgeSeqScanSet(ctx, "off"); err != nil {
					return fmt.Errorf("set enable_seqscan: %w", err)
				}
				var one int
				err := tx.QueryRow(ctx, "SELECT 1 FROM "+t.ident()+" WHERE "+filter+orderBy+" LIMIT 1", args...).Scan(&one)
				found = err == nil
				if errors.Is(err, pgx.ErrNoRows) {
					return nil
				}
				return err
			})
		b.run.noteTx("sweep of "+t.name, time.Since(start))
		if err != nil {
			return false, fmt.Errorf("sweep %s: %w", t.name, err)
		}
		if found {
			return false, nil
		}
	}
	return true, nil
}

// hasSelfRef reports whether constraint is one of t's hard self-references.
func (t *purgeTable) hasSelfRef(constraint string) bool {
	return slices.ContainsFunc(t.selfRefs, func(k dbgen.PurgeForeignKeysRow) bool { return k.ConstraintName == constraint })
}

func (t *purgeTable) selfRefsNullable() bool {
	for _, k := range t.selfRefs {
		if !k.Nullable {
			return false
		}
	}
	return true
}

// clearSelfRefs sets the self-referencing columns of the community's rows
// of t to NULL, in batches, so its rows can go in any order.
func (r *purgeRun) clearSelfRefs(ctx context.Context, t *purgeTable) error {
	b := &purgeBatcher{run: r, table: t, clear: true}
	b.reset()
	for {
		done, err := b.batch(ctx)
		if err != nil {
			return err
		}
		if done {
			return nil
		}
	}
}

// reset starts the batcher over.
func (b *purgeBatcher) reset() {
	b.cursor = nil
	b.bounds = nil
	b.leaves = nil
	b.leaf, b.slot, b.window = 0, 0, purgeStartWindow
	switch {
	case b.table.referenced:
		b.n = purgeStartReferencedRows
	default:
		b.n = purgeStartRows
	}
	b.n = min(b.n, b.run.opts.MaxRowsPerTx)
}

// descending reports whether the keyset walks newest first: a table that
// references itself usually references older rows, which then go last.
func (b *purgeBatcher) descending() bool { return len(b.table.selfRefs) > 0 }

// batch runs one batch transaction and adapts the next batch's size.
func (b *purgeBatcher) batch(ctx context.Context) (bool, error) {
	r, t := b.run, b.table
	if err := r.yield(ctx, t); err != nil {
		return false, err
	}
	if t.method == PurgeMethodTIDRange && b.leaves == nil {
		if err := b.loadLeaves(ctx); err != nil {
			return false, err
		}
		for _, leaf := range b.leaves {
			if !leaf.Writable {
				// A leaf the executor has no grant on (a partition created
				// after attach) is reached through its partitioned table.
				t.method = PurgeMethodCommunityCTID
				b.leaves = nil
				break
			}
		}
	}
	var rows int64
	var done bool
	var stmt time.Duration
	began := r.opts.Clock.Now()
	capped := !b.uncapped
	elapsed, err := r.tx(ctx, "batch of "+b.table.name, false, func(tx pgx.Tx, q *dbgen.Queries) error {
		if capped {
			if err := q.PurgeStatementCapSet(ctx, r.statementCap().Milliseconds()); err != nil {
				return fmt.Errorf("cap the statements of a batch of %s: %w", t.name, err)
			}
		}
		start := time.Now()
		var err error
		rows, done, err = b.statement(ctx, tx)
		stmt = time.Since(start)
		if err != nil {
			return err
		}
		if err := purgeCheckTableCode(ctx, q, t.name); err != nil {
			return err
		}
		if b.clear {
			return nil
		}
		return r.recordProgress(ctx, q, t, purgeCheckpoint{Rows: t.rows + rows, Done: done})
	})
	if capped && ctx.Err() == nil && isQueryCanceled(err) {
		// Rolled back whole: the batcher's cursor, window and counts
		// move only on a statement that succeeded.
		r.result.OverCapBatches++
		b.shrinkAfterCap()
		if r.opts.Progress != nil {
			r.opts.Progress(PurgeProgress{Table: t.name, Rows: t.rows, OverCap: true})
		}
		return false, r.nice(ctx, began)
	}
	if err != nil {
		return false, err
	}
	// An uncapped batch whose statement still ran past the cap leaves the
	// next one uncapped too: where every row costs more than the cap, a
	// capped try of each would only be thrown away.
	b.uncapped = !capped && stmt > r.statementCap()
	r.result.Batches++
	r.rows += rows
	if !b.clear {
		t.rows += rows
		r.record(t)
		r.progress(t, done)
	}
	b.adapt(rows, stmt, elapsed)
	if !done && b.heapWalkDue(rows, stmt) {
		// The rows deleted so far are gone; the heap walk starts at the
		// table's first page and finds the rest, at the size just adapted.
		n := b.n
		t.method = PurgeMethodTIDRange
		b.reset()
		b.n = n
		r.result.HeapWalks = append(r.result.HeapWalks, t.name)
	}
	return done, r.nice(ctx, began)
}

// statementCap is a batch's statement cap: purgeStatementCapFactor times
// the budget, at least a millisecond.
func (r *purgeRun) statementCap() time.Duration {
	return max(purgeStatementCapFactor*r.opts.TxBudget, time.Millisecond)
}

// shrinkAfterCap makes the next batch a quarter the size of one cancelled
// at its cap, or, for a batch already of one row (one slot of a heap
// walk), lets the next run without the cap.
func (b *purgeBatcher) shrinkAfterCap() {
	walk := b.table.method == PurgeMethodTIDRange
	if b.n <= 1 && (!walk || b.window <= 1) {
		b.uncapped = true
		return
	}
	b.n = max(b.n/purgeCapShrink, 1)
	if walk {
		b.window = max(b.window/purgeCapShrink, 1)
		b.windowDone = false
	}
}

// isQueryCanceled reports a statement cancelled (SQLSTATE 57014): by its
// statement_timeout, or by pg_cancel_backend.
func isQueryCanceled(err error) bool {
	pgErr, ok := errors.AsType[*pgconn.PgError](err)
	return ok && pgErr.Code == pgerrcode.QueryCanceled
}

// nice sleeps after a batch that began at began (on the purge's clock) for
// NiceRatio times the batch's duration.
func (r *purgeRun) nice(ctx context.Context, began time.Time) error {
	if r.opts.NiceRatio == 0 {
		return nil
	}
	took := r.opts.Clock.Now().Sub(began)
	d := time.Duration(r.opts.NiceRatio * float64(took))
	if d <= 0 {
		return nil
	}
	r.result.Niced += d
	return r.opts.Clock.Sleep(ctx, d)
}

// record copies t's rows so far into the result.
func (r *purgeRun) record(t *purgeTable) {
	if t.action == purgeActionNullify {
		r.result.Nullified[t.name] = t.rows
	} else {
		r.result.Deleted[t.name] = t.rows
	}
}

func (r *purgeRun) progress(t *purgeTable, done bool) {
	if r.opts.Progress != nil {
		r.opts.Progress(PurgeProgress{Table: t.name, Rows: t.rows, Done: done})
	}
}

// adapt sizes the next batch so its transaction takes about the budget,
// from the statement's time in this batch after the transaction's fixed
// overhead; growth is bounded by purgeMaxGrowth. A batch that took its full
// N rows sizes N by the cost per row. A TID range batch that ran out of its
// window first sizes the window by the cost per slot scanned (and N by the
// cost per row, when that alone would overrun). A TID range batch that
// took its full N rows and overran shrinks its window too: PostgreSQL 15
// does not know that a TID range scan yields rows in physical order, so it
// sorts above the tenant filter, and a table attached through its parents
// joins every row of the window to its parents before the LIMIT applies.
// Shrinking N alone left each batch as slow as its window, and at
// 10,000,000 rows the walk fell to one row a batch.
func (b *purgeBatcher) adapt(rows int64, stmt, elapsed time.Duration) {
	budget := b.run.opts.TxBudget
	available := max(budget-max(elapsed-stmt, 0), budget/4)
	// scale returns n grown or shrunk in proportion to the time left over,
	// measured for done units of work.
	scale := func(n, done int64) int64 {
		next := n * purgeMaxGrowth
		if done > 0 && stmt > 0 {
			next = min(next, int64(float64(available)/float64(stmt)*float64(done)))
		}
		return max(next, 1)
	}
	n := int64(b.n)
	switch {
	case b.table.method == PurgeMethodTIDRange && b.windowDone:
		b.window = min(scale(b.window, b.window), purgeMaxWindow)
		if rows > 0 && stmt > available {
			n = min(n, scale(n, rows))
		}
	case b.table.method == PurgeMethodTIDRange && stmt > available:
		b.window = scale(b.window, b.window) // smaller: stmt > available
		if rows > 0 {
			n = scale(n, rows)
		}
	case rows > 0:
		n = scale(n, rows)
	}
	b.n = int(min(n, int64(b.run.opts.MaxRowsPerTx)))
}

// loadLeaves reads the heaps of a TID range walk.
func (b *purgeBatcher) loadLeaves(ctx context.Context) error {
	// In a transaction of the store's, whose search_path names no schema
	// another role can write: pg_partition_tree(oid) and oid = regclass
	// would otherwise resolve through the session's.
	var leaves []dbgen.PurgeLeafRelationsRow
	err := b.run.store.begin(ctx, true, func(tx pgx.Tx) (err error) {
		leaves, err = dbgen.New(tx).PurgeLeafRelations(ctx, b.table.name)
		return err
	})
	if err != nil {
		return fmt.Errorf("list the heaps of %s: %w", b.table.name, err)
	}
	b.leaves = leaves
	return nil
}

// statement runs the batch's one data statement and reports the rows it
// deleted, cleared or nulled, and whether the table is done.
func (b *purgeBatcher) statement(ctx context.Context, tx pgx.Tx) (_ int64, _ bool, retErr error) {
	t := b.table
	community := b.run.token.tenantKey()
	n := b.n
	table := t.ident()
	tenant := t.tenantCol()
	// action turns a target and a row filter into the batch's data
	// statement: delete the rows, clear their tenant key, or clear their
	// self-references.
	action := func(target, where string) string {
		switch {
		case b.clear:
			var sets []string
			for _, k := range t.selfRefs {
				for _, c := range k.Columns {
					sets = append(sets, pgx.Identifier{c}.Sanitize()+" = NULL")
				}
			}
			slices.Sort(sets)
			return "UPDATE " + target + " SET " + strings.Join(slices.Compact(sets), ", ") + " WHERE " + where
		case t.action == purgeActionNullify:
			return "UPDATE " + target + " SET " + tenant + " = NULL WHERE " + where
		default:
			return "DELETE FROM " + target + " WHERE " + where
		}
	}
	// rowFilter selects the rows still to work on.
	// tenantRows selects the tenant's rows; rowFilter, those still to work on.
	tenantRows := "(" + t.filter + ")"
	rowFilter := tenantRows
	if b.clear {
		var notNull []string
		for _, k := range t.selfRefs {
			for _, c := range k.Columns {
				notNull = append(notNull, pgx.Identifier{c}.Sanitize()+" IS NOT NULL")
			}
		}
		rowFilter += " AND (" + strings.Join(notNull, " OR ") + ")"
	}
	switch method := t.method; method {
	case PurgeMethodKeyset:
		key := pgx.Identifier{t.key}.Sanitize()
		after, order := " > ", " ASC"
		upTo := " <= "
		if b.descending() {
			after, order, upTo = " < ", " DESC", " >= "
		}
		args := []any{community}
		filter := rowFilter
		if b.cursor != nil {
			args = append(args, b.cursor)
			filter += " AND " + key + after + "$2"
		}
		var bound any
		boundArgs := append(slices.Clone(args), n-1)
		err := tx.QueryRow(ctx, "SELECT "+key+" FROM "+table+" WHERE "+filter+
			" ORDER BY "+key+order+fmt.Sprintf(" OFFSET $%d LIMIT 1", len(boundArgs)), boundArgs...).Scan(&bound)
		last := errors.Is(err, pgx.ErrNoRows)
		if err != nil && !last {
			return 0, false, fmt.Errorf("find the batch bound of %s: %w", t.name, err)
		}
		if !last {
			args = append(args, bound)
			filter += " AND " + key + upTo + fmt.Sprintf("$%d", len(args))
		}
		tag, err := tx.Exec(ctx, action(table, filter), args...)
		if err != nil {
			return 0, false, fmt.Errorf("purge batch of %s: %w", t.name, err)
		}
		if !last {
			b.cursor = bound
			b.bounds = append(b.bounds, bound)
		}
		return tag.RowsAffected(), last, nil

	case PurgeMethodKeysetCTID, PurgeMethodKeysetArray:
		key := pgx.Identifier{t.key}.Sanitize()
		// The cursor moves to the batch's last key; not max(), which
		// some key types (uuid) lack.
		after, order, edge := " > ", " ASC", " DESC"
		if b.descending() {
			after, order, edge = " < ", " DESC", " ASC"
		}
		args := []any{community}
		filter := rowFilter
		if b.cursor != nil {
			args = append(args, b.cursor)
			filter += " AND " + key + after + "$2"
		}
		args = append(args, n)
		limit := fmt.Sprintf(" ORDER BY %s%s LIMIT $%d", key, order, len(args))
		var where string
		if method == PurgeMethodKeysetCTID {
			where = tenantRows + " AND ctid = ANY (ARRAY(SELECT ctid FROM " + table + " WHERE " + filter + limit + "))"
		} else {
			where = tenantRows + " AND " + key + " = ANY (ARRAY(SELECT " + key + " FROM " + table + " WHERE " + filter + limit + "))"
		}
		var rows int64
		var last any
		err := tx.QueryRow(ctx, "WITH batch AS ("+action(table, where)+" RETURNING "+key+") SELECT (SELECT count(*) FROM batch), "+
			"(SELECT "+key+" FROM batch ORDER BY "+key+edge+" LIMIT 1)", args...).Scan(&rows, &last)
		if err != nil {
			return 0, false, fmt.Errorf("purge batch of %s: %w", t.name, err)
		}
		if last != nil {
			b.cursor = last
		}
		return rows, rows < int64(n), nil

	case PurgeMethodCommunityCTID:
		where := tenantRows + " AND ctid = ANY (ARRAY(SELECT ctid FROM " + table + " WHERE " + rowFilter + " LIMIT $2))"
		if len(t.dependents) > 0 && !b.clear && t.action == purgeActionDelete {
			return b.deleteWithDependents(ctx, tx, where, community, n)
		}
		tag, err := tx.Exec(ctx, action(table, where), community, n)
		if err != nil {
			return 0, false, fmt.Errorf("purge batch of %s: %w", t.name, err)
		}
		return tag.RowsAffected(), tag.RowsAffected() < int64(n), nil

	case PurgeMethodTIDRange:
		for b.leaf < len(b.leaves) && b.slot >= b.leaves[b.leaf].Blocks*b.leaves[b.leaf].SlotsPerBlock {
			b.leaf++
			b.slot = 0
		}
		if b.leaf >= len(b.leaves) {
			return 0, true, nil
		}
		leaf := b.leaves[b.leaf]
		perBlock := leaf.SlotsPerBlock
		// Slot s of the leaf is line pointer (s / per block, s % per block + 1).
		tid := func(slot int64) string { return fmt.Sprintf("(%d,%d)", slot/perBlock, slot%perBlock+1) }
		end := b.slot + b.window
		heap := "ONLY " + pgx.Identifier{leaf.SchemaName, leaf.RelationName}.Sanitize()
		if t.child {
			restore, err := b.joinRowByRow(ctx, tx)
			if err != nil {
				return 0, false, err
			}
			defer func() {
				if err := restore(); err != nil && retErr == nil {
					retErr = err
				}
			}()
		}
		// The window's first n rows in physical order; the walk resumes
		// after the last one picked. The order is asked for: a table
		// attached through its parents is often read in its parents'
		// order (a nested loop over their index), and a LIMIT over that
		// order would skip rows the walk never comes back to.
		//
		// The statement is planned for its window on every call (an
		// unnamed statement, never a cached one): a generic plan, which
		// PostgreSQL switches a prepared statement to after five calls,
		// does not know the window's bounds and scans the whole heap in
		// every batch, so the walk's cost grew with the square of the
		// table (measured at 10,000,000 rows in bench/README.md).
		var rows int64
		var last *string
		err := tx.QueryRow(ctx, "WITH picked AS (SELECT ctid AS row_address FROM "+heap+" WHERE "+rowFilter+
			" AND ctid >= $2::tid AND ctid < $3::tid ORDER BY ctid LIMIT $4), "+
			"batch AS ("+action(heap, tenantRows+" AND ctid = ANY (ARRAY(SELECT row_address FROM picked))")+" RETURNING 1) "+
			"SELECT (SELECT count(*) FROM batch), (SELECT max(row_address) FROM picked)::text",
			pgx.QueryExecModeDescribeExec, community, tid(b.slot), tid(end), n).Scan(&rows, &last)
		if err != nil {
			return 0, false, fmt.Errorf("purge batch of %s: %w", leaf.RelationName, err)
		}
		b.windowDone = rows < int64(n)
		if b.windowDone || last == nil {
			b.slot = end
		} else {
			var block, offset int64
			if _, err := fmt.Sscanf(*last, "(%d,%d)", &block, &offset); err != nil {
				return 0, false, fmt.Errorf("purge batch of %s: row address %q: %w", leaf.RelationName, *last, err)
			}
			b.slot = block*perBlock + offset // the slot after the last row
		}
		done := b.leaf == len(b.leaves)-1 && b.slot >= leaf.Blocks*perBlock
		return rows, done, nil
	}
	return 0, false, fmt.Errorf("purge of %s: no batch method %q", t.name, t.method)
}

// joinRowByRow turns hash and merge joins off in tx until the returned
// func restores them, for a heap walk's batch of a table attached through
// its parents. Its window's rows reach their parents by one index probe
// each; a hash or merge join, which the planner picks once the window is
// a few thousand rows, reads every row of the tenant's parents in every
// batch instead (millions at 10,000,000 rows; see bench/README.md).
func (b *purgeBatcher) joinRowByRow(ctx context.Context, tx pgx.Tx) (func() error, error) {
	var hash, merge string
	if err := tx.QueryRow(ctx, "SELECT pg_catalog.current_setting('enable_hashjoin'), pg_catalog.current_setting('enable_mergejoin')").Scan(&hash, &merge); err != nil {
		return nil, fmt.Errorf("purge batch of %s: read the join settings: %w", b.table.name, err)
	}
	set := func(hash, merge string) error {
		_, err := tx.Exec(ctx, "SELECT pg_catalog.set_config('enable_hashjoin', $1, true), pg_catalog.set_config('enable_mergejoin', $2, true)", hash, merge)
		if err != nil {
			return fmt.Errorf("purge batch of %s: set the join settings: %w", b.table.name, err)
		}
		return nil
	}
	if err := set("off", "off"); err != nil {
		return nil, err
	}
	return func() error { return set(hash, merge) }, nil
}

// deleteWithDependents deletes a batch of b's table (the rows where
// selects) and, in the same statement, the rows of each dependent table
// that those rows referenced and that no row of any of its referrers
// references any more (the batch's rows excluded, which the statement's
// snapshot still sees), then records the dependents' rows so far in the
// batch's transaction. A row another tenant's row references stays.
func (b *purgeBatcher) deleteWithDependents(ctx context.Context, tx pgx.Tx, where string, community string, n int) (int64, bool, error) {
	t := b.table
	table := t.ident()
	returning := make([]string, 0, 2+len(t.dependents))
	returning = append(returning, "tableoid AS purge_tableoid", "ctid AS purge_ctid")
	ctes, counts := make([]string, 0, len(t.dependents)), make([]string, 0, len(t.dependents))
	for i, d := range t.dependents {
		via := fmt.Sprintf("purge_ref_%d", i)
		returning = append(returning, pgx.Identifier{d.via}.Sanitize()+" AS "+via)
		column := pgx.Identifier{d.column}.Sanitize()
		kept := make([]string, 0, len(d.referrers))
		for _, r := range d.referrers {
			ref := "SELECT 1 FROM " + pgx.Identifier{r.ReferrerSchema, r.ReferrerTable}.Sanitize() + " r WHERE r." +
				pgx.Identifier{r.ReferrerColumn}.Sanitize() + " = d." + column
			if r.ReferrerSchema == t.schema && r.ReferrerTable == t.name {
				ref += " AND (r.tableoid, r.ctid) NOT IN (SELECT purge_tableoid, purge_ctid FROM batch)"
			}
			kept = append(kept, "NOT EXISTS ("+ref+")")
		}
		ctes = append(ctes, fmt.Sprintf("dependent_%d AS (DELETE FROM %s d WHERE d.%s IN (SELECT %s FROM batch) AND %s RETURNING 1)",
			i, d.table.ident(), column, via, strings.Join(kept, " AND ")))
		counts = append(counts, fmt.Sprintf("(SELECT count(*) FROM dependent_%d)", i))
	}
	sql := "WITH batch AS (DELETE FROM " + table + " WHERE " + where + " RETURNING " + strings.Join(returning, ", ") + "), " +
		strings.Join(ctes, ", ") + " SELECT (SELECT count(*) FROM batch), ARRAY[" + strings.Join(counts, ", ") + "]::bigint[]"
	var rows int64
	var removed []int64
	if err := tx.QueryRow(ctx, sql, community, n).Scan(&rows, &removed); err != nil {
		return 0, false, fmt.Errorf("purge batch of %s with the rows only it referenced: %w", t.name, err)
	}
	q := dbgen.New(tx)
	for i, d := range t.dependents {
		if removed[i] == 0 {
			continue
		}
		d.table.rows += removed[i]
		if err := b.run.recordProgress(ctx, q, d.table, purgeCheckpoint{Rows: d.table.rows}); err != nil {
			return 0, false, err
		}
		b.run.record(d.table)
	}
	return rows, rows < int64(n), nil
}

// dropPartition removes a partition of t that holds exactly this community:
// its rows are counted, then, in one purge transaction, it is detached and
// dropped. DETACH waits at most purgeDDLLockTimeout for its lock on t (every
// user of t queues behind it meanwhile) and is tried again a few times.
func (r *purgeRun) dropPartition(ctx context.Context, t *purgeTable, p dbgen.PurgeCommunityPartitionsRow) error {
	if err := r.yield(ctx, t); err != nil {
		return err
	}
	partition := pgx.Identifier{p.PartitionSchema, p.PartitionName}.Sanitize()
	var rows int64
	// Counted outside the DDL transaction, which holds t exclusively; the
	// fenced partition gains no rows meanwhile.
	if err := r.store.begin(ctx, true, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, "SELECT pg_catalog.count(*) FROM "+partition).Scan(&rows)
	}); err != nil {
		return fmt.Errorf("count partition %s of %s: %w", p.PartitionName, t.name, err)
	}
	var err error
	began := r.opts.Clock.Now()
	for range purgeDDLAttempts {
		_, err = r.tx(ctx, "detach of "+p.PartitionName, false, func(tx pgx.Tx, q *dbgen.Queries) error {
			if err := q.PurgeLockTimeoutSet(ctx, purgeDDLLockTimeout); err != nil {
				return fmt.Errorf("set lock_timeout: %w", err)
			}
			if _, err := tx.Exec(ctx, "ALTER TABLE "+t.ident()+" DETACH PARTITION "+partition); err != nil {
				return fmt.Errorf("detach partition %s of %s: %w", p.PartitionName, t.name, err)
			}
			if _, err := tx.Exec(ctx, "DROP TABLE "+partition); err != nil {
				return fmt.Errorf("drop partition %s of %s: %w", p.PartitionName, t.name, err)
			}
			return r.recordProgress(ctx, q, t, purgeCheckpoint{Rows: t.rows + rows})
		})
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != pgerrcode.LockNotAvailable {
			break
		}
	}
	if err != nil {
		return err
	}
	r.result.Batches++
	r.rows += rows
	t.rows += rows
	r.record(t)
	r.progress(t, false)
	return r.nice(ctx, began)
}

// recordProgress records a table's rows so far in the purge's working
// progress and, once the table is done, appends its completed checkpoint:
// the audit trail gets one row per table, with its total.
func (r *purgeRun) recordProgress(ctx context.Context, q *dbgen.Queries, t *purgeTable, p purgeCheckpoint) error {
	if err := q.PurgeProgressRecord(ctx, dbgen.PurgeProgressRecordParams{
		RequestID: r.token.RequestID, UnitKey: t.unit(), RowCount: p.Rows, Done: p.Done,
		LeaseGeneration: r.token.Generation,
	}); err != nil {
		return fmt.Errorf("record purge progress of %s: %w", t.name, err)
	}
	if !p.Done {
		return nil
	}
	return checkpointCompleted(ctx, q, r.token, StageBindingsRemoved, t.unit(), p)
}

// yield waits before a batch of t for as long as the purge should: until
// the rate cap allows the next batch (the nice sleep after the previous
// batch counts toward it, so the longer of the two wins), and while a
// replica's replay lag is above the bound or an anti-wraparound autovacuum
// works on a purged table, looking at that at most once a second while it
// finds headroom.
// Each pause is reported through Progress; one that outlasts MaxPause ends
// the purge with a *PurgePausedError.
func (r *purgeRun) yield(ctx context.Context, t *purgeTable) error {
	if r.opts.MaxRowsPerSecond > 0 {
		due := r.started.Add(time.Duration(float64(r.rows) / r.opts.MaxRowsPerSecond * float64(time.Second)))
		if wait := due.Sub(r.opts.Clock.Now()); wait > 0 {
			r.paused(t, fmt.Sprintf("rate cap of %g rows/s", r.opts.MaxRowsPerSecond), []PurgePauseCause{PauseRateCap})
			if err := r.opts.Clock.Sleep(ctx, wait); err != nil {
				return err
			}
		}
	}
	if !r.headroomAt.IsZero() && time.Since(r.headroomAt) < purgeHeadroomRecheck {
		return nil
	}
	if err := r.store.awaitHeadroom(ctx, HeadroomOpts{
		MaxReplicationLag: r.opts.MaxReplicationLag,
		MaxPause:          r.opts.MaxPause,
		Paused: func(reason string, causes []PurgePauseCause) {
			r.paused(t, reason, causes)
		},
	}); err != nil {
		return err
	}
	r.headroomAt = time.Now()
	return nil
}

// HeadroomOpts bounds a wait for the database's headroom.
type HeadroomOpts struct {
	// MaxReplicationLag is the replay lag of a streaming replica to wait
	// out; zero means DefaultMaxReplicationLag, negative disables the check.
	MaxReplicationLag time.Duration
	// MaxPause bounds the wait; zero means DefaultMaxPause.
	MaxPause time.Duration
	// Paused, if not nil, is called on every look that finds a reason to
	// wait, with the reason and its causes.
	Paused func(reason string, causes []PurgePauseCause)
}

// AwaitHeadroom returns once no streaming replica's replay lag is above
// opts.MaxReplicationLag and no anti-wraparound autovacuum works on a
// registered table (community_deletion_purge_pressure()), looking again
// every 200ms. A wait longer than opts.MaxPause ends with a
// *PurgePausedError, which is not a refusal: retry later. The purge waits
// so before each batch; the executor calls it before each manifest chunk it
// writes or deletes.
func (e *Engine) AwaitHeadroom(ctx context.Context, opts HeadroomOpts) error {
	return e.awaitHeadroom(ctx, opts)
}

func (s *store) awaitHeadroom(ctx context.Context, opts HeadroomOpts) error {
	maxLag := opts.MaxReplicationLag
	if maxLag == 0 {
		maxLag = DefaultMaxReplicationLag
	}
	maxPause := opts.MaxPause
	if maxPause == 0 {
		maxPause = DefaultMaxPause
	}
	start := time.Now()
	for {
		var p dbgen.PurgePressureRow
		err := s.begin(ctx, true, func(tx pgx.Tx) (err error) {
			p, err = dbgen.New(tx).PurgePressure(ctx)
			return err
		})
		if err != nil {
			return fmt.Errorf("read the database's pressure: %w", err)
		}
		var reasons []string
		var causes []PurgePauseCause
		if lag := time.Duration(p.ReplayLagSeconds * float64(time.Second)); maxLag > 0 && lag > maxLag {
			reasons = append(reasons, fmt.Sprintf("replication lag %s above %s", lag.Round(time.Millisecond), maxLag))
			causes = append(causes, PauseReplicationLag)
		}
		if len(p.WraparoundTables) > 0 {
			reasons = append(reasons, "autovacuum preventing wraparound on "+strings.Join(p.WraparoundTables, ", "))
			causes = append(causes, PauseWraparoundVacuum)
		}
		if len(reasons) == 0 {
			return nil
		}
		reason := strings.Join(reasons, "; ")
		if waited := time.Since(start); waited > maxPause {
			return &PurgePausedError{Reason: reason, Paused: waited}
		}
		if opts.Paused != nil {
			opts.Paused(reason, causes)
		}
		if err := sleepCtx(ctx, purgePausePoll); err != nil {
			return err
		}
	}
}

// paused reports a pause before the next batch of t.
func (r *purgeRun) paused(t *purgeTable, reason string, causes []PurgePauseCause) {
	if r.opts.Progress != nil {
		r.opts.Progress(PurgeProgress{Table: t.name, Rows: t.rows, Paused: reason, PausedFor: causes})
	}
}

// sleepCtx sleeps for d or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

// purgeRowsRemain reports whether the table still holds a row of the
// token's tenant, by its key or through its parents.
func purgeRowsRemain(ctx context.Context, tx pgx.Tx, shape dbgen.PurgeTableShapesRow, token LeaseToken) (bool, error) {
	var remains bool
	err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+pgx.Identifier{shape.SchemaName, shape.TableName}.Sanitize()+
		" WHERE "+shape.TenantFilter+")", token.tenantKey()).Scan(&remains)
	if err != nil {
		return false, fmt.Errorf("look for rows of community %s in %s: %w", token.tenantKey(), shape.TableName, err)
	}
	return remains, nil
}

// purgeTombstoneDetail is the detail of the final checkpoint.
type purgeTombstoneDetail struct {
	Deleted   map[string]int64 `json:"deleted"`
	Nullified map[string]int64 `json:"nullified"`
	// Dropped are the per-tenant objects (sequences) the final transaction
	// dropped, qualified.
	Dropped []string `json:"dropped,omitempty"`
}

// finish proves in a read-only transaction that no 'delete' table holds a
// row of the community, and then runs the final transaction. It returns the
// 'delete' tables that still hold rows (and then commits nothing), or nil
// once the tombstone is committed.
//
// The final transaction does not probe the 'delete' tables again: the
// tombstone's own proof in the database (enforce_community_tombstone_proof)
// does, under the same lock and drift check, and refuses the tombstone if a
// row is there. Probing them twice in the longest transaction of the purge
// doubled its walk over the dead index entries the batches left. Should
// that proof refuse (a table registered since the read-only proof), the
// tables are listed again and returned, as the read-only proof would have.
func (r *purgeRun) finish(ctx context.Context) ([]string, error) {
	remaining, err := r.rowsRemaining(ctx)
	if err != nil || len(remaining) > 0 {
		return remaining, err
	}
	var dropped []string
	deleted := map[string]int64{}
	nullified := map[string]int64{}
	final, err := r.tx(ctx, "final proof", true, func(tx pgx.Tx, q *dbgen.Queries) error {
		shapes, err := q.PurgeTableShapes(ctx)
		if err != nil {
			return fmt.Errorf("list registered tables: %w", err)
		}
		// The clearing of stragglers, and its proof, use an index wherever
		// there is one.
		seqscan, err := q.PurgeSeqScanGet(ctx)
		if err != nil {
			return fmt.Errorf("read enable_seqscan: %w", err)
		}
		if err := q.PurgeSeqScanSet(ctx, "off"); err != nil {
			return fmt.Errorf("set enable_seqscan: %w", err)
		}
		for _, shape := range shapes {
			if shape.PurgeAction == purgeActionDelete {
				deleted[shape.TableName] = r.result.Deleted[shape.TableName]
			}
		}
		for _, shape := range shapes {
			if shape.PurgeAction != purgeActionNullify {
				continue
			}
			tenant := pgx.Identifier{shape.TenantKey}.Sanitize()
			tag, err := tx.Exec(ctx, "UPDATE "+pgx.Identifier{shape.SchemaName, shape.TableName}.Sanitize()+
				" SET "+tenant+" = NULL WHERE "+shape.TenantFilter, r.token.tenantKey())
			if err != nil {
				return fmt.Errorf("clear %s in %s: %w", shape.TenantKey, shape.TableName, err)
			}
			nullified[shape.TableName] = r.result.Nullified[shape.TableName] + tag.RowsAffected()
			remains, err := purgeRowsRemain(ctx, tx, shape, r.token)
			if err != nil {
				return err
			}
			if remains {
				return refusef("community %s still has rows in %s after clearing them", r.token.CommunityID, shape.TableName)
			}
		}
		if err := q.PurgeSeqScanSet(ctx, seqscan); err != nil {
			return fmt.Errorf("restore enable_seqscan: %w", err)
		}
		// The declared per-tenant sequences go in the same transaction as
		// the tombstone, whose proof refuses while one exists.
		dropped, err = q.PurgeDropTenantObjects(ctx, r.token.CommunityID)
		if err != nil {
			return fmt.Errorf("drop the per-tenant objects of community %s: %w", r.token.tenantKey(), err)
		}
		tombstoned, err := q.PurgeCommunityTombstone(ctx, dbgen.PurgeCommunityTombstoneParams{
			ID: r.token.CommunityID, FenceGeneration: r.generation,
		})
		if err != nil {
			return fmt.Errorf("tombstone community %s: %w", r.token.CommunityID, err)
		}
		if tombstoned != 1 {
			return refusef("tombstone of community %s at fence generation %d updated %d rows",
				r.token.CommunityID, r.generation, tombstoned)
		}
		if err := advance(ctx, q, r.token, StageBindingsRemoved, StagePostgresPurged, &r.generation); err != nil {
			return err
		}
		return checkpointCompleted(ctx, q, r.token, StageBindingsRemoved, purgeTombstoneUnit,
			purgeTombstoneDetail{Deleted: deleted, Nullified: nullified, Dropped: dropped})
	})
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok && pgErr.Code == pgerrcode.ObjectNotInPrerequisiteState {
		// The tombstone's proof refused: name the tables, or, if none
		// holds a row, the refusal stands.
		if again, lerr := r.rowsRemaining(ctx); lerr == nil && len(again) > 0 {
			return again, nil
		}
	}
	if err != nil {
		return nil, err
	}
	r.result.Deleted = deleted
	r.result.Nullified = nullified
	r.result.Dropped = dropped
	r.result.FinalTx = final
	return nil, nil
}

// rowsRemaining lists the registered 'delete' tables that still hold a row
// of the community, in a read-only transaction of the store's, using an
// index wherever there is one.
func (r *purgeRun) rowsRemaining(ctx context.Context) ([]string, error) {
	var remaining []string
	start := time.Now()
	err := r.store.begin(ctx, true, func(tx pgx.Tx) error {
		remaining = nil
		q := dbgen.New(tx)
		if err := q.PurgeSeqScanSet(ctx, "off"); err != nil {
			return fmt.Errorf("set enable_seqscan: %w", err)
		}
		shapes, err := q.PurgeTableShapes(ctx)
		if err != nil {
			return fmt.Errorf("list registered tables: %w", err)
		}
		for _, shape := range shapes {
			if shape.PurgeAction != purgeActionDelete {
				continue
			}
			remains, err := purgeRowsRemain(ctx, tx, shape, r.token)
			if err != nil {
				return err
			}
			if remains {
				remaining = append(remaining, shape.TableName)
			}
		}
		return nil
	})
	r.noteTx("proof", time.Since(start))
	if err != nil {
		return nil, fmt.Errorf("prove no rows of community %s remain: %w", r.token.tenantKey(), err)
	}
	return remaining, nil
}
