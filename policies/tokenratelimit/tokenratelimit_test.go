package tokenratelimit_test

import (
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"sluice/counter"
	"sluice/gwerror"
	"sluice/llmapi"
	"sluice/policies"
	"sluice/policies/policytest"
	"sluice/policies/ratelimit"
	"sluice/policies/ratelimit/ratelimittest"
	"sluice/policies/tokenratelimit"
)

const route = "r"

func hourBucket(max int64) counter.Limit {
	return counter.Limit{Algorithm: counter.TokenBucket, Max: max, Period: time.Hour}
}

func key(scope, dim, period string) string {
	return "{" + scope + "}:token-based-ratelimit:" + dim + ":" + period
}

func limits(count int64, d string) []any {
	return []any{map[string]any{"count": count, "duration": d}}
}

func newHarness(t testing.TB) *ratelimittest.Harness {
	return ratelimittest.New(t, tokenratelimit.Definition())
}

// prompt is the tokenizer's estimate for the harness's default request.
func prompt(h *ratelimittest.Harness, r ratelimittest.Req) int64 {
	return h.Svc.Tokens.EstimatePrompt(h.Call(route, r).Request.LLM)
}

func TestSettlementOutcomes(t *testing.T) {
	req := ratelimittest.Req{MaxTokens: 100, N: 2}
	cases := []struct {
		name string
		o    policytest.End
		// charged returns the expected final charge given the estimate.
		charged func(est int64) int64
		kind    string
	}{
		{"settle with real usage", ratelimittest.Completed(ratelimittest.Usage(40, 70, 2)), func(int64) int64 { return 110 }, "settled"},
		{"debt when the response exceeds the estimate", ratelimittest.Completed(ratelimittest.Usage(40, 1500, 2)), func(int64) int64 { return 1540 }, "settled"},
		{"full refund only when the provider reported zero", ratelimittest.Completed(ratelimittest.Usage(0, 0, 2)), func(int64) int64 { return 0 }, "settled"},
		{"completed without usage keeps the estimate", ratelimittest.Completed(nil), func(e int64) int64 { return e }, "closed"},
		{"non-authoritative usage keeps the estimate", ratelimittest.Completed(&llmapi.Usage{PromptTokens: 1, ExpectedChoices: 2, FinishedChoices: 2}), func(e int64) int64 { return e }, "closed"},
		{"partial n>1 stream below the estimate keeps the estimate", ratelimittest.Completed(&llmapi.Usage{PromptTokens: 5, CompletionTokens: 3, TotalTokens: 8, Authoritative: true, ExpectedChoices: 2, FinishedChoices: 1}), func(e int64) int64 { return e }, "closed"},
		{"partial n>1 stream above the estimate charges its usage", ratelimittest.Completed(&llmapi.Usage{PromptTokens: 5, CompletionTokens: 900, TotalTokens: 905, Authoritative: true, ExpectedChoices: 2, FinishedChoices: 1}), func(int64) int64 { return 905 }, "closed"},
		{"upstream non-2xx keeps the estimate", policytest.End{Outcome: policies.Outcome{Kind: policies.UpstreamFailed, Status: 502, WentUpstream: true}}, func(e int64) int64 { return e }, "closed"},
		{"client disconnect without usage keeps the estimate", policytest.End{Outcome: policies.Outcome{Kind: policies.Cancelled, WentUpstream: true}}, func(e int64) int64 { return e }, "abandoned"},
		{"client disconnect after the usage report settles with it", policytest.End{Outcome: policies.Outcome{Kind: policies.Cancelled, WentUpstream: true}, Usage: ratelimittest.Usage(40, 70, 2)}, func(int64) int64 { return 110 }, "settled"},
		{"client disconnect charges the counted output", policytest.End{Outcome: policies.Outcome{Kind: policies.Cancelled, WentUpstream: true}, Usage: ratelimittest.Counted(8, 990)}, func(int64) int64 { return 998 }, "abandoned"},
		{"counted output below the estimate refunds nothing", policytest.End{Outcome: policies.Outcome{Kind: policies.Cancelled, WentUpstream: true}, Usage: ratelimittest.Counted(8, 3)}, func(e int64) int64 { return e }, "abandoned"},
		{"stream cut by the upstream charges the counted output", policytest.End{Outcome: policies.Outcome{Kind: policies.UpstreamFailed, Status: 200, WentUpstream: true}, Usage: ratelimittest.Counted(8, 700)}, func(int64) int64 { return 708 }, "closed"},
		{"stream without usage charges the counted output", ratelimittest.Completed(ratelimittest.Counted(8, 600)), func(int64) int64 { return 608 }, "closed"},
		{"panic after upstream keeps the estimate", policytest.End{Outcome: policies.Outcome{Kind: policies.Failed, WentUpstream: true}}, func(e int64) int64 { return e }, "closed"},
		{"panic mid-stream charges the counted output", policytest.End{Outcome: policies.Outcome{Kind: policies.Failed, WentUpstream: true}, Usage: ratelimittest.Counted(8, 500)}, func(int64) int64 { return 508 }, "closed"},
		{"client gone before upstream refunds", policytest.End{Outcome: policies.Outcome{Kind: policies.Cancelled}}, func(int64) int64 { return 0 }, "released"},
		{"panic before upstream refunds", policytest.End{Outcome: policies.Outcome{Kind: policies.Failed}}, func(int64) int64 { return 0 }, "released"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			ch := h.Chain(route, ratelimittest.Entry(tokenratelimit.Name, map[string]any{
				"totalTokenLimits": limits(10000, "1h"), "reserveOutput": "maxTokens"}))
			est := prompt(h, req) + 100*2
			call := h.Call(route, req)
			if gerr, _ := h.Do(ch, call, tc.o); gerr != nil {
				t.Fatal(gerr)
			}
			got := 10000 - h.Remaining(key(route, "total", "bucket-1h"), hourBucket(10000))
			if want := tc.charged(est); got != want {
				t.Fatalf("charged %d, want %d (estimate %d)", got, want, est)
			}
			if n := h.Gauge("sluice_ratelimit_resolutions_total", map[string]string{"kind": tc.kind}); n != 1 {
				t.Fatalf("resolutions{kind=%s} = %v, want 1", tc.kind, n)
			}
			if n := h.Gauge("sluice_ratelimit_open_reservations", nil); n != 0 {
				t.Fatalf("open reservations %v", n)
			}
		})
	}
}

