package tokencount

import (
	"bytes"
	"compress/gzip"
	"flag"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/tiktoken-go/tokenizer"
)

var update = flag.Bool("update", false, "rewrite ranks/*.gz from the library's vocabularies")

// maxTokenID bounds the token ids read from a library codec: both o200k_base
// (about 200k tokens) and cl100k_base (about 100k) stay below it.
const maxTokenID = 1 << 18

// reference counts with the library's own Codec.Count (regex pre-tokenizer and
// BPE), the behaviour Counter must reproduce exactly.
type reference struct {
	once   sync.Once
	codecs [numEncodings]tokenizer.Codec
}

var libraryCodecs reference // test-only; loaded once for the whole test binary

func libraryCount(t testing.TB, id encodingID, text string) int {
	t.Helper()
	libraryCodecs.once.Do(func() {
		for i := range numEncodings {
			libraryCodecs.codecs[i], _ = tokenizer.Get(tokenizer.Encoding(encodingNames[i]))
		}
	})
	n, err := libraryCodecs.codecs[id].Count(text)
	if err != nil {
		t.Fatalf("library count: %v", err)
	}
	return n
}

// differentialCorpus returns named texts covering the split patterns' branches.
func differentialCorpus(t testing.TB) map[string]string {
	texts := map[string]string{
		"prose":          "The quick brown fox jumps over the lazy dog. It's 4:30pm, and we'll see; they'd said \"no\" (twice)!",
		"contractions":   "don't I'm you're we've she'll he'd it's DON'T I'M YOU'RE WE'VE SHE'LL HE'D IT'S 's 'S 't 're 'Ve 'LL 'd 'x ' 'ſ x'ſ x'ſt O'Neil rock'n'roll ''s",
		"mixed case":     "HelloWORLD HelloWorld helloWorld HELLOworld XMLHttpRequest iPhone McDonald's ABCdefGHI aBcDeF A B C",
		"digits":         "1 12 123 1234 12345 123456 3.14159 1,000,000 2024-01-01 0x1F ١٢٣٤ ５６７ ½ Ⅻ ②③",
		"whitespace":     "a  b   c\t\td \n e\n\n\nf \r\n g   \n   h\u00a0\u00a0i\u3000j\u2028k\u0085l \t \n\t x    ",
		"trailing space": "hello   ",
		"lone newline":   "\n",
		"crlf":           "line one\r\nline two\r\n\r\n  indented\r\n",
		"punctuation":    "!!! ??? ... --- *** /// //\n/ !/\n// a//b ///\r\n ;; {}[]()<>@#$%^&*_+=|\\~` ' \"",
		"json":           `{"model":"gpt-4o","messages":[{"role":"user","content":"hi\nthere"}],"n":12345,"ok":true,"x":null,"nested":{"a":[1,2,3]}}`,
		"japanese":       "大規模言語モデルのゲートウェイはトークンを数える。東京は日本の首都です。カタカナとひらがな、そして漢字。",
		"chinese":        "我们的网关会统计令牌数量，并且限制请求速率。",
		"korean":         "안녕하세요, 세계! 한국어 문장입니다.",
		"russian":        "Привет, как дела? Это тест токенизатора. ПРИВЕТ МИР! Москва — столица России.",
		"greek arabic":   "Γειά σου Κόσμε ΣΊΣΥΦΟΣ مرحبا بالعالم שלום עולם",
		"hindi thai":     "नमस्ते दुनिया हिन्दी में लिखा गया। สวัสดีชาวโลก ภาษาไทย",
		"emoji":          "hi 👋🏽 family 👨‍👩‍👧‍👦 flags 🇯🇵🇺🇸 ❤️ ✨✨✨ keycap 1️⃣ 😀😃😄",
		"combining":      "e\u0301 \u0301A \u0301a \u0301 \u0301\u0301 Ä\u0308B cafe\u0301 n\u0303o \u0301'S x\u0301'll",
		"marks after A":  "!\u0301 !\u0301A \u0301AB. .\u0301Ab '\u0301",
		"titlecase":      "ǅemal ǈ ǋ ᾈ ǅ'S ǲa",
		"modifier":       "ʰʱ ʰa aʰ Aʰ ʰA ʰ'd ˢ",
		"long word":      strings.Repeat("supercalifragilistic", 20),
		"long base64":    strings.Repeat("QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVphYmNkZWZnaGlqa2xtbm9wcXJzdHV2d3h5ejAxMjM0NTY3ODk", 8),
		"long spaces":    "x" + strings.Repeat(" ", 300) + "y" + strings.Repeat("\t", 100) + strings.Repeat("\n", 70),
		"long punct":     strings.Repeat("=", 200) + strings.Repeat("-+", 100) + "\n",
		"long digits":    strings.Repeat("0123456789", 30),
		"special tokens": "<|endoftext|> <|endofprompt|><|fim_prefix|>",
		"invalid utf8":   "ab\xffcd \xc3( \xe2\x82 x\xf0\x9f\x98 \xed\xa0\x80 \x80\x80 ok",
		"nul and ctrl":   "a\x00b\x01\x1f\x7f c\x0bd\x0ce",
		// Found by this test while writing the splitter: the library skips DEL, and
		// ends \s*[\r\n]+ at the first newline of a whitespace run.
		"regression DEL":       "\x1f\x7f !!\x7f!! a\x7fb \x7f \x7f\n'\x7fs x\x7f",
		"regression first \\n": "٤\n\t\n a \n \n b\r\n \r\n\n c\t\n\t\n\t\n",
		"go source":            corpus(t, 8<<10),
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 40 {
		texts["random "+string(rune('A'+i))] = randomText(rng, 200+rng.IntN(400))
	}
	return texts
}

// runePools weights random text towards the characters the patterns treat
// specially, with some fully random code points.
var runePools = []string{
	"abcxyzABCXYZ", "0123456789", " \t\n\r", "'sStTrReEvVmMlLdD", "!?.,;:/\\-_=+*&^%$#@()[]{}<>\"`~|",
	"\u00a0\u0085\u2028\u3000\u000b\u000c", "éÉßſǅǈʰˢ\u0301\u0308\u20dd", "大規模言語モデル", "Привет", "١٢٣٤५६Ⅻ½",
	"👋🏽👨‍👩‍👧🇯🇵❤️", "\u1c89\u1c8a",
}

func randomText(rng *rand.Rand, runes int) string {
	var b strings.Builder
	for range runes {
		switch k := rng.IntN(20); {
		case k == 0: // any scalar value
			r := rune(rng.IntN(unicode.MaxRune + 1))
			if !utf8.ValidRune(r) {
				r = 'q'
			}
			b.WriteRune(r)
		case k == 1 && rng.IntN(8) == 0: // an invalid byte
			b.WriteByte(byte(0x80 + rng.IntN(0x80)))
		default:
			pool := []rune(runePools[rng.IntN(len(runePools))])
			b.WriteRune(pool[rng.IntN(len(pool))])
		}
	}
	return b.String()
}

func TestCountMatchesLibrary(t *testing.T) {
	c := New()
	for name, text := range differentialCorpus(t) {
		for id := range numEncodings {
			want := libraryCount(t, id, text)
			// Twice: the second count comes from the piece cache.
			for pass := range 2 {
				if got := c.encoding(id).count(text); got != want {
					t.Errorf("%s, %s, pass %d: count %d, library %d\ntext: %q", encodingNames[id], name, pass, got, want, text)
				}
			}
		}
	}
}

// TestPiecesMatchLibrary checks every prefix of short texts: a wrong piece
// boundary that happens to give the same total over a whole text shows up on
// some prefix.
func TestPiecesMatchLibrary(t *testing.T) {
	c := New()
	rng := rand.New(rand.NewPCG(3, 4))
	texts := []string{"HelloWORLD don't  \n x", "\u0301A !\u0301a 'll 12345", "a \n\n b\t\tc  "}
	for range 30 {
		texts = append(texts, randomText(rng, 40))
	}
	for _, text := range texts {
		for end := 1; end <= len(text); end++ {
			for id := range numEncodings {
				if got, want := c.encoding(id).count(text[:end]), libraryCount(t, id, text[:end]); got != want {
					t.Fatalf("%s: count %d, library %d\ntext: %q", encodingNames[id], got, want, text[:end])
				}
			}
		}
	}
}

func FuzzCountMatchesLibrary(f *testing.F) {
	for _, text := range differentialCorpus(f) {
		if len(text) < 4<<10 {
			f.Add(text)
		}
	}
	c := New()
	f.Fuzz(func(t *testing.T, text string) {
		for id := range numEncodings {
			if got, want := c.encoding(id).count(text), libraryCount(t, id, text); got != want {
				t.Fatalf("%s: count %d, library %d\ntext: %q", encodingNames[id], got, want, text)
			}
		}
	})
}

func TestMergeLargeMatchesSmall(t *testing.T) {
	ranks := New().encoding(o200k).ranks
	rng := rand.New(rand.NewPCG(5, 6))
	for range 200 {
		piece := randomText(rng, 10+rng.IntN(20))
		if len(piece) > smallPiece {
			piece = piece[:smallPiece]
		}
		if small, large := ranks.mergeSmall(piece), ranks.mergeLarge(piece); small != large {
			t.Fatalf("%q: mergeSmall %d, mergeLarge %d", piece, small, large)
		}
	}
}

func TestPieceCacheBoundedAndConcurrent(t *testing.T) {
	c := New()
	enc := c.encoding(o200k)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for range 200 {
				text := randomText(rng, 100)
				if got, want := enc.count(text), libraryCount(t, o200k, text); got != want {
					t.Errorf("count %d, library %d: %q", got, want, text)
					return
				}
			}
		}()
	}
	wg.Wait()
	long := strings.Repeat("zq", maxCachedPiece)
	enc.count(long)
	if e := enc.cache.slot(long).Load(); e != nil && e.piece == long {
		t.Error("a piece longer than maxCachedPiece was cached")
	}
}

