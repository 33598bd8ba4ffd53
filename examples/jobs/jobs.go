// Package jobs is an example service in the shape of Trigger.dev's schema
// (see README.md): a background-jobs platform whose tenants are rows of its
// "Organization" table, keyed by a text cuid, with quoted mixed-case names.
// Only a few tables carry "organizationId"; the rest reach an organization
// through foreign keys, two and three levels down, including Prisma's
// implicit many-to-many tables; two reach it through ids the schema has no
// constraint for; and webhook deliveries go to a daily range-partitioned
// table whose partitions the service creates at runtime. Run payloads are
// stored in S3 under packets/<organization id>/. Its adoption of community
// deletion is one migration (migrations/00002_adopt_community_deletion.sql);
// its code never writes a row of the deletion schema.
//
// Database writes are fenced by the database. The one side effect the fence
// cannot see, a payload upload, is admitted first, in the transaction that
// records the run, by the Admit the service was built with.
package jobs

import (
	"bytes"
	"context"
	"crypto/rand"
	"embed"
	"errors"
	"fmt"
	"io/fs"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrate applies the service's own migrations to the database at
// databaseURL, recorded in goose's goose_db_version apart from the
// library's history. The library's migrations must already be applied
// (cmd/migrate up, or migration.Open(...).Up): the adoption migration calls
// its functions.
func Migrate(ctx context.Context, databaseURL string) error {
	return migrate(ctx, databaseURL, goose.MaxVersion)
}

// migrate applies the service's migrations up to version.
func migrate(ctx context.Context, databaseURL string, version int64) (err error) {
	config, err := pgx.ParseConfig(databaseURL)
	if err != nil {
		return fmt.Errorf("jobs: migrate: %w", err)
	}
	db := stdlib.OpenDB(*config)
	defer func() {
		if cerr := db.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("jobs: close the migration connection: %w", cerr))
		}
	}()
	files, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		return fmt.Errorf("jobs: migrate: %w", err)
	}
	provider, err := goose.NewProvider(goose.DialectPostgres, db, files, goose.WithDisableGlobalRegistry(true))
	if err != nil {
		return fmt.Errorf("jobs: migrate: %w", err)
	}
	if _, err := provider.UpTo(ctx, version); err != nil {
		return fmt.Errorf("jobs: migrate: %w", err)
	}
	return nil
}

// Admit admits a side effect of organization inside tx before it happens,
// or refuses it. Once the service has adopted community deletion it is the
// write fence's explicit admission (lifecycle.Serving.GuardTransaction for
// the organization's key): its shared lock holds a deletion's fence back
// until tx ends, and it refuses an organization being or already deleted.
type Admit func(ctx context.Context, tx pgx.Tx, organization string) error

// Service is the jobs platform: its database (as an application login), its
// S3 bucket and the admission of its uploads.
type Service struct {
	db      *pgxpool.Pool
	objects *s3.Client
	bucket  string
	admit   Admit
}

// New returns the service over db and the bucket of objects, whose uploads
// admit admits.
func New(db *pgxpool.Pool, objects *s3.Client, bucket string, admit Admit) (*Service, error) {
	if db == nil || objects == nil || bucket == "" || admit == nil {
		return nil, errors.New("jobs: New needs a database, an S3 client, a bucket and an Admit")
	}
	return &Service{db: db, objects: objects, bucket: bucket, admit: admit}, nil
}

// PacketKey is the object key of a run's payload: under
// packets/<organization id>/, the prefix the storage layout declares.
func PacketKey(organization, runFriendlyID string) string {
	return "packets/" + organization + "/" + runFriendlyID + "/payload.json"
}

// Project is a project of an organization with its production environment.
type Project struct {
	ID, Organization, Environment string
}

// Worker is a deployed version of a project and the queue it serves.
type Worker struct {
	ID, Queue string
}

// Run is a run of a task and the ids of its tags.
type Run struct {
	ID, FriendlyID string
	Project        Project
	Tags           []string
}

// Batch is a batch of runs.
type Batch struct {
	ID   string
	Runs []string
}

const base36 = "0123456789abcdefghijklmnopqrstuvwxyz"

// randomText returns n random base-36 characters.
func randomText(n int) string {
	raw := make([]byte, n)
	_, _ = rand.Read(raw) // never fails: crypto/rand crashes the program instead
	for i, b := range raw {
		raw[i] = base36[int(b)%len(base36)]
	}
	return string(raw)
}

