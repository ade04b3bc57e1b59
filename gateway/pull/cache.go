package pull

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Cache is the last applied deployment on disk. The document holds the
// upstream keys, so the file is mode 0600 and sealed with AES-256-GCM under
// a key derived from the gateway's platform token: only a gateway started
// with the same token reads it back. Writes replace the file atomically.
type Cache struct {
	Path string
	aead cipher.AEAD
}

// cacheMagic starts the file; the version byte follows it.
const cacheMagic = "SLUICEDC"

// NewCache returns the cache at path for the gateway holding token.
func NewCache(path, token string) (*Cache, error) {
	key := sha256.Sum256([]byte("sluice gateway deployment cache v1\x00" + token))
	block, err := aes.NewCipher(key[:])
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &Cache{Path: path, aead: aead}, nil
}

// Save writes u.
func (c *Cache) Save(u *Update) error {
	plain := binary.BigEndian.AppendUint64(nil, uint64(u.Version))
	plain = append(plain, u.Document...)
	out := append([]byte(cacheMagic), 1)
	nonce := make([]byte, c.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return err
	}
	out = append(out, nonce...)
	out = c.aead.Seal(out, nonce, plain, []byte(cacheMagic))
	if err := os.MkdirAll(filepath.Dir(c.Path), 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(c.Path), ".deployment-cache-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(out); err != nil {
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
	return os.Rename(tmp.Name(), c.Path)
}

// Load reads the cached deployment.
func (c *Cache) Load() (*Update, error) {
	b, err := os.ReadFile(c.Path)
	if err != nil {
		return nil, err
	}
	n := c.aead.NonceSize()
	head := len(cacheMagic) + 1
	if len(b) < head+n+c.aead.Overhead()+8 || string(b[:len(cacheMagic)]) != cacheMagic || b[len(cacheMagic)] != 1 {
		return nil, fmt.Errorf("%s is not a deployment cache", c.Path)
	}
	plain, err := c.aead.Open(nil, b[head:head+n], b[head+n:], []byte(cacheMagic))
	if err != nil {
		return nil, errors.New("the deployment cache does not open with this token (written by a gateway with another token, or damaged)")
	}
	return &Update{Version: int64(binary.BigEndian.Uint64(plain[:8])), Document: plain[8:]}, nil
}
