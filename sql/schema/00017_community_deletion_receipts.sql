-- Deletion receipts (docs/receipts.md): one signed, chained receipt per
-- completed deletion, stored append-only. The executor writes a request's
-- receipt in the transaction that moves it to retention_pending; a deferred
-- constraint trigger refuses, at commit, a completion without one, and
-- UNIQUE (request_id) refuses a second, so a crash between completion and
-- receipt cannot happen: both commit or neither does.
--
-- The body is the receipt's canonical bytes, kept as text exactly as signed
-- (never jsonb, which reorders keys); body_sha256 is the hash the next
-- receipt chains to. The guard keeps the chain contiguous and each row's
-- columns in agreement with its body; it does not verify signatures, which
-- is the auditor's job (deletionctl receipt verify), offline.

-- +goose Up
CREATE TABLE community_deletion_receipts (
    sequence bigint PRIMARY KEY CHECK (sequence >= 1),
    request_id uuid NOT NULL UNIQUE REFERENCES community_deletion_requests (id),
    body text NOT NULL CHECK (octet_length(body) <= 1048576),
    body_sha256 text NOT NULL,
    previous_sha256 text CHECK (previous_sha256 ~ '^[0-9a-f]{64}$'),
    signature text NOT NULL CHECK (signature = '' OR signature ~ '^[A-Za-z0-9+/]{86}==$'),
    signer text NOT NULL CHECK (signer = 'unsigned' OR signer ~ '^[0-9a-f]{16}$'),
    created_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT community_deletion_receipts_body_sha256_check CHECK (body_sha256 = encode(sha256(convert_to(body, 'UTF8')), 'hex')),
    CONSTRAINT community_deletion_receipts_chain_check CHECK ((sequence = 1) = (previous_sha256 IS NULL)),
    CONSTRAINT community_deletion_receipts_unsigned_check CHECK ((signature = '') = (signer = 'unsigned'))
);

-- +goose StatementBegin
-- Guards community_deletion_receipts: receipts are append-only for every
-- role, the owner included (23000). An insert needs a member of
-- community_deletion_executor (42501), a request at retention_pending
-- (55000), the next place in the chain (sequence 1 into an empty table, else
-- after the row sequence - 1 whose body_sha256 is previous_sha256), and a
-- body whose format, request_id, community, sequence, previous_hash and
-- signer agree with the columns and the request (23000).
CREATE OR REPLACE FUNCTION enforce_community_deletion_receipt_guard() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    AS $$
DECLARE
    request_stage text;
    request_community uuid;
    previous text;
    body jsonb;
