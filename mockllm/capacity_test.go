package mockllm

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"sluice/internal/clock"
	"sluice/llmapi"
	"sluice/tokencount"
)

var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// safety bounds waits for things that must happen (a guard against hangs,
// never a measure of speed).
const safety = 10 * time.Second

func TestParseCapacity(t *testing.T) {
	d := DefaultCapacity
	for _, tc := range []struct {
		spec string
		want Capacity
		err  string
	}{
		{spec: "", want: d},
		{spec: "default", want: d},
		{spec: "sequences=4", want: Capacity{Sequences: 4, KVTokens: d.KVTokens, PrefillTPS: d.PrefillTPS, DecodeTPS: d.DecodeTPS}},
		{spec: " sequences=2, kv=0 ,prefill=0,decode=12.5", want: Capacity{Sequences: 2, DecodeTPS: 12.5}},
		{spec: "sequences=0", err: "sequences must be a positive integer"},
		{spec: "kv=-1", err: "kv must be"},
		{spec: "decode=fast", err: "decode must be"},
		{spec: "prefill=+Inf", err: "prefill must be"},
		{spec: "batch=3", err: `unknown key "batch"`},
		{spec: "sequences", err: "not key=value"},
		{spec: "kv=1,kv=2", err: "kv given twice"},
	} {
		got, err := ParseCapacity(tc.spec)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: error %v; want one containing %q", tc.spec, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q = %+v, %v; want %+v", tc.spec, got, err, tc.want)
		}
		if back, err := ParseCapacity(got.String()); err != nil || back != got {
			t.Errorf("%q: String %q does not parse back: %+v %v", tc.spec, got.String(), back, err)
		}
	}
}

func TestEngineQueueIsFIFO(t *testing.T) {
	e := newEngine(Capacity{Sequences: 3, KVTokens: 100}, clock.NewManual(t0))
	ctx := context.Background()
	relA, err := e.acquire(ctx, 1, 60)
	if err != nil {
		t.Fatal(err)
	}
	type got struct {
		name string
		rel  func()
	}
	admitted := make(chan got, 3)
	start := func(name string, ctx context.Context, kv int64) {
		go func() {
			rel, err := e.acquire(ctx, 1, kv)
			if err == nil {
				admitted <- got{name, rel}
			} else {
				admitted <- got{name + " left", nil}
			}
		}()
	}
	bctx, cancelB := context.WithCancel(ctx)
	start("b", bctx, 50) // does not fit beside a
	waitFor(t, func() bool { return e.stats().Waiting == 1 }, "b queued")
	start("c", ctx, 10) // would fit, but does not pass b
	waitFor(t, func() bool { return e.stats().Waiting == 2 }, "c queued")
	select {
	case g := <-admitted:
		t.Fatalf("%s admitted past the head of the queue", g.name)
	default:
	}
	cancelB() // b leaves: c fits now and is admitted
	first, second := <-admitted, <-admitted
	if first.name != "b left" && second.name != "b left" {
		t.Fatalf("admitted %q, %q; want b to leave", first.name, second.name)
	}
	if st := e.stats(); st.Waiting != 0 || st.RunningSequences != 2 || st.KVInUse != 70 || st.MaxWaiting != 2 {
		t.Fatalf("stats %+v", st)
	}
	relA()
	relA() // once only
	if st := e.stats(); st.RunningSequences != 1 || st.KVInUse != 10 {
		t.Fatalf("after release: %+v", st)
	}
	if !e.fitsEver(3, 100) || e.fitsEver(4, 1) || e.fitsEver(1, 101) {
		t.Fatal("fitsEver")
	}
}

