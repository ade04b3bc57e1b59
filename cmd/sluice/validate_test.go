package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestValidateCommand(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.yaml", `apiVersion: sluice/v1
providers:
  - {name: openai, type: openai, url: "http://127.0.0.1:9000"}
applications:
  - id: demo
    apiKeys: ["sha256:1c590839af894cf25f9a5fe06929af05b377f60efbe55508ef93d251887b9213"]
routes:
  - name: a
    context: /a
    provider: openai
    policies:
      - {name: api-key-auth, version: v1}
      - {name: model-access, version: v1, params: {allow: ["gpt-4o*"]}}
  - name: b
    context: /b
    provider: openai
`)
	bad := write("bad.yaml", `apiVersion: sluice/v1
providers:
  - {name: openai, type: openai, url: "http://127.0.0.1:9000"}
routes:
  - name: a
    context: /a
    provider: nope
    policies:
      - name: no-such-policy
  - name: a
    context: /b
    provider: openai
`)
	syntax := write("syntax.yaml", "routes: [\n")

	cases := []struct {
		name        string
		args        []string
		code        int
		stdout      string
		stderrHas   []string
		stderrLines int
	}{
		{"valid", []string{"validate", good}, 0, good + ": ok (2 routes, 2 policies)\n", nil, 0},
		{"invalid", []string{"validate", bad}, 1, "", []string{
			bad + ":7:15: routes[0].provider: unknown provider \"nope\"",
			bad + ":9:15: routes[0].policies[0].name: unknown policy \"no-such-policy\"",
			bad + ":10:11: routes[1].name: duplicate route name \"a\"",
		}, 3},
		{"syntax", []string{"validate", syntax}, 1, "", []string{syntax + ":"}, 1},
		{"missing file", []string{"validate", filepath.Join(dir, "none.yaml")}, 1, "", []string{"none.yaml"}, 1},
		{"no file", []string{"validate"}, 2, "", []string{"usage: sluice validate FILE"}, 1},
		{"two files", []string{"validate", good, bad}, 2, "", []string{"usage"}, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(tc.args, &out, &errb)
			if code != tc.code {
				t.Errorf("exit %d, want %d; stderr:\n%s", code, tc.code, errb.String())
			}
			if out.String() != tc.stdout {
				t.Errorf("stdout %q, want %q", out.String(), tc.stdout)
			}
			lines := strings.Split(strings.TrimRight(errb.String(), "\n"), "\n")
			if errb.Len() == 0 {
				lines = nil
			}
			if len(lines) != tc.stderrLines {
				t.Errorf("stderr has %d lines, want %d:\n%s", len(lines), tc.stderrLines, errb.String())
			}
			for i, want := range tc.stderrHas {
				if i >= len(lines) || !strings.HasPrefix(lines[i], want) && !strings.Contains(lines[i], want) {
					t.Errorf("stderr line %d lacks %q:\n%s", i, want, errb.String())
				}
			}
		})
	}
}

// TestValidateRefusesWhatCannotWork runs the real binary on a deployment with
// every kind of configuration that would load but not work: each problem is
// one stderr line naming file:line:col and the field, no secret is echoed,
// and the exit status is 1.
func TestValidateRefusesWhatCannotWork(t *testing.T) {
	bin := sluiceBinary(t)
	doc := `apiVersion: sluice/v1
counters:
  backend: redis
  redis:
    url: "redis://:pw-secret@10.0.0.1:6379/2?max_retries=5"
    cluster: true
providers:
  - name: openai
    type: openai
    url: https://api.openai.com/v1
    auth: {header: Authorization, value: "Bearer ${SLUICE_TEST_KEY}"}
applications:
  - id: app-a
    apiKeys: ["sha256:1c590839af894cf25f9a5fe06929af05b377f60efbe55508ef93d251887b9213"]
routes:
  - name: r1
    context: /openai
    provider: openai
    policies:
      - name: api-key-auth
      - name: model-access
        params:
          allow: ["gpt-4o-mini"]
          perApplication:
            app-aa: ["gpt-4o"]
      - name: token-based-ratelimit
        params:
          consumerBased: true
          totalTokenLimits: [{count: 1000, duration: 1h}]
          overrides: [{applications: [app-a, app-b], totalTokenLimits: [{count: 9, duration: 1h}]}]
`
	path := filepath.Join(t.TempDir(), "deploy.yaml")
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "validate", path)
	cmd.Env = append(os.Environ(), "SLUICE_TEST_KEY=sk-secret-from-a-file\n")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("exit: %v, want status 1\nstdout: %s\nstderr: %s", err, stdout.String(), stderr.String())
	}
	want := []string{
		path + ":5:10: counters.redis.url: URL option max_retries is set by the store",
		path + ":5:10: counters.redis.url: database 2: Redis Cluster has only database 0",
		path + ":10:10: providers[0].url: the url is the API base without /v1: the route path /v1/... is appended (write \"https://api.openai.com\")",
		path + ":11:42: providers[0].auth.value: contains a line feed (\\n) at byte 28 (value not shown)",
		path + ":25:13: routes[0].policies[1].params.perApplication.app-aa: application \"app-aa\" is not defined in applications (defined: \"app-a\")",
		path + ":30:46: routes[0].policies[2].params.overrides[0].applications[1]: application \"app-b\" is not defined in applications",
	}
	lines := strings.Split(strings.TrimRight(stderr.String(), "\n"), "\n")
	if len(lines) != len(want) {
		t.Errorf("%d problems, want %d:\n%s", len(lines), len(want), stderr.String())
	}
	for i := range min(len(lines), len(want)) {
		if !strings.HasPrefix(lines[i], want[i]) {
			t.Errorf("line %d:\n got %s\nwant %s...", i+1, lines[i], want[i])
		}
	}
	for _, secret := range []string{"sk-secret", "pw-secret"} {
		if strings.Contains(stderr.String(), secret) {
			t.Errorf("validate echoes a secret:\n%s", stderr.String())
		}
	}
}
