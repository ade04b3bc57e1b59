// Package tokencount estimates prompt tokens with embedded tokenizer
// vocabularies (no download), by model family.
//
// Encodings: o200k_base for gpt-4o, gpt-4.1, gpt-4.5, gpt-5, o1/o3/o4 and, as an
// approximation, every model it does not recognise (Anthropic, open models);
// cl100k_base for gpt-4, gpt-3.5 and text-embedding-*.
//
// Counts equal github.com/tiktoken-go/tokenizer's Codec.Count exactly (the
// gateway and the mock upstream rely on agreeing), but are computed here: a
// hand-written pre-tokenizer replaces the library's regex (split.go), byte-pair
// merging runs over the library's rank tables, embedded as rank files written
// from it (ranks.go, bpe.go), and bounded per-Counter caches remember the
// counts of multi-token pieces and of whole prompt texts (cache.go). The
// library itself is only a test dependency: tests compare with it on a corpus
// and under fuzzing, and check that the rank files still hold its
// vocabularies.
//
// Texts whose total size exceeds SampleThreshold are counted exactly on a bounded
// sample (SampleWindows windows of SampleWindowBytes spread evenly over the text)
// and extrapolated by bytes. Measured error (TestSampledModeError): under 0.1% on
// repetitive prose and CJK, 1-2% on Go source (100 KB and 1 MB).
package tokencount

import (
	"strings"
	"sync"
	"unicode/utf8"

	"sluice/llmapi"
)

const (
	// SampleThreshold is the text size (bytes, summed over a request's texts)
	// above which counting switches to the sampled mode. Chosen when counting ran
	// at a few MB/s per core; now about 10x faster, it is kept so that counts stay
	// what they were.
	SampleThreshold = 64 << 10
	// SampleWindows and SampleWindowBytes size the sample: 32 x 1 KiB. Many small
	// windows track mixed content better than a few large ones (measured).
	SampleWindows     = 32
	SampleWindowBytes = 1 << 10
)

type encodingID int

const (
	o200k encodingID = iota
	cl100k
	numEncodings
)

// encodingNames are tiktoken's names of the encodings (and of their rank files).
var encodingNames = [numEncodings]string{o200k: "o200k_base", cl100k: "cl100k_base"}

// encoding counts tokens of one encoding: its own pre-tokenizer (split.go), the
// rank table of its rank file (ranks.go), and caches of piece and text counts.
// Counts equal the library's Codec.Count for every string (TestCountMatchesLibrary,
// FuzzCountMatchesLibrary).
type encoding struct {
	split   func(t *classTable, s string, i int) int
	classes *classTable
	ranks   *rankTable
	cache   *pieceCache
	texts   *textCache // prompt texts only (see Counter.countTexts); nil: none
}

// lazyEncoding loads one encoding on first use.
type lazyEncoding struct {
	once sync.Once
	enc  *encoding
}

// Counter counts tokens. It is safe for concurrent use; vocabularies load lazily
// on first use of each encoding, once per process (see sharedRanks). Each Counter
// has its own piece cache.
type Counter struct {
	encodings [numEncodings]lazyEncoding
}

// New returns a Counter.
func New() *Counter { return &Counter{} }

// Warm loads every encoding now (about 65 ms in all), so that the first
// requests a server counts do not wait for it.
func (c *Counter) Warm() {
	for id := range numEncodings {
		c.encoding(id)
	}
}

var splitters = [numEncodings]func(*classTable, string, int) int{
	o200k:  (*classTable).splitO200k,
	cl100k: (*classTable).splitCl100k,
}

// Tables derived from the rank files and the unicode tables, built on first use
// and shared by every Counter in the process: they are read-only once built, and
// too costly to build and hold per Counter (a rank table takes tens of
// milliseconds and 4-8 MiB).
var (
	sharedClasses = sync.OnceValue(newClassTable)
	sharedRanks   = [numEncodings]func() *rankTable{
		o200k:  sync.OnceValue(func() *rankTable { return loadEncodingRanks(o200k) }),
		cl100k: sync.OnceValue(func() *rankTable { return loadEncodingRanks(cl100k) }),
	}
)

