package ratelimit

import (
	"strings"

	"sluice/policies"
	"sluice/sharedctx"
)

// Scoper picks the counter scope of a backend or consumer limit (DESIGN §4):
// backend "routename"; consumer "routename:appid", or "routename:default" when
// the request carries no application id (never the backend key).
type Scoper struct {
	Route    string
	Consumer bool
	// Resource: one scope per resource as well (PerResource).
	Resource bool
	name     func(id string) string
}

// NewScoper returns the scoper of route.
func NewScoper(route string, consumer bool) *Scoper {
	s := &Scoper{Route: route, Consumer: consumer}
	if consumer {
		s.name = func(id string) string { return route + ":" + id }
	} else {
		s.name = func(string) string { return route }
	}
	return s
}

// ScopeKindOf is the ScopeKind of a backend (false) or consumer (true) limit.
func ScopeKindOf(consumerBased bool) ScopeKind {
	if consumerBased {
		return ScopeApplication
	}
	return ScopeRoute
}

// ID returns the scope id of the request: "" for a backend limit, the
// application id (or "default") for a consumer limit.
func (s *Scoper) ID(c *policies.Call) string {
	if !s.Consumer {
		return ""
	}
	if id := c.Shared.ApplicationID(); id != "" {
		return id
	}
	return sharedctx.DefaultApplicationID
}

// Scope returns e's cached scope for the request.
func (s *Scoper) Scope(e *Engine, id string) *Scope { return e.Scope(id, s.name) }

// PerResource makes s keep one scope per resource when on: the route name
// followed by the request's resource ("openai/chat/completions", and
// ":appid" for a consumer limit). Route names hold no "/", so these never
// equal a route's scope. It returns s.
func (s *Scoper) PerResource(on bool) *Scoper {
	s.Resource = on
	return s
}

// ScopeOf returns e's scope for c, whose ID is id: Scope, or with
// PerResource the scope of c's resource as well.
func (s *Scoper) ScopeOf(e *Engine, c *policies.Call, id string) *Scope {
	if !s.Resource {
		return e.Scope(id, s.name)
	}
	// The resource is one of a handful of endpoint names; the application
	// id holds no "|" (config.Validate).
	return e.Scope(policies.CallResource(c)+"|"+id, s.resourceName)
}

func (s *Scoper) resourceName(key string) string {
	res, app, _ := strings.Cut(key, "|")
	if s.Consumer {
		return s.Route + res + ":" + app
	}
	return s.Route + res
}
