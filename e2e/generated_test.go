package e2e

// The platform's generated chains through the real gateway: Rate Limit
// settings go through platform/generate and the YAML renderer, the gateway
// loads the YAML as it would from the platform, and real clients are
// counted. Each test pins one rule of seed 001 (and one bug of the reference
// system that the generator must not have).

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"sluice/counter"
	"sluice/deployment"
	"sluice/deployment/yamlfile"
	"sluice/gwerror/gwerrortest"
	"sluice/llmapi"
	"sluice/platform/generate"
	"sluice/policies/ratelimit"
)

// genDoc renders settings for one provider "gen" (type typ, at the mock) as
// YAML, granted to apps (each with its appKey).
func genDoc(t *testing.T, typ string, rl generate.RateLimits, apps ...string) string {
	t.Helper()
	s := generate.Settings{Providers: []generate.Provider{{ID: "p", Name: "gen", Type: typ, URL: "${MOCK_URL}", RateLimits: rl}}}
	for _, a := range apps {
		s.Applications = append(s.Applications, generate.Application{ID: a, Name: a, Providers: []string{"p"},
			Keys: []generate.Key{{ID: "key-" + a, Hash: deployment.HashKey(appKey(a))}}})
	}
	res, err := generate.Generate(s)
	if err != nil {
		t.Fatal(err)
	}
	y, err := yamlfile.YAML(res.Deployment)
	if err != nil {
		t.Fatal(err)
	}
	// The renderer escapes ${ (a platform document is never expanded);
	// the harness expands the mock's address.
	return strings.ReplaceAll(string(y), "$${MOCK_URL}", "${MOCK_URL}")
}

func tokens(n int64, unit string) *generate.CountLimit {
	return &generate.CountLimit{Enabled: true, Count: n, Reset: generate.Reset{Duration: 1, Unit: unit}}
}

// Backend and consumer token limits of one provider are separate counters:
// the consumer limit stops A and not B, the backend limit stops everyone.
func TestGeneratedBackendAndConsumerLimitsStayApart(t *testing.T) {
	rl := generate.RateLimits{
		Backend:  &generate.Scope{Global: &generate.Limits{Token: tokens(1500, generate.Hour)}},
		Consumer: &generate.Scope{Global: &generate.Limits{Token: tokens(1000, generate.Hour)}},
	}
	env := startLimitsEnv(t, genDoc(t, "openai", rl, "app-a", "app-b", "app-c"), nil)
	req := chatReq{Model: "gpt-4o-mini", Text: "hello there", MaxTokens: 100}
	per := newCalc(t).estimate(llmapi.ChatCompletions, req.body()) + req.completion()
	send := func(app string) int {
		resp, _ := env.mustSend("/gen/v1/chat/completions", app, req.body(), nil)
		return resp.StatusCode
	}
	bucket := func(max int64) counter.Limit {
		return counter.Limit{Algorithm: counter.TokenBucket, Max: max, Period: time.Hour}
	}
	backendKey := counterKey("gen", "token-based-ratelimit", "total", bucket(1500))
	consumerKey := func(app string) string { return counterKey("gen:"+app, "token-based-ratelimit", "total", bucket(1000)) }

	servedA := 0
	for send("app-a") == http.StatusOK {
		servedA++
		if servedA > 100 {
			t.Fatal("the consumer limit never stopped app-a")
		}
	}
	if got := send("app-b"); got != http.StatusOK {
		t.Fatalf("app-b got %d after app-a spent its own budget: the consumer counters are shared", got)
	}
	if got, want := env.remaining(consumerKey("app-a"), bucket(1000)), 1000-int64(servedA)*per; got != want {
		t.Fatalf("app-a's consumer counter: remaining %d, want %d", got, want)
	}
	if got, want := env.remaining(backendKey, bucket(1500)), 1500-int64(servedA+1)*per; got != want {
		t.Fatalf("backend counter: remaining %d, want %d (every application's tokens)", got, want)
	}
	servedB := 1
	for send("app-b") == http.StatusOK {
		servedB++
		if servedB > 100 {
			t.Fatal("the backend limit never stopped app-b")
		}
	}
	if rem := env.remaining(consumerKey("app-b"), bucket(1000)); rem <= per {
		t.Fatalf("app-b was stopped by its own consumer limit (remaining %d), not the backend's", rem)
	}
	if got := send("app-c"); got != http.StatusTooManyRequests {
		t.Fatalf("app-c, which spent nothing, got %d: the backend limit must stop everyone", got)
	}
	t.Logf("per request %d tokens; app-a served %d, app-b %d before the backend limit", per, servedA, servedB)
}

