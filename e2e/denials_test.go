package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"sluice/counter"
	"sluice/gwerror"
	"sluice/gwerror/gwerrortest"
	"sluice/llmapi"
	"sluice/policies/ratelimit"
	"sluice/pricing"
)

// Regression tests of issue 9 items 5, 6, 10 and 13 (the denial parts): an
// unpriced model cannot escape a money budget, denials tell SDKs whether to
// retry and say which scope denied and when it resets, rate-limit headers
// mean the same on 200 and 429, and Anthropic routes speak Anthropic.

const (
	policyCostLimit = "llm-cost-based-ratelimit"
	policyTokLimit  = "token-based-ratelimit"
)

// budgetPriceRoutes are cost-limited routes: /budget prices with the
// gateway's catalog, /fallback adds a defaultPrice, /filed a pricing file.
func budgetPriceRoutes(pricesFile string) string {
	return fmt.Sprintf(`  - name: budget
    context: /budget
    provider: mock
    policies:
      - {name: api-key-auth, version: v1}
      - name: llm-cost-based-ratelimit
        version: v1
        params: {consumerBased: true, budgetLimits: [{amount: 100, duration: 1d}]}
      - {name: llm-cost, version: v1}
  - name: fallback
    context: /fallback
    provider: mock
    policies:
      - {name: api-key-auth, version: v1}
      - name: llm-cost-based-ratelimit
        version: v1
        params: {consumerBased: true, budgetLimits: [{amount: 100, duration: 1d}]}
      - {name: llm-cost, version: v1, params: {defaultPrice: {input: 10, output: 40}}}
  - name: filed
    context: /filed
    provider: mock
    policies:
      - {name: api-key-auth, version: v1}
      - name: llm-cost-based-ratelimit
        version: v1
        params: {consumerBased: true, budgetLimits: [{amount: 0.01, duration: 1d}]}
      - {name: llm-cost, version: v1, params: {pricingFile: %q}}
  - name: adv
    context: /adv
    provider: mock
    policies:
      - {name: api-key-auth, version: v1}
      - name: advanced-ratelimit
        version: v1
        params:
          quotas:
            - name: spend
              limits: [{limit: 100000000, duration: 1d}]
              keyExtraction: [{type: metadata, key: x-application-id}]
              costExtraction: {source: metadata, key: x-llm-cost, multiplier: 1000000}
      - {name: llm-cost, version: v1}
`, pricesFile)
}

// needsRE reads the estimate out of a denial message.
var needsRE = regexp.MustCompile(`this request needs \$([0-9.]+)`)

