package tokencount

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/maphash"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"sluice/internal/proctest"
	"sluice/llmapi"
)

func TestEncodingFor(t *testing.T) {
	tests := map[string]string{
		"gpt-4o": "o200k_base", "gpt-4o-mini-2024-07-18": "o200k_base", "gpt-4.1-nano": "o200k_base",
		"gpt-5": "o200k_base", "o3-mini": "o200k_base", "o1": "o200k_base", "o4-mini": "o200k_base",
		"gpt-4": "cl100k_base", "gpt-4-turbo": "cl100k_base", "gpt-3.5-turbo": "cl100k_base",
		"text-embedding-3-small": "cl100k_base", "ft:gpt-3.5-turbo:acme::x": "cl100k_base",
		"openai/gpt-4": "cl100k_base", "GPT-4O": "o200k_base",
		"claude-sonnet-4-5": "o200k_base", "llama-3-70b": "o200k_base", "": "o200k_base",
	}
	for model, want := range tests {
		if got := EncodingName(model); got != want {
			t.Errorf("EncodingName(%q) = %s, want %s", model, got, want)
		}
	}
}

func TestCountKnownValues(t *testing.T) {
	c := New()
	tests := []struct {
		model, text string
		want        int
	}{
		{"gpt-4o", "", 0},
		{"gpt-4o", "hello world", 2},
		{"gpt-4", "hello world", 2},
		{"gpt-4o", "tok tok tok tok ", 5},
		// o200k's larger vocabulary packs non-English text tighter than cl100k:
		// a check that the model family picks the encoding.
		{"gpt-4", "大規模言語モデル", 11},
		{"gpt-4o", "大規模言語モデル", 6},
		{"gpt-3.5-turbo", "Привет, как дела?", 8},
		{"gpt-5", "Привет, как дела?", 6},
	}
	for _, tt := range tests {
		if got := c.Count(tt.model, tt.text); got != tt.want {
			t.Errorf("Count(%s, %q) = %d, want %d", tt.model, tt.text, got, tt.want)
		}
	}
}

func parse(t testing.TB, ep llmapi.Endpoint, body string) *llmapi.Request {
	t.Helper()
	r, err := llmapi.Parse(ep, []byte(body))
	if err != nil {
		t.Fatalf("parse %s: %v", body, err)
	}
	return r
}

func TestEstimatePrompt(t *testing.T) {
	c := New()
	hw := int64(c.Count("gpt-4o", "hello world")) // 2
	user := int64(c.Count("gpt-4o", "user"))
	tests := []struct {
		name string
		ep   llmapi.Endpoint
		body string
		want int64
	}{
		{"chat one message", llmapi.ChatCompletions, `{"model":"gpt-4o","messages":[{"role":"user","content":"hello world"}]}`,
			TokensPerMessage + user + hw + ReplyPriming},
		{"chat name costs one more", llmapi.ChatCompletions, `{"model":"gpt-4o","messages":[{"role":"user","name":"user","content":"hello world"}]}`,
			TokensPerMessage + 2*user + 1 + hw + ReplyPriming},
		{"chat parts with image", llmapi.ChatCompletions, `{"model":"gpt-4o","messages":[{"role":"user","content":[{"type":"text","text":"hello world"},{"type":"image_url","image_url":{"url":"data:..."}}]}]}`,
			TokensPerMessage + user + hw + ImagePartTokens + ReplyPriming},
		{"chat escaped text is unescaped", llmapi.ChatCompletions, `{"model":"gpt-4o","messages":[{"role":"user","content":"hello\u0020world"}]}`,
			TokensPerMessage + user + hw + ReplyPriming},
		{"anthropic system and blocks", llmapi.Messages, `{"model":"claude-x","max_tokens":5,"system":"hello world","messages":[{"role":"user","content":[{"type":"text","text":"hello world"}]}]}`,
			hw + TokensPerMessage + user + hw + ReplyPriming},
		{"anthropic tool_result", llmapi.Messages, `{"model":"claude-x","max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"hello world"}]}]}`,
			TokensPerMessage + user + hw + ReplyPriming},
		{"completions string", llmapi.Completions, `{"model":"gpt-3.5-turbo-instruct","prompt":"hello world"}`, hw},
		{"completions batch summed", llmapi.Completions, `{"model":"gpt-3.5-turbo-instruct","prompt":["hello world","hello world","hello world"]}`, 3 * hw},
		{"completions token ids", llmapi.Completions, `{"model":"gpt-3.5-turbo-instruct","prompt":[1,2,3,4]}`, 4},
		{"embeddings strings", llmapi.Embeddings, `{"model":"text-embedding-3-small","input":["hello world","hello world"]}`, 2 * hw},
		{"embeddings token arrays", llmapi.Embeddings, `{"model":"text-embedding-3-small","input":[[1,2],[3,4,5]]}`, 5},
		{"responses string input", llmapi.Responses, `{"model":"gpt-4.1","input":"hello world","instructions":"hello world"}`,
			hw + TokensPerMessage + 1 + ReplyPriming + hw},
		{"responses items", llmapi.Responses, `{"model":"gpt-4.1","input":[{"role":"user","content":[{"type":"input_text","text":"hello world"}]}]}`,
			TokensPerMessage + user + hw + ReplyPriming},
		{"missing material", llmapi.ChatCompletions, `{"model":"gpt-4o"}`, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := c.EstimatePrompt(parse(t, tt.ep, tt.body)); got != tt.want {
				t.Errorf("EstimatePrompt = %d, want %d", got, tt.want)
			}
		})
	}
	if c.EstimatePrompt(nil) != 0 {
		t.Error("nil request")
	}
}

