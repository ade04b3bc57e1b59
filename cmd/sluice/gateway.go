package main

import (
	"context"
	"crypto/rand"
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

	"sluice/deployment"
	"sluice/deployment/demo"
	"sluice/deployment/yamlfile"
	"sluice/gateway/filesource"
	"sluice/internal/app"
	"sluice/internal/linebuf"
	"sluice/meter/accesslog"
	"sluice/mockllm"
	"sluice/tokencount"
)

const gatewaySynopsis = `sluice gateway [--config FILE] [--listen ADDR] [--metrics-listen ADDR] [flags]

Serves the deployment in FILE (reloaded when it changes and on SIGHUP). Without
--config it serves the embedded demo deployment: against the built-in mock
upstream with the demo key sk-sluice-demo, or, when OPENAI_API_KEY is set,
against api.openai.com (or OPENAI_BASE_URL) with a key generated at start and
printed once on stderr.`

// gatewayFlags are the flags of `sluice gateway`.
type gatewayFlags struct {
	config, listen, metricsListen, logFormat, logLevel, pricing string
	watchEvery                                                  time.Duration
	platform                                                    *gatewayPlatform
}

func cmdGateway(args []string, stdout, stderr io.Writer) int {
	var f gatewayFlags
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	fs.StringVar(&f.config, "config", "", "deployment file (default: the embedded demo deployment)")
	fs.StringVar(&f.listen, "listen", "127.0.0.1:8080", "address to listen on")
	fs.StringVar(&f.metricsListen, "metrics-listen", "", "serve /metrics only on this address, not on --listen")
	fs.StringVar(&f.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&f.pricing, "pricing", "", "extra model prices (YAML or JSON) on top of the embedded table")
	fs.DurationVar(&f.watchEvery, "watch-interval", 2*time.Second, "how often to check the config file for changes")
	f.platform = platformFlags(fs)
	if code, ok := parseFlags(fs, gatewaySynopsis, args, stdout, stderr); !ok {
		return code
	}
	logger, err := newLogger(stderr, f.logFormat, f.logLevel)
	if err != nil {
		fmt.Fprintf(stderr, "sluice gateway: %v\n", err)
		return 2
	}
	logger.Info("sluice gateway starting", "version", buildVersion())
	access, closeAccess, err := newAccessLogger(stderr, f.logFormat, f.logLevel)
	if err != nil {
		fmt.Fprintf(stderr, "sluice gateway: %v\n", err)
		return 2
	}
	defer closeAccess()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if f.platform.url != "" {
		return f.platform.run(ctx, f.config, f.listen, f.pricing, logger, access, stdout, stderr)
	}
	return f.serveFile(ctx, logger, access, stdout, stderr)
}

// serveFile serves the deployment file (or the demo deployment) until ctx
// is done, reloading it when it changes and on SIGHUP. It returns the exit
// code.
func (f gatewayFlags) serveFile(ctx context.Context, logger *slog.Logger, access *accesslog.Writer, stdout, stderr io.Writer) int {
	fail := func(err error) int {
		fmt.Fprintf(stderr, "sluice gateway: %v\n", err)
		return 1
	}
	load, demoKey, err := deploymentSource(f.config)
	if err != nil {
		return fail(err)
	}
	d, err := load()
	if err != nil {
		return fail(err)
	}
	stopMock, err := announceDemo(d, f.config, demoKey, logger, stderr)
	if err != nil {
		return fail(fmt.Errorf("starting the mock upstream: %w", err))
	}
	defer stopMock()
	gw, err := app.NewGateway(d, app.GatewayOptions{
		Tracing:         tracingFromEnv(),
		Services:        app.Services{Logger: logger, AccessLog: access, PricingFile: f.pricing},
		SeparateMetrics: f.metricsListen != "",
	})
	if err != nil {
		return fail(err)
	}
	defer gw.Close()
	logRoutes(logger, d)
	// Reloads are set up before the gateway says it listens: a SIGHUP that
	// came earlier would end the process (its default action), and a file
	// written earlier would be the watcher's baseline, its change never seen.
	defer reloadOnSignalAndChange(ctx, gw, load, f.config, f.watchEvery, logger)()
	ln, mln, err := listeners(f.listen, f.metricsListen)
	if err != nil {
		return fail(err)
	}
	if mln != nil {
		logger.Info("metrics listening", "addr", mln.Addr().String(), "url", "http://"+mln.Addr().String()+"/metrics",
			"token", d.Server.MetricsToken != "")
	}
	logger.Info("gateway listening", "addr", ln.Addr().String(), "config", d.Source, "routes", len(d.Routes),
		"metrics", metricsWhere(f.metricsListen, d.Server.MetricsToken != ""))
	fmt.Fprintf(stdout, "sluice gateway listening on http://%s\n", ln.Addr())
	if err := gw.Run(ctx, ln, mln); err != nil {
		logger.Error("server stopped", "error", err)
		return 1
	}
	return 0
}

