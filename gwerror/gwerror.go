// Package gwerror defines the one typed error the gateway returns to clients and
// renders it, in one place, in the dialect the client speaks: OpenAI's envelope
//
//	{"error":{"message":"...","type":"...","param":null,"code":"..."}}
//
// or Anthropic's
//
//	{"type":"error","error":{"type":"...","message":"..."},"request_id":"..."}
//
// Policies and the data plane return *Error; nothing else writes error bodies.
package gwerror

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"sluice/dialect"
)

// Error types (the envelope's "type" field), following OpenAI's vocabulary.
const (
	TypeInvalidRequest = "invalid_request_error"
	TypeAuthentication = "authentication_error"
	TypePermission     = "permission_error"
	TypeRateLimit      = "rate_limit_error"
	TypeServer         = "server_error"
	TypeUpstream       = "upstream_error"
)

// Codes (the envelope's "code" field and the X-Sluice-Error-Code header).
const (
	CodeInvalidJSON      = "invalid_json"
	CodeInvalidRequest   = "invalid_request"
	CodeBodyTooLarge     = "request_too_large"
	CodeRequestTimeout   = "request_timeout"
	CodeUnsupportedMedia = "unsupported_media_type"
	CodeMissingModel     = "missing_model"
	CodeInvalidAPIKey    = "invalid_api_key"
	CodeModelNotAllowed  = "model_not_allowed"
	CodeModelNotPriced   = "model_not_priced"
	// CodeApplicationNotAllowed: a valid key of an application the route
	// does not admit (api-key-auth applications).
	CodeApplicationNotAllowed = "application_not_allowed"
	CodeRateLimitExceeded     = "rate_limit_exceeded"
	CodeBudgetExceeded        = "budget_exceeded"
	CodeStoreUnavailable      = "ratelimit_store_unavailable"
	CodeRouteNotFound         = "route_not_found"
	CodeInternal              = "internal_error"
	CodeUpstreamUnavailable   = "upstream_unavailable"
	CodeUpstreamTimeout       = "upstream_timeout"
	// CodeUpstreamAuthFailed: the provider refused the gateway's credential.
	CodeUpstreamAuthFailed = "upstream_auth_failed"
	// CodeUpstreamError: the provider answered an error the client cannot
	// act on (5xx after retries, and other statuses not passed through).
	CodeUpstreamError = "upstream_error"
	// CodeInvalidMetricsToken: GET /metrics without server.metricsToken.
	CodeInvalidMetricsToken = "invalid_metrics_token"
	// CodeClientClosed: the client went away before the gateway answered
	// (with StatusClientClosed; nobody reads the answer, metrics record it).
	CodeClientClosed = "client_closed_request"
)

// StatusClientClosed is the status recorded for a client that went away
// before an answer could be sent (nginx's 499).
const StatusClientClosed = 499

// Header names of the error contract.
const (
	HeaderErrorCode   = "X-Sluice-Error-Code"
	HeaderPolicy      = "X-Sluice-Policy"
	HeaderShouldRetry = "X-Should-Retry"
	// HeaderAnthropicRequestID is Anthropic's request id header, set on
	// errors rendered in the Anthropic dialect (its SDKs report it).
	HeaderAnthropicRequestID = "Request-Id"
)

// Retry is the advice a denial gives an SDK in x-should-retry. The official
// OpenAI and Anthropic SDKs obey the header over their own status-based rule
// (they retry 408, 409, 429 and 5xx, sleeping for any Retry-After).
type Retry uint8

const (
	// RetryDefault sends no x-should-retry: the SDK decides by status.
	RetryDefault Retry = iota
	// RetryYes sends x-should-retry: true (a short wait cures the error).
	RetryYes
	// RetryNo sends x-should-retry: false (waiting will not help soon).
	RetryNo
)

// Error is a client-visible gateway error.
type Error struct {
	Status  int
	Type    string
	Code    string
	Message string
	Param   string
	// Policy names the policy that produced the error ("" for the data plane).
	Policy string
	// Scope, with Policy, names what denied the request: "route" (a limit
	// shared by every application), "application" (one application's limit)
	// or an advanced-ratelimit quota name. X-Sluice-Policy carries it as
	// "<policy>; scope=<scope>".
	Scope string
	// RetryAfter, when > 0, is sent as Retry-After in whole seconds (rounded up).
	RetryAfter time.Duration
	// ShouldRetry, when set, is sent as x-should-retry.
	ShouldRetry Retry
	// Limits are the counters of the denial (the one that denied), rendered
	// as the dialect's rate-limit headers over those of the request.
	Limits dialect.Limits
	// Header holds extra response headers (e.g. WWW-Authenticate).
	Header http.Header
	// Body, when non-nil, replaces the envelope (advanced-ratelimit's custom
	// body) in every dialect.
	Body []byte
}