func TestToolsCounted(t *testing.T) {
	c := New()
	base := c.EstimatePrompt(parse(t, llmapi.ChatCompletions, `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`))
	with := c.EstimatePrompt(parse(t, llmapi.ChatCompletions, `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]}`))
	if with <= base+10 {
		t.Errorf("tools add %d tokens", with-base)
	}
}

// corpus returns realistic mixed text: Go sources (code and comments) of the
// toolchain's net/http package, repeated up to size. They are fixed for a Go
// version, unlike this repository's own sources, so the measured error does
// not drift as the project grows.
func corpus(t testing.TB, size int) string {
	t.Helper()
	var b strings.Builder
	goroot, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		t.Fatalf("go env GOROOT: %v", err)
	}
	files, _ := filepath.Glob(filepath.Join(strings.TrimSpace(string(goroot)), "src", "net", "http", "*.go"))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		b.Write(data)
		if b.Len() >= size {
			break
		}
	}
	if b.Len() == 0 {
		t.Fatal("no Go sources found for the corpus")
	}
	for b.Len() < size {
		b.WriteString(b.String()[:min(b.Len(), size-b.Len())])
	}
	return b.String()[:size]
}

func TestSampledModeError(t *testing.T) {
	if testing.Short() {
		t.Skip("counts megabytes exactly")
	}
	c := New()
	prose := strings.Repeat("The quick brown fox jumps over the lazy dog while the gateway counts tokens. ", 6000)
	cjk := strings.Repeat("大規模言語モデルのゲートウェイはトークンを数える。", 12000)
	for name, text := range map[string]string{"go source 1MB": corpus(t, 1<<20), "go source 100KB": corpus(t, 100<<10),
		"prose": prose, "cjk": cjk} {
		exact := c.exact(o200k, text, false)
		sampled := c.countTexts(o200k, []string{text}, false)
		errPct := 100 * math.Abs(float64(sampled-exact)) / float64(exact)
		t.Logf("%s: %d bytes, exact %d, sampled %d, error %.2f%%", name, len(text), exact, sampled, errPct)
		if errPct > 5 {
			t.Errorf("%s: sampled error %.2f%% above 5%%", name, errPct)
		}
	}
}

