package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/fixture"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// The drift report's own attack suite, without the DDL guard: each attack
// runs as a non-superuser login that may make it (a tenant table's owner, a
// role granted CREATE on the schema of communities, a control table's owner
// as in a deployment migrated by a non-superuser), leaves a drift row that
// blocks the claim of an approved request durably, and once put back leaves
// no drift and a claimable request again.

// driftAttack is one attack: grants the superuser makes first (the
// deployment's), what the attacker runs, the drift it must leave, and how
// the attacker or the superuser puts it back.
type driftAttack struct {
	name    string
	setup   []string // as the superuser; %[1]s is the attacker's login
	attack  []string // as the attacker
	want    driftRow
	restore []string // as the superuser
}

var driftAttacks = []driftAttack{
	{
		name:   "a role that may read a registered table keeps a materialized copy of it",
		setup:  []string{"GRANT SELECT ON fixture_messages TO %[1]s", "CREATE SCHEMA svc_copies AUTHORIZATION %[1]s"},
		attack: []string{"CREATE MATERIALIZED VIEW svc_copies.message_copy AS SELECT id, body FROM public.fixture_messages"},
		want: driftRow{"svc_copies.message_copy", "unregistered: materialized view svc_copies.message_copy keeps a copy of rows of public.fixture_messages, " +
			"which no deletion purges; drop it, or exclude it with community_deletion.exclude_table('svc_copies.message_copy', reason) if it keeps no tenant's rows"},
		restore: []string{"DROP MATERIALIZED VIEW svc_copies.message_copy"},
	},
	{
		name:  "a materialized view over a view of a registered table",
		setup: []string{"GRANT SELECT ON fixture_messages TO %[1]s", "CREATE SCHEMA svc_copies AUTHORIZATION %[1]s"},
		attack: []string{"CREATE VIEW svc_copies.recent AS SELECT id, body FROM public.fixture_messages",
			"CREATE MATERIALIZED VIEW svc_copies.recent_copy AS SELECT * FROM svc_copies.recent"},
		want: driftRow{"svc_copies.recent_copy", "unregistered: materialized view svc_copies.recent_copy keeps a copy of rows of public.fixture_messages, " +
			"which no deletion purges; drop it, or exclude it with community_deletion.exclude_table('svc_copies.recent_copy', reason) if it keeps no tenant's rows"},
		restore: []string{"DROP MATERIALIZED VIEW svc_copies.recent_copy"},
	},
	{
		name:  "a tenant table's owner exempts one application_name from the insert fence",
		setup: []string{"ALTER TABLE fixture_messages OWNER TO %[1]s"},
		attack: []string{
			"DROP TRIGGER community_write_fence_insert ON fixture_messages",
			`CREATE TRIGGER community_write_fence_insert AFTER INSERT ON fixture_messages
				REFERENCING NEW TABLE AS community_fence_new FOR EACH STATEMENT
				WHEN (current_setting('application_name') <> 'backdoor') EXECUTE FUNCTION enforce_community_write_fence()`,
		},
		want: driftRow{"fixture_messages", "unfenced: fence trigger community_write_fence_insert on fixture_messages has a WHEN clause"},
		restore: []string{"DROP TRIGGER community_write_fence_insert ON fixture_messages",
			"SELECT attach_community_write_fence('fixture_messages')"},
	},
	{
		name:  "a tenant table's owner adds a WHEN-qualified fence beside the whole one",
		setup: []string{"ALTER TABLE fixture_messages OWNER TO %[1]s"},
		attack: []string{`CREATE TRIGGER community_write_fence_insert_more AFTER INSERT ON fixture_messages
				REFERENCING NEW TABLE AS community_fence_new FOR EACH STATEMENT
				WHEN (false) EXECUTE FUNCTION enforce_community_write_fence()`},
		want:    driftRow{"fixture_messages", "unfenced: fence trigger community_write_fence_insert_more on fixture_messages has a WHEN clause"},
		restore: []string{"DROP TRIGGER community_write_fence_insert_more ON fixture_messages"},
	},
	{
		name:  "a tenant table's owner narrows a partition's update fence to one column",
		setup: []string{"ALTER TABLE fixture_activity_default OWNER TO %[1]s"},
		attack: []string{
			"DROP TRIGGER community_write_fence_update ON fixture_activity_default",
			`CREATE TRIGGER community_write_fence_update AFTER UPDATE OF kind ON fixture_activity_default
				FOR EACH STATEMENT EXECUTE FUNCTION enforce_community_write_fence()`,
		},
		want: driftRow{"fixture_activity", "unfenced: fence trigger community_write_fence_update on fixture_activity_default has a column list"},
		restore: []string{"DROP TRIGGER community_write_fence_update ON fixture_activity_default",
			"SELECT attach_community_write_fence('fixture_activity')"},
	},
	{
		name: "a control table's owner adds a trigger that undoes a guard's work",
		setup: []string{"ALTER TABLE community_serving_write_leases OWNER TO %[1]s",
			"GRANT CREATE ON SCHEMA public TO %[1]s"},
		attack: []string{
			`CREATE FUNCTION lease_forever() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN RETURN NULL; END'`,
			`CREATE TRIGGER zz_lease_forever AFTER INSERT ON community_serving_write_leases
				FOR EACH ROW EXECUTE FUNCTION lease_forever()`,
		},
		want: driftRow{"community_serving_write_leases.zz_lease_forever", "trigger_planted"},
		restore: []string{"DROP TRIGGER zz_lease_forever ON community_serving_write_leases",
			"DROP FUNCTION lease_forever()"},
	},
	{
		name: "a control table's owner gives a guard trigger a WHEN clause",
		setup: []string{"ALTER TABLE community_serving_write_leases OWNER TO %[1]s",
			// In a deployment migrated by a non-superuser, that owner owns the guard function too.
			"GRANT EXECUTE ON FUNCTION enforce_community_serving_write_lease_guard() TO %[1]s"},
		attack: []string{
			"DROP TRIGGER community_serving_write_leases_guard ON community_serving_write_leases",
			`CREATE TRIGGER community_serving_write_leases_guard BEFORE INSERT OR UPDATE OR DELETE ON community_serving_write_leases
				FOR EACH ROW WHEN (current_setting('application_name') <> 'backdoor')
				EXECUTE FUNCTION enforce_community_serving_write_lease_guard()`,
		},
		want: driftRow{"community_serving_write_leases.community_serving_write_leases_guard", "guard_changed"},
		restore: []string{
			"DROP TRIGGER community_serving_write_leases_guard ON community_serving_write_leases",
			`CREATE TRIGGER community_serving_write_leases_guard BEFORE INSERT OR UPDATE OR DELETE ON community_serving_write_leases
				FOR EACH ROW EXECUTE FUNCTION enforce_community_serving_write_lease_guard()`,
		},
	},
	{
		name:    "a control table's owner drops the lease bound",
		setup:   []string{"ALTER TABLE community_serving_write_leases OWNER TO %[1]s"},
		attack:  []string{"ALTER TABLE community_serving_write_leases DROP CONSTRAINT community_serving_write_leases_lease_bound_check"},
		want:    driftRow{"community_serving_write_leases", "control_table_changed"},
		restore: []string{"ALTER TABLE community_serving_write_leases ADD CONSTRAINT community_serving_write_leases_lease_bound_check CHECK (lease_until <= heartbeat_at + interval '1 hour')"},
	},
	{
		name:    "a control table's owner drops an index",
		setup:   []string{"ALTER TABLE community_serving_write_leases OWNER TO %[1]s"},
		attack:  []string{"DROP INDEX community_serving_write_leases_lease_until_idx"},
		want:    driftRow{"community_serving_write_leases", "control_table_changed"},
		restore: []string{"CREATE INDEX community_serving_write_leases_lease_until_idx ON community_serving_write_leases (lease_until)"},
	},
	{
		name:    "a role granted CREATE in schema community_deletion overloads an installed function",
		setup:   []string{"GRANT CREATE ON SCHEMA community_deletion TO %[1]s"},
		attack:  []string{"CREATE FUNCTION community_deletion.community_deletion_is_member(role_name text) RETURNS boolean LANGUAGE sql AS 'SELECT true'"},
		want:    driftRow{"community_deletion_is_member(text)", "function_planted"},
		restore: []string{"REVOKE CREATE ON SCHEMA community_deletion FROM %[1]s", "DROP FUNCTION community_deletion.community_deletion_is_member(text)"},
	},
	{
		name:    "a role granted CREATE in schema community_deletion overloads an installed name without the project's prefixes",
		setup:   []string{"GRANT CREATE ON SCHEMA community_deletion TO %[1]s"},
		attack:  []string{"CREATE FUNCTION community_deletion.community_schema_destruction_lock_key(n integer) RETURNS bigint LANGUAGE sql AS 'SELECT 1::bigint'"},
		want:    driftRow{"community_schema_destruction_lock_key(integer)", "function_planted"},
		restore: []string{"REVOKE CREATE ON SCHEMA community_deletion FROM %[1]s", "DROP FUNCTION community_deletion.community_schema_destruction_lock_key(integer)"},
	},
	{
		name:    "a role granted CREATE in schema community_deletion plants a function under the project's prefix",
		setup:   []string{"GRANT CREATE ON SCHEMA community_deletion TO %[1]s"},
		attack:  []string{"CREATE FUNCTION community_deletion.enforce_community_anything() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN RETURN NEW; END'"},
		want:    driftRow{"enforce_community_anything()", "function_planted"},
		restore: []string{"REVOKE CREATE ON SCHEMA community_deletion FROM %[1]s", "DROP FUNCTION community_deletion.enforce_community_anything()"},
	},
	{
		name:    "a role granted CREATE in schema community_deletion overloads a built-in with a better match",
		setup:   []string{"GRANT CREATE ON SCHEMA community_deletion TO %[1]s"},
		attack:  []string{"CREATE FUNCTION community_deletion.format(text, uuid) RETURNS text LANGUAGE sql AS 'SELECT 1::text'"},
		want:    driftRow{"format(text,uuid)", "function_planted"},
		restore: []string{"REVOKE CREATE ON SCHEMA community_deletion FROM %[1]s", "DROP FUNCTION community_deletion.format(text, uuid)"},
	},
	{
		name:  "a role granted CREATE in schema community_deletion plants an operator",
		setup: []string{"GRANT CREATE ON SCHEMA community_deletion TO %[1]s"},
		attack: []string{
			"CREATE FUNCTION community_deletion.planted_name_eq(name, text) RETURNS boolean LANGUAGE sql AS 'SELECT true'",
			"CREATE OPERATOR community_deletion.= (LEFTARG = name, RIGHTARG = text, FUNCTION = community_deletion.planted_name_eq)",
		},
		want:    driftRow{"operator =(name, text)", "operator_planted"},
		restore: []string{"REVOKE CREATE ON SCHEMA community_deletion FROM %[1]s", "DROP OPERATOR community_deletion.= (name, text)", "DROP FUNCTION community_deletion.planted_name_eq(name, text)"},
	},
	{
		name:    "a tenant table's owner keys a table in its own schema by a foreign key to a registered table",
		setup:   []string{"ALTER TABLE fixture_messages OWNER TO %[1]s", "CREATE SCHEMA svc AUTHORIZATION %[1]s"},
		attack:  []string{"CREATE TABLE svc.message_reads (message_id bigint NOT NULL REFERENCES public.fixture_messages (id), read_at timestamptz)"},
		want:    driftRow{"svc.message_reads", "unregistered"},
		restore: []string{"DROP TABLE svc.message_reads"},
	},
	{
		name:  "a tenant table's owner keys a table down a chain of foreign keys",
		setup: []string{"ALTER TABLE fixture_messages OWNER TO %[1]s", "CREATE SCHEMA svc AUTHORIZATION %[1]s"},
		attack: []string{
			"CREATE TABLE svc.message_threads (id bigint PRIMARY KEY, message_id bigint NOT NULL REFERENCES public.fixture_messages (id))",
			"CREATE TABLE svc.thread_replies (thread_id bigint NOT NULL REFERENCES svc.message_threads (id), body text)",
		},
		want:    driftRow{"svc.thread_replies", "unregistered"},
		restore: []string{"DROP TABLE svc.thread_replies", "DROP TABLE svc.message_threads"},
	},
}

