package lifecycle

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	dbgen "github.com/tombstoneworks/communitydeletion/db/gen"
)

// purgeEdge is one foreign key between two registered 'delete' tables: rows
// of Child reference rows of Parent, so Child is purged first.
type purgeEdge struct {
	// Child is the referencing table.
	Child string
	// Parent is the referenced table.
	Parent string
	// Constraint names the foreign key, for errors.
	Constraint string
	// Soft marks a key whose ON DELETE action (CASCADE, SET NULL, SET
	// DEFAULT) takes care of the child rows itself, so purging the parent
	// first is still correct. Only a soft key may be broken to order a cycle.
	Soft bool
}

// purgeOrder returns tables ordered child before parent along edges: a
// table comes after every table that references it. Edges to or from
// tables outside tables, and self-references, are ignored (a self-reference
// is handled while purging the table). Among tables free to go next the
// order is by name, so it is deterministic.
//
// A cycle is broken only at a soft edge: when every remaining table is
// still referenced, the first by name whose remaining references are all
// soft goes next. A cycle of hard keys cannot be purged in any order
// without violating a key, so it is refused with an error matching
// ErrRefused that names the tables of each such cycle.
func purgeOrder(tables []string, edges []purgeEdge) ([]string, error) {
	known := make(map[string]bool, len(tables))
	for _, t := range tables {
		known[t] = true
	}
	// refs[parent][child] is true when some key from child to parent is
	// hard; a pair present only with false has soft keys only.
	refs := make(map[string]map[string]bool)
	for _, e := range edges {
		if e.Child == e.Parent || !known[e.Child] || !known[e.Parent] {
			continue
		}
		if refs[e.Parent] == nil {
			refs[e.Parent] = make(map[string]bool)
		}
		refs[e.Parent][e.Child] = refs[e.Parent][e.Child] || !e.Soft
	}

	remaining := slices.Clone(tables)
	slices.Sort(remaining)
	remaining = slices.Compact(remaining)
	placed := make(map[string]bool, len(remaining))
	order := make([]string, 0, len(remaining))
	// blockedBy reports whether any unplaced child still references t, and
	// whether any of those references is hard.
	blockedBy := func(t string) (blocked, hard bool) {
		for child, h := range refs[t] {
			if placed[child] {
				continue
			}
			blocked = true
			hard = hard || h
		}
		return blocked, hard
	}
	for len(remaining) > 0 {
		next := -1
		for i, t := range remaining {
			if blocked, _ := blockedBy(t); !blocked {
				next = i
				break
			}
		}
		if next < 0 {
			for i, t := range remaining {
				if _, hard := blockedBy(t); !hard {
					next = i
					break
				}
			}
		}
		if next < 0 {
			return nil, refusef("purge order: foreign keys form a cycle that no ON DELETE action breaks: %s",
				strings.Join(purgeHardCycles(remaining, refs), "; "))
		}
		placed[remaining[next]] = true
		order = append(order, remaining[next])
		remaining = slices.Delete(remaining, next, next+1)
	}
	return order, nil
}

