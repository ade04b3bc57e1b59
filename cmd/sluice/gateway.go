package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"

	"sluice/counter/counterconfig"
	"sluice/gateway"
	"sluice/gateway/config"
	"sluice/mockllm"
	"sluice/policies"
	"sluice/policies/builtin"
	"sluice/pricing"
	"sluice/tokencount"
)

const gatewaySynopsis = `sluice gateway [--config FILE] [--listen ADDR] [--metrics-listen ADDR] [flags]

Serves the deployment in FILE (reloaded when it changes and on SIGHUP). Without
--config it serves the embedded demo deployment: against the built-in mock
upstream with the demo key sk-sluice-demo, or, when OPENAI_API_KEY is set,
against api.openai.com (or OPENAI_BASE_URL) with a key generated at start and
printed once on stderr.`

func cmdGateway(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	cfgPath := fs.String("config", "", "deployment file (default: the embedded demo deployment)")
	listen := fs.String("listen", "127.0.0.1:8080", "address to listen on")
	metricsListen := fs.String("metrics-listen", "", "serve /metrics only on this address, not on --listen")
	logFormat := fs.String("log-format", "text", "log format: text or json")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn or error")
	pricingFile := fs.String("pricing", "", "extra model prices (YAML or JSON) on top of the embedded table")
	watchEvery := fs.Duration("watch-interval", 2*time.Second, "how often to check the config file for changes")
	pf := platformFlags(fs)
	if code, ok := parseFlags(fs, gatewaySynopsis, args, stdout, stderr); !ok {
		return code
	}
	logger, err := newLogger(stderr, *logFormat, *logLevel)
	if err != nil {
		fmt.Fprintf(stderr, "sluice gateway: %v\n", err)
		return 2
	}
	logger.Info("sluice gateway starting", "version", buildVersion())

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if pf.url != "" {
		return pf.run(ctx, *cfgPath, *listen, *pricingFile, logger, stdout, stderr)
	}

	load, demoKey, err := deploymentSource(*cfgPath)
	if err != nil {
		fmt.Fprintf(stderr, "sluice gateway: %v\n", err)
		return 1
	}
	d, err := load()
	if err != nil {
		fmt.Fprintf(stderr, "sluice gateway: %v\n", err)
		return 1
	}
	switch {
	case demoKey != "":
		// Printed once, on stderr, never logged: it is a credential.
		fmt.Fprintf(stderr, "\n%s is set: the demo deployment sends requests to %s with it, so the public demo key %s is disabled.\n"+
			"API key for this run (generated at start, shown only now):\n\n    %s\n\n",
			config.EnvOpenAIKey, d.Providers[0].URL, config.DemoKey, demoKey)
		logger.Warn("demo deployment with a real provider key: the public demo key is disabled; use the key printed above",
			"upstream", d.Providers[0].URL)
	case *cfgPath == "":
		stopMock, err := startMock(logger)
		if err != nil {
			fmt.Fprintf(stderr, "sluice gateway: starting the mock upstream: %v\n", err)
			return 1
		}
		defer stopMock()
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	redis.SetLogger(&counterconfig.RedisClientLogger{Logger: logger, Interval: 10 * time.Second})
	counterStore, err := counterconfig.New(d.Counters, counterconfig.Options{Logger: logger, Metrics: reg, Now: time.Now})
	if err != nil {
		fmt.Fprintf(stderr, "sluice gateway: %v\n", err)
		return 1
	}
	defer counterStore.Close()
	prices, err := pricing.New(*pricingFile)
	if err != nil {
		fmt.Fprintf(stderr, "sluice gateway: %v\n", err)
		return 1
	}

	// Load the tokenizer vocabularies before serving, not on the first requests.
	tokens := tokencount.New()
	tokens.Warm()

	gw, err := gateway.New(gateway.Options{
		Registry:        builtin.Registry(),
		Logger:          logger,
		Metrics:         reg,
		SeparateMetrics: *metricsListen != "",
		Services: policies.Services{
			Logger:   logger,
			Now:      time.Now,
			Counters: counterStore,
			Pricing:  prices,
			Tokens:   tokens,
			Metrics:  reg,
		},
	})
	if err != nil {
		fmt.Fprintf(stderr, "sluice gateway: %v\n", err)
		return 1
	}
	if err := gw.Apply(d); err != nil {
		fmt.Fprintf(stderr, "sluice gateway: %v\n", err)
		return 1
	}
	logDeployment(logger, d)
	running := d.Counters
	reload := func(why string) {
		logger.Info("reloading configuration", "trigger", why)
		if gw.Reload(func() (*config.Deployment, error) {
			nd, err := load()
			if err == nil && !counterconfig.Equal(nd.Counters, running) {
				logger.Warn("the counters section changed; the counter store is chosen at startup and the running one stays until restart",
					"running", running.Backend, "file", nd.Counters.Backend)
			}
			return nd, err
		}) == nil {
			logger.Info("configuration applied")
		}
	}

	// SIGHUP and the file watcher are set up before the gateway says it
	// listens: a SIGHUP that came earlier would end the process (its default
	// action), and a file written earlier would be the watcher's baseline,
	// its change never seen.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	if *cfgPath != "" {
		config.Watch(watchCtx, *cfgPath, *watchEvery, func() { reload("file changed") })
	}

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintf(stderr, "sluice gateway: %v\n", err)
		return 1
	}
	metricsErr := make(chan error, 1)
	if *metricsListen != "" {
		mln, err := net.Listen("tcp", *metricsListen)
		if err != nil {
			ln.Close()
			fmt.Fprintf(stderr, "sluice gateway: --metrics-listen: %v\n", err)
			return 1
		}
		go func() { metricsErr <- gw.ServeMetrics(mln) }()
		logger.Info("metrics listening", "addr", mln.Addr().String(), "url", "http://"+mln.Addr().String()+"/metrics",
			"token", d.Server.MetricsToken != "")
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- gw.Serve(ln) }()
	logger.Info("gateway listening", "addr", ln.Addr().String(), "config", d.Source, "routes", len(d.Routes),
		"metrics", metricsWhere(*metricsListen, d.Server.MetricsToken != ""))
	fmt.Fprintf(stdout, "sluice gateway listening on http://%s\n", ln.Addr())

	for {
		select {
		case <-hup:
			reload("SIGHUP")
			continue
		case err := <-serveErr:
			if err != nil && !errors.Is(err, http.ErrServerClosed) {
				logger.Error("server stopped", "error", err)
				return 1
			}
			return 0
		case err := <-metricsErr:
			if err != nil && !errors.Is(err, http.ErrServerClosed) {
				logger.Error("metrics server stopped", "error", err)
				return 1
			}
			continue
		case <-ctx.Done():
		}
		break
	}
	grace := gw.ShutdownGrace()
	logger.Info("shutting down; draining in-flight requests", "grace", grace.String())
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := gw.Shutdown(sctx); err != nil {
		logger.Warn("shutdown grace expired; remaining connections closed", "error", err)
	}
	<-serveErr
	logger.Info("gateway stopped")
	return 0
}

