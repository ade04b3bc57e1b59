package fairbench

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"sluice/mockllm"
)

// Summary is summary.json.
type Summary struct {
	Command  string     `json:"command"`
	Mode     string     `json:"mode"`
	Tenants  int        `json:"tenants"`
	Duration string     `json:"duration"`
	Capacity string     `json:"capacity"`
	Seed     uint64     `json:"seed"`
	Burst    [2]float64 `json:"burst_s"` // start and end of the hot burst, seconds into the run
	// BurstHeadroom is the standard class's burstHeadroom (fair mode; 0: none).
	BurstHeadroom float64 `json:"burst_headroom,omitempty"`

	// JainIndex is Jain's index of the token work (input + 2 x output)
	// admitted per 10s window of the burst among the backlogged tenants of
	// equal weight (the hot one and the heavy ones, each asking for more than
	// its share), the mean over the windows.
	JainIndex   float64   `json:"jain_index"`
	JainWindows []float64 `json:"jain_windows"`
	// The victim is a well-behaved tenant (short streams, 1 per second).
	VictimTTFTP99Ms         float64 `json:"victim_ttft_p99_ms"`
	VictimTTFTP99UnloadedMs float64 `json:"victim_ttft_p99_unloaded_ms"`
	VictimTTFTRatio         float64 `json:"victim_ttft_p99_ratio"`
	// ThroughputTokensPerS is the output tokens delivered per second during
	// the burst (the engine saturated); Overall over the whole run.
	ThroughputTokensPerS        float64        `json:"throughput_tokens_per_s"`
	ThroughputOverallTokensPerS float64        `json:"throughput_overall_tokens_per_s"`
	Requests                    int            `json:"requests"`
	GoodCompletions             int            `json:"good_completions"`
	Refused                     int            `json:"refused"`
	RefusedBy                   map[string]int `json:"refused_by"`
	HungUp                      int            `json:"hung_up"`
	// Preemptions counts generations ended by the server (a stream cut
	// without its end and not by its client): none by construction.
	Preemptions              int              `json:"preemptions"`
	PriorityRequests         int              `json:"priority_requests"`
	PriorityDeadlineHits     int              `json:"priority_deadline_hits"`
	PriorityDeadlineHitRatio float64          `json:"priority_deadline_hit_ratio"`
	ReconciliationMismatches int              `json:"reconciliation_mismatches"`
	ReconciliationExamples   []string         `json:"reconciliation_examples,omitempty"`
	Roles                    map[string]Stats `json:"roles"`
	PerTenant                map[string]Stats `json:"per_tenant"`
}

// Stats are one tenant's (or role's) figures; times in milliseconds.
type Stats struct {
	Role      string      `json:"role,omitempty"`
	Requests  int         `json:"requests"`
	Completed int         `json:"completed"`
	Refused   int         `json:"refused"`
	QueueMs   Percentiles `json:"queue_age_ms"`
	TTFTMs    Percentiles `json:"ttft_ms"`
	GapMs     Percentiles `json:"inter_token_gap_ms"`
	// BurstWork is the token work admitted during the burst.
	BurstWork float64 `json:"burst_work"`
}

// Percentiles of a sample (all zero without one).
type Percentiles struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

