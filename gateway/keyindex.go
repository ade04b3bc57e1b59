package gateway

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"time"

	"sluice/deployment"
	"sluice/policies"
)

// keyIndex is an immutable map from key digests to credentials; safe for
// concurrent use. now is read only for keys with an expiry.
type keyIndex struct {
	keys map[[32]byte]indexedKey
	now  func() time.Time
}

type indexedKey struct {
	cred policies.Credential
	// expires is the Unix microsecond from which the key is refused, when
	// expiring.
	expires  int64
	expiring bool
}

func (k keyIndex) Lookup(sum [32]byte) (policies.Credential, bool) {
	e, ok := k.keys[sum]
	if !ok || (e.expiring && k.now().UnixMicro() >= e.expires) {
		return policies.Credential{}, false
	}
	return e.cred, true
}

// NewKeyIndex indexes every application key of d by its SHA-256 digest:
// apiKeys (their KeyID is the hash's first 8 hex digits) and keys (KeyID is
// the key's id; an expired key is refused from its expiresAt on, checked at
// each lookup with time.Now). Keys that are not well-formed hashes are
// skipped (deployment.Validate reports them); when a hash is listed twice the first
// one keeps it.
func NewKeyIndex(d *deployment.Deployment) policies.KeyIndex { return NewKeyIndexAt(d, time.Now) }

// NewKeyIndexAt is NewKeyIndex with the clock that expiries are checked
// against.
func NewKeyIndexAt(d *deployment.Deployment, now func() time.Time) policies.KeyIndex {
	idx := keyIndex{keys: map[[32]byte]indexedKey{}, now: now}
	add := func(hash string, a *deployment.Application, keyID string, expires *time.Time) {
		hexSum, ok := strings.CutPrefix(hash, deployment.KeyHashPrefix)
		if !ok || len(hexSum) != 2*sha256.Size {
			return
		}
		var sum [32]byte
		if _, err := hex.Decode(sum[:], []byte(strings.ToLower(hexSum))); err != nil {
			return
		}
		if _, dup := idx.keys[sum]; dup {
			return
		}
		if keyID == "" {
			keyID = hexSum[:8]
		}
		e := indexedKey{cred: policies.Credential{ApplicationID: a.ID, ApplicationName: a.Name, KeyID: keyID}}
		if expires != nil {
			e.expires, e.expiring = expires.UnixMicro(), true
		}
		idx.keys[sum] = e
	}
	for i := range d.Applications {
		a := &d.Applications[i]
		for _, k := range a.APIKeys {
			add(k, a, "", nil)
		}
		for _, k := range a.Keys {
			add(k.Hash, a, k.ID, k.ExpiresAt)
		}
	}
	return idx
}
