package ratelimit_test

import (
	"testing"
	"time"

	"sluice/counter"
	"sluice/policies/ratelimit"
)

// route is the route of the tests' chains and engines.
const route = "r"

func TestLimitFor(t *testing.T) {
	cases := []struct {
		alg    string
		d      time.Duration
		want   counter.Algorithm
		label  string
		budget bool
		err    bool
	}{
		{"", time.Minute, counter.TokenBucket, "bucket-1m", false, false},
		{"", 24 * time.Hour, counter.FixedWindow, "window-1d", true, false},
		{"", 90 * time.Minute, counter.TokenBucket, "bucket-90m", false, false},
		{"fixed-window", time.Hour, counter.FixedWindow, "window-1h", false, false},
		{"token-bucket", 48 * time.Hour, counter.TokenBucket, "bucket-2d", false, false},
		{"calendar", 720 * time.Hour, counter.CalendarMonth, "month", true, false},
		{"calendar", 7 * 24 * time.Hour, counter.FixedWindow, "window-7d", true, false},
		{"fixed-window", 1500 * time.Millisecond, 0, "", false, true},
		{"sliding", time.Minute, 0, "", false, true},
	}
	for _, tc := range cases {
		l, err := ratelimit.LimitFor(tc.alg, tc.d, 10)
		if tc.err {
			if err == nil {
				t.Errorf("%s %v: no error", tc.alg, tc.d)
			}
			continue
		}
		if err != nil || l.Algorithm != tc.want || ratelimit.PeriodLabel(l) != tc.label || ratelimit.IsBudget(ratelimit.UnitTokens, l) != tc.budget {
			t.Errorf("%s %v: got %+v %q budget=%v err=%v", tc.alg, tc.d, l, ratelimit.PeriodLabel(l), ratelimit.IsBudget(ratelimit.UnitTokens, l), err)
		}
	}
	if !ratelimit.IsBudget(ratelimit.UnitUSDMicros, counter.Limit{Algorithm: counter.TokenBucket, Max: 1, Period: time.Minute}) {
		t.Error("money is always a budget")
	}
}

func TestResetString(t *testing.T) {
	cases := map[time.Duration]string{
		0:                       "0s",
		17 * time.Millisecond:   "17ms",
		1500 * time.Microsecond: "2ms",
		time.Second:             "1s",
		1001 * time.Millisecond: "2s",
		6 * time.Minute:         "6m0s",
		time.Hour + time.Second: "1h0m1s",
	}
	for d, want := range cases {
		if got := ratelimit.ResetString(d); got != want {
			t.Errorf("ResetString(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestModelMatcher(t *testing.T) {
	m, err := ratelimit.NewModelMatcher([]string{"gpt-4*", "gpt-4o", "gpt-4o*", "*"})
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]int{"gpt-4o": 1, "gpt-4o-mini": 2, "gpt-4.1": 0, "claude": 3}
	for model, want := range cases {
		if got := m.Match(model); got != want {
			t.Errorf("Match(%q) = %d, want %d", model, got, want)
		}
	}
	for _, bad := range [][]string{{""}, {"a", "a"}, {"a*b"}} {
		if _, err := ratelimit.NewModelMatcher(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
