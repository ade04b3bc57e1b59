package deployment

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Error is one problem in a deployment document. Line and Col are 1-based and
// zero when unknown (a document built in memory). Field is the path of the
// offending field, e.g. "routes[0].policies[1].params.totalTokenLimits[0].duration",
// or "" for problems with the document as a whole (syntax errors).
type Error struct {
	File      string
	Line, Col int
	Field     string
	Message   string
}

// Error formats e as "file:line:col: field: message".
func (e *Error) Error() string {
	var b strings.Builder
	file := e.File
	if file == "" {
		file = "deployment"
	}
	b.WriteString(file)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d:%d", e.Line, e.Col)
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Message)
	return b.String()
}

// Errors is every problem found in one document, in file order.
type Errors []*Error

// Error returns one problem per line.
func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap lets errors.As find an individual *Error.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// Err returns es as an error, or nil when es is empty.
func (es Errors) Err() error {
	if len(es) == 0 {
		return nil
	}
	return es
}

// Normalize sorts es by position (problems without a position last, in their
// original order) and drops exact duplicates (an aliased node is decoded once
// per alias).
func (es Errors) Normalize() Errors {
	slices.SortStableFunc(es, func(a, b *Error) int {
		if (a.Line == 0) != (b.Line == 0) {
			if a.Line == 0 {
				return 1
			}
			return -1
		}
		return cmp.Or(cmp.Compare(a.Line, b.Line), cmp.Compare(a.Col, b.Col))
	})
	out := make(Errors, 0, len(es))
	seen := map[string]bool{}
	for _, e := range es {
		key := e.Error()
		if seen[key] {
			continue
		}
		seen[key] = true
		out = append(out, e)
	}
	return out
}
