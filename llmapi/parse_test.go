package llmapi

import (
	"fmt"
	"strings"
	"testing"

	"sluice/gwerror"
)

func TestParseAccepts(t *testing.T) {
	for _, tc := range []struct {
		name string
		ep   Endpoint
		body string
		want Request // the fields compared: Model, Stream, ClientIncludeUsage, MaxTokens(Field), N, Prompts
	}{
		{"chat", ChatCompletions, `{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}`,
			Request{Model: "gpt-4o", N: 1, Prompts: 1}},
		{"chat stream usage", ChatCompletions, `{"model":"m","stream":true,"stream_options":{"include_usage":true,"x":1}}`,
			Request{Model: "m", Stream: true, ClientIncludeUsage: true, N: 1, Prompts: 1}},
		{"chat max_tokens n", ChatCompletions, `{"model":"m","max_tokens":5,"n":3}`,
			Request{Model: "m", MaxTokens: 5, MaxTokensField: "max_tokens", N: 3, Prompts: 1}},
		{"chat max_completion_tokens", ChatCompletions, `{"model":"m","max_completion_tokens":7}`,
			Request{Model: "m", MaxTokens: 7, MaxTokensField: "max_completion_tokens", N: 1, Prompts: 1}},
		{"null means absent", ChatCompletions, `{"model":"m","stream":null,"stream_options":null,"n":null,"max_tokens":null,"max_completion_tokens":4}`,
			Request{Model: "m", MaxTokens: 4, MaxTokensField: "max_completion_tokens", N: 1, Prompts: 1}},
		{"include_usage null", ChatCompletions, `{"model":"m","stream_options":{"include_usage":null}}`,
			Request{Model: "m", N: 1, Prompts: 1}},
		{"the bounds", ChatCompletions, fmt.Sprintf(`{"model":"m","max_tokens":%d,"n":%d}`, MaxOutputTokensBound, MaxN),
			Request{Model: "m", MaxTokens: MaxOutputTokensBound, MaxTokensField: "max_tokens", N: MaxN, Prompts: 1}},
		{"escaped names are the names", ChatCompletions, `{"mod\u0065l":"m","max\u005ftokens":3}`,
			Request{Model: "m", MaxTokens: 3, MaxTokensField: "max_tokens", N: 1, Prompts: 1}},
		{"completions one prompt", Completions, `{"model":"m","prompt":"hello","max_tokens":4}`,
			Request{Model: "m", MaxTokens: 4, MaxTokensField: "max_tokens", N: 1, Prompts: 1}},
		{"completions batch", Completions, `{"model":"m","prompt":["a","b","c"],"max_tokens":4,"n":2}`,
			Request{Model: "m", MaxTokens: 4, MaxTokensField: "max_tokens", N: 2, Prompts: 3}},
		{"completions token ids", Completions, `{"model":"m","prompt":[1,2,3]}`,
			Request{Model: "m", N: 1, Prompts: 1}},
		{"completions token-id batch", Completions, `{"model":"m","prompt":[[1,2],[3],[]]}`,
			Request{Model: "m", N: 1, Prompts: 3}},
		{"completions no prompt", Completions, `{"model":"m"}`, Request{Model: "m", N: 1, Prompts: 1}},
		{"completions max batch", Completions, `{"model":"m","prompt":[` + strings.Repeat(`"a",`, MaxPrompts-1) + `"a"]}`,
			Request{Model: "m", N: 1, Prompts: MaxPrompts}},
		{"embeddings batch", Embeddings, `{"model":"m","input":["a","b"]}`, Request{Model: "m", N: 1, Prompts: 2}},
		{"responses", Responses, `{"model":"m","input":"hi","max_output_tokens":9}`,
			Request{Model: "m", MaxTokens: 9, MaxTokensField: "max_output_tokens", N: 1, Prompts: 1}},
		{"responses input list is one prompt", Responses, `{"model":"m","input":[{"role":"user","content":"a"},{"role":"user","content":"b"}]}`,
			Request{Model: "m", N: 1, Prompts: 1}},
		{"messages", Messages, `{"model":"claude","max_tokens":100,"system":"s","messages":[]}`,
			Request{Model: "claude", MaxTokens: 100, MaxTokensField: "max_tokens", N: 1, Prompts: 1}},
		{"big object", ChatCompletions, `{"model":"m","metadata":{` + manyNames(40) + `}}`, Request{Model: "m", N: 1, Prompts: 1}},
		{"whitespace", ChatCompletions, " \n{ \"model\" :\t\"m\" , \"n\" : 2 }\r\n", Request{Model: "m", N: 2, Prompts: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, gerr := Parse(tc.ep, []byte(tc.body))
			if gerr != nil {
				t.Fatalf("refused: %v", gerr)
			}
			got := Request{Model: r.Model, Stream: r.Stream, ClientIncludeUsage: r.ClientIncludeUsage,
				MaxTokens: r.MaxTokens, MaxTokensField: r.MaxTokensField, N: r.N, Prompts: r.Prompts}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
			if string(r.Raw) != tc.body {
				t.Fatalf("Raw is not the body")
			}
		})
	}
}

