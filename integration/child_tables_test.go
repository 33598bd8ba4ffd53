package integration

import (
	"fmt"
	"testing"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/fixture"
)

// prismaSchema is a service in Prisma's shape, keyed by text ids (cuids),
// with quoted mixed-case names: "Workspace" is the tenant table; "Project"
// (a nullable "workspaceId": a project of no workspace) and "Tag" carry the
// tenant key; "Task" reaches it only through "Project", by a composite
// primary key, and "Comment" through "Task", by a composite foreign key;
// "_ProjectToTag" is Prisma's many-to-many join table ("A", "B") through
// both parents; "ExternalRef" maps projects to another system's ids with
// no constraint at all.
var prismaSchema = []string{
	`CREATE TABLE svc."Workspace" (id text PRIMARY KEY, name text NOT NULL)`,
	`CREATE TABLE svc."Project" (id text PRIMARY KEY, "workspaceId" text REFERENCES svc."Workspace" (id), title text NOT NULL)`,
	`CREATE TABLE svc."Tag" (id text PRIMARY KEY, "workspaceId" text NOT NULL REFERENCES svc."Workspace" (id), label text NOT NULL)`,
	`CREATE TABLE svc."Task" ("projectId" text NOT NULL REFERENCES svc."Project" (id) ON DELETE CASCADE, no integer NOT NULL,
		title text NOT NULL, PRIMARY KEY ("projectId", no))`,
	`CREATE TABLE svc."Comment" (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, "taskProjectId" text, "taskNo" integer, body text NOT NULL,
		FOREIGN KEY ("taskProjectId", "taskNo") REFERENCES svc."Task" ("projectId", no) ON DELETE CASCADE)`,
	`CREATE TABLE svc."_ProjectToTag" ("A" text NOT NULL REFERENCES svc."Project" (id) ON DELETE CASCADE,
		"B" text NOT NULL REFERENCES svc."Tag" (id) ON DELETE CASCADE, PRIMARY KEY ("A", "B"))`,
	`CREATE INDEX ON svc."_ProjectToTag" ("B")`,
	`CREATE TABLE svc."ExternalRef" ("projectRef" text NOT NULL, "externalId" text NOT NULL)`,
	"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA svc TO community_deletion_serving",
}

// prismaWorld is a prismaSchema deployment: declared, its keyed tables
// attached, with the workspaces (by state) and one project and tag each.
type prismaWorld struct {
	b       *testBundle
	owner   serviceOwner
	serving *pgx.Conn
}

func newPrismaWorld(t *testing.T) *prismaWorld {
	t.Helper()
	b := setupBare(t)
	owner := newServiceOwner(t, b)
	owner.run(t, prismaSchema...)
	owner.run(t,
		`SELECT community_deletion.declare_tenant_table('svc."Workspace"')`,
		`SELECT community_deletion.attach_community_write_fence('svc."Project"', 'delete', 'workspaceId')`,
		`SELECT community_deletion.attach_community_write_fence('svc."Tag"', 'delete', 'workspaceId')`,
	)
	return &prismaWorld{b: b, owner: owner, serving: roleSession(t, b, fixture.RoleServing)}
}

// workspace creates workspace w with project "p-<w>" and tag "t-<w>", as the
// serving login, while it is active.
func (w *prismaWorld) workspace(t *testing.T, id string) {
	t.Helper()
	for _, sql := range []string{
		`INSERT INTO svc."Workspace" (id, name) VALUES ($1, $1)`,
		`INSERT INTO svc."Project" (id, "workspaceId", title) VALUES ('p-' || $1, $1, 'project')`,
		`INSERT INTO svc."Tag" (id, "workspaceId", label) VALUES ('t-' || $1, $1, 'tag')`,
	} {
		_, err := w.serving.Exec(t.Context(), sql, id)
		require.NoError(t, err, sql)
	}
}

func (w *prismaWorld) write(t *testing.T, sql string, args ...any) error {
	t.Helper()
	_, err := w.serving.Exec(t.Context(), sql, args...)
	return err
}

