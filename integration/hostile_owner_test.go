package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/ephemeralpg"
	"github.com/tombstoneworks/communitydeletion/internal/fixture"
	"github.com/tombstoneworks/communitydeletion/internal/testfactory"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
	"github.com/tombstoneworks/communitydeletion/migration"
)

// The hostile-owner suite (issue 16): every attack runs as a role a real
// deployment has, never the superuser: a service login that owns schema
// public and the tenant tables fixture_messages and fixture_activity (with
// its partition) but belongs to no deletion role; the operator; the serving
// login; and a login that owns schema community_deletion and a control
// table, acting outside a migration run. Each attack runs without and, where
// it bears on DDL, with the optional DDL guard, in a database with one
// approved deletion pending. Each asserts the refusal's SQLSTATE (or the
// drift row that blocks the claim) and that nothing changed, and then the
// pending deletion runs end to end through the role clients: the doomed
// community's rows are gone and the bystander's are as they were.
//
// The suite runs twice: on a fresh database (TestHostileOwnerFresh), and on
// one migrated by the last release before migration 00021 (UpTo 20) with
// the fixture attached, rows written and the deletion approved, then
// upgraded (TestHostileOwnerUpgraded).

// hostileWorld is one attack's database: the two communities, the pending
// deletion, the lifecycle clients and the attackers' sessions.
type hostileWorld struct {
	b         *testBundle
	clients   fixture.Clients
	inspect   *pgxpool.Pool // the superuser, resolving nothing through public
	doomed    uuid.UUID     // has the approved deletion
	bystander uuid.UUID     // active throughout
	request   uuid.UUID
	guard     bool

	owner     string    // owns schema public and some tenant tables
	ownerConn *pgx.Conn // a session as owner
	before    string    // the bystander's rows before the attack
}

// hostileAttack is one attack. run is called once the world is set up; it
// gets the deletion walk's hooks to attack at a stage of its choosing.
type hostileAttack struct {
	name string
	// prepare, if set, runs as the superuser before the guard is installed:
	// the deployment's grants the attack starts from.
	prepare func(t *testing.T, w *hostileWorld)
	run     func(t *testing.T, w *hostileWorld) walkHooks
}

// walkHooks run at stages of the pending deletion's walk: approved (before
// the claim), quiescing, fenced (with the current token, which the hook may
// replace) and done (after retention_pending).
type walkHooks struct {
	approved  func(t *testing.T)
	quiescing func(t *testing.T)
	fenced    func(t *testing.T, token *lifecycle.LeaseToken)
	done      func(t *testing.T)
}

// Fixed communities of the upgraded template, so each clone knows them.
var (
	upgradedDoomed    = uuid.MustParse("8a0f2c3e-16a1-4c7e-9d0a-000000000d00")
	upgradedBystander = uuid.MustParse("8a0f2c3e-16a1-4c7e-9d0a-000000000b00")
)

// seedRows writes rows of community into the fixture tables: two members,
// a channel, two messages, two activity rows and an audit event.
func seedRows(ctx context.Context, db fixture.Execer, community uuid.UUID) error {
	for _, sql := range []string{
		"INSERT INTO fixture_members (community_id, handle) VALUES ($1, 'm1'), ($1, 'm2')",
		"INSERT INTO fixture_channels (community_id, name, created_by) SELECT $1, 'general', min(id) FROM fixture_members WHERE community_id = $1",
		`INSERT INTO fixture_messages (community_id, channel_id, author_id, body)
			SELECT $1, c.id, m.id, 'hello ' || m.handle FROM fixture_channels c JOIN fixture_members m USING (community_id) WHERE c.community_id = $1`,
		"INSERT INTO fixture_activity (community_id, kind) VALUES ($1, 'joined'), ($1, 'posted')",
		"INSERT INTO fixture_audit_events (community_id, action) VALUES ($1, 'created')",
	} {
		if _, err := db.Exec(ctx, sql, community); err != nil {
			return fmt.Errorf("seed rows of %s: %w", community, err)
		}
	}
	return nil
}

