// Package helpdesk is an example service in the shape of Chatwoot's schema
// (see README.md): its tenants are rows of its accounts table, keyed by a
// serial integer; its tables carry account_id as integer or bigint with no
// foreign key to accounts; its files are Rails ActiveStorage blobs under
// random object keys, listed in active_storage_blobs and attached through
// active_storage_attachments; each account has two display-id sequences of
// its own; and its presence sets in Redis are keyed by the account's id. Its
// adoption of community deletion is one migration
// (migrations/00002_adopt_community_deletion.sql); its code never writes a
// row of the deletion schema.
//
// Database writes are fenced by the database. The side effects the fence
// cannot see (an object upload, a Redis write, a value taken from an
// account's display-id sequence) are admitted first, in the transaction
// that records them, by the Admit the service was built with.
package helpdesk

import (
	"bytes"
	"context"
	"crypto/md5" //nolint:gosec // ActiveStorage's checksum is the base64 MD5 of the content, not a security measure
	"crypto/rand"
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/redis/go-redis/v9"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrate applies the service's own migrations to the database at
// databaseURL, recorded in goose's goose_db_version apart from the
// library's history. The library's migrations must already be applied
// (cmd/migrate up, or migration.Open(...).Up): the adoption migration calls
// its functions.
func Migrate(ctx context.Context, databaseURL string) error {
	return migrate(ctx, databaseURL, goose.MaxVersion)
}

// migrate applies the service's migrations up to version.
func migrate(ctx context.Context, databaseURL string, version int64) (err error) {
	config, err := pgx.ParseConfig(databaseURL)
	if err != nil {
		return fmt.Errorf("helpdesk: migrate: %w", err)
	}
	db := stdlib.OpenDB(*config)
	defer func() {
		if cerr := db.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("helpdesk: close the migration connection: %w", cerr))
		}
	}()
	files, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		return fmt.Errorf("helpdesk: migrate: %w", err)
	}
	provider, err := goose.NewProvider(goose.DialectPostgres, db, files, goose.WithDisableGlobalRegistry(true))
	if err != nil {
		return fmt.Errorf("helpdesk: migrate: %w", err)
	}
	if _, err := provider.UpTo(ctx, version); err != nil {
		return fmt.Errorf("helpdesk: migrate: %w", err)
	}
	return nil
}

// Admit admits a side effect of account inside tx before it happens, or
// refuses it. Once the service has adopted community deletion it is the
// write fence's explicit admission (lifecycle.Serving.GuardTransaction for
// the account's key): its shared lock holds a deletion's fence back until
// tx ends, and it refuses an account that is being or was deleted.
type Admit func(ctx context.Context, tx pgx.Tx, account int64) error

// Service is the helpdesk: its database (as an application login), its S3
// bucket, its Redis and the admission of its side effects.
type Service struct {
	db      *pgxpool.Pool
	objects *s3.Client
	bucket  string
	cache   redis.Cmdable
	admit   Admit
	newKey  func() (string, error) // blobKey, but for tests
}

// New returns the service over db, the bucket of objects and cache, whose
// side effects admit admits.
func New(db *pgxpool.Pool, objects *s3.Client, bucket string, cache redis.Cmdable, admit Admit) (*Service, error) {
	if db == nil || objects == nil || bucket == "" || cache == nil || admit == nil {
		return nil, errors.New("helpdesk: New needs a database, an S3 client, a bucket, a cache and an Admit")
	}
	return &Service{db: db, objects: objects, bucket: bucket, cache: cache, admit: admit, newKey: blobKey}, nil
}

// PresenceKey is the Redis sorted set of an account's online agents, as
// Chatwoot names it: it matches ONLINE_PRESENCE::<account id>::*, the
// pattern the storage layout declares.
func PresenceKey(account int64) string {
	return "ONLINE_PRESENCE::" + strconv.FormatInt(account, 10) + "::USERS"
}

// Conversation is a conversation of an account, with the display id its
// account's sequence gave it.
type Conversation struct {
	ID, Account, Inbox int64
	DisplayID          int
}

// Contact is a contact of an account and its address in an inbox.
type Contact struct {
	ID, Account, ContactInbox int64
}

// CreateAccount creates an account named name and returns its id. Its
// insert trigger creates the account's display-id sequences; the library,
// once adopted, creates the account's lifecycle row itself.
func (s *Service) CreateAccount(ctx context.Context, name string) (int64, error) {
	var id int64
	if err := s.db.QueryRow(ctx, `INSERT INTO accounts (name, created_at, updated_at) VALUES ($1, now(), now()) RETURNING id`, name).Scan(&id); err != nil {
		return 0, fmt.Errorf("helpdesk: create account %q: %w", name, err)
	}
	return id, nil
}

