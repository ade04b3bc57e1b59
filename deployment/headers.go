package deployment

import (
	"fmt"
	"net/textproto"
	"strings"
)

// headerPatternProblem checks a header pattern of forwardHeaders or cors: an
// HTTP field name, or a non-empty prefix of one followed by "*".
func headerPatternProblem(p string) string {
	name, prefix := strings.CutSuffix(p, "*")
	switch {
	case p == "":
		return "empty header name"
	case prefix && name == "":
		return `"*" alone is not allowed: list names, or prefixes like "x-custom-*"`
	case !headerNameRE.MatchString(name) || strings.Contains(name, "*"):
		return fmt.Sprintf("invalid header name %q: a field name, or a prefix of one followed by \"*\"", p)
	}
	return ""
}

// UnforwardableHeader says why the client header name is never sent upstream,
// whatever a provider's forwardHeaders lists, or returns "" when it may be.
// Names are compared without regard to case. The gateway's upstream header
// filter and the validation of forwardHeaders both use it.
func UnforwardableHeader(name string) string {
	switch textproto.CanonicalMIMEHeaderKey(name) {
	case "Authorization", "X-Api-Key", "Proxy-Authorization", "Api-Key":
		return "a client credential: the gateway sends the provider's own (auth)"
	case "Cookie":
		return "cookies belong to the client's session, not to the provider"
	case "Openai-Organization", "Openai-Project":
		return "it would charge the client's choice of OpenAI organization or project to the gateway's credential"
	case "Host", "Content-Length", "Transfer-Encoding", "Connection", "Keep-Alive",
		"Proxy-Connection", "Te", "Trailer", "Upgrade", "Expect":
		return "the gateway frames the upstream request itself"
	case "Accept-Encoding", "Content-Encoding":
		return "the gateway negotiates compression itself and sends a plain body"
	case "X-Request-Id":
		return "the gateway sends its own request id"
	}
	return ""
}

// HeaderValueProblem reports a control character (CR, LF, NUL, tab, DEL, ...)
// or surrounding whitespace in a value sent in a header, without showing the
// value: it is usually a secret, and the classic cause is the newline at the
// end of a file read into an environment variable.
func HeaderValueProblem(v string) string {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c == 0x7f {
			what := fmt.Sprintf("a control character (0x%02x)", c)
			switch c {
			case '\n':
				what = "a line feed (\\n)"
			case '\r':
				what = "a carriage return (\\r)"
			case '\t':
				what = "a tab"
			}
			return fmt.Sprintf("contains %s at byte %d (value not shown); a header cannot carry it and every upstream request would fail: check the variable it comes from (a trailing newline?)", what, i)
		}
	}
	if strings.TrimSpace(v) != v {
		return "has leading or trailing spaces (value not shown): an empty ${VAR}, or a stray space?"
	}
	return ""
}
