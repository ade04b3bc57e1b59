package fairadmission_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"sluice/admission"
	"sluice/counter"
	"sluice/gwerror"
	"sluice/llmapi"
	"sluice/policies"
	"sluice/policies/fairadmission"
	"sluice/policies/policytest"
	"sluice/policies/ratelimit/ratelimittest"
	"sluice/policies/tokenratelimit"
	"sluice/sse"
)

const route = "r"

// target is the provider the harness's routes go to.
const target = "openai"

// safety bounds a wait for something that must happen; never a measure.
const safety = 10 * time.Second

type env struct {
	*ratelimittest.Harness
	sched *admission.Scheduler
}

func newEnv(t testing.TB, cfg admission.Config) *env {
	t.Helper()
	h := ratelimittest.New(t, fairadmission.Definition(), tokenratelimit.Definition())
	s, err := admission.New(cfg, admission.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h.Svc.Admission = s
	return &env{Harness: h, sched: s}
}

func capacity(c admission.Capacity) admission.Config {
	return admission.Config{Targets: map[string]admission.Capacity{target: c}}
}

func (e *env) chain(params map[string]any, before ...policies.EntrySpec) *policies.Chain {
	e.T.Helper()
	return e.Chain(route, append(before, ratelimittest.Entry(fairadmission.Name, params))...)
}

func (e *env) stats() admission.TargetStats {
	e.T.Helper()
	for _, ts := range e.sched.Snapshot().Targets {
		if ts.Name == target {
			return ts
		}
	}
	e.T.Fatalf("no target %s", target)
	return admission.TargetStats{}
}

func (e *env) flow(app string) admission.FlowStats {
	e.T.Helper()
	for _, f := range e.stats().Flows {
		if f.App == app {
			return f
		}
	}
	return admission.FlowStats{}
}

// waitQueued waits until n requests wait for the target.
func (e *env) waitQueued(n int) {
	e.T.Helper()
	deadline := time.Now().Add(safety)
	for e.stats().Queued != n {
		if time.Now().After(deadline) {
			e.T.Fatalf("%d requests queued; want %d", e.stats().Queued, n)
		}
		time.Sleep(time.Millisecond) // polling, not measuring
	}
}

// started is a request phase running on its own goroutine.
type started struct {
	run  *policies.Run
	call *policies.Call
	done chan *gwerror.Error
}

func (e *env) start(ch *policies.Chain, call *policies.Call) *started {
	s := &started{run: ch.Start(call), call: call, done: make(chan *gwerror.Error, 1)}
	go func() { s.done <- s.run.Request() }()
	return s
}

func (s *started) result(t *testing.T) *gwerror.Error {
	t.Helper()
	select {
	case g := <-s.done:
		return g
	case <-time.After(safety):
		t.Fatal("the request phase did not return")
		return nil
	}
}

// TestFastPath: below capacity a request starts at once, holds its prompt
// estimate plus its output bound until its final, and its application is
// charged its real usage: input plus twice the output.
func TestFastPath(t *testing.T) {
	e := newEnv(t, capacity(admission.Capacity{MaxConcurrent: 8}))
	ch := e.chain(nil)
	call := e.Call(route, ratelimittest.Req{App: "a", MaxTokens: 100})
	run := ch.Start(call)
	if gerr := run.Request(); gerr != nil {
		t.Fatal(gerr)
	}
	prompt := policies.PromptTokens(call, e.Svc.Tokens)
	if ts := e.stats(); ts.InFlight != 1 || ts.TokensInFlight != prompt+100 {
		t.Fatalf("in flight %d requests, %d tokens; want 1, %d", ts.InFlight, ts.TokensInFlight, prompt+100)
	}
	if v := call.ClientHeader.Get(fairadmission.HeaderQueueMs); v != "" {
		t.Fatalf("a request that did not wait carries %s: %s", fairadmission.HeaderQueueMs, v)
	}
	run.MarkUpstream()
	policytest.Finish(run, ratelimittest.Completed(ratelimittest.Usage(30, 40, 1)))
	if ts := e.stats(); ts.InFlight != 0 || ts.TokensInFlight != 0 {
		t.Fatalf("after the final: %+v", ts)
	}
	if f := e.flow("a"); f.Service != 30+2*40 {
		t.Fatalf("service %v; want 110 (30 input + 2 x 40 output)", f.Service)
	}
}

// TestOutputBound: the request's output bound is maxOutputTokens when it
// sets none or more, its own otherwise, written into the upstream body;
// the ticket holds the bound of every choice.
func TestOutputBound(t *testing.T) {
	for _, tc := range []struct {
		name      string
		maxTokens int64
		n         int
		params    map[string]any
		want      int64
	}{
		{"none: the default", 0, 1, nil, fairadmission.DefaultMaxOutputTokens},
		{"none: the param", 0, 1, map[string]any{"maxOutputTokens": 50}, 50},
		{"more: capped", 900, 1, map[string]any{"maxOutputTokens": 50}, 50},
		{"less: kept", 20, 1, map[string]any{"maxOutputTokens": 50}, 20},
		{"n choices", 20, 3, nil, 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, capacity(admission.Capacity{MaxConcurrent: 8}))
			call := e.Call(route, ratelimittest.Req{MaxTokens: tc.maxTokens, N: tc.n})
			run := e.chain(tc.params).Start(call)
			if gerr := run.Request(); gerr != nil {
				t.Fatal(gerr)
			}
			defer run.Finish(policies.Outcome{Kind: policies.Rejected})
			if llm := call.Request.LLM; llm.MaxTokens != tc.want || !strings.Contains(string(llm.Raw), `"max_tokens":`) {
				t.Fatalf("upstream bound %d (%s); want %d", llm.MaxTokens, llm.Raw, tc.want)
			}
			n := int64(max(tc.n, 1))
			if got, want := e.stats().TokensInFlight, policies.PromptTokens(call, e.Svc.Tokens)+tc.want*n; got != want {
				t.Fatalf("tokens in flight %d; want %d", got, want)
			}
		})
	}
}

