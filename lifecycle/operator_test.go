package lifecycle_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/testfactory"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// Submit is idempotent for the same requester while the request is
// submitted, and refuses a missing or already requested community (the
// stages it is refused at: TestSubmitRefusesWhileARequestIsOpen).
func TestSubmitIsIdempotentAndRefusesUnsubmittableCommunities(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	created := testfactory.Community(ctx, t, b.DB, nil)
	community, host := created.ID, created.Host

	first, err := b.Operator.Submit(ctx, strings.ToUpper(host), "  alice ", "spam tenant")
	require.NoError(t, err)
	require.Equal(t, community, first.CommunityID)
	require.Equal(t, host, first.CommunityHost, "the stored host is the community's own")
	require.Equal(t, "alice", first.RequestedBy)
	require.Equal(t, "spam tenant", first.Reason)
	require.Equal(t, lifecycle.StageSubmitted, first.Stage)

	again, err := b.Operator.Submit(ctx, host, "alice", "second thoughts")
	require.NoError(t, err)
	require.Equal(t, first.ID, again.ID, "the same requester gets the same request back")
	require.Equal(t, "spam tenant", again.Reason, "and it is unchanged")

	_, err = b.Operator.Submit(ctx, host, "bob", "")
	require.ErrorIs(t, err, lifecycle.ErrRefused, "another requester cannot open a second request")
	_, err = b.Operator.Submit(ctx, "missing.example", "alice", "")
	require.ErrorIs(t, err, lifecycle.ErrRefused)

	// Once inventoried the request is no longer returned as a resubmission.
	schema, err := b.Operator.InventorySchema(ctx, community)
	require.NoError(t, err)
	_, err = b.Operator.FreezeInventory(ctx, first.ID, lifecycle.FrozenInventory{Schema: *schema, Storage: testfactory.EmptyStorage(community)})
	require.NoError(t, err)
	_, err = b.Operator.Submit(ctx, host, "alice", "")
	require.ErrorIs(t, err, lifecycle.ErrRefused)

	var requests int
	require.NoError(t, b.Pool.QueryRow(ctx, "SELECT count(*) FROM community_deletion_requests").Scan(&requests))
	require.Equal(t, 1, requests, "no refused submission left a request")
}

// While a community's request is open, at any stage, another submission
// is refused and writes nothing, and so it is once the community is a
// tombstone; only an aborted request makes way for a fresh one.
func TestSubmitRefusesWhileARequestIsOpen(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	for _, stage := range lifecycle.Stages() {
		t.Run(string(stage), func(t *testing.T) {
			request, _ := testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{Stage: stage})
			before := b.snapshot(t, request.ID)
			fresh, err := b.Operator.Submit(ctx, request.CommunityHost, "someone-else", "")
			if stage != lifecycle.StageAborted {
				require.ErrorIs(t, err, lifecycle.ErrRefused)
				require.Equal(t, before, b.snapshot(t, request.ID), "a refused submission writes nothing")
				return
			}
			require.NoError(t, err)
			require.NotEqual(t, request.ID, fresh.ID)
			require.Equal(t, lifecycle.StageSubmitted, fresh.Stage)
			require.Equal(t, request.CommunityID, fresh.CommunityID)
		})
	}
}

