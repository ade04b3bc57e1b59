package tokencount

import "sluice/llmapi"

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
			e.content(topLevel(req.System))
		}
		e.conversation(topLevel(req.Messages))
	case llmapi.Completions:
		e.promptList(topLevel(req.Prompt))
	case llmapi.Embeddings:
		e.promptList(topLevel(req.Input))
	case llmapi.Responses:
		if len(req.Instructions) > 0 {
			e.content(topLevel(req.Instructions))
		}
		in := topLevel(req.Input)
		if in.isString() {
			e.fixed += TokensPerMessage + 1 + ReplyPriming // an implicit user message
			e.text(in.str())
		} else {
			e.conversation(in)
		}
	}
	if len(req.Tools) > 0 {
		if t := topLevel(req.Tools); t.isArray() || t.isObject() {
			e.text(t.raw())
		}
	}
}

// conversation counts an array of messages; anything else is counted as content.
func (e *estimator) conversation(msgs jval) {
	if !msgs.exists() {
		return
	}
	if !msgs.isArray() {
		e.content(msgs)
		return
	}
	msgs.each(func(_, m jval) bool {
		e.fixed += TokensPerMessage
		if !m.isObject() {
			e.content(m)
			return true
		}
		m.each(func(k, v jval) bool {
			switch name := k.str(); {
			case name == "content":
				e.content(v)
			case v.isString():
				e.text(v.str())
				if name == "name" {
					e.fixed++
				}
			case v.isArray() || v.isObject():
				e.text(v.raw())
			}
			return true
		})
		return true
	})
	e.fixed += ReplyPriming
}

// content counts a string or an array of content parts.
func (e *estimator) content(v jval) {
	switch {
	case v.isString():
		e.text(v.str())
	case v.isArray():
		v.each(func(_, p jval) bool {
			e.part(p)
			return true
		})
	case v.isObject():
		e.part(v)
	}
}

func (e *estimator) part(p jval) {
	if p.isString() {
		e.text(p.str())
		return
	}
	if !p.isObject() {
		return
	}
	// One pass finds the members the rules read, each at its first
	// occurrence (what get would return), instead of one walk for each.
	var typeV, textV, contentV, audioV jval
	p.each(func(k, v jval) bool {
		var dst *jval
		switch k.str() {
		case "type":
			dst = &typeV
		case "text":
			dst = &textV
		case "content":
			dst = &contentV
		case "input_audio":
			dst = &audioV
		}
		if dst != nil && !dst.exists() {
			*dst = v
		}
		return true
	})
	typ := typeV.str()
	switch typ {
	case "image_url", "image", "input_image":
		e.fixed += ImagePartTokens
		return
	case "document", "file", "input_file":
		e.fixed += FilePartTokens
		return
	case "input_audio":
		e.text(audioV.get("transcript").str())
		return
	}
	if textV.isString() {
		e.text(textV.str())
		return
	}
	if typ == "tool_result" {
		e.content(contentV)
		return
	}
	e.text(p.raw())
}

// promptList counts a completions prompt or an embeddings input.
func (e *estimator) promptList(v jval) {
	switch {
	case v.isString():
		e.text(v.str())
	case v.isArray():
		v.each(func(_, x jval) bool {
			switch {
			case x.isNumber():
				e.fixed++ // a token id
			case x.isString():
				e.text(x.str())
			case x.isArray():
				x.each(func(_, _ jval) bool { e.fixed++; return true })
			}
			return true
		})
	}
}
