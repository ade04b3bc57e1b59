package tokencount

import (
	"bytes"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// jval is one JSON value of a request body, its bytes without surrounding
// whitespace (nil: absent). The estimator walks the parts of a body that
// llmapi.Parse captured and checked (strict JSON, valid UTF-8), so jval only
// finds where values end; on malformed input it gives up early (fewer values,
// never a panic) instead of reporting an error.
//
// It replaces gjson here because gjson scans strings a byte at a time and
// copies the body first: on long prompts that walk cost ten times the strict
// parse (about 5 ms for 1 MiB). Strings are found with bytes.IndexByte, and
// a string without escapes is returned as a view of the body, not a copy.
// Views live as long as the estimate: nothing the counters keep refers to
// them (the caches clone pieces and hash texts).
type jval struct{ b []byte }

// topLevel returns the value b holds (leading whitespace skipped). An object
// or an array runs to the end of b, as gjson.Parse's Raw does.
func topLevel(b []byte) jval {
	i := skipSpace(b, 0)
	if i >= len(b) {
		return jval{}
	}
	if b[i] == '{' || b[i] == '[' {
		return jval{b[i:]}
	}
	if e := valueEnd(b, i); e > i {
		return jval{b[i:e]}
	}
	return jval{}
}

func (v jval) exists() bool   { return len(v.b) > 0 }
func (v jval) isString() bool { return len(v.b) >= 2 && v.b[0] == '"' }
func (v jval) isArray() bool  { return len(v.b) > 0 && v.b[0] == '[' }
func (v jval) isObject() bool { return len(v.b) > 0 && v.b[0] == '{' }
func (v jval) isNumber() bool {
	return len(v.b) > 0 && (v.b[0] == '-' || v.b[0] >= '0' && v.b[0] <= '9')
}

// raw is the value's JSON text.
func (v jval) raw() string { return view(v.b) }

// str is a string value's text, unescaped; "" for any other value.
func (v jval) str() string {
	if !v.isString() {
		return ""
	}
	in := v.b[1 : len(v.b)-1]
	if bytes.IndexByte(in, '\\') < 0 {
		return view(in)
	}
	return view(unescape(make([]byte, 0, len(in)), in))
}

// unescape appends the text of a JSON string's contents (between the quotes)
// to dst. The runs between escapes are copied whole: Parse checked that they
// are valid UTF-8. A \u escape that is half of no surrogate pair becomes
// U+FFFD (Parse refuses those too).
func unescape(dst, in []byte) []byte {
	for {
		i := bytes.IndexByte(in, '\\')
		if i < 0 || i+1 >= len(in) {
			return append(dst, in...)
		}
		dst = append(dst, in[:i]...)
		c := in[i+1]
		in = in[i+2:]
		switch c {
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r, ok := hex4(in)
			if !ok {
				dst = append(dst, '\\', 'u')
				continue
			}
			in = in[4:]
			if utf16.IsSurrogate(r) {
				r2, ok := rune(0), false
				if len(in) >= 6 && in[0] == '\\' && in[1] == 'u' {
					r2, ok = hex4(in[2:])
				}
				if d := utf16.DecodeRune(r, r2); ok && d != utf8.RuneError {
					r, in = d, in[6:]
				} else {
					r = utf8.RuneError
				}
			}
			dst = utf8.AppendRune(dst, r)
		default: // '"', '\\', '/'
			dst = append(dst, c)
		}
	}
}

// hex4 reads the four hex digits of a \u escape.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// each calls fn with every member of an object (its name, its value) or every
// element of an array (an absent name), in order, until fn returns false.
func (v jval) each(fn func(name, val jval) bool) {
	b := v.b
	if !v.isArray() && !v.isObject() {
		return
	}
	object := b[0] == '{'
	for i := 1; ; {
		i = skipSpace(b, i)
		if i >= len(b) || b[i] == ']' || b[i] == '}' {
			return
		}
		var name jval
		if object {
			if b[i] != '"' {
				return
			}
			e := stringEnd(b, i)
			if e < 0 {
				return
			}
			name = jval{b[i:e]}
			if i = skipSpace(b, e); i >= len(b) || b[i] != ':' {
				return
			}
			i = skipSpace(b, i+1)
		}
		e := valueEnd(b, i)
		if e < 0 {
			return
		}
		if !fn(name, jval{b[i:e]}) {
			return
		}
		if i = skipSpace(b, e); i < len(b) && b[i] == ',' {
			i++
		}
	}
}

// get returns the first member of an object named name (absent: jval{}).
func (v jval) get(name string) jval {
	var found jval
	v.each(func(k, val jval) bool {
		if k.str() == name {
			found = val
			return false
		}
		return true
	})
	return found
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// valueEnd returns the index just past the value starting at b[i], or -1
// when b ends first.
func valueEnd(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		return stringEnd(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); {
			switch b[j] {
			case '"':
				if j = stringEnd(b, j); j < 0 {
					return -1
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1
				}
			}
			j++
		}
		return -1
	default: // a number, true, false or null
		j := i
		for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' && b[j] != '\t' && b[j] != '\n' && b[j] != '\r' {
			j++
		}
		return j
	}
}

// stringEnd returns the index just past the string starting at b[i] (a
// quote), or -1 when it is not closed. A quote ends the string when an even
// number of backslashes precedes it; each backslash is looked at by one
// quote at most, so the scan stays linear.
func stringEnd(b []byte, i int) int {
	for j := i + 1; ; {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			return -1
		}
		q := j + k
		n := 0
		for p := q - 1; p > i && b[p] == '\\'; p-- {
			n++
		}
		if n%2 == 0 {
			return q + 1
		}
		j = q + 1
	}
}

// view is b as a string, without a copy: b must not change while the string
// is in use.
func view(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(unsafe.SliceData(b), len(b))
}
