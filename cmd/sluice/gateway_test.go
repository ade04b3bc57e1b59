package main

// Process-level tests of `sluice gateway`: the real binary, the real mock
// upstream process, signals and the file watcher, observed from outside as an
// operator would.

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"sluice/deployment"
	"sluice/deployment/demo"
	"sluice/internal/proctest"
)

// sluiceBin is the binary built once for the package's tests (TestMain
// removes it).
var sluiceBin proctest.Binary

func TestMain(m *testing.M) {
	code := m.Run()
	sluiceBin.Remove()
	os.Exit(code)
}

// sluiceBinary builds ./cmd/sluice once per test binary run and returns its path.
func sluiceBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("process tests build and run the binary; skipped with -short")
	}
	return sluiceBin.Path(t)
}

const testKey = "sk-cmd-test-key"

// deploymentDoc is a one-route deployment over upstream whose model-access
// list is allow; extraParam is appended to model-access's params (for bad
// files).
func deploymentDoc(upstream string, allow []string, extraParam string) string {
	quoted := make([]string, len(allow))
	for i, m := range allow {
		quoted[i] = fmt.Sprintf("%q", m)
	}
	doc := fmt.Sprintf(`apiVersion: sluice/v1
providers:
  - name: mock
    type: openai
    url: %s
    forwardHeaders: ["x-mock-*"]
applications:
  - id: app-cmd
    name: cmd test
    apiKeys: [%q]
routes:
  - name: cmdtest
    context: /openai
    provider: mock
    policies:
      - name: api-key-auth
        version: v1
      - name: model-access
        version: v1
        params:
          allow: [%s]
`, upstream, deployment.HashKey(testKey), strings.Join(quoted, ", "))
	if extraParam != "" {
		doc += "          " + extraParam + "\n"
	}
	return doc
}

