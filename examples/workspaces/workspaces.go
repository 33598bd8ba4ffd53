// Package workspaces is an example service that adopts community deletion
// the way docs/adopting.md describes: its tenants are rows of its own
// workspaces table, its tables are keyed by workspace_id (one in a second
// schema, one kept after a deletion with its key cleared), its files live
// under uploads/<workspace id>/ in S3 and its cache keys under
// ws:<workspace id>: in Redis. Its adoption is one migration of its own
// (migrations/00002_adopt_community_deletion.sql); its code never writes a
// row of the deletion schema.
//
// Its write paths are ordinary: database writes are fenced by the
// database, and the two side effects the fence cannot see (Upload,
// Remember) are admitted by lifecycle.Serving.GuardTransaction first. A
// write refused because the workspace is being or was deleted matches
// lifecycle.IsWriteFenceRefusal.
package workspaces

import (
	"bytes"
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/redis/go-redis/v9"

	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrate applies the service's own migrations to the database at
// databaseURL, recorded in goose's goose_db_version apart from the
// library's history. The library's migrations must already be applied
// (cmd/migrate up, or migration.Open(...).Up): the adoption migration calls
// its functions.
func Migrate(ctx context.Context, databaseURL string) (err error) {
	config, err := pgx.ParseConfig(databaseURL)
	if err != nil {
		return fmt.Errorf("workspaces: migrate: %w", err)
	}
	db := stdlib.OpenDB(*config)
	defer func() { err = errors.Join(err, closeDB(db)) }()
	files, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		return fmt.Errorf("workspaces: migrate: %w", err)
	}
	provider, err := goose.NewProvider(goose.DialectPostgres, db, files, goose.WithDisableGlobalRegistry(true))
	if err != nil {
		return fmt.Errorf("workspaces: migrate: %w", err)
	}
	if _, err := provider.Up(ctx); err != nil {
		return fmt.Errorf("workspaces: migrate: %w", err)
	}
	return nil
}

func closeDB(db *sql.DB) error {
	if err := db.Close(); err != nil {
		return fmt.Errorf("workspaces: close the migration connection: %w", err)
	}
	return nil
}

// Service is the workspaces service: its database (as an application
// login, a member of community_deletion_serving), its S3 bucket and its
// Redis.
type Service struct {
	db      *pgxpool.Pool
	serving *lifecycle.Serving
	objects *s3.Client
	bucket  string
	cache   redis.Cmdable
}

// New returns the service over db, the bucket of objects and cache. It
// fails when db's login is not a member of community_deletion_serving.
func New(ctx context.Context, db *pgxpool.Pool, objects *s3.Client, bucket string, cache redis.Cmdable) (*Service, error) {
	serving, err := lifecycle.NewServing(ctx, db, nil)
	if err != nil {
		return nil, fmt.Errorf("workspaces: %w", err)
	}
	return &Service{db: db, serving: serving, objects: objects, bucket: bucket, cache: cache}, nil
}

// UploadKey is the object key of a workspace's file: under
// uploads/<workspace id>/, the prefix the storage layout declares.
func UploadKey(workspace uuid.UUID, name string) string {
	return "uploads/" + workspace.String() + "/" + name
}

// CacheKey is the Redis key of a workspace's cached value: it matches
// ws:<workspace id>:*, the pattern the storage layout declares.
func CacheKey(workspace uuid.UUID, key string) string {
	return "ws:" + workspace.String() + ":" + key
}

// CreateWorkspace creates a workspace named slug and returns its id. It
// writes only the service's own tables; the library creates the
// workspace's lifecycle row itself.
func (s *Service) CreateWorkspace(ctx context.Context, slug string) (uuid.UUID, error) {
	var id uuid.UUID
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `INSERT INTO workspaces (slug) VALUES ($1) RETURNING id`, slug).Scan(&id); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `
			WITH a AS (INSERT INTO audit_log (workspace_id, action) VALUES ($1, 'workspace.created'))
			INSERT INTO analytics.events (workspace_id, name, properties) VALUES ($1, 'workspace_created', jsonb_build_object('slug', $2::text))`,
			id, slug)
		return err
	})
	if err != nil {
		return uuid.Nil, fmt.Errorf("workspaces: create workspace %q: %w", slug, err)
	}
	return id, nil
}

