// Package testfactory builds the records tests of the deletion lifecycle
// start from: communities with tenant rows, deletion requests at any stage,
// serving write leases and manifest key chunks. It follows River's
// rivershared/testfactory: each builder takes (ctx, tb, db, *XxxOpts), every
// field of the options is optional with a sensible default (nil options mean
// all defaults), and the builder returns what it created, failing the test on
// any error, so that a test's setup reads as the specification of its start.
//
// Requests walk the lifecycle through the real clients, as the fixture's
// test logins: an operator submits and freezes the inventory, a second
// operator approves it (the two-person rule compares database roles), and the
// executor's engine claims the request and takes every step after. The
// database's guards therefore see the same calls, in the same order and from
// the same roles, as in production, and refuse a builder that asks for
// anything out of order. SQL, as the test database's superuser, is used only
// for what no client does: inserting communities and their tenant rows, and
// moving a lease's expiry into the past in place of waiting for the clock.
package testfactory

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/fixture"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// DB is the test database the builders write to: URL and Pool reach it as
// its superuser, and Clients are the lifecycle clients over the fixture's
// test logins. Tests use the same clients for the calls under test.
type DB struct {
	fixture.Clients

	// URL is the superuser connection string of the test database.
	URL string
	// Pool is a superuser pool on it.
	Pool *pgxpool.Pool
}

// NewDB returns the DB of the test database at url, with pool a superuser
// pool on it. It connects the four lifecycle clients as the fixture's test
// logins (see fixture.NewClients); their pools close when the test ends.
func NewDB(tb testing.TB, url string, pool *pgxpool.Pool) *DB {
	tb.Helper()
	return &DB{URL: url, Pool: pool, Clients: fixture.NewClients(tb, url)}
}

// Rows is how many rows of a community Community writes to each fixture
// table. Rows that reference others need them: channels need members,
// messages need channels, reactions and attachments need messages.
type Rows struct {
	Members, Channels, Messages, Reactions, Attachments, Activity, AuditEvents int
}

// CommunityOpts are the options of Community.
type CommunityOpts struct {
	// ID is the community's id; default a random one.
	ID uuid.UUID
	// Host is its host; default "c-<id>.example".
	Host string
	// SigningKey is its profile's signing key; default "key".
	SigningKey []byte
	// Icon is its profile's icon; default "icon.png".
	Icon string
	// ArchivedAt is when it was archived; default never.
	ArchivedAt *time.Time
	// Rows are its rows in the fixture tables; default none.
	Rows Rows
}

// CommunityRow is a community Community created.
type CommunityRow struct {
	ID   uuid.UUID
	Host string
}

// Community inserts an active community with a profile (a signing key and an
// icon, which its tombstone must scrub) and, with opts.Rows, tenant rows in
// the fixture tables: members who were mostly invited by the member before
// them and every 37th by the one after (a newer row), channels, messages,
// reactions and attachments referencing them, activity, and audit events
// (the 'nullify' table). It writes as the superuser, through the write
// fence, as a service would.
func Community(ctx context.Context, tb testing.TB, db *DB, opts *CommunityOpts) *CommunityRow {
	tb.Helper()
	if opts == nil {
		opts = &CommunityOpts{}
	}
	id := opts.ID
	if id == uuid.Nil {
		id = uuid.New()
	}
	host := cmp.Or(opts.Host, fmt.Sprintf("c-%s.example", id))
	key := opts.SigningKey
	if key == nil {
		key = []byte("key")
	}
	_, err := db.Pool.Exec(ctx, `INSERT INTO community_deletion.communities (id, host, signing_key, icon, archived_at)
		VALUES ($1, $2, $3, $4, $5)`, id, host, key, cmp.Or(opts.Icon, "icon.png"), opts.ArchivedAt)
	require.NoError(tb, err, "testfactory: insert community %s", host)
	WriteRows(ctx, tb, db, id, opts.Rows)
	return &CommunityRow{ID: id, Host: host}
}

