package pricing

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sluice/llmapi"
)

func embedded(t *testing.T) *Catalog {
	t.Helper()
	c, err := New("")
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c
}

func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestEmbeddedTableCoversRequiredModels(t *testing.T) {
	c := embedded(t)
	if c.Date() == "" {
		t.Error("embedded table has no date")
	}
	required := []string{
		"gpt-4o", "gpt-4o-mini", "gpt-4.1", "gpt-4.1-mini", "gpt-4.1-nano", "gpt-5", "gpt-5-mini", "gpt-5-nano",
		"o1", "o3", "o3-mini", "o4-mini", "text-embedding-3-small", "text-embedding-3-large", "gpt-3.5-turbo", "gpt-4-turbo",
		"claude-opus-4-1", "claude-opus-4", "claude-opus-4-5", "claude-sonnet-4-5", "claude-sonnet-4", "claude-haiku-4-5",
		"claude-3-5-haiku", "claude-3-7-sonnet", "claude-opus-4-6", "claude-sonnet-4-6",
		"o1-pro", "o3-pro", "gpt-4.5-preview", "gpt-4o-audio-preview", "gpt-4o-mini-audio-preview",
		"gpt-5-pro", "gpt-5.1", "gpt-5.2", "gpt-5.4", "gpt-5.4-pro", "gpt-5.4-mini", "gpt-5.4-nano", "gpt-5.5", "gpt-5.5-pro",
		"gemini-2.5-pro", "gemini-2.5-flash", "gemini-2.5-flash-lite", "gemini-2.0-flash",
		"mistral-large", "mistral-medium", "mistral-small", "codestral",
		"llama-3.1-8b-instruct", "llama-3.1-70b-instruct", "llama-3.1-405b-instruct", "llama-3.3-70b-instruct",
		"deepseek-chat", "deepseek-reasoner",
	}
	for _, m := range required {
		got, ok := c.Resolve(m)
		if !ok || got.Name != m {
			t.Errorf("Resolve(%q) = %q, %v; want an entry of its own", m, got.Name, ok)
			continue
		}
		if got.Price.Input <= 0 || got.Provider == "" || got.Source != "embedded" {
			t.Errorf("%s: incomplete entry %+v", m, got)
		}
		if !strings.HasPrefix(m, "text-embedding") && got.Price.Output <= 0 {
			t.Errorf("%s: no output price", m)
		}
	}
}

// TestSnapshotsResolveToTheirFamily: the dated model ids the providers
// serve are priced as their family, at its list price (USD per million:
// input, cached input, output), and names the table does not hold stay
// unpriced.
func TestSnapshotsResolveToTheirFamily(t *testing.T) {
	c := embedded(t)
	cases := []struct {
		model, entry          string
		input, cached, output float64
	}{
		{"o1-pro-2025-03-19", "o1-pro", 150, 150, 600},
		{"o3-pro-2025-06-10", "o3-pro", 20, 20, 80},
		{"gpt-4.5-preview-2025-02-27", "gpt-4.5-preview", 75, 37.5, 150},
		{"gpt-4o-audio-preview-2024-12-17", "gpt-4o-audio-preview", 2.5, 2.5, 10},
		{"gpt-5-2025-08-07", "gpt-5", 1.25, 0.125, 10},
		{"gpt-5-mini-2025-08-07", "gpt-5-mini", 0.25, 0.025, 2},
		{"gpt-5-nano-2025-08-07", "gpt-5-nano", 0.05, 0.005, 0.4},
		{"gpt-5-chat-latest", "gpt-5", 1.25, 0.125, 10},
		{"gpt-5-pro-2025-10-06", "gpt-5-pro", 15, 15, 120},
		{"gpt-5.1-2025-11-13", "gpt-5.1", 1.25, 0.125, 10},
		{"gpt-5.2-2025-12-11", "gpt-5.2", 1.75, 0.175, 14},
		{"gpt-4.1-2025-04-14", "gpt-4.1", 2, 0.5, 8},
		{"gpt-4.1-nano-2025-04-14", "gpt-4.1-nano", 0.1, 0.025, 0.4},
		{"o3-2025-04-16", "o3", 2, 0.5, 8},
		{"o4-mini-2025-04-16", "o4-mini", 1.1, 0.275, 4.4},
		{"claude-opus-4-1-20250805", "claude-opus-4-1", 15, 1.5, 75},
		{"claude-opus-4-5-20251101", "claude-opus-4-5", 5, 0.5, 25},
		{"claude-sonnet-4-5-20250929", "claude-sonnet-4-5", 3, 0.3, 15},
		{"claude-haiku-4-5-20251001", "claude-haiku-4-5", 1, 0.1, 5},
		{"claude-sonnet-4-20250514", "claude-sonnet-4", 3, 0.3, 15},
	}
	for _, tc := range cases {
		m, ok := c.Resolve(tc.model)
		if !ok || m.Name != tc.entry || m.Price.Input != tc.input || m.Price.CachedInput != tc.cached || m.Price.Output != tc.output {
			t.Errorf("Resolve(%q) = %q %+v, %v; want %s at %v / %v / %v", tc.model, m.Name, m.Price, ok, tc.entry, tc.input, tc.cached, tc.output)
		}
	}
	for _, model := range []string{"gpt-4.5", "gpt-4o-audio", "o1-pro-max", "claude-opus-4-7"} {
		if m, ok := c.Resolve(model); ok {
			t.Errorf("Resolve(%q) = %q: a model the table does not hold must stay unpriced", model, m.Name)
		}
	}
}

