package lifecycle

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	dbgen "github.com/tombstoneworks/communitydeletion/db/gen"
	"github.com/tombstoneworks/communitydeletion/receipt"
)

// RegisteredReceiptKey is the newest row of the deployment's receipt key
// registry (community_deletion_receipt_keys, written only by the schema's
// owner): the key that signs its receipts, or, with KeyID empty, that it
// runs unsigned. PreviousKeyLost records that the key before it was lost,
// so the chain may pass to it without a rotation (and breaks there).
type RegisteredReceiptKey struct {
	Sequence        int64
	KeyID           string
	PublicKey       ed25519.PublicKey
	PreviousKeyLost bool
	Reason          string
	DeclaredBy      string
	DeclaredAt      time.Time
}

// Unsigned reports whether the deployment recorded that it runs unsigned.
func (k RegisteredReceiptKey) Unsigned() bool { return k.KeyID == "" }

// signer is what the registry says a receipt's signer must be.
func (k RegisteredReceiptKey) signer() string {
	if k.Unsigned() {
		return receipt.SignerUnsigned
	}
	return k.KeyID
}

// ReceiptSigning is how a deployment's receipts are signed now: what its
// registry says (nil when nothing is registered) and the key the chain is
// at (ChainKey: the newest entry's signer, or the key a rotation handed the
// chain to; receipt.SignerUnsigned; or "" for an empty chain) at sequence
// ChainSequence.
type ReceiptSigning struct {
	Registered    *RegisteredReceiptKey
	ChainKey      string
	ChainSequence int64
}

// ReceiptKeyCheck is what CheckReceiptKey found: whether this Engine signs
// its receipts (and with which key), and, for the log, a one-line note on
// what that means.
type ReceiptKeyCheck struct {
	Signed bool
	KeyID  string
	// Registered reports that the deployment's registry names this state.
	Registered bool
	Note       string
}

