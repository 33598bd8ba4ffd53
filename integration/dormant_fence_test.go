package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/fixture"
)

// purgeAndTombstone deletes fenced tenant key's rows (a conversation of
// its own, and its tenant row) as the purge would, then tombstones it.
func (d *boundDeployment) purgeAndTombstone(t *testing.T, key int) {
	t.Helper()
	community := tenantUUID(key)
	_, generation := d.b.communityState(t, community)
	require.NoError(t, d.b.asExecutor(t, community, generation, func(tx pgx.Tx) error {
		if _, err := tx.Exec(t.Context(), "DELETE FROM svc.conversations WHERE account_id = $1", key); err != nil {
			return err
		}
		_, err := tx.Exec(t.Context(), "DELETE FROM svc.accounts WHERE id = $1", key)
		return err
	}))
	d.b.tombstone(t, community)
}

// abortDeletion restores tenant key to active and aborts its open request,
// as an operator's abort does.
func (d *boundDeployment) abortDeletion(t *testing.T, key int) {
	t.Helper()
	request, _ := d.b.openRequest(t, tenantUUID(key))
	require.NoError(t, d.b.tryAs(t, fixture.RoleOperator, func(tx pgx.Tx) error {
		if _, err := tx.Exec(t.Context(), "SELECT community_deletion_restore_active($1, NULL)", request); err != nil {
			return err
		}
		_, err := tx.Exec(t.Context(), "UPDATE community_deletion_requests SET "+abortSet+" WHERE id = $1", request)
		return err
	}))
}

// quiesceWithoutDrain runs the quiesce of tenant key on conn as
// BeginQuiescing would without the dormant fence's drain: the marker's
// lock, then the state.
func (d *boundDeployment) quiesceWithoutDrain(ctx context.Context, conn *pgx.Conn, key int) error {
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if err := setExecutor(ctx, tx, tenantUUID(key), 0); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "SELECT community_deletion.community_deletion_fence_marker_lock()"); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "UPDATE community_deletion.communities SET deletion_state = 'quiescing' WHERE id = $1", tenantUUID(key))
		return err
	})
}

