package platform_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"sluice/platform"
	"sluice/policies/builtin"
)

// The console answers every GET the API and /healthz do not; the API's
// paths stay behind the admin token, unknown ones included.
func TestConsoleMountedAtRoot(t *testing.T) {
	console := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "console "+r.URL.Path) })
	p, err := platform.Open(context.Background(), platform.Options{DataDir: t.TempDir(), AdminToken: "sluice-admin-test",
		Registry: builtin.Registry(), Console: console})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p.Handler())
	t.Cleanup(func() { srv.Close(); p.Close() })
	cases := []struct {
		method, path string
		status       int
		body         string
	}{
		{"GET", "/", 200, "console /"},
		{"GET", "/providers/prv-1/guardrails", 200, "console /providers/prv-1/guardrails"},
		{"HEAD", "/applications", 200, ""},
		{"GET", "/healthz", 200, "ok\n"},
		{"GET", "/api/v1/providers", 401, ""},
		{"GET", "/api/v1/no-such-path", 401, ""},
		{"POST", "/", 405, ""},
	}
	for _, c := range cases {
		req, _ := http.NewRequest(c.method, srv.URL+c.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.status || (c.body != "" && string(b) != c.body) {
			t.Errorf("%s %s: %d %q, want %d %q", c.method, c.path, resp.StatusCode, b, c.status, c.body)
		}
	}
}
