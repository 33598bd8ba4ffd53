package lifecycle

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	dbgen "github.com/tombstoneworks/communitydeletion/db/gen"
)

// TenantPlaceholder is the one placeholder of a storage layout template:
// ExpandLayout replaces it with the community's id.
const TenantPlaceholder = "{tenant}"

// LayoutKind names what a storage layout template describes.
type LayoutKind string

const (
	// LayoutObjects templates are object-store key prefixes, such as
	// "uploads/{tenant}/".
	LayoutObjects LayoutKind = "objects"
	// LayoutCache templates are cache key patterns, such as "ws:{tenant}:*".
	LayoutCache LayoutKind = "cache"
	// LayoutObjectKeys templates name, as schema.table.column, a text column
	// of a registered table whose values are object keys
	// ("public.active_storage_blobs.key"): a tenant's objects are the keys
	// its rows list there, under names no prefix describes.
	LayoutObjectKeys LayoutKind = "object_keys"
	// LayoutSequence templates name a per-tenant sequence as schema.name
	// ("public.conv_dpid_seq_{tenant}"), which the purge drops.
	LayoutSequence LayoutKind = "sequence"
)

// LayoutTemplate is one declared template of the storage layout.
type LayoutTemplate struct {
	Kind       LayoutKind
	Template   string
	Reason     string
	DeclaredBy string
	DeclaredAt time.Time
}

// StorageLayout is the deployment's declared storage layout: where it keeps
// each tenant's objects and cache keys. The schema's owner declares it in
// community_deletion_storage_layout, whose guard refuses a template that
// does not isolate one tenant; there is no default layout.
type StorageLayout struct {
	// Objects are the declared object-prefix templates, sorted.
	Objects []LayoutTemplate
	// Cache are the declared cache-pattern templates, sorted.
	Cache []LayoutTemplate
	// ObjectKeys are the declared key sources (schema.table.column), sorted.
	ObjectKeys []LayoutTemplate
	// Sequences are the declared per-tenant sequence templates, sorted.
	Sequences []LayoutTemplate
}

// ExpandedLayout is a storage layout expanded for one community.
type ExpandedLayout struct {
	// ObjectPrefixes are the community's object-store prefixes, sorted.
	ObjectPrefixes []string
	// CachePatterns are the community's cache key patterns, sorted.
	CachePatterns []string
}

// StorageLayout returns the declared storage layout (templates declared and
// not retired). An empty layout is not an error here; inventories refuse it
// (RequireObjects).
func (o *Operator) StorageLayout(ctx context.Context) (*StorageLayout, error) {
	var layout *StorageLayout
	err := o.tx(ctx, func(q *dbgen.Queries) error {
		var err error
		layout, err = readStorageLayout(ctx, q)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read the storage layout: %w", err)
	}
	return layout, nil
}

// StorageLayout returns the declared storage layout, as
// Operator.StorageLayout does, for the executor to compare with the stores
// it was configured with.
func (e *Engine) StorageLayout(ctx context.Context) (*StorageLayout, error) {
	var layout *StorageLayout
	err := e.tx(ctx, func(q *dbgen.Queries) error {
		var err error
		layout, err = readStorageLayout(ctx, q)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read the storage layout: %w", err)
	}
	return layout, nil
}

func readStorageLayout(ctx context.Context, q *dbgen.Queries) (*StorageLayout, error) {
	rows, err := q.StorageLayoutDeclared(ctx)
	if err != nil {
		return nil, err
	}
	layout := &StorageLayout{}
	for _, r := range rows {
		t := LayoutTemplate{Kind: LayoutKind(r.Kind), Template: r.Template, Reason: r.Reason, DeclaredBy: r.DeclaredBy, DeclaredAt: r.DeclaredAt}
		switch t.Kind {
		case LayoutObjects:
			layout.Objects = append(layout.Objects, t)
		case LayoutCache:
			layout.Cache = append(layout.Cache, t)
		case LayoutObjectKeys:
			layout.ObjectKeys = append(layout.ObjectKeys, t)
		case LayoutSequence:
			layout.Sequences = append(layout.Sequences, t)
		}
	}
	return layout, nil
}

// RequireObjects refuses (ErrRefused) a layout that declares neither an
// object prefix nor a key source, naming how the deployment declares one.
func (l *StorageLayout) RequireObjects() error {
	if len(l.Objects) == 0 && len(l.ObjectKeys) == 0 {
		return refusef("no storage layout is declared: the deployment declares, as the schema owner, where a tenant's objects are: " +
			"under a per-tenant prefix, INSERT INTO community_deletion.community_deletion_storage_layout (kind, template, reason) VALUES ('objects', 'uploads/{tenant}/', '...'), " +
			"or as keys listed in a column of a registered table, VALUES ('object_keys', 'public.blobs.key', '...') " +
			"(docs/adopting.md, \"Files listed in tables\")")
	}
	return nil
}

// KeySources returns the declared key sources' templates (schema.table.column), sorted.
func (l *StorageLayout) KeySources() []string {
	out := make([]string, 0, len(l.ObjectKeys))
	for _, t := range l.ObjectKeys {
		out = append(out, t.Template)
	}
	slices.Sort(out)
	return out
}

// ExpandLayout expands every template of l for the tenant whose key is
// tenant (for a uuid tenant, UUIDKey of its community id).
func (l *StorageLayout) ExpandLayout(tenant TenantKey) ExpandedLayout {
	var e ExpandedLayout
	for _, t := range l.Objects {
		e.ObjectPrefixes = append(e.ObjectPrefixes, ExpandTemplate(t.Template, tenant))
	}
	for _, t := range l.Cache {
		e.CachePatterns = append(e.CachePatterns, ExpandTemplate(t.Template, tenant))
	}
	slices.Sort(e.ObjectPrefixes)
	slices.Sort(e.CachePatterns)
	return e
}

// ExpandTemplate replaces the template's {tenant} with the tenant's key.
func ExpandTemplate(template string, tenant TenantKey) string {
	return strings.ReplaceAll(template, TenantPlaceholder, tenant.String())
}

// checkDeclaredPrefixes refuses a storage manifest for community whose
// prefixes are not exactly the declared layout's object prefixes. Without a
// declared object layout it checks nothing: the library never assumes one
// (deletionctl inventory refuses instead).
func checkDeclaredPrefixes(layout *StorageLayout, tenant TenantKey, m StorageManifest) error {
	if len(layout.Objects) == 0 && len(layout.ObjectKeys) == 0 {
		return nil
	}
	want := layout.ExpandLayout(tenant).ObjectPrefixes
	got := make([]string, 0, len(m.Prefixes))
	for _, p := range m.Prefixes {
		got = append(got, p.Prefix)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		return refusef("the inventory's storage prefixes %q are not the declared layout's %q for community %s; "+
			"inventory exactly the declared prefixes (deletionctl inventory lists them)", got, want, tenant)
	}
	sources := make([]string, 0, len(m.KeySources))
	for _, k := range m.KeySources {
		sources = append(sources, k.Source)
	}
	if want := layout.KeySources(); !slices.Equal(sources, want) {
		return refusef("the inventory's key sources %q are not the declared layout's %q for community %s; "+
			"inventory exactly the declared key sources (deletionctl inventory lists them)", sources, want, tenant)
	}
	return nil
}
