package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"strings"
	"testing"
)

func TestKeysHash(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantOut  string
		wantErr  string
	}{
		// sha256("abc") is the FIPS 180-2 test vector.
		{name: "known vector", args: []string{"keys", "hash", "abc"}, wantCode: 0,
			wantOut: "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad\n"},
		{name: "no key", args: []string{"keys", "hash"}, wantCode: 2, wantErr: "exactly one"},
		{name: "empty key", args: []string{"keys", "hash", ""}, wantCode: 2, wantErr: "non-empty"},
		{name: "two keys", args: []string{"keys", "hash", "a", "b"}, wantCode: 2, wantErr: "exactly one"},
		{name: "no subcommand", args: []string{"keys"}, wantCode: 2, wantErr: "usage"},
		{name: "unknown subcommand", args: []string{"keys", "rotate"}, wantCode: 2, wantErr: `unknown subcommand "rotate"`},
		{name: "help", args: []string{"keys", "--help"}, wantCode: 0, wantOut: "sluice keys hash KEY"},
		{name: "new takes no args", args: []string{"keys", "new", "x"}, wantCode: 2, wantErr: "no arguments"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(tt.args, &out, &errb)
			if code != tt.wantCode {
				t.Fatalf("exit %d, want %d (stderr %q)", code, tt.wantCode, errb.String())
			}
			if tt.wantOut != "" && !strings.Contains(out.String(), tt.wantOut) {
				t.Fatalf("stdout %q, want %q", out.String(), tt.wantOut)
			}
			if tt.wantErr != "" && !strings.Contains(errb.String(), tt.wantErr) {
				t.Fatalf("stderr %q, want %q", errb.String(), tt.wantErr)
			}
		})
	}
}

var newKeyOutput = regexp.MustCompile(`^key:  (sk-sluice-[0-9A-Za-z]{43})\nhash: (sha256:[0-9a-f]{64})\n$`)

func TestKeysNew(t *testing.T) {
	seen := map[string]bool{}
	for range 50 {
		var out, errb bytes.Buffer
		if code := run([]string{"keys", "new"}, &out, &errb); code != 0 {
			t.Fatalf("exit %d: %s", code, errb.String())
		}
		m := newKeyOutput.FindStringSubmatch(out.String())
		if m == nil {
			t.Fatalf("output %q does not match %s", out.String(), newKeyOutput)
		}
		sum := sha256.Sum256([]byte(m[1]))
		if m[2] != "sha256:"+hex.EncodeToString(sum[:]) {
			t.Fatalf("hash line %q is not the hash of %q", m[2], m[1])
		}
		var hashOut bytes.Buffer
		run([]string{"keys", "hash", m[1]}, &hashOut, &errb)
		if strings.TrimSpace(hashOut.String()) != m[2] {
			t.Fatalf("keys hash disagrees with keys new: %q vs %q", hashOut.String(), m[2])
		}
		if seen[m[1]] {
			t.Fatalf("duplicate key %s", m[1])
		}
		seen[m[1]] = true
	}
}

// TestNewKeyUniform feeds newKey bytes that exercise rejection: bytes >= 248
// must be skipped, so the output only depends on the accepted bytes.
func TestNewKeyRejectsBiasedBytes(t *testing.T) {
	src := bytes.Repeat([]byte{255, 0, 248, 61, 62}, 100)
	key, err := newKey(bytes.NewReader(src))
	if err != nil {
		t.Fatal(err)
	}
	body := strings.TrimPrefix(key, keyPrefix)
	if len(body) != keyBodyLen {
		t.Fatalf("body length %d", len(body))
	}
	// Accepted bytes cycle 0, 61, 62 -> '0', 'z', '0'.
	want := strings.Repeat("0z0", keyBodyLen)[:keyBodyLen]
	if body != want {
		t.Fatalf("body %q, want %q", body, want)
	}
	if _, err := newKey(bytes.NewReader(nil)); err == nil {
		t.Fatal("no error from an empty randomness source")
	}
}
