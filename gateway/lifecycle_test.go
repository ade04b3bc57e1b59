package gateway

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"sluice/deployment"
	"sluice/policies"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Close records the call; a second one is a misuse.
func (r *recorder) Close() error {
	if r.closes.Add(1) > 1 {
		r.log.addMisuse(fmt.Sprintf("recorder %s closed twice", r.p.Tag))
	}
	return nil
}

// checkOpen records a misuse when a phase runs on a closed instance.
func (r *recorder) checkOpen(phase string) {
	if r.closes.Load() > 0 {
		r.log.addMisuse(fmt.Sprintf("recorder %s: %s phase after Close", r.p.Tag, phase))
	}
}

func (l *recLog) addBuilt(r *recorder) {
	l.mu.Lock()
	l.built = append(l.built, r)
	l.mu.Unlock()
}

func (l *recLog) addMisuse(m string) {
	l.mu.Lock()
	l.misuse = append(l.misuse, m)
	l.mu.Unlock()
}

// instances returns the recorders built with tag.
func (l *recLog) instances(tag string) []*recorder {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []*recorder
	for _, r := range l.built {
		if r.p.Tag == tag {
			out = append(out, r)
		}
	}
	return out
}

// closedCounts is the Close count of each recorder built with tag.
func (l *recLog) closedCounts(tag string) []int32 {
	var out []int32
	for _, r := range l.instances(tag) {
		out = append(out, r.closes.Load())
	}
	return out
}

// checkAllClosed fails t unless every recorder built was closed exactly once
// and no phase ran on a closed one (after Shutdown).
func (l *recLog) checkAllClosed(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := len(l.misuse); n > 0 {
		t.Errorf("%d lifecycle misuses, the first: %s", n, strings.Join(l.misuse[:min(n, 5)], "; "))
	}
	for _, r := range l.built {
		if n := r.closes.Load(); n != 1 {
			t.Errorf("recorder %s (instance %s) closed %d times after Shutdown, want 1", r.p.Tag, r.id, n)
		}
	}
}

// waitClosed waits until every recorder built with tag has been closed.
func (l *recLog) waitClosed(t *testing.T, tag string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		all := true
		for _, n := range l.closedCounts(tag) {
			all = all && n > 0
		}
		if all {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("recorders %s not closed: %v", tag, l.closedCounts(tag))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// blockingUpstream answers like fakeLLM, but a request with header
// x-fake-block waits until release is called (at the latest when the test
// ends); arrived receives one value per such request once it reached the
// upstream.
func blockingUpstream(t *testing.T) (url string, arrived chan struct{}, release func()) {
	arrived, gate := make(chan struct{}, 16), make(chan struct{})
	fake := &fakeLLM{}
	srv := startUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("x-fake-block") != "" {
			arrived <- struct{}{}
			<-gate
		}
		fake.ServeHTTP(w, r)
	}))
	var once sync.Once
	release = func() { once.Do(func() { close(gate) }) }
	// Before the upstream's own cleanup, which waits for its handlers.
	t.Cleanup(release)
	return srv.URL, arrived, release
}

// openStream starts a chat stream under context ctx with request id id and
// delayMs between the upstream's tokens, reads its first event and returns
// the rest (the body is closed when the test ends).
func (e *testEnv) openStream(t *testing.T, ctx, id string, delayMs int) *bufio.Reader {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, e.base+ctx+"/v1/chat/completions", strings.NewReader(streamBody))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", id)
	req.Header.Set("x-mock-token-delay-ms", strconv.Itoa(delayMs))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	br := bufio.NewReader(resp.Body)
	readEvents(t, br, 1)
	return br
}

// postAsync sends a chat completion in the background; the result arrives on
// the channel (status, or -1 on a transport error).
func postAsync(url, id string, hdr map[string]string) <-chan int {
	out := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(chatBody))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Request-Id", id)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			out <- -1
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		out <- resp.StatusCode
	}()
	return out
}

func counts(n ...int32) string { return fmt.Sprint(n) }

