package receipt

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// Verification starts at the chain's first receipt: a range without it
// fails, naming what is missing.
func TestVerifyStartsAtTheFirstReceipt(t *testing.T) {
	pub, priv := testKey("a")
	envs := signedChain(t, 3, priv)
	_, err := Verify(envs[1:], pub, VerifyOpts{})
	expectFailure(t, err, 0, ErrChain, "receipt 1 is missing")
	_, err = Verify(envs[2:], pub, VerifyOpts{AllowUnsigned: true})
	expectFailure(t, err, 0, ErrChain, "receipts 1 to 2 are missing")
}

// An unsigned receipt after a signed one fails even when unsigned receipts
// are allowed: it is how a signed receipt replaced by an edited, unsigned
// one looks, and how an executor run without its key looks.
func TestVerifyRefusesUnsignedAfterSigned(t *testing.T) {
	pub, priv := testKey("a")
	envs := signedChain(t, 2, priv)
	r, err := Chain(&envs[1], sample(3))
	must(t, err)
	unsigned, err := Unsigned(r)
	must(t, err)
	_, err = Verify(append(slices.Clone(envs), unsigned), pub, VerifyOpts{AllowUnsigned: true})
	expectFailure(t, err, 2, ErrSignature, "an unsigned receipt follows receipts signed by key "+KeyID(pub))
}

// --allow-unsigned does not accept an edited receipt that replaced a
// signed one: neither the last, nor one in the middle re-chained with all
// that follow it.
func TestAllowUnsignedRefusesAnEditedReplacement(t *testing.T) {
	pub, priv := testKey("a")
	envs := signedChain(t, 3, priv)
	edit := func(i int, prev *Envelope) Envelope {
		r := mustReceipt(t, envs[i])
		r.Tables[1].Rows = 0 // "nothing was deleted"
		r, err := Chain(prev, r)
		must(t, err)
		env, err := Unsigned(r)
		must(t, err)
		return env
	}
	last := slices.Clone(envs)
	last[2] = edit(2, &envs[1])
	dir, _ := exportChain(t, last)
	_, err := readAndVerify(t, dir, pub, VerifyOpts{AllowUnsigned: true})
	expectFailure(t, err, 2, ErrSignature, "an unsigned receipt follows receipts signed by key")

	middle := slices.Clone(envs)
	middle[1] = edit(1, &envs[0])
	middle[2] = edit(2, &middle[1])
	_, err = Verify(middle, pub, VerifyOpts{AllowUnsigned: true})
	expectFailure(t, err, 1, ErrSignature, "an unsigned receipt follows receipts signed by key")
}

// A signing key file its group or others may read is refused, naming the
// file, its mode and the fix, as ssh refuses one.
func TestLoadPrivateKeyRefusesAKeyOthersMayRead(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "receipt.key")
	_, _, err := GenerateKey(path, filepath.Join(dir, "receipt.pub"))
	must(t, err)
	if _, err := LoadPrivateKey(path); err != nil {
		t.Fatalf("a 0600 key was refused: %v", err)
	}
	for _, mode := range []os.FileMode{0o640, 0o644, 0o604, 0o660, 0o700} {
		must(t, os.Chmod(path, mode))
		_, err := LoadPrivateKey(path)
		if mode == 0o700 {
			if err != nil {
				t.Errorf("mode %04o (owner only) was refused: %v", mode, err)
			}
			continue
		}
		if err == nil {
			t.Fatalf("a key of mode %04o was accepted", mode)
		}
		msg := err.Error()
		for _, want := range []string{path, fmt.Sprintf("mode %04o", mode), "chmod 600 " + path} {
			if !strings.Contains(msg, want) {
				t.Errorf("error %q does not name %q", msg, want)
			}
		}
		if strings.Contains(msg, "\n") {
			t.Errorf("error spans lines: %q", msg)
		}
	}
}

