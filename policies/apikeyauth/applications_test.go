package apikeyauth_test

import (
	"net/http"
	"testing"

	"sluice/gwerror"
	"sluice/sharedctx"
)

// The applications param admits listed applications only; [] admits none
// and an absent list every application.
func TestApplicationsAllowList(t *testing.T) {
	tests := []struct {
		name   string
		params map[string]any
		key    string
		want   int // 0: admitted
	}{
		{"absent admits all", nil, "other-key", 0},
		{"listed", map[string]any{"applications": []any{"app-a"}}, goodKey, 0},
		{"not listed", map[string]any{"applications": []any{"app-a"}}, "other-key", http.StatusForbidden},
		{"empty list admits none", map[string]any{"applications": []any{}}, goodKey, http.StatusForbidden},
		{"an invalid key is still 401", map[string]any{"applications": []any{"app-a"}}, "nope", http.StatusUnauthorized},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ch := buildChain(t, tt.params)
			call := newCall(http.Header{"Authorization": {"Bearer " + tt.key}}, nil)
			run := ch.Start(call)
			gerr := run.Request()
			switch {
			case tt.want == 0 && gerr != nil:
				t.Fatalf("rejected: %v", gerr)
			case tt.want != 0 && (gerr == nil || gerr.Status != tt.want):
				t.Fatalf("got %v, want status %d", gerr, tt.want)
			case tt.want == http.StatusForbidden:
				if gerr.Code != gwerror.CodeApplicationNotAllowed {
					t.Fatalf("code %q", gerr.Code)
				}
				if id := call.Shared.String(sharedctx.KeyApplicationID); id != "" {
					t.Fatalf("a refused application's id was written: %q", id)
				}
				if call.Request.Header.Get("Authorization") != "" {
					t.Fatal("the key was not stripped on refusal")
				}
			}
		})
	}
}
