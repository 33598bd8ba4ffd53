package receipt

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A key pair written by openssl 3.0 (genpkey -algorithm ed25519, then
// pkey -pubout), to prove the formats it writes load.
const (
	opensslPrivate = `-----BEGIN PRIVATE KEY-----
MC4CAQAwBQYDK2VwBCIEIK3ySjdDTTCD6Uj4+sfp+31j1+1icUYF2ZkcPZqmBYj8
-----END PRIVATE KEY-----
`
	opensslPublic = `-----BEGIN PUBLIC KEY-----
MCowBQYDK2VwAyEAa/H/RVbo2pJD11jNSmc4EwaCXKUGldoyieIBfzicihs=
-----END PUBLIC KEY-----
`
)

func TestKeysFromOpenSSL(t *testing.T) {
	priv, err := ParsePrivateKey([]byte(opensslPrivate))
	must(t, err)
	pub, err := ParsePublicKey([]byte(opensslPublic))
	must(t, err)
	if !pub.Equal(priv.Public()) {
		t.Fatal("the private key's public half is not the public key openssl derived")
	}
	// The same key as a base64 seed, as an environment variable may hold it.
	fromSeed, err := ParsePrivateKey([]byte(" " + base64.StdEncoding.EncodeToString(priv.Seed()) + "\n"))
	must(t, err)
	if !fromSeed.Equal(priv) {
		t.Fatal("the base64 seed gave another key")
	}
	if id := KeyID(pub); len(id) != 16 || strings.Trim(id, "0123456789abcdef") != "" {
		t.Fatalf("KeyID = %q, want 16 lowercase hex digits", id)
	}
}

func TestKeyParsingRefuses(t *testing.T) {
	for name, in := range map[string]string{
		"public key as private": opensslPublic,
		"garbage":               "not a key",
		"short seed":            base64.StdEncoding.EncodeToString(make([]byte, 31)),
		"two keys":              opensslPrivate + opensslPrivate,
		"rsa-style block":       strings.ReplaceAll(opensslPrivate, "PRIVATE KEY", "RSA PRIVATE KEY"),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ParsePrivateKey([]byte(in))
			if err == nil {
				t.Fatal("accepted")
			}
			if strings.Contains(err.Error(), "MC4CAQAw") {
				t.Fatalf("the error quotes the key: %v", err)
			}
		})
	}
	for name, in := range map[string]string{
		"private key as public": opensslPrivate,
		"garbage":               "not a key",
		"short raw":             base64.StdEncoding.EncodeToString(make([]byte, 31)),
	} {
		t.Run("public "+name, func(t *testing.T) {
			if _, err := ParsePublicKey([]byte(in)); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

func TestGenerateKey(t *testing.T) {
	dir := t.TempDir()
	privPath, pubPath := filepath.Join(dir, "receipt.key"), filepath.Join(dir, "receipt.pub")
	pub, priv, err := GenerateKey(privPath, pubPath)
	must(t, err)
	loadedPriv, err := LoadPrivateKey(privPath)
	must(t, err)
	loadedPub, err := LoadPublicKey(pubPath)
	must(t, err)
	if !loadedPriv.Equal(priv) || !loadedPub.Equal(pub) {
		t.Fatal("the written keys load as other keys")
	}
	info, err := os.Stat(privPath)
	must(t, err)
	if info.Mode().Perm() != 0o600 {
		t.Fatalf("private key mode %v, want 0600", info.Mode().Perm())
	}
	if _, _, err := GenerateKey(privPath, filepath.Join(dir, "other.pub")); err == nil {
		t.Fatal("GenerateKey overwrote an existing private key")
	}
	again, err := LoadPrivateKey(privPath)
	must(t, err)
	if !again.Equal(priv) {
		t.Fatal("the refused GenerateKey changed the private key")
	}
	// A signed chain verifies with the loaded public key.
	if _, err := Verify(signedChain(t, 2, loadedPriv), loadedPub, VerifyOpts{}); err != nil {
		t.Fatal(err)
	}
}

func TestWriteDirNeverOverwrites(t *testing.T) {
	_, priv := testKey("a")
	envs := signedChain(t, 2, priv)
	dir := t.TempDir()
	must(t, WriteDir(dir, envs))
	must(t, WriteDir(dir, envs)) // the same export again is a no-op
	_, other := testKey("b")
	resigned, err := Sign(mustReceipt(t, envs[1]), other)
	must(t, err)
	err = WriteDir(dir, []Envelope{resigned})
	if err == nil || !strings.Contains(err.Error(), "already exists with other content") {
		t.Fatalf("WriteDir over a different receipt = %v, want a refusal", err)
	}
	got, err := ReadDir(dir)
	must(t, err)
	if len(got) != 2 || string(got[1].Signature) != string(envs[1].Signature) {
		t.Fatal("the refused export changed the directory")
	}
	entries, err := os.ReadDir(dir)
	must(t, err)
	if len(entries) != 2 {
		t.Fatalf("the directory holds %d entries, want 2 (no temporary files left)", len(entries))
	}
}
