package jobs_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	cdt "github.com/tombstoneworks/communitydeletion/communitydeletiontest"
	"github.com/tombstoneworks/communitydeletion/examples/jobs"
	"github.com/tombstoneworks/communitydeletion/executor/s3store"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

func late[T any](_ T, err error) error { return err }

func TestOrganizationDeletion(t *testing.T) {
	ctx := t.Context()
	kit := cdt.Start(t, cdt.WithServiceMigrations(jobs.Migrate))
	kit.RequireCoverage(t)
	db, err := pgxpool.New(ctx, kit.URL(cdt.RoleServing)) // the application's login
	require.NoError(t, err)
	t.Cleanup(db.Close)
	serving, err := lifecycle.NewServing(ctx, db, nil) // admits the uploads the fence cannot see
	require.NoError(t, err)
	svc, err := jobs.New(db, s3srv.Client(""), s3srv.Bucket, func(ctx context.Context, tx pgx.Tx, org string) error {
		return serving.GuardTenantTransaction(ctx, tx, lifecycle.TextKey(org))
	})
	require.NoError(t, err)
	// The service's cron makes today's and tomorrow's partitions after the
	// adoption: nobody attaches them, and every delivery below lands in one.
	created, err := svc.EnsurePartitions(ctx, 1)
	require.NoError(t, err)
	require.Len(t, created, 2)
	type org struct {
		id              string
		project         jobs.Project
		worker          jobs.Worker
		run, untagged   jobs.Run
		group, endpoint string
	}
	seed := func(i int) (o org) { // the service's own write paths
		o.id, err = svc.CreateOrganization(ctx, fmt.Sprintf("org-%d", i), "Org")
		require.NoError(t, err)
		_, err = svc.AddMember(ctx, o.id, fmt.Sprintf("dev%d@example.test", i))
		require.NoError(t, err)
		o.project, err = svc.CreateProject(ctx, o.id, "app")
		require.NoError(t, err)
		o.worker, err = svc.Deploy(ctx, o.project, "20260101.1", "default")
		require.NoError(t, err)
		o.run, err = svc.Trigger(ctx, o.project, "send-email", []byte(`{"to":"ada"}`), "env:prod", "nightly")
		require.NoError(t, err)
		o.untagged, err = svc.Trigger(ctx, o.project, "cleanup", nil)
		require.NoError(t, err)
		_, err = svc.StartAttempt(ctx, o.run, o.worker)
		require.NoError(t, err)
		batch, err := svc.BatchTrigger(ctx, o.project, "resize", 2)
		require.NoError(t, err)
		o.group, err = svc.Replay(ctx, o.project, append(batch.Runs, o.run.ID)...) // the mapping table without constraints
		require.NoError(t, err)
		o.endpoint, err = svc.CreateWebhookEndpoint(ctx, o.project, "stripe")
		require.NoError(t, err)
		_, err = svc.ReceiveWebhook(ctx, o.project, o.endpoint, "evt_1")
		require.NoError(t, err)
		return o
	}
	d, bystanders := seed(0), []org{seed(1), seed(2)}
	objects, err := s3store.New(s3srv.Client(""), s3store.Options{Bucket: s3srv.Bucket})
	require.NoError(t, err)

	kit.DeleteAndVerify(t, cdt.DeleteParams{Tenant: lifecycle.TextKey(d.id), Objects: objects, // prefixes from the layout
		WritePaths: []func(context.Context) error{
			func(ctx context.Context) error { return late(svc.Trigger(ctx, d.project, "late", nil)) },
			func(ctx context.Context) error { return svc.TagRun(ctx, d.untagged, d.run.Tags[0]) },
			func(ctx context.Context) error { return late(svc.StartAttempt(ctx, d.run, d.worker)) },
			func(ctx context.Context) error { return late(svc.Deploy(ctx, d.project, "20260101.2", "default")) },
			func(ctx context.Context) error { return late(svc.BatchTrigger(ctx, d.project, "late", 1)) },
			func(ctx context.Context) error { return svc.AddToBulkAction(ctx, d.group, d.run.ID) },
			func(ctx context.Context) error { return late(svc.ReceiveWebhook(ctx, d.project, d.endpoint, "late")) },
			func(ctx context.Context) error { return late(svc.AddMember(ctx, d.id, "late@example.test")) },
		}})
	left, err := objects.Any(ctx, "packets/"+d.id+"/")
	require.False(t, err != nil || left, "the deleted organization's payloads are left (%v)", err)
	for _, b := range bystanders {
		kept, err := objects.Any(ctx, jobs.PacketKey(b.id, b.run.FriendlyID))
		require.True(t, err == nil && kept, "organization %s's payload is gone (%v)", b.id, err)
	}
	var users, deliveries int // users are no organization's rows; the bystanders' deliveries stay in the runtime partitions
	require.NoError(t, db.QueryRow(ctx, `SELECT (SELECT count(*) FROM "User"), (SELECT count(*) FROM "WebhookDelivery")`).Scan(&users, &deliveries))
	require.Equal(t, [2]int{3, 2}, [2]int{users, deliveries})
}
