package gateway

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"sluice/deployment"
	"sluice/llmapi"
)

// endpointPreflight labels CORS preflight requests in metrics.
const endpointPreflight llmapi.Endpoint = "preflight"

// Default CORS header sets (docs/gateway.md, "CORS"); a route's allowHeaders
// and exposeHeaders add to them.
var (
	// corsAllowDefault: what the OpenAI and Anthropic SDKs send from a browser.
	corsAllowDefault = []string{"Authorization", "Content-Type", "Accept", "X-Api-Key", "X-Request-Id",
		"Idempotency-Key", "Traceparent", "Tracestate", "X-Stainless-*", "OpenAI-Beta", "OpenAI-Organization",
		"OpenAI-Project", "Anthropic-Version", "Anthropic-Beta", "Anthropic-Dangerous-Direct-Browser-Access"}
	// corsExposeDefault: the gateway's limit and error headers.
	corsExposeDefault = []string{"X-Ratelimit-*", "Anthropic-Ratelimit-*", "Retry-After", "X-Request-Id",
		"X-Sluice-*", "X-Should-Retry"}
)

// corsPolicy is a route's compiled CORS configuration. Immutable.
type corsPolicy struct {
	anyOrigin bool
	origins   map[string]bool // lowercase scheme://host[:port]
	allow     headerSet
	expose    headerSet
	maxAge    string // Access-Control-Max-Age in seconds; "" to omit
}

func newCORS(c *deployment.CORS) *corsPolicy {
	if c == nil {
		return nil
	}
	p := &corsPolicy{
		origins: make(map[string]bool, len(c.AllowOrigins)),
		allow:   newHeaderSet(corsAllowDefault, c.AllowHeaders),
		expose:  newHeaderSet(corsExposeDefault, c.ExposeHeaders),
	}
	for _, o := range c.AllowOrigins {
		if o == "*" {
			p.anyOrigin = true
		}
		p.origins[strings.ToLower(o)] = true
	}
	if c.MaxAge > 0 {
		p.maxAge = strconv.FormatInt(int64(time.Duration(c.MaxAge)/time.Second), 10)
	}
	return p
}

// allowOrigin is the Access-Control-Allow-Origin value for a request from
// origin, or "" when the origin may not call the route.
func (p *corsPolicy) allowOrigin(origin string) string {
	switch {
	case origin == "":
		return ""
	case p.anyOrigin:
		return "*"
	case p.origins[strings.ToLower(origin)]:
		return origin
	}
	return ""
}

// isPreflight reports whether r is a CORS preflight request.
func isPreflight(r *http.Request) bool {
	return r.Method == http.MethodOptions && r.Header.Get("Origin") != "" &&
		r.Header.Get("Access-Control-Request-Method") != ""
}

// preflight answers a CORS preflight for the route with 204, without running
// the chain. An origin that is not allowed gets no Access-Control-* headers,
// so the browser refuses the actual request. The allowed request headers are
// the requested ones that the route allows.
func (x *exchange) preflight(p *corsPolicy) {
	x.ep = endpointPreflight
	h := x.w.Header()
	if !p.anyOrigin {
		h.Add("Vary", "Origin")
	}
	if acao := p.allowOrigin(x.r.Header.Get("Origin")); acao != "" {
		h.Set("Access-Control-Allow-Origin", acao)
		h.Set("Access-Control-Allow-Methods", "GET, POST")
		var allowed []string
		for _, v := range x.r.Header.Values("Access-Control-Request-Headers") {
			for _, name := range strings.Split(v, ",") {
				if name = strings.TrimSpace(name); name != "" && p.allow.has(name) {
					allowed = append(allowed, strings.ToLower(name))
				}
			}
		}
		if len(allowed) > 0 {
			h.Set("Access-Control-Allow-Headers", strings.Join(allowed, ", "))
		}
		if p.maxAge != "" {
			h.Set("Access-Control-Max-Age", p.maxAge)
		}
	}
	x.writeHeader(http.StatusNoContent)
}

// corsWriter adds the CORS response headers to an allowed origin's actual
// request when the status is written, success and error alike: the allowed
// origin, and the response's headers that the route exposes.
type corsWriter struct {
	http.ResponseWriter
	p      *corsPolicy
	origin string // the Access-Control-Allow-Origin value
	wrote  bool
}

func (w *corsWriter) WriteHeader(status int) {
	if !w.wrote {
		w.wrote = true
		h := w.Header()
		h.Set("Access-Control-Allow-Origin", w.origin)
		var expose []string
		for k := range h {
			if w.p.expose.has(k) {
				expose = append(expose, k)
			}
		}
		if len(expose) > 0 {
			slices.Sort(expose)
			h.Set("Access-Control-Expose-Headers", strings.Join(expose, ", "))
		}
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *corsWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection (Flush).
func (w *corsWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
