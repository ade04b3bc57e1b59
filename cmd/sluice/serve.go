package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"sluice/gateway/pull"
	"sluice/internal/app"
	"sluice/platform"
	"sluice/platform/delivery"
)

// localGatewayID names the in-process gateway of `sluice serve` in the API.
const localGatewayID = "local"

// cmdServe runs the platform and one gateway in one process. The gateway is
// fed by the platform directly (no HTTP hop), with the same versions and
// check-ins as a gateway that pulls; it serves each provider under
// /<provider name>/.
func cmdServe(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:8080", "address of the gateway")
	pricingFile := fs.String("pricing", "", "extra model prices (YAML or JSON) on top of the embedded table")
	o := addPlatformFlags(fs, false)
	if code, ok := parseFlags(fs, "sluice serve [--listen ADDR] [--admin-listen ADDR] [--data DIR] [--counters-redis URL] [flags]\n\nRuns the platform (API and web console on --admin-listen) and a gateway in\none process; the gateway serves each provider under /<provider name>/.", args, stdout, stderr); !ok {
		return code
	}
	logger, err := newLogger(stderr, *o.logFormat, *o.logLevel)
	if err != nil {
		fmt.Fprintf(stderr, "sluice serve: %v\n", err)
		return 2
	}
	access, closeAccess, err := newAccessLogger(stderr, *o.logFormat, *o.logLevel)
	if err != nil {
		fmt.Fprintf(stderr, "sluice serve: %v\n", err)
		return 2
	}
	defer closeAccess()
	counters, err := o.counters.setting(os.Getenv)
	if err != nil {
		fmt.Fprintf(stderr, "sluice serve: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	shared, err := app.SharedCounters(counters, time.Now)
	if err != nil {
		fmt.Fprintf(stderr, "sluice serve: %v\n", err)
		return 1
	}
	if shared != nil {
		defer shared.Close()
	}
	p, err := o.openWith(ctx, counters, shared, logger, stdout)
	if err != nil {
		fmt.Fprintf(stderr, "sluice serve: %v\n", err)
		return 1
	}
	defer p.Close()
	if err := p.RegisterLocalGateway(ctx, localGatewayID, "in-process gateway (sluice serve)"); err != nil {
		fmt.Fprintf(stderr, "sluice serve: %v\n", err)
		return 1
	}
	ln, err := net.Listen("tcp", *o.adminListen)
	if err != nil {
		fmt.Fprintf(stderr, "sluice serve: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "sluice platform listening on http://%s\nsluice console: http://%s/\n", ln.Addr(), ln.Addr())
	var wg sync.WaitGroup
	platformCtx, stopPlatform := context.WithCancel(context.Background())
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := app.ServePlatform(platformCtx, p, ln, logger); err != nil {
			logger.Error("platform API stopped", "error", err)
			stop()
		}
	}()
	// The gateway drains first, then the platform stops.
	code := pulledGateway{listen: *listen, pricingFile: *pricingFile, logger: logger, access: access, stdout: stdout, counters: shared,
		startTimeout: 10 * time.Second, feed: localFeed{p: p, id: localGatewayID},
		meter: app.MeterOptions{Platform: localUsage{p: p, id: localGatewayID}, SpoolDir: filepath.Join(*o.data, "meter-spool"), GatewayID: localGatewayID},
	}.run(ctx, stderr)
	stopPlatform()
	wg.Wait()
	return code
}

// localFeed feeds the in-process gateway from the platform.
type localFeed struct {
	p  *platform.Platform
	id string
}

func (f localFeed) Next(ctx context.Context, after int64, wait time.Duration) (*pull.Update, error) {
	doc, err := f.p.Deployment(ctx, after, wait)
	if doc == nil {
		return nil, err
	}
	return &pull.Update{Version: doc.Version, Document: doc.Text}, nil
}

func (f localFeed) Report(ctx context.Context, s pull.Status) error {
	return f.p.Report(ctx, f.id, delivery.Status{Version: s.Version, Result: s.Result, Error: s.Error, KeysLastUsed: s.KeysLastUsed})
}

// isHelp reports whether args ask for a command's usage.
func isHelp(args []string) bool {
	return len(args) == 1 && (args[0] == "-h" || args[0] == "--help")
}

// localUsage ships the in-process gateway's usage records to the platform
// in the same process.
type localUsage struct {
	p  *platform.Platform
	id string
}

func (l localUsage) Send(ctx context.Context, body []byte) error {
	return l.p.IngestUsage(ctx, l.id, body)
}