// A global limit is one counter across every resource; a per-resource limit
// one counter per listed resource, and the default one counter per other
// resource (each with the default's value).
func TestGeneratedGlobalAndPerResourceRequestLimits(t *testing.T) {
	reqs := func(n int64) *generate.CountLimit {
		return &generate.CountLimit{Enabled: true, Count: n, Reset: generate.Reset{Duration: 1, Unit: generate.Minute}}
	}
	chat := chatReq{Model: "gpt-4o-mini", Text: "hi", MaxTokens: 2}.body()
	emb := []byte(`{"model":"text-embedding-3-small","input":"hi"}`)
	comp := []byte(`{"model":"gpt-3.5-turbo-instruct","prompt":"hi","max_tokens":2}`)
	status := func(env *limitsEnv, path string, body []byte) int {
		resp, _ := env.mustSend("/gen/v1/"+path, "app-a", body, nil)
		return resp.StatusCode
	}

	t.Run("global", func(t *testing.T) {
		env := startLimitsEnv(t, genDoc(t, "openai", generate.RateLimits{
			Backend: &generate.Scope{Global: &generate.Limits{Request: reqs(3)}}}, "app-a"), nil)
		got := []int{status(env, "chat/completions", chat), status(env, "embeddings", emb), status(env, "completions", comp),
			status(env, "embeddings", emb), status(env, "chat/completions", chat)}
		if fmt.Sprint(got) != "[200 200 200 429 429]" {
			t.Fatalf("statuses %v: three requests across resources must spend one provider-wide counter", got)
		}
	})

	t.Run("perResource", func(t *testing.T) {
		env := startLimitsEnv(t, genDoc(t, "openai", generate.RateLimits{
			Backend: &generate.Scope{PerResource: &generate.PerResource{
				Default:   &generate.Limits{Request: reqs(1)},
				Resources: []generate.ResourceLimit{{Resource: "/chat/completions", Limit: generate.Limits{Request: reqs(2)}}},
			}}}, "app-a"), nil)
		got := []int{
			status(env, "chat/completions", chat), status(env, "chat/completions", chat), status(env, "chat/completions", chat),
			status(env, "embeddings", emb), status(env, "embeddings", emb),
			status(env, "completions", comp), status(env, "completions", comp),
		}
		if fmt.Sprint(got) != "[200 200 429 200 429 200 429]" {
			t.Fatalf("statuses %v: chat has 2, and each other resource its own 1", got)
		}
		for _, res := range []string{"/chat/completions", "/embeddings", "/completions"} {
			max := int64(1)
			if res == "/chat/completions" {
				max = 2
			}
			l := counter.Limit{Algorithm: counter.TokenBucket, Max: max, Period: time.Minute}
			if rem := env.remaining(counterKey("gen"+res, "basic-ratelimit", "requests", l), l); rem != 0 {
				t.Errorf("%s counter remaining %d, want 0", res, rem)
			}
		}
	})
}

// Anthropic requests are charged their real tokens by a total-token limit,
// not one per request.
func TestGeneratedTokenLimitCountsAnthropicTokens(t *testing.T) {
	env := startLimitsEnv(t, genDoc(t, "anthropic", generate.RateLimits{
		Consumer: &generate.Scope{Global: &generate.Limits{Token: tokens(100000, generate.Day)}}}, "app-a"), nil)
	body := []byte(`{"model":"claude-sonnet-4-5","max_tokens":40,"messages":[{"role":"user","content":"count my tokens please"}]}`)
	resp, b := env.mustSend("/gen/v1/messages", "app-a", body, map[string]string{"anthropic-version": "2023-06-01"})
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	want := newCalc(t).estimate(llmapi.Messages, body) + 40
	l := window(100000, 24*time.Hour)
	if got := env.used(counterKey("gen:app-a", "token-based-ratelimit", "total", l), l); got != want {
		t.Fatalf("charged %d tokens, want %d (prompt + completion)", got, want)
	}
}