func TestLaterRejectionReleases(t *testing.T) {
	h := newHarness(t)
	ch := h.Chain(route,
		ratelimittest.Entry(tokenratelimit.Name, map[string]any{"totalTokenLimits": limits(1000, "1h"), "reserveOutput": "maxTokens"}),
		ratelimittest.Entry(ratelimittest.RejectName, nil))
	gerr, _ := h.Do(ch, h.Call(route, ratelimittest.Req{MaxTokens: 300}), ratelimittest.Completed(nil))
	if gerr == nil || gerr.Policy != ratelimittest.RejectName {
		t.Fatalf("want rejection by %s, got %v", ratelimittest.RejectName, gerr)
	}
	if got := h.Remaining(key(route, "total", "bucket-1h"), hourBucket(1000)); got != 1000 {
		t.Fatalf("remaining %d, want 1000 (nothing charged)", got)
	}
	if n := h.Gauge("sluice_ratelimit_resolutions_total", map[string]string{"kind": "released"}); n != 1 {
		t.Fatalf("released = %v", n)
	}
}

func TestFirstResolutionWins(t *testing.T) {
	h := newHarness(t)
	ch := h.Chain(route, ratelimittest.Entry(tokenratelimit.Name, map[string]any{"totalTokenLimits": limits(1000, "1h"), "reserveOutput": "maxTokens"}))
	call := h.Call(route, ratelimittest.Req{MaxTokens: 200})
	est := prompt(h, ratelimittest.Req{MaxTokens: 200}) + 200
	run := ch.Start(call)
	if gerr := run.Request(); gerr != nil {
		t.Fatal(gerr)
	}
	pol := ch.Entries()[0].Policy.(*tokenratelimit.Policy)
	res, ok := call.Shared.Metadata[pol.Engine().Slot()].(*ratelimit.Reservation)
	if !ok {
		t.Fatal("no reservation under the instance slot")
	}
	if !res.Close() {
		t.Fatal("first Close must win")
	}
	var zero ratelimit.Amounts
	if res.Settle(&zero) || res.Release() || res.Abandon() || res.Close() {
		t.Fatal("later resolutions must be no-ops")
	}
	run.MarkUpstream()
	policytest.Finish(run, ratelimittest.Completed(ratelimittest.Usage(0, 0, 1)))
	run.Finish(policies.Outcome{Kind: policies.Cancelled})
	if got := h.Remaining(key(route, "total", "bucket-1h"), hourBucket(1000)); got != 1000-est {
		t.Fatalf("remaining %d, want %d: settle after close must not refund", got, 1000-est)
	}
	if pol.Engine().OpenReservations() != 0 {
		t.Fatalf("open reservations %d", pol.Engine().OpenReservations())
	}
}

