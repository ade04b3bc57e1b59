package gateway

import (
	"encoding/json"
	"strconv"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"sluice/llmapi"
	"sluice/sse"
	"sluice/tokencount"
)

// The output bound: a request's max tokens per choice (after the request
// phase, in which policies may set or lower it) is enforced on the answer,
// because a provider that ignores it would hold the capacity and the
// budgets that were reserved for the bound. Output is counted with the
// gateway's tokenizer for the request's model (docs/gateway.md#output-bound).

// outputBound is the output per choice, in the gateway's count, at which
// the answer is cut; 0 for none. It is the request's bound when the
// gateway's tokenizer is the model's own; for a model it approximates
// (tokencount.Exact false) a quarter more, so that an answer the provider
// ended within the bound is not cut because the approximation counts it
// longer: what is cut then is an upstream that ignores the bound.
func (x *exchange) outputBound() int64 {
	llm := x.call.Request.LLM
	if llm == nil || llm.Endpoint == llmapi.Embeddings || x.g.opts.Services.Tokens == nil || llm.MaxTokens <= 0 {
		return 0
	}
	if !tokencount.Exact(x.call.Shared.ServedModel()) {
		return llm.MaxTokens + (llm.MaxTokens+3)/4
	}
	return llm.MaxTokens
}

// streamBound follows a stream's output per choice against the bound. An
// event that would take a choice past it is not forwarded and the choice is
// cut; once every choice is cut or finished (and one was cut) the gateway
// ends the stream itself, in the client's dialect. It lives on the
// request's goroutine.
type streamBound struct {
	ep      llmapi.Endpoint
	bound   int64
	choices int
	cut     []bool
	done    []bool
	ncut    int
	pending []int // choices the current event finishes

	// What the ending needs of the stream: OpenAI's chunk identity, the
	// Anthropic content block left open, the Responses id and sequence.
	id, object, model string
	created           int64
	openBlock         int64
	respID            string
	seq               int64
}

func newStreamBound(ep llmapi.Endpoint, bound int64, choices int) *streamBound {
	choices = max(choices, 1)
	return &streamBound{ep: ep, bound: bound, choices: choices,
		cut: make([]bool, choices), done: make([]bool, choices), openBlock: -1}
}

// begin starts an event: it records what the ending needs from it.
func (b *streamBound) begin(ev *sse.Event) {
	b.pending = b.pending[:0]
	if len(ev.Data) == 0 || ev.Done() {
		return
	}
	switch b.ep {
	case llmapi.Messages:
		switch gjson.GetBytes(ev.Data, "type").Str {
		case "content_block_start":
			b.openBlock = gjson.GetBytes(ev.Data, "index").Int()
		case "content_block_stop":
			b.openBlock = -1
		}
	case llmapi.Responses:
		r := gjson.GetManyBytes(ev.Data, "sequence_number", "response.id", "response.model")
		if r[0].Exists() {
			b.seq = r[0].Int() + 1
		}
		if r[1].Str != "" {
			b.respID, b.model = r[1].Str, r[2].Str
		}
	default:
		if b.id == "" {
			r := gjson.GetManyBytes(ev.Data, "id", "object", "created", "model")
			b.id, b.object, b.created, b.model = r[0].Str, r[1].Str, r[2].Int(), r[3].Str
		}
	}
}

// take accounts one choice's part of the current event: the choice's
// output count with it and whether it finishes the choice. It reports
// whether the event must be dropped (the choice is, or now gets, cut).
func (b *streamBound) take(choice int, tokens int64, finished bool) (drop bool) {
	if choice < 0 || choice >= b.choices {
		return false
	}
	if b.cut[choice] {
		return true
	}
	if tokens > b.bound {
		b.cut[choice] = true
		b.ncut++
		return true
	}
	if finished {
		b.pending = append(b.pending, choice)
	}
	return false
}

// forwarded records that the current event reached the client.
func (b *streamBound) forwarded() {
	for _, c := range b.pending {
		b.done[c] = true
	}
	b.pending = b.pending[:0]
}

// complete reports whether the gateway must end the stream now: a choice
// was cut and every choice is cut or finished.
func (b *streamBound) complete() bool {
	if b.ncut == 0 {
		return false
	}
	for i := range b.choices {
		if !b.cut[i] && !b.done[i] {
			return false
		}
	}
	return true
}

