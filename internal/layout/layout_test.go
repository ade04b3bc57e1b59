package layout

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

const module = "sluice"

// layers places every package of the module: the component (a path prefix
// below the module) and its layer. A package may import packages of a lower
// layer and packages of its own component; the longest matching prefix
// decides. Fractional layers order the components of one tier of the rule.
var layers = []struct {
	prefix string
	layer  float64
}{
	// Programs and end-to-end tests: they may import anything.
	{"cmd", 6}, {"bench", 6}, {"e2e", 6}, {"policydefs/gen", 6}, {"policydefs/internal/defgen", 5.5},
	// The one wiring.
	{"internal/app", 5},
	// Data plane and control plane: never each other.
	{"gateway", 4}, {"platform", 4},
	// The console's assets, served by the platform.
	{"webui", 3.5},
	// The policy contract, the runner and the built-in policies.
	{"policies", 3},
	// Process-lifetime services and the usage record.
	{"counter", 2.5}, {"admission", 2.5}, {"meter", 2.5},
	// The deployment document: a leaf of the rule's middle tier.
	{"deployment", 2},
	// Leaves, in their own order.
	{"mockllm", 1.5},
	{"tokencount", 1.3}, {"pricing", 1.3},
	// The per-request context: it holds the request's usage (llmapi).
	{"sharedctx", 1.25},
	{"llmapi", 1.2},
	{"gwerror", 1.1},
	{"dialect", 1}, {"sse", 1}, {"policydefs", 1},
	{"internal/clock", 0}, {"internal/satmath", 0}, {"internal/promreg", 0}, {"internal/serve", 0}, {"internal/linebuf", 0},
	// Test support: imported by tests only.
	{"internal/pgtest", 0}, {"internal/redistest", 0}, {"internal/proctest", 0},
	{"internal/layout", 0},
}

// place returns the component and layer of a module package (path without
// the module prefix); ok is false when the table does not place it.
func place(pkg string) (component string, layer float64, ok bool) {
	best := -1
	for _, l := range layers {
		if (pkg == l.prefix || strings.HasPrefix(pkg, l.prefix+"/")) && len(l.prefix) > best {
			best, component, layer, ok = len(l.prefix), l.prefix, l.layer, true
		}
	}
	return component, layer, ok
}

// violations checks a graph of module packages (without the module prefix)
// against the table and returns one line per problem, sorted.
func violations(graph map[string][]string) []string {
	var out []string
	for pkg, imports := range graph {
		comp, layer, ok := place(pkg)
		if !ok {
			out = append(out, fmt.Sprintf("%s: not placed in the layer table of internal/layout (add it deliberately)", pkg))
			continue
		}
		for _, imp := range imports {
			icomp, ilayer, iok := place(imp)
			switch {
			case !iok:
				// Reported as its own package.
			case icomp == comp:
			case ilayer < layer:
			case ilayer == layer && (comp == "gateway" || comp == "platform"):
				out = append(out, fmt.Sprintf("%s imports %s: gateway and platform never import each other; they meet at the deployment document", pkg, imp))
			default:
				out = append(out, fmt.Sprintf("%s (%s, layer %g) imports %s (%s, layer %g): imports point down the layers", pkg, comp, layer, imp, icomp, ilayer))
			}
		}
	}
	sort.Strings(out)
	return out
}

// moduleGraph lists the non-test imports of every package of the module.
func moduleGraph(t *testing.T) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-e", "-json=ImportPath,Dir,GoFiles,Imports,Error", module+"/...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	graph := map[string][]string{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			ImportPath string
			Dir        string
			GoFiles    []string
			Imports    []string
			Error      *struct{ Err string }
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		if p.Error != nil {
			t.Fatalf("go list %s: %s", p.ImportPath, p.Error.Err)
		}
		if strings.Contains(p.ImportPath, "/node_modules/") {
			continue // an npm package's Go files (webui), not the module's code
		}
		touchInputs(t, p.Dir, p.GoFiles)
		pkg := strings.TrimPrefix(p.ImportPath, module+"/")
		var own []string
		for _, imp := range p.Imports {
			if strings.HasPrefix(imp, module+"/") {
				own = append(own, strings.TrimPrefix(imp, module+"/"))
			}
		}
		graph[pkg] = own
	}
	if len(graph) < 10 {
		t.Fatalf("go list found %d packages; is the test run inside the module?", len(graph))
	}
	return graph
}

// touchInputs reads the package's directory and stats its files so that the
// test cache, which records what a test opens, reruns the test when an
// import changes (go list in a subprocess is invisible to it).
func touchInputs(t *testing.T, dir string, files []string) {
	t.Helper()
	if _, err := os.ReadDir(dir); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
}

func TestImportRule(t *testing.T) {
	for _, v := range violations(moduleGraph(t)) {
		t.Error(v)
	}
}

// TestViolations shows that the checker bites: each forbidden edge of the
// rule is reported, each allowed one is not.
func TestViolations(t *testing.T) {
	cases := []struct {
		from, to string
		bad      bool
	}{
		{"gateway", "platform/store", true},
		{"platform/api", "gateway", true},
		{"platform/api", "gateway/pull", true},
		{"deployment", "policies", true},
		{"deployment", "gateway", true},
		{"counter/redisstore", "policies/ratelimit", true},
		{"policies", "gateway", true},
		{"sharedctx", "policies", true},
		{"gateway", "internal/app", true},
		{"policies/ratelimit", "counter", false},
		{"gateway/pull", "gateway", false},
		{"gateway", "deployment", false},
		{"platform/api", "deployment/yamlfile", false},
		{"internal/app", "gateway", false},
		{"internal/app", "platform", false},
		{"cmd/sluice", "internal/app", false},
		{"counter/counterconfig", "deployment", false},
		{"brandnew", "sharedctx", true},
	}
	for _, c := range cases {
		got := violations(map[string][]string{c.from: {c.to}})
		if bad := len(got) > 0; bad != c.bad {
			t.Errorf("%s -> %s: violations %q, want bad=%v", c.from, c.to, got, c.bad)
		}
	}
}
