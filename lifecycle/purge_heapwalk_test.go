package lifecycle

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A table attached through its parents turns to the heap walk once a full
// batch through its parents takes purgeHeapWalkGrowth times the least time
// per row seen so far, and not before; never for another table, a forced
// method, a table with dependents, or the self-reference clearing. The
// durations are given, so the decision does not depend on the host.
func TestPurgeHeapWalkDueWhenBatchesThroughParentsSlowDown(t *testing.T) {
	t.Parallel()
	child := func() *purgeBatcher {
		return &purgeBatcher{run: &purgeRun{}, table: &purgeTable{child: true, method: PurgeMethodCommunityCTID}}
	}
	b := child()
	require.False(t, b.heapWalkDue(1000, 100*time.Millisecond), "the first batch sets the baseline: 100 µs a row")
	require.False(t, b.heapWalkDue(4000, 200*time.Millisecond), "50 µs a row: a lower baseline")
	require.False(t, b.heapWalkDue(2000, 400*time.Millisecond), "200 µs a row is 4x, not more")
	require.False(t, b.heapWalkDue(0, time.Second), "a batch that found nothing says nothing")
	require.True(t, b.heapWalkDue(1000, 201*time.Millisecond), "201 µs a row is more than 4x the least")

	for name, b := range map[string]*purgeBatcher{
		"a table with a tenant column": {run: &purgeRun{}, table: &purgeTable{method: PurgeMethodCommunityCTID}},
		"a heap walk already":          {run: &purgeRun{}, table: &purgeTable{child: true, method: PurgeMethodTIDRange}},
		"a forced method":              {run: &purgeRun{opts: PurgeOptions{Method: PurgeMethodCommunityCTID}}, table: &purgeTable{child: true, method: PurgeMethodCommunityCTID}},
		"a table with dependents":      {run: &purgeRun{}, table: &purgeTable{child: true, method: PurgeMethodCommunityCTID, dependents: []purgeDependent{{}}}},
		"clearing self-references":     {run: &purgeRun{}, table: &purgeTable{child: true, method: PurgeMethodCommunityCTID}, clear: true},
	} {
		require.False(t, b.heapWalkDue(1000, time.Millisecond), name)
		require.False(t, b.heapWalkDue(1000, time.Hour), name)
	}
}

// A heap walk's batch that took its full N rows and still overran its
// budget shrinks its window, not only N: its statement joins every row of
// the window to the tenant filter before the LIMIT applies, so its time
// follows the window. One that stayed within its budget keeps its window
// and grows N; one that ran out of its window sizes the window as before.
func TestPurgeHeapWalkShrinksItsWindowWhenAFullBatchOverruns(t *testing.T) {
	t.Parallel()
	walk := func() *purgeBatcher {
		return &purgeBatcher{
			run:   &purgeRun{opts: PurgeOptions{TxBudget: 100 * time.Millisecond, MaxRowsPerTx: DefaultPurgeMaxRowsPerTx}},
			table: &purgeTable{child: true, method: PurgeMethodTIDRange},
			n:     100, window: 1 << 16,
		}
	}

	b := walk()
	b.adapt(100, 200*time.Millisecond, 200*time.Millisecond)
	require.Equal(t, int64(1<<15), b.window, "twice the budget: half the window")
	require.Equal(t, 50, b.n)

	b = walk()
	b.adapt(100, 50*time.Millisecond, 50*time.Millisecond)
	require.Equal(t, int64(1<<16), b.window, "within the budget: the same window")
	require.Equal(t, 200, b.n)

	b = walk()
	b.windowDone = true
	b.adapt(40, 50*time.Millisecond, 50*time.Millisecond)
	require.Equal(t, int64(1<<17), b.window, "a window done in half the budget doubles")
	require.Equal(t, 100, b.n)
}
