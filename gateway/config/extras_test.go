package config

import (
	"context"
	"crypto/sha256"
	"os"
	"path/filepath"
	"sluice/policies/builtin"
	"strings"
	"testing"
	"time"

	"github.com/goccy/go-yaml"
)

func TestKeyIndex(t *testing.T) {
	d := &Deployment{Applications: []Application{
		{ID: "a", Name: "Team A", APIKeys: []string{HashKey("key-a1"), HashKey("key-a2")}},
		{ID: "b", Name: "Team B", APIKeys: []string{HashKey("key-b"), "not-a-hash", HashKey("key-a1")}},
	}}
	idx := NewKeyIndex(d)
	cases := []struct {
		key   string
		found bool
		app   string
		name  string
		keyID string
	}{
		{"key-a1", true, "a", "Team A", HashKey("key-a1")[7:15]},
		{"key-a2", true, "a", "Team A", HashKey("key-a2")[7:15]},
		{"key-b", true, "b", "Team B", HashKey("key-b")[7:15]},
		{"key-c", false, "", "", ""},
		{"", false, "", "", ""},
	}
	for _, tc := range cases {
		c, ok := idx.Lookup(sha256.Sum256([]byte(tc.key)))
		if ok != tc.found || c.ApplicationID != tc.app || c.ApplicationName != tc.name || c.KeyID != tc.keyID {
			t.Errorf("%q: got %+v %v", tc.key, c, ok)
		}
	}
	if h := HashKey("sk-sluice-demo"); h != hashA {
		t.Errorf("HashKey = %s", h)
	}
}

func TestDurationYAML(t *testing.T) {
	var v struct {
		D Duration `yaml:"d"`
	}
	cases := []struct {
		src  string
		want time.Duration
		err  bool
	}{
		{"d: 90s", 90 * time.Second, false},
		{"d: 1h30m", 90 * time.Minute, false},
		{"d: 2d", 48 * time.Hour, false},
		{"d: 0s", 0, true},
		{"d: 1x", 0, true},
		{"d: -1h", 0, true},
	}
	for _, tc := range cases {
		v.D = 0
		err := yaml.Unmarshal([]byte(tc.src), &v)
		if (err != nil) != tc.err || (!tc.err && v.D.D() != tc.want) {
			t.Errorf("%s: got %v, %v", tc.src, v.D.D(), err)
		}
	}
	for d, want := range map[Duration]string{
		Duration(48 * time.Hour):   "2d",
		Duration(90 * time.Second): "1m30s",
	} {
		out, err := yaml.Marshal(map[string]Duration{"d": d})
		if err != nil || strings.TrimSpace(string(out)) != "d: "+want {
			t.Errorf("marshal %v: %q %v", d.D(), out, err)
		}
		var back Duration
		if err := back.UnmarshalText([]byte(d.String())); err != nil || back != d {
			t.Errorf("round trip %v: %v %v", d.D(), back, err)
		}
	}
}

func TestDefault(t *testing.T) {
	const generated = "sk-sluice-generated-for-this-run"
	cases := []struct {
		name     string
		env      map[string]string
		url      string
		authWant string
		// key is the key the demo application must accept; other is one it
		// must refuse.
		key, other string
	}{
		{"no key: mock upstream", nil, MockUpstreamURL, "", DemoKey, generated},
		{"key: OpenAI", map[string]string{"OPENAI_API_KEY": "sk-real"}, OpenAIURL, "Bearer sk-real", generated, DemoKey},
		{"key and base URL with /v1", map[string]string{"OPENAI_API_KEY": "sk-real", "OPENAI_BASE_URL": "http://127.0.0.1:7/v1/"},
			"http://127.0.0.1:7", "Bearer sk-real", generated, DemoKey},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d, err := Default(func(k string) string { return tc.env[k] }, generated)
			if err != nil {
				t.Fatal(err)
			}
			p := d.Providers[0]
			if p.URL != tc.url || p.Type != "openai" {
				t.Errorf("provider = %+v", p)
			}
			gotAuth := ""
			if p.Auth != nil {
				gotAuth = p.Auth.Value
				if p.Auth.Header != "Authorization" {
					t.Errorf("auth header %q", p.Auth.Header)
				}
			}
			if gotAuth != tc.authWant {
				t.Errorf("auth = %q, want %q", gotAuth, tc.authWant)
			}
			if (len(p.ForwardHeaders) > 0) != (tc.url == MockUpstreamURL) {
				t.Errorf("forwardHeaders %v: the mock's fault headers go to the mock only", p.ForwardHeaders)
			}
			if err := Check(d, builtin.Registry()); err != nil {
				t.Fatal(err)
			}
			if len(d.Routes) != 1 || d.Routes[0].Name != "default" || d.Routes[0].Context != "/openai" {
				t.Errorf("routes = %+v", d.Routes)
			}
			idx := NewKeyIndex(d)
			if c, ok := idx.Lookup(sha256.Sum256([]byte(tc.key))); !ok || c.ApplicationID == "" {
				t.Errorf("key %q not accepted: %+v", tc.key, c)
			}
			if _, ok := idx.Lookup(sha256.Sum256([]byte(tc.other))); ok {
				t.Errorf("key %q accepted", tc.other)
			}
		})
	}
	if strings.Contains(string(defaultYAML), DemoKey+"\n") || strings.Count(string(defaultYAML), "sha256:") != 1 {
		t.Error("the embedded file must hold only the demo key's hash")
	}
}

// TestDefaultRefuses: a real provider key never goes behind the public demo
// key, and a key or base URL that cannot work is an error naming the
// variable, without the secret.
func TestDefaultRefuses(t *testing.T) {
	cases := []struct {
		name string
		env  map[string]string
		key  string
		want string
	}{
		{"demo key with a real key", map[string]string{"OPENAI_API_KEY": "sk-real"}, DemoKey, "generated key"},
		{"no generated key", map[string]string{"OPENAI_API_KEY": "sk-real"}, "", "generated key"},
		{"newline in the key", map[string]string{"OPENAI_API_KEY": "sk-real-secret\n"}, "sk-gen", "OPENAI_API_KEY contains a line feed"},
		{"bad base URL", map[string]string{"OPENAI_API_KEY": "sk-real-secret", "OPENAI_BASE_URL": "api.example.com"}, "sk-gen", "OPENAI_BASE_URL: want an absolute"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Default(func(k string) string { return tc.env[k] }, tc.key)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "sk-real") {
				t.Fatalf("the error shows the secret: %v", err)
			}
		})
	}
}

func TestWatch(t *testing.T) {
	path := filepath.Join(t.TempDir(), "deploy.yaml")
	write := func(s string) {
		t.Helper()
		// Write then rename, as editors and config management do, so no
		// poll sees a partial file.
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write("a")
	ctx, cancel := context.WithCancel(context.Background())
	changes := make(chan struct{}, 10)
	done := Watch(ctx, path, time.Millisecond, func() { changes <- struct{}{} })

	expectChange := func(what string) {
		t.Helper()
		select {
		case <-changes:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no change reported", what)
		}
	}
	write("b")
	expectChange("new content")

	// Same bytes, new mtime: not a change. Then a real change must be the
	// next (and only) report.
	write("b")
	if err := os.Chtimes(path, time.Now().Add(time.Hour), time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	os.Remove(path) // missing for a while: skipped, not a change
	write("c")
	expectChange("content after removal")
	select {
	case <-changes:
		t.Fatal("unchanged content reported as a change")
	default:
	}

	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("watcher did not stop")
	}
}
