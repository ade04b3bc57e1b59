package e2e

// Fair admission end to end (issue 14): the real sluice binary, `sluice
// gateway` with the fair-admission policy in front of `sluice mock-llm
// --capacity`, each its own process. The gateway's capacity is what
// queues; the mock's engine is sized so that nothing waits in it unless a
// test says otherwise, and its counters (GET /mock/usage) show what reached
// it and when it freed its sequences.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"sluice/deployment"
	"sluice/gwerror"
	"sluice/gwerror/gwerrortest"
	"sluice/internal/proctest"
	"sluice/mockllm"
	"sluice/policies/fairadmission"
)

// fairEnv is a gateway process and a saturable mock process.
type fairEnv struct {
	t      *testing.T
	gw     *proctest.Proc
	mock   *proctest.Proc
	config string // the deployment file
	http   *http.Client
}

var fairApps = []string{"a", "b", "c", "d"}

// fairDoc is the deployment: route /fair (api-key-auth, a per-application
// token counter, fair-admission) to provider engine with capacity capYAML
// (a flow mapping) and the admission section admYAML (indented, or "").
func fairDoc(mockURL, capYAML, admYAML string) string {
	return fairDocCounters(mockURL, capYAML, admYAML, "")
}

// fairDocCounters is fairDoc with a counters section (indented, or "").
func fairDocCounters(mockURL, capYAML, admYAML, countersYAML string) string {
	var b strings.Builder
	b.WriteString("apiVersion: sluice/v1\n")
	if countersYAML != "" {
		b.WriteString("counters:\n" + countersYAML + "\n")
	}
	fmt.Fprintf(&b, `providers:
  - {name: engine, type: openai, url: %q, forwardHeaders: ["x-mock-*"], capacity: %s}
applications:
`, mockURL, capYAML)
	for _, a := range fairApps {
		fmt.Fprintf(&b, "  - {id: %s, apiKeys: [%q]}\n", a, deployment.HashKey(appKey(a)))
	}
	fmt.Fprintf(&b, `routes:
  - name: fair
    context: /fair
    provider: engine
    policies:
      - {name: api-key-auth}
      - {name: token-based-ratelimit, params: {consumerBased: true, algorithm: fixed-window, totalTokenLimits: [{count: %d, duration: 1h}]}}
      - {name: fair-admission, params: {maxOutputTokens: 64}}
`, satLimit)
	if admYAML != "" {
		b.WriteString("admission:\n" + admYAML)
	}
	return b.String()
}

func startFair(t *testing.T, mockCapacity, capYAML, admYAML string) *fairEnv {
	t.Helper()
	bin := sluiceBin.Path(t)
	mock := proctest.Start(t, bin, proctest.Spec{Name: "mock-llm", ReadyPath: "/healthz",
		Args: []string{"mock-llm", "--listen", "127.0.0.1:0", "--capacity", mockCapacity}})
	e := &fairEnv{t: t, mock: mock, config: filepath.Join(t.TempDir(), "deployment.yaml"),
		http: &http.Client{Timeout: 60 * time.Second}}
	e.write(capYAML, admYAML)
	e.gw = proctest.StartGateway(t, bin, "gateway", "--config", e.config, "--log-level", "warn", "--watch-interval", "100ms")
	t.Cleanup(e.http.CloseIdleConnections)
	return e
}

func (e *fairEnv) write(capYAML, admYAML string) {
	e.t.Helper()
	if err := os.WriteFile(e.config, []byte(fairDoc(e.mock.URL, capYAML, admYAML)), 0o600); err != nil {
		e.t.Fatal(err)
	}
}

func chat(stream bool, maxTokens int, content string) []byte {
	return fmt.Appendf(nil, `{"model":"gpt-4o-mini","stream":%v,"max_tokens":%d,"messages":[{"role":"user","content":%q}]}`, stream, maxTokens, content)
}

