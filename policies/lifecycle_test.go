package policies_test

import (
	"errors"
	"strings"
	"sync"
	"testing"

	"sluice/deployment"
	"sluice/gwerror"
	"sluice/policies"
)

// closer is a test policy that records its Close calls in a shared log.
type closer struct {
	tag    string
	log    *closeLog
	fail   string // "error" or "panic": how Close fails
	closes int
}

type closerParams struct {
	Tag string `json:"tag"`
	// Fail makes Close fail: "error" or "panic".
	Fail string `json:"fail,omitempty"`
	// BuildError fails the constructor.
	BuildError bool `json:"buildError,omitempty"`
}

type closeLog struct {
	mu    sync.Mutex
	order []string
	built []*closer
}

func (c *closer) OnRequest(*policies.Call) *gwerror.Error { return nil }

func (c *closer) Close() error {
	c.log.mu.Lock()
	c.closes++
	c.log.order = append(c.log.order, c.tag)
	c.log.mu.Unlock()
	switch c.fail {
	case "error":
		return errors.New("close of " + c.tag + " failed")
	case "panic":
		panic("close of " + c.tag + " panics")
	}
	return nil
}

// plain has no Close.
type plain struct{}

func (plain) OnRequest(*policies.Call) *gwerror.Error { return nil }

func closerRegistry(log *closeLog) *policies.Registry {
	needsK := policies.Define("needs-k", "v1", "reads k, which nobody writes", func(*struct{}, policies.RouteInfo, *policies.Services) (policies.Policy, error) {
		return plain{}, nil
	})
	needsK.Reads = []policies.MetaKey{{Key: "k", Phase: policies.PhaseRequest}}
	return policies.NewRegistry(
		policies.Define("closer", "v1", "records Close", func(p *closerParams, _ policies.RouteInfo, _ *policies.Services) (policies.Policy, error) {
			if p.BuildError {
				return nil, errors.New("constructor fails on purpose")
			}
			c := &closer{tag: p.Tag, log: log, fail: p.Fail}
			log.built = append(log.built, c)
			return c, nil
		}),
		policies.Define("plain", "v1", "no Close", func(*struct{}, policies.RouteInfo, *policies.Services) (policies.Policy, error) {
			return plain{}, nil
		}),
		needsK,
	)
}

func closerSpec(tag string, extra ...string) policies.EntrySpec {
	p := map[string]any{"tag": tag}
	for i := 0; i+1 < len(extra); i += 2 {
		if extra[i] == "buildError" {
			p[extra[i]] = true
		} else {
			p[extra[i]] = extra[i+1]
		}
	}
	return policies.EntrySpec{Name: "closer", Version: "v1", Params: p}
}

func TestChainClose(t *testing.T) {
	cases := []struct {
		name      string
		specs     []policies.EntrySpec
		wantOrder string
		wantErr   []string // substrings of Close's error; none: nil
	}{
		{name: "reverse list order, plain members skipped",
			specs:     []policies.EntrySpec{closerSpec("a"), {Name: "plain"}, closerSpec("b"), closerSpec("c")},
			wantOrder: "c,b,a"},
		{name: "no closers", specs: []policies.EntrySpec{{Name: "plain"}}},
		{name: "an error does not stop the others",
			specs:     []policies.EntrySpec{closerSpec("a"), closerSpec("b", "fail", "error"), closerSpec("c")},
			wantOrder: "c,b,a", wantErr: []string{"close of b failed", "closer/v1 (chain position 1"}},
		{name: "a panic is recovered and returned",
			specs:     []policies.EntrySpec{closerSpec("a", "fail", "panic"), closerSpec("b", "fail", "error")},
			wantOrder: "b,a", wantErr: []string{"close panicked: close of a panics", "close of b failed"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			log := &closeLog{}
			ch, err := closerRegistry(log).BuildChain(policies.RouteInfo{RouteName: "r"}, tc.specs, quietServices(), nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(log.order) != 0 {
				t.Fatalf("closed while building: %v", log.order)
			}
			err = ch.Close()
			if got := strings.Join(log.order, ","); got != tc.wantOrder {
				t.Fatalf("close order %q, want %q", got, tc.wantOrder)
			}
			switch {
			case len(tc.wantErr) == 0 && err != nil:
				t.Fatalf("Close: %v", err)
			case len(tc.wantErr) > 0 && err == nil:
				t.Fatalf("Close returned nil, want an error with %q", tc.wantErr)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("Close error %q does not contain %q", err, w)
				}
			}
			// Later calls do nothing: every instance is closed exactly once.
			if err := ch.Close(); err != nil {
				t.Fatalf("second Close: %v", err)
			}
			for _, c := range log.built {
				if c.closes != 1 {
					t.Fatalf("instance %s closed %d times", c.tag, c.closes)
				}
			}
		})
	}
}

