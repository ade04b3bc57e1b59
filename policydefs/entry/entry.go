// Package entry is the shape of one policy catalog document
// (policydefs/<name>.<version>.json), shared by the catalog (package
// policydefs, which embeds the documents) and its generator (defgen, which
// must build before any document exists, so it cannot import policydefs).
package entry

import "encoding/json"

// MetaKeyDoc documents a metadata key a policy reads or writes.
type MetaKeyDoc struct {
	Key string `json:"key"`
	// Phase is "request", "response" or "final".
	Phase string `json:"phase"`
	// Optional reads are not required to have a writer earlier in the chain.
	Optional bool `json:"optional,omitempty"`
}

// Def is one catalog entry, the content of policydefs/<name>.<version>.json.
type Def struct {
	Name         string          `json:"name"`
	Version      string          `json:"version"`
	Description  string          `json:"description"`
	Reads        []MetaKeyDoc    `json:"reads"`
	Writes       []MetaKeyDoc    `json:"writes"`
	ParamsSchema json.RawMessage `json:"paramsSchema"`
}

// ID is "name/version".
func (d Def) ID() string { return d.Name + "/" + d.Version }

// FileName is the catalog file name of a definition: "<name>.<version>.json".
func FileName(name, version string) string { return name + "." + version + ".json" }