// rotation returns the entry after prev that hands the chain from old to
// next (nil: unsigned), signed by old.
func rotation(t *testing.T, prev Envelope, old ed25519.PrivateKey, next ed25519.PublicKey) Envelope {
	t.Helper()
	r := Rotation{Format: RotationFormat, NewSigner: SignerUnsigned, Reason: "yearly rotation", RegisteredBy: "migrator",
		RotatedAt: time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC), SchemaVersion: 31}
	if next != nil {
		r.NewSigner, r.NewPublicKey = KeyID(next), next
	}
	r, err := ChainRotation(prev, r)
	must(t, err)
	env, err := SignRotation(r, old)
	must(t, err)
	return env
}

// extend appends n receipts to envs, signed by priv (nil: unsigned), from
// sample number from on.
func extend(t *testing.T, envs []Envelope, from, n int, priv ed25519.PrivateKey) []Envelope {
	t.Helper()
	envs = slices.Clone(envs)
	for i := from; i < from+n; i++ {
		r, err := Chain(&envs[len(envs)-1], sample(i))
		must(t, err)
		var env Envelope
		if priv == nil {
			env, err = Unsigned(r)
		} else {
			env, err = Sign(r, priv)
		}
		must(t, err)
		envs = append(envs, env)
	}
	return envs
}

// One Verify call, given the first key only, checks a chain signed by key
// A, rotated to key B by an entry A signed, then signed by B. Without the
// rotation entry, with a receipt B signed before it, or with a rotation
// signed by anyone but the chain's key, it fails.
func TestVerifyAcrossAKeyRotation(t *testing.T) {
	pubA, privA := testKey("a")
	pubB, privB := testKey("b")
	pubC, privC := testKey("c")
	chainA := signedChain(t, 2, privA)
	rotated := append(slices.Clone(chainA), rotation(t, chainA[1], privA, pubB))
	full := extend(t, rotated, 3, 2, privB)

	dir, _ := exportChain(t, full)
	rep, err := readAndVerify(t, dir, pubA, VerifyOpts{})
	must(t, err)
	want := Report{Receipts: 4, Rotations: 1, First: 1, Last: 5, LastHash: full[4].Hash(), Signed: 4,
		KeyID: KeyID(pubB), Keys: []string{KeyID(pubA), KeyID(pubB)}}
	if !reflect.DeepEqual(rep, want) {
		t.Fatalf("report = %+v, want %+v", rep, want)
	}
	if name := mustEntry(t, full[2]).FileName(); name != "0000000003-key-rotation-"+KeyID(pubB)+FileSuffix {
		t.Fatalf("the rotation's file is %s", name)
	}

	// The rotation entry removed.
	withoutRotation := slices.Delete(slices.Clone(full), 2, 3)
	_, err = Verify(withoutRotation, pubA, VerifyOpts{})
	expectFailure(t, err, 2, ErrSignature, "signed by key "+KeyID(pubB)+", but the chain is signed by key "+KeyID(pubA)+" and no rotation names "+KeyID(pubB))
	// B's receipts re-chained straight after A's, as a holder of B's key
	// would forge them without the rotation.
	forged := extend(t, chainA, 3, 2, privB)
	_, err = Verify(forged, pubA, VerifyOpts{})
	expectFailure(t, err, 2, ErrSignature, "signed by key "+KeyID(pubB)+", but the chain is signed by key "+KeyID(pubA)+" and no rotation names "+KeyID(pubB))
	// A receipt B signed before the rotation.
	early := append(extend(t, chainA, 3, 1, privB), rotation(t, extend(t, chainA, 3, 1, privB)[2], privA, pubB))
	_, err = Verify(early, pubA, VerifyOpts{})
	expectFailure(t, err, 2, ErrSignature, "signed by key "+KeyID(pubB)+", but the chain is signed by key "+KeyID(pubA))
	// A rotation signed by a key the chain is not at.
	byC := append(slices.Clone(chainA), rotation(t, chainA[1], privC, pubB))
	_, err = Verify(byC, pubA, VerifyOpts{})
	expectFailure(t, err, 2, ErrSignature, "signed by key "+KeyID(pubC)+", but the chain is signed by key "+KeyID(pubA))
	// A rotation whose new key was swapped after A signed it.
	swapped := slices.Clone(full)
	r := *mustEntry(t, full[2]).Rotation
	r.NewSigner, r.NewPublicKey = KeyID(pubC), pubC
	body, err := CanonicalRotation(r)
	must(t, err)
	swapped[2] = Envelope{Body: body, Signature: full[2].Signature}
	_, err = Verify(swapped, pubA, VerifyOpts{})
	expectFailure(t, err, 2, ErrSignature, "signature does not verify")
	// The second key alone does not verify from the start; it verifies the
	// range after the rotation, given its start.
	_, err = Verify(full, pubB, VerifyOpts{})
	expectFailure(t, err, 0, ErrSignature, "names signer "+KeyID(pubA)+", not the given public key "+KeyID(pubB))
	if _, err := Verify(full[3:], pubB, VerifyOpts{From: 4, After: full[2].Hash()}); err != nil {
		t.Fatal(err)
	}
}