// reloadOnSignalAndChange reloads gw with load on SIGHUP and, when path is
// set, when the file's content changes (polled every watchEvery), until ctx
// is done. It returns the function that stops the SIGHUP handling.
func reloadOnSignalAndChange(ctx context.Context, gw *app.Gateway, load func() (*deployment.Deployment, error),
	path string, watchEvery time.Duration, logger *slog.Logger) (stop func()) {
	reload := func(why string) {
		logger.Info("reloading configuration", "trigger", why)
		if gw.Reload(load) == nil {
			logger.Info("configuration applied")
		}
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		for range hup {
			reload("SIGHUP")
		}
	}()
	if path != "" {
		filesource.Watch(ctx, path, watchEvery, func() { reload("file changed") })
	}
	return func() { signal.Stop(hup) }
}

// listeners opens the proxy listener and, when metricsListen is set, the
// metrics one.
func listeners(listen, metricsListen string) (ln, mln net.Listener, err error) {
	ln, err = net.Listen("tcp", listen)
	if err != nil || metricsListen == "" {
		return ln, nil, err
	}
	mln, err = net.Listen("tcp", metricsListen)
	if err != nil {
		ln.Close()
		return nil, nil, fmt.Errorf("--metrics-listen: %w", err)
	}
	return ln, mln, nil
}

// announceDemo tells the operator about the demo deployment: with a real
// provider key, the key generated for this run (printed once, on stderr,
// never logged: it is a credential); without one, it starts the mock
// upstream the demo points at. A deployment file is not the demo. stop
// stops what was started (nothing, but for the mock).
func announceDemo(d *deployment.Deployment, cfgPath, demoKey string, logger *slog.Logger, stderr io.Writer) (stop func(), err error) {
	stop = func() {}
	switch {
	case demoKey != "":
		fmt.Fprintf(stderr, "\n%s is set: the demo deployment sends requests to %s with it, so the public demo key %s is disabled.\n"+
			"API key for this run (generated at start, shown only now):\n\n    %s\n\n",
			demo.EnvOpenAIKey, d.Providers[0].URL, demo.Key, demoKey)
		logger.Warn("demo deployment with a real provider key: the public demo key is disabled; use the key printed above",
			"upstream", d.Providers[0].URL)
	case cfgPath == "":
		return startMock(logger)
	}
	return stop, nil
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
// it and the public demo.Key never fronts a real provider key; it is
// returned for the operator, else demoKey is "".
func deploymentSource(path string) (load func() (*deployment.Deployment, error), demoKey string, err error) {
	if path != "" {
		return func() (*deployment.Deployment, error) { return yamlfile.Load(path) }, "", nil
	}
	if os.Getenv(demo.EnvOpenAIKey) != "" {
		if demoKey, err = newKey(rand.Reader); err != nil {
			return nil, "", fmt.Errorf("generating the demo key: %w", err)
		}
	}
	return func() (*deployment.Deployment, error) { return demo.Deployment(os.Getenv, demoKey) }, demoKey, nil
}

// logRoutes logs what the gateway serves: each route with its provider's
// upstream URLs. (The wiring logs the counter store it built.)
func logRoutes(logger *slog.Logger, d *deployment.Deployment) {
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
}

// newAccessLogger is the access log's writer: the process log's format and
// level on w through a linebuf.Writer, so that a line per request is not a
// write(2) per request (lines wait at most linebuf.DefaultInterval). close
// flushes it.
func newAccessLogger(w io.Writer, format, level string) (l *accesslog.Writer, closeFn func(), err error) {
	lv, err := parseLevel(level)
	if err != nil {
		return nil, nil, err
	}
	bw := linebuf.New(w, 0, 0)
	l, err = accesslog.New(bw, format, lv, nil)
	if err != nil {
		_ = bw.Close()
		return nil, nil, err
	}
	return l, func() { _ = bw.Close() }, nil
}

func parseLevel(level string) (slog.Level, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return 0, fmt.Errorf("bad --log-level %q", level)
	}
	return lv, nil
}

func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	lv, err := parseLevel(level)
	if err != nil {
		return nil, err
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
	addr := strings.TrimPrefix(demo.MockUpstreamURL, "http://")
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: mockllm.New(mockllm.Options{Counter: tokencount.New()}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	logger.Info("no OPENAI_API_KEY: mock upstream started", "url", demo.MockUpstreamURL)
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}
