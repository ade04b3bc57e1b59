// Command platformbench measures the control plane (docs/benchmarks.md,
// section 7):
//
//	platformbench -bin bin/sluice propagation   # a change to every gateway's enforcement, N gateways
//	platformbench -bin bin/sluice admin         # admin API latency at a fixed request rate on SQLite
//	platformbench load                          # generate, render, parse and apply a large deployment
//
// The first two run the real binary: one `sluice platform`, `sluice
// mock-llm` and N `sluice gateway --platform` processes on loopback.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"sluice/counter/memory"
	"sluice/deployment"
	"sluice/deployment/yamlfile"
	"sluice/gateway/pull"
	"sluice/internal/app"
	"sluice/platform/generate"
	"sluice/pricing"
	"sluice/tokencount"
)

const adminToken = "platformbench-admin-token"

func main() {
	bin := flag.String("bin", "bin/sluice", "the sluice binary")
	gateways := flag.Int("gateways", 10, "propagation: gateway processes")
	changes := flag.Int("changes", 40, "propagation: changes measured (each a key grant and a revocation)")
	rate := flag.Int("rate", 100, "admin: requests per second")
	duration := flag.Duration("duration", 30*time.Second, "admin: how long the load runs")
	apps := flag.Int("apps", 1000, "load: applications (each with one key, granted every provider)")
	providers := flag.Int("providers", 50, "load: providers")
	flag.Parse()
	var err error
	switch flag.Arg(0) {
	case "propagation":
		err = propagation(*bin, *gateways, *changes)
	case "admin":
		err = adminLoad(*bin, *rate, *duration)
	case "load":
		err = loadDeployment(*apps, *providers)
	default:
		err = fmt.Errorf("usage: platformbench [flags] propagation|admin|load")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "platformbench:", err)
		os.Exit(1)
	}
}

// --- processes

type proc struct {
	cmd *exec.Cmd
	url string
	out *bytes.Buffer
}

func start(bin string, env []string, args ...string) (*proc, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	p := &proc{cmd: cmd, out: &bytes.Buffer{}}
	cmd.Stderr = io.Discard
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if _, a, ok := strings.Cut(sc.Text(), " listening on "); ok {
				addr <- strings.TrimSpace(a)
			}
		}
	}()
	select {
	case p.url = <-addr:
		return p, nil
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		return nil, fmt.Errorf("%v: no address", args)
	}
}

func (p *proc) stop() { _ = p.cmd.Process.Kill(); _ = p.cmd.Wait() }

// --- API client

type api struct {
	base, token string
	http        *http.Client
}

func (a *api) do(method, path string, body any, hdr ...string) (int, http.Header, []byte, error) {
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, a.base+path, r)
	if err != nil {
		return 0, nil, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := a.http.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b, err
}

func (a *api) create(path string, body any) (map[string]any, error) {
	status, _, b, err := a.do("POST", path, body)
	if err != nil {
		return nil, err
	}
	if status != 201 {
		return nil, fmt.Errorf("POST %s: %d %s", path, status, b)
	}
	var m map[string]any
	return m, json.Unmarshal(b, &m)
}

func (a *api) allApplied(ids []string) (bool, error) {
	_, _, b, err := a.do("GET", "/gateways", nil)
	if err != nil {
		return false, err
	}
	var l struct {
		CurrentVersion int64 `json:"currentVersion"`
		Gateways       []struct {
			ID             string `json:"id"`
			AppliedVersion int64  `json:"appliedVersion"`
		} `json:"gateways"`
	}
	if err := json.Unmarshal(b, &l); err != nil {
		return false, err
	}
	applied := map[string]bool{}
	for _, g := range l.Gateways {
		applied[g.ID] = g.AppliedVersion == l.CurrentVersion
	}
	for _, id := range ids {
		if !applied[id] {
			return false, nil
		}
	}
	return true, nil
}

// --- propagation