// FreezeInventory stores the inventory, its parts and its digest once;
// Approve binds to it, refuses the requester and a stored inventory that no
// longer hashes to its digest, and Inspect shows the approval.
func TestFreezeApproveAndInspect(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	submitted, _ := testfactory.Request(ctx, t, b.DB, nil)
	schema, err := b.Operator.InventorySchema(ctx, submitted.CommunityID)
	require.NoError(t, err)
	inventory := lifecycle.FrozenInventory{Schema: *schema, Storage: testfactory.EmptyStorage(submitted.CommunityID)}
	request, err := b.Operator.FreezeInventory(ctx, submitted.ID, inventory)
	require.NoError(t, err)
	require.Equal(t, lifecycle.StageInventoried, request.Stage)
	digest, err := inventory.Digest()
	require.NoError(t, err)
	require.Equal(t, request.InventoryDigest, hex.EncodeToString(digest[:]))
	require.NotNil(t, request.Inventory)
	stored, err := request.Inventory.Digest()
	require.NoError(t, err)
	require.Equal(t, digest, stored, "the stored inventory decodes to the frozen one")
	require.NotNil(t, request.InventoryFrozenAt)

	again, err := b.Operator.FreezeInventory(ctx, request.ID, inventory)
	require.NoError(t, err, "an unapproved inventory may be taken again")
	require.Equal(t, request.InventoryDigest, again.InventoryDigest)
	request = again
	_, err = b.Operator.FreezeInventory(ctx, uuid.New(), inventory)
	require.ErrorIs(t, err, lifecycle.ErrNotFound)

	before := b.snapshot(t, request.ID)
	_, err = b.Approver.Approve(ctx, request.ID, "Requester", "")
	require.ErrorIs(t, err, lifecycle.ErrRefused, "the requester cannot approve")
	require.Equal(t, before, b.snapshot(t, request.ID))

	approved, err := b.Approver.Approve(ctx, request.ID, "approver", "  looks right ")
	require.NoError(t, err)
	require.Equal(t, lifecycle.StageApproved, approved.Stage)
	_, err = b.Approver.Approve(ctx, request.ID, "approver-2", "")
	require.ErrorIs(t, err, lifecycle.ErrRefused, "approved once")

	inspection, err := b.Operator.Inspect(ctx, request.ID)
	require.NoError(t, err)
	require.Equal(t, approved.ID, inspection.Request.ID)
	require.NotNil(t, inspection.Approval)
	require.Equal(t, request.InventoryDigest, inspection.Approval.InventoryDigest)
	require.Equal(t, "approver", inspection.Approval.ApprovedBy)
	require.Equal(t, "looks right", inspection.Approval.Note)
	require.False(t, inspection.Approval.ApprovedAt.IsZero())
	require.Empty(t, inspection.Checkpoints)
	_, err = b.Operator.Inspect(ctx, uuid.New())
	require.ErrorIs(t, err, lifecycle.ErrNotFound)
	_, err = b.Operator.Get(ctx, uuid.New())
	require.ErrorIs(t, err, lifecycle.ErrNotFound)

	// An inventory frozen behind the clients' backs with a digest that does
	// not match it is never approved.
	forged, _ := testfactory.Request(ctx, t, b.DB, nil)
	community := forged.CommunityID
	bogus := sha256.Sum256([]byte("not the inventory"))
	require.NoError(t, b.exec(t, `UPDATE community_deletion_requests
		SET stage = 'inventoried', schema_manifest = '{}', storage_manifest = $2, inventory_manifest = $3,
		    inventory_digest = $4, inventory_frozen_at = now() WHERE id = $1`,
		forged.ID, mustJSON(t, testfactory.EmptyStorage(community)), mustJSON(t, lifecycle.FrozenInventory{Storage: testfactory.EmptyStorage(community)}), bogus[:]))
	before = b.snapshot(t, forged.ID)
	_, err = b.Approver.Approve(ctx, forged.ID, "approver", "")
	require.ErrorIs(t, err, lifecycle.ErrRefused)
	require.Contains(t, err.Error(), "stored digest")
	require.Equal(t, before, b.snapshot(t, forged.ID))
}

