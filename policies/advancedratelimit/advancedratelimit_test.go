package advancedratelimit_test

import (
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"sluice/counter"
	"sluice/counter/countertest"
	"sluice/gwerror"
	"sluice/policies"
	"sluice/policies/advancedratelimit"
	"sluice/policies/llmcost"
	"sluice/policies/policytest"
	"sluice/policies/ratelimit/ratelimittest"
)

const route = "r"

var bucket = countertest.Bucket

func quota(name string, limit int64, d string, extra map[string]any) map[string]any {
	q := map[string]any{"name": name, "limits": []any{map[string]any{"limit": limit, "duration": d}}}
	for k, v := range extra {
		q[k] = v
	}
	return q
}

func TestAdvancedKeyExtraction(t *testing.T) {
	keys := []any{
		map[string]any{"type": "routename"},
		map[string]any{"type": "header", "key": "X-Team"},
		map[string]any{"type": "metadata", "key": "x-application-id", "fallback": "default"},
	}
	cases := []struct {
		name   string
		header string
		app    string
		key    string
	}{
		{"all present", "blue", "app-a", "{r:blue:app-a}:advanced-ratelimit:q:bucket-1m"},
		{"metadata fallback", "blue", "", "{r:blue:default}:advanced-ratelimit:q:bucket-1m"},
		{"header without fallback", "", "app-a", "{r:none:app-a}:advanced-ratelimit:q:bucket-1m"},
		{"separators escaped", "a:b}", "x", "{r:a%3Ab%7D:x}:advanced-ratelimit:q:bucket-1m"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := ratelimittest.New(t, advancedratelimit.Definition())
			ch := h.Chain(route, ratelimittest.Entry(advancedratelimit.Name, map[string]any{
				"quotas": []any{quota("q", 10, "1m", map[string]any{"keyExtraction": keys})}}))
			call := h.Call(route, ratelimittest.Req{App: tc.app})
			if tc.header != "" {
				call.Request.Header.Set("X-Team", tc.header)
			}
			if gerr, _ := h.Do(ch, call, ratelimittest.Completed(nil)); gerr != nil {
				t.Fatal(gerr)
			}
			if got := h.Remaining(tc.key, bucket(10, time.Minute)); got != 9 {
				t.Fatalf("%s remaining %d, want 9", tc.key, got)
			}
		})
	}
}

func TestAdvancedCostExtraction(t *testing.T) {
	h := ratelimittest.New(t, advancedratelimit.Definition(), llmcost.Definition())
	ch := h.Chain(route,
		ratelimittest.Entry(advancedratelimit.Name, map[string]any{"quotas": []any{
			quota("req", 100, "1m", nil),
			quota("tok", 100000, "1h", map[string]any{"costExtraction": map[string]any{"source": "response", "promptMultiplier": 1, "completionMultiplier": 4}}),
			quota("usd", 5_000_000, "1d", map[string]any{"costExtraction": map[string]any{"source": "metadata", "key": "x-llm-cost", "multiplier": 1e6}}),
		}}),
		ratelimittest.Entry(llmcost.Name, nil))
	usage := ratelimittest.Usage(100, 50, 1)
	real, _ := h.Svc.Pricing.CostMicros("gpt-4o", usage)
	if gerr, _ := h.Do(ch, h.Call(route, ratelimittest.Req{}), ratelimittest.Completed(usage)); gerr != nil {
		t.Fatal(gerr)
	}
	checks := []struct {
		key   string
		l     counter.Limit
		spent int64
	}{
		{"{r}:advanced-ratelimit:req:bucket-1m", bucket(100, time.Minute), 1},
		{"{r}:advanced-ratelimit:tok:bucket-1h", bucket(100000, time.Hour), 100 + 4*50},
		{"{r}:advanced-ratelimit:usd:window-1d", counter.Limit{Algorithm: counter.FixedWindow, Max: 5_000_000, Period: 24 * time.Hour}, real},
	}
	for _, c := range checks {
		if got := c.l.Max - h.Remaining(c.key, c.l); got != c.spent {
			t.Errorf("%s spent %d, want %d", c.key, got, c.spent)
		}
	}
}

