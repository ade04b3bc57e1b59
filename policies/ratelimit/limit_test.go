package ratelimit_test

import (
	"testing"
	"time"

	"sluice/counter"
	"sluice/policies"
	"sluice/policies/ratelimit"
)

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
		if err != nil || l.Algorithm != tc.want || ratelimit.PeriodLabel(l) != tc.label || ratelimit.IsBudget(policies.UnitTokens, l) != tc.budget {
			t.Errorf("%s %v: got %+v %q budget=%v err=%v", tc.alg, tc.d, l, ratelimit.PeriodLabel(l), ratelimit.IsBudget(policies.UnitTokens, l), err)
		}
	}
	if !ratelimit.IsBudget(policies.UnitUSDMicros, counter.Limit{Algorithm: counter.TokenBucket, Max: 1, Period: time.Minute}) {
		t.Error("money is always a budget")
	}
}
