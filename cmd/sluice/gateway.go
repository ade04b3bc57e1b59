package main

import (
	"context"
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

	"sluice/gateway"
	"sluice/gateway/config"
	"sluice/gateway/counters"
	"sluice/mockllm"
	"sluice/policies"
	"sluice/policies/builtin"
	"sluice/pricing"
	"sluice/tokencount"
)

func cmdGateway(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "", "deployment file (default: the embedded demo deployment)")
	listen := fs.String("listen", "127.0.0.1:8080", "address to listen on")
	logFormat := fs.String("log-format", "text", "log format: text or json")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn or error")
	pricingFile := fs.String("pricing", "", "extra model prices (YAML or JSON) on top of the embedded table")
	watchEvery := fs.Duration("watch-interval", 2*time.Second, "how often to check the config file for changes")
	pf := platformFlags(fs)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "sluice gateway: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	logger, err := newLogger(stderr, *logFormat, *logLevel)
	if err != nil {
		fmt.Fprintf(stderr, "sluice gateway: %v\n", err)
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if pf.url != "" {
		return pf.run(ctx, *cfgPath, *listen, *pricingFile, logger, stdout, stderr)
	}

	var load func() (*config.Deployment, error)
	if *cfgPath != "" {
		path := *cfgPath
		load = func() (*config.Deployment, error) { return config.Load(path) }
	} else {
		load = func() (*config.Deployment, error) { return config.Default(os.Getenv) }
	}
	d, err := load()
	if err != nil {
		fmt.Fprintf(stderr, "sluice gateway: %v\n", err)
		return 1
	}

	if *cfgPath == "" && os.Getenv("OPENAI_API_KEY") == "" {
		stopMock, err := startMock(logger)
		if err != nil {
			fmt.Fprintf(stderr, "sluice gateway: starting the mock upstream: %v\n", err)
			return 1
		}
		defer stopMock()
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	redis.SetLogger(&counters.RedisClientLogger{Logger: logger, Interval: 10 * time.Second})
	counterStore, err := counters.New(d.Counters, counters.Options{Logger: logger, Metrics: reg, Now: time.Now})
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
		Registry: builtin.Registry(),
		Logger:   logger,
		Metrics:  reg,
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
	running := d.Counters
	reload := func(why string) {
		logger.Info("reloading configuration", "trigger", why)
		if gw.Reload(func() (*config.Deployment, error) {
			nd, err := load()
			if err == nil && !counters.Equal(nd.Counters, running) {
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
	serveErr := make(chan error, 1)
	go func() { serveErr <- gw.Serve(ln) }()
	logger.Info("gateway listening", "addr", ln.Addr().String(), "config", d.Source, "routes", len(d.Routes))
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
