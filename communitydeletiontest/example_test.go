package communitydeletiontest_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/tombstoneworks/communitydeletion/communitydeletiontest"
	"github.com/tombstoneworks/communitydeletion/executor"
)

// A service's test, written with New and Close as a TestMain would: its
// first migration forgot to register a table, which Coverage reports; once
// its next migration registers it, a community seeded by the service is
// deleted with nothing left.
func Example() {
	ctx := context.Background()
	migrate := func(statements string) func(ctx context.Context, url string) error {
		return func(ctx context.Context, url string) error {
			conn, err := pgx.Connect(ctx, url)
			if err != nil {
				return err
			}
			defer conn.Close(ctx)
			_, err = conn.Exec(ctx, statements)
			return err
		}
	}
	first := migrate(`
		CREATE TABLE posts (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		                    community_id uuid NOT NULL REFERENCES community_deletion.communities (id), body text NOT NULL);
		CREATE TABLE likes (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
		                    community_id uuid NOT NULL REFERENCES community_deletion.communities (id));
		SELECT community_deletion.attach_community_write_fence('posts');
		GRANT SELECT, INSERT ON posts, likes TO community_deletion_serving;`)

	kit, err := communitydeletiontest.New(ctx, communitydeletiontest.WithServiceMigrations(first))
	if err != nil {
		panic(err)
	}
	problems, err := kit.Coverage(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println(problems)
	if err := kit.Close(ctx); err != nil {
		panic(err)
	}

	kit, err = communitydeletiontest.New(ctx, communitydeletiontest.WithServiceMigrations(first),
		communitydeletiontest.WithServiceMigrations(migrate(`SELECT community_deletion.attach_community_write_fence('likes');`)))
	if err != nil {
		panic(err)
	}
	defer kit.Close(ctx)
	problems, err = kit.Coverage(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println("coverage problems:", len(problems))

	// The service's own code seeds a community, its rows and a file.
	community := uuid.New()
	owner, err := pgx.Connect(ctx, kit.URL(communitydeletiontest.RoleOwner))
	if err != nil {
		panic(err)
	}
	defer owner.Close(ctx)
	if _, err := owner.Exec(ctx, `INSERT INTO community_deletion.communities (id, host) VALUES ($1, $2)`, community, "demo.example"); err != nil {
		panic(err)
	}
	if _, err := owner.Exec(ctx, `INSERT INTO posts (community_id, body) VALUES ($1, 'hi')`, community); err != nil {
		panic(err)
	}
	root, err := os.MkdirTemp("", "uploads")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(root)
	prefix := "uploads/" + community.String() + "/"
	if err := os.MkdirAll(filepath.Join(root, filepath.FromSlash(prefix)), 0o755); err != nil {
		panic(err)
	}
	if err := os.WriteFile(filepath.Join(root, filepath.FromSlash(prefix), "a.png"), []byte("png"), 0o644); err != nil {
		panic(err)
	}
	post := func(ctx context.Context) error {
		conn, err := pgx.Connect(ctx, kit.URL(communitydeletiontest.RoleServing))
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, `INSERT INTO posts (community_id, body) VALUES ($1, 'late')`, community)
		return err
	}

	problems, err = kit.DeleteAndCheck(ctx, communitydeletiontest.DeleteParams{
		CommunityID: community, Objects: executor.NewFileObjectStore(root), Prefixes: []string{prefix},
		WritePaths: []func(context.Context) error{post},
	})
	if err != nil {
		panic(err)
	}
	fmt.Println("deletion problems:", len(problems))
	// Output:
	// [table public.likes holds tenant data but is not registered: attach it by its community_id column with community_deletion.attach_community_write_fence('public.likes', 'delete', 'community_id') ('nullify' to keep its rows), or exclude it with community_deletion.exclude_table('public.likes', reason)]
	// coverage problems: 0
	// deletion problems: 0
}
