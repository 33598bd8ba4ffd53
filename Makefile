# Developer and CI entry points. Run from the repository root.
#
# sqlc is pinned in tools/go.mod, a module of its own, so its dependencies stay
# out of the library's go.mod. It needs cgo (a C compiler). golangci-lint is
# pinned in tools/lint/go.mod, a third module, so its dependencies agree with
# neither sqlc's nor the library's.

SQLC := bin/sqlc
GOLANGCI_LINT := bin/golangci-lint

# Generated query files whose sql/queries file is gone: sqlc neither deletes
# nor diffs them.
ORPHANS = $(filter-out $(patsubst sql/queries/%.sql,db/gen/%.sql.go,$(wildcard sql/queries/*.sql)),$(wildcard db/gen/*.sql.go))

.PHONY: sqlc generate sqlc-diff vet golangci-lint lint

# Build bin/sqlc when it is missing or older than the pinned tools module.
sqlc: $(SQLC)

$(SQLC): tools/go.mod tools/go.sum
	cd tools && CGO_ENABLED=1 go build -o ../$(SQLC) github.com/sqlc-dev/sqlc/cmd/sqlc
	@touch $@

# Regenerate db/gen from sqlc.yaml, sql/structure.sql and sql/queries (after
# a new migration, run make structure first).
generate: $(SQLC)
	$(SQLC) generate
	$(if $(ORPHANS),rm -f $(ORPHANS))

# Fail when the committed db/gen differs from what sqlc would generate.
sqlc-diff: $(SQLC)
	@$(SQLC) diff || { echo 'db/gen is stale: run make generate' >&2; exit 1; }
	@$(if $(ORPHANS),echo 'db/gen is stale (no query file for $(ORPHANS)): run make generate' >&2; exit 1)

vet:
	go vet ./...

.PHONY: structure structure-diff migrations-sum migrations-sum-check

# Regenerate sql/structure.sql, the schema as the migrations leave it, from a
# freshly migrated throwaway database (PostgreSQL 15's pg_dump).
structure:
	go run ./internal/structure/cmd/structure

# Fail when the committed sql/structure.sql differs from what the migrations
# produce.
structure-diff:
	@go run ./internal/structure/cmd/structure -check

# Record new migrations (above the newest released one) in sql/migrations.sum.
# It refuses to record an edited, removed, renamed or inserted-below-the-top
# migration: a released migration never changes.
migrations-sum:
	go run ./internal/migrationsum/cmd/migrationsum

# Fail when a released migration changed or a new one is not recorded.
migrations-sum-check:
	@go run ./internal/migrationsum/cmd/migrationsum -check

# Build bin/golangci-lint when it is missing or older than its pinned module.
golangci-lint: $(GOLANGCI_LINT)

$(GOLANGCI_LINT): tools/lint/go.mod tools/lint/go.sum
	cd tools/lint && go build -o ../../$(GOLANGCI_LINT) github.com/golangci/golangci-lint/v2/cmd/golangci-lint
	@touch $@

# Lint the library module with .golangci.yml (formatters included).
lint: $(GOLANGCI_LINT)
	$(GOLANGCI_LINT) run --allow-parallel-runners ./...

# test and demo targets go below.

.PHONY: test test-quick demo bench-fence bench-purge

# Every test: the generated code is current, vet and golangci-lint are clean,
# all packages pass under the race detector against a real PostgreSQL,
# redis-server and S3 gateway (started by the tests themselves), and every
# fuzz target runs for
# FUZZTIME (default 10s). The crash suite and the soaks run verbosely after
# the rest, so that their counts (kill points survived, iterations, the
# seed) show in CI's log.
FUZZTIME ?= 10s
LOUD = ./integration/crash ./integration/soak
QUIET = $(filter-out $(addprefix $(shell go list -m)/,$(LOUD:./%=%)),$(shell go list ./...))

test: migrations-sum-check structure-diff sqlc-diff vet lint
	go test -race -count=1 -timeout 60m $(QUIET)
	go test -race -count=1 -timeout 30m -v $(LOUD)
	FUZZTIME=$(FUZZTIME) bash .ci/fuzz

# The quick local loop (at most 3 minutes on a 2-core machine; about 2.5 today): the same tests
# under go test -short (50 iterations per soak, 10 crash kill points), without
# the race detector or fuzzing, in one go test run that starts the longest
# packages first, so that the short ones fill in beside them.
FIRST = ./integration ./lifecycle
test-quick: migrations-sum-check structure-diff sqlc-diff vet
	go test -short -count=1 -timeout 10m $(FIRST) $(filter-out $(addprefix $(shell go list -m)/,$(FIRST:./%=%)),$(QUIET)) $(LOUD)

# The main job: migrate a throwaway database and report.
demo:
	go run ./cmd/demo

# The write-fence benchmark: fenced against unfenced, side by side.
bench-fence:
	go run ./bench/fence

# The batched purge against one DELETE per table in a single transaction.
bench-purge:
	go run ./bench/purge

.PHONY: bench-storm

# The fence under a storm of 16+16 writers.
bench-storm:
	go run ./bench/storm
