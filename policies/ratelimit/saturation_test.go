package ratelimit_test

import (
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"sluice/counter/countertest"
	"sluice/policies"
	"sluice/policies/ratelimit"
	"sluice/policies/ratelimit/ratelimittest"
)

// TestSaturatedAdmissions: amounts that overflow int64 saturate and are denied
// as requests that can never be admitted, also on a counter that already
// holds usage (where an unsaturated or uncapped amount would wrap the
// store's used + amount); the output clamp still finds what fits.
func TestSaturatedAdmissions(t *testing.T) {
	lim := countertest.Window(2000, time.Hour)
	for _, tc := range []struct {
		name       string
		adm        ratelimit.Admission
		admitted   bool
		wantOutput int64 // per choice, when admitted
		need       string
	}{
		{name: "output x choices wraps to 8", adm: ratelimit.Admission{Output: 1<<62 + 2, Choices: 4, OutputMeters: 1},
			need: "9223372036854775807 tokens"},
		{name: "output x choices overflows", adm: ratelimit.Admission{Output: math.MaxInt64, Choices: 128, OutputMeters: 1},
			need: "9223372036854775807 tokens"},
		{name: "prompt + output overflows", adm: ratelimit.Admission{Amounts: ratelimit.Amounts{math.MaxInt64 - 5}, Output: 10, Choices: 1, OutputMeters: 1},
			need: "9223372036854775807 tokens"},
		{name: "an amount just above the capacity", adm: ratelimit.Admission{Amounts: ratelimit.Amounts{2001}},
			need: "2001 tokens"},
		{name: "clamped to what fits", adm: ratelimit.Admission{Amounts: ratelimit.Amounts{10}, Output: 1 << 62, Choices: 4, OutputMeters: 1, ClampOutput: true},
			admitted: true, wantOutput: (2000 - 100 - 10) / 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := ratelimittest.New(t)
			eng, err := ratelimit.New(ratelimit.Options{Policy: "test-limit", Route: policies.RouteInfo{RouteName: route, InstanceID: "i1"},
				Services: h.Svc, Meters: []ratelimit.Meter{{Name: "total", Unit: policies.UnitTokens}},
				Limits: []ratelimit.Limit{{Meter: 0, Capacity: lim}}})
			if err != nil {
				t.Fatal(err)
			}
			scope := eng.Scope("", func(string) string { return route })
			// Usage already on the counter: 100 tokens.
			first := ratelimit.Admission{Scope: scope, Counters: []int{0}, Amounts: ratelimit.Amounts{100}}
			if _, gerr := eng.Reserve(h.Call(route, ratelimittest.Req{}), &first); gerr != nil {
				t.Fatal(gerr)
			}
			a := tc.adm
			a.Scope, a.Counters = scope, []int{0}
			c := h.Call(route, ratelimittest.Req{})
			r, gerr := eng.Reserve(c, &a)
			key := scope.Keys[0]
			if !tc.admitted {
				if gerr == nil || gerr.Status != http.StatusTooManyRequests || !strings.Contains(gerr.Message, "can never be admitted") ||
					!strings.Contains(gerr.Message, tc.need) || gerr.RetryAfter != 0 {
					t.Fatalf("got %+v, want a 429 that can never be admitted, needing %s", gerr, tc.need)
				}
				if got := h.Remaining(key, lim); got != 1900 {
					t.Fatalf("remaining %d after a denial, want 1900", got)
				}
				if n := h.Gauge("sluice_ratelimit_denials_total", map[string]string{"reason": "exceeds_capacity"}); n != 1 {
					t.Fatalf("exceeds_capacity denials %v", n)
				}
				return
			}
			if gerr != nil {
				t.Fatal(gerr)
			}
			if r.Output != tc.wantOutput {
				t.Fatalf("clamped to %d per choice, want %d", r.Output, tc.wantOutput)
			}
			if got := h.Remaining(key, lim); got != 1900-10-4*tc.wantOutput {
				t.Fatalf("remaining %d", got)
			}
		})
	}
}