// beginner is a *pgx.Conn or a *pgxpool.Pool.
type beginner interface {
	fixture.Execer
	Begin(ctx context.Context) (pgx.Tx, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// approveDeletion submits, freezes (a stand-in inventory) and approves a
// deletion of community in SQL, as the operator and a second operator, in
// names that resolve before and after migration 00021 alike.
func approveDeletion(ctx context.Context, operator, approver beginner, community uuid.UUID) (uuid.UUID, error) {
	var id uuid.UUID
	if err := operator.QueryRow(ctx, `INSERT INTO community_deletion_requests (community_id, community_host, requested_by)
		SELECT id, host, 'requester' FROM communities WHERE id = $1 RETURNING id`, community).Scan(&id); err != nil {
		return uuid.Nil, fmt.Errorf("submit: %w", err)
	}
	if _, err := operator.Exec(ctx, `UPDATE community_deletion_requests
		SET stage = 'inventoried', schema_manifest = '{}', storage_manifest = '{}', inventory_manifest = '{}',
		    inventory_digest = $2, inventory_frozen_at = now()
		WHERE id = $1`, id, testDigest(id.String())); err != nil {
		return uuid.Nil, fmt.Errorf("freeze: %w", err)
	}
	err := pgx.BeginFunc(ctx, approver, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO community_deletion_approvals (request_id, community_id, inventory_digest, approved_by)
			SELECT id, community_id, inventory_digest, 'approver' FROM community_deletion_requests WHERE id = $1`, id); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "UPDATE community_deletion_requests SET stage = 'approved' WHERE id = $1", id)
		return err
	})
	if err != nil {
		return uuid.Nil, fmt.Errorf("approve: %w", err)
	}
	return id, nil
}

// upgradedTemplate is a database migrated by the release before migration
// 00021, with the fixture attached, rows of two communities and an approved
// deletion of one, then migrated to the latest migration.
type upgradedTemplate struct{}

func (upgradedTemplate) Hash() (string, error) {
	hash, err := fixture.Template{WithFixture: true}.Hash()
	return "hostile upgraded from 20 v1 " + hash, err
}

func (upgradedTemplate) Settings() map[string]string { return fixture.Template{}.Settings() }

func (upgradedTemplate) Migrate(ctx context.Context, url string) error {
	migrator, err := migration.Open(ctx, url)
	if err != nil {
		return err
	}
	if _, err := migrator.UpTo(ctx, 20); err != nil {
		_ = migrator.Close()
		return fmt.Errorf("migrate to 20: %w", err)
	}
	if err := migrator.Close(); err != nil {
		return err
	}
	if err := released20(ctx, url); err != nil {
		return err
	}
	migrator, err = migration.Open(ctx, url)
	if err != nil {
		return err
	}
	defer migrator.Close()
	if _, err := migrator.Up(ctx); err != nil {
		return fmt.Errorf("upgrade from 20: %w", err)
	}
	return nil
}

// released20 sets up, on a database at migration 20, what a deployment of
// that release has: the service's tables attached, rows, and an approved
// deletion.
func released20(ctx context.Context, url string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var moved bool
	if err := conn.QueryRow(ctx, "SELECT to_regnamespace('community_deletion') IS NOT NULL").Scan(&moved); err != nil || moved {
		return fmt.Errorf("expected a database before migration 00021 (moved %v): %w", moved, err)
	}
	if err := fixture.Apply(ctx, conn); err != nil {
		return err
	}
	if err := fixture.EnsureRoles(ctx, url); err != nil {
		return err
	}
	for _, c := range []uuid.UUID{upgradedDoomed, upgradedBystander} {
		if _, err := conn.Exec(ctx, "INSERT INTO communities (id, host, signing_key, icon) VALUES ($1, $2, 'key', 'icon.png')",
			c, "c-"+c.String()+".example"); err != nil {
			return err
		}
		if err := seedRows(ctx, conn, c); err != nil {
			return err
		}
	}
	roleConn := func(role fixture.Role) (*pgx.Conn, error) {
		u, err := fixture.RoleConnString(url, role)
		if err != nil {
			return nil, err
		}
		return pgx.Connect(ctx, u)
	}
	operator, err := roleConn(fixture.RoleOperator)
	if err != nil {
		return err
	}
	defer operator.Close(context.WithoutCancel(ctx))
	approver, err := roleConn(fixture.RoleApprover)
	if err != nil {
		return err
	}
	defer approver.Close(context.WithoutCancel(ctx))
	_, err = approveDeletion(ctx, operator, approver, upgradedDoomed)
	return err
}

// rowsOf counts community's rows in each fixture table (audit events by
// community), through the inspecting pool.
func (w *hostileWorld) rowsOf(t *testing.T, community uuid.UUID) string {
	t.Helper()
	var s string
	require.NoError(t, w.inspect.QueryRow(t.Context(), `SELECT concat_ws(' ',
		'members=' || (SELECT count(*) FROM public.fixture_members WHERE community_id = $1),
		'handles=' || (SELECT md5(coalesce(string_agg(handle, ',' ORDER BY id), '')) FROM public.fixture_members WHERE community_id = $1),
		'channels=' || (SELECT count(*) FROM public.fixture_channels WHERE community_id = $1),
		'messages=' || (SELECT count(*) FROM public.fixture_messages WHERE community_id = $1),
		'activity=' || (SELECT count(*) FROM public.fixture_activity WHERE community_id = $1),
		'audit=' || (SELECT count(*) FROM public.fixture_audit_events WHERE community_id = $1))`, community).Scan(&s))
	return s
}

// state is the community's deletion state and generation, and its
// request's stage, through the inspecting pool.
func (w *hostileWorld) state(t *testing.T) string {
	t.Helper()
	var s string
	require.NoError(t, w.inspect.QueryRow(t.Context(), `SELECT concat_ws(' ',
		(SELECT deletion_state || '@' || deletion_fence_generation FROM community_deletion.communities WHERE id = $1),
		(SELECT stage || '/' || coalesce(blocked_reason, '-') FROM community_deletion.community_deletion_requests WHERE id = $2),
		'registry=' || (SELECT string_agg(table_schema || '.' || table_name || '/' || purge_action, ',' ORDER BY table_name)
		                FROM community_deletion.community_scoped_tables))`, w.doomed, w.request).Scan(&s))
	return s
}

// newHostileWorld builds the attack's database, fresh or upgraded, and
// hands schema public and the tenant tables to the owner login.
func newHostileWorld(t *testing.T, upgraded, guard bool, prepare func(t *testing.T, w *hostileWorld)) *hostileWorld {
	t.Helper()
	ctx := t.Context()
	var b *testBundle
	w := &hostileWorld{guard: guard}
	if upgraded {
		url := ephemeralpg.NewTestDatabase(t, server, upgradedTemplate{})
		pool, err := pgxpool.New(ctx, url)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		b = &testBundle{t: t, url: url, pool: pool, pools: map[fixture.Role]*pgxpool.Pool{}}
		w.doomed, w.bystander = upgradedDoomed, upgradedBystander
		require.NoError(t, pool.QueryRow(ctx, `SELECT id FROM community_deletion.community_deletion_requests
			WHERE community_id = $1 AND stage = 'approved'`, w.doomed).Scan(&w.request), "the pending deletion survived the upgrade")
	} else {
		b = setup(t)
		w.doomed, w.bystander = b.createCommunity(t), b.createCommunity(t)
		for _, c := range []uuid.UUID{w.doomed, w.bystander} {
			require.NoError(t, seedRows(ctx, b.pool, c))
		}
		var err error
		w.request, err = approveDeletion(ctx, b.as(fixture.RoleOperator), b.as(fixture.RoleApprover), w.doomed)
		require.NoError(t, err)
	}
	w.b = b
	w.clients = fixture.NewClients(t, b.url)
	config, err := pgxpool.ParseConfig(b.url)
	require.NoError(t, err)
	config.ConnConfig.RuntimeParams["search_path"] = "pg_catalog, community_deletion"
	w.inspect, err = pgxpool.NewWithConfig(ctx, config)
	require.NoError(t, err)
	t.Cleanup(w.inspect.Close)

	w.owner, w.ownerConn = newLogin(t, b)
	for _, sql := range []string{
		"ALTER SCHEMA public OWNER TO %[1]s",
		"ALTER TABLE fixture_messages OWNER TO %[1]s",
		"ALTER TABLE fixture_activity OWNER TO %[1]s",
		"ALTER TABLE fixture_activity_default OWNER TO %[1]s",
	} {
		require.NoError(t, b.exec(t, fmt.Sprintf(sql, w.owner)), sql)
	}
	if prepare != nil {
		prepare(t, w)
	}
	if guard {
		installDDLGuard(t, b)
	}
	require.Empty(t, drift(t, b), "before the attack")
	w.before = w.rowsOf(t, w.bystander)
	return w
}

// asOwner runs statements in the owner's session.
func (w *hostileWorld) asOwner(t *testing.T, sqls ...string) error {
	t.Helper()
	for _, sql := range sqls {
		if _, err := w.ownerConn.Exec(t.Context(), sql); err != nil {
			return fmt.Errorf("%s: %w", sql, err)
		}
	}
	return nil
}

// requireClaimBlocked asserts that the drift report holds a row matching
// table and problem (substrings) and that claiming the pending deletion is
// refused with a DriftBlockedError naming it, durably.
func (w *hostileWorld) requireClaimBlocked(t *testing.T, table, problem string) {
	t.Helper()
	report := drift(t, w.b)
	found := false
	for _, row := range report {
		if strings.Contains(row.Table, table) && strings.Contains(row.Problem, problem) {
			found = true
		}
	}
	require.True(t, found, "drift has no row %q %q: %v", table, problem, report)
	ctx := t.Context()
	claim, err := w.clients.Engine.ClaimRequest(ctx, w.request, "executor", lifecycle.DefaultLeaseDuration)
	var blocked *lifecycle.DriftBlockedError
	require.ErrorAs(t, err, &blocked, "the claim is refused")
	require.Contains(t, blocked.Reason, table)
	require.Nil(t, claim)
	_, err = w.clients.Engine.ClaimRequest(ctx, w.request, "executor", lifecycle.DefaultLeaseDuration)
	require.ErrorIs(t, err, lifecycle.ErrNothingToClaim, "the request stays blocked")
}

// unblock clears a drift block once the attack is put back: no drift is
// left, and an operator unblocks the request.
func (w *hostileWorld) unblock(t *testing.T) {
	t.Helper()
	require.Empty(t, drift(t, w.b), "put back")
	_, err := w.clients.Operator.Unblock(t.Context(), w.request, "operator", "put back what the attack changed")
	require.NoError(t, err)
}

// walk runs the pending deletion end to end through the role clients,
// calling the hooks, and proves the result: the request at
// retention_pending, the community a tombstone without rows, the bystander's
// rows as they were.
func (w *hostileWorld) walk(t *testing.T, hooks walkHooks) {
	t.Helper()
	ctx := t.Context()
	engine := w.clients.Engine
	if hooks.approved != nil {
		hooks.approved(t)
	}
	claim, err := engine.ClaimRequest(ctx, w.request, "executor", lifecycle.DefaultLeaseDuration)
	require.NoError(t, err, "claim")
	token := claim.Lease
	require.NoError(t, engine.BeginQuiescing(ctx, token))
	if hooks.quiescing != nil {
		hooks.quiescing(t)
	}
	generation, err := engine.EnterFenced(ctx, token)
	require.NoError(t, err, "fence")
	token = token.WithFence(generation)
	if hooks.fenced != nil {
		hooks.fenced(t, &token)
	}
	steps := []struct {
		name string
		call func() error
	}{
		{"freeze the destructive manifest", func() error {
			return engine.FreezeDestructiveManifest(ctx, token, testfactory.EmptyStorage(w.doomed))
		}},
		{"drain", func() error { return engine.EnterDrained(ctx, token) }},
		{"remove bindings", func() error { return engine.EnterBindingsRemoved(ctx, token, nil) }},
		{"purge", func() error {
			_, err := engine.EnterPostgresPurged(ctx, token, lifecycle.PurgeOptions{})
			return err
		}},
		{"purge the cache", func() error { return engine.EnterCachePurged(ctx, token, nil) }},
		{"prove the purge", func() error { return engine.CheckPostgresPurged(ctx, token) }},
		{"verify", func() error { return engine.EnterLogicallyVerified(ctx, token, nil) }},
		{"complete", func() error { return engine.EnterRetentionPending(ctx, token, nil) }},
	}
	for _, step := range steps {
		if err := step.call(); err != nil {
			require.NoError(t, err, "%s (now %s)", step.name, w.state(t))
		}
	}
	request, err := w.clients.Operator.Get(ctx, w.request)
	require.NoError(t, err)
	require.Equal(t, lifecycle.StageRetentionPending, request.Stage)
	require.Equal(t, "members=0 handles="+emptyMD5+" channels=0 messages=0 activity=0 audit=0", w.rowsOf(t, w.doomed))
	require.Equal(t, w.before, w.rowsOf(t, w.bystander), "the bystander is untouched")
	require.True(t, strings.HasPrefix(w.state(t), "tombstone@"), w.state(t))
	if hooks.done != nil {
		hooks.done(t)
	}
}

const emptyMD5 = "d41d8cd98f00b204e9800998ecf8427e"

// hostileAttacks is the suite.
var hostileAttacks = []hostileAttack{
	{name: "no attack: the pending deletion completes", run: func(*testing.T, *hostileWorld) walkHooks { return walkHooks{} }},
	{name: "planted functions and operators in public never run", run: attackPlanted},
	{name: "CREATE in community_deletion is refused to every other role", run: attackCreateInSchema},
	{name: "the owner of community_deletion outside a migration run", prepare: prepareSchemaOwner, run: attackSchemaOwner},
	{name: "the DDL guard's exemption for migration runs", run: attackGuardExemption},
	{name: "a WHEN clause on a fence trigger", run: attackFenceWhen},
	{name: "a partition detached, written and re-attached", run: attackPartition},
	{name: "a column type change that moves rows between communities", run: attackRewrite},
	{name: "TRUNCATE while a community is quiescing or fenced", run: attackTruncate},
	{name: "row-level security that hides rows from the deletion", run: attackRowSecurity},
	{name: "an operator rewriting executor-only columns", run: attackExecutorColumns},
	{name: "a serving lease extended while its community is quiescing", run: attackLeaseExtension},
}

// runHostileSuite runs every attack in one world, fresh or upgraded, without
// and with the DDL guard. Under go test -short each attack runs once per
// world, with the guard in one world and without it in the other (which
// one alternates from attack to attack), so every attack still meets both
// worlds and both guard settings; make test runs the whole cross product.
func runHostileSuite(t *testing.T, upgraded bool) {
	for i, attack := range hostileAttacks {
		for _, guard := range []bool{false, true} {
			if testing.Short() && guard != (upgraded == (i%2 == 0)) {
				continue // the other world runs this attack with this guard setting
			}
			name := attack.name + "/without the DDL guard"
			if guard {
				name = attack.name + "/with the DDL guard"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				w := newHostileWorld(t, upgraded, guard, attack.prepare)
				w.walk(t, attack.run(t, w))
			})
		}
	}
}

func TestHostileOwnerFresh(t *testing.T) {
	t.Parallel()
	runHostileSuite(t, false)
}

func TestHostileOwnerUpgraded(t *testing.T) {
	t.Parallel()
	runHostileSuite(t, true)
}

// plantedSQL are the owner's objects in public: a marker (a sequence, which
// a rollback does not undo, and a table naming what ran) and functions and
// operators that match a call better than pg_catalog's or shadow the
// project's names, each of which marks that it ran and returns what an
// attacker wants (true, a match, the first argument).
var plantedSQL = []string{
	"CREATE SEQUENCE public.hostile_ran",
	"CREATE TABLE public.hostile_marker (what text NOT NULL, who text NOT NULL)",
	`CREATE FUNCTION public.hostile_mark(what text) RETURNS boolean LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
		BEGIN PERFORM pg_catalog.nextval('public.hostile_ran'); INSERT INTO public.hostile_marker VALUES (what, session_user::text); RETURN true; END $$`,
	`CREATE FUNCTION public.format(text, uuid) RETURNS text LANGUAGE sql AS $$ SELECT CASE WHEN public.hostile_mark('format(text,uuid)') THEN $1 END $$`,
	`CREATE FUNCTION public.format(text, name) RETURNS text LANGUAGE sql AS $$ SELECT CASE WHEN public.hostile_mark('format(text,name)') THEN $1 END $$`,
	`CREATE FUNCTION public.format(text, regclass) RETURNS text LANGUAGE sql AS $$ SELECT CASE WHEN public.hostile_mark('format(text,regclass)') THEN $1 END $$`,
	`CREATE FUNCTION public.format(text, community_deletion.community_deletion_stage) RETURNS text LANGUAGE sql
		AS $$ SELECT CASE WHEN public.hostile_mark('format(text,stage)') THEN $1 END $$`,
	`CREATE FUNCTION public.pg_has_role(oid, text, text) RETURNS boolean LANGUAGE sql AS $$ SELECT public.hostile_mark('pg_has_role(oid,text,text)') $$`,
	`CREATE FUNCTION public.pg_has_role(name, text, text) RETURNS boolean LANGUAGE sql AS $$ SELECT public.hostile_mark('pg_has_role(name,text,text)') $$`,
	`CREATE FUNCTION public.pg_has_role(text, name, text) RETURNS boolean LANGUAGE sql AS $$ SELECT public.hostile_mark('pg_has_role(text,name,text)') $$`,
	`CREATE FUNCTION public.pg_partition_tree(oid) RETURNS TABLE (relid regclass, parentrelid regclass, isleaf boolean, level integer)
		LANGUAGE sql AS $$ SELECT 0::regclass, NULL::regclass, public.hostile_mark('pg_partition_tree(oid)'), 0 $$`,
	`CREATE FUNCTION public.array_position(text[], community_deletion.community_deletion_stage) RETURNS integer LANGUAGE sql
		AS $$ SELECT CASE WHEN public.hostile_mark('array_position(text[],stage)') THEN 1 END $$`,
	`CREATE FUNCTION public.community_deletion_lock_key(uuid) RETURNS bigint LANGUAGE sql AS $$ SELECT CASE WHEN public.hostile_mark('community_deletion_lock_key(uuid)') THEN 1::bigint END $$`,
	`CREATE FUNCTION public.community_write_allowed(uuid) RETURNS boolean LANGUAGE sql AS $$ SELECT public.hostile_mark('community_write_allowed(uuid)') $$`,
	`CREATE FUNCTION public.assert_community_write_allowed(uuid) RETURNS void LANGUAGE plpgsql AS $$ BEGIN PERFORM public.hostile_mark('assert_community_write_allowed(uuid)'); END $$`,
	`CREATE FUNCTION public.community_deletion_is_member(name) RETURNS boolean LANGUAGE sql AS $$ SELECT public.hostile_mark('community_deletion_is_member(name)') $$`,
	`CREATE FUNCTION public.community_deletion_is_member(text) RETURNS boolean LANGUAGE sql AS $$ SELECT public.hostile_mark('community_deletion_is_member(text)') $$`,
	`CREATE FUNCTION public.community_deletion_operators_share_role() RETURNS boolean LANGUAGE sql AS $$ SELECT public.hostile_mark('community_deletion_operators_share_role()') $$`,
	// The same signatures as pg_catalog's, for a session that puts
	// pg_catalog last: what the fence's hot path calls.
	`CREATE FUNCTION public.current_setting(text) RETURNS text LANGUAGE sql AS $$ SELECT CASE WHEN public.hostile_mark('current_setting(text)') THEN '' END $$`,
	`CREATE FUNCTION public.current_setting(text, boolean) RETURNS text LANGUAGE sql AS $$ SELECT CASE WHEN public.hostile_mark('current_setting(text,boolean)') THEN '' END $$`,
	`CREATE FUNCTION public.pg_try_advisory_xact_lock_shared(bigint) RETURNS boolean LANGUAGE sql AS $$ SELECT public.hostile_mark('pg_try_advisory_xact_lock_shared(bigint)') $$`,
	`CREATE FUNCTION public.pg_advisory_xact_lock_shared(bigint) RETURNS void LANGUAGE plpgsql AS $$ BEGIN PERFORM public.hostile_mark('pg_advisory_xact_lock_shared(bigint)'); END $$`,
	`CREATE FUNCTION public.set_config(text, text, boolean) RETURNS text LANGUAGE sql AS $$ SELECT CASE WHEN public.hostile_mark('set_config(text,text,boolean)') THEN $2 END $$`,
	`CREATE FUNCTION public.uuid_hash_extended(uuid, bigint) RETURNS bigint LANGUAGE sql AS $$ SELECT CASE WHEN public.hostile_mark('uuid_hash_extended(uuid,bigint)') THEN 1::bigint END $$`,
	`CREATE FUNCTION public.community_deletion_step_authorized(uuid, text) RETURNS boolean LANGUAGE sql AS $$ SELECT public.hostile_mark('community_deletion_step_authorized(uuid,text)') $$`,
}

// plantedOperators are operators in public, each a better match than
// pg_catalog's for some operand pair: (left, right).
var plantedOperators = [][2]string{
	{"regclass", "regclass"}, {"oid", "regclass"}, {"regclass", "oid"},
	{"uuid", "text"}, {"text", "uuid"}, {"regrole", "regrole"}, {"oid", "regrole"},
	{"community_deletion.community_deletion_stage", "text"}, {"text", "community_deletion.community_deletion_stage"},
	{"community_deletion.community_deletion_stage", "community_deletion.community_deletion_stage"},
	// The same operand types as pg_catalog's, for a session that puts
	// pg_catalog last.
	{"uuid", "uuid"}, {"text", "text"}, {"bigint", "bigint"},
}

// attackPlanted plants functions and operators in public and then runs the
// whole lifecycle as every role: the operator's inventory and two-person
// approval, the executor's every step (each guard trigger on the control
// tables fires), the serving login's lease and fenced writes, a table
// owner's attach, the drift report and the DDL guard. None of the planted
// objects ever runs.
func attackPlanted(t *testing.T, w *hostileWorld) walkHooks {
	ctx := t.Context()
	planted := append([]string{}, plantedSQL...)
	for i, op := range plantedOperators {
		for _, sym := range []string{"=", "<>"} {
			fn := fmt.Sprintf("public.hostile_op_%d_%d", i, len(sym))
			planted = append(planted,
				fmt.Sprintf("CREATE FUNCTION %s(%s, %s) RETURNS boolean LANGUAGE sql AS $$ SELECT public.hostile_mark('%s(%s,%s)') $$",
					fn, op[0], op[1], sym, op[0], op[1]),
				fmt.Sprintf("CREATE OPERATOR public.%s (LEFTARG = %s, RIGHTARG = %s, FUNCTION = %s)", sym, op[0], op[1], fn))
		}
	}
	require.NoError(t, w.asOwner(t, planted...))
	// Clients connected after the planting, as a restarted service's are.
	w.clients = fixture.NewClients(t, w.b.url)
	requireNothingRan := func(t *testing.T) {
		t.Helper()
		var ran []string
		rows, err := w.inspect.Query(ctx, "SELECT what || ' as ' || who FROM public.hostile_marker")
		require.NoError(t, err)
		ran, err = pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		require.Empty(t, ran)
		var called bool
		require.NoError(t, w.inspect.QueryRow(ctx, "SELECT is_called FROM public.hostile_ran").Scan(&called))
		require.False(t, called, "a planted object ran (and was rolled back)")
		var share bool
		require.NoError(t, w.inspect.QueryRow(ctx, "SELECT community_deletion.community_deletion_operators_share_role()").Scan(&share))
		require.False(t, share)
	}
	// The serving login's own session puts pg_catalog last, behind public
	// and temporary tables of its own named like what the fence reads, for
	// the fence's hot path, which runs with the caller's search_path.
	own := roleSession(t, w.b, fixture.RoleServing)
	for _, sql := range []string{
		"CREATE TEMP TABLE communities (id uuid, host text, deletion_state text, deletion_fence_generation bigint)",
		// Named like the fence's transition tables, holding an active community.
		"CREATE TEMP TABLE community_fence_new AS SELECT '" + w.bystander.String() + "'::uuid AS community_id",
		"CREATE TEMP TABLE community_fence_old AS SELECT '" + w.bystander.String() + "'::uuid AS community_id",
		"SET search_path = public, pg_temp, community_deletion, pg_catalog",
	} {
		_, err := own.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	_, err := own.Exec(ctx, "INSERT INTO pg_temp.communities VALUES ($1, 'x', 'active', 0)", w.doomed)
	require.NoError(t, err)
	spare := uuid.New()
	require.NoError(t, w.b.exec(t, "INSERT INTO community_deletion.communities (id, host, signing_key, icon) VALUES ($1, $2, 'key', 'icon.png')",
		spare, "c-"+spare.String()+".example"))
	return walkHooks{
		approved: func(t *testing.T) {
			require.Empty(t, drift(t, w.b), "objects in public are not the deletion's to report")
			// The operator inventories a second community and may not
			// approve her own request; the approver may.
			op := w.clients.Operator
			request, err := op.Submit(ctx, "c-"+spare.String()+".example", "requester", "hostile suite")
			require.NoError(t, err)
			schema, err := op.InventorySchema(ctx, spare)
			require.NoError(t, err)
			_, err = op.FreezeInventory(ctx, request.ID, lifecycle.FrozenInventory{Schema: *schema, Storage: testfactory.EmptyStorage(spare)})
			require.NoError(t, err)
			_, err = op.Approve(ctx, request.ID, "requester", "my own")
			require.Error(t, err, "the two-person rule holds")
			_, err = w.clients.Approver.Approve(ctx, request.ID, "approver", "reviewed")
			require.NoError(t, err)
			_, err = op.Abort(ctx, request.ID, "operator", "only a probe")
			require.NoError(t, err)

			// The table owner attaches a new table of its own; the serving
			// login writes it and the bystander, and holds a lease.
			require.NoError(t, w.asOwner(t,
				"CREATE TABLE public.hostile_notes (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, community_id uuid NOT NULL, body text NOT NULL)",
				"SELECT community_deletion.attach_community_write_fence('public.hostile_notes')",
				"GRANT INSERT ON public.hostile_notes TO community_deletion_serving"))
			serving := w.b.as(fixture.RoleServing)
			_, err = serving.Exec(ctx, "INSERT INTO public.hostile_notes (community_id, body) VALUES ($1, 'doomed'), ($2, 'bystander')", w.doomed, w.bystander)
			require.NoError(t, err)
			_, err = own.Exec(ctx, "INSERT INTO public.hostile_notes (community_id, body) VALUES ($1, 'own session')", w.bystander)
			require.NoError(t, err)
			// The Serving client's guards run in the service's own
			// transaction, under its search_path.
			ownLease, err := w.clients.Serving.AcquireWriteLease(ctx, w.bystander, "upload", "server-2", time.Minute)
			require.NoError(t, err)
			require.NoError(t, pgx.BeginFunc(ctx, own, func(tx pgx.Tx) error {
				if err := w.clients.Serving.GuardTransaction(ctx, tx, w.bystander); err != nil {
					return err
				}
				if err := w.clients.Serving.GuardTransactionWithLease(ctx, tx, ownLease); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, "INSERT INTO public.hostile_notes (community_id, body) VALUES ($1, 'guarded')", w.bystander)
				return err
			}))
			_, err = w.clients.Serving.ReleaseWriteLease(ctx, ownLease)
			require.NoError(t, err)
			lease, err := w.clients.Serving.AcquireWriteLease(ctx, w.bystander, "upload", "server-1", time.Minute)
			require.NoError(t, err)
			require.NoError(t, w.clients.Serving.RenewWriteLease(ctx, lease, time.Minute))
			require.NoError(t, w.clients.Serving.VerifyWriteLease(ctx, lease))
			released, err := w.clients.Serving.ReleaseWriteLease(ctx, lease)
			require.NoError(t, err)
			require.True(t, released)
			if w.guard {
				// The guard still refuses what it refuses, and ran nothing planted.
				requireSQLState(t, w.asOwner(t, "ALTER TABLE public.fixture_messages DISABLE TRIGGER community_write_fence_insert"),
					pgerrcode.InsufficientPrivilege, "")
				require.NoError(t, w.asOwner(t, "CREATE INDEX hostile_notes_body_idx ON public.hostile_notes (body)"))
			}
			require.Empty(t, drift(t, w.b))
			requireNothingRan(t)
		},
		fenced: func(t *testing.T, _ *lifecycle.LeaseToken) {
			serving := w.b.as(fixture.RoleServing)
			for _, sql := range []string{
				"INSERT INTO public.fixture_members (community_id, handle) VALUES ($1, 'late')",
				"INSERT INTO public.hostile_notes (community_id, body) VALUES ($1, 'late')",
				"UPDATE public.fixture_members SET handle = 'renamed' WHERE community_id OPERATOR(pg_catalog.=) $1",
			} {
				for _, session := range []fixture.Execer{serving, own} {
					_, err := session.Exec(ctx, sql, w.doomed)
					requireSQLState(t, err, sqlstateFenced, "")
				}
			}
			_, err := w.clients.Serving.AcquireWriteLease(ctx, w.doomed, "upload", "server-1", time.Minute)
			require.Error(t, err)
			requireNothingRan(t)
		},
		done: func(t *testing.T) {
			var notes int
			require.NoError(t, w.inspect.QueryRow(ctx, "SELECT count(*) FROM public.hostile_notes WHERE community_id = $1", w.doomed).Scan(&notes))
			require.Zero(t, notes, "the owner's attached table was purged")
			requireNothingRan(t)
		},
	}
}

// namespaceSnapshot is what schema community_deletion holds: its functions,
// operators, relations and ACL.
func (w *hostileWorld) namespaceSnapshot(t *testing.T) string {
	t.Helper()
	var s string
	require.NoError(t, w.inspect.QueryRow(t.Context(), `SELECT concat_ws(E'\n',
		(SELECT string_agg(oid::regprocedure::text, ',' ORDER BY oid::regprocedure::text) FROM pg_proc
		 WHERE pronamespace = 'community_deletion'::regnamespace),
		(SELECT string_agg(oid::regoperator::text, ',' ORDER BY oid::regoperator::text) FROM pg_operator
		 WHERE oprnamespace = 'community_deletion'::regnamespace),
		(SELECT string_agg(relname, ',' ORDER BY relname) FROM pg_class WHERE relnamespace = 'community_deletion'::regnamespace),
		(SELECT nspowner::regrole::text || ' ' || nspacl::text FROM pg_namespace WHERE nspname = 'community_deletion'))`).Scan(&s))
	return s
}

// attackCreateInSchema: no role but the schema's owner may create in
// community_deletion: the table owner, the operator, the serving login and
// the executor are each refused (42501), and the schema stays as it was.
func attackCreateInSchema(t *testing.T, w *hostileWorld) walkHooks {
	ctx := t.Context()
	require.NoError(t, w.asOwner(t, "CREATE FUNCTION public.hostile_probe() RETURNS int LANGUAGE sql AS 'SELECT 1'"))
	before := w.namespaceSnapshot(t)
	attempts := []string{
		"CREATE FUNCTION community_deletion.format(text, uuid) RETURNS text LANGUAGE sql AS 'SELECT $1'",
		"CREATE FUNCTION community_deletion.community_deletion_is_member(text) RETURNS boolean LANGUAGE sql AS 'SELECT true'",
		"CREATE OPERATOR community_deletion.= (LEFTARG = name, RIGHTARG = text, FUNCTION = pg_catalog.nameeqtext)",
		"CREATE TABLE community_deletion.hostile (id int)",
		"CREATE VIEW community_deletion.hostile_view AS SELECT 1 AS one",
	}
	sessions := map[string]fixture.Execer{"the table owner": w.ownerConn}
	for _, role := range []fixture.Role{fixture.RoleOperator, fixture.RoleServing, fixture.RoleExecutor} {
		sessions[string(role)] = w.b.as(role)
	}
	for who, session := range sessions {
		for _, sql := range attempts {
			_, err := session.Exec(ctx, sql)
			require.Error(t, err, "%s: %s", who, sql)
			requireSQLState(t, err, pgerrcode.InsufficientPrivilege, "permission denied for schema community_deletion")
		}
	}
	_, err := w.ownerConn.Exec(ctx, "ALTER FUNCTION public.hostile_probe() SET SCHEMA community_deletion")
	requireSQLState(t, err, pgerrcode.InsufficientPrivilege, "permission denied for schema community_deletion")
	require.Equal(t, before, w.namespaceSnapshot(t))
	require.Empty(t, drift(t, w.b))
	return walkHooks{}
}

// schemaOwnerLoginName owns schema community_deletion and the lease table in
// attackSchemaOwner, as a deployment's migrating role does; it is no
// superuser and acts outside a migration run.
const schemaOwnerLoginName = "cd_test_hostile_schema_owner"

// attackSchemaOwner: the owner of community_deletion, outside a migration
// run, plants a function there, grants CREATE on it, adds a trigger to a
// control table, drops its index and its lease bound. With the guard each
// is refused (42501) and nothing changes; without it each leaves a drift
// row that blocks the claim, until put back.
func prepareSchemaOwner(t *testing.T, w *hostileWorld) {
	// The migrating role owns the version table too.
	handSchemaTo(t, w.b, schemaOwnerLoginName, schemaOwnerLoginName+"-password",
		"ALTER TABLE public.community_deletion_schema_migrations OWNER TO "+schemaOwnerLoginName)
}

func attackSchemaOwner(t *testing.T, w *hostileWorld) walkHooks {
	ctx := t.Context()
	owner := connectAs(t, w.b, schemaOwnerLoginName, schemaOwnerLoginName+"-password")
	_, err := owner.Exec(ctx, `CREATE FUNCTION public.hostile_lease_forever() RETURNS trigger LANGUAGE plpgsql
		AS $$ BEGIN NEW.lease_until := 'infinity'; RETURN NEW; END $$`)
	require.NoError(t, err, "DDL outside community_deletion passes")
	steps := []struct {
		attack, restore []string
		table, problem  string
	}{
		{[]string{"CREATE FUNCTION community_deletion.format(text, uuid) RETURNS text LANGUAGE sql AS 'SELECT $1'"},
			[]string{"DROP FUNCTION community_deletion.format(text, uuid)"}, "format(text,uuid)", "function_planted"},
		{[]string{"GRANT CREATE ON SCHEMA community_deletion TO " + string(fixture.RoleServing)},
			[]string{"REVOKE CREATE ON SCHEMA community_deletion FROM " + string(fixture.RoleServing)}, "schema community_deletion", "schema_create_granted"},
		{[]string{`CREATE TRIGGER zz_lease_forever BEFORE INSERT OR UPDATE ON community_deletion.community_serving_write_leases
				FOR EACH ROW EXECUTE FUNCTION public.hostile_lease_forever()`},
			[]string{"DROP TRIGGER zz_lease_forever ON community_deletion.community_serving_write_leases"},
			"community_serving_write_leases.zz_lease_forever", "trigger_planted"},
		{[]string{"DROP INDEX community_deletion.community_serving_write_leases_lease_until_idx"},
			[]string{"CREATE INDEX community_serving_write_leases_lease_until_idx ON community_deletion.community_serving_write_leases (lease_until)"},
			"community_serving_write_leases", "control_table_changed"},
		{[]string{"ALTER TABLE community_deletion.community_serving_write_leases DROP CONSTRAINT community_serving_write_leases_lease_bound_check"},
			[]string{`ALTER TABLE community_deletion.community_serving_write_leases ADD CONSTRAINT community_serving_write_leases_lease_bound_check
				CHECK (lease_until <= heartbeat_at + interval '1 hour')`},
			"community_serving_write_leases", "control_table_changed"},
	}
	return walkHooks{approved: func(t *testing.T) {
		for _, step := range steps {
			before := w.namespaceSnapshot(t) + controlSnapshot(t, w.b, "community_deletion.community_serving_write_leases")
			for _, sql := range step.attack {
				_, err := owner.Exec(ctx, sql)
				if w.guard {
					requireSQLState(t, err, pgerrcode.InsufficientPrivilege, "")
					continue
				}
				require.NoError(t, err, sql)
			}
			if w.guard {
				require.Equal(t, before, w.namespaceSnapshot(t)+controlSnapshot(t, w.b, "community_deletion.community_serving_write_leases"))
				require.Empty(t, drift(t, w.b))
				continue
			}
			w.requireClaimBlocked(t, step.table, step.problem)
			for _, sql := range step.restore {
				_, err := owner.Exec(ctx, sql)
				require.NoError(t, err, sql)
			}
			w.unblock(t)
		}
	}}
}

// attackGuardExemption: the table owner takes the schema-destruction lock,
// as a migration run does, and asks to open a run, and the operator and the
// serving login ask too, then the owner disables a fence. With the guard the
// lock exempts nothing and only the schema's owner opens a run (42501 each),
// and the fence stays; without it the disabled fence is drift that blocks
// the claim until it is enabled again.
func attackGuardExemption(_ *testing.T, w *hostileWorld) walkHooks {
	return walkHooks{approved: func(t *testing.T) {
		ctx := t.Context()
		before := triggerSnapshot(t, w.b, "public.fixture_messages")
		require.NoError(t, w.asOwner(t, fmt.Sprintf("SELECT pg_advisory_lock(%d)", int64(schemaDestructionLockKey))))
		if w.guard {
			sessions := []fixture.Execer{w.ownerConn, w.b.as(fixture.RoleOperator), w.b.as(fixture.RoleServing)}
			for _, session := range sessions {
				_, err := session.Exec(ctx, "SELECT community_deletion.community_deletion_ddl_guard_open_run()")
				requireSQLState(t, err, pgerrcode.InsufficientPrivilege, "migration run refused")
				_, err = session.Exec(ctx, `INSERT INTO community_deletion.community_deletion_ddl_guard_runs (pid, backend_start, login, application_name)
					SELECT pg_backend_pid(), backend_start, session_user, '' FROM pg_stat_activity WHERE pid = pg_backend_pid()`)
				requireSQLState(t, err, pgerrcode.InsufficientPrivilege, "")
			}
		}
		err := w.asOwner(t, "ALTER TABLE public.fixture_messages DISABLE TRIGGER community_write_fence_insert")
		// Held, the lock would only make the claim wait.
		require.NoError(t, w.asOwner(t, fmt.Sprintf("SELECT pg_advisory_unlock(%d)", int64(schemaDestructionLockKey))))
		if w.guard {
			requireSQLState(t, err, pgerrcode.InsufficientPrivilege, "DDL refused")
			require.Equal(t, before, triggerSnapshot(t, w.b, "public.fixture_messages"))
			return
		}
		require.NoError(t, err)
		w.requireClaimBlocked(t, "fixture_messages", "unfenced")
		require.NoError(t, w.asOwner(t, "ALTER TABLE public.fixture_messages ENABLE TRIGGER community_write_fence_insert"))
		require.Equal(t, before, triggerSnapshot(t, w.b, "public.fixture_messages"))
		w.unblock(t)
	}}
}

// attackFenceWhen: the table owner re-creates a fence trigger with a WHEN
// clause that exempts one application_name. The guard refuses it (42501);
// without it the drift report blocks the claim until the owner re-attaches.
func attackFenceWhen(_ *testing.T, w *hostileWorld) walkHooks {
	return walkHooks{approved: func(t *testing.T) {
		before := triggerSnapshot(t, w.b, "public.fixture_messages")
		backdoor := `CREATE OR REPLACE TRIGGER community_write_fence_insert AFTER INSERT ON public.fixture_messages
			REFERENCING NEW TABLE AS community_fence_new FOR EACH STATEMENT
			WHEN (current_setting('application_name') <> 'backdoor') EXECUTE FUNCTION community_deletion.enforce_community_write_fence()`
		err := w.asOwner(t, backdoor)
		if w.guard {
			requireSQLState(t, err, pgerrcode.InsufficientPrivilege, "")
			require.Equal(t, before, triggerSnapshot(t, w.b, "public.fixture_messages"))
			return
		}
		require.NoError(t, err)
		w.requireClaimBlocked(t, "fixture_messages", "has a WHEN clause")
		require.NoError(t, w.asOwner(t, "DROP TRIGGER community_write_fence_insert ON public.fixture_messages",
			"SELECT community_deletion.attach_community_write_fence('public.fixture_messages')"))
		require.Equal(t, before, triggerSnapshot(t, w.b, "public.fixture_messages"))
		w.unblock(t)
	}}
}

// attackPartition: with the doomed community fenced, the table owner
// detaches the partition, drops its insert fence, lets the service write a
// row of the doomed community into it and re-attaches it. The guard refuses the drop
// (42501) and the fence refuses the write (55000), and disables the clone of
// the row fence the re-attached partition gets, as attach would; without
// the guard the detached partition shows as drift while it is out, comes
// back fenced twice (the clone enabled) until attach runs again, and the
// row written is purged with the community.
func attackPartition(_ *testing.T, w *hostileWorld) walkHooks {
	return walkHooks{fenced: func(t *testing.T, _ *lifecycle.LeaseToken) {
		before := w.rowsOf(t, w.doomed)
		fence := triggerSnapshot(t, w.b, "public.fixture_activity_default")
		require.NoError(t, w.asOwner(t, "ALTER TABLE public.fixture_activity DETACH PARTITION public.fixture_activity_default"))
		err := w.asOwner(t, "DROP TRIGGER community_write_fence_insert ON public.fixture_activity_default")
		if w.guard {
			requireSQLState(t, err, pgerrcode.InsufficientPrivilege, "")
		} else {
			require.NoError(t, err)
			report := drift(t, w.b)
			require.NotEmpty(t, report, "the detached, unfenced partition is drift")
		}
		// The service writes the detached partition directly, which its
		// owner lets it.
		require.NoError(t, w.asOwner(t, "GRANT INSERT ON public.fixture_activity_default TO community_deletion_serving"))
		_, err = w.b.as(fixture.RoleServing).Exec(t.Context(),
			"INSERT INTO public.fixture_activity_default (community_id, id, kind) VALUES ($1, 1000000, 'smuggled')", w.doomed)
		if w.guard {
			requireSQLState(t, err, sqlstateFenced, "")
		} else {
			require.NoError(t, err)
			require.NoError(t, w.asOwner(t, `CREATE TRIGGER community_write_fence_insert AFTER INSERT ON public.fixture_activity_default
				REFERENCING NEW TABLE AS community_fence_new FOR EACH STATEMENT EXECUTE FUNCTION community_deletion.enforce_community_write_fence()`))
		}
		require.NoError(t, w.asOwner(t, "ALTER TABLE public.fixture_activity ATTACH PARTITION public.fixture_activity_default DEFAULT"))
		if !w.guard {
			// PostgreSQL clones the partitioned table's row fence onto the
			// partition it attaches, enabled, and nothing disables it: the
			// partition is fenced twice (its statement fences and the
			// clone), which is whole and no drift. Attach again leaves it
			// as attach does, the clone disabled. A table attached before
			// migration 00026 (the upgraded world) has no row fence to clone.
			twice := strings.Replace(fence, "community_write_fence_row 29 D ", "community_write_fence_row 29 O ", 1)
			require.Equal(t, strings.Contains(fence, "community_write_fence_row "), twice != fence,
				"a row fence's clone was disabled on the partition before")
			require.Equal(t, twice, triggerSnapshot(t, w.b, "public.fixture_activity_default"))
			require.Empty(t, drift(t, w.b))
			if twice != fence {
				require.NoError(t, w.asOwner(t, "SELECT community_deletion.attach_community_write_fence('public.fixture_activity')"))
			}
		}
		require.Equal(t, fence, triggerSnapshot(t, w.b, "public.fixture_activity_default"))
		require.Empty(t, drift(t, w.b))
		if w.guard {
			require.Equal(t, before, w.rowsOf(t, w.doomed), "nothing was written")
		}
	}}
}

// attackRewrite: the table owner moves rows between the doomed community
// and the bystander with ALTER COLUMN ... TYPE ... USING, which fires no
// trigger. On a table with a foreign key to communities PostgreSQL itself
// refuses (42501: rebuilding the key needs REFERENCES on communities, which
// a service lacks). On one without, the guard refuses it (42501) and the
// rows stay; without the guard nothing sees such a rewrite (see the
// README's DDL guard section). A rewrite that moves nothing passes.
func attackRewrite(t *testing.T, w *hostileWorld) walkHooks {
	ctx := t.Context()
	notes := func(t *testing.T) string {
		var s string
		require.NoError(t, w.inspect.QueryRow(ctx,
			"SELECT string_agg(id || ' ' || community_id || ' ' || body, ',' ORDER BY id) FROM public.hostile_notes").Scan(&s))
		return s
	}
	moves := func(table string) []string {
		return []string{
			fmt.Sprintf("ALTER TABLE %s ALTER COLUMN community_id TYPE uuid USING (CASE WHEN community_id = '%s' THEN '%s'::uuid ELSE community_id END)",
				table, w.doomed, w.bystander),
			fmt.Sprintf("ALTER TABLE %s ALTER COLUMN community_id TYPE uuid USING (CASE WHEN community_id = '%s' THEN '%s'::uuid ELSE community_id END)",
				table, w.bystander, w.doomed),
		}
	}
	return walkHooks{
		approved: func(t *testing.T) {
			require.NoError(t, w.asOwner(t,
				"CREATE TABLE public.hostile_notes (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, community_id uuid NOT NULL, body text NOT NULL)",
				"SELECT community_deletion.attach_community_write_fence('public.hostile_notes')"))
			require.NoError(t, w.asOwner(t, "GRANT INSERT ON public.hostile_notes TO community_deletion_serving"))
			_, err := w.b.as(fixture.RoleServing).Exec(ctx, "INSERT INTO public.hostile_notes (community_id, body) VALUES ($1, 'doomed'), ($2, 'bystander')",
				w.doomed, w.bystander)
			require.NoError(t, err)
		},
		fenced: func(t *testing.T, _ *lifecycle.LeaseToken) {
			doomed, bystander := w.rowsOf(t, w.doomed), w.rowsOf(t, w.bystander)
			for _, sql := range moves("public.fixture_messages") {
				requireSQLState(t, w.asOwner(t, sql), pgerrcode.InsufficientPrivilege, "")
				require.Equal(t, doomed, w.rowsOf(t, w.doomed))
				require.Equal(t, bystander, w.rowsOf(t, w.bystander))
			}
			if w.guard {
				before := notes(t)
				for _, sql := range moves("public.hostile_notes") {
					requireSQLState(t, w.asOwner(t, sql), pgerrcode.InsufficientPrivilege, "")
					require.Equal(t, before, notes(t))
				}
			}
			require.NoError(t, w.asOwner(t, "ALTER TABLE public.fixture_messages ALTER COLUMN body TYPE varchar USING body"),
				"a rewrite that moves nothing")
			require.Empty(t, drift(t, w.b))
		},
		done: func(t *testing.T) {
			require.Equal(t, fmt.Sprintf("2 %s bystander", w.bystander), notes(t), "the doomed note was purged, the bystander's kept")
		},
	}
}

// attackTruncate: the table owner truncates a registered table (and its
// partition) while the doomed community is quiescing and again while it is
// fenced: refused (55000) by the TRUNCATE fence attach installed, with the
// guard or without it. Disabling that fence is refused by the guard
// (42501) and is drift without it. Once no deletion is under way, TRUNCATE
// works.
func attackTruncate(_ *testing.T, w *hostileWorld) walkHooks {
	refused := func(t *testing.T) {
		before, bystander := w.rowsOf(t, w.doomed), w.rowsOf(t, w.bystander)
		for _, sql := range []string{"TRUNCATE public.fixture_activity", "TRUNCATE public.fixture_activity_default"} {
			requireSQLState(t, w.asOwner(t, sql), sqlstateFenced, "TRUNCATE of public.fixture_activity")
		}
		require.Equal(t, before, w.rowsOf(t, w.doomed))
		require.Equal(t, bystander, w.rowsOf(t, w.bystander))
	}
	return walkHooks{
		approved: func(t *testing.T) {
			before := triggerSnapshot(t, w.b, "public.fixture_activity")
			err := w.asOwner(t, "ALTER TABLE public.fixture_activity DISABLE TRIGGER community_write_fence_truncate")
			if w.guard {
				requireSQLState(t, err, pgerrcode.InsufficientPrivilege, "")
				require.Equal(t, before, triggerSnapshot(t, w.b, "public.fixture_activity"))
				return
			}
			require.NoError(t, err)
			w.requireClaimBlocked(t, "fixture_activity", "no TRUNCATE fence")
			require.NoError(t, w.asOwner(t, "ALTER TABLE public.fixture_activity ENABLE TRIGGER community_write_fence_truncate"))
			w.unblock(t)
		},
		quiescing: refused,
		fenced:    func(t *testing.T, _ *lifecycle.LeaseToken) { refused(t) },
		done: func(t *testing.T) {
			require.NoError(t, w.asOwner(t, "TRUNCATE public.fixture_activity"), "no deletion is under way")
		},
	}
}

// attackRowSecurity: the table owner turns on row-level security with a
// policy of the service's own tenancy, which would hide the doomed
// community's rows from the deletion. The guard refuses it (42501); without
// it the drift report names the table and blocks the claim until the owner
// turns it off.
func attackRowSecurity(_ *testing.T, w *hostileWorld) walkHooks {
	return walkHooks{approved: func(t *testing.T) {
		err := w.asOwner(t,
			"CREATE POLICY service_tenancy ON public.fixture_messages USING (community_id::text = current_setting('app.community', true))",
			"ALTER TABLE public.fixture_messages ENABLE ROW LEVEL SECURITY")
		var secured bool
		if w.guard {
			requireSQLState(t, err, pgerrcode.InsufficientPrivilege, "")
			require.NoError(t, w.inspect.QueryRow(t.Context(),
				"SELECT relrowsecurity FROM pg_class WHERE oid = 'public.fixture_messages'::regclass").Scan(&secured))
			require.False(t, secured)
			require.NoError(t, w.asOwner(t, "DROP POLICY IF EXISTS service_tenancy ON public.fixture_messages"))
			return
		}
		require.NoError(t, err)
		w.requireClaimBlocked(t, "fixture_messages", "row_security")
		require.NoError(t, w.asOwner(t, "ALTER TABLE public.fixture_messages DISABLE ROW LEVEL SECURITY",
			"DROP POLICY service_tenancy ON public.fixture_messages"))
		w.unblock(t)
	}}
}

// attackExecutorColumns: with the fenced request blocked, an operator
// unblocking it also rewrites what only the executor records (the
// destructive storage manifest, the retry record, the schedule): refused
// (42501), the request as it was. The operator's own Unblock works, and the
// executor claims again.
func attackExecutorColumns(_ *testing.T, w *hostileWorld) walkHooks {
	return walkHooks{fenced: func(t *testing.T, token *lifecycle.LeaseToken) {
		ctx := t.Context()
		engine := w.clients.Engine
		require.NoError(t, engine.FreezeDestructiveManifest(ctx, *token, testfactory.EmptyStorage(w.doomed)))
		require.NoError(t, engine.Block(ctx, *token, lifecycle.BlockParams{Stage: lifecycle.StageFenced, Unit: "hostile:probe", Err: "blocked for the suite"}))
		row := func() string {
			var s string
			require.NoError(t, w.inspect.QueryRow(ctx, `SELECT concat_ws(' ', stage, blocked_at IS NOT NULL, destructive_storage_manifest::text,
				retry_count, last_error, next_attempt_at) FROM community_deletion.community_deletion_requests WHERE id = $1`, w.request).Scan(&s))
			return s
		}
		before := row()
		// The operator's unblock (DeletionRequestUnblock) with one of the
		// executor's columns changed besides.
		operator := w.b.as(fixture.RoleOperator)
		for _, set := range []string{
			`retry_count = 0, last_error = NULL, next_attempt_at = now(), destructive_storage_manifest = '{"version": 4, "prefixes": []}'`,
			`retry_count = 0, last_error = NULL, next_attempt_at = now() + interval '1 day'`,
			`retry_count = 7, last_error = NULL, next_attempt_at = now()`,
			`retry_count = 0, last_error = 'forged', next_attempt_at = now()`,
		} {
			_, err := operator.Exec(ctx, `UPDATE community_deletion.community_deletion_requests SET blocked_at = NULL, blocked_reason = NULL,
				retry_stage = NULL, last_error_at = NULL, lease_owner = NULL, lease_until = NULL, `+set+` WHERE id = $1`, w.request)
			requireSQLState(t, err, pgerrcode.InsufficientPrivilege, "")
			require.Equal(t, before, row(), set)
		}
		_, err := w.clients.Operator.Unblock(ctx, w.request, "operator", "probe done")
		require.NoError(t, err)
		claim, err := engine.ClaimRequest(ctx, w.request, "executor", lifecycle.DefaultLeaseDuration)
		require.NoError(t, err)
		*token = claim.Lease
	}}
}

// attackLeaseExtension: the serving login holds a lease of the doomed
// community while it is active, and may extend it; once the community is
// quiescing, extending it (through the client or in SQL) is refused (55000)
// and the lease is as it was; releasing it works, and the fence proceeds.
func attackLeaseExtension(t *testing.T, w *hostileWorld) walkHooks {
	var lease *lifecycle.ServingWriteLease
	ctx := t.Context()
	serving := w.clients.Serving
	return walkHooks{
		approved: func(t *testing.T) {
			var err error
			lease, err = serving.AcquireWriteLease(ctx, w.doomed, "upload", "server-1", 30*time.Second)
			require.NoError(t, err)
			require.NoError(t, serving.RenewWriteLease(ctx, lease, time.Minute), "extended while active")
		},
		quiescing: func(t *testing.T) {
			until := func() time.Time {
				var u time.Time
				require.NoError(t, w.inspect.QueryRow(ctx, "SELECT lease_until FROM community_deletion.community_serving_write_leases WHERE id = $1",
					lease.ID).Scan(&u))
				return u
			}
			before := until()
			err := serving.RenewWriteLease(ctx, lease, 10*time.Minute)
			require.ErrorContains(t, err, "stale serving write lease", "the client refuses before it writes")
			_, err = w.b.as(fixture.RoleServing).Exec(ctx, `UPDATE community_deletion.community_serving_write_leases
				SET lease_until = lease_until + interval '10 minutes' WHERE id = $1`, lease.ID)
			requireSQLState(t, err, sqlstateFenced, "extended only while its community is active")
			require.Equal(t, before, until())
			released, err := serving.ReleaseWriteLease(ctx, lease)
			require.NoError(t, err)
			require.True(t, released)
		},
	}
}
