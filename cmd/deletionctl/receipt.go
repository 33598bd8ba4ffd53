package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/tombstoneworks/communitydeletion/lifecycle"
	"github.com/tombstoneworks/communitydeletion/receipt"
)

// receiptShow prints the receipt of cfg.requestID: its body as indented
// JSON, then its signature.
func receiptShow(ctx context.Context, store *lifecycle.Operator, cfg config, stdout io.Writer) error {
	env, err := store.Receipt(ctx, cfg.requestID)
	if err != nil {
		return fmt.Errorf("receipt show: %w", err)
	}
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, env.Body, "", "  "); err != nil {
		return fmt.Errorf("receipt show: the stored body of request %s is not JSON: %w", cfg.requestID, err)
	}
	signature := "(unsigned)"
	if len(env.Signature) > 0 {
		signature = base64.StdEncoding.EncodeToString(env.Signature)
	}
	fmt.Fprintf(stdout, "%s\nsignature: %s\nhash: %s\n", pretty.Bytes(), signature, env.Hash())
	return nil
}

// receiptExport writes the receipts after cfg.afterSequence, at most
// cfg.limit (0: all), into cfg.dir, a page at a time.
func receiptExport(ctx context.Context, store *lifecycle.Operator, cfg config, stdout io.Writer) error {
	after, written := cfg.afterSequence, 0
	var first, last int64
	for cfg.limit == 0 || written < cfg.limit {
		page := lifecycle.MaxReceiptsLimit
		if cfg.limit != 0 {
			page = min(page, cfg.limit-written)
		}
		envs, err := store.Receipts(ctx, lifecycle.ReceiptsParams{After: after, Limit: page})
		if err != nil {
			return fmt.Errorf("receipt export: %w", err)
		}
		if len(envs) == 0 {
			break
		}
		if err := receipt.WriteDir(cfg.dir, envs); err != nil {
			return fmt.Errorf("receipt export: %w", err)
		}
		for _, env := range envs {
			r, err := env.Receipt()
			if err != nil {
				return fmt.Errorf("receipt export: a stored receipt does not parse: %w", err)
			}
			if first == 0 {
				first = r.Sequence
			}
			last, after = r.Sequence, r.Sequence
		}
		written += len(envs)
	}
	if written == 0 {
		fmt.Fprintf(stdout, "no receipts after %d\n", cfg.afterSequence)
		return nil
	}
	fmt.Fprintf(stdout, "exported %d receipts (%d to %d) to %s\n", written, first, last, cfg.dir)
	return nil
}

// receiptVerify verifies the export in cfg.dir offline: it never connects
// to a database. It prints a line per receipt and a summary, or returns the
// first failure as a *receipt.VerifyError (exit 3).
func receiptVerify(cfg config, stdout io.Writer) error {
	pub, err := receipt.LoadPublicKey(cfg.publicKey)
	if err != nil {
		return usagef("receipt verify: --public-key: %v", err)
	}
	envs, err := receipt.ReadDir(cfg.dir)
	if err != nil {
		return fmt.Errorf("receipt verify: %w", err)
	}
	rep, err := receipt.Verify(envs, pub, receipt.VerifyOpts{AllowUnsigned: cfg.allowUnsigned})
	if err != nil {
		return err
	}
	for _, env := range envs {
		r, _ := env.Receipt()
		how := "signed by " + r.Signer
		if r.Signer == receipt.SignerUnsigned {
			how = "unsigned (allowed)"
		}
		fmt.Fprintf(stdout, "ok receipt %d request %s %s file %s\n", r.Sequence, r.RequestID, how, env.Source)
	}
	fmt.Fprintf(stdout, "verified %d receipts (%d to %d): %d signed with key %s, %d unsigned; last hash %s\n",
		rep.Receipts, rep.First, rep.Last, rep.Signed, rep.KeyID, rep.Unsigned, rep.LastHash)
	return nil
}

// receiptKey loads run's signing key from --receipt-key or
// $COMMUNITYDELETION_RECEIPT_KEY; nil when neither is given. A key that
// cannot be read is a usage error, and its text is never quoted.
func receiptKey(cfg config) (ed25519.PrivateKey, error) {
	switch {
	case cfg.receiptKey != "":
		key, err := receipt.LoadPrivateKey(cfg.receiptKey)
		if err != nil {
			return nil, usagef("run: --receipt-key: %v", err)
		}
		return key, nil
	case cfg.receiptEnv != "":
		key, err := receipt.ParsePrivateKey([]byte(cfg.receiptEnv))
		if err != nil {
			return nil, usagef("run: $%s: %v", envReceiptKey, err)
		}
		return key, nil
	}
	return nil, nil
}

// verifyFailed reports whether err is a failed receipt verification.
func verifyFailed(err error) bool {
	var ve *receipt.VerifyError
	return errors.As(err, &ve)
}
