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

const (
	// textCacheSlots is the number of texts a textCache holds (a power of two):
	// about 130 KiB per encoding and Counter.
	textCacheSlots = 1 << 12
	// minCachedText is the shortest text a textCache remembers, in bytes:
	// below it, hashing twice costs about what counting does.
	minCachedText = 16
)

// textCache remembers the token counts of whole prompt texts. Clients send the
// same system prompts, tool definitions and earlier turns of a conversation
// with every request, and counting a text costs about 25 us a KiB where
// hashing it costs a few hundred nanoseconds.
//
// A text is known by two 64-bit hashes under seeds drawn at start, not by its
// bytes: the cache must not keep request bodies alive, and a copy of every
// text would cost more memory than the counts. Two distinct texts are taken
// for one with probability about 2^-128 a lookup, and the seeds are not
// observable, so a client cannot aim for it. The cache is direct-mapped like
// pieceCache, so a client sending ever-new texts only makes it miss. Safe for
// concurrent use: slots are swapped atomically and entries never change.
type textCache struct {
	seed1, seed2 maphash.Seed
	slots        []atomic.Pointer[cachedText] // power-of-two length
}

type cachedText struct {
	h1, h2 uint64
	tokens int
}

func newTextCache(slots int) *textCache {
	return &textCache{seed1: maphash.MakeSeed(), seed2: maphash.MakeSeed(), slots: make([]atomic.Pointer[cachedText], slots)}
}

// tokens returns the token count of text, counting it with count on a miss.
func (c *textCache) tokens(text string, count func(string) int) int {
	h1, h2 := maphash.String(c.seed1, text), maphash.String(c.seed2, text)
	slot := &c.slots[h1&uint64(len(c.slots)-1)]
	if e := slot.Load(); e != nil && e.h1 == h1 && e.h2 == h2 {
		return e.tokens
	}
	n := count(text)
	slot.Store(&cachedText{h1, h2, n})
	return n
}
