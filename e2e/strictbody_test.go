package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"sluice/counter"
	"sluice/gwerror"
	"sluice/gwerror/gwerrortest"
	"sluice/llmapi"
)

// These tests attack the edge parser the way a client with a valid key can:
// bodies that one JSON decoder reads differently from another (duplicated
// names, names differing in case, fields of another endpoint), batched
// prompts, and numbers that overflow. The mock upstream reads bodies like a
// lenient provider (Go encoding/json: last duplicate wins, names matched
// case-insensitively), so a body the gateway judged one way and forwarded
// shows up as what the provider served and charged.

const strictApp = "app-a"

// strictLimit is the 2,000-token hard cap of docs/ratelimit.md ("Hard caps
// need both"): a fixed window, exact under the frozen clock.
var strictLimit = window(2000, time.Hour)

// strictRoutes: hc is the documented hard cap (reserveOutput maxTokens and
// maxOutputTokens 50) with model-access allowing gpt-4o-mini only; po
// reserves prompts only (the default), pa likewise on an anthropic provider;
// ro reserves the requested bound without a cap; usd is a $0.01 daily budget.
const strictRoutes = `
  - name: hc
    context: /hc
    provider: mock
    policies:
      - {name: api-key-auth, version: v1}
      - {name: token-based-ratelimit, version: v1, params: {consumerBased: true, reserveOutput: maxTokens, maxOutputTokens: 50, algorithm: fixed-window, totalTokenLimits: [{count: 2000, duration: 1h}]}}
      - {name: model-access, version: v1, params: {allow: [gpt-4o-mini]}}
  - name: po
    context: /po
    provider: mock
    policies:
      - {name: api-key-auth, version: v1}
      - {name: token-based-ratelimit, version: v1, params: {consumerBased: true, algorithm: fixed-window, totalTokenLimits: [{count: 2000, duration: 1h}]}}
  - name: pa
    context: /pa
    provider: claude
    policies:
      - {name: api-key-auth, version: v1}
      - {name: token-based-ratelimit, version: v1, params: {consumerBased: true, algorithm: fixed-window, totalTokenLimits: [{count: 2000, duration: 1h}]}}
  - name: ro
    context: /ro
    provider: mock
    policies:
      - {name: api-key-auth, version: v1}
      - {name: token-based-ratelimit, version: v1, params: {consumerBased: true, reserveOutput: maxTokens, algorithm: fixed-window, totalTokenLimits: [{count: 2000, duration: 1h}]}}
  - name: usd
    context: /usd
    provider: mock
    policies:
      - {name: api-key-auth, version: v1}
      - {name: llm-cost-based-ratelimit, version: v1, params: {consumerBased: true, budgetLimits: [{amount: 0.01, duration: 1d}]}}
      - {name: llm-cost, version: v1}
`

// strictBudget is the usd route's counter: $0.01 in micro-USD per UTC day.
var strictBudget = counter.Limit{Algorithm: counter.FixedWindow, Max: 10_000, Period: 24 * time.Hour}

func startStrictEnv(t *testing.T) *limitsEnv {
	t.Helper()
	doc := strings.Replace(deploymentDoc([]string{strictApp}, strictRoutes), "providers:\n",
		"providers:\n  - {name: claude, type: anthropic, url: \"${MOCK_URL}\"}\n", 1)
	return startLimitsEnv(t, doc, nil)
}

// tokensUsed is what the route's consumer counter of app-a holds.
func (e *limitsEnv) tokensUsed(route string) int64 {
	e.t.Helper()
	return e.used(counterKey(route+":"+strictApp, policyTokens, "total", strictLimit), strictLimit)
}

// upstreamAttempts counts the requests the gateway sent to the mock.
func (e *limitsEnv) upstreamAttempts() float64 {
	return e.metric("sluice_upstream_attempts_total", map[string]string{"provider": "mock"})
}

// served is the number of tokens the mock generated in a response body or
// stream (each one is the text " tok").
func served(body []byte) int { return strings.Count(string(body), " tok") }

const strictMessages = `"messages":[{"role":"user","content":"Write as much as you are allowed to."}]`

