package main

// Process-level tests of `sluice gateway`: the real binary, the real mock
// upstream process, signals and the file watcher, observed from outside as an
// operator would.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"sluice/gateway/config"
)

// binDir holds the binary built once for the package's tests (TestMain
// removes it).
var binDir string

var buildOnce struct {
	sync.Once
	path string
	err  error
	out  []byte
}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sluice-cmd-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// sluiceBinary builds ./cmd/sluice once per test binary run and returns its path.
func sluiceBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("process tests build and run the binary; skipped with -short")
	}
	buildOnce.Do(func() {
		buildOnce.path = filepath.Join(binDir, "sluice")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		buildOnce.out, buildOnce.err = exec.CommandContext(ctx, "go", "build", "-o", buildOnce.path, "sluice/cmd/sluice").CombinedOutput()
	})
	if buildOnce.err != nil {
		t.Fatalf("go build ./cmd/sluice: %v\n%s", buildOnce.err, buildOnce.out)
	}
	return buildOnce.path
}

// startWait bounds process start-up (exec, listen, first config load).
const startWait = 20 * time.Second

// syncBuf is a goroutine-safe buffer for a child's stderr.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// proc is a running sluice child process.
type proc struct {
	name   string
	cmd    *exec.Cmd
	url    string // http://ADDR as printed on stdout
	stderr *syncBuf
	done   chan struct{} // closed when the process has exited
	err    error         // Wait's result, valid once done is closed
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// waitExit waits for the process to exit and returns its exit code.
func (p *proc) waitExit(t *testing.T, within time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(within):
		t.Fatalf("%s did not exit within %v", p.name, within)
	}
	return p.cmd.ProcessState.ExitCode()
}

func (p *proc) signal(t *testing.T, sig os.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("%s: signal %v: %v", p.name, sig, err)
	}
}

