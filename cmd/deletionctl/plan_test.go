package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tombstoneworks/communitydeletion/internal/ephemeralpg"
	"github.com/tombstoneworks/communitydeletion/internal/fixture"
	"github.com/tombstoneworks/communitydeletion/lifecycle"
)

// planOf runs plan --json as the operator with args and decodes it.
func (db *testDB) planOf(t *testing.T, args ...string) deletionPlan {
	t.Helper()
	var p deletionPlan
	out := db.okAs(t, fixture.RoleOperator, append([]string{"plan", "--json"}, args...)...)
	require.NoError(t, json.Unmarshal([]byte(out), &p), out)
	return p
}

// tablesOf maps a plan's tables by name.
func tablesOf(p deletionPlan) map[string]planTable {
	m := map[string]planTable{}
	for _, t := range p.Tables {
		m[t.Table] = t
	}
	return m
}

// frozenInventory is request id's frozen inventory, from inspect --json.
func (db *testDB) frozenInventory(t *testing.T, id string) lifecycle.FrozenInventory {
	t.Helper()
	var rep struct {
		Request struct {
			Inventory *lifecycle.FrozenInventory `json:"inventory"`
		} `json:"request"`
	}
	require.NoError(t, json.Unmarshal([]byte(db.ok(t, "inspect", "--request", id, "--json")), &rep))
	require.NotNil(t, rep.Request.Inventory)
	return *rep.Request.Inventory
}