// writeAtomically replaces path's content in one rename, so the watcher never
// reads a half-written file.
func writeAtomically(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// chat sends a non-streaming chat request for model with key and returns the
// status and body.
func chat(t *testing.T, gw, key, model string) (int, string) {
	t.Helper()
	body := fmt.Sprintf(`{"model":%q,"max_tokens":3,"messages":[{"role":"user","content":"hello"}]}`, model)
	req, err := http.NewRequest(http.MethodPost, gw+"/openai/v1/chat/completions", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("chat %s: %v", model, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// waitStatus polls until a chat for model answers want, or fails after within.
func waitStatus(t *testing.T, gw, model string, want int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		got, body := chat(t, gw, testKey, model)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: status %d after %v, want %d: %s", model, got, within, want, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func mustStatus(t *testing.T, gw, model string, want int) {
	t.Helper()
	if got, body := chat(t, gw, testKey, model); got != want {
		t.Fatalf("%s: status %d, want %d: %s", model, got, want, body)
	}
}

// TestGatewayProcess drives `sluice gateway --config` processes over one
// `sluice mock-llm` process.
func TestGatewayProcess(t *testing.T) {
	bin := sluiceBinary(t)
	mock := proctest.StartMock(t, bin)

	start := func(t *testing.T, allow []string, watch time.Duration) (*proctest.Proc, string) {
		t.Helper()
		path := filepath.Join(t.TempDir(), "deployment.yaml")
		writeAtomically(t, path, deploymentDoc(mock.URL, allow, ""))
		gw := proctest.StartGateway(t, bin, "gateway", "--config", path, "--watch-interval", watch.String())
		return gw, path
	}

	// The watcher picks up a good file; a bad one keeps the last good
	// configuration serving and is reported with its file, line and field.
	t.Run("file watch reload", func(t *testing.T) {
		gw, path := start(t, []string{"gpt-4o-mini", "gpt-4o"}, 100*time.Millisecond)
		mustStatus(t, gw.URL, "gpt-4o", 200)
		mustStatus(t, gw.URL, "gpt-4o-mini", 200)

		writeAtomically(t, path, deploymentDoc(mock.URL, []string{"gpt-4o-mini"}, ""))
		waitStatus(t, gw.URL, "gpt-4o", http.StatusForbidden, 10*time.Second)
		mustStatus(t, gw.URL, "gpt-4o-mini", 200)
		gw.WaitLog(t, 5*time.Second, "reloading configuration", "file changed")

		// Unknown param on line 22 (the line after "allow:"), column 11.
		bad := deploymentDoc(mock.URL, []string{"gpt-4o"}, `alow: ["gpt-4o"]`)
		if got := strings.Split(bad, "\n")[21]; !strings.HasPrefix(strings.TrimSpace(got), "alow:") {
			t.Fatalf("test fixture: line 22 is %q", got)
		}
		writeAtomically(t, path, bad)
		line := gw.WaitLog(t, 10*time.Second, "keeping the last good configuration")
		for _, want := range []string{path + ":22:11", "routes[0].policies[1].params.alow", "unknown parameter"} {
			if !strings.Contains(line, want) {
				t.Fatalf("reload error does not name %q:\n%s", want, line)
			}
		}
		// The old configuration (gpt-4o denied, gpt-4o-mini allowed) serves on;
		// the bad file's allow list (gpt-4o only) was not applied.
		mustStatus(t, gw.URL, "gpt-4o", http.StatusForbidden)
		mustStatus(t, gw.URL, "gpt-4o-mini", 200)
		if gw.Exited() {
			t.Fatal("the gateway exited on a bad file")
		}
	})

	// SIGHUP reloads even when the watcher would not (its interval is an hour).
	t.Run("SIGHUP reload", func(t *testing.T) {
		gw, path := start(t, []string{"gpt-4o"}, time.Hour)
		mustStatus(t, gw.URL, "gpt-4o", 200)
		writeAtomically(t, path, deploymentDoc(mock.URL, []string{"gpt-4o-mini"}, ""))
		// The watcher is idle: the old list still serves.
		mustStatus(t, gw.URL, "gpt-4o", 200)
		gw.Signal(t, syscall.SIGHUP)
		waitStatus(t, gw.URL, "gpt-4o", http.StatusForbidden, 10*time.Second)
		mustStatus(t, gw.URL, "gpt-4o-mini", 200)
		gw.WaitLog(t, 5*time.Second, "reloading configuration", "SIGHUP")

		// A bad file on SIGHUP: kept serving, reported.
		writeAtomically(t, path, deploymentDoc(mock.URL, []string{"gpt-4o"}, "alow: [x]"))
		gw.Signal(t, syscall.SIGHUP)
		gw.WaitLog(t, 10*time.Second, "keeping the last good configuration", "params.alow")
		mustStatus(t, gw.URL, "gpt-4o", http.StatusForbidden)
		mustStatus(t, gw.URL, "gpt-4o-mini", 200)
	})

	// SIGTERM while a slow stream is in flight: the stream is drained to its
	// end and the process exits 0.
	t.Run("SIGTERM drains a stream", func(t *testing.T) {
		gw, _ := start(t, []string{"gpt-4o-mini"}, time.Hour)
		const tokens = 15
		body := fmt.Sprintf(`{"model":"gpt-4o-mini","stream":true,"max_tokens":%d,"messages":[{"role":"user","content":"take your time"}]}`, tokens)
		req, _ := http.NewRequest(http.MethodPost, gw.URL+"/openai/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+testKey)
		req.Header.Set("x-mock-token-delay-ms", "100")
		resp, err := (&http.Client{Timeout: 60 * time.Second}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != 200 {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("stream: %d %s", resp.StatusCode, b)
		}
		br := bufio.NewReader(resp.Body)
		first, err := br.ReadString('\n')
		if err != nil || !strings.HasPrefix(first, "data: ") {
			t.Fatalf("first event: %q %v", first, err)
		}

		gw.Signal(t, syscall.SIGTERM)
		gw.WaitLog(t, 10*time.Second, "shutting down")
		// The listener is closed at once: new connections are refused while
		// the stream is still being served.
		deadline := time.Now().Add(5 * time.Second)
		addr := strings.TrimPrefix(gw.URL, "http://")
		for {
			c, err := net.DialTimeout("tcp", addr, time.Second)
			if err != nil {
				break
			}
			c.Close()
			if time.Now().After(deadline) {
				t.Fatal("the gateway still accepts connections after SIGTERM")
			}
			time.Sleep(20 * time.Millisecond)
		}

		rest, err := io.ReadAll(br)
		if err != nil {
			t.Fatalf("stream cut during shutdown: %v\nreceived: %s", err, rest)
		}
		all := first + string(rest)
		if n := strings.Count(all, `"content":" tok"`); n != tokens {
			t.Fatalf("stream delivered %d of %d tokens:\n%s", n, tokens, all)
		}
		if !strings.HasSuffix(strings.TrimSpace(all), "data: [DONE]") {
			t.Fatalf("stream does not end with [DONE]:\n%s", all)
		}
		if code := gw.WaitExit(t, 30*time.Second); code != 0 {
			t.Fatalf("exit code %d after SIGTERM", code)
		}
		gw.WaitLog(t, time.Second, "gateway stopped")
	})
}

// TestGatewayDefaultDeployment is `make run`: no --config and no
// OPENAI_API_KEY serves the embedded demo deployment against the in-process
// mock upstream on 127.0.0.1:9000, with the demo key.
func TestGatewayDefaultDeployment(t *testing.T) {
	bin := sluiceBinary(t) // skips with -short before probing the port
	mockAddr := strings.TrimPrefix(demo.MockUpstreamURL, "http://")
	if ln, err := net.Listen("tcp", mockAddr); err != nil {
		t.Skipf("%s is busy (%v); the default deployment's mock upstream needs it", mockAddr, err)
	} else {
		ln.Close()
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OPENAI_API_KEY=") {
			env = append(env, kv)
		}
	}
	gw := proctest.Start(t, bin, proctest.Spec{Name: "gateway (default)", Env: env, ReadyPath: "/readyz",
		Args: []string{"gateway", "--listen", "127.0.0.1:0"}})

	status, body := chat(t, gw.URL, demo.Key, "gpt-4o-mini")
	if status != 200 || !strings.Contains(body, `"content":" tok tok tok"`) || !strings.Contains(body, `"completion_tokens":3`) {
		t.Fatalf("chat with the demo key: %d %s", status, body)
	}
	if status, body := chat(t, gw.URL, "sk-not-the-demo-key", "gpt-4o-mini"); status != http.StatusUnauthorized {
		t.Fatalf("chat with a wrong key: %d %s", status, body)
	}
	gw.WaitLog(t, time.Second, "mock upstream started")

	gw.Signal(t, syscall.SIGTERM)
	if code := gw.WaitExit(t, 30*time.Second); code != 0 {
		t.Fatalf("exit code %d after SIGTERM", code)
	}
	// The in-process mock is stopped with the gateway: its port is free again.
	ln, err := net.Listen("tcp", mockAddr)
	if err != nil {
		t.Fatalf("the in-process mock still holds %s after exit: %v", mockAddr, err)
	}
	ln.Close()
}
