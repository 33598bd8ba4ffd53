package integration

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/fixture"
)

// The near-free path of the write fence (migration 00029;
// docs/invariants.md, "The near-free path"): a fence bound by a foreign key
// admits a READ COMMITTED statement without a query while the fence
// marker, read after the marker's lock is taken shared, holds no bit the
// statement's tenants have. These tests attack the window between the
// marker's lock and its read, the arming of a community leaving active, and
// the settle that clears bits.

// boundDeployment is a service keyed by a bigint account id: conversations
// bound by a foreign key to accounts, messages attached through
// conversations by a foreign key (bound too), notes keyed by account_id
// without a foreign key (full fence). Tenants 1 and 3 stay active; 2 is the
// one a test deletes.
type boundDeployment struct {
	b       *testBundle
	owner   serviceOwner
	serving *pgx.Conn
}

func newBoundDeployment(t *testing.T) *boundDeployment {
	t.Helper()
	b := setupBare(t)
	owner := newServiceOwner(t, b)
	owner.run(t,
		"CREATE TABLE svc.accounts (id bigint PRIMARY KEY, name text NOT NULL)",
		"CREATE TABLE svc.conversations (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, account_id bigint NOT NULL REFERENCES svc.accounts (id), body text)",
		"CREATE TABLE svc.messages (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, conversation_id bigint NOT NULL REFERENCES svc.conversations (id), body text)",
		"CREATE TABLE svc.notes (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, account_id bigint NOT NULL, body text)",
		"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA svc TO community_deletion_serving",
		"SELECT community_deletion.declare_tenant_table('svc.accounts')",
		"SELECT community_deletion.attach_community_write_fence('svc.conversations', 'delete', 'account_id')",
		"SELECT community_deletion.attach_community_write_fence('svc.notes', 'delete', 'account_id')",
		"SELECT community_deletion.attach_child_table('svc.messages')",
	)
	serving := roleSession(t, b, fixture.RoleServing)
	for _, key := range []int{1, 2, 3} {
		_, err := serving.Exec(t.Context(), "INSERT INTO svc.accounts (id, name) VALUES ($1, 'acct')", key)
		require.NoError(t, err)
		_, err = serving.Exec(t.Context(), "INSERT INTO svc.conversations (account_id, body) VALUES ($1, 'first')", key)
		require.NoError(t, err)
	}
	require.Empty(t, rawDrift(t, b))
	return &boundDeployment{b: b, owner: owner, serving: serving}
}

// conversation is the id of tenant key's first conversation.
func (d *boundDeployment) conversation(t *testing.T, key int) int64 {
	t.Helper()
	var id int64
	require.NoError(t, d.b.pool.QueryRow(t.Context(), "SELECT min(id) FROM svc.conversations WHERE account_id = $1", key).Scan(&id))
	return id
}

// marker is the fence marker's value.
func marker(t *testing.T, b *testBundle) int64 {
	t.Helper()
	var m int64
	require.NoError(t, b.pool.QueryRow(t.Context(),
		"SELECT pg_sequence_last_value('community_deletion.community_deletion_fence_marker')").Scan(&m))
	return m
}

// fenceBits is the marker bits of tenant key's community, by the
// database's own function, from its lifecycle row.
func fenceBits(t *testing.T, b *testBundle, key int) int64 {
	t.Helper()
	var bits int64
	require.NoError(t, b.pool.QueryRow(t.Context(),
		"SELECT community_deletion_fence_bits(c.id, c.tenant_key) FROM community_deletion.communities c WHERE c.id = $1",
		tenantUUID(key)).Scan(&bits))
	return bits
}

