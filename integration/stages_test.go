package integration

import (
	"testing"

	"github.com/jackc/pgerrcode"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// The stages are defined once in SQL (community_deletion_stage_order(), the
// community_deletion_stage domain, community_deletion_stage_runnable()) and
// once in Go (lifecycle.Stages and its methods); this proves the two agree:
// the same order, the same next stage, the same runnable set, and the domain
// admits exactly Go's stages.
func TestStagesAreDefinedOnceInEachLanguageAndAgree(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	var order []string
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT community_deletion_stage_order()").Scan(&order))
	var want []string
	for _, stage := range lifecycle.Stages() {
		if stage != lifecycle.StageAborted {
			want = append(want, string(stage))
		}
	}
	require.Equal(t, want, order)

	for _, stage := range lifecycle.Stages() {
		var next *string
		var runnable, admitted bool
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT community_deletion_next_stage($1), community_deletion_stage_runnable($1),
			$1::community_deletion_stage IS NOT NULL`, string(stage)).Scan(&next, &runnable, &admitted))
		goNext, ok := stage.Next()
		if ok {
			require.NotNil(t, next, "%s has a next stage in Go", stage)
			require.Equal(t, string(goNext), *next, stage)
		} else {
			require.Nil(t, next, "%s is terminal in Go", stage)
		}
		require.Equal(t, stage.Runnable(), runnable, stage)
		require.True(t, admitted, stage)
	}
	_, err := b.pool.Exec(ctx, "SELECT 'purged'::community_deletion_stage")
	requireSQLState(t, err, pgerrcode.CheckViolation, "community_deletion_stage_check")
	_, err = b.pool.Exec(ctx, "UPDATE community_deletion_checkpoints SET stage = 'nowhere' WHERE false")
	require.NoError(t, err)
	err = b.exec(t, "INSERT INTO community_deletion_checkpoints (request_id, stage, unit_key, status, lease_generation) VALUES (gen_random_uuid(), 'nowhere', 'u', 'started', 0)")
	requireSQLState(t, err, pgerrcode.CheckViolation, "community_deletion_stage_check")
}
