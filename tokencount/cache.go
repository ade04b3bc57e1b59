package tokencount

import (
	"hash/maphash"
	"strings"
	"sync/atomic"
)

const (
	// cacheSlots is the number of pieces a pieceCache holds (a power of two).
	cacheSlots = 1 << 13
	// maxCachedPiece is the longest piece cached, in bytes: bounds the cache's
	// memory (under 3 MiB per encoding) and keeps one-off blobs out of it.
	maxCachedPiece = 128
)

// pieceCache remembers the token counts of pieces that are not single tokens, so
// repeated words skip byte-pair merging. It is direct-mapped: a piece has one
// slot, chosen by hash, and a new piece replaces the old one there. Safe for
// concurrent use: slots are swapped atomically and entries never change.
type pieceCache struct {
	seed  maphash.Seed
	slots [cacheSlots]atomic.Pointer[cachedPiece]
}

type cachedPiece struct {
	piece  string
	tokens int
}

func newPieceCache() *pieceCache { return &pieceCache{seed: maphash.MakeSeed()} }

func (c *pieceCache) slot(piece string) *atomic.Pointer[cachedPiece] {
	return &c.slots[maphash.String(c.seed, piece)&(cacheSlots-1)]
}

// tokens returns the token count of piece, which is not a single token, merging
// it over ranks on a miss.
func (c *pieceCache) tokens(piece string, ranks *rankTable) int {
	if len(piece) > maxCachedPiece {
		return ranks.mergeCount(piece)
	}
	slot := c.slot(piece)
	if e := slot.Load(); e != nil && e.piece == piece {
		return e.tokens
	}
	n := ranks.mergeCount(piece)
	// Cloned: piece points into the caller's text, which the cache must not keep alive.
	slot.Store(&cachedPiece{strings.Clone(piece), n})
	return n
}
