package llmapi

import (
	"errors"
	"strings"
	"unsafe"

	"github.com/tidwall/gjson"

	"sluice/internal/satmath"
	"sluice/sse"
)

// ErrNotJSON is returned by UsageFromBody for a body that is not valid JSON.
var ErrNotJSON = errors.New("llmapi: response body is not valid JSON")

// view returns b as a string without copying. Results derived from it must not
// outlive b; the extractors below keep only integers.
func view(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// count reads a token count; anything missing, non-numeric or negative is 0 (an
// upstream must not be able to refund tokens by reporting a negative count).
func count(r gjson.Result) int64 {
	if r.Type != gjson.Number {
		return 0
	}
	if v := r.Int(); v > 0 {
		return v
	}
	return 0
}

// usageFields fills u from a usage object in ep's shape. It reports false when
// obj is not an object or carries none of the shape's counters (then the usage
// counts as absent).
func usageFields(ep Endpoint, obj gjson.Result, u *Usage) bool {
	if !obj.IsObject() {
		return false
	}
	var found bool
	obj.ForEach(func(k, v gjson.Result) bool {
		switch ep {
		case Responses:
			switch k.Str {
			case "input_tokens":
				u.PromptTokens, found = count(v), true
			case "output_tokens":
				u.CompletionTokens, found = count(v), true
			case "total_tokens":
				u.TotalTokens, found = count(v), true
			case "input_tokens_details":
				u.CachedPromptTokens = count(v.Get("cached_tokens"))
			case "output_tokens_details":
				u.ReasoningTokens = count(v.Get("reasoning_tokens"))
			}
		case Messages:
			switch k.Str {
			case "input_tokens":
				u.PromptTokens, found = count(v), true
			case "cache_read_input_tokens":
				u.CachedPromptTokens, found = count(v), true
			case "cache_creation_input_tokens":
				u.CacheWriteTokens, found = count(v), true
			case "output_tokens":
				u.CompletionTokens, found = count(v), true
			}
		default: // chat.completions, completions, embeddings
			switch k.Str {
			case "prompt_tokens":
				u.PromptTokens, found = count(v), true
			case "completion_tokens":
				u.CompletionTokens, found = count(v), true
			case "total_tokens":
				u.TotalTokens, found = count(v), true
			case "prompt_tokens_details":
				u.CachedPromptTokens = count(v.Get("cached_tokens"))
			case "completion_tokens_details":
				u.ReasoningTokens = count(v.Get("reasoning_tokens"))
			}
		}
		return true
	})
	return found
}

// finalize derives the totals that a shape leaves implicit. For Anthropic,
// PromptTokens becomes input + cache read + cache write (Anthropic reports the
// three disjointly).
func finalize(ep Endpoint, u *Usage, anthropicInput int64) {
	if ep == Messages {
		u.PromptTokens = satmath.Add(satmath.Add(anthropicInput, u.CachedPromptTokens), u.CacheWriteTokens)
	}
	if sum := satmath.Add(u.PromptTokens, u.CompletionTokens); u.TotalTokens < sum {
		u.TotalTokens = sum
	}
}

// finishReason reports whether v (a finish_reason / stop_reason value) marks a
// finished choice: a non-empty string.
func finishReason(v gjson.Result) bool { return v.Type == gjson.String && v.Str != "" }

// UsageFromBody extracts the usage of a non-streaming response body of endpoint ep
// for a request that asked for n choices. It returns (nil, nil) when the body has
// no usage object, and an error only when body is not JSON. The returned Usage is
// Authoritative, with ExpectedChoices = n and FinishedChoices counted from the
// body: choices with a finish_reason (chat, completions), 1 for a responses body
// whose status is completed or incomplete, 1 for an Anthropic message with a
// stop_reason, and n for embeddings (they have no choices and are always whole).
// An n below 1 is taken as 1.
func UsageFromBody(ep Endpoint, body []byte, n int) (*Usage, error) {
	n = max(n, 1)
	if !gjson.ValidBytes(body) {
		return nil, ErrNotJSON
	}
	root := gjson.Parse(view(body))
	if !root.IsObject() {
		return nil, nil
	}
	// One pass over the top-level members finds the ones read below, each
	// at its first occurrence (the one root.Get would return).
	var usage, finish gjson.Result
	var haveUsage, haveFinish bool
	finishKey := "choices"
	switch ep {
	case Responses:
		finishKey = "status"
	case Messages:
		finishKey = "stop_reason"
	}
	root.ForEach(func(k, v gjson.Result) bool {
		switch {
		case !haveUsage && k.Str == "usage":
			usage, haveUsage = v, true
		case !haveFinish && k.Str == finishKey:
			finish, haveFinish = v, true
		}
		return !haveUsage || !haveFinish
	})
	u := &Usage{Authoritative: true, ExpectedChoices: n}
	if !usageFields(ep, usage, u) {
		return nil, nil
	}
	finalize(ep, u, u.PromptTokens)
	switch ep {
	case Embeddings:
		u.CompletionTokens, u.ReasoningTokens = 0, 0
		u.TotalTokens = u.PromptTokens
		u.FinishedChoices = n
	case Responses:
		if s := finish.Str; s == "completed" || s == "incomplete" {
			u.FinishedChoices = 1
		}
	case Messages:
		if finishReason(finish) {
			u.FinishedChoices = 1
		}
	default:
		finish.ForEach(func(_, c gjson.Result) bool {
			if finishReason(c.Get("finish_reason")) {
				u.FinishedChoices++
			}
			return true
		})
	}
	return u, nil
}

// maxTrackedIndex bounds the choice indexes a StreamTracker remembers, so a hostile
// stream cannot make it allocate without limit (at most 32 KiB). It is the most
// choices a request can ask for: n up to MaxN for each of up to MaxPrompts
// prompts; indexes beyond the bound are ignored.
const maxTrackedIndex = MaxN * MaxPrompts

// MaxCountedText bounds the output text a StreamTracker keeps for counting
// (bytes). Output beyond it is not kept: CountedUsage counts it at 4 bytes a
// token, the usual average of English text, so a huge stream costs bounded
// memory and its count stays an approximation only past this size.
const MaxCountedText = 4 << 20

// StreamTracker follows an SSE response stream of one endpoint and accumulates its
// usage and finished choices, and the output text of the events forwarded to
// the client (for CountedUsage). Feed it every event in order; it never panics
// and keeps no reference to the events. Not safe for concurrent use.
type StreamTracker struct {
	ep Endpoint
	n  int

	usage          Usage
	anthropicInput int64
	sawUsage       bool // any usage numbers seen
	promptSeen     bool // the stream reported its prompt count (Anthropic message_start)
	authoritative  bool // the final usage report seen
	finished       []uint64
	finishedCount  int

	// text holds the output text of the forwarded events (text[:committed])
	// followed by that of the event observed last, until Forwarded commits
	// it or the next Observe discards it. overflow counts the forwarded bytes
	// past MaxCountedText, pendingOverflow those of the last event.
	text            []byte
	committed       int
	overflow        int64
	pendingOverflow int64
	// segs are the choices of the event observed last: text[from:to] is
	// the choice's output text in it, finished whether it finished there.
	segs []textSeg
}

// textSeg is one choice's part of the event observed last.
type textSeg struct {
	choice, from, to int
	finished         bool
}

// NewStreamTracker returns a tracker for a stream of endpoint ep that asked for n
// choices (an n below 1 is taken as 1).
func NewStreamTracker(ep Endpoint, n int) *StreamTracker {
	return &StreamTracker{ep: ep, n: max(n, 1)}
}

func (t *StreamTracker) finish(idx int64) {
	if idx < 0 || idx >= maxTrackedIndex {
		return
	}
	w := int(idx / 64)
	if w >= len(t.finished) {
		t.finished = append(t.finished, make([]uint64, w+1-len(t.finished))...)
	}
	bit := uint64(1) << (idx % 64)
	if t.finished[w]&bit == 0 {
		t.finished[w] |= bit
		t.finishedCount++
	}
}

// Observe inspects one event. It reports usageOnly = true for an OpenAI chunk that
// carries usage and an empty choices array (the include_usage chunk), which the
// gateway may hide from a client that did not ask for it.
//
// Shapes: OpenAI chat/completions chunks (a choice with a finish_reason finishes
// its index; a non-null usage replaces the usage so far and is authoritative);
// responses events (response.completed or response.incomplete carry
// response.usage, authoritative, and finish the one choice); Anthropic events
// (message_start.message.usage gives the input and cache counts, not yet
// authoritative; message_delta.usage gives the cumulative output count and makes
// the usage authoritative; a message_delta stop_reason finishes the choice).
//
// Observe also keeps the event's output text (see outputText), which counts
// once Forwarded is called for the event.
func (t *StreamTracker) Observe(ev *sse.Event) (usageOnly bool) {
	t.text = t.text[:t.committed]
	t.pendingOverflow = 0
	t.segs = t.segs[:0]
	if ev == nil || len(ev.Data) == 0 || ev.Done() {
		return false
	}
	root := gjson.Parse(view(ev.Data))
	if !root.IsObject() {
		return false
	}
	before := t.finishedCount
	switch t.ep {
	case Messages:
		t.observeAnthropic(ev, root)
	case Responses:
		t.observeResponses(ev, root)
	default:
		return t.observeOpenAI(root)
	}
	if fin := t.finishedCount > before; len(t.text) > t.committed || fin {
		t.segs = append(t.segs, textSeg{choice: 0, from: t.committed, to: len(t.text), finished: fin})
	}
	return false
}

// EventOutput calls fn for each choice the event passed to Observe last
// carries output text for or finishes, with the choice's index, that text
// (what CountedUsage counts once the event is Forwarded; possibly empty)
// and whether the event finishes the choice. An OpenAI chunk names its
// choices; Anthropic and Responses streams have one choice, 0. text is
// only valid during the call.
func (t *StreamTracker) EventOutput(fn func(choice int, text string, finished bool)) {
	for _, sg := range t.segs {
		fn(sg.choice, view(t.text[sg.from:sg.to]), sg.finished)
	}
}

func (t *StreamTracker) observeOpenAI(root gjson.Result) bool {
	var (
		hasUsage     bool
		emptyChoices bool
	)
	root.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "choices":
			if !v.IsArray() {
				return true
			}
			emptyChoices = true
			v.ForEach(func(_, c gjson.Result) bool {
				emptyChoices = false
				if !c.IsObject() {
					return true
				}
				var idx int64
				var done bool
				from := len(t.text)
				c.ForEach(func(ck, cv gjson.Result) bool {
					switch ck.Str {
					case "index":
						if cv.Type == gjson.Number {
							idx = cv.Int()
						} else {
							idx = -1
						}
					case "finish_reason":
						done = finishReason(cv)
					case "delta":
						t.keepChatDelta(cv)
					case "text":
						t.keep(cv)
					}
					return true
				})
				if done {
					t.finish(idx)
				}
				if (len(t.text) > from || done) && idx >= 0 && idx < maxTrackedIndex {
					t.segs = append(t.segs, textSeg{choice: int(idx), from: from, to: len(t.text), finished: done})
				}
				return true
			})
		case "usage":
			var u Usage
			if usageFields(t.ep, v, &u) {
				finalize(t.ep, &u, u.PromptTokens)
				t.usage, t.sawUsage, t.authoritative, hasUsage = u, true, true, true
			}
		}
		return true
	})
	return hasUsage && emptyChoices
}

