package yamlfile

import (
	"strings"
	"testing"

	"sluice/deployment"
)

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
      - {hash: "` + deployment.HashKey("x") + `", expiresAt: "tomorrow"}
  - id: app-b
    keys: [{id: "bad id", hash: "` + deployment.HashKey("x") + `"}]
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
