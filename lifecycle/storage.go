package lifecycle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	dbgen "github.com/tombstoneworks/communitydeletion/db/gen"
)

const (
	// MaxManifestChunkKeys is the most object keys one ManifestKeyChunk may
	// hold, which bounds each stored chunk row.
	MaxManifestChunkKeys = 10000

	// MaxTaxonomySampleKeys is the most unknown keys a TaxonomySweep keeps
	// as its sample; RecordTaxonomySweep keeps the first ones.
	MaxTaxonomySampleKeys = 100

	// MaxTaxonomySampleKeyBytes bounds each sampled key; longer keys are
	// truncated at a rune boundary.
	MaxTaxonomySampleKeyBytes = 1024
)

// FreezeDestructiveManifest binds the fenced request of token to m,
// the storage manifest its destructive stages will delete, and to the key
// chunks appended so far. In one transaction it locks the request row (the
// lock the chunk guard takes before admitting a chunk, so no chunk can slip
// in beside the freeze), proves token current at StageFenced under its fence,
// loads the request's chunks in chunk order and checks that they are exactly
// the enumeration m summarizes (ValidateManifestKeyChunks), and then freezes
// m. Freezing the identical manifest again succeeds without change; a
// different manifest is refused with ErrRefused. A malformed m fails with
// ErrInvalidInput before any database work.
func (e *Engine) FreezeDestructiveManifest(ctx context.Context, token LeaseToken, m StorageManifest) error {
	if _, err := requireFence(token); err != nil {
		return err
	}
	if err := ValidateStorageManifest(m); err != nil {
		return err
	}
	manifest, err := json.Marshal(m)
	if err != nil {
		return invalidf("encode destructive storage manifest: %w", err)
	}
	return e.tx(ctx, func(q *dbgen.Queries) error {
		request, err := lockRequestRow(ctx, q, token.RequestID)
		if err != nil {
			return err
		}
		if err := verifyLeaseAndFence(ctx, q, token, StageFenced); err != nil {
			return err
		}
		rows, err := q.DeletionManifestKeyListByRequest(ctx, token.RequestID)
		if err != nil {
			return fmt.Errorf("load manifest key chunks of deletion %s: %w", token.RequestID, err)
		}
		chunks := make([]ManifestKeyChunk, 0, len(rows))
		for i := range rows {
			chunk, err := manifestChunkFromRow(&rows[i])
			if err != nil {
				return err
			}
			chunks = append(chunks, *chunk)
		}
		if err := ValidateManifestKeyChunks(m, chunks); err != nil {
			return fmt.Errorf("freeze destructive storage manifest of deletion %s: %w", token.RequestID, err)
		}
		if request.DestructiveStorageManifest != nil {
			same, err := q.DeletionRequestDestructiveStorageMatches(ctx, dbgen.DeletionRequestDestructiveStorageMatchesParams{
				Manifest: manifest, ID: token.RequestID,
			})
			if err != nil {
				return fmt.Errorf("compare destructive storage manifest of deletion %s: %w", token.RequestID, err)
			}
			if !same {
				return refusef("deletion %s already froze a different destructive storage manifest", token.RequestID)
			}
			return nil
		}
		frozen, err := q.DeletionRequestDestructiveStorageFreeze(ctx, dbgen.DeletionRequestDestructiveStorageFreezeParams{
			Manifest: manifest, ID: token.RequestID, LeaseOwner: &token.Owner, LeaseGeneration: token.Generation,
		})
		if err != nil {
			return fmt.Errorf("freeze destructive storage manifest of deletion %s: %w", token.RequestID, err)
		}
		if frozen != 1 {
			return staleLease(token)
		}
		return nil
	})
}

// ClearManifestChunks withdraws every key chunk of the fenced request of
// token, so that an interrupted enumeration can start over. Once the
// destructive manifest is frozen the chunks are bound to it and the call is
// refused with ErrRefused (the chunk guard refuses it too).
func (e *Engine) ClearManifestChunks(ctx context.Context, token LeaseToken) error {
	if _, err := requireFence(token); err != nil {
		return err
	}
	return e.tx(ctx, func(q *dbgen.Queries) error {
		request, err := lockRequestRow(ctx, q, token.RequestID)
		if err != nil {
			return err
		}
		if err := verifyLeaseAndFence(ctx, q, token, StageFenced); err != nil {
			return err
		}
		if request.DestructiveStorageManifest != nil {
			return refusef("deletion %s froze its destructive storage manifest: its key chunks can no longer be cleared", token.RequestID)
		}
		if _, err := q.DeletionManifestKeyDeleteByRequest(ctx, token.RequestID); err != nil {
			return fmt.Errorf("clear manifest key chunks of deletion %s: %w", token.RequestID, err)
		}
		return nil
	})
}

