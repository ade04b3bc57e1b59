package llmcost_test

import (
	"errors"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sluice/gwerror"
	"sluice/llmapi"
	"sluice/policies"
	"sluice/policies/llmcost"
	"sluice/policies/policytest"
	"sluice/pricing"
	"sluice/sharedctx"
)

// probe stands in for a cost limit policy listed before llm-cost: it requires
// x-llm-cost-status in its final phase and records the cost (micro-USD; -1
// when none was published) it saw in its response and final phases.
type probe struct {
	rejectWith *gwerror.Error
	seenResp   int64
	seenFinal  int64
	status     string
	finals     int
}

// seen is the published cost, -1 when none is.
func seen(c *policies.Call) int64 {
	if m, ok := c.Shared.CostMicroUSD(); ok {
		return m
	}
	return -1
}

type probeParams struct{}

func (p *probe) OnRequest(*policies.Call) *gwerror.Error { return p.rejectWith }
func (p *probe) OnResponse(c *policies.Call, _ *policies.Response) *gwerror.Error {
	p.seenResp = seen(c)
	return nil
}
func (p *probe) OnFinal(c *policies.Call, _ *policies.Outcome) {
	p.finals++
	p.seenFinal = seen(c)
	p.status = c.Shared.CostStatus()
}

func probeDef(p *probe) policies.Definition {
	d := policies.Define("probe", "v1", "test probe", func(*probeParams, policies.RouteInfo, *policies.Services) (policies.Policy, error) {
		return p, nil
	})
	d.Reads = []policies.MetaKey{{Key: sharedctx.KeyLLMCostStatus, Phase: policies.PhaseFinal}}
	return d
}

