// Package fairbench is `sluice bench fairness`: N tenants of mixed request
// sizes, one hot tenant that bursts, one priority tenant with a deadline,
// through a real gateway (assembled by internal/app, on loopback) in front
// of an in-process saturable mock, in one of three modes:
//
//   - fifo: the gateway passes everything and the engine's FIFO queue decides;
//   - rpm:  a per-application request-rate limit (basic-ratelimit), sized to
//     the engine's throughput divided by the tenants;
//   - fair: fair-admission with the engine's capacity.
//
// It writes summary.json and PNG plots to the output directory
// (docs/fairness.md#results describes the load and every figure).
package fairbench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/schollz/progressbar/v3"

	"sluice/deployment"
	"sluice/deployment/yamlfile"
	"sluice/internal/app"
	"sluice/mockllm"
	"sluice/tokencount"
)

// Modes.
const (
	ModeFIFO = "fifo"
	ModeRPM  = "rpm"
	ModeFair = "fair"
)

// Options configure a run.
type Options struct {
	Tenants  int
	Duration time.Duration
	Mode     string
	Out      string
	// Capacity is the engine's (mockllm.ParseCapacity syntax).
	Capacity string
	Seed     uint64
	// BurstHeadroom is the standard class's burstHeadroom in fair mode
	// (0: none).
	BurstHeadroom float64
	// Progress receives the progress bar (nil: none); Terminal says it is
	// one (else the bar is redrawn every 15 s, as lines).
	Progress io.Writer
	Terminal bool
	// Command is the command line, recorded in summary.json.
	Command string
}

// DefaultCapacity is the engine of the published results.
const DefaultCapacity = "sequences=128,kv=524288,prefill=150000,decode=50"

// Tenant roles. Tenant 0 is hot, 1 priority, 2 the victim, 3..12 heavy
// (backlogged during the burst, offering different amounts of work), the
// rest light background.
const (
	roleHot = iota
	rolePriority
	roleVictim
	roleHeavy
	roleLight
)

var roleNames = [...]string{"hot", "priority", "victim", "heavy", "light"}

const (
	heavyTenants = 10
	// priorityDeadline is the priority class's default deadline.
	priorityDeadline = 2 * time.Second
	// window is the Jain index's window.
	window = 10 * time.Second
	// drainLimit bounds the wait, after the load ends, for the requests in
	// flight; what is left then is cancelled (and counted).
	drainLimit = 4 * time.Minute
	// tokenLimit is each application's token counter, large enough never to
	// deny: it only records what the gateway charged, for reconciliation.
	tokenLimit = int64(1) << 50
)

// tenant is one application's load.
type tenant struct {
	idx  int
	id   string
	role int
	rng  *rand.Rand
}

func (t *tenant) key() string { return "sk-fairbench-" + t.id }

// phases splits the run: unloaded, the burst, after the burst.
type phases struct{ burstStart, burstEnd, end time.Duration }

func phasesOf(d time.Duration) phases {
	return phases{burstStart: d / 4, burstEnd: d / 2, end: d}
}

func (p phases) of(at time.Duration) int {
	switch {
	case at < p.burstStart:
		return 0
	case at < p.burstEnd:
		return 1
	}
	return 2
}