// Tables without a tenant column, attached through their parents: drift
// names each table that references a registered table (by a foreign key,
// or by a declared reference on a table with no constraint) with the call
// that attaches it, until it is attached; that call attaches it; the fence
// refuses a write whose parent row belongs to a fenced tenant through each
// path (a two-level chain with a composite key, both parents of a join
// table, a declared reference), and lets through a row whose parents reach
// no tenant.
func TestChildTablesAttachedThroughTheirParents(t *testing.T) {
	t.Parallel()
	w := newPrismaWorld(t)
	b, ctx := w.b, t.Context()

	// Drift follows the foreign keys down from the registered tables.
	require.Equal(t, []driftRow{
		{`svc."Comment"`, `unregistered: it references svc."Task"; attach it through its parents with ` +
			`community_deletion.attach_child_table('svc."Comment"'), or exclude it with community_deletion.exclude_table('svc."Comment"', reason)`},
		{`svc."Task"`, `unregistered: it references svc."Project"; attach it through its parents with ` +
			`community_deletion.attach_child_table('svc."Task"'), or exclude it with community_deletion.exclude_table('svc."Task"', reason)`},
		{`svc."_ProjectToTag"`, `unregistered: it references svc."Project", svc."Tag"; attach it through its parents with ` +
			`community_deletion.attach_child_table('svc."_ProjectToTag"'), or exclude it with community_deletion.exclude_table('svc."_ProjectToTag"', reason)`},
	}, rawDrift(t, b))
	// A child is attached after its parent, not before.
	err := w.owner.exec(t, `SELECT community_deletion.attach_child_table('svc."Comment"')`)
	requireSQLState(t, err, pgerrcode.InvalidParameterValue, "has no foreign key or declared reference to a registered 'delete' table")
	for _, table := range []string{`svc."Task"`, `svc."Comment"`, `svc."_ProjectToTag"`} {
		runDriftStep(t, b, w.owner, table)
	}
	require.Empty(t, rawDrift(t, b))

	// The mapping table has no constraint: nothing shows it is tenant data
	// until its owner declares the reference; then drift names it.
	err = w.owner.exec(t, `SELECT community_deletion.attach_child_table('svc."ExternalRef"')`)
	requireSQLState(t, err, pgerrcode.InvalidParameterValue, "")
	w.owner.run(t, `SELECT community_deletion.declare_reference('svc."ExternalRef"', '{projectRef}', 'svc."Project"',
		reason => 'maps projects to the CRM')`)
	require.Equal(t, []driftRow{{`svc."ExternalRef"`, `unregistered: it references svc."Project"; attach it through its parents with ` +
		`community_deletion.attach_child_table('svc."ExternalRef"'), or exclude it with community_deletion.exclude_table('svc."ExternalRef"', reason)`}},
		rawDrift(t, b))
	runDriftStep(t, b, w.owner, `svc."ExternalRef"`)
	require.Empty(t, rawDrift(t, b))

	// Rows of an active workspace, a doomed one (fenced below), a second
	// active one, and a project of no workspace.
	for _, id := range []string{"wa", "wf", "wb"} {
		w.workspace(t, id)
	}
	require.NoError(t, w.write(t, `INSERT INTO svc."Project" (id, "workspaceId", title) VALUES ('p-none', NULL, 'orphan')`))
	for _, p := range []string{"p-wa", "p-wf"} {
		require.NoError(t, w.write(t, `INSERT INTO svc."Task" ("projectId", no, title) VALUES ($1, 1, 'one'), ($1, 2, 'two')`, p))
		require.NoError(t, w.write(t, `INSERT INTO svc."Comment" ("taskProjectId", "taskNo", body) VALUES ($1, 1, 'c')`, p))
		require.NoError(t, w.write(t, `INSERT INTO svc."ExternalRef" ("projectRef", "externalId") VALUES ($1, 'crm-' || $1)`, p))
	}
	require.NoError(t, w.write(t, `INSERT INTO svc."_ProjectToTag" ("A", "B") VALUES ('p-wa', 't-wa'), ('p-wf', 't-wf'), ('p-wa', 't-wb')`))
	b.walkTenant(t, "wf", "fenced")

	for name, write := range map[string]struct{ sql, table string }{
		"a task of a fenced workspace's project":  {`INSERT INTO svc."Task" ("projectId", no, title) VALUES ('p-wf', 3, 'late')`, "Task"},
		"a comment on its task, two levels down":  {`INSERT INTO svc."Comment" ("taskProjectId", "taskNo", body) VALUES ('p-wf', 2, 'late')`, "Comment"},
		"a join row to its project":               {`INSERT INTO svc."_ProjectToTag" ("A", "B") VALUES ('p-wf', 't-wa')`, "_ProjectToTag"},
		"a join row to its tag":                   {`INSERT INTO svc."_ProjectToTag" ("A", "B") VALUES ('p-wa', 't-wf')`, "_ProjectToTag"},
		"a mapping row by the declared reference": {`INSERT INTO svc."ExternalRef" ("projectRef", "externalId") VALUES ('p-wf', 'late')`, "ExternalRef"},
		"an update of its task":                   {`UPDATE svc."Task" SET title = 'edited' WHERE "projectId" = 'p-wf'`, "Task"},
		"a delete of its comment":                 {`DELETE FROM svc."Comment" WHERE "taskProjectId" = 'p-wf'`, "Comment"},
		"a delete of its join row":                {`DELETE FROM svc."_ProjectToTag" WHERE "A" = 'p-wf'`, "_ProjectToTag"},
		"a move of a task into its project":       {`UPDATE svc."Task" SET "projectId" = 'p-wf', no = 9 WHERE "projectId" = 'p-wa' AND no = 2`, "Task"},
		"a move of a mapping row out of it":       {`UPDATE svc."ExternalRef" SET "projectRef" = 'p-wa' WHERE "projectRef" = 'p-wf'`, "ExternalRef"},
		"a cross-tenant statement":                {`INSERT INTO svc."Task" ("projectId", no, title) VALUES ('p-wa', 7, 'ok'), ('p-wf', 7, 'late')`, "Task"},
	} {
		t.Run(name, func(t *testing.T) {
			requireSQLState(t, w.write(t, write.sql), sqlstateFenced,
				fmt.Sprintf("community write to %q refused: community wf is fenced", write.table))
		})
	}

	// The same writes of active workspaces, across two of them, and rows
	// whose parents reach no tenant, pass.
	for _, sql := range []string{
		`INSERT INTO svc."Task" ("projectId", no, title) VALUES ('p-wa', 3, 'ok'), ('p-wb', 1, 'ok')`,
		`INSERT INTO svc."Comment" ("taskProjectId", "taskNo", body) VALUES ('p-wa', 3, 'ok'), ('p-wb', 1, 'ok'), (NULL, NULL, 'no task')`,
		`INSERT INTO svc."_ProjectToTag" ("A", "B") VALUES ('p-wb', 't-wa')`,
		`INSERT INTO svc."ExternalRef" ("projectRef", "externalId") VALUES ('p-wb', 'ok')`,
		`INSERT INTO svc."Task" ("projectId", no, title) VALUES ('p-none', 1, 'no workspace')`,
		`INSERT INTO svc."Comment" ("taskProjectId", "taskNo", body) VALUES ('p-none', 1, 'no workspace')`,
		`UPDATE svc."Task" SET title = 'edited' WHERE "projectId" IN ('p-wa', 'p-none')`,
		`DELETE FROM svc."_ProjectToTag" WHERE "A" = 'p-wb'`,
	} {
		require.NoError(t, w.write(t, sql), sql)
	}
	// A declared reference holds like a foreign key for the rows the fence
	// sees: a row naming no project is refused.
	requireSQLState(t, w.write(t, `INSERT INTO svc."ExternalRef" ("projectRef", "externalId") VALUES ('p-gone', 'no project')`),
		sqlstateFenced, `declared reference to svc."Project" names no row there`)
	tx, err := w.serving.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `INSERT INTO svc."Comment" ("taskProjectId", "taskNo", body) VALUES ('p-wa', 1, 'rr')`)
	requireSQLState(t, err, sqlstateIsolation, "pins a snapshot")
	require.NoError(t, tx.Rollback(ctx))

	// Each table counts its tenant's rows by the filter the purge and the
	// proofs use: a join row for each tenant it reaches.
	for table, want := range map[string]map[string]int{
		"Task":          {"wa": 3, "wf": 2, "wb": 1},
		"Comment":       {"wa": 2, "wf": 1, "wb": 1},
		"_ProjectToTag": {"wa": 2, "wf": 1, "wb": 1},
		"ExternalRef":   {"wa": 1, "wf": 1, "wb": 1},
	} {
		var filter string
		require.NoError(t, b.as(fixture.RoleOperator).QueryRow(ctx,
			"SELECT community_deletion.community_deletion_tenant_filter('svc', $1, 't')", table).Scan(&filter))
		for key, n := range want {
			var got int
			require.NoError(t, b.as(fixture.RoleOperator).QueryRow(ctx,
				fmt.Sprintf(`SELECT count(*) FROM svc.%s t WHERE %s`, pgx.Identifier{table}.Sanitize(), filter), key).Scan(&got), filter)
			require.Equal(t, n, got, "%s rows of %s", table, key)
		}
	}
}

