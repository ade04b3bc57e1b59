package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"sluice/policydefs"
)

func TestPoliciesList(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"policies"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	if !strings.HasPrefix(lines[0], "NAME") || !strings.Contains(lines[0], "VERSION") || !strings.Contains(lines[0], "DESCRIPTION") {
		t.Fatalf("header %q", lines[0])
	}
	all := policydefs.All()
	if len(lines)-1 != len(all) {
		t.Fatalf("%d rows, catalog has %d", len(lines)-1, len(all))
	}
	for i, d := range all {
		f := strings.Fields(lines[i+1])
		if len(f) < 3 || f[0] != d.Name || f[1] != d.Version || !strings.Contains(lines[i+1], d.Description) {
			t.Errorf("row %q, want %s %s %q", lines[i+1], d.Name, d.Version, d.Description)
		}
	}
	for _, name := range []string{"api-key-auth", "model-access"} {
		if !strings.Contains(out.String(), name) {
			t.Errorf("list lacks %s", name)
		}
	}
}

func TestPoliciesSchema(t *testing.T) {
	tests := []struct {
		name      string
		args      []string
		wantCode  int
		wantTitle string
		wantProp  string
		wantErr   string
	}{
		{name: "latest", args: []string{"policies", "schema", "api-key-auth"}, wantTitle: "api-key-auth", wantProp: "header"},
		{name: "explicit version", args: []string{"policies", "schema", "model-access", "v1"}, wantTitle: "model-access", wantProp: "perApplication"},
		{name: "unknown name", args: []string{"policies", "schema", "no-such"}, wantCode: 1, wantErr: "api-key-auth"},
		{name: "unknown version", args: []string{"policies", "schema", "model-access", "v9"}, wantCode: 1, wantErr: `no version "v9" (known: v1)`},
		{name: "no name", args: []string{"policies", "schema"}, wantCode: 2, wantErr: "usage"},
		{name: "unknown subcommand", args: []string{"policies", "show"}, wantCode: 2, wantErr: `unknown subcommand "show"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(tt.args, &out, &errb)
			if code != tt.wantCode {
				t.Fatalf("exit %d, want %d (stderr %q)", code, tt.wantCode, errb.String())
			}
			if tt.wantErr != "" && !strings.Contains(errb.String(), tt.wantErr) {
				t.Fatalf("stderr %q, want %q", errb.String(), tt.wantErr)
			}
			if tt.wantCode != 0 {
				if out.Len() != 0 {
					t.Fatalf("stdout on failure: %q", out.String())
				}
				return
			}
			var s struct {
				Title      string                    `json:"title"`
				Type       string                    `json:"type"`
				Properties map[string]map[string]any `json:"properties"`
			}
			if err := json.Unmarshal(out.Bytes(), &s); err != nil {
				t.Fatalf("stdout is not JSON: %v\n%s", err, out.String())
			}
			if s.Title != tt.wantTitle || s.Type != "object" {
				t.Fatalf("title %q type %q", s.Title, s.Type)
			}
			if _, ok := s.Properties[tt.wantProp]; !ok {
				t.Fatalf("schema lacks property %s", tt.wantProp)
			}
			if !strings.HasPrefix(out.String(), "{\n  \"") {
				t.Fatalf("schema is not indented from column 0: %q", out.String()[:20])
			}
		})
	}
}
