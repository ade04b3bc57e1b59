package gateway

import (
	"bytes"
	"compress/gzip"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"sluice/deployment"
	"sluice/policies"
	"sluice/sharedctx"
)

func TestUpstreamHeaderAllowlist(t *testing.T) {
	in := http.Header{}
	for k, v := range map[string]string{
		"Content-Type": "application/json", "Accept": "text/event-stream", "User-Agent": "OpenAI/Go 3",
		"Traceparent": "00-x-y-01", "Tracestate": "a=b", "Idempotency-Key": "k1", "X-Stainless-Os": "Linux",
		"Openai-Beta": "assistants=v2", "Anthropic-Version": "2023-06-01", "Anthropic-Beta": "b1",
		"Authorization": "Bearer client", "X-Api-Key": "client", "Cookie": "c=1", "Openai-Organization": "org",
		"Openai-Project": "proj", "X-Request-Id": "client-id", "Accept-Encoding": "br", "Content-Encoding": "gzip",
		"X-Tenant": "t1", "X-Mock-Status": "500", "X-Other": "o", "Connection": "X-Hop", "X-Hop": "h",
	} {
		in.Set(k, v)
	}
	cases := []struct {
		typ     string
		forward []string
		want    []string
	}{
		{"openai", nil, []string{"Accept", "Authorization", "Content-Type", "Idempotency-Key", "Openai-Beta", "Traceparent", "Tracestate", "User-Agent", "X-Request-Id", "X-Stainless-Os"}},
		{"anthropic", nil, []string{"Accept", "Anthropic-Beta", "Anthropic-Version", "Authorization", "Content-Type", "Idempotency-Key", "Traceparent", "Tracestate", "User-Agent", "X-Request-Id", "X-Stainless-Os"}},
		// forwardHeaders adds names and prefixes, but never what is unforwardable
		// (x-* matches X-Api-Key) nor what Connection names.
		{"openai", []string{"x-tenant", "x-mock-*", "x-*"}, []string{"Accept", "Authorization", "Content-Type", "Idempotency-Key", "Openai-Beta", "Traceparent", "Tracestate", "User-Agent", "X-Mock-Status", "X-Other", "X-Request-Id", "X-Stainless-Os", "X-Tenant"}},
	}
	for _, tc := range cases {
		p := &provider{typ: tc.typ, forward: forwardSet(tc.typ, tc.forward), authHeader: "Authorization", authValue: "Bearer provider"}
		call := &policies.Call{Shared: sharedctx.New("gw-id", "r", "r", "p"), Request: &policies.Request{Header: in}}
		out := upstreamHeader(call, p)
		var got []string
		for k := range out {
			got = append(got, k)
		}
		slices.Sort(got)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s %v: forwarded %v\nwant %v", tc.typ, tc.forward, got, tc.want)
		}
		if out.Get("Authorization") != "Bearer provider" || out.Get("X-Request-Id") != "gw-id" {
			t.Errorf("%s: Authorization %q, X-Request-Id %q", tc.typ, out.Get("Authorization"), out.Get("X-Request-Id"))
		}
	}
}

// TestUpstreamApplicationHeader: the provider's application header carries
// the caller's application id, and a value the client sent for it (in any
// case, even one forwardHeaders lists) never reaches the provider.
func TestUpstreamApplicationHeader(t *testing.T) {
	cases := []struct {
		name    string
		app     string
		client  http.Header
		forward []string
		want    []string // the values of X-Mock-Tenant upstream
	}{
		{"set from the application", "app-a", http.Header{}, nil, []string{"app-a"}},
		{"the client's value is replaced", "app-a", http.Header{"X-Mock-Tenant": {"app-b", "app-c"}}, []string{"x-mock-*"}, []string{"app-a"}},
		{"a non-canonical key from the client is dropped", "app-a", http.Header{"x-mock-tenant": {"app-b"}}, []string{"X-Mock-Tenant"}, []string{"app-a"}},
		{"unauthenticated: dropped, not set", "", http.Header{"X-Mock-Tenant": {"app-b"}}, []string{"x-mock-*"}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := &provider{typ: "openai", forward: forwardSet("openai", tc.forward), appHeader: "X-Mock-Tenant"}
			sh := sharedctx.New("gw-id", "r", "r", "p")
			sh.Auth.ApplicationID = tc.app
			out := upstreamHeader(&policies.Call{Shared: sh, Request: &policies.Request{Header: tc.client}}, p)
			var got []string
			for k, vs := range out {
				if strings.EqualFold(k, "X-Mock-Tenant") {
					got = append(got, vs...)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("X-Mock-Tenant upstream %q, want %q", got, tc.want)
			}
		})
	}
}

func TestBodyEncoding(t *testing.T) {
	cases := []struct {
		values []string
		gz     bool
		status int
	}{
		{nil, false, 0},
		{[]string{"identity"}, false, 0},
		{[]string{"gzip"}, true, 0},
		{[]string{"GZip"}, true, 0},
		{[]string{"x-gzip"}, true, 0},
		{[]string{"identity, gzip"}, true, 0},
		{[]string{"br"}, false, 415},
		{[]string{"gzip, gzip"}, false, 415},
		{[]string{"gzip", "br"}, false, 415},
		{[]string{"compress"}, false, 415},
	}
	for _, tc := range cases {
		h := http.Header{"Content-Encoding": tc.values}
		gz, gerr := bodyEncoding(h)
		status := 0
		if gerr != nil {
			status = gerr.Status
		}
		if gz != tc.gz || status != tc.status {
			t.Errorf("%q: gz %v status %d, want %v %d", tc.values, gz, status, tc.gz, tc.status)
		}
	}
}

