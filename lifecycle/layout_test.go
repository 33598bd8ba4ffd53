package lifecycle_test

import (
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/fixture"
	"github.com/tombstoneworks/communitydeletion/internal/testfactory"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// requireSQLRefusal requires err to be a one-line PostgreSQL refusal with
// code whose message contains every want.
func requireSQLRefusal(t *testing.T, err error, code string, want ...string) {
	t.Helper()
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr, "want SQLSTATE %s", code)
	require.Equal(t, code, pgErr.Code, pgErr.Message)
	require.NotContains(t, pgErr.Message, "\n")
	for _, w := range want {
		require.Contains(t, pgErr.Message, w)
	}
}

const declare = `INSERT INTO community_deletion.community_deletion_storage_layout (kind, template, reason) VALUES ($1, $2, $3)`

// The layout's guard refuses, when a template is declared, every template
// that does not isolate one tenant, saying what to write instead.
func TestStorageLayoutDeclarationRefusals(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	owner := b.Pool
	for _, tc := range []struct{ kind, template string }{
		{"objects", "uploads/{tenant}/"},
		{"objects", "a{tenant}/b/"},
		{"cache", "ws:{tenant}:*"},
		{"cache", "q:{tenant}|x"},
	} {
		_, err := owner.Exec(ctx, declare, tc.kind, tc.template, "test")
		require.NoError(t, err, "%s %s", tc.kind, tc.template)
	}
	for _, tc := range []struct {
		kind, template, reason string
		code                   string
		want                   []string
	}{
		{"objects", "media/{tenant}", "r", "23514", []string{`followed by "/"`, `write 'media/{tenant}/'`}},
		{"objects", "media/{tenant}x/", "r", "23514", []string{`followed by "/"`}},
		{"objects", "media/*/{tenant}/", "r", "23514", []string{"no wildcards"}},
		{"objects", "media/{tenant}/x", "r", "23514", []string{`ends in "/"`, `write 'media/{tenant}/x/'`}},
		{"objects", "uploads/{tenant}/nested/", "r", "23514", []string{"nests in or contains a declared objects template"}},
		{"objects", "uploads/", "r", "22023", []string{"{tenant} 0 times", "'uploads/{tenant}/'"}},
		{"objects", "media/{tenant}/{tenant}/", "r", "22023", []string{"{tenant} 2 times"}},
		{"objects", "media/{tenant_id}/", "r", "22023", []string{"{tenant} 0 times"}},
		{"objects", "media/{x}{tenant}/", "r", "22023", []string{"only placeholder"}},
		{"cache", "ws*:{tenant}:*", "r", "23514", []string{"glob character before {tenant}", "'ws:{tenant}:*'"}},
		{"cache", `w\s:{tenant}:*`, "r", "23514", []string{"glob character before {tenant}"}},
		{"cache", "ws:{tenant}*", "r", "23514", []string{"literal delimiter", "write 'ws:{tenant}:*'"}},
		{"object_keys", "blobs.key", "r", "22023", []string{"schema.table.column"}},
		{"object_keys", "public.no_such_table.key", "r", "22023", []string{"is not a registered 'delete' table"}},
		{"object_keys", "public.fixture_members.no_such_column", "r", "22023", []string{"has no text or varchar column"}},
		{"object_keys", "public.fixture_members.community_id", "r", "22023", []string{"has no text or varchar column"}},
		{"sequence", "seq_{tenant}", "r", "22023", []string{"schema.name with {tenant} in the name"}},
		{"sequence", "{tenant}.seq", "r", "22023", []string{"schema.name with {tenant} in the name"}},
		{"sequence", "public.seq_{tenant}_{tenant}", "r", "22023", []string{"{tenant} 2 times"}},
		{"sequence", "no_such_schema.seq_{tenant}", "r", "22023", []string{"is not a schema of the service"}},
		{"sequence", "community_deletion.seq_{tenant}", "r", "22023", []string{"is not a schema of the service"}},
		{"cache", "ws:{tenant}-x:*", "r", "23514", []string{"literal delimiter"}},
		{"blobs", "b/{tenant}/", "r", "22023", []string{"write 'objects'"}},
		{"objects", "media/{tenant}/", " ", "22023", []string{"give a reason"}},
		{"objects", "uploads/{tenant}/", "again", "23505", []string{"already declared; nothing to do"}},
	} {
		_, err := owner.Exec(ctx, declare, tc.kind, tc.template, tc.reason)
		requireSQLRefusal(t, err, tc.code, tc.want...)
	}

	_, err := owner.Exec(ctx, `INSERT INTO community_deletion.community_deletion_storage_layout (kind, template, action, reason)
		VALUES ('objects', 'media/{tenant}/', 'retire', 'r')`)
	requireSQLRefusal(t, err, "22023", "it is not declared")
	_, err = owner.Exec(ctx, `UPDATE community_deletion_storage_layout SET template = 'uploads/'`)
	requireSQLRefusal(t, err, "23000", "append-only", "action 'retire'")
	_, err = owner.Exec(ctx, `DELETE FROM community_deletion_storage_layout`)
	requireSQLRefusal(t, err, "23000", "append-only")
	_, err = owner.Exec(ctx, `TRUNCATE community_deletion_storage_layout`)
	requireSQLRefusal(t, err, "55000")

	// Only the schema's owner declares: a deletion role may only read.
	operator := fixture.RolePool(t, b.URL, fixture.RoleOperator)
	_, err = operator.Exec(ctx, declare, "objects", "media/{tenant}/", "r")
	requireSQLRefusal(t, err, "42501", "permission denied")
	layout, err := b.Operator.StorageLayout(ctx)
	require.NoError(t, err)
	require.Len(t, layout.Objects, 2)
	require.Len(t, layout.Cache, 2)
}