func catalog(t testing.TB) *pricing.Catalog {
	t.Helper()
	c, err := pricing.New("")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// build returns a chain [probe, llm-cost] (or [llm-cost, probe] when after).
func build(t testing.TB, pr *probe, params map[string]any, svc *policies.Services) (*policies.Chain, error) {
	t.Helper()
	return policytest.BuildChain(policytest.Route, []policies.Definition{llmcost.Definition(), probeDef(pr)}, svc,
		policies.EntrySpec{Name: "probe"}, policies.EntrySpec{Name: llmcost.Name, Version: llmcost.Version, Params: params})
}

func newCall(model string) *policies.Call {
	return policytest.NewCall(policytest.Req{Model: model})
}

func usage(prompt, cached, write, completion int64) *llmapi.Usage {
	return &llmapi.Usage{PromptTokens: prompt, CachedPromptTokens: cached, CacheWriteTokens: write,
		CompletionTokens: completion, TotalTokens: prompt + completion, Authoritative: true,
		ExpectedChoices: 1, FinishedChoices: 1}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-12 }

// micros is usd in micro-USD (the table's costs are whole micro-USD).
func micros(usd float64) int64 { return int64(math.Round(usd * 1e6)) }

func TestLLMCost(t *testing.T) {
	tests := []struct {
		name       string
		params     map[string]any
		model      string
		llmModel   string // the parsed body's model (the gateway serves it), when model is empty
		u          *llmapi.Usage
		stream     bool
		wantCost   float64
		wantStatus string
		wantHeader string
	}{
		{name: "body gpt-4o", model: "gpt-4o-2024-08-06", u: usage(1000, 0, 0, 500),
			wantCost: 0.0075, wantStatus: llmcost.StatusCalculated, wantHeader: "0.0075"},
		{name: "body cached input", model: "gpt-4o", u: usage(1000, 400, 0, 500),
			wantCost: 0.007, wantStatus: llmcost.StatusCalculated, wantHeader: "0.007"},
		{name: "body anthropic cache read and write", model: "claude-sonnet-4-5-20250929", u: usage(6000, 2000, 3000, 100),
			wantCost: 0.01635, wantStatus: llmcost.StatusCalculated, wantHeader: "0.01635"},
		{name: "model from request body", llmModel: "gpt-4o-mini", u: usage(1000, 0, 0, 0),
			wantCost: 0.00015, wantStatus: llmcost.StatusCalculated, wantHeader: "0.00015"},
		{name: "stream priced in final", model: "gpt-4o", u: usage(1000, 0, 0, 500), stream: true,
			wantCost: 0.0075, wantStatus: llmcost.StatusCalculated},
		{name: "unknown model", model: "acme-42", u: usage(1000, 0, 0, 500),
			wantCost: 0, wantStatus: llmcost.StatusUnpriced},
		{name: "unknown model stream", model: "acme-42", u: usage(1000, 0, 0, 500), stream: true,
			wantCost: 0, wantStatus: llmcost.StatusUnpriced},
		{name: "unknown model with default price", model: "acme-42", u: usage(1000, 200, 0, 500),
			params:   map[string]any{"defaultPrice": map[string]any{"input": 1.0, "output": 4}},
			wantCost: 0.001 + 0.002, wantStatus: llmcost.StatusCalculated, wantHeader: "0.003"},
		{name: "default price does not override catalog", model: "gpt-4o", u: usage(1000, 0, 0, 500),
			params:   map[string]any{"defaultPrice": map[string]any{"input": 100, "output": 100}},
			wantCost: 0.0075, wantStatus: llmcost.StatusCalculated, wantHeader: "0.0075"},
		{name: "no usage", model: "gpt-4o", u: nil, wantCost: 0, wantStatus: llmcost.StatusNoUsage},
		{name: "no usage stream", model: "gpt-4o", u: nil, stream: true, wantCost: 0, wantStatus: llmcost.StatusNoUsage},
		{name: "non-authoritative usage is not priced", model: "gpt-4o",
			u:        &llmapi.Usage{PromptTokens: 1000, CompletionTokens: 10, Authoritative: false},
			wantCost: 0, wantStatus: llmcost.StatusNoUsage},
		{name: "counted stream usage is priced as estimated", model: "gpt-4o", stream: true,
			u:        &llmapi.Usage{PromptTokens: 1000, CompletionTokens: 500, TotalTokens: 1500, Counted: true, ExpectedChoices: 1},
			wantCost: 0.0075, wantStatus: llmcost.StatusEstimated},
		{name: "counted usage of an unknown model is unpriced", model: "acme-42", stream: true,
			u:        &llmapi.Usage{PromptTokens: 1000, CompletionTokens: 500, TotalTokens: 1500, Counted: true, ExpectedChoices: 1},
			wantCost: 0, wantStatus: llmcost.StatusUnpriced},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pr := &probe{seenResp: -1}
			ch, err := build(t, pr, tc.params, &policies.Services{Pricing: catalog(t)})
			if err != nil {
				t.Fatalf("BuildChain: %v", err)
			}
			call := newCall(tc.model)
			if tc.llmModel != "" {
				call = policytest.NewCall(policytest.Req{LLM: &llmapi.Request{Model: tc.llmModel}})
			}
			run := ch.Start(call)
			if gerr := run.Request(); gerr != nil {
				t.Fatalf("Request: %v", gerr)
			}
			run.MarkUpstream()
			resp := &policies.Response{Status: 200, Header: http.Header{}, Stream: tc.stream}
			if !tc.stream {
				// Bodies: the gateway publishes usage before the response phase.
				resp.Body = []byte(`{}`)
				call.Shared.SetUsage(tc.u)
			}
			if gerr := run.Response(resp); gerr != nil {
				t.Fatalf("Response: %v", gerr)
			}
			if tc.stream {
				if _, ok := call.Shared.CostMicroUSD(); ok {
					t.Fatal("stream priced before its usage was known")
				}
				if pr.seenResp != -1 {
					t.Fatalf("probe saw a stream cost in the response phase: %v", pr.seenResp)
				}
			} else {
				// The probe's response phase runs after llm-cost's (reverse order).
				if pr.seenResp != micros(tc.wantCost) {
					t.Fatalf("probe response phase saw %v micro-USD; want %v USD", pr.seenResp, tc.wantCost)
				}
			}
			// Streams: the gateway publishes usage before the final phase.
			policytest.Finish(run, policytest.End{Outcome: policies.Outcome{Kind: policies.Completed, Status: 200}, Usage: tc.u})

			cost, ok := call.Shared.CostMicroUSD()
			if !ok || cost != micros(tc.wantCost) {
				t.Errorf("x-llm-cost = %d micro-USD (set %v); want %v USD", cost, ok, tc.wantCost)
			}
			if got := call.Shared.CostStatus(); got != tc.wantStatus {
				t.Errorf("x-llm-cost-status = %v; want %s", got, tc.wantStatus)
			}
			if got, _ := call.Shared.Analytics[llmcost.AnalyticsCost].(float64); !near(got, tc.wantCost) {
				t.Errorf("analytics cost_usd = %v; want %v", call.Shared.Analytics[llmcost.AnalyticsCost], tc.wantCost)
			}
			if got := call.ClientHeader.Get(llmcost.HeaderCost); got != tc.wantHeader {
				t.Errorf("%s = %q; want %q", llmcost.HeaderCost, got, tc.wantHeader)
			}
			// The limit policy listed before llm-cost sees the cost in its final call.
			if pr.finals != 1 || pr.status != tc.wantStatus {
				t.Errorf("probe finals=%d status=%v; want 1, %s", pr.finals, pr.status, tc.wantStatus)
			}
			if pr.seenFinal != micros(tc.wantCost) {
				t.Errorf("probe final saw %v micro-USD; want %v USD", pr.seenFinal, tc.wantCost)
			}
		})
	}
}

