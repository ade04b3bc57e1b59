package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"sluice/counter/memory"
	"sluice/deployment"
	"sluice/gwerror"
	"sluice/internal/proctest"
	"sluice/mockllm"
	"sluice/policies"
	"sluice/policies/builtin"
	"sluice/pricing"
	"sluice/tokencount"
)

// quotaNow is the frozen clock of the quota tests: counters neither refill nor
// roll over while a test runs, so remaining amounts and resets are exact.
var quotaNow = time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)

const (
	keyA = "sk-quota-app-a"
	keyB = "sk-quota-app-b"
)

// startBuiltinGateway serves d with the built-in policies, an in-memory
// counter store, the embedded price table and the real tokenizer, all on the
// frozen clock.
func startBuiltinGateway(t *testing.T, d *deployment.Deployment) (base string, logs *proctest.Buffer) {
	t.Helper()
	now := func() time.Time { return quotaNow }
	counters := memory.New(memory.Options{Now: now, SweepEvery: -1})
	t.Cleanup(func() { _ = counters.Close() })
	prices, err := pricing.New("")
	if err != nil {
		t.Fatal(err)
	}
	logs = &proctest.Buffer{}
	logger := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	_, base = serveGateway(t, d, Options{
		Registry: builtin.Registry(),
		Logger:   logger,
		Now:      now,
		Services: policies.Services{Counters: counters, Pricing: prices, Tokens: tokencount.New()},
		Backoff:  func(int) time.Duration { return time.Millisecond },
	})
	return base, logs
}

// mockDeployment is one route over the mock upstream with two applications.
func mockDeployment(upstream string, chain ...deployment.PolicyEntry) *deployment.Deployment {
	retries := 0
	return prepared(&deployment.Deployment{
		APIVersion: "sluice/v1",
		Providers: []deployment.Provider{{Name: "openai", Type: "openai", URL: upstream,
			Retries: &retries, Timeout: deployment.Duration(5 * time.Second),
			ForwardHeaders: []string{"x-mock-*"}}},
		Applications: []deployment.Application{
			{ID: "app-a", Name: "A", APIKeys: []string{deployment.HashKey(keyA)}},
			{ID: "app-b", Name: "B", APIKeys: []string{deployment.HashKey(keyB)}},
		},
		Routes: []deployment.Route{{Name: "quota-route", Context: "/openai", Provider: "openai", Policies: chain}},
	})
}

func pe(name string, params map[string]any) deployment.PolicyEntry {
	return deployment.PolicyEntry{Name: name, Version: "v1", Params: params}
}

type quotaBody struct {
	Route         string  `json:"route"`
	ApplicationID *string `json:"application_id"`
	Limits        []struct {
		Policy            string      `json:"policy"`
		Scope             string      `json:"scope"`
		Dimension         string      `json:"dimension"`
		Period            string      `json:"period"`
		Unit              string      `json:"unit"`
		Limit             json.Number `json:"limit"`
		Remaining         json.Number `json:"remaining"`
		ResetAfterSeconds int64       `json:"reset_after_seconds"`
		ResetsAt          string      `json:"resets_at"`
	} `json:"limits"`
}

// lines renders the report one line per counter, in report order, so a
// mismatch shows the whole picture.
func (q *quotaBody) lines() string {
	var b strings.Builder
	for _, l := range q.Limits {
		fmt.Fprintf(&b, "%s %s %s %s %s limit=%s remaining=%s reset=%ds at=%s\n",
			l.Policy, l.Scope, l.Dimension, l.Period, l.Unit, l.Limit, l.Remaining, l.ResetAfterSeconds, l.ResetsAt)
	}
	return b.String()
}

func getQuota(t *testing.T, base, key string) (*http.Response, []byte) {
	t.Helper()
	hdr := map[string]string{}
	if key != "" {
		hdr["Authorization"] = "Bearer " + key
	}
	return send(t, http.MethodGet, base+"/openai/v1/quota", "", "", hdr)
}

