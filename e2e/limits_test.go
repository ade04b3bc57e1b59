package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"sluice/counter"
	"sluice/deployment"
	"sluice/deployment/yamlfile"
	"sluice/gwerror"
	"sluice/gwerror/gwerrortest"
	"sluice/llmapi"
	"sluice/policies/ratelimit"
)

// These tests prove the limit rules of seeds 000 and 001 (DESIGN sections 4-6)
// through the real gateway: requests go client -> gateway -> mock upstream on
// loopback, and the numbers are checked against an independent model of the
// counters. The mock is deterministic: prompt tokens are the gateway
// tokenizer's estimate of the same body, completion tokens are max_tokens per
// choice, so every expected charge is computed before the request is sent.

const (
	policyTokens = "token-based-ratelimit"
	policyCost   = "llm-cost-based-ratelimit"
)

// mCounter models one counter of the store (a fixed window, which is what
// these tests configure: its arithmetic is exact under a frozen clock).
type mCounter struct {
	key    string
	limit  counter.Limit
	policy string
	cost   bool // counts micro-USD
	used   int64
}

// mCharge is what one request does to one counter: reserve est at admission,
// end at final after the request (settled, closed or abandoned).
type mCharge struct {
	c          *mCounter
	est, final int64
}

// firstDenial is the index of the first charge (in chain order) its counter
// cannot afford, -1 when every counter affords it. An earlier instance that
// had admitted the request is released, so denials charge nothing.
func firstDenial(ch []mCharge) int {
	for i, x := range ch {
		if x.c.used+x.est > x.c.limit.Max {
			return i
		}
	}
	return -1
}

// answer is what a client saw.
type answer struct {
	status     int
	header     http.Header
	prompt     int64 // usage of a 200 body
	completion int64
	code, typ  string // envelope of an error
}

// chat sends req as app to the route at ctxPath: with the openai-go client
// when app is set, as a raw request without credentials otherwise.
func (e *limitsEnv) chat(ctxPath, app string, req chatReq, hdr map[string]string) answer {
	e.t.Helper()
	if app == "" {
		resp, body := e.mustSend(ctxPath+"/v1/chat/completions", "", req.body(), hdr)
		a := answer{status: resp.StatusCode, header: resp.Header}
		if resp.StatusCode == http.StatusOK {
			a.prompt, a.completion = chatUsage(e.t, body)
		} else {
			env := gwerrortest.MustOpenAI(e.t, body)
			a.code, a.typ = env.Code, env.Type
		}
		return a
	}
	var opts []option.RequestOption
	for k, v := range hdr {
		opts = append(opts, option.WithHeader(k, v))
	}
	var raw *http.Response
	opts = append(opts, option.WithResponseInto(&raw))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl := e.client(ctxPath, app)
	out, err := cl.Chat.Completions.New(ctx, req.params(), opts...)
	if err != nil {
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) {
			e.t.Fatalf("chat %s as %s: %v", ctxPath, app, err)
		}
		return answer{status: apiErr.StatusCode, header: apiErr.Response.Header, code: apiErr.Code, typ: apiErr.Type}
	}
	return answer{status: raw.StatusCode, header: raw.Header, prompt: out.Usage.PromptTokens, completion: out.Usage.CompletionTokens}
}

// retryAfterWindow is the Retry-After a denial by a fixed window must carry:
// the seconds until the window ends, rounded up.
func (e *limitsEnv) retryAfterWindow(l counter.Limit) string {
	_, end := counter.WindowStart(l.Algorithm, l.Period, e.Clock.Now())
	d := end.Sub(e.Clock.Now())
	return strconv.FormatInt(int64((d+time.Second-1)/time.Second), 10)
}

// step sends one request whose charges are ch and checks, against the model:
// admitted or denied (and by which counter, with which code, headers and
// Retry-After); on success the usage and the tightest x-ratelimit-* headers;
// then that every counter in the store holds exactly the model's usage, i.e.
// each instance charged the request once. It reports whether it was admitted.
func (e *limitsEnv) step(label, ctxPath, app string, req chatReq, prompt int64, ch []mCharge) bool {
	e.t.Helper()
	d := firstDenial(ch)
	a := e.chat(ctxPath, app, req, nil)
	if d < 0 {
		if a.status != http.StatusOK {
			e.t.Fatalf("%s: status %d (%s), want 200", label, a.status, a.code)
		}
		if a.prompt != prompt || a.completion != req.completion() {
			e.t.Fatalf("%s: usage %d+%d, want %d+%d (the mock is deterministic)", label, a.prompt, a.completion, prompt, req.completion())
		}
		wantTok, wantCost := int64(-1), int64(-1)
		var tightTok *mCounter
		for _, x := range ch {
			rem := max(x.c.limit.Max-x.c.used-x.est, 0)
			w := &wantTok
			if x.c.cost {
				w = &wantCost
			}
			if *w < 0 || rem < *w {
				*w = rem
				if !x.c.cost {
					tightTok = x.c
				}
			}
		}
		got := readRateHeaders(a.header)
		if got.RemainingTokens != wantTok || got.CostRemainingMicros != wantCost {
			e.t.Fatalf("%s: x-ratelimit remaining tokens %d, cost %d micro-USD; want %d, %d (the tightest counter after the reservation)",
				label, got.RemainingTokens, got.CostRemainingMicros, wantTok, wantCost)
		}
		if tightTok != nil {
			if got.LimitTokens != tightTok.limit.Max {
				e.t.Fatalf("%s: x-ratelimit-limit-tokens %d, want %d", label, got.LimitTokens, tightTok.limit.Max)
			}
			_, end := counter.WindowStart(tightTok.limit.Algorithm, tightTok.limit.Period, e.Clock.Now())
			if want := ratelimit.ResetString(end.Sub(e.Clock.Now())); got.ResetTokens != want {
				e.t.Fatalf("%s: x-ratelimit-reset-tokens %q, want %q (until the window ends)", label, got.ResetTokens, want)
			}
		}
		for _, x := range ch {
			if !x.c.cost {
				continue
			}
			// llm-cost tells the client the cost the budgets settle with.
			usd, err := strconv.ParseFloat(a.header.Get("X-Sluice-Cost-Usd"), 64)
			if got := int64(math.Ceil(usd*1e6 - 1e-9)); err != nil || got != x.final {
				e.t.Fatalf("%s: X-Sluice-Cost-Usd %q (%d micro-USD), want %d", label, a.header.Get("X-Sluice-Cost-Usd"), got, x.final)
			}
		}
		for _, x := range ch {
			x.c.used += x.final
		}
	} else {
		den := ch[d].c
		code := gwerror.CodeRateLimitExceeded
		if den.cost || den.limit.Period >= 24*time.Hour {
			code = gwerror.CodeBudgetExceeded
		}
		if a.status != http.StatusTooManyRequests || a.code != code || a.typ != gwerror.TypeRateLimit {
			e.t.Fatalf("%s: status %d code %q type %q, want 429 %s rate_limit_error (denied by %s)", label, a.status, a.code, a.typ, code, den.key)
		}
		if got := a.header.Get(gwerror.HeaderErrorCode); got != code {
			e.t.Fatalf("%s: %s = %q, want %q", label, gwerror.HeaderErrorCode, got, code)
		}
		if got := deniedBy(a.header); got != den.policy {
			e.t.Fatalf("%s: %s = %q, want %q", label, gwerror.HeaderPolicy, got, den.policy)
		}
		if got, want := a.header.Get("Retry-After"), e.retryAfterWindow(den.limit); got != want {
			e.t.Fatalf("%s: Retry-After %q, want %q (until the window ends)", label, got, want)
		}
		got := readRateHeaders(a.header)
		if den.cost && got.CostLimitMicros != den.limit.Max || !den.cost && got.LimitTokens != den.limit.Max {
			e.t.Fatalf("%s: denial headers %+v do not name the denying counter %s (limit %d)", label, got, den.key, den.limit.Max)
		}
	}
	e.waitSettled()
	q := e.quota(ctxPath, app)
	for _, x := range ch {
		if got := e.used(x.c.key, x.c.limit); got != x.c.used {
			e.t.Fatalf("%s: counter %s used %d, want %d", label, x.c.key, got, x.c.used)
		}
		// The caller's quota report agrees with the store.
		if got, ok := q[x.c.key]; !ok || got != x.c.limit.Max-x.c.used {
			e.t.Fatalf("%s: GET /v1/quota reports %s remaining %d (listed %v), want %d; report %v", label, x.c.key, got, ok, x.c.limit.Max-x.c.used, q)
		}
	}
	return d < 0
}