// TestQueueing: at capacity a request waits; it starts when the running
// one's final frees the slot, and its answer says how long it waited.
func TestQueueing(t *testing.T) {
	e := newEnv(t, capacity(admission.Capacity{MaxConcurrent: 1}))
	ch := e.chain(nil)
	first := ch.Start(e.Call(route, ratelimittest.Req{App: "a"}))
	if gerr := first.Request(); gerr != nil {
		t.Fatal(gerr)
	}
	second := e.start(ch, e.Call(route, ratelimittest.Req{App: "b"}))
	e.waitQueued(1)
	time.Sleep(5 * time.Millisecond) // so that the wait is at least a millisecond
	first.MarkUpstream()
	policytest.Finish(first, ratelimittest.Completed(ratelimittest.Usage(5, 5, 1)))
	if gerr := second.result(t); gerr != nil {
		t.Fatal(gerr)
	}
	if v := second.call.ClientHeader.Get(fairadmission.HeaderQueueMs); v == "" || v == "0" {
		t.Fatalf("%s = %q after waiting", fairadmission.HeaderQueueMs, v)
	}
	second.run.MarkUpstream()
	policytest.Finish(second.run, ratelimittest.Completed(nil))
	if ts := e.stats(); ts.InFlight != 0 || ts.Queued != 0 {
		t.Fatalf("%+v", ts)
	}
}

