package tokencount

import (
	"unicode"
	"unicode/utf8"
)

// The splitters below cut text into the pieces BPE encodes, giving the same pieces
// as the o200k_base and cl100k_base split patterns do under the tokenizer
// library's backtracking (.NET-style) regex engine: alternatives are tried in
// order and the first that matches wins; inside an alternative, greedy loops that
// are not atomic give back characters until the rest matches. Character classes
// use the Go unicode tables, as the library's engine does, so both agree for every
// Unicode version Go ships. Where the library's generated matcher departs from
// those regex semantics (U+007F, see unmatched; \s*[\r\n]+, see whitespace) the
// splitters follow the library, since the counts must equal its counts.
//
// The patterns, with the names used here:
//
//	o200k_base:  A? B* C+ K? | A? B+ C* K? | N{1,3} | ' '? P+ [\r\n/]* | \s*[\r\n]+ | \s+(?!\S) | \s+
//	cl100k_base: K' | A? L+ | N{1,3} | ' '? P+ [\r\n]* | \s*[\r\n]+ | \s+(?!\S) | \s+
//
// where A = [^\r\n\p{L}\p{N}], B = [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}],
// C = [\p{Ll}\p{Lm}\p{Lo}\p{M}], L = \p{L}, N = \p{N}, P = [^\s\p{L}\p{N}],
// \s = unicode.IsSpace, K = an apostrophe and one of s t re ve m ll d, ignoring
// case (s also matching U+017F), and K' the same at the start of a piece.
//
// A splitter takes valid UTF-8 and a byte offset i < len(s), where s[i] is not
// unmatched, and returns the end of the piece starting at i (always > i).

// Rune classes, as bits.
const (
	clsLetter  = 1 << iota // \p{L}
	clsUpper               // B
	clsLower               // C
	clsNumber              // \p{N}
	clsSpace               // \s
	clsNewline             // \r or \n
	clsNone                // DEL: in no set (see unmatched)
)

// unmatched reports a byte no alternative of either pattern matches: the library's
// generated matcher leaves U+007F (DEL) out of its ASCII bitmaps for
// [^\r\n\p{L}\p{N}] and [^\s\p{L}\p{N}], so the regex skips it and it yields no
// token. Counting must skip it too.
func unmatched(b byte) bool { return b == 0x7f }

func classOfRune(r rune) uint8 {
	var c uint8
	switch {
	case unicode.IsLetter(r):
		c = clsLetter
		switch {
		case unicode.Is(unicode.Ll, r):
			c |= clsLower
		case unicode.Is(unicode.Lu, r) || unicode.Is(unicode.Lt, r):
			c |= clsUpper
		default: // Lm, Lo
			c |= clsUpper | clsLower
		}
	case unicode.Is(unicode.M, r):
		c = clsUpper | clsLower
	case unicode.IsNumber(r):
		c = clsNumber
	case unicode.IsSpace(r):
		c = clsSpace
		if r == '\r' || r == '\n' {
			c |= clsNewline
		}
	}
	return c
}

// classTable memoizes the classes of the Basic Multilingual Plane (unicode table
// look-ups cost several binary searches per rune). Read-only once built.
type classTable [1 << 16]uint8

func newClassTable() *classTable {
	t := new(classTable)
	for r := range rune(len(t)) {
		t[r] = classOfRune(r)
	}
	t[0x7f] = clsNone
	return t
}

// classAt returns the class and width of the rune at s[i].
func (t *classTable) classAt(s string, i int) (uint8, int) {
	if b := s[i]; b < utf8.RuneSelf {
		return t[b], 1
	}
	r, n := utf8.DecodeRuneInString(s[i:])
	if r < rune(len(t)) {
		return t[r], n
	}
	return classOfRune(r), n
}

// inA reports membership of [^\r\n\p{L}\p{N}].
func inA(c uint8) bool { return c&(clsLetter|clsNumber|clsNewline|clsNone) == 0 }

// splitO200k returns the end of the o200k_base piece starting at s[i].
func (t *classTable) splitO200k(s string, i int) int {
	c, n := t.classAt(s, i)
	a := inA(c)
	// First alternative, with then without the optional leading A.
	if a {
		if e := t.upperThenLower(s, i+n); e >= 0 {
			return contraction(s, e)
		}
	}
	if c&(clsUpper|clsLower) != 0 {
		if e := t.upperThenLower(s, i); e >= 0 {
			return contraction(s, e)
		}
	}
	// Second alternative.
	if a {
		if e := t.upperRun(s, i+n); e >= 0 {
			return contraction(s, e)
		}
	}
	if c&clsUpper != 0 {
		return contraction(s, t.upperRun(s, i))
	}
	if c&clsNumber != 0 {
		return t.numbers(s, i)
	}
	if e := t.punctuation(s, i, true); e >= 0 {
		return e
	}
	return t.whitespace(s, i)
}

