package communitydeletiontest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// resolveTenant fills in whichever of p.Tenant and p.CommunityID is
// missing, from the tenant's lifecycle row, and fails when the two name
// different tenants or none exists.
func (k *Kit) resolveTenant(ctx context.Context, p *DeleteParams) error {
	var key string
	var err error
	if p.Tenant != "" {
		err = k.owner.QueryRow(ctx, `SELECT c.id, coalesce(c.tenant_key, c.id::text) FROM community_deletion.communities c
			WHERE c.id = community_deletion.community_deletion_tenant_id($1)`, p.Tenant.String()).Scan(&p.CommunityID, &key)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("communitydeletiontest: no tenant has key %q (declare the service's tenant table, and create the tenant with the service's own code first)", p.Tenant)
		}
	} else {
		err = k.owner.QueryRow(ctx, "SELECT coalesce(tenant_key, id::text) FROM community_deletion.communities WHERE id = $1",
			p.CommunityID).Scan(&key)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("communitydeletiontest: no community %s (declare the service's tenant table, or insert its communities row)", p.CommunityID)
		}
	}
	if err != nil {
		return fmt.Errorf("communitydeletiontest: look up the tenant: %w", err)
	}
	p.Tenant = lifecycle.TenantKey(key)
	return nil
}

// userTables selects the tables a scan covers: every table (a partitioned
// one as a whole) outside the system schemas, less the control plane's own
// (schema community_deletion), which keep the deletion's record by design.
const userTables = `
	FROM pg_class c
	JOIN pg_namespace n ON n.oid = c.relnamespace
	WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition
	  AND n.nspname NOT IN ('pg_catalog', 'information_schema')
	  AND n.nspname !~ '^pg_(toast|temp_|toast_temp_)'
	  AND n.nspname <> 'community_deletion'`

// keyNames selects the names a column holding a tenant's key goes by:
// community_id, every registered tenant key column but the tenant table's
// own, and, for a tenant table accounts (or "Account"), account_id,
// accountId, AccountId, tenant_id and tenantId, as the drift report reads
// them.
const keyNames = `
	SELECT 'community_id'::text
	UNION SELECT r.tenant_key::text FROM community_deletion.community_scoped_tables r
	WHERE r.tenant_key IS NOT NULL AND NOT EXISTS (SELECT 1 FROM community_deletion.community_deletion_tenant_table d
	                                               WHERE d.table_schema = r.table_schema AND d.table_name = r.table_name)
	UNION SELECT unnest(ARRAY[stem.s || '_id', stem.s || 'Id', lower(stem.s) || '_id',
	                          lower(left(stem.s, 1)) || substr(stem.s, 2) || 'Id', 'tenant_id', 'tenantId'])
	FROM community_deletion.community_deletion_tenant_table d
	CROSS JOIN LATERAL (SELECT CASE WHEN d.table_name ~ 'ies$' THEN regexp_replace(d.table_name, 'ies$', 'y')
	                                WHEN d.table_name ~ '[^s]s$' THEN left(d.table_name, -1)
	                                ELSE d.table_name::text END) stem (s)`

// distinctKeyLength is the shortest text key searched for inside text and
// json values: a uuid, or a generated id (a cuid has 25 characters), cannot
// occur there by chance; a shorter key (or an integer) is matched only in
// the columns named like a tenant key.
const distinctKeyLength = 12

// column is one column a scan reads.
type column struct{ schema, table, name, typ string }

func (c column) String() string { return c.schema + "." + c.table + "." + c.name }

// columns lists the columns of the user tables that query's WHERE (over
// pg_attribute a, with $1) selects.
func (k *Kit) columns(ctx context.Context, where string, args ...any) ([]column, error) {
	rows, err := k.owner.Query(ctx, `SELECT n.nspname::text, c.relname::text, a.attname::text, format_type(a.atttypid, NULL)
	FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
	WHERE a.attnum > 0 AND NOT a.attisdropped
	  AND c.oid IN (SELECT c.oid`+userTables+`)
	  AND (`+where+`)
	ORDER BY 1, 2, a.attnum`, args...)
	if err != nil {
		return nil, fmt.Errorf("communitydeletiontest: list the columns to scan: %w", err)
	}
	cols, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (column, error) {
		var c column
		return c, r.Scan(&c.schema, &c.table, &c.name, &c.typ)
	})
	if err != nil {
		return nil, fmt.Errorf("communitydeletiontest: list the columns to scan: %w", err)
	}
	return cols, nil
}

