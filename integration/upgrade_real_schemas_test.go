package integration

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/ephemeralpg"
	"github.com/tombstoneworks/communitydeletion/internal/fixture"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
	"github.com/tombstoneworks/communitydeletion/migration"
)

// lastUUIDOnlyRelease is the last migration before the real-schema tenant
// model (00025, 00026).
const lastUUIDOnlyRelease = 24

// Fixed communities of the template upgraded from 24.
var (
	upgraded24Doomed    = uuid.MustParse("5b1e3c4d-2e2f-4a7b-8c9d-000000000d24")
	upgraded24Bystander = uuid.MustParse("5b1e3c4d-2e2f-4a7b-8c9d-000000000b24")
)

// upgraded24Template is a uuid deployment of release 24 (the fixture tables
// attached, rows of two communities, an approved deletion of one) migrated
// to the latest migration.
type upgraded24Template struct{}

func (upgraded24Template) Hash() (string, error) {
	hash, err := fixture.Template{WithFixture: true}.Hash()
	return "real schemas upgraded from 24 v1 " + hash, err
}

func (upgraded24Template) Settings() map[string]string { return fixture.Template{}.Settings() }

func (upgraded24Template) Migrate(ctx context.Context, url string) error {
	migrator, err := migration.Open(ctx, url)
	if err != nil {
		return err
	}
	defer migrator.Close()
	if _, err := migrator.UpTo(ctx, lastUUIDOnlyRelease); err != nil {
		return fmt.Errorf("migrate to %d: %w", lastUUIDOnlyRelease, err)
	}
	if err := released24(ctx, url); err != nil {
		return err
	}
	if _, err := migrator.Up(ctx); err != nil {
		return fmt.Errorf("upgrade from %d: %w", lastUUIDOnlyRelease, err)
	}
	return nil
}

// released24 sets up, on a database at migration 24, what a uuid deployment
// of that release has: the fixture attached, rows, an approved deletion.
func released24(ctx context.Context, url string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "SET search_path = public, community_deletion"); err != nil {
		return err
	}
	if err := fixture.Apply(ctx, conn); err != nil {
		return err
	}
	if err := fixture.EnsureRoles(ctx, url); err != nil {
		return err
	}
	for _, c := range []uuid.UUID{upgraded24Doomed, upgraded24Bystander} {
		if _, err := conn.Exec(ctx, "INSERT INTO communities (id, host, signing_key, icon) VALUES ($1, $2, 'key', 'icon.png')",
			c, "c-"+c.String()+".example"); err != nil {
			return err
		}
		if err := seedRows(ctx, conn, c); err != nil {
			return err
		}
	}
	operator, err := connectRole(ctx, url, fixture.RoleOperator)
	if err != nil {
		return err
	}
	defer operator.Close(context.WithoutCancel(ctx))
	approver, err := connectRole(ctx, url, fixture.RoleApprover)
	if err != nil {
		return err
	}
	defer approver.Close(context.WithoutCancel(ctx))
	_, err = approveDeletion(ctx, operator, approver, upgraded24Doomed)
	return err
}

// connectRole connects as role, naming the project's objects unqualified
// (the template's settings apply only once it is built).
func connectRole(ctx context.Context, url string, role fixture.Role) (*pgx.Conn, error) {
	u, err := fixture.RoleConnString(url, role)
	if err != nil {
		return nil, err
	}
	config, err := pgx.ParseConfig(u)
	if err != nil {
		return nil, err
	}
	config.RuntimeParams["search_path"] = "public, community_deletion"
	return pgx.ConnectConfig(ctx, config)
}

// migrateDown rolls back the newest migration of the database at url.
func migrateDown(t *testing.T, url string) error {
	t.Helper()
	migrator, err := migration.Open(t.Context(), url)
	require.NoError(t, err)
	defer migrator.Close()
	_, err = migrator.Down(t.Context())
	return err
}

