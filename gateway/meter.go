package gateway

import (
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"sluice/gwerror"
	"sluice/llmapi"
	"sluice/meter"
	"sluice/policies"
	"sluice/pricing"
	"sluice/sharedctx"
)

// exchangeUsage are the facts of the usage record that only the exchange
// knows; every other field is read from its one source when the record is
// built (the run's outcome, the SharedContext, the route).
type exchangeUsage struct {
	// id is the gateway's own id of the request (the record's id); clientID
	// the valid X-Request-Id the client sent, echoed back.
	id, clientID string
	// requestedModel is the model of the body as the client sent it.
	requestedModel string
	// first is when the first response byte (a stream's first event) was
	// handed to the client.
	first time.Time
	// attempts counts the upstream attempts.
	attempts int
	// err is the last gateway error sent to the client.
	err *gwerror.Error
	// identifyFailed is set when an Identifier (the authentication policy)
	// refused the request before its chain ran.
	identifyFailed bool
}

// firstByte notes the time of the first response byte forwarded.
func (x *exchange) firstByte() {
	if x.usage.first.IsZero() {
		x.usage.first = x.g.now()
	}
}

// meter produces the request's one usage record, after the chain's final
// phase (the deferred end of serveProxy, on every path): it appends it to
// the sink, counts its tokens and cost, writes the access log line and ends
// the request's trace span with it.
// Requests that reached no LLM endpoint of a route (no route, /v1/models,
// /v1/quota, a CORS preflight, an unknown path under a route) have none.
func (x *exchange) meter(start, end time.Time) {
	g := x.g
	if x.ep == "" || (g.opts.Meter == nil && g.opts.AccessLog == nil && x.span == nil) {
		x.endSpan(nil)
		return
	}
	var rec meter.Record
	x.buildRecord(&rec, start, end)
	// The span ends with the record's facts, after the sink's append.
	defer x.endSpan(&rec)
	if g.opts.Meter != nil {
		if err := g.opts.Meter.Append(&rec); err != nil {
			g.usageMetrics.sinkErrors.Inc()
			g.log.Error("usage record not stored", "request_id", x.reqID, "record_id", rec.ID, "error", err)
		}
	}
	g.usageMetrics.observe(&rec, g.opts.Services.Pricing)
	if g.opts.AccessLog != nil {
		g.opts.AccessLog.Log(&rec)
	}
}

// buildRecord fills rec from the request's facts, each from its one source.
func (x *exchange) buildRecord(rec *meter.Record, start, end time.Time) {
	u := &x.usage
	rec.ID, rec.ClientRequestID = u.id, u.clientID
	rec.Time = start
	rec.GatewayID = x.g.opts.GatewayID
	rec.Route, rec.Provider = x.rt.name, x.rt.provider.name
	rec.RequestedModel = meter.CutModel(u.requestedModel)
	rec.Status = x.status
	rec.LatencyMicros = max(end.Sub(start).Microseconds(), 1)
	if !u.first.IsZero() {
		rec.TTFTMicros = max(u.first.Sub(start).Microseconds(), 1)
	}
	rec.Attempts = u.attempts
	if u.err != nil {
		rec.ErrorCode = u.err.Code
	}
	var o policies.Outcome
	ran, complete := false, false
	if x.run != nil {
		o, ran = x.run.Outcome()
	}
	if x.call != nil {
		sh := x.call.Shared
		rec.Application, rec.KeyID = sh.Auth.ApplicationID, sh.Auth.CredentialID
		if ran {
			rec.ServedModel = meter.CutModel(sh.ServedModel())
			usageFields(rec, sh.Usage())
			complete = sh.Usage().Complete()
			if c, ok := sh.CostMicroUSD(); ok {
				rec.CostMicroUSD = c
				if st := sh.CostStatus(); x.g.opts.Services.Pricing != nil && (st == sharedctx.CostStatusCalculated || st == sharedctx.CostStatusEstimated) {
					rec.PriceVersion = x.g.opts.Services.Pricing.Date()
				}
			}
		}
	}
	rec.Resolution = resolution(o, ran, x.status, u, complete)
	switch rec.Resolution {
	case meter.AuthFailed:
		rec.Application, rec.KeyID = "", ""
		fallthrough
	case meter.Denied:
		if u.err != nil {
			rec.DeniedBy = u.err.Policy
		}
	}
}

