package ratelimit

import (
	"context"
	"time"

	"sluice/counter"
	"sluice/policies"
)

// QuotaReporter is implemented by every limit policy; the gateway serves the
// lines at GET /v1/quota for the calling application.
type QuotaReporter interface {
	Quota(c *policies.Call) []QuotaLine
}

// QuotaLine is the state of one counter for the caller.
type QuotaLine struct {
	Policy string `json:"policy"`
	// Scope is the counter scope: "route" (backend) or "route:app" (consumer).
	Scope string `json:"scope"`
	// Dimension is the meter ("prompt", "total", "requests", "cost", a quota
	// name), with ":model:<match>" for a model rule's counter.
	Dimension string `json:"dimension"`
	// Period describes the window: "bucket-1m", "window-1d", "month".
	Period    string `json:"period"`
	Limit     int64  `json:"limit"`
	Remaining int64  `json:"remaining"`
	// Unit is "tokens", "requests" or "usd_micros".
	Unit       Unit          `json:"unit"`
	ResetAfter time.Duration `json:"resetAfterNanos"`
}

// Quota peeks counters sel under scope and reports them. A store failure
// yields no lines (the endpoint reports what it can), and so do figures
// from the store's local fallback (counter.Result.Local): they count only
// this gateway's charges since the failure began, not the shared counters.
func (e *Engine) Quota(ctx context.Context, scope *Scope, sel []int) []QuotaLine {
	if ctx == nil {
		ctx = context.Background()
	}
	res := e.results.Get().(*counter.Result)
	defer e.results.Put(res)
	if err := e.Peek(ctx, scope, sel, res); err != nil || res.Local {
		return nil
	}
	out := make([]QuotaLine, 0, len(sel))
	for j, i := range sel {
		c := e.limits[i]
		dim := e.meters[c.Meter].Name
		if c.Rule != "" {
			dim += ":model:" + c.Rule
		}
		out = append(out, QuotaLine{
			Policy: e.policy, Scope: scope.Name, Dimension: dim, Period: PeriodLabel(c.Capacity),
			Limit: c.Capacity.Max, Remaining: res.Remaining[j], Unit: e.meters[c.Meter].Unit,
			ResetAfter: res.ResetAfter[j],
		})
	}
	return out
}

// AllCounters is a selection of every counter of the engine.
func (e *Engine) AllCounters() []int { return e.allCounts }
