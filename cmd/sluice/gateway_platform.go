package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"time"

	"sluice/gateway/pull"
	"sluice/internal/app"
	"sluice/meter/accesslog"
	"sluice/meter/ship"
)

// gatewayPlatform holds the flags of `sluice gateway --platform`.
type gatewayPlatform struct {
	url, cache    string
	token         *string
	wait          time.Duration
	spoolMaxBytes int64
}

func platformFlags(fs *flag.FlagSet) *gatewayPlatform {
	p := &gatewayPlatform{}
	fs.StringVar(&p.url, "platform", "", "take the deployment from the platform at this URL (http://host:port) instead of a file")
	p.token = fs.String("token", "", "the gateway's platform token (default: $SLUICE_GATEWAY_TOKEN)")
	fs.StringVar(&p.cache, "cache", "", "where to keep the last good deployment (default: sluice-gateway-cache in the working directory)")
	fs.DurationVar(&p.wait, "platform-timeout", 10*time.Second, "how long to wait for the platform at start before serving the cached deployment")
	fs.Int64Var(&p.spoolMaxBytes, "spool-max-bytes", 0, "bound of the usage record spool (<cache>.meter) in bytes, when the deployment's meter.spool.maxBytes is not set (default 256 MiB)")
	return p
}

// run is `sluice gateway --platform`.
func (p *gatewayPlatform) run(ctx context.Context, cfgPath, listen, pricingFile string, logger *slog.Logger, access *accesslog.Writer, stdout, stderr io.Writer) int {
	if cfgPath != "" {
		fmt.Fprintln(stderr, "sluice gateway: give --config or --platform, not both")
		return 2
	}
	token := *p.token
	if token == "" {
		token = os.Getenv("SLUICE_GATEWAY_TOKEN")
	}
	if token == "" {
		fmt.Fprintln(stderr, "sluice gateway: --platform needs --token (or SLUICE_GATEWAY_TOKEN): create one with POST /api/v1/gateways")
		return 2
	}
	path := p.cache
	if path == "" {
		path = "sluice-gateway-cache"
	}
	cache, err := pull.NewCache(path, token)
	if err != nil {
		fmt.Fprintf(stderr, "sluice gateway: %v\n", err)
		return 1
	}
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyFromEnvironment, MaxIdleConnsPerHost: 2, IdleConnTimeout: 90 * time.Second}}
	return pulledGateway{listen: listen, pricingFile: pricingFile, logger: logger, access: access, stdout: stdout, startTimeout: p.wait,
		feed: &pull.HTTPFeed{URL: p.url, Token: token, Client: client}, cache: cache,
		meter: app.MeterOptions{Platform: &ship.HTTPSender{URL: p.url, Token: token, Client: client}, SpoolDir: path + ".meter",
			SpoolMaxBytes: p.spoolMaxBytes},
	}.run(ctx, stderr)
}
