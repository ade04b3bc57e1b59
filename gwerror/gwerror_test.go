package gwerror_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"sluice/dialect"
	"sluice/gwerror"
)

func TestAnthropicType(t *testing.T) {
	for status, want := range map[int]string{400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
		404: "not_found_error", 405: "invalid_request_error", 413: "request_too_large", 415: "invalid_request_error",
		429: "rate_limit_error", 500: "api_error", 502: "api_error", 503: "overloaded_error", 504: "api_error", 529: "overloaded_error"} {
		if got := gwerror.AnthropicType(status); got != want {
			t.Errorf("AnthropicType(%d) = %q, want %q", status, got, want)
		}
	}
}

func TestWriteByDialect(t *testing.T) {
	e := &gwerror.Error{Status: 429, Type: gwerror.TypeRateLimit, Code: gwerror.CodeBudgetExceeded, Message: "spent",
		Policy: "llm-cost-based-ratelimit", Scope: "application", RetryAfter: 1500 * time.Millisecond, ShouldRetry: gwerror.RetryNo}
	e.Limits.Set(dialect.Cost, dialect.Counter{Limit: 500000, Remaining: 0, Reset: time.Hour})

	rec := httptest.NewRecorder()
	e.Write(rec, dialect.OpenAI, "req-1")
	var oa struct {
		Error struct{ Message, Type, Code string } `json:"error"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &oa); err != nil || oa.Error.Code != "budget_exceeded" || oa.Error.Type != "rate_limit_error" || oa.Error.Message != "spent" {
		t.Fatalf("OpenAI body %s (%v)", rec.Body, err)
	}
	checkHeaders(t, rec.Header(), map[string]string{"X-Sluice-Error-Code": "budget_exceeded",
		"X-Sluice-Policy": "llm-cost-based-ratelimit; scope=application", "Retry-After": "2", "X-Should-Retry": "false",
		"X-Ratelimit-Cost-Remaining-Dollars": "0", "Request-Id": ""})

	rec = httptest.NewRecorder()
	e.Write(rec, dialect.Anthropic, "req-1")
	if rec.Code != 429 || rec.Body.String() != `{"type":"error","error":{"type":"rate_limit_error","message":"spent"},"request_id":"req-1"}` {
		t.Fatalf("Anthropic: %d %s", rec.Code, rec.Body)
	}
	checkHeaders(t, rec.Header(), map[string]string{"X-Sluice-Error-Code": "budget_exceeded", "Retry-After": "2",
		"X-Should-Retry": "false", "Request-Id": "req-1", "Content-Type": "application/json"})

	// A custom body is sent as configured in every dialect.
	custom := &gwerror.Error{Status: 503, Body: []byte(`{"busy":true}`), ShouldRetry: gwerror.RetryYes}
	rec = httptest.NewRecorder()
	custom.Write(rec, dialect.Anthropic, "req-2")
	if rec.Code != 503 || rec.Body.String() != `{"busy":true}` || rec.Header().Get("X-Should-Retry") != "true" {
		t.Fatalf("custom body: %d %s %v", rec.Code, rec.Body, rec.Header())
	}
}

func checkHeaders(t *testing.T, h http.Header, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if got := h.Get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
}
