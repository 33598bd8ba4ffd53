package communitydeletiontest_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tombstoneworks/communitydeletion/communitydeletiontest"
	"github.com/tombstoneworks/communitydeletion/executor"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

func TestRequireCoverageCatchesAForgottenTable(t *testing.T) {
	t.Parallel()
	kit := communitydeletiontest.Start(t, communitydeletiontest.WithServiceMigrations(sqlMigration(serviceSchema)))
	got := record(t, kit.RequireCoverage)
	if got.fatal {
		t.Fatalf("RequireCoverage stopped the test: %q", got.lines)
	}
	want := []string{"communitydeletiontest: coverage: table public.reminders holds tenant data but is not registered: " +
		"attach it by its community_id column with community_deletion.attach_community_write_fence('public.reminders', 'delete', 'community_id') ('nullify' to keep its rows), " +
		"or exclude it with community_deletion.exclude_table('public.reminders', reason)"}
	if !slices.Equal(got.lines, want) {
		t.Fatalf("RequireCoverage reported\n%s\nwant\n%s", strings.Join(got.lines, "\n"), strings.Join(want, "\n"))
	}
}

func TestRequireCoveragePassesOnceAttached(t *testing.T) {
	t.Parallel()
	kit := communitydeletiontest.Start(t, communitydeletiontest.WithServiceMigrations(sqlMigration(serviceSchema)),
		communitydeletiontest.WithServiceMigrations(sqlMigration(attachReminders)))
	kit.RequireCoverage(t)
}

