package helpdesk_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	cdt "github.com/tombstoneworks/communitydeletion/communitydeletiontest"
	"github.com/tombstoneworks/communitydeletion/examples/helpdesk"
)

var errRefused = errors.New("refused by the test's admission")

// admissions records the accounts the service asked to admit, refusing
// those in refuse: the service before it adopted community deletion, with
// an admission the test controls.
type admissions struct {
	asked  []int64
	refuse map[int64]bool
}

func (a *admissions) admit(_ context.Context, _ pgx.Tx, account int64) error {
	a.asked = append(a.asked, account)
	if a.refuse[account] {
		return errRefused
	}
	return nil
}

func requireSQLState(t *testing.T, err error, code string) {
	t.Helper()
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, code, pgErr.Code, pgErr.Message)
}

// TestHelpdeskSchemaBeforeAdoption runs the service's write paths for three
// accounts on its own schema (migration 00001 only), as the application's
// login: per-account display ids from sequences the account's insert made
// as the migrating role, files listed in active_storage_blobs and reached
// through active_storage_attachments, and side effects admitted before they
// happen.
func TestHelpdeskSchemaBeforeAdoption(t *testing.T) {
	ctx := t.Context()
	kit := cdt.Start(t, cdt.WithServiceMigrations(helpdesk.MigrateSchemaOnly))
	owner, err := pgxpool.New(ctx, kit.URL(cdt.RoleOwner))
	require.NoError(t, err)
	t.Cleanup(owner.Close)
	var migrator string
	require.NoError(t, owner.QueryRow(ctx, `SELECT current_user`).Scan(&migrator))
	// What 00002 grants the application's role, without the adoption.
	_, err = owner.Exec(ctx, `GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO community_deletion_serving;
		GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO community_deletion_serving`)
	require.NoError(t, err)
	db, err := pgxpool.New(ctx, kit.URL(cdt.RoleServing))
	require.NoError(t, err)
	t.Cleanup(db.Close)
	redisOpts, err := redis.ParseURL(redisSrv.URL)
	require.NoError(t, err)
	rdb := redis.NewClient(redisOpts)
	t.Cleanup(func() { _ = rdb.Close() })
	adm := &admissions{refuse: map[int64]bool{}}
	svc, err := helpdesk.New(db, s3srv.Client(""), s3srv.Bucket, rdb, adm.admit)
	require.NoError(t, err)

	require.NoError(t, svc.SetInstallationEmailTemplate(ctx, "conversation_assigned", "Hello"))
	type seeded struct {
		account int64
		inbox   int64
		contact helpdesk.Contact
		key     string
	}
	var accounts []seeded
	for i := range 3 {
		account, err := svc.CreateAccount(ctx, fmt.Sprintf("account %d", i))
		require.NoError(t, err)
		agent, err := svc.AddAgent(ctx, account, fmt.Sprintf("agent%d@example.test", i), "Agent")
		require.NoError(t, err)
		inbox, err := svc.CreateInbox(ctx, account, "support")
		require.NoError(t, err)
		contact, err := svc.AddContact(ctx, account, inbox, "Ada", fmt.Sprintf("ada%d@example.test", i))
		require.NoError(t, err)
		first, err := svc.CreateConversation(ctx, inbox, contact)
		require.NoError(t, err)
		second, err := svc.CreateConversation(ctx, inbox, contact)
		require.NoError(t, err)
		require.Equal(t, []int{1, 2}, []int{first.DisplayID, second.DisplayID}, "display ids count per account")
		message, err := svc.PostMessage(ctx, first, "hello")
		require.NoError(t, err)
		key, err := svc.AttachFile(ctx, account, message, "notes.txt", []byte("notes of "+strconv.Itoa(i)))
		require.NoError(t, err)
		_, err = svc.AddLabel(ctx, account, "billing")
		require.NoError(t, err)
		campaign, err := svc.CreateCampaign(ctx, account, inbox, "welcome", "Hi")
		require.NoError(t, err)
		require.Equal(t, 1, campaign.DisplayID, "campaign display ids count per account")
		require.NoError(t, svc.SetEmailTemplate(ctx, account, "conversation_assigned", "Hi from "+strconv.Itoa(i)))
		require.NoError(t, svc.SetOnline(ctx, account, agent))
		require.Equal(t, []int64{account, account, account, account, account}, adm.asked, "conversations, file, campaign and presence of account %d are admitted", account)
		adm.asked = nil
		accounts = append(accounts, seeded{account: account, inbox: inbox, contact: contact, key: key})
	}

	for _, a := range accounts {
		for _, prefix := range []string{"conv_dpid_seq_", "camp_dpid_seq_"} {
			var seqOwner string
			require.NoError(t, owner.QueryRow(ctx, `SELECT pg_get_userbyid(relowner) FROM pg_class WHERE oid = to_regclass($1)`,
				"public."+prefix+strconv.FormatInt(a.account, 10)).Scan(&seqOwner), "sequence %s%d", prefix, a.account)
			require.Equal(t, migrator, seqOwner, "the per-account sequence is the migrating role's, not the application's")
		}
		var listed string // the account's file, reached from its rows
		require.NoError(t, db.QueryRow(ctx, `SELECT b.key FROM attachments t
			JOIN active_storage_attachments a ON a.record_type = 'Attachment' AND a.record_id = t.id
			JOIN active_storage_blobs b ON b.id = a.blob_id WHERE t.account_id = $1`, a.account).Scan(&listed))
		require.Equal(t, a.key, listed)
		_, err := s3srv.Client("").HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(s3srv.Bucket), Key: aws.String(a.key)})
		require.NoError(t, err, "the object under the listed key")
		require.Equal(t, int64(1), rdb.Exists(ctx, helpdesk.PresenceKey(a.account)).Val())
	}
	var kept int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM email_templates WHERE account_id IS NULL`).Scan(&kept))
	require.Equal(t, 1, kept, "the installation's template, a row of no account")

	// The application's login can neither make, use nor drop an account's
	// sequence itself: only the triggers, running as their owner, can.
	seq := "public.conv_dpid_seq_" + strconv.FormatInt(accounts[0].account, 10)
	_, err = db.Exec(ctx, `SELECT nextval($1::regclass)`, seq)
	requireSQLState(t, err, pgerrcode.InsufficientPrivilege)
	_, err = db.Exec(ctx, `DROP SEQUENCE `+seq)
	requireSQLState(t, err, pgerrcode.InsufficientPrivilege)
	_, err = db.Exec(ctx, `CREATE SEQUENCE public.conv_dpid_seq_999999`)
	requireSQLState(t, err, pgerrcode.InsufficientPrivilege)

	// A sequence name someone already took refuses the account, which is
	// not created, rather than adopt the sequence.
	var next int64
	require.NoError(t, owner.QueryRow(ctx, `SELECT last_value + 1 FROM accounts_id_seq`).Scan(&next))
	_, err = owner.Exec(ctx, fmt.Sprintf(`CREATE SEQUENCE public.camp_dpid_seq_%d`, next))
	require.NoError(t, err)
	_, err = svc.CreateAccount(ctx, "squatted")
	requireSQLState(t, err, pgerrcode.DuplicateTable)
	var squatted int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM accounts WHERE name = 'squatted'`).Scan(&squatted))
	require.Zero(t, squatted)

	// A refused admission stops the side effect before it happens: no
	// display id taken, no row, no object, no presence.
	a := accounts[1]
	adm.refuse[a.account] = true
	_, err = svc.CreateConversation(ctx, a.inbox, a.contact)
	require.ErrorIs(t, err, errRefused)
	refusedKey := "refused" + strconv.FormatInt(a.account, 10) + s3srv.Bucket
	keyed, err := helpdesk.New(db, s3srv.Client(""), s3srv.Bucket, rdb, adm.admit)
	require.NoError(t, err)
	helpdesk.UseBlobKey(keyed, refusedKey)
	_, err = keyed.AttachFile(ctx, a.account, 1, "late.txt", []byte("late"))
	require.ErrorIs(t, err, errRefused)
	_, err = s3srv.Client("").HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(s3srv.Bucket), Key: aws.String(refusedKey)})
	var missing *types.NotFound
	require.ErrorAs(t, err, &missing, "no object for a refused attach")
	require.NoError(t, rdb.Del(ctx, helpdesk.PresenceKey(a.account)).Err())
	require.ErrorIs(t, svc.SetOnline(ctx, a.account, 1), errRefused)
	require.Equal(t, int64(0), rdb.Exists(ctx, helpdesk.PresenceKey(a.account)).Val())
	delete(adm.refuse, a.account)
	c, err := svc.CreateConversation(ctx, a.inbox, a.contact)
	require.NoError(t, err)
	require.Equal(t, 3, c.DisplayID, "the refused conversation took no display id")

	// The rows go in before the object: an attach whose rows fail (a key
	// already listed) leaves the object under that key as it was.
	helpdesk.UseBlobKey(keyed, accounts[2].key)
	_, err = keyed.AttachFile(ctx, accounts[2].account, 1, "clash.txt", []byte("overwritten"))
	requireSQLState(t, err, pgerrcode.UniqueViolation)
	obj, err := s3srv.Client("").GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s3srv.Bucket), Key: aws.String(accounts[2].key)})
	require.NoError(t, err)
	body, err := io.ReadAll(obj.Body)
	require.NoError(t, err)
	require.NoError(t, obj.Body.Close())
	require.Equal(t, "notes of 2", string(body))
}