// TestUnpricedModelsCannotEscapeABudget: the models that were charged
// $0.000001 for 1,000 output tokens are now priced (estimate and charge),
// a model no price covers is refused with 400 model_not_priced before
// anything is reserved or sent upstream, and llm-cost's defaultPrice and
// pricingFile price the estimate exactly as they price the charge.
func TestUnpricedModelsCannotEscapeABudget(t *testing.T) {
	prices := filepath.Join(t.TempDir(), "prices.yaml")
	if err := os.WriteFile(prices, []byte("models:\n  acme-70b: {provider: acme, input: 1.0, output: 2.0}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := startLimitsEnv(t, deploymentDoc([]string{"app-a"}, budgetPriceRoutes(prices)), nil)
	calc := newCalc(t)
	day := window(100_000_000, 24*time.Hour)
	budgetKey := counterKey("budget:app-a", policyCostLimit, "cost", day)
	upstream := func() float64 {
		return env.metric("sluice_upstream_attempts_total", map[string]string{"provider": "mock"})
	}

	{ // formerly unpriced models are charged their price
		for _, model := range []string{"o1-pro", "gpt-4.5-preview", "o3-pro", "gpt-4o-audio-preview"} {
			req := chatReq{Model: model, Text: "price me", MaxTokens: 1000}
			P := calc.estimate(llmapi.ChatCompletions, req.body())
			before := env.remaining(budgetKey, day)
			resp, body := env.mustSend("/budget/v1/chat/completions", "app-a", req.body(), nil)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("%s: %d %s", model, resp.StatusCode, body)
			}
			env.waitSettled()
			charged := before - env.remaining(budgetKey, day)
			t.Logf("%s: charged $%s for %d prompt + 1000 output tokens", model, microsToUSD(charged), P)
			want, ok := calc.pricing.CostMicros(model, &llmapi.Usage{PromptTokens: P, CompletionTokens: 1000})
			if !ok || charged != want {
				t.Errorf("%s: charged %d µUSD, want the catalog's price (%d µUSD, priced %v)", model, charged, want, ok)
			}
		}
	}

	{ // a model without a price is refused
		for _, model := range []string{"gpt-4.5", "o3-pro-max", "claude-opus-4-7", "acme-70b"} {
			req := chatReq{Model: model, Text: "price me", MaxTokens: 1000}
			before, sent := env.remaining(budgetKey, day), upstream()
			resp, body := env.mustSend("/budget/v1/chat/completions", "app-a", req.body(), nil)
			env.waitSettled()
			if resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("%s: status %d (%.200s), want 400", model, resp.StatusCode, body)
			}
			e := gwerrortest.MustOpenAI(t, body)
			if e.Code != gwerror.CodeModelNotPriced || e.Type != gwerror.TypeInvalidRequest || e.Param == nil || *e.Param != "model" ||
				!strings.Contains(e.Message, `"`+model+`"`) || !strings.Contains(e.Message, "pricing file") || !strings.Contains(e.Message, "defaultPrice") {
				t.Errorf("%s: envelope %+v, want model_not_priced naming the model and the two fixes", model, e)
			}
			if got := deniedBy(resp.Header); got != policyCostLimit {
				t.Errorf("%s: X-Sluice-Policy %q", model, resp.Header.Get(gwerror.HeaderPolicy))
			}
			if charged := before - env.remaining(budgetKey, day); charged != 0 {
				t.Errorf("%s: a refused request charged %d µUSD", model, charged)
			}
			if n := upstream() - sent; n != 0 {
				t.Errorf("%s: a refused request went upstream %v times", model, n)
			}
		}
	}

	{ // an advanced-ratelimit quota on x-llm-cost refuses them too
		advDay := window(100_000_000, 24*time.Hour)
		key := ratelimit.GroupKey("app-a", "advanced-ratelimit") + ":spend:" + ratelimit.PeriodLabel(advDay)
		req := chatReq{Model: "o3-pro-max", Text: "price me", MaxTokens: 1000}
		resp, body := env.mustSend("/adv/v1/chat/completions", "app-a", req.body(), nil)
		env.waitSettled()
		if e := gwerrortest.MustOpenAI(t, body); resp.StatusCode != http.StatusBadRequest || e.Code != gwerror.CodeModelNotPriced || deniedBy(resp.Header) != "advanced-ratelimit" {
			t.Errorf("advanced quota, unpriced model: %d %.300s", resp.StatusCode, body)
		}
		if used := advDay.Max - env.remaining(key, advDay); used != 0 {
			t.Errorf("advanced quota: a refused request charged %d", used)
		}
		req.Model = "o3-pro"
		P := calc.estimate(llmapi.ChatCompletions, req.body())
		if resp, body := env.mustSend("/adv/v1/chat/completions", "app-a", req.body(), nil); resp.StatusCode != http.StatusOK {
			t.Fatalf("advanced quota, o3-pro: %d %.300s", resp.StatusCode, body)
		}
		env.waitSettled()
		if used, want := advDay.Max-env.remaining(key, advDay), calc.priceMicros("o3-pro", P, 1000); used != want {
			t.Errorf("advanced quota: o3-pro charged %d, want %d", used, want)
		}
	}

	{ // defaultPrice prices the estimate and the charge
		key := counterKey("fallback:app-a", policyCostLimit, "cost", day)
		req := chatReq{Model: "acme-unknown", Text: "price me by default", MaxTokens: 1000}
		P := calc.estimate(llmapi.ChatCompletions, req.body())
		resp, body := env.mustSend("/fallback/v1/chat/completions", "app-a", req.body(), nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		env.waitSettled()
		def := pricing.Price{Input: 10, CachedInput: 10, CacheWrite: 10, Output: 40}
		if charged, want := day.Max-env.remaining(key, day), def.CostMicros(&llmapi.Usage{PromptTokens: P, CompletionTokens: 1000}); charged != want {
			t.Fatalf("charged %d µUSD, want %d (defaultPrice)", charged, want)
		}
	}

	{ // a pricingFile model is estimated at its price
		small := window(10_000, 24*time.Hour)
		key := counterKey("filed:app-a", policyCostLimit, "cost", small)
		file := pricing.Price{Input: 1, CachedInput: 1, CacheWrite: 1, Output: 2}
		big := chatReq{Model: "acme-70b", Text: "a large bound", MaxTokens: 10000}
		P := calc.estimate(llmapi.ChatCompletions, big.body())
		resp, body := env.mustSend("/filed/v1/chat/completions", "app-a", big.body(), nil)
		if resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("an estimate of $%s against a $0.01 budget: status %d %s", microsToUSD(file.EstimateMicros(P, 10000)), resp.StatusCode, body)
		}
		m := needsRE.FindStringSubmatch(gwerrortest.MustOpenAI(t, body).Message)
		if m == nil {
			t.Fatalf("no estimate in %s", body)
		}
		if got, want := usdToMicros(t, m[1]), file.EstimateMicros(P, 10000); got != want {
			t.Fatalf("estimated %d µUSD, want %d (the pricing file's price)", got, want)
		}
		req := chatReq{Model: "acme-70b", Text: "a small bound", MaxTokens: 100}
		P = calc.estimate(llmapi.ChatCompletions, req.body())
		if resp, body := env.mustSend("/filed/v1/chat/completions", "app-a", req.body(), nil); resp.StatusCode != http.StatusOK {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		env.waitSettled()
		if charged, want := small.Max-env.remaining(key, small), file.CostMicros(&llmapi.Usage{PromptTokens: P, CompletionTokens: 100}); charged != want {
			t.Fatalf("charged %d µUSD, want %d", charged, want)
		}
	}
}

// spentBudgetRoutes: /daily has a $0.001 daily budget per application,
// /shared one for the whole route; both estimate the prompt only, so that one
// long answer spends them.
const spentBudgetRoutes = `  - name: daily
    context: /daily
    provider: mock
    policies:
      - {name: api-key-auth, version: v1}
      - name: llm-cost-based-ratelimit
        version: v1
        params: {consumerBased: true, reserveOutput: none, budgetLimits: [{amount: 0.001, duration: 1d}]}
      - {name: llm-cost, version: v1}
  - name: shared
    context: /shared
    provider: mock
    policies:
      - {name: api-key-auth, version: v1}
      - name: llm-cost-based-ratelimit
        version: v1
        params: {reserveOutput: none, budgetLimits: [{amount: 0.001, duration: 1d}]}
      - {name: llm-cost, version: v1}
`

// spend spends the budget of route at ctxPath (one long gpt-4o answer) and
// returns the denial of the next request.
func (e *limitsEnv) spendThenDeny(ctxPath, app string) (*http.Response, []byte) {
	e.t.Helper()
	long := chatReq{Model: "gpt-4o", Text: "spend it", MaxTokens: 1000}
	if resp, body := e.mustSend(ctxPath+"/v1/chat/completions", app, long.body(), nil); resp.StatusCode != http.StatusOK {
		e.t.Fatalf("spending %s: %d %s", ctxPath, resp.StatusCode, body)
	}
	e.waitSettled()
	next := chatReq{Model: "gpt-4o", Text: "one more", MaxTokens: 10}
	return e.mustSend(ctxPath+"/v1/chat/completions", app, next.body(), nil)
}

// TestSpentBudgetDenial: a spent daily budget answers 429 budget_exceeded
// with x-should-retry: false (SDKs must not sleep until midnight), an honest
// Retry-After (the seconds to 00:00 UTC), the reset instant and the scope in
// the message, and the scope in X-Sluice-Policy.
func TestSpentBudgetDenial(t *testing.T) {
	env := startLimitsEnv(t, deploymentDoc([]string{"app-a", "app-b"}, spentBudgetRoutes), nil)
	midnight := time.Date(2030, time.June, 16, 0, 0, 0, 0, time.UTC)
	wait := int64(midnight.Sub(env.Clock.Now()) / time.Second) // 11h40m: 42000

	cases := []struct {
		ctx, scope, where string
	}{
		{"/daily", "application", "for application app-a on route daily:"},
		{"/shared", "route", "for route shared (shared by every application):"},
	}
	for _, tc := range cases {
		resp, body := env.spendThenDeny(tc.ctx, "app-a")
		if resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("%s: %d %s", tc.ctx, resp.StatusCode, body)
		}
		e := gwerrortest.MustOpenAI(t, body)
		h := resp.Header
		checks := []struct {
			what      string
			got, want string
		}{
			{"code", e.Code, gwerror.CodeBudgetExceeded},
			{"type", e.Type, gwerror.TypeRateLimit},
			{"x-should-retry", h.Get("x-should-retry"), "false"},
			{"Retry-After", h.Get("Retry-After"), strconv.FormatInt(wait, 10)},
			{"X-Sluice-Policy", h.Get(gwerror.HeaderPolicy), policyCostLimit + "; scope=" + tc.scope},
			{"X-Sluice-Error-Code", h.Get(gwerror.HeaderErrorCode), gwerror.CodeBudgetExceeded},
			{"x-ratelimit-cost-limit-dollars", h.Get("x-ratelimit-cost-limit-dollars"), "0.001"},
			{"x-ratelimit-cost-remaining-dollars", h.Get("x-ratelimit-cost-remaining-dollars"), "0"},
		}
		for _, c := range checks {
			if c.got != c.want {
				t.Errorf("%s: %s = %q, want %q", tc.ctx, c.what, c.got, c.want)
			}
		}
		for _, part := range []string{tc.where, "limit $0.001 per 1d", "resets at " + midnight.Format(time.RFC3339)} {
			if !strings.Contains(e.Message, part) {
				t.Errorf("%s: message %q does not say %q", tc.ctx, e.Message, part)
			}
		}
		t.Logf("%s: %s; x-should-retry %s, Retry-After %s", tc.ctx, e.Message, h.Get("x-should-retry"), h.Get("Retry-After"))
	}
	// The route's budget is shared: app-b is denied too, with the same scope.
	next := chatReq{Model: "gpt-4o", Text: "one more", MaxTokens: 10}
	resp, _ := env.mustSend("/shared/v1/chat/completions", "app-b", next.body(), nil)
	if resp.StatusCode != http.StatusTooManyRequests || deniedScope(resp.Header) != "route" {
		t.Fatalf("app-b on the spent shared budget: %d, X-Sluice-Policy %q", resp.StatusCode, resp.Header.Get(gwerror.HeaderPolicy))
	}
}