func eventType(ev *sse.Event, root gjson.Result) string {
	if typ := root.Get("type"); typ.Type == gjson.String {
		return typ.Str
	}
	return ev.Event
}

func (t *StreamTracker) observeResponses(ev *sse.Event, root gjson.Result) {
	typ := eventType(ev, root)
	if responsesTextDelta(typ) {
		t.keep(root.Get("delta"))
		return
	}
	switch typ {
	case "response.completed", "response.incomplete":
		t.finish(0)
		var u Usage
		if usageFields(Responses, root.Get("response.usage"), &u) {
			finalize(Responses, &u, u.PromptTokens)
			t.usage, t.sawUsage, t.authoritative = u, true, true
		}
	case "response.failed":
		// A failed response may still report usage; it is billed but unfinished.
		var u Usage
		if usageFields(Responses, root.Get("response.usage"), &u) {
			finalize(Responses, &u, u.PromptTokens)
			t.usage, t.sawUsage, t.authoritative = u, true, true
		}
	}
}

func (t *StreamTracker) observeAnthropic(ev *sse.Event, root gjson.Result) {
	switch eventType(ev, root) {
	case "content_block_delta":
		d := root.Get("delta")
		t.keep(d.Get("text"))
		t.keep(d.Get("partial_json"))
		t.keep(d.Get("thinking"))
	case "content_block_start":
		// A tool_use block names its tool here; a text block may start with text.
		b := root.Get("content_block")
		t.keep(b.Get("name"))
		t.keep(b.Get("text"))
	case "message_start":
		var u Usage
		if usageFields(Messages, root.Get("message.usage"), &u) {
			t.anthropicInput = u.PromptTokens
			t.usage.CachedPromptTokens, t.usage.CacheWriteTokens = u.CachedPromptTokens, u.CacheWriteTokens
			t.usage.CompletionTokens = u.CompletionTokens
			finalize(Messages, &t.usage, t.anthropicInput)
			t.sawUsage, t.promptSeen = true, true
		}
	case "message_delta":
		if finishReason(root.Get("delta.stop_reason")) {
			t.finish(0)
		}
		usage := root.Get("usage")
		if !usage.IsObject() {
			return
		}
		// message_delta counts are cumulative; input and cache fields, when a
		// newer API version repeats them here, replace the message_start ones.
		usage.ForEach(func(k, v gjson.Result) bool {
			switch k.Str {
			case "output_tokens":
				t.usage.CompletionTokens, t.authoritative = count(v), true
			case "input_tokens":
				if v.Type == gjson.Number {
					t.anthropicInput = count(v)
				}
			case "cache_read_input_tokens":
				if v.Type == gjson.Number {
					t.usage.CachedPromptTokens = count(v)
				}
			case "cache_creation_input_tokens":
				if v.Type == gjson.Number {
					t.usage.CacheWriteTokens = count(v)
				}
			}
			return true
		})
		t.usage.TotalTokens = 0
		finalize(Messages, &t.usage, t.anthropicInput)
		t.sawUsage = true
	}
}

