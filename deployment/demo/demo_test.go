package demo

import (
	"crypto/sha256"
	"strings"
	"testing"

	"sluice/gateway"
	"sluice/policies"
	"sluice/policies/builtin"
)

func TestDeployment(t *testing.T) {
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
		{"no key: mock upstream", nil, MockUpstreamURL, "", Key, generated},
		{"key: OpenAI", map[string]string{"OPENAI_API_KEY": "sk-real"}, OpenAIURL, "Bearer sk-real", generated, Key},
		{"key and base URL with /v1", map[string]string{"OPENAI_API_KEY": "sk-real", "OPENAI_BASE_URL": "http://127.0.0.1:7/v1/"},
			"http://127.0.0.1:7", "Bearer sk-real", generated, Key},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d, err := Deployment(func(k string) string { return tc.env[k] }, generated)
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
			if err := policies.Check(d, builtin.Registry()); err != nil {
				t.Fatal(err)
			}
			if len(d.Routes) != 1 || d.Routes[0].Name != "default" || d.Routes[0].Context != "/openai" {
				t.Errorf("routes = %+v", d.Routes)
			}
			idx := gateway.NewKeyIndex(d)
			if c, ok := idx.Lookup(sha256.Sum256([]byte(tc.key))); !ok || c.ApplicationID == "" {
				t.Errorf("key %q not accepted: %+v", tc.key, c)
			}
			if _, ok := idx.Lookup(sha256.Sum256([]byte(tc.other))); ok {
				t.Errorf("key %q accepted", tc.other)
			}
		})
	}
	if strings.Contains(string(defaultYAML), Key+"\n") || strings.Count(string(defaultYAML), "sha256:") != 1 {
		t.Error("the embedded file must hold only the demo key's hash")
	}
}

// TestDeploymentRefuses: a real provider key never goes behind the public demo
// key, and a key or base URL that cannot work is an error naming the
// variable, without the secret.
func TestDeploymentRefuses(t *testing.T) {
	cases := []struct {
		name string
		env  map[string]string
		key  string
		want string
	}{
		{"demo key with a real key", map[string]string{"OPENAI_API_KEY": "sk-real"}, Key, "generated key"},
		{"no generated key", map[string]string{"OPENAI_API_KEY": "sk-real"}, "", "generated key"},
		{"newline in the key", map[string]string{"OPENAI_API_KEY": "sk-real-secret\n"}, "sk-gen", "OPENAI_API_KEY contains a line feed"},
		{"bad base URL", map[string]string{"OPENAI_API_KEY": "sk-real-secret", "OPENAI_BASE_URL": "api.example.com"}, "sk-gen", "OPENAI_BASE_URL: want an absolute"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Deployment(func(k string) string { return tc.env[k] }, tc.key)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "sk-real") {
				t.Fatalf("the error shows the secret: %v", err)
			}
		})
	}
}