func TestModelRules(t *testing.T) {
	params := map[string]any{
		"completionTokenLimits": limits(100000, "1h"),
		"reserveOutput":         "maxTokens",
		"modelRules": []any{
			map[string]any{"match": "gpt-4*", "completionTokenLimits": limits(5000, "1h")},
			map[string]any{"match": "gpt-4o*", "completionTokenLimits": limits(3000, "1h")},
			map[string]any{"match": "gpt-4o", "completionTokenLimits": limits(2000, "1h")},
		},
	}
	cases := []struct {
		model string
		rule  string // "" no rule
		max   int64
	}{
		{"gpt-4o", "gpt-4o", 2000},
		{"gpt-4o-mini", "gpt-4o*", 3000},
		{"gpt-4-turbo", "gpt-4*", 5000},
		{"o3", "", 0},
	}
	for _, tc := range cases {
		t.Run(tc.model, func(t *testing.T) {
			h := newHarness(t)
			ch := h.Chain(route, ratelimittest.Entry(tokenratelimit.Name, params))
			if gerr, _ := h.Do(ch, h.Call(route, ratelimittest.Req{Model: tc.model, MaxTokens: 700}), policytest.End{Outcome: policies.Outcome{Kind: policies.UpstreamFailed, WentUpstream: true}}); gerr != nil {
				t.Fatal(gerr)
			}
			if got := h.Remaining(key(route, "completion", "bucket-1h"), hourBucket(100000)); got != 100000-700 {
				t.Fatalf("policy limit remaining %d", got)
			}
			for _, r := range []struct {
				m   string
				max int64
			}{{"gpt-4*", 5000}, {"gpt-4o*", 3000}, {"gpt-4o", 2000}} {
				want := r.max
				if r.m == tc.rule {
					want -= 700
				}
				if got := h.Remaining(key(route, "completion", "bucket-1h")+":model:"+r.m, hourBucket(r.max)); got != want {
					t.Fatalf("rule %s remaining %d, want %d", r.m, got, want)
				}
			}
			// The rule's limit denies on its own; the policy limit is then not charged.
			if tc.rule != "" {
				gerr, _ := h.Do(ch, h.Call(route, ratelimittest.Req{Model: tc.model, MaxTokens: tc.max}), ratelimittest.Completed(nil))
				if gerr == nil || gerr.Code != gwerror.CodeRateLimitExceeded {
					t.Fatalf("want rate_limit_exceeded by the rule, got %v", gerr)
				}
				if got := h.Remaining(key(route, "completion", "bucket-1h"), hourBucket(100000)); got != 100000-700 {
					t.Fatalf("denial charged the policy limit: remaining %d", got)
				}
			}
		})
	}
}

func TestRetryAfter(t *testing.T) {
	h := newHarness(t)
	// 600 completion tokens per minute refill at 10 tokens/s.
	ch := h.Chain(route, ratelimittest.Entry(tokenratelimit.Name, map[string]any{
		"completionTokenLimits": limits(600, "1m"), "reserveOutput": "maxTokens"}))
	if gerr, _ := h.Do(ch, h.Call(route, ratelimittest.Req{MaxTokens: 600}), policytest.End{Outcome: policies.Outcome{Kind: policies.UpstreamFailed, WentUpstream: true}}); gerr != nil {
		t.Fatal(gerr)
	}
	cases := []struct {
		max   int64
		retry time.Duration
		never bool
	}{
		{25, 3 * time.Second, false},   // ceil(25 / 10 per s) = 2.5s -> Retry-After 3
		{100, 10 * time.Second, false}, // 100 / 10 = 10s
		{700, 0, true},                 // more than the capacity: never
	}
	for _, tc := range cases {
		gerr, _ := h.Do(ch, h.Call(route, ratelimittest.Req{MaxTokens: tc.max}), ratelimittest.Completed(nil))
		if gerr == nil {
			t.Fatalf("max %d: admitted", tc.max)
		}
		if gerr.Status != 429 || gerr.Type != gwerror.TypeRateLimit || gerr.Code != gwerror.CodeRateLimitExceeded || gerr.Policy != tokenratelimit.Name {
			t.Fatalf("max %d: bad error %+v", tc.max, gerr)
		}
		secs := int64((gerr.RetryAfter + time.Second - 1) / time.Second)
		if tc.never {
			if gerr.RetryAfter != 0 {
				t.Fatalf("impossible request has Retry-After %v", gerr.RetryAfter)
			}
			continue
		}
		if secs != int64(tc.retry/time.Second) {
			t.Fatalf("max %d: Retry-After %ds (%v), want %v", tc.max, secs, gerr.RetryAfter, tc.retry)
		}
	}
}