// Parents, references and the registry are guarded: a parent with a child
// attached through it is not detached, nor a declared reference a child is
// attached through (55000); a reference to columns that are not unique, or
// one that would change, is refused (22023); only the child's owner
// declares or drops its references (42501); and nobody, not even the owner
// of schema community_deletion and its control tables, writes
// community_deletion_references or community_scoped_tables by plain DML
// (42501; an update 23000).
func TestChildTableRegistryGuards(t *testing.T) {
	t.Parallel()
	w := newPrismaWorld(t)
	b, ctx := w.b, t.Context()
	w.owner.run(t,
		`SELECT community_deletion.attach_child_table('svc."Task"')`,
		`SELECT community_deletion.attach_child_table('svc."Comment"')`,
		`SELECT community_deletion.attach_child_table('svc."_ProjectToTag"', ARRAY['svc."Project"'::regclass, 'svc."Tag"'])`,
		`SELECT community_deletion.declare_reference('svc."ExternalRef"', '{projectRef}', 'svc."Project"', '{id}', 'maps projects to the CRM')`,
		`SELECT community_deletion.attach_child_table('svc."ExternalRef"')`,
	)
	for _, parent := range []string{`svc."Project"`, `svc."Tag"`, `svc."Task"`} {
		err := w.owner.exec(t, "SELECT community_deletion.detach_community_write_fence($1)", parent)
		requireSQLState(t, err, sqlstateFenced, "is attached through it; detach that first")
	}
	err := w.owner.exec(t, `SELECT community_deletion.drop_reference('svc."ExternalRef"', '{projectRef}')`)
	requireSQLState(t, err, sqlstateFenced, "is attached through it; detach it first")

	// References: unique columns only, never changed, by the owner only.
	w.owner.run(t, `CREATE TABLE svc."Loose" ("projectTitle" text, "projectRef" text)`)
	err = w.owner.exec(t, `SELECT community_deletion.declare_reference('svc."Loose"', '{projectTitle}', 'svc."Project"', '{title}')`)
	requireSQLState(t, err, pgerrcode.InvalidParameterValue, `(title) is not unique in svc."Project"`)
	err = w.owner.exec(t, `SELECT community_deletion.declare_reference('svc."ExternalRef"', '{projectRef}', 'svc."Tag"')`)
	requireSQLState(t, err, pgerrcode.InvalidParameterValue, "a declared reference never changes")
	for _, role := range []fixture.Role{fixture.RoleServing, fixture.RoleOperator, fixture.RoleExecutor} {
		err = b.execAs(t, role, `SELECT community_deletion.declare_reference('svc."Loose"', '{projectRef}', 'svc."Project"')`)
		requireSQLState(t, err, pgerrcode.InsufficientPrivilege, "only its owner")
		err = b.execAs(t, role, `SELECT community_deletion.drop_reference('svc."ExternalRef"', '{projectRef}')`)
		requireSQLState(t, err, pgerrcode.InsufficientPrivilege, "only its owner")
		err = b.execAs(t, role, `SELECT community_deletion.attach_child_table('svc."Loose"')`)
		requireSQLState(t, err, pgerrcode.InsufficientPrivilege, "")
	}
	w.owner.run(t, `SELECT community_deletion.declare_reference('svc."Loose"', '{projectRef}', 'svc."Project"')`)
	require.Equal(t, []driftRow{{`svc."Loose"`, "unregistered"}}, drift(t, b), "a declared reference makes it tenant data")
	w.owner.run(t, `SELECT community_deletion.drop_reference('svc."Loose"', '{projectRef}')`)
	require.Empty(t, drift(t, b))

	// The control tables' owner, outside any registration function.
	const login = "cd_test_refs_owner"
	handSchemaTo(t, b, login, login+"-password",
		"ALTER TABLE community_deletion.community_deletion_references OWNER TO "+login,
		"ALTER TABLE community_deletion.community_scoped_tables OWNER TO "+login)
	before := registry(t, b)
	var refsBefore int
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM community_deletion_references").Scan(&refsBefore))
	schemaOwner := connectAs(t, b, login, login+"-password")
	for _, attack := range []struct{ sql, code, contains string }{
		{`INSERT INTO community_deletion.community_deletion_references (child_schema, child_table, child_columns, parent_schema, parent_table, parent_columns)
			VALUES ('svc', 'Loose', '{projectTitle}', 'svc', 'Project', '{title}')`, pgerrcode.InsufficientPrivilege, "references are declared only by"},
		{`DELETE FROM community_deletion.community_deletion_references`, pgerrcode.InsufficientPrivilege, "references are declared only by"},
		{`UPDATE community_deletion.community_deletion_references SET parent_table = 'Tag'`, sqlstateIntegrity, "never changes"},
		{`DELETE FROM community_deletion.community_scoped_tables WHERE table_name = 'Task'`, pgerrcode.InsufficientPrivilege, "tenant tables are registered only by"},
		{`INSERT INTO community_deletion.community_scoped_tables (table_schema, table_name, purge_action, key_kind, parents)
			SELECT table_schema, 'Loose', purge_action, key_kind, parents FROM community_deletion.community_scoped_tables WHERE table_name = 'ExternalRef'`,
			pgerrcode.InsufficientPrivilege, "tenant tables are registered only by"},
		{`UPDATE community_deletion.community_scoped_tables SET parents = NULL WHERE table_name = 'Task'`, sqlstateIntegrity, "a registration never changes"},
	} {
		_, err := schemaOwner.Exec(ctx, attack.sql)
		requireSQLState(t, err, attack.code, attack.contains)
	}
	require.Equal(t, before, registry(t, b))
	var refsAfter int
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM community_deletion_references").Scan(&refsAfter))
	require.Equal(t, refsBefore, refsAfter)
}