// newLogin creates a login of no deployment role, dropped with what it owns
// when the test ends.
func newLogin(t *testing.T, b *testBundle) (name string, conn *pgx.Conn) {
	t.Helper()
	name = "cd_test_attacker_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	require.NoError(t, b.exec(t, fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD 'pw'", name)))
	t.Cleanup(func() {
		cleanup := context.Background()
		_, _ = b.pool.Exec(cleanup, "DROP OWNED BY "+name+" CASCADE")
		_, _ = b.pool.Exec(cleanup, "DROP ROLE "+name)
	})
	return name, connectAs(t, b, name, "pw")
}

func TestDriftSeesWhatNonSuperusersCanPlant(t *testing.T) {
	t.Parallel()
	for _, tc := range driftAttacks {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t)
			ctx := t.Context()
			_, request := b.approvedRequest(t)
			attacker, conn := newLogin(t, b)
			for _, sql := range tc.setup {
				require.NoError(t, b.exec(t, fmt.Sprintf(sql, attacker)), sql)
			}
			if strings.Contains(strings.Join(tc.setup, " "), "ON SCHEMA community_deletion") {
				// The grant alone is drift: it lets a role plant what every guard resolves.
				require.Equal(t, []driftRow{{"schema community_deletion",
					"schema_create_granted: " + attacker + " may CREATE in it; revoke it"}}, drift(t, b), "the grant")
			} else {
				require.Empty(t, drift(t, b), "before the attack")
			}
			for _, sql := range tc.attack {
				_, err := conn.Exec(ctx, sql)
				require.NoError(t, err, sql)
			}
			require.Contains(t, drift(t, b), tc.want)

			engine, err := lifecycle.NewEngine(ctx, b.as(fixture.RoleExecutor), nil)
			require.NoError(t, err)
			claim, err := engine.ClaimRequest(ctx, request, "executor", lifecycle.DefaultLeaseDuration)
			var blocked *lifecycle.DriftBlockedError
			require.ErrorAs(t, err, &blocked, "the claim is refused")
			require.Contains(t, blocked.Reason, tc.want.Table)
			require.Nil(t, claim)
			claim, err = engine.ClaimRequest(ctx, request, "executor", lifecycle.DefaultLeaseDuration)
			require.ErrorIs(t, err, lifecycle.ErrNothingToClaim, "the request stays blocked")
			require.Nil(t, claim)

			for _, sql := range tc.restore {
				sql = strings.ReplaceAll(sql, "%[1]s", attacker)
				require.NoError(t, b.exec(t, sql), sql)
			}
			require.Empty(t, drift(t, b), "put back")
			operator, err := lifecycle.NewOperator(ctx, b.as(fixture.RoleOperator), nil)
			require.NoError(t, err)
			_, err = operator.Unblock(ctx, request, "operator", "put back what the attack changed")
			require.NoError(t, err)
			claim, err = engine.ClaimRequest(ctx, request, "executor", lifecycle.DefaultLeaseDuration)
			require.NoError(t, err)
			require.NotNil(t, claim)
		})
	}
}