// Run runs one mode and writes its results to o.Out.
func Run(ctx context.Context, o Options) error {
	switch o.Mode {
	case ModeFIFO, ModeRPM, ModeFair:
	default:
		return fmt.Errorf("unknown mode %q: want fifo, rpm or fair", o.Mode)
	}
	if o.Tenants < heavyTenants+4 {
		return fmt.Errorf("--tenants %d: at least %d (hot, priority, victim, %d heavy and light ones)", o.Tenants, heavyTenants+4, heavyTenants)
	}
	if o.Duration < 40*time.Second {
		return fmt.Errorf("--duration %s: at least 40s (an unloaded phase, the burst, and after it)", o.Duration)
	}
	if o.Capacity == "" {
		o.Capacity = DefaultCapacity
	}
	capy, err := mockllm.ParseCapacity(o.Capacity)
	if err != nil {
		return err
	}
	if o.BurstHeadroom < 0 || o.BurstHeadroom >= 1 {
		return fmt.Errorf("--burst-headroom %g: at least 0 and below 1", o.BurstHeadroom)
	}
	if capy.DecodeTPS <= 0 || capy.KVTokens <= 0 {
		return fmt.Errorf("--capacity %s: the bench needs a decode speed and a KV bound", o.Capacity)
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return err
	}
	counter := tokencount.New()
	counter.Warm()

	mockLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	mockSrv := &http.Server{Handler: mockllm.New(mockllm.Options{Counter: counter, Capacity: &capy}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = mockSrv.Serve(mockLn) }()
	defer mockSrv.Close()
	mockURL := "http://" + mockLn.Addr().String()

	tenants := make([]*tenant, o.Tenants)
	for i := range tenants {
		role := roleLight
		switch {
		case i == 0:
			role = roleHot
		case i == 1:
			role = rolePriority
		case i == 2:
			role = roleVictim
		case i < 3+heavyTenants:
			role = roleHeavy
		}
		tenants[i] = &tenant{idx: i, id: tenantID(i), role: role, rng: rand.New(rand.NewPCG(o.Seed, uint64(i)))}
	}
	doc := deploymentDoc(o.Mode, mockURL, capy, tenants, o.BurstHeadroom)
	d, err := yamlfile.ParseRendered([]byte(doc), "fairbench.yaml")
	if err != nil {
		return fmt.Errorf("the bench's deployment: %w", err)
	}
	if err := os.WriteFile(filepath.Join(o.Out, "deployment.yaml"), []byte(doc), 0o644); err != nil {
		return err
	}
	gw, err := app.NewGateway(d, app.GatewayOptions{Services: app.Services{
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Tokens: counter}})
	if err != nil {
		return err
	}
	defer gw.Close()
	gwLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go func() { _ = gw.Serve(gwLn) }()
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = gw.Shutdown(sctx)
	}()

	r := &runner{opts: o, capy: capy, gwURL: "http://" + gwLn.Addr().String(), mockURL: mockURL, tenants: tenants,
		ph: phasesOf(o.Duration), counter: counter,
		client: &http.Client{Transport: &http.Transport{MaxIdleConns: 4096, MaxIdleConnsPerHost: 4096, IdleConnTimeout: time.Minute}}}
	r.run(ctx)
	sum, err := r.summarize()
	if err != nil {
		return err
	}
	return r.write(sum)
}

// deploymentDoc is the bench's deployment for mode.
func deploymentDoc(mode, mockURL string, capy mockllm.Capacity, tenants []*tenant, headroom float64) string {
	var b strings.Builder
	capYAML := ""
	if mode == ModeFair {
		capYAML = fmt.Sprintf(", capacity: {maxConcurrent: %d, maxTokensInFlight: %d}", capy.Sequences, capy.KVTokens)
	}
	fmt.Fprintf(&b, `apiVersion: sluice/v1
providers:
  - {name: engine, type: openai, url: %q, timeout: 10m, retries: 0, forwardHeaders: ["x-mock-*"]%s}
applications:
`, mockURL, capYAML)
	for _, t := range tenants {
		adm := ""
		if t.role == rolePriority && mode == ModeFair {
			adm = ", admission: {class: priority}"
		}
		fmt.Fprintf(&b, "  - {id: %s, apiKeys: [%q]%s}\n", t.id, deployment.HashKey(t.key()), adm)
	}
	fmt.Fprintf(&b, `routes:
  - name: bench
    context: /bench
    provider: engine
    policies:
      - {name: api-key-auth}
      - {name: token-based-ratelimit, params: {consumerBased: true, algorithm: fixed-window, totalTokenLimits: [{count: %d, duration: 1d}]}}
`, tokenLimit)
	switch mode {
	case ModeRPM:
		fmt.Fprintf(&b, "      - {name: basic-ratelimit, params: {consumerBased: true, limits: [{requests: %d, duration: 1m}]}}\n", rpmLimit(capy, len(tenants)))
	case ModeFair:
		b.WriteString("      - {name: fair-admission}\n")
		std := ""
		if headroom > 0 {
			std = fmt.Sprintf(", burstHeadroom: %g", headroom)
		}
		fmt.Fprintf(&b, `admission:
  classes:
    standard: {defaultDeadline: 60s, maxDeadline: 120s%s}
    priority: {reservedShare: 0.1, maxShare: 0.3, defaultDeadline: %s, maxDeadline: 5s}
`, std, deployment.Duration(priorityDeadline))
	}
	return b.String()
}

// meanHold is the mean time a request of the load holds a sequence: its
// output (a mean of 96 tokens, see sizes) at the decode speed.
func meanHold(capy mockllm.Capacity) float64 { return 96 / capy.DecodeTPS }

// rpmLimit is the rpm mode's per-application limit: the engine's
// throughput in requests per minute over the tenants (at least 1).
func rpmLimit(capy mockllm.Capacity, tenants int) int {
	perMin := float64(capy.Sequences) / meanHold(capy) * 60
	return max(1, int(math.Round(perMin/float64(tenants))))
}

