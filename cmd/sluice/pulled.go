package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sluice/counter"
	"time"

	"sluice/deployment"
	"sluice/gateway/pull"
	"sluice/internal/app"
	"sluice/meter/accesslog"
)

// pulledGateway configures a gateway whose deployment comes from the
// platform (`sluice gateway --platform`, and the gateway of `sluice serve`).
type pulledGateway struct {
	listen      string
	pricingFile string
	logger      *slog.Logger
	// access is the access log's writer (nil: none).
	access *accesslog.Writer
	stdout io.Writer
	feed   pull.Feed
	cache  *pull.Cache
	// startTimeout bounds the wait for the platform before the cache is used.
	startTimeout time.Duration
	// meter ships the usage records to the platform.
	meter app.MeterOptions
	// counters, when set, is the counter store (the caller's), else the
	// deployment's counters section chooses it.
	counters counter.Store
}

// run serves until ctx is done, then drains. It returns the exit code.
func (o pulledGateway) run(ctx context.Context, stderr io.Writer) int {
	logger := o.logger
	fail := func(err error) int {
		fmt.Fprintf(stderr, "sluice gateway: %v\n", err)
		return 1
	}
	usage := pull.NewKeyUsage(time.Now)
	var gw *app.Gateway
	src := &pull.Source{Feed: o.feed, Cache: o.cache, Keys: usage, Logger: logger,
		Apply: func(d *deployment.Deployment) error { return gw.Apply(d) }}
	d, first, cached, err := src.Initial(ctx, o.startTimeout)
	if err != nil {
		return fail(err)
	}
	gw, err = app.NewGateway(d, app.GatewayOptions{
		Services: app.Services{Logger: logger, AccessLog: o.access, PricingFile: o.pricingFile, Counters: o.counters},
		// Every key lookup is recorded for the platform's "last used".
		WrapKeys: usage.Wrap,
		Meter:    o.meter,
		Tracing:  tracingFromEnv(),
	})
	if err != nil {
		return fail(err)
	}
	defer gw.Close()
	src.Started(first, cached)

	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fail(err)
	}
	logger.Info("gateway listening", "addr", ln.Addr().String(), "deployment", first.Version, "cached", cached, "routes", len(d.Routes))
	fmt.Fprintf(o.stdout, "sluice gateway listening on http://%s\n", ln.Addr())

	pollCtx, stopPoll := context.WithCancel(ctx)
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		src.Run(pollCtx)
	}()
	defer func() { stopPoll(); <-polled }()
	if err := gw.Run(ctx, ln, nil); err != nil {
		logger.Error("server stopped", "error", err)
		return 1
	}
	return 0
}
