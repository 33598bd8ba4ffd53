package integration

import (
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/fixture"
)

// The DDL guard and bound fences (migration 00026): a fence whose table a
// foreign key binds carries the third argument 'bound' and, with migration
// 00029, admits a write without any query while no deletion is in flight.
// Its safety then rests on the foreign key, so the guard refuses whatever
// would take the key away from under a bound fence, and holds the fence
// marker that tells the fences whether a deletion is in flight.

// execTx runs statements as the owner in one transaction and returns the
// first error, after which the transaction is rolled back.
func (d *keyedDeployment) execTx(t *testing.T, sqls ...string) error {
	t.Helper()
	tx, err := d.owner.Begin(t.Context())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(t.Context()) }()
	for _, sql := range sqls {
		if _, err := tx.Exec(t.Context(), sql); err != nil {
			return err
		}
	}
	return tx.Commit(t.Context())
}

// fullFence is the fence of a leaf partition of svc.ledger of kind once it
// has its full arguments: keyedFence's.
func fullFence(kind keyedKind) []string { return keyedFence(kind) }

// unbindings are what the owner of a keyed deployment's tables (or the
// owner of schema community_deletion who owns them too) can do to take a
// foreign key away from under a bound fence, each statement list run in
// one transaction; each is refused (42501) naming the table, the foreign
// key and what to do.
var unbindings = []struct {
	name    string
	sqls    []string
	message string
}{
	{name: "a keyed partitioned table's binding foreign key dropped",
		sqls: []string{"ALTER TABLE svc.ledger DROP CONSTRAINT ledger_account_id_fkey"},
		message: "drops foreign key ledger_account_id_fkey of svc.ledger, which binds its fence: a bound fence skips the tenant check " +
			"while no deletion is in flight, so without the key a deleted tenant's rows could come back; give svc.ledger full fences " +
			"first with SELECT community_deletion.community_deletion_ddl_guard_full_fences('svc.ledger'), then drop the key"},
	{name: "a kept table's binding foreign key dropped",
		sqls:    []string{"ALTER TABLE svc.invoices DROP CONSTRAINT invoices_account_id_fkey"},
		message: "drops foreign key invoices_account_id_fkey of svc.invoices, which binds its fence"},
	{name: "the tenant table dropped with the foreign keys to it",
		sqls:    []string{"DROP TABLE svc.accounts CASCADE"},
		message: "drops foreign key invoices_account_id_fkey of svc.invoices, which binds its fence"},
	{name: "the tenant table's key dropped with the foreign keys to it",
		sqls:    []string{"ALTER TABLE svc.accounts DROP CONSTRAINT accounts_pkey CASCADE"},
		message: "drops foreign key invoices_account_id_fkey of svc.invoices, which binds its fence"},
	{name: "the tenant table renamed",
		sqls: []string{"ALTER TABLE svc.accounts RENAME TO customers"},
		message: "leaves the fence of svc.invoices bound although no foreign key of its column account_id to svc.accounts (id), " +
			"the tenant table's key, is there"},
	{name: "the tenant table's key column renamed",
		sqls:    []string{"ALTER TABLE svc.accounts RENAME COLUMN id TO account_id"},
		message: "leaves the fence of svc.invoices bound although no foreign key of its column account_id to svc.accounts (id)"},
	{name: "a child table's first step dropped",
		sqls: []string{"ALTER TABLE svc.tasks DROP CONSTRAINT tasks_project_id_fkey"},
		message: "drops foreign key tasks_project_id_fkey of svc.tasks, which binds its fence and is a first step of its paths: " +
			"a bound fence skips the tenant check while no deletion is in flight, so without the key a deleted tenant's rows could come back; " +
			"change the references svc.tasks is attached by in a migration run only: detach it there and attach it again with community_deletion.attach_child_table()"},
	{name: "a child table's first step dropped with the key it references",
		sqls:    []string{"ALTER TABLE svc.projects DROP CONSTRAINT projects_pkey CASCADE"},
		message: "drops foreign key attachments_project_id_fkey of svc.attachments, which binds its fence and is a first step of its paths"},
	{name: "a child table's first step turned into a declared reference",
		sqls: []string{"SELECT community_deletion.declare_reference('svc.tasks', '{project_id}', 'svc.projects')",
			"ALTER TABLE svc.tasks DROP CONSTRAINT tasks_project_id_fkey"},
		message: "drops foreign key tasks_project_id_fkey of svc.tasks, which binds its fence and is a first step of its paths"},
	{name: "a bound fence re-created on a table no foreign key binds",
		sqls: []string{`CREATE OR REPLACE TRIGGER community_write_fence_insert AFTER INSERT ON svc.projects
			REFERENCING NEW TABLE AS community_fence_new FOR EACH STATEMENT
			EXECUTE FUNCTION community_deletion.enforce_community_write_fence('account_id', '{kind}', 'bound')`},
		message: "leaves the fence of svc.projects bound although no foreign key of its column account_id to svc.accounts (id)"},
	{name: "a bound fence re-created on a child table whose first step is a declared reference",
		sqls: []string{`DO $$ BEGIN
			EXECUTE format('CREATE OR REPLACE TRIGGER community_write_fence_delete AFTER DELETE ON svc.comments
				REFERENCING OLD TABLE AS community_fence_old FOR EACH STATEMENT
				EXECUTE FUNCTION community_deletion.enforce_community_write_fence(''through'', %L, ''bound'')',
				(SELECT split_part(encode(t.tgargs, 'escape'), '\000', 2) FROM pg_trigger t
				 WHERE t.tgrelid = 'svc.comments'::regclass AND t.tgname = 'community_write_fence_delete'));
			END $$`},
		message: "leaves the fence of svc.comments bound although a first step to its parents is a declared reference"},
}

