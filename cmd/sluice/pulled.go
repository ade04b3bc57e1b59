package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"

	"sluice/counter/counterconfig"
	"sluice/gateway"
	"sluice/gateway/config"
	"sluice/gateway/pull"
	"sluice/policies"
	"sluice/policies/builtin"
	"sluice/pricing"
	"sluice/tokencount"
)

// pulledGateway configures a gateway whose deployment comes from the
// platform (`sluice gateway --platform`, and the gateway of `sluice serve`).
// The assembly mirrors cmdGateway's; the wiring package of the layout issue
// is to make it one.
type pulledGateway struct {
	listen      string
	pricingFile string
	logger      *slog.Logger
	stdout      io.Writer
	feed        pull.Feed
	cache       *pull.Cache
	// startTimeout bounds the wait for the platform before the cache is used.
	startTimeout time.Duration
}

// run serves until ctx is done, then drains. It returns the exit code.
func (o pulledGateway) run(ctx context.Context, stderr io.Writer) int {
	logger := o.logger
	usage := pull.NewKeyUsage(time.Now)
	var gw *gateway.Gateway
	src := &pull.Source{Feed: o.feed, Cache: o.cache, Keys: usage, Logger: logger,
		Apply: func(d *config.Deployment) error { return gw.Apply(d) }}
	d, first, cached, err := src.Initial(ctx, o.startTimeout)
	if err != nil {
		fmt.Fprintf(stderr, "sluice gateway: %v\n", err)
		return 1
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
	prices, err := pricing.New(o.pricingFile)
	if err != nil {
		fmt.Fprintf(stderr, "sluice gateway: %v\n", err)
		return 1
	}
	tokens := tokencount.New()
	tokens.Warm()
	running := d.Counters
	gw, err = gateway.New(gateway.Options{
		Registry: builtin.Registry(),
		Logger:   logger,
		Metrics:  reg,
		Services: policies.Services{Logger: logger, Now: time.Now, Counters: counterStore, Pricing: prices, Tokens: tokens, Metrics: reg},
		// Every key lookup is recorded for the platform's "last used".
		KeyIndex: func(d *config.Deployment) (policies.KeyIndex, error) {
			if !counterconfig.Equal(d.Counters, running) {
				logger.Warn("the counters section changed; the counter store is chosen at startup and the running one stays until restart",
					"running", running.Backend, "deployment", d.Counters.Backend)
			}
			return usage.Wrap(config.NewKeyIndex(d)), nil
		},
	})
	if err != nil {
		fmt.Fprintf(stderr, "sluice gateway: %v\n", err)
		return 1
	}
	if err := gw.Apply(d); err != nil {
		fmt.Fprintf(stderr, "sluice gateway: deployment v%d: %v\n", first.Version, err)
		return 1
	}
	src.Started(first, cached)

	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		fmt.Fprintf(stderr, "sluice gateway: %v\n", err)
		return 1
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- gw.Serve(ln) }()
	logger.Info("gateway listening", "addr", ln.Addr().String(), "deployment", first.Version, "cached", cached, "routes", len(d.Routes))
	fmt.Fprintf(o.stdout, "sluice gateway listening on http://%s\n", ln.Addr())

	pollCtx, stopPoll := context.WithCancel(ctx)
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		src.Run(pollCtx)
	}()
	defer func() { stopPoll(); <-polled }()

	select {
	case err := <-serveErr:
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("server stopped", "error", err)
			return 1
		}
		return 0
	case <-ctx.Done():
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
