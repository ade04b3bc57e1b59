package e2e

// Cluster-wide limits end to end: the real sluice binary, one mock upstream
// and three gateway processes sharing one deployment file, so every request
// crosses process boundaries exactly as in production. The deployment, load
// and envelope helpers here are shared with redis_outage_test.go.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"sluice/counter"
	"sluice/counter/redisstore"
	"sluice/deployment"
	"sluice/gwerror/gwerrortest"
	"sluice/internal/proctest"
	"sluice/internal/redistest"
	"sluice/llmapi"
	"sluice/policies/ratelimit"
	"sluice/tokencount"
)

// replicaAPIKey is the one application key every client presents.
const replicaAPIKey = "sk-sluice-e2e-replicas"

// replicaAppID is the application behind replicaAPIKey.
const replicaAppID = "app-replicas"

// sluiceBin is the sluice binary, built once for the package's process tests
// (TestMain removes it).
var sluiceBin proctest.Binary

func TestMain(m *testing.M) {
	code := m.Run()
	sluiceBin.Remove()
	os.Exit(code)
}

func procTail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// writeReplicaDeployment writes the deployment file the gateways share: api-key-auth
// and one consumer token-based-ratelimit with a fixed window of `window`, so
// that every admitted token stays counted for the whole test, and
// reserveOutput maxTokens, so that the reservation is the request's full cost.
// countersYAML is the counters section, indented by two spaces.
func writeReplicaDeployment(t *testing.T, upstream, countersYAML string, limit int64, window string) string {
	t.Helper()
	apps := fmt.Sprintf("  - id: %s\n    name: Replicas test\n    apiKeys: [%q]\n", replicaAppID, deployment.HashKey(replicaAPIKey))
	return writeLimitDeployment(t, upstream, countersYAML, apps, true, limit, window)
}

