package admission

import (
	"sort"
	"time"
)

// EventKind classifies queue events.
type EventKind uint8

const (
	// EventQueued: a request started waiting (ExpectedWait, Known, Position).
	EventQueued EventKind = iota + 1
	// EventAdmitted: a waiting request started (Waited).
	EventAdmitted
	// EventExpired: a waiting request's deadline passed (Waited, Reason).
	EventExpired
	// EventCancelled: a waiting request's context ended (Waited).
	EventCancelled
	// EventRefused: a request was refused without waiting (Reason,
	// ExpectedWait, Known).
	EventRefused
)

func (k EventKind) String() string {
	switch k {
	case EventQueued:
		return "queued"
	case EventAdmitted:
		return "admitted"
	case EventExpired:
		return "expired"
	case EventCancelled:
		return "cancelled"
	case EventRefused:
		return "refused"
	}
	return "unknown"
}

// Event is one queue event. Requests admitted on the fast path (nothing
// waiting, capacity free) produce none; Snapshot counts them.
type Event struct {
	Kind               EventKind
	Target, App, Class string
	// Waited is the time spent in the queue.
	Waited time.Duration
	// ExpectedWait is the estimated wait at the event; valid when Known.
	ExpectedWait time.Duration
	Known        bool
	// Position is the estimated number of requests that start before this one.
	Position int
	Reason   Reason
}

// Observer receives events (metrics, logs). Observe is called on the
// request's goroutine, never with a scheduler lock held; it must be cheap and
// safe for concurrent use.
type Observer interface {
	Observe(Event)
}

// Snapshot is the scheduler's state at one instant, per target, by name.
type Snapshot struct {
	Targets []TargetStats
}

// TargetStats is one target's state.
type TargetStats struct {
	Name     string
	Capacity Capacity
	// Limited is false once the target left the configuration.
	Limited        bool
	InFlight       int
	TokensInFlight int64
	Queued         int
	// Lease is this replica's capacity lease (nil: not leased).
	Lease   *LeaseStats
	Classes []ClassStats // by name
	Flows   []FlowStats  // by application, then class
}

// ClassStats is one class's state on a target.
type ClassStats struct {
	Name           string
	InFlight       int
	TokensInFlight int64
	Queued         int
	QueuedWork     float64
	// OldestWait is the age of the class's oldest waiting request (0 with none).
	OldestWait time.Duration
	// Admitted counts requests started, on the fast path or after waiting.
	Admitted uint64
	// ReservedSlots and ReservedTokens are the class's reserved share of
	// the capacity (0 in an unbounded dimension).
	ReservedSlots  float64
	ReservedTokens float64
	// StrandedSlots and StrandedTokens are the part of the reservation the
	// class leaves unused while it has no work queued: capacity promised to
	// it that it is not using (lent to other classes, or idle).
	StrandedSlots  float64
	StrandedTokens float64
}

// FlowStats is one application's state in one class on a target.
type FlowStats struct {
	App, Class string
	Weight     float64
	// Counter is the fair order's key: service received over weight.
	Counter float64
	// Service is the work charged in total (input and output, weighted).
	Service    float64
	Queued     int
	QueuedWork float64
	Running    int
}

// Snapshot returns the state of every target.
func (s *Scheduler) Snapshot() Snapshot {
	m := *s.targets.Load()
	var snap Snapshot
	for _, t := range m {
		snap.Targets = append(snap.Targets, t.stats())
	}
	sort.Slice(snap.Targets, func(i, j int) bool { return snap.Targets[i].Name < snap.Targets[j].Name })
	return snap
}

func (t *target) stats() TargetStats {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.s.clock.Now()
	oldest := map[*classState]time.Time{}
	for _, f := range t.backlog {
		if o, ok := oldest[f.cls]; !ok || f.queue[0].enqueued.Before(o) {
			oldest[f.cls] = f.queue[0].enqueued
		}
	}
	ts := TargetStats{Name: t.name, Capacity: t.capy, Limited: t.limited, InFlight: t.inFlight,
		TokensInFlight: t.tokens, Queued: t.queued}
	if t.lease != nil {
		ts.Lease = t.lease.stats()
	}
	for _, cs := range t.clsList {
		st := ClassStats{Name: cs.name, InFlight: cs.inFlight, TokensInFlight: cs.tokens, Queued: cs.queued,
			QueuedWork: cs.qWork, Admitted: cs.admitted}
		if o, ok := oldest[cs]; ok {
			st.OldestWait = now.Sub(o)
		}
		share := cs.cfg.ReservedShare
		if t.limited {
			st.ReservedSlots = share * float64(t.capy.MaxConcurrent)
			st.ReservedTokens = share * float64(t.capy.MaxTokensInFlight)
		}
		if cs.queued == 0 {
			st.StrandedSlots = max(0, st.ReservedSlots-float64(cs.inFlight))
			st.StrandedTokens = max(0, st.ReservedTokens-float64(cs.tokens))
		}
		ts.Classes = append(ts.Classes, st)
	}
	for _, f := range t.flows {
		ts.Flows = append(ts.Flows, FlowStats{App: f.key.app, Class: f.key.class, Weight: f.weight, Counter: f.counter,
			Service: f.service, Queued: len(f.queue), QueuedWork: f.qWork, Running: f.running})
	}
	sort.Slice(ts.Flows, func(i, j int) bool {
		a, b := ts.Flows[i], ts.Flows[j]
		if a.App != b.App {
			return a.App < b.App
		}
		return a.Class < b.Class
	})
	return ts
}
