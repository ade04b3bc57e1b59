package fairadmission_test

import (
	"testing"

	"sluice/admission"
	"sluice/policies"
	"sluice/policies/ratelimit/ratelimittest"
)

// fastPath is a policy instance below its capacity and one request's call,
// reused (its prompt estimate cached, as the limit policies before it leave
// it), and the request's final outcome.
func fastPath(tb testing.TB) (policies.Policy, policies.Finalizer, *policies.Call, *policies.Outcome) {
	e := newEnv(tb, capacity(admission.Capacity{MaxConcurrent: 1 << 20, MaxTokensInFlight: 1 << 50}))
	ch := e.chain(nil)
	p := ch.Entries()[0].Policy
	call := e.Call(route, ratelimittest.Req{App: "a", MaxTokens: 256})
	policies.PromptTokens(call, e.Svc.Tokens)
	end := ratelimittest.Completed(ratelimittest.Usage(10, 20, 1))
	call.Shared.SetUsage(end.Usage)
	return p, p.(policies.Finalizer), call, &end.Outcome
}

// BenchmarkFastPath is one request below capacity through the policy:
// request phase (ticket, Admit, hold) and final (Done).
func BenchmarkFastPath(b *testing.B) {
	p, f, call, o := fastPath(b)
	b.ReportAllocs()
	for b.Loop() {
		if gerr := p.OnRequest(call); gerr != nil {
			b.Fatal(gerr)
		}
		f.OnFinal(call, o)
	}
}

// TestFastPathAllocations: below capacity the policy allocates nothing per
// request.
func TestFastPathAllocations(t *testing.T) {
	p, f, call, o := fastPath(t)
	if n := testing.AllocsPerRun(1000, func() {
		if gerr := p.OnRequest(call); gerr != nil {
			t.Fatal(gerr)
		}
		f.OnFinal(call, o)
	}); n != 0 {
		t.Fatalf("%v allocations per request on the fast path; want 0", n)
	}
}
