package llmapi

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// benchBodies are typical request bodies: a short chat, a ten-turn chat with
// tools, a 1 MiB document; and an adversarial one.
func benchBodies() []struct {
	name string
	ep   Endpoint
	body []byte
} {
	chat := func(turns int, text string, tools bool) []byte {
		msgs := make([]map[string]any, 0, turns)
		for i := range turns {
			role := "user"
			if i%2 == 1 {
				role = "assistant"
			}
			msgs = append(msgs, map[string]any{"role": role, "content": text})
		}
		m := map[string]any{"model": "gpt-4o", "messages": msgs, "max_tokens": 256, "temperature": 0.2,
			"stream": true, "stream_options": map[string]any{"include_usage": true}, "user": "u-123"}
		if tools {
			m["tools"] = []map[string]any{{"type": "function", "function": map[string]any{
				"name": "lookup", "description": "look a thing up",
				"parameters": map[string]any{"type": "object", "properties": map[string]any{"q": map[string]any{"type": "string"}}},
			}}}
		}
		b, err := json.Marshal(m)
		if err != nil {
			panic(err)
		}
		return b
	}
	return []struct {
		name string
		ep   Endpoint
		body []byte
	}{
		{"chat-short", ChatCompletions, chat(1, "Say hello in one short sentence.", false)},
		{"chat-10turns-tools", ChatCompletions, chat(10, strings.Repeat("a sentence of ordinary words. ", 12), true)},
		{"chat-1MiB", ChatCompletions, chat(1, strings.Repeat("a sentence of ordinary words. ", 1<<20/30), false)},
		// The worst case: as many distinct member names in one object as
		// MaxMembers allows, each checked for duplicates and case-folded twins.
		{"names-max", ChatCompletions, flatObject(MaxMembers - 2)},
	}
}

func flatObject(members int) []byte {
	var b strings.Builder
	b.WriteString(`{"model":"m","metadata":{`)
	for i := 0; i < members; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"%x":0`, i)
	}
	b.WriteString("}}")
	return []byte(b.String())
}

func BenchmarkParse(b *testing.B) {
	for _, bb := range benchBodies() {
		b.Run(bb.name, func(b *testing.B) {
			b.SetBytes(int64(len(bb.body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, gerr := Parse(bb.ep, bb.body); gerr != nil {
					b.Fatal(gerr)
				}
			}
		})
	}
}
