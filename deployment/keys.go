package deployment

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
)

// KeyHashPrefix starts every configured API key hash.
const KeyHashPrefix = "sha256:"

// HashKey returns the configured form of an API key: "sha256:" and the hex
// SHA-256 of the key.
func HashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return KeyHashPrefix + hex.EncodeToString(sum[:])
}

// keyIDRE: key ids appear in logs and usage reports.
var keyIDRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@-]{0,127}$`)

// validateKeyObjects checks application a's keys list (at base): ids present,
// well-formed and unique within the application, hashes well-formed and
// owned by one application across apiKeys and keys (keyOwner, shared with
// the apiKeys check).
func validateKeyObjects(d *Deployment, base string, a Application, keyOwner map[string]string, add func(*Error)) {
	ids := map[string]int{}
	owner := a.ID
	if owner == "" {
		owner = base
	}
	for j, k := range a.Keys {
		field := fmt.Sprintf("%s.keys[%d]", base, j)
		switch {
		case k.ID == "":
			add(d.ErrorAt(field+".id", true, "required"))
		case !keyIDRE.MatchString(k.ID):
			add(d.ErrorAt(field+".id", false, "invalid key id %q: use up to 128 letters, digits, '.', '_', '@' and '-'", k.ID))
		default:
			if prev, dup := ids[k.ID]; dup {
				add(d.ErrorAt(field+".id", false, "duplicate key id %q (also keys[%d])", k.ID, prev))
			} else {
				ids[k.ID] = j
			}
		}
		if !keyHashRE.MatchString(k.Hash) {
			add(d.ErrorAt(field+".hash", k.Hash == "", "want \"sha256:\" and 64 lowercase hex digits (`sluice keys hash KEY` prints it); never the key itself"))
			continue
		}
		if prev, dup := keyOwner[k.Hash]; dup {
			if prev == owner {
				add(d.ErrorAt(field+".hash", false, "key listed twice"))
			} else {
				add(d.ErrorAt(field+".hash", false, "key already belongs to application %q: a key identifies one application", prev))
			}
			continue
		}
		keyOwner[k.Hash] = owner
	}
}
