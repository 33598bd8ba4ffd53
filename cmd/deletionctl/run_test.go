package main

import (
	"bytes"
	"context"
	"encoding/json"
	"github.com/tombstoneworks/communitydeletion/internal/fixture"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/executor"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// writeFiles writes files under "media/<community>/" in a fresh objects dir
// and returns the dir and the files' paths.
func writeFiles(t *testing.T, community uuid.UUID, n int) (string, []string) {
	t.Helper()
	dir := t.TempDir()
	var paths []string
	for i := range n {
		p := filepath.Join(dir, "media", community.String(), "sub", string(rune('a'+i))+".bin")
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, bytes.Repeat([]byte{'x'}, 10+i), 0o644))
		paths = append(paths, p)
	}
	return dir, paths
}

// inspectStage returns the request's stage and blocked flag from inspect --json.
func (db *testDB) inspectStage(t *testing.T, id string) (string, bool) {
	t.Helper()
	var rep struct {
		Request struct {
			Stage   string `json:"stage"`
			Blocked bool   `json:"blocked"`
		} `json:"request"`
	}
	require.NoError(t, json.Unmarshal([]byte(db.ok(t, "inspect", "--request", id, "--json")), &rep))
	return rep.Request.Stage, rep.Request.Blocked
}

func TestRunOnce(t *testing.T) {
	t.Parallel()
	db := setup(t)
	community, host := db.createCommunity(t)
	for _, handle := range []string{"ann", "ben", "cid"} {
		_, err := db.pool.Exec(t.Context(), "INSERT INTO fixture_members (community_id, handle) VALUES ($1, $2)", community, handle)
		require.NoError(t, err)
	}
	dir, paths := writeFiles(t, community, 5)
	// A neighbour's file that must survive.
	other := filepath.Join(dir, "media", uuid.NewString(), "keep.bin")
	require.NoError(t, os.MkdirAll(filepath.Dir(other), 0o755))
	require.NoError(t, os.WriteFile(other, []byte("keep"), 0o644))

	id := db.submit(t, host, "alice")
	prefix := "media/" + community.String() + "/"
	require.Contains(t, db.ok(t, "inventory", "--request", id, "--prefix", prefix, "--objects-dir", dir), id+" inventoried ")

	// The frozen inventory summarizes the files found.
	var rep struct {
		Request struct {
			Inventory struct {
				Storage lifecycle.StorageManifest `json:"storage"`
			} `json:"inventory"`
		} `json:"request"`
	}
	require.NoError(t, json.Unmarshal([]byte(db.ok(t, "inspect", "--request", id, "--json")), &rep))
	want, err := executor.SummarizeStorage(t.Context(), executor.NewFileObjectStore(dir), []string{prefix})
	require.NoError(t, err)
	require.Equal(t, want.Prefixes, rep.Request.Inventory.Storage.Prefixes)
	require.EqualValues(t, 5, rep.Request.Inventory.Storage.Prefixes[0].ObjectCount)

	db.okAs(t, fixture.RoleApprover, "approve", "--request", id, "--by", "bob")

	out := db.ok(t, "run", "--once", "--objects-dir", dir, "--request", id, "--owner", "test-executor", "--chunk-size", "2")
	require.NotContains(t, out, "\r", "no progress bar off a terminal")
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	require.Greater(t, len(lines), 3, out)
	for _, line := range lines {
		require.True(t, strings.HasPrefix(line, id+" ["), "line %q", line)
	}
	require.Contains(t, out, "chunks=3/3", "5 keys in chunks of 2")
	require.Contains(t, out, "rows: ")
	require.Contains(t, out, "fixture_members=3")
	require.Contains(t, out, "completed")

	stage, blocked := db.inspectStage(t, id)
	require.Equal(t, string(lifecycle.StageRetentionPending), stage)
	require.False(t, blocked)
	for _, p := range paths {
		_, err := os.Stat(p)
		require.ErrorIs(t, err, os.ErrNotExist, p)
	}
	_, err = os.Stat(other)
	require.NoError(t, err, "a neighbour's file survives")

	// Nothing is left to claim, neither next nor this request.
	require.Equal(t, "nothing to claim\n", db.ok(t, "run", "--once", "--objects-dir", dir))
	require.Contains(t, db.ok(t, "run", "--once", "--objects-dir", dir, "--request", id), "nothing to claim")
}