func TestRequireCoverageReportsAnUnfencedTable(t *testing.T) {
	t.Parallel()
	kit := communitydeletiontest.Start(t, communitydeletiontest.WithServiceMigrations(sqlMigration(serviceSchema)),
		communitydeletiontest.WithServiceMigrations(sqlMigration(attachReminders+
			`
			DO $$ DECLARE name text; BEGIN
			  FOR name IN SELECT tgname FROM pg_trigger WHERE tgrelid = 'notes'::regclass
			      AND tgfoid = 'community_deletion.enforce_community_write_fence()'::regprocedure LOOP
			    EXECUTE format('ALTER TABLE notes DISABLE TRIGGER %I', name);
			  END LOOP;
			END $$;`)))
	problems, err := kit.Coverage(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(problems) != 1 || !strings.HasPrefix(problems[0], "table notes is registered but lacks its write fence ('delete')") {
		t.Fatalf("Coverage reported %q, want notes unfenced", problems)
	}
}

func TestDeleteAndVerifyDeletesACommunity(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	kit := communitydeletiontest.Start(t, communitydeletiontest.WithServiceMigrations(sqlMigration(serviceSchema)),
		communitydeletiontest.WithServiceMigrations(sqlMigration(attachReminders)))
	svc := service{url: kit.URL(communitydeletiontest.RoleOwner)}
	doomed, err := svc.createCommunity(ctx)
	if err != nil {
		t.Fatal(err)
	}
	bystander, err := svc.createCommunity(ctx)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	files := executor.NewFileObjectStore(root)
	putFiles(t, root, doomed, "a.txt", "b/c.txt")
	putFiles(t, root, bystander, "keep.txt")
	cache := executor.NewMemoryCache()
	cache.Put(lifecycle.UUIDKey(doomed), "session:1")
	cache.Put(lifecycle.UUIDKey(bystander), "session:2")
	serving := service{url: kit.URL(communitydeletiontest.RoleServing)}
	if err := serving.writeNote(doomed)(ctx); err != nil {
		t.Fatalf("the serving login cannot write before the deletion: %v", err)
	}

	kit.DeleteAndVerify(t, communitydeletiontest.DeleteParams{
		CommunityID: doomed, Objects: files, Cache: cache,
		Prefixes:   []string{"uploads/" + doomed.String() + "/"},
		WritePaths: []func(ctx context.Context) error{serving.writeNote(doomed)},
	})
	if kept, err := files.Any(ctx, "uploads/"+bystander.String()+"/"); err != nil || !kept {
		t.Fatalf("the bystander's files are gone (%v)", err)
	}
	if cache.Len(lifecycle.UUIDKey(bystander)) != 1 {
		t.Fatal("the bystander's cache entry is gone")
	}
}

func TestDeleteAndVerifyFindsALeftoverRowAndAnUnfencedWritePath(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	kit := communitydeletiontest.Start(t, communitydeletiontest.WithServiceMigrations(sqlMigration(serviceSchema)),
		communitydeletiontest.WithServiceMigrations(sqlMigration(attachReminders)))
	svc := service{url: kit.URL(communitydeletiontest.RoleOwner)}
	doomed, err := svc.createCommunity(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.createCommunity(ctx); err != nil {
		t.Fatal(err)
	}
	// The service logs the community's id in a table the registry cannot see.
	if err := svc.exec(ctx, "INSERT INTO event_log (payload) VALUES ('created community ' || upper($1::text))", doomed); err != nil {
		t.Fatal(err)
	}
	serving := service{url: kit.URL(communitydeletiontest.RoleServing)}
	logEvent := func(ctx context.Context) error {
		return serving.exec(ctx, "INSERT INTO event_log (payload) VALUES ('late write')")
	}
	got := record(t, func(tb testing.TB) {
		tb.Helper()
		kit.DeleteAndVerify(tb, communitydeletiontest.DeleteParams{
			CommunityID: doomed, Objects: executor.NewFileObjectStore(t.TempDir()),
			Prefixes:   []string{"uploads/" + doomed.String() + "/"},
			WritePaths: []func(ctx context.Context) error{serving.writeNote(doomed), logEvent},
		})
	})
	if got.fatal {
		t.Fatalf("DeleteAndVerify stopped the test: %q", got.lines)
	}
	lateWrite := func(when string) string {
		return "communitydeletiontest: delete and verify: write path 2 succeeded for community " + doomed.String() + " " + when +
			"; it writes a table without the write fence (register the table, or call community_deletion.assert_tenant_write_allowed first)"
	}
	want := []string{
		lateWrite("while it was fenced"),
		lateWrite("after its deletion"),
		// The planted row; the late writes' rows do not name the community.
		"communitydeletiontest: delete and verify: 1 row(s) of public.event_log still hold community " + doomed.String() +
			" in column payload (text)",
	}
	if !slices.Equal(got.lines, want) {
		t.Fatalf("DeleteAndVerify reported\n%s\nwant\n%s", strings.Join(got.lines, "\n"), strings.Join(want, "\n"))
	}
}

func TestDeleteAndVerifyFindsABystanderChanged(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	kit := communitydeletiontest.Start(t, communitydeletiontest.WithServiceMigrations(sqlMigration(serviceSchema)),
		communitydeletiontest.WithServiceMigrations(sqlMigration(attachReminders)))
	svc := service{url: kit.URL(communitydeletiontest.RoleOwner)}
	doomed, err := svc.createCommunity(ctx)
	if err != nil {
		t.Fatal(err)
	}
	bystander, err := svc.createCommunity(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A buggy write path that edits another community's notes.
	serving := service{url: kit.URL(communitydeletiontest.RoleServing)}
	editBystander := func(ctx context.Context) error {
		return serving.exec(ctx, "UPDATE notes SET body = 'edited' WHERE community_id = $1", bystander)
	}
	got := record(t, func(tb testing.TB) {
		tb.Helper()
		kit.DeleteAndVerify(tb, communitydeletiontest.DeleteParams{
			CommunityID: doomed, Objects: executor.NewFileObjectStore(t.TempDir()),
			Prefixes:   []string{"uploads/" + doomed.String() + "/"},
			WritePaths: []func(ctx context.Context) error{editBystander},
		})
	})
	if len(got.lines) != 3 || !strings.HasPrefix(got.lines[2],
		"communitydeletiontest: delete and verify: table public.notes: other communities' rows changed (3 rows, md5 ") {
		t.Fatalf("DeleteAndVerify reported\n%s\nwant the write path and the changed bystander notes", strings.Join(got.lines, "\n"))
	}
}

func TestRequireCoverageReportsAPurgeOrderCycle(t *testing.T) {
	t.Parallel()
	kit := communitydeletiontest.Start(t, communitydeletiontest.WithServiceMigrations(sqlMigration(serviceSchema+attachReminders+`
		CREATE TABLE boards (id bigint PRIMARY KEY, community_id uuid NOT NULL REFERENCES community_deletion.communities (id), pinned_card bigint);
		CREATE TABLE cards (id bigint PRIMARY KEY, community_id uuid NOT NULL REFERENCES community_deletion.communities (id),
		                    board_id bigint NOT NULL REFERENCES boards (id));
		ALTER TABLE boards ADD CONSTRAINT boards_pinned_card_fkey FOREIGN KEY (pinned_card) REFERENCES cards (id);
		SELECT community_deletion.attach_community_write_fence('boards');
		SELECT community_deletion.attach_community_write_fence('cards');`)))
	got := record(t, kit.RequireCoverage)
	if len(got.lines) != 1 || !strings.HasPrefix(got.lines[0], "communitydeletiontest: coverage: the purge order cannot be computed: ") ||
		!strings.Contains(got.lines[0], "boards") || !strings.Contains(got.lines[0], "cards") {
		t.Fatalf("RequireCoverage reported %q, want the boards/cards cycle", got.lines)
	}
}

// A table the service forgot, with neither a tenant column nor a foreign
// key (links to notes by id), keeps rows pointing at the deleted tenant's
// notes: the drift report cannot see it, the deletion leaves it, and
// DeleteAndCheck names the table, the column and the keys.
func TestDeleteAndVerifyFindsARowPointingAtADeletedRow(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	kit := communitydeletiontest.Start(t, communitydeletiontest.WithServiceMigrations(sqlMigration(serviceSchema+attachReminders+`
		CREATE TABLE note_links (note_id bigint NOT NULL, url text NOT NULL);`)))
	svc := service{url: kit.URL(communitydeletiontest.RoleOwner)}
	doomed, err := svc.createCommunity(ctx)
	if err != nil {
		t.Fatal(err)
	}
	bystander, err := svc.createCommunity(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.exec(ctx, `INSERT INTO note_links (note_id, url) SELECT id, 'https://example.test/' || id FROM notes`); err != nil {
		t.Fatal(err)
	}
	var keys []string
	if err := pgxCollect(ctx, kit.URL(communitydeletiontest.RoleOwner),
		"SELECT id::text FROM notes WHERE community_id = $1 ORDER BY id", &keys, doomed); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	problems, err := kit.DeleteAndCheck(ctx, communitydeletiontest.DeleteParams{
		CommunityID: doomed, Objects: executor.NewFileObjectStore(root), Prefixes: []string{"uploads/" + doomed.String() + "/"},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"table public.note_links: rows still point at deleted rows of public.notes: column note_id holds 3 of their keys (" +
		strings.Join(keys, ", ") + ")"}
	if !slices.Equal(problems, want) {
		t.Fatalf("DeleteAndCheck reported\n%s\nwant\n%s", strings.Join(problems, "\n"), strings.Join(want, "\n"))
	}
	var left []string // the bystander's links stay
	if err := pgxCollect(ctx, kit.URL(communitydeletiontest.RoleOwner),
		"SELECT l.url FROM note_links l JOIN notes n ON n.id = l.note_id WHERE n.community_id = $1", &left, bystander); err != nil || len(left) != 3 {
		t.Fatalf("the bystander's links: %q (%v)", left, err)
	}
}

// pgxCollect reads one text column of every row of sql into out.
func pgxCollect(ctx context.Context, url, sql string, out *[]string, args ...any) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, sql, args...)
	if err != nil {
		return err
	}
	*out, err = pgx.CollectRows(rows, pgx.RowTo[string])
	return err
}
