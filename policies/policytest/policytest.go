// Package policytest holds what the tests of policies share: a builder of
// calls as the gateway makes them, chains built from a registry of the
// definitions under test, and an API key index over a map. Limit policies
// add a counter store and a fake clock on top (policies/ratelimit/ratelimittest).
package policytest

import (
	"context"
	"net/http"
	"net/url"
	"testing"

	"sluice/llmapi"
	"sluice/policies"
	"sluice/sharedctx"
)

// Route is the route of the calls and chains built here when none is named.
const Route = "r1"

// Req describes a call. Zero fields take the defaults noted.
type Req struct {
	// Route names the call's route (default Route).
	Route string
	// App is the caller's application id (Metadata x-application-id); "" for
	// a caller without one.
	App string
	// Model is the model the request is served with (default: LLM's model).
	Model string
	// Method (default POST) and Path (default /v1/chat/completions) of the
	// upstream request.
	Method, Path string
	// Header and Query of the request (default: empty).
	Header http.Header
	Query  url.Values
	// LLM is the parsed body (nil: the request carries none).
	LLM *llmapi.Request
}

// NewCall returns the call for r the way the gateway builds one: request id
// "req-1", route r.Route (also its API name) on provider "openai", empty
// metadata and client headers.
func NewCall(r Req) *policies.Call {
	if r.Route == "" {
		r.Route = Route
	}
	if r.Method == "" {
		r.Method = http.MethodPost
	}
	if r.Path == "" {
		r.Path = "/v1/chat/completions"
	}
	if r.Header == nil {
		r.Header = http.Header{}
	}
	if r.Query == nil {
		r.Query = url.Values{}
	}
	if r.Model == "" && r.LLM != nil {
		r.Model = r.LLM.Model
	}
	sh := sharedctx.New("req-1", r.Route, r.Route, "openai")
	sh.SetServedModel(r.Model)
	if r.App != "" {
		sh.Metadata[sharedctx.KeyApplicationID] = r.App
	}
	return &policies.Call{
		Ctx:          context.Background(),
		Shared:       sh,
		Request:      &policies.Request{Method: r.Method, Path: r.Path, Header: r.Header, Query: r.Query, LLM: r.LLM},
		ClientHeader: http.Header{},
	}
}

// BuildChain builds specs into a chain on route with a registry of defs and
// svc (nil: no services), the gateway providing what it provides to every
// chain (policies.GatewayProvided).
func BuildChain(route string, defs []policies.Definition, svc *policies.Services, specs ...policies.EntrySpec) (*policies.Chain, error) {
	info := policies.RouteInfo{RouteName: route, APIName: route, Provider: "openai", Attachment: "route"}
	return policies.NewRegistry(defs...).BuildChain(info, specs, svc, policies.GatewayProvided)
}

// Chain is BuildChain on Route; it fails t on error.
func Chain(t testing.TB, defs []policies.Definition, svc *policies.Services, specs ...policies.EntrySpec) *policies.Chain {
	t.Helper()
	ch, err := BuildChain(Route, defs, svc, specs...)
	if err != nil {
		t.Fatalf("BuildChain: %v", err)
	}
	return ch
}

// Keys is a policies.KeyIndex over a map from key digests (sha256 of the
// plaintext key) to credentials.
type Keys map[[32]byte]policies.Credential

// Lookup implements policies.KeyIndex.
func (k Keys) Lookup(sum [32]byte) (policies.Credential, bool) {
	c, ok := k[sum]
	return c, ok
}

// End is how the gateway ends a request that went through a chain: it
// publishes the request's usage (nil: none), then delivers the outcome to
// the final phase.
type End struct {
	policies.Outcome
	Usage *llmapi.Usage
}

// Finish ends run as the gateway does (see End). It reports whether this was
// the run's first Finish.
func Finish(run *policies.Run, e End) bool {
	run.Call().Shared.SetUsage(e.Usage)
	return run.Finish(e.Outcome)
}
