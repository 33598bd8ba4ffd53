package integration

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// requestPath is the forward path of a deletion request.
var requestPath = []string{
	"submitted", "inventoried", "approved", "fenced", "drained", "bindings_removed",
	"postgres_purged", "cache_purged", "logically_verified", "retention_pending",
}

// abortSet is the SET list of a legal abort (the community must be active).
const abortSet = "stage = 'aborted', aborted_at = now(), aborted_by = 'operator', abort_reason = 'withdrawn', completed_at = now()"

// abortRequest aborts a request whose community is active.
func abortRequest(t *testing.T, b *testBundle, request uuid.UUID) {
	t.Helper()
	require.NoError(t, b.exec(t, "UPDATE community_deletion_requests SET "+abortSet+" WHERE id = $1", request))
}

// abortCommunity returns a quiescing or fenced community to active under a
// new fence generation, as the executor does on abort.
func abortCommunity(t *testing.T, b *testBundle, community uuid.UUID) int64 {
	t.Helper()
	_, generation := b.communityState(t, community)
	next := generation + 1
	require.NoError(t, b.updateCommunityAs(t, community, next, community,
		fmt.Sprintf("deletion_state = 'active', deletion_fence_generation = %d", next)))
	return next
}

// advanceRequest moves a request one step forward from stage, doing what
// the next step needs first: the destructive freeze (unless done) before
// drained; before postgres_purged the community tombstone, which the
// tombstone helper moves the request with.
func advanceRequest(t *testing.T, b *testBundle, community, request uuid.UUID, stage string) {
	t.Helper()
	switch stage {
	case "fenced":
		var frozen bool
		require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT destructive_storage_manifest IS NOT NULL
			FROM community_deletion_requests WHERE id = $1`, request).Scan(&frozen))
		if !frozen {
			b.freezeDestructive(t, request)
		}
		require.NoError(t, b.exec(t, "UPDATE community_deletion_requests SET stage = 'drained' WHERE id = $1", request))
	case "bindings_removed":
		b.tombstone(t, community)
		require.Equal(t, "postgres_purged", requestStage(t, b, request))
	case "logically_verified":
		b.complete(t, request)
	default:
		i := slices.Index(requestPath, stage)
		require.True(t, i >= 0 && i+1 < len(requestPath), "no step after %q", stage)
		require.NoError(t, b.exec(t, "UPDATE community_deletion_requests SET stage = $2 WHERE id = $1", request, requestPath[i+1]))
	}
}

// requestAt creates a community and walks a deletion request for it to
// stage along the legal path. generation is the request's fence generation
// (0 before fenced).
func (b *testBundle) requestAt(t *testing.T, stage string) (community, request uuid.UUID, generation int64) {
	t.Helper()
	target := slices.Index(requestPath, stage)
	require.GreaterOrEqual(t, target, 0, "unknown stage %q", stage)
	switch target {
	case 0:
		community = b.createCommunity(t)
		request = b.submit(t, community, "requester")
		return community, request, 0
	case 1:
		community = b.createCommunity(t)
		request = b.submit(t, community, "requester")
		b.freeze(t, request)
		return community, request, 0
	case 2:
		community, request = b.approvedRequest(t)
		return community, request, 0
	}
	community, request, generation = b.fencedRequest(t)
	for i := 3; i < target; i++ {
		advanceRequest(t, b, community, request, requestPath[i])
	}
	require.Equal(t, stage, requestStage(t, b, request))
	return community, request, generation
}

// requestStage reads a request's stage.
func requestStage(t *testing.T, b *testBundle, request uuid.UUID) string {
	t.Helper()
	var stage string
	require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT stage FROM community_deletion_requests WHERE id = $1", request).Scan(&stage))
	return stage
}

// updateRequest runs "UPDATE community_deletion_requests SET <set> WHERE id = request".
func updateRequest(t *testing.T, b *testBundle, request uuid.UUID, set string, args ...any) error {
	t.Helper()
	return b.exec(t, "UPDATE community_deletion_requests SET "+set+" WHERE id = $1", append([]any{request}, args...)...)
}

// A request is created submitted with nothing frozen, leased, blocked,
// retried, failed or aborted: each forged field is refused by the guard
// (23000), before any pairing CHECK constraint could.
func TestRequestInsertIsSubmittedWithNothingForged(t *testing.T) {
	t.Parallel()
	b := setup(t)
	community := b.createCommunity(t)
	const forged = "a request is created submitted, with nothing frozen, leased or blocked"

	for name, tc := range map[string]struct{ cols, vals, code, contains string }{
		"stage inventoried":           {"stage", "'inventoried'", sqlstateIntegrity, forged},
		"stage approved":              {"stage", "'approved'", sqlstateIntegrity, forged},
		"stage aborted":               {"stage, aborted_at, aborted_by, abort_reason, completed_at", "'aborted', now(), 'op', 'why', now()", sqlstateIntegrity, forged},
		"schema_manifest":             {"schema_manifest", "'{}'", sqlstateIntegrity, forged},
		"storage_manifest":            {"storage_manifest", "'{}'", sqlstateIntegrity, forged},
		"inventory_manifest":          {"inventory_manifest", "'{}'", sqlstateIntegrity, forged},
		"inventory_digest":            {"inventory_digest", "decode(repeat('ab', 32), 'hex')", sqlstateIntegrity, forged},
		"inventory_frozen_at":         {"inventory_frozen_at", "now()", sqlstateIntegrity, forged},
		"destructive manifest":        {"destructive_storage_manifest, destructive_storage_frozen_at", "'{}', now()", sqlstateIntegrity, forged},
		"destructive frozen_at alone": {"destructive_storage_frozen_at", "now()", sqlstateIntegrity, forged},
		"fence_generation":            {"fence_generation", "0", sqlstateIntegrity, forged},
		"lease":                       {"lease_owner, lease_until", "'executor', now() + interval '1 minute'", sqlstateIntegrity, forged},
		"lease_until alone":           {"lease_until", "now() + interval '1 minute'", sqlstateIntegrity, forged},
		"lease_generation":            {"lease_generation", "1", sqlstateIntegrity, forged},
		"blocked":                     {"blocked_at, blocked_reason", "now(), 'stuck'", sqlstateIntegrity, forged},
		"blocked_at alone":            {"blocked_at", "now()", sqlstateIntegrity, forged},
		"blocked_reason alone":        {"blocked_reason", "'stuck'", sqlstateIntegrity, forged},
		"quiescing_started_at":        {"quiescing_started_at", "now()", sqlstateIntegrity, forged},
		"pre_quiesce_archived_at":     {"pre_quiesce_archived_at", "now()", sqlstateIntegrity, forged},
		"retry_stage":                 {"retry_stage", "'submitted'", sqlstateIntegrity, forged},
		"retry_count":                 {"retry_count", "1", sqlstateIntegrity, forged},
		"attempts":                    {"attempts", "1", sqlstateIntegrity, forged},
		"last_error":                  {"last_error, last_error_at", "'boom', now()", sqlstateIntegrity, forged},
		"last_error alone":            {"last_error", "'boom'", sqlstateIntegrity, forged},
		"last_error_at alone":         {"last_error_at", "now()", sqlstateIntegrity, forged},
		"completed_at":                {"completed_at", "now()", sqlstateIntegrity, forged},
		"aborted_at":                  {"aborted_at", "now()", sqlstateIntegrity, forged},
		"aborted_by":                  {"aborted_by", "'operator'", sqlstateIntegrity, forged},
		"abort_reason":                {"abort_reason", "'withdrawn'", sqlstateIntegrity, forged},
	} {
		t.Run(name, func(t *testing.T) {
			err := b.exec(t, `INSERT INTO community_deletion_requests (community_id, community_host, requested_by, `+tc.cols+`)
				SELECT id, host, 'requester', `+tc.vals+` FROM communities WHERE id = $1`, community)
			requireSQLState(t, err, tc.code, tc.contains)
		})
	}

	request := b.submit(t, community, "requester")
	require.Equal(t, "submitted", requestStage(t, b, request))
}

// A request names an existing, active community by its exact host.
func TestRequestTargetsAnActiveCommunityByItsHost(t *testing.T) {
	t.Parallel()
	b := setup(t)
	insert := func(community uuid.UUID, host string) error {
		return b.exec(t, `INSERT INTO community_deletion_requests (community_id, community_host, requested_by)
			VALUES ($1, $2, 'requester')`, community, host)
	}
	hostOf := func(community uuid.UUID) string {
		var host string
		require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT host FROM communities WHERE id = $1", community).Scan(&host))
		return host
	}

	active := b.createCommunity(t)
	requireSQLState(t, insert(active, "other.example"), sqlstateIntegrity, "or its host is not")
	requireSQLState(t, insert(active, strings.ToUpper(hostOf(active))), sqlstateIntegrity, "or its host is not")

	for _, state := range []string{"quiescing", "fenced", "tombstone"} {
		community, _ := b.communityIn(t, state)
		requireSQLState(t, insert(community, hostOf(community)), sqlstateIntegrity,
			fmt.Sprintf("community %s is %s", community, state))
	}
	missing := uuid.New()
	requireSQLState(t, insert(missing, "missing.example"), sqlstateIntegrity,
		fmt.Sprintf("community %s is missing", missing))

	require.NoError(t, insert(active, hostOf(active)))
}

// At most one open request per community (a partial unique index, 23505);
// once the open one is aborted a new request may be submitted.
func TestRequestOneOpenPerCommunity(t *testing.T) {
	t.Parallel()
	b := setup(t)
	community := b.createCommunity(t)
	first := b.submit(t, community, "requester")

	second := `INSERT INTO community_deletion_requests (community_id, community_host, requested_by)
		SELECT id, host, 'someone-else' FROM communities WHERE id = $1`
	requireSQLState(t, b.exec(t, second, community), sqlstateUnique, "community_deletion_requests_one_open_per_community")

	b.freeze(t, first)
	b.approve(t, first, "approver")
	requireSQLState(t, b.exec(t, second, community), sqlstateUnique, "community_deletion_requests_one_open_per_community")

	abortRequest(t, b, first)
	require.NoError(t, b.exec(t, second, community))
	requireSQLState(t, b.exec(t, second, community), sqlstateUnique, "community_deletion_requests_one_open_per_community")
}

// Deletion requests are permanent audit records: none is ever deleted, open
// or aborted.
func TestRequestsAreNeverDeleted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, open, _ := b.requestAt(t, "approved")
	aborted := b.submit(t, b.createCommunity(t), "requester")
	abortRequest(t, b, aborted)

	for _, request := range []uuid.UUID{open, aborted} {
		requireSQLState(t, b.exec(t, "DELETE FROM community_deletion_requests WHERE id = $1", request),
			sqlstateIntegrity, "deletion requests are permanent audit records")
	}
	var count int
	require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT count(*) FROM community_deletion_requests").Scan(&count))
	require.Equal(t, 2, count)
}

// A request's target (community_id, community_host), requester and creation
// time never change; its other bookkeeping does.
func TestRequestIdentityNeverChanges(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, request, _ := b.requestAt(t, "inventoried")
	other := b.createCommunity(t)

	for name, set := range map[string]string{
		"id":             "id = gen_random_uuid()",
		"community_id":   "community_id = '" + other.String() + "'",
		"retarget":       "community_id = '" + other.String() + "', community_host = (SELECT host FROM communities WHERE id = '" + other.String() + "')",
		"community_host": "community_host = 'other.example'",
		"requested_by":   "requested_by = 'approver'",
		"created_at":     "created_at = created_at - interval '1 day'",
	} {
		t.Run(name, func(t *testing.T) {
			requireSQLState(t, updateRequest(t, b, request, set), sqlstateIntegrity,
				"its target, requester and creation time never change")
		})
	}
	require.NoError(t, updateRequest(t, b, request, "reason = 'tidy up', attempts = attempts + 1"))
}

// The frozen inventory (schema, storage and inventory manifests, digest,
// frozen_at) is written once, by the submitted -> inventoried step; never
// without that step and never again afterwards.
func TestRequestInventoryWrittenOnceBySubmittedToInventoried(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const once = "the frozen inventory is written once, by submitted -> inventoried"
	community := b.createCommunity(t)
	request := b.submit(t, community, "requester")

	inventory := []string{
		`schema_manifest = '{"tables": 6}'`,
		`storage_manifest = '{"objects": 3}'`,
		`inventory_manifest = '{"rows": 12}'`,
		`inventory_digest = decode(repeat('cd', 32), 'hex')`,
		`inventory_frozen_at = now()`,
	}
	for _, set := range inventory {
		t.Run("while submitted "+set, func(t *testing.T) {
			requireSQLState(t, updateRequest(t, b, request, set), sqlstateIntegrity, once)
		})
	}
	all := strings.Join(inventory, ", ")
	requireSQLState(t, updateRequest(t, b, request, all), sqlstateIntegrity, once)
	requireSQLState(t, updateRequest(t, b, request, all+", "+abortSet), sqlstateIntegrity, once)

	require.NoError(t, updateRequest(t, b, request, "stage = 'inventoried', "+all))

	later := map[string]string{
		"schema_manifest":     `schema_manifest = '{}'`,
		"storage_manifest":    `storage_manifest = '{}'`,
		"inventory_manifest":  `inventory_manifest = '{}'`,
		"inventory_digest":    `inventory_digest = decode(repeat('ef', 32), 'hex')`,
		"inventory_frozen_at": `inventory_frozen_at = now() - interval '1 hour'`,
		"cleared":             `stage = 'submitted', schema_manifest = NULL, storage_manifest = NULL, inventory_manifest = NULL, inventory_digest = NULL, inventory_frozen_at = NULL`,
	}
	for name, set := range later {
		t.Run("while inventoried "+name, func(t *testing.T) {
			requireSQLState(t, updateRequest(t, b, request, set), sqlstateIntegrity, once)
		})
	}

	b.approve(t, request, "approver")
	for name, set := range later {
		t.Run("while approved "+name, func(t *testing.T) {
			requireSQLState(t, updateRequest(t, b, request, set), sqlstateIntegrity, once)
		})
	}
	// The approval references the digest (composite FK), but the guard
	// refuses the rewrite before the FK is ever consulted.
	requireSQLState(t, updateRequest(t, b, request, "inventory_digest = $2", testDigest("another inventory")), sqlstateIntegrity, once)

	var storage string
	require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT storage_manifest::text FROM community_deletion_requests WHERE id = $1", request).Scan(&storage))
	require.JSONEq(t, `{"objects": 3}`, storage)
}

// The destructive storage manifest (and its frozen_at) is written once,
// while the request is and stays fenced.
func TestRequestDestructiveManifestWrittenOnceWhileFenced(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const once = "the destructive storage manifest is written once, while fenced"
	const write = `destructive_storage_manifest = '{"objects": 2}', destructive_storage_frozen_at = now()`

	_, approved, _ := b.requestAt(t, "approved")
	requireSQLState(t, updateRequest(t, b, approved, write), sqlstateIntegrity, once)

	_, fenced, _ := b.requestAt(t, "fenced")
	requireSQLState(t, updateRequest(t, b, fenced, "stage = 'drained', "+write), sqlstateIntegrity, once)
	require.NoError(t, updateRequest(t, b, fenced, write))

	for name, set := range map[string]string{
		"rewrite":  `destructive_storage_manifest = '{"objects": 9}'`,
		"refreeze": `destructive_storage_frozen_at = now() - interval '1 hour'`,
		"both":     write,
		"cleared":  `destructive_storage_manifest = NULL, destructive_storage_frozen_at = NULL`,
		"at drain": `stage = 'drained', destructive_storage_manifest = '{"objects": 9}'`,
	} {
		t.Run(name, func(t *testing.T) {
			requireSQLState(t, updateRequest(t, b, fenced, set), sqlstateIntegrity, once)
		})
	}
	require.NoError(t, updateRequest(t, b, fenced, "stage = 'drained'"))
	requireSQLState(t, updateRequest(t, b, fenced, `destructive_storage_manifest = '{"objects": 9}'`), sqlstateIntegrity, once)
}

// The stage moves one step forward only: skips and backward moves are
// refused; aborted is reachable from submitted, inventoried, approved and
// fenced (with the community active again) but not from drained.
func TestRequestStageMovesOneStepForward(t *testing.T) {
	t.Parallel()
	b := setup(t)

	for _, tc := range []struct{ from, to string }{
		{"submitted", "approved"},
		{"submitted", "fenced"},
		{"submitted", "retention_pending"},
		{"inventoried", "fenced"},
		{"inventoried", "submitted"},
		{"approved", "drained"},
		{"approved", "inventoried"},
		{"approved", "submitted"},
		{"fenced", "bindings_removed"},
		{"fenced", "approved"},
		{"drained", "postgres_purged"},
		{"drained", "fenced"},
		{"bindings_removed", "cache_purged"},
		{"bindings_removed", "drained"},
		{"postgres_purged", "logically_verified"},
		{"postgres_purged", "bindings_removed"},
		{"cache_purged", "retention_pending"},
		{"cache_purged", "postgres_purged"},
		{"logically_verified", "cache_purged"},
		{"logically_verified", "submitted"},
	} {
		t.Run(tc.from+" -> "+tc.to, func(t *testing.T) {
			_, request, _ := b.requestAt(t, tc.from)
			requireSQLState(t, updateRequest(t, b, request, "stage = $2", tc.to), sqlstateIntegrity,
				fmt.Sprintf("stage %s -> %s is not a lifecycle step", tc.from, tc.to))
			require.Equal(t, tc.from, requestStage(t, b, request))
		})
	}

	t.Run("drained -> aborted", func(t *testing.T) {
		// The community cannot return to active while its request is drained
		// (TestCommunityStepsMatchTheDeletionRequest); the stage rule refuses
		// the abort on its own, before the community is even consulted.
		_, request, _ := b.requestAt(t, "drained")
		requireSQLState(t, updateRequest(t, b, request, abortSet), sqlstateIntegrity,
			"stage drained -> aborted is not a lifecycle step")
		require.Equal(t, "drained", requestStage(t, b, request))
	})

	for _, from := range []string{"submitted", "inventoried", "approved", "fenced"} {
		t.Run(from+" -> aborted", func(t *testing.T) {
			community, request, _ := b.requestAt(t, from)
			if from == "fenced" {
				abortCommunity(t, b, community)
			}
			abortRequest(t, b, request)
			require.Equal(t, "aborted", requestStage(t, b, request))
		})
	}

	t.Run("the whole forward path", func(t *testing.T) {
		_, request, _ := b.requestAt(t, "retention_pending")
		require.Equal(t, "retention_pending", requestStage(t, b, request))
	})
}

// aborted and retention_pending are terminal: every update is refused, even
// one that changes nothing.
func TestRequestTerminalStagesRefuseUpdates(t *testing.T) {
	t.Parallel()
	b := setup(t)
	aborted := b.submit(t, b.createCommunity(t), "requester")
	abortRequest(t, b, aborted)
	_, retained, _ := b.requestAt(t, "retention_pending")

	for stage, request := range map[string]uuid.UUID{"aborted": aborted, "retention_pending": retained} {
		for name, set := range map[string]string{
			"no-op":      "reason = reason",
			"reason":     "reason = 'late'",
			"last_error": "last_error = 'boom', last_error_at = now()",
			"attempts":   "attempts = attempts + 1",
			"blocked":    "blocked_at = now(), blocked_reason = 'stuck'",
			"lease":      "lease_owner = 'executor', lease_until = now() + interval '1 minute', lease_generation = lease_generation + 1",
			"reopen":     "stage = 'submitted', aborted_at = NULL, aborted_by = NULL, abort_reason = NULL, completed_at = NULL",
		} {
			t.Run(stage+" "+name, func(t *testing.T) {
				requireSQLState(t, updateRequest(t, b, request, set), sqlstateIntegrity,
					fmt.Sprintf("stage %s is terminal", stage))
			})
		}
	}

	_, open, _ := b.requestAt(t, "logically_verified")
	require.NoError(t, updateRequest(t, b, open, "reason = 'still open', attempts = attempts + 1"))
}

// A request becomes approved only with an approval row of its frozen
// inventory digest: a forged stage change without one is refused.
func TestRequestApprovedNeedsAnApproval(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, request, _ := b.requestAt(t, "inventoried")

	requireSQLState(t, updateRequest(t, b, request, "stage = 'approved'"), sqlstateIntegrity,
		"approved needs an approval of its frozen inventory digest")
	require.Equal(t, "inventoried", requestStage(t, b, request))

	b.approve(t, request, "approver")
	require.Equal(t, "approved", requestStage(t, b, request))
}

// A request is fenced only when its community is fenced at the request's
// fence generation, postgres_purged only when it is a tombstone (at that
// generation, which the request can no longer change by then), and aborted
// only when the community is active.
func TestRequestStageMatchesCommunity(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const mismatch = "does not match community"

	t.Run("fenced", func(t *testing.T) {
		community, request, _ := b.requestAt(t, "approved")
		requireSQLState(t, updateRequest(t, b, request, "stage = 'fenced', fence_generation = 0"), sqlstateIntegrity, mismatch)
		b.quiesce(t, community)
		requireSQLState(t, updateRequest(t, b, request, "stage = 'fenced', fence_generation = 0"), sqlstateIntegrity, mismatch)
		// Fence the community alone; the request follows below.
		generation := int64(1)
		require.NoError(t, b.updateCommunityAs(t, community, generation, community,
			"deletion_state = 'fenced', deletion_fence_generation = 1"))
		for _, g := range []int64{generation - 1, generation + 1} {
			requireSQLState(t, updateRequest(t, b, request, "stage = 'fenced', fence_generation = $2", g), sqlstateIntegrity, mismatch)
		}
		// Without a fence generation the guard's comparison is NULL; the
		// CHECK constraint refuses the row instead.
		requireSQLState(t, updateRequest(t, b, request, "stage = 'fenced'"), sqlstateIntegrity, mismatch)
		require.NoError(t, updateRequest(t, b, request, "stage = 'fenced', fence_generation = $2", generation))
	})

	t.Run("postgres_purged", func(t *testing.T) {
		community, request, generation := b.requestAt(t, "bindings_removed")
		requireSQLState(t, updateRequest(t, b, request, "stage = 'postgres_purged'"), sqlstateIntegrity, mismatch)
		// Tombstone the community alone; the request follows below.
		require.NoError(t, b.updateCommunityAs(t, community, generation, community,
			"deletion_state = 'tombstone', deleted_at = now(), signing_key = NULL, icon = NULL"))
		requireSQLState(t, updateRequest(t, b, request, "stage = 'postgres_purged', fence_generation = fence_generation + 1"),
			sqlstateIntegrity, "fence_generation is set only by the step to fenced or aborted")
		require.NoError(t, updateRequest(t, b, request, "stage = 'postgres_purged'"))
	})

	t.Run("aborted", func(t *testing.T) {
		community, request, _ := b.requestAt(t, "approved")
		b.quiesce(t, community)
		requireSQLState(t, updateRequest(t, b, request, abortSet), sqlstateIntegrity, mismatch)
		abortCommunity(t, b, community)
		abortRequest(t, b, request)

		community, request, _ = b.requestAt(t, "fenced")
		requireSQLState(t, updateRequest(t, b, request, abortSet), sqlstateIntegrity, mismatch)
		abortCommunity(t, b, community)
		abortRequest(t, b, request)
	})
}

// lease_generation and fence_generation never decrease (and a fence
// generation, once set, is never cleared).
func TestRequestGenerationsNeverDecrease(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const never = "lease and fence generations never decrease"
	_, request, generation := b.requestAt(t, "fenced")

	require.NoError(t, updateRequest(t, b, request, "lease_generation = 3, lease_owner = 'executor', lease_until = now() + interval '1 minute'"))
	requireSQLState(t, updateRequest(t, b, request, "lease_generation = 2"), sqlstateIntegrity, never)
	requireSQLState(t, updateRequest(t, b, request, "lease_generation = 0, lease_owner = NULL, lease_until = NULL"), sqlstateIntegrity, never)
	require.NoError(t, updateRequest(t, b, request, "lease_generation = 4"))

	requireSQLState(t, updateRequest(t, b, request, "fence_generation = $2", generation-1), sqlstateIntegrity, never)
	requireSQLState(t, updateRequest(t, b, request, "fence_generation = NULL"), sqlstateIntegrity, never)
	require.NoError(t, updateRequest(t, b, request, "fence_generation = $2", generation))

	var lease, fence int64
	require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT lease_generation, fence_generation FROM community_deletion_requests WHERE id = $1",
		request).Scan(&lease, &fence))
	require.Equal(t, int64(4), lease)
	require.Equal(t, generation, fence)
}

// The request table's CHECK constraints: a 32-byte digest, a non-blank
// requester, bounded error text (in bytes), and blocked_at with blocked_reason.
func TestRequestCheckConstraints(t *testing.T) {
	t.Parallel()
	b := setup(t)

	t.Run("inventory_digest", func(t *testing.T) {
		request := b.submit(t, b.createCommunity(t), "requester")
		freeze := `stage = 'inventoried', schema_manifest = '{}', storage_manifest = '{}', inventory_manifest = '{}',
			inventory_digest = $2, inventory_frozen_at = now()`
		for _, n := range []int{0, 31, 33, 64} {
			requireSQLState(t, updateRequest(t, b, request, freeze, make([]byte, n)), sqlstateCheck,
				"community_deletion_requests_inventory_digest_check")
		}
		require.NoError(t, updateRequest(t, b, request, freeze, make([]byte, 32)))
	})

	t.Run("requested_by", func(t *testing.T) {
		insert := `INSERT INTO community_deletion_requests (community_id, community_host, requested_by)
			SELECT id, host, $2 FROM communities WHERE id = $1`
		community := b.createCommunity(t)
		for _, by := range []string{"", "   ", strings.Repeat("r", 513)} {
			requireSQLState(t, b.exec(t, insert, community, by), sqlstateCheck, "community_deletion_requests_requested_by_check")
		}
		require.NoError(t, b.exec(t, insert, community, strings.Repeat("r", 512)))
	})

	t.Run("bounded text", func(t *testing.T) {
		request := b.submit(t, b.createCommunity(t), "requester")
		for name, text := range map[string]string{
			"4097 bytes":          strings.Repeat("x", 4097),
			"2049 two-byte runes": strings.Repeat("é", 2049),
			"far over":            strings.Repeat("x", 10000),
		} {
			t.Run(name, func(t *testing.T) {
				requireSQLState(t, updateRequest(t, b, request, "last_error = $2, last_error_at = now()", text), sqlstateCheck,
					"community_deletion_requests_bounded_text_check")
			})
		}
		require.NoError(t, updateRequest(t, b, request, "last_error = $2, last_error_at = now()", strings.Repeat("x", 4096)))
		require.NoError(t, updateRequest(t, b, request, "last_error = $2", strings.Repeat("é", 2048)))
	})

	t.Run("blocked", func(t *testing.T) {
		request := b.submit(t, b.createCommunity(t), "requester")
		requireSQLState(t, updateRequest(t, b, request, "blocked_at = now()"), sqlstateCheck, "community_deletion_requests_blocked_check")
		requireSQLState(t, updateRequest(t, b, request, "blocked_reason = 'stuck'"), sqlstateCheck, "community_deletion_requests_blocked_check")
		require.NoError(t, updateRequest(t, b, request, "blocked_at = now(), blocked_reason = 'stuck'"))
		requireSQLState(t, updateRequest(t, b, request, "blocked_at = NULL"), sqlstateCheck, "community_deletion_requests_blocked_check")
		require.NoError(t, updateRequest(t, b, request, "blocked_at = NULL, blocked_reason = NULL"))
	})
}

// created_at and updated_at are the database clock: an insert's forged
// created_at/updated_at and an update's forged updated_at are replaced by
// now().
func TestRequestTimestampsFromDatabaseClock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	community := b.createCommunity(t)
	forged := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

	var request uuid.UUID
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		var created, updated, now time.Time
		if err := tx.QueryRow(ctx, `INSERT INTO community_deletion_requests (community_id, community_host, requested_by, created_at, updated_at)
			SELECT id, host, 'requester', $2, $2 FROM communities WHERE id = $1
			RETURNING id, created_at, updated_at, now()`, community, forged).Scan(&request, &created, &updated, &now); err != nil {
			return err
		}
		require.True(t, created.Equal(now), "created_at %v is not now() %v", created, now)
		require.True(t, updated.Equal(now), "updated_at %v is not now() %v", updated, now)
		return nil
	}))

	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		var updated, now time.Time
		if err := tx.QueryRow(ctx, `UPDATE community_deletion_requests SET reason = 'x', updated_at = $2 WHERE id = $1
			RETURNING updated_at, now()`, request, forged).Scan(&updated, &now); err != nil {
			return err
		}
		require.True(t, updated.Equal(now), "updated_at %v is not now() %v", updated, now)
		return nil
	}))
	var created time.Time
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT created_at FROM community_deletion_requests WHERE id = $1", request).Scan(&created))
	require.False(t, created.Equal(forged))
}

// A request becomes drained only with its destructive storage manifest
// frozen (23000): the key list the drain deletes must be fixed first.
func TestRequestDrainedNeedsFrozenManifest(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const unfrozen = "drained needs the destructive storage manifest frozen"
	_, request, _ := b.requestAt(t, "fenced")
	require.NoError(t, insertChunk(t, b, request, 0))

	requireSQLState(t, updateRequest(t, b, request, "stage = 'drained'"), sqlstateIntegrity, unfrozen)
	requireSQLState(t, updateRequest(t, b, request, "stage = 'drained', reason = 'skip the freeze'"), sqlstateIntegrity, unfrozen)
	require.Equal(t, "fenced", requestStage(t, b, request))

	b.freezeDestructive(t, request)
	require.NoError(t, updateRequest(t, b, request, "stage = 'drained'"))
	require.Equal(t, "drained", requestStage(t, b, request))
}

// A request's fence_generation changes only in the update that moves its
// stage to fenced or aborted (23000): never in place, and never with
// another step.
func TestRequestFenceGenerationSetOnlyByFenceOrAbort(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const onlyThere = "fence_generation is set only by the step to fenced or aborted"

	const raise = "fence_generation = fence_generation + 1"
	for name, tc := range map[string]struct{ stage, set string }{
		"submitted in place": {"submitted", "fence_generation = 0"},
		"submitted with the inventory step": {"submitted", "fence_generation = 0, " + strings.Join([]string{
			"stage = 'inventoried'", "schema_manifest = '{}'", "storage_manifest = '{}'", "inventory_manifest = '{}'",
			"inventory_digest = decode(repeat('ab', 32), 'hex')", "inventory_frozen_at = now()"}, ", ")},
		"inventoried in place":                 {"inventoried", "fence_generation = 0"},
		"approved in place":                    {"approved", "fence_generation = 0"},
		"fenced raised in place":               {"fenced", raise},
		"fenced raised with the freeze":        {"fenced", raise + ", destructive_storage_manifest = '{}', destructive_storage_frozen_at = now()"},
		"drained raised in place":              {"drained", raise},
		"drained raised with its next step":    {"drained", raise + ", stage = 'bindings_removed'"},
		"bindings_removed raised in place":     {"bindings_removed", raise},
		"postgres_purged raised with its step": {"postgres_purged", raise + ", stage = 'cache_purged'"},
	} {
		t.Run(name, func(t *testing.T) {
			_, request, _ := b.requestAt(t, tc.stage)
			requireSQLState(t, updateRequest(t, b, request, tc.set), sqlstateIntegrity, onlyThere)
			require.Equal(t, tc.stage, requestStage(t, b, request))
		})
	}

	t.Run("set in the approve step", func(t *testing.T) {
		_, request, _ := b.requestAt(t, "inventoried")
		err := pgx.BeginFunc(t.Context(), b.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(t.Context(), `INSERT INTO community_deletion_approvals (request_id, community_id, inventory_digest, approved_by)
				SELECT id, community_id, inventory_digest, 'approver' FROM community_deletion_requests WHERE id = $1`, request); err != nil {
				return err
			}
			_, err := tx.Exec(t.Context(), "UPDATE community_deletion_requests SET stage = 'approved', fence_generation = 0 WHERE id = $1", request)
			return err
		})
		requireSQLState(t, err, sqlstateIntegrity, onlyThere)
		require.Equal(t, "inventoried", requestStage(t, b, request))
	})

	t.Run("allowed by the fence step", func(t *testing.T) {
		community, request, generation := b.requestAt(t, "fenced") // the fence helper sets it
		var stored int64
		require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT fence_generation FROM community_deletion_requests WHERE id = $1",
			request).Scan(&stored))
		require.Equal(t, generation, stored)
		state, communityGeneration := b.communityState(t, community)
		require.Equal(t, "fenced", state)
		require.Equal(t, communityGeneration, stored)
		require.NoError(t, updateRequest(t, b, request, "fence_generation = fence_generation"), "an unchanged value passes")
	})

	t.Run("allowed by the abort step", func(t *testing.T) {
		community, request, _ := b.requestAt(t, "fenced")
		next := abortCommunity(t, b, community)
		require.NoError(t, updateRequest(t, b, request, abortSet+", fence_generation = $2", next))
		var stored int64
		require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT fence_generation FROM community_deletion_requests WHERE id = $1",
			request).Scan(&stored))
		require.Equal(t, next, stored)
	})
}

// A stage change runs only at READ COMMITTED: REPEATABLE READ and
// SERIALIZABLE pin a snapshot that cannot see the community's current state
// (25000). Other bookkeeping may still be written at those levels.
func TestRequestStageChangeRefusesSnapshotIsolation(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const pinned = "pins a snapshot that cannot see the community's current state"
	const freezeSet = `stage = 'inventoried', schema_manifest = '{}', storage_manifest = '{}', inventory_manifest = '{}',
		inventory_digest = decode(repeat('ab', 32), 'hex'), inventory_frozen_at = now()`
	update := func(level pgx.TxIsoLevel, request uuid.UUID, set string) error {
		return pgx.BeginTxFunc(t.Context(), b.pool, pgx.TxOptions{IsoLevel: level}, func(tx pgx.Tx) error {
			_, err := tx.Exec(t.Context(), "UPDATE community_deletion_requests SET "+set+" WHERE id = $1", request)
			return err
		})
	}

	for _, level := range []pgx.TxIsoLevel{pgx.RepeatableRead, pgx.Serializable} {
		t.Run(string(level), func(t *testing.T) {
			for _, tc := range []struct{ stage, set string }{
				{"submitted", freezeSet},
				{"submitted", abortSet},
				{"approved", abortSet},
				{"fenced", "stage = 'drained'"},
				{"drained", "stage = 'bindings_removed'"},
			} {
				_, request, _ := b.requestAt(t, tc.stage)
				if tc.stage == "fenced" {
					b.freezeDestructive(t, request)
				}
				requireSQLState(t, update(level, request, tc.set), sqlstateIsolation, pinned)
				require.Equal(t, tc.stage, requestStage(t, b, request))
				require.NoError(t, update(level, request, "reason = 'noted', attempts = attempts + 1"),
					"a change that keeps the stage is not refused")
			}
		})
	}

	for _, tc := range []struct{ stage, set, want string }{
		{"submitted", freezeSet, "inventoried"},
		{"submitted", abortSet, "aborted"},
		{"drained", "stage = 'bindings_removed'", "bindings_removed"},
	} {
		_, request, _ := b.requestAt(t, tc.stage)
		require.NoError(t, update(pgx.ReadCommitted, request, tc.set))
		require.Equal(t, tc.want, requestStage(t, b, request))
	}
}