// holdsLocks reports, for the open transaction of conn, whether it holds
// the marker's lock and the community lock of tenant key.
func holdsLocks(t *testing.T, b *testBundle, pid uint32, key int) (markerLock, communityLock bool) {
	t.Helper()
	require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT
		EXISTS (SELECT 1 FROM pg_locks WHERE pid = $1 AND locktype = 'advisory' AND granted
		        AND classid = 1668246884 AND objid = 1718510437 AND objsubid = 2),
		EXISTS (SELECT 1 FROM pg_locks WHERE pid = $1 AND locktype = 'advisory' AND granted AND objsubid = 1
		        AND ((classid::bigint << 32) | objid::bigint) = community_deletion_lock_key($2))`,
		int32(pid), tenantUUID(key)).Scan(&markerLock, &communityLock))
	return markerLock, communityLock
}

// requireWaitingOnMarker waits until backend pid waits for the marker's lock.
func requireWaitingOnMarker(t *testing.T, b *testBundle, pid uint32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for {
		var waiting bool
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE pid = $1 AND NOT granted
			AND locktype = 'advisory' AND classid = 1668246884 AND objid = 1718510437 AND objsubid = 2)`, int32(pid)).Scan(&waiting))
		if waiting {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("backend %d never waited for the fence marker's lock", pid)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// quiesceOn runs the quiesce of tenant key on conn (the executor's login),
// as BeginQuiescing does: the marker's lock, the dormant fence's drain,
// then the state.
func (d *boundDeployment) quiesceOn(ctx context.Context, conn *pgx.Conn, key int) error {
	community := tenantUUID(key)
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if err := setExecutor(ctx, tx, community, 0); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "SELECT community_deletion.community_deletion_fence_marker_lock()"); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "SELECT community_deletion.community_deletion_fence_drain()"); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "UPDATE community_deletion.communities SET deletion_state = 'quiescing', archived_at = now() WHERE id = $1", community)
		return err
	})
}

// operatorSettle is an operator's session and a settle of the fence marker
// on it, which returns the marker.
func operatorSettle(t *testing.T, b *testBundle) (*pgx.Conn, func() int64) {
	t.Helper()
	operator := roleSession(t, b, fixture.RoleOperator)
	return operator, func() int64 {
		t.Helper()
		var m int64
		require.NoError(t, operator.QueryRow(t.Context(), "SELECT community_deletion.community_deletion_settle_fence_marker()").Scan(&m))
		return m
	}
}

// dormant reports whether the write fence is dormant (migration 00035).
func dormant(t *testing.T, b *testBundle) bool {
	t.Helper()
	var d bool
	require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT community_deletion.community_deletion_fence_dormant()").Scan(&d))
	return d
}

// executorConn is a connection of the executor's login and its backend pid.
func executorConn(t *testing.T, b *testBundle) (*pgx.Conn, uint32) {
	t.Helper()
	conn := roleSession(t, b, fixture.RoleExecutor)
	return conn, conn.PgConn().PID()
}

// A bound table's fence carries 'bound' while its foreign key holds; a
// table with no foreign key to the tenant table, and the tenant table
// itself, carry the full arguments, and the notes name the former. Without
// its foreign key a bound table is drift until attached again, which gives
// it the full arguments.
func TestNearFreeFenceIsBoundByAForeignKey(t *testing.T) {
	t.Parallel()
	d := newBoundDeployment(t)
	b := d.b
	args := func(table string) string {
		var a string
		require.NoError(t, b.pool.QueryRow(t.Context(), `SELECT t.tgnargs || ':' || encode(t.tgargs, 'escape') FROM pg_trigger t
			WHERE t.tgrelid = $1::regclass AND t.tgname = 'community_write_fence_insert'`, "svc."+table).Scan(&a))
		return a
	}
	require.Equal(t, `3:account_id\000integer\000bound\000`, args("conversations"))
	require.True(t, strings.HasPrefix(args("messages"), `3:through\000`), args("messages"))
	require.True(t, strings.HasSuffix(args("messages"), `\000bound\000`), args("messages"))
	require.Equal(t, `2:account_id\000integer\000`, args("notes"))
	require.Equal(t, `2:id\000integer\000`, args("accounts"))
	require.Equal(t, []string{"notes: its fence checks every write's tenants (two queries a statement); a foreign key from account_id " +
		"to svc.accounts (id) would let writes skip the check while no deletion is in flight; add one and attach the table again"},
		fenceCostNotes(t, b))

	d.owner.run(t, "ALTER TABLE svc.conversations DROP CONSTRAINT conversations_account_id_fkey")
	require.Contains(t, rawDrift(t, b), driftRow{"conversations", "unbound: its fence skips the tenant check while no deletion is in flight, " +
		"which is safe only while a foreign key from account_id to the tenant table's key keeps a deleted tenant's rows out; " +
		"add it back, or attach svc.conversations again to fence every write in full"})
	d.owner.run(t, "SELECT community_deletion.attach_community_write_fence('svc.conversations', 'delete', 'account_id')")
	require.Equal(t, `2:account_id\000integer\000`, args("conversations"))
	require.Empty(t, rawDrift(t, b))

	d.owner.run(t, "ALTER TABLE svc.conversations ADD FOREIGN KEY (account_id) REFERENCES svc.accounts (id)")
	require.Contains(t, fenceCostNotes(t, b), "conversations: its fence checks every write's tenants although a foreign key binds it: "+
		"attach svc.conversations again to let writes skip the check while no deletion is in flight")
	d.owner.run(t, "SELECT community_deletion.attach_community_write_fence('svc.conversations', 'delete', 'account_id')")
	require.Equal(t, `3:account_id\000integer\000bound\000`, args("conversations"))
	require.Empty(t, rawDrift(t, b))
}

