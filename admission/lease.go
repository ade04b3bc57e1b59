package admission

import (
	"context"
	"time"

	"sluice/internal/clock"
)

// leaseState is a leased target's lease (Options.Ledger set). Its fields
// are guarded by the target's mutex, except the channels, which the
// renewal goroutine owns (kick: a buffered wake-up; stop: closed to end it;
// done: closed when it has ended and released the lease).
type leaseState struct {
	limit    Amount // what fits admits up to
	granted  Amount
	ent      Amount
	replicas int
	valid    bool
	closed   bool   // the scheduler closed: admit nothing new
	gen      uint64 // bumped by every grant and stop: tells the current expiry timer from stale ones
	expiry   clock.Timer

	renewals, errors uint64

	kick chan struct{}
	stop chan struct{}
	done chan struct{}
}

// allows reports whether a request of tokens fits this replica's lease.
func (ls *leaseState) allows(t *target, tokens int64) bool {
	if t.capy.MaxConcurrent > 0 && int64(t.inFlight) >= ls.limit.Requests {
		return false
	}
	return t.capy.MaxTokensInFlight == 0 || t.tokens+tokens <= ls.limit.Tokens
}

// poke wakes the renewal goroutine (it renews no sooner than QueuedRenew
// after its last renewal).
func (ls *leaseState) poke() {
	select {
	case ls.kick <- struct{}{}:
	default:
	}
}

