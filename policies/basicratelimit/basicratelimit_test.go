package basicratelimit_test

import (
	"testing"
	"time"

	"sluice/counter"
	"sluice/gwerror"
	"sluice/policies"
	"sluice/policies/basicratelimit"
	"sluice/policies/policytest"
	"sluice/policies/ratelimit/ratelimittest"
)

const route = "r"

func TestRequestCounting(t *testing.T) {
	cases := []struct {
		name    string
		o       policytest.End
		reject  bool
		charged int64
	}{
		{"completed counts", ratelimittest.Completed(ratelimittest.Usage(10, 10, 1)), false, 1},
		{"completed without usage counts", ratelimittest.Completed(nil), false, 1},
		{"upstream failure counts", policytest.End{Outcome: policies.Outcome{Kind: policies.UpstreamFailed, WentUpstream: true}}, false, 1},
		{"cancelled counts", policytest.End{Outcome: policies.Outcome{Kind: policies.Cancelled, WentUpstream: true}}, false, 1},
		{"later rejection refunds", ratelimittest.Completed(nil), true, 0},
	}
	l := counter.Limit{Algorithm: counter.TokenBucket, Max: 5, Period: time.Minute}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := ratelimittest.New(t, basicratelimit.Definition())
			specs := []policies.EntrySpec{ratelimittest.Entry(basicratelimit.Name, map[string]any{
				"limits": []any{map[string]any{"requests": 5, "duration": "1m"}}, "consumerBased": true})}
			if tc.reject {
				specs = append(specs, ratelimittest.Entry(ratelimittest.RejectName, nil))
			}
			ch := h.Chain(route, specs...)
			h.Do(ch, h.Call(route, ratelimittest.Req{App: "a"}), tc.o)
			if got := 5 - h.Remaining("{r:a}:basic-ratelimit:requests:bucket-1m", l); got != tc.charged {
				t.Fatalf("charged %d, want %d", got, tc.charged)
			}
		})
	}
}

func TestDenialAndHeaders(t *testing.T) {
	h := ratelimittest.New(t, basicratelimit.Definition())
	ch := h.Chain(route, ratelimittest.Entry(basicratelimit.Name, map[string]any{
		"limits": []any{map[string]any{"requests": 2, "duration": "1m"}, map[string]any{"requests": 100, "duration": "1d"}}}))
	for i := range 2 {
		call := h.Call(route, ratelimittest.Req{})
		if gerr, _ := h.Do(ch, call, ratelimittest.Completed(nil)); gerr != nil {
			t.Fatal(gerr)
		}
		if got, want := ratelimittest.RateHeaders(call).Get("x-ratelimit-remaining-requests"), []string{"1", "0"}[i]; got != want {
			t.Fatalf("request %d: remaining header %q, want %q", i, got, want)
		}
	}
	gerr, _ := h.Do(ch, h.Call(route, ratelimittest.Req{}), ratelimittest.Completed(nil))
	if gerr == nil || gerr.Code != gwerror.CodeRateLimitExceeded {
		t.Fatalf("want rate_limit_exceeded, got %v", gerr)
	}
	// One request at 2 per minute refills in 30s.
	if gerr.RetryAfter != 30*time.Second {
		t.Fatalf("Retry-After %v", gerr.RetryAfter)
	}
	if dh := ratelimittest.DenialHeaders(gerr); dh.Get("x-ratelimit-limit-requests") != "2" || dh.Get("x-ratelimit-remaining-requests") != "0" {
		t.Fatalf("denial headers %v", dh)
	}
}

func requests(n int, d string) map[string]any { return map[string]any{"requests": n, "duration": d} }

// refused are params the policy refuses, with its errors in its order.
var refused = []ratelimittest.Refused{
	{Name: "no limits", Params: map[string]any{"limits": []any{}}, Schema: true, Want: []string{"limits: minItems: got 0, want 1"}},
	{Name: "duration twice", Params: map[string]any{"limits": []any{requests(1, "1s"), requests(2, "1m"), requests(3, "1s")}},
		Want: []string{"limits.2.duration: duration 1s is listed twice"}},
	{Name: "windows of a fraction of a second", Params: map[string]any{"limits": []any{requests(1, "1500ms"), requests(2, "1500ms")}, "algorithm": "calendar"},
		Want: []string{
			"limits.0.duration: duration 1.5s: a window must be a whole number of seconds",
			"limits.1.duration: duration 1.5s: a window must be a whole number of seconds",
			"limits.1.duration: duration 1.5s is listed twice",
		}},
}

func TestValidation(t *testing.T) {
	ratelimittest.New(t, basicratelimit.Definition()).CheckValidation(basicratelimit.Definition(), route, refused)
}

// TestBuildChecksParams: build computes the limits with the same function
// as Validate, so params that skipped Validate are refused with its errors.
func TestBuildChecksParams(t *testing.T) {
	ratelimittest.New(t, basicratelimit.Definition()).CheckBuild(basicratelimit.Definition(), route, refused,
		map[string]any{"limits": []any{requests(1, "1s")}})
}
