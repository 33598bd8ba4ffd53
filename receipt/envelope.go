package receipt

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
)

// Envelope is a receipt as stored and exported: its canonical bytes exactly
// as signed, and the signature. Keep Body as bytes (bytea or text, never
// jsonb, which reorders keys): the bytes, not a re-serialised object, are
// what the signature and the chain hash cover.
type Envelope struct {
	// Body is the receipt's canonical encoding (Canonical).
	Body []byte
	// Signature is the Ed25519 signature over Body, or empty when the
	// receipt's Signer is SignerUnsigned.
	Signature []byte
	// Source names where the envelope was read from (ReadDir sets the file
	// name); verification errors quote it. It is not part of the file.
	Source string
}

// Receipt parses the envelope's body as a deletion receipt (see Parse); a
// key rotation's body is refused.
func (e Envelope) Receipt() (Receipt, error) { return Parse(e.Body) }

// Hash returns HashBytes(e.Body): the next receipt's PreviousHash. The
// signature is not hashed, so the chain does not depend on it.
func (e Envelope) Hash() string { return HashBytes(e.Body) }

// Sign sets r's Signer to KeyID of key's public half and returns the
// envelope of Canonical(r) signed with key. It refuses a receipt that
// Validate refuses.
func Sign(r Receipt, key ed25519.PrivateKey) (Envelope, error) {
	if len(key) != ed25519.PrivateKeySize {
		return Envelope{}, fmt.Errorf("sign receipt: the private key is %d bytes, not an Ed25519 key", len(key))
	}
	pub, ok := key.Public().(ed25519.PublicKey)
	if !ok {
		return Envelope{}, errors.New("sign receipt: the private key has no Ed25519 public key")
	}
	r.Signer = KeyID(pub)
	body, err := Canonical(r)
	if err != nil {
		return Envelope{}, fmt.Errorf("sign receipt %d: %w", r.Sequence, err)
	}
	return Envelope{Body: body, Signature: ed25519.Sign(key, body)}, nil
}

// Unsigned sets r's Signer to SignerUnsigned and returns the envelope of
// Canonical(r) with no signature, for a deployment without a signing key.
// Verify refuses it unless VerifyOpts.AllowUnsigned.
func Unsigned(r Receipt) (Envelope, error) {
	r.Signer = SignerUnsigned
	body, err := Canonical(r)
	if err != nil {
		return Envelope{}, fmt.Errorf("encode unsigned receipt %d: %w", r.Sequence, err)
	}
	return Envelope{Body: body}, nil
}

// Chain returns r placed after prev in the chain (a receipt or a key
// rotation): Sequence one more than prev's and PreviousHash prev's Hash.
// With prev nil, r becomes the first receipt: Sequence 1 and no
// PreviousHash. It fails if prev's body does not parse.
func Chain(prev *Envelope, r Receipt) (Receipt, error) {
	if prev == nil {
		r.Sequence, r.PreviousHash = 1, ""
		return r, nil
	}
	p, err := prev.Entry()
	if err != nil {
		return Receipt{}, fmt.Errorf("chain receipt: the previous entry does not parse: %w", err)
	}
	r.Sequence, r.PreviousHash = p.Sequence()+1, prev.Hash()
	return r, nil
}

// envelopeFile is the export file's JSON: keys in sorted order, so the
// file is itself RFC 8785 canonical.
type envelopeFile struct {
	Receipt   json.RawMessage `json:"receipt"`
	Signature string          `json:"signature"`
}

// Marshal returns the envelope's file form, exactly:
// {"receipt":BODY,"signature":"SIG"} and a newline, where BODY is Body
// verbatim and SIG is the signature in standard padded base64 (RFC 4648
// section 4), empty for an unsigned receipt.
func (e Envelope) Marshal() []byte {
	var b bytes.Buffer
	b.WriteString(`{"receipt":`)
	b.Write(e.Body)
	b.WriteString(`,"signature":"`)
	b.WriteString(base64.StdEncoding.EncodeToString(e.Signature))
	b.WriteString("\"}\n")
	return b.Bytes()
}

// UnmarshalEnvelope reads an envelope from its file form. It refuses, with
// ErrNotCanonical, anything but exactly what Marshal writes. It does not
// look inside the receipt body: Verify checks that it is canonical, signed
// and consistent.
func UnmarshalEnvelope(b []byte) (Envelope, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var f envelopeFile
	if err := dec.Decode(&f); err != nil {
		return Envelope{}, fmt.Errorf("%w: envelope: %v", ErrNotCanonical, err)
	}
	sig, err := base64.StdEncoding.Strict().DecodeString(f.Signature)
	if err != nil {
		return Envelope{}, fmt.Errorf("%w: envelope signature is not padded standard base64", ErrNotCanonical)
	}
	if len(sig) == 0 {
		sig = nil
	}
	e := Envelope{Body: bytes.Clone(f.Receipt), Signature: sig}
	if !bytes.Equal(e.Marshal(), b) {
		return Envelope{}, fmt.Errorf("%w: envelope is not exactly {\"receipt\":…,\"signature\":\"…\"} and a newline", ErrNotCanonical)
	}
	return e, nil
}
