package main

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"strings"
)

// keyPrefix starts every key `sluice keys new` makes, so leaked keys are easy
// to recognise (and to scan for).
const keyPrefix = "sk-sluice-"

// keyBodyLen base62 characters carry 43*log2(62) ≈ 256 bits of entropy.
const keyBodyLen = 43

const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

const keysUsage = `usage:
  sluice keys hash KEY   print the configured form of KEY: sha256:<64 hex digits>
  sluice keys new        print a fresh random key ("key:  ...") and its hash ("hash: ...")

Deployment files list application keys only as hashes (applications[].apiKeys).
`

func cmdKeys(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, keysUsage)
		return 2
	}
	switch args[0] {
	case "-h", "--help", "help":
		fmt.Fprint(stdout, keysUsage)
		return 0
	case "hash":
		if len(args) != 2 || args[1] == "" {
			fmt.Fprint(stderr, "sluice keys hash: want exactly one non-empty KEY\n\n"+keysUsage)
			return 2
		}
		fmt.Fprintln(stdout, hashKey(args[1]))
		return 0
	case "new":
		if len(args) != 1 {
			fmt.Fprint(stderr, "sluice keys new: takes no arguments\n\n"+keysUsage)
			return 2
		}
		key, err := newKey(rand.Reader)
		if err != nil {
			fmt.Fprintf(stderr, "sluice keys new: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "key:  %s\nhash: %s\n", key, hashKey(key))
		return 0
	}
	fmt.Fprintf(stderr, "sluice keys: unknown subcommand %q\n\n%s", args[0], keysUsage)
	return 2
}

// hashKey is the configured form of a key: "sha256:" and the hex SHA-256 of
// its bytes (what api-key-auth looks up).
func hashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// newKey returns keyPrefix and keyBodyLen base62 characters drawn uniformly
// from r (rejection sampling: bytes >= 248 are discarded so every character
// has probability exactly 1/62).
func newKey(r io.Reader) (string, error) {
	var b strings.Builder
	b.WriteString(keyPrefix)
	buf := make([]byte, 64)
	for n := 0; n < keyBodyLen; {
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", fmt.Errorf("reading randomness: %w", err)
		}
		for _, c := range buf {
			if c >= 248 || n == keyBodyLen {
				continue
			}
			b.WriteByte(base62[c%62])
			n++
		}
	}
	return b.String(), nil
}