// AddProject creates a project in workspace and returns its id.
func (s *Service) AddProject(ctx context.Context, workspace uuid.UUID, name string) (uuid.UUID, error) {
	var id uuid.UUID
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `INSERT INTO projects (workspace_id, name) VALUES ($1, $2) RETURNING id`, workspace, name).Scan(&id); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO audit_log (workspace_id, action) VALUES ($1, 'project.created')`, workspace)
		return err
	})
	if err != nil {
		return uuid.Nil, fmt.Errorf("workspaces: add project to workspace %s: %w", workspace, err)
	}
	return id, nil
}

// Comment posts body on project of workspace and returns the comment's id.
func (s *Service) Comment(ctx context.Context, workspace, project uuid.UUID, body string) (uuid.UUID, error) {
	var id uuid.UUID
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `INSERT INTO comments (workspace_id, project_id, body) VALUES ($1, $2, $3) RETURNING id`,
			workspace, project, body).Scan(&id); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO analytics.events (workspace_id, name) VALUES ($1, 'comment_posted')`, workspace)
		return err
	})
	if err != nil {
		return uuid.Nil, fmt.Errorf("workspaces: comment on project %s of workspace %s: %w", project, workspace, err)
	}
	return id, nil
}

// Audit appends action to the workspace's audit log, the table whose rows
// outlive the workspace with their workspace_id cleared.
func (s *Service) Audit(ctx context.Context, workspace uuid.UUID, action string) error {
	if _, err := s.db.Exec(ctx, `INSERT INTO audit_log (workspace_id, action) VALUES ($1, $2)`, workspace, action); err != nil {
		return fmt.Errorf("workspaces: audit %q for workspace %s: %w", action, workspace, err)
	}
	return nil
}

// Upload stores body as the workspace's file name (one path segment) in
// S3 under UploadKey and records it in the audit log. The upload runs
// inside a transaction admitted by the write fence, whose shared lock holds
// a deletion's fence back until the upload is done: a file is either
// uploaded before the fence, and deleted with the workspace, or refused.
func (s *Service) Upload(ctx context.Context, workspace uuid.UUID, name string, body []byte) error {
	if name == "" || strings.ContainsAny(name, "/\\") || name == "." || name == ".." {
		return fmt.Errorf("workspaces: upload %q refused: a file name is one non-empty path segment without slashes", name)
	}
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		if err := s.serving.GuardTransaction(ctx, tx, workspace); err != nil {
			return err
		}
		if _, err := s.objects.PutObject(ctx, &s3.PutObjectInput{
			Bucket: aws.String(s.bucket), Key: aws.String(UploadKey(workspace, name)), Body: bytes.NewReader(body),
		}); err != nil {
			return fmt.Errorf("put object: %w", err)
		}
		_, err := tx.Exec(ctx, `INSERT INTO audit_log (workspace_id, action) VALUES ($1, 'file.uploaded')`, workspace)
		return err
	})
	if err != nil {
		return fmt.Errorf("workspaces: upload %q to workspace %s: %w", name, workspace, err)
	}
	return nil
}

// Remember caches value under the workspace's key for ttl, admitted by the
// write fence like Upload.
func (s *Service) Remember(ctx context.Context, workspace uuid.UUID, key, value string, ttl time.Duration) error {
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		if err := s.serving.GuardTransaction(ctx, tx, workspace); err != nil {
			return err
		}
		if err := s.cache.Set(ctx, CacheKey(workspace, key), value, ttl).Err(); err != nil {
			return fmt.Errorf("redis set: %w", err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("workspaces: cache %q for workspace %s: %w", key, workspace, err)
	}
	return nil
}