// downToTheModel rolls the database at url back to migration 00027, the
// real-schema model (00026 as released, rebuilt as it stands).
func downToTheModel(t *testing.T, url string) {
	t.Helper()
	migrator, err := migration.Open(t.Context(), url)
	require.NoError(t, err)
	defer migrator.Close()
	_, err = migrator.DownTo(t.Context(), 27)
	require.NoError(t, err)
}

// migrationVersion is the database's applied version.
func migrationVersion(t *testing.T, url string) int64 {
	t.Helper()
	migrator, err := migration.Open(t.Context(), url)
	require.NoError(t, err)
	defer migrator.Close()
	version, err := migrator.Version(t.Context())
	require.NoError(t, err)
	return version
}

// requireDownRefused asserts that rolling back the real-schema model
// (00027, whose Down runs 00026's current Down first) is refused (55000)
// with a message containing contains, and that the database stays at
// version 27: the migrations after it roll back first, and migrate up
// again after.
func requireDownRefused(t *testing.T, url string, contains string) {
	t.Helper()
	downToTheModel(t, url)
	version := migrationVersion(t, url)
	err := migrateDown(t, url)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr, "want a PostgreSQL error, got %v", err)
	require.Equal(t, sqlstateFenced, pgErr.Code, pgErr.Message)
	require.Contains(t, pgErr.Message, contains)
	require.Equal(t, version, migrationVersion(t, url))
	migrator, err := migration.Open(t.Context(), url)
	require.NoError(t, err)
	defer migrator.Close()
	_, err = migrator.Up(t.Context())
	require.NoError(t, err)
}