func (e *Error) Error() string {
	if e.Policy != "" {
		return fmt.Sprintf("%d %s (%s): %s", e.Status, e.Code, e.Policy, e.Message)
	}
	return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message)
}

// New returns an error with the given status, type, code and message.
func New(status int, typ, code, msg string) *Error {
	return &Error{Status: status, Type: typ, Code: code, Message: msg}
}

// BadRequest is a 400 invalid_request_error.
func BadRequest(code, format string, args ...any) *Error {
	return New(http.StatusBadRequest, TypeInvalidRequest, code, fmt.Sprintf(format, args...))
}

// Internal is a 500 server_error with a message that reveals nothing internal.
func Internal(requestID string) *Error {
	return New(http.StatusInternalServerError, TypeServer, CodeInternal,
		"internal gateway error (request "+requestID+")")
}

type envelope struct {
	Error envelopeBody `json:"error"`
}

type anthropicEnvelope struct {
	Type      string        `json:"type"`
	Error     anthropicBody `json:"error"`
	RequestID string        `json:"request_id,omitempty"`
}

type anthropicBody struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// AnthropicType is Anthropic's error type for an HTTP status, from
// Anthropic's API errors page: 400 invalid_request_error (also every other
// 4xx), 401 authentication_error, 403 permission_error, 404 not_found_error,
// 413 request_too_large, 429 rate_limit_error, 503 and 529 overloaded_error,
// every other status api_error.
func AnthropicType(status int) string {
	switch status {
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusServiceUnavailable, 529:
		return "overloaded_error"
	}
	if status >= 400 && status < 500 {
		return "invalid_request_error"
	}
	return "api_error"
}

type envelopeBody struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    string  `json:"code"`
}

// Envelope returns the OpenAI-dialect JSON body for e.
func (e *Error) Envelope() []byte { return e.BodyFor(dialect.OpenAI, "") }

// BodyFor returns the JSON body for e in dialect d; requestID goes into
// Anthropic's request_id ("" leaves it out).
func (e *Error) BodyFor(d dialect.Dialect, requestID string) []byte {
	if e.Body != nil {
		return e.Body
	}
	if d == dialect.Anthropic {
		out, _ := json.Marshal(anthropicEnvelope{Type: "error", RequestID: requestID,
			Error: anthropicBody{Type: AnthropicType(e.status()), Message: e.Message}})
		return out
	}
	b := envelopeBody{Message: e.Message, Type: e.Type, Code: e.Code}
	if e.Param != "" {
		p := e.Param
		b.Param = &p
	}
	out, _ := json.Marshal(envelope{Error: b})
	return out
}

func (e *Error) status() int {
	if e.Status == 0 {
		return http.StatusInternalServerError
	}
	return e.Status
}

// PolicyHeader is the X-Sluice-Policy value: the policy, and the scope that
// denied as a parameter ("token-based-ratelimit; scope=application").
func (e *Error) PolicyHeader() string {
	if e.Policy == "" || e.Scope == "" {
		return e.Policy
	}
	return e.Policy + "; scope=" + e.Scope
}

// Write renders e on w in dialect d: headers (the error's rate-limit
// counters replace headers of the same names already on w), status and body.
// requestID is the gateway's request id (Anthropic's request_id and
// request-id). It is the only place that writes an error response.
func (e *Error) Write(w http.ResponseWriter, d dialect.Dialect, requestID string) {
	h := w.Header()
	for k, vs := range e.Header {
		h[k] = append([]string(nil), vs...)
	}
	e.Limits.WriteHeader(h, d)
	h.Set("Content-Type", "application/json")
	if e.Code != "" {
		h.Set(HeaderErrorCode, e.Code)
	}
	if e.Policy != "" {
		h.Set(HeaderPolicy, e.PolicyHeader())
	}
	if e.RetryAfter > 0 {
		secs := int64((e.RetryAfter + time.Second - 1) / time.Second)
		h.Set("Retry-After", strconv.FormatInt(secs, 10))
	}
	switch e.ShouldRetry {
	case RetryYes:
		h.Set(HeaderShouldRetry, "true")
	case RetryNo:
		h.Set(HeaderShouldRetry, "false")
	}
	if d == dialect.Anthropic && requestID != "" {
		h.Set(HeaderAnthropicRequestID, requestID)
	}
	w.WriteHeader(e.status())
	_, _ = w.Write(e.BodyFor(d, requestID))
}
