-- The tables and columns that least privilege needs: who submitted and who
-- approved as database roles, the deployment's audited settings, the digests
-- of the functions the migrations installed, the purge's working progress
-- (so that checkpoints can be append-only evidence) and bounded leases.

-- +goose Up
-- The database roles (session_user) of submitter and approver: the two-person
-- rule compares these. The free-text names stay, for humans. Requests and
-- approvals written before this migration have none.
ALTER TABLE community_deletion_requests ADD COLUMN requested_by_role name;
ALTER TABLE community_deletion_approvals ADD COLUMN approved_by_role name;

-- Who registered a tenant table (session_user of the attach).
ALTER TABLE community_scoped_tables ADD COLUMN registered_by name;

-- The deployment's settings, append-only: the newest row is in force and the
-- older ones are its audit trail. Only the owner of the schema writes it.
CREATE TABLE community_deletion_settings (
    sequence bigserial PRIMARY KEY,
    -- Whether submitter and approver may be the same database role (a
    -- deployment whose operators share one login). Off by default.
    operators_share_role boolean NOT NULL,
    reason text NOT NULL,
    changed_by name NOT NULL DEFAULT session_user,
    changed_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT community_deletion_settings_reason_check
        CHECK (reason ~ '[^[:space:]]' AND octet_length(reason) <= 4096)
);

INSERT INTO community_deletion_settings (operators_share_role, reason)
VALUES (false, 'installed: submitter and approver must be different database roles');

-- The digest of every function the migrations installed, recorded by the
-- migrations themselves; the drift report flags a function that differs.
CREATE TABLE community_deletion_function_digests (
    function_signature text PRIMARY KEY,
    digest text NOT NULL,
    recorded_at timestamptz NOT NULL DEFAULT now()
);

-- Steps the owner of the schema authorizes for one transaction, through a
-- SECURITY DEFINER function that writes the row, performs the step and
-- deletes the row again (an operator's abort restoring its community). Only
-- the owner writes it; a guard trusts a row only of its own transaction.
CREATE TABLE community_deletion_step_authorizations (
    transaction_id xid8 NOT NULL DEFAULT pg_current_xact_id(),
    community_id uuid NOT NULL,
    step text NOT NULL,
    authorized_by name NOT NULL DEFAULT session_user,
    PRIMARY KEY (transaction_id, community_id, step)
);

-- The purge's progress per table: working data the purge rewrites after
-- every batch, so that a resumed purge knows where it stands. The evidence
-- is the completed checkpoint each table gets once, when it is done.
CREATE TABLE community_deletion_purge_progress (
    request_id uuid NOT NULL REFERENCES community_deletion_requests (id),
    unit_key text NOT NULL,
    row_count bigint NOT NULL,
    done boolean NOT NULL,
    lease_generation bigint NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (request_id, unit_key),
    CONSTRAINT community_deletion_purge_progress_unit_key_check
        CHECK (unit_key <> '' AND octet_length(unit_key) <= 512),
    CONSTRAINT community_deletion_purge_progress_counts_check CHECK (row_count >= 0 AND lease_generation >= 0)
);

INSERT INTO community_deletion_purge_progress (request_id, unit_key, row_count, done, lease_generation, updated_at)
SELECT c.request_id, c.unit_key, coalesce((c.detail ->> 'rows')::bigint, 0),
       coalesce((c.detail ->> 'done')::boolean, false), c.lease_generation, c.completed_at
FROM community_deletion_checkpoints c
WHERE c.status = 'completed' AND c.stage = 'bindings_removed'
  AND (c.unit_key LIKE 'purge:%' OR c.unit_key LIKE 'nullify:%');
DELETE FROM community_deletion_checkpoints c
WHERE c.status = 'completed' AND c.stage = 'bindings_removed'
  AND (c.unit_key LIKE 'purge:%' OR c.unit_key LIKE 'nullify:%')
  AND coalesce((c.detail ->> 'done')::boolean, false) IS NOT TRUE;

-- Checkpoints become append-only: every failure is a row of its own, and a
-- unit completes at most once.
ALTER TABLE community_deletion_checkpoints DROP CONSTRAINT community_deletion_checkpoints_unit_key;
CREATE UNIQUE INDEX community_deletion_checkpoints_completed_unit_key
    ON community_deletion_checkpoints (request_id, stage, unit_key) WHERE status = 'completed';
CREATE INDEX community_deletion_checkpoints_unit_idx
    ON community_deletion_checkpoints (request_id, stage, unit_key);

-- Leases are bounded: no serving write lease outlives an hour from its last
-- heartbeat (the guard sets heartbeat_at to the database clock), and no
-- executor lease an hour from its last renewal (the request guard checks
-- that). Longer leases already granted are cut back to the bound.
UPDATE community_serving_write_leases
SET lease_until = heartbeat_at + interval '1 hour'
WHERE lease_until > heartbeat_at + interval '1 hour';
ALTER TABLE community_serving_write_leases ADD CONSTRAINT community_serving_write_leases_lease_bound_check
    CHECK (lease_until <= heartbeat_at + interval '1 hour');
UPDATE community_deletion_requests
SET lease_until = now() + interval '1 hour'
WHERE lease_until > now() + interval '1 hour';

-- +goose Down
ALTER TABLE community_serving_write_leases DROP CONSTRAINT community_serving_write_leases_lease_bound_check;

-- One row per unit again: a unit's completed row if it has one, else its
-- newest, counting every attempt.
WITH ranked AS (
    SELECT c.sequence,
           row_number() OVER (PARTITION BY c.request_id, c.stage, c.unit_key
                              ORDER BY (c.status = 'completed') DESC, c.sequence DESC) AS rank,
           sum(c.attempts) OVER (PARTITION BY c.request_id, c.stage, c.unit_key) AS total
    FROM community_deletion_checkpoints c
), dropped AS (
    DELETE FROM community_deletion_checkpoints c
    USING ranked WHERE ranked.sequence = c.sequence AND ranked.rank > 1
)
UPDATE community_deletion_checkpoints c
SET attempts = ranked.total
FROM ranked
WHERE ranked.sequence = c.sequence AND ranked.rank = 1 AND ranked.total > c.attempts;
DROP INDEX community_deletion_checkpoints_unit_idx;
DROP INDEX community_deletion_checkpoints_completed_unit_key;
ALTER TABLE community_deletion_checkpoints
    ADD CONSTRAINT community_deletion_checkpoints_unit_key UNIQUE (request_id, stage, unit_key);

INSERT INTO community_deletion_checkpoints
    (request_id, stage, unit_key, status, lease_generation, detail, completed_at)
SELECT p.request_id, 'bindings_removed', p.unit_key, 'completed', p.lease_generation,
       jsonb_build_object('rows', p.row_count, 'done', p.done), p.updated_at
FROM community_deletion_purge_progress p
ON CONFLICT (request_id, stage, unit_key) DO NOTHING;
DROP TABLE community_deletion_purge_progress;

DROP TABLE community_deletion_step_authorizations;
DROP TABLE community_deletion_function_digests;
DROP TABLE community_deletion_settings;
ALTER TABLE community_scoped_tables DROP COLUMN registered_by;
ALTER TABLE community_deletion_approvals DROP COLUMN approved_by_role;
ALTER TABLE community_deletion_requests DROP COLUMN requested_by_role;