// While nothing is in flight the fence is dormant, and a bound table's
// write takes no lock at all; while another tenant is in flight (the fence
// armed) it takes the marker's lock for a tenant whose bit the marker lacks, and the full path (the
// community's lock) for the tenant in flight, which it refuses. A table
// without a foreign key always takes the full path.
func TestNearFreeFenceTakesItsPathOnlyWhileItMay(t *testing.T) {
	t.Parallel()
	d := newBoundDeployment(t)
	b := d.b
	ctx := t.Context()
	require.Zero(t, marker(t, b))
	require.True(t, dormant(t, b), "nothing in flight: the fence is dormant")
	pid := d.serving.PgConn().PID()
	inTx := func(sql string, args ...any) (markerLock, communityLock bool, err error) {
		tx, err := d.serving.Begin(ctx)
		require.NoError(t, err)
		defer func() { require.NoError(t, tx.Rollback(ctx)) }()
		if _, err := tx.Exec(ctx, sql, args...); err != nil {
			return false, false, err
		}
		markerLock, communityLock = holdsLocks(t, b, pid, args[0].(int))
		return markerLock, communityLock, nil
	}
	insertConversation := "INSERT INTO svc.conversations (account_id, body) VALUES ($1, 'w')"
	m, c, err := inTx(insertConversation, 1)
	require.NoError(t, err)
	require.Equal(t, [2]bool{false, false}, [2]bool{m, c}, "a bound write while nothing is in flight: no lock, the fence is dormant")
	m, c, err = inTx("INSERT INTO svc.notes (account_id, body) VALUES ($1, 'w')", 1)
	require.NoError(t, err)
	require.Equal(t, [2]bool{false, true}, [2]bool{m, c}, "a write of a table no foreign key binds: the community's lock")
	requireRepeatableReadRefused := func() {
		t.Helper()
		tx, err := d.serving.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
		require.NoError(t, err)
		_, err = tx.Exec(ctx, insertConversation, 3)
		requireSQLState(t, err, sqlstateIsolation, "pins a snapshot")
		require.NoError(t, tx.Rollback(ctx))
	}
	requireRepeatableReadRefused()

	b.walkTenant(t, 2, "fenced")
	require.Equal(t, fenceBits(t, b, 2), marker(t, b))
	require.False(t, dormant(t, b), "a community left active: the fence is armed")
	require.Zero(t, fenceBits(t, b, 1)&fenceBits(t, b, 2), "the test's tenants need bits of their own")
	m, c, err = inTx(insertConversation, 1)
	require.NoError(t, err)
	require.Equal(t, [2]bool{true, false}, [2]bool{m, c}, "another tenant in flight: still the near-free path")
	_, _, err = inTx(insertConversation, 2)
	requireSQLState(t, err, sqlstateFenced, "community write to conversations refused: community 2 is fenced")
	_, err = d.serving.Exec(ctx, "INSERT INTO svc.messages (conversation_id, body) VALUES ($1, 'late')", d.conversation(t, 2))
	requireSQLState(t, err, sqlstateFenced, "community write to messages refused: community 2 is fenced")
	_, err = d.serving.Exec(ctx, "INSERT INTO svc.messages (conversation_id, body) VALUES ($1, 'ok')", d.conversation(t, 3))
	require.NoError(t, err)
	requireRepeatableReadRefused()
}

