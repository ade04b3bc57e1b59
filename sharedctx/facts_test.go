package sharedctx_test

import (
	"testing"

	"sluice/llmapi"
	"sluice/sharedctx"
)

func TestServedModel(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  []string // SetServedModel calls, in order
		want string
	}{
		{name: "unset", want: ""},
		{name: "set", set: []string{"gpt-4o"}, want: "gpt-4o"},
		{name: "the last set wins", set: []string{"gpt-4o", "o3"}, want: "o3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sh := sharedctx.New("r", "route", "api", "p")
			for _, m := range tc.set {
				sh.SetServedModel(m)
			}
			if got := sh.ServedModel(); got != tc.want {
				t.Fatalf("ServedModel = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestUsage(t *testing.T) {
	u := &llmapi.Usage{PromptTokens: 10, CompletionTokens: 5, TotalTokens: 15, Authoritative: true}
	other := &llmapi.Usage{PromptTokens: 1, Counted: true}
	for _, tc := range []struct {
		name  string
		setup func(sh *sharedctx.SharedContext)
		want  *llmapi.Usage
	}{
		{name: "unset", setup: func(*sharedctx.SharedContext) {}, want: nil},
		{name: "set", setup: func(sh *sharedctx.SharedContext) { sh.SetUsage(u) }, want: u},
		{name: "replaced", setup: func(sh *sharedctx.SharedContext) { sh.SetUsage(other); sh.SetUsage(u) }, want: u},
		{name: "cleared", setup: func(sh *sharedctx.SharedContext) { sh.SetUsage(u); sh.SetUsage(nil) }, want: nil},
		{name: "a value that is not the gateway's is no usage", setup: func(sh *sharedctx.SharedContext) {
			sh.Metadata[sharedctx.KeyLLMUsage] = *u
		}, want: nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sh := sharedctx.New("r", "route", "api", "p")
			tc.setup(sh)
			if got := sh.Usage(); got != tc.want {
				t.Fatalf("Usage = %+v, want %+v", got, tc.want)
			}
			if _, inMeta := sh.Metadata[sharedctx.KeyLLMUsage].(*llmapi.Usage); inMeta != (tc.want != nil) {
				t.Fatalf("x-llm-usage in metadata = %v, want %v", inMeta, tc.want != nil)
			}
		})
	}
}

func TestCost(t *testing.T) {
	for _, tc := range []struct {
		name       string
		setup      func(sh *sharedctx.SharedContext)
		wantMicros int64
		wantSet    bool
		wantStatus string
	}{
		{name: "unset", setup: func(*sharedctx.SharedContext) {}},
		{name: "calculated", setup: func(sh *sharedctx.SharedContext) { sh.SetCost(7500, sharedctx.CostStatusCalculated) },
			wantMicros: 7500, wantSet: true, wantStatus: "calculated"},
		{name: "zero is a cost", setup: func(sh *sharedctx.SharedContext) { sh.SetCost(0, "no_usage") },
			wantSet: true, wantStatus: "no_usage"},
		{name: "exact above 32 USD", setup: func(sh *sharedctx.SharedContext) { sh.SetCost(32_000_002, sharedctx.CostStatusEstimated) },
			wantMicros: 32_000_002, wantSet: true, wantStatus: "estimated"},
		{name: "the last set wins", setup: func(sh *sharedctx.SharedContext) {
			sh.SetCost(1, sharedctx.CostStatusEstimated)
			sh.SetCost(2, sharedctx.CostStatusCalculated)
		}, wantMicros: 2, wantSet: true, wantStatus: "calculated"},
		{name: "a float is not a cost", setup: func(sh *sharedctx.SharedContext) { sh.Metadata[sharedctx.KeyLLMCost] = 0.0075 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sh := sharedctx.New("r", "route", "api", "p")
			tc.setup(sh)
			m, ok := sh.CostMicroUSD()
			if m != tc.wantMicros || ok != tc.wantSet {
				t.Fatalf("CostMicroUSD = %d, %v; want %d, %v", m, ok, tc.wantMicros, tc.wantSet)
			}
			if got := sh.CostStatus(); got != tc.wantStatus {
				t.Fatalf("CostStatus = %q, want %q", got, tc.wantStatus)
			}
		})
	}
}
