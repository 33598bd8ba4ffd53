// Command structure writes sql/structure.sql (make structure) or, with
// -check, fails when the committed file differs from what the migrations
// produce (make structure-diff).
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"

	"github.com/tombstoneworks/communitydeletion/internal/structure"
)

func main() {
	check := flag.Bool("check", false, "fail when "+structure.Path+" is stale instead of writing it")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, *check)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "structure:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, check bool) error {
	want, err := structure.Generate(ctx)
	if err != nil {
		return err
	}
	if !check {
		return os.WriteFile(structure.Path, want, 0o644) //nolint:gosec // a committed source file, readable like the rest of the tree
	}
	have, err := os.ReadFile(structure.Path)
	if err != nil {
		return fmt.Errorf("%s is missing: run make structure: %w", structure.Path, err)
	}
	if !bytes.Equal(have, want) {
		return fmt.Errorf("%s is stale: the migrations produce a different schema; run make structure and commit the result", structure.Path)
	}
	return nil
}
