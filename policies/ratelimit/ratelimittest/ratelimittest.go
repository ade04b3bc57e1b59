// Package ratelimittest is a test harness for limit policies: a registry with
// the policies under test plus tiny helper policies, the memory counter store on a fake clock,
// and a driver that runs a request through a chain the way the gateway does.
package ratelimittest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"sluice/counter"
	"sluice/counter/countertest"
	"sluice/counter/memory"
	"sluice/dialect"
	"sluice/gwerror"
	"sluice/llmapi"
	"sluice/policies"
	"sluice/policies/policytest"
	"sluice/pricing"
	"sluice/tokencount"
)

// Start is the fake clock's starting instant (mid-minute, mid-hour, mid-day).
var Start = time.Date(2026, time.March, 14, 12, 30, 30, 0, time.UTC)

// RejectName is a helper policy that rejects every request with 403.
const RejectName = "test-reject"

// Harness wires a registry, a memory counter store on a fake clock and metrics.
type Harness struct {
	T        testing.TB
	Clock    *countertest.Clock
	Store    *memory.Store
	Metrics  *prometheus.Registry
	Svc      *policies.Services
	Registry *policies.Registry
}

type rejecter struct{}

func (rejecter) OnRequest(*policies.Call) *gwerror.Error {
	return gwerror.New(http.StatusForbidden, gwerror.TypePermission, gwerror.CodeModelNotAllowed, "rejected by test")
}

type noParams struct{}

// New returns a harness whose registry holds defs plus test-reject.
func New(t testing.TB, defs ...policies.Definition) *Harness {
	clock := countertest.NewClock(Start)
	st := memory.New(memory.Options{Now: clock.Now, SweepEvery: -1})
	t.Cleanup(func() { _ = st.Close() })
	cat, err := pricing.New("")
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	all := append([]policies.Definition{policies.Define(RejectName, "v1", "rejects everything",
		func(*noParams, policies.RouteInfo, *policies.Services) (policies.Policy, error) {
			return rejecter{}, nil
		})}, defs...)
	return &Harness{
		T: t, Clock: clock, Store: st, Metrics: reg,
		Svc: &policies.Services{Now: clock.Now, Counters: st, Pricing: cat,
			Tokens: tokencount.New(), Metrics: reg},
		Registry: policies.NewRegistry(all...),
	}
}

// Entry is a chain entry spec.
func Entry(name string, params map[string]any) policies.EntrySpec {
	return policies.EntrySpec{Name: name, Version: "v1", Params: params}
}

// Chain builds a chain on route; it fails the test on error.
func (h *Harness) Chain(route string, specs ...policies.EntrySpec) *policies.Chain {
	h.T.Helper()
	ch, err := h.BuildChain(route, specs...)
	if err != nil {
		h.T.Fatalf("BuildChain: %v", err)
	}
	return ch
}

// BuildChain builds a chain on route, with what the gateway provides
// (policies.GatewayProvided).
func (h *Harness) BuildChain(route string, specs ...policies.EntrySpec) (*policies.Chain, error) {
	return h.Registry.BuildChain(policies.RouteInfo{RouteName: route, APIName: route, Provider: "openai"}, specs, h.Svc,
		policies.GatewayProvided)
}

// Refused is params a policy refuses, with its errors in its order.
type Refused struct {
	Name   string
	Params map[string]any
	// Schema: the errors are the schema's, found before Validate runs.
	// Otherwise they are the policy's own, which its build reports too.
	Schema bool
	Want   []string
}

// CheckValidation checks that a chain of def's policy on route, decoded as
// the gateway decodes it (schema, then Validate), refuses each case with
// exactly its Want.
func (h *Harness) CheckValidation(def policies.Definition, route string, cases []Refused) {
	h.T.Helper()
	for _, tc := range cases {
		if got := h.ParamErrors(route, Entry(def.Name, tc.Params)); !slices.Equal(got, tc.Want) {
			h.T.Errorf("%s: errors %q, want %q", tc.Name, got, tc.Want)
		}
	}
}

// CheckBuild checks that def.Build, handed each case's params directly
// (BuildErrors), refuses the policy's own cases with exactly their Want, as
// Validate does, and builds valid.
func (h *Harness) CheckBuild(def policies.Definition, route string, cases []Refused, valid map[string]any) {
	h.T.Helper()
	for _, tc := range cases {
		if tc.Schema {
			continue
		}
		if got := h.BuildErrors(def, route, tc.Params); !slices.Equal(got, tc.Want) {
			h.T.Errorf("%s: build errors %q, want %q", tc.Name, got, tc.Want)
		}
	}
	if got := h.BuildErrors(def, route, valid); got != nil {
		h.T.Errorf("valid params %v: build errors %q", valid, got)
	}
}

// ParamErrors builds a chain of specs on route and returns the params
// errors of the entry that failed, each "path: message" (ParamError.Error),
// in the policy's order; nil when the chain builds. Any other error fails
// the test.
func (h *Harness) ParamErrors(route string, specs ...policies.EntrySpec) []string {
	h.T.Helper()
	_, err := h.BuildChain(route, specs...)
	if err == nil {
		return nil
	}
	var ee *policies.EntryError
	if !errors.As(err, &ee) || len(ee.Params) == 0 {
		h.T.Fatalf("BuildChain: %v, want params errors", err)
	}
	return messages(ee.Params)
}