// rateRoutes: per-application token buckets of 1,000 tokens per minute
// (/tpm) and per hour (/tph) with prompt-only estimates, one that reserves
// the output bound (/never), and an advanced-ratelimit quota (/teams).
const rateRoutes = `  - name: tpm
    context: /tpm
    provider: mock
    policies:
      - {name: api-key-auth, version: v1}
      - name: token-based-ratelimit
        version: v1
        params: {consumerBased: true, totalTokenLimits: [{count: 1000, duration: 1m}]}
  - name: tph
    context: /tph
    provider: mock
    policies:
      - {name: api-key-auth, version: v1}
      - name: token-based-ratelimit
        version: v1
        params: {consumerBased: true, totalTokenLimits: [{count: 1000, duration: 1h}]}
  - name: never
    context: /never
    provider: mock
    policies:
      - {name: api-key-auth, version: v1}
      - name: token-based-ratelimit
        version: v1
        params: {consumerBased: true, reserveOutput: maxTokens, totalTokenLimits: [{count: 1000, duration: 1m}]}
  - name: teams
    context: /teams
    provider: mock
    policies:
      - {name: api-key-auth, version: v1}
      - name: advanced-ratelimit
        version: v1
        params:
          quotas:
            - name: per-team
              limits: [{limit: 1, duration: 1m}]
              keyExtraction: [{type: routename}, {type: header, key: X-Team, fallback: unassigned}]
`

