// Package admissionprom exports the fair-admission scheduler to Prometheus:
// an admission.Observer that records queue events in histograms and
// counters, and a collector that reads the scheduler's state (capacity in
// use, queues, reserved and stranded capacity) at scrape time. The scheduler
// lives as long as the process, so the caller registers these once.
//
// Labels are target and class only: per-application figures would multiply
// the series by the number of applications; they are in Scheduler.Snapshot.
package admissionprom

import (
	"github.com/prometheus/client_golang/prometheus"

	"sluice/admission"
)

// Events is an admission.Observer recording queue events.
type Events struct {
	wait     *prometheus.HistogramVec
	expected *prometheus.HistogramVec
	position *prometheus.HistogramVec
	refused  *prometheus.CounterVec
}

var waitBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120}

// NewEvents returns the event collectors, unregistered.
func NewEvents() *Events {
	return &Events{
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_admission_queue_wait_seconds",
			Help:    "Time requests spent waiting for capacity, by how the wait ended (admitted, expired, cancelled). Requests admitted without waiting are not observed.",
			Buckets: waitBuckets,
		}, []string{"target", "class", "outcome"}),
		expected: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_admission_expected_wait_seconds",
			Help:    "Expected wait for capacity estimated when a request joined a queue.",
			Buckets: waitBuckets,
		}, []string{"target", "class"}),
		position: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_admission_queue_position",
			Help:    "Estimated number of requests starting before a request when it joined a queue.",
			Buckets: []float64{0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000},
		}, []string{"target", "class"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_admission_refusals_total",
			Help: "Requests refused by fair admission, by reason (queue_full, deadline_unmeetable, deadline_exceeded, too_large, unknown_class).",
		}, []string{"target", "class", "reason"}),
	}
}

// Observe implements admission.Observer.
func (e *Events) Observe(ev admission.Event) {
	switch ev.Kind {
	case admission.EventQueued:
		if ev.Known {
			e.expected.WithLabelValues(ev.Target, ev.Class).Observe(ev.ExpectedWait.Seconds())
		}
		e.position.WithLabelValues(ev.Target, ev.Class).Observe(float64(ev.Position))
	case admission.EventAdmitted, admission.EventCancelled:
		e.wait.WithLabelValues(ev.Target, ev.Class, ev.Kind.String()).Observe(ev.Waited.Seconds())
	case admission.EventExpired:
		e.wait.WithLabelValues(ev.Target, ev.Class, ev.Kind.String()).Observe(ev.Waited.Seconds())
		e.refused.WithLabelValues(ev.Target, ev.Class, ev.Reason.String()).Inc()
	case admission.EventRefused:
		e.refused.WithLabelValues(ev.Target, ev.Class, ev.Reason.String()).Inc()
	}
}

// Describe implements prometheus.Collector.
func (e *Events) Describe(ch chan<- *prometheus.Desc) {
	e.wait.Describe(ch)
	e.expected.Describe(ch)
	e.position.Describe(ch)
	e.refused.Describe(ch)
}

// Collect implements prometheus.Collector.
func (e *Events) Collect(ch chan<- prometheus.Metric) {
	e.wait.Collect(ch)
	e.expected.Collect(ch)
	e.position.Collect(ch)
	e.refused.Collect(ch)
}

// State is a collector of a scheduler's state, read at scrape time.
type State struct {
	s *admission.Scheduler
}

// NewState returns the state collector of s, unregistered.
func NewState(s *admission.Scheduler) *State { return &State{s: s} }