// resolution maps the run's final outcome (ran false: the request ended
// before its chain ran) to the record's resolution (docs/meter.md).
//
// complete says whether the request's usage is the provider's complete
// report (llmapi.Usage.Complete): a delivered answer without it is closed.
func resolution(o policies.Outcome, ran bool, status int, u *exchangeUsage, complete bool) meter.Resolution {
	if !ran {
		switch {
		case u.identifyFailed && status == http.StatusUnauthorized:
			return meter.AuthFailed
		case u.identifyFailed:
			return meter.Denied
		}
		return meter.InvalidRequest
	}
	switch o.Kind {
	case policies.Rejected:
		if status == http.StatusUnauthorized {
			return meter.AuthFailed
		}
		return meter.Denied
	case policies.Cancelled:
		// A client that left before anything went upstream (waiting for
		// fair admission) consumed nothing: released, whatever a limit
		// policy did with its own estimate.
		if !o.WentUpstream {
			return meter.Released
		}
		return meter.Abandoned
	case policies.UpstreamFailed:
		return meter.UpstreamError
	case policies.Failed:
		return meter.InternalError
	case policies.Completed:
		if status < 200 || status > 299 {
			// A response phase refused the answer (the upstream work was
			// done: its tokens are recorded).
			return meter.Denied
		}
		if complete {
			return meter.Settled
		}
		return meter.Closed
	}
	return meter.InternalError
}

// usageFields copies the request's usage fact into rec, with its source.
func usageFields(rec *meter.Record, u *llmapi.Usage) {
	switch {
	case u == nil:
		return
	case u.Counted:
		rec.UsageSource = meter.UsageCounted
	case u.Authoritative && u.FinishedChoices < u.ExpectedChoices:
		rec.UsageSource = meter.UsagePartial
	case u.Authoritative:
		rec.UsageSource = meter.UsageProvider
	default:
		return
	}
	rec.PromptTokens, rec.CachedTokens, rec.CacheWriteTokens = u.PromptTokens, u.CachedPromptTokens, u.CacheWriteTokens
	rec.CompletionTokens, rec.ReasoningTokens = u.CompletionTokens, u.ReasoningTokens
}

// Label values that stand for many (bounded cardinality).
const (
	// otherLabel is the model label of models outside the pricing catalog
	// and the application label past maxAppLabels applications.
	otherLabel = "other"
	// noneLabel is the application of an unauthenticated request and the
	// model of a request without one.
	noneLabel = "none"
	// maxAppLabels is the number of distinct applications that get their
	// own label value; later ones count under otherLabel.
	maxAppLabels = 200
)

// usageMetrics are the meter's collectors.
type usageMetrics struct {
	records    *prometheus.CounterVec // route, resolution
	tokens     *prometheus.CounterVec // route, application, model, kind
	cost       *prometheus.CounterVec // route, application, model
	sinkErrors prometheus.Counter

	// mu guards apps and series. series holds the token and cost counters of
	// each (route, application label, model label): looked up once per
	// request instead of hashing the label values of every kind. Its keys
	// are label values, so it is bounded like the series themselves.
	mu     sync.Mutex
	apps   map[string]struct{}
	series map[usageSeriesKey]*usageSeries
	// recordSeries is records' counter of each (route, resolution), under
	// mu like series.
	recordSeries map[recordSeriesKey]prometheus.Counter
}

type recordSeriesKey struct {
	route      string
	resolution meter.Resolution
}

type usageSeriesKey struct{ route, app, model string }

