package integration

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/migration"
)

// Migration 00039 changes the bits path 0 of a bound fence compares with
// the fence marker (docs/invariants.md, "A community's bits cover every way
// a path computes one"). A deployment that upgrades while a tenant is
// fenced has a marker that migration 00038's arming trigger set, with the
// tenant's uuid bit only. The upgrade ORs in the tenant's new bits under
// the marker's lock, so the new fence still refuses the tenant's writes.
// The broken variant puts the marker back as 00038 left it, which is what
// an upgrade without that step would leave: the new fence then admits a
// row of the fenced tenant on path 0, from the service's login and from
// the table's owner alike.
func TestFenceKeyBitsUpgradeKeepsATenantInFlightFenced(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"bigint", "uuid"} {
		for _, broken := range []bool{false, true} {
			name := kind
			if broken {
				name += ", an upgrade that leaves the marker as it was"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				ctx := t.Context()
				b, owner, serving, table, column, key := bitsDeployment(t, kind)
				migrator, err := migration.Open(ctx, b.url)
				require.NoError(t, err)
				defer migrator.Close()
				_, err = migrator.DownTo(ctx, 38)
				require.NoError(t, err)

				b.walkTenant(t, 2, "fenced")
				before := marker(t, b)
				var uuidBit int64
				require.NoError(t, b.pool.QueryRow(ctx, "SELECT community_deletion.community_deletion_fence_bit($1)", tenantUUID(2)).Scan(&uuidBit))
				require.Equal(t, uuidBit, before, "migration 00038 set the tenant's uuid bit only")

				_, err = migrator.Up(ctx)
				require.NoError(t, err)
				require.Equal(t, fenceBits(t, b, 2), marker(t, b), "the upgrade adds the tenant's key bits")
				require.Equal(t, before, marker(t, b)&before, "and keeps the uuid bit an old fence reads")
				require.NotEqual(t, before, fenceBits(t, b, 2), "the tenant's key bits are not its uuid bit")
				require.Zero(t, fenceBits(t, b, 1)&fenceBits(t, b, 2), "the test's tenants need bits of their own")
				if broken {
					_, err := b.pool.Exec(ctx, "SELECT setval('community_deletion.community_deletion_fence_marker', $1)", before)
					require.NoError(t, err)
				}

				// The service's login and the login that owns the table,
				// which no trigger exempts; it writes as a member of
				// community_deletion_serving, as docs/roles.md says every
				// writer must be (outside it, the fence refuses with 42501).
				require.NoError(t, b.exec(t, "GRANT community_deletion_serving TO "+owner.name))
				insert := fmt.Sprintf("INSERT INTO %s (%s, body) VALUES ($1, 'late')", table, column)
				_, err = serving.Exec(ctx, insert, key(2))
				_, ownerErr := owner.conn.Exec(ctx, insert, key(2))
				if broken {
					require.NoError(t, err, "a marker without the key bits lets the new fence admit the fenced tenant's row")
					require.NoError(t, ownerErr, "and the owner's")
					return
				}
				requireSQLState(t, err, sqlstateFenced, "is fenced")
				requireSQLState(t, ownerErr, sqlstateFenced, "is fenced")
				_, err = serving.Exec(ctx, insert, key(1))
				require.NoError(t, err, "an active tenant whose bits the marker lacks is admitted")
			})
		}
	}
}