// open sends a request as app (its tenant at the mock) and returns the
// response unread.
func (e *fairEnv) open(ctx context.Context, app string, body []byte, hdr map[string]string) (*http.Response, error) {
	return e.openOn(ctx, e.gw, app, body, hdr)
}

// openOn is open through the gateway gw.
func (e *fairEnv) openOn(ctx context.Context, gw *proctest.Proc, app string, body []byte, hdr map[string]string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, gw.URL+"/fair/v1/chat/completions", strings.NewReader(string(body)))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+appKey(app))
	req.Header.Set(mockllm.DefaultUsageHeader, app)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	return e.http.Do(req)
}

// fairAnswer is a finished request.
type fairAnswer struct {
	resp *http.Response
	body []byte
	err  error
	took time.Duration
}

// send sends and reads the fairAnswer in the background.
func (e *fairEnv) send(ctx context.Context, app string, body []byte, hdr map[string]string) <-chan fairAnswer {
	ch := make(chan fairAnswer, 1)
	go func() {
		start := time.Now()
		resp, err := e.open(ctx, app, body, hdr)
		if err != nil {
			ch <- fairAnswer{err: err, took: time.Since(start)}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		ch <- fairAnswer{resp: resp, body: b, err: err, took: time.Since(start)}
	}()
	return ch
}

func (e *fairEnv) await(ch <-chan fairAnswer) fairAnswer {
	e.t.Helper()
	select {
	case a := <-ch:
		return a
	case <-time.After(60 * time.Second):
		e.t.Fatal("no answer within 60s")
		return fairAnswer{}
	}
}

// hold opens a stream as app that stalls after a few events and holds its
// slot until cancel is called.
func (e *fairEnv) hold(app string) (release func()) {
	e.t.Helper()
	ctx, hangUp := context.WithCancel(context.Background())
	resp, err := e.open(ctx, app, chat(true, 50, "hold the slot"), map[string]string{mockllm.HeaderStallAfter: "3"})
	if err != nil || resp.StatusCode != http.StatusOK {
		hangUp()
		e.t.Fatalf("holding stream: %v %v", resp, err)
	}
	// The mock answers 200 before it admits and prefills the request: the
	// first token event is what says the engine holds A's sequence and
	// has written output (a hang-up before it would cancel a request that
	// never started, which is not what the callers test).
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		hangUp()
		e.t.Fatalf("holding stream: no first event: %v", err)
	}
	return func() { hangUp(); resp.Body.Close() }
}

func (e *fairEnv) queued() float64 {
	return metricValue(e.t, e.gw, `sluice_admission_queued_requests{class="standard",target="engine"}`)
}

// waitQueued waits until n requests wait in the gateway.
func (e *fairEnv) waitQueued(n int) {
	e.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for e.queued() != float64(n) {
		if time.Now().After(deadline) {
			e.t.Fatalf("%v requests queued in the gateway; want %d", e.queued(), n)
		}
		time.Sleep(5 * time.Millisecond) // polling, not measuring
	}
}

func (e *fairEnv) usage() mockllm.Usage { return mockUsage(e.t, e.mock.URL) }

// charged is what the gateway's token counter charged app.
func (e *fairEnv) charged(app string) int64 {
	e.t.Helper()
	req, _ := http.NewRequest(http.MethodGet, e.gw.URL+"/fair/v1/quota", nil)
	req.Header.Set("Authorization", "Bearer "+appKey(app))
	resp, err := e.http.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	i := strings.Index(string(b), `"remaining":`)
	if resp.StatusCode != 200 || i < 0 {
		e.t.Fatalf("quota of %s: %d %s", app, resp.StatusCode, b)
	}
	rest := string(b)[i+len(`"remaining":`):]
	rem, err := strconv.ParseInt(rest[:strings.IndexAny(rest, ",}")], 10, 64)
	if err != nil {
		e.t.Fatalf("quota of %s: %s", app, b)
	}
	return satLimit - rem
}

