package modelaccess_test

import (
	"crypto/sha256"
	"net/http"
	"testing"

	"sluice/policies"
	"sluice/policies/apikeyauth"
	"sluice/policies/modelaccess"
	"sluice/policies/policytest"
)

// TestAfterAPIKeyAuth runs both policies in one chain: model-access sees the
// application id api-key-auth wrote in the same request phase.
func TestAfterAPIKeyAuth(t *testing.T) {
	reg := policies.NewRegistry(apikeyauth.Definition(), modelaccess.Definition())
	svc := &policies.Services{Keys: policytest.Keys{
		sha256.Sum256([]byte("key-a")): {ApplicationID: "app-a", KeyID: "a"},
		sha256.Sum256([]byte("key-b")): {ApplicationID: "app-b", KeyID: "b"},
	}}
	ch, err := reg.BuildChain(policies.RouteInfo{RouteName: "r"}, []policies.EntrySpec{
		{Name: apikeyauth.Name},
		{Name: modelaccess.Name, Params: map[string]any{
			"allow":          []any{"small-*"},
			"perApplication": map[string]any{"app-a": []any{"big-1"}},
		}},
	}, svc, nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		key, model string
		wantStatus int
	}{
		{"key-a", "big-1", 0},
		{"key-a", "small-1", http.StatusForbidden},
		{"key-b", "small-1", 0},
		{"key-b", "big-1", http.StatusForbidden},
		{"key-x", "small-1", http.StatusUnauthorized},
	}
	for _, tt := range tests {
		t.Run(tt.key+"/"+tt.model, func(t *testing.T) {
			call := policytest.NewCall(policytest.Req{Route: "r", Model: tt.model,
				Header: http.Header{"Authorization": {"Bearer " + tt.key}}})
			gerr := ch.Start(call).Request()
			switch {
			case tt.wantStatus == 0 && gerr != nil:
				t.Fatalf("rejected: %v", gerr)
			case tt.wantStatus != 0 && (gerr == nil || gerr.Status != tt.wantStatus):
				t.Fatalf("got %v, want status %d", gerr, tt.wantStatus)
			}
		})
	}
}

// TestModelAccessBeforeAuthLoads documents that the read is optional: listing
// model-access first is allowed (it then sees no application id).
func TestModelAccessBeforeAuthLoads(t *testing.T) {
	reg := policies.NewRegistry(apikeyauth.Definition(), modelaccess.Definition())
	_, err := reg.BuildChain(policies.RouteInfo{RouteName: "r"}, []policies.EntrySpec{
		{Name: modelaccess.Name}, {Name: apikeyauth.Name},
	}, &policies.Services{Keys: policytest.Keys{}}, nil)
	if err != nil {
		t.Fatalf("optional read rejected at load: %v", err)
	}
}