// fullIn is the time a token bucket of max units per period needs to be
// full again from remaining (the store's arithmetic: whole µs, rounded up).
func fullIn(max, remaining int64, period time.Duration) time.Duration {
	us := (max - remaining) * period.Microseconds()
	return time.Duration((us+max-1)/max) * time.Microsecond
}

// debtBody is a request whose completion leaves a 1,000-token bucket short
// of another request of the same prompt by deficit tokens.
func debtBody(calc *calc, deficit int64) (first chatReq, next chatReq, prompt int64) {
	next = chatReq{Model: "gpt-4o-mini", Text: "the next request", MaxTokens: 1}
	P := calc.estimate(llmapi.ChatCompletions, next.body())
	first = chatReq{Model: "gpt-4o-mini", Text: "the next request", MaxTokens: 1000 - 2*P + deficit}
	return first, next, P
}

// TestRateDenialRetryAdvice: a short bucket wait says x-should-retry: true
// with its Retry-After; a wait over a minute says false; a request that can
// never fit says false and has no Retry-After. x-ratelimit-reset-tokens on
// the 429 is what it is on a 200 (the time until the bucket is full again),
// not the Retry-After.
func TestRateDenialRetryAdvice(t *testing.T) {
	env := startLimitsEnv(t, deploymentDoc([]string{"app-a"}, rateRoutes), nil)
	calc := newCalc(t)
	for _, tc := range []struct {
		ctx        string
		period     time.Duration
		deficit    int64
		retryAfter time.Duration
		retry      string
	}{
		{"/tpm", time.Minute, 25, 1500 * time.Millisecond, "true"}, // 25 tokens at 1000/min: 1.5s -> 2
		{"/tph", time.Hour, 25, 90 * time.Second, "false"},         // 25 tokens at 1000/h: 90s
	} {
		lim := store1000(tc.period)
		key := counterKey(strings.TrimPrefix(tc.ctx, "/")+":app-a", policyTokLimit, "total", lim)
		first, next, P := debtBody(calc, tc.deficit)

		resp, body := env.mustSend(tc.ctx+"/v1/chat/completions", "app-a", first.body(), nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %s", tc.ctx, resp.StatusCode, body)
		}
		// A 200: the state after this request's reservation (P tokens).
		ok200 := readRateHeaders(resp.Header)
		if ok200.RemainingTokens != 1000-P || ok200.ResetTokens != ratelimit.ResetString(fullIn(1000, 1000-P, tc.period)) {
			t.Fatalf("%s: 200 headers %+v, want remaining %d reset %s", tc.ctx, ok200, 1000-P, ratelimit.ResetString(fullIn(1000, 1000-P, tc.period)))
		}
		env.waitSettled()
		R := env.remaining(key, lim)
		if R != P-tc.deficit {
			t.Fatalf("%s: remaining %d after the first request, want %d", tc.ctx, R, P-tc.deficit)
		}

		resp, body = env.mustSend(tc.ctx+"/v1/chat/completions", "app-a", next.body(), nil)
		if resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("%s: %d %s", tc.ctx, resp.StatusCode, body)
		}
		e := gwerrortest.MustOpenAI(t, body)
		den := readRateHeaders(resp.Header)
		secs := strconv.FormatInt(int64((tc.retryAfter+time.Second-1)/time.Second), 10)
		checks := []struct {
			what      string
			got, want string
		}{
			{"code", e.Code, gwerror.CodeRateLimitExceeded},
			{"x-should-retry", resp.Header.Get("x-should-retry"), tc.retry},
			{"Retry-After", resp.Header.Get("Retry-After"), secs},
			{"X-Sluice-Policy", resp.Header.Get(gwerror.HeaderPolicy), policyTokLimit + "; scope=application"},
			{"x-ratelimit-limit-tokens", strconv.FormatInt(den.LimitTokens, 10), "1000"},
			{"x-ratelimit-remaining-tokens", strconv.FormatInt(den.RemainingTokens, 10), strconv.FormatInt(max(R, 0), 10)},
			// The same meaning as on the 200: until the bucket is full.
			{"x-ratelimit-reset-tokens", den.ResetTokens, ratelimit.ResetString(fullIn(1000, R, tc.period))},
		}
		for _, c := range checks {
			if c.got != c.want {
				t.Errorf("%s: %s = %q, want %q", tc.ctx, c.what, c.got, c.want)
			}
		}
		if want := "retry after " + secs + "s"; !strings.Contains(e.Message, want) || !strings.Contains(e.Message, "for application app-a on route "+strings.TrimPrefix(tc.ctx, "/")) {
			t.Errorf("%s: message %q: want the scope and %q", tc.ctx, e.Message, want)
		}
		t.Logf("%s: 429 Retry-After %s, x-should-retry %s, x-ratelimit-reset-tokens %s (200 said %s)", tc.ctx,
			resp.Header.Get("Retry-After"), resp.Header.Get("x-should-retry"), den.ResetTokens, ok200.ResetTokens)
	}

	{ // never fits
		req := chatReq{Model: "gpt-4o-mini", Text: "too much", MaxTokens: 5000}
		resp, body := env.mustSend("/never/v1/chat/completions", "app-a", req.body(), nil)
		if resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		e := gwerrortest.MustOpenAI(t, body)
		if resp.Header.Get("x-should-retry") != "false" || resp.Header.Get("Retry-After") != "" || !strings.Contains(e.Message, "can never be admitted") ||
			!strings.Contains(e.Message, "application app-a on route never") {
			t.Fatalf("never-fits: x-should-retry %q, Retry-After %q, message %q", resp.Header.Get("x-should-retry"), resp.Header.Get("Retry-After"), e.Message)
		}
	}

	{ // advanced quota scope
		req := chatReq{Model: "gpt-4o-mini", Text: "teams", MaxTokens: 5}
		hdr := map[string]string{"X-Team": "red"}
		if resp, body := env.mustSend("/teams/v1/chat/completions", "app-a", req.body(), hdr); resp.StatusCode != http.StatusOK {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		resp, body := env.mustSend("/teams/v1/chat/completions", "app-a", req.body(), hdr)
		if resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		e := gwerrortest.MustOpenAI(t, body)
		if got := resp.Header.Get(gwerror.HeaderPolicy); got != "advanced-ratelimit; scope=per-team" ||
			resp.Header.Get("x-should-retry") != "true" || !strings.Contains(e.Message, "quota per-team on route teams") {
			t.Fatalf("X-Sluice-Policy %q, x-should-retry %q, message %q", got, resp.Header.Get("x-should-retry"), e.Message)
		}
	}
}

