package mockllm

import (
	"context"
	"net/http"
	"strconv"

	"sluice/sse"
)

// streamer writes SSE events, flushing each, and applies the call's delay and drop
// faults. After a write error or a cancelled delay every later call is a no-op.
type streamer struct {
	w      http.ResponseWriter
	rc     *http.ResponseController
	ctx    context.Context
	c      *call
	events int
	tokens int
	buf    []byte
	failed bool
}

func newStreamer(w http.ResponseWriter, ctx context.Context, c *call) *streamer {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	st := &streamer{w: w, rc: http.NewResponseController(w), ctx: ctx, c: c, buf: make([]byte, 0, 512)}
	st.flush()
	st.maybeDrop()
	st.maybeStall()
	return st
}

// maybeStall holds the stream once the configured number of events is out:
// it waits for the client to go away, and every later call is a no-op.
func (st *streamer) maybeStall() {
	if st.c.stallAfter >= 0 && st.events >= st.c.stallAfter && !st.failed {
		<-st.ctx.Done()
		st.failed = true
	}
}

func (st *streamer) flush() {
	if err := st.rc.Flush(); err != nil {
		st.failed = true
	}
}

// maybeDrop aborts the connection once the configured number of events is out.
// http.ErrAbortHandler makes net/http close the connection without ending the
// chunked body, which clients see as an unexpected EOF.
func (st *streamer) maybeDrop() {
	if st.c.dropAfter >= 0 && st.events >= st.c.dropAfter {
		panic(http.ErrAbortHandler)
	}
}

// event writes one event whose data is data.
func (st *streamer) event(name string, data []byte) { st.emit(name, data, false) }

// tokenEvent writes an event that carries one output token.
func (st *streamer) tokenEvent(name string, data []byte) { st.emit(name, data, true) }

func (st *streamer) emit(name string, data []byte, token bool) {
	if st.failed {
		return
	}
	st.buf = sse.Append(st.buf[:0], &sse.Event{Event: name, Data: data})
	if _, err := st.w.Write(st.buf); err != nil {
		st.failed = true
		return
	}
	if token {
		st.c.written++
	}
	st.flush()
	st.events++
	st.maybeDrop()
	st.maybeStall()
}

// tokenPause waits before a token event: with a saturable model until the
// token is decoded (one round of choices at a time), then the first-token
// delay before the first, the token delay before the others.
func (st *streamer) tokenPause() {
	if st.failed {
		return
	}
	d := st.c.tokenDelay
	if st.tokens == 0 {
		d = st.c.firstDelay
	}
	i, per := st.tokens, max(st.c.choices, 1)
	st.tokens++
	if e := st.c.engine; e != nil && i%per == 0 {
		if e.waitUntil(st.ctx, e.tokenAt(st.c.first, int64(i/per))) != nil {
			st.failed = true
			return
		}
	}
	if sleep(st.ctx, d) != nil {
		st.failed = true
	}
}

// streamOpenAI writes a chat.completions or completions stream: one chunk per
// token per choice (token-major), one finish chunk per choice, the usage chunk
// when the client asked for it, then [DONE].
func streamOpenAI(st *streamer, c *call) {
	chat := c.req.Endpoint == "chat.completions"
	withUsage := c.req.ClientIncludeUsage && !c.noUsage
	idPrefix, object := "cmpl-mock-", "text_completion"
	if chat {
		idPrefix, object = "chatcmpl-mock-", "chat.completion.chunk"
	}
	var b []byte
	chunk := func(choice int, content string, withText bool, finish string) {
		b = appendHead(b[:0], c, idPrefix, object)
		b = append(b, `,"choices":[{"index":`...)
		b = strconv.AppendInt(b, int64(choice), 10)
		if chat {
			b = append(b, `,"delta":{`...)
			if withText {
				if st.tokens <= c.choices {
					b = append(b, `"role":"assistant",`...)
				}
				b = append(b, `"content":"`...)
				b = append(b, content...)
				b = append(b, '"')
			}
			b = append(b, '}')
		} else {
			b = append(b, `,"text":"`...)
			b = append(b, content...)
			b = append(b, '"')
		}
		b = append(b, `,"logprobs":null,"finish_reason":`...)
		if finish == "" {
			b = append(b, "null"...)
		} else {
			b = append(b, '"')
			b = append(b, finish...)
			b = append(b, '"')
		}
		b = append(b, "}]"...)
		if withUsage {
			b = append(b, `,"usage":null`...)
		}
		b = append(b, '}')
		if withText {
			st.tokenEvent("", b)
		} else {
			st.event("", b)
		}
	}
	for t := int64(0); t < c.perChoice && !st.failed; t++ {
		for i := 0; i < c.choices; i++ {
			st.tokenPause()
			chunk(i, c.text, true, "")
		}
	}
	for i := 0; i < c.choices; i++ {
		chunk(i, "", false, c.finishReason())
	}
	if withUsage {
		b = appendHead(b[:0], c, idPrefix, object)
		b = append(b, `,"choices":[],`...)
		b = appendOpenAIUsage(b, c)
		b = append(b, '}')
		st.event("", b)
	}
	st.event("", []byte("[DONE]"))
}