func TestResolveNormalisation(t *testing.T) {
	c := embedded(t)
	cases := []struct {
		in, want string
	}{
		{"gpt-4o", "gpt-4o"},
		{"GPT-4o", "gpt-4o"},
		{"  gpt-4o-mini ", "gpt-4o-mini"},
		{"openai/gpt-4o", "gpt-4o"},
		{"gpt-4o-2024-08-06", "gpt-4o"},
		{"gpt-4o-mini-2024-07-18", "gpt-4o-mini"},
		{"gpt-4o-2024-05-13", "gpt-4o-2024-05-13"}, // exact entry beats normalisation
		{"gpt-3.5-turbo-0125", "gpt-3.5-turbo"},
		{"gpt-4-turbo-2024-04-09", "gpt-4-turbo"},
		{"gpt-4-1106-preview", "gpt-4-turbo"}, // alias, not gpt-4
		{"gpt-5-chat-latest", "gpt-5"},
		{"o3-mini-2025-01-31", "o3-mini"},
		{"anthropic/claude-sonnet-4-5", "claude-sonnet-4-5"},
		{"claude-sonnet-4-5-20250929", "claude-sonnet-4-5"},
		{"claude-3-5-haiku-latest", "claude-3-5-haiku"},
		{"claude-3-5-haiku@20241022", "claude-3-5-haiku"},
		{"claude-3.5-haiku", "claude-3-5-haiku"},
		{"anthropic.claude-3-7-sonnet-20250219-v1:0", "claude-3-7-sonnet"},
		{"us.anthropic.claude-opus-4-1-20250805-v1:0", "claude-opus-4-1"},
		{"claude-opus-4-20250514", "claude-opus-4"},
		{"models/gemini-2.5-pro", "gemini-2.5-pro"},
		{"gemini-2.0-flash-001", "gemini-2.0-flash"},
		{"gemini-2.5-flash-preview-05-20", "gemini-2.5-flash"},
		{"gemini-2.5-flash-lite-preview-06-17", "gemini-2.5-flash-lite"},
		{"mistral-large-latest", "mistral-large"},
		{"mistral-small-2503", "mistral-small"},
		{"codestral-2501", "codestral"},
		{"meta-llama/Llama-3.3-70B-Instruct", "llama-3.3-70b-instruct"},
		{"meta-llama/Meta-Llama-3.1-405B-Instruct-Turbo", "llama-3.1-405b-instruct"},
		{"accounts/fireworks/models/llama-v3p1-8b-instruct", "llama-3.1-8b-instruct"},
		{"meta.llama3-1-70b-instruct-v1:0", "llama-3.1-70b-instruct"},
		{"llama-3.3-70b-versatile", "llama-3.3-70b-instruct"},
		{"deepseek/deepseek-chat", "deepseek-chat"},
	}
	for _, tc := range cases {
		got, ok := c.Resolve(tc.in)
		if !ok || got.Name != tc.want {
			t.Errorf("Resolve(%q) = %q, %v; want %q", tc.in, got.Name, ok, tc.want)
		}
	}
}

