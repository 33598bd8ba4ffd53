-- Deletion requests, their approvals and their unit checkpoints.

-- +goose Up
CREATE TABLE community_deletion_requests (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    community_id uuid NOT NULL REFERENCES communities (id),
    community_host text NOT NULL,
    stage text NOT NULL DEFAULT 'submitted',
    -- Stage at which the current run of consecutive failures started.
    retry_stage text,
    requested_by text NOT NULL,
    reason text,
    schema_manifest jsonb,
    storage_manifest jsonb,
    destructive_storage_manifest jsonb,
    inventory_manifest jsonb,
    inventory_digest bytea,
    inventory_frozen_at timestamptz,
    destructive_storage_frozen_at timestamptz,
    fence_generation bigint,
    lease_owner text,
    lease_generation bigint NOT NULL DEFAULT 0,
    lease_until timestamptz,
    attempts integer NOT NULL DEFAULT 0,
    retry_count integer NOT NULL DEFAULT 0,
    last_error text,
    last_error_at timestamptz,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    blocked_at timestamptz,
    blocked_reason text,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    pre_quiesce_archived_at timestamptz,
    quiescing_started_at timestamptz,
    aborted_by text,
    abort_reason text,
    aborted_at timestamptz,
    completed_at timestamptz,
    CONSTRAINT community_deletion_requests_stage_check CHECK (stage IN (
        'submitted', 'inventoried', 'approved', 'fenced', 'drained', 'bindings_removed',
        'postgres_purged', 'cache_purged', 'logically_verified', 'retention_pending', 'aborted')),
    CONSTRAINT community_deletion_requests_retry_stage_check CHECK (retry_stage IN (
        'submitted', 'inventoried', 'approved', 'fenced', 'drained', 'bindings_removed',
        'postgres_purged', 'cache_purged', 'logically_verified', 'retention_pending', 'aborted')),
    CONSTRAINT community_deletion_requests_requested_by_check
        CHECK (requested_by ~ '[^[:space:]]' AND octet_length(requested_by) <= 512),
    CONSTRAINT community_deletion_requests_inventory_digest_check CHECK (octet_length(inventory_digest) = 32),
    -- Every stage past submitted carries the whole frozen inventory.
    CONSTRAINT community_deletion_requests_inventory_frozen_check CHECK (
        stage IN ('submitted', 'aborted')
        OR (schema_manifest IS NOT NULL AND storage_manifest IS NOT NULL
            AND inventory_manifest IS NOT NULL AND inventory_digest IS NOT NULL
            AND inventory_frozen_at IS NOT NULL)),
    CONSTRAINT community_deletion_requests_destructive_frozen_check
        CHECK ((destructive_storage_manifest IS NULL) = (destructive_storage_frozen_at IS NULL)),
    -- Every stage from fenced on carries the fence generation it runs under.
    CONSTRAINT community_deletion_requests_fence_generation_check CHECK (
        stage IN ('submitted', 'inventoried', 'approved', 'aborted') OR fence_generation IS NOT NULL),
    CONSTRAINT community_deletion_requests_lease_check CHECK (
        (lease_owner IS NULL) = (lease_until IS NULL)
        AND (lease_owner IS NULL OR (lease_owner ~ '[^[:space:]]' AND octet_length(lease_owner) <= 512))),
    CONSTRAINT community_deletion_requests_counters_check CHECK (
        lease_generation >= 0 AND attempts >= 0 AND retry_count >= 0),
    CONSTRAINT community_deletion_requests_blocked_check CHECK ((blocked_at IS NULL) = (blocked_reason IS NULL)),
    CONSTRAINT community_deletion_requests_bounded_text_check CHECK (
        octet_length(last_error) <= 4096 AND octet_length(blocked_reason) <= 4096
        AND octet_length(reason) <= 4096 AND octet_length(abort_reason) <= 4096
        AND octet_length(aborted_by) <= 512),
    CONSTRAINT community_deletion_requests_aborted_check CHECK (
        (stage = 'aborted') = (aborted_at IS NOT NULL)
        AND (stage <> 'aborted' OR (aborted_by IS NOT NULL AND abort_reason IS NOT NULL))),
    CONSTRAINT community_deletion_requests_completed_check CHECK (
        (stage IN ('retention_pending', 'aborted')) = (completed_at IS NOT NULL)),
    -- Approvals reference (id, community_id, inventory_digest) as one key.
    CONSTRAINT community_deletion_requests_approval_key UNIQUE (id, community_id, inventory_digest)
);