func TestCountSampledAcrossPieces(t *testing.T) {
	c := New()
	piece := strings.Repeat("hello world ", 2000) // 24 KB
	texts := make([]string, 20)                   // 480 KB total: sampled
	for i := range texts {
		texts[i] = piece
	}
	exact := 20 * c.exact(o200k, piece, false)
	got := c.countTexts(o200k, texts, false)
	if d := math.Abs(float64(got-exact)) / float64(exact); d > 0.02 {
		t.Errorf("sampled %d vs exact %d", got, exact)
	}
}

func TestConcurrentUse(t *testing.T) {
	c := New()
	var wg sync.WaitGroup
	results := make([]int, 16)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			model := []string{"gpt-4o", "gpt-4"}[i%2]
			results[i] = c.Count(model, "concurrent counting is safe")
		}()
	}
	wg.Wait()
	for i := 2; i < len(results); i++ {
		if results[i] != results[i%2] {
			t.Fatalf("results differ: %v", results)
		}
	}
}

func chatBody(t testing.TB, size int) *llmapi.Request {
	text := corpus(t, size)
	body, _ := json.Marshal(map[string]any{
		"model":    "gpt-4o",
		"messages": []map[string]string{{"role": "system", "content": "You are helpful."}, {"role": "user", "content": text}},
	})
	return parse(t, llmapi.ChatCompletions, string(body))
}

// reportCPU reports process CPU time per op ("cpu-ns/op"), which unlike ns/op does
// not count time the benchmark waited for a core on a busy machine. Call as
// defer reportCPU(b)(). With -cpu 1 the figure is close to one core's time.
func reportCPU(b *testing.B) func() {
	start, _ := proctest.Usage()
	return func() {
		if now, _ := proctest.Usage(); start > 0 && b.N > 0 {
			b.ReportMetric(float64(now-start)/float64(b.N), "cpu-ns/op")
		}
	}
}

// BenchmarkEstimate estimates a chat request of one user message of each size:
// "counted" without the text cache (every estimate tokenizes), "repeated"
// with it, the same request every time (every estimate after the first hits).
func BenchmarkEstimate(b *testing.B) {
	for _, mode := range []string{"counted", "repeated"} {
		c := New()
		if mode == "counted" {
			for id := range numEncodings {
				c.encoding(id).texts = nil
			}
		}
		for _, size := range []int{1 << 10, 100 << 10, 1 << 20} {
			req := chatBody(b, size)
			c.EstimatePrompt(req) // load the vocabulary outside the timing
			b.Run(fmt.Sprintf("%s/%dKB", mode, size>>10), func(b *testing.B) {
				b.SetBytes(int64(size))
				b.ReportAllocs()
				defer reportCPU(b)()
				for b.Loop() {
					c.EstimatePrompt(req)
				}
			})
		}
	}
}

// BenchmarkCount compares exact counting of 1 KiB texts of several kinds with the
// library's Count; "cold" starts every count with an empty piece cache.
func BenchmarkCount(b *testing.B) {
	texts := map[string]string{
		"go":       corpus(b, 1<<10),
		"english":  strings.Repeat("The gateway counts prompt tokens before it forwards a request; it doesn't wait. ", 13)[:1<<10],
		"japanese": strings.Repeat("大規模言語モデルのゲートウェイはトークンを数える。", 15)[:1020],
		"russian":  strings.ToValidUTF8(strings.Repeat("Шлюз считает токены запроса, прежде чем переслать его. ", 11)[:1<<10], ""),
	}
	c := New()
	enc := c.encoding(o200k)
	for _, name := range []string{"go", "english", "japanese", "russian"} {
		text := texts[name]
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			b.ReportAllocs()
			defer reportCPU(b)()
			for b.Loop() {
				enc.count(text)
			}
		})
		b.Run(name+"/cold", func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			b.ReportAllocs()
			defer reportCPU(b)()
			for b.Loop() {
				enc.cache = newPieceCache()
				enc.count(text)
			}
		})
		b.Run(name+"/library", func(b *testing.B) {
			libraryCount(b, o200k, text)
			b.SetBytes(int64(len(text)))
			b.ReportAllocs()
			defer reportCPU(b)()
			for b.Loop() {
				libraryCount(b, o200k, text)
			}
		})
	}
}