// The ways of taking a foreign key away from under a bound fence, as the
// owner of the tables and as the owner of schema community_deletion who
// owns them too, outside a migration run: each is refused (42501) naming
// the table, the foreign key and what to do, nothing of schema svc changes
// (the foreign keys' triggers neither) and the drift report stays empty.
func TestDDLGuardRefusesUnbindingABoundFence(t *testing.T) {
	t.Parallel()
	for _, kind := range kindsFor(t) {
		for _, schemaOwner := range []bool{false, true} {
			attacker := "the table owner"
			if schemaOwner {
				attacker = "the schema owner"
			}
			t.Run(kind.name+"/"+attacker, func(t *testing.T) {
				t.Parallel()
				d := newKeyedDeployment(t, kind, schemaOwner, false)
				require.Equal(t, boundFence(kind), fenceArgs(t, d.b, "svc.ledger_doomed"))
				for _, attack := range unbindings {
					t.Run(attack.name, func(t *testing.T) {
						before := d.snapshot(t)
						sqls := make([]string, len(attack.sqls))
						for i, sql := range attack.sqls {
							sqls[i] = kind.expand(sql)
						}
						err := d.execTx(t, sqls...)
						requireSQLState(t, err, pgerrcode.InsufficientPrivilege, "DDL refused: ")
						require.Contains(t, err.Error(), attack.message)
						require.NotContains(t, err.Error(), "\n", "one line")
						require.Equal(t, before, d.snapshot(t))
						require.Empty(t, drift(t, d.b))
					})
				}
			})
		}
	}
}

// riTriggers are the names of the internal triggers of the foreign key
// conname on relation (the check triggers of the referencing side, the
// action triggers of the referenced one), sorted.
func riTriggers(t *testing.T, b *testBundle, relation, conname string) []string {
	t.Helper()
	rows, err := b.pool.Query(t.Context(), `SELECT t.tgrelid::regclass::text || ' ' || quote_ident(t.tgname)
		FROM pg_trigger t JOIN pg_constraint k ON k.oid = t.tgconstraint
		WHERE k.conname = $2 AND (k.conrelid = $1::regclass OR k.conparentid IN (SELECT oid FROM pg_constraint WHERE conrelid = $1::regclass AND conname = $2))
		ORDER BY 1`, relation, conname)
	require.NoError(t, err)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.NotEmpty(t, names, "%s has foreign key %s", relation, conname)
	return names
}