// Usage returns nil when the stream reported no usage at all. Otherwise it returns
// a copy of the usage so far, Authoritative only once the final report arrived
// (the OpenAI usage chunk, response.completed, Anthropic message_delta), with
// ExpectedChoices = n and FinishedChoices the number of distinct finished indexes.
// Settle only when Complete() is true.
func (t *StreamTracker) Usage() *Usage {
	if !t.sawUsage {
		return nil
	}
	u := t.usage
	u.Authoritative = t.authoritative
	u.ExpectedChoices = t.n
	u.FinishedChoices = t.finishedCount
	return &u
}

// FinishedChoices reports how many distinct choices have finished so far.
func (t *StreamTracker) FinishedChoices() int { return t.finishedCount }

// Output text kept per event (what a provider bills as output tokens):
//
//   - chat.completions: choices[].delta.content, .refusal, .reasoning_content,
//     .tool_calls[].function.name and .arguments, and the legacy
//     .function_call.name and .arguments;
//   - completions: choices[].text;
//   - messages (Anthropic): content_block_delta delta.text, .partial_json and
//     .thinking; content_block_start content_block.name and .text;
//   - responses: the delta of response.output_text.delta, response.refusal.delta,
//     response.function_call_arguments.delta, response.reasoning*.delta (text
//     and summary), response.custom_tool_call_input.delta.