func TestRunOnceNothingToClaim(t *testing.T) {
	t.Parallel()
	db := setup(t)
	require.Equal(t, "nothing to claim\n", db.ok(t, "run", "--once", "--objects-dir", t.TempDir()))

	// A submitted, unapproved request is not claimable either.
	_, host := db.createCommunity(t)
	id := db.submit(t, host, "alice")
	require.Equal(t, "nothing to claim\n", db.ok(t, "run", "--once", "--objects-dir", t.TempDir()))
	require.Contains(t, db.ok(t, "run", "--once", "--objects-dir", t.TempDir(), "--request", id), "nothing to claim")

	code, stdout, stderr := db.cli(t, "run", "--once", "--objects-dir", t.TempDir(), "--request", uuid.NewString())
	require.Equal(t, exitNotFound, code, stderr)
	require.Empty(t, stdout)
	requireOneLine(t, stderr, "deletionctl: not found: run of request ")
}

func TestRunObjectsDir(t *testing.T) {
	t.Parallel()
	db := setup(t)
	code, _, stderr := db.cli(t, "run", "--once")
	require.Equal(t, exitUsage, code, stderr)
	requireOneLine(t, stderr, "run needs --objects-dir")

	missing := filepath.Join(t.TempDir(), "nope")
	code, _, stderr = db.cli(t, "run", "--once", "--objects-dir", missing)
	require.Equal(t, exitUsage, code, stderr)
	requireOneLine(t, stderr, "--objects-dir", "nope")

	_, host := db.createCommunity(t)
	id := db.submit(t, host, "alice")
	code, _, stderr = db.cli(t, "inventory", "--request", id, "--objects-dir", missing)
	require.Equal(t, exitUsage, code, stderr)
	requireOneLine(t, stderr, "--objects-dir")
	stage, _ := db.inspectStage(t, id)
	require.Equal(t, "submitted", stage, "nothing frozen")
}

// TestRunOnceRefused approves prefixes that are not the community's (a
// frozen inventory that does not match where its files are): the run blocks
// the request, deletes nothing and exits 3 with one line.
func TestRunOnceRefused(t *testing.T) {
	t.Parallel()
	db := setup(t)
	community, host := db.createCommunity(t)
	dir, paths := writeFiles(t, community, 3)
	id := db.submit(t, host, "alice")
	db.ok(t, "inventory", "--request", id, "--prefix", "media/someone-else/", "--objects-dir", dir)
	db.okAs(t, fixture.RoleApprover, "approve", "--request", id, "--by", "bob")

	code, stdout, stderr := db.cli(t, "run", "--once", "--objects-dir", dir, "--request", id)
	require.Equal(t, exitRefused, code, "stdout %s stderr %s", stdout, stderr)
	requireOneLine(t, stderr, "deletionctl: refused: run of request "+id, "executor: blocked", "does not name community "+community.String())
	require.Contains(t, stdout, "blocked: ")
	for _, p := range paths {
		_, err := os.Stat(p)
		require.NoError(t, err, "nothing deleted: %s", p)
	}
	stage, blocked := db.inspectStage(t, id)
	require.NotEqual(t, string(lifecycle.StageRetentionPending), stage)
	require.True(t, blocked)

	// Blocked, it is no longer claimable.
	require.Equal(t, "nothing to claim\n", db.ok(t, "run", "--once", "--objects-dir", dir))
}