// List and ListPage return requests newest first; ListPage pages by keyset
// without gaps or repeats and filters by stage and blocked state.
func TestListPageKeysetPaginationAndFilters(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	var all []uuid.UUID // oldest first
	stages := map[uuid.UUID]lifecycle.Stage{}
	blocked := map[uuid.UUID]bool{}
	for i := range 9 {
		stage := []lifecycle.Stage{lifecycle.StageSubmitted, lifecycle.StageInventoried, lifecycle.StageApproved}[i%3]
		request, _ := testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{Stage: stage,
			Blocked: i%4 == 0, BlockedUnit: "pre_claim:setup", BlockedReason: "held"})
		all = append(all, request.ID)
		stages[request.ID] = request.Stage
		blocked[request.ID] = request.Blocked()
	}
	newestFirst := slices.Clone(all)
	slices.Reverse(newestFirst)

	listed, err := b.Operator.List(ctx, lifecycle.ListParams{Limit: 1000})
	require.NoError(t, err)
	require.Equal(t, newestFirst, requestIDs(listed.Requests))
	listed, err = b.Operator.List(ctx, lifecycle.ListParams{Limit: 2})
	require.NoError(t, err)
	require.Equal(t, newestFirst[:2], requestIDs(listed.Requests))

	pages := func(params lifecycle.ListParams) []uuid.UUID {
		t.Helper()
		var ids []uuid.UUID
		for range 20 {
			page, err := b.Operator.List(ctx, params)
			require.NoError(t, err)
			require.LessOrEqual(t, len(page.Requests), params.Limit)
			ids = append(ids, requestIDs(page.Requests)...)
			if page.Next == nil {
				return ids
			}
			require.Len(t, page.Requests, params.Limit, "only the last page is short")
			params.After = page.Next
		}
		t.Fatal("pagination did not end")
		return nil
	}
	filter := func(keep func(uuid.UUID) bool) []uuid.UUID {
		var ids []uuid.UUID
		for _, id := range newestFirst {
			if keep(id) {
				ids = append(ids, id)
			}
		}
		return ids
	}

	for _, limit := range []int{1, 2, 4, 9, 10} {
		require.Equal(t, newestFirst, pages(lifecycle.ListParams{Limit: limit}), "limit %d", limit)
	}
	yes, no := true, false
	approved := lifecycle.StageApproved
	inventoried := lifecycle.StageInventoried
	require.Equal(t, filter(func(id uuid.UUID) bool { return blocked[id] }), pages(lifecycle.ListParams{Limit: 2, Blocked: &yes}))
	require.Equal(t, filter(func(id uuid.UUID) bool { return !blocked[id] }), pages(lifecycle.ListParams{Limit: 2, Blocked: &no}))
	require.Equal(t, filter(func(id uuid.UUID) bool { return stages[id] == approved }), pages(lifecycle.ListParams{Limit: 2, Stage: &approved}))
	require.Equal(t, filter(func(id uuid.UUID) bool { return stages[id] == inventoried && !blocked[id] }),
		pages(lifecycle.ListParams{Limit: 1, Stage: &inventoried, Blocked: &no}))
	require.Equal(t, filter(func(id uuid.UUID) bool { return stages[id] == approved && blocked[id] }),
		pages(lifecycle.ListParams{Limit: 5, Stage: &approved, Blocked: &yes}))

	// A request created after the first page was read never shifts the
	// pages that follow: it sorts before the cursor.
	first, err := b.Operator.List(ctx, lifecycle.ListParams{Limit: 3})
	require.NoError(t, err)
	testfactory.Request(ctx, t, b.DB, nil)
	rest := pages(lifecycle.ListParams{Limit: 3, After: first.Next})
	require.Equal(t, newestFirst[3:], rest)
}

