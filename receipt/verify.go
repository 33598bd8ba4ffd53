package receipt

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
)

// The reasons Verify refuses a receipt; a *VerifyError matches exactly one
// of them with errors.Is (ErrUnsigned also matches ErrSignature).
var (
	// ErrSignature: the signature is missing, malformed, made by another
	// key than the one given, or does not cover the receipt's bytes.
	ErrSignature = errors.New("signature check failed")
	// ErrUnsigned: the receipt is unsigned and VerifyOpts.AllowUnsigned is
	// false. It wraps ErrSignature.
	ErrUnsigned = fmt.Errorf("%w: receipt is unsigned", ErrSignature)
	// ErrChain: a receipt is missing, repeated, out of order, renamed, or
	// does not link to its predecessor's hash.
	ErrChain = errors.New("chain check failed")
)

// VerifyError is the first failure Verify found. Sequence and RequestID are
// zero when the receipt's body could not be read.
type VerifyError struct {
	// Index is the receipt's position in the slice given to Verify, from 0.
	Index int
	// Source is the envelope's Source (the file name, for ReadDir).
	Source string
	// Sequence and RequestID identify the receipt as its body states them.
	Sequence  int64
	RequestID string
	// Reason says what is wrong, in one line.
	Reason string
	// Err is the sentinel: ErrSignature, ErrUnsigned, ErrChain,
	// ErrInconsistent or ErrNotCanonical.
	Err error
}

// Error names the receipt and the reason in one line.
func (e *VerifyError) Error() string {
	return fmt.Sprintf("receipt verification failed at %s: %s", describe(e.Source, e.Sequence, e.RequestID, e.Index), e.Reason)
}

// Unwrap returns the sentinel.
func (e *VerifyError) Unwrap() error { return e.Err }

// describe names a receipt by what is known of it; index is its position
// in the list verified, from 0, or -1 for none.
func describe(source string, seq int64, requestID string, index int) string {
	var parts []string
	if seq != 0 {
		parts = append(parts, fmt.Sprintf("receipt %d", seq))
	}
	if requestID != "" {
		parts = append(parts, "request "+requestID)
	}
	if source != "" {
		parts = append(parts, "file "+source)
	}
	if len(parts) == 0 && index >= 0 {
		return fmt.Sprintf("the receipt at position %d of those given", index+1)
	}
	if len(parts) == 0 {
		return "the receipts given"
	}
	return strings.Join(parts, ", ")
}

// VerifyOpts tunes Verify.
type VerifyOpts struct {
	// AllowUnsigned accepts receipts whose Signer is SignerUnsigned, as long
	// as no signed entry precedes them in the range, or a rotation to
	// unsigned signed by the chain's key does. Their only protection is the
	// chain: a later entry's PreviousHash, and the expected Head.
	AllowUnsigned bool
	// From and After start the range after the chain's first receipt: From
	// is the sequence the first envelope must have and After its
	// PreviousHash (Report.Last+1 and Report.LastHash of the range verified
	// before). Both zero means the range starts at the chain's first
	// receipt, sequence 1 with no previous hash, so that nothing before it
	// can be missing. One without the other is refused.
	From  int64
	After string
	// Head, when not nil, is a chain head the auditor kept outside the
	// database (deletionctl receipt head): the range must reach its
	// sequence, and hold there the entry it names, so nothing was dropped
	// from the end. A Head read from a file also has its entry's signature
	// checked with the key the chain names at that entry.
	Head *Head
}

// Report summarises a chain Verify accepted.
type Report struct {
	// Receipts and Rotations count the deletion receipts and the key
	// rotations verified; First and Last are the first and last sequence.
	Receipts, Rotations int
	First, Last         int64
	// LastHash is the hash of the last entry: with From Last+1, pass it as
	// VerifyOpts.After to verify the range that follows.
	LastHash string
	// Signed and Unsigned count the receipts by whether they carry a
	// signature; KeyID is the key the chain is signed with at its end (""
	// when unsigned), Keys every key that signed an entry, in order.
	Signed, Unsigned int
	KeyID            string
	Keys             []string
	// HeadChecked reports that VerifyOpts.Head was checked.
	HeadChecked bool
}

