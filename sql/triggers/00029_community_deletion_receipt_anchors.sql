-- Receipts anchored at both ends and signed by the key the deployment
-- registered (issue 23; docs/receipts.md).
--
-- * community_deletion_receipt_keys is the deployment's record of how its
--   receipts are signed: an append-only registry, written only by the
--   schema's owner, whose newest row says either "sign with this key"
--   (action 'sign', the Ed25519 public key and its key id) or "this
--   deployment runs unsigned" (action 'unsigned'), with why, who and when.
--   With no row, receipts are signed or not as the executor's key says.
-- * The chain holds a second kind of entry: a key rotation (kind
--   'rotation', no request), signed by the key that signed the chain so
--   far, naming the key the registry now names (or unsigned). So one
--   verification follows a chain across its rotations from its first key.
-- * The receipts guard now also refuses a deletion receipt signed otherwise
--   than the registry says, and one whose signer is not the key the chain
--   is at (the newest entry's signer, or the key a rotation named) unless
--   that was unsigned: an unsigned receipt never follows a signed one, and
--   a new key never signs without a rotation, except once after the owner
--   registered the new key with previous_key_lost (the chain then breaks
--   visibly, and is verified in two ranges). It accepts only receipts of
--   format communitydeletion.receipt/v2, which say per store what was
--   checked; format 1 receipts already stored stay and still verify.
--
-- Down refuses while a rotation is recorded, which earlier releases cannot
-- hold.

-- +goose Up
CREATE TABLE community_deletion.community_deletion_receipt_keys (
    sequence bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    action text NOT NULL CHECK (action IN ('sign', 'unsigned')),
    key_id text CHECK (key_id ~ '^[0-9a-f]{16}$'),
    public_key text CHECK (public_key ~ '^[A-Za-z0-9+/]{43}=$'),
    previous_key_lost boolean NOT NULL DEFAULT false,
    reason text NOT NULL CHECK (btrim(reason) <> '' AND octet_length(reason) <= 1024),
    declared_by name NOT NULL DEFAULT session_user,
    declared_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT community_deletion_receipt_keys_key_check
        CHECK ((action = 'sign') = (key_id IS NOT NULL AND public_key IS NOT NULL)
               AND (action = 'sign' OR (key_id IS NULL AND public_key IS NULL)))
);
COMMENT ON TABLE community_deletion.community_deletion_receipt_keys IS
    'How the deployment signs its deletion receipts: the newest row names the Ed25519 key (action sign) or records that it runs unsigned. Append-only; written only by the schema''s owner.';

ALTER TABLE community_deletion.community_deletion_receipts
    ADD COLUMN kind text NOT NULL DEFAULT 'deletion' CHECK (kind IN ('deletion', 'rotation')),
    ALTER COLUMN request_id DROP NOT NULL,
    ADD CONSTRAINT community_deletion_receipts_entry_check
        CHECK ((kind = 'deletion') = (request_id IS NOT NULL) AND (kind = 'deletion' OR signer <> 'unsigned'));
COMMENT ON COLUMN community_deletion.community_deletion_receipts.kind IS
    'deletion: the receipt of request_id; rotation: a key rotation entry, signed by the chain''s key, naming the next one.';

-- +goose StatementBegin
-- Guards community_deletion_receipt_keys: append-only for every role, the
-- owner included (23000); an insert needs the schema's owner (42501), a
-- public key of 32 bytes whose key id is the one given or is filled in
-- (22023), and a change from the newest row (23505; registering the same
-- key again with previous_key_lost is a change).
CREATE FUNCTION community_deletion.enforce_community_deletion_receipt_key_guard() RETURNS trigger
    LANGUAGE plpgsql
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
DECLARE
    raw bytea;
    computed text;
    latest community_deletion.community_deletion_receipt_keys;
BEGIN
    IF TG_RELID IS DISTINCT FROM 'community_deletion.community_deletion_receipt_keys'::regclass
       OR TG_WHEN <> 'BEFORE' OR TG_LEVEL <> 'ROW' THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = 'enforce_community_deletion_receipt_key_guard() refused: it guards community_deletion_receipt_keys only';
    END IF;
    IF TG_OP <> 'INSERT' THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = pg_catalog.format('receipt key registry row %s refused: the registry is append-only; insert a new row to change how receipts are signed', OLD.sequence);
    END IF;
    IF NOT pg_catalog.pg_has_role(session_user,
            (SELECT n.nspowner FROM pg_catalog.pg_namespace n WHERE n.nspname = 'community_deletion'), 'MEMBER') THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = pg_catalog.format('receipt key registration refused: role %s is not the owner of schema community_deletion; only the schema''s owner registers how receipts are signed', session_user);
    END IF;
    IF NEW.action = 'sign' THEN
        IF NEW.public_key IS NULL OR NEW.public_key !~ '^[A-Za-z0-9+/]{43}=$' THEN
            RAISE EXCEPTION USING ERRCODE = '22023',
                MESSAGE = 'receipt key registration refused: public_key must be the Ed25519 public key''s 32 raw bytes in standard padded base64 (44 characters)';
        END IF;
        raw := pg_catalog.decode(NEW.public_key, 'base64');
        IF pg_catalog.length(raw) <> 32 OR pg_catalog.encode(raw, 'base64') <> NEW.public_key THEN
            RAISE EXCEPTION USING ERRCODE = '22023',
                MESSAGE = 'receipt key registration refused: public_key does not decode to 32 bytes in canonical base64';
        END IF;
        computed := pg_catalog.left(pg_catalog.encode(pg_catalog.sha256(raw), 'hex'), 16);
        IF NEW.key_id IS NOT NULL AND NEW.key_id IS DISTINCT FROM computed THEN
            RAISE EXCEPTION USING ERRCODE = '22023',
                MESSAGE = pg_catalog.format('receipt key registration refused: key_id %s is not the key id of public_key (%s); leave key_id out to have it filled in', NEW.key_id, computed);
        END IF;
        NEW.key_id := computed;
    ELSIF NEW.key_id IS NOT NULL OR NEW.public_key IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = '22023',
            MESSAGE = 'receipt key registration refused: a deployment that runs unsigned names no key';
    END IF;
    -- One registration at a time, so that "what is registered?" cannot race.
    PERFORM pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext('community_deletion_receipt_keys'));
    SELECT k.* INTO latest FROM community_deletion.community_deletion_receipt_keys k ORDER BY k.sequence DESC LIMIT 1;
    IF latest.sequence IS NOT NULL AND latest.action = NEW.action AND latest.key_id IS NOT DISTINCT FROM NEW.key_id
       AND latest.previous_key_lost = NEW.previous_key_lost THEN
        RAISE EXCEPTION USING ERRCODE = '23505',
            MESSAGE = pg_catalog.format('receipt key registration refused: it is already registered (row %s); nothing to do', latest.sequence);
    END IF;
    NEW.declared_by := session_user;
    NEW.declared_at := pg_catalog.now();
    RETURN NEW;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER community_deletion_receipt_keys_guard
    BEFORE INSERT OR UPDATE OR DELETE ON community_deletion.community_deletion_receipt_keys
    FOR EACH ROW EXECUTE FUNCTION community_deletion.enforce_community_deletion_receipt_key_guard();
