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
	"os"
	"strings"

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

// receiptVerifyReport is the JSON output of receipt verify --json: every
// entry verified (deletion receipts and key rotations), the counts, the
// keys in order, where the range started and whether a head was checked.
// Head is null, and HeadChecked false, without --expect-head: then nothing
// proves that no receipt after Last is missing.
type receiptVerifyReport struct {
	Receipts     []verifiedEntry `json:"receipts"`
	Verified     int             `json:"verified"`
	Rotations    int             `json:"rotations"`
	First        int64           `json:"first"`
	Last         int64           `json:"last"`
	Signed       int             `json:"signed"`
	Unsigned     int             `json:"unsigned"`
	KeyID        string          `json:"key_id"`
	Keys         []string        `json:"keys"`
	LastHash     string          `json:"last_hash"`
	FromSequence int64           `json:"from_sequence"`
	PreviousHash *string         `json:"previous_hash"`
	HeadChecked  bool            `json:"head_checked"`
	Head         *string         `json:"head"`
}

// verifiedEntry is one entry of the chain receipt verify accepted: a
// deletion receipt (with its request) or a key rotation (with the signer it
// hands the chain to).
type verifiedEntry struct {
	Sequence  int64   `json:"sequence"`
	Kind      string  `json:"kind"`
	RequestID *string `json:"request_id"`
	Signer    string  `json:"signer"`
	NewSigner *string `json:"new_signer"`
	File      string  `json:"file"`
}

// Kinds of a verified entry, as the receipts table names them.
const (
	entryDeletion = "deletion"
	entryRotation = "rotation"
)

// receiptExport writes the receipts (and key rotations) after
// cfg.afterSequence, at most cfg.limit (0: all), into cfg.dir, a page at a
// time.
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
			e, err := env.Entry()
			if err != nil {
				return fmt.Errorf("receipt export: a stored receipt does not parse: %w", err)
			}
			if first == 0 {
				first = e.Sequence()
			}
			last, after = e.Sequence(), e.Sequence()
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
// to a database. It prints a line per entry and a summary, or returns the
// first failure as a *receipt.VerifyError (exit 3).
func receiptVerify(cfg config, stdout io.Writer) error {
	pub, err := receipt.LoadPublicKey(cfg.publicKey)
	if err != nil {
		return usagef("receipt verify: --public-key: %v", err)
	}
	opts := receipt.VerifyOpts{AllowUnsigned: cfg.allowUnsigned, From: cfg.fromSequence, After: cfg.previousHash}
	if cfg.expectHead != "" {
		head, err := loadHead(cfg.expectHead)
		if err != nil {
			return usagef("receipt verify: --expect-head: %v", err)
		}
		opts.Head = &head
	}
	envs, err := receipt.ReadDir(cfg.dir)
	if err != nil {
		return fmt.Errorf("receipt verify: %w", err)
	}
	rep, err := receipt.Verify(envs, pub, opts)
	if err != nil {
		return err
	}
	if cfg.json {
		return writeJSON(stdout, verifyReport(cfg, envs, rep, opts))
	}
	for _, env := range envs {
		e, _ := env.Entry()
		if e.Rotation != nil {
			fmt.Fprintf(stdout, "ok rotation %d from key %s to %s file %s\n", e.Rotation.Sequence, e.Rotation.Signer, e.Rotation.NewSigner, env.Source)
			continue
		}
		how := "signed by " + e.Receipt.Signer
		if e.Receipt.Signer == receipt.SignerUnsigned {
			how = "unsigned (allowed)"
		}
		fmt.Fprintf(stdout, "ok receipt %d request %s %s file %s\n", e.Receipt.Sequence, e.Receipt.RequestID, how, env.Source)
	}
	keys := "no key"
	if len(rep.Keys) > 0 {
		keys = "key " + strings.Join(rep.Keys, " then ")
	}
	from := "from the chain's first receipt"
	if cfg.fromSequence != 0 {
		from = fmt.Sprintf("from receipt %d after hash %s", cfg.fromSequence, cfg.previousHash)
	}
	to := "with no head given, receipts after the last one exported are not proven absent"
	if rep.HeadChecked {
		to = "to the expected head " + opts.Head.Value()
	}
	fmt.Fprintf(stdout, "verified %d receipts (%d to %d): %d signed with %s, %d unsigned, %d key rotations; %s, %s; last hash %s\n",
		rep.Receipts+rep.Rotations, rep.First, rep.Last, rep.Signed, keys, rep.Unsigned, rep.Rotations, from, to, rep.LastHash)
	return nil
}