// plan shows, before anything is fenced, every registered table in purge
// order with its rows and action, every object prefix with its objects
// (counted only in a store it is given), the cache patterns, the excluded
// tables, the grace period and the protection. Once the request is
// inventoried its figures are the frozen inventory's, beside what the
// community holds now.
func TestPlanShowsWhatADeletionRemoves(t *testing.T) {
	t.Parallel()
	db := setup(t)
	ctx := t.Context()
	_, err := db.pool.Exec(ctx, `INSERT INTO community_deletion.community_deletion_storage_layout (kind, template, reason)
		VALUES ('cache', 'app:{tenant}:*', 'sessions')`)
	require.NoError(t, err)
	_, err = db.pool.Exec(ctx, "CREATE TABLE partner_notes (id bigint PRIMARY KEY, community_id uuid)")
	require.NoError(t, err)
	_, err = db.pool.Exec(ctx, "SELECT community_deletion.exclude_table('public.partner_notes', 'notes of the partner system')")
	require.NoError(t, err)

	community, host := db.createCommunity(t)
	insert := func(sql string) {
		t.Helper()
		_, err := db.pool.Exec(ctx, sql, community)
		require.NoError(t, err)
	}
	insert("INSERT INTO fixture_members (community_id, handle) SELECT $1, 'm' || g FROM generate_series(1, 3) g")
	insert("INSERT INTO fixture_activity (community_id, kind) SELECT $1, 'seen' FROM generate_series(1, 5)")
	insert("INSERT INTO fixture_audit_events (community_id, action) VALUES ($1, 'a'), ($1, 'b')")
	dir, _ := writeFiles(t, community, 3)
	upload := filepath.Join(dir, "uploads", community.String(), "u.bin")
	require.NoError(t, os.MkdirAll(filepath.Dir(upload), 0o755))
	require.NoError(t, os.WriteFile(upload, []byte("upload"), 0o644))
	media, uploads := "media/"+community.String()+"/", "uploads/"+community.String()+"/"
	id := db.submit(t, host, "alice")

	// Submitted: everything counted now; the objects only in a store.
	p := db.planOf(t, id)
	require.Equal(t, sourceLive, p.Source)
	require.Equal(t, id, p.Request.ID)
	require.Equal(t, community.String(), p.Community.ID)
	require.Equal(t, host, p.Community.Host)
	require.Equal(t, claimNotInventoried, p.Claim.Status)
	require.Nil(t, p.GraceUntil)
	require.False(t, p.Protection.Protected)
	order, err := fixture.NewClients(t, db.url).Operator.PurgeOrder(ctx)
	require.NoError(t, err)
	var names []string
	for i, pt := range p.Tables {
		names = append(names, pt.Table)
		require.NotNil(t, pt.Order, pt.Table)
		require.Equal(t, i+1, *pt.Order)
		require.Equal(t, pt.RowsNow, pt.Rows, "counted now: %s", pt.Table)
	}
	require.Equal(t, append([]string{"fixture_audit_events"}, order...), names, "the nullify table first, then the purge order")
	tables := tablesOf(p)
	require.Equal(t, "nullify", tables["fixture_audit_events"].Action)
	require.Equal(t, "delete", tables["fixture_members"].Action)
	require.EqualValues(t, 3, *tables["fixture_members"].Rows)
	require.EqualValues(t, 5, *tables["fixture_activity"].Rows)
	require.EqualValues(t, 2, *tables["fixture_audit_events"].Rows)
	require.EqualValues(t, 10, *p.Totals.Rows)
	require.Equal(t, []planPrefix{{Prefix: media}, {Prefix: uploads}}, p.Objects, "not counted without a store")
	require.Nil(t, p.Totals.Objects)
	require.Equal(t, []planPattern{{Pattern: "app:" + community.String() + ":*"}}, p.Cache)
	require.Equal(t, []excludedTable{{Table: "public.partner_notes", Reason: "notes of the partner system", ExcludedBy: "postgres"}}, p.Excluded)
	require.Empty(t, p.Drift)
	p = db.planOf(t, id, "--objects-dir", dir)
	require.EqualValues(t, 3, *p.Objects[0].Objects)
	require.EqualValues(t, 3, *p.Objects[0].ObjectsNow)
	require.EqualValues(t, 1, *p.Objects[1].Objects)
	require.EqualValues(t, 4, *p.Totals.Objects)

	text := db.okAs(t, fixture.RoleOperator, "plan", id)
	for _, want := range []string{
		"plan of request " + id + " (submitted): the deletion of community " + community.String() + " (" + host + ")",
		"claim: not_inventoried: submitted: its inventory is not frozen yet",
		"figures: counted now",
		"tables, in purge order: 7, 10 rows (10 now)",
		"objects, under 2 prefixes: not counted (give --objects URL)",
		"cache, 1 pattern (keys are not counted ahead):\n  app:" + community.String() + ":*",
		"excluded tables, kept: 1\n  public.partner_notes (by postgres): notes of the partner system",
		"catalog drift: none",
	} {
		require.Contains(t, text, want)
	}
	require.Regexp(t, `(?m)^  1 +fixture_audit_events +nullify +2 +2$`, text)

	// Inventoried, then more written: the plan's figures are the frozen
	// inventory's, and "now" is what the purge will find.
	db.ok(t, "inventory", "--request", id, "--objects-dir", dir)
	frozen := db.frozenInventory(t, id)
	insert("INSERT INTO fixture_members (community_id, handle) VALUES ($1, 'late-1'), ($1, 'late-2')")
	late := filepath.Join(dir, "media", community.String(), "late.bin")
	require.NoError(t, os.WriteFile(late, []byte("late"), 0o644))
	p = db.planOf(t, "--request", id, "--objects-dir", dir)
	require.Equal(t, sourceFrozen, p.Source)
	require.Len(t, p.Tables, len(frozen.Schema.ScopedTables))
	var frozenRows int64
	for _, pt := range p.Tables {
		require.Equal(t, frozen.Schema.RowCounts[pt.Table], *pt.Rows, "the frozen inventory's count of %s", pt.Table)
		frozenRows += frozen.Schema.RowCounts[pt.Table]
	}
	require.Equal(t, frozenRows, *p.Totals.Rows)
	require.EqualValues(t, 3, *tablesOf(p)["fixture_members"].Rows)
	require.EqualValues(t, 5, *tablesOf(p)["fixture_members"].RowsNow)
	require.EqualValues(t, 12, *p.Totals.RowsNow)
	require.Len(t, p.Objects, len(frozen.Storage.Prefixes))
	for i, pm := range frozen.Storage.Prefixes {
		require.Equal(t, pm.Prefix, p.Objects[i].Prefix)
		require.Equal(t, pm.ObjectCount, *p.Objects[i].Objects)
		require.Equal(t, pm.TotalBytes, *p.Objects[i].Bytes)
	}
	require.EqualValues(t, 4, *p.Objects[0].ObjectsNow)
	require.EqualValues(t, 5, *p.Totals.ObjectsNow)
	require.Equal(t, claimAwaitingApproval, p.Claim.Status)
	require.Contains(t, db.okAs(t, fixture.RoleOperator, "plan", id), "tables, in purge order: 7, 10 rows (12 now)")

	// Approved with a grace period: the plan says until when.
	db.okAs(t, fixture.RoleApprover, "approve", "--request", id, "--by", "bob", "--grace", "24h")
	p = db.planOf(t, id)
	require.Equal(t, claimInGrace, p.Claim.Status)
	require.NotNil(t, p.GraceUntil)
	require.Equal(t, p.GraceUntil, p.Claim.Until)
	require.WithinDuration(t, time.Now().Add(24*time.Hour), *p.GraceUntil, time.Hour)
	require.Regexp(t, `(?m)^grace period: until `, db.okAs(t, fixture.RoleOperator, "plan", id))

	// Catalog drift: nothing is counted now, the frozen inventory's tables
	// are listed without an order, and the claim says the drift blocks it
	// once the grace period is over.
	_, err = db.pool.Exec(ctx, "CREATE TABLE stray_notes (id bigint PRIMARY KEY, community_id uuid)")
	require.NoError(t, err)
	p = db.planOf(t, id)
	require.Len(t, p.Drift, 1)
	require.Equal(t, "public.stray_notes", p.Drift[0].Table)
	// The drift report says what to do about the table (migration 00026).
	require.True(t, strings.HasPrefix(p.Drift[0].Problem, "unregistered: attach it by its community_id column with "), p.Drift[0].Problem)
	require.Len(t, p.Tables, len(frozen.Schema.ScopedTables))
	for _, pt := range p.Tables {
		require.Nil(t, pt.Order, pt.Table)
		require.Nil(t, pt.RowsNow, pt.Table)
		require.NotNil(t, pt.Rows, pt.Table)
	}
	require.Contains(t, db.okAs(t, fixture.RoleOperator, "plan", id), "catalog drift: 1 row; no deletion destroys anything until each is fixed")
}