func manyNames(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"k%d":%d`, i, i)
	}
	return b.String()
}

func TestParseCapturesPromptMaterial(t *testing.T) {
	body := `{"model":"m", "messages" : [{"role":"user","content":"hi"}] ,"system":"s","tools":[{"type":"function"}],` +
		`"instructions":"i","input":{"a":1},"prompt":null}`
	r, gerr := Parse(ChatCompletions, []byte(body))
	if gerr != nil {
		t.Fatal(gerr)
	}
	for field, got := range map[string]string{
		"messages": string(r.Messages), "system": string(r.System), "tools": string(r.Tools),
		"instructions": string(r.Instructions), "input": string(r.Input), "prompt": string(r.Prompt),
	} {
		want := map[string]string{"messages": `[{"role":"user","content":"hi"}]`, "system": `"s"`, "tools": `[{"type":"function"}]`,
			"instructions": `"i"`, "input": `{"a":1}`, "prompt": `null`}[field]
		if got != want {
			t.Errorf("%s = %q, want %q", field, got, want)
		}
	}
	r, gerr = Parse(ChatCompletions, []byte(`{"model":"m"}`))
	if gerr != nil || r.Messages != nil || r.Prompt != nil {
		t.Fatalf("absent fields: %v %+v", gerr, r)
	}
}

func TestParseRefuses(t *testing.T) {
	const (
		jsonErr = gwerror.CodeInvalidJSON
		reqErr  = gwerror.CodeInvalidRequest
		model   = gwerror.CodeMissingModel
	)
	for _, tc := range []struct {
		name  string
		ep    Endpoint
		body  string
		code  string
		param string
		msg   string // a part of the message
	}{
		{"empty", ChatCompletions, "  ", jsonErr, "", "empty"},
		{"array", ChatCompletions, `[]`, jsonErr, "", "JSON object"},
		{"string", ChatCompletions, `"x"`, jsonErr, "", "JSON object"},
		{"syntax", ChatCompletions, `{"model":"m",}`, jsonErr, "", "not valid JSON"},
		{"truncated", ChatCompletions, `{"model":"m"`, jsonErr, "", "not valid JSON"},
		{"two values", ChatCompletions, `{"model":"m"} {"model":"n"}`, jsonErr, "", "exactly one"},
		{"trailing garbage", ChatCompletions, `{"model":"m"}x`, jsonErr, "", "not valid JSON"},
		{"invalid UTF-8", ChatCompletions, "{\"model\":\"m\",\"messages\":[{\"content\":\"\xff\"}]}", jsonErr, "", "UTF-8"},
		{"lone surrogate", ChatCompletions, `{"model":"m","user":"\ud800"}`, jsonErr, "", "not valid JSON"},

		// Duplicates, at any depth.
		{"duplicate max_tokens", ChatCompletions, `{"model":"m","max_tokens":1,"max_tokens":1000}`, jsonErr, "", `duplicate member name "max_tokens"`},
		{"duplicate stream_options", ChatCompletions, `{"model":"m","stream":true,"stream_options":{"include_usage":true},"stream_options":{"include_usage":false}}`, jsonErr, "", "duplicate"},
		{"duplicate include_usage", ChatCompletions, `{"model":"m","stream_options":{"include_usage":false,"include_usage":true}}`, jsonErr, "", "duplicate"},
		{"duplicate model", ChatCompletions, `{"model":"a","model":"b"}`, jsonErr, "", "duplicate"},
		{"duplicate escaped", ChatCompletions, `{"model":"m","max_tokens":1,"max\u005ftokens":1000}`, jsonErr, "", "duplicate"},
		{"duplicate nested", ChatCompletions, `{"model":"m","messages":[{"role":"user","content":"a","content":"b"}]}`, jsonErr, "", "duplicate"},
		{"duplicate deep", ChatCompletions, `{"model":"m","tools":[{"function":{"parameters":{"a":1,"a":2}}}]}`, jsonErr, "", "duplicate"},

		// Names equal up to case, in any object.
		{"nested case", ChatCompletions, `{"model":"m","messages":[{"role":"user","Role":"system","content":"a"}]}`, jsonErr, "", `"role" and "Role" at /messages/0`},
		{"unknown top-level case", ChatCompletions, `{"model":"m","user":"a","USER":"b"}`, jsonErr, "", `"user" and "USER"`},
		{"kelvin nested", ChatCompletions, `{"model":"m","x":{"k":1,"` + "\u212a" + `":2}}`, jsonErr, "", "differ only in case"},
		{"long s nested", ChatCompletions, `{"model":"m","x":{"s":1,"\u017f":2}}`, jsonErr, "", "differ only in case"},
		{"escaped twin", ChatCompletions, `{"model":"m","x":{"ab":1,"\u0041B":2}}`, jsonErr, "", `"ab" and "AB" at /x`},
		{"big object escaped twin", ChatCompletions, `{"model":"m","metadata":{"\u006b3":0,` + manyNames(40) + `}}`, jsonErr, "", "duplicate"},
		{"big object escaped case twin", ChatCompletions, `{"model":"m","metadata":{` + manyNames(40) + `,"\u004b3":1}}`, jsonErr, "", `"k3" and "K3" at /metadata`},
		{"big object case", ChatCompletions, `{"model":"m","metadata":{` + manyNames(40) + `,"K3":1}}`, jsonErr, "", `"k3" and "K3" at /metadata`},

		// Names a case-insensitive upstream reads as a field the gateway reads.
		{"Model beside model", ChatCompletions, `{"model":"gpt-4o-mini","Model":"gpt-4o"}`, reqErr, "model", `"Model" must be spelled "model"`},
		{"Model alone", ChatCompletions, `{"Model":"gpt-4o"}`, reqErr, "model", "case-sensitive"},
		{"Stream", ChatCompletions, `{"model":"m","Stream":true}`, reqErr, "stream", ""},
		{"N", ChatCompletions, `{"model":"m","N":4}`, reqErr, "n", ""},
		{"MAX_TOKENS", ChatCompletions, `{"model":"m","MAX_TOKENS":1000}`, reqErr, "max_tokens", ""},
		{"Max_Completion_Tokens", ChatCompletions, `{"model":"m","Max_Completion_Tokens":1000}`, reqErr, "max_completion_tokens", ""},
		{"kelvin max_tokens", ChatCompletions, `{"model":"m","max_to` + "\u212a" + `ens":1000}`, reqErr, "max_tokens", ""},
		{"escaped kelvin", ChatCompletions, `{"model":"m","max_to\u212aens":1000}`, reqErr, "max_tokens", ""},
		{"long s stream", ChatCompletions, `{"model":"m","\u017ftream":true}`, reqErr, "stream", ""},
		{"Messages", ChatCompletions, `{"model":"m","Messages":[]}`, reqErr, "messages", ""},
		{"PROMPT", Completions, `{"model":"m","PROMPT":["a","b"]}`, reqErr, "prompt", ""},
		{"Include_Usage", ChatCompletions, `{"model":"m","stream_options":{"Include_Usage":true}}`, reqErr, "stream_options.include_usage", ""},
		{"Stream_Options", ChatCompletions, `{"model":"m","Stream_Options":{}}`, reqErr, "stream_options", ""},

		// Types.
		{"model missing", ChatCompletions, `{"messages":[]}`, model, "model", "provide a model"},
		{"model null", ChatCompletions, `{"model":null}`, model, "model", "provide a model"},
		{"model empty", ChatCompletions, `{"model":""}`, model, "model", "non-empty string"},
		{"model number", ChatCompletions, `{"model":1}`, model, "model", "non-empty string"},
		{"model object", ChatCompletions, `{"model":{"a":1}}`, model, "model", "non-empty string"},
		{"stream string", ChatCompletions, `{"model":"m","stream":"true"}`, reqErr, "stream", "boolean"},
		{"stream number", ChatCompletions, `{"model":"m","stream":1}`, reqErr, "stream", "boolean"},
		{"stream_options string", ChatCompletions, `{"model":"m","stream_options":"x"}`, reqErr, "stream_options", "object"},
		{"stream_options array", ChatCompletions, `{"model":"m","stream_options":[]}`, reqErr, "stream_options", "object"},
		{"include_usage string", ChatCompletions, `{"model":"m","stream_options":{"include_usage":"yes"}}`, reqErr, "stream_options.include_usage", "boolean"},
		{"max_tokens fraction", ChatCompletions, `{"model":"m","max_tokens":5.0}`, reqErr, "max_tokens", "integer"},
		{"max_tokens exponent", ChatCompletions, `{"model":"m","max_tokens":1e3}`, reqErr, "max_tokens", "integer"},
		{"max_tokens string", ChatCompletions, `{"model":"m","max_tokens":"5"}`, reqErr, "max_tokens", "integer"},
		{"max_tokens bool", ChatCompletions, `{"model":"m","max_tokens":true}`, reqErr, "max_tokens", "integer"},
		{"n fraction", ChatCompletions, `{"model":"m","n":2.5}`, reqErr, "n", "integer"},
		{"n string", ChatCompletions, `{"model":"m","n":"2"}`, reqErr, "n", "integer"},

		// Bounds.
		{"max_tokens 0", ChatCompletions, `{"model":"m","max_tokens":0}`, reqErr, "max_tokens", "from 1 to 10000000"},
		{"max_tokens negative", ChatCompletions, `{"model":"m","max_completion_tokens":-1}`, reqErr, "max_completion_tokens", ""},
		{"max_tokens -0", ChatCompletions, `{"model":"m","max_tokens":-0}`, reqErr, "max_tokens", ""},
		{"max_tokens above bound", ChatCompletions, fmt.Sprintf(`{"model":"m","max_tokens":%d}`, MaxOutputTokensBound+1), reqErr, "max_tokens", ""},
		{"max_tokens int64 max", ChatCompletions, `{"model":"m","max_tokens":9223372036854775807}`, reqErr, "max_tokens", ""},
		{"max_tokens 2^62 n 4", ChatCompletions, `{"model":"m","max_tokens":4611686018427387904,"n":4}`, reqErr, "max_tokens", ""},
		{"max_tokens huge", ChatCompletions, `{"model":"m","max_tokens":` + strings.Repeat("9", 400) + `}`, reqErr, "max_tokens", ""},
		{"max_tokens very negative", ChatCompletions, `{"model":"m","max_tokens":-` + strings.Repeat("9", 40) + `}`, reqErr, "max_tokens", ""},
		{"max_output_tokens 1e400", Responses, `{"model":"m","max_output_tokens":1e400}`, reqErr, "max_output_tokens", ""},
		{"n 0", ChatCompletions, `{"model":"m","n":0}`, reqErr, "n", "from 1 to 128"},
		{"n 129", ChatCompletions, `{"model":"m","n":129}`, reqErr, "n", ""},

		// Output bounds and n belong to their endpoints; one bound at a time.
		{"two bounds", ChatCompletions, `{"model":"m","max_tokens":5,"max_completion_tokens":9}`, reqErr, "max_completion_tokens", "both set"},
		{"two equal bounds", ChatCompletions, `{"model":"m","max_completion_tokens":5,"max_tokens":5}`, reqErr, "max_completion_tokens", "both set"},
		{"max_output_tokens on chat", ChatCompletions, `{"model":"m","max_output_tokens":5}`, reqErr, "max_output_tokens", "not a parameter of /v1/chat/completions"},
		{"max_tokens on responses", Responses, `{"model":"m","max_tokens":5}`, reqErr, "max_tokens", "max_output_tokens"},
		{"max_completion_tokens on messages", Messages, `{"model":"m","max_completion_tokens":5}`, reqErr, "max_completion_tokens", ""},
		{"max_tokens on embeddings", Embeddings, `{"model":"m","max_tokens":5}`, reqErr, "max_tokens", "no output"},
		{"n on messages", Messages, `{"model":"m","n":2}`, reqErr, "n", "not a parameter of /v1/messages"},
		{"n on responses", Responses, `{"model":"m","n":1}`, reqErr, "n", ""},
		{"n on embeddings", Embeddings, `{"model":"m","n":2}`, reqErr, "n", ""},

		// Batches.
		{"empty prompt list", Completions, `{"model":"m","prompt":[]}`, reqErr, "prompt", "empty"},
		{"mixed prompt list", Completions, `{"model":"m","prompt":["a",[1]]}`, reqErr, "prompt", "mix"},
		{"prompt of objects", Completions, `{"model":"m","prompt":[{"a":1}]}`, reqErr, "prompt", ""},
		{"prompt number", Completions, `{"model":"m","prompt":5}`, reqErr, "prompt", ""},
		{"too many prompts", Completions, `{"model":"m","prompt":[` + strings.Repeat(`"a",`, MaxPrompts) + `"a"]}`, reqErr, "prompt", "at most 2048"},
		{"too many token-id prompts", Completions, `{"model":"m","prompt":[` + strings.Repeat(`[1],`, MaxPrompts) + `[1]]}`, reqErr, "prompt", ""},
		{"empty input list", Embeddings, `{"model":"m","input":[]}`, reqErr, "input", ""},
		{"too many inputs", Embeddings, `{"model":"m","input":[` + strings.Repeat(`"a",`, MaxPrompts) + `"a"]}`, reqErr, "input", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, gerr := Parse(tc.ep, []byte(tc.body))
			if gerr == nil {
				t.Fatalf("accepted: %+v", r)
			}
			if gerr.Status != 400 || gerr.Code != tc.code || gerr.Param != tc.param || !strings.Contains(gerr.Message, tc.msg) {
				t.Fatalf("got %d %s param %q: %s\nwant 400 %s param %q containing %q", gerr.Status, gerr.Code, gerr.Param, gerr.Message, tc.code, tc.param, tc.msg)
			}
			wantType := gwerror.TypeInvalidRequest
			if gerr.Type != wantType {
				t.Fatalf("type %s", gerr.Type)
			}
		})
	}
}

func TestAppendFolded(t *testing.T) {
	names := []string{"model", "Model", "MODEL", "max_tokens", "max_to\u212aens", "\u017ftream", "stream", "Straße", "STRASSE",
		"k", "K", "\u212a", "s", "S", "\u017f", "σ", "Σ", "ς", "é", "É", "", "a\u0301", "ǅ", "ǆ", "Ǆ"}
	for _, a := range names {
		for _, b := range names {
			fa, fb := string(appendFolded(nil, []byte(a))), string(appendFolded(nil, []byte(b)))
			if want := strings.EqualFold(a, b); (fa == fb) != want {
				t.Errorf("folded %q = %q, %q = %q; EqualFold %v", a, fa, b, fb, want)
			}
		}
	}
}

func FuzzAppendFolded(f *testing.F) {
	f.Add("max_tokens", "MAX_TO\u212aENS")
	f.Add("\u017f", "S")
	f.Fuzz(func(t *testing.T, a, b string) {
		fa, fb := string(appendFolded(nil, []byte(a))), string(appendFolded(nil, []byte(b)))
		if want := strings.EqualFold(a, b); (fa == fb) != want {
			t.Fatalf("folded %q = %q, %q = %q; EqualFold %v", a, fa, b, fb, want)
		}
	})
}

func TestRewritesKeepOneField(t *testing.T) {
	for _, tc := range []struct {
		name         string
		ep           Endpoint
		body, want   string
		usage        bool
		maxTokens    int64
		wantMaxField string
	}{
		{"replace", ChatCompletions, `{"model":"m","max_tokens":1000}`, `{"model":"m","max_tokens":50}`, false, 50, "max_tokens"},
		{"client field kept", ChatCompletions, `{"model":"m","max_completion_tokens":1000}`, `{"model":"m","max_completion_tokens":50}`, false, 50, "max_completion_tokens"},
		{"escaped field replaced", ChatCompletions, `{"model":"m","max\u005ftokens":1000}`, `{"model":"m","max\u005ftokens":50}`, false, 50, "max_tokens"},
		{"added", ChatCompletions, `{"model":"m"}`, `{"model":"m","max_tokens":50}`, false, 50, "max_tokens"},
		{"null replaced", ChatCompletions, `{"model":"m","max_tokens":null}`, `{"model":"m","max_tokens":50}`, false, 50, "max_tokens"},
		{"responses native", Responses, `{"model":"m"}`, `{"model":"m","max_output_tokens":50}`, false, 50, "max_output_tokens"},
		{"nested field untouched", ChatCompletions, `{"model":"m","x":{"max_tokens":5}}`, `{"model":"m","x":{"max_tokens":5},"max_tokens":50}`, false, 50, "max_tokens"},
		{"usage added", ChatCompletions, `{"model":"m","stream":true}`, `{"model":"m","stream":true,"stream_options":{"include_usage":true}}`, true, 0, ""},
		{"usage null options", ChatCompletions, `{"model":"m","stream_options":null}`, `{"model":"m","stream_options":{"include_usage":true}}`, true, 0, ""},
		{"usage replaced", ChatCompletions, `{"model":"m","stream_options":{"include_usage":false,"x":1}}`, `{"model":"m","stream_options":{"include_usage":true,"x":1}}`, true, 0, ""},
		{"usage escaped replaced", ChatCompletions, `{"model":"m","stream_options":{"include\u005fusage":false}}`, `{"model":"m","stream_options":{"include\u005fusage":true}}`, true, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, gerr := Parse(tc.ep, []byte(tc.body))
			if gerr != nil {
				t.Fatal(gerr)
			}
			if tc.maxTokens > 0 {
				if err := r.SetMaxTokens(tc.maxTokens); err != nil {
					t.Fatal(err)
				}
				if r.MaxTokens != tc.maxTokens || r.MaxTokensField != tc.wantMaxField {
					t.Fatalf("fields %d %q", r.MaxTokens, r.MaxTokensField)
				}
			}
			if tc.usage {
				if err := r.SetIncludeUsage(); err != nil {
					t.Fatal(err)
				}
			}
			if string(r.Raw) != tc.want {
				t.Fatalf("forwarded %s\nwant      %s", r.Raw, tc.want)
			}
			if _, gerr := Parse(tc.ep, r.Raw); gerr != nil {
				t.Fatalf("the forwarded body is refused: %v", gerr)
			}
		})
	}
	r, _ := Parse(Embeddings, []byte(`{"model":"m","input":"x"}`))
	if err := r.SetMaxTokens(5); err == nil {
		t.Fatal("SetMaxTokens on embeddings succeeded")
	}
	r, _ = Parse(ChatCompletions, []byte(`{"model":"m"}`))
	if err := r.SetMaxTokens(0); err == nil {
		t.Fatal("SetMaxTokens(0) succeeded")
	}
}

func TestParseBoundsMembers(t *testing.T) {
	if _, gerr := Parse(ChatCompletions, flatObject(MaxMembers-2)); gerr != nil {
		t.Fatalf("%d members: %v", MaxMembers, gerr)
	}
	_, gerr := Parse(ChatCompletions, flatObject(MaxMembers-1))
	if gerr == nil || gerr.Status != 400 || gerr.Code != gwerror.CodeInvalidJSON || !strings.Contains(gerr.Message, "object members") {
		t.Fatalf("%d members: %v, want 400 invalid_json naming the bound", MaxMembers+1, gerr)
	}
}
