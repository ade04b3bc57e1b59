package costratelimit_test

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"sluice/counter"
	"sluice/gwerror"
	"sluice/llmapi"
	"sluice/policies"
	"sluice/policies/costratelimit"
	"sluice/policies/llmcost"
	"sluice/policies/policytest"
	"sluice/policies/ratelimit/ratelimittest"
	"sluice/pricing"
	"sluice/sharedctx"
)

const route = "r"

func budget(amount float64, d string) []any {
	return []any{map[string]any{"amount": amount, "duration": d}}
}

func dayWindow(max int64) counter.Limit {
	return counter.Limit{Algorithm: counter.FixedWindow, Max: max, Period: 24 * time.Hour}
}

func newHarness(t *testing.T) *ratelimittest.Harness {
	return ratelimittest.New(t, costratelimit.Definition(), llmcost.Definition())
}

func TestSettleWithRealCost(t *testing.T) {
	req := ratelimittest.Req{Model: "gpt-4o", MaxTokens: 1000}
	usage := ratelimittest.Usage(1200, 300, 1)
	partial := func(completion int64) *llmapi.Usage {
		return &llmapi.Usage{PromptTokens: 1200, CompletionTokens: completion, TotalTokens: 1200 + completion, Authoritative: true, ExpectedChoices: 2, FinishedChoices: 1}
	}
	cases := []struct {
		name string
		o    policytest.End
		// final is the expected charge given the estimate and the price of
		// the outcome's usage.
		final func(est, price int64) int64
	}{
		{"completed: real cost", ratelimittest.Completed(usage), func(_, price int64) int64 { return price }},
		{"completed without usage: estimate", ratelimittest.Completed(nil), func(est, _ int64) int64 { return est }},
		{"partial stream below the estimate: estimate", ratelimittest.Completed(partial(300)), func(est, _ int64) int64 { return est }},
		{"partial stream above the estimate: its cost", ratelimittest.Completed(partial(3000)), func(_, price int64) int64 { return price }},
		{"upstream failure: estimate", policytest.End{Outcome: policies.Outcome{Kind: policies.UpstreamFailed, WentUpstream: true}}, func(est, _ int64) int64 { return est }},
		{"cancelled: estimate", policytest.End{Outcome: policies.Outcome{Kind: policies.Cancelled, WentUpstream: true}}, func(est, _ int64) int64 { return est }},
		{"cancelled after the usage report: real cost", policytest.End{Outcome: policies.Outcome{Kind: policies.Cancelled, WentUpstream: true}, Usage: usage}, func(_, price int64) int64 { return price }},
		{"cancelled with counted output above the estimate: its price", policytest.End{Outcome: policies.Outcome{Kind: policies.Cancelled, WentUpstream: true}, Usage: ratelimittest.Counted(8, 2500)}, func(_, price int64) int64 { return price }},
		{"cancelled with counted output below the estimate: estimate", policytest.End{Outcome: policies.Outcome{Kind: policies.Cancelled, WentUpstream: true}, Usage: ratelimittest.Counted(8, 20)}, func(est, _ int64) int64 { return est }},
		{"stream without usage: the price of the counted output", ratelimittest.Completed(ratelimittest.Counted(8, 4000)), func(_, price int64) int64 { return price }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			ch := h.Chain(route,
				ratelimittest.Entry(costratelimit.Name, map[string]any{"budgetLimits": budget(10, "1d"), "consumerBased": true}),
				ratelimittest.Entry(llmcost.Name, nil))
			call := h.Call(route, ratelimittest.Req{Model: req.Model, MaxTokens: req.MaxTokens, App: "a"})
			prompt := h.Svc.Tokens.EstimatePrompt(call.Request.LLM)
			est, ok := h.Svc.Pricing.EstimateMicros("gpt-4o", prompt, 1000)
			if !ok {
				t.Fatal("gpt-4o not in the catalog")
			}
			var price int64
			if tc.o.Usage != nil {
				price, _ = h.Svc.Pricing.CostMicros("gpt-4o", tc.o.Usage)
			}
			if gerr, _ := h.Do(ch, call, tc.o); gerr != nil {
				t.Fatal(gerr)
			}
			got := 10_000_000 - h.Remaining("{r:a}:llm-cost-based-ratelimit:cost:window-1d", dayWindow(10_000_000))
			if want := tc.final(est, price); got != want {
				t.Fatalf("charged %d µUSD, want %d (estimate %d, price of the usage %d)", got, want, est, price)
			}
		})
	}
}

