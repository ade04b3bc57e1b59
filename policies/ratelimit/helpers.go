package ratelimit

import (
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"

	"sluice/gwerror"
	"sluice/llmapi"
	"sluice/policies"
	"sluice/pricing"
	"sluice/sharedctx"
	"sluice/tokencount"
)

// PromptEstimateKey caches the request's prompt token estimate in Metadata
// (int64) so that several limit instances in one chain tokenize once. The value
// depends only on the request body, so sharing it between instances is safe.
const PromptEstimateKey = "ratelimit.prompt-estimate"

// PromptTokens returns the request's estimated prompt tokens (0 without a body
// or a tokenizer).
func PromptTokens(c *policies.Call, tok *tokencount.Counter) int64 {
	if v, ok := c.Shared.Metadata[PromptEstimateKey].(int64); ok {
		return v
	}
	if c.Request == nil || c.Request.LLM == nil || tok == nil {
		return 0
	}
	n := max(tok.EstimatePrompt(c.Request.LLM), 0)
	c.Shared.Metadata[PromptEstimateKey] = n
	return n
}

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

// ModelMatcher picks at most one model rule for a model name: an exact match
// wins over a prefix match ("gpt-4*"), and the longest prefix wins among
// prefixes. Immutable; safe for concurrent use.
type ModelMatcher struct {
	exact    map[string]int
	prefixes []prefixRule
}

type prefixRule struct {
	prefix string
	rule   int
}

// NewModelMatcher indexes matches (rule i is matches[i]). A trailing "*" makes
// a prefix; "*" elsewhere, empty or duplicate matches are errors naming the index.
func NewModelMatcher(matches []string) (*ModelMatcher, error) {
	m := &ModelMatcher{exact: map[string]int{}}
	seen := map[string]bool{}
	for i, s := range matches {
		if s == "" {
			return nil, fmt.Errorf("rule %d: match must not be empty", i)
		}
		if seen[s] {
			return nil, fmt.Errorf("rule %d: match %q is listed twice", i, s)
		}
		seen[s] = true
		p, isPrefix := strings.CutSuffix(s, "*")
		if strings.Contains(p, "*") {
			return nil, fmt.Errorf("rule %d: match %q: \"*\" is only allowed at the end", i, s)
		}
		if isPrefix {
			m.prefixes = append(m.prefixes, prefixRule{p, i})
		} else {
			m.exact[s] = i
		}
	}
	sort.SliceStable(m.prefixes, func(a, b int) bool { return len(m.prefixes[a].prefix) > len(m.prefixes[b].prefix) })
	return m, nil
}

// Match returns the rule index for model, or -1.
func (m *ModelMatcher) Match(model string) int {
	if m == nil {
		return -1
	}
	if i, ok := m.exact[model]; ok {
		return i
	}
	for _, p := range m.prefixes {
		if strings.HasPrefix(model, p.prefix) {
			return p.rule
		}
	}
	return -1
}

// RequestModel is the model the request is served with (sharedctx
// ServedModel), the one limits match rules and price estimates against.
func RequestModel(c *policies.Call) string { return c.Shared.ServedModel() }

// OutputBound returns the request's output bound per choice after applying
// maxOutput (0: no cap), and the number of choices the upstream generates (n
// per prompt of a batch, llmapi.Request.Choices). Endpoints without output
// (embeddings) and requests without a body have bound 0 and 1 choice.
func OutputBound(c *policies.Call, maxOutput int64) (perChoice int64, choices int64, applicable bool) {
	if c.Request == nil || c.Request.LLM == nil || c.Request.LLM.Endpoint == llmapi.Embeddings {
		return 0, 1, false
	}
	llm := c.Request.LLM
	want := llm.MaxTokens
	if maxOutput > 0 && (want == 0 || want > maxOutput) {
		want = maxOutput
	}
	return want, int64(max(llm.Choices(), 1)), true
}

// ApplyOutputBound rewrites the request's max tokens to n when it differs.
func ApplyOutputBound(c *policies.Call, n int64) error {
	if c.Request == nil || c.Request.LLM == nil || n <= 0 || c.Request.LLM.MaxTokens == n {
		return nil
	}
	return c.Request.LLM.SetMaxTokens(n)
}

// ParamPath builds a ParamError path from mixed parts.
func ParamPath(parts ...any) []string {
	out := make([]string, len(parts))
	for i, p := range parts {
		switch v := p.(type) {
		case string:
			out[i] = v
		case int:
			out[i] = strconv.Itoa(v)
		default:
			out[i] = fmt.Sprint(v)
		}
	}
	return out
}

// PricerSource is implemented by llm-cost: the pricer it charges with (the
// gateway's catalog, its pricing file, its defaultPrice).
type PricerSource interface {
	Pricer() pricing.Pricer
}

// LinkedPricer returns the pricer of the first PricerSource after entries[self]:
// final phases run in reverse list order, so that is the instance whose
// x-llm-cost the policy at self reads, and its pricer is the one an estimate
// must use. ok is false when no member after self prices.
func LinkedPricer(entries []policies.Entry, self int) (p pricing.Pricer, ok bool) {
	for _, e := range entries[self+1:] {
		if ps, ok := e.Policy.(PricerSource); ok {
			return ps.Pricer(), true
		}
	}
	return nil, false
}

// ErrNoPricer is the LinkChain error of a cost limit without an llm-cost
// after it.
var ErrNoPricer = errors.New("no llm-cost after it in the chain to price its requests; list llm-cost after " +
	"the cost limit (final phases run in reverse order)")

// ModelNotPriced is the 400 a cost limit answers for a model its pricer
// cannot price: the budget cannot be kept on spend it cannot count.
func ModelNotPriced(policy, route, model string) *gwerror.Error {
	return &gwerror.Error{Status: http.StatusBadRequest, Type: gwerror.TypeInvalidRequest, Code: gwerror.CodeModelNotPriced,
		Param: "model", Policy: policy,
		Message: fmt.Sprintf("%s: model %q has no price, so route %s cannot keep its budget for it; "+
			"add the model to a pricing file (llm-cost pricingFile or the gateway's --pricing) or set llm-cost defaultPrice",
			policy, model, route)}
}
