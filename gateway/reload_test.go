package gateway

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sluice/deployment"
	"sluice/deployment/yamlfile"
	"sluice/policies"
)

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

const reloadYAML = `apiVersion: sluice/v1
providers:
  - name: openai
    type: openai
    url: %URL%
    retries: 0
    forwardHeaders: ["x-mock-*"]
routes:
  - name: %ROUTE%
    context: %CTX%
    provider: openai
    policies:
      - name: recorder
        version: v1
        params: {tag: %TAG%}
`

func reloadDoc(url, route, ctx, tag string) string {
	return strings.NewReplacer("%URL%", url, "%ROUTE%", route, "%CTX%", ctx, "%TAG%", tag).Replace(reloadYAML)
}

// TestHotReload: a bad file keeps the old configuration; a good one swaps the
// routes and chains while a slow stream that started before it completes on
// the old chain.
func TestHotReload(t *testing.T) {
	srv := startUpstream(t, &fakeLLM{})
	dir := t.TempDir()
	path := filepath.Join(dir, "deploy.yaml")
	writeFile(t, path, reloadDoc(srv.URL, "old", "/openai", "a"))
	d, err := yamlfile.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	env := startGateway(t, d)
	load := func() (*deployment.Deployment, error) { return yamlfile.Load(path) }

	// Bad files: broken YAML, and a chain that does not build.
	for _, bad := range []string{
		"apiVersion: sluice/v1\nroutes: [ {name: x\n",
		strings.Replace(reloadDoc(srv.URL, "new", "/v2", "b"), "name: recorder", "name: no-such-policy", 1),
	} {
		writeFile(t, path, bad)
		if err := env.gw.Reload(load); err == nil {
			t.Fatalf("bad file accepted:\n%s", bad)
		}
		resp, body := env.post(t, "/openai/v1/chat/completions", "application/json", chatBody, nil)
		if resp.StatusCode != 200 {
			t.Fatalf("after a bad reload the old config must keep serving: %d %s", resp.StatusCode, body)
		}
	}
	if !strings.Contains(env.logs.String(), "keeping the last good configuration") {
		t.Fatal("a failed reload was not logged")
	}

	// A slow stream in flight on the old configuration.
	br := env.openStream(t, "/openai", "req-slow", 100)

	writeFile(t, path, reloadDoc(srv.URL, "new", "/v2", "b"))
	if err := env.gw.Reload(load); err != nil {
		t.Fatal(err)
	}
	r2, body := env.post(t, "/v2/v1/chat/completions", "application/json", chatBody, map[string]string{"X-Request-Id": "req-new"})
	if r2.StatusCode != 200 {
		t.Fatalf("new route: %d %s", r2.StatusCode, body)
	}
	if f := env.log.waitFinals(t, "req-new", 1); f[0].Tag != "b" {
		t.Fatalf("new request ran on chain %q", f[0].Tag)
	}
	if r3, _ := env.post(t, "/openai/v1/chat/completions", "application/json", chatBody, nil); r3.StatusCode != 404 {
		t.Fatalf("old route still served after reload: %d", r3.StatusCode)
	}

	rest, err := io.ReadAll(br)
	if err != nil {
		t.Fatalf("in-flight stream broken by reload: %v", err)
	}
	if !strings.Contains(string(rest), "tok4") || !strings.Contains(string(rest), "[DONE]") {
		t.Fatalf("in-flight stream incomplete: %s", rest)
	}
	finals := env.log.waitFinals(t, "req-slow", 1)
	if finals[0].Tag != "a" || finals[0].Kind != policies.Completed {
		t.Fatalf("in-flight stream finals = %+v", finals)
	}
}