// keepChatDelta keeps the output text of one chat choice's delta object.
func (t *StreamTracker) keepChatDelta(d gjson.Result) {
	if !d.IsObject() {
		return
	}
	d.ForEach(func(k, v gjson.Result) bool {
		switch k.Str {
		case "content", "refusal", "reasoning_content":
			t.keep(v)
		case "function_call":
			t.keep(v.Get("name"))
			t.keep(v.Get("arguments"))
		case "tool_calls":
			v.ForEach(func(_, tc gjson.Result) bool {
				t.keep(tc.Get("function.name"))
				t.keep(tc.Get("function.arguments"))
				return true
			})
		}
		return true
	})
}

// responsesTextDelta reports whether a Responses event type carries output
// text in its delta field (audio deltas are base64 and are not text).
func responsesTextDelta(typ string) bool {
	rest, ok := strings.CutPrefix(typ, "response.")
	if !ok || !strings.HasSuffix(rest, ".delta") {
		return false
	}
	for _, p := range [...]string{"output_text.", "refusal.", "function_call_arguments.", "reasoning", "custom_tool_call_input."} {
		if strings.HasPrefix(rest, p) {
			return true
		}
	}
	return false
}

// keep appends v's text, when v is a string, to the pending output, up to
// MaxCountedText in all; the rest is only measured.
func (t *StreamTracker) keep(v gjson.Result) {
	if v.Type != gjson.String || v.Str == "" {
		return
	}
	s := v.Str
	if room := MaxCountedText - len(t.text); room < len(s) {
		room = max(room, 0)
		t.pendingOverflow += int64(len(s) - room)
		s = s[:room]
	}
	t.text = append(t.text, s...)
}