// TestReloadClosesReplacedInstancesWhenDrained: a reload leaves the replaced
// instances open while a request that started on them is in flight (its
// upstream blocks), and closes them, once, after its final call; the new
// instances stay open until Shutdown. A reload with nothing in flight closes
// the replaced instances before Apply returns.
func TestReloadClosesReplacedInstancesWhenDrained(t *testing.T) {
	up, arrived, release := blockingUpstream(t)
	env := startGateway(t, recDeployment([]string{up}, 0, rec("old", nil)))
	blocked := postAsync(env.base+"/openai/v1/chat/completions", "req-blocked", map[string]string{"x-fake-block": "1"})
	<-arrived

	if err := env.gw.Apply(recDeployment([]string{up}, 0, rec("new", nil))); err != nil {
		t.Fatal(err)
	}
	resp, body := env.post(t, "/openai/v1/chat/completions", "application/json", chatBody, map[string]string{"X-Request-Id": "req-new"})
	if resp.StatusCode != 200 {
		t.Fatalf("request on the new configuration: %d %s", resp.StatusCode, body)
	}
	if f := env.log.waitFinals(t, "req-new", 1); f[0].Tag != "new" {
		t.Fatalf("request after the reload ran on %q", f[0].Tag)
	}
	if got := counts(env.log.closedCounts("old")...); got != "[0]" {
		t.Fatalf("old instance closes %s while a request still runs on it, want [0]", got)
	}

	release()
	if status := <-blocked; status != 200 {
		t.Fatalf("in-flight request: status %d", status)
	}
	if f := env.log.waitFinals(t, "req-blocked", 1); f[0].Tag != "old" || f[0].Kind != policies.Completed {
		t.Fatalf("in-flight request finals %+v", f)
	}
	env.log.waitClosed(t, "old")
	if got := counts(env.log.closedCounts("new")...); got != "[0]" {
		t.Fatalf("new instance closes %s before Shutdown, want [0]", got)
	}

	// Nothing in flight: Apply itself closes what it replaced.
	if err := env.gw.Apply(recDeployment([]string{up}, 0, rec("newer", nil))); err != nil {
		t.Fatal(err)
	}
	if got := counts(env.log.closedCounts("new")...); got != "[1]" {
		t.Fatalf("replaced idle instance closes %s when Apply returned, want [1]", got)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := env.gw.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if got := counts(env.log.closedCounts("newer")...); got != "[1]" {
		t.Fatalf("live instance closes %s after Shutdown, want [1]", got)
	}
	if err := env.gw.Apply(recDeployment([]string{up}, 0, rec("late", nil))); err == nil {
		t.Fatal("Apply after Shutdown succeeded")
	}
	if got := env.log.instances("late"); len(got) != 0 {
		t.Fatalf("Apply after Shutdown built %d instances", len(got))
	}
}

// TestStreamAcrossReloadClosesAfterTheStream: a stream in flight across a
// reload keeps its instances open to its end; they are closed after its
// final call.
func TestStreamAcrossReloadClosesAfterTheStream(t *testing.T) {
	srv := startUpstream(t, &fakeLLM{})
	env := startGateway(t, recDeployment([]string{srv.URL}, 0, rec("old", nil)))
	br := env.openStream(t, "/openai", "req-stream", 50)

	if err := env.gw.Apply(recDeployment([]string{srv.URL}, 0, rec("new", nil))); err != nil {
		t.Fatal(err)
	}
	if got := counts(env.log.closedCounts("old")...); got != "[0]" {
		t.Fatalf("old instance closes %s mid-stream, want [0]", got)
	}
	rest, err := io.ReadAll(br)
	if err != nil || !strings.Contains(string(rest), "[DONE]") {
		t.Fatalf("stream across the reload: %v %s", err, rest)
	}
	if f := env.log.waitFinals(t, "req-stream", 1); f[0].Tag != "old" || f[0].Kind != policies.Completed {
		t.Fatalf("stream finals %+v", f)
	}
	env.log.waitClosed(t, "old")
	if got := counts(env.log.closedCounts("new")...); got != "[0]" {
		t.Fatalf("new instance closes %s, want [0]", got)
	}
}

// TestShutdownClosesAfterTheDrain: Shutdown closes the live instances once
// the request in flight has ended (it drains it first), and not before.
func TestShutdownClosesAfterTheDrain(t *testing.T) {
	up, arrived, release := blockingUpstream(t)
	env := startGateway(t, recDeployment([]string{up}, 0, rec("live", nil)))
	blocked := postAsync(env.base+"/openai/v1/chat/completions", "req-blocked", map[string]string{"x-fake-block": "1"})
	<-arrived
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		shut <- env.gw.Shutdown(ctx)
	}()
	time.Sleep(100 * time.Millisecond)
	if got := counts(env.log.closedCounts("live")...); got != "[0]" {
		t.Fatalf("live instance closes %s while a request drains, want [0]", got)
	}
	release()
	if status := <-blocked; status != 200 {
		t.Fatalf("drained request: status %d", status)
	}
	if err := <-shut; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if got := counts(env.log.closedCounts("live")...); got != "[1]" {
		t.Fatalf("live instance closes %s after Shutdown, want [1]", got)
	}
	if f := env.log.waitFinals(t, "req-blocked", 1); f[0].Kind != policies.Completed {
		t.Fatalf("drained request finals %+v", f)
	}
}

