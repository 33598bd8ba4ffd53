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
	"sort"

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

	r.Absence = absence(details[receipt.StageLogicallyVerified], len(manifest.Prefixes))
	return r, nil
}

// CacheNamespacePattern is the pattern a receipt names for the cache
// entries of a tenant when the cache purge did not record a pattern of its
// own: every entry of the tenant's cache namespace.
func CacheNamespacePattern(tenant TenantKey) string {
	return "namespace of community " + tenant.String()
}

// absence is the absence proof per store from the detail of the
// verify_cross_store_absence checkpoint, as the executor writes it
// ({"postgres": true, "objects": [prefixes], "cache": true}). PostgreSQL is
// always proven: the purge's final transaction refuses to tombstone the
// community while any registered 'delete' table holds one of its rows. The
// object store and the cache are listed when the detail says they were
// checked.
func absence(detail []byte, prefixes int) []receipt.Absence {
	var checked struct {
		Objects []string `json:"objects"`
		Cache   bool     `json:"cache"`
	}
	// A detail in another shape proves nothing beyond PostgreSQL.
	_ = json.Unmarshal(detail, &checked)
	out := []receipt.Absence{}
	if checked.Cache {
		out = append(out, receipt.Absence{Store: receipt.StoreCache, Verified: true,
			Detail: "no entry of the community left in the cache"})
	}
	if checked.Objects != nil {
		out = append(out, receipt.Absence{Store: receipt.StoreObjects, Verified: true,
			Detail: fmt.Sprintf("%d of %d manifest prefixes listed empty", len(checked.Objects), prefixes)})
	}
	out = append(out, receipt.Absence{Store: receipt.StorePostgres, Verified: true,
		Detail: "no row of the community in any registered delete table; every nullify table cleared"})
	return out
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
