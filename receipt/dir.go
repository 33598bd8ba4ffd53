package receipt

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// FileSuffix ends the name of every receipt file.
const FileSuffix = ".receipt.json"

// FileName is the name WriteDir gives r's file: the sequence zero-padded to
// ten digits, a hyphen, the request id and FileSuffix, so that listing a
// directory in name order lists its receipts in chain order.
func FileName(r Receipt) string {
	return fmt.Sprintf("%010d-%s%s", r.Sequence, r.RequestID, FileSuffix)
}

// WriteDir writes each envelope (a receipt or a key rotation) to dir
// (created if missing) as Entry.FileName names it, in the form Marshal writes. A file already there with the same
// bytes is left alone; one with other bytes is refused, never overwritten,
// since it is someone's evidence. Each file is written whole or not at all.
func WriteDir(dir string, envelopes []Envelope) error {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("export receipts: %w", err)
	}
	for i, env := range envelopes {
		e, err := env.Entry()
		if err != nil {
			return fmt.Errorf("export receipts: %s: %w", describe(env.Source, 0, "", i), err)
		}
		name := e.FileName()
		path := filepath.Join(dir, name)
		data := env.Marshal()
		switch old, err := os.ReadFile(path); {
		case err == nil && bytes.Equal(old, data):
			continue
		case err == nil:
			return fmt.Errorf("export receipts: %s already exists with other content; export into an empty directory", path)
		case !errors.Is(err, fs.ErrNotExist):
			return fmt.Errorf("export receipts: %w", err)
		}
		if err := writeNew(dir, name, data, 0o644); err != nil {
			return fmt.Errorf("export receipts: %w", err)
		}
	}
	return nil
}

// writeNew writes data to dir/name through a temporary file renamed into
// place, refusing if name exists by then.
func writeNew(dir, name string, data []byte, perm os.FileMode) error {
	tmp, err := os.CreateTemp(dir, "."+name+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(perm); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	// A hard link, unlike a rename, fails if the name exists.
	if err := os.Link(tmp.Name(), filepath.Join(dir, name)); err != nil {
		return err
	}
	return nil
}

// ReadDir reads every file in dir whose name ends in FileSuffix, in name
// order, with Source set to the file name. Other files are ignored. A file
// that is not an envelope fails with a *VerifyError (ErrNotCanonical) naming
// it. ReadDir checks nothing else: pass the result to Verify, which also
// catches files renamed to reorder them.
func ReadDir(dir string) ([]Envelope, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read receipts: %w", err)
	}
	var names []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), FileSuffix) && !strings.HasPrefix(e.Name(), ".") {
			names = append(names, e.Name())
		}
	}
	slices.Sort(names)
	envs := make([]Envelope, 0, len(names))
	for i, name := range names {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("read receipts: %w", err)
		}
		env, err := UnmarshalEnvelope(data)
		if err != nil {
			return nil, &VerifyError{Index: i, Source: name, Reason: err.Error(), Err: ErrNotCanonical}
		}
		env.Source = name
		envs = append(envs, env)
	}
	return envs, nil
}