// TestReloadStormClosesEachInstanceOnce: requests and streams run while the
// configuration is replaced many times; every instance is closed exactly
// once, never while a phase may still run on it (checkAllClosed after
// Shutdown, and recorder.checkOpen on every phase). Run with -race.
func TestReloadStormClosesEachInstanceOnce(t *testing.T) {
	srv := startUpstream(t, &fakeLLM{})
	env := startGateway(t, recDeployment([]string{srv.URL}, 0, rec("gen-0", nil), rec("second", nil)))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var served atomic.Int64
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				body := chatBody
				if (w+i)%2 == 0 {
					body = streamBody
				}
				req, _ := http.NewRequest(http.MethodPost, env.base+"/openai/v1/chat/completions", strings.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("x-mock-token-delay-ms", "1")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == 200 {
					served.Add(1)
				}
			}
		}()
	}
	const reloads = 40
	for i := 1; i <= reloads; i++ {
		if err := env.gw.Apply(recDeployment([]string{srv.URL}, 0, rec(fmt.Sprintf("gen-%d", i), nil), rec("second", nil))); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if served.Load() == 0 {
		t.Fatal("no request served during the reloads")
	}
	for i := 0; i < reloads; i++ {
		env.log.waitClosed(t, fmt.Sprintf("gen-%d", i))
	}
	if got := counts(env.log.closedCounts(fmt.Sprintf("gen-%d", reloads))...); got != "[0]" {
		t.Fatalf("current instance closes %s before Shutdown, want [0]", got)
	}
	t.Logf("%d requests served across %d reloads", served.Load(), reloads)
}

// TestFailedApplyClosesWhatItBuilt: a deployment whose second route's chain
// does not build is refused; the chain already built for its first route is
// closed, the serving configuration's is not.
func TestFailedApplyClosesWhatItBuilt(t *testing.T) {
	srv := startUpstream(t, &fakeLLM{})
	env := startGateway(t, recDeployment([]string{srv.URL}, 0, rec("live", nil)))
	d := recDeployment([]string{srv.URL}, 0, rec("built", nil))
	d.Routes = append(d.Routes, deployment.Route{Name: "r2", Context: "/r2", Provider: "openai",
		Policies: []deployment.PolicyEntry{{Name: "no-such-policy", Version: "v1"}}})
	if err := env.gw.Apply(prepared(d)); err == nil {
		t.Fatal("a deployment with a chain that does not build was applied")
	}
	if got := counts(env.log.closedCounts("built")...); got != "[1]" {
		t.Fatalf("instance of the refused deployment closes %s, want [1]", got)
	}
	if got := counts(env.log.closedCounts("live")...); got != "[0]" {
		t.Fatalf("serving instance closes %s, want [0]", got)
	}
}
