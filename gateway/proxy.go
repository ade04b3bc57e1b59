package gateway

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"go.opentelemetry.io/otel/trace"
	"io"
	"mime"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"sluice/deployment"
	"sluice/dialect"
	"sluice/gwerror"
	"sluice/llmapi"
	"sluice/policies"
	"sluice/sharedctx"
	"sluice/sse"
)

// statusClientClosed is recorded in metrics when the client went away before a
// status could be sent (nginx's convention).
const statusClientClosed = gwerror.StatusClientClosed

// exchange is one proxied request as the data plane handles it. It lives on
// the goroutine serving the request.
type exchange struct {
	g     *Gateway
	w     http.ResponseWriter
	rc    http.ResponseController // over w
	r     *http.Request
	reqID string
	// reqIDHeader is the X-Request-Id header value, []string{reqID}, set
	// on the response wherever the id is (re)written.
	reqIDHeader []string
	snap        *snapshot
	rt          *route
	ep          llmapi.Endpoint
	// dialect is the API the client speaks, which gateway-made errors and
	// rate-limit headers are rendered in (see dialectFor).
	dialect dialect.Dialect
	call    *policies.Call
	run     *policies.Run
	// start is when serveProxy received the request.
	start time.Time
	// callv and reqv hold *call and its Request: one allocation with x.
	callv policies.Call
	reqv  policies.Request
	// status is the status sent to the client (0 until headers are written).
	status int
	// bodyRead is set once the request body has been read to its end.
	bodyRead bool
	// writeDeadline is the write deadline extendWrite set last.
	writeDeadline time.Time
	// bodyDeadline is when the request body must have arrived
	// (server.readTimeout after the headers; zero without a body).
	bodyDeadline time.Time
	// deadlines: w sets the client connection's deadlines (net/http's own
	// ResponseWriter, which the server hands to the gateway unwrapped, does;
	// test recorders do not, and are not asked each time).
	deadlines bool
	// upstreamStart and upstreamDone bracket the upstream exchange of a
	// non-streamed response (first attempt sent to body fully read), so that
	// record can observe the time the gateway itself added.
	upstreamStart, upstreamDone time.Time
	// The usage record's facts the exchange alone knows (meter.go).
	usage exchangeUsage
	// upstream is the upstream response body while it is open: finish
	// closes it before it delivers the outcome.
	upstream io.Closer
	// span is the request's server span (nil without tracing).
	span trace.Span
	// tail is the last byte of a non-streamed body, written after the
	// usage record is appended (hasTail: one is pending).
	tail    [1]byte
	hasTail bool
}