// plan --host plans a community without a request, and says when its
// protection would refuse the submission; a request or community that does
// not exist is not found.
func TestPlanByHost(t *testing.T) {
	t.Parallel()
	db := setup(t)
	community, host := db.createCommunity(t)
	_, err := db.pool.Exec(t.Context(), "INSERT INTO fixture_members (community_id, handle) VALUES ($1, 'solo')", community)
	require.NoError(t, err)

	for _, target := range []string{host, community.String()} {
		p := db.planOf(t, "--host", target)
		require.Nil(t, p.Request)
		require.Equal(t, community.String(), p.Community.ID)
		require.Equal(t, sourceLive, p.Source)
		require.Equal(t, claimNoRequest, p.Claim.Status)
		require.EqualValues(t, 1, *tablesOf(p)["fixture_members"].Rows)
	}
	require.Equal(t, host, db.planOf(t, "--host", host).Community.Host)

	db.okAs(t, fixture.RoleOperator, "protect", "--host", host, "--by", "alice", "--reason", "legal hold")
	p := db.planOf(t, "--host", host)
	require.Equal(t, claimProtected, p.Claim.Status)
	require.Contains(t, p.Claim.Reason, `set by "alice": legal hold`)
	require.True(t, p.Protection.Protected)
	text := db.okAs(t, fixture.RoleOperator, "plan", "--host", host)
	require.Contains(t, text, "protection: protected by \"alice\": legal hold")
	require.Contains(t, text, "next: two operators clear it first")

	for _, args := range [][]string{{"plan", uuid.NewString()}, {"plan", "--host", "nowhere.example"}} {
		code, stdout, stderr := db.cliAs(t, fixture.RoleOperator, args...)
		require.Equal(t, exitNotFound, code, stderr)
		require.Empty(t, stdout)
		requireOneLine(t, stderr, "deletionctl: not found: plan of ")
	}
}

// plan changes nothing: it runs whole through a session whose every
// transaction is read only (where submit, which writes, is refused), and
// leaves the request as it was.
func TestPlanIsReadOnly(t *testing.T) {
	t.Parallel()
	db := setup(t)
	community, host := db.createCommunity(t)
	dir, _ := writeFiles(t, community, 2)
	id := db.submit(t, host, "alice")
	db.ok(t, "inventory", "--request", id, "--objects-dir", dir)
	db.okAs(t, fixture.RoleApprover, "approve", "--request", id, "--by", "bob")
	before := db.ok(t, "inspect", "--request", id, "--json")

	fixture.RolePool(t, db.url, fixture.RoleOperator)
	url, err := fixture.RoleConnString(db.url, fixture.RoleOperator)
	require.NoError(t, err)
	readOnly := url + "&default_transaction_read_only=on"
	if !strings.Contains(url, "?") {
		readOnly = url + "?default_transaction_read_only=on"
	}
	for _, args := range [][]string{{"plan", id}, {"plan", id, "--json", "--objects-dir", dir}, {"plan", "--host", host}} {
		code, stdout, stderr := cli(t, append([]string{"--database-url", readOnly}, args...)...)
		require.Equal(t, exitOK, code, "%q: %s", args, stderr)
		require.NotEmpty(t, stdout)
	}
	other, otherHost := db.createCommunity(t)
	_ = other
	code, _, stderr := cli(t, "--database-url", readOnly, "submit", "--host", otherHost, "--by", "alice")
	require.Equal(t, exitFailure, code, stderr)
	requireOneLine(t, stderr, "read-only transaction", "25006")

	after := db.ok(t, "inspect", "--request", id, "--json")
	require.Equal(t, withoutClock(t, before), withoutClock(t, after), "plan changed nothing of the request")
}

