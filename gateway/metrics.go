package gateway

import (
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the data plane's collectors. Labels are bounded: route names and
// providers come from configuration, statuses are HTTP codes, reasons a fixed set.
type metrics struct {
	requests     *prometheus.CounterVec   // route, endpoint, status
	latency      *prometheus.HistogramVec // route, status
	overhead     *prometheus.HistogramVec // route
	attempts     *prometheus.CounterVec   // provider, target
	upstreamErrs *prometheus.CounterVec   // provider, target, reason
	retries      *prometheus.CounterVec   // provider
	reloads      *prometheus.CounterVec   // result
	outputCuts   *prometheus.CounterVec   // route
	inflight     prometheus.Gauge
}

// Upstream error reasons (label values of sluice_upstream_errors_total).
const (
	reasonConnect = "connect"
	reasonTimeout = "timeout"
	reason5xx     = "status_5xx"
	reasonStream  = "stream_cut"
)

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_requests_total",
			Help: "Requests answered by the data plane, by route, endpoint and HTTP status.",
		}, []string{"route", "endpoint", "status"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_request_duration_seconds",
			Help:    "Time from receiving a request to the end of its response (streams included), by route and status.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120},
		}, []string{"route", "status"}),
		overhead: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_gateway_added_seconds",
			Help:    "Time the gateway itself added to a successful non-streamed request: its whole duration minus the upstream exchange (retries included), by route.",
			Buckets: []float64{.000025, .00005, .0001, .0002, .0003, .0005, .00075, .001, .002, .005, .01, .025, .05, .1},
		}, []string{"route"}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_upstream_attempts_total",
			Help: "Upstream attempts (including retries), by provider and target.",
		}, []string{"provider", "target"}),
		upstreamErrs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_upstream_errors_total",
			Help: "Failed upstream attempts, by provider, target and reason (connect, timeout, status_5xx, stream_cut).",
		}, []string{"provider", "target", "reason"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_upstream_retries_total",
			Help: "Upstream retries (attempts after the first), by provider.",
		}, []string{"provider"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_config_reloads_total",
			Help: "Configuration loads, by result (success, error).",
		}, []string{"result"}),
		outputCuts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_output_bound_cuts_total",
			Help: "Answers the gateway cut at the request's output bound (max tokens) because the upstream passed it, by route.",
		}, []string{"route"}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "sluice_inflight_requests",
			Help: "Proxied requests in flight.",
		}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.latency, m.overhead, m.attempts, m.upstreamErrs, m.retries, m.reloads, m.outputCuts, m.inflight} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// routeSeries caches one route's request series, each looked up in its vector
// (labels checked and hashed) the first time a request needs it rather than
// on every request. A series is created when first observed, as without the
// cache.
type routeSeries struct {
	byStatus sync.Map // requestSeriesKey -> *requestSeries
	overhead atomic.Pointer[prometheus.Observer]
}

type requestSeriesKey struct {
	endpoint string
	status   int
}

type requestSeries struct {
	requests prometheus.Counter
	latency  prometheus.Observer
}

// request returns route's series of requests to endpoint answered status.
func (s *routeSeries) request(m *metrics, route, endpoint string, status int) *requestSeries {
	k := requestSeriesKey{endpoint, status}
	if v, ok := s.byStatus.Load(k); ok {
		return v.(*requestSeries)
	}
	code := strconv.Itoa(status)
	v, _ := s.byStatus.LoadOrStore(k, &requestSeries{
		requests: m.requests.WithLabelValues(route, endpoint, code),
		latency:  m.latency.WithLabelValues(route, code),
	})
	return v.(*requestSeries)
}

// overheadOf returns route's series of the time the gateway added.
func (s *routeSeries) overheadOf(m *metrics, route string) prometheus.Observer {
	if o := s.overhead.Load(); o != nil {
		return *o
	}
	o := m.overhead.WithLabelValues(route)
	s.overhead.Store(&o)
	return o
}