func propagation(bin string, n, changes int) error {
	dir, err := os.MkdirTemp("", "platformbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	mock, err := start(bin, nil, "mock-llm", "--listen", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer mock.stop()
	plat, err := start(bin, []string{"SLUICE_ADMIN_TOKEN=" + adminToken}, "platform", "--admin-listen", "127.0.0.1:0", "--data", filepath.Join(dir, "data"), "--log-level", "warn")
	if err != nil {
		return err
	}
	defer plat.stop()
	a := &api{base: plat.url + "/api/v1", token: adminToken, http: &http.Client{Timeout: 60 * time.Second}}
	prov, err := a.create("/providers", map[string]any{"name": "openai", "type": "openai", "url": mock.url})
	if err != nil {
		return err
	}
	app, err := a.create("/applications", map[string]any{"name": "bench", "providers": []string{prov["id"].(string)}})
	if err != nil {
		return err
	}
	var gws []*proc
	var ids []string
	for i := range n {
		g, err := a.create("/gateways", map[string]any{"name": fmt.Sprintf("gw-%d", i)})
		if err != nil {
			return err
		}
		ids = append(ids, g["id"].(string))
		p, err := start(bin, nil, "gateway", "--listen", "127.0.0.1:0", "--log-level", "warn", "--platform", plat.url,
			"--token", g["token"].(string), "--cache", filepath.Join(dir, fmt.Sprintf("cache-%d", i)))
		if err != nil {
			return err
		}
		defer p.stop()
		gws = append(gws, p)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		ok, err := a.allApplied(ids)
		if err != nil {
			return err
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("gateways never applied the deployment")
		}
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	status := func(gw, key string) int {
		req, _ := http.NewRequest("GET", gw+"/openai/v1/quota", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := client.Do(req)
		if err != nil {
			return 0
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	// measure returns, per gateway, the time from t0 until gw answers want.
	measure := func(t0 time.Time, key string, want int) ([]time.Duration, error) {
		out := make([]time.Duration, len(gws))
		var wg sync.WaitGroup
		var failed error
		var mu sync.Mutex
		for i, g := range gws {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Since(t0) < 10*time.Second {
					if status(g.url, key) == want {
						out[i] = time.Since(t0)
						return
					}
					time.Sleep(time.Millisecond)
				}
				mu.Lock()
				failed = fmt.Errorf("gateway %d never answered %d", i, want)
				mu.Unlock()
			}()
		}
		wg.Wait()
		return out, failed
	}
	var grant, revoke []time.Duration
	for range changes {
		t0 := time.Now()
		k, err := a.create("/applications/"+app["id"].(string)+"/keys", nil)
		if err != nil {
			return err
		}
		d, err := measure(t0, k["key"].(string), 200)
		if err != nil {
			return err
		}
		grant = append(grant, d...)
		t0 = time.Now()
		if s, _, b, err := a.do("DELETE", "/applications/"+app["id"].(string)+"/keys/"+k["id"].(string), nil); err != nil || s != 204 {
			return fmt.Errorf("revoke: %d %s %v", s, b, err)
		}
		d, err = measure(t0, k["key"].(string), 401)
		if err != nil {
			return err
		}
		revoke = append(revoke, d...)
	}
	fmt.Printf("propagation with %d gateways, %d changes each (time from the API call to the gateway's answer):\n", n, changes)
	report("new key accepted", grant)
	report("revoked key refused", revoke)
	return nil
}

func report(what string, ds []time.Duration) {
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	q := func(p float64) time.Duration { return ds[min(len(ds)-1, int(p*float64(len(ds))))] }
	fmt.Printf("  %-22s n=%d p50=%v p90=%v p99=%v max=%v\n", what, len(ds), q(0.50).Round(10*time.Microsecond),
		q(0.90).Round(10*time.Microsecond), q(0.99).Round(10*time.Microsecond), ds[len(ds)-1].Round(10*time.Microsecond))
}

// --- admin API latency

func adminLoad(bin string, rate int, duration time.Duration) error {
	dir, err := os.MkdirTemp("", "platformbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	plat, err := start(bin, []string{"SLUICE_ADMIN_TOKEN=" + adminToken}, "platform", "--admin-listen", "127.0.0.1:0", "--data", filepath.Join(dir, "data"), "--log-level", "warn")
	if err != nil {
		return err
	}
	defer plat.stop()
	a := &api{base: plat.url + "/api/v1", token: adminToken, http: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
	var provIDs, appIDs []string
	for i := range 10 {
		p, err := a.create("/providers", map[string]any{"name": fmt.Sprintf("p%d", i), "type": "openai", "url": "http://127.0.0.1:9", "apiKey": "sk-x"})
		if err != nil {
			return err
		}
		provIDs = append(provIDs, p["id"].(string))
	}
	for i := range 100 {
		app, err := a.create("/applications", map[string]any{"name": fmt.Sprintf("a%d", i), "providers": provIDs})
		if err != nil {
			return err
		}
		appIDs = append(appIDs, app["id"].(string))
		if _, err := a.create("/applications/"+app["id"].(string)+"/keys", nil); err != nil {
			return err
		}
	}
	limits := map[string]any{"backend": map[string]any{"global": map[string]any{"token": map[string]any{"enabled": true, "count": 100000, "reset": map[string]any{"duration": 1, "unit": "hour"}}}},
		"consumer": map[string]any{"global": map[string]any{"cost": map[string]any{"enabled": true, "amount": 5, "reset": map[string]any{"duration": 1, "unit": "month"}}}}}
	type op struct {
		name string
		run  func(i int) (int, error)
	}
	get := func(path string) (int, error) { s, _, _, err := a.do("GET", path, nil); return s, err }
	ops := []op{
		{"GET /providers", func(int) (int, error) { return get("/providers") }},
		{"GET /applications", func(int) (int, error) { return get("/applications") }},
		{"GET /providers", func(int) (int, error) { return get("/providers") }},
		{"GET rate-limits", func(i int) (int, error) { return get("/providers/" + provIDs[i%10] + "/rate-limits") }},
		{"PUT rate-limits", func(i int) (int, error) {
			s, _, _, err := a.do("PUT", "/providers/"+provIDs[i%10]+"/rate-limits", limits, "If-Match", "*")
			return s, err
		}},
		{"POST key", func(i int) (int, error) {
			s, _, _, err := a.do("POST", "/applications/"+appIDs[i%100]+"/keys", nil)
			return s, err
		}},
		{"GET deployment", func(i int) (int, error) { return get("/providers/" + provIDs[i%10] + "/deployment") }},
		{"GET /gateways", func(int) (int, error) { return get("/gateways") }},
		{"GET /audit", func(int) (int, error) { return get("/audit?limit=50") }},
		{"GET /applications", func(int) (int, error) { return get("/applications") }},
	}
	var mu sync.Mutex
	byOp := map[string][]time.Duration{}
	var all []time.Duration
	errs := 0
	var wg sync.WaitGroup
	interval := time.Second / time.Duration(rate)
	t0 := time.Now()
	for i := 0; time.Since(t0) < duration; i++ {
		next := t0.Add(time.Duration(i) * interval)
		time.Sleep(time.Until(next))
		o := ops[i%len(ops)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			s, err := o.run(i)
			d := time.Since(start) // open loop: measured from the send, as scheduled
			mu.Lock()
			defer mu.Unlock()
			if err != nil || s >= 300 {
				errs++
				return
			}
			byOp[o.name] = append(byOp[o.name], d)
			all = append(all, d)
		}()
	}
	wg.Wait()
	fmt.Printf("admin API on SQLite at %d req/s for %v (10 providers, 100 applications; a fifth of the requests write):\n", rate, duration)
	report("all", all)
	names := make([]string, 0, len(byOp))
	for n := range byOp {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		report(n, byOp[n])
	}
	fmt.Printf("  errors: %d\n", errs)
	return nil
}

// --- a large deployment

func loadDeployment(apps, providers int) error {
	var s generate.Settings
	rl := generate.RateLimits{
		Backend: &generate.Scope{PerResource: &generate.PerResource{
			Default:   &generate.Limits{Token: &generate.CountLimit{Enabled: true, Count: 1000000, Reset: generate.Reset{Duration: 1, Unit: generate.Hour}}},
			Resources: []generate.ResourceLimit{{Resource: "/chat/completions", Limit: generate.Limits{Request: &generate.CountLimit{Enabled: true, Count: 1000, Reset: generate.Reset{Duration: 1, Unit: generate.Minute}}}}},
		}},
		Consumer: &generate.Scope{Global: &generate.Limits{
			Token: &generate.CountLimit{Enabled: true, Count: 100000, Reset: generate.Reset{Duration: 1, Unit: generate.Day}},
			Cost:  &generate.CostLimit{Enabled: true, Amount: 10, Reset: generate.Reset{Duration: 1, Unit: generate.Month}},
		}},
	}
	var ids []string
	for i := range providers {
		id := fmt.Sprintf("prv-%04d", i)
		ids = append(ids, id)
		s.Providers = append(s.Providers, generate.Provider{ID: id, Name: fmt.Sprintf("provider-%d", i), Type: "openai",
			URL: "http://127.0.0.1:9000", Auth: &deployment.Auth{Header: "Authorization", Value: "Bearer sk-upstream"}, RateLimits: rl,
			Guardrails: []generate.Guardrail{{ID: "g", Name: "model-access", Version: "v1", Params: map[string]any{"allow": []any{"gpt-4o*"}}}}})
	}
	for i := range apps {
		s.Applications = append(s.Applications, generate.Application{ID: fmt.Sprintf("app-%05d", i), Name: fmt.Sprintf("application %d", i),
			Providers: ids, Keys: []generate.Key{{ID: fmt.Sprintf("key-%05d", i), Hash: deployment.HashKey(fmt.Sprintf("k%d", i))}}})
	}
	t0 := time.Now()
	res, err := generate.Generate(s)
	if err != nil {
		return err
	}
	t1 := time.Now()
	y, err := yamlfile.Loadable(res.Deployment)
	if err != nil {
		return err
	}
	t2 := time.Now()
	d, err := pull.Parse(&pull.Update{Version: 1, Document: y}, "bench")
	if err != nil {
		return err
	}
	t3 := time.Now()
	cat, err := pricing.New("")
	if err != nil {
		return err
	}
	counters := memory.New(memory.Options{})
	defer counters.Close()
	svc := app.Services{Logger: slog.New(slog.DiscardHandler), Counters: counters, Pricing: cat, Tokens: tokencount.New(),
		Metrics: prometheus.NewRegistry()}
	// The services are built before t4: what is timed is the gateway's
	// construction (microseconds) and the apply.
	t4 := time.Now()
	gw, err := app.NewGateway(d, app.GatewayOptions{Services: svc})
	if err != nil {
		return err
	}
	t5 := time.Now()
	defer gw.Close()
	entries := 0
	for _, r := range d.Routes {
		entries += len(r.Policies)
	}
	fmt.Printf("deployment of %d applications (one key each, every one granted every provider) and %d providers: %d routes, %d chain entries, %.1f MiB as delivered\n",
		apps, providers, len(d.Routes), entries, float64(len(y))/(1<<20))
	fmt.Printf("  generate %v, render %v, parse+validate %v, apply (build every chain, key index, swap) %v\n",
		t1.Sub(t0).Round(time.Millisecond), t2.Sub(t1).Round(time.Millisecond), t3.Sub(t2).Round(time.Millisecond), t5.Sub(t4).Round(time.Millisecond))
	fmt.Printf("  gateway side (parse + apply): %v; platform side (generate + render): %v\n",
		(t3.Sub(t2) + t5.Sub(t4)).Round(time.Millisecond), t2.Sub(t0).Round(time.Millisecond))
	return nil
}
