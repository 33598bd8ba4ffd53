package receipt

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
)

// goldenReceiptV1 is the receipt of the format 1 test vector (docs/receipts.md
// before format 2): its strings exercise every escaping rule. A receipt of
// that format must still parse and verify.
func goldenReceiptV1() Receipt {
	at := func(sec int, nsec int) time.Time { return time.Date(2025, 3, 1, 9, 0, sec, nsec, time.UTC) }
	return Receipt{
		Format:    FormatV1,
		RequestID: uuid.MustParse("0b9e3f1c-5a7d-4c2e-9f10-2d3c4b5a6978"),
		Community: Tenant{
			ID:        uuid.MustParse("7d1e2f3a-4b5c-4d6e-8f70-81a2b3c4d5e6"),
			Host:      "bücher.example",
			DeletedAt: at(6, 500000000),
		},
		InventoryDigest: strings.Repeat("ab", 32),
		ManifestDigest:  strings.Repeat("cd", 32),
		Tables: []Table{
			{Table: "messages", Mode: ModeDelete, Rows: 120},
			{Table: "audit_log", Mode: ModeNullify, Rows: 3},
		},
		Objects: []Objects{{Prefix: "communities/7d1e2f3a/", Deleted: 9}},
		Cache:   []Cache{{Pattern: "community:7d1e2f3a:*", Deleted: 0}},
		Absence: []Absence{
			{Store: StorePostgres, Status: StatusVerified, Detail: "0 rows; \"quoted\" \\ tab\t nl\n bell\x07 <&> \u2028"},
			{Store: StoreCache, Status: StatusVerified, Detail: ""},
		},
		SubmittedBy: Operator{Name: "Alice", Login: "ops_alice"},
		ApprovedBy:  Operator{Name: "Bob", Login: "ops_bob"},
		Stages: []StageTime{
			{Stage: StageApproved, At: at(2, 0)},
			{Stage: StageSubmitted, At: time.Date(2025, 3, 1, 10, 0, 0, 1000, time.FixedZone("CET", 3600))},
			{Stage: StageRetentionPending, At: at(9, 999999999)},
		},
		SchemaVersion: 14,
	}
}

// goldenReceipt is the receipt of the test vector in docs/receipts.md, in
// the current format: goldenReceiptV1 with the format 2 absence proofs (a
// verified listing of the object prefix, the in-process cache not checked,
// the registered tables).
func goldenReceipt() Receipt {
	r := goldenReceiptV1()
	r.Format = Format
	r.Absence = []Absence{
		{Store: StorePostgres, Kind: "postgresql", Checked: []string{"messages"}, Status: StatusVerified,
			Detail: "0 rows; \"quoted\" \\ tab\t nl\n bell\x07 <&> \u2028"},
		{Store: StoreCache, Kind: KindMemory, Status: StatusNotChecked, Detail: "the in-process cache lists nothing of the deployment's cache"},
		{Store: StoreObjects, Kind: "s3", Checked: []string{"communities/7d1e2f3a/"}, Status: StatusVerified},
	}
	at := func(sec int, nsec int) time.Time { return time.Date(2025, 3, 1, 9, 0, sec, nsec, time.UTC) }
	r.Excluded = []Exclusion{
		{Table: "public.partner_accounts", Reason: "ids of the partner system, not ours", ExcludedBy: "svc_owner", ExcludedAt: at(1, 0)},
		{Table: "public.drafts", Reason: "drafts outlive their author", ExcludedBy: "svc_owner", ExcludedAt: at(0, 5000), Until: at(3, 0)},
	}
	return r
}

// The format 1 test vector: goldenReceiptV1 chained first and signed with
// the key whose seed is SHA-256("golden").
const (
	goldenBody      = `{"absence":[{"detail":"","store":"cache","verified":true},{"detail":"0 rows; \"quoted\" \\ tab\t nl\n bell\u0007 <&>  ","store":"postgres","verified":true}],"approved_by":{"login":"ops_bob","name":"Bob"},"cache":[{"deleted":0,"pattern":"community:7d1e2f3a:*"}],"community":{"deleted_at":"2025-03-01T09:00:06.500000000Z","host":"bücher.example","id":"7d1e2f3a-4b5c-4d6e-8f70-81a2b3c4d5e6"},"format":"communitydeletion.receipt/v1","inventory_digest":"abababababababababababababababababababababababababababababababab","manifest_digest":"cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd","objects":[{"deleted":9,"prefix":"communities/7d1e2f3a/"}],"operators_share_role":false,"previous_hash":"","request_id":"0b9e3f1c-5a7d-4c2e-9f10-2d3c4b5a6978","schema_version":14,"sequence":1,"signer":"2d70204d1a412912","stages":[{"at":"2025-03-01T09:00:00.000001000Z","stage":"submitted"},{"at":"2025-03-01T09:00:02.000000000Z","stage":"approved"},{"at":"2025-03-01T09:00:09.999999999Z","stage":"retention_pending"}],"submitted_by":{"login":"ops_alice","name":"Alice"},"tables":[{"mode":"nullify","rows":3,"table":"audit_log"},{"mode":"delete","rows":120,"table":"messages"}]}`
	goldenHash      = "84646325dd7d98330a47cdc4db1f824e3f11f242e1e4b4f2fbf71cae9e7add02"
	goldenSignature = "gyWvCj+bOTf1ZNcF43GNqzWaYVvYMwizwlHN3gDJzH1a+9tFnnivtrGd+fai+eMluqYk+dEifxJnW1O5v3qpCA=="
	goldenPublicKey = `-----BEGIN PUBLIC KEY-----
MCowBQYDK2VwAyEAZtFEC/R8I/g6l3Yto1qliR2Ac0lH37rC97wWlKRhFpA=
-----END PUBLIC KEY-----
`
)