// count counts the rows of c's table where filter (over the column, named
// col) holds.
func (k *Kit) count(ctx context.Context, c column, filter string, args ...any) (int64, error) {
	var n int64
	query := "SELECT count(*) FROM " + pgx.Identifier{c.schema, c.table}.Sanitize() + " WHERE " +
		strings.ReplaceAll(filter, "col", pgx.Identifier{c.name}.Sanitize())
	if err := k.owner.QueryRow(ctx, query, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("communitydeletiontest: scan %s: %w", c, err)
	}
	return n, nil
}

// leftoverRows looks for the tenant's key in the user tables and returns one
// line per column that still holds it: a uuid key in every uuid column and
// inside every text and json value; a long text key inside every text and
// json value; an integer or a short text key in every column named like a
// tenant key.
func (k *Kit) leftoverRows(ctx context.Context, p DeleteParams) ([]string, error) {
	var kind string
	if err := k.owner.QueryRow(ctx, "SELECT community_deletion.community_deletion_tenant_key_kind()").Scan(&kind); err != nil {
		return nil, fmt.Errorf("communitydeletiontest: read the tenant key's kind: %w", err)
	}
	key := p.Tenant.String()
	searchInside := kind == "uuid" || (kind == "text" && len(key) >= distinctKeyLength)
	var cols []column
	var err error
	if searchInside {
		cols, err = k.columns(ctx, `a.atttypid IN ('uuid'::regtype, 'text'::regtype, 'character varying'::regtype,
			'character'::regtype, 'json'::regtype, 'jsonb'::regtype)`)
	} else {
		cols, err = k.columns(ctx, `a.attname::text IN (`+keyNames+`)`)
	}
	if err != nil {
		return nil, err
	}
	var problems []string
	for _, c := range cols {
		filter := "col::text = $1"
		switch {
		case c.typ == "uuid":
			filter = "col = $1::uuid"
			if kind != "uuid" {
				continue
			}
		case searchInside && kind == "uuid":
			filter = "strpos(lower(col::text), lower($1)) > 0"
		case searchInside:
			filter = "strpos(col::text, $1) > 0"
		}
		n, err := k.count(ctx, c, filter, key)
		if err != nil {
			return nil, err
		}
		if n > 0 {
			problems = append(problems, fmt.Sprintf("%d row(s) of %s.%s still hold community %s in column %s (%s)",
				n, c.schema, c.table, key, c.name, c.typ))
		}
	}
	return problems, nil
}

// deletedRows are the primary keys, as text, of the rows of one registered
// table that the deletion is to remove.
type deletedRows struct {
	schema, table, key, typ string
	values                  []string
}

// rowKeys records, before the deletion, the primary key of every row of the
// tenant in every registered 'delete' table whose primary key is one column.
func (k *Kit) rowKeys(ctx context.Context, p DeleteParams) ([]deletedRows, error) {
	rows, err := k.owner.Query(ctx, `SELECT r.table_schema::text, r.table_name::text, a.attname::text, format_type(a.atttypid, NULL),
	       community_deletion.community_deletion_tenant_filter(r.table_schema, r.table_name::name, NULL)
	FROM community_deletion.community_scoped_tables r
	JOIN pg_namespace n ON n.nspname = r.table_schema
	JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = r.table_name
	JOIN pg_constraint k ON k.conrelid = c.oid AND k.contype = 'p' AND cardinality(k.conkey) = 1
	JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.conkey[1]
	WHERE r.purge_action = 'delete'
	ORDER BY 1, 2`)
	if err != nil {
		return nil, fmt.Errorf("communitydeletiontest: list the registered tables' keys: %w", err)
	}
	type table struct{ schema, name, key, typ, filter string }
	tables, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (table, error) {
		var t table
		return t, r.Scan(&t.schema, &t.name, &t.key, &t.typ, &t.filter)
	})
	if err != nil {
		return nil, fmt.Errorf("communitydeletiontest: list the registered tables' keys: %w", err)
	}
	var out []deletedRows
	for _, t := range tables {
		rows, err := k.owner.Query(ctx, "SELECT "+pgx.Identifier{t.key}.Sanitize()+"::text FROM "+
			pgx.Identifier{t.schema, t.name}.Sanitize()+" WHERE "+t.filter, p.Tenant.String())
		if err != nil {
			return nil, fmt.Errorf("communitydeletiontest: read the keys of %s.%s: %w", t.schema, t.name, err)
		}
		values, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return nil, fmt.Errorf("communitydeletiontest: read the keys of %s.%s: %w", t.schema, t.name, err)
		}
		if len(values) > 0 {
			out = append(out, deletedRows{schema: t.schema, table: t.name, key: t.key, typ: t.typ, values: values})
		}
	}
	return out, nil
}

