package main

// Process-level tests of where a user looks first: the startup log, the demo
// deployment with a real provider key, /metrics on its own listener, --help
// and version.

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"sluice/deployment/demo"
	"sluice/internal/proctest"
	"sluice/mockllm"
)

// TestGatewayStartupLog: the gateway says which upstream each route proxies
// to and which counter store it uses (Redis without its password).
func TestGatewayStartupLog(t *testing.T) {
	bin := sluiceBinary(t)
	mock := proctest.StartMock(t, bin)
	doc := deploymentDoc(mock.URL, []string{"gpt-4o-mini"}, "")
	doc = strings.Replace(doc, "providers:", `counters:
  backend: redis
  redis: {url: "redis://:redis-secret-pw@127.0.0.1:1/0", failureMode: open}
providers:`, 1)
	path := filepath.Join(t.TempDir(), "deployment.yaml")
	writeAtomically(t, path, doc)
	gw := proctest.StartGateway(t, bin, "gateway", "--config", path)

	gw.WaitLog(t, 5*time.Second, "msg=route", "name=cmdtest", "context=/openai", "provider=mock", "upstream="+mock.URL)
	gw.WaitLog(t, 5*time.Second, `msg="counter store"`, "backend=redis", "addr=redis://127.0.0.1:1/0", "failure_mode=open")
	gw.WaitLog(t, 5*time.Second, `msg="gateway listening"`, `metrics="on this listener, open"`)
	if strings.Contains(gw.Stderr(), "redis-secret-pw") {
		t.Fatalf("the log shows the Redis password:\n%s", gw.Stderr())
	}
}

// fakeOpenAI is a stand-in for api.openai.com: it records the Authorization
// header of each request and answers as the mock.
type fakeOpenAI struct {
	mock http.Handler
	mu   sync.Mutex
	auth []string
}

func (f *fakeOpenAI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.auth = append(f.auth, r.Header.Get("Authorization"))
	f.mu.Unlock()
	f.mock.ServeHTTP(w, r)
}

func (f *fakeOpenAI) seen() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.auth...)
}

// TestGatewayDemoWithRealKey is `OPENAI_API_KEY=... make run`: the public
// demo key must never spend the real key. The gateway generates a key,
// prints it once on stderr, refuses sk-sluice-demo, and sends the real key
// upstream (OPENAI_BASE_URL points it at a local fake of OpenAI).
func TestGatewayDemoWithRealKey(t *testing.T) {
	bin := sluiceBinary(t)
	fake := &fakeOpenAI{mock: mockllm.New(mockllm.Options{})}
	srv := httptest.NewServer(fake)
	t.Cleanup(srv.Close)
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "OPENAI_") {
			env = append(env, kv)
		}
	}
	env = append(env, "OPENAI_API_KEY=sk-real-provider-key", "OPENAI_BASE_URL="+srv.URL+"/v1")
	gw := proctest.Start(t, bin, proctest.Spec{Name: "gateway (demo, real key)", Env: env, ReadyPath: "/readyz",
		Args: []string{"gateway", "--listen", "127.0.0.1:0"}})

	gw.WaitLog(t, 5*time.Second, "the public demo key sk-sluice-demo is disabled")
	m := regexp.MustCompile(`(?m)^    (sk-sluice-[0-9A-Za-z]{43})$`).FindAllStringSubmatch(gw.Stderr(), -1)
	if len(m) != 1 {
		t.Fatalf("want the generated key printed once on stderr, found %d:\n%s", len(m), gw.Stderr())
	}
	key := m[0][1]
	gw.WaitLog(t, 5*time.Second, "msg=route", "upstream="+srv.URL)
	if strings.Contains(gw.Stderr(), "sk-real-provider-key") {
		t.Fatalf("the provider key is logged:\n%s", gw.Stderr())
	}

	if status, body := chat(t, gw.URL, demo.Key, "gpt-4o-mini"); status != http.StatusUnauthorized {
		t.Fatalf("the public demo key: %d %s, want 401", status, body)
	}
	if n := len(fake.seen()); n != 0 {
		t.Fatalf("a request with the demo key reached the provider (%d requests)", n)
	}
	if status, body := chat(t, gw.URL, key, "gpt-4o-mini"); status != 200 {
		t.Fatalf("the generated key: %d %s", status, body)
	}
	if got := fake.seen(); len(got) != 1 || got[0] != "Bearer sk-real-provider-key" {
		t.Fatalf("the provider saw Authorization %q, want the real key", got)
	}
	gw.Signal(t, syscall.SIGTERM)
	if code := gw.WaitExit(t, 30*time.Second); code != 0 {
		t.Fatalf("exit code %d", code)
	}
}

