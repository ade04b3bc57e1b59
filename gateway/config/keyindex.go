package config

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"sluice/policies"
)

// KeyHashPrefix starts every configured API key hash.
const KeyHashPrefix = "sha256:"

// HashKey returns the configured form of an API key: "sha256:" and the hex
// SHA-256 of the key.
func HashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return KeyHashPrefix + hex.EncodeToString(sum[:])
}

// keyIndex is an immutable map from key digests to credentials; safe for
// concurrent use.
type keyIndex map[[32]byte]policies.Credential

func (k keyIndex) Lookup(sum [32]byte) (policies.Credential, bool) {
	c, ok := k[sum]
	return c, ok
}

// NewKeyIndex indexes every application key of d by its SHA-256 digest. Keys
// that are not well-formed hashes are skipped (Validate reports them); when a
// hash is listed twice the first application keeps it.
func NewKeyIndex(d *Deployment) policies.KeyIndex {
	idx := keyIndex{}
	for _, a := range d.Applications {
		for _, k := range a.APIKeys {
			hexSum, ok := strings.CutPrefix(k, KeyHashPrefix)
			if !ok || len(hexSum) != 2*sha256.Size {
				continue
			}
			var sum [32]byte
			if _, err := hex.Decode(sum[:], []byte(strings.ToLower(hexSum))); err != nil {
				continue
			}
			if _, dup := idx[sum]; dup {
				continue
			}
			idx[sum] = policies.Credential{ApplicationID: a.ID, ApplicationName: a.Name, KeyID: hexSum[:8]}
		}
	}
	return idx
}