// The declared layout is what StorageLayout returns and expands; a retired
// template is gone and may be declared again.
func TestStorageLayoutExpandAndRetire(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	layout, err := b.Operator.StorageLayout(ctx)
	require.NoError(t, err)
	require.ErrorIs(t, layout.RequireObjects(), lifecycle.ErrRefused)
	require.Contains(t, layout.RequireObjects().Error(), "no storage layout is declared: the deployment declares")

	require.NoError(t, fixture.DeclareLayout(ctx, b.Pool))
	_, err = b.Pool.Exec(ctx, declare, "cache", "ws:{tenant}:*", "sessions")
	require.NoError(t, err)
	layout, err = b.Operator.StorageLayout(ctx)
	require.NoError(t, err)
	require.NoError(t, layout.RequireObjects())
	community := testfactory.Community(ctx, t, b.DB, nil).ID
	expanded := layout.ExpandLayout(lifecycle.UUIDKey(community))
	require.Equal(t, fixture.ObjectPrefixes(community), expanded.ObjectPrefixes)
	require.Equal(t, []string{"ws:" + community.String() + ":*"}, expanded.CachePatterns)
	require.Equal(t, "fixture: uploaded files", layout.Objects[1].Reason)
	require.NotEmpty(t, layout.Objects[1].DeclaredBy)

	_, err = b.Pool.Exec(ctx, `INSERT INTO community_deletion.community_deletion_storage_layout (kind, template, action, reason)
		VALUES ('objects', 'media/{tenant}/', 'retire', 'moved to uploads')`)
	require.NoError(t, err)
	layout, err = b.Operator.StorageLayout(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"uploads/" + community.String() + "/"}, layout.ExpandLayout(lifecycle.UUIDKey(community)).ObjectPrefixes)
	_, err = b.Pool.Exec(ctx, declare, "objects", "media/{tenant}/", "back again")
	require.NoError(t, err)
}

// With a declared layout, FreezeInventory freezes exactly its prefixes.
func TestFreezeInventoryFollowsDeclaredLayout(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	require.NoError(t, fixture.DeclareLayout(ctx, b.Pool))
	request, _ := testfactory.Request(ctx, t, b.DB, nil)
	schema, err := b.Operator.InventorySchema(ctx, request.CommunityID)
	require.NoError(t, err)

	missing := emptyStorage(fixture.ObjectPrefixes(request.CommunityID)[:1]...)
	_, err = b.Operator.FreezeInventory(ctx, request.ID, lifecycle.FrozenInventory{Schema: *schema, Storage: missing})
	require.ErrorIs(t, err, lifecycle.ErrRefused)
	require.Contains(t, err.Error(), "are not the declared layout's")
	require.Contains(t, err.Error(), "inventory exactly the declared prefixes")
	require.NotContains(t, err.Error(), "\n")

	frozen, err := b.Operator.FreezeInventory(ctx, request.ID, lifecycle.FrozenInventory{Schema: *schema,
		Storage: emptyStorage(fixture.ObjectPrefixes(request.CommunityID)...)})
	require.NoError(t, err)
	require.Equal(t, lifecycle.StageInventoried, frozen.Stage)
}

