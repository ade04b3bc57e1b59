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
	if code, ok := parseFlags(fs, "sluice mock-llm [--listen ADDR]", args, stdout, stderr); !ok {
		return code
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintf(stderr, "sluice mock-llm: %v\n", err)
		return 1
	}
	counter := tokencount.New()
	counter.Warm()
	srv := &http.Server{
		Handler:           mockllm.New(mockllm.Options{Counter: counter}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	fmt.Fprintf(stdout, "sluice mock-llm listening on http://%s\n", ln.Addr())
	if err := serve.UntilSignal(srv, ln); err != nil {
		fmt.Fprintf(stderr, "sluice mock-llm: %v\n", err)
		return 1
	}
	return 0
}