func (g *Gateway) serveProxy(w http.ResponseWriter, r *http.Request) {
	start := g.now()
	g.metrics.inflight.Inc()
	x := &exchange{g: g, w: w, rc: *http.NewResponseController(w), r: r, start: start}
	// Runs last, after the final phase, also when the handler panics.
	defer x.releaseSnapshot()
	defer func() {
		v := recover()
		if v != nil {
			if v == http.ErrAbortHandler {
				x.finishAbort()
				g.metrics.inflight.Dec()
				end := g.now()
				x.record(start, end)
				x.meter(start, end)
				panic(v)
			}
			g.log.Error("gateway handler panicked", "request_id", x.reqID, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			if x.run != nil {
				x.run.Finish(policies.Outcome{Kind: policies.Failed, Status: http.StatusInternalServerError,
					Err: fmt.Errorf("panic: %v", v)})
			}
			if x.status == 0 {
				x.fail(gwerror.Internal(x.reqID))
			}
		}
		x.finishAbort()
		g.metrics.inflight.Dec()
		end := g.now()
		x.record(start, end)
		x.meter(start, end)
		x.writeTail()
	}()
	x.startSpan()
	x.serve()
}

// releaseSnapshot drops the request's reference to its snapshot (see
// lifetime), once nothing of the request runs on it any more.
func (x *exchange) releaseSnapshot() {
	if x.snap != nil {
		x.g.release(x.snap, true)
	}
}

// finishAbort guarantees the run's final call on paths that did not finish it.
func (x *exchange) finishAbort() {
	if x.run != nil {
		x.run.Abort()
	}
}

// record updates the request metrics once the response is over (at end).
func (x *exchange) record(start, end time.Time) {
	status := x.status
	if status == 0 {
		status = statusClientClosed
	}
	m, ep := x.g.metrics, string(x.ep)
	if x.rt == nil {
		code := strconv.Itoa(status)
		m.requests.WithLabelValues("", ep, code).Inc()
		m.latency.WithLabelValues("", code).Observe(end.Sub(start).Seconds())
		return
	}
	ser := x.rt.series.request(m, x.rt.name, ep, status)
	ser.requests.Inc()
	ser.latency.Observe(end.Sub(start).Seconds())
	if !x.upstreamDone.IsZero() && status < 300 {
		added := end.Sub(start) - x.upstreamDone.Sub(x.upstreamStart)
		x.rt.series.overheadOf(m, x.rt.name).Observe(max(added, 0).Seconds())
	}
}

// newCall is the policies.Call for x's request, whose path under the route is
// rest: its SharedContext names x's route, provider and endpoint (set x.rt and
// x.ep first). The body is not read yet: setBody adds it.
func (x *exchange) newCall(rest string) *policies.Call {
	r, rt := x.r, x.rt
	// Room for a few keys per policy and the gateway's own (usage, prompt
	// estimate), so that the map is not grown while the chain runs.
	shared := sharedctx.NewSized(x.reqID, rt.name, rt.name, rt.provider.name, 4+2*rt.chain.Len())
	shared.Endpoint = string(x.ep)
	x.reqv = policies.Request{
		Method:   r.Method,
		Path:     rest,
		Header:   r.Header,
		Query:    r.URL.Query(),
		RemoteIP: remoteIP(r),
	}
	x.callv = policies.Call{
		Ctx:          r.Context(),
		Shared:       shared,
		Request:      &x.reqv,
		ClientHeader: make(http.Header),
		Started:      x.start,
	}
	return &x.callv
}

func (x *exchange) serve() {
	g, w, r := x.g, x.w, x.r
	x.usage.id = g.ids.next()
	x.reqID = r.Header.Get("X-Request-Id")
	if validRequestID(x.reqID) {
		x.usage.clientID = x.reqID
	} else {
		x.reqID = x.usage.id
	}
	x.reqIDHeader = []string{x.reqID}
	w.Header()["X-Request-Id"] = x.reqIDHeader

	snap := g.acquire()
	if snap == nil {
		msg := "the gateway has no configuration loaded yet"
		if g.snap.Load() != nil {
			msg = "the gateway is shutting down"
		}
		x.fail(gwerror.New(http.StatusServiceUnavailable, gwerror.TypeServer, "not_ready", msg))
		return
	}
	x.snap = snap
	// The write deadline root set moments ago stands until the first write
	// (every write extends it).
	_, x.deadlines = x.w.(connDeadlines)
	if hasBody(r) {
		// The body must arrive within server.readTimeout. The deadline is set
		// first so that it also bounds net/http's own reads of a body this
		// handler leaves unread (it drains up to 256 KiB to reuse the
		// connection).
		x.bodyDeadline = time.Now().Add(snap.readTimeout)
		x.setReadDeadline(x.bodyDeadline)
	} else {
		x.bodyRead = true
	}
	rt, rest := snap.match(r.URL.Path)
	if rt == nil {
		// No route, no provider: the path alone says what the client speaks.
		x.dialect = dialectFor(r.URL.Path[max(strings.LastIndex(r.URL.Path, "/v1/"), 0):], "")
		x.fail(gwerror.New(http.StatusNotFound, gwerror.TypeInvalidRequest, gwerror.CodeRouteNotFound,
			"no route serves "+r.URL.Path))
		return
	}
	x.rt = rt
	x.dialect = dialectFor(rest, rt.provider.typ)
	if c := rt.cors; c != nil {
		if isPreflight(r) {
			x.preflight(c)
			return
		}
		if !c.anyOrigin {
			w.Header().Add("Vary", "Origin")
		}
		if acao := c.allowOrigin(r.Header.Get("Origin")); acao != "" {
			x.w = &corsWriter{ResponseWriter: w, p: c, origin: acao}
		}
	}
	switch rest {
	case quotaPath:
		x.quota(rest)
		return
	case modelsPath:
		x.models(rest)
		return
	}
	ep, ok := llmapi.EndpointForPath(rest)
	if !ok {
		x.fail(gwerror.New(http.StatusNotFound, gwerror.TypeInvalidRequest, gwerror.CodeRouteNotFound,
			fmt.Sprintf("route %s does not serve %s; the endpoints are /v1/chat/completions, /v1/completions, /v1/embeddings, /v1/responses and /v1/messages under %s", rt.name, rest, rt.context)))
		return
	}
	if ep == llmapi.Messages && rt.provider.typ != "anthropic" {
		x.fail(gwerror.New(http.StatusNotFound, gwerror.TypeInvalidRequest, gwerror.CodeRouteNotFound,
			fmt.Sprintf("route %s does not serve the Anthropic Messages API (/v1/messages): its provider %s is of type %s; send Anthropic requests to a route whose provider has type anthropic, or OpenAI requests (/v1/chat/completions) to this one",
				rt.name, rt.provider.name, rt.provider.typ)))
		return
	}
	x.ep = ep
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		x.fail(gwerror.New(http.StatusMethodNotAllowed, gwerror.TypeInvalidRequest, gwerror.CodeInvalidRequest,
			r.Method+" is not allowed; use POST"))
		return
	}
	if gerr := checkContentType(r.Header.Get("Content-Type")); gerr != nil {
		x.fail(gerr)
		return
	}
	// The caller is identified before its body is read: a request without a
	// valid key costs the gateway its headers only.
	x.call = x.newCall(rest)
	if gerr := x.identify(x.call); gerr != nil {
		x.usage.identifyFailed = true
		x.fail(gerr)
		return
	}
	x.call.Identified = true
	body, gerr := readBody(r, snap.maxRequestBytes)
	if gerr != nil {
		x.fail(gerr)
		return
	}
	x.bodyRead = true
	// Clear the deadline: net/http's background read, which notices a client
	// that hangs up during a long stream, must not time out.
	x.setReadDeadline(time.Time{})
	llm, gerr := llmapi.Parse(ep, body)
	if gerr != nil {
		x.fail(gerr)
		return
	}
	x.call.Request.LLM = llm
	x.usage.requestedModel = llm.Model
	// The served model is set here only: every policy reads it from the
	// SharedContext, never from the body.
	x.call.Shared.SetServedModel(llm.Model)
	x.run = rt.chain.Start(x.call)
	if gerr := x.run.Request(); gerr != nil {
		x.fail(gerr)
		return
	}
	x.proxy()
}