// Backend and consumer cost budgets with one llm-cost: both settle with the
// request's exact cost, in calendar-month windows.
func TestGeneratedCostBudgetsBothScopes(t *testing.T) {
	usd := func(a float64) *generate.CostLimit {
		return &generate.CostLimit{Enabled: true, Amount: a, Reset: generate.Reset{Duration: 1, Unit: generate.Month}}
	}
	doc := genDoc(t, "openai", generate.RateLimits{
		Backend:  &generate.Scope{Global: &generate.Limits{Cost: usd(50)}},
		Consumer: &generate.Scope{Global: &generate.Limits{Cost: usd(5)}},
	}, "app-a")
	if n := strings.Count(doc, "name: llm-cost\n"); n != 1 {
		t.Fatalf("%d llm-cost entries", n)
	}
	env := startLimitsEnv(t, doc, nil)
	req := chatReq{Model: "gpt-4o-mini", Text: "price me", MaxTokens: 30}
	resp, b := env.mustSend("/gen/v1/chat/completions", "app-a", req.body(), nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	c := newCalc(t)
	want := c.priceMicros("gpt-4o-mini", c.estimate(llmapi.ChatCompletions, req.body()), 30)
	for scope, max := range map[string]int64{"gen": 50e6, "gen:app-a": 5e6} {
		l, err := ratelimit.LimitFor("calendar", 30*24*time.Hour, max)
		if err != nil || l.Algorithm != counter.CalendarMonth {
			t.Fatalf("30d calendar is not the calendar month: %+v %v", l, err)
		}
		if got := env.used(counterKey(scope, "llm-cost-based-ratelimit", "cost", l), l); got != want {
			t.Errorf("%s budget charged %d µUSD, want %d", scope, got, want)
		}
	}
}

// Keys: an expired key is refused at request time (no new deployment), a
// key of an application not granted the provider gets 403.
func TestGeneratedKeysExpiryAndGrants(t *testing.T) {
	past := time.Now().Add(-time.Minute)
	future := time.Now().Add(time.Hour)
	s := generate.Settings{
		Providers: []generate.Provider{{ID: "p", Name: "gen", Type: "openai", URL: "${MOCK_URL}"}},
		Applications: []generate.Application{
			{ID: "app-a", Providers: []string{"p"}, Keys: []generate.Key{{ID: "k-live", Hash: deployment.HashKey(appKey("app-a")), ExpiresAt: &future}}},
			{ID: "app-x", Providers: []string{"p"}, Keys: []generate.Key{{ID: "k-old", Hash: deployment.HashKey(appKey("app-x")), ExpiresAt: &past}}},
			{ID: "app-n", Keys: []generate.Key{{ID: "k-n", Hash: deployment.HashKey(appKey("app-n"))}}},
		},
	}
	res, err := generate.Generate(s)
	if err != nil {
		t.Fatal(err)
	}
	y, _ := yamlfile.YAML(res.Deployment)
	env := startLimitsEnv(t, strings.ReplaceAll(string(y), "$${MOCK_URL}", "${MOCK_URL}"), nil)
	body := chatReq{Model: "gpt-4o-mini", Text: "hi", MaxTokens: 2}.body()
	for app, want := range map[string]int{"app-a": 200, "app-x": 401, "app-n": 403} {
		resp, b := env.mustSend("/gen/v1/chat/completions", app, body, nil)
		if resp.StatusCode != want {
			t.Errorf("%s: %d %s, want %d", app, resp.StatusCode, b, want)
		}
		if want == 403 && gwerrortest.MustOpenAI(t, b).Code != "application_not_allowed" {
			t.Errorf("%s: %s", app, b)
		}
	}
}
