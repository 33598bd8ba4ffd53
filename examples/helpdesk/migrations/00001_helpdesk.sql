-- The service as it was before it adopted community deletion, in the shape
-- of Chatwoot's db/schema.rb (see README.md): accounts are its tenants,
-- keyed by a serial integer; its tables carry account_id as integer or
-- bigint, often nullable, and declare almost no foreign keys (none to
-- accounts). Files are Rails ActiveStorage blobs under random keys, attached
-- polymorphically. Each account gets two sequences of its own for display
-- ids, created when the account is.

-- +goose Up
CREATE TABLE accounts (
    id serial PRIMARY KEY,
    name character varying NOT NULL,
    created_at timestamp without time zone NOT NULL,
    updated_at timestamp without time zone NOT NULL,
    locale integer DEFAULT 0,
    domain character varying(100),
    support_email character varying(100),
    feature_flags bigint DEFAULT 0 NOT NULL,
    auto_resolve_duration integer,
    limits jsonb DEFAULT '{}',
    custom_attributes jsonb DEFAULT '{}',
    status integer DEFAULT 0
);
CREATE INDEX index_accounts_on_status ON accounts (status);

-- Agents: one row per person, shared by every account they belong to.
CREATE TABLE users (
    id serial PRIMARY KEY,
    provider character varying DEFAULT 'email' NOT NULL,
    uid character varying DEFAULT '' NOT NULL,
    encrypted_password character varying DEFAULT '' NOT NULL,
    name character varying NOT NULL,
    display_name character varying,
    email character varying,
    created_at timestamp without time zone NOT NULL,
    updated_at timestamp without time zone NOT NULL,
    pubsub_token character varying,
    availability integer DEFAULT 0,
    ui_settings jsonb DEFAULT '{}',
    custom_attributes jsonb DEFAULT '{}',
    type character varying
);
CREATE INDEX index_users_on_email ON users (email);
CREATE UNIQUE INDEX index_users_on_pubsub_token ON users (pubsub_token);
CREATE UNIQUE INDEX index_users_on_uid_and_provider ON users (uid, provider);

-- bigint account_id under the integer accounts.id, nullable, no foreign key.
CREATE TABLE account_users (
    id bigserial PRIMARY KEY,
    account_id bigint,
    user_id bigint,
    role integer DEFAULT 0,
    inviter_id bigint,
    created_at timestamp(6) without time zone NOT NULL,
    updated_at timestamp(6) without time zone NOT NULL,
    active_at timestamp without time zone,
    availability integer DEFAULT 0 NOT NULL,
    auto_offline boolean DEFAULT true NOT NULL
);
CREATE UNIQUE INDEX uniq_user_id_per_account_id ON account_users (account_id, user_id);
CREATE INDEX index_account_users_on_account_id ON account_users (account_id);
CREATE INDEX index_account_users_on_user_id ON account_users (user_id);

CREATE TABLE channel_api (
    id bigserial PRIMARY KEY,
    account_id integer NOT NULL,
    webhook_url character varying,
    created_at timestamp(6) without time zone NOT NULL,
    updated_at timestamp(6) without time zone NOT NULL,
    identifier character varying,
    hmac_token character varying,
    hmac_mandatory boolean DEFAULT false,
    additional_attributes jsonb DEFAULT '{}'
);
CREATE UNIQUE INDEX index_channel_api_on_hmac_token ON channel_api (hmac_token);
CREATE UNIQUE INDEX index_channel_api_on_identifier ON channel_api (identifier);

-- channel_type and channel_id name the channel row polymorphically.
CREATE TABLE inboxes (
    id serial PRIMARY KEY,
    channel_id integer NOT NULL,
    account_id integer NOT NULL,
    name character varying NOT NULL,
    created_at timestamp without time zone NOT NULL,
    updated_at timestamp without time zone NOT NULL,
    channel_type character varying,
    enable_auto_assignment boolean DEFAULT true,
    greeting_enabled boolean DEFAULT false,
    greeting_message character varying,
    email_address character varying,
    timezone character varying DEFAULT 'UTC',
    csat_survey_enabled boolean DEFAULT false
);
CREATE INDEX index_inboxes_on_account_id ON inboxes (account_id);
CREATE INDEX index_inboxes_on_channel_id_and_channel_type ON inboxes (channel_id, channel_type);

