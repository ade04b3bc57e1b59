// Package generate turns the platform's settings (providers with their Rate
// Limit settings and guardrails, applications with their grants and keys)
// into the deployment document every gateway serves. Generate is a pure
// function: the same settings always give the same document, byte for byte
// once rendered, and nothing is read from anywhere else. It imports the
// deployment document and nothing of the store, the API or the gateway.
//
// Each provider becomes one route named after it, at /<provider name>, with
// the chain (docs/platform.md has the table):
//
//  1. api-key-auth, admitting the applications granted the provider;
//  2. the backend limits, then the consumer limits (consumerBased: true);
//     in each scope per limit set: request (basic-ratelimit), token
//     (token-based-ratelimit totalTokenLimits), cost
//     (llm-cost-based-ratelimit); a global set is one counter across every
//     resource, a per-resource set one counter per resource
//     (resourceBased: true), each listed resource's entries attached to it
//     and the default's to every other resource;
//  3. the guardrails, in their order;
//  4. llm-cost, once, last, unless a guardrail is llm-cost itself: it sets
//     the request's cost, which every usage record, the cost metrics and
//     the Usage page report whether or not a cost limit exists. Its
//     response phase runs first (the response phase runs in reverse
//     order), so every cost limit settles with the request's cost. An
//     operator's own llm-cost guardrail takes its place; it must then come
//     after every cost-limit guardrail (the chain check says so).
//
// The document's counters section is Settings.Counters, the platform-wide
// counter store setting: with a Redis store every generated limit is one
// counter across all the gateways.
//
// Backend and consumer entries of one policy never merge: their scopes
// differ (route, route:app), and so do their counter keys. Counter keys
// hold no limit value, so editing a limit keeps the usage counted.
package generate

import (
	"fmt"
	"sort"
	"strconv"
	"time"

	"sluice/deployment"
)

// Settings is everything a deployment is generated from.
type Settings struct {
	Providers    []Provider
	Applications []Application
	// Counters is the document's counters section, copied as is: the
	// platform-wide counter store setting (the zero value: each gateway
	// counts in memory; a Redis store makes every limit cluster-wide).
	Counters deployment.Counters
}

// Provider is an upstream with its route's settings.
type Provider struct {
	ID   string
	Name string
	// Type is "openai" or "anthropic".
	Type    string
	URL     string
	Targets []string
	// Auth is the credential header sent upstream (nil: none).
	Auth *deployment.Auth
	// ForwardHeaders and ApplicationHeader are copied to the document's
	// provider as they are (deployment.Provider).
	ForwardHeaders    []string
	ApplicationHeader string
	RateLimits        RateLimits
	Guardrails        []Guardrail
}

// Guardrail is a raw policy entry.
type Guardrail struct {
	ID      string
	Name    string
	Version string
	Params  map[string]any
}

// Application is an API consumer.
type Application struct {
	ID   string
	Name string
	// Providers are the ids of the providers it may call.
	Providers []string
	Keys      []Key
}

// Key is an API key by its hash.
type Key struct {
	ID        string
	Hash      string
	ExpiresAt *time.Time
}

// Result is a generated deployment with the origin of every chain entry.
type Result struct {
	Deployment *deployment.Deployment
	// Origins holds, per route name, one origin per chain entry.
	Origins map[string][]Origin
}

// Origin says where a chain entry comes from: Kind "access" (api-key-auth
// from the application grants), "rate-limit" (Ref is the JSON path of the
// limit in the Rate Limit settings, e.g. "$.consumer.global.token"),
// "cost" (llm-cost, added for the cost limits) or "guardrail" (Ref is its id).
type Origin struct {
	Kind string `json:"kind"`
	Ref  string `json:"ref,omitempty"`
}

// Origin kinds.
const (
	OriginAccess    = "access"
	OriginRateLimit = "rate-limit"
	OriginCost      = "cost"
	OriginGuardrail = "guardrail"
)

// Policy names the generator emits.
const (
	apiKeyAuth    = "api-key-auth"
	basicLimit    = "basic-ratelimit"
	tokenLimit    = "token-based-ratelimit"
	costLimit     = "llm-cost-based-ratelimit"
	llmCost       = "llm-cost"
	policyVersion = "v1"
)

// Generate builds the deployment for s. Providers become routes in s's
// order; applications are listed in s's order. It fails on invalid Rate
// Limit settings (RateLimits.Validate) and on names that cannot be routes;
// the chains themselves are checked by policies.Check.
func Generate(s Settings) (*Result, error) {
	d := &deployment.Deployment{APIVersion: deployment.APIVersion, Counters: s.Counters}
	res := &Result{Deployment: d, Origins: map[string][]Origin{}}
	granted := map[string][]string{}
	for _, a := range s.Applications {
		for _, p := range a.Providers {
			granted[p] = append(granted[p], a.ID)
		}
		app := deployment.Application{ID: a.ID, Name: a.Name}
		for _, k := range a.Keys {
			app.Keys = append(app.Keys, deployment.APIKey{ID: k.ID, Hash: k.Hash, ExpiresAt: k.ExpiresAt})
		}
		d.Applications = append(d.Applications, app)
	}
	for _, p := range s.Providers {
		if ps := p.RateLimits.Validate(); len(ps) > 0 {
			return nil, fmt.Errorf("provider %q: rate limits: %w", p.Name, ps[0])
		}
		d.Providers = append(d.Providers, deployment.Provider{
			Name: p.Name, Type: p.Type, URL: p.URL, Targets: p.Targets, Auth: p.Auth,
			ForwardHeaders: p.ForwardHeaders, ApplicationHeader: p.ApplicationHeader,
		})
		apps := append([]string{}, granted[p.ID]...)
		sort.Strings(apps)
		entries, origins := chain(p, apps)
		d.Routes = append(d.Routes, deployment.Route{Name: p.Name, Context: "/" + p.Name, Provider: p.Name, Policies: entries})
		res.Origins[p.Name] = origins
	}
	return res, nil
}

