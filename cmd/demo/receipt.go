package main

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/google/uuid"

	"github.com/tombstoneworks/communitydeletion/lifecycle"
	"github.com/tombstoneworks/communitydeletion/receipt"
)

// demoKeys is the receipt signing key pair the demo generates: the private
// key signs as the executor's, the public key file is what an auditor gets.
type demoKeys struct {
	dir     string
	private ed25519.PrivateKey
	pubPath string
}

// generateKeys writes a new key pair into dir.
func generateKeys(out io.Writer, dir string) (*demoKeys, error) {
	k := &demoKeys{dir: dir, pubPath: filepath.Join(dir, "receipt.pub")}
	pub, priv, err := receipt.GenerateKey(filepath.Join(dir, "receipt.key"), k.pubPath)
	if err != nil {
		return nil, err
	}
	k.private = priv
	fmt.Fprintf(out, "receipt signing key %s generated in %s (the executor signs with receipt.key; auditors get receipt.pub)\n",
		receipt.KeyID(pub), dir)
	return k, nil
}

// checkReceipt prints a summary of the deletion's receipt, exports the
// chain into the key directory and verifies it offline with the public key
// file alone, reporting each through check.
func checkReceipt(ctx context.Context, out io.Writer, operator *lifecycle.Operator, request uuid.UUID, keys *demoKeys,
	check func(ok bool, format string, args ...any)) error {
	env, err := operator.Receipt(ctx, request)
	if err != nil {
		return err
	}
	r, err := env.Receipt()
	if err != nil {
		return fmt.Errorf("the stored receipt does not parse: %w", err)
	}
	var rows, objects, cache int64
	for _, t := range r.Tables {
		rows += t.Rows
	}
	for _, o := range r.Objects {
		objects += o.Deleted
	}
	for _, c := range r.Cache {
		cache += c.Deleted
	}
	var stores, unchecked []string
	for _, a := range r.Absence {
		if a.Verified() {
			stores = append(stores, fmt.Sprintf("%s (%s: %d checked)", a.Store, a.Kind, len(a.Checked)))
		} else {
			unchecked = append(unchecked, fmt.Sprintf("%s (%s: %s)", a.Store, a.Kind, a.Detail))
		}
	}
	submitted, _ := r.Stage(receipt.StageSubmitted)
	done, _ := r.Stage(receipt.StageRetentionPending)
	fmt.Fprintf(out, "\nreceipt %d of request %s (%d bytes, hash %s):\n", r.Sequence, r.RequestID, len(env.Body), env.Hash())
	fmt.Fprintf(out, "  community %s (%s), a tombstone since %s\n", r.Community.ID, r.Community.Host, r.Community.DeletedAt.Format(receipt.TimeLayout))
	fmt.Fprintf(out, "  commitments: inventory %s, destructive manifest %s\n", r.InventoryDigest, r.ManifestDigest)
	fmt.Fprintf(out, "  deleted: %d rows over %d tables, %d objects under %d prefixes, %d cache entries\n",
		rows, len(r.Tables), objects, len(r.Objects), cache)
	fmt.Fprintf(out, "  absence verified in %s; not checked: %s\n", strings.Join(stores, ", "), orNone(unchecked))
	fmt.Fprintf(out, "  submitted by %s (%s), approved by %s (%s); %d stages timed, %s from submission to completion\n",
		r.SubmittedBy.Name, r.SubmittedBy.Login, r.ApprovedBy.Name, r.ApprovedBy.Login, len(r.Stages), done.Sub(submitted).Round(1e6))
	fmt.Fprintf(out, "  schema version %d, signed by %s\n", r.SchemaVersion, r.Signer)

	envs, err := operator.Receipts(ctx, lifecycle.ReceiptsParams{})
	if err != nil {
		return err
	}
	exportDir := filepath.Join(keys.dir, "receipts")
	if err := receipt.WriteDir(exportDir, envs); err != nil {
		return err
	}
	// Offline: only the files and the public key, as deletionctl receipt
	// verify --dir DIR --public-key receipt.pub does.
	files, err := receipt.ReadDir(exportDir)
	if err != nil {
		return err
	}
	pub, err := receipt.LoadPublicKey(keys.pubPath)
	if err != nil {
		return err
	}
	head, err := operator.ReceiptHead(ctx)
	if err != nil {
		return err
	}
	rep, verr := receipt.Verify(files, pub, receipt.VerifyOpts{Head: &head})
	fmt.Fprintln(out, "\nreceipt checks:")
	check(r.RequestID == request && r.Signer == receipt.KeyID(pub), "the receipt names the request and the demo's signing key %s", receipt.KeyID(pub))
	if verr != nil {
		check(false, "the exported chain verifies offline: %v", verr)
		return nil
	}
	check(true, "the exported chain (%d receipt(s), %d to %d, in %s) verifies offline with receipt.pub: %d signed with key %s, from its first receipt to the head %s",
		rep.Receipts, rep.First, rep.Last, exportDir, rep.Signed, rep.KeyID, head.Value())
	return nil
}

// orNone joins s, or says none.
func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}