CREATE TABLE contacts (
    id serial PRIMARY KEY,
    name character varying DEFAULT '',
    email character varying,
    phone_number character varying,
    account_id integer NOT NULL,
    created_at timestamp without time zone NOT NULL,
    updated_at timestamp without time zone NOT NULL,
    additional_attributes jsonb DEFAULT '{}',
    identifier character varying,
    custom_attributes jsonb DEFAULT '{}',
    last_activity_at timestamp without time zone,
    contact_type integer DEFAULT 0,
    blocked boolean DEFAULT false NOT NULL
);
CREATE INDEX index_contacts_on_lower_email_account_id ON contacts (lower(email::text), account_id);
CREATE INDEX index_contacts_on_account_id ON contacts (account_id);
CREATE UNIQUE INDEX uniq_email_per_account_contact ON contacts (email, account_id);
CREATE UNIQUE INDEX uniq_identifier_per_account_contact ON contacts (identifier, account_id);

-- A contact's address in an inbox: no account_id and no foreign key; it
-- belongs to an account only through contact_id and inbox_id.
CREATE TABLE contact_inboxes (
    id bigserial PRIMARY KEY,
    contact_id bigint,
    inbox_id bigint,
    source_id character varying NOT NULL,
    created_at timestamp(6) without time zone NOT NULL,
    updated_at timestamp(6) without time zone NOT NULL,
    hmac_verified boolean DEFAULT false,
    pubsub_token character varying
);
CREATE INDEX index_contact_inboxes_on_contact_id ON contact_inboxes (contact_id);
CREATE UNIQUE INDEX index_contact_inboxes_on_inbox_id_and_source_id ON contact_inboxes (inbox_id, source_id);
CREATE INDEX index_contact_inboxes_on_inbox_id ON contact_inboxes (inbox_id);
CREATE UNIQUE INDEX index_contact_inboxes_on_pubsub_token ON contact_inboxes (pubsub_token);

-- display_id counts per account, from the account's own sequence (the
-- trigger below); uuid is a second, global identifier.
CREATE TABLE conversations (
    id serial PRIMARY KEY,
    account_id integer NOT NULL,
    inbox_id integer NOT NULL,
    status integer DEFAULT 0 NOT NULL,
    assignee_id integer,
    created_at timestamp without time zone NOT NULL,
    updated_at timestamp without time zone NOT NULL,
    contact_id bigint,
    display_id integer NOT NULL,
    contact_last_seen_at timestamp without time zone,
    agent_last_seen_at timestamp without time zone,
    additional_attributes jsonb DEFAULT '{}',
    contact_inbox_id bigint,
    uuid uuid DEFAULT gen_random_uuid() NOT NULL,
    identifier character varying,
    last_activity_at timestamp without time zone DEFAULT CURRENT_TIMESTAMP NOT NULL,
    team_id bigint,
    campaign_id bigint,
    custom_attributes jsonb DEFAULT '{}',
    priority integer,
    cached_label_list text
);
CREATE UNIQUE INDEX index_conversations_on_account_id_and_display_id ON conversations (account_id, display_id);
CREATE INDEX index_conversations_on_id_and_account_id ON conversations (account_id, id);
CREATE INDEX index_conversations_on_inbox_id ON conversations (inbox_id);
CREATE INDEX index_conversations_on_contact_id ON conversations (contact_id);
CREATE UNIQUE INDEX index_conversations_on_uuid ON conversations (uuid);

