// Package policies defines the policy contract, the registry of definitions, the
// strict params decoding, the chain runner that owns the lifecycle guarantee,
// the route-to-chain conversion (Registry.BuildRoute) and the dry-run chain
// check (Check, with stand-in services) that `sluice validate` and the
// platform run. One package per built-in policy lives below it
// (policies/<name>, registered by policies/builtin), and the limit engine the
// limit policies share in policies/ratelimit.
//
// Import rule (docs/architecture.md, checked by internal/layout): policies
// import the services they are handed (counter, admission), the deployment
// document's types, and the leaves (sharedctx, gwerror, llmapi, dialect,
// pricing, tokencount, ...); never the gateway, the platform or the wiring.
// Services are injected through Services; a policy instance never closes
// them (they belong to the wiring) and may release its own resources in
// Closer.Close.
//
// Phases, in execution order for one request:
//
//  1. Request, in list order. A policy may reject (return an error); then no later
//     policy runs and nothing goes upstream.
//  2. Response, in reverse list order, when the upstream response headers (and,
//     when not streaming, its body) are known, before anything reaches the client.
//  3. Stream, in reverse list order, once per SSE event as it is forwarded.
//  4. Final, in reverse list order: exactly once for every policy whose request
//     phase ran, with the request's Outcome, on every path (success, upstream
//     error, timeout, client disconnect, panic, rejection by a later policy).
//
// All phases of one request run on the goroutine serving it; a policy instance is
// shared by all requests on its route and must be safe for concurrent use.
package policies

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"sluice/admission"
	"sluice/counter"
	"sluice/dialect"
	"sluice/gwerror"
	"sluice/internal/promreg"
	"sluice/llmapi"
	"sluice/pricing"
	"sluice/sharedctx"
	"sluice/sse"
	"sluice/tokencount"
)

// Policy is a chain member. Only the request phase is mandatory; the others are
// the optional interfaces ResponseHandler, StreamHandler and Finalizer.
type Policy interface {
	// OnRequest runs before the request goes upstream. A non-nil error rejects it.
	OnRequest(c *Call) *gwerror.Error
}

// ResponseHandler sees the upstream response before the client does. A non-nil
// error replaces the response (the upstream call has still happened).
type ResponseHandler interface {
	OnResponse(c *Call, r *Response) *gwerror.Error
}

// StreamHandler sees each SSE event of a streamed response as it is forwarded.
// It may rewrite ev.Data or set ev.Drop.
type StreamHandler interface {
	OnStreamEvent(c *Call, ev *sse.Event)
}

// Finalizer receives the request's one final outcome. This is where reservations
// are settled, closed, abandoned or released.
type Finalizer interface {
	OnFinal(c *Call, o *Outcome)
}

// Identifier is implemented by authentication policies. Identify establishes
// who the caller is and writes that identity into the Call (Metadata
// x-application-id, Shared.Auth, identity fields of Shared.Analytics) and
// nothing else: no counters charged, no request or client headers edited, no
// per-request state that expects a later phase. A non-nil error means the
// caller is not identified (e.g. 401).
//
// The gateway runs every Identifier of a chain, in chain order, before it
// reads a proxied request's body (Request.LLM is nil then), so that a caller
// it cannot identify is refused without its body being read; it then sets
// Call.Identified and runs the request phase, in which an Identifier must not
// repeat the lookup (it still does its other request-phase work, such as
// stripping credentials). It also runs them for requests it answers itself
// on behalf of the caller (GET /v1/quota), where no request phase runs and
// nothing goes upstream.
type Identifier interface {
	Identify(c *Call) *gwerror.Error
}

// ModelFilter is implemented by policies that restrict which models a caller
// may use. The gateway answers GET {context}/v1/models with the provider's
// list minus every model that some chain member's AllowsModel rejects, after
// identifying the caller (Identifier). AllowsModel must decide exactly as the
// policy's request phase would for a request naming model, charge nothing and
// keep no per-request state.
type ModelFilter interface {
	AllowsModel(c *Call, model string) bool
}

// Call is one request's view for policies.
type Call struct {
	Ctx    context.Context
	Shared *sharedctx.SharedContext
	// Request is the client's request as it will go upstream; policies may edit
	// Header (e.g. strip credentials) and LLM (e.g. cap max tokens).
	Request *Request
	// ClientHeader collects headers policies add to the client's response
	// (e.g. X-Sluice-Cost-Usd); the gateway sends them with the first byte of
	// the response, success or error. Rate-limit state goes in Limits instead.
	ClientHeader http.Header
	// Started is when the gateway received the request.
	Started time.Time
	// Identified is set by the gateway once every Identifier of the chain
	// identified the caller on this Call (before the body was read); their
	// request phases then skip the identification.
	Identified bool

	limits dialect.Limits
	output int64
}

// StreamOutput is the output of a streamed response forwarded to the client
// before the event the stream phase is handling, in tokens as the gateway
// counts them (every choice, each event's text tokenized as it passes); 0
// for bodies and before the first event. A policy that meters output as it
// is generated (fair-admission) reads it in the stream phase.
func (c *Call) StreamOutput() int64 { return c.output }

