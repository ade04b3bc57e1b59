// Package dialect is the API dialect a client speaks (OpenAI or Anthropic) and
// the rate-limit state the gateway reports to it, rendered as that dialect's
// response headers. Limit policies record typed counters (Limits); only the
// gateway turns them into header names, once, when it writes a response.
package dialect

import (
	"math"
	"net/http"
	"strconv"
	"time"
)

// Dialect is the API a client speaks, hence the shape of the error bodies and
// rate-limit headers it understands.
type Dialect uint8

const (
	// OpenAI: the error envelope {"error":{...}} and x-ratelimit-* headers.
	OpenAI Dialect = iota
	// Anthropic: {"type":"error","error":{...}} and anthropic-ratelimit-*.
	Anthropic
)

func (d Dialect) String() string {
	if d == Anthropic {
		return "anthropic"
	}
	return "openai"
}

// Kind is what a counter counts, as far as the headers tell it apart.
type Kind uint8

const (
	// Requests: request counters.
	Requests Kind = iota + 1
	// Tokens: total tokens, or any token count that is neither input nor
	// output only (an advanced-ratelimit quota in tokens).
	Tokens
	// InputTokens: prompt tokens.
	InputTokens
	// OutputTokens: completion tokens.
	OutputTokens
	// Cost: money, in micro-USD.
	Cost
	numKinds = int(Cost)
)

// Counter is one counter's state as a response reports it.
type Counter struct {
	// Limit and Remaining are in the kind's unit (tokens, requests,
	// micro-USD); Remaining is negative when the counter is in debt.
	Limit, Remaining int64
	// Reset is the time from At until the counter is full again (token
	// bucket) or its window ends (fixed and calendar windows).
	Reset time.Duration
	// At is when the state was read (the counter store's clock).
	At time.Time
}

// ResetAt is the instant the counter resets.
func (c Counter) ResetAt() time.Time { return c.At.Add(max(c.Reset, 0)) }

// Limits holds at most one counter per Kind. The zero value is empty and ready
// to use. Not safe for concurrent use: it belongs to one request.
type Limits struct {
	set uint8
	c   [numKinds]Counter
}

func (l *Limits) has(k Kind) bool { return k >= 1 && int(k) <= numKinds && l.set&(1<<(k-1)) != 0 }

// Get returns the counter recorded for k.
func (l *Limits) Get(k Kind) (Counter, bool) {
	if !l.has(k) {
		return Counter{}, false
	}
	return l.c[k-1], true
}

// Set records c for k, replacing what was there.
func (l *Limits) Set(k Kind, c Counter) {
	if k < 1 || int(k) > numKinds {
		return
	}
	l.c[k-1] = c
	l.set |= 1 << (k - 1)
}

// Offer records c for k unless the counter already recorded is at least as
// tight (remaining, counted from 0 for a counter in debt, lower or equal): of
// several limits on one request the client hears about the tightest, and of
// equally tight ones the first.
func (l *Limits) Offer(k Kind, c Counter) {
	if old, ok := l.Get(k); ok && max(old.Remaining, 0) <= max(c.Remaining, 0) {
		return
	}
	l.Set(k, c)
}

// Clear forgets the counter of k.
func (l *Limits) Clear(k Kind) {
	if k >= 1 && int(k) <= numKinds {
		l.set &^= 1 << (k - 1)
	}
}

// Empty reports whether no counter is recorded.
func (l *Limits) Empty() bool { return l.set == 0 }

// Header names, pre-canonicalised.
const (
	hLimitTokens       = "X-Ratelimit-Limit-Tokens"
	hRemainingTokens   = "X-Ratelimit-Remaining-Tokens"
	hResetTokens       = "X-Ratelimit-Reset-Tokens"
	hLimitRequests     = "X-Ratelimit-Limit-Requests"
	hRemainingRequests = "X-Ratelimit-Remaining-Requests"
	hResetRequests     = "X-Ratelimit-Reset-Requests"
	// The budget headers are Sluice's own and the same in both dialects.
	hCostLimit     = "X-Ratelimit-Cost-Limit-Dollars"
	hCostRemaining = "X-Ratelimit-Cost-Remaining-Dollars"
)

// anthropicNames maps a Kind to its anthropic-ratelimit-<x>-{limit,
// remaining,reset} header names.
var anthropicNames = [numKinds][3]string{
	Requests - 1:     {"Anthropic-Ratelimit-Requests-Limit", "Anthropic-Ratelimit-Requests-Remaining", "Anthropic-Ratelimit-Requests-Reset"},
	Tokens - 1:       {"Anthropic-Ratelimit-Tokens-Limit", "Anthropic-Ratelimit-Tokens-Remaining", "Anthropic-Ratelimit-Tokens-Reset"},
	InputTokens - 1:  {"Anthropic-Ratelimit-Input-Tokens-Limit", "Anthropic-Ratelimit-Input-Tokens-Remaining", "Anthropic-Ratelimit-Input-Tokens-Reset"},
	OutputTokens - 1: {"Anthropic-Ratelimit-Output-Tokens-Limit", "Anthropic-Ratelimit-Output-Tokens-Remaining", "Anthropic-Ratelimit-Output-Tokens-Reset"},
}

// maxHeaders is the most headers WriteHeader sets: the budget's two and
// three per Anthropic kind.
const maxHeaders = 2 + 3*(numKinds-1)