var (
	tc           = []string{"target", "class"}
	descCapSlots = prometheus.NewDesc("sluice_admission_capacity_requests",
		"Requests a target may run at once (0: no bound).", []string{"target"}, nil)
	descCapTokens = prometheus.NewDesc("sluice_admission_capacity_tokens",
		"Tokens (reserved prompt plus output bound) a target may have in flight (0: no bound).", []string{"target"}, nil)
	descInFlight = prometheus.NewDesc("sluice_admission_in_flight_requests",
		"Admitted requests running.", tc, nil)
	descTokens = prometheus.NewDesc("sluice_admission_in_flight_tokens",
		"Tokens held by admitted requests running.", tc, nil)
	descQueued = prometheus.NewDesc("sluice_admission_queued_requests",
		"Requests waiting for capacity.", tc, nil)
	descQueuedWork = prometheus.NewDesc("sluice_admission_queued_work",
		"Work waiting for capacity, in work units (input tokens plus weighted output bound).", tc, nil)
	descOldest = prometheus.NewDesc("sluice_admission_oldest_wait_seconds",
		"Age of the oldest waiting request (0 with none).", tc, nil)
	descAdmitted = prometheus.NewDesc("sluice_admission_admitted_total",
		"Requests admitted, with or without waiting.", tc, nil)
	descReservedSlots = prometheus.NewDesc("sluice_admission_reserved_requests",
		"Requests' worth of capacity reserved for the class (its reserved share).", tc, nil)
	descReservedTokens = prometheus.NewDesc("sluice_admission_reserved_tokens",
		"Tokens of capacity reserved for the class (its reserved share).", tc, nil)
	descStrandedSlots = prometheus.NewDesc("sluice_admission_stranded_requests",
		"Reserved capacity, in requests, the class leaves unused while it has no work waiting (lent out or idle).", tc, nil)
	descStrandedTokens = prometheus.NewDesc("sluice_admission_stranded_tokens",
		"Reserved capacity, in tokens, the class leaves unused while it has no work waiting (lent out or idle).", tc, nil)
	// Capacity leases (several replicas sharing a target through Redis).
	tgt             = []string{"target"}
	descLeaseSlots  = prometheus.NewDesc("sluice_admission_lease_requests", "Requests this replica may hold on the target now: its capacity lease, or the failure mode's fallback once it expired.", tgt, nil)
	descLeaseTokens = prometheus.NewDesc("sluice_admission_lease_tokens", "Tokens this replica may hold on the target now: its capacity lease, or the failure mode's fallback once it expired.", tgt, nil)
	descEntSlots    = prometheus.NewDesc("sluice_admission_entitlement_requests", "This replica's fair share of the target's requests (water-filled over the replicas' demands), at the last renewal.", tgt, nil)
	descEntTokens   = prometheus.NewDesc("sluice_admission_entitlement_tokens", "This replica's fair share of the target's tokens, at the last renewal.", tgt, nil)
	descReplicas    = prometheus.NewDesc("sluice_admission_lease_replicas", "Replicas holding a live lease on the target, this one included, at the last renewal.", tgt, nil)
	descLeaseValid  = prometheus.NewDesc("sluice_admission_lease_valid", "1 while this replica's lease is valid; 0 before the first grant and once it expired unrenewed.", tgt, nil)
	descRenewErrors = prometheus.NewDesc("sluice_admission_lease_renew_errors_total", "Lease renewals that failed (Redis unreachable or refusing).", tgt, nil)
	descRenewals    = prometheus.NewDesc("sluice_admission_lease_renewals_total", "Lease renewals sent, failed ones included.", tgt, nil)
)

// Describe implements prometheus.Collector.
func (c *State) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descCapSlots, descCapTokens, descInFlight, descTokens, descQueued, descQueuedWork,
		descOldest, descAdmitted, descReservedSlots, descReservedTokens, descStrandedSlots, descStrandedTokens,
		descLeaseSlots, descLeaseTokens, descEntSlots, descEntTokens, descReplicas, descLeaseValid, descRenewErrors, descRenewals} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *State) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, t := range c.s.Snapshot().Targets {
		if !t.Limited {
			continue
		}
		gauge(descCapSlots, float64(t.Capacity.MaxConcurrent), t.Name)
		gauge(descCapTokens, float64(t.Capacity.MaxTokensInFlight), t.Name)
		if l := t.Lease; l != nil {
			gauge(descLeaseSlots, float64(l.Limit.Requests), t.Name)
			gauge(descLeaseTokens, float64(l.Limit.Tokens), t.Name)
			gauge(descEntSlots, float64(l.Entitlement.Requests), t.Name)
			gauge(descEntTokens, float64(l.Entitlement.Tokens), t.Name)
			gauge(descReplicas, float64(l.Replicas), t.Name)
			valid := 0.0
			if l.Valid {
				valid = 1
			}
			gauge(descLeaseValid, valid, t.Name)
			ch <- prometheus.MustNewConstMetric(descRenewErrors, prometheus.CounterValue, float64(l.RenewErrors), t.Name)
			ch <- prometheus.MustNewConstMetric(descRenewals, prometheus.CounterValue, float64(l.Renewals), t.Name)
		}
		for _, cl := range t.Classes {
			gauge(descInFlight, float64(cl.InFlight), t.Name, cl.Name)
			gauge(descTokens, float64(cl.TokensInFlight), t.Name, cl.Name)
			gauge(descQueued, float64(cl.Queued), t.Name, cl.Name)
			gauge(descQueuedWork, cl.QueuedWork, t.Name, cl.Name)
			gauge(descOldest, cl.OldestWait.Seconds(), t.Name, cl.Name)
			ch <- prometheus.MustNewConstMetric(descAdmitted, prometheus.CounterValue, float64(cl.Admitted), t.Name, cl.Name)
			gauge(descReservedSlots, cl.ReservedSlots, t.Name, cl.Name)
			gauge(descReservedTokens, cl.ReservedTokens, t.Name, cl.Name)
			gauge(descStrandedSlots, cl.StrandedSlots, t.Name, cl.Name)
			gauge(descStrandedTokens, cl.StrandedTokens, t.Name, cl.Name)
		}
	}
}