func store1000(period time.Duration) counter.Limit {
	return counter.Limit{Algorithm: counter.TokenBucket, Max: 1000, Period: period}
}

// TestOpenAIGoDefaultRetries: the official openai-go client at its default
// retry settings (two retries, obeying Retry-After up to two minutes) gets
// the 429 of a 90-second wait and of a spent budget at once, after exactly
// one HTTP request, instead of sleeping and asking again.
func TestOpenAIGoDefaultRetries(t *testing.T) {
	env := startLimitsEnv(t, deploymentDoc([]string{"app-a"}, rateRoutes+spentBudgetRoutes), nil)
	calc := newCalc(t)
	first, next, _ := debtBody(calc, 25) // /tph: 25 tokens short at 1000/h: Retry-After 90
	if resp, body := env.mustSend("/tph/v1/chat/completions", "app-a", first.body(), nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	env.waitSettled()
	long := chatReq{Model: "gpt-4o", Text: "spend it", MaxTokens: 1000}
	if resp, body := env.mustSend("/daily/v1/chat/completions", "app-a", long.body(), nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	env.waitSettled()

	for _, route := range []string{"tph", "daily"} {
		// No option.WithMaxRetries: the SDK's defaults.
		client := openai.NewClient(option.WithBaseURL(env.Base+"/"+route+"/v1/"), option.WithAPIKey(appKey("app-a")),
			option.WithHTTPClient(env.HTTP))
		requests := func() float64 { return env.metric("sluice_requests_total", map[string]string{"route": route}) }
		before := requests()
		// A client that slept on Retry-After would still be sleeping when
		// this deadline ends the call.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := client.Chat.Completions.New(ctx, next.params())
		cancel()
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("%s: want the gateway's 429 at once, got %v", route, err)
		}
		if n := requests() - before; n != 1 {
			t.Fatalf("%s: the client sent %v requests, want exactly 1", route, n)
		}
		t.Logf("%s: openai-go returned %d %s after 1 request", route, apiErr.StatusCode, apiErr.Code)
	}
}

// anthropicDoc has an anthropic route (/anthropic, provider type anthropic,
// with request and token limits) and an openai route (/openai).
const anthropicDoc = `apiVersion: sluice/v1
providers:
  - {name: mock, type: openai, url: "${MOCK_URL}"}
  - {name: claude, type: anthropic, url: "${MOCK_URL}"}
applications:
  - {id: app-a, name: "Application app-a", apiKeys: ["${KEY_APP_A}"]}
routes:
  - name: anthropic-prod
    context: /anthropic
    provider: claude
    policies:
      - {name: api-key-auth, version: v1}
      - name: basic-ratelimit
        version: v1
        params: {consumerBased: true, limits: [{requests: 100, duration: 1m}]}
      - name: token-based-ratelimit
        version: v1
        params:
          consumerBased: true
          promptTokenLimits: [{count: 5000, duration: 1m}]
          completionTokenLimits: [{count: 4000, duration: 1m}]
          totalTokenLimits: [{count: 3000, duration: 1m}]
  - name: openai-prod
    context: /openai
    provider: mock
    policies:
      - {name: api-key-auth, version: v1}
`

func decodeAnthropicError(t *testing.T, what string, resp *http.Response, body []byte, status int, typ string) gwerrortest.Anthropic {
	t.Helper()
	e, err := gwerrortest.DecodeAnthropic(body)
	if err != nil {
		t.Fatalf("%s: %v (%d)", what, err, resp.StatusCode)
	}
	if resp.StatusCode != status || e.Error.Type != typ || e.Error.Message == "" {
		t.Fatalf("%s: %d %s, want %d %s", what, resp.StatusCode, body, status, typ)
	}
	if id := resp.Header.Get("X-Request-Id"); e.RequestID != id || resp.Header.Get("request-id") != id {
		t.Fatalf("%s: request_id %q, request-id %q, want X-Request-Id %q", what, e.RequestID, resp.Header.Get("request-id"), id)
	}
	return e
}

// TestAnthropicRoutesSpeakAnthropic: /v1/messages answers errors in
// Anthropic's envelope with Anthropic's error types and reports limits in
// anthropic-ratelimit-* headers (input, output, total tokens and requests,
// resets as RFC 3339 instants); /v1/messages on an openai route is a 404
// that names the provider type; /v1/chat/completions on the anthropic
// route speaks OpenAI, as its client does.
func TestAnthropicRoutesSpeakAnthropic(t *testing.T) {
	env := startLimitsEnv(t, anthropicDoc, nil)
	calc := newCalc(t)
	now := env.Clock.Now()
	key := map[string]string{"x-api-key": appKey("app-a"), "anthropic-version": "2023-06-01"}
	msg := func(maxTokens int) []byte {
		return fmt.Appendf(nil, `{"model":"claude-haiku-4-5","max_tokens":%d,"messages":[{"role":"user","content":"hello claude"}]}`, maxTokens)
	}
	P := calc.estimate(llmapi.Messages, msg(100))
	rfc := func(d time.Duration) string { return ceilToSecond(now.Add(d)).Format(time.RFC3339) }

	resp, body := env.mustSend("/anthropic/v1/messages", "", msg(100), map[string]string{"anthropic-version": "2023-06-01"})
	decodeAnthropicError(t, "no key", resp, body, http.StatusUnauthorized, "authentication_error")
	if resp.Header.Get(gwerror.HeaderErrorCode) != gwerror.CodeInvalidAPIKey {
		t.Errorf("no key: X-Sluice-Error-Code %q", resp.Header.Get(gwerror.HeaderErrorCode))
	}

	resp, body = env.mustSend("/anthropic/v1/messages", "", []byte(`{"model":`), key)
	decodeAnthropicError(t, "bad JSON", resp, body, http.StatusBadRequest, "invalid_request_error")

	resp, body = env.mustSend("/anthropic/v1/messages", "", msg(100), key)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("messages: %d %s", resp.StatusCode, body)
	}
	want := map[string]string{
		"anthropic-ratelimit-requests-limit":          "100",
		"anthropic-ratelimit-requests-remaining":      "99",
		"anthropic-ratelimit-requests-reset":          rfc(fullIn(100, 99, time.Minute)),
		"anthropic-ratelimit-input-tokens-limit":      "5000",
		"anthropic-ratelimit-input-tokens-remaining":  strconv.FormatInt(5000-P, 10),
		"anthropic-ratelimit-input-tokens-reset":      rfc(fullIn(5000, 5000-P, time.Minute)),
		"anthropic-ratelimit-output-tokens-limit":     "4000",
		"anthropic-ratelimit-output-tokens-remaining": "4000",
		"anthropic-ratelimit-output-tokens-reset":     rfc(0),
		"anthropic-ratelimit-tokens-limit":            "3000",
		"anthropic-ratelimit-tokens-remaining":        strconv.FormatInt(3000-P, 10),
		"anthropic-ratelimit-tokens-reset":            rfc(fullIn(3000, 3000-P, time.Minute)),
		"x-ratelimit-limit-tokens":                    "",
		"x-ratelimit-limit-requests":                  "",
	}
	for k, v := range want {
		if got := resp.Header.Get(k); got != v {
			t.Errorf("200 on /v1/messages: %s = %q, want %q", k, got, v)
		}
	}

	// Spend the total tokens past the limit: the next request is a 429 in
	// Anthropic's dialect, with retry-after and the counter that denied.
	if resp, body := env.mustSend("/anthropic/v1/messages", "", msg(2900), key); resp.StatusCode != http.StatusOK {
		t.Fatalf("messages: %d %s", resp.StatusCode, body)
	}
	env.waitSettled()
	resp, body = env.mustSend("/anthropic/v1/messages", "", msg(100), key)
	e := decodeAnthropicError(t, "spent", resp, body, http.StatusTooManyRequests, "rate_limit_error")
	if resp.Header.Get("retry-after") == "" || resp.Header.Get("x-should-retry") != "true" ||
		resp.Header.Get("anthropic-ratelimit-tokens-limit") != "3000" || resp.Header.Get("anthropic-ratelimit-tokens-remaining") != "0" ||
		resp.Header.Get("anthropic-ratelimit-tokens-reset") == "" || resp.Header.Get("x-ratelimit-limit-tokens") != "" {
		t.Errorf("429 headers: %v", resp.Header)
	}
	if !strings.Contains(e.Error.Message, "application app-a on route anthropic-prod") {
		t.Errorf("429 message %q does not name the scope", e.Error.Message)
	}

	resp, body = env.mustSend("/anthropic/v1/nope", "", msg(1), key)
	decodeAnthropicError(t, "unknown path", resp, body, http.StatusNotFound, "not_found_error")

	resp, body = env.mustSend("/openai/v1/messages", "app-a", msg(1), nil)
	e = decodeAnthropicError(t, "/v1/messages on an openai route", resp, body, http.StatusNotFound, "not_found_error")
	if !strings.Contains(e.Error.Message, "type openai") || !strings.Contains(e.Error.Message, "openai-prod") {
		t.Errorf("404 message %q does not say the route's provider is openai", e.Error.Message)
	}

	// The OpenAI-shaped endpoint of the anthropic route speaks OpenAI.
	chat := chatReq{Model: "claude-haiku-4-5", Text: "hello", MaxTokens: 5}
	resp, body = env.mustSend("/anthropic/v1/chat/completions", "", chat.body(), nil)
	if oe := gwerrortest.MustOpenAI(t, body); resp.StatusCode != http.StatusUnauthorized || oe.Code != gwerror.CodeInvalidAPIKey || oe.Type != gwerror.TypeAuthentication {
		t.Errorf("chat/completions without key on the anthropic route: %d %s", resp.StatusCode, body)
	}
	resp, body = env.mustSend("/anthropic/v1/chat/completions", "app-a", chat.body(), nil)
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("chat/completions on the spent anthropic route: %d %s", resp.StatusCode, body)
	}
	if oe := gwerrortest.MustOpenAI(t, body); oe.Type != gwerror.TypeRateLimit || resp.Header.Get("x-ratelimit-limit-tokens") != "3000" ||
		resp.Header.Get("anthropic-ratelimit-tokens-limit") != "" {
		t.Errorf("chat/completions 429 on the anthropic route: %s %v", body, resp.Header)
	}
}

func ceilToSecond(t time.Time) time.Time {
	if tr := t.Truncate(time.Second); !tr.Equal(t) {
		return tr.Add(time.Second)
	}
	return t
}

func microsToUSD(m int64) string { return strconv.FormatFloat(float64(m)/1e6, 'f', -1, 64) }

func usdToMicros(t *testing.T, s string) int64 {
	t.Helper()
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatalf("not a dollar amount: %q", s)
	}
	return int64(f*1e6 + 0.5)
}