func TestWarmLoadsEveryEncoding(t *testing.T) {
	c := New()
	c.Warm()
	for id := range numEncodings {
		if c.encodings[id].enc == nil {
			t.Fatalf("encoding %d not loaded by Warm", id)
		}
	}
}

func TestExact(t *testing.T) {
	for model, want := range map[string]bool{"gpt-4o-mini": true, "openai/gpt-4": true, "o3": true,
		"claude-haiku-4-5": false, "llama-3.1-8b": false, "": false} {
		if got := Exact(model); got != want {
			t.Errorf("Exact(%q) = %v; want %v", model, got, want)
		}
	}
}

// TestPrefix: the longest prefix within n tokens, never splitting a
// character; every n from 0 past the whole text.
func TestPrefix(t *testing.T) {
	c := New()
	for _, text := range []string{strings.Repeat(" tok", 40), "Héllo, wörld! 你好世界，这是一个测试。 Ünïcødé ✓ emoji 🎉🎉 done.", "one"} {
		total := c.Count("gpt-4o", text)
		for n := 0; n <= total+1; n++ {
			p, k := c.Prefix("gpt-4o", text, n)
			if !strings.HasPrefix(text, p) || !utf8.ValidString(p) {
				t.Fatalf("n=%d: %q is not a whole-character prefix of %q", n, p, text)
			}
			if k != c.Count("gpt-4o", p) || k > n {
				t.Fatalf("n=%d: prefix %q counts %d (reported %d)", n, p, c.Count("gpt-4o", p), k)
			}
			if rest := text[len(p):]; rest != "" {
				_, size := utf8.DecodeRuneInString(rest)
				if c.Count("gpt-4o", text[:len(p)+size]) <= n {
					t.Fatalf("n=%d: prefix %q is not the longest (one more character still fits)", n, p)
				}
			}
		}
		if p, k := c.Prefix("gpt-4o", text, total); p != text || k != total {
			t.Fatalf("the whole text within its own count: %q %d", p, k)
		}
	}
	if p, k := c.Prefix("gpt-4o", strings.Repeat(" tok", 10), 3); p != " tok tok tok" || k != 3 {
		t.Fatalf("Prefix(3) = %q, %d", p, k)
	}
}

// A text FitsBySize says fits n tokens counts at most n under every
// encoding; invalid UTF-8 is never judged by its size.
func TestFitsBySize(t *testing.T) {
	c := New()
	long := strings.Repeat("a b c d e f g h i j k l m n o p ", 5000) // sampled (> SampleThreshold)
	for _, tc := range []struct {
		text string
		n    int64
		fits bool
	}{
		{"", 0, true},
		{"hello", 5, true},
		{"hello", 4, false},
		{" tok tok tok tok", 16, true},
		{"日本語のテキスト", 24, true},
		{"\xff\xfe\xfd", 3, false},
		{"a\x7fb", 3, true},
		{long, int64(len(long)), true},
	} {
		if got := FitsBySize(tc.text, tc.n); got != tc.fits {
			t.Errorf("FitsBySize(%.20q, %d) = %v, want %v", tc.text, tc.n, got, tc.fits)
		}
		if !tc.fits {
			continue
		}
		for _, model := range []string{"gpt-4o-mini", "gpt-4", "claude-3-5-sonnet"} {
			if k := c.Count(model, tc.text); int64(k) > tc.n {
				t.Errorf("%s counts %.20q as %d tokens, more than %d", model, tc.text, k, tc.n)
			}
		}
	}
}