func TestBudgetCode(t *testing.T) {
	h := newHarness(t)
	ch := h.Chain(route, ratelimittest.Entry(tokenratelimit.Name, map[string]any{
		"completionTokenLimits": limits(100, "1d"), "reserveOutput": "maxTokens"}))
	if gerr, _ := h.Do(ch, h.Call(route, ratelimittest.Req{MaxTokens: 100}), ratelimittest.Completed(nil)); gerr != nil {
		t.Fatal(gerr)
	}
	gerr, _ := h.Do(ch, h.Call(route, ratelimittest.Req{MaxTokens: 1}), ratelimittest.Completed(nil))
	if gerr == nil || gerr.Code != gwerror.CodeBudgetExceeded {
		t.Fatalf("want budget_exceeded, got %v", gerr)
	}
	// The day window ends at 00:00 UTC: 11h29m30s after the harness start.
	if want := 11*time.Hour + 29*time.Minute + 30*time.Second; gerr.RetryAfter != want {
		t.Fatalf("Retry-After %v, want %v", gerr.RetryAfter, want)
	}
}

func TestConsumerKeysAndNoDoubleDeduction(t *testing.T) {
	h := newHarness(t)
	ch := h.Chain(route,
		ratelimittest.Entry(tokenratelimit.Name, map[string]any{"completionTokenLimits": limits(10000, "1h"), "reserveOutput": "maxTokens"}),
		ratelimittest.Entry(tokenratelimit.Name, map[string]any{"completionTokenLimits": limits(1000, "1h"), "reserveOutput": "maxTokens", "consumerBased": true}))
	for _, app := range []string{"app-a", "", "app-a"} {
		if gerr, _ := h.Do(ch, h.Call(route, ratelimittest.Req{App: app, MaxTokens: 50}), ratelimittest.Completed(ratelimittest.Usage(1, 100, 1))); gerr != nil {
			t.Fatal(gerr)
		}
	}
	l10k, l1k := hourBucket(10000), hourBucket(1000)
	checks := []struct {
		key   string
		l     counter.Limit
		spent int64
	}{
		{key(route, "completion", "bucket-1h"), l10k, 300},
		{key(route+":app-a", "completion", "bucket-1h"), l1k, 200},
		{key(route+":default", "completion", "bucket-1h"), l1k, 100},
	}
	for _, c := range checks {
		if got := c.l.Max - h.Remaining(c.key, c.l); got != c.spent {
			t.Errorf("%s spent %d, want %d", c.key, got, c.spent)
		}
	}
}

func TestDebtAfterLargerResponse(t *testing.T) {
	h := newHarness(t)
	ch := h.Chain(route, ratelimittest.Entry(tokenratelimit.Name, map[string]any{
		"completionTokenLimits": limits(1000, "1h"), "reserveOutput": "maxTokens"}))
	if gerr, _ := h.Do(ch, h.Call(route, ratelimittest.Req{MaxTokens: 100}), ratelimittest.Completed(ratelimittest.Usage(5, 1500, 1))); gerr != nil {
		t.Fatal(gerr)
	}
	if got := h.Remaining(key(route, "completion", "bucket-1h"), hourBucket(1000)); got != -500 {
		t.Fatalf("remaining %d, want -500 (debt)", got)
	}
	gerr, _ := h.Do(ch, h.Call(route, ratelimittest.Req{MaxTokens: 1}), ratelimittest.Completed(nil))
	if gerr == nil || gerr.RetryAfter <= 0 {
		t.Fatalf("a request while in debt must wait: %v", gerr)
	}
	// 501 tokens at 1000/h: ceil(501*3.6s) = 1803.6s.
	if want := 1804 * time.Second; (gerr.RetryAfter+time.Second-1)/time.Second*time.Second != want {
		t.Fatalf("Retry-After %v, want %v", gerr.RetryAfter, want)
	}
}

