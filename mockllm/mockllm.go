// Package mockllm is a deterministic OpenAI- and Anthropic-compatible upstream for
// tests and benchmarks. Prompt tokens are counted with the gateway's own
// tokencount.Counter, so a gateway estimate and the mock's report agree; each
// choice produces exactly the requested output bound (16 when unset) of "tok "
// tokens (" tok" for a saturable model). Faults are injected per request with
// x-mock-* headers.
//
// With Options.Capacity the mock is a saturable model (see Capacity): requests
// wait for sequences and KV tokens, prompts go through a prefill stage and
// tokens come at a decode speed, so that time to first token grows with load.
// Without it the mock answers at once, as it always has. Either way it counts
// what it served per tenant (GET /mock/usage).
package mockllm

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tidwall/gjson"

	"sluice/gwerror"
	"sluice/internal/clock"
	"sluice/llmapi"
	"sluice/tokencount"
)

// Fault headers, read from each request.
const (
	// HeaderStatus makes the mock answer with this status (400..599) and an
	// OpenAI error envelope, before reading the request.
	HeaderStatus = "X-Mock-Status"
	// HeaderTokenDelay is the pause before each token event after the first, in
	// milliseconds (non-streaming: the sum over all tokens, before answering).
	HeaderTokenDelay = "X-Mock-Token-Delay-Ms"
	// HeaderFirstTokenDelay is the pause before the first token, in milliseconds.
	HeaderFirstTokenDelay = "X-Mock-First-Token-Delay-Ms"
	// HeaderDropAfter cuts the connection after this many SSE events (counting
	// every event written, preambles included); for a non-streaming request any
	// value cuts the connection before the response.
	HeaderDropAfter = "X-Mock-Drop-After"
	// HeaderNoUsage ("true") omits usage from bodies and streams.
	HeaderNoUsage = "X-Mock-No-Usage"
	// HeaderStallAfter holds a stream after this many SSE events (counted as
	// for HeaderDropAfter): nothing more is written, and the connection stays
	// open until the client goes away.
	HeaderStallAfter = "X-Mock-Stall-After"
	// HeaderOutputTokens makes every choice produce exactly this many tokens,
	// whatever the request's output bound (a provider that ignores
	// max_tokens); the finish reason is then stop.
	HeaderOutputTokens = "X-Mock-Output-Tokens"
)

const (
	// DefaultMaxTokens is the completion length per choice when the request sets no bound.
	DefaultMaxTokens = 16
	// maxCompletion caps the generated tokens per choice so a request cannot make
	// the mock build an unbounded body.
	maxCompletion = 1 << 20
	maxBody       = 64 << 20
	// tokenText is the text of one generated token: one token for the
	// gateway's tokenizers, n for n repeated ("tok " would be n+1), so that
	// the output the gateway counts from the text (a cut stream, the output
	// bound) is the number of tokens the mock says it generated.
	tokenText = " tok"
)

// Options configures a mock.
type Options struct {
	// Counter counts prompt tokens; nil means tokencount.New(). Share the gateway's
	// Counter to make estimates and reports agree exactly.
	Counter *tokencount.Counter
	// Now stamps "created" fields; nil means time.Now.
	Now func() time.Time
	// Models are listed by /v1/models; nil means a default set.
	Models []string
	// Capacity, when set, makes the mock a saturable model.
	Capacity *Capacity
	// Clock paces the saturable model (nil: the real clock).
	Clock clock.Clock
	// UsageHeader names the request header whose value is the tenant in GET
	// /mock/usage ("": DefaultUsageHeader).
	UsageHeader string
}

type server struct {
	counter *tokencount.Counter
	now     func() time.Time
	models  []byte // pre-rendered /v1/models body
	seq     atomic.Uint64
	bufs    sync.Pool
	engine  *engine // nil: no capacity
	usage   *usageBook
}