// The test vector docs/receipts.md publishes, in the current format:
// goldenReceipt chained first and signed with the golden key.
const (
	goldenV2Body      = `{"absence":[{"checked":[],"detail":"the in-process cache lists nothing of the deployment's cache","kind":"memory","status":"not_checked","store":"cache"},{"checked":["communities/7d1e2f3a/"],"detail":"","kind":"s3","status":"verified","store":"objects"},{"checked":["messages"],"detail":"0 rows; \"quoted\" \\ tab\t nl\n bell\u0007 <&>  ","kind":"postgresql","status":"verified","store":"postgres"}],"approved_by":{"login":"ops_bob","name":"Bob"},"cache":[{"deleted":0,"pattern":"community:7d1e2f3a:*"}],"community":{"deleted_at":"2025-03-01T09:00:06.500000000Z","host":"bücher.example","id":"7d1e2f3a-4b5c-4d6e-8f70-81a2b3c4d5e6"},"excluded_tables":[{"excluded_at":"2025-03-01T09:00:00.000005000Z","excluded_by":"svc_owner","reason":"drafts outlive their author","table":"public.drafts","until":"2025-03-01T09:00:03.000000000Z"},{"excluded_at":"2025-03-01T09:00:01.000000000Z","excluded_by":"svc_owner","reason":"ids of the partner system, not ours","table":"public.partner_accounts","until":""}],"format":"communitydeletion.receipt/v2","inventory_digest":"abababababababababababababababababababababababababababababababab","manifest_digest":"cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd","objects":[{"deleted":9,"prefix":"communities/7d1e2f3a/"}],"operators_share_role":false,"previous_hash":"","request_id":"0b9e3f1c-5a7d-4c2e-9f10-2d3c4b5a6978","schema_version":14,"sequence":1,"signer":"2d70204d1a412912","stages":[{"at":"2025-03-01T09:00:00.000001000Z","stage":"submitted"},{"at":"2025-03-01T09:00:02.000000000Z","stage":"approved"},{"at":"2025-03-01T09:00:09.999999999Z","stage":"retention_pending"}],"submitted_by":{"login":"ops_alice","name":"Alice"},"tables":[{"mode":"nullify","rows":3,"table":"audit_log"},{"mode":"delete","rows":120,"table":"messages"}]}`
	goldenV2Hash      = "8373816e93fa22df5d838dafb875bc2a265afc6a8166fb4030fa2933ecdbccdb"
	goldenV2Signature = "vz7PZBVHnn9MP/Wmky4xXjm7V81sr0k0r+zu5cZJXTzkV/RCAsDCSjJOZKMJ+be7TLEFX/HI+1fsZ0a91wGaAQ=="
)