func TestDecodeRanksRefuses(t *testing.T) {
	gz := func(raw []byte) []byte {
		var z bytes.Buffer
		w := gzip.NewWriter(&z)
		_, _ = w.Write(raw)
		_ = w.Close()
		return z.Bytes()
	}
	ok := appendRankRecord(appendRankRecord(nil, 0, "a"), 4, "bc")
	if tbl, err := decodeRanks(gz(ok)); err != nil || tbl.rank("a") != 0 || tbl.rank("bc") != 5 || tbl.rank("b") != noRank {
		t.Fatalf("decodeRanks(a@0, bc@5) = %v; ranks a %d, bc %d", err, tbl.rank("a"), tbl.rank("bc"))
	}
	for _, tc := range []struct {
		name string
		file []byte
	}{
		{"not gzip", []byte("a\x00")},
		{"no token", gz(nil)},
		{"gap cut short", gz([]byte{0x80})},
		{"length missing", gz([]byte{0})},
		{"zero length", gz([]byte{0, 0})},
		{"length past the end", gz([]byte{0, 3, 'a'})},
		{"length over the bound", gz(binary.AppendUvarint([]byte{0}, maxTokenLen+1))},
		{"rank out of range", gz(appendRankRecord(nil, noRank, "a"))},
		{"truncated stream", gz(ok)[:20]},
	} {
		if _, err := decodeRanks(tc.file); err == nil {
			t.Errorf("%s: decoded", tc.name)
		}
	}
}

func TestTextCache(t *testing.T) {
	c := New()
	enc := c.encoding(o200k)
	one := newTextCache(1) // every text in the same slot
	calls := 0
	count := func(s string) int { calls++; return enc.count(s) }
	texts := []string{"You are a terse assistant, answer in one line.", "Summarise the benefits of connection pooling.", "大規模言語モデルのゲートウェイはトークンを数える。"}
	for round := range 2 {
		for _, text := range texts {
			for range 2 { // the second lookup of a text hits
				if got, want := one.tokens(text, count), enc.count(text); got != want {
					t.Fatalf("round %d: tokens(%q) = %d, want %d", round, text, got, want)
				}
			}
		}
	}
	if calls != 2*len(texts) {
		t.Errorf("counted %d times, want %d: one miss per text and round (each evicts the other)", calls, 2*len(texts))
	}
}

// TestEstimateRemembersPrompts: an estimate through the text cache equals the
// estimate without it, the first time and when every text hits; answers
// (Count) are not remembered.
func TestEstimateRemembersPrompts(t *testing.T) {
	cached, plain := New(), New()
	for id := range numEncodings {
		plain.encoding(id).texts = nil
	}
	var texts []string
	for _, text := range differentialCorpus(t) {
		texts = append(texts, text)
	}
	for round := range 2 {
		for _, id := range []encodingID{o200k, cl100k} {
			if got, want := cached.countTexts(id, texts, true), plain.countTexts(id, texts, false); got != want {
				t.Fatalf("round %d, %s: %d tokens through the cache, %d without", round, encodingNames[id], got, want)
			}
		}
	}
	big := strings.Repeat("The gateway counts prompt tokens before it forwards a request. ", 2000) // sampled
	for range 2 {
		if got, want := cached.countTexts(o200k, []string{big}, true), plain.countTexts(o200k, []string{big}, false); got != want {
			t.Fatalf("sampled: %d tokens through the cache, %d without", got, want)
		}
	}
	answer := "An answer is counted but never remembered by the text cache."
	cached.Count("gpt-4o", answer)
	tc := cached.encoding(o200k).texts
	h1 := maphash.String(tc.seed1, answer)
	if e := tc.slots[h1&uint64(len(tc.slots)-1)].Load(); e != nil && e.h1 == h1 {
		t.Error("Count remembered an answer")
	}
}

func TestTextCacheConcurrent(t *testing.T) {
	c, plain := New(), New()
	plain.encoding(o200k).texts = nil
	texts := make([]string, 64)
	want := make([]int64, len(texts))
	for i := range texts {
		texts[i] = fmt.Sprintf("message %d: %s", i, strings.Repeat("pooling connections saves handshakes; ", i%7+1))
		want[i] = plain.countTexts(o200k, texts[i:i+1], false)
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				k := (i*7 + g) % len(texts)
				if got := c.countTexts(o200k, texts[k:k+1], true); got != want[k] {
					t.Errorf("text %d: %d tokens, want %d", k, got, want[k])
					return
				}
			}
		})
	}
	wg.Wait()
}
