package config

import (
	"crypto/sha256"
	"strings"
	"testing"
	"time"
)

// Key objects: parsed with their expiry, validated, and refused by the index
// from their expiry on, at lookup time.
func TestKeyObjects(t *testing.T) {
	src := `apiVersion: sluice/v1
providers:
  - {name: openai, type: openai, url: "http://127.0.0.1:9000"}
applications:
  - id: app-a
    keys:
      - {id: k1, hash: "` + HashKey("key-1") + `"}
      - {id: k2, hash: "` + HashKey("key-2") + `", expiresAt: "2030-01-01T12:00:00+02:00"}
routes: []
`
	d, errs := load(t, src, nil)
	if errs != nil {
		t.Fatal(errs)
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

func TestKeyObjectAndResourceErrors(t *testing.T) {
	src := `apiVersion: sluice/v1
providers:
  - {name: openai, type: openai, url: "http://127.0.0.1:9000"}
applications:
  - id: app-a
    apiKeys: ["` + hashA + `"]
    keys:
      - {id: k1, hash: "` + hashA + `"}
      - {id: k1, hash: "sha256:nothex"}
      - {hash: "` + HashKey("x") + `", expiresAt: "tomorrow"}
  - id: app-b
    keys: [{id: "bad id", hash: "` + HashKey("x") + `"}]
routes:
  - name: r1
    context: /openai
    provider: openai
    policies:
      - name: fake-auth
        resources: {include: [/chat/completions], exclude: [/embeddings]}
      - name: fake-auth
        resources: {include: [/v1/chat/completions, /embeddings, /embeddings]}
      - name: fake-auth
        resources: {}
`
	_, errs := load(t, src, nil)
	var got []string
	for _, e := range errs {
		got = append(got, e.Field+": "+e.Message)
	}
	want := []string{
		"applications[0].keys[0].hash: key listed twice",
		"applications[0].keys[1].id: duplicate key id",
		"applications[0].keys[1].hash: want \"sha256:\"",
		"applications[0].keys[2].id: required",
		"applications[0].keys[2].expiresAt: expected an RFC 3339 time",
		"applications[1].keys[0].id: invalid key id",
		"applications[1].keys[0].hash: key already belongs to application \"app-a\"",
		"routes[0].policies[0].resources: give include or exclude, not both",
		"routes[0].policies[1].resources.include[0]: unknown resource \"/v1/chat/completions\"",
		"routes[0].policies[1].resources.include[2]: resource \"/embeddings\" listed twice",
		"routes[0].policies[2].resources: give include or exclude",
	}
	if len(got) != len(want) {
		t.Fatalf("got %d errors:\n%s", len(got), strings.Join(got, "\n"))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("error %d:\n got %s\nwant %s...", i, got[i], want[i])
		}
	}
}
