package apikeyauth_test

import (
	"crypto/sha256"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"sluice/gwerror"
	"sluice/policies"
	"sluice/policies/apikeyauth"
	"sluice/policies/policytest"
	"sluice/sharedctx"
)

const goodKey = "sk-sluice-good"

func testIndex() policytest.Keys {
	return policytest.Keys{
		sha256.Sum256([]byte(goodKey)):     {ApplicationID: "app-a", ApplicationName: "Team A", KeyID: "k1"},
		sha256.Sum256([]byte("other-key")): {ApplicationID: "app-b", KeyID: "k2"},
	}
}

func buildChain(t testing.TB, params map[string]any) *policies.Chain {
	t.Helper()
	return policytest.Chain(t, []policies.Definition{apikeyauth.Definition()}, &policies.Services{Keys: testIndex()},
		policies.EntrySpec{Name: apikeyauth.Name, Version: apikeyauth.Version, Params: params})
}

func newCall(h http.Header, q url.Values) *policies.Call {
	return policytest.NewCall(policytest.Req{Header: h, Query: q})
}

func TestAPIKeyAuth(t *testing.T) {
	tests := []struct {
		name    string
		params  map[string]any
		header  http.Header
		query   url.Values
		wantApp string // "" means a 401 is expected
		wantMsg string // substring of the 401 message
		// gone lists headers and query params that must be absent afterwards.
		goneHeaders []string
		goneQuery   []string
		keptHeaders []string
	}{
		{name: "bearer", header: http.Header{"Authorization": {"Bearer " + goodKey}}, wantApp: "app-a",
			goneHeaders: []string{"Authorization"}},
		{name: "bearer lower case prefix", header: http.Header{"Authorization": {"bearer " + goodKey}}, wantApp: "app-a"},
		{name: "bearer upper case prefix", header: http.Header{"Authorization": {"BEARER " + goodKey}}, wantApp: "app-a"},
		{name: "no prefix still accepted", header: http.Header{"Authorization": {goodKey}}, wantApp: "app-a"},
		{name: "x-api-key", header: http.Header{"X-Api-Key": {"other-key"}, "Content-Type": {"application/json"}}, wantApp: "app-b",
			goneHeaders: []string{"X-Api-Key"}, keptHeaders: []string{"Content-Type"}},
		{name: "x-api-key value is not prefix-stripped", header: http.Header{"X-Api-Key": {"Bearer " + goodKey}},
			wantMsg: "invalid API key"},
		{name: "configured header wins over alternate", header: http.Header{"Authorization": {"Bearer bad"}, "X-Api-Key": {goodKey}},
			wantMsg: "invalid API key", goneHeaders: []string{"Authorization", "X-Api-Key"}},
		{name: "both headers stripped on success", header: http.Header{"Authorization": {"Bearer " + goodKey}, "X-Api-Key": {"whatever"}},
			wantApp: "app-a", goneHeaders: []string{"Authorization", "X-Api-Key"}},
		{name: "custom header and empty prefix", params: map[string]any{"header": "x-sluice-key", "prefix": ""},
			header: http.Header{"X-Sluice-Key": {goodKey}}, wantApp: "app-a", goneHeaders: []string{"X-Sluice-Key"}},
		{name: "custom prefix", params: map[string]any{"prefix": "Key "},
			header: http.Header{"Authorization": {"key " + goodKey}}, wantApp: "app-a"},
		{name: "alternate headers disabled", params: map[string]any{"alternateHeaders": []any{}},
			header: http.Header{"X-Api-Key": {goodKey}}, wantMsg: "missing API key"},
		{name: "query param", params: map[string]any{"queryParam": "key"},
			query: url.Values{"key": {goodKey}, "other": {"1"}}, wantApp: "app-a", goneQuery: []string{"key"}},
		{name: "query param ignored without config", query: url.Values{"key": {goodKey}}, wantMsg: "missing API key"},
		{name: "header preferred over query", params: map[string]any{"queryParam": "key"},
			header: http.Header{"Authorization": {"Bearer other-key"}}, query: url.Values{"key": {goodKey}},
			wantApp: "app-b", goneQuery: []string{"key"}},
		{name: "missing", header: http.Header{"Content-Type": {"application/json"}}, wantMsg: "missing API key"},
		{name: "empty bearer", header: http.Header{"Authorization": {"Bearer "}}, wantMsg: "missing API key"},
		{name: "bad key", header: http.Header{"Authorization": {"Bearer sk-sluice-nope"}}, wantMsg: "invalid API key"},
		{name: "repeated header refused, the valid key first", header: http.Header{"Authorization": {"Bearer " + goodKey, "Bearer other-key"}},
			wantMsg: "ambiguous credentials: the Authorization header is sent more than once", goneHeaders: []string{"Authorization"}},
		{name: "repeated header refused, same key twice", header: http.Header{"Authorization": {"Bearer " + goodKey, "Bearer " + goodKey}},
			wantMsg: "ambiguous credentials"},
		{name: "repeated alternate header refused", header: http.Header{"X-Api-Key": {goodKey, "other-key"}},
			wantMsg: "ambiguous credentials: the X-Api-Key header", goneHeaders: []string{"X-Api-Key"}},
		{name: "repeated query parameter refused", params: map[string]any{"queryParam": "key"},
			query: url.Values{"key": {goodKey, "other-key"}}, wantMsg: "ambiguous credentials: the key query parameter", goneQuery: []string{"key"}},
		{name: "key with surrounding spaces", header: http.Header{"Authorization": {"  Bearer   " + goodKey + " "}}, wantApp: "app-a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ch := buildChain(t, tt.params)
			call := newCall(tt.header, tt.query)
			gerr := ch.Start(call).Request()
			if tt.wantApp == "" {
				if gerr == nil {
					t.Fatal("want 401, request was admitted")
				}
				if gerr.Status != http.StatusUnauthorized || gerr.Type != gwerror.TypeAuthentication || gerr.Code != gwerror.CodeInvalidAPIKey {
					t.Fatalf("got %d %s %s, want 401 authentication_error invalid_api_key", gerr.Status, gerr.Type, gerr.Code)
				}
				if !strings.Contains(gerr.Message, tt.wantMsg) {
					t.Fatalf("message %q does not contain %q", gerr.Message, tt.wantMsg)
				}
				if strings.Contains(gerr.Message, "sk-sluice") || strings.Contains(gerr.Message, "bad") {
					t.Fatalf("message echoes the key: %q", gerr.Message)
				}
				if gerr.Policy != apikeyauth.Name {
					t.Fatalf("policy = %q", gerr.Policy)
				}
				if call.Shared.Auth.Authenticated || call.Shared.ApplicationID() != "" {
					t.Fatalf("auth state written on failure: %+v %v", call.Shared.Auth, call.Shared.Metadata)
				}
			} else {
				if gerr != nil {
					t.Fatalf("rejected: %v", gerr)
				}
				sh := call.Shared
				if got := sh.Metadata[sharedctx.KeyApplicationID]; got != tt.wantApp {
					t.Fatalf("metadata app = %v, want %s", got, tt.wantApp)
				}
				if !sh.Auth.Authenticated || sh.Auth.ApplicationID != tt.wantApp || sh.Auth.Method != "api-key" || sh.Auth.CredentialID == "" {
					t.Fatalf("auth = %+v", sh.Auth)
				}
				if sh.Analytics["application_id"] != tt.wantApp {
					t.Fatalf("analytics = %v", sh.Analytics)
				}
			}
			for _, h := range tt.goneHeaders {
				if _, ok := call.Request.Header[h]; ok {
					t.Errorf("header %s still present upstream", h)
				}
			}
			for _, h := range tt.keptHeaders {
				if _, ok := call.Request.Header[h]; !ok {
					t.Errorf("header %s was removed", h)
				}
			}
			for _, q := range tt.goneQuery {
				if call.Request.Query.Has(q) {
					t.Errorf("query param %s still present upstream", q)
				}
			}
		})
	}
}