func yamlUSD(micros int64) string {
	return strconv.FormatFloat(float64(micros)/1e6, 'f', -1, 64)
}

// consumerTokenRoute is the YAML of route name at /name over the mock:
// api-key-auth, then one consumer token-based-ratelimit with algorithm and one
// total-token limit of count per duration (a YAML duration such as 1h).
func consumerTokenRoute(name, algorithm string, count int64, duration string) string {
	return fmt.Sprintf(`  - name: %[1]s
    context: /%[1]s
    provider: mock
    policies:
      - {name: api-key-auth, version: v1}
      - name: token-based-ratelimit
        version: v1
        params: {consumerBased: true, algorithm: %[2]s, totalTokenLimits: [{count: %[3]d, duration: %[4]s}]}
`, name, algorithm, count, duration)
}

// TestConsumerLimits walks the runtime flows of seed 001.
func TestConsumerLimits(t *testing.T) {
	const text = "Explain the reserve-then-settle accounting of a gateway in one line."
	tokReq := chatReq{Model: "gpt-4o-mini", Text: text, MaxTokens: 40}
	costReq := chatReq{Model: "gpt-4o", Text: text, MaxTokens: 300}

	t.Run("consumer token limit only", func(t *testing.T) {
		probe := newCalc(t)
		P := probe.estimate(llmapi.ChatCompletions, tokReq.body())
		U := P + tokReq.completion()
		lim := window(2*U+P, time.Hour) // the third request fits exactly
		env := startLimitsEnv(t, deploymentDoc([]string{"app-a", "app-b"}, consumerTokenRoute("c1", "fixed-window", lim.Max, "1h")), nil)
		ca := &mCounter{key: counterKey("c1:app-a", policyTokens, "total", lim), limit: lim, policy: policyTokens}
		cb := &mCounter{key: counterKey("c1:app-b", policyTokens, "total", lim), limit: lim, policy: policyTokens}
		admitted := 0
		for i := range 4 {
			if env.step(fmt.Sprintf("app-a #%d", i+1), "/c1", "app-a", tokReq, P, []mCharge{{ca, P, U}}) {
				admitted++
			}
		}
		if admitted != 3 {
			t.Fatalf("app-a admitted %d requests, want 3", admitted)
		}
		// app-a is spent; app-b has its own counter with the same limit.
		for i := range 3 {
			env.step(fmt.Sprintf("app-b #%d", i+1), "/c1", "app-b", tokReq, P, []mCharge{{cb, P, U}})
		}
		if ca.used != 3*U || cb.used != 3*U {
			t.Fatalf("model: a %d b %d", ca.used, cb.used)
		}
		t.Logf("P=%d M=%d limit=%d: app-a and app-b each admitted 3 (used %d, debt %d), the 4th denied", P, tokReq.completion(), lim.Max, 3*U, 3*U-lim.Max)
	})

	t.Run("backend and consumer token limits", func(t *testing.T) {
		probe := newCalc(t)
		P := probe.estimate(llmapi.ChatCompletions, tokReq.body())
		U := P + tokReq.completion()
		lb, lc := window(3*U, time.Hour), window(2*U, time.Hour)
		env := startLimitsEnv(t, deploymentDoc([]string{"app-a", "app-b"}, fmt.Sprintf(`
  - name: c2
    context: /c2
    provider: mock
    policies:
      - {name: api-key-auth, version: v1}
      - name: token-based-ratelimit
        version: v1
        params: {algorithm: fixed-window, totalTokenLimits: [{count: %d, duration: 1h}]}
      - name: token-based-ratelimit
        version: v1
        params: {consumerBased: true, algorithm: fixed-window, totalTokenLimits: [{count: %d, duration: 1h}]}
`, lb.Max, lc.Max)), nil)
		back := &mCounter{key: counterKey("c2", policyTokens, "total", lb), limit: lb, policy: policyTokens}
		cons := map[string]*mCounter{
			"app-a": {key: counterKey("c2:app-a", policyTokens, "total", lc), limit: lc, policy: policyTokens},
			"app-b": {key: counterKey("c2:app-b", policyTokens, "total", lc), limit: lc, policy: policyTokens},
		}
		seq := []struct {
			app      string
			deniedBy *mCounter // nil: admitted
		}{
			{"app-a", nil}, {"app-a", nil},
			{"app-a", cons["app-a"]}, // consumer spent, backend has room: blocked by the consumer
			{"app-b", nil},
			{"app-b", back}, // backend spent, app-b's consumer has room: blocked by the backend
			{"app-a", back},
		}
		for i, s := range seq {
			ch := []mCharge{{back, P, U}, {cons[s.app], P, U}}
			d := firstDenial(ch)
			if (s.deniedBy == nil) != (d < 0) || d >= 0 && ch[d].c != s.deniedBy {
				t.Fatalf("step %d: the scenario does not exercise the case it names", i+1)
			}
			env.step(fmt.Sprintf("step %d (%s)", i+1, s.app), "/c2", s.app, tokReq, P, ch)
		}
		if back.used != 3*U || cons["app-a"].used != 2*U || cons["app-b"].used != U {
			t.Fatalf("model: backend %d a %d b %d", back.used, cons["app-a"].used, cons["app-b"].used)
		}
		t.Logf("U=%d: backend %d/%d, app-a %d/%d, app-b %d/%d", U, back.used, lb.Max, cons["app-a"].used, lc.Max, cons["app-b"].used, lc.Max)
	})

	t.Run("backend and consumer cost limits with llm-cost", func(t *testing.T) {
		probe := newCalc(t)
		P := probe.estimate(llmapi.ChatCompletions, costReq.body())
		M := costReq.completion()
		R := probe.priceMicros(costReq.Model, P, M)       // the real cost, settled
		estFull := probe.priceMicros(costReq.Model, P, M) // reserveOutput maxTokens (default)
		estPrompt := max(probe.priceMicros(costReq.Model, P, 0), 1)
		lb, lc := window(3*R, 24*time.Hour), window(2*R, 24*time.Hour)
		env := startLimitsEnv(t, deploymentDoc([]string{"app-a", "app-b"}, fmt.Sprintf(`
  - name: c3
    context: /c3
    provider: mock
    policies:
      - {name: api-key-auth, version: v1}
      - name: llm-cost-based-ratelimit
        version: v1
        params: {budgetLimits: [{amount: %s, duration: 1d}]}
      - name: llm-cost-based-ratelimit
        version: v1
        params: {consumerBased: true, reserveOutput: none, budgetLimits: [{amount: %s, duration: 1d}]}
      - {name: llm-cost, version: v1}
`, yamlUSD(lb.Max), yamlUSD(lc.Max))), nil)
		back := &mCounter{key: counterKey("c3", policyCost, "cost", lb), limit: lb, policy: policyCost, cost: true}
		cons := map[string]*mCounter{
			"app-a": {key: counterKey("c3:app-a", policyCost, "cost", lc), limit: lc, policy: policyCost, cost: true},
			"app-b": {key: counterKey("c3:app-b", policyCost, "cost", lc), limit: lc, policy: policyCost, cost: true},
		}
		apps := []string{"app-a", "app-a", "app-a", "app-b", "app-b", "app-a"}
		var admitted []string
		for i, app := range apps {
			ch := []mCharge{{back, estFull, R}, {cons[app], estPrompt, R}}
			if env.step(fmt.Sprintf("step %d (%s)", i+1, app), "/c3", app, costReq, P, ch) {
				admitted = append(admitted, app)
			}
		}
		if got := strings.Join(admitted, ","); got != "app-a,app-a,app-b" {
			t.Fatalf("admitted %s, want app-a,app-a,app-b", got)
		}
		t.Logf("P=%d M=%d cost %d micro-USD (prompt-only estimate %d): backend %d/%d, app-a %d/%d, app-b %d/%d",
			P, M, R, estPrompt, back.used, lb.Max, cons["app-a"].used, lc.Max, cons["app-b"].used, lc.Max)
	})

	t.Run("requests without an application id share routename:default", func(t *testing.T) {
		probe := newCalc(t)
		P := probe.estimate(llmapi.ChatCompletions, costReq.body())
		M := costReq.completion()
		U := P + M
		R := probe.priceMicros(costReq.Model, P, M)
		lb, lc, lcost := window(10*U, time.Hour), window(3*U, time.Hour), window(2*R, 24*time.Hour)
		env := startLimitsEnv(t, deploymentDoc(nil, fmt.Sprintf(`
  - name: c4
    context: /c4
    provider: mock
    policies:
      - name: token-based-ratelimit
        version: v1
        params: {algorithm: fixed-window, totalTokenLimits: [{count: %d, duration: 1h}]}
      - name: token-based-ratelimit
        version: v1
        params: {consumerBased: true, algorithm: fixed-window, totalTokenLimits: [{count: %d, duration: 1h}]}
      - name: llm-cost-based-ratelimit
        version: v1
        params: {consumerBased: true, budgetLimits: [{amount: %s, duration: 1d}]}
      - {name: llm-cost, version: v1}
`, lb.Max, lc.Max, yamlUSD(lcost.Max))), nil)
		back := &mCounter{key: counterKey("c4", policyTokens, "total", lb), limit: lb, policy: policyTokens}
		def := &mCounter{key: counterKey("c4:default", policyTokens, "total", lc), limit: lc, policy: policyTokens}
		defCost := &mCounter{key: counterKey("c4:default", policyCost, "cost", lcost), limit: lcost, policy: policyCost, cost: true}
		n := 0
		for i := range 4 {
			if env.step(fmt.Sprintf("anonymous #%d", i+1), "/c4", "", costReq, P, []mCharge{{back, P, U}, {def, P, U}, {defCost, R, R}}) {
				n++
			}
		}
		// Two admitted; the third is denied by the default cost budget, and the
		// token instances before it were released: backend and default
		// counters are separate and each holds exactly the two requests.
		if n != 2 || back.used != 2*U || def.used != 2*U || defCost.used != 2*R {
			t.Fatalf("admitted %d; backend %d default %d cost %d", n, back.used, def.used, defCost.used)
		}
		t.Logf("U=%d R=%d: backend {c4} %d/%d, {c4:default} tokens %d/%d, cost %d/%d", U, R, back.used, lb.Max, def.used, lc.Max, defCost.used, lcost.Max)
	})
}