// request is one request of the load.
type request struct {
	t        *tenant
	at       time.Duration // planned send time
	prompt   int           // words of the prompt
	output   int           // max_tokens: the engine generates exactly this
	stream   bool
	hangUpAt int // > 0: the client hangs up after this many tokens (the engine pauses there)
}

// result is what one request did.
type result struct {
	tenant    int
	stream    bool
	sent      time.Duration
	first     time.Duration // first token (streams), the answer (bodies); -1: none
	status    int
	prompt    int64 // prompt tokens the engine reported (0: none)
	out       int   // tokens received
	want      int
	hungUp    bool
	complete  bool // the answer ended as the engine ends it
	broken    bool // a stream that ended without its end, not hung up by the client
	queueMs   int  // x-sluice-queue-ms; -1: none
	gaps      []float32
	refusedBy string
}

type runner struct {
	opts    Options
	capy    mockllm.Capacity
	gwURL   string
	mockURL string
	tenants []*tenant
	ph      phases
	counter *tokencount.Counter
	client  *http.Client
	start   time.Time

	mu      sync.Mutex
	results []result
	done    atomic.Int64
	refused atomic.Int64
}

// plan generates every tenant's requests for the run (seeded).
func (r *runner) plan() []request {
	capTok := float64(r.capy.Sequences) * r.capy.DecodeTPS // output tokens per second
	var reqs []request
	poisson := func(t *tenant, from, to time.Duration, rate float64, mk func() request) {
		if rate <= 0 {
			return
		}
		at := from
		for {
			at += time.Duration(t.rng.ExpFloat64() / rate * float64(time.Second))
			if at >= to {
				return
			}
			q := mk()
			q.t, q.at = t, at
			reqs = append(reqs, q)
		}
	}
	lights := len(r.tenants) - 3 - heavyTenants
	for _, t := range r.tenants {
		switch t.role {
		case roleHot:
			// During the burst the hot tenant alone asks for 0.6 of the
			// engine's output, in long requests.
			poisson(t, r.ph.burstStart, r.ph.burstEnd, 0.6*capTok/256, func() request {
				return request{prompt: 1000, output: 256, stream: true}
			})
		case rolePriority:
			poisson(t, 0, r.ph.end, 0.5, func() request { return request{prompt: 200, output: 32, stream: true} })
		case roleVictim:
			poisson(t, 0, r.ph.end, 1, func() request { return request{prompt: 300, output: 32, stream: true} })
		case roleHeavy:
			// Each heavy tenant asks for more than its share during the
			// burst, each a different amount, in requests of its own size
			// (long ones: a FIFO backlog of short ones would be thousands
			// of open connections).
			j := t.idx - 3
			out := []int{128, 256}[j%2]
			prompt := []int{200, 800, 1600}[j%3]
			poisson(t, r.ph.burstStart, r.ph.burstEnd, (0.08+0.01*float64(j))*capTok/float64(out), func() request {
				return request{prompt: prompt, output: out, stream: true}
			})
		default:
			// The light tenants together ask for 0.3 of the engine's output
			// all along: mixed sizes, streams and bodies, some hang-ups.
			poisson(t, 0, r.ph.end, 0.3*capTok/72/float64(lights), func() request {
				q := request{prompt: 100 + t.rng.IntN(1400), output: 16 + t.rng.IntN(113), stream: t.rng.Float64() < 0.7}
				if q.stream && t.rng.Float64() < 0.05 {
					q.hangUpAt = 2 + t.rng.IntN(7)
				}
				return q
			})
		}
	}
	return reqs
}

// run sends the planned load, shows progress, and waits until every
// request ended (the drain is bounded: what is left then is cancelled).
func (r *runner) run(ctx context.Context) {
	reqs := r.plan()
	var bar *progressbar.ProgressBar
	if r.opts.Progress != nil {
		throttle := 500 * time.Millisecond
		if !r.opts.Terminal {
			throttle = 15 * time.Second
		}
		bar = progressbar.NewOptions64(int64(r.ph.end/time.Second),
			progressbar.OptionSetWriter(r.opts.Progress),
			progressbar.OptionSetDescription(fmt.Sprintf("fairness %s, %d tenants", r.opts.Mode, len(r.tenants))),
			progressbar.OptionShowElapsedTimeOnFinish(), progressbar.OptionSetWidth(30),
			progressbar.OptionThrottle(throttle), progressbar.OptionUseANSICodes(r.opts.Terminal))
	}
	loadCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	r.start = time.Now()
	var wg sync.WaitGroup
	stop := make(chan struct{})
	if bar != nil {
		go func() {
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					_ = bar.Set64(min(int64(time.Since(r.start)/time.Second), int64(r.ph.end/time.Second)))
					bar.Describe(fmt.Sprintf("fairness %s: %d done, %d refused", r.opts.Mode, r.done.Load(), r.refused.Load()))
				}
			}
		}()
	}
	// Requests start in planned order, each on its own goroutine.
	sortByAt(reqs)
	for _, q := range reqs {
		if wait := q.at - time.Since(r.start); wait > 0 {
			select {
			case <-time.After(wait):
			case <-ctx.Done():
			}
		}
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := r.do(loadCtx, q)
			r.mu.Lock()
			r.results = append(r.results, res)
			r.mu.Unlock()
			r.done.Add(1)
			if res.status == http.StatusTooManyRequests {
				r.refused.Add(1)
			}
		}()
	}
	drained := make(chan struct{})
	go func() { wg.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(drainLimit):
		cancel() // a bounded drain
		<-drained
	}
	close(stop)
	if bar != nil {
		_ = bar.Finish()
	}
}

