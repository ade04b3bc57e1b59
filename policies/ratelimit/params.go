package ratelimit

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"sluice/policies"
)

// CountLimit is a `{count, duration}` params entry (token and request limits).
type CountLimit struct {
	// Count is the number of units allowed per duration.
	Count int64 `json:"count" jsonschema:"required,minimum=1"`
	// Duration is the period: "1m", "1h", "1d"; with the calendar algorithm
	// "30d" (720h) is the UTC calendar month.
	Duration policies.Duration `json:"duration" jsonschema:"required"`
}

// Capacity is the entry's count per duration (LimitEntry).
func (l CountLimit) Capacity() (int64, time.Duration, *policies.ParamError) {
	return l.Count, l.Duration.D(), nil
}

// LimitEntry is one entry of a params list of limits: `{count, duration}`,
// `{requests, duration}`, `{amount, duration}`...
type LimitEntry interface {
	// Capacity is the entry's max, in its meter's unit, per period d. A
	// non-nil bad is a wrong value, its Path relative to the entry
	// (["amount"]); the entry then makes no limit.
	Capacity() (max int64, d time.Duration, bad *policies.ParamError)
}

// LimitSet is what a limit policy's params compile to: the engine's limits,
// the applications of its overrides, and every params error found on the
// way, in params order. A policy's Validate and its build share one compile
// function that fills a LimitSet, so that what Validate accepts is exactly
// what build constructs: Validate returns Err, build refuses it too and
// hands Limits to New.
type LimitSet struct {
	// Algorithm is the params' algorithm (see LimitFor).
	Algorithm string
	Limits    []Limit
	// OverrideOf maps each application of the params' overrides to its
	// limit group, i+1 for overrides[i] (AddOverride); other applications
	// have the default limits, group 0.
	OverrideOf map[string]int
	Errs       policies.ParamErrors
}

// AddLimits appends the limits of list, the params field at path
// (["modelRules", "0", "totalTokenLimits"]), on meter and for model rule
// rule ("" for the policy's own limits), and returns their indexes in
// s.Limits. An entry whose Capacity is bad, or that LimitFor refuses
// (reported at <path>.<i>.duration), adds an error instead of a limit, and
// so does a duration listed twice in list (the two would share a counter
// key), at the second entry.
func AddLimits[E LimitEntry](s *LimitSet, path []string, meter int, rule string, list []E) []int {
	var idx []int
	ds := make([]time.Duration, len(list))
	for i, e := range list {
		n, d, bad := e.Capacity()
		ds[i] = d
		if bad != nil {
			s.Errs = append(s.Errs, &policies.ParamError{Path: slices.Concat(path, []string{strconv.Itoa(i)}, bad.Path), Message: bad.Message, Kind: bad.Kind})
			continue
		}
		l, err := LimitFor(s.Algorithm, d, n)
		if err != nil {
			s.Errorf(slices.Concat(path, ParamPath(i, "duration")), "%v", err)
			continue
		}
		idx = append(idx, len(s.Limits))
		s.Limits = append(s.Limits, Limit{Meter: meter, Capacity: l, Rule: rule})
	}
	if i := repeatedDuration(ds); i >= 0 {
		s.Errorf(slices.Concat(path, ParamPath(i, "duration")), "duration %v is listed twice", ds[i])
	}
	return idx
}

// repeatedDuration is the index of the first duration of ds listed before
// it, or -1.
func repeatedDuration(ds []time.Duration) int {
	seen := make(map[time.Duration]bool, len(ds))
	for i, d := range ds {
		if seen[d] {
			return i
		}
		seen[d] = true
	}
	return -1
}

// CheckOverrides refuses the n overrides of a limit kept per route:
// overrides are per application.
func (s *LimitSet) CheckOverrides(consumerBased bool, n int) {
	if n > 0 && !consumerBased {
		s.Errorf([]string{"overrides"}, "overrides are per application: they need consumerBased: true")
	}
}

// AddOverride maps apps, the applications of overrides[i], to limit group
// i+1 in s.OverrideOf. An empty id, or one an earlier entry lists, is an
// error at its path (overrides.<i>.applications.<j>).
func (s *LimitSet) AddOverride(i int, apps []string) {
	if s.OverrideOf == nil {
		s.OverrideOf = map[string]int{}
	}
	for j, app := range apps {
		if _, seen := s.OverrideOf[app]; app == "" || seen {
			s.Errorf(ParamPath("overrides", i, "applications", j), "application %q is empty or listed in two overrides", app)
			continue
		}
		s.OverrideOf[app] = i + 1
	}
}

// Errorf adds an error at path.
func (s *LimitSet) Errorf(path []string, format string, args ...any) {
	s.Errs = append(s.Errs, &policies.ParamError{Path: path, Message: fmt.Sprintf(format, args...)})
}

// Err is s.Errs as an error, nil when there are none.
func (s *LimitSet) Err() error {
	if len(s.Errs) == 0 {
		return nil
	}
	return s.Errs
}

// OverrideRefs names the applications of n overrides (apps(i) lists those
// of overrides[i]) at their param paths, for policies.ApplicationReferrer.
func OverrideRefs(n int, apps func(i int) []string) []policies.ParamRef {
	var refs []policies.ParamRef
	for i := range n {
		for j, app := range apps(i) {
			refs = append(refs, policies.ParamRef{Path: ParamPath("overrides", i, "applications", j), ID: app})
		}
	}
	return refs
}

// ParamPath builds a ParamError path from mixed parts.
func ParamPath(parts ...any) []string {
	out := make([]string, len(parts))
	for i, p := range parts {
		switch v := p.(type) {
		case string:
			out[i] = v
		case int:
			out[i] = strconv.Itoa(v)
		default:
			out[i] = fmt.Sprint(v)
		}
	}
	return out
}
