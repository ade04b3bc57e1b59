package tokencount

import (
	"testing"

	"github.com/go-json-experiment/json/jsontext"
)

// FuzzUnescape: on every string literal jsontext accepts (what Parse lets
// through), unescape gives the text jsontext does.
func FuzzUnescape(f *testing.F) {
	for _, s := range []string{``, `plain`, `a\"b\\c\/d`, `\b\f\n\r\t`, `\u0041\u00e9\u20ac`, `\ud83d\ude00 x`, `\u0000`, `tail\\`, `\uD83D\uDE00`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, contents string) {
		lit := `"` + contents + `"`
		want, err := jsontext.AppendUnquote(nil, lit)
		got := unescape(nil, []byte(contents)) // must return on any bytes
		if err != nil {
			return
		}
		if string(got) != string(want) {
			t.Errorf("unescape(%q) = %q, want %q", contents, got, want)
		}
		if v := topLevel([]byte(lit)); v.str() != string(want) {
			t.Errorf("str(%s) = %q, want %q", lit, v.str(), want)
		}
	})
}

func TestWalkMalformed(t *testing.T) {
	for _, b := range []string{`[`, `{"a"`, `{"a":`, `{"a":"b`, `["\"]`, `{"a" "b"}`, `[1,,2]`, `{1:2}`, `"\`, `[{"a":[1,{"b":"]"}]`, `]`, ` `} {
		v := topLevel([]byte(b))
		n := 0
		v.each(func(_, x jval) bool { n++; x.str(); x.get("a"); return true })
		_ = v.get("a").str()
		if n > 4 {
			t.Errorf("%s: %d values", b, n)
		}
	}
}