func TestEnginePrefillAndDecode(t *testing.T) {
	clk := clock.NewManual(t0)
	e := newEngine(Capacity{Sequences: 4, PrefillTPS: 1000, DecodeTPS: 10}, clk)
	ready := make(chan time.Time, 2)
	for i := 0; i < 2; i++ {
		go func() {
			at, err := e.prefill(context.Background(), 500)
			if err != nil {
				t.Error(err)
			}
			ready <- at
		}()
	}
	ctx, cancel := context.WithTimeout(context.Background(), safety)
	defer cancel()
	if err := clk.WaitPending(ctx, 2); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	a, b := <-ready, <-ready
	if a.After(b) {
		a, b = b, a
	}
	// One prefill stage: the second prompt waits for the first.
	if !a.Equal(t0.Add(500*time.Millisecond)) || !b.Equal(t0.Add(time.Second)) {
		t.Fatalf("prefills ready at %v and %v; want +0.5s and +1s", a.Sub(t0), b.Sub(t0))
	}
	if got := e.tokenAt(a, 3).Sub(a); got != 300*time.Millisecond {
		t.Fatalf("token 3 at +%v; want +300ms", got)
	}
}

// drive advances clk to each timer's due time in turn until ctx ends.
func drive(ctx context.Context, clk *clock.Manual) {
	for clk.WaitPending(ctx, 1) == nil {
		if next, ok := clk.Next(); ok {
			clk.Set(next)
		}
	}
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	for start := time.Now(); !cond(); time.Sleep(time.Millisecond) { // polling, not measuring
		if time.Since(start) > safety {
			t.Fatalf("timed out waiting: %s", what)
		}
	}
}

func getUsage(t *testing.T, srv *httptest.Server) Usage {
	t.Helper()
	resp, err := srv.Client().Get(srv.URL + "/mock/usage")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var u Usage
	if err := json.NewDecoder(resp.Body).Decode(&u); err != nil {
		t.Fatal(err)
	}
	return u
}

func newCapacityServer(t *testing.T, c Capacity, clk clock.Clock) (*httptest.Server, *tokencount.Counter) {
	t.Helper()
	counter := tokencount.New()
	srv := httptest.NewServer(New(Options{Counter: counter, Capacity: &c, Clock: clk}))
	t.Cleanup(srv.Close)
	return srv, counter
}

// TestSaturation: with one sequence, a second stream waits for the first to
// finish: its time to first token is the first's whole generation plus its
// own prefill. With two sequences it does not wait.
func TestSaturation(t *testing.T) {
	const body = `{"model":"gpt-4o","stream":true,"max_tokens":3,"messages":[{"role":"user","content":"tell me about queues"}]}`
	req, _ := llmapi.Parse(llmapi.ChatCompletions, []byte(body))
	for _, seqs := range []int{1, 2} {
		t.Run(map[int]string{1: "saturated", 2: "room for both"}[seqs], func(t *testing.T) {
			clk := clock.NewManual(t0)
			srv, counter := newCapacityServer(t, Capacity{Sequences: seqs, PrefillTPS: 100, DecodeTPS: 10}, clk)
			prompt := counter.EstimatePrompt(req)
			prefill := time.Duration(prompt) * 10 * time.Millisecond // 100 tokens/s

			var wg sync.WaitGroup
			send := func(tenant string) {
				wg.Add(1)
				go func() {
					defer wg.Done()
					resp := post(t, srv, "/v1/chat/completions", body, map[string]string{DefaultUsageHeader: tenant})
					evs, err := readStream(t, resp)
					if err != nil || len(evs) != 5 { // 3 tokens, finish, [DONE]
						t.Errorf("%s: %d events, %v", tenant, len(evs), err)
					}
				}()
			}
			send("A")
			waitFor(t, func() bool { e := getUsage(t, srv).Engine; return e.RunningSequences == 1 && clk.Pending() == 1 }, "A admitted and prefilling")
			send("B")
			if seqs == 1 {
				waitFor(t, func() bool { return getUsage(t, srv).Engine.Waiting == 1 }, "B queued")
			} else {
				waitFor(t, func() bool { return getUsage(t, srv).Engine.RunningSequences == 2 }, "B admitted")
			}
			ctx, cancel := context.WithCancel(context.Background())
			go drive(ctx, clk)
			wg.Wait()
			cancel()
			u := getUsage(t, srv)
			// A's generation: prefill, then tokens at +0, +100ms, +200ms.
			aDone := prefill + 200*time.Millisecond
			wantWait := 0.0
			if seqs == 1 {
				wantWait = aDone.Seconds()
			}
			if u.Engine.QueueWaitSeconds != wantWait || u.Engine.MaxWaiting != map[int]int{1: 1, 2: 0}[seqs] {
				t.Fatalf("engine %+v; want B's queue wait %vs", u.Engine, wantWait)
			}
			// Both streams finish; the clock ends when the last token is out.
			end := clk.Now().Sub(t0)
			want := map[int]time.Duration{1: aDone + prefill + 200*time.Millisecond, 2: 2*prefill + 200*time.Millisecond}[seqs]
			if end != want {
				t.Fatalf("both done at +%v; want +%v", end, want)
			}
			for _, tenant := range []string{"A", "B"} {
				got := u.Tenants[tenant]
				if got.Counts != (Counts{Requests: 1, Completed: 1, PromptTokens: prompt, CompletionTokens: 3}) {
					t.Errorf("%s usage %+v", tenant, got)
				}
			}
			if u.Engine.RunningSequences != 0 || u.Engine.KVInUse != 0 || u.Engine.Admitted != 2 {
				t.Errorf("engine after: %+v", u.Engine)
			}
		})
	}
}

