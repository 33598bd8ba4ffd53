package integration

import (
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/fixture"
)

// While another tenant is in flight, the near-free path ORs the bits of
// every row a statement writes, old rows and new (migration 00034), for a
// bigint key and a uuid key alike: a statement with a row of the tenant in
// flight goes on to the full fence and is refused, one without is admitted
// holding the marker's lock and no community's. It holds for the fence as
// the arm specializes it (migration 00040) and for its generic code. The
// broken variants, a fence or a generator whose UPDATE reads the bits of
// its old rows only, show the test catches a fence that misses a side: it
// lets a row move into the fenced tenant.
func TestNearFreeFenceSeesEveryRowOfAStatement(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"bigint", "uuid"} {
		for _, specialized := range []bool{true, false} {
			for _, broken := range []bool{false, true} {
				name := kind + ", specialized"
				if !specialized {
					name = kind + ", generic"
				}
				if broken {
					name += ", a fence blind to an UPDATE's new rows"
				}
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					seesEveryRow(t, kind, specialized, broken)
				})
			}
		}
	}
}

func seesEveryRow(t *testing.T, kind string, specialized, broken bool) {
	t.Helper()
	b, _, serving, table, column, key := bitsDeployment(t, kind)
	ctx := t.Context()
	if broken && specialized {
		breakFenceRegions(t, b,
			"'        FROM (SELECT o.%I::pg_catalog.text FROM community_fence_old o\\n'\n"+
				"            '              UNION ALL\\n'\n"+
				"            '              SELECT n.%I::pg_catalog.text FROM community_fence_new n) k (key);\\n'",
			"'        FROM (SELECT o.%I::pg_catalog.text FROM community_fence_old o) k (key);\\n'")
	}
	if broken && !specialized {
		var def string
		require.NoError(t, b.pool.QueryRow(ctx,
			"SELECT pg_get_functiondef('community_deletion.enforce_community_write_fence()'::regprocedure)").Scan(&def))
		newSide := "FROM community_fence_old o\n                              UNION ALL\n" +
			"                              SELECT pg_catalog.to_jsonb(n) OPERATOR(pg_catalog.->>) TG_ARGV[0] FROM community_fence_new n) k (key);"
		require.Equal(t, 1, strings.Count(def, newSide), "path 0 reads an UPDATE's new rows in one query for every key kind (migration 00039)")
		require.NoError(t, b.exec(t, strings.ReplaceAll(def, newSide, "FROM community_fence_old o) k (key);")))
	}
	b.walkTenant(t, 2, "fenced")
	switch {
	case specialized:
		require.Equal(t, []string{column}, specializedFor(t, b).Keys, "the arm specialized the fence")
	case !broken:
		unspecializeFence(t, b)
	default:
		require.Equal(t, fenceBranches{}, specializedFor(t, b), "a broken fence is not specialized")
	}
	require.Zero(t, fenceBits(t, b, 1)&fenceBits(t, b, 2), "the test's tenants need bits of their own")
	require.Zero(t, fenceBits(t, b, 3)&fenceBits(t, b, 2), "the test's tenants need bits of their own")
	require.Equal(t, fenceBits(t, b, 2), marker(t, b))
	pid := serving.PgConn().PID()
	row := func(k int) int64 {
		var id int64
		require.NoError(t, b.pool.QueryRow(ctx, fmt.Sprintf("SELECT min(id) FROM %s WHERE %s = $1", table, column), key(k)).Scan(&id))
		return id
	}
	// inTx runs sql in a transaction it rolls back, and says which
	// locks the statement left held.
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

	insert := fmt.Sprintf("INSERT INTO %s (%s, body) VALUES ($1, 'a'), ($2, 'b')", table, column)
	move := fmt.Sprintf("UPDATE %s SET %s = $1 WHERE id = $2", table, column)
	_, _, err := inTx(insert, key(1), key(2))
	requireSQLState(t, err, sqlstateFenced, "is fenced")
	_, _, err = inTx(fmt.Sprintf("DELETE FROM %s WHERE id = $1", table), row(2))
	requireSQLState(t, err, sqlstateFenced, "is fenced")
	_, _, err = inTx(move, key(1), row(2))
	requireSQLState(t, err, sqlstateFenced, "is fenced")
	_, _, err = inTx(move, key(2), row(1))
	if broken {
		require.NoError(t, err, "the blind fence lets a row move into the fenced tenant")
		return
	}
	requireSQLState(t, err, sqlstateFenced, "is fenced")

	for _, admitted := range []struct {
		sql  string
		args []any
	}{
		{insert, []any{key(1), key(3)}},
		{move, []any{key(3), row(1)}},
		{fmt.Sprintf("UPDATE %s SET body = 'edited' WHERE %s IN ($1, $2)", table, column), []any{key(1), key(3)}},
		{fmt.Sprintf("DELETE FROM %s WHERE %s = $1", table, column), []any{key(3)}},
	} {
		m, c, err := inTx(admitted.sql, admitted.args...)
		require.NoError(t, err, admitted.sql)
		require.Equal(t, [2]bool{true, false}, [2]bool{m, c}, "%s: the near-free path, the marker's lock only", admitted.sql)
	}
}