// A signed rotation to unsigned lets unsigned receipts follow signed ones
// (when unsigned receipts are allowed); a rotation cannot follow unsigned
// receipts, since no key signs the chain there.
func TestVerifyAcrossARotationToUnsigned(t *testing.T) {
	pubA, privA := testKey("a")
	chain := signedChain(t, 2, privA)
	chain = append(chain, rotation(t, chain[1], privA, nil))
	chain = extend(t, chain, 3, 2, nil)
	rep, err := Verify(chain, pubA, VerifyOpts{AllowUnsigned: true})
	must(t, err)
	if rep.Signed != 2 || rep.Unsigned != 2 || rep.Rotations != 1 || rep.KeyID != "" {
		t.Fatalf("report = %+v", rep)
	}
	_, err = Verify(chain, pubA, VerifyOpts{})
	expectFailure(t, err, 3, ErrUnsigned, "the receipt is unsigned")

	unsigned := signedChain(t, 2, nil)
	_, err = Verify(append(unsigned, rotation(t, unsigned[1], privA, nil)), pubA, VerifyOpts{AllowUnsigned: true})
	expectFailure(t, err, 2, ErrChain, "a key rotation follows unsigned receipts")
}

func mustEntry(t *testing.T, env Envelope) Entry {
	t.Helper()
	e, err := env.Entry()
	must(t, err)
	return e
}

