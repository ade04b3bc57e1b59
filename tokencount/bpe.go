package tokencount

import (
	"math"

	"github.com/tiktoken-go/tokenizer"
)

// noRank marks a pair that is not a token.
const noRank = math.MaxUint32

// maxTokenID bounds the token ids read from a library codec: both o200k_base
// (about 200k tokens) and cl100k_base (about 100k) stay below it.
const maxTokenID = 1 << 18

// rankTable maps each token's bytes to its rank (its id; lower ranks merge first).
type rankTable map[string]uint32

// loadRanks reads the rank table out of a library codec through Decode (the
// library exposes no other view of it): one id at a time, ids it does not know
// skipped. The token bytes share one backing string.
func loadRanks(codec tokenizer.Codec) rankTable {
	type tok struct {
		end  int
		rank uint32
	}
	var (
		blob []byte
		toks []tok
		ids  = make([]uint, 1)
	)
	for id := range maxTokenID {
		ids[0] = uint(id)
		s, err := codec.Decode(ids)
		if err != nil || s == "" {
			continue
		}
		blob = append(blob, s...)
		toks = append(toks, tok{len(blob), uint32(id)})
	}
	all := string(blob)
	ranks := make(rankTable, len(toks))
	start := 0
	for _, t := range toks {
		ranks[all[start:t.end]] = t.rank
		start = t.end
	}
	return ranks
}

func (t rankTable) rank(s string) uint32 {
	if r, ok := t[s]; ok {
		return r
	}
	return noRank
}

// smallPiece is the longest piece mergeSmall handles; longer pieces take the
// O(n log n) mergeLarge.
const smallPiece = 64

// mergeCount returns the number of tokens byte-pair encoding gives piece (which is
// not itself a token): starting from single bytes, it merges the adjacent pair of
// parts whose concatenation has the lowest rank, the leftmost on ties, until no
// adjacent pair is a token.
func (t rankTable) mergeCount(piece string) int {
	if len(piece) <= smallPiece {
		return t.mergeSmall(piece)
	}
	return t.mergeLarge(piece)
}

// mergeSmall keeps the parts in arrays: start[k] is where part k begins, and
// pair[k] the rank of parts k and k+1 together. Each merge scans for the minimum
// and shifts the arrays, O(n) per merge, cheap for short pieces.
func (t rankTable) mergeSmall(piece string) int {
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
func (t rankTable) mergeLarge(piece string) int {
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