// rowsPointingAtDeleted looks, after the deletion, for the primary keys of
// the rows it removed, and returns one line per column that still holds
// any: a uuid key in every uuid column of every user table, a text key in
// every text column, an integer key (which other tables' ids repeat by
// chance) in the columns that reference its table by a foreign key or a
// declared reference, or are named after it (conversation_id,
// conversationId for conversations).
func (k *Kit) rowsPointingAtDeleted(ctx context.Context, deleted []deletedRows) ([]string, error) {
	var problems []string
	for _, d := range deleted {
		var cols []column
		var err error
		switch {
		case d.typ == "uuid":
			cols, err = k.columns(ctx, `a.atttypid = 'uuid'::regtype`)
		case d.typ == "text" || strings.HasPrefix(d.typ, "character"):
			cols, err = k.columns(ctx, `a.atttypid IN ('text'::regtype, 'character varying'::regtype, 'character'::regtype)
				AND NOT (n.nspname = $1 AND c.relname = $2 AND a.attname = $3)`, d.schema, d.table, d.key)
		default:
			cols, err = k.columns(ctx, `a.atttypid IN ('smallint'::regtype, 'integer'::regtype, 'bigint'::regtype)
				AND ((n.nspname = $1 AND c.relname = $2 AND a.attname = $3)
				     OR EXISTS (SELECT 1 FROM pg_constraint f JOIN pg_class p ON p.oid = f.confrelid
				                JOIN pg_namespace pn ON pn.oid = p.relnamespace
				                WHERE f.contype = 'f' AND f.conrelid = c.oid AND a.attnum = ANY (f.conkey)
				                  AND pn.nspname = $1 AND p.relname = $2)
				     OR EXISTS (SELECT 1 FROM community_deletion.community_deletion_references r
				                WHERE r.child_schema = n.nspname AND r.child_table = c.relname AND a.attname = ANY (r.child_columns)
				                  AND r.parent_schema = $1 AND r.parent_table = $2)
				     OR a.attname::text IN (SELECT name.n FROM (SELECT CASE WHEN $2::text ~ 'ies$' THEN regexp_replace($2::text, 'ies$', 'y')
				                                                             WHEN $2::text ~ '[^s]s$' THEN left($2::text, -1) ELSE $2::text END) stem (s)
				                            CROSS JOIN LATERAL unnest(ARRAY[stem.s || '_id', lower(left(stem.s, 1)) || substr(stem.s, 2) || 'Id']) name (n)))`,
				d.schema, d.table, d.key)
		}
		if err != nil {
			return nil, err
		}
		for _, c := range cols {
			var hits []string
			rows, err := k.owner.Query(ctx, "SELECT DISTINCT "+pgx.Identifier{c.name}.Sanitize()+"::text FROM "+
				pgx.Identifier{c.schema, c.table}.Sanitize()+" WHERE "+pgx.Identifier{c.name}.Sanitize()+"::text = ANY ($1::text[])",
				d.values)
			if err == nil {
				hits, err = pgx.CollectRows(rows, pgx.RowTo[string])
			}
			if err != nil {
				return nil, fmt.Errorf("communitydeletiontest: scan %s: %w", c, err)
			}
			if len(hits) == 0 {
				continue
			}
			slices.Sort(hits)
			what := "rows still point at deleted rows of"
			if c.schema == d.schema && c.table == d.table && c.name == d.key {
				what = "rows of the deleted tenant are left in"
			}
			problems = append(problems, fmt.Sprintf("table %s.%s: %s %s.%s: column %s holds %d of their keys (%s)",
				c.schema, c.table, what, d.schema, d.table, c.name, len(hits), strings.Join(hits[:min(len(hits), maxKeysShown)], ", ")))
		}
	}
	return problems, nil
}