CREATE TRIGGER community_deletion_receipt_keys_truncate_guard
    BEFORE TRUNCATE ON community_deletion.community_deletion_receipt_keys
    FOR EACH STATEMENT EXECUTE FUNCTION community_deletion.refuse_community_deletion_truncate();

REVOKE ALL ON community_deletion.community_deletion_receipt_keys FROM PUBLIC;
GRANT SELECT ON community_deletion.community_deletion_receipt_keys
    TO community_deletion_operator, community_deletion_executor;

-- +goose StatementBegin
-- Guards community_deletion_receipts: receipts are append-only for every
-- role, the owner included (23000). An insert needs a member of
-- community_deletion_executor (42501) and the next place in the chain
-- (sequence 1 into an empty table, else after the row sequence - 1 whose
-- body_sha256 is previous_sha256; 23000). A deletion receipt needs its
-- request at retention_pending (55000) and a format 2 body whose
-- request_id, community, sequence, previous_hash and signer agree with the
-- columns and the request; a rotation a body whose sequence,
-- previous_hash, signer, new_signer and new_public_key agree with its row
-- and the registry (23000). The signer must be what the registry's newest
-- row names, and the key the chain is at unless that is unsigned or the
-- registry recorded the previous key lost (23000).
CREATE OR REPLACE FUNCTION community_deletion.enforce_community_deletion_receipt_guard() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
DECLARE
    request_stage text;
    request_community uuid;
    previous community_deletion.community_deletion_receipts;
    chain_key text;
    registered community_deletion.community_deletion_receipt_keys;
    wanted text;
    body jsonb;
    subject text;
