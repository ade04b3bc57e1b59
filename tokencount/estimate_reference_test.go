package tokencount

import (
	"slices"
	"testing"

	"github.com/tidwall/gjson"

	"sluice/llmapi"
)

// refEstimator is the estimator as it was written over gjson: the reference
// the jval walk must agree with on every body llmapi.Parse accepts.
// It gathers into an estimator (texts, fixed costs, text) and has its own walk.
type refEstimator struct{ estimator }

func (e *refEstimator) collect(req *llmapi.Request) {
	switch req.Endpoint {
	case llmapi.ChatCompletions, llmapi.Messages:
		if len(req.System) > 0 {
			e.content(gjson.ParseBytes(req.System))
		}
		e.conversation(gjson.ParseBytes(req.Messages))
	case llmapi.Completions:
		e.promptList(gjson.ParseBytes(req.Prompt))
	case llmapi.Embeddings:
		e.promptList(gjson.ParseBytes(req.Input))
	case llmapi.Responses:
		if len(req.Instructions) > 0 {
			e.content(gjson.ParseBytes(req.Instructions))
		}
		in := gjson.ParseBytes(req.Input)
		if in.Type == gjson.String {
			e.fixed += TokensPerMessage + 1 + ReplyPriming // an implicit user message
			e.text(in.Str)
		} else {
			e.conversation(in)
		}
	}
	if len(req.Tools) > 0 {
		if t := gjson.ParseBytes(req.Tools); t.IsArray() || t.IsObject() {
			e.text(t.Raw)
		}
	}
}

// conversation counts an array of messages; anything else is counted as content.
func (e *refEstimator) conversation(msgs gjson.Result) {
	if !msgs.Exists() {
		return
	}
	if !msgs.IsArray() {
		e.content(msgs)
		return
	}
	msgs.ForEach(func(_, m gjson.Result) bool {
		e.fixed += TokensPerMessage
		if !m.IsObject() {
			e.content(m)
			return true
		}
		m.ForEach(func(k, v gjson.Result) bool {
			switch {
			case k.Str == "content":
				e.content(v)
			case v.Type == gjson.String:
				e.text(v.Str)
				if k.Str == "name" {
					e.fixed++
				}
			case v.IsArray() || v.IsObject():
				e.text(v.Raw)
			}
			return true
		})
		return true
	})
	e.fixed += ReplyPriming
}

// content counts a string or an array of content parts.
func (e *refEstimator) content(v gjson.Result) {
	switch {
	case v.Type == gjson.String:
		e.text(v.Str)
	case v.IsArray():
		v.ForEach(func(_, p gjson.Result) bool {
			e.part(p)
			return true
		})
	case v.IsObject():
		e.part(v)
	}
}

func (e *refEstimator) part(p gjson.Result) {
	if p.Type == gjson.String {
		e.text(p.Str)
		return
	}
	if !p.IsObject() {
		return
	}
	typ := p.Get("type").Str
	switch typ {
	case "image_url", "image", "input_image":
		e.fixed += ImagePartTokens
		return
	case "document", "file", "input_file":
		e.fixed += FilePartTokens
		return
	case "input_audio":
		e.text(p.Get("input_audio.transcript").Str)
		return
	}
	if t := p.Get("text"); t.Type == gjson.String {
		e.text(t.Str)
		return
	}
	if typ == "tool_result" {
		e.content(p.Get("content"))
		return
	}
	e.text(p.Raw)
}

// promptList counts a completions prompt or an embeddings input.
func (e *refEstimator) promptList(v gjson.Result) {
	switch {
	case v.Type == gjson.String:
		e.text(v.Str)
	case v.IsArray():
		v.ForEach(func(_, x gjson.Result) bool {
			switch {
			case x.Type == gjson.Number:
				e.fixed++ // a token id
			case x.Type == gjson.String:
				e.text(x.Str)
			case x.IsArray():
				x.ForEach(func(_, _ gjson.Result) bool { e.fixed++; return true })
			}
			return true
		})
	}
}

