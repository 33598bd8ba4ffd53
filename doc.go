// Package communitydeletion ships the PostgreSQL half of the community
// deletion lifecycle: the goose migrations that create its tables, and the
// triggers and functions that enforce its invariants inside the database
// (two-person approval bound to a frozen inventory's digest, the write
// fence, monotonic lease generations, append-only evidence, the permanent
// tombstone), whoever connects.
//
// The migrations live in two folders, sql/schema (tables, indexes,
// constraints) and sql/triggers (PL/pgSQL functions and triggers), that share
// one goose version sequence. Migrations returns them merged into the single
// flat directory goose reads; package migration (and cmd/migrate) applies
// them under the exclusive SchemaDestructionLockKey advisory lock, and
// DDLGuard returns the optional event trigger a superuser may install.
//
// The Go half lives in the subpackages: lifecycle (the clients of the three
// deployment roles: Operator, Serving, Engine), executor (the runtime that
// drives a claimed deletion to its end) with its adapters executor/s3store,
// executor/rediscache and executor/storeurl, and migration.
package communitydeletion