// startProc runs the binary with args and env (nil: inherit), waits for the
// "listening on http://ADDR" line on stdout and for readyPath to answer 200.
// The process is killed at cleanup if it is still running; its stderr is
// logged when the test failed.
func startProc(t *testing.T, name string, env []string, readyPath string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(sluiceBinary(t), args...)
	cmd.Env = env
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{name: name, cmd: cmd, stderr: &syncBuf{}, done: make(chan struct{})}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if _, a, ok := strings.Cut(sc.Text(), " listening on "); ok {
				addr <- strings.TrimSpace(a)
				break
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		p.err = cmd.Wait() // after stdout is drained, as os/exec requires
		close(p.done)
	}()
	t.Cleanup(func() {
		if !p.exited() {
			_ = cmd.Process.Kill()
		}
		<-p.done
		if t.Failed() {
			t.Logf("%s stderr:\n%s", name, p.stderr.String())
		}
	})
	select {
	case p.url = <-addr:
	case <-p.done:
		t.Fatalf("%s exited before listening (%v):\n%s", name, p.err, p.stderr.String())
	case <-time.After(startWait):
		t.Fatalf("%s printed no address within %v", name, startWait)
	}
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(startWait)
	for {
		resp, err := client.Get(p.url + readyPath)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		if p.exited() || time.Now().After(deadline) {
			t.Fatalf("%s: %s not ready: %v", name, readyPath, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
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
`, upstream, config.HashKey(testKey), strings.Join(quoted, ", "))
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

// waitLog polls the process's stderr until it contains every one of parts (on
// one line), or fails after within; it returns that line.
func waitLog(t *testing.T, p *proc, within time.Duration, parts ...string) string {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		for _, line := range strings.Split(p.stderr.String(), "\n") {
			all := true
			for _, s := range parts {
				if !strings.Contains(line, s) {
					all = false
					break
				}
			}
			if all {
				return line
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no log line with %q within %v", p.name, parts, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestGatewayProcess drives `sluice gateway --config` processes over one
// `sluice mock-llm` process.
func TestGatewayProcess(t *testing.T) {
	mock := startProc(t, "mock-llm", nil, "/healthz", "mock-llm", "--listen", "127.0.0.1:0")

	start := func(t *testing.T, allow []string, watch time.Duration) (*proc, string) {
		t.Helper()
		path := filepath.Join(t.TempDir(), "deployment.yaml")
		writeAtomically(t, path, deploymentDoc(mock.url, allow, ""))
		gw := startProc(t, "gateway", nil, "/readyz", "gateway", "--config", path,
			"--listen", "127.0.0.1:0", "--watch-interval", watch.String())
		return gw, path
	}

	// The watcher picks up a good file; a bad one keeps the last good
	// configuration serving and is reported with its file, line and field.
	t.Run("file watch reload", func(t *testing.T) {
		gw, path := start(t, []string{"gpt-4o-mini", "gpt-4o"}, 100*time.Millisecond)
		mustStatus(t, gw.url, "gpt-4o", 200)
		mustStatus(t, gw.url, "gpt-4o-mini", 200)

		writeAtomically(t, path, deploymentDoc(mock.url, []string{"gpt-4o-mini"}, ""))
		waitStatus(t, gw.url, "gpt-4o", http.StatusForbidden, 10*time.Second)
		mustStatus(t, gw.url, "gpt-4o-mini", 200)
		waitLog(t, gw, 5*time.Second, "reloading configuration", "file changed")

		// Unknown param on line 21 (the line after "allow:"), column 11.
		bad := deploymentDoc(mock.url, []string{"gpt-4o"}, `alow: ["gpt-4o"]`)
		if got := strings.Split(bad, "\n")[20]; !strings.HasPrefix(strings.TrimSpace(got), "alow:") {
			t.Fatalf("test fixture: line 21 is %q", got)
		}
		writeAtomically(t, path, bad)
		line := waitLog(t, gw, 10*time.Second, "keeping the last good configuration")
		for _, want := range []string{path + ":21:11", "routes[0].policies[1].params.alow", "unknown parameter"} {
			if !strings.Contains(line, want) {
				t.Fatalf("reload error does not name %q:\n%s", want, line)
			}
		}
		// The old configuration (gpt-4o denied, gpt-4o-mini allowed) serves on;
		// the bad file's allow list (gpt-4o only) was not applied.
		mustStatus(t, gw.url, "gpt-4o", http.StatusForbidden)
		mustStatus(t, gw.url, "gpt-4o-mini", 200)
		if gw.exited() {
			t.Fatal("the gateway exited on a bad file")
		}
	})

	// SIGHUP reloads even when the watcher would not (its interval is an hour).
	t.Run("SIGHUP reload", func(t *testing.T) {
		gw, path := start(t, []string{"gpt-4o"}, time.Hour)
		mustStatus(t, gw.url, "gpt-4o", 200)
		writeAtomically(t, path, deploymentDoc(mock.url, []string{"gpt-4o-mini"}, ""))
		// The watcher is idle: the old list still serves.
		mustStatus(t, gw.url, "gpt-4o", 200)
		gw.signal(t, syscall.SIGHUP)
		waitStatus(t, gw.url, "gpt-4o", http.StatusForbidden, 10*time.Second)
		mustStatus(t, gw.url, "gpt-4o-mini", 200)
		waitLog(t, gw, 5*time.Second, "reloading configuration", "SIGHUP")

		// A bad file on SIGHUP: kept serving, reported.
		writeAtomically(t, path, deploymentDoc(mock.url, []string{"gpt-4o"}, "alow: [x]"))
		gw.signal(t, syscall.SIGHUP)
		waitLog(t, gw, 10*time.Second, "keeping the last good configuration", "params.alow")
		mustStatus(t, gw.url, "gpt-4o", http.StatusForbidden)
		mustStatus(t, gw.url, "gpt-4o-mini", 200)
	})

	// SIGTERM while a slow stream is in flight: the stream is drained to its
	// end and the process exits 0.
	t.Run("SIGTERM drains a stream", func(t *testing.T) {
		gw, _ := start(t, []string{"gpt-4o-mini"}, time.Hour)
		const tokens = 15
		body := fmt.Sprintf(`{"model":"gpt-4o-mini","stream":true,"max_tokens":%d,"messages":[{"role":"user","content":"take your time"}]}`, tokens)
		req, _ := http.NewRequest(http.MethodPost, gw.url+"/openai/v1/chat/completions", strings.NewReader(body))
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

		gw.signal(t, syscall.SIGTERM)
		waitLog(t, gw, 10*time.Second, "shutting down")
		// The listener is closed at once: new connections are refused while
		// the stream is still being served.
		deadline := time.Now().Add(5 * time.Second)
		addr := strings.TrimPrefix(gw.url, "http://")
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
		if n := strings.Count(all, `"content":"tok "`); n != tokens {
			t.Fatalf("stream delivered %d of %d tokens:\n%s", n, tokens, all)
		}
		if !strings.HasSuffix(strings.TrimSpace(all), "data: [DONE]") {
			t.Fatalf("stream does not end with [DONE]:\n%s", all)
		}
		if code := gw.waitExit(t, 30*time.Second); code != 0 {
			t.Fatalf("exit code %d after SIGTERM", code)
		}
		waitLog(t, gw, time.Second, "gateway stopped")
	})
}

// TestGatewayDefaultDeployment is `make run`: no --config and no
// OPENAI_API_KEY serves the embedded demo deployment against the in-process
// mock upstream on 127.0.0.1:9000, with the demo key.
func TestGatewayDefaultDeployment(t *testing.T) {
	sluiceBinary(t) // skips with -short before probing the port
	mockAddr := strings.TrimPrefix(config.MockUpstreamURL, "http://")
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
	gw := startProc(t, "gateway (default)", env, "/readyz", "gateway", "--listen", "127.0.0.1:0")

	status, body := chat(t, gw.url, config.DemoKey, "gpt-4o-mini")
	if status != 200 || !strings.Contains(body, `"content":"tok tok tok "`) || !strings.Contains(body, `"completion_tokens":3`) {
		t.Fatalf("chat with the demo key: %d %s", status, body)
	}
	if status, body := chat(t, gw.url, "sk-not-the-demo-key", "gpt-4o-mini"); status != http.StatusUnauthorized {
		t.Fatalf("chat with a wrong key: %d %s", status, body)
	}
	waitLog(t, gw, time.Second, "mock upstream started")

	gw.signal(t, syscall.SIGTERM)
	if code := gw.waitExit(t, 30*time.Second); code != 0 {
		t.Fatalf("exit code %d after SIGTERM", code)
	}
	// The in-process mock is stopped with the gateway: its port is free again.
	ln, err := net.Listen("tcp", mockAddr)
	if err != nil {
		t.Fatalf("the in-process mock still holds %s after exit: %v", mockAddr, err)
	}
	ln.Close()
}
