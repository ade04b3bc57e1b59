// Package llmapi knows the shapes of the LLM APIs Sluice proxies: it parses a
// request body once at the edge into the fields policies need, rewrites it when a
// policy or the gateway must (max tokens, stream usage), and extracts normalised
// usage from response bodies and SSE streams.
package llmapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/tidwall/sjson"
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

// Bounds on the request fields the gateway reserves from. A request beyond
// one is refused with a 400 naming the field: no provider serves such a
// request, and the bounds keep every amount computed from them far inside
// int64 (MaxOutputTokensBound x MaxN x MaxPrompts is about 2.6e12).
const (
	// MaxOutputTokensBound is the largest accepted max_tokens,
	// max_completion_tokens or max_output_tokens.
	MaxOutputTokensBound = 10_000_000
	// MaxN is the largest accepted n (choices per prompt).
	MaxN = 128
	// MaxPrompts is the most prompts a completions request may batch, and the
	// most inputs an embeddings request may carry (OpenAI's own batch bound).
	MaxPrompts = 2048
)

// Request is a parsed LLM request. Raw is the body that goes upstream; the other
// fields are read from it once. Mutators keep Raw and the fields in step.
//
// Parse only accepts a body that every JSON decoder reads the same way (see
// Parse), so what the policies judge from these fields is what the upstream
// reads from Raw.
type Request struct {
	Endpoint Endpoint
	Raw      []byte

	Model  string
	Stream bool
	// ClientIncludeUsage is true when the client itself asked for the usage chunk
	// (stream_options.include_usage); the gateway may ask for it on the client's
	// behalf and then hides it.
	ClientIncludeUsage bool
	// MaxTokens is the requested output bound per choice (max_tokens,
	// max_completion_tokens or max_output_tokens, whichever the endpoint takes);
	// 0 when the request sets none. At most MaxOutputTokensBound.
	MaxTokens int64
	// MaxTokensField is the JSON field MaxTokens came from ("" when absent).
	MaxTokensField string
	// N is the number of choices requested per prompt (1 when absent; only
	// chat.completions and completions take n).
	N int
	// Prompts is the number of prompts the request batches: the length of a
	// completions prompt list or of an embeddings input list; 1 otherwise.
	Prompts int

	// Prompt material for token estimation, as raw JSON (nil when absent). The
	// slices alias the body Parse was given.
	Messages     json.RawMessage // chat.completions, messages
	System       json.RawMessage // messages (Anthropic top-level system)
	Prompt       json.RawMessage // completions
	Input        json.RawMessage // embeddings, responses
	Instructions json.RawMessage // responses
	Tools        json.RawMessage
}

// Choices is the number of outputs the upstream generates for the request:
// n choices for each prompt (completions return n x prompts choices; an
// embeddings request returns one vector per input). Output reservations and
// the expected number of finished choices both use it.
func (r *Request) Choices() int { return r.N * r.Prompts }

// SetMaxTokens rewrites the request's output bound to n (at least 1), in the
// field the client used or, when it set none, in the endpoint's native field.
// Parse guaranteed that the field occurs at most once and is spelled exactly,
// so the rewrite replaces the one value every decoder reads. Embeddings have
// no output bound: an error.
func (r *Request) SetMaxTokens(n int64) error {
	if n < 1 {
		return fmt.Errorf("llmapi: output bound %d is below 1", n)
	}
	field := r.MaxTokensField
	if field == "" {
		switch r.Endpoint {
		case Responses:
			field = "max_output_tokens"
		case Embeddings:
			return errors.New("llmapi: embeddings take no output bound")
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
// changing ClientIncludeUsage (what the client asked for). stream_options is
// an object, null or absent and include_usage occurs at most once (Parse), so
// the rewrite leaves exactly one include_usage: true.
func (r *Request) SetIncludeUsage() error {
	raw, err := sjson.SetBytes(r.Raw, "stream_options.include_usage", true)
	if err != nil {
		return err
	}
	r.Raw = raw
	return nil
}