func TestAdvancedDifferentExtractionsShareRouteTag(t *testing.T) {
	h := ratelimittest.New(t, advancedratelimit.Definition())
	ch := h.Chain(route, ratelimittest.Entry(advancedratelimit.Name, map[string]any{"quotas": []any{
		quota("global", 100, "1m", nil),
		quota("per-ip", 5, "1m", map[string]any{"keyExtraction": []any{map[string]any{"type": "ip"}}}),
	}}))
	call := h.Call(route, ratelimittest.Req{})
	call.Request.RemoteIP = "10.0.0.1"
	if gerr, _ := h.Do(ch, call, ratelimittest.Completed(nil)); gerr != nil {
		t.Fatal(gerr)
	}
	if got := h.Remaining("{r}:advanced-ratelimit:global:bucket-1m:r", bucket(100, time.Minute)); got != 99 {
		t.Fatalf("global remaining %d", got)
	}
	if got := h.Remaining("{r}:advanced-ratelimit:per-ip:bucket-1m:10.0.0.1", bucket(5, time.Minute)); got != 4 {
		t.Fatalf("per-ip remaining %d", got)
	}
}

func TestAdvancedCustomDenial(t *testing.T) {
	h := ratelimittest.New(t, advancedratelimit.Definition())
	ch := h.Chain(route, ratelimittest.Entry(advancedratelimit.Name, map[string]any{
		"quotas":              []any{quota("q", 1, "1m", nil)},
		"onRateLimitExceeded": map[string]any{"status": 503, "body": `{"busy":true}`},
	}))
	h.Do(ch, h.Call(route, ratelimittest.Req{}), ratelimittest.Completed(nil))
	gerr, _ := h.Do(ch, h.Call(route, ratelimittest.Req{}), ratelimittest.Completed(nil))
	if gerr == nil || gerr.Status != 503 || string(gerr.Envelope()) != `{"busy":true}` || gerr.RetryAfter != time.Minute {
		t.Fatalf("custom denial %+v", gerr)
	}
	if _, err := h.BuildChain(route, ratelimittest.Entry(advancedratelimit.Name, map[string]any{
		"quotas": []any{quota("q", 1, "1m", nil)}, "onRateLimitExceeded": map[string]any{"body": "not json"}})); err == nil {
		t.Fatal("non-JSON body accepted")
	}
}

func TestAdvancedReleaseOnLaterRejection(t *testing.T) {
	h := ratelimittest.New(t, advancedratelimit.Definition())
	ch := h.Chain(route,
		ratelimittest.Entry(advancedratelimit.Name, map[string]any{"quotas": []any{quota("q", 3, "1m", nil)}}),
		ratelimittest.Entry(ratelimittest.RejectName, nil))
	for range 5 {
		if gerr, _ := h.Do(ch, h.Call(route, ratelimittest.Req{}), policytest.End{Outcome: policies.Outcome{Kind: policies.Rejected}}); gerr == nil || gerr.Policy != ratelimittest.RejectName {
			t.Fatalf("want the later policy's rejection, got %v", gerr)
		}
	}
	if got := h.Remaining("{r}:advanced-ratelimit:q:bucket-1m", bucket(3, time.Minute)); got != 3 {
		t.Fatalf("remaining %d, want 3", got)
	}
}