// purgeHardCycles describes the strongly connected components of the hard
// edges among nodes that hold a cycle, each as its sorted table names.
func purgeHardCycles(nodes []string, refs map[string]map[string]bool) []string {
	in := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		in[n] = true
	}
	// Tarjan over child -> parent hard edges.
	next := func(n string) []string {
		var out []string
		for parent, children := range refs {
			if in[parent] && children[n] {
				out = append(out, parent)
			}
		}
		slices.Sort(out)
		return out
	}
	index := make(map[string]int)
	low := make(map[string]int)
	onStack := make(map[string]bool)
	var stack []string
	var components [][]string
	var visit func(n string)
	visit = func(n string) {
		index[n] = len(index)
		low[n] = index[n]
		stack = append(stack, n)
		onStack[n] = true
		for _, m := range next(n) {
			if _, seen := index[m]; !seen {
				visit(m)
				low[n] = min(low[n], low[m])
			} else if onStack[m] {
				low[n] = min(low[n], index[m])
			}
		}
		if low[n] == index[n] {
			var component []string
			for {
				m := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				onStack[m] = false
				component = append(component, m)
				if m == n {
					break
				}
			}
			if len(component) > 1 {
				slices.Sort(component)
				components = append(components, component)
			}
		}
	}
	for _, n := range nodes {
		if _, seen := index[n]; !seen {
			visit(n)
		}
	}
	slices.SortFunc(components, func(a, b []string) int { return cmp.Compare(a[0], b[0]) })
	out := make([]string, 0, len(components))
	for _, c := range components {
		out = append(out, fmt.Sprintf("[%s]", strings.Join(c, ", ")))
	}
	if len(out) == 0 {
		// Unreachable: a stuck sort always leaves a hard cycle.
		out = append(out, fmt.Sprintf("[%s]", strings.Join(nodes, ", ")))
	}
	return out
}

// PurgeOrder validates the catalog as ValidateCatalog does and returns the
// registered 'delete' tables in the order a purge deletes them, child before
// parent. A catalog that drifted, or a cycle of hard foreign keys no order
// can satisfy, returns an error matching ErrRefused that names the problem;
// a test of a service's adoption calls it to prove its tables can be purged.
func (e *Engine) PurgeOrder(ctx context.Context) ([]string, error) {
	return e.purgeOrder(ctx)
}

// PurgeOrder is Engine.PurgeOrder for an operator: the same validation and
// order, computed from the registry and the system catalogs, which the
// operator role may read. It changes nothing; deletionctl check calls it.
func (o *Operator) PurgeOrder(ctx context.Context) ([]string, error) {
	return o.purgeOrder(ctx)
}

// purgeOrder computes PurgeOrder in one read-only transaction.
func (s *store) purgeOrder(ctx context.Context) ([]string, error) {
	var order []string
	err := s.begin(ctx, true, func(tx pgx.Tx) error {
		q := dbgen.New(tx)
		if _, err := checkDeletionCatalog(ctx, q); err != nil {
			return err
		}
		shapes, err := q.PurgeTableShapes(ctx)
		if err != nil {
			return fmt.Errorf("list registered tables: %w", err)
		}
		keys, err := q.PurgeForeignKeys(ctx)
		if err != nil {
			return fmt.Errorf("list foreign keys: %w", err)
		}
		tenantTable, err := q.PurgeTenantTable(ctx)
		if err != nil {
			return fmt.Errorf("read the tenant table: %w", err)
		}
		var deleteNames []string
		for _, shape := range shapes {
			if shape.PurgeAction == purgeActionDelete {
				deleteNames = append(deleteNames, shape.TableName)
			}
		}
		order, err = purgeOrder(deleteNames, purgeEdges(keys, tenantTable, deleteNames))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("purge order: %w", catalogMissing(err))
	}
	return order, nil
}

// purgeEdges turns the foreign keys and references among registered tables
// into the purge order's edges, and, when tenantTable names the declared
// tenant table, a soft edge from every other table to it: the tenant's own
// row goes last, whether or not a foreign key says so, unless a hard key
// from the tenant table to another table says otherwise.
func purgeEdges(keys []dbgen.PurgeForeignKeysRow, tenantTable string, tables []string) []purgeEdge {
	edges := make([]purgeEdge, 0, len(keys)+len(tables))
	for _, k := range keys {
		edges = append(edges, purgeEdge{Child: k.ChildTable, Parent: k.ParentTable, Constraint: k.ConstraintName, Soft: k.Soft})
	}
	if tenantTable != "" {
		for _, t := range tables {
			if t != tenantTable {
				edges = append(edges, purgeEdge{Child: t, Parent: tenantTable, Constraint: "the tenant table goes last", Soft: true})
			}
		}
	}
	return edges
}