// WriteRows writes rows of the active community into the fixture tables, as
// Community's Rows option does, beside any rows it has: for a test that
// interleaves the rows of several communities, or adds a partition first.
func WriteRows(ctx context.Context, tb testing.TB, db *DB, community uuid.UUID, rows Rows) {
	tb.Helper()
	needs := []struct {
		n, of int
		what  string
	}{
		{rows.Channels, rows.Members, "channels need members"},
		{rows.Messages, min(rows.Channels, rows.Members), "messages need channels and members"},
		{rows.Reactions, min(rows.Messages, rows.Members), "reactions need messages and members"},
		{rows.Attachments, rows.Messages, "attachments need messages"},
	}
	for _, need := range needs {
		if need.n > 0 && need.of == 0 {
			tb.Fatalf("testfactory: rows %+v: %s", rows, need.what)
		}
	}
	statements := []struct {
		sql string
		n   int
	}{
		{`INSERT INTO fixture_members (community_id, handle) SELECT $1, 'member-' || g FROM generate_series(1, $2::int) g`, rows.Members},
		{`UPDATE fixture_members m SET invited_by = CASE WHEN m.id % 37 = 0 THEN p.next ELSE p.prev END
			FROM (SELECT id, lag(id) OVER (ORDER BY id) AS prev, lead(id) OVER (ORDER BY id) AS next
			      FROM fixture_members WHERE community_id = $1) p
			WHERE m.id = p.id AND m.community_id = $1 AND $2::int > 0`, rows.Members},
		{`INSERT INTO fixture_channels (community_id, name, created_by)
			SELECT $1, 'channel-' || g, mb[1 + g % cardinality(mb)] FROM generate_series(1, $2::int) g,
			(SELECT array_agg(id ORDER BY id) AS mb FROM fixture_members WHERE community_id = $1) m`, rows.Channels},
		{`INSERT INTO fixture_messages (community_id, channel_id, author_id, body)
			SELECT $1, ch[1 + g % cardinality(ch)], mb[1 + g % cardinality(mb)], 'message ' || g FROM generate_series(1, $2::int) g,
			(SELECT array_agg(id ORDER BY id) AS ch FROM fixture_channels WHERE community_id = $1) c,
			(SELECT array_agg(id ORDER BY id) AS mb FROM fixture_members WHERE community_id = $1) m`, rows.Messages},
		{`INSERT INTO fixture_reactions (community_id, message_id, member_id, emoji)
			SELECT $1, ms[1 + g % cardinality(ms)], mb[1 + g % cardinality(mb)], 'emoji-' || (g % 5) FROM generate_series(1, $2::int) g,
			(SELECT array_agg(id ORDER BY id) AS ms FROM fixture_messages WHERE community_id = $1) s,
			(SELECT array_agg(id ORDER BY id) AS mb FROM fixture_members WHERE community_id = $1) m`, rows.Reactions},
		{`INSERT INTO fixture_attachments (community_id, message_id, storage_key)
			SELECT $1, ms[1 + g % cardinality(ms)], 'key/' || g FROM generate_series(1, $2::int) g,
			(SELECT array_agg(id ORDER BY id) AS ms FROM fixture_messages WHERE community_id = $1) s`, rows.Attachments},
		{`INSERT INTO fixture_activity (community_id, kind) SELECT $1, 'kind-' || (g % 7) FROM generate_series(1, $2::int) g`, rows.Activity},
		{`INSERT INTO fixture_audit_events (community_id, action) SELECT $1, 'action-' || g FROM generate_series(1, $2::int) g`, rows.AuditEvents},
	}
	for _, s := range statements {
		if s.n == 0 {
			continue
		}
		_, err := db.Pool.Exec(ctx, s.sql, community, s.n)
		require.NoError(tb, err, "testfactory: write rows of %s: %s", community, s.sql)
	}
}

// Prefixes returns community's tenant prefixes in the tests' storage
// layout, in manifest order: _meta/<id>/, _uploads/<id>/ and repos/<id>/.
func Prefixes(community uuid.UUID) []string {
	return []string{
		fmt.Sprintf("_meta/%s/", community),
		fmt.Sprintf("_uploads/%s/", community),
		fmt.Sprintf("repos/%s/", community),
	}
}