// TestFailedBuildClosesBuiltInstances: the instances built before an entry
// fails (in its constructor, the metadata check or a later stage) are closed
// once; nothing that was not built is.
func TestFailedBuildClosesBuiltInstances(t *testing.T) {
	cases := []struct {
		name      string
		specs     []policies.EntrySpec
		wantOrder string
	}{
		{name: "constructor fails",
			specs:     []policies.EntrySpec{closerSpec("a"), closerSpec("b"), closerSpec("c", "buildError", "1"), closerSpec("d")},
			wantOrder: "b,a"},
		{name: "params fail to decode",
			specs:     []policies.EntrySpec{closerSpec("a"), {Name: "closer", Params: map[string]any{"tag": 1}}},
			wantOrder: "a"},
		{name: "metadata check fails after every entry was built",
			specs:     []policies.EntrySpec{closerSpec("a"), {Name: "needs-k"}, closerSpec("b")},
			wantOrder: "b,a"},
		{name: "first entry fails", specs: []policies.EntrySpec{closerSpec("a", "buildError", "1")}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			log := &closeLog{}
			if _, err := closerRegistry(log).BuildChain(policies.RouteInfo{RouteName: "r"}, tc.specs, quietServices(), nil); err == nil {
				t.Fatal("chain built")
			}
			if got := strings.Join(log.order, ","); got != tc.wantOrder {
				t.Fatalf("closed %q, want %q", got, tc.wantOrder)
			}
			for _, c := range log.built {
				if c.closes != 1 {
					t.Fatalf("instance %s closed %d times", c.tag, c.closes)
				}
			}
		})
	}
}

// TestCheckClosesWhatItBuilt: the dry-run check builds every route's chain
// with stand-in services and closes each one once, those of a document with
// a bad route included.
func TestCheckClosesWhatItBuilt(t *testing.T) {
	entry := func(tag string, extra map[string]any) deployment.PolicyEntry {
		p := map[string]any{"tag": tag}
		for k, v := range extra {
			p[k] = v
		}
		return deployment.PolicyEntry{Name: "closer", Version: "v1", Params: p}
	}
	d := &deployment.Deployment{
		APIVersion: "sluice/v1",
		Providers:  []deployment.Provider{{Name: "p", Type: "openai", URL: "http://127.0.0.1:1"}},
		Routes: []deployment.Route{
			{Name: "a", Context: "/a", Provider: "p", Policies: []deployment.PolicyEntry{entry("a1", nil), entry("a2", nil)}},
			{Name: "b", Context: "/b", Provider: "p", Policies: []deployment.PolicyEntry{entry("b1", nil), entry("b2", map[string]any{"buildError": true})}},
			{Name: "c", Context: "/c", Provider: "p", Policies: []deployment.PolicyEntry{entry("c1", nil)}},
		},
	}
	log := &closeLog{}
	err := policies.NewChecker(closerRegistry(log)).CheckChains(d)
	if err == nil || !strings.Contains(err.Error(), "constructor fails on purpose") {
		t.Fatalf("CheckChains: %v, want route b's failure", err)
	}
	if got := strings.Join(log.order, ","); got != "a2,a1,b1,c1" {
		t.Fatalf("closed %q, want a2,a1,b1,c1", got)
	}
	for _, c := range log.built {
		if c.closes != 1 {
			t.Fatalf("instance %s closed %d times", c.tag, c.closes)
		}
	}
}
