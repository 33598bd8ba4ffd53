package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	dbgen "github.com/tombstoneworks/communitydeletion/db/gen"
)

// keySourcePage is the most keys one read of a key source returns.
const keySourcePage = 1000

// keySourceKeys returns, in one statement of tx, up to limit of the distinct,
// non-empty keys the declared key source lists in the tenant's rows that
// sort strictly after after, in byte order (the order KeyStreamDigest
// folds). A source that is not declared is refused.
func keySourceKeys(ctx context.Context, tx pgx.Tx, source string, tenant TenantKey, after string, limit int) ([]string, error) {
	spec, err := dbgen.New(tx).KeySourceSpec(ctx, source)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, refusef("key source %q is not declared in the storage layout", boundText(source, 256))
	}
	if err != nil {
		return nil, fmt.Errorf("read key source %q: %w", boundText(source, 256), err)
	}
	if spec.TenantFilter == "" {
		return nil, refusef("key source %q names table %s.%s, which is not registered", boundText(source, 256), spec.SchemaName, spec.TableName)
	}
	column := pgx.Identifier{spec.ColumnName}.Sanitize()
	rows, err := tx.Query(ctx, "SELECT DISTINCT "+column+" COLLATE \"C\" FROM "+pgx.Identifier{spec.SchemaName, spec.TableName}.Sanitize()+
		" WHERE ("+spec.TenantFilter+") AND "+column+" <> '' AND "+column+" COLLATE \"C\" > $2 ORDER BY 1 LIMIT $3",
		tenant.String(), after, limit)
	if err != nil {
		return nil, fmt.Errorf("list the keys of %q: %w", boundText(source, 256), err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list the keys of %q: %w", boundText(source, 256), err)
	}
	return keys, nil
}

// eachKeySourcePage hands fn every key the source lists for the tenant, in
// byte order and pages of at most limit, each page read in a short
// read-only transaction of its own.
func (s *store) eachKeySourcePage(ctx context.Context, source string, tenant TenantKey, limit int, fn func(keys []string) error) error {
	after := ""
	for {
		var keys []string
		err := s.begin(ctx, true, func(tx pgx.Tx) (err error) {
			keys, err = keySourceKeys(ctx, tx, source, tenant, after, limit)
			return err
		})
		if err != nil {
			return err
		}
		if len(keys) > 0 {
			if err := fn(keys); err != nil {
				return err
			}
			after = keys[len(keys)-1]
		}
		if len(keys) < limit {
			return nil
		}
	}
}

// InventoryKeySources summarizes, for the inventory an operator freezes,
// the object keys each declared key source (storage layout kind
// object_keys) lists in the rows of community's tenant: their count and
// keys digest, sorted by source. It changes nothing.
func (o *Operator) InventoryKeySources(ctx context.Context, community uuid.UUID) ([]KeySourceManifest, error) {
	var tenant TenantKey
	var sources []string
	err := o.tx(ctx, func(q *dbgen.Queries) error {
		row, err := q.CommunityGetByID(ctx, community)
		if errors.Is(err, pgx.ErrNoRows) {
			return notFoundf("community %s", community)
		}
		if err != nil {
			return fmt.Errorf("read community %s: %w", community, err)
		}
		tenant = tenantKeyOf(row.ID, row.TenantKey)
		layout, err := readStorageLayout(ctx, q)
		if err != nil {
			return fmt.Errorf("read the storage layout: %w", err)
		}
		sources = layout.KeySources()
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("inventory the key sources of community %s: %w", community, err)
	}
	out := make([]KeySourceManifest, 0, len(sources))
	for _, source := range sources {
		var digest KeyStreamDigest
		err := o.eachKeySourcePage(ctx, source, tenant, keySourcePage, func(keys []string) error {
			for _, k := range keys {
				if err := digest.Fold(k); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("inventory key source %q of community %s: %w", boundText(source, 256), tenant, err)
		}
		sum, count := digest.Sum()
		out = append(out, KeySourceManifest{Source: source, ObjectCount: count, KeysDigest: sum})
	}
	slices.SortFunc(out, func(a, b KeySourceManifest) int {
		switch {
		case a.Source < b.Source:
			return -1
		case a.Source > b.Source:
			return 1
		}
		return 0
	})
	return out, nil
}

// KeySourceKeys hands fn, page by page in byte order, the object keys the
// declared key source lists in the rows of the token's tenant, for the
// executor's destructive manifest while the tenant is fenced. Each page is
// read in a short read-only transaction of its own; the token must be
// current at fenced.
func (e *Engine) KeySourceKeys(ctx context.Context, token LeaseToken, source string, pageSize int, fn func(keys []string) error) error {
	if pageSize <= 0 {
		pageSize = keySourcePage
	}
	if err := e.tx(ctx, func(q *dbgen.Queries) error {
		return verifyLeaseAndFence(ctx, q, token, StageFenced)
	}); err != nil {
		return err
	}
	return e.eachKeySourcePage(ctx, source, TenantKey(token.tenantKey()), pageSize, fn)
}

// ManifestChunks returns every persisted key chunk of the deletion request
// requestID, in chunk order (none once logical verification dropped them).
// The executor re-reads the chunks of key sources to prove each key gone.
func (e *Engine) ManifestChunks(ctx context.Context, requestID uuid.UUID) ([]ManifestKeyChunk, error) {
	var chunks []ManifestKeyChunk
	err := e.tx(ctx, func(q *dbgen.Queries) error {
		rows, err := q.DeletionManifestKeyListByRequest(ctx, requestID)
		if err != nil {
			return fmt.Errorf("list the manifest key chunks of deletion %s: %w", requestID, err)
		}
		for i := range rows {
			chunk, err := manifestChunkFromRow(&rows[i])
			if err != nil {
				return err
			}
			chunks = append(chunks, *chunk)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return chunks, nil
}
