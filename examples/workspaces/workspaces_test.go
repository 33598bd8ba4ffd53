package workspaces_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tombstoneworks/communitydeletion/lifecycle"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	cdt "github.com/tombstoneworks/communitydeletion/communitydeletiontest"
	"github.com/tombstoneworks/communitydeletion/examples/workspaces"
	"github.com/tombstoneworks/communitydeletion/executor/rediscache"
	"github.com/tombstoneworks/communitydeletion/executor/s3store"
)

func TestWorkspaceDeletion(t *testing.T) {
	ctx := t.Context()
	kit := cdt.Start(t, cdt.WithServiceMigrations(workspaces.Migrate))
	kit.RequireCoverage(t)
	db, err := pgxpool.New(ctx, kit.URL(cdt.RoleServing)) // the application's login
	require.NoError(t, err)
	t.Cleanup(db.Close)
	redisOpts, err := redis.ParseURL(redisSrv.URL)
	require.NoError(t, err)
	rdb := redis.NewClient(redisOpts)
	t.Cleanup(func() { _ = rdb.Close() })
	svc, err := workspaces.New(ctx, db, s3srv.Client(""), s3srv.Bucket, rdb)
	require.NoError(t, err)
	seed := func(slug string) (ws, project uuid.UUID) { // the service's own write paths
		ws, err := svc.CreateWorkspace(ctx, slug)
		require.NoError(t, err)
		project, err = svc.AddProject(ctx, ws, "roadmap")
		require.NoError(t, err)
		_, err = svc.Comment(ctx, ws, project, "ship it")
		require.NoError(t, err)
		require.NoError(t, svc.Upload(ctx, ws, "plan.txt", []byte("plan")))
		require.NoError(t, svc.Remember(ctx, ws, "members", "3", time.Hour))
		return ws, project
	}
	doomed, project := seed("doomed")
	bystander, _ := seed("bystander")
	objects, err := s3store.New(s3srv.Client(""), s3store.Options{Bucket: s3srv.Bucket})
	require.NoError(t, err)
	layout, err := kit.Operator.StorageLayout(ctx) // the executor's cache follows the declared templates
	require.NoError(t, err)
	cache, err := rediscache.New(rdb, rediscache.Options{Patterns: []string{strings.ReplaceAll(layout.Cache[0].Template, "{tenant}", "{community}")}})
	require.NoError(t, err)

	kit.DeleteAndVerify(t, cdt.DeleteParams{CommunityID: doomed, Objects: objects, Cache: cache,
		Prefixes: layout.ExpandLayout(lifecycle.UUIDKey(doomed)).ObjectPrefixes,
		WritePaths: []func(context.Context) error{
			func(ctx context.Context) error { _, err := svc.AddProject(ctx, doomed, "late"); return err },
			func(ctx context.Context) error { _, err := svc.Comment(ctx, doomed, project, "late"); return err },
			func(ctx context.Context) error { return svc.Audit(ctx, doomed, "late") },
			func(ctx context.Context) error { return svc.Upload(ctx, doomed, "late.txt", nil) },
			func(ctx context.Context) error { return svc.Remember(ctx, doomed, "late", "1", time.Hour) },
		}})
	kept, err := objects.Any(ctx, workspaces.UploadKey(bystander, ""))
	require.True(t, err == nil && kept, "the bystander's uploads are gone (%v)", err)
	require.Equal(t, int64(1), rdb.Exists(ctx, workspaces.CacheKey(bystander, "members")).Val(), "the bystander's cache key")
	var unlinked int // the deleted workspace's audit rows, kept without their link
	require.NoError(t, db.QueryRow(ctx, "SELECT count(*) FROM audit_log WHERE workspace_id IS NULL").Scan(&unlinked))
	require.Equal(t, 3, unlinked, "workspace.created, project.created and file.uploaded kept unlinked")
}

func TestDriftFlagsUnattachedWorkspaceTables(t *testing.T) {
	kit := cdt.Start(t, cdt.WithServiceMigrations(workspaces.Migrate), cdt.WithServiceMigrations(func(ctx context.Context, url string) error {
		conn, err := pgx.Connect(ctx, url)
		if err == nil {
			defer conn.Close(ctx)
			_, err = conn.Exec(ctx, `CREATE TABLE invoices (id uuid PRIMARY KEY, workspace_id uuid NOT NULL);
				CREATE TABLE analytics.views (project uuid NOT NULL REFERENCES projects (id))`)
		}
		return err
	}))
	problems, err := kit.Coverage(t.Context())
	require.NoError(t, err)
	if all := strings.Join(problems, "\n"); len(problems) != 2 || !strings.Contains(all, "invoices") || !strings.Contains(all, "analytics.views") {
		t.Fatalf("coverage reported %q, want invoices and analytics.views unattached", problems)
	}
}