// TestCancelFreesCapacity: a client that goes away frees its sequence (the
// handler ends) and the next request starts; the usage book says what each
// was served.
func TestCancelFreesCapacity(t *testing.T) {
	srv, counter := newCapacityServer(t, Capacity{Sequences: 1}, clock.NewManual(t0))
	const body = `{"model":"gpt-4o","stream":true,"max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`
	req, _ := llmapi.Parse(llmapi.ChatCompletions, []byte(body))
	prompt := counter.EstimatePrompt(req)

	ctx, cancel := context.WithCancel(context.Background())
	hreq, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/v1/chat/completions", strings.NewReader(body))
	hreq.Header.Set(DefaultUsageHeader, "A")
	hreq.Header.Set(HeaderStallAfter, "2") // holds its sequence after two tokens
	resp, err := srv.Client().Do(hreq)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	waitFor(t, func() bool { return getUsage(t, srv).Engine.RunningSequences == 1 }, "A running")

	bDone := make(chan []byte, 1)
	go func() {
		r := post(t, srv, "/v1/chat/completions", strings.Replace(body, `"stream":true,`, "", 1), map[string]string{DefaultUsageHeader: "B"})
		bDone <- readBody(t, r)
	}()
	waitFor(t, func() bool { return getUsage(t, srv).Engine.Waiting == 1 }, "B queued")
	cancel()
	select {
	case b := <-bDone:
		if gjson.GetBytes(b, "usage.completion_tokens").Int() != 4 {
			t.Fatalf("B: %s", b)
		}
	case <-time.After(safety):
		t.Fatal("B never started after A's client left")
	}
	waitFor(t, func() bool { return getUsage(t, srv).Tenants["A"].Requests == 1 }, "A recorded")
	u := getUsage(t, srv)
	if a := u.Tenants["A"]; a.Counts != (Counts{Requests: 1, Cancelled: 1, PromptTokens: prompt, CompletionTokens: 2}) {
		t.Errorf("A usage %+v", a)
	}
	if b := u.Tenants["B"]; b.Counts != (Counts{Requests: 1, Completed: 1, PromptTokens: prompt, CompletionTokens: 4}) {
		t.Errorf("B usage %+v", b)
	}
	if u.Total.Requests != 2 || u.Total.CompletionTokens != 6 {
		t.Errorf("total %+v", u.Total)
	}
}

