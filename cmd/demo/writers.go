package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// writerResult is what one community's writer saw.
type writerResult struct {
	succeeded, refused int64
	// orphaned counts writes that, after the fence, collided with the purge
	// removing their parent rows: refused by the foreign key (SQLSTATE 23503)
	// or chosen as the victim of the foreign-key deadlock between inserting a
	// child and deleting its parent (40P01). Neither admits anything.
	orphaned int64
	// succeededAfterRefusal counts admitted writes after the first refusal:
	// the fence is one-way, so it must be 0.
	succeededAfterRefusal int64
	// otherErrors are any other failures.
	otherErrors []string
}

// writers keeps one serving writer running per community.
type writers struct {
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	mu      sync.Mutex
	results map[uuid.UUID]*writerResult
}

// startWriters starts a writer per community that inserts a message every
// couple of milliseconds, as a serving path would, until stop.
func startWriters(ctx context.Context, pool *pgxpool.Pool, w *world) *writers {
	ctx, cancel := context.WithCancel(ctx)
	ws := &writers{cancel: cancel, results: map[uuid.UUID]*writerResult{}}
	for _, c := range w.communities {
		result := &writerResult{}
		ws.results[c.id] = result
		ws.wg.Go(func() {
			for n := 0; ctx.Err() == nil; n++ {
				_, err := pool.Exec(ctx, `INSERT INTO fixture_messages (community_id, channel_id, author_id, body)
					VALUES ($1, $2, $3, $4)`, c.id, c.channelIDs[0], c.memberIDs[0], fmt.Sprintf("%s %d", liveWrite, n))
				var pgErr *pgconn.PgError
				ws.mu.Lock()
				switch {
				case err == nil:
					result.succeeded++
					if result.refused > 0 {
						result.succeededAfterRefusal++
					}
				case lifecycle.IsWriteFenceRefusal(err):
					result.refused++
				case errors.As(err, &pgErr) && (pgErr.Code == pgerrcode.ForeignKeyViolation || pgErr.Code == pgerrcode.DeadlockDetected) && result.refused > 0:
					result.orphaned++
				case ctx.Err() == nil:
					result.otherErrors = append(result.otherErrors, err.Error())
				}
				ws.mu.Unlock()
				select {
				case <-ctx.Done():
				case <-time.After(2 * time.Millisecond):
				}
			}
		})
	}
	return ws
}

// stop ends the writers and returns what they saw.
func (ws *writers) stop() map[uuid.UUID]*writerResult {
	ws.cancel()
	ws.wg.Wait()
	return ws.results
}