// newID returns a new id in the shape of Prisma's cuid(): "c" and 24
// base-36 characters, 25 in all (random here, where cuid mixes in a
// timestamp, a counter and a fingerprint).
func newID() string { return "c" + randomText(24) }

// friendlyID returns a public id such as run_..., as Trigger.dev shows them.
func friendlyID(prefix string) string { return prefix + "_" + randomText(21) }

// CreateOrganization creates an organization and returns its id. It writes
// only the service's own table; the library, once adopted, creates the
// organization's lifecycle row itself.
func (s *Service) CreateOrganization(ctx context.Context, slug, title string) (string, error) {
	id := newID()
	if _, err := s.db.Exec(ctx, `INSERT INTO "Organization" ("id", "slug", "title", "updatedAt") VALUES ($1, $2, $3, CURRENT_TIMESTAMP)`,
		id, slug, title); err != nil {
		return "", fmt.Errorf("jobs: create organization %q: %w", slug, err)
	}
	return id, nil
}

// AddMember creates the user email (a row of no organization) and makes
// them a member of organization; it returns the user's id.
func (s *Service) AddMember(ctx context.Context, organization, email string) (string, error) {
	user := newID()
	_, err := s.db.Exec(ctx, `
		WITH u AS (INSERT INTO "User" ("id", "email", "updatedAt") VALUES ($1, $2, CURRENT_TIMESTAMP) RETURNING "id")
		INSERT INTO "OrgMember" ("id", "organizationId", "userId", "role", "updatedAt")
		SELECT $3, $4, u."id", 'ADMIN', CURRENT_TIMESTAMP FROM u`, user, email, newID(), organization)
	if err != nil {
		return "", fmt.Errorf("jobs: add member %q to organization %s: %w", email, organization, err)
	}
	return user, nil
}

// CreateProject creates a project of organization and its production
// environment.
func (s *Service) CreateProject(ctx context.Context, organization, name string) (Project, error) {
	p := Project{ID: newID(), Organization: organization, Environment: newID()}
	_, err := s.db.Exec(ctx, `
		WITH p AS (INSERT INTO "Project" ("id", "slug", "name", "externalRef", "organizationId", "updatedAt")
		           VALUES ($1, $2, $3, $4, $5, CURRENT_TIMESTAMP) RETURNING "id")
		INSERT INTO "RuntimeEnvironment" ("id", "slug", "apiKey", "type", "organizationId", "projectId", "updatedAt")
		SELECT $6, 'prod', $7, 'PRODUCTION', $5, p."id", CURRENT_TIMESTAMP FROM p`,
		p.ID, name+"-"+randomText(6), name, "proj_"+randomText(20), organization, p.Environment, "tr_prod_"+randomText(20))
	if err != nil {
		return Project{}, fmt.Errorf("jobs: create project %q in organization %s: %w", name, organization, err)
	}
	return p, nil
}

// Deploy records version of project's worker, serving queue (created on
// first use).
func (s *Service) Deploy(ctx context.Context, p Project, version, queue string) (Worker, error) {
	w := Worker{ID: newID()}
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO "BackgroundWorker" ("id", "friendlyId", "contentHash", "version", "metadata", "projectId", "runtimeEnvironmentId", "updatedAt")
			VALUES ($1, $2, $3, $4, '{}', $5, $6, CURRENT_TIMESTAMP)`, w.ID, friendlyID("worker"), randomText(32), version, p.ID, p.Environment); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `INSERT INTO "TaskQueue" ("id", "friendlyId", "name", "projectId", "runtimeEnvironmentId", "updatedAt")
			VALUES ($1, $2, $3, $4, $5, CURRENT_TIMESTAMP)
			ON CONFLICT ("runtimeEnvironmentId", "name") DO UPDATE SET "updatedAt" = EXCLUDED."updatedAt" RETURNING "id"`,
			newID(), friendlyID("queue"), queue, p.ID, p.Environment).Scan(&w.Queue); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO "_BackgroundWorkerToTaskQueue" ("A", "B") VALUES ($1, $2)`, w.ID, w.Queue)
		return err
	})
	if err != nil {
		return Worker{}, fmt.Errorf("jobs: deploy version %s of project %s: %w", version, p.ID, err)
	}
	return w, nil
}