CREATE TABLE messages (
    id serial PRIMARY KEY,
    content text,
    account_id integer NOT NULL,
    inbox_id integer NOT NULL,
    conversation_id integer NOT NULL,
    message_type integer NOT NULL,
    created_at timestamp without time zone NOT NULL,
    updated_at timestamp without time zone NOT NULL,
    private boolean DEFAULT false NOT NULL,
    status integer DEFAULT 0,
    source_id character varying,
    content_type integer DEFAULT 0 NOT NULL,
    content_attributes json DEFAULT '{}',
    sender_type character varying,
    sender_id bigint,
    external_source_ids jsonb DEFAULT '{}',
    additional_attributes jsonb DEFAULT '{}'
);
CREATE INDEX index_messages_on_account_id ON messages (account_id);
CREATE INDEX index_messages_on_conversation_id ON messages (conversation_id);
CREATE INDEX index_messages_on_sender_type_and_sender_id ON messages (sender_type, sender_id);

-- A message's attachment; its file is an ActiveStorage blob.
CREATE TABLE attachments (
    id serial PRIMARY KEY,
    file_type integer DEFAULT 0,
    external_url character varying,
    coordinates_lat double precision DEFAULT 0.0,
    coordinates_long double precision DEFAULT 0.0,
    message_id integer NOT NULL,
    account_id integer NOT NULL,
    created_at timestamp without time zone NOT NULL,
    updated_at timestamp without time zone NOT NULL,
    fallback_title character varying,
    extension character varying,
    meta jsonb DEFAULT '{}'
);
CREATE INDEX index_attachments_on_account_id ON attachments (account_id);
CREATE INDEX index_attachments_on_message_id ON attachments (message_id);

-- Rails ActiveStorage: a blob is one stored object, named by its random
-- key; an attachment row links it to any record (record_type, record_id),
-- with no foreign key to that record. The only foreign key is to the blob.
CREATE TABLE active_storage_blobs (
    id bigserial PRIMARY KEY,
    key character varying NOT NULL,
    filename character varying NOT NULL,
    content_type character varying,
    metadata text,
    byte_size bigint NOT NULL,
    checksum character varying,
    created_at timestamp without time zone NOT NULL,
    service_name character varying NOT NULL
);
CREATE UNIQUE INDEX index_active_storage_blobs_on_key ON active_storage_blobs (key);

CREATE TABLE active_storage_attachments (
    id bigserial PRIMARY KEY,
    name character varying NOT NULL,
    record_type character varying NOT NULL,
    record_id bigint NOT NULL,
    blob_id bigint NOT NULL,
    created_at timestamp without time zone NOT NULL,
    CONSTRAINT fk_rails_c3b3935057 FOREIGN KEY (blob_id) REFERENCES active_storage_blobs (id)
);
CREATE INDEX index_active_storage_attachments_on_blob_id ON active_storage_attachments (blob_id);
CREATE UNIQUE INDEX index_active_storage_attachments_uniqueness ON active_storage_attachments (record_type, record_id, name, blob_id);

-- bigint, nullable account_id.
CREATE TABLE labels (
    id bigserial PRIMARY KEY,
    title character varying,
    description text,
    color character varying DEFAULT '#1f93ff' NOT NULL,
    show_on_sidebar boolean,
    account_id bigint,
    created_at timestamp(6) without time zone NOT NULL,
    updated_at timestamp(6) without time zone NOT NULL
);
CREATE INDEX index_labels_on_account_id ON labels (account_id);
CREATE UNIQUE INDEX index_labels_on_title_and_account_id ON labels (title, account_id);

-- bigint account_id; display_id counts per account like conversations'.
CREATE TABLE campaigns (
    id bigserial PRIMARY KEY,
    display_id integer NOT NULL,
    title character varying NOT NULL,
    description text,
    message text NOT NULL,
    sender_id integer,
    enabled boolean DEFAULT true,
    account_id bigint NOT NULL,
    inbox_id bigint NOT NULL,
    trigger_rules jsonb DEFAULT '{}',
    created_at timestamp(6) without time zone NOT NULL,
    updated_at timestamp(6) without time zone NOT NULL,
    campaign_type integer DEFAULT 0 NOT NULL,
    campaign_status integer DEFAULT 0 NOT NULL,
    audience jsonb DEFAULT '[]',
    scheduled_at timestamp without time zone
);
CREATE INDEX index_campaigns_on_account_id ON campaigns (account_id);
CREATE INDEX index_campaigns_on_inbox_id ON campaigns (inbox_id);

