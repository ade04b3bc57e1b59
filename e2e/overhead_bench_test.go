package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"sluice/deployment/yamlfile"
	"sluice/internal/app"
	"sluice/internal/linebuf"
	"sluice/internal/proctest"
	"sluice/meter/accesslog"
	"sluice/mockllm"
	"sluice/tokencount"
)

// benchChatBody is the request both benchmarks send (the loadgen default).
const benchChatBody = `{"model":"gpt-4o-mini","messages":[{"role":"system","content":"You are a terse assistant."},{"role":"user","content":"Summarise the benefits of connection pooling in one sentence."}],"max_tokens":16}`

// cannedTransport answers every request with one recorded upstream response,
// without a network: the benchmarks below then count only the proxy's own
// work and allocations, not the upstream's or the socket's.
type cannedTransport struct {
	status int
	header http.Header
	body   []byte
}

func (c *cannedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		_, _ = io.Copy(io.Discard, r.Body)
		_ = r.Body.Close()
	}
	return &http.Response{
		Status:        strconv.Itoa(c.status) + " " + http.StatusText(c.status),
		StatusCode:    c.status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        c.header.Clone(),
		Body:          io.NopCloser(bytes.NewReader(c.body)),
		ContentLength: int64(len(c.body)),
		Request:       r,
	}, nil
}

// copyBufferPool is an httputil.BufferPool over sync.Pool, so the baseline
// does not allocate a 32 KiB copy buffer per request (bench/bareproxy pools
// them too).
type copyBufferPool struct{ p sync.Pool }

func (b *copyBufferPool) Get() []byte {
	if buf, ok := b.p.Get().(*[]byte); ok {
		return *buf
	}
	return make([]byte, 32<<10)
}

func (b *copyBufferPool) Put(buf []byte) { b.p.Put(&buf) }

// recordMockChat captures the mock upstream's answer to benchChatBody.
func recordMockChat(tb testing.TB) *cannedTransport {
	tb.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader([]byte(benchChatBody)))
	req.Header.Set("Content-Type", "application/json")
	mockllm.New(mockllm.Options{}).ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		tb.Fatalf("mock answered %d: %s", rec.Code, rec.Body.String())
	}
	h := rec.Header().Clone()
	h.Del("Content-Length")
	return &cannedTransport{status: rec.Code, header: h, body: rec.Body.Bytes()}
}

// BenchmarkHandlerOverhead serves one chat completion per iteration through
// a handler whose upstream is a canned in-memory response. "bareproxy" is
// httputil.ReverseProxy; "gateway" is the gateway with api-key-auth and
// model-access (the bench/gateway.yaml chain). The difference in ns/op and
// allocs/op is the gateway's own per-request cost.
func BenchmarkHandlerOverhead(b *testing.B) {
	canned := recordMockChat(b)
	send := func(b *testing.B, h http.Handler, path string) {
		b.Helper()
		b.ReportAllocs()
		cpu0, _ := proctest.Usage()
		for b.Loop() {
			serveBenchChat(b, h, path)
		}
		cpu1, _ := proctest.Usage()
		b.ReportMetric(float64(cpu1-cpu0)/float64(b.N), "cpu-ns/op")
	}

	b.Run("bareproxy", func(b *testing.B) {
		target, _ := url.Parse("http://upstream.invalid")
		rp := &httputil.ReverseProxy{
			Rewrite: func(pr *httputil.ProxyRequest) {
				pr.Out.URL.Path = pr.In.URL.Path[len("/openai"):]
				pr.SetURL(target)
			},
			Transport:  canned,
			BufferPool: &copyBufferPool{},
		}
		send(b, rp, "/openai/v1/chat/completions")
	})

	b.Run("gateway", func(b *testing.B) {
		dep, err := yamlfile.Parse(deploymentYAML("http://upstream.invalid"), "overhead benchmark deployment")
		if err != nil {
			b.Fatal(err)
		}
		gw, err := app.NewGateway(dep, app.GatewayOptions{
			Services:  app.Services{Logger: slog.New(slog.DiscardHandler), Tokens: tokencount.New()},
			Transport: canned,
		})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = gw.Close() })
		send(b, gw.Handler(), "/openai/v1/chat/completions")
	})
}