// Verify checks envelopes as one contiguous range of a deployment's chain,
// offline, from the chain's first receipt unless opts gives another start:
// each body is canonical and internally consistent (Validate,
// ValidateRotation); each signature verifies with the key the chain is at,
// which is pub for the first signed entry and then the key each signed
// rotation names, so one call checks a chain across its rotations; an
// unsigned receipt is refused unless opts.AllowUnsigned, and always after a
// signed entry unless a signed rotation to unsigned came between; a
// receipt signed by another key than the chain's, with no rotation naming
// it, is refused; sequences increase by one with no request twice; each
// PreviousHash is the hash of the entry before it; an envelope read from a
// file sits in the file its entry names; and, given opts.Head, the range
// reaches it unchanged. It returns the first failure as a *VerifyError. pub
// may be nil only when no signed entry precedes the first rotation (or
// every receipt is unsigned).
func Verify(envelopes []Envelope, pub ed25519.PublicKey, opts VerifyOpts) (Report, error) {
	if (opts.From == 0) != (opts.After == "") && !(opts.From == 1 && opts.After == "") {
		return Report{}, fmt.Errorf("receipt: verify: a range that starts after the chain's first receipt needs both its starting sequence (%d) and the previous hash (%q)", opts.From, opts.After)
	}
	if opts.From < 0 || (opts.After != "" && !hexDigest.MatchString(opts.After)) {
		return Report{}, fmt.Errorf("receipt: verify: the starting sequence %d or previous hash %q is malformed", opts.From, clip(opts.After))
	}
	if len(envelopes) == 0 {
		return Report{}, &VerifyError{Index: -1, Reason: "no receipts were given", Err: ErrChain}
	}
	if pub != nil && len(pub) != ed25519.PublicKeySize {
		return Report{}, &VerifyError{Index: -1, Reason: fmt.Sprintf("the public key is %d bytes, not an Ed25519 key", len(pub)), Err: ErrSignature}
	}
	w := &walk{opts: opts, keys: map[string]ed25519.PublicKey{}, requests: make(map[string]int64, len(envelopes)),
		signers: make([]string, len(envelopes))}
	if pub != nil {
		w.anchor = KeyID(pub)
		w.keys[w.anchor] = pub
	}
	var prev Entry
	for i, env := range envelopes {
		e, err := decodeEntry(env.Body)
		if err != nil {
			sentinel := ErrNotCanonical
			if errors.Is(err, ErrInconsistent) {
				sentinel = ErrInconsistent
			}
			return Report{}, failure(i, env, Entry{}, sentinel, "%v", err)
		}
		if err := w.signature(i, env, e); err != nil {
			return Report{}, err
		}
		if err := e.validate(); err != nil {
			return Report{}, failure(i, env, e, ErrInconsistent, "%v", err)
		}
		if env.Source != "" {
			if base, want := filepath.Base(env.Source), e.FileName(); base != want {
				return Report{}, failure(i, env, e, ErrChain, "the file is named %s but its entry belongs in %s: files were renamed", base, want)
			}
		}
		if err := w.link(envelopes, i, e, prev); err != nil {
			return Report{}, err
		}
		if err := w.advance(i, env, e); err != nil {
			return Report{}, err
		}
		prev = e
	}
	rep := w.rep
	rep.Last = prev.Sequence()
	rep.LastHash = envelopes[len(envelopes)-1].Hash()
	if isKey(w.state) {
		rep.KeyID = w.state
	}
	if opts.Head != nil {
		if err := checkHead(envelopes, w.signers, w.keys, rep, *opts.Head); err != nil {
			return Report{}, err
		}
		rep.HeadChecked = true
	}
	return rep, nil
}

// walk is Verify's state along the range.
type walk struct {
	opts     VerifyOpts
	keys     map[string]ed25519.PublicKey // the keys the chain introduced, by id: the given one, then each rotation's
	anchor   string                       // the given public key's id, or ""
	state    string                       // what signs the chain: "" before any entry, SignerUnsigned, or a key id
	rep      Report
	requests map[string]int64 // the sequence of each request's receipt
	signers  []string         // the key each entry was verified with ("" unsigned)
}