func TestOverrides(t *testing.T) {
	h := newHarness(t)
	ch := h.Chain(route, ratelimittest.Entry(tokenratelimit.Name, map[string]any{
		"completionTokenLimits": limits(100, "1h"), "promptTokenLimits": limits(100000, "1h"),
		"reserveOutput": "maxTokens", "consumerBased": true,
		"overrides": []any{map[string]any{"applications": []any{"vip"}, "completionTokenLimits": limits(5000, "1h")}},
	}))
	if gerr, _ := h.Do(ch, h.Call(route, ratelimittest.Req{App: "vip", MaxTokens: 4000}), ratelimittest.Completed(nil)); gerr != nil {
		t.Fatalf("vip denied: %v", gerr)
	}
	if gerr, _ := h.Do(ch, h.Call(route, ratelimittest.Req{App: "plain", MaxTokens: 4000}), ratelimittest.Completed(nil)); gerr == nil {
		t.Fatal("plain app admitted beyond the default limit")
	}
	// The override keeps the default prompt limit.
	if got := h.Remaining(key(route+":vip", "prompt", "bucket-1h"), hourBucket(100000)); got != 100000-prompt(h, ratelimittest.Req{}) {
		t.Fatalf("vip prompt remaining %d", got)
	}
	if _, err := h.BuildChain(route, ratelimittest.Entry(tokenratelimit.Name, map[string]any{
		"completionTokenLimits": limits(100, "1h"),
		"overrides":             []any{map[string]any{"applications": []any{"vip"}, "completionTokenLimits": limits(5000, "1h")}},
	})); err == nil || !strings.Contains(err.Error(), "consumerBased") {
		t.Fatalf("overrides without consumerBased: %v", err)
	}
}

func TestMaxOutputTokensClamp(t *testing.T) {
	h := newHarness(t)
	ch := h.Chain(route, ratelimittest.Entry(tokenratelimit.Name, map[string]any{
		"completionTokenLimits": limits(1000, "1h"), "reserveOutput": "maxTokens", "maxOutputTokens": 800}))
	steps := []struct {
		ask     int64 // 0: no max_tokens in the request
		wantMax int64 // max_tokens sent upstream; 0: denied
	}{
		{0, 800},   // absent: set to the cap
		{500, 200}, // the budget affords 200: lowered
		{10, 0},    // nothing left: denied
	}
	for i, s := range steps {
		call := h.Call(route, ratelimittest.Req{MaxTokens: s.ask})
		gerr, _ := h.Do(ch, call, policytest.End{Outcome: policies.Outcome{Kind: policies.UpstreamFailed, WentUpstream: true}})
		if s.wantMax == 0 {
			if gerr == nil {
				t.Fatalf("step %d admitted", i)
			}
			continue
		}
		if gerr != nil {
			t.Fatalf("step %d: %v", i, gerr)
		}
		if got := gjson.GetBytes(call.Request.LLM.Raw, "max_tokens").Int(); got != s.wantMax {
			t.Fatalf("step %d: upstream max_tokens %d, want %d", i, got, s.wantMax)
		}
	}
	// Without reserveOutput the cap applies but nothing is reserved for output.
	h2 := newHarness(t)
	ch2 := h2.Chain(route, ratelimittest.Entry(tokenratelimit.Name, map[string]any{
		"completionTokenLimits": limits(1000, "1h"), "maxOutputTokens": 300}))
	call := h2.Call(route, ratelimittest.Req{MaxTokens: 5000})
	if gerr, _ := h2.Do(ch2, call, policytest.End{Outcome: policies.Outcome{Kind: policies.UpstreamFailed, WentUpstream: true}}); gerr != nil {
		t.Fatal(gerr)
	}
	if got := gjson.GetBytes(call.Request.LLM.Raw, "max_tokens").Int(); got != 300 {
		t.Fatalf("capped max_tokens %d", got)
	}
}