// A uuid deployment of release 24, with a deletion approved and pending,
// migrated up to the real-schema tenant model keeps working unchanged: no
// drift, its registry as it was, the fence refusing the doomed
// community's writes from quiescing on (55000) while the bystander's pass,
// and the pending deletion completing through the role clients with the
// bystander untouched. Its partitioned table, attached before this
// release, is named by the notes until attach runs again. Down from the
// latest migration is refused (55000) once a table is attached through
// its parents or a reference is declared, and allowed again when neither
// is left.
func TestUpgradeFrom24KeepsAUUIDDeploymentWorking(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := ephemeralpg.NewTestDatabase(t, server, upgraded24Template{})
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	b := &testBundle{t: t, url: url, pool: pool, pools: map[fixture.Role]*pgxpool.Pool{}}
	require.Equal(t, int64(migrationCount(t)), migrationVersion(t, url))
	w := &hostileWorld{b: b, doomed: upgraded24Doomed, bystander: upgraded24Bystander}
	require.NoError(t, pool.QueryRow(ctx, `SELECT id FROM community_deletion_requests
		WHERE community_id = $1 AND stage = 'approved'`, w.doomed).Scan(&w.request), "the pending deletion survived the upgrade")
	w.clients = fixture.NewClients(t, url)
	config, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	config.ConnConfig.RuntimeParams["search_path"] = "pg_catalog, community_deletion"
	w.inspect, err = pgxpool.NewWithConfig(ctx, config)
	require.NoError(t, err)
	t.Cleanup(w.inspect.Close)

	require.Empty(t, rawDrift(t, b))
	require.Equal(t, []string{
		"public.fixture_activity/delete/community_id", "public.fixture_attachments/delete/community_id",
		"public.fixture_audit_events/nullify/community_id", "public.fixture_channels/delete/community_id",
		"public.fixture_members/delete/community_id", "public.fixture_messages/delete/community_id",
		"public.fixture_reactions/delete/community_id",
	}, registryKeys(t, b))
	var kinds int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM community_scoped_tables WHERE key_kind IS DISTINCT FROM 'uuid' AND key_kind IS NOT NULL").Scan(&kinds))
	require.Zero(t, kinds)
	require.Equal(t, []string{"fixture_activity: partitions created from now on will not be fenced: run community_deletion.attach_community_write_fence " +
		"(or attach_child_table) on public.fixture_activity again to fence them as they are created"}, notes(t, b))
	w.before = w.rowsOf(t, w.bystander)

	writes := func(t *testing.T, community uuid.UUID) error {
		t.Helper()
		return pgx.BeginFunc(ctx, b.as(fixture.RoleServing), func(tx pgx.Tx) error {
			return seedRows(ctx, tx, community)
		})
	}
	fenced := func(t *testing.T) {
		t.Helper()
		requireSQLState(t, writes(t, w.doomed), sqlstateFenced, "community write to fixture_members refused")
		requireSQLState(t, b.execAs(t, fixture.RoleServing, "INSERT INTO fixture_activity (community_id, kind) VALUES ($1, 'late')", w.doomed),
			sqlstateFenced, "community write to fixture_activity refused")
	}
	w.walk(t, walkHooks{
		approved: func(t *testing.T) {
			require.NoError(t, writes(t, w.bystander))
			w.before = w.rowsOf(t, w.bystander)
		},
		quiescing: fenced,
		fenced:    func(t *testing.T, _ *lifecycle.LeaseToken) { fenced(t) },
		done: func(t *testing.T) {
			fenced(t)
			require.Empty(t, rawDrift(t, b))
		},
	})

	// The partitioned table attached again gets the row-level fence that
	// fences partitions created later.
	require.NoError(t, b.exec(t, "SELECT attach_community_write_fence('fixture_activity')"))
	require.Empty(t, notes(t, b))

	// Down refuses what release 24 cannot read, and only that.
	require.NoError(t, b.exec(t, "CREATE TABLE fixture_member_notes (member_id bigint NOT NULL REFERENCES fixture_members (id), note text)"))
	require.NoError(t, b.exec(t, "SELECT attach_child_table('fixture_member_notes')"))
	requireDownRefused(t, url, "public.fixture_member_notes is attached through its parents, which earlier releases cannot read")
	require.NoError(t, b.exec(t, "SELECT detach_community_write_fence('fixture_member_notes')"))
	require.NoError(t, b.exec(t, "CREATE TABLE fixture_member_links (member_ref bigint NOT NULL, url text)"))
	require.NoError(t, b.exec(t, "SELECT declare_reference('fixture_member_links', '{member_ref}', 'fixture_members')"))
	requireDownRefused(t, url, "references are declared")
	require.NoError(t, b.exec(t, "SELECT drop_reference('fixture_member_links', '{member_ref}')"))
	require.NoError(t, b.exec(t, "DROP TABLE fixture_member_notes, fixture_member_links"))

	// A partition created after attach again is fenced from creation.
	later := b.createCommunity(t)
	require.NoError(t, b.exec(t, fmt.Sprintf("CREATE TABLE fixture_activity_later PARTITION OF fixture_activity FOR VALUES IN ('%s')", later)))
	require.Empty(t, rawDrift(t, b))
	b.quiesce(t, later)
	requireSQLState(t, b.execAs(t, fixture.RoleServing, "INSERT INTO fixture_activity (community_id, kind) VALUES ($1, 'late')", later),
		sqlstateFenced, "community write to fixture_activity_later refused")

	require.NoError(t, migrateDown(t, url))
	require.Equal(t, int64(migrationCount(t)-1), migrationVersion(t, url))
}

// Down from the latest migration is refused (55000) once the tenant table
// is keyed by an integer, with or without tenants yet, and the database
// stays at its version.
func TestDownRefusedOnceATenantIsKeyedByAnInteger(t *testing.T) {
	t.Parallel()
	b := setupBare(t)
	owner := newServiceOwner(t, b)
	owner.run(t,
		"CREATE TABLE svc.accounts (id bigint PRIMARY KEY)",
		"GRANT INSERT ON svc.accounts TO community_deletion_serving",
		"SELECT community_deletion.declare_tenant_table('svc.accounts')",
	)
	requireDownRefused(t, b.url, "the tenant table is keyed by an integer or text key")
	require.NoError(t, b.execAs(t, fixture.RoleServing, "INSERT INTO svc.accounts (id) VALUES (7)"))
	requireDownRefused(t, b.url, "the tenant table is keyed by an integer or text key")
}