// identify runs every policies.Identifier of the route's chain on call, in
// chain order, and returns the first failure with its policy named.
func (x *exchange) identify(call *policies.Call) *gwerror.Error {
	return x.rt.chain.Identify(call)
}

// proxy runs everything after admission: upstream, response phase, delivery
// and the final outcome.
func (x *exchange) proxy() {
	g, llm, p := x.g, x.call.Request.LLM, x.rt.provider
	ctx := x.r.Context()

	// OpenAI reports stream usage only when asked, and so does Anthropic's
	// OpenAI-compatible chat/completions; the gateway asks on the client's
	// behalf and hides the extra chunk from a client that did not.
	hideUsage := false
	if llm.Stream && !llm.ClientIncludeUsage && asksStreamUsage(p.typ, x.ep) {
		if err := llm.SetIncludeUsage(); err == nil {
			hideUsage = true
		}
	}

	x.run.MarkUpstream()
	x.upstreamStart = g.now()
	resp, err := g.forward(ctx, p, x.call, &x.usage.attempts)
	if err != nil {
		x.forwardFailed(err)
		return
	}
	x.upstream = resp.Body
	defer x.closeUpstream()

	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		x.upstreamStatus(resp)
		return
	}
	if llm.Stream && isEventStream(resp.Header.Get("Content-Type")) {
		x.stream(resp, hideUsage)
		return
	}
	x.body(resp)
}

// asksStreamUsage reports whether a stream of endpoint ep from a provider of
// type typ reports usage only when stream_options.include_usage asks for it:
// OpenAI's chat/completions and completions, Anthropic's OpenAI-compatible
// chat/completions.
func asksStreamUsage(typ string, ep llmapi.Endpoint) bool {
	switch ep {
	case llmapi.ChatCompletions:
		return true
	case llmapi.Completions:
		return typ == "openai"
	}
	return false
}

// forwardFailed answers a request whose upstream exchange got no response
// (forward's error): the client's cancellation, the last attempt's timeout
// (504) or a connection failure (502).
func (x *exchange) forwardFailed(err error) {
	ctx, p := x.r.Context(), x.rt.provider
	if ctx.Err() != nil {
		x.finish(policies.Cancelled, 0, ctx.Err())
		return
	}
	var gerr *gwerror.Error
	var ue *upstreamError
	if errors.As(err, &ue) && ue.timeout {
		gerr = gwerror.New(http.StatusGatewayTimeout, gwerror.TypeUpstream, gwerror.CodeUpstreamTimeout,
			"the upstream provider "+p.name+" did not answer in time")
	} else {
		gerr = gwerror.New(http.StatusBadGateway, gwerror.TypeUpstream, gwerror.CodeUpstreamUnavailable,
			"the upstream provider "+p.name+" is unreachable")
	}
	x.fail(gerr)
	x.finish(policies.UpstreamFailed, gerr.Status, err)
}

// passThroughStatus reports whether an upstream error status is one the
// client can act on (fix its request, slow down), so that the provider's own
// answer is the most useful one. The others are the gateway's problem: its
// credential (401, 403) or the provider's outage (5xx), and are wrapped.
func passThroughStatus(status int) bool {
	switch status {
	case http.StatusBadRequest, http.StatusNotFound, http.StatusConflict,
		http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType,
		http.StatusUnprocessableEntity, http.StatusTooManyRequests:
		return true
	}
	return false
}