func TestQueryParamOtherParamsKept(t *testing.T) {
	ch := buildChain(t, map[string]any{"queryParam": "api_key"})
	call := newCall(nil, url.Values{"api_key": {goodKey}, "api-version": {"2024"}})
	if gerr := ch.Start(call).Request(); gerr != nil {
		t.Fatal(gerr)
	}
	if call.Request.Query.Get("api-version") != "2024" || call.Request.Query.Has("api_key") {
		t.Fatalf("query = %v", call.Request.Query)
	}
}

func TestCredentialIDIsKeyID(t *testing.T) {
	ch := buildChain(t, nil)
	call := newCall(http.Header{"Authorization": {"Bearer other-key"}}, nil)
	if gerr := ch.Start(call).Request(); gerr != nil {
		t.Fatal(gerr)
	}
	if call.Shared.Auth.CredentialID != "k2" {
		t.Fatalf("credential id = %q, want k2", call.Shared.Auth.CredentialID)
	}
}

func TestBuildErrors(t *testing.T) {
	reg := policies.NewRegistry(apikeyauth.Definition())
	spec := func(params map[string]any) []policies.EntrySpec {
		return []policies.EntrySpec{{Name: apikeyauth.Name, Params: params}}
	}
	tests := []struct {
		name   string
		params map[string]any
		svc    *policies.Services
		want   string
	}{
		{name: "nil key index", svc: &policies.Services{}, want: "Services.Keys"},
		{name: "unknown param", params: map[string]any{"headr": "x"}, svc: &policies.Services{Keys: testIndex()}, want: "headr"},
		{name: "empty header", params: map[string]any{"header": ""}, svc: &policies.Services{Keys: testIndex()}, want: "header"},
		{name: "bad header name", params: map[string]any{"header": "x key"}, svc: &policies.Services{Keys: testIndex()}, want: "header"},
		{name: "bad alternate", params: map[string]any{"alternateHeaders": []any{"ok", "a:b"}}, svc: &policies.Services{Keys: testIndex()}, want: "alternateHeaders.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := reg.BuildChain(policies.RouteInfo{RouteName: "r"}, spec(tt.params), tt.svc, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want mention of %q", err, tt.want)
			}
		})
	}
}