func percentiles(xs []float64) Percentiles {
	if len(xs) == 0 {
		return Percentiles{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	q := func(p float64) float64 { return s[min(len(s)-1, int(p*float64(len(s))))] }
	return Percentiles{N: len(s), P50: q(0.5), P90: q(0.9), P99: q(0.99), Max: s[len(s)-1]}
}

// work is a request's token work (the scheduler's default weights).
func (res *result) work() float64 { return float64(res.prompt) + 2*float64(res.out) }

// tokenTimes calls fn with the time of each token a request received.
func (res *result) tokenTimes(fn func(at time.Duration)) {
	if res.first < 0 || res.out == 0 {
		return
	}
	if !res.stream {
		for range res.out {
			fn(res.first)
		}
		return
	}
	at := res.first
	fn(at)
	for _, g := range res.gaps {
		at += time.Duration(float64(g) * float64(time.Millisecond))
		fn(at)
	}
}

func (r *runner) summarize() (*Summary, error) {
	ph := r.ph
	s := &Summary{Command: r.opts.Command, Mode: r.opts.Mode, Tenants: len(r.tenants), Duration: r.opts.Duration.String(), Capacity: r.capy.String(),
		Seed: r.opts.Seed, BurstHeadroom: r.opts.BurstHeadroom, Burst: [2]float64{ph.burstStart.Seconds(), ph.burstEnd.Seconds()},
		RefusedBy: map[string]int{}, Roles: map[string]Stats{}, PerTenant: map[string]Stats{}}
	type acc struct {
		st              Stats
		queue, ttft, gp []float64
	}
	per := make([]acc, len(r.tenants))
	roles := map[string]*acc{}
	var victimLoaded, victimUnloaded []float64
	windows := int((ph.burstEnd - ph.burstStart) / window)
	work := make([][]float64, windows) // [window][tenant]
	for i := range work {
		work[i] = make([]float64, len(r.tenants))
	}
	var burstTokens, allTokens int
	for i := range r.results {
		res := &r.results[i]
		t := r.tenants[res.tenant]
		role := roleNames[t.role]
		a := &per[res.tenant]
		ra := roles[role]
		if ra == nil {
			ra = &acc{}
			roles[role] = ra
		}
		for _, x := range []*acc{a, ra} {
			x.st.Requests++
			if res.status == http.StatusOK && res.complete {
				x.st.Completed++
			}
			if res.status == http.StatusTooManyRequests {
				x.st.Refused++
			}
			if res.queueMs >= 0 {
				x.queue = append(x.queue, float64(res.queueMs))
			}
			if res.stream && res.first >= 0 {
				x.ttft = append(x.ttft, float64(res.first-res.sent)/1e6)
			}
			for _, g := range res.gaps {
				x.gp = append(x.gp, float64(g))
			}
		}
		s.Requests++
		switch {
		case res.status == http.StatusOK && res.complete:
			s.GoodCompletions++
		case res.status == http.StatusTooManyRequests:
			s.Refused++
			s.RefusedBy[res.refusedBy]++
		}
		if res.hungUp {
			s.HungUp++
		}
		if res.broken {
			s.Preemptions++
		}
		if t.role == rolePriority {
			s.PriorityRequests++
			if res.status == http.StatusOK && res.first >= 0 && res.first-res.sent <= priorityDeadline {
				s.PriorityDeadlineHits++
			}
		}
		if t.role == roleVictim && res.first >= 0 {
			ttft := float64(res.first-res.sent) / 1e6
			switch ph.of(res.sent) {
			case 0:
				victimUnloaded = append(victimUnloaded, ttft)
			case 1:
				victimLoaded = append(victimLoaded, ttft)
			}
		}
		if res.first >= ph.burstStart && res.first < ph.burstEnd {
			if w := int((res.first - ph.burstStart) / window); w < windows {
				work[w][res.tenant] += res.work()
			}
			a.st.BurstWork += res.work()
		}
		res.tokenTimes(func(at time.Duration) {
			allTokens++
			if at >= ph.burstStart && at < ph.burstEnd {
				burstTokens++
			}
		})
	}
	// Jain's index per window over the backlogged equal-weight tenants.
	var sum float64
	for _, w := range work {
		var x, x2 float64
		n := 0
		for i, t := range r.tenants {
			if t.role != roleHot && t.role != roleHeavy {
				continue
			}
			x += w[i]
			x2 += w[i] * w[i]
			n++
		}
		j := 0.0
		if x2 > 0 {
			j = x * x / (float64(n) * x2)
		}
		s.JainWindows = append(s.JainWindows, round3(j))
		sum += j
	}
	if len(work) > 0 {
		s.JainIndex = round3(sum / float64(len(work)))
	}
	s.VictimTTFTP99Ms = percentiles(victimLoaded).P99
	s.VictimTTFTP99UnloadedMs = percentiles(victimUnloaded).P99
	if s.VictimTTFTP99UnloadedMs > 0 {
		s.VictimTTFTRatio = round3(s.VictimTTFTP99Ms / s.VictimTTFTP99UnloadedMs)
	}
	s.ThroughputTokensPerS = round3(float64(burstTokens) / (ph.burstEnd - ph.burstStart).Seconds())
	s.ThroughputOverallTokensPerS = round3(float64(allTokens) / ph.end.Seconds())
	if s.PriorityRequests > 0 {
		s.PriorityDeadlineHitRatio = round3(float64(s.PriorityDeadlineHits) / float64(s.PriorityRequests))
	}
	for i, t := range r.tenants {
		a := &per[i]
		a.st.Role = roleNames[t.role]
		a.st.QueueMs, a.st.TTFTMs, a.st.GapMs = percentiles(a.queue), percentiles(a.ttft), percentiles(a.gp)
		s.PerTenant[t.id] = a.st
	}
	for name, a := range roles {
		a.st.QueueMs, a.st.TTFTMs, a.st.GapMs = percentiles(a.queue), percentiles(a.ttft), percentiles(a.gp)
		s.Roles[name] = a.st
	}
	if err := r.reconcile(s); err != nil {
		return nil, err
	}
	return s, nil
}

func round3(f float64) float64 { return float64(int64(f*1000+0.5)) / 1000 }

// reconcile compares, per application, what the gateway's token counter
// charged with what the engine counted it served.
func (r *runner) reconcile(s *Summary) error {
	resp, err := r.client.Get(r.mockURL + "/mock/usage")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var u mockllm.Usage
	if err := json.NewDecoder(resp.Body).Decode(&u); err != nil {
		return err
	}
	for _, t := range r.tenants {
		charged, err := r.charged(t)
		if err != nil {
			return err
		}
		m := u.Tenants[t.id]
		if served := m.PromptTokens + m.CompletionTokens; served != charged {
			s.ReconciliationMismatches++
			if len(s.ReconciliationExamples) < 10 {
				s.ReconciliationExamples = append(s.ReconciliationExamples,
					fmt.Sprintf("%s: charged %d, served %d (%d requests, %d cancelled)", t.id, charged, served, m.Requests, m.Cancelled))
			}
		}
	}
	return nil
}

func (r *runner) charged(t *tenant) (int64, error) {
	req, _ := http.NewRequest(http.MethodGet, r.gwURL+"/bench/v1/quota", nil)
	req.Header.Set("Authorization", "Bearer "+t.key())
	resp, err := r.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"remaining":`) {
		return 0, fmt.Errorf("quota of %s: %d %s", t.id, resp.StatusCode, b)
	}
	return tokenLimit - jsonInt(b, `"remaining":`), nil
}

// write writes summary.json, samples.json (what the cross-mode plots read)
// and the plots.
func (r *runner) write(s *Summary) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(r.opts.Out, "summary.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	smp := r.samples()
	b, err = json.Marshal(smp)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(r.opts.Out, "samples.json"), b, 0o644); err != nil {
		return err
	}
	return r.plots(smp)
}

// samples are the per-request figures the plots draw.
type samples struct {
	Mode string `json:"mode"`
	// Burst is the burst's start and end, seconds.
	Burst [2]float64 `json:"burst"`
	// TTFT in ms of the victim and of the light tenants, during the burst;
	// VictimUnloaded before it.
	VictimUnloaded []float64 `json:"victim_unloaded"`
	Victim         []float64 `json:"victim"`
	Light          []float64 `json:"light"`
	// Work is token work per 10s window of the whole run, by tenant id, for
	// the hot, heavy, priority and victim tenants.
	Work map[string][]float64 `json:"work"`
}

func (r *runner) samples() *samples {
	smp := &samples{Mode: r.opts.Mode, Burst: [2]float64{r.ph.burstStart.Seconds(), r.ph.burstEnd.Seconds()}, Work: map[string][]float64{}}
	n := int(r.ph.end/window) + 1
	for i := range r.results {
		res := &r.results[i]
		t := r.tenants[res.tenant]
		if res.first < 0 {
			continue
		}
		ttft := float64(res.first-res.sent) / 1e6
		phase := r.ph.of(res.sent)
		switch {
		case t.role == roleVictim && phase == 0:
			smp.VictimUnloaded = append(smp.VictimUnloaded, ttft)
		case t.role == roleVictim && phase == 1:
			smp.Victim = append(smp.Victim, ttft)
		case t.role == roleLight && phase == 1 && res.stream:
			smp.Light = append(smp.Light, ttft)
		}
		if t.role == roleLight {
			continue
		}
		w := smp.Work[t.id]
		if w == nil {
			w = make([]float64, n)
			smp.Work[t.id] = w
		}
		if k := int(res.first / window); k < n {
			w[k] += res.work()
		}
	}
	return smp
}

// loadSamples reads a run's samples.json, nil when there is none.
func loadSamples(dir string) *samples {
	b, err := os.ReadFile(filepath.Join(dir, "samples.json"))
	if err != nil {
		return nil
	}
	var s samples
	if json.Unmarshal(b, &s) != nil {
		return nil
	}
	return &s
}

// tenantID is tenant i's application id.
func tenantID(i int) string { return fmt.Sprintf("t%03d", i) }