func TestHeadersKeepTightest(t *testing.T) {
	h := newHarness(t)
	ch := h.Chain(route,
		ratelimittest.Entry(tokenratelimit.Name, map[string]any{"completionTokenLimits": limits(10000, "1h"), "reserveOutput": "maxTokens"}),
		ratelimittest.Entry(tokenratelimit.Name, map[string]any{"completionTokenLimits": limits(1000, "1m"), "reserveOutput": "maxTokens", "consumerBased": true}),
		ratelimittest.Entry(tokenratelimit.Name, map[string]any{"completionTokenLimits": limits(50000, "1d"), "reserveOutput": "maxTokens"}))
	call := h.Call(route, ratelimittest.Req{App: "a", MaxTokens: 100})
	if gerr, _ := h.Do(ch, call, ratelimittest.Completed(nil)); gerr != nil {
		t.Fatal(gerr)
	}
	hd := ratelimittest.RateHeaders(call)
	if hd.Get("x-ratelimit-limit-tokens") != "1000" || hd.Get("x-ratelimit-remaining-tokens") != "900" {
		t.Fatalf("headers %v", hd)
	}
	// 100 tokens at 1000/min refill in 6s.
	if got := hd.Get("x-ratelimit-reset-tokens"); got != "6s" {
		t.Fatalf("reset %q", got)
	}
}

func TestQuotaReport(t *testing.T) {
	h := newHarness(t)
	ch := h.Chain(route, ratelimittest.Entry(tokenratelimit.Name, map[string]any{
		"completionTokenLimits": limits(1000, "1h"), "reserveOutput": "maxTokens", "consumerBased": true,
		"modelRules": []any{map[string]any{"match": "gpt-4*", "completionTokenLimits": limits(500, "1h")}}}))
	call := h.Call(route, ratelimittest.Req{App: "a", MaxTokens: 100})
	if gerr, _ := h.Do(ch, call, policytest.End{Outcome: policies.Outcome{Kind: policies.UpstreamFailed, WentUpstream: true}}); gerr != nil {
		t.Fatal(gerr)
	}
	lines := ch.Entries()[0].Policy.(policies.QuotaReporter).Quota(h.Call(route, ratelimittest.Req{App: "a"}))
	if len(lines) != 2 {
		t.Fatalf("lines %+v", lines)
	}
	if l := lines[0]; l.Scope != route+":a" || l.Dimension != "completion" || l.Limit != 1000 || l.Remaining != 900 || l.Unit != policies.UnitTokens {
		t.Fatalf("line 0 %+v", l)
	}
	if l := lines[1]; l.Dimension != "completion:model:gpt-4*" || l.Remaining != 400 {
		t.Fatalf("line 1 %+v", l)
	}
}

// refused are params the policy refuses, with its errors in its order.
var refused = []ratelimittest.Refused{
	{Name: "no limits", Params: map[string]any{},
		Want: []string{"set at least one of promptTokenLimits, completionTokenLimits, totalTokenLimits or modelRules"}},
	{Name: "zero count", Params: map[string]any{"totalTokenLimits": []any{map[string]any{"count": 0, "duration": "1h"}}}, Schema: true,
		Want: []string{"totalTokenLimits.0.count: minimum: got 0, want 1"}},
	{Name: "duration twice", Params: map[string]any{"totalTokenLimits": append(limits(1, "1h"), limits(2, "1h")...)},
		Want: []string{"totalTokenLimits.1.duration: duration 1h0m0s is listed twice"}},
	{Name: "star inside a match", Params: map[string]any{"totalTokenLimits": limits(1, "1h"),
		"modelRules": []any{map[string]any{"match": "a*b", "totalTokenLimits": limits(1, "1h")}}},
		Want: []string{`modelRules: rule 0: match "a*b": "*" is only allowed at the end`}},
	{Name: "model rule without limits", Params: map[string]any{"totalTokenLimits": limits(1, "1h"), "modelRules": []any{map[string]any{"match": "a"}}},
		Want: []string{"modelRules.0: a model rule needs at least one limit"}},
	{Name: "unknown algorithm", Params: map[string]any{"totalTokenLimits": limits(1, "1h"), "algorithm": "leaky"}, Schema: true,
		Want: []string{"algorithm: value must be one of 'token-bucket', 'fixed-window', 'calendar'"}},
	{Name: "window of a fraction of a second", Params: map[string]any{"totalTokenLimits": limits(1, "1500ms"), "algorithm": "fixed-window"},
		Want: []string{"totalTokenLimits.0.duration: duration 1.5s: a window must be a whole number of seconds"}},
	{Name: "overrides of a route limit", Params: map[string]any{"totalTokenLimits": limits(1, "1h"),
		"overrides": []any{map[string]any{"applications": []any{"a"}, "totalTokenLimits": limits(2, "1h")}}},
		Want: []string{"overrides: overrides are per application: they need consumerBased: true"}},
	{Name: "every kind at once", Params: map[string]any{"algorithm": "fixed-window", "promptTokenLimits": limits(1, "1500ms"),
		"modelRules": []any{
			map[string]any{"match": "a", "completionTokenLimits": append(limits(1, "1h"), limits(2, "1h")...)},
			map[string]any{"match": "a", "totalTokenLimits": limits(1, "2500ms")},
		},
		"consumerBased": true,
		"overrides": []any{
			map[string]any{"applications": []any{"x", "y"}},
			map[string]any{"applications": []any{"y", ""}, "promptTokenLimits": limits(3, "1h"), "totalTokenLimits": append(limits(1, "1m"), limits(2, "1m")...)},
		}},
		Want: []string{
			"promptTokenLimits.0.duration: duration 1.5s: a window must be a whole number of seconds",
			"modelRules.0.completionTokenLimits.1.duration: duration 1h0m0s is listed twice",
			"modelRules.1.totalTokenLimits.0.duration: duration 2.5s: a window must be a whole number of seconds",
			`modelRules: rule 1: match "a" is listed twice`,
			"overrides.0: an override needs at least one limit",
			"overrides.1.totalTokenLimits.1.duration: duration 1m0s is listed twice",
			`overrides.1.applications.0: application "y" is empty or listed in two overrides`,
			`overrides.1.applications.1: application "" is empty or listed in two overrides`,
		}},
}

