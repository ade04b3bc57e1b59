package e2e

// The meter's proof on mixed traffic (issue 12, first "Must show"): `sluice
// serve` and `sluice mock-llm` as processes, a provider whose
// applicationHeader names the tenant the mock counts by and whose
// usageReportUrl is the mock's /mock/usage, two applications on two models,
// and traffic from the openai-go client with every outcome the meter
// distinguishes. The usage API must equal what the clients saw, the
// reconciliation against the mock must find no mismatch, and every request
// id a client got must be in the records exactly once.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"sluice/llmapi"
	"sluice/mockllm"
)

// seenUsage is what the clients saw, by application and model.
type seenUsage struct {
	requests, prompt, completion int64
}

// trafficLog collects, from every HTTP answer the clients got (each attempt
// of the SDK's retries included), its X-Request-Id, and per request the
// usage the client saw.
type trafficLog struct {
	mu  sync.Mutex
	ids map[string]int // request id -> answers carrying it
	// usage is the sum of the usage blocks clients saw (delivered), by
	// application and model.
	usage map[[2]string]seenUsage
	// counted are the requests that delivered output without a usage
	// block (streams without include_usage, cancelled streams), by
	// request id: the content tokens the client received and the prompt
	// estimate of the body it sent.
	counted map[string]seenUsage
	// bodies are the request bodies by request id.
	bodies map[string][]byte
	// kinds counts the requests by the test's own label.
	kinds map[string]int
	// statuses counts the answers by HTTP status.
	statuses map[int]int
}

func newTrafficLog() *trafficLog {
	return &trafficLog{ids: map[string]int{}, usage: map[[2]string]seenUsage{}, counted: map[string]seenUsage{}, bodies: map[string][]byte{}, kinds: map[string]int{}, statuses: map[int]int{}}
}

// middleware records the request id of every answer.
func (l *trafficLog) middleware(last *string) option.Middleware {
	return func(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
		var body []byte
		if req.GetBody != nil {
			if rc, err := req.GetBody(); err == nil {
				body, _ = io.ReadAll(rc)
				rc.Close()
			}
		}
		resp, err := next(req)
		if resp != nil {
			id := resp.Header.Get("X-Request-Id")
			l.mu.Lock()
			l.ids[id]++
			l.bodies[id] = body
			l.statuses[resp.StatusCode]++
			l.mu.Unlock()
			if last != nil {
				*last = id
			}
		}
		return resp, err
	}
}

func (l *trafficLog) sawUsage(app, model string, prompt, completion int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	u := l.usage[[2]string{app, model}]
	u.requests++
	u.prompt += prompt
	u.completion += completion
	l.usage[[2]string{app, model}] = u
}

func (l *trafficLog) kind(k string) {
	l.mu.Lock()
	l.kinds[k]++
	l.mu.Unlock()
}

// job is one client call of the mixed traffic.
type job struct {
	kind  string
	app   string // application name (A, B) or "bad" for a wrong key
	model string
	run   func(ctx context.Context, c openai.Client, j job, last *string) error
}

