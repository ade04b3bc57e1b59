package builtin_test

import (
	"net/http"
	"testing"
	"time"

	"sluice/counter"
	"sluice/policies"
	"sluice/policies/builtin"
	"sluice/policies/ratelimit/ratelimittest"
)

// TestReadersAgreeOnTheFacts runs every built-in that reads the served model,
// the usage or the cost in one chain, with a body that names another model
// and reports other usage than the request's facts. Each reader must see the
// facts (the served model and the published usage, and the cost llm-cost
// priced from them): a reader of the body, of the response or of a second
// copy of the usage would charge another counter or another amount.
func TestReadersAgreeOnTheFacts(t *testing.T) {
	const (
		route  = "r"
		served = "gpt-4o"      // the request's served model
		body   = "gpt-4o-mini" // what the parsed body says
	)
	h := ratelimittest.New(t, builtin.Definitions()...)
	ch := h.Chain(route,
		ratelimittest.Entry("model-access", map[string]any{"allow": []any{served}}),
		ratelimittest.Entry("token-based-ratelimit", map[string]any{
			"totalTokenLimits": []any{map[string]any{"count": 1_000_000, "duration": "1h"}},
			"modelRules": []any{
				map[string]any{"match": served, "totalTokenLimits": []any{map[string]any{"count": 100_000, "duration": "1h"}}},
				map[string]any{"match": body, "totalTokenLimits": []any{map[string]any{"count": 200_000, "duration": "1h"}}},
			}}),
		ratelimittest.Entry("llm-cost-based-ratelimit", map[string]any{
			"budgetLimits": []any{map[string]any{"amount": 100, "duration": "1d"}}}),
		ratelimittest.Entry("advanced-ratelimit", map[string]any{"quotas": []any{
			map[string]any{"name": "tok", "limits": []any{map[string]any{"limit": 1_000_000, "duration": "1h"}},
				"costExtraction": map[string]any{"source": "response"}},
			map[string]any{"name": "usd", "limits": []any{map[string]any{"limit": 100_000_000, "duration": "1d"}},
				"costExtraction": map[string]any{"source": "metadata", "key": "x-llm-cost", "multiplier": 1e6}},
		}}),
		ratelimittest.Entry("llm-cost", nil))

	call := h.Call(route, ratelimittest.Req{Model: body, MaxTokens: 100})
	call.Shared.SetServedModel(served)
	usage := ratelimittest.Usage(1200, 300, 1)
	price, ok := h.Svc.Pricing.CostMicros(served, usage)
	if !ok || price <= 1 {
		t.Fatalf("price of %s: %d, %v", served, price, ok)
	}

	run := ch.Start(call)
	if gerr := run.Request(); gerr != nil {
		t.Fatalf("request phase (model-access allows %s only): %v", served, gerr)
	}
	run.MarkUpstream()
	call.Shared.SetUsage(usage)
	resp := &policies.Response{Status: 200, Header: http.Header{},
		Body: []byte(`{"model":"` + body + `","usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)}
	if gerr := run.Response(resp); gerr != nil {
		t.Fatal(gerr)
	}
	run.Finish(policies.Outcome{Kind: policies.Completed, Status: 200})

	if got, ok := call.Shared.CostMicroUSD(); !ok || got != price {
		t.Errorf("x-llm-cost %d µUSD (set %v), want %d: the price of the usage for the served model", got, ok, price)
	}
	bucket := func(max int64) counter.Limit {
		return counter.Limit{Algorithm: counter.TokenBucket, Max: max, Period: time.Hour}
	}
	day := func(max int64) counter.Limit {
		return counter.Limit{Algorithm: counter.FixedWindow, Max: max, Period: 24 * time.Hour}
	}
	for _, c := range []struct {
		what  string
		key   string
		l     counter.Limit
		spent int64
	}{
		{"token limit", "{r}:token-based-ratelimit:total:bucket-1h", bucket(1_000_000), usage.TotalTokens},
		{"token rule of the served model", "{r}:token-based-ratelimit:total:bucket-1h:model:" + served, bucket(100_000), usage.TotalTokens},
		{"token rule of the body's model", "{r}:token-based-ratelimit:total:bucket-1h:model:" + body, bucket(200_000), 0},
		{"budget", "{r}:llm-cost-based-ratelimit:cost:window-1d", day(100_000_000), price},
		{"advanced response quota", "{r}:advanced-ratelimit:tok:bucket-1h", bucket(1_000_000), usage.TotalTokens},
		{"advanced x-llm-cost quota", "{r}:advanced-ratelimit:usd:window-1d", day(100_000_000), price},
	} {
		if got := c.l.Max - h.Remaining(c.key, c.l); got != c.spent {
			t.Errorf("%s (%s) spent %d, want %d", c.what, c.key, got, c.spent)
		}
	}
}