// failure is the *VerifyError for the entry e at index i.
func failure(i int, env Envelope, e Entry, sentinel error, format string, args ...any) *VerifyError {
	ve := &VerifyError{Index: i, Source: env.Source, Reason: fmt.Sprintf(format, args...), Err: sentinel}
	if e.Receipt != nil || e.Rotation != nil {
		ve.Sequence = e.Sequence()
	}
	if e.Receipt != nil && e.Receipt.RequestID != [16]byte{} {
		ve.RequestID = e.Receipt.RequestID.String()
	}
	return ve
}

// signature checks the entry's signature with the key the chain is at: no
// unsigned receipt after a signed entry, no other key than the chain's,
// and for the first signed entry the given public key.
func (w *walk) signature(i int, env Envelope, e Entry) error {
	signer := e.Signer()
	fail := func(sentinel error, format string, args ...any) error {
		return failure(i, env, e, sentinel, format, args...)
	}
	switch {
	case signer == SignerUnsigned && len(env.Signature) != 0:
		return fail(ErrSignature, "the receipt says it is unsigned but carries a signature")
	case signer == SignerUnsigned && isKey(w.state):
		return fail(ErrSignature, "an unsigned receipt follows receipts signed by key %s with no rotation to unsigned signed by it: a signed receipt was replaced, or an executor ran without its key", w.state)
	case signer == SignerUnsigned && !w.opts.AllowUnsigned:
		return fail(ErrUnsigned, "the receipt is unsigned; verify with unsigned receipts allowed only if the deployment has no signing key")
	case signer == SignerUnsigned:
		if e.Receipt != nil {
			w.rep.Unsigned++
		}
		return nil
	case len(env.Signature) == 0:
		return fail(ErrSignature, "the entry names signer %s but carries no signature", signer)
	case isKey(w.state) && signer != w.state:
		return fail(ErrSignature, "the entry is signed by key %s, but the chain is signed by key %s and no rotation names %s: a rotation entry is missing, or %s signed out of turn", signer, w.state, signer, signer)
	case w.keys[signer] == nil && w.anchor == "":
		return fail(ErrSignature, "the entry is signed by key %s but no public key was given", signer)
	case w.keys[signer] == nil:
		return fail(ErrSignature, "the entry names signer %s, not the given public key %s", signer, w.anchor)
	case len(env.Signature) != ed25519.SignatureSize || !ed25519.Verify(w.keys[signer], env.Body, env.Signature):
		return fail(ErrSignature, "the signature does not verify with public key %s: the receipt or its signature was altered", signer)
	}
	if !slices.Contains(w.rep.Keys, signer) {
		w.rep.Keys = append(w.rep.Keys, signer)
	}
	w.signers[i] = signer
	if e.Receipt != nil {
		w.rep.Signed++
	}
	return nil
}

// link checks the entry's place: the range's start for the first entry
// (the chain's first receipt, or the given start), else one more than the
// previous entry and linked to its hash.
func (w *walk) link(envelopes []Envelope, i int, e, prev Entry) error {
	env, seq := envelopes[i], e.Sequence()
	fail := func(format string, args ...any) error { return failure(i, env, e, ErrChain, format, args...) }
	if i == 0 {
		switch {
		case w.opts.After == "" && seq != 1:
			return fail("the export starts at receipt %d, not at the chain's first receipt: %s; to verify a later range, give its starting sequence and previous hash (--from-sequence, --previous-hash)", seq, missing(1, seq-1, ""))
		case w.opts.After != "" && seq != w.opts.From:
			return fail("the range starts at receipt %d, not at the expected receipt %d", seq, w.opts.From)
		case w.opts.After != "" && e.PreviousHash() != w.opts.After:
			return fail("previous_hash %s is not the expected %s", orNone(e.PreviousHash()), w.opts.After)
		}
		w.rep.First = seq
		return nil
	}
	p := prev.Sequence()
	switch {
	case seq == p:
		return fail("receipt %d appears twice", seq)
	case seq < p:
		return fail("receipt %d follows receipt %d: out of order", seq, p)
	case seq > p+1:
		return fail("receipt %d follows receipt %d: %s", seq, p, missing(p+1, seq-1, ""))
	}
	if want := envelopes[i-1].Hash(); e.PreviousHash() != want {
		return fail("previous_hash %s is not %s, the hash of receipt %d", orNone(e.PreviousHash()), want, p)
	}
	return nil
}

