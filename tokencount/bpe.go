package tokencount

import "math"

// noRank marks a pair that is not a token.
const noRank = math.MaxUint32

// rankTable maps each token's bytes to its rank (its id; lower ranks merge
// first). It is an open-addressing hash table with linear probing over one string
// holding every token's bytes: lookups of short pieces (the common case) cost a
// few multiplications and one comparison, about half a Go map lookup (string
// hashing dominated the profile). Read-only once built.
type rankTable struct {
	tokens string     // every token's bytes, concatenated
	slots  []rankSlot // power-of-two length, at most half full
	shift  uint       // 64 - log2(len(slots)): a hash's top bits pick the slot
}

type rankSlot struct {
	off, len uint32 // the token is tokens[off:off+len]; len 0 marks an empty slot
	rank     uint32
}

// newRankTable places tokens (their bytes in blob, listed by slots in
// increasing rank) in a table. Of two equal tokens the lower rank is kept.
func newRankTable(blob []byte, slots []rankSlot) *rankTable {
	bits := uint(1)
	for 1<<bits < 2*len(slots) {
		bits++
	}
	t := &rankTable{tokens: string(blob), slots: make([]rankSlot, 1<<bits), shift: 64 - bits}
	for _, s := range slots {
		tok := t.tokens[s.off : s.off+s.len]
		i := t.home(tok)
		for t.slots[i].len != 0 {
			if t.tokens[t.slots[i].off:t.slots[i].off+t.slots[i].len] == tok {
				break // a duplicate: keep the lower rank, placed first
			}
			i = (i + 1) & (len(t.slots) - 1)
		}
		if t.slots[i].len == 0 {
			t.slots[i] = s
		}
	}
	return t
}

func (t *rankTable) home(s string) int {
	const k = 0x9E3779B97F4A7C15
	h := uint64(len(s)) * k
	for len(s) >= 8 {
		v := uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
			uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
		h = (h ^ v) * k
		h ^= h >> 29
		s = s[8:]
	}
	for i := 0; i < len(s); i++ {
		h = (h ^ uint64(s[i])) * k
	}
	h ^= h >> 32
	return int((h * k) >> t.shift)
}

// rank returns the rank of s, noRank when s is not a token.
func (t *rankTable) rank(s string) uint32 {
	if len(s) == 0 {
		return noRank
	}
	mask := len(t.slots) - 1
	for i := t.home(s); ; i = (i + 1) & mask {
		e := &t.slots[i]
		if e.len == 0 {
			return noRank
		}
		if int(e.len) == len(s) && t.tokens[e.off:e.off+e.len] == s {
			return e.rank
		}
	}
}

// smallPiece is the longest piece mergeSmall handles; longer pieces take the
// O(n log n) mergeLarge.
const smallPiece = 64

// mergeCount returns the number of tokens byte-pair encoding gives piece (which is
// not itself a token): starting from single bytes, it merges the adjacent pair of
// parts whose concatenation has the lowest rank, the leftmost on ties, until no
// adjacent pair is a token.
func (t *rankTable) mergeCount(piece string) int {
	if len(piece) <= smallPiece {
		return t.mergeSmall(piece)
	}
	return t.mergeLarge(piece)
}

// mergeSmall keeps the parts in arrays: start[k] is where part k begins, and
// pair[k] the rank of parts k and k+1 together. Each merge scans for the minimum
// and shifts the arrays, O(n) per merge, cheap for short pieces.
func (t *rankTable) mergeSmall(piece string) int {
	var (
		start [smallPiece + 1]int
		pair  [smallPiece]uint32
	)
	parts := len(piece)
	for k := 0; k <= parts; k++ {
		start[k] = k
	}
	for k := 0; k+1 < parts; k++ {
		pair[k] = t.rank(piece[k : k+2])
	}
	for parts > 1 {
		best, at := uint32(noRank), -1
		for k := 0; k+1 < parts; k++ {
			if pair[k] < best {
				best, at = pair[k], k
			}
		}
		if at < 0 {
			break
		}
		// Part at+1 joins part at: drop its start and the pair entry at.
		copy(start[at+1:parts], start[at+2:parts+1])
		copy(pair[at:parts-2], pair[at+1:parts-1])
		parts--
		if at+1 < parts {
			pair[at] = t.rank(piece[start[at]:start[at+2]])
		}
		if at > 0 {
			pair[at-1] = t.rank(piece[start[at-1]:start[at+1]])
		}
	}
	return parts
}

// mergeLarge keeps the parts in a doubly linked list over byte offsets and the
// candidate pairs in a min-heap ordered by (rank, offset); a candidate whose
// pair changed since it was pushed is skipped when popped.
func (t *rankTable) mergeLarge(piece string) int {
	n := len(piece)
	next := make([]int32, n+1) // next[k]: start of the part after the one at k; n ends
	prev := make([]int32, n+1)
	pair := make([]uint32, n+1) // pair[k]: rank of the part at k with its successor
	h := make(pairHeap, 0, n)
	for k := 0; k <= n; k++ {
		next[k], prev[k], pair[k] = int32(k+1), int32(k-1), noRank
	}
	rankAt := func(k int32) uint32 {
		j := next[k]
		if int(j) >= n {
			return noRank
		}
		return t.rank(piece[k:next[j]])
	}
	for k := int32(0); int(k)+1 < n; k++ {
		if r := rankAt(k); r != noRank {
			pair[k] = r
			h = append(h, candidate{r, k})
		}
	}
	h.heapify()
	parts := n
	for len(h) > 0 {
		c := h.pop()
		if pair[c.at] != c.rank {
			continue // stale
		}
		j := next[c.at]
		next[c.at] = next[j]
		if int(next[j]) <= n {
			prev[next[j]] = c.at
		}
		pair[j] = noRank
		parts--
		for _, k := range [2]int32{c.at, prev[c.at]} {
			if k < 0 {
				continue
			}
			pair[k] = rankAt(k)
			if pair[k] != noRank {
				h.push(candidate{pair[k], k})
			}
		}
	}
	return parts
}

type candidate struct {
	rank uint32
	at   int32
}

// pairHeap is a binary min-heap of candidates by rank, then offset.
type pairHeap []candidate

func (h pairHeap) less(a, b int) bool {
	return h[a].rank < h[b].rank || h[a].rank == h[b].rank && h[a].at < h[b].at
}

func (h pairHeap) heapify() {
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.sift(i)
	}
}

func (h *pairHeap) push(c candidate) {
	*h = append(*h, c)
	s := *h
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if !s.less(i, p) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func (h *pairHeap) pop() candidate {
	s := *h
	top := s[0]
	s[0] = s[len(s)-1]
	*h = s[:len(s)-1]
	h.sift(0)
	return top
}

func (h pairHeap) sift(i int) {
	for {
		c := 2*i + 1
		if c >= len(h) {
			return
		}
		if c+1 < len(h) && h.less(c+1, c) {
			c++
		}
		if !h.less(c, i) {
			return
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
}