// TestAdvancedTrust: response and x-llm-cost quotas charge at least the usage
// the gateway counted for a request that ended without the provider's report
// (never less than their estimate); request quotas keep their estimate; the
// resolution is named by the outcome unless the usage is exact.
func TestAdvancedTrust(t *testing.T) {
	counted := ratelimittest.Counted(8, 500)
	cases := []struct {
		name       string
		o          policytest.End
		tok        func(est int64) int64 // expected charge of the response quota
		usd        bool                  // the x-llm-cost quota is charged the usage's price
		resolution string
	}{
		{"cancelled with counted output", policytest.End{Outcome: policies.Outcome{Kind: policies.Cancelled, WentUpstream: true}, Usage: counted},
			func(int64) int64 { return 8 + 4*500 }, true, "abandoned"},
		{"cancelled with a small count keeps the estimate", policytest.End{Outcome: policies.Outcome{Kind: policies.Cancelled, WentUpstream: true}, Usage: ratelimittest.Counted(8, 0)},
			func(est int64) int64 { return est }, true, "abandoned"},
		{"cut stream with counted output", policytest.End{Outcome: policies.Outcome{Kind: policies.UpstreamFailed, Status: 200, WentUpstream: true}, Usage: counted},
			func(int64) int64 { return 8 + 4*500 }, true, "closed"},
		{"cancelled after the usage report settles", policytest.End{Outcome: policies.Outcome{Kind: policies.Cancelled, WentUpstream: true}, Usage: ratelimittest.Usage(8, 500, 1)},
			func(int64) int64 { return 8 + 4*500 }, true, "settled"},
		{"cancelled without usage keeps the estimates", policytest.End{Outcome: policies.Outcome{Kind: policies.Cancelled, WentUpstream: true}},
			func(est int64) int64 { return est }, false, "abandoned"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := ratelimittest.New(t, advancedratelimit.Definition(), llmcost.Definition())
			ch := h.Chain(route,
				ratelimittest.Entry(advancedratelimit.Name, map[string]any{"quotas": []any{
					quota("req", 100, "1m", nil),
					quota("tok", 100000, "1h", map[string]any{"costExtraction": map[string]any{"source": "response", "promptMultiplier": 1, "completionMultiplier": 4}}),
					quota("usd", 5_000_000, "1d", map[string]any{"costExtraction": map[string]any{"source": "metadata", "key": "x-llm-cost", "multiplier": 1e6}}),
				}}),
				ratelimittest.Entry(llmcost.Name, nil))
			call := h.Call(route, ratelimittest.Req{})
			est := h.Svc.Tokens.EstimatePrompt(call.Request.LLM)
			if gerr, _ := h.Do(ch, call, tc.o); gerr != nil {
				t.Fatal(gerr)
			}
			usd := int64(1) // the metadata quota's reservation
			if tc.usd {
				usd, _ = h.Svc.Pricing.CostMicros("gpt-4o", tc.o.Usage)
			}
			checks := []struct {
				key   string
				l     counter.Limit
				spent int64
			}{
				{"{r}:advanced-ratelimit:req:bucket-1m", bucket(100, time.Minute), 1},
				{"{r}:advanced-ratelimit:tok:bucket-1h", bucket(100000, time.Hour), tc.tok(est)},
				{"{r}:advanced-ratelimit:usd:window-1d", counter.Limit{Algorithm: counter.FixedWindow, Max: 5_000_000, Period: 24 * time.Hour}, usd},
			}
			for _, c := range checks {
				if got := c.l.Max - h.Remaining(c.key, c.l); got != c.spent {
					t.Errorf("%s spent %d, want %d", c.key, got, c.spent)
				}
			}
			if n := h.Gauge("sluice_ratelimit_resolutions_total", map[string]string{"kind": tc.resolution}); n != 1 {
				t.Errorf("resolutions{kind=%s} = %v, want 1", tc.resolution, n)
			}
		})
	}
}