func loadEncodingRanks(id encodingID) *rankTable {
	t, err := decodeRanks(rankFiles[id])
	if err != nil {
		// The files are embedded and checked by TestRankFilesMatchLibrary:
		// only a broken build gets here.
		panic("tokencount: rank file " + encodingNames[id] + ": " + err.Error())
	}
	return t
}

func (c *Counter) encoding(id encodingID) *encoding {
	l := &c.encodings[id]
	l.once.Do(func() {
		l.enc = &encoding{split: splitters[id], classes: sharedClasses(), ranks: sharedRanks[id](), cache: newPieceCache(), texts: newTextCache(textCacheSlots)}
	})
	return l.enc
}

// count returns the number of tokens of text.
func (e *encoding) count(text string) int {
	if !utf8.ValidString(text) {
		// The library's regex engine reads text as runes, each invalid byte
		// becoming U+FFFD, and encodes the pieces it cuts from those runes.
		text = string([]rune(text))
	}
	n := 0
	for i := 0; i < len(text); {
		if unmatched(text[i]) {
			i++
			continue
		}
		j := e.split(e.classes, text, i)
		piece := text[i:j]
		if e.ranks.rank(piece) != noRank {
			n++
		} else {
			n += e.cache.tokens(piece, e.ranks)
		}
		i = j
	}
	return n
}