// TestGatewayMetricsListen: --metrics-listen serves /metrics there and
// removes it from the proxy listener.
func TestGatewayMetricsListen(t *testing.T) {
	bin := sluiceBinary(t)
	mock := proctest.StartMock(t, bin)
	path := filepath.Join(t.TempDir(), "deployment.yaml")
	writeAtomically(t, path, deploymentDoc(mock.URL, []string{"gpt-4o-mini"}, ""))
	gw := proctest.StartGateway(t, bin, "gateway", "--config", path, "--metrics-listen", "127.0.0.1:0")
	line := gw.WaitLog(t, 5*time.Second, `msg="metrics listening"`)
	m := regexp.MustCompile(`url=(http://\S+/metrics)`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("no metrics URL in %q", line)
	}
	mustStatus(t, gw.URL, "gpt-4o-mini", 200)
	get := func(url string) (int, string) {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if status, body := get(m[1]); status != 200 || !strings.Contains(body, `sluice_requests_total{endpoint="chat.completions",route="cmdtest",status="200"} 1`) {
		t.Fatalf("metrics listener: %d %.300s", status, body)
	}
	if status, _ := get(gw.URL + "/metrics"); status != http.StatusNotFound {
		t.Fatalf("the proxy listener still serves /metrics: %d", status)
	}
	gw.WaitLog(t, time.Second, `msg="gateway listening"`, `metrics="only on --metrics-listen, open"`)
}

// TestHelpAndVersion: asking for help is not an error (exit 0, usage on
// stdout), and `sluice version` says what was built with what.
func TestHelpAndVersion(t *testing.T) {
	bin := sluiceBinary(t)
	run := func(args ...string) (int, string, string) {
		cmd := exec.Command(bin, args...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		switch {
		case err == nil:
			return 0, stdout.String(), stderr.String()
		case errors.As(err, &exit):
			return exit.ExitCode(), stdout.String(), stderr.String()
		}
		t.Fatalf("%v: %v", args, err)
		return 0, "", ""
	}
	cases := []struct {
		args   []string
		code   int
		stdout string // a fragment
	}{
		{[]string{"--help"}, 0, "usage: sluice COMMAND"},
		{[]string{"-h"}, 0, "usage: sluice COMMAND"},
		{[]string{"help"}, 0, "usage: sluice COMMAND"},
		{[]string{"help", "gateway"}, 0, "-metrics-listen"},
		{[]string{"gateway", "--help"}, 0, "usage: sluice gateway"},
		{[]string{"gateway", "-h"}, 0, "-watch-interval"},
		{[]string{"mock-llm", "--help"}, 0, "usage: sluice mock-llm"},
		{[]string{"validate", "--help"}, 0, "usage: sluice validate FILE"},
		{[]string{"keys", "--help"}, 0, "sluice keys hash KEY"},
		{[]string{"policies", "--help"}, 0, "sluice policies schema NAME"},
		{[]string{"version", "--help"}, 0, "usage: sluice version"},
		{[]string{"serve", "--help"}, 0, "usage: sluice serve"},
		{[]string{"platform", "--help"}, 0, "usage: sluice platform"},
		{[]string{"version"}, 0, "sluice "},
		{[]string{"--version"}, 0, runtime.Version()},
		{[]string{}, 2, ""},
		{[]string{"gateway", "--no-such-flag"}, 2, ""},
		{[]string{"nope"}, 2, ""},
	}
	for _, tc := range cases {
		code, stdout, stderr := run(tc.args...)
		if code != tc.code || !strings.Contains(stdout, tc.stdout) {
			t.Errorf("sluice %s: exit %d, stdout %q (stderr %q); want exit %d and %q",
				strings.Join(tc.args, " "), code, stdout, stderr, tc.code, tc.stdout)
		}
		if tc.code != 0 && !strings.Contains(stderr, "usage") {
			t.Errorf("sluice %s: a usage error without usage on stderr: %q", strings.Join(tc.args, " "), stderr)
		}
	}
	_, out, _ := run("version")
	if want := regexp.MustCompile(`^sluice \S+ \(go1\.[0-9.]+\S*, [a-z0-9]+/[a-z0-9]+\)\n$`); !want.MatchString(out) {
		t.Errorf("sluice version = %q", out)
	}
}
