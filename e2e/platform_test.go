package e2e

// The control plane end to end, process by process as an operator runs it:
// `sluice serve` (platform and gateway in one process) and `sluice platform`
// with separate `sluice gateway --platform` processes, configured only
// through the platform's REST API, with traffic from the openai-go client
// through `sluice mock-llm`.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"sluice/internal/proctest"
)

const (
	e2eAdminToken  = "e2e-admin-token-4f1a9c"
	e2eUpstreamKey = "sk-upstream-e2e-DO-NOT-LEAK-7c2e"
)

// admin is a client of the platform API.
type admin struct {
	t     *testing.T
	base  string
	token string
	http  *http.Client
}

func newAdmin(t *testing.T, platformURL string) *admin {
	return &admin{t: t, base: platformURL + "/api/v1", token: e2eAdminToken, http: &http.Client{Timeout: 40 * time.Second}}
}

func (a *admin) do(method, path string, body any, hdr ...string) (int, http.Header, []byte) {
	a.t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			a.t.Fatal(err)
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, a.base+path, r)
	if err != nil {
		a.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if a.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := a.http.Do(req)
	if err != nil {
		a.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

// must fails unless the status is want; it decodes the body into out.
func (a *admin) must(want int, method, path string, body, out any, hdr ...string) http.Header {
	a.t.Helper()
	status, h, b := a.do(method, path, body, hdr...)
	if status != want {
		a.t.Fatalf("%s %s: %d %s, want %d", method, path, status, b, want)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			a.t.Fatalf("%s %s: %v: %s", method, path, err, b)
		}
	}
	return h
}

type idOnly struct {
	ID    string `json:"id"`
	Key   string `json:"key"`
	Token string `json:"token"`
}

func (a *admin) create(path string, body any) idOnly {
	a.t.Helper()
	var out idOnly
	a.must(201, "POST", path, body, &out)
	return out
}

func tokenLimit(n int64) map[string]any {
	return map[string]any{"enabled": true, "count": n, "reset": map[string]any{"duration": 1, "unit": "hour"}}
}

func costLimit(usd float64) map[string]any {
	return map[string]any{"enabled": true, "amount": usd, "reset": map[string]any{"duration": 1, "unit": "month"}}
}

// setLimits replaces the provider's rate limits (read-modify-write with the
// ETag, as an operator's client does).
func (a *admin) setLimits(provider string, rl map[string]any) {
	a.t.Helper()
	h := a.must(200, "GET", "/providers/"+provider+"/rate-limits", nil, nil)
	a.must(200, "PUT", "/providers/"+provider+"/rate-limits", rl, nil, "If-Match", h.Get("ETag"))
}

type gatewayView struct {
	ID             string `json:"id"`
	State          string `json:"state"`
	AppliedVersion int64  `json:"appliedVersion"`
}

// waitApplied waits until gateway id serves the current deployment.
func (a *admin) waitApplied(id string) {
	a.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		var l struct {
			CurrentVersion int64         `json:"currentVersion"`
			Gateways       []gatewayView `json:"gateways"`
		}
		a.must(200, "GET", "/gateways", nil, &l)
		for _, g := range l.Gateways {
			if g.ID == id && g.State == "applied" && g.AppliedVersion == l.CurrentVersion {
				return
			}
		}
		if time.Now().After(deadline) {
			a.t.Fatalf("gateway %s never applied version %d: %+v", id, l.CurrentVersion, l.Gateways)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// chatOnce sends one chat completion through the gateway with the openai-go
// client and returns the HTTP status (200 on success).
func chatOnce(t *testing.T, gw, provider, key string) int {
	t.Helper()
	c := openai.NewClient(option.WithBaseURL(gw+"/"+provider+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0),
		option.WithRequestTimeout(20*time.Second))
	_, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
		Model:     "gpt-4o-mini",
		Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello from the platform test")},
		MaxTokens: openai.Int(100),
	})
	if err == nil {
		return 200
	}
	var apiErr *openai.Error
	if errors.As(err, &apiErr) {
		return apiErr.StatusCode
	}
	t.Fatalf("chat through %s: %v", gw, err)
	return 0
}

// refusedWithin measures how long after now the key is refused (401).
func refusedWithin(t *testing.T, gw, provider, key string, start time.Time, limit time.Duration) time.Duration {
	t.Helper()
	for {
		if chatOnce(t, gw, provider, key) == http.StatusUnauthorized {
			return time.Since(start)
		}
		if time.Since(start) > limit {
			t.Fatalf("key still accepted %v after its revocation", time.Since(start))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// gatewayLine waits for "sluice gateway listening on URL" on p's stdout.
func gatewayLine(t *testing.T, p *proctest.Proc) string {
	t.Helper()
	deadline := time.Now().Add(proctest.StartTimeout)
	for {
		for line := range strings.SplitSeq(p.Stdout(), "\n") {
			if _, u, ok := strings.Cut(line, "sluice gateway listening on "); ok {
				return strings.TrimSpace(u)
			}
		}
		if time.Now().After(deadline) || p.Exited() {
			t.Fatalf("no gateway address on stdout:\n%s", p.Stdout())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func grepFiles(t *testing.T, dir, needle string) {
	t.Helper()
	// The process under test keeps writing its data directory (the spool
	// replaces its ack file by write-rename): a file that vanishes between
	// the listing and the read is skipped and the walk is made again, so
	// that what it was renamed to is read too.
	for attempt := 0; ; attempt++ {
		vanished := false
		err := filepath.Walk(dir, func(path string, fi os.FileInfo, err error) error {
			if errors.Is(err, fs.ErrNotExist) {
				vanished = true
				return nil
			}
			if err != nil || fi.IsDir() {
				return err
			}
			b, err := os.ReadFile(path)
			if errors.Is(err, fs.ErrNotExist) {
				vanished = true
				return nil
			}
			if err != nil {
				return err
			}
			if bytes.Contains(b, []byte(needle)) {
				t.Errorf("%s holds %q in clear", path, needle)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if !vanished {
			return
		}
		if attempt == 10 {
			t.Fatalf("files of %s kept vanishing during 10 walks", dir)
		}
	}
}

func withEnv(kv ...string) []string { return append(os.Environ(), kv...) }

// scenario is what limitScenario set up.
type scenario struct {
	provider string
	apps     map[string]string // name -> application id
	keys     map[string]string // name -> API key
}

// limitScenario is the Must show of the platform issue against gw (which
// gateway id is): a provider at the mock, backend and consumer token limits,
// three applications with keys; the consumer limit stops A and not B, the
// backend limit stops everyone; a cost budget in both scopes generates two
// llm-cost-based-ratelimit and one llm-cost; the keys' last use comes back
// from the gateway.
func limitScenario(t *testing.T, a *admin, gw, gatewayID, mock string) scenario {
	t.Helper()
	sc := scenario{apps: map[string]string{}, keys: map[string]string{}}
	sc.provider = a.create("/providers", map[string]any{"name": "openai", "type": "openai", "url": mock, "apiKey": e2eUpstreamKey}).ID
	a.setLimits(sc.provider, map[string]any{
		"backend":  map[string]any{"global": map[string]any{"token": tokenLimit(1500)}},
		"consumer": map[string]any{"global": map[string]any{"token": tokenLimit(1000)}},
	})
	for _, name := range []string{"A", "B", "C"} {
		sc.apps[name] = a.create("/applications", map[string]any{"name": name, "providers": []string{sc.provider}}).ID
		sc.keys[name] = a.create("/applications/"+sc.apps[name]+"/keys", nil).Key
	}
	a.waitApplied(gatewayID)

	servedA := 0
	for chatOnce(t, gw, "openai", sc.keys["A"]) == 200 {
		if servedA++; servedA > 50 {
			t.Fatal("the consumer limit never stopped A")
		}
	}
	if got := chatOnce(t, gw, "openai", sc.keys["B"]); got != 200 {
		t.Fatalf("B got %d after A spent its consumer budget: B must not be stopped by A's limit", got)
	}
	servedB := 1
	for chatOnce(t, gw, "openai", sc.keys["B"]) == 200 {
		if servedB++; servedB > 50 {
			t.Fatal("the backend limit never stopped B")
		}
	}
	if got := chatOnce(t, gw, "openai", sc.keys["C"]); got != 429 {
		t.Fatalf("C got %d: the backend limit must stop every application", got)
	}
	t.Logf("A served %d before its consumer limit, B %d more before the backend limit", servedA, servedB)

	// A cost budget in both scopes: two llm-cost-based-ratelimit, one llm-cost.
	a.setLimits(sc.provider, map[string]any{
		"backend":  map[string]any{"global": map[string]any{"token": tokenLimit(1500), "cost": costLimit(100)}},
		"consumer": map[string]any{"global": map[string]any{"token": tokenLimit(1000), "cost": costLimit(5)}},
	})
	var dep struct {
		Entries []struct {
			Name string `json:"name"`
		} `json:"entries"`
	}
	a.must(200, "GET", "/providers/"+sc.provider+"/deployment", nil, &dep)
	var chain []string
	for _, e := range dep.Entries {
		chain = append(chain, e.Name)
	}
	want := "api-key-auth token-based-ratelimit llm-cost-based-ratelimit token-based-ratelimit llm-cost-based-ratelimit llm-cost"
	if strings.Join(chain, " ") != want {
		t.Fatalf("chain %v, want %s", chain, want)
	}
	a.waitApplied(gatewayID)
	// The check-in after that apply carried the keys' last use.
	deadline := time.Now().Add(15 * time.Second)
	for {
		var ks struct {
			Keys []struct {
				LastUsedAt *time.Time `json:"lastUsedAt"`
			} `json:"keys"`
		}
		a.must(200, "GET", "/applications/"+sc.apps["A"]+"/keys", nil, &ks)
		if ks.Keys[0].LastUsedAt != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the gateway never reported A's key as used")
		}
		time.Sleep(50 * time.Millisecond)
	}
	return sc
}

// revokeFirstKey revokes app's first key and returns when it was sent.
func (a *admin) revokeFirstKey(app string) time.Time {
	a.t.Helper()
	var ks struct {
		Keys []struct{ ID string } `json:"keys"`
	}
	a.must(200, "GET", "/applications/"+app+"/keys", nil, &ks)
	start := time.Now()
	a.must(204, "DELETE", "/applications/"+app+"/keys/"+ks.Keys[0].ID, nil, nil)
	return start
}

// noUpstreamKey checks the upstream key is readable through no API response,
// no file of the data directory, and no log.
func noUpstreamKey(t *testing.T, a *admin, provider, data string, keys map[string]string, logs string) {
	t.Helper()
	for _, path := range []string{"/providers", "/providers/" + provider, "/providers/" + provider + "/deployment", "/audit?limit=500"} {
		if _, _, b := a.do("GET", path, nil); bytes.Contains(b, []byte(e2eUpstreamKey)) {
			t.Errorf("GET %s shows the upstream key", path)
		}
	}
	grepFiles(t, data, e2eUpstreamKey)
	for _, key := range keys {
		grepFiles(t, data, key) // API keys: hashes only
	}
	if strings.Contains(logs, e2eUpstreamKey) {
		t.Error("the logs hold the upstream key")
	}
}

// startServe starts `sluice serve` (platform and gateway in one process,
// data in a temporary directory) and `sluice mock-llm`: the process, the
// gateway's URL, an admin client, the mock's URL and the data directory.
func startServe(t *testing.T) (serve *proctest.Proc, gw string, a *admin, mock, data string) {
	t.Helper()
	bin := sluiceBin.Path(t)
	mock = proctest.StartMock(t, bin).URL
	data = t.TempDir()
	serve = proctest.Start(t, bin, proctest.Spec{Name: "serve", ReadyPath: "/healthz",
		Env:  withEnv("SLUICE_ADMIN_TOKEN=" + e2eAdminToken),
		Args: []string{"serve", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--data", data}})
	return serve, gatewayLine(t, serve), newAdmin(t, serve.URL), mock, data
}

// `sluice serve`: the platform and its gateway in one process.
func TestPlatformServeEndToEnd(t *testing.T) {
	serve, gw, a, mock, data := startServe(t)
	sc := limitScenario(t, a, gw, "local", mock)

	start := a.revokeFirstKey(sc.apps["A"])
	t.Logf("revoked key refused %v after the DELETE", refusedWithin(t, gw, "openai", sc.keys["A"], start, 2*time.Second))

	noUpstreamKey(t, a, sc.provider, data, sc.keys, serve.Stderr()+serve.Stdout())
	a.token = ""
	if status, _, _ := a.do("GET", "/providers", nil); status != 401 {
		t.Errorf("admin API without a token: %d, want 401", status)
	}
	serve.Signal(t, syscall.SIGTERM)
	if code := serve.WaitExit(t, 40*time.Second); code != 0 {
		t.Fatalf("sluice serve exited %d", code)
	}
}

// `sluice platform` and a separate `sluice gateway --platform`: the same
// scenario, then revocation, a platform outage, a gateway restart while the
// platform is down (from the cache), the platform's return, and a revoked
// gateway token.
func TestPlatformGatewaysPullAndSurviveOutages(t *testing.T) {
	bin := sluiceBin.Path(t)
	mock := proctest.StartMock(t, bin).URL
	data := t.TempDir()
	plat := proctest.Start(t, bin, proctest.Spec{Name: "platform", ReadyPath: "/healthz",
		Env:  withEnv("SLUICE_ADMIN_TOKEN=" + e2eAdminToken),
		Args: []string{"platform", "--admin-listen", "127.0.0.1:0", "--data", data}})
	a := newAdmin(t, plat.URL)
	gwTok := a.create("/gateways", map[string]any{"name": "edge-1"})
	cache := filepath.Join(t.TempDir(), "deployment.cache")
	startGateway := func(name string) *proctest.Proc {
		return proctest.StartGateway(t, bin, name, "--platform", plat.URL, "--token", gwTok.Token, "--cache", cache,
			"--platform-timeout", "2s")
	}
	gw := startGateway("gateway-1")
	sc := limitScenario(t, a, gw.URL, gwTok.ID, mock)
	// Raise the limits far above what was spent (the usage is kept: counter
	// keys hold no limit value), so that the rest of the test is served.
	a.setLimits(sc.provider, map[string]any{
		"backend":  map[string]any{"global": map[string]any{"token": tokenLimit(1e9)}},
		"consumer": map[string]any{"global": map[string]any{"token": tokenLimit(1e9)}},
	})
	a.waitApplied(gwTok.ID)
	if got := chatOnce(t, gw.URL, "openai", sc.keys["B"]); got != 200 {
		t.Fatalf("after raising the limits: %d", got)
	}
	start := a.revokeFirstKey(sc.apps["A"])
	t.Logf("revoked key refused %v after the DELETE", refusedWithin(t, gw.URL, "openai", sc.keys["A"], start, 2*time.Second))
	a.waitApplied(gwTok.ID)

	// Platform down: the gateway keeps serving its last good deployment.
	plat.Signal(t, syscall.SIGKILL)
	plat.WaitExit(t, 10*time.Second)
	for range 5 {
		if got := chatOnce(t, gw.URL, "openai", sc.keys["B"]); got != 200 {
			t.Fatalf("with the platform down: %d", got)
		}
	}
	// Gateway restarted while the platform is down: it serves the cache,
	// revocation included.
	gw.Signal(t, syscall.SIGTERM)
	gw.WaitExit(t, 40*time.Second)
	gw2 := startGateway("gateway-2")
	if got := chatOnce(t, gw2.URL, "openai", sc.keys["B"]); got != 200 {
		t.Fatalf("restarted from the cache: %d", got)
	}
	if got := chatOnce(t, gw2.URL, "openai", sc.keys["A"]); got != 401 {
		t.Fatalf("the revoked key through the cached deployment: %d", got)
	}
	gw2.WaitLog(t, 5*time.Second, "serving the cached deployment")
	raw, err := os.ReadFile(cache)
	if err != nil || bytes.Contains(raw, []byte(e2eUpstreamKey)) {
		t.Fatalf("the cache holds the upstream key in clear (or is missing: %v)", err)
	}

	// The platform comes back where the gateway looks for it.
	plat2 := proctest.Start(t, bin, proctest.Spec{Name: "platform-2", ReadyPath: "/healthz",
		Env:  withEnv("SLUICE_ADMIN_TOKEN=" + e2eAdminToken),
		Args: []string{"platform", "--admin-listen", strings.TrimPrefix(plat.URL, "http://"), "--data", data}})
	a = newAdmin(t, plat2.URL)
	gw2.WaitLog(t, 10*time.Second, "platform reachable again")
	start = a.revokeFirstKey(sc.apps["B"])
	t.Logf("after the platform's restart, a revoked key is refused %v after the DELETE", refusedWithin(t, gw2.URL, "openai", sc.keys["B"], start, 2*time.Second))

	// A revoked gateway token is refused by the platform; the gateway keeps
	// its last deployment.
	a.must(204, "DELETE", "/gateways/"+gwTok.ID, nil, nil)
	g := &admin{t: t, base: a.base, token: gwTok.Token, http: a.http}
	if status, _, _ := g.do("GET", "/gateway/deployment?after=0&wait=0", nil); status != 401 {
		t.Fatalf("revoked gateway token: %d, want 401", status)
	}
	gw2.WaitLog(t, 15*time.Second, "platform unreachable", "401")
	if got := chatOnce(t, gw2.URL, "openai", sc.keys["C"]); got != 200 {
		t.Fatalf("a revoked gateway must keep serving its last deployment: %d", got)
	}
	var view gatewayView
	a.must(200, "GET", "/gateways/"+gwTok.ID, nil, &view)
	if view.State != "revoked" {
		t.Fatalf("state %s", view.State)
	}
	noUpstreamKey(t, a, sc.provider, data, sc.keys, gw2.Stderr()+gw.Stderr()+plat.Stderr()+plat2.Stderr())
}
