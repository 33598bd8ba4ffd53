package receipt

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
)

// KeyID names a public key in a receipt's Signer: the first 16 lowercase hex
// digits of the SHA-256 of the key's 32 raw bytes.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:8])
}

// ParsePrivateKey reads an Ed25519 private key from a file's contents or an
// environment variable's value: a PEM "PRIVATE KEY" block holding PKCS#8
// (what `openssl genpkey -algorithm ed25519` writes), or the 32-byte seed in
// standard base64. The error never quotes the key.
func ParsePrivateKey(data []byte) (ed25519.PrivateKey, error) {
	return keyFormat[ed25519.PrivateKey]{
		what: "signing key", blockType: "PRIVATE KEY", der: "PKCS#8", hint: ", as openssl genpkey -algorithm ed25519 writes",
		parseDER: x509.ParsePKCS8PrivateKey, rawSize: ed25519.SeedSize, rawName: "a base64 32-byte seed",
		fromRaw: ed25519.NewKeyFromSeed,
	}.parse(data)
}

// keyFormat is how a key of type K is written: a PEM block of blockType
// holding DER, or rawSize bytes in standard base64.
type keyFormat[K ed25519.PrivateKey | ed25519.PublicKey] struct {
	what      string // in errors: "signing key" or "public key"
	blockType string // the PEM block's type
	der       string // the DER format's name
	hint      string // where such a block comes from, for the refusal
	parseDER  func([]byte) (any, error)
	rawSize   int
	rawName   string // in errors: the raw form
	fromRaw   func([]byte) K
}

// parse reads data in f's format; its errors never quote the key.
func (f keyFormat[K]) parse(data []byte) (K, error) {
	var zero K
	data = bytes.TrimSpace(data)
	if block, rest := pem.Decode(data); block != nil {
		if block.Type != f.blockType {
			return zero, fmt.Errorf("parse receipt %s: a PEM %q block, want %q (%s%s)", f.what, block.Type, f.blockType, f.der, f.hint)
		}
		if len(bytes.TrimSpace(rest)) != 0 {
			return zero, fmt.Errorf("parse receipt %s: data follows the PEM block; give one key", f.what)
		}
		key, err := f.parseDER(block.Bytes)
		if err != nil {
			return zero, fmt.Errorf("parse receipt %s: not %s: %w", f.what, f.der, err)
		}
		k, ok := key.(K)
		if !ok {
			return zero, fmt.Errorf("parse receipt %s: a %T, want an Ed25519 key", f.what, key)
		}
		return k, nil
	}
	raw, err := base64.StdEncoding.Strict().DecodeString(string(data))
	if err != nil || len(raw) != f.rawSize {
		return zero, fmt.Errorf("parse receipt %s: neither a PEM %s Ed25519 key nor %s", f.what, f.der, f.rawName)
	}
	return f.fromRaw(raw), nil
}

// ErrKeyFileTooOpen matches the error LoadPrivateKey returns for a key
// file that its group or others may access: as ssh refuses such a key, a
// signing key must be private to its owner.
var ErrKeyFileTooOpen = errors.New("receipt signing key file is accessible by its group or others")

// LoadPrivateKey reads ParsePrivateKey's input from the file at path. It
// refuses (ErrKeyFileTooOpen) a file whose mode grants its group or others
// any access, as ssh does, before reading it: chmod 600 the file.
func LoadPrivateKey(path string) (ed25519.PrivateKey, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("load receipt signing key: %w", err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("load receipt signing key: %w", err)
	}
	// Windows reports permission bits it does not enforce.
	if perm := info.Mode().Perm(); perm&0o077 != 0 && runtime.GOOS != "windows" {
		return nil, fmt.Errorf("load receipt signing key: %s is mode %04o: %w; run chmod 600 %s", path, perm, ErrKeyFileTooOpen, path)
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("load receipt signing key: %w", err)
	}
	key, err := ParsePrivateKey(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return key, nil
}

// ParsePublicKey reads an Ed25519 public key: a PEM "PUBLIC KEY" block
// holding PKIX (what `openssl pkey -pubout` writes), or the 32 raw bytes in
// standard base64.
func ParsePublicKey(data []byte) (ed25519.PublicKey, error) {
	return keyFormat[ed25519.PublicKey]{
		what: "public key", blockType: "PUBLIC KEY", der: "PKIX", hint: ", as openssl pkey -pubout writes",
		parseDER: x509.ParsePKIXPublicKey, rawSize: ed25519.PublicKeySize, rawName: "32 bytes in base64",
		fromRaw: func(raw []byte) ed25519.PublicKey { return ed25519.PublicKey(raw) },
	}.parse(data)
}

// LoadPublicKey reads ParsePublicKey's input from the file at path.
func LoadPublicKey(path string) (ed25519.PublicKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load receipt public key: %w", err)
	}
	key, err := ParsePublicKey(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return key, nil
}

// MarshalPrivateKey returns key as a PEM "PRIVATE KEY" (PKCS#8) block.
func MarshalPrivateKey(key ed25519.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("marshal receipt signing key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// MarshalPublicKey returns pub as a PEM "PUBLIC KEY" (PKIX) block.
func MarshalPublicKey(pub ed25519.PublicKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, fmt.Errorf("marshal receipt public key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
}

// GenerateKey creates a new Ed25519 key pair and writes the private key to
// privPath (mode 0600) and the public key to pubPath (mode 0644) as PEM.
// It refuses to overwrite either file. It is meant for demos and tests; a
// deployment may equally use openssl genpkey -algorithm ed25519.
func GenerateKey(privPath, pubPath string) (ed25519.PublicKey, ed25519.PrivateKey, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate receipt signing key: %w", err)
	}
	privPEM, err := MarshalPrivateKey(priv)
	if err != nil {
		return nil, nil, err
	}
	pubPEM, err := MarshalPublicKey(pub)
	if err != nil {
		return nil, nil, err
	}
	for _, f := range []struct {
		path string
		data []byte
		perm os.FileMode
	}{{privPath, privPEM, 0o600}, {pubPath, pubPEM, 0o644}} {
		if err := writeNew(filepath.Dir(f.path), filepath.Base(f.path), f.data, f.perm); err != nil {
			return nil, nil, fmt.Errorf("generate receipt signing key: %w", err)
		}
	}
	return pub, priv, nil
}
