package api_test

import (
	"context"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"sluice/counter"
	"sluice/counter/memory"
	"sluice/deployment/yamlfile"
	"sluice/llmapi"
	"sluice/platform"
	"sluice/platform/api"
	"sluice/platform/usage/usagetest"
	"sluice/policies"
	"sluice/policies/builtin"
	"sluice/sharedctx"
)

// countingStore counts the calls that could change a counter.
type countingStore struct {
	counter.Store
	writes int
}

func (s *countingStore) Reserve(ctx context.Context, d []counter.Debit, r *counter.Result) error {
	s.writes++
	return s.Store.Reserve(ctx, d, r)
}

func (s *countingStore) Adjust(ctx context.Context, d []counter.Debit, t *counter.Ticket, deltas []int64) error {
	s.writes++
	return s.Store.Adjust(ctx, d, t, deltas)
}

func newPlatformWith(t *testing.T, o platform.Options) *client {
	t.Helper()
	dir := t.TempDir()
	o.DataDir, o.AdminToken, o.Registry = dir, adminToken, builtin.Registry()
	p, err := platform.Open(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p.Handler())
	t.Cleanup(func() {
		srv.Close()
		p.Close()
	})
	return &client{t: t, url: srv.URL + api.BasePath, token: adminToken, dir: dir, p: p}
}

// chargeRequest runs one request of application app through route's chain
// of the platform's current deployment, over store: the gateway's side of
// the counters.
func chargeRequest(t *testing.T, c *client, store counter.Store, route, app string) {
	t.Helper()
	doc, err := c.p.Deployment(context.Background(), 0, time.Second)
	if err != nil || doc == nil {
		t.Fatalf("deployment: %v", err)
	}
	d, err := yamlfile.ParseRendered(doc.Text, "test")
	if err != nil {
		t.Fatal(err)
	}
	svc := policies.StandInServices()
	svc.Counters = store
	for i, rt := range d.Routes {
		if rt.Name != route {
			continue
		}
		ch, err := builtin.Registry().BuildRoute(d, i, svc)
		if err != nil {
			t.Fatal(err)
		}
		sh := sharedctx.New("req", rt.Name, rt.Name, rt.Provider)
		sh.Metadata[sharedctx.KeyApplicationID] = app
		sh.Auth = sharedctx.AuthContext{Authenticated: true, ApplicationID: app}
		sh.SetServedModel("gpt-4o-mini")
		run := ch.Start(&policies.Call{Ctx: context.Background(), Shared: sh, Identified: true, ClientHeader: http.Header{},
			Request: &policies.Request{Method: "POST", Path: "/v1/chat/completions", Header: http.Header{},
				LLM: &llmapi.Request{Endpoint: llmapi.ChatCompletions, Model: "gpt-4o-mini", MaxTokens: 10}}})
		if gerr := run.Request(); gerr != nil {
			t.Fatalf("request phase: %v", gerr)
		}
		run.Finish(policies.Outcome{Kind: policies.Completed, Status: 200, WentUpstream: true, RejectedBy: -1})
		return
	}
	t.Fatalf("no route %q", route)
}

