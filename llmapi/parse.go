package llmapi

import (
	"bytes"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"strings"

	"github.com/go-json-experiment/json/jsontext"

	"sluice/gwerror"
)

// Parse decodes body for endpoint ep. Every failure is a 400 *gwerror.Error.
//
// The body is decoded strictly, so that every JSON decoder an upstream may
// use reads the request the policies judged (the body goes upstream as it
// came, apart from the rewrites of SetMaxTokens and SetIncludeUsage):
//
//   - It must be one JSON object: valid UTF-8, nothing after it (invalid_json).
//   - A member name may appear only once in any object, at any depth
//     (invalid_json): decoders disagree on which duplicate wins.
//   - Two member names of one object that are equal under Unicode case folding
//     (Go encoding/json's matching: "Stream" ~ "stream", "ſ" ~ "s", KELVIN
//     SIGN ~ "k") are refused too (invalid_json): a case-insensitive decoder
//     merges them.
//   - At the levels the gateway reads (the top-level object and
//     stream_options), a name that folds to a field the gateway reads but is
//     not spelled exactly ("Model", "MAX_TOKENS", "Include_Usage") is refused
//     (invalid_request, param the field): a case-insensitive decoder reads it
//     as that field, the gateway would not.
//   - Types are strict (invalid_request, param the field; missing_model for
//     model): model a non-empty string; stream and
//     stream_options.include_usage booleans; stream_options an object; the
//     output bound and n integers (no fraction or exponent) within their
//     bounds; null means absent.
//   - The output bound is the endpoint's own field (chat.completions:
//     max_tokens or max_completion_tokens; completions and messages:
//     max_tokens; responses: max_output_tokens; embeddings: none), and at
//     most one is set: an upstream ignores a field its API does not have, and
//     may prefer either of two.
//   - n is only taken by chat.completions and completions (the other APIs
//     generate one output and would ignore it).
//   - A completions prompt (embeddings input) is a string, an array of
//     strings, an array of token ids or an array of token-id arrays; a list
//     holds 1 to MaxPrompts entries.
func Parse(ep Endpoint, body []byte) (*Request, *gwerror.Error) {
	if len(body) > maxBody {
		return nil, invalidJSON("request body of %d bytes is too large to parse", len(body))
	}
	// Exact duplicates are found by the parser's own name check (equal names
	// are equal up to case), once: jsontext's duplicate tracking would do the
	// same work a second time.
	p := &parser{ep: ep, body: body, dec: jsontext.NewDecoder(bytes.NewBuffer(body), jsontext.AllowDuplicateNames(true))}
	p.open, p.names = p.openArr[:0], p.nameArr[:0]
	r, err := p.request()
	if err != nil {
		return nil, err
	}
	return r, nil
}

// readFields are the top-level members the gateway reads. A member whose name
// folds to one of them but is spelled differently is refused.
var readFields = [...]string{
	"model", "stream", "stream_options", "max_tokens", "max_completion_tokens", "max_output_tokens", "n",
	"messages", "system", "prompt", "input", "instructions", "tools",
}

// boundFields are the output-bound fields, by endpoint.
func boundFields(ep Endpoint) []string {
	switch ep {
	case ChatCompletions:
		return []string{"max_tokens", "max_completion_tokens"}
	case Completions, Messages:
		return []string{"max_tokens"}
	case Responses:
		return []string{"max_output_tokens"}
	}
	return nil
}

func endpointPath(ep Endpoint) string {
	switch ep {
	case ChatCompletions:
		return "/v1/chat/completions"
	case Completions:
		return "/v1/completions"
	case Embeddings:
		return "/v1/embeddings"
	case Responses:
		return "/v1/responses"
	case Messages:
		return "/v1/messages"
	}
	return string(ep)
}

// maxBody is the largest body Parse reads: name offsets are 31-bit.
const maxBody = 1<<31 - 1

// MaxMembers bounds the object members of one request body, at every depth
// together. Checking names costs memory and time per member; far more members
// than any real request has would let one body cost a second of CPU.
const MaxMembers = 100_000

// smallObject is how many member names of one object are compared pairwise
// as they come; a larger object is checked by sorting when it closes.
const smallObject = 16

// object is an open JSON object or array during the walk.
type object struct {
	names int // index in parser.names of the object's first name
}

type parser struct {
	ep   Endpoint
	body []byte
	dec  *jsontext.Decoder
	// Open objects and arrays, innermost last, and the unescaped names of the
	// open objects' members (in body, or in unescaped when a name had escapes).
	open      []object
	names     []nameRef
	members   int // member names read so far, at every depth
	unescaped []byte
	openArr   [8]object
	nameArr   [32]nameRef
	seed      maphash.Seed // for the checks of large objects; made on first use
	scratch   []byte       // a folded name
	hashes    []hashedName // a large object's names by folded hash

	// What the top-level members said (absent and null leave them unset).
	req                  Request // the captured prompt material
	model                string
	hasModel, modelBad   bool
	stream, includeUsage bool
	bounds               [3]int64 // max_tokens, max_completion_tokens, max_output_tokens
	boundSet             [3]bool
	n                    int64
	hasN                 bool
	prompts              int
}

