package migration_test

import (
	"context"
	"database/sql"
	"io/fs"
	"os"
	"testing"
	"testing/fstest"

	"github.com/google/uuid"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	communitydeletion "github.com/tombstoneworks/communitydeletion"
	"github.com/tombstoneworks/communitydeletion/internal/fixture"
	"github.com/tombstoneworks/communitydeletion/migration"
)

// installedState renders what migration 00011's revision changed, for every
// function of the schema (community_deletion, once migrated to the end) (body, settings, security, privileges), the column
// privileges of the serving write leases and the recorded digests.
func installedState(t *testing.T, db *sql.DB) string {
	t.Helper()
	var state string
	require.NoError(t, db.QueryRow(`SELECT concat_ws(E'\n',
		(SELECT string_agg(concat_ws(' ', p.oid::regprocedure::text, md5(p.prosrc), p.proconfig::text,
			p.prosecdef::text, (SELECT array_agg(x::text ORDER BY x::text) FROM unnest(p.proacl) x)::text), E'\n' ORDER BY p.oid::regprocedure::text)
		 FROM pg_proc p WHERE p.pronamespace = 'community_deletion'::regnamespace),
		(SELECT string_agg(a.attname || ' ' || coalesce((SELECT array_agg(x::text ORDER BY x::text) FROM unnest(a.attacl) x)::text, '-'), E'\n' ORDER BY a.attnum)
		 FROM pg_attribute a WHERE a.attrelid = 'community_deletion.community_serving_write_leases'::regclass AND a.attnum > 0),
		(SELECT string_agg(d.function_signature || ' ' || d.digest, E'\n' ORDER BY d.function_signature)
		 FROM community_deletion.community_deletion_function_digests d))`).Scan(&state))
	return state
}

// A database that applied migration 00011 as first released (kept in
// testdata), then 00012 and 00013, ends after 00014 exactly where one built
// from today's files does.
func TestMigration14BringsTheFirstReleaseOf00011UpToItsRevision(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	released := fstest.MapFS{}
	entries, err := fs.ReadDir(communitydeletion.Migrations(), ".")
	require.NoError(t, err)
	for _, entry := range entries {
		data, err := fs.ReadFile(communitydeletion.Migrations(), entry.Name())
		require.NoError(t, err)
		released[entry.Name()] = &fstest.MapFile{Data: data}
	}
	first, err := os.ReadFile("testdata/00011_community_deletion_least_privilege.first_release.sql")
	require.NoError(t, err)
	released["00011_community_deletion_least_privilege.sql"] = &fstest.MapFile{Data: first}

	old := setup(t)
	_, err = newMigrator(t, old.db, migration.WithMigrations(released)).UpTo(ctx, 13)
	require.NoError(t, err)
	var publicAttach, operatorReaps bool
	require.NoError(t, old.db.QueryRow(`SELECT
		EXISTS (SELECT 1 FROM pg_proc p, aclexplode(p.proacl) a
			WHERE p.oid = 'attach_community_write_fence(regclass, text)'::regprocedure
			  AND a.grantee = 0 AND a.privilege_type = 'EXECUTE'),
		has_column_privilege('community_deletion_operator', 'community_serving_write_leases', 'heartbeat_at', 'UPDATE')`).
		Scan(&publicAttach, &operatorReaps))
	require.False(t, publicAttach, "the first release's seals revoked PUBLIC's EXECUTE on attach")
	require.False(t, operatorReaps)
	// The service's own refusal, as the service's role meets it: the first
	// release's fence does not name its constraint.
	community := withFixture(t, old.url)
	require.Empty(t, fenceRefusal(t, old.url, community))

	_, err = newMigrator(t, old.db).Up(ctx)
	require.NoError(t, err)
	require.Equal(t, "community_write_fence", fenceRefusal(t, old.url, community))
	fresh := setup(t)
	_, err = newMigrator(t, fresh.db).Up(ctx)
	require.NoError(t, err)
	require.Equal(t, installedState(t, fresh.db), installedState(t, old.db))
}

// withFixture creates the fixture's tenant tables on the database of url, as
// a service registers its own, and returns a new active community.
func withFixture(t *testing.T, url string) uuid.UUID {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), url)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	require.NoError(t, fixture.Apply(t.Context(), conn))
	community := uuid.New()
	_, err = conn.Exec(t.Context(), "INSERT INTO communities (id, host, signing_key, icon) VALUES ($1, $2, 'key', 'icon.png')",
		community, community.String()+".example")
	require.NoError(t, err)
	return community
}

// fenceRefusal writes a row of community as the service's role in a
// REPEATABLE READ transaction, which the write fence refuses with SQLSTATE
// 25000, and returns the constraint the refusal names.
func fenceRefusal(t *testing.T, url string, community uuid.UUID) string {
	t.Helper()
	pool := fixture.RolePool(t, url, fixture.RoleServing)
	tx, err := pool.BeginTx(t.Context(), pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = tx.Exec(t.Context(), "INSERT INTO fixture_members (community_id, handle) VALUES ($1, 'm')", community)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, pgerrcode.InvalidTransactionState, pgErr.Code, pgErr.Message)
	return pgErr.ConstraintName
}