// untilFirstEvent reads an SSE body until its first data line.
func untilFirstEvent(r io.Reader) error {
	br := bufio.NewReader(r)
	for {
		line, err := br.ReadString('\n')
		if strings.HasPrefix(line, "data:") {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// clientAction is how a test client behaves.
type clientAction int

const (
	readAll            clientAction = iota // read the whole answer
	cancelAfterFirst                       // stream: hang up after the first event
	cancelAfterArrival                     // hang up once the request reached the upstream (a client timeout)
	cancelAfterHeaders                     // stream: hang up once the response headers arrived
)

// act sends body to path as app and behaves as a says; status 0 means the
// client hung up before a status.
func (e *limitsEnv) act(path, app string, body []byte, hdr map[string]string, a clientAction, id string) (status int, header http.Header, resp []byte, readErr error) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	switch a {
	case cancelAfterArrival:
		h := map[string]string{headerE2EID: id}
		for k, v := range hdr {
			h[k] = v
		}
		go func() {
			if e.Arrivals.wait(ctx, id) == nil {
				cancel()
			}
		}()
		r, b, err := e.send(ctx, path, app, body, h)
		if err == nil {
			return r.StatusCode, r.Header, b, nil
		}
		if !errors.Is(err, context.Canceled) {
			return 0, nil, nil, err
		}
		return 0, nil, nil, nil
	case cancelAfterFirst, cancelAfterHeaders:
		r, err := e.open(ctx, path, app, body, hdr)
		if err != nil {
			return 0, nil, nil, err
		}
		defer r.Body.Close()
		if a == cancelAfterFirst {
			if err := untilFirstEvent(r.Body); err != nil {
				return r.StatusCode, r.Header, nil, err
			}
		}
		cancel()
		return r.StatusCode, r.Header, nil, nil
	}
	r, err := e.open(ctx, path, app, body, hdr)
	if err != nil {
		return 0, nil, nil, err
	}
	defer r.Body.Close()
	b, err := io.ReadAll(r.Body)
	return r.StatusCode, r.Header, b, err
}

// TestSettlementRules proves the seed 000 rules through the gateway, one
// application (hence one counter) per case. The limit reserves the prompt
// only (reserveOutput none), so the possible final charges differ:
// settled = prompt + completion, closed/abandoned = prompt (the estimate), or
// prompt + the output forwarded when a stream delivered some without a usage
// report (counted), released = 0.
func TestSettlementRules(t *testing.T) {
	c := newCalc(t)
	lim := window(1_000_000, time.Hour)
	type ruleCase struct {
		name     string
		route    string
		req      chatReq
		hdr      map[string]string
		act      clientAction
		status   int    // 0: the client hung up first
		kind     string // resolution: settled, closed, abandoned
		counted  string // output text forwarded without a usage report, charged on top of the estimate
		provider string
		attempts float64
		check    func(t *testing.T, h http.Header, body []byte, readErr error)
	}
	base := chatReq{Model: "gpt-4o-mini", Text: "Count these words for the settlement rules.", MaxTokens: 20}
	with := func(f func(*chatReq)) chatReq { r := base; f(&r); return r }
	stream := with(func(r *chatReq) { r.Stream = true })
	cases := []ruleCase{
		{name: "completed body settles with the real usage", route: "/r1", req: base, act: readAll, status: 200, kind: "settled", provider: "mock", attempts: 1},
		{name: "completed n=2 stream settles (client asked for usage)", route: "/r1", req: with(func(r *chatReq) { r.Stream, r.N, r.IncludeUsage = true, 2, true }),
			act: readAll, status: 200, kind: "settled", provider: "mock", attempts: 1},
		{name: "completed stream settles (usage chunk hidden from the client)", route: "/r1", req: stream, act: readAll, status: 200, kind: "settled", provider: "mock", attempts: 1,
			check: func(t *testing.T, _ http.Header, body []byte, _ error) {
				if strings.Contains(string(body), `"prompt_tokens"`) {
					t.Fatalf("the client did not ask for usage but got it:\n%s", body)
				}
			}},
		{name: "upstream 500 after retries keeps the estimate", route: "/r1", req: base, hdr: map[string]string{"x-mock-status": "500"},
			act: readAll, status: 502, kind: "closed", provider: "mock", attempts: 3},
		{name: "upstream 400 keeps the estimate", route: "/r1", req: base, hdr: map[string]string{"x-mock-status": "400"},
			act: readAll, status: 400, kind: "closed", provider: "mock", attempts: 1},
		{name: "upstream 429 is not retried and keeps the estimate", route: "/r1", req: base, hdr: map[string]string{"x-mock-status": "429"},
			act: readAll, status: 429, kind: "closed", provider: "mock", attempts: 1,
			check: func(t *testing.T, h http.Header, body []byte, _ error) {
				if p := h.Get(gwerror.HeaderPolicy); p != "" {
					t.Fatalf("an upstream 429 carries X-Sluice-Policy %q", p)
				}
				if env := gwerrortest.MustOpenAI(t, body); env.Code != "rate_limit_exceeded" {
					t.Fatalf("upstream 429 envelope not passed through: %s", body)
				}
			}},
		{name: "client disconnect mid-stream charges the delivered output", route: "/r1", req: stream,
			hdr: map[string]string{"x-mock-token-delay-ms": "5000"}, act: cancelAfterFirst, status: 200, kind: "abandoned", counted: mockText(1), provider: "mock", attempts: 1},
		{name: "slow first token and a client timeout keep the estimate", route: "/r1", req: base,
			hdr: map[string]string{"x-mock-first-token-delay-ms": "10000"}, act: cancelAfterArrival, status: 0, kind: "abandoned", provider: "mock", attempts: 1},
		{name: "slow first token on a stream and a client hang-up keep the estimate", route: "/r1", req: stream,
			hdr: map[string]string{"x-mock-first-token-delay-ms": "10000"}, act: cancelAfterHeaders, status: 200, kind: "abandoned", provider: "mock", attempts: 1},
		{name: "stream without usage charges the forwarded output", route: "/r1", req: stream, hdr: map[string]string{"x-mock-no-usage": "true"},
			act: readAll, status: 200, kind: "closed", counted: mockText(20), provider: "mock", attempts: 1,
			check: func(t *testing.T, _ http.Header, body []byte, readErr error) {
				if readErr != nil || !strings.Contains(string(body), "[DONE]") {
					t.Fatalf("stream did not complete (%v):\n%s", readErr, body)
				}
			}},
		{name: "body without usage keeps the estimate", route: "/r1", req: base, hdr: map[string]string{"x-mock-no-usage": "true"},
			act: readAll, status: 200, kind: "closed", provider: "mock", attempts: 1},
		{name: "partial n=3 stream charges the forwarded output", route: "/r1", req: with(func(r *chatReq) { r.Stream, r.N, r.MaxTokens = true, 3, 5 }),
			hdr: map[string]string{"x-mock-drop-after": "4"}, act: readAll, status: 200, kind: "closed", counted: mockText(4), provider: "mock", attempts: 1,
			check: func(t *testing.T, _ http.Header, body []byte, _ error) {
				// Whether the cut reaches the client as a broken body is
				// TestUpstreamCutReachesClient's subject; here the stream must
				// at least lack its terminal event.
				if strings.Contains(string(body), "[DONE]") {
					t.Fatalf("a cut stream ended with [DONE]:\n%s", body)
				}
			}},
		{name: "body cut by the upstream keeps the estimate (retried)", route: "/r1", req: base, hdr: map[string]string{"x-mock-drop-after": "0"},
			act: readAll, status: 502, kind: "closed", provider: "mock", attempts: 3},
		{name: "reserved once across a failover", route: "/r2", req: base, act: readAll, status: 200, kind: "settled", provider: "retrying", attempts: 2},
	}
	var apps []string
	for i := range cases {
		apps = append(apps, fmt.Sprintf("rule-%d", i+1))
	}
	chain := fmt.Sprintf(`
    policies:
      - {name: api-key-auth, version: v1}
      - name: token-based-ratelimit
        version: v1
        params: {consumerBased: true, algorithm: fixed-window, totalTokenLimits: [{count: %d, duration: 1h}]}
`, lim.Max)
	env := startLimitsEnv(t, deploymentDoc(apps, "  - name: r1\n    context: /r1\n    provider: mock"+chain+
		"  - name: r2\n    context: /r2\n    provider: retrying"+chain), nil)

	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			app := apps[i]
			route := strings.TrimPrefix(tc.route, "/")
			P := c.estimate(llmapi.ChatCompletions, tc.req.body())
			want := P // the estimate
			if tc.kind == "settled" {
				want = P + tc.req.completion()
			}
			if tc.counted != "" {
				want = P + int64(c.tokens.Count(tc.req.Model, tc.counted))
			}
			before := env.resolutions(route)
			attempts := env.metric("sluice_upstream_attempts_total", map[string]string{"provider": tc.provider})
			admissions := env.metric("sluice_ratelimit_admissions_total", map[string]string{"route": route})
			_, flakyFails := env.Flaky.counts()

			status, h, body, err := env.act(tc.route+"/v1/chat/completions", app, tc.req.body(), tc.hdr, tc.act, app)
			if err != nil && tc.check == nil {
				t.Fatalf("request: %v", err)
			}
			if status != tc.status {
				t.Fatalf("status %d, want %d: %s", status, tc.status, body)
			}
			if tc.check != nil {
				tc.check(t, h, body, err)
			}
			if tc.status == 200 && tc.kind == "settled" && !tc.req.Stream {
				if p, cpl := chatUsage(t, body); p != P || cpl != tc.req.completion() {
					t.Fatalf("usage %d+%d, want %d+%d", p, cpl, P, tc.req.completion())
				}
			}
			env.waitSettled()

			key := counterKey(route+":"+app, policyTokens, "total", lim)
			if got := env.used(key, lim); got != want {
				t.Fatalf("%s used %d, want %d (P=%d, completion=%d, resolution %s)", key, got, want, P, tc.req.completion(), tc.kind)
			}
			after := env.resolutions(route)
			for k := range after {
				d := after[k] - before[k]
				if w := map[bool]float64{true: 1, false: 0}[k == tc.kind]; d != w {
					t.Fatalf("resolutions %s +%v, want +%v (all: before %v after %v)", k, d, w, before, after)
				}
			}
			if d := env.metric("sluice_upstream_attempts_total", map[string]string{"provider": tc.provider}) - attempts; d != tc.attempts {
				t.Fatalf("upstream attempts +%v, want +%v", d, tc.attempts)
			}
			if d := env.metric("sluice_ratelimit_admissions_total", map[string]string{"route": route}) - admissions; d != 1 {
				t.Fatalf("admissions +%v, want +1: one reservation per logical request", d)
			}
			if tc.provider == "retrying" {
				if _, f := env.Flaky.counts(); f-flakyFails != 1 {
					t.Fatalf("the flaky target failed %d attempts, want 1", f-flakyFails)
				}
			}
		})
	}
}

