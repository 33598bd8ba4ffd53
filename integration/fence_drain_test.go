package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/ephemeralpg"
	"github.com/tombstoneworks/communitydeletion/internal/fixture"
)

// twinTemplate is the schema with one bound table, twin.notes: every
// database made from it holds that table under the same oid, as databases
// cloned from one template do.
type twinTemplate struct{ fixture.Template }

const twinSetup = `
CREATE SCHEMA twin;
GRANT USAGE ON SCHEMA twin TO community_deletion_executor;
CREATE TABLE twin.accounts (id bigint PRIMARY KEY);
SELECT community_deletion.declare_tenant_table('twin.accounts');
CREATE TABLE twin.notes (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                         account_id bigint NOT NULL REFERENCES twin.accounts (id), body text NOT NULL);
SELECT community_deletion.attach_community_write_fence('twin.notes', 'delete', 'account_id');
INSERT INTO twin.accounts VALUES (1);
`

func (m twinTemplate) Hash() (string, error) {
	h, err := m.Template.Hash()
	return h + "\x00twin\x00" + twinSetup, err
}

func (m twinTemplate) Migrate(ctx context.Context, connString string) error {
	if err := m.Template.Migrate(ctx, connString); err != nil {
		return err
	}
	conn, err := pgx.Connect(ctx, connString)
	if err != nil {
		return fmt.Errorf("connect for the twin table: %w", err)
	}
	defer func() { _ = conn.Close(ctx) }()
	if _, err := conn.Exec(ctx, twinSetup); err != nil {
		return fmt.Errorf("create the twin table: %w", err)
	}
	return nil
}

// A drain that gives up names the writers of its own database only.
// pg_locks shows the whole cluster, and a database cloned from the same
// template holds its tables under the same oids: a session of such a
// database locking its twin.notes is not a writer of this one's. Against
// 00035's drain, whose list of holders had no database filter, the DETAIL
// named it too.
func TestDrainNamesOnlyThisDatabasesWriters(t *testing.T) {
	t.Parallel()
	for _, variant := range []string{"as installed", "without the database filter names the other database's session"} {
		t.Run(variant, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			own := ephemeralpg.NewTestDatabase(t, server, twinTemplate{})
			other := ephemeralpg.NewTestDatabase(t, server, twinTemplate{})
			pool := func(url string) *pgxpool.Pool {
				p, err := pgxpool.New(ctx, url)
				require.NoError(t, err)
				t.Cleanup(p.Close)
				return p
			}
			b := &testBundle{t: t, url: own, pool: pool(own), pools: map[fixture.Role]*pgxpool.Pool{}}
			otherPool := pool(other)
			oid := func(p *pgxpool.Pool) (o uint32) {
				require.NoError(t, p.QueryRow(ctx, "SELECT 'twin.notes'::regclass::oid").Scan(&o))
				return o
			}
			require.Equal(t, oid(b.pool), oid(otherPool), "the twins share the table's oid")
			if variant != "as installed" {
				var def string
				require.NoError(t, b.pool.QueryRow(ctx,
					"SELECT pg_get_functiondef('community_deletion.community_deletion_fence_drain()'::regprocedure)").Scan(&def))
				const filter = "                    AND l.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())\n"
				require.Equal(t, 1, strings.Count(def, filter))
				require.NoError(t, b.exec(t, strings.Replace(def, filter, "", 1)))
			}

			hold := func(p *pgxpool.Pool, sql string) uint32 {
				conn, err := p.Acquire(ctx)
				require.NoError(t, err)
				t.Cleanup(conn.Release)
				tx, err := conn.Begin(ctx)
				require.NoError(t, err)
				t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
				_, err = tx.Exec(ctx, sql)
				require.NoError(t, err)
				return conn.Conn().PgConn().PID()
			}
			stranger := hold(otherPool, "LOCK TABLE twin.notes IN ROW EXCLUSIVE MODE")
			writer := hold(b.pool, "INSERT INTO twin.notes (account_id, body) VALUES (1, 'admitted')")

			conn, _ := executorConn(t, b)
			tx, err := conn.Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = tx.Rollback(context.Background()) }()
			_, err = tx.Exec(ctx, "SELECT community_deletion.community_deletion_fence_drain()")
			requireSQLState(t, err, pgerrcode.LockNotAvailable, "write fence drain of twin.notes gave up after 250ms")
			var pgErr *pgconn.PgError
			require.ErrorAs(t, err, &pgErr)
			require.Contains(t, pgErr.Detail, fmt.Sprintf("pid %d ", writer))
			if variant == "as installed" {
				require.NotContains(t, pgErr.Detail, fmt.Sprintf("pid %d ", stranger), pgErr.Detail)
			} else {
				require.Contains(t, pgErr.Detail, fmt.Sprintf("pid %d ", stranger), pgErr.Detail)
			}
		})
	}
}
