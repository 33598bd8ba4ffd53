package lifecycle_test

import (
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/ephemeralpg"
	"github.com/tombstoneworks/communitydeletion/internal/fixture"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// server is the throwaway PostgreSQL shared by the package's tests; each
// test gets its own database cloned from a migrated template.
var server *ephemeralpg.Server

func TestMain(m *testing.M) {
	// Prepared transactions hold locks in the lock-wait tests.
	ephemeralpg.RunTests(m, ephemeralpg.Options{ExtraConfig: map[string]string{"max_prepared_transactions": "8"}}, &server)
}

// testBundle is one test's database (migrations plus the fixture tenant
// tables) and the clients over it, each over its own login: an operator, a
// second operator to approve with (the two-person rule compares database
// roles), the executor's engine and the service. pool is the superuser, for
// setting up and inspecting.
type testBundle struct {
	url      string
	pool     *pgxpool.Pool
	operator *lifecycle.Operator
	approver *lifecycle.Operator
	engine   *lifecycle.Engine
	serving  *lifecycle.Serving
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	url, pool := fixture.NewTestPool(t, server)
	ctx := t.Context()
	b := &testBundle{url: url, pool: pool}
	var err error
	b.operator, err = lifecycle.NewOperator(ctx, fixture.RolePool(t, url, fixture.RoleOperator), nil)
	require.NoError(t, err)
	b.approver, err = lifecycle.NewOperator(ctx, fixture.RolePool(t, url, fixture.RoleApprover), nil)
	require.NoError(t, err)
	b.engine, err = lifecycle.NewEngine(ctx, fixture.RolePool(t, url, fixture.RoleExecutor), nil)
	require.NoError(t, err)
	b.serving, err = lifecycle.NewServing(ctx, fixture.RolePool(t, url, fixture.RoleServing), nil)
	require.NoError(t, err)
	return b
}

// createCommunity inserts an active community and returns its id and host.
func (b *testBundle) createCommunity(t *testing.T) (uuid.UUID, string) {
	t.Helper()
	id := uuid.New()
	host := fmt.Sprintf("c-%s.example", id)
	_, err := b.pool.Exec(t.Context(), "INSERT INTO communities (id, host, signing_key, icon) VALUES ($1, $2, 'key', 'icon.png')", id, host)
	require.NoError(t, err)
	return id, host
}