// AddAgent creates the user email (a row of no account) and makes them an
// agent of account; it returns the user's id.
func (s *Service) AddAgent(ctx context.Context, account int64, email, name string) (int64, error) {
	var user int64
	err := s.db.QueryRow(ctx, `
		WITH u AS (INSERT INTO users (uid, email, name, pubsub_token, created_at, updated_at)
		           VALUES ($2, $2, $3, gen_random_uuid()::text, now(), now()) RETURNING id)
		INSERT INTO account_users (account_id, user_id, role, created_at, updated_at)
		SELECT $1, id, 1, now(), now() FROM u RETURNING user_id`, account, email, name).Scan(&user)
	if err != nil {
		return 0, fmt.Errorf("helpdesk: add agent %q to account %d: %w", email, account, err)
	}
	return user, nil
}

// CreateInbox creates an API channel of account and its inbox named name,
// and returns the inbox's id.
func (s *Service) CreateInbox(ctx context.Context, account int64, name string) (int64, error) {
	var inbox int64
	err := s.db.QueryRow(ctx, `
		WITH c AS (INSERT INTO channel_api (account_id, identifier, hmac_token, created_at, updated_at)
		           VALUES ($1, gen_random_uuid()::text, replace(gen_random_uuid()::text, '-', ''), now(), now()) RETURNING id)
		INSERT INTO inboxes (channel_id, account_id, name, channel_type, created_at, updated_at)
		SELECT id::integer, $1, $2, 'Channel::Api', now(), now() FROM c RETURNING id`, account, name).Scan(&inbox)
	if err != nil {
		return 0, fmt.Errorf("helpdesk: create inbox %q in account %d: %w", name, account, err)
	}
	return inbox, nil
}

// AddContact creates a contact of account and its address in inbox.
func (s *Service) AddContact(ctx context.Context, account, inbox int64, name, email string) (Contact, error) {
	c := Contact{Account: account}
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `INSERT INTO contacts (name, email, account_id, created_at, updated_at) VALUES ($1, $2, $3, now(), now()) RETURNING id`,
			name, email, account).Scan(&c.ID); err != nil {
			return err
		}
		var err error
		c.ContactInbox, err = connect(ctx, tx, c.ID, inbox)
		return err
	})
	if err != nil {
		return Contact{}, fmt.Errorf("helpdesk: add contact %q to account %d: %w", email, account, err)
	}
	return c, nil
}

// ConnectContact gives contact an address in inbox and returns its id: a
// row of contact_inboxes, which reaches the account only through the two.
func (s *Service) ConnectContact(ctx context.Context, contact, inbox int64) (int64, error) {
	id, err := connect(ctx, s.db, contact, inbox)
	if err != nil {
		return 0, fmt.Errorf("helpdesk: connect contact %d to inbox %d: %w", contact, inbox, err)
	}
	return id, nil
}

func connect(ctx context.Context, db interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}, contact, inbox int64,
) (int64, error) {
	var id int64
	err := db.QueryRow(ctx, `INSERT INTO contact_inboxes (contact_id, inbox_id, source_id, pubsub_token, created_at, updated_at)
		VALUES ($1, $2, gen_random_uuid()::text, replace(gen_random_uuid()::text, '-', ''), now(), now()) RETURNING id`, contact, inbox).Scan(&id)
	return id, err
}

// CreateConversation opens a conversation of contact in inbox. Its display
// id comes from the account's own sequence, a side effect the fence does
// not see (and that a deletion drops), so the account is admitted first.
func (s *Service) CreateConversation(ctx context.Context, inbox int64, contact Contact) (Conversation, error) {
	c := Conversation{Account: contact.Account, Inbox: inbox}
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		if err := s.admit(ctx, tx, contact.Account); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `INSERT INTO conversations (account_id, inbox_id, contact_id, contact_inbox_id, created_at, updated_at)
			VALUES ($1, $2, $3, $4, now(), now()) RETURNING id, display_id`,
			contact.Account, inbox, contact.ID, contact.ContactInbox).Scan(&c.ID, &c.DisplayID)
	})
	if err != nil {
		return Conversation{}, fmt.Errorf("helpdesk: create conversation in account %d: %w", contact.Account, err)
	}
	return c, nil
}

// PostMessage posts content in conversation as an agent and returns the
// message's id.
func (s *Service) PostMessage(ctx context.Context, c Conversation, content string) (int64, error) {
	var id int64
	err := s.db.QueryRow(ctx, `INSERT INTO messages (content, account_id, inbox_id, conversation_id, message_type, sender_type, created_at, updated_at)
		VALUES ($1, $2, $3, $4, 1, 'User', now(), now()) RETURNING id`, content, c.Account, c.Inbox, c.ID).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("helpdesk: post in conversation %d of account %d: %w", c.ID, c.Account, err)
	}
	return id, nil
}

