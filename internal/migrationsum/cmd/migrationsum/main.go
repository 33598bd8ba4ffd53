// Command migrationsum records new migrations in sql/migrations.sum (make
// migrations-sum) or, with -check, fails when a released migration changed
// or a new one is not recorded.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"

	"github.com/tombstoneworks/communitydeletion/internal/migrationsum"
)

func main() {
	check := flag.Bool("check", false, "verify "+migrationsum.Path+" instead of recording new migrations")
	flag.Parse()
	if err := run(*check); err != nil {
		fmt.Fprintln(os.Stderr, "migrationsum:", err)
		os.Exit(1)
	}
}

func run(check bool) error {
	sqlDir := os.DirFS("sql")
	sum, err := os.ReadFile(migrationsum.Path)
	if errors.Is(err, fs.ErrNotExist) && !check {
		sum = nil
	} else if err != nil {
		return fmt.Errorf("read %s: %w", migrationsum.Path, err)
	}
	if check {
		return migrationsum.Verify(sqlDir, sum)
	}
	out, err := migrationsum.Record(sqlDir, sum)
	if err != nil {
		return err
	}
	return os.WriteFile(migrationsum.Path, out, 0o644) //nolint:gosec // a committed source file, readable like the rest of the tree
}