// withoutClock drops what inspect --json reads off the clock (the
// progress's as_of) from out.
func withoutClock(t *testing.T, out string) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &m))
	delete(m["progress"].(map[string]any), "as_of")
	return m
}

// plan expands the layout for the tenant's own key (here an integer, which
// names no uuid) and lists what the layout declares besides prefixes: the
// object keys the tenant's rows list in a key source, counted from the
// database (the frozen inventory's count beside the count now once
// inventoried), and the per-tenant sequences the purge drops.
func TestPlanShowsKeysListedInRowsAndSequences(t *testing.T) {
	t.Parallel()
	// Without the fixture, whose uuid-keyed tables would refuse an integer
	// tenant table.
	url := ephemeralpg.NewTestDatabase(t, server, fixture.Template{})
	pool, err := pgxpool.New(t.Context(), url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	db := &testDB{url: url, pool: pool}
	ctx := t.Context()
	_, err = db.pool.Exec(ctx, `
		CREATE TABLE public.accounts (id bigint PRIMARY KEY);
		CREATE TABLE public.blobs (
			id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
			account_id bigint NOT NULL REFERENCES public.accounts (id),
			key text NOT NULL
		);
		CREATE INDEX blobs_account_id_idx ON public.blobs (account_id, id);
		SELECT community_deletion.declare_tenant_table('public.accounts');
		SELECT community_deletion.attach_community_write_fence('public.blobs', 'delete', 'account_id');
		GRANT SELECT (key) ON public.blobs TO community_deletion_operator, community_deletion_executor;
		INSERT INTO community_deletion.community_deletion_storage_layout (kind, template, reason) VALUES
			('objects', 'uploads/{tenant}/', 'uploads'),
			('object_keys', 'public.blobs.key', 'blobs: random keys listed in blobs.key'),
			('sequence', 'public.acct_seq_{tenant}', 'per-account display ids');
		INSERT INTO public.accounts (id) VALUES (42), (421);
		CREATE SEQUENCE public.acct_seq_42;
		CREATE SEQUENCE public.acct_seq_421;
		INSERT INTO public.blobs (account_id, key) VALUES (42, 'k/a'), (42, 'k/b'), (42, 'k/a'), (421, 'k/c')`)
	require.NoError(t, err)

	p := db.planOf(t, "--host", "42")
	require.Equal(t, "42", p.Community.TenantKey)
	require.Empty(t, p.Community.Host, "named by its key, which is not a host")
	var prefixes []string
	for _, o := range p.Objects {
		prefixes = append(prefixes, o.Prefix)
	}
	require.Equal(t, []string{"uploads/42/"}, prefixes, "the template expanded for the tenant's key")
	two := uint64(2)
	require.Equal(t, []planKeySource{{Source: "public.blobs.key", Objects: &two, ObjectsNow: &two}}, p.KeySources, "distinct keys of its rows only")
	require.Equal(t, []planSequence{{Sequence: "public.acct_seq_42"}}, p.Sequences)
	require.Equal(t, 1, p.Totals.KeySources)
	require.Equal(t, &two, p.Totals.Keys)

	id := db.submit(t, "42", "alice")
	db.ok(t, "inventory", "--request", id, "--store-empty")
	frozen := db.frozenInventory(t, id)
	require.Len(t, frozen.Storage.KeySources, 1)
	_, err = db.pool.Exec(ctx, "INSERT INTO public.blobs (account_id, key) VALUES (42, 'k/d')")
	require.NoError(t, err)
	p = db.planOf(t, id)
	three := uint64(3)
	require.Equal(t, sourceFrozen, p.Source)
	require.Equal(t, []planKeySource{{Source: "public.blobs.key", Objects: &frozen.Storage.KeySources[0].ObjectCount, ObjectsNow: &three}}, p.KeySources)
	require.Equal(t, two, frozen.Storage.KeySources[0].ObjectCount, "the plan's figure is the frozen inventory's")

	text := db.okAs(t, fixture.RoleOperator, "plan", id)
	require.Contains(t, text, "\nobjects listed in the tenant's rows, in 1 column: 2 (3 now)\n")
	require.Regexp(t, `(?m)^  public\.blobs\.key +2 +3$`, text)
	require.Contains(t, text, "\nper-tenant sequences, dropped: 1\n  public.acct_seq_42\n")
}
