package receipt

import (
	"encoding/json"
	"fmt"
	"time"
)

// Entry is one parsed entry of a deployment's chain: a deletion receipt
// (Receipt set) or a key rotation (Rotation set). Both share the chain's
// sequence and hash links.
type Entry struct {
	Receipt  *Receipt
	Rotation *Rotation
}

// ParseEntry decodes a chain entry from its canonical bytes, as Parse or
// ParseRotation does by the body's format.
func ParseEntry(body []byte) (Entry, error) {
	e, err := decodeEntry(body)
	if err != nil {
		return Entry{}, err
	}
	if err := e.validate(); err != nil {
		return Entry{}, err
	}
	return e, nil
}

// decodeEntry is ParseEntry without the validation.
func decodeEntry(body []byte) (Entry, error) {
	var head struct {
		Format string `json:"format"`
	}
	if err := json.Unmarshal(body, &head); err != nil {
		return Entry{}, fmt.Errorf("%w: %v", ErrNotCanonical, err)
	}
	if head.Format == RotationFormat {
		r, err := decodeRotation(body)
		if err != nil {
			return Entry{}, err
		}
		return Entry{Rotation: &r}, nil
	}
	r, err := decodeCanonical(body)
	if err != nil {
		return Entry{}, err
	}
	return Entry{Receipt: &r}, nil
}

func (e Entry) validate() error {
	if e.Rotation != nil {
		return ValidateRotation(*e.Rotation)
	}
	return Validate(*e.Receipt)
}

// Sequence is the entry's place in the chain.
func (e Entry) Sequence() int64 {
	if e.Rotation != nil {
		return e.Rotation.Sequence
	}
	return e.Receipt.Sequence
}

// PreviousHash is the hash of the entry before it ("" for the first).
func (e Entry) PreviousHash() string {
	if e.Rotation != nil {
		return e.Rotation.PreviousHash
	}
	return e.Receipt.PreviousHash
}

// Signer is the key id that signs the entry, or SignerUnsigned.
func (e Entry) Signer() string {
	if e.Rotation != nil {
		return e.Rotation.Signer
	}
	return e.Receipt.Signer
}

// Time is when the entry was made, on the database clock: a deletion's
// retention_pending time, a rotation's rotated_at.
func (e Entry) Time() time.Time {
	if e.Rotation != nil {
		return e.Rotation.RotatedAt
	}
	at, _ := e.Receipt.Stage(StageRetentionPending)
	return at
}

// FileName is the name WriteDir gives the entry's file: FileName of a
// receipt, and for a rotation the sequence zero-padded to ten digits,
// "-key-rotation-", the new signer and FileSuffix.
func (e Entry) FileName() string {
	if e.Rotation != nil {
		return fmt.Sprintf("%010d-key-rotation-%s%s", e.Rotation.Sequence, e.Rotation.NewSigner, FileSuffix)
	}
	return FileName(*e.Receipt)
}

// Entry parses the envelope's body as a chain entry (see ParseEntry).
func (e Envelope) Entry() (Entry, error) { return ParseEntry(e.Body) }
