package receipt

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// RotationFormat is the "format" of a key rotation: the chain entry, signed
// by the key that signed the chain so far, that names the key signing it
// from the next entry on (or that it goes on unsigned). One Verify call
// follows a chain across its rotations from the first key alone.
const RotationFormat = "communitydeletion.key-rotation/v1"

// Rotation is the body of a key rotation entry. Its place in the chain
// (Sequence, PreviousHash) works as a receipt's; Signer is the old key,
// NewSigner the key it hands the chain to (KeyID of NewPublicKey), or
// SignerUnsigned when the deployment recorded that it runs unsigned.
// Reason and RegisteredBy are what the deployment recorded with the new
// key (community_deletion_receipt_keys), RotatedAt the database time of
// the rotation.
type Rotation struct {
	Format        string
	Sequence      int64
	PreviousHash  string
	Signer        string
	NewSigner     string
	NewPublicKey  ed25519.PublicKey
	Reason        string
	RegisteredBy  string
	RotatedAt     time.Time
	SchemaVersion int64
}

// ValidateRotation checks the rules docs/receipts.md states for a rotation
// on its own; the error matches ErrInconsistent.
func ValidateRotation(r Rotation) error {
	if r.Format != RotationFormat {
		return inconsistent("format is %q, want %q", clip(r.Format), RotationFormat)
	}
	if r.Sequence < 2 || r.Sequence > MaxCount {
		return inconsistent("rotation sequence %d is outside 2..%d: a rotation follows a signed receipt", r.Sequence, int64(MaxCount))
	}
	if !hexDigest.MatchString(r.PreviousHash) {
		return inconsistent("previous_hash %q is not 64 lowercase hex digits", clip(r.PreviousHash))
	}
	if !hexKeyID.MatchString(r.Signer) {
		return inconsistent("a rotation's signer %q is not a 16-hex-digit key id: only a key hands the chain on", clip(r.Signer))
	}
	switch {
	case r.NewSigner == SignerUnsigned:
		if r.NewPublicKey != nil {
			return inconsistent("a rotation to unsigned names a public key")
		}
	case len(r.NewPublicKey) != ed25519.PublicKeySize:
		return inconsistent("new_public_key is %d bytes, not an Ed25519 public key", len(r.NewPublicKey))
	case r.NewSigner != KeyID(r.NewPublicKey):
		return inconsistent("new_signer %q is not the key id of new_public_key (%s)", clip(r.NewSigner), KeyID(r.NewPublicKey))
	}
	if r.NewSigner == r.Signer {
		return inconsistent("the rotation hands key %s on to itself", r.Signer)
	}
	if err := text("reason", r.Reason, false); err != nil {
		return err
	}
	if strings.TrimSpace(r.Reason) == "" {
		return inconsistent("reason is blank")
	}
	if err := text("registered_by", r.RegisteredBy, false); err != nil {
		return err
	}
	if err := checkTime("rotated_at", r.RotatedAt); err != nil {
		return err
	}
	if r.SchemaVersion < 1 || r.SchemaVersion > MaxCount {
		return inconsistent("schema_version %d is outside 1..%d", r.SchemaVersion, int64(MaxCount))
	}
	return nil
}

func rotationTree(r Rotation) map[string]any {
	pub := ""
	if r.NewPublicKey != nil {
		pub = base64.StdEncoding.EncodeToString(r.NewPublicKey)
	}
	return map[string]any{
		"format":         r.Format,
		"sequence":       r.Sequence,
		"previous_hash":  r.PreviousHash,
		"signer":         r.Signer,
		"new_signer":     r.NewSigner,
		"new_public_key": pub,
		"reason":         r.Reason,
		"registered_by":  r.RegisteredBy,
		"rotated_at":     formatTime(r.RotatedAt),
		"schema_version": r.SchemaVersion,
	}
}

// CanonicalRotation returns the canonical encoding of r (the rules of
// Canonical: sorted keys, no whitespace, minimal escaping; the public key
// in standard padded base64) after ValidateRotation accepts it.
func CanonicalRotation(r Rotation) ([]byte, error) {
	r.RotatedAt = r.RotatedAt.UTC()
	if err := ValidateRotation(r); err != nil {
		return nil, err
	}
	return appendValue(nil, rotationTree(r))
}