// Forwarded records that the event passed to Observe last reached the client:
// its output text counts in CountedUsage. An event the gateway did not forward
// (hidden, dropped by a policy, or whose write failed) is not counted.
func (t *StreamTracker) Forwarded() {
	t.committed = len(t.text)
	t.overflow += t.pendingOverflow
	t.pendingOverflow = 0
}

// CountedUsage is the usage the gateway counts itself for a stream that
// delivered no authoritative usage (Usage() nil or not Authoritative): it
// starts from the partial usage the stream reported, if any; PromptTokens is
// prompt (the caller's estimate) unless the stream reported its prompt count;
// CompletionTokens is the larger of a reported partial output count and
// count(forwarded output text) plus one token per 4 bytes forwarded past
// MaxCountedText. count must not retain its argument. The result has Counted
// set and Authoritative false; it is nil when nothing was forwarded and no
// usage was reported (the estimate then stands alone).
//
// Counting runs the tokenizer over the whole output, so callers call this
// once, at the end, and only when the outcome needs it.
func (t *StreamTracker) CountedUsage(count func(text string) int64, prompt int64) *Usage {
	forwarded := t.text[:t.committed]
	if !t.sawUsage && len(forwarded) == 0 && t.overflow == 0 {
		return nil
	}
	u := t.usage
	if !t.promptSeen {
		u.PromptTokens = max(prompt, 0)
	}
	var out int64
	if len(forwarded) > 0 && count != nil {
		out = max(count(view(forwarded)), 0)
	} else {
		out = int64(len(forwarded)+3) / 4
	}
	out += (t.overflow + 3) / 4
	u.CompletionTokens = max(u.CompletionTokens, out)
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	u.Authoritative, u.Counted = false, true
	u.ExpectedChoices = t.n
	u.FinishedChoices = t.finishedCount
	return &u
}