func TestDeclaresApplicationIDWrite(t *testing.T) {
	d := apikeyauth.Definition()
	if len(d.Writes) != 1 || d.Writes[0].Key != sharedctx.KeyApplicationID || d.Writes[0].Phase != policies.PhaseRequest {
		t.Fatalf("writes = %+v", d.Writes)
	}
}

// TestIdentify: Identify writes the same identity as the request phase but
// leaves the request's credentials in place (it has no side effects beyond the
// identity), and fails with the same 401 for a bad or missing key.
func TestIdentify(t *testing.T) {
	ch := buildChain(t, map[string]any{"queryParam": "api_key"})
	id, ok := ch.Entries()[0].Policy.(policies.Identifier)
	if !ok {
		t.Fatal("api-key-auth does not implement policies.Identifier")
	}
	tests := []struct {
		name    string
		header  http.Header
		query   url.Values
		wantApp string
		wantMsg string
	}{
		{name: "bearer", header: http.Header{"Authorization": {"Bearer " + goodKey}}, wantApp: "app-a"},
		{name: "x-api-key", header: http.Header{"X-Api-Key": {"other-key"}}, wantApp: "app-b"},
		{name: "query", query: url.Values{"api_key": {goodKey}}, wantApp: "app-a"},
		{name: "invalid", header: http.Header{"Authorization": {"Bearer nope"}}, wantMsg: "invalid API key"},
		{name: "missing", wantMsg: "missing API key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			call := newCall(tt.header.Clone(), tt.query)
			before := call.Request.Header.Clone()
			gerr := id.Identify(call)
			if tt.wantMsg != "" {
				if gerr == nil || gerr.Status != http.StatusUnauthorized || gerr.Code != gwerror.CodeInvalidAPIKey || !strings.Contains(gerr.Message, tt.wantMsg) {
					t.Fatalf("err = %v, want 401 %q", gerr, tt.wantMsg)
				}
				if call.Shared.ApplicationID() != "" || call.Shared.Auth.Authenticated {
					t.Fatalf("identity written on failure: %+v", call.Shared.Auth)
				}
				return
			}
			if gerr != nil {
				t.Fatal(gerr)
			}
			sh := call.Shared
			if sh.Metadata[sharedctx.KeyApplicationID] != tt.wantApp || !sh.Auth.Authenticated || sh.Auth.ApplicationID != tt.wantApp || sh.Auth.Method != apikeyauth.AuthMethod {
				t.Fatalf("identity = %v %+v", sh.Metadata, sh.Auth)
			}
			if len(call.Request.Header) != len(before) || (tt.query != nil && !call.Request.Query.Has("api_key")) {
				t.Fatalf("Identify edited the request: header %v query %v", call.Request.Header, call.Request.Query)
			}
			for k := range before {
				if call.Request.Header.Get(k) != before.Get(k) {
					t.Fatalf("Identify changed header %s", k)
				}
			}
		})
	}
}

// TestRequestPhaseAfterIdentify: when the gateway already identified the
// caller (Call.Identified), the request phase does not look the key up again
// (a counting index sees one lookup) but still strips every credential.
func TestRequestPhaseAfterIdentify(t *testing.T) {
	idx := &countingIndex{KeyIndex: testIndex()}
	reg := policies.NewRegistry(apikeyauth.Definition())
	ch, err := reg.BuildChain(policies.RouteInfo{RouteName: "r1"},
		[]policies.EntrySpec{{Name: apikeyauth.Name, Version: apikeyauth.Version, Params: map[string]any{"queryParam": "api_key"}}},
		&policies.Services{Keys: idx}, nil)
	if err != nil {
		t.Fatal(err)
	}
	call := newCall(http.Header{"Authorization": {"Bearer " + goodKey}, "X-Api-Key": {"other-key"}}, url.Values{"api_key": {goodKey}})
	if gerr := ch.Entries()[0].Policy.(policies.Identifier).Identify(call); gerr != nil {
		t.Fatal(gerr)
	}
	call.Identified = true
	run := ch.Start(call)
	if gerr := run.Request(); gerr != nil {
		t.Fatal(gerr)
	}
	if idx.n != 1 {
		t.Fatalf("%d key lookups for one request, want 1", idx.n)
	}
	if call.Shared.ApplicationID() != "app-a" {
		t.Fatalf("application %q", call.Shared.ApplicationID())
	}
	if len(call.Request.Header) != 0 || call.Request.Query.Has("api_key") {
		t.Fatalf("credentials not stripped: header %v query %v", call.Request.Header, call.Request.Query)
	}
}

type countingIndex struct {
	policies.KeyIndex
	n int
}

func (c *countingIndex) Lookup(sum [32]byte) (policies.Credential, bool) {
	c.n++
	return c.KeyIndex.Lookup(sum)
}
