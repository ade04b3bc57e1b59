// Package app is the one wiring: it assembles a gateway from a validated
// deployment and the process-lifetime services (the counter store, the
// pricing catalog, the tokenizer, the clock, the logger and the metrics
// registry), and the platform the same way. The commands (cmd/sluice), the
// in-process e2e tests and the bench programs assemble through it, so a
// gateway is put together in one place.
//
// The wiring owns the services it creates: Gateway.Close closes the counter
// store it built, and the fair-admission scheduler it built when the counters
// are Redis (its capacity leases are released, then their Redis client
// closed; otherwise the scheduler holds nothing to close). A
// service handed in through Services stays the caller's. Import rule: app imports the gateway and the
// platform; nothing but cmd, tests and the bench programs import app.
package app

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"

	"sluice/admission"
	"sluice/admission/admissionprom"
	"sluice/admission/redisledger"
	"sluice/counter"
	"sluice/counter/counterconfig"
	"sluice/deployment"
	"sluice/gateway"
	"sluice/meter/accesslog"
	"sluice/policies"
	"sluice/policies/builtin"
	"sluice/pricing"
	"sluice/tokencount"
)

// Services are the process-lifetime services of a gateway: they outlive
// every reload. A nil field gets the production service.
type Services struct {
	// Logger receives the gateway's and the services' logs (nil:
	// slog.Default()).
	Logger *slog.Logger
	// Metrics is the registry /metrics serves (nil: a new one with the Go
	// and process collectors).
	Metrics *prometheus.Registry
	// Now is the clock of the policies and the memory store (nil: time.Now).
	Now func() time.Time
	// Counters is the counter store (nil: the store the deployment's
	// counters section selects, built by counterconfig and owned by
	// the Gateway, which closes it).
	Counters counter.Store
	// Pricing is the price catalog (nil: the embedded table, plus
	// PricingFile when set).
	Pricing     *pricing.Catalog
	PricingFile string
	// Tokens is the tokenizer (nil: a new one whose vocabularies are loaded
	// before the gateway serves, not on its first requests).
	Tokens *tokencount.Counter
	// AccessLog receives the access log lines (nil: none); the
	// deployment's meter.accessLog: off turns them off.
	AccessLog *accesslog.Writer
	// Admission is the fair-admission scheduler (nil: a new one on the real
	// clock, its metrics registered once on Metrics, and, when the
	// deployment's counters are Redis, sharing each provider's capacity
	// with the other replicas through leases in that Redis; a scheduler
	// handed in is used as it is). The gateway configures it with every
	// deployment it applies.
	Admission *admission.Scheduler
}

// GatewayOptions configure NewGateway.
type GatewayOptions struct {
	Services
	// Registry holds the policy definitions (nil: the built-in policies).
	Registry *policies.Registry
	// SeparateMetrics serves /metrics only through Serve's metrics
	// listener, not on the proxy's.
	SeparateMetrics bool
	// Transport and Backoff are the gateway's (nil: its defaults).
	Transport http.RoundTripper
	Backoff   func(attempt int) time.Duration
	// WrapKeys, when set, wraps every deployment's key index (the platform
	// source records each key's last use through it).
	WrapKeys func(policies.KeyIndex) policies.KeyIndex
	// Meter says where usage records go by default (the zero value: a
	// JSON lines file when the deployment's meter.jsonl.path is set, else
	// nowhere).
	Meter MeterOptions
	// Tracing turns on OpenTelemetry traces (the zero value: off).
	Tracing TracingOptions
}

// Gateway is an assembled gateway and the services the wiring owns for it.
// Its methods are safe for concurrent use.
type Gateway struct {
	*gateway.Gateway
	// Services are the services in use, defaults filled.
	Services Services
	log      *slog.Logger
	// running is the counters section the store was chosen from.
	running deployment.Counters
	owned   []func() error
}

// NewGateway assembles a gateway for d (defaults applied and validated:
// yamlfile does both) and applies d. The counter store is chosen from d's
// counters section once: a later deployment that changes it is served
// with the running store (Apply says so in the log).
func NewGateway(d *deployment.Deployment, o GatewayOptions) (*Gateway, error) {
	g := &Gateway{running: d.Counters}
	if err := g.services(d, &o.Services); err != nil {
		g.Close()
		return nil, err
	}
	g.Services, g.log = o.Services, o.Logger
	sink, err := g.meterSink(d, &o.Services, o.Meter)
	if err != nil {
		g.Close()
		return nil, err
	}
	tracer, err := g.tracer(o.Tracing)
	if err != nil {
		g.Close()
		return nil, err
	}
	var access *accesslog.Writer
	if d.Meter.AccessLog != "off" {
		access = o.AccessLog
	}
	if o.Registry == nil {
		o.Registry = builtin.Registry()
	}
	keys := func(d *deployment.Deployment) (policies.KeyIndex, error) {
		idx := gateway.NewKeyIndex(d)
		if o.WrapKeys != nil {
			return o.WrapKeys(idx), nil
		}
		return idx, nil
	}
	gw, err := gateway.New(gateway.Options{
		Registry: o.Registry, Logger: o.Logger, Metrics: o.Metrics, Now: o.Now,
		Services: policies.Services{
			Logger: o.Logger, Now: o.Now, Counters: o.Counters, Pricing: o.Pricing, Tokens: o.Tokens, Metrics: o.Metrics,
			Admission: o.Admission,
		},
		KeyIndex: keys, Transport: o.Transport, Backoff: o.Backoff, SeparateMetrics: o.SeparateMetrics,
		Meter: sink, GatewayID: o.Meter.GatewayID, AccessLog: access, Tracer: tracer,
	})
	if err == nil {
		g.Gateway = gw
		err = gw.Apply(d)
	}
	if err != nil {
		g.Close()
		return nil, err
	}
	return g, nil
}

