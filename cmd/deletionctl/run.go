package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/google/uuid"

	"github.com/tombstoneworks/communitydeletion/executor"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// openObjects returns the filesystem object store rooted at dir, which must
// be an existing directory.
func openObjects(dir string) (*executor.FileObjectStore, error) {
	info, err := os.Stat(dir)
	if err != nil {
		return nil, usagef("--objects-dir: %v", err)
	}
	if !info.IsDir() {
		return nil, usagef("--objects-dir: %q is not a directory", dir)
	}
	return executor.NewFileObjectStore(dir), nil
}

// defaultOwner is run's executor identity without --owner.
func defaultOwner() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	return fmt.Sprintf("deletionctl-%s-%d", host, os.Getpid())
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	info, err := f.Stat()
	return err == nil && info.Mode()&os.ModeCharDevice != 0
}

// runExecutor is the run command: it drives approved deletions with an
// executor.Runner over the filesystem object store and an in-memory cache.
func runExecutor(ctx context.Context, engine *lifecycle.Engine, cfg config, stdout io.Writer) error {
	objects, err := openObjects(cfg.objectsDir)
	if err != nil {
		return err
	}
	owner := cfg.owner
	if owner == "" {
		owner = defaultOwner()
	}
	p := newProgress(stdout, isTerminal(stdout))
	runner, err := executor.New(executor.Config{
		Engine:        engine,
		Objects:       objects,
		Cache:         executor.NewMemoryCache(),
		Owner:         owner,
		LeaseDuration: cfg.lease,
		ChunkSize:     cfg.chunkSize,
		Progress:      p.event,
	})
	if err != nil {
		return fmt.Errorf("run: %w", err)
	}
	if !cfg.once {
		err := runner.Run(ctx)
		p.finish()
		if err != nil && ctx.Err() != nil {
			return nil // SIGINT or SIGTERM: a clean stop
		}
		if err != nil {
			return fmt.Errorf("run: %w", err)
		}
		return nil
	}

	op := "run of the next claimable request"
	var claimed bool
	if cfg.requestID == uuid.Nil {
		claimed, err = runner.RunNext(ctx)
	} else {
		op = fmt.Sprintf("run of request %s", cfg.requestID)
		claimed, err = runner.RunRequest(ctx, cfg.requestID)
	}
	p.finish()
	switch {
	case err != nil:
		return fmt.Errorf("%s: %w", op, err)
	case !claimed && cfg.requestID != uuid.Nil:
		fmt.Fprintf(stdout, "nothing to claim: request %s is not claimable now\n", cfg.requestID)
	case !claimed:
		fmt.Fprintln(stdout, "nothing to claim")
	}
	return nil
}

// progress prints a runner's events: plain lines, one per event, or, on a
// terminal, a line per stage change and a one-line progress bar that
// rewrites itself for chunk deletion and the purge.
type progress struct {
	w        io.Writer
	terminal bool
	stage    lifecycle.Stage
	bar      bool // a progress bar is on the current line
	barLen   int  // its length, to blank the rest on rewrite
}

func newProgress(w io.Writer, terminal bool) *progress {
	return &progress{w: w, terminal: terminal}
}

// barWidth is the width of the progress bar's [###...] part; maxLine caps
// a rewritten line.
const (
	barWidth = 30
	maxLine  = 120
)

func (p *progress) event(e executor.Event) {
	if !p.terminal {
		p.plain(e)
		return
	}
	if e.Stage != p.stage {
		p.endBar()
		fmt.Fprintf(p.w, "%s: %s\n", e.RequestID, e.Stage)
		p.stage = e.Stage
	}
	switch {
	case e.TablesRows != nil:
		p.drawBar(fmt.Sprintf("purge: %s", formatRows(e.TablesRows)))
	case e.ChunksDone > 0 && e.ChunksTotal > 0:
		filled := int(e.ChunksDone * barWidth / e.ChunksTotal)
		p.drawBar(fmt.Sprintf("deleting [%s%s] %d/%d chunks", strings.Repeat("#", filled),
			strings.Repeat(".", barWidth-filled), e.ChunksDone, e.ChunksTotal))
	case e.ChunksTotal > 0 && e.Stage == lifecycle.StageFenced:
		// Enumeration: one event per listed chunk, rewritten in place.
		p.drawBar(oneLine(e.Message))
	default:
		p.endBar()
		fmt.Fprintf(p.w, "  %s\n", oneLine(e.Message))
	}
}

// plain prints e as one line.
func (p *progress) plain(e executor.Event) {
	var b strings.Builder
	fmt.Fprintf(&b, "%s [%s] %s", e.RequestID, e.Stage, oneLine(e.Message))
	if e.ChunksTotal > 0 {
		fmt.Fprintf(&b, " chunks=%d/%d", e.ChunksDone, e.ChunksTotal)
	}
	if e.TablesRows != nil {
		fmt.Fprintf(&b, " rows: %s", formatRows(e.TablesRows))
	}
	fmt.Fprintln(p.w, b.String())
}

// drawBar rewrites the current line with s.
func (p *progress) drawBar(s string) {
	if len(s) > maxLine {
		s = s[:maxLine-3] + "..."
	}
	pad := ""
	if n := p.barLen - len(s); n > 0 {
		pad = strings.Repeat(" ", n)
	}
	fmt.Fprintf(p.w, "\r%s%s", s, pad)
	p.bar, p.barLen = true, len(s)
}

// endBar ends the progress bar's line, if one is drawn.
func (p *progress) endBar() {
	if p.bar {
		fmt.Fprintln(p.w)
		p.bar, p.barLen = false, 0
	}
}

// finish ends the output, leaving the cursor on a fresh line.
func (p *progress) finish() {
	if p.terminal {
		p.endBar()
	}
}

// formatRows renders rows per table as "table=n ..." in table order.
func formatRows(rows map[string]int64) string {
	if len(rows) == 0 {
		return "none"
	}
	parts := make([]string, 0, len(rows))
	for _, table := range slices.Sorted(maps.Keys(rows)) {
		parts = append(parts, fmt.Sprintf("%s=%d", table, rows[table]))
	}
	return strings.Join(parts, " ")
}

// runRefused reports whether err is a run --once outcome that exits 3: the
// request was blocked or a retry was scheduled.
func runRefused(err error) bool {
	return errors.Is(err, executor.ErrBlocked) || errors.Is(err, executor.ErrRetryScheduled)
}
