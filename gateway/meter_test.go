package gateway

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"sluice/counter/memory"
	"sluice/internal/proctest"
	"sluice/meter"
	"sluice/meter/accesslog"
	"sluice/meter/spool"
	"sluice/mockllm"
	"sluice/policies"
	"sluice/policies/builtin"
	"sluice/pricing"
	"sluice/tokencount"
)

// memSink keeps the records appended to it.
type memSink struct {
	mu   sync.Mutex
	recs []meter.Record
}

func (s *memSink) Append(r *meter.Record) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recs = append(s.recs, *r)
	return nil
}

// waitFor returns the records of request id once there are n, after a
// moment that would show an extra one.
func (s *memSink) waitFor(t *testing.T, id string, n int) []meter.Record {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		var got []meter.Record
		s.mu.Lock()
		for _, r := range s.recs {
			if r.ID == id || r.ClientRequestID == id {
				got = append(got, r)
			}
		}
		s.mu.Unlock()
		if len(got) >= n || time.Now().After(deadline) {
			time.Sleep(30 * time.Millisecond)
			return got
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestUsageRecordPerOutcome: every path of a request through a route yields
// exactly one usage record with the resolution docs/meter.md gives it, the
// denying policy, the status and the usage the chain settled with.
func TestUsageRecordPerOutcome(t *testing.T) {
	mock := startUpstream(t, mockllm.New(mockllm.Options{Counter: tokencount.New()}))
	slow := startUpstream(t, &fakeLLM{})
	sink := &memSink{}
	logs := &proctest.Buffer{}
	access := &proctest.Buffer{}
	accessLog, err := accesslog.New(access, "json", slog.LevelInfo, nil)
	if err != nil {
		t.Fatal(err)
	}
	prices, err := pricing.New("")
	if err != nil {
		t.Fatal(err)
	}
	counters := memory.New(memory.Options{SweepEvery: -1})
	t.Cleanup(func() { _ = counters.Close() })
	newGW := func(upstream string, limit int) string {
		dd := mockDeployment(upstream,
			pe("api-key-auth", nil),
			pe("basic-ratelimit", map[string]any{"consumerBased": true, "limits": []any{map[string]any{"requests": limit, "duration": "1h"}}}),
			pe("llm-cost", nil))
		dd.Providers[0].ForwardHeaders = append(dd.Providers[0].ForwardHeaders, "x-fake-*")
		_, base := serveGateway(t, prepared(dd), Options{
			Registry:  builtin.Registry(),
			Logger:    slog.New(slog.NewJSONHandler(logs, nil)),
			Services:  policies.Services{Counters: counters, Pricing: prices, Tokens: tokencount.New()},
			Backoff:   func(int) time.Duration { return time.Millisecond },
			Meter:     sink,
			GatewayID: "gw-test",
			AccessLog: accessLog,
		})
		return base
	}
	base := newGW(mock.URL, 1000)
	slowBase := newGW(slow.URL, 1000)
	// keyA's limit here is 3 requests an hour: the fourth is denied.
	limited := newGW(mock.URL, 3)

	auth := map[string]string{"Authorization": "Bearer " + keyA}
	with := func(h map[string]string) map[string]string {
		out := map[string]string{"Authorization": "Bearer " + keyB}
		for k, v := range h {
			out[k] = v
		}
		return out
	}
	cases := []struct {
		name     string
		base     string
		body     string
		hdr      map[string]string
		ctype    string
		cancelIn time.Duration
		want     meter.Resolution
		status   int
		deniedBy string
		code     string
		tokens   bool
		source   meter.UsageSource
	}{
		{name: "settled", body: chatBody, hdr: with(nil), want: meter.Settled, status: 200, tokens: true, source: meter.UsageProvider},
		{name: "settled stream", body: streamBody, hdr: with(nil), want: meter.Settled, status: 200, tokens: true, source: meter.UsageProvider},
		{name: "closed: stream without usage", body: streamBody, hdr: with(map[string]string{"X-Mock-No-Usage": "true"}), want: meter.Closed, status: 200, tokens: true, source: meter.UsageCounted},
		{name: "upstream error", body: chatBody, hdr: with(map[string]string{"X-Mock-Status": "500"}), want: meter.UpstreamError, status: 502, code: "upstream_error"},
		{name: "upstream 429 passed through", body: chatBody, hdr: with(map[string]string{"X-Mock-Status": "429"}), want: meter.UpstreamError, status: 429},
		{name: "stream cut by upstream", body: streamBody, hdr: with(map[string]string{"X-Mock-Drop-After": "2"}), want: meter.UpstreamError, status: 200, tokens: true, source: meter.UsageCounted},
		{name: "auth failed", body: chatBody, hdr: map[string]string{"Authorization": "Bearer nope"}, want: meter.AuthFailed, status: 401, deniedBy: "api-key-auth", code: "invalid_api_key"},
		{name: "invalid request", body: `{"model":`, hdr: with(nil), want: meter.InvalidRequest, status: 400, code: "invalid_json"},
		{name: "unsupported media", body: chatBody, ctype: "text/plain", hdr: with(nil), want: meter.InvalidRequest, status: 415, code: "unsupported_media_type"},
		{name: "abandoned", base: slowBase, body: chatBody, hdr: with(map[string]string{"X-Fake-Hang": "1"}), cancelIn: 200 * time.Millisecond, want: meter.Abandoned, status: 0},
		{name: "allowed 1", base: limited, body: chatBody, hdr: auth, want: meter.Settled, status: 200, tokens: true, source: meter.UsageProvider},
		{name: "allowed 2", base: limited, body: chatBody, hdr: auth, want: meter.Settled, status: 200, tokens: true, source: meter.UsageProvider},
		{name: "allowed 3", base: limited, body: chatBody, hdr: auth, want: meter.Settled, status: 200, tokens: true, source: meter.UsageProvider},
		{name: "denied", base: limited, body: chatBody, hdr: auth, want: meter.Denied, status: 429, deniedBy: "basic-ratelimit", code: "rate_limit_exceeded"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id := "meter-" + string(rune('a'+i))
			b := tc.base
			if b == "" {
				b = base
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.cancelIn > 0 {
				time.AfterFunc(tc.cancelIn, cancel)
			}
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, b+"/openai/v1/chat/completions", strings.NewReader(tc.body))
			ct := tc.ctype
			if ct == "" {
				ct = "application/json"
			}
			req.Header.Set("Content-Type", ct)
			req.Header.Set("X-Request-Id", id)
			for k, v := range tc.hdr {
				req.Header.Set(k, v)
			}
			status := 0
			if resp, err := http.DefaultClient.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				status = resp.StatusCode
			}
			if tc.cancelIn == 0 && status != tc.status {
				t.Fatalf("client status %d, want %d", status, tc.status)
			}
			recs := sink.waitFor(t, id, 1)
			if len(recs) != 1 {
				t.Fatalf("%d records, want 1: %+v", len(recs), recs)
			}
			r := recs[0]
			if r.Resolution != tc.want || r.Status != tc.status || r.DeniedBy != tc.deniedBy || r.ErrorCode != tc.code {
				t.Fatalf("record %+v: want resolution %v status %d denied_by %q error_code %q", r, tc.want, tc.status, tc.deniedBy, tc.code)
			}
			if r.ID == id || r.ClientRequestID != id {
				t.Fatalf("record id %q client_request_id %q: the id is the gateway's, the client's is kept beside it", r.ID, r.ClientRequestID)
			}
			if r.GatewayID != "gw-test" || r.Route != "quota-route" || r.Provider != "openai" || r.LatencyMicros <= 0 {
				t.Fatalf("record %+v", r)
			}
			if got := r.PromptTokens > 0 && r.CompletionTokens > 0; got != tc.tokens || r.UsageSource != tc.source {
				t.Fatalf("record tokens %d/%d source %v, want tokens %v source %v", r.PromptTokens, r.CompletionTokens, r.UsageSource, tc.tokens, tc.source)
			}
			if tc.tokens && (r.CostMicroUSD <= 0 || r.PriceVersion != prices.Date() || r.ServedModel == "") {
				t.Fatalf("record cost %d price version %q served %q", r.CostMicroUSD, r.PriceVersion, r.ServedModel)
			}
			if tc.want == meter.AuthFailed && (r.Application != "" || r.KeyID != "") {
				t.Fatalf("auth failure names application %q key %q", r.Application, r.KeyID)
			}
			if tc.want != meter.AuthFailed && tc.want != meter.InvalidRequest && r.Application == "" {
				t.Fatalf("record without application: %+v", r)
			}
			wentUp := tc.want != meter.AuthFailed && tc.want != meter.InvalidRequest && tc.want != meter.Denied
			if (r.Attempts > 0) != wentUp {
				t.Fatalf("attempts %d", r.Attempts)
			}
			if forwarded := tc.status == 200 || tc.status == http.StatusTooManyRequests && tc.want == meter.UpstreamError; (r.TTFTMicros > 0) != forwarded {
				t.Fatalf("ttft %d with status %d", r.TTFTMicros, tc.status)
			}
			if !strings.Contains(access.String(), `"id":"`+r.ID+`"`) {
				t.Fatalf("no access log line for %s", r.ID)
			}
		})
	}
}