// A write the dormant fence admitted holds its table's ROW EXCLUSIVE lock
// until its transaction ends, and the fence is armed only by a community
// leaving active in a transaction that holds every such table in SHARE
// mode: while the write is open the quiesce's drain gives up (55P03, naming
// the table and the writer) and the community stays active; once it has
// committed the quiesce arms the fence and every later write of the
// community is refused. A quiesce without the drain is refused by the
// database (55000). An arming trigger that skipped that check would let the
// quiesce commit while the write is still open, and the write land in a
// quiescing community: the last subtest shows this test would catch it.
func TestQuiesceDrainsWritesTheDormantFenceAdmitted(t *testing.T) {
	t.Parallel()
	for _, variant := range []string{"as installed", "without the drain", "an arming that skips the drain check admits a late write"} {
		t.Run(variant, func(t *testing.T) {
			t.Parallel()
			d := newBoundDeployment(t)
			b := d.b
			ctx := t.Context()
			require.True(t, dormant(t, b))
			d.approveDeletion(t, 2)
			if variant == "an arming that skips the drain check admits a late write" {
				var def string
				require.NoError(t, b.pool.QueryRow(ctx,
					"SELECT pg_get_functiondef('community_deletion.enforce_community_fence_marker_arm()'::regprocedure)").Scan(&def))
				const check = "            IF undrained IS NOT NULL THEN"
				require.Equal(t, 1, strings.Count(def, check))
				require.NoError(t, b.exec(t, strings.Replace(def, check, "            IF false THEN", 1)))
			}

			writer, err := d.serving.Begin(ctx)
			require.NoError(t, err)
			_, err = writer.Exec(ctx, "INSERT INTO svc.messages (conversation_id, body) VALUES ($1, 'admitted')", d.conversation(t, 2))
			require.NoError(t, err)
			markerLock, communityLock := holdsLocks(t, b, d.serving.PgConn().PID(), 2)
			require.Equal(t, [2]bool{false, false}, [2]bool{markerLock, communityLock}, "the dormant fence takes no lock")

			conn, _ := executorConn(t, b)
			switch variant {
			case "as installed":
				err = d.quiesceOn(ctx, conn, 2)
				requireSQLState(t, err, pgerrcode.LockNotAvailable, "write fence drain of svc.messages gave up after 250ms")
				var pgErr *pgconn.PgError
				require.ErrorAs(t, err, &pgErr)
				require.Contains(t, pgErr.Detail, "held by pid")
				require.Equal(t, "messages", pgErr.TableName)
				state, _ := b.communityState(t, tenantUUID(2))
				require.Equal(t, "active", state)
				require.True(t, dormant(t, b))
				require.NoError(t, writer.Commit(ctx))
				require.NoError(t, d.quiesceOn(ctx, conn, 2))
			case "without the drain":
				err = d.quiesceWithoutDrain(ctx, conn, 2)
				requireSQLState(t, err, pgerrcode.ObjectNotInPrerequisiteState,
					"community 2 cannot leave active: the write fence is dormant, and this transaction has not drained the writers of svc.conversations, svc.messages")
				require.True(t, dormant(t, b))
				require.NoError(t, writer.Commit(ctx))
				return
			default:
				require.NoError(t, d.quiesceWithoutDrain(ctx, conn, 2), "nothing waits for the open write")
				require.NoError(t, writer.Commit(ctx), "a write of a community that left active before it committed")
				var late int
				require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM svc.messages WHERE body = 'admitted'").Scan(&late))
				require.Equal(t, 1, late)
				return
			}
			state, _ := b.communityState(t, tenantUUID(2))
			require.Equal(t, "quiescing", state)
			require.False(t, dormant(t, b))
			var admitted int
			require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM svc.messages WHERE body = 'admitted'").Scan(&admitted))
			require.Equal(t, 1, admitted, "the write committed before the community left active")
			_, err = d.serving.Exec(ctx, "INSERT INTO svc.messages (conversation_id, body) VALUES ($1, 'late')", d.conversation(t, 2))
			requireSQLState(t, err, sqlstateFenced, "community write to messages refused: community 2 is quiescing")
			_, err = d.serving.Exec(ctx, "INSERT INTO svc.conversations (account_id, body) VALUES (2, 'late')")
			requireSQLState(t, err, sqlstateFenced, "community write to conversations refused: community 2 is quiescing")
			_, err = d.serving.Exec(ctx, "INSERT INTO svc.conversations (account_id, body) VALUES (1, 'bystander')")
			require.NoError(t, err)
		})
	}
}