// Prefix returns the summary of prefix holding keys, each one byte long;
// without keys, the summary of an empty prefix. The keys must be in strictly
// ascending byte order, as a listing returns them.
func Prefix(tb testing.TB, prefix string, keys ...string) lifecycle.PrefixManifest {
	tb.Helper()
	var digest lifecycle.KeyStreamDigest
	for _, key := range keys {
		require.NoError(tb, digest.Fold(key), "testfactory: summarize %s", prefix)
	}
	hexDigest, count := digest.Sum()
	return lifecycle.PrefixManifest{Prefix: prefix, ObjectCount: count, TotalBytes: count, KeysDigest: hexDigest}
}

// EmptyStorage returns the storage manifest of community's tenant prefixes
// (Prefixes), all of them empty: what a community without stored objects
// freezes.
func EmptyStorage(community uuid.UUID) lifecycle.StorageManifest {
	m := lifecycle.StorageManifest{Version: lifecycle.StorageManifestVersion}
	for _, prefix := range Prefixes(community) {
		m.Prefixes = append(m.Prefixes, lifecycle.PrefixManifest{Prefix: prefix, KeysDigest: lifecycle.EmptyKeysDigest})
	}
	return m
}

// RequestOpts are the options of Request. Options for a step the request
// does not reach (a lease before approved, chunks before fenced) fail the
// test rather than being ignored.
type RequestOpts struct {
	// Stage is the stage the request is left at; default StageSubmitted.
	Stage lifecycle.Stage
	// CommunityID is the community to delete; default a new Community.
	CommunityID uuid.UUID
	// RequestedBy submits the request; default "requester".
	RequestedBy string
	// Reason is the submitter's reason; default "test deletion".
	Reason string
	// Storage is the storage part of the frozen inventory (its schema part
	// is the live InventorySchema); default EmptyStorage of the community.
	Storage *lifecycle.StorageManifest
	// ApprovedBy approves, as the second operator; default "approver".
	ApprovedBy string
	// ApprovalNote is the approval's note; default none.
	ApprovalNote string
	// GracePeriod is the approval's grace period; default the deployment's
	// (zero unless set). A request walked past approved waits for its end,
	// on the database clock, before the claim.
	GracePeriod *time.Duration
	// Claimed claims an approved request; every later stage is claimed.
	Claimed bool
	// Quiesced claims an approved request and begins quiescing its
	// community; every later stage is past quiescing.
	Quiesced bool
	// LeaseOwner is the executor that claims; default "executor".
	LeaseOwner string
	// LeaseDuration is the claim's lease; default DefaultLeaseDuration.
	LeaseDuration time.Duration
	// Chunks are appended, in order, as the destructive key list once the
	// request is fenced. The destructive manifest frozen after them is
	// Storage with each prefix that has chunks summarizing their keys.
	Chunks []lifecycle.ManifestKeyChunk
	// DestructiveFrozen freezes the destructive manifest of a request left
	// at StageFenced; from StageDrained on it is always frozen.
	DestructiveFrozen bool
	// AbortedFrom is, for StageAborted, the stage the request is walked to
	// and aborted at; default StageSubmitted.
	AbortedFrom lifecycle.Stage
	// AbortedBy aborts, for StageAborted; default "operator".
	AbortedBy string
	// AbortReason is why; default "test abort".
	AbortReason string
	// Blocked blocks the request durably once it is at its (not terminal)
	// stage: a claimed request through Engine.Block, which also releases
	// its lease (the returned token is then stale), any other through
	// BlockBeforeClaim.
	Blocked bool
	// BlockedUnit is the failed checkpoint's unit; default "test:blocked".
	BlockedUnit string
	// BlockedReason is the block's error text; default "blocked by the test".
	BlockedReason string
}