func TestMeterReconcilesMixedTraffic(t *testing.T) {
	_, gw, a, mock, _ := startServe(t)
	start := time.Now().UTC().Add(-time.Minute)

	prov := a.create("/providers", map[string]any{"name": "openai", "type": "openai", "url": mock, "apiKey": e2eUpstreamKey,
		"forwardHeaders": []string{"x-mock-*"}, "applicationHeader": mockllm.DefaultUsageHeader,
		"usageReportUrl": mock + "/mock/usage"}).ID
	// A consumer token limit the mix stays far below; at the end one
	// request per application that produces twice the limit puts its
	// counter in debt, and its next requests are denied (429).
	const limit = 5_000
	a.setLimits(prov, map[string]any{"consumer": map[string]any{"global": map[string]any{"token": tokenLimit(limit)}}})
	apps, keys := map[string]string{}, map[string]string{"bad": "sk-sluice-not-a-key"}
	for _, name := range []string{"A", "B"} {
		apps[name] = a.create("/applications", map[string]any{"name": name, "providers": []string{prov}}).ID
		keys[name] = a.create("/applications/"+apps[name]+"/keys", nil).Key
	}
	a.waitApplied("local")
	dreq, _ := http.NewRequest(http.MethodDelete, mock+"/mock/usage", nil)
	if resp, err := http.DefaultClient.Do(dreq); err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE /mock/usage: %v %v", resp, err)
	}

	tl := newTrafficLog()
	calc := newCalc(t)
	models := []string{"gpt-4o-mini", "gpt-4o"}
	msg := func(j job) []openai.ChatCompletionMessageParamUnion {
		return []openai.ChatCompletionMessageParamUnion{openai.UserMessage("reconcile " + j.kind + " for " + j.app + " on " + j.model)}
	}
	appOf := func(j job) string { return apps[j.app] }

	nonStream := func(maxTokens int64, n int) func(context.Context, openai.Client, job, *string) error {
		return func(ctx context.Context, c openai.Client, j job, _ *string) error {
			p := openai.ChatCompletionNewParams{Model: j.model, Messages: msg(j), MaxTokens: openai.Int(maxTokens)}
			if n > 1 {
				p.N = openai.Int(int64(n))
			}
			r, err := c.Chat.Completions.New(ctx, p)
			if err != nil {
				return err
			}
			if len(r.Choices) != n || r.Usage.CompletionTokens != maxTokens*int64(n) {
				return fmt.Errorf("%s: %d choices, usage %+v", j.kind, len(r.Choices), r.Usage)
			}
			tl.sawUsage(appOf(j), j.model, r.Usage.PromptTokens, r.Usage.CompletionTokens)
			return nil
		}
	}
	streamed := func(maxTokens int64, n int, includeUsage bool) func(context.Context, openai.Client, job, *string) error {
		return func(ctx context.Context, c openai.Client, j job, last *string) error {
			p := openai.ChatCompletionNewParams{Model: j.model, Messages: msg(j), MaxTokens: openai.Int(maxTokens)}
			if n > 1 {
				p.N = openai.Int(int64(n))
			}
			if includeUsage {
				p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
			}
			s := c.Chat.Completions.NewStreaming(ctx, p)
			var content int64
			var usage *openai.CompletionUsage
			for s.Next() {
				ch := s.Current()
				for _, choice := range ch.Choices {
					if choice.Delta.Content != "" {
						content++
					}
				}
				if ch.Usage.TotalTokens > 0 {
					u := ch.Usage
					usage = &u
				}
			}
			if err := s.Err(); err != nil {
				return err
			}
			if content != maxTokens*int64(n) {
				return fmt.Errorf("%s: %d content chunks, want %d", j.kind, content, maxTokens*int64(n))
			}
			if includeUsage {
				if usage == nil || usage.CompletionTokens != content {
					return fmt.Errorf("%s: usage %+v", j.kind, usage)
				}
				tl.sawUsage(appOf(j), j.model, usage.PromptTokens, usage.CompletionTokens)
				return nil
			}
			if usage != nil {
				return fmt.Errorf("%s: a usage chunk without include_usage", j.kind)
			}
			tl.mu.Lock()
			tl.counted[*last] = seenUsage{requests: 1, prompt: calc.estimate(llmapi.ChatCompletions, tl.bodies[*last]), completion: content}
			tl.mu.Unlock()
			return nil
		}
	}
	// cancelled reads `after` tokens of a stream the mock holds after them,
	// then hangs up.
	const after = 3
	cancelled := func(ctx context.Context, c openai.Client, j job, last *string) error {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		p := openai.ChatCompletionNewParams{Model: j.model, Messages: msg(j), MaxTokens: openai.Int(12),
			StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}}
		s := c.Chat.Completions.NewStreaming(ctx, p, option.WithHeader(mockllm.HeaderStallAfter, fmt.Sprint(after)))
		var content int64
		for content < after && s.Next() {
			if ch := s.Current(); len(ch.Choices) > 0 && ch.Choices[0].Delta.Content != "" {
				content++
			}
		}
		if content != after {
			return fmt.Errorf("cancelled stream: %d tokens before the stall: %v", content, s.Err())
		}
		tl.mu.Lock()
		tl.counted[*last] = seenUsage{requests: 1, prompt: calc.estimate(llmapi.ChatCompletions, tl.bodies[*last]), completion: content}
		tl.mu.Unlock()
		cancel()
		s.Close()
		return nil
	}
	refused := func(status int, opts ...option.RequestOption) func(context.Context, openai.Client, job, *string) error {
		return func(ctx context.Context, c openai.Client, j job, _ *string) error {
			maxTokens := int64(8)
			_, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: j.model, Messages: msg(j), MaxTokens: openai.Int(maxTokens)}, opts...)
			var ae *openai.Error
			if !errors.As(err, &ae) || ae.StatusCode != status {
				return fmt.Errorf("%s: %v, want status %d", j.kind, err, status)
			}
			return nil
		}
	}

	var jobs []job
	add := func(kind string, times int, run func(context.Context, openai.Client, job, *string) error) {
		for _, app := range []string{"A", "B"} {
			for _, m := range models {
				for range times {
					jobs = append(jobs, job{kind: kind, app: app, model: m, run: run})
				}
			}
		}
	}
	add("body", 4, nonStream(5, 1))
	add("body n=3", 2, nonStream(4, 3))
	add("stream with usage", 3, streamed(6, 1, true))
	add("stream n=2 with usage", 2, streamed(3, 2, true))
	add("stream without usage", 2, streamed(5, 1, false))
	add("cancelled stream", 2, cancelled)
	// The mock answers 503 to every attempt: the gateway retries twice and
	// answers 502 (upstream_error), which the SDK retries twice.
	add("upstream 503", 1, refused(http.StatusBadGateway, option.WithHeader(mockllm.HeaderStatus, "503")))
	// A client naming another application in the mock's tenant header:
	// the gateway replaces it, so the usage still counts under its own.
	// Only A does it, so that a leak could not cancel out.
	for _, m := range models {
		jobs = append(jobs, job{kind: "spoofed tenant", app: "A", model: m, run: nonStream(7, 1)},
			job{kind: "spoofed tenant", app: "A", model: m, run: nonStream(7, 1)})
	}
	// The limit's denials come last, one at a time: per application, a
	// request whose output is twice the limit (admitted: its estimate is
	// bounded by the limit's capacity), then one denied request per model.
	var final []job
	for _, app := range []string{"A", "B"} {
		final = append(final, job{kind: "over the limit", app: app, model: models[0], run: func(ctx context.Context, c openai.Client, j job, _ *string) error {
			r, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: j.model, Messages: msg(j), MaxTokens: openai.Int(2 * limit)})
			if err != nil {
				return err
			}
			if r.Usage.CompletionTokens != 2*limit {
				return fmt.Errorf("usage %+v", r.Usage)
			}
			tl.sawUsage(appOf(j), j.model, r.Usage.PromptTokens, r.Usage.CompletionTokens)
			return nil
		}})
		for _, m := range models {
			final = append(final, job{kind: "limit 429", app: app, model: m, run: refused(http.StatusTooManyRequests)})
		}
	}
	jobs = append(jobs, job{kind: "bad key", app: "bad", model: models[0], run: refused(http.StatusUnauthorized)},
		job{kind: "bad key", app: "bad", model: models[1], run: refused(http.StatusUnauthorized)})

	// Run the jobs on 6 workers; the SDK's default retries (2, for 429 and
	// 5xx) are on for every client.
	errs := make(chan error, len(jobs)+len(final))
	// run runs j with a client of its own, whose middleware notes the
	// request id of each answer.
	run := func(j job) {
		var last string
		opts := []option.RequestOption{option.WithBaseURL(gw + "/openai/v1/"), option.WithAPIKey(keys[j.app]),
			option.WithRequestTimeout(30 * time.Second), option.WithMiddleware(tl.middleware(&last))}
		if j.kind == "spoofed tenant" {
			opts = append(opts, option.WithHeader(mockllm.DefaultUsageHeader, apps["B"]))
		}
		tl.kind(j.kind)
		if err := j.run(context.Background(), openai.NewClient(opts...), j, &last); err != nil {
			errs <- fmt.Errorf("%s %s %s: %w", j.kind, j.app, j.model, err)
		}
	}
	var wg sync.WaitGroup
	work := make(chan job)
	for range 6 {
		wg.Go(func() {
			for j := range work {
				run(j)
			}
		})
	}
	for _, j := range jobs {
		work <- j
	}
	close(work)
	wg.Wait()
	for _, j := range final {
		run(j)
	}
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}
	if n := tl.ids[""]; n > 0 {
		t.Fatalf("%d answers without X-Request-Id", n)
	}

	// Shipping drains: poll the records until every id the clients got is
	// there (a safety deadline, not a measurement).
	records := waitRecords(t, a, start, len(tl.ids))

	// (c) Every request id exactly once, and no other record.
	seen := map[string]int{}
	for _, r := range records {
		seen[r.ID]++
	}
	for id, n := range tl.ids {
		if n != 1 || seen[id] != 1 {
			t.Errorf("request id %s: %d answers, %d records", id, n, seen[id])
		}
	}
	if len(seen) != len(tl.ids) || len(records) != len(tl.ids) {
		t.Errorf("%d records (%d ids) for %d request ids the clients got", len(records), len(seen), len(tl.ids))
	}

	// The records without a usage block the client saw: counted from what
	// it received, exactly; the refused ones carry nothing.
	byRes := map[string]int{}
	want := map[[2]string]seenUsage{}
	for k, v := range tl.usage {
		want[k] = v
	}
	for _, r := range records {
		byRes[r.Resolution]++
		k := [2]string{r.Application, r.RequestedModel}
		c, noBlock := tl.counted[r.ID]
		switch r.Resolution {
		case "settled", "abandoned":
			// A stream without include_usage is settled with the
			// provider's usage (the gateway asks for it and keeps the
			// chunk from the client); a cancelled one is counted.
			wantSource := map[string]string{"settled": "provider", "abandoned": "counted"}[r.Resolution]
			if r.UsageSource != wantSource || (r.Resolution == "abandoned" && !noBlock) {
				t.Errorf("%s %s: usage source %q", r.Resolution, r.ID, r.UsageSource)
			}
			if !noBlock {
				break
			}
			if r.PromptTokens != c.prompt || r.CompletionTokens != c.completion {
				t.Errorf("%s %s: %d+%d tokens, the client received %+v", r.Resolution, r.ID, r.PromptTokens, r.CompletionTokens, c)
			}
			w := want[k]
			w.prompt += c.prompt
			w.completion += c.completion
			want[k] = w
		case "denied", "auth_failed", "upstream_error":
			if r.PromptTokens != 0 || r.CompletionTokens != 0 || (r.UsageSource != "" && r.UsageSource != "none") {
				t.Errorf("%s %s carries usage: %+v", r.Resolution, r.ID, r)
			}
			if r.Resolution == "upstream_error" && r.Attempts != 3 {
				t.Errorf("upstream error %s: %d attempts, want 3 (2 gateway retries)", r.ID, r.Attempts)
			}
		default:
			t.Errorf("record %s: resolution %s", r.ID, r.Resolution)
		}
	}
	// One record per refused answer: the SDK retried each 502 twice (3
	// records of 3 attempts each) and the 429s as their x-should-retry
	// said; it does not retry a 401.
	if tl.statuses[http.StatusBadGateway] != 3*4 || tl.statuses[http.StatusTooManyRequests] < 4 || tl.statuses[http.StatusUnauthorized] != 2 {
		t.Errorf("answers by status %v", tl.statuses)
	}
	for res, n := range map[string]int{"denied": tl.statuses[http.StatusTooManyRequests], "upstream_error": tl.statuses[http.StatusBadGateway],
		"auth_failed": tl.statuses[http.StatusUnauthorized]} {
		if byRes[res] != n {
			t.Errorf("%d %s records, want %d", byRes[res], res, n)
		}
	}
	if byRes["abandoned"] != 2*4 || len(tl.counted) != 2*2*4 {
		t.Errorf("resolutions %v, %d requests without a usage block", byRes, len(tl.counted))
	}

	// (a) The usage API's totals per application and model equal what the
	// clients saw: the usage blocks of the requests that delivered one
	// (bodies, streams with include_usage), plus, for the streams without
	// include_usage and the cancelled ones, the content tokens received
	// and the body's prompt estimate (checked above against their records).
	var rep struct {
		Rows []struct {
			Application, Model             string
			PromptTokens, CompletionTokens int64
		} `json:"rows"`
	}
	a.must(200, "GET", "/usage?bucket=hour&groupBy=application,model&from="+url.QueryEscape(start.Format(time.RFC3339)), nil, &rep)
	got := map[[2]string]seenUsage{}
	for _, r := range rep.Rows {
		k := [2]string{r.Application, r.Model}
		g := got[k]
		g.prompt += r.PromptTokens
		g.completion += r.CompletionTokens
		got[k] = g
	}
	var totalPrompt, totalCompletion int64
	for k, w := range want {
		if g := got[k]; g.prompt != w.prompt || g.completion != w.completion {
			t.Errorf("%s %s: usage API %d+%d tokens, clients saw %d+%d", k[0], k[1], g.prompt, g.completion, w.prompt, w.completion)
		}
		totalPrompt += w.prompt
		totalCompletion += w.completion
	}
	for k, g := range got {
		if _, ok := want[k]; !ok && (g.prompt != 0 || g.completion != 0) {
			t.Errorf("%s %s: usage API %+v, the clients saw none", k[0], k[1], g)
		}
	}
	if len(want) != 4 {
		t.Errorf("usage seen for %d application-model pairs, want 4", len(want))
	}

	// (b) Reconciliation against the mock: no mismatch.
	var rec struct {
		Rows []struct {
			Application string `json:"application"`
			Model       string `json:"model"`
		} `json:"rows"`
		Mismatches []any `json:"mismatches"`
		Totals     struct {
			Metered, Reported struct{ Requests, PromptTokens, CompletionTokens int64 }
		} `json:"totals"`
	}
	a.must(200, "GET", "/usage/reconciliation?provider=openai&from="+url.QueryEscape(start.Format(time.RFC3339)), nil, &rec)
	reached := int64(byRes["settled"] + byRes["closed"] + byRes["abandoned"])
	if len(rec.Mismatches) != 0 || len(rec.Rows) != 4 || rec.Totals.Metered != rec.Totals.Reported ||
		rec.Totals.Metered.Requests != reached || rec.Totals.Metered.PromptTokens != totalPrompt || rec.Totals.Metered.CompletionTokens != totalCompletion {
		t.Errorf("reconciliation: %+v", rec)
	}
	for _, r := range rec.Rows {
		if r.Application != apps["A"] && r.Application != apps["B"] {
			t.Errorf("the mock counted tenant %q: a client's header reached it", r.Application)
		}
	}

	kinds := make([]string, 0, len(tl.kinds))
	for k, n := range tl.kinds {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(kinds)
	t.Logf("client calls: %s", strings.Join(kinds, ", "))
	t.Logf("%d gateway requests (X-Request-Id seen), answers by status %v, %d records by resolution %v", len(tl.ids), tl.statuses, len(records), byRes)
	t.Logf("reached the model: %d requests, %d prompt + %d completion tokens; reconciliation: metered %+v, reported %+v, %d mismatches",
		reached, totalPrompt, totalCompletion, rec.Totals.Metered, rec.Totals.Reported, len(rec.Mismatches))
}

// meterRecord is the part of a usage record the proof reads.
type meterRecord struct {
	ID               string `json:"id"`
	Application      string `json:"application"`
	RequestedModel   string `json:"requestedModel"`
	Resolution       string `json:"resolution"`
	UsageSource      string `json:"usageSource"`
	PromptTokens     int64  `json:"promptTokens"`
	CompletionTokens int64  `json:"completionTokens"`
	Attempts         int    `json:"attempts"`
}

// waitRecords polls /usage/records since from until it holds at least n
// records, then returns them all.
func waitRecords(t *testing.T, a *admin, from time.Time, n int) []meterRecord {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var all []meterRecord
		cursor := ""
		for {
			var page struct {
				Records []meterRecord `json:"records"`
				Next    *string       `json:"next"`
			}
			a.must(200, "GET", "/usage/records?limit=1000&from="+url.QueryEscape(from.Format(time.RFC3339))+cursor, nil, &page)
			all = append(all, page.Records...)
			if page.Next == nil {
				break
			}
			cursor = "&cursor=" + url.QueryEscape(*page.Next)
		}
		if len(all) >= n {
			return all
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d records after 60 s, want %d", len(all), n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
