// Package rediscache is an executor.Cache over Redis (a single server or a
// Redis Cluster) through go-redis, for a configurable key layout: one or
// more key patterns per community (see Pattern).
//
// A pattern names one key family of a community: "{community}" is the
// community's id, "{{community}}" the id inside a Redis Cluster hash tag,
// and a final "*" any suffix (without it the pattern is one key). Glob
// characters elsewhere are escaped, so a pattern never matches another
// community's keys or a family that merely starts alike.
//
// Purge walks each pattern with SCAN MATCH … COUNT n on every master and
// removes what it finds with UNLINK, in bounded batches. Empty walks the same
// SCANs to cursor 0 on every master and reports false at the first key it
// finds. Both fail with ErrServerRestarted when a server restarted while they
// walked it (its run_id changed): a SCAN cursor proves nothing across a
// restart.
//
// New wraps a client the service already has (*redis.Client or
// *redis.ClusterClient); Open builds one from a Config and OpenURL from a
// redis://, rediss://, redis+cluster:// or rediss+cluster:// URL with one
// pattern= parameter per family (ParseURL). URL errors are *URLError values
// matching ErrInvalidURL and never show the password.
package rediscache