// Request creates a deletion request and walks it to opts.Stage through the
// real clients, every step in order as its guard demands, and returns it as
// stored with its lease token: the claim's, bound to the fence generation
// from StageFenced on, or the zero token for a request never claimed.
// StageAborted walks to opts.AbortedFrom and aborts there; at
// StageRetentionPending and StageAborted the token is stale.
func Request(ctx context.Context, tb testing.TB, db *DB, opts *RequestOpts) (*lifecycle.Request, lifecycle.LeaseToken) {
	tb.Helper()
	if opts == nil {
		opts = &RequestOpts{}
	}
	stage := cmp.Or(opts.Stage, lifecycle.StageSubmitted)
	target := stage
	if stage == lifecycle.StageAborted {
		target = cmp.Or(opts.AbortedFrom, lifecycle.StageSubmitted)
		if !target.Abortable() {
			tb.Fatalf("testfactory: a request at %s cannot be aborted", target)
		}
	} else if opts.AbortedFrom != "" {
		tb.Fatalf("testfactory: AbortedFrom needs Stage aborted, not %s", stage)
	}
	if !stage.Valid() {
		tb.Fatalf("testfactory: unknown stage %q", stage)
	}
	order := lifecycle.Stages()
	// reaches reports whether the walk passes through s.
	reaches := func(s lifecycle.Stage) bool { return slices.Index(order, s) <= slices.Index(order, target) }
	claimed := opts.Claimed || opts.Quiesced || reaches(lifecycle.StageFenced)
	switch {
	case !reaches(lifecycle.StageApproved) && (opts.Claimed || opts.Quiesced || opts.LeaseOwner != "" || opts.LeaseDuration != 0):
		tb.Fatalf("testfactory: a request at %s has no lease to claim", target)
	case !reaches(lifecycle.StageFenced) && (opts.Chunks != nil || opts.DestructiveFrozen):
		tb.Fatalf("testfactory: a request at %s has no destructive key list", target)
	case opts.Blocked && stage.Terminal():
		tb.Fatalf("testfactory: a request at %s cannot be blocked", stage)
	}

	community := opts.CommunityID
	if community == uuid.Nil {
		community = Community(ctx, tb, db, nil).ID
	}
	var host string
	// A tenant of a declared tenant table has no host: it is submitted by id.
	require.NoError(tb, db.Pool.QueryRow(ctx, "SELECT coalesce(host, id::text) FROM community_deletion.communities WHERE id = $1", community).Scan(&host),
		"testfactory: look up community %s", community)
	storage := EmptyStorage(community)
	if opts.Storage != nil {
		storage = *opts.Storage
	}

	w := &walk{tb: tb}
	id := w.step("submit", func() (*lifecycle.Request, error) {
		return db.Operator.Submit(ctx, host, cmp.Or(opts.RequestedBy, "requester"), cmp.Or(opts.Reason, "test deletion"))
	}).ID
	if reaches(lifecycle.StageInventoried) {
		w.step("freeze the inventory", func() (*lifecycle.Request, error) {
			schema, err := db.Operator.InventorySchema(ctx, community)
			if err != nil {
				return nil, err
			}
			return db.Operator.FreezeInventory(ctx, id, lifecycle.FrozenInventory{Schema: *schema, Storage: storage})
		})
	}
	if reaches(lifecycle.StageApproved) {
		w.step("approve", func() (*lifecycle.Request, error) {
			return db.Approver.ApproveWithParams(ctx, id, lifecycle.ApproveParams{
				ApprovedBy: cmp.Or(opts.ApprovedBy, "approver"), Note: opts.ApprovalNote, GracePeriod: opts.GracePeriod,
			})
		})
	}
	if claimed {
		AwaitGrace(ctx, tb, db, id)
	}
	if claimed {
		owner := cmp.Or(opts.LeaseOwner, "executor")
		lease := cmp.Or(opts.LeaseDuration, lifecycle.DefaultLeaseDuration)
		w.step("claim", func() (*lifecycle.Request, error) {
			claim, err := db.Engine.ClaimRequest(ctx, id, owner, lease)
			if err != nil {
				return nil, err
			}
			w.token = claim.Lease
			return claim.Request, nil
		})
	}
	if opts.Quiesced || reaches(lifecycle.StageFenced) {
		w.do("begin quiescing", func() error { return db.Engine.BeginQuiescing(ctx, w.token) })
	}
	if reaches(lifecycle.StageFenced) {
		w.do("fence", func() error {
			generation, err := db.Engine.EnterFenced(ctx, w.token)
			w.token = w.token.WithFence(generation)
			return err
		})
		for _, chunk := range opts.Chunks {
			w.do(fmt.Sprintf("append chunk %d", chunk.ChunkNo), func() error { return db.Engine.AppendManifestChunk(ctx, w.token, chunk) })
		}
	}
	if opts.DestructiveFrozen || reaches(lifecycle.StageDrained) {
		destructive := destructiveStorage(tb, storage, opts.Chunks)
		w.do("freeze the destructive manifest", func() error { return db.Engine.FreezeDestructiveManifest(ctx, w.token, destructive) })
	}
	steps := []struct {
		to   lifecycle.Stage
		name string
		call func() error
	}{
		{lifecycle.StageDrained, "drain", func() error { return db.Engine.EnterDrained(ctx, w.token) }},
		{lifecycle.StageBindingsRemoved, "remove bindings", func() error { return db.Engine.EnterBindingsRemoved(ctx, w.token, nil) }},
		{lifecycle.StagePostgresPurged, "purge", func() error {
			_, err := db.Engine.EnterPostgresPurged(ctx, w.token, lifecycle.PurgeOptions{})
			return err
		}},
		{lifecycle.StageCachePurged, "purge the cache", func() error { return db.Engine.EnterCachePurged(ctx, w.token, nil) }},
		{lifecycle.StageLogicallyVerified, "verify", func() error { return db.Engine.EnterLogicallyVerified(ctx, w.token, nil) }},
		{lifecycle.StageRetentionPending, "complete", func() error { return db.Engine.EnterRetentionPending(ctx, w.token, nil) }},
	}
	for _, s := range steps {
		if reaches(s.to) {
			w.do(s.name, s.call)
		}
	}
	if stage == lifecycle.StageAborted {
		w.step("abort", func() (*lifecycle.Request, error) {
			return db.Operator.Abort(ctx, id, cmp.Or(opts.AbortedBy, "operator"), cmp.Or(opts.AbortReason, "test abort"))
		})
	}
	if opts.Blocked {
		unit, reason := cmp.Or(opts.BlockedUnit, "test:blocked"), cmp.Or(opts.BlockedReason, "blocked by the test")
		if claimed {
			w.do("block", func() error {
				return db.Engine.Block(ctx, w.token, lifecycle.BlockParams{Stage: target, Unit: unit, Err: reason})
			})
		} else {
			w.step("block before a claim", func() (*lifecycle.Request, error) { return db.Engine.BlockBeforeClaim(ctx, id, unit, reason) })
		}
	}
	request := w.step("read back", func() (*lifecycle.Request, error) { return db.Operator.Get(ctx, id) })
	require.Equal(tb, stage, request.Stage, "testfactory: the walk ended at the wrong stage")
	return request, w.token
}