func TestRankTableMatchesLibraryIDs(t *testing.T) {
	c := New()
	libraryCount(t, o200k, "x") // loads the library codecs
	rng := rand.New(rand.NewPCG(8, 9))
	for id := range numEncodings {
		ranks := c.encoding(id).ranks
		codec := libraryCodecs.codecs[id]
		for range 2000 {
			tok := uint(rng.IntN(100000))
			s, err := codec.Decode([]uint{tok})
			if err != nil {
				t.Fatalf("%s: decode %d: %v", encodingNames[id], tok, err)
			}
			if got := ranks.rank(s); got != uint32(tok) {
				t.Fatalf("%s: rank(%q) = %d, want %d", encodingNames[id], s, got, tok)
			}
		}
		for b := range 256 {
			if ranks.rank(string([]byte{byte(b)})) == noRank {
				t.Errorf("%s: byte %#x is not a token", encodingNames[id], b)
			}
		}
		if ranks.rank("") != noRank || ranks.rank("\xff\xfe definitely not one token") != noRank {
			t.Errorf("%s: a non-token has a rank", encodingNames[id])
		}
	}
}

// libraryRankStream is the uncompressed stream of a rank file, read out of a
// library codec through Decode (the library exposes no other view of its
// vocabulary): one id at a time, ids it does not know skipped.
func libraryRankStream(codec tokenizer.Codec) []byte {
	var out []byte
	next := uint32(0)
	ids := make([]uint, 1)
	for id := range uint32(maxTokenID) {
		ids[0] = uint(id)
		s, err := codec.Decode(ids)
		if err != nil || s == "" {
			continue
		}
		out = appendRankRecord(out, id-next, s)
		next = id + 1
	}
	return out
}

// TestRankFilesMatchLibrary checks that the embedded rank files hold the
// library's vocabularies; with -update it writes them (`go generate`).
func TestRankFilesMatchLibrary(t *testing.T) {
	libraryCount(t, o200k, "x") // loads the library codecs
	for id := range numEncodings {
		want := libraryRankStream(libraryCodecs.codecs[id])
		path := filepath.Join("ranks", encodingNames[id]+".gz")
		if *update {
			var z bytes.Buffer
			w, err := gzip.NewWriterLevel(&z, gzip.BestCompression)
			if err == nil {
				_, err = w.Write(want)
			}
			if err == nil {
				err = w.Close()
			}
			if err == nil {
				err = os.WriteFile(path, z.Bytes(), 0o644)
			}
			if err != nil {
				t.Fatal(err)
			}
			continue
		}
		zr, err := gzip.NewReader(bytes.NewReader(rankFiles[id]))
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		got, err := io.ReadAll(zr)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from the library's vocabulary (%d bytes against %d): run go generate ./tokencount", path, len(got), len(want))
		}
	}
}