// cl100kPrefixes are the model families that use cl100k_base. Checked after the
// o200k families, since "gpt-4o" and "gpt-4.1" also start with "gpt-4".
var (
	o200kPrefixes  = []string{"gpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "chatgpt-4o", "o1", "o3", "o4", "gpt-oss"}
	cl100kPrefixes = []string{"gpt-4", "gpt-3.5", "gpt-35", "text-embedding-", "davinci-002", "babbage-002"}
)

// encodingFor picks the encoding for a model name. Provider prefixes
// ("openai/gpt-4", "ft:gpt-3.5-turbo:org") are ignored.
func encodingFor(model string) encodingID {
	id, _ := lookupEncoding(model)
	return id
}

// lookupEncoding is encodingFor, and whether the encoding is the model's
// own (false: the o200k approximation of a model it does not know).
func lookupEncoding(model string) (encodingID, bool) {
	m := strings.ToLower(model)
	if i := strings.LastIndexByte(m, '/'); i >= 0 {
		m = m[i+1:]
	}
	m = strings.TrimPrefix(m, "ft:")
	for _, p := range o200kPrefixes {
		if strings.HasPrefix(m, p) {
			return o200k, true
		}
	}
	for _, p := range cl100kPrefixes {
		if strings.HasPrefix(m, p) {
			return cl100k, true
		}
	}
	return o200k, false
}

// Exact reports whether Count uses model's own tokenizer (OpenAI's model
// families); for any other model it approximates with o200k_base, and a
// count may differ from the provider's by some percent either way.
func Exact(model string) bool {
	_, ok := lookupEncoding(model)
	return ok
}

// EncodingName reports the encoding Count uses for model.
func EncodingName(model string) string { return string(encodingNames[encodingFor(model)]) }

// Count returns the number of tokens of text under model's encoding (sampled and
// extrapolated above SampleThreshold).
func (c *Counter) Count(model, text string) int {
	return int(c.countTexts(encodingFor(model), []string{text}, false))
}

// FitsBySize reports that text counts at most n tokens under every
// encoding by its size alone: valid UTF-8 never counts more tokens than it
// has bytes (every token is at least one byte, and sampling extrapolates by
// bytes). False says nothing: count it.
func FitsBySize(text string, n int64) bool {
	return int64(len(text)) <= n && utf8.ValidString(text)
}

// Prefix returns the longest prefix of text, cut at a character boundary,
// that counts at most n tokens under model's encoding, and its count: text
// itself when it has at most n tokens, "" for n <= 0. The gateway cuts an
// answer that passes its output bound with it. A prefix's count is how the
// prefix tokenizes on its own (what the client receives), found by binary
// search over the prefix lengths: about log2(len(text)) counts.
func (c *Counter) Prefix(model, text string, n int) (string, int) {
	if n <= 0 || text == "" {
		return "", 0
	}
	total := c.Count(model, text)
	if total <= n {
		return text, total
	}
	lo, loCount, hi := 0, 0, len(text) // text[:lo] fits, text[:hi] does not
	for {
		mid := lo + (hi-lo)/2
		for mid > lo && !utf8.RuneStart(text[mid]) {
			mid--
		}
		if mid == lo {
			mid = lo + (hi-lo)/2 + 1
			for mid < hi && !utf8.RuneStart(text[mid]) {
				mid++
			}
			if mid >= hi {
				return text[:lo], loCount
			}
		}
		if k := c.Count(model, text[:mid]); k <= n {
			lo, loCount = mid, k
		} else {
			hi = mid
		}
	}
}

// exact counts text exactly; with remember, through the encoding's text cache
// (the same count, remembered for the next time the text comes).
func (c *Counter) exact(id encodingID, text string, remember bool) int64 {
	if text == "" {
		return 0
	}
	e := c.encoding(id)
	if remember && e.texts != nil && len(text) >= minCachedText {
		return int64(e.texts.tokens(text, e.count))
	}
	return int64(e.count(text))
}

// countTexts counts the sum of texts' tokens: exactly when their total size is at
// most SampleThreshold, else on SampleWindows windows spread evenly over their
// concatenation, scaled by total bytes / sampled bytes. remember is for prompt
// texts, which clients send again; answers (Count, Prefix's search) are not
// remembered, so they do not evict prompts.
func (c *Counter) countTexts(id encodingID, texts []string, remember bool) int64 {
	var total int
	for _, t := range texts {
		total += len(t)
	}
	if total <= SampleThreshold {
		var n int64
		for _, t := range texts {
			n += c.exact(id, t, remember)
		}
		return n
	}
	return c.countSampled(id, texts, total, SampleWindows, SampleWindowBytes, remember)
}

// countSampled counts windows windows of about size bytes each, spread evenly over
// the concatenation of texts (total bytes), and extrapolates by bytes.
func (c *Counter) countSampled(id encodingID, texts []string, total, windows, size int, remember bool) int64 {
	stride := total / windows
	var sampledBytes, sampledTokens int64
	ti, base := 0, 0 // texts[ti] starts at offset base of the concatenation
	for w := 0; w < windows; w++ {
		off := w * stride
		for ti < len(texts) && base+len(texts[ti]) <= off {
			base += len(texts[ti])
			ti++
		}
		if ti == len(texts) {
			break
		}
		win := window(texts[ti], off-base, size)
		if win == "" {
			continue
		}
		sampledBytes += int64(len(win))
		sampledTokens += c.exact(id, win, remember)
	}
	if sampledBytes == 0 {
		return int64(total+3) / 4
	}
	return (sampledTokens*int64(total) + sampledBytes/2) / sampledBytes
}

// window returns about size bytes of s starting near start, moved to word
// boundaries (the first whitespace at or after each end, within 64 bytes) so the
// sample does not split tokens it would not split in the whole text.
func window(s string, start, size int) string {
	start = wordBoundary(s, start)
	end := start + size
	if end >= len(s) {
		return s[start:]
	}
	return s[start:wordBoundary(s, end)]
}

func wordBoundary(s string, i int) int {
	if i <= 0 {
		return 0
	}
	for j := i; j < len(s) && j < i+64; j++ {
		if s[j] == ' ' || s[j] == '\n' || s[j] == '\t' {
			return j
		}
	}
	// No whitespace near i (e.g. CJK): settle for a rune boundary.
	for i < len(s) && i > 0 && s[i]&0xC0 == 0x80 {
		i++
	}
	return min(i, len(s))
}

// EstimatePrompt estimates the prompt tokens of req: message contents, roles and
// per-message overhead for chat, the prompt(s) for completions (summed over a
// batch), the input(s) for embeddings and responses. See estimate.go for the rules.
func (c *Counter) EstimatePrompt(req *llmapi.Request) int64 {
	if req == nil {
		return 0
	}
	var texts [16]string // most prompts have fewer texts: no allocation
	e := estimator{texts: texts[:0]}
	e.collect(req)
	return e.fixed + c.countTexts(encodingFor(req.Model), e.texts, true)
}