// TestRefusals: every refusal is one 429 rate_limit_exceeded with the
// advice the scheduler gives (Retry-After from the expected start,
// x-should-retry), and a message naming the provider.
func TestRefusals(t *testing.T) {
	hold := func(e *env, ch *policies.Chain, app string) *policies.Run {
		run := ch.Start(e.Call(route, ratelimittest.Req{App: app}))
		if gerr := run.Request(); gerr != nil {
			t.Fatal(gerr)
		}
		return run
	}
	// release teaches the scheduler how long a request holds capacity (the
	// expected start is unknown before any release).
	release := func(e *env, ch *policies.Chain) {
		r := hold(e, ch, "warm")
		time.Sleep(20 * time.Millisecond)
		r.MarkUpstream()
		policytest.Finish(r, ratelimittest.Completed(nil))
	}
	for _, tc := range []struct {
		name        string
		cfg         admission.Config
		setup       func(e *env, ch *policies.Chain)
		header      string
		want        string // in the message
		retryAfter  bool
		shouldRetry gwerror.Retry
	}{
		{name: "queue full", cfg: admission.Config{
			Targets: map[string]admission.Capacity{target: {MaxConcurrent: 1}},
			Classes: map[string]admission.Class{admission.DefaultClass: {MaxQueuedWork: 1}}},
			setup: func(e *env, ch *policies.Chain) {
				hold(e, ch, "x")
				e.start(ch, e.Call(route, ratelimittest.Req{App: "a"}))
				e.waitQueued(1)
			},
			want: "has all the work it may queue", shouldRetry: gwerror.RetryYes},
		{name: "deadline unmeetable", cfg: capacity(admission.Capacity{MaxConcurrent: 1}),
			setup: func(e *env, ch *policies.Chain) {
				release(e, ch)
				hold(e, ch, "x")
				for range 3 {
					e.start(ch, e.Call(route, ratelimittest.Req{App: "x"}))
				}
				e.waitQueued(3)
			},
			header: "1", want: "cannot start the request within its deadline of 1ms", retryAfter: true, shouldRetry: gwerror.RetryNo},
		{name: "deadline exceeded", cfg: capacity(admission.Capacity{MaxConcurrent: 1}),
			setup:  func(e *env, ch *policies.Chain) { hold(e, ch, "x") },
			header: "30", want: "its deadline of 30ms passed", shouldRetry: gwerror.RetryNo},
		{name: "too large", cfg: capacity(admission.Capacity{MaxTokensInFlight: 100}),
			want: "can never fit the capacity of provider openai", shouldRetry: gwerror.RetryNo},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, tc.cfg)
			ch := e.chain(map[string]any{"maxOutputTokens": 200})
			if tc.setup != nil {
				tc.setup(e, ch)
			}
			call := e.Call(route, ratelimittest.Req{App: "a"})
			if tc.header != "" {
				call.Request.Header.Set(fairadmission.DefaultDeadlineHeader, tc.header)
			}
			gerr := ch.Start(call).Request()
			if gerr == nil {
				t.Fatal("admitted")
			}
			if gerr.Status != http.StatusTooManyRequests || gerr.Code != gwerror.CodeRateLimitExceeded || gerr.Policy != fairadmission.Name {
				t.Fatalf("refusal %+v", gerr)
			}
			if !strings.Contains(gerr.Message, tc.want) || !strings.Contains(gerr.Message, target) {
				t.Fatalf("message %q; want %q and the provider", gerr.Message, tc.want)
			}
			if (gerr.RetryAfter > 0) != tc.retryAfter || gerr.ShouldRetry != tc.shouldRetry {
				t.Fatalf("Retry-After %v, x-should-retry %v; want %v, %v", gerr.RetryAfter, gerr.ShouldRetry, tc.retryAfter, tc.shouldRetry)
			}
		})
	}
}