// TestRunUntilCancelled runs the loop without --once until its context is
// cancelled, then exits 0.
func TestRunUntilCancelled(t *testing.T) {
	t.Parallel()
	db := setup(t)
	community, host := db.createCommunity(t)
	dir, paths := writeFiles(t, community, 2)
	id := db.submit(t, host, "alice")
	db.ok(t, "inventory", "--request", id, "--objects-dir", dir)
	db.okAs(t, fixture.RoleApprover, "approve", "--request", id, "--by", "bob")

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan int, 1)
	// Read only after done: the channel orders the writes before the reads.
	var out, errOut bytes.Buffer
	go func() {
		done <- run(ctx, []string{"--database-url", db.url, "run", "--objects-dir", dir}, &out, &errOut)
	}()
	require.Eventually(t, func() bool {
		stage, _ := db.inspectStage(t, id)
		return stage == string(lifecycle.StageRetentionPending)
	}, time.Minute, 100*time.Millisecond)
	cancel()
	require.Equal(t, exitOK, <-done, errOut.String())
	require.Empty(t, errOut.String())
	require.Contains(t, out.String(), "completed")
	for _, p := range paths {
		_, err := os.Stat(p)
		require.ErrorIs(t, err, os.ErrNotExist)
	}
}

func TestProgressTerminal(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	p := newProgress(&b, true)
	id := uuid.New()
	p.event(executor.Event{RequestID: id, Stage: lifecycle.StageApproved, Message: "claimed"})
	p.event(executor.Event{RequestID: id, Stage: lifecycle.StageFenced, Message: "listed chunk 0", ChunksTotal: 1})
	p.event(executor.Event{RequestID: id, Stage: lifecycle.StageFenced, Message: "listed chunk 1", ChunksTotal: 2})
	p.event(executor.Event{RequestID: id, Stage: lifecycle.StageDrained, Message: "chunk 1 deleted", ChunksDone: 1, ChunksTotal: 4})
	p.event(executor.Event{RequestID: id, Stage: lifecycle.StageDrained, Message: "chunk 2 deleted", ChunksDone: 2, ChunksTotal: 4})
	p.event(executor.Event{RequestID: id, Stage: lifecycle.StageBindingsRemoved, Message: "purged", TablesRows: map[string]int64{"b": 2, "a": 1}})
	p.event(executor.Event{RequestID: id, Stage: lifecycle.StageBindingsRemoved, Message: "purged", TablesRows: map[string]int64{"b": 5, "a": 1}})
	p.finish()
	out := b.String()
	require.Contains(t, out, id.String()+": approved\n  claimed\n")
	require.Contains(t, out, id.String()+": fenced\n\rlisted chunk 0\rlisted chunk 1\n")
	require.Contains(t, out, "\rdeleting [")
	require.Contains(t, out, "1/4 chunks")
	require.Contains(t, out, "\rdeleting ["+strings.Repeat("#", 15)+strings.Repeat(".", 15)+"] 2/4 chunks\n")
	require.Contains(t, out, id.String()+": bindings_removed\n")
	require.Contains(t, out, "\rpurge: a=1 b=2")
	require.True(t, strings.HasSuffix(out, "\rpurge: a=1 b=5\n"), "%q", out)
}

func TestProgressPlain(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	p := newProgress(&b, false)
	id := uuid.New()
	p.event(executor.Event{RequestID: id, Stage: lifecycle.StageDrained, Message: "chunk 2 deleted", ChunksDone: 2, ChunksTotal: 4})
	p.event(executor.Event{RequestID: id, Stage: lifecycle.StageBindingsRemoved, Message: "purged 5 rows of b", TablesRows: map[string]int64{"b": 5, "a": 1}})
	p.finish()
	require.Equal(t, id.String()+" [drained] chunk 2 deleted chunks=2/4\n"+
		id.String()+" [bindings_removed] purged 5 rows of b rows: a=1 b=5\n", b.String())
}
