// Command loadgen sends HTTP load to one URL and reports throughput, latency
// percentiles and errors. It is Sluice's benchmark driver (bench/gateway-vs-proxy.sh).
//
// Two modes:
//   - closed (max throughput): -c connections, each sending its next request
//     as soon as the previous answer is read.
//   - open (fixed rate): requests are dispatched on a fixed schedule at -rate
//     per second, each on its own goroutine, whether or not earlier ones have
//     answered; a slow server therefore faces a growing queue instead of a
//     slower sender (no coordinated omission).
//
// With -url2 (open mode only), requests alternate between the two URLs, each
// receiving -rate per second, and each URL gets its own figures: both then run
// under the same conditions (the same moments of CPU contention on a shared
// machine), which makes their difference far less noisy than two separate
// runs.
//
// Requests started during -warmup are sent but not measured. The run is
// bounded by -warmup + -duration (plus -timeout for the last answers).
//
// The last line of output is machine-readable:
//
//	RESULT label=L mode=M requests=N errors=E rps=X p50_us=.. p90_us=.. p99_us=.. p999_us=.. max_us=..
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// defaultBody is a small chat completion request; the mock upstream answers
// it with 16 generated tokens.
const defaultBody = `{"model":"gpt-4o-mini","messages":[{"role":"system","content":"You are a terse assistant."},{"role":"user","content":"Summarise the benefits of connection pooling in one sentence."}],"max_tokens":16}`

type headerFlags []string

func (h *headerFlags) String() string     { return strings.Join(*h, ", ") }
func (h *headerFlags) Set(v string) error { *h = append(*h, v); return nil }

type options struct {
	url         string
	url2        string
	label2      string
	mode        string
	conns       int
	rate        float64
	duration    time.Duration
	warmup      time.Duration
	method      string
	body        []byte
	header      http.Header
	host        string
	timeout     time.Duration
	maxInflight int
	label       string
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	var headers headerFlags
	var bodyFile, waitURL string
	var waitTimeout time.Duration
	fs.StringVar(&o.url, "url", "", "target URL (required unless -wait)")
	fs.StringVar(&o.mode, "mode", "closed", "closed (max throughput over -c connections) or open (fixed -rate)")
	fs.IntVar(&o.conns, "c", 64, "closed mode: concurrent connections")
	fs.Float64Var(&o.rate, "rate", 1000, "open mode: requests per second")
	fs.DurationVar(&o.duration, "duration", 20*time.Second, "measured duration")
	fs.DurationVar(&o.warmup, "warmup", 2*time.Second, "unmeasured load before the measured duration")
	fs.StringVar(&o.method, "method", http.MethodPost, "HTTP method")
	fs.StringVar(&bodyFile, "body", "", "request body file (default: a built-in chat completion request)")
	fs.Var(&headers, "H", "request header \"Name: value\" (repeatable)")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Second, "per-request timeout")
	fs.IntVar(&o.maxInflight, "max-inflight", 4096, "open mode: requests in flight at most; a scheduled request beyond it is counted as dropped")
	fs.StringVar(&o.label, "label", "", "name printed in the RESULT line")
	fs.StringVar(&o.url2, "url2", "", "open mode: a second URL; requests alternate between -url and -url2, each at -rate")
	fs.StringVar(&o.label2, "label2", "", "name printed in the RESULT line of -url2")
	fs.StringVar(&waitURL, "wait", "", "instead of sending load, wait until this URL answers 2xx, then exit 0")
	fs.DurationVar(&waitTimeout, "wait-timeout", 15*time.Second, "bound for -wait")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if waitURL != "" {
		if err := waitReady(waitURL, waitTimeout); err != nil {
			fmt.Fprintf(stderr, "loadgen: %v\n", err)
			return 1
		}
		return 0
	}
	if o.url == "" {
		fmt.Fprintln(stderr, "loadgen: -url is required")
		return 2
	}
	o.body = []byte(defaultBody)
	if bodyFile != "" {
		b, err := os.ReadFile(bodyFile)
		if err != nil {
			fmt.Fprintf(stderr, "loadgen: %v\n", err)
			return 2
		}
		o.body = b
	}
	o.header = http.Header{"Content-Type": {"application/json"}}
	for _, h := range headers {
		name, value, ok := strings.Cut(h, ":")
		if !ok || strings.TrimSpace(name) == "" {
			fmt.Fprintf(stderr, "loadgen: bad header %q (want \"Name: value\")\n", h)
			return 2
		}
		name, value = strings.TrimSpace(name), strings.TrimSpace(value)
		if strings.EqualFold(name, "Host") {
			o.host = value
			continue
		}
		o.header.Set(name, value)
	}
	switch {
	case o.mode != "closed" && o.mode != "open":
		fmt.Fprintf(stderr, "loadgen: -mode must be closed or open, not %q\n", o.mode)
		return 2
	case o.mode == "closed" && o.conns < 1:
		fmt.Fprintln(stderr, "loadgen: -c must be at least 1")
		return 2
	case o.mode == "open" && (o.rate <= 0 || o.rate > 1e6):
		fmt.Fprintln(stderr, "loadgen: -rate must be in (0, 1e6]")
		return 2
	case o.url2 != "" && o.mode != "open":
		fmt.Fprintln(stderr, "loadgen: -url2 needs -mode open")
		return 2
	case o.duration <= 0 || o.warmup < 0 || o.timeout <= 0:
		fmt.Fprintln(stderr, "loadgen: -duration and -timeout must be positive, -warmup not negative")
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if o.mode == "closed" {
		res := runClosed(ctx, &o)
		res.print(stdout, &o, o.url, o.label)
		if res.ok == 0 {
			return 1
		}
		return 0
	}
	urls := []string{o.url}
	labels := []string{o.label}
	if o.url2 != "" {
		urls = append(urls, o.url2)
		labels = append(labels, o.label2)
	}
	rc := 0
	for i, res := range runOpen(ctx, &o, urls) {
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		res.print(stdout, &o, urls[i], labels[i])
		if res.ok == 0 {
			rc = 1
		}
	}
	return rc
}