// services fills s's nil fields, the counter store from d's counters
// section.
func (g *Gateway) services(d *deployment.Deployment, s *Services) error {
	if s.Logger == nil {
		s.Logger = slog.Default()
	}
	if s.Now == nil {
		s.Now = time.Now
	}
	if s.Metrics == nil {
		s.Metrics = prometheus.NewRegistry()
		s.Metrics.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	if s.Pricing == nil {
		cat, err := pricing.New(s.PricingFile)
		if err != nil {
			return err
		}
		s.Pricing = cat
	}
	if s.Tokens == nil {
		s.Tokens = tokencount.New()
		s.Tokens.Warm()
	}
	if d.Counters.Backend == counterconfig.Redis {
		// go-redis logs through a process-wide logger; the wiring
		// points it at the gateway's when it builds a Redis client.
		redis.SetLogger(&counterconfig.RedisClientLogger{Logger: s.Logger, Interval: 10 * time.Second})
	}
	if s.Admission == nil {
		// Configured by Apply; the process-lifetime metrics are registered
		// here, once, not by the chains that reload.
		events := admissionprom.NewEvents()
		opts := admission.Options{Observer: events}
		closeClient, err := g.capacityLedger(d, &opts)
		if err != nil {
			return err
		}
		sched, err := admission.New(admission.Config{}, opts)
		if err != nil {
			if closeClient != nil {
				_ = closeClient()
			}
			return err
		}
		if closeClient != nil {
			// The leases are released before the client closes.
			g.owned = append(g.owned, sched.Close, closeClient)
		}
		if err := s.Metrics.Register(events); err != nil {
			return err
		}
		if err := s.Metrics.Register(admissionprom.NewState(sched)); err != nil {
			return err
		}
		s.Admission = sched
	}
	if s.Counters == nil {
		st, err := counterconfig.New(d.Counters, counterconfig.Options{Logger: s.Logger, Metrics: s.Metrics, Now: s.Now})
		if err != nil {
			return err
		}
		s.Counters = st
		g.owned = append(g.owned, st.Close)
		s.Logger.Info("counter store", counterconfig.Describe(d.Counters)...)
	}
	return nil
}

// capacityLedger sets o's capacity ledger when d's counters are Redis: the
// replicas then share each provider's capacity through leases in that
// Redis (docs/fairness.md). It returns the close of the Redis client it
// made (nil with none), to run after the scheduler's Close.
func (g *Gateway) capacityLedger(d *deployment.Deployment, o *admission.Options) (func() error, error) {
	if d.Counters.Backend != counterconfig.Redis {
		return nil, nil
	}
	client, err := counterconfig.RedisClient(d.Counters)
	if err != nil {
		return nil, err
	}
	r := d.Counters.Redis
	o.Ledger = redisledger.New(redisledger.Options{Client: client, KeyPrefix: r.KeyPrefix})
	o.Leases = admission.LeaseOptions{TTL: r.CapacityLeases.TTL.D(), Renew: r.CapacityLeases.Renew.D(),
		QueuedRenew: r.CapacityLeases.QueuedRenew.D(), FailClosed: r.FailureMode == "closed"}
	return client.Close, nil
}

// Apply applies d like gateway.Gateway.Apply; when d's counters section
// differs from the one the store was chosen from, it logs that the running
// store stays until a restart.
func (g *Gateway) Apply(d *deployment.Deployment) error {
	g.warnCounters(d)
	return g.Gateway.Apply(d)
}

// Reload is gateway.Gateway.Reload with Apply's counters warning.
func (g *Gateway) Reload(load func() (*deployment.Deployment, error)) error {
	return g.Gateway.Reload(func() (*deployment.Deployment, error) {
		d, err := load()
		if err == nil {
			g.warnCounters(d)
		}
		return d, err
	})
}

func (g *Gateway) warnCounters(d *deployment.Deployment) {
	if !counterconfig.Equal(d.Counters, g.running) {
		g.log.Warn("the counters section changed; the counter store is chosen at startup and the running one stays until restart",
			"running", g.running.Backend, "deployment", d.Counters.Backend)
	}
}

// Run serves the gateway on ln, and /metrics alone on metricsLn when it is
// not nil, until ctx is done; then it drains: requests in flight get the
// current deployment's server.shutdownGrace, after which the remaining
// connections are closed. It returns ln's serving error (the gateway is not
// drained then), or nil once drained. A failing metrics listener is logged
// and does not stop the gateway.
func (g *Gateway) Run(ctx context.Context, ln, metricsLn net.Listener) error {
	if metricsLn != nil {
		go func() {
			if err := g.ServeMetrics(metricsLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
				g.log.Error("metrics server stopped", "error", err)
			}
		}()
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- g.Serve(ln) }()
	select {
	case err := <-serveErr:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return err
	case <-ctx.Done():
	}
	grace := g.ShutdownGrace()
	g.log.Info("shutting down; draining in-flight requests", "grace", grace.String())
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := g.Shutdown(sctx); err != nil {
		g.log.Warn("shutdown grace expired; remaining connections closed", "error", err)
	}
	<-serveErr
	g.log.Info("gateway stopped")
	return nil
}

// Close closes the services the wiring built (not those handed in). Call
// it once the gateway no longer serves.
func (g *Gateway) Close() error {
	var errs []error
	for _, c := range g.owned {
		errs = append(errs, c())
	}
	g.owned = nil
	return errors.Join(errs...)
}