// TestSettlesExactMicros: the budget is charged exactly the micro-USD
// llm-cost priced, also where a round trip through float64 USD is off by one
// (32.000002 USD: 32000002 µUSD came back as 32000003).
func TestSettlesExactMicros(t *testing.T) {
	for _, prompt := range []int64{1, 7_500, 32_000_002, 987_654_321} {
		h := newHarness(t)
		ch := h.Chain(route,
			ratelimittest.Entry(costratelimit.Name, map[string]any{"budgetLimits": budget(10_000, "1d")}),
			// 1 USD per million tokens: 1 µUSD per token.
			ratelimittest.Entry(llmcost.Name, map[string]any{"defaultPrice": map[string]any{"input": 1, "output": 1}}))
		call := h.Call(route, ratelimittest.Req{Model: "acme-unlisted"})
		if gerr, _ := h.Do(ch, call, ratelimittest.Completed(ratelimittest.Usage(prompt, 0, 1))); gerr != nil {
			t.Fatal(gerr)
		}
		cost, _ := call.Shared.CostMicroUSD()
		got := 10_000_000_000 - h.Remaining("{r}:llm-cost-based-ratelimit:cost:window-1d", dayWindow(10_000_000_000))
		if cost != prompt || got != prompt {
			t.Errorf("%d tokens at 1 µUSD: x-llm-cost %d µUSD, budget charged %d; want %d", prompt, cost, got, prompt)
		}
	}
}

func TestBudgetExhausted(t *testing.T) {
	h := newHarness(t)
	ch := h.Chain(route,
		ratelimittest.Entry(costratelimit.Name, map[string]any{"budgetLimits": budget(0.01, "30d")}),
		ratelimittest.Entry(llmcost.Name, nil))
	// A big response spends the month's budget (debt); the next request is denied.
	if gerr, _ := h.Do(ch, h.Call(route, ratelimittest.Req{Model: "gpt-4o", MaxTokens: 10}), ratelimittest.Completed(ratelimittest.Usage(1000, 100000, 1))); gerr != nil {
		t.Fatal(gerr)
	}
	// Even a request estimated at 0 (no prompt, no output bound) is denied:
	// at least 1 µUSD is reserved.
	gerr, _ := h.Do(ch, h.Call(route, ratelimittest.Req{Model: "gpt-4o", Content: " "}), ratelimittest.Completed(nil))
	if gerr == nil || gerr.Code != gwerror.CodeBudgetExceeded || gerr.Policy != costratelimit.Name {
		t.Fatalf("want budget_exceeded, got %v", gerr)
	}
	// The calendar month ends on April 1st 00:00 UTC.
	want := time.Date(2026, time.April, 1, 0, 0, 0, 0, time.UTC).Sub(ratelimittest.Start)
	if gerr.RetryAfter != want {
		t.Fatalf("Retry-After %v, want %v", gerr.RetryAfter, want)
	}
}

func TestChainOrderAndSeparateSlots(t *testing.T) {
	h := newHarness(t)
	_, err := h.BuildChain(route,
		ratelimittest.Entry(llmcost.Name, nil),
		ratelimittest.Entry(costratelimit.Name, map[string]any{"budgetLimits": budget(1, "1d")}))
	if err == nil || !strings.Contains(err.Error(), "list llm-cost after llm-cost-based-ratelimit") {
		t.Fatalf("want an ordering hint, got %v", err)
	}
	// Backend and consumer instances: each charged once, in its own slot.
	ch := h.Chain(route,
		ratelimittest.Entry(costratelimit.Name, map[string]any{"budgetLimits": budget(10, "1d")}),
		ratelimittest.Entry(costratelimit.Name, map[string]any{"budgetLimits": budget(1, "1d"), "consumerBased": true}),
		ratelimittest.Entry(llmcost.Name, nil))
	usage := ratelimittest.Usage(1000, 1000, 1)
	real, _ := h.Svc.Pricing.CostMicros("gpt-4o", usage)
	if gerr, _ := h.Do(ch, h.Call(route, ratelimittest.Req{Model: "gpt-4o", App: "a"}), ratelimittest.Completed(usage)); gerr != nil {
		t.Fatal(gerr)
	}
	if got := 10_000_000 - h.Remaining("{r}:llm-cost-based-ratelimit:cost:window-1d", dayWindow(10_000_000)); got != real {
		t.Errorf("backend charged %d, want %d", got, real)
	}
	if got := 1_000_000 - h.Remaining("{r:a}:llm-cost-based-ratelimit:cost:window-1d", dayWindow(1_000_000)); got != real {
		t.Errorf("consumer charged %d, want %d", got, real)
	}
}