// TestDebtRetryAfter: a response larger than its estimate settles into debt,
// and the next request waits for the debt too.
func TestDebtRetryAfter(t *testing.T) {
	c := newCalc(t)
	req := chatReq{Model: "gpt-4o-mini", Text: "Produce a long answer that overshoots the estimate.", MaxTokens: 200}
	P := c.estimate(llmapi.ChatCompletions, req.body())
	M := req.completion()
	L := P + 50 // the prompt fits, prompt + completion does not
	debt := P + M - L

	t.Run("token bucket", func(t *testing.T) {
		env := startLimitsEnv(t, deploymentDoc([]string{"app-a"}, consumerTokenRoute("d1", "token-bucket", L, "1m")), nil)
		lim := counter.Limit{Algorithm: counter.TokenBucket, Max: L, Period: time.Minute}
		key := counterKey("d1:app-a", policyTokens, "total", lim)
		a := env.chat("/d1", "app-a", req, nil)
		if a.status != 200 || readRateHeaders(a.header).RemainingTokens != L-P {
			t.Fatalf("first request: %d, headers %+v; want 200 with %d remaining", a.status, readRateHeaders(a.header), L-P)
		}
		env.waitSettled()
		if got := env.remaining(key, lim); got != -debt {
			t.Fatalf("after settlement remaining %d, want %d (debt)", got, -debt)
		}
		// Deficit = estimate - level = P + debt; refill L per 60 s.
		wantRA := int64(math.Ceil(float64(P+debt) * 60 / float64(L)))
		a = env.chat("/d1", "app-a", req, nil)
		if a.status != 429 || a.code != gwerror.CodeRateLimitExceeded || a.header.Get("Retry-After") != strconv.FormatInt(wantRA, 10) {
			t.Fatalf("second request: %d %s Retry-After %q; want 429 rate_limit_exceeded Retry-After %d = ceil((%d+%d)*60/%d)",
				a.status, a.code, a.header.Get("Retry-After"), wantRA, P, debt, L)
		}
		if h := readRateHeaders(a.header); h.RemainingTokens != 0 || h.LimitTokens != L {
			t.Fatalf("denial headers %+v, want remaining 0 (in debt) of %d", h, L)
		}
		env.Clock.Advance(time.Duration(wantRA-1) * time.Second)
		if a = env.chat("/d1", "app-a", req, nil); a.status != 429 || a.header.Get("Retry-After") != "1" {
			t.Fatalf("one second early: %d Retry-After %q, want 429 and 1", a.status, a.header.Get("Retry-After"))
		}
		env.Clock.Advance(time.Second)
		if a = env.chat("/d1", "app-a", req, nil); a.status != 200 {
			t.Fatalf("after Retry-After: %d %s, want 200", a.status, a.code)
		}
		t.Logf("P=%d M=%d L=%d/min: debt %d, Retry-After %ds, admitted exactly then", P, M, L, debt, wantRA)
	})

	t.Run("fixed window", func(t *testing.T) {
		env := startLimitsEnv(t, deploymentDoc([]string{"app-a"}, consumerTokenRoute("d2", "fixed-window", L, "1h")), nil)
		lim := window(L, time.Hour)
		key := counterKey("d2:app-a", policyTokens, "total", lim)
		if a := env.chat("/d2", "app-a", req, nil); a.status != 200 {
			t.Fatalf("first request: %d", a.status)
		}
		env.waitSettled()
		if got := env.remaining(key, lim); got != -debt {
			t.Fatalf("remaining %d, want %d", got, -debt)
		}
		a := env.chat("/d2", "app-a", req, nil)
		if a.status != 429 || a.header.Get("Retry-After") != "2400" {
			t.Fatalf("in debt: %d Retry-After %q, want 429 and 2400 (12:20 to 13:00)", a.status, a.header.Get("Retry-After"))
		}
		env.Clock.Advance(2400 * time.Second)
		a = env.chat("/d2", "app-a", req, nil)
		if a.status != 200 || readRateHeaders(a.header).RemainingTokens != L-P {
			t.Fatalf("next window: %d %+v, want 200 with %d remaining (debt does not carry over)", a.status, readRateHeaders(a.header), L-P)
		}
	})
}