// New returns the mock's handler: /healthz, /v1/models, /v1/chat/completions,
// /v1/completions, /v1/embeddings, /v1/responses, /v1/messages and
// /mock/usage. It panics on a Capacity with no sequences.
func New(opts Options) http.Handler {
	s := &server{counter: opts.Counter, now: opts.Now, usage: newUsageBook(opts.UsageHeader)}
	if opts.Capacity != nil {
		if opts.Capacity.Sequences <= 0 {
			panic("mockllm: Capacity.Sequences must be positive")
		}
		clk := opts.Clock
		if clk == nil {
			clk = clock.Real
		}
		s.engine = newEngine(*opts.Capacity, clk)
	}
	if s.counter == nil {
		s.counter = tokencount.New()
	}
	if s.now == nil {
		s.now = time.Now
	}
	models := opts.Models
	if models == nil {
		models = []string{"gpt-4o", "gpt-4o-mini", "gpt-4.1", "gpt-4.1-mini", "gpt-5", "gpt-5-mini", "o3", "o4-mini",
			"gpt-4", "gpt-3.5-turbo", "text-embedding-3-small", "text-embedding-3-large",
			"claude-sonnet-4-5", "claude-haiku-4-5", "claude-opus-4-1"}
	}
	s.models = renderModels(models)
	s.bufs.New = func() any { b := make([]byte, 0, 4096); return &b }

	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, 200, s.models) })
	mux.HandleFunc("GET /mock/usage", s.serveUsage)
	mux.HandleFunc("DELETE /mock/usage", s.serveUsage)
	for _, ep := range []struct {
		path string
		ep   llmapi.Endpoint
	}{
		{"/v1/chat/completions", llmapi.ChatCompletions},
		{"/v1/completions", llmapi.Completions},
		{"/v1/embeddings", llmapi.Embeddings},
		{"/v1/responses", llmapi.Responses},
		{"/v1/messages", llmapi.Messages},
	} {
		mux.HandleFunc("POST "+ep.path, s.handler(ep.ep))
	}
	return mux
}