// newClient returns a client whose pool holds conns idle connections, so a
// closed-loop run reuses exactly its -c connections.
func newClient(o *options, conns int) *http.Client {
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        conns,
		MaxIdleConnsPerHost: conns,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
	}
	if o.mode == "closed" {
		tr.MaxConnsPerHost = conns
	}
	return &http.Client{
		Transport:     tr,
		Timeout:       o.timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// recorder is one goroutine's (or one lock's) share of the results.
type recorder struct {
	latency *Histogram // from the moment the request was sent
	lag     *Histogram // open mode: sending time minus scheduled time
	ok      uint64
	errs    map[string]uint64
}

func newRecorder() *recorder {
	return &recorder{latency: NewHistogram(), lag: NewHistogram(), errs: map[string]uint64{}}
}

func (r *recorder) merge(o *recorder) {
	r.latency.Merge(o.latency)
	r.lag.Merge(o.lag)
	r.ok += o.ok
	for k, v := range o.errs {
		r.errs[k] += v
	}
}

// send performs one request and classifies its outcome. It returns "" on a
// 2xx answer whose body was read completely.
func send(ctx context.Context, c *http.Client, o *options, url string) string {
	req, err := http.NewRequestWithContext(ctx, o.method, url, bytes.NewReader(o.body))
	if err != nil {
		return "request: " + err.Error()
	}
	req.Header = o.header.Clone()
	if o.host != "" {
		req.Host = o.host
	}
	resp, err := c.Do(req)
	if err != nil {
		return classify(err)
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Sprintf("status %d", resp.StatusCode)
	}
	if err != nil {
		return "body: " + classify(err)
	}
	return ""
}

func classify(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, context.Canceled):
		return "cancelled"
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection reset"
	default:
		return "transport error"
	}
}

type result struct {
	*recorder
	measured time.Duration
	dropped  uint64
}

// runClosed keeps o.conns requests in flight until the deadline.
func runClosed(ctx context.Context, o *options) *result {
	client := newClient(o, o.conns)
	start := time.Now()
	measureFrom := start.Add(o.warmup)
	end := measureFrom.Add(o.duration)
	recs := make([]*recorder, o.conns)
	var wg sync.WaitGroup
	for i := range recs {
		recs[i] = newRecorder()
		wg.Add(1)
		go func(r *recorder) {
			defer wg.Done()
			for ctx.Err() == nil {
				t0 := time.Now()
				if !t0.Before(end) {
					return
				}
				outcome := send(ctx, client, o, o.url)
				if t0.Before(measureFrom) {
					continue
				}
				if outcome != "" {
					r.errs[outcome]++
					continue
				}
				r.ok++
				r.latency.Record(time.Since(t0))
			}
		}(recs[i])
	}
	wg.Wait()
	client.CloseIdleConnections()
	total := newRecorder()
	for _, r := range recs {
		total.merge(r)
	}
	return &result{recorder: total, measured: measuredSpan(measureFrom, end)}
}

// measuredSpan is the measured window, shortened if the run was interrupted.
func measuredSpan(from, end time.Time) time.Duration {
	if now := time.Now(); now.Before(end) {
		end = now
	}
	if end.Before(from) {
		return 0
	}
	return end.Sub(from)
}

