package receipt

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// expectFailure asserts err is a *VerifyError at index, matching sentinel,
// whose one-line message names the receipt (its file, or its sequence) and
// contains reason.
func expectFailure(t *testing.T, err error, index int, sentinel error, reason string) {
	t.Helper()
	_ = expectVerifyError(t, err, index, sentinel, reason)
}

// expectVerifyError is expectFailure returning the *VerifyError.
func expectVerifyError(t *testing.T, err error, index int, sentinel error, reason string) *VerifyError {
	t.Helper()
	var ve *VerifyError
	if !errors.As(err, &ve) {
		t.Fatalf("error = %v (%T), want a *VerifyError", err, err)
	}
	if ve.Index != index {
		t.Errorf("failure at index %d, want %d: %v", ve.Index, index, err)
	}
	if !errors.Is(err, sentinel) {
		t.Errorf("error does not match %v: %v", sentinel, err)
	}
	msg := err.Error()
	if strings.Contains(msg, "\n") {
		t.Errorf("message spans lines: %q", msg)
	}
	name := ve.Source
	switch {
	case name != "":
	case ve.Sequence != 0:
		name = fmt.Sprintf("receipt %d", ve.Sequence)
	default:
		name = fmt.Sprintf("the receipt at position %d", index+1)
	}
	if !strings.Contains(msg, name) {
		t.Errorf("message %q does not name %q", msg, name)
	}
	if ve.RequestID != "" && !strings.Contains(msg, "request "+ve.RequestID) {
		t.Errorf("message %q does not name request %s", msg, ve.RequestID)
	}
	if !strings.Contains(msg, reason) {
		t.Errorf("message %q does not give the reason %q", msg, reason)
	}
	return ve
}

func exportChain(t *testing.T, envs []Envelope) (string, []string) {
	t.Helper()
	dir := t.TempDir()
	if err := WriteDir(dir, envs); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range envs {
		entry, err := e.Entry()
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, entry.FileName())
	}
	return dir, names
}

func readAndVerify(t *testing.T, dir string, pub []byte, opts VerifyOpts) (Report, error) {
	t.Helper()
	envs, err := ReadDir(dir)
	if err != nil {
		return Report{}, err
	}
	return Verify(envs, pub, opts)
}

func TestGoodChainVerifies(t *testing.T) {
	pub, priv := testKey("a")
	envs := signedChain(t, 3, priv)
	dir, names := exportChain(t, envs)
	got, err := ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range got {
		if e.Source != names[i] || !bytes.Equal(e.Body, envs[i].Body) || !bytes.Equal(e.Signature, envs[i].Signature) {
			t.Fatalf("file %d read back as %s, want %s with the exported bytes", i, e.Source, names[i])
		}
	}
	rep, err := Verify(got, pub, VerifyOpts{})
	if err != nil {
		t.Fatal(err)
	}
	want := Report{Receipts: 3, First: 1, Last: 3, LastHash: envs[2].Hash(), Signed: 3, KeyID: KeyID(pub), Keys: []string{KeyID(pub)}}
	if !reflect.DeepEqual(rep, want) {
		t.Fatalf("report = %+v, want %+v", rep, want)
	}
	// A later range verifies when given its start, and joins the earlier
	// one by hash.
	first, err := Verify(got[:1], pub, VerifyOpts{})
	must(t, err)
	if _, err := Verify(got[1:], pub, VerifyOpts{From: first.Last + 1, After: first.LastHash}); err != nil {
		t.Fatal(err)
	}
	err = func() error { _, err := Verify(got[2:], pub, VerifyOpts{From: 3, After: got[0].Hash()}); return err }()
	expectFailure(t, err, 0, ErrChain, "is not the expected "+got[0].Hash())
	err = func() error { _, err := Verify(got[2:], pub, VerifyOpts{From: 2, After: got[0].Hash()}); return err }()
	expectFailure(t, err, 0, ErrChain, "the range starts at receipt 3, not at the expected receipt 2")
	err = func() error { _, err := Verify(got[1:], pub, VerifyOpts{}); return err }()
	expectFailure(t, err, 0, ErrChain, "receipt 1 is missing")
	// A start needs both the sequence and the previous hash.
	for _, opts := range []VerifyOpts{{From: 2}, {After: got[0].Hash()}} {
		if _, err := Verify(got[1:], pub, opts); err == nil || errors.As(err, new(*VerifyError)) {
			t.Errorf("Verify with %+v = %v, want a refusal of the options", opts, err)
		}
	}
}

