package gateway

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"sluice/deployment"
	"sluice/gwerror"
	"sluice/llmapi"
	"sluice/policies"
)

// quotaPath is the path, under a route's context, of the quota report.
const quotaPath = "/v1/quota"

// endpointQuota labels quota requests in metrics and the SharedContext.
const endpointQuota llmapi.Endpoint = "quota"

// quotaReport is the body of GET {context}/v1/quota.
type quotaReport struct {
	Route string `json:"route"`
	// ApplicationID is null when no identifier in the chain named the caller.
	ApplicationID *string      `json:"application_id"`
	Limits        []quotaLimit `json:"limits"`
}

// quotaLimit is one counter as the caller sees it. Limit and Remaining are in
// Unit: whole tokens or requests, or USD as a decimal (the counters hold
// micro-USD; the conversion is exact).
type quotaLimit struct {
	Policy    string      `json:"policy"`
	Scope     string      `json:"scope"`
	Dimension string      `json:"dimension"`
	Period    string      `json:"period"`
	Unit      string      `json:"unit"`
	Limit     json.Number `json:"limit"`
	Remaining json.Number `json:"remaining"`
	// ResetAfterSeconds is rounded up to whole seconds, like Retry-After.
	ResetAfterSeconds int64 `json:"reset_after_seconds"`
	// ResetsAt is now + the exact reset delay, rounded up to the second, UTC.
	ResetsAt string `json:"resets_at"`
}

// quota answers GET {context}/v1/quota: the caller is identified by every
// policies.Identifier of the route's chain, in chain order (their errors are
// rendered as is, e.g. 401), then every policies.QuotaReporter reports the
// caller's counters. No request phase runs, nothing is reserved or charged,
// and nothing goes upstream: counters are only peeked.
func (x *exchange) quota(rest string) {
	g, r, rt := x.g, x.r, x.rt
	x.ep = endpointQuota
	if r.Method != http.MethodGet {
		x.w.Header().Set("Allow", http.MethodGet)
		x.fail(gwerror.New(http.StatusMethodNotAllowed, gwerror.TypeInvalidRequest, gwerror.CodeInvalidRequest,
			r.Method+" is not allowed on "+quotaPath+"; use GET"))
		return
	}
	call := x.newCall(rest)
	// ?resource=/chat/completions reports the counters of that resource's
	// entries (resource-attached and per-resource limits).
	if res := r.URL.Query().Get("resource"); deployment.KnownResource(res) {
		call.Request.Path = "/v1" + res
	}
	if gerr := x.identify(call); gerr != nil {
		x.fail(gerr)
		return
	}
	entries := rt.chain.EntriesFor(call)
	rep := quotaReport{Route: rt.name, Limits: []quotaLimit{}}
	if app := call.Shared.ApplicationID(); app != "" {
		rep.ApplicationID = &app
	}
	now := g.now()
	for i := range entries {
		qr, ok := entries[i].Policy.(policies.QuotaReporter)
		if !ok {
			continue
		}
		for _, l := range qr.Quota(call) {
			rep.Limits = append(rep.Limits, toQuotaLimit(l, now))
		}
	}
	body, err := json.Marshal(rep)
	if err != nil {
		x.fail(gwerror.Internal(x.reqID))
		return
	}
	h := x.w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	x.writeHeader(http.StatusOK)
	_, _ = x.w.Write(body)
}

func toQuotaLimit(l policies.QuotaLine, now time.Time) quotaLimit {
	q := quotaLimit{
		Policy: l.Policy, Scope: l.Scope, Dimension: l.Dimension, Period: l.Period,
		Unit:              string(l.Unit),
		Limit:             json.Number(strconv.FormatInt(l.Limit, 10)),
		Remaining:         json.Number(strconv.FormatInt(l.Remaining, 10)),
		ResetAfterSeconds: ceilSeconds(l.ResetAfter),
		ResetsAt:          ceilSecond(now.Add(max(l.ResetAfter, 0))).UTC().Format(time.RFC3339),
	}
	if l.Unit == policies.UnitUSDMicros {
		q.Unit = "usd"
		q.Limit = json.Number(policies.USDMicrosDecimal(l.Limit))
		q.Remaining = json.Number(policies.USDMicrosDecimal(l.Remaining))
	}
	return q
}

func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

func ceilSecond(t time.Time) time.Time {
	if tr := t.Truncate(time.Second); !tr.Equal(t) {
		return tr.Add(time.Second)
	}
	return t
}