var boundNames = [3]string{"max_tokens", "max_completion_tokens", "max_output_tokens"}

func invalidJSON(format string, args ...any) *gwerror.Error {
	return gwerror.BadRequest(gwerror.CodeInvalidJSON, format, args...)
}

func invalidField(param, format string, args ...any) *gwerror.Error {
	return &gwerror.Error{Status: 400, Type: gwerror.TypeInvalidRequest, Code: gwerror.CodeInvalidRequest,
		Message: fmt.Sprintf(format, args...), Param: param}
}

// syntaxError renders a decoder error.
func syntaxError(err error) *gwerror.Error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return invalidJSON("request body is not valid JSON: unexpected end of input")
	}
	msg := strings.TrimPrefix(err.Error(), "jsontext: ")
	return invalidJSON("request body is not valid JSON: %s", msg)
}

func (p *parser) request() (*Request, *gwerror.Error) {
	switch p.dec.PeekKind() {
	case '{':
	case 0:
		if len(bytes.TrimSpace(p.body)) == 0 {
			return nil, invalidJSON("request body is empty; expected a JSON object")
		}
		_, err := p.dec.ReadToken()
		return nil, syntaxError(err)
	default:
		return nil, invalidJSON("request body must be a JSON object")
	}
	if err := p.begin(); err != nil {
		return nil, err
	}
	for p.dec.PeekKind() != '}' {
		name, gerr := p.name(readFields[:], "")
		if gerr != nil {
			return nil, gerr
		}
		if gerr := p.member(name); gerr != nil {
			return nil, gerr
		}
	}
	if err := p.end(); err != nil {
		return nil, err
	}
	if _, err := p.dec.ReadToken(); !errors.Is(err, io.EOF) {
		if err == nil {
			return nil, invalidJSON("request body must hold exactly one JSON object; found more after it")
		}
		return nil, syntaxError(err)
	}
	return p.finish()
}

// member reads the value of the top-level member name.
func (p *parser) member(name []byte) *gwerror.Error {
	switch string(name) {
	case "model":
		return p.readModel()
	case "stream":
		_, err := p.readBool("stream", &p.stream)
		return err
	case "stream_options":
		return p.readStreamOptions()
	case "max_tokens", "max_completion_tokens", "max_output_tokens":
		i := boundIndex(string(name))
		set, err := p.readInt(boundNames[i], 1, MaxOutputTokensBound, &p.bounds[i])
		p.boundSet[i] = set
		return err
	case "n":
		set, err := p.readInt("n", 1, MaxN, &p.n)
		p.hasN = set
		return err
	case "prompt":
		return p.readPromptList("prompt", p.ep == Completions)
	case "input":
		return p.readPromptList("input", p.ep == Embeddings)
	case "messages", "system", "instructions", "tools":
		return p.capture(string(name), nil)
	}
	return p.skip(nil)
}

func boundIndex(name string) int {
	for i, b := range boundNames {
		if b == name {
			return i
		}
	}
	return -1
}

// finish applies the checks that need the whole object and builds the Request.
func (p *parser) finish() (*Request, *gwerror.Error) {
	if !p.hasModel {
		return nil, &gwerror.Error{Status: 400, Type: gwerror.TypeInvalidRequest, Code: gwerror.CodeMissingModel,
			Message: "you must provide a model parameter", Param: "model"}
	}
	if p.modelBad || p.model == "" {
		return nil, &gwerror.Error{Status: 400, Type: gwerror.TypeInvalidRequest, Code: gwerror.CodeMissingModel,
			Message: "model must be a non-empty string", Param: "model"}
	}
	r := new(Request)
	*r = p.req
	r.Endpoint, r.Raw, r.Model, r.Stream, r.ClientIncludeUsage = p.ep, p.body, p.model, p.stream, p.includeUsage
	allowed := boundFields(p.ep)
	for i, set := range p.boundSet {
		if !set {
			continue
		}
		field := boundNames[i]
		if !contains(allowed, field) {
			if len(allowed) == 0 {
				return nil, invalidField(field, "%s is not a parameter of %s, which generates no output", field, endpointPath(p.ep))
			}
			return nil, invalidField(field, "%s is not a parameter of %s; the output bound is %s", field, endpointPath(p.ep), strings.Join(allowed, " or "))
		}
		if r.MaxTokensField != "" {
			return nil, invalidField(field, "%s and %s are both set; set one output bound", r.MaxTokensField, field)
		}
		r.MaxTokens, r.MaxTokensField = p.bounds[i], field
	}
	r.N = 1
	if p.hasN {
		if p.ep != ChatCompletions && p.ep != Completions {
			return nil, invalidField("n", "n is not a parameter of %s, which generates one output", endpointPath(p.ep))
		}
		r.N = int(p.n)
	}
	r.Prompts = max(p.prompts, 1)
	return r, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