func renderModels(ids []string) []byte {
	b := []byte(`{"object":"list","data":[`)
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"id":`...)
		b = gjson.AppendJSONString(b, id)
		b = append(b, `,"object":"model","created":0,"owned_by":"sluice-mock"}`...)
	}
	return append(b, "]}"...)
}

// call is one request's parsed material and fault settings.
type call struct {
	req        *llmapi.Request
	id         uint64
	created    int64
	prompt     int64
	perChoice  int64 // completion tokens per choice
	choices    int
	bounded    bool // the request set an output bound (finish reason length / max_tokens)
	noUsage    bool
	firstDelay time.Duration
	tokenDelay time.Duration
	dropAfter  int   // -1: never
	stallAfter int   // -1: never
	outputs    int64 // HeaderOutputTokens; -1: not set

	text   string    // the text of one token
	engine *engine   // the saturable model (nil: none)
	first  time.Time // when the first token is ready (with an engine)
	// What was served, for the usage book.
	prompted bool  // the prompt was processed
	written  int64 // output tokens written
	complete bool  // the response was written in full
}

func (c *call) completion() int64 { return c.perChoice * int64(c.choices) }

func (s *server) handler(ep llmapi.Endpoint) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if v := r.Header.Get(HeaderStatus); v != "" {
			status, err := strconv.Atoi(v)
			if err != nil || status < 400 || status > 599 {
				writeError(w, 400, gwerror.TypeInvalidRequest, "invalid_mock_status", HeaderStatus+" must be a status between 400 and 599")
				return
			}
			typ, code := gwerror.TypeServer, "mock_fault"
			switch {
			case status == 429:
				typ, code = gwerror.TypeRateLimit, "rate_limit_exceeded"
			case status < 500:
				typ = gwerror.TypeInvalidRequest
			}
			writeError(w, status, typ, code, "mock fault: status "+v+" requested by "+HeaderStatus)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
		if err != nil {
			writeError(w, 400, gwerror.TypeInvalidRequest, gwerror.CodeInvalidRequest, "reading the request body: "+err.Error())
			return
		}
		if len(body) > maxBody {
			writeError(w, 413, gwerror.TypeInvalidRequest, gwerror.CodeBodyTooLarge, "request body too large")
			return
		}
		req, gerr := decodeRequest(ep, body)
		if gerr != nil {
			writeJSON(w, gerr.Status, gerr.Envelope())
			return
		}
		c := &call{req: req, id: s.seq.Add(1), created: s.now().Unix(), dropAfter: -1, stallAfter: -1, outputs: -1, choices: 1, text: tokenText}
		if err := readFaults(r.Header, c); err != nil {
			writeError(w, 400, gwerror.TypeInvalidRequest, "invalid_mock_header", err.Error())
			return
		}
		c.prompt = s.counter.EstimatePrompt(req)
		c.perChoice = DefaultMaxTokens
		if req.MaxTokensField != "" {
			c.perChoice, c.bounded = min(req.MaxTokens, maxCompletion), true
		}
		switch ep {
		case llmapi.ChatCompletions:
			c.choices = req.N
		case llmapi.Completions:
			c.choices = req.Choices()
		}

		if c.outputs >= 0 {
			c.perChoice, c.bounded = min(c.outputs, maxCompletion), false
		}
		if ep == llmapi.Embeddings {
			c.perChoice = 0
		}
		seqs, kv := c.choices, c.prompt+c.completion()
		if s.engine != nil {
			c.engine = s.engine
			if !s.engine.fitsEver(seqs, kv) {
				writeError(w, 400, gwerror.TypeInvalidRequest, "context_length_exceeded",
					"the request needs "+strconv.Itoa(seqs)+" sequences and "+strconv.FormatInt(kv, 10)+
						" KV tokens (prompt and output); the mock's capacity is "+s.engine.capy.String())
				return
			}
		}
		tenant := s.usage.tenant(r.Header)
		defer func() {
			u := Counts{Requests: 1, CompletionTokens: c.written}
			if c.prompted {
				u.PromptTokens = c.prompt
			}
			if c.complete {
				u.Completed = 1
			} else {
				u.Cancelled = 1
			}
			s.usage.record(tenant, req.Model, u)
		}()
		if !req.Stream || ep == llmapi.Embeddings {
			if c.dropAfter >= 0 {
				panic(http.ErrAbortHandler)
			}
			if c.engine != nil {
				release, err := c.engine.acquire(r.Context(), seqs, kv)
				if err != nil {
					return
				}
				defer release()
				if c.first, err = c.engine.prefill(r.Context(), c.prompt); err != nil {
					return
				}
				c.prompted = true
				if c.engine.waitUntil(r.Context(), c.engine.tokenAt(c.first, c.perChoice-1)) != nil {
					return
				}
			}
			c.prompted = true
			delay := c.firstDelay + c.tokenDelay*time.Duration(max(c.perChoice-1, 0))
			if sleep(r.Context(), delay) != nil {
				return
			}
			bp := s.bufs.Get().(*[]byte)
			b := (*bp)[:0]
			switch ep {
			case llmapi.ChatCompletions:
				b = chatBody(b, c)
			case llmapi.Completions:
				b = completionsBody(b, c)
			case llmapi.Embeddings:
				b = embeddingsBody(b, c)
			case llmapi.Responses:
				b = responsesBody(b, c)
			case llmapi.Messages:
				b = messagesBody(b, c)
			}
			if writeJSON(w, 200, b) == nil {
				c.written, c.complete = c.completion(), true
			}
			if cap(b) <= 1<<20 {
				*bp = b
				s.bufs.Put(bp)
			}
			return
		}
		st := newStreamer(w, r.Context(), c)
		if c.engine != nil && !st.failed {
			release, err := c.engine.acquire(r.Context(), seqs, kv)
			if err != nil {
				return
			}
			defer release()
			if c.first, err = c.engine.prefill(r.Context(), c.prompt); err != nil {
				return
			}
		}
		c.prompted = true
		switch ep {
		case llmapi.ChatCompletions, llmapi.Completions:
			streamOpenAI(st, c)
		case llmapi.Responses:
			streamResponses(st, c)
		case llmapi.Messages:
			streamMessages(st, c)
		}
		c.complete = !st.failed
	}
}

type headerError string

func (e headerError) Error() string { return string(e) }

func readFaults(h http.Header, c *call) error {
	ms := func(name string) (time.Duration, error) {
		v := h.Get(name)
		if v == "" {
			return 0, nil
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return 0, headerError(name + " must be a non-negative integer (milliseconds)")
		}
		return time.Duration(n) * time.Millisecond, nil
	}
	var err error
	if c.tokenDelay, err = ms(HeaderTokenDelay); err != nil {
		return err
	}
	if c.firstDelay, err = ms(HeaderFirstTokenDelay); err != nil {
		return err
	}
	events := func(name string, dst *int) error {
		v := h.Get(name)
		if v == "" {
			return nil
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return headerError(name + " must be a non-negative integer (events)")
		}
		*dst = n
		return nil
	}
	if err := events(HeaderDropAfter, &c.dropAfter); err != nil {
		return err
	}
	if err := events(HeaderStallAfter, &c.stallAfter); err != nil {
		return err
	}
	if v := h.Get(HeaderOutputTokens); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return headerError(HeaderOutputTokens + " must be a non-negative integer (tokens per choice)")
		}
		c.outputs = n
	}
	c.noUsage = h.Get(HeaderNoUsage) == "true"
	return nil
}

// promptBatch is the number of prompts in a completions prompt: the length of an
// array of strings or of token arrays, else 1.
func promptBatch(prompt []byte) int {
	p := gjson.ParseBytes(prompt)
	if !p.IsArray() {
		return 1
	}
	n, first := 0, gjson.Null
	p.ForEach(func(_, v gjson.Result) bool {
		if n == 0 {
			first = v.Type
			if v.IsArray() {
				first = gjson.JSON
			}
		}
		n++
		return true
	})
	if n == 0 || first == gjson.Number {
		return 1 // one prompt given as token ids
	}
	return n
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func writeJSON(w http.ResponseWriter, status int, body []byte) error {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, err := w.Write(body)
	return err
}

func writeError(w http.ResponseWriter, status int, typ, code, msg string) {
	writeJSON(w, status, (&gwerror.Error{Status: status, Type: typ, Code: code, Message: msg}).Envelope())
}
