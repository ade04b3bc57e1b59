package pricing

import (
	_ "embed"
	"errors"
	"fmt"
	"math"
	"os"
	"sort"
	"strings"

	"github.com/goccy/go-yaml"
)

//go:embed models.yaml
var embeddedTable []byte

// maxPrice bounds a price (USD per million tokens) so that integer cost
// arithmetic cannot overflow for any realistic token count.
const maxPrice = 1_000_000

// fileDoc is the shape of the embedded table and of user pricing files.
type fileDoc struct {
	// Date is the date the prices were compiled (informational).
	Date   string               `yaml:"date"`
	Models map[string]fileModel `yaml:"models"`
}

type fileModel struct {
	Provider    string     `yaml:"provider"`
	Input       *float64   `yaml:"input"`
	CachedInput *float64   `yaml:"cachedInput"`
	CacheWrite  *float64   `yaml:"cacheWrite"`
	Output      *float64   `yaml:"output"`
	Tiers       []fileTier `yaml:"tiers"`
	Aliases     []string   `yaml:"aliases"`
}

type fileTier struct {
	AbovePromptTokens *int64   `yaml:"abovePromptTokens"`
	Input             *float64 `yaml:"input"`
	CachedInput       *float64 `yaml:"cachedInput"`
	CacheWrite        *float64 `yaml:"cacheWrite"`
	Output            *float64 `yaml:"output"`
}

// New returns the embedded catalog extended by userFile (YAML or JSON, the
// embedded table's shape), whose entries add to or replace embedded ones by
// name. An empty userFile means the embedded table alone.
func New(userFile string) (*Catalog, error) {
	c, err := parseLayer(&Catalog{models: map[string]*entry{}, aliases: map[string]*entry{}}, "embedded", embeddedTable, 0)
	if err != nil {
		return nil, fmt.Errorf("pricing: embedded table: %w", err)
	}
	if userFile == "" {
		return c, nil
	}
	return c.WithFile(userFile)
}

// WithFile returns a new catalog: c extended by the pricing file at path.
// c is not modified.
func (c *Catalog) WithFile(path string) (*Catalog, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("pricing file: %w", err)
	}
	return c.WithData(path, data)
}

// WithData is WithFile for a document already in memory; name labels errors
// and the entries' Source.
func (c *Catalog) WithData(name string, data []byte) (*Catalog, error) {
	layer := 1
	for _, e := range c.models {
		layer = max(layer, e.layer+1)
	}
	out, err := parseLayer(c, name, data, layer)
	if err != nil {
		return nil, fmt.Errorf("pricing file %s: %w", name, err)
	}
	return out, nil
}

// parseLayer decodes data strictly and returns base with its entries added
// (replacing same-named ones). Errors carry the offending model name; decode
// errors carry the line.
func parseLayer(base *Catalog, source string, data []byte, layer int) (*Catalog, error) {
	var doc fileDoc
	if err := yaml.UnmarshalWithOptions(data, &doc, yaml.Strict()); err != nil {
		return nil, errors.New(yaml.FormatError(err, false, true))
	}
	if doc.Models == nil && layer > 0 {
		return nil, errors.New(`no "models" mapping (want models: {<name>: {input: ..., output: ...}})`)
	}
	out := &Catalog{
		date:    base.date,
		models:  make(map[string]*entry, len(base.models)+len(doc.Models)),
		aliases: map[string]*entry{},
	}
	if layer == 0 {
		out.date = doc.Date
	}
	for k, e := range base.models {
		out.models[k] = e
	}
	names := make([]string, 0, len(doc.Models))
	for n := range doc.Models {
		names = append(names, n)
	}
	sort.Strings(names)
	seen := map[string]string{}
	for _, raw := range names {
		name := canonical(raw)
		if name == "" {
			return nil, errors.New("models: empty model name")
		}
		if prev, dup := seen[name]; dup {
			return nil, fmt.Errorf("models: %q and %q are the same name (names are case-insensitive)", prev, raw)
		}
		seen[name] = raw
		m, err := buildModel(name, doc.Models[raw])
		if err != nil {
			return nil, fmt.Errorf("models.%s: %w", raw, err)
		}
		m.Source = source
		out.models[name] = &entry{Model: m, layer: layer}
	}
	if err := out.indexAliases(); err != nil {
		return nil, err
	}
	return out, nil
}