// Disabling the triggers of a foreign key that binds a fence is for a
// superuser only: PostgreSQL refuses it to the tables' owner (42501, a
// system trigger), even in the ALTER TABLE ... DISABLE TRIGGER ALL that
// would disable the fence too. A superuser, the only role that can, is
// refused by the guard (42501), whether it disables a referencing
// partition's check trigger, lets a child table's first step fire for
// replication sessions only, or disables every trigger of the tenant
// table; nothing changes. Enabling one ALWAYS passes: it fires more.
// (session_replication_role = replica, which skips them as well, is a
// setting, not DDL: nothing but the superuser's restraint stops it.)
func TestDDLGuardRefusesDisablingTheTriggersOfABindingForeignKey(t *testing.T) {
	t.Parallel()
	for _, kind := range kindsFor(t) {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			d := newKeyedDeployment(t, kind, false, false)
			b := d.b
			for _, sql := range []string{"ALTER TABLE svc.ledger DISABLE TRIGGER ALL", "ALTER TABLE svc.accounts DISABLE TRIGGER ALL",
				"ALTER TABLE svc.tasks DISABLE TRIGGER ALL"} {
				before := d.snapshot(t)
				requireSQLState(t, d.exec(t, sql), pgerrcode.InsufficientPrivilege, "is a system trigger")
				require.Equal(t, before, d.snapshot(t))
			}
			ledgerCheck := riTriggers(t, b, "svc.ledger", "ledger_account_id_fkey")
			var partitionCheck string
			for _, name := range ledgerCheck {
				if strings.HasPrefix(name, "svc.ledger_doomed ") && strings.Contains(name, "_c_") {
					partitionCheck = name
				}
			}
			require.NotEmpty(t, partitionCheck, "a check trigger on the partition: %v", ledgerCheck)
			tasksCheck := ""
			for _, name := range riTriggers(t, b, "svc.tasks", "tasks_project_id_fkey") {
				if rest, ok := strings.CutPrefix(name, "svc.tasks "); ok {
					tasksCheck = rest
				}
			}
			require.NotEmpty(t, tasksCheck)
			for _, attack := range []struct{ sql, message string }{
				{"ALTER TABLE svc.ledger_doomed DISABLE TRIGGER " + strings.TrimPrefix(partitionCheck, "svc.ledger_doomed "),
					"leaves the fence of svc.ledger bound although the triggers of its foreign key ledger_account_id_fkey are disabled"},
				{"ALTER TABLE svc.tasks ENABLE REPLICA TRIGGER " + tasksCheck,
					"leaves the fence of svc.tasks bound although the triggers of its foreign key tasks_project_id_fkey are disabled"},
				{"ALTER TABLE svc.accounts DISABLE TRIGGER ALL",
					"leaves the fence of svc.invoices bound although the triggers of its foreign key invoices_account_id_fkey are disabled"},
			} {
				before := d.snapshot(t)
				err := b.exec(t, attack.sql)
				requireSQLState(t, err, pgerrcode.InsufficientPrivilege, "DDL refused: ")
				require.Contains(t, err.Error(), attack.message, attack.sql)
				require.Equal(t, before, d.snapshot(t), attack.sql)
			}
			require.NoError(t, b.exec(t, "ALTER TABLE svc.tasks ENABLE ALWAYS TRIGGER "+tasksCheck))
			require.NoError(t, b.exec(t, "ALTER TABLE svc.tasks ENABLE TRIGGER "+tasksCheck))
			require.Empty(t, drift(t, b))
		})
	}
}