// AppendManifestChunk persists chunk as part of the destructive key list
// of the fenced request of token, before its destructive manifest freezes.
// The chunk must be non-empty (at most MaxManifestChunkKeys keys), have a
// non-negative number and a non-empty prefix, and hold keys that lie under
// the prefix in strictly ascending order; otherwise it is refused with
// ErrInvalidInput before any database work. Appending the identical chunk
// again succeeds (a retry after a lost commit); a different chunk under an
// existing number is refused with ErrRefused, as is any append after the
// freeze.
func (e *Engine) AppendManifestChunk(ctx context.Context, token LeaseToken, chunk ManifestKeyChunk) error {
	if _, err := requireFence(token); err != nil {
		return err
	}
	if err := checkManifestChunk(chunk); err != nil {
		return err
	}
	keys, err := json.Marshal(chunk.Keys)
	if err != nil {
		return invalidf("encode manifest key chunk %d: %w", chunk.ChunkNo, err)
	}
	return e.tx(ctx, func(q *dbgen.Queries) error {
		if err := verifyLeaseAndFence(ctx, q, token, StageFenced); err != nil {
			return err
		}
		if isKeySourceChunk(chunk) {
			if _, err := q.KeySourceSpec(ctx, chunk.Prefix); errors.Is(err, pgx.ErrNoRows) {
				return refusef("manifest key chunk %d names %q, which is neither an object prefix (ending in \"/\") nor a declared key source",
					chunk.ChunkNo, boundText(chunk.Prefix, 256))
			} else if err != nil {
				return fmt.Errorf("read key source %q: %w", boundText(chunk.Prefix, 256), err)
			}
		}
		inserted, err := q.DeletionManifestKeyInsert(ctx, dbgen.DeletionManifestKeyInsertParams{
			RequestID: token.RequestID, ChunkNo: chunk.ChunkNo, Prefix: chunk.Prefix, Keys: keys,
		})
		if err != nil {
			return fmt.Errorf("append manifest key chunk %d of deletion %s: %w", chunk.ChunkNo, token.RequestID, err)
		}
		if inserted == 1 {
			return nil
		}
		same, err := q.DeletionManifestKeyMatches(ctx, dbgen.DeletionManifestKeyMatchesParams{
			RequestID: token.RequestID, ChunkNo: chunk.ChunkNo, Prefix: chunk.Prefix, Keys: keys,
		})
		if err != nil {
			return fmt.Errorf("compare manifest key chunk %d of deletion %s: %w", chunk.ChunkNo, token.RequestID, err)
		}
		if !same {
			return refusef("deletion %s already has a different manifest key chunk %d", token.RequestID, chunk.ChunkNo)
		}
		return nil
	})
}

// NextPendingChunk returns the first chunk, in chunk order, of the
// drained request of token whose keys are not yet stamped deleted, or nil
// when every chunk is. A resumed executor continues there. token must be
// current at StageDrained under its fence.
func (e *Engine) NextPendingChunk(ctx context.Context, token LeaseToken) (*ManifestKeyChunk, error) {
	if _, err := requireFence(token); err != nil {
		return nil, err
	}
	var next *ManifestKeyChunk
	err := e.tx(ctx, func(q *dbgen.Queries) error {
		if err := verifyLeaseAndFence(ctx, q, token, StageDrained); err != nil {
			return err
		}
		row, err := q.DeletionManifestKeyGetNextPending(ctx, token.RequestID)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("next pending manifest key chunk of deletion %s: %w", token.RequestID, err)
		}
		next, err = manifestChunkFromRow(&row)
		return err
	})
	if err != nil {
		return nil, err
	}
	return next, nil
}

// ChunkProgress returns how many key chunks the deletion request
// requestID has and how many of them are stamped deleted. Both are zero
// before the enumeration and again after the chunks are dropped at logical
// verification.
func (e *Engine) ChunkProgress(ctx context.Context, requestID uuid.UUID) (total, deleted int64, err error) {
	err = e.tx(ctx, func(q *dbgen.Queries) error {
		row, err := q.DeletionManifestKeyProgress(ctx, requestID)
		if err != nil {
			return fmt.Errorf("manifest key chunk progress of deletion %s: %w", requestID, err)
		}
		total, deleted = row.Total, row.Deleted
		return nil
	})
	if err != nil {
		return 0, 0, err
	}
	return total, deleted, nil
}

