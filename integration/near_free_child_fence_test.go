package integration

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/fixture"
)

// While another tenant is in flight, a child table's fence reads the
// parents its rows reference by their values (migration 00037), through
// every parent and for old rows and new: a join table between projects
// and tags refuses a row that references the fenced tenant's project or its
// tag, a row moved to or from them, and a delete of one, and admits the
// rest holding the marker's lock and no community's. A policy that hides
// the fenced tenant's tags from the writer sends the fence the long way,
// which reads them as their owner. It holds for the fence as the arm
// specializes it (migration 00040) and for its generic code, which serves
// a table attached while the fence is armed. Each broken variant, of
// either, shows the test catches a fence that misses what it removes: an
// UPDATE's old rows, the second parent, the policy.
func TestArmedChildFenceReadsEveryParentOfEveryRow(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"bigint", "uuid"} {
		for _, specialized := range []bool{true, false} {
			for _, broken := range []string{"", "blind to an UPDATE's old rows", "blind to the second parent", "blind to a policy", "whose path 1 is blind to an UPDATE's old rows"} {
				if broken == "whose path 1 is blind to an UPDATE's old rows" && !specialized {
					continue // the generic path 1 is community_deletion_fence_query(), which the other tests break
				}
				name := kind + ", specialized"
				if !specialized {
					name = kind + ", generic"
				}
				if broken != "" {
					name += ", a fence " + broken
				}
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					armedChildFence(t, kind, specialized, broken)
				})
			}
		}
	}
}