// Given the head an auditor kept, verification proves nothing was dropped
// from the end: an export without its last receipt fails, as does one whose
// entry at the head's sequence was replaced. The head's file form carries
// the signed entry and refuses any edit.
func TestVerifyWithTheExpectedHead(t *testing.T) {
	pub, priv := testKey("a")
	envs := signedChain(t, 3, priv)
	head, err := HeadOf(envs[2])
	must(t, err)
	if head.Sequence != 3 || head.Hash != envs[2].Hash() || head.Signer != KeyID(pub) || !head.Time.Equal(mustReceipt(t, envs[2]).Stages[9].At) {
		t.Fatalf("head = %+v", head)
	}
	file, err := head.Marshal()
	must(t, err)
	fromFile, err := ParseHead(file)
	must(t, err)
	fromValue, err := ParseHeadValue(head.Value())
	must(t, err)

	for name, h := range map[string]Head{"file": fromFile, "value": fromValue} {
		t.Run(name, func(t *testing.T) {
			rep, err := Verify(envs, pub, VerifyOpts{Head: &h})
			must(t, err)
			if !rep.HeadChecked {
				t.Fatal("the head was not checked")
			}
			dir, names := exportChain(t, envs)
			must(t, os.Remove(filepath.Join(dir, names[2])))
			_, err = readAndVerify(t, dir, pub, VerifyOpts{Head: &h})
			expectFailure(t, err, 1, ErrChain, "the export ends at receipt 2, but the expected head is receipt 3: receipt 3 is missing from the end")
			// The last receipt replaced, re-signed by the key's holder.
			r := mustReceipt(t, envs[2])
			r.Tables[1].Rows++
			resigned, err := Sign(r, priv)
			must(t, err)
			_, err = Verify([]Envelope{envs[0], envs[1], resigned}, pub, VerifyOpts{Head: &h})
			expectFailure(t, err, 2, ErrChain, "not "+head.Hash+", the expected head's: the entry was replaced after the head was taken")
			// A longer chain still holds the head.
			longer := extend(t, envs, 4, 2, priv)
			if _, err := Verify(longer, pub, VerifyOpts{Head: &h}); err != nil {
				t.Fatal(err)
			}
			// A range after the head cannot be checked against it.
			_, err = Verify(longer[3:], pub, VerifyOpts{From: 4, After: envs[2].Hash(), Head: &h})
			expectFailure(t, err, 0, ErrChain, "the expected head, receipt 3, precedes this range")
		})
	}

	// The file form refuses edits: a field that is not its entry's, or any
	// other spelling of the file.
	for name, tc := range map[string]struct{ edited, reason string }{
		"sequence":  {strings.Replace(string(file), `"sequence":3,"signature"`, `"sequence":4,"signature"`, 1), "sequence 4 is not its entry's (3)"},
		"hash":      {strings.Replace(string(file), head.Hash, envs[1].Hash(), 1), "is not the hash of the entry it carries"},
		"signer":    {replaceLast(string(file), `"signer":"`+head.Signer, `"signer":"0000000000000000`), `signer "0000000000000000" is not its entry's`},
		"time":      {strings.Replace(string(file), `"time":"2025`, `"time":"2026`, 1), "is not its entry's"},
		"format":    {strings.Replace(string(file), HeadFormat, "communitydeletion.receipt-head/v0", 1), "format is"},
		"entry":     {strings.Replace(string(file), `"rows":103`, `"rows":104`, 1), "is not the hash of the entry it carries"},
		"indented":  {strings.Replace(string(file), `,"signature"`, `, "signature"`, 1), "not exactly what"},
		"extra key": {strings.Replace(string(file), `{"format"`, `{"note":"x","format"`, 1), "unknown field"},
	} {
		t.Run("edited "+name, func(t *testing.T) {
			if tc.edited == string(file) {
				t.Fatal("the edit changed nothing")
			}
			_, err := ParseHead([]byte(tc.edited))
			if !errors.Is(err, ErrHead) || !strings.Contains(err.Error(), tc.reason) {
				t.Fatalf("ParseHead = %v, want ErrHead saying %q", err, tc.reason)
			}
		})
	}
	// A head whose signature was swapped for another valid-looking one.
	other, err := HeadOf(Envelope{Body: envs[2].Body, Signature: envs[1].Signature})
	must(t, err)
	_, err = Verify(envs, pub, VerifyOpts{Head: &other})
	expectFailure(t, err, 2, ErrSignature, "the head's signature does not verify with key "+KeyID(pub))
	for _, v := range []string{"3", "0:" + head.Hash, "3:" + strings.ToUpper(head.Hash), "x:y", "3:" + head.Hash[:63]} {
		if _, err := ParseHeadValue(v); !errors.Is(err, ErrHead) {
			t.Errorf("ParseHeadValue(%q) = %v, want ErrHead", v, err)
		}
	}
}

// replaceLast replaces the last occurrence of old in s.
func replaceLast(s, old, replacement string) string {
	i := strings.LastIndex(s, old)
	if i < 0 {
		return s
	}
	return s[:i] + replacement + s[i+len(old):]
}