// startLease begins leasing t's capacity: a renewal goroutine that first
// waits for the one of an earlier lease of t (prev) to have released it.
// Called with t.mu held.
func (t *target) startLease(prev *leaseState) {
	ls := &leaseState{kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	t.lease = ls
	var prevDone chan struct{}
	if prev != nil {
		prevDone = prev.done
	}
	go t.renewLoop(ls, prevDone)
}

// stopLease ends t's lease: the renewal goroutine releases it and exits.
// Admission no longer checks it. Called with t.mu held; returns the state,
// whose done channel closes once released.
func (t *target) stopLease() *leaseState {
	ls := t.lease
	if ls == nil {
		return nil
	}
	t.lease = nil
	ls.cancelExpiry()
	close(ls.stop)
	return ls
}

// cancelExpiry stops ls's expiry timer and makes any already firing a no-op.
func (ls *leaseState) cancelExpiry() {
	ls.gen++
	if ls.expiry != nil {
		ls.expiry.Stop()
		ls.expiry = nil
	}
}

// leaseRequest is the renewal to send now. Called with t.mu held.
func (t *target) leaseRequest() LeaseRequest {
	var qTokens int64
	for _, f := range t.backlog {
		qTokens += f.qTokens
	}
	held := Amount{Requests: int64(t.inFlight), Tokens: t.tokens}
	return LeaseRequest{Target: t.name, Capacity: t.capy, Held: held, TTL: t.s.lopts.TTL,
		Demand: Amount{Requests: held.Requests + int64(t.queued), Tokens: held.Tokens + qTokens}}
}

// renewLoop renews ls until it is stopped, then releases it.
func (t *target) renewLoop(ls *leaseState, prev <-chan struct{}) {
	defer close(ls.done)
	if prev != nil {
		<-prev
	}
	s := t.s
	o := s.lopts
	wake := make(chan struct{}, 1)
	arm := func(d time.Duration) clock.Timer {
		select { // a token left by a timer stopped too late
		case <-wake:
		default:
		}
		return s.clock.AfterFunc(d, func() {
			select {
			case wake <- struct{}{}:
			default:
			}
		})
	}
	for {
		t.mu.Lock()
		req := t.leaseRequest()
		t.mu.Unlock()
		sent := s.clock.Now()
		ctx, cancel := context.WithTimeout(context.Background(), o.TTL/2)
		l, err := s.ledger.Renew(ctx, req)
		cancel()
		t.mu.Lock()
		timer := arm(t.applyLease(ls, l, err, sent)) // armed before Snapshot shows the renewal
		t.mu.Unlock()
	wait:
		for kick := ls.kick; ; {
			select {
			case <-ls.stop:
				timer.Stop()
				t.releaseLease()
				return
			case <-wake:
				break wait
			case <-kick:
				// Renew now, but no sooner than QueuedRenew after the last.
				timer.Stop()
				timer = arm(sent.Add(o.QueuedRenew).Sub(s.clock.Now()))
				kick = nil
			}
		}
	}
}

func (t *target) releaseLease() {
	ctx, cancel := context.WithTimeout(context.Background(), t.s.lopts.TTL/2)
	defer cancel()
	_ = t.s.ledger.Release(ctx, t.name) // on failure it expires within its TTL
}

// applyLease takes a renewal's outcome (sent at sent) and returns the delay
// to the next renewal. Called with t.mu held.
func (t *target) applyLease(ls *leaseState, l Lease, err error, sent time.Time) time.Duration {
	o := t.s.lopts
	ls.renewals++
	now := t.s.clock.Now()
	if t.lease != ls || ls.closed {
		return o.Renew // stopped meanwhile: the loop sees stop next
	}
	if err != nil {
		ls.errors++
		if !ls.valid {
			ls.limit = t.leaseFallback(ls)
			t.dispatch(now)
		}
		// A valid lease stands until its expiry timer fires.
		if t.queued > 0 {
			return o.QueuedRenew
		}
		return o.Renew
	}
	ls.cancelExpiry()
	ls.granted, ls.ent, ls.replicas, ls.valid = l.Granted, l.Entitlement, l.Replicas, true
	ls.limit = l.Granted
	gen := ls.gen
	// The ledger counts the TTL from when it ran, after sent: expiring here
	// TTL after sent is never later than there.
	ls.expiry = t.s.clock.AfterFunc(sent.Add(o.TTL).Sub(now), func() { t.expireLease(ls, gen) })
	t.dispatch(now)
	if t.leaseWanting(ls) {
		return o.QueuedRenew
	}
	return o.Renew
}

// leaseWanting reports whether capacity should change hands soon: this
// replica has queued work its grant does not cover, or it holds more than
// its entitlement (it gives the excess back as its requests end).
func (t *target) leaseWanting(ls *leaseState) bool {
	req := t.leaseRequest()
	over := func(a, b Amount) bool {
		return t.capy.MaxConcurrent > 0 && a.Requests > b.Requests || t.capy.MaxTokensInFlight > 0 && a.Tokens > b.Tokens
	}
	return t.queued > 0 && over(req.Demand, ls.granted) || over(req.Held, ls.ent)
}

// expireLease applies the failure mode once the lease of grant gen expired
// without a renewal.
func (t *target) expireLease(ls *leaseState, gen uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.lease != ls || ls.gen != gen || ls.closed {
		return
	}
	ls.valid = false
	ls.expiry = nil
	ls.limit = t.leaseFallback(ls)
	t.dispatch(t.s.clock.Now())
}

// leaseFallback is what a replica admits up to without a valid lease:
// nothing in failure mode closed; in mode open, each bound over the
// replicas last seen live (a static division that keeps the sum within the
// capacity while no replica joins; with none seen, this replica alone).
func (t *target) leaseFallback(ls *leaseState) Amount {
	if t.s.lopts.FailClosed {
		return Amount{}
	}
	n := int64(max(ls.replicas, 1))
	return Amount{Requests: int64(t.capy.MaxConcurrent) / n, Tokens: t.capy.MaxTokensInFlight / n}
}

func (ls *leaseState) stats() *LeaseStats {
	return &LeaseStats{Limit: ls.limit, Granted: ls.granted, Entitlement: ls.ent, Replicas: ls.replicas,
		Valid: ls.valid, Renewals: ls.renewals, RenewErrors: ls.errors}
}

// Close ends the capacity leases: each is released to the ledger (within
// half its TTL; on failure it expires), and leased targets admit nothing new
// afterwards. Without a ledger it does nothing. Call it once the gateway no
// longer serves; it returns when every lease is released.
func (s *Scheduler) Close() error {
	s.mu.Lock()
	var stopped []*leaseState
	for _, t := range *s.targets.Load() {
		t.mu.Lock()
		if ls := t.lease; ls != nil && !ls.closed {
			ls.cancelExpiry()
			ls.closed, ls.valid, ls.limit = true, false, Amount{}
			close(ls.stop)
			stopped = append(stopped, ls)
		}
		t.mu.Unlock()
	}
	s.closed = true
	s.mu.Unlock()
	for _, ls := range stopped {
		<-ls.done
	}
	return nil
}
