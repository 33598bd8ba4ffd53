package communitydeletiontest_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// The fake service's schema: notes ('delete'), note_audit ('nullify'), and
// reminders, a tenant table its first migration forgets to register.
const serviceSchema = `
CREATE TABLE notes (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    community_id uuid NOT NULL REFERENCES community_deletion.communities (id),
    body text NOT NULL
);
CREATE TABLE note_audit (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    community_id uuid REFERENCES community_deletion.communities (id),
    action text NOT NULL
);
CREATE TABLE reminders (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    community_id uuid NOT NULL REFERENCES community_deletion.communities (id),
    due text NOT NULL
);
-- Not tenant data by its shape: no community_id, no key to communities.
CREATE TABLE event_log (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    payload text NOT NULL
);
SELECT community_deletion.attach_community_write_fence('notes');
SELECT community_deletion.attach_community_write_fence('note_audit', 'nullify');
GRANT SELECT, INSERT, UPDATE, DELETE ON notes, note_audit, reminders, event_log TO community_deletion_serving;
`

// attachReminders is the migration that fixes the forgotten table.
const attachReminders = `SELECT community_deletion.attach_community_write_fence('reminders');`

// sqlMigration returns a service migration that runs statements.
func sqlMigration(statements string) func(ctx context.Context, databaseURL string) error {
	return func(ctx context.Context, databaseURL string) error {
		conn, err := pgx.Connect(ctx, databaseURL)
		if err != nil {
			return err
		}
		defer conn.Close(context.WithoutCancel(ctx))
		_, err = conn.Exec(ctx, statements)
		return err
	}
}

// service is the fake service's own code: how it creates a community and
// writes its rows, over a connection string.
type service struct{ url string }

func (s service) exec(ctx context.Context, sql string, args ...any) error {
	conn, err := pgx.Connect(ctx, s.url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, sql, args...)
	return err
}

// createCommunity inserts a community with notes, an audit row and a
// reminder, as the service's signup would.
func (s service) createCommunity(ctx context.Context) (uuid.UUID, error) {
	id := uuid.New()
	err := s.exec(ctx, `
		WITH c AS (INSERT INTO community_deletion.communities (id, host) VALUES ($1::uuid, 'c-' || $1::uuid::text || '.example') RETURNING id),
		     n AS (INSERT INTO notes (community_id, body) SELECT id, 'hello' FROM c, generate_series(1, 3)),
		     a AS (INSERT INTO note_audit (community_id, action) SELECT id, 'created' FROM c)
		INSERT INTO reminders (community_id, due) SELECT id, 'tomorrow' FROM c`, id)
	return id, err
}

// writeNote is a write path of the service.
func (s service) writeNote(community uuid.UUID) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		return s.exec(ctx, "INSERT INTO notes (community_id, body) VALUES ($1, 'late')", community)
	}
}

// putFiles writes files under community's uploads/ prefix.
func putFiles(t *testing.T, root string, community uuid.UUID, names ...string) {
	t.Helper()
	for _, name := range names {
		p := filepath.Join(root, "uploads", community.String(), name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(name), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// recordingTB is a testing.TB that records failures instead of failing the
// real test, to assert what the kit reports.
type recordingTB struct {
	testing.TB

	mu     sync.Mutex
	lines  []string
	fatal  bool
	failed bool
}

// fatalStop unwinds a recorded Fatal.
type fatalStop struct{}

func (r *recordingTB) Error(args ...any) { r.record(fmt.Sprint(args...)) }
func (r *recordingTB) Errorf(format string, args ...any) {
	r.record(fmt.Sprintf(format, args...))
}
func (r *recordingTB) Fatal(args ...any) { r.Error(args...); r.FailNow() }
func (r *recordingTB) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	r.FailNow()
}
func (r *recordingTB) Fail() { r.mu.Lock(); r.failed = true; r.mu.Unlock() }
func (r *recordingTB) FailNow() {
	r.mu.Lock()
	r.failed, r.fatal = true, true
	r.mu.Unlock()
	panic(fatalStop{})
}
func (r *recordingTB) Failed() bool { r.mu.Lock(); defer r.mu.Unlock(); return r.failed }

func (r *recordingTB) record(line string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed = true
	r.lines = append(r.lines, line)
}

// record runs fn with a recordingTB over t and returns it.
func record(t *testing.T, fn func(tb testing.TB)) *recordingTB {
	t.Helper()
	r := &recordingTB{TB: t}
	func() {
		defer func() {
			if v := recover(); v != nil {
				if _, ok := v.(fatalStop); !ok {
					panic(v)
				}
			}
		}()
		fn(r)
	}()
	return r
}