func TestOverridesNeedConsumerBased(t *testing.T) {
	h := newHarness(t)
	_, err := h.BuildChain(route,
		ratelimittest.Entry(costratelimit.Name, map[string]any{"budgetLimits": budget(1, "1d"),
			"overrides": []any{map[string]any{"applications": []any{"x"}, "budgetLimits": budget(5, "1d")}}}),
		ratelimittest.Entry(llmcost.Name, nil))
	if err == nil {
		t.Fatal("accepted")
	}
	ch := h.Chain(route,
		ratelimittest.Entry(costratelimit.Name, map[string]any{"budgetLimits": budget(0.000002, "1d"), "consumerBased": true, "reserveOutput": "none",
			"overrides": []any{map[string]any{"applications": []any{"vip"}, "budgetLimits": budget(5, "1d")}}}),
		ratelimittest.Entry(llmcost.Name, nil))
	if gerr, _ := h.Do(ch, h.Call(route, ratelimittest.Req{App: "vip", Content: strings.Repeat("word ", 50)}), ratelimittest.Completed(nil)); gerr != nil {
		t.Fatalf("vip: %v", gerr)
	}
	if gerr, _ := h.Do(ch, h.Call(route, ratelimittest.Req{App: "plain", Content: strings.Repeat("word ", 50)}), ratelimittest.Completed(nil)); gerr == nil {
		t.Fatal("plain app admitted beyond a $0.000002 budget")
	}
}

// TestUnpricedModels: a model the linked llm-cost cannot price is refused
// with 400 model_not_priced before anything is reserved; llm-cost's
// defaultPrice and pricingFile price it, for the estimate as for the charge.
func TestUnpricedModels(t *testing.T) {
	file := filepath.Join(t.TempDir(), "prices.yaml")
	if err := os.WriteFile(file, []byte("models:\n  acme-1: {input: 2, output: 8}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	usage := ratelimittest.Usage(1000, 500, 1)
	cases := []struct {
		name   string
		llm    map[string]any
		model  string
		priced bool
		input  float64 // USD per million, when priced
		output float64
	}{
		{"no price", nil, "acme-1", false, 0, 0},
		{"gateway catalog model", nil, "gpt-4o", true, 2.5, 10},
		{"defaultPrice", map[string]any{"defaultPrice": map[string]any{"input": 3, "output": 12}}, "acme-1", true, 3, 12},
		{"defaultPrice does not replace the catalog", map[string]any{"defaultPrice": map[string]any{"input": 3, "output": 12}}, "gpt-4o", true, 2.5, 10},
		{"pricingFile", map[string]any{"pricingFile": file}, "acme-1", true, 2, 8},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			ch := h.Chain(route,
				ratelimittest.Entry(costratelimit.Name, map[string]any{"budgetLimits": budget(10, "1d")}),
				ratelimittest.Entry(llmcost.Name, tc.llm))
			call := h.Call(route, ratelimittest.Req{Model: tc.model, MaxTokens: 500})
			prompt := h.Svc.Tokens.EstimatePrompt(call.Request.LLM)
			gerr, _ := h.Do(ch, call, ratelimittest.Completed(usage))
			used := 10_000_000 - h.Remaining("{r}:llm-cost-based-ratelimit:cost:window-1d", dayWindow(10_000_000))
			if !tc.priced {
				if gerr == nil || gerr.Status != 400 || gerr.Code != gwerror.CodeModelNotPriced || gerr.Param != "model" ||
					gerr.Type != gwerror.TypeInvalidRequest || !strings.Contains(gerr.Message, `"acme-1"`) ||
					!strings.Contains(gerr.Message, "defaultPrice") || !strings.Contains(gerr.Message, "pricing file") {
					t.Fatalf("want 400 model_not_priced naming the model and the fixes, got %v", gerr)
				}
				if used != 0 || h.Gauge("sluice_ratelimit_open_reservations", nil) != 0 {
					t.Fatalf("a refused request charged %d µUSD", used)
				}
				return
			}
			if gerr != nil {
				t.Fatal(gerr)
			}
			price := pricing.Price{Input: tc.input, CachedInput: tc.input, CacheWrite: tc.input, Output: tc.output}
			if want := price.CostMicros(usage); used != want {
				t.Fatalf("charged %d µUSD, want %d", used, want)
			}
			// The estimate is priced the same way: it is what a request
			// reserves while in flight.
			call2 := h.Call(route, ratelimittest.Req{Model: tc.model, MaxTokens: 500})
			run := ch.Start(call2)
			if gerr := run.Request(); gerr != nil {
				t.Fatal(gerr)
			}
			held := 10_000_000 - used - h.Remaining("{r}:llm-cost-based-ratelimit:cost:window-1d", dayWindow(10_000_000))
			if want := price.EstimateMicros(prompt, 500); held != want {
				t.Fatalf("reserved %d µUSD, want %d", held, want)
			}
			run.Finish(policies.Outcome{Kind: policies.Cancelled})
		})
	}
}