// writeLimitDeployment writes a deployment of one route, "replicas" on
// /openai, with api-key-auth and one token-based-ratelimit (consumerBased
// as given) of a fixed window of `window` with reserveOutput maxTokens.
// countersYAML and apps (the applications' list items) are indented by two
// spaces.
func writeLimitDeployment(t *testing.T, upstream, countersYAML, apps string, consumerBased bool, limit int64, window string) string {
	t.Helper()
	doc := fmt.Sprintf(`apiVersion: sluice/v1
counters:
%s
providers:
  - name: mock
    type: openai
    url: %s
applications:
%sroutes:
  - name: replicas
    context: /openai
    provider: mock
    policies:
      - {name: api-key-auth, version: v1}
      - name: token-based-ratelimit
        version: v1
        params:
          consumerBased: %t
          algorithm: fixed-window
          reserveOutput: maxTokens
          totalTokenLimits: [{count: %d, duration: %s}]
`, countersYAML, upstream, apps, consumerBased, limit, window)
	path := filepath.Join(t.TempDir(), "deployment.yaml")
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// replicaRedisCounters is a counters section for Redis. Timeouts and the pool are
// generous so that 200 concurrent clients never hit a client-side timeout on
// a busy machine: this test is about exactness, not outages, and with
// failureMode closed an outage would show as a 503, never as silent local
// counting.
func replicaRedisCounters(target, prefix, failureMode string) string {
	return fmt.Sprintf(`  backend: redis
  redis:
    %s
    keyPrefix: %q
    failureMode: %s
    dialTimeout: 2s
    readTimeout: 5s
    writeTimeout: 5s
    poolSize: 128`, target, prefix, failureMode)
}

// startGatewayProcs starts n `sluice gateway` processes on the same deployment.
func startGatewayProcs(t *testing.T, bin, deployment string, n int) []*proctest.Proc {
	t.Helper()
	gws := make([]*proctest.Proc, n)
	for i := range gws {
		gws[i] = proctest.StartGateway(t, bin, fmt.Sprintf("gateway-%d", i), "--config", deployment, "--log-level", "warn")
	}
	return gws
}

// costedChat is a chat completion body whose total cost is known: the mock
// reports the prompt as tokencount.EstimatePrompt of the same body (what the
// gateway reserves) and exactly max_tokens completion tokens.
type costedChat struct {
	body []byte
	cost int64 // prompt + completion tokens
}

func newCostedChat(t *testing.T, tokens *tokencount.Counter, prompt string, maxTokens int64) costedChat {
	t.Helper()
	body, err := json.Marshal(map[string]any{
		"model":      "gpt-4o-mini",
		"messages":   []map[string]string{{"role": "user", "content": prompt}},
		"max_tokens": maxTokens,
	})
	if err != nil {
		t.Fatal(err)
	}
	req, gerr := llmapi.Parse(llmapi.ChatCompletions, body)
	if gerr != nil {
		t.Fatalf("parse: %v", gerr)
	}
	return costedChat{body: body, cost: tokens.EstimatePrompt(req) + maxTokens}
}

// replicaLoad is the outcome of loadReplicas.
type replicaLoad struct {
	admitted       int64 // tokens of the requests answered 200
	admittedCount  int64
	denied         int64 // requests answered 429 with the right envelope
	perGateway     []int64
	perGatewayDeny []int64
}

// loadReplicas sends perClient requests from each of clients goroutines,
// request k of the whole run going to gateway k mod len(gws) (round robin).
// Every answer must be a 200 whose usage equals the request's known cost, or
// a 429 with the rate-limit envelope; anything else fails the test.
func loadReplicas(t *testing.T, gws []*proctest.Proc, reqs []costedChat, clients, perClient int) replicaLoad {
	t.Helper()
	return loadReplicasAs(t, gws, replicaAPIKey, reqs, clients, perClient)
}

// loadReplicasAs is loadReplicas with the API key apiKey.
func loadReplicasAs(t *testing.T, gws []*proctest.Proc, apiKey string, reqs []costedChat, clients, perClient int) replicaLoad {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	client := &http.Client{
		Transport: &http.Transport{MaxIdleConns: 2 * clients, MaxIdleConnsPerHost: clients, IdleConnTimeout: 30 * time.Second},
		Timeout:   20 * time.Second,
	}
	defer client.CloseIdleConnections()

	var seq atomic.Int64
	res := replicaLoad{perGateway: make([]int64, len(gws)), perGatewayDeny: make([]int64, len(gws))}
	var mu sync.Mutex
	var failures []string
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if len(failures) < 10 {
			failures = append(failures, fmt.Sprintf(format, args...))
		}
	}
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			for k := range perClient {
				if ctx.Err() != nil {
					return
				}
				r := reqs[(c+k)%len(reqs)]
				g := int(seq.Add(1)-1) % len(gws)
				status, hdr, body, err := postChatAs(ctx, client, gws[g].URL, apiKey, r.body)
				if err != nil {
					fail("gateway-%d: %v", g, err)
					continue
				}
				mu.Lock()
				switch status {
				case http.StatusOK:
					res.perGateway[g]++
				case http.StatusTooManyRequests:
					res.perGatewayDeny[g]++
				}
				mu.Unlock()
				switch status {
				case http.StatusOK:
					var out struct {
						Usage struct {
							Total int64 `json:"total_tokens"`
						} `json:"usage"`
					}
					if err := json.Unmarshal(body, &out); err != nil || out.Usage.Total != r.cost {
						fail("gateway-%d: 200 with usage %d (err %v), want the known cost %d", g, out.Usage.Total, err, r.cost)
					}
					atomic.AddInt64(&res.admitted, r.cost)
					atomic.AddInt64(&res.admittedCount, 1)
				case http.StatusTooManyRequests:
					if msg := checkErrorEnvelope(hdr, body, "rate_limit_exceeded", "rate_limit_error", "token-based-ratelimit"); msg != "" {
						fail("gateway-%d: %s", g, msg)
					}
					atomic.AddInt64(&res.denied, 1)
				default:
					fail("gateway-%d: status %d: %s", g, status, procTail(string(body), 300))
				}
			}
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatalf("load did not finish within its time bound")
	}
	for _, f := range failures {
		t.Error(f)
	}
	return res
}

func postReplicaChat(ctx context.Context, client *http.Client, base string, body []byte) (int, http.Header, []byte, error) {
	return postChatAs(ctx, client, base, replicaAPIKey, body)
}