// The guards of community_deletion_references and community_scoped_tables
// admit a write made from inside declare_reference(), drop_reference() or
// a registration function, which they recognize by name in the call stack.
// A function of the same name and signature that the owner of schema
// community_deletion (who owns the control tables) creates in a schema it
// may create in is not one of them: its writes are refused (42501), and
// the declared references and the registry are unchanged.
func TestRegistryGuardsRefuseAFunctionNamedLikeTheRegistrationFunctions(t *testing.T) {
	t.Parallel()
	w := newPrismaWorld(t)
	b, ctx := w.b, t.Context()
	w.owner.run(t,
		`SELECT community_deletion.attach_child_table('svc."Task"')`,
		`SELECT community_deletion.declare_reference('svc."ExternalRef"', '{projectRef}', 'svc."Project"', '{id}', 'maps projects to the CRM')`,
		`SELECT community_deletion.attach_child_table('svc."ExternalRef"')`,
	)
	const login = "cd_test_refs_owner"
	handSchemaTo(t, b, login, login+"-password",
		"ALTER TABLE community_deletion.community_deletion_references OWNER TO "+login,
		"ALTER TABLE community_deletion.community_scoped_tables OWNER TO "+login)
	schemaOwner := connectAs(t, b, login, login+"-password")
	before := registry(t, b)
	for _, sql := range []string{
		`CREATE FUNCTION public.drop_reference(child regclass, child_columns name[]) RETURNS void
			LANGUAGE plpgsql SET search_path = public, pg_catalog AS $$
			BEGIN DELETE FROM community_deletion.community_deletion_references; END $$`,
		`CREATE FUNCTION public.community_deletion_unregister_table(table_schema name, table_name name) RETURNS name
			LANGUAGE plpgsql SET search_path = public, pg_catalog AS $$
			BEGIN DELETE FROM community_deletion.community_scoped_tables r WHERE r.table_name = 'Task'; RETURN NULL; END $$`,
	} {
		_, err := schemaOwner.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	var externalRef uint32 // (the schema owner may not use schema svc)
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT 'svc."ExternalRef"'::regclass::oid`).Scan(&externalRef))
	t.Run("references", func(t *testing.T) {
		_, err := schemaOwner.Exec(ctx, `SELECT public.drop_reference($1::oid::regclass, '{projectRef}')`, externalRef)
		requireSQLState(t, err, pgerrcode.InsufficientPrivilege, "references are declared only by")
		var refs int
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM community_deletion_references").Scan(&refs))
		require.Equal(t, 1, refs)
	})
	t.Run("registry", func(t *testing.T) {
		_, err := schemaOwner.Exec(ctx, `SELECT public.community_deletion_unregister_table('svc', 'Task')`)
		requireSQLState(t, err, pgerrcode.InsufficientPrivilege, "tenant tables are registered only by")
		require.Equal(t, before, registry(t, b))
	})
}

// The database's proof of absence covers tables attached through their
// parents: the step to tombstone is refused (55000) while a row of the
// tenant remains in a join table (reached through either parent), in a
// table reached by a declared reference, or in a child table, each named,
// and allowed once the executor has purged them; the other tenant's rows,
// its join rows included, stay. The service, keyed by integer, declares
// almost no foreign keys; its Prisma-style join table and its child table
// cascade from their parents.
func TestTombstoneProofCoversChildTables(t *testing.T) {
	t.Parallel()
	b := setupBare(t)
	ctx := t.Context()
	owner := newServiceOwner(t, b)
	owner.run(t,
		"CREATE TABLE svc.accounts (id serial PRIMARY KEY, name text NOT NULL)",
		"CREATE TABLE svc.projects (id bigint PRIMARY KEY, account_id bigint NOT NULL, title text NOT NULL)",
		"CREATE TABLE svc.tags (id bigint PRIMARY KEY, account_id integer NOT NULL, label text NOT NULL)",
		"CREATE TABLE svc.notes (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, project_id bigint NOT NULL REFERENCES svc.projects (id) ON DELETE CASCADE, body text)",
		`CREATE TABLE svc."_ProjectToTag" ("A" bigint NOT NULL REFERENCES svc.projects (id) ON DELETE CASCADE,
			"B" bigint NOT NULL REFERENCES svc.tags (id) ON DELETE CASCADE, PRIMARY KEY ("A", "B"))`,
		"CREATE TABLE svc.files (object_key text PRIMARY KEY, project_ref bigint NOT NULL)",
		"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA svc TO community_deletion_serving",
		"SELECT community_deletion.declare_tenant_table('svc.accounts')",
		"SELECT community_deletion.attach_community_write_fence('svc.projects', 'delete', 'account_id')",
		"SELECT community_deletion.attach_community_write_fence('svc.tags', 'delete', 'account_id')",
		"SELECT community_deletion.attach_child_table('svc.notes')",
		`SELECT community_deletion.attach_child_table('svc."_ProjectToTag"')`,
		"SELECT community_deletion.declare_reference('svc.files', '{project_ref}', 'svc.projects', reason => 'files are listed by project')",
		"SELECT community_deletion.attach_child_table('svc.files')",
	)
	require.Empty(t, rawDrift(t, b))
	serving := b.as(fixture.RoleServing)
	// Account 1 is doomed, account 2 stays; each has a project, a tag, a
	// note and a file, and the join table links each project to both tags.
	for _, sql := range []string{
		"INSERT INTO svc.accounts (id, name) VALUES (1, 'doomed'), (2, 'bystander')",
		"INSERT INTO svc.projects VALUES (11, 1, 'doomed'), (21, 2, 'bystander')",
		"INSERT INTO svc.tags VALUES (12, 1, 'doomed'), (22, 2, 'bystander')",
		"INSERT INTO svc.notes (project_id, body) VALUES (11, 'doomed'), (21, 'bystander')",
		`INSERT INTO svc."_ProjectToTag" VALUES (11, 12), (11, 22), (21, 12), (21, 22)`,
		"INSERT INTO svc.files VALUES ('objects/a', 11), ('objects/b', 21)",
	} {
		_, err := serving.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	bystander := func() string {
		var s string
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT concat_ws(' ',
			(SELECT string_agg(id::text, ',') FROM svc.accounts WHERE id = 2),
			(SELECT string_agg(id::text, ',') FROM svc.projects WHERE account_id = 2),
			(SELECT string_agg(id::text, ',') FROM svc.tags WHERE account_id = 2),
			(SELECT string_agg(body, ',') FROM svc.notes WHERE project_id = 21),
			(SELECT string_agg("A" || '-' || "B", ',' ORDER BY "A", "B") FROM svc."_ProjectToTag" WHERE "A" = 21 AND "B" = 22),
			(SELECT string_agg(object_key, ',') FROM svc.files WHERE project_ref = 21))`).Scan(&s))
		return s
	}
	before := bystander()
	require.Equal(t, "2 21 22 bystander 21-22 objects/b", before)

	community := b.walkTenant(t, 1, "fenced")
	b.walkRequest(t, community, "bindings_removed")
	_, generation := b.communityState(t, community)
	purge := func(sql string) {
		t.Helper()
		require.NoError(t, b.asExecutor(t, community, generation, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, sql)
			return err
		}), sql)
	}
	requireRefused := func(table string) {
		t.Helper()
		requireSQLState(t, b.tombstoneAs(t, fixture.RoleExecutor, community, generation), sqlstateFenced,
			fmt.Sprintf("registered delete table %s still holds its rows", table))
	}
	requireRefused("_ProjectToTag")
	purge(`DELETE FROM svc."_ProjectToTag" WHERE "A" = 11`)
	requireRefused("_ProjectToTag") // (21, 12) reaches the doomed account through its tag only
	purge(`DELETE FROM svc."_ProjectToTag" WHERE "B" = 12`)
	requireRefused("accounts")
	purge("DELETE FROM svc.accounts WHERE id = 1")
	requireRefused("files")
	purge("DELETE FROM svc.files WHERE project_ref = 11")
	requireRefused("notes")
	purge("DELETE FROM svc.notes WHERE project_id = 11")
	requireRefused("projects")
	purge("DELETE FROM svc.projects WHERE account_id = 1")
	requireRefused("tags")
	purge("DELETE FROM svc.tags WHERE account_id = 1")
	require.NoError(t, b.tombstoneAs(t, fixture.RoleExecutor, community, generation))
	require.Equal(t, before, bystander())
}

