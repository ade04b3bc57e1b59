package policies_test

import (
	"strings"
	"testing"

	"sluice/policies"
	"sluice/policies/policytest"
	"sluice/sse"
)

func onResources(spec policies.EntrySpec, f *policies.ResourceFilter) policies.EntrySpec {
	spec.Resources = f
	return spec
}

// The runner skips entries not attached to the request's resource: they get
// no phase at all, not even the final one; the others keep the onion order.
func TestRunnerSkipsEntriesOfOtherResources(t *testing.T) {
	tests := []struct {
		path string
		want string
	}{
		{"/v1/chat/completions", "req:all req:chat req:notemb resp:notemb resp:chat resp:all ev:notemb ev:chat ev:all final:notemb final:chat final:all"},
		{"/v1/chat/completions/", "req:all req:chat req:notemb resp:notemb resp:chat resp:all ev:notemb ev:chat ev:all final:notemb final:chat final:all"},
		{"/v1/embeddings", "req:all resp:all ev:all final:all"},
		{"/v1/messages", "req:all req:notemb resp:notemb resp:all ev:notemb ev:all final:notemb final:all"},
		// Not a proxied resource (the quota report): include never matches,
		// exclude does.
		{"/v1/quota", "req:all req:notemb resp:notemb resp:all ev:notemb ev:all final:notemb final:all"},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			h := &harness{}
			ch := h.chain(t,
				rec("all", nil),
				onResources(rec("chat", nil), &policies.ResourceFilter{Include: []string{"/chat/completions"}}),
				onResources(rec("notemb", nil), &policies.ResourceFilter{Exclude: []string{"/embeddings"}}),
			)
			call := policytest.NewCall(policytest.Req{Route: "r"})
			call.Request.Path = tt.path
			run := ch.Start(call)
			if err := run.Request(); err != nil {
				t.Fatal(err)
			}
			run.Response(&policies.Response{Status: 200})
			run.StreamEvent(&sse.Event{Data: []byte("x")})
			run.Finish(policies.Outcome{Kind: policies.Completed})
			got := strings.Join(h.log, " ")
			got = strings.NewReplacer(":completed", "").Replace(got)
			if got != tt.want {
				t.Fatalf("phases\n got %s\nwant %s", got, tt.want)
			}
			n := strings.Count(tt.want, "req:")
			if got := len(ch.EntriesFor(call)); got != n {
				t.Fatalf("EntriesFor: %d entries, want %d", got, n)
			}
		})
	}
}

// A rejection by an attached entry reports its chain index, and only the
// entries that ran get the final call.
func TestRunnerRejectionWithFilters(t *testing.T) {
	h := &harness{}
	ch := h.chain(t,
		onResources(rec("skipped", nil), &policies.ResourceFilter{Include: []string{"/embeddings"}}),
		rec("a", nil),
		rec("deny", map[string]any{"reject": true}),
		rec("never", nil),
	)
	call := policytest.NewCall(policytest.Req{Route: "r"})
	call.Request.Path = "/v1/chat/completions"
	run := ch.Start(call)
	if gerr := run.Request(); gerr == nil {
		t.Fatal("not rejected")
	}
	if got := strings.Join(h.log, " "); got != "req:a req:deny final:deny:rejected final:a:rejected" {
		t.Fatalf("phases: %s", got)
	}
	for _, r := range h.recs {
		if r.id == "a" && r.last.RejectedBy != 2 {
			t.Fatalf("RejectedBy %d, want the chain index 2", r.last.RejectedBy)
		}
	}
}

// A writer attached to fewer resources than its reader does not satisfy the
// reader's metadata needs.
func TestMetadataCheckHonoursFilters(t *testing.T) {
	h := &harness{}
	reg := h.registry()
	reader := policies.EntrySpec{Name: "reader", Version: "v1"}
	writer := policies.EntrySpec{Name: "writer", Version: "v1"}
	chat := &policies.ResourceFilter{Include: []string{"/chat/completions"}}
	tests := []struct {
		name string
		r, w *policies.ResourceFilter
		ok   bool
	}{
		{"both everywhere", nil, nil, true},
		{"writer everywhere", chat, nil, true},
		{"same filter", chat, chat, true},
		{"writer narrower", nil, chat, false},
		{"writer elsewhere", chat, &policies.ResourceFilter{Include: []string{"/embeddings"}}, false},
		{"writer excludes what reader skips", &policies.ResourceFilter{Exclude: []string{"/embeddings"}}, &policies.ResourceFilter{Exclude: []string{"/embeddings"}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := reg.BuildChain(policies.RouteInfo{RouteName: "r"},
				[]policies.EntrySpec{onResources(reader, tt.r), onResources(writer, tt.w)}, quietServices(), nil)
			if (err == nil) != tt.ok {
				t.Fatalf("err %v, want ok=%v", err, tt.ok)
			}
		})
	}
}

func TestResourceOf(t *testing.T) {
	for in, want := range map[string]string{
		"/v1/chat/completions":  "/chat/completions",
		"/v1/chat/completions/": "/chat/completions",
		"/v1/messages":          "/messages",
		"/v1/quota":             "/quota",
		"/other":                "/other",
	} {
		if got := policies.ResourceOf(in); got != want {
			t.Errorf("ResourceOf(%q) = %q, want %q", in, got, want)
		}
	}
}
