package tokencount

import (
	"github.com/tidwall/gjson"

	"sluice/llmapi"
)

// Estimation rules, following OpenAI's published counting recipe for chat:
//   - every message (chat message, Anthropic message, responses input item) costs
//     TokensPerMessage plus the tokens of its string fields (role, content, name,
//     ...); a "name" field costs one more; non-string fields (tool_calls,
//     function_call, tool inputs) are counted as their JSON text;
//   - a conversation costs ReplyPriming once more;
//   - a content array is counted part by part: a part's "text" (or Anthropic
//     tool_result "content"), ImagePartTokens for an image part, FilePartTokens
//     for a document/file part, the part's JSON text otherwise;
//   - tools are counted as their JSON text; Anthropic "system" and responses
//     "instructions" as text (string or content parts);
//   - completions prompts and embeddings inputs: a string, an array of strings
//     (summed), an array of token ids (counted) or an array of such arrays (summed).
const (
	TokensPerMessage = 3
	ReplyPriming     = 3
	// ImagePartTokens approximates one image: OpenAI's high-detail cost of a
	// 1024x1024 image (85 base + 4 tiles x 170). Anthropic bills a 1024x1024
	// image near 1400; the settle step corrects the difference.
	ImagePartTokens = 765
	// FilePartTokens approximates one attached document or file whose text the
	// gateway cannot see.
	FilePartTokens = 1000
)

// estimator gathers the texts to tokenize and the fixed token costs.
type estimator struct {
	texts []string
	fixed int64
}

func (e *estimator) text(s string) {
	if s != "" {
		e.texts = append(e.texts, s)
	}
}

func (e *estimator) collect(req *llmapi.Request) {
	switch req.Endpoint {
	case llmapi.ChatCompletions, llmapi.Messages:
		if len(req.System) > 0 {
			e.content(gjson.ParseBytes(req.System))
		}
		e.conversation(gjson.ParseBytes(req.Messages))
	case llmapi.Completions:
		e.promptList(gjson.ParseBytes(req.Prompt))
	case llmapi.Embeddings:
		e.promptList(gjson.ParseBytes(req.Input))
	case llmapi.Responses:
		if len(req.Instructions) > 0 {
			e.content(gjson.ParseBytes(req.Instructions))
		}
		in := gjson.ParseBytes(req.Input)
		if in.Type == gjson.String {
			e.fixed += TokensPerMessage + 1 + ReplyPriming // an implicit user message
			e.text(in.Str)
		} else {
			e.conversation(in)
		}
	}
	if len(req.Tools) > 0 {
		if t := gjson.ParseBytes(req.Tools); t.IsArray() || t.IsObject() {
			e.text(t.Raw)
		}
	}
}

// conversation counts an array of messages; anything else is counted as content.
func (e *estimator) conversation(msgs gjson.Result) {
	if !msgs.Exists() {
		return
	}
	if !msgs.IsArray() {
		e.content(msgs)
		return
	}
	msgs.ForEach(func(_, m gjson.Result) bool {
		e.fixed += TokensPerMessage
		if !m.IsObject() {
			e.content(m)
			return true
		}
		m.ForEach(func(k, v gjson.Result) bool {
			switch {
			case k.Str == "content":
				e.content(v)
			case v.Type == gjson.String:
				e.text(v.Str)
				if k.Str == "name" {
					e.fixed++
				}
			case v.IsArray() || v.IsObject():
				e.text(v.Raw)
			}
			return true
		})
		return true
	})
	e.fixed += ReplyPriming
}

// content counts a string or an array of content parts.
func (e *estimator) content(v gjson.Result) {
	switch {
	case v.Type == gjson.String:
		e.text(v.Str)
	case v.IsArray():
		v.ForEach(func(_, p gjson.Result) bool {
			e.part(p)
			return true
		})
	case v.IsObject():
		e.part(v)
	}
}

func (e *estimator) part(p gjson.Result) {
	if p.Type == gjson.String {
		e.text(p.Str)
		return
	}
	if !p.IsObject() {
		return
	}
	typ := p.Get("type").Str
	switch typ {
	case "image_url", "image", "input_image":
		e.fixed += ImagePartTokens
		return
	case "document", "file", "input_file":
		e.fixed += FilePartTokens
		return
	case "input_audio":
		e.text(p.Get("input_audio.transcript").Str)
		return
	}
	if t := p.Get("text"); t.Type == gjson.String {
		e.text(t.Str)
		return
	}
	if typ == "tool_result" {
		e.content(p.Get("content"))
		return
	}
	e.text(p.Raw)
}

// promptList counts a completions prompt or an embeddings input.
func (e *estimator) promptList(v gjson.Result) {
	switch {
	case v.Type == gjson.String:
		e.text(v.Str)
	case v.IsArray():
		v.ForEach(func(_, x gjson.Result) bool {
			switch {
			case x.Type == gjson.Number:
				e.fixed++ // a token id
			case x.Type == gjson.String:
				e.text(x.Str)
			case x.IsArray():
				x.ForEach(func(_, _ gjson.Result) bool { e.fixed++; return true })
			}
			return true
		})
	}
}
