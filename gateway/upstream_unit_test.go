package gateway

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"testing"
)

// newUpstreamRequest builds the request http.NewRequestWithContext builds
// from the formatted URL and a bytes.Reader over the body.
func TestNewUpstreamRequestMatchesNewRequest(t *testing.T) {
	type ctxKey struct{}
	ctx := context.WithValue(context.Background(), ctxKey{}, "attempt")
	for _, tc := range []struct {
		name, target, path, method string
		body                       []byte
	}{
		{name: "chat", target: "http://127.0.0.1:9000", path: "/v1/chat/completions", method: http.MethodPost, body: []byte(`{"model":"m"}`)},
		{name: "base path and query", target: "https://api.example.com/openai?api-version=2024", path: "/v1/chat/completions", method: http.MethodPost, body: []byte(`{}`)},
		{name: "empty port", target: "http://example.com:", path: "/v1/models", method: http.MethodGet},
		{name: "ipv6", target: "http://[::1]:8080/base/", path: "/v1/x", method: http.MethodPost, body: []byte{}},
		{name: "escaped path", target: "http://h", path: "/v1/a b/%2F?#x", method: http.MethodPost, body: []byte("x")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target, err := url.Parse(tc.target)
			if err != nil {
				t.Fatal(err)
			}
			u := *target
			u.Path += tc.path
			u.RawPath = ""
			var rd io.Reader
			if tc.body != nil {
				rd = bytes.NewReader(tc.body)
			}
			want, err := http.NewRequestWithContext(ctx, tc.method, u.String(), rd)
			if err != nil {
				t.Fatal(err)
			}
			header := http.Header{"X-Test": {"1"}}
			got := newUpstreamRequest(ctx, tc.method, &u, header, tc.body)
			if got.URL.String() != want.URL.String() || *got.URL != *want.URL {
				t.Errorf("URL %#v, want %#v", got.URL, want.URL)
			}
			if got.Method != want.Method || got.Host != want.Host || got.Proto != want.Proto ||
				got.ProtoMajor != want.ProtoMajor || got.ProtoMinor != want.ProtoMinor || got.ContentLength != want.ContentLength {
				t.Errorf("request %s %s %s %d, want %s %s %s %d", got.Method, got.Host, got.Proto, got.ContentLength,
					want.Method, want.Host, want.Proto, want.ContentLength)
			}
			if got.Context() != ctx || got.Header.Get("X-Test") != "1" {
				t.Error("context or header not the one given")
			}
			if (got.Body == nil) != (want.Body == nil) || (got.Body == http.NoBody) != (want.Body == http.NoBody) ||
				(got.GetBody == nil) != (want.GetBody == nil) {
				t.Fatalf("body %v getBody %v, want %v %v", got.Body, got.GetBody != nil, want.Body, want.GetBody != nil)
			}
			if got.Body == nil {
				return
			}
			read := func(rc io.ReadCloser) string {
				b, err := io.ReadAll(rc)
				if err != nil {
					t.Fatal(err)
				}
				return string(b)
			}
			if g, w := read(got.Body), read(want.Body); g != w {
				t.Errorf("body %q, want %q", g, w)
			}
			for range 2 { // GetBody replays the whole body each time
				gb, _ := got.GetBody()
				wb, _ := want.GetBody()
				if g, w := read(gb), read(wb); g != w || g != string(tc.body) {
					t.Errorf("GetBody %q, want %q", g, w)
				}
			}
		})
	}
}

// Request ids are the prefix, a dash and the counter in at least 8 hex digits.
func TestRequestIDsFormat(t *testing.T) {
	for _, n := range []uint64{0, 1, 0xabc, 0xffffffff, 0x100000000, 1<<64 - 2} {
		ids := requestIDs{prefix: "a1b2c3d4e5f6"}
		ids.n.Store(n)
		if got, want := ids.next(), fmt.Sprintf("a1b2c3d4e5f6-%08x", n+1); got != want {
			t.Errorf("next after %d = %q, want %q", n, got, want)
		}
	}
}
