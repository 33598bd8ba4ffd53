package helpdesk_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	cdt "github.com/tombstoneworks/communitydeletion/communitydeletiontest"
	"github.com/tombstoneworks/communitydeletion/examples/helpdesk"
	"github.com/tombstoneworks/communitydeletion/executor/rediscache"
	"github.com/tombstoneworks/communitydeletion/executor/s3store"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

func late[T any](_ T, err error) error { return err }

func TestAccountDeletion(t *testing.T) {
	ctx := t.Context()
	kit := cdt.Start(t, cdt.WithServiceMigrations(helpdesk.Migrate))
	kit.RequireCoverage(t)
	db, err := pgxpool.New(ctx, kit.URL(cdt.RoleServing)) // the application's login
	require.NoError(t, err)
	t.Cleanup(db.Close)
	redisOpts, err := redis.ParseURL(redisSrv.URL)
	require.NoError(t, err)
	rdb := redis.NewClient(redisOpts)
	t.Cleanup(func() { _ = rdb.Close() })
	serving, err := lifecycle.NewServing(ctx, db, nil) // admits the side effects the fence cannot see
	require.NoError(t, err)
	svc, err := helpdesk.New(db, s3srv.Client(""), s3srv.Bucket, rdb, func(ctx context.Context, tx pgx.Tx, account int64) error {
		return serving.GuardTenantTransaction(ctx, tx, lifecycle.IntKey(account))
	})
	require.NoError(t, err)
	require.NoError(t, svc.SetInstallationEmailTemplate(ctx, "conversation_assigned", "Hello")) // a row of no account
	type account struct {
		id, inbox, message, agent int64
		contact                   helpdesk.Contact
		conv                      helpdesk.Conversation
		file                      string // its object key
	}
	seed := func(i int) (a account) { // the service's own write paths
		a.id, err = svc.CreateAccount(ctx, fmt.Sprintf("account %d", i))
		require.NoError(t, err)
		a.agent, err = svc.AddAgent(ctx, a.id, fmt.Sprintf("agent%d@example.test", i), "Agent")
		require.NoError(t, err)
		a.inbox, err = svc.CreateInbox(ctx, a.id, "support")
		require.NoError(t, err)
		a.contact, err = svc.AddContact(ctx, a.id, a.inbox, "Ada", fmt.Sprintf("ada%d@example.test", i))
		require.NoError(t, err)
		if a.conv, err = svc.CreateConversation(ctx, a.inbox, a.contact); err == nil {
			a.message, err = svc.PostMessage(ctx, a.conv, "hello")
		}
		require.NoError(t, err)
		a.file, err = svc.AttachFile(ctx, a.id, a.message, "notes.txt", []byte("notes"))
		require.NoError(t, errors.Join(err, late(svc.AddLabel(ctx, a.id, "billing")), late(svc.CreateCampaign(ctx, a.id, a.inbox, "welcome", "Hi")),
			svc.SetEmailTemplate(ctx, a.id, "conversation_assigned", "Hi"), svc.SetOnline(ctx, a.id, a.agent)))
		return a
	}
	d, bystanders := seed(0), []account{seed(1), seed(2)}
	objects, err := s3store.New(s3srv.Client(""), s3store.Options{Bucket: s3srv.Bucket})
	require.NoError(t, err)
	cache, err := rediscache.New(rdb, rediscache.Options{Patterns: []string{"ONLINE_PRESENCE::{community}::*"}})
	require.NoError(t, err)
	kit.DeleteAndVerify(t, cdt.DeleteParams{Tenant: lifecycle.IntKey(d.id), Objects: objects, Cache: cache, // object keys: from the layout
		WritePaths: []func(context.Context) error{
			func(ctx context.Context) error { return late(svc.CreateConversation(ctx, d.inbox, d.contact)) },
			func(ctx context.Context) error { return late(svc.PostMessage(ctx, d.conv, "late")) },
			func(ctx context.Context) error { return late(svc.AttachFile(ctx, d.id, d.message, "late.txt", nil)) },
			func(ctx context.Context) error { return late(svc.ConnectContact(ctx, d.contact.ID, d.inbox)) },
			func(ctx context.Context) error { return late(svc.AddLabel(ctx, d.id, "late")) },
			func(ctx context.Context) error { return late(svc.CreateCampaign(ctx, d.id, d.inbox, "late", "x")) },
			func(ctx context.Context) error { return svc.SetEmailTemplate(ctx, d.id, "late", "x") },
			func(ctx context.Context) error { return svc.SetOnline(ctx, d.id, d.agent) },
		}})
	sequences := func(a account) (n int) { // its display-id sequences
		require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM pg_class WHERE relkind = 'S' AND relnamespace = 'public'::regnamespace AND relname IN ('conv_dpid_seq_' || $1::bigint::text, 'camp_dpid_seq_' || $1::bigint::text)`, a.id).Scan(&n))
		return n
	}
	left, err := objects.Any(ctx, d.file)
	require.False(t, err != nil || left || sequences(d) != 0, "the deleted account's file or sequences are left (%v)", err)
	for _, b := range bystanders {
		kept, err := objects.Any(ctx, b.file)
		require.True(t, err == nil && kept && sequences(b) == 2 && rdb.Exists(ctx, helpdesk.PresenceKey(b.id)).Val() == 1,
			"account %d's file, sequences or presence are gone (%v)", b.id, err)
	}
	var installation int // the installation's template, a row of no account
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM email_templates WHERE account_id IS NULL`).Scan(&installation))
	require.Equal(t, 1, installation)
}
