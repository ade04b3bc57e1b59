package platform_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"sluice/deployment"
	"sluice/deployment/yamlfile"
	"sluice/internal/proctest"
	"sluice/platform"
	"sluice/policies/builtin"
)

const (
	countersToken    = "counters-admin-token-1234"
	countersPassword = "redis-pw-DO-NOT-LEAK-91c2"
)

// countersPlatform is one start of a platform on dir with the counters
// setting c.
type countersPlatform struct {
	t   *testing.T
	p   *platform.Platform
	srv *httptest.Server
}

func startWithCounters(t *testing.T, dir string, c deployment.Counters, logs io.Writer) *countersPlatform {
	t.Helper()
	p, err := platform.Open(context.Background(), platform.Options{DataDir: dir, AdminToken: countersToken, Registry: builtin.Registry(),
		Counters: c, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	cp := &countersPlatform{t: t, p: p, srv: httptest.NewServer(p.Handler())}
	t.Cleanup(cp.stop)
	return cp
}

func (cp *countersPlatform) stop() {
	if cp.p != nil {
		cp.srv.Close()
		cp.p.Close()
		cp.p = nil
	}
}

func (cp *countersPlatform) api(method, path, body string, out any) {
	cp.t.Helper()
	req, _ := http.NewRequest(method, cp.srv.URL+"/api/v1"+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+countersToken)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cp.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		cp.t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			cp.t.Fatalf("%s %s: %v", method, path, err)
		}
	}
}

// delivered is the document gateways get now.
func (cp *countersPlatform) delivered() (int64, *deployment.Deployment) {
	cp.t.Helper()
	doc, err := cp.p.Deployment(context.Background(), 0, 0)
	if err != nil || doc == nil {
		cp.t.Fatalf("no deployment: %v", err)
	}
	d, err := yamlfile.ParseRendered(doc.Text, "delivered")
	if err != nil {
		cp.t.Fatalf("the delivered document does not load: %v", err)
	}
	return doc.Version, d
}