func buildModel(name string, fm fileModel) (Model, error) {
	m := Model{Name: name, Provider: fm.Provider}
	if fm.Input == nil {
		return m, errors.New("input is required (USD per million prompt tokens)")
	}
	if fm.Output == nil {
		return m, errors.New("output is required (USD per million completion tokens; 0 for embeddings)")
	}
	p := Price{Input: *fm.Input, Output: *fm.Output}
	p.CachedInput = orDefault(fm.CachedInput, p.Input)
	p.CacheWrite = orDefault(fm.CacheWrite, p.Input)
	if err := checkPrices(p.Input, p.Output, p.CachedInput, p.CacheWrite); err != nil {
		return m, err
	}
	for i, ft := range fm.Tiers {
		t, err := buildTier(ft)
		if err != nil {
			return m, fmt.Errorf("tiers[%d]: %w", i, err)
		}
		if i > 0 && t.AbovePromptTokens <= p.Tiers[i-1].AbovePromptTokens {
			return m, fmt.Errorf("tiers[%d]: abovePromptTokens must increase from one tier to the next", i)
		}
		p.Tiers = append(p.Tiers, t)
	}
	m.Price = p
	for i, a := range fm.Aliases {
		a = canonical(a)
		if a == "" {
			return m, fmt.Errorf("aliases[%d]: empty alias", i)
		}
		m.Aliases = append(m.Aliases, a)
	}
	return m, nil
}

// buildTier fills a tier's missing cache prices from the tier's own input
// price (a long-context tier scales every input rate).
func buildTier(ft fileTier) (Tier, error) {
	if ft.AbovePromptTokens == nil || *ft.AbovePromptTokens <= 0 {
		return Tier{}, errors.New("abovePromptTokens is required and must be positive")
	}
	if ft.Input == nil || ft.Output == nil {
		return Tier{}, errors.New("input and output are required")
	}
	t := Tier{AbovePromptTokens: *ft.AbovePromptTokens, Input: *ft.Input, Output: *ft.Output}
	t.CachedInput = orDefault(ft.CachedInput, t.Input)
	t.CacheWrite = orDefault(ft.CacheWrite, t.Input)
	return t, checkPrices(t.Input, t.Output, t.CachedInput, t.CacheWrite)
}

// checkPrices reports the first of the four prices (in this order) that is not
// finite, negative, or above maxPrice.
func checkPrices(input, output, cachedInput, cacheWrite float64) error {
	for _, f := range []struct {
		name string
		v    float64
	}{{"input", input}, {"output", output}, {"cachedInput", cachedInput}, {"cacheWrite", cacheWrite}} {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) || f.v < 0 || f.v > maxPrice {
			return fmt.Errorf("%s: %v is not a price (want 0 <= USD per million tokens <= %d)", f.name, f.v, maxPrice)
		}
	}
	return nil
}

func orDefault(v *float64, def float64) float64 {
	if v == nil {
		return def
	}
	return *v
}

// indexAliases rebuilds the alias index from the models. Model names win over
// aliases (an alias equal to another model's name is dropped, or rejected when
// both come from the same file); of two equal aliases the later layer wins,
// and two in the same layer are an error.
func (c *Catalog) indexAliases() error {
	names := make([]string, 0, len(c.models))
	for n := range c.models {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		e := c.models[n]
		for _, a := range e.Aliases {
			if a == n {
				continue
			}
			if owner, ok := c.models[a]; ok {
				if owner.layer == e.layer {
					return fmt.Errorf("models.%s: alias %q is the name of another model", n, a)
				}
				continue
			}
			if prev, ok := c.aliases[a]; ok && prev != e {
				switch {
				case prev.layer == e.layer:
					return fmt.Errorf("models.%s: alias %q is also an alias of %q", n, a, prev.Name)
				case prev.layer > e.layer:
					continue
				}
			}
			c.aliases[a] = e
		}
	}
	return nil
}

func canonical(name string) string { return strings.ToLower(strings.TrimSpace(name)) }