// estimateBodies are request bodies of every endpoint and shape the rules
// name, with escapes, whitespace, nesting and duplicate-free odd members.
var estimateBodies = []struct {
	ep   llmapi.Endpoint
	body string
}{
	{llmapi.ChatCompletions, `{"model":"gpt-4o","messages":[{"role":"system","content":"You are terse."},{"role":"user","content":"hi \"there\"\n\u00e9\ud83d\ude00 \\ end","name":"bob"}]}`},
	{llmapi.ChatCompletions, "{ \"model\" : \"gpt-4\" ,\n \"messages\" : [ { \"role\" : \"user\" , \"content\" : [ {\"type\":\"text\",\"text\":\"part one\"} , {\"type\":\"image_url\",\"image_url\":{\"url\":\"data:x\"}}, {\"type\":\"input_audio\",\"input_audio\":{\"data\":\"..\",\"transcript\":\"said \\u0041\"}}, {\"type\":\"file\",\"file\":{}}, {\"type\":\"other\",\"x\":[1,2,{\"y\":\"]\"}]} ] } ] , \"tools\" : [ {\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\"}}} ] }"},
	{llmapi.ChatCompletions, `{"model":"gpt-4o","messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\":\"}\"}"}}]},{"role":"tool","tool_call_id":"c1","content":"42"}]}`},
	{llmapi.ChatCompletions, `{"model":"gpt-4o","messages":["a bare string",42,true,null,{"role":"user","content":{"type":"text","text":"an object content"}}]}`},
	{llmapi.Messages, `{"model":"claude-sonnet-4","max_tokens":10,"system":[{"type":"text","text":"sys \\\\ \\\" x"}],"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"result"}]},{"type":"document","source":{}},{"type":"tool_use","id":"t2","name":"g","input":{"q":"\\"}}]}]}`},
	{llmapi.Messages, `{"model":"claude-sonnet-4","max_tokens":10,"system":"plain system","messages":[{"role":"user","content":"x"}]}`},
	{llmapi.Messages, `{"model":"claude-sonnet-4","max_tokens":10,"messages":[{"role":"user","content":[{"text":"text first","type":"text"},{"content":"content first","type":"tool_result","tool_use_id":"t"},{"t\u0079pe":"image"},{"input_audio":{"transcript":"heard"},"type":"input_audio"},{"type":7,"text":{"not":"a string"}}]}]}`},
	{llmapi.Completions, `{"model":"gpt-3.5-turbo-instruct","prompt":["one","two \n\t"]}`},
	{llmapi.Completions, `{"model":"gpt-3.5-turbo-instruct","prompt":[[1,2,3], [4] ]}`},
	{llmapi.Completions, `{"model":"gpt-3.5-turbo-instruct","prompt":[ 1 ,2,3]}`},
	{llmapi.Completions, `{"model":"gpt-3.5-turbo-instruct","prompt":"just a prompt"}`},
	{llmapi.Embeddings, `{"model":"text-embedding-3-small","input":[[1,2],[3]]}`},
	{llmapi.Embeddings, `{"model":"text-embedding-3-small","input":["a","b\u0000c"]}`},
	{llmapi.Responses, `{"model":"gpt-4.1","instructions":"be brief","input":"a string input"}`},
	{llmapi.Responses, `{"model":"gpt-4.1","input":[{"role":"user","content":[{"type":"input_text","text":"hello"},{"type":"input_image","image_url":"u"},{"type":"input_file","file_id":"f"}]},{"type":"function_call_output","call_id":"c","output":"out"}]}`},
}

// checkSameWalk fails t unless the jval walk gathers from req the texts and
// fixed costs the gjson walk does.
func checkSameWalk(t *testing.T, req *llmapi.Request, body string) {
	t.Helper()
	var ref refEstimator
	ref.collect(req)
	var got estimator
	got.collect(req)
	if got.fixed != ref.fixed || !slices.Equal(got.texts, ref.texts) {
		t.Errorf("%s\n got  fixed %d, texts %q\n want fixed %d, texts %q", body, got.fixed, got.texts, ref.fixed, ref.texts)
	}
}

func TestEstimateMatchesGjsonWalk(t *testing.T) {
	for _, tc := range estimateBodies {
		req, gerr := llmapi.Parse(tc.ep, []byte(tc.body))
		if gerr != nil {
			t.Fatalf("parse %s: %v", tc.body, gerr)
		}
		checkSameWalk(t, req, tc.body)
	}
}

// FuzzEstimateMatchesGjsonWalk: on every body the strict parser accepts, the
// jval walk gathers the texts and fixed costs the gjson walk did; on any
// bytes at all, it returns.
func FuzzEstimateMatchesGjsonWalk(f *testing.F) {
	for _, tc := range estimateBodies {
		f.Add(string(tc.ep), tc.body)
	}
	f.Fuzz(func(t *testing.T, ep, body string) {
		var e estimator
		for _, raw := range []string{body, body[:len(body)/2]} { // malformed: must not panic
			e.conversation(topLevel([]byte(raw)))
			e.promptList(topLevel([]byte(raw)))
		}
		if req, gerr := llmapi.Parse(llmapi.Endpoint(ep), []byte(body)); gerr == nil {
			checkSameWalk(t, req, body)
		}
	})
}
