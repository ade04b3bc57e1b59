package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"sluice/internal/serve"
	"sluice/mockllm"
	"sluice/tokencount"
)

func cmdMockLLM(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("mock-llm", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:9000", "address to listen on")
	capacity := fs.String("capacity", "", "make the mock a saturable model: \"default\" or key=value pairs of sequences, kv, prefill and decode\n(e.g. sequences=16,kv=65536,prefill=8000,decode=50; see docs/mock-llm.md); unset: answer at once")
	usageHeader := fs.String("usage-header", mockllm.DefaultUsageHeader, "request header naming the tenant in GET /mock/usage")
	if code, ok := parseFlags(fs, "sluice mock-llm [--listen ADDR] [--capacity SPEC] [--usage-header NAME]", args, stdout, stderr); !ok {
		return code
	}
	opts := mockllm.Options{UsageHeader: *usageHeader}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if set["capacity"] {
		c, err := mockllm.ParseCapacity(*capacity)
		if err != nil {
			fmt.Fprintf(stderr, "sluice mock-llm: --capacity: %v\n", err)
			return 2
		}
		opts.Capacity = &c
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintf(stderr, "sluice mock-llm: %v\n", err)
		return 1
	}
	counter := tokencount.New()
	counter.Warm()
	opts.Counter = counter
	srv := &http.Server{
		Handler:           mockllm.New(opts),
		ReadHeaderTimeout: 10 * time.Second,
	}
	if opts.Capacity != nil {
		fmt.Fprintf(stdout, "sluice mock-llm: saturable model, capacity %s\n", opts.Capacity)
	}
	fmt.Fprintf(stdout, "sluice mock-llm listening on http://%s\n", ln.Addr())
	if err := serve.UntilSignal(srv, ln); err != nil {
		fmt.Fprintf(stderr, "sluice mock-llm: %v\n", err)
		return 1
	}
	return 0
}
