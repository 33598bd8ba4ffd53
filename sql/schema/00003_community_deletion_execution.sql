-- Executor liveness, serving-write leases, the destructive key manifest and
-- fleet-wide storage taxonomy sweeps.

-- +goose Up
CREATE TABLE community_deletion_executor_heartbeats (
    executor_id text PRIMARY KEY,
    mode text NOT NULL,
    request_id uuid REFERENCES community_deletion_requests (id),
    heartbeat_at timestamptz NOT NULL DEFAULT now(),
    draining boolean NOT NULL DEFAULT false,
    stopped_at timestamptz,
    CONSTRAINT community_deletion_executor_heartbeats_executor_id_check
        CHECK (executor_id ~ '[^[:space:]]' AND octet_length(executor_id) <= 512),
    CONSTRAINT community_deletion_executor_heartbeats_mode_check
        CHECK (mode ~ '[^[:space:]]' AND octet_length(mode) <= 512)
);

-- Serving-write lease generations are monotonic across the whole table.
CREATE SEQUENCE community_serving_write_lease_generation_seq AS bigint;

CREATE TABLE community_serving_write_leases (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    community_id uuid NOT NULL REFERENCES communities (id),
    operation text NOT NULL,
    owner text NOT NULL,
    generation bigint NOT NULL DEFAULT nextval('community_serving_write_lease_generation_seq'),
    fence_generation bigint NOT NULL,
    lease_until timestamptz NOT NULL,
    heartbeat_at timestamptz NOT NULL DEFAULT now(),
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT community_serving_write_leases_operation_check
        CHECK (operation ~ '[^[:space:]]' AND octet_length(operation) <= 512),
    CONSTRAINT community_serving_write_leases_owner_check
        CHECK (owner ~ '[^[:space:]]' AND octet_length(owner) <= 512)
);

ALTER SEQUENCE community_serving_write_lease_generation_seq
    OWNED BY community_serving_write_leases.generation;

CREATE INDEX community_serving_write_leases_community_idx
    ON community_serving_write_leases (community_id, lease_until);
CREATE INDEX community_serving_write_leases_lease_until_idx
    ON community_serving_write_leases (lease_until);

-- The frozen destructive key list, in chunks. Working data: dropped once the
-- request is logically verified.
CREATE TABLE community_deletion_manifest_keys (
    request_id uuid NOT NULL REFERENCES community_deletion_requests (id),
    chunk_no bigint NOT NULL,
    prefix text NOT NULL,
    keys jsonb NOT NULL,
    deleted_at timestamptz,
    PRIMARY KEY (request_id, chunk_no),
    CONSTRAINT community_deletion_manifest_keys_chunk_no_check CHECK (chunk_no >= 0),
    CONSTRAINT community_deletion_manifest_keys_prefix_check CHECK (prefix <> ''),
    CONSTRAINT community_deletion_manifest_keys_keys_check
        CHECK (jsonb_typeof(keys) = 'array' AND jsonb_array_length(keys) > 0)
);

CREATE TABLE storage_taxonomy_sweeps (
    id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    started_at timestamptz NOT NULL,
    completed_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    listed_objects bigint NOT NULL,
    unknown_object_count bigint NOT NULL,
    unknown_key_sample jsonb NOT NULL DEFAULT '[]',
    object_cap bigint NOT NULL,
    CONSTRAINT storage_taxonomy_sweeps_counts_check CHECK (
        listed_objects >= 0 AND unknown_object_count >= 0 AND object_cap >= 0
        AND unknown_object_count <= listed_objects),
    CONSTRAINT storage_taxonomy_sweeps_sample_check CHECK (jsonb_typeof(unknown_key_sample) = 'array'),
    CONSTRAINT storage_taxonomy_sweeps_order_check CHECK (started_at <= completed_at)
);

CREATE INDEX storage_taxonomy_sweeps_completed_idx ON storage_taxonomy_sweeps (completed_at DESC);

-- +goose Down
DROP TABLE storage_taxonomy_sweeps;
DROP TABLE community_deletion_manifest_keys;
DROP TABLE community_serving_write_leases;
DROP TABLE community_deletion_executor_heartbeats;
