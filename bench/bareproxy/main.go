// Command bareproxy is the baseline for gateway benchmarks: a plain
// net/http/httputil.ReverseProxy to one upstream, with no routing, policies,
// body parsing or metrics. It uses the gateway's own upstream transport
// (gateway.NewTransport) and the same server timeouts, so the difference
// between the two is what the gateway does per request.
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"sync"
	"time"

	"sluice/gateway"
	"sluice/internal/serve"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bareproxy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:9100", "address to listen on")
	upstream := fs.String("upstream", "http://127.0.0.1:9000", "upstream base URL")
	strip := fs.String("strip-prefix", "", "path prefix removed before forwarding (like a gateway route context)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	target, err := url.Parse(*upstream)
	if err != nil || target.Scheme == "" || target.Host == "" {
		fmt.Fprintf(stderr, "bareproxy: bad -upstream %q\n", *upstream)
		return 2
	}
	prefix := *strip
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			if prefix != "" {
				p := pr.In.URL.Path
				if len(p) >= len(prefix) && p[:len(prefix)] == prefix {
					pr.Out.URL.Path = p[len(prefix):]
					pr.Out.URL.RawPath = ""
				}
			}
			pr.SetURL(target)
		},
		Transport: gateway.NewTransport(),
		// FlushInterval stays 0: ReverseProxy then flushes SSE streams and
		// bodies of unknown length after every write by itself, and a JSON
		// answer of known length is written without a flush per write, as
		// the gateway writes it.
		// Pooled copy buffers, as the gateway pools its body buffers;
		// without a pool ReverseProxy allocates 32 KiB per request.
		BufferPool: &bufferPool{},
		ErrorLog:   log.New(stderr, "bareproxy: ", 0),
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintf(stderr, "bareproxy: %v\n", err)
		return 1
	}
	srv := &http.Server{
		Handler:           rp,
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       120 * time.Second,
		ErrorLog:          log.New(stderr, "bareproxy: ", 0),
	}
	fmt.Fprintf(stdout, "bareproxy listening on http://%s -> %s\n", ln.Addr(), target)
	if err := serve.UntilSignal(srv, ln); err != nil {
		fmt.Fprintf(stderr, "bareproxy: %v\n", err)
		return 1
	}
	return 0
}

// bufferPool is an httputil.BufferPool over sync.Pool; safe for concurrent use.
type bufferPool struct{ p sync.Pool }

func (b *bufferPool) Get() []byte {
	if buf, ok := b.p.Get().(*[]byte); ok {
		return *buf
	}
	return make([]byte, 32<<10)
}

func (b *bufferPool) Put(buf []byte) { b.p.Put(&buf) }