-- A NULL account_id is the installation's own template, which an account
-- may override with a row of its own: rows of no account, really written.
CREATE TABLE email_templates (
    id bigserial PRIMARY KEY,
    name character varying NOT NULL,
    body text NOT NULL,
    account_id integer,
    template_type integer DEFAULT 1,
    locale integer DEFAULT 0 NOT NULL,
    created_at timestamp(6) without time zone NOT NULL,
    updated_at timestamp(6) without time zone NOT NULL
);
CREATE UNIQUE INDEX index_email_templates_on_name_and_account_id ON email_templates (name, account_id);

-- Per-account display-id sequences, as Chatwoot's triggers make them: the
-- account's insert creates conv_dpid_seq_<id> and camp_dpid_seq_<id>, and
-- each conversation or campaign takes its display_id from its account's.
-- Unlike Chatwoot's, these functions run as their owner, the role that runs
-- the migrations (SECURITY DEFINER, fixed search_path, qualified names), so
-- the application login needs no CREATE on the schema nor any privilege on
-- the sequences, and the sequences are owned by the migrating role, which
-- can later drop them. CREATE SEQUENCE without IF NOT EXISTS: a name that is
-- already taken refuses the account rather than adopt a sequence someone
-- else made.
-- +goose StatementBegin
CREATE FUNCTION accounts_after_insert_row_tr() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS $$
BEGIN
    EXECUTE format('CREATE SEQUENCE public.%I', 'conv_dpid_seq_' || NEW.id);
    EXECUTE format('CREATE SEQUENCE public.%I', 'camp_dpid_seq_' || NEW.id);
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER accounts_after_insert_row_tr AFTER INSERT ON accounts
    FOR EACH ROW EXECUTE FUNCTION accounts_after_insert_row_tr();

-- +goose StatementBegin
CREATE FUNCTION conversations_before_insert_row_tr() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS $$
BEGIN
    NEW.display_id := nextval(format('public.%I', 'conv_dpid_seq_' || NEW.account_id)::regclass);
    RETURN NEW;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER conversations_before_insert_row_tr BEFORE INSERT ON conversations
    FOR EACH ROW EXECUTE FUNCTION conversations_before_insert_row_tr();

-- +goose StatementBegin
CREATE FUNCTION campaigns_before_insert_row_tr() RETURNS trigger
    LANGUAGE plpgsql SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS $$
BEGIN
    NEW.display_id := nextval(format('public.%I', 'camp_dpid_seq_' || NEW.account_id)::regclass);
    RETURN NEW;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER campaigns_before_insert_row_tr BEFORE INSERT ON campaigns
    FOR EACH ROW EXECUTE FUNCTION campaigns_before_insert_row_tr();

REVOKE ALL ON FUNCTION accounts_after_insert_row_tr(), conversations_before_insert_row_tr(), campaigns_before_insert_row_tr() FROM PUBLIC;

-- +goose Down
-- +goose StatementBegin
DO $$
DECLARE
    seq regclass;
BEGIN
    FOR seq IN SELECT c.oid::regclass FROM pg_class c
               WHERE c.relkind = 'S' AND c.relnamespace = 'public'::regnamespace
                 AND c.relname ~ '^(conv|camp)_dpid_seq_[0-9]+$' LOOP
        EXECUTE format('DROP SEQUENCE %s', seq);
    END LOOP;
END
$$;
-- +goose StatementEnd
DROP TABLE email_templates, campaigns, labels, active_storage_attachments, active_storage_blobs,
    attachments, messages, conversations, contact_inboxes, contacts, inboxes, channel_api,
    account_users, users, accounts;
DROP FUNCTION accounts_after_insert_row_tr(), conversations_before_insert_row_tr(), campaigns_before_insert_row_tr();