// MarkChunkDeleted records that every key of chunk chunkNo of the
// drained request of token is gone from the object store: it stamps the
// chunk deleted on the database clock and checkpoints unit "chunk:<n>" of
// StageDrained with detail, in one transaction. A stamp is one-way: a chunk
// that is missing or already stamped is refused with ErrRefused. detail must
// encode as JSON; nil records {}.
func (e *Engine) MarkChunkDeleted(ctx context.Context, token LeaseToken, chunkNo int64, detail any) error {
	if _, err := requireFence(token); err != nil {
		return err
	}
	if chunkNo < 0 {
		return invalidf("manifest key chunk number %d is negative", chunkNo)
	}
	if _, err := marshalDetail(detail); err != nil {
		return err
	}
	return e.tx(ctx, func(q *dbgen.Queries) error {
		if err := verifyLeaseAndFence(ctx, q, token, StageDrained); err != nil {
			return err
		}
		stamped, err := q.DeletionManifestKeyMarkDeleted(ctx, dbgen.DeletionManifestKeyMarkDeletedParams{
			RequestID: token.RequestID, ChunkNo: chunkNo,
		})
		if err != nil {
			return fmt.Errorf("stamp manifest key chunk %d of deletion %s: %w", chunkNo, token.RequestID, err)
		}
		if stamped != 1 {
			return refusef("manifest key chunk %d of deletion %s is missing or already stamped", chunkNo, token.RequestID)
		}
		return checkpointCompleted(ctx, q, token, StageDrained, "chunk:"+strconv.FormatInt(chunkNo, 10), detail)
	})
}

// TaxonomySweep is one completed fleet-wide storage taxonomy sweep: a listing
// of the whole object store that counts the keys no known community prefix
// claims.
type TaxonomySweep struct {
	// ID identifies the sweep.
	ID uuid.UUID
	// StartedAt is when the listing started, clamped to CompletedAt.
	StartedAt time.Time
	// CompletedAt is when the sweep was recorded, on the database clock.
	CompletedAt time.Time
	// ListedObjects is the number of objects listed.
	ListedObjects int64
	// UnknownObjectCount is the number of listed objects no taxonomy rule
	// claims.
	UnknownObjectCount int64
	// UnknownKeySample holds up to MaxTaxonomySampleKeys of those keys.
	UnknownKeySample []string
	// ObjectCap is the listing cap the sweep ran under.
	ObjectCap int64
}

// TaxonomySweepParams describes a completed storage taxonomy sweep.
type TaxonomySweepParams struct {
	// StartedAt is when the sweep started.
	StartedAt time.Time
	// Listed is how many objects it listed.
	Listed uint64
	// Unknown is how many of them no known key family accounts for.
	Unknown uint64
	// Sample is some of the unknown keys.
	Sample []string
	// ObjectCap is the listing cap it ran under.
	ObjectCap uint64
}

// RecordTaxonomySweep records a completed taxonomy sweep that started at
// params.StartedAt. Completion is the database's clock_timestamp(), which orders
// sweeps whatever the sweepers' clocks say; a start slightly in the
// database's future is clamped to the completion, and one more than five
// minutes ahead is refused with ErrRefused. Counts that do not fit in an
// int64, more unknown than listed objects, or a sample larger than the
// unknown count are refused with ErrInvalidInput. The sample keeps its first
// MaxTaxonomySampleKeys keys, each bounded to MaxTaxonomySampleKeyBytes.
func (e *Engine) RecordTaxonomySweep(ctx context.Context, params TaxonomySweepParams) (*TaxonomySweep, error) {
	startedAt, listed, unknown, sample, objectCap := params.StartedAt, params.Listed, params.Unknown, params.Sample, params.ObjectCap
	if startedAt.IsZero() {
		return nil, invalidf("taxonomy sweep has no start time")
	}
	for _, n := range []struct {
		what  string
		value uint64
	}{{"listed object count", listed}, {"unknown object count", unknown}, {"object cap", objectCap}} {
		if n.value > math.MaxInt64 {
			return nil, invalidf("taxonomy sweep %s %d overflows a bigint", n.what, n.value)
		}
	}
	if unknown > listed {
		return nil, invalidf("taxonomy sweep has %d unknown objects but listed only %d", unknown, listed)
	}
	if uint64(len(sample)) > unknown {
		return nil, invalidf("taxonomy sweep samples %d unknown keys but counted only %d", len(sample), unknown)
	}
	kept := make([]string, 0, min(len(sample), MaxTaxonomySampleKeys))
	for _, key := range sample[:min(len(sample), MaxTaxonomySampleKeys)] {
		kept = append(kept, boundText(key, MaxTaxonomySampleKeyBytes))
	}
	encoded, err := json.Marshal(kept)
	if err != nil {
		return nil, invalidf("encode taxonomy sweep sample: %w", err)
	}
	var sweep *TaxonomySweep
	err = e.tx(ctx, func(q *dbgen.Queries) error {
		row, err := q.StorageTaxonomySweepInsert(ctx, dbgen.StorageTaxonomySweepInsertParams{
			StartedAt: startedAt, ListedObjects: int64(listed), UnknownObjectCount: int64(unknown), //nolint:gosec // each checked <= MaxInt64 above
			UnknownKeySample: encoded, ObjectCap: int64(objectCap), //nolint:gosec // checked <= MaxInt64 above
		})
		if errors.Is(err, pgx.ErrNoRows) {
			return refusef("taxonomy sweep start %s is more than five minutes in the database's future",
				startedAt.UTC().Format(time.RFC3339Nano))
		}
		if err != nil {
			return fmt.Errorf("record taxonomy sweep: %w", err)
		}
		sweep, err = taxonomySweepFromRow(&row)
		return err
	})
	if err != nil {
		return nil, err
	}
	return sweep, nil
}