// approveDeletion submits and approves the deletion of tenant key, so that
// its quiesce is a lifecycle step.
func (d *boundDeployment) approveDeletion(t *testing.T, key int) {
	t.Helper()
	request := d.b.submit(t, tenantUUID(key), "requester")
	d.b.freeze(t, request)
	d.b.approve(t, request, "approver")
}

// rowsOf counts tenant key's conversations whose body is body.
func (d *boundDeployment) rowsOf(t *testing.T, key int, body string) int {
	t.Helper()
	var n int
	require.NoError(t, d.b.pool.QueryRow(t.Context(), "SELECT count(*) FROM svc.conversations WHERE account_id = $1 AND body = $2",
		key, body).Scan(&n))
	return n
}

// With the fence armed (another tenant in flight), a community leaving
// active waits for every transaction that wrote on the near-free path,
// whether the executor took the marker's lock first (as BeginQuiescing
// does) or the trigger takes it; once it is quiescing every write of it is
// refused, through a child table too.
func TestQuiesceWaitsForWritesAdmittedOnTheNearFreePath(t *testing.T) {
	t.Parallel()
	for _, executorLocksFirst := range []bool{true, false} {
		t.Run(fmt.Sprintf("executor locks the marker first: %t", executorLocksFirst), func(t *testing.T) {
			t.Parallel()
			d := newBoundDeployment(t)
			b := d.b
			ctx := t.Context()
			b.walkTenant(t, 3, "quiescing")
			require.False(t, dormant(t, b))
			d.approveDeletion(t, 2)
			writer, err := d.serving.Begin(ctx)
			require.NoError(t, err)
			_, err = writer.Exec(ctx, "INSERT INTO svc.conversations (account_id, body) VALUES (2, 'admitted')")
			require.NoError(t, err)

			conn, pid := executorConn(t, b)
			done := make(chan error, 1)
			go func() {
				if executorLocksFirst {
					done <- d.quiesceOn(ctx, conn, 2)
					return
				}
				done <- pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
					if err := setExecutor(ctx, tx, tenantUUID(2), 0); err != nil {
						return err
					}
					_, err := tx.Exec(ctx, "UPDATE community_deletion.communities SET deletion_state = 'quiescing' WHERE id = $1", tenantUUID(2))
					return err
				})
			}()
			requireWaitingOnMarker(t, b, pid)
			require.NoError(t, writer.Commit(ctx))
			require.NoError(t, <-done)
			state, _ := b.communityState(t, tenantUUID(2))
			require.Equal(t, "quiescing", state)
			require.Equal(t, 1, d.rowsOf(t, 2, "admitted"))
			require.Equal(t, fenceBits(t, b, 2), marker(t, b)&fenceBits(t, b, 2))

			_, err = d.serving.Exec(ctx, "INSERT INTO svc.conversations (account_id, body) VALUES (2, 'late')")
			requireSQLState(t, err, sqlstateFenced, "community write to conversations refused: community 2 is quiescing")
			_, err = d.serving.Exec(ctx, "INSERT INTO svc.messages (conversation_id, body) VALUES ($1, 'late')", d.conversation(t, 2))
			requireSQLState(t, err, sqlstateFenced, "community write to messages refused: community 2 is quiescing")
			_, err = d.serving.Exec(ctx, "INSERT INTO svc.conversations (account_id, body) VALUES (1, 'bystander')")
			require.NoError(t, err)
		})
	}
}