// TestDenialEnvelope: a request that could never fit gets no Retry-After; the
// envelope code tells a rate from a budget.
func TestDenialEnvelope(t *testing.T) {
	c := newCalc(t)
	big := chatReq{Model: "gpt-4o", Text: strings.Repeat("far too many words for this limit ", 20), MaxTokens: 100}
	P := c.estimate(llmapi.ChatCompletions, big.body())
	if P <= 50 {
		t.Fatalf("prompt estimate %d too small for the test", P)
	}
	env := startLimitsEnv(t, deploymentDoc([]string{"app-a"}, `
  - name: e1
    context: /e1
    provider: mock
    policies:
      - {name: api-key-auth, version: v1}
      - {name: token-based-ratelimit, version: v1, params: {consumerBased: true, totalTokenLimits: [{count: 50, duration: 1m}]}}
  - name: e2
    context: /e2
    provider: mock
    policies:
      - {name: api-key-auth, version: v1}
      - {name: token-based-ratelimit, version: v1, params: {consumerBased: true, totalTokenLimits: [{count: 50, duration: 1d}]}}
  - name: e3
    context: /e3
    provider: mock
    policies:
      - {name: api-key-auth, version: v1}
      - {name: llm-cost-based-ratelimit, version: v1, params: {consumerBased: true, budgetLimits: [{amount: 0.00001, duration: 1d}]}}
      - {name: llm-cost, version: v1}
`), nil)
	for _, tc := range []struct {
		route, policy, code string
		key                 string
		lim                 counter.Limit
	}{
		{"e1", policyTokens, gwerror.CodeRateLimitExceeded, counterKey("e1:app-a", policyTokens, "total", counter.Limit{Algorithm: counter.TokenBucket, Max: 50, Period: time.Minute}), counter.Limit{Algorithm: counter.TokenBucket, Max: 50, Period: time.Minute}},
		{"e2", policyTokens, gwerror.CodeBudgetExceeded, counterKey("e2:app-a", policyTokens, "total", window(50, 24*time.Hour)), window(50, 24*time.Hour)},
		{"e3", policyCost, gwerror.CodeBudgetExceeded, counterKey("e3:app-a", policyCost, "cost", window(10, 24*time.Hour)), window(10, 24*time.Hour)},
	} {
		t.Run(tc.route, func(t *testing.T) {
			never := env.metric("sluice_ratelimit_denials_total", map[string]string{"route": tc.route, "reason": "exceeds_capacity"})
			resp, body := env.mustSend("/"+tc.route+"/v1/chat/completions", "app-a", big.body(), nil)
			env.waitSettled()
			envl := gwerrortest.MustOpenAI(t, body)
			if resp.StatusCode != 429 || envl.Code != tc.code || envl.Type != gwerror.TypeRateLimit || envl.Param != nil {
				t.Fatalf("%d %+v, want 429 %s rate_limit_error", resp.StatusCode, envl, tc.code)
			}
			if got := resp.Header.Get(gwerror.HeaderErrorCode); got != tc.code {
				t.Fatalf("%s %q", gwerror.HeaderErrorCode, got)
			}
			if got := deniedBy(resp.Header); got != tc.policy {
				t.Fatalf("%s %q, want %s", gwerror.HeaderPolicy, got, tc.policy)
			}
			if ra, ok := resp.Header["Retry-After"]; ok {
				t.Fatalf("Retry-After %q on a request that can never fit", ra)
			}
			if d := env.metric("sluice_ratelimit_denials_total", map[string]string{"route": tc.route, "reason": "exceeds_capacity"}) - never; d != 1 {
				t.Fatalf("exceeds_capacity denials +%v", d)
			}
			if got := env.remaining(tc.key, tc.lim); got != tc.lim.Max {
				t.Fatalf("the denied request charged %s: remaining %d of %d", tc.key, got, tc.lim.Max)
			}
		})
	}
}

// TestLaterDenialCostsNothing: model-access, after the token limits, denies
// the model; the limits' reservations are released in full.
func TestLaterDenialCostsNothing(t *testing.T) {
	c := newCalc(t)
	lim := window(10_000, time.Hour)
	env := startLimitsEnv(t, deploymentDoc([]string{"app-a"}, fmt.Sprintf(`
  - name: m1
    context: /m1
    provider: mock
    policies:
      - {name: api-key-auth, version: v1}
      - {name: token-based-ratelimit, version: v1, params: {algorithm: fixed-window, totalTokenLimits: [{count: %[1]d, duration: 1h}]}}
      - {name: token-based-ratelimit, version: v1, params: {consumerBased: true, algorithm: fixed-window, totalTokenLimits: [{count: %[1]d, duration: 1h}]}}
      - {name: model-access, version: v1, params: {allow: [gpt-4o-mini]}}
`, lim.Max)), nil)
	back, cons := counterKey("m1", policyTokens, "total", lim), counterKey("m1:app-a", policyTokens, "total", lim)

	denied := chatReq{Model: "gpt-4o", Text: "A model this application may not use.", MaxTokens: 10}
	a := env.chat("/m1", "app-a", denied, nil)
	if a.status != http.StatusForbidden || a.code != gwerror.CodeModelNotAllowed {
		t.Fatalf("%d %s, want 403 model_not_allowed", a.status, a.code)
	}
	env.waitSettled()
	if b, k := env.used(back, lim), env.used(cons, lim); b != 0 || k != 0 {
		t.Fatalf("a request model-access denied charged the limits: backend %d, consumer %d", b, k)
	}
	res := env.resolutions("m1")
	if adm := env.metric("sluice_ratelimit_admissions_total", map[string]string{"route": "m1"}); adm != 2 || res["released"] != 2 {
		t.Fatalf("admissions %v resolutions %v; want both limits to reserve and then release", adm, res)
	}

	ok := chatReq{Model: "gpt-4o-mini", Text: "A model it may use.", MaxTokens: 10}
	P := c.estimate(llmapi.ChatCompletions, ok.body())
	if a := env.chat("/m1", "app-a", ok, nil); a.status != 200 {
		t.Fatalf("allowed model: %d %s", a.status, a.code)
	}
	env.waitSettled()
	if b, k := env.used(back, lim), env.used(cons, lim); b != P+10 || k != P+10 {
		t.Fatalf("after an allowed request: backend %d consumer %d, want %d each", b, k, P+10)
	}
}