// upstreamStatus answers a non-2xx upstream response (after retries). A
// status the client can act on is passed through: status, headers (minus
// hop-by-hop; a 429 keeps Retry-After and x-ratelimit-*) and body unchanged.
// Any other is wrapped in the gateway's error: 502 upstream_auth_failed for
// 401 and 403 (the provider refused the gateway's credential; its body can
// echo part of the key and is never shown), 502 upstream_error naming the
// status otherwise. The response phase does not run; the outcome is
// UpstreamFailed.
func (x *exchange) upstreamStatus(resp *http.Response) {
	status := resp.StatusCode
	if !passThroughStatus(status) {
		x.wrapUpstreamStatus(resp)
		return
	}
	buf := x.g.getBuf()
	defer x.g.putBuf(buf)
	_, rerr := readBounded(buf, resp.Body, maxResponseBytes)
	h := x.w.Header()
	copyResponseHeader(h, resp.Header)
	x.addClientHeaders()
	h.Set("Content-Length", strconv.Itoa(buf.Len()))
	x.writeHeader(status)
	_ = x.writeBody(buf.Bytes())
	x.finish(policies.UpstreamFailed, status, rerr)
}

// upstreamLogBody bounds the part of a wrapped upstream error body that is
// logged for the operator.
const upstreamLogBody = 512

func (x *exchange) wrapUpstreamStatus(resp *http.Response) {
	status, p := resp.StatusCode, x.rt.provider
	var gerr *gwerror.Error
	logArgs := []any{"request_id", x.reqID, "provider", p.name, "target", targetOf(resp), "status", status,
		"upstream_request_id", resp.Header.Get("X-Request-Id")}
	switch {
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		gerr = gwerror.New(http.StatusBadGateway, gwerror.TypeUpstream, gwerror.CodeUpstreamAuthFailed,
			fmt.Sprintf("the upstream provider %s refused the gateway's credential (HTTP %d); the gateway's configuration must be fixed, your API key is not the problem", p.name, status))
		// The body is not logged either: it can echo part of the credential.
	default:
		msg := fmt.Sprintf("the upstream provider %s answered HTTP %d", p.name, status)
		if status >= 500 && p.retries > 0 {
			msg += fmt.Sprintf(" (after %d attempts)", 1+p.retries)
		}
		gerr = gwerror.New(http.StatusBadGateway, gwerror.TypeUpstream, gwerror.CodeUpstreamError, msg)
		snippet := make([]byte, upstreamLogBody)
		n, _ := io.ReadFull(resp.Body, snippet)
		logArgs = append(logArgs, "body", string(snippet[:n]))
	}
	x.g.log.Warn("upstream error answer wrapped", logArgs...)
	// Drain a little so the connection can be reused.
	_, _ = io.CopyN(io.Discard, resp.Body, 64<<10)
	x.fail(gerr)
	x.finish(policies.UpstreamFailed, gerr.Status, fmt.Errorf("upstream %s answered %d", p.name, status))
}

func (x *exchange) body(resp *http.Response) {
	ctx := x.r.Context()
	buf := x.g.getBuf()
	defer x.g.putBuf(buf)
	if _, err := readBounded(buf, resp.Body, maxResponseBytes); err != nil {
		if ctx.Err() != nil {
			x.finish(policies.Cancelled, 0, ctx.Err())
			return
		}
		x.g.metrics.upstreamErrs.WithLabelValues(x.rt.provider.name, targetOf(resp), reasonStream).Inc()
		gerr := gwerror.New(http.StatusBadGateway, gwerror.TypeUpstream, gwerror.CodeUpstreamUnavailable,
			"the upstream response from "+x.rt.provider.name+" was cut short")
		x.fail(gerr)
		x.finish(policies.UpstreamFailed, gerr.Status, err)
		return
	}
	x.upstreamDone = x.g.now()
	body, usage, err := x.boundBody(buf.Bytes())
	if err != nil {
		x.g.log.Debug("no usage in upstream body", "request_id", x.reqID, "error", err)
	}
	// The request's one usage fact, published before the response phase: the
	// response and final phases of every policy read it (Shared.Usage).
	x.call.Shared.SetUsage(usage)
	presp := &policies.Response{Status: resp.StatusCode, Header: resp.Header, Body: body}
	if gerr := x.run.Response(presp); gerr != nil {
		x.fail(gerr)
		// The upstream work was done: policies settle with its usage.
		x.finish(policies.Completed, gerr.Status, gerr)
		return
	}
	h := x.w.Header()
	copyResponseHeader(h, presp.Header)
	x.addClientHeaders()
	h.Set("Content-Length", strconv.Itoa(len(presp.Body)))
	x.writeHeader(presp.Status)
	// The body's last byte is held back until the usage record is appended
	// (writeTail, after meter): a client that read the answer to its end
	// has its record in the sink, even if the gateway dies right after.
	b := presp.Body
	if n := len(b); n > 0 {
		x.tail[0], x.hasTail = b[n-1], true
		b = b[:n-1]
	}
	if err := x.writeBody(b); err != nil {
		x.hasTail = false
		// The provider's usage was read with the body: it stands even though
		// the client did not take the answer.
		x.finish(policies.Cancelled, presp.Status, err)
		return
	}
	x.firstByte()
	x.finish(policies.Completed, presp.Status, nil)
}

