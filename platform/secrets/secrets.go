// Package secrets seals the platform's upstream provider keys with AES-256-GCM
// before they reach the store. It imports only the standard library.
//
// The key comes from SLUICE_SECRET_KEY (32 bytes, base64 or hex) or, when
// that is unset, from the file secret.key in the data directory, created with
// 32 random bytes and mode 0600 on first use. Platform replicas sharing one
// PostgreSQL database must share the key: set SLUICE_SECRET_KEY on each.
package secrets

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// EnvKey is the environment variable holding the key.
const EnvKey = "SLUICE_SECRET_KEY"

// KeyFile is the key file's name in the data directory.
const KeyFile = "secret.key"

// format is the first byte of a sealed value: the layout
// format || nonce (12) || ciphertext+tag.
const format byte = 1

// Box seals and opens values with one key. Safe for concurrent use.
type Box struct {
	aead cipher.AEAD
}

// New returns a Box for a 32-byte key.
func New(key []byte) (*Box, error) {
	if len(key) != 32 {
		return nil, fmt.Errorf("secrets: the key must be 32 bytes, got %d", len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &Box{aead: aead}, nil
}

// Load returns the Box of env (the value of SLUICE_SECRET_KEY, "" when unset)
// or of dataDir's key file, creating the file when it does not exist.
func Load(env, dataDir string) (*Box, error) {
	if env != "" {
		key, err := decodeKey(env)
		if err != nil {
			return nil, fmt.Errorf("secrets: %s: %w", EnvKey, err)
		}
		return New(key)
	}
	path := filepath.Join(dataDir, KeyFile)
	key, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		key, err = create(path)
	}
	if err != nil {
		return nil, fmt.Errorf("secrets: %w", err)
	}
	return New(key)
}

func decodeKey(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	if b, err := hex.DecodeString(s); err == nil && len(b) == 32 {
		return b, nil
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil && len(b) == 32 {
			return b, nil
		}
	}
	return nil, errors.New("want 32 bytes as 64 hex digits or base64 (openssl rand -base64 32)")
}

// create writes a new random key to path, failing if the file appeared
// meanwhile (another process won the race: its key is read instead).
func create(path string) ([]byte, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return os.ReadFile(path)
	}
	if err != nil {
		return nil, err
	}
	if _, err := f.Write(key); err != nil {
		f.Close()
		return nil, err
	}
	return key, f.Close()
}

// Seal encrypts plaintext bound to aad (e.g. the provider id: a sealed value
// copied to another provider does not open).
func (b *Box) Seal(plaintext []byte, aad string) ([]byte, error) {
	out := make([]byte, 1+b.aead.NonceSize(), 1+b.aead.NonceSize()+len(plaintext)+b.aead.Overhead())
	out[0] = format
	if _, err := rand.Read(out[1:]); err != nil {
		return nil, err
	}
	return b.aead.Seal(out, out[1:], plaintext, []byte(aad)), nil
}

// Open decrypts a value sealed with the same key and aad.
func (b *Box) Open(sealed []byte, aad string) ([]byte, error) {
	n := b.aead.NonceSize()
	if len(sealed) < 1+n+b.aead.Overhead() || sealed[0] != format {
		return nil, errors.New("secrets: not a sealed value")
	}
	pt, err := b.aead.Open(nil, sealed[1:1+n], sealed[1+n:], []byte(aad))
	if err != nil {
		return nil, errors.New("secrets: cannot open the sealed value (wrong key, or sealed for another record)")
	}
	return pt, nil
}