func TestBadDeadlineHeader(t *testing.T) {
	e := newEnv(t, capacity(admission.Capacity{MaxConcurrent: 1}))
	ch := e.chain(map[string]any{"deadlineHeader": "x-wait"})
	// A duplicated header is refused, not read first-wins: the client
	// would otherwise choose which of its own values counts.
	for _, v := range [][]string{{"0"}, {"-5"}, {"1.5"}, {"soon"}, {"86400001"}, {"1", "60000"}} {
		call := e.Call(route, ratelimittest.Req{})
		for _, one := range v {
			call.Request.Header.Add("x-wait", one)
		}
		gerr := ch.Start(call).Request()
		if gerr == nil || gerr.Status != http.StatusBadRequest || gerr.Param != "x-wait" || !strings.Contains(gerr.Message, "x-wait") {
			t.Fatalf("%q: %v", v, gerr)
		}
	}
	if ts := e.stats(); ts.InFlight != 0 {
		t.Fatalf("a refused request holds capacity: %+v", ts)
	}
}

// TestClientLeavesWhileQueued: a client that goes away while its request
// waits leaves the queue at once; the answer is a 499 nobody reads, the
// chain records Rejected, and the token budget an earlier policy reserved
// is given back: nothing was charged.
func TestClientLeavesWhileQueued(t *testing.T) {
	e := newEnv(t, capacity(admission.Capacity{MaxConcurrent: 1}))
	limit := ratelimittest.Entry(tokenratelimit.Name, map[string]any{
		"consumerBased": true, "algorithm": "fixed-window", "totalTokenLimits": []any{map[string]any{"count": 100000, "duration": "1h"}}})
	ch := e.chain(nil, limit)
	holder := ch.Start(e.Call(route, ratelimittest.Req{App: "x"}))
	if gerr := holder.Request(); gerr != nil {
		t.Fatal(gerr)
	}
	call := e.Call(route, ratelimittest.Req{App: "a"})
	ctx, cancel := context.WithCancel(context.Background())
	call.Ctx = ctx
	waiting := e.start(ch, call)
	e.waitQueued(1)
	l := counter.Limit{Algorithm: counter.FixedWindow, Max: 100000, Period: time.Hour}
	key := "{r:a}:token-based-ratelimit:total:window-1h"
	if rem := e.Remaining(key, l); rem == 100000 {
		t.Fatal("the limit reserved nothing before the request waited")
	}
	cancel()
	gerr := waiting.result(t)
	if gerr == nil || gerr.Status != gwerror.StatusClientClosed || gerr.Code != gwerror.CodeClientClosed {
		t.Fatalf("answer %v; want 499 client_closed_request", gerr)
	}
	if ts := e.stats(); ts.Queued != 0 || ts.InFlight != 1 {
		t.Fatalf("the request did not leave the queue: %+v", ts)
	}
	if rem := e.Remaining(key, l); rem != 100000 {
		t.Fatalf("remaining %d after the client left; want the reservation released", rem)
	}
	if f := e.flow("a"); f.Service != 0 {
		t.Fatalf("the application that left was charged %v", f.Service)
	}
}

// TestStreamProgress: the stream's output is charged as it is forwarded,
// every progressEvery tokens, and settled with the real usage at the end.
func TestStreamProgress(t *testing.T) {
	e := newEnv(t, capacity(admission.Capacity{MaxConcurrent: 4}))
	ch := e.chain(map[string]any{"progressEvery": 10})
	call := e.Call(route, ratelimittest.Req{App: "a"})
	run := ch.Start(call)
	if gerr := run.Request(); gerr != nil {
		t.Fatal(gerr)
	}
	run.MarkUpstream()
	input := e.flow("a").Service
	for _, step := range []struct {
		out  int64
		want float64 // output service charged so far
	}{{5, 0}, {9, 0}, {10, 20}, {15, 20}, {23, 46}} {
		call.SetStreamOutput(step.out)
		if gerr := run.StreamEvent(&sse.Event{Data: []byte(`{}`)}); gerr != nil {
			t.Fatal(gerr)
		}
		if got := e.flow("a").Service - input; got != step.want {
			t.Fatalf("after %d tokens output charged %v; want %v", step.out, got, step.want)
		}
	}
	prompt := policies.PromptTokens(call, e.Svc.Tokens)
	policytest.Finish(run, policytest.End{Outcome: policies.Outcome{Kind: policies.Cancelled},
		Usage: &llmapi.Usage{PromptTokens: prompt, CompletionTokens: 25, Counted: true}})
	if got := e.flow("a").Service; got != float64(prompt)+50 {
		t.Fatalf("settled service %v; want %v", got, float64(prompt)+50)
	}
}