// writeTail writes the byte body held back, once the record is appended. A
// failure is not reported: the outcome was delivered, and the client that
// left at the last byte is as one whose connection failed after the
// handler returned (net/http writes the buffered tail then).
func (x *exchange) writeTail() {
	if !x.hasTail {
		return
	}
	x.hasTail = false
	x.extendWrite()
	_, _ = x.w.Write(x.tail[:])
}

// connDeadlines is what http.ResponseController calls to set deadlines.
type connDeadlines interface {
	SetReadDeadline(time.Time) error
	SetWriteDeadline(time.Time) error
}

// writeChunk is the most written to a client under one write deadline.
const writeChunk = 64 << 10

// extendWrite gives the next write to the client server.writeTimeout: a
// client that does not take the bytes in that time is cut (the write fails).
// Deadlines are wall-clock time, whatever clock the gateway was given.
//
// A deadline less than writeSlack later than the one set last is not set:
// re-arming the connection's timer costs more than the write it guards, and
// the writes of a short answer come microseconds apart.
func (x *exchange) extendWrite() {
	if !x.deadlines {
		return
	}
	d := time.Now().Add(x.writeTimeout())
	if !x.writeDeadline.IsZero() && d.Sub(x.writeDeadline) < writeSlack {
		return
	}
	x.writeDeadline = d
	_ = x.rc.SetWriteDeadline(d)
}

// lingerRead bounds how long the rest of a refused request's body is
// discarded before its connection closes (exchange.fail).
const lingerRead = 500 * time.Millisecond

// writeSlack bounds how much sooner than server.writeTimeout after a write a
// client can be cut (extendWrite).
const writeSlack = time.Millisecond

func (x *exchange) setReadDeadline(t time.Time) {
	if x.deadlines {
		_ = x.rc.SetReadDeadline(t)
	}
}

func (x *exchange) writeTimeout() time.Duration {
	if x.snap == nil {
		return deployment.DefaultWriteTimeout.D()
	}
	return x.snap.writeTimeout
}

// writeBody writes b to the client in pieces of at most writeChunk bytes, each
// under its own write deadline, so that a large body is bounded by the
// client's pace rather than by its size.
func (x *exchange) writeBody(b []byte) error {
	for len(b) > 0 {
		n := min(len(b), writeChunk)
		x.extendWrite()
		if _, err := x.w.Write(b[:n]); err != nil {
			return err
		}
		x.firstByte()
		b = b[n:]
	}
	return nil
}

// writeEvent writes one SSE event and flushes it under one write deadline.
func (x *exchange) writeEvent(ev *sse.Event) error {
	x.extendWrite()
	if err := sse.Write(x.w, ev); err != nil {
		return err
	}
	err := x.rc.Flush()
	if err == nil {
		x.firstByte()
	}
	return err
}