// The fence reads the marker only after it holds the marker's lock: a
// writer paused between the two (by a pause put into the installed fence
// right after its read) holds the lock, so a quiesce waits for it and its
// write lands before the community leaves active. The same pause in a fence
// that read the marker before taking the lock lets the quiesce commit first
// and the paused write in after it: the subtest shows this test would catch
// that order.
func TestNearFreeFenceReadsTheMarkerUnderItsLock(t *testing.T) {
	t.Parallel()
	const pause = "PERFORM pg_catalog.pg_advisory_xact_lock_shared(4242, 4242);"
	lockThenRead := regexp.MustCompile(`(?m)^(\s*)(IF pg_catalog\.pg_try_advisory_xact_lock_shared\(1668246884, 1718510437\) THEN)\n` +
		`(\s*)(marker := pg_catalog\.pg_sequence_last_value\('community_deletion\.community_deletion_fence_marker'::pg_catalog\.regclass\);)\n`)
	for _, readFirst := range []bool{false, true} {
		name := "as installed"
		if readFirst {
			name = "a fence that read the marker before its lock admits a late write"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			d := newBoundDeployment(t)
			b := d.b
			ctx := t.Context()
			b.walkTenant(t, 3, "quiescing") // arms the fence, so writes read the marker
			d.approveDeletion(t, 2)
			var def string
			require.NoError(t, b.pool.QueryRow(ctx,
				"SELECT pg_get_functiondef('community_deletion.enforce_community_write_fence()'::regprocedure)").Scan(&def))
			require.Len(t, lockThenRead.FindAllString(def, -1), 1, "the statement fence takes the marker's lock, then reads it")
			replacement := "${1}${2}\n${3}${4}\n${3}" + pause + "\n"
			if readFirst {
				replacement = "${1}${4}\n${1}" + pause + "\n${1}${2}\n"
			}
			require.NoError(t, b.exec(t, lockThenRead.ReplaceAllString(def, replacement)))

			hold, err := b.pool.Begin(ctx)
			require.NoError(t, err)
			_, err = hold.Exec(ctx, "SELECT pg_advisory_xact_lock(4242, 4242)")
			require.NoError(t, err)
			writerPID := d.serving.PgConn().PID()
			wrote := make(chan error, 1)
			go func() {
				_, err := d.serving.Exec(ctx, "INSERT INTO svc.conversations (account_id, body) VALUES (2, 'paused')")
				wrote <- err
			}()
			requireWaitingOnLock(t, b, writerPID)

			conn, pid := executorConn(t, b)
			quiesced := make(chan error, 1)
			go func() { quiesced <- d.quiesceOn(ctx, conn, 2) }()
			if readFirst {
				require.NoError(t, <-quiesced, "nothing holds the marker's lock, so the quiesce commits")
				require.NoError(t, hold.Rollback(ctx))
				require.NoError(t, <-wrote)
				require.Equal(t, 1, d.rowsOf(t, 2, "paused"), "a row of a quiescing community, written after it left active")
				return
			}
			requireWaitingOnMarker(t, b, pid)
			require.NoError(t, hold.Rollback(ctx))
			require.NoError(t, <-wrote, "the paused write was admitted while the community was active")
			require.NoError(t, <-quiesced)
			state, _ := b.communityState(t, tenantUUID(2))
			require.Equal(t, "quiescing", state)
			_, err = d.serving.Exec(ctx, "INSERT INTO svc.conversations (account_id, body) VALUES (2, 'late')")
			requireSQLState(t, err, sqlstateFenced, "community 2 is quiescing")
		})
	}
}

