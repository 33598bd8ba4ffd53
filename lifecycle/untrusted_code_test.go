package lifecycle_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// The service's code that would wipe a table it has no grant on: a trigger
// on its own registered table tenant_secrets whose function deletes every
// row of partner_ledger, a registered table of another owner (the
// superuser here) that the executor may purge.
var wipingTrigger = []string{
	`CREATE FUNCTION svc_code.wipe_ledger() RETURNS trigger LANGUAGE plpgsql AS
	 $$ BEGIN DELETE FROM public.partner_ledger; RETURN OLD; END $$`,
	"CREATE TRIGGER tenant_secrets_wipe BEFORE DELETE ON tenant_secrets FOR EACH ROW EXECUTE FUNCTION svc_code.wipe_ledger()",
}

// untrustedScene is a rowSecurityScene with partner_ledger beside it,
// holding a row of the target and one of the bystander, and a schema of
// the service's for its functions.
func (b *testBundle) newUntrustedScene(t *testing.T) rowSecurityScene {
	t.Helper()
	ctx := t.Context()
	s := b.newRowSecurityScene(t)
	for _, sql := range []string{
		"CREATE SCHEMA svc_code AUTHORIZATION cd_test_serving",
		`CREATE TABLE partner_ledger (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
			community_id uuid NOT NULL REFERENCES communities (id))`,
		"CREATE INDEX partner_ledger_community_idx ON partner_ledger (community_id, id)",
		"SELECT attach_community_write_fence('partner_ledger')",
	} {
		require.NoError(t, b.exec(t, sql), sql)
	}
	// The target is fenced already: its row is written past the fence, as
	// a row written before the deletion began.
	require.NoError(t, pgx.BeginFunc(ctx, b.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL session_replication_role = replica"); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "INSERT INTO partner_ledger (community_id) VALUES ($1), ($2)", s.target, s.other)
		return err
	}))
	// The service itself has no grant on partner_ledger.
	_, err := s.service.Exec(ctx, "DELETE FROM partner_ledger")
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, pgerrcode.InsufficientPrivilege, pgErr.Code)
	return s
}

func (b *testBundle) ledgerRows(t *testing.T, community uuid.UUID) int64 {
	t.Helper()
	var n int64
	require.NoError(t, b.Pool.QueryRow(t.Context(), "SELECT count(*) FROM partner_ledger WHERE community_id = $1", community).Scan(&n))
	return n
}

func (s rowSecurityScene) plant(ctx context.Context) error {
	for _, sql := range wipingTrigger {
		if _, err := s.service.Exec(ctx, sql); err != nil {
			return err
		}
	}
	return nil
}

// A service role's trigger on its own registered table, calling code of
// its own, is drift (trigger_untrusted) and the purge refuses to run it
// with the executor's rights: the bystander's row of another owner's table
// stays. Only the schema's owner declares it trusted, for its digest at
// the time: a changed function is untrusted again. Once it is dropped the
// purge takes the target's rows and no one else's.
func TestPurgeRefusesAServicesUntrustedTrigger(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	s := b.newUntrustedScene(t)
	require.NoError(t, s.plant(ctx))

	drift := b.drift(t)
	require.Len(t, drift, 1)
	require.Contains(t, drift[0], "public.tenant_secrets trigger_untrusted: trigger tenant_secrets_wipe on public.tenant_secrets calls svc_code.wipe_ledger() (owned by cd_test_serving)")

	_, err := b.Engine.EnterPostgresPurged(ctx, s.token, lifecycle.PurgeOptions{})
	require.ErrorIs(t, err, lifecycle.ErrRefused)
	require.Contains(t, err.Error(), "trigger_untrusted")
	require.Equal(t, int64(1), b.ledgerRows(t, s.other), "the bystander's row of another owner's table")
	b.requireUntouched(t, s, s.counts)

	// The service cannot declare its own code trusted.
	trust := `INSERT INTO community_deletion.community_deletion_trusted_code (table_schema, table_name, kind, object_name, reason)
		VALUES ('public', 'tenant_secrets', 'trigger', 'tenant_secrets_wipe', 'reviewed')`
	_, err = s.service.Exec(ctx, trust)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, pgerrcode.InsufficientPrivilege, pgErr.Code)
	// The schema's owner may; a change of the function undoes it.
	require.NoError(t, b.exec(t, trust))
	require.Empty(t, b.drift(t))
	_, err = s.service.Exec(ctx, `CREATE OR REPLACE FUNCTION svc_code.wipe_ledger() RETURNS trigger LANGUAGE plpgsql AS
		$$ BEGIN DELETE FROM public.partner_ledger WHERE true; RETURN OLD; END $$`)
	require.NoError(t, err)
	require.Len(t, b.drift(t), 1, "a changed function is untrusted again")

	_, err = s.service.Exec(ctx, "DROP TRIGGER tenant_secrets_wipe ON tenant_secrets")
	require.NoError(t, err)
	require.Empty(t, b.drift(t))
	_, err = b.Engine.EnterPostgresPurged(ctx, s.token, lifecycle.PurgeOptions{})
	require.NoError(t, err)
	b.requirePurged(t, s.token)
	require.Zero(t, b.ledgerRows(t, s.target))
	require.Equal(t, int64(1), b.ledgerRows(t, s.other))
	require.Equal(t, int64(1), b.secrets(t, s.other))
}

