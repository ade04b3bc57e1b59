package ratelimit

import (
	"github.com/prometheus/client_golang/prometheus"

	"sluice/policies"
)

const (
	reasonRate   = iota // rate_limit_exceeded
	reasonBudget        // budget_exceeded
	reasonNever         // the request exceeds a limit's capacity
	reasonStore         // the counter store failed
	numReasons
)

var reasonNames = [numReasons]string{"rate_limit_exceeded", "budget_exceeded", "exceeds_capacity", "store_unavailable"}

const (
	opReserve = iota
	opAdjust
	opPeek
	numOps
)

var opNames = [numOps]string{"reserve", "adjust", "peek"}

// metrics are one engine's collectors, bound to its labels once so that the
// hot path does no label lookups. The vectors are shared by every engine
// (RegisterOrReuse), so gauges stay balanced across chain reloads.
type metrics struct {
	admitted     prometheus.Counter
	denied       [numReasons]prometheus.Counter
	resolutions  [numResolutions]prometheus.Counter
	open         prometheus.Gauge
	delta        []prometheus.Observer // per meter
	storeLatency [numOps]prometheus.Observer
	storeErrors  [numOps]prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, route, policy string, meters []Meter) *metrics {
	admissions := policies.RegisterOrReuse(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_ratelimit_admissions_total",
		Help: "Requests a limit policy admitted (reserved).",
	}, []string{"route", "policy"}))
	denials := policies.RegisterOrReuse(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_ratelimit_denials_total",
		Help: "Requests a limit policy denied, by reason (rate_limit_exceeded, budget_exceeded, exceeds_capacity, store_unavailable).",
	}, []string{"route", "policy", "reason"}))
	resolutions := policies.RegisterOrReuse(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_ratelimit_resolutions_total",
		Help: "Reservations resolved, by kind (settled, closed, abandoned, released).",
	}, []string{"route", "policy", "kind"}))
	open := policies.RegisterOrReuse(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "sluice_ratelimit_open_reservations",
		Help: "Reservations made and not yet resolved; it returns to 0 when traffic stops (anything else is a leak).",
	}, []string{"route", "policy"}))
	delta := policies.RegisterOrReuse(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "sluice_ratelimit_settlement_delta",
		Help:    "Signed settlement delta (real - estimate) per meter, in the meter's unit (tokens, requests, micro-USD).",
		Buckets: []float64{-100000, -10000, -1000, -100, -10, -1, 0, 1, 10, 100, 1000, 10000, 100000},
	}, []string{"policy", "meter"}))
	latency := policies.RegisterOrReuse(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "sluice_ratelimit_store_duration_seconds",
		Help:    "Counter store call latency by operation.",
		Buckets: []float64{0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5},
	}, []string{"op"}))
	errs := policies.RegisterOrReuse(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sluice_ratelimit_store_errors_total",
		Help: "Counter store call failures by operation.",
	}, []string{"op"}))

	m := &metrics{
		admitted: admissions.WithLabelValues(route, policy),
		open:     open.WithLabelValues(route, policy),
		delta:    make([]prometheus.Observer, len(meters)),
	}
	for i := range m.denied {
		m.denied[i] = denials.WithLabelValues(route, policy, reasonNames[i])
	}
	for i := range m.resolutions {
		m.resolutions[i] = resolutions.WithLabelValues(route, policy, Resolution(i).String())
	}
	for i, mt := range meters {
		m.delta[i] = delta.WithLabelValues(policy, mt.Name)
	}
	for i := range m.storeLatency {
		m.storeLatency[i] = latency.WithLabelValues(opNames[i])
		m.storeErrors[i] = errs.WithLabelValues(opNames[i])
	}
	return m
}
