package api_test

// Reconciliation over HTTP: records ingested as a gateway sends them, a
// provider usage report served by a test server, on both store engines.

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"sluice/meter"
	"sluice/platform/api"
)

// reportServer serves a provider usage report that the test sets, and
// keeps the query of the last request.
type reportServer struct {
	*httptest.Server
	mu     sync.Mutex
	status int
	body   string
	query  url.Values
}

func newReportServer(t *testing.T) *reportServer {
	rs := &reportServer{status: 200, body: `{"tenants":{}}`}
	rs.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rs.mu.Lock()
		defer rs.mu.Unlock()
		rs.query = r.URL.Query()
		w.WriteHeader(rs.status)
		_, _ = w.Write([]byte(rs.body))
	}))
	t.Cleanup(rs.Close)
	return rs
}

func (rs *reportServer) set(status int, body string) {
	rs.mu.Lock()
	rs.status, rs.body = status, body
	rs.mu.Unlock()
}

func TestUsageReconciliation(t *testing.T) {
	engines(t, func(t *testing.T, c *client) {
		rs := newReportServer(t)
		var prov api.Provider
		c.must(201, "POST", "/providers", map[string]any{"name": "openai", "type": "openai", "url": "http://127.0.0.1:9",
			"applicationHeader": "X-Mock-Tenant", "usageReportUrl": rs.URL + "/mock/usage?token=secret-in-query"}, &prov)
		c.provider("bare")
		gwID, token := c.gateway("edge-1")

		now := time.Now().UTC().Truncate(time.Microsecond)
		from, to := now.Add(-2*time.Hour), now.Add(time.Minute)
		n := 0
		rec := func(app, requested, served string, res meter.Resolution, src meter.UsageSource, prompt, completion int64, ts time.Time) meter.Record {
			n++
			return meter.Record{ID: "r-" + strings.Repeat("x", n), Time: ts, GatewayID: gwID, Route: "openai", Provider: "openai",
				Application: app, KeyID: "k-" + app, RequestedModel: requested, ServedModel: served, PromptTokens: prompt,
				CompletionTokens: completion, UsageSource: src, Resolution: res, Status: 200, LatencyMicros: 1, Attempts: 1}
		}
		in := now.Add(-time.Hour)
		recs := []meter.Record{
			rec("app-a", "gpt-4o", "gpt-4o", meter.Settled, meter.UsageProvider, 10, 5, in),
			rec("app-a", "gpt-4o", "gpt-4o", meter.Settled, meter.UsageProvider, 10, 5, in),
			rec("app-a", "gpt-4o", "", meter.Abandoned, meter.UsageCounted, 10, 2, in), // no served model: the requested one
			rec("app-a", "gpt-4o", "gpt-4o", meter.UpstreamError, meter.UsageCounted, 10, 1, in),
			rec("app-b", "gpt-4o-mini", "gpt-4o-mini", meter.Settled, meter.UsageProvider, 7, 12, in), // n=2
			rec("app-b", "gpt-4o-mini", "gpt-4o-mini", meter.Closed, meter.UsagePartial, 7, 3, in),
			// Never reached the provider's model: not metered.
			rec("app-a", "gpt-4o", "", meter.Denied, meter.UsageNone, 0, 0, in),
			rec("", "gpt-4o", "", meter.AuthFailed, meter.UsageNone, 0, 0, in),
			rec("app-b", "gpt-4o-mini", "", meter.UpstreamError, meter.UsageNone, 0, 0, in),
			// Outside the period, or another provider's.
			rec("app-a", "gpt-4o", "gpt-4o", meter.Settled, meter.UsageProvider, 100, 100, from.Add(-time.Microsecond)),
			rec("app-a", "gpt-4o", "gpt-4o", meter.Settled, meter.UsageProvider, 100, 100, to),
		}
		other := rec("app-a", "gpt-4o", "gpt-4o", meter.Settled, meter.UsageProvider, 100, 100, in)
		other.Route, other.Provider = "bare", "bare"
		recs = append(recs, other)
		recs[6].Status, recs[7].Status, recs[8].Status, recs[8].Attempts = 429, 401, 503, 3
		c.mustIngest(token, recs)

		matching := `{"tenants":{
			"app-a":{"requests":4,"models":{"gpt-4o":{"requests":4,"completed":3,"cancelled":1,"prompt_tokens":40,"completion_tokens":13}}},
			"app-b":{"models":{"gpt-4o-mini":{"requests":2,"prompt_tokens":14,"completion_tokens":15},"gpt-4o":{"requests":0}}}},
			"total":{"requests":6}}`
		rs.set(200, matching)
		q := "/usage/reconciliation?provider=openai&from=" + url.QueryEscape(from.Format(time.RFC3339Nano)) + "&to=" + url.QueryEscape(to.Format(time.RFC3339Nano))
		var got api.UsageReconciliation
		c.must(200, "GET", q, nil, &got)
		if len(got.Mismatches) != 0 || len(got.Rows) != 2 || got.Provider != "openai" || !got.From.Equal(from) || !got.To.Equal(to) {
			t.Fatalf("matching report: %+v", got)
		}
		want := api.ReconciledUsage{Requests: 6, PromptTokens: 54, CompletionTokens: 28}
		if got.Totals.Metered != want || got.Totals.Reported != want || got.Totals.Delta != (api.ReconciledUsage{}) {
			t.Fatalf("totals %+v", got.Totals)
		}
		if r := got.Rows[0]; r.Application != "app-a" || r.Model != "gpt-4o" || r.Metered != (api.ReconciledUsage{Requests: 4, PromptTokens: 40, CompletionTokens: 13}) {
			t.Fatalf("row 0 %+v", r)
		}
		rs.mu.Lock()
		if rs.query.Get("token") != "secret-in-query" || rs.query.Get("from") != from.Format(time.RFC3339Nano) || rs.query.Get("to") != to.Format(time.RFC3339Nano) {
			t.Errorf("report fetched with %v", rs.query)
		}
		rs.mu.Unlock()

		// The provider counts one more request of app-b, and a tenant the
		// meter never saw.
		rs.set(200, `{"tenants":{
			"app-a":{"models":{"gpt-4o":{"requests":4,"prompt_tokens":40,"completion_tokens":13}}},
			"app-b":{"models":{"gpt-4o-mini":{"requests":3,"prompt_tokens":21,"completion_tokens":15}}},
			"key:0123":{"models":{"gpt-4o":{"requests":1}}}}}`)
		got = api.UsageReconciliation{}
		c.must(200, "GET", q, nil, &got)
		if len(got.Mismatches) != 2 || got.Mismatches[0].Application != "app-b" || got.Mismatches[0].Delta != (api.ReconciledUsage{Requests: 1, PromptTokens: 7}) ||
			got.Mismatches[1].Application != "key:0123" || got.Totals.Delta != (api.ReconciledUsage{Requests: 2, PromptTokens: 7}) {
			t.Fatalf("mismatching report: %+v", got)
		}

		// Refusals, in the error envelope, naming the parameter.
		for _, tc := range []struct {
			name, query string
			status      int
			code, path  string
		}{
			{"unknown provider", "provider=nope", 422, "validation_failed", "query.provider"},
			{"no usageReportUrl", "provider=bare", 422, "validation_failed", "query.provider"},
			{"empty period", "provider=openai&from=" + url.QueryEscape(to.Format(time.RFC3339)) + "&to=" + url.QueryEscape(to.Format(time.RFC3339)), 422, "validation_failed", "query.from"},
			{"before the retention", "provider=openai&from=2000-01-01T00:00:00Z", 422, "validation_failed", "query.from"},
			{"not a time", "provider=openai&from=yesterday", 422, "validation_failed", "query.from"},
			{"no provider", "", 422, "validation_failed", "query.provider"},
		} {
			e := c.fail(tc.status, "GET", "/usage/reconciliation?"+tc.query, nil)
			if (tc.code != "" && e.Error.Code != tc.code) || !strings.Contains(strings.Join(paths(e), " ")+" "+e.Error.Message, tc.path) {
				t.Errorf("%s: %+v", tc.name, e)
			}
		}
		for _, tc := range []struct {
			status int
			body   string
		}{{500, "oops"}, {200, "<html>"}, {200, `{"total":{}}`}} {
			rs.set(tc.status, tc.body)
			e := c.fail(502, "GET", q, nil)
			if e.Error.Code != "usage_report_unavailable" || strings.Contains(e.Error.Message, "secret-in-query") {
				t.Errorf("report %d %q: %+v", tc.status, tc.body, e)
			}
		}
	})
}