// bitsDeployment is a service with one bound table, keyed by a bigint
// account id or a uuid organization id with a foreign key to its tenant
// table, and tenants 1, 2 and 3, each with a row. It returns the login that
// owns the tables, the table, its key column, and the key of tenant k as
// the table stores it.
func bitsDeployment(t *testing.T, kind string) (b *testBundle, owner serviceOwner, serving *pgx.Conn, table, column string, key func(int) any) {
	t.Helper()
	b = setupBare(t)
	owner = newServiceOwner(t, b)
	switch kind {
	case "bigint":
		table, column, key = "svc.conversations", "account_id", func(k int) any { return int64(k) }
		owner.run(t,
			"CREATE TABLE svc.accounts (id bigint PRIMARY KEY)",
			"CREATE TABLE svc.conversations (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, account_id bigint NOT NULL REFERENCES svc.accounts (id), body text)",
			"SELECT community_deletion.declare_tenant_table('svc.accounts')")
	case "uuid":
		// The tenant's key is its lifecycle id, so tenant k's organization
		// is tenantUUID(k), which walkTenant and holdsLocks name.
		table, column, key = "svc.documents", "organization_id", func(k int) any { return tenantUUID(k) }
		owner.run(t,
			"CREATE TABLE svc.organizations (id uuid PRIMARY KEY)",
			"CREATE TABLE svc.documents (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, organization_id uuid NOT NULL REFERENCES svc.organizations (id), body text)",
			"SELECT community_deletion.declare_tenant_table('svc.organizations')")
	}
	owner.run(t,
		"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA svc TO community_deletion_serving",
		fmt.Sprintf("SELECT community_deletion.attach_community_write_fence('%s', 'delete', '%s')", table, column))
	tenantTable := strings.Replace(table, "conversations", "accounts", 1)
	tenantTable = strings.Replace(tenantTable, "documents", "organizations", 1)
	serving = roleSession(t, b, fixture.RoleServing)
	for k := 1; k <= 3; k++ {
		_, err := serving.Exec(t.Context(), fmt.Sprintf("INSERT INTO %s (id) VALUES ($1)", tenantTable), key(k))
		require.NoError(t, err)
		_, err = serving.Exec(t.Context(), fmt.Sprintf("INSERT INTO %s (%s, body) VALUES ($1, 'first')", table, column), key(k))
		require.NoError(t, err)
	}
	var args []string
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT string_to_array(encode(tgargs, 'escape'), '\000')
		FROM pg_trigger WHERE tgrelid = $1::regclass AND tgname = 'community_write_fence_insert'`, table).Scan(&args))
	require.Contains(t, args, "bound", "the table's fence is bound")
	require.Empty(t, rawDrift(t, b))
	return b, owner, serving, table, column, key
}