// ending is the end of a cut stream in its dialect, usage u being what was
// delivered: OpenAI a finish_reason "length" chunk per cut choice, the
// usage chunk when the client asked for it, [DONE]; Anthropic the open
// content block's stop, message_delta with stop_reason "max_tokens" and the
// output count, message_stop; Responses response.incomplete with reason
// max_output_tokens and the usage.
func (b *streamBound) ending(u *llmapi.Usage, includeUsage bool) []*sse.Event {
	var prompt, output int64
	if u != nil {
		prompt, output = u.PromptTokens, u.CompletionTokens
	}
	var evs []*sse.Event
	data := func(name, s string) { evs = append(evs, &sse.Event{Event: name, Data: []byte(s)}) }
	switch b.ep {
	case llmapi.Messages:
		if b.openBlock >= 0 {
			data("content_block_stop", `{"type":"content_block_stop","index":`+strconv.FormatInt(b.openBlock, 10)+`}`)
		}
		data("message_delta", `{"type":"message_delta","delta":{"stop_reason":"max_tokens","stop_sequence":null},"usage":{"output_tokens":`+
			strconv.FormatInt(output, 10)+`}}`)
		data("message_stop", `{"type":"message_stop"}`)
	case llmapi.Responses:
		data("response.incomplete", `{"type":"response.incomplete","sequence_number":`+strconv.FormatInt(b.seq, 10)+
			`,"response":{"id":`+jsonString(b.respID)+`,"object":"response","status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"model":`+
			jsonString(b.model)+`,"usage":{"input_tokens":`+strconv.FormatInt(prompt, 10)+`,"output_tokens":`+strconv.FormatInt(output, 10)+
			`,"total_tokens":`+strconv.FormatInt(prompt+output, 10)+`}}}`)
	default:
		head := `{"id":` + jsonString(b.id) + `,"object":` + jsonString(b.object) + `,"created":` + strconv.FormatInt(b.created, 10) +
			`,"model":` + jsonString(b.model)
		for i := range b.choices {
			if !b.cut[i] {
				continue
			}
			choice := `{"index":` + strconv.Itoa(i) + `,"delta":{},"finish_reason":"length"}`
			if b.ep == llmapi.Completions {
				choice = `{"index":` + strconv.Itoa(i) + `,"text":"","finish_reason":"length"}`
			}
			data("", head+`,"choices":[`+choice+`]}`)
		}
		if includeUsage {
			data("", head+`,"choices":[],"usage":{"prompt_tokens":`+strconv.FormatInt(prompt, 10)+`,"completion_tokens":`+
				strconv.FormatInt(output, 10)+`,"total_tokens":`+strconv.FormatInt(prompt+output, 10)+`}}`)
		}
		data("", "[DONE]")
	}
	return evs
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// boundBody applies the output bound to a non-streamed answer and returns
// the body to forward with its usage (UsageFromBody's). The provider's own
// count of the output, when it reports one within max_tokens, is what the
// request is charged and what the bound protects: the text is counted
// (cutBody) only when that count is missing, zero (servers that count
// nothing send zeros) or over it.
func (x *exchange) boundBody(body []byte) ([]byte, *llmapi.Usage, error) {
	choices := x.call.Request.LLM.Choices()
	usage, err := llmapi.UsageFromBody(x.ep, body, choices)
	bound := x.outputBound()
	if bound <= 0 || usage != nil && usage.CompletionTokens > 0 && usage.CompletionTokens <= x.call.Request.LLM.MaxTokens {
		return body, usage, err
	}
	cut, ok := x.cutBody(body, bound)
	if !ok {
		return body, usage, err
	}
	x.g.metrics.outputCuts.WithLabelValues(x.rt.name).Inc()
	usage, err = llmapi.UsageFromBody(x.ep, cut, choices)
	return cut, usage, err
}

// cutBody enforces the bound on a non-streamed answer: the text of a choice
// (an Anthropic message's or a response's text, across its parts) that
// counts more than bound tokens is cut to its longest prefix within the
// bound, what follows the cut is removed, the choice ends as the dialect
// ends a choice at its bound (finish_reason "length", stop_reason
// "max_tokens", status "incomplete"), and the usage reports the output
// delivered: the provider's count less what was cut. It returns the body
// unchanged (false) when nothing passes the bound or the body is not the
// endpoint's shape.
func (x *exchange) cutBody(body []byte, bound int64) ([]byte, bool) {
	tok, model := x.g.opts.Services.Tokens, x.call.Shared.ServedModel()
	count := func(s string) int64 { return int64(tok.Count(model, s)) }
	prefix := func(s string, n int64) (string, int64) {
		p, k := tok.Prefix(model, s, int(n))
		return p, int64(k)
	}
	var (
		out     = body
		cut     bool
		removed int64 // tokens cut off, by the gateway's count
		kept    int64 // tokens of the cut choices' text delivered
		err     error
	)
	set := func(path string, v any) {
		if err == nil {
			out, err = sjson.SetBytes(out, path, v)
		}
	}
	del := func(path string) {
		if err == nil {
			out, err = sjson.DeleteBytes(out, path)
		}
	}
	// cutParts walks the parts of list (at path base, "content.") whose
	// type is typ, counting their text against what the bound leaves after
	// used; at the part that passes it, it cuts the text, removes the parts
	// after it, accounts removed and kept, and reports true.
	cutParts := func(base string, list []gjson.Result, typ string, used *int64) bool {
		for j, part := range list {
			if part.Get("type").Str != typ {
				continue
			}
			text := part.Get("text").Str
			n := count(text)
			if *used+n <= bound {
				*used += n
				continue
			}
			p, k := prefix(text, bound-*used)
			set(base+strconv.Itoa(j)+".text", p)
			removed, kept = n-k, *used+k
			for r := len(list) - 1; r > j; r-- {
				if list[r].Get("type").Str == typ {
					removed += count(list[r].Get("text").Str)
				}
				del(base + strconv.Itoa(r))
			}
			return true
		}
		return false
	}
	root := gjson.ParseBytes(body)
	switch x.ep {
	case llmapi.ChatCompletions, llmapi.Completions:
		field := "message.content"
		if x.ep == llmapi.Completions {
			field = "text"
		}
		for i, c := range root.Get("choices").Array() {
			text := c.Get(field)
			// Most answers end within the bound; a text that size alone
			// shows within it is not counted.
			if text.Type != gjson.String || tokencount.FitsBySize(text.Str, bound) {
				continue
			}
			n := count(text.Str)
			if n <= bound {
				continue
			}
			p, k := prefix(text.Str, bound)
			base := "choices." + strconv.Itoa(i) + "."
			set(base+field, p)
			set(base+"finish_reason", "length")
			cut, removed, kept = true, removed+n-k, kept+k
		}
		if cut && root.Get("usage").IsObject() {
			prompt := root.Get("usage.prompt_tokens").Int()
			completion := max(root.Get("usage.completion_tokens").Int()-removed, kept)
			set("usage.completion_tokens", completion)
			set("usage.total_tokens", prompt+completion)
		}
	case llmapi.Messages:
		used := int64(0)
		if cutParts("content.", root.Get("content").Array(), "text", &used) {
			set("stop_reason", "max_tokens")
			cut = true
		}
		if cut && root.Get("usage").IsObject() {
			set("usage.output_tokens", max(root.Get("usage.output_tokens").Int()-removed, kept))
		}
	case llmapi.Responses:
		used := int64(0)
		items := root.Get("output").Array()
		for i, item := range items {
			if item.Get("type").Str != "message" ||
				!cutParts("output."+strconv.Itoa(i)+".content.", item.Get("content").Array(), "output_text", &used) {
				continue
			}
			for r := len(items) - 1; r > i; r-- {
				del("output." + strconv.Itoa(r))
			}
			cut = true
			break
		}
		if cut {
			set("status", "incomplete")
			set("incomplete_details", map[string]string{"reason": "max_output_tokens"})
			if root.Get("usage").IsObject() {
				input := root.Get("usage.input_tokens").Int()
				output := max(root.Get("usage.output_tokens").Int()-removed, kept)
				set("usage.output_tokens", output)
				set("usage.total_tokens", input+output)
			}
		}
	}
	if !cut || err != nil {
		return body, false
	}
	return out, true
}