// A settle never clears the bit of a community whose move out of active has
// not committed: it waits for the marker's lock, which that move holds, and
// reads the states after it. A settle that did not take the lock would read
// the community as active, clear its bit, and let a write of it in on the
// near-free path once it is quiescing; the drift report then names the
// marker.
func TestSettleNeverClearsTheBitOfACommunityLeavingActive(t *testing.T) {
	t.Parallel()
	for _, unlocked := range []bool{false, true} {
		name := "as installed"
		if unlocked {
			name = "a settle without the marker's lock clears a bit it must keep"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			d := newBoundDeployment(t)
			b := d.b
			ctx := t.Context()
			b.walkTenant(t, 3, "quiescing") // arms the fence, so writes read the marker
			bit2, bit3 := fenceBits(t, b, 2), fenceBits(t, b, 3)
			d.approveDeletion(t, 2)
			if unlocked {
				var def string
				require.NoError(t, b.pool.QueryRow(ctx,
					"SELECT pg_get_functiondef('community_deletion.community_deletion_settle_fence_marker()'::regprocedure)").Scan(&def))
				const lock = "    PERFORM community_deletion_fence_marker_lock();\n"
				require.Equal(t, 1, strings.Count(def, lock))
				require.NoError(t, b.exec(t, strings.Replace(def, lock, "", 1)))
			}

			mover, _ := executorConn(t, b)
			tx, err := mover.Begin(ctx)
			require.NoError(t, err)
			require.NoError(t, setExecutor(ctx, tx, tenantUUID(2), 0))
			_, err = tx.Exec(ctx, "SELECT community_deletion.community_deletion_fence_marker_lock()")
			require.NoError(t, err)
			_, err = tx.Exec(ctx, "UPDATE community_deletion.communities SET deletion_state = 'quiescing' WHERE id = $1", tenantUUID(2))
			require.NoError(t, err)
			require.Equal(t, bit2|bit3, marker(t, b), "the bit is set before the state commits")

			operator := roleSession(t, b, fixture.RoleOperator)
			settled := make(chan int64, 1)
			go func() {
				var m int64
				err := operator.QueryRow(ctx, "SELECT community_deletion.community_deletion_settle_fence_marker()").Scan(&m)
				if err != nil {
					m = -1
				}
				settled <- m
			}()
			if unlocked {
				require.Equal(t, bit3, <-settled)
				require.NoError(t, tx.Commit(ctx))
				_, err = d.serving.Exec(ctx, "INSERT INTO svc.conversations (account_id, body) VALUES (2, 'late')")
				require.NoError(t, err, "a write of a quiescing community, admitted on the near-free path")
				require.Contains(t, rawDrift(t, b), driftRow{"community_deletion_fence_marker",
					"fence_marker: community 2 is quiescing, but the fence marker lacks its bits, so bound tables would admit its writes; " +
						"run SELECT community_deletion.community_deletion_settle_fence_marker()"})
				return
			}
			requireWaitingOnMarker(t, b, operator.PgConn().PID())
			require.NoError(t, tx.Commit(ctx))
			require.Equal(t, bit2|bit3, <-settled)
			require.Equal(t, bit2|bit3, marker(t, b))
			_, err = d.serving.Exec(ctx, "INSERT INTO svc.conversations (account_id, body) VALUES (2, 'late')")
			requireSQLState(t, err, sqlstateFenced, "community 2 is quiescing")
			require.Empty(t, rawDrift(t, b))
		})
	}
}

// A settle clears the bits of communities back to active or deleted, and
// only theirs; it returns at once, without the marker's lock, when there is
// nothing to clear, even while a writer holds that lock; it runs only in a
// READ COMMITTED transaction of its own (25000, 55000), and only for the
// deletion's roles (42501). The drift report names a marker that lacks a
// bit, which a settle restores.
func TestSettleClearsOnlyWhatIsNoLongerInFlight(t *testing.T) {
	t.Parallel()
	d := newBoundDeployment(t)
	b := d.b
	ctx := t.Context()
	operator, settle := operatorSettle(t, b)

	b.walkTenant(t, 2, "quiescing")
	b.walkTenant(t, 3, "fenced")
	both := fenceBits(t, b, 2) | fenceBits(t, b, 3)
	require.Equal(t, both, marker(t, b))
	require.Equal(t, both, settle())

	// The marker reset by its owner: drift names each community in flight
	// it lacks; a settle puts them back.
	require.NoError(t, b.exec(t, "SELECT setval('community_deletion.community_deletion_fence_marker', 0)"))
	report := rawDrift(t, b)
	require.Contains(t, report, driftRow{"community_deletion_fence_marker", "fence_marker: community 2 is quiescing, but the fence marker " +
		"lacks its bits, so bound tables would admit its writes; run SELECT community_deletion.community_deletion_settle_fence_marker()"})
	require.Contains(t, report, driftRow{"community_deletion_fence_marker", "fence_marker: community 3 is fenced, but the fence marker " +
		"lacks its bits, so bound tables would admit its writes; run SELECT community_deletion.community_deletion_settle_fence_marker()"})
	require.Equal(t, both, settle())
	require.Empty(t, rawDrift(t, b))

	// Tenant 3 deleted: its bit goes at the next settle; its key stays
	// refused by the foreign key while the marker is 0 for it.
	d.purgeAndTombstone(t, 3)
	require.Equal(t, both, marker(t, b), "only a settle clears a bit")
	require.Equal(t, fenceBits(t, b, 2), settle())
	_, err := d.serving.Exec(ctx, "INSERT INTO svc.conversations (account_id, body) VALUES (3, 'late')")
	requireSQLState(t, err, pgerrcode.ForeignKeyViolation, "conversations_account_id_fkey")

	// Nothing to clear: a settle returns at once although a writer holds
	// the marker's lock shared.
	writer, err := d.serving.Begin(ctx)
	require.NoError(t, err)
	_, err = writer.Exec(ctx, "INSERT INTO svc.conversations (account_id, body) VALUES (1, 'open')")
	require.NoError(t, err)
	markerLock, _ := holdsLocks(t, b, d.serving.PgConn().PID(), 1)
	require.True(t, markerLock)
	require.Equal(t, fenceBits(t, b, 2), settle())
	require.NoError(t, writer.Rollback(ctx))

	// Refused where it could read uncommitted or stale states, and to the
	// service's roles.
	tx, err := operator.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "SELECT set_config('application_name', 'x', true), txid_current()")
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "SELECT community_deletion.community_deletion_settle_fence_marker()")
	requireSQLState(t, err, pgerrcode.ObjectNotInPrerequisiteState, "settle in a transaction of its own")
	require.NoError(t, tx.Rollback(ctx))
	tx, err = operator.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "SELECT community_deletion.community_deletion_settle_fence_marker()")
	requireSQLState(t, err, pgerrcode.InvalidTransactionState, "settle at READ COMMITTED")
	require.NoError(t, tx.Rollback(ctx))
	for _, role := range []fixture.Role{fixture.RoleServing} {
		_, err := roleSession(t, b, role).Exec(ctx, "SELECT community_deletion.community_deletion_settle_fence_marker()")
		requireSQLState(t, err, pgerrcode.InsufficientPrivilege, "permission denied")
	}
	_, err = d.owner.conn.Exec(ctx, "SELECT community_deletion.community_deletion_settle_fence_marker()")
	requireSQLState(t, err, pgerrcode.InsufficientPrivilege, "permission denied")
	_, err = d.owner.conn.Exec(ctx, "SELECT setval('community_deletion.community_deletion_fence_marker', 0)")
	requireSQLState(t, err, pgerrcode.InsufficientPrivilege, "permission denied")
}