func sortByAt(reqs []request) {
	slices.SortStableFunc(reqs, func(a, b request) int { return cmp.Compare(a.at, b.at) })
}

// do sends one request and records what happened.
func (r *runner) do(ctx context.Context, q request) result {
	res := result{tenant: q.t.idx, stream: q.stream, first: -1, queueMs: -1, want: q.output}
	body := fmt.Sprintf(`{"model":"gpt-4o-mini","stream":%v,"max_tokens":%d,%s"messages":[{"role":"user","content":%q}]}`,
		q.stream, q.output, map[bool]string{true: `"stream_options":{"include_usage":true},`}[q.stream], strings.Repeat(" word", q.prompt))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, r.gwURL+"/bench/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+q.t.key())
	req.Header.Set(mockllm.DefaultUsageHeader, q.t.id)
	if q.hangUpAt > 0 {
		req.Header.Set(mockllm.HeaderStallAfter, fmt.Sprint(q.hangUpAt))
	}
	res.sent = time.Since(r.start)
	resp, err := r.client.Do(req)
	if err != nil {
		return res
	}
	defer resp.Body.Close()
	res.status = resp.StatusCode
	if v, err := strconv.Atoi(resp.Header.Get("X-Sluice-Queue-Ms")); err == nil {
		res.queueMs = v
	}
	if resp.StatusCode != http.StatusOK {
		res.refusedBy = resp.Header.Get("X-Sluice-Policy")
		_, _ = io.Copy(io.Discard, resp.Body)
		return res
	}
	if !q.stream {
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return res
		}
		res.first = time.Since(r.start)
		res.out = strings.Count(string(b), " tok")
		res.prompt = jsonInt(b, `"prompt_tokens":`)
		res.complete = res.out == q.output
		return res
	}
	r.readStream(cancel, resp.Body, q, &res)
	return res
}

// readStream reads a stream's events: tokens, their times, the usage.
func (r *runner) readStream(hangUp context.CancelFunc, body io.Reader, q request, res *result) {
	buf := make([]byte, 0, 4096)
	chunk := make([]byte, 4096)
	var last time.Duration
	for {
		n, err := body.Read(chunk)
		buf = append(buf, chunk[:n]...)
		for {
			i := strings.Index(string(buf), "\n\n")
			if i < 0 {
				break
			}
			ev := string(buf[:i])
			buf = buf[i+2:]
			data, ok := strings.CutPrefix(ev, "data: ")
			if !ok {
				continue
			}
			if data == "[DONE]" {
				res.complete = res.out == q.output
				return
			}
			if strings.Contains(data, `"usage":{`) {
				res.prompt = jsonInt([]byte(data), `"prompt_tokens":`)
			}
			if k := strings.Count(data, `"content":" tok"`); k > 0 {
				now := time.Since(r.start)
				if res.first < 0 {
					res.first = now
				} else {
					res.gaps = append(res.gaps, float32((now-last).Seconds()*1000))
				}
				last = now
				res.out += k
				if q.hangUpAt > 0 && res.out >= q.hangUpAt {
					res.hungUp = true
					hangUp()
					return
				}
			}
		}
		if err != nil {
			if !errors.Is(err, context.Canceled) {
				res.broken = true
			}
			return
		}
	}
}

// jsonInt reads the integer after key in b (0 when absent).
func jsonInt(b []byte, key string) int64 {
	s := string(b)
	i := strings.Index(s, key)
	if i < 0 {
		return 0
	}
	s = strings.TrimLeft(s[i+len(key):], " ")
	j := 0
	for j < len(s) && s[j] >= '0' && s[j] <= '9' {
		j++
	}
	v, _ := strconv.ParseInt(s[:j], 10, 64)
	return v
}