// BenchmarkHandlerMetering is BenchmarkHandlerOverhead's gateway with the
// meter off (`meter: {sink: none, accessLog: off}`), with the access log
// alone (text, at info, to a file; written line by line, and batched as
// sluice gateway writes it), with the access log and the usage records in a
// JSON lines file, with the access log and the platform sink (the spool,
// shipped by its shipper to a sender that discards), and with the meter off
// and tracing on (an
// OTLP/HTTP exporter to a local receiver that discards): the differences
// are metering's and tracing's per-request cost (docs/benchmarks.md §12).
func BenchmarkHandlerMetering(b *testing.B) {
	canned := recordMockChat(b)
	otlp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	b.Cleanup(otlp.Close)
	for _, v := range []struct {
		name, meter          string
		log, buffered, trace bool
	}{
		{name: "off", meter: `meter: {sink: none, accessLog: "off"}`},
		{name: "accesslog-unbuffered", meter: `meter: {sink: none}`, log: true},
		{name: "accesslog", meter: `meter: {sink: none}`, log: true, buffered: true},
		{name: "jsonl+accesslog", meter: `meter: {sink: jsonl, jsonl: {path: "%s"}}`, log: true, buffered: true},
		{name: "spool+accesslog", meter: `meter: {sink: platform, spool: {dir: "%s"}}`, log: true, buffered: true},
		{name: "off+tracing", meter: `meter: {sink: none, accessLog: "off"}`, trace: true},
	} {
		b.Run(v.name, func(b *testing.B) {
			dir := b.TempDir()
			doc := append(deploymentYAML("http://upstream.invalid"), '\n')
			var mo app.MeterOptions
			switch {
			case strings.Contains(v.meter, "spool"):
				doc = fmt.Appendf(doc, v.meter, filepath.Join(dir, "spool"))
				mo.Platform = discardSender{}
			case strings.Contains(v.meter, "%s"):
				doc = fmt.Appendf(doc, v.meter, filepath.Join(dir, "usage.jsonl"))
			default:
				doc = append(doc, v.meter...)
			}
			dep, err := yamlfile.Parse(doc, "metering benchmark deployment")
			if err != nil {
				b.Fatal(err)
			}
			var access *accesslog.Writer
			if v.log {
				f, err := os.Create(filepath.Join(dir, "gateway.log"))
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = f.Close() })
				var w io.Writer = f
				if v.buffered {
					// As sluice gateway writes it (cmd/sluice newAccessLogger).
					bw := linebuf.New(f, 0, 0)
					b.Cleanup(func() { _ = bw.Close() })
					w = bw
				}
				if access, err = accesslog.New(w, "text", slog.LevelInfo, nil); err != nil {
					b.Fatal(err)
				}
			}
			if v.trace {
				b.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlp.URL)
			}
			gw, err := app.NewGateway(dep, app.GatewayOptions{
				Services:  app.Services{Logger: slog.New(slog.DiscardHandler), AccessLog: access, Tokens: tokencount.New()},
				Transport: canned,
				Tracing:   app.TracingOptions{Enabled: v.trace},
				Meter:     mo,
			})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = gw.Close() })
			h := gw.Handler()
			b.ReportAllocs()
			cpu0, _ := proctest.Usage()
			for b.Loop() {
				serveBenchChat(b, h, "/openai/v1/chat/completions")
			}
			// CPU time of the whole process (every goroutine: the exporter,
			// the fsync loop, the GC) per request: on a shared machine it
			// moves far less than ns/op, which counts waiting for a core.
			cpu1, _ := proctest.Usage()
			b.ReportMetric(float64(cpu1-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// discardSender is a platform that takes every batch of usage records and
// keeps none.
type discardSender struct{}

func (discardSender) Send(context.Context, []byte) error { return nil }

// serveBenchChat serves benchChatBody at path through h and fails unless it
// answered 200.
func serveBenchChat(b *testing.B, h http.Handler, path string) {
	serveBenchChatAs(b, h, path, npmAPIKey)
}

// serveBenchChatAs is serveBenchChat with the API key key.
func serveBenchChatAs(b *testing.B, h http.Handler, path, key string) {
	req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader([]byte(benchChatBody)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		b.Fatalf("status %d: %s", rec.Code, rec.Body.String())
	}
}

// BenchmarkFullChainOverhead is BenchmarkHandlerOverhead's gateway case with
// the full chain of bench/fullchain.yaml (auth, backend and consumer token
// limits, a consumer cost budget, llm-cost; memory counters) and the meter
// as a gateway run from that file has it, the access log written at info
// to io.Discard.
func BenchmarkFullChainOverhead(b *testing.B) {
	canned := recordMockChat(b)
	b.Setenv("SLUICE_BENCH_UPSTREAM", "http://upstream.invalid")
	dep, err := yamlfile.Load("../bench/fullchain.yaml")
	if err != nil {
		b.Fatal(err)
	}
	gw, err := app.NewGateway(dep, app.GatewayOptions{
		Services:  app.Services{Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)), Tokens: tokencount.New()},
		Transport: canned,
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = gw.Close() })
	h := gw.Handler()
	b.ReportAllocs()
	cpu0, _ := proctest.Usage()
	for b.Loop() {
		serveBenchChatAs(b, h, "/openai/v1/chat/completions", "sk-sluice-bench")
	}
	cpu1, _ := proctest.Usage()
	b.ReportMetric(float64(cpu1-cpu0)/float64(b.N), "cpu-ns/op")
}