// The listing and claim queries are served by their indexes on a table
// large enough for the planner to care.
func TestRequestQueriesUseTheirIndexes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// 3,000 aborted requests (aborted is the only stage rows can be bulk
	// loaded into without walking the lifecycle), a tenth of them blocked.
	require.NoError(t, b.exec(t, `INSERT INTO communities (host) SELECT format('list-%s.example', g) FROM generate_series(1, 3000) g`))
	require.NoError(t, b.exec(t, `INSERT INTO community_deletion_requests (community_id, community_host, requested_by)
		SELECT id, host, 'requester' FROM communities`))
	// Blocked first (the executor's change), then aborted (the operator's,
	// which may keep a block but never sets one).
	require.NoError(t, b.exec(t, `UPDATE community_deletion_requests
		SET blocked_at = now(), blocked_reason = 'held' WHERE random() < 0.1`))
	require.NoError(t, b.exec(t, `UPDATE community_deletion_requests
		SET stage = 'aborted', aborted_at = now(), completed_at = now(), aborted_by = 'operator', abort_reason = 'bulk'`))
	testfactory.Request(t.Context(), t, b.DB, &testfactory.RequestOpts{Stage: lifecycle.StageApproved})
	require.NoError(t, b.exec(t, "ANALYZE community_deletion_requests"))

	const file = "community_deletion_requests.sql"
	later := time.Now().Add(time.Hour)
	cursor := uuid.New()
	requireIndexUse(t, b.explainQuery(t, file, "DeletionRequestList", 50), "community_deletion_requests_created_idx")
	requireIndexUse(t, b.explainQuery(t, file, "DeletionRequestListPage", later, cursor, nil, 50), "community_deletion_requests_created_idx")
	requireIndexUse(t, b.explainQuery(t, file, "DeletionRequestListPage", nil, nil, false, 50), "community_deletion_requests_created_idx")
	requireIndexUse(t, b.explainQuery(t, file, "DeletionRequestListPageBlocked", later, cursor, 50), "community_deletion_requests_blocked_created_idx")
	requireIndexUse(t, b.explainQuery(t, file, "DeletionRequestListPageByStage", "approved", later, cursor, nil, 50),
		"community_deletion_requests_stage_created_idx")
	// With few approvals the planner may start from them instead of from
	// community_deletion_requests_claimable_idx; either way it never reads
	// the whole request table.
	requireNoSeqScan(t, b.explainQuery(t, file, "DeletionRequestClaimNextCandidate"), "community_deletion_requests")
	requireNoSeqScan(t, b.explainQuery(t, file, "DeletionRequestClaimSpecificCandidate", uuid.New()), "community_deletion_requests")
}

