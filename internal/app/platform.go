package app

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"sluice/counter"
	"sluice/counter/counterconfig"
	"sluice/deployment"
	"sluice/platform"
	"sluice/policies/builtin"
	"sluice/webui"
)

// PlatformOptions configure OpenPlatform: the platform.Options that are the
// process's choice (the registry and the console are the wiring's).
type PlatformOptions struct {
	// DataDir, DatabaseURL, AdminToken, SecretKey: see platform.Options.
	DataDir, DatabaseURL, AdminToken, SecretKey string
	// UsageRetention: see platform.Options.
	UsageRetention time.Duration
	// Announce receives the one-time admin token message.
	Announce io.Writer
	Logger   *slog.Logger
	// Counters, CounterStore: see platform.Options.
	Counters     deployment.Counters
	CounterStore counter.Store
}

// OpenPlatform opens the control plane with the built-in policy catalog and
// the embedded web console. The caller closes it.
func OpenPlatform(ctx context.Context, o PlatformOptions) (*platform.Platform, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.DatabaseURL != "" && o.SecretKey == "" {
		o.Logger.Warn("PostgreSQL without SLUICE_SECRET_KEY: upstream keys are sealed with the key file in the data directory; every platform replica needs the same key", "data", o.DataDir)
	}
	console, err := webui.NewHandler(webui.Build())
	if err != nil {
		return nil, err
	}
	return platform.Open(ctx, platform.Options{
		DataDir: o.DataDir, DatabaseURL: o.DatabaseURL, AdminToken: o.AdminToken, SecretKey: o.SecretKey,
		Announce: o.Announce, Registry: builtin.Registry(), Logger: o.Logger, Console: console, Counters: o.Counters,
		CounterStore:   o.CounterStore,
		UsageRetention: o.UsageRetention,
	})
}

// ServePlatform serves p's API and console on ln until ctx is done. Request
// contexts end with ctx, so waiting long polls answer at once on shutdown.
func ServePlatform(ctx context.Context, p *platform.Platform, ln net.Listener, logger *slog.Logger) error {
	srv := &http.Server{
		Handler:           p.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       120 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	if err := <-done; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// SharedCounters is the counter store `sluice serve` gives both its
// platform and its in-process gateway when the counters setting c is the
// memory store, so that the platform's budgets are the gateway's own
// counters; nil for a Redis setting (each opens its own store on the same
// keys). The caller closes it after both.
func SharedCounters(c deployment.Counters, now func() time.Time) (counter.Store, error) {
	if c.Backend == counterconfig.Redis {
		return nil, nil
	}
	return counterconfig.New(c, counterconfig.Options{Now: now})
}