// postChatAs posts a chat completion to base's /openai route with apiKey.
func postChatAs(ctx context.Context, client *http.Client, base, apiKey string, body []byte) (int, http.Header, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/openai/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+apiKey)
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b, err
}

// checkErrorEnvelope returns "" when a 429 or 503 carries the OpenAI error envelope
// with code and type, the X-Sluice-Error-Code header equal to code and, when
// policy is set, X-Sluice-Policy equal to it; else what is wrong.
func checkErrorEnvelope(h http.Header, body []byte, code, typ, policy string) string {
	env, err := gwerrortest.DecodeOpenAI(body)
	if err != nil {
		return fmt.Sprintf("denial body is not the error envelope: %q", procTail(string(body), 300))
	}
	switch {
	case env.Code != code || env.Type != typ || env.Message == "":
		return fmt.Sprintf("denial envelope code %q type %q message %q, want code %q type %q", env.Code, env.Type, env.Message, code, typ)
	case h.Get("X-Sluice-Error-Code") != code:
		return fmt.Sprintf("X-Sluice-Error-Code %q, want %q", h.Get("X-Sluice-Error-Code"), code)
	case policy != "" && deniedBy(h) != policy:
		return fmt.Sprintf("X-Sluice-Policy %q, want %q", h.Get("X-Sluice-Policy"), policy)
	}
	return ""
}

// replicaScenario sizes the load: a limit of replicaLimit tokens per hour for
// the one application, and 200 clients sending about five times the limit in
// total, so each of three independent gateways alone receives more than the
// limit.
const (
	replicaLimit     = 20000
	replicaClients   = 200
	replicaPerClient = 10
)

// replicaRequests are requests of different known costs (prompt lengths and
// output bounds vary), so exactness does not rest on equal costs.
func replicaRequests(t *testing.T) []costedChat {
	t.Helper()
	tokens := tokencount.New()
	var reqs []costedChat
	for i := range 7 {
		prompt := "Summarise the replica test " + strings.Repeat("and count every token ", i+1)
		reqs = append(reqs, newCostedChat(t, tokens, prompt, int64(10+7*i)))
	}
	return reqs
}

func maxChatCost(reqs []costedChat) int64 {
	var m int64
	for _, r := range reqs {
		m = max(m, r.cost)
	}
	return m
}

// waitOutOfWindowEdge sleeps past the next boundary of the epoch-aligned
// fixed window of length w when fewer than margin remain in the current one,
// so that one test run never straddles two windows (which would legitimately
// admit the limit twice).
func waitOutOfWindowEdge(t *testing.T, w, margin time.Duration) {
	t.Helper()
	now := time.Now()
	left := now.Truncate(w).Add(w).Sub(now)
	if left < margin {
		t.Logf("waiting %v for the next %v window", left+time.Second, w)
		time.Sleep(left + time.Second)
	}
}

