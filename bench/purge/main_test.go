package main

import (
	"bytes"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// TestMain lets the test binary be the bystander process too.
func TestMain(m *testing.M) {
	runIfBystander()
	os.Exit(m.Run())
}

// Every batched purge mechanic runs end to end on a small dataset and leaves
// exactly the surviving data the single-transaction baseline leaves (bench
// returns an error otherwise, or if any row of the purged community is left).
func TestBenchPurgesWithEveryMethod(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	_, err := bench(t.Context(), &out, dataset{rows: 3000, otherRows: 500, rounds: 2}, allMethods, 1,
		lifecycle.PurgeOptions{TxBudget: lifecycle.DefaultPurgeTxBudget, MaxRowsPerTx: 100})
	require.NoError(t, err, out.String())
	require.Contains(t, out.String(), "is identical after every run")
}

// The bystander's traffic and the heap sampling run end to end on a small
// dataset, and the report prints their lines.
func TestBenchMeasuresTheBystanderAndTheHeap(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	_, err := bench(t.Context(), &out, dataset{rows: 3000, otherRows: 500, rounds: 2, load: true},
		[]lifecycle.PurgeMethod{lifecycle.PurgeMethodAuto}, 1, lifecycle.PurgeOptions{TxBudget: lifecycle.DefaultPurgeTxBudget, MaxRowsPerTx: 100})
	require.NoError(t, err, out.String())
	require.Contains(t, out.String(), "the bystander's p99 beside it")
	require.Contains(t, out.String(), "executor heap in use peaked at")
}