// streamResponses writes the responses event sequence: response.created,
// output_item.added, content_part.added, one output_text.delta per token,
// output_text.done, content_part.done, output_item.done, response.completed.
func streamResponses(st *streamer, c *call) {
	var b []byte
	seq := 0
	ev := func(typ string, body func([]byte) []byte) {
		b = append(b[:0], `{"type":"`...)
		b = append(b, typ...)
		b = append(b, `","sequence_number":`...)
		b = strconv.AppendInt(b, int64(seq), 10)
		seq++
		b = body(b)
		b = append(b, '}')
		if typ == "response.output_text.delta" {
			st.tokenEvent(typ, b)
		} else {
			st.event(typ, b)
		}
	}
	itemID := func(b []byte) []byte {
		b = append(b, `,"item_id":`...)
		return appendID(b, "msg_mock_", c.id)
	}
	ev("response.created", func(b []byte) []byte {
		return appendResponse(append(b, `,"response":`...), c, "in_progress")
	})
	ev("response.output_item.added", func(b []byte) []byte {
		b = append(b, `,"output_index":0,"item":`...)
		return appendOutputMessage(b, c, "in_progress", 0)
	})
	ev("response.content_part.added", func(b []byte) []byte {
		b = append(itemID(b), `,"output_index":0,"content_index":0,"part":`...)
		return appendOutputText(b, c, 0)
	})
	for t := int64(0); t < c.perChoice && !st.failed; t++ {
		st.tokenPause()
		ev("response.output_text.delta", func(b []byte) []byte {
			b = append(itemID(b), `,"output_index":0,"content_index":0,"delta":"`...)
			return append(append(b, c.text...), '"')
		})
	}
	ev("response.output_text.done", func(b []byte) []byte {
		b = append(itemID(b), `,"output_index":0,"content_index":0,"text":`...)
		return appendText(b, c.text, c.perChoice)
	})
	ev("response.content_part.done", func(b []byte) []byte {
		b = append(itemID(b), `,"output_index":0,"content_index":0,"part":`...)
		return appendOutputText(b, c, c.perChoice)
	})
	ev("response.output_item.done", func(b []byte) []byte {
		b = append(b, `,"output_index":0,"item":`...)
		return appendOutputMessage(b, c, "completed", c.perChoice)
	})
	ev("response.completed", func(b []byte) []byte {
		return appendResponse(append(b, `,"response":`...), c, "completed")
	})
}

// streamMessages writes Anthropic's sequence: message_start, content_block_start,
// one content_block_delta per token, content_block_stop, message_delta (stop
// reason and cumulative output tokens), message_stop.
func streamMessages(st *streamer, c *call) {
	var b []byte
	b = append(b[:0], `{"type":"message_start","message":`...)
	b = appendMessage(b, c, false)
	st.event("message_start", append(b, '}'))
	st.event("content_block_start", []byte(`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`))
	delta := []byte(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"` + c.text + `"}}`)
	for t := int64(0); t < c.perChoice && !st.failed; t++ {
		st.tokenPause()
		st.tokenEvent("content_block_delta", delta)
	}
	st.event("content_block_stop", []byte(`{"type":"content_block_stop","index":0}`))
	b = append(b[:0], `{"type":"message_delta","delta":{"stop_reason":"`...)
	b = append(b, c.stopReason()...)
	b = append(b, `","stop_sequence":null}`...)
	if !c.noUsage {
		b = append(b, `,"usage":{"output_tokens":`...)
		b = strconv.AppendInt(b, c.perChoice, 10)
		b = append(b, '}')
	}
	st.event("message_delta", append(b, '}'))
	st.event("message_stop", []byte(`{"type":"message_stop"}`))
}
