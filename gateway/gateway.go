// Package gateway is Sluice's data plane: it routes requests by path prefix to a
// provider, runs each route's policy chain around the upstream call, proxies
// bodies and SSE streams, and serves health and metrics endpoints.
//
// Configuration is an immutable snapshot built from a deployment.Deployment and
// swapped atomically by Apply; a request keeps the snapshot it started with, so
// reloads never disturb requests in flight. The gateway trusts the document it
// is given: defaults and structural validation are the deployment package's
// (yamlfile applies both); the gateway builds the chains, which checks the
// params (policies.Registry.BuildRoute).
//
// Packages below gateway/ are its deployment sources (filesource, pull). The
// gateway imports the document, the policies and the leaves, never the
// platform; the wiring (internal/app) assembles it.
package gateway

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"go.opentelemetry.io/otel/trace"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"sluice/deployment"
	"sluice/dialect"
	"sluice/gwerror"
	"sluice/meter"
	"sluice/meter/accesslog"
	"sluice/policies"
)

// maxResponseBytes bounds a non-streamed upstream body held in memory.
const maxResponseBytes = 256 << 20

// Options configure a Gateway. Everything here outlives reloads: counter state
// in Services.Counters survives every Apply.
type Options struct {
	// Registry holds the policy definitions chains are built from (required).
	Registry *policies.Registry
	// Logger receives access errors, reload results and recovered panics.
	Logger *slog.Logger
	// Metrics is the registry /metrics serves; gateway collectors and policy
	// collectors (Services.Metrics) are registered on it. nil: a new registry.
	Metrics *prometheus.Registry
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Services are passed to policy constructors. Keys is replaced per
	// deployment by KeyIndex.
	Services policies.Services
	// KeyIndex builds the API key index of a deployment's applications (nil:
	// NewKeyIndex).
	KeyIndex func(d *deployment.Deployment) (policies.KeyIndex, error)
	// Transport is the upstream round tripper (nil: a tuned *http.Transport).
	Transport http.RoundTripper
	// Backoff is the wait before retry attempt i (1-based); nil: 25ms doubling,
	// capped at 250ms.
	Backoff func(attempt int) time.Duration
	// SeparateMetrics removes /metrics from Handler: it is then served only
	// by ServeMetrics, on a listener of its own (sluice gateway
	// --metrics-listen), so the proxy port never exposes it.
	SeparateMetrics bool
	// Meter receives the usage record of every request that reached an LLM
	// endpoint of a route (nil: none is stored). It is a process-lifetime
	// service: the caller opens and closes it.
	Meter meter.Sink
	// GatewayID names this gateway in its usage records ("" omits it: the
	// platform fills in the id of the gateway token that sent them).
	GatewayID string
	// AccessLog, when set, receives one line per request with the usage
	// record's fields, at info.
	AccessLog *accesslog.Writer
	// Tracer, when set, gets a server span per proxied request and a client
	// span per upstream attempt (tracing.go); nil: no tracing, no cost.
	Tracer trace.Tracer
}

// Gateway is the data plane. Its methods are safe for concurrent use.
type Gateway struct {
	opts      Options
	log       *slog.Logger
	now       func() time.Time
	transport http.RoundTripper
	metrics   *metrics
	// usageMetrics count the usage records' tokens and cost.
	usageMetrics *usageMetrics
	echo         *echo.Echo
	snap         atomic.Pointer[snapshot]
	ids          requestIDs
	bufs         sync.Pool // *bytes.Buffer for upstream bodies

	// applyMu serialises Apply so snapshots are built one at a time, and
	// guards retired.
	applyMu sync.Mutex
	// retired is set by Shutdown once it dropped the gateway's reference to
	// the current snapshot; Apply then fails.
	retired bool
	// open are the snapshots whose policy instances are not closed yet.
	open openSnapshots

	srvMu      sync.Mutex
	srv        *http.Server
	metricsSrv *http.Server
	// shut is set by Shutdown: a Serve that starts after it returns at once.
	shut bool
}

