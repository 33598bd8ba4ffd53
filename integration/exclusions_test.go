package integration

import (
	"testing"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// Exclusions are history: excluding and including a table append events
// with who, when and why; lifting an exclusion needs a reason and leaves
// the exclusion on record; no role, the schema's superuser included, can
// change or remove an event (the table's owner has no grant: 42501; past
// the grants the guard refuses: 23000, TRUNCATE 55000), and the view of the exclusions in
// force follows the newest event. Against migration 00029 include_table()
// deleted the only record of the exclusion.
func TestExclusionsAreAppendOnlyHistory(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	owner, conn := newLogin(t, b)
	require.NoError(t, b.exec(t, "CREATE SCHEMA svc_notes AUTHORIZATION "+owner))
	run := func(sql string) error { _, err := conn.Exec(ctx, sql); return err }
	require.NoError(t, run("CREATE TABLE svc_notes.partner_notes (id bigint PRIMARY KEY, community_id uuid)"))
	require.Contains(t, drift(t, b), driftRow{"svc_notes.partner_notes", "unregistered"})

	require.NoError(t, run("SELECT community_deletion.exclude_table('svc_notes.partner_notes', 'notes of the partner system')"))
	require.Empty(t, drift(t, b))
	requireSQLState(t, run("SELECT community_deletion.include_table('svc_notes.partner_notes')"),
		pgerrcode.InvalidParameterValue, "give a reason")
	require.NoError(t, run("SELECT community_deletion.include_table('svc_notes.partner_notes', 'they are tenant data after all')"))
	require.Contains(t, drift(t, b), driftRow{"svc_notes.partner_notes", "unregistered"})

	history := func() []string {
		rows, err := b.pool.Query(ctx, `SELECT action || '/' || reason || '/' || actor FROM community_deletion_exclusion_events
			WHERE table_schema = 'svc_notes' AND table_name = 'partner_notes' ORDER BY sequence`)
		require.NoError(t, err)
		events, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return events
	}
	want := []string{"exclude/notes of the partner system/" + owner, "include/they are tenant data after all/" + owner}
	require.Equal(t, want, history())
	var inForce int
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM community_deletion_excluded_tables").Scan(&inForce))
	require.Zero(t, inForce)

	for _, sql := range []string{
		"DELETE FROM community_deletion.community_deletion_exclusion_events",
		"UPDATE community_deletion.community_deletion_exclusion_events SET reason = 'x'",
		"TRUNCATE community_deletion.community_deletion_exclusion_events",
		"INSERT INTO community_deletion.community_deletion_exclusion_events (table_schema, table_name, action, reason) VALUES ('svc_notes', 'partner_notes', 'exclude', 'r')",
	} {
		requireSQLState(t, run(sql), pgerrcode.InsufficientPrivilege, "permission denied")
	}
	requireSQLState(t, b.exec(t, "DELETE FROM community_deletion_exclusion_events"), sqlstateIntegrity, "exclusions are history")
	requireSQLState(t, b.exec(t, "UPDATE community_deletion_exclusion_events SET reason = 'x'"), sqlstateIntegrity, "exclusions are history")
	requireSQLState(t, b.exec(t, "TRUNCATE community_deletion_exclusion_events"), sqlstateFenced, "deletion evidence")
	require.Equal(t, want, history())

	// Excluded again, it is in force again, with the new reason.
	require.NoError(t, run("SELECT community_deletion.exclude_table('svc_notes.partner_notes', 'the partner keeps them')"))
	var reason string
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT reason FROM community_deletion_excluded_tables WHERE table_name = 'partner_notes'").Scan(&reason))
	require.Equal(t, "the partner keeps them", reason)
	require.Len(t, history(), 3)
}
