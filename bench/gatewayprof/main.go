// Command gatewayprof runs a gateway in-process from a deployment file,
// assembled by the wiring (internal/app) with the services `sluice gateway`
// gets (the counter store of the file's counters section, the pricing
// catalog, the tokenizer), with net/http/pprof on a separate loopback
// address. It exists to profile the data plane under load
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

	"sluice/deployment/yamlfile"
	"sluice/internal/app"
	"sluice/internal/serve"
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
	dep, err := yamlfile.Load(*cfg)
	if err != nil {
		fmt.Fprintf(stderr, "gatewayprof: %v\n", err)
		return 1
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	gw, err := app.NewGateway(dep, app.GatewayOptions{Services: app.Services{Logger: logger}})
	if err != nil {
		fmt.Fprintf(stderr, "gatewayprof: %v\n", err)
		return 1
	}
	defer gw.Close()

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