// Trigger starts a run of task in project's production environment with
// payload and tags. The payload goes to the object store under PacketKey
// and the run names it; the organization is admitted first, and the rows
// are written before the object in one transaction, so a refused or failed
// trigger stores no payload.
func (s *Service) Trigger(ctx context.Context, p Project, task string, payload []byte, tags ...string) (Run, error) {
	r := Run{ID: newID(), FriendlyID: friendlyID("run"), Project: p}
	key := PacketKey(p.Organization, r.FriendlyID)
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		if err := s.admit(ctx, tx, p.Organization); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO "TaskRun" ("id", "friendlyId", "taskIdentifier", "payload", "payloadType", "traceId", "spanId", "runtimeEnvironmentId", "projectId", "queue", "updatedAt")
			VALUES ($1, $2, $3, $4, 'application/store', $5, $6, $7, $8, $9, CURRENT_TIMESTAMP)`,
			r.ID, r.FriendlyID, task, key, randomText(32), randomText(16), p.Environment, p.ID, "task/"+task); err != nil {
			return err
		}
		for _, name := range tags {
			var tag string
			if err := tx.QueryRow(ctx, `INSERT INTO "TaskRunTag" ("id", "name", "friendlyId", "projectId") VALUES ($1, $2, $3, $4)
				ON CONFLICT ("projectId", "name") DO UPDATE SET "name" = EXCLUDED."name" RETURNING "id"`,
				newID(), name, friendlyID("runtag"), p.ID).Scan(&tag); err != nil {
				return err
			}
			if err := tagRun(ctx, tx, r.ID, tag); err != nil {
				return err
			}
			r.Tags = append(r.Tags, tag)
		}
		if _, err := s.objects.PutObject(ctx, &s3.PutObjectInput{
			Bucket: aws.String(s.bucket), Key: aws.String(key), Body: bytes.NewReader(payload),
		}); err != nil {
			return fmt.Errorf("put object: %w", err)
		}
		return nil
	})
	if err != nil {
		return Run{}, fmt.Errorf("jobs: trigger %s in project %s: %w", task, p.ID, err)
	}
	return r, nil
}

// TagRun adds the tag to run: a row of "_TaskRunToTaskRunTag" alone, which
// reaches the organization only through its two parents.
func (s *Service) TagRun(ctx context.Context, run Run, tag string) error {
	if err := tagRun(ctx, s.db, run.ID, tag); err != nil {
		return fmt.Errorf("jobs: tag run %s: %w", run.FriendlyID, err)
	}
	return nil
}

func tagRun(ctx context.Context, db interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}, run, tag string,
) error {
	_, err := db.Exec(ctx, `INSERT INTO "_TaskRunToTaskRunTag" ("A", "B") VALUES ($1, $2)`, run, tag)
	return err
}

// StartAttempt records the next attempt of run on worker and returns its id.
func (s *Service) StartAttempt(ctx context.Context, run Run, w Worker) (string, error) {
	id := newID()
	_, err := s.db.Exec(ctx, `INSERT INTO "TaskRunAttempt" ("id", "number", "friendlyId", "taskRunId", "backgroundWorkerId", "queueId", "status", "updatedAt")
		SELECT $1, count(*) + 1, $2, $3, $4, $5, 'EXECUTING', CURRENT_TIMESTAMP FROM "TaskRunAttempt" WHERE "taskRunId" = $3`,
		id, friendlyID("attempt"), run.ID, w.ID, w.Queue)
	if err != nil {
		return "", fmt.Errorf("jobs: start an attempt of run %s: %w", run.FriendlyID, err)
	}
	return id, nil
}

// BatchTrigger starts n runs of task in project's production environment as
// one batch, their payloads inline.
func (s *Service) BatchTrigger(ctx context.Context, p Project, task string, n int) (Batch, error) {
	b := Batch{ID: newID()}
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO "BatchTaskRun" ("id", "friendlyId", "runtimeEnvironmentId", "runCount", "updatedAt")
			VALUES ($1, $2, $3, $4, CURRENT_TIMESTAMP)`, b.ID, friendlyID("batch"), p.Environment, n); err != nil {
			return err
		}
		for range n {
			run := newID()
			if _, err := tx.Exec(ctx, `
				WITH r AS (INSERT INTO "TaskRun" ("id", "friendlyId", "taskIdentifier", "payload", "traceId", "spanId", "runtimeEnvironmentId", "projectId", "queue", "updatedAt")
				           VALUES ($1, $2, $3, '{}', $4, $5, $6, $7, $8, CURRENT_TIMESTAMP) RETURNING "id")
				INSERT INTO "BatchTaskRunItem" ("id", "batchTaskRunId", "taskRunId", "updatedAt") SELECT $9, $10, r."id", CURRENT_TIMESTAMP FROM r`,
				run, friendlyID("run"), task, randomText(32), randomText(16), p.Environment, p.ID, "task/"+task, newID(), b.ID); err != nil {
				return err
			}
			b.Runs = append(b.Runs, run)
		}
		return nil
	})
	if err != nil {
		return Batch{}, fmt.Errorf("jobs: batch-trigger %s in project %s: %w", task, p.ID, err)
	}
	return b, nil
}

