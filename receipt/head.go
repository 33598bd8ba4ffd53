package receipt

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// HeadFormat is the "format" of a chain head file.
const HeadFormat = "communitydeletion.receipt-head/v1"

// ErrHead matches the error ParseHead and ParseHeadValue return for a head
// that is malformed or contradicts the entry it carries.
var ErrHead = errors.New("not a valid receipt chain head")

// Head is the head of a deployment's chain as an auditor keeps it outside
// the database: the newest entry's sequence, hash, time and signer. The
// newest entry is itself signed, so the head needs no signature of its own:
// Envelope, when set (a head read from the file `deletionctl receipt head
// --json` writes), is that entry, whose signature Verify checks offline
// with the key the chain names. A head given only as a value
// (SEQUENCE:HASH) has no Envelope; the export's own entry at Sequence is
// checked instead.
type Head struct {
	Sequence int64
	Hash     string
	Time     time.Time
	Signer   string
	Envelope *Envelope
}

// HeadOf returns the head whose newest entry is env.
func HeadOf(env Envelope) (Head, error) {
	e, err := env.Entry()
	if err != nil {
		return Head{}, fmt.Errorf("receipt chain head: the newest entry does not parse: %w", err)
	}
	env.Source = ""
	return Head{Sequence: e.Sequence(), Hash: env.Hash(), Time: e.Time().UTC(), Signer: e.Signer(), Envelope: &env}, nil
}

// Value is the head as one value, SEQUENCE:HASH, for a command line.
func (h Head) Value() string { return fmt.Sprintf("%d:%s", h.Sequence, h.Hash) }

// Marshal returns the head's file form, exactly:
// {"format":…,"hash":…,"receipt":BODY,"sequence":N,"signature":"SIG","signer":…,"time":…}
// and a newline, keys sorted, where BODY and SIG are the newest entry's
// body verbatim and its signature (standard padded base64, empty when it
// is unsigned). It needs h.Envelope.
func (h Head) Marshal() ([]byte, error) {
	if h.Envelope == nil {
		return nil, errors.New("receipt chain head: no entry to write")
	}
	var b bytes.Buffer
	b.WriteString(`{"format":`)
	b.Write(appendString(nil, HeadFormat))
	b.WriteString(`,"hash":`)
	b.Write(appendString(nil, h.Hash))
	b.WriteString(`,"receipt":`)
	b.Write(h.Envelope.Body)
	b.WriteString(`,"sequence":`)
	b.WriteString(strconv.FormatInt(h.Sequence, 10))
	b.WriteString(`,"signature":`)
	b.Write(appendString(nil, base64.StdEncoding.EncodeToString(h.Envelope.Signature)))
	b.WriteString(`,"signer":`)
	b.Write(appendString(nil, h.Signer))
	b.WriteString(`,"time":`)
	b.Write(appendString(nil, formatTime(h.Time)))
	b.WriteString("}\n")
	return b.Bytes(), nil
}

type headFile struct {
	Format    string          `json:"format"`
	Hash      string          `json:"hash"`
	Receipt   json.RawMessage `json:"receipt"`
	Sequence  int64           `json:"sequence"`
	Signature string          `json:"signature"`
	Signer    string          `json:"signer"`
	Time      string          `json:"time"`
}

// ParseHead reads a head from the file form Marshal writes. It refuses
// (ErrHead) anything but exactly those bytes, and a head whose sequence,
// hash, time or signer is not its entry's: the entry's body is the one
// that was signed, so a head cannot be edited without breaking it.
func ParseHead(data []byte) (Head, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var f headFile
	if err := dec.Decode(&f); err != nil {
		return Head{}, fmt.Errorf("%w: %v", ErrHead, err)
	}
	if f.Format != HeadFormat {
		return Head{}, fmt.Errorf("%w: format is %q, want %q", ErrHead, clip(f.Format), HeadFormat)
	}
	sig, err := base64.StdEncoding.Strict().DecodeString(f.Signature)
	if err != nil {
		return Head{}, fmt.Errorf("%w: the signature is not padded standard base64", ErrHead)
	}
	if len(sig) == 0 {
		sig = nil
	}
	h, err := HeadOf(Envelope{Body: bytes.Clone(f.Receipt), Signature: sig})
	if err != nil {
		return Head{}, fmt.Errorf("%w: %v", ErrHead, err)
	}
	switch {
	case f.Hash != h.Hash:
		return Head{}, fmt.Errorf("%w: hash %s is not the hash of the entry it carries (%s)", ErrHead, clip(f.Hash), h.Hash)
	case f.Sequence != h.Sequence:
		return Head{}, fmt.Errorf("%w: sequence %d is not its entry's (%d)", ErrHead, f.Sequence, h.Sequence)
	case f.Signer != h.Signer:
		return Head{}, fmt.Errorf("%w: signer %q is not its entry's (%s)", ErrHead, clip(f.Signer), h.Signer)
	case f.Time != formatTime(h.Time):
		return Head{}, fmt.Errorf("%w: time %q is not its entry's (%s)", ErrHead, clip(f.Time), formatTime(h.Time))
	}
	again, err := h.Marshal()
	if err != nil || !bytes.Equal(again, data) {
		return Head{}, fmt.Errorf("%w: the file is not exactly what `deletionctl receipt head --json` writes", ErrHead)
	}
	return h, nil
}

var headValue = regexp.MustCompile(`^([1-9][0-9]{0,15}):([0-9a-f]{64})$`)

// ParseHeadValue reads a head given as SEQUENCE:HASH (Head.Value).
func ParseHeadValue(s string) (Head, error) {
	m := headValue.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return Head{}, fmt.Errorf("%w: %q is not SEQUENCE:HASH (a sequence from 1 and 64 lowercase hex digits)", ErrHead, clip(s))
	}
	seq, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil || seq > MaxCount {
		return Head{}, fmt.Errorf("%w: sequence %s is out of range", ErrHead, m[1])
	}
	return Head{Sequence: seq, Hash: m[2]}, nil
}