// stream forwards an SSE response event by event, flushing each at once.
func (x *exchange) stream(resp *http.Response, hideUsage bool) {
	ctx := x.r.Context()
	llm := x.call.Request.LLM
	tracker := llmapi.NewStreamTracker(x.ep, llm.Choices())
	presp := &policies.Response{Status: resp.StatusCode, Header: resp.Header, Stream: true}
	if gerr := x.run.Response(presp); gerr != nil {
		x.fail(gerr)
		x.finish(policies.Completed, gerr.Status, gerr)
		return
	}
	h := x.w.Header()
	copyResponseHeader(h, presp.Header)
	x.addClientHeaders()
	h.Del("Content-Length")
	h.Set("X-Accel-Buffering", "no")
	x.writeHeader(presp.Status)
	x.extendWrite()
	if err := x.rc.Flush(); err != nil {
		x.finish(policies.Cancelled, presp.Status, err) // closes the upstream body first
		return
	}

	rd := sse.NewReader(resp.Body)
	// meter counts the output forwarded so far per choice (the stream
	// phase reads it as Call.StreamOutput; the output bound cuts on it).
	var meter *outputMeter
	if count := x.outputCounter(); count != nil {
		meter = newOutputMeter(count, llm.Choices())
	}
	var bound *streamBound
	if b := x.outputBound(); b > 0 && meter != nil {
		bound = newStreamBound(x.ep, b, llm.Choices())
	}
	ended, cutEnd := false, false
	kind := policies.Completed
	var endErr error
	for {
		ev, err := rd.Next()
		if err != nil {
			switch {
			case ended:
				// The terminal event reached the client: the response was
				// delivered in full even if the client hung up right after.
			case ctx.Err() != nil:
				kind, endErr = policies.Cancelled, ctx.Err()
			default:
				if err == io.EOF {
					err = io.ErrUnexpectedEOF
				}
				kind, endErr = policies.UpstreamFailed, err
				x.g.metrics.upstreamErrs.WithLabelValues(x.rt.provider.name, targetOf(resp), reasonStream).Inc()
			}
			break
		}
		if terminalEvent(ev) {
			ended = true
		}
		if tracker.Observe(ev) && hideUsage {
			continue
		}
		if bound != nil {
			bound.begin(ev)
		}
		if meter != nil && meter.observe(tracker, bound) {
			// The event would take a choice past the output bound: it is
			// not forwarded, and the choice ends here.
			if bound.complete() {
				cutEnd = true
				break
			}
			continue
		}
		if meter != nil {
			x.call.SetStreamOutput(meter.total)
		}
		if gerr := x.run.StreamEvent(ev); gerr != nil {
			// A stream policy panicked (the runner logged it); the stream
			// cannot carry an error envelope any more, so it ends here.
			kind, endErr = policies.Failed, gerr
			break
		}
		if ev.Drop {
			continue
		}
		if err := x.writeEvent(ev); err != nil {
			// The client went away or stopped reading (the write deadline
			// passed, which does not cancel the request's context): nothing
			// will take the rest, so the upstream request ends now: finish
			// closes its unread body, which cancels the attempt and drops
			// the upstream connection.
			x.closeUpstream()
			kind, endErr = policies.Cancelled, err
			break
		}
		tracker.Forwarded()
		if meter != nil {
			meter.commit()
		}
		if bound != nil {
			bound.forwarded()
			if bound.complete() { // the last uncut choice finished
				cutEnd = true
				break
			}
		}
	}
	if cutEnd {
		kind, endErr = x.endCutStream(bound, tracker)
	}
	// The stream's one usage fact, published before the final phase.
	x.call.Shared.SetUsage(x.streamUsage(tracker))
	x.finish(kind, presp.Status, endErr)
	if kind == policies.UpstreamFailed || kind == policies.Failed {
		// The client must see a broken stream, as it would from the provider:
		// returning normally would end the chunked body cleanly and pass a
		// truncated answer off as complete. net/http closes the connection
		// without the final chunk (HTTP/2: resets the stream) and logs nothing.
		panic(http.ErrAbortHandler)
	}
}

// endCutStream ends a stream the output bound cut: the upstream request
// ends first (its capacity frees), then the client gets the dialect's clean
// ending with the usage delivered. The outcome is Completed with the usage
// counted from the output forwarded, unless the client is gone.
func (x *exchange) endCutStream(bound *streamBound, tracker *llmapi.StreamTracker) (policies.OutcomeKind, error) {
	x.closeUpstream()
	x.g.metrics.outputCuts.WithLabelValues(x.rt.name).Inc()
	for _, ev := range bound.ending(x.streamUsage(tracker), x.call.Request.LLM.ClientIncludeUsage) {
		if err := x.writeEvent(ev); err != nil {
			return policies.Cancelled, err
		}
	}
	return policies.Completed, nil
}

// streamUsage is a stream's one usage fact: the provider's report when it
// arrived (authoritative, and it stands even if the client left after it),
// else the usage the gateway counts from the output it forwarded, priced
// against the prompt estimate the limit policies reserved with
// (llmapi.StreamTracker.CountedUsage); nil when there is nothing to count.
func (x *exchange) streamUsage(t *llmapi.StreamTracker) *llmapi.Usage {
	if u := t.Usage(); u != nil && u.Authoritative {
		return u
	}
	return t.CountedUsage(x.outputCounter(), policies.PromptTokens(x.call, x.g.opts.Services.Tokens))
}

// outputCounter counts output text in tokens of the request's model; nil
// without a tokenizer.
func (x *exchange) outputCounter() func(string) int64 {
	tok := x.g.opts.Services.Tokens
	if tok == nil {
		return nil
	}
	model := x.call.Shared.ServedModel()
	return func(text string) int64 { return int64(tok.Count(model, text)) }
}

// terminalEvent reports whether ev marks the normal end of a stream: OpenAI's
// [DONE], Anthropic's message_stop, or a Responses API terminal event. A stream
// that ends without one was cut.
func terminalEvent(ev *sse.Event) bool {
	if ev.Done() {
		return true
	}
	switch ev.Event {
	case "message_stop", "response.completed", "response.incomplete", "response.failed":
		return true
	}
	return false
}

