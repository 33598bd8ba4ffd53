package lifecycle

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestStageOrderIsExactAndTerminal(t *testing.T) {
	t.Parallel()

	stage := StageSubmitted
	seen := []Stage{stage}
	for {
		next, ok := stage.Next()
		if !ok {
			break
		}
		stage = next
		seen = append(seen, stage)
	}
	require.Equal(t, []Stage{
		StageSubmitted,
		StageInventoried,
		StageApproved,
		StageFenced,
		StageDrained,
		StageBindingsRemoved,
		StagePostgresPurged,
		StageCachePurged,
		StageLogicallyVerified,
		StageRetentionPending,
	}, seen)

	_, ok := StageAborted.Next()
	require.False(t, ok)
	_, ok = Stage("bogus").Next()
	require.False(t, ok)

	for _, s := range Stages() {
		require.Equal(t, s == StageRetentionPending || s == StageAborted, s.Terminal(), s)
	}
	require.False(t, Stage("").Terminal())
}

func TestStagesAreTheDatabaseNames(t *testing.T) {
	t.Parallel()

	// The names of the community_deletion_requests stage CHECK constraint,
	// in lifecycle order with aborted last.
	want := []string{
		"submitted", "inventoried", "approved", "fenced", "drained", "bindings_removed",
		"postgres_purged", "cache_purged", "logically_verified", "retention_pending", "aborted",
	}
	got := make([]string, 0, len(want))
	for _, s := range Stages() {
		require.True(t, s.Valid())
		require.Equal(t, string(s), s.String())
		got = append(got, s.String())
	}
	require.Equal(t, want, got)

	// Stages hands out a copy.
	Stages()[0] = "mutated"
	require.Equal(t, StageSubmitted, Stages()[0])
}

func TestStageRunnableAndAbortableSets(t *testing.T) {
	t.Parallel()

	runnable := map[Stage]bool{
		StageApproved: true, StageFenced: true, StageDrained: true, StageBindingsRemoved: true,
		StagePostgresPurged: true, StageCachePurged: true, StageLogicallyVerified: true,
	}
	abortable := map[Stage]bool{
		StageSubmitted: true, StageInventoried: true, StageApproved: true, StageFenced: true,
	}
	for _, s := range Stages() {
		require.Equal(t, runnable[s], s.Runnable(), s)
		require.Equal(t, abortable[s], s.Abortable(), s)
	}
	for _, s := range []Stage{"", "bogus", "Approved", " approved"} {
		require.False(t, s.Valid(), s)
		require.False(t, s.Runnable(), s)
		require.False(t, s.Abortable(), s)
	}
}

func TestParseStage(t *testing.T) {
	t.Parallel()

	for _, s := range Stages() {
		parsed, err := ParseStage(s.String())
		require.NoError(t, err)
		require.Equal(t, s, parsed)
	}
	for _, name := range []string{"", "bogus", "Submitted", "submitted ", "retention-pending"} {
		_, err := ParseStage(name)
		require.ErrorIs(t, err, ErrInvalidInput, name)
	}
}

func TestStageJSONRoundTrip(t *testing.T) {
	t.Parallel()

	type row struct {
		Stage Stage  `json:"stage"`
		Retry *Stage `json:"retry_stage"`
	}
	retry := StageFenced
	in := row{Stage: StageBindingsRemoved, Retry: &retry}
	data, err := json.Marshal(in)
	require.NoError(t, err)
	require.JSONEq(t, `{"stage":"bindings_removed","retry_stage":"fenced"}`, string(data))

	var out row
	require.NoError(t, json.Unmarshal(data, &out))
	require.Equal(t, in, out)

	require.NoError(t, json.Unmarshal([]byte(`{"stage":"aborted","retry_stage":null}`), &out))
	require.Equal(t, StageAborted, out.Stage)
	require.Nil(t, out.Retry)

	err = json.Unmarshal([]byte(`{"stage":"purged"}`), &out)
	require.ErrorIs(t, err, ErrInvalidInput)

	_, err = json.Marshal(row{Stage: "purged"})
	require.ErrorIs(t, err, ErrInvalidInput)
	_, err = json.Marshal(row{})
	require.ErrorIs(t, err, ErrInvalidInput, "the zero Stage is not a stage")
}