func TestCanonicalGolden(t *testing.T) {
	_, priv := testKey("golden")
	r, err := Chain(nil, goldenReceipt())
	must(t, err)
	env, err := Sign(r, priv)
	must(t, err)
	if string(env.Body) != goldenV2Body {
		t.Fatalf("canonical encoding changed:\n got %s\nwant %s", env.Body, goldenV2Body)
	}
	if env.Hash() != goldenV2Hash {
		t.Fatalf("hash = %s, want %s", env.Hash(), goldenV2Hash)
	}
	if got := base64.StdEncoding.EncodeToString(env.Signature); got != goldenV2Signature {
		t.Fatalf("signature = %s, want %s", got, goldenV2Signature)
	}
	pub, err := ParsePublicKey([]byte(goldenPublicKey))
	must(t, err)
	if _, err := Verify([]Envelope{env}, pub, VerifyOpts{}); err != nil {
		t.Fatal(err)
	}
	got, err := Parse(env.Body)
	must(t, err)
	again, err := Canonical(got)
	must(t, err)
	if !bytes.Equal(again, env.Body) {
		t.Fatal("Parse then Canonical changed the bytes")
	}
	if got.Absence[0].Store != StoreCache || got.Absence[0].Verified() || got.Absence[1].Checked[0] != "communities/7d1e2f3a/" {
		t.Fatalf("Parse read the absence proofs as %+v", got.Absence)
	}
	// A format 2 body with a format 1 key, or the other way round, is not
	// canonical: each format has exactly its own keys.
	for name, in := range map[string]string{
		"v2 with verified": strings.Replace(goldenV2Body, `"status":"verified","store":"objects"`, `"status":"verified","store":"objects","verified":true`, 1),
		"v1 with status":   strings.Replace(goldenBody, `"store":"cache","verified":true`, `"status":"verified","store":"cache","verified":true`, 1),
		"v1 as v2":         strings.Replace(goldenBody, FormatV1, FormatV2, 1),
	} {
		if _, err := Parse([]byte(in)); !errors.Is(err, ErrNotCanonical) && !errors.Is(err, ErrInconsistent) {
			t.Errorf("%s: Parse = %v, want a refusal", name, err)
		}
	}
}

// The format 1 vector still encodes byte for byte and verifies: receipts
// written before format 2 stay evidence.
func TestCanonicalGoldenV1(t *testing.T) {
	_, priv := testKey("golden")
	r, err := Chain(nil, goldenReceiptV1())
	must(t, err)
	env, err := Sign(r, priv)
	must(t, err)
	if string(env.Body) != goldenBody {
		t.Fatalf("canonical encoding changed:\n got %s\nwant %s", env.Body, goldenBody)
	}
	if env.Hash() != goldenHash {
		t.Fatalf("hash = %s, want %s", env.Hash(), goldenHash)
	}
	if want := `{"receipt":` + goldenBody + `,"signature":"` + goldenSignature + "\"}\n"; string(env.Marshal()) != want {
		t.Fatalf("file = %s, want %s", env.Marshal(), want)
	}
	pub, err := ParsePublicKey([]byte(goldenPublicKey))
	must(t, err)
	if !pub.Equal(priv.Public()) {
		t.Fatal("the published public key is not the golden key's")
	}
	sig, err := base64.StdEncoding.DecodeString(goldenSignature)
	must(t, err)
	if _, err := Verify([]Envelope{{Body: []byte(goldenBody), Signature: sig}}, pub, VerifyOpts{}); err != nil {
		t.Fatalf("the format 1 vector no longer verifies: %v", err)
	}
	// encoding/json, which knows nothing of this package, reads the same
	// receipt: the body is standard JSON.
	var generic map[string]any
	must(t, json.Unmarshal(env.Body, &generic))
	if generic["community"].(map[string]any)["host"] != "bücher.example" {
		t.Fatalf("encoding/json read host %v", generic["community"])
	}
	// Parse gives back the normalized receipt.
	got, err := Parse(env.Body)
	must(t, err)
	again, err := Canonical(got)
	must(t, err)
	if !bytes.Equal(again, env.Body) {
		t.Fatal("Parse then Canonical changed the bytes")
	}
	if got.Stages[0].Stage != StageSubmitted || got.Tables[0].Table != "audit_log" || got.Stages[0].At.Location() != time.UTC {
		t.Fatalf("Parse did not return the normalized receipt: %+v", got)
	}
}

