package ratelimit

import (
	"fmt"
	"sort"
	"strings"
)

// ModelMatcher picks at most one model rule for a model name: an exact match
// wins over a prefix match ("gpt-4*"), and the longest prefix wins among
// prefixes. Immutable; safe for concurrent use.
type ModelMatcher struct {
	exact    map[string]int
	prefixes []prefixRule
}

type prefixRule struct {
	prefix string
	rule   int
}

// NewModelMatcher indexes matches (rule i is matches[i]). A trailing "*" makes
// a prefix; "*" elsewhere, empty or duplicate matches are errors naming the index.
func NewModelMatcher(matches []string) (*ModelMatcher, error) {
	m := &ModelMatcher{exact: map[string]int{}}
	seen := map[string]bool{}
	for i, s := range matches {
		if s == "" {
			return nil, fmt.Errorf("rule %d: match must not be empty", i)
		}
		if seen[s] {
			return nil, fmt.Errorf("rule %d: match %q is listed twice", i, s)
		}
		seen[s] = true
		p, isPrefix := strings.CutSuffix(s, "*")
		if strings.Contains(p, "*") {
			return nil, fmt.Errorf("rule %d: match %q: \"*\" is only allowed at the end", i, s)
		}
		if isPrefix {
			m.prefixes = append(m.prefixes, prefixRule{p, i})
		} else {
			m.exact[s] = i
		}
	}
	sort.SliceStable(m.prefixes, func(a, b int) bool { return len(m.prefixes[a].prefix) > len(m.prefixes[b].prefix) })
	return m, nil
}

// Match returns the rule index for model, or -1.
func (m *ModelMatcher) Match(model string) int {
	if m == nil {
		return -1
	}
	if i, ok := m.exact[model]; ok {
		return i
	}
	for _, p := range m.prefixes {
		if strings.HasPrefix(model, p.prefix) {
			return p.rule
		}
	}
	return -1
}
