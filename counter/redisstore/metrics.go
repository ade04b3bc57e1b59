package redisstore

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"sluice/internal/promreg"
)

// Operation labels.
const (
	opReserve = "reserve"
	opAdjust  = "adjust"
	opPeek    = "peek"
	// Operations of leases and of the outage copy-back.
	opLease   = "lease"
	opRelease = "release"
	opCharge  = "charge"
)

// Where a reservation was served (the served label).
const (
	servedRedis = "redis"
	servedLease = "lease"
	servedLocal = "local"
)

// metrics are the store's collectors. Several stores may share a registry
// (one per reload, or replicas in a test): registration reuses collectors
// already registered under the same names.
type metrics struct {
	latency *prometheus.HistogramVec
	// byOp holds latency's observers of the three operations, looked up
	// once rather than by label on every call.
	byOp     [3]prometheus.Observer
	errors   *prometheus.CounterVec
	local    *prometheus.CounterVec
	fallback prometheus.Gauge
	dropped  prometheus.Counter
	copied   *prometheus.CounterVec

	// ops counts the operations sent to Redis by op, reservations the
	// Reserve calls by where they were served: their ratio is the Redis
	// operations per reservation. Both maps are read-only once built.
	ops          map[string]prometheus.Counter
	reservations map[string]prometheus.Counter
	// Leases: held now (several stores may share the gauge: Inc and Dec
	// only), units granted, units released unused.
	leases      prometheus.Gauge
	leased      prometheus.Counter
	leaseUnused prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		latency: register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_redis_store_op_duration_seconds",
			Help:    "Latency of one Redis counter store round trip, by operation (reserve, adjust, peek).",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1},
		}, []string{"op"})),
		errors: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_redis_store_errors_total",
			Help: "Redis counter store errors by operation and kind (connection, timeout, pool, server, auth, oom, closed; script, crossslot, reply: bugs; other; canceled: the caller's context ended). Every kind but canceled follows the failure mode.",
		}, []string{"op", "kind"})),
		local: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_redis_store_fallback_calls_total",
			Help: "Calls served by the local fallback store while Redis was unavailable (failureMode open), by operation.",
		}, []string{"op"})),
		fallback: register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_redis_store_fallback_mode",
			Help: "1 while the Redis counter store considers Redis unavailable (the last call failed), else 0.",
		})),
		dropped: register(reg, prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_redis_store_dropped_adjustments_total",
			Help: "Settlements of Redis reservations dropped because Redis was unavailable (their keys expire).",
		})),
		copied: register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_redis_store_copied_charges_total",
			Help: "Net charges of the local fallback (failureMode open) per counter and window, copied to Redis once it answered again, by result: copied, failed (the copy met a bug of the store: a script, cross-slot or reply error; logged), overflow (not journaled: too many counters in one outage).",
		}, []string{"result"})),
	}
	for i, op := range []string{opReserve, opAdjust, opPeek} {
		m.byOp[i] = m.latency.WithLabelValues(op)
	}
	ops := register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_redis_store_operations_total",
		Help: "Operations sent to Redis by the counter store, by op: reserve, peek, adjust (a settlement), lease (a reservation that also releases or asks for leases), release (leases released), charge (an outage's local charges copied back). Merged operations count one each.",
	}, []string{"op"}))
	m.ops = map[string]prometheus.Counter{}
	for _, op := range []string{opReserve, opPeek, opAdjust, opLease, opRelease, opCharge} {
		m.ops[op] = ops.WithLabelValues(op)
	}
	res := register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_redis_store_reservations_total",
		Help: "Reservations made through the Redis counter store, by where they were served: redis (one operation), lease (from a lease this gateway holds, no round trip), local (the local fallback while Redis was unavailable).",
	}, []string{"served"}))
	m.reservations = map[string]prometheus.Counter{}
	for _, w := range []string{servedRedis, servedLease, servedLocal} {
		m.reservations[w] = res.WithLabelValues(w)
	}
	m.leases = register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "sluice_redis_store_leases",
		Help: "Budget leases this gateway holds now (one per counter at most).",
	}))
	m.leased = register(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Name: "sluice_redis_store_leased_units_total",
		Help: "Units granted to this gateway in budget leases (tokens, requests or micro-USD, as the counters count).",
	}))
	m.leaseUnused = register(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Name: "sluice_redis_store_lease_unused_units_total",
		Help: "Units of budget leases released unused (given back to the shared counters).",
	}))
	return m
}

func (m *metrics) observe(op string, start time.Time) {
	var o prometheus.Observer
	switch op {
	case opReserve:
		o = m.byOp[0]
	case opAdjust:
		o = m.byOp[1]
	case opPeek:
		o = m.byOp[2]
	default:
		o = m.latency.WithLabelValues(op)
	}
	o.Observe(time.Since(start).Seconds())
}

func (m *metrics) error(op, kind string) { m.errors.WithLabelValues(op, kind).Inc() }

// register registers c on reg, or returns the collector already registered
// under the same descriptor. A nil reg leaves c unregistered, and so does a
// different collector holding the name: the store keeps counting rather
// than fail on a reload.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	c, _ = promreg.Reuse(reg, c)
	return c
}
