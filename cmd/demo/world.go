package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tombstoneworks/communitydeletion/internal/fixture"
)

const (
	filesEach = 300 // per community, over two prefixes
	cacheEach = 50
	// liveWrite marks the rows the concurrent writers add, which the
	// "unchanged" proof leaves out.
	liveWrite = "live-write"
)

// community is one tenant of the demo.
type community struct {
	id         uuid.UUID
	host       string
	channelIDs []int64
	memberIDs  []int64
}

// prefixes are the community's object-store prefixes.
func (c *community) prefixes() []string {
	return fixture.ObjectPrefixes(c.id)
}

// world is the demo's three communities and their stores.
type world struct {
	pool        *pgxpool.Pool
	stores      *stores
	communities []*community
	target      *community
	rowsEach    int64
}

// buildWorld creates three communities with rows in every fixture table,
// files under their prefixes and cache entries.
func buildWorld(ctx context.Context, pool *pgxpool.Pool, st *stores) (*world, error) {
	w := &world{pool: pool, stores: st}
	var keys []string
	for _, name := range []string{"alpha", "beta", "gamma"} {
		c := &community{id: uuid.New(), host: name + ".demo.example"}
		if _, err := pool.Exec(ctx, "INSERT INTO community_deletion.communities (id, host, signing_key, icon) VALUES ($1, $2, 'signing-key', 'icon.png')",
			c.id, c.host); err != nil {
			return nil, fmt.Errorf("create community %s: %w", c.host, err)
		}
		rows, err := populate(ctx, pool, c)
		if err != nil {
			return nil, err
		}
		w.rowsEach = rows
		for i := range filesEach {
			keys = append(keys, fmt.Sprintf("%sfile-%04d.bin", c.prefixes()[i%2], i))
		}
		for i := range cacheEach {
			if err := st.cachePut(ctx, c.id, fmt.Sprintf("session-%d", i)); err != nil {
				return nil, fmt.Errorf("cache: %w", err)
			}
		}
		w.communities = append(w.communities, c)
	}
	if err := st.putAll(ctx, keys); err != nil {
		return nil, err
	}
	w.target = w.communities[0]
	return w, nil
}

// populate writes fixture rows for c and returns how many.
func populate(ctx context.Context, pool *pgxpool.Pool, c *community) (int64, error) {
	var total int64
	exec := func(sql string, args ...any) error {
		tag, err := pool.Exec(ctx, sql, args...)
		total += tag.RowsAffected()
		if err != nil {
			return fmt.Errorf("populate %s: %w", c.host, err)
		}
		return nil
	}
	if err := exec("INSERT INTO fixture_members (community_id, handle) SELECT $1, 'member-' || g FROM generate_series(1, 200) g", c.id); err != nil {
		return 0, err
	}
	if err := pool.QueryRow(ctx, "SELECT array_agg(id ORDER BY id) FROM fixture_members WHERE community_id = $1", c.id).Scan(&c.memberIDs); err != nil {
		return 0, fmt.Errorf("populate %s: %w", c.host, err)
	}
	steps := []struct {
		sql  string
		args []any
	}{
		{"UPDATE fixture_members m SET invited_by = ($2::bigint[])[i.n - 1] FROM (SELECT id, row_number() OVER (ORDER BY id) n FROM fixture_members WHERE community_id = $1) i WHERE m.id = i.id AND i.n > 1", []any{c.id, c.memberIDs}},
		{"INSERT INTO fixture_channels (community_id, name, created_by) SELECT $1, 'channel-' || g, $2 FROM generate_series(1, 10) g", []any{c.id, c.memberIDs[0]}},
	}
	for _, s := range steps {
		if err := exec(s.sql, s.args...); err != nil {
			return 0, err
		}
	}
	total -= int64(len(c.memberIDs) - 1) // the UPDATE changed rows it did not add
	if err := pool.QueryRow(ctx, "SELECT array_agg(id ORDER BY id) FROM fixture_channels WHERE community_id = $1", c.id).Scan(&c.channelIDs); err != nil {
		return 0, fmt.Errorf("populate %s: %w", c.host, err)
	}
	more := []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO fixture_messages (community_id, channel_id, author_id, body)
		  SELECT $1, ($2::bigint[])[1 + g % 10], ($3::bigint[])[1 + g % 200], 'message ' || g
		  FROM generate_series(1, 2000) g`, []any{c.id, c.channelIDs, c.memberIDs}},
		{`INSERT INTO fixture_reactions (community_id, message_id, member_id, emoji)
		  SELECT $1, m.id, ($2::bigint[])[1 + (m.id + g) % 200], '+1'
		  FROM fixture_messages m, generate_series(1, 2) g WHERE m.community_id = $1`, []any{c.id, c.memberIDs}},
		{`INSERT INTO fixture_attachments (community_id, message_id, storage_key)
		  SELECT $1::uuid, m.id, 'media/' || $1::uuid::text || '/file-' || m.id
		  FROM fixture_messages m WHERE m.community_id = $1::uuid AND m.id % 5 = 0`, []any{c.id}},
		{`INSERT INTO fixture_activity (community_id, kind) SELECT $1, 'seen' FROM generate_series(1, 2000)`, []any{c.id}},
		{`INSERT INTO fixture_audit_events (community_id, action) SELECT $1, 'event ' || g FROM generate_series(1, 200) g`, []any{c.id}},
	}
	for _, m := range more {
		if err := exec(m.sql, m.args...); err != nil {
			return 0, err
		}
	}
	return total, nil
}

// snapshot is what must stay unchanged for the communities that are kept.
type snapshot struct {
	rows  map[uuid.UUID]string // digest of every fixture row but the live writes
	files map[uuid.UUID]string // digest of the listed keys and sizes
	count map[uuid.UUID]int64  // files
	cache map[uuid.UUID]int
}

func (w *world) snapshot(ctx context.Context) (*snapshot, error) {
	s := &snapshot{rows: map[uuid.UUID]string{}, files: map[uuid.UUID]string{}, count: map[uuid.UUID]int64{}, cache: map[uuid.UUID]int{}}
	tables := append(append([]string{}, fixture.Tables...), fixture.NullifyTables...)
	for _, c := range w.communities {
		sum := sha256.New()
		for _, table := range tables {
			var digest string
			query := "SELECT md5(coalesce(string_agg(t::text, '|' ORDER BY t::text), '')) FROM " +
				pgx.Identifier{table}.Sanitize() + " t WHERE community_id = $1"
			if table == "fixture_messages" {
				query += " AND body NOT LIKE '" + liveWrite + "%'"
			}
			if err := w.pool.QueryRow(ctx, query, c.id).Scan(&digest); err != nil {
				return nil, fmt.Errorf("digest %s: %w", table, err)
			}
			fmt.Fprintf(sum, "%s=%s\n", table, digest)
		}
		s.rows[c.id] = hex.EncodeToString(sum.Sum(nil))
		files := sha256.New()
		for _, prefix := range c.prefixes() {
			if err := w.stores.objects.List(ctx, prefix, func(key string, size int64) error {
				fmt.Fprintf(files, "%s %d\n", key, size)
				s.count[c.id]++
				return nil
			}); err != nil {
				return nil, fmt.Errorf("list %s: %w", prefix, err)
			}
		}
		s.files[c.id] = hex.EncodeToString(files.Sum(nil))
		n, err := w.stores.cacheLen(ctx, c.id)
		if err != nil {
			return nil, fmt.Errorf("count cache entries: %w", err)
		}
		s.cache[c.id] = n
	}
	return s, nil
}