// The counters setting goes into the delivered document (credentials in
// clear: gateways must connect); a change is a new version with an audit
// entry, the same setting again (defaults spelled out or not) is none; the
// deployment view, the audit log, the logs and the data directory never show
// the password.
func TestCountersSettingInEveryDocument(t *testing.T) {
	dir := t.TempDir()
	logs := &proctest.Buffer{}
	memory := startWithCounters(t, dir, deployment.Counters{}, logs)
	memory.api("POST", "/providers", `{"name":"openai","type":"openai","url":"http://127.0.0.1:9"}`, nil)
	v0, d := memory.delivered()
	if d.Counters.Backend != "memory" {
		t.Fatalf("without the setting: backend %q, want memory", d.Counters.Backend)
	}
	memory.stop()

	redisURL := "redis://sluice:" + countersPassword + "@redis.internal:6379/0"
	redis := deployment.Counters{Backend: "redis", Redis: deployment.Redis{URL: redisURL, FailureMode: "closed"}}
	cp := startWithCounters(t, dir, redis, logs)
	v1, d := cp.delivered()
	if v1 != v0+1 {
		t.Fatalf("version %d after the setting changed, want %d", v1, v0+1)
	}
	want := deployment.Redis{URL: redisURL, FailureMode: "closed", KeyPrefix: deployment.DefaultRedisKeyPrefix}
	if d.Counters.Backend != "redis" || d.Counters.Redis.URL != want.URL || d.Counters.Redis.FailureMode != want.FailureMode ||
		d.Counters.Redis.KeyPrefix != want.KeyPrefix {
		t.Fatalf("delivered counters %+v, want redis %+v", d.Counters, want)
	}

	var providers struct {
		Providers []struct{ ID string } `json:"providers"`
	}
	cp.api("GET", "/providers", "", &providers)
	var view struct{ YAML string }
	cp.api("GET", "/providers/"+providers.Providers[0].ID+"/deployment", "", &view)
	if !strings.Contains(view.YAML, "url: redis://sluice:xxxxx@redis.internal:6379/0") || !strings.Contains(view.YAML, "failureMode: closed") {
		t.Errorf("the deployment view does not show the counters section, password masked:\n%s", view.YAML)
	}
	var audit struct {
		Entries []struct {
			TokenID string         `json:"tokenId"`
			Action  string         `json:"action"`
			Before  map[string]any `json:"before"`
			After   map[string]any `json:"after"`
		} `json:"entries"`
	}
	cp.api("GET", "/audit?limit=1", "", &audit)
	e := audit.Entries[0]
	if e.Action != "counters.update" || e.TokenID != "startup" || e.Before["backend"] != "memory" || e.After["backend"] != "redis" {
		t.Errorf("audit entry %+v, want counters.update by startup from memory to redis", e)
	}
	cp.stop()

	// The same setting with its default spelled out: no new version.
	same := redis
	same.Redis.KeyPrefix = deployment.DefaultRedisKeyPrefix
	cp = startWithCounters(t, dir, same, logs)
	if v, _ := cp.delivered(); v != v1 {
		t.Fatalf("version %d after a start with the same setting, want %d", v, v1)
	}
	cp.stop()

	// Back to memory: a new version without the section.
	cp = startWithCounters(t, dir, deployment.Counters{Backend: "memory"}, logs)
	v2, d := cp.delivered()
	if v2 != v1+1 || d.Counters.Backend != "memory" || d.Counters.Redis.URL != "" {
		t.Fatalf("back to memory: version %d (want %d), counters %+v", v2, v1+1, d.Counters)
	}
	cp.stop()

	if !strings.Contains(logs.String(), "running gateways keep their counter store until they restart") {
		t.Errorf("no warning about the change in the logs:\n%s", logs)
	}
	if strings.Contains(logs.String(), countersPassword) {
		t.Errorf("the logs hold the Redis password:\n%s", logs)
	}
	eachFile(t, dir, func(path string, _ os.FileInfo, b []byte) {
		if bytes.Contains(b, []byte(countersPassword)) {
			t.Errorf("%s holds the Redis password in clear", path)
		}
	})
}

// A setting the gateways could not use is refused at start, with the field
// and without the password.
func TestCountersSettingRefused(t *testing.T) {
	for _, tt := range []struct {
		name  string
		c     deployment.Counters
		field string
	}{
		{"no url", deployment.Counters{Backend: "redis"}, "counters.redis.url"},
		{"not a redis url", deployment.Counters{Backend: "redis", Redis: deployment.Redis{URL: "http://u:" + countersPassword + "@h:1"}}, "counters.redis.url"},
		{"url option the store sets", deployment.Counters{Backend: "redis", Redis: deployment.Redis{URL: "redis://h:1/0?read_timeout=1s"}}, "counters.redis.url"},
		{"failure mode", deployment.Counters{Backend: "redis", Redis: deployment.Redis{URL: "redis://h:1/0", FailureMode: "maybe"}}, "counters.redis.failureMode"},
		{"key prefix", deployment.Counters{Backend: "redis", Redis: deployment.Redis{URL: "redis://h:1/0", KeyPrefix: "{x}"}}, "counters.redis.keyPrefix"},
		{"backend", deployment.Counters{Backend: "etcd"}, "counters.backend"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ps := platform.CountersProblems(tt.c)
			if len(ps) == 0 || ps[0].Field != tt.field {
				t.Fatalf("problems %v, want one at %s", ps, tt.field)
			}
			_, err := platform.Open(context.Background(), platform.Options{DataDir: t.TempDir(), Registry: builtin.Registry(), Counters: tt.c})
			if err == nil || !strings.Contains(err.Error(), tt.field) || strings.Contains(err.Error(), countersPassword) {
				t.Fatalf("Open: %v, want a refusal naming %s without the password", err, tt.field)
			}
		})
	}
	if ps := platform.CountersProblems(deployment.Counters{}); ps != nil {
		t.Fatalf("the zero setting has problems: %v", ps)
	}
}
