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
	"os"
	"path/filepath"
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
	data = bytes.TrimSpace(data)
	if block, rest := pem.Decode(data); block != nil {
		if block.Type != "PRIVATE KEY" {
			return nil, fmt.Errorf("parse receipt signing key: a PEM %q block, want \"PRIVATE KEY\" (PKCS#8, as openssl genpkey -algorithm ed25519 writes)", block.Type)
		}
		if len(bytes.TrimSpace(rest)) != 0 {
			return nil, errors.New("parse receipt signing key: data follows the PEM block; give one key")
		}
		key, err := x509.ParsePKCS8PrivateKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("parse receipt signing key: not PKCS#8: %w", err)
		}
		priv, ok := key.(ed25519.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("parse receipt signing key: a %T, want an Ed25519 key", key)
		}
		return priv, nil
	}
	seed, err := base64.StdEncoding.Strict().DecodeString(string(data))
	if err != nil || len(seed) != ed25519.SeedSize {
		return nil, errors.New("parse receipt signing key: neither a PEM PKCS#8 Ed25519 key nor a base64 32-byte seed")
	}
	return ed25519.NewKeyFromSeed(seed), nil
}

// LoadPrivateKey reads ParsePrivateKey's input from the file at path.
func LoadPrivateKey(path string) (ed25519.PrivateKey, error) {
	data, err := os.ReadFile(path)
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
	data = bytes.TrimSpace(data)
	if block, rest := pem.Decode(data); block != nil {
		if block.Type != "PUBLIC KEY" {
			return nil, fmt.Errorf("parse receipt public key: a PEM %q block, want \"PUBLIC KEY\" (PKIX)", block.Type)
		}
		if len(bytes.TrimSpace(rest)) != 0 {
			return nil, errors.New("parse receipt public key: data follows the PEM block; give one key")
		}
		key, err := x509.ParsePKIXPublicKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("parse receipt public key: not PKIX: %w", err)
		}
		pub, ok := key.(ed25519.PublicKey)
		if !ok {
			return nil, fmt.Errorf("parse receipt public key: a %T, want an Ed25519 key", key)
		}
		return pub, nil
	}
	raw, err := base64.StdEncoding.Strict().DecodeString(string(data))
	if err != nil || len(raw) != ed25519.PublicKeySize {
		return nil, errors.New("parse receipt public key: neither a PEM PKIX Ed25519 key nor 32 bytes in base64")
	}
	return ed25519.PublicKey(raw), nil
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