// invKind is the fault (or none) an invariant request runs into.
type invKind int

const (
	invOK              invKind = iota // completes; settles
	invStatus                         // x-mock-status 500/503 (retried), 429/400; closes
	invSlowCancel                     // slow first token, client gives up; abandons
	invDrop                           // x-mock-drop-after; closes
	invCancelMidStream                // client hangs up after the first event; abandons
	invNoUsage                        // x-mock-no-usage; closes
	numInvKinds
)

var invKindNames = [numInvKinds]string{"ok", "status", "slow-cancel", "drop", "cancel-mid-stream", "no-usage"}

// invReq is one planned request of the invariant test.
type invReq struct {
	id   string
	app  string
	req  chatReq
	kind invKind
	hdr  map[string]string
	P    int64
}

// forwarded is the number of token chunks the gateway forwards to r's client
// without a usage report: they are charged (counted) on top of the estimate.
func (r *invReq) forwarded() int64 {
	if !r.req.Stream {
		return 0
	}
	switch r.kind {
	case invCancelMidStream:
		return 1 // the first token; the next comes 5s later, after the hang-up
	case invDrop:
		n, _ := strconv.ParseInt(r.hdr["x-mock-drop-after"], 10, 64)
		return n // every event before the cut is a token chunk
	case invNoUsage:
		return r.req.completion()
	}
	return 0
}

// invTotals are the final charges one application's counters must hold.
type invTotals struct {
	consTotal, cost                       int64 // consumer instances
	backPrompt, backCompletion, backTotal int64 // backend instance (shared; summed over apps)
}

// TestAccountingInvariant: ~2,000 requests from 100 goroutines over 5
// applications with random faults; afterwards no reservation is open and every
// counter holds exactly the sum of the final charges computed independently
// from the rules (settled = the usage the client saw; closed/abandoned = the
// estimate, or at least the prompt + the output a stream forwarded without a
// usage report).
//
// Chain: a backend token limit on prompt, completion and total with
// reserveOutput none (estimate = prompt; completion reserves 0); a consumer
// total limit with reserveOutput maxTokens (estimate = prompt + max_tokens x n,
// or the prompt alone when the request sets no bound); a consumer cost budget
// (estimate = price of prompt and max_tokens x n); llm-cost. The limits are
// far above the traffic, windows are fixed and the clock frozen, so nothing is
// denied and the arithmetic is exact.
func TestAccountingInvariant(t *testing.T) {
	total, workers := 2000, 100
	if testing.Short() {
		total = 400
	}
	c := newCalc(t)
	apps := []string{"inv-1", "inv-2", "inv-3", "inv-4", "inv-5"}
	big := window(1_000_000_000, time.Hour)
	budget := window(1_000_000_000, 24*time.Hour) // $1000
	env := startLimitsEnv(t, deploymentDoc(apps, `
  - name: inv
    context: /inv
    provider: mock
    policies:
      - {name: api-key-auth, version: v1}
      - name: token-based-ratelimit
        version: v1
        params:
          algorithm: fixed-window
          promptTokenLimits: [{count: 1000000000, duration: 1h}]
          completionTokenLimits: [{count: 1000000000, duration: 1h}]
          totalTokenLimits: [{count: 1000000000, duration: 1h}]
      - name: token-based-ratelimit
        version: v1
        params: {consumerBased: true, reserveOutput: maxTokens, algorithm: fixed-window, totalTokenLimits: [{count: 1000000000, duration: 1h}]}
      - name: llm-cost-based-ratelimit
        version: v1
        params: {consumerBased: true, budgetLimits: [{amount: 1000, duration: 1d}]}
      - {name: llm-cost, version: v1}
`), nil)

	seed := uint64(time.Now().UnixNano())
	t.Logf("plan seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	plan := make([]invReq, total)
	kindWeights := [numInvKinds]int{40, 15, 10, 12, 13, 10}
	pick := func() invKind {
		n := rng.IntN(100)
		for k, w := range kindWeights {
			if n < w {
				return invKind(k)
			}
			n -= w
		}
		return invOK
	}
	for i := range plan {
		r := invReq{id: fmt.Sprintf("inv-%04d", i), app: apps[rng.IntN(len(apps))], kind: pick()}
		r.req = chatReq{
			Model: "gpt-4o",
			Text:  fmt.Sprintf("request %d: %s", i, strings.Repeat("lorem ipsum ", rng.IntN(30))),
			N:     1 + rng.IntN(3),
		}
		if rng.IntN(5) > 0 {
			r.req.MaxTokens = int64(2 + rng.IntN(23))
		}
		r.req.Stream = rng.IntN(2) == 0
		r.req.IncludeUsage = r.req.Stream && rng.IntN(2) == 0
		switch r.kind {
		case invStatus:
			r.hdr = map[string]string{"x-mock-status": []string{"500", "503", "429", "400"}[rng.IntN(4)]}
		case invSlowCancel:
			r.hdr = map[string]string{"x-mock-first-token-delay-ms": "10000"}
		case invDrop:
			// Streams: cut before the last token event (0 = right after the
			// headers); bodies: the connection is cut before any answer.
			r.hdr = map[string]string{"x-mock-drop-after": strconv.FormatInt(rng.Int64N(r.req.completion()), 10)}
		case invCancelMidStream:
			r.req.Stream = true
			r.hdr = map[string]string{"x-mock-token-delay-ms": "5000"}
		case invNoUsage:
			r.hdr = map[string]string{"x-mock-no-usage": "true"}
		}
		r.P = c.estimate(llmapi.ChatCompletions, r.req.body())
		plan[i] = r
	}

	var (
		mu        sync.Mutex
		want      = map[string]*invTotals{}
		backWant  invTotals
		kinds     [numInvKinds]int
		settledN  int
		abandoned int
	)
	for _, a := range apps {
		want[a] = &invTotals{}
	}
	// record adds the request's final charges: real usage when it settled,
	// else each instance's estimate.
	record := func(r *invReq, settled bool, prompt, completion int64) {
		bound := r.req.MaxTokens * int64(r.req.N) // reserveOutput maxTokens; 0 without a bound
		consEst := r.P + bound
		costEst := max(c.priceMicros(r.req.Model, r.P, bound), 1)
		mu.Lock()
		defer mu.Unlock()
		w := want[r.app]
		kinds[r.kind]++
		if settled {
			settledN++
			w.consTotal += prompt + completion
			w.cost += c.priceMicros(r.req.Model, prompt, completion)
			backWant.backPrompt += prompt
			backWant.backCompletion += completion
			backWant.backTotal += prompt + completion
			return
		}
		if r.kind == invSlowCancel || r.kind == invCancelMidStream {
			abandoned++
		}
		// Counted output is a lower bound: each counter keeps its estimate
		// or charges prompt + counted, whichever is more.
		var counted int64
		if k := r.forwarded(); k > 0 {
			counted = int64(c.tokens.Count(r.req.Model, strings.Repeat(" tok", int(k))))
			costEst = max(costEst, c.priceMicros(r.req.Model, r.P, counted))
		}
		w.consTotal += max(consEst, r.P+counted)
		w.cost += costEst
		backWant.backPrompt += r.P
		backWant.backCompletion += counted
		backWant.backTotal += r.P + counted
	}

	run := func(r *invReq) error {
		path := "/inv/v1/chat/completions"
		body := r.req.body()
		switch r.kind {
		case invOK:
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cl := env.client("/inv", r.app)
			if !r.req.Stream {
				out, err := cl.Chat.Completions.New(ctx, r.req.params())
				if err != nil {
					return err
				}
				if out.Usage.PromptTokens != r.P || out.Usage.CompletionTokens != r.req.completion() || len(out.Choices) != max(r.req.N, 1) {
					return fmt.Errorf("usage %d+%d with %d choices, want %d+%d", out.Usage.PromptTokens, out.Usage.CompletionTokens, len(out.Choices), r.P, r.req.completion())
				}
				record(r, true, out.Usage.PromptTokens, out.Usage.CompletionTokens)
				return nil
			}
			st := cl.Chat.Completions.NewStreaming(ctx, r.req.params())
			var tokens, prompt, completion int64
			usageSeen := false
			for st.Next() {
				ch := st.Current()
				for _, choice := range ch.Choices {
					if choice.Delta.Content != "" {
						tokens++
					}
				}
				if len(ch.Choices) == 0 && ch.Usage.TotalTokens > 0 {
					usageSeen = true
					prompt, completion = ch.Usage.PromptTokens, ch.Usage.CompletionTokens
				}
			}
			if err := st.Err(); err != nil {
				return err
			}
			if usageSeen != r.req.IncludeUsage {
				return fmt.Errorf("usage chunk seen %v, asked %v", usageSeen, r.req.IncludeUsage)
			}
			if !usageSeen {
				// Usage hidden from this client: it saw one chunk per token.
				prompt, completion = r.P, tokens
			}
			if prompt != r.P || completion != r.req.completion() || tokens != completion {
				return fmt.Errorf("stream usage %d+%d over %d token chunks, want %d+%d", prompt, completion, tokens, r.P, r.req.completion())
			}
			record(r, true, prompt, completion)
			return nil
		case invStatus:
			status, _, b, err := env.act(path, r.app, body, r.hdr, readAll, r.id)
			if err != nil {
				return err
			}
			want, _ := strconv.Atoi(r.hdr["x-mock-status"])
			if want >= 500 {
				want = http.StatusBadGateway // wrapped: upstream_error naming the status
			}
			if status != want {
				return fmt.Errorf("status %d, want %d: %s", status, want, b)
			}
		case invSlowCancel:
			a := cancelAfterArrival
			if r.req.Stream {
				a = cancelAfterHeaders
			}
			status, _, _, err := env.act(path, r.app, body, r.hdr, a, r.id)
			if err != nil || status != map[bool]int{true: 200, false: 0}[r.req.Stream] {
				return fmt.Errorf("slow first token: status %d, %v", status, err)
			}
		case invDrop:
			status, _, b, err := env.act(path, r.app, body, r.hdr, readAll, r.id)
			if r.req.Stream && (status != 200 || strings.Contains(string(b), "[DONE]")) || !r.req.Stream && (status != 502 || err != nil) {
				return fmt.Errorf("cut upstream: status %d, read error %v: %s", status, err, b)
			}
		case invCancelMidStream:
			status, _, _, err := env.act(path, r.app, body, r.hdr, cancelAfterFirst, r.id)
			if err != nil || status != 200 {
				return fmt.Errorf("mid-stream cancel: status %d, %v", status, err)
			}
		case invNoUsage:
			status, _, b, err := env.act(path, r.app, body, r.hdr, readAll, r.id)
			if err != nil || status != 200 {
				return fmt.Errorf("no usage: status %d, %v", status, err)
			}
			if r.req.Stream && !strings.Contains(string(b), "[DONE]") || !r.req.Stream && !strings.Contains(string(b), `"usage":null`) {
				return fmt.Errorf("no usage: unexpected answer %s", b)
			}
		}
		record(r, false, 0, 0)
		return nil
	}

	start := time.Now()
	work := make(chan *invReq)
	var wg sync.WaitGroup
	var failures atomic.Int64
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range work {
				if err := run(r); err != nil {
					if failures.Add(1) <= 10 {
						t.Errorf("%s (%s, app %s, stream %v, n %d, max_tokens %d, headers %v): %v",
							r.id, invKindNames[r.kind], r.app, r.req.Stream, r.req.N, r.req.MaxTokens, r.hdr, err)
					}
				}
			}
		}()
	}
	for i := range plan {
		work <- &plan[i]
	}
	close(work)
	wg.Wait()
	sent := time.Since(start)
	if failures.Load() > 0 {
		t.Fatalf("%d requests did not behave as planned; the totals below would be meaningless", failures.Load())
	}
	env.waitSettled()
	if open := env.openReservations(); open != 0 {
		t.Fatalf("open reservations %v after the traffic stopped", open)
	}

	for _, a := range apps {
		w := want[a]
		consKey := counterKey("inv:"+a, policyTokens, "total", big)
		costKey := counterKey("inv:"+a, policyCost, "cost", budget)
		if got := env.used(consKey, big); got != w.consTotal {
			t.Errorf("%s: consumer tokens used %d, want %d (diff %d)", a, got, w.consTotal, got-w.consTotal)
		}
		if got := env.used(costKey, budget); got != w.cost {
			t.Errorf("%s: cost used %d micro-USD, want %d (diff %d)", a, got, w.cost, got-w.cost)
		}
	}
	for meter, w := range map[string]int64{"prompt": backWant.backPrompt, "completion": backWant.backCompletion, "total": backWant.backTotal} {
		if got := env.used(counterKey("inv", policyTokens, meter, big), big); got != w {
			t.Errorf("backend %s used %d, want %d (diff %d)", meter, got, w, got-w)
		}
	}
	res := env.resolutions("inv")
	const limitInstances = 3
	if res["settled"] != float64(limitInstances*settledN) || res["abandoned"] != float64(limitInstances*abandoned) ||
		res["closed"] != float64(limitInstances*(total-settledN-abandoned)) || res["released"] != 0 {
		t.Errorf("resolutions %v, want settled %d abandoned %d closed %d released 0 (x%d instances)",
			res, settledN, abandoned, total-settledN-abandoned, limitInstances)
	}
	t.Logf("%d requests (%v) from %d goroutines in %v; settled %d, abandoned %d, closed %d; backend total %d tokens",
		total, kinds, workers, sent.Round(time.Millisecond), settledN, abandoned, total-settledN-abandoned, backWant.backTotal)
}

