package lifecycle_test

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/testfactory"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// A service shaped like the issue's: its own tenant table workspaces,
// tables keyed by workspace_id in two schemas (one referencing another, so
// the purge order follows the foreign keys), and a kept audit table. The
// inventory counts each table by its key, the purge takes the tenant's rows
// (the tenant table's own row last), clears its kept rows, tombstones it,
// and leaves the other tenant alone; the deleted id is never reused.
func TestPurgePostgresOfTheServicesOwnTenantModel(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	for _, sql := range []string{
		"CREATE SCHEMA svc",
		"CREATE SCHEMA billing",
		"GRANT USAGE ON SCHEMA svc, billing TO community_deletion_operator, community_deletion_executor, community_deletion_serving",
		"CREATE TABLE svc.workspaces (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), slug text NOT NULL UNIQUE)",
		`CREATE TABLE svc.docs (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
			workspace_id uuid NOT NULL REFERENCES svc.workspaces (id), body text)`,
		"CREATE INDEX ON svc.docs (workspace_id, id)",
		`CREATE TABLE billing.invoices (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
			workspace_id uuid NOT NULL REFERENCES svc.workspaces (id), doc_id bigint REFERENCES svc.docs (id))`,
		"CREATE INDEX ON billing.invoices (workspace_id)",
		"CREATE INDEX ON billing.invoices (doc_id)",
		`CREATE TABLE svc.audit_log (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
			workspace_id uuid REFERENCES svc.workspaces (id), action text)`,
		"CREATE INDEX ON svc.audit_log (workspace_id)",
		"INSERT INTO svc.workspaces (slug) VALUES ('existing')",
		"SELECT community_deletion.declare_tenant_table('svc.workspaces')",
		"SELECT community_deletion.attach_community_write_fence('svc.docs', 'delete', 'workspace_id')",
		"SELECT community_deletion.attach_community_write_fence('billing.invoices', 'delete', 'workspace_id')",
		"SELECT community_deletion.attach_community_write_fence('svc.audit_log', 'nullify', 'workspace_id')",
	} {
		require.NoError(t, b.exec(t, sql), sql)
	}
	require.Empty(t, b.drift(t))

	// tenant creates a workspace with rows in every table, as the service does.
	tenant := func(slug string) uuid.UUID {
		var id uuid.UUID
		require.NoError(t, b.Pool.QueryRow(ctx, "INSERT INTO svc.workspaces (slug) VALUES ($1) RETURNING id", slug).Scan(&id))
		for _, sql := range []string{
			"INSERT INTO svc.docs (workspace_id, body) SELECT $1, 'd' || g FROM generate_series(1, 40) g",
			"INSERT INTO billing.invoices (workspace_id, doc_id) SELECT workspace_id, id FROM svc.docs WHERE workspace_id = $1",
			"INSERT INTO svc.audit_log (workspace_id, action) SELECT $1, 'a' || g FROM generate_series(1, 7) g",
		} {
			_, err := b.Pool.Exec(ctx, sql, id)
			require.NoError(t, err, sql)
		}
		return id
	}
	target, other := tenant("target"), tenant("other")
	checksum := func(community uuid.UUID) string {
		var sum string
		require.NoError(t, b.Pool.QueryRow(ctx, `SELECT md5(concat_ws('|',
			(SELECT string_agg(w::text, ',' ORDER BY w::text) FROM svc.workspaces w WHERE id = $1),
			(SELECT string_agg(d::text, ',' ORDER BY d::text) FROM svc.docs d WHERE workspace_id = $1),
			(SELECT string_agg(i::text, ',' ORDER BY i::text) FROM billing.invoices i WHERE workspace_id = $1),
			(SELECT string_agg(a::text, ',' ORDER BY a::text) FROM svc.audit_log a WHERE workspace_id = $1)))`, community).Scan(&sum))
		return sum
	}
	otherBefore := checksum(other)

	schema, err := b.Operator.InventorySchema(ctx, target)
	require.NoError(t, err)
	for table, want := range map[string]int64{"workspaces": 1, "docs": 40, "invoices": 40, "audit_log": 7} {
		require.Equal(t, want, schema.RowCounts[table], table)
	}
	request, token := testfactory.Request(ctx, t, b.DB, &testfactory.RequestOpts{CommunityID: target, Stage: lifecycle.StageBindingsRemoved})
	require.Empty(t, request.CommunityHost, "a tenant of the tenant table has no host")
	result, err := b.Engine.EnterPostgresPurged(ctx, token, lifecycle.PurgeOptions{MaxRowsPerTx: 16})
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"workspaces": 1, "docs": 40, "invoices": 40}, onlyOf(result.Deleted, "workspaces", "docs", "invoices"))
	require.Equal(t, int64(7), result.Nullified["audit_log"])

	var remaining int64
	require.NoError(t, b.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM svc.workspaces WHERE id = $1)
		+ (SELECT count(*) FROM svc.docs WHERE workspace_id = $1) + (SELECT count(*) FROM billing.invoices WHERE workspace_id = $1)
		+ (SELECT count(*) FROM svc.audit_log WHERE workspace_id = $1)`, target).Scan(&remaining))
	require.Zero(t, remaining)
	var kept int64
	require.NoError(t, b.Pool.QueryRow(ctx, "SELECT count(*) FROM svc.audit_log WHERE workspace_id IS NULL").Scan(&kept))
	require.Equal(t, int64(7), kept, "the kept rows stay, unlinked")
	require.Equal(t, otherBefore, checksum(other))
	require.Equal(t, "tombstone", b.community(t, target).State)

	// The deleted tenant's id is never reused, and nothing links to it again.
	err = b.exec(t, "INSERT INTO svc.workspaces (id, slug) VALUES ($1, 'again')", target)
	requirePgCode(t, err, "55000")
	err = b.exec(t, "INSERT INTO svc.audit_log (workspace_id, action) VALUES ($1, 'late')", target)
	requirePgCode(t, err, "23503") // the foreign key to the gone workspace refuses it first
	require.NoError(t, b.exec(t, "ALTER TABLE svc.audit_log DROP CONSTRAINT audit_log_workspace_id_fkey"))
	err = b.exec(t, "INSERT INTO svc.audit_log (workspace_id, action) VALUES ($1, 'late')", target)
	requirePgCode(t, err, "55000")
}

// onlyOf returns m restricted to keys.
func onlyOf(m map[string]int64, keys ...string) map[string]int64 {
	out := make(map[string]int64, len(keys))
	for _, k := range keys {
		out[k] = m[k]
	}
	return out
}
