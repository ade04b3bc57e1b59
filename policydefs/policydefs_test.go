package policydefs_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"sluice/policies/builtin"
	"sluice/policydefs"
	"sluice/policydefs/internal/defgen"
)

const staleMsg = "policy definitions are stale: run make generate"

// TestCatalogIsFresh regenerates the catalog and docs in memory and compares
// them with the committed files: a changed, missing or extra file fails.
func TestCatalogIsFresh(t *testing.T) {
	root, err := defgen.FindRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	want, err := defgen.Generate(root)
	if err != nil {
		t.Fatal(err)
	}
	for path, b := range want {
		got, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(path)))
		switch {
		case os.IsNotExist(err):
			t.Errorf("%s (%s is missing)", staleMsg, path)
		case err != nil:
			t.Errorf("reading %s: %v", path, err)
		case !bytes.Equal(got, b):
			t.Errorf("%s (%s differs)", staleMsg, path)
		}
	}
	existing, err := defgen.CatalogFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range existing {
		if _, ok := want[p]; !ok {
			t.Errorf("%s (%s has no definition)", staleMsg, p)
		}
	}
}

// TestEmbeddedCatalog checks that the embedded catalog holds one readable
// entry per built-in definition, with a compilable params schema.
func TestEmbeddedCatalog(t *testing.T) {
	all := policydefs.All()
	defs := builtin.Registry().All()
	if len(all) != len(defs) {
		t.Fatalf("%s: catalog has %d entries, registry %d", staleMsg, len(all), len(defs))
	}
	for i, d := range defs {
		got, ok := policydefs.Get(d.Name, d.Version)
		if !ok {
			t.Fatalf("Get(%s, %s) not found", d.Name, d.Version)
		}
		if all[i].ID() != d.ID() || got.Description != d.Description || got.Description == "" {
			t.Errorf("entry %d: got %s %q, want %s %q", i, all[i].ID(), got.Description, d.ID(), d.Description)
		}
		var schema map[string]any
		if err := json.Unmarshal(got.ParamsSchema, &schema); err != nil {
			t.Errorf("%s: params schema: %v", d.ID(), err)
		} else if schema["type"] != "object" {
			t.Errorf("%s: params schema type = %v", d.ID(), schema["type"])
		}
	}
	if _, ok := policydefs.Get("no-such-policy", "v1"); ok {
		t.Error("Get found an unknown policy")
	}
}

func TestGeneratedDocsMentionParams(t *testing.T) {
	root, err := defgen.FindRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	out, err := defgen.Generate(root)
	if err != nil {
		t.Fatal(err)
	}
	docs := out[defgen.DocsPath]
	for _, want := range []string{"## api-key-auth v1", "`alternateHeaders`", "`perApplication`", "Bearer &lt;key&gt;"} {
		if !bytes.Contains(docs, []byte(want)) {
			t.Errorf("docs lack %q", want)
		}
	}
}

func TestVersionLess(t *testing.T) {
	tests := []struct {
		a, b string
		want bool
	}{
		{"v1", "v2", true},
		{"v2", "v10", true},
		{"v10", "v2", false},
		{"v1", "v1", false},
		{"v1", "beta", true},
		{"beta", "v1", false},
		{"alpha", "beta", true},
	}
	for _, tt := range tests {
		if got := policydefs.VersionLess(tt.a, tt.b); got != tt.want {
			t.Errorf("VersionLess(%q, %q) = %v", tt.a, tt.b, got)
		}
	}
}
