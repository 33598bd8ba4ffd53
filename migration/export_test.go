package migration

import (
	"context"
	"database/sql"
)

// ProbeVersions runs every legacy probe on db and reports, per version,
// whether all the objects it checks exist.
func ProbeVersions(ctx context.Context, db *sql.DB) (map[int64]bool, error) {
	out := map[int64]bool{}
	for version, checks := range legacyProbes {
		missing, err := probe(ctx, db, checks)
		if err != nil {
			return nil, err
		}
		out[version] = len(missing) == 0
	}
	return out, nil
}