// TestParseRefusesNonCanonical gives Parse the golden body spelt other ways
// that decode to the same receipt, and other byte-level edits.
func TestParseRefusesNonCanonical(t *testing.T) {
	if _, err := Parse([]byte(goldenBody)); err != nil {
		t.Fatal(err)
	}
	replace := func(from, to string) string {
		if !strings.Contains(goldenBody, from) {
			t.Fatalf("the golden body has no %q", from)
		}
		return strings.Replace(goldenBody, from, to, 1)
	}
	var indented bytes.Buffer
	must(t, json.Indent(&indented, []byte(goldenBody), "", "  "))
	cases := map[string]string{
		"indented":             indented.String(),
		"space after colon":    replace(`"format":`, `"format": `),
		"trailing newline":     goldenBody + "\n",
		"leading space":        " " + goldenBody,
		"keys reordered":       replace(`"login":"ops_bob","name":"Bob"`, `"name":"Bob","login":"ops_bob"`),
		"key case":             replace(`"format":`, `"Format":`),
		"duplicate key":        replace(`"format":`, `"format":"x","format":`),
		"unknown key":          replace(`"format":`, `"comment":"hi","format":`),
		"missing key":          replace(`"operators_share_role":false,`, ``),
		"null list":            replace(`"objects":[{"deleted":9,"prefix":"communities/7d1e2f3a/"}]`, `"objects":null`),
		"uppercase uuid":       replace(`0b9e3f1c-5a7d-4c2e-9f10-2d3c4b5a6978`, `0B9E3F1C-5A7D-4C2E-9F10-2D3C4B5A6978`),
		"braced uuid":          replace(`"0b9e3f1c-5a7d-4c2e-9f10-2d3c4b5a6978"`, `"{0b9e3f1c-5a7d-4c2e-9f10-2d3c4b5a6978}"`),
		"time with offset":     replace(`2025-03-01T09:00:02.000000000Z`, `2025-03-01T10:00:02.000000000+01:00`),
		"time without nanos":   replace(`2025-03-01T09:00:02.000000000Z`, `2025-03-01T09:00:02Z`),
		"number as float":      replace(`"rows":120`, `"rows":120.0`),
		"number with exponent": replace(`"rows":120`, `"rows":1.2e2`),
		"number with plus":     replace(`"schema_version":14`, `"schema_version":+14`),
		"leading zero":         replace(`"schema_version":14`, `"schema_version":014`),
		"escaped solidus":      replace(`communities/7d1e2f3a/`, `communities\/7d1e2f3a\/`),
		"unicode escape":       replace(`"Bob"`, `"\u0042ob"`),
		"escaped non-ASCII":    replace(`bücher`, `b\u00fccher`),
		"long escape for tab":  replace(`tab\t`, `tab\u0009`),
		"tab unescaped":        replace(`tab\t`, "tab\t"),
		"html escaped":         replace(`<&>`, `\u003c&>`),
		"sequence as string":   replace(`"sequence":1`, `"sequence":"1"`),
		"truncated":            goldenBody[:len(goldenBody)-1],
		"invalid UTF-8":        replace(`bücher`, "b\xffcher"),
		"two values":           goldenBody + goldenBody,
	}
	for name, in := range cases {
		t.Run(name, func(t *testing.T) {
			if in == goldenBody {
				t.Fatal("the case does not change the body")
			}
			_, err := Parse([]byte(in))
			if !errors.Is(err, ErrNotCanonical) {
				t.Fatalf("Parse = %v, want ErrNotCanonical", err)
			}
		})
	}
}

func TestUnmarshalEnvelopeIsStrict(t *testing.T) {
	_, priv := testKey("golden")
	r, err := Chain(nil, goldenReceiptV1())
	must(t, err)
	env, err := Sign(r, priv)
	must(t, err)
	file := string(env.Marshal())
	got, err := UnmarshalEnvelope([]byte(file))
	must(t, err)
	if !bytes.Equal(got.Body, env.Body) || !bytes.Equal(got.Signature, env.Signature) {
		t.Fatal("the envelope did not round-trip")
	}
	for name, in := range map[string]string{
		"no newline":        strings.TrimSuffix(file, "\n"),
		"signature first":   `{"signature":"` + goldenSignature + `","receipt":` + goldenBody + "}\n",
		"extra key":         strings.Replace(file, `{"receipt":`, `{"note":"x","receipt":`, 1),
		"unpadded base64":   strings.Replace(file, `=="}`, `"}`, 1),
		"url base64":        strings.NewReplacer("+", "-", "/", "_").Replace(file),
		"space in envelope": strings.Replace(file, `,"signature":`, `, "signature":`, 1),
	} {
		t.Run(name, func(t *testing.T) {
			if in == file {
				t.Fatal("the case does not change the file")
			}
			if _, err := UnmarshalEnvelope([]byte(in)); !errors.Is(err, ErrNotCanonical) {
				t.Fatalf("UnmarshalEnvelope = %v, want ErrNotCanonical", err)
			}
		})
	}
}

func TestCanonicalNormalizes(t *testing.T) {
	r := sample(1)
	r.Sequence, r.Signer = 1, SignerUnsigned
	shuffled := r
	shuffled.Tables = []Table{r.Tables[1], r.Tables[0]}
	shuffled.Stages = append([]StageTime{r.Stages[9]}, r.Stages[:9]...)
	shuffled.Community.DeletedAt = r.Community.DeletedAt.In(time.FixedZone("X", -7*3600))
	a, err := Canonical(r)
	must(t, err)
	b, err := Canonical(shuffled)
	must(t, err)
	if !bytes.Equal(a, b) {
		t.Fatalf("the same receipt in another order encoded differently:\n%s\n%s", a, b)
	}
	if h, _ := Hash(r); h != HashBytes(a) {
		t.Fatal("Hash is not the SHA-256 of Canonical")
	}
}
