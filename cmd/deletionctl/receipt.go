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
	op := "receipt show of request " + cfg.requestID.String()
	env, err := store.Receipt(ctx, cfg.requestID)
	if err != nil {
		return failed(op, err, "deletionctl inspect --request "+cfg.requestID.String()+" shows where it is")
	}
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, env.Body, "", "  "); err != nil {
		return failed(op, fmt.Errorf("its stored body is not JSON: %w", err), "")
	}
	signature := "(unsigned)"
	if len(env.Signature) > 0 {
		signature = base64.StdEncoding.EncodeToString(env.Signature)
	}
	if cfg.json {
		r, err := env.Receipt()
		if err != nil {
			return failed(op, err, "")
		}
		var sig *string
		if len(env.Signature) > 0 {
			sig = &signature
		}
		return writeJSON(stdout, receiptShowReport{Sequence: r.Sequence, RequestID: r.RequestID.String(), Signer: r.Signer,
			Hash: env.Hash(), Signature: sig, Body: json.RawMessage(env.Body)})
	}
	fmt.Fprintf(stdout, "%s\nsignature: %s\nhash: %s\n", pretty.Bytes(), signature, env.Hash())
	return nil
}

// receiptShowReport is the JSON output of receipt show --json; Signature is
// the base64 signature, null for an unsigned receipt.
type receiptShowReport struct {
	Sequence  int64           `json:"sequence"`
	RequestID string          `json:"request_id"`
	Signer    string          `json:"signer"`
	Hash      string          `json:"hash"`
	Signature *string         `json:"signature"`
	Body      json.RawMessage `json:"body"`
}

// receiptExportReport is the JSON output of receipt export --json; First
// and Last are 0 when nothing was exported.
type receiptExportReport struct {
	Exported int    `json:"exported"`
	First    int64  `json:"first"`
	Last     int64  `json:"last"`
	Dir      string `json:"dir"`
}

// receiptVerifyReport is the JSON output of receipt verify --json.
type receiptVerifyReport struct {
	Receipts []verifiedReceipt `json:"receipts"`
	Verified int               `json:"verified"`
	First    int64             `json:"first"`
	Last     int64             `json:"last"`
	Signed   int               `json:"signed"`
	Unsigned int               `json:"unsigned"`
	KeyID    string            `json:"key_id"`
	LastHash string            `json:"last_hash"`
}

type verifiedReceipt struct {
	Sequence  int64  `json:"sequence"`
	RequestID string `json:"request_id"`
	Signer    string `json:"signer"`
	File      string `json:"file"`
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
	if cfg.json {
		return writeJSON(stdout, receiptExportReport{Exported: written, First: first, Last: last, Dir: cfg.dir})
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
	if cfg.json {
		out := receiptVerifyReport{Receipts: []verifiedReceipt{}, Verified: rep.Receipts, First: rep.First, Last: rep.Last,
			Signed: rep.Signed, Unsigned: rep.Unsigned, KeyID: rep.KeyID, LastHash: rep.LastHash}
		for _, env := range envs {
			r, _ := env.Receipt()
			out.Receipts = append(out.Receipts, verifiedReceipt{Sequence: r.Sequence, RequestID: r.RequestID.String(), Signer: r.Signer, File: env.Source})
		}
		return writeJSON(stdout, out)
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