// upperThenLower matches B* C+ at s[j], giving back B characters until C+
// matches: the match ends after a lower-case run that follows the whole B run,
// else after the last C character inside the B run (B and C share Lm, Lo and M).
// It returns -1 when there is neither.
func (t *classTable) upperThenLower(s string, j int) int {
	lastLower := -1
	for j < len(s) {
		c, n := t.classAt(s, j)
		if c&clsUpper == 0 {
			if c&clsLower != 0 {
				return t.lowerRun(s, j+n)
			}
			break
		}
		j += n
		if c&clsLower != 0 {
			lastLower = j
		}
	}
	return lastLower
}

// upperRun matches B+ C* at s[j]; -1 when s[j] is not in B.
func (t *classTable) upperRun(s string, j int) int {
	start := j
	for j < len(s) {
		c, n := t.classAt(s, j)
		if c&clsUpper == 0 {
			break
		}
		j += n
	}
	if j == start {
		return -1
	}
	return t.lowerRun(s, j)
}

// lowerRun returns the end of the run of C characters at s[j].
func (t *classTable) lowerRun(s string, j int) int {
	for j < len(s) {
		c, n := t.classAt(s, j)
		if c&clsLower == 0 {
			break
		}
		j += n
	}
	return j
}

// contraction extends a letter match ending at e by an optional contraction.
func contraction(s string, e int) int {
	if e+1 < len(s) && s[e] == '\'' {
		if k := contractionLen(s[e+1:]); k > 0 {
			return e + 1 + k
		}
	}
	return e
}

// contractionLen returns the byte length of the contraction suffix (s, t, re, ve,
// m, ll, d in any case, or U+017F) at the start of t, 0 if none.
func contractionLen(t string) int {
	second := func(lo byte) bool { return len(t) > 1 && t[1]|0x20 == lo }
	switch t[0] {
	case 's', 'S', 't', 'T', 'm', 'M', 'd', 'D':
		return 1
	case 'r', 'R', 'v', 'V':
		if second('e') {
			return 2
		}
	case 'l', 'L':
		if second('l') {
			return 2
		}
	case 0xC5: // U+017F LATIN SMALL LETTER LONG S is C5 BF
		if len(t) > 1 && t[1] == 0xBF {
			return 2
		}
	}
	return 0
}

// numbers matches N{1,3} at s[i] (s[i] is in N).
func (t *classTable) numbers(s string, i int) int {
	_, n := t.classAt(s, i)
	i += n
	for k := 1; k < 3 && i < len(s); k++ {
		c, n := t.classAt(s, i)
		if c&clsNumber == 0 {
			break
		}
		i += n
	}
	return i
}

// punctuation matches ' '? P+ [\r\n]* (with '/' in the trailing set when slash) at
// s[i]; the optional space is atomic. It returns -1 when there is no P.
func (t *classTable) punctuation(s string, i int, slash bool) int {
	j := i
	if s[j] == ' ' {
		j++
	}
	start := j
	for j < len(s) {
		c, n := t.classAt(s, j)
		if c&(clsSpace|clsLetter|clsNumber|clsNone) != 0 {
			break
		}
		j += n
	}
	if j == start {
		return -1
	}
	for j < len(s) && (s[j] == '\r' || s[j] == '\n' || slash && s[j] == '/') {
		j++
	}
	return j
}

// whitespace matches the last three alternatives at s[i], a whitespace rune.
//
// \s*[\r\n]+ first: the library's generated matcher, giving back characters of
// \s* to let [\r\n]+ match, jumps to the first \r or \n of the whitespace run
// rather than the last (a backtracking engine would stop at the last), so the
// piece ends after the run of \r and \n that starts at the run's first \r or \n.
// Without one: the whole run at the end of the text; else all but its last rune,
// leaving that rune to prefix the next piece; else (a single rune) the run itself.
func (t *classTable) whitespace(s string, i int) int {
	j, lastStart, runes := i, i, 0
	for j < len(s) {
		c, n := t.classAt(s, j)
		if c&clsSpace == 0 {
			break
		}
		if c&clsNewline != 0 {
			for j < len(s) && (s[j] == '\r' || s[j] == '\n') {
				j++
			}
			return j
		}
		lastStart = j
		j += n
		runes++
	}
	switch {
	case runes == 0: // not reached: every other rune matches an earlier alternative
		_, n := t.classAt(s, i)
		return i + n
	case j == len(s) || runes == 1:
		return j
	default:
		return lastStart
	}
}

// splitCl100k returns the end of the cl100k_base piece starting at s[i].
func (t *classTable) splitCl100k(s string, i int) int {
	if s[i] == '\'' && i+1 < len(s) {
		if k := contractionLen(s[i+1:]); k > 0 {
			return i + 1 + k
		}
	}
	c, n := t.classAt(s, i)
	if inA(c) {
		if e := t.letterRun(s, i+n); e > i+n {
			return e
		}
	}
	if c&clsLetter != 0 {
		return t.letterRun(s, i)
	}
	if c&clsNumber != 0 {
		return t.numbers(s, i)
	}
	if e := t.punctuation(s, i, false); e >= 0 {
		return e
	}
	return t.whitespace(s, i)
}

// letterRun returns the end of the run of \p{L} at s[j].
func (t *classTable) letterRun(s string, j int) int {
	for j < len(s) {
		c, n := t.classAt(s, j)
		if c&clsLetter == 0 {
			break
		}
		j += n
	}
	return j
}
