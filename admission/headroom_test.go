package admission

import (
	"testing"
)

func TestTieGoesToTheFlowHoldingLess(t *testing.T) {
	// a fills both slots and queues a third request; b joins, lifted to
	// a's counter. At the tie the flow with fewer requests running (b)
	// starts first, not the older request (a's).
	h := newHarness(t, Config{Targets: map[string]Capacity{up: {MaxConcurrent: 2}}})
	a1 := h.admit(tk("a", 100))
	h.admit(tk("a", 100))
	a3 := h.queue(tk("a", 100))
	b := h.queue(tk("b", 100))
	if fa, fb := h.flowStats(up, "a", ""), h.flowStats(up, "b", ""); fa.Counter != fb.Counter {
		t.Fatalf("counters a %v, b %v; want a tie", fa.Counter, fb.Counter)
	}
	a1.Done(100, 0)
	if _, err := b.result(t); err != nil {
		t.Fatalf("b: %v", err)
	}
	if a3.finished() {
		t.Fatal("a's queued request started before b's at a tie")
	}
}

func TestBurstHeadroom(t *testing.T) {
	// Four slots, half kept as headroom: a flow holding at least its fair
	// share (its weight over the active flows' weights) may not start into
	// the last two free slots; a flow holding less may.
	cfg := Config{Targets: map[string]Capacity{up: {MaxConcurrent: 4}},
		Classes: map[string]Class{DefaultClass: {BurstHeadroom: 0.5}}}
	h := newHarness(t, cfg)

	// Alone, a's fair share is the whole target: it fills it.
	var as []Grant
	for i := 0; i < 4; i++ {
		as = append(as, h.admit(tk("a", 10)))
	}
	// b waits for a slot and gets the first one freed (under its share of 1/2).
	b := h.queue(tk("b", 10))
	as[0].Done(10, 0)
	gb, err := b.result(t)
	if err != nil {
		t.Fatalf("b: %v", err)
	}
	// a holds 3 of 4, over its share of 1/2: its next request waits, and
	// still waits with a slot free (it would leave less than 2 free).
	a5 := h.queue(tk("a", 10))
	as[1].Done(10, 0)
	if a5.finished() {
		t.Fatal("a started into the headroom while holding its fair share")
	}
	if ts := h.target(up); ts.InFlight != 3 || ts.Queued != 1 {
		t.Fatalf("in flight %d, queued %d; want 3 and 1 (a slot kept free)", ts.InFlight, ts.Queued)
	}
	// c, holding nothing, starts into the headroom at once although a's
	// request is first in fair order.
	gc := h.admit(tk("c", 10))
	// b ends: a holds 2 of 4, still not below its share (1/2 of a, c):
	// it may start only if two slots stay free, and only one is.
	gb.Done(10, 0)
	if a5.finished() {
		t.Fatal("a started with one slot free while holding its fair share")
	}
	// One of a's ends: a holds 1 of 4, below its share: it starts.
	as[2].Done(10, 0)
	if _, err := a5.result(t); err != nil {
		t.Fatalf("a: %v", err)
	}
	gc.Done(10, 0)
}

func TestBurstHeadroomTokens(t *testing.T) {
	// The headroom applies to tokens in flight too: with 1000 tokens and a
	// headroom of 0.3, a flow at its share may bring tokens in flight to
	// 700 at most.
	cfg := Config{Targets: map[string]Capacity{up: {MaxTokensInFlight: 1000}},
		Classes: map[string]Class{DefaultClass: {BurstHeadroom: 0.3}}}
	h := newHarness(t, cfg)
	a1 := h.admit(tk("a", 600)) // alone: under its share of the whole
	b1 := h.admit(tk("b", 100)) // a holds 0.6, b nothing: share 1/2 each
	a2 := h.queue(tk("a", 100)) // a over its share: 800 > 700
	b2 := h.admit(tk("b", 200)) // b holds 0.1, under its share: 900 of 1000
	if a2.finished() {
		t.Fatal("a started into the token headroom while over its share")
	}
	b2.Done(200, 0)
	b1.Done(100, 0) // 600 in flight: a's 100 brings it to 700, the limit
	if _, err := a2.result(t); err != nil {
		t.Fatalf("a: %v", err)
	}
	a1.Done(600, 0)
}
