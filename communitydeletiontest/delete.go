package communitydeletiontest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tombstoneworks/communitydeletion/executor"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// DeleteParams are the inputs of DeleteAndVerify.
type DeleteParams struct {
	// Tenant is the tenant to delete, by its key in the service's tenant
	// table (lifecycle.IntKey(42), lifecycle.TextKey("c0ffee…"),
	// lifecycle.UUIDKey(id)), seeded by the service's own code.
	// CommunityID names a uuid tenant the same way; one of them is
	// required.
	Tenant lifecycle.TenantKey
	// CommunityID is the community to delete, for a uuid tenant.
	CommunityID uuid.UUID
	// Objects is the object store holding the community's files. Required.
	Objects executor.ObjectStore
	// Cache is the cache holding its entries; nil is an empty in-memory one.
	Cache executor.Cache
	// Prefixes are the community's object-store prefixes, each ending in
	// "/" and containing its id; they are listed into the inventory the
	// second operator approves. Leave them empty to take them from the
	// storage layout the deployment declared (the library's own default
	// source); when both are there they must agree.
	Prefixes []string
	// WritePaths are the service's own write paths for the community. Each
	// is run twice, right after the fence commits (before anything is
	// deleted) and once the deletion has finished, and must fail with a
	// write-fence refusal both times; after the deletion, a refusal by a
	// foreign key to a registered table (the tenant's row is gone) counts.
	WritePaths []func(ctx context.Context) error
}

// maxKeysShown bounds the leftover keys a problem line names.
const maxKeysShown = 5

