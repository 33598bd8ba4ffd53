package jobs_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	cdt "github.com/tombstoneworks/communitydeletion/communitydeletiontest"
	"github.com/tombstoneworks/communitydeletion/examples/jobs"
)

var errRefused = errors.New("refused by the test's admission")

func requireSQLState(t *testing.T, err error, code string) {
	t.Helper()
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, code, pgErr.Code, pgErr.Message)
}

// objectsUnder counts the objects under prefix.
func objectsUnder(t *testing.T, prefix string) int {
	t.Helper()
	out, err := s3srv.Client("").ListObjectsV2(t.Context(), &s3.ListObjectsV2Input{Bucket: aws.String(s3srv.Bucket), Prefix: aws.String(prefix)})
	require.NoError(t, err)
	return len(out.Contents)
}

// TestJobsSchemaBeforeAdoption runs the service's write paths for three
// organizations on its own schema (migration 00001 only), as the
// application's login: text cuid keys, rows two and three levels below the
// organization through foreign keys and through ids without a constraint,
// payloads under the organization's prefix, admitted before they are
// stored, and the daily partitions the service makes at runtime.
func TestJobsSchemaBeforeAdoption(t *testing.T) {
	ctx := t.Context()
	kit := cdt.Start(t, cdt.WithServiceMigrations(jobs.MigrateSchemaOnly))
	owner, err := pgxpool.New(ctx, kit.URL(cdt.RoleOwner))
	require.NoError(t, err)
	t.Cleanup(owner.Close)
	var migrator string
	require.NoError(t, owner.QueryRow(ctx, `SELECT current_user`).Scan(&migrator))
	// What 00002 grants the application's role, without the adoption.
	_, err = owner.Exec(ctx, `GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO community_deletion_serving;
		GRANT EXECUTE ON FUNCTION create_webhook_delivery_partition(date) TO community_deletion_serving`)
	require.NoError(t, err)
	db, err := pgxpool.New(ctx, kit.URL(cdt.RoleServing))
	require.NoError(t, err)
	t.Cleanup(db.Close)
	var asked []string
	refuse := map[string]bool{}
	svc, err := jobs.New(db, s3srv.Client(""), s3srv.Bucket, func(_ context.Context, _ pgx.Tx, org string) error {
		asked = append(asked, org)
		if refuse[org] {
			return errRefused
		}
		return nil
	})
	require.NoError(t, err)

	created, err := svc.EnsurePartitions(ctx, 1)
	require.NoError(t, err)
	require.Len(t, created, 2, "today's and tomorrow's partitions, made at runtime")
	type seeded struct {
		org     string
		project jobs.Project
		run     jobs.Run
	}
	var orgs []seeded
	for i := range 3 {
		org, err := svc.CreateOrganization(ctx, fmt.Sprintf("org-%d", i), "Org")
		require.NoError(t, err)
		require.Regexp(t, `^c[0-9a-z]{24}$`, org, "a cuid-shaped text key")
		_, err = svc.AddMember(ctx, org, fmt.Sprintf("dev%d@example.test", i))
		require.NoError(t, err)
		p, err := svc.CreateProject(ctx, org, "app")
		require.NoError(t, err)
		w, err := svc.Deploy(ctx, p, "20260101.1", "default")
		require.NoError(t, err)
		run, err := svc.Trigger(ctx, p, "send-email", []byte(`{"to":"`+org+`"}`), "env:prod", "nightly")
		require.NoError(t, err)
		require.Equal(t, []string{org}, asked, "the payload upload is admitted for its organization")
		asked = nil
		_, err = svc.StartAttempt(ctx, run, w)
		require.NoError(t, err)
		batch, err := svc.BatchTrigger(ctx, p, "resize", 2)
		require.NoError(t, err)
		_, err = svc.Replay(ctx, p, append(batch.Runs, run.ID)...)
		require.NoError(t, err)
		endpoint, err := svc.CreateWebhookEndpoint(ctx, p, "stripe")
		require.NoError(t, err)
		_, err = svc.ReceiveWebhook(ctx, p, endpoint, "evt_"+org)
		require.NoError(t, err)
		orgs = append(orgs, seeded{org: org, project: p, run: run})
	}

	for _, o := range orgs {
		var payload string
		require.NoError(t, db.QueryRow(ctx, `SELECT "payload" FROM "TaskRun" WHERE "id" = $1`, o.run.ID).Scan(&payload))
		require.Equal(t, jobs.PacketKey(o.org, o.run.FriendlyID), payload, "the run names its payload's object")
		require.Equal(t, 1, objectsUnder(t, "packets/"+o.org+"/"), "one payload under the organization's prefix")
		// Every table reaches its organization, by foreign keys (two and three
		// levels down) or by ids without a constraint.
		var counts [7]int
		require.NoError(t, db.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM "_TaskRunToTaskRunTag" j JOIN "TaskRun" r ON r."id" = j."A" JOIN "TaskRunTag" g ON g."id" = j."B" JOIN "Project" p ON p."id" = g."projectId" AND p."id" = r."projectId" WHERE p."organizationId" = $1),
			(SELECT count(*) FROM "_BackgroundWorkerToTaskQueue" j JOIN "BackgroundWorker" w ON w."id" = j."A" JOIN "RuntimeEnvironment" e ON e."id" = w."runtimeEnvironmentId" WHERE e."organizationId" = $1),
			(SELECT count(*) FROM "TaskRunAttempt" a JOIN "TaskRun" r ON r."id" = a."taskRunId" JOIN "RuntimeEnvironment" e ON e."id" = r."runtimeEnvironmentId" WHERE e."organizationId" = $1),
			(SELECT count(*) FROM "BatchTaskRunItem" i JOIN "BatchTaskRun" b ON b."id" = i."batchTaskRunId" JOIN "RuntimeEnvironment" e ON e."id" = b."runtimeEnvironmentId" WHERE e."organizationId" = $1),
			(SELECT count(*) FROM "BulkActionItem" i JOIN "BulkActionGroup" g ON g."id" = i."groupId" JOIN "TaskRun" r ON r."id" = i."sourceRunId" AND r."projectId" = g."projectId" JOIN "Project" p ON p."id" = g."projectId" WHERE p."organizationId" = $1),
			(SELECT count(*) FROM "WebhookDelivery" WHERE "organizationId" = $1),
			(SELECT count(*) FROM "OrgMember" WHERE "organizationId" = $1)`, o.org).Scan(
			&counts[0], &counts[1], &counts[2], &counts[3], &counts[4], &counts[5], &counts[6]))
		require.Equal(t, [7]int{2, 1, 1, 2, 3, 1, 1}, counts, "tags, worker queues, attempts, batch items, bulk items, deliveries, members of %s", o.org)
	}

	// The service's partition manager: a new day's partition is made at
	// runtime, by its owner, the migrating role; rows of that day land in
	// it through the parent; a day without one is refused; a second call
	// makes nothing; the name of a table that is not that day's partition
	// is refused; and a login without EXECUTE cannot call it.
	var day, name string
	require.NoError(t, db.QueryRow(ctx, `SELECT (CURRENT_DATE + 10)::text, 'WebhookDelivery_' || to_char(CURRENT_DATE + 10, 'YYYY_MM_DD')`).Scan(&day, &name))
	var made, again bool
	require.NoError(t, db.QueryRow(ctx, `SELECT create_webhook_delivery_partition($1::date)`, day).Scan(&made))
	require.NoError(t, db.QueryRow(ctx, `SELECT create_webhook_delivery_partition($1::date)`, day).Scan(&again))
	require.True(t, made && !again, "made once, then found")
	var partOwner string
	require.NoError(t, owner.QueryRow(ctx, `SELECT pg_get_userbyid(c.relowner) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = '"WebhookDelivery"'::regclass AND c.relname = $1`, name).Scan(&partOwner))
	require.Equal(t, migrator, partOwner)
	o := orgs[0]
	deliver := func(at string) (landed string, err error) {
		err = db.QueryRow(ctx, `INSERT INTO "WebhookDelivery" ("id", "friendlyId", "webhookEndpointId", "organizationId", "projectId", "runtimeEnvironmentId", "externalDeliveryId", "createdAt", "updatedAt")
			VALUES ('c' || md5(random()::text), 'whd_late', 'none', $1, $2, $3, 'evt', $4::timestamp, CURRENT_TIMESTAMP) RETURNING tableoid::regclass::text`,
			o.org, o.project.ID, o.project.Environment, at).Scan(&landed)
		return landed, err
	}
	landed, err := deliver(day + " 12:00")
	require.NoError(t, err)
	require.Equal(t, `"`+name+`"`, landed)
	var later string
	require.NoError(t, db.QueryRow(ctx, `SELECT (CURRENT_DATE + 40)::text`).Scan(&later))
	_, err = deliver(later + " 12:00")
	requireSQLState(t, err, pgerrcode.CheckViolation) // no partition of "WebhookDelivery" for that day
	var squatDay, squatName string
	require.NoError(t, db.QueryRow(ctx, `SELECT (CURRENT_DATE + 11)::text, 'WebhookDelivery_' || to_char(CURRENT_DATE + 11, 'YYYY_MM_DD')`).Scan(&squatDay, &squatName))
	_, err = owner.Exec(ctx, `CREATE TABLE public.`+pgx.Identifier{squatName}.Sanitize()+` (id text)`)
	require.NoError(t, err)
	_, err = db.Exec(ctx, `SELECT create_webhook_delivery_partition($1::date)`, squatDay)
	requireSQLState(t, err, pgerrcode.DuplicateTable)
	operator, err := pgxpool.New(ctx, kit.URL(cdt.RoleOperator))
	require.NoError(t, err)
	t.Cleanup(operator.Close)
	_, err = operator.Exec(ctx, `SELECT create_webhook_delivery_partition(CURRENT_DATE + 12)`)
	requireSQLState(t, err, pgerrcode.InsufficientPrivilege)

	// A refused admission stores no payload and records no run; rows that
	// fail store none either, since they go in before the object.
	refuse[o.org] = true
	_, err = svc.Trigger(ctx, o.project, "send-email", []byte(`{}`))
	require.ErrorIs(t, err, errRefused)
	delete(refuse, o.org)
	broken := o.project
	broken.Environment = "c" + "000000000000000000000000"
	_, err = svc.Trigger(ctx, broken, "send-email", []byte(`{}`))
	requireSQLState(t, err, pgerrcode.ForeignKeyViolation)
	require.Equal(t, 1, objectsUnder(t, "packets/"+o.org+"/"), "only the first payload")
	var runs int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM "TaskRun" WHERE "projectId" = $1 AND "payloadType" = 'application/store'`, o.project.ID).Scan(&runs))
	require.Equal(t, 1, runs)
}