// numKinds is the number of token kinds (the kind label's values, usageKinds).
const numKinds = 5

// usageKinds are the kind label's values, in the record's field order.
var usageKinds = [numKinds]string{"prompt", "cached", "cache_write", "completion", "reasoning"}

// usageSeries are one key's counters, each created when first added to (a
// kind never metered has no series, as before the cache).
type usageSeries struct {
	tokens [numKinds]prometheus.Counter
	cost   prometheus.Counter
}

func newUsageMetrics(reg prometheus.Registerer) (*usageMetrics, error) {
	m := &usageMetrics{
		records: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_usage_records_total",
			Help: "Usage records produced, by route and resolution.",
		}, []string{"route", "resolution"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_usage_tokens_total",
			Help: "Tokens metered, by route, application, model (the pricing catalog's name, \"other\" outside it) and kind (prompt, cached, cache_write, completion, reasoning).",
		}, []string{"route", "application", "model", "kind"}),
		cost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_usage_cost_micro_usd_total",
			Help: "Cost metered in micro-USD, by route, application and model (as sluice_usage_tokens_total).",
		}, []string{"route", "application", "model"}),
		sinkErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "sluice_usage_record_errors_total",
			Help: "Usage records the sink refused (I/O error, record too large); each is logged.",
		}),
		apps:         make(map[string]struct{}),
		series:       make(map[usageSeriesKey]*usageSeries),
		recordSeries: make(map[recordSeriesKey]prometheus.Counter),
	}
	for _, c := range []prometheus.Collector{m.records, m.tokens, m.cost, m.sinkErrors} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// observe counts rec's tokens and cost.
func (m *usageMetrics) observe(rec *meter.Record, cat *pricing.Catalog) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rk := recordSeriesKey{rec.Route, rec.Resolution}
	rc := m.recordSeries[rk]
	if rc == nil {
		rc = m.records.WithLabelValues(rec.Route, rec.Resolution.String())
		m.recordSeries[rk] = rc
	}
	rc.Inc()
	if rec.PromptTokens == 0 && rec.CompletionTokens == 0 && rec.CostMicroUSD == 0 {
		return
	}
	model := modelLabel(cat, rec.RequestedModel)
	n := [numKinds]int64{rec.PromptTokens, rec.CachedTokens, rec.CacheWriteTokens, rec.CompletionTokens, rec.ReasoningTokens}
	k := usageSeriesKey{rec.Route, m.appLabelLocked(rec.Application), model}
	ser := m.series[k]
	if ser == nil {
		ser = &usageSeries{}
		m.series[k] = ser
	}
	for kind, v := range n {
		if v <= 0 {
			continue
		}
		if ser.tokens[kind] == nil {
			ser.tokens[kind] = m.tokens.WithLabelValues(k.route, k.app, k.model, usageKinds[kind])
		}
		ser.tokens[kind].Add(float64(v))
	}
	if rec.CostMicroUSD > 0 {
		if ser.cost == nil {
			ser.cost = m.cost.WithLabelValues(k.route, k.app, k.model)
		}
		ser.cost.Add(float64(rec.CostMicroUSD))
	}
}

// appLabelLocked is app's label value: its id for the first maxAppLabels
// applications seen, otherLabel past them. m.mu must be held.
func (m *usageMetrics) appLabelLocked(app string) string {
	if app == "" {
		return noneLabel
	}
	if _, ok := m.apps[app]; ok {
		return app
	}
	if len(m.apps) >= maxAppLabels {
		return otherLabel
	}
	m.apps[app] = struct{}{}
	return app
}

// modelLabel is model's label value: its pricing catalog entry's name, so
// that dated snapshots and aliases count under one; otherLabel for a model
// outside the catalog.
func modelLabel(cat *pricing.Catalog, model string) string {
	if model == "" {
		return noneLabel
	}
	if m, ok := cat.Resolve(model); ok {
		return m.Name
	}
	return otherLabel
}