// The same trigger planted while the purge runs, after its plan's drift
// check, never deletes with the executor's rights: the batch that would
// fire it checks the table's code and rolls back, the purge fails, and the
// bystander's row stays.
func TestPurgeRefusesAnUntrustedTriggerPlantedMidway(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	s := b.newUntrustedScene(t)
	require.Empty(t, b.drift(t))

	var plantErr error
	planted := false
	_, err := b.Engine.EnterPostgresPurged(ctx, s.token, lifecycle.PurgeOptions{
		Progress: func(p lifecycle.PurgeProgress) {
			// 'nullify' tables go first: plant before any 'delete' batch.
			if planted || p.Table != "fixture_audit_events" || !p.Done {
				return
			}
			planted = true
			plantErr = s.plant(ctx)
		},
	})
	require.NoError(t, plantErr)
	require.True(t, planted)
	require.ErrorIs(t, err, lifecycle.ErrRefused)
	require.Contains(t, err.Error(), "trigger_untrusted")
	require.Equal(t, int64(1), b.ledgerRows(t, s.other), "the bystander's row of another owner's table")
	require.Equal(t, int64(1), b.secrets(t, s.other))
	require.Equal(t, int64(2), b.secrets(t, s.target), "the batch that fired the trigger rolled back")
}

// A rule's own table access is checked as its table's owner, but the
// functions it calls run as the executor: a service's rule on its own
// registered table that calls a function of its own deleting another
// owner's rows is drift (rule_untrusted), and the purge refuses it.
func TestPurgeRefusesAServicesRule(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	s := b.newUntrustedScene(t)
	for _, sql := range []string{
		"CREATE FUNCTION svc_code.wipe_ledger_now() RETURNS void LANGUAGE sql AS 'DELETE FROM public.partner_ledger'",
		"CREATE RULE tenant_secrets_wipe AS ON DELETE TO tenant_secrets DO ALSO SELECT svc_code.wipe_ledger_now()",
	} {
		_, err := s.service.Exec(ctx, sql)
		require.NoError(t, err, sql)
	}
	drift := b.drift(t)
	require.Len(t, drift, 1)
	require.Contains(t, drift[0], "public.tenant_secrets rule_untrusted: rule tenant_secrets_wipe on public.tenant_secrets calls svc_code.wipe_ledger_now() (owned by cd_test_serving)")

	_, err := b.Engine.EnterPostgresPurged(ctx, s.token, lifecycle.PurgeOptions{})
	require.ErrorIs(t, err, lifecycle.ErrRefused)
	require.Contains(t, err.Error(), "rule_untrusted")
	require.Equal(t, int64(1), b.ledgerRows(t, s.other), "the bystander's row of another owner's table")
	b.requireUntouched(t, s, s.counts)
}