func TestResolveUnknown(t *testing.T) {
	c := embedded(t)
	for _, m := range []string{"", "no-such-model", "claude-opus-4-7", "gpt-6", "openai/", "-2024-08-06", "gpt-4o-mini-tts-x"} {
		if got, ok := c.Resolve(m); ok {
			t.Errorf("Resolve(%q) = %q; want unknown", m, got.Name)
		}
		if _, ok := c.Cost(m, &llmapi.Usage{PromptTokens: 10}); ok {
			t.Errorf("Cost(%q) ok; want unknown", m)
		}
	}
	var nilCat *Catalog
	if _, ok := nilCat.Lookup("gpt-4o"); ok {
		t.Error("nil catalog resolved a model")
	}
}

func TestCost(t *testing.T) {
	c := embedded(t)
	cases := []struct {
		name   string
		model  string
		u      *llmapi.Usage
		micros int64
	}{
		{"nil usage", "gpt-4o", nil, 0},
		// 1000*2.50 + 500*10 = 2500 + 5000 micro-USD.
		{"plain", "gpt-4o", &llmapi.Usage{PromptTokens: 1000, CompletionTokens: 500}, 7500},
		// 600 uncached*2.50 + 400 cached*1.25 + 500*10 = 1500 + 500 + 5000.
		{"cached input", "gpt-4o", &llmapi.Usage{PromptTokens: 1000, CachedPromptTokens: 400, CompletionTokens: 500}, 7000},
		// reasoning tokens are inside completion tokens; not charged again.
		{"reasoning inside completion", "o3", &llmapi.Usage{PromptTokens: 100, CompletionTokens: 1000, ReasoningTokens: 800}, 200 + 8000},
		// Anthropic: 1000 plain*3 + 2000 read*0.30 + 3000 write*3.75 + 100*15.
		{"anthropic cache read and write", "claude-sonnet-4-5",
			&llmapi.Usage{PromptTokens: 6000, CachedPromptTokens: 2000, CacheWriteTokens: 3000, CompletionTokens: 100}, 3000 + 600 + 11250 + 1500},
		// 200000 is not above the 200k threshold: base rates.
		{"tier boundary stays base", "claude-sonnet-4", &llmapi.Usage{PromptTokens: 200000, CompletionTokens: 1000}, 600000 + 15000},
		// 200001 is above: the whole request at 6 / 22.50.
		{"tier above threshold", "claude-sonnet-4", &llmapi.Usage{PromptTokens: 200001, CompletionTokens: 1000}, 1200006 + 22500},
		// gemini tier also changes the cached rate: 150000*2.50 + 100000*0.25 + 1000*15.
		{"gemini tier cached", "gemini-2.5-pro", &llmapi.Usage{PromptTokens: 250000, CachedPromptTokens: 100000, CompletionTokens: 1000}, 375000 + 25000 + 15000},
		// embeddings: input only.
		{"embedding", "text-embedding-3-small", &llmapi.Usage{PromptTokens: 1000}, 20},
		// inconsistent counts are clamped, never negative.
		{"cached above prompt", "gpt-4o", &llmapi.Usage{PromptTokens: 100, CachedPromptTokens: 500, CompletionTokens: -5}, 125},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := c.CostMicros(tc.model, tc.u)
			if !ok || got != tc.micros {
				t.Fatalf("CostMicros = %d, %v; want %d", got, ok, tc.micros)
			}
			usd, _ := c.Cost(tc.model, tc.u)
			if math.Abs(usd-float64(tc.micros)/1e6) > 1e-12 {
				t.Fatalf("Cost = %v; want %v", usd, float64(tc.micros)/1e6)
			}
		})
	}
}

func TestMicrosRoundUp(t *testing.T) {
	c := embedded(t)
	cases := []struct {
		model         string
		prompt, compl int64
		want          int64
	}{
		{"gpt-5-nano", 1, 0, 1},             // 0.05 micro-USD -> 1
		{"gpt-5-nano", 20, 0, 1},            // exactly 1.00
		{"gpt-5-nano", 21, 0, 2},            // 1.05 -> 2
		{"gpt-4o-mini", 1000, 0, 150},       // exactly 150; float would give 150.00000000000003
		{"text-embedding-3-small", 0, 0, 0}, // nothing, nothing
		{"deepseek-chat", 3, 3, 3},          // 0.84 + 1.26 = 2.10 -> 3
	}
	for _, tc := range cases {
		got, ok := c.EstimateMicros(tc.model, tc.prompt, tc.compl)
		if !ok || got != tc.want {
			t.Errorf("EstimateMicros(%s, %d, %d) = %d, %v; want %d", tc.model, tc.prompt, tc.compl, got, ok, tc.want)
		}
	}
}