// assertReplicasExact runs the load against gws, which share one Redis counter,
// and checks that the admitted tokens never exceed the limit. The bound: an
// admitted request reserved prompt + max_tokens, and the mock reports exactly
// that usage, so settlement moves nothing (no settle debt for requests in
// flight); the reservation is atomic in Redis, hence admitted <= limit. It
// also checks the limit was used (admitted > limit - the largest cost) and
// that the shared counter holds exactly the admitted total.
func assertReplicasExact(t *testing.T, gws []*proctest.Proc, counterUsed func() int64) {
	t.Helper()
	reqs := replicaRequests(t)
	res := loadReplicas(t, gws, reqs, replicaClients, replicaPerClient)
	var leased float64
	for _, gw := range gws {
		leased += metricValue(t, gw, `sluice_redis_store_reservations_total{served="lease"}`)
	}
	t.Logf("admitted %d tokens in %d requests (limit %d), denied %d; per gateway admitted %v denied %v; %v reservations served from leases",
		res.admitted, res.admittedCount, replicaLimit, res.denied, res.perGateway, res.perGatewayDeny, leased)
	if res.admitted > replicaLimit {
		t.Errorf("admitted %d tokens across 3 replicas, above the cluster-wide limit %d", res.admitted, replicaLimit)
	}
	if low := replicaLimit - maxChatCost(reqs); res.admitted <= low {
		t.Errorf("admitted %d tokens, want more than %d (the limit minus the largest request): the limit was not used", res.admitted, low)
	}
	if res.denied == 0 {
		t.Errorf("no request was denied")
	}
	// Round robin gives each gateway a third of the requests; which one wins
	// the admissions is a race (a gateway still discovering the cluster's
	// slots admits few), but at least two must have charged the counter.
	admitting := 0
	for g := range res.perGateway {
		if res.perGateway[g]+res.perGatewayDeny[g] < int64(replicaClients*replicaPerClient/len(gws)) {
			t.Errorf("gateway-%d answered %d requests, want a third of %d", g, res.perGateway[g]+res.perGatewayDeny[g], replicaClients*replicaPerClient)
		}
		if res.perGateway[g] > 0 {
			admitting++
		}
	}
	if admitting < 2 {
		t.Errorf("only %d gateway(s) admitted requests: the replicas did not share the counter concurrently", admitting)
	}
	if used := counterUsed(); used != res.admitted {
		t.Errorf("redis counter holds %d tokens used, want exactly the admitted %d", used, res.admitted)
	}
}

// replicaCounterUsed reads the application's total-token counter through a
// Redis store of its own (so the test does not depend on the value encoding)
// and returns the tokens used in the current window. limit must be the
// deployment's count.
func replicaCounterUsed(t *testing.T, opts redisstore.Options, limit int64) int64 {
	t.Helper()
	return counterUsed(t, opts, "replicas:"+replicaAppID, limit)
}

// counterUsed reads the total-token counter of a token-based-ratelimit
// scope (an hour's fixed window of limit) through a Redis store of its own
// and returns the tokens used in the current window.
func counterUsed(t *testing.T, opts redisstore.Options, scope string, limit int64) int64 {
	t.Helper()
	opts.FailureMode = redisstore.FailClosed
	opts.ReadTimeout, opts.WriteTimeout = 5*time.Second, 5*time.Second
	s, err := redisstore.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The engine keeps a scope's counters in one group (counter.Debit.Group).
	policy := "token-based-ratelimit"
	l := counter.Limit{Algorithm: counter.FixedWindow, Max: limit, Period: time.Hour}
	debits := []counter.Debit{{Key: counterKey(scope, policy, "total", l), Group: ratelimit.GroupKey(scope, policy), Limit: l}}
	var res counter.Result
	if err := s.Peek(ctx, debits, &res); err != nil {
		t.Fatalf("peek the shared counter: %v", err)
	}
	return limit - res.Remaining[0]
}

// TestReplicasShareOneLimit: three gateway processes on one Redis enforce one
// limit across all of them; the same scenario on the memory backend admits
// about three times the limit, which shows the first assertion can fail.
func TestReplicasShareOneLimit(t *testing.T) {
	bin := sluiceBin.Path(t)
	upstream := proctest.StartMock(t, bin).URL

	t.Run("redis", func(t *testing.T) {
		url := redistest.URL(t)
		prefix := redistest.KeyPrefix(t)
		dep := writeReplicaDeployment(t, upstream, replicaRedisCounters("url: "+url, prefix, "closed"), replicaLimit, "1h")
		gws := startGatewayProcs(t, bin, dep, 3)
		waitOutOfWindowEdge(t, time.Hour, 30*time.Second)
		assertReplicasExact(t, gws, func() int64 {
			return replicaCounterUsed(t, redisstore.Options{URL: url, KeyPrefix: prefix}, replicaLimit)
		})
	})

	t.Run("memory", func(t *testing.T) {
		dep := writeReplicaDeployment(t, upstream, "  backend: memory", replicaLimit, "1h")
		gws := startGatewayProcs(t, bin, dep, 3)
		waitOutOfWindowEdge(t, time.Hour, 30*time.Second)
		res := loadReplicas(t, gws, replicaRequests(t), replicaClients, replicaPerClient)
		t.Logf("memory backend: admitted %d tokens in %d requests (limit %d, %.2fx), denied %d; per gateway admitted %v",
			res.admitted, res.admittedCount, replicaLimit, float64(res.admitted)/replicaLimit, res.denied, res.perGateway)
		// Each replica counts alone, so each admits up to the limit.
		if res.admitted <= 2*replicaLimit {
			t.Errorf("memory backend admitted %d tokens, want more than 2x the limit %d: each replica should count alone", res.admitted, replicaLimit)
		}
		if res.admitted > 3*replicaLimit {
			t.Errorf("memory backend admitted %d tokens, above 3 replicas x limit %d", res.admitted, replicaLimit)
		}
	})
}

