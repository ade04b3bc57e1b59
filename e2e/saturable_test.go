package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"sluice/mockllm"
	"sluice/tokencount"
)

// The saturable mock behind the real gateway (issue 14 item 7): the mock's
// engine holds a sequence for every request in flight and queues the rest;
// a client that hangs up frees its sequence only because the gateway closes
// the upstream request; and the mock's own per-tenant counters reconcile
// with the gateway's per-application charges.

// startSaturable starts an in-process mock with capacity c and a gateway
// whose route "sat" (api-key-auth and a per-application token counter of
// satLimit per hour) goes to it, forwarding the mock's x-mock-* headers.
func startSaturable(t *testing.T, c mockllm.Capacity, apps []string) (*limitsEnv, string) {
	t.Helper()
	mock := httptest.NewServer(mockllm.New(mockllm.Options{Counter: tokencount.New(), Capacity: &c}))
	t.Cleanup(mock.Close)
	doc := deploymentDoc(apps, fmt.Sprintf(`  - name: sat
    context: /sat
    provider: engine
    policies:
      - {name: api-key-auth, version: v1}
      - name: token-based-ratelimit
        version: v1
        params: {consumerBased: true, algorithm: fixed-window, totalTokenLimits: [{count: %d, duration: 1h}]}
`, satLimit))
	doc = strings.Replace(doc, "providers:\n", fmt.Sprintf("providers:\n  - {name: engine, type: openai, url: %q, forwardHeaders: [\"x-mock-*\"]}\n", mock.URL), 1)
	return startLimitsEnv(t, doc, nil), mock.URL
}

const satLimit = 10_000_000

func mockUsage(t *testing.T, mockURL string) mockllm.Usage {
	t.Helper()
	resp, err := http.Get(mockURL + "/mock/usage")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var u mockllm.Usage
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET /mock/usage: %d %s", resp.StatusCode, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(&u); err != nil {
		t.Fatal(err)
	}
	return u
}

func waitMock(t *testing.T, mockURL, what string, cond func(mockllm.Usage) bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond(mockUsage(t, mockURL)) {
		if time.Now().After(deadline) {
			t.Fatalf("the mock never reached: %s (%+v)", what, mockUsage(t, mockURL))
		}
		time.Sleep(2 * time.Millisecond) // polling, not measuring
	}
}

// used is what the gateway charged app on route sat: its token counter's
// limit minus what remains.
func (e *limitsEnv) satUsed(app string) int64 {
	e.t.Helper()
	q := e.quota("/sat", app)
	if len(q) != 1 {
		e.t.Fatalf("quota of %s: %v; want one counter", app, q)
	}
	for _, rem := range q {
		return satLimit - rem
	}
	return 0
}

