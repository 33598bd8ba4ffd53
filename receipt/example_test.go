package receipt_test

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/google/uuid"

	"github.com/tombstoneworks/communitydeletion/receipt"
)

// completed returns the body of a completed deletion's receipt, as the
// executor fills it in from the database.
func completed(n int) receipt.Receipt {
	at := func(minutes int) time.Time {
		return time.Date(2025, 3, 1, 9, minutes, 0, 0, time.UTC).Add(time.Duration(n) * time.Hour)
	}
	digest := func(s string) string { return fmt.Sprintf("%x", sha256.Sum256([]byte(s))) }
	return receipt.Receipt{
		Format:    receipt.Format,
		RequestID: uuid.NewSHA1(uuid.NameSpaceURL, fmt.Appendf(nil, "request-%d", n)),
		Community: receipt.Tenant{
			ID:        uuid.NewSHA1(uuid.NameSpaceURL, fmt.Appendf(nil, "community-%d", n)),
			Host:      fmt.Sprintf("c%d.example.org", n),
			DeletedAt: at(5),
		},
		InventoryDigest: digest("inventory"),
		ManifestDigest:  digest("manifest"),
		Tables:          []receipt.Table{{Table: "messages", Mode: receipt.ModeDelete, Rows: 42}},
		Absence: []receipt.Absence{
			{Store: receipt.StorePostgres, Kind: "postgresql", Checked: []string{"messages"}, Status: receipt.StatusVerified},
			{Store: receipt.StoreCache, Kind: receipt.KindMemory, Status: receipt.StatusNotChecked, Detail: "the in-process cache lists nothing"},
		},
		SubmittedBy: receipt.Operator{Name: "alice", Login: "ops_alice"},
		ApprovedBy:  receipt.Operator{Name: "bob", Login: "ops_bob"},
		Stages: []receipt.StageTime{
			{Stage: receipt.StageSubmitted, At: at(0)},
			{Stage: receipt.StageApproved, At: at(2)},
			{Stage: receipt.StageRetentionPending, At: at(9)},
		},
		SchemaVersion: 14,
	}
}

// signedExport signs a chain of two receipts and exports it to a new
// directory.
func signedExport(priv ed25519.PrivateKey) (string, error) {
	var envs []receipt.Envelope
	var prev *receipt.Envelope
	for n := 1; n <= 2; n++ {
		r, err := receipt.Chain(prev, completed(n))
		if err != nil {
			return "", err
		}
		env, err := receipt.Sign(r, priv)
		if err != nil {
			return "", err
		}
		envs = append(envs, env)
		prev = &envs[len(envs)-1]
	}
	dir, err := os.MkdirTemp("", "receipts")
	if err != nil {
		return "", err
	}
	return dir, receipt.WriteDir(dir, envs)
}

// Sign receipts into a chain, export them, and verify the export offline
// with only the public key.
func Example_signAndVerify() {
	priv := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize)) // use LoadPrivateKey
	dir, err := signedExport(priv)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)

	envs, err := receipt.ReadDir(dir)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, e := range envs {
		fmt.Println(e.Source)
	}
	rep, err := receipt.Verify(envs, priv.Public().(ed25519.PublicKey), receipt.VerifyOpts{})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("verified receipts %d to %d, %d signed by key %s\n", rep.First, rep.Last, rep.Signed, rep.KeyID)
	// Output:
	// 0000000001-34beb3f0-6ff2-5972-87c1-f7424dcc08f6.receipt.json
	// 0000000002-9e1160ef-c65b-53e7-a832-8fd7bf465aa2.receipt.json
	// verified receipts 1 to 2, 2 signed by key 139e3940e64b5491
}

// Edit one count in an exported receipt: verification names the receipt
// and the reason.
func ExampleVerify_tampered() {
	priv := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))
	dir, err := signedExport(priv)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)

	names, _ := filepath.Glob(filepath.Join(dir, "*"+receipt.FileSuffix))
	data, _ := os.ReadFile(names[0])
	data = bytes.Replace(data, []byte(`"rows":42`), []byte(`"rows":41`), 1)
	_ = os.WriteFile(names[0], data, 0o644)

	envs, err := receipt.ReadDir(dir)
	if err != nil {
		fmt.Println(err)
		return
	}
	_, err = receipt.Verify(envs, priv.Public().(ed25519.PublicKey), receipt.VerifyOpts{})
	var ve *receipt.VerifyError
	if errors.As(err, &ve) && errors.Is(err, receipt.ErrSignature) {
		fmt.Println("failed at receipt", ve.Sequence)
	}
	fmt.Println(err)
	// Output:
	// failed at receipt 1
	// receipt verification failed at receipt 1, request 34beb3f0-6ff2-5972-87c1-f7424dcc08f6, file 0000000001-34beb3f0-6ff2-5972-87c1-f7424dcc08f6.receipt.json: the signature does not verify with public key 139e3940e64b5491: the receipt or its signature was altered
}