// TestLinksToFirstLLMCostAfterIt: the cost limit estimates with the llm-cost
// whose x-llm-cost it settles with (the first after it), and a chain with
// no llm-cost after it is refused.
func TestLinksToFirstLLMCostAfterIt(t *testing.T) {
	h := newHarness(t)
	ch := h.Chain(route,
		ratelimittest.Entry(costratelimit.Name, map[string]any{"budgetLimits": budget(10, "1d"), "reserveOutput": "none"}),
		ratelimittest.Entry(llmcost.Name, map[string]any{"defaultPrice": map[string]any{"input": 1000, "output": 0}}),
		ratelimittest.Entry(llmcost.Name, nil))
	call := h.Call(route, ratelimittest.Req{Model: "acme-2"})
	prompt := h.Svc.Tokens.EstimatePrompt(call.Request.LLM)
	run := ch.Start(call)
	if gerr := run.Request(); gerr != nil {
		t.Fatalf("the first llm-cost after the limit has a defaultPrice: %v", gerr)
	}
	held := 10_000_000 - h.Remaining("{r}:llm-cost-based-ratelimit:cost:window-1d", dayWindow(10_000_000))
	if want := (pricing.Price{Input: 1000}).EstimateMicros(prompt, 0); held != want {
		t.Fatalf("reserved %d µUSD, want %d", held, want)
	}
	run.Finish(policies.Outcome{Kind: policies.Cancelled})

	reg := policies.NewRegistry(costratelimit.Definition(), xcostWriter())
	_, err := reg.BuildChain(policies.RouteInfo{RouteName: route}, []policies.EntrySpec{
		ratelimittest.Entry(costratelimit.Name, map[string]any{"budgetLimits": budget(10, "1d")}),
		ratelimittest.Entry("x-cost-writer", nil)}, h.Svc, nil)
	var ee *policies.EntryError
	if !errors.As(err, &ee) || ee.Index != 0 || !strings.Contains(err.Error(), "no llm-cost after it") {
		t.Fatalf("want an error at entry 0 saying no llm-cost follows, got %v", err)
	}
}

// xcostWriter writes x-llm-cost and x-llm-cost-status without being
// llm-cost: it passes the metadata check but has no pricer.
func xcostWriter() policies.Definition {
	d := policies.Define("x-cost-writer", "v1", "writes cost metadata", func(*struct{}, policies.RouteInfo, *policies.Services) (policies.Policy, error) {
		return nopPolicy{}, nil
	})
	d.Writes = []policies.MetaKey{
		{Key: sharedctx.KeyLLMCost, Phase: policies.PhaseFinal},
		{Key: sharedctx.KeyLLMCostStatus, Phase: policies.PhaseFinal},
	}
	return d
}

