package integration

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

const (
	insertChunkSQL = `INSERT INTO community_deletion_manifest_keys (request_id, chunk_no, prefix, keys)
		VALUES ($1, $2, 'communities/c1/', '["a.png", "b.png"]')`
	chunkAppendRefused = "chunks are appended only while fenced, before the destructive manifest freezes"
	chunkStampRefused  = "chunks are stamped deleted only while drained"
	chunkStampedOnce   = "deleted_at is stamped once"
	chunkFrozenRefused = "frozen chunks stay until the request is logically verified"
)

// insertChunk appends chunk chunkNo to request's key manifest.
func insertChunk(t *testing.T, b *testBundle, request uuid.UUID, chunkNo int64) error {
	t.Helper()
	return b.exec(t, insertChunkSQL, request, chunkNo)
}

// A chunk is appended only while its request is 'fenced' and the destructive
// manifest is not frozen yet: earlier, after the freeze, later, or already
// stamped deleted, it is refused.
func TestManifestChunkAppendedOnlyWhileFencedBeforeFreeze(t *testing.T) {
	t.Parallel()
	b := setup(t)

	for _, stage := range []string{"submitted", "inventoried", "approved"} {
		_, request, _ := b.requestAt(t, stage)
		requireSQLState(t, insertChunk(t, b, request, 0), sqlstateIntegrity, chunkAppendRefused)
	}
	requireSQLState(t, insertChunk(t, b, uuid.New(), 0), sqlstateIntegrity, chunkAppendRefused)

	_, request, _ := b.requestAt(t, "fenced")
	require.NoError(t, insertChunk(t, b, request, 0))
	require.NoError(t, insertChunk(t, b, request, 1))
	requireSQLState(t, b.exec(t, `INSERT INTO community_deletion_manifest_keys (request_id, chunk_no, prefix, keys, deleted_at)
		VALUES ($1, 2, 'communities/c1/', '["c.png"]', now())`, request), sqlstateIntegrity, chunkAppendRefused)

	b.freezeDestructive(t, request) // the seed's premature_chunk case: a chunk after the freeze
	requireSQLState(t, insertChunk(t, b, request, 2), sqlstateIntegrity, chunkAppendRefused)

	require.NoError(t, updateRequest(t, b, request, "stage = 'drained'"))
	requireSQLState(t, insertChunk(t, b, request, 2), sqlstateIntegrity, chunkAppendRefused)

	var count int
	require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT count(*) FROM community_deletion_manifest_keys WHERE request_id = $1", request).Scan(&count))
	require.Equal(t, 2, count)
}

// A chunk's request_id, chunk_no, prefix and keys never change.
func TestManifestChunkKeysNeverChange(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, request, _ := b.requestAt(t, "fenced")
	_, other, _ := b.requestAt(t, "fenced")
	require.NoError(t, insertChunk(t, b, request, 0))

	for name, set := range map[string]string{
		"request_id": "request_id = '" + other.String() + "'",
		"chunk_no":   "chunk_no = 7",
		"prefix":     "prefix = 'communities/other/'",
		"keys":       `keys = '["a.png"]'`,
		"keys added": `keys = keys || '["z.png"]'`,
	} {
		t.Run(name, func(t *testing.T) {
			requireSQLState(t, b.exec(t, "UPDATE community_deletion_manifest_keys SET "+set+" WHERE request_id = $1", request),
				sqlstateIntegrity, "a chunk's keys never change")
		})
	}
	require.NoError(t, b.exec(t, "UPDATE community_deletion_manifest_keys SET keys = keys WHERE request_id = $1", request),
		"an update that leaves the identity alone passes")
}

// deleted_at goes from NULL to the database clock once, only while the
// request is drained: stamping earlier or later, re-stamping and unstamping
// are refused.
func TestManifestChunkDeletedAtStampedOnceWhileDrained(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	community, request, _ := b.requestAt(t, "fenced")
	for chunk := range int64(3) {
		require.NoError(t, insertChunk(t, b, request, chunk))
	}
	stamp := func(chunk int64) error {
		return b.exec(t, "UPDATE community_deletion_manifest_keys SET deleted_at = now() WHERE request_id = $1 AND chunk_no = $2", request, chunk)
	}

	requireSQLState(t, stamp(0), sqlstateIntegrity, chunkStampRefused) // fenced, not frozen
	b.freezeDestructive(t, request)
	requireSQLState(t, stamp(0), sqlstateIntegrity, chunkStampRefused) // fenced, frozen
	require.NoError(t, updateRequest(t, b, request, "stage = 'drained'"))

	// The stamp is the database clock, whatever the client passes.
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		var deletedAt, now time.Time
		if err := tx.QueryRow(ctx, `UPDATE community_deletion_manifest_keys SET deleted_at = '2000-01-01T00:00:00Z'
			WHERE request_id = $1 AND chunk_no = 0 RETURNING deleted_at, now()`, request).Scan(&deletedAt, &now); err != nil {
			return err
		}
		require.True(t, deletedAt.Equal(now), "deleted_at %v is not now() %v", deletedAt, now)
		return nil
	}))
	require.NoError(t, stamp(1))

	requireSQLState(t, stamp(0), sqlstateIntegrity, chunkStampedOnce)
	requireSQLState(t, b.exec(t, "UPDATE community_deletion_manifest_keys SET deleted_at = NULL WHERE request_id = $1 AND chunk_no = 0", request),
		sqlstateIntegrity, chunkStampedOnce)

	advanceRequest(t, b, community, request, "drained") // bindings_removed
	requireSQLState(t, stamp(2), sqlstateIntegrity, chunkStampRefused)
	requireSQLState(t, stamp(0), sqlstateIntegrity, chunkStampedOnce)
}