func TestApplicationBudgets(t *testing.T) {
	store := &countingStore{Store: memory.New(memory.Options{})}
	c := newPlatformWith(t, platform.Options{CounterStore: store})
	p := c.provider("openai")
	other := c.provider("other")
	limits := map[string]any{
		"backend": map[string]any{"global": map[string]any{
			"request": map[string]any{"enabled": true, "count": 100, "reset": map[string]any{"duration": 1, "unit": "day"}}}},
		"consumer": map[string]any{"global": map[string]any{
			"request": map[string]any{"enabled": true, "count": 10, "reset": map[string]any{"duration": 1, "unit": "hour"}, "alertAt": []int{50, 100}},
			"cost":    map[string]any{"enabled": true, "amount": 2.5, "reset": map[string]any{"duration": 1, "unit": "month"}}}},
	}
	c.must(200, "PUT", "/providers/"+p.Id+"/rate-limits", limits, nil, "If-Match", "*")
	c.must(200, "PUT", "/providers/"+other.Id+"/rate-limits", limits, nil, "If-Match", "*")
	var app api.Application
	c.must(201, "POST", "/applications", map[string]any{"name": "shop", "providers": []string{p.Id}}, &app)

	var b api.ApplicationBudgets
	c.must(200, "GET", "/applications/"+app.Id+"/budgets", nil, &b)
	if !b.Available || b.Reason != "" || b.ApplicationId != app.Id {
		t.Fatalf("budgets: %+v", b)
	}
	type row struct{ origin, scope, dim, period, unit, limit, remaining string }
	want := []row{
		{"$.backend.global.request", "backend", "requests", "1 day", "requests", "100", "100"},
		{"$.consumer.global.request", "consumer", "requests", "1 hour", "requests", "10", "10"},
		{"$.consumer.global.cost", "consumer", "cost", "1 month", "usd", "2.5", "2.5"},
	}
	check := func(want []row) {
		t.Helper()
		if len(b.Budgets) != len(want) {
			t.Fatalf("%d budgets, want %d: %+v", len(b.Budgets), len(want), b.Budgets)
		}
		for i, w := range want {
			g := b.Budgets[i]
			got := row{g.Origin, string(g.Scope), string(g.Dimension), g.Period, string(g.Unit), g.Limit, g.Remaining}
			if got != w || g.Provider != "openai" || g.Route != "openai" || g.Resource != "" {
				t.Errorf("budget %d: %+v, want %+v", i, g, w)
			}
		}
	}
	check(want)
	if store.writes != 0 {
		t.Fatalf("reading budgets wrote to the counters %d times", store.writes)
	}

	chargeRequest(t, c, store, "openai", app.Id)
	chargeRequest(t, c, store, "openai", "someone-else")
	c.must(200, "GET", "/applications/"+app.Id+"/budgets", nil, &b)
	// The cost limit keeps the request's estimate (no usage came back).
	if len(b.Budgets) == 3 && b.Budgets[2].Remaining == "2.5" {
		t.Fatal("the cost budget did not move")
	} else if len(b.Budgets) == 3 {
		want[2].remaining = b.Budgets[2].Remaining
	}
	want[0].remaining, want[1].remaining = "98", "9"
	check(want)
	if g := b.Budgets[1]; g.UsedPercent != 10 || g.AlertAt == nil || len(*g.AlertAt) != 2 ||
		g.ResetsAt.Before(time.Now()) || g.ResetsAt.After(time.Now().Add(time.Hour)) {
		t.Fatalf("consumer request budget: %+v", g)
	}

	c.must(200, "GET", "/applications/"+app.Id+"/budgets?provider=nope", nil, &b)
	if len(b.Budgets) != 0 {
		t.Fatalf("provider filter: %+v", b.Budgets)
	}
	c.fail(404, "GET", "/applications/app-nope/budgets", nil)
}

// A standalone platform with memory counters cannot read them: it says so.
func TestApplicationBudgetsUnavailable(t *testing.T) {
	c := newPlatform(t)
	var app api.Application
	c.must(201, "POST", "/applications", map[string]any{"name": "shop"}, &app)
	var b api.ApplicationBudgets
	c.must(200, "GET", "/applications/"+app.Id+"/budgets", nil, &b)
	if b.Available || b.Reason != platform.MemoryCountersReason || len(b.Budgets) != 0 {
		t.Fatalf("budgets: %+v", b)
	}
}

// An ingested batch of an application past a threshold stores the event,
// shown by GET /alerts with delivery state none (no webhook).
func TestIngestFiresAlerts(t *testing.T) {
	store := memory.New(memory.Options{})
	c := newPlatformWith(t, platform.Options{CounterStore: store})
	p := c.provider("openai")
	c.must(200, "PUT", "/providers/"+p.Id+"/rate-limits", map[string]any{"consumer": map[string]any{"global": map[string]any{
		"request": map[string]any{"enabled": true, "count": 4, "reset": map[string]any{"duration": 1, "unit": "day"}, "alertAt": []int{50, 100}}}}},
		nil, "If-Match", "*")
	var app api.Application
	c.must(201, "POST", "/applications", map[string]any{"name": "shop", "providers": []string{p.Id}}, &app)
	if err := c.p.RegisterLocalGateway(context.Background(), "local", "test"); err != nil {
		t.Fatal(err)
	}
	chargeRequest(t, c, store, "openai", app.Id)
	chargeRequest(t, c, store, "openai", app.Id)
	recs := usagetest.Random(rand.New(rand.NewPCG(1, 1)), usagetest.Shape{Applications: 1, KeysPerApp: 1, Providers: 1, ModelsPerProvider: 1},
		2, "r", "local", time.Now().Add(-time.Minute), time.Minute)
	for i := range recs {
		recs[i].Application, recs[i].Provider = app.Id, "openai"
	}
	if err := c.p.IngestUsage(context.Background(), "local", usagetest.Batch(recs)); err != nil {
		t.Fatal(err)
	}
	var page api.AlertPage
	deadline := time.Now().Add(10 * time.Second)
	for c.must(200, "GET", "/alerts?application="+app.Id, nil, &page); len(page.Alerts) < 1; c.must(200, "GET", "/alerts?application="+app.Id, nil, &page) {
		if time.Now().After(deadline) {
			t.Fatal("no alert after the ingest")
		}
		time.Sleep(10 * time.Millisecond)
	}
	a := page.Alerts[0]
	if len(page.Alerts) != 1 || a.Threshold != 50 || a.Trigger != "threshold" || a.Used != "2" || a.Limit != "4" ||
		a.Origin != "$.consumer.global.request" || a.Delivery.State != "none" {
		t.Fatalf("alerts: %+v", page.Alerts)
	}
}