// gateSink holds every Append until release is closed; entered receives
// each record's id when its Append starts.
type gateSink struct {
	entered chan string
	release chan struct{}
}

func (s *gateSink) Append(r *meter.Record) error {
	s.entered <- r.ID
	<-s.release
	return nil
}

// TestRecordAppendedBeforeLastByte: the usage record is appended before the
// response's last byte leaves the gateway, so a client that read an answer
// to its end (a body's Content-Length, a stream's final chunk) has its record
// in the sink even if the gateway is killed right after: while the sink's
// Append is held, no client gets its complete answer, whatever the body's
// size.
func TestRecordAppendedBeforeLastByte(t *testing.T) {
	mock := startUpstream(t, mockllm.New(mockllm.Options{Counter: tokencount.New()}))
	cases := []struct{ name, body string }{
		{"small body", `{"model":"gpt-4o-mini","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`},
		// Several times net/http's buffers: most of it is written through
		// before the handler returns.
		{"large body", `{"model":"gpt-4o-mini","max_tokens":4000,"messages":[{"role":"user","content":"hi"}]}`},
		{"stream", `{"model":"gpt-4o-mini","max_tokens":50,"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sink := &gateSink{entered: make(chan string, 1), release: make(chan struct{})}
			var once sync.Once
			free := func() { once.Do(func() { close(sink.release) }) }
			t.Cleanup(free)
			_, base := serveGateway(t, prepared(mockDeployment(mock.URL)), Options{
				Registry: builtin.Registry(),
				Logger:   slog.New(slog.DiscardHandler),
				Services: policies.Services{Tokens: tokencount.New()},
				Meter:    sink,
			})
			type answer struct {
				n   int
				err error
			}
			read := make(chan answer, 1)
			go func() {
				req, _ := http.NewRequest(http.MethodPost, base+"/openai/v1/chat/completions", strings.NewReader(tc.body))
				req.Header.Set("Content-Type", "application/json")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					read <- answer{err: err}
					return
				}
				defer resp.Body.Close()
				b, err := io.ReadAll(resp.Body)
				read <- answer{n: len(b), err: err}
			}()
			select {
			case <-sink.entered:
			case a := <-read:
				t.Fatalf("the client read its answer (%d bytes, %v) before the record was appended", a.n, a.err)
			case <-time.After(10 * time.Second):
				t.Fatal("no record appended")
			}
			select {
			case a := <-read:
				t.Fatalf("the client read its answer to the end (%d bytes, %v) while the record's append was held", a.n, a.err)
			case <-time.After(200 * time.Millisecond):
			}
			free()
			a := <-read
			if a.err != nil {
				t.Fatalf("answer after the append: %v", a.err)
			}
			if tc.name == "large body" && a.n < 12<<10 {
				t.Fatalf("the large body is only %d bytes", a.n)
			}
		})
	}
}

// TestRecordOfHugeModelName: a client naming a model of 100 KiB (the body
// allows it) still gets its request metered: the record's model names are
// cut to meter.MaxModelBytes, so the spool stores it instead of refusing a
// record over its 64 KiB bound.
func TestRecordOfHugeModelName(t *testing.T) {
	mock := startUpstream(t, mockllm.New(mockllm.Options{Counter: tokencount.New()}))
	sp, err := spool.Open(t.TempDir(), spool.Options{Sync: meter.SyncNone})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sp.Close() })
	_, base := serveGateway(t, prepared(mockDeployment(mock.URL, pe("api-key-auth", nil))), Options{
		Registry: builtin.Registry(),
		Logger:   slog.New(slog.DiscardHandler),
		Services: policies.Services{Tokens: tokencount.New()},
		Meter:    sp,
	})
	model := strings.Repeat("m", 100<<10)
	req, _ := http.NewRequest(http.MethodPost, base+"/openai/v1/chat/completions",
		strings.NewReader(`{"model":"`+model+`","messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+keyB)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	var b spool.Batch
	for deadline := time.Now().Add(5 * time.Second); b.Len() == 0 && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if b, err = sp.Next(10); err != nil {
			t.Fatal(err)
		}
	}
	if b.Len() != 1 {
		t.Fatalf("%d records stored (spool stats %+v), want 1", b.Len(), sp.Stats())
	}
	r, err := meter.Decode(b.Records[0])
	if err != nil {
		t.Fatal(err)
	}
	if r.RequestedModel != model[:meter.MaxModelBytes] || r.Status != resp.StatusCode {
		t.Errorf("record: requested_model of %d bytes, status %d (client got %d)", len(r.RequestedModel), r.Status, resp.StatusCode)
	}
	if len(r.ServedModel) > meter.MaxModelBytes {
		t.Errorf("served_model of %d bytes", len(r.ServedModel))
	}
}