// Malformed arguments are refused with ErrInvalidInput before anything is
// written.
func TestInputValidationChangesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	request, token := testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{Stage: lifecycle.StageApproved, Claimed: true})
	host := testfactory.Community(ctx, t, b.DB, nil).Host
	before := b.snapshot(t, request.ID)
	noStage := lifecycle.Stage("nowhere")
	zeroCursor := &lifecycle.Cursor{ID: uuid.New()}

	// errOf keeps the error of a call that returns a value too.
	errOf := func(_ any, err error) error { return err }
	approved := lifecycle.StageApproved
	calls := []struct {
		name string
		call func() error
	}{
		{"Submit blank requester", func() error { return errOf(b.Operator.Submit(ctx, host, " \t", "")) }},
		{"Submit blank host", func() error { return errOf(b.Operator.Submit(ctx, "", "alice", "")) }},
		{"Submit long requester", func() error {
			return errOf(b.Operator.Submit(ctx, host, strings.Repeat("x", lifecycle.MaxOperatorBytes+1), ""))
		}},
		{"Submit NUL requester", func() error { return errOf(b.Operator.Submit(ctx, host, "ali\x00ce", "")) }},
		{"Approve blank approver", func() error { return errOf(b.Approver.Approve(ctx, request.ID, "", "")) }},
		{"Abort blank operator", func() error { return errOf(b.Operator.Abort(ctx, request.ID, " ", "reason")) }},
		{"Abort blank reason", func() error { return errOf(b.Operator.Abort(ctx, request.ID, "operator", "  ")) }},
		{"Unblock blank operator", func() error { return errOf(b.Operator.Unblock(ctx, request.ID, "", "reason")) }},
		{"Unblock blank reason", func() error { return errOf(b.Operator.Unblock(ctx, request.ID, "operator", "")) }},
		{"BlockBeforeClaim blank unit", func() error { return errOf(b.Engine.BlockBeforeClaim(ctx, request.ID, "", "error")) }},
		{"Block blank unit", func() error {
			return b.Engine.Block(ctx, token, lifecycle.BlockParams{Stage: lifecycle.StageApproved, Unit: "", Err: "error"})
		}},
		{"Block unknown stage", func() error {
			return b.Engine.Block(ctx, token, lifecycle.BlockParams{Stage: noStage, Unit: "unit", Err: "error"})
		}},
		{"Block non-execution stage", func() error {
			return b.Engine.Block(ctx, token, lifecycle.BlockParams{Stage: lifecycle.StageInventoried, Unit: "unit", Err: "error"})
		}},
		{"RecordRetry negative delay", func() error {
			return b.Engine.RecordRetry(ctx, token, lifecycle.RetryParams{Stage: lifecycle.StageApproved, Unit: "unit", Err: "error", After: -time.Second})
		}},
		{"RecordRetry long unit", func() error {
			return b.Engine.RecordRetry(ctx, token, lifecycle.RetryParams{Stage: lifecycle.StageApproved, Unit: strings.Repeat("u", 513), Err: "error", After: 0})
		}},
		{"ClaimNext blank owner", func() error { return errOf(b.Engine.ClaimNext(ctx, "", lifecycle.DefaultLeaseDuration)) }},
		{"ClaimNext zero lease", func() error { return errOf(b.Engine.ClaimNext(ctx, "executor", 0)) }},
		{"ClaimRequest negative lease", func() error { return errOf(b.Engine.ClaimRequest(ctx, request.ID, "executor", -time.Second)) }},
		{"ClaimRequest sub-microsecond lease", func() error {
			return errOf(b.Engine.ClaimRequest(ctx, request.ID, "executor", time.Nanosecond))
		}},
		{"Heartbeat zero lease", func() error { return b.Engine.Heartbeat(ctx, token, 0) }},
		{"Stop blank id", func() error { return b.Engine.Stop(ctx, lifecycle.StopParams{ExecutorID: " ", Release: &token}) }},
		{"VerifyToken unknown stage", func() error { return b.Engine.VerifyToken(ctx, token, noStage) }},
		{"List limit over MaxListLimit", func() error {
			return errOf(b.Operator.List(ctx, lifecycle.ListParams{Limit: lifecycle.MaxListLimit + 1}))
		}},
		{"List limit 0", func() error { return errOf(b.Operator.List(ctx, lifecycle.ListParams{Limit: 0})) }},
		{"List negative limit", func() error { return errOf(b.Operator.List(ctx, lifecycle.ListParams{Limit: -5})) }},
		{"List limit 1001 by stage", func() error {
			return errOf(b.Operator.List(ctx, lifecycle.ListParams{Limit: 1001, Stage: &approved}))
		}},
		{"List unknown stage", func() error { return errOf(b.Operator.List(ctx, lifecycle.ListParams{Limit: 10, Stage: &noStage})) }},
		{"List zero cursor", func() error { return errOf(b.Operator.List(ctx, lifecycle.ListParams{Limit: 10, After: zeroCursor})) }},
		{"FreezeInventory empty inventory", func() error {
			return errOf(b.Operator.FreezeInventory(ctx, request.ID, lifecycle.FrozenInventory{}))
		}},
		{"EnterBindingsRemoved non-JSON detail", func() error {
			return b.Engine.EnterBindingsRemoved(ctx, token.WithFence(1), func() {})
		}},
	}
	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			require.ErrorIs(t, c.call(), lifecycle.ErrInvalidInput)
			require.Equal(t, before, b.snapshot(t, request.ID), "a refused call changes nothing")
		})
	}
	var requests int
	require.NoError(t, b.Pool.QueryRow(ctx, "SELECT count(*) FROM community_deletion_requests").Scan(&requests))
	require.Equal(t, 1, requests)
}

func requestIDs(requests []*lifecycle.Request) []uuid.UUID {
	ids := make([]uuid.UUID, 0, len(requests))
	for _, r := range requests {
		ids = append(ids, r.ID)
	}
	return ids
}

// mustJSON encodes v.
func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}