func TestFinalDoesNotRepriceBody(t *testing.T) {
	pr := &probe{}
	ch, err := build(t, pr, nil, &policies.Services{Pricing: catalog(t)})
	if err != nil {
		t.Fatal(err)
	}
	call := newCall("gpt-4o")
	run := ch.Start(call)
	_ = run.Request()
	call.Shared.SetUsage(usage(1000, 0, 0, 500))
	_ = run.Response(&policies.Response{Status: 200, Body: []byte(`{}`)})
	// A different usage in the final phase must not change the cost the
	// response phase published (and the header the client already got).
	policytest.Finish(run, policytest.End{Outcome: policies.Outcome{Kind: policies.Completed}, Usage: usage(1, 0, 0, 1)})
	if got, _ := call.Shared.CostMicroUSD(); got != 7500 {
		t.Fatalf("final re-priced a body: %v micro-USD", got)
	}
}

func TestFinalPricesUsageThatArrivedLate(t *testing.T) {
	pr := &probe{}
	ch, err := build(t, pr, nil, &policies.Services{Pricing: catalog(t)})
	if err != nil {
		t.Fatal(err)
	}
	call := newCall("gpt-4o")
	run := ch.Start(call)
	_ = run.Request()
	_ = run.Response(&policies.Response{Status: 200, Body: []byte(`{}`)})
	if call.Shared.CostStatus() != llmcost.StatusNoUsage {
		t.Fatalf("status after response = %v", call.Shared.CostStatus())
	}
	policytest.Finish(run, policytest.End{Outcome: policies.Outcome{Kind: policies.Completed}, Usage: usage(1000, 0, 0, 500)})
	if got, _ := call.Shared.CostMicroUSD(); got != 7500 || call.Shared.CostStatus() != llmcost.StatusCalculated {
		t.Fatalf("late usage not priced: %v %v", got, call.Shared.CostStatus())
	}
}

