// Package policydefs is the policy catalog: one committed JSON document per
// built-in policy definition (name, version, description, the metadata keys it
// reads and writes, and its params JSON Schema with the params' Go doc comments
// as descriptions). The documents are generated from the definitions by
// `make generate` (go generate runs ./gen); a test fails when they are stale.
//
// The catalog is what the platform and the CLI show users; runtime validation
// uses the definitions themselves (policies.Registry), which hold the same
// schema without the comments.
package policydefs

import (
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"sort"

	"sluice/policydefs/entry"
)

//go:generate go run ./gen

//go:embed *.json
var files embed.FS

// MetaKeyDoc documents a metadata key a policy reads or writes.
type MetaKeyDoc = entry.MetaKeyDoc

// Def is one catalog entry, the content of policydefs/<name>.<version>.json.
type Def = entry.Def

// FileName is the catalog file name of a definition: "<name>.<version>.json".
func FileName(name, version string) string { return entry.FileName(name, version) }

// All returns every catalog entry sorted by name, then version. The slice is
// new on each call; ParamsSchema bytes must not be modified.
func All() []Def {
	entries, err := fs.ReadDir(files, ".")
	if err != nil {
		panic(fmt.Sprintf("policydefs: reading embedded catalog: %v", err))
	}
	out := make([]Def, 0, len(entries))
	for _, e := range entries {
		b, err := files.ReadFile(e.Name())
		if err != nil {
			panic(fmt.Sprintf("policydefs: %s: %v", e.Name(), err))
		}
		var d Def
		if err := json.Unmarshal(b, &d); err != nil {
			// The files are generated and tested; a bad one is a build defect.
			panic(fmt.Sprintf("policydefs: %s: %v", e.Name(), err))
		}
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		return VersionLess(out[i].Version, out[j].Version)
	})
	return out
}

// Get returns the entry for name and version.
func Get(name, version string) (Def, bool) {
	b, err := files.ReadFile(FileName(name, version))
	if err != nil {
		return Def{}, false
	}
	var d Def
	if err := json.Unmarshal(b, &d); err != nil {
		panic(fmt.Sprintf("policydefs: %s: %v", FileName(name, version), err))
	}
	return d, true
}

// Latest returns the highest version of name.
func Latest(name string) (Def, bool) {
	var best Def
	found := false
	for _, d := range All() {
		if d.Name == name && (!found || VersionLess(best.Version, d.Version)) {
			best, found = d, true
		}
	}
	return best, found
}

// VersionLess orders major versions numerically ("v2" < "v10"); versions that
// are not "v<number>" sort after numbered ones, by string.
func VersionLess(a, b string) bool {
	na, oka := versionNumber(a)
	nb, okb := versionNumber(b)
	switch {
	case oka && okb:
		return na < nb
	case oka != okb:
		return oka
	}
	return a < b
}

func versionNumber(v string) (int, bool) {
	if len(v) < 2 || v[0] != 'v' {
		return 0, false
	}
	n := 0
	for _, c := range v[1:] {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}
