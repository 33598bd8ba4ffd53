package lifecycle

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// requireChildFirst asserts that order holds every table once and puts each
// hard edge's child before its parent.
func requireChildFirst(t *testing.T, tables []string, edges []purgeEdge, order []string) {
	t.Helper()
	want := slices.Clone(tables)
	slices.Sort(want)
	want = slices.Compact(want)
	got := slices.Clone(order)
	slices.Sort(got)
	require.Equal(t, want, got, "every table exactly once")
	for _, e := range edges {
		if e.Soft || e.Child == e.Parent {
			continue
		}
		c, p := slices.Index(order, e.Child), slices.Index(order, e.Parent)
		if c < 0 || p < 0 {
			continue
		}
		require.Less(t, c, p, "%s references %s and must go first: %v", e.Child, e.Parent, order)
	}
}

func TestPurgeOrderFixtureShape(t *testing.T) {
	t.Parallel()
	tables := []string{"fixture_members", "fixture_channels", "fixture_messages", "fixture_reactions",
		"fixture_attachments", "fixture_activity"}
	edges := []purgeEdge{
		{Child: "fixture_attachments", Parent: "fixture_messages"},
		{Child: "fixture_channels", Parent: "fixture_members"},
		{Child: "fixture_members", Parent: "fixture_members"},
		{Child: "fixture_messages", Parent: "fixture_channels"},
		{Child: "fixture_messages", Parent: "fixture_members"},
		{Child: "fixture_reactions", Parent: "fixture_members"},
		{Child: "fixture_reactions", Parent: "fixture_messages", Soft: true},
	}
	order, err := purgeOrder(tables, edges)
	require.NoError(t, err)
	requireChildFirst(t, tables, edges, order)
	// Ties go by name, and the cascade child still goes before its parent.
	require.Equal(t, []string{"fixture_activity", "fixture_attachments", "fixture_reactions",
		"fixture_messages", "fixture_channels", "fixture_members"}, order)
}

func TestPurgeOrderIsDeterministicWhateverTheInputOrder(t *testing.T) {
	t.Parallel()
	tables := []string{"d", "c", "b", "a", "e"}
	edges := []purgeEdge{{Child: "a", Parent: "b"}, {Child: "b", Parent: "c"}, {Child: "e", Parent: "c"}}
	first, err := purgeOrder(tables, edges)
	require.NoError(t, err)
	requireChildFirst(t, tables, edges, first)
	slices.Reverse(tables)
	slices.Reverse(edges)
	second, err := purgeOrder(tables, edges)
	require.NoError(t, err)
	require.Equal(t, first, second)
	require.Equal(t, []string{"a", "b", "d", "e", "c"}, first)
}

func TestPurgeOrderChainAndDiamond(t *testing.T) {
	t.Parallel()
	// A diamond under a chain: leaf -> left, right -> root -> top.
	tables := []string{"top", "root", "left", "right", "leaf"}
	edges := []purgeEdge{
		{Child: "root", Parent: "top"},
		{Child: "left", Parent: "root"},
		{Child: "right", Parent: "root"},
		{Child: "leaf", Parent: "left"},
		{Child: "leaf", Parent: "right"},
	}
	order, err := purgeOrder(tables, edges)
	require.NoError(t, err)
	requireChildFirst(t, tables, edges, order)
	require.Equal(t, "leaf", order[0])
	require.Equal(t, "top", order[len(order)-1])
}

func TestPurgeOrderIgnoresSelfReferencesUnknownTablesAndDuplicates(t *testing.T) {
	t.Parallel()
	tables := []string{"b", "a", "a"}
	edges := []purgeEdge{
		{Child: "a", Parent: "a"},
		{Child: "b", Parent: "b"},
		{Child: "a", Parent: "b"},
		{Child: "a", Parent: "b", Constraint: "second"},
		{Child: "ghost", Parent: "a"},
		{Child: "b", Parent: "ghost"},
	}
	order, err := purgeOrder(tables, edges)
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b"}, order)

	order, err = purgeOrder(nil, edges)
	require.NoError(t, err)
	require.Empty(t, order)
}

func TestPurgeOrderBreaksACycleOnlyAtASoftKey(t *testing.T) {
	t.Parallel()
	// a -> b is hard, b -> a cascades: b may go first, and must, since a
	// cannot precede b.
	tables := []string{"a", "b", "c"}
	edges := []purgeEdge{
		{Child: "a", Parent: "b"},
		{Child: "b", Parent: "a", Soft: true},
		{Child: "c", Parent: "a"},
	}
	order, err := purgeOrder(tables, edges)
	require.NoError(t, err)
	requireChildFirst(t, tables, edges, order)
	require.Equal(t, []string{"c", "a", "b"}, order)

	// Soft both ways: either order is correct; by name.
	order, err = purgeOrder([]string{"y", "x"}, []purgeEdge{
		{Child: "x", Parent: "y", Soft: true}, {Child: "y", Parent: "x", Soft: true},
	})
	require.NoError(t, err)
	require.Equal(t, []string{"x", "y"}, order)

	// A pair with a hard and a soft key the same way is hard.
	order, err = purgeOrder([]string{"p", "q"}, []purgeEdge{
		{Child: "q", Parent: "p", Soft: true}, {Child: "q", Parent: "p"}, {Child: "p", Parent: "q", Soft: true},
	})
	require.NoError(t, err)
	require.Equal(t, []string{"q", "p"}, order)
}

func TestPurgeOrderRefusesAHardCycleNamingItsTables(t *testing.T) {
	t.Parallel()
	tables := []string{"orders", "customers", "invoices", "free", "leaf", "x", "y"}
	edges := []purgeEdge{
		// A three-table hard cycle...
		{Child: "orders", Parent: "customers"},
		{Child: "customers", Parent: "invoices"},
		{Child: "invoices", Parent: "orders"},
		// ...a table hanging off it...
		{Child: "leaf", Parent: "orders"},
		// ...and a second, separate two-table cycle.
		{Child: "x", Parent: "y"},
		{Child: "y", Parent: "x"},
	}
	_, err := purgeOrder(tables, edges)
	require.Error(t, err)
	require.ErrorIs(t, err, ErrRefused, "%v", err)
	require.Contains(t, err.Error(), "[customers, invoices, orders]")
	require.Contains(t, err.Error(), "[x, y]")
	require.NotContains(t, err.Error(), "leaf")
	require.NotContains(t, err.Error(), "free")

	// One soft key anywhere on the cycle breaks it.
	edges[1].Soft = true
	edges[5].Soft = true
	order, err := purgeOrder(tables, edges)
	require.NoError(t, err)
	requireChildFirst(t, tables, edges, order)
}
