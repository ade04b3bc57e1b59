package mockllm

import (
	"hash/fnv"
	"math"
	"strconv"

	"github.com/tidwall/gjson"
)

// The response bodies are appended by hand: the mock is the upstream in
// benchmarks and must not spend its time in reflection.

func appendInt(b []byte, n int64) []byte { return strconv.AppendInt(b, n, 10) }

func appendText(b []byte, text string, tokens int64) []byte {
	b = append(b, '"')
	for i := int64(0); i < tokens; i++ {
		b = append(b, text...)
	}
	return append(b, '"')
}

func appendID(b []byte, prefix string, id uint64) []byte {
	b = append(b, '"')
	b = append(b, prefix...)
	b = strconv.AppendUint(b, id, 10)
	return append(b, '"')
}

func (c *call) finishReason() string {
	if c.bounded {
		return "length"
	}
	return "stop"
}

func (c *call) stopReason() string {
	if c.bounded {
		return "max_tokens"
	}
	return "end_turn"
}

func appendHead(b []byte, c *call, idPrefix, object string) []byte {
	b = append(b, `{"id":`...)
	b = appendID(b, idPrefix, c.id)
	b = append(b, `,"object":"`...)
	b = append(b, object...)
	b = append(b, `","created":`...)
	b = appendInt(b, c.created)
	b = append(b, `,"model":`...)
	return gjson.AppendJSONString(b, c.req.Model)
}

// appendOpenAIUsage appends the "usage" member of a chat or completions
// object: null when the caller asked for no usage.
func appendOpenAIUsage(b []byte, c *call) []byte {
	if c.noUsage {
		return append(b, `"usage":null`...)
	}
	b = append(b, `"usage":{"prompt_tokens":`...)
	b = appendInt(b, c.prompt)
	b = append(b, `,"completion_tokens":`...)
	b = appendInt(b, c.completion())
	b = append(b, `,"total_tokens":`...)
	b = appendInt(b, c.prompt+c.completion())
	return append(b, `,"prompt_tokens_details":{"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}}`...)
}

func chatBody(b []byte, c *call) []byte {
	b = appendHead(b, c, "chatcmpl-mock-", "chat.completion")
	b = append(b, `,"choices":[`...)
	for i := 0; i < c.choices; i++ {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"index":`...)
		b = appendInt(b, int64(i))
		b = append(b, `,"message":{"role":"assistant","content":`...)
		b = appendText(b, c.text, c.perChoice)
		b = append(b, `},"logprobs":null,"finish_reason":"`...)
		b = append(b, c.finishReason()...)
		b = append(b, `"}`...)
	}
	b = append(b, "],"...)
	b = appendOpenAIUsage(b, c)
	return append(b, '}')
}

func completionsBody(b []byte, c *call) []byte {
	b = appendHead(b, c, "cmpl-mock-", "text_completion")
	b = append(b, `,"choices":[`...)
	for i := 0; i < c.choices; i++ {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"text":`...)
		b = appendText(b, c.text, c.perChoice)
		b = append(b, `,"index":`...)
		b = appendInt(b, int64(i))
		b = append(b, `,"logprobs":null,"finish_reason":"`...)
		b = append(b, c.finishReason()...)
		b = append(b, `"}`...)
	}
	b = append(b, "],"...)
	b = appendOpenAIUsage(b, c)
	return append(b, '}')
}

// embeddingDims is the vector length when the request sets no "dimensions".
const embeddingDims = 8