type nopPolicy struct{}

func (nopPolicy) OnRequest(*policies.Call) *gwerror.Error { return nil }

// refused are params the policy refuses, with its errors in its order.
var refused = []ratelimittest.Refused{
	{Name: "window of a fraction of a second", Params: map[string]any{"budgetLimits": budget(1, "1500ms")},
		Want: []string{"budgetLimits.0.duration: duration 1.5s: a window must be a whole number of seconds"}},
	{Name: "duration twice", Params: map[string]any{"budgetLimits": append(budget(1, "1d"), budget(2, "1d")...)},
		Want: []string{"budgetLimits.1.duration: duration 24h0m0s is listed twice"}},
	{Name: "overrides of a route budget", Params: map[string]any{"budgetLimits": budget(1, "1d"),
		"overrides": []any{map[string]any{"applications": []any{"x"}, "budgetLimits": budget(5, "1d")}}},
		Want: []string{"overrides: overrides are per application: they need consumerBased: true"}},
	{Name: "overrides", Params: map[string]any{"budgetLimits": budget(1, "1d"), "algorithm": "token-bucket", "consumerBased": true, "overrides": []any{
		map[string]any{"applications": []any{"x", "x"}, "budgetLimits": append(budget(5, "1h"), budget(6, "1h")...)},
		map[string]any{"applications": []any{"x"}, "budgetLimits": budget(5, "1ms")},
	}},
		Want: []string{
			"overrides.0.budgetLimits.1.duration: duration 1h0m0s is listed twice",
			`overrides.0.applications.1: application "x" is empty or listed in two overrides`,
			`overrides.1.applications.0: application "x" is empty or listed in two overrides`,
		}},
	{Name: "amount below a micro-USD", Params: map[string]any{"budgetLimits": budget(0.0000001, "1d")}, Schema: true,
		Want: []string{"budgetLimits.0.amount: minimum: got 1×10⁻⁰⁷, want 1×10⁻⁰⁶"}},
}

func TestValidation(t *testing.T) {
	newHarness(t).CheckValidation(costratelimit.Definition(), route, refused)
}

// TestBuildChecksParams: build computes the budgets with the same function
// as Validate, so params that skipped Validate are refused with its errors,
// amounts that JSON cannot carry (NaN, infinities) and that the schema
// refuses included.
func TestBuildChecksParams(t *testing.T) {
	h := newHarness(t)
	h.CheckBuild(costratelimit.Definition(), route, refused, map[string]any{"budgetLimits": budget(1, "1d")})
	day := policies.Duration(24 * time.Hour)
	for _, tc := range []struct {
		amount float64
		want   string
	}{
		{math.NaN(), "budgetLimits.0.amount: amount must be a finite number of USD"},
		{math.Inf(1), "budgetLimits.0.amount: amount must be a finite number of USD"},
		{0.0000004, "budgetLimits.0.amount: amount must be at least 0.000001 USD"},
	} {
		p := &costratelimit.Params{BudgetLimits: []costratelimit.BudgetLimit{{Amount: tc.amount, Duration: day}}}
		if got := h.BuildErrors(costratelimit.Definition(), route, p); !slices.Equal(got, []string{tc.want}) {
			t.Errorf("amount %v: build errors %q, want %q", tc.amount, got, tc.want)
		}
		if err := p.Validate(); err == nil || err.Error() != tc.want {
			t.Errorf("amount %v: Validate %v, want %q", tc.amount, err, tc.want)
		}
	}
}

// TestApplicationRefs: every overridden application is reported with its
// param path, for the deployment check of undefined application ids.
func TestApplicationRefs(t *testing.T) {
	p := &costratelimit.Params{Overrides: []costratelimit.Override{
		{Applications: []string{"app-a"}},
		{Applications: []string{"app-b", "app-c"}},
	}}
	var got []string
	for _, r := range p.ApplicationRefs() {
		got = append(got, strings.Join(r.Path, ".")+"="+r.ID)
	}
	want := "overrides.0.applications.0=app-a overrides.1.applications.0=app-b overrides.1.applications.1=app-c"
	if strings.Join(got, " ") != want {
		t.Fatalf("refs = %v, want %s", got, want)
	}
}