// TestAdvancedCostQuotaNeedsAPricer: a quota that settles with x-llm-cost
// links to the llm-cost after it and refuses a model it cannot price; with
// no llm-cost after it the chain does not build.
func TestAdvancedCostQuotaNeedsAPricer(t *testing.T) {
	costQuota := map[string]any{"quotas": []any{quota("spend", 1_000_000, "1d", map[string]any{
		"costExtraction": map[string]any{"source": "metadata", "key": "x-llm-cost", "multiplier": 1000000}})}}
	h := ratelimittest.New(t, advancedratelimit.Definition(), llmcost.Definition())
	if _, err := h.BuildChain(route, ratelimittest.Entry(llmcost.Name, nil), ratelimittest.Entry(advancedratelimit.Name, costQuota)); err == nil ||
		!strings.Contains(err.Error(), "no llm-cost after it") {
		t.Fatalf("llm-cost before the quota: want a chain error, got %v", err)
	}
	ch := h.Chain(route, ratelimittest.Entry(advancedratelimit.Name, costQuota), ratelimittest.Entry(llmcost.Name, nil))
	gerr, _ := h.Do(ch, h.Call(route, ratelimittest.Req{Model: "no-such-model"}), ratelimittest.Completed(nil))
	if gerr == nil || gerr.Status != 400 || gerr.Code != gwerror.CodeModelNotPriced || gerr.Policy != advancedratelimit.Name {
		t.Fatalf("unpriced model: %v", gerr)
	}
	if gerr, _ := h.Do(ch, h.Call(route, ratelimittest.Req{Model: "gpt-4o"}), ratelimittest.Completed(nil)); gerr != nil {
		t.Fatalf("priced model: %v", gerr)
	}
	// A quota that does not read x-llm-cost needs no llm-cost.
	h.Chain(route, ratelimittest.Entry(advancedratelimit.Name, map[string]any{"quotas": []any{quota("q", 5, "1m", nil)}}))
}

// TestAdvancedSaturatedMultiplier: a prompt estimate times a huge (finite)
// multiplier is beyond int64; it is denied as never fitting, not a 500.
func TestAdvancedSaturatedMultiplier(t *testing.T) {
	h := ratelimittest.New(t, advancedratelimit.Definition())
	ch := h.Chain(route, ratelimittest.Entry(advancedratelimit.Name, map[string]any{"quotas": []any{
		quota("tok", 1_000_000, "1h", map[string]any{"costExtraction": map[string]any{"source": "response", "promptMultiplier": 1e30}}),
	}}))
	gerr, _ := h.Do(ch, h.Call(route, ratelimittest.Req{}), ratelimittest.Completed(nil))
	if gerr == nil || gerr.Status != http.StatusTooManyRequests || !strings.Contains(gerr.Message, "can never be admitted") {
		t.Fatalf("got %+v, want a 429 that can never be admitted", gerr)
	}
	for _, bad := range []float64{math.Inf(1), math.NaN()} {
		_, err := h.BuildChain(route, ratelimittest.Entry(advancedratelimit.Name, map[string]any{"quotas": []any{
			quota("tok", 1000, "1h", map[string]any{"costExtraction": map[string]any{"source": "response", "completionMultiplier": bad}}),
		}}))
		if err == nil {
			t.Fatalf("completionMultiplier %v accepted", bad)
		}
	}
}

// TestAdvancedCostQuotaExact: a quota on x-llm-cost is charged the cost llm-cost
// priced, scaled by its multiplier from USD: exactly the micro-USD with
// multiplier 1000000, also where a float64 of the USD is off by one
// (32.000002 USD came back as 32000003 µUSD), and rounded up for another
// multiplier (1000: milli-USD).
func TestAdvancedCostQuotaExact(t *testing.T) {
	day := func(max int64) counter.Limit {
		return counter.Limit{Algorithm: counter.FixedWindow, Max: max, Period: 24 * time.Hour}
	}
	for _, prompt := range []int64{1, 7_500, 32_000_002, 987_654_321} {
		h := ratelimittest.New(t, advancedratelimit.Definition(), llmcost.Definition())
		ch := h.Chain(route,
			ratelimittest.Entry(advancedratelimit.Name, map[string]any{"quotas": []any{
				quota("usd", 10_000_000_000, "1d", map[string]any{"costExtraction": map[string]any{"source": "metadata", "key": "x-llm-cost", "multiplier": 1e6}}),
				quota("musd", 10_000_000, "1d", map[string]any{"costExtraction": map[string]any{"source": "metadata", "key": "x-llm-cost", "multiplier": 1000}}),
			}}),
			// 1 USD per million tokens: 1 µUSD per token.
			ratelimittest.Entry(llmcost.Name, map[string]any{"defaultPrice": map[string]any{"input": 1, "output": 1}}))
		if gerr, _ := h.Do(ch, h.Call(route, ratelimittest.Req{Model: "acme-unlisted"}), ratelimittest.Completed(ratelimittest.Usage(prompt, 0, 1))); gerr != nil {
			t.Fatal(gerr)
		}
		if got := 10_000_000_000 - h.Remaining("{r}:advanced-ratelimit:usd:window-1d", day(10_000_000_000)); got != prompt {
			t.Errorf("%d µUSD: the micro-USD quota was charged %d", prompt, got)
		}
		if got, want := 10_000_000-h.Remaining("{r}:advanced-ratelimit:musd:window-1d", day(10_000_000)), (prompt+999)/1000; got != want {
			t.Errorf("%d µUSD: the milli-USD quota was charged %d, want %d", prompt, got, want)
		}
	}
}

