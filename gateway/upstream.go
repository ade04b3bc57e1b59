package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"go.opentelemetry.io/otel/trace"
	"io"
	"net/http"
	"net/textproto"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"sluice/policies"
)

// upstreamError is the failure of the last upstream attempt.
type upstreamError struct {
	timeout bool
	target  string
	err     error
}

func (e *upstreamError) Error() string {
	if e.timeout {
		return fmt.Sprintf("upstream %s: timed out waiting for response headers", e.target)
	}
	return fmt.Sprintf("upstream %s: %v", e.target, e.err)
}

func (e *upstreamError) Unwrap() error { return e.err }

var errAttemptTimeout = errors.New("attempt timed out")

// forward sends the request upstream with retries and failover: attempt i goes
// to target i mod len(targets); connect errors, attempt timeouts and 5xx
// answers are retried up to p.retries times, other answers (429 and all 4xx
// included) are returned at once. The last 5xx is returned as a response.
// A client cancellation stops at once and returns ctx's error. *attempts
// counts the attempts made (nil: not counted).
func (g *Gateway) forward(ctx context.Context, p *provider, call *policies.Call, attempts *int) (*http.Response, error) {
	header := upstreamHeader(call, p)
	var body []byte
	if call.Request.LLM != nil {
		body = call.Request.LLM.Raw
	}
	tries := 1 + p.retries
	var lastErr error
	for i := 0; i < tries; i++ {
		if i > 0 {
			g.metrics.retries.WithLabelValues(p.name).Inc()
			t := time.NewTimer(g.opts.Backoff(i))
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, ctx.Err()
			case <-t.C:
			}
		}
		ti := i % len(p.targets)
		g.metrics.attempts.WithLabelValues(p.name, p.targetKeys[ti]).Inc()
		if attempts != nil {
			*attempts++
		}
		resp, err := g.attempt(ctx, p, ti, i+1, call, header, body)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			ue := &upstreamError{target: p.targetKeys[ti], err: err, timeout: errors.Is(err, errAttemptTimeout)}
			reason := reasonConnect
			if ue.timeout {
				reason = reasonTimeout
			}
			g.metrics.upstreamErrs.WithLabelValues(p.name, p.targetKeys[ti], reason).Inc()
			g.log.Warn("upstream attempt failed", "request_id", call.Shared.RequestID, "provider", p.name,
				"target", p.targetKeys[ti], "attempt", i+1, "reason", reason, "error", err)
			lastErr = ue
			continue
		}
		if resp.StatusCode >= 500 {
			g.metrics.upstreamErrs.WithLabelValues(p.name, p.targetKeys[ti], reason5xx).Inc()
			if i < tries-1 {
				g.log.Warn("upstream attempt failed", "request_id", call.Shared.RequestID, "provider", p.name,
					"target", p.targetKeys[ti], "attempt", i+1, "reason", reason5xx, "status", resp.StatusCode)
				// Drain a little so the connection can be reused.
				_, _ = io.CopyN(io.Discard, resp.Body, 64<<10)
				resp.Body.Close()
				continue
			}
		}
		return resp, nil
	}
	return nil, lastErr
}

// attempt makes one upstream call. The per-attempt timeout covers the time
// until response headers; the body (a stream may run for minutes) is bounded
// only by the client's context.
//
// n is the attempt's number (1-based), for its trace span.
func (g *Gateway) attempt(ctx context.Context, p *provider, ti, n int, call *policies.Call, header http.Header, body []byte) (*http.Response, error) {
	actx, cancel := context.WithCancel(ctx)
	var timedOut atomic.Bool
	timer := time.AfterFunc(p.timeout, func() {
		timedOut.Store(true)
		cancel()
	})
	// The client's query string is not forwarded: nothing the gateway
	// proxies takes one, and it is where keys leak (?api_key=).
	u := *p.targets[ti]
	u.Path = u.Path + call.Request.Path
	u.RawPath = ""
	req := newUpstreamRequest(actx, call.Request.Method, &u, header, body)
	_, span := g.attemptSpan(ctx, p, call, n, req)
	resp, err := g.transport.RoundTrip(req)
	if !timer.Stop() || timedOut.Load() {
		if err == nil {
			resp.Body.Close()
		}
		cancel()
		endAttemptSpan(span, 0, errAttemptTimeout)
		return nil, errAttemptTimeout
	}
	if err != nil {
		cancel()
		endAttemptSpan(span, 0, err)
		return nil, err
	}
	resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel, span: span, status: resp.StatusCode}
	return resp, nil
}

// newUpstreamRequest is http.NewRequestWithContext(ctx, method, u.String(),
// bytes.NewReader(body)) with header as its Header (body nil: no body),
// built from u directly instead of formatting u and parsing it back: the
// same request (URL, Host, ContentLength, GetBody, Body) for less work.
// method is the client's, which net/http's server already checked is a
// valid token.
func newUpstreamRequest(ctx context.Context, method string, u *url.URL, header http.Header, body []byte) *http.Request {
	u.Host = removeEmptyPort(u.Host)
	req := &http.Request{
		Method:     method,
		URL:        u,
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header:     header,
		Host:       u.Host,
	}
	switch {
	case body == nil:
	case len(body) == 0:
		req.Body = http.NoBody
		req.GetBody = func() (io.ReadCloser, error) { return http.NoBody, nil }
	default:
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.ContentLength = int64(len(body))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	}
	return req.WithContext(ctx)
}

// removeEmptyPort strips the empty port of "host:", as net/http does for
// the Host of a new request (RFC 3986 section 6.2.3).
func removeEmptyPort(host string) string {
	if i := strings.LastIndexByte(host, ':'); i == len(host)-1 && i > strings.LastIndexByte(host, ']') {
		return host[:i]
	}
	return host
}

// cancelOnClose releases the attempt's context when the body is closed, and
// ends the attempt's span (nil without tracing).
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
	span   trace.Span
	status int
}

func (c *cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	endAttemptSpan(c.span, c.status, nil)
	c.span = nil
	return err
}

// hopHeaders are connection-level headers never forwarded (RFC 9110 7.6.1).
var hopHeaders = [...]string{
	"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

func isHopHeader(k string, connTokens []string) bool {
	for _, h := range hopHeaders {
		if k == h {
			return true
		}
	}
	for _, t := range connTokens {
		if k == t {
			return true
		}
	}
	return false
}

// connectionTokens lists the header names the Connection header marks as
// hop-by-hop, canonicalised.
func connectionTokens(h http.Header) []string {
	var out []string
	for _, v := range h["Connection"] {
		for _, t := range strings.Split(v, ",") {
			if t = strings.TrimSpace(t); t != "" {
				out = append(out, textproto.CanonicalMIMEHeaderKey(t))
			}
		}
	}
	return out
}

// copyResponseHeader copies an upstream response header to the client, minus
// hop-by-hop and framing headers and the provider's CORS headers: which
// origins may read an answer is the route's cors setting, not the
// provider's.
func copyResponseHeader(dst, src http.Header) {
	conn := connectionTokens(src)
	for k, vs := range src {
		if isHopHeader(k, conn) || k == "Content-Length" || strings.HasPrefix(k, "Access-Control-") {
			continue
		}
		dst[k] = vs
	}
}
