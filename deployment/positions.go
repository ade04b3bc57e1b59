package deployment

import (
	"fmt"
	"strings"
)

// Pos is a 1-based line and column in a document's source; zero when
// unknown.
type Pos struct{ Line, Col int }

// Place is where a field sits in the source: the key of a mapping entry
// (HasKey) and the value.
type Place struct {
	Key    Pos
	HasKey bool
	Val    Pos
}

// Positions maps field paths ("routes[0].policies[1].params.x") to their
// place in the source. A decoder builds it once; it is read-only afterwards.
type Positions map[string]Place

// At returns the position to report for path. wantKey selects the key of a
// mapping entry (unknown or missing fields) rather than its value (bad
// values). A path with no place reports its closest existing parent; a nil
// Positions reports nothing (the zero Pos).
func (ps Positions) At(path string, wantKey bool) Pos {
	if ps == nil {
		return Pos{}
	}
	if p, ok := ps[path]; ok {
		if (wantKey || p.Val == Pos{}) && p.HasKey {
			return p.Key
		}
		return p.Val
	}
	for path != "" {
		path = ParentField(path)
		if p, ok := ps[path]; ok {
			if p.HasKey {
				return p.Key
			}
			return p.Val
		}
	}
	return Pos{1, 1}
}

// ParentField strips the last ".name" or "[i]" from a field path.
func ParentField(path string) string {
	if strings.HasSuffix(path, "]") {
		if i := strings.LastIndexByte(path, '['); i >= 0 {
			return path[:i]
		}
	}
	if i := strings.LastIndexByte(path, '.'); i >= 0 {
		return path[:i]
	}
	return ""
}

// ChildField is the field path of mapping key key under path.
func ChildField(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// IndexField is the field path of list element i under path.
func IndexField(path string, i int) string { return fmt.Sprintf("%s[%d]", path, i) }

// ErrorAt returns an Error for field of d, positioned from d.Positions (at
// the key when wantKey, else at the value).
func (d *Deployment) ErrorAt(field string, wantKey bool, format string, args ...any) *Error {
	p := d.Positions.At(field, wantKey)
	return &Error{File: d.Source, Line: p.Line, Col: p.Col, Field: field, Message: fmt.Sprintf(format, args...)}
}