func TestValidation(t *testing.T) {
	newHarness(t).CheckValidation(tokenratelimit.Definition(), route, refused)
}

// TestBuildChecksParams: build computes the limits with the same function
// as Validate, so params that skipped Validate are refused with its errors,
// never built into an engine Validate would have refused.
func TestBuildChecksParams(t *testing.T) {
	newHarness(t).CheckBuild(tokenratelimit.Definition(), route, refused, map[string]any{"totalTokenLimits": limits(1, "1h")})
}

// TestInvariantRandomOutcomes runs thousands of concurrent requests with random
// outcomes and checks that every reservation is resolved and the counter holds
// exactly the sum of the final charges.
func TestInvariantRandomOutcomes(t *testing.T) {
	h := newHarness(t)
	const limit = 1 << 40
	ch := h.Chain(route, ratelimittest.Entry(tokenratelimit.Name, map[string]any{
		"completionTokenLimits": limits(limit, "1h"), "reserveOutput": "maxTokens", "consumerBased": true}))
	const workers, per = 16, 250
	var charged [4]atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			app := []string{"a", "b", "c", "d"}[w%4]
			for range per {
				maxT := 1 + rng.Int64N(500)
				var o policytest.End
				var final int64
				switch rng.IntN(6) {
				case 0:
					real := rng.Int64N(1000)
					o, final = ratelimittest.Completed(ratelimittest.Usage(3, real, 1)), real
				case 1:
					o, final = ratelimittest.Completed(nil), maxT
				case 2:
					o, final = policytest.End{Outcome: policies.Outcome{Kind: policies.Cancelled, WentUpstream: true}}, maxT
				case 3:
					o, final = policytest.End{Outcome: policies.Outcome{Kind: policies.UpstreamFailed, WentUpstream: true}}, maxT
				case 4:
					o, final = policytest.End{Outcome: policies.Outcome{Kind: policies.Failed}}, 0
				case 5:
					o, final = ratelimittest.Completed(ratelimittest.Usage(0, 0, 1)), 0
				}
				if gerr, _ := h.Do(ch, h.Call(route, ratelimittest.Req{App: app, MaxTokens: maxT}), o); gerr != nil {
					t.Error(gerr)
					return
				}
				charged[w%4].Add(final)
			}
		}()
	}
	wg.Wait()
	eng := ch.Entries()[0].Policy.(*tokenratelimit.Policy).Engine()
	if n := eng.OpenReservations(); n != 0 {
		t.Fatalf("open reservations %d", n)
	}
	if n := h.Gauge("sluice_ratelimit_open_reservations", nil); n != 0 {
		t.Fatalf("open reservations gauge %v", n)
	}
	l := hourBucket(limit)
	for i, app := range []string{"a", "b", "c", "d"} {
		if got := limit - h.Remaining(key(route+":"+app, "completion", "bucket-1h"), l); got != charged[i].Load() {
			t.Errorf("app %s: counter charged %d, outcomes charged %d", app, got, charged[i].Load())
		}
	}
}

