package secrets

import (
	"bytes"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSealOpen(t *testing.T) {
	b, err := New(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	secret := []byte("sk-upstream-very-secret")
	s1, _ := b.Seal(secret, "prv-1")
	s2, _ := b.Seal(secret, "prv-1")
	if bytes.Contains(s1, secret) || bytes.Equal(s1, s2) {
		t.Fatal("sealed value holds the plaintext, or the nonce repeats")
	}
	if got, err := b.Open(s1, "prv-1"); err != nil || !bytes.Equal(got, secret) {
		t.Fatalf("open: %q %v", got, err)
	}
	cases := map[string]func() ([]byte, error){
		"other record": func() ([]byte, error) { return b.Open(s1, "prv-2") },
		"tampered":     func() ([]byte, error) { c := bytes.Clone(s1); c[len(c)-1] ^= 1; return b.Open(c, "prv-1") },
		"truncated":    func() ([]byte, error) { return b.Open(s1[:10], "prv-1") },
		"other key": func() ([]byte, error) {
			o, _ := New(bytes.Repeat([]byte{8}, 32))
			return o.Open(s1, "prv-1")
		},
	}
	for name, open := range cases {
		if _, err := open(); err == nil {
			t.Errorf("%s: opened", name)
		}
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	a, err := Load("", dir)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, KeyFile))
	if err != nil || fi.Mode().Perm() != 0o600 || fi.Size() != 32 {
		t.Fatalf("key file: %v %v", fi, err)
	}
	sealed, _ := a.Seal([]byte("x"), "id")
	b, err := Load("", dir) // the same file, the same key
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Open(sealed, "id"); err != nil {
		t.Fatalf("reloaded key does not open: %v", err)
	}

	key := bytes.Repeat([]byte{3}, 32)
	for _, env := range []string{base64.StdEncoding.EncodeToString(key), strings.Repeat("03", 32)} {
		e, err := Load(env, t.TempDir())
		if err != nil {
			t.Fatalf("%q: %v", env, err)
		}
		direct, _ := New(key)
		s, _ := direct.Seal([]byte("y"), "id")
		if _, err := e.Open(s, "id"); err != nil {
			t.Fatalf("env key %q differs from the raw key", env)
		}
	}
	for _, bad := range []string{"short", base64.StdEncoding.EncodeToString(key[:16])} {
		if _, err := Load(bad, t.TempDir()); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
