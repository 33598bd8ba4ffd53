package lifecycle

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	dbgen "github.com/tombstoneworks/communitydeletion/db/gen"
	"github.com/tombstoneworks/communitydeletion/receipt"
)

// The checkpoint units that move a request from one stage to the next, by
// the stage they complete: the time each was completed is the time the
// request entered the following stage.
var receiptStageUnits = []struct {
	from  Stage
	unit  string
	enter string
}{
	{StageApproved, "activate_fence", receipt.StageFenced},
	{StageFenced, "serving_writes_drained", receipt.StageDrained},
	{StageDrained, "remove_storage_bindings", receipt.StageBindingsRemoved},
	{StageBindingsRemoved, purgeTombstoneUnit, receipt.StagePostgresPurged},
	{StagePostgresPurged, "purge_cache_namespace", receipt.StageCachePurged},
	{StageCachePurged, "verify_cross_store_absence", receipt.StageLogicallyVerified},
}

// Digest returns the lowercase hex SHA-256 of the manifest's canonical
// encoding: compact JSON of its fields in declaration order under their
// json tag names, a nil Prefixes written as [], no HTML escaping. A
// receipt's manifest_digest is this digest of the destructive storage
// manifest.
func (m StorageManifest) Digest() (string, error) {
	if m.Prefixes == nil {
		m.Prefixes = []PrefixManifest{}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(m); err != nil {
		return "", invalidf("encode storage manifest: %w", err)
	}
	sum := sha256.Sum256(bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
	return hex.EncodeToString(sum[:]), nil
}

// writeReceipt builds, signs (with key, or unsigned when key is nil) and
// inserts the receipt of the request token holds, which the caller's
// transaction has just completed. Each statement reads one row or an
// index-bounded handful; the chain head's advisory lock is taken last, so
// concurrent completions queue for the head without deadlocking.
func writeReceipt(ctx context.Context, q *dbgen.Queries, token LeaseToken, key ed25519.PrivateKey) error {
	facts, err := q.ReceiptFacts(ctx, token.RequestID)
	if err != nil {
		return fmt.Errorf("read the receipt's facts: %w", err)
	}
	units := make([]string, len(receiptStageUnits))
	stages := make([]string, len(receiptStageUnits))
	for i, u := range receiptStageUnits {
		units[i], stages[i] = u.unit, string(u.from)
	}
	checkpoints, err := q.ReceiptStageCheckpoints(ctx, dbgen.ReceiptStageCheckpointsParams{
		RequestID: token.RequestID, Stages: stages, UnitKeys: units,
	})
	if err != nil {
		return fmt.Errorf("read the receipt's checkpoints: %w", err)
	}
	r, err := receiptBody(token.RequestID, &facts, checkpoints)
	if err != nil {
		return fmt.Errorf("build the receipt of deletion %s: %w", token.RequestID, err)
	}
	exclusions, err := q.ReceiptExclusions(ctx, token.RequestID)
	if err != nil {
		return fmt.Errorf("read the exclusions in force during deletion %s: %w", token.RequestID, err)
	}
	r.Excluded = receiptExclusions(exclusions)
	head, err := q.ReceiptChainHead(ctx)
	if err != nil {
		return fmt.Errorf("read the receipt chain's head: %w", err)
	}
	if head.SchemaVersion < 1 {
		return refusef("the schema version is unknown: no migration is recorded as applied")
	}
	r.SchemaVersion = head.SchemaVersion
	r.Sequence, r.PreviousHash = head.Sequence+1, head.BodySha256
	var previous *string
	if head.Sequence > 0 {
		previous = &head.BodySha256
	}
	var env receipt.Envelope
	signer := receipt.SignerUnsigned
	if key != nil {
		pub, ok := key.Public().(ed25519.PublicKey)
		if !ok {
			return refusef("the receipt signing key of deletion %s has no Ed25519 public key", token.RequestID)
		}
		env, err = receipt.Sign(r, key)
		signer = receipt.KeyID(pub)
	} else {
		env, err = receipt.Unsigned(r)
	}
	if err != nil {
		return fmt.Errorf("encode the receipt of deletion %s: %w", token.RequestID, err)
	}
	signature := ""
	if len(env.Signature) > 0 {
		signature = base64.StdEncoding.EncodeToString(env.Signature)
	}
	if err := q.ReceiptInsert(ctx, dbgen.ReceiptInsertParams{
		Sequence: r.Sequence, RequestID: token.RequestID, Body: string(env.Body), BodySha256: env.Hash(),
		PreviousSha256: previous, Signature: signature, Signer: signer,
	}); err != nil {
		return fmt.Errorf("insert receipt %d of deletion %s: %w", r.Sequence, token.RequestID, err)
	}
	return nil
}

// receiptExclusions are the receipt's excluded tables: every exclusion in
// force at some time during the deletion, with when a later event ended it.
func receiptExclusions(rows []dbgen.ReceiptExclusionsRow) []receipt.Exclusion {
	excluded := make([]receipt.Exclusion, 0, len(rows))
	for _, e := range rows {
		x := receipt.Exclusion{Table: e.TableName, Reason: e.Reason, ExcludedBy: e.ExcludedBy, ExcludedAt: e.ExcludedAt}
		if e.Ended {
			x.Until = e.EndedAt
		}
		excluded = append(excluded, x)
	}
	return excluded
}

// receiptBody is the receipt of request from what the database recorded,
// without its place in the chain or schema version.
func receiptBody(request uuid.UUID, f *dbgen.ReceiptFactsRow, checkpoints []dbgen.ReceiptStageCheckpointsRow) (receipt.Receipt, error) {
	if f.DeletedAt == nil || f.CompletedAt == nil {
		return receipt.Receipt{}, refusef("the community is not a tombstone or the request is not complete")
	}
	if len(f.InventoryDigest) != sha256.Size {
		return receipt.Receipt{}, refusef("the request has no frozen inventory digest")
	}
	if f.DestructiveStorageManifest == nil {
		return receipt.Receipt{}, refusef("the request has no destructive storage manifest")
	}
	var manifest StorageManifest
	if err := json.Unmarshal(f.DestructiveStorageManifest, &manifest); err != nil {
		return receipt.Receipt{}, refusef("the destructive storage manifest is unreadable: %w", err)
	}
	manifestDigest, err := manifest.Digest()
	if err != nil {
		return receipt.Receipt{}, err
	}
	r := receipt.Receipt{
		Format:          receipt.Format,
		RequestID:       request,
		Community:       receipt.Tenant{ID: f.CommunityID, Host: deref(f.Host), DeletedAt: *f.DeletedAt},
		InventoryDigest: hex.EncodeToString(f.InventoryDigest),
		ManifestDigest:  manifestDigest,
		Tables:          []receipt.Table{},
		Objects:         []receipt.Objects{},
		Cache:           []receipt.Cache{},
		SubmittedBy:     receipt.Operator{Name: f.RequestedBy, Login: orUnrecorded(f.RequestedByRole, "submitter")},
		ApprovedBy:      receipt.Operator{Name: f.ApprovedBy, Login: orUnrecorded(f.ApprovedByRole, "approver")},
		// Equal logins prove the deployment declared shared operator
		// logins when it approved: the approval guard refuses them otherwise.
		OperatorsShareRole: f.OperatorsShareRole || f.RequestedByRole == f.ApprovedByRole,
	}
	for _, p := range manifest.Prefixes {
		if p.ObjectCount > receipt.MaxCount {
			return receipt.Receipt{}, refusef("prefix %q counts %d objects, more than a receipt holds", boundText(p.Prefix, 64), p.ObjectCount)
		}
		// Every key of the destructive manifest was deleted (bindings_removed)
		// and the prefix listed empty (logically_verified).
		r.Objects = append(r.Objects, receipt.Objects{Prefix: p.Prefix, Deleted: int64(p.ObjectCount)})
	}

	r.Stages = []receipt.StageTime{{Stage: receipt.StageSubmitted, At: f.CreatedAt}}
	if f.InventoryFrozenAt != nil {
		r.Stages = append(r.Stages, receipt.StageTime{Stage: receipt.StageInventoried, At: *f.InventoryFrozenAt})
	}
	r.Stages = append(r.Stages, receipt.StageTime{Stage: receipt.StageApproved, At: f.ApprovedAt})
	details := map[string][]byte{}
	for _, u := range receiptStageUnits {
		for _, c := range checkpoints {
			if c.Stage == string(u.from) && c.UnitKey == u.unit && c.CompletedAt != nil {
				r.Stages = append(r.Stages, receipt.StageTime{Stage: u.enter, At: *c.CompletedAt})
				details[u.enter] = c.Detail
			}
		}
	}
	r.Stages = append(r.Stages, receipt.StageTime{Stage: receipt.StageRetentionPending, At: *f.CompletedAt})

	purge, ok := details[receipt.StagePostgresPurged]
	if !ok {
		return receipt.Receipt{}, refusef("the request has no completed %s checkpoint, which records the rows purged", purgeTombstoneUnit)
	}
	var purged purgeTombstoneDetail
	if err := json.Unmarshal(purge, &purged); err != nil {
		return receipt.Receipt{}, refusef("the %s checkpoint's detail is unreadable: %w", purgeTombstoneUnit, err)
	}
	for table, rows := range purged.Deleted {
		r.Tables = append(r.Tables, receipt.Table{Table: table, Mode: receipt.ModeDelete, Rows: rows})
	}
	for table, rows := range purged.Nullified {
		if _, both := purged.Deleted[table]; both {
			return receipt.Receipt{}, refusef("table %q is recorded as both deleted and nullified", boundText(table, 64))
		}
		r.Tables = append(r.Tables, receipt.Table{Table: table, Mode: receipt.ModeNullify, Rows: rows})
	}
	sort.Slice(r.Tables, func(i, j int) bool { return r.Tables[i].Table < r.Tables[j].Table })

	cache := struct {
		Keys    int64  `json:"keys"`
		Pattern string `json:"pattern"`
	}{}
	if detail, ok := details[receipt.StageCachePurged]; ok {
		if err := json.Unmarshal(detail, &cache); err != nil {
			return receipt.Receipt{}, refusef("the cache purge checkpoint's detail is unreadable: %w", err)
		}
		if cache.Pattern == "" {
			cache.Pattern = CacheNamespacePattern(tenantKeyOf(f.CommunityID, f.TenantKey))
		}
		r.Cache = append(r.Cache, receipt.Cache{Pattern: cache.Pattern, Deleted: cache.Keys})
	}

	r.Absence = absence(details[receipt.StageLogicallyVerified], manifest, r.Tables)
	return r, nil
}

// CacheNamespacePattern is the pattern a receipt names for the cache
// entries of a tenant when the cache purge did not record a pattern of its
// own: every entry of the tenant's cache namespace.
func CacheNamespacePattern(tenant TenantKey) string {
	return "namespace of community " + tenant.String()
}

// KindPostgreSQL is the Kind of a receipt's postgres absence proof, and
// KindUnrecorded the Kind of a store whose check the executor did not
// record (an executor before receipt format 2, or a caller of
// EnterLogicallyVerified that passed no AbsenceProof).
const (
	KindPostgreSQL = "postgresql"
	KindUnrecorded = "unrecorded"
)

// StoreCheck is what an executor listed in one store to prove that no
// entry of a community is left: the store's Kind (its adapter: "s3",
// "file", "redis", "memory"…) and what it Checked (the object prefixes it
// listed, the cache key templates it walked), or, when it listed nothing
// that counts, NotChecked saying why. A receipt calls the store verified
// only for a non-empty Checked by a store that is not the in-process cache.
type StoreCheck struct {
	Kind       string   `json:"kind"`
	Checked    []string `json:"checked"`
	NotChecked string   `json:"not_checked,omitempty"`
}

// verified reports whether c is a listing that counts as verified.
func (c StoreCheck) verified() bool {
	return c.NotChecked == "" && len(c.Checked) > 0 && c.Kind != receipt.KindMemory && strings.TrimSpace(c.Kind) != ""
}

// AbsenceStores is what was checked in each store besides PostgreSQL.
type AbsenceStores struct {
	Objects StoreCheck `json:"objects"`
	Cache   StoreCheck `json:"cache"`
}

// AbsenceProof is the detail an executor gives EnterLogicallyVerified:
// PostgreSQL checked (the purge's final transaction proves it in any case)
// and, per store, what was listed. The receipt states it store by store.
type AbsenceProof struct {
	Postgres bool           `json:"postgres"`
	Stores   *AbsenceStores `json:"stores,omitempty"`
}

// readAbsenceProof reads the detail of a verify_cross_store_absence
// checkpoint; a detail in another shape (an executor before receipt
// format 2) has no Stores.
func readAbsenceProof(detail []byte) AbsenceProof {
	var proof AbsenceProof
	if json.Unmarshal(detail, &proof) != nil {
		return AbsenceProof{}
	}
	return proof
}

// checkAbsenceCovers refuses an absence proof that does not cover what the
// deployment declared: with cache templates declared, the cache check must
// be a listing of every one of them; an objects check that lists anything
// must list every prefix of the destructive manifest.
func checkAbsenceCovers(proof AbsenceProof, declaredCache []string, manifest *StorageManifest) error {
	if len(declaredCache) > 0 {
		var c StoreCheck
		if proof.Stores != nil {
			c = proof.Stores.Cache
		}
		if !c.verified() || !containsAll(c.Checked, declaredCache) {
			why := c.NotChecked
			if why == "" && c.Kind == "" {
				why = "no cache check was recorded"
			} else if why == "" {
				why = fmt.Sprintf("the %s cache checked %q", c.Kind, c.Checked)
			}
			return refusef("the deployment declares the cache templates %q, but %s: the cache cannot be verified against the declared layout; give the executor a cache that lists those templates (redis://…?pattern=… for each)",
				declaredCache, boundText(why, 200))
		}
	}
	if proof.Stores != nil && len(proof.Stores.Objects.Checked) > 0 && manifest != nil {
		var prefixes []string
		for _, p := range manifest.Prefixes {
			prefixes = append(prefixes, p.Prefix)
		}
		if !containsAll(proof.Stores.Objects.Checked, prefixes) {
			return refusef("the objects check lists %d prefixes, not every one of the destructive manifest's %d", len(proof.Stores.Objects.Checked), len(prefixes))
		}
	}
	return nil
}

func containsAll(have, want []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return true
}

// absence is the receipt's absence proof per store, from the
// verify_cross_store_absence checkpoint's detail, the destructive
// manifest and the purge's tables. PostgreSQL is proven by the purge's
// final transaction, which refuses to tombstone the community while any
// registered 'delete' table holds one of its rows: the receipt names those
// tables. The object store and the cache are verified only as the detail's
// StoreCheck says, and otherwise not checked, saying why.
func absence(detail []byte, manifest StorageManifest, tables []receipt.Table) []receipt.Absence {
	proof := readAbsenceProof(detail)
	var deleteTables []string
	nullified := 0
	for _, t := range tables {
		if t.Mode == receipt.ModeDelete {
			deleteTables = append(deleteTables, t.Table)
		} else {
			nullified++
		}
	}
	postgres := receipt.Absence{Store: receipt.StorePostgres, Kind: KindPostgreSQL, Checked: deleteTables, Status: receipt.StatusVerified,
		Detail: fmt.Sprintf("no row of the community in any registered delete table; %d nullify tables cleared", nullified)}
	if len(deleteTables) == 0 {
		postgres = receipt.Absence{Store: receipt.StorePostgres, Kind: KindPostgreSQL, Status: receipt.StatusNotChecked,
			Detail: fmt.Sprintf("no registered delete table to prove empty; %d nullify tables cleared", nullified)}
	}
	unrecorded := StoreCheck{Kind: KindUnrecorded,
		NotChecked: "the executor did not record what it listed (an executor before receipt format 2)"}
	objects, cache := unrecorded, unrecorded
	if proof.Stores != nil {
		objects, cache = proof.Stores.Objects, proof.Stores.Cache
	}
	if len(manifest.Prefixes) == 0 && objects.NotChecked == "" {
		objects = StoreCheck{Kind: objects.Kind, NotChecked: "the destructive manifest has no prefix to list"}
	}
	return []receipt.Absence{
		storeAbsence(receipt.StoreCache, cache, "no key of the community matches any checked template, on every node"),
		storeAbsence(receipt.StoreObjects, objects, "every checked prefix of the destructive manifest listed empty"),
		postgres,
	}
}

// storeAbsence is one store's absence proof as c records it.
func storeAbsence(store string, c StoreCheck, verifiedDetail string) receipt.Absence {
	kind := boundText(strings.TrimSpace(c.Kind), 64)
	if kind == "" {
		kind = KindUnrecorded
	}
	if c.verified() {
		checked := slices.DeleteFunc(slices.Compact(slices.Sorted(slices.Values(c.Checked))), func(s string) bool { return s == "" })
		return receipt.Absence{Store: store, Kind: kind, Checked: checked, Status: receipt.StatusVerified, Detail: verifiedDetail}
	}
	why := strings.TrimSpace(c.NotChecked)
	switch {
	case why != "":
	case kind == receipt.KindMemory:
		why = "the in-process cache lists nothing of the deployment's cache"
	default:
		why = "nothing was listed"
	}
	return receipt.Absence{Store: store, Kind: kind, Checked: []string{}, Status: receipt.StatusNotChecked, Detail: boundText(why, 512)}
}

func orUnrecorded(login, who string) string {
	if login == "" {
		return "(" + who + " login not recorded)"
	}
	return login
}

// ReceiptsParams selects receipts in chain order: those after sequence After
// (0 for the first), at most Limit (0 means DefaultReceiptsLimit; at most
// MaxReceiptsLimit).
type ReceiptsParams struct {
	After int64
	Limit int
}

// DefaultReceiptsLimit and MaxReceiptsLimit bound a Receipts call.
const (
	DefaultReceiptsLimit = 100
	MaxReceiptsLimit     = 1000
)

// Receipt returns the receipt of deletion request id as stored: its
// canonical body and signature. It fails with ErrNotFound when the request
// has none (it is not complete, or does not exist).
func (o *Operator) Receipt(ctx context.Context, id uuid.UUID) (receipt.Envelope, error) {
	return o.receipt(ctx, id)
}

// Receipts returns stored receipts in chain order, as p selects them; an
// empty result means none follow p.After.
func (o *Operator) Receipts(ctx context.Context, p ReceiptsParams) ([]receipt.Envelope, error) {
	return o.receipts(ctx, p)
}

// Receipt returns the receipt of deletion request id (see Operator.Receipt).
func (e *Engine) Receipt(ctx context.Context, id uuid.UUID) (receipt.Envelope, error) {
	return e.receipt(ctx, id)
}

func (s *store) receipt(ctx context.Context, id uuid.UUID) (receipt.Envelope, error) {
	var env receipt.Envelope
	err := s.begin(ctx, true, func(tx pgx.Tx) error {
		row, err := dbgen.New(tx).ReceiptGetByRequest(ctx, id)
		if errors.Is(err, pgx.ErrNoRows) {
			return notFoundf("deletion %s has no receipt: it is not complete, or does not exist", id)
		}
		if err != nil {
			return err
		}
		env, err = envelopeFromRow(row.Body, row.Signature)
		return err
	})
	if err != nil {
		return receipt.Envelope{}, fmt.Errorf("read the receipt of deletion %s: %w", id, err)
	}
	return env, nil
}

func (s *store) receipts(ctx context.Context, p ReceiptsParams) ([]receipt.Envelope, error) {
	if p.After < 0 {
		return nil, invalidf("receipts after %d: the sequence starts at 1", p.After)
	}
	if p.Limit < 0 || p.Limit > MaxReceiptsLimit {
		return nil, invalidf("receipt limit %d is outside 0..%d", p.Limit, MaxReceiptsLimit)
	}
	if p.Limit == 0 {
		p.Limit = DefaultReceiptsLimit
	}
	var envs []receipt.Envelope
	err := s.begin(ctx, true, func(tx pgx.Tx) error {
		rows, err := dbgen.New(tx).ReceiptList(ctx, dbgen.ReceiptListParams{After: p.After, MaxRows: int32(p.Limit)}) //nolint:gosec // p.Limit is checked to be at most MaxReceiptsLimit above
		if err != nil {
			return err
		}
		envs = make([]receipt.Envelope, 0, len(rows))
		for _, row := range rows {
			env, err := envelopeFromRow(row.Body, row.Signature)
			if err != nil {
				return err
			}
			envs = append(envs, env)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list receipts after %d: %w", p.After, err)
	}
	return envs, nil
}

// envelopeFromRow is a stored receipt as an Envelope: the body's bytes as
// stored, the signature decoded from base64.
func envelopeFromRow(body, signature string) (receipt.Envelope, error) {
	sig, err := base64.StdEncoding.Strict().DecodeString(signature)
	if err != nil {
		return receipt.Envelope{}, fmt.Errorf("stored receipt signature is not base64: %w", err)
	}
	if len(sig) == 0 {
		sig = nil
	}
	return receipt.Envelope{Body: []byte(body), Signature: sig}, nil
}
