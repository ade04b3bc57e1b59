package gateway

import (
	"unicode/utf8"

	"sluice/llmapi"
)

// outputMeter counts a stream's output per choice, in tokens of the
// request's model, as it is forwarded: the count of each choice's text so
// far, kept exact without tokenizing the whole text at every event.
//
// Tokens never span the pre-tokenizer's pieces, and a piece that starts
// with a single space between two non-space characters (" word") starts
// the same way whatever follows. So the count of text+delta is the count
// of text minus that of its tail from the last such boundary, plus that of
// tail+delta: two short counts per event. A text with no boundary in its
// last tailMax bytes (a very long word, CJK without spaces) is split at a
// character instead, where the count may be off by a token.
//
// Counting event by event instead would overcount: a delta that splits a
// word ("Hel", "lo") counts more tokens than the word.
type outputMeter struct {
	count   func(string) int64
	max     int // choices
	choices []choiceText
	total   int64 // tokens forwarded, every choice
	pending []meterPart
}

// choiceText is one choice's forwarded output: its count and its tail.
type choiceText struct {
	tokens    int64
	tail      string
	tailCount int64
}

// meterPart is one choice's part of the current event.
type meterPart struct {
	choice   int
	text     string // the choice's tail followed by its text in this event
	tokens   int64  // the choice's count with this event
	finished bool
}

// tailMax bounds the tail kept per choice (bytes).
const tailMax = 64

func newOutputMeter(count func(string) int64, choices int) *outputMeter {
	return &outputMeter{count: count, max: max(choices, 1)}
}

// begin starts an event.
func (m *outputMeter) begin() { m.pending = m.pending[:0] }

// add accounts a choice's text in the current event and returns the
// choice's count with it; ok is false for a choice index beyond the
// request's.
func (m *outputMeter) add(choice int, text string, finished bool) (tokens int64, ok bool) {
	if choice < 0 || choice >= m.max {
		return 0, false
	}
	for len(m.choices) <= choice {
		m.choices = append(m.choices, choiceText{})
	}
	c := &m.choices[choice]
	base, tail := c.tokens-c.tailCount, c.tail
	for i := range m.pending {
		if p := &m.pending[i]; p.choice == choice {
			// The same choice twice in one event: continue from the first part.
			p.text += text
			p.tokens = base + m.count(p.text)
			p.finished = p.finished || finished
			return p.tokens, true
		}
	}
	if text == "" {
		m.pending = append(m.pending, meterPart{choice: choice, text: tail, tokens: c.tokens, finished: finished})
		return c.tokens, true
	}
	joined := tail + text
	n := base + m.count(joined)
	m.pending = append(m.pending, meterPart{choice: choice, text: joined, tokens: n, finished: finished})
	return n, true
}

// commit records that the current event reached the client.
func (m *outputMeter) commit() {
	for _, p := range m.pending {
		c := &m.choices[p.choice]
		m.total += p.tokens - c.tokens
		c.tokens = p.tokens
		if p.text != c.tail {
			c.tail = tailOf(p.text)
			c.tailCount = m.count(c.tail)
		}
	}
	m.pending = m.pending[:0]
}

// tailOf is the part of s from its last stable piece boundary within the
// last tailMax bytes: a space between two non-space characters (or all of
// s when it is short; else a character boundary).
func tailOf(s string) string {
	if len(s) <= tailMax {
		return s
	}
	for i := len(s) - 2; i >= len(s)-tailMax && i > 0; i-- {
		if s[i] == ' ' && !isSpace(s[i-1]) && !isSpace(s[i+1]) {
			return s[i:]
		}
	}
	i := len(s) - tailMax
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return s[i:]
}

func isSpace(b byte) bool { return b == ' ' || b == '\t' || b == '\n' || b == '\r' }

// observe feeds the event the tracker observed last to the meter and, with
// a bound, to it: drop reports that the event must not be forwarded.
func (m *outputMeter) observe(t *llmapi.StreamTracker, b *streamBound) (drop bool) {
	m.begin()
	t.EventOutput(func(choice int, text string, finished bool) {
		n, ok := m.add(choice, text, finished)
		if ok && b != nil && b.take(choice, n, finished) {
			drop = true
		}
	})
	return drop
}