// TestStrictBodyRefusesAmbiguity: every body a lenient upstream would read
// differently from the gateway is a 400 naming the problem: nothing goes
// upstream and nothing is charged.
func TestStrictBodyRefusesAmbiguity(t *testing.T) {
	env := startStrictEnv(t)
	for _, tc := range []struct {
		name, route, path, body string
		code, param             string
	}{
		// The lenient upstream reads the last max_tokens (1000); the clamp to 50
		// used to rewrite the first.
		{"duplicate max_tokens", "hc", "/v1/chat/completions",
			`{"model":"gpt-4o-mini",` + strictMessages + `,"max_tokens":1,"max_tokens":1000}`, gwerror.CodeInvalidJSON, ""},
		// The gateway used to add include_usage to the first stream_options; the
		// upstream read the last, sent no usage, and the stream closed at the
		// prompt-only estimate.
		{"duplicate stream_options", "po", "/v1/chat/completions",
			`{"model":"gpt-4o-mini",` + strictMessages + `,"max_tokens":2000,"stream":true,"stream_options":{"include_usage":true},"stream_options":{"include_usage":false}}`,
			gwerror.CodeInvalidJSON, ""},
		{"duplicate in a message", "po", "/v1/chat/completions",
			`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"short","content":"` + strings.Repeat("long ", 500) + `"}]}`,
			gwerror.CodeInvalidJSON, ""},
		{"Model before model", "hc", "/v1/chat/completions",
			`{"Model":"gpt-4o","model":"gpt-4o-mini",` + strictMessages + `,"max_tokens":10}`, gwerror.CodeInvalidRequest, "model"},
		{"Model after model", "hc", "/v1/chat/completions",
			`{"model":"gpt-4o-mini","Model":"gpt-4o",` + strictMessages + `,"max_tokens":10}`, gwerror.CodeInvalidRequest, "model"},
		{"Model alone", "hc", "/v1/chat/completions",
			`{"Model":"gpt-4o-mini",` + strictMessages + `,"max_tokens":10}`, gwerror.CodeInvalidRequest, "model"},
		{"Stream", "po", "/v1/chat/completions",
			`{"model":"gpt-4o-mini",` + strictMessages + `,"max_tokens":10,"Stream":true}`, gwerror.CodeInvalidRequest, "stream"},
		{"N", "hc", "/v1/chat/completions",
			`{"model":"gpt-4o-mini",` + strictMessages + `,"max_tokens":10,"N":4}`, gwerror.CodeInvalidRequest, "n"},
		{"MAX_TOKENS", "ro", "/v1/chat/completions",
			`{"model":"gpt-4o-mini",` + strictMessages + `,"MAX_TOKENS":1000}`, gwerror.CodeInvalidRequest, "max_tokens"},
		{"max_tokens with a KELVIN SIGN", "hc", "/v1/chat/completions",
			`{"model":"gpt-4o-mini",` + strictMessages + `,"max_to\u212aens":1000}`, gwerror.CodeInvalidRequest, "max_tokens"},
		{"Include_Usage", "po", "/v1/chat/completions",
			`{"model":"gpt-4o-mini",` + strictMessages + `,"max_tokens":10,"stream":true,"stream_options":{"Include_Usage":false}}`,
			gwerror.CodeInvalidRequest, "stream_options.include_usage"},
		{"two output bounds", "hc", "/v1/chat/completions",
			`{"model":"gpt-4o-mini",` + strictMessages + `,"max_completion_tokens":10,"max_tokens":1000}`, gwerror.CodeInvalidRequest, "max_completion_tokens"},
		// Chat has no max_output_tokens: an upstream ignores it and generates
		// unbounded, while the gateway reserved (and capped) the 10.
		{"another endpoint's bound", "hc", "/v1/chat/completions",
			`{"model":"gpt-4o-mini",` + strictMessages + `,"max_output_tokens":10}`, gwerror.CodeInvalidRequest, "max_output_tokens"},
		// Messages generate one output: n 2 made the gateway expect two finished
		// choices, so the answer never settled and closed at the prompt estimate.
		{"n on messages", "pa", "/v1/messages",
			`{"model":"claude-haiku-4-5",` + strictMessages + `,"max_tokens":500,"n":2}`, gwerror.CodeInvalidRequest, "n"},
		{"fractional max_tokens", "hc", "/v1/chat/completions",
			`{"model":"gpt-4o-mini",` + strictMessages + `,"max_tokens":50.0}`, gwerror.CodeInvalidRequest, "max_tokens"},
		{"string n", "hc", "/v1/chat/completions",
			`{"model":"gpt-4o-mini",` + strictMessages + `,"n":"4"}`, gwerror.CodeInvalidRequest, "n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			attempts := env.upstreamAttempts()
			resp, body := env.mustSend("/"+tc.route+tc.path, strictApp, []byte(tc.body), nil)
			env.waitSettled()
			if resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("status %d, want 400: %d tokens served, %d charged on %s", resp.StatusCode, served(body), env.tokensUsed(tc.route), tc.route)
			}
			if code := resp.Header.Get(gwerror.HeaderErrorCode); code != tc.code {
				t.Fatalf("%s %q, want %s: %s", gwerror.HeaderErrorCode, code, tc.code, body)
			}
			if tc.path == "/v1/messages" {
				// Anthropic's envelope has no param: the message names the field.
				e, err := gwerrortest.DecodeAnthropic(body)
				if err != nil || e.Error.Type != "invalid_request_error" || !strings.HasPrefix(e.Error.Message, tc.param+" ") {
					t.Fatalf("Anthropic envelope %s, want an invalid_request_error about %s", body, tc.param)
				}
			} else {
				e := gwerrortest.MustOpenAI(t, body)
				param := ""
				if e.Param != nil {
					param = *e.Param
				}
				if e.Code != tc.code || param != tc.param || e.Type != gwerror.TypeInvalidRequest {
					t.Fatalf("envelope %+v (param %q), want code %s param %q", e, param, tc.code, tc.param)
				}
			}
			if d := env.upstreamAttempts() - attempts; d != 0 {
				t.Fatalf("%v upstream attempts for a refused body", d)
			}
			if used := env.tokensUsed(tc.route); used != 0 {
				t.Fatalf("a refused body charged %d tokens", used)
			}
		})
	}

	// The same routes serve the unambiguous spelling of each request.
	resp, body := env.mustSend("/hc/v1/chat/completions", strictApp, []byte(`{"model":"gpt-4o-mini",`+strictMessages+`,"max_tokens":1000}`), nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("control request: %d %.300s", resp.StatusCode, body)
	}
	if _, completion := chatUsage(t, body); completion != 50 {
		t.Fatalf("control request served %d completion tokens, want the cap of 50", completion)
	}
}