// walk is one Request's progress: its test and the claim's token.
type walk struct {
	tb    testing.TB
	token lifecycle.LeaseToken
}

// step runs a call that returns the request, failing the test on an error.
func (w *walk) step(name string, call func() (*lifecycle.Request, error)) *lifecycle.Request {
	w.tb.Helper()
	request, err := call()
	require.NoError(w.tb, err, "testfactory: %s", name)
	return request
}

// do runs a call that returns only an error, failing the test on one.
func (w *walk) do(name string, call func() error) {
	w.tb.Helper()
	require.NoError(w.tb, call(), "testfactory: %s", name)
}

// destructiveStorage is storage with each prefix that has chunks summarizing
// their keys, in chunk order.
func destructiveStorage(tb testing.TB, storage lifecycle.StorageManifest, chunks []lifecycle.ManifestKeyChunk) lifecycle.StorageManifest {
	tb.Helper()
	keys := map[string][]string{}
	for _, chunk := range chunks {
		keys[chunk.Prefix] = append(keys[chunk.Prefix], chunk.Keys...)
	}
	m := lifecycle.StorageManifest{Version: storage.Version, Prefixes: slices.Clone(storage.Prefixes)}
	for prefix, prefixKeys := range keys {
		i := slices.IndexFunc(m.Prefixes, func(p lifecycle.PrefixManifest) bool { return p.Prefix == prefix })
		if i < 0 {
			tb.Fatalf("testfactory: chunks under %s, which the storage manifest does not list", prefix)
		}
		m.Prefixes[i] = Prefix(tb, prefix, prefixKeys...)
	}
	return m
}