func decodeQuota(t *testing.T, resp *http.Response, body []byte) *quotaBody {
	t.Helper()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		t.Fatalf("quota: %d %s: %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	dec.DisallowUnknownFields()
	var q quotaBody
	if err := dec.Decode(&q); err != nil {
		t.Fatalf("quota body %s: %v", body, err)
	}
	return &q
}

// quotaOf fetches and decodes the report for key, failing on anything but 200.
func quotaOf(t *testing.T, base, key string) *quotaBody {
	t.Helper()
	resp, body := getQuota(t, base, key)
	return decodeQuota(t, resp, body)
}

// ceilDiv is ceil(a/b) for a, b > 0.
func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// TestQuotaEndpoint spends tokens and budget with real requests to the mock
// upstream, then checks GET /v1/quota reports exactly what is left for the
// caller, charges nothing itself, answers 401 for a bad key, and shows another
// application its own (untouched) consumer quota beside the shared backend one.
func TestQuotaEndpoint(t *testing.T) {
	up := startUpstream(t, mockllm.New(mockllm.Options{Counter: tokencount.New()}))
	base, _ := startBuiltinGateway(t, mockDeployment(up.URL,
		pe("api-key-auth", nil),
		pe("basic-ratelimit", map[string]any{"limits": []any{map[string]any{"requests": 100, "duration": "1d"}}}),
		pe("token-based-ratelimit", map[string]any{"consumerBased": true,
			"promptTokenLimits": []any{map[string]any{"count": 5000, "duration": "1d"}},
			"totalTokenLimits":  []any{map[string]any{"count": 10000, "duration": "1h"}}}),
		pe("llm-cost-based-ratelimit", map[string]any{"consumerBased": true,
			"budgetLimits": []any{map[string]any{"amount": 0.5, "duration": "1d"}}}),
		pe("llm-cost", nil),
	))

	// Spend: two identical requests from app-a. The mock reports the prompt as
	// the gateway's tokenizer counts it and exactly max_tokens of output.
	const maxTokens = 20
	chat := fmt.Sprintf(`{"model":"gpt-4o-mini","max_tokens":%d,"messages":[{"role":"user","content":"how much quota do I have left today?"}]}`, maxTokens)
	var prompt int64
	for i := 0; i < 2; i++ {
		resp, body := send(t, http.MethodPost, base+"/openai/v1/chat/completions", "application/json", chat,
			map[string]string{"Authorization": "Bearer " + keyA})
		if resp.StatusCode != 200 {
			t.Fatalf("chat %d: %d %s", i, resp.StatusCode, body)
		}
		var out struct {
			Usage struct {
				PromptTokens     int64 `json:"prompt_tokens"`
				CompletionTokens int64 `json:"completion_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal(body, &out); err != nil || out.Usage.PromptTokens <= 0 || out.Usage.CompletionTokens != maxTokens {
			t.Fatalf("chat usage: %v %s", err, body)
		}
		prompt = out.Usage.PromptTokens
	}
	total := prompt + maxTokens
	// gpt-4o-mini: $0.15 per million prompt tokens, $0.60 per million
	// completion tokens, i.e. 0.15 and 0.60 micro-USD per token; each request
	// is charged its cost rounded up to the micro-USD.
	costMicros := ceilDiv(15*prompt+60*maxTokens, 100)
	tokenSpent := 2 * total
	const dayEnd = "2026-03-11T00:00:00Z"
	bucketReset := ceilDiv(tokenSpent*36, 100)
	wantA := strings.Join([]string{
		"basic-ratelimit quota-route requests window-1d requests limit=100 remaining=98 reset=43200s at=" + dayEnd,
		fmt.Sprintf("token-based-ratelimit quota-route:app-a prompt window-1d tokens limit=5000 remaining=%d reset=43200s at=%s", 5000-2*prompt, dayEnd),
		// A 1h bucket of 10000 refills 10000/3600 tokens a second: full again
		// after spent*0.36s.
		fmt.Sprintf("token-based-ratelimit quota-route:app-a total bucket-1h tokens limit=10000 remaining=%d reset=%ds at=%s",
			10000-tokenSpent, bucketReset, quotaNow.Add(time.Duration(bucketReset)*time.Second).Format(time.RFC3339)),
		fmt.Sprintf("llm-cost-based-ratelimit quota-route:app-a cost window-1d usd limit=0.5 remaining=%s reset=43200s at=%s",
			policies.USDMicrosDecimal(500000-2*costMicros), dayEnd),
	}, "\n") + "\n"

	// Settlement runs in the final phase, right after the response was
	// written; poll until it has landed, then compare everything.
	var q *quotaBody
	deadline := time.Now().Add(10 * time.Second)
	for {
		q = quotaOf(t, base, keyA)
		if q.lines() == wantA || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if q.lines() != wantA {
		t.Fatalf("app-a quota:\n%s\nwant:\n%s", q.lines(), wantA)
	}
	if q.Route != "quota-route" || q.ApplicationID == nil || *q.ApplicationID != "app-a" {
		t.Fatalf("route/application = %q/%v", q.Route, q.ApplicationID)
	}

	// Asking again charges nothing (the backend request counter included).
	if again := quotaOf(t, base, keyA); again.lines() != wantA {
		t.Fatalf("a second quota call changed the counters:\n%s", again.lines())
	}

	// Another application: its own consumer counters are full; the backend
	// request counter is shared.
	qb := quotaOf(t, base, keyB)
	wantB := strings.Join([]string{
		"basic-ratelimit quota-route requests window-1d requests limit=100 remaining=98 reset=43200s at=" + dayEnd,
		"token-based-ratelimit quota-route:app-b prompt window-1d tokens limit=5000 remaining=5000 reset=43200s at=" + dayEnd,
		"token-based-ratelimit quota-route:app-b total bucket-1h tokens limit=10000 remaining=10000 reset=0s at=" + quotaNow.Format(time.RFC3339),
		"llm-cost-based-ratelimit quota-route:app-b cost window-1d usd limit=0.5 remaining=0.5 reset=43200s at=" + dayEnd,
	}, "\n") + "\n"
	if qb.lines() != wantB || qb.ApplicationID == nil || *qb.ApplicationID != "app-b" {
		t.Fatalf("app-b quota (%v):\n%s\nwant:\n%s", qb.ApplicationID, qb.lines(), wantB)
	}

	// Identification failures are the auth policy's 401 envelope.
	for _, key := range []string{"sk-wrong", ""} {
		resp, body := getQuota(t, base, key)
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("key %q: status %d %s", key, resp.StatusCode, body)
		}
		if code, _ := envelope(t, body); code != gwerror.CodeInvalidAPIKey {
			t.Fatalf("key %q: code %q", key, code)
		}
		if resp.Header.Get(gwerror.HeaderPolicy) != "api-key-auth" || resp.Header.Get("X-Request-Id") == "" {
			t.Fatalf("key %q: headers %v", key, resp.Header)
		}
	}

	// Only GET.
	resp, body := send(t, http.MethodPost, base+"/openai/v1/quota", "", "{}", map[string]string{"Authorization": "Bearer " + keyA})
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET" {
		t.Fatalf("POST /v1/quota: %d Allow=%q %s", resp.StatusCode, resp.Header.Get("Allow"), body)
	}
	envelope(t, body)

	// The denied and refused quota calls charged nothing either.
	if again := quotaOf(t, base, keyA); again.lines() != wantA {
		t.Fatalf("quota calls changed the counters:\n%s", again.lines())
	}
}

// TestQuotaWithoutIdentifier: a route with no auth policy reports its backend
// counters and the "default" consumer scope, with a null application id.
func TestQuotaWithoutIdentifier(t *testing.T) {
	up := startUpstream(t, mockllm.New(mockllm.Options{Counter: tokencount.New()}))
	base, _ := startBuiltinGateway(t, mockDeployment(up.URL,
		pe("basic-ratelimit", map[string]any{"consumerBased": true, "limits": []any{map[string]any{"requests": 7, "duration": "1m"}}}),
	))
	q := quotaOf(t, base, "")
	want := "basic-ratelimit quota-route:default requests bucket-1m requests limit=7 remaining=7 reset=0s at=" + quotaNow.Format(time.RFC3339) + "\n"
	if q.ApplicationID != nil || q.lines() != want {
		t.Fatalf("quota (%v):\n%s\nwant:\n%s", q.ApplicationID, q.lines(), want)
	}
}

func TestMicrosToDecimal(t *testing.T) {
	for _, tc := range []struct {
		in   int64
		want string
	}{
		{0, "0"}, {1, "0.000001"}, {500000, "0.5"}, {3000000, "3"}, {1250000, "1.25"},
		{-1250000, "-1.25"}, {-7, "-0.000007"}, {123456789, "123.456789"},
	} {
		if got := policies.USDMicrosDecimal(tc.in); got != tc.want {
			t.Errorf("policies.USDMicrosDecimal(%d) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
