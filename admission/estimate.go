package admission

import (
	"math"
	"time"
)

// estimation is a new request's expected wait and position.
type estimation struct {
	wait     time.Duration
	known    bool
	position int
}

// estimate is the expected wait of a request of tokens joining flow f's
// queue when f's counter is counter. The work ahead of it is a fluid model of
// the fair order: every other backlogged flow v starts work until its counter
// reaches the one f will have when the request's turn comes, (counter +
// f's queued work / f's weight), so v contributes min(its queue, that
// difference * its weight). Only flows of f's class count while the class is
// below its reserved share (it is served first). The time is what must free
// before the request fits, over the release rate.
func (t *target) estimate(f *flow, counter float64, tokens int64, now time.Time) estimation {
	reqs, toks := float64(len(f.queue)), float64(f.qTokens)
	horizon := counter + f.qWork/f.weight
	owed := t.belowShare(f.cls)
	for _, v := range t.backlog {
		if v == f || (owed && v.cls != f.cls) || v.qWork <= 0 {
			continue
		}
		allow := (horizon - v.counter) * v.weight
		if allow <= 0 {
			continue
		}
		frac := min(1, allow/v.qWork)
		reqs += frac * float64(len(v.queue))
		toks += frac * float64(v.qTokens)
	}
	est := estimation{position: int(math.Round(reqs))}
	reqRate, tokRate, ok := t.holds.rates(t.inFlight, t.tokens)
	if !ok {
		return est
	}
	wait := 0.0
	slots, room := t.room()
	if t.capy.MaxConcurrent > 0 {
		if need := reqs + 1 - float64(slots-t.inFlight); need > 0 && reqRate > 0 {
			wait = need / reqRate
		}
	}
	if t.capy.MaxTokensInFlight > 0 {
		if need := toks + float64(tokens) - float64(room-t.tokens); need > 0 && tokRate > 0 {
			wait = max(wait, need/tokRate)
		}
	}
	est.known = true
	est.wait = time.Duration(min(wait, float64(math.MaxInt64/2)/1e9) * 1e9)
	return est
}

// holdEstimate measures how long admitted requests hold capacity: time-decayed
// sums over releases of the hold time, and of it weighted by tokens.
type holdEstimate struct {
	tau       float64
	last      time.Time
	n, hold   float64 // count, sum of hold seconds
	tok, tokH float64 // sum of tokens, sum of tokens * hold seconds
}

func (h *holdEstimate) observe(now time.Time, held time.Duration, tokens int64) {
	if !h.last.IsZero() {
		if dt := now.Sub(h.last).Seconds(); dt > 0 {
			k := math.Exp(-dt / h.tau)
			h.n, h.hold, h.tok, h.tokH = h.n*k, h.hold*k, h.tok*k, h.tokH*k
		}
	}
	h.last = now
	sec := held.Seconds()
	h.n++
	h.hold += sec
	h.tok += float64(tokens)
	h.tokH += float64(tokens) * sec
}

// rates are the release rates, requests and tokens per second, of what is in
// flight now (Little's law: in flight over mean hold); ok is false before
// any release was observed.
func (h *holdEstimate) rates(inFlight int, tokens int64) (reqs, toks float64, ok bool) {
	if h.n == 0 {
		return 0, 0, false
	}
	const minHold = 1e-3 // seconds: a release measured at once is not infinitely fast
	reqs = float64(inFlight) / max(h.hold/h.n, minHold)
	if h.tok > 0 {
		toks = float64(tokens) / max(h.tokH/h.tok, minHold)
	} else {
		toks = math.Inf(1)
	}
	return reqs, toks, true
}