// A bound fence's foreign key may change so long as one binds its table at
// the end of each command: a column retyped, which drops and re-creates
// its key; a second key added NOT VALID and validated, or added to a
// partitioned table (where PostgreSQL 15 has no NOT VALID), the first then
// dropped; a key dropped and added again NOT VALID in one ALTER TABLE. Each passes
// as the tables' owner, the fences stay bound, the drift report stays
// empty and the fence still refuses the fenced tenant. A partition made
// later gets the bound fence.
func TestDDLGuardLetsABoundFenceKeepItsForeignKey(t *testing.T) {
	t.Parallel()
	for _, kind := range kindsFor(t) {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			d := newKeyedDeployment(t, kind, false, false)
			b, k := d.b, kind.keys
			constraintOID := func(relation, conname string) (oid uint32) {
				require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT oid FROM pg_constraint WHERE conrelid = $1::regclass AND conname = $2",
					relation, conname).Scan(&oid))
				return oid
			}
			invoicesKey := constraintOID("svc.invoices", "invoices_account_id_fkey")
			for _, sql := range []string{
				"ALTER TABLE svc.invoices ALTER COLUMN account_id TYPE " + kind.wide,
				"ALTER TABLE svc.invoices ADD CONSTRAINT invoices_account_fk2 FOREIGN KEY (account_id) REFERENCES svc.accounts (id) NOT VALID",
				"ALTER TABLE svc.invoices VALIDATE CONSTRAINT invoices_account_fk2",
				"ALTER TABLE svc.ledger ADD CONSTRAINT ledger_account_fk2 FOREIGN KEY (account_id) REFERENCES svc.accounts (id)",
				"ALTER TABLE svc.ledger DROP CONSTRAINT ledger_account_id_fkey",
				`ALTER TABLE svc.tasks DROP CONSTRAINT tasks_project_id_fkey,
					ADD CONSTRAINT tasks_project_id_fkey FOREIGN KEY (project_id) REFERENCES svc.projects (id) NOT VALID`,
				"ALTER TABLE svc.tasks VALIDATE CONSTRAINT tasks_project_id_fkey",
			} {
				require.NoError(t, d.exec(t, sql), sql)
				require.Empty(t, drift(t, b), sql)
			}
			require.NotEqual(t, invoicesKey, constraintOID("svc.invoices", "invoices_account_id_fkey"), "ALTER COLUMN ... TYPE re-created the key")
			d.run(t, "ALTER TABLE svc.invoices DROP CONSTRAINT invoices_account_id_fkey")
			require.Empty(t, drift(t, b))
			require.Equal(t, boundFence(kind), fenceArgs(t, b, "svc.ledger_doomed"))
			for _, relation := range []string{"svc.invoices", "svc.tasks"} {
				for _, fence := range fenceArgs(t, b, relation) {
					if !strings.Contains(fence, "truncate") {
						require.Contains(t, fence, `\000bound\000`, relation)
					}
				}
			}

			// A partition made later is fenced bound, as attach would.
			require.NoError(t, b.execAs(t, fixture.RoleServing, fmt.Sprintf("INSERT INTO svc.accounts (id, name) VALUES ('%s', 'late')", k[2])))
			d.run(t, fmt.Sprintf("CREATE TABLE svc.ledger_late PARTITION OF svc.ledger FOR VALUES IN ('%s')", k[2]),
				"GRANT INSERT ON svc.ledger_late TO community_deletion_serving")
			require.Equal(t, boundFence(kind), fenceArgs(t, b, "svc.ledger_late"))
			require.Empty(t, drift(t, b))

			serving := b.as(fixture.RoleServing)
			_, err := serving.Exec(t.Context(), fmt.Sprintf("INSERT INTO svc.ledger (account_id, id, amount) VALUES ('%s', 3, 30)", k[1]))
			requireSQLState(t, err, sqlstateFenced, "community write to ledger refused: community "+k[1]+" is fenced")
			_, err = serving.Exec(t.Context(), fmt.Sprintf("INSERT INTO svc.ledger (account_id, id, amount) VALUES ('%s', 3, 30), ('%s', 3, 30)", k[0], k[2]))
			require.NoError(t, err)
			_, err = serving.Exec(t.Context(), fmt.Sprintf("INSERT INTO svc.invoices (id, account_id, body) VALUES (3, '%s', 'late')", k[1]))
			requireSQLState(t, err, sqlstateFenced, "community write to invoices refused: it links a row to community "+k[1])
		})
	}
}

// community_deletion_ddl_guard_full_fences() gives a bound table the fences
// attach gives an unbound one, as the table's owner, which the guard lets
// through; its binding foreign key may then go, and the fence, now
// checking every write, still refuses the fenced tenant; attach after that
// keeps the full fences. A child table's first step stays refused (its
// paths follow it; see the next test). The function refuses a table that
// is not registered and a role that may not create triggers on it.
func TestDDLGuardFullFencesLetABindingForeignKeyGo(t *testing.T) {
	t.Parallel()
	for _, kind := range kindsFor(t) {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			d := newKeyedDeployment(t, kind, false, false)
			b, k := d.b, kind.keys
			requireSQLState(t, b.execAs(t, fixture.RoleServing, "SELECT community_deletion.community_deletion_ddl_guard_full_fences('svc.ledger')"),
				pgerrcode.InsufficientPrivilege, "permission denied for table ledger")
			requireSQLState(t, d.exec(t, "SELECT community_deletion.community_deletion_ddl_guard_full_fences('svc.accounts_missing')"),
				pgerrcode.UndefinedTable, "")
			d.run(t, "CREATE TABLE svc.scratch (id bigint)")
			requireSQLState(t, d.exec(t, "SELECT community_deletion.community_deletion_ddl_guard_full_fences('svc.scratch')"),
				pgerrcode.InvalidParameterValue, "full fences of svc.scratch refused: it is not a registered table")

			d.run(t, "SELECT community_deletion.community_deletion_ddl_guard_full_fences('svc.ledger')",
				"SELECT community_deletion.community_deletion_ddl_guard_full_fences('svc.invoices')")
			require.Equal(t, fullFence(kind), fenceArgs(t, b, "svc.ledger_doomed"))
			require.Equal(t, []string{"community_write_fence_row " + `account_id\000` + kind.name + `\000` + " O"},
				filterFences(fenceArgs(t, b, "svc.ledger"), "community_write_fence_row"))
			require.Empty(t, drift(t, b))
			d.run(t, "ALTER TABLE svc.ledger DROP CONSTRAINT ledger_account_id_fkey",
				"ALTER TABLE svc.invoices DROP CONSTRAINT invoices_account_id_fkey",
				"SELECT community_deletion.attach_community_write_fence('svc.ledger', 'delete', 'account_id')")
			require.Equal(t, fullFence(kind), fenceArgs(t, b, "svc.ledger_doomed"), "attach gives full fences once the key is gone")
			require.Empty(t, drift(t, b))
			serving := b.as(fixture.RoleServing)
			_, err := serving.Exec(t.Context(), fmt.Sprintf("INSERT INTO svc.ledger (account_id, id, amount) VALUES ('%s', 3, 30)", k[1]))
			requireSQLState(t, err, sqlstateFenced, "community write to ledger refused: community "+k[1]+" is fenced")
			_, err = serving.Exec(t.Context(), fmt.Sprintf("INSERT INTO svc.ledger (account_id, id, amount) VALUES ('%s', 3, 30)", k[0]))
			require.NoError(t, err)

			// A child table's first step: its paths follow the key.
			d.run(t, "SELECT community_deletion.community_deletion_ddl_guard_full_fences('svc.tasks')")
			for _, fence := range fenceArgs(t, b, "svc.tasks") {
				require.NotContains(t, fence, `\000bound\000`)
			}
			before := d.snapshot(t)
			requireSQLState(t, d.exec(t, "ALTER TABLE svc.tasks DROP CONSTRAINT tasks_project_id_fkey"),
				pgerrcode.InsufficientPrivilege, "svc.tasks parents_changed")
			require.Equal(t, before, d.snapshot(t))
			require.Empty(t, drift(t, b))
		})
	}
}