// An inventoried request is inventoried again before approval without an
// abort: the new inventory replaces the old, an approval of the old digest
// is impossible, and once approved the inventory is refused with what to do.
func TestReinventoryBeforeApproval(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	request, _ := testfactory.Request(ctx, t, b.DB, nil)
	schema, err := b.Operator.InventorySchema(ctx, request.CommunityID)
	require.NoError(t, err)
	first, err := b.Operator.FreezeInventory(ctx, request.ID, lifecycle.FrozenInventory{Schema: *schema, Storage: emptyStorage("wrong/" + request.CommunityID.String() + "/")})
	require.NoError(t, err)

	second, err := b.Operator.FreezeInventory(ctx, request.ID, lifecycle.FrozenInventory{Schema: *schema, Storage: testfactory.EmptyStorage(request.CommunityID)})
	require.NoError(t, err)
	require.Equal(t, lifecycle.StageInventoried, second.Stage)
	require.NotEqual(t, first.InventoryDigest, second.InventoryDigest)
	require.Equal(t, testfactory.EmptyStorage(request.CommunityID).Prefixes, second.Inventory.Storage.Prefixes)

	// An approval of the old digest is refused by the database.
	approver := fixture.RolePool(t, b.URL, fixture.RoleApprover)
	_, err = approver.Exec(ctx, `INSERT INTO community_deletion_approvals (request_id, community_id, inventory_digest, approved_by)
		VALUES ($1, $2, decode($3, 'hex'), 'approver')`, request.ID, request.CommunityID, first.InventoryDigest)
	requireSQLRefusal(t, err, "23000", "frozen inventory digest")

	approved, err := b.Approver.Approve(ctx, request.ID, "approver", "")
	require.NoError(t, err)
	require.Equal(t, second.InventoryDigest, approved.InventoryDigest)

	_, err = b.Operator.FreezeInventory(ctx, request.ID, lifecycle.FrozenInventory{Schema: *schema, Storage: testfactory.EmptyStorage(request.CommunityID)})
	require.ErrorIs(t, err, lifecycle.ErrRefused)
	require.Contains(t, err.Error(), "abort it and submit a new one")

	// The database refuses it too, as the operator's login: an approved
	// inventory never changes.
	operator := fixture.RolePool(t, b.URL, fixture.RoleOperator)
	_, err = operator.Exec(ctx, `UPDATE community_deletion_requests SET inventory_frozen_at = now() - interval '1 second' WHERE id = $1`, request.ID)
	requireSQLRefusal(t, err, "42501")

	// An inventoried request whose approval is recorded (the approval's
	// transaction, before it moves the request) is not re-inventoried.
	other, _ := testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{Stage: lifecycle.StageInventoried})
	_, err = operator.Exec(ctx, `UPDATE community_deletion_requests SET inventory_digest = decode(repeat('ab', 32), 'hex') WHERE id = $1`, other.ID)
	requireSQLRefusal(t, err, "23000", "replaced whole only by a re-inventory while inventoried and unblocked")
	_, err = approver.Exec(ctx, `INSERT INTO community_deletion_approvals (request_id, community_id, inventory_digest, approved_by)
		VALUES ($1, $2, decode($3, 'hex'), 'approver')`, other.ID, other.CommunityID, other.InventoryDigest)
	require.NoError(t, err)
	_, err = b.Operator.FreezeInventory(ctx, other.ID, *other.Inventory)
	require.ErrorIs(t, err, lifecycle.ErrRefused)
	require.Contains(t, err.Error(), "its approval binds it; abort the request and submit a new one")
	_, err = operator.Exec(ctx, `UPDATE community_deletion_requests SET inventory_frozen_at = now() WHERE id = $1`, other.ID)
	requireSQLRefusal(t, err, "23000", "its approval binds it; abort the request and submit a new one")

	// A blocked inventoried request is not re-inventoried either.
	blocked, _ := testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{Stage: lifecycle.StageInventoried,
		Blocked: true, BlockedUnit: "pre_claim:setup", BlockedReason: "held"})
	_, err = b.Operator.FreezeInventory(ctx, blocked.ID, *blocked.Inventory)
	require.ErrorIs(t, err, lifecycle.ErrRefused)
	require.Contains(t, err.Error(), "abort it and submit a new one")
}

// emptyStorage is the storage manifest of prefixes, all empty.
func emptyStorage(prefixes ...string) lifecycle.StorageManifest {
	m := lifecycle.StorageManifest{Version: lifecycle.StorageManifestVersion}
	for _, p := range prefixes {
		m.Prefixes = append(m.Prefixes, lifecycle.PrefixManifest{Prefix: p, KeysDigest: lifecycle.EmptyKeysDigest})
	}
	return m
}