// TestStrictBodyDuplicateBurst: 40 clients at once send max_tokens twice
// (1, then 1000) to the hard-cap route. Before Parse refused duplicates each
// was admitted on a 50-token reservation, served 1,000 and settled into debt.
func TestStrictBodyDuplicateBurst(t *testing.T) {
	const clients = 40
	env := startStrictEnv(t)
	body := []byte(`{"model":"gpt-4o-mini",` + strictMessages + `,"max_tokens":1,"max_tokens":1000}`)
	statuses := map[int]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for range clients {
		wg.Go(func() {
			<-gate
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			resp, _, err := env.send(ctx, "/hc/v1/chat/completions", strictApp, body, map[string]string{"x-mock-first-token-delay-ms": "100"})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				t.Errorf("send: %v", err)
				return
			}
			statuses[resp.StatusCode]++
		})
	}
	close(gate)
	wg.Wait()
	env.waitSettled()
	used := env.tokensUsed("hc")
	t.Logf("statuses %v; %d tokens used against the %d cap", statuses, used, strictLimit.Max)
	if statuses[http.StatusBadRequest] != clients || used != 0 {
		t.Fatalf("statuses %v and %d tokens used of %d: want %d x 400 and nothing charged", statuses, used, strictLimit.Max, clients)
	}
}

// completionsBody is a /v1/completions body batching prompts copies of one
// short prompt.
func completionsBody(prompts int, maxTokens int64, n int) []byte {
	list := make([]string, prompts)
	for i := range list {
		list[i] = "Say"
	}
	m := map[string]any{"model": "gpt-4o-mini", "prompt": list, "max_tokens": maxTokens}
	if n > 1 {
		m["n"] = n
	}
	b, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	return b
}

