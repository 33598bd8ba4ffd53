package integration

import (
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// A login with no grants at all attaches every SECURITY DEFINER trigger
// function of the schema to a temporary table of its own, under every
// firing it could choose, with temporary views named like the fences'
// transition tables that call a function of its own. Each function it may
// execute refuses to run there (42501) before reading any relation, so the
// planted function never runs as the functions' owner; each other one
// cannot even be attached (42501). Against migration 00029 the kept-row
// fence read the planted view as its owner.
func TestNoGrantLoginCannotRunDefinerTriggersOutOfContext(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	attacker, conn := newLogin(t, b)

	rows, err := b.pool.Query(ctx, `
		SELECT p.oid::regprocedure::text, has_function_privilege($1, p.oid, 'EXECUTE')
		FROM pg_proc p
		WHERE p.pronamespace = 'community_deletion'::regnamespace AND p.prosecdef
		  AND p.prorettype = 'trigger'::regtype
		ORDER BY 1`, attacker)
	require.NoError(t, err)
	type definer struct {
		Signature  string
		Executable bool
	}
	definers, err := pgx.CollectRows(rows, pgx.RowToStructByPos[definer])
	require.NoError(t, err)
	require.NotEmpty(t, definers)

	// What the attacker plants: a function of its own, and views named as
	// the fences' transition tables that call it.
	for _, sql := range []string{
		`CREATE FUNCTION pg_temp.planted() RETURNS uuid LANGUAGE plpgsql AS
		 $$ BEGIN RAISE EXCEPTION 'planted code ran as %', current_user; END $$`,
		"CREATE TEMP VIEW community_fence_new AS SELECT pg_temp.planted() AS id",
		"CREATE TEMP VIEW community_fence_old AS SELECT pg_temp.planted() AS id",
	} {
		_, err := conn.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}

	firings := []struct{ timing, fire string }{
		{"AFTER INSERT OR UPDATE ON %s FOR EACH STATEMENT", "INSERT INTO %s VALUES (gen_random_uuid())"},
		{"BEFORE INSERT OR UPDATE ON %s FOR EACH STATEMENT", "INSERT INTO %s VALUES (gen_random_uuid())"},
		{"AFTER INSERT OR UPDATE ON %s FOR EACH ROW", "INSERT INTO %s VALUES (gen_random_uuid())"},
		{"BEFORE INSERT OR UPDATE OR DELETE ON %s FOR EACH ROW", "INSERT INTO %s VALUES (gen_random_uuid())"},
		{"BEFORE TRUNCATE ON %s", "TRUNCATE %s"},
	}
	attached := 0
	for i, d := range definers {
		for j, f := range firings {
			table := fmt.Sprintf("bait_%d_%d", i, j)
			_, err := conn.Exec(ctx, fmt.Sprintf("CREATE TEMP TABLE %s (id uuid)", table))
			require.NoError(t, err)
			name, _, _ := strings.Cut(d.Signature, "(")
			create := fmt.Sprintf("CREATE TRIGGER bait AFTER INSERT ON %s EXECUTE FUNCTION %s('id', 'uuid')", table, name)
			create = strings.Replace(create, "AFTER INSERT ON "+table, fmt.Sprintf(f.timing, table), 1)
			_, err = conn.Exec(ctx, create)
			if !d.Executable {
				requireSQLState(t, err, pgerrcode.InsufficientPrivilege, "permission denied for function")
				break
			}
			require.NoError(t, err, create)
			attached++
			_, err = conn.Exec(ctx, fmt.Sprintf(f.fire, table))
			requireSQLState(t, err, pgerrcode.InsufficientPrivilege, "refused")
			require.NotContains(t, err.Error(), "planted code ran", d.Signature)
		}
	}
	require.Positive(t, attached, "some definer trigger function is executable by every login: the fences a table's owner names")
}