// finish delivers the outcome (the runner ignores all but the first call);
// the usage, if any, was published before (Shared.SetUsage). Requests the
// gateway answers without a run (GET /v1/models) have none.
//
// The upstream response body is closed first, on every path: the outcome
// says the upstream request has ended, and fair admission frees the
// provider's capacity on it. Closing a body read to its end returns the
// connection to the pool; closing one that is not cancels the attempt and
// drops the connection, which is how the provider learns that the request
// is over.
func (x *exchange) finish(kind policies.OutcomeKind, status int, err error) {
	x.closeUpstream()
	if x.run == nil {
		return
	}
	x.run.Finish(policies.Outcome{Kind: kind, Status: status, Err: err})
}

// closeUpstream closes the upstream response body once.
func (x *exchange) closeUpstream() {
	if x.upstream != nil {
		_ = x.upstream.Close()
		x.upstream = nil
	}
}

// fail renders gerr in the client's dialect with the policies' client
// headers (the error's own rate-limit counters replace theirs). When the
// request body was not read (the caller was refused before, or it did not
// arrive in time) the connection is closed after the answer and nothing more
// is read from it: otherwise net/http would wait for the rest of the body to
// reuse the connection.
func (x *exchange) fail(gerr *gwerror.Error) {
	x.addClientHeaders()
	x.status = statusOr500(gerr.Status)
	x.usage.err = gerr
	if !x.bodyRead {
		// The connection closes after the answer. net/http first discards
		// what is left of the body if that is at most 256 KiB, so that the
		// close is a FIN the client reads the answer before, not a reset
		// of a connection with unread data that can reach the client while
		// it still writes (a zip bomb refused after a few KiB); the
		// deadline bounds what that costs to lingerRead. A larger rest is
		// not read: net/http half-closes and waits instead.
		x.w.Header().Set("Connection", "close")
		if d := time.Now().Add(lingerRead); x.bodyDeadline.IsZero() || d.Before(x.bodyDeadline) {
			x.setReadDeadline(d)
		}
	}
	x.extendWrite()
	gerr.Write(x.w, x.dialect, x.reqID)
}

// dialectFor is the dialect of a client asking for path rest (under the
// route, or the request path when no route matched) of a route whose
// provider has type providerType ("" for none): Anthropic for the Messages
// API; OpenAI for the OpenAI-shaped endpoints, whatever the provider (a
// client of /v1/chat/completions speaks OpenAI even to an anthropic
// provider); for any other path (an unknown path, /v1/quota) the provider's.
func dialectFor(rest, providerType string) dialect.Dialect {
	if ep, ok := llmapi.EndpointForPath(rest); ok {
		if ep == llmapi.Messages {
			return dialect.Anthropic
		}
		return dialect.OpenAI
	}
	if providerType == "anthropic" {
		return dialect.Anthropic
	}
	return dialect.OpenAI
}

// hasBody reports whether r announces a request body (a length or chunks).
func hasBody(r *http.Request) bool {
	return r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody
}

func statusOr500(s int) int {
	if s == 0 {
		return http.StatusInternalServerError
	}
	return s
}

func (x *exchange) addClientHeaders() {
	if x.call == nil {
		return
	}
	h := x.w.Header()
	for k, vs := range x.call.ClientHeader {
		h[k] = vs
	}
	x.call.Limits().WriteHeader(h, x.dialect)
	h["X-Request-Id"] = x.reqIDHeader
}

func (x *exchange) writeHeader(status int) {
	x.status = status
	x.w.WriteHeader(status)
}

func checkContentType(ct string) *gwerror.Error {
	if ct == "" {
		return gwerror.New(http.StatusUnsupportedMediaType, gwerror.TypeInvalidRequest, gwerror.CodeUnsupportedMedia,
			"Content-Type must be application/json")
	}
	if ct == "application/json" {
		return nil // what mime.ParseMediaType accepts below, without its map
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return gwerror.BadRequest(gwerror.CodeUnsupportedMedia, "malformed Content-Type header %q", ct)
	}
	if mt != "application/json" {
		return gwerror.New(http.StatusUnsupportedMediaType, gwerror.TypeInvalidRequest, gwerror.CodeUnsupportedMedia,
			"Content-Type must be application/json, not "+mt)
	}
	return nil
}

func isEventStream(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && mt == "text/event-stream"
}

func tooLarge(limit int64) *gwerror.Error {
	return gwerror.New(http.StatusRequestEntityTooLarge, gwerror.TypeInvalidRequest, gwerror.CodeBodyTooLarge,
		fmt.Sprintf("request body exceeds the limit of %d bytes", limit))
}

