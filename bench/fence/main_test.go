package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

// The benchmark runs end to end against the current schema on a small
// workload: it attaches the fence, runs every workload on both tables and
// reports each row with its added cost and its target.
func TestMeasureReportsEveryWorkload(t *testing.T) {
	t.Parallel()
	rows, err := measure(t.Context(), config{name: "fsync off"},
		settings{txns: 50, durableTxns: 50, bulkRows: 200, bulkRounds: 3, communities: 3})
	require.NoError(t, err)
	require.Len(t, rows, 18)
	for _, r := range rows {
		require.Positive(t, r.unfenced, r.workload)
		require.Positive(t, r.fenced, r.workload)
	}

	var out bytes.Buffer
	report(&out, rows)
	for _, want := range []string{"fence adds", "single-row INSERT txns", "single-row UPDATE txns", "single-row DELETE txns", "floor: an empty trigger",
		"200-row INSERT", "floor: 200-row INSERT, empty trigger", ">= 0.85", ">= 0.88", "<= 1.05"} {
		require.Contains(t, out.String(), want)
	}
}

// A target is a floor for throughput and a ceiling for durations, and an
// informational row never fails the run.
func TestRowMeetsItsTarget(t *testing.T) {
	t.Parallel()
	throughput := row{unfenced: 100, fenced: 80, higherIsBetter: true, target: 0.75}
	require.True(t, throughput.meets())
	throughput.target = 0.95
	require.False(t, throughput.meets())

	duration := row{unfenced: 100, fenced: 108, target: 1.10}
	require.True(t, duration.meets())
	duration.fenced = 111
	require.False(t, duration.meets())

	require.True(t, row{unfenced: 100, fenced: 1}.meets(), "no target")
	require.False(t, report(&bytes.Buffer{}, []row{throughput, duration}))
}