func TestEstimate(t *testing.T) {
	c := embedded(t)
	// Estimate never assumes cache hits and picks the tier by prompt tokens.
	usd, ok := c.Estimate("gemini-2.5-pro", 300000, 2000)
	if !ok || math.Abs(usd-(0.75+0.03)) > 1e-12 {
		t.Fatalf("Estimate = %v, %v; want 0.78", usd, ok)
	}
	usd, _ = c.Estimate("gemini-2.5-pro", 100000, 2000)
	if math.Abs(usd-(0.125+0.02)) > 1e-12 {
		t.Fatalf("Estimate below tier = %v; want 0.145", usd)
	}
}

func TestSaturation(t *testing.T) {
	p := Price{Input: 1000, Output: 1000}
	got := p.CostMicros(&llmapi.Usage{PromptTokens: math.MaxInt64, CompletionTokens: math.MaxInt64})
	if got <= 0 {
		t.Fatalf("huge usage wrapped to %d", got)
	}
}

func TestUserFile(t *testing.T) {
	yamlFile := writeFile(t, "prices.yaml", `
models:
  gpt-4o:             # override: replaces the embedded entry
    input: 1
    output: 2
  acme-7b:            # addition, with an alias
    provider: acme
    input: 0.5
    cachedInput: 0.05
    output: 1.5
    aliases: [Acme-7B-Chat]
  gpt-4-turbo-preview: # a model named like an embedded alias wins over it
    input: 7
    output: 7
`)
	c, err := New(yamlFile)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	cases := []struct {
		model        string
		input, out   float64
		cached       float64
		source       string
		resolvedName string
	}{
		{"gpt-4o-2024-08-06", 1, 2, 1, yamlFile, "gpt-4o"},
		{"acme-7b", 0.5, 1.5, 0.05, yamlFile, "acme-7b"},
		{"vendor/ACME-7b-chat", 0.5, 1.5, 0.05, yamlFile, "acme-7b"},
		{"gpt-4-turbo-preview", 7, 7, 7, yamlFile, "gpt-4-turbo-preview"},
		{"gpt-4-1106-preview", 10, 30, 10, "embedded", "gpt-4-turbo"},
		{"gpt-4o-mini", 0.15, 0.60, 0.075, "embedded", "gpt-4o-mini"},
	}
	for _, tc := range cases {
		m, ok := c.Resolve(tc.model)
		if !ok || m.Name != tc.resolvedName || m.Price.Input != tc.input || m.Price.Output != tc.out ||
			m.Price.CachedInput != tc.cached || m.Source != tc.source {
			t.Errorf("Resolve(%q) = %+v, %v", tc.model, m, ok)
		}
	}
	// The base catalog is untouched by extension.
	base := embedded(t)
	if p, _ := base.Lookup("gpt-4o"); p.Input != 2.5 {
		t.Errorf("embedded gpt-4o changed to %v", p.Input)
	}

	// JSON works too, and a second layer overrides the first's alias.
	jsonFile := writeFile(t, "prices.json", `{"models": {"acme-7b-v2": {"input": 9, "output": 9, "aliases": ["acme-7b-chat"]}}}`)
	c2, err := c.WithFile(jsonFile)
	if err != nil {
		t.Fatalf("WithFile(json): %v", err)
	}
	if m, _ := c2.Resolve("acme-7b-chat"); m.Name != "acme-7b-v2" {
		t.Errorf("later layer's alias lost: %q", m.Name)
	}
	if m, _ := c.Resolve("acme-7b-chat"); m.Name != "acme-7b" {
		t.Errorf("WithFile modified its receiver: %q", m.Name)
	}
}