// A child table's fence resolves a row's tenant through its parents, which
// the writer may see only in part: a service that isolates its tenants
// with row-level security on "Project" lets its serving login see only the
// workspace it serves. The foreign key (checked with row security off)
// admits a task of another workspace's project; the fence must still
// refuse it (55000) when that workspace is fenced, whether the reference is
// a foreign key or declared, and must not take a hidden parent for a row
// of no tenant.
func TestChildFenceSeesParentsRowSecurityHides(t *testing.T) {
	t.Parallel()
	w := newPrismaWorld(t)
	w.owner.run(t,
		`SELECT community_deletion.attach_child_table('svc."Task"')`,
		`SELECT community_deletion.declare_reference('svc."ExternalRef"', '{projectRef}', 'svc."Project"')`,
		`SELECT community_deletion.attach_child_table('svc."ExternalRef"')`,
	)
	for _, id := range []string{"wa", "wf"} {
		w.workspace(t, id)
	}
	w.b.walkTenant(t, "wf", "fenced")
	w.owner.run(t,
		`ALTER TABLE svc."Project" ENABLE ROW LEVEL SECURITY`,
		`CREATE POLICY served_workspace ON svc."Project" USING ("workspaceId" = current_setting('app.workspace', true))`,
	)
	require.NoError(t, w.write(t, "SELECT set_config('app.workspace', 'wa', false)"))
	var visible int
	require.NoError(t, w.serving.QueryRow(t.Context(), `SELECT count(*) FROM svc."Project" WHERE id = 'p-wf'`).Scan(&visible))
	require.Zero(t, visible, "the serving login cannot see the fenced workspace's project")

	require.NoError(t, w.write(t, `INSERT INTO svc."Task" ("projectId", no, title) VALUES ('p-wa', 1, 'ok')`))
	for name, write := range map[string]struct{ sql, table string }{
		"foreign key":        {`INSERT INTO svc."Task" ("projectId", no, title) VALUES ('p-wf', 1, 'late')`, "Task"},
		"declared reference": {`INSERT INTO svc."ExternalRef" ("projectRef", "externalId") VALUES ('p-wf', 'late')`, "ExternalRef"},
		"mixed with visible": {`INSERT INTO svc."Task" ("projectId", no, title) VALUES ('p-wa', 2, 'ok'), ('p-wf', 2, 'late')`, "Task"},
	} {
		t.Run(name, func(t *testing.T) {
			requireSQLState(t, w.write(t, write.sql), sqlstateFenced, fmt.Sprintf("community write to %q refused", write.table))
		})
	}
	var late int
	require.NoError(t, w.b.pool.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM svc."Task" WHERE "projectId" = 'p-wf')
		+ (SELECT count(*) FROM svc."ExternalRef" WHERE "projectRef" = 'p-wf')`).Scan(&late))
	require.Zero(t, late, "no late row of the fenced workspace")
}
