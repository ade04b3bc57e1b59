package ratelimit

import (
	"context"

	"sluice/counter"
	"sluice/policies"
)

// Quota peeks counters sel under scope and reports them. A store failure
// yields no lines (the endpoint reports what it can), and so do figures
// from the store's local fallback (counter.Result.Local): they count only
// this gateway's charges since the failure began, not the shared counters.
func (e *Engine) Quota(ctx context.Context, scope *Scope, sel []int) []policies.QuotaLine {
	if ctx == nil {
		ctx = context.Background()
	}
	res := e.results.Get().(*counter.Result)
	defer e.results.Put(res)
	if err := e.Peek(ctx, scope, sel, res); err != nil || res.Local {
		return nil
	}
	out := make([]policies.QuotaLine, 0, len(sel))
	for j, i := range sel {
		c := e.limits[i]
		dim := e.meters[c.Meter].Name
		if c.Rule != "" {
			dim += ":model:" + c.Rule
		}
		out = append(out, policies.QuotaLine{
			Policy: e.policy, Scope: scope.Name, Dimension: dim, Period: PeriodLabel(c.Capacity),
			Limit: c.Capacity.Max, Remaining: res.Remaining[j], Unit: e.meters[c.Meter].Unit,
			ResetAfter: res.ResetAfter[j],
		})
	}
	return out
}

// AllCounters is a selection of every counter of the engine.
func (e *Engine) AllCounters() []int { return e.allCounts }