func TestRejectedRequestGetsNoUsage(t *testing.T) {
	// llm-cost listed first, a rejecting policy after it: llm-cost's request
	// phase ran, so its final runs and reports no_usage.
	pr := &probe{rejectWith: gwerror.New(429, gwerror.TypeRateLimit, gwerror.CodeRateLimitExceeded, "no")}
	d := probeDef(pr)
	d.Reads = nil
	reg := policies.NewRegistry(llmcost.Definition(), d)
	ch, err := reg.BuildChain(policies.RouteInfo{RouteName: "r1"},
		[]policies.EntrySpec{{Name: llmcost.Name}, {Name: "probe"}}, &policies.Services{Pricing: catalog(t)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	call := newCall("gpt-4o")
	run := ch.Start(call)
	if gerr := run.Request(); gerr == nil {
		t.Fatal("probe did not reject")
	}
	if cost, ok := call.Shared.CostMicroUSD(); call.Shared.CostStatus() != llmcost.StatusNoUsage || !ok || cost != 0 {
		t.Fatalf("metadata after rejection: %v", call.Shared.Metadata)
	}
}

func TestChainOrderChecked(t *testing.T) {
	// A limit policy that needs x-llm-cost-status in its final phase must be
	// listed before llm-cost; listing it after is a load error with a hint.
	pr := &probe{}
	reg := policies.NewRegistry(llmcost.Definition(), probeDef(pr))
	_, err := reg.BuildChain(policies.RouteInfo{RouteName: "r1"},
		[]policies.EntrySpec{{Name: llmcost.Name}, {Name: "probe"}}, &policies.Services{Pricing: catalog(t)}, nil)
	if err == nil || !strings.Contains(err.Error(), "list llm-cost after probe") {
		t.Fatalf("err = %v; want an ordering hint", err)
	}
}

func TestPricingFileParam(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "prices.yaml")
	if err := os.WriteFile(good, []byte("models:\n  acme-42: {input: 2, output: 8}\n  gpt-4o: {input: 1, output: 1}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("models:\n  acme-42: {input: 2}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := catalog(t)
	for _, svc := range []*policies.Services{{Pricing: base}, {}} {
		pr := &probe{}
		ch, err := build(t, pr, map[string]any{"pricingFile": good}, svc)
		if err != nil {
			t.Fatalf("BuildChain: %v", err)
		}
		for model, want := range map[string]float64{"acme-42": 0.002 + 0.004, "gpt-4o": 0.0015, "gpt-4o-mini": 0.00015 + 0.0003} {
			call := newCall(model)
			run := ch.Start(call)
			_ = run.Request()
			call.Shared.SetUsage(usage(1000, 0, 0, 500))
			_ = run.Response(&policies.Response{Status: 200, Body: []byte(`{}`)})
			run.Finish(policies.Outcome{Kind: policies.Completed})
			if got, _ := call.Shared.CostMicroUSD(); got != micros(want) {
				t.Errorf("%s: cost %v micro-USD; want %v USD", model, got, want)
			}
		}
	}
	// The gateway-wide catalog is not changed by an instance's file.
	if p, _ := base.Lookup("gpt-4o"); p.Input != 2.5 {
		t.Errorf("instance file leaked into the shared catalog: %v", p.Input)
	}

	_, err := build(t, &probe{}, map[string]any{"pricingFile": bad}, &policies.Services{Pricing: base})
	var ee *policies.EntryError
	if !errors.As(err, &ee) || ee.Index != 1 || len(ee.Params) == 0 || ee.Params[0].Path[0] != "pricingFile" ||
		!strings.Contains(err.Error(), "output is required") {
		t.Fatalf("bad pricing file: err = %v", err)
	}
}

func TestParamsAndWiringErrors(t *testing.T) {
	cases := []struct {
		name   string
		params map[string]any
		svc    *policies.Services
		want   string
	}{
		{"unknown param", map[string]any{"pricefile": "x"}, &policies.Services{Pricing: catalog(t)}, "pricefile"},
		{"negative default", map[string]any{"defaultPrice": map[string]any{"input": -1, "output": 1}}, &policies.Services{Pricing: catalog(t)}, "defaultPrice"},
		{"default without output", map[string]any{"defaultPrice": map[string]any{"input": 1}}, &policies.Services{Pricing: catalog(t)}, "output"},
		{"missing file", map[string]any{"pricingFile": "/nonexistent/prices.yaml"}, &policies.Services{Pricing: catalog(t)}, "pricingFile"},
		{"no catalog", nil, &policies.Services{}, "no pricing catalog"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := build(t, &probe{}, tc.params, tc.svc)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v; want it to mention %q", err, tc.want)
			}
		})
	}
}