-- At most one open (not aborted) request per community; an aborted request stays as audit.
CREATE UNIQUE INDEX community_deletion_requests_one_open_per_community
    ON community_deletion_requests (community_id) WHERE stage <> 'aborted';

-- ClaimNext: runnable, unblocked requests in submission order; due and lease
-- expiry are filtered on the few rows this partial index holds.
CREATE INDEX community_deletion_requests_claimable_idx
    ON community_deletion_requests (created_at, id)
    WHERE blocked_at IS NULL AND stage IN ('approved', 'fenced', 'drained', 'bindings_removed',
        'postgres_purged', 'cache_purged', 'logically_verified');

-- Operator list: newest first, with optional stage and blocked filters.
CREATE INDEX community_deletion_requests_created_idx
    ON community_deletion_requests (created_at DESC, id DESC);
CREATE INDEX community_deletion_requests_stage_created_idx
    ON community_deletion_requests (stage, created_at DESC, id DESC);
CREATE INDEX community_deletion_requests_blocked_created_idx
    ON community_deletion_requests (created_at DESC, id DESC) WHERE blocked_at IS NOT NULL;

CREATE TABLE community_deletion_approvals (
    request_id uuid PRIMARY KEY,
    community_id uuid NOT NULL,
    inventory_digest bytea NOT NULL,
    approved_by text NOT NULL,
    note text,
    approved_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT community_deletion_approvals_request_fkey
        FOREIGN KEY (request_id, community_id, inventory_digest)
        REFERENCES community_deletion_requests (id, community_id, inventory_digest),
    CONSTRAINT community_deletion_approvals_inventory_digest_check CHECK (octet_length(inventory_digest) = 32),
    CONSTRAINT community_deletion_approvals_approved_by_check
        CHECK (approved_by ~ '[^[:space:]]' AND octet_length(approved_by) <= 512),
    CONSTRAINT community_deletion_approvals_note_check CHECK (octet_length(note) <= 4096)
);

CREATE TABLE community_deletion_checkpoints (
    sequence bigserial PRIMARY KEY,
    request_id uuid NOT NULL REFERENCES community_deletion_requests (id),
    stage text NOT NULL,
    unit_key text NOT NULL,
    status text NOT NULL,
    lease_generation bigint NOT NULL,
    attempts integer NOT NULL DEFAULT 1,
    detail jsonb NOT NULL DEFAULT '{}',
    error text,
    started_at timestamptz NOT NULL DEFAULT now(),
    completed_at timestamptz,
    CONSTRAINT community_deletion_checkpoints_unit_key UNIQUE (request_id, stage, unit_key),
    CONSTRAINT community_deletion_checkpoints_stage_check CHECK (stage IN (
        'submitted', 'inventoried', 'approved', 'fenced', 'drained', 'bindings_removed',
        'postgres_purged', 'cache_purged', 'logically_verified', 'retention_pending', 'aborted')),
    CONSTRAINT community_deletion_checkpoints_status_check CHECK (status IN ('started', 'completed', 'failed')),
    CONSTRAINT community_deletion_checkpoints_unit_key_check CHECK (unit_key <> '' AND octet_length(unit_key) <= 512),
    CONSTRAINT community_deletion_checkpoints_attempts_check CHECK (attempts >= 1 AND lease_generation >= 0),
    CONSTRAINT community_deletion_checkpoints_error_check CHECK (octet_length(error) <= 4096),
    CONSTRAINT community_deletion_checkpoints_completed_check
        CHECK ((status = 'completed') = (completed_at IS NOT NULL))
);

CREATE INDEX community_deletion_checkpoints_request_idx
    ON community_deletion_checkpoints (request_id, sequence);

-- +goose Down
DROP TABLE community_deletion_checkpoints;
DROP TABLE community_deletion_approvals;
DROP TABLE community_deletion_requests;
