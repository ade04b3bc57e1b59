package admission

import (
	"context"
	"time"
)

// wait is Admit's slow path; it is entered with t.mu held and releases it.
func (t *target) wait(ctx context.Context, tk Ticket, f *flow, in, bound, tokens int64, now time.Time) (Grant, error) {
	s, cls := t.s, f.cls
	ev := Event{Target: t.name, App: tk.App, Class: cls.name}
	if err := ctx.Err(); err != nil {
		t.mu.Unlock()
		return Grant{}, err
	}
	w := &waiter{flow: f, in: in, bound: bound, tokens: tokens, work: t.set.wIn*float64(in) + t.set.wOut*float64(bound),
		enqueued: now, deadline: cls.cfg.deadline(tk.Deadline), ready: make(chan result, 1)}
	counter := f.counter
	if len(f.queue) == 0 {
		counter = t.liftTo(f)
	}
	est := t.estimate(f, counter, tokens, now)
	refusal := func(reason Reason) (Grant, error) {
		t.mu.Unlock()
		return Grant{}, s.refuse(&Refusal{Reason: reason, Target: t.name, App: tk.App, Class: cls.name,
			ExpectedWait: est.wait, Known: est.known, Deadline: w.deadline})
	}
	if mq := cls.cfg.MaxQueuedWork; mq > 0 && f.qWork > 0 && f.qWork+w.work > mq {
		return refusal(ReasonQueueFull)
	}
	if w.deadline > 0 && est.known && est.wait > w.deadline {
		return refusal(ReasonDeadlineUnmeetable)
	}
	f.counter = counter
	t.seq++
	w.seq = t.seq
	t.enqueue(w)
	t.dispatch(now)
	if w.state == waitGranted {
		t.mu.Unlock()
		return (<-w.ready).grant, nil
	}
	if w.deadline > 0 {
		w.timer = s.clock.AfterFunc(w.deadline, func() { t.expire(w) })
	}
	if t.lease != nil {
		t.lease.poke() // record the demand soon, not at the next period
	}
	t.mu.Unlock()
	ev.Kind, ev.ExpectedWait, ev.Known, ev.Position = EventQueued, est.wait, est.known, est.position
	s.observe(ev)

	select {
	case res := <-w.ready:
		return t.woken(ev, res)
	case <-ctx.Done():
	}
	t.mu.Lock()
	if w.state == waitQueued {
		w.state = waitLeft
		if w.timer != nil {
			w.timer.Stop()
		}
		t.unqueue(w)
		now := s.clock.Now()
		t.dispatch(now) // w may have been the head that did not fit
		t.mu.Unlock()
		ev.Kind, ev.Waited = EventCancelled, now.Sub(w.enqueued)
		s.observe(ev)
		return Grant{}, ctx.Err()
	}
	t.mu.Unlock()
	res := <-w.ready // granted or expired meanwhile
	if res.err != nil {
		return t.woken(ev, res)
	}
	// Started as the client left: nothing went upstream, give it all back.
	res.grant.Done(0, 0)
	ev.Kind, ev.Waited = EventCancelled, res.grant.waited
	s.observe(ev)
	return Grant{}, ctx.Err()
}

func (t *target) woken(ev Event, res result) (Grant, error) {
	if res.err != nil {
		r := res.err.(*Refusal)
		ev.Kind, ev.Waited, ev.Reason, ev.ExpectedWait, ev.Known = EventExpired, r.Waited, r.Reason, r.ExpectedWait, r.Known
		t.s.observe(ev)
		return Grant{}, res.err
	}
	ev.Kind, ev.Waited = EventAdmitted, res.grant.waited
	t.s.observe(ev)
	return res.grant, nil
}

// expire takes w out of the queue when its deadline passes.
func (t *target) expire(w *waiter) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if w.state != waitQueued {
		return
	}
	w.state = waitLeft
	now := t.s.clock.Now()
	t.unqueue(w)
	f := w.flow
	counter := f.counter
	if len(f.queue) == 0 {
		counter = t.liftTo(f)
	}
	est := t.estimate(f, counter, w.tokens, now)
	t.dispatch(now)
	w.ready <- result{err: &Refusal{Reason: ReasonDeadlineExceeded, Target: t.name, App: f.key.app, Class: f.cls.name,
		Waited: now.Sub(w.enqueued), Deadline: w.deadline, ExpectedWait: est.wait, Known: est.known}}
}