// TestOverAdmission: 200 goroutines at once against one application's limit.
//
// With exact estimates (reserveOutput maxTokens, so estimate = usage = U) the
// store's atomic all-or-nothing reserve admits exactly floor(L/U) requests and
// the counter never exceeds L.
//
// With reserveOutput none a request reserves only its prompt P and its
// completion M lands at settlement, possibly into debt. Every admitted
// request holds at least P from admission on, so the k-th admission saw
// (k-1)P + P <= L: k <= floor(L/P). The final usage is k(P+M), so the
// overshoot above L is at most the unreserved output of the requests that
// were in flight when the last one was admitted (itself included): at most
// k*M, and k is also at most the number of concurrent clients. The test
// asserts k <= floor(L/P), usage == k(P+M) exactly (each request charged
// once) and usage - L <= M * min(k, 200).
func TestOverAdmission(t *testing.T) {
	const clients = 200
	c := newCalc(t)
	req := chatReq{Model: "gpt-4o-mini", Text: "Many clients racing for one budget.", MaxTokens: 40}
	P := c.estimate(llmapi.ChatCompletions, req.body())
	M := req.completion()
	U := P + M
	exact := window(100*U+U/2, time.Hour)
	loose := window(50*U+U/2, time.Hour)
	env := startLimitsEnv(t, deploymentDoc([]string{"app-a"}, fmt.Sprintf(`
  - name: oa1
    context: /oa1
    provider: mock
    policies:
      - {name: api-key-auth, version: v1}
      - {name: token-based-ratelimit, version: v1, params: {consumerBased: true, reserveOutput: maxTokens, algorithm: fixed-window, totalTokenLimits: [{count: %d, duration: 1h}]}}
  - name: oa2
    context: /oa2
    provider: mock
    policies:
      - {name: api-key-auth, version: v1}
      - {name: token-based-ratelimit, version: v1, params: {consumerBased: true, algorithm: fixed-window, totalTokenLimits: [{count: %d, duration: 1h}]}}
`, exact.Max, loose.Max)), nil)

	burst := func(route string) (admitted int) {
		var ok, denied, other atomic.Int64
		startGate := make(chan struct{})
		var wg sync.WaitGroup
		for range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-startGate
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				// The first-token delay keeps admitted requests in flight
				// while the others are being decided.
				resp, _, err := env.send(ctx, "/"+route+"/v1/chat/completions", "app-a", req.body(),
					map[string]string{"x-mock-first-token-delay-ms": "100"})
				switch {
				case err != nil:
					other.Add(1)
					t.Errorf("%s: %v", route, err)
				case resp.StatusCode == 200:
					ok.Add(1)
				case resp.StatusCode == 429:
					denied.Add(1)
				default:
					other.Add(1)
					t.Errorf("%s: status %d", route, resp.StatusCode)
				}
			}()
		}
		close(startGate)
		wg.Wait()
		env.waitSettled()
		if int(ok.Load()+denied.Load()) != clients {
			t.Fatalf("%s: %d admitted + %d denied of %d", route, ok.Load(), denied.Load(), clients)
		}
		return int(ok.Load())
	}

	t.Run("exact estimates", func(t *testing.T) {
		k := burst("oa1")
		used := env.used(counterKey("oa1:app-a", policyTokens, "total", exact), exact)
		if int64(k) != exact.Max/U || used != int64(k)*U || used > exact.Max {
			t.Fatalf("admitted %d using %d of %d; want exactly %d admitted, never above the limit", k, used, exact.Max, exact.Max/U)
		}
		t.Logf("U=%d L=%d: %d of %d admitted, %d used", U, exact.Max, k, clients, used)
	})
	t.Run("prompt-only estimates", func(t *testing.T) {
		k := int64(burst("oa2"))
		used := env.used(counterKey("oa2:app-a", policyTokens, "total", loose), loose)
		if k > loose.Max/P {
			t.Fatalf("admitted %d > floor(L/P) = %d: admission did not hold the prompt reservations", k, loose.Max/P)
		}
		if used != k*U {
			t.Fatalf("used %d, want %d admitted x %d", used, k, U)
		}
		if over := used - loose.Max; over > M*min(k, clients) {
			t.Fatalf("overshoot %d above the limit exceeds the bound %d", over, M*min(k, clients))
		}
		t.Logf("P=%d M=%d L=%d: %d of %d admitted (bound floor(L/P)=%d), used %d = %.2fx the limit, overshoot %d <= bound %d",
			P, M, loose.Max, k, clients, loose.Max/P, used, float64(used)/float64(loose.Max), used-loose.Max, M*min(k, clients))
	})
}

