package yamlfile

import (
	"fmt"
	"strings"
)

// LookupFunc resolves an environment variable; ok is false when it is unset.
// os.LookupEnv is one.
type LookupFunc func(name string) (value string, ok bool)

// expandError is a problem with one ${...} reference; Offset is its byte
// offset in the scalar, so multi-line scalars can report the right line.
type expandError struct {
	Offset  int
	Message string
}

// expand replaces every ${NAME} in s with NAME's value. "$${" stands for a
// literal "${"; a "$" not followed by "{" is kept as is. NAME is
// [A-Za-z_][A-Za-z0-9_]*. An unset variable, an empty or invalid name and an
// unterminated reference are errors; a variable set to "" expands to "".
// changed reports whether s contained any reference or escape.
func expand(s string, lookup LookupFunc) (out string, changed bool, errs []expandError) {
	if !strings.Contains(s, "${") {
		return s, false, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		if strings.HasPrefix(s[i:], "$${") {
			b.WriteString("${")
			i += 3
			changed = true
			continue
		}
		if !strings.HasPrefix(s[i:], "${") {
			b.WriteByte(s[i])
			i++
			continue
		}
		changed = true
		end := strings.IndexByte(s[i+2:], '}')
		if end < 0 {
			errs = append(errs, expandError{i, `unterminated "${": write "$${" for a literal "${"`})
			b.WriteString(s[i:])
			break
		}
		name := s[i+2 : i+2+end]
		switch {
		case !validVarName(name):
			errs = append(errs, expandError{i, fmt.Sprintf("invalid environment variable reference %q: want ${NAME} with NAME of letters, digits and _", s[i:i+3+end])})
		default:
			v, ok := lookup(name)
			if !ok {
				errs = append(errs, expandError{i, fmt.Sprintf("environment variable %s is not set", name)})
			}
			b.WriteString(v)
		}
		i += 3 + end
	}
	return b.String(), changed, errs
}

func validVarName(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		switch {
		case c == '_', 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z':
		case '0' <= c && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}
