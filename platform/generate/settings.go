package generate

import (
	"fmt"
	"math"
	"time"

	"sluice/deployment"
)

// RateLimits is a provider's Rate Limit settings: limits shared by every
// application (Backend) and limits per application (Consumer). JSON field
// names are the API's.
type RateLimits struct {
	Backend  *Scope `json:"backend,omitempty"`
	Consumer *Scope `json:"consumer,omitempty"`
}

// Scope holds one of Global (one counter across every resource) or
// PerResource.
type Scope struct {
	Global      *Limits      `json:"global,omitempty"`
	PerResource *PerResource `json:"perResource,omitempty"`
}

// PerResource gives listed resources their own limits, and Default to each
// resource not listed (one counter per resource in both cases).
type PerResource struct {
	Default   *Limits         `json:"default,omitempty"`
	Resources []ResourceLimit `json:"resources,omitempty"`
}

// ResourceLimit is the limit set of one resource ("/chat/completions").
type ResourceLimit struct {
	Resource string `json:"resource"`
	Limit    Limits `json:"limit"`
}

// Limits is up to one request, token and cost limit.
type Limits struct {
	Request *CountLimit `json:"request,omitempty"`
	Token   *CountLimit `json:"token,omitempty"`
	Cost    *CostLimit  `json:"cost,omitempty"`
}

// CountLimit is Count requests or tokens per Reset. A disabled limit is kept
// in the settings and generates nothing.
type CountLimit struct {
	Enabled bool  `json:"enabled"`
	Count   int64 `json:"count"`
	Reset   Reset `json:"reset"`
	// AlertAt are the budget alert thresholds, in percent of Count
	// (validAlertAt).
	AlertAt []int `json:"alertAt,omitempty"`
}

// CostLimit is Amount USD per Reset.
type CostLimit struct {
	Enabled bool    `json:"enabled"`
	Amount  float64 `json:"amount"`
	Reset   Reset   `json:"reset"`
	// AlertAt are the budget alert thresholds, in percent of Amount
	// (validAlertAt).
	AlertAt []int `json:"alertAt,omitempty"`
}

// Reset is the period: Duration units of Unit.
type Reset struct {
	Duration int64 `json:"duration"`
	// Unit is minute, hour, day, week or month.
	Unit string `json:"unit"`
}

// Units of Reset.
const (
	Minute = "minute"
	Hour   = "hour"
	Day    = "day"
	Week   = "week"
	Month  = "month"
)

// MaxAlerts bounds the thresholds of one limit.
const MaxAlerts = 10

// Period is r as the limit policies count it: the period and the algorithm
// ("token-bucket", "fixed-window" or "calendar"; see period).
func (r Reset) Period() (time.Duration, string, error) { return period(r) }

// Text is r as people read it: "1 hour", "2 days".
func (r Reset) Text() string {
	if r.Duration == 1 {
		return "1 " + r.Unit
	}
	return fmt.Sprintf("%d %ss", r.Duration, r.Unit)
}

// Units lists the units in order.
var Units = []string{Minute, Hour, Day, Week, Month}

// Problem is one invalid setting. Path is a JSON path into the settings
// document ("$.consumer.global.token.count").
type Problem struct {
	Path    string `json:"path"`
	Message string `json:"message"`
}

func (p Problem) Error() string { return p.Path + ": " + p.Message }

// maxPeriod bounds a reset period (ten years), so durations never overflow.
const maxPeriod = 10 * 365 * 24 * time.Hour

// period maps a Reset to the limit policies' (duration, algorithm), the
// generation table of docs/platform.md:
//
//	minute, hour  d     -> token bucket of d minutes or hours
//	day           1     -> calendar: the UTC day
//	day           d > 1 -> fixed window of d days
//	week          1     -> calendar: the UTC ISO week (Monday 00:00 UTC)
//	week          d > 1 -> fixed window of 7d days, starting on a Monday
//	month         1     -> calendar: the UTC calendar month
//
// A month of another duration is a problem: no window of several calendar
// months exists in the engine, and a multiple of 720h is not a month.
func period(r Reset) (time.Duration, string, error) {
	if r.Duration < 1 {
		return 0, "", fmt.Errorf("duration must be at least 1")
	}
	var unit time.Duration
	alg := "fixed-window"
	switch r.Unit {
	case Minute:
		unit, alg = time.Minute, "token-bucket"
	case Hour:
		unit, alg = time.Hour, "token-bucket"
	case Day:
		unit = 24 * time.Hour
	case Week:
		unit = 7 * 24 * time.Hour
	case Month:
		if r.Duration != 1 {
			return 0, "", fmt.Errorf("a month limit resets every calendar month: duration must be 1 (use day or week for other spans)")
		}
		return 30 * 24 * time.Hour, "calendar", nil
	default:
		return 0, "", fmt.Errorf("unknown unit %q (want minute, hour, day, week or month)", r.Unit)
	}
	if r.Duration > int64(maxPeriod/unit) {
		return 0, "", fmt.Errorf("duration %d %s is longer than ten years", r.Duration, r.Unit)
	}
	if r.Duration == 1 && (r.Unit == Day || r.Unit == Week) {
		alg = "calendar"
	}
	return time.Duration(r.Duration) * unit, alg, nil
}