// New returns a Gateway without configuration; /readyz fails and proxied paths
// answer 503 until the first successful Apply.
func New(opts Options) (*Gateway, error) {
	if opts.Registry == nil {
		return nil, errors.New("gateway: Options.Registry is required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Metrics == nil {
		opts.Metrics = prometheus.NewRegistry()
	}
	if opts.Services.Logger == nil {
		opts.Services.Logger = opts.Logger
	}
	if opts.Services.Now == nil {
		opts.Services.Now = opts.Now
	}
	if opts.Services.Metrics == nil {
		opts.Services.Metrics = opts.Metrics
	}
	if opts.KeyIndex == nil {
		opts.KeyIndex = func(d *deployment.Deployment) (policies.KeyIndex, error) { return NewKeyIndex(d), nil }
	}
	if opts.Backoff == nil {
		opts.Backoff = defaultBackoff
	}
	g := &Gateway{
		opts:      opts,
		log:       opts.Logger,
		now:       opts.Now,
		transport: opts.Transport,
		ids:       newRequestIDs(),
	}
	if g.transport == nil {
		g.transport = NewTransport()
	}
	m, err := newMetrics(opts.Metrics)
	if err != nil {
		return nil, err
	}
	g.metrics = m
	if g.usageMetrics, err = newUsageMetrics(opts.Metrics); err != nil {
		return nil, err
	}
	g.echo = g.newEcho()
	return g, nil
}

// NewTransport returns the upstream transport: keep-alive pools sized for a
// busy gateway (net/http's default of 2 idle connections per host makes every
// burst open new connections), HTTP/1.1 only.
func NewTransport() *http.Transport {
	return &http.Transport{
		Proxy: nil,
		DialContext: (&net.Dialer{
			Timeout:   10 * time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		MaxIdleConns:          4096,
		MaxIdleConnsPerHost:   512,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: 0,
		WriteBufferSize:       32 << 10,
		ReadBufferSize:        32 << 10,
		ForceAttemptHTTP2:     false,
	}
}

func defaultBackoff(attempt int) time.Duration {
	d := 25 * time.Millisecond << (attempt - 1)
	if d > 250*time.Millisecond || d <= 0 {
		d = 250 * time.Millisecond
	}
	return d
}

func (g *Gateway) newEcho() *echo.Echo {
	e := echo.New()
	e.HideBanner = true
	e.HidePort = true
	e.Logger.SetOutput(discard{})
	e.GET("/healthz", func(c echo.Context) error {
		return c.String(http.StatusOK, "ok\n")
	})
	e.GET("/readyz", func(c echo.Context) error {
		if g.snap.Load() == nil {
			return c.String(http.StatusServiceUnavailable, "no configuration loaded\n")
		}
		return c.String(http.StatusOK, "ready\n")
	})
	if !g.opts.SeparateMetrics {
		e.GET("/metrics", echo.WrapHandler(g.metricsHandler()))
	}
	proxy := func(c echo.Context) error {
		g.serveProxy(c.Response().Writer, c.Request())
		return nil
	}
	e.Any("/", proxy)
	e.Any("/*", proxy)
	return e
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// Handler returns the HTTP handler serving proxied routes and the operations
// endpoints /healthz, /readyz and /metrics (unless Options.SeparateMetrics).
func (g *Gateway) Handler() http.Handler { return http.HandlerFunc(g.root) }

// root gives every response server.writeTimeout from its start (the proxy
// extends it before each write of a stream or a body): no write to a client,
// the operations endpoints' and the final flush net/http makes after a
// handler included, waits for a stalled reader for ever, and a deadline that
// an earlier request on the same connection left does not apply to this one.
func (g *Gateway) root(w http.ResponseWriter, r *http.Request) {
	// net/http's own ResponseWriter has the method (it is what
	// http.ResponseController calls); the server hands it to root unwrapped.
	if dw, ok := w.(connDeadlines); ok {
		d := deployment.DefaultWriteTimeout.D()
		if s := g.snap.Load(); s != nil {
			d = s.writeTimeout
		}
		_ = dw.SetWriteDeadline(time.Now().Add(d))
	}
	g.echo.ServeHTTP(w, r)
}

// metricsHandler serves the Prometheus registry. When the configuration sets
// server.metricsToken it requires "Authorization: Bearer <token>" (compared
// in constant time), on whichever listener serves it.
func (g *Gateway) metricsHandler() http.Handler {
	mh := promhttp.HandlerFor(g.opts.Metrics, promhttp.HandlerOpts{})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s := g.snap.Load(); s != nil && s.metricsToken != "" && !bearerIs(r, s.metricsToken) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="metrics"`)
			gwerror.New(http.StatusUnauthorized, gwerror.TypeAuthentication, gwerror.CodeInvalidMetricsToken,
				"/metrics requires Authorization: Bearer <server.metricsToken>").Write(w, dialect.OpenAI, "")
			return
		}
		mh.ServeHTTP(w, r)
	})
}

// bearerIs reports whether r carries "Authorization: Bearer token".
func bearerIs(r *http.Request, token string) bool {
	scheme, got, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(got), []byte(token)) == 1
}

// newServer is an http.Server for h. Request headers must arrive within
// server.readHeaderTimeout of the configuration loaded when serving starts
// (net/http reads it per connection and cannot change it while serving);
// bodies and writes are bounded per request by the configuration current then.
func (g *Gateway) newServer(h http.Handler) *http.Server {
	headerTimeout := deployment.DefaultReadHeaderTimeout.D()
	if s := g.snap.Load(); s != nil {
		headerTimeout = s.readHeaderTimeout
	}
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: headerTimeout,
		IdleTimeout:       120 * time.Second,
		ErrorLog:          slog.NewLogLogger(g.log.Handler(), slog.LevelWarn),
	}
}

// Serve accepts connections on ln until Shutdown. It returns
// http.ErrServerClosed after a Shutdown, at once when Shutdown came first.
func (g *Gateway) Serve(ln net.Listener) error {
	srv := g.newServer(http.HandlerFunc(g.root))
	g.srvMu.Lock()
	if g.shut {
		g.srvMu.Unlock()
		ln.Close()
		return http.ErrServerClosed
	}
	if g.srv != nil {
		g.srvMu.Unlock()
		return errors.New("gateway: already serving")
	}
	g.srv = srv
	g.srvMu.Unlock()
	return srv.Serve(ln)
}

// ServeMetrics serves GET /metrics, and nothing else, on ln until Shutdown.
// It returns http.ErrServerClosed after a Shutdown.
func (g *Gateway) ServeMetrics(ln net.Listener) error {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", g.metricsHandler())
	srv := g.newServer(mux)
	g.srvMu.Lock()
	if g.shut {
		g.srvMu.Unlock()
		ln.Close()
		return http.ErrServerClosed
	}
	if g.metricsSrv != nil {
		g.srvMu.Unlock()
		return errors.New("gateway: already serving metrics")
	}
	g.metricsSrv = srv
	g.srvMu.Unlock()
	return srv.Serve(ln)
}

// Shutdown stops accepting connections and waits for in-flight requests and
// streams to finish until ctx is done; then it closes the remaining
// connections (their requests end Cancelled) and returns ctx's error. The
// metrics listener, if any, is shut down last, so a scrape during the drain
// still answers. Then the current configuration is retired: its policy
// instances, and those of replaced configurations still draining, are closed
// once their last request has ended; Shutdown waits for that until ctx is
// done. Later requests (on a handler served elsewhere) answer 503, and Apply
// fails.
func (g *Gateway) Shutdown(ctx context.Context) error {
	g.srvMu.Lock()
	srv, msrv := g.srv, g.metricsSrv
	g.shut = true
	g.srvMu.Unlock()
	var err error
	if srv != nil {
		if err = srv.Shutdown(ctx); err != nil {
			_ = srv.Close()
		}
	}
	if msrv != nil {
		if merr := msrv.Shutdown(ctx); merr != nil {
			_ = msrv.Close()
			err = cmp.Or(err, merr)
		}
	}
	// The retired snapshot stays loaded (its settings still answer /metrics
	// and /readyz); acquire refuses it once its count is zero.
	g.applyMu.Lock()
	if s := g.snap.Load(); s != nil && !g.retired {
		g.retired = true
		g.release(s, false)
	}
	g.applyMu.Unlock()
	return cmp.Or(err, g.waitClosed(ctx))
}

// ShutdownGrace is the drain bound of the current configuration.
func (g *Gateway) ShutdownGrace() time.Duration {
	if s := g.snap.Load(); s != nil {
		return s.shutdownGrace
	}
	return deployment.DefaultShutdownGrace.D()
}

// Ready reports whether a configuration is loaded.
func (g *Gateway) Ready() bool { return g.snap.Load() != nil }

// Apply builds a snapshot from d (providers, key index, chains, the
// fair-admission configuration), configures the scheduler
// (Services.Admission) with it and swaps it in atomically. d must have
// passed deployment.Validate (yamlfile validates what it reads): the
// gateway does not check again what Validate checks. Apply
// fills d's empty fields with the document's defaults
// (deployment.ApplyDefaults: nothing to do for what yamlfile read). On error
// the current snapshot stays in place. Requests in flight finish on the
// snapshot they started with; the policy instances of the replaced snapshot
// are closed once the last of them has ended (at once when none is in
// flight). Apply fails after Shutdown.
func (g *Gateway) Apply(d *deployment.Deployment) error {
	g.applyMu.Lock()
	defer g.applyMu.Unlock()
	if g.retired {
		return errors.New("gateway: shut down")
	}
	s, err := g.buildSnapshot(d)
	if err == nil && g.opts.Services.Admission != nil {
		// Before the swap: the new chains admit against the new capacities
		// from their first request. Queues and counters are kept. The
		// configuration was validated with the snapshot, so this cannot
		// fail; if it did, the snapshot never serves.
		if err = g.opts.Services.Admission.Configure(s.admission); err != nil {
			for _, rt := range s.routes {
				_ = rt.chain.Close()
			}
		}
	}
	if err != nil {
		g.metrics.reloads.WithLabelValues("error").Inc()
		return err
	}
	g.adopt(s)
	if old := g.snap.Swap(s); old != nil {
		g.release(old, false)
	}
	g.metrics.reloads.WithLabelValues("success").Inc()
	g.srvMu.Lock()
	srv := g.srv
	g.srvMu.Unlock()
	if srv != nil && srv.ReadHeaderTimeout != s.readHeaderTimeout {
		g.log.Warn("server.readHeaderTimeout changed; the running server keeps the value it started with until restart",
			"running", srv.ReadHeaderTimeout, "file", s.readHeaderTimeout)
	}
	return nil
}

// Reload loads a deployment with load and applies it; on any error it keeps
// the last good configuration and logs why. It returns the error.
func (g *Gateway) Reload(load func() (*deployment.Deployment, error)) error {
	d, err := load()
	if err != nil {
		g.metrics.reloads.WithLabelValues("error").Inc()
		g.log.Error("configuration reload failed; keeping the last good configuration", "error", err)
		return err
	}
	if err := g.Apply(d); err != nil {
		g.log.Error("configuration reload failed; keeping the last good configuration", "source", d.Source, "error", err)
		return err
	}
	g.log.Info("configuration loaded", "source", d.Source, "routes", len(d.Routes))
	return nil
}

// requestIDs generates request ids: a random per-process prefix and a counter,
// unique without a syscall per request.
type requestIDs struct {
	prefix string
	n      atomic.Uint64
}

func newRequestIDs() requestIDs {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return requestIDs{prefix: hex.EncodeToString(b[:])}
}

// next is fmt.Sprintf("%s-%08x", prefix, n) for the next n, in one
// allocation.
func (r *requestIDs) next() string {
	n := r.n.Add(1)
	var arr [16]byte
	digits := strconv.AppendUint(arr[:0], n, 16)
	var b strings.Builder
	b.Grow(len(r.prefix) + 1 + max(len(digits), 8))
	b.WriteString(r.prefix)
	b.WriteByte('-')
	for range 8 - len(digits) {
		b.WriteByte('0')
	}
	b.Write(digits)
	return b.String()
}

// validRequestID accepts client ids of 1..128 characters from a safe set, so
// they can be echoed in headers and logs unescaped.
func validRequestID(s string) bool {
	if len(s) == 0 || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '-', c == '_', c == '.', c == ':':
		default:
			return false
		}
	}
	return true
}
