package policies_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"

	"sluice/gwerror"
	"sluice/policies"
	"sluice/policies/policytest"
	"sluice/sharedctx"
	"sluice/sse"
)

// recorder is a test policy that records every phase call it receives.
type recorder struct {
	id     string
	log    *[]string
	reject bool
	panics string // phase name in which to panic
	finals int
	last   policies.Outcome
}

type recParams struct {
	Reject bool   `json:"reject,omitempty"`
	Panic  string `json:"panic,omitempty" jsonschema:"enum=request,enum=response,enum=stream,enum=final"`
	Tag    string `json:"tag,omitempty"`
}

func (r *recorder) OnRequest(c *policies.Call) *gwerror.Error {
	*r.log = append(*r.log, "req:"+r.id)
	if r.panics == "request" {
		panic("boom")
	}
	if r.reject {
		return gwerror.New(429, gwerror.TypeRateLimit, gwerror.CodeRateLimitExceeded, "no")
	}
	return nil
}

func (r *recorder) OnResponse(c *policies.Call, resp *policies.Response) *gwerror.Error {
	*r.log = append(*r.log, "resp:"+r.id)
	if r.panics == "response" {
		panic("boom")
	}
	return nil
}

func (r *recorder) OnStreamEvent(c *policies.Call, ev *sse.Event) {
	*r.log = append(*r.log, "ev:"+r.id)
	if r.panics == "stream" {
		panic("boom")
	}
}

func (r *recorder) OnFinal(c *policies.Call, o *policies.Outcome) {
	*r.log = append(*r.log, "final:"+r.id+":"+o.Kind.String())
	r.finals++
	r.last = *o
	if r.panics == "final" {
		panic("boom")
	}
}

type harness struct {
	log  []string
	recs []*recorder
}

func (h *harness) registry() *policies.Registry {
	def := policies.Define("recorder", "v1", "records phases", func(p *recParams, route policies.RouteInfo, svc *policies.Services) (policies.Policy, error) {
		r := &recorder{id: p.Tag, log: &h.log, reject: p.Reject, panics: p.Panic}
		h.recs = append(h.recs, r)
		return r, nil
	})
	writer := policies.Define("writer", "v1", "writes k", func(p *struct{}, route policies.RouteInfo, svc *policies.Services) (policies.Policy, error) {
		return &recorder{log: &h.log}, nil
	})
	writer.Writes = []policies.MetaKey{{Key: "k", Phase: policies.PhaseFinal}}
	reader := policies.Define("reader", "v1", "reads k", func(p *struct{}, route policies.RouteInfo, svc *policies.Services) (policies.Policy, error) {
		return &recorder{log: &h.log}, nil
	})
	reader.Reads = []policies.MetaKey{{Key: "k", Phase: policies.PhaseFinal}}
	return policies.NewRegistry(def, writer, reader)
}

