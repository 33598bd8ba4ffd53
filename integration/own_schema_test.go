package integration

import (
	"context"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/ephemeralpg"
	"github.com/tombstoneworks/communitydeletion/migration"
)

// Migration 00021 creates schema community_deletion itself, so that no
// other role owns it: it refuses a schema another role created first (a
// role that may CREATE in the database could otherwise own the trust
// boundary), and it refuses to run under the DDL guard of an earlier
// release, which names the old schema. Either way nothing moves.
func TestMigration21RefusesAPlantedSchemaAndAnEarlierGuard(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	earlier, err := os.ReadFile("testdata/ddl_guard_before_00021.sql")
	require.NoError(t, err)
	for name, prepare := range map[string]struct {
		stmts func(database string) []string
		want  string
	}{
		"a schema another role created": {func(database string) []string {
			return []string{
				"DROP ROLE IF EXISTS cd_test_schema_squatter",
				"CREATE ROLE cd_test_schema_squatter LOGIN",
				"GRANT CREATE ON DATABASE " + pgx.Identifier{database}.Sanitize() + " TO cd_test_schema_squatter",
				"SET ROLE cd_test_schema_squatter",
				"CREATE SCHEMA community_deletion",
				"RESET ROLE",
			}
		}, "schema community_deletion already exists (owner cd_test_schema_squatter)"},
		"the DDL guard of an earlier release": {func(string) []string { return []string{string(earlier)} },
			"the DDL guard of an earlier release is installed"},
	} {
		t.Run(name, func(t *testing.T) {
			url := ephemeralpg.NewEmptyTestDatabase(t, server)
			config, err := pgx.ParseConfig(url)
			require.NoError(t, err)
			m, err := migration.Open(ctx, url)
			require.NoError(t, err)
			defer m.Close()
			_, err = m.UpTo(ctx, 20)
			require.NoError(t, err)
			db, err := pgx.Connect(ctx, url)
			require.NoError(t, err)
			defer db.Close(context.WithoutCancel(ctx))
			for _, stmt := range prepare.stmts(config.Database) {
				_, err := db.Exec(ctx, stmt)
				require.NoError(t, err, stmt)
			}

			_, err = m.UpTo(ctx, 21)
			require.ErrorContains(t, err, prepare.want)
			version, err := m.Version(ctx)
			require.NoError(t, err)
			require.EqualValues(t, 20, version)
			var home string
			require.NoError(t, db.QueryRow(ctx, "SELECT relnamespace::regnamespace::text FROM pg_class WHERE oid = 'communities'::regclass").Scan(&home))
			require.Equal(t, "public", home, "nothing moved")
		})
	}
}