// TestSaturableMockHangUpFreesSequence: with one sequence, B waits in the
// engine's queue behind A's stream; A's client hangs up mid-stream and B is
// served, because the gateway ended A's upstream request.
func TestSaturableMockHangUpFreesSequence(t *testing.T) {
	env, mockURL := startSaturable(t, mockllm.Capacity{Sequences: 1}, []string{"a", "b"})
	stream := []byte(`{"model":"gpt-4o-mini","stream":true,"max_tokens":50,"messages":[{"role":"user","content":"a long answer, please"}]}`)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	respA, err := env.open(ctx, "/sat/v1/chat/completions", "a", stream,
		map[string]string{mockllm.DefaultUsageHeader: "a", mockllm.HeaderStallAfter: "3"})
	if err != nil || respA.StatusCode != 200 {
		t.Fatalf("A: %v %v", respA, err)
	}
	defer respA.Body.Close()
	waitMock(t, mockURL, "A holds the sequence", func(u mockllm.Usage) bool { return u.Engine.RunningSequences == 1 })

	type answer struct {
		status int
		body   []byte
		err    error
	}
	bDone := make(chan answer, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		resp, body, err := env.send(ctx, "/sat/v1/chat/completions", "b",
			[]byte(`{"model":"gpt-4o-mini","max_tokens":5,"messages":[{"role":"user","content":"short"}]}`),
			map[string]string{mockllm.DefaultUsageHeader: "b"})
		if err != nil {
			bDone <- answer{err: err}
			return
		}
		bDone <- answer{status: resp.StatusCode, body: body}
	}()
	waitMock(t, mockURL, "B queued in the engine", func(u mockllm.Usage) bool { return u.Engine.Waiting == 1 })
	select {
	case a := <-bDone:
		t.Fatalf("B answered while A held the only sequence: %d %s %v", a.status, a.body, a.err)
	default:
	}

	cancel() // A's client hangs up
	select {
	case a := <-bDone:
		if a.err != nil || a.status != 200 {
			t.Fatalf("B: %d %s %v", a.status, a.body, a.err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("B was never served: the upstream request of the client that hung up still holds the sequence")
	}
	env.waitSettled()
	u := mockUsage(t, mockURL)
	if a := u.Tenants["a"]; a.Cancelled != 1 || a.CompletionTokens != 3 {
		t.Errorf("mock's record of A: %+v; want cancelled after 3 tokens", a)
	}
	if u.Engine.RunningSequences != 0 || u.Engine.Waiting != 0 || u.Engine.MaxWaiting != 1 {
		t.Errorf("engine %+v", u.Engine)
	}
	// Reconciliation: the gateway charged each application exactly the
	// tokens the mock says it served it (prompt and output), the hang-up
	// included.
	for _, app := range []string{"a", "b"} {
		m := u.Tenants[app]
		if got, want := env.satUsed(app), m.PromptTokens+m.CompletionTokens; got != want {
			t.Errorf("%s: the gateway charged %d tokens; the mock served %d (%+v)", app, got, want, m)
		}
	}
}

// TestSaturableMockReconciles: two streams hold both of the engine's
// sequences while 30 requests of three applications (bodies and streams of
// mixed sizes) queue behind them on sequences and KV tokens; the streams'
// clients hang up and the queue drains. Each application's charge equals
// the mock's count of what it served.
func TestSaturableMockReconciles(t *testing.T) {
	apps := []string{"a", "b", "c"}
	env, mockURL := startSaturable(t, mockllm.Capacity{Sequences: 2, KVTokens: 400}, apps)
	holdCtx, hangUp := context.WithCancel(context.Background())
	defer hangUp()
	for i, app := range []string{"a", "b"} {
		body := fmt.Sprintf(`{"model":"gpt-4o-mini","stream":true,"max_tokens":40,"messages":[{"role":"user","content":"hold %d"}]}`, i)
		resp, err := env.open(holdCtx, "/sat/v1/chat/completions", app, []byte(body),
			map[string]string{mockllm.DefaultUsageHeader: app, mockllm.HeaderStallAfter: fmt.Sprint(2 + i)})
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("holding stream %d: %v %v", i, resp, err)
		}
		defer resp.Body.Close()
	}
	waitMock(t, mockURL, "both sequences held", func(u mockllm.Usage) bool { return u.Engine.RunningSequences == 2 })

	const jobs = 30
	errs := make(chan error, jobs)
	for i := 0; i < jobs; i++ {
		app := apps[i%3]
		body := fmt.Sprintf(`{"model":"gpt-4o-mini","max_tokens":%d,"stream":%v,"messages":[{"role":"user","content":%q}]}`,
			[]int{1, 17, 120}[i%3], i%2 == 0, strings.Repeat("word ", 1+i*3))
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			resp, b, err := env.send(ctx, "/sat/v1/chat/completions", app, []byte(body), map[string]string{mockllm.DefaultUsageHeader: app})
			switch {
			case err != nil:
				errs <- err
			case resp.StatusCode != 200:
				errs <- fmt.Errorf("%s: %d %s", app, resp.StatusCode, b)
			default:
				errs <- nil
			}
		}()
	}
	waitMock(t, mockURL, "every request queued", func(u mockllm.Usage) bool { return u.Engine.Waiting == jobs })
	hangUp()
	for i := 0; i < jobs; i++ {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	env.waitSettled()
	waitMock(t, mockURL, "all recorded", func(u mockllm.Usage) bool { return u.Total.Requests == jobs+2 })
	u := mockUsage(t, mockURL)
	if u.Total.Completed != jobs || u.Total.Cancelled != 2 {
		t.Fatalf("mock total %+v; want %d completed and the 2 holding streams cancelled", u.Total, jobs)
	}
	for _, app := range apps {
		m := u.Tenants[app]
		if got, want := env.satUsed(app), m.PromptTokens+m.CompletionTokens; got != want || want == 0 {
			t.Errorf("%s: the gateway charged %d tokens; the mock served %d (%+v)", app, got, want, m)
		}
	}
}