func armedChildFence(t *testing.T, kind string, specialized bool, broken string) {
	t.Helper()
	ctx := t.Context()
	b := setupBare(t)
	owner := newServiceOwner(t, b)
	keyType := "bigint"
	key := func(k int) any { return int64(k) }
	if kind == "uuid" {
		// The tenant's key is its lifecycle id, so tenant k's account is
		// tenantUUID(k), which walkTenant and holdsLocks name.
		keyType = "uuid"
		key = func(k int) any { return tenantUUID(k) }
	}
	owner.run(t,
		fmt.Sprintf("CREATE TABLE svc.accounts (id %s PRIMARY KEY)", keyType),
		fmt.Sprintf("CREATE TABLE svc.projects (id bigint PRIMARY KEY, account_id %s NOT NULL REFERENCES svc.accounts (id))", keyType),
		fmt.Sprintf("CREATE TABLE svc.tags (id bigint PRIMARY KEY, account_id %s NOT NULL REFERENCES svc.accounts (id))", keyType),
		`CREATE TABLE svc.project_tags (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
			project_id bigint NOT NULL REFERENCES svc.projects (id), tag_id bigint REFERENCES svc.tags (id), body text)`,
		"SELECT community_deletion.declare_tenant_table('svc.accounts')",
		"SELECT community_deletion.attach_community_write_fence('svc.projects', 'delete', 'account_id')",
		"SELECT community_deletion.attach_community_write_fence('svc.tags', 'delete', 'account_id')",
		"SELECT community_deletion.attach_child_table('svc.project_tags')",
		"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA svc TO community_deletion_serving",
		// Tenant k's project and tag are both k0; a policy, enabled below
		// for one variant, hides tenant 2's tags from the service.
		"CREATE POLICY visible ON svc.tags USING (id <> 20)")
	serving := roleSession(t, b, fixture.RoleServing)
	for k := 1; k <= 3; k++ {
		_, err := serving.Exec(ctx, "INSERT INTO svc.accounts (id) VALUES ($1)", key(k))
		require.NoError(t, err)
		for _, sql := range []string{"INSERT INTO svc.projects VALUES ($2, $1)", "INSERT INTO svc.tags VALUES ($2, $1)"} {
			_, err := serving.Exec(ctx, sql, key(k), 10*k)
			require.NoError(t, err, sql)
		}
	}
	// A join row of tenant 1's project with tenant 2's tag, made before
	// tenant 2's deletion began: either tenant's fence refuses a write of it.
	for _, pair := range [][2]int{{10, 10}, {10, 20}, {30, 30}} {
		_, err := serving.Exec(ctx, "INSERT INTO svc.project_tags (project_id, tag_id, body) VALUES ($1, $2, 'first')", pair[0], pair[1])
		require.NoError(t, err)
	}
	var args []string
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT string_to_array(encode(tgargs, 'escape'), '\000')
		FROM pg_trigger WHERE tgrelid = 'svc.project_tags'::regclass AND tgname = 'community_write_fence_insert'`).Scan(&args))
	require.Contains(t, args, "bound", "the join table's fence is bound")
	require.Equal(t, "through", args[0])
	require.Equal(t, 2, strings.Count(args[1], `"hops"`), "two paths, one per parent: %s", args[1])

	if broken != "" && specialized {
		// The generator writes the branch wrong in the same way.
		switch broken {
		case "blind to an UPDATE's old rows":
			// The UPDATE's query gets the new side's parents twice.
			breakFenceRegions(t, b, "spec_text, tests, parents_new, parents_both, parents_old", "spec_text, tests, parents_new, parents_new, parents_old") //nolint:dupword // the repeat is the break
		case "blind to the second parent":
			breakFenceRegions(t, b, "            END LOOP;\n        END IF;\n        IF lean THEN", "                EXIT;\n            END LOOP;\n        END IF;\n        IF lean THEN")
		case "blind to a policy":
			breakFenceRegions(t, b, "spec_text, tests, parents_new, parents_both, parents_old", "spec_text, '', parents_new, parents_both, parents_old")
		case "whose path 1 is blind to an UPDATE's old rows":
			breakFenceRegions(t, b, "tenant, joins_old, joins_new, tenant", "tenant, joins_new, joins_new, tenant") //nolint:dupword // the repeat is the break
		}
	}
	if broken != "" && !specialized {
		var def string
		require.NoError(t, b.pool.QueryRow(ctx,
			"SELECT pg_get_functiondef('community_deletion.enforce_community_write_fence()'::regprocedure)").Scan(&def))
		var from, to string
		switch broken {
		case "blind to an UPDATE's old rows":
			from = "FROM (SELECT pg_catalog.to_jsonb(o) OPERATOR(pg_catalog.->>) key_column FROM community_fence_old o\n" +
				"                                  UNION ALL\n                                  SELECT"
			to = "FROM (SELECT"
		case "blind to the second parent":
			from = "hop OPERATOR(pg_catalog.->) 'parent_columns' OPERATOR(pg_catalog.->>) 0, keys::pg_catalog.text);\n"
			to = from + "                        EXIT;\n"
		case "blind to a policy":
			from = "                           OR pg_catalog.row_security_active(pg_catalog.format('%I.%I', hop OPERATOR(pg_catalog.->>) 'schema', hop OPERATOR(pg_catalog.->>) 'table')) THEN"
			to = " THEN"
		}
		require.Equal(t, 1, strings.Count(def, from), "the fence's child path: %s", broken)
		require.NoError(t, b.exec(t, strings.Replace(def, from, to, 1)))
	}
	if broken == "blind to a policy" {
		owner.run(t, "ALTER TABLE svc.tags ENABLE ROW LEVEL SECURITY")
	}

	b.walkTenant(t, 2, "fenced")
	switch {
	case specialized:
		require.Equal(t, []string{childArgs(t, b, "svc.project_tags")}, specializedFor(t, b).Children, "the arm specialized the fence")
	case broken == "":
		unspecializeFence(t, b)
	default:
		require.Equal(t, fenceBranches{}, specializedFor(t, b), "a broken fence is not specialized")
	}
	require.Zero(t, fenceBits(t, b, 1)&fenceBits(t, b, 2), "the test's tenants need bits of their own")
	require.Zero(t, fenceBits(t, b, 3)&fenceBits(t, b, 2), "the test's tenants need bits of their own")
	require.Equal(t, fenceBits(t, b, 2), marker(t, b))
	pid := serving.PgConn().PID()
	// inTx runs sql in a transaction it rolls back, and says which locks
	// the statement left held.
	inTx := func(sql string, args ...any) (markerLock, communityLock bool, err error) {
		tx, err := serving.Begin(ctx)
		require.NoError(t, err)
		defer func() { require.NoError(t, tx.Rollback(ctx)) }()
		if _, err := tx.Exec(ctx, sql, args...); err != nil {
			return false, false, err
		}
		markerLock, communityLock = holdsLocks(t, b, pid, 1)
		return markerLock, communityLock, nil
	}
	insert := "INSERT INTO svc.project_tags (project_id, tag_id, body) VALUES ($1, $2, 'new')"
	move := "UPDATE svc.project_tags SET tag_id = $1 WHERE project_id = 10 AND tag_id = $2"

	switch broken {
	case "blind to an UPDATE's old rows", "whose path 1 is blind to an UPDATE's old rows":
		_, _, err := inTx(move, 10, 20)
		require.NoError(t, err, "the blind fence lets a row move away from the fenced tenant's tag")
		return
	case "blind to the second parent":
		_, _, err1 := inTx(insert, 10, 20)
		_, _, err2 := inTx(insert, 20, 10)
		require.True(t, err1 == nil || err2 == nil, "the blind fence admits a row through one of the parents: %v, %v", err1, err2)
		return
	case "blind to a policy":
		_, _, err := inTx(insert, 10, 20)
		require.NoError(t, err, "the blind fence cannot see the fenced tenant's tag the policy hides")
		return
	}

	for _, refused := range []struct {
		sql  string
		args []any
	}{
		{insert, []any{10, 20}}, // through the tag
		{insert, []any{20, 10}}, // through the project
		{move, []any{20, 10}},   // onto the fenced tenant's tag: its new row
		{move, []any{10, 20}},   // off it: its old row
		{"DELETE FROM svc.project_tags WHERE tag_id = $1", []any{20}},
	} {
		_, _, err := inTx(refused.sql, refused.args...)
		requireSQLState(t, err, sqlstateFenced, "is fenced")
	}
	for _, admitted := range []struct {
		sql  string
		args []any
	}{
		{insert, []any{10, 30}},
		{insert, []any{30, nil}}, // a NULL reference adds no tenant
		{move, []any{30, 10}},
		{"UPDATE svc.project_tags SET body = 'edited' WHERE project_id IN ($1, $2) AND tag_id <> 20", []any{10, 30}},
		{"DELETE FROM svc.project_tags WHERE project_id = $1", []any{30}},
	} {
		m, c, err := inTx(admitted.sql, admitted.args...)
		require.NoError(t, err, admitted.sql)
		require.Equal(t, [2]bool{true, false}, [2]bool{m, c}, "%s: the near-free path, the marker's lock only", admitted.sql)
	}

	// A service login that owns the tables, whom no policy binds, takes
	// the same path and is refused the same.
	require.NoError(t, b.exec(t, "GRANT community_deletion_serving TO "+owner.name))
	for _, pair := range [][2]int{{10, 20}, {20, 10}} {
		requireSQLState(t, owner.exec(t, insert, pair[0], pair[1]), sqlstateFenced, "is fenced")
	}

	// A policy that hides the fenced tenant's tag from the writer: the fence
	// takes the long way, as the parents' owner, and still refuses.
	owner.run(t, "ALTER TABLE svc.tags ENABLE ROW LEVEL SECURITY")
	_, _, err := inTx(insert, 10, 20)
	requireSQLState(t, err, sqlstateFenced, "is fenced")
	m, c, err := inTx(insert, 10, 30)
	require.NoError(t, err)
	require.Equal(t, [2]bool{true, false}, [2]bool{m, c}, "the long way admits on the near-free path too")
}