// filterFences keeps the fences named name.
func filterFences(fences []string, name string) []string {
	var kept []string
	for _, fence := range fences {
		if strings.HasPrefix(fence, name+" ") {
			kept = append(kept, fence)
		}
	}
	return kept
}

// markerSnapshot is what DDL could change of the fence marker and the
// trigger that arms it: the sequence's kind, owner, persistence, grants and
// parameters, its value, every trigger on communities whole, and the arm
// function's body.
func markerSnapshot(t *testing.T, b *testBundle) string {
	t.Helper()
	var s string
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT concat_ws(E'\n',
		(SELECT concat_ws(' ', c.relname, c.relkind, c.relowner::regrole, c.relpersistence, c.relacl::text,
		                  s.seqtypid::regtype, s.seqstart, s.seqincrement, s.seqmax, s.seqmin, s.seqcache, s.seqcycle,
		                  pg_sequence_last_value(c.oid::regclass))
		 FROM pg_class c JOIN pg_sequence s ON s.seqrelid = c.oid
		 WHERE c.relnamespace = 'community_deletion'::regnamespace AND c.relname LIKE 'community_deletion_fence_marker%'),
		(SELECT string_agg(concat_ws(' ', t.tgname, t.tgtype, t.tgenabled, t.tgqual, t.tgfoid::regprocedure::text), E'\n' ORDER BY t.tgname)
		 FROM pg_trigger t WHERE t.tgrelid = 'community_deletion.communities'::regclass AND NOT t.tgisinternal),
		(SELECT md5(p.prosrc) FROM pg_proc p WHERE p.oid = 'community_deletion.enforce_community_fence_marker_arm()'::regprocedure))`).Scan(&s))
	return s
}

// markerAttacks change the fence marker (migration 00029) or the trigger
// that arms it, by DDL.
var markerAttacks = []string{
	"ALTER SEQUENCE community_deletion.community_deletion_fence_marker RESTART WITH 0",
	"ALTER SEQUENCE community_deletion.community_deletion_fence_marker MAXVALUE 4611686018427387902",
	"ALTER SEQUENCE community_deletion.community_deletion_fence_marker SET UNLOGGED",
	"ALTER SEQUENCE community_deletion.community_deletion_fence_marker RENAME TO community_deletion_fence_marker_old",
	"DROP SEQUENCE community_deletion.community_deletion_fence_marker",
	"GRANT UPDATE ON SEQUENCE community_deletion.community_deletion_fence_marker TO PUBLIC",
	"GRANT USAGE ON SEQUENCE community_deletion.community_deletion_fence_marker TO community_deletion_serving",
	"GRANT ALL ON SEQUENCE community_deletion.community_deletion_fence_marker TO community_deletion_executor",
	"DROP TRIGGER communities_fence_marker_arm ON community_deletion.communities",
	"ALTER TABLE community_deletion.communities DISABLE TRIGGER communities_fence_marker_arm",
	"ALTER TABLE community_deletion.communities ENABLE REPLICA TRIGGER communities_fence_marker_arm",
	"ALTER TABLE community_deletion.communities ENABLE ALWAYS TRIGGER communities_fence_marker_arm",
	"ALTER TRIGGER communities_fence_marker_arm ON community_deletion.communities RENAME TO communities_fence_marker_unarmed",
	`CREATE OR REPLACE TRIGGER communities_fence_marker_arm BEFORE UPDATE ON community_deletion.communities
		FOR EACH ROW EXECUTE FUNCTION pg_catalog.suppress_redundant_updates_trigger()`,
	"DROP FUNCTION community_deletion.enforce_community_fence_marker_arm() CASCADE",
}

// The DDL guard holds the fence marker: as the owner of schema
// community_deletion, who here owns the marker and communities too, every
// change to the sequence (ALTER SEQUENCE, DROP, a GRANT of UPDATE or USAGE,
// with which setval and nextval change it) or to the trigger that arms it
// is refused (42501) by the guard; the service login, which owns neither,
// is refused by PostgreSQL (42501), or grants nothing. Nothing changes. setval() itself is
// not DDL: the service login may not call it (42501), the marker's owner
// may, and the drift report then names the community in flight whose bit
// the marker lacks, until a settle puts it back.
func TestDDLGuardHoldsTheFenceMarker(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.as(fixture.RoleServing) // creates the test logins
	password := schemaOwnerLogin + "-password"
	handSchemaTo(t, b, schemaOwnerLogin, password,
		"ALTER SEQUENCE community_deletion.community_deletion_fence_marker OWNER TO "+schemaOwnerLogin,
		"ALTER TABLE community_deletion.communities OWNER TO "+schemaOwnerLogin)
	installDDLGuard(t, b)
	url, err := fixture.LoginConnString(b.url, schemaOwnerLogin, password)
	require.NoError(t, err)
	owner, err := pgxpool.New(t.Context(), url)
	require.NoError(t, err)
	t.Cleanup(owner.Close)
	doomed := b.createCommunity(t)
	b.quiesce(t, doomed)
	require.Empty(t, drift(t, b))

	for _, attack := range markerAttacks {
		t.Run(attack, func(t *testing.T) {
			before := markerSnapshot(t, b)
			_, err := owner.Exec(t.Context(), attack)
			requireSQLState(t, err, pgerrcode.InsufficientPrivilege, "DDL refused: ")
			require.Equal(t, before, markerSnapshot(t, b))
			// PostgreSQL refuses it to a role that owns neither, or (a GRANT
			// by a role that holds SELECT through PUBLIC) grants nothing.
			if _, err = b.as(fixture.RoleServing).Exec(t.Context(), attack); err != nil {
				requireSQLState(t, err, pgerrcode.InsufficientPrivilege, "")
				require.NotContains(t, err.Error(), "DDL refused")
			}
			require.Equal(t, before, markerSnapshot(t, b))
			require.Empty(t, drift(t, b))
		})
	}

	_, err = b.as(fixture.RoleServing).Exec(t.Context(), "SELECT setval('community_deletion.community_deletion_fence_marker', 0)")
	requireSQLState(t, err, pgerrcode.InsufficientPrivilege, "permission denied for sequence community_deletion_fence_marker")
	_, err = owner.Exec(t.Context(), "SELECT setval('community_deletion.community_deletion_fence_marker', 0)")
	require.NoError(t, err, "setval is not DDL; the marker's owner may call it")
	report := drift(t, b)
	require.Len(t, report, 1)
	require.Equal(t, "community_deletion_fence_marker", report[0].Table)
	require.Contains(t, report[0].Problem, fmt.Sprintf("fence_marker: community %s is quiescing, but the fence marker lacks its bit", doomed))
	_, err = b.as(fixture.RoleExecutor).Exec(t.Context(), "SELECT community_deletion.community_deletion_settle_fence_marker()")
	require.NoError(t, err)
	require.Empty(t, drift(t, b))
}

// A child table's first step, a foreign key that binds its fence, goes the
// way the guard's refusal says: in a migration run, with no deletion in
// flight, the child is detached, the key dropped, the reference declared
// instead and the child attached again, which gives it full fences (its
// first step is now a declared reference). The drift report stays empty
// and the fence refuses a fenced tenant's rows.
func TestDDLGuardLetsAChildTableChangeItsFirstStepInAMigrationRun(t *testing.T) {
	t.Parallel()
	b := setupBare(t)
	installDDLGuard(t, b)
	owner := newServiceOwner(t, b)
	owner.run(t,
		"CREATE TABLE svc.accounts (id bigint PRIMARY KEY, name text NOT NULL)",
		"CREATE TABLE svc.projects (id bigint PRIMARY KEY, account_id bigint NOT NULL REFERENCES svc.accounts (id))",
		"CREATE TABLE svc.tasks (id bigint PRIMARY KEY, project_id bigint NOT NULL REFERENCES svc.projects (id), body text NOT NULL)",
		"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA svc TO community_deletion_serving",
		"SELECT community_deletion.declare_tenant_table('svc.accounts')",
		"SELECT community_deletion.attach_community_write_fence('svc.projects', 'delete', 'account_id')",
		"SELECT community_deletion.attach_child_table('svc.tasks')",
	)
	require.NoError(t, b.execAs(t, fixture.RoleServing, "INSERT INTO svc.accounts (id, name) VALUES (1, 'active'), (2, 'doomed')"))
	require.NoError(t, b.execAs(t, fixture.RoleServing, "INSERT INTO svc.projects (id, account_id) VALUES (1, 1), (2, 2)"))
	require.NoError(t, b.execAs(t, fixture.RoleServing, "INSERT INTO svc.tasks (id, project_id, body) VALUES (1, 1, 'kept'), (2, 2, 'doomed')"))
	for _, fence := range append(fenceArgs(t, b, "svc.projects"), fenceArgs(t, b, "svc.tasks")...) {
		if !strings.Contains(fence, "truncate") {
			require.Contains(t, fence, `\000bound\000`)
		}
	}
	requireSQLState(t, owner.exec(t, "ALTER TABLE svc.tasks DROP CONSTRAINT tasks_project_id_fkey"), pgerrcode.InsufficientPrivilege,
		"drops foreign key tasks_project_id_fkey of svc.tasks, which binds its fence and is a first step of its paths")
	b.execInRun(t, "SELECT community_deletion.detach_community_write_fence('svc.tasks')",
		"ALTER TABLE svc.tasks DROP CONSTRAINT tasks_project_id_fkey",
		"SELECT community_deletion.declare_reference('svc.tasks', '{project_id}', 'svc.projects')",
		"SELECT community_deletion.attach_child_table('svc.tasks')")
	for _, fence := range fenceArgs(t, b, "svc.tasks") {
		require.NotContains(t, fence, `\000bound\000`, "a declared first step gets full fences")
	}
	require.Empty(t, rawDrift(t, b))
	b.walkTenant(t, 2, "fenced")
	requireSQLState(t, b.execAs(t, fixture.RoleServing, "UPDATE svc.tasks SET body = 'late' WHERE id = 2"), sqlstateFenced,
		"community write to tasks refused: community 2 is fenced")
	require.NoError(t, b.execAs(t, fixture.RoleServing, "UPDATE svc.tasks SET body = 'more' WHERE id = 1"))
}

// Detaching a partition of a partitioned parent that a child table's
// binding foreign key references drops only that partition's part of the
// key (PostgreSQL first checks that no row references the partition): the
// key still binds, so the guard lets the tables' owner do it, the child's
// fence stays bound, and the key refuses a row naming the detached
// partition's rows (23503). Dropping the key itself stays refused (42501).
func TestDDLGuardLetsAPartitionOfABindingKeysParentGo(t *testing.T) {
	t.Parallel()
	b := setupBare(t)
	installDDLGuard(t, b)
	owner := newServiceOwner(t, b)
	owner.run(t,
		"CREATE TABLE svc.accounts (id bigint PRIMARY KEY, name text NOT NULL)",
		`CREATE TABLE svc.projects (account_id bigint NOT NULL REFERENCES svc.accounts (id), id bigint NOT NULL,
			PRIMARY KEY (account_id, id)) PARTITION BY LIST (account_id)`,
		"CREATE TABLE svc.projects_1 PARTITION OF svc.projects FOR VALUES IN (1)",
		"CREATE TABLE svc.projects_2 PARTITION OF svc.projects FOR VALUES IN (2)",
		"CREATE TABLE svc.projects_3 PARTITION OF svc.projects FOR VALUES IN (3)",
		`CREATE TABLE svc.tasks (id bigint PRIMARY KEY, owner_account bigint NOT NULL, project_id bigint NOT NULL, body text NOT NULL,
			CONSTRAINT tasks_project_fkey FOREIGN KEY (owner_account, project_id) REFERENCES svc.projects (account_id, id))`,
		"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA svc TO community_deletion_serving",
		"SELECT community_deletion.declare_tenant_table('svc.accounts')",
		"SELECT community_deletion.attach_community_write_fence('svc.projects', 'delete', 'account_id')",
		"SELECT community_deletion.attach_child_table('svc.tasks')",
	)
	require.NoError(t, b.execAs(t, fixture.RoleServing, "INSERT INTO svc.accounts (id, name) VALUES (1, 'active'), (2, 'doomed'), (3, 'gone')"))
	require.NoError(t, b.execAs(t, fixture.RoleServing, "INSERT INTO svc.projects (account_id, id) VALUES (1, 1), (2, 2)"))
	require.NoError(t, b.execAs(t, fixture.RoleServing, "INSERT INTO svc.tasks (id, owner_account, project_id, body) VALUES (1, 1, 1, 'kept'), (2, 2, 2, 'doomed')"))
	bound := func() {
		t.Helper()
		fences := fenceArgs(t, b, "svc.tasks")
		require.NotEmpty(t, fences)
		for _, fence := range fences {
			if !strings.Contains(fence, "truncate") {
				require.Contains(t, fence, `\000bound\000`)
			}
		}
	}
	bound()
	require.Empty(t, rawDrift(t, b))

	owner.run(t, "ALTER TABLE svc.projects DETACH PARTITION svc.projects_3", "DROP TABLE svc.projects_3")
	bound()
	require.Empty(t, rawDrift(t, b))
	requireSQLState(t, b.execAs(t, fixture.RoleServing, "INSERT INTO svc.tasks (id, owner_account, project_id, body) VALUES (3, 3, 3, 'orphan')"),
		pgerrcode.ForeignKeyViolation, "tasks_project_fkey")
	requireSQLState(t, owner.exec(t, "ALTER TABLE svc.tasks DROP CONSTRAINT tasks_project_fkey"), pgerrcode.InsufficientPrivilege,
		"drops foreign key tasks_project_fkey of svc.tasks, which binds its fence and is a first step of its paths")
	bound()
	b.walkTenant(t, 2, "fenced")
	requireSQLState(t, b.execAs(t, fixture.RoleServing, "UPDATE svc.tasks SET body = 'late' WHERE id = 2"), sqlstateFenced,
		"community write to tasks refused: community 2 is fenced")
	require.NoError(t, b.execAs(t, fixture.RoleServing, "UPDATE svc.tasks SET body = 'more' WHERE id = 1"))
}

// What the guard does not judge is drift: a binding foreign key dropped in
// a migration run, which the guard exempts, leaves the bound fence, and
// the drift report names the table (unbound, and unfenced: a bound fence
// without its key is not the table's fence) until it is put right. Until
// then the guard refuses the next DDL outside a run, the table owner's
// too, naming the table; attach run again by the owner gives the table
// full fences, which the guard lets through, and the report is empty.
func TestDDLGuardLeavesAKeyDroppedInAMigrationRunToTheDriftReport(t *testing.T) {
	t.Parallel()
	for _, kind := range kindsFor(t) {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			d := newKeyedDeployment(t, kind, false, false)
			b := d.b
			b.execInRun(t, "ALTER TABLE svc.invoices DROP CONSTRAINT invoices_account_id_fkey")
			// The bound fence no longer counts as the table's fence either.
			var problems []string
			for _, row := range drift(t, b) {
				require.Equal(t, "invoices", row.Table)
				problems = append(problems, row.Problem)
			}
			require.Len(t, problems, 2)
			require.Contains(t, problems[0], "unbound: its fence skips the tenant check while no deletion is in flight")
			require.Equal(t, "unfenced: no kept-row fence; run attach_community_write_fence again", problems[1])
			before := d.snapshot(t)
			requireSQLState(t, d.exec(t, "CREATE TABLE svc.scratch (id bigint)"), pgerrcode.InsufficientPrivilege,
				"leaves the fence of svc.invoices bound although no foreign key of its column account_id to svc.accounts (id)")
			require.Equal(t, before, d.snapshot(t))
			d.run(t, "SELECT community_deletion.attach_community_write_fence('svc.invoices', 'nullify', 'account_id')")
			for _, fence := range fenceArgs(t, b, "svc.invoices") {
				require.NotContains(t, fence, `\000bound\000`)
			}
			require.Empty(t, drift(t, b))
			d.run(t, "CREATE TABLE svc.scratch (id bigint)")
			serving := b.as(fixture.RoleServing)
			_, err := serving.Exec(t.Context(), fmt.Sprintf("INSERT INTO svc.invoices (id, account_id, body) VALUES (3, '%s', 'late')", kind.keys[1]))
			requireSQLState(t, err, sqlstateFenced, "community write to invoices refused: it links a row to community "+kind.keys[1])
		})
	}
}
