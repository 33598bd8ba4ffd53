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