// Replay starts a bulk replay of runs in project and returns the bulk
// action's id.
func (s *Service) Replay(ctx context.Context, p Project, runs ...string) (string, error) {
	group := newID()
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO "BulkActionGroup" ("id", "friendlyId", "projectId", "type", "totalCount", "updatedAt")
			VALUES ($1, $2, $3, 'REPLAY', $4, CURRENT_TIMESTAMP)`, group, friendlyID("bulk"), p.ID, len(runs)); err != nil {
			return err
		}
		for _, run := range runs {
			if err := addToBulkAction(ctx, tx, group, run); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("jobs: replay %d runs of project %s: %w", len(runs), p.ID, err)
	}
	return group, nil
}

// AddToBulkAction adds run to the bulk action group: a row of
// "BulkActionItem" alone, which has neither an organization column nor a
// foreign key.
func (s *Service) AddToBulkAction(ctx context.Context, group, run string) error {
	if err := addToBulkAction(ctx, s.db, group, run); err != nil {
		return fmt.Errorf("jobs: add run %s to bulk action %s: %w", run, group, err)
	}
	return nil
}

func addToBulkAction(ctx context.Context, db interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}, group, run string,
) error {
	_, err := db.Exec(ctx, `INSERT INTO "BulkActionItem" ("id", "groupId", "type", "sourceRunId", "updatedAt") VALUES ($1, $2, 'REPLAY', $3, CURRENT_TIMESTAMP)`,
		newID(), group, run)
	return err
}

// CreateWebhookEndpoint creates an endpoint of project receiving webhooks
// from source and returns its id.
func (s *Service) CreateWebhookEndpoint(ctx context.Context, p Project, source string) (string, error) {
	id := newID()
	if _, err := s.db.Exec(ctx, `INSERT INTO "WebhookEndpoint" ("id", "friendlyId", "organizationId", "projectId", "runtimeEnvironmentId", "source", "updatedAt")
		VALUES ($1, $2, $3, $4, $5, $6, CURRENT_TIMESTAMP)`, id, friendlyID("whe"), p.Organization, p.ID, p.Environment, source); err != nil {
		return "", fmt.Errorf("jobs: create a %s webhook endpoint in project %s: %w", source, p.ID, err)
	}
	return id, nil
}

// ReceiveWebhook records a delivery to endpoint of project, in today's
// partition (EnsurePartitions makes it), and returns its id.
func (s *Service) ReceiveWebhook(ctx context.Context, p Project, endpoint, externalID string) (string, error) {
	id := newID()
	if _, err := s.db.Exec(ctx, `INSERT INTO "WebhookDelivery" ("id", "friendlyId", "webhookEndpointId", "organizationId", "projectId", "runtimeEnvironmentId", "externalDeliveryId", "updatedAt")
		VALUES ($1, $2, $3, $4, $5, $6, $7, CURRENT_TIMESTAMP)`, id, friendlyID("whd"), endpoint, p.Organization, p.ID, p.Environment, externalID); err != nil {
		return "", fmt.Errorf("jobs: receive webhook %s for endpoint %s: %w", externalID, endpoint, err)
	}
	return id, nil
}

// EnsurePartitions makes the "WebhookDelivery" partitions of today and the
// next lookahead days, by the database's clock, as the service's cron does,
// and returns the names of those it created. One statement, so that every
// day counts from the same today.
func (s *Service) EnsurePartitions(ctx context.Context, lookahead int) ([]string, error) {
	rows, err := s.db.Query(ctx, `SELECT 'WebhookDelivery_' || to_char(d, 'YYYY_MM_DD'), create_webhook_delivery_partition(d)
		FROM (SELECT CURRENT_DATE + i AS d FROM generate_series(0, $1::integer) AS i) AS days ORDER BY d`, lookahead)
	if err != nil {
		return nil, fmt.Errorf("jobs: ensure the webhook delivery partitions: %w", err)
	}
	var created []string
	for rows.Next() {
		var name string
		var made bool
		if err := rows.Scan(&name, &made); err != nil {
			rows.Close()
			return nil, fmt.Errorf("jobs: ensure the webhook delivery partitions: %w", err)
		}
		if made {
			created = append(created, name)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("jobs: ensure the webhook delivery partitions: %w", err)
	}
	return created, nil
}