// SetStreamOutput records the stream output forwarded so far; the gateway
// calls it before each event's stream phase.
func (c *Call) SetStreamOutput(tokens int64) { c.output = tokens }

// Limits is the rate-limit state the response reports: per kind the tightest
// counter the limit policies admitted the request on. The gateway renders it
// in the client's dialect (x-ratelimit-* or anthropic-ratelimit-*) with the
// response headers, success or error.
func (c *Call) Limits() *dialect.Limits { return &c.limits }

// Request is the inbound request after the edge parsed it once.
type Request struct {
	Method string
	// Path is the upstream path (the route context removed), e.g. /v1/chat/completions.
	Path     string
	Header   http.Header
	Query    url.Values
	RemoteIP string
	// LLM is the parsed body (nil for requests without a JSON body).
	LLM *llmapi.Request
}

// Response is the upstream response as policies see it.
type Response struct {
	Status int
	Header http.Header
	// Body is the full body for non-streamed responses, nil for streams. The
	// usage extracted from it is the request's usage (Shared.Usage).
	Body   []byte
	Stream bool
}

// OutcomeKind classifies how a request ended.
type OutcomeKind uint8

const (
	// Completed: the upstream answered 2xx and the response was delivered in full.
	Completed OutcomeKind = iota + 1
	// UpstreamFailed: a non-2xx final upstream answer, a transport error or a
	// timeout after retries, or a stream cut by the upstream.
	UpstreamFailed
	// Cancelled: the client went away (or the server shut down) before the end.
	Cancelled
	// Rejected: a policy rejected the request in the request phase; nothing went
	// upstream.
	Rejected
	// Failed: an internal error (a recovered panic) ended the request.
	Failed
)

func (k OutcomeKind) String() string {
	switch k {
	case Completed:
		return "completed"
	case UpstreamFailed:
		return "upstream_failed"
	case Cancelled:
		return "cancelled"
	case Rejected:
		return "rejected"
	case Failed:
		return "failed"
	}
	return "unknown"
}

// Outcome is the final result of a request, delivered once to each admitted
// policy. The request's usage is not part of it: usage is one fact,
// Shared.Usage, which the gateway sets before the final phase.
type Outcome struct {
	Kind OutcomeKind
	// Status is the HTTP status the client got (0 when nothing was sent).
	Status int
	// WentUpstream is true when at least one upstream attempt was made.
	WentUpstream bool
	// RejectedBy is the index in the chain of the policy that rejected the
	// request (Kind == Rejected), -1 otherwise. A policy is told it rejected the
	// request itself when RejectedBy equals its own position.
	RejectedBy int
	Err        error
}

// RouteInfo is what a policy instance knows about where it is attached.
type RouteInfo struct {
	RouteName    string
	APIName      string
	Provider     string
	ProviderType string
	// Attachment is the level the policy is attached at ("route").
	Attachment string
	// Position is the index of the instance in its chain.
	Position int
	// InstanceID is the short hash identifying this instance (see InstanceID).
	InstanceID string
}

// Services are the gateway services injected into constructors. A policy that
// needs a service it finds nil fails construction (a wiring bug, not user input).
// Later layers add typed fields here (counter store, pricing catalog, tokenizer).
type Services struct {
	Logger *slog.Logger
	// Now is the clock; tests inject a fake.
	Now func() time.Time
	// Keys resolves API keys (by SHA-256) to applications; built from the
	// deployment's applications.
	Keys KeyIndex
	// Counters is the counter store limit policies charge.
	Counters counter.Store
	// Pricing is the model price catalog.
	Pricing *pricing.Catalog
	// Tokens estimates prompt tokens.
	Tokens *tokencount.Counter
	// Admission is the fair-admission scheduler (fair-admission): one per
	// process, configured by the gateway with every deployment it applies
	// before the deployment's chains serve, so queues, running requests and
	// counters survive reloads. A policy instance never closes it.
	Admission *admission.Scheduler
	// Metrics registers policy collectors (nil: no metrics). Chains are rebuilt
	// on reload, so policies register with RegisterOrReuse.
	Metrics prometheus.Registerer
}

// RegisterOrReuse registers c on reg, or returns the collector already
// registered under the same descriptor (chains are rebuilt on every reload).
// With a nil reg it returns c unregistered.
func RegisterOrReuse[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	c, err := promreg.Reuse(reg, c)
	if err != nil {
		panic(fmt.Sprintf("policies: registering metrics: %v", err))
	}
	return c
}

// KeyIndex resolves an API key's SHA-256 digest to its credential in O(1).
// Implementations are immutable and safe for concurrent use.
type KeyIndex interface {
	Lookup(sum [32]byte) (Credential, bool)
}

// Credential is what a key resolves to.
type Credential struct {
	ApplicationID   string
	ApplicationName string
	// KeyID is a short, non-secret identifier of the key (hash prefix).
	KeyID string
}