// refused are params the policy refuses, with its errors in its order
// (all the policy's own, none the schema's).
var refused = []ratelimittest.Refused{
	{Name: "quota twice", Params: map[string]any{"quotas": []any{quota("q", 1, "1m", nil), quota("q", 2, "1h", nil)}},
		Want: []string{`quotas.1.name: quota "q" is listed twice`}},
	{Name: "every kind at once", Params: map[string]any{"algorithm": "fixed-window", "quotas": []any{
		quota("a", 1, "1500ms", map[string]any{"keyExtraction": []any{
			map[string]any{"type": "header"}, map[string]any{"type": "constant"}, map[string]any{"type": "metadata"}}}),
		map[string]any{"name": "b", "limits": []any{map[string]any{"limit": 1, "duration": "1m"}, map[string]any{"limit": 2, "duration": "1m"}},
			"costExtraction": map[string]any{"source": "metadata"}},
	}, "onRateLimitExceeded": map[string]any{"body": "not json"}},
		Want: []string{
			"quotas.0.limits.0.duration: duration 1.5s: a window must be a whole number of seconds",
			"quotas.0.keyExtraction.0.key: header components need a key",
			"quotas.0.keyExtraction.1.value: constant components need a value",
			"quotas.0.keyExtraction.2.key: metadata components need a key",
			"quotas.1.limits.1.duration: duration 1m0s is listed twice",
			"quotas.1.costExtraction.key: source metadata needs a key",
			"onRateLimitExceeded.body: body must be valid JSON",
		}},
}

func TestValidation(t *testing.T) {
	ratelimittest.New(t, advancedratelimit.Definition()).CheckValidation(advancedratelimit.Definition(), route, refused)
}

// TestBuildChecksParams: build computes the quotas with the same function
// as Validate, so params that skipped Validate are refused with its errors,
// multipliers that JSON cannot carry (NaN, infinities) included.
func TestBuildChecksParams(t *testing.T) {
	h := ratelimittest.New(t, advancedratelimit.Definition())
	h.CheckBuild(advancedratelimit.Definition(), route, refused, map[string]any{"quotas": []any{quota("q", 1, "1m", nil)}})
	p := &advancedratelimit.Params{Quotas: []advancedratelimit.Quota{{Name: "q",
		Limits:         []advancedratelimit.QuotaLimit{{Limit: 1, Duration: policies.Duration(time.Minute)}},
		CostExtraction: &advancedratelimit.CostExtraction{Source: "response", PromptMultiplier: math.NaN(), Multiplier: math.Inf(1)}}}}
	want := []string{"quotas.0.costExtraction.promptMultiplier: must be a finite number", "quotas.0.costExtraction.multiplier: must be a finite number"}
	if got := h.BuildErrors(advancedratelimit.Definition(), route, p); !slices.Equal(got, want) {
		t.Errorf("NaN and infinite multipliers: build errors %q, want %q", got, want)
	}
	if err := p.Validate(); err == nil || err.Error() != strings.Join(want, "; ") {
		t.Errorf("NaN and infinite multipliers: Validate %v, want %q", err, want)
	}
}
