package pull

import (
	"sync"
	"sync/atomic"
	"time"

	"sluice/policies"
)

// KeyUsage records the last use of each API key by key id, for the
// platform's "last used". A use is a successful lookup: the key exists and
// has not expired. Safe for concurrent use; the hot path is a map load and
// an atomic store.
type KeyUsage struct {
	now  func() time.Time
	last sync.Map // key id -> *atomic.Int64 (Unix µs; 0: reported)
}

// NewKeyUsage returns an empty record read with now (nil: time.Now).
func NewKeyUsage(now func() time.Time) *KeyUsage {
	if now == nil {
		now = time.Now
	}
	return &KeyUsage{now: now}
}

// Wrap returns idx recording every successful lookup.
func (u *KeyUsage) Wrap(idx policies.KeyIndex) policies.KeyIndex { return usageIndex{idx, u} }

type usageIndex struct {
	policies.KeyIndex
	u *KeyUsage
}

func (x usageIndex) Lookup(sum [32]byte) (policies.Credential, bool) {
	c, ok := x.KeyIndex.Lookup(sum)
	if ok {
		x.u.used(c.KeyID)
	}
	return c, ok
}

func (u *KeyUsage) used(id string) {
	v, ok := u.last.Load(id)
	if !ok {
		v, _ = u.last.LoadOrStore(id, new(atomic.Int64))
	}
	v.(*atomic.Int64).Store(u.now().UnixMicro())
}

// Drain returns the uses recorded since the last Drain and forgets them.
func (u *KeyUsage) Drain() map[string]time.Time {
	out := map[string]time.Time{}
	u.last.Range(func(k, v any) bool {
		if us := v.(*atomic.Int64).Swap(0); us != 0 {
			out[k.(string)] = time.UnixMicro(us).UTC()
		}
		return true
	})
	return out
}

// Restore puts back uses a failed report could not deliver (a later use
// recorded meanwhile wins).
func (u *KeyUsage) Restore(m map[string]time.Time) {
	for id, t := range m {
		v, _ := u.last.LoadOrStore(id, new(atomic.Int64))
		a := v.(*atomic.Int64)
		for {
			cur := a.Load()
			if cur >= t.UnixMicro() || a.CompareAndSwap(cur, t.UnixMicro()) {
				break
			}
		}
	}
}