// chainBuilder collects entries with their origins.
type chainBuilder struct {
	entries []deployment.PolicyEntry
	origins []Origin
}

func (b *chainBuilder) add(e deployment.PolicyEntry, o Origin) {
	if e.Version == "" {
		e.Version = policyVersion
	}
	b.entries = append(b.entries, e)
	b.origins = append(b.origins, o)
}

func chain(p Provider, apps []string) ([]deployment.PolicyEntry, []Origin) {
	b := &chainBuilder{}
	b.add(deployment.PolicyEntry{Name: apiKeyAuth, Params: map[string]any{"applications": strs(apps)}}, Origin{Kind: OriginAccess})
	b.scope("backend", false, p.RateLimits.Backend)
	b.scope("consumer", true, p.RateLimits.Consumer)
	ownCost := false
	for _, g := range p.Guardrails {
		b.add(deployment.PolicyEntry{Name: g.Name, Version: g.Version, Params: g.Params}, Origin{Kind: OriginGuardrail, Ref: g.ID})
		ownCost = ownCost || g.Name == llmCost
	}
	if !ownCost {
		b.add(deployment.PolicyEntry{Name: llmCost}, Origin{Kind: OriginCost})
	}
	return b.entries, b.origins
}

func (b *chainBuilder) scope(name string, consumer bool, s *Scope) {
	if s == nil {
		return
	}
	base := "$." + name
	if s.Global != nil {
		b.limits(base+".global", s.Global, consumer, nil, false)
	}
	pr := s.PerResource
	if pr == nil {
		return
	}
	var listed []string
	for i, rl := range pr.Resources {
		listed = append(listed, rl.Resource)
		b.limits(fmt.Sprintf("%s.perResource.resources[%d].limit", base, i), &rl.Limit, consumer,
			&deployment.Resources{Include: []string{rl.Resource}}, true)
	}
	if pr.Default == nil || len(listed) == len(deployment.ResourceNames) {
		return // no resource is left for the default
	}
	var attach *deployment.Resources
	if len(listed) > 0 {
		attach = &deployment.Resources{Exclude: listed}
	}
	b.limits(base+".perResource.default", pr.Default, consumer, attach, true)
}

// limits adds the entries of one limit set at path.
func (b *chainBuilder) limits(path string, l *Limits, consumer bool, attach *deployment.Resources, perResource bool) {
	common := func(params map[string]any, alg string) map[string]any {
		params["algorithm"] = alg
		if consumer {
			params["consumerBased"] = true
		}
		if perResource {
			params["resourceBased"] = true
		}
		return params
	}
	if c := l.Request; c != nil && c.Enabled {
		d, alg, _ := period(c.Reset)
		b.add(deployment.PolicyEntry{Name: basicLimit, Resources: attach, Params: common(map[string]any{
			"limits": []any{map[string]any{"requests": c.Count, "duration": durationText(d)}},
		}, alg)}, Origin{Kind: OriginRateLimit, Ref: path + ".request"})
	}
	if c := l.Token; c != nil && c.Enabled {
		d, alg, _ := period(c.Reset)
		b.add(deployment.PolicyEntry{Name: tokenLimit, Resources: attach, Params: common(map[string]any{
			"totalTokenLimits": []any{map[string]any{"count": c.Count, "duration": durationText(d)}},
		}, alg)}, Origin{Kind: OriginRateLimit, Ref: path + ".token"})
	}
	if c := l.Cost; c != nil && c.Enabled {
		d, alg, _ := period(c.Reset)
		b.add(deployment.PolicyEntry{Name: costLimit, Resources: attach, Params: common(map[string]any{
			"budgetLimits": []any{map[string]any{"amount": c.Amount, "duration": durationText(d)}},
		}, alg)}, Origin{Kind: OriginRateLimit, Ref: path + ".cost"})
	}
}

// durationText writes d as the limit policies read it: whole days "Nd",
// whole hours "Nh", else whole minutes "Nm".
func durationText(d time.Duration) string {
	switch {
	case d%(24*time.Hour) == 0:
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "d"
	case d%time.Hour == 0:
		return strconv.FormatInt(int64(d/time.Hour), 10) + "h"
	}
	return strconv.FormatInt(int64(d/time.Minute), 10) + "m"
}

func strs(xs []string) []any {
	out := make([]any, len(xs))
	for i, x := range xs {
		out[i] = x
	}
	return out
}