// TestUpstreamCutReachesClient: when the upstream cuts a stream, the client
// must see a broken stream (as it would talking to the provider directly), not
// a cleanly terminated body that an SDK takes for a complete answer.
func TestUpstreamCutReachesClient(t *testing.T) {
	env := startLimitsEnv(t, deploymentDoc(nil, `
  - {name: cut, context: /cut, provider: mock}
`), nil)
	req := chatReq{Model: "gpt-4o-mini", Text: "This stream is cut by the upstream.", MaxTokens: 10, Stream: true}
	hdr := map[string]string{"x-mock-drop-after": "3"}

	status, _, body, err := env.act("/cut/v1/chat/completions", "", req.body(), hdr, readAll, "")
	if status != 200 {
		t.Fatalf("status %d", status)
	}
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("raw client: read error %v, want unexpected EOF; the gateway ended the cut stream cleanly after:\n%s", err, body)
	}

	cl := env.client("/cut", "", option.WithHeader("x-mock-drop-after", "3"))
	st := cl.Chat.Completions.NewStreaming(context.Background(), req.params())
	chunks := 0
	for st.Next() {
		chunks++
	}
	if st.Err() == nil {
		t.Errorf("openai-go: a stream cut after %d chunks ended without error (the client takes the truncated answer as complete)", chunks)
	}
}

// TestReloadKeepsCountersAndInFlight: applying a new deployment with a
// different limit keeps the usage counted under the same key, and a request
// admitted under the old chain is still resolved exactly once afterwards.
func TestReloadKeepsCountersAndInFlight(t *testing.T) {
	c := newCalc(t)
	req := chatReq{Model: "gpt-4o-mini", Text: "Counters survive a reload.", MaxTokens: 8}
	P := c.estimate(llmapi.ChatCompletions, req.body())
	U := P + req.completion()
	doc := func(limit int64) string {
		return deploymentDoc([]string{"app-a"}, consumerTokenRoute("rl", "fixed-window", limit, "1h"))
	}
	env := startLimitsEnv(t, doc(1000), nil)
	if a := env.chat("/rl", "app-a", req, nil); a.status != 200 {
		t.Fatalf("first request: %d", a.status)
	}
	env.waitSettled() // the body reaches the client just before the final phase runs

	// A stream admitted under the old chain stays open across the reload.
	stream := req
	stream.Stream = true
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp, err := env.open(ctx, "/rl/v1/chat/completions", "app-a", stream.body(), map[string]string{"x-mock-token-delay-ms": "5000"})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("stream: %v %v", resp, err)
	}
	if err := untilFirstEvent(resp.Body); err != nil {
		t.Fatal(err)
	}
	if open := env.openReservations(); open != 1 {
		t.Fatalf("open reservations %v with one stream in flight", open)
	}

	dep, err := yamlfile.ParseEnv([]byte(doc(2000)), "reloaded", func(name string) (string, bool) {
		switch name {
		case "MOCK_URL", "FLAKY_URL":
			return env.MockURL, true
		case "KEY_APP_A":
			return deployment.HashKey(appKey("app-a")), true
		}
		return "", false
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := env.GW.Apply(dep); err != nil {
		t.Fatalf("apply: %v", err)
	}
	cancel() // the old chain's stream ends: abandoned, charged its estimate and the token it delivered
	resp.Body.Close()
	env.waitSettled()

	lim := window(2000, time.Hour)
	key := counterKey("rl:app-a", policyTokens, "total", lim)
	S := P + int64(c.tokens.Count(req.Model, " tok"))
	if got := env.used(key, lim); got != U+S {
		t.Fatalf("after reload used %d, want %d (first request settled) + %d (stream abandoned)", got, U, S)
	}
	a := env.chat("/rl", "app-a", req, nil)
	if h := readRateHeaders(a.header); a.status != 200 || h.LimitTokens != 2000 || h.RemainingTokens != 2000-(U+S)-P {
		t.Fatalf("new limit: %d %+v, want limit 2000 remaining %d", a.status, h, 2000-(U+S)-P)
	}
}

// TestDenialHeadersAfterRelease: when a later limit denies a request, the
// earlier limit's reservation is released, so the token headers on the 429
// must not count it.
func TestDenialHeadersAfterRelease(t *testing.T) {
	c := newCalc(t)
	req := chatReq{Model: "gpt-4o", Text: "Tokens are fine, money is not.", MaxTokens: 100}
	P := c.estimate(llmapi.ChatCompletions, req.body())
	R := c.priceMicros(req.Model, P, req.completion())
	env := startLimitsEnv(t, deploymentDoc([]string{"app-a"}, fmt.Sprintf(`
  - name: hr
    context: /hr
    provider: mock
    policies:
      - {name: api-key-auth, version: v1}
      - {name: token-based-ratelimit, version: v1, params: {consumerBased: true, algorithm: fixed-window, totalTokenLimits: [{count: 100000, duration: 1h}]}}
      - {name: llm-cost-based-ratelimit, version: v1, params: {consumerBased: true, budgetLimits: [{amount: %s, duration: 1d}]}}
      - {name: llm-cost, version: v1}
`, yamlUSD(R))), nil)
	if a := env.chat("/hr", "app-a", req, nil); a.status != 200 {
		t.Fatalf("first: %d", a.status)
	}
	env.waitSettled()
	a := env.chat("/hr", "app-a", req, nil)
	if a.status != 429 || a.code != gwerror.CodeBudgetExceeded {
		t.Fatalf("second: %d %s", a.status, a.code)
	}
	env.waitSettled()
	lim := window(100000, time.Hour)
	used := env.used(counterKey("hr:app-a", policyTokens, "total", lim), lim)
	if h := readRateHeaders(a.header); h.RemainingTokens >= 0 && h.RemainingTokens != lim.Max-used {
		t.Errorf("429 by the budget reports x-ratelimit-remaining-tokens %d, but the token counter has %d remaining (the released reservation of %d is still counted)",
			h.RemainingTokens, lim.Max-used, P)
	}
}
