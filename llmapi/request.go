// Package llmapi knows the shapes of the LLM APIs Sluice proxies: it parses a
// request body once at the edge into the fields policies need, rewrites it when a
// policy or the gateway must (max tokens, stream usage), and extracts normalised
// usage from response bodies and SSE streams.
package llmapi

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/tidwall/sjson"

	"sluice/gwerror"
)

// Endpoint names a proxied operation.
type Endpoint string

const (
	ChatCompletions Endpoint = "chat.completions"
	Completions     Endpoint = "completions"
	Embeddings      Endpoint = "embeddings"
	Responses       Endpoint = "responses"
	Messages        Endpoint = "messages" // Anthropic
)

// EndpointForPath maps an upstream path (after the route context is removed) to
// its endpoint.
func EndpointForPath(p string) (Endpoint, bool) {
	switch strings.TrimSuffix(p, "/") {
	case "/v1/chat/completions":
		return ChatCompletions, true
	case "/v1/completions":
		return Completions, true
	case "/v1/embeddings":
		return Embeddings, true
	case "/v1/responses":
		return Responses, true
	case "/v1/messages":
		return Messages, true
	}
	return "", false
}

// Request is a parsed LLM request. Raw is the body that goes upstream; the other
// fields are read from it once. Mutators keep Raw and the fields in step.
type Request struct {
	Endpoint Endpoint
	Raw      []byte

	Model  string
	Stream bool
	// ClientIncludeUsage is true when the client itself asked for the usage chunk
	// (stream_options.include_usage); the gateway may ask for it on the client's
	// behalf and then hides it.
	ClientIncludeUsage bool
	// MaxTokens is the requested output bound (max_tokens, max_completion_tokens or
	// max_output_tokens); 0 when the request sets none.
	MaxTokens int64
	// MaxTokensField is the JSON field MaxTokens came from ("" when absent).
	MaxTokensField string
	// N is the number of choices requested (1 when absent).
	N int

	// Prompt material for token estimation, as raw JSON (nil when absent).
	Messages     json.RawMessage // chat.completions, messages
	System       json.RawMessage // messages (Anthropic top-level system)
	Prompt       json.RawMessage // completions
	Input        json.RawMessage // embeddings, responses
	Instructions json.RawMessage // responses
	Tools        json.RawMessage
}

type wireRequest struct {
	Model         *json.RawMessage `json:"model"`
	Stream        *bool            `json:"stream"`
	StreamOptions *struct {
		IncludeUsage *bool `json:"include_usage"`
	} `json:"stream_options"`
	MaxTokens           *int64          `json:"max_tokens"`
	MaxCompletionTokens *int64          `json:"max_completion_tokens"`
	MaxOutputTokens     *int64          `json:"max_output_tokens"`
	N                   *int            `json:"n"`
	Messages            json.RawMessage `json:"messages"`
	System              json.RawMessage `json:"system"`
	Prompt              json.RawMessage `json:"prompt"`
	Input               json.RawMessage `json:"input"`
	Instructions        json.RawMessage `json:"instructions"`
	Tools               json.RawMessage `json:"tools"`
}

// Parse decodes body for endpoint ep. Every failure is a 400 *gwerror.Error.
func Parse(ep Endpoint, body []byte) (*Request, *gwerror.Error) {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 {
		return nil, gwerror.BadRequest(gwerror.CodeInvalidJSON, "request body is empty; expected a JSON object")
	}
	if trimmed[0] != '{' {
		return nil, gwerror.BadRequest(gwerror.CodeInvalidJSON, "request body must be a JSON object")
	}
	var w wireRequest
	if err := json.Unmarshal(trimmed, &w); err != nil {
		return nil, gwerror.BadRequest(gwerror.CodeInvalidJSON, "request body is not valid JSON: %s", jsonErrText(err))
	}
	r := &Request{Endpoint: ep, Raw: body, N: 1,
		Messages: w.Messages, System: w.System, Prompt: w.Prompt, Input: w.Input,
		Instructions: w.Instructions, Tools: w.Tools}
	if w.Model == nil || string(*w.Model) == "null" {
		return nil, &gwerror.Error{Status: 400, Type: gwerror.TypeInvalidRequest, Code: gwerror.CodeMissingModel,
			Message: "you must provide a model parameter", Param: "model"}
	}
	if err := json.Unmarshal(*w.Model, &r.Model); err != nil || r.Model == "" {
		return nil, &gwerror.Error{Status: 400, Type: gwerror.TypeInvalidRequest, Code: gwerror.CodeMissingModel,
			Message: "model must be a non-empty string", Param: "model"}
	}
	if w.Stream != nil {
		r.Stream = *w.Stream
	}
	if w.StreamOptions != nil && w.StreamOptions.IncludeUsage != nil {
		r.ClientIncludeUsage = *w.StreamOptions.IncludeUsage
	}
	switch {
	case w.MaxCompletionTokens != nil:
		r.MaxTokens, r.MaxTokensField = *w.MaxCompletionTokens, "max_completion_tokens"
	case w.MaxTokens != nil:
		r.MaxTokens, r.MaxTokensField = *w.MaxTokens, "max_tokens"
	case w.MaxOutputTokens != nil:
		r.MaxTokens, r.MaxTokensField = *w.MaxOutputTokens, "max_output_tokens"
	}
	if r.MaxTokens < 0 {
		return nil, &gwerror.Error{Status: 400, Type: gwerror.TypeInvalidRequest, Code: gwerror.CodeInvalidRequest,
			Message: r.MaxTokensField + " must not be negative", Param: r.MaxTokensField}
	}
	if w.N != nil {
		if *w.N < 1 || *w.N > 128 {
			return nil, &gwerror.Error{Status: 400, Type: gwerror.TypeInvalidRequest, Code: gwerror.CodeInvalidRequest,
				Message: "n must be between 1 and 128", Param: "n"}
		}
		r.N = *w.N
	}
	return r, nil
}

func jsonErrText(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case asErr(err, &se):
		return se.Error()
	case asErr(err, &te):
		return "field " + te.Field + " has the wrong type (" + te.Value + ")"
	}
	return err.Error()
}

// SetMaxTokens rewrites the request's output bound to n, in the field the client
// used or, when it set none, in the endpoint's native field.
func (r *Request) SetMaxTokens(n int64) error {
	field := r.MaxTokensField
	if field == "" {
		switch r.Endpoint {
		case Responses:
			field = "max_output_tokens"
		default:
			field = "max_tokens"
		}
	}
	raw, err := sjson.SetBytes(r.Raw, field, n)
	if err != nil {
		return err
	}
	r.Raw, r.MaxTokens, r.MaxTokensField = raw, n, field
	return nil
}

// SetIncludeUsage sets stream_options.include_usage in the upstream body without
// changing ClientIncludeUsage (what the client asked for).
func (r *Request) SetIncludeUsage() error {
	raw, err := sjson.SetBytes(r.Raw, "stream_options.include_usage", true)
	if err != nil {
		return err
	}
	r.Raw = raw
	return nil
}