// Validate returns every problem of r, with JSON paths from the settings
// document's root.
func (r *RateLimits) Validate() []Problem {
	var ps []Problem
	add := func(path, format string, args ...any) {
		ps = append(ps, Problem{Path: path, Message: fmt.Sprintf(format, args...)})
	}
	for _, sc := range r.scopes() {
		base := "$." + sc.name
		if sc.s.Global != nil && sc.s.PerResource != nil {
			add(base, "give global or perResource, not both")
		}
		if sc.s.Global != nil {
			sc.s.Global.validate(base+".global", add)
		}
		if pr := sc.s.PerResource; pr != nil {
			if pr.Default != nil {
				pr.Default.validate(base+".perResource.default", add)
			}
			seen := map[string]bool{}
			for i, rl := range pr.Resources {
				p := fmt.Sprintf("%s.perResource.resources[%d]", base, i)
				switch {
				case !deployment.KnownResource(rl.Resource):
					add(p+".resource", "unknown resource %q (known: %v)", rl.Resource, deployment.ResourceNames)
				case seen[rl.Resource]:
					add(p+".resource", "resource %q is listed twice", rl.Resource)
				}
				seen[rl.Resource] = true
				rl.Limit.validate(p+".limit", add)
			}
		}
	}
	return ps
}

func (l *Limits) validate(base string, add func(path, format string, args ...any)) {
	for _, c := range []struct {
		name string
		l    *CountLimit
	}{{"request", l.Request}, {"token", l.Token}} {
		if c.l == nil {
			continue
		}
		if c.l.Count < 1 {
			add(base+"."+c.name+".count", "must be at least 1")
		}
		if _, _, err := period(c.l.Reset); err != nil {
			add(resetPath(base+"."+c.name, c.l.Reset), "%v", err)
		}
		validAlertAt(base+"."+c.name+".alertAt", c.l.AlertAt, add)
	}
	if c := l.Cost; c != nil {
		if math.IsNaN(c.Amount) || c.Amount < 0.000001 || c.Amount > 1e12 {
			add(base+".cost.amount", "must be between 0.000001 and 1e12 USD")
		}
		if _, _, err := period(c.Reset); err != nil {
			add(resetPath(base+".cost", c.Reset), "%v", err)
		}
		validAlertAt(base+".cost.alertAt", c.AlertAt, add)
	}
}

// validAlertAt checks a limit's alert thresholds at path: whole percents
// 1..100, strictly ascending, at most MaxAlerts.
func validAlertAt(path string, at []int, add func(path, format string, args ...any)) {
	if len(at) > MaxAlerts {
		add(path, "at most %d thresholds (got %d)", MaxAlerts, len(at))
	}
	for i, t := range at {
		p := fmt.Sprintf("%s[%d]", path, i)
		switch {
		case t < 1 || t > 100:
			add(p, "a threshold is a percent from 1 to 100 (got %d)", t)
		case i > 0 && t <= at[i-1]:
			add(p, "thresholds must be strictly ascending (%d follows %d)", t, at[i-1])
		}
	}
}

func resetPath(base string, r Reset) string {
	switch r.Unit {
	case Minute, Hour, Day, Week, Month:
		return base + ".reset.duration"
	}
	return base + ".reset.unit"
}

type namedScope struct {
	name string
	s    *Scope
}

// scopes are r's scopes that are set, backend first, by their JSON name.
func (r *RateLimits) scopes() []namedScope {
	var out []namedScope
	for _, sc := range []namedScope{{"backend", r.Backend}, {"consumer", r.Consumer}} {
		if sc.s != nil {
			out = append(out, sc)
		}
	}
	return out
}

// Row is one limit of the settings as a chain entry's origin names it.
type Row struct {
	// Limit is the count, or the amount in micro-USD for a cost limit.
	Limit int64
	Reset Reset
	// AlertAt are the row's alert thresholds (percent), ascending.
	AlertAt []int
}

// Rows returns every enabled limit of r by its origin reference (the JSON
// path Origin.Ref holds, e.g. "$.consumer.global.token").
func (r *RateLimits) Rows() map[string]Row {
	out := map[string]Row{}
	set := func(path string, l *Limits) {
		if l == nil {
			return
		}
		if c := l.Request; c != nil && c.Enabled {
			out[path+".request"] = Row{Limit: c.Count, Reset: c.Reset, AlertAt: c.AlertAt}
		}
		if c := l.Token; c != nil && c.Enabled {
			out[path+".token"] = Row{Limit: c.Count, Reset: c.Reset, AlertAt: c.AlertAt}
		}
		if c := l.Cost; c != nil && c.Enabled {
			out[path+".cost"] = Row{Limit: int64(math.Round(c.Amount * 1e6)), Reset: c.Reset, AlertAt: c.AlertAt}
		}
	}
	for _, sc := range r.scopes() {
		base := "$." + sc.name
		set(base+".global", sc.s.Global)
		if pr := sc.s.PerResource; pr != nil {
			for i := range pr.Resources {
				set(fmt.Sprintf("%s.perResource.resources[%d].limit", base, i), &pr.Resources[i].Limit)
			}
			set(base+".perResource.default", pr.Default)
		}
	}
	return out
}