// The fence stays armed while any community is quiescing or fenced, and a
// settle that finds none makes it dormant again; dormant, it still refuses
// REPEATABLE READ (25000), a deleted tenant's key is refused by the foreign
// key (23503), and neither the service's roles nor its owner can arm or
// disarm it (42501).
func TestSettleMakesTheFenceDormantOnlyWhenNothingIsInFlight(t *testing.T) {
	t.Parallel()
	d := newBoundDeployment(t)
	b := d.b
	ctx := t.Context()
	_, settle := operatorSettle(t, b)
	b.walkTenant(t, 2, "quiescing")
	b.walkTenant(t, 3, "fenced")
	require.False(t, dormant(t, b))
	settle()
	require.False(t, dormant(t, b), "two communities in flight")

	// Tenant 3 deleted, tenant 2 back to active by an abort.
	d.purgeAndTombstone(t, 3)
	require.Equal(t, fenceBits(t, b, 2), settle())
	require.False(t, dormant(t, b), "tenant 2 still quiescing")
	d.abortDeletion(t, 2)
	state, _ := b.communityState(t, tenantUUID(2))
	require.Equal(t, "active", state)
	require.Zero(t, settle())
	require.True(t, dormant(t, b), "nothing in flight: dormant again")
	require.Empty(t, rawDrift(t, b))

	_, err := d.serving.Exec(ctx, "INSERT INTO svc.conversations (account_id, body) VALUES (2, 'again')")
	require.NoError(t, err)
	_, err = d.serving.Exec(ctx, "INSERT INTO svc.conversations (account_id, body) VALUES (3, 'late')")
	requireSQLState(t, err, pgerrcode.ForeignKeyViolation, "conversations_account_id_fkey")
	_, err = d.serving.Exec(ctx, "WITH c AS (INSERT INTO svc.conversations (account_id, body) VALUES (1, 'parent') RETURNING id) INSERT INTO svc.messages (conversation_id, body) SELECT id, 'child' FROM c")
	require.NoError(t, err)
	// Dormant, the fence still refuses REPEATABLE READ, for every kind of
	// write, on a table with its own key and on a child table: as the
	// service's login, and as the login that owns the tables, granted the
	// serving role as docs/adopting.md asks (without it the owner is
	// refused with 42501 before the fence decides).
	require.NoError(t, b.exec(t, "GRANT community_deletion_serving TO "+d.owner.name))
	for _, session := range []*pgx.Conn{d.serving, d.owner.conn} {
		for _, write := range []string{
			"INSERT INTO svc.conversations (account_id, body) VALUES (1, 'rr')",
			"UPDATE svc.conversations SET body = 'rr' WHERE account_id = 1",
			"DELETE FROM svc.conversations WHERE body = 'again'",
			"UPDATE svc.messages SET body = 'rr'",
			"DELETE FROM svc.messages",
		} {
			tx, err := session.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
			require.NoError(t, err)
			_, err = tx.Exec(ctx, write)
			requireSQLState(t, err, sqlstateIsolation, "pins a snapshot")
			require.NoError(t, tx.Rollback(ctx))
		}
	}

	// The service's login and owner, the executor and an operator.
	sessions := []*pgx.Conn{d.serving, d.owner.conn, roleSession(t, b, fixture.RoleExecutor), roleSession(t, b, fixture.RoleOperator)}
	for i, session := range sessions {
		for _, body := range []string{"SELECT true", "SELECT false"} {
			_, err = session.Exec(ctx, "CREATE OR REPLACE FUNCTION community_deletion.community_deletion_fence_armed() RETURNS boolean LANGUAGE sql STABLE AS $$ "+body+" $$")
			requireSQLState(t, err, pgerrcode.InsufficientPrivilege, "permission denied for schema community_deletion")
		}
		fns := []string{"community_deletion_fence_set_armed(true)", "community_deletion_fence_set_armed(false)"}
		if i != 2 {
			fns = append(fns, "community_deletion_fence_drain()") // the executor's, for its quiesce
		}
		for _, fn := range fns {
			_, err = session.Exec(ctx, "SELECT community_deletion."+fn)
			requireSQLState(t, err, pgerrcode.InsufficientPrivilege, "permission denied for function")
		}
	}
	require.True(t, dormant(t, b))
}

// The drift report sees the armed constant as installed, names a dormant
// fence while a community is in flight (here the schema's owner replaced
// it, which only the DDL guard refuses), and any other body as a changed
// function.
func TestDriftNamesADormantFenceInFlightAndAForeignConstant(t *testing.T) {
	t.Parallel()
	d := newBoundDeployment(t)
	b := d.b
	b.walkTenant(t, 2, "quiescing")
	require.False(t, dormant(t, b))
	require.Empty(t, rawDrift(t, b), "armed is as installed")

	const replace = "CREATE OR REPLACE FUNCTION community_deletion.community_deletion_fence_armed() RETURNS boolean LANGUAGE sql STABLE AS $$ %s $$"
	require.NoError(t, b.exec(t, fmt.Sprintf(replace, "SELECT false")))
	require.Equal(t, []driftRow{{"community_deletion_fence_armed()",
		"fence_dormant: community 2 is quiescing, but the write fence is dormant, so bound tables would admit its writes; " +
			"abort its deletion (its next quiesce arms the fence) and find who replaced community_deletion_fence_armed()"}}, rawDrift(t, b))

	require.NoError(t, b.exec(t, fmt.Sprintf(replace, "SELECT 1 = 1")))
	require.Contains(t, rawDrift(t, b), driftRow{"community_deletion_fence_armed()", "function_changed"})
}

