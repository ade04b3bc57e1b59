// Package gwerrortest decodes the error envelopes the gateway answers with,
// for tests: OpenAI's {"error":{"message","type","param","code"}} and
// Anthropic's {"type":"error","error":{"type","message"},"request_id"}.
package gwerrortest

import (
	"encoding/json"
	"fmt"
	"testing"
)

// OpenAI is the error object of an OpenAI error envelope.
type OpenAI struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    string  `json:"code"`
}

// DecodeOpenAI decodes an OpenAI error envelope. It fails when body is not
// JSON or carries no error object.
func DecodeOpenAI(body []byte) (OpenAI, error) {
	var e struct {
		Error *OpenAI `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil || e.Error == nil {
		return OpenAI{}, fmt.Errorf("not an error envelope: %s", body)
	}
	return *e.Error, nil
}

// MustOpenAI is DecodeOpenAI; it fails t when body is not an envelope.
func MustOpenAI(t testing.TB, body []byte) OpenAI {
	t.Helper()
	e, err := DecodeOpenAI(body)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// Anthropic is Anthropic's error envelope.
type Anthropic struct {
	Type  string `json:"type"`
	Error *struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
	RequestID string `json:"request_id"`
}

// DecodeAnthropic decodes Anthropic's error envelope. It fails when body is
// not JSON, its type is not "error" or it carries no error object.
func DecodeAnthropic(body []byte) (Anthropic, error) {
	var e Anthropic
	if err := json.Unmarshal(body, &e); err != nil || e.Type != "error" || e.Error == nil {
		return Anthropic{}, fmt.Errorf("not Anthropic's error envelope: %s", body)
	}
	return e, nil
}