// A chunk may be deleted before its request's destructive manifest freezes;
// after the freeze it stays until the request reached logically_verified,
// and may be deleted then.
func TestManifestChunkDeletedOnlyBeforeFreezeOrAfterVerification(t *testing.T) {
	t.Parallel()
	b := setup(t)
	community, request, _ := b.requestAt(t, "fenced")
	remove := func(chunk int64) error {
		return b.exec(t, "DELETE FROM community_deletion_manifest_keys WHERE request_id = $1 AND chunk_no = $2", request, chunk)
	}
	for chunk := range int64(3) {
		require.NoError(t, insertChunk(t, b, request, chunk))
	}
	require.NoError(t, remove(2), "before the freeze a chunk may be withdrawn")

	b.freezeDestructive(t, request)
	requireSQLState(t, remove(0), sqlstateIntegrity, chunkFrozenRefused)
	for _, stage := range []string{"fenced", "drained", "bindings_removed", "postgres_purged"} {
		advanceRequest(t, b, community, request, stage)
		requireSQLState(t, remove(0), sqlstateIntegrity, chunkFrozenRefused)
	}
	require.Equal(t, "cache_purged", requestStage(t, b, request))
	advanceRequest(t, b, community, request, "cache_purged")
	require.NoError(t, remove(0), "at logically_verified the working manifest is dropped")
	advanceRequest(t, b, community, request, "logically_verified")
	require.NoError(t, remove(1), "at retention_pending too")

	var count int
	require.NoError(t, b.pool.QueryRow(t.Context(), "SELECT count(*) FROM community_deletion_manifest_keys WHERE request_id = $1", request).Scan(&count))
	require.Zero(t, count)
}

// A chunk holds a non-empty JSON array of keys under a non-empty prefix and a
// non-negative chunk number (CHECK constraints, 23514).
func TestManifestChunkCheckConstraints(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, request, _ := b.requestAt(t, "fenced")

	for name, tc := range map[string]struct {
		chunkNo      int64
		prefix, keys string
		constraint   string
	}{
		"empty keys":     {0, "p/", `[]`, "community_deletion_manifest_keys_keys_check"},
		"object keys":    {0, "p/", `{"a": 1}`, "community_deletion_manifest_keys_keys_check"},
		"string keys":    {0, "p/", `"a.png"`, "community_deletion_manifest_keys_keys_check"},
		"empty prefix":   {0, "", `["a.png"]`, "community_deletion_manifest_keys_prefix_check"},
		"negative chunk": {-1, "p/", `["a.png"]`, "community_deletion_manifest_keys_chunk_no_check"},
	} {
		t.Run(name, func(t *testing.T) {
			err := b.exec(t, `INSERT INTO community_deletion_manifest_keys (request_id, chunk_no, prefix, keys)
				VALUES ($1, $2, $3, $4::text::jsonb)`, request, tc.chunkNo, tc.prefix, tc.keys)
			requireSQLState(t, err, sqlstateCheck, tc.constraint)
		})
	}
	require.NoError(t, b.exec(t, `INSERT INTO community_deletion_manifest_keys (request_id, chunk_no, prefix, keys)
		VALUES ($1, 0, 'p/', $2::text::jsonb)`, request, `["a.png"]`))
}

// A chunk insert racing the destructive freeze serializes on the request row:
// the insert waits for the freeze's row lock and, once the freeze commits,
// is refused; had the freeze rolled back, it is admitted.
func TestManifestChunkInsertRacingTheFreeze(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	_, request, _ := b.requestAt(t, "fenced")

	race := func(t *testing.T, chunkNo int64, commit bool) error {
		freezer, err := b.pool.Begin(ctx)
		require.NoError(t, err)
		defer freezer.Rollback(ctx)
		_, err = freezer.Exec(ctx, "SELECT id FROM community_deletion_requests WHERE id = $1 FOR UPDATE", request)
		require.NoError(t, err)
		_, err = freezer.Exec(ctx, `UPDATE community_deletion_requests
			SET destructive_storage_manifest = '{"objects": 2}', destructive_storage_frozen_at = now() WHERE id = $1`, request)
		require.NoError(t, err)

		inserter, err := b.pool.Acquire(ctx)
		require.NoError(t, err)
		defer inserter.Release()
		pid := inserter.Conn().PgConn().PID()
		inserted := make(chan error, 1)
		go func() {
			_, err := inserter.Exec(ctx, insertChunkSQL, request, chunkNo)
			inserted <- err
		}()

		requireWaitingOnLock(t, b, pid)
		select {
		case err := <-inserted:
			t.Fatalf("the chunk insert finished while the freeze held the request row: %v", err)
		default:
		}
		if commit {
			require.NoError(t, freezer.Commit(ctx))
		} else {
			require.NoError(t, freezer.Rollback(ctx))
		}
		return <-inserted
	}

	require.NoError(t, race(t, 0, false), "the freeze rolled back: the waiting chunk is admitted")
	requireSQLState(t, race(t, 1, true), sqlstateIntegrity, chunkAppendRefused)

	rows, err := b.pool.Query(ctx, "SELECT chunk_no FROM community_deletion_manifest_keys WHERE request_id = $1 ORDER BY chunk_no", request)
	require.NoError(t, err)
	chunks, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Equal(t, []int64{0}, chunks)
}
