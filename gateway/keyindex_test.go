package gateway

import (
	"crypto/sha256"
	"testing"
	"time"

	"sluice/deployment"
	"sluice/deployment/yamlfile"
)

func TestKeyIndex(t *testing.T) {
	d := &deployment.Deployment{Applications: []deployment.Application{
		{ID: "a", Name: "Team A", APIKeys: []string{deployment.HashKey("key-a1"), deployment.HashKey("key-a2")}},
		{ID: "b", Name: "Team B", APIKeys: []string{deployment.HashKey("key-b"), "not-a-hash", deployment.HashKey("key-a1")}},
	}}
	idx := NewKeyIndex(d)
	cases := []struct {
		key   string
		found bool
		app   string
		name  string
		keyID string
	}{
		{"key-a1", true, "a", "Team A", deployment.HashKey("key-a1")[7:15]},
		{"key-a2", true, "a", "Team A", deployment.HashKey("key-a2")[7:15]},
		{"key-b", true, "b", "Team B", deployment.HashKey("key-b")[7:15]},
		{"key-c", false, "", "", ""},
		{"", false, "", "", ""},
	}
	for _, tc := range cases {
		c, ok := idx.Lookup(sha256.Sum256([]byte(tc.key)))
		if ok != tc.found || c.ApplicationID != tc.app || c.ApplicationName != tc.name || c.KeyID != tc.keyID {
			t.Errorf("%q: got %+v %v", tc.key, c, ok)
		}
	}
	if h := deployment.HashKey("sk-sluice-demo"); h != "sha256:1c590839af894cf25f9a5fe06929af05b377f60efbe55508ef93d251887b9213" {
		t.Errorf("HashKey = %s", h)
	}
}

// Key objects: parsed with their expiry, validated, and refused by the index
// from their expiry on, at lookup time.
func TestKeyObjects(t *testing.T) {
	src := `apiVersion: sluice/v1
providers:
  - {name: openai, type: openai, url: "http://127.0.0.1:9000"}
applications:
  - id: app-a
    keys:
      - {id: k1, hash: "` + deployment.HashKey("key-1") + `"}
      - {id: k2, hash: "` + deployment.HashKey("key-2") + `", expiresAt: "2030-01-01T12:00:00+02:00"}
routes: []
`
	d, err := yamlfile.ParseEnv([]byte(src), "deploy.yaml", func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	exp := d.Applications[0].Keys[1].ExpiresAt
	if exp == nil || !exp.Equal(time.Date(2030, 1, 1, 10, 0, 0, 0, time.UTC)) || exp.Location() != time.UTC {
		t.Fatalf("expiresAt %v", exp)
	}
	now := time.Date(2030, 1, 1, 9, 59, 59, 0, time.UTC)
	idx := NewKeyIndexAt(d, func() time.Time { return now })
	for key, wantID := range map[string]string{"key-1": "k1", "key-2": "k2"} {
		c, ok := idx.Lookup(sha256.Sum256([]byte(key)))
		if !ok || c.KeyID != wantID || c.ApplicationID != "app-a" {
			t.Fatalf("%s: %+v %v", key, c, ok)
		}
	}
	now = now.Add(time.Second) // the expiry instant itself is refused
	if _, ok := idx.Lookup(sha256.Sum256([]byte("key-2"))); ok {
		t.Fatal("an expired key was accepted")
	}
	if _, ok := idx.Lookup(sha256.Sum256([]byte("key-1"))); !ok {
		t.Fatal("a key without expiry was refused")
	}
}
