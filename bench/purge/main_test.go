package main

import (
	"bytes"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/ephemeralpg"
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
	_, err := bench(t.Context(), &out, dataset{rows: 3000, otherRows: 500, rounds: 2}, benchOptions{
		methods: allMethods, nices: []float64{0}, repeat: 1, autovacuum: true,
		purge: lifecycle.PurgeOptions{TxBudget: lifecycle.DefaultPurgeTxBudget, MaxRowsPerTx: 100},
	})
	require.NoError(t, err, out.String())
	require.Contains(t, out.String(), "is identical after every run")
	// The two-level chain attached through its parents holds rows and is
	// purged like the rest.
	require.Regexp(t, `(?m)^\s*bench_revision_notes\s+[1-9]\d*\s`, out.String())
}

// The bystander's traffic, the heap sampling, the nice ratio's curve and
// the statements' costs run end to end on a small dataset with autovacuum
// off, and the report prints their lines.
func TestBenchMeasuresTheBystanderAndTheHeap(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	_, err := bench(t.Context(), &out, dataset{rows: 3000, otherRows: 500, rounds: 2, load: true}, benchOptions{
		methods: []lifecycle.PurgeMethod{lifecycle.PurgeMethodAuto}, nices: []float64{0, recommendedNice}, repeat: 1, top: 5, idleWindow: 300 * time.Millisecond,
		recommended: recommendedNice, set: serverSettings{"checkpoint_timeout": "1h"},
		purge: lifecycle.PurgeOptions{TxBudget: lifecycle.DefaultPurgeTxBudget, MaxRowsPerTx: 100},
	})
	require.NoError(t, err, out.String())
	require.Contains(t, out.String(), "autovacuum off")
	require.Contains(t, out.String(), ", checkpoint_timeout 1h\n", "-set's setting as the server reports it")
	require.Regexp(t, `(?m)^\s*batched \(auto\)(\s+\S+){7}\s+\d+\s`, out.String(), "the checkpoints column")
	require.Contains(t, out.String(), "(the recommended setting, as -recommended-nice says): the bystander's p99 beside it")
	require.Regexp(t, `(?m)^\s*batched \(auto, nice 1\)\s+\d`, out.String(), "the curve has its nice row")
	require.Contains(t, out.String(), "executor heap in use peaked at")
	require.Contains(t, out.String(), "its costliest statements")
}

// The bystander's target is checked at the ratio docs/executor.md
// recommends for the database host: 8 on a throwaway server of this
// machine with two cores or fewer, 1 on a larger one, and 1 on a
// TEST_DATABASE_URL server, whose cores the benchmark cannot count.
func TestRecommendedNiceFollowsTheDocsForTheHost(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		source ephemeralpg.Source
		cores  int
		want   float64
	}{
		{ephemeralpg.SourceLocal, 2, recommendedNiceSmallHost},
		{ephemeralpg.SourceLocal, 1, recommendedNiceSmallHost},
		{ephemeralpg.SourceLocal, 8, recommendedNice},
		{ephemeralpg.SourceURL, 2, recommendedNice},
	} {
		got, why := recommendedNiceFor(c.source, c.cores)
		require.Equal(t, c.want, got, "%s, %d cores", c.source, c.cores)
		require.NotEmpty(t, why)
	}
}

// The ratios the bench checks at are the ones docs/executor.md's table
// recommends, so that the docs and the target cannot drift apart.
func TestRecommendedNiceIsTheDocsTable(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/executor.md")
	require.NoError(t, err)
	for _, row := range []string{
		fmt.Sprintf("| `%g` (recommended beside live traffic on a database host of more than %d cores) |", recommendedNice, smallHostCores),
		fmt.Sprintf("| `%g` (recommended beside live traffic on a database host of %d cores or fewer) |", recommendedNiceSmallHost, smallHostCores),
	} {
		require.Contains(t, string(doc), row)
	}
}

// The default curve adds the ratio the bystander's target is checked at
// when it leaves it out, so a run with the defaults checks that target; an
// explicit -nice is run as given.
func TestDefaultCurveIncludesTheRecommendedNice(t *testing.T) {
	t.Parallel()
	defaults := []float64{0, 0.5, 1, 2}
	o := benchOptions{nices: defaults, addRecommended: true}
	require.Equal(t, []float64{0, 0.5, 1, 2, 4}, o.curve(4))
	require.Equal(t, defaults, o.curve(1), "already in the curve")
	o.addRecommended = false
	require.Equal(t, defaults, o.curve(4), "an explicit -nice runs as given")
}

// -set takes name=value and refuses anything else.
func TestServerSettingsTakeNameEqualsValue(t *testing.T) {
	t.Parallel()
	s := serverSettings{}
	require.NoError(t, s.Set("max_wal_size=16GB"))
	require.NoError(t, s.Set(" checkpoint_timeout = 1h "))
	require.Equal(t, serverSettings{"max_wal_size": "16GB", "checkpoint_timeout": "1h"}, s)
	require.Equal(t, "checkpoint_timeout=1h max_wal_size=16GB", s.String())
	for _, bad := range []string{"max_wal_size", "=16GB", ""} {
		require.Error(t, s.Set(bad), "%q", bad)
	}
	o := benchOptions{sharedBuffers: "1GB", set: serverSettings{"shared_buffers": "2GB"}}
	require.Equal(t, "2GB", o.serverConfig()["shared_buffers"], "-set wins")
}