BEGIN
    IF TG_OP <> 'INSERT' THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('deletion receipt %s of deletion %s refused: receipts are append-only', OLD.sequence, OLD.request_id);
    END IF;
    PERFORM community_deletion_require_member(ARRAY['community_deletion_executor']::name[],
                                              format('receipt %s of deletion %s', NEW.sequence, NEW.request_id));
    SELECT r.stage, r.community_id INTO request_stage, request_community
    FROM community_deletion_requests r WHERE r.id = NEW.request_id;
    IF request_stage IS DISTINCT FROM 'retention_pending' THEN
        RAISE EXCEPTION USING ERRCODE = '55000',
            MESSAGE = format('receipt of deletion %s refused: the deletion is %s, not retention_pending; a receipt is written as the deletion completes',
                             NEW.request_id, coalesce(request_stage, 'missing'));
    END IF;
    IF NEW.sequence = 1 THEN
        IF EXISTS (SELECT 1 FROM community_deletion_receipts) THEN
            RAISE EXCEPTION USING ERRCODE = '23000',
                MESSAGE = format('receipt 1 of deletion %s refused: the chain already has a first receipt', NEW.request_id);
        END IF;
    ELSE
        SELECT p.body_sha256 INTO previous FROM community_deletion_receipts p WHERE p.sequence = NEW.sequence - 1;
        IF previous IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = '23000',
                MESSAGE = format('receipt %s of deletion %s refused: receipt %s does not exist; the chain has no gaps',
                                 NEW.sequence, NEW.request_id, NEW.sequence - 1);
        END IF;
        IF previous IS DISTINCT FROM NEW.previous_sha256 THEN
            RAISE EXCEPTION USING ERRCODE = '23000',
                MESSAGE = format('receipt %s of deletion %s refused: previous_sha256 %s is not %s, the hash of receipt %s',
                                 NEW.sequence, NEW.request_id, coalesce(NEW.previous_sha256, '(none)'), previous, NEW.sequence - 1);
        END IF;
    END IF;
    BEGIN
        body := NEW.body::jsonb;
    EXCEPTION WHEN invalid_text_representation THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('receipt %s of deletion %s refused: its body is not JSON', NEW.sequence, NEW.request_id);
    END;
    IF jsonb_typeof(body) IS DISTINCT FROM 'object'
       OR body ->> 'format' IS DISTINCT FROM 'communitydeletion.receipt/v1'
       OR body ->> 'request_id' IS DISTINCT FROM NEW.request_id::text
       OR body -> 'community' ->> 'id' IS DISTINCT FROM request_community::text
       OR jsonb_typeof(body -> 'sequence') IS DISTINCT FROM 'number'
       OR body ->> 'sequence' IS DISTINCT FROM NEW.sequence::text
       OR body ->> 'previous_hash' IS DISTINCT FROM coalesce(NEW.previous_sha256, '')
       OR body ->> 'signer' IS DISTINCT FROM NEW.signer THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('receipt %s of deletion %s refused: its body''s format, request_id, community, sequence, previous_hash or signer disagree with the row',
                             NEW.sequence, NEW.request_id);
    END IF;
    NEW.created_at := now();
    RETURN NEW;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The deferred check that a request moved to retention_pending in a
-- transaction has its receipt when the transaction commits (23000): a
-- completion and its receipt commit together or not at all.
CREATE OR REPLACE FUNCTION enforce_community_deletion_receipt_required() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    AS $$
BEGIN
    IF OLD.stage IS DISTINCT FROM 'retention_pending' AND NEW.stage = 'retention_pending'
       AND NOT EXISTS (SELECT 1 FROM community_deletion_receipts r WHERE r.request_id = NEW.id) THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = format('completion of deletion %s refused: it has no receipt; write the receipt in the transaction that completes the deletion', NEW.id);
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- The head of the receipt chain, for the executor writing the next receipt:
-- the newest receipt's sequence and body_sha256 (0 and NULL when there is
-- none) and the highest schema version the migration job recorded as
-- applied. It first takes a transaction-scoped advisory lock on a fixed key,
-- so concurrent completions queue for the head instead of colliding on it;
-- the primary key and the guard keep the chain correct without the lock.
-- SECURITY DEFINER: the executor cannot read the version table.
CREATE OR REPLACE FUNCTION community_deletion_receipt_chain_head()
    RETURNS TABLE (sequence bigint, body_sha256 text, schema_version bigint)
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(8242555388204445233);
    IF to_regclass('community_deletion_schema_migrations') IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '55000',
            MESSAGE = 'receipt chain head refused: community_deletion_schema_migrations is missing, so the schema version is unknown; migrate with the migration job';
    END IF;
    RETURN QUERY
    SELECT coalesce(h.sequence, 0), h.body_sha256,
           (SELECT max(m.version_id) FROM community_deletion_schema_migrations m WHERE m.is_applied)
    FROM (SELECT 1) one
    LEFT JOIN LATERAL (SELECT r.sequence, r.body_sha256 FROM community_deletion_receipts r
                       ORDER BY r.sequence DESC LIMIT 1) h ON true;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER community_deletion_receipts_guard
    BEFORE INSERT OR UPDATE OR DELETE ON community_deletion_receipts
    FOR EACH ROW EXECUTE FUNCTION enforce_community_deletion_receipt_guard();
CREATE TRIGGER community_deletion_receipts_truncate_guard
    BEFORE TRUNCATE ON community_deletion_receipts
    FOR EACH STATEMENT EXECUTE FUNCTION refuse_community_deletion_truncate();
