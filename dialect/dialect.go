// Package dialect is the API dialect a client speaks (OpenAI or Anthropic) and
// the rate-limit state the gateway reports to it, rendered as that dialect's
// response headers. Limit policies record typed counters (Limits); only the
// gateway turns them into header names, once, when it writes a response.
package dialect

import (
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

// anthropicPrefix maps a Kind to its anthropic-ratelimit-<x>- header prefix.
var anthropicPrefix = [numKinds]string{
	Requests - 1:     "Anthropic-Ratelimit-Requests-",
	Tokens - 1:       "Anthropic-Ratelimit-Tokens-",
	InputTokens - 1:  "Anthropic-Ratelimit-Input-Tokens-",
	OutputTokens - 1: "Anthropic-Ratelimit-Output-Tokens-",
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
	if c, ok := l.Get(Cost); ok {
		h[hCostLimit] = []string{Dollars(c.Limit)}
		h[hCostRemaining] = []string{Dollars(max(c.Remaining, 0))}
	}
	if d == Anthropic {
		for k := Requests; k < Cost; k++ {
			c, ok := l.Get(k)
			if !ok {
				continue
			}
			p := anthropicPrefix[k-1]
			h[p+"Limit"] = []string{strconv.FormatInt(c.Limit, 10)}
			h[p+"Remaining"] = []string{strconv.FormatInt(max(c.Remaining, 0), 10)}
			h[p+"Reset"] = []string{ceilSecond(c.ResetAt()).UTC().Format(time.RFC3339)}
		}
		return
	}
	if c, ok := l.Get(Requests); ok {
		writeOpenAI(h, hLimitRequests, hRemainingRequests, hResetRequests, c)
	}
	var tight Counter
	found := false
	for _, k := range [...]Kind{Tokens, InputTokens, OutputTokens} {
		if c, ok := l.Get(k); ok && (!found || max(c.Remaining, 0) < max(tight.Remaining, 0)) {
			tight, found = c, true
		}
	}
	if found {
		writeOpenAI(h, hLimitTokens, hRemainingTokens, hResetTokens, tight)
	}
}

func writeOpenAI(h http.Header, limit, remaining, reset string, c Counter) {
	h[limit] = []string{strconv.FormatInt(c.Limit, 10)}
	h[remaining] = []string{strconv.FormatInt(max(c.Remaining, 0), 10)}
	h[reset] = []string{ResetString(c.Reset)}
}

// Dollars writes micro-USD as a decimal number of dollars ("0.5", "0.000001").
func Dollars(micros int64) string {
	return strconv.FormatFloat(float64(micros)/1e6, 'f', -1, 64)
}

// ResetString formats a reset delay the way OpenAI does: Go duration syntax,
// milliseconds below one second ("250ms"), whole seconds above ("6m0s", "1s"),
// always rounded up.
func ResetString(d time.Duration) string {
	if d <= 0 {
		return "0s"
	}
	if d < time.Second {
		return ((d + time.Millisecond - 1) / time.Millisecond * time.Millisecond).String()
	}
	return ((d + time.Second - 1) / time.Second * time.Second).String()
}

// ceilSecond rounds t up to a whole second.
func ceilSecond(t time.Time) time.Time {
	if tr := t.Truncate(time.Second); !tr.Equal(t) {
		return tr.Add(time.Second)
	}
	return t
}