// With the DDL guard installed, the deletion still arms and disarms the
// fence, and nobody else replaces its constant (42501), not even the
// schema's owner: not without the fence marker's lock, not armed without
// the drain, not dormant while a community is in flight, and with no body
// but its two.
func TestDDLGuardLetsOnlyTheDeletionArmAndDisarmTheFence(t *testing.T) {
	t.Parallel()
	d := newBoundDeployment(t)
	b := d.b
	ctx := t.Context()
	installDDLGuard(t, b)
	replace := func(body string, prepare ...string) error {
		t.Helper()
		return pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			for _, sql := range prepare {
				if _, err := tx.Exec(ctx, sql); err != nil {
					return err
				}
			}
			_, err := tx.Exec(ctx, "CREATE OR REPLACE FUNCTION community_deletion.community_deletion_fence_armed() RETURNS boolean LANGUAGE sql STABLE AS $$ "+body+" $$")
			return err
		})
	}
	const markerLock = "SELECT community_deletion.community_deletion_fence_marker_lock()"
	requireSQLState(t, replace("SELECT true"), pgerrcode.InsufficientPrivilege, "without the fence marker's lock")
	requireSQLState(t, replace("SELECT true", markerLock), pgerrcode.InsufficientPrivilege, "arms the fence without draining it")
	requireSQLState(t, replace("SELECT 1 = 1", markerLock), pgerrcode.InsufficientPrivilege, "a body the migrations did not install")
	require.True(t, dormant(t, b))

	b.walkTenant(t, 2, "quiescing")
	require.False(t, dormant(t, b), "the deletion armed it through the guard")
	requireSQLState(t, replace("SELECT false", markerLock), pgerrcode.InsufficientPrivilege,
		"makes the fence dormant while a community is quiescing or fenced")
	require.False(t, dormant(t, b))

	d.abortDeletion(t, 2)
	_, settle := operatorSettle(t, b)
	require.Zero(t, settle())
	require.True(t, dormant(t, b), "the settle disarmed it through the guard")
	require.Empty(t, rawDrift(t, b))
}

// A table attached, and written, in a transaction still open has a fence
// the drain cannot see yet; registration holds the fence marker's lock
// shared until that transaction ends, so a community leaving active waits
// for it, and its rows are in before the community is quiescing. Without
// that lock the quiesce commits first and the open transaction's row lands
// in a quiescing community: the second subtest shows this test would catch
// it.
func TestQuiesceWaitsForATableAttachedInAnOpenTransaction(t *testing.T) {
	t.Parallel()
	for _, unlocked := range []bool{false, true} {
		name := "as installed"
		if unlocked {
			name = "a registration without the marker's lock admits a late write"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			d := newBoundDeployment(t)
			b := d.b
			ctx := t.Context()
			d.approveDeletion(t, 2)
			if unlocked {
				var def string
				require.NoError(t, b.pool.QueryRow(ctx,
					"SELECT pg_get_functiondef('community_deletion.community_deletion_register_table(regclass,text,name)'::regprocedure)").Scan(&def))
				const lock = "    PERFORM pg_advisory_xact_lock_shared(1668246884, 1718510437);\n"
				require.Equal(t, 1, strings.Count(def, lock))
				require.NoError(t, b.exec(t, strings.Replace(def, lock, "", 1)))
			}
			attach, err := d.owner.conn.Begin(ctx)
			require.NoError(t, err)
			for _, sql := range []string{
				"CREATE TABLE svc.labels (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, account_id bigint NOT NULL REFERENCES svc.accounts (id), body text)",
				"GRANT SELECT, INSERT, UPDATE, DELETE ON svc.labels TO community_deletion_serving",
				"SELECT community_deletion.attach_community_write_fence('svc.labels', 'delete', 'account_id')",
				"INSERT INTO svc.labels (account_id, body) VALUES (2, 'admitted')",
			} {
				_, err := attach.Exec(ctx, sql)
				require.NoError(t, err, sql)
			}

			conn, pid := executorConn(t, b)
			done := make(chan error, 1)
			go func() { done <- d.quiesceOn(ctx, conn, 2) }()
			if unlocked {
				require.NoError(t, <-done, "nothing waits for the open attach")
				require.NoError(t, attach.Commit(ctx), "a row of a community that left active before it committed")
				state, _ := b.communityState(t, tenantUUID(2))
				require.Equal(t, "quiescing", state)
				return
			}
			requireWaitingOnMarker(t, b, pid)
			require.NoError(t, attach.Commit(ctx))
			require.NoError(t, <-done)
			state, _ := b.communityState(t, tenantUUID(2))
			require.Equal(t, "quiescing", state)
			_, err = d.serving.Exec(ctx, "INSERT INTO svc.labels (account_id, body) VALUES (2, 'late')")
			requireSQLState(t, err, sqlstateFenced, "community write to labels refused: community 2 is quiescing")
		})
	}
}