BEGIN
    IF TG_RELID IS DISTINCT FROM 'community_deletion.community_deletion_receipts'::regclass
       OR TG_WHEN <> 'BEFORE' OR TG_LEVEL <> 'ROW' THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = 'enforce_community_deletion_receipt_guard() refused: it guards community_deletion_receipts only';
    END IF;
    IF TG_OP <> 'INSERT' THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = pg_catalog.format('deletion receipt %s of deletion %s refused: receipts are append-only', OLD.sequence, OLD.request_id);
    END IF;
    IF NEW.kind = 'rotation' THEN
        subject := pg_catalog.format('key rotation %s', NEW.sequence);
    ELSE
        subject := pg_catalog.format('receipt %s of deletion %s', NEW.sequence, NEW.request_id);
    END IF;
    PERFORM community_deletion.community_deletion_require_member(ARRAY['community_deletion_executor']::name[], subject);
    IF NEW.kind = 'deletion' THEN
        SELECT r.stage, r.community_id INTO request_stage, request_community
        FROM community_deletion.community_deletion_requests r WHERE r.id = NEW.request_id;
        IF request_stage IS DISTINCT FROM 'retention_pending' THEN
            RAISE EXCEPTION USING ERRCODE = '55000',
                MESSAGE = pg_catalog.format('receipt of deletion %s refused: the deletion is %s, not retention_pending; a receipt is written as the deletion completes',
                                            NEW.request_id, coalesce(request_stage, 'missing'));
        END IF;
    END IF;
    IF NEW.sequence = 1 THEN
        IF EXISTS (SELECT 1 FROM community_deletion.community_deletion_receipts) THEN
            RAISE EXCEPTION USING ERRCODE = '23000',
                MESSAGE = pg_catalog.format('receipt 1 of deletion %s refused: the chain already has a first receipt', NEW.request_id);
        END IF;
    ELSE
        SELECT p.* INTO previous FROM community_deletion.community_deletion_receipts p WHERE p.sequence = NEW.sequence - 1;
        IF previous.sequence IS NULL THEN
            RAISE EXCEPTION USING ERRCODE = '23000',
                MESSAGE = pg_catalog.format('%s refused: receipt %s does not exist; the chain has no gaps', subject, NEW.sequence - 1);
        END IF;
        IF previous.body_sha256 IS DISTINCT FROM NEW.previous_sha256 THEN
            RAISE EXCEPTION USING ERRCODE = '23000',
                MESSAGE = pg_catalog.format('%s refused: previous_sha256 %s is not %s, the hash of receipt %s',
                                            subject, coalesce(NEW.previous_sha256, '(none)'), previous.body_sha256, NEW.sequence - 1);
        END IF;
        -- The key the chain is at: the newest entry's signer, or the key a
        -- rotation handed it to.
        IF previous.kind = 'rotation' THEN
            chain_key := (previous.body::jsonb) ->> 'new_signer';
        ELSE
            chain_key := previous.signer;
        END IF;
    END IF;
    BEGIN
        body := NEW.body::jsonb;
    EXCEPTION WHEN invalid_text_representation THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = pg_catalog.format('%s refused: its body is not JSON', subject);
    END;
    IF NEW.kind = 'deletion' AND pg_catalog.jsonb_typeof(body) = 'object'
       AND body ->> 'format' = 'communitydeletion.receipt/v1' THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = pg_catalog.format('%s refused: format communitydeletion.receipt/v1 claims every store verified; an executor of this release writes communitydeletion.receipt/v2, which says what was checked: upgrade the executor', subject);
    END IF;
    IF pg_catalog.jsonb_typeof(body) IS DISTINCT FROM 'object'
       OR pg_catalog.jsonb_typeof(body -> 'sequence') IS DISTINCT FROM 'number'
       OR body ->> 'sequence' IS DISTINCT FROM NEW.sequence::text
       OR body ->> 'previous_hash' IS DISTINCT FROM coalesce(NEW.previous_sha256, '')
       OR body ->> 'signer' IS DISTINCT FROM NEW.signer
       OR (NEW.kind = 'deletion'
           AND (body ->> 'format' IS DISTINCT FROM 'communitydeletion.receipt/v2'
                OR body ->> 'request_id' IS DISTINCT FROM NEW.request_id::text
                OR body -> 'community' ->> 'id' IS DISTINCT FROM request_community::text))
       OR (NEW.kind = 'rotation' AND body ->> 'format' IS DISTINCT FROM 'communitydeletion.key-rotation/v1') THEN
        RAISE EXCEPTION USING ERRCODE = '23000',
            MESSAGE = pg_catalog.format('%s refused: its body''s format, request_id, community, sequence, previous_hash or signer disagree with the row',
                                        subject);
    END IF;

    SELECT k.* INTO registered FROM community_deletion.community_deletion_receipt_keys k ORDER BY k.sequence DESC LIMIT 1;
    IF registered.sequence IS NOT NULL THEN
        wanted := coalesce(registered.key_id, 'unsigned');
    END IF;
    IF NEW.kind = 'rotation' THEN
        IF chain_key IS NULL OR chain_key = 'unsigned' OR NEW.signer IS DISTINCT FROM chain_key THEN
            RAISE EXCEPTION USING ERRCODE = '23000',
                MESSAGE = pg_catalog.format('%s refused: a rotation is signed by the key the chain is at (%s), not %s',
                                            subject, coalesce(chain_key, 'none: the chain is empty'), NEW.signer);
        END IF;
        IF wanted IS NULL OR body ->> 'new_signer' IS DISTINCT FROM wanted
           OR body ->> 'new_public_key' IS DISTINCT FROM coalesce(registered.public_key, '') THEN
            RAISE EXCEPTION USING ERRCODE = '23000',
                MESSAGE = pg_catalog.format('%s refused: it hands the chain to %s, but the deployment registered %s (community_deletion_receipt_keys); a rotation names the registered key',
                                            subject, coalesce(body ->> 'new_signer', '(none)'), coalesce(wanted, 'nothing'));
        END IF;
        IF wanted = chain_key THEN
            RAISE EXCEPTION USING ERRCODE = '23000',
                MESSAGE = pg_catalog.format('%s refused: the chain is already at %s', subject, chain_key);
        END IF;
    ELSE
        IF wanted IS NOT NULL AND NEW.signer IS DISTINCT FROM wanted THEN
            RAISE EXCEPTION USING ERRCODE = '23000',
                MESSAGE = pg_catalog.format('%s refused: it is signed by %s, but the deployment registered %s (community_deletion_receipt_keys row %s); run the executor with %s',
                                            subject, NEW.signer, wanted, registered.sequence,
                                            CASE WHEN wanted = 'unsigned' THEN 'no signing key' ELSE 'that key' END);
        END IF;
        IF chain_key IS NOT NULL AND chain_key <> 'unsigned' AND NEW.signer IS DISTINCT FROM chain_key
           AND NOT coalesce(registered.previous_key_lost AND wanted = NEW.signer, false) THEN
            RAISE EXCEPTION USING ERRCODE = '23000',
                MESSAGE = pg_catalog.format('%s refused: it is signed by %s, but the chain is signed by key %s up to receipt %s; write a key rotation signed by %s first (deletionctl receipt rotate)',
                                            subject, NEW.signer, chain_key, NEW.sequence - 1, chain_key);
        END IF;
    END IF;
    NEW.created_at := pg_catalog.now();
    RETURN NEW;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_control_table(table_name text) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
        SELECT coalesce(table_name = ANY (ARRAY[
            'communities',
            'community_deletion_approvals',
            'community_deletion_checkpoints',
            'community_deletion_created_roles',
            'community_deletion_excluded_tables',
            'community_deletion_executor_heartbeats',
            'community_deletion_function_digests',
            'community_deletion_manifest_keys',
            'community_deletion_protection_events',
            'community_deletion_purge_progress',
            'community_deletion_receipt_keys',
            'community_deletion_receipts',
            'community_deletion_references',
            'community_deletion_requests',
            'community_deletion_settings',
            'community_deletion_step_authorizations',
            'community_deletion_storage_layout',
            'community_deletion_tenant_table',
            'community_scoped_tables',
            'community_serving_write_leases',
            'storage_taxonomy_sweeps']), false)
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_guard_triggers() RETURNS TABLE(table_name text, trigger_name text, function_signature text)
    LANGUAGE sql IMMUTABLE
    SET search_path = pg_catalog, community_deletion, pg_temp
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
            ('community_deletion_receipts', 'community_deletion_receipts_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('community_deletion_storage_layout', 'community_deletion_storage_layout_guard', 'enforce_community_deletion_storage_layout_guard()'),
            ('community_deletion_storage_layout', 'community_deletion_storage_layout_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('community_deletion_tenant_table', 'community_deletion_tenant_table_guard', 'enforce_community_deletion_tenant_table_guard()'),
            ('community_deletion_tenant_table', 'community_deletion_tenant_table_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('community_deletion_excluded_tables', 'community_deletion_excluded_tables_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('communities', 'communities_tenant_key_guard', 'enforce_community_tenant_key_guard()'),
            ('community_deletion_requests', 'community_deletion_requests_tenant_key_guard', 'enforce_community_tenant_key_guard()'),
            ('community_deletion_references', 'community_deletion_references_guard', 'enforce_community_deletion_reference_guard()'),
            ('community_deletion_references', 'community_deletion_references_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('communities', 'communities_tenant_objects_proof', 'enforce_community_tenant_objects_proof()'),
            ('community_deletion_receipt_keys', 'community_deletion_receipt_keys_guard', 'enforce_community_deletion_receipt_key_guard()'),
            ('community_deletion_receipt_keys', 'community_deletion_receipt_keys_truncate_guard', 'refuse_community_deletion_truncate()')
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_installed_functions() RETURNS text[]
    LANGUAGE sql IMMUTABLE
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
        SELECT ARRAY[
            'assert_community_write_allowed(uuid)',
            'assert_tenant_write_allowed(text)',
            'attach_child_table(regclass,regclass[],regclass[])',
            'attach_community_write_fence(regclass,text,name)',
            'community_deletion_attach_row_fence(regclass,text,text[])',
            'community_deletion_bound_args(text[])',
            'community_deletion_catalog_drift()',
            'community_deletion_catalog_notes()',
            'community_deletion_child_paths(oid,oid[],oid[])',
            'community_deletion_child_spec(regclass,regclass[],regclass[])',
            'community_deletion_control_digest(text)',
            'community_deletion_control_table(text)',
            'community_deletion_dangling_query(text,text[])',
            'community_deletion_default_grace_period()',
            'community_deletion_drop_tenant_objects(uuid)',
            'community_deletion_expected_fence_args(oid,text,name,text,jsonb)',
            'community_deletion_fence_admit(uuid[],text)',
            'community_deletion_fence_args(name,text,jsonb)',
            'community_deletion_fence_bound(oid,name,jsonb)',
            'community_deletion_fence_query(text,text[])',
            'community_deletion_fenced(oid,name)',
            'community_deletion_first_steps(jsonb,boolean)',
            'community_deletion_function_digest(oid)',
            'community_deletion_guard_digest(text,text)',
            'community_deletion_guard_triggers()',
            'community_deletion_health()',
            'community_deletion_installed_functions()',
            'community_deletion_is_member(name)',
            'community_deletion_kept_row_args(name,text)',
            'community_deletion_kept_row_fenced(oid,name)',
            'community_deletion_key_cast(text)',
            'community_deletion_key_kind(regtype)',
            'community_deletion_lock_holders(bigint)',
            'community_deletion_lock_key(uuid)',
            'community_deletion_next_stage(text)',
            'community_deletion_operators_share_role()',
            'community_deletion_path_keys(jsonb,jsonb)',
            'community_deletion_protection_state(uuid)',
            'community_deletion_purge_pressure()',
            'community_deletion_receipt_chain_head()',
            'community_deletion_record_tenant_table(regclass,name,text[])',
            'community_deletion_register_child_table(regclass,jsonb)',
            'community_deletion_register_table(regclass,text,name)',
            'community_deletion_require_member(name[],text)',
            'community_deletion_restore_active(uuid,timestamptz)',
            'community_deletion_row_fenced(oid,regprocedure,text[],boolean)',
            'community_deletion_seal_functions()',
            'community_deletion_stage_order()',
            'community_deletion_stage_runnable(text)',
            'community_deletion_statement_fenced(oid,regprocedure,text[])',
            'community_deletion_step_authorized(uuid,text)',
            'community_deletion_table_references(oid)',
            'community_deletion_tenant_filter(name,name,text)',
            'community_deletion_tenant_id(text)',
            'community_deletion_tenant_key_kind()',
            'community_deletion_tenant_object_name(text,text)',
            'community_deletion_tenant_object_parts(text)',
            'community_deletion_tenant_schema(oid)',
            'community_deletion_tenant_uuid(text)',
            'community_deletion_trigger_args(text[])',
            'community_deletion_unregister_table(name,name)',
            'community_schema_destruction_lock_key()',
            'community_write_allowed(uuid)',
            'community_write_fence_excluded_table(text)',
            'declare_reference(regclass,name[],regclass,name[],text)',
            'declare_tenant_table(regclass,name)',
            'detach_community_write_fence(regclass)',
            'drop_reference(regclass,name[])',
            'enforce_community_deletion_approval_guard()',
            'enforce_community_deletion_checkpoint_guard()',
            'enforce_community_deletion_grace_fence()',
            'enforce_community_deletion_grace_period()',
            'enforce_community_deletion_manifest_key_guard()',
            'enforce_community_deletion_protection_guard()',
            'enforce_community_deletion_protection_submit()',
            'enforce_community_deletion_receipt_guard()',
            'enforce_community_deletion_receipt_key_guard()',
            'enforce_community_deletion_receipt_required()',
            'enforce_community_deletion_reference_guard()',
            'enforce_community_deletion_request_guard()',
            'enforce_community_deletion_settings_guard()',
            'enforce_community_deletion_storage_layout_guard()',
            'enforce_community_deletion_tenant_table_guard()',
            'enforce_community_kept_row_fence()',
            'enforce_community_kept_row_fence_row()',
            'enforce_community_scoped_table_guard()',
            'enforce_community_serving_write_lease_guard()',
            'enforce_community_tenant_created()',
            'enforce_community_tenant_key_guard()',
            'enforce_community_tenant_objects_proof()',
            'enforce_community_tombstone()',
            'enforce_community_tombstone_proof()',
            'enforce_community_truncate_fence()',
            'enforce_community_write_fence()',
            'enforce_community_write_fence_row()',
            'exclude_table(regclass,text)',
            'include_table(regclass)',
            'refuse_community_deletion_truncate()'
        ]
    $$;
-- +goose StatementEnd

SELECT community_deletion.community_deletion_seal_functions();

-- +goose Down

-- +goose StatementBegin
DO $refuse$
BEGIN
    IF EXISTS (SELECT 1 FROM community_deletion.community_deletion_receipts r WHERE r.kind OPERATOR(pg_catalog.=) 'rotation') THEN
        RAISE EXCEPTION USING ERRCODE = '55000',
            MESSAGE = 'migration 00028 down refused: the receipt chain holds a key rotation, which earlier releases cannot hold; it cannot be undone';
    END IF;
END
$refuse$;
-- +goose StatementEnd

DROP TABLE community_deletion.community_deletion_receipt_keys;
DROP FUNCTION community_deletion.enforce_community_deletion_receipt_key_guard();

ALTER TABLE community_deletion.community_deletion_receipts
    DROP CONSTRAINT community_deletion_receipts_entry_check,
    DROP COLUMN kind,
    ALTER COLUMN request_id SET NOT NULL;

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.enforce_community_deletion_receipt_guard() RETURNS trigger
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
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_control_table(table_name text) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
        SELECT coalesce(table_name = ANY (ARRAY[
            'communities',
            'community_deletion_approvals',
            'community_deletion_checkpoints',
            'community_deletion_created_roles',
            'community_deletion_excluded_tables',
            'community_deletion_executor_heartbeats',
            'community_deletion_function_digests',
            'community_deletion_manifest_keys',
            'community_deletion_protection_events',
            'community_deletion_purge_progress',
            'community_deletion_references',
            'community_deletion_receipts',
            'community_deletion_requests',
            'community_deletion_settings',
            'community_deletion_step_authorizations',
            'community_deletion_storage_layout',
            'community_deletion_tenant_table',
            'community_scoped_tables',
            'community_serving_write_leases',
            'storage_taxonomy_sweeps']), false)
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_guard_triggers() RETURNS TABLE(table_name text, trigger_name text, function_signature text)
    LANGUAGE sql IMMUTABLE
    SET search_path = pg_catalog, community_deletion, pg_temp
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
            ('community_deletion_receipts', 'community_deletion_receipts_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('community_deletion_storage_layout', 'community_deletion_storage_layout_guard', 'enforce_community_deletion_storage_layout_guard()'),
            ('community_deletion_storage_layout', 'community_deletion_storage_layout_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('community_deletion_tenant_table', 'community_deletion_tenant_table_guard', 'enforce_community_deletion_tenant_table_guard()'),
            ('community_deletion_tenant_table', 'community_deletion_tenant_table_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('community_deletion_excluded_tables', 'community_deletion_excluded_tables_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('communities', 'communities_tenant_key_guard', 'enforce_community_tenant_key_guard()'),
            ('community_deletion_requests', 'community_deletion_requests_tenant_key_guard', 'enforce_community_tenant_key_guard()'),
            ('community_deletion_references', 'community_deletion_references_guard', 'enforce_community_deletion_reference_guard()'),
            ('community_deletion_references', 'community_deletion_references_truncate_guard', 'refuse_community_deletion_truncate()'),
            ('communities', 'communities_tenant_objects_proof', 'enforce_community_tenant_objects_proof()')
    $$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION community_deletion.community_deletion_installed_functions() RETURNS text[]
    LANGUAGE sql IMMUTABLE
    SET search_path = pg_catalog, community_deletion, pg_temp
    AS $$
        SELECT ARRAY[
            'assert_community_write_allowed(uuid)',
            'assert_tenant_write_allowed(text)',
            'attach_child_table(regclass,regclass[],regclass[])',
            'attach_community_write_fence(regclass,text,name)',
            'community_deletion_attach_row_fence(regclass,text,text[])',
            'community_deletion_bound_args(text[])',
            'community_deletion_catalog_drift()',
            'community_deletion_catalog_notes()',
            'community_deletion_child_paths(oid,oid[],oid[])',
            'community_deletion_child_spec(regclass,regclass[],regclass[])',
            'community_deletion_control_digest(text)',
            'community_deletion_control_table(text)',
            'community_deletion_dangling_query(text,text[])',
            'community_deletion_default_grace_period()',
            'community_deletion_drop_tenant_objects(uuid)',
            'community_deletion_expected_fence_args(oid,text,name,text,jsonb)',
            'community_deletion_fence_admit(uuid[],text)',
            'community_deletion_fence_args(name,text,jsonb)',
            'community_deletion_fence_bound(oid,name,jsonb)',
            'community_deletion_fence_query(text,text[])',
            'community_deletion_fenced(oid,name)',
            'community_deletion_first_steps(jsonb,boolean)',
            'community_deletion_function_digest(oid)',
            'community_deletion_guard_digest(text,text)',
            'community_deletion_guard_triggers()',
            'community_deletion_health()',
            'community_deletion_installed_functions()',
            'community_deletion_is_member(name)',
            'community_deletion_kept_row_args(name,text)',
            'community_deletion_kept_row_fenced(oid,name)',
            'community_deletion_key_cast(text)',
            'community_deletion_key_kind(regtype)',
            'community_deletion_lock_holders(bigint)',
            'community_deletion_lock_key(uuid)',
            'community_deletion_next_stage(text)',
            'community_deletion_operators_share_role()',
            'community_deletion_path_keys(jsonb,jsonb)',
            'community_deletion_protection_state(uuid)',
            'community_deletion_purge_pressure()',
            'community_deletion_receipt_chain_head()',
            'community_deletion_record_tenant_table(regclass,name,text[])',
            'community_deletion_register_child_table(regclass,jsonb)',
            'community_deletion_register_table(regclass,text,name)',
            'community_deletion_require_member(name[],text)',
            'community_deletion_restore_active(uuid,timestamptz)',
            'community_deletion_row_fenced(oid,regprocedure,text[],boolean)',
            'community_deletion_seal_functions()',
            'community_deletion_stage_order()',
            'community_deletion_stage_runnable(text)',
            'community_deletion_statement_fenced(oid,regprocedure,text[])',
            'community_deletion_step_authorized(uuid,text)',
            'community_deletion_table_references(oid)',
            'community_deletion_tenant_filter(name,name,text)',
            'community_deletion_tenant_id(text)',
            'community_deletion_tenant_key_kind()',
            'community_deletion_tenant_object_name(text,text)',
            'community_deletion_tenant_object_parts(text)',
            'community_deletion_tenant_schema(oid)',
            'community_deletion_tenant_uuid(text)',
            'community_deletion_trigger_args(text[])',
            'community_deletion_unregister_table(name,name)',
            'community_schema_destruction_lock_key()',
            'community_write_allowed(uuid)',
            'community_write_fence_excluded_table(text)',
            'declare_reference(regclass,name[],regclass,name[],text)',
            'declare_tenant_table(regclass,name)',
            'detach_community_write_fence(regclass)',
            'drop_reference(regclass,name[])',
            'enforce_community_deletion_approval_guard()',
            'enforce_community_deletion_checkpoint_guard()',
            'enforce_community_deletion_grace_fence()',
            'enforce_community_deletion_grace_period()',
            'enforce_community_deletion_manifest_key_guard()',
            'enforce_community_deletion_protection_guard()',
            'enforce_community_deletion_protection_submit()',
            'enforce_community_deletion_receipt_guard()',
            'enforce_community_deletion_receipt_required()',
            'enforce_community_deletion_reference_guard()',
            'enforce_community_deletion_request_guard()',
            'enforce_community_deletion_settings_guard()',
            'enforce_community_deletion_storage_layout_guard()',
            'enforce_community_deletion_tenant_table_guard()',
            'enforce_community_kept_row_fence()',
            'enforce_community_kept_row_fence_row()',
            'enforce_community_scoped_table_guard()',
            'enforce_community_serving_write_lease_guard()',
            'enforce_community_tenant_created()',
            'enforce_community_tenant_key_guard()',
            'enforce_community_tenant_objects_proof()',
            'enforce_community_tombstone()',
            'enforce_community_tombstone_proof()',
            'enforce_community_truncate_fence()',
            'enforce_community_write_fence()',
            'enforce_community_write_fence_row()',
            'exclude_table(regclass,text)',
            'include_table(regclass)',
            'refuse_community_deletion_truncate()'
        ]
    $$;
-- +goose StatementEnd

SELECT community_deletion.community_deletion_seal_functions();
