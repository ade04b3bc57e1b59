// Package sharedctx holds the per-request state that policies share: identity of
// the route, the authenticated application, and a Metadata map through which
// policies exchange values under documented key names.
//
// Concurrency: a SharedContext belongs to one request and is only touched by the
// goroutine serving that request (the chain runner calls every phase from it), so
// it carries no locks. Policies must not retain it after the final call.
package sharedctx

// Documented metadata keys exchanged between policies. Each policy definition
// declares which of these it reads and writes; the chain loader checks the order.
// The usage and the cost are facts with one writer each, set and read only
// through their accessors (SetUsage and Usage, SetCost, CostMicroUSD and
// CostStatus).
const (
	// KeyApplicationID is written by api-key-auth after a successful lookup (string).
	KeyApplicationID = "x-application-id"
	// KeyLLMCost is written by llm-cost (SetCost): the request's cost in
	// micro-USD (MicroUSD), rounded up.
	KeyLLMCost = "x-llm-cost"
	// KeyLLMCostStatus is written by llm-cost (SetCost): "calculated" (priced
	// from the provider's usage), "estimated" (priced from usage the gateway
	// counted: a lower bound), "unpriced" (model not in the catalog) or
	// "no_usage" (no usage to price).
	KeyLLMCostStatus = "x-llm-cost-status"
	// KeyLLMUsage is written by the gateway (SetUsage) before the response
	// phase of a body and before the final phase: the normalised usage
	// (*llmapi.Usage) of the upstream response.
	KeyLLMUsage = "x-llm-usage"
)

// Values of KeyLLMCostStatus; cost limits settle with the first two.
const (
	CostStatusCalculated = "calculated"
	CostStatusEstimated  = "estimated"
	CostStatusUnpriced   = "unpriced"
	CostStatusNoUsage    = "no_usage"
)

// DefaultApplicationID is the scope used by consumer-based limits when a request
// carries no application id (never the backend key).
const DefaultApplicationID = "default"

// AuthContext is what an authentication policy established about the caller.
type AuthContext struct {
	Authenticated bool
	// ApplicationID is the owning application of the credential.
	ApplicationID string
	// CredentialID identifies the credential (for api keys: a short prefix of its hash).
	CredentialID string
	// Method names the policy that authenticated the request, e.g. "api-key".
	Method     string
	Properties map[string]string
}

// SharedContext is the per-request context passed to every policy phase.
type SharedContext struct {
	RequestID string
	RouteName string
	APIName   string
	Provider  string
	// Endpoint is the proxied operation, e.g. "chat.completions", "messages".
	Endpoint string
	// model is the served model (ServedModel).
	model string

	Auth AuthContext
	// Metadata is the exchange map between policies. Keys are the documented
	// constants above, or instance-private keys built with InstanceKey.
	Metadata map[string]any
	// Analytics collects values for access logs and usage records.
	Analytics map[string]any
}

// New returns a SharedContext with empty maps.
func New(requestID, route, api, provider string) *SharedContext {
	return NewSized(requestID, route, api, provider, 8)
}

// NewSized is New with room for metadata keys in Metadata (at least 8): a
// map sized for the keys a chain writes is not grown while it runs.
func NewSized(requestID, route, api, provider string, metadata int) *SharedContext {
	return &SharedContext{
		RequestID: requestID,
		RouteName: route,
		APIName:   api,
		Provider:  provider,
		Metadata:  make(map[string]any, max(metadata, 8)),
		Analytics: make(map[string]any, 4),
	}
}

// InstanceKey namespaces a per-instance metadata key by the instance ID, so two
// instances of one policy in a chain never read or overwrite each other's slots.
func InstanceKey(instanceID, base string) string {
	return base + "@" + instanceID
}

// ApplicationID returns the application id from Metadata, falling back to the
// AuthContext; "" when neither is set.
func (c *SharedContext) ApplicationID() string {
	if v, ok := c.Metadata[KeyApplicationID].(string); ok && v != "" {
		return v
	}
	return c.Auth.ApplicationID
}

// String returns Metadata[key] as a string ("" when absent or not a string).
func (c *SharedContext) String(key string) string {
	s, _ := c.Metadata[key].(string)
	return s
}

// Float returns Metadata[key] as a float64 and whether it was present and
// numeric. The cost (x-llm-cost) is read with CostMicroUSD, not here.
func (c *SharedContext) Float(key string) (float64, bool) {
	switch v := c.Metadata[key].(type) {
	case float64:
		return v, true
	case int64:
		return float64(v), true
	case int:
		return float64(v), true
	}
	return 0, false
}
