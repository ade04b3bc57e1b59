package generate_test

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"sluice/deployment"
	"sluice/deployment/yamlfile"
	"sluice/platform/generate"
	"sluice/policies"
	"sluice/policies/builtin"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

func count(n int64, unit string) *generate.CountLimit {
	return &generate.CountLimit{Enabled: true, Count: n, Reset: generate.Reset{Duration: 1, Unit: unit}}
}

func cost(usd float64, unit string) *generate.CostLimit {
	return &generate.CostLimit{Enabled: true, Amount: usd, Reset: generate.Reset{Duration: 1, Unit: unit}}
}

// limitsOf is one dimension's limit set, scaled by k so that listed
// resources and the default differ.
func limitsOf(dim string, k int64) generate.Limits {
	switch dim {
	case "request":
		return generate.Limits{Request: count(100*k, generate.Minute)}
	case "token":
		return generate.Limits{Token: count(10000*k, generate.Hour)}
	}
	return generate.Limits{Cost: cost(float64(k)*2.5, generate.Month)}
}

func scopeOf(dim, shape string, k int64) *generate.Scope {
	if shape == "global" {
		l := limitsOf(dim, k)
		return &generate.Scope{Global: &l}
	}
	def := limitsOf(dim, k)
	return &generate.Scope{PerResource: &generate.PerResource{
		Default:   &def,
		Resources: []generate.ResourceLimit{{Resource: "/chat/completions", Limit: limitsOf(dim, 2*k)}},
	}}
}

func settings(rl generate.RateLimits, guardrails ...generate.Guardrail) generate.Settings {
	return generate.Settings{
		Providers: []generate.Provider{{ID: "prv-1", Name: "openai", Type: "openai", URL: "http://127.0.0.1:9000",
			Auth: &deployment.Auth{Header: "Authorization", Value: "Bearer [redacted]"}, RateLimits: rl, Guardrails: guardrails}},
		Applications: []generate.Application{
			{ID: "app-b", Name: "B", Providers: []string{"prv-1"}, Keys: []generate.Key{{ID: "key-b", Hash: deployment.HashKey("b")}}},
			{ID: "app-a", Name: "A", Providers: []string{"prv-1"}, Keys: []generate.Key{{ID: "key-a", Hash: deployment.HashKey("a")}}},
			{ID: "app-c", Name: "C, granted nothing"},
		},
	}
}

// render generates s, checks the chain with the built-in policies as
// `sluice validate` does, and returns the YAML with the origins appended.
func render(t *testing.T, s generate.Settings) (string, *generate.Result) {
	t.Helper()
	res, err := generate.Generate(s)
	if err != nil {
		t.Fatal(err)
	}
	if err := policies.Check(res.Deployment, builtin.Registry()); err != nil {
		t.Fatalf("generated deployment does not check:\n%v", err)
	}
	y, err := yamlfile.YAML(res.Deployment)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	b.Write(y)
	b.WriteString("# origins of routes[0].policies:\n")
	for i, o := range res.Origins["openai"] {
		fmt.Fprintf(&b, "#   %d %s %s\n", i, o.Kind, o.Ref)
	}
	return b.String(), res
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".yaml")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./platform/generate -update)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from the golden file (go test ./platform/generate -update rewrites it)\n--- got\n%s", path, got)
	}
}

// Every combination of {backend, consumer, both} x {request, token, cost} x
// {global, perResource} against golden files, plus the invariants each must
// keep.
func TestGolden(t *testing.T) {
	for _, scopes := range []string{"backend", "consumer", "both"} {
		for _, dim := range []string{"request", "token", "cost"} {
			for _, shape := range []string{"global", "perResource"} {
				name := scopes + "-" + dim + "-" + shape
				t.Run(name, func(t *testing.T) {
					var rl generate.RateLimits
					if scopes != "consumer" {
						rl.Backend = scopeOf(dim, shape, 10)
					}
					if scopes != "backend" {
						rl.Consumer = scopeOf(dim, shape, 1)
					}
					got, res := render(t, settings(rl))
					golden(t, name, got)
					checkInvariants(t, res, dim, scopes, shape)
				})
			}
		}
	}
}