// TestFinalRefunds: a request that never went upstream (a later policy
// rejected it) is charged nothing and frees its capacity; one without usage
// keeps its input estimate.
func TestFinalRefunds(t *testing.T) {
	e := newEnv(t, capacity(admission.Capacity{MaxConcurrent: 4}))
	ch := e.Chain(route, ratelimittest.Entry(fairadmission.Name, nil), ratelimittest.Entry(ratelimittest.RejectName, nil))
	if gerr, _ := e.Do(ch, e.Call(route, ratelimittest.Req{App: "a"}), policytest.End{}); gerr == nil {
		t.Fatal("not rejected")
	}
	if ts, f := e.stats(), e.flow("a"); ts.InFlight != 0 || f.Service != 0 {
		t.Fatalf("rejected later: %+v, service %v", ts, f.Service)
	}
	ch = e.chain(nil)
	call := e.Call(route, ratelimittest.Req{App: "b"})
	e.Do(ch, call, policytest.End{Outcome: policies.Outcome{Kind: policies.UpstreamFailed, Status: 502}})
	if got, want := e.flow("b").Service, float64(policies.PromptTokens(call, e.Svc.Tokens)); got != want {
		t.Fatalf("upstream failure without usage: service %v; want the input estimate %v", got, want)
	}
}

// TestChainOrder: a limit policy after fair-admission, or a second
// fair-admission, fails the chain with a hint.
func TestChainOrder(t *testing.T) {
	e := newEnv(t, capacity(admission.Capacity{MaxConcurrent: 4}))
	limit := ratelimittest.Entry(tokenratelimit.Name, map[string]any{"totalTokenLimits": []any{map[string]any{"count": 10, "duration": "1m"}}})
	_, err := e.BuildChain(route, ratelimittest.Entry(fairadmission.Name, nil), limit)
	if err == nil || !strings.Contains(err.Error(), "list token-based-ratelimit (policies[1]) before fair-admission") {
		t.Fatalf("limit after: %v", err)
	}
	_, err = e.BuildChain(route, ratelimittest.Entry(fairadmission.Name, nil), ratelimittest.Entry(fairadmission.Name, map[string]any{"progressEvery": 2}))
	if err == nil || !strings.Contains(err.Error(), "admits twice") {
		t.Fatalf("twice: %v", err)
	}
	if _, err := e.BuildChain(route, limit, ratelimittest.Entry(fairadmission.Name, nil)); err != nil {
		t.Fatal(err)
	}
	e.Svc.Admission = nil
	if _, err := e.BuildChain(route, ratelimittest.Entry(fairadmission.Name, nil)); err == nil || !strings.Contains(err.Error(), "no admission scheduler") {
		t.Fatalf("without the service: %v", err)
	}
}

// TestUntrackedProvider: on a provider without capacity the policy holds
// nothing and only bounds the output.
func TestUntrackedProvider(t *testing.T) {
	e := newEnv(t, admission.Config{})
	call := e.Call(route, ratelimittest.Req{})
	if gerr, _ := e.Do(e.chain(nil), call, ratelimittest.Completed(nil)); gerr != nil {
		t.Fatal(gerr)
	}
	if call.Request.LLM.MaxTokens != fairadmission.DefaultMaxOutputTokens || len(e.sched.Snapshot().Targets) != 0 {
		t.Fatalf("bound %d, targets %+v", call.Request.LLM.MaxTokens, e.sched.Snapshot().Targets)
	}
}