// headerBatch gathers header values in one buffer, so that writing them
// costs two allocations (the values' text and their slices) however many
// there are.
type headerBatch struct {
	names [maxHeaders]string
	ends  [maxHeaders]int
	n     int
	buf   []byte
}

// end closes the value appended to b.buf since the last end as header name's.
func (b *headerBatch) end(name string) {
	b.names[b.n], b.ends[b.n] = name, len(b.buf)
	b.n++
}

// set sets every gathered header on h, each as a one-value slice of
// capacity one (so an Add reallocates rather than touch its neighbour).
func (b *headerBatch) set(h http.Header) {
	if b.n == 0 {
		return
	}
	text := string(b.buf)
	vals := make([]string, b.n)
	from := 0
	for i := range b.n {
		vals[i] = text[from:b.ends[i]]
		from = b.ends[i]
		h[b.names[i]] = vals[i : i+1 : i+1]
	}
}

// WriteHeader sets l's headers on h in dialect d, replacing headers of the
// same names. Remaining is reported as 0 for a counter in debt.
//
// OpenAI: x-ratelimit-{limit,remaining,reset}-requests, and -tokens for the
// tightest of the token counters (total, input, output); reset is a delay in
// OpenAI's format (ResetString). Anthropic:
// anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-
// {limit,remaining,reset}, reset an RFC 3339 UTC instant rounded up to the
// second. Both: x-ratelimit-cost-{limit,remaining}-dollars for a budget.
func (l *Limits) WriteHeader(h http.Header, d Dialect) {
	if l.Empty() {
		return
	}
	var arr [256]byte
	b := headerBatch{buf: arr[:0]}
	if c, ok := l.Get(Cost); ok {
		b.buf = appendDollars(b.buf, c.Limit)
		b.end(hCostLimit)
		b.buf = appendDollars(b.buf, max(c.Remaining, 0))
		b.end(hCostRemaining)
	}
	if d == Anthropic {
		for k := Requests; k < Cost; k++ {
			c, ok := l.Get(k)
			if !ok {
				continue
			}
			names := &anthropicNames[k-1]
			b.buf = strconv.AppendInt(b.buf, c.Limit, 10)
			b.end(names[0])
			b.buf = strconv.AppendInt(b.buf, max(c.Remaining, 0), 10)
			b.end(names[1])
			b.buf = ceilSecond(c.ResetAt()).UTC().AppendFormat(b.buf, time.RFC3339)
			b.end(names[2])
		}
		b.set(h)
		return
	}
	if c, ok := l.Get(Requests); ok {
		b.openAI(hLimitRequests, hRemainingRequests, hResetRequests, c)
	}
	var tight Counter
	found := false
	for _, k := range [...]Kind{Tokens, InputTokens, OutputTokens} {
		if c, ok := l.Get(k); ok && (!found || max(c.Remaining, 0) < max(tight.Remaining, 0)) {
			tight, found = c, true
		}
	}
	if found {
		b.openAI(hLimitTokens, hRemainingTokens, hResetTokens, tight)
	}
	b.set(h)
}

func (b *headerBatch) openAI(limit, remaining, reset string, c Counter) {
	b.buf = strconv.AppendInt(b.buf, c.Limit, 10)
	b.end(limit)
	b.buf = strconv.AppendInt(b.buf, max(c.Remaining, 0), 10)
	b.end(remaining)
	b.buf = appendReset(b.buf, c.Reset)
	b.end(reset)
}

// Dollars writes micro-USD as a decimal number of dollars ("0.5", "0.000001").
func Dollars(micros int64) string { return string(appendDollars(nil, micros)) }

func appendDollars(b []byte, micros int64) []byte {
	return strconv.AppendFloat(b, float64(micros)/1e6, 'f', -1, 64)
}

// ResetString formats a reset delay the way OpenAI does: Go duration syntax,
// milliseconds below one second ("250ms"), whole seconds above ("6m0s", "1s"),
// always rounded up.
func ResetString(d time.Duration) string { return string(appendReset(nil, d)) }

// appendReset appends ResetString(d): what time.Duration.String writes for
// the rounded delay, whole milliseconds below a second ("250ms") or whole
// seconds ("1h0m5s").
func appendReset(b []byte, d time.Duration) []byte {
	if d <= 0 {
		return append(b, "0s"...)
	}
	if d < time.Second {
		ms := (d + time.Millisecond - 1) / time.Millisecond
		if ms < 1000 {
			return append(strconv.AppendInt(b, int64(ms), 10), "ms"...)
		}
		return append(b, "1s"...)
	}
	if d > math.MaxInt64-time.Second+1 {
		// Rounding up wraps around: what Duration.String makes of that.
		return append(b, ((d + time.Second - 1) / time.Second * time.Second).String()...)
	}
	secs := int64((d + time.Second - 1) / time.Second)
	if h := secs / 3600; h > 0 {
		b = append(strconv.AppendInt(b, h, 10), 'h')
		b = append(strconv.AppendInt(b, secs/60%60, 10), 'm')
	} else if m := secs / 60; m > 0 {
		b = append(strconv.AppendInt(b, m, 10), 'm')
	}
	return append(strconv.AppendInt(b, secs%60, 10), 's')
}

// ceilSecond rounds t up to a whole second.
func ceilSecond(t time.Time) time.Time {
	if tr := t.Truncate(time.Second); !tr.Equal(t) {
		return tr.Add(time.Second)
	}
	return t
}
