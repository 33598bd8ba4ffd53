package integration

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// communityIn creates a community and walks it, as the executor, to state
// (active, quiescing, fenced or tombstone). It returns the community and its
// fence generation.
func (b *testBundle) communityIn(t *testing.T, state string) (uuid.UUID, int64) {
	t.Helper()
	community := b.createCommunity(t)
	switch state {
	case "active":
	case "quiescing":
		b.quiesce(t, community)
	case "fenced":
		b.quiesce(t, community)
		b.fence(t, community)
	case "tombstone":
		b.quiesce(t, community)
		b.fence(t, community)
		b.tombstone(t, community)
	default:
		t.Fatalf("unknown community state %q", state)
	}
	got, generation := b.communityState(t, community)
	require.Equal(t, state, got)
	return community, generation
}

// walkRequest walks the community's open deletion request (submitting one
// when there is none) forward to stage, along the steps that do not move the
// community: submitted -> inventoried -> approved, and fenced -> drained ->
// bindings_removed. It returns the request.
func (b *testBundle) walkRequest(t *testing.T, community uuid.UUID, stage string) uuid.UUID {
	t.Helper()
	request, at := b.openRequest(t, community)
	if request == uuid.Nil {
		request, at = b.submit(t, community, "requester"), "submitted"
	}
	for at != stage {
		switch at {
		case "submitted":
			b.freeze(t, request)
			at = "inventoried"
		case "inventoried":
			b.approve(t, request, "approver")
			at = "approved"
		case "fenced":
			var frozen bool
			require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT destructive_storage_manifest IS NOT NULL
				FROM community_deletion_requests WHERE id = $1`, request).Scan(&frozen))
			if !frozen {
				b.freezeDestructive(t, request)
			}
			b.advance(t, request, "drained")
			at = "drained"
		case "drained":
			b.advance(t, request, "bindings_removed")
			at = "bindings_removed"
		default:
			t.Fatalf("request %s cannot walk from %s to %s without moving its community", request, at, stage)
		}
	}
	return request
}

// forgeRequest updates a request with its guard trigger disabled, to build a
// state the guards never let a client reach, so a test can show that another
// guard still refuses on its own.
func (b *testBundle) forgeRequest(t *testing.T, request uuid.UUID, set string) {
	t.Helper()
	const guard = "ALTER TABLE community_deletion_requests %s TRIGGER community_deletion_requests_guard"
	require.NoError(t, pgx.BeginFunc(t.Context(), b.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(t.Context(), fmt.Sprintf(guard, "DISABLE")); err != nil {
			return err
		}
		if _, err := tx.Exec(t.Context(), "UPDATE community_deletion_requests SET "+set+" WHERE id = $1", request); err != nil {
			return err
		}
		_, err := tx.Exec(t.Context(), fmt.Sprintf(guard, "ENABLE"))
		return err
	}))
}

// updateCommunityAs runs "UPDATE communities SET <set> WHERE id = community"
// inside a transaction carrying the executor settings for executor at
// generation.
func (b *testBundle) updateCommunityAs(t *testing.T, executor uuid.UUID, generation int64, community uuid.UUID, set string) error {
	t.Helper()
	return b.asExecutor(t, executor, generation, func(tx pgx.Tx) error {
		_, err := tx.Exec(t.Context(), "UPDATE communities SET "+set+" WHERE id = $1", community)
		return err
	})
}

// A community is created active at fence generation 0, without deleted_at:
// an insert in any other lifecycle state or at another generation is refused.
func TestCommunityIsCreatedActiveAtGenerationZero(t *testing.T) {
	t.Parallel()
	b := setup(t)

	for name, tc := range map[string]struct {
		state      string
		generation int64
		deletedAt  *time.Time
	}{
		"quiescing":    {state: "quiescing"},
		"fenced":       {state: "fenced"},
		"tombstone":    {state: "tombstone", deletedAt: new(time.Now())},
		"generation 5": {state: "active", generation: 5},
		"deleted_at":   {state: "active", deletedAt: new(time.Now())},
	} {
		t.Run(name, func(t *testing.T) {
			id := uuid.New()
			err := b.exec(t, `INSERT INTO communities (id, host, deletion_state, deletion_fence_generation, deleted_at)
				VALUES ($1, $2, $3, $4, $5)`, id, "forged-"+id.String()+".example", tc.state, tc.generation, tc.deletedAt)
			requireSQLState(t, err, sqlstateIntegrity, "a community is created active at fence generation 0")
		})
	}

	id := uuid.New()
	require.NoError(t, b.exec(t, `INSERT INTO communities (id, host, deletion_state, deletion_fence_generation)
		VALUES ($1, 'created.example', 'active', 0)`, id))
	state, generation := b.communityState(t, id)
	require.Equal(t, "active", state)
	require.Zero(t, generation)
}

// A community row is deleted only while it is active and has never had a
// deletion request: tombstones are permanent, and a community with a request
// at any stage (even an aborted one) stays; a quiescing or fenced community
// always has its request, which refuses the delete.
func TestCommunityDeleteGuard(t *testing.T) {
	t.Parallel()
	b := setup(t)
	remove := func(community uuid.UUID) error {
		return b.exec(t, "DELETE FROM communities WHERE id = $1", community)
	}

	tombstoned, _ := b.communityIn(t, "tombstone")
	requireSQLState(t, remove(tombstoned), sqlstateFenced, "tombstones are permanent")

	submitted := b.createCommunity(t)
	b.submit(t, submitted, "requester")
	requireSQLState(t, remove(submitted), sqlstateFenced, "has a deletion request")

	aborted := b.createCommunity(t)
	abortRequest(t, b, b.submit(t, aborted, "requester"))
	requireSQLState(t, remove(aborted), sqlstateFenced, "has a deletion request")

	quiescing, _ := b.communityIn(t, "quiescing")
	requireSQLState(t, remove(quiescing), sqlstateFenced, "has a deletion request: it is removed only by the deletion lifecycle")

	fenced, _ := b.communityIn(t, "fenced")
	requireSQLState(t, remove(fenced), sqlstateFenced, "has a deletion request: it is removed only by the deletion lifecycle")
	for _, community := range []uuid.UUID{tombstoned, submitted, aborted, quiescing, fenced} {
		var count int
		require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT count(*) FROM communities WHERE id = $1", community).Scan(&count))
		require.Equal(t, 1, count)
	}

	plain := b.createCommunity(t)
	require.NoError(t, remove(plain))
	var count int
	require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT count(*) FROM communities WHERE id = $1", plain).Scan(&count))
	require.Zero(t, count)
}

// A tombstone never changes, not even for the authorized executor at its
// generation or the next one; only a no-op update passes.
func TestTombstoneNeverChanges(t *testing.T) {
	t.Parallel()
	b := setup(t)
	community, generation := b.communityIn(t, "tombstone")

	snapshot := func() string {
		var row string
		require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT c::text FROM communities c WHERE id = $1", community).Scan(&row))
		return row
	}
	before := snapshot()

	for name, set := range map[string]string{
		"id":               "id = gen_random_uuid()",
		"host":             "host = 'renamed.example'",
		"host case":        "host = upper(host)",
		"back to active":   "deletion_state = 'active', deleted_at = NULL, deletion_fence_generation = deletion_fence_generation + 1",
		"back to fenced":   "deletion_state = 'fenced', deleted_at = NULL",
		"deleted_at":       "deleted_at = deleted_at - interval '1 day'",
		"archived_at":      "archived_at = NULL",
		"fence generation": "deletion_fence_generation = deletion_fence_generation + 1",
		"icon":             "icon = 'back.png'",
		"signing_key":      "signing_key = 'key'",
	} {
		t.Run(name, func(t *testing.T) {
			requireSQLState(t, b.exec(t, "UPDATE communities SET "+set+" WHERE id = $1", community),
				sqlstateFenced, "tombstones are permanent")
			for _, g := range []int64{generation, generation + 1} {
				requireSQLState(t, b.updateCommunityAs(t, community, g, community, set),
					sqlstateFenced, "tombstones are permanent")
			}
		})
	}

	require.NoError(t, b.exec(t, "UPDATE communities SET host = host WHERE id = $1", community),
		"a no-op update of a tombstone changes nothing and passes")
	require.Equal(t, before, snapshot())
}

// Hosts are unique case-insensitively, tombstones included, so a deleted
// community's host can never be taken again.
func TestCommunityHostUniqueIncludingTombstones(t *testing.T) {
	t.Parallel()
	b := setup(t)

	community := uuid.New()
	require.NoError(t, b.exec(t, "INSERT INTO communities (id, host) VALUES ($1, 'x.example')", community))
	b.quiesce(t, community)
	b.fence(t, community)
	b.tombstone(t, community)

	for _, host := range []string{"x.example", "X.example", "X.EXAMPLE"} {
		requireSQLState(t, b.exec(t, "INSERT INTO communities (host) VALUES ($1)", host),
			sqlstateUnique, "communities_host_lower_key")
	}

	require.NoError(t, b.exec(t, "INSERT INTO communities (host) VALUES ('y.example')"))
	requireSQLState(t, b.exec(t, "INSERT INTO communities (host) VALUES ('Y.Example')"),
		sqlstateUnique, "communities_host_lower_key")
	other := b.createCommunity(t)
	requireSQLState(t, b.exec(t, "UPDATE communities SET host = 'X.Example' WHERE id = $1", other),
		sqlstateUnique, "communities_host_lower_key")
}

// deletion_state moves only active -> quiescing -> fenced -> tombstone, or
// back to active from quiescing or fenced under a raised generation: every
// other step is refused (23000) even with the correct executor settings, and
// even when the open deletion request is at the stage the nearest legal step
// would need.
func TestCommunityLifecycleSteps(t *testing.T) {
	t.Parallel()
	b := setup(t)

	type step struct {
		from    string
		request string // when set, the open request is first walked to this stage
		set     string
		bump    int64 // the new fence generation is the current one plus bump
	}
	const toTombstone = "deletion_state = 'tombstone', deleted_at = now(), signing_key = NULL, icon = NULL"

	for name, tc := range map[string]step{
		"active -> fenced":                 {from: "active", request: "approved", set: "deletion_state = 'fenced'", bump: 1},
		"active -> fenced same generation": {from: "active", request: "approved", set: "deletion_state = 'fenced'"},
		"active -> tombstone":              {from: "active", request: "approved", set: toTombstone},
		"active -> quiescing raised":       {from: "active", request: "approved", set: "deletion_state = 'quiescing'", bump: 1},
		"active raised":                    {from: "active", request: "approved", set: "deletion_state = 'active'", bump: 1},
		"quiescing -> tombstone":           {from: "quiescing", set: toTombstone},
		"quiescing -> fenced unraised":     {from: "quiescing", set: "deletion_state = 'fenced'"},
		"quiescing -> active unraised":     {from: "quiescing", set: "deletion_state = 'active'"},
		"quiescing raised":                 {from: "quiescing", set: "deletion_state = 'quiescing'", bump: 1},
		"fenced -> quiescing":              {from: "fenced", set: "deletion_state = 'quiescing'"},
		"fenced -> quiescing raised":       {from: "fenced", set: "deletion_state = 'quiescing'", bump: 1},
		"fenced -> active unraised":        {from: "fenced", set: "deletion_state = 'active'"},
		"fenced raised":                    {from: "fenced", set: "deletion_state = 'fenced'", bump: 1},
		"fenced -> tombstone raised":       {from: "fenced", request: "bindings_removed", set: toTombstone, bump: 1},
	} {
		t.Run("refused "+name, func(t *testing.T) {
			community, generation := b.communityIn(t, tc.from)
			if tc.request != "" {
				b.walkRequest(t, community, tc.request)
			}
			next := generation + tc.bump
			err := b.updateCommunityAs(t, community, next, community,
				fmt.Sprintf("%s, deletion_fence_generation = %d", tc.set, next))
			requireSQLState(t, err, sqlstateIntegrity, "is not a lifecycle step")
			state, got := b.communityState(t, community)
			require.Equal(t, tc.from, state)
			require.Equal(t, generation, got)
		})
	}

	for name, tc := range map[string]step{
		"active -> quiescing":       {from: "active", request: "approved", set: "deletion_state = 'quiescing'"},
		"quiescing -> quiescing":    {from: "quiescing", set: "archived_at = now()"},
		"quiescing -> fenced":       {from: "quiescing", set: "deletion_state = 'fenced'", bump: 1},
		"quiescing -> active abort": {from: "quiescing", set: "deletion_state = 'active'", bump: 1},
		"fenced -> fenced":          {from: "fenced", set: "archived_at = now()"},
		"fenced -> active abort":    {from: "fenced", set: "deletion_state = 'active'", bump: 2},
		"fenced -> tombstone":       {from: "fenced", request: "bindings_removed", set: toTombstone},
	} {
		t.Run("allowed "+name, func(t *testing.T) {
			community, generation := b.communityIn(t, tc.from)
			if tc.request != "" {
				b.walkRequest(t, community, tc.request)
			}
			next := generation + tc.bump
			require.NoError(t, b.updateCommunityAs(t, community, next, community,
				fmt.Sprintf("%s, deletion_fence_generation = %d", tc.set, next)))
			_, got := b.communityState(t, community)
			require.Equal(t, next, got)
		})
	}
}

// The fence generation changes only with a lifecycle step: an active
// community cannot have its generation raised in place, not even by the
// executor (an abort returns to active from quiescing or fenced only).
func TestCommunityGenerationChangesOnlyWithALifecycleStep(t *testing.T) {
	t.Parallel()
	b := setup(t)
	community, generation := b.communityIn(t, "active")

	requireSQLState(t, b.updateCommunityAs(t, community, generation+1, community,
		fmt.Sprintf("deletion_fence_generation = %d", generation+1)), sqlstateIntegrity, "is not a lifecycle step")
	_, got := b.communityState(t, community)
	require.Equal(t, generation, got)

	// The same raise is a legal abort from quiescing.
	b.quiesce(t, community)
	require.NoError(t, b.updateCommunityAs(t, community, generation+1, community,
		fmt.Sprintf("deletion_state = 'active', deletion_fence_generation = %d", generation+1)))
}

// Every lifecycle step (and every generation change) needs the executor
// settings naming this community and its new fence generation; none, another
// community's, or a wrong generation is refused with 55000, even when the
// open deletion request is at the stage the step needs.
func TestCommunityLifecycleNeedsTheExecutor(t *testing.T) {
	t.Parallel()
	b := setup(t)
	other := b.createCommunity(t)

	for name, tc := range map[string]struct {
		from    string
		request string // the stage the open request is walked to first
		set     string
		bump    int64
	}{
		"quiesce":          {from: "active", request: "approved", set: "deletion_state = 'quiescing', archived_at = now()"},
		"fence":            {from: "quiescing", set: "deletion_state = 'fenced'", bump: 1},
		"tombstone":        {from: "fenced", request: "bindings_removed", set: "deletion_state = 'tombstone', deleted_at = now(), signing_key = NULL, icon = NULL"},
		"abort quiescing":  {from: "quiescing", set: "deletion_state = 'active'", bump: 1},
		"abort fenced":     {from: "fenced", set: "deletion_state = 'active'", bump: 1},
		"active new fence": {from: "active", request: "approved", set: "deletion_state = 'active'", bump: 1},
	} {
		t.Run(name, func(t *testing.T) {
			community, generation := b.communityIn(t, tc.from)
			if tc.request != "" {
				b.walkRequest(t, community, tc.request)
			}
			next := generation + tc.bump
			set := fmt.Sprintf("%s, deletion_fence_generation = %d", tc.set, next)
			const refused = "changes only inside the authorized deletion executor"

			requireSQLState(t, b.exec(t, "UPDATE communities SET "+set+" WHERE id = $1", community), sqlstateFenced, refused)
			requireSQLState(t, b.updateCommunityAs(t, other, next, community, set), sqlstateFenced, refused)
			wrong := next + 1
			if tc.bump > 0 {
				wrong = generation // the old generation, for a step that raises it
			}
			requireSQLState(t, b.updateCommunityAs(t, community, wrong, community, set), sqlstateFenced, refused)
			state, got := b.communityState(t, community)
			require.Equal(t, tc.from, state)
			require.Equal(t, generation, got)

			if name == "active new fence" {
				return // not a lifecycle step at all; see TestCommunityLifecycleSteps
			}
			require.NoError(t, b.updateCommunityAs(t, community, next, community, set))
		})
	}
}

// deletion_fence_generation never decreases, not even for the executor at the
// lower generation.
func TestCommunityFenceGenerationNeverDecreases(t *testing.T) {
	t.Parallel()
	b := setup(t)
	community, generation := b.communityIn(t, "fenced") // generation 1, its request fenced

	requireSQLState(t, b.updateCommunityAs(t, community, generation-1, community,
		"deletion_fence_generation = deletion_fence_generation - 1"), sqlstateIntegrity, "never decreases")
	requireSQLState(t, b.updateCommunityAs(t, community, generation-1, community,
		"deletion_state = 'active', deletion_fence_generation = deletion_fence_generation - 1"), sqlstateIntegrity, "never decreases")

	// Abort to active at generation 3 (and the request with it), then try to
	// go back below it.
	require.NoError(t, b.updateCommunityAs(t, community, 3, community, "deletion_state = 'active', deletion_fence_generation = 3"))
	request, _ := b.openRequest(t, community)
	abortRequest(t, b, request)
	requireSQLState(t, b.exec(t, "UPDATE communities SET deletion_fence_generation = 2 WHERE id = $1", community),
		sqlstateIntegrity, "never decreases")
	requireSQLState(t, b.updateCommunityAs(t, community, 2, community, "deletion_fence_generation = 2"),
		sqlstateIntegrity, "never decreases")
	b.quiesce(t, community) // under a new, approved request
	requireSQLState(t, b.updateCommunityAs(t, community, 2, community, "deletion_state = 'fenced', deletion_fence_generation = 2"),
		sqlstateIntegrity, "never decreases")
	require.NoError(t, b.updateCommunityAs(t, community, 4, community, "deletion_state = 'fenced', deletion_fence_generation = 4"))
	_, got := b.communityState(t, community)
	require.Equal(t, int64(4), got)
}

// A tombstone is scrubbed (signing_key and icon NULL) and carries deleted_at,
// and only a tombstone carries deleted_at (CHECK constraints, 23514). The
// request is at bindings_removed, so only the CHECKs can refuse.
func TestTombstoneIsScrubbedAndDated(t *testing.T) {
	t.Parallel()
	b := setup(t)
	community, generation := b.communityIn(t, "fenced")
	request := b.walkRequest(t, community, "bindings_removed")

	for name, tc := range map[string]struct{ set, constraint string }{
		"signing_key kept": {"deletion_state = 'tombstone', deleted_at = now(), icon = NULL", "communities_tombstone_scrubbed_check"},
		"icon kept":        {"deletion_state = 'tombstone', deleted_at = now(), signing_key = NULL", "communities_tombstone_scrubbed_check"},
		"no deleted_at":    {"deletion_state = 'tombstone', signing_key = NULL, icon = NULL", "communities_tombstone_deleted_at_check"},
		"fenced dated":     {"deleted_at = now()", "communities_tombstone_deleted_at_check"},
	} {
		t.Run(name, func(t *testing.T) {
			requireSQLState(t, b.updateCommunityAs(t, community, generation, community, tc.set), sqlstateCheck, tc.constraint)
		})
	}
	active := b.createCommunity(t)
	requireSQLState(t, b.exec(t, "UPDATE communities SET deleted_at = now() WHERE id = $1", active),
		sqlstateCheck, "communities_tombstone_deleted_at_check")

	require.NoError(t, b.updateCommunityAs(t, community, generation, community,
		"deletion_state = 'tombstone', deleted_at = now(), signing_key = NULL, icon = NULL"))
	state, _ := b.communityState(t, community)
	require.Equal(t, "tombstone", state)
	b.advance(t, request, "postgres_purged")
}

// While a community is quiescing or fenced, every change to its row (even
// its icon) needs the executor at its current generation; an active
// community's ordinary columns change freely.
func TestCommunityRowChangesOutsideActiveNeedTheExecutor(t *testing.T) {
	t.Parallel()
	b := setup(t)
	other := b.createCommunity(t)

	for _, state := range []string{"quiescing", "fenced"} {
		t.Run(state, func(t *testing.T) {
			community, generation := b.communityIn(t, state)
			for name, set := range map[string]string{
				"icon":        "icon = 'new.png'",
				"signing_key": "signing_key = 'rotated'",
				"archived_at": "archived_at = NULL",
			} {
				const refused = "changes only inside the authorized deletion executor"
				requireSQLState(t, b.exec(t, "UPDATE communities SET "+set+" WHERE id = $1", community), sqlstateFenced, refused)
				requireSQLState(t, b.updateCommunityAs(t, other, generation, community, set), sqlstateFenced, refused)
				requireSQLState(t, b.updateCommunityAs(t, community, generation+1, community, set), sqlstateFenced, refused)
				require.NoError(t, b.updateCommunityAs(t, community, generation, community, set), name)
			}
			// Not even the executor renames a community its request names.
			requireSQLState(t, b.updateCommunityAs(t, community, generation, community,
				"host = 'moved-"+community.String()+".example'"), sqlstateFenced, "its host cannot change")
		})
	}

	active := b.createCommunity(t)
	require.NoError(t, b.exec(t, "UPDATE communities SET icon = 'new.png' WHERE id = $1", active))
	require.NoError(t, b.exec(t, "UPDATE communities SET host = 'renamed.example' WHERE id = $1", active))
	require.NoError(t, b.exec(t, "UPDATE communities SET signing_key = 'rotated', archived_at = now() WHERE id = $1", active))
	var host, icon string
	require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT host, icon FROM communities WHERE id = $1", active).Scan(&host, &icon))
	require.Equal(t, "renamed.example", host)
	require.Equal(t, "new.png", icon)
}

// Every lifecycle step answers to the community's open deletion request:
// quiesce and fence need it approved, tombstone needs it at bindings_removed
// under the community's fence generation, and an abort (only from quiescing
// or fenced) needs it approved or fenced; otherwise 55000.
func TestCommunityStepsMatchTheDeletionRequest(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const (
		quiesce   = "deletion_state = 'quiescing'"
		fence     = "deletion_state = 'fenced'"
		tombstone = "deletion_state = 'tombstone', deleted_at = now(), signing_key = NULL, icon = NULL"
		abort     = "deletion_state = 'active'"
	)
	mismatch := func(from, to, request string) string {
		return fmt.Sprintf("deletion_state %s -> %s does not match its deletion request (%s)", from, to, request)
	}

	for name, tc := range map[string]struct {
		prepare func(t *testing.T) uuid.UUID // returns the community, with its request set up
		set     string
		bump    int64
		code    string
		message string
	}{
		"quiesce without any request": {
			prepare: func(t *testing.T) uuid.UUID { return b.createCommunity(t) },
			set:     quiesce, code: sqlstateFenced, message: mismatch("active", "quiescing", "none open"),
		},
		"quiesce with only an aborted request": {
			prepare: func(t *testing.T) uuid.UUID {
				community := b.createCommunity(t)
				abortRequest(t, b, b.walkRequest(t, community, "approved"))
				return community
			},
			set: quiesce, code: sqlstateFenced, message: mismatch("active", "quiescing", "none open"),
		},
		"quiesce with the request submitted": {
			prepare: func(t *testing.T) uuid.UUID {
				community := b.createCommunity(t)
				b.walkRequest(t, community, "submitted")
				return community
			},
			set: quiesce, code: sqlstateFenced, message: mismatch("active", "quiescing", "submitted"),
		},
		"quiesce with the request inventoried": {
			prepare: func(t *testing.T) uuid.UUID {
				community := b.createCommunity(t)
				b.walkRequest(t, community, "inventoried")
				return community
			},
			set: quiesce, code: sqlstateFenced, message: mismatch("active", "quiescing", "inventoried"),
		},
		// While the community is quiescing the request guard keeps the request
		// approved; the state is forged to show the community guard refuses too.
		"fence with the request not approved": {
			prepare: func(t *testing.T) uuid.UUID {
				community, _ := b.communityIn(t, "quiescing")
				request, _ := b.openRequest(t, community)
				b.forgeRequest(t, request, "stage = 'inventoried'")
				return community
			},
			set: fence, bump: 1, code: sqlstateFenced, message: mismatch("quiescing", "fenced", "inventoried"),
		},
		"fence with no open request": {
			prepare: func(t *testing.T) uuid.UUID {
				community, _ := b.communityIn(t, "quiescing")
				request, _ := b.openRequest(t, community)
				b.forgeRequest(t, request, abortSet)
				return community
			},
			set: fence, bump: 1, code: sqlstateFenced, message: mismatch("quiescing", "fenced", "none open"),
		},
		"tombstone with the request at fenced": {
			prepare: func(t *testing.T) uuid.UUID {
				community, _ := b.communityIn(t, "fenced")
				return community
			},
			set: tombstone, code: sqlstateFenced, message: mismatch("fenced", "tombstone", "fenced"),
		},
		"tombstone with the request only at drained": {
			prepare: func(t *testing.T) uuid.UUID {
				community, _ := b.communityIn(t, "fenced")
				b.walkRequest(t, community, "drained")
				return community
			},
			set: tombstone, code: sqlstateFenced, message: mismatch("fenced", "tombstone", "drained"),
		},
		// The request guard keeps the request's fence generation equal to the
		// community's; the mismatch is forged.
		"tombstone at another fence generation": {
			prepare: func(t *testing.T) uuid.UUID {
				community, _ := b.communityIn(t, "fenced")
				b.forgeRequest(t, b.walkRequest(t, community, "bindings_removed"), "fence_generation = fence_generation + 1")
				return community
			},
			set: tombstone, code: sqlstateFenced, message: mismatch("fenced", "tombstone", "bindings_removed"),
		},
		"abort with the request at drained": {
			prepare: func(t *testing.T) uuid.UUID {
				community, _ := b.communityIn(t, "fenced")
				b.walkRequest(t, community, "drained")
				return community
			},
			set: abort, bump: 1, code: sqlstateFenced, message: mismatch("fenced", "active", "drained"),
		},
		"abort with the request at bindings_removed": {
			prepare: func(t *testing.T) uuid.UUID {
				community, _ := b.communityIn(t, "fenced")
				b.walkRequest(t, community, "bindings_removed")
				return community
			},
			set: abort, bump: 1, code: sqlstateFenced, message: mismatch("fenced", "active", "bindings_removed"),
		},
		"abort of an active community": {
			prepare: func(t *testing.T) uuid.UUID {
				community := b.createCommunity(t)
				b.walkRequest(t, community, "approved")
				return community
			},
			set: abort, bump: 1, code: sqlstateIntegrity, message: "deletion_state active -> active at fence generation 0 -> 1 is not a lifecycle step",
		},
	} {
		t.Run("refused "+name, func(t *testing.T) {
			community := tc.prepare(t)
			from, generation := b.communityState(t, community)
			next := generation + tc.bump
			err := b.updateCommunityAs(t, community, next, community,
				fmt.Sprintf("%s, deletion_fence_generation = %d", tc.set, next))
			requireSQLState(t, err, tc.code, tc.message)
			state, got := b.communityState(t, community)
			require.Equal(t, from, state)
			require.Equal(t, generation, got)
		})
	}

	t.Run("allowed the whole path", func(t *testing.T) {
		community := b.createCommunity(t)
		request := b.walkRequest(t, community, "approved")
		require.NoError(t, b.updateCommunityAs(t, community, 0, community, quiesce+", archived_at = now()"))
		// The fence moves the community, then its approved request, in one transaction.
		require.NoError(t, b.asExecutor(t, community, 1, func(tx pgx.Tx) error {
			if _, err := tx.Exec(t.Context(), "UPDATE communities SET "+fence+", deletion_fence_generation = 1 WHERE id = $1", community); err != nil {
				return err
			}
			_, err := tx.Exec(t.Context(), "UPDATE community_deletion_requests SET stage = 'fenced', fence_generation = 1 WHERE id = $1", request)
			return err
		}))
		b.walkRequest(t, community, "bindings_removed")
		require.NoError(t, b.updateCommunityAs(t, community, 1, community, tombstone))
		state, generation := b.communityState(t, community)
		require.Equal(t, "tombstone", state)
		require.Equal(t, int64(1), generation)
		b.advance(t, request, "postgres_purged")
	})

	for _, from := range []string{"quiescing", "fenced"} {
		t.Run("allowed abort from "+from, func(t *testing.T) {
			community, generation := b.communityIn(t, from) // its request approved, or fenced
			request, _ := b.openRequest(t, community)
			require.NoError(t, b.updateCommunityAs(t, community, generation+1, community,
				fmt.Sprintf("%s, deletion_fence_generation = %d", abort, generation+1)))
			abortRequest(t, b, request)
			state, _ := b.communityState(t, community)
			require.Equal(t, "active", state)
			b.quiesce(t, community) // a new request may start over
		})
	}
}

// An active community's host cannot change while an open deletion request
// names it (55000), not even through the executor; other columns still
// change, and the host is free again once the request is aborted.
func TestCommunityHostPinnedWhileRequested(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const pinned = "its host cannot change while a deletion request names it"
	rename := func(community uuid.UUID) string {
		return "host = 'renamed-" + community.String() + ".example'"
	}

	requested := map[string]func(t *testing.T) uuid.UUID{}
	for _, stage := range []string{"submitted", "inventoried", "approved"} {
		requested[stage] = func(t *testing.T) uuid.UUID {
			community := b.createCommunity(t)
			b.walkRequest(t, community, stage)
			return community
		}
	}
	// After a community abort its request is still open at fenced until it
	// is aborted too.
	requested["fenced, community aborted"] = func(t *testing.T) uuid.UUID {
		community, _ := b.communityIn(t, "fenced")
		abortCommunity(t, b, community)
		return community
	}

	for name, prepare := range requested {
		t.Run(name, func(t *testing.T) {
			community := prepare(t)
			_, generation := b.communityState(t, community)
			for _, set := range []string{rename(community), "host = upper(host)"} {
				requireSQLState(t, b.exec(t, "UPDATE communities SET "+set+" WHERE id = $1", community), sqlstateFenced, pinned)
				requireSQLState(t, b.updateCommunityAs(t, community, generation, community, set), sqlstateFenced, pinned)
			}
			require.NoError(t, b.exec(t, "UPDATE communities SET icon = 'new.png', host = host WHERE id = $1", community),
				"columns other than the host still change")

			request, _ := b.openRequest(t, community)
			abortRequest(t, b, request)
			require.NoError(t, b.exec(t, "UPDATE communities SET "+rename(community)+" WHERE id = $1", community))
		})
	}

	free := b.createCommunity(t)
	require.NoError(t, b.exec(t, "UPDATE communities SET "+rename(free)+" WHERE id = $1", free), "no request: the host is free")
}

// TRUNCATE, which no row trigger sees, is refused (55000) on communities and
// on the deletion control-plane tables whose rows are evidence or guard a
// deletion in flight, whether named alone, with CASCADE or beside other tables.
func TestTruncateRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)

	// A row in every guarded table.
	community, request, _ := b.fencedRequest(t)
	require.NoError(t, insertChunk(t, b, request, 0))
	require.NoError(t, b.exec(t, `INSERT INTO community_deletion_checkpoints (request_id, stage, unit_key, status, lease_generation)
		VALUES ($1, 'fenced', 'unit-1', 'started', 0)`, request))
	mustAcquireLease(t, b, b.createCommunity(t))
	require.NoError(t, b.exec(t, `INSERT INTO community_deletion_executor_heartbeats (executor_id, mode, request_id)
		VALUES ('executor-1', 'run', $1)`, request))
	guarded := []string{
		"communities", "community_deletion_requests", "community_deletion_approvals",
		"community_deletion_checkpoints", "community_deletion_manifest_keys", "community_serving_write_leases",
	}
	counts := func() map[string]int {
		out := map[string]int{}
		for _, table := range guarded {
			var n int
			require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT count(*) FROM "+table).Scan(&n))
			out[table] = n
		}
		return out
	}
	before := counts()
	for table, n := range before {
		require.NotZero(t, n, table)
	}

	for _, table := range guarded {
		t.Run(table, func(t *testing.T) {
			stmts := []string{
				"TRUNCATE " + table + " CASCADE",
				"TRUNCATE ONLY " + table + " CASCADE",
				"TRUNCATE community_deletion_executor_heartbeats, " + table + " CASCADE",
			}
			if table != "communities" && table != "community_deletion_requests" {
				// Without CASCADE a referenced table is refused by its foreign
				// keys first (0A000); the others reach the trigger.
				stmts = append(stmts, "TRUNCATE "+table)
			}
			for _, stmt := range stmts {
				requireSQLState(t, b.exec(t, stmt), sqlstateFenced, "TRUNCATE "+table+" refused")
			}
		})
	}
	require.Equal(t, before, counts())
	state, _ := b.communityState(t, community)
	require.Equal(t, "fenced", state)

	// The executor heartbeats are neither evidence nor a guard: they truncate.
	require.NoError(t, b.exec(t, "TRUNCATE community_deletion_executor_heartbeats"))
	require.Equal(t, before, counts())
}