// ReceiptSigning reads the deployment's receipt key registry and the key
// its chain is at.
func (e *Engine) ReceiptSigning(ctx context.Context) (*ReceiptSigning, error) {
	var s *ReceiptSigning
	err := e.tx(ctx, func(q *dbgen.Queries) error {
		var err error
		s, err = readReceiptSigning(ctx, q)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("read how receipts are signed: %w", err)
	}
	return s, nil
}

func readReceiptSigning(ctx context.Context, q *dbgen.Queries) (*ReceiptSigning, error) {
	s := &ReceiptSigning{}
	rows, err := q.ReceiptKeyRegistered(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the receipt key registry: %w", err)
	}
	if len(rows) == 1 {
		row := rows[0]
		k := &RegisteredReceiptKey{Sequence: row.Sequence, KeyID: row.KeyID, PreviousKeyLost: row.PreviousKeyLost,
			Reason: row.Reason, DeclaredBy: row.DeclaredBy, DeclaredAt: row.DeclaredAt}
		if row.Action == "sign" {
			raw, err := base64.StdEncoding.Strict().DecodeString(row.PublicKey)
			if err != nil || len(raw) != ed25519.PublicKeySize || receipt.KeyID(raw) != row.KeyID {
				return nil, refusef("receipt key registry row %d holds a public key that is not key %s", row.Sequence, row.KeyID)
			}
			k.PublicKey = ed25519.PublicKey(raw)
		}
		s.Registered = k
	}
	newest, err := q.ReceiptNewest(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the receipt chain's newest entry: %w", err)
	}
	if len(newest) == 1 {
		s.ChainSequence, s.ChainKey = newest[0].Sequence, newest[0].Signer
		if newest[0].Kind == "rotation" {
			r, err := receipt.ParseRotation([]byte(newest[0].Body))
			if err != nil {
				return nil, refusef("the chain's newest entry, rotation %d, does not parse: %w", newest[0].Sequence, err)
			}
			s.ChainKey = r.NewSigner
		}
	}
	return s, nil
}

// CheckReceiptKey checks the Engine's receipt key against the deployment:
// it refuses (ErrRefused, one line saying what to do) an Engine without the
// registered key, with another key, with a key where the deployment
// recorded that it runs unsigned, without a key while the chain is signed
// (unless the deployment recorded it runs unsigned and a rotation to
// unsigned is written), and with a new key while the chain is at another
// (until a rotation hands it on). An executor calls it before it claims
// anything and logs the returned note: an unsigned executor says so.
func (e *Engine) CheckReceiptKey(ctx context.Context) (ReceiptKeyCheck, error) {
	s, err := e.ReceiptSigning(ctx)
	if err != nil {
		return ReceiptKeyCheck{}, err
	}
	return s.check(e.receiptKey)
}

// keyAdvice names where an executor takes its key from.
const keyAdvice = "--receipt-key FILE or $COMMUNITYDELETION_RECEIPT_KEY, or lifecycle.Opts.ReceiptKey"

func (s *ReceiptSigning) check(key ed25519.PrivateKey) (ReceiptKeyCheck, error) {
	mine := receipt.SignerUnsigned
	if key != nil {
		pub, ok := key.Public().(ed25519.PublicKey)
		if !ok {
			return ReceiptKeyCheck{}, invalidf("the receipt key has no Ed25519 public key")
		}
		mine = receipt.KeyID(pub)
	}
	chainSigned := s.ChainKey != "" && s.ChainKey != receipt.SignerUnsigned
	reg := s.Registered
	switch {
	case reg != nil && !reg.Unsigned() && key == nil:
		return ReceiptKeyCheck{}, refusef("the deployment signs its receipts with key %s (community_deletion_receipt_keys row %d), but this executor has no signing key: give it that key (%s), or have the schema's owner record that the deployment runs unsigned",
			reg.KeyID, reg.Sequence, keyAdvice)
	case reg != nil && !reg.Unsigned() && (mine != reg.KeyID || !reg.PublicKey.Equal(key.Public())):
		return ReceiptKeyCheck{}, refusef("the deployment signs its receipts with key %s (community_deletion_receipt_keys row %d), but this executor's key is %s: give it the registered key, or have the schema's owner register %s",
			reg.KeyID, reg.Sequence, mine, mine)
	case reg != nil && reg.Unsigned() && key != nil:
		return ReceiptKeyCheck{}, refusef("the deployment recorded that it runs unsigned (community_deletion_receipt_keys row %d), but this executor has key %s: run it without a key, or have the schema's owner register the key",
			reg.Sequence, mine)
	case reg != nil && chainSigned && s.ChainKey != mine && !reg.PreviousKeyLost:
		return ReceiptKeyCheck{}, refusef("the receipt chain is signed by key %s up to receipt %d, and the deployment registered %s: hand the chain on with a key rotation signed by %s (deletionctl receipt rotate --old-key FILE), or, if that key is lost, have the schema's owner register %s again with previous_key_lost",
			s.ChainKey, s.ChainSequence, reg.signer(), s.ChainKey, reg.signer())
	case reg == nil && chainSigned && key == nil:
		return ReceiptKeyCheck{}, refusef("the receipt chain is signed by key %s up to receipt %d, but this executor has no signing key, and an unsigned receipt never follows a signed one: give it the key (%s), or have the schema's owner record that the deployment runs unsigned and hand the chain on to unsigned (docs/receipts.md)",
			s.ChainKey, s.ChainSequence, keyAdvice)
	case reg == nil && chainSigned && s.ChainKey != mine:
		return ReceiptKeyCheck{}, refusef("the receipt chain is signed by key %s up to receipt %d, but this executor's key is %s: give it key %s, or have the schema's owner register %s and hand the chain on with a key rotation (deletionctl receipt rotate)",
			s.ChainKey, s.ChainSequence, mine, s.ChainKey, mine)
	}
	c := ReceiptKeyCheck{Signed: key != nil, Registered: reg != nil}
	if key != nil {
		c.KeyID = mine
	}
	switch {
	case reg != nil && reg.Unsigned():
		c.Note = fmt.Sprintf("receipts are unsigned: the deployment recorded that it runs unsigned (community_deletion_receipt_keys row %d: %s)", reg.Sequence, boundText(reg.Reason, 200))
	case reg != nil:
		c.Note = fmt.Sprintf("receipts are signed with key %s, the registered key (community_deletion_receipt_keys row %d)", mine, reg.Sequence)
	case key == nil:
		c.Note = "receipts are unsigned: this executor has no signing key and the deployment registered none; register one (community_deletion_receipt_keys) so that an executor without it refuses to start"
	default:
		c.Note = fmt.Sprintf("receipts are signed with key %s, which the deployment has not registered; register it (community_deletion_receipt_keys) so that an executor without it refuses to start", mine)
	}
	return c, nil
}

// RotateReceiptKey hands the receipt chain on from old, the key it is
// signed with, to what the deployment's registry now names (a new key, or
// unsigned): it appends a key rotation entry, signed by old, that names
// the registered key and its public key, so that one verification follows
// the chain across it. The Engine's own key is not used. It refuses
// (ErrRefused) when old is not the key the chain is at, when nothing or
// the same key is registered, or when the chain is empty or unsigned.
func (e *Engine) RotateReceiptKey(ctx context.Context, old ed25519.PrivateKey) (receipt.Envelope, error) {
	if len(old) != ed25519.PrivateKeySize {
		return receipt.Envelope{}, invalidf("the old receipt key is %d bytes, not an Ed25519 private key", len(old))
	}
	oldPub, ok := old.Public().(ed25519.PublicKey)
	if !ok {
		return receipt.Envelope{}, invalidf("the old receipt key has no Ed25519 public key")
	}
	oldID := receipt.KeyID(oldPub)
	var env receipt.Envelope
	err := e.tx(ctx, func(q *dbgen.Queries) error {
		head, err := q.ReceiptChainHead(ctx)
		if err != nil {
			return fmt.Errorf("read the receipt chain's head: %w", err)
		}
		if head.SchemaVersion < 1 {
			return refusef("the schema version is unknown: no migration is recorded as applied")
		}
		s, err := readReceiptSigning(ctx, q)
		if err != nil {
			return err
		}
		switch {
		case s.ChainKey == "":
			return refusef("the receipt chain is empty: there is no key to hand it on; the first receipt signed by the registered key starts it")
		case s.ChainKey == receipt.SignerUnsigned:
			return refusef("the receipt chain is unsigned: there is no key to hand it on; the first receipt signed by the registered key follows it")
		case s.ChainKey != oldID:
			return refusef("the receipt chain is signed by key %s up to receipt %d, not by the given key %s: give the key the chain is at", s.ChainKey, s.ChainSequence, oldID)
		case s.Registered == nil:
			return refusef("nothing is registered to hand the chain on to: have the schema's owner register the new key (or record that the deployment runs unsigned) in community_deletion_receipt_keys first")
		case s.Registered.signer() == s.ChainKey:
			return refusef("the chain is already at the registered key %s: nothing to rotate", s.ChainKey)
		}
		now, err := q.ProgressDatabaseNow(ctx)
		if err != nil {
			return fmt.Errorf("read the database time: %w", err)
		}
		r := receipt.Rotation{
			Format: receipt.RotationFormat, Sequence: head.Sequence + 1, PreviousHash: head.BodySha256,
			NewSigner: s.Registered.signer(), NewPublicKey: s.Registered.PublicKey,
			Reason: boundText(s.Registered.Reason, 1024), RegisteredBy: s.Registered.DeclaredBy,
			RotatedAt: now, SchemaVersion: head.SchemaVersion,
		}
		if env, err = receipt.SignRotation(r, old); err != nil {
			return fmt.Errorf("sign the key rotation: %w", err)
		}
		previous := head.BodySha256
		if err := q.ReceiptRotationInsert(ctx, dbgen.ReceiptRotationInsertParams{
			Sequence: r.Sequence, Body: string(env.Body), BodySha256: env.Hash(), PreviousSha256: &previous,
			Signature: base64.StdEncoding.EncodeToString(env.Signature), Signer: oldID,
		}); err != nil {
			return fmt.Errorf("insert key rotation %d: %w", r.Sequence, err)
		}
		return nil
	})
	if err != nil {
		return receipt.Envelope{}, fmt.Errorf("rotate the receipt key from %s: %w", oldID, err)
	}
	return env, nil
}

// ReceiptHead returns the head of the receipt chain: its newest entry, as
// an auditor keeps it outside the database (deletionctl receipt head). It
// fails with ErrNotFound while the chain is empty.
func (o *Operator) ReceiptHead(ctx context.Context) (receipt.Head, error) {
	var head receipt.Head
	err := o.begin(ctx, true, func(tx pgx.Tx) error {
		rows, err := dbgen.New(tx).ReceiptNewest(ctx)
		if err != nil {
			return err
		}
		if len(rows) == 0 {
			return notFoundf("the receipt chain is empty: no deletion has completed yet")
		}
		env, err := envelopeFromRow(rows[0].Body, rows[0].Signature)
		if err != nil {
			return err
		}
		head, err = receipt.HeadOf(env)
		return err
	})
	if err != nil && !errors.Is(err, ErrNotFound) {
		return receipt.Head{}, fmt.Errorf("read the receipt chain's head: %w", err)
	}
	return head, err
}