// runOpen sends requests on a fixed schedule: each URL receives o.rate
// requests per second, in turn (request i goes to urls[i mod len(urls)], due
// at start + i/(rate*len(urls))). Each request runs on its own goroutine so a
// slow answer never delays the next send; at most o.maxInflight are
// outstanding. It returns one result per URL.
func runOpen(ctx context.Context, o *options, urls []string) []*result {
	client := newClient(o, 1024)
	interval := time.Duration(float64(time.Second) / (o.rate * float64(len(urls))))
	start := time.Now()
	measureFrom := start.Add(o.warmup)
	end := measureFrom.Add(o.duration)

	var (
		mu       sync.Mutex
		recs     = make([]*recorder, len(urls))
		dropped  = make([]uint64, len(urls))
		wg       sync.WaitGroup
		inflight atomic.Int64
	)
	for i := range recs {
		recs[i] = newRecorder()
	}
	for i := int64(0); ctx.Err() == nil; i++ {
		due := start.Add(time.Duration(i) * interval)
		if !due.Before(end) {
			break
		}
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		}
		which := int(i % int64(len(urls)))
		measured := !due.Before(measureFrom)
		if inflight.Add(1) > int64(o.maxInflight) {
			inflight.Add(-1)
			if measured {
				dropped[which]++
			}
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer inflight.Add(-1)
			t0 := time.Now()
			outcome := send(ctx, client, o, urls[which])
			if !measured {
				return
			}
			lat := time.Since(t0)
			mu.Lock()
			defer mu.Unlock()
			r := recs[which]
			r.lag.Record(t0.Sub(due))
			if outcome != "" {
				r.errs[outcome]++
				return
			}
			r.ok++
			r.latency.Record(lat)
		}()
	}
	wg.Wait()
	client.CloseIdleConnections()
	span := measuredSpan(measureFrom, end)
	out := make([]*result, len(urls))
	for i, r := range recs {
		if dropped[i] > 0 {
			r.errs["dropped (max in-flight)"] += dropped[i]
		}
		out[i] = &result{recorder: r, measured: span, dropped: dropped[i]}
	}
	return out
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func (r *result) print(w io.Writer, o *options, url, label string) {
	var nerr uint64
	keys := make([]string, 0, len(r.errs))
	for k, v := range r.errs {
		nerr += v
		keys = append(keys, k)
	}
	sort.Strings(keys)
	rps := 0.0
	if r.measured > 0 {
		rps = float64(r.ok) / r.measured.Seconds()
	}
	h := r.latency
	fmt.Fprintf(w, "target      %s %s\n", o.method, url)
	if o.mode == "closed" {
		fmt.Fprintf(w, "mode        closed loop, %d connections, %s measured after %s warm-up\n", o.conns, o.duration, o.warmup)
	} else {
		paired := ""
		if o.url2 != "" {
			paired = ", alternating with the other URL"
		}
		fmt.Fprintf(w, "mode        open loop, %.0f req/s scheduled%s, %s measured after %s warm-up\n", o.rate, paired, o.duration, o.warmup)
	}
	fmt.Fprintf(w, "requests    %d ok, %d errors in %.2fs\n", r.ok, nerr, r.measured.Seconds())
	fmt.Fprintf(w, "throughput  %.1f req/s (successful)\n", rps)
	fmt.Fprintf(w, "latency     min %.0fus  mean %.0fus  p50 %.0fus  p90 %.0fus  p99 %.0fus  p99.9 %.0fus  max %.0fus\n",
		us(h.Min()), us(h.Mean()), us(h.Quantile(0.5)), us(h.Quantile(0.9)), us(h.Quantile(0.99)), us(h.Quantile(0.999)), us(h.Max()))
	if o.mode == "open" {
		fmt.Fprintf(w, "send lag    p50 %.0fus  p99 %.0fus  max %.0fus (sending time minus scheduled time)\n",
			us(r.lag.Quantile(0.5)), us(r.lag.Quantile(0.99)), us(r.lag.Max()))
	}
	for _, k := range keys {
		fmt.Fprintf(w, "error       %s: %d\n", k, r.errs[k])
	}
	if label == "" {
		label = "-"
	}
	fmt.Fprintf(w, "RESULT label=%s mode=%s requests=%d errors=%d rps=%.1f p50_us=%.0f p90_us=%.0f p99_us=%.0f p999_us=%.0f max_us=%.0f lag_p99_us=%.0f\n",
		label, o.mode, r.ok, nerr, rps, us(h.Quantile(0.5)), us(h.Quantile(0.9)), us(h.Quantile(0.99)), us(h.Quantile(0.999)), us(h.Max()), us(r.lag.Quantile(0.99)))
}

// waitReady polls url until it answers 2xx or the bound passes.
func waitReady(url string, bound time.Duration) error {
	c := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(bound)
	for {
		resp, err := c.Get(url)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode >= 200 && resp.StatusCode <= 299 {
				return nil
			}
			err = fmt.Errorf("status %d", resp.StatusCode)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s: %v", url, bound, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
