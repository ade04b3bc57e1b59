package mockllm

import (
	"encoding/json"

	"sluice/gwerror"
	"sluice/llmapi"
)

// wireRequest is what the mock reads of a request body.
type wireRequest struct {
	Model         *string `json:"model"`
	Stream        *bool   `json:"stream"`
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

// decodeRequest reads a body the way a lenient upstream does: Go's
// encoding/json, so the last of duplicated names wins, names match fields
// case-insensitively, and any output-bound field is honoured on any endpoint.
// The gateway forwards only bodies that every decoder reads alike
// (llmapi.Parse); the mock reading leniently is what lets a test see what a
// provider would serve if the gateway ever forwarded anything else.
func decodeRequest(ep llmapi.Endpoint, body []byte) (*llmapi.Request, *gwerror.Error) {
	var w wireRequest
	if err := json.Unmarshal(body, &w); err != nil {
		return nil, gwerror.BadRequest(gwerror.CodeInvalidJSON, "request body is not valid JSON: %v", err)
	}
	if w.Model == nil || *w.Model == "" {
		return nil, &gwerror.Error{Status: 400, Type: gwerror.TypeInvalidRequest, Code: gwerror.CodeMissingModel,
			Message: "you must provide a model parameter", Param: "model"}
	}
	r := &llmapi.Request{Endpoint: ep, Raw: body, Model: *w.Model, N: 1, Prompts: 1,
		Messages: w.Messages, System: w.System, Prompt: w.Prompt, Input: w.Input, Instructions: w.Instructions, Tools: w.Tools}
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
		if *w.N < 1 || *w.N > llmapi.MaxN {
			return nil, &gwerror.Error{Status: 400, Type: gwerror.TypeInvalidRequest, Code: gwerror.CodeInvalidRequest,
				Message: "n must be between 1 and 128", Param: "n"}
		}
		r.N = *w.N
	}
	switch ep {
	case llmapi.Completions:
		r.Prompts = promptBatch(r.Prompt)
	case llmapi.Embeddings:
		r.Prompts = promptBatch(r.Input)
	}
	return r, nil
}
