package communitydeletiontest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tombstoneworks/communitydeletion/internal/ephemeralpg"
	"github.com/tombstoneworks/communitydeletion/internal/fixture"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// Role is a login the kit's database can be reached as.
type Role string

// The kit's logins. RoleOwner owns the database and runs the migrations (the
// service seeds its tenants as it); every other login is a member of exactly
// the deployment role its name says.
const (
	// RoleOwner is the database's owner, a superuser.
	RoleOwner Role = "owner"
	// RoleOperator is a member of community_deletion_operator: it submits
	// and inventories.
	RoleOperator Role = "operator"
	// RoleApprover is a second member of community_deletion_operator, for
	// the two-person rule.
	RoleApprover Role = "approver"
	// RoleExecutor is a member of community_deletion_executor.
	RoleExecutor Role = "executor"
	// RoleServing is a member of community_deletion_serving: the service's
	// application login.
	RoleServing Role = "serving"
)

// fixtureRoles maps the kit's logins to the test logins the project's own
// tests use.
var fixtureRoles = map[Role]fixture.Role{
	RoleOperator: fixture.RoleOperator,
	RoleApprover: fixture.RoleApprover,
	RoleExecutor: fixture.RoleExecutor,
	RoleServing:  fixture.RoleServing,
}

// Option configures New and Start.
type Option func(*config)

type config struct {
	serviceMigrations []func(ctx context.Context, databaseURL string) error
}

// WithServiceMigrations adds the service's own migrations: migrate is called
// once, with the owner's connection string, after this project's migrations
// are applied, and must create, register (attach_community_write_fence) and
// grant the service's tenant tables. Several options run in order.
func WithServiceMigrations(migrate func(ctx context.Context, databaseURL string) error) Option {
	return func(c *config) { c.serviceMigrations = append(c.serviceMigrations, migrate) }
}

// Kit is one throwaway database with this project's migrations and the
// service's, logins for the deployment roles and lifecycle clients over them.
// Its methods are safe for concurrent use; each Kit's database is its own.
type Kit struct {
	// Operator submits and inventories deletions, as RoleOperator.
	Operator *lifecycle.Operator
	// Approver approves them, as RoleApprover (a second operator).
	Approver *lifecycle.Operator
	// Engine is the executor's client, as RoleExecutor.
	Engine *lifecycle.Engine
	// Serving is the service's client, as RoleServing.
	Serving *lifecycle.Serving

	url          string
	owner        *pgxpool.Pool
	closeClients func()
	drop         func(context.Context) error
	closeOnce    sync.Once
	closeErr     error
}

// shared is the process's PostgreSQL server, started by the first kit and
// stopped when the process exits (a local cluster's watchdog, Docker's
// reaper); every kit gets a database of its own on it.
var shared struct {
	once   sync.Once
	server *ephemeralpg.Server
	err    error
}

// startTimeout bounds starting the server, which may pull a Docker image.
const startTimeout = 3 * time.Minute

func server(ctx context.Context) (*ephemeralpg.Server, error) {
	shared.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), startTimeout)
		defer cancel()
		shared.server, shared.err = ephemeralpg.Start(ctx, ephemeralpg.Options{})
	})
	if shared.err != nil {
		return nil, fmt.Errorf("communitydeletiontest: start PostgreSQL (TEST_DATABASE_URL, Docker, then local binaries): %w", shared.err)
	}
	return shared.server, nil
}

// New creates a kit: a fresh database on the process's throwaway PostgreSQL
// (the server TEST_DATABASE_URL names, else a Docker container, else a
// cluster of the local server binaries), migrated with this project's
// migrations and then the service's (WithServiceMigrations), with the
// deployment roles' logins and connected clients. Call Close when done; a
// test uses Start instead.
func New(ctx context.Context, opts ...Option) (*Kit, error) {
	var cfg config
	for _, opt := range opts {
		opt(&cfg)
	}
	srv, err := server(ctx)
	if err != nil {
		return nil, err
	}
	url, drop, err := srv.NewDatabase(ctx, fixture.Template{})
	if err != nil {
		return nil, fmt.Errorf("communitydeletiontest: create a migrated database: %w", err)
	}
	k := &Kit{url: url, drop: drop}
	if err := k.open(ctx, cfg); err != nil {
		return nil, errors.Join(err, k.Close(context.WithoutCancel(ctx)))
	}
	return k, nil
}

func (k *Kit) open(ctx context.Context, cfg config) error {
	for i, migrate := range cfg.serviceMigrations {
		if err := migrate(ctx, k.url); err != nil {
			return fmt.Errorf("communitydeletiontest: service migrations (option %d): %w", i+1, err)
		}
	}
	owner, err := pgxpool.New(ctx, k.url)
	if err != nil {
		return fmt.Errorf("communitydeletiontest: connect as the owner: %w", err)
	}
	k.owner = owner
	clients, closeClients, err := fixture.OpenClients(ctx, k.url)
	if err != nil {
		return fmt.Errorf("communitydeletiontest: %w", err)
	}
	k.closeClients = closeClients
	k.Operator, k.Approver, k.Engine, k.Serving = clients.Operator, clients.Approver, clients.Engine, clients.Serving
	return nil
}

// Start is New for a test: it fails the test if the kit cannot be had and
// closes it when the test ends.
func Start(tb testing.TB, opts ...Option) *Kit {
	tb.Helper()
	k, err := New(tb.Context(), opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := k.Close(context.Background()); err != nil {
			tb.Error(err)
		}
	})
	return k
}

// Close closes the kit's connections and drops its database. It is
// idempotent.
func (k *Kit) Close(ctx context.Context) error {
	k.closeOnce.Do(func() {
		if k.closeClients != nil {
			k.closeClients()
		}
		if k.owner != nil {
			k.owner.Close()
		}
		if err := k.drop(ctx); err != nil {
			k.closeErr = fmt.Errorf("communitydeletiontest: drop the kit's database: %w", err)
		}
	})
	return k.closeErr
}

// URL returns the connection string of the kit's database as role; it
// panics on a role the kit does not have.
func (k *Kit) URL(role Role) string {
	if role == RoleOwner {
		return k.url
	}
	login, ok := fixtureRoles[role]
	if !ok {
		panic(fmt.Sprintf("communitydeletiontest: unknown role %q", role))
	}
	url, err := fixture.RoleConnString(k.url, login)
	if err != nil {
		panic(fmt.Sprintf("communitydeletiontest: %v", err))
	}
	return url
}
