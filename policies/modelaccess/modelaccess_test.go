package modelaccess_test

import (
	"net/http"
	"strings"
	"testing"

	"sluice/gwerror"
	"sluice/llmapi"
	"sluice/policies"
	"sluice/policies/modelaccess"
	"sluice/policies/policytest"
)

func buildChain(t testing.TB, params map[string]any) *policies.Chain {
	t.Helper()
	return policytest.Chain(t, []policies.Definition{modelaccess.Definition()}, nil,
		policies.EntrySpec{Name: modelaccess.Name, Version: modelaccess.Version, Params: params})
}

func newCall(app, model string) *policies.Call {
	return policytest.NewCall(policytest.Req{App: app, Model: model})
}

func TestModelAccess(t *testing.T) {
	mixed := map[string]any{
		"allow": []any{"gpt-4o-mini", "claude-3-5-*"},
		"perApplication": map[string]any{
			"app-a":    []any{"gpt-4o", "o3*"},
			"app-open": []any{},
			"app-star": []any{"*"},
		},
	}
	tests := []struct {
		name   string
		params map[string]any
		app    string
		model  string
		allow  bool
	}{
		{name: "no params allows all", model: "anything", allow: true},
		{name: "empty allow allows all", params: map[string]any{"allow": []any{}}, app: "x", model: "gpt-4o", allow: true},
		{name: "exact match", params: mixed, app: "app-z", model: "gpt-4o-mini", allow: true},
		{name: "exact is not a prefix", params: mixed, app: "app-z", model: "gpt-4o-mini-2024", allow: false},
		{name: "prefix match", params: mixed, app: "app-z", model: "claude-3-5-sonnet-latest", allow: true},
		{name: "prefix itself", params: mixed, app: "app-z", model: "claude-3-5-", allow: true},
		{name: "prefix miss", params: mixed, app: "app-z", model: "claude-3-opus", allow: false},
		{name: "case sensitive", params: mixed, app: "app-z", model: "GPT-4o-mini", allow: false},
		{name: "no app uses allow", params: mixed, model: "gpt-4o-mini", allow: true},
		{name: "no app denied", params: mixed, model: "gpt-4o", allow: false},
		{name: "per app replaces allow: own exact", params: mixed, app: "app-a", model: "gpt-4o", allow: true},
		{name: "per app replaces allow: own prefix", params: mixed, app: "app-a", model: "o3-mini", allow: true},
		{name: "per app replaces allow: global entry not inherited", params: mixed, app: "app-a", model: "gpt-4o-mini", allow: false},
		{name: "per app empty list allows all", params: mixed, app: "app-open", model: "gpt-5", allow: true},
		{name: "per app star allows all", params: mixed, app: "app-star", model: "gpt-5", allow: true},
		{name: "missing model denied when restricted", params: mixed, app: "app-z", model: "", allow: false},
		{name: "missing model allowed when unrestricted", params: nil, app: "app-z", model: "", allow: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ch := buildChain(t, tt.params)
			// GET /v1/models filters with AllowsModel: it must decide as
			// the request phase does.
			f, ok := ch.Entries()[0].Policy.(policies.ModelFilter)
			if !ok {
				t.Fatal("model-access does not implement policies.ModelFilter")
			}
			if got := f.AllowsModel(newCall(tt.app, ""), tt.model); got != tt.allow {
				t.Fatalf("AllowsModel = %v, request phase allow = %v", got, tt.allow)
			}
			gerr := ch.Start(newCall(tt.app, tt.model)).Request()
			if tt.allow {
				if gerr != nil {
					t.Fatalf("denied: %v", gerr)
				}
				return
			}
			if gerr == nil {
				t.Fatal("admitted, want 403")
			}
			if gerr.Status != http.StatusForbidden || gerr.Type != gwerror.TypePermission ||
				gerr.Code != gwerror.CodeModelNotAllowed || gerr.Param != "model" || gerr.Policy != modelaccess.Name {
				t.Fatalf("got %+v", gerr)
			}
			if tt.model != "" && !strings.Contains(gerr.Message, tt.model) {
				t.Fatalf("message %q does not name the model", gerr.Message)
			}
		})
	}
}

// TestModelFromParsedBody: the model the parsed body names is the served
// model (the gateway sets it from the body, as policytest.NewCall does).
func TestModelFromParsedBody(t *testing.T) {
	ch := buildChain(t, map[string]any{"allow": []any{"gpt-4o"}})
	call := policytest.NewCall(policytest.Req{LLM: &llmapi.Request{Model: "gpt-4o"}})
	if gerr := ch.Start(call).Request(); gerr != nil {
		t.Fatalf("denied: %v", gerr)
	}
}

func TestAuthContextApplication(t *testing.T) {
	ch := buildChain(t, map[string]any{"perApplication": map[string]any{"app-a": []any{"m1"}}})
	call := newCall("", "m2")
	call.Shared.Auth.ApplicationID = "app-a"
	if gerr := ch.Start(call).Request(); gerr == nil {
		t.Fatal("admitted m2 for app-a (application id from AuthContext ignored)")
	}
}

func TestInvalidPatterns(t *testing.T) {
	reg := policies.NewRegistry(modelaccess.Definition())
	tests := []struct {
		name   string
		params map[string]any
		want   string
	}{
		{name: "star in middle", params: map[string]any{"allow": []any{"gpt-*-mini"}}, want: "allow.0"},
		{name: "leading star", params: map[string]any{"allow": []any{"ok", "*mini"}}, want: "allow.1"},
		{name: "empty pattern", params: map[string]any{"allow": []any{""}}, want: "allow.0"},
		{name: "per app", params: map[string]any{"perApplication": map[string]any{"app-a": []any{"x", "y", "**"}}}, want: "perApplication.app-a.2"},
		{name: "not a list", params: map[string]any{"allow": "gpt-4o"}, want: "allow"},
		{name: "unknown key", params: map[string]any{"models": []any{"x"}}, want: "models"},
		{name: "default is not an application", params: map[string]any{"perApplication": map[string]any{"default": []any{"x"}}},
			want: "perApplication.default: \"default\" is not an application"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := reg.BuildChain(policies.RouteInfo{RouteName: "r"},
				[]policies.EntrySpec{{Name: modelaccess.Name, Params: tt.params}}, nil, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want mention of %q", err, tt.want)
			}
		})
	}
}

func TestApplicationRefs(t *testing.T) {
	p := &modelaccess.Params{PerApplication: map[string][]string{"app-b": {"x"}, "app-a": nil}}
	refs := p.ApplicationRefs()
	if len(refs) != 2 || refs[0].ID != "app-a" || strings.Join(refs[0].Path, ".") != "perApplication.app-a" ||
		refs[1].ID != "app-b" || strings.Join(refs[1].Path, ".") != "perApplication.app-b" {
		t.Fatalf("refs = %+v", refs)
	}
	if refs := (&modelaccess.Params{Allow: []string{"x"}}).ApplicationRefs(); len(refs) != 0 {
		t.Fatalf("refs without perApplication = %+v", refs)
	}
}
