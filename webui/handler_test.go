package webui

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/fstest"
)

var build = fstest.MapFS{
	"index.html":           {Data: []byte(`<!doctype html><html><body><div id="root"></div><script src="/assets/index-abc.js"></script></body></html>`)},
	"assets/index-abc.js":  {Data: []byte(strings.Repeat("console.log('sluice');\n", 200))},
	"assets/index-abc.css": {Data: []byte("body{margin:0}")},
	"favicon.svg":          {Data: []byte(`<svg xmlns="http://www.w3.org/2000/svg"></svg>`)},
}

func get(t *testing.T, h http.Handler, method, target string, header map[string]string) *http.Response {
	t.Helper()
	req := httptest.NewRequest(method, target, nil)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Result()
}

func body(t *testing.T, resp *http.Response) string {
	t.Helper()
	r := io.Reader(resp.Body)
	if resp.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		r = zr
	}
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestHandler(t *testing.T) {
	h, err := NewHandler(build)
	if err != nil {
		t.Fatal(err)
	}
	index := string(build["index.html"].Data)
	cases := []struct {
		name, method, path, acceptEncoding  string
		status                              int
		contentType, cacheControl, encoding string
		body                                string
	}{
		{"root is the page", "GET", "/", "", 200, "text/html; charset=utf-8", "no-cache", "", index},
		{"a client route is the page", "GET", "/providers/prv-1/rate-limits", "", 200, "text/html; charset=utf-8", "no-cache", "", index},
		{"index.html itself", "GET", "/index.html", "", 200, "text/html; charset=utf-8", "no-cache", "", index},
		{"a hashed asset is cached for a year", "GET", "/assets/index-abc.css", "", 200, "text/css; charset=utf-8", "public, max-age=31536000, immutable", "", "body{margin:0}"},
		{"gzip when accepted", "GET", "/assets/index-abc.js", "br, gzip", 200, "text/javascript; charset=utf-8", "public, max-age=31536000, immutable", "gzip", string(build["assets/index-abc.js"].Data)},
		{"no gzip with q=0", "GET", "/assets/index-abc.js", "gzip;q=0", 200, "text/javascript; charset=utf-8", "public, max-age=31536000, immutable", "", string(build["assets/index-abc.js"].Data)},
		{"a file outside assets is revalidated", "GET", "/favicon.svg", "", 200, "image/svg+xml", "no-cache", "", string(build["favicon.svg"].Data)},
		{"a missing asset is 404, not the page", "GET", "/assets/gone-123.js", "", 404, "text/plain; charset=utf-8", "", "", "404 page not found\n"},
		{"a missing file with an extension is 404", "GET", "/robots.txt", "", 404, "text/plain; charset=utf-8", "", "", "404 page not found\n"},
		{"dot segments stay inside the build", "GET", "/assets/../../../etc/passwd", "", 200, "text/html; charset=utf-8", "no-cache", "", index},
		{"dot segments to an asset", "GET", "/x/../assets/index-abc.css", "", 200, "text/css; charset=utf-8", "public, max-age=31536000, immutable", "", "body{margin:0}"},
		{"HEAD", "HEAD", "/", "", 200, "text/html; charset=utf-8", "no-cache", "", ""},
		{"POST is refused", "POST", "/", "", 405, "text/plain; charset=utf-8", "", "", "method not allowed\n"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp := get(t, h, c.method, c.path, map[string]string{"Accept-Encoding": c.acceptEncoding})
			if resp.StatusCode != c.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, c.status)
			}
			if got := resp.Header.Get("Content-Type"); got != c.contentType {
				t.Errorf("Content-Type %q, want %q", got, c.contentType)
			}
			if got := resp.Header.Get("Cache-Control"); got != c.cacheControl {
				t.Errorf("Cache-Control %q, want %q", got, c.cacheControl)
			}
			if got := resp.Header.Get("Content-Encoding"); got != c.encoding {
				t.Errorf("Content-Encoding %q, want %q", got, c.encoding)
			}
			if got := body(t, resp); got != c.body {
				t.Errorf("body %q, want %q", got, c.body)
			}
			csp := resp.Header.Get("Content-Security-Policy")
			if !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") {
				t.Errorf("Content-Security-Policy %q", csp)
			}
			if resp.Header.Get("X-Content-Type-Options") != "nosniff" {
				t.Error("no X-Content-Type-Options: nosniff")
			}
		})
	}
}

// A binary built without the console (go build on a fresh clone) says so on
// every page instead of failing.
func TestHandlerWithoutBuild(t *testing.T) {
	h, err := NewHandler(fstest.MapFS{})
	if err != nil {
		t.Fatal(err)
	}
	resp := get(t, h, "GET", "/providers", nil)
	if b := body(t, resp); resp.StatusCode != 200 || !strings.Contains(b, "built without the web console") {
		t.Fatalf("%d %q", resp.StatusCode, b)
	}
}

// The embedded build is either absent (only dist/.keep) or complete: an
// index.html whose every /assets/ reference is embedded.
func TestEmbeddedBuild(t *testing.T) {
	h, err := NewHandler(Build())
	if err != nil {
		t.Fatal(err)
	}
	if len(h.files) == 0 {
		t.Skip("the binary is built without the console (run make console)")
	}
	idx, ok := h.files["index.html"]
	if !ok {
		t.Fatal("dist/console has files but no index.html")
	}
	refs := 0
	for _, part := range bytes.Split(idx.body, []byte(`"/assets/`))[1:] {
		name := "assets/" + string(part[:bytes.IndexByte(part, '"')])
		if _, ok := h.files[name]; !ok {
			t.Errorf("index.html references %s, which is not embedded", name)
		}
		refs++
	}
	if refs == 0 {
		t.Error("index.html references no /assets/ file")
	}
}
