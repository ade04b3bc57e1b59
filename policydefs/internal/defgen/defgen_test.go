package defgen

import "testing"

func TestUnescapeHTML(t *testing.T) {
	tests := []struct{ in, want string }{
		{`"Bearer \u003ckey\u003e"`, `"Bearer <key>"`},
		{`"a \u0026 b"`, `"a & b"`},
		{`"escaped backslash \\u003c stays"`, `"escaped backslash \\u003c stays"`},
		{`"other \u00e9 escapes stay"`, `"other \u00e9 escapes stay"`},
		{`"quote \" then \u003e"`, `"quote \" then >"`},
	}
	for _, tt := range tests {
		if got := string(unescapeHTML([]byte(tt.in))); got != tt.want {
			t.Errorf("unescapeHTML(%s) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

func TestParamsDoc(t *testing.T) {
	tests := []struct{ in, want string }{
		{"Params configures x.", ""},
		{"Params configures x. With no params all is allowed.", "With no params all is allowed."},
		{"Limits requests per window.", "Limits requests per window."},
	}
	for _, tt := range tests {
		if got := paramsDoc(tt.in); got != tt.want {
			t.Errorf("paramsDoc(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