func TestUserFileErrors(t *testing.T) {
	cases := []struct {
		name, body, want string
	}{
		{"unknown field", "models:\n  m:\n    input: 1\n    output: 1\n    outptu: 2\n", `[5:5] unknown field "outptu"`},
		{"unknown top-level", "modles: {}\n", "modles"},
		{"missing models", "date: x\n", `no "models"`},
		{"missing input", "models:\n  m: {output: 1}\n", "models.m: input is required"},
		{"missing output", "models:\n  m: {input: 1}\n", "models.m: output is required"},
		{"negative", "models:\n  m: {input: -1, output: 1}\n", "models.m: input: -1 is not a price"},
		{"wrong type", "models:\n  m: {input: cheap, output: 1}\n", "cheap"},
		{"duplicate key", "models:\n  m: {input: 1, output: 1}\n  m: {input: 2, output: 2}\n", "already"},
		{"case duplicate", "models:\n  M: {input: 1, output: 1}\n  m: {input: 2, output: 2}\n", "same name"},
		{"tier without threshold", "models:\n  m: {input: 1, output: 1, tiers: [{input: 2, output: 2}]}\n", "tiers[0]: abovePromptTokens"},
		{"tiers not increasing", "models:\n  m: {input: 1, output: 1, tiers: [{abovePromptTokens: 10, input: 2, output: 2}, {abovePromptTokens: 5, input: 3, output: 3}]}\n", "tiers[1]"},
		{"alias is a model in same file", "models:\n  a: {input: 1, output: 1, aliases: [b]}\n  b: {input: 1, output: 1}\n", `alias "b" is the name of another model`},
		{"alias twice in same file", "models:\n  a: {input: 1, output: 1, aliases: [x]}\n  b: {input: 1, output: 1, aliases: [x]}\n", `alias "x" is also an alias`},
		{"not yaml", "models: [\n", "pricing file"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := writeFile(t, "bad.yaml", tc.body)
			_, err := New(p)
			if err == nil {
				t.Fatalf("New accepted %q", tc.body)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), p) {
				t.Fatalf("error %q; want it to name the file and contain %q", err, tc.want)
			}
		})
	}
	if _, err := New(filepath.Join(t.TempDir(), "missing.yaml")); err == nil {
		t.Fatal("missing file accepted")
	}
}

func TestForPromptPicksHighestTier(t *testing.T) {
	p := Price{Input: 1, Output: 1, Tiers: []Tier{
		{AbovePromptTokens: 100, Input: 2, Output: 2},
		{AbovePromptTokens: 1000, Input: 3, Output: 3},
	}}
	for _, tc := range []struct {
		prompt int64
		want   float64
	}{{0, 1}, {100, 1}, {101, 2}, {1000, 2}, {1001, 3}} {
		if got := p.ForPrompt(tc.prompt); got.Input != tc.want || got.Tiers != nil {
			t.Errorf("ForPrompt(%d) = %+v; want input %v", tc.prompt, got, tc.want)
		}
	}
}

func TestDocsListEveryEmbeddedModel(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "docs", "pricing.md"))
	if err != nil {
		t.Skipf("docs/pricing.md not readable: %v", err)
	}
	for _, m := range embedded(t).Models() {
		if !strings.Contains(string(doc), "`"+m.Name+"`") {
			t.Errorf("docs/pricing.md does not list %s", m.Name)
		}
	}
	if !strings.Contains(string(doc), embedded(t).Date()) {
		t.Errorf("docs/pricing.md does not state the table date %s", embedded(t).Date())
	}
}

func TestConcurrentUse(t *testing.T) {
	c := embedded(t)
	done := make(chan struct{})
	for i := 0; i < 8; i++ {
		go func() {
			defer func() { done <- struct{}{} }()
			for j := 0; j < 200; j++ {
				if _, ok := c.CostMicros("us.anthropic.claude-sonnet-4-5-20250929-v1:0", &llmapi.Usage{PromptTokens: 10}); !ok {
					t.Error("lookup failed")
					return
				}
			}
		}()
	}
	for i := 0; i < 8; i++ {
		<-done
	}
}

func BenchmarkResolve(b *testing.B) {
	c, err := New("")
	if err != nil {
		b.Fatal(err)
	}
	for _, name := range []string{"gpt-4o", "openai/gpt-4o-2024-08-06", "us.anthropic.claude-sonnet-4-5-20250929-v1:0", "unknown-model-x"} {
		b.Run(name, func(b *testing.B) {
			u := &llmapi.Usage{PromptTokens: 1000, CompletionTokens: 100}
			for i := 0; i < b.N; i++ {
				c.CostMicros(name, u)
			}
		})
	}
}