// metricsWhere says where /metrics is served, for the startup log.
func metricsWhere(metricsListen string, token bool) string {
	where := "on this listener"
	if metricsListen != "" {
		where = "only on --metrics-listen"
	}
	if token {
		return where + ", bearer token required"
	}
	return where + ", open"
}

// deploymentSource is how the gateway (re)loads its deployment: the file at
// path, or the embedded demo deployment. With OPENAI_API_KEY set and no file,
// the demo application's key is generated here, once, so that reloads keep
// it and the public config.DemoKey never fronts a real provider key; it is
// returned for the operator, else demoKey is "".
func deploymentSource(path string) (load func() (*config.Deployment, error), demoKey string, err error) {
	if path != "" {
		return func() (*config.Deployment, error) { return config.Load(path) }, "", nil
	}
	if os.Getenv(config.EnvOpenAIKey) != "" {
		if demoKey, err = newKey(rand.Reader); err != nil {
			return nil, "", fmt.Errorf("generating the demo key: %w", err)
		}
	}
	return func() (*config.Deployment, error) { return config.Default(os.Getenv, demoKey) }, demoKey, nil
}

// logDeployment logs what the gateway serves: each route with its provider's
// upstream URLs, and the counter store in use (without credentials).
func logDeployment(logger *slog.Logger, d *config.Deployment) {
	urls := map[string]string{}
	for _, p := range d.Providers {
		targets := p.Targets
		if len(targets) == 0 {
			targets = []string{p.URL}
		}
		urls[p.Name] = strings.Join(targets, ",")
	}
	for _, r := range d.Routes {
		logger.Info("route", "name", r.Name, "context", r.Context, "provider", r.Provider,
			"upstream", urls[r.Provider], "policies", len(r.Policies))
	}
	logger.Info("counter store", counterconfig.Describe(d.Counters)...)
}

func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("bad --log-level %q", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch strings.ToLower(format) {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("bad --log-format %q (text or json)", format)
}

// startMock serves the upstream simulator at the default deployment's
// provider address, for `make run` without a provider key.
func startMock(logger *slog.Logger) (func(), error) {
	addr := strings.TrimPrefix(config.MockUpstreamURL, "http://")
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: mockllm.New(mockllm.Options{Counter: tokencount.New()}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	logger.Info("no OPENAI_API_KEY: mock upstream started", "url", config.MockUpstreamURL)
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}