// LatestTaxonomySweep returns the sweep that completed last on the database
// clock, or nil when none has been recorded.
func (o *Operator) LatestTaxonomySweep(ctx context.Context) (*TaxonomySweep, error) {
	var sweep *TaxonomySweep
	err := o.tx(ctx, func(q *dbgen.Queries) error {
		row, err := q.StorageTaxonomySweepGetLatest(ctx)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("latest taxonomy sweep: %w", err)
		}
		sweep, err = taxonomySweepFromRow(&row)
		return err
	})
	if err != nil {
		return nil, err
	}
	return sweep, nil
}

// isKeySourceChunk reports whether chunk holds keys of a key source (its
// Prefix names the source, schema.table.column) rather than keys under an
// object prefix, which always ends in "/".
func isKeySourceChunk(chunk ManifestKeyChunk) bool { return !strings.HasSuffix(chunk.Prefix, "/") }

// checkManifestChunk refuses a chunk that could not be part of a valid key
// list, before anything is written.
func checkManifestChunk(chunk ManifestKeyChunk) error {
	prefix := boundText(chunk.Prefix, 256)
	switch {
	case chunk.ChunkNo < 0:
		return invalidf("manifest key chunk number %d is negative", chunk.ChunkNo)
	case chunk.Prefix == "":
		return invalidf("manifest key chunk %d has an empty prefix", chunk.ChunkNo)
	case !utf8.ValidString(chunk.Prefix):
		return invalidf("manifest key chunk %d prefix %q is not valid UTF-8", chunk.ChunkNo, prefix)
	case len(chunk.Keys) == 0:
		return invalidf("manifest key chunk %d is empty", chunk.ChunkNo)
	case len(chunk.Keys) > MaxManifestChunkKeys:
		return invalidf("manifest key chunk %d has %d keys; at most %d are allowed", chunk.ChunkNo, len(chunk.Keys), MaxManifestChunkKeys)
	}
	var stream KeyStreamDigest
	for _, key := range chunk.Keys {
		if !isKeySourceChunk(chunk) && !strings.HasPrefix(key, chunk.Prefix) {
			return invalidf("manifest key %q in chunk %d is outside its prefix %q", boundText(key, 256), chunk.ChunkNo, prefix)
		}
		if err := stream.Fold(key); err != nil {
			return invalidf("manifest key chunk %d: %w", chunk.ChunkNo, err)
		}
	}
	return nil
}

// manifestChunkFromRow decodes a stored chunk, failing closed on keys that
// are not a JSON array of strings.
func manifestChunkFromRow(row *dbgen.CommunityDeletionManifestKey) (*ManifestKeyChunk, error) {
	var keys []string
	if err := json.Unmarshal(row.Keys, &keys); err != nil {
		return nil, refusef("manifest key chunk %d of deletion %s is unreadable: %w", row.ChunkNo, row.RequestID, err)
	}
	return &ManifestKeyChunk{ChunkNo: row.ChunkNo, Prefix: row.Prefix, Keys: keys}, nil
}

// taxonomySweepFromRow converts a stored sweep.
func taxonomySweepFromRow(row *dbgen.StorageTaxonomySweep) (*TaxonomySweep, error) {
	sample := []string{}
	if err := json.Unmarshal(row.UnknownKeySample, &sample); err != nil {
		return nil, refusef("taxonomy sweep %s has an unreadable key sample: %w", row.ID, err)
	}
	return &TaxonomySweep{
		ID:                 row.ID,
		StartedAt:          row.StartedAt,
		CompletedAt:        row.CompletedAt,
		ListedObjects:      row.ListedObjects,
		UnknownObjectCount: row.UnknownObjectCount,
		UnknownKeySample:   sample,
		ObjectCap:          row.ObjectCap,
	}, nil
}
