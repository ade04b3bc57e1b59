// Command gen regenerates the policy catalog (policydefs/*.json) and
// docs/policies.md from the built-in definitions. Run it with `make generate`
// (go generate in policydefs); it finds the module root from the working
// directory, writes every output and removes catalog files of definitions that
// no longer exist.
package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"sluice/policydefs/internal/defgen"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "policydefs/gen:", err)
		os.Exit(1)
	}
}

func run() error {
	wd, err := os.Getwd()
	if err != nil {
		return err
	}
	root, err := defgen.FindRoot(wd)
	if err != nil {
		return err
	}
	out, err := defgen.Generate(root)
	if err != nil {
		return err
	}
	paths := make([]string, 0, len(out))
	for p := range out {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		full := filepath.Join(root, filepath.FromSlash(p))
		if old, err := os.ReadFile(full); err == nil && bytes.Equal(old, out[p]) {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(full, out[p], 0o644); err != nil {
			return err
		}
		fmt.Println("wrote", p)
	}
	existing, err := defgen.CatalogFiles(root)
	if err != nil {
		return err
	}
	for _, p := range existing {
		if _, ok := out[p]; !ok {
			if err := os.Remove(filepath.Join(root, filepath.FromSlash(p))); err != nil {
				return err
			}
			fmt.Println("removed", p)
		}
	}
	return nil
}