func TestNeverFits(t *testing.T) {
	srv, _ := newCapacityServer(t, Capacity{Sequences: 2, KVTokens: 100}, clock.NewManual(t0))
	for _, body := range []string{
		`{"model":"gpt-4o","max_tokens":200,"messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"gpt-4o","n":3,"max_tokens":1,"messages":[{"role":"user","content":"hi"}]}`,
	} {
		resp := post(t, srv, "/v1/chat/completions", body, nil)
		b := readBody(t, resp)
		if resp.StatusCode != 400 || gjson.GetBytes(b, "error.code").Str != "context_length_exceeded" {
			t.Errorf("%s: %d %s", body, resp.StatusCode, b)
		}
	}
	if u := getUsage(t, srv); u.Total.Requests != 0 {
		t.Errorf("refused requests counted: %+v", u.Total)
	}
}

// TestUsageWithoutCapacity: the default mock counts too, by header or key,
// and DELETE resets the counts.
func TestUsageWithoutCapacity(t *testing.T) {
	srv, counter := newServer(t)
	body := `{"model":"gpt-4o","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`
	req, _ := llmapi.Parse(llmapi.ChatCompletions, []byte(body))
	prompt := counter.EstimatePrompt(req)
	post(t, srv, "/v1/chat/completions", body, map[string]string{DefaultUsageHeader: "team-a"}).Body.Close()
	readBody(t, post(t, srv, "/v1/chat/completions", body, map[string]string{"Authorization": "Bearer sk-one"}))
	readBody(t, post(t, srv, "/v1/chat/completions", body, map[string]string{"X-Api-Key": "sk-one"}))
	readBody(t, post(t, srv, "/v1/chat/completions", body, nil))
	readBody(t, post(t, srv, "/v1/chat/completions", body, map[string]string{HeaderStatus: "503"}))
	u := getUsage(t, srv)
	one := Counts{Requests: 1, Completed: 1, PromptTokens: prompt, CompletionTokens: 5}
	two := Counts{Requests: 2, Completed: 2, PromptTokens: 2 * prompt, CompletionTokens: 10}
	if len(u.Tenants) != 3 || u.Tenants["team-a"].Counts != one || u.Tenants["anonymous"].Counts != one {
		t.Fatalf("tenants %+v", u.Tenants)
	}
	for k, v := range u.Tenants {
		if strings.HasPrefix(k, "key:") && (v.Counts != two || len(k) != len("key:")+12 || strings.Contains(k, "sk-one")) {
			t.Fatalf("key tenant %q %+v", k, v)
		}
	}
	if u.Engine != nil || u.Total.Requests != 4 {
		t.Fatalf("total %+v, engine %+v", u.Total, u.Engine)
	}
	dreq, _ := http.NewRequest(http.MethodDelete, srv.URL+"/mock/usage", nil)
	resp, err := srv.Client().Do(dreq)
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE: %v %v", resp, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if u := getUsage(t, srv); len(u.Tenants) != 0 || u.Total.Requests != 0 {
		t.Fatalf("after reset: %+v", u)
	}
}