// fingerprint digests, per table, the rows of every tenant but this one:
// communities' other rows, the rows of each registered table that its tenant
// filter does not select for the tenant (by its key, or through its
// parents; the rows of no tenant of a 'delete' table included), and those of
// each other user table with a community_id column.
func (k *Kit) fingerprint(ctx context.Context, p DeleteParams) (map[string]string, error) {
	// A 'nullify' table's rows of no tenant are not compared: the deletion
	// makes the tenant's rows such.
	rows, err := k.owner.Query(ctx, `SELECT r.table_schema::text, r.table_name::text,
	       CASE WHEN r.purge_action = 'nullify' THEN format('%I IS NULL OR ', r.tenant_key) ELSE '' END
	       || community_deletion.community_deletion_tenant_filter(r.table_schema, r.table_name::name, NULL), true
	FROM community_deletion.community_scoped_tables r
	UNION
	SELECT n.nspname::text, c.relname::text, 'community_id::text = $1', false`+userTables+`
	  AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'community_id' AND NOT a.attisdropped)
	  AND NOT EXISTS (SELECT 1 FROM community_deletion.community_scoped_tables r
	                  WHERE r.table_schema = n.nspname AND r.table_name = c.relname)
	ORDER BY 1, 2`)
	if err != nil {
		return nil, fmt.Errorf("communitydeletiontest: list the tenant tables: %w", err)
	}
	type table struct {
		schema, name, filter string
		registered           bool
	}
	tables, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (table, error) {
		var t table
		return t, r.Scan(&t.schema, &t.name, &t.filter, &t.registered)
	})
	if err != nil {
		return nil, fmt.Errorf("communitydeletiontest: list the tenant tables: %w", err)
	}
	sums := make(map[string]string, len(tables)+1)
	digest := func(name, from, where string, arg any) error {
		var n int64
		var sum string
		query := "SELECT count(*), coalesce(md5(string_agg(md5(t::text), '' ORDER BY md5(t::text))), '') FROM " + from + " t WHERE " + where
		if err := k.owner.QueryRow(ctx, query, arg).Scan(&n, &sum); err != nil {
			return fmt.Errorf("communitydeletiontest: fingerprint %s: %w", name, err)
		}
		sums[name] = fmt.Sprintf("%d rows, md5 %.8s", n, sum)
		return nil
	}
	if err := digest("communities", "community_deletion.communities", "id <> $1", p.CommunityID); err != nil {
		return nil, err
	}
	for _, t := range tables {
		arg := p.Tenant.String()
		if !t.registered {
			arg = p.CommunityID.String()
		}
		if err := digest(t.schema+"."+t.name, pgx.Identifier{t.schema, t.name}.Sanitize(), "("+t.filter+") IS NOT TRUE", arg); err != nil {
			return nil, err
		}
	}
	return sums, nil
}

// listedObjectKeys reads, before the deletion, every object key the
// declared key sources (storage layout kind object_keys) list in the
// tenant's rows.
func (k *Kit) listedObjectKeys(ctx context.Context, p DeleteParams) ([]string, error) {
	rows, err := k.owner.Query(ctx, `SELECT parts.p[1], parts.p[2], parts.p[3],
	       community_deletion.community_deletion_tenant_filter(parts.p[1]::name, parts.p[2]::name, NULL)
	FROM community_deletion.community_deletion_storage_layout l
	CROSS JOIN LATERAL (SELECT parse_ident(l.template) AS p) parts
	WHERE l.kind = 'object_keys' AND l.action = 'declare'
	  AND NOT EXISTS (SELECT 1 FROM community_deletion.community_deletion_storage_layout later
	                  WHERE later.kind = l.kind AND later.template = l.template AND later.sequence > l.sequence)
	ORDER BY l.template`)
	if err != nil {
		return nil, fmt.Errorf("communitydeletiontest: list the key sources: %w", err)
	}
	type source struct{ schema, table, column, filter string }
	sources, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (source, error) {
		var s source
		return s, r.Scan(&s.schema, &s.table, &s.column, &s.filter)
	})
	if err != nil {
		return nil, fmt.Errorf("communitydeletiontest: list the key sources: %w", err)
	}
	var keys []string
	for _, s := range sources {
		col := pgx.Identifier{s.column}.Sanitize()
		rows, err := k.owner.Query(ctx, "SELECT DISTINCT "+col+" FROM "+pgx.Identifier{s.schema, s.table}.Sanitize()+
			" WHERE ("+s.filter+") AND "+col+" <> ''", p.Tenant.String())
		if err != nil {
			return nil, fmt.Errorf("communitydeletiontest: read the keys of %s.%s.%s: %w", s.schema, s.table, s.column, err)
		}
		got, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return nil, fmt.Errorf("communitydeletiontest: read the keys of %s.%s.%s: %w", s.schema, s.table, s.column, err)
		}
		keys = append(keys, got...)
	}
	return keys, nil
}

// tenantObjects names the tenant's declared per-tenant objects (storage
// layout kind sequence) that exist.
func (k *Kit) tenantObjects(ctx context.Context, p DeleteParams) ([]string, error) {
	rows, err := k.owner.Query(ctx, `SELECT community_deletion.community_deletion_tenant_object_name(l.template, $1)
	FROM community_deletion.community_deletion_storage_layout l
	WHERE l.kind = 'sequence' AND l.action = 'declare'
	  AND NOT EXISTS (SELECT 1 FROM community_deletion.community_deletion_storage_layout later
	                  WHERE later.kind = l.kind AND later.template = l.template AND later.sequence > l.sequence)
	  AND to_regclass(community_deletion.community_deletion_tenant_object_name(l.template, $1)) IS NOT NULL
	ORDER BY 1`, p.Tenant.String())
	if err != nil {
		return nil, fmt.Errorf("communitydeletiontest: list the per-tenant objects: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("communitydeletiontest: list the per-tenant objects: %w", err)
	}
	return names, nil
}
