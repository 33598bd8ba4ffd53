package receipt

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"path/filepath"
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
	// AllowUnsigned accepts receipts whose Signer is SignerUnsigned. Their
	// only protection is the chain: a later receipt's PreviousHash.
	AllowUnsigned bool
	// FromGenesis requires the first receipt to have Sequence 1, so that
	// nothing before it can be missing.
	FromGenesis bool
	// After, when set, is the hash the first receipt's PreviousHash must
	// equal: Report.LastHash of an earlier verified range, so that ranges
	// verified apart are known to join. When empty and the first receipt's
	// Sequence is above 1, its PreviousHash is taken as given.
	After string
}

// Report summarises a chain Verify accepted.
type Report struct {
	// Receipts is how many receipts were verified; First and Last are the
	// first and last sequence.
	Receipts    int
	First, Last int64
	// LastHash is Hash of the last receipt: pass it as VerifyOpts.After to
	// verify the range that follows.
	LastHash string
	// Signed and Unsigned count the receipts by whether they carry a
	// signature; KeyID is the key that signed the signed ones.
	Signed, Unsigned int
	KeyID            string
}

// Verify checks envelopes as one contiguous range of a deployment's chain,
// offline: each body is canonical, signed by pub (or unsigned, if
// opts.AllowUnsigned) and internally consistent (Validate); sequences
// increase by one with no request twice; each PreviousHash is the hash of
// the receipt before it; and an envelope read from a file sits in the file
// FileName names. It returns the first failure as a *VerifyError. pub may
// be nil only when every receipt is unsigned.
func Verify(envelopes []Envelope, pub ed25519.PublicKey, opts VerifyOpts) (Report, error) {
	if len(envelopes) == 0 {
		return Report{}, &VerifyError{Index: -1, Reason: "no receipts were given", Err: ErrChain}
	}
	if pub != nil && len(pub) != ed25519.PublicKeySize {
		return Report{}, &VerifyError{Index: -1, Reason: fmt.Sprintf("the public key is %d bytes, not an Ed25519 key", len(pub)), Err: ErrSignature}
	}
	keyID := ""
	if pub != nil {
		keyID = KeyID(pub)
	}
	rep := Report{KeyID: keyID}
	requests := make(map[string]int64, len(envelopes))
	var prev Receipt
	for i, env := range envelopes {
		fail := func(r Receipt, sentinel error, format string, args ...any) (Report, error) {
			ve := &VerifyError{Index: i, Source: env.Source, Sequence: r.Sequence, Reason: fmt.Sprintf(format, args...), Err: sentinel}
			if r.RequestID != [16]byte{} {
				ve.RequestID = r.RequestID.String()
			}
			return Report{}, ve
		}
		r, err := decodeCanonical(env.Body)
		if err != nil {
			sentinel := ErrNotCanonical
			if errors.Is(err, ErrInconsistent) {
				sentinel = ErrInconsistent
			}
			return fail(Receipt{}, sentinel, "%v", err)
		}
		switch {
		case r.Signer == SignerUnsigned && len(env.Signature) != 0:
			return fail(r, ErrSignature, "the receipt says it is unsigned but carries a signature")
		case r.Signer == SignerUnsigned && !opts.AllowUnsigned:
			return fail(r, ErrUnsigned, "the receipt is unsigned; verify with unsigned receipts allowed only if the deployment has no signing key")
		case r.Signer == SignerUnsigned:
			rep.Unsigned++
		case len(env.Signature) == 0:
			return fail(r, ErrSignature, "the receipt names signer %s but carries no signature", r.Signer)
		case pub == nil:
			return fail(r, ErrSignature, "the receipt is signed by key %s but no public key was given", r.Signer)
		case r.Signer != keyID:
			return fail(r, ErrSignature, "the receipt names signer %s, not the given public key %s", r.Signer, keyID)
		case len(env.Signature) != ed25519.SignatureSize || !ed25519.Verify(pub, env.Body, env.Signature):
			return fail(r, ErrSignature, "the signature does not verify with public key %s: the receipt or its signature was altered", keyID)
		default:
			rep.Signed++
		}
		if err := Validate(r); err != nil {
			return fail(r, ErrInconsistent, "%v", err)
		}
		if env.Source != "" {
			if base, want := filepath.Base(env.Source), FileName(r); base != want {
				return fail(r, ErrChain, "the file is named %s but its receipt belongs in %s: files were renamed", base, want)
			}
		}
		if i == 0 {
			switch {
			case opts.FromGenesis && r.Sequence != 1:
				return fail(r, ErrChain, "the chain starts at receipt %d, not 1: receipts 1 to %d are missing", r.Sequence, r.Sequence-1)
			case opts.After != "" && r.PreviousHash != opts.After:
				return fail(r, ErrChain, "previous_hash %s is not the expected %s", orNone(r.PreviousHash), opts.After)
			}
			rep.First = r.Sequence
		} else {
			switch {
			case r.Sequence == prev.Sequence:
				return fail(r, ErrChain, "receipt %d appears twice", r.Sequence)
			case r.Sequence < prev.Sequence:
				return fail(r, ErrChain, "receipt %d follows receipt %d: out of order", r.Sequence, prev.Sequence)
			case r.Sequence == prev.Sequence+2:
				return fail(r, ErrChain, "receipt %d follows receipt %d: receipt %d is missing", r.Sequence, prev.Sequence, prev.Sequence+1)
			case r.Sequence > prev.Sequence+2:
				return fail(r, ErrChain, "receipt %d follows receipt %d: receipts %d to %d are missing", r.Sequence, prev.Sequence, prev.Sequence+1, r.Sequence-1)
			}
			if want := envelopes[i-1].Hash(); r.PreviousHash != want {
				return fail(r, ErrChain, "previous_hash %s is not %s, the hash of receipt %d", orNone(r.PreviousHash), want, prev.Sequence)
			}
		}
		if seq, dup := requests[r.RequestID.String()]; dup {
			return fail(r, ErrChain, "request %s already has receipt %d", r.RequestID, seq)
		}
		requests[r.RequestID.String()] = r.Sequence
		prev = r
	}
	rep.Receipts = len(envelopes)
	rep.Last = prev.Sequence
	rep.LastHash = envelopes[len(envelopes)-1].Hash()
	return rep, nil
}

func orNone(h string) string {
	if h == "" {
		return "(empty)"
	}
	return h
}