// leaf is one scalar in a receipt's JSON, reached by path.
type leaf struct {
	path []any // string keys and int indexes
}

func (l leaf) String() string { return fmt.Sprint(l.path...) }

func leaves(v any, path []any) []leaf {
	switch v := v.(type) {
	case map[string]any:
		var out []leaf
		for k, e := range v {
			out = append(out, leaves(e, append(slices.Clone(path), "."+k))...)
		}
		return out
	case []any:
		var out []leaf
		for i, e := range v {
			out = append(out, leaves(e, append(slices.Clone(path), i))...)
		}
		return out
	default:
		return []leaf{{path: path}}
	}
}

// mutate changes the scalar at path as a careful forger would, keeping its
// kind and shape: a number grows by one, a boolean flips, and a string has
// its last digit or lowercase letter changed (so a uuid stays a uuid and a
// time stays a time) or, if empty, becomes "x".
func mutate(v any, path []any) any {
	if len(path) == 0 {
		switch v := v.(type) {
		case json.Number:
			n, err := v.Int64()
			if err != nil {
				panic(err)
			}
			return json.Number(strconv.FormatInt(n+1, 10))
		case bool:
			return !v
		case string:
			b := []byte(v)
			for i := len(b) - 1; i >= 0; i-- {
				switch c := b[i]; {
				case c >= '0' && c <= '8', c >= 'a' && c <= 'e', c >= 'g' && c <= 'y':
					b[i]++
					return string(b)
				case c == '9':
					b[i] = '0'
					return string(b)
				case c == 'f', c == 'z':
					b[i] = 'a'
					return string(b)
				}
			}
			return v + "x"
		}
		panic(fmt.Sprintf("cannot mutate %T", v))
	}
	switch k := path[0].(type) {
	case string:
		m := v.(map[string]any)
		m[k[1:]] = mutate(m[k[1:]], path[1:])
		return m
	default:
		s := v.([]any)
		s[k.(int)] = mutate(s[k.(int)], path[1:])
		return s
	}
}