func checkInvariants(t *testing.T, res *generate.Result, dim, scopes, shape string) {
	t.Helper()
	route := res.Deployment.Routes[0]
	pol := map[string]string{"request": "basic-ratelimit", "token": "token-based-ratelimit", "cost": "llm-cost-based-ratelimit"}[dim]
	var limits, backend, consumer, llmCosts, lastCostLimit, llmCostAt int
	llmCostAt, lastCostLimit = -1, -1
	for i, e := range route.Policies {
		switch e.Name {
		case pol:
			limits++
			if e.Params["consumerBased"] == true {
				consumer++
			} else {
				backend++
			}
			if shape == "global" && (e.Resources != nil || e.Params["resourceBased"] != nil) {
				t.Errorf("entry %d: a global limit must be one counter across every resource", i)
			}
			if shape == "perResource" && e.Params["resourceBased"] != true {
				t.Errorf("entry %d: a per-resource limit must count per resource", i)
			}
			if dim == "cost" {
				lastCostLimit = i
			}
		case "llm-cost":
			llmCosts++
			llmCostAt = i
		}
	}
	perScope := 1
	if shape == "perResource" {
		perScope = 2 // the listed resource and the default
	}
	wantB, wantC := 0, 0
	if scopes != "consumer" {
		wantB = perScope
	}
	if scopes != "backend" {
		wantC = perScope
	}
	if backend != wantB || consumer != wantC {
		t.Errorf("%d backend and %d consumer %s entries, want %d and %d (never merged)", backend, consumer, pol, wantB, wantC)
	}
	// llm-cost is always there, once, last: the request's cost is metered
	// with or without a cost limit.
	if llmCosts != 1 {
		t.Errorf("%d llm-cost entries, want exactly 1", llmCosts)
	}
	if llmCostAt < lastCostLimit || llmCostAt != len(route.Policies)-1 {
		t.Errorf("llm-cost at %d of %d entries; the last cost limit at %d", llmCostAt, len(route.Policies), lastCostLimit)
	}
	_ = limits
}

// The generation table: units and durations to the limit policies' duration
// and algorithm.
func TestPeriods(t *testing.T) {
	tests := []struct {
		unit      string
		n         int64
		duration  string
		algorithm string
	}{
		{generate.Minute, 1, "1m", "token-bucket"},
		{generate.Minute, 90, "90m", "token-bucket"},
		{generate.Hour, 1, "1h", "token-bucket"},
		{generate.Hour, 48, "2d", "token-bucket"},
		{generate.Day, 1, "1d", "calendar"},
		{generate.Day, 3, "3d", "fixed-window"},
		{generate.Week, 1, "7d", "calendar"},
		{generate.Week, 2, "14d", "fixed-window"},
		// The calendar month, not 720 hours: the calendar algorithm reads
		// 30d as the UTC calendar month.
		{generate.Month, 1, "30d", "calendar"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d %s", tt.n, tt.unit), func(t *testing.T) {
			l := generate.Limits{Token: &generate.CountLimit{Enabled: true, Count: 5, Reset: generate.Reset{Duration: tt.n, Unit: tt.unit}}}
			_, res := render(t, settings(generate.RateLimits{Backend: &generate.Scope{Global: &l}}))
			p := res.Deployment.Routes[0].Policies[1].Params
			lim := p["totalTokenLimits"].([]any)[0].(map[string]any)
			if lim["duration"] != tt.duration || p["algorithm"] != tt.algorithm {
				t.Fatalf("duration %v algorithm %v, want %s %s", lim["duration"], p["algorithm"], tt.duration, tt.algorithm)
			}
		})
	}
}

