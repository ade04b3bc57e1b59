package apikeyauth_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"net/url"
	"testing"

	"sluice/policies"
	"sluice/policies/apikeyauth"
	"sluice/policies/modelaccess"
	"sluice/policies/policytest"
	"sluice/sharedctx"
)

// BenchmarkAuthAndModelAccess measures the request phase of a chain of
// api-key-auth then model-access against an index of 10,000 keys. The per-call
// header map and SharedContext are rebuilt each iteration (the gateway builds
// them per request too) and are counted in the figures.
func BenchmarkAuthAndModelAccess(b *testing.B) {
	idx := policytest.Keys{}
	for i := range 10000 {
		idx[sha256.Sum256(fmt.Appendf(nil, "sk-sluice-%d", i))] = policies.Credential{
			ApplicationID: fmt.Sprintf("app-%d", i%200), KeyID: fmt.Sprintf("k%d", i)}
	}
	reg := policies.NewRegistry(apikeyauth.Definition(), modelaccess.Definition())
	ch, err := reg.BuildChain(policies.RouteInfo{RouteName: "r1"}, []policies.EntrySpec{
		{Name: apikeyauth.Name},
		{Name: modelaccess.Name, Params: map[string]any{
			"allow":          []any{"gpt-4o-mini", "claude-3-5-*"},
			"perApplication": map[string]any{"app-7": []any{"gpt-4o", "o3*", "claude-*"}},
		}},
	}, &policies.Services{Keys: idx}, nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	newCall := func() *policies.Call {
		sh := sharedctx.New("req", "r1", "api", "openai")
		sh.SetServedModel("claude-3-5-sonnet-latest")
		return &policies.Call{Ctx: ctx, Shared: sh, Request: &policies.Request{
			Header: http.Header{"Authorization": {"Bearer sk-sluice-7"}}, Query: url.Values{}}}
	}
	// setup-only is the cost of newCall alone, to subtract from chain.
	b.Run("setup-only", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if newCall() == nil {
				b.Fatal("nil call")
			}
		}
	})
	b.Run("chain", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if gerr := ch.Start(newCall()).Request(); gerr != nil {
				b.Fatal(gerr)
			}
		}
	})
}