func quietServices() *policies.Services {
	return &policies.Services{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

func (h *harness) chain(t *testing.T, specs ...policies.EntrySpec) *policies.Chain {
	t.Helper()
	ch, err := h.registry().BuildChain(policies.RouteInfo{RouteName: "r"}, specs, quietServices(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

func rec(tag string, extra map[string]any) policies.EntrySpec {
	p := map[string]any{"tag": tag}
	for k, v := range extra {
		p[k] = v
	}
	return policies.EntrySpec{Name: "recorder", Version: "v1", Params: p}
}

func TestRunnerOrderAndExactlyOnceFinal(t *testing.T) {
	cases := []struct {
		name     string
		specs    []policies.EntrySpec
		drive    func(run *policies.Run)
		want     string
		wantKind []policies.OutcomeKind // per recorder, 0 = no final expected
	}{
		{
			name:  "success",
			specs: []policies.EntrySpec{rec("a", nil), rec("b", nil)},
			drive: func(run *policies.Run) {
				if err := run.Request(); err != nil {
					t.Fatal(err)
				}
				run.MarkUpstream()
				run.Response(&policies.Response{Status: 200})
				run.StreamEvent(&sse.Event{Data: []byte("x")})
				run.Finish(policies.Outcome{Kind: policies.Completed, Status: 200})
				run.Finish(policies.Outcome{Kind: policies.UpstreamFailed})
				run.Abort()
			},
			want:     "req:a req:b resp:b resp:a ev:b ev:a final:b:completed final:a:completed",
			wantKind: []policies.OutcomeKind{policies.Completed, policies.Completed},
		},
		{
			name:  "rejected by a later policy",
			specs: []policies.EntrySpec{rec("a", nil), rec("b", map[string]any{"reject": true}), rec("c", nil)},
			drive: func(run *policies.Run) {
				err := run.Request()
				if err == nil || err.Status != 429 || err.Policy != "recorder" {
					t.Fatalf("want 429 from recorder, got %v", err)
				}
				run.Abort()
			},
			want:     "req:a req:b final:b:rejected final:a:rejected",
			wantKind: []policies.OutcomeKind{policies.Rejected, policies.Rejected, 0},
		},
		{
			name:  "panic in request phase",
			specs: []policies.EntrySpec{rec("a", nil), rec("b", map[string]any{"panic": "request"}), rec("c", nil)},
			drive: func(run *policies.Run) {
				err := run.Request()
				if err == nil || err.Status != 500 || err.Code != gwerror.CodeInternal {
					t.Fatalf("want 500 internal, got %v", err)
				}
			},
			want:     "req:a req:b final:b:failed final:a:failed",
			wantKind: []policies.OutcomeKind{policies.Failed, policies.Failed, 0},
		},
		{
			name:  "panic in response phase turns outcome into failed",
			specs: []policies.EntrySpec{rec("a", nil), rec("b", map[string]any{"panic": "response"})},
			drive: func(run *policies.Run) {
				_ = run.Request()
				run.MarkUpstream()
				if err := run.Response(&policies.Response{Status: 200}); err == nil || err.Status != 500 {
					t.Fatalf("want 500, got %v", err)
				}
				run.Finish(policies.Outcome{Kind: policies.Completed})
			},
			want:     "req:a req:b resp:b final:b:failed final:a:failed",
			wantKind: []policies.OutcomeKind{policies.Failed, policies.Failed},
		},
		{
			name:  "panic in final phase does not starve the others",
			specs: []policies.EntrySpec{rec("a", nil), rec("b", map[string]any{"panic": "final"})},
			drive: func(run *policies.Run) {
				_ = run.Request()
				run.Finish(policies.Outcome{Kind: policies.UpstreamFailed, Status: 503})
			},
			want:     "req:a req:b final:b:upstream_failed final:a:upstream_failed",
			wantKind: []policies.OutcomeKind{policies.UpstreamFailed, policies.UpstreamFailed},
		},
		{
			name:  "abort on cancelled context",
			specs: []policies.EntrySpec{rec("a", nil)},
			drive: func(run *policies.Run) {
				_ = run.Request()
				run.MarkUpstream()
				run.Abort()
			},
			want:     "req:a final:a:cancelled",
			wantKind: []policies.OutcomeKind{policies.Cancelled},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := &harness{}
			ch := h.chain(t, tc.specs...)
			call := policytest.NewCall(policytest.Req{Route: "r"})
			if tc.name == "abort on cancelled context" {
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				call.Ctx = ctx
			}
			run := ch.Start(call)
			tc.drive(run)
			if got := strings.Join(h.log, " "); got != tc.want {
				t.Fatalf("phases:\n got %s\nwant %s", got, tc.want)
			}
			for i, r := range h.recs {
				want := tc.wantKind[i]
				if want == 0 {
					if r.finals != 0 {
						t.Errorf("policy %s: got %d finals, want none", r.id, r.finals)
					}
					continue
				}
				if r.finals != 1 || r.last.Kind != want {
					t.Errorf("policy %s: finals=%d kind=%v, want 1 x %v", r.id, r.finals, r.last.Kind, want)
				}
			}
		})
	}
}

func TestRejectedByIndex(t *testing.T) {
	h := &harness{}
	ch := h.chain(t, rec("a", nil), rec("b", map[string]any{"reject": true}))
	run := ch.Start(policytest.NewCall(policytest.Req{Route: "r"}))
	_ = run.Request()
	if h.recs[0].last.RejectedBy != 1 || h.recs[1].last.RejectedBy != 1 {
		t.Fatalf("RejectedBy = %d,%d; want 1,1", h.recs[0].last.RejectedBy, h.recs[1].last.RejectedBy)
	}
	if h.recs[0].last.WentUpstream {
		t.Fatal("rejected request must not be marked upstream")
	}
}

func TestBuildChainErrors(t *testing.T) {
	h := &harness{}
	reg := h.registry()
	cases := []struct {
		name  string
		specs []policies.EntrySpec
		field string
		path  string
		msg   string
	}{
		{"unknown policy", []policies.EntrySpec{{Name: "nope"}}, "name", "", "unknown policy"},
		{"unknown version", []policies.EntrySpec{{Name: "recorder", Version: "v9"}}, "version", "", "no version"},
		{"unknown param", []policies.EntrySpec{{Name: "recorder", Params: map[string]any{"bogus": 1}}}, "params", "bogus", ""},
		{"wrong type", []policies.EntrySpec{{Name: "recorder", Params: map[string]any{"reject": "yes"}}}, "params", "reject", ""},
		{"enum", []policies.EntrySpec{{Name: "recorder", Params: map[string]any{"panic": "never"}}}, "params", "panic", ""},
		{"reader before writer in final phase", []policies.EntrySpec{{Name: "writer"}, {Name: "reader"}}, "", "", "list writer after reader"},
		{"reader without writer", []policies.EntrySpec{{Name: "reader"}}, "", "", "add a policy that writes it"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := reg.BuildChain(policies.RouteInfo{RouteName: "r"}, tc.specs, quietServices(), nil)
			var ee *policies.EntryError
			if !errors.As(err, &ee) {
				t.Fatalf("want *EntryError, got %T %v", err, err)
			}
			if ee.Field != tc.field {
				t.Errorf("field = %q, want %q (%v)", ee.Field, tc.field, err)
			}
			if tc.path != "" {
				if len(ee.Params) == 0 || strings.Join(ee.Params[0].Path, ".") != tc.path {
					t.Errorf("params path = %v, want %s", ee.Params, tc.path)
				}
			}
			if tc.msg != "" && !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("error %q does not contain %q", err, tc.msg)
			}
		})
	}
	// The right order loads.
	if _, err := reg.BuildChain(policies.RouteInfo{RouteName: "r"}, []policies.EntrySpec{{Name: "reader"}, {Name: "writer"}}, quietServices(), nil); err != nil {
		t.Fatalf("reader then writer should load: %v", err)
	}
}

func TestInstanceIDs(t *testing.T) {
	a := policies.InstanceID("p", "v1", map[string]any{"x": 1, "y": 2}, "r", 0)
	b := policies.InstanceID("p", "v1", map[string]any{"y": 2, "x": 1}, "r", 0)
	if a != b {
		t.Fatal("instance id must not depend on map order")
	}
	distinct := map[string]bool{a: true}
	for _, id := range []string{
		policies.InstanceID("p", "v1", map[string]any{"x": 1, "y": 3}, "r", 0),
		policies.InstanceID("p", "v1", map[string]any{"x": 1, "y": 2}, "r2", 0),
		policies.InstanceID("p", "v1", map[string]any{"x": 1, "y": 2}, "r", 1),
		policies.InstanceID("q", "v1", map[string]any{"x": 1, "y": 2}, "r", 0),
	} {
		if distinct[id] {
			t.Fatalf("collision: %s", id)
		}
		distinct[id] = true
	}
	h := &harness{}
	ch := h.chain(t, rec("a", nil), rec("a", nil))
	e := ch.Entries()
	if e[0].Route.InstanceID == e[1].Route.InstanceID {
		t.Fatal("two identical entries at different positions must have different instance ids")
	}
	if sharedctx.InstanceKey(e[0].Route.InstanceID, "k") == sharedctx.InstanceKey(e[1].Route.InstanceID, "k") {
		t.Fatal("instance keys collide")
	}
}