func TestValidateProblems(t *testing.T) {
	bad := generate.RateLimits{
		Backend: &generate.Scope{
			Global:      &generate.Limits{Token: &generate.CountLimit{Enabled: true, Count: -5, Reset: generate.Reset{Duration: 1, Unit: "fortnight"}}},
			PerResource: &generate.PerResource{Resources: []generate.ResourceLimit{{Resource: "/v1/chat", Limit: generate.Limits{}}}},
		},
		Consumer: &generate.Scope{Global: &generate.Limits{
			Cost:    &generate.CostLimit{Enabled: true, Amount: 0, Reset: generate.Reset{Duration: 2, Unit: generate.Month}},
			Request: &generate.CountLimit{Enabled: true, Count: 1, Reset: generate.Reset{Duration: 0, Unit: generate.Hour}},
		}},
	}
	var got []string
	for _, p := range bad.Validate() {
		got = append(got, p.Path)
	}
	want := []string{
		"$.backend",
		"$.backend.global.token.count",
		"$.backend.global.token.reset.unit",
		"$.backend.perResource.resources[0].resource",
		"$.consumer.global.request.reset.duration",
		"$.consumer.global.cost.amount",
		"$.consumer.global.cost.reset.duration",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("problems at\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if _, err := generate.Generate(settings(bad)); err == nil {
		t.Fatal("Generate accepted invalid settings")
	}
}

// Guardrails follow the generated entries in their order; llm-cost stays
// last and single; an operator's llm-cost guardrail replaces it; a disabled
// limit generates nothing.
func TestGuardrailsAndCostPlacement(t *testing.T) {
	rl := generate.RateLimits{
		Backend:  &generate.Scope{Global: &generate.Limits{Cost: cost(100, generate.Month), Token: &generate.CountLimit{Enabled: false, Count: 9, Reset: generate.Reset{Duration: 1, Unit: generate.Hour}}}},
		Consumer: &generate.Scope{Global: &generate.Limits{Cost: cost(1, generate.Day)}},
	}
	g1 := generate.Guardrail{ID: "gr-1", Name: "model-access", Version: "v1", Params: map[string]any{"allow": []any{"gpt-4o*"}}}
	g2 := generate.Guardrail{ID: "gr-2", Name: "llm-cost-based-ratelimit", Version: "v1",
		Params: map[string]any{"consumerBased": true, "budgetLimits": []any{map[string]any{"amount": 0.1, "duration": "1h"}}}}
	_, res := render(t, settings(rl, g1, g2))
	names := func(r *generate.Result) string {
		var out []string
		for i, e := range r.Deployment.Routes[0].Policies {
			o := r.Origins["openai"][i]
			out = append(out, e.Name+"("+o.Kind+" "+o.Ref+")")
		}
		return strings.Join(out, " ")
	}
	want := "api-key-auth(access ) llm-cost-based-ratelimit(rate-limit $.backend.global.cost) llm-cost-based-ratelimit(rate-limit $.consumer.global.cost) " +
		"model-access(guardrail gr-1) llm-cost-based-ratelimit(guardrail gr-2) llm-cost(cost )"
	if got := names(res); got != want {
		t.Fatalf("chain\n got %s\nwant %s", got, want)
	}

	own := generate.Guardrail{ID: "gr-3", Name: "llm-cost", Version: "v1"}
	_, res = render(t, settings(rl, g2, own))
	want = "api-key-auth(access ) llm-cost-based-ratelimit(rate-limit $.backend.global.cost) llm-cost-based-ratelimit(rate-limit $.consumer.global.cost) " +
		"llm-cost-based-ratelimit(guardrail gr-2) llm-cost(guardrail gr-3)"
	if got := names(res); got != want {
		t.Fatalf("with an llm-cost guardrail\n got %s\nwant %s", got, want)
	}

	// A guardrail cost limit alone still gets its llm-cost.
	_, res = render(t, settings(generate.RateLimits{}, g2))
	if got := names(res); got != "api-key-auth(access ) llm-cost-based-ratelimit(guardrail gr-2) llm-cost(cost )" {
		t.Fatalf("guardrail cost limit only: %s", got)
	}
}

// A provider granted to nobody admits nobody (applications: []), and every
// application's keys are listed once whatever it is granted.
func TestGrants(t *testing.T) {
	s := settings(generate.RateLimits{})
	s.Applications[0].Providers, s.Applications[1].Providers = nil, nil
	_, res := render(t, s)
	apps, ok := res.Deployment.Routes[0].Policies[0].Params["applications"].([]any)
	if !ok || len(apps) != 0 {
		t.Fatalf("applications %#v, want an empty list (not absent: absent admits everyone)", res.Deployment.Routes[0].Policies[0].Params["applications"])
	}
	if len(res.Deployment.Applications) != 3 {
		t.Fatalf("%d applications", len(res.Deployment.Applications))
	}
}

// Generate is pure: the same settings render the same bytes.
func TestDeterministic(t *testing.T) {
	rl := generate.RateLimits{Backend: scopeOf("token", "perResource", 1), Consumer: scopeOf("cost", "perResource", 1)}
	a, _ := render(t, settings(rl))
	for range 20 {
		if b, _ := render(t, settings(rl)); a != b {
			t.Fatal("two renders of the same settings differ")
		}
	}
}

// The counters setting becomes the document's counters section as given
// (golden), survives the rendering gateways load, and its zero value leaves
// the section out (every golden file of TestGolden has none).
func TestCountersSection(t *testing.T) {
	s := settings(generate.RateLimits{Backend: scopeOf("token", "global", 1)})
	s.Counters = deployment.Counters{Backend: "redis", Redis: deployment.Redis{
		URL: "redis://sluice:s3cret@redis.internal:6379/0", KeyPrefix: "prod:", FailureMode: "closed",
		DialTimeout: deployment.Duration(time.Second), ReadTimeout: deployment.Duration(250 * time.Millisecond),
		WriteTimeout: deployment.Duration(250 * time.Millisecond),
	}}
	got, res := render(t, s)
	golden(t, "counters-redis", got)
	text, err := yamlfile.Loadable(res.Deployment)
	if err != nil {
		t.Fatal(err)
	}
	d, err := yamlfile.ParseRendered(text, "rendered")
	if err != nil {
		t.Fatalf("the rendered document does not load: %v", err)
	}
	// Loading fills the section's defaults (e.g. leases) as it does for a file.
	want := &deployment.Deployment{Counters: s.Counters}
	deployment.ApplyDefaults(want)
	if !reflect.DeepEqual(d.Counters, want.Counters) {
		t.Fatalf("counters read back\n%+v\nwant\n%+v", d.Counters, want.Counters)
	}

	plain, res := render(t, settings(generate.RateLimits{Backend: scopeOf("token", "global", 1)}))
	if strings.Contains(plain, "counters") || !reflect.DeepEqual(res.Deployment.Counters, deployment.Counters{}) {
		t.Fatalf("zero counters setting rendered a section:\n%s", plain)
	}
}
