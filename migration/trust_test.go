package migration_test

import (
	"database/sql"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/fixture"
	"github.com/tombstoneworks/communitydeletion/migration"
)

// A role other than the schema's owner that may CREATE in community_deletion
// could plant a function every guard resolves, and the owner of a version
// table the migrating role does not own could rewrite the history: the
// migrations refuse to run until either is undone, and change nothing.
func TestMigrationsRefuseAWritableDeletionSchema(t *testing.T) {
	ctx := t.Context()
	b := setup(t)
	config, err := pgx.ParseConfig(b.url)
	require.NoError(t, err)
	// A migrating role that is no superuser, owning the database.
	for _, stmt := range []string{
		"DROP ROLE IF EXISTS trust_migrator",
		"CREATE ROLE trust_migrator LOGIN CREATEROLE PASSWORD 'pw'",
		"DROP ROLE IF EXISTS trust_planter",
		"CREATE ROLE trust_planter NOLOGIN",
		"ALTER DATABASE " + pgx.Identifier{config.Database}.Sanitize() + " OWNER TO trust_migrator",
	} {
		_, err := b.db.ExecContext(ctx, stmt)
		require.NoError(t, err, stmt)
	}
	url, err := fixture.LoginConnString(b.url, "trust_migrator", "pw")
	require.NoError(t, err)
	loginConfig, err := pgx.ParseConfig(url)
	require.NoError(t, err)
	db := stdlib.OpenDB(*loginConfig)
	t.Cleanup(func() { _ = db.Close() })
	m := newMigrator(t, db)
	_, err = m.Up(ctx)
	require.NoError(t, err)
	top, err := m.Version(ctx)
	require.NoError(t, err)

	refused := func(want string) {
		t.Helper()
		_, err := m.Down(ctx)
		require.ErrorIs(t, err, migration.ErrUntrustedSchema)
		require.ErrorContains(t, err, want)
		version, err := newMigrator(t, b.db).Version(ctx)
		require.NoError(t, err)
		require.Equal(t, top, version, "nothing was rolled back")
	}

	exec(t, b.db, "GRANT CREATE ON SCHEMA community_deletion TO trust_planter")
	refused("trust_planter may CREATE in schema community_deletion; revoke it")
	exec(t, b.db, "REVOKE CREATE ON SCHEMA community_deletion FROM trust_planter")

	exec(t, b.db, "ALTER TABLE "+migration.VersionTable+" OWNER TO trust_planter")
	refused("the version table " + migration.VersionTable + " belongs to trust_planter")
	exec(t, b.db, "ALTER TABLE "+migration.VersionTable+" OWNER TO trust_migrator")

	_, err = m.Down(ctx)
	require.NoError(t, err, "once both are undone, the owner migrates")
}

func exec(t *testing.T, db *sql.DB, stmt string) {
	t.Helper()
	_, err := db.ExecContext(t.Context(), stmt)
	require.NoError(t, err, stmt)
}
