// Package sse reads and writes Server-Sent Events as LLM APIs use them.
package sse

// Event is one SSE event. Data holds the event's data lines joined by "\n".
type Event struct {
	// Event is the "event:" field ("" when absent; Anthropic streams set it).
	Event string
	ID    string
	Data  []byte
	// Drop, when set by a stream policy or the gateway, keeps the event from the client.
	Drop bool
}

// Done reports whether e is OpenAI's terminating "data: [DONE]".
func (e *Event) Done() bool { return string(e.Data) == "[DONE]" }