// advance records the entry: a receipt's request (once in the range) and
// signer, or a rotation's new key, which signs the chain from here on.
func (w *walk) advance(i int, env Envelope, e Entry) error {
	if e.Receipt != nil {
		id := e.Receipt.RequestID.String()
		if s, dup := w.requests[id]; dup {
			return failure(i, env, e, ErrChain, "request %s already has receipt %d", id, s)
		}
		w.requests[id] = e.Receipt.Sequence
		w.rep.Receipts++
		w.state = e.Receipt.Signer
		return nil
	}
	r := e.Rotation
	if w.state == SignerUnsigned {
		return failure(i, env, e, ErrChain, "a key rotation follows unsigned receipts: only the key that signs the chain hands it on")
	}
	if r.NewPublicKey != nil {
		if known, ok := w.keys[r.NewSigner]; ok && !known.Equal(r.NewPublicKey) {
			return failure(i, env, e, ErrSignature, "the rotation names key %s with another public key than the chain gave it before", r.NewSigner)
		}
		w.keys[r.NewSigner] = r.NewPublicKey
	}
	w.state = r.NewSigner
	w.rep.Rotations++
	return nil
}

// checkHead checks that the verified range reaches head and holds its
// entry unchanged, and that a head read from a file carries that entry
// with a signature by the key the chain names there.
func checkHead(envelopes []Envelope, signers []string, keys map[string]ed25519.PublicKey, rep Report, head Head) error {
	last := len(envelopes) - 1
	at := func(i int, format string, args ...any) error {
		ve := &VerifyError{Index: i, Source: envelopes[i].Source, Reason: fmt.Sprintf(format, args...), Err: ErrChain}
		if e, err := decodeEntry(envelopes[i].Body); err == nil {
			ve.Sequence = e.Sequence()
			if e.Receipt != nil {
				ve.RequestID = e.Receipt.RequestID.String()
			}
		}
		return ve
	}
	switch {
	case head.Sequence > rep.Last:
		return at(last, "the export ends at receipt %d, but the expected head is receipt %d: %s", rep.Last, head.Sequence, missing(rep.Last+1, head.Sequence, " from the end"))
	case head.Sequence < rep.First:
		return at(0, "the expected head, receipt %d, precedes this range (receipts %d to %d): verify a range that holds it", head.Sequence, rep.First, rep.Last)
	}
	i := int(head.Sequence - rep.First)
	if h := envelopes[i].Hash(); h != head.Hash {
		return at(i, "its hash is %s, not %s, the expected head's: the entry was replaced after the head was taken", h, head.Hash)
	}
	if head.Envelope == nil {
		return nil
	}
	if !bytes.Equal(head.Envelope.Body, envelopes[i].Body) {
		return at(i, "the expected head carries another entry than receipt %d", head.Sequence)
	}
	if signer := signers[i]; signer != "" {
		if len(head.Envelope.Signature) != ed25519.SignatureSize || !ed25519.Verify(keys[signer], head.Envelope.Body, head.Envelope.Signature) {
			return &VerifyError{Index: i, Source: "the expected head", Sequence: head.Sequence,
				Reason: fmt.Sprintf("the head's signature does not verify with key %s, which signs receipt %d: the head was altered", signer, head.Sequence), Err: ErrSignature}
		}
	}
	return nil
}

// missing names the sequences first through last as missing.
func missing(first, last int64, where string) string {
	if first == last {
		return fmt.Sprintf("receipt %d is missing%s", first, where)
	}
	return fmt.Sprintf("receipts %d to %d are missing%s", first, last, where)
}

func isKey(id string) bool { return id != "" && id != SignerUnsigned }

func orNone(h string) string {
	if h == "" {
		return "(empty)"
	}
	return h
}
