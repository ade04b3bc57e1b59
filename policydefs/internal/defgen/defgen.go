// Package defgen renders the policy catalog (policydefs/*.json) and its
// user documentation (docs/policies.md) from the built-in definitions. The
// generator (policydefs/gen) writes what it renders; the staleness test
// compares it with the committed files.
package defgen

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/invopop/jsonschema"

	"sluice/policies"
	"sluice/policies/builtin"
	"sluice/policydefs/entry"
)

// DocsPath is the generated documentation, relative to the module root.
const DocsPath = "docs/policies.md"

// DefsDir is the catalog directory, relative to the module root.
const DefsDir = "policydefs"

// Output is everything the generator produces, by path relative to the
// module root.
type Output map[string][]byte

// Generate renders the catalog files and the docs for every built-in
// definition. root is the module root (it reads root/go.mod and the Go sources
// under root/policies for doc comments).
func Generate(root string) (Output, error) {
	comments, err := Comments(root)
	if err != nil {
		return nil, err
	}
	out := Output{}
	var defs []entry.Def
	for _, d := range builtin.Registry().All() {
		def, err := Render(d, comments)
		if err != nil {
			return nil, err
		}
		b, err := marshal(def)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", d.ID(), err)
		}
		out[filepath.ToSlash(filepath.Join(DefsDir, entry.FileName(d.Name, d.Version)))] = b
		defs = append(defs, def)
	}
	docs, err := Docs(defs)
	if err != nil {
		return nil, err
	}
	out[DocsPath] = docs
	return out, nil
}

// Render builds one catalog entry.
func Render(d *policies.Definition, comments map[string]string) (entry.Def, error) {
	schema, err := policies.SchemaJSON(d, comments)
	if err != nil {
		return entry.Def{}, fmt.Errorf("%s: params schema: %w", d.ID(), err)
	}
	return entry.Def{
		Name: d.Name, Version: d.Version, Description: d.Description,
		Reads: metaDocs(d.Reads), Writes: metaDocs(d.Writes),
		ParamsSchema: schema,
	}, nil
}

func metaDocs(keys []policies.MetaKey) []entry.MetaKeyDoc {
	out := make([]entry.MetaKeyDoc, 0, len(keys))
	for _, k := range keys {
		out = append(out, entry.MetaKeyDoc{Key: k.Key, Phase: k.Phase.String(), Optional: k.Optional})
	}
	return out
}

// marshal writes def as indented JSON with a trailing newline, without HTML
// escaping (descriptions contain "<key>").
func marshal(def entry.Def) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(def); err != nil {
		return nil, err
	}
	// SchemaJSON's output was escaped when it was marshalled; undo that.
	return unescapeHTML(buf.Bytes()), nil
}

// unescapeHTML turns json's \u003c, \u003e and \u0026 back into <, > and &.
// In valid JSON a backslash always starts a two-byte escape or \uXXXX, so
// walking escape by escape never mistakes an escaped backslash for one.
func unescapeHTML(b []byte) []byte {
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		c := b[i]
		if c != '\\' || i+1 >= len(b) {
			out = append(out, c)
			continue
		}
		if b[i+1] == 'u' && i+5 < len(b) {
			switch string(b[i+2 : i+6]) {
			case "003c":
				out = append(out, '<')
				i += 5
				continue
			case "003e":
				out = append(out, '>')
				i += 5
				continue
			case "0026":
				out = append(out, '&')
				i += 5
				continue
			}
		}
		out = append(out, c, b[i+1])
		i++
	}
	return out
}

// Comments extracts the Go doc comments of every type and field under
// root/policies, keyed the way jsonschema's CommentMap expects
// ("<import path>.<Type>[.<Field>]").
func Comments(root string) (map[string]string, error) {
	module, err := modulePath(root)
	if err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(filepath.Join(root, "policies"))
	if err != nil {
		return nil, err
	}
	// AddGoComments names a package by joining its base argument with the
	// directory as walked; walking an absolute path with an empty base gives
	// keys that start with dir, which are rewritten to the import path.
	r := &jsonschema.Reflector{}
	if err := r.AddGoComments("", dir, jsonschema.WithFullComment()); err != nil {
		return nil, fmt.Errorf("reading doc comments under %s: %w", dir, err)
	}
	prefix := filepath.ToSlash(dir)
	out := make(map[string]string, len(r.CommentMap))
	for k, v := range r.CommentMap {
		if rest, ok := strings.CutPrefix(k, prefix); ok {
			out[module+"/policies"+rest] = v
		}
	}
	return out, nil
}

func modulePath(root string) (string, error) {
	f, err := os.Open(filepath.Join(root, "go.mod"))
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
			return strings.Trim(strings.TrimSpace(m), `"`), nil
		}
	}
	return "", fmt.Errorf("%s/go.mod has no module line", root)
}

// FindRoot walks up from dir to the directory holding go.mod.
func FindRoot(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above %s", dir)
		}
		dir = parent
	}
}

// CatalogFiles lists the *.json files currently in root/policydefs, as paths
// relative to root, sorted.
func CatalogFiles(root string) ([]string, error) {
	matches, err := filepath.Glob(filepath.Join(root, DefsDir, "*.json"))
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(matches))
	for _, m := range matches {
		out = append(out, filepath.ToSlash(filepath.Join(DefsDir, filepath.Base(m))))
	}
	sort.Strings(out)
	return out, nil
}
