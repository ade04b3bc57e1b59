package main

import (
	"bytes"
	"os"
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