func decodeTree(t *testing.T, body []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestTamperEveryField edits each field of the middle receipt in its
// exported file, re-encoding it canonically so that only the value
// differs, and expects verification to fail at that receipt's signature.
func TestTamperEveryField(t *testing.T) {
	pub, priv := testKey("a")
	envs := signedChain(t, 3, priv)
	all := leaves(decodeTree(t, envs[1].Body), nil)
	if len(all) < 40 {
		t.Fatalf("found %d fields in a receipt, fewer than expected", len(all))
	}
	for _, l := range all {
		t.Run(l.String(), func(t *testing.T) {
			dir, names := exportChain(t, envs)
			tree := mutate(decodeTree(t, envs[1].Body), l.path)
			body, err := appendValue(nil, tree)
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Equal(body, envs[1].Body) {
				t.Fatal("the mutation changed nothing")
			}
			edited := Envelope{Body: body, Signature: envs[1].Signature}
			if err := os.WriteFile(filepath.Join(dir, names[1]), edited.Marshal(), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err = readAndVerify(t, dir, pub, VerifyOpts{})
			ve := expectVerifyError(t, err, 1, ErrSignature, "0000000002-")
			if !strings.Contains(ve.Reason, "signature does not verify") && !strings.Contains(ve.Reason, "no rotation names") {
				t.Errorf("reason %q does not say the signature failed", ve.Reason)
			}
		})
	}
}

// TestTamperEveryFieldUnsigned makes the same edits to an unsigned chain:
// nothing signs it, so the edit must show as an inconsistency in the
// receipt or as a broken link from the next one.
func TestTamperEveryFieldUnsigned(t *testing.T) {
	envs := signedChain(t, 3, nil)
	for _, l := range leaves(decodeTree(t, envs[1].Body), nil) {
		t.Run(l.String(), func(t *testing.T) {
			dir, names := exportChain(t, envs)
			body, err := appendValue(nil, mutate(decodeTree(t, envs[1].Body), l.path))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, names[1]), Envelope{Body: body}.Marshal(), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err = readAndVerify(t, dir, nil, VerifyOpts{AllowUnsigned: true})
			var ve *VerifyError
			if !errors.As(err, &ve) || ve.Index < 1 {
				t.Fatalf("error = %v, want a *VerifyError at the edited receipt or after it", err)
			}
			if ve.Index == 2 {
				expectFailure(t, err, 2, ErrChain, "is not "+HashBytes(body)+", the hash of receipt")
			}
		})
	}
}

func TestChainTampering(t *testing.T) {
	pub, priv := testKey("a")
	otherPub, other := testKey("b")
	envs := signedChain(t, 3, priv)
	r2 := mustReceipt(t, envs[1])

	resignedByOther, err := Sign(r2, other)
	if err != nil {
		t.Fatal(err)
	}
	// Signed by another key but still naming ours as the signer.
	claimsOurs := Envelope{Body: envs[1].Body, Signature: resignedByOther.Signature}
	// A producer holding the key links receipt 2 to a made-up predecessor.
	forgedLink := r2
	forgedLink.PreviousHash = digest("not receipt 1")
	forgedLinkEnv, err := Sign(forgedLink, priv)
	if err != nil {
		t.Fatal(err)
	}
	// Receipt 3 again for receipt 2's request.
	r3 := mustReceipt(t, envs[2])
	r3.RequestID = r2.RequestID
	sameRequest, err := Sign(r3, priv)
	if err != nil {
		t.Fatal(err)
	}

	with := func(i int, e Envelope) []Envelope {
		out := slices.Clone(envs)
		out[i] = e
		return out
	}
	cases := []struct {
		name     string
		envs     []Envelope
		index    int
		sentinel error
		reason   string
	}{
		{"drop one", []Envelope{envs[0], envs[2]}, 1, ErrChain, "receipt 3 follows receipt 1: receipt 2 is missing"},
		{"drop two", append(signedChain(t, 4, priv)[:1], signedChain(t, 4, priv)[3]), 1, ErrChain, "receipts 2 to 3 are missing"},
		{"reorder two", []Envelope{envs[0], envs[1], envs[0]}, 2, ErrChain, "receipt 1 follows receipt 2: out of order"},
		{"duplicate one", []Envelope{envs[0], envs[1], envs[1], envs[2]}, 2, ErrChain, "receipt 2 appears twice"},
		{"re-sign with another key", with(1, resignedByOther), 1, ErrSignature, "signed by key " + KeyID(otherPub) + ", but the chain is signed by key " + KeyID(pub) + " and no rotation names " + KeyID(otherPub)},
		{"first signed with another key", append([]Envelope{}, signedChain(t, 1, other)...), 0, ErrSignature, "names signer " + KeyID(otherPub) + ", not the given public key " + KeyID(pub)},
		{"signature by another key under our key id", with(1, claimsOurs), 1, ErrSignature, "signature does not verify"},
		{"strip a signature", with(1, Envelope{Body: envs[1].Body}), 1, ErrSignature, "carries no signature"},
		{"truncate a signature", with(1, Envelope{Body: envs[1].Body, Signature: envs[1].Signature[:63]}), 1, ErrSignature, "signature does not verify"},
		{"forge previous_hash", with(1, forgedLinkEnv), 1, ErrChain, "is not " + envs[0].Hash() + ", the hash of receipt 1"},
		{"one request twice", with(2, sameRequest), 2, ErrChain, "request " + r2.RequestID.String() + " already has receipt 2"},
		{"no receipts", nil, -1, ErrChain, "no receipts were given"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Verify(c.envs, pub, VerifyOpts{})
			if c.index < 0 {
				var ve *VerifyError
				if !errors.As(err, &ve) || !errors.Is(err, c.sentinel) || !strings.Contains(err.Error(), c.reason) {
					t.Fatalf("error = %v, want %v with %q", err, c.sentinel, c.reason)
				}
				return
			}
			expectFailure(t, err, c.index, c.sentinel, c.reason)
		})
	}
}