// AttachFile stores body as a file of message, as ActiveStorage does: the
// object goes under a new random key at the bucket's root, listed in an
// active_storage_blobs row that an active_storage_attachments row links to
// the message's attachment. It returns the object key. The account is
// admitted first, and the rows are written before the object, in one
// transaction: an object is stored only once the rows that list it are in
// place, so a refused or failed attach leaves no object no row names.
func (s *Service) AttachFile(ctx context.Context, account, message int64, filename string, body []byte) (string, error) {
	key, err := s.newKey()
	if err != nil {
		return "", fmt.Errorf("helpdesk: attach %q to message %d: %w", filename, message, err)
	}
	sum := md5.Sum(body) //nolint:gosec // see the import
	err = pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		if err := s.admit(ctx, tx, account); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `
			WITH a AS (INSERT INTO attachments (file_type, message_id, account_id, extension, created_at, updated_at)
			           VALUES (0, $1, $2, 'txt', now(), now()) RETURNING id),
			     b AS (INSERT INTO active_storage_blobs (key, filename, content_type, metadata, byte_size, checksum, service_name, created_at)
			           VALUES ($3, $4, 'text/plain', '{"identified":true}', $5, $6, 's3', now()) RETURNING id)
			INSERT INTO active_storage_attachments (name, record_type, record_id, blob_id, created_at)
			SELECT 'file', 'Attachment', a.id, b.id, now() FROM a, b`,
			message, account, key, filename, len(body), base64.StdEncoding.EncodeToString(sum[:]))
		if err != nil {
			return err
		}
		if _, err := s.objects.PutObject(ctx, &s3.PutObjectInput{
			Bucket: aws.String(s.bucket), Key: aws.String(key), Body: bytes.NewReader(body),
		}); err != nil {
			return fmt.Errorf("put object: %w", err)
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("helpdesk: attach %q to message %d of account %d: %w", filename, message, account, err)
	}
	return key, nil
}

// blobKey returns a new ActiveStorage key: 28 random lowercase base-36
// characters.
func blobKey() (string, error) {
	const alphabet = "0123456789abcdefghijklmnopqrstuvwxyz"
	raw := make([]byte, 28)
	if _, err := rand.Read(raw); err != nil {
		return "", fmt.Errorf("random blob key: %w", err)
	}
	for i, b := range raw {
		raw[i] = alphabet[int(b)%len(alphabet)]
	}
	return string(raw), nil
}

// AddLabel creates the label title in account and returns its id.
func (s *Service) AddLabel(ctx context.Context, account int64, title string) (int64, error) {
	var id int64
	if err := s.db.QueryRow(ctx, `INSERT INTO labels (title, account_id, created_at, updated_at) VALUES ($1, $2, now(), now()) RETURNING id`,
		title, account).Scan(&id); err != nil {
		return 0, fmt.Errorf("helpdesk: add label %q to account %d: %w", title, account, err)
	}
	return id, nil
}

// Campaign is a campaign of an account, with the display id its account's
// sequence gave it.
type Campaign struct {
	ID, Account int64
	DisplayID   int
}

// CreateCampaign creates a campaign of inbox in account, admitting the
// account first like CreateConversation.
func (s *Service) CreateCampaign(ctx context.Context, account, inbox int64, title, message string) (Campaign, error) {
	c := Campaign{Account: account}
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		if err := s.admit(ctx, tx, account); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `INSERT INTO campaigns (title, message, account_id, inbox_id, created_at, updated_at)
			VALUES ($1, $2, $3, $4, now(), now()) RETURNING id, display_id`, title, message, account, inbox).Scan(&c.ID, &c.DisplayID)
	})
	if err != nil {
		return Campaign{}, fmt.Errorf("helpdesk: create campaign %q in account %d: %w", title, account, err)
	}
	return c, nil
}

// SetEmailTemplate sets account's own version of the email template name.
func (s *Service) SetEmailTemplate(ctx context.Context, account int64, name, body string) error {
	if _, err := s.db.Exec(ctx, `INSERT INTO email_templates (name, body, account_id, created_at, updated_at) VALUES ($1, $2, $3, now(), now())`,
		name, body, account); err != nil {
		return fmt.Errorf("helpdesk: set email template %q of account %d: %w", name, account, err)
	}
	return nil
}

// SetInstallationEmailTemplate sets the installation's own email template
// name, which every account without a version of its own uses: a row whose
// account_id is NULL.
func (s *Service) SetInstallationEmailTemplate(ctx context.Context, name, body string) error {
	if _, err := s.db.Exec(ctx, `INSERT INTO email_templates (name, body, account_id, created_at, updated_at) VALUES ($1, $2, NULL, now(), now())`,
		name, body); err != nil {
		return fmt.Errorf("helpdesk: set installation email template %q: %w", name, err)
	}
	return nil
}

// SetOnline marks user online in account's presence set, scored by the
// database's clock, admitting the account first.
func (s *Service) SetOnline(ctx context.Context, account, user int64) error {
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		if err := s.admit(ctx, tx, account); err != nil {
			return err
		}
		var now float64
		if err := tx.QueryRow(ctx, `SELECT extract(epoch FROM now())::float8`).Scan(&now); err != nil {
			return err
		}
		if err := s.cache.ZAdd(ctx, PresenceKey(account), redis.Z{Score: now, Member: strconv.FormatInt(user, 10)}).Err(); err != nil {
			return fmt.Errorf("redis zadd: %w", err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("helpdesk: set user %d online in account %d: %w", user, account, err)
	}
	return nil
}