// embeddingsBody returns one vector per input: a string or a token-id array is one
// input; an array of strings or of token arrays is one input per element. Each
// vector is derived from an FNV hash of the input's JSON and is unit length.
func embeddingsBody(b []byte, c *call) []byte {
	dims := embeddingDims
	if d := gjson.GetBytes(c.req.Raw, "dimensions"); d.Type == gjson.Number && d.Int() > 0 {
		dims = int(min(d.Int(), 4096))
	}
	var inputs []string
	in := gjson.ParseBytes(c.req.Input)
	if in.IsArray() {
		in.ForEach(func(_, v gjson.Result) bool {
			if v.Type == gjson.Number { // a single token-id array
				inputs = []string{in.Raw}
				return false
			}
			inputs = append(inputs, v.Raw)
			return true
		})
	}
	if inputs == nil {
		inputs = []string{in.Raw}
	}
	b = append(b, `{"object":"list","data":[`...)
	vec := make([]float64, dims)
	for i, raw := range inputs {
		if i > 0 {
			b = append(b, ',')
		}
		h := fnv.New64a()
		_, _ = h.Write([]byte(raw))
		x := h.Sum64() | 1
		var norm float64
		for j := range vec {
			// xorshift64: a deterministic, cheap sequence seeded by the input.
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			vec[j] = float64(int64(x>>11)-(1<<52)) / (1 << 52)
			norm += vec[j] * vec[j]
		}
		norm = math.Sqrt(norm)
		b = append(b, `{"object":"embedding","index":`...)
		b = appendInt(b, int64(i))
		b = append(b, `,"embedding":[`...)
		for j, v := range vec {
			if j > 0 {
				b = append(b, ',')
			}
			if norm > 0 {
				v /= norm
			}
			b = strconv.AppendFloat(b, v, 'f', 6, 64)
		}
		b = append(b, "]}"...)
	}
	b = append(b, `],"model":`...)
	b = gjson.AppendJSONString(b, c.req.Model)
	if c.noUsage {
		return append(b, `,"usage":null}`...)
	}
	b = append(b, `,"usage":{"prompt_tokens":`...)
	b = appendInt(b, c.prompt)
	b = append(b, `,"total_tokens":`...)
	b = appendInt(b, c.prompt)
	return append(b, "}}"...)
}

func appendResponsesUsage(b []byte, c *call) []byte {
	if c.noUsage {
		return append(b, `"usage":null`...)
	}
	b = append(b, `"usage":{"input_tokens":`...)
	b = appendInt(b, c.prompt)
	b = append(b, `,"input_tokens_details":{"cached_tokens":0},"output_tokens":`...)
	b = appendInt(b, c.completion())
	b = append(b, `,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":`...)
	b = appendInt(b, c.prompt+c.completion())
	return append(b, '}')
}

func appendOutputMessage(b []byte, c *call, status string, tokens int64) []byte {
	b = append(b, `{"type":"message","id":`...)
	b = appendID(b, "msg_mock_", c.id)
	b = append(b, `,"status":"`...)
	b = append(b, status...)
	b = append(b, `","role":"assistant","content":[`...)
	if status == "completed" {
		b = appendOutputText(b, c, tokens)
	}
	return append(b, "]}"...)
}

func appendOutputText(b []byte, c *call, tokens int64) []byte {
	b = append(b, `{"type":"output_text","text":`...)
	b = appendText(b, c.text, tokens)
	return append(b, `,"annotations":[]}`...)
}

// appendResponse renders a responses object; status "in_progress" has no output
// and null usage.
func appendResponse(b []byte, c *call, status string) []byte {
	b = append(b, `{"id":`...)
	b = appendID(b, "resp_mock_", c.id)
	b = append(b, `,"object":"response","created_at":`...)
	b = appendInt(b, c.created)
	b = append(b, `,"status":"`...)
	b = append(b, status...)
	b = append(b, `","model":`...)
	b = gjson.AppendJSONString(b, c.req.Model)
	b = append(b, `,"output":[`...)
	if status == "completed" {
		b = appendOutputMessage(b, c, status, c.perChoice)
	}
	b = append(b, "],"...)
	if status == "completed" {
		b = appendResponsesUsage(b, c)
	} else {
		b = append(b, `"usage":null`...)
	}
	return append(b, '}')
}

func responsesBody(b []byte, c *call) []byte { return appendResponse(b, c, "completed") }

func appendAnthropicUsage(b []byte, c *call, output int64) []byte {
	b = append(b, `"usage":{"input_tokens":`...)
	b = appendInt(b, c.prompt)
	b = append(b, `,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":`...)
	b = appendInt(b, output)
	return append(b, '}')
}

func appendMessage(b []byte, c *call, final bool) []byte {
	b = append(b, `{"id":`...)
	b = appendID(b, "msg_mock_", c.id)
	b = append(b, `,"type":"message","role":"assistant","model":`...)
	b = gjson.AppendJSONString(b, c.req.Model)
	if final {
		b = append(b, `,"content":[{"type":"text","text":`...)
		b = appendText(b, c.text, c.perChoice)
		b = append(b, `}],"stop_reason":"`...)
		b = append(b, c.stopReason()...)
		b = append(b, `","stop_sequence":null`...)
	} else {
		b = append(b, `,"content":[],"stop_reason":null,"stop_sequence":null`...)
	}
	if !c.noUsage {
		b = append(b, ',')
		out := c.perChoice
		if !final {
			out = min(c.perChoice, 1)
		}
		b = appendAnthropicUsage(b, c, out)
	}
	return append(b, '}')
}

func messagesBody(b []byte, c *call) []byte { return appendMessage(b, c, true) }