// TestDirectoryTampering edits an export with file operations only.
func TestDirectoryTampering(t *testing.T) {
	pub, priv := testKey("a")
	envs := signedChain(t, 3, priv)
	cases := []struct {
		name     string
		edit     func(t *testing.T, dir string, names []string)
		index    int
		sentinel error
		reason   string
	}{
		{"delete a file", func(t *testing.T, dir string, names []string) {
			must(t, os.Remove(filepath.Join(dir, names[1])))
		}, 1, ErrChain, "receipt 2 is missing"},
		{"swap two files' names", func(t *testing.T, dir string, names []string) {
			tmp := filepath.Join(dir, "swap")
			must(t, os.Rename(filepath.Join(dir, names[0]), tmp))
			must(t, os.Rename(filepath.Join(dir, names[1]), filepath.Join(dir, names[0])))
			must(t, os.Rename(tmp, filepath.Join(dir, names[1])))
		}, 0, ErrChain, "files were renamed"},
		{"copy a file under another name", func(t *testing.T, dir string, names []string) {
			data, err := os.ReadFile(filepath.Join(dir, names[1]))
			must(t, err)
			must(t, os.WriteFile(filepath.Join(dir, strings.TrimSuffix(names[1], FileSuffix)+"-copy"+FileSuffix), data, 0o644))
		}, 1, ErrChain, "files were renamed"},
		{"reformat a file", func(t *testing.T, dir string, names []string) {
			path := filepath.Join(dir, names[2])
			data, err := os.ReadFile(path)
			must(t, err)
			var pretty bytes.Buffer
			must(t, json.Indent(&pretty, data, "", "  "))
			must(t, os.WriteFile(path, pretty.Bytes(), 0o644))
		}, 2, ErrNotCanonical, "not a canonical receipt encoding"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir, names := exportChain(t, envs)
			c.edit(t, dir, names)
			_, err := readAndVerify(t, dir, pub, VerifyOpts{})
			expectFailure(t, err, c.index, c.sentinel, c.reason)
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestUnsignedChain(t *testing.T) {
	pub, _ := testKey("a")
	envs := signedChain(t, 3, nil)
	for _, e := range envs {
		if len(e.Signature) != 0 || mustReceipt(t, e).Signer != SignerUnsigned {
			t.Fatalf("unsigned envelope carries a signature or a signer: %s", e.Body)
		}
		if !bytes.Contains(e.Marshal(), []byte(`"signer":"unsigned"`)) || !bytes.HasSuffix(e.Marshal(), []byte(`,"signature":""}`+"\n")) {
			t.Fatalf("the file does not say it is unsigned: %s", e.Marshal())
		}
	}
	_, err := Verify(envs, pub, VerifyOpts{})
	expectFailure(t, err, 0, ErrUnsigned, "the receipt is unsigned")
	if !errors.Is(err, ErrSignature) {
		t.Error("ErrUnsigned does not match ErrSignature")
	}
	rep, err := Verify(envs, nil, VerifyOpts{AllowUnsigned: true})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Unsigned != 3 || rep.Signed != 0 || rep.Receipts != 3 {
		t.Fatalf("report = %+v, want 3 unsigned", rep)
	}
	// An unsigned receipt carrying a signature is refused.
	bad := slices.Clone(envs)
	bad[1].Signature = make([]byte, 64)
	_, err = Verify(bad, nil, VerifyOpts{AllowUnsigned: true})
	expectFailure(t, err, 1, ErrSignature, "says it is unsigned but carries a signature")
	// A signed receipt needs the public key.
	_, priv := testKey("a")
	_, err = Verify(signedChain(t, 1, priv), nil, VerifyOpts{AllowUnsigned: true})
	expectFailure(t, err, 0, ErrSignature, "no public key was given")
}

// TestInconsistentReceipts signs receipts that break one rule each, past
// Validate, and expects Verify to name the rule.
func TestInconsistentReceipts(t *testing.T) {
	pub, priv := testKey("a")
	first := signedChain(t, 1, priv)[0]
	cases := []struct {
		name   string
		edit   func(r *Receipt)
		reason string
	}{
		{"format", func(r *Receipt) { r.Format = "communitydeletion.receipt/v3" }, "format is"},
		{"short digest", func(r *Receipt) { r.InventoryDigest = r.InventoryDigest[:63] }, "inventory_digest"},
		{"uppercase digest", func(r *Receipt) { r.ManifestDigest = strings.ToUpper(r.ManifestDigest) }, "manifest_digest"},
		{"negative rows", func(r *Receipt) { r.Tables[1].Rows = -1 }, `table "messages" rows is -1`},
		{"bad mode", func(r *Receipt) { r.Tables[0].Mode = "truncate" }, `mode "truncate"`},
		{"unsorted tables", func(r *Receipt) { r.Tables[0], r.Tables[1] = r.Tables[1], r.Tables[0] }, "tables are not unique and sorted"},
		{"duplicate table", func(r *Receipt) { r.Tables[1].Table = r.Tables[0].Table }, "tables are not unique and sorted"},
		{"duplicate prefix", func(r *Receipt) { r.Objects = append(r.Objects, r.Objects[0]) }, "object prefixes are not unique"},
		{"negative cache count", func(r *Receipt) { r.Cache[0].Deleted = -2 }, "cache entries deleted"},
		{"absence status unknown", func(r *Receipt) { r.Absence[1].Status = "unverified" }, `absence in store "objects" has status "unverified"`},
		{"verified, nothing checked", func(r *Receipt) { r.Absence[1].Checked = nil }, `absence in store "objects" is verified, but names nothing that was checked`},
		{"memory cache verified", func(r *Receipt) { r.Absence[0].Kind = KindMemory }, `verified by the in-process cache`},
		{"not checked, no reason", func(r *Receipt) {
			r.Absence[0] = Absence{Store: StoreCache, Kind: KindMemory, Status: StatusNotChecked}
		}, `its detail does not say why`},
		{"not checked, names what", func(r *Receipt) { r.Absence[0].Status = StatusNotChecked }, `is not checked, yet names what was checked`},
		{"no kind", func(r *Receipt) { r.Absence[2].Kind = "" }, `absence postgres kind is empty`},
		{"checked unsorted", func(r *Receipt) { r.Absence[2].Checked = []string{"z", "a"} }, `absence postgres checked is not unique and sorted`},
		{"no postgres absence", func(r *Receipt) { r.Absence = r.Absence[:2] }, "absence has no postgres proof"},
		{"unknown store", func(r *Receipt) { r.Absence[0].Store = "disk" }, `absence store "disk"`},
		{"same approver name", func(r *Receipt) { r.ApprovedBy.Name = " ALICE " }, "a second person must approve"},
		{"same approver login", func(r *Receipt) { r.ApprovedBy.Login = r.SubmittedBy.Login }, "operators_share_role is false"},
		{"blank login", func(r *Receipt) { r.SubmittedBy.Login = "  " }, "submitted_by.login is blank"},
		{"stage times go back", func(r *Receipt) { r.Stages[4].At = r.Stages[2].At.Add(-1) }, "stage drained at"},
		{"stages out of order", func(r *Receipt) { r.Stages[3], r.Stages[4] = r.Stages[4], r.Stages[3] }, "stage fenced is recorded after drained"},
		{"stage repeated", func(r *Receipt) { r.Stages[4].Stage = StageFenced }, "stage fenced is recorded after fenced"},
		{"aborted stage", func(r *Receipt) { r.Stages[3].Stage = "aborted" }, `stages[3] is "aborted"`},
		{"not completed", func(r *Receipt) { r.Stages = r.Stages[:9] }, "stages do not record retention_pending"},
		{"no approval time", func(r *Receipt) { r.Stages = slices.Delete(r.Stages, 2, 3) }, "stages do not record approved"},
		{"deleted before approval", func(r *Receipt) { r.Community.DeletedAt = r.Stages[1].At }, "community.deleted_at"},
		{"nil request id", func(r *Receipt) { r.RequestID = [16]byte{} }, "request_id is the nil uuid"},
		{"nil community id", func(r *Receipt) { r.Community.ID = [16]byte{} }, "community.id is the nil uuid"},
		{"schema version", func(r *Receipt) { r.SchemaVersion = 0 }, "schema_version 0"},
		{"first with previous hash", func(r *Receipt) { r.PreviousHash = digest("x") }, "sequence 1 has previous_hash"},
		{"empty table name", func(r *Receipt) { r.Tables[0].Table = "" }, "tables[0].table is empty"},
		{"long detail", func(r *Receipt) { r.Absence[0].Detail = strings.Repeat("x", MaxText+1) }, "more than 4096"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := mustReceipt(t, first)
			r.Tables = slices.Clone(r.Tables)
			r.Absence = slices.Clone(r.Absence)
			for i := range r.Absence {
				r.Absence[i].Checked = slices.Clone(r.Absence[i].Checked)
			}
			r.Stages = slices.Clone(r.Stages)
			c.edit(&r)
			if _, err := Canonical(r); !errors.Is(err, ErrInconsistent) && c.name != "unsorted tables" && c.name != "stages out of order" && c.name != "checked unsorted" {
				t.Errorf("Canonical accepted the receipt: %v", err)
			}
			_, err := Verify([]Envelope{forge(t, r, priv)}, pub, VerifyOpts{})
			expectFailure(t, err, 0, ErrInconsistent, c.reason)
		})
	}
	// Format 1 cannot say what was checked: a producer cannot write it.
	v1 := mustReceipt(t, first)
	v1.Format = FormatV1
	if _, err := Canonical(v1); !errors.Is(err, ErrInconsistent) || !strings.Contains(err.Error(), "which format "+FormatV1+" cannot hold") {
		t.Errorf("Canonical of a format 1 receipt naming what was checked = %v", err)
	}
	// A count beyond 2^53-1 has no canonical encoding.
	r := mustReceipt(t, first)
	r.Tables[1].Rows = MaxCount + 1
	if _, err := Canonical(r); !errors.Is(err, ErrInconsistent) {
		t.Errorf("Canonical accepted rows beyond 2^53-1: %v", err)
	}
	huge := bytes.Replace(first.Body, []byte(`"rows":101`), []byte(`"rows":9007199254740992`), 1)
	_, err := Verify([]Envelope{{Body: huge, Signature: ed25519.Sign(priv, huge)}}, pub, VerifyOpts{})
	expectFailure(t, err, 0, ErrNotCanonical, "integer 9007199254740992 is outside")
	// A uuid that does not parse fails as an inconsistency, not a crash.
	body := bytes.Replace(first.Body, []byte(mustReceipt(t, first).RequestID.String()), []byte("not-a-uuid"), 1)
	_, err = Verify([]Envelope{{Body: body, Source: "x"}}, pub, VerifyOpts{})
	expectFailure(t, err, 0, ErrInconsistent, `request_id "not-a-uuid" is not a uuid`)
}

func TestOperatorsShareRole(t *testing.T) {
	r, err := Chain(nil, sample(1))
	must(t, err)
	r.ApprovedBy.Login = r.SubmittedBy.Login
	r.Signer = SignerUnsigned
	if err := Validate(Normalize(r)); !errors.Is(err, ErrInconsistent) {
		t.Fatalf("one login submitting and approving was accepted: %v", err)
	}
	r.OperatorsShareRole = true
	if err := Validate(Normalize(r)); err != nil {
		t.Fatalf("a shared login was refused though declared: %v", err)
	}
}