// TestBatchedPromptsReservePerPrompt: a completions batch reserves the output
// bound for every prompt and choice, so a batch cannot slip past a hard cap.
func TestBatchedPromptsReservePerPrompt(t *testing.T) {
	c := newCalc(t)
	env := startStrictEnv(t)

	t.Run("1500 prompts never fit", func(t *testing.T) {
		// 1,500 prompts x 50 tokens = 75,000 tokens of output against 2,000:
		// not even 1 token per prompt fits beside the prompts, and the batch
		// is larger than the limit itself.
		body := completionsBody(1500, 50, 1)
		resp, rb := env.mustSend("/hc/v1/completions", strictApp, body, nil)
		env.waitSettled()
		used := env.tokensUsed("hc")
		if resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("status %d, %d tokens served, %d used of %d; want 429", resp.StatusCode, served(rb), used, strictLimit.Max)
		}
		e := gwerrortest.MustOpenAI(t, rb)
		if !strings.Contains(e.Message, "can never be admitted") || resp.Header.Get("Retry-After") != "" {
			t.Fatalf("%s (Retry-After %q), want a denial that can never be admitted", e.Message, resp.Header.Get("Retry-After"))
		}
		if used != 0 {
			t.Fatalf("the denied batch charged %d tokens", used)
		}
	})
	t.Run("over the prompt bound", func(t *testing.T) {
		attempts := env.upstreamAttempts()
		resp, rb := env.mustSend("/hc/v1/completions", strictApp, completionsBody(llmapi.MaxPrompts+1, 50, 1), nil)
		env.waitSettled()
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("status %d, want 400: %d tokens served, %d used of %d", resp.StatusCode, served(rb), env.tokensUsed("hc"), strictLimit.Max)
		}
		if e := gwerrortest.MustOpenAI(t, rb); e.Param == nil || *e.Param != "prompt" {
			t.Fatalf("%+v, want param prompt", e)
		}
		if env.tokensUsed("hc") != 0 || env.upstreamAttempts() != attempts {
			t.Fatal("a refused batch was charged or sent upstream")
		}
	})
	t.Run("100 prompts clamped to the cap", func(t *testing.T) {
		// 100 prompts x 50 does not fit 2,000; the bound is lowered to what
		// the counter affords per prompt, and the counter never exceeds it.
		body := completionsBody(100, 50, 1)
		P := c.estimate(llmapi.Completions, body)
		perPrompt := (strictLimit.Max - P) / 100
		resp, rb := env.mustSend("/hc/v1/completions", strictApp, body, nil)
		env.waitSettled()
		used := env.tokensUsed("hc")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d %.300s; %d used", resp.StatusCode, rb, used)
		}
		var out struct {
			Choices []json.RawMessage `json:"choices"`
			Usage   struct {
				Completion int64 `json:"completion_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal(rb, &out); err != nil {
			t.Fatal(err)
		}
		t.Logf("P=%d: %d choices, %d completion tokens (%d per prompt), %d used of %d", P, len(out.Choices), out.Usage.Completion, perPrompt, used, strictLimit.Max)
		if len(out.Choices) != 100 || out.Usage.Completion != 100*perPrompt || used != P+100*perPrompt || used > strictLimit.Max {
			t.Fatalf("%d choices, %d completion tokens, %d used of %d; want 100 choices of %d tokens and the cap kept",
				len(out.Choices), out.Usage.Completion, used, strictLimit.Max, perPrompt)
		}
	})
	t.Run("a batched stream settles with every choice", func(t *testing.T) {
		// 3 prompts x n 2: the upstream streams 6 choices; the usage settles
		// only when all 6 finished (llmapi.Request.Choices).
		m := map[string]any{"model": "gpt-4o-mini", "prompt": []string{"a", "b", "c"}, "max_tokens": 5, "n": 2, "stream": true}
		body, _ := json.Marshal(m)
		P := c.estimate(llmapi.Completions, body)
		before := env.resolutions("po")["settled"]
		resp, rb := env.mustSend("/po/v1/completions", strictApp, body, nil)
		env.waitSettled()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d %.300s", resp.StatusCode, rb)
		}
		if d := env.resolutions("po")["settled"] - before; d != 1 {
			t.Fatalf("%v settlements, want 1", d)
		}
		if used := env.tokensUsed("po"); used != P+30 {
			t.Fatalf("used %d, want %d prompt + 30 completion", used, P)
		}
	})
}

// TestOverflowIsBounded: numbers that used to overflow the reservation are
// refused at the edge, and just under the bounds the saturated estimate is
// denied as a request that can never be admitted.
func TestOverflowIsBounded(t *testing.T) {
	env := startStrictEnv(t)
	chat := func(maxTokens string, n int) []byte {
		return []byte(fmt.Sprintf(`{"model":"gpt-4o-mini",%s,"max_tokens":%s,"n":%d}`, strictMessages, maxTokens, n))
	}
	budgetLeft := func() int64 {
		return env.remaining(counterKey("usd:"+strictApp, policyCost, "cost", strictBudget), strictBudget)
	}
	for _, tc := range []struct {
		name, path string
		body       []byte
	}{
		// Used to wrap to a negative reservation: a 500.
		{"max_tokens int64 max", "/ro/v1/chat/completions", chat("9223372036854775807", 1)},
		// 2^62 x 4 wrapped to 0 output: admitted on the prompt's price, the
		// mock served 4 x 2^20 tokens and the $0.01 budget went to -$2.51.
		{"2^62 x n 4 on a budget", "/usd/v1/chat/completions", chat("4611686018427387904", 4)},
		{"just over the bound", "/ro/v1/chat/completions", chat(fmt.Sprint(llmapi.MaxOutputTokensBound+1), 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			attempts := env.upstreamAttempts()
			resp, rb := env.mustSend(tc.path, strictApp, tc.body, nil)
			env.waitSettled()
			if resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("status %d, want 400: %d tokens served; budget left %d micro-USD of %d, ro used %d tokens",
					resp.StatusCode, served(rb), budgetLeft(), strictBudget.Max, env.tokensUsed("ro"))
			}
			if e := gwerrortest.MustOpenAI(t, rb); e.Param == nil || *e.Param != "max_tokens" {
				t.Fatalf("%+v; want param max_tokens", e)
			}
			if env.upstreamAttempts() != attempts || budgetLeft() != strictBudget.Max || env.tokensUsed("ro") != 0 {
				t.Fatal("a refused body was sent upstream or charged")
			}
		})
	}
	for _, tc := range []struct {
		name, path, code string
		body             []byte
	}{
		// 40,000,000 output tokens of gpt-4o-mini cost $24 > $0.01.
		{"the bound x n 4 on a budget", "/usd/v1/chat/completions", gwerror.CodeBudgetExceeded, chat(fmt.Sprint(llmapi.MaxOutputTokensBound), 4)},
		// 10,000,000 x 128 x 2,048 tokens, about 2.6e12: no wrap, no 500.
		{"every bound at once", "/ro/v1/completions", gwerror.CodeRateLimitExceeded, completionsBody(llmapi.MaxPrompts, llmapi.MaxOutputTokensBound, llmapi.MaxN)},
		{"the bound x n 128 on a budget", "/usd/v1/completions", gwerror.CodeBudgetExceeded, completionsBody(llmapi.MaxPrompts, llmapi.MaxOutputTokensBound, llmapi.MaxN)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			attempts := env.upstreamAttempts()
			resp, rb := env.mustSend(tc.path, strictApp, tc.body, nil)
			env.waitSettled()
			if resp.StatusCode != http.StatusTooManyRequests {
				t.Fatalf("status %d, want 429: %d tokens served; budget left %d micro-USD of %d, ro used %d tokens",
					resp.StatusCode, served(rb), budgetLeft(), strictBudget.Max, env.tokensUsed("ro"))
			}
			if e := gwerrortest.MustOpenAI(t, rb); e.Code != tc.code || !strings.Contains(e.Message, "can never be admitted") {
				t.Fatalf("%+v; want %s that can never be admitted", e, tc.code)
			}
			if ra := resp.Header.Get("Retry-After"); ra != "" {
				t.Fatalf("Retry-After %q on a request that never fits", ra)
			}
			if env.upstreamAttempts() != attempts || budgetLeft() != strictBudget.Max || env.tokensUsed("ro") != 0 {
				t.Fatalf("the denied request was sent upstream or charged: budget left %d of %d", budgetLeft(), strictBudget.Max)
			}
		})
	}
}