// ReclaimOpts are the options of Reclaim.
type ReclaimOpts struct {
	// Owner is the executor that claims again; default token's owner.
	Owner string
	// LeaseDuration is the new claim's lease; default DefaultLeaseDuration.
	LeaseDuration time.Duration
}

// Reclaim lets token's lease lapse (ExpireLease) and claims its request
// again, as a new executor does after a crash, and returns the new claim's
// token, bound to the request's fence generation. Its lease generation is
// one higher, so token is stale from then on.
func Reclaim(ctx context.Context, tb testing.TB, db *DB, token lifecycle.LeaseToken, opts *ReclaimOpts) lifecycle.LeaseToken {
	tb.Helper()
	if opts == nil {
		opts = &ReclaimOpts{}
	}
	ExpireLease(ctx, tb, db, token.RequestID)
	claim, err := db.Engine.ClaimRequest(ctx, token.RequestID, cmp.Or(opts.Owner, token.Owner),
		cmp.Or(opts.LeaseDuration, lifecycle.DefaultLeaseDuration))
	require.NoError(tb, err, "testfactory: claim deletion %s again", token.RequestID)
	return claim.Lease
}

// ExpireLease moves the executor lease of request into the past on the
// database clock, as the lease of an executor that died would be; the
// request must be leased. Nothing else of the request changes.
func ExpireLease(ctx context.Context, tb testing.TB, db *DB, request uuid.UUID) {
	tb.Helper()
	tag, err := db.Pool.Exec(ctx, `UPDATE community_deletion.community_deletion_requests
		SET lease_until = now() - interval '1 second' WHERE id = $1 AND lease_until IS NOT NULL`, request)
	require.NoError(tb, err, "testfactory: expire the lease of deletion %s", request)
	require.EqualValues(tb, 1, tag.RowsAffected(), "testfactory: deletion %s holds no lease to expire", request)
}

// ServingLeaseOpts are the options of ServingLease.
type ServingLeaseOpts struct {
	// CommunityID is the community written to; default a new Community.
	CommunityID uuid.UUID
	// Operation names the side effect; default "upload".
	Operation string
	// Owner is the serving process; default "server-1".
	Owner string
	// Duration is the lease; default a minute.
	Duration time.Duration
	// Expired moves the lease's expiry into the past once it is taken.
	Expired bool
}

// ServingLease takes a serving write lease through the Serving client, as
// the service does before a side effect the write fence cannot see, and
// returns it. The community must be active. With opts.Expired its expiry
// then moves into the past, as a lease its process never released would.
func ServingLease(ctx context.Context, tb testing.TB, db *DB, opts *ServingLeaseOpts) *lifecycle.ServingWriteLease {
	tb.Helper()
	if opts == nil {
		opts = &ServingLeaseOpts{}
	}
	community := opts.CommunityID
	if community == uuid.Nil {
		community = Community(ctx, tb, db, nil).ID
	}
	lease, err := db.Serving.AcquireWriteLease(ctx, community, cmp.Or(opts.Operation, "upload"), cmp.Or(opts.Owner, "server-1"),
		cmp.Or(opts.Duration, time.Minute))
	require.NoError(tb, err, "testfactory: acquire a serving write lease of %s", community)
	if opts.Expired {
		require.NoError(tb, db.Pool.QueryRow(ctx, `UPDATE community_deletion.community_serving_write_leases
			SET lease_until = now() - interval '1 second' WHERE id = $1 RETURNING lease_until`, lease.ID).Scan(&lease.LeaseUntil),
			"testfactory: expire serving write lease %s", lease.ID)
	}
	return lease
}

// AwaitGrace waits until the grace period of request's approval, if any,
// has ended on the database clock.
func AwaitGrace(ctx context.Context, tb testing.TB, db *DB, request uuid.UUID) {
	tb.Helper()
	var wait time.Duration
	require.NoError(tb, db.Pool.QueryRow(ctx, `SELECT GREATEST(coalesce(max(grace_until), now()) - clock_timestamp(), interval '0')
		FROM community_deletion.community_deletion_approvals WHERE request_id = $1`, request).Scan(&wait), "testfactory: read the grace period of %s", request)
	time.Sleep(wait)
}
