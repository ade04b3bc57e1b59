package ratelimit_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"sluice/counter"
	"sluice/policies"
	"sluice/policies/ratelimit"
)

// entry is a LimitEntry whose Capacity may be bad.
type entry struct {
	max int64
	d   time.Duration
	bad string
}

func (e entry) Capacity() (int64, time.Duration, *policies.ParamError) {
	if e.bad != "" {
		return 0, e.d, &policies.ParamError{Path: []string{"amount"}, Message: e.bad}
	}
	return e.max, e.d, nil
}

func messages(es policies.ParamErrors) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.Error())
	}
	return out
}

func TestAddLimits(t *testing.T) {
	cases := []struct {
		name    string
		alg     string
		list    []entry
		idx     []int
		periods []string
		errs    []string
	}{
		{"one limit per entry", "", []entry{{5, time.Minute, ""}, {50, 24 * time.Hour, ""}}, []int{1, 2}, []string{"bucket-1m", "window-1d"}, nil},
		{"duration twice", "", []entry{{5, time.Minute, ""}, {6, time.Hour, ""}, {7, time.Minute, ""}}, []int{1, 2, 3},
			[]string{"bucket-1m", "bucket-1h", "bucket-1m"}, []string{"rule.0.list.2.duration: duration 1m0s is listed twice"}},
		{"bad capacity", "", []entry{{0, time.Minute, "too small"}, {1, time.Hour, ""}}, []int{1}, []string{"bucket-1h"},
			[]string{"rule.0.list.0.amount: too small"}},
		{"bad entries count in the duplicate check", "fixed-window", []entry{{1, 1500 * time.Millisecond, ""}, {2, 1500 * time.Millisecond, "x"}}, nil, nil,
			[]string{
				"rule.0.list.0.duration: duration 1.5s: a window must be a whole number of seconds",
				"rule.0.list.1.amount: x",
				"rule.0.list.1.duration: duration 1.5s is listed twice",
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// One limit is already there: indexes continue after it.
			s := &ratelimit.LimitSet{Algorithm: tc.alg, Limits: []ratelimit.Limit{{Meter: 0}}}
			idx := ratelimit.AddLimits(s, []string{"rule", "0", "list"}, 2, "gpt-4*", tc.list)
			if !slices.Equal(idx, tc.idx) {
				t.Errorf("indexes %v, want %v", idx, tc.idx)
			}
			var periods []string
			for _, l := range s.Limits[1:] {
				if l.Meter != 2 || l.Rule != "gpt-4*" {
					t.Errorf("limit %+v, want meter 2 of rule gpt-4*", l)
				}
				periods = append(periods, ratelimit.PeriodLabel(l.Capacity))
			}
			if !slices.Equal(periods, tc.periods) {
				t.Errorf("periods %v, want %v", periods, tc.periods)
			}
			if got := messages(s.Errs); !slices.Equal(got, tc.errs) {
				t.Errorf("errors %q, want %q", got, tc.errs)
			}
			if (s.Err() == nil) != (len(tc.errs) == 0) {
				t.Errorf("Err() = %v with errors %q", s.Err(), tc.errs)
			}
		})
	}
	if s := (&ratelimit.LimitSet{}); s.Err() != nil {
		t.Errorf("Err() of no errors = %#v, want nil", s.Err())
	}
	s := &ratelimit.LimitSet{}
	ratelimit.AddLimits(s, nil, 0, "", []ratelimit.CountLimit{{Count: 3, Duration: policies.Duration(time.Hour)}})
	if want := (counter.Limit{Algorithm: counter.TokenBucket, Max: 3, Period: time.Hour}); len(s.Limits) != 1 || s.Limits[0].Capacity != want {
		t.Errorf("CountLimit limits %+v, want %+v", s.Limits, want)
	}
}

func TestOverrides(t *testing.T) {
	s := &ratelimit.LimitSet{}
	s.CheckOverrides(true, 2)
	s.AddOverride(0, []string{"a", "b", "a"})
	s.AddOverride(1, []string{"c", "", "b"})
	want := []string{
		`overrides.0.applications.2: application "a" is empty or listed in two overrides`,
		`overrides.1.applications.1: application "" is empty or listed in two overrides`,
		`overrides.1.applications.2: application "b" is empty or listed in two overrides`,
	}
	if got := messages(s.Errs); !slices.Equal(got, want) {
		t.Errorf("errors %q, want %q", got, want)
	}
	if s.OverrideOf["a"] != 1 || s.OverrideOf["b"] != 1 || s.OverrideOf["c"] != 2 || len(s.OverrideOf) != 3 {
		t.Errorf("OverrideOf %v", s.OverrideOf)
	}
	s = &ratelimit.LimitSet{}
	s.CheckOverrides(false, 0)
	if s.Err() != nil {
		t.Errorf("no overrides on a route limit: %v", s.Err())
	}
	s.CheckOverrides(false, 1)
	if got := messages(s.Errs); !slices.Equal(got, []string{"overrides: overrides are per application: they need consumerBased: true"}) {
		t.Errorf("overrides on a route limit: %q", got)
	}
	apps := [][]string{{"a"}, {"b", "c"}}
	var refs []string
	for _, r := range ratelimit.OverrideRefs(len(apps), func(i int) []string { return apps[i] }) {
		refs = append(refs, strings.Join(r.Path, ".")+"="+r.ID)
	}
	if got, want := strings.Join(refs, " "), "overrides.0.applications.0=a overrides.1.applications.0=b overrides.1.applications.1=c"; got != want {
		t.Errorf("refs %s, want %s", got, want)
	}
}