// BuildErrors builds params with def.Build, skipping the schema and
// Validate: the params errors of a build that relies on no earlier check,
// as ParamErrors lists them ("path: message"); nil when it builds. params
// is def's params struct (a pointer), or a map[string]any decoded into one
// with encoding/json. Any other error fails the test.
func (h *Harness) BuildErrors(def policies.Definition, route string, params any) []string {
	h.T.Helper()
	p := params
	if m, ok := params.(map[string]any); ok {
		js, err := json.Marshal(m)
		if err != nil {
			h.T.Fatal(err)
		}
		p = def.NewParams()
		if err := json.Unmarshal(js, p); err != nil {
			h.T.Fatal(err)
		}
	}
	pol, err := def.Build(p, policies.RouteInfo{RouteName: route, APIName: route, Provider: "openai"}, h.Svc)
	if err == nil {
		if c, ok := pol.(policies.Closer); ok {
			_ = c.Close()
		}
		return nil
	}
	var pe policies.ParamErrors
	if !errors.As(err, &pe) {
		h.T.Fatalf("%s build: %v, want params errors", def.Name, err)
	}
	return messages(pe)
}

func messages(pe policies.ParamErrors) []string {
	out := make([]string, len(pe))
	for i, e := range pe {
		out[i] = e.Error()
	}
	return out
}

// Req describes a chat request.
type Req struct {
	Model     string
	MaxTokens int64
	N         int
	App       string
	// Content is the user message ("hello" when empty).
	Content string
}

// Call builds a call for a chat completion on route.
func (h *Harness) Call(route string, r Req) *policies.Call {
	h.T.Helper()
	if r.Model == "" {
		r.Model = "gpt-4o"
	}
	if r.Content == "" {
		r.Content = "hello"
	}
	body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":%q}]`, r.Model, r.Content)
	if r.MaxTokens > 0 {
		body += fmt.Sprintf(`,"max_tokens":%d`, r.MaxTokens)
	}
	if r.N > 0 {
		body += fmt.Sprintf(`,"n":%d`, r.N)
	}
	body += "}"
	llm, gerr := llmapi.Parse(llmapi.ChatCompletions, []byte(body))
	if gerr != nil {
		h.T.Fatalf("parse: %v", gerr)
	}
	call := policytest.NewCall(policytest.Req{Route: route, App: r.App, LLM: llm})
	call.Started = h.Clock.Now()
	return call
}

// Do runs call through ch like the gateway: the request phase, then (when
// admitted) one upstream attempt unless e ends before one (Rejected, or
// Failed or Cancelled without WentUpstream), and the end e (its usage
// published, then its outcome delivered). It returns the rejection, if any, and the run.
func (h *Harness) Do(ch *policies.Chain, call *policies.Call, e policytest.End) (*gwerror.Error, *policies.Run) {
	run := ch.Start(call)
	if gerr := run.Request(); gerr != nil {
		return gerr, run
	}
	beforeUpstream := e.Kind == policies.Failed || e.Kind == policies.Cancelled
	if e.Kind != policies.Rejected && (!beforeUpstream || e.WentUpstream) {
		run.MarkUpstream()
	}
	policytest.Finish(run, e)
	return nil, run
}

// Completed is a Completed end with usage u.
func Completed(u *llmapi.Usage) policytest.End {
	return policytest.End{Outcome: policies.Outcome{Kind: policies.Completed, Status: 200, WentUpstream: true}, Usage: u}
}

// Usage is complete authoritative usage for n choices.
func Usage(prompt, completion int64, n int) *llmapi.Usage {
	return &llmapi.Usage{PromptTokens: prompt, CompletionTokens: completion, TotalTokens: prompt + completion,
		Authoritative: true, ExpectedChoices: n, FinishedChoices: n}
}

// Counted is usage the gateway counted for one choice (the output forwarded
// to a client that went away, or a stream without usage): a lower bound.
func Counted(prompt, completion int64) *llmapi.Usage {
	return &llmapi.Usage{PromptTokens: prompt, CompletionTokens: completion, TotalTokens: prompt + completion,
		Counted: true, ExpectedChoices: 1}
}

// Remaining peeks a counter's remaining units.
func (h *Harness) Remaining(key string, l counter.Limit) int64 {
	h.T.Helper()
	var res counter.Result
	if err := h.Store.Peek(context.Background(), []counter.Debit{{Key: key, Limit: l}}, &res); err != nil {
		h.T.Fatal(err)
	}
	return res.Remaining[0]
}

// Gauge reads a gauge or counter value from the metrics registry by name and
// labels (0 when absent).
func (h *Harness) Gauge(name string, labels map[string]string) float64 {
	h.T.Helper()
	mfs, err := h.Metrics.Gather()
	if err != nil {
		h.T.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		var sum float64
		for _, m := range mf.GetMetric() {
			if !match(m, labels) {
				continue
			}
			switch {
			case m.Gauge != nil:
				sum += m.Gauge.GetValue()
			case m.Counter != nil:
				sum += m.Counter.GetValue()
			case m.Histogram != nil:
				sum += float64(m.Histogram.GetSampleCount())
			}
		}
		return sum
	}
	return 0
}

func match(m *dto.Metric, labels map[string]string) bool {
	for k, v := range labels {
		found := false
		for _, lp := range m.GetLabel() {
			if lp.GetName() == k && lp.GetValue() == v {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// RateHeaders renders the request's rate-limit state as the OpenAI-dialect
// headers the gateway would send with a success.
func RateHeaders(c *policies.Call) http.Header {
	h := http.Header{}
	c.Limits().WriteHeader(h, dialect.OpenAI)
	return h
}

// DenialHeaders renders a denial's own rate-limit counters as OpenAI-dialect
// headers.
func DenialHeaders(g *gwerror.Error) http.Header {
	h := http.Header{}
	g.Limits.WriteHeader(h, dialect.OpenAI)
	return h
}