// verifyReport is receipt verify's --json of the chain rep verified.
func verifyReport(cfg config, envs []receipt.Envelope, rep receipt.Report, opts receipt.VerifyOpts) receiptVerifyReport {
	out := receiptVerifyReport{Receipts: []verifiedEntry{}, Verified: rep.Receipts, Rotations: rep.Rotations,
		First: rep.First, Last: rep.Last, Signed: rep.Signed, Unsigned: rep.Unsigned, KeyID: rep.KeyID,
		Keys: append([]string{}, rep.Keys...), LastHash: rep.LastHash, FromSequence: 1, HeadChecked: rep.HeadChecked}
	if cfg.fromSequence != 0 {
		out.FromSequence, out.PreviousHash = cfg.fromSequence, &cfg.previousHash
	}
	if rep.HeadChecked {
		head := opts.Head.Value()
		out.Head = &head
	}
	for _, env := range envs {
		e, _ := env.Entry()
		if e.Rotation != nil {
			next := e.Rotation.NewSigner
			out.Receipts = append(out.Receipts, verifiedEntry{Sequence: e.Rotation.Sequence, Kind: entryRotation,
				Signer: e.Rotation.Signer, NewSigner: &next, File: env.Source})
			continue
		}
		id := e.Receipt.RequestID.String()
		out.Receipts = append(out.Receipts, verifiedEntry{Sequence: e.Receipt.Sequence, Kind: entryDeletion,
			RequestID: &id, Signer: e.Receipt.Signer, File: env.Source})
	}
	return out
}

// loadHead reads --expect-head: SEQUENCE:HASH, or the file receipt head
// --json wrote.
func loadHead(arg string) (receipt.Head, error) {
	if head, err := receipt.ParseHeadValue(arg); err == nil {
		return head, nil
	}
	data, err := os.ReadFile(arg)
	if err != nil {
		return receipt.Head{}, fmt.Errorf("neither SEQUENCE:HASH nor a readable head file: %w", err)
	}
	head, err := receipt.ParseHead(data)
	if err != nil {
		return receipt.Head{}, fmt.Errorf("%s: %w", arg, err)
	}
	return head, nil
}

// receiptHead prints the head of the chain: one line, or with --json the
// head file, which carries the newest entry and its signature.
func receiptHead(ctx context.Context, store *lifecycle.Operator, cfg config, stdout io.Writer) error {
	head, err := store.ReceiptHead(ctx)
	if err != nil {
		return failed("receipt head", err, "")
	}
	if cfg.json {
		data, err := head.Marshal()
		if err != nil {
			return failed("receipt head", err, "")
		}
		_, err = stdout.Write(data)
		return err
	}
	fmt.Fprintf(stdout, "head receipt %d hash %s at %s signer %s\nexpect-head %s\n",
		head.Sequence, head.Hash, head.Time.Format(receipt.TimeLayout), head.Signer, head.Value())
	return nil
}

// receiptRotateReport is the JSON output of receipt rotate --json: the
// rotation entry written, the key it hands the chain from and the signer
// (a key id, or unsigned) it hands it to.
type receiptRotateReport struct {
	Sequence  int64  `json:"sequence"`
	Signer    string `json:"signer"`
	NewSigner string `json:"new_signer"`
	Hash      string `json:"hash"`
}

// receiptRotate hands the chain on from the old key in cfg.oldKey to what
// the deployment registered, as the executor's login.
func receiptRotate(ctx context.Context, engine *lifecycle.Engine, old ed25519.PrivateKey, cfg config, stdout io.Writer) error {
	env, err := engine.RotateReceiptKey(ctx, old)
	if err != nil {
		return failed("receipt rotate", err, "")
	}
	e, err := env.Entry()
	if err != nil {
		return failed("receipt rotate", err, "")
	}
	if cfg.json {
		return writeJSON(stdout, receiptRotateReport{Sequence: e.Rotation.Sequence, Signer: e.Rotation.Signer,
			NewSigner: e.Rotation.NewSigner, Hash: env.Hash()})
	}
	fmt.Fprintf(stdout, "rotation %d hands the receipt chain from key %s to %s; hash %s\n",
		e.Rotation.Sequence, e.Rotation.Signer, e.Rotation.NewSigner, env.Hash())
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