// TestReplicasShareOneLimitOnCluster is the Redis scenario on a 3-master Redis
// Cluster: the application's counters share a hash tag, so each reservation
// is one script on one master, and the limit is as exact as on one server.
func TestReplicasShareOneLimitOnCluster(t *testing.T) {
	bin := sluiceBin.Path(t)
	upstream := proctest.StartMock(t, bin).URL
	addrs := redistest.StartCluster(t, 3)
	prefix := redistest.KeyPrefix(t)
	quoted := make([]string, len(addrs))
	for i, a := range addrs {
		quoted[i] = fmt.Sprintf("%q", a)
	}
	target := "addrs: [" + strings.Join(quoted, ", ") + "]"
	dep := writeReplicaDeployment(t, upstream, replicaRedisCounters(target, prefix, "closed"), replicaLimit, "1h")
	gws := startGatewayProcs(t, bin, dep, 3)
	waitOutOfWindowEdge(t, time.Hour, 30*time.Second)
	assertReplicasExact(t, gws, func() int64 {
		return replicaCounterUsed(t, redisstore.Options{Addrs: addrs, KeyPrefix: prefix}, replicaLimit)
	})
}

// TestCountersChangeNeedsRestart: a reload that changes the counters section
// (here only the Redis key prefix) logs a warning and keeps the running
// store. A swapped store would count from zero under the new prefix; the kept
// one keeps counting where it was.
func TestCountersChangeNeedsRestart(t *testing.T) {
	bin := sluiceBin.Path(t)
	upstream := proctest.StartMock(t, bin).URL
	url := redistest.URL(t)
	dep := writeReplicaDeployment(t, upstream, replicaRedisCounters("url: "+url, redistest.KeyPrefix(t), "closed"), replicaLimit, "1h")
	gw := proctest.StartGateway(t, bin, "gateway", "--config", dep, "--log-level", "warn", "--watch-interval", "50ms")
	req := newCostedChat(t, tokencount.New(), "Remember me across reloads", 5)
	client := &http.Client{Timeout: 10 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	remaining := func() int64 {
		t.Helper()
		status, hdr, body, err := postReplicaChat(ctx, client, gw.URL, req.body)
		if err != nil || status != http.StatusOK {
			t.Fatalf("status %d, err %v: %s", status, err, body)
		}
		n, err := strconv.ParseInt(hdr.Get("x-ratelimit-remaining-tokens"), 10, 64)
		if err != nil {
			t.Fatalf("x-ratelimit-remaining-tokens %q: %v", hdr.Get("x-ratelimit-remaining-tokens"), err)
		}
		return n
	}
	if got, want := remaining(), replicaLimit-req.cost; got != want {
		t.Fatalf("remaining after one request = %d, want %d", got, want)
	}

	moved := replicaRedisCounters("url: "+url, redistest.KeyPrefix(t), "closed")
	doc, err := os.ReadFile(writeReplicaDeployment(t, upstream, moved, replicaLimit, "1h"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dep, doc, 0o600); err != nil {
		t.Fatal(err)
	}
	gw.WaitLog(t, 30*time.Second, "the counters section changed")
	if got, want := remaining(), replicaLimit-2*req.cost; got != want {
		t.Fatalf("remaining after the reload = %d, want %d (the running store keeps counting)", got, want)
	}
	if gw.Exited() {
		t.Fatalf("gateway exited: %v", gw.Err())
	}
}
