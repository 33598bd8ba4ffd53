package receipt

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
)

// testKey returns a deterministic key pair named by seed.
func testKey(seed string) (ed25519.PublicKey, ed25519.PrivateKey) {
	s := sha256.Sum256([]byte(seed))
	priv := ed25519.NewKeyFromSeed(s[:])
	return priv.Public().(ed25519.PublicKey), priv
}

func digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// sample returns a valid receipt body for the n-th deletion, not yet
// chained or signed.
func sample(n int) Receipt {
	base := time.Date(2025, 3, 1, 9, 0, 0, 123456000, time.UTC).Add(time.Duration(n) * time.Hour)
	at := func(minutes int) time.Time { return base.Add(time.Duration(minutes) * time.Minute) }
	return Receipt{
		Format:    Format,
		RequestID: uuid.NewSHA1(uuid.NameSpaceURL, fmt.Appendf(nil, "request-%d", n)),
		Community: Tenant{
			ID:        uuid.NewSHA1(uuid.NameSpaceURL, fmt.Appendf(nil, "community-%d", n)),
			Host:      fmt.Sprintf("c%d.example.org", n),
			DeletedAt: at(6),
		},
		InventoryDigest: digest(fmt.Sprint("inventory", n)),
		ManifestDigest:  digest(fmt.Sprint("manifest", n)),
		Tables: []Table{
			{Table: "audit_log", Mode: ModeNullify, Rows: 4},
			{Table: "messages", Mode: ModeDelete, Rows: int64(100 + n)},
		},
		Objects: []Objects{{Prefix: fmt.Sprintf("communities/%d/", n), Deleted: 7}},
		Cache:   []Cache{{Pattern: fmt.Sprintf("community:%d:*", n), Deleted: 3}},
		Absence: []Absence{
			{Store: StoreCache, Kind: "redis", Checked: []string{"community:{tenant}:*"}, Status: StatusVerified, Detail: "no key matches"},
			{Store: StoreObjects, Kind: "s3", Checked: []string{fmt.Sprintf("communities/%d/", n)}, Status: StatusVerified, Detail: "no object under any prefix"},
			{Store: StorePostgres, Kind: "postgresql", Checked: []string{"messages"}, Status: StatusVerified, Detail: "0 rows in 1 registered delete table"},
		},
		SubmittedBy: Operator{Name: "alice", Login: "ops_alice"},
		ApprovedBy:  Operator{Name: "bob", Login: "ops_bob"},
		Stages: []StageTime{
			{Stage: StageSubmitted, At: at(0)},
			{Stage: StageInventoried, At: at(1)},
			{Stage: StageApproved, At: at(2)},
			{Stage: StageFenced, At: at(3)},
			{Stage: StageDrained, At: at(4)},
			{Stage: StageBindingsRemoved, At: at(5)},
			{Stage: StagePostgresPurged, At: at(6)},
			{Stage: StageCachePurged, At: at(7)},
			{Stage: StageLogicallyVerified, At: at(8)},
			{Stage: StageRetentionPending, At: at(9)},
		},
		SchemaVersion: 14,
	}
}

// signedChain returns n chained receipts signed by priv (or unsigned when
// priv is nil).
func signedChain(t testing.TB, n int, priv ed25519.PrivateKey) []Envelope {
	t.Helper()
	var envs []Envelope
	for i := 1; i <= n; i++ {
		var prev *Envelope
		if len(envs) > 0 {
			prev = &envs[len(envs)-1]
		}
		r, err := Chain(prev, sample(i))
		if err != nil {
			t.Fatal(err)
		}
		var env Envelope
		if priv == nil {
			env, err = Unsigned(r)
		} else {
			env, err = Sign(r, priv)
		}
		if err != nil {
			t.Fatal(err)
		}
		envs = append(envs, env)
	}
	return envs
}

// forge signs r's raw encoding with priv, skipping Validate, as a buggy or
// hostile producer holding the key could.
func forge(t testing.TB, r Receipt, priv ed25519.PrivateKey) Envelope {
	t.Helper()
	if priv == nil {
		r.Signer = SignerUnsigned
	} else {
		r.Signer = KeyID(priv.Public().(ed25519.PublicKey))
	}
	body, err := encode(r)
	if err != nil {
		t.Fatal(err)
	}
	env := Envelope{Body: body}
	if priv != nil {
		env.Signature = ed25519.Sign(priv, body)
	}
	return env
}

func mustReceipt(t testing.TB, env Envelope) Receipt {
	t.Helper()
	r, err := env.Receipt()
	if err != nil {
		t.Fatal(err)
	}
	return r
}