type wireRotation struct {
	Format        string `json:"format"`
	Sequence      int64  `json:"sequence"`
	PreviousHash  string `json:"previous_hash"`
	Signer        string `json:"signer"`
	NewSigner     string `json:"new_signer"`
	NewPublicKey  string `json:"new_public_key"`
	Reason        string `json:"reason"`
	RegisteredBy  string `json:"registered_by"`
	RotatedAt     string `json:"rotated_at"`
	SchemaVersion int64  `json:"schema_version"`
}

// decodeRotation decodes b and checks it is exactly the canonical encoding
// of what it decodes to, without ValidateRotation.
func decodeRotation(b []byte) (Rotation, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var w wireRotation
	if err := dec.Decode(&w); err != nil {
		return Rotation{}, fmt.Errorf("%w: %v", ErrNotCanonical, err)
	}
	r := Rotation{
		Format: w.Format, Sequence: w.Sequence, PreviousHash: w.PreviousHash, Signer: w.Signer,
		NewSigner: w.NewSigner, Reason: w.Reason, RegisteredBy: w.RegisteredBy, SchemaVersion: w.SchemaVersion,
	}
	if w.NewPublicKey != "" {
		pub, err := base64.StdEncoding.Strict().DecodeString(w.NewPublicKey)
		if err != nil {
			return Rotation{}, inconsistent("new_public_key is not standard padded base64")
		}
		r.NewPublicKey = ed25519.PublicKey(pub)
	}
	var err error
	if r.RotatedAt, err = parseTime("rotated_at", w.RotatedAt); err != nil {
		return Rotation{}, err
	}
	again, err := appendValue(nil, rotationTree(r))
	if err != nil {
		return Rotation{}, fmt.Errorf("%w: %v", ErrNotCanonical, err)
	}
	if !bytes.Equal(again, b) {
		return Rotation{}, fmt.Errorf("%w: differs from the canonical encoding at byte %d", ErrNotCanonical, firstDifference(again, b))
	}
	return r, nil
}

// ParseRotation decodes a rotation from its canonical bytes, refusing
// (ErrNotCanonical) any other spelling and (ErrInconsistent) a rotation
// ValidateRotation refuses.
func ParseRotation(b []byte) (Rotation, error) {
	r, err := decodeRotation(b)
	if err != nil {
		return Rotation{}, err
	}
	if err := ValidateRotation(r); err != nil {
		return Rotation{}, err
	}
	return r, nil
}

// SignRotation sets r's Signer to KeyID of old's public half and returns
// the envelope of CanonicalRotation(r) signed with old: the key that
// signed the chain so far hands it on.
func SignRotation(r Rotation, old ed25519.PrivateKey) (Envelope, error) {
	if len(old) != ed25519.PrivateKeySize {
		return Envelope{}, fmt.Errorf("sign key rotation: the private key is %d bytes, not an Ed25519 key", len(old))
	}
	pub, ok := old.Public().(ed25519.PublicKey)
	if !ok {
		return Envelope{}, errors.New("sign key rotation: the private key has no Ed25519 public key")
	}
	r.Signer = KeyID(pub)
	body, err := CanonicalRotation(r)
	if err != nil {
		return Envelope{}, fmt.Errorf("sign key rotation %d: %w", r.Sequence, err)
	}
	return Envelope{Body: body, Signature: ed25519.Sign(old, body)}, nil
}

// ChainRotation returns r placed after prev: Sequence one more than prev's
// and PreviousHash prev's Hash.
func ChainRotation(prev Envelope, r Rotation) (Rotation, error) {
	p, err := prev.Entry()
	if err != nil {
		return Rotation{}, fmt.Errorf("chain key rotation: the previous entry does not parse: %w", err)
	}
	r.Sequence, r.PreviousHash = p.Sequence()+1, prev.Hash()
	return r, nil
}
