// Command gatewayprof runs a gateway in-process from a deployment file, built
// through the gateway package's public API, with net/http/pprof on a separate
// loopback address. It exists to profile the data plane under load
// (docs/benchmarks.md); benchmark figures come from the real `sluice gateway`.
package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"time"

	"sluice/gateway"
	"sluice/gateway/config"
	"sluice/internal/serve"
	"sluice/policies"
	"sluice/policies/builtin"
	"sluice/tokencount"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gatewayprof", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := fs.String("config", "bench/gateway.yaml", "deployment file")
	listen := fs.String("listen", "127.0.0.1:9200", "gateway address")
	pprofAddr := fs.String("pprof", "127.0.0.1:6060", "pprof address (/debug/pprof/)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	dep, err := config.Load(*cfg)
	if err != nil {
		fmt.Fprintf(stderr, "gatewayprof: %v\n", err)
		return 1
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	gw, err := gateway.New(gateway.Options{
		Registry: builtin.Registry(),
		Logger:   logger,
		Services: policies.Services{Tokens: tokencount.New()},
		KeyIndex: func(d *config.Deployment) (policies.KeyIndex, error) {
			return config.NewKeyIndex(d), nil
		},
		BuildChains: config.BuildChains,
	})
	if err == nil {
		err = gw.Apply(dep)
	}
	if err != nil {
		fmt.Fprintf(stderr, "gatewayprof: %v\n", err)
		return 1
	}

	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	pln, err := net.Listen("tcp", *pprofAddr)
	if err != nil {
		fmt.Fprintf(stderr, "gatewayprof: %v\n", err)
		return 1
	}
	psrv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = psrv.Serve(pln) }()

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintf(stderr, "gatewayprof: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "gatewayprof: gateway on http://%s, pprof on http://%s/debug/pprof/\n", ln.Addr(), pln.Addr())
	if err := serve.UntilSignal(gw, ln, psrv); err != nil {
		fmt.Fprintf(stderr, "gatewayprof: %v\n", err)
		return 1
	}
	return 0
}