// DeleteAndCheck deletes p.CommunityID end to end and returns one line per
// problem found afterwards. An operator submits the deletion and freezes an
// inventory listing p.Prefixes in p.Objects, a second operator approves it
// without a grace period, and the real executor (executor.Runner) runs it to
// retention_pending. It checks that every write path is refused by the
// write fence, right after the fence and again at the end; that no row of any table in any non-system schema (the
// control plane's own records excepted) carries the community's id in a
// uuid, text or json column; that no object is left under the prefixes; that
// the cache holds nothing of it; and that every other community's rows in
// the tables with a community_id column, and in communities, are unchanged.
// An error means the deletion itself could not be run or checked.
func (k *Kit) DeleteAndCheck(ctx context.Context, p DeleteParams) ([]string, error) {
	if (p.CommunityID == uuid.Nil && p.Tenant == "") || p.Objects == nil {
		return nil, errors.New("communitydeletiontest: DeleteParams needs Tenant (or CommunityID) and Objects (an empty store is fine)")
	}
	if err := k.resolveTenant(ctx, &p); err != nil {
		return nil, err
	}
	prefixes, err := k.prefixes(ctx, p)
	if err != nil {
		return nil, err
	}
	p.Prefixes = prefixes
	if p.Cache == nil {
		p.Cache = executor.NewMemoryCache()
	}
	before, err := k.fingerprint(ctx, p)
	if err != nil {
		return nil, err
	}
	deletedKeys, err := k.rowKeys(ctx, p)
	if err != nil {
		return nil, err
	}
	listed, err := k.listedObjectKeys(ctx, p)
	if err != nil {
		return nil, err
	}
	problems, err := k.delete(ctx, p)
	if err != nil {
		return nil, err
	}
	late, err := k.writePaths(ctx, p, "after its deletion", true)
	if err != nil {
		return nil, err
	}
	problems = append(problems, late...)
	leftovers, err := k.leftoverRows(ctx, p)
	if err != nil {
		return nil, err
	}
	problems = append(problems, leftovers...)
	pointing, err := k.rowsPointingAtDeleted(ctx, deletedKeys)
	if err != nil {
		return nil, err
	}
	problems = append(problems, pointing...)
	for _, prefix := range p.Prefixes {
		var keys []string
		err := p.Objects.List(ctx, prefix, func(key string, _ int64) error {
			keys = append(keys, key)
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("communitydeletiontest: list %s: %w", prefix, err)
		}
		if len(keys) > 0 {
			shown := keys[:min(len(keys), maxKeysShown)]
			problems = append(problems, fmt.Sprintf("%d object(s) left under %s: %s", len(keys), prefix, strings.Join(shown, ", ")))
		}
	}
	for _, key := range listed {
		var found bool
		err := p.Objects.List(ctx, key, func(got string, _ int64) error {
			found = found || got == key
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("communitydeletiontest: look for object %s: %w", key, err)
		}
		if found {
			problems = append(problems, fmt.Sprintf("object %s, listed in the tenant's rows before the deletion, is left", key))
		}
	}
	objectsAfter, err := k.tenantObjects(ctx, p)
	if err != nil {
		return nil, err
	}
	for _, name := range objectsAfter {
		problems = append(problems, fmt.Sprintf("per-tenant object %s is left", name))
	}
	empty, err := p.Cache.Empty(ctx, p.Tenant)
	if err != nil {
		return nil, fmt.Errorf("communitydeletiontest: check the cache: %w", err)
	}
	if !empty {
		problems = append(problems, fmt.Sprintf("the cache still holds entries of community %s", p.Tenant))
	}
	after, err := k.fingerprint(ctx, p)
	if err != nil {
		return nil, err
	}
	for _, table := range slices.Sorted(maps.Keys(before)) {
		if sum := before[table]; after[table] != sum {
			problems = append(problems, fmt.Sprintf("table %s: other communities' rows changed (%s before, %s after)", table, sum, after[table]))
		}
	}
	return problems, nil
}

// DeleteAndVerify is DeleteAndCheck for a test: it fails tb with one line
// per problem, and fatally when the deletion cannot be run.
func (k *Kit) DeleteAndVerify(tb testing.TB, p DeleteParams) {
	tb.Helper()
	problems, err := k.DeleteAndCheck(tb.Context(), p)
	if err != nil {
		tb.Fatal(err)
	}
	for _, problem := range problems {
		tb.Error("communitydeletiontest: delete and verify: " + problem)
	}
}

// Identities of the kit's deletion, recorded on the request.
const (
	requester = "communitydeletiontest"
	approver  = "communitydeletiontest-approver"
	owner     = "communitydeletiontest-executor"
)

// writePaths runs p's write paths and returns a line for each one the write
// fence did not refuse, saying when it ran. Once the deletion has finished,
// a write refused by a foreign key to a registered table (the tenant's row
// it references is gone, as the deletion meant) counts as refused too: the
// database checks such a key before the statement's fence runs.
func (k *Kit) writePaths(ctx context.Context, p DeleteParams, when string, deleted bool) ([]string, error) {
	var problems []string
	for i, write := range p.WritePaths {
		err := write(ctx)
		if err == nil {
			problems = append(problems, fmt.Sprintf("write path %d succeeded for community %s %s; it writes a table without the write fence (register the table, or call community_deletion.assert_tenant_write_allowed first)", i+1, p.Tenant, when))
			continue
		}
		if lifecycle.IsWriteFenceRefusal(err) {
			continue
		}
		if deleted {
			registered, kerr := k.foreignKeyToRegistered(ctx, err)
			if kerr != nil {
				return nil, kerr
			}
			if registered {
				continue
			}
		}
		problems = append(problems, fmt.Sprintf("write path %d failed %s, but not with a write-fence refusal: %v", i+1, when, err))
	}
	return problems, nil
}

// foreignKeyToRegistered reports whether err is a foreign-key violation
// (23503) of a constraint that references a registered table.
func (k *Kit) foreignKeyToRegistered(ctx context.Context, err error) (bool, error) {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != pgerrcode.ForeignKeyViolation {
		return false, nil
	}
	var registered bool
	qerr := k.owner.QueryRow(ctx, `SELECT EXISTS (
		SELECT 1 FROM pg_constraint f
		JOIN pg_class child ON child.oid = f.conrelid
		JOIN pg_namespace cn ON cn.oid = child.relnamespace
		JOIN pg_class parent ON parent.oid = f.confrelid
		JOIN pg_namespace pn ON pn.oid = parent.relnamespace
		JOIN community_deletion.community_scoped_tables r ON r.table_schema = pn.nspname AND r.table_name = parent.relname
		WHERE f.contype = 'f' AND f.conname = $1 AND child.relname = $2 AND cn.nspname = $3)`,
		pgErr.ConstraintName, pgErr.TableName, pgErr.SchemaName).Scan(&registered)
	if qerr != nil {
		return false, fmt.Errorf("communitydeletiontest: read foreign key %s of %s.%s: %w", pgErr.ConstraintName, pgErr.SchemaName, pgErr.TableName, qerr)
	}
	return registered, nil
}

// prefixes returns the community's object prefixes: the declared storage
// layout's, which p.Prefixes must match when given, or p.Prefixes where
// the deployment declared no object layout.
func (k *Kit) prefixes(ctx context.Context, p DeleteParams) ([]string, error) {
	layout, err := k.Operator.StorageLayout(ctx)
	if err != nil {
		return nil, fmt.Errorf("communitydeletiontest: %w", err)
	}
	declared := layout.ExpandLayout(p.Tenant).ObjectPrefixes
	given := slices.Sorted(slices.Values(p.Prefixes))
	switch {
	case len(declared) == 0 && len(given) == 0 && len(layout.ObjectKeys) > 0:
		return nil, nil // the tenant's objects are the keys its rows list
	case len(declared) == 0 && len(given) == 0:
		return nil, fmt.Errorf("communitydeletiontest: no object prefixes: %w", layout.RequireObjects())
	case len(declared) == 0:
		return given, nil
	case len(given) > 0 && !slices.Equal(given, declared):
		return nil, fmt.Errorf("communitydeletiontest: DeleteParams.Prefixes %q are not the declared storage layout's %q for community %s; "+
			"leave Prefixes empty to use the declared layout, or declare the layout the service uses", given, declared, p.Tenant)
	}
	return declared, nil
}

// delete runs the deletion of p.CommunityID to retention_pending, running
// the write paths once the fence has committed, and returns what they let
// through.
func (k *Kit) delete(ctx context.Context, p DeleteParams) ([]string, error) {
	// A tenant of a declared tenant table has no host: it is submitted by
	// its key.
	var host string
	if err := k.owner.QueryRow(ctx, "SELECT coalesce(host, tenant_key, id::text) FROM community_deletion.communities WHERE id = $1", p.CommunityID).Scan(&host); err != nil {
		return nil, fmt.Errorf("communitydeletiontest: look up community %s (declare the service's tenant table, or insert its communities row): %w", p.Tenant, err)
	}
	storage, err := executor.SummarizeStorage(ctx, p.Objects, p.Prefixes)
	if err != nil {
		return nil, fmt.Errorf("communitydeletiontest: list the prefixes: %w", err)
	}
	if storage.KeySources, err = k.Operator.InventoryKeySources(ctx, p.CommunityID); err != nil {
		return nil, fmt.Errorf("communitydeletiontest: inventory the key sources: %w", err)
	}
	request, err := k.Operator.Submit(ctx, host, requester, "DeleteAndVerify")
	if err != nil {
		return nil, fmt.Errorf("communitydeletiontest: submit: %w", err)
	}
	schema, err := k.Operator.InventorySchema(ctx, p.CommunityID)
	if err != nil {
		return nil, fmt.Errorf("communitydeletiontest: inventory: %w", err)
	}
	if _, err := k.Operator.FreezeInventory(ctx, request.ID, lifecycle.FrozenInventory{Schema: *schema, Storage: storage}); err != nil {
		return nil, fmt.Errorf("communitydeletiontest: freeze the inventory: %w", err)
	}
	var noGrace time.Duration
	if _, err := k.Approver.ApproveWithParams(ctx, request.ID, lifecycle.ApproveParams{ApprovedBy: approver, GracePeriod: &noGrace}); err != nil {
		return nil, fmt.Errorf("communitydeletiontest: approve: %w", err)
	}
	var fenced []string
	var fencedErr error
	ranFenced := false
	progress := func(ev executor.Event) {
		// Synchronous on the executor's goroutine, right after the fence
		// committed and before anything is deleted.
		if ev.Stage == lifecycle.StageFenced && !ranFenced {
			ranFenced = true
			fenced, fencedErr = k.writePaths(ctx, p, "while it was fenced", false)
		}
	}
	runner, err := executor.New(executor.Config{Engine: k.Engine, Objects: p.Objects, Cache: p.Cache, Owner: owner, Progress: progress})
	if err != nil {
		return nil, fmt.Errorf("communitydeletiontest: %w", err)
	}
	claimed, err := runner.RunRequest(ctx, request.ID)
	if err != nil {
		return nil, fmt.Errorf("communitydeletiontest: run the deletion: %w", err)
	}
	if !claimed {
		return nil, fmt.Errorf("communitydeletiontest: the executor could not claim request %s", request.ID)
	}
	done, err := k.Operator.Get(ctx, request.ID)
	if err != nil {
		return nil, fmt.Errorf("communitydeletiontest: read back request %s: %w", request.ID, err)
	}
	if done.Stage != lifecycle.StageRetentionPending {
		return nil, fmt.Errorf("communitydeletiontest: the deletion stopped at %s, not %s", done.Stage, lifecycle.StageRetentionPending)
	}
	if !ranFenced {
		return nil, errors.New("communitydeletiontest: the executor never reported the fenced stage, so the write paths did not run under the fence")
	}
	if fencedErr != nil {
		return nil, fencedErr
	}
	return fenced, nil
}
