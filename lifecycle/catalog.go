package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	dbgen "github.com/tombstoneworks/communitydeletion/db/gen"
)

// servingColumns is the shape the serving-path write fence needs of the
// communities table: each deletion column's formatted type and whether it is
// NOT NULL.
var servingColumns = map[string]struct {
	typeName string
	notNull  bool
}{
	"archived_at":               {"timestamp with time zone", false},
	"deleted_at":                {"timestamp with time zone", false},
	"deletion_fence_generation": {"bigint", true},
	"deletion_state":            {"text", true},
}

// servingTables are the tables the serving-path write fence and the
// deletion lifecycle read, all in schema community_deletion.
var servingTables = []string{
	"communities",
	"community_deletion_requests",
	"community_scoped_tables",
	"community_serving_write_leases",
}

// ping checks that the database answers and that the deletion control plane
// is installed. It probes the catalog for community_deletion_requests rather
// than the migration tool's version table, so a schema installed by other
// means passes too. A database without it returns an error matching
// ErrRefused.
func (s *store) ping(ctx context.Context) error {
	err := s.tx(ctx, func(q *dbgen.Queries) error {
		installed, err := q.CatalogPing(ctx)
		if err != nil {
			return fmt.Errorf("probe the deletion control plane: %w", err)
		}
		if !installed {
			return refusef("the deletion control plane is not installed: community_deletion.community_deletion_requests does not resolve")
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("ping: %w", err)
	}
	return nil
}

// ValidateCatalog checks the catalog contract the serving path's write
// fence relies on: the deletion columns of communities with their types and
// nullability, the tables the fence and the lifecycle read, the functions
// community_deletion_lock_key(uuid), community_write_allowed(uuid) (which
// must be VOLATILE), assert_community_write_allowed(uuid) and
// enforce_community_write_fence(), the enabled row trigger that runs
// enforce_community_tombstone() on communities, and no registered 'delete'
// table (or partition) without its complete write fence. A serving process
// calls it at startup; any failure matches ErrRefused and names what is
// missing.
func (s *Serving) ValidateCatalog(ctx context.Context) error {
	err := s.tx(ctx, func(q *dbgen.Queries) error {
		present, err := q.CatalogRelationsPresent(ctx, servingTables)
		if err != nil {
			return fmt.Errorf("list serving tables: %w", err)
		}
		if missing := missingNames(servingTables, present); len(missing) > 0 {
			return refusef("serving fence tables missing: %s", strings.Join(missing, ", "))
		}

		names := make([]string, 0, len(servingColumns))
		for name := range servingColumns {
			names = append(names, name)
		}
		slices.Sort(names)
		columns, err := q.CatalogCommunityColumns(ctx, names)
		if err != nil {
			return fmt.Errorf("list community deletion columns: %w", err)
		}
		seen := make(map[string]bool, len(columns))
		var problems []string
		for _, column := range columns {
			want := servingColumns[column.ColumnName]
			seen[column.ColumnName] = true
			if column.TypeName != want.typeName || column.NotNull != want.notNull {
				problems = append(problems, fmt.Sprintf("communities.%s is %s%s, want %s%s",
					column.ColumnName, column.TypeName, notNullText(column.NotNull), want.typeName, notNullText(want.notNull)))
			}
		}
		for _, name := range names {
			if !seen[name] {
				problems = append(problems, fmt.Sprintf("communities.%s is missing", name))
			}
		}
		if len(problems) > 0 {
			return refusef("community serving fence columns are incompatible: %s", strings.Join(problems, "; "))
		}

		objects, err := q.CatalogServingObjects(ctx)
		if err != nil {
			return fmt.Errorf("inspect serving fence functions: %w", err)
		}
		checks := []struct {
			ok   bool
			what string
		}{
			{objects.LockKey, "function community_deletion.community_deletion_lock_key(uuid) is missing"},
			{objects.WriteAllowed, "function community_deletion.community_write_allowed(uuid) is missing"},
			{!objects.WriteAllowed || objects.WriteAllowedVolatile, "function community_deletion.community_write_allowed(uuid) is not VOLATILE"},
			{objects.AssertWriteAllowed, "function community_deletion.assert_community_write_allowed(uuid) is missing"},
			{objects.WriteFence, "function community_deletion.enforce_community_write_fence() is missing"},
			{objects.CatalogDrift, "function community_deletion.community_deletion_catalog_drift() is missing"},
			{objects.TombstoneGuard, "no enabled BEFORE INSERT OR UPDATE OR DELETE row trigger runs community_deletion.enforce_community_tombstone() on community_deletion.communities"},
		}
		for _, check := range checks {
			if !check.ok {
				problems = append(problems, check.what)
			}
		}
		if len(problems) > 0 {
			return refusef("community serving fence is incomplete: %s", strings.Join(problems, "; "))
		}

		drift, err := q.CatalogDriftList(ctx)
		if err != nil {
			return fmt.Errorf("list catalog drift: %w", err)
		}
		var unfenced []string
		for _, row := range drift {
			// 'unfenced', or 'unfenced: <which trigger is not whole>'.
			if row.Problem == "unfenced" || strings.HasPrefix(row.Problem, "unfenced:") {
				unfenced = append(unfenced, row.TableName)
			}
		}
		if len(unfenced) > 0 {
			return refusef("community serving write fences missing on: %s", strings.Join(unfenced, ", "))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("validate serving catalog: %w", catalogMissing(err))
	}
	return nil
}

// validateCatalog checks that the live catalog matches the registry of tenant
// tables exactly, as every destructive stage requires: it refuses, with an
// error matching ErrRefused that lists every problem, when
// community_deletion_catalog_drift() reports any row (an unregistered,
// missing, reshaped, unfenced or stray-fenced table) or when the registry
// itself is malformed (no 'delete' table, an unknown purge action, a
// control-plane table registered). A destructive transaction repeats the
// check itself; this call is an early, operator-facing rejection.
func (s *store) validateCatalog(ctx context.Context) error {
	err := s.tx(ctx, func(q *dbgen.Queries) error {
		_, err := checkDeletionCatalog(ctx, q)
		return err
	})
	if err != nil {
		return fmt.Errorf("validate catalog: %w", catalogMissing(err))
	}
	return nil
}

// InventorySchema builds the PostgreSQL side of community's inventory: it
// validates the catalog as ValidateCatalog does, then lists the registered
// tables (both purge actions; the 'nullify' ones also in NullifyTables), the
// tables carrying the complete write fence, and the community's row count in
// every registered table, all in one transaction. Table lists are sorted
// bytewise. Row counts are evidence of the footprint the operator approves,
// not a precondition of execution: they may change until the fence. A
// missing community returns an error matching ErrNotFound.
func (o *Operator) InventorySchema(ctx context.Context, community uuid.UUID) (*SchemaManifest, error) {
	var manifest *SchemaManifest
	err := o.catalogTx(ctx, func(tx pgx.Tx, q *dbgen.Queries) error {
		row, err := q.CommunityGetByID(ctx, community)
		if err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return notFoundf("community %s", community)
			}
			return fmt.Errorf("read community %s: %w", community, err)
		}
		key := tenantKeyOf(row.ID, row.TenantKey)
		registry, err := checkDeletionCatalog(ctx, q)
		if err != nil {
			return err
		}
		fenced, err := q.CatalogFencedTables(ctx)
		if err != nil {
			return fmt.Errorf("list fenced tables: %w", err)
		}
		m := &SchemaManifest{
			ScopedTables:  []string{},
			RowCounts:     make(map[string]int64, len(registry)),
			FencedTables:  slices.Sorted(slices.Values(fenced)),
			NullifyTables: []string{},
		}
		schemas := make(map[string]string, len(registry))
		filters := make(map[string]string, len(registry))
		for _, table := range registry {
			schemas[table.TableName] = table.TableSchema
			filters[table.TableName] = table.TenantFilter
			m.ScopedTables = append(m.ScopedTables, table.TableName)
			if table.PurgeAction == "nullify" {
				m.NullifyTables = append(m.NullifyTables, table.TableName)
			}
		}
		slices.Sort(m.ScopedTables)
		slices.Sort(m.NullifyTables)
		// Table and column names come only from the validated registry and
		// are quoted as identifiers, qualified by the schema the registry
		// records; each table is counted by its own tenant key, or through
		// its parents (community_deletion_tenant_filter()).
		for _, table := range m.ScopedTables {
			sql := "SELECT count(*) FROM " + pgx.Identifier{schemas[table], table}.Sanitize() +
				" WHERE " + filters[table]
			var n int64
			if err := tx.QueryRow(ctx, sql, key.String()).Scan(&n); err != nil {
				return fmt.Errorf("count rows of %s in %s: %w", community, table, err)
			}
			m.RowCounts[table] = n
		}
		if err := ValidateSchemaManifest(*m); err != nil {
			return refusef("live schema inventory is malformed: %w", err)
		}
		manifest = m
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("inventory schema of community %s: %w", community, catalogMissing(err))
	}
	return manifest, nil
}

// checkDeletionCatalog refuses, listing every problem, unless the live
// catalog matches the registry exactly and the registry is well formed; it
// returns the registry otherwise. It runs in the caller's transaction, so a
// destructive transaction holding the shared schema-destruction lock
// validates the surface it is about to act on.
func checkDeletionCatalog(ctx context.Context, q *dbgen.Queries) ([]dbgen.CatalogRegistryListRow, error) {
	drift, err := q.CatalogDriftList(ctx)
	if err != nil {
		return nil, fmt.Errorf("list catalog drift: %w", err)
	}
	registry, err := q.CatalogRegistryList(ctx)
	if err != nil {
		return nil, fmt.Errorf("list registered tables: %w", err)
	}
	var problems []string
	for _, row := range drift {
		problems = append(problems, row.TableName+" "+row.Problem)
	}
	deleteTables := 0
	for _, row := range registry {
		switch row.PurgeAction {
		case "delete":
			deleteTables++
		case "nullify":
		default:
			problems = append(problems, fmt.Sprintf("%s has unknown purge action %q", row.TableName, row.PurgeAction))
		}
		if row.ControlPlane {
			problems = append(problems, row.TableName+" is a control-plane table and must not be registered")
		}
	}
	if deleteTables == 0 {
		problems = append(problems, "no 'delete' table is registered in community_deletion.community_scoped_tables")
	}
	if len(problems) > 0 {
		return nil, refusef("community deletion catalog drift (%d problem(s)): %s", len(problems), strings.Join(problems, "; "))
	}
	return registry, nil
}

// catalogTx is Store.tx for the catalog work that needs the transaction
// itself: dynamic statements over table names from the validated registry.
func (s *store) catalogTx(ctx context.Context, fn func(tx pgx.Tx, q *dbgen.Queries) error) error {
	return s.begin(ctx, false, func(tx pgx.Tx) error { return fn(tx, dbgen.New(tx)) })
}

// catalogMissing turns "relation or function does not exist" while reading
// the catalog into the refusal it is: the deletion schema is not installed.
func catalogMissing(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == pgerrcode.UndefinedTable || pgErr.Code == pgerrcode.UndefinedFunction) {
		return refusef("the deletion schema is not installed: %w", err)
	}
	return err
}

// missingNames returns the names of want not in have, in want's order.
func missingNames(want, have []string) []string {
	var missing []string
	for _, name := range want {
		if !slices.Contains(have, name) {
			missing = append(missing, name)
		}
	}
	return missing
}

func notNullText(notNull bool) string {
	if notNull {
		return " NOT NULL"
	}
	return ""
}
