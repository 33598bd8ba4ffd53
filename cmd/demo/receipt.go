package main

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"os"
	"path/filepath"

	"github.com/google/uuid"

	"github.com/tombstoneworks/communitydeletion/lifecycle"
	"github.com/tombstoneworks/communitydeletion/receipt"
)

// demoKeys is the receipt signing key pair the demo generates: the private
// key signs as the executor's, the public key file is what an auditor gets.
// The receipts are exported beside them.
type demoKeys struct {
	dir     string
	private ed25519.PrivateKey
	pubPath string
	// kept says the directory outlives the demo (-keep).
	kept bool
}

// exportDir is where the receipts are exported.
func (k *demoKeys) exportDir() string { return filepath.Join(k.dir, "receipts") }

// headPath is where the chain's head is kept, apart from the export, as
// deletionctl receipt head --json writes it.
func (k *demoKeys) headPath() string { return filepath.Join(k.dir, "head.json") }

// generateKeys writes a new key pair into dir.
func generateKeys(dir string, kept bool) (*demoKeys, error) {
	k := &demoKeys{dir: dir, pubPath: filepath.Join(dir, "receipt.pub"), kept: kept}
	_, priv, err := receipt.GenerateKey(filepath.Join(dir, "receipt.key"), k.pubPath)
	if err != nil {
		return nil, err
	}
	k.private = priv
	return k, nil
}

// checkReceipt checks that the deletion's receipt r names the request and
// the demo's key, exports the chain into the key directory, keeps its head
// beside it, and verifies it offline with the public key file alone from
// receipt 1 to that head, as deletionctl receipt verify --dir DIR
// --public-key receipt.pub --expect-head head.json does, reporting each
// through check.
func checkReceipt(ctx context.Context, operator *lifecycle.Operator, request uuid.UUID, r receipt.Receipt, keys *demoKeys,
	check func(ok bool, format string, args ...any)) error {
	pub, err := receipt.LoadPublicKey(keys.pubPath)
	if err != nil {
		return err
	}
	check(r.RequestID == request && r.Signer == receipt.KeyID(pub), "receipt %d names the request and is signed by the demo's key %s", r.Sequence, receipt.KeyID(pub))
	envs, err := operator.Receipts(ctx, lifecycle.ReceiptsParams{})
	if err != nil {
		return err
	}
	if err := receipt.WriteDir(keys.exportDir(), envs); err != nil {
		return err
	}
	files, err := receipt.ReadDir(keys.exportDir())
	if err != nil {
		return err
	}
	// The head, kept apart from the export, proves that nothing was dropped
	// from its end; without From and After the chain starts at receipt 1.
	head, err := operator.ReceiptHead(ctx)
	if err != nil {
		return err
	}
	data, err := head.Marshal()
	if err != nil {
		return err
	}
	if err := os.WriteFile(keys.headPath(), data, 0o600); err != nil {
		return fmt.Errorf("keep the chain's head: %w", err)
	}
	rep, verr := receipt.Verify(files, pub, receipt.VerifyOpts{Head: &head})
	if verr != nil {
		check(false, "the exported chain verifies offline with the public key alone: %v", verr)
		return nil
	}
	check(rep.HeadChecked, "the exported chain verifies offline with the public key alone, from receipt 1 to the head (receipt %d): %s, %d signed",
		head.Sequence, plural(rep.Receipts, "receipt", "receipts"), rep.Signed)
	return nil
}

// plural is "1 receipt" or "2 receipts".
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