// TestOverAdmissionBound: 200 goroutines race for one consumer limit; the
// admitted estimates never exceed the limit.
func TestOverAdmissionBound(t *testing.T) {
	h := newHarness(t)
	ch := h.Chain(route, ratelimittest.Entry(tokenratelimit.Name, map[string]any{
		"completionTokenLimits": limits(10000, "1h"), "reserveOutput": "maxTokens", "consumerBased": true}))
	var admitted atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			call := h.Call(route, ratelimittest.Req{App: "hot", MaxTokens: 300})
			run := ch.Start(call)
			if run.Request() == nil {
				admitted.Add(300)
				run.MarkUpstream()
				policytest.Finish(run, ratelimittest.Completed(ratelimittest.Usage(0, 300, 1)))
			}
		}()
	}
	close(start)
	wg.Wait()
	if got := admitted.Load(); got > 10000 || got < 9900 {
		t.Fatalf("admitted %d tokens against a limit of 10000", got)
	}
	if r := h.Remaining(key(route+":hot", "completion", "bucket-1h"), hourBucket(10000)); r < 0 {
		t.Fatalf("remaining %d", r)
	}
}

func BenchmarkRequestFinal(b *testing.B) {
	// tokenize=false pre-seeds the shared prompt estimate, isolating the
	// engine and the memory store from the tokenizer.
	for _, bc := range []struct {
		consumers int
		tokenize  bool
	}{{1, true}, {100000, true}, {1, false}, {100000, false}} {
		consumers := bc.consumers
		name := "consumers=" + itoa(consumers)
		if !bc.tokenize {
			name += "/estimate-cached"
		}
		b.Run(name, func(b *testing.B) {
			h := newHarness(b)
			ch := h.Chain(route, ratelimittest.Entry(tokenratelimit.Name, map[string]any{
				"totalTokenLimits": limits(1<<50, "1m"), "consumerBased": true}))
			apps := make([]string, consumers)
			for i := range apps {
				apps[i] = "app-" + string(rune('a'+i%26)) + itoa(i)
			}
			call := h.Call(route, ratelimittest.Req{MaxTokens: 100})
			usage := ratelimittest.Usage(10, 90, 1)
			out := ratelimittest.Completed(usage)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				call.Shared.Metadata = map[string]any{"x-application-id": apps[i%consumers]}
				if !bc.tokenize {
					call.Shared.Metadata[policies.PromptEstimateKey] = int64(12)
				}
				run := ch.Start(call)
				if gerr := run.Request(); gerr != nil {
					b.Fatal(gerr)
				}
				run.MarkUpstream()
				policytest.Finish(run, out)
			}
		})
	}
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var buf [20]byte
	n := len(buf)
	for i > 0 {
		n--
		buf[n] = byte('0' + i%10)
		i /= 10
	}
	return string(buf[n:])
}

func TestRulesOnlyUnmatchedModelPasses(t *testing.T) {
	h := newHarness(t)
	ch := h.Chain(route, ratelimittest.Entry(tokenratelimit.Name, map[string]any{
		"reserveOutput": "maxTokens",
		"modelRules":    []any{map[string]any{"match": "gpt-4*", "completionTokenLimits": limits(10, "1h")}}}))
	if gerr, _ := h.Do(ch, h.Call(route, ratelimittest.Req{Model: "o3", MaxTokens: 500}), ratelimittest.Completed(nil)); gerr != nil {
		t.Fatal(gerr)
	}
	if gerr, _ := h.Do(ch, h.Call(route, ratelimittest.Req{Model: "gpt-4o", MaxTokens: 500}), ratelimittest.Completed(nil)); gerr == nil {
		t.Fatal("rule not applied")
	}
	if n := ch.Entries()[0].Policy.(*tokenratelimit.Policy).Engine().OpenReservations(); n != 0 {
		t.Fatalf("open %d", n)
	}
}

// TestApplicationRefs: every overridden application is reported with its
// param path, for the deployment check of undefined application ids.
func TestApplicationRefs(t *testing.T) {
	p := &tokenratelimit.Params{Overrides: []tokenratelimit.Override{
		{Applications: []string{"app-a", "default"}},
		{Applications: []string{"app-b"}},
	}}
	var got []string
	for _, r := range p.ApplicationRefs() {
		got = append(got, strings.Join(r.Path, ".")+"="+r.ID)
	}
	want := "overrides.0.applications.0=app-a overrides.0.applications.1=default overrides.1.applications.0=app-b"
	if strings.Join(got, " ") != want {
		t.Fatalf("refs = %v, want %s", got, want)
	}
}
