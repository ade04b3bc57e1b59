package gateway

import (
	"net/http"
	"net/textproto"
	"strings"

	"sluice/deployment"
	"sluice/policies"
)

// headerSet matches header names: exact names and prefixes, compared without
// regard to case. Immutable once built.
type headerSet struct {
	exact    map[string]bool // canonical names
	prefixes []string        // lowercase
}

// newHeaderSet compiles patterns: names, or prefixes ending in "*".
func newHeaderSet(patterns ...[]string) headerSet {
	s := headerSet{exact: map[string]bool{}}
	for _, list := range patterns {
		for _, p := range list {
			if prefix, ok := strings.CutSuffix(p, "*"); ok {
				s.prefixes = append(s.prefixes, strings.ToLower(prefix))
				continue
			}
			s.exact[textproto.CanonicalMIMEHeaderKey(p)] = true
		}
	}
	return s
}

// has reports whether the header name k matches.
func (s headerSet) has(k string) bool {
	if s.exact[textproto.CanonicalMIMEHeaderKey(k)] {
		return true
	}
	if len(s.prefixes) == 0 {
		return false
	}
	lk := strings.ToLower(k)
	for _, p := range s.prefixes {
		if strings.HasPrefix(lk, p) {
			return true
		}
	}
	return false
}

// Client headers forwarded upstream by default (docs/gateway.md, "What
// reaches the upstream"); everything else the client sent stays at the
// gateway unless the provider's forwardHeaders lists it.
var (
	// forwardCommon: content negotiation, tracing, idempotency and the
	// Stainless-generated SDKs' headers (both OpenAI's and Anthropic's SDKs
	// send X-Stainless-*).
	forwardCommon = []string{"Content-Type", "Accept", "User-Agent", "Traceparent", "Tracestate", "Idempotency-Key", "X-Stainless-*"}
	// forwardOpenAI is added for type openai.
	forwardOpenAI = []string{"OpenAI-Beta"}
	// forwardAnthropic is added for type anthropic.
	forwardAnthropic = []string{"Anthropic-Version", "Anthropic-Beta"}
)

// forwardSet is the set of client headers provider type typ forwards, with
// the provider's own forwardHeaders.
func forwardSet(typ string, extra []string) headerSet {
	byType := forwardOpenAI
	if typ == "anthropic" {
		byType = forwardAnthropic
	}
	return newHeaderSet(forwardCommon, byType, extra)
}

// upstreamHeader is the header sent upstream: the client's headers that p
// forwards (never credentials, cookies, OpenAI-Organization/-Project or
// framing headers: deployment.UnforwardableHeader, nor p's application
// header), the gateway's request id, the caller's application id in p's
// application header (absent for an unauthenticated request) and the
// provider's credential. Accept-Encoding is not forwarded, so the
// transport negotiates gzip itself and hands back plain bytes to parse usage
// from.
func upstreamHeader(call *policies.Call, p *provider) http.Header {
	in := call.Request.Header
	conn := connectionTokens(in)
	out := make(http.Header, 8)
	for k, vs := range in {
		if !p.forward.has(k) || deployment.UnforwardableHeader(k) != "" || isHopHeader(k, conn) ||
			(p.appHeader != "" && textproto.CanonicalMIMEHeaderKey(k) == p.appHeader) {
			continue
		}
		out[k] = vs
	}
	out.Set("X-Request-Id", call.Shared.RequestID)
	if p.appHeader != "" && call.Shared.Auth.ApplicationID != "" {
		out.Set(p.appHeader, call.Shared.Auth.ApplicationID)
	}
	if p.authHeader != "" {
		out.Set(p.authHeader, p.authValue)
	}
	if _, ok := out["Content-Type"]; !ok && call.Request.LLM != nil {
		out.Set("Content-Type", "application/json")
	}
	return out
}