func gz(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	_, _ = w.Write(b)
	_ = w.Close()
	return buf.Bytes()
}

func TestReadBody(t *testing.T) {
	const limit = 1000
	plain := bytes.Repeat([]byte("a"), limit)
	cases := []struct {
		name     string
		body     []byte
		encoding string
		want     []byte
		status   int
	}{
		{"plain at the limit", plain, "", plain, 0},
		{"plain over the limit", append(plain, 'b'), "", nil, 413},
		{"gzip at the limit", gz(t, plain), "gzip", plain, 0},
		{"gzip over the limit decompressed", gz(t, append(plain, 'b')), "gzip", nil, 413},
		{"a bomb", gz(t, make([]byte, 10<<20)), "gzip", nil, 413},
		{"gzip over the limit compressed", append(gz(t, []byte("x")), make([]byte, limit)...), "gzip", nil, 413},
		{"not gzip", []byte("{}"), "gzip", nil, 400},
		{"truncated gzip", gz(t, plain)[:20], "gzip", nil, 400},
		{"two gzip members", append(gz(t, []byte(`{"a":`)), gz(t, []byte(`1}`))...), "gzip", []byte(`{"a":1}`), 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(tc.body))
			r.ContentLength = -1 // as a chunked upload: only the reader bounds it
			if tc.encoding != "" {
				r.Header.Set("Content-Encoding", tc.encoding)
			}
			got, gerr := readBody(r, limit)
			status := 0
			if gerr != nil {
				status = gerr.Status
			}
			if status != tc.status || !bytes.Equal(got, tc.want) {
				t.Fatalf("status %d, %d bytes; want %d, %d bytes (%v)", status, len(got), tc.status, len(tc.want), gerr)
			}
			if cap(got) > limit+1 {
				t.Fatalf("buffer capacity %d past the bound %d", cap(got), limit+1)
			}
		})
	}
}

func TestFilterModels(t *testing.T) {
	allow := func(id string) bool { return strings.HasPrefix(id, "gpt-4o") }
	cases := []struct {
		name, in, want string
		ok             bool
	}{
		{"openai", `{"object":"list","data":[{"id":"gpt-4o","object":"model","owned_by":"x"},{"id":"o3","object":"model"},{"id":"gpt-4o-mini"}]}`,
			`{"data":[{"id":"gpt-4o","object":"model","owned_by":"x"},{"id":"gpt-4o-mini"}],"object":"list"}`, true},
		{"anthropic page", `{"data":[{"type":"model","id":"claude-x"},{"type":"model","id":"gpt-4o-z"}],"has_more":true,"first_id":"claude-x","last_id":"gpt-4o-z"}`,
			`{"data":[{"type":"model","id":"gpt-4o-z"}],"first_id":"gpt-4o-z","has_more":true,"last_id":"gpt-4o-z"}`, true},
		{"anthropic, nothing allowed", `{"data":[{"id":"claude-x"}],"first_id":"claude-x","last_id":"claude-x","has_more":false}`,
			`{"data":[],"first_id":null,"has_more":false,"last_id":null}`, true},
		{"no data", `{"object":"list"}`, "", false},
		{"data not a list", `{"data":{}}`, "", false},
		{"a model without id", `{"data":[{"name":"x"}]}`, "", false},
		{"not json", `<html>`, "", false},
	}
	for _, tc := range cases {
		got, ok := filterModels([]byte(tc.in), allow)
		if ok != tc.ok || (ok && string(got) != tc.want) {
			t.Errorf("%s: %v %s\nwant %v %s", tc.name, ok, got, tc.ok, tc.want)
		}
	}
}

func TestCORSPolicy(t *testing.T) {
	p := newCORS(&deployment.CORS{AllowOrigins: []string{"https://App.example.com"}, AllowHeaders: []string{"x-trace-*"},
		ExposeHeaders: []string{"openai-processing-ms"}, MaxAge: deployment.Duration(90 * time.Second)})
	for origin, want := range map[string]string{
		"https://app.example.com":      "https://app.example.com",
		"https://APP.example.com":      "https://APP.example.com",
		"https://app.example.com:8443": "",
		"http://app.example.com":       "",
		"":                             "",
	} {
		if got := p.allowOrigin(origin); got != want {
			t.Errorf("allowOrigin(%q) = %q, want %q", origin, got, want)
		}
	}
	if p.maxAge != "90" {
		t.Errorf("maxAge %q", p.maxAge)
	}
	for name, want := range map[string]bool{"authorization": true, "X-Stainless-Retry-Count": true, "x-trace-id": true, "cookie": false, "x-other": false} {
		if p.allow.has(name) != want {
			t.Errorf("allow %s = %v", name, !want)
		}
	}
	for name, want := range map[string]bool{"X-Ratelimit-Remaining-Tokens": true, "Retry-After": true, "X-Sluice-Policy": true, "Openai-Processing-Ms": true, "Set-Cookie": false} {
		if p.expose.has(name) != want {
			t.Errorf("expose %s = %v", name, !want)
		}
	}
	if star := newCORS(&deployment.CORS{AllowOrigins: []string{"*"}}); star.allowOrigin("https://x.test") != "*" {
		t.Error(`"*" does not allow every origin`)
	}
}