// TestUsageByModel: each tenant's counters are broken down by the model
// served, the breakdown sums to the tenant's counters, and the tenant's own
// fields keep their place in the JSON (existing readers are unaffected).
func TestUsageByModel(t *testing.T) {
	srv, counter := newServer(t)
	tenant := map[string]string{DefaultUsageHeader: "team-a"}
	bodies := map[string]string{
		"gpt-4o":      `{"model":"gpt-4o","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`,
		"gpt-4o-mini": `{"model":"gpt-4o-mini","n":2,"max_tokens":3,"messages":[{"role":"user","content":"hello there"}]}`,
	}
	prompt := map[string]int64{}
	for m, b := range bodies {
		req, _ := llmapi.Parse(llmapi.ChatCompletions, []byte(b))
		prompt[m] = counter.EstimatePrompt(req)
	}
	readBody(t, post(t, srv, "/v1/chat/completions", bodies["gpt-4o"], tenant))
	readBody(t, post(t, srv, "/v1/chat/completions", bodies["gpt-4o"], tenant))
	readBody(t, post(t, srv, "/v1/chat/completions", bodies["gpt-4o-mini"], tenant))
	readBody(t, post(t, srv, "/v1/chat/completions", bodies["gpt-4o-mini"], map[string]string{DefaultUsageHeader: "team-a", HeaderStatus: "500"}))
	u := getUsage(t, srv)
	a := u.Tenants["team-a"]
	want := map[string]Counts{
		"gpt-4o":      {Requests: 2, Completed: 2, PromptTokens: 2 * prompt["gpt-4o"], CompletionTokens: 10},
		"gpt-4o-mini": {Requests: 1, Completed: 1, PromptTokens: prompt["gpt-4o-mini"], CompletionTokens: 6},
	}
	if len(a.Models) != len(want) {
		t.Fatalf("models %+v", a.Models)
	}
	var sum Counts
	for m, w := range want {
		if a.Models[m] != w {
			t.Errorf("%s: %+v, want %+v", m, a.Models[m], w)
		}
		sum.add(w)
	}
	if a.Counts != sum || u.Total != sum {
		t.Errorf("tenant %+v total %+v, want the models' sum %+v", a.Counts, u.Total, sum)
	}
	resp, err := srv.Client().Get(srv.URL + "/mock/usage")
	if err != nil {
		t.Fatal(err)
	}
	raw := readBody(t, resp)
	if gjson.GetBytes(raw, "tenants.team-a.requests").Int() != 3 || gjson.GetBytes(raw, "tenants.team-a.models.gpt-4o.completion_tokens").Int() != 10 {
		t.Fatalf("JSON shape: %s", raw)
	}
}

func TestOutputTokensHeader(t *testing.T) {
	srv, _ := newServer(t)
	hdr := map[string]string{HeaderOutputTokens: "9"}
	b := readBody(t, post(t, srv, "/v1/chat/completions", `{"model":"gpt-4o","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`, hdr))
	if gjson.GetBytes(b, "usage.completion_tokens").Int() != 9 || gjson.GetBytes(b, "choices.0.finish_reason").Str != "stop" {
		t.Fatalf("body %s", b)
	}
	resp := post(t, srv, "/v1/messages", `{"model":"claude-haiku-4-5","stream":true,"max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`, hdr)
	evs, err := readStream(t, resp)
	if err != nil {
		t.Fatal(err)
	}
	deltas := 0
	for _, ev := range evs {
		if ev.Event == "content_block_delta" {
			deltas++
		}
	}
	if deltas != 9 {
		t.Fatalf("%d deltas; want 9", deltas)
	}
	if r := post(t, srv, "/v1/chat/completions", `{"model":"gpt-4o","messages":[]}`, map[string]string{HeaderOutputTokens: "-1"}); r.StatusCode != 400 {
		t.Fatalf("bad header: %d", r.StatusCode)
	}
}

// TestSaturableTextCountsExactly: the mock's output text tokenizes to
// exactly the tokens it reports, so output the gateway counts from a cut
// stream is what the mock generated ("tok " repeated would count n+1).
func TestSaturableTextCountsExactly(t *testing.T) {
	srv, counter := newCapacityServer(t, Capacity{Sequences: 1}, clock.NewManual(t0))
	for _, model := range []string{"gpt-4o-mini", "gpt-4", "claude-haiku-4-5"} {
		resp := post(t, srv, "/v1/chat/completions", `{"model":"`+model+`","stream":true,"max_tokens":7,"messages":[{"role":"user","content":"hi"}]}`, nil)
		evs, err := readStream(t, resp)
		if err != nil {
			t.Fatal(err)
		}
		var text strings.Builder
		for _, ev := range evs {
			text.WriteString(gjson.GetBytes(ev.Data, "choices.0.delta.content").Str)
		}
		if n := counter.Count(model, text.String()); n != 7 {
			t.Errorf("%s: %q counts %d tokens; want 7", model, text.String(), n)
		}
	}
}
