// Package executor drives claimed community deletions through the lifecycle
// store: it quiesces and fences the community, enumerates and freezes its
// object-store keys, deletes them chunk by chunk, purges PostgreSQL and the
// cache, verifies absence everywhere and completes the request.
//
// A Runner claims a request, heartbeats its lease while it works and drives
// every runnable stage in order. A resumed claim starts at the request's
// stored stage, so a crash at any point loses at most the unit in flight,
// which is idempotent. Failures are classified: a fail-closed refusal
// (lifecycle.ErrRefused) blocks the request at once; a stale lease stops all
// work with that token; anything else records a retry with exponential
// backoff, which the store turns into a durable block after
// lifecycle.MaxConsecutiveRetries consecutive failures.
//
// Entry points:
//
//   - New builds a Runner from a Config: a lifecycle.Engine over a login
//     that is a member of community_deletion_executor, the ObjectStore and
//     Cache holding the communities' data, and an Owner name.
//   - Runner.Run loops until its context is done; Runner.RunNext takes the
//     oldest claimable request and Runner.RunRequest a given one, each to
//     retention_pending or to a recorded retry or block (ErrRetryScheduled,
//     ErrBlocked). Runner.Health (ErrUnhealthy) reports a database that
//     does not answer or a claim whose lease stopped being renewed.
//   - SummarizeStorage lists a community's prefixes into the storage
//     manifest an operator freezes with its inventory.
//
// A service plugs in its storage through ObjectStore and Cache.
// FileObjectStore and MemoryCache are the reference adapters the demo and
// the tests use; executor/s3store and executor/rediscache are the
// production ones, and executor/storeurl opens either from a URL. Importing
// this package pulls in neither the AWS SDK nor go-redis.
package executor