// The drift report judges the marker under its lock, with a snapshot taken
// after it: while a settle holds the lock it waits, and then it sees the
// states the settle saw, so a community deleted and settled a moment
// before is not reported as lacking its bit. At REPEATABLE READ its
// snapshot may predate a settle, and it says the marker was not checked.
func TestDriftJudgesTheMarkerUnderItsLock(t *testing.T) {
	t.Parallel()
	d := newBoundDeployment(t)
	b := d.b
	ctx := t.Context()
	b.walkTenant(t, 2, "quiescing")
	b.walkTenant(t, 3, "fenced")
	require.Equal(t, fenceBits(t, b, 2)|fenceBits(t, b, 3), marker(t, b))

	settler, _ := executorConn(t, b)
	settle, err := settler.Begin(ctx)
	require.NoError(t, err)
	_, err = settle.Exec(ctx, "SELECT community_deletion.community_deletion_fence_marker_lock()")
	require.NoError(t, err)

	reader := roleSession(t, b, fixture.RoleOperator)
	reported := make(chan []string, 1)
	go func() {
		var problems []string
		rows, err := reader.Query(ctx, "SELECT problem FROM community_deletion.community_deletion_catalog_drift()")
		if err == nil {
			problems, err = pgx.CollectRows(rows, pgx.RowTo[string])
		}
		if err != nil {
			problems = []string{err.Error()}
		}
		reported <- problems
	}()
	requireWaitingOnMarker(t, b, reader.PgConn().PID())

	// Tenant 3 deleted while the report waits; the settle clears its bit.
	d.purgeAndTombstone(t, 3)
	var settled int64
	require.NoError(t, settle.QueryRow(ctx, "SELECT community_deletion.community_deletion_settle_fence_marker()").Scan(&settled))
	require.Equal(t, fenceBits(t, b, 2), settled)
	require.NoError(t, settle.Commit(ctx))
	require.Empty(t, <-reported, "the report saw the states the settle saw")

	tx, err := reader.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	rows, err := tx.Query(ctx, "SELECT problem FROM community_deletion.community_deletion_catalog_drift()")
	require.NoError(t, err)
	problems, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"fence_marker: not checked at isolation level repeatable read, whose snapshot may predate a settle; run the report at READ COMMITTED"}, problems)
	require.NoError(t, tx.Rollback(ctx))
}