CREATE CONSTRAINT TRIGGER community_deletion_requests_receipt_required
    AFTER UPDATE ON community_deletion_requests
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW
    WHEN (OLD.stage IS DISTINCT FROM 'retention_pending' AND NEW.stage = 'retention_pending')
    EXECUTE FUNCTION enforce_community_deletion_receipt_required();

GRANT SELECT, INSERT ON community_deletion_receipts TO community_deletion_executor;
GRANT SELECT ON community_deletion_receipts TO community_deletion_operator;

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion_control_table(table_name text) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
        SELECT coalesce(table_name = ANY (ARRAY[
            'communities',
            'community_deletion_approvals',
            'community_deletion_checkpoints',
            'community_deletion_created_roles',
            'community_deletion_executor_heartbeats',
            'community_deletion_function_digests',
            'community_deletion_manifest_keys',
            'community_deletion_protection_events',
            'community_deletion_purge_progress',
            'community_deletion_receipts',
            'community_deletion_requests',
            'community_deletion_settings',
            'community_deletion_step_authorizations',
            'community_scoped_tables',
            'community_serving_write_leases',
            'storage_taxonomy_sweeps']), false)
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion_guard_triggers()
    RETURNS TABLE (table_name text, trigger_name text, function_signature text)
    LANGUAGE sql IMMUTABLE
    AS $$
        VALUES
            ('communities', 'communities_tombstone_guard', 'enforce_community_tombstone()'),
            ('communities', 'communities_tombstone_proof', 'enforce_community_tombstone_proof()'),
            ('communities', 'communities_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('communities', 'communities_grace_fence_guard', 'enforce_community_deletion_grace_fence()'),
            ('community_deletion_requests', 'community_deletion_requests_guard', 'enforce_community_deletion_request_guard()'),
            ('community_deletion_requests', 'community_deletion_requests_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('community_deletion_requests', 'community_deletion_requests_protection_guard', 'enforce_community_deletion_protection_submit()'),
            ('community_deletion_requests', 'community_deletion_requests_receipt_required', 'enforce_community_deletion_receipt_required()'),
            ('community_deletion_approvals', 'community_deletion_approvals_guard', 'enforce_community_deletion_approval_guard()'),
            ('community_deletion_approvals', 'community_deletion_approvals_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('community_deletion_approvals', 'community_deletion_approvals_grace_period', 'enforce_community_deletion_grace_period()'),
            ('community_deletion_checkpoints', 'community_deletion_checkpoints_guard', 'enforce_community_deletion_checkpoint_guard()'),
            ('community_deletion_checkpoints', 'community_deletion_checkpoints_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('community_deletion_manifest_keys', 'community_deletion_manifest_keys_guard', 'enforce_community_deletion_manifest_key_guard()'),
            ('community_deletion_manifest_keys', 'community_deletion_manifest_keys_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('community_serving_write_leases', 'community_serving_write_leases_guard', 'enforce_community_serving_write_lease_guard()'),
            ('community_serving_write_leases', 'community_serving_write_leases_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('community_scoped_tables', 'community_scoped_tables_guard', 'enforce_community_scoped_table_guard()'),
            ('community_scoped_tables', 'community_scoped_tables_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('community_deletion_settings', 'community_deletion_settings_guard', 'enforce_community_deletion_settings_guard()'),
            ('community_deletion_settings', 'community_deletion_settings_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('community_deletion_protection_events', 'community_deletion_protection_events_guard', 'enforce_community_deletion_protection_guard()'),
            ('community_deletion_protection_events', 'community_deletion_protection_events_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('community_deletion_receipts', 'community_deletion_receipts_guard', 'enforce_community_deletion_receipt_guard()'),
            ('community_deletion_receipts', 'community_deletion_receipts_truncate_guard', 'refuse_community_deletion_truncate()')
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion_installed_functions() RETURNS text[]
    LANGUAGE sql IMMUTABLE
    AS $$
        SELECT ARRAY[
            'assert_community_write_allowed(uuid)',
            'attach_community_write_fence(regclass,text)',
            'community_deletion_catalog_drift()',
            'community_deletion_control_table(text)',
            'community_deletion_default_grace_period()',
            'community_deletion_fenced(oid)',
            'community_deletion_function_digest(oid)',
            'community_deletion_guard_triggers()',
            'community_deletion_health()',
            'community_deletion_installed_functions()',
            'community_deletion_is_member(name)',
            'community_deletion_lock_holders(bigint)',
            'community_deletion_lock_key(uuid)',
            'community_deletion_next_stage(text)',
            'community_deletion_operators_share_role()',
            'community_deletion_protection_state(uuid)',
            'community_deletion_purge_pressure()',
            'community_deletion_receipt_chain_head()',
            'community_deletion_register_table(regclass,text)',
            'community_deletion_require_member(name[],text)',
            'community_deletion_restore_active(uuid,timestamptz)',
            'community_deletion_seal_functions()',
            'community_deletion_stage_order()',
            'community_deletion_stage_runnable(text)',
            'community_deletion_step_authorized(uuid,text)',
            'community_deletion_unregister_table(text)',
            'community_schema_destruction_lock_key()',
            'community_write_allowed(uuid)',
            'community_write_fence_excluded_table(text)',
            'detach_community_write_fence(regclass)',
            'enforce_community_deletion_approval_guard()',
            'enforce_community_deletion_checkpoint_guard()',
            'enforce_community_deletion_grace_fence()',
            'enforce_community_deletion_grace_period()',
            'enforce_community_deletion_manifest_key_guard()',
            'enforce_community_deletion_protection_guard()',
            'enforce_community_deletion_protection_submit()',
            'enforce_community_deletion_receipt_guard()',
            'enforce_community_deletion_receipt_required()',
            'enforce_community_deletion_request_guard()',
            'enforce_community_deletion_settings_guard()',
            'enforce_community_scoped_table_guard()',
            'enforce_community_serving_write_lease_guard()',
            'enforce_community_tombstone()',
            'enforce_community_tombstone_proof()',
            'enforce_community_write_fence()',
            'refuse_community_deletion_truncate()'
        ]
    $$;
-- +goose StatementEnd

SELECT community_deletion_seal_functions();
GRANT EXECUTE ON FUNCTION community_deletion_receipt_chain_head() TO community_deletion_executor;

-- +goose Down
DROP TRIGGER community_deletion_requests_receipt_required ON community_deletion_requests;
DROP TABLE community_deletion_receipts;
DROP FUNCTION community_deletion_receipt_chain_head();
DROP FUNCTION enforce_community_deletion_receipt_required();
DROP FUNCTION enforce_community_deletion_receipt_guard();

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion_control_table(table_name text) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$
        SELECT coalesce(table_name = ANY (ARRAY[
            'communities',
            'community_deletion_approvals',
            'community_deletion_checkpoints',
            'community_deletion_created_roles',
            'community_deletion_executor_heartbeats',
            'community_deletion_function_digests',
            'community_deletion_manifest_keys',
            'community_deletion_protection_events',
            'community_deletion_purge_progress',
            'community_deletion_requests',
            'community_deletion_settings',
            'community_deletion_step_authorizations',
            'community_scoped_tables',
            'community_serving_write_leases',
            'storage_taxonomy_sweeps']), false)
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion_guard_triggers()
    RETURNS TABLE (table_name text, trigger_name text, function_signature text)
    LANGUAGE sql IMMUTABLE
    AS $$
        VALUES
            ('communities', 'communities_tombstone_guard', 'enforce_community_tombstone()'),
            ('communities', 'communities_tombstone_proof', 'enforce_community_tombstone_proof()'),
            ('communities', 'communities_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('communities', 'communities_grace_fence_guard', 'enforce_community_deletion_grace_fence()'),
            ('community_deletion_requests', 'community_deletion_requests_guard', 'enforce_community_deletion_request_guard()'),
            ('community_deletion_requests', 'community_deletion_requests_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('community_deletion_requests', 'community_deletion_requests_protection_guard', 'enforce_community_deletion_protection_submit()'),
            ('community_deletion_approvals', 'community_deletion_approvals_guard', 'enforce_community_deletion_approval_guard()'),
            ('community_deletion_approvals', 'community_deletion_approvals_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('community_deletion_approvals', 'community_deletion_approvals_grace_period', 'enforce_community_deletion_grace_period()'),
            ('community_deletion_checkpoints', 'community_deletion_checkpoints_guard', 'enforce_community_deletion_checkpoint_guard()'),
            ('community_deletion_checkpoints', 'community_deletion_checkpoints_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('community_deletion_manifest_keys', 'community_deletion_manifest_keys_guard', 'enforce_community_deletion_manifest_key_guard()'),
            ('community_deletion_manifest_keys', 'community_deletion_manifest_keys_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('community_serving_write_leases', 'community_serving_write_leases_guard', 'enforce_community_serving_write_lease_guard()'),
            ('community_serving_write_leases', 'community_serving_write_leases_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('community_scoped_tables', 'community_scoped_tables_guard', 'enforce_community_scoped_table_guard()'),
            ('community_scoped_tables', 'community_scoped_tables_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('community_deletion_settings', 'community_deletion_settings_guard', 'enforce_community_deletion_settings_guard()'),
            ('community_deletion_settings', 'community_deletion_settings_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('community_deletion_protection_events', 'community_deletion_protection_events_guard', 'enforce_community_deletion_protection_guard()'),
            ('community_deletion_protection_events', 'community_deletion_protection_events_truncate_guard', 'refuse_community_deletion_truncate()')
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion_installed_functions() RETURNS text[]
    LANGUAGE sql IMMUTABLE
    AS $$
        SELECT ARRAY[
            'assert_community_write_allowed(uuid)',
            'attach_community_write_fence(regclass,text)',
            'community_deletion_catalog_drift()',
            'community_deletion_control_table(text)',
            'community_deletion_default_grace_period()',
            'community_deletion_fenced(oid)',
            'community_deletion_function_digest(oid)',
            'community_deletion_guard_triggers()',
            'community_deletion_health()',
            'community_deletion_installed_functions()',
            'community_deletion_is_member(name)',
            'community_deletion_lock_holders(bigint)',
            'community_deletion_lock_key(uuid)',
            'community_deletion_next_stage(text)',
            'community_deletion_operators_share_role()',
            'community_deletion_protection_state(uuid)',
            'community_deletion_purge_pressure()',
            'community_deletion_register_table(regclass,text)',
            'community_deletion_require_member(name[],text)',
            'community_deletion_restore_active(uuid,timestamptz)',
            'community_deletion_seal_functions()',
            'community_deletion_stage_order()',
            'community_deletion_stage_runnable(text)',
            'community_deletion_step_authorized(uuid,text)',
            'community_deletion_unregister_table(text)',
            'community_schema_destruction_lock_key()',
            'community_write_allowed(uuid)',
            'community_write_fence_excluded_table(text)',
            'detach_community_write_fence(regclass)',
            'enforce_community_deletion_approval_guard()',
            'enforce_community_deletion_checkpoint_guard()',
            'enforce_community_deletion_grace_fence()',
            'enforce_community_deletion_grace_period()',
            'enforce_community_deletion_manifest_key_guard()',
            'enforce_community_deletion_protection_guard()',
            'enforce_community_deletion_protection_submit()',
            'enforce_community_deletion_request_guard()',
            'enforce_community_deletion_settings_guard()',
            'enforce_community_scoped_table_guard()',
            'enforce_community_serving_write_lease_guard()',
            'enforce_community_tombstone()',
            'enforce_community_tombstone_proof()',
            'enforce_community_write_fence()',
            'refuse_community_deletion_truncate()'
        ]
    $$;
-- +goose StatementEnd

SELECT community_deletion_seal_functions();
