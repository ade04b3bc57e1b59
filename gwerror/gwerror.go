// Package gwerror defines the one typed error the gateway returns to clients and
// renders it, in one place, as the OpenAI error envelope:
//
//	{"error":{"message":"...","type":"...","param":null,"code":"..."}}
//
// Policies and the data plane return *Error; nothing else writes error bodies.
package gwerror

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"
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
	CodeInvalidJSON         = "invalid_json"
	CodeInvalidRequest      = "invalid_request"
	CodeBodyTooLarge        = "request_too_large"
	CodeUnsupportedMedia    = "unsupported_media_type"
	CodeMissingModel        = "missing_model"
	CodeInvalidAPIKey       = "invalid_api_key"
	CodeModelNotAllowed     = "model_not_allowed"
	CodeRateLimitExceeded   = "rate_limit_exceeded"
	CodeBudgetExceeded      = "budget_exceeded"
	CodeStoreUnavailable    = "ratelimit_store_unavailable"
	CodeRouteNotFound       = "route_not_found"
	CodeInternal            = "internal_error"
	CodeUpstreamUnavailable = "upstream_unavailable"
	CodeUpstreamTimeout     = "upstream_timeout"
	// CodeUpstreamAuthFailed: the provider refused the gateway's credential.
	CodeUpstreamAuthFailed = "upstream_auth_failed"
	// CodeUpstreamError: the provider answered an error the client cannot
	// act on (5xx after retries, and other statuses not passed through).
	CodeUpstreamError = "upstream_error"
	// CodeInvalidMetricsToken: GET /metrics without server.metricsToken.
	CodeInvalidMetricsToken = "invalid_metrics_token"
)

// Header names of the error contract.
const (
	HeaderErrorCode = "X-Sluice-Error-Code"
	HeaderPolicy    = "X-Sluice-Policy"
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
	// RetryAfter, when > 0, is sent as Retry-After in whole seconds (rounded up).
	RetryAfter time.Duration
	// Header holds extra response headers (e.g. x-ratelimit-* on a denial).
	Header http.Header
	// Body, when non-nil, replaces the envelope (advanced-ratelimit's custom body).
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

type envelopeBody struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    string  `json:"code"`
}

// Envelope returns the JSON body for e.
func (e *Error) Envelope() []byte {
	if e.Body != nil {
		return e.Body
	}
	b := envelopeBody{Message: e.Message, Type: e.Type, Code: e.Code}
	if e.Param != "" {
		p := e.Param
		b.Param = &p
	}
	out, _ := json.Marshal(envelope{Error: b})
	return out
}

// Write renders e on w: headers, status and the envelope. It is the only place
// that writes an error response.
func (e *Error) Write(w http.ResponseWriter) {
	h := w.Header()
	for k, vs := range e.Header {
		h[k] = append([]string(nil), vs...)
	}
	h.Set("Content-Type", "application/json")
	if e.Code != "" {
		h.Set(HeaderErrorCode, e.Code)
	}
	if e.Policy != "" {
		h.Set(HeaderPolicy, e.Policy)
	}
	if e.RetryAfter > 0 {
		secs := int64((e.RetryAfter + time.Second - 1) / time.Second)
		h.Set("Retry-After", strconv.FormatInt(secs, 10))
	}
	status := e.Status
	if status == 0 {
		status = http.StatusInternalServerError
	}
	w.WriteHeader(status)
	_, _ = w.Write(e.Envelope())
}