// readBody reads the request body once, refusing more than limit bytes. A
// body with Content-Encoding gzip is decompressed here, and limit bounds both
// the compressed and the decompressed bytes: the buffer never grows past
// limit+1 bytes, whatever the compression ratio (a zip bomb is a 413 after
// limit+1 bytes of output). Any other encoding is a 415. The returned slice is
// owned by the request (it goes upstream from memory, plain).
func readBody(r *http.Request, limit int64) ([]byte, *gwerror.Error) {
	gz, gerr := bodyEncoding(r.Header)
	if gerr != nil {
		return nil, gerr
	}
	if r.ContentLength > limit {
		return nil, tooLarge(limit)
	}
	if !gz {
		size := int64(512)
		if r.ContentLength > 0 {
			size = r.ContentLength + 1 // +1 so a correct length needs no regrowth to see EOF
		}
		body, over, err := readAllBounded(r.Body, limit, size)
		switch {
		case over:
			return nil, tooLarge(limit)
		case err != nil:
			return nil, bodyReadError(err, "could not read the request body")
		}
		return body, nil
	}
	compressed := &countingReader{r: io.LimitReader(r.Body, limit+1)}
	zr, err := gzip.NewReader(compressed)
	if err != nil {
		if compressed.n > limit {
			return nil, tooLarge(limit)
		}
		return nil, gwerror.BadRequest(gwerror.CodeInvalidRequest, "could not decompress the gzip request body: %v", err)
	}
	body, over, err := readAllBounded(zr, limit, 4096)
	switch {
	case over || compressed.n > limit:
		return nil, tooLarge(limit)
	case err != nil:
		return nil, bodyReadError(err, "could not decompress the gzip request body")
	}
	return body, nil
}

// bodyReadError is the answer to a failed body read: 408 when the body did
// not arrive within the server's read timeout, else 400.
func bodyReadError(err error, what string) *gwerror.Error {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return gwerror.New(http.StatusRequestTimeout, gwerror.TypeInvalidRequest, gwerror.CodeRequestTimeout,
			"the request body did not arrive within the server's read timeout")
	}
	return gwerror.BadRequest(gwerror.CodeInvalidRequest, "%s: %v", what, err)
}

// bodyEncoding reads Content-Encoding: gz is true for gzip (or its alias
// x-gzip), false for none or identity; any other coding, or several, is a
// 415 naming it.
func bodyEncoding(h http.Header) (gz bool, gerr *gwerror.Error) {
	var codings []string
	for _, v := range h.Values("Content-Encoding") {
		for _, c := range strings.Split(v, ",") {
			c = strings.ToLower(strings.TrimSpace(c))
			if c != "" && c != "identity" {
				codings = append(codings, c)
			}
		}
	}
	switch {
	case len(codings) == 0:
		return false, nil
	case len(codings) == 1 && (codings[0] == "gzip" || codings[0] == "x-gzip"):
		return true, nil
	}
	return false, gwerror.New(http.StatusUnsupportedMediaType, gwerror.TypeInvalidRequest, gwerror.CodeUnsupportedMedia,
		fmt.Sprintf("Content-Encoding %q is not supported: send the body uncompressed or with Content-Encoding: gzip", strings.Join(codings, ", ")))
}

// readAllBounded reads r to EOF into a buffer of initial capacity size that
// grows by doubling but never past limit+1 bytes; over reports that r held
// more than limit bytes.
func readAllBounded(r io.Reader, limit, size int64) (buf []byte, over bool, err error) {
	buf = make([]byte, 0, min(size, limit+1))
	for {
		if len(buf) == cap(buf) {
			grown := make([]byte, len(buf), min(2*int64(cap(buf))+512, limit+1))
			copy(grown, buf)
			buf = grown
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > limit {
			return nil, true, nil
		}
		switch {
		case err == io.EOF:
			return buf, false, nil
		case err != nil:
			return nil, false, err
		}
	}
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// readBounded reads r into buf, failing when it holds more than limit bytes.
func readBounded(buf *bytes.Buffer, r io.Reader, limit int64) (int64, error) {
	n, err := buf.ReadFrom(io.LimitReader(r, limit+1))
	if err == nil && n > limit {
		err = fmt.Errorf("upstream body exceeds %d bytes", limit)
	}
	return n, err
}

func remoteIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

func targetOf(resp *http.Response) string {
	if resp.Request != nil && resp.Request.URL != nil {
		return resp.Request.URL.Scheme + "://" + resp.Request.URL.Host
	}
	return ""
}

// Response buffers are pooled per Gateway; oversized ones are dropped so one
// huge answer does not pin memory.
func (g *Gateway) getBuf() *bytes.Buffer {
	if b, ok := g.bufs.Get().(*bytes.Buffer); ok {
		b.Reset()
		return b
	}
	return bytes.NewBuffer(make([]byte, 0, 8<<10))
}

func (g *Gateway) putBuf(b *bytes.Buffer) {
	if b.Cap() <= 1<<20 {
		g.bufs.Put(b)
	}
}
