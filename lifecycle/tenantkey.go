package lifecycle

import (
	"strconv"

	"github.com/google/uuid"
)

// TenantKey is a tenant's key in the service's own terms: the value of the
// declared tenant table's key column (a uuid, an integer or a text id), as
// the database writes it as text. A uuid tenant's key is its community id.
// Build one with UUIDKey, IntKey or TextKey; the zero value names no tenant.
type TenantKey string

// UUIDKey is the key of a tenant keyed by a uuid: its community id.
func UUIDKey(id uuid.UUID) TenantKey { return TenantKey(id.String()) }

// IntKey is the key of a tenant keyed by smallint, integer or bigint.
func IntKey(id int64) TenantKey { return TenantKey(strconv.FormatInt(id, 10)) }

// TextKey is the key of a tenant keyed by text or varchar.
func TextKey(id string) TenantKey { return TenantKey(id) }

// String returns the key's text.
func (k TenantKey) String() string { return string(k) }

// tenantKeyOf returns the tenant key of a community from its id and its
// recorded key text (nil for a uuid tenant, whose key is its id).
func tenantKeyOf(id uuid.UUID, recorded *string) TenantKey {
	if recorded != nil && *recorded != "" {
		return TenantKey(*recorded)
	}
	return UUIDKey(id)
}

// tenantKey is the token's tenant key, its community id when it carries
// none (a uuid tenant, or a token built by hand).
func (t LeaseToken) tenantKey() string {
	if t.TenantKey != "" {
		return string(t.TenantKey)
	}
	return t.CommunityID.String()
}