// waitIdle waits until nothing runs in the gateway (every request ended on
// its side: a client that hung up ends there a moment later).
func (e *fairEnv) waitIdle() {
	e.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for metricValue(e.t, e.gw, `sluice_admission_in_flight_requests{class="standard",target="engine"}`) != 0 ||
		metricValue(e.t, e.gw, "sluice_inflight_requests") != 0 {
		if time.Now().After(deadline) {
			e.t.Fatal("requests still in flight 20s after the traffic stopped")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// reconcile checks that the gateway charged each application exactly the
// tokens the mock says it served it.
func (e *fairEnv) reconcile() {
	e.t.Helper()
	e.waitIdle()
	u := e.usage()
	for _, app := range fairApps {
		m := u.Tenants[app]
		if got, want := e.charged(app), m.PromptTokens+m.CompletionTokens; got != want {
			e.t.Errorf("%s: the gateway charged %d tokens; the mock served %d (%+v)", app, got, want, m)
		}
	}
}

// TestFairAdmissionQueueing: at the gateway's capacity a request waits in
// the gateway (not in the engine, which has room), and starts once the
// running one ends; its fairAnswer says how long it waited. A queued client
// that hangs up leaves the queue at once, never reaches the upstream and is
// charged nothing.
func TestFairAdmissionQueueing(t *testing.T) {
	e := startFair(t, "sequences=4,kv=0,prefill=0,decode=0", "{maxConcurrent: 1}", "")
	release := e.hold("a")
	defer release()

	b := e.send(context.Background(), "b", chat(false, 5, "queued"), nil)
	e.waitQueued(1)
	ctxC, leave := context.WithCancel(context.Background())
	c := e.send(ctxC, "c", chat(false, 5, "leaves the queue"), nil)
	e.waitQueued(2)
	if u := e.usage(); u.Tenants["b"].Requests != 0 || u.Tenants["c"].Requests != 0 || u.Engine.Waiting != 0 {
		t.Fatalf("queued requests reached the engine: %+v %+v", u.Tenants, u.Engine)
	}

	leave()
	if a := e.await(c); a.err == nil {
		t.Fatalf("C was answered %d after hanging up", a.resp.StatusCode)
	}
	e.waitQueued(1) // C left at once, B still waits
	select {
	case a := <-b:
		t.Fatalf("B answered while A holds the only slot: %+v", a)
	default:
	}

	release()
	a := e.await(b)
	if a.err != nil || a.resp.StatusCode != 200 {
		t.Fatalf("B: %v %d %s", a.err, a.resp.StatusCode, a.body)
	}
	if ms, err := strconv.Atoi(a.resp.Header.Get(fairadmission.HeaderQueueMs)); err != nil || ms <= 0 {
		t.Errorf("B waited but %s = %q", fairadmission.HeaderQueueMs, a.resp.Header.Get(fairadmission.HeaderQueueMs))
	}
	e.reconcile()
	if u := e.usage(); u.Tenants["c"].Requests != 0 || e.charged("c") != 0 {
		t.Errorf("the client that left the queue reached the upstream or was charged: %+v, %d", u.Tenants["c"], e.charged("c"))
	}
}

// TestFairAdmissionFreesOnUpstreamClose: with one slot in the gateway and
// one sequence in the engine, a streaming client hangs up; the request
// queued behind it starts only once the gateway has closed the upstream
// connection. The engine frees its sequence when it sees that connection
// close, so the next request waits in the engine at most for the engine to
// notice (the engine runs in another process: which of the two comes first
// is a race of microseconds; gateway/closebeforefinal_test.go checks the
// order itself). Were the gateway to free the slot while the upstream
// request still ran, the next request would wait in the engine for it.
func TestFairAdmissionFreesOnUpstreamClose(t *testing.T) {
	e := startFair(t, "sequences=1,kv=0,prefill=0,decode=0", "{maxConcurrent: 1}", "")
	release := e.hold("a")
	b := e.send(context.Background(), "b", chat(true, 5, "queued behind a stream"), nil)
	e.waitQueued(1)
	release()
	a := e.await(b)
	if a.err != nil || a.resp.StatusCode != 200 {
		t.Fatalf("B: %v %+v %s", a.err, a.resp, a.body)
	}
	e.waitIdle()
	u := e.usage()
	if u.Engine.QueueWaitSeconds > 0.25 {
		t.Errorf("B waited %.3fs in the engine: the gateway freed A's slot while A's upstream request still ran", u.Engine.QueueWaitSeconds)
	}
	if ta := u.Tenants["a"]; ta.Cancelled != 1 || ta.CompletionTokens == 0 {
		t.Errorf("the mock's record of A: %+v; want cancelled mid-stream", ta)
	}
	e.reconcile()
}

// TestFairAdmissionRefusals: a request whose expected start is past its
// deadline is refused at once; one whose deadline passes while it waits
// leaves with 429 after it; over the class's queue bound a request is
// refused with advice to retry. Every refusal is a 429 with the
// rate-limit envelope, X-Sluice-Policy and the retry headers.
func TestFairAdmissionRefusals(t *testing.T) {
	e := startFair(t, "sequences=4,kv=0,prefill=0,decode=0", "{maxConcurrent: 1}",
		"  classes:\n    standard: {maxQueuedWork: 30}\n")
	// One request that holds its slot ~300ms teaches the gateway the
	// release rate (the expected start is unknown before).
	warm := e.await(e.send(context.Background(), "d", chat(false, 3, "warm"), map[string]string{mockllm.HeaderTokenDelay: "150"}))
	if warm.err != nil || warm.resp.StatusCode != 200 {
		t.Fatalf("warm-up: %v %+v", warm.err, warm.resp)
	}
	release := e.hold("a")
	defer release()

	check := func(a fairAnswer, what string, retry string, retryAfter bool) {
		t.Helper()
		if a.err != nil || a.resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("%s: %v %+v %s", what, a.err, a.resp, a.body)
		}
		h := a.resp.Header
		if gwerrortest.MustOpenAI(t, a.body).Code != gwerror.CodeRateLimitExceeded || h.Get(gwerror.HeaderPolicy) != fairadmission.Name ||
			h.Get("X-Should-Retry") != retry || (h.Get("Retry-After") != "") != retryAfter {
			t.Fatalf("%s: code %s, headers %v", what, a.body, h)
		}
	}
	unmeetable := e.await(e.send(context.Background(), "b", chat(false, 5, "in a hurry"), map[string]string{fairadmission.DefaultDeadlineHeader: "50"}))
	check(unmeetable, "deadline unmeetable", "false", true)
	if unmeetable.took > 2*time.Second || !strings.Contains(string(unmeetable.body), "within its deadline of 50ms") {
		t.Errorf("deadline unmeetable took %v: %s", unmeetable.took, unmeetable.body)
	}

	expired := e.await(e.send(context.Background(), "b", chat(false, 5, "patient, up to a point"), map[string]string{fairadmission.DefaultDeadlineHeader: "1500"}))
	check(expired, "deadline exceeded", "false", true)
	if ms, _ := strconv.Atoi(expired.resp.Header.Get(fairadmission.HeaderQueueMs)); ms < 1500 || !strings.Contains(string(expired.body), "deadline of 1.5s passed") {
		t.Errorf("deadline exceeded after %s ms: %s", expired.resp.Header.Get(fairadmission.HeaderQueueMs), expired.body)
	}

	queued := e.send(context.Background(), "c", chat(false, 5, "first in the queue"), nil)
	e.waitQueued(1)
	full := e.await(e.send(context.Background(), "c", chat(false, 5, "one too many"), nil))
	check(full, "queue full", "true", true)
	// Another application's queue is its own.
	other := e.send(context.Background(), "b", chat(false, 5, "another queue"), nil)
	e.waitQueued(2)

	release()
	for _, ch := range []<-chan fairAnswer{queued, other} {
		if a := e.await(ch); a.err != nil || a.resp.StatusCode != 200 {
			t.Fatalf("queued request: %v %+v %s", a.err, a.resp, a.body)
		}
	}
	if refused := metricValue(t, e.gw, `sluice_admission_refusals_total{class="standard",reason="queue_full",target="engine"}`); refused != 1 {
		t.Errorf("queue_full refusals %v; want 1", refused)
	}
	e.reconcile()
}

// TestFairAdmissionReloadKeepsQueues: a reload that raises the capacity
// starts the request that was waiting (the queue survived the reload)
// without the running one ending.
func TestFairAdmissionReloadKeepsQueues(t *testing.T) {
	e := startFair(t, "sequences=4,kv=0,prefill=0,decode=0", "{maxConcurrent: 1}", "")
	release := e.hold("a")
	defer release()
	b := e.send(context.Background(), "b", chat(false, 5, "waits across a reload"), nil)
	e.waitQueued(1)
	e.write("{maxConcurrent: 2}", "  inputWeight: 1\n")
	a := e.await(b)
	if a.err != nil || a.resp.StatusCode != 200 {
		t.Fatalf("B after the reload: %v %+v %s", a.err, a.resp, a.body)
	}
	if v := metricValue(t, e.gw, `sluice_admission_capacity_requests{target="engine"}`); v != 2 {
		t.Errorf("capacity after the reload %v; want 2", v)
	}
	if ms, _ := strconv.Atoi(a.resp.Header.Get(fairadmission.HeaderQueueMs)); ms <= 0 {
		t.Errorf("B waited but %s = %q", fairadmission.HeaderQueueMs, a.resp.Header.Get(fairadmission.HeaderQueueMs))
	}
	release()
	e.reconcile()
}

// TestFairAdmissionOutputBound: a request that sets no output bound gets
// the policy's maxOutputTokens (64 here); an upstream that ignores it (the
// mock with x-mock-output-tokens) is cut there, streamed or not, with a
// clean ending, and the application is charged what was delivered: its
// prompt and the bound.
func TestFairAdmissionOutputBound(t *testing.T) {
	e := startFair(t, "sequences=4,kv=0,prefill=0,decode=0", "{maxConcurrent: 2}", "")
	for i, stream := range []bool{false, true} {
		app := fairApps[i]
		body := fmt.Appendf(nil, `{"model":"gpt-4o-mini","stream":%v,"messages":[{"role":"user","content":"tell me everything"}]}`, stream)
		a := e.await(e.send(context.Background(), app, body, map[string]string{mockllm.HeaderOutputTokens: "500"}))
		if a.err != nil || a.resp.StatusCode != 200 {
			t.Fatalf("stream %v: %v %+v %s", stream, a.err, a.resp, a.body)
		}
		if got := strings.Count(string(a.body), " tok"); got != 64 {
			t.Errorf("stream %v: %d tokens delivered; want the bound, 64", stream, got)
		}
		if !strings.Contains(string(a.body), `"finish_reason":"length"`) || (stream && !strings.HasSuffix(strings.TrimSpace(string(a.body)), "data: [DONE]")) {
			t.Errorf("stream %v: no clean ending at the bound:\n%s", stream, a.body)
		}
		e.waitIdle()
		prompt := e.usage().Tenants[app].PromptTokens
		if got := e.charged(app); got != prompt+64 {
			t.Errorf("stream %v: charged %d; want the prompt (%d) and the bound (64)", stream, got, prompt)
		}
	}
	if cuts := metricValue(t, e.gw, `sluice_output_bound_cuts_total{route="fair"}`); cuts != 2 {
		t.Errorf("output bound cuts %v; want 2", cuts)
	}
}
