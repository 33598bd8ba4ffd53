package helpdesk

import "context"

// MigrateSchemaOnly applies only the service's own schema (00001), as it
// ran before it adopted community deletion.
func MigrateSchemaOnly(ctx context.Context, databaseURL string) error {
	return migrate(ctx, databaseURL, 1)
}

// UseBlobKey makes s's next attachments use key as their object key.
func UseBlobKey(s *Service, key string) {
	s.newKey = func() (string, error) { return key, nil }
}
