package jobs

import "context"

// MigrateSchemaOnly applies only the service's own schema (00001), as it
// ran before it adopted community deletion.
func MigrateSchemaOnly(ctx context.Context, databaseURL string) error {
	return migrate(ctx, databaseURL, 1)
}
